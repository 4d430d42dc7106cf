//! One pod worker: a thread per pod UID that syncs the pod whenever something changes
//! (spec update, PLEG event, backoff expiry, periodic resync), and terminates it when its
//! manifest goes away. Mirrors the kubelet's podWorkers: sync -> terminating -> terminated.

use crate::timeutil::now_unix_nanos;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};

use super::LoopMsg;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use crate::api::env::{EnvContext, expand_all, resolve_env};
use crate::api::helpers::{is_sidecar, pod_log_dir_name};
use crate::api::quantity::parse_quantity;
use crate::api::{Container, Pod};
use crate::cri::{
    ANN_CONTAINER_HASH, ANN_CONTAINER_TYPE, ANN_POD_TERMINATION_GRACE, ANN_RESTART_COUNT,
    ANN_TERMINATION_MESSAGE_PATH, ANN_TERMINATION_MESSAGE_POLICY, ContainerConfig, ContainerState,
    ErrorKind, LABEL_CONTAINER_NAME, LABEL_MANAGED_BY, LABEL_POD_NAME, LABEL_POD_NAMESPACE,
    LABEL_POD_UID, LinuxResources, Mount, PodSandboxConfig, PortMapping, Protocol, Runtime,
    RuntimeError,
};
use crate::prober::handlers::Target;
use crate::prober::spec::{Handler, lifecycle_of};
use crate::status::StatusStore;

use super::apistatus::{self, PodFailure, StatusInputs, WaitingReason};
use crate::kuberuntime::actions::{
    Now, PodActions, backoff_key, compute_pod_actions, container_hash,
};
use crate::kuberuntime::state::{PodRuntimeState, observe_pod};
use crate::util::backoff::Backoff;

/// The kubelet always gives containers at least this long to stop unless told otherwise
/// (kuberuntime `minimumGracePeriodInSeconds`).
pub const MIN_GRACE_SECONDS: i64 = 2;

/// Settings every worker shares.
#[derive(Debug, Clone)]
pub struct SyncSettings {
    pub node_name: String,
    /// The node's IPs (`--node-ip`, else detected), primary first: status.hostIP(s) and the
    /// pod IPs of hostNetwork pods.
    pub host_ips: Vec<String>,
    pub pod_logs_dir: PathBuf,
    /// nanolet's state directory (`--root-dir`): `pods/<uid>/...` lives below it.
    pub root_dir: PathBuf,
    /// The local ConfigMap/Secret store (configMap/secret volumes and env references).
    pub store: Option<crate::localstore::LocalStore>,
    /// The node's registry credentials file (docker config.json), tried after the pod's
    /// imagePullSecrets; `None` when disabled.
    pub registry_config: Option<PathBuf>,
    /// Directory of the legacy `<pod>_<ns>_<container>-<id>.log` symlinks.
    pub container_logs_dir: PathBuf,
    /// How often a pod is re-synced with no event (the kubelet's syncFrequency).
    pub resync: Duration,
    /// The kubelet's maxPods: pods over the limit are rejected with OutOfpods.
    pub max_pods: u32,
    /// Node allocatable for admission (OutOfcpu / OutOfmemory).
    pub allocatable_cpu_millis: i64,
    pub allocatable_memory_bytes: i64,
    /// evictionPressureTransitionPeriod: how long a local-storage eviction keeps a pod out.
    pub eviction_transition: Duration,
    /// cgroupDriver: how pod cgroup parents are named (and whether nanolet writes pod totals).
    pub cgroup_driver: crate::cm::CgroupDriver,
    /// The operator's hardening options, checked at admission.
    pub security: super::policy::SecurityPolicy,
    /// What the host's kernel enforces (AppArmor, SELinux), checked at admission.
    pub host_security: crate::api::security::HostSecurity,
    /// The node's labels (well-known + `--node-labels`) for nodeSelector/nodeAffinity.
    pub node_labels: std::collections::BTreeMap<String, String>,
    /// The node's resolv.conf (`--resolv-conf`), read at every sandbox creation.
    pub host_dns: Arc<crate::api::dns::HostResolvConf>,
}

pub struct WorkerContext {
    pub runtime: Arc<dyn Runtime>,
    pub prober: Arc<crate::prober::Prober>,
    pub store: Arc<StatusStore>,
    pub settings: SyncSettings,
}

#[derive(Debug)]
pub enum WorkerMsg {
    /// The desired spec (same UID; only annotations like config.seen may differ).
    Update(Box<Pod>),
    /// Something changed in the runtime for this pod.
    Sync,
    /// The pod's manifest is gone: terminate with its grace period.
    Terminate,
    /// The eviction manager evicts the pod: kill it with `grace_seconds`, fail it with reason
    /// `Evicted` and `message`, release its volumes; it stays Failed until `Readmit`.
    Evict { message: String, grace_seconds: i64 },
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
}

/// An eviction the worker carries out: the pod is killed with `grace_seconds` and stays Failed
/// until re-admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Eviction {
    /// The grace period of the kill.
    grace_seconds: i64,
    /// The pod's volumes are released (once nothing runs any more).
    volumes_released: bool,
}

fn now() -> Now {
    Now {
        instant: Instant::now(),
        wall_nanos: now_unix_nanos(),
    }
}

pub struct PodWorker {
    ctx: Arc<WorkerContext>,
    pod: Pod,
    full_name: String,
    backoff: Backoff,
    image_backoff: Backoff,
    /// The sync-failure warning, once per back-off step while the same error repeats.
    sync_warning: crate::util::backoff::RepeatLimiter,
    waiting: BTreeMap<String, WaitingReason>,
    start_time_nanos: Option<i64>,
    first_seen: Instant,
    failed_reason: Option<PodFailure>,
    last_state: PodRuntimeState,
    /// The pod IP as last seen (hooks connect to it).
    pod_ip: String,
    evicted: Option<Eviction>,
    readmit: bool,
}

impl PodWorker {
    pub fn new(ctx: Arc<WorkerContext>, pod: Pod) -> Self {
        let full_name = format!("{}/{}", pod.metadata.namespace, pod.metadata.name);
        PodWorker {
            ctx,
            pod,
            full_name,
            backoff: Backoff::default(),
            image_backoff: Backoff::default(),
            sync_warning: Default::default(),
            waiting: BTreeMap::new(),
            start_time_nanos: None,
            first_seen: Instant::now(),
            failed_reason: None,
            last_state: PodRuntimeState::default(),
            pod_ip: String::new(),
            evicted: None,
            readmit: false,
        }
    }

