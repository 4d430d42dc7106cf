//! The eviction manager: protects the node when memory, disk, inodes or PIDs run low, and
//! enforces local ephemeral-storage limits, the kubelet's way (pkg/kubelet/eviction).
//!
//! Every `evictionMonitoringPeriod` (10 s, as the kubelet's housekeeping), and at once when the
//! memory threshold notifier fires:
//! 1. measure the node's signals ([`observe`]) and each active pod's usage;
//! 2. local storage limits: a pod whose disk emptyDir exceeds its `sizeLimit`, whose container
//!    exceeds its `ephemeral-storage` limit, or whose total exceeds the sum of its containers'
//!    limits is evicted (grace 0);
//! 3. thresholds ([`threshold`]): which are met (soft ones past their grace period), and the
//!    node conditions MemoryPressure / DiskPressure / PIDPressure (held for
//!    `evictionPressureTransitionPeriod` after the signal clears), published to the status store;
//! 4. for disk signals, reclaim node-level resources first ([`gc`]: dead containers and
//!    sandboxes, then unused images); if that is enough, stop;
//! 5. rank the active pods ([`rank`]) and evict the first one (at most one per pass). Hard
//!    thresholds kill with a 1 s grace period, soft ones with
//!    min(terminationGracePeriodSeconds, evictionMaxPodGracePeriod).
//!
//! Unlike the kubelet, static pods are evictable (all pods here are static), except those with
//! priority >= 2000000000. An evicted pod is Failed/Evicted until the condition that evicted it
//! has cleared (the transition period included), then the sync loop re-admits it; local-storage
//! evictions are re-admitted after one transition period. A changed manifest is a new pod and
//! goes through admission at once.

pub(crate) mod gc;
pub(crate) mod notifier;
pub mod observe;
pub(crate) mod rank;
pub(crate) mod threshold;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::api::Pod;
use crate::api::helpers::NodeCondition;
use crate::api::quantity::parse_quantity;
use crate::cri::Runtime;
use crate::status::StatusStore;
use threshold::{Observations, PressureState, RawThresholds, Resource, Signal, Threshold};

/// The eviction and GC settings (KubeletConfiguration names in the docs of each field).
#[derive(Debug, Clone, PartialEq)]
pub struct EvictionConfig {
    /// evictionHard / evictionSoft / evictionSoftGracePeriod / evictionMinimumReclaim, as given.
    pub raw: RawThresholds,
    /// The validated thresholds built from `raw`.
    pub thresholds: Vec<Threshold>,
    /// evictionMaxPodGracePeriod (seconds; 0 = the pod's own grace period).
    pub max_pod_grace_period: i64,
    /// evictionPressureTransitionPeriod (5m).
    pub pressure_transition_period: Duration,
    /// How often the manager runs (10 s; nanolet's `evictionMonitoringPeriod`).
    pub monitoring_period: Duration,
    /// systemReserved / kubeReserved as given (cpu, memory, ephemeral-storage, pid).
    pub system_reserved: BTreeMap<String, String>,
    pub kube_reserved: BTreeMap<String, String>,
    /// systemReserved + kubeReserved memory, bytes.
    pub reserved_memory: i64,
    /// systemReserved + kubeReserved cpu, millicores.
    pub reserved_cpu_millis: i64,
    pub image_gc: gc::ImageGcPolicy,
}

impl Default for EvictionConfig {
    fn default() -> Self {
        let raw = RawThresholds {
            hard: threshold::default_hard(),
            ..Default::default()
        };
        let thresholds = threshold::build(&raw).unwrap_or_default();
        EvictionConfig {
            raw,
            thresholds,
            max_pod_grace_period: 0,
            pressure_transition_period: Duration::from_secs(300),
            monitoring_period: Duration::from_secs(10),
            system_reserved: BTreeMap::new(),
            kube_reserved: BTreeMap::new(),
            reserved_memory: 0,
            reserved_cpu_millis: 0,
            image_gc: gc::ImageGcPolicy::default(),
        }
    }
}

impl EvictionConfig {
    /// Node allocatable (cpu millicores, memory bytes): capacity - systemReserved -
    /// kubeReserved - the hard memory.available threshold.
    pub fn allocatable(&self, cap: crate::node::Capacity) -> (i64, i64) {
        (
            (cap.cpu_millis - self.reserved_cpu_millis).max(0),
            threshold::allocatable(
                cap.memory_bytes,
                self.reserved_memory,
                &self.thresholds,
                Signal::MemoryAvailable,
            ),
        )
    }
}

/// What the manager asks the sync loop to do to a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    pub uid: String,
    pub message: String,
    pub grace_seconds: i64,
    /// The condition whose clearing re-admits the pod; `None` for local-storage evictions.
    pub condition: Option<NodeCondition>,
}

