//! API-server mode against the API server test double (tests/common/apiserver.rs) and a real
//! containerd: node registration, the Lease heartbeat, node status updates, an API outage that
//! leaves pods alone, and re-registration after the Node is deleted.

mod common;

use std::time::Duration;

use common::agent::Nanolet;
use common::apiserver::FakeApiServer;
use common::{Containerd, wait_for};
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
