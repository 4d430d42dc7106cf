//! Issue 20, items 4 and 5: events to the API server (client-go's correlator: counting by
//! PATCH, aggregation, spam filter) checked with the real `kubectl get events`, and API-pod
//! correctness (the Node's allocatable).

use nanolet_test_support as support;

use std::time::Duration;

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
    let web = api.create_pod("prod", api_pod("web", &["sleep", "3600"]));
    api.create_pod("prod", api_pod("crash", &["sh", "-c", "exit 3"]));

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

    // The Node's event.
    let starting = wait_for(Duration::from_secs(30), || {
        with_reason(&events_of(&k, "default", "node1"), "Starting").cloned()
    })
    .unwrap_or_else(|| panic!("no Starting event for the Node\n{}", n.log_tail()));
    assert_eq!(starting["message"], "Starting kubelet.");
    assert_eq!(starting["involvedObject"]["kind"], "Node");
    assert_eq!(starting["involvedObject"]["uid"], "node1");
}
