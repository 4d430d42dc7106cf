//! One pod worker: the state of one pod UID, synced on a pool thread whenever something changes
//! (spec update, PLEG event, backoff expiry, periodic resync), and terminates it when its
//! manifest goes away. Mirrors the kubelet's podWorkers: sync -> terminating -> terminated.
//! A sync takes the pod's state from the pod cache (`kuberuntime::cache`, filled by the PLEG)
//! when it is newer than the worker's last sync, else observes the pod itself; decides with
//! `kuberuntime::actions::compute_pod_actions`, carries the actions out through the pod's
//! `kuberuntime::RuntimeManager`, observes once more if it acted, and publishes its status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use crate::api::helpers::is_sidecar;
use crate::api::{Container, Pod};
use crate::cri::{ContainerState, PodSandboxConfig, Runtime, RuntimeError};
use crate::kuberuntime::actions::{Now, PodActions, backoff_key, compute_pod_actions};
use crate::kuberuntime::cache::PodCache;
use crate::kuberuntime::container::find_spec;
use crate::kuberuntime::labels::ContainerType;
use crate::kuberuntime::sandbox::SandboxError;
use crate::kuberuntime::state::{PodRuntimeState, observe_pod};
use crate::kuberuntime::{RuntimeManager, RuntimeManagerState, RuntimeSettings};
use crate::status::StatusStore;
use crate::timeutil::now_unix_nanos;
use crate::util::backoff::Backoff;

use super::apistatus::{self, PodFailure, StatusInputs, WaitingReason};

/// Settings every worker shares.
#[derive(Debug, Clone)]
pub struct SyncSettings {
    pub node_name: String,
    /// What the pods' runtime managers need: the node's IPs, the log, state and legacy-log
    /// directories, the local store, registry credentials, the cgroup driver, resolv.conf.
    pub runtime: RuntimeSettings,
    /// How often a pod is re-synced with no event (the kubelet's syncFrequency).
    pub resync: Duration,
    /// The pod worker pool's threads: kept, and at most (`super::worker_pool`).
    pub worker_threads: crate::util::pool::PoolSize,
    /// The kubelet's maxPods: pods over the limit are rejected with OutOfpods.
    pub max_pods: u32,
    /// Node allocatable for admission (OutOfcpu / OutOfmemory).
    pub allocatable_cpu_millis: i64,
    pub allocatable_memory_bytes: i64,
    /// Node allocatable extended resources (name -> count) for admission (`OutOf<name>`).
    pub extended_allocatable: std::collections::BTreeMap<String, i64>,
    /// evictionPressureTransitionPeriod: how long a local-storage eviction keeps a pod out.
    pub eviction_transition: Duration,
    /// The operator's hardening options, checked at admission.
    pub security: super::policy::SecurityPolicy,
    /// What the host's kernel enforces (AppArmor, SELinux), checked at admission.
    pub host_security: crate::api::security::HostSecurity,
    /// The node's labels (well-known + `--node-labels`) for nodeSelector/nodeAffinity.
    pub node_labels: std::collections::BTreeMap<String, String>,
    /// Where the QoS tier cgroups are kept up to date (`/sys/fs/cgroup` with the cgroupfs
    /// driver); `None`: not at all (the systemd driver, tests).
    pub qos_cgroup_root: Option<std::path::PathBuf>,
    /// The systemd driver: the QoS tiers are slices kept up to date through systemd.
    pub qos_systemd: Option<std::sync::Arc<crate::cm::systemd::Manager>>,
    /// `qosReserved` memory: (node allocatable memory, percent) for the tiers' memory limits.
    pub qos_memory_reserve: Option<crate::cm::QosMemoryReserve>,
}

pub struct WorkerContext {
    pub runtime: Arc<dyn Runtime>,
    /// The pod cache the PLEG fills; workers read it before each sync and store their own
    /// observations in it.
    pub cache: Arc<PodCache>,
    pub prober: Arc<crate::prober::Prober>,
    pub store: Arc<StatusStore>,
    pub settings: SyncSettings,
}

