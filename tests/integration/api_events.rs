//! Issue 20, items 4 and 5: events to the API server (client-go's correlator: counting by
//! PATCH, aggregation, spam filter) checked with the real `kubectl get events`, and API-pod
//! correctness (the Node's allocatable).

use nanolet_test_support as support;

use std::time::Duration;

use nanolet::cri::Runtime;
use serde_json::{Value, json};
use support::agent::Nanolet;
use support::apiserver::FakeApiServer;
use support::kubectl::Kubectl;
use support::{Containerd, wait_for};

const TOKEN: &str = "t0ken-for-the-events-test";

fn api_pod(name: &str, command: &[&str]) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": "node1",
            "terminationGracePeriodSeconds": 1,
            "restartPolicy": "Always",
            "automountServiceAccountToken": false,
            "containers": [{"name": "c", "image": "localhost/busybox:1.36",
                            "imagePullPolicy": "IfNotPresent",
                            "command": command}]
        }
    })
}

/// `kubectl get events -n NS --field-selector involvedObject.name=NAME -o json`'s items.
fn events_of(k: &Kubectl, ns: &str, name: &str) -> Vec<Value> {
    let (ok, out, _) = k.run(&[
        "get",
        "events",
        "-n",
        ns,
        "--field-selector",
        &format!("involvedObject.name={name}"),
        "-o",
        "json",
    ]);
    if !ok {
        return Vec::new();
    }
    serde_json::from_str::<Value>(&out)
        .ok()
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default()
}

fn with_reason<'a>(events: &'a [Value], reason: &str) -> Option<&'a Value> {
    events.iter().find(|e| e["reason"] == reason)
}

