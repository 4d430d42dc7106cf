//! PLEG, the pod lifecycle event generator: relists the runtime (ListPodSandbox +
//! ListContainers) periodically (every second while containerd's event stream is down, every
//! [`EVENTED_RELIST_PERIOD`] while it is live), observes each pod that changed once and stores
//! it in the pod cache ([`PodCache`], the kubelet's generic.go `updateCache` with the timestamp
//! taken before the runtime calls), bumps the cache's global timestamp, and tells the sync loop
//! which pods changed. A containerd task exit or start of a container or sandbox the cache
//! knows updates that one pod's entry (one targeted observation, no relist: the kubelet's
//! evented PLEG); an unknown id relists at once. A pod whose observation failed is re-inspected
//! at the next relist. A lost event costs at most one relist period.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use crate::cri::{
    ANN_POD_TERMINATION_GRACE, LABEL_MANAGED_BY, LABEL_POD_NAME, LABEL_POD_NAMESPACE,
    LABEL_POD_UID, Runtime, RuntimeEvent,
};
use crate::kuberuntime::cache::PodCache;
use crate::kuberuntime::state::{PodRuntimeState, observe_pod};
use crate::status::StatusStore;

/// The kubelet's generic PLEG relist period.
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);

/// What the PLEG reports.
#[derive(Debug, Clone, PartialEq)]
pub enum PlegEvent {
    /// These pod UIDs changed.
    PodsChanged(Vec<String>),
    /// The full view of pods nanolet owns in the runtime: uid -> (namespace, name, grace).
    RuntimePods(BTreeMap<String, RuntimePodRef>),
}

/// Where the PLEG sends its events (`kubelet::wiring` connects it to the sync loop): false when the
/// receiver is gone, which ends the PLEG.
pub type PlegSink = Box<dyn Fn(PlegEvent) -> bool + Send>;

/// Enough about a runtime pod to terminate it without its manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimePodRef {
    pub namespace: String,
    pub name: String,
    pub grace_seconds: Option<i64>,
}

impl RuntimePodRef {
    pub fn from_labels(
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> Option<RuntimePodRef> {
        Some(RuntimePodRef {
            namespace: labels.get(LABEL_POD_NAMESPACE)?.clone(),
            name: labels.get(LABEL_POD_NAME)?.clone(),
            grace_seconds: annotations
                .get(ANN_POD_TERMINATION_GRACE)
                .and_then(|g| g.parse().ok()),
        })
    }
}

/// Per pod UID: a fingerprint of (id, state) of every sandbox and container.
type Fingerprints = BTreeMap<String, Vec<(String, String)>>;

pub struct Pleg {
    runtime: Arc<dyn Runtime>,
    store: Arc<StatusStore>,
    out: PlegSink,
    last: Fingerprints,
    last_refs: BTreeMap<String, RuntimePodRef>,
    first: bool,
    /// Relists that found at least one changed pod (monotonic counter).
    changes: u64,
    /// State of every sandbox and container (id → `Debug` of the state) at the last relist.
    states: HashMap<String, String>,
    /// The relist-failure warning, once per back-off step while the runtime stays down.
    relist_warning: crate::util::backoff::RepeatLimiter,
    /// The pod cache this PLEG fills (shared with the pod workers).
    cache: Arc<PodCache>,
    /// Pods whose observation failed: inspected again at the next relist (generic.go's
    /// `podsToReinspect`).
    reinspect: BTreeSet<String>,
    /// When the last relist started (the periodic relist is due a period later).
    last_relist: Option<Instant>,
}

impl Pleg {
    pub fn new(runtime: Arc<dyn Runtime>, store: Arc<StatusStore>, out: PlegSink) -> Self {
        Pleg {
            runtime,
            store,
            out,
            last: BTreeMap::new(),
            last_refs: BTreeMap::new(),
            first: true,
            changes: 0,
            states: HashMap::new(),
            relist_warning: Default::default(),
            cache: Arc::new(PodCache::new()),
            reinspect: BTreeSet::new(),
            last_relist: None,
        }
    }

