//! Fault injection against the real binary and a real containerd: nanolet is killed with
//! SIGKILL at arbitrary moments while manifests are created, edited and deleted; after each
//! restart it must converge to exactly the desired pods: no orphaned or duplicated sandboxes or
//! containers, and running containers are not restarted because nanolet restarted.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::agent::Nanolet;
use common::{Containerd, wait_for};
use nanolet::runtime::{ContainerState, Runtime, SandboxState};

/// A small deterministic PRNG (xorshift): the test is reproducible from its seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn manifest(name: &str, version: u64) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n    version: \"{version}\"\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '3600']\n"
    )
}

#[test]
fn kill_9_during_churn_converges_to_exactly_the_desired_pods() {
    let ctd = Containerd::start();
    let mut n = Nanolet::start(&ctd, &[]);
    let rt = ctd.runtime();
    let seed = std::env::var("NANOLET_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15);
    let mut rng = Rng(seed);
    let rounds: u64 = std::env::var("NANOLET_FAULT_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    // name -> version of the manifest on disk.
    let mut desired: BTreeMap<String, u64> = BTreeMap::new();
    for round in 0..rounds {
        for _ in 0..1 + rng.below(3) {
            let name = format!("p{}", rng.below(4));
            match rng.below(3) {
                0 if desired.contains_key(&name) => {
                    n.remove(&format!("{name}.yaml"));
                    desired.remove(&name);
                }
                _ => {
                    let v = round * 10 + rng.below(10);
                    n.write(&format!("{name}.yaml"), &manifest(&name, v));
                    desired.insert(name, v);
                }
            }
        }
        // Let nanolet get somewhere (or not) before the crash: an arbitrary moment.
        std::thread::sleep(Duration::from_millis(rng.below(900)));
        n.kill9();
        n.spawn();
    }

    // Convergence: /pods lists exactly the desired pods, each Running at the desired version.
    let want: BTreeSet<String> = desired.keys().map(|k| format!("{k}-node1")).collect();
    let converged = wait_for(Duration::from_secs(90), || {
        let pods = n.pods();
        let names: BTreeSet<String> = pods
            .iter()
            .filter_map(|p| p["metadata"]["name"].as_str().map(String::from))
            .collect();
        let ok = names == want
            && pods.iter().all(|p| {
                let name = p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .trim_end_matches("-node1")
                    .to_string();
                p["status"]["phase"] == "Running"
                    && p["metadata"]["labels"]["version"].as_str()
                        == desired.get(&name).map(|v| v.to_string()).as_deref()
            });
        ok.then_some(pods)
    })
    .unwrap_or_else(|| {
        panic!(
            "never converged to {want:?}; now {:#?}\n{}",
            n.pods(),
            n.log_tail()
        )
    });
    let uids: BTreeSet<String> = converged
        .iter()
        .filter_map(|p| p["metadata"]["uid"].as_str().map(String::from))
        .collect();

    // The runtime holds exactly those pods: one ready sandbox and one running container each,
    // and nothing of any other UID.
    let clean = wait_for(Duration::from_secs(60), || {
        let sbs = rt.list_pod_sandboxes().ok()?;
        let ctrs = rt.list_containers().ok()?;
        let sb_uids: Vec<&String> = sbs
            .iter()
            .filter_map(|s| s.labels.get("io.kubernetes.pod.uid"))
            .collect();
        let all_known = sb_uids.iter().all(|u| uids.contains(*u))
            && ctrs.iter().all(|c| {
                c.labels
                    .get("io.kubernetes.pod.uid")
                    .is_some_and(|u| uids.contains(u))
            });
        let ready: Vec<_> = sbs
            .iter()
            .filter(|s| s.state == SandboxState::Ready)
            .collect();
        let running: Vec<_> = ctrs
            .iter()
            .filter(|c| c.state == ContainerState::Running)
            .collect();
        (all_known
            && ready.len() == uids.len()
            && running.len() == uids.len()
            && sbs.len() == uids.len())
        .then_some(
            running
                .iter()
                .map(|c| c.id.clone())
                .collect::<BTreeSet<_>>(),
        )
    })
    .unwrap_or_else(|| {
        panic!(
            "runtime not clean: sandboxes {:#?}\ncontainers {:#?}\n{}",
            rt.list_pod_sandboxes().unwrap_or_default(),
            rt.list_containers().unwrap_or_default(),
            n.log_tail()
        )
    });

    // One more crash with nothing changing: no running container is restarted and restart
    // counts stay as they were. (During the churn a crash between CreateContainer and
    // StartContainer legitimately costs a restart: the kubelet replaces a never-started
    // container too.)
    let counts = |n: &Nanolet| -> BTreeMap<String, i64> {
        n.pods()
            .iter()
            .map(|p| {
                (
                    p["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    p["status"]["containerStatuses"][0]["restartCount"]
                        .as_i64()
                        .unwrap_or(-1),
                )
            })
            .collect()
    };
    let counts_before = counts(&n);
    n.kill9();
    n.spawn();
    let again = wait_for(Duration::from_secs(30), || {
        let pods = n.pods();
        (pods.len() == uids.len() && pods.iter().all(|p| p["status"]["phase"] == "Running"))
            .then_some(())
    });
    assert!(again.is_some(), "pods listed again after the restart");
    let after: BTreeSet<String> = rt
        .list_containers()
        .expect("list")
        .into_iter()
        .filter(|c| c.state == ContainerState::Running)
        .map(|c| c.id)
        .collect();
    assert_eq!(after, clean, "a nanolet restart restarts no container");
    let counts_after = wait_for(Duration::from_secs(30), || {
        let c = counts(&n);
        c.values().all(|v| *v >= 0).then_some(c)
    })
    .expect("restart counts listed");
    assert_eq!(
        counts_after, counts_before,
        "restart counts continue unchanged"
    );
}
