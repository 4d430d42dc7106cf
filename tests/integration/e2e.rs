//! Black-box tests of the real `nanolet` binary against a real containerd (started by the
//! harness in a temp dir). Each test writes manifests, starts nanolet, and asserts the
//! kubelet's static-pod semantics through `/pods`, the log files and CRI.

use nanolet_test_support as support;

use std::fs;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nanolet::cri::{ContainerState, Runtime};
use serde_json::Value;
use support::{Containerd, wait_for};

use support::agent::{NODE, Nanolet, TIMEOUT, free_port};

fn uid_of(p: &Value) -> String {
    p["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn container_status<'a>(p: &'a Value, name: &str) -> &'a Value {
    p["status"]["containerStatuses"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

fn condition<'a>(p: &'a Value, t: &str) -> &'a Value {
    p["status"]["conditions"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["type"] == t))
        .unwrap_or(&Value::Null)
}

fn pod_yaml(name: &str, body: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n    app: {name}\n{body}"
    )
}

/// Containers nanolet created for pod `name` (full name), from CRI.
/// Waits for pod `name` (in `default`) to run, then for its container `c`'s first log file to
/// contain `marker`; returns the log text.
fn wait_output(n: &Nanolet, name: &str, marker: &str) -> String {
    let p = n.wait_phase(name, "Running");
    let uid = uid_of(&p);
    let log = n
        .pod_logs()
        .join(format!("default_{name}-node1_{uid}/c/0.log"));
    wait_for(TIMEOUT, || {
        fs::read_to_string(&log).ok().filter(|s| s.contains(marker))
    })
    .unwrap_or_else(|| panic!("no output:\n{}", n.log_tail()))
}

/// runAsNonRoot with an image that runs as root (the kubelet's verifyRunAsNonRoot): container
/// `c` of pod `name` waits in CreateContainerConfigError and never reaches containerd.
fn assert_refused_as_root(n: &Nanolet, ctd: &Containerd, name: &str) -> Value {
    let p = n.wait_pod(name, "CreateContainerConfigError", |p| {
        container_status(p, "c")["state"]["waiting"]["reason"] == "CreateContainerConfigError"
    });
    let msg = container_status(&p, "c")["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        msg.starts_with("container has runAsNonRoot and image will run as root"),
        "{msg}"
    );
    assert!(cri_containers(&ctd.runtime(), name).is_empty());
    p
}

fn cri_containers(rt: &dyn Runtime, name: &str) -> Vec<nanolet::cri::ContainerInfo> {
    let full = format!("{name}-{}", NODE.to_lowercase());
    let mut v: Vec<_> = rt
        .list_containers()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| {
            c.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some(full.as_str())
        })
        .collect();
    v.sort_by_key(|c| c.created_at);
    v
}