    /// Fill `cache` (the one the pod workers read) instead of a private one.
    pub fn with_cache(mut self, cache: Arc<PodCache>) -> Self {
        self.cache = cache;
        self
    }

    /// One relist: compare with the previous one and report changed pods. Returns false when
    /// the sync loop is gone.
    pub fn relist(&mut self) -> bool {
        let started = Instant::now();
        self.last_relist = Some(started);
        let (sandboxes, containers) = match (
            self.runtime.list_pod_sandboxes(),
            self.runtime.list_containers(),
        ) {
            (Ok(s), Ok(c)) => {
                if self.relist_warning.clear() {
                    info!("PLEG relist works again");
                }
                (s, c)
            }
            (Err(e), _) | (_, Err(e)) => {
                if let Some(suppressed) = self.relist_warning.check(&e.to_string(), started) {
                    warn!(error = %e, suppressed, "PLEG relist failed (repeats are logged once per back-off step, 10 s doubling to 5 min, with the number suppressed)");
                }
                self.store.mark_runtime_error(&e);
                return true;
            }
        };
        let mut now: Fingerprints = BTreeMap::new();
        let mut refs: BTreeMap<String, RuntimePodRef> = BTreeMap::new();
        self.states.clear();
        for s in &sandboxes {
            self.states.insert(s.id.clone(), format!("{:?}", s.state));
        }
        for c in &containers {
            self.states.insert(c.id.clone(), format!("{:?}", c.state));
        }
        for s in &sandboxes {
            if !s.labels.contains_key(LABEL_MANAGED_BY) {
                continue;
            }
            let Some(uid) = s.labels.get(LABEL_POD_UID) else {
                continue;
            };
            now.entry(uid.clone())
                .or_default()
                .push((s.id.clone(), format!("{:?}", s.state)));
            if let Some(r) = RuntimePodRef::from_labels(&s.labels, &s.annotations) {
                refs.entry(uid.clone()).or_insert(r);
            }
        }
        for c in &containers {
            if !c.labels.contains_key(LABEL_MANAGED_BY) {
                continue;
            }
            let Some(uid) = c.labels.get(LABEL_POD_UID) else {
                continue;
            };
            now.entry(uid.clone())
                .or_default()
                .push((c.id.clone(), format!("{:?}", c.state)));
            if let Some(r) = RuntimePodRef::from_labels(&c.labels, &c.annotations) {
                // Container annotations carry the grace period; prefer them.
                let e = refs.entry(uid.clone()).or_insert(r.clone());
                if e.grace_seconds.is_none() {
                    e.grace_seconds = r.grace_seconds;
                }
            }
        }
        for v in now.values_mut() {
            v.sort();
        }
        let mut changed: Vec<String> = vec![];
        for (uid, fp) in &now {
            if self.last.get(uid) != Some(fp) {
                changed.push(uid.clone());
            }
        }
        for uid in self.last.keys() {
            if !now.contains_key(uid) {
                changed.push(uid.clone());
            }
        }
        for uid in std::mem::take(&mut self.reinspect) {
            if !changed.contains(&uid) {
                changed.push(uid);
            }
        }
        // The runtime pods go out before the observations below, which take a while when many
        // pods changed: a pod removed meanwhile must not come back as an orphan to terminate.
        if self.first || refs != self.last_refs {
            if !(self.out)(PlegEvent::RuntimePods(refs.clone())) {
                return false;
            }
            self.first = false;
        }
        self.update_cache(&changed, &now, started);
        self.cache.update_time(started);
        self.store.mark_relist();
        self.store.metrics().observe_pleg_relist(started.elapsed());
        debug!(pods = now.len(), changed = changed.len(), took = ?started.elapsed(), "PLEG relist");
        if !changed.is_empty() {
            self.changes += 1;
        }
        if !changed.is_empty() && !(self.out)(PlegEvent::PodsChanged(changed)) {
            return false;
        }
        self.last = now;
        self.last_refs = refs;
        true
    }

