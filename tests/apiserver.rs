//! API-server mode against the API server test double (tests/common/apiserver.rs) and a real
//! containerd: node registration, the Lease heartbeat, node status updates, an API outage that
//! leaves pods alone, and re-registration after the Node is deleted.

mod common;

use std::time::Duration;

use common::agent::Nanolet;
use common::apiserver::FakeApiServer;
use common::{Containerd, wait_for};
use nanolet::runtime::Runtime;
use serde_json::Value;

const TOKEN: &str = "t0ken-for-the-test";
const NODE_PATH: &str = "/api/v1/nodes/node1";
const LEASE_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node1";
const STATUS_PATH: &str = "/api/v1/nodes/node1/status";

fn renew_time(api: &FakeApiServer) -> String {
    api.get(LEASE_PATH)
        .and_then(|l| l["spec"]["renewTime"].as_str().map(String::from))
        .unwrap_or_default()
}

/// The kubelet's node lifecycle: Node registered with the well-known labels, capacity,
/// conditions and nodeInfo; a Lease in kube-node-lease (holder = node, 40 s, owner = the Node)
/// renewed every 10 s; the status patched every nodeStatusUpdateFrequency; an API outage
/// leaves the pods running and heartbeats resume after it; a deleted Node is registered again.
#[test]
fn joins_the_cluster_and_keeps_lease_and_status_fresh() {
    let ctd = Containerd::start();
    let api = FakeApiServer::start(TOKEN);
    let kc = ctd.tmp().join("kubeconfig");
    api.write_kubeconfig(&kc, TOKEN);
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--kubeconfig={}", kc.display()),
            "--node-labels=node-role.kubernetes.io/edge=,site=lab".into(),
            "--node-status-update-frequency=1s".into(),
        ],
    );
    n.write(
        "web.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '3600']\n",
    );
    let web = n.wait_phase("web", "Running");
    let cid = web["status"]["containerStatuses"][0]["containerID"].clone();

    let node = wait_for(Duration::from_secs(30), || api.get(NODE_PATH))
        .unwrap_or_else(|| panic!("node never registered\n{}", n.log_tail()));
    let labels = &node["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"], "node1");
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert!(labels["kubernetes.io/arch"].is_string());
    assert_eq!(labels["node-role.kubernetes.io/edge"], "");
    assert_eq!(labels["site"], "lab");
    let st = &node["status"];
    assert!(st["capacity"]["cpu"].is_string() && st["allocatable"]["memory"].is_string());
    assert!(
        st["nodeInfo"]["kubeletVersion"]
            .as_str()
            .is_some_and(|v| !v.is_empty())
    );
    let conds: Vec<String> = st["conditions"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|c| {
                    format!(
                        "{}={}",
                        c["type"].as_str().unwrap_or(""),
                        c["status"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    for want in [
        "Ready=True",
        "MemoryPressure=False",
        "DiskPressure=False",
        "PIDPressure=False",
    ] {
        assert!(conds.iter().any(|c| c == want), "{want} in {conds:?}");
    }

    let lease = wait_for(Duration::from_secs(30), || api.get(LEASE_PATH)).expect("lease created");
    assert_eq!(lease["spec"]["holderIdentity"], "node1");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
    assert_eq!(
        lease["metadata"]["ownerReferences"][0]["uid"],
        node["metadata"]["uid"]
    );
    // Renewed every 10 s.
    let first = renew_time(&api);
    wait_for(Duration::from_secs(25), || {
        (renew_time(&api) != first).then_some(())
    })
    .unwrap_or_else(|| panic!("lease never renewed\n{}", n.log_tail()));
    // Status every second.
    let before = api.count("PATCH", STATUS_PATH);
    wait_for(Duration::from_secs(10), || {
        (api.count("PATCH", STATUS_PATH) >= before + 3).then_some(())
    })
    .expect("status patched every nodeStatusUpdateFrequency");

    // Outage: pods are untouched; heartbeats resume afterwards.
    api.set_down(true);
    let patches = api.count("PATCH", STATUS_PATH);
    wait_for(Duration::from_secs(10), || {
        (api.count("PATCH", STATUS_PATH) > patches + 2).then_some(())
    })
    .expect("nanolet keeps trying during the outage");
    let during = n.pod("web").expect("web listed");
    assert_eq!(during["status"]["phase"], "Running");
    assert_eq!(during["status"]["containerStatuses"][0]["containerID"], cid);
    let renewed = renew_time(&api);
    api.set_down(false);
    wait_for(Duration::from_secs(25), || {
        (renew_time(&api) != renewed).then_some(())
    })
    .unwrap_or_else(|| panic!("lease not renewed after the outage\n{}", n.log_tail()));

    // The Node deleted by an administrator: registered again.
    api.delete(NODE_PATH);
    let again: Value = wait_for(Duration::from_secs(15), || api.get(NODE_PATH))
        .unwrap_or_else(|| panic!("node not re-registered\n{}", n.log_tail()));
    assert_ne!(again["metadata"]["uid"], node["metadata"]["uid"]);
    assert!(
        !std::fs::read_to_string(&n.log)
            .unwrap_or_default()
            .contains(TOKEN),
        "the bearer token appears in nanolet's log"
    );
}

fn api_pod(name: &str) -> Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": "node1",
            "terminationGracePeriodSeconds": 1,
            "restartPolicy": "Always",
            "containers": [{"name": "c", "image": "localhost/busybox:1.36",
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["sleep", "3600"]}]
        }
    })
}

