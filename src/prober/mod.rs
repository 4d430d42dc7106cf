//! The prober: liveness, readiness and startup probes with the kubelet's timing semantics
//! (pkg/kubelet/prober/worker.go), and the lifecycle-hook runner.
//!
//! One scheduler thread keeps every probe's next due time; each probe run executes on a
//! bounded pool (`util::pool`: a slow exec or HTTP probe holds one thread, the pool grows
//! while runs wait) and reports back. A probe is never run again while its last run is out.
//! Results are kept per (pod, container, kind); the pod worker reads them each sync:
//! readiness and startup feed `ready`/`started`, a liveness or startup failure makes the
//! worker kill (and, per restartPolicy, restart) the container. A result change pokes the
//! sync loop so the worker reacts at once.
//!
//! Rules implemented:
//! - before a container's first result: readiness = failure, liveness = success, startup =
//!   not started;
//! - liveness and readiness wait until the startup probe succeeded; a succeeded startup probe
//!   is not run again for that container;
//! - nothing runs before `initialDelaySeconds` after the container started (so readiness is a
//!   failure until then);
//! - a result flips only after `successThreshold` / `failureThreshold` equal results in a row;
//! - after a liveness/startup failure the probe is on hold until a new container ID appears;
//! - the first run of a probe is jittered within its period when nanolet started less than a
//!   period ago (many probes after a restart must not fire at once), as the kubelet does;
//! - each status generation runs the readiness probe of a started, not-ready container at
//!   once ([`Prober::trigger_unready`], prober_manager.go UpdatePodStatus);
//! - a terminating pod's liveness and startup probes stop, its readiness probes go on until
//!   its containers stopped, their changes written to the status store directly
//!   ([`Prober::stop_liveness_and_startup`], kubelet.go SyncTerminatingPod);
//! - an HTTP redirect not followed is a success with a `ProbeWarning` event (prober.go).

pub mod handlers;
pub mod spec;

use crate::timeutil::now_unix_nanos;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use crate::api::{Container, Pod};
use crate::cri::Runtime;
use crate::util::pool::{Pool, PoolSize};

use handlers::{ProbeResult, Target};
pub use spec::ProbeKind;
use spec::{Probe, probe_of};

/// How many past results each probe keeps (shown in logs and, later, metrics).
const HISTORY: usize = 10;

/// A running container the prober should watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningContainer {
    pub name: String,
    pub id: String,
    /// Unix nanoseconds.
    pub started_at: i64,
}

/// What the probes say about one container, for the pod worker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeView {
    /// The container these results are about (a restarted container has no results yet).
    pub container_id: String,
    /// `Some` when the container has a readiness probe.
    pub ready: Option<bool>,
    /// `Some` when the container has a startup probe.
    pub started: Option<bool>,
    /// A liveness or startup failure asks for the container `id` to be killed.
    pub kill: Option<KillRequest>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KillRequest {
    pub container_id: String,
    /// `Container c failed liveness probe, will be restarted`.
    pub message: String,
    /// The probe's own terminationGracePeriodSeconds, which overrides the pod's.
    pub grace_override: Option<i64>,
}

/// One past probe result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    /// Unix nanoseconds.
    pub at: i64,
    pub success: bool,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    uid: String,
    container: String,
    kind: ProbeKind,
}

struct Worker {
    spec: Probe,
    container: Container,
    pod_name: String,
    container_id: String,
    started_at: i64,
    pod_ip: String,
    next: Instant,
    in_flight: bool,
    /// The published result; None = initial value.
    result: Option<bool>,
    last: Option<bool>,
    run: i32,
    on_hold: bool,
    /// The pod is terminating: a readiness result goes straight to the status store (the
    /// pod worker is busy killing the pod).
    terminating: bool,
    /// The jittered first run after nanolet's start (a trigger does not hasten it: the
    /// kubelet's worker sleeps the jitter before it reads a trigger).
    jitter_until: Option<Instant>,
    history: VecDeque<HistoryEntry>,
    total: BTreeMap<&'static str, u64>,
}

/// What one probe run needs (a snapshot taken when it is due).
struct Job {
    spec: Probe,
    container: Container,
    container_id: String,
    pod_ip: String,
}

enum Cmd {
    Wake,
    Done {
        key: Key,
        container_id: String,
        result: Result<ProbeResult, handlers::HandlerError>,
    },
}

struct State {
    workers: BTreeMap<Key, Worker>,
}

