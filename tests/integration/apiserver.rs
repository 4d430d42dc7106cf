//! API-server mode against the API server test double (tests/support/src/apiserver.rs) and a real
//! containerd: node registration (labels, taints), the Lease heartbeat, node status updates, an
//! API outage that leaves pods alone, re-registration after the Node is deleted; API pods with
//! status write-back, watch expiry and graceful deletion ending in the final DELETE; the offline
//! checkpoint (restart while the API server is down, reconcile without restarts); mirror pods;
//! an ephemeral container added to a running API pod (its target's PID namespace);
//! the same driven by the real `kubectl` (tests/support/src/kubectl.rs).

use nanolet_test_support as support;

use std::time::Duration;

use nanolet::cri::Runtime;
use serde_json::Value;
use support::agent::Nanolet;
use support::apiserver::FakeApiServer;
use support::{Containerd, wait_for};

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
            "--node-labels=node.kubernetes.io/edge=,site=lab".into(),
            "--node-status-update-frequency=1s".into(),
            "--register-with-taints=dedicated=edge:NoSchedule,gpu:NoExecute".into(),
        ],
    );
    n.write(
        "web.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '3600']\n",
    );
    let web = n.wait_phase("web", "Running");
    let cid = web["status"]["containerStatuses"][0]["containerID"].clone();

    // The kubelet registers its Node as soon as it can reach the API server, before its runtime
    // and PLEG checks have passed (Ready=False, reason KubeletNotReady); the next status update
    // turns Ready=True. So poll for Ready=True rather than reading the first registration.
    let node_conditions = |node: &serde_json::Value| -> Vec<String> {
        node["status"]["conditions"]
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
            .unwrap_or_default()
    };
    wait_for(Duration::from_secs(30), || api.get(NODE_PATH))
        .unwrap_or_else(|| panic!("node never registered\n{}", n.log_tail()));
    let node = wait_for(Duration::from_secs(30), || {
        api.get(NODE_PATH)
            .filter(|node| node_conditions(node).iter().any(|c| c == "Ready=True"))
    })
    .unwrap_or_else(|| {
        panic!(
            "node never Ready=True: {}\n{}",
            api.get(NODE_PATH)
                .map(|n| n["status"]["conditions"].to_string())
                .unwrap_or_default(),
            n.log_tail()
        )
    });
    let labels = &node["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"], "node1");
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert!(labels["kubernetes.io/arch"].is_string());
    assert_eq!(labels["node.kubernetes.io/edge"], "");
    assert_eq!(labels["site"], "lab");
    // The kubelet's --register-with-taints: spec.taints of the registered Node.
    assert_eq!(
        node["spec"]["taints"],
        serde_json::json!([{"key": "dedicated", "value": "edge", "effect": "NoSchedule"},
                           {"key": "gpu", "effect": "NoExecute"}])
    );
    let st = &node["status"];
    assert!(st["capacity"]["cpu"].is_string() && st["allocatable"]["memory"].is_string());
    assert!(
        st["nodeInfo"]["kubeletVersion"]
            .as_str()
            .is_some_and(|v| !v.is_empty())
    );
    let conds = node_conditions(&node);
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

    // Outage: pods are untouched; heartbeats resume afterwards. Each status update starts by
    // reading the Node back (tryUpdateNodeStatus), so the tries are GETs while it is down.
    api.set_down(true);
    let reads = api.count("GET", NODE_PATH);
    wait_for(Duration::from_secs(10), || {
        (api.count("GET", NODE_PATH) > reads + 2).then_some(())
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

    // Graceful delete: the pod is stopped (sleep as PID 1 ignores SIGTERM, so its container
    // runs until the 1 s grace period ends); only then does nanolet send the final DELETE
    // (grace 0, UID precondition: the kubelet status manager's), and the pod leaves the API.
    let uid = created["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_string();
    api.delete_pod("prod", "web");
    let rt = ctd.runtime();
    let web_path = "/api/v1/namespaces/prod/pods/web";
    wait_for(Duration::from_secs(60), || {
        // The API first: a DELETE landing between the two reads must not look like an early one.
        let in_api = api.get(web_path).is_some();
        let running = running_containers(&rt, "web");
        assert!(
            in_api || running == 0,
            "the pod left the API server while its container still ran\n{}",
            n.log_tail()
        );
        (!in_api).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "deleted pod never left the API: {:?}\n{}",
            api.get(web_path),
            n.log_tail()
        )
    });
    assert_eq!(running_containers(&rt, "web"), 0);
    let deletes: Vec<Value> = api
        .requests()
        .into_iter()
        .filter(|r| r.method == "DELETE" && r.path == web_path)
        .filter_map(|r| serde_json::from_str(&r.body).ok())
        .collect();
    assert!(
        deletes.contains(
            &serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1",
            "gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
        ),
        "final DELETE with the UID precondition: {deletes:?}"
    );
    assert_eq!(api_phase(&api, "second"), "Running");
}

/// Ephemeral containers (kuberuntime computePodActions' EphemeralContainersToStart,
/// startContainer's getTargetID -> CRI PID NamespaceMode TARGET): one added to a running API
/// pod's spec (what the `ephemeralcontainers` subresource does: generation 2, same UID) starts
/// in the pod's sandbox without restarting its container, sees its target's processes (PID 1
/// of its namespace is the target's `sleep 3600`, not its own shell), reports
/// `ephemeralContainerStatuses` to the API server, serves its log, and after it exited is not
/// started again.
#[test]
fn an_ephemeral_container_joins_its_target_and_is_never_restarted() {
    let ctd = Containerd::start();
    let api = FakeApiServer::start(TOKEN);
    let kc = ctd.tmp().join("kubeconfig");
    api.write_kubeconfig(&kc, TOKEN);
    let n = Nanolet::start(&ctd, &[format!("--kubeconfig={}", kc.display())]);
    api.create_pod("prod", api_pod("web"));
    let path = "/api/v1/namespaces/prod/pods/web";
    wait_for(Duration::from_secs(60), || {
        (api_phase(&api, "web") == "Running").then_some(())
    })
    .unwrap_or_else(|| panic!("pod never ran\n{}", log_excerpt(&n)));
    let rt = ctd.runtime();
    let before = container_ids(&rt, "web");
    api.modify(path, |p| {
        p["metadata"]["generation"] = serde_json::json!(2);
        p["spec"]["ephemeralContainers"] = serde_json::json!([{
            "name": "debugger", "image": "localhost/busybox:1.36",
            "imagePullPolicy": "IfNotPresent", "targetContainerName": "c",
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "command": ["sh", "-c", "tr '\\0' ' ' < /proc/1/cmdline; echo; sleep 3"]
        }]);
    })
    .expect("pod in the double");
    let ephemeral = |api: &FakeApiServer| {
        api.get(path)
            .map(|p| p["status"]["ephemeralContainerStatuses"][0].clone())
            .filter(|s| s["name"] == "debugger")
    };
    let terminated = wait_for(Duration::from_secs(60), || {
        ephemeral(&api).filter(|s| !s["state"]["terminated"].is_null())
    })
    .unwrap_or_else(|| {
        panic!(
            "no terminated ephemeral status: {:?}\n{}",
            api.get(path),
            log_excerpt(&n)
        )
    });
    assert_eq!(
        terminated["state"]["terminated"]["exitCode"], 0,
        "{terminated}"
    );
    assert_eq!(terminated["ready"], false);
    assert!(terminated.get("started").is_none(), "{terminated}");
    let log = n
        .get("/api/v1/namespaces/prod/pods/web/log?container=debugger")
        .unwrap_or_default();
    assert_eq!(
        log.trim(),
        "sleep 3600",
        "PID 1 of the ephemeral container's namespace is its target's process"
    );
    let after = container_ids(&rt, "web");
    assert_eq!(after.len(), before.len() + 1, "{before:?} -> {after:?}");
    assert!(
        before.iter().all(|id| after.contains(id)),
        "the target was kept"
    );
    assert_eq!(running_containers(&rt, "web"), 1, "only the target runs");
    // A later change to the pod syncs it again: the exited ephemeral container stays exited.
    api.modify(path, |p| {
        p["metadata"]["labels"] = serde_json::json!({"touched": "yes"});
    });
    wait_for(Duration::from_secs(30), || {
        local_pod(&n, "web").filter(|p| p["metadata"]["labels"]["touched"] == "yes")
    })
    .unwrap_or_else(|| panic!("label never synced\n{}", log_excerpt(&n)));
    assert_eq!(container_ids(&rt, "web"), after, "nothing created again");
    assert_eq!(
        ephemeral(&api).map(|s| s["restartCount"].clone()),
        Some(serde_json::json!(0))
    );
}

fn running_containers(rt: &impl Runtime, pod: &str) -> usize {
    rt.list_containers()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| {
            c.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some(pod)
                && c.state == nanolet::cri::ContainerState::Running
        })
        .count()
}