/// The kubelet's events reach the API server (client-go's recorder and correlator):
/// Pulled/Created/Started of an API pod, listed by the real kubectl with a field selector on
/// involvedObject.name, each with involvedObject (kind Pod, uid, fieldPath), source.component
/// kubelet and source.host the node; a crash-looping container's BackOff is one Event whose
/// count rises (eventLogger: PATCH of count and lastTimestamp); the Node's "Starting kubelet."
/// goes to the default namespace with a Node reference.
#[test]
fn api_pod_events_are_posted_and_counted() {
    let ctd = Containerd::start();
    let api = FakeApiServer::start(TOKEN);
    let k = Kubectl::new(&api, TOKEN);
    let kc = ctd.tmp().join("kubeconfig");
    api.write_kubeconfig(&kc, TOKEN);
    let n = Nanolet::start(&ctd, &[format!("--kubeconfig={}", kc.display())]);
    n.write(
        "st.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: st\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '3600']\n",
    );
    let web = api.create_pod("prod", api_pod("web", &["sleep", "3600"]));
    api.create_pod("prod", api_pod("crash", &["sh", "-c", "exit 3"]));
    // A readiness probe failing with a new message each second: Unhealthy events that differ
    // only by message.
    let mut flaky = api_pod("flaky", &["sleep", "3600"]);
    flaky["spec"]["containers"][0]["readinessProbe"] = json!({
        "exec": {"command": ["sh", "-c", "date +%s%N; exit 1"]},
        "periodSeconds": 1
    });
    api.create_pod("prod", flaky);

    let events = wait_for(Duration::from_secs(60), || {
        let ev = events_of(&k, "prod", "web");
        ["Pulled", "Created", "Started"]
            .iter()
            .all(|r| with_reason(&ev, r).is_some())
            .then_some(ev)
    })
    .unwrap_or_else(|| {
        panic!(
            "kubectl get events never listed Pulled/Created/Started for web: {:?}\n{}",
            k.run(&["get", "events", "-A"]),
            n.log_tail()
        )
    });
    let started = with_reason(&events, "Started").cloned().unwrap_or_default();
    assert_eq!(started["involvedObject"]["kind"], "Pod");
    assert_eq!(started["involvedObject"]["uid"], web["metadata"]["uid"]);
    assert_eq!(started["involvedObject"]["fieldPath"], "spec.containers{c}");
    assert_eq!(started["source"]["component"], "kubelet");
    assert_eq!(started["source"]["host"], "node1");
    assert_eq!(started["reportingInstance"], "node1");
    assert_eq!(started["message"], "Started container c");
    assert_eq!(started["type"], "Normal");
    // kubectl describe pod lists them (its events query names the pod's uid too).
    let described = k.ok(&["describe", "pod", "web", "-n", "prod"]);
    let events_part = described.split("Events:").nth(1).unwrap_or_default();
    for reason in ["Pulled", "Created", "Started"] {
        assert!(events_part.contains(reason), "{reason} in:\n{described}");
    }
    // A static pod's events go to the API too (involvedObject: the static pod's UID).
    let st = wait_for(Duration::from_secs(60), || {
        with_reason(&events_of(&k, "default", "st-node1"), "Started").cloned()
    })
    .unwrap_or_else(|| panic!("no Started event for the static pod\n{}", n.log_tail()));
    assert_eq!(st["involvedObject"]["kind"], "Pod");

    // BackOff of the crash-looping container: one object, its count rising.
    let backoff_count = |k: &Kubectl| -> Option<(String, i64)> {
        let ev = events_of(k, "prod", "crash");
        let b = with_reason(&ev, "BackOff")?;
        Some((
            b["metadata"]["name"].as_str()?.to_string(),
            b["count"].as_i64()?,
        ))
    };
    let (name, first) = wait_for(Duration::from_secs(90), || backoff_count(&k))
        .unwrap_or_else(|| panic!("no BackOff event for crash\n{}", n.log_tail()));
    let (later_name, later) = wait_for(Duration::from_secs(90), || {
        backoff_count(&k).filter(|(_, c)| *c > first)
    })
    .unwrap_or_else(|| {
        panic!(
            "the BackOff count never rose from {first}\n{}",
            n.log_tail()
        )
    });
    assert_eq!(later_name, name, "a repeat patches the same Event");
    assert!(later > first);
    let backoffs = events_of(&k, "prod", "crash")
        .iter()
        .filter(|e| e["reason"] == "BackOff")
        .count();
    assert_eq!(backoffs, 1, "repeats are counted, not created again");
    assert!(
        api.requests()
            .iter()
            .any(|r| r.method == "PATCH" && r.path.contains("/namespaces/prod/events/")),
        "repeats go as PATCH"
    );

    // EventAggregator (defaultAggregateMaxEvents 10, 10 minutes): from the 10th distinct
    // Unhealthy message on, one "(combined from similar events): ..." Event, counted.
    let combined = wait_for(Duration::from_secs(60), || {
        events_of(&k, "prod", "flaky").into_iter().find(|e| {
            e["reason"] == "Unhealthy"
                && e["message"].as_str().is_some_and(|m| {
                    m.starts_with("(combined from similar events): Readiness probe failed: ")
                })
                && e["count"].as_i64().is_some_and(|c| c >= 2)
        })
    })
    .unwrap_or_else(|| {
        panic!(
            "no aggregated Unhealthy event: {:?}\n{}",
            events_of(&k, "prod", "flaky")
                .iter()
                .map(|e| format!("{} x{}: {}", e["reason"], e["count"], e["message"]))
                .collect::<Vec<_>>(),
            n.log_tail()
        )
    });
    let unhealthy: Vec<Value> = events_of(&k, "prod", "flaky")
        .into_iter()
        .filter(|e| e["reason"] == "Unhealthy")
        .collect();
    // Nine distinct ones, then the aggregate: never more than ten objects.
    assert_eq!(unhealthy.len(), 10, "{unhealthy:#?}");
    assert_eq!(combined["type"], "Warning");

    // The Node's event.
    let starting = wait_for(Duration::from_secs(30), || {
        with_reason(&events_of(&k, "default", "node1"), "Starting").cloned()
    })
    .unwrap_or_else(|| panic!("no Starting event for the Node\n{}", n.log_tail()));
    assert_eq!(starting["message"], "Starting kubelet.");
    // Registered NotReady (runtime checks pending), then Ready: upstream's ReadyCondition
    // setter records NodeReady on that transition (none when the registration was Ready).
    let registered_ready = api
        .requests()
        .iter()
        .find(|r| r.method == "POST" && r.path == "/api/v1/nodes")
        .and_then(|r| serde_json::from_str::<Value>(&r.body).ok())
        .and_then(|n| {
            n["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Ready")
                .map(|c| c["status"] == "True")
        })
        .expect("the Node was registered with a Ready condition");
    eprintln!("registered Ready={registered_ready}");
    if !registered_ready {
        let ready = wait_for(Duration::from_secs(30), || {
            with_reason(&events_of(&k, "default", "node1"), "NodeReady").cloned()
        })
        .unwrap_or_else(|| panic!("no NodeReady event\n{}", n.log_tail()));
        assert_eq!(ready["message"], "Node node1 status is now: NodeReady");
    }
    assert_eq!(starting["involvedObject"]["kind"], "Node");
    assert_eq!(starting["involvedObject"]["uid"], "node1");
}