#[derive(Debug)]
pub enum WorkerMsg {
    /// The desired spec (same UID; only annotations like config.seen may differ), shared
    /// with the sync loop.
    Update(Arc<Pod>),
    /// Something changed in the runtime for this pod.
    Sync,
    /// The pod's manifest is gone: terminate with its grace period.
    Terminate,
    /// The eviction manager evicts the pod: kill it with `grace_seconds`, fail it with reason
    /// `Evicted` and `message`, release its volumes; it stays Failed until `Readmit`.
    /// The node shutdown manager sends the same with reason `Terminated`.
    Evict {
        reason: &'static str,
        message: String,
        grace_seconds: i64,
    },
    /// Run an evicted pod again: its old containers and sandboxes are removed and it starts
    /// afresh (restart counts from 0, as a re-created pod).
    Readmit,
}

/// What a worker tells the sync loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerReport {
    /// The pod is fully terminated and its runtime objects removed.
    Terminated { uid: String },
}

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("pod {pod}: {source}")]
    Runtime {
        pod: String,
        #[source]
        source: RuntimeError,
    },
    #[error("pod {pod}: creating log directory {path}: {source}")]
    LogDir {
        pod: String,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("pod {pod}: {source}")]
    Dns {
        pod: String,
        #[source]
        source: crate::api::dns::DnsError,
    },
    #[error("pod {pod}: user namespace: {source}")]
    UserNamespace {
        pod: String,
        #[source]
        source: crate::kuberuntime::userns::UsernsError,
    },
    #[error("pod {pod}: {source}")]
    RuntimeClass {
        pod: String,
        #[source]
        source: crate::runtimeclass::RuntimeClassError,
    },
}

impl SyncError {
    fn sandbox(pod: &str, e: SandboxError) -> SyncError {
        let pod = pod.to_string();
        match e {
            SandboxError::LogDir { path, source } => SyncError::LogDir { pod, path, source },
            SandboxError::Dns(source) => SyncError::Dns { pod, source },
            SandboxError::Runtime(source) => SyncError::Runtime { pod, source },
            SandboxError::UserNamespace(source) => SyncError::UserNamespace { pod, source },
            SandboxError::RuntimeClass(source) => SyncError::RuntimeClass { pod, source },
        }
    }
}

/// An eviction the worker carries out: the pod is killed with `grace_seconds` and stays Failed
/// until re-admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Eviction {
    /// The grace period of the kill.
    grace_seconds: i64,
}

fn now() -> Now {
    Now {
        instant: Instant::now(),
        wall_nanos: now_unix_nanos(),
    }
}

pub struct PodWorker {
    ctx: Arc<WorkerContext>,
    pod: Arc<Pod>,
    full_name: String,
    /// The containers' restart back-off (CrashLoopBackOff).
    backoff: Backoff,
    /// What the pod's runtime manager keeps between syncs (pod IP, image pull back-off).
    runtime: RuntimeManagerState,
    /// The sync-failure warning, once per back-off step while the same error repeats.
    sync_warning: crate::util::backoff::RepeatLimiter,
    waiting: BTreeMap<String, WaitingReason>,
    start_time_nanos: Option<i64>,
    /// Whether the pod's runtime handler does recursive read-only mounts, asked once and
    /// only for a pod with a `recursiveReadOnly` `IfPossible` or `Enabled` mount (its status
    /// says which).
    rro_supported: std::cell::OnceCell<bool>,
    /// A terminal pod's volumes and cgroup are released (once nothing of it runs).
    released: bool,
    first_seen: Instant,
    failed_reason: Option<PodFailure>,
    evicted: Option<Eviction>,
    readmit: bool,
    /// pod_workers.go's `lastSyncTime`: the next sync needs cache data newer than this, so it
    /// never acts on a state from before its own changes (see [`PodWorker::sync`]). None until
    /// the first sync, which always observes the pod itself (adoption).
    last_sync: Option<Instant>,
    /// The pod is being terminated (its manifest is gone); failed attempts so far, and when
    /// the next may start.
    terminating: bool,
    terminate_attempts: u32,
    terminate_retry: Option<Instant>,
}