    fn uid(&self) -> &str {
        &self.pod.metadata.uid
    }

    fn rt(&self) -> &dyn Runtime {
        self.ctx.runtime.as_ref()
    }

    fn wrap(&self, source: RuntimeError) -> SyncError {
        SyncError::Runtime {
            pod: self.full_name.clone(),
            source,
        }
    }

    /// The worker thread's body.
    pub fn run(mut self, rx: Receiver<WorkerMsg>, reports: Sender<LoopMsg>) {
        let mut wake = Instant::now();
        let mut terminate = false;
        loop {
            let timeout = wake.saturating_duration_since(Instant::now());
            match rx.recv_timeout(timeout) {
                Ok(msg) => {
                    self.apply(msg, &mut terminate);
                    // Coalesce a burst of messages into one sync.
                    while let Ok(msg) = rx.try_recv() {
                        self.apply(msg, &mut terminate);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                // The sync loop is gone (nanolet is stopping): leave the pod running.
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if self.readmit && !terminate {
                self.readmit = false;
                if let Err(e) = self.readmit() {
                    warn!(pod = %self.full_name, error = %e, "re-admitting evicted pod failed; retrying");
                    self.readmit = true;
                    wake = Instant::now() + Duration::from_secs(2);
                    continue;
                }
            }
            if terminate {
                self.terminate();
                let _ = reports.send(LoopMsg::Worker(WorkerReport::Terminated {
                    uid: self.uid().to_string(),
                }));
                return;
            }
            let next = match self.sync() {
                Ok(next) => {
                    if self.sync_warning.clear() {
                        info!(pod = %self.full_name, "sync works again");
                    }
                    next
                }
                Err(e) => {
                    let retry =
                        crate::util::backoff::sync_error_retry(now_unix_nanos().unsigned_abs());
                    if let Some(suppressed) =
                        self.sync_warning.check(&e.to_string(), Instant::now())
                    {
                        warn!(pod = %self.full_name, error = %e, suppressed, retry = ?retry, "sync failed; retrying (repeats of this error are logged once per back-off step with the number suppressed)");
                    }
                    retry
                }
            };
            wake = Instant::now() + next;
        }
    }

    fn apply(&mut self, msg: WorkerMsg, terminate: &mut bool) {
        match msg {
            WorkerMsg::Update(p) => self.pod = *p,
            WorkerMsg::Sync => {}
            WorkerMsg::Terminate => *terminate = true,
            WorkerMsg::Evict {
                message,
                grace_seconds,
            } => {
                if self.evicted.is_none() {
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
                    reason: "Evicted".into(),
                    message,
                });
                self.evicted = Some(Eviction {
                    grace_seconds,
                    volumes_released: false,
                });
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
        self.kill_pod(&state, Some(0));
        self.remove_runtime_objects(&state)?;
        self.evicted = None;
        self.failed_reason = None;
        self.backoff = Backoff::default();
        self.image_backoff = Backoff::default();
        self.waiting.clear();
        self.start_time_nanos = None;
        self.first_seen = Instant::now();
        self.last_state = PodRuntimeState::default();
        self.ctx.store.remove_pod(self.uid());
        Ok(())
    }

    fn is_terminal(&self) -> bool {
        self.ctx
            .store
            .get(self.uid())
            .and_then(|p| p.status)
            .is_some_and(|s| s.phase == "Succeeded" || s.phase == "Failed")
    }

    /// One sync pass. Returns how long until the next pass is due without an event.
    pub fn sync(&mut self) -> Result<Duration, SyncError> {
        let state = observe_pod(self.rt(), self.uid()).map_err(|e| self.wrap(e))?;
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

        // activeDeadlineSeconds: the pod fails with DeadlineExceeded.
        if let (Some(deadline), Some(start)) =
            (self.pod.spec.active_deadline_seconds, self.start_time_nanos)
        {
            let active = Duration::from_nanos(now_unix_nanos().saturating_sub(start).max(0) as u64);
            let limit = Duration::from_secs(deadline.max(0) as u64);
            if active >= limit {
                if self.failed_reason.is_none() {
                    info!(pod = %self.full_name, "active deadline exceeded; killing pod");
                    self.failed_reason = Some(PodFailure {
                        reason: "DeadlineExceeded".into(),
                        message: "Pod was active on the node longer than the specified deadline"
                            .into(),
                    });
                }
            } else {
                next = next.min(limit - active);
            }
        }

        let terminal = self.failed_reason.is_some() || self.is_terminal();
        // Whether this pass changed anything in the runtime (else the observation above is
        // still the truth: a periodic resync of a steady pod costs one observation, not two).
        let mut acted = false;
        let probes = if terminal {
            self.ctx.prober.remove_pod(self.uid());
            BTreeMap::new()
        } else {
            let running: Vec<crate::prober::RunningContainer> = state
                .running()
                .map(|c| crate::prober::RunningContainer {
                    name: c.name.clone(),
                    id: c.id.clone(),
                    started_at: c.started_at,
                })
                .collect();
            if state.newest_sandbox().is_some_and(|s| s.ready) {
                self.pod_ip = self.pod_ip(&state);
            }
            self.ctx.prober.sync_pod(&self.pod, &running, &self.pod_ip);
            self.ctx.prober.view(self.uid())
        };
        if terminal {
            // Nothing starts any more; whatever still runs is stopped.
            let grace = self.evicted.map(|e| e.grace_seconds);
            if state.running().next().is_some() || state.sandboxes.iter().any(|s| s.ready) {
                self.kill_pod(&state, grace);
                acted = true;
            }
            // An evicted pod gives back what it holds on the node: its volumes (emptyDir
            // data, tmpfs memory) and its dead containers' writable layers.
            if let Some(eviction) = self.evicted.filter(|e| !e.volumes_released) {
                let after = observe_pod(self.rt(), self.uid()).map_err(|e| self.wrap(e))?;
                if after.running().next().is_none() {
                    crate::volumes::teardown(&self.pod_dir());
                    let _ = std::fs::remove_dir_all(
                        self.pod_dir()
                            .join("volumes")
                            .join("kubernetes.io~empty-dir"),
                    );
                    self.evicted = Some(Eviction {
                        volumes_released: true,
                        ..eviction
                    });
                    info!(pod = %self.full_name, "evicted pod stopped; volumes released");
                }
            }
        } else {
            let n = now();
            let acts = compute_pod_actions(&self.pod, &state, &self.backoff, &probes, n);
            self.waiting.retain(|name, _| {
                state
                    .latest(name)
                    .is_none_or(|c| c.state != ContainerState::Running)
            });
            acted = !acts.is_noop();
            if let Some(d) = self.execute(&acts, &state, n)? {
                next = next.min(d);
            }
        }

        let mut state = if acted {
            observe_pod(self.rt(), self.uid()).map_err(|e| self.wrap(e))?
        } else {
            state
        };
        if !terminal && state.running().next().is_some() {
            self.refresh_volumes();
        }
        self.fill_termination_messages(&mut state);
        self.gc(&state);
        self.publish(&state, false);
        self.last_state = state;
        Ok(next)
    }

    /// Run the actions. Returns the shortest backoff wait, if any.
    fn execute(
        &mut self,
        acts: &PodActions,
        state: &PodRuntimeState,
        n: Now,
    ) -> Result<Option<Duration>, SyncError> {
        let mut wake: Option<Duration> = None;
        if acts.kill_pod {
            info!(pod = %self.full_name, reason = %acts.sandbox_reason, "killing pod");
            self.kill_pod(state, None);
        }
        for k in &acts.containers_to_kill {
            self.kill_container(&k.id, &k.name, k.grace_override, &k.reason);
        }
        let mut sandbox = acts.sandbox_id.clone();
        let mut sandbox_cfg = self.sandbox_config(if acts.create_sandbox {
            acts.attempt
        } else {
            self.current_attempt(state)
        });
        if acts.create_sandbox {
            // Only a new sandbox needs DNS: the node's resolv.conf is read for it (kubelet
            // generatePodSandboxConfig -> GetPodDNS).
            let host = self
                .ctx
                .settings
                .host_dns
                .read()
                .map_err(|source| SyncError::Dns {
                    pod: self.full_name.clone(),
                    source,
                })?;
            sandbox_cfg.dns = Some(crate::api::dns::pod_dns(&self.pod, &host));
            sandbox = Some(self.create_sandbox(&sandbox_cfg)?);
        }
        for w in &acts.backoff {
            let spec = self.find_spec(&w.name);
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
            if spec.is_some() {
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
        let Some(sandbox_id) = sandbox else {
            return Ok(wake);
        };
        // After a new sandbox the state of old containers still matters for restart counts.
        let mut starts: Vec<(Container, &'static str)> = vec![];
        if let Some(i) = acts.init_to_start {
            if let Some(c) = self.pod.spec.init_containers.get(i) {
                starts.push((c.clone(), if is_sidecar(c) { "sidecar" } else { "init" }));
            }
        }
        for &i in &acts.containers_to_start {
            if let Some(c) = self.pod.spec.containers.get(i) {
                starts.push((c.clone(), "regular"));
            }
        }
        for (c, kind) in starts {
            if let Some(d) = self.start_container(&c, kind, &sandbox_id, &sandbox_cfg, state, n) {
                wake = Some(wake.map_or(d, |x| x.min(d)));
            }
        }
        Ok(wake)
    }

    /// The pod IP probes connect to: the sandbox IP, or the host IP for hostNetwork pods.
    fn pod_ip(&self, state: &PodRuntimeState) -> String {
        if self.pod.spec.host_network {
            return self
                .ctx
                .settings
                .host_ips
                .first()
                .cloned()
                .unwrap_or_default();
        }
        state
            .newest_sandbox()
            .map(|s| s.ip.clone())
            .unwrap_or_default()
    }

    fn find_spec(&self, name: &str) -> Option<&Container> {
        self.pod
            .spec
            .containers
            .iter()
            .chain(&self.pod.spec.init_containers)
            .find(|c| c.name == name)
    }

    fn current_attempt(&self, state: &PodRuntimeState) -> u32 {
        state.newest_sandbox().map(|s| s.attempt).unwrap_or(0)
    }

    fn grace_seconds(&self, override_secs: Option<i64>) -> i64 {
        match override_secs {
            Some(g) => g.max(0),
            None => self
                .pod
                .spec
                .termination_grace_period_seconds
                .unwrap_or(30)
                .max(MIN_GRACE_SECONDS),
        }
    }

    fn log_dir(&self) -> PathBuf {
        self.ctx
            .settings
            .pod_logs_dir
            .join(pod_log_dir_name(&self.pod))
    }

    fn sandbox_config(&self, attempt: u32) -> PodSandboxConfig {
        let p = &self.pod;
        let mut labels = p.metadata.labels.clone();
        labels.insert(LABEL_POD_NAME.into(), p.metadata.name.clone());
        labels.insert(LABEL_POD_NAMESPACE.into(), p.metadata.namespace.clone());
        labels.insert(LABEL_POD_UID.into(), p.metadata.uid.clone());
        labels.insert(LABEL_MANAGED_BY.into(), "nanolet".into());
        let mut port_mappings = vec![];
        for c in &p.spec.containers {
            for port in &c.ports {
                let host_port = port.host_port.unwrap_or(0);
                if host_port == 0 {
                    continue;
                }
                port_mappings.push(PortMapping {
                    protocol: match port.protocol.as_str() {
                        "UDP" => Protocol::Udp,
                        "SCTP" => Protocol::Sctp,
                        _ => Protocol::Tcp,
                    },
                    container_port: port.container_port,
                    host_port,
                    host_ip: port.host_ip.clone(),
                });
            }
        }
        let hostname = if p.spec.host_network {
            String::new()
        } else if !p.spec.hostname.is_empty() {
            p.spec.hostname.clone()
        } else {
            p.metadata
                .name
                .chars()
                .take(63)
                .collect::<String>()
                .trim_end_matches(['-', '.'])
                .to_string()
        };
        PodSandboxConfig {
            name: p.metadata.name.clone(),
            namespace: p.metadata.namespace.clone(),
            uid: p.metadata.uid.clone(),
            attempt,
            hostname,
            log_directory: self.log_dir().to_string_lossy().into_owned(),
            host_network: p.spec.host_network,
            host_pid: p.spec.host_pid,
            host_ipc: p.spec.host_ipc,
            // Set in `execute` when a sandbox is created.
            dns: None,
            port_mappings,
            labels,
            annotations: p.metadata.annotations.clone(),
            cgroup_parent: crate::cm::pod_cgroup_parent(p, self.ctx.settings.cgroup_driver),
            share_pid: crate::api::security::share_process_namespace(p),
            security: crate::api::security::sandbox_security(p, &self.ctx.settings.root_dir),
            sysctls: crate::api::security::sysctls(p),
        }
    }

    fn create_sandbox(&mut self, cfg: &PodSandboxConfig) -> Result<String, SyncError> {
        let dir = self.log_dir();
        std::fs::create_dir_all(&dir).map_err(|source| SyncError::LogDir {
            pod: self.full_name.clone(),
            path: dir.display().to_string(),
            source,
        })?;
        info!(pod = %self.full_name, attempt = cfg.attempt, "creating pod sandbox");
        if self.ctx.settings.cgroup_driver == crate::cm::CgroupDriver::Cgroupfs {
            // The pod cgroup with the pod's totals, before anything runs in it.
            crate::cm::apply(&self.pod, std::path::Path::new("/sys/fs/cgroup"));
        }
        let id = self.rt().run_pod_sandbox(cfg).map_err(|e| self.wrap(e))?;
        self.pod_ip = if self.pod.spec.host_network {
            self.ctx
                .settings
                .host_ips
                .first()
                .cloned()
                .unwrap_or_default()
        } else {
            self.rt()
                .pod_sandbox_status(&id)
                .map(|s| s.ip)
                .unwrap_or_default()
        };
        Ok(id)
    }

    /// Ensure the image, create and start one container. Returns a retry delay when it could
    /// not (image pull backoff, create/start failure).
    fn start_container(
        &mut self,
        c: &Container,
        kind: &'static str,
        sandbox_id: &str,
        sandbox_cfg: &PodSandboxConfig,
        state: &PodRuntimeState,
        n: Now,
    ) -> Option<Duration> {
        let name = c.name.clone();
        // kubelet doBackOff: record the restart against the newest exited container's finish.
        if let Some(exited) = state.latest_exited(&name) {
            self.backoff
                .next(&backoff_key(&self.pod, c), n.instant_of(exited.finished_at));
        }
        if let Err(w) = self.ensure_image(c, n) {
            let retry = w.1;
            self.waiting.insert(name, w.0);
            return Some(retry);
        }
        let restart_count = state
            .latest(&name)
            .map(|l| l.restart_count + 1)
            .unwrap_or(0);
        let log_rel = format!("{name}/{restart_count}.log");
        let cdir = self.log_dir().join(&name);
        if let Err(e) = std::fs::create_dir_all(&cdir) {
            warn!(pod = %self.full_name, container = %name, error = %e, "creating container log directory");
        }
        let cfg = match self.container_config(c, kind, restart_count, log_rel) {
            Ok(cfg) => cfg,
            Err(w) => {
                warn!(pod = %self.full_name, container = %name, reason = %w.reason, "{}", w.message);
                self.waiting.insert(name, w);
                return Some(Duration::from_secs(5));
            }
        };
        info!(pod = %self.full_name, container = %name, restart_count, kind, "starting container");
        let id = match self.rt().create_container(sandbox_id, &cfg, sandbox_cfg) {
            Ok(id) => {
                self.ctx.store.events().record(
                    &crate::events::container_ref(&self.pod, &name),
                    crate::events::EventType::Normal,
                    "Created",
                    &format!("Created container {name}"),
                );
                id
            }
            Err(e) => {
                warn!(pod = %self.full_name, container = %name, error = %e, "create container failed");
                self.waiting.insert(
                    name,
                    WaitingReason {
                        reason: "CreateContainerError".into(),
                        message: e.message,
                    },
                );
                return Some(Duration::from_secs(2));
            }
        };
        if let Err(e) = self.rt().start_container(&id) {
            warn!(pod = %self.full_name, container = %name, error = %e, "start container failed");
            self.ctx.store.events().record(
                &crate::events::container_ref(&self.pod, &name),
                crate::events::EventType::Warning,
                "Failed",
                &format!("Error: {}", e.message),
            );
            self.waiting.insert(
                name,
                WaitingReason {
                    reason: "RunContainerError".into(),
                    message: e.message,
                },
            );
            return Some(Duration::from_secs(2));
        }
        self.waiting.remove(&name);
        self.ctx.store.events().record(
            &crate::events::container_ref(&self.pod, &name),
            crate::events::EventType::Normal,
            "Started",
            &format!("Started container {name}"),
        );
        self.link_legacy_log(&name, &id, &cfg.log_path);
        if let Some(post_start) = lifecycle_of(c).post_start {
            // The kubelet runs postStart right after start; if it fails the container is killed
            // (FailedPostStartHook) and restartPolicy decides what happens next.
            let timeout = Duration::from_secs(self.grace_seconds(None).max(30) as u64);
            if let Some(msg) = self.run_hook(&post_start, c, &id, timeout) {
                warn!(pod = %self.full_name, container = %name, "FailedPostStartHook: {msg}");
                self.kill_container(&id, &name, None, "FailedPostStartHook");
            }
        }
        None
    }

    fn ensure_image(&mut self, c: &Container, n: Now) -> Result<(), (WaitingReason, Duration)> {
        let image = c.image.as_str();
        let policy = c.image_pull_policy.as_str();
        let present = match self.rt().image_status(image) {
            Ok(p) => p.is_some(),
            Err(e) => {
                return Err((
                    WaitingReason {
                        reason: "ErrImagePull".into(),
                        message: e.to_string(),
                    },
                    Duration::from_secs(2),
                ));
            }
        };
        let must_pull = match policy {
            "Always" => true,
            "Never" => {
                if present {
                    return Ok(());
                }
                return Err((
                    WaitingReason {
                        reason: "ErrImageNeverPull".into(),
                        message: format!(
                            "Container image \"{image}\" is not present with pull policy of Never"
                        ),
                    },
                    self.ctx.settings.resync,
                ));
            }
            _ => !present,
        };
        if !must_pull {
            self.ctx.store.events().record(
                &crate::events::container_ref(&self.pod, &c.name),
                crate::events::EventType::Normal,
                "Pulled",
                &format!("Container image \"{image}\" already present on machine"),
            );
            return Ok(());
        }
        let key = format!("image:{}:{}", self.uid(), image);
        if let Some(rem) = self.image_backoff.remaining_since_update(&key, n.instant) {
            return Err((
                WaitingReason {
                    reason: "ImagePullBackOff".into(),
                    message: format!("Back-off pulling image \"{image}\""),
                },
                rem,
            ));
        }
        // imagePullSecrets (local store), then the node's config.json, else anonymous.
        let creds = crate::images::credentials::credentials_for(
            image,
            &self.pod.metadata.namespace,
            &crate::images::credentials::pull_secret_names(&self.pod.spec.extra),
            self.ctx.settings.store.as_ref(),
            self.ctx.settings.registry_config.as_ref(),
        );
        match crate::images::credentials::pull(self.rt(), image, &creds) {
            Ok(_) => {
                self.ctx.store.events().record(
                    &crate::events::container_ref(&self.pod, &c.name),
                    crate::events::EventType::Normal,
                    "Pulled",
                    &format!("Successfully pulled image \"{image}\""),
                );
                Ok(())
            }
            Err(e) if policy == "Always" && present => {
                // An air-gapped box cannot reach the registry, but the image is here: use it.
                warn!(pod = %self.full_name, container = %c.name, image, error = %e,
                    "pulling image failed; using the local copy");
                Ok(())
            }
            Err(e) => {
                // The kubelet's image manager stamps the back-off when the pull fails
                // (backOff.Next(key, Clock.Now())), not when the sync began: a slow sandbox
                // start before the pull must not shorten the 10 s.
                self.image_backoff.next(&key, Instant::now());
                let delay = self
                    .image_backoff
                    .delay(&key)
                    .unwrap_or(Duration::from_secs(10));
                warn!(pod = %self.full_name, container = %c.name, image, error = %e, "pulling image failed");
                self.ctx.store.events().record(
                    &crate::events::container_ref(&self.pod, &c.name),
                    crate::events::EventType::Warning,
                    "Failed",
                    &format!("Failed to pull image \"{image}\": {}", e.message),
                );
                // Sync again shortly so the status moves on to ImagePullBackOff while the
                // back-off runs (as the kubelet shows it); the next pull waits for `delay`.
                Err((
                    WaitingReason {
                        reason: "ErrImagePull".into(),
                        message: e.message,
                    },
                    delay.min(Duration::from_secs(1)),
                ))
            }
        }
    }

    fn container_config(
        &self,
        c: &Container,
        kind: &str,
        restart_count: u32,
        log_path: String,
    ) -> Result<ContainerConfig, WaitingReason> {
        let p = &self.pod;
        let (labels, ann) = self.container_metadata(c, kind, restart_count);
        // Environment (value, fieldRef, resourceFieldRef) with $(VAR) expansion, as the kubelet
        // builds it; a bad reference keeps the container waiting (CreateContainerConfigError).
        let env_ctx = self.env_context();
        let envs = resolve_env(p, c, &env_ctx).map_err(|e| WaitingReason {
            reason: "CreateContainerConfigError".into(),
            message: format!("spec.containers{{{}}}.{e}", c.name),
        })?;
        // Volumes: set up (idempotent) and mounted per volumeMounts; a failure keeps the
        // container in ContainerCreating with the kubelet's FailedMount text.
        let vctx = crate::volumes::VolumeContext {
            store: self.ctx.settings.store.clone(),
            env: env_ctx,
            fs_group: crate::api::security::fs_group(p),
        };
        let volumes = crate::volumes::prepare(p, &self.pod_dir(), &vctx)
            .and_then(|v| crate::volumes::mounts_for(c, &v, &envs))
            .map_err(|e| WaitingReason {
                reason: "ContainerCreating".into(),
                message: e.to_string(),
            })?;
        // Security context, and the kubelet's runAsNonRoot check against the image's user.
        let security = crate::api::security::container_security(p, c, &self.ctx.settings.root_dir);
        if crate::api::security::run_as_non_root(p, c) {
            let img = self.rt().image_status(&c.image).ok().flatten();
            let (uid, user) = img
                .map(|i| (i.uid, i.username))
                .unwrap_or((None, String::new()));
            crate::api::security::verify_run_as_non_root(p, c, uid, &user).map_err(|message| {
                WaitingReason {
                    reason: "CreateContainerConfigError".into(),
                    message,
                }
            })?;
        }
        let mut mounts = volumes;
        self.add_runtime_mounts(c, restart_count, &mut mounts);
        Ok(ContainerConfig {
            name: c.name.clone(),
            attempt: restart_count,
            image: c.image.clone(),
            command: expand_all(&c.command, &envs),
            args: expand_all(&c.args, &envs),
            working_dir: c.working_dir.clone(),
            envs,
            mounts,
            labels,
            annotations: ann,
            log_path,
            stdin: c.stdin,
            stdin_once: c.stdin_once,
            tty: c.tty,
            resources: Some(LinuxResources {
                oom_score_adj: crate::cm::oom_score_adj(p, c, crate::node::capacity().memory_bytes),
                ..linux_resources(c)
            }),
            security,
        })
    }

    /// The container's labels (pod, container, manager) and annotations (hash, restart count,
    /// termination message, grace period, type) that the pod worker reads back from the runtime.
    fn container_metadata(
        &self,
        c: &Container,
        kind: &str,
        restart_count: u32,
    ) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        let p = &self.pod;
        let mut labels = BTreeMap::new();
        labels.insert(LABEL_POD_NAME.to_string(), p.metadata.name.clone());
        labels.insert(
            LABEL_POD_NAMESPACE.to_string(),
            p.metadata.namespace.clone(),
        );
        labels.insert(LABEL_POD_UID.to_string(), p.metadata.uid.clone());
        labels.insert(LABEL_CONTAINER_NAME.to_string(), c.name.clone());
        labels.insert(LABEL_MANAGED_BY.to_string(), "nanolet".into());
        let mut ann = BTreeMap::new();
        ann.insert(ANN_CONTAINER_HASH.to_string(), container_hash(c));
        ann.insert(ANN_RESTART_COUNT.to_string(), restart_count.to_string());
        ann.insert(
            ANN_TERMINATION_MESSAGE_PATH.to_string(),
            c.termination_message_path.clone(),
        );
        ann.insert(
            ANN_TERMINATION_MESSAGE_POLICY.to_string(),
            c.termination_message_policy.clone(),
        );
        ann.insert(
            ANN_POD_TERMINATION_GRACE.to_string(),
            self.grace_seconds(None).to_string(),
        );
        ann.insert(ANN_CONTAINER_TYPE.to_string(), kind.to_string());
        (labels, ann)
    }

    /// Adds the mounts the kubelet adds itself: the pod's /etc/hosts (unless a volume mounts
    /// one) and the container's termination message file.
    fn add_runtime_mounts(&self, c: &Container, restart_count: u32, mounts: &mut Vec<Mount>) {
        if let Some(hosts) = self.hosts_file() {
            if !mounts.iter().any(|m| m.container_path == "/etc/hosts") {
                mounts.push(Mount {
                    container_path: "/etc/hosts".into(),
                    host_path: hosts.to_string_lossy().into_owned(),
                    readonly: false,
                    ..Default::default()
                });
            }
        }
        if !c.termination_message_path.is_empty() {
            let file = self.termination_message_file(&c.name, restart_count);
            let created = file
                .parent()
                .map(std::fs::create_dir_all)
                .unwrap_or(Ok(()))
                .and_then(|()| {
                    std::fs::write(&file, b"")?;
                    std::fs::set_permissions(
                        &file,
                        std::os::unix::fs::PermissionsExt::from_mode(0o666),
                    )
                });
            match created {
                Ok(()) => mounts.push(Mount {
                    container_path: c.termination_message_path.clone(),
                    host_path: file.to_string_lossy().into_owned(),
                    readonly: false,
                    ..Default::default()
                }),
                Err(e) => {
                    warn!(pod = %self.full_name, container = %c.name, error = %e, "creating the termination message file")
                }
            }
        }
    }

    fn link_legacy_log(&self, name: &str, id: &str, log_rel: &str) {
        let dir = &self.ctx.settings.container_logs_dir;
        if std::fs::create_dir_all(dir).is_err() {
            return;
        }
        let link = dir.join(format!(
            "{}_{}_{}-{}.log",
            self.pod.metadata.name, self.pod.metadata.namespace, name, id
        ));
        let target = self.log_dir().join(log_rel);
        let _ = std::fs::remove_file(&link);
        if let Err(e) = std::os::unix::fs::symlink(&target, &link) {
            debug!(pod = %self.full_name, container = %name, error = %e, "legacy log symlink");
        }
    }

    /// Stop every container (regular and init first, sidecars last), then the sandboxes.
    fn kill_pod(&self, state: &PodRuntimeState, grace_override: Option<i64>) {
        let running: Vec<_> = state.running().cloned().collect();
        let (sidecars, main): (Vec<_>, Vec<_>) =
            running.into_iter().partition(|c| c.kind == "sidecar");
        for group in [main, sidecars] {
            std::thread::scope(|s| {
                for c in &group {
                    s.spawn(move || {
                        self.kill_container(&c.id, &c.name, grace_override, "Stopping container")
                    });
                }
            });
        }
        for sb in state.sandboxes.iter().filter(|s| s.ready) {
            if let Err(e) = self.rt().stop_pod_sandbox(&sb.id) {
                if !e.is_not_found() {
                    warn!(pod = %self.full_name, sandbox = %sb.id, error = %e, "stopping sandbox failed");
                }
            }
        }
    }

    /// Kill one container the kubelet's way (kuberuntime `killContainer`): the grace period is
    /// the probe's own (`grace_override`, for liveness/startup kills) or the pod's; the preStop
    /// hook runs within it, the container gets what is left (at least 2 s: the kubelet's
    /// one-off extension); then SIGTERM (or the image's STOPSIGNAL) and SIGKILL at the end,
    /// through CRI StopContainer.
    fn kill_container(&self, id: &str, name: &str, grace_override: Option<i64>, reason: &str) {
        self.ctx.store.events().record(
            &crate::events::container_ref(&self.pod, name),
            crate::events::EventType::Normal,
            "Killing",
            &format!("Stopping container {name}"),
        );
        // kuberuntime setTerminationGracePeriod: a liveness/startup kill uses the probe's own
        // terminationGracePeriodSeconds (also for the preStop hook), else the pod's.
        let mut grace = grace_override
            .or(self.pod.spec.termination_grace_period_seconds)
            .unwrap_or(30)
            .max(0);
        if let Some(pre_stop) = self.find_spec(name).and_then(|c| lifecycle_of(c).pre_stop) {
            if grace > 0 {
                let started = Instant::now();
                let spec = self.find_spec(name).cloned().unwrap_or_default();
                info!(pod = %self.full_name, container = %name, "running preStop hook");
                if let Some(msg) =
                    self.run_hook(&pre_stop, &spec, id, Duration::from_secs(grace as u64))
                {
                    warn!(pod = %self.full_name, container = %name, "PreStopHook failed: {msg}");
                }
                grace -= started.elapsed().as_secs() as i64;
            }
        }
        // Always a minimal shutdown window (the kubelet's one-off 2 s).
        if grace < MIN_GRACE_SECONDS {
            grace = MIN_GRACE_SECONDS;
        }
        info!(pod = %self.full_name, container = %name, grace_seconds = grace, reason, "killing container");
        if let Err(e) = self
            .rt()
            .stop_container(id, Duration::from_secs(grace as u64))
        {
            if !e.is_not_found() {
                warn!(pod = %self.full_name, container = %name, error = %e, "stopping container failed");
            }
        }
    }

    /// Run a lifecycle hook. Returns the failure message, if it failed.
    fn run_hook(
        &self,
        h: &Handler,
        c: &Container,
        container_id: &str,
        timeout: Duration,
    ) -> Option<String> {
        let pod_ip = self.pod_ip.clone();
        let target = Target {
            runtime: self.rt(),
            container: c,
            container_id,
            pod_ip: &pod_ip,
        };
        match crate::prober::handlers::run(h, &target, timeout) {
            Ok(r) if r.is_success() => None,
            Ok(r) => Some(r.message),
            Err(e) => Some(e),
        }
    }

    /// The kubelet-managed /etc/hosts (`<root-dir>/pods/<uid>/etc-hosts`): for pod-network pods
    /// localhost, the pod's IP and hostname and hostAliases; for hostNetwork pods the node's file
    /// plus hostAliases (only when there are aliases).
    fn hosts_file(&self) -> Option<PathBuf> {
        let p = &self.pod;
        let content = if p.spec.host_network {
            let aliases = crate::api::dns::host_aliases(p);
            if aliases.is_empty() {
                return None;
            }
            std::fs::read_to_string("/etc/hosts").unwrap_or_default() + &aliases
        } else {
            let hostname = if p.spec.hostname.is_empty() {
                p.metadata.name.chars().take(63).collect()
            } else {
                p.spec.hostname.clone()
            };
            crate::api::dns::managed_hosts(p, &self.pod_ip, &hostname)
        };
        let path = self.pod_dir().join("etc-hosts");
        if std::fs::read_to_string(&path).ok().as_deref() != Some(content.as_str()) {
            let written = std::fs::create_dir_all(self.pod_dir())
                .and_then(|()| std::fs::write(&path, &content));
            if let Err(e) = written {
                warn!(pod = %self.full_name, error = %e, "writing the pod's /etc/hosts");
                return None;
            }
        }
        Some(path)
    }

    /// What env references and downward API volumes resolve against.
    fn env_context(&self) -> EnvContext {
        let cap = crate::node::capacity();
        EnvContext {
            pod_ips: if self.pod.spec.host_network {
                self.ctx.settings.host_ips.clone()
            } else if self.pod_ip.is_empty() {
                vec![]
            } else {
                vec![self.pod_ip.clone()]
            },
            host_ips: self.ctx.settings.host_ips.clone(),
            node_cpu_millis: cap.cpu_millis,
            node_memory_bytes: cap.memory_bytes,
            node_ephemeral_bytes: 0,
            store: self
                .ctx
                .settings
                .store
                .clone()
                .map(|s| Arc::new(s) as Arc<dyn crate::api::env::ConfigMapsAndSecrets>),
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
        let vctx = crate::volumes::VolumeContext {
            store: self.ctx.settings.store.clone(),
            env: self.env_context(),
            fs_group: crate::api::security::fs_group(&self.pod),
        };
        if let Err(e) = crate::volumes::prepare(&self.pod, &self.pod_dir(), &vctx) {
            debug!(pod = %self.full_name, error = %e, "refreshing volumes");
        }
    }

    /// `<root-dir>/pods/<uid>`: the pod's own directory (termination message files).
    fn pod_dir(&self) -> PathBuf {
        self.ctx.settings.root_dir.join("pods").join(self.uid())
    }

    fn termination_message_file(&self, name: &str, restart_count: u32) -> PathBuf {
        self.pod_dir()
            .join("containers")
            .join(name)
            .join(format!("termination-{restart_count}"))
    }

    /// The kubelet bind-mounts a host file at terminationMessagePath and reads it after the
    /// container exits (at most 4096 bytes); with FallbackToLogsOnError an empty message of a
    /// failed container is replaced by the log tail (80 lines, at most 2048 bytes).
    fn fill_termination_messages(&self, state: &mut PodRuntimeState) {
        for c in state
            .containers
            .iter_mut()
            .filter(|c| c.state == ContainerState::Exited)
        {
            let Some(spec) = self.find_spec(&c.name) else {
                continue;
            };
            let file = self.termination_message_file(&c.name, c.restart_count);
            let mut msg = read_capped(&file, 4096);
            if msg.is_empty()
                && c.exit_code != 0
                && spec.termination_message_policy == "FallbackToLogsOnError"
            {
                msg = log_tail(std::path::Path::new(&c.log_path), 80, 2048);
            }
            if !msg.is_empty() {
                c.message = msg;
            }
        }
    }

    /// Remove dead containers beyond the newest two per name (current + lastState), and old
    /// sandboxes that no kept container needs (the kubelet's GC with MaxPerPodContainer=1).
    fn gc(&self, state: &PodRuntimeState) {
        let mut kept: BTreeMap<&str, usize> = BTreeMap::new();
        let mut keep_sandboxes: Vec<&str> = state
            .newest_sandbox()
            .map(|s| s.id.as_str())
            .into_iter()
            .collect();
        for c in &state.containers {
            let n = kept.entry(c.name.as_str()).or_default();
            *n += 1;
            if *n <= 2 || c.state == ContainerState::Running {
                keep_sandboxes.push(&c.sandbox_id);
                continue;
            }
            debug!(pod = %self.full_name, container = %c.name, id = %c.id, "removing dead container");
            if let Err(e) = self.rt().remove_container(&c.id) {
                debug!(pod = %self.full_name, container = %c.name, error = %e, "removing dead container failed");
            }
        }
        for sb in &state.sandboxes {
            if !sb.ready && !keep_sandboxes.contains(&sb.id.as_str()) {
                if let Err(e) = self.rt().remove_pod_sandbox(&sb.id) {
                    debug!(pod = %self.full_name, sandbox = %sb.id, error = %e, "removing old sandbox failed");
                }
            }
        }
    }

    fn publish(&self, state: &PodRuntimeState, terminating: bool) {
        let old = self.ctx.store.get(self.uid()).and_then(|p| p.status);
        let inputs = StatusInputs {
            host_ips: self.ctx.settings.host_ips.clone(),
            now_nanos: now_unix_nanos(),
            start_time_nanos: self.start_time_nanos,
            waiting: self.waiting.clone(),
            failed_reason: self.failed_reason.clone(),
            terminating,
            probes: if terminating {
                BTreeMap::new()
            } else {
                self.ctx.prober.view(self.uid())
            },
        };
        let status = apistatus::compute(&self.pod, state, &inputs, old.as_ref());
        let mut pod = self.pod.clone();
        pod.status = Some(status);
        self.ctx.store.set_pod(pod);
    }

    /// Terminate: stop everything with the pod's grace period, remove containers, sandboxes and
    /// log files, and drop the pod from the status store.
    pub fn terminate(&mut self) {
        info!(pod = %self.full_name, "terminating pod");
        // No liveness kills while a pod is terminating.
        self.ctx.prober.remove_pod(self.uid());
        let mut attempts = 0;
        loop {
            match self.try_terminate() {
                Ok(()) => break,
                Err(e) => {
                    attempts += 1;
                    warn!(pod = %self.full_name, error = %e, attempts, "terminating pod failed; retrying");
                    // Runtime unavailable: retry with a capped backoff; the pod must not leak.
                    std::thread::sleep(Duration::from_secs((1u64 << attempts.min(5)).min(30)));
                }
            }
        }
        let _ = std::fs::remove_dir_all(self.log_dir());
        crate::cm::remove_pod_cgroups(self.uid());
        crate::volumes::teardown(&self.pod_dir());
        let _ = std::fs::remove_dir_all(self.pod_dir());
        self.remove_legacy_links();
        self.ctx.store.remove_pod(self.uid());
        info!(pod = %self.full_name, "pod terminated");
    }

    fn try_terminate(&mut self) -> Result<(), SyncError> {
        let state = observe_pod(self.rt(), self.uid()).map_err(|e| self.wrap(e))?;
        self.publish(&state, true);
        self.kill_pod(&state, None);
        let state = observe_pod(self.rt(), self.uid()).map_err(|e| self.wrap(e))?;
        self.remove_runtime_objects(&state)
    }

    /// Removes every container and sandbox of `state` (gone already is fine).
    fn remove_runtime_objects(&self, state: &PodRuntimeState) -> Result<(), SyncError> {
        for c in &state.containers {
            // A container whose start was interrupted (nanolet killed during StartContainer)
            // can be Created or Unknown in CRI while its task runs; RemoveContainer then fails
            // with "cannot delete running task" forever. Stop anything not Exited first (found
            // by the kill -9 churn test).
            if c.state != ContainerState::Exited {
                if let Err(e) = self.rt().stop_container(&c.id, Duration::ZERO) {
                    debug!(pod = %self.full_name, container = %c.name, error = %e, "stopping before removal");
                }
            }
            let gone = |r: Result<(), RuntimeError>| {
                r.or_else(|e| if e.is_not_found() { Ok(()) } else { Err(e) })
            };
            match gone(self.rt().remove_container(&c.id)) {
                Ok(()) => {}
                // An Exited container whose task still runs (StartContainer interrupted in
                // containerd 1.6): CRI StopContainer will not touch it, so kill and delete the
                // task through containerd's tasks API, then remove again.
                Err(e) if e.kind == ErrorKind::Other => match self.rt().remove_orphan_task(&c.id) {
                    Ok(true) => {
                        warn!(pod = %self.full_name, container = %c.name, id = %c.id, error = %e,
                            "killed a task the runtime reported as exited, to remove its container");
                        gone(self.rt().remove_container(&c.id)).map_err(|e| self.wrap(e))?;
                    }
                    Ok(false) => return Err(self.wrap(e)),
                    Err(e2) => {
                        debug!(pod = %self.full_name, container = %c.name, error = %e2, "removing orphan task");
                        return Err(self.wrap(e));
                    }
                },
                Err(e) => return Err(self.wrap(e)),
            }
        }
        for sb in &state.sandboxes {
            match self.rt().remove_pod_sandbox(&sb.id) {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(self.wrap(e)),
            }
        }
        Ok(())
    }

    fn remove_legacy_links(&self) {
        let prefix = format!(
            "{}_{}_",
            self.pod.metadata.name, self.pod.metadata.namespace
        );
        let dir = &self.ctx.settings.container_logs_dir;
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        let ours = self.log_dir();
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with(&prefix) {
                continue;
            }
            if std::fs::read_link(e.path()).is_ok_and(|t| t.starts_with(&ours)) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    pub fn first_seen(&self) -> Instant {
        self.first_seen
    }
}

/// CPU and memory limits to CRI resources, as the kubelet does for cgroup v1/v2
/// (shares from the request, CFS quota from the limit over a 100ms period).
pub fn linux_resources(c: &Container) -> LinuxResources {
    const PERIOD: i64 = 100_000;
    let milli = |m: &BTreeMap<String, serde_json::Value>, k: &str| {
        m.get(k)
            .and_then(|v| parse_quantity(v).ok())
            .map(|q| q.milli_value())
    };
    let cpu_req = milli(&c.resources.requests, "cpu").or_else(|| milli(&c.resources.limits, "cpu"));
    let cpu_lim = milli(&c.resources.limits, "cpu");
    let mem_lim = c
        .resources
        .limits
        .get("memory")
        .and_then(|v| parse_quantity(v).ok())
        .map(|q| q.value());
    let shares = match cpu_req {
        Some(m) if m > 0 => ((m * 1024) / 1000).max(2),
        _ => 2,
    };
    let quota = cpu_lim
        .map(|m| ((m * PERIOD) / 1000).max(1000))
        .unwrap_or(0);
    LinuxResources {
        cpu_period: if quota > 0 { PERIOD } else { 0 },
        cpu_quota: quota,
        cpu_shares: shares,
        memory_limit_in_bytes: mem_lim.unwrap_or(0),
        oom_score_adj: 0,
    }
}

/// Read at most `max` bytes of a file as text ("" when missing).
fn read_capped(path: &std::path::Path, max: usize) -> String {
    use std::io::Read;
    let mut buf = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(max as u64).read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// The last `lines` lines of a CRI-format log (`<time> <stream> <P|F> <text>`), joined as the
/// container wrote them, at most `max` bytes (the end is kept).
pub fn log_tail(path: &std::path::Path, lines: usize, max: usize) -> String {
    let Ok(text) = std::fs::read_to_string(path) else {
        return String::new();
    };
    let mut out = String::new();
    for l in text.lines() {
        let mut parts = l.splitn(4, ' ');
        let (_ts, _stream, tag, msg) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next().unwrap_or(""),
        );
        out.push_str(msg);
        if tag != Some("P") {
            out.push('\n');
        }
    }
    let all: Vec<&str> = out.lines().collect();
    let mut tail = all[all.len().saturating_sub(lines)..].join("\n");
    // A last line written without a newline (`echo -n DONE; exit 1`) stays without one, as
    // the kubelet's log reader returns it.
    if !tail.is_empty() && out.ends_with('\n') {
        tail.push('\n');
    }
    if tail.len() > max {
        let mut cut = tail.len() - max;
        while !tail.is_char_boundary(cut) {
            cut += 1;
        }
        tail = tail[cut..].to_string();
    }
    tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_tail_joins_partial_lines_and_keeps_the_end() {
        // FallbackToLogsOnError: the last 80 lines, at most 2048 bytes.
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("0.log");
        let mut body = String::new();
        for i in 0..100 {
            body.push_str(&format!(
                "2026-11-22T00:00:00.000000001Z stdout F line {i}\n"
            ));
        }
        body.push_str(
            "2026-11-22T00:00:00.1Z stderr P part-\n2026-11-22T00:00:00.2Z stderr F end\n",
        );
        std::fs::write(&f, body).expect("write");
        let t = log_tail(&f, 80, 2048);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 80);
        assert_eq!(lines[0], "line 21");
        assert_eq!(lines[79], "part-end");
        assert_eq!(log_tail(&f, 80, 12), "99\npart-end\n");
        assert!(log_tail(&dir.path().join("missing"), 80, 2048).is_empty());
        // A partial last line (no newline written) is returned without one.
        std::fs::write(&f, "2026-11-22T00:00:00.1Z stdout P DONE\n").expect("write");
        assert_eq!(log_tail(&f, 80, 2048), "DONE");
        std::fs::write(&f, "2026-11-22T00:00:00.1Z stdout F DONE\n").expect("write");
        assert_eq!(log_tail(&f, 80, 2048), "DONE\n");
    }
}