/// Formats bytes the way resource.Quantity prints BinarySI values: the largest binary suffix
/// that divides exactly (`100Mi`, `1536Ki`), else plain bytes.
pub fn format_bytes(v: i64) -> String {
    const SUFFIXES: [(&str, u32); 5] = [("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)];
    if v != 0 {
        for (s, shift) in SUFFIXES {
            let unit = 1i64 << shift;
            if v % unit == 0 {
                return format!("{}{s}", v / unit);
            }
        }
    }
    v.to_string()
}

fn format_amount(resource: Resource, v: i64) -> String {
    match resource {
        Resource::Memory | Resource::EphemeralStorage => format_bytes(v),
        Resource::Inodes | Resource::Pids => v.to_string(),
    }
}

/// A container's limit or request for `name` in bytes (0 when unset).
fn container_quantity(c: &crate::api::Container, limits: bool, name: &str) -> i64 {
    let m = if limits {
        &c.resources.limits
    } else {
        &c.resources.requests
    };
    m.get(name)
        .and_then(|v| parse_quantity(v).ok())
        .map(|q| q.value())
        .unwrap_or(0)
}

/// A pod's request of `resource` (memory, ephemeral-storage; requests default to limits).
pub fn pod_request(pod: &Pod, resource: Resource) -> i64 {
    match resource {
        Resource::Memory => crate::api::helpers::pod_requests(pod).1,
        Resource::EphemeralStorage => pod
            .spec
            .containers
            .iter()
            .map(|c| {
                let r = container_quantity(c, false, "ephemeral-storage");
                if r > 0 {
                    r
                } else {
                    container_quantity(c, true, "ephemeral-storage")
                }
            })
            .sum(),
        Resource::Inodes | Resource::Pids => 0,
    }
}

/// The local-storage limit a pod violates, as the kubelet words it
/// (pkg/kubelet/eviction/helpers.go), or `None`.
pub fn local_storage_violation(pod: &Pod, usage: &observe::PodUsage) -> Option<String> {
    // emptyDir sizeLimit (disk medium only; memory-medium usage is memory).
    let volumes = match pod.spec.extra.get("volumes") {
        Some(serde_json::Value::Array(v)) => v.as_slice(),
        _ => &[],
    };
    for v in volumes {
        let Some(ed) = v.get("emptyDir") else {
            continue;
        };
        if ed.get("medium").and_then(|m| m.as_str()) == Some("Memory") {
            continue;
        }
        let Some(limit) = ed.get("sizeLimit").filter(|q| !q.is_null()) else {
            continue;
        };
        let Ok(limit) = parse_quantity(limit) else {
            continue;
        };
        let name = v.get("name").and_then(|n| n.as_str()).unwrap_or_default();
        let used = usage.empty_dirs.get(name).copied().unwrap_or(0);
        if limit.value() > 0 && used > limit.value() {
            return Some(format!(
                "Usage of EmptyDir volume \"{name}\" exceeds the limit \"{}\". ",
                format_bytes(limit.value())
            ));
        }
    }
    // Container ephemeral-storage limits (writable layer + logs).
    let mut total_limit = 0;
    let mut all_limited = !pod.spec.containers.is_empty();
    for c in &pod.spec.containers {
        let limit = container_quantity(c, true, "ephemeral-storage");
        if limit <= 0 {
            all_limited = false;
            continue;
        }
        total_limit += limit;
        if usage.containers.get(&c.name).copied().unwrap_or(0) > limit {
            return Some(format!(
                "Container {} exceeded its local ephemeral storage limit \"{}\". ",
                c.name,
                format_bytes(limit)
            ));
        }
    }
    // The pod as a whole (containers + emptyDirs) against the sum of its containers' limits.
    if all_limited && usage.disk > total_limit {
        return Some(format!(
            "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
            format_bytes(total_limit)
        ));
    }
    None
}

/// What a signal ranks pods by (the kubelet's `buildSignalToRankFunc`). Disk and inode
/// signals: with an image filesystem of its own (`dedicated_imagefs`), nodefs counts the pod's
/// logs and local volumes and imagefs its containers' writable layers (`fsStatsRoot`); on one
/// filesystem both count everything.
pub fn ranking_usage(signal: Signal, u: &observe::PodUsage, dedicated_imagefs: bool) -> i64 {
    match (signal, dedicated_imagefs) {
        (Signal::MemoryAvailable, _) => u.memory,
        (Signal::PidAvailable, _) => u.pids,
        (Signal::NodeFsAvailable, true) => u.disk - u.rootfs,
        (Signal::NodeFsInodesFree, true) => u.inodes - u.rootfs_inodes,
        (Signal::ImageFsAvailable, true) => u.rootfs,
        (Signal::ImageFsInodesFree, true) => u.rootfs_inodes,
        (Signal::NodeFsAvailable | Signal::ImageFsAvailable, false) => u.disk,
        (Signal::NodeFsInodesFree | Signal::ImageFsInodesFree, false) => u.inodes,
    }
}

/// The kubelet's eviction message for a threshold: the node figure and, for memory and
/// ephemeral storage, the containers' usage against their requests.
pub fn eviction_message(
    t: &Threshold,
    obs: &Observations,
    pod: &Pod,
    usage: &observe::PodUsage,
) -> String {
    let resource = t.signal.resource();
    let o = obs
        .get(&t.signal)
        .copied()
        .unwrap_or(threshold::Observation {
            available: 0,
            capacity: 0,
        });
    let mut msg = format!(
        "The node was low on resource: {}. Threshold quantity: {}, available: {}. ",
        resource.as_str(),
        format_amount(resource, t.value.resolve(o.capacity)),
        format_amount(resource, o.available),
    );
    if matches!(resource, Resource::Memory | Resource::EphemeralStorage) {
        let key = resource.as_str();
        for c in &pod.spec.containers {
            let used = match resource {
                Resource::Memory => usage.container_memory.get(&c.name).copied(),
                _ => usage.containers.get(&c.name).copied(),
            }
            .unwrap_or(0);
            let request = container_quantity(c, false, key);
            if used > request {
                msg.push_str(&format!(
                    "Container {} was using {}, request is {}, has larger consumption of {}. ",
                    c.name,
                    format_bytes(used),
                    format_bytes(request),
                    resource.as_str()
                ));
            }
        }
    }
    msg
}

/// Whether `pod` has a local-storage limit the manager enforces: a disk-backed emptyDir with a
/// `sizeLimit`, or a container with an `ephemeral-storage` limit ([`local_storage_violation`]
/// finds nothing to report for any other pod).
pub fn has_local_storage_limits(pod: &Pod) -> bool {
    let sized_empty_dir = match pod.spec.extra.get("volumes") {
        Some(serde_json::Value::Array(v)) => v.iter().any(|v| {
            v.get("emptyDir").is_some_and(|ed| {
                ed.get("medium").and_then(|m| m.as_str()) != Some("Memory")
                    && ed.get("sizeLimit").is_some_and(|q| !q.is_null())
            })
        }),
        _ => false,
    };
    sized_empty_dir
        || pod
            .spec
            .containers
            .iter()
            .any(|c| container_quantity(c, true, "ephemeral-storage") > 0)
}

/// Admitted and not terminal: the pod holds resources.
fn is_active(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .is_some_and(|s| s.phase == "Running" || s.phase == "Pending")
}

/// Sleeps until `deadline` or until the memory threshold notifier fires; `false` when `stop`
/// fired or was dropped. It blocks without waking in between: on the notifier's eventfd in
/// poll(2) when one is armed (cgroup v1 with a memory.available threshold; `stop` is then seen
/// when that wait ends, within one monitoring period, and no pass runs after it), else on
/// `stop` itself.
fn wait_period(
    stop: &Receiver<()>,
    notifier: Option<&notifier::MemoryNotifier>,
    deadline: Instant,
) -> bool {
    let stopped = || !matches!(stop.try_recv(), Err(TryRecvError::Empty));
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return !stopped();
        }
        match notifier.and_then(|n| n.wait(left)) {
            Some(fired) => {
                if stopped() {
                    return false;
                }
                if fired {
                    info!("memory threshold notifier fired; checking eviction thresholds now");
                    return true;
                }
            }
            None => {
                return matches!(stop.recv_timeout(left), Err(RecvTimeoutError::Timeout));
            }
        }
    }
}

