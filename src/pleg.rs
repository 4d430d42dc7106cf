//! PLEG, the pod lifecycle event generator: relists the runtime (ListPodSandbox +
//! ListContainers) every second, and at once when containerd reports a task exit or start,
//! and tells the sync loop which pods changed. containerd's events are only a wake-up: state
//! always comes from the relist, so a lost event costs at most one relist period.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use crate::runtime::{LABEL_MANAGED_BY, LABEL_POD_UID, Runtime, RuntimeEvent};
use crate::status::StatusStore;
use crate::sync::{LoopMsg, RuntimePodRef};

/// The kubelet's generic PLEG relist period.
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);

/// Per pod UID: a fingerprint of (id, state) of every sandbox and container.
type Fingerprints = BTreeMap<String, Vec<(String, String)>>;

pub struct Pleg {
    runtime: Arc<dyn Runtime>,
    store: Arc<StatusStore>,
    out: Sender<LoopMsg>,
    last: Fingerprints,
    last_refs: BTreeMap<String, RuntimePodRef>,
    first: bool,
    /// Relists that found at least one changed pod (monotonic counter).
    changes: u64,
}

impl Pleg {
    pub fn new(runtime: Arc<dyn Runtime>, store: Arc<StatusStore>, out: Sender<LoopMsg>) -> Self {
        Pleg {
            runtime,
            store,
            out,
            last: BTreeMap::new(),
            last_refs: BTreeMap::new(),
            first: true,
            changes: 0,
        }
    }

    /// One relist: compare with the previous one and report changed pods. Returns false when
    /// the sync loop is gone.
    pub fn relist(&mut self) -> bool {
        let started = Instant::now();
        let (sandboxes, containers) = match (
            self.runtime.list_pod_sandboxes(),
            self.runtime.list_containers(),
        ) {
            (Ok(s), Ok(c)) => (s, c),
            (Err(e), _) | (_, Err(e)) => {
                warn!(error = %e, "PLEG relist failed");
                self.store.mark_relist(Err(e.to_string()));
                return true;
            }
        };
        let mut now: Fingerprints = BTreeMap::new();
        let mut refs: BTreeMap<String, RuntimePodRef> = BTreeMap::new();
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
        self.store.mark_relist(Ok(()));
        self.store.metrics().observe_pleg_relist(started.elapsed());
        debug!(pods = now.len(), changed = changed.len(), took = ?started.elapsed(), "PLEG relist");
        if !changed.is_empty() {
            self.changes += 1;
        }
        if !changed.is_empty() && self.out.send(LoopMsg::PodsChanged(changed)).is_err() {
            return false;
        }
        if self.first || refs != self.last_refs {
            if self.out.send(LoopMsg::RuntimePods(refs.clone())).is_err() {
                return false;
            }
            self.first = false;
        }
        self.last = now;
        self.last_refs = refs;
        true
    }

    /// Run until the sync loop goes away or `stop` receives a message.
    pub fn run(mut self, stop: Receiver<()>) {
        let (wake_tx, wake_rx) = mpsc::channel::<()>();
        spawn_event_watcher(self.runtime.clone(), wake_tx);
        let mut next = Instant::now();
        // containerd can publish a task exit a moment before CRI reports the container as
        // exited; after an event that showed no change, look again shortly (50, 100, 200 ms)
        // instead of waiting for the next periodic relist.
        let mut recheck: u32 = 0;
        loop {
            if stop.try_recv().is_ok() {
                return;
            }
            let timeout = next.saturating_duration_since(Instant::now());
            match wake_rx.recv_timeout(timeout) {
                Ok(()) => {
                    while wake_rx.try_recv().is_ok() {}
                    recheck = 3;
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {}
            }
            let before = self.changes;
            if !self.relist() {
                return;
            }
            let changed = self.changes != before;
            if recheck > 0 && !changed {
                next = Instant::now() + Duration::from_millis(50 << (3 - recheck));
                recheck -= 1;
            } else {
                recheck = 0;
                next = Instant::now() + RELIST_PERIOD;
            }
        }
    }
}

/// Subscribe to containerd's task events and poke the relist loop on each; resubscribe with a
/// capped backoff when the stream breaks (containerd restarted).
fn spawn_event_watcher(runtime: Arc<dyn Runtime>, wake: Sender<()>) {
    let spawned = std::thread::Builder::new()
        .name("pleg-events".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            let mut delay = Duration::from_millis(500);
            loop {
                match runtime.subscribe_events() {
                    Ok(rx) => {
                        info!("subscribed to containerd task events");
                        delay = Duration::from_millis(500);
                        for ev in rx.iter() {
                            let lost = ev == RuntimeEvent::StreamLost;
                            if wake.send(()).is_err() {
                                return;
                            }
                            if lost {
                                break;
                            }
                        }
                        warn!("containerd event stream lost; resubscribing");
                    }
                    Err(e) => debug!(error = %e, "subscribing to containerd events failed"),
                }
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_secs(30));
                // Stop when the relist loop is gone.
                if wake.send(()).is_err() {
                    return;
                }
            }
        });
    if let Err(e) = spawned {
        warn!(error = %e, "cannot start the event watcher; relying on relist only");
    }
}
