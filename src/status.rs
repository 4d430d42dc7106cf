//! The authoritative pod status cache: what `/pods`, `/healthz` and the CLI read.
//! Written by the sync loop and pod workers; read by the HTTP server. Cheap clones under a lock.
//! Also owns the event ring and the metrics registry, so every component that has the store can
//! record into them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::api::Pod;
use crate::config::ManifestError;
use crate::events::EventRecorder;
use crate::metrics::Metrics;

/// One named health check for `/healthz`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HealthCheck {
    pub name: String,
    pub ok: bool,
    pub message: String,
}

/// Why the container runtime cannot run pods, as the runtime status check found it
/// (`kubelet::runtime_status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeProblem {
    /// One line: what is wrong.
    pub message: String,
    /// The kubelet marks the node NotReady for it (its runtimeState's runtime and network
    /// errors: RuntimeReady or NetworkReady false, no CRI).
    pub node_not_ready: bool,
}

#[derive(Default)]
struct Inner {
    /// By pod UID: the pod as desired, with `status` filled in. Boxed: a B-tree node holds 11
    /// values inline, and a `Pod` is large (most of 120 KiB of nodes at 100 pods were slack;
    /// docs/benchmarks/heap-profile.md).
    pods: BTreeMap<String, Box<Pod>>,
    /// UIDs whose start was observed for `kubelet_pod_start_duration_seconds`.
    started: std::collections::BTreeSet<String>,
    manifest_errors: Vec<ManifestError>,
    last_sync: Option<Instant>,
    last_relist: Option<Instant>,
    runtime_error: Option<String>,
    /// What the runtime status check found wrong with the runtime's configuration.
    runtime_problems: Vec<RuntimeProblem>,
    /// Whether the runtime's default handler supports user namespaces, as the runtime status
    /// check last read it (None: not read yet).
    runtime_user_namespaces: Option<bool>,
    /// Node pressure conditions currently true (from the eviction manager), with since when.
    node_conditions: BTreeMap<&'static str, std::time::SystemTime>,
    /// The node shutdown manager is stopping pods for a shutdown.
    shutting_down: bool,
}

pub struct StatusStore {
    inner: Mutex<Inner>,
    /// How long the sync loop may be silent before healthz fails.
    sync_deadline: std::time::Duration,
    events: EventRecorder,
    metrics: Arc<Metrics>,
}

impl StatusStore {
    pub fn new(sync_deadline: std::time::Duration) -> Self {
        StatusStore {
            inner: Mutex::new(Inner::default()),
            sync_deadline,
            events: EventRecorder::new(),
            metrics: Arc::new(Metrics::new()),
        }
    }

    /// The event ring served on `/api/v1/events`: pod workers record here with
    /// `store.events().record(&PodRef, EventType, reason, message)`.
    pub fn events(&self) -> &EventRecorder {
        &self.events
    }

    /// nanolet's metrics registry (`/metrics`).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A poisoned lock only means another thread panicked mid-update; the data is plain
        // values, so keep serving it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// All pods with their status, sorted by namespace/name.
    pub fn pods(&self) -> Vec<Pod> {
        let mut v: Vec<Pod> = self.lock().pods.values().map(|p| Pod::clone(p)).collect();
        v.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        v
    }

    pub fn get(&self, uid: &str) -> Option<Pod> {
        self.lock().pods.get(uid).map(|p| Pod::clone(p))
    }

    pub fn set_pod(&self, pod: Pod) {
        let uid = pod.metadata.uid.clone();
        let start = first_run(&pod);
        let mut g = self.lock();
        if let Some(took) = start {
            if g.started.insert(uid.clone()) {
                self.metrics.observe_pod_start(took);
            }
        }
        g.pods.insert(uid, Box::new(pod));
    }

    /// Change a stored pod in place (e.g. one container's readiness while its pod worker is
    /// busy). Returns whether the pod was there.
    pub fn update_pod(&self, uid: &str, f: impl FnOnce(&mut Pod)) -> bool {
        let mut g = self.lock();
        match g.pods.get_mut(uid) {
            Some(pod) => {
                f(pod);
                true
            }
            None => false,
        }
    }

    pub fn remove_pod(&self, uid: &str) {
        let mut g = self.lock();
        g.pods.remove(uid);
        g.started.remove(uid);
    }

    pub fn uids(&self) -> Vec<String> {
        self.lock().pods.keys().cloned().collect()
    }

    pub fn manifest_errors(&self) -> Vec<ManifestError> {
        self.lock().manifest_errors.clone()
    }

    pub fn set_manifest_errors(&self, errors: Vec<ManifestError>) {
        self.lock().manifest_errors = errors;
    }