/// The hard eviction grace period (the kubelet's immediateEvictionGracePeriodSeconds).
const IMMEDIATE_GRACE_SECONDS: i64 = 1;

/// Where to find pods' files.
#[derive(Debug, Clone)]
pub struct Paths {
    pub root_dir: PathBuf,
    pub pod_logs_dir: PathBuf,
}

/// What the manager reports (`kubelet::wiring` connects it to the sync loop).
#[derive(Debug)]
pub enum ManagerEvent {
    /// Evict this pod.
    Evict(Eviction),
    /// The node pressure conditions changed (see `StatusStore::node_conditions`).
    NodeConditionsChanged,
}

/// Where the manager sends its events.
pub type EventSink = Box<dyn Fn(ManagerEvent) + Send>;

pub struct Manager {
    cfg: EvictionConfig,
    runtime: Arc<dyn Runtime>,
    store: Arc<StatusStore>,
    events: EventSink,
    paths: Paths,
    memory: observe::MemorySource,
    state: PressureState,
    images: gc::ImageGc,
    /// Pinned image references besides CRI's own `pinned` (imported images, sandbox image).
    pinned: Box<dyn Fn() -> Option<BTreeSet<String>> + Send>,
    /// Pods already asked to go, with when (not asked again for a while).
    evicting: BTreeMap<String, Instant>,
    last_image_gc: Option<Instant>,
    conditions: Vec<NodeCondition>,
    /// The image filesystem's mountpoint (CRI ImageFsInfo) and when it was asked for: asked
    /// again every [`IMAGE_GC_PERIOD`], not every pass (only its statvfs figures move).
    imagefs: Option<(PathBuf, Instant)>,
    /// By pod UID: whether it has a local-storage limit ([`has_local_storage_limits`]). Limits
    /// and volumes of a UID never change (a changed static manifest is a new UID; the API
    /// server refuses such updates), so each pod is looked at once, not copied every pass.
    limited: BTreeMap<String, bool>,
}

/// The kubelet's podCleanupTimeout.
const POD_CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);

/// How often image GC runs when there is no disk pressure (the kubelet's ImageGCPeriod).
const IMAGE_GC_PERIOD: Duration = Duration::from_secs(300);

impl Manager {
    pub fn new(
        cfg: EvictionConfig,
        runtime: Arc<dyn Runtime>,
        store: Arc<StatusStore>,
        events: EventSink,
        paths: Paths,
        pinned: Box<dyn Fn() -> Option<BTreeSet<String>> + Send>,
    ) -> Manager {
        Manager {
            cfg,
            runtime,
            store,
            events,
            paths,
            memory: observe::MemorySource::detect(),
            state: PressureState::default(),
            images: gc::ImageGc::default(),
            pinned,
            evicting: BTreeMap::new(),
            last_image_gc: None,
            conditions: vec![],
            imagefs: None,
            limited: BTreeMap::new(),
        }
    }