fn api_phase(api: &FakeApiServer, name: &str) -> String {
    api.get(&format!("/api/v1/namespaces/prod/pods/{name}"))
        .and_then(|p| p["status"]["phase"].as_str().map(String::from))
        .unwrap_or_default()
}

/// Pods scheduled through the API server (list + watch with fieldSelector
/// spec.nodeName=<node>): a pod created with the API runs under its own name and UID, its
/// status is written back (what `kubectl get pod` shows); after the watch expires (410 Gone)
/// nanolet relists and keeps up; a graceful delete (deletionTimestamp) stops the pod.
#[test]
fn api_pods_run_report_status_survive_watch_expiry_and_stop_on_delete() {
    let ctd = Containerd::start();
    let api = FakeApiServer::start(TOKEN);
    let kc = ctd.tmp().join("kubeconfig");
    api.write_kubeconfig(&kc, TOKEN);
    let n = Nanolet::start(&ctd, &[format!("--kubeconfig={}", kc.display())]);
    let created = api.create_pod("prod", api_pod("web"));
    wait_for(Duration::from_secs(60), || {
        (api_phase(&api, "web") == "Running").then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "status never written back: {:?}\n{}",
            api.get("/api/v1/namespaces/prod/pods/web"),
            std::fs::read_to_string(&n.log)
                .unwrap_or_default()
                .lines()
                .filter(|l| !l.contains("PLEG"))
                .collect::<Vec<_>>()
                .join("\n")
        )
    });
    let local = n
        .pods()
        .into_iter()
        .find(|p| p["metadata"]["name"] == "web")
        .expect("web on the read-only port under its own name");
    assert_eq!(local["metadata"]["namespace"], "prod");
    assert_eq!(local["metadata"]["uid"], created["metadata"]["uid"]);

    // The watch expires: nanolet relists and sees a pod created afterwards.
    api.expire_watches();
    api.create_pod("prod", api_pod("second"));
    wait_for(Duration::from_secs(60), || {
        (api_phase(&api, "second") == "Running").then_some(())
    })
    .unwrap_or_else(|| panic!("pod after the 410 never ran\n{}", n.log_tail()));

    // Graceful delete: the pod is stopped.
    api.delete_pod("prod", "web");
    let rt = ctd.runtime();
    wait_for(Duration::from_secs(60), || {
        let running = rt
            .list_containers()
            .unwrap_or_default()
            .into_iter()
            .filter(|c| {
                c.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some("web")
                    && c.state == nanolet::runtime::ContainerState::Running
            })
            .count();
        (running == 0).then_some(())
    })
    .unwrap_or_else(|| panic!("deleted pod still running\n{}", n.log_tail()));
    assert_eq!(api_phase(&api, "second"), "Running");
}

/// The double's watch against nanolet's client: an event created after the watch opened
/// arrives as one JSON line.
#[test]
fn double_watch_delivers_events_to_the_client() {
    use std::io::BufRead;
    let api = FakeApiServer::start(TOKEN);
    let dir = tempfile::tempdir().expect("tmp");
    let kc = dir.path().join("kc");
    api.write_kubeconfig(&kc, TOKEN);
    let kc = nanolet::apiclient::kubeconfig::Kubeconfig::load(&kc).expect("kubeconfig");
    let client =
        nanolet::apiclient::client::ApiClient::new(&kc, Duration::from_secs(10)).expect("client");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = client
            .stream("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode1&watch=1&resourceVersion=0&timeoutSeconds=20")
            .expect("watch");
        for line in std::io::BufReader::new(r).lines() {
            let _ = tx.send(line.expect("line"));
        }
    });
    // The watch is registered in the same step the double counts the request.
    wait_for(Duration::from_secs(10), || {
        (api.count("GET", "/api/v1/pods") >= 1).then_some(())
    })
    .expect("watch opened");
    api.create_pod("prod", api_pod("w"));
    let line = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("an event within 10 s");
    let ev: Value = serde_json::from_str(&line).expect("json");
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(ev["object"]["metadata"]["name"], "w");
}