    /// The sync loop calls this on every iteration.
    pub fn mark_sync(&self) {
        self.lock().last_sync = Some(Instant::now());
    }

    /// PLEG calls this after every successful relist.
    pub fn mark_relist(&self) {
        let mut g = self.lock();
        g.last_relist = Some(Instant::now());
        g.runtime_error = None;
    }

    /// PLEG calls this when a relist failed: the runtime did not answer (shown by healthz).
    pub fn mark_runtime_error(&self, error: &dyn std::fmt::Display) {
        self.lock().runtime_error = Some(error.to_string());
    }

    /// The runtime status check publishes what keeps the runtime from running pods (empty:
    /// nothing it knows of).
    pub fn set_runtime_problems(&self, problems: Vec<RuntimeProblem>) {
        self.lock().runtime_problems = problems;
    }

    pub fn runtime_problems(&self) -> Vec<RuntimeProblem> {
        self.lock().runtime_problems.clone()
    }

    /// The runtime status check publishes whether the runtime's default handler supports user
    /// namespaces (CRI `Status` runtime handlers), read at every check.
    pub fn set_runtime_user_namespaces(&self, supported: bool) {
        self.lock().runtime_user_namespaces = Some(supported);
    }

    pub fn runtime_user_namespaces(&self) -> Option<bool> {
        self.lock().runtime_user_namespaces
    }

    /// The eviction manager publishes the pressure conditions that are true now.
    pub fn set_node_conditions(&self, conditions: &[crate::api::helpers::NodeCondition]) {
        let mut g = self.lock();
        let now = std::time::SystemTime::now();
        let names: Vec<&'static str> = conditions.iter().map(|c| c.as_str()).collect();
        g.node_conditions.retain(|k, _| names.contains(k));
        for n in names {
            g.node_conditions.entry(n).or_insert(now);
        }
    }

    /// The node is shutting down (`nodeshutdown`): admission refuses pods, Ready is False.
    pub fn set_shutting_down(&self, shutting_down: bool) {
        self.lock().shutting_down = shutting_down;
    }

    pub fn shutting_down(&self) -> bool {
        self.lock().shutting_down
    }

    /// Pressure conditions that are true ("MemoryPressure", "DiskPressure", "PIDPressure"),
    /// with the time each became true.
    pub fn node_conditions(&self) -> BTreeMap<&'static str, std::time::SystemTime> {
        self.lock().node_conditions.clone()
    }

    /// Checks behind `/healthz`: the sync loop ran recently, the runtime answered its last call,
    /// PLEG relisted within 3 minutes (the kubelet's "PLEG is not healthy" threshold).
    pub fn health(&self) -> Vec<HealthCheck> {
        let g = self.lock();
        let now = Instant::now();
        let sync_ok = g
            .last_sync
            .is_some_and(|t| now.duration_since(t) <= self.sync_deadline);
        let pleg_ok = g
            .last_relist
            .is_some_and(|t| now.duration_since(t) <= std::time::Duration::from_secs(180));
        vec![
            HealthCheck {
                name: "syncloop".into(),
                ok: sync_ok,
                message: match g.last_sync {
                    None => "sync loop has not run yet".into(),
                    Some(t) => format!("last sync {:.1}s ago", now.duration_since(t).as_secs_f64()),
                },
            },
            HealthCheck {
                name: "runtime".into(),
                ok: g.runtime_error.is_none() && g.last_relist.is_some(),
                message: match (&g.runtime_error, g.last_relist) {
                    (Some(e), _) => format!("container runtime is down: {e}"),
                    (None, None) => "container runtime not contacted yet".into(),
                    (None, Some(_)) => "container runtime answers".into(),
                },
            },
            HealthCheck {
                name: "pleg".into(),
                ok: pleg_ok,
                message: match g.last_relist {
                    None => "PLEG has not relisted yet".into(),
                    Some(t) => format!(
                        "last relist {:.1}s ago",
                        now.duration_since(t).as_secs_f64()
                    ),
                },
            },
        ]
    }
}

/// For a pod whose regular containers all run: how long after it was first seen
/// (`kubernetes.io/config.seen`) it started running. `None` otherwise.
fn first_run(pod: &Pod) -> Option<std::time::Duration> {
    let st = pod.status.as_ref()?;
    if st.phase != "Running"
        || st.container_statuses.len() != pod.spec.containers.len()
        || st
            .container_statuses
            .iter()
            .any(|c| c.state.running.is_none())
    {
        return None;
    }
    let seen = pod
        .metadata
        .annotations
        .get("kubernetes.io/config.seen")
        .and_then(|s| crate::timeutil::parse_rfc3339(s))?;
    std::time::SystemTime::now().duration_since(seen).ok()
}
