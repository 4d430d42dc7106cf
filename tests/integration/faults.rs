//! Fault injection against the real binary and a real containerd: nanolet is killed with
//! SIGKILL at arbitrary moments while manifests are created, edited and deleted; after each
//! restart it must converge to exactly the desired pods: no orphaned or duplicated sandboxes or
//! containers, and running containers are not restarted because nanolet restarted.

use nanolet_test_support as support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use nanolet::cri::{ContainerState, Runtime, SandboxState};
use support::agent::Nanolet;
use support::{Containerd, wait_for};

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
        .unwrap_or(50);
    let desired = churn_with_kill_9(&mut n, &mut rng, rounds);
    let uids = wait_converged(&n, &desired);
    let clean = wait_runtime_clean(&rt, &n, &uids);

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

/// `rounds` rounds of creating, editing and deleting the manifests of up to six pods at
/// random, each ended by a SIGKILL of nanolet at an arbitrary moment and a new start. Returns
/// the desired pods: name -> version of the manifest on disk.
fn churn_with_kill_9(n: &mut Nanolet, rng: &mut Rng, rounds: u64) -> BTreeMap<String, u64> {
    // name -> version of the manifest on disk.
    let mut desired: BTreeMap<String, u64> = BTreeMap::new();
    for round in 0..rounds {
        for _ in 0..1 + rng.below(6) {
            let name = format!("p{}", rng.below(6));
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
    desired
}

/// Returns the UIDs of the pods once /pods lists exactly the desired ones, each Running at its
/// desired version.
fn wait_converged(n: &Nanolet, desired: &BTreeMap<String, u64>) -> BTreeSet<String> {
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
    uids
}

/// Returns the running containers' IDs once the runtime holds exactly the pods of `uids`.
fn wait_runtime_clean(rt: &dyn Runtime, n: &Nanolet, uids: &BTreeSet<String>) -> BTreeSet<String> {
    // The runtime holds exactly those pods: one ready sandbox and one running container each,
    // and nothing of any other UID.
    wait_for(Duration::from_secs(60), || {
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
    })
}

// ---------------------------------------------------------------------------------------------
// Shared helpers for the fault tests below.

fn pid_of(n: &Nanolet) -> u32 {
    n.child.as_ref().expect("nanolet running").id()
}

/// A `/proc/<pid>/status` figure (kB for Vm*, a count for Threads).
fn proc_status(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(key)?
                .trim_start_matches(':')
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn running_container_id(p: &serde_json::Value) -> String {
    p["status"]["containerStatuses"][0]["containerID"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn version_of(p: &serde_json::Value) -> String {
    p["metadata"]["labels"]["version"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `/manifests/errors` as (origin, reason) pairs.
fn manifest_errors(n: &Nanolet) -> Vec<(String, String)> {
    n.get("/manifests/errors")
        .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|e| {
            (
                e["origin"].as_str().unwrap_or_default().to_string(),
                e["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn wait_running_version(n: &Nanolet, name: &str, version: u64) -> serde_json::Value {
    n.wait_pod(name, &format!("Running at version {version}"), |p| {
        p["status"]["phase"] == "Running"
            && version_of(p) == version.to_string()
            && p["status"]["containerStatuses"][0]["state"]["running"].is_object()
    })
}

/// Objects of pods named `name` (full name) in the runtime: (sandboxes, containers).
fn runtime_objects(rt: &dyn Runtime, name: &str) -> (usize, usize) {
    let full = format!("{name}-node1");
    let sbs = rt
        .list_pod_sandboxes()
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s.name == full)
        .count();
    let ctrs = rt
        .list_containers()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.labels.get("io.kubernetes.pod.name") == Some(&full))
        .count();
    (sbs, ctrs)
}

// ---------------------------------------------------------------------------------------------
// Manifest directory faults

/// The file source under the ways files really change: an in-place write seen half-way (a YAML
/// error, reported, then the completed file runs), write-to-temp-and-rename from a name the
/// source ignores, a symlinked manifest (following edits of its target), huge and deeply
/// nested documents (rejected, with nanolet's peak memory bounded: the kubelet's
/// maxConfigLength is 10 MiB), and the whole directory deleted (every pod goes, as the kubelet's
/// empty snapshot for a missing path does) and recreated (its pods come back).
#[test]
fn manifest_directory_faults_converge_to_the_final_content() {
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    let dir = n.manifests();
    let errors_for = |file: &str| {
        let path = dir.join(file).display().to_string();
        manifest_errors(&n)
            .into_iter()
            .filter(|(o, _)| *o == path)
            .map(|(_, r)| r)
            .collect::<Vec<_>>()
    };

    // 1. A partial in-place write: cut inside the flow sequence, so it is not valid YAML.
    let full = manifest("partial", 1);
    let cut = full.find("'3600'").expect("cut point") + 3;
    std::fs::write(dir.join("partial.yaml"), &full[..cut]).expect("write");
    wait_for(Duration::from_secs(30), || {
        (!errors_for("partial.yaml").is_empty()).then_some(())
    })
    .unwrap_or_else(|| panic!("half-written file not reported: {:?}", manifest_errors(&n)));
    assert!(n.pod("partial").is_none(), "no pod from half a manifest");
    std::fs::write(dir.join("partial.yaml"), &full).expect("write");
    wait_running_version(&n, "partial", 1);
    assert!(errors_for("partial.yaml").is_empty());

    // 2. Written under a name the source ignores, then renamed into place.
    std::fs::write(dir.join("renamed.yaml.tmp"), manifest("renamed", 1)).expect("write");
    std::fs::rename(dir.join("renamed.yaml.tmp"), dir.join("renamed.yaml")).expect("rename");
    wait_running_version(&n, "renamed", 1);

    // 3. A symlink to a manifest elsewhere; the target is edited (atomically, in its dir).
    let elsewhere = ctd.tmp().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("dir");
    std::fs::write(elsewhere.join("real.yaml"), manifest("linked", 1)).expect("write");
    std::os::unix::fs::symlink(elsewhere.join("real.yaml"), dir.join("linked.yaml"))
        .expect("symlink");
    wait_running_version(&n, "linked", 1);
    std::fs::write(elsewhere.join(".real.tmp"), manifest("linked", 2)).expect("write");
    std::fs::rename(elsewhere.join(".real.tmp"), elsewhere.join("real.yaml")).expect("rename");
    wait_running_version(&n, "linked", 2);

    // 4. Huge and deeply nested documents: rejected, memory bounded.
    let pid = pid_of(&n);
    let hwm_before = proc_status(pid, "VmHWM");
    let huge = format!(
        "{}    env:\n    - name: PAD\n      value: \"{}\"\n",
        manifest("huge", 1),
        "x".repeat(12 << 20)
    );
    std::fs::write(dir.join("huge.yaml"), huge).expect("write");
    let nested = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {}\n",
        "[".repeat(200_000)
    );
    std::fs::write(dir.join("nested.yaml"), nested).expect("write");
    wait_for(Duration::from_secs(30), || {
        (!errors_for("huge.yaml").is_empty() && !errors_for("nested.yaml").is_empty()).then_some(())
    })
    .unwrap_or_else(|| panic!("huge/nested not reported: {:?}", manifest_errors(&n)));
    assert!(
        errors_for("huge.yaml")[0].contains("larger than 10485760 bytes"),
        "{:?}",
        errors_for("huge.yaml")
    );
    let hwm_after = proc_status(pid, "VmHWM");
    assert!(
        hwm_after < hwm_before + 64 * 1024,
        "peak RSS grew from {hwm_before} kB to {hwm_after} kB reading a 12 MiB and a 200k-deep file"
    );
    assert!(n.pod("huge").is_none() && n.pod("nested").is_none());
    for p in ["partial", "renamed", "linked"] {
        assert_eq!(n.pod(p).expect("pod")["status"]["phase"], "Running", "{p}");
    }

    // 5. The directory deleted: every pod goes; recreated: its pods come back.
    std::fs::remove_dir_all(&dir).expect("rm -r manifests");
    wait_for(Duration::from_secs(60), || {
        n.pods().is_empty().then_some(())
    })
    .unwrap_or_else(|| panic!("pods left after the directory went: {:?}", n.pods().len()));
    let rt = ctd.runtime();
    wait_for(Duration::from_secs(30), || {
        (rt.list_pod_sandboxes().unwrap_or_default().is_empty()).then_some(())
    })
    .expect("sandboxes removed");
    std::fs::create_dir_all(&dir).expect("mkdir");
    n.write("back.yaml", &manifest("back", 7));
    wait_running_version(&n, "back", 7);
    assert_eq!(n.pods().len(), 1);
}

/// A symlinked manifest directory whose link is swapped atomically (as configuration
/// management tools and the `..data` pattern do): the pods follow the new target.
#[test]
fn symlinked_manifest_directory_follows_an_atomic_swap() {
    let ctd = Containerd::start();
    let a = ctd.tmp().join("gen-a");
    let b = ctd.tmp().join("gen-b");
    std::fs::create_dir_all(&a).expect("dir");
    std::fs::create_dir_all(&b).expect("dir");
    std::fs::write(a.join("one.yaml"), manifest("one", 1)).expect("write");
    std::fs::write(b.join("two.yaml"), manifest("two", 1)).expect("write");
    let link = ctd.tmp().join("current");
    std::os::unix::fs::symlink(&a, &link).expect("symlink");
    let n = Nanolet::start(&ctd, &[format!("--pod-manifest-path={}", link.display())]);
    wait_running_version(&n, "one", 1);
    let tmp_link = ctd.tmp().join(".current.tmp");
    std::os::unix::fs::symlink(&b, &tmp_link).expect("symlink");
    std::fs::rename(&tmp_link, &link).expect("swap");
    wait_running_version(&n, "two", 1);
    wait_for(Duration::from_secs(60), || {
        n.pod("one").is_none().then_some(())
    })
    .expect("the old generation's pod goes");
}

/// The kubelet's e2e "mirror pod grace period" scenario: a manifest rewritten 300 times at
/// 100 ms intervals converges to exactly one pod with the final content, and the runtime holds
/// exactly its sandbox and container.
#[test]
fn a_manifest_rewritten_300_times_converges_to_one_pod() {
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    for v in 1..=300u64 {
        n.write("busy.yaml", &manifest("busy", v));
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_running_version(&n, "busy", 300);
    let rt = ctd.runtime();
    wait_for(Duration::from_secs(60), || {
        (runtime_objects(&rt, "busy") == (1, 1)).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "runtime holds {:?} (sandboxes, containers) for busy\n{}",
            runtime_objects(&rt, "busy"),
            n.log_tail()
        )
    });
    assert_eq!(n.pods().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Manifest URL faults

/// A body that trickles out a byte every 500 ms.
struct Drip(usize);
impl std::io::Read for Drip {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.0 == 0 || buf.is_empty() {
            return Ok(0);
        }
        std::thread::sleep(Duration::from_millis(500));
        self.0 -= 1;
        buf[0] = b' ';
        Ok(1)
    }
}

/// The URL source under a misbehaving server: timeouts, a slow drip, HTTP 500, a truncated
/// body, invalid YAML, a body over the 10 MiB limit and a redirect loop. Each time the last good
/// pods keep running untouched, the failure is reported on /manifests/errors (naming the URL,
/// never a header value), memory stays bounded, and when the server is good again the error
/// clears and a changed list is applied.
#[test]
fn manifest_url_faults_keep_the_last_good_pods_running() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    let ctd = Containerd::start();
    let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("server"));
    let addr = server.server_addr().to_ip().expect("addr");
    let url = format!("http://{addr}/pods");
    // mode * 1000 + version
    let state = Arc::new(AtomicU64::new(1));
    let list = |v: u64| {
        format!(
            r#"{{"apiVersion":"v1","kind":"PodList","items":[{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"web","labels":{{"version":"{v}"}}}},"spec":{{"terminationGracePeriodSeconds":1,"containers":[{{"name":"c","image":"localhost/busybox:1.36","command":["sleep","3600"]}}]}}}}]}}"#
        )
    };
    {
        let server = server.clone();
        let state = state.clone();
        let url = url.clone();
        std::thread::spawn(move || {
            for req in server.incoming_requests() {
                let s = state.load(Ordering::SeqCst);
                let (mode, v) = (s / 1000, s % 1000);
                let body = list(v);
                let url = url.clone();
                // Each request on its own thread: slow answers must not block the next poll.
                std::thread::spawn(move || {
                    let _ = match mode {
                        1 => {
                            std::thread::sleep(Duration::from_secs(12));
                            req.respond(tiny_http::Response::from_string(body))
                        }
                        2 => req.respond(tiny_http::Response::new(
                            200.into(),
                            vec![],
                            Drip(60),
                            Some(60),
                            None,
                        )),
                        3 => req.respond(
                            tiny_http::Response::from_string("boom").with_status_code(500),
                        ),
                        4 => req.respond(tiny_http::Response::new(
                            200.into(),
                            vec![],
                            std::io::Cursor::new(body.as_bytes()[..body.len() / 2].to_vec()),
                            Some(body.len()),
                            None,
                        )),
                        5 => req.respond(tiny_http::Response::from_string("items: [unclosed")),
                        6 => req.respond(tiny_http::Response::from_data(vec![b' '; 11 << 20])),
                        7 => req.respond(
                            tiny_http::Response::from_string("again")
                                .with_status_code(302)
                                .with_header(
                                    tiny_http::Header::from_bytes(&b"Location"[..], url.as_bytes())
                                        .expect("header"),
                                ),
                        ),
                        _ => req.respond(tiny_http::Response::from_string(body)),
                    };
                });
            }
        });
    }
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--manifest-url={url}"),
            "--manifest-url-header=X-Token:s3cret-value".into(),
        ],
    );
    let first = wait_running_version(&n, "web", 1);
    let cid = running_container_id(&first);
    let pid = pid_of(&n);
    let url_errors = |n: &Nanolet| {
        manifest_errors(n)
            .into_iter()
            .filter(|(o, _)| *o == url)
            .map(|(_, r)| r)
            .collect::<Vec<_>>()
    };
    for (mode, what) in [
        (1, "timeout"),
        (2, "slow drip"),
        (3, "HTTP 500"),
        (4, "truncated body"),
        (5, "invalid YAML"),
        (6, "body over the limit"),
        (7, "redirect loop"),
    ] {
        state.store(mode * 1000 + 1, Ordering::SeqCst);
        let errs = wait_for(Duration::from_secs(40), || {
            let e = url_errors(&n);
            (!e.is_empty()).then_some(e)
        })
        .unwrap_or_else(|| panic!("{what}: no error reported\n{}", n.log_tail()));
        assert!(
            errs.iter().all(|e| !e.contains("s3cret-value")),
            "{what}: a header value leaked: {errs:?}"
        );
        let p = n.pod("web").expect("web still listed");
        assert_eq!(p["status"]["phase"], "Running", "{what}");
        assert_eq!(
            running_container_id(&p),
            cid,
            "{what}: the last good pod keeps running"
        );
        // Good again (same list): the error clears.
        state.store(1, Ordering::SeqCst);
        wait_for(Duration::from_secs(30), || {
            url_errors(&n).is_empty().then_some(())
        })
        .unwrap_or_else(|| panic!("{what}: error never cleared: {:?}", url_errors(&n)));
    }
    let hwm = proc_status(pid, "VmHWM");
    assert!(hwm < 128 * 1024, "peak RSS {hwm} kB after the faults");
    // Recovery with a change: version 2 replaces version 1.
    state.store(2, Ordering::SeqCst);
    wait_running_version(&n, "web", 2);
    assert_eq!(n.pods().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Runtime faults

/// containerd frozen (SIGSTOP): every CRI call hangs, and nanolet's deadlines
/// (--runtime-request-timeout) bound them: /healthz keeps answering at once and names the
/// runtime check; a manifest written meanwhile runs once containerd is thawed. Then containerd
/// killed with SIGKILL and restarted: the pods whose shims survived are not recreated.
#[test]
fn hung_and_killed_containerd_are_survived() {
    let mut ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &["--runtime-request-timeout=3s".into()]);
    n.write("steady.yaml", &manifest("steady", 1));
    let cid = running_container_id(&wait_running_version(&n, "steady", 1));
    let ctd_pid = nix::unistd::Pid::from_raw(ctd.daemon_pid().expect("containerd pid") as i32);
    nix::sys::signal::kill(ctd_pid, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP");
    let thaw = scopeguard(move || {
        let _ = nix::sys::signal::kill(ctd_pid, nix::sys::signal::Signal::SIGCONT);
    });
    n.write("queued.yaml", &manifest("queued", 1));
    let down = wait_for(Duration::from_secs(60), || {
        let t = std::time::Instant::now();
        let body = n.get("/healthz?verbose")?;
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "healthz took {:?} while containerd hangs",
            t.elapsed()
        );
        body.contains("[-]runtime failed").then_some(body)
    });
    assert!(
        down.is_some(),
        "runtime check never failed\n{}",
        n.log_tail()
    );
    drop(thaw);
    wait_running_version(&n, "queued", 1);
    let p = wait_running_version(&n, "steady", 1);
    assert_eq!(running_container_id(&p), cid, "steady survived the freeze");
    wait_for(Duration::from_secs(30), || {
        n.get("/healthz").filter(|b| b == "ok")
    })
    .expect("healthy again");

    // SIGKILL: shims and containers survive; nanolet reconnects and recreates nothing.
    let before: BTreeSet<String> = n.pods().iter().map(running_container_id).collect();
    ctd.kill_daemon();
    wait_for(Duration::from_secs(30), || {
        n.get("/healthz?verbose")
            .filter(|b| b.contains("[-]runtime failed"))
    })
    .expect("runtime down noticed");
    ctd.start_daemon();
    wait_for(Duration::from_secs(60), || {
        n.get("/healthz").filter(|b| b == "ok")
    })
    .unwrap_or_else(|| panic!("never healthy after containerd came back\n{}", n.log_tail()));
    let after: BTreeSet<String> = wait_for(Duration::from_secs(30), || {
        let ids: BTreeSet<String> = n.pods().iter().map(running_container_id).collect();
        (ids.len() == 2 && !ids.contains("")).then_some(ids)
    })
    .expect("both pods listed");
    assert_eq!(
        after, before,
        "no pod recreated after containerd was killed"
    );
}

/// Runs `f` on drop (a minimal scope guard, so a failing assertion still thaws containerd).
struct Guard<F: FnMut()>(F);
impl<F: FnMut()> Drop for Guard<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}
fn scopeguard<F: FnMut()>(f: F) -> Guard<F> {
    Guard(f)
}

// ---------------------------------------------------------------------------------------------
// Disk full

/// The root dir's filesystem filled to the last byte by something else: nanolet keeps running
/// and serving (/healthz ok, /pods answers), DiskPressure is raised, the BestEffort pod is
/// evicted per the eviction rules and a new pod is refused at admission ("The node had
/// condition: [DiskPressure]"); once the space is back both run.
#[test]
fn root_dir_full_keeps_nanolet_serving_and_evicting() {
    let ctd = Containerd::start();
    let fs = support::Tmpfs::mount(&ctd.tmp().join("full-root"), "16m");
    let small = fs.0.clone();
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--root-dir={}", small.display()),
            // The nodefs signal is the fuller of the root dir and the pod logs dir: both on
            // the small filesystem, so the test machine's own disk (8 % free here once) does
            // not put the node under DiskPressure before the ballast does.
            format!("--pod-logs-dir={}", small.join("log/pods").display()),
            "--eviction-hard=nodefs.available<10%".into(),
            "--eviction-monitoring-period=1s".into(),
            "--eviction-pressure-transition-period=3s".into(),
        ],
    );
    n.write("victim.yaml", &manifest("victim", 1));
    wait_running_version(&n, "victim", 1);
    // Fill the filesystem until ENOSPC.
    {
        use std::io::Write;
        let mut f = std::fs::File::create(small.join("ballast")).expect("ballast");
        let chunk = vec![0u8; 1 << 20];
        while f.write_all(&chunk).is_ok() {}
    }
    n.wait_pod("victim", "Evicted", |p| {
        p["status"]["phase"] == "Failed" && p["status"]["reason"] == "Evicted"
    });
    n.write("late.yaml", &manifest("late", 1));
    let late = n.wait_pod("late", "refused at admission", |p| {
        p["status"]["reason"] == "Evicted"
    });
    assert_eq!(
        late["status"]["message"],
        "The node had condition: [DiskPressure]. "
    );
    for _ in 0..5 {
        assert_eq!(
            n.get("/healthz").as_deref(),
            Some("ok"),
            "healthz with a full disk"
        );
        assert!(
            n.get("/healthz?verbose")
                .unwrap_or_default()
                .contains("DiskPressure=True")
        );
        assert_eq!(n.pods().len(), 2, "/pods answers");
    }
    std::fs::remove_file(small.join("ballast")).expect("rm ballast");
    wait_running_version(&n, "victim", 1);
    wait_running_version(&n, "late", 1);
}