    /// The thread body: a pass every monitoring period, or when `wake` fires (the memory
    /// threshold notifier), until `stop` fires or is dropped.
    pub fn run(mut self, stop: Receiver<()>) {
        let mut notifier = notifier::MemoryNotifier::new();
        loop {
            self.pass(Instant::now());
            if let Some(n) = notifier.as_mut() {
                n.arm(&self.cfg.thresholds, &self.memory);
            }
            let deadline = Instant::now() + self.cfg.monitoring_period;
            if !wait_period(&stop, notifier.as_ref(), deadline) {
                return;
            }
        }
    }

    /// Pods that hold resources: admitted, not terminal, not already being evicted.
    fn active_pods(&self) -> Vec<Pod> {
        self.store
            .pods()
            .into_iter()
            .filter(is_active)
            .filter(|p| !self.evicting.contains_key(&p.metadata.uid))
            .collect()
    }

    /// The active pods that have a local-storage limit (only those can violate one). Each
    /// UID's pod is copied from the store once to learn whether it has a limit; after that,
    /// only pods with a limit are.
    fn limited_active_pods(&mut self) -> Vec<Pod> {
        let uids = self.store.uids();
        self.limited
            .retain(|uid, _| uids.binary_search(uid).is_ok());
        let mut out = Vec::new();
        for uid in uids {
            if self.evicting.contains_key(&uid) || self.limited.get(&uid) == Some(&false) {
                continue;
            }
            let Some(pod) = self.store.get(&uid) else {
                continue;
            };
            let limited = *self
                .limited
                .entry(uid)
                .or_insert_with(|| has_local_storage_limits(&pod));
            if limited && is_active(&pod) {
                out.push(pod);
            }
        }
        out
    }

    /// The usage of `pods`: CRI ListContainerStats once, then a walk of each pod's log and
    /// emptyDir directories and its pids cgroup. No pods: no call, no walk.
    fn usage(&self, pods: &[&Pod]) -> BTreeMap<String, observe::PodUsage> {
        if pods.is_empty() {
            return BTreeMap::new();
        }
        let stats = self.runtime.list_container_stats().unwrap_or_default();
        let mut by_pod = observe::stats_by_pod(stats);
        pods.iter()
            .map(|p| {
                let uid = p.metadata.uid.clone();
                let u = observe::pod_usage(
                    &observe::PodPaths {
                        uid: &uid,
                        log_dir: self
                            .paths
                            .pod_logs_dir
                            .join(crate::api::helpers::pod_log_dir_name(p)),
                        pod_dir: self.paths.root_dir.join("pods").join(&uid),
                        pod: p,
                    },
                    &by_pod.remove(&uid).unwrap_or_default(),
                );
                (uid, u)
            })
            .collect()
    }