/// What a worker's turn asks of the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Run again after this long, or sooner when a message arrives.
    Again(Duration),
    /// The pod is terminated and its runtime objects removed: the worker is done.
    Done,
}

impl PodWorker {
    pub fn new(ctx: Arc<WorkerContext>, pod: Arc<Pod>) -> Self {
        let full_name = format!("{}/{}", pod.metadata.namespace, pod.metadata.name);
        PodWorker {
            ctx,
            pod,
            full_name,
            backoff: Backoff::default(),
            runtime: RuntimeManagerState::default(),
            sync_warning: Default::default(),
            waiting: BTreeMap::new(),
            start_time_nanos: None,
            rro_supported: std::cell::OnceCell::new(),
            released: false,
            first_seen: Instant::now(),
            failed_reason: None,
            evicted: None,
            readmit: false,
            last_sync: None,
            terminating: false,
            terminate_attempts: 0,
            terminate_retry: None,
        }
    }

    fn uid(&self) -> &str {
        &self.pod.metadata.uid
    }

    fn rt(&self) -> &dyn Runtime {
        self.ctx.runtime.as_ref()
    }

    /// The pod's runtime manager for one step.
    fn manager(&mut self) -> RuntimeManager<'_> {
        RuntimeManager {
            runtime: self.ctx.runtime.as_ref(),
            pod: &self.pod,
            events: self.ctx.store.events(),
            settings: &self.ctx.settings.runtime,
            state: &mut self.runtime,
            full_name: &self.full_name,
        }
    }

    fn wrap(&self, source: RuntimeError) -> SyncError {
        SyncError::Runtime {
            pod: self.full_name.clone(),
            source,
        }
    }

    /// One turn of the worker on a pool thread (`super::worker_pool`): apply the messages
    /// queued since the last turn (a burst becomes one sync), then re-admit, terminate or
    /// sync. The pool calls it again when a message arrives or `Step::Again`'s time is up.
    pub fn step(&mut self, msgs: Vec<WorkerMsg>) -> Step {
        for msg in msgs {
            self.apply(msg);
        }
        if self.readmit && !self.terminating {
            self.readmit = false;
            let readmitted = self.readmit();
            // Its removals happened after the last sync: cached data from before is stale.
            self.last_sync = Some(Instant::now());
            if let Err(e) = readmitted {
                warn!(pod = %self.full_name, error = %e, "re-admitting evicted pod failed; retrying");
                self.readmit = true;
                return Step::Again(Duration::from_secs(2));
            }
        }
        if self.terminating {
            return self.terminate_step();
        }
        let next = match self.sync() {
            Ok(next) => {
                if self.sync_warning.clear() {
                    info!(pod = %self.full_name, "sync works again");
                }
                next
            }
            Err(e) => {
                let retry = crate::util::backoff::sync_error_retry(now_unix_nanos().unsigned_abs());
                if let Some(suppressed) = self.sync_warning.check(&e.to_string(), Instant::now()) {
                    warn!(pod = %self.full_name, error = %e, suppressed, retry = ?retry, "sync failed; retrying (repeats of this error are logged once per back-off step with the number suppressed)");
                }
                retry
            }
        };
        Step::Again(next)
    }

    fn apply(&mut self, msg: WorkerMsg) {
        match msg {
            WorkerMsg::Update(p) => self.pod = p,
            WorkerMsg::Sync => {}
            WorkerMsg::Terminate => self.terminating = true,
            WorkerMsg::Evict {
                reason,
                message,
                grace_seconds,
            } => {
                if self.evicted.is_none() && reason == "Evicted" {
                    self.ctx.store.events().record(
                        &crate::events::PodRef::pod(
                            &self.pod.metadata.namespace,
                            &self.pod.metadata.name,
                            self.uid(),
                        ),
                        crate::events::EventType::Warning,
                        "Evicted",
                        &message,
                    );
                }
                self.failed_reason = Some(PodFailure {
                    reason: reason.into(),
                    message,
                });
                self.evicted = Some(Eviction { grace_seconds });
                self.readmit = false;
            }
            WorkerMsg::Readmit => {
                if self.evicted.is_some() {
                    self.readmit = true;
                }
            }
        }
    }

    /// Back from eviction: remove the old runtime objects and start over.
    fn readmit(&mut self) -> Result<(), SyncError> {
        info!(pod = %self.full_name, "re-admitting evicted pod");
        let state = observe_pod(self.rt(), self.uid()).map_err(|e| self.wrap(e))?;
        self.manager().kill_pod(&state, Some(0));
        self.manager()
            .remove_all(&state)
            .map_err(|e| self.wrap(e))?;
        self.evicted = None;
        self.released = false;
        self.failed_reason = None;
        self.backoff = Backoff::default();
        self.runtime.images = Default::default();
        self.waiting.clear();
        self.start_time_nanos = None;
        self.first_seen = Instant::now();
        self.ctx.store.remove_pod(self.uid());
        Ok(())
    }

    /// Whether the pod came from the API server (its status goes there).
    fn is_api_pod(&self) -> bool {
        self.pod
            .metadata
            .annotations
            .get(crate::config::naming::CONFIG_SOURCE_ANNOTATION)
            .is_some_and(|s| s == crate::config::SourceKind::Api.as_str())
    }

    fn is_terminal(&self) -> bool {
        self.ctx
            .store
            .get(self.uid())
            .and_then(|p| p.status)
            .is_some_and(|s| s.phase == "Succeeded" || s.phase == "Failed")
    }

    /// `<root-dir>/pods/<uid>`: the pod's own directory.
    fn pod_dir(&self) -> std::path::PathBuf {
        self.ctx.settings.runtime.pod_dir(self.uid())
    }

    /// activeDeadlineSeconds: once the pod has been active that long it fails with
    /// DeadlineExceeded. Returns the time left, while some is.
    fn check_active_deadline(&mut self) -> Option<Duration> {
        let (Some(deadline), Some(start)) =
            (self.pod.spec.active_deadline_seconds, self.start_time_nanos)
        else {
            return None;
        };
        let active = Duration::from_nanos(now_unix_nanos().saturating_sub(start).max(0) as u64);
        let limit = Duration::from_secs(deadline.max(0) as u64);
        if active < limit {
            return Some(limit - active);
        }
        if self.failed_reason.is_none() {
            info!(pod = %self.full_name, "active deadline exceeded; killing pod");
            self.failed_reason = Some(PodFailure {
                reason: "DeadlineExceeded".into(),
                message: "Pod was active on the node longer than the specified deadline".into(),
            });
        }
        None
    }

    /// One sync pass. Returns how long until the next pass is due without an event.
    pub fn sync(&mut self) -> Result<Duration, SyncError> {
        // pod_workers.go sets `lastSyncTime = p.clock.Now()` once the sync returns. A sync
        // that returns its `seen` time (it changed nothing after the data it used was observed)
        // needs data newer than that; one that failed half-way needs data newer than now.
        let synced = self.sync_pod();
        let seen = synced
            .as_ref()
            .map_or_else(|_| Instant::now(), |(_, seen)| *seen);
        self.last_sync = Some(seen);
        synced.map(|(next, _)| next)
    }

    /// The sync; returns the next wake-up and the time through which the worker has seen the
    /// runtime with all its own changes: when the data it used (or its own observation after
    /// acting) was observed, or now when the garbage collection removed something after that.
    fn sync_pod(&mut self) -> Result<(Duration, Instant), SyncError> {
        // The kubelet's pod manager registers the pod's ConfigMaps and Secrets (API pods).
        self.ctx.settings.runtime.register_pod(&self.pod);
        let (state, seen) = self.current_state()?;
        if self.start_time_nanos.is_none() {
            // Adopted pods keep the start time of their sandbox; new pods start now.
            self.start_time_nanos = Some(
                state
                    .sandboxes
                    .iter()
                    .map(|s| s.created_at)
                    .min()
                    .filter(|t| *t > 0)
                    .unwrap_or_else(now_unix_nanos),
            );
        }
        let mut next = self.ctx.settings.resync;
        if let Some(left) = self.check_active_deadline() {
            next = next.min(left);
        }

        let terminal = self.failed_reason.is_some() || self.is_terminal();
        // Whether this pass changed anything in the runtime (else the observation above is
        // still the truth: a periodic resync of a steady pod costs one observation, not two).
        let acted = if terminal {
            self.ctx.prober.remove_pod(self.uid());
            self.stop_terminal(&state)?
        } else {
            let running: Vec<crate::prober::RunningContainer> = state
                .running()
                .map(|c| crate::prober::RunningContainer {
                    name: c.name.clone(),
                    id: c.id.clone(),
                    started_at: c.started_at,
                })
                .collect();
            self.manager().observe_pod_ip(&state);
            self.ctx
                .prober
                .sync_pod(&self.pod, &running, &self.runtime.pod_ip);
            let probes = self.ctx.prober.view(self.uid());
            let n = now();
            let acts = compute_pod_actions(&self.pod, &state, &self.backoff, &probes, n);
            self.waiting.retain(|name, _| {
                state
                    .latest(name)
                    .is_none_or(|c| c.state != ContainerState::Running)
            });
            match self.execute(&acts, &state, n) {
                Ok(Some(d)) => next = next.min(d),
                Ok(None) => {}
                Err(e) => {
                    self.publish_after_failure(&acts, state);
                    return Err(e);
                }
            }
            !acts.is_noop()
        };

        let (mut state, mut seen) = if acted {
            self.observe()?
        } else {
            (state, seen)
        };
        if !terminal && state.running().next().is_some() {
            self.refresh_volumes();
        }
        let manager = self.manager();
        manager.fill_termination_messages(&mut state);
        if manager.gc(&state) {
            seen = Instant::now();
        }
        self.publish(&state, false);
        Ok((next, seen))
    }

    /// The pod's runtime state for a sync: the cache's when it is newer than the last sync
    /// (pod_workers.go: `podCache.GetNewerThan(pod.UID, lastSyncTime)`), without a runtime
    /// call. Else the worker observes the pod itself and stores that in the cache. Upstream
    /// blocks until the PLEG's next relist (1 s); nanolet's relist runs every 10 s while
    /// containerd's events are live, so waiting would delay back-off restarts, probe kills and
    /// deadlines by up to 10 s: the worker does not wait. The first sync always observes
    /// (adoption of what a previous nanolet left running). Returns the state and the time it
    /// was observed at.
    fn current_state(&self) -> Result<(PodRuntimeState, Instant), SyncError> {
        if let Some(since) = self.last_sync {
            let cached = self
                .ctx
                .cache
                .get_newer_than(self.uid(), since, Duration::ZERO);
            if let Some(c) = cached {
                if let Ok(state) = c.state {
                    return Ok((state, c.observed));
                }
            }
        }
        self.observe()
    }

    /// Observe the pod through the runtime and store it in the cache. Returns the state and
    /// the time taken before the calls.
    fn observe(&self) -> Result<(PodRuntimeState, Instant), SyncError> {
        let at = Instant::now();
        let state = observe_pod(self.rt(), self.uid()).map_err(|e| self.wrap(e))?;
        self.ctx.cache.set(self.uid(), Ok(state.clone()), at);
        Ok((state, at))
    }

    /// A terminal pod: nothing starts any more; whatever still runs is stopped. Returns
    /// whether anything was.
    fn stop_terminal(&mut self, state: &PodRuntimeState) -> Result<bool, SyncError> {
        let mut acted = false;
        let grace = self.evicted.map(|e| e.grace_seconds);
        if state.running().next().is_some() || state.sandboxes.iter().any(|s| s.ready) {
            self.manager().kill_pod(state, grace);
            acted = true;
        }
        // A terminal pod gives back what it holds on the node once nothing of it runs (the
        // kubelet's SyncTerminatedPod: the volume manager unmounts its volumes, emptyDir data
        // and tmpfs memory go, then the pod cgroup is destroyed); its dead containers stay
        // for their logs and status until the pod is removed.
        if !self.released {
            let after = if acted {
                observe_pod(self.rt(), self.uid()).map_err(|e| self.wrap(e))?
            } else {
                state.clone()
            };
            if after.running().next().is_none() && !after.sandboxes.iter().any(|s| s.ready) {
                crate::volumes::teardown(&self.pod_dir());
                let _ = std::fs::remove_dir_all(
                    self.pod_dir()
                        .join("volumes")
                        .join("kubernetes.io~empty-dir"),
                );
                self.remove_pod_cgroups();
                self.released = true;
                info!(pod = %self.full_name, evicted = self.evicted.is_some(), "terminal pod stopped; volumes and pod cgroup released");
            }
        }
        Ok(acted)
    }

    /// Run the actions. Returns the shortest backoff wait, if any.
    fn execute(
        &mut self,
        acts: &PodActions,
        state: &PodRuntimeState,
        n: Now,
    ) -> Result<Option<Duration>, SyncError> {
        if acts.kill_pod {
            info!(pod = %self.full_name, reason = %acts.sandbox_reason, "killing pod");
            self.manager().kill_pod(state, None);
        }
        for k in &acts.containers_to_kill {
            self.manager()
                .kill_container(&k.id, &k.name, k.grace_override, &k.reason, None);
        }
        let mut sandbox = acts.sandbox_id.clone();
        let attempt = if acts.create_sandbox {
            acts.attempt
        } else {
            state.newest_sandbox().map(|s| s.attempt).unwrap_or(0)
        };
        let mut sandbox_cfg = self.manager().sandbox_config(attempt);
        if acts.create_sandbox {
            let id = self
                .manager()
                .create_sandbox(&mut sandbox_cfg)
                .map_err(|e| SyncError::sandbox(&self.full_name, e))?;
            sandbox = Some(id);
        }
        let mut wake = self.wait_backoff(acts);
        let Some(sandbox_id) = sandbox else {
            return Ok(wake);
        };
        // After a new sandbox the state of old containers still matters for restart counts.
        let mut starts: Vec<(Container, ContainerType)> = vec![];
        // SyncPod step 6: ephemeral containers start before init containers (so a failing
        // init container does not hold a debugging container back).
        for &i in &acts.ephemeral_to_start {
            if let Some(c) = self.pod.spec.ephemeral_containers.get(i) {
                starts.push((c.clone(), ContainerType::Ephemeral));
            }
        }
        if let Some(i) = acts.init_to_start {
            if let Some(c) = self.pod.spec.init_containers.get(i) {
                let kind = if is_sidecar(c) {
                    ContainerType::Sidecar
                } else {
                    ContainerType::Init
                };
                starts.push((c.clone(), kind));
            }
        }
        for &i in &acts.containers_to_start {
            if let Some(c) = self.pod.spec.containers.get(i) {
                starts.push((c.clone(), ContainerType::Regular));
            }
        }
        for (c, kind) in starts {
            if let Some(d) = self.start_container(&c, kind, &sandbox_id, &sandbox_cfg, state, n) {
                wake = Some(wake.map_or(d, |x| x.min(d)));
            }
        }
        Ok(wake)
    }

    /// The containers waiting out their crash-loop back-off: a BackOff event and their
    /// CrashLoopBackOff reason. Returns the shortest wait, if any.
    fn wait_backoff(&mut self, acts: &PodActions) -> Option<Duration> {
        let mut wake: Option<Duration> = None;
        for w in &acts.backoff {
            let msg = format!(
                "back-off {} restarting failed container={} pod={}_{}({})",
                crate::timeutil::format_go_duration(w.delay),
                w.name,
                self.pod.metadata.name,
                self.pod.metadata.namespace,
                self.pod.metadata.uid
            );
            debug!(pod = %self.full_name, container = %w.name, remaining = ?w.remaining, "in CrashLoopBackOff");
            self.ctx.store.events().record(
                &crate::events::container_ref(&self.pod, &w.name),
                crate::events::EventType::Warning,
                "BackOff",
                &format!(
                    "Back-off restarting failed container {} in pod {}_{}({})",
                    w.name,
                    self.pod.metadata.name,
                    self.pod.metadata.namespace,
                    self.pod.metadata.uid
                ),
            );
            if find_spec(&self.pod, &w.name).is_some() {
                self.waiting.insert(
                    w.name.clone(),
                    WaitingReason {
                        reason: "CrashLoopBackOff".into(),
                        message: msg,
                    },
                );
            }
            wake = Some(wake.map_or(w.remaining, |x| x.min(w.remaining)));
        }
        wake
    }

    /// Start one container through the runtime manager, after recording the restart in the
    /// back-off book. Returns a retry delay when it could not start (its waiting reason is
    /// kept for the status).
    fn start_container(
        &mut self,
        c: &Container,
        kind: ContainerType,
        sandbox_id: &str,
        sandbox_cfg: &PodSandboxConfig,
        state: &PodRuntimeState,
        n: Now,
    ) -> Option<Duration> {
        // kubelet doBackOff: record the restart against the newest exited container's finish.
        if let Some(exited) = state.latest_exited(&c.name) {
            self.backoff
                .next(&backoff_key(&self.pod, c), n.instant_of(exited.finished_at));
        }
        let started =
            self.manager()
                .start_container(c, kind, sandbox_id, sandbox_cfg, state, n.instant);
        match started {
            Ok(()) => {
                self.waiting.remove(&c.name);
                None
            }
            Err(e) => {
                let retry = e.retry_after().unwrap_or(self.ctx.settings.resync);
                self.waiting.insert(
                    c.name.clone(),
                    WaitingReason {
                        reason: e.reason().into(),
                        message: e.to_string(),
                    },
                );
                Some(retry)
            }
        }
    }

    /// Re-project configMap/secret/downwardAPI volumes of a running pod, so an edited source
    /// reaches the containers within one sync period (atomic swap; unchanged content is not
    /// rewritten).
    fn refresh_volumes(&self) {
        let has_api_data = self
            .pod
            .spec
            .extra
            .get("volumes")
            .and_then(|v| v.as_array())
            .is_some_and(|vs| {
                vs.iter().any(|v| {
                    ["configMap", "secret", "downwardAPI", "projected"]
                        .iter()
                        .any(|k| v.get(*k).is_some())
                })
            });
        if !has_api_data {
            return;
        }
        let settings = &self.ctx.settings.runtime;
        let vctx = settings.volume_context(&self.pod, &self.runtime.pod_ip);
        if let Err(e) = crate::volumes::prepare(&self.pod, &self.pod_dir(), &vctx) {
            debug!(pod = %self.full_name, error = %e, "refreshing volumes");
        }
    }

    /// The kubelet generates and publishes a pod's status before its runtime sync, whatever
    /// that sync's outcome (kubelet.go SyncPod), so a pod whose sandbox cannot be created is
    /// listed from its first sync: Pending, its containers waiting in ContainerCreating. The
    /// state is observed again when the failed pass changed something before failing.
    fn publish_after_failure(&self, acts: &PodActions, state: PodRuntimeState) {
        let state = if acts.is_noop() {
            state
        } else {
            self.observe().map(|(s, _)| s).unwrap_or(state)
        };
        self.publish(&state, false);
    }

    /// The kubelet's pod container manager Destroy: the pod's cgroups (empty ones: a cgroup
    /// still holding processes stays), and with the systemd driver its slice stopped.
    fn remove_pod_cgroups(&self) {
        crate::cm::remove_pod_cgroups(self.uid());
        if let Some(sd) = &self.ctx.settings.runtime.systemd_cgroups {
            let unit = crate::cm::systemd::slice_unit(&crate::cm::pod_cgroup_parent(
                &self.pod,
                crate::cm::CgroupDriver::Systemd,
            ));
            if let Err(e) = sd.stop(&unit) {
                warn!(pod = %self.full_name, error = %e, "removing the pod's slice");
            }
        }
    }

    /// See `rro_supported`; false without asking when no mount asks for it.
    fn recursive_read_only_supported(&self) -> bool {
        let wants = self
            .pod
            .spec
            .init_containers
            .iter()
            .chain(&self.pod.spec.containers)
            .filter_map(|c| c.extra.get("volumeMounts").and_then(|v| v.as_array()))
            .flatten()
            .any(|m| {
                matches!(
                    m.get("recursiveReadOnly").and_then(|v| v.as_str()),
                    Some("IfPossible" | "Enabled")
                )
            });
        if !wants {
            return false;
        }
        *self.rro_supported.get_or_init(|| {
            let handler = self
                .ctx
                .settings
                .runtime
                .runtime_classes
                .lookup_handler(&self.pod)
                .unwrap_or_default();
            self.ctx
                .runtime
                .status(false)
                .is_ok_and(|st| st.supports_recursive_read_only(&handler))
        })
    }

    fn publish(&self, state: &PodRuntimeState, terminating: bool) {
        let old = self.ctx.store.get(self.uid()).and_then(|p| p.status);
        let inputs = StatusInputs {
            host_ips: self.ctx.settings.runtime.host_ips.clone(),
            now_nanos: now_unix_nanos(),
            start_time_nanos: self.start_time_nanos,
            waiting: self.waiting.clone(),
            failed_reason: self.failed_reason.clone(),
            terminating,
            // A terminating pod keeps its readiness results until its containers stopped.
            probes: self.ctx.prober.view(self.uid()),
            recursive_read_only: self.recursive_read_only_supported(),
        };
        if !terminating {
            self.ctx.prober.trigger_unready(self.uid());
        }
        let status = apistatus::compute(&self.pod, state, &inputs, old.as_ref());
        let mut pod = Pod::clone(&self.pod);
        pod.status = Some(status);
        self.ctx.store.set_pod(pod);
    }

    /// Terminate: stop everything with the pod's grace period, remove containers, sandboxes and
    /// log files, and drop the pod from the status store. When the runtime fails it is tried
    /// again after a back-off doubling from 2 s to 30 s (the pod must not leak); messages that
    /// arrive meanwhile do not hasten it.
    fn terminate_step(&mut self) -> Step {
        if let Some(left) = self
            .terminate_retry
            .and_then(|at| at.checked_duration_since(Instant::now()))
            .filter(|d| !d.is_zero())
        {
            return Step::Again(left);
        }
        if self.terminate_attempts == 0 {
            info!(pod = %self.full_name, "terminating pod");
            // No liveness kills while a pod is terminating; readiness probes go on until its
            // containers stopped (kubelet.go SyncTerminatingPod: StopLivenessAndStartup
            // before killPod, RemovePod after).
            self.ctx.prober.stop_liveness_and_startup(self.uid());
        }
        if let Err(e) = self.try_terminate() {
            self.terminate_attempts += 1;
            let attempts = self.terminate_attempts;
            warn!(pod = %self.full_name, error = %e, attempts, "terminating pod failed; retrying");
            let wait = Duration::from_secs((1u64 << attempts.min(5)).min(30));
            self.terminate_retry = Some(Instant::now() + wait);
            return Step::Again(wait);
        }
        self.ctx.prober.remove_pod(self.uid());
        let _ = std::fs::remove_dir_all(self.ctx.settings.runtime.pod_log_dir(&self.pod));
        self.remove_pod_cgroups();
        crate::volumes::teardown(&self.pod_dir());
        let _ = std::fs::remove_dir_all(self.pod_dir());
        self.manager().remove_legacy_links();
        self.ctx.settings.runtime.unregister_pod(self.uid());
        // An API pod's last status stays until the pod leaves the config (the sync loop drops
        // it then), so that the status writer sends it before the final DELETE.
        if !self.is_api_pod() {
            self.ctx.store.remove_pod(self.uid());
        }
        self.ctx.cache.delete(self.uid());
        info!(pod = %self.full_name, "pod terminated");
        Step::Done
    }

    fn try_terminate(&mut self) -> Result<(), SyncError> {
        let state = observe_pod(self.rt(), self.uid()).map_err(|e| self.wrap(e))?;
        self.publish(&state, true);
        self.manager().kill_pod(&state, None);
        let state = observe_pod(self.rt(), self.uid()).map_err(|e| self.wrap(e))?;
        // The kubelet's status manager reports the stopped containers (state terminated,
        // finishedAt) before the final DELETE; the e2e Lifecycle Sleep Hook tests keep the
        // pod with a finalizer and wait for exactly that.
        self.publish(&state, true);
        self.manager().remove_all(&state).map_err(|e| self.wrap(e))
    }
}