/// A byte quantity as the Node prints it: plain, `Ki`, `Mi` or `Gi`.
fn bytes(v: &Value) -> i64 {
    let s = v.as_str().unwrap_or_default();
    for (suffix, mul) in [("Ki", 1i64 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30)] {
        if let Some(n) = s.strip_suffix(suffix) {
            return n.parse::<i64>().unwrap_or(-1) * mul;
        }
    }
    s.parse().unwrap_or(-1)
}

/// A cpu quantity in millicores: `1900m` or whole cores.
fn millis(v: &Value) -> i64 {
    let s = v.as_str().unwrap_or_default();
    match s.strip_suffix('m') {
        Some(m) => m.parse().unwrap_or(-1),
        None => s.parse::<i64>().map(|n| n * 1000).unwrap_or(-1),
    }
}

/// `kubectl delete pod NAME -n prod --grace-period=GRACE --timeout=TIMEOUTs`: how long it took
/// (it returns once the pod is gone from the API), or kubectl's output when it failed.
fn timed_delete(k: &Kubectl, name: &str, grace: u32, timeout: u32) -> Result<Duration, String> {
    let t0 = std::time::Instant::now();
    let (grace, timeout) = (
        format!("--grace-period={grace}"),
        format!("--timeout={timeout}s"),
    );
    let (ok, out, err) = k.run(&["delete", "pod", name, "-n", "prod", &grace, &timeout]);
    let took = t0.elapsed();
    if ok {
        Ok(took)
    } else {
        Err(format!("{out}{err}"))
    }
}