    /// Observe each changed pod once and store it in the cache with the relist's timestamp
    /// `at` (taken before the relist's calls). A pod gone from the runtime loses its entry
    /// (reads as empty) without a call; a pod whose cache entry is newer than `at` (its worker
    /// or a task event observed it since), or shows what the lists show, is not observed
    /// again; a failed observation is stored as the error and the pod re-inspected at the
    /// next relist.
    fn update_cache(&mut self, changed: &[String], now: &Fingerprints, at: Instant) {
        for uid in changed {
            if self.cache.observed_at(uid).is_some_and(|t| t > at) {
                continue;
            }
            let Some(listed) = now.get(uid) else {
                self.cache.forget(uid, at);
                continue;
            };
            // Observed since the last relist (by its worker after acting, or after a task
            // event) and the lists show the same ids in the same states: the entry is still
            // true (states only move forward, ids are never reused); the global timestamp
            // vouches for it.
            let same = self
                .cache
                .get(uid)
                .is_some_and(|e| e.state.as_ref().is_ok_and(|s| fingerprint(s) == *listed));
            if same {
                continue;
            }
            match observe_pod(self.runtime.as_ref(), uid) {
                Ok(state) => {
                    self.cache.set(uid, Ok(state), at);
                }
                Err(e) => {
                    debug!(uid = %uid, error = %e, "PLEG: observing pod failed; re-inspecting at the next relist");
                    self.cache.set(uid, Err(e.to_string()), at);
                    self.reinspect.insert(uid.clone());
                }
            }
        }
    }

    /// Task events for sandboxes and containers the cache knows: observe just their pods
    /// (no relist), update the cache and report the pods whose state changed. An event for an
    /// id the cache does not know (a container created since), a lost stream or a failed
    /// observation falls back to a full relist. Returns false when the sync loop is gone.
    pub fn refresh_pods(&mut self, events: &[RuntimeEvent]) -> bool {
        let mut uids = BTreeSet::new();
        for ev in events {
            let id = match ev {
                RuntimeEvent::TaskExit { id, .. } | RuntimeEvent::TaskStart { id } => id,
                // A CRI event names its pod (evented.go takes the UID from the event's
                // sandbox status): a container the cache does not know yet needs no relist.
                // Another agent's pod on the same containerd: not ours to observe.
                RuntimeEvent::Container {
                    managed: false,
                    pod_uid,
                    ..
                } if !pod_uid.is_empty() => continue,
                RuntimeEvent::Container { pod_uid, .. } if !pod_uid.is_empty() => {
                    uids.insert(pod_uid.clone());
                    continue;
                }
                RuntimeEvent::Container { id, .. } => id,
                RuntimeEvent::StreamLost => return self.relist(),
            };
            match self.cache.owner(id) {
                Some(uid) => uids.insert(uid),
                None => return self.relist(),
            };
        }
        let mut changed = vec![];
        let mut failed = false;
        for uid in uids {
            let at = Instant::now();
            let state = match observe_pod(self.runtime.as_ref(), &uid) {
                Ok(state) => state,
                Err(e) => {
                    debug!(uid = %uid, error = %e, "PLEG: observing pod after a task event failed; relisting");
                    failed = true;
                    break;
                }
            };
            for sb in &state.sandboxes {
                let s = if sb.ready { "Ready" } else { "NotReady" };
                self.states.insert(sb.id.clone(), s.to_string());
            }
            for c in &state.containers {
                self.states.insert(c.id.clone(), format!("{:?}", c.state));
            }
            let fp = fingerprint(&state);
            if state.is_empty() {
                self.cache.forget(&uid, at);
            } else {
                self.cache.set(&uid, Ok(state), at);
            }
            if self.last.get(&uid) != Some(&fp) {
                if fp.is_empty() {
                    self.last.remove(&uid);
                } else {
                    self.last.insert(uid.clone(), fp);
                }
                changed.push(uid);
            }
        }
        debug!(
            changed = changed.len(),
            "PLEG: pods observed after task events"
        );
        if !changed.is_empty() {
            self.changes += 1;
            // Reported before any relist below: their fingerprints are already the last ones.
            if !(self.out)(PlegEvent::PodsChanged(changed)) {
                return false;
            }
        }
        !failed || self.relist()
    }