    /// After evicting, wait (up to the kubelet's podCleanupTimeout, 30 s) until the evicted
    /// pods are Failed with no container running, so that their memory and volumes are freed
    /// before the next pass measures again and picks another victim.
    fn wait_for_cleanup(&self, uids: &[String]) {
        let deadline = Instant::now() + POD_CLEANUP_TIMEOUT;
        while Instant::now() < deadline {
            let done = uids.iter().all(|uid| {
                self.store.get(uid).is_none_or(|p| {
                    p.status.as_ref().is_some_and(|s| {
                        s.phase == "Failed"
                            && s.container_statuses
                                .iter()
                                .chain(&s.init_container_statuses)
                                .all(|c| c.state.running.is_none())
                    })
                })
            });
            if done {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        warn!(pods = ?uids, "evicted pods not cleaned up within {POD_CLEANUP_TIMEOUT:?}");
    }

    fn evict(&mut self, pod: &Pod, message: String, grace: i64, condition: Option<NodeCondition>) {
        let full = format!("{}/{}", pod.metadata.namespace, pod.metadata.name);
        warn!(pod = %full, grace, "evicting pod: {message}");
        self.evicting
            .insert(pod.metadata.uid.clone(), Instant::now());
        (self.events)(ManagerEvent::Evict(Eviction {
            uid: pod.metadata.uid.clone(),
            message,
            grace_seconds: grace,
            condition,
        }));
        self.store.metrics().inc_evictions(&condition.map_or_else(
            || "ephemeral-storage".to_string(),
            |c| c.as_str().to_string(),
        ));
    }

    fn observe(&mut self) -> Observations {
        let now = Instant::now();
        let fresh = self
            .imagefs
            .as_ref()
            .is_some_and(|(_, at)| now.saturating_duration_since(*at) < IMAGE_GC_PERIOD);
        if !fresh {
            // Not answered (runtime down): nodefs stands in, and the next pass asks again.
            self.imagefs = observe::image_fs_mountpoint(self.runtime.as_ref()).map(|m| (m, now));
        }
        observe::observe_node(&observe::NodeProbe {
            memory: &self.memory,
            root_dir: &self.paths.root_dir,
            pod_logs_dir: &self.paths.pod_logs_dir,
            imagefs: self.imagefs.as_ref().map(|(m, _)| m.as_path()),
        })
    }

    /// Image GC toward the low threshold; returns bytes freed.
    fn image_gc(&mut self, obs: &Observations, force_bytes: i64, now: Instant) -> i64 {
        let Some(view) = gc::image_view(self.runtime.as_ref()) else {
            return 0;
        };
        self.images.detect(&view, now);
        let mut want = force_bytes;
        if let Some(o) = obs.get(&Signal::ImageFsAvailable) {
            want = want.max(gc::bytes_to_free(
                &self.cfg.image_gc,
                o.capacity,
                o.available,
            ));
        }
        if want <= 0 {
            return 0;
        }
        let Some(pinned) = (self.pinned)() else {
            return 0;
        };
        let plan = self
            .images
            .plan(&view, &pinned, &self.cfg.image_gc, want, now);
        gc::delete_images(self.runtime.as_ref(), &plan)
    }

    /// One pass of the manager.
    pub fn pass(&mut self, now: Instant) {
        // An evicted pod counts as "being evicted" until its status says Failed (then it is
        // not active anyway; once re-admitted it is a candidate again).
        let store = self.store.clone();
        self.evicting.retain(|uid, at| {
            now.saturating_duration_since(*at) < POD_CLEANUP_TIMEOUT * 2
                && store
                    .get(uid)
                    .and_then(|p| p.status)
                    .is_some_and(|s| s.phase != "Failed")
        });
        // Only pods with a local-storage limit can violate one: only they are read from the
        // store and measured every pass. Every active pod is when a threshold asks for a victim.
        let limited = self.limited_active_pods();
        let usage = self.usage(&limited.iter().collect::<Vec<_>>());
        self.store.metrics().inc_eviction_passes();

        // Local storage limits first; any eviction here ends the pass (as in the kubelet).
        let evicted_local = self.evict_local_storage_violators(&limited, &usage);

        let mut obs = self.observe();
        let result = self.state.pass(
            &self.cfg.thresholds,
            &obs,
            self.cfg.pressure_transition_period,
            now,
        );
        if result.conditions != self.conditions {
            self.set_conditions(&result.conditions);
        }
        let periodic_gc = self
            .last_image_gc
            .is_none_or(|t| now.saturating_duration_since(t) >= IMAGE_GC_PERIOD);
        if periodic_gc {
            self.last_image_gc = Some(now);
            self.image_gc(&obs, 0, now);
        }
        if !evicted_local.is_empty() {
            self.wait_for_cleanup(&evicted_local);
            return;
        }
        if result.actionable.is_empty() {
            return;
        }
        // Memory first, then the others in configuration order (the kubelet's eviction
        // priority puts memory first).
        let mut todo = result.actionable.clone();
        todo.sort_by_key(|t| t.signal != Signal::MemoryAvailable);
        let t = todo[0].clone();

        // Reclaim node-level resources for disk signals; stop if that was enough.
        if t.signal.condition() == NodeCondition::DiskPressure
            && self.reclaim_node_level(&t, &mut obs, now)
        {
            return;
        }
        let pods = self.active_pods();
        let usage = self.usage(&pods.iter().collect::<Vec<_>>());
        self.evict_one(&t, &pods, &usage, &obs);
    }

    /// Evicts every non-critical pod over a local storage limit; returns their uids.
    fn evict_local_storage_violators(
        &mut self,
        pods: &[Pod],
        usage: &BTreeMap<String, observe::PodUsage>,
    ) -> Vec<String> {
        let mut evicted_local = vec![];
        for p in pods {
            if crate::api::helpers::is_critical(p) {
                continue;
            }
            if let Some(msg) = usage
                .get(&p.metadata.uid)
                .and_then(|u| local_storage_violation(p, u))
            {
                self.evict(p, msg, 0, None);
                evicted_local.push(p.metadata.uid.clone());
            }
        }
        evicted_local
    }

    /// Logs and publishes a new set of true node conditions, and tells the sync loop.
    fn set_conditions(&mut self, conditions: &[NodeCondition]) {
        for c in conditions {
            if !self.conditions.contains(c) {
                warn!(condition = c.as_str(), "node condition is now true");
            }
        }
        for c in &self.conditions {
            if !conditions.contains(c) {
                info!(condition = c.as_str(), "node condition cleared");
            }
        }
        self.conditions = conditions.to_vec();
        self.store.set_node_conditions(&self.conditions);
        (self.events)(ManagerEvent::NodeConditionsChanged);
    }

    /// Removes dead containers and, when that helps, unused images for the disk threshold `t`;
    /// `true` when the pressure is gone after it (`obs` is observed again).
    fn reclaim_node_level(&mut self, t: &Threshold, obs: &mut Observations, now: Instant) -> bool {
        let keep: BTreeSet<String> = self
            .store
            .pods()
            .into_iter()
            .filter(|p| {
                p.status
                    .as_ref()
                    .is_none_or(|s| s.phase != "Failed" && s.phase != "Succeeded")
            })
            .map(|p| p.metadata.uid)
            .collect();
        let removed = gc::reclaim_containers(self.runtime.as_ref(), &keep);
        let o = obs.get(&t.signal).copied();
        let need = o.map_or(0, |o| {
            t.value.resolve(o.capacity) + t.min_reclaim.map_or(0, |r| r.resolve(o.capacity))
                - o.available
        });
        // Deleting images helps nodefs only when images live on the same filesystem.
        let images_help = match t.signal {
            Signal::ImageFsAvailable => true,
            Signal::NodeFsAvailable => {
                observe::images_share_nodefs(self.runtime.as_ref(), &self.paths.root_dir)
            }
            _ => false,
        };
        let freed = if images_help {
            self.image_gc(obs, need, now)
        } else {
            0
        };
        info!(signal = %t.signal, containers_removed = removed, image_bytes_freed = freed, "reclaimed node-level resources");
        *obs = self.observe();
        if threshold::met(std::slice::from_ref(t), obs, true).is_empty() {
            info!(signal = %t.signal, "node-level reclaim relieved the pressure; no pod evicted");
            return true;
        }
        false
    }

    /// Evicts the pod that ranks first for threshold `t`'s resource, if any can be evicted.
    fn evict_one(
        &mut self,
        t: &Threshold,
        pods: &[Pod],
        usage: &BTreeMap<String, observe::PodUsage>,
        obs: &Observations,
    ) {
        let resource = t.signal.resource();
        let dedicated_imagefs = matches!(t.signal.condition(), NodeCondition::DiskPressure)
            && !observe::images_share_nodefs(self.runtime.as_ref(), &self.paths.root_dir);
        let candidates: Vec<rank::Candidate> = pods
            .iter()
            .map(|p| {
                let u = usage.get(&p.metadata.uid).cloned().unwrap_or_default();
                rank::Candidate {
                    uid: p.metadata.uid.clone(),
                    priority: crate::api::helpers::priority(p),
                    usage: ranking_usage(t.signal, &u, dedicated_imagefs),
                    request: pod_request(p, resource),
                }
            })
            .collect();
        let Some(victim) = rank::victim(resource, candidates) else {
            warn!(signal = %t.signal, "eviction threshold met but no pod can be evicted (none active, or all critical)");
            return;
        };
        let Some(pod) = pods.iter().find(|p| p.metadata.uid == victim.uid) else {
            return;
        };
        let u = usage.get(&victim.uid).cloned().unwrap_or_default();
        let msg = eviction_message(t, obs, pod, &u);
        let grace = if t.is_hard() {
            IMMEDIATE_GRACE_SECONDS
        } else {
            let own = pod.spec.termination_grace_period_seconds.unwrap_or(30);
            if self.cfg.max_pod_grace_period > 0 {
                own.min(self.cfg.max_pod_grace_period)
            } else {
                own
            }
        };
        self.evict(pod, msg, grace, Some(t.signal.condition()));
        self.wait_for_cleanup(&[victim.uid]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bytes_print_like_binary_si_quantities() {
        assert_eq!(format_bytes(100 << 20), "100Mi");
        assert_eq!(format_bytes(1536 << 10), "1536Ki");
        assert_eq!(format_bytes(1 << 30), "1Gi");
        assert_eq!(format_bytes(1000), "1000");
        assert_eq!(format_bytes(0), "0");
    }

    fn pod_with(volumes: serde_json::Value, containers: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"containers": containers, "volumes": volumes}
        }))
        .unwrap()
    }