/// Issue 20 item 5 with the real kubectl: a second `kubectl delete` with a shorter grace
/// period shortens a kill already running; `kubectl delete --grace-period=3` of a pod whose
/// own terminationGracePeriodSeconds is 120 and whose process ignores SIGTERM ends within
/// the 3 s (calculateEffectiveGracePeriod: deletionGracePeriodSeconds wins); an API pod
/// evicted for its emptyDir sizeLimit stays Failed past the pressure transition period
/// (kubernetes/kubernetes#54530; a static pod would be re-admitted); the Node's allocatable
/// is capacity - systemReserved - kubeReserved - hard eviction (GetNodeAllocatableAbsolute).
#[test]
fn deletion_grace_terminal_phase_and_allocatable() {
    let ctd = Containerd::start();
    let api = FakeApiServer::start(TOKEN);
    let k = Kubectl::new(&api, TOKEN);
    let kc = ctd.tmp().join("kubeconfig");
    api.write_kubeconfig(&kc, TOKEN);
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--kubeconfig={}", kc.display()),
            "--eviction-monitoring-period=1s".into(),
            "--eviction-pressure-transition-period=3s".into(),
            "--system-reserved=cpu=100m,memory=100Mi".into(),
            "--kube-reserved=memory=50Mi,ephemeral-storage=1Gi".into(),
            "--eviction-hard=memory.available<100Mi,nodefs.available<5%".into(),
        ],
    );
    let mut slow = api_pod(
        "slow",
        &["sh", "-c", "trap '' TERM; while true; do sleep 1; done"],
    );
    slow["spec"]["terminationGracePeriodSeconds"] = json!(120);
    let mut again = slow.clone();
    again["metadata"]["name"] = json!("again");
    api.create_pod("prod", slow);
    api.create_pod("prod", again);
    let mut over = api_pod(
        "over",
        &[
            "sh",
            "-c",
            "dd if=/dev/zero of=/scratch/fill bs=1M count=3; exec sleep 3600",
        ],
    );
    over["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "scratch", "mountPath": "/scratch"}]);
    over["spec"]["volumes"] = json!([{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}]);
    api.create_pod("prod", over);

    let phase = |name: &str| -> (String, String) {
        api.get(&format!("/api/v1/namespaces/prod/pods/{name}"))
            .map(|p| {
                (
                    p["status"]["phase"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    p["status"]["reason"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .unwrap_or_default()
    };
    wait_for(Duration::from_secs(60), || {
        (phase("slow").0 == "Running" && phase("again").0 == "Running").then_some(())
    })
    .unwrap_or_else(|| panic!("slow never ran\n{}", n.log_tail()));

    // pod_workers.go: a second delete with a shorter grace period while the pod is already
    // being killed shortens the running kill (deleted with 60 s, then with 2 s).
    k.ok(&[
        "delete",
        "pod",
        "again",
        "-n",
        "prod",
        "--grace-period=60",
        "--wait=false",
    ]);
    wait_for(Duration::from_secs(30), || {
        with_reason(&events_of(&k, "prod", "again"), "Killing").cloned()
    })
    .unwrap_or_else(|| panic!("again: no Killing event\n{}", n.log_tail()));
    let took = timed_delete(&k, "again", 2, 50)
        .unwrap_or_else(|e| panic!("second kubectl delete: {e}\n{}", n.log_tail()));
    assert!(
        took < Duration::from_secs(20),
        "the second delete (2 s) took {took:?}: the 60 s kill was not shortened\n{}",
        n.log_tail()
    );

    // kubectl delete --grace-period=3: gone (final DELETE after the kill) within the grace.
    let took = timed_delete(&k, "slow", 3, 60)
        .unwrap_or_else(|e| panic!("kubectl delete: {e}\n{}", n.log_tail()));
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(20),
        "kubectl delete --grace-period=3 took {took:?} (the pod's own grace is 120 s)\n{}",
        n.log_tail()
    );

    // The evicted API pod stays Failed, with nothing running, after the transition period.
    wait_for(Duration::from_secs(60), || {
        (phase("over") == ("Failed".into(), "Evicted".into())).then_some(())
    })
    .unwrap_or_else(|| panic!("over never evicted: {:?}\n{}", phase("over"), n.log_tail()));
    let evicted = wait_for(Duration::from_secs(30), || {
        with_reason(&events_of(&k, "prod", "over"), "Evicted").cloned()
    })
    .unwrap_or_else(|| panic!("no Evicted event for over\n{}", n.log_tail()));
    assert_eq!(evicted["type"], "Warning");
    // Three transition periods (a static pod is re-admitted after one). Not a synchronisation
    // sleep: the window in which a re-admission would have happened.
    std::thread::sleep(Duration::from_secs(9));
    assert_eq!(phase("over"), ("Failed".into(), "Evicted".into()));
    assert!(
        !std::fs::read_to_string(&n.log)
            .unwrap_or_default()
            .contains("re-admitting evicted pod"),
        "the evicted API pod was re-admitted\n{}",
        n.log_tail()
    );
    let local = n
        .pods()
        .into_iter()
        .find(|p| p["metadata"]["name"] == "over")
        .expect("over on the read-only port");
    assert_eq!(local["status"]["phase"], "Failed");
    assert!(
        local["status"]["containerStatuses"][0]["state"]["running"].is_null(),
        "{local:#}"
    );

    // After a restart, the API says Failed: the pod is not admitted again (its status comes
    // with the pod from the API source); a pod created afterwards runs.
    let mut n = n;
    n.kill9();
    n.spawn();
    api.create_pod("prod", api_pod("after", &["sleep", "3600"]));
    wait_for(Duration::from_secs(60), || {
        (phase("after").0 == "Running").then_some(())
    })
    .unwrap_or_else(|| panic!("after never ran\n{}", n.log_tail()));
    let rt = ctd.runtime();
    let running_over = |rt: &dyn nanolet::cri::Runtime| {
        rt.list_containers()
            .unwrap_or_default()
            .into_iter()
            .filter(|c| {
                c.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some("over")
                    && c.state == nanolet::cri::ContainerState::Running
            })
            .count()
    };
    assert_eq!(
        running_over(&rt),
        0,
        "the evicted pod runs again after a restart"
    );
    assert_eq!(phase("over"), ("Failed".into(), "Evicted".into()));

    // Allocatable = capacity - reserved - hard eviction.
    let node: Value =
        serde_json::from_str(&k.ok(&["get", "node", "node1", "-o", "json"])).expect("node JSON");
    let cap = &node["status"]["capacity"];
    let alloc = &node["status"]["allocatable"];
    assert_eq!(
        millis(&alloc["cpu"]),
        millis(&cap["cpu"]) - 100,
        "cpu {cap} {alloc}"
    );
    assert_eq!(
        bytes(&alloc["memory"]),
        bytes(&cap["memory"]) - (100 << 20) - (50 << 20) - (100 << 20),
        "memory {cap} {alloc}"
    );
    let disk = bytes(&cap["ephemeral-storage"]);
    assert!(disk > 0, "ephemeral-storage capacity {cap}");
    assert_eq!(
        bytes(&alloc["ephemeral-storage"]),
        disk - (1 << 30) - (disk as f64 * 0.05).round() as i64,
        "ephemeral-storage {cap} {alloc}"
    );
    assert_eq!(alloc["pods"], cap["pods"]);
}

/// Readiness gates (status/generate.go GeneratePodReadyCondition, status_manager.go
/// mergePodStatus): an API pod whose `spec.readinessGates` condition is missing stays Ready
/// False with reason ReadinessGatesNotReady; a controller (here the real kubectl, `patch
/// --subresource=status`) sets the condition and the pod turns Ready; nanolet's own status
/// writes (strategic merge by condition type) never remove the controller's condition.
#[test]
fn readiness_gate_conditions_set_by_a_controller_make_the_pod_ready_and_stay() {
    let ctd = Containerd::start();
    let api = FakeApiServer::start(TOKEN);
    let k = Kubectl::new(&api, TOKEN);
    let kc = ctd.tmp().join("kubeconfig");
    api.write_kubeconfig(&kc, TOKEN);
    let n = Nanolet::start(&ctd, &[format!("--kubeconfig={}", kc.display())]);
    let mut pod = api_pod("gated", &["sleep", "3600"]);
    pod["spec"]["readinessGates"] = json!([{"conditionType": "example.com/lb-ready"}]);
    api.create_pod("prod", pod);
    let path = "/api/v1/namespaces/prod/pods/gated";
    let condition = |t: &str| {
        api.get(path).and_then(|p| {
            p["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == t).cloned())
        })
    };
    let ready = wait_for(Duration::from_secs(60), || {
        condition("Ready").filter(|c| c["reason"] == "ReadinessGatesNotReady")
    })
    .unwrap_or_else(|| {
        panic!(
            "no ReadinessGatesNotReady: {:?}\n{}",
            api.get(path),
            n.log_tail()
        )
    });
    assert_eq!(ready["status"], "False");
    assert_eq!(
        ready["message"],
        "corresponding condition of pod readiness gate \"example.com/lb-ready\" does not exist."
    );
    assert_eq!(
        condition("ContainersReady").map(|c| c["status"].clone()),
        Some(json!("True"))
    );

    k.ok(&[
        "patch",
        "pod",
        "gated",
        "-n",
        "prod",
        "--subresource=status",
        "--type=strategic",
        "-p",
        r#"{"status":{"conditions":[{"type":"example.com/lb-ready","status":"True"}]}}"#,
    ]);
    wait_for(Duration::from_secs(30), || {
        condition("Ready").filter(|c| c["status"] == "True")
    })
    .unwrap_or_else(|| panic!("never Ready: {:?}\n{}", api.get(path), n.log_tail()));
    // nanolet writes status again (the container is restarted: restartCount 1); the
    // controller's condition is still there afterwards.
    let rt = ctd.runtime();
    let id = rt
        .list_containers()
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some("gated"))
        .map(|c| c.id)
        .expect("container");
    let _ = rt.stop_container(&id, Duration::ZERO);
    wait_for(Duration::from_secs(60), || {
        api.get(path)
            .filter(|p| p["status"]["containerStatuses"][0]["restartCount"] == 1)
    })
    .unwrap_or_else(|| panic!("restart not written: {:?}\n{}", api.get(path), n.log_tail()));
    let gate = condition("example.com/lb-ready").expect("the controller's condition kept");
    assert_eq!(gate["status"], "True");
    let sent_gate = api.requests().iter().any(|r| {
        r.method == "PATCH"
            && r.path == format!("{path}/status")
            && serde_json::from_str::<Value>(&r.body).is_ok_and(|b| {
                !b["metadata"].is_null()
                    && b["status"]["conditions"]
                        .as_array()
                        .is_some_and(|c| c.iter().any(|c| c["type"] == "example.com/lb-ready"))
            })
    });
    assert!(!sent_gate, "nanolet sent the controller's condition");
}
