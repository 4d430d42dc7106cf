//! The order a pod's containers stop in when it has sidecars (Go's
//! pkg/kubelet/kuberuntime/kuberuntime_termination_order.go): every running container is
//! killed at once and runs its preStop hook at once, but a sidecar (restartable init container)
//! is stopped only after every regular container and the next later sidecar of the spec have
//! stopped, or its grace period ran out waiting: sidecars stop in reverse order, after the
//! regular containers.

use std::collections::{HashMap, HashSet};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::api::Pod;
use crate::api::helpers::is_sidecar;

/// Which container waits for which, and which have not stopped yet.
#[derive(Debug)]
pub struct TerminationOrdering {
    /// Container name -> the names it waits for (`prereqs`).
    prereqs: HashMap<String, Vec<String>>,
    /// The running containers that have not stopped yet (upstream: the open channels).
    running: Mutex<HashSet<String>>,
    stopped: Condvar,
}

impl TerminationOrdering {
    /// `newTerminationOrdering`: each sidecar waits for every regular container and for the
    /// sidecar after it in `initContainers` (only the nearest one); a container not in
    /// `running` counts as stopped from the start.
    pub fn new<'a>(pod: &Pod, running: impl IntoIterator<Item = &'a str>) -> Self {
        let mains: Vec<String> = pod.spec.containers.iter().map(|c| c.name.clone()).collect();
        let mut prereqs = HashMap::new();
        let mut later_sidecar: Option<&str> = None;
        for ic in pod.spec.init_containers.iter().rev() {
            if !is_sidecar(ic) {
                continue;
            }
            let mut waits_for = mains.clone();
            waits_for.extend(later_sidecar.map(str::to_string));
            prereqs.insert(ic.name.clone(), waits_for);
            later_sidecar = Some(&ic.name);
        }
        TerminationOrdering {
            prereqs,
            running: Mutex::new(running.into_iter().map(str::to_string).collect()),
            stopped: Condvar::new(),
        }
    }

    /// `waitForTurn`: wait until every container `name` waits for has stopped, at most
    /// `grace` (no wait at all with none left); returns how long it waited.
    pub fn wait_for_turn(&self, name: &str, grace: Duration) -> Duration {
        let start = Instant::now();
        let Some(prereqs) = self.prereqs.get(name) else {
            return Duration::ZERO;
        };
        if grace.is_zero() {
            return Duration::ZERO;
        }
        let deadline = start + grace;
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        while prereqs.iter().any(|p| running.contains(p)) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            running = match self.stopped.wait_timeout(running, deadline - now) {
                Ok((guard, _)) => guard,
                Err(e) => e.into_inner().0,
            };
        }
        start.elapsed()
    }

    /// `containerTerminated`: `name` has stopped (its StopContainer returned).
    pub fn container_stopped(&self, name: &str) {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.remove(name);
        self.stopped.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {
                "initContainers": [
                    {"name": "side-a", "image": "i", "restartPolicy": "Always"},
                    {"name": "init", "image": "i"},
                    {"name": "side-b", "image": "i", "restartPolicy": "Always"},
                    {"name": "side-c", "image": "i", "restartPolicy": "Always"}
                ],
                "containers": [{"name": "main", "image": "i"}]
            }
        }))
        .expect("pod")
    }

    /// kuberuntime_termination_order.go: a sidecar waits for every regular container and the
    /// next later sidecar (reverse order); regular and plain init containers wait for nothing.
    #[test]
    fn sidecars_wait_for_the_regular_containers_and_the_next_later_sidecar() {
        let o = TerminationOrdering::new(&pod(), ["main", "side-a", "side-b", "side-c"]);
        assert_eq!(o.prereqs["side-c"], ["main"]);
        assert_eq!(o.prereqs["side-b"], ["main", "side-c"]);
        assert_eq!(o.prereqs["side-a"], ["main", "side-b"]);
        assert!(!o.prereqs.contains_key("main") && !o.prereqs.contains_key("init"));
        assert_eq!(
            o.wait_for_turn("main", Duration::from_secs(30)),
            Duration::ZERO
        );
    }

    /// waitForTurn returns once the containers waited for stopped, well before the grace
    /// period; a container not running counts as stopped from the start.
    #[test]
    fn a_sidecar_stops_only_after_the_ones_it_waits_for() {
        // side-c does not run: side-b waits for main only.
        let o = TerminationOrdering::new(&pod(), ["main", "side-a", "side-b"]);
        let order = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for name in ["side-a", "side-b"] {
                let (o, order) = (&o, &order);
                s.spawn(move || {
                    o.wait_for_turn(name, Duration::from_secs(60));
                    order.lock().expect("order").push(name);
                    o.container_stopped(name);
                });
            }
            // Neither sidecar may go while main runs.
            order.lock().expect("order").push("main");
            o.container_stopped("main");
        });
        assert_eq!(*order.lock().expect("order"), ["main", "side-b", "side-a"]);
    }

    /// The wait ends when the grace period does, whatever still runs; with no grace period
    /// left there is no wait.
    #[test]
    fn the_wait_is_cut_at_the_grace_period() {
        let o = TerminationOrdering::new(&pod(), ["main", "side-a"]);
        let waited = o.wait_for_turn("side-a", Duration::from_millis(200));
        assert!(waited >= Duration::from_millis(200), "{waited:?}");
        assert_eq!(o.wait_for_turn("side-a", Duration::ZERO), Duration::ZERO);
    }
}