#[test]
fn static_pod_runs_with_kubelet_name_uid_annotations_status_and_logs() {
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    n.write(
        "hello.yaml",
        &pod_yaml(
            "hello",
            "spec:\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'echo hello; sleep 3600']\n",
        ),
    );
    let p = n.wait_pod("hello", "Running and Ready", |p| {
        p["status"]["phase"] == "Running" && condition(p, "Ready")["status"] == "True"
    });
    // Static pod naming: <name>-<lowercased node name>, namespace default, nodeName set.
    assert_eq!(p["metadata"]["name"], "hello-node1");
    assert_eq!(p["metadata"]["namespace"], "default");
    assert_eq!(p["spec"]["nodeName"], "node1");
    assert_eq!(p["metadata"]["labels"]["app"], "hello");
    // UID: 32 lowercase hex chars (md5), mirrored in kubernetes.io/config.hash.
    let uid = uid_of(&p);
    assert_eq!(uid.len(), 32, "{uid}");
    assert!(
        uid.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    let ann = &p["metadata"]["annotations"];
    assert_eq!(ann["kubernetes.io/config.hash"], uid.as_str());
    assert_eq!(ann["kubernetes.io/config.source"], "file");
    assert!(
        ann["kubernetes.io/config.seen"]
            .as_str()
            .is_some_and(|s| s.starts_with("20"))
    );
    // Status shaped like the kubelet's.
    let st = &p["status"];
    for (t, want) in [
        ("PodReadyToStartContainers", "True"),
        ("Initialized", "True"),
        ("ContainersReady", "True"),
        ("PodScheduled", "True"),
    ] {
        assert_eq!(condition(&p, t)["status"], want, "condition {t}");
    }
    let pod_ip = st["podIP"].as_str().unwrap_or_default();
    let prefix = ctd
        .subnet()
        .split('.')
        .take(2)
        .collect::<Vec<_>>()
        .join(".");
    assert!(
        pod_ip.starts_with(&prefix),
        "CNI pod IP {pod_ip} in {}",
        ctd.subnet()
    );
    assert!(!st["hostIP"].as_str().unwrap_or_default().is_empty());
    assert!(st["startTime"].as_str().is_some());
    assert_eq!(st["qosClass"], "BestEffort");
    let cs = container_status(&p, "c");
    assert_eq!(cs["ready"], true);
    assert_eq!(cs["started"], true);
    assert_eq!(cs["restartCount"], 0);
    assert_eq!(cs["image"], "localhost/busybox:1.36");
    assert!(cs["imageID"].as_str().is_some_and(|s| !s.is_empty()));
    let cid = cs["containerID"].as_str().unwrap_or_default().to_string();
    assert!(cid.starts_with("containerd://"), "{cid}");
    assert!(cs["state"]["running"]["startedAt"].as_str().is_some());

    // The container in CRI carries the kubelet's labels.
    let rt = ctd.runtime();
    let cri = cri_containers(&rt, "hello");
    assert_eq!(cri.len(), 1);
    assert_eq!(format!("containerd://{}", cri[0].id), cid);
    assert_eq!(cri[0].labels["io.kubernetes.pod.namespace"], "default");
    assert_eq!(cri[0].labels["io.kubernetes.pod.uid"], uid);
    assert_eq!(cri[0].labels["io.kubernetes.container.name"], "c");
    assert_eq!(cri[0].state, ContainerState::Running);

    // Log path: <podLogsDir>/<ns>_<name>_<uid>/<container>/<restartCount>.log, CRI line format.
    let log = n
        .pod_logs()
        .join(format!("default_hello-node1_{uid}"))
        .join("c/0.log");
    let line = wait_for(TIMEOUT, || {
        fs::read_to_string(&log).ok().and_then(|s| {
            s.lines()
                .find(|l| l.ends_with(" stdout F hello"))
                .map(String::from)
        })
    })
    .unwrap_or_else(|| panic!("no hello line in {}", log.display()));
    assert!(
        line.split(' ').next().is_some_and(|ts| ts.contains('T')),
        "RFC3339Nano timestamp first: {line}"
    );
    // healthz on the read-only port too.
    assert_eq!(n.get("/healthz").as_deref(), Some("ok"));
}

#[test]
fn edit_replaces_pod_with_new_uid_and_delete_terminates_and_cleans_up() {
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    let rt = ctd.runtime();
    let body = |msg: &str| {
        pod_yaml(
            "edit",
            &format!(
                "spec:\n  terminationGracePeriodSeconds: 5\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, \"trap 'exit 0' TERM; echo {msg}; while true; do sleep 1; done\"]\n"
            ),
        )
    };
    n.write("edit.yaml", &body("one"));
    let p1 = n.wait_phase("edit", "Running");
    let uid1 = uid_of(&p1);
    let c1 = cri_containers(&rt, "edit");
    assert_eq!(c1.len(), 1);

    // Any edit means a new UID: the old pod is terminated and a new one created.
    n.write("edit.yaml", &body("two"));
    let p2 = n.wait_pod("edit", "new UID Running", |p| {
        uid_of(p) != uid1 && p["status"]["phase"] == "Running"
    });
    let uid2 = uid_of(&p2);
    assert_eq!(uid2.len(), 32);
    let after = wait_for(TIMEOUT, || {
        let v = cri_containers(&rt, "edit");
        (v.len() == 1 && v[0].id != c1[0].id).then_some(v)
    })
    .expect("old container removed, one new container");
    assert_eq!(after[0].labels["io.kubernetes.pod.uid"], uid2);
    assert!(
        !n.pod_logs()
            .join(format!("default_edit-node1_{uid1}"))
            .exists(),
        "old pod's logs removed"
    );

    // Delete the manifest: the pod is terminated and every sandbox and container removed.
    n.remove("edit.yaml");
    wait_for(TIMEOUT, || n.pod("edit").is_none().then_some(())).expect("pod gone from /pods");
    wait_for(TIMEOUT, || {
        (rt.list_containers().map(|v| v.is_empty()).unwrap_or(false)
            && rt
                .list_pod_sandboxes()
                .map(|v| v.is_empty())
                .unwrap_or(false))
        .then_some(())
    })
    .expect("no containers or sandboxes left");
}

#[test]
fn crash_is_restarted_at_once_then_with_10s_backoff() {
    // kubelet: first restart immediate, then backoff 10s (doubling, capped at 300s).
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    let rt = ctd.runtime();
    n.write(
        "crash.yaml",
        &pod_yaml("crash", "spec:\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'echo boom; exit 1']\n"),
    );
    // Wait for attempt 2 (third container) to exist.
    let started = Instant::now();
    let p = n.wait_pod("crash", "CrashLoopBackOff", |p| {
        container_status(p, "c")["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    });
    let cs = container_status(&p, "c");
    assert_eq!(cs["restartCount"], 1);
    assert!(cs["state"]["waiting"]["message"].as_str().is_some_and(|m| {
        m.starts_with("back-off 10s restarting failed container=c pod=crash-node1_default(")
    }));
    assert_eq!(cs["lastState"]["terminated"]["exitCode"], 1);
    assert_eq!(cs["lastState"]["terminated"]["reason"], "Error");
    assert_eq!(
        p["status"]["phase"], "Running",
        "restartPolicy Always keeps the pod Running"
    );
    assert_eq!(condition(&p, "Ready")["reason"], "ContainersNotReady");
    assert_eq!(
        condition(&p, "Ready")["message"],
        "containers with unready status: [c]"
    );

    let third = wait_for(Duration::from_secs(40), || {
        let v = cri_containers(&rt, "crash");
        (v.len() >= 2 && v.iter().any(|c| c.attempt == 2)).then_some(v)
    })
    .expect("third attempt");
    let status = |id: &str| rt.container_status(id).expect("container status");
    // Attempt 0 may be garbage-collected (the newest two are kept) between the list and this.
    let a0 = third
        .iter()
        .find(|c| c.attempt == 0)
        .and_then(|c| rt.container_status(&c.id).ok());
    let a1 = status(&third.iter().find(|c| c.attempt == 1).expect("attempt 1").id);
    let a2 = status(&third.iter().find(|c| c.attempt == 2).expect("attempt 2").id);
    if let Some(a0) = a0 {
        let gap = (a1.created_at - a0.finished_at) as f64 / 1e9;
        assert!(gap < 3.0, "first restart is immediate, took {gap:.2}s");
    }
    let gap = (a2.created_at - a1.finished_at) as f64 / 1e9;
    assert!(
        (9.5..16.0).contains(&gap),
        "second restart waits the 10s backoff, took {gap:.2}s"
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    // GC keeps the current container and the previous one (for lastState), not more.
    wait_for(TIMEOUT, || {
        (cri_containers(&rt, "crash").len() <= 2).then_some(())
    })
    .expect("old dead containers removed");
}

#[test]
fn restart_policies_end_in_the_kubelet_phase_with_restart_counts() {
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    let pod = |name: &str, policy: &str, code: i32| {
        pod_yaml(
            name,
            &format!(
                "spec:\n  restartPolicy: {policy}\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'exit {code}']\n"
            ),
        )
    };
    n.write("never-fail.yaml", &pod("never-fail", "Never", 3));
    n.write("never-ok.yaml", &pod("never-ok", "Never", 0));
    n.write("onfailure-ok.yaml", &pod("onfailure-ok", "OnFailure", 0));
    n.write(
        "onfailure-fail.yaml",
        &pod("onfailure-fail", "OnFailure", 1),
    );
    n.write("always-ok.yaml", &pod("always-ok", "Always", 0));

    let p = n.wait_phase("never-fail", "Failed");
    let cs = container_status(&p, "c");
    assert_eq!(cs["restartCount"], 0);
    assert_eq!(cs["state"]["terminated"]["exitCode"], 3);
    assert_eq!(cs["state"]["terminated"]["reason"], "Error");

    let p = n.wait_phase("never-ok", "Succeeded");
    assert_eq!(
        container_status(&p, "c")["state"]["terminated"]["reason"],
        "Completed"
    );
    assert_eq!(condition(&p, "Ready")["reason"], "PodCompleted");

    let p = n.wait_phase("onfailure-ok", "Succeeded");
    assert_eq!(container_status(&p, "c")["restartCount"], 0);

    // OnFailure with a failing container, and Always with a succeeding one, are restarted.
    for name in ["onfailure-fail", "always-ok"] {
        let p = n.wait_pod(name, "restarted", |p| {
            container_status(p, "c")["restartCount"]
                .as_i64()
                .unwrap_or(0)
                >= 1
        });
        assert_eq!(p["status"]["phase"], "Running", "{name}");
    }
    // Terminal pods stay terminal, with restart count 0, after further syncs.
    let rt = ctd.runtime();
    assert_eq!(
        cri_containers(&rt, "never-fail").len(),
        1,
        "Never: no restart"
    );
    assert_eq!(
        n.pod("never-fail").map(|p| p["status"]["phase"].clone()),
        Some(Value::from("Failed"))
    );
}

#[test]
fn init_containers_run_in_order_and_a_failing_one_fails_the_pod() {
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    n.write(
        "inits.yaml",
        &pod_yaml(
            "inits",
            "spec:\n  initContainers:\n  - name: one\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'sleep 1; echo one']\n  - name: two\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'echo two']\n  containers:\n  - name: main\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'sleep 3600']\n",
        ),
    );
    n.write(
        "badinit.yaml",
        &pod_yaml(
            "badinit",
            "spec:\n  restartPolicy: Never\n  initContainers:\n  - name: fail\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'exit 7']\n  containers:\n  - name: main\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'sleep 3600']\n",
        ),
    );
    let p = n.wait_pod("inits", "Running and Ready", |p| {
        p["status"]["phase"] == "Running" && condition(p, "Ready")["status"] == "True"
    });
    let inits = p["status"]["initContainerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(inits.len(), 2);
    for i in &inits {
        assert_eq!(i["state"]["terminated"]["reason"], "Completed", "{i}");
    }
    let one_done = inits[0]["state"]["terminated"]["finishedAt"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let two_start = inits[1]["state"]["terminated"]["startedAt"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        one_done <= two_start,
        "init containers run one after another: {one_done} <= {two_start}"
    );
    assert_eq!(condition(&p, "Initialized")["status"], "True");

    let p = n.wait_phase("badinit", "Failed");
    let init = condition(&p, "Initialized");
    assert_eq!(init["status"], "False");
    assert_eq!(init["reason"], "ContainersNotInitialized");
    assert_eq!(init["message"], "containers with incomplete status: [fail]");
    let rt = ctd.runtime();
    let names: Vec<String> = cri_containers(&rt, "badinit")
        .iter()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(
        names,
        vec!["fail".to_string()],
        "main never starts after a failed init container"
    );
    assert_eq!(
        container_status(&p, "main")["state"]["waiting"]["reason"],
        "PodInitializing"
    );
}

#[test]
fn deleting_a_manifest_honours_the_grace_period() {
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    let rt = ctd.runtime();
    // Ignores SIGTERM: killed with SIGKILL when the 3s grace period ends.
    n.write(
        "stubborn.yaml",
        &pod_yaml("stubborn", "spec:\n  terminationGracePeriodSeconds: 3\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, \"trap '' TERM; while true; do sleep 1; done\"]\n"),
    );
    // Exits on SIGTERM at once, though its grace period is 30s.
    n.write(
        "polite.yaml",
        &pod_yaml("polite", "spec:\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, \"trap 'exit 0' TERM; while true; do sleep 1 & wait; done\"]\n"),
    );
    n.wait_phase("stubborn", "Running");
    n.wait_phase("polite", "Running");
    // (A failed list is not "gone".)
    let gone = |name: &str| {
        rt.list_containers().is_ok()
            && cri_containers(&rt, name)
                .iter()
                .all(|c| c.state != ContainerState::Running)
    };

    let t0 = Instant::now();
    n.remove("stubborn.yaml");
    n.remove("polite.yaml");
    wait_for(Duration::from_secs(20), || gone("polite").then_some(())).expect("polite stopped");
    let polite = t0.elapsed();
    wait_for(Duration::from_secs(20), || gone("stubborn").then_some(())).expect("stubborn stopped");
    let stubborn = t0.elapsed();
    assert!(
        polite < Duration::from_secs(3),
        "SIGTERM first: polite pod stopped in {polite:?}"
    );
    assert!(
        stubborn >= Duration::from_millis(2900),
        "stubborn pod got its 3s grace period, stopped at {stubborn:?}"
    );
    assert!(
        stubborn < Duration::from_secs(10),
        "SIGKILL at the end of the grace period, stopped at {stubborn:?}"
    );
    wait_for(TIMEOUT, || {
        (rt.list_pod_sandboxes()
            .map(|v| v.is_empty())
            .unwrap_or(false))
        .then_some(())
    })
    .expect("sandboxes removed");
}

#[test]
fn kill_9_and_restart_adopts_running_containers() {
    let ctd = Containerd::start();
    let mut n = Nanolet::start(&ctd, &[]);
    let rt = ctd.runtime();
    n.write(
        "keep.yaml",
        &pod_yaml("keep", "spec:\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'sleep 3600']\n  - name: crash-once\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'if [ -e /tmp/ran ]; then sleep 3600; else touch /tmp/ran; exit 1; fi']\n"),
    );
    // crash-once is restarted once; /tmp is the container's own rootfs so it exits again...
    // only the first container matters for adoption; wait until c runs.
    let p = n.wait_pod("keep", "c running", |p| {
        container_status(p, "c")["state"]["running"].is_object()
    });
    let uid = uid_of(&p);
    let before: Vec<_> = cri_containers(&rt, "keep");
    let restart_before = n
        .pod("keep")
        .map(|p| {
            container_status(&p, "crash-once")["restartCount"]
                .as_i64()
                .unwrap_or(0)
        })
        .unwrap_or(0);

    n.kill9();
    n.spawn();
    let p = n.wait_pod("keep", "c running after restart", |p| {
        container_status(p, "c")["state"]["running"].is_object()
    });
    assert_eq!(uid_of(&p), uid, "same UID after a nanolet restart");
    let after: Vec<_> = cri_containers(&rt, "keep");
    let c_before = before
        .iter()
        .find(|c| c.name == "c" && c.state == ContainerState::Running)
        .expect("c before");
    let c_after = after
        .iter()
        .find(|c| c.name == "c" && c.state == ContainerState::Running)
        .expect("c after");
    assert_eq!(
        c_before.id, c_after.id,
        "running container adopted, not restarted"
    );
    assert_eq!(container_status(&p, "c")["restartCount"], 0);
    let restart_after = container_status(&p, "crash-once")["restartCount"]
        .as_i64()
        .unwrap_or(0);
    assert!(
        restart_after >= restart_before,
        "restart counts never decrease: {restart_before} -> {restart_after}"
    );
    let sandboxes = rt.list_pod_sandboxes().expect("list sandboxes");
    assert_eq!(sandboxes.len(), 1, "no second sandbox after the restart");
}

#[test]
fn invalid_manifests_are_reported_and_do_not_disturb_valid_pods() {
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    n.write(
        "good.yaml",
        &pod_yaml("good", "spec:\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'sleep 3600']\n"),
    );
    n.wait_phase("good", "Running");
    let rt = ctd.runtime();
    let id = cri_containers(&rt, "good")[0].id.clone();
    n.write(
        "noimage.yaml",
        &pod_yaml("noimage", "spec:\n  containers:\n  - name: c\n"),
    );
    n.write("garbage.json", "{ this is not json \u{0}\u{1}");
    n.write("badport.yaml", &pod_yaml("badport", "spec:\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    ports:\n    - containerPort: notanumber\n"));
    n.write("notes.txt", "ignored: not .yaml/.yml/.json");
    let errors = wait_for(TIMEOUT, || {
        let v: Value = serde_json::from_str(&n.get("/manifests/errors")?).ok()?;
        let a = v.as_array()?.clone();
        (a.len() >= 3).then_some(a)
    })
    .unwrap_or_else(|| {
        panic!(
            "manifest errors never listed: {:?}\n{}",
            n.get("/manifests/errors"),
            n.log_tail()
        )
    });
    let find = |f: &str| {
        errors
            .iter()
            .find(|e| e["origin"].as_str().is_some_and(|o| o.ends_with(f)))
            .cloned()
    };
    let e = find("noimage.yaml").expect("noimage.yaml reported");
    assert_eq!(e["field"], "spec.containers[0].image");
    assert!(
        e["reason"].as_str().is_some_and(|r| r.contains("Required")),
        "{e}"
    );
    let e = find("badport.yaml").expect("badport.yaml reported");
    assert!(
        e["field"]
            .as_str()
            .is_some_and(|f| f.contains("spec.containers[0].ports[0].containerPort")),
        "{e}"
    );
    assert!(find("garbage.json").is_some());
    assert!(
        find("notes.txt").is_none(),
        "only .yaml, .yml and .json are read"
    );
    assert!(n.pod("noimage").is_none() && n.pod("badport").is_none());
    // The valid pod is untouched.
    assert_eq!(cri_containers(&rt, "good")[0].id, id);
    assert_eq!(
        n.pod("good").map(|p| p["status"]["phase"].clone()),
        Some(Value::from("Running"))
    );
    assert_eq!(n.get("/healthz").as_deref(), Some("ok"));
}

#[test]
fn url_source_runs_a_pod_list_and_keeps_it_when_the_server_fails() {
    let ctd = Containerd::start();
    let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("http server"));
    let addr = server.server_addr().to_ip().expect("ip addr");
    let mode = Arc::new(AtomicUsize::new(0)); // 0: two pods, 1: HTTP 500, 2: empty list
    let saw_header = Arc::new(AtomicBool::new(false));
    let list = |names: &[&str]| {
        let items: Vec<String> = names
            .iter()
            .map(|n| format!(r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{n}"}},"spec":{{"terminationGracePeriodSeconds":1,"containers":[{{"name":"c","image":"localhost/busybox:1.36","command":["sleep","3600"]}}]}}}}"#))
            .collect();
        format!(
            r#"{{"apiVersion":"v1","kind":"PodList","items":[{}]}}"#,
            items.join(",")
        )
    };
    let (two, empty) = (list(&["url-a", "url-b"]), list(&[]));
    {
        let server = server.clone();
        let mode = mode.clone();
        let saw = saw_header.clone();
        std::thread::spawn(move || {
            for req in server.incoming_requests() {
                if req
                    .headers()
                    .iter()
                    .any(|h| h.field.equiv("X-Token") && h.value.as_str() == "s3cret")
                {
                    saw.store(true, Ordering::SeqCst);
                }
                let resp = match mode.load(Ordering::SeqCst) {
                    0 => tiny_http::Response::from_string(two.clone()).with_status_code(200),
                    1 => tiny_http::Response::from_string("boom").with_status_code(500),
                    _ => tiny_http::Response::from_string(empty.clone()).with_status_code(200),
                };
                let _ = req.respond(resp);
            }
        });
    }
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--manifest-url=http://{addr}/pods.json"),
            "--manifest-url-header=X-Token:s3cret".into(),
        ],
    );
    let a = n.wait_phase("url-a", "Running");
    n.wait_phase("url-b", "Running");
    assert_eq!(
        a["metadata"]["annotations"]["kubernetes.io/config.source"],
        "http"
    );
    assert!(
        saw_header.load(Ordering::SeqCst),
        "manifest-url-header sent"
    );
    assert!(
        !fs::read_to_string(&n.log)
            .unwrap_or_default()
            .contains("s3cret"),
        "header values are never logged"
    );

    // A failing server changes nothing.
    let rt = ctd.runtime();
    let ids: Vec<String> = cri_containers(&rt, "url-a")
        .iter()
        .map(|c| c.id.clone())
        .collect();
    mode.store(1, Ordering::SeqCst);
    let fetches = |n: &Nanolet| {
        fs::read_to_string(&n.log)
            .unwrap_or_default()
            .matches("HTTP status 500")
            .count()
    };
    wait_for(TIMEOUT, || (fetches(&n) >= 2).then_some(()))
        .unwrap_or_else(|| panic!("no failed fetch logged:\n{}", n.log_tail()));
    assert_eq!(
        cri_containers(&rt, "url-a")
            .iter()
            .map(|c| c.id.clone())
            .collect::<Vec<_>>(),
        ids
    );
    assert!(n.pod("url-b").is_some());

    // An empty list removes the pods.
    mode.store(2, Ordering::SeqCst);
    wait_for(TIMEOUT, || {
        (n.pod("url-a").is_none() && n.pod("url-b").is_none()).then_some(())
    })
    .unwrap_or_else(|| panic!("pods not removed after an empty PodList:\n{}", n.log_tail()));
    wait_for(TIMEOUT, || {
        rt.list_containers()
            .map(|v| v.is_empty())
            .unwrap_or(false)
            .then_some(())
    })
    .expect("containers removed");
    server.unblock();
}

#[test]
fn container_spec_fields_and_networking_reach_the_containers() {
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    let host_port = free_port();
    n.write(
        "spec.yaml",
        &pod_yaml(
            "spec",
            &format!(
                r#"spec:
  containers:
  - name: c
    image: localhost/busybox:1.36
    workingDir: /tmp
    env:
    - name: FOO
      value: bar
    command: [sh, -c]
    args:
    - |
      echo "foo=$FOO pwd=$(pwd)"
      echo "mem=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes)"
      echo served > /tmp/index.html
      exec httpd -f -p 8080 -h /tmp
    ports:
    - containerPort: 8080
      hostPort: {host_port}
    resources:
      limits:
        memory: 64Mi
        cpu: 500m
"#
            ),
        ),
    );
    n.write(
        "hostnet.yaml",
        &pod_yaml(
            "hostnet",
            "spec:\n  hostNetwork: true\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '3600']\n",
        ),
    );
    let p = n.wait_phase("spec", "Running");
    assert_eq!(
        p["status"]["qosClass"], "Guaranteed",
        "requests default to limits: cpu and memory limits only is Guaranteed"
    );
    let uid = uid_of(&p);
    let log = n
        .pod_logs()
        .join(format!("default_spec-node1_{uid}/c/0.log"));
    let text = wait_for(TIMEOUT, || {
        fs::read_to_string(&log).ok().filter(|s| s.contains("mem="))
    })
    .unwrap_or_else(|| panic!("no output in {}", log.display()));
    assert!(
        text.contains("foo=bar pwd=/tmp"),
        "env and workingDir applied: {text}"
    );
    assert!(
        text.contains("mem=67108864"),
        "memory limit 64Mi applied to the cgroup: {text}"
    );
    // hostPort through the CNI portmap plugin.
    let body = wait_for(TIMEOUT, || {
        let mut r = ureq::get(&format!("http://127.0.0.1:{host_port}/index.html"))
            .call()
            .ok()?;
        r.body_mut().read_to_string().ok()
    });
    assert_eq!(
        body.as_deref().map(str::trim),
        Some("served"),
        "hostPort {host_port} reaches the container"
    );

    let h = n.wait_phase("hostnet", "Running");
    assert_eq!(
        h["status"]["podIP"], h["status"]["hostIP"],
        "hostNetwork pods report the host IP"
    );
}

#[test]
fn containerd_restart_is_survived_without_recreating_pods() {
    // containerd stops (shims and containers keep running): healthz names the runtime check,
    // then nanolet reconnects when it returns; no pod is recreated, and work queued meanwhile
    // (a new manifest) is done once containerd is back.
    let mut ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    n.write(
        "steady.yaml",
        &pod_yaml("steady", "spec:\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '3600']\n"),
    );
    n.wait_phase("steady", "Running");
    let before = cri_containers(&ctd.runtime(), "steady");
    assert_eq!(before.len(), 1);

    ctd.stop_daemon();
    let body = wait_for(TIMEOUT, || {
        let b = n.get("/healthz")?;
        (b != "ok").then_some(b)
    })
    .unwrap_or_else(|| {
        panic!(
            "healthz stayed ok while containerd was down:\n{}",
            n.log_tail()
        )
    });
    assert!(
        body.contains("[-]runtime failed"),
        "the runtime check is named: {body}"
    );
    n.write(
        "later.yaml",
        &pod_yaml("later", "spec:\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '3600']\n"),
    );

    ctd.start_daemon();
    wait_for(TIMEOUT, || {
        (n.get("/healthz").as_deref() == Some("ok")).then_some(())
    })
    .unwrap_or_else(|| panic!("healthz never recovered:\n{}", n.log_tail()));
    n.wait_phase("later", "Running");
    let rt = ctd.runtime();
    let after = cri_containers(&rt, "steady");
    assert_eq!(after.len(), 1);
    assert_eq!(
        after[0].id, before[0].id,
        "the running container was not recreated"
    );
    assert_eq!(after[0].state, ContainerState::Running);
    assert_eq!(rt.list_pod_sandboxes().expect("sandboxes").len(), 2);
    let p = n.pod("steady").expect("steady");
    assert_eq!(container_status(&p, "c")["restartCount"], 0);
    // Exits are still noticed after the reconnect: the container is restarted.
    rt.stop_container(&before[0].id, Duration::from_secs(0))
        .expect("stop container");
    n.wait_pod("steady", "restarted after an exit", |p| {
        container_status(p, "c")["restartCount"] == 1
            && container_status(p, "c")["state"]["running"].is_object()
    });
}

#[test]
fn volumes_and_downward_env_reach_the_containers() {
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    let host = ctd.tmp().join("hostdata");
    n.write(
        "vols.yaml",
        &pod_yaml(
            "vols",
            &format!(
                r#"spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: shared
    emptyDir: {{}}
  - name: ram
    emptyDir:
      medium: Memory
      sizeLimit: 8Mi
  - name: data
    hostPath:
      path: {host}
      type: DirectoryOrCreate
  initContainers:
  - name: prep
    image: localhost/busybox:1.36
    command: [sh, -c, 'echo from-init > /shared/greeting']
    volumeMounts:
    - name: shared
      mountPath: /shared
  containers:
  - name: c
    image: localhost/busybox:1.36
    env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    - name: MEM_MI
      valueFrom:
        resourceFieldRef:
          resource: limits.memory
          divisor: 1Mi
    - name: GREETING_FILE
      value: /shared/greeting
    command: [sh, -c]
    args:
    - |
      echo "name=$(POD_NAME) ip=$POD_IP mem=$(MEM_MI)" 'escaped=$$(POD_NAME)'
      echo "init says $(cat $GREETING_FILE)"
      df -k /ram | tail -1
      echo "written by $(POD_NAME)" > /data/out.txt
      sleep 3600
    resources:
      limits:
        memory: 32Mi
    volumeMounts:
    - name: shared
      mountPath: /shared
    - name: ram
      mountPath: /ram
    - name: data
      mountPath: /data
"#,
                host = host.display()
            ),
        ),
    );
    let p = n.wait_phase("vols", "Running");
    let uid = uid_of(&p);
    let pod_ip = p["status"]["podIP"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let log = n
        .pod_logs()
        .join(format!("default_vols-node1_{uid}/c/0.log"));
    let text = wait_for(TIMEOUT, || {
        fs::read_to_string(&log).ok().filter(|s| s.contains("/ram"))
    })
    .unwrap_or_else(|| panic!("no output in {}:\n{}", log.display(), n.log_tail()));
    assert!(
        text.contains(&format!(
            "name=vols-node1 ip={pod_ip} mem=32 escaped=$(POD_NAME)"
        )),
        // (the kubelet expands $(VAR) in args before the shell runs; $$ escapes)
        "fieldRef, resourceFieldRef and $(VAR) expansion: {text}"
    );
    assert!(
        text.contains("init says from-init"),
        "emptyDir shared between init and main container: {text}"
    );
    assert!(
        text.contains(" 8192 "),
        "Memory emptyDir is a tmpfs of sizeLimit 8Mi: {text}"
    );
    // The shell creates out.txt (empty) before echo writes its line: wait for the whole line.
    let written = wait_for(TIMEOUT, || {
        fs::read_to_string(host.join("out.txt"))
            .ok()
            .filter(|s| s.ends_with('\n'))
    })
    .expect("hostPath written");
    assert_eq!(written.trim(), "written by vols-node1");
    // /stats/summary reports the pod's volumes (the Memory emptyDir not counted as disk) and
    // its processes (from the pod cgroup).
    let summary: Value =
        serde_json::from_str(&n.get("/stats/summary").unwrap_or_default()).expect("summary JSON");
    let podstats = summary["pods"]
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|p| p["podRef"]["name"] == "vols-node1")
                .cloned()
        })
        .expect("pod in summary");
    let vols: Vec<&str> = podstats["volume"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(vols, vec!["shared", "ram"], "{podstats:#}");
    assert!(podstats["volume"][0]["usedBytes"].as_u64().unwrap_or(0) >= "from-init\n".len() as u64);
    assert!(podstats["volume"][0]["capacityBytes"].as_u64().unwrap_or(0) > 0);
    assert!(
        podstats["process_stats"]["process_count"]
            .as_u64()
            .unwrap_or(0)
            >= 2,
        "pause + sh + sleep: {podstats:#}"
    );
    // The pod's emptyDir lives under <root-dir>/pods/<uid>/volumes and goes with the pod.
    let ed = n
        .dir
        .join("root/pods")
        .join(&uid)
        .join("volumes/kubernetes.io~empty-dir/shared/greeting");
    assert!(ed.is_file(), "{}", ed.display());
    n.remove("vols.yaml");
    wait_for(TIMEOUT, || {
        (!n.dir.join("root/pods").join(&uid).exists()).then_some(())
    })
    .unwrap_or_else(|| panic!("pod directory not removed:\n{}", n.log_tail()));
    assert!(
        host.join("out.txt").exists(),
        "hostPath content is left alone"
    );
}

#[test]
fn a_failed_host_path_check_keeps_the_pod_pending_with_the_reason() {
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    let missing = ctd.tmp().join("does-not-exist");
    n.write(
        "hp.yaml",
        &pod_yaml(
            "hp",
            &format!(
                "spec:\n  volumes:\n  - name: d\n    hostPath:\n      path: {}\n      type: Directory\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '3600']\n    volumeMounts:\n    - name: d\n      mountPath: /d\n",
                missing.display()
            ),
        ),
    );
    let p = n.wait_pod("hp", "waiting with the mount failure", |p| {
        container_status(p, "c")["state"]["waiting"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("hostPath type check failed"))
    });
    assert_eq!(p["status"]["phase"], "Pending");
    assert_eq!(
        container_status(&p, "c")["state"]["waiting"]["reason"],
        "ContainerCreating"
    );
    // Creating the directory lets the pod start (the kubelet retries the mount).
    fs::create_dir_all(&missing).expect("mkdir");
    n.wait_phase("hp", "Running");
}

#[test]
fn config_maps_and_secrets_come_from_the_local_store() {
    // The kubelet refuses ConfigMaps and Secrets in static pods; nanolet reads them from local
    // manifest directories. Secret volumes live on tmpfs; an edited ConfigMap reaches the running
    // container within one sync period (atomic ..data swap).
    let ctd = Containerd::start();
    let cm_dir = ctd.tmp().join("configmaps");
    let sec_dir = ctd.tmp().join("secrets");
    fs::create_dir_all(&cm_dir).expect("cm dir");
    fs::create_dir_all(&sec_dir).expect("secret dir");
    fs::write(
        cm_dir.join("app.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  greeting: hello\n",
    )
    .expect("configmap");
    fs::write(
        sec_dir.join("creds.yaml"),
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\ndata:\n  password: czNjcmV0\n",
    )
    .expect("secret");
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--config-map-dir={}", cm_dir.display()),
            format!("--secret-dir={}", sec_dir.display()),
            "--sync-frequency=2s".into(),
        ],
    );
    n.write(
        "cfg.yaml",
        &pod_yaml(
            "cfg",
            r#"spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: cfg
    configMap:
      name: app
  - name: sec
    secret:
      secretName: creds
      defaultMode: 0400
  containers:
  - name: c
    image: localhost/busybox:1.36
    env:
    - name: GREETING
      valueFrom:
        configMapKeyRef:
          name: app
          key: greeting
    envFrom:
    - prefix: S_
      secretRef:
        name: creds
    command: [sh, -c, 'echo "greeting=$GREETING pw=$S_password"; sleep 3600']
    volumeMounts:
    - name: cfg
      mountPath: /etc/cfg
    - name: sec
      mountPath: /etc/sec
"#,
        ),
    );
    let p = n.wait_phase("cfg", "Running");
    let uid = uid_of(&p);
    let log = n
        .pod_logs()
        .join(format!("default_cfg-node1_{uid}/c/0.log"));
    let text = wait_for(TIMEOUT, || {
        fs::read_to_string(&log)
            .ok()
            .filter(|s| s.contains("greeting="))
    })
    .unwrap_or_else(|| panic!("no output:\n{}", n.log_tail()));
    assert!(
        text.contains("greeting=hello pw=s3cret"),
        "configMapKeyRef and envFrom secretRef: {text}"
    );
    let rt = ctd.runtime();
    let id = cri_containers(&rt, "cfg")[0].id.clone();
    let cat = |path: &str| {
        rt.exec_sync(
            &id,
            &["cat".to_string(), path.to_string()],
            Duration::from_secs(5),
        )
        .map(|r| String::from_utf8_lossy(&r.stdout).into_owned())
        .unwrap_or_default()
    };
    assert_eq!(cat("/etc/cfg/greeting"), "hello");
    assert_eq!(cat("/etc/sec/password"), "s3cret");
    let secret_dir = n
        .dir
        .join("root/pods")
        .join(&uid)
        .join("volumes/kubernetes.io~secret/sec");
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(
        mountinfo.lines().any(
            |l| l.split(' ').nth(4) == Some(&*secret_dir.to_string_lossy())
                && l.contains(" - tmpfs ")
        ),
        "the secret volume is a tmpfs at {}",
        secret_dir.display()
    );
    // Edit the ConfigMap: visible in the running container within one sync period (2s here).
    fs::write(
        cm_dir.join("app.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  greeting: bonjour\n",
    )
    .expect("configmap");
    wait_for(Duration::from_secs(10), || {
        (cat("/etc/cfg/greeting") == "bonjour").then_some(())
    })
    .unwrap_or_else(|| panic!("configmap update not visible:\n{}", n.log_tail()));
    assert_eq!(
        cri_containers(&rt, "cfg").len(),
        1,
        "the container was not restarted"
    );
    // Teardown unmounts the tmpfs.
    n.remove("cfg.yaml");
    wait_for(TIMEOUT, || {
        (!n.dir.join("root/pods").join(&uid).exists()).then_some(())
    })
    .unwrap_or_else(|| panic!("pod dir left:\n{}", n.log_tail()));
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(
        !mountinfo.contains(&*secret_dir.to_string_lossy()),
        "secret tmpfs unmounted"
    );
}

#[test]
fn security_context_is_applied_like_the_kubelet() {
    // Adapted from the Kubernetes "security-context-demo" example: runAsUser 1000, runAsGroup
    // 3000, fsGroup 2000 -> `id` shows uid=1000 gid=3000 and the fsGroup; files created in an
    // emptyDir belong to group 2000.
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    n.write(
        "sec.yaml",
        &pod_yaml(
            "sec",
            r#"spec:
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsUser: 1000
    runAsGroup: 3000
    fsGroup: 2000
    supplementalGroups: [4000]
  volumes:
  - name: sec-ctx-vol
    emptyDir: {}
  containers:
  - name: c
    image: localhost/busybox:1.36
    command: [sh, -c]
    args:
    - |
      echo "id: $(id)"
      echo hi > /data/demo/f && echo "file group: $(stat -c %g /data/demo/f)"
      touch /rootfile 2>/dev/null && echo "rootfs writable" || echo "rootfs read-only"
      echo "capeff: $(grep CapEff /proc/self/status | cut -f2)"
      sleep 3600
    volumeMounts:
    - name: sec-ctx-vol
      mountPath: /data/demo
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities:
        drop: [ALL]
"#,
        ),
    );
    n.write(
        "nonroot.yaml",
        &pod_yaml(
            "nonroot",
            "spec:\n  securityContext:\n    runAsNonRoot: true\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '3600']\n",
        ),
    );
    let text = wait_output(&n, "sec", "capeff:");
    assert!(text.contains("id: uid=1000 gid=3000 groups="), "{text}");
    let groups = text
        .lines()
        .find(|l| l.contains("id: uid="))
        .unwrap_or_default();
    assert!(
        groups.contains("2000") && groups.contains("4000"),
        "fsGroup and supplementalGroups: {groups}"
    );
    assert!(
        text.contains("file group: 2000"),
        "emptyDir is owned by the fsGroup: {text}"
    );
    assert!(
        text.contains("rootfs read-only"),
        "readOnlyRootFilesystem: {text}"
    );
    assert!(
        text.contains("capeff: 0000000000000000"),
        "capabilities dropped: {text}"
    );

    // runAsNonRoot with an image that runs as root: CreateContainerConfigError, never started.
    let p = assert_refused_as_root(&n, &ctd, "nonroot");
    assert_eq!(p["status"]["phase"], "Pending");
}

#[test]
fn yaml_1_1_values_reach_the_runtime_as_the_kubelet_reads_them() {
    // go-yaml v2 (the kubelet's YAML reader) resolves plain `0400` as octal 256, `yes`/`on` as
    // true: a Secret file mode, a read-only mount and runAsNonRoot written that way must take
    // effect on the real runtime, not fall back to 0644, read-write and root.
    let ctd = Containerd::start();
    let sec_dir = ctd.tmp().join("secrets");
    fs::create_dir_all(&sec_dir).expect("secret dir");
    fs::write(
        sec_dir.join("creds.yaml"),
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\ndata:\n  password: czNjcmV0\n",
    )
    .expect("secret");
    let n = Nanolet::start(&ctd, &[format!("--secret-dir={}", sec_dir.display())]);
    n.write(
        "modes.yaml",
        &pod_yaml(
            "modes",
            r#"spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: sec
    secret:
      secretName: creds
      defaultMode: 0400
  - name: scratch
    emptyDir: {}
  containers:
  - name: c
    image: localhost/busybox:1.36
    command: [sh, -c]
    args:
    - |
      echo "mode: $(stat -L -c %a /etc/sec/password)"
      touch /scratch/f 2>/dev/null && echo "scratch writable" || echo "scratch read-only"
      sleep 3600
    volumeMounts:
    - name: sec
      mountPath: /etc/sec
    - name: scratch
      mountPath: /scratch
      readOnly: yes
"#,
        ),
    );
    n.write(
        "nonroot.yaml",
        &pod_yaml(
            "nonroot",
            "spec:\n  securityContext:\n    runAsNonRoot: on\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '3600']\n",
        ),
    );
    let text = wait_output(&n, "modes", "scratch ");
    assert!(
        text.contains("mode: 400"),
        "defaultMode: 0400 is octal: {text}"
    );
    assert!(
        text.contains("scratch read-only"),
        "readOnly: yes is true: {text}"
    );
    // runAsNonRoot: on is true.
    assert_refused_as_root(&n, &ctd, "nonroot");
}

#[test]
fn dns_config_and_host_aliases_reach_the_container() {
    // dnsPolicy None + dnsConfig gives exactly the configured resolv.conf; hostAliases and the
    // pod's own hostname land in the kubelet-managed /etc/hosts.
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    n.write(
        "dns.yaml",
        &pod_yaml(
            "dns",
            r#"spec:
  terminationGracePeriodSeconds: 1
  dnsPolicy: "None"
  dnsConfig:
    nameservers: [192.0.2.53]
    searches: [edge.example]
    options:
    - name: ndots
      value: "2"
  hostAliases:
  - ip: 192.0.2.7
    hostnames: [gateway.local]
  containers:
  - name: c
    image: localhost/busybox:1.36
    command: [sh, -c, 'cat /etc/resolv.conf /etc/hosts; sleep 3600']
"#,
        ),
    );
    let p = n.wait_phase("dns", "Running");
    let uid = uid_of(&p);
    let ip = p["status"]["podIP"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let log = n
        .pod_logs()
        .join(format!("default_dns-node1_{uid}/c/0.log"));
    let text = wait_for(TIMEOUT, || {
        fs::read_to_string(&log)
            .ok()
            .filter(|s| s.contains("gateway.local"))
    })
    .unwrap_or_else(|| panic!("no output:\n{}", n.log_tail()));
    assert!(text.contains("nameserver 192.0.2.53"), "{text}");
    assert!(text.contains("search edge.example"), "{text}");
    assert!(text.contains("options ndots:2"), "{text}");
    assert!(text.contains("# Kubernetes-managed hosts file."), "{text}");
    assert!(
        text.contains(&format!("{ip}\tdns-node1")),
        "pod IP and hostname in /etc/hosts: {text}"
    );
    assert!(text.contains("192.0.2.7\tgateway.local"), "{text}");
}

#[test]
fn resolv_conf_naming_only_the_systemd_resolved_stub_gives_pods_the_upstream_file() {
    // kubelet --resolv-conf with kubeadm's systemd-resolved rule: 127.0.0.53 does not answer
    // inside a pod's network namespace, so a resolv.conf naming only it is replaced by
    // systemd-resolved's upstream file (here a temp file, through the test seam), logged once.
    let ctd = Containerd::start();
    let stub = ctd.tmp().join("stub-resolv.conf");
    fs::write(
        &stub,
        "nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch stub.example\n",
    )
    .expect("stub");
    let upstream = ctd.tmp().join("upstream-resolv.conf");
    fs::write(
        &upstream,
        "nameserver 192.0.2.11\nnameserver 192.0.2.12\nsearch upstream.example\n",
    )
    .expect("upstream");
    let n = Nanolet::start_with_env(
        &ctd,
        &[format!("--resolv-conf={}", stub.display())],
        &[(
            "NANOLET_SYSTEMD_RESOLVED_RESOLV_CONF",
            upstream.to_str().expect("utf-8 path"),
        )],
    );
    for name in ["dns1", "dns2"] {
        n.write(
            &format!("{name}.yaml"),
            &pod_yaml(
                name,
                r#"spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: localhost/busybox:1.36
    command: [sh, -c, 'cat /etc/resolv.conf; echo END; sleep 3600']
"#,
            ),
        );
    }
    for name in ["dns1", "dns2"] {
        let text = wait_output(&n, name, "END");
        assert!(text.contains("nameserver 192.0.2.11"), "{text}");
        assert!(text.contains("nameserver 192.0.2.12"), "{text}");
        assert!(text.contains("search upstream.example"), "{text}");
        assert!(!text.contains("127.0.0.53"), "{text}");
    }
    let log = fs::read_to_string(&n.log).unwrap_or_default();
    assert_eq!(
        log.matches("names only systemd-resolved's stub").count(),
        1,
        "said once:\n{log}"
    );
}

#[test]
fn container_logs_are_rotated_at_max_size_keeping_max_files() {
    // containerLogMaxSize / containerLogMaxFiles: the current file is renamed to
    // 0.log.<timestamp> and containerd reopens 0.log (CRI ReopenContainerLog). nanolet reacts
    // to growth (inotify), not only to the containerLogMonitorInterval pass: with the pass set
    // to an hour, the new container's log is found when containerd creates it and rotated when
    // a write takes it over the limit. A container writing ~1 MB/s stays bounded (the
    // kubelet's 10 s check is not: kubernetes/kubernetes#110630).
    let ctd = Containerd::start();
    let n = Nanolet::start(
        &ctd,
        &[
            "--container-log-max-size=1Mi".into(),
            "--container-log-max-files=3".into(),
            "--container-log-monitor-interval=1h".into(),
        ],
    );
    n.write(
        "chatty.yaml",
        &pod_yaml(
            "chatty",
            "spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'while true; do yes 0123456789abcdef | head -n 2000; sleep 0.1; done']\n",
        ),
    );
    let p = n.wait_phase("chatty", "Running");
    let dir = n
        .pod_logs()
        .join(format!("default_chatty-node1_{}/c", uid_of(&p)));
    let files = || -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    // (a compression in progress is a hidden temp file)
                    .filter(|n| !n.starts_with('.'))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    // Two rotations: the oldest rotated file goes once there are more than max_files files.
    // (~110 KB of CRI log lines every ~0.1 s reach 1Mi in about a second; the only full pass
    // ran when nanolet started, before the pod existed.)
    wait_for(Duration::from_secs(60), || {
        (files().iter().filter(|f| f.starts_with("0.log.")).count() >= 2).then_some(())
    })
    .unwrap_or_else(|| panic!("no rotation: {:?}\n{}", files(), n.log_tail()));
    let now = files();
    assert!(
        now.len() <= 3,
        "at most containerLogMaxFiles files: {now:?}"
    );
    // Between the rename and ReopenContainerLog there is a moment without 0.log.
    wait_for(TIMEOUT, || dir.join("0.log").exists().then_some(()))
        .unwrap_or_else(|| panic!("the current file never came back: {:?}", files()));
    // Older rotations are gzip-compressed, the newest stays plain (the kubelet's layout).
    wait_for(TIMEOUT, || {
        files()
            .iter()
            .any(|f| f.starts_with("0.log.") && f.ends_with(".gz"))
            .then_some(())
    })
    .unwrap_or_else(|| panic!("no compressed rotation: {:?}", files()));
    // containerd writes to the reopened 0.log (which may be rotated again meanwhile).
    let size = |f: &str| fs::metadata(dir.join(f)).map(|m| m.len()).unwrap_or(0);
    let before = size("0.log");
    wait_for(TIMEOUT, || (size("0.log") > before).then_some(())).expect("0.log keeps growing");
    let newest = files()
        .into_iter()
        .rev()
        .find(|f| f.starts_with("0.log.") && !f.ends_with(".gz"));
    let first_line =
        fs::read_to_string(dir.join(newest.expect("a plain rotated file"))).unwrap_or_default();
    assert!(
        first_line.contains(" stdout "),
        "rotated files keep the CRI format"
    );
    // Bounded while it keeps writing: over several seconds, never more than 3 files and no
    // plain file much over the limit (1Mi + the writes of 20 ms between looks and the reopen,
    // 30-100 ms measured by scripts/bench; 2Mi leaves a debug build under the load of the
    // parallel tests a second. With the kubelet's 10 s check alone they grow to ~11 MB at
    // this rate).
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let now = files();
        assert!(
            now.len() <= 3,
            "at most containerLogMaxFiles files: {now:?}"
        );
        for f in now.iter().filter(|f| !f.ends_with(".gz")) {
            let sz = size(f);
            assert!(sz < 2 << 20, "{f} is {sz} bytes, limit 1Mi");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // `nanolet logs` reads the current file. It is rotated about every second here, and right
    // after a rotation it is empty (the kubelet's reader shows the same), so ask until a read
    // lands between rotations. Between the rename and ReopenContainerLog there is no current
    // file: the kubelet's ReadLogs fails to open it then too, so that one answer is asked
    // again; every other answer must be a success.
    let mut last = String::new();
    let line = wait_for(TIMEOUT, || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_nanolet"))
            .args(["logs", "chatty-node1", "--tail", "1", "--server", &n.url()])
            .output()
            .expect("nanolet logs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success()
            && stderr.contains("log file of container \"c\" in pod \"chatty-node1\" not found")
        {
            return None;
        }
        assert!(
            out.status.success(),
            "nanolet logs --tail 1: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        last = String::from_utf8_lossy(&out.stdout).into_owned();
        (last.trim_end() == "0123456789abcdef").then_some(())
    });
    assert!(line.is_some(), "nanolet logs --tail 1: {last:?}");
}

#[test]
fn pods_get_the_kubelet_qos_cgroup_layout_and_it_is_removed_with_them() {
    // cgroupsPerQOS with the cgroupfs driver: /kubepods/pod<uid> (Guaranteed),
    // /kubepods/burstable/pod<uid>, /kubepods/besteffort/pod<uid>.
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    n.write(
        "be.yaml",
        &pod_yaml("be", "spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '3600']\n"),
    );
    n.write(
        "gu.yaml",
        &pod_yaml("gu", "spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '3600']\n    resources:\n      limits:\n        cpu: 100m\n        memory: 32Mi\n"),
    );
    let rt = ctd.runtime();
    for (name, qos) in [("be", "besteffort/"), ("gu", "")] {
        let p = n.wait_phase(name, "Running");
        let uid = uid_of(&p);
        let id = cri_containers(&rt, name)[0].id.clone();
        let out = rt
            .exec_sync(
                &id,
                &["cat".to_string(), "/proc/self/cgroup".to_string()],
                Duration::from_secs(5),
            )
            .map(|r| String::from_utf8_lossy(&r.stdout).into_owned())
            .unwrap_or_default();
        let want = format!("/kubepods/{qos}pod{uid}/");
        assert!(out.contains(&want), "{name}: cgroup under {want}: {out}");
    }
    // The pod cgroup carries the pod's totals (ResourceConfigForPod): for the Guaranteed pod,
    // cpu.shares 102 (100m), a 10 ms CFS quota per 100 ms, a 32Mi memory limit.
    let gu_uid = uid_of(&n.pod("gu").expect("gu"));
    let v1 = |ctrl: &str, file: &str| {
        fs::read_to_string(format!("/sys/fs/cgroup/{ctrl}/kubepods/pod{gu_uid}/{file}"))
            .map(|s| s.trim().to_string())
            .ok()
    };
    if std::path::Path::new("/sys/fs/cgroup/memory").is_dir() {
        assert_eq!(v1("cpu", "cpu.shares").as_deref(), Some("102"));
        assert_eq!(v1("cpu", "cpu.cfs_quota_us").as_deref(), Some("10000"));
        assert_eq!(
            v1("memory", "memory.limit_in_bytes").as_deref(),
            Some((32u64 << 20).to_string().as_str())
        );
    } else {
        let v2 = fs::read_to_string(format!("/sys/fs/cgroup/kubepods/pod{gu_uid}/memory.max"))
            .unwrap_or_default();
        assert_eq!(v2.trim(), (32u64 << 20).to_string());
    }
    let be_uid = uid_of(&n.pod("be").expect("be"));
    // cgroup v1 (memory controller) or the unified v2 tree, whichever this machine has.
    let dir = [
        format!("/sys/fs/cgroup/memory/kubepods/besteffort/pod{be_uid}"),
        format!("/sys/fs/cgroup/kubepods/besteffort/pod{be_uid}"),
    ]
    .into_iter()
    .map(std::path::PathBuf::from)
    .find(|d| d.is_dir())
    .expect("the pod cgroup exists while the pod runs");
    n.remove("be.yaml");
    wait_for(TIMEOUT, || (!dir.exists()).then_some(())).unwrap_or_else(|| {
        panic!(
            "pod cgroup {} not removed:\n{}",
            dir.display(),
            n.log_tail()
        )
    });
}