    /// LocalStorageCapacityIsolation: emptyDir sizeLimit, container limit, pod total, with the
    /// kubelet's messages; memory-medium emptyDirs never count as disk.
    #[test]
    fn local_storage_limits_are_enforced_with_the_kubelet_messages() {
        let pod = pod_with(
            json!([{"name": "scratch", "emptyDir": {"sizeLimit": "8Mi"}},
                   {"name": "ram", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}]),
            json!([{"name": "c", "image": "i"}]),
        );
        let mut u = observe::PodUsage::default();
        u.empty_dirs.insert("scratch".into(), (8 << 20) * 99 / 100);
        assert_eq!(local_storage_violation(&pod, &u), None);
        u.empty_dirs.insert("scratch".into(), 9 << 20);
        assert_eq!(
            local_storage_violation(&pod, &u).unwrap(),
            "Usage of EmptyDir volume \"scratch\" exceeds the limit \"8Mi\". "
        );

        let pod = pod_with(
            json!([]),
            json!([{"name": "a", "image": "i", "resources": {"limits": {"ephemeral-storage": "10Mi"}}},
                   {"name": "b", "image": "i", "resources": {"limits": {"ephemeral-storage": "10Mi"}}}]),
        );
        let mut u = observe::PodUsage::default();
        u.containers.insert("a".into(), 11 << 20);
        assert_eq!(
            local_storage_violation(&pod, &u).unwrap(),
            "Container a exceeded its local ephemeral storage limit \"10Mi\". "
        );
        u.containers.insert("a".into(), 9 << 20);
        u.disk = 21 << 20;
        assert_eq!(
            local_storage_violation(&pod, &u).unwrap(),
            "Pod ephemeral local storage usage exceeds the total limit of containers 20Mi. "
        );
        u.disk = 19 << 20;
        assert_eq!(local_storage_violation(&pod, &u), None);
    }