/// Every container ID of `pod` in containerd, whatever its state, sorted.
fn container_ids(rt: &impl Runtime, pod: &str) -> Vec<String> {
    let mut ids: Vec<String> = rt
        .list_containers()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some(pod))
        .map(|c| c.id)
        .collect();
    ids.sort();
    ids
}

/// The end of nanolet's log without the PLEG relist lines.
fn log_excerpt(n: &Nanolet) -> String {
    let text = std::fs::read_to_string(&n.log).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("PLEG relist"))
        .collect();
    lines[lines.len().saturating_sub(80)..].join("\n")
}

/// nanolet's own view (read-only /pods) of an API pod, by its API name.
fn local_pod(n: &Nanolet, name: &str) -> Option<Value> {
    n.pods().into_iter().find(|p| p["metadata"]["name"] == name)
}

/// Offline autonomy: API pods are checkpointed under root-dir; nanolet restarted while the API
/// server is down runs them from the checkpoint (same names and UIDs, the running containers
/// adopted, not recreated: kubeedge/kubeedge#3618 reports the opposite); when the API server is
/// back its list replaces the checkpoint without restarting unchanged pods
/// (kubeedge/kubeedge#4048), and a pod deleted during the outage is stopped.
#[test]
fn offline_restart_runs_checkpointed_pods_and_reconciles_without_restarts() {
    let ctd = Containerd::start();
    let api = FakeApiServer::start(TOKEN);
    let kc = ctd.tmp().join("kubeconfig");
    api.write_kubeconfig(&kc, TOKEN);
    let mut n = Nanolet::start(&ctd, &[format!("--kubeconfig={}", kc.display())]);
    let keep = api.create_pod("prod", api_pod("keep"));
    let doomed = api.create_pod("prod", api_pod("doomed"));
    wait_for(Duration::from_secs(60), || {
        (api_phase(&api, "keep") == "Running" && api_phase(&api, "doomed") == "Running")
            .then_some(())
    })
    .unwrap_or_else(|| panic!("API pods never ran\n{}", log_excerpt(&n)));
    let rt = ctd.runtime();
    let keep_ids = container_ids(&rt, "keep");
    let doomed_ids = container_ids(&rt, "doomed");
    assert_eq!((keep_ids.len(), doomed_ids.len()), (1, 1));

    // The checkpoint: both pods, without status.
    let cp_path = n.dir.join("root").join("api-pods.json");
    let cp: Value = wait_for(Duration::from_secs(10), || {
        std::fs::read(&cp_path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .filter(|v| v["pods"].as_array().is_some_and(|p| p.len() == 2))
    })
    .unwrap_or_else(|| panic!("no checkpoint with both pods at {}", cp_path.display()));
    assert_eq!(cp["nodeName"], "node1");
    let uids: Vec<&str> = cp["pods"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["metadata"]["uid"].as_str())
        .collect();
    for p in [&keep, &doomed] {
        assert!(
            uids.contains(&p["metadata"]["uid"].as_str().unwrap_or("?")),
            "{uids:?}"
        );
    }
    // Of the status only the immutable qosClass (the kubelet's GetPodQOS keeps it) is kept.
    assert_eq!(
        cp["pods"][0]["status"],
        serde_json::json!({"qosClass": "BestEffort"})
    );

    // Outage, then a restart of nanolet during it: the pods run from the checkpoint.
    api.set_down(true);
    n.stop();
    n.spawn();
    for (name, pod, ids) in [("keep", &keep, &keep_ids), ("doomed", &doomed, &doomed_ids)] {
        let local = wait_for(Duration::from_secs(60), || {
            local_pod(&n, name).filter(|p| p["status"]["phase"] == "Running")
        })
        .unwrap_or_else(|| {
            panic!(
                "{name} not resumed from the checkpoint\n{}",
                log_excerpt(&n)
            )
        });
        assert_eq!(local["metadata"]["uid"], pod["metadata"]["uid"]);
        assert_eq!(local["metadata"]["namespace"], "prod");
        assert_eq!(local["status"]["containerStatuses"][0]["restartCount"], 0);
        assert_eq!(
            &container_ids(&rt, name),
            ids,
            "{name}: containers recreated"
        );
    }
    assert!(
        std::fs::read_to_string(&n.log)
            .unwrap_or_default()
            .contains("running the checkpointed API pods"),
        "{}",
        log_excerpt(&n)
    );
    // Deleted in the API while nanolet cannot see it (a forced delete by an administrator).
    api.delete("/api/v1/namespaces/prod/pods/doomed");

    // The API server returns: the list replaces the checkpoint.
    api.set_down(false);
    wait_for(Duration::from_secs(90), || {
        (running_containers(&rt, "doomed") == 0).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "pod deleted during the outage still runs\n{}",
            log_excerpt(&n)
        )
    });
    wait_for(Duration::from_secs(30), || {
        std::fs::read(&cp_path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .filter(|v| v["pods"].as_array().is_some_and(|p| p.len() == 1))
    })
    .unwrap_or_else(|| panic!("checkpoint still has the deleted pod\n{}", log_excerpt(&n)));
    // Status is written again after the outage (a change of the pod's conditions is not
    // required: the writer starts over after a restart).
    wait_for(Duration::from_secs(30), || {
        (api_phase(&api, "keep") == "Running").then_some(())
    })
    .expect("keep's status in the API");
    let local = local_pod(&n, "keep").expect("keep still runs");
    assert_eq!(local["status"]["phase"], "Running");
    assert_eq!(local["status"]["containerStatuses"][0]["restartCount"], 0);
    assert_eq!(container_ids(&rt, "keep"), keep_ids, "keep was restarted");
    assert_eq!(running_containers(&rt, "keep"), 1);
}

const MIRROR: &str = "/api/v1/namespaces/default/pods/web-node1";

fn static_web(command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels: {{app: web}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '{command}']\n"
    )
}