pub struct Prober {
    state: Mutex<State>,
    cmd: Mutex<Sender<Cmd>>,
    runtime: Arc<dyn Runtime>,
    notify: Mutex<Option<ResultUpdates>>,
    /// Where `Unhealthy` events go (set by the agent).
    events: Mutex<Option<Arc<crate::status::StatusStore>>>,
    /// Where a terminating pod's readiness changes go (set by the agent).
    readiness_writer: Mutex<Option<ReadinessWriter>>,
    started: Instant,
    /// Tests: no jittered first runs after the start.
    no_start_jitter: AtomicBool,
}

/// A cheap pseudo-random fraction in [0, 1) for jitter (no RNG crate needed).
fn jitter_fraction(seed: &Key) -> f64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ (now_unix_nanos() as u64);
    for b in seed.uid.bytes().chain(seed.container.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// Called with (pod UID, container ID, ready) when a readiness result of a terminating pod
/// changes: the status manager's SetContainerReadiness (the agent writes the status store).
pub type ReadinessWriter = Box<dyn Fn(&str, &str, bool) + Send>;

/// Called with a pod's UID when one of its probe results changes (the agent connects it to the
/// sync loop; upstream's results manager `Updates()` channel).
pub type ResultUpdates = Box<dyn Fn(String) + Send>;

impl Prober {
    /// Start the scheduler thread. `notify` is called when a result changes.
    pub fn start(runtime: Arc<dyn Runtime>, notify: Option<ResultUpdates>) -> Arc<Prober> {
        let (tx, rx) = channel();
        let p = Arc::new(Prober {
            state: Mutex::new(State {
                workers: BTreeMap::new(),
            }),
            cmd: Mutex::new(tx),
            runtime,
            notify: Mutex::new(notify),
            events: Mutex::new(None),
            readiness_writer: Mutex::new(None),
            started: Instant::now(),
            no_start_jitter: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&p);
        let spawned = std::thread::Builder::new()
            .name("prober".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                scheduler(weak, rx);
            });
        if let Err(e) = spawned {
            warn!(error = %e, "cannot start the prober thread; probes will not run");
        }
        p
    }

    /// Tests: first runs are not jittered although nanolet has just started.
    #[cfg(test)]
    pub(crate) fn disable_start_jitter(&self) {
        self.no_start_jitter.store(true, Ordering::Relaxed);
    }

    /// Send a terminating pod's readiness changes here.
    pub fn set_readiness_writer(&self, writer: ReadinessWriter) {
        if let Ok(mut w) = self.readiness_writer.lock() {
            *w = Some(writer);
        }
    }

    /// Record probe failures as `Unhealthy` events in this store.
    pub fn set_event_store(&self, store: Arc<crate::status::StatusStore>) {
        if let Ok(mut e) = self.events.lock() {
            *e = Some(store);
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wake(&self) {
        if let Ok(tx) = self.cmd.lock() {
            let _ = tx.send(Cmd::Wake);
        }
    }

    /// Make the probes of `pod` match its running containers.
    pub fn sync_pod(&self, pod: &Pod, running: &[RunningContainer], pod_ip: &str) {
        let uid = &pod.metadata.uid;
        let pod_name = format!("{}/{}", pod.metadata.namespace, pod.metadata.name);
        let now = Instant::now();
        let mut wanted: Vec<Key> = vec![];
        {
            let mut st = self.lock();
            for c in pod
                .spec
                .init_containers
                .iter()
                .filter(|c| crate::api::helpers::is_sidecar(c))
                .chain(&pod.spec.containers)
            {
                let Some(rc) = running.iter().find(|r| r.name == c.name) else {
                    continue;
                };
                for kind in ProbeKind::ALL {
                    let Some(spec) = probe_of(c, kind) else {
                        continue;
                    };
                    let key = Key {
                        uid: uid.clone(),
                        container: c.name.clone(),
                        kind,
                    };
                    wanted.push(key.clone());
                    match st.workers.get_mut(&key) {
                        Some(w) => {
                            if w.container_id != rc.id {
                                // A new container: start over.
                                w.container_id = rc.id.clone();
                                w.started_at = rc.started_at;
                                w.result = None;
                                w.last = None;
                                w.run = 0;
                                w.on_hold = false;
                                w.next = now;
                                w.jitter_until = None;
                            }
                            w.spec = spec;
                            w.container = c.clone();
                            w.pod_ip = pod_ip.to_string();
                        }
                        None => {
                            let period = Duration::from_secs(spec.period_seconds as u64);
                            let next = if self.started.elapsed() < period
                                && !self.no_start_jitter.load(Ordering::Relaxed)
                            {
                                now + period.mul_f64(jitter_fraction(&key))
                            } else {
                                now
                            };
                            st.workers.insert(
                                key,
                                Worker {
                                    spec,
                                    container: c.clone(),
                                    pod_name: pod_name.clone(),
                                    container_id: rc.id.clone(),
                                    started_at: rc.started_at,
                                    pod_ip: pod_ip.to_string(),
                                    next,
                                    in_flight: false,
                                    result: None,
                                    last: None,
                                    run: 0,
                                    on_hold: false,
                                    terminating: false,
                                    jitter_until: Some(next).filter(|n| *n > now),
                                    history: VecDeque::new(),
                                    total: BTreeMap::new(),
                                },
                            );
                        }
                    }
                }
            }
            st.workers
                .retain(|k, _| k.uid != *uid || wanted.contains(k));
        }
        self.wake();
    }

    /// Stop probing the pod: its containers are stopped (kubelet.go SyncTerminatingPod calls
    /// the prober manager's RemovePod after killPod) or it is terminal.
    pub fn remove_pod(&self, uid: &str) {
        self.lock().workers.retain(|k, _| k.uid != uid);
    }

    /// The pod starts terminating (prober_manager.go StopLivenessAndStartup, before killPod):
    /// liveness and startup probes stop, readiness probes go on until the containers stopped
    /// ([`Prober::remove_pod`]), each result change written to the status store at once. A
    /// stopped startup probe no longer holds the container back: with neither its worker nor
    /// its result the kubelet's `isContainerStarted` says started (the worker's "pod deletion
    /// requested" path sets its last result to Success), so readiness is no longer gated.
    pub fn stop_liveness_and_startup(&self, uid: &str) {
        let mut st = self.lock();
        st.workers
            .retain(|k, _| k.uid != uid || k.kind != ProbeKind::Liveness);
        for (k, w) in st.workers.iter_mut() {
            if k.uid != uid {
                continue;
            }
            w.terminating = true;
            if k.kind == ProbeKind::Startup {
                w.result = Some(true);
                w.on_hold = true;
            }
        }
    }

    /// prober_manager.go UpdatePodStatus: a started container whose readiness probe has not
    /// (yet) succeeded gets an immediate readiness run ("Trigger an immediate run of the
    /// readinessProbe to update ready state"), so a container turns ready as soon as its
    /// startup probe succeeded rather than a readiness period later. The periodic schedule
    /// restarts from the manual run (the worker's `probeTicker.Reset`).
    pub fn trigger_unready(&self, uid: &str) {
        let now = Instant::now();
        let mut triggered = false;
        {
            let mut st = self.lock();
            let not_started: Vec<String> = st
                .workers
                .iter()
                .filter(|(k, w)| {
                    k.uid == uid && k.kind == ProbeKind::Startup && w.result != Some(true)
                })
                .map(|(k, _)| k.container.clone())
                .collect();
            for (k, w) in st.workers.iter_mut() {
                // A first run still jittered after nanolet's start runs at the jitter's end.
                let at = w.jitter_until.map_or(now, |j| j.max(now));
                if k.uid != uid
                    || k.kind != ProbeKind::Readiness
                    || w.result == Some(true)
                    || w.in_flight
                    || w.next <= at
                    || not_started.contains(&k.container)
                {
                    continue;
                }
                w.next = at;
                triggered = true;
            }
        }
        if triggered {
            self.wake();
        }
    }

    /// The probes' verdict per container of the pod.
    pub fn view(&self, uid: &str) -> BTreeMap<String, ProbeView> {
        let st = self.lock();
        let mut out: BTreeMap<String, ProbeView> = BTreeMap::new();
        for (k, w) in st.workers.range(
            Key {
                uid: uid.to_string(),
                container: String::new(),
                kind: ProbeKind::Liveness,
            }..,
        ) {
            if k.uid != uid {
                break;
            }
            let v = out.entry(k.container.clone()).or_default();
            v.container_id = w.container_id.clone();
            match k.kind {
                ProbeKind::Startup => {
                    v.started = Some(w.result == Some(true));
                    if w.result == Some(false) {
                        v.kill = Some(KillRequest {
                            container_id: w.container_id.clone(),
                            message: format!(
                                "Container {} failed startup probe, will be restarted",
                                k.container
                            ),
                            grace_override: w.spec.termination_grace_period_seconds,
                        });
                    }
                }
                ProbeKind::Readiness => v.ready = Some(w.result == Some(true)),
                ProbeKind::Liveness => {
                    if w.result == Some(false) && v.kill.is_none() {
                        v.kill = Some(KillRequest {
                            container_id: w.container_id.clone(),
                            message: format!(
                                "Container {} failed liveness probe, will be restarted",
                                k.container
                            ),
                            grace_override: w.spec.termination_grace_period_seconds,
                        });
                    }
                }
            }
        }
        // Readiness waits for startup.
        for v in out.values_mut() {
            if v.started == Some(false) && v.ready.is_some() {
                v.ready = Some(false);
            }
        }
        out
    }

    /// Recent results of one probe, oldest first.
    pub fn history(&self, uid: &str, container: &str, kind: ProbeKind) -> Vec<HistoryEntry> {
        let key = Key {
            uid: uid.to_string(),
            container: container.to_string(),
            kind,
        };
        self.lock()
            .workers
            .get(&key)
            .map(|w| w.history.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Counters per (pod, container, kind, result) for metrics: ("successful"/"failed"/...).
    pub fn totals(&self) -> Vec<crate::metrics::ProbeTotal> {
        let st = self.lock();
        let mut v = vec![];
        for (k, w) in &st.workers {
            let (ns, name) = w.pod_name.split_once('/').unwrap_or(("", &w.pod_name));
            for (res, n) in &w.total {
                v.push(crate::metrics::ProbeTotal {
                    namespace: ns.to_string(),
                    pod: name.to_string(),
                    container: k.container.clone(),
                    probe_type: k.kind.title(),
                    result: res,
                    count: *n,
                });
            }
        }
        v
    }

    /// Take due probes: mark them in flight and return what to run. Returns the next due time.
    fn take_due(&self, now: Instant) -> (Vec<(Key, Job)>, Option<Instant>) {
        let mut st = self.lock();
        let now_wall = now_unix_nanos();
        let started_ok: BTreeMap<(String, String), bool> = st
            .workers
            .iter()
            .filter(|(k, _)| k.kind == ProbeKind::Startup)
            .map(|(k, w)| ((k.uid.clone(), k.container.clone()), w.result == Some(true)))
            .collect();
        let mut jobs = vec![];
        let mut next: Option<Instant> = None;
        for (k, w) in st.workers.iter_mut() {
            if w.in_flight {
                continue;
            }
            if w.next <= now {
                let period = Duration::from_secs(w.spec.period_seconds as u64);
                let gated = k.kind != ProbeKind::Startup
                    && started_ok.get(&(k.uid.clone(), k.container.clone())) == Some(&false);
                let startup_done = k.kind == ProbeKind::Startup && w.result == Some(true);
                let since_start =
                    Duration::from_nanos(now_wall.saturating_sub(w.started_at).max(0) as u64);
                let delayed =
                    since_start < Duration::from_secs(w.spec.initial_delay_seconds as u64);
                if gated || startup_done || w.on_hold || delayed {
                    w.next = if delayed && !gated {
                        now + (Duration::from_secs(w.spec.initial_delay_seconds as u64)
                            - since_start)
                            .min(period)
                    } else {
                        now + period
                    };
                } else {
                    w.in_flight = true;
                    w.next = now + period;
                    jobs.push((
                        k.clone(),
                        Job {
                            spec: w.spec.clone(),
                            container: w.container.clone(),
                            container_id: w.container_id.clone(),
                            pod_ip: w.pod_ip.clone(),
                        },
                    ));
                    continue;
                }
            }
            next = Some(next.map_or(w.next, |n| n.min(w.next)));
        }
        (jobs, next)
    }

    fn apply(
        &self,
        key: Key,
        container_id: String,
        result: Result<ProbeResult, handlers::HandlerError>,
    ) {
        let mut changed = false;
        {
            let mut st = self.lock();
            let Some(w) = st.workers.get_mut(&key) else {
                return;
            };
            w.in_flight = false;
            if w.container_id != container_id {
                return;
            }
            let r = match result {
                Ok(r) => r,
                Err(e) => {
                    // Prober errors are thrown away, as in the kubelet.
                    debug!(pod = %w.pod_name, container = %key.container, probe = key.kind.title(), error = %e, "probe error");
                    *w.total.entry("unknown").or_default() += 1;
                    return;
                }
            };
            let success = r.is_success();
            *w.total
                .entry(if success { "successful" } else { "failed" })
                .or_default() += 1;
            if w.history.len() == HISTORY {
                w.history.pop_front();
            }
            w.history.push_back(HistoryEntry {
                at: now_unix_nanos(),
                success,
                message: r.message.clone(),
            });
            // prober.go probe: a Failure records `Unhealthy` "<Kind> probe failed: <output>", a
            // Warning (an HTTP redirect not followed) `ProbeWarning` "<Kind> probe warning:
            // <output>" and counts as a success; both Warning events on the container.
            let event = match r.outcome {
                handlers::Outcome::Failure => Some(("Unhealthy", "failed")),
                handlers::Outcome::Warning => Some(("ProbeWarning", "warning")),
                handlers::Outcome::Success => None,
            };
            if let Some((reason, what)) = event {
                let message = format!("{} probe {what}: {}", key.kind.title(), r.message);
                warn!(pod = %w.pod_name, container = %key.container, "{message}");
                if let Some(store) = self.events.lock().ok().and_then(|e| e.clone()) {
                    let (ns, name) = w.pod_name.split_once('/').unwrap_or(("", &w.pod_name));
                    store.events().record(
                        &crate::events::PodRef::pod(ns, name, &key.uid)
                            .container(&key.container, false),
                        crate::events::EventType::Warning,
                        reason,
                        &message,
                    );
                }
            }
            if w.last == Some(success) {
                w.run += 1;
            } else {
                w.last = Some(success);
                w.run = 1;
            }
            let threshold = if success {
                w.spec.success_threshold
            } else {
                w.spec.failure_threshold
            };
            if w.run < threshold {
                return;
            }
            if w.result != Some(success) {
                changed = true;
                if key.kind != ProbeKind::Liveness || !success {
                    info!(pod = %w.pod_name, container = %key.container, probe = key.kind.title(), success, "probe result changed");
                }
            }
            w.result = Some(success);
            if changed && w.terminating && key.kind == ProbeKind::Readiness {
                // kubelet.go syncLoopIteration: a readiness update goes to the status manager
                // (SetContainerReadiness) whatever the pod worker is doing.
                if let Ok(writer) = self.readiness_writer.lock() {
                    if let Some(write) = writer.as_ref() {
                        write(&key.uid, &w.container_id, success);
                    }
                }
            }
            if !success && key.kind != ProbeKind::Readiness {
                // Restart needed: hold until a new container ID shows up.
                w.on_hold = true;
                w.run = 0;
            }
        }
        if changed {
            if let Ok(n) = self.notify.lock() {
                if let Some(notify) = n.as_ref() {
                    notify(key.uid);
                }
            }
        }
    }
}

/// Probe runs go to a bounded pool: one kept thread, more while runs wait (a slow exec or
/// HTTP probe holds one thread until its timeoutSeconds), at most `PROBE_THREADS`.
const PROBE_THREADS: PoolSize = PoolSize { min: 1, max: 16 };

fn scheduler(prober: std::sync::Weak<Prober>, rx: Receiver<Cmd>) {
    let pool = Pool::new("probe", PROBE_THREADS, Duration::from_secs(30), 1024 * 1024);
    while run_due(&prober, &rx, &pool) {}
    pool.stop();
}

/// Hand the due probes to the pool, then wait for the next due time, a result or a wake-up.
/// False when the prober is gone.
fn run_due(prober: &std::sync::Weak<Prober>, rx: &Receiver<Cmd>, pool: &Pool) -> bool {
    let Some(p) = prober.upgrade() else {
        return false;
    };
    let (jobs, next) = p.take_due(Instant::now());
    for (key, w) in jobs {
        let runtime = p.runtime.clone();
        let Ok(tx) = p.cmd.lock().map(|tx| tx.clone()) else {
            return false;
        };
        let submitted = pool.submit(move || {
            let target = Target {
                runtime: runtime.as_ref(),
                container: &w.container,
                container_id: &w.container_id,
                pod_ip: &w.pod_ip,
            };
            let timeout = Duration::from_secs(w.spec.timeout_seconds as u64);
            let result = handlers::run(&w.spec.handler, &target, timeout);
            let _ = tx.send(Cmd::Done {
                key,
                container_id: w.container_id.clone(),
                result,
            });
        });
        if let Err(e) = submitted {
            warn!(error = %e, "cannot run a probe");
        }
    }
    drop(p);
    // With no probe due the thread sleeps until a pod's probes change (`Cmd::Wake`).
    let msg = match next {
        Some(n) => rx.recv_timeout(n.saturating_duration_since(Instant::now())),
        None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
    };
    match msg {
        Ok(Cmd::Wake) | Err(RecvTimeoutError::Timeout) => true,
        Ok(Cmd::Done {
            key,
            container_id,
            result,
        }) => {
            if let Some(p) = prober.upgrade() {
                p.apply(key, container_id, result);
            }
            true
        }
        Err(RecvTimeoutError::Disconnected) => false,
    }
}
