//! The runtime pod cache, after the kubelet's `pkg/kubelet/container/cache.go`: per pod UID the
//! last [`PodRuntimeState`] observed (or the error observing it) with the time the observation
//! started, plus one global timestamp: "every pod's entry is true as of T" (the PLEG sets it
//! after a relist that re-inspected every changed pod). Pod workers read it with
//! [`PodCache::get_newer_than`] instead of asking the runtime themselves.
//!
//! Writers are the PLEG (relist, containerd task events) and the workers (their own
//! observations, when the cache holds nothing new enough). An observation never replaces a
//! newer one. Readers waiting for data newer than their last sync are woken by every `set` and
//! `update_time` (upstream: subscribers notified when data newer than their time arrives).

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::state::PodRuntimeState;

/// One pod's entry: what was observed (or why that failed) and when the observation started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedPod {
    pub state: Result<PodRuntimeState, String>,
    /// When the observation started (taken before the runtime calls).
    pub observed: Instant,
}

#[derive(Debug, Default)]
struct Inner {
    pods: HashMap<String, CachedPod>,
    /// Every entry is true as of this time (the start of the last complete relist).
    global: Option<Instant>,
}

#[derive(Debug, Default)]
pub struct PodCache {
    inner: Mutex<Inner>,
    changed: Condvar,
}