/// Mirror pods (the kubelet's mirror_client.go and syncPod): each static pod gets a mirror pod
/// in the API (config.mirror = its config hash, owner reference to the Node) carrying its
/// status; a deleted mirror pod is created again, a changed static pod replaces it, a removed
/// static pod deletes it (grace 0, UID precondition). Mirror pods are never run as API pods. A
/// static pod that references a ConfigMap (podutil.HasAPIObjectReference) runs from the local
/// store but gets no mirror pod, with a manifest error naming the field.
#[test]
fn mirror_pods_follow_static_pods() {
    let ctd = Containerd::start();
    let api = FakeApiServer::start(TOKEN);
    let kc = ctd.tmp().join("kubeconfig");
    api.write_kubeconfig(&kc, TOKEN);
    let cm_dir = ctd.tmp().join("configmaps");
    std::fs::create_dir_all(&cm_dir).expect("cm dir");
    std::fs::write(
        cm_dir.join("settings.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {mode: edge}\n",
    )
    .expect("configmap");
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--kubeconfig={}", kc.display()),
            format!("--config-map-dir={}", cm_dir.display()),
        ],
    );
    n.write(
        "cfg.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: cfg\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '3600']\n    env:\n    - name: MODE\n      valueFrom: {configMapKeyRef: {name: settings, key: mode}}\n",
    );
    n.write("web.yaml", &static_web("3600"));
    let local = n.wait_phase("web", "Running");
    let hash = local["metadata"]["annotations"]["kubernetes.io/config.hash"].clone();
    let node = wait_for(Duration::from_secs(30), || api.get(NODE_PATH)).expect("node registered");
    let mirror = wait_for(Duration::from_secs(30), || {
        api.get(MIRROR)
            .filter(|m| m["status"]["phase"] == "Running")
    })
    .unwrap_or_else(|| {
        panic!(
            "no running mirror pod: {:?}\n{}",
            api.get(MIRROR),
            log_excerpt(&n)
        )
    });
    let ann = &mirror["metadata"]["annotations"];
    assert_eq!(ann["kubernetes.io/config.mirror"], hash);
    assert_eq!(ann["kubernetes.io/config.hash"], hash);
    assert_eq!(ann["kubernetes.io/config.source"], "file");
    assert!(ann["kubernetes.io/config.seen"].is_string());
    assert_eq!(mirror["metadata"]["labels"]["app"], "web");
    assert_eq!(
        mirror["metadata"]["ownerReferences"],
        serde_json::json!([{"apiVersion": "v1", "kind": "Node", "name": "node1",
                            "uid": node["metadata"]["uid"], "controller": true}])
    );
    assert_eq!(
        mirror["status"]["containerStatuses"][0]["containerID"],
        local["status"]["containerStatuses"][0]["containerID"]
    );
    // The mirror pod is not run as an API pod: one web-node1, from the file source, no
    // duplicate-name error.
    let webs: Vec<Value> = n
        .pods()
        .into_iter()
        .filter(|p| p["metadata"]["name"] == "web-node1")
        .collect();
    assert_eq!(webs.len(), 1);
    assert_eq!(
        webs[0]["metadata"]["annotations"]["kubernetes.io/config.source"],
        "file"
    );

    // kubectl delete pod on the mirror: nanolet deletes it for good and creates it again.
    api.delete_pod("default", "web-node1");
    let again = wait_for(Duration::from_secs(30), || {
        api.get(MIRROR).filter(|m| {
            m["metadata"]["uid"] != mirror["metadata"]["uid"]
                && m["metadata"]["deletionTimestamp"].is_null()
        })
    })
    .unwrap_or_else(|| {
        panic!(
            "mirror pod not recreated: {:?}\n{}",
            api.get(MIRROR),
            log_excerpt(&n)
        )
    });
    assert_eq!(
        again["metadata"]["annotations"]["kubernetes.io/config.mirror"],
        hash
    );
    assert_eq!(
        n.pod("web").expect("web")["status"]["containerStatuses"][0]["containerID"],
        local["status"]["containerStatuses"][0]["containerID"],
        "the static pod was restarted"
    );

    // The static pod changes: its mirror pod is replaced (new hash).
    n.write("web.yaml", &static_web("3601"));
    let changed = n.wait_pod("web", "the new version", |p| {
        p["metadata"]["annotations"]["kubernetes.io/config.hash"] != hash
            && p["status"]["phase"] == "Running"
    });
    let new_hash = changed["metadata"]["annotations"]["kubernetes.io/config.hash"].clone();
    let replaced = wait_for(Duration::from_secs(30), || {
        api.get(MIRROR)
            .filter(|m| m["metadata"]["annotations"]["kubernetes.io/config.mirror"] == new_hash)
    })
    .unwrap_or_else(|| {
        panic!(
            "mirror pod not replaced: {:?}\n{}",
            api.get(MIRROR),
            log_excerpt(&n)
        )
    });
    assert_eq!(replaced["spec"]["containers"][0]["command"][1], "3601");

    // The static pod that references a ConfigMap runs (local store) without a mirror pod.
    let cfg = n.wait_phase("cfg", "Running");
    assert_eq!(cfg["metadata"]["name"], "cfg-node1");
    assert!(
        api.get("/api/v1/namespaces/default/pods/cfg-node1")
            .is_none()
    );
    assert!(
        !api.requests()
            .iter()
            // events about the pod are POSTed too; only pod creations count.
            .any(|r| r.method == "POST"
                && r.path.ends_with("/pods")
                && r.body.contains("cfg-node1")),
        "a mirror pod was asked for the pod that references a ConfigMap"
    );
    let errors: Value = n
        .get("/manifests/errors")
        .and_then(|b| serde_json::from_str(&b).ok())
        .unwrap_or(Value::Null);
    assert!(
        errors.as_array().into_iter().flatten().any(|e| {
            e["field"] == "spec.containers[0].env[0].valueFrom.configMapKeyRef"
                && e["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("static pods may not reference configmaps"))
        }),
        "{errors}"
    );

    // The static pod goes: its mirror pod is deleted (grace 0, UID precondition).
    let last_uid = replaced["metadata"]["uid"].clone();
    n.remove("web.yaml");
    wait_for(Duration::from_secs(30), || {
        api.get(MIRROR).is_none().then_some(())
    })
    .unwrap_or_else(|| panic!("mirror pod not deleted\n{}", log_excerpt(&n)));
    let deletes: Vec<Value> = api
        .requests()
        .into_iter()
        .filter(|r| r.method == "DELETE" && r.path == MIRROR)
        .filter_map(|r| serde_json::from_str(&r.body).ok())
        .collect();
    assert!(
        deletes.contains(
            &serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1",
            "gracePeriodSeconds": 0, "preconditions": {"uid": last_uid}})
        ),
        "{deletes:?}"
    );
}