    /// Whether the last relist shows what `ev` announced: an exited task no longer
    /// running/ready, a started one past Created. A task the relist does not know is not ours
    /// (or already removed): nothing to wait for.
    fn shows(&self, ev: &RuntimeEvent) -> bool {
        match ev {
            RuntimeEvent::TaskExit { id, .. } => self
                .states
                .get(id)
                .is_none_or(|s| s != "Running" && s != "Ready"),
            RuntimeEvent::TaskStart { id } => self.states.get(id).is_none_or(|s| s != "Created"),
            // Sent after the CRI state changed: the observation it caused shows it.
            RuntimeEvent::Container { .. } | RuntimeEvent::StreamLost => true,
        }
    }

    /// Run until the sync loop goes away or `stop` receives a message.
    pub fn run(mut self, stop: Receiver<()>) {
        let (wake_tx, wake_rx) = mpsc::channel::<Wake>();
        spawn_event_watcher(self.runtime.clone(), wake_tx);
        // Whether containerd's event stream is live: then every state change of a task reaches
        // us as an event and the periodic relist is only the safety net (EVENTED_RELIST_PERIOD).
        let mut live = false;
        // containerd publishes a task event before its CRI plugin has handled it (for an exit,
        // the CRI state changes after the shim's task delete): while the cache does not show
        // what an event announced, look again every RECHECK_STEP instead of waiting for the
        // next periodic relist.
        let mut recheck: Option<usize> = None;
        let mut next_recheck: Option<Instant> = None;
        let mut pending: Vec<RuntimeEvent> = vec![];
        loop {
            if stop.try_recv().is_ok() {
                return;
            }
            let next_relist = self
                .last_relist
                .map_or_else(Instant::now, |t| t + period(live));
            let due = next_recheck.map_or(next_relist, |r| r.min(next_relist));
            let timeout = due.saturating_duration_since(Instant::now());
            let (mut event, mut lost) = (false, false);
            let mut apply = |w: Wake, live: &mut bool| match w {
                Wake::Event(ev) => {
                    event = true;
                    if pending.len() < MAX_PENDING {
                        pending.push(ev);
                    }
                }
                Wake::Subscribed => {
                    *live = true;
                    // Relist once now: what changed while nobody listened (before a CRI
                    // event stream, which answers nothing until its first event, was open)
                    // is seen now, not a safety-net period later.
                    lost = true;
                }
                Wake::Lost => {
                    *live = false;
                    lost = true;
                }
            };
            match wake_rx.recv_timeout(timeout) {
                Ok(w) => {
                    apply(w, &mut live);
                    while let Ok(w) = wake_rx.try_recv() {
                        apply(w, &mut live);
                    }
                    if !event && !lost {
                        // Only the subscription state changed: keep the schedule.
                        continue;
                    }
                    recheck = Some(0);
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {}
            }
            let relist_due = self
                .last_relist
                .is_none_or(|t| t + period(live) <= Instant::now());
            let alive = if lost || relist_due || pending.is_empty() {
                self.relist()
            } else {
                self.refresh_pods(&pending)
            };
            if !alive {
                return;
            }
            pending.retain(|ev| !self.shows(ev));
            let (wait, again) = schedule(recheck, pending.len(), live);
            recheck = again;
            next_recheck = again.map(|_| Instant::now() + wait);
            if recheck.is_none() {
                pending.clear();
            }
        }
    }
}

/// The relist's fingerprint of one observed pod: (id, state) of its sandboxes and containers.
fn fingerprint(state: &PodRuntimeState) -> Vec<(String, String)> {
    let sandboxes = state.sandboxes.iter().map(|s| {
        let st = if s.ready { "Ready" } else { "NotReady" };
        (s.id.clone(), st.to_string())
    });
    let containers = state
        .containers
        .iter()
        .map(|c| (c.id.clone(), format!("{:?}", c.state)));
    let mut fp: Vec<(String, String)> = sandboxes.chain(containers).collect();
    fp.sort();
    fp
}

/// At most this many announced-but-not-yet-visible events are tracked (a burst beyond is
/// covered by the rechecks of the others and the periodic relist).
const MAX_PENDING: usize = 256;

/// When to relist next, after a relist that was the `recheck`-th follow-up of an event (None:
/// periodic) and left `pending` events it does not show yet, with the event stream `live` or
/// not. Returns the wait and the follow-up index of that next relist.
fn schedule(recheck: Option<usize>, pending: usize, live: bool) -> (Duration, Option<usize>) {
    let shown = pending == 0;
    match recheck {
        Some(i) if !shown && i < QUICK_RECHECKS => {
            let wait = RECHECK_STEP.max(RECHECK_PER_EVENT * pending.min(MAX_PENDING) as u32);
            (wait, Some(i + 1))
        }
        // Still not shown after the quick rechecks (a loaded machine: the shim's task delete,
        // after which the CRI state changes, can take longer): the generic PLEG's 1 s, for at
        // most SLOW_RECHECKS more relists, rather than the 10 s evented period.
        Some(i) if !shown && live && i < QUICK_RECHECKS + SLOW_RECHECKS => {
            (RELIST_PERIOD, Some(i + 1))
        }
        _ => (period(live), None),
    }
}

/// Follow-up relists at [`RELIST_PERIOD`] after the quick ones, while an event is not shown yet.
pub const SLOW_RECHECKS: usize = 10;

/// Follow-up relists after an event the relist does not show yet: containerd's CRI state lags
/// its task events (an exit shows in CRI 85-100 ms after the task's exit on the bench machine,
/// `scripts/bench`'s crash floor), so the pending pods are looked at every `RECHECK_STEP`,
/// `QUICK_RECHECKS` times (320 ms for one event): a crash is seen at most 5 ms after CRI shows
/// it (a doubling ladder lost up to half the lag). Each look observes the pending pods only
/// (two filtered list calls each); with many events pending the step grows by
/// `RECHECK_PER_EVENT` per event (100 exits at once: every 250 ms), so a mass exit does not
/// flood containerd.
pub const RECHECK_STEP: Duration = Duration::from_millis(5);
pub const QUICK_RECHECKS: usize = 64;
pub const RECHECK_PER_EVENT: Duration = Duration::from_micros(2500);

/// The periodic relist while containerd's event stream is live. Like the kubelet's evented
/// PLEG (KEP-3386: with `EventedPLEG` the generic relist runs every 300 s as a safety net,
/// `eventedPlegRelistPeriod`), nanolet relies on task events then, but keeps a shorter net:
/// events do not cover containers created or removed behind its back (only task exits and
/// starts are subscribed).
pub const EVENTED_RELIST_PERIOD: Duration = Duration::from_secs(10);

fn period(live: bool) -> Duration {
    if live {
        EVENTED_RELIST_PERIOD
    } else {
        RELIST_PERIOD
    }
}

/// What the event watcher tells the relist loop.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Wake {
    /// A task event: relist now.
    Event(RuntimeEvent),
    /// The subscription is live: events will come.
    Subscribed,
    /// The stream broke (or subscribing failed): relist now and every RELIST_PERIOD.
    Lost,
}

/// Subscribe to containerd's task events and poke the relist loop on each; resubscribe with a
/// capped backoff when the stream breaks (containerd restarted).
fn spawn_event_watcher(runtime: Arc<dyn Runtime>, wake: Sender<Wake>) {
    let spawned = std::thread::Builder::new()
        .name("pleg-events".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            let mut delay = Duration::from_millis(500);
            loop {
                match runtime.subscribe_events() {
                    Ok(rx) => {
                        info!("subscribed to the runtime's lifecycle events");
                        delay = Duration::from_millis(500);
                        if wake.send(Wake::Subscribed).is_err() {
                            return;
                        }
                        for ev in rx.iter() {
                            if ev == RuntimeEvent::StreamLost {
                                break;
                            }
                            if wake.send(Wake::Event(ev)).is_err() {
                                return;
                            }
                        }
                        warn!("runtime event stream lost; resubscribing");
                    }
                    Err(e) => debug!(error = %e, "subscribing to containerd events failed"),
                }
                // Relist at once (whatever happened meanwhile) and every RELIST_PERIOD until
                // the stream is back; stop when the relist loop is gone.
                if wake.send(Wake::Lost).is_err() {
                    return;
                }
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_secs(30));
            }
        });
    if let Err(e) = spawned {
        warn!(error = %e, "cannot start the event watcher; relying on relist only");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_the_relist_does_not_show_yet_is_rechecked_within_milliseconds() {
        // The relist right after an event found nothing: the CRI state lags the event.
        let mut at = Duration::ZERO;
        let mut recheck = Some(0);
        let mut waits = vec![];
        while let (wait, Some(i)) = schedule(recheck, 1, true) {
            waits.push(wait);
            at += wait;
            recheck = Some(i);
        }
        assert_eq!(waits[0], Duration::from_millis(5), "first recheck");
        assert_eq!(waits.len(), QUICK_RECHECKS + SLOW_RECHECKS);
        // One pending event: a look every 5 ms, so a crash is seen at most 5 ms after CRI
        // shows it (containerd 1.6's CRI lags the exit by 85-100 ms).
        assert!(
            waits[..QUICK_RECHECKS]
                .iter()
                .all(|w| *w == Duration::from_millis(5))
        );
        // Quick rechecks cover 300 ms (the old single recheck waited 50 ms), then the generic
        // PLEG's 1 s for 10 s, never the evented 10 s gap while an event is unexplained; then
        // they stop.
        let quick: Duration = waits[..QUICK_RECHECKS].iter().sum();
        assert!(quick >= Duration::from_millis(300), "{quick:?}");
        assert!(
            waits[QUICK_RECHECKS..].iter().all(|w| *w == RELIST_PERIOD),
            "{waits:?}"
        );
        assert!(at >= Duration::from_secs(10), "{at:?}");
        assert_eq!(schedule(recheck, 1, true), (EVENTED_RELIST_PERIOD, None));
        // A relist that saw the change ends the rechecks.
        assert_eq!(schedule(Some(0), 0, true), (EVENTED_RELIST_PERIOD, None));
        // 100 exits at once (each look observes every pending pod): one look per 250 ms.
        assert_eq!(
            schedule(Some(0), 100, true),
            (Duration::from_millis(250), Some(1))
        );
    }

    #[test]
    fn the_periodic_relist_is_the_kubelets_1s_without_events_and_a_safety_net_with() {
        assert_eq!(schedule(None, 1, false), (RELIST_PERIOD, None));
        assert_eq!(schedule(None, 0, false), (RELIST_PERIOD, None));
        assert_eq!(schedule(None, 1, true), (EVENTED_RELIST_PERIOD, None));
        assert!(EVENTED_RELIST_PERIOD > RELIST_PERIOD);
        // A lost stream relists at the generic period again.
        assert_eq!(
            schedule(Some(QUICK_RECHECKS + 3), 1, false),
            (RELIST_PERIOD, None)
        );
    }
}
