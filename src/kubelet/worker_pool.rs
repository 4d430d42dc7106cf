//! The pod workers' scheduler: every pod's [`PodWorker`] is a state machine driven by a
//! bounded, elastic pool of threads (`util::pool`) instead of a thread of its own.
//!
//! The kubelet's pod_workers.go rules are kept: a pod is synced by one thread at a time;
//! messages that arrive while it syncs wait in its inbox and the next turn takes them all
//! (a pending `Update` replaces the queued one, as `podUpdates` holds one pending update per
//! pod); a turn's `Step::Again(d)` is a timer that a message overrides. One `pod-timers`
//! thread sleeps until the earliest timer, so idle pods cost one wake-up per resync each.
//! A pod whose CRI call or hook blocks holds one pool thread; the others go on, and the pool
//! starts another thread when work waits (up to its `max`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tracing::warn;

use super::LoopMsg;
use super::pod_workers::{PodWorker, Step, WorkerMsg, WorkerReport};
use crate::util::pool::{Pool, PoolSize};

/// Stack size (virtual) of pool threads. They run lifecycle hooks, whose httpGet may do a TLS
/// handshake, so leave room; only the pages actually touched become resident.
const WORKER_STACK: usize = 1024 * 1024;
/// How long a pool thread above the minimum stays with nothing to do.
const IDLE_EXIT: Duration = Duration::from_secs(30);

struct Slot {
    /// None while a pool thread runs the worker's turn.
    worker: Option<Box<PodWorker>>,
    inbox: Vec<WorkerMsg>,
    /// When the worker asked to run again without a message.
    due: Option<Instant>,
    /// A turn is queued on the pool or running: at most one per pod.
    scheduled: bool,
}

#[derive(Default)]
struct Sched {
    slots: HashMap<String, Slot>,
    /// (due, uid); an entry is live only while its slot's `due` equals it.
    timers: BinaryHeap<Reverse<(Instant, String)>>,
    stopping: bool,
}

struct Shared {
    pool: Pool,
    sched: Mutex<Sched>,
    timer: Condvar,
    reports: Sender<LoopMsg>,
}

/// The pod workers: add one per admitted pod UID, send it messages, stop them all.
pub struct PodWorkers {
    shared: Arc<Shared>,
}

impl PodWorkers {
    /// Start the timer thread; pool threads start on demand.
    pub fn start(size: PoolSize, reports: Sender<LoopMsg>) -> PodWorkers {
        let shared = Arc::new(Shared {
            pool: Pool::new("pod-worker", size, IDLE_EXIT, WORKER_STACK),
            sched: Mutex::new(Sched::default()),
            timer: Condvar::new(),
            reports,
        });
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("pod-timers".into())
            .stack_size(128 * 1024)
            .spawn(move || s.timers());
        if let Err(e) = spawned {
            warn!(error = %e, "cannot start the pod timer thread; pods sync only on events");
        }
        PodWorkers { shared }
    }

    /// Add the worker for `uid` with its first message.
    pub fn add(&self, uid: &str, worker: PodWorker, first: WorkerMsg) {
        let mut st = self.shared.lock();
        st.slots.insert(
            uid.to_string(),
            Slot {
                worker: Some(Box::new(worker)),
                inbox: vec![],
                due: None,
                scheduled: false,
            },
        );
        drop(st);
        self.send(uid, first);
    }

    /// Queue a message for `uid`'s worker (ignored once the worker is done).
    pub fn send(&self, uid: &str, msg: WorkerMsg) {
        let mut st = self.shared.lock();
        if st.stopping {
            return;
        }
        let Some(slot) = st.slots.get_mut(uid) else {
            return;
        };
        match msg {
            WorkerMsg::Sync if slot.inbox.iter().any(|m| matches!(m, WorkerMsg::Sync)) => {}
            WorkerMsg::Update(_) => {
                slot.inbox.retain(|m| !matches!(m, WorkerMsg::Update(_)));
                slot.inbox.push(msg);
            }
            msg => slot.inbox.push(msg),
        }
        let run = !slot.scheduled;
        slot.scheduled = true;
        slot.due = None;
        drop(st);
        if run {
            self.shared.submit(uid.to_string());
        }
    }

    /// Stop the threads; the pods keep running (they are adopted on start). Turns running now
    /// finish; nothing else starts.
    pub fn stop(&self) {
        let mut st = self.shared.lock();
        st.stopping = true;
        st.timers.clear();
        drop(st);
        self.shared.timer.notify_all();
        self.shared.pool.stop();
    }
}

impl Drop for PodWorkers {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Sched> {
        // No turn runs under the lock: a poisoned lock still holds consistent state.
        self.sched.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn submit(self: &Arc<Self>, uid: String) {
        let s = self.clone();
        // Fails only when stopping, when no more turns are wanted.
        let _ = self.pool.submit(move || s.turn(&uid));
    }

    /// One turn of `uid`'s worker on a pool thread.
    fn turn(self: &Arc<Self>, uid: &str) {
        let mut st = self.lock();
        let Some(slot) = st.slots.get_mut(uid) else {
            return;
        };
        let Some(mut worker) = slot.worker.take() else {
            return;
        };
        let msgs = std::mem::take(&mut slot.inbox);
        drop(st);
        let step = worker.step(msgs);
        let mut st = self.lock();
        if step == Step::Done {
            st.slots.remove(uid);
            drop(st);
            let _ = self.reports.send(LoopMsg::Worker(WorkerReport::Terminated {
                uid: uid.to_string(),
            }));
            return;
        }
        let stopping = st.stopping;
        let Some(slot) = st.slots.get_mut(uid) else {
            return;
        };
        slot.worker = Some(worker);
        if stopping {
            return;
        }
        if !slot.inbox.is_empty() {
            drop(st);
            self.submit(uid.to_string());
            return;
        }
        slot.scheduled = false;
        let Step::Again(after) = step else { return };
        let due = Instant::now() + after;
        slot.due = Some(due);
        let earliest = st.timers.peek().is_none_or(|Reverse((t, _))| due < *t);
        st.timers.push(Reverse((due, uid.to_string())));
        drop(st);
        if earliest {
            self.timer.notify_one();
        }
    }

    /// The `pod-timers` thread: hands workers whose time is up to the pool.
    fn timers(self: Arc<Self>) {
        let mut st = self.lock();
        loop {
            if st.stopping {
                return;
            }
            let now = Instant::now();
            let mut due = vec![];
            while let Some(Reverse((t, _))) = st.timers.peek() {
                if *t > now {
                    break;
                }
                let Some(Reverse((t, uid))) = st.timers.pop() else {
                    break;
                };
                if let Some(slot) = st.slots.get_mut(&uid) {
                    if slot.due == Some(t) && !slot.scheduled {
                        slot.due = None;
                        slot.scheduled = true;
                        due.push(uid);
                    }
                }
            }
            if !due.is_empty() {
                drop(st);
                for uid in due {
                    self.submit(uid);
                }
                st = self.lock();
                continue;
            }
            st = match st.timers.peek().map(|Reverse((t, _))| *t) {
                Some(t) => {
                    let wait = t.saturating_duration_since(now);
                    self.timer
                        .wait_timeout(st, wait)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
                None => self.timer.wait(st).unwrap_or_else(|p| p.into_inner()),
            };
        }
    }
}