/// The double's watch against nanolet's client: an event created after the watch opened
/// arrives as one JSON line.
#[test]
fn double_watch_delivers_events_to_the_client() {
    use std::io::BufRead;
    let api = FakeApiServer::start(TOKEN);
    let client = api.client(TOKEN);
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

/// Issue 10's end-to-end scenario driven by the real `kubectl` against the double: `kubectl
/// get nodes` shows the joined node Ready; a pod created with `kubectl apply -f` (bound to the
/// node, as the scheduler would) runs on containerd and `kubectl get pod` shows it Running with
/// its container ready; a static pod shows up in `kubectl get pods` as its mirror pod;
/// `kubectl delete pod` (which waits until the object is gone) returns only after nanolet
/// stopped the container and sent the final DELETE.
#[test]
fn kubectl_apply_get_and_delete_drive_nanolet() {
    let ctd = Containerd::start();
    let api = FakeApiServer::start(TOKEN);
    let k = support::kubectl::Kubectl::new(&api, TOKEN);
    let kc = ctd.tmp().join("kubeconfig");
    api.write_kubeconfig(&kc, TOKEN);
    let n = Nanolet::start(&ctd, &[format!("--kubeconfig={}", kc.display())]);
    n.write("web.yaml", &static_web("3600"));

    let node = wait_for(Duration::from_secs(30), || {
        let out = k.run(&["get", "nodes", "--no-headers"]).1;
        let cols: Vec<String> = out.split_whitespace().map(String::from).collect();
        (cols.len() >= 2 && cols[0] == "node1" && cols[1] == "Ready").then_some(cols)
    });
    assert!(
        node.is_some(),
        "kubectl get nodes: {:?}",
        k.run(&["get", "nodes"])
    );

    let manifest = k.write(
        "api-pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: fromkubectl\n  namespace: default\nspec:\n  nodeName: node1\n  terminationGracePeriodSeconds: 1\n  automountServiceAccountToken: false\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    imagePullPolicy: IfNotPresent\n    command: [sleep, '3600']\n",
    );
    let manifest = manifest.to_str().expect("utf-8 path");
    assert_eq!(
        k.ok(&["apply", "-f", manifest]).trim(),
        "pod/fromkubectl created"
    );
    let rt = ctd.runtime();
    let running = wait_for(Duration::from_secs(60), || {
        let out = k.run(&["get", "pod", "fromkubectl", "--no-headers"]).1;
        let cols: Vec<String> = out.split_whitespace().map(String::from).collect();
        (cols.len() >= 3 && cols[1] == "1/1" && cols[2] == "Running").then_some(cols)
    });
    assert!(
        running.is_some(),
        "kubectl get pod: {:?}\n{}",
        k.run(&["get", "pod", "fromkubectl", "-o", "yaml"]),
        log_excerpt(&n)
    );
    assert_eq!(running_containers(&rt, "fromkubectl"), 1);

    // The static pod, seen through its mirror pod.
    let mirror = wait_for(Duration::from_secs(30), || {
        let out = k.run(&["get", "pods", "--no-headers"]).1;
        out.lines()
            .any(|l| {
                l.split_whitespace()
                    .take(3)
                    .eq(["web-node1", "1/1", "Running"])
            })
            .then_some(out)
    });
    assert!(mirror.is_some(), "{:?}", k.run(&["get", "pods"]));

    // kubectl delete waits for the object to disappear, which only nanolet's final DELETE
    // does; by then the container has stopped.
    let (ok, out, err) = k.run(&["delete", "pod", "fromkubectl", "--timeout=60s"]);
    assert!(ok, "kubectl delete: {out}{err}\n{}", log_excerpt(&n));
    assert_eq!(out.trim(), "pod \"fromkubectl\" deleted");
    assert_eq!(running_containers(&rt, "fromkubectl"), 0);
    let (ok, _, err) = k.run(&["get", "pod", "fromkubectl"]);
    assert!(!ok && err.contains("NotFound"), "gone from the API: {err}");
    // Deleting the static pod's mirror does not stop the static pod (as with the kubelet);
    // nanolet creates the mirror again.
    let (ok, out, err) = k.run(&["delete", "pod", "web-node1", "--wait=false"]);
    assert!(ok, "{out}{err}");
    assert_eq!(running_containers(&rt, "web-node1"), 1);
    let back = wait_for(Duration::from_secs(30), || {
        api.get(MIRROR)
            .filter(|m| m["metadata"]["deletionTimestamp"].is_null())
    });
    assert!(
        back.is_some(),
        "mirror pod recreated: {:?}",
        api.get(MIRROR)
    );
}

/// API-server mode over real TLS (the double's `start_tls`): nanolet verifies the API server
/// against the kubeconfig's CA data and authenticates with a node client certificate
/// (CN system:node:node1, O system:nodes) made by openssl; the Node and its Lease appear.
#[test]
fn joins_over_tls_with_a_node_client_certificate() {
    let ctd = Containerd::start();
    let api = FakeApiServer::start_tls(TOKEN);
    let kc = ctd.tmp().join("kubeconfig");
    let cert = api.client_cert("system:node:node1", &["system:nodes"]);
    api.write_kubeconfig_cert(&kc, &cert);
    let n = Nanolet::start(&ctd, &[format!("--kubeconfig={}", kc.display())]);
    wait_for(Duration::from_secs(30), || api.get(NODE_PATH))
        .unwrap_or_else(|| panic!("node never registered over TLS\n{}", n.log_tail()));
    wait_for(Duration::from_secs(30), || api.get(LEASE_PATH))
        .unwrap_or_else(|| panic!("no Lease over TLS\n{}", n.log_tail()));
    let reg = api
        .requests()
        .into_iter()
        .find(|r| r.method == "POST" && r.path == "/api/v1/nodes")
        .expect("registration request");
    assert_eq!(
        reg.user, "system:node:node1",
        "authenticated by its client certificate"
    );
}

/// The kubelet's `updatePodCIDR`: once the Node has a `spec.podCIDR` (the controller manager's
/// node IPAM sets it), the kubelet sends it to the runtime with CRI UpdateRuntimeConfig, once
/// per change. Here the double's Node gets one; nanolet's runtime metrics count the call and
/// containerd (1.6+) answers it without error.
#[test]
fn pod_cidr_from_the_node_reaches_the_runtime() {
    let ctd = Containerd::start();
    let api = FakeApiServer::start(TOKEN);
    let kc = ctd.tmp().join("kubeconfig");
    api.write_kubeconfig(&kc, TOKEN);
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--kubeconfig={}", kc.display()),
            "--node-status-update-frequency=1s".into(),
        ],
    );
    let calls = |n: &Nanolet| -> (u64, u64) {
        let m = n.get("/metrics").unwrap_or_default();
        let count = |name: &str| {
            m.lines()
                .find(|l| {
                    l.starts_with(&format!(
                        "{name}{{operation_type=\"update_runtime_config\"}}"
                    ))
                })
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (
            count("kubelet_runtime_operations_total"),
            count("kubelet_runtime_operations_errors_total"),
        )
    };
    wait_for(Duration::from_secs(30), || api.get(NODE_PATH))
        .unwrap_or_else(|| panic!("node never registered\n{}", n.log_tail()));
    // Several status updates (1 s apart) without a pod CIDR: no call.
    let updates = api.count("GET", NODE_PATH);
    wait_for(Duration::from_secs(30), || {
        (api.count("GET", NODE_PATH) >= updates + 3).then_some(())
    })
    .expect("the Node is read at every status update");
    assert_eq!(calls(&n), (0, 0), "UpdateRuntimeConfig without a pod CIDR");

    api.modify(NODE_PATH, |node| {
        node["spec"]["podCIDR"] = "10.244.7.0/24".into();
    })
    .expect("node");
    wait_for(Duration::from_secs(30), || (calls(&n).0 >= 1).then_some(()))
        .unwrap_or_else(|| panic!("pod CIDR never sent to the runtime\n{}", n.log_tail()));
    assert!(n.log_tail().contains("10.244.7.0/24"), "{}", n.log_tail());
    // Once per change: more status updates, no second call.
    let updates = api.count("GET", NODE_PATH);
    wait_for(Duration::from_secs(30), || {
        (api.count("GET", NODE_PATH) >= updates + 3).then_some(())
    })
    .expect("status updates go on");
    assert_eq!(calls(&n), (1, 0), "one UpdateRuntimeConfig, answered");
}