impl PodCache {
    pub fn new() -> Self {
        PodCache::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Store what an observation started at `observed` saw for `uid`, unless the cache holds a
    /// newer observation already. Returns whether it was stored.
    pub fn set(
        &self,
        uid: &str,
        state: Result<PodRuntimeState, String>,
        observed: Instant,
    ) -> bool {
        let mut g = self.lock();
        if g.pods.get(uid).is_some_and(|e| e.observed > observed) {
            return false;
        }
        g.pods
            .insert(uid.to_string(), CachedPod { state, observed });
        drop(g);
        self.changed.notify_all();
        true
    }

    /// Every entry is true as of `t` (upstream `UpdateTime`); never moves backwards.
    pub fn update_time(&self, t: Instant) {
        let mut g = self.lock();
        if g.global.is_some_and(|old| old >= t) {
            return;
        }
        g.global = Some(t);
        drop(g);
        self.changed.notify_all();
    }

    /// The pod is gone (its worker finished): forget its entry.
    pub fn delete(&self, uid: &str) {
        self.lock().pods.remove(uid);
    }

    /// An observation started at `at` found nothing of `uid` in the runtime: drop its entry
    /// unless a newer observation replaced it (without an entry the pod reads as empty once
    /// the global timestamp passes `at`; no entry is kept per pod that ever existed).
    pub fn forget(&self, uid: &str, at: Instant) {
        let mut g = self.lock();
        if g.pods.get(uid).is_some_and(|e| e.observed <= at) {
            g.pods.remove(uid);
        }
    }

    /// When the entry of `uid` was observed, if there is one.
    pub fn observed_at(&self, uid: &str) -> Option<Instant> {
        self.lock().pods.get(uid).map(|e| e.observed)
    }

    /// The entry of `uid` as it is, however old.
    pub fn get(&self, uid: &str) -> Option<CachedPod> {
        self.lock().pods.get(uid).cloned()
    }

    /// The pod whose cached state holds the sandbox or container `id`.
    pub fn owner(&self, id: &str) -> Option<String> {
        let g = self.lock();
        g.pods
            .iter()
            .find(|(_, e)| {
                e.state.as_ref().is_ok_and(|s| {
                    s.sandboxes.iter().any(|sb| sb.id == id)
                        || s.containers.iter().any(|c| c.id == id)
                })
            })
            .map(|(uid, _)| uid.clone())
    }

    /// The entry of `uid` when it is newer than `min`: its own observation is, or the global
    /// timestamp is (then a pod without an entry has nothing in the runtime: an empty state).
    /// Waits up to `wait` for such data (upstream `GetNewerThan` blocks without a bound; see
    /// `kubelet::pod_workers` for why a worker bounds it).
    pub fn get_newer_than(&self, uid: &str, min: Instant, wait: Duration) -> Option<CachedPod> {
        let deadline = Instant::now() + wait;
        let mut g = self.lock();
        loop {
            if let Some(found) = newer(&g, uid, min) {
                return Some(found);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            g = self
                .changed
                .wait_timeout(g, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// The entry of `uid` if it, or the global timestamp vouching for it, is newer than `min`;
/// `observed` is then the newer of the two.
fn newer(g: &Inner, uid: &str, min: Instant) -> Option<CachedPod> {
    let entry = g.pods.get(uid);
    if let Some(e) = entry.filter(|e| e.observed > min) {
        return Some(e.clone());
    }
    let global = g.global.filter(|t| *t > min)?;
    let state = entry.map_or(Ok(PodRuntimeState::default()), |e| e.state.clone());
    Some(CachedPod {
        state,
        observed: global,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kuberuntime::state::ObservedSandbox;

    fn state(sandbox: &str) -> PodRuntimeState {
        PodRuntimeState {
            sandboxes: vec![ObservedSandbox {
                id: sandbox.into(),
                attempt: 0,
                ready: true,
                created_at: 1,
                ip: String::new(),
                additional_ips: vec![],
            }],
            containers: vec![],
        }
    }

    /// cache.go `GetNewerThan`: data is returned once the pod's own entry or the global
    /// timestamp is newer than the reader's time; an unknown pod is an empty status then.
    #[test]
    fn get_newer_than_needs_the_entry_or_the_global_time_past_the_readers_time() {
        let c = PodCache::new();
        let t0 = Instant::now();
        assert_eq!(c.get_newer_than("a", t0, Duration::ZERO), None);
        let t1 = t0 + Duration::from_millis(1);
        assert!(c.set("a", Ok(state("sb1")), t1));
        let got = c
            .get_newer_than("a", t0, Duration::ZERO)
            .expect("newer entry");
        assert_eq!(got.state, Ok(state("sb1")));
        assert_eq!(c.get_newer_than("a", t1, Duration::ZERO), None, "not newer");
        assert_eq!(c.get_newer_than("b", t0, Duration::ZERO), None);
        let t2 = t1 + Duration::from_millis(1);
        c.update_time(t2);
        let a = c.get_newer_than("a", t1, Duration::ZERO).expect("global");
        assert_eq!(
            a.state,
            Ok(state("sb1")),
            "the entry, vouched for by the relist"
        );
        let b = c.get_newer_than("b", t1, Duration::ZERO).expect("global");
        assert_eq!(b.state, Ok(PodRuntimeState::default()));
        assert_eq!(c.owner("sb1").as_deref(), Some("a"));
        c.delete("a");
        assert_eq!(c.owner("sb1"), None);
    }

    /// An older observation finishing late never replaces (nor drops) a newer one (two
    /// writers: the PLEG and the pod's worker), and the global timestamp never moves back.
    #[test]
    fn an_older_observation_never_replaces_a_newer_one() {
        let c = PodCache::new();
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(1);
        assert!(c.set("a", Ok(state("new")), t1));
        assert!(!c.set("a", Ok(state("old")), t0));
        assert_eq!(c.observed_at("a"), Some(t1));
        c.update_time(t1);
        c.update_time(t0);
        assert!(c.get_newer_than("b", t0, Duration::ZERO).is_some());
        // A relist that started before the entry found nothing: the entry stays.
        c.forget("a", t0);
        assert_eq!(c.observed_at("a"), Some(t1));
        c.forget("a", t1);
        assert_eq!(c.observed_at("a"), None);
    }

    /// cache.go's subscribers: a reader blocked in `GetNewerThan` is woken when newer data
    /// arrives.
    #[test]
    fn a_waiting_reader_is_woken_by_newer_data() {
        let c = std::sync::Arc::new(PodCache::new());
        let min = Instant::now();
        let writer = {
            let c = c.clone();
            std::thread::spawn(move || {
                c.set(
                    "a",
                    Ok(state("sb")),
                    Instant::now() + Duration::from_millis(1),
                );
            })
        };
        let got = c.get_newer_than("a", min, Duration::from_secs(30));
        let _ = writer.join();
        assert_eq!(got.map(|g| g.state), Some(Ok(state("sb"))));
    }
}