    /// buildSignalToRankFunc(withImageFs): with a dedicated imagefs, imagefs pressure ranks
    /// by the writable layers only and nodefs pressure by logs and local volumes only; on one
    /// filesystem by everything. A pod with a big emptyDir is not the imagefs victim.
    #[test]
    fn disk_signals_rank_by_the_filesystem_they_measure() {
        let u = observe::PodUsage {
            disk: 100,
            rootfs: 30,
            inodes: 50,
            rootfs_inodes: 5,
            memory: 7,
            pids: 9,
            ..Default::default()
        };
        let r = |s, d| ranking_usage(s, &u, d);
        assert_eq!(r(Signal::ImageFsAvailable, true), 30);
        assert_eq!(r(Signal::NodeFsAvailable, true), 70);
        assert_eq!(r(Signal::ImageFsInodesFree, true), 5);
        assert_eq!(r(Signal::NodeFsInodesFree, true), 45);
        assert_eq!(r(Signal::ImageFsAvailable, false), 100);
        assert_eq!(r(Signal::NodeFsInodesFree, false), 50);
        assert_eq!(r(Signal::MemoryAvailable, true), 7);
        assert_eq!(r(Signal::PidAvailable, false), 9);
    }

    #[test]
    fn eviction_message_names_signal_threshold_and_containers() {
        let t = threshold::build(&RawThresholds {
            hard: [("memory.available".to_string(), "100Mi".to_string())].into(),
            ..Default::default()
        })
        .unwrap()
        .remove(0);
        let obs: Observations = [(
            Signal::MemoryAvailable,
            threshold::Observation {
                available: 50 << 20,
                capacity: 1 << 30,
            },
        )]
        .into();
        let pod = pod_with(
            json!([]),
            json!([{"name": "hog", "image": "i", "resources": {"requests": {"memory": "10Mi"}}}]),
        );
        let mut u = observe::PodUsage::default();
        u.container_memory.insert("hog".into(), 300 << 20);
        assert_eq!(
            eviction_message(&t, &obs, &pod, &u),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
             Container hog was using 300Mi, request is 10Mi, has larger consumption of memory. "
        );
    }