fn condition(obj: &Value, type_: &str) -> Value {
    obj["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_).cloned())
        .unwrap_or(Value::Null)
}

/// After a partition longer than `--node-monitor-grace-period` the node lifecycle controller
/// sets the Node's conditions to Unknown and marks every pod on it Ready=False
/// (pkg/controller/nodelifecycle, `MarkPodsNotReady`). The kubelet repairs both because it
/// compares with the API's copy: `tryUpdateNodeStatus` reads the Node back and patches what
/// differs (a strategic merge patch: conditions merged by type, so another agent's
/// NetworkUnavailable stays), and the status manager's `needsReconcile` (every `syncPeriod`,
/// 10 s) re-sends a pod status the API's copy contradicts. Before, nanolet compared with what
/// it had last sent: the Node waited for nodeStatusReportFrequency (5 m here) and the pod for a
/// local change that never came.
#[test]
fn node_and_pods_marked_by_the_controller_are_repaired_from_the_api_copy() {
    let ctd = Containerd::start();
    let api = FakeApiServer::start(TOKEN);
    let kc = ctd.tmp().join("kubeconfig");
    api.write_kubeconfig(&kc, TOKEN);
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--kubeconfig={}", kc.display()),
            "--node-status-update-frequency=1s".into(),
            "--node-status-report-frequency=5m".into(),
        ],
    );
    api.create_pod("prod", api_pod("web"));
    let pod_path = "/api/v1/namespaces/prod/pods/web";
    wait_for(Duration::from_secs(60), || {
        (condition(&api.get(pod_path)?, "Ready")["status"] == "True").then_some(())
    })
    .unwrap_or_else(|| panic!("web never Ready in the API\n{}", n.log_tail()));
    let node = wait_for(Duration::from_secs(30), || {
        api.get(NODE_PATH)
            .filter(|n| condition(n, "Ready")["status"] == "True")
    })
    .unwrap_or_else(|| panic!("node never Ready\n{}", n.log_tail()));
    let qos = api.get(pod_path).expect("pod")["status"]["qosClass"].clone();
    assert_eq!(qos, "BestEffort", "the API server sets status.qosClass");

    // The network plugin's condition, then the controller's verdict on a silent node.
    api.modify(NODE_PATH, |n| {
        if let Some(cs) = n["status"]["conditions"].as_array_mut() {
            cs.push(
                serde_json::json!({"type": "NetworkUnavailable", "status": "False",
                "reason": "RouteCreated", "message": "RouteController created a route",
                "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}),
            );
            for c in cs.iter_mut().filter(|c| c["type"] != "NetworkUnavailable") {
                c["status"] = "Unknown".into();
                c["reason"] = "NodeStatusUnknown".into();
                c["message"] = "Kubelet stopped posting node status.".into();
            }
        }
    });
    api.modify(pod_path, |p| {
        for c in p["status"]["conditions"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            if c["type"] == "Ready" {
                c["status"] = "False".into();
            }
        }
    });

    // The Node at the next update (1 s), not after nodeStatusReportFrequency (5 m).
    let repaired = wait_for(Duration::from_secs(10), || {
        api.get(NODE_PATH)
            .filter(|n| condition(n, "Ready")["status"] == "True")
    })
    .unwrap_or_else(|| panic!("Node still Unknown\n{}", n.log_tail()));
    let net = condition(&repaired, "NetworkUnavailable");
    assert_eq!(
        net["reason"], "RouteCreated",
        "another agent's condition was deleted"
    );
    for t in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        assert_eq!(condition(&repaired, t)["status"], "False", "{t}");
    }
    // Unknown -> True is a transition: a new lastTransitionTime (the setters' rule).
    assert_ne!(
        condition(&repaired, "Ready")["lastTransitionTime"],
        condition(&node, "Ready")["lastTransitionTime"]
    );
    let patch = api
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.method == "PATCH" && r.path == STATUS_PATH)
        .expect("a node status patch");
    assert_eq!(patch.content_type, "application/strategic-merge-patch+json");
    // Settled: the Node is read back at every update (1 s) but not patched while nothing
    // changed (nodeStatusReportFrequency is 5 m), though the API server stores quantities in
    // canonical form (`6713344Ki` as `6556Mi`): they compare by value.
    let patches = api.count("PATCH", STATUS_PATH);
    let reads = api.count("GET", NODE_PATH);
    wait_for(Duration::from_secs(15), || {
        (api.count("GET", NODE_PATH) >= reads + 4).then_some(())
    })
    .expect("the Node read back at every update");
    assert_eq!(
        api.count("PATCH", STATUS_PATH),
        patches,
        "an unchanged node status was patched\n{}",
        n.log_tail()
    );

    // The pod within the status manager's syncPeriod (10 s), its qosClass untouched.
    let pod = wait_for(Duration::from_secs(25), || {
        api.get(pod_path)
            .filter(|p| condition(p, "Ready")["status"] == "True")
    })
    .unwrap_or_else(|| panic!("pod still Ready=False in the API\n{}", n.log_tail()));
    assert_eq!(pod["status"]["qosClass"], qos);
    // Repaired, the API's copy matches: the next reconciliation (10 s) writes nothing (a
    // comparison that never matched would patch every pod every 10 s).
    let writes = api.count("PATCH", "/api/v1/namespaces/prod/pods/web/status");
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(
        api.count("PATCH", "/api/v1/namespaces/prod/pods/web/status"),
        writes,
        "a settled pod status was written again\n{}",
        n.log_tail()
    );
}