    fn running_pod(uid: &str, containers: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": uid, "namespace": "default", "uid": uid},
            "spec": {"containers": containers},
            "status": {"phase": "Running"}
        }))
        .unwrap()
    }

    /// A manager over the fake runtime whose CRI calls are counted (`/metrics`' runtime
    /// operations), with no thresholds (as `--eviction-hard=memory.available<0%`).
    fn counted_manager(dir: &std::path::Path) -> (Manager, Arc<crate::cri::fake::FakeRuntime>) {
        let fake = Arc::new(crate::cri::fake::FakeRuntime::new());
        let store = Arc::new(StatusStore::new(Duration::from_secs(60)));
        let rt = Arc::new(crate::cri::instrumented::InstrumentedRuntime::new(
            fake.clone(),
            store.metrics().clone(),
        ));
        let cfg = EvictionConfig {
            raw: RawThresholds::default(),
            thresholds: vec![],
            ..Default::default()
        };
        let m = Manager::new(
            cfg,
            rt,
            store,
            Box::new(|_| {}),
            Paths {
                root_dir: dir.join("root"),
                pod_logs_dir: dir.join("logs"),
            },
            Box::new(|| Some(BTreeSet::new())),
        );
        (m, fake)
    }

    /// The kubelet's localStorageEviction only evicts pods over a limit they have (emptyDir
    /// sizeLimit, container ephemeral-storage limits; pkg/kubelet/eviction/eviction_manager.go):
    /// a pass with no such pod and no threshold met measures no pod usage (no CRI
    /// ListContainerStats, no walk of pod directories); a pod with a limit is measured.
    #[test]
    fn a_pass_measures_usage_only_for_pods_with_local_storage_limits() {
        let d = tempfile::tempdir().unwrap();
        let (mut m, _fake) = counted_manager(d.path());
        let plain = json!([{"name": "c", "image": "i"}]);
        m.store.set_pod(running_pod("a", plain.clone()));
        m.store.set_pod(running_pod("b", plain));
        m.pass(Instant::now());
        m.pass(Instant::now());
        let stats_calls = |m: &Manager| {
            m.store
                .metrics()
                .runtime_operations("list_container_stats")
                .0
        };
        assert_eq!(stats_calls(&m), 0, "no pod has a local-storage limit");
        assert_eq!(m.store.metrics().eviction_passes(), 2);
        assert_eq!(
            m.limited,
            [("a".to_string(), false), ("b".to_string(), false)].into(),
            "each pod looked at once"
        );

        m.store.set_pod(running_pod(
            "c",
            json!([{"name": "c", "image": "i", "resources": {"limits": {"ephemeral-storage": "1Gi"}}}]),
        ));
        m.pass(Instant::now());
        assert_eq!(stats_calls(&m), 1, "pod c has an ephemeral-storage limit");
    }

    /// LocalStorageCapacityIsolation still holds with usage measured only for limited pods:
    /// a disk emptyDir over its sizeLimit gets its pod evicted with the kubelet's message.
    #[test]
    fn a_pod_over_its_empty_dir_size_limit_is_still_evicted() {
        let d = tempfile::tempdir().unwrap();
        let (mut m, _fake) = counted_manager(d.path());
        let got = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (sink, store) = (got.clone(), m.store.clone());
        m.events = Box::new(move |e| {
            if let ManagerEvent::Evict(ev) = e {
                // The sync loop's part: the pod is killed and Failed (ends the cleanup wait).
                if let Some(mut p) = store.get(&ev.uid) {
                    if let Some(st) = p.status.as_mut() {
                        st.phase = "Failed".into();
                    }
                    store.set_pod(p);
                }
                sink.lock().unwrap().push(ev);
            }
        });
        let mut pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "big", "namespace": "default", "uid": "big"},
            "spec": {"containers": [{"name": "c", "image": "i"}],
                     "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}]},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        assert!(has_local_storage_limits(&pod));
        pod.metadata.uid = "big".into();
        m.store.set_pod(pod);
        m.store
            .set_pod(running_pod("small", json!([{"name": "c", "image": "i"}])));
        let ed = d
            .path()
            .join("root/pods/big/volumes/kubernetes.io~empty-dir/scratch");
        std::fs::create_dir_all(&ed).unwrap();
        std::fs::write(ed.join("f"), vec![1u8; 2 << 20]).unwrap();
        m.pass(Instant::now());
        let got = got.lock().unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].uid, "big");
        assert_eq!(
            got[0].message,
            "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". "
        );
    }

    /// Only pods with a limit of their own can violate one (the kubelet's
    /// podLocalEphemeralStorageUsage/emptyDir checks); memory-medium emptyDirs are memory.
    #[test]
    fn local_storage_limits_are_what_local_storage_violation_checks() {
        let plain = pod_with(json!([]), json!([{"name": "c", "image": "i"}]));
        assert!(!has_local_storage_limits(&plain));
        let ram = pod_with(
            json!([{"name": "r", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}]),
            json!([{"name": "c", "image": "i"}]),
        );
        assert!(!has_local_storage_limits(&ram));
        let no_size = pod_with(
            json!([{"name": "s", "emptyDir": {}}]),
            json!([{"name": "c", "image": "i"}]),
        );
        assert!(!has_local_storage_limits(&no_size));
        let sized = pod_with(
            json!([{"name": "s", "emptyDir": {"sizeLimit": "1Mi"}}]),
            json!([{"name": "c", "image": "i"}]),
        );
        assert!(has_local_storage_limits(&sized));
        let limited = pod_with(
            json!([]),
            json!([{"name": "c", "image": "i", "resources": {"limits": {"ephemeral-storage": "1Mi"}}}]),
        );
        assert!(has_local_storage_limits(&limited));
        // Every pod local_storage_violation can report on is one of those.
        let mut huge = observe::PodUsage {
            disk: i64::MAX,
            ..Default::default()
        };
        huge.containers.insert("c".into(), i64::MAX);
        huge.empty_dirs.insert("s".into(), i64::MAX);
        huge.empty_dirs.insert("r".into(), i64::MAX);
        for p in [&plain, &ram, &no_size] {
            assert_eq!(local_storage_violation(p, &huge), None);
        }
        for p in [&sized, &limited] {
            assert!(local_storage_violation(p, &huge).is_some());
        }
    }

    /// imagefs.available is the statvfs of the filesystem CRI ImageFsInfo names (the kubelet's
    /// summary provider); the mountpoint does not move, so it is asked for once per image GC
    /// period, not every 10 s pass.
    #[test]
    fn the_image_filesystem_is_asked_for_once_per_image_gc_period() {
        let d = tempfile::tempdir().unwrap();
        let (mut m, fake) = counted_manager(d.path());
        for _ in 0..3 {
            m.pass(Instant::now());
        }
        assert_eq!(fake.count_calls("image_fs_info"), 1);
        // Past the period it is asked again.
        if let Some((_, at)) = m.imagefs.as_mut() {
            *at -= IMAGE_GC_PERIOD;
        }
        m.pass(Instant::now());
        assert_eq!(fake.count_calls("image_fs_info"), 2);
    }

    /// Between passes the manager blocks (no periodic wake-up): without an armed notifier it
    /// waits on `stop` for the whole period and returns at once when `stop` fires.
    #[test]
    fn the_wait_between_passes_blocks_until_the_period_ends_or_stop() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t0 = Instant::now();
        assert!(wait_period(&rx, None, t0 + Duration::from_millis(300)));
        assert!(t0.elapsed() >= Duration::from_millis(300));
        tx.send(()).unwrap();
        let t0 = Instant::now();
        assert!(!wait_period(&rx, None, t0 + Duration::from_secs(30)));
        assert!(t0.elapsed() < Duration::from_secs(10));
        drop(tx);
        // A dropped sender stops too.
        assert!(!wait_period(
            &rx,
            None,
            Instant::now() + Duration::from_secs(30)
        ));
    }

    #[test]
    fn default_config_and_allocatable() {
        let c = EvictionConfig::default();
        assert_eq!(c.thresholds.len(), 4);
        let (cpu, mem) = c.allocatable(crate::node::Capacity {
            cpu_millis: 2000,
            memory_bytes: 1 << 30,
        });
        assert_eq!((cpu, mem), (2000, (1 << 30) - (100 << 20)));
    }
}