/// The status manager (status_manager.go syncPod) logs a status update the API server refuses
/// and tries again at its next syncBatch, not in a tight loop. nanolet: a 4xx on a pod status
/// write (here an admission plugin's 403) is logged at warning with the API's
/// `Status.message`, once per back-off step, and written again at the next reconciliation
/// (10 s) or status change, not every second; once the server accepts it, it is written.
#[test]
fn a_refused_pod_status_is_warned_with_the_api_message_and_not_retried_every_second() {
    let ctd = Containerd::start();
    let api = FakeApiServer::start(TOKEN);
    let kc = ctd.tmp().join("kubeconfig");
    api.write_kubeconfig(&kc, TOKEN);
    let status_path = "/api/v1/namespaces/prod/pods/web/status";
    let message = "pods \"web\" is forbidden: example.com/admission says no";
    api.refuse("PATCH", status_path, 403, "Forbidden", message);
    let n = Nanolet::start(&ctd, &[format!("--kubeconfig={}", kc.display())]);
    api.create_pod("prod", api_pod("web"));
    let log = || std::fs::read_to_string(&n.log).unwrap_or_default();
    wait_for(Duration::from_secs(60), || {
        local_pod(&n, "web")
            .filter(|p| p["status"]["phase"] == "Running")
            .and_then(|_| {
                log()
                    .contains("example.com/admission says no")
                    .then_some(())
            })
    })
    .unwrap_or_else(|| panic!("no warning with the API's message\n{}", n.log_tail()));
    let warning = log()
        .lines()
        .find(|l| l.contains("example.com/admission says no"))
        .unwrap_or_default()
        .to_string();
    assert!(warning.contains("WARN"), "{warning}");
    // The local status is settled: over 8 s at most the one reconciliation's retry (the old
    // writer retried every second).
    let before = api.count("PATCH", status_path);
    std::thread::sleep(Duration::from_secs(8));
    let retries = api.count("PATCH", status_path) - before;
    assert!(retries <= 1, "{retries} retries in 8 s\n{}", n.log_tail());
    let warnings = log().matches("example.com/admission says no").count();
    assert!(warnings <= 3, "{warnings} warnings\n{}", n.log_tail());

    api.clear_refusals();
    wait_for(Duration::from_secs(25), || {
        (condition(&api.get("/api/v1/namespaces/prod/pods/web")?, "Ready")["status"] == "True")
            .then_some(())
    })
    .unwrap_or_else(|| panic!("status never written once accepted\n{}", n.log_tail()));
    // The line follows the accepted PATCH's answer, which the double may record (and the
    // status above show) a moment before nanolet logs it: polled, not read at once.
    wait_for(Duration::from_secs(10), || {
        log()
            .contains("writing pod status works again")
            .then_some(())
    })
    .unwrap_or_else(|| panic!("no \"works again\" line\n{}", n.log_tail()));
}
