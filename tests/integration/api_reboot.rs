//! Offline through a reboot (issue 20 item 6): an API pod's ConfigMaps, Secrets and last
//! token are checkpointed (`<root-dir>/api-objects.json`, 0600); after a reboot (nanolet
//! killed, every sandbox and container gone, containerd restarted, tmpfs volumes gone) with the
//! API server down, the pod runs again from the checkpoint; when the API server returns its
//! state wins without a restart. With `--checkpoint-secrets=false` the pod waits for it.

use nanolet_test_support as support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use nanolet::cri::Runtime;
use serde_json::{Value, json};
use support::agent::Nanolet;
use support::apiserver::FakeApiServer;
use support::{Containerd, wait_for};

use super::api_objects::{POD_PATH, SA_DIR, agent_container, daemonset_pod, exec, last_token};

const TOKEN: &str = "t0ken-for-the-reboot-test";
const SECRET_VALUE: &str = "r3boot-s3cret-never-logged";
/// base64 of SECRET_VALUE, as the Secret's `data` holds it.
const SECRET_B64: &str = "cjNib290LXMzY3JldC1uZXZlci1sb2dnZWQ=";
const POD: &str = "node-agent-x2kfp";
const CONFIG_MAP: &str = "/api/v1/namespaces/kube-system/configmaps/agent-config";

/// The node with the DaemonSet-shaped pod running: containerd, the API server double (the
/// pod's ServiceAccount, root CA, ConfigMap and Secret), nanolet with `extra` flags.
struct Node {
    ctd: Containerd,
    api: FakeApiServer,
    n: Nanolet,
    ca: String,
}

fn running_node(extra: &[&str]) -> Node {
    let ctd = Containerd::start();
    let api = FakeApiServer::start(TOKEN);
    let kc = ctd.tmp().join("kubeconfig");
    api.write_kubeconfig(&kc, TOKEN);
    api.create_service_account("kube-system", "node-agent");
    api.create_kubernetes_service();
    let ca = api.publish_root_ca("kube-system");
    api.create_object(
        "/api/v1/namespaces/kube-system/configmaps",
        json!({"metadata": {"name": "agent-config"}, "data": {"agent.conf": "level=1\n"}}),
    );
    api.create_object(
        "/api/v1/namespaces/kube-system/secrets",
        json!({"metadata": {"name": "agent-secret"}, "stringData": {"key": SECRET_VALUE}}),
    );
    let mut args = vec![
        format!("--kubeconfig={}", kc.display()),
        "--sync-frequency=2s".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let n = Nanolet::start(&ctd, &args);
    api.create_pod("kube-system", daemonset_pod());
    let rt = ctd.runtime();
    wait_for(Duration::from_secs(60), || agent_container(&rt)).unwrap_or_else(|| {
        panic!(
            "the pod never ran: {:?}\n{}",
            api.get(POD_PATH),
            n.log_tail()
        )
    });
    Node { ctd, api, n, ca }
}

fn checkpoint_path(n: &Nanolet) -> PathBuf {
    n.dir.join("root").join("api-objects.json")
}

fn read_checkpoint(n: &Nanolet) -> Option<Value> {
    std::fs::read(checkpoint_path(n))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
}

fn names(cp: &Value, kind: &str) -> Vec<String> {
    cp[kind]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["metadata"]["name"].as_str().map(String::from))
        .collect()
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or(0)
}

/// Processes of this containerd's shims (their command line names its directory).
fn shims(ctd: &Containerd) -> Vec<String> {
    let needle = format!("{}/", ctd.tmp().display());
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .filter(|c| c.contains("containerd-shim") && c.contains(&needle))
        .collect()
}

/// What a reboot does to the node: nanolet dies (kill -9), every sandbox and container is
/// gone (stopped and removed through CRI, no shim left), containerd starts empty, and the
/// tmpfs volumes below nanolet's directory are gone (their directories stay on disk).
fn reboot(node: &mut Node) {
    reboot_node(&mut node.n, &mut node.ctd);
}

/// [`reboot`] of a nanolet and its containerd (also the real-cluster test's).
pub(crate) fn reboot_node(n: &mut Nanolet, ctd: &mut Containerd) {
    n.kill9();
    let rt = ctd.runtime();
    for sb in rt.list_pod_sandboxes().unwrap_or_default() {
        rt.stop_pod_sandbox(&sb.id).expect("stop sandbox");
        rt.remove_pod_sandbox(&sb.id).expect("remove sandbox");
    }
    ctd.stop_daemon();
    let left = wait_for(Duration::from_secs(20), || {
        shims(ctd).is_empty().then_some(())
    });
    assert!(left.is_some(), "shims survive: {:?}", shims(ctd));
    let prefix = format!("{}/", n.dir.display());
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<&str> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| p.starts_with(&prefix))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let _ = nix::mount::umount2(p, nix::mount::MntFlags::MNT_DETACH);
    }
    ctd.start_daemon();
    let rt = ctd.runtime();
    assert!(rt.list_pod_sandboxes().unwrap_or_default().is_empty());
    assert!(rt.list_containers().unwrap_or_default().is_empty());
}

/// nanolet's own view (read-only /pods) of the API pod.
fn local_pod(n: &Nanolet) -> Option<Value> {
    n.pods().into_iter().find(|p| p["metadata"]["name"] == POD)
}

/// Every container ID of the pod in containerd, whatever its state.
fn pod_containers(rt: &impl Runtime) -> Vec<String> {
    rt.list_containers()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some(POD))
        .map(|c| c.id)
        .collect()
}

/// The tokens issued for the pod, oldest first.
fn pod_tokens(api: &FakeApiServer) -> Vec<String> {
    api.issued_tokens()
        .iter()
        .filter(|t| t["spec"]["boundObjectRef"]["name"] == POD)
        .filter_map(|t| t["status"]["token"].as_str().map(String::from))
        .collect()
}

/// Neither the Secret (as is or base64) nor a token in nanolet's log.
fn assert_log_clean(node: &Node) {
    let log = std::fs::read_to_string(&node.n.log).unwrap_or_default();
    assert!(
        !log.contains(SECRET_VALUE),
        "the Secret's value is in the log"
    );
    assert!(!log.contains(SECRET_B64), "the Secret's data is in the log");
    for t in pod_tokens(&node.api) {
        assert!(!log.contains(&t), "a token is in the log");
    }
}

/// Offline through a reboot. The kubelet keeps what a pod's volumes hold on disk (its
/// projected token file, its ConfigMap files) and containerd keeps env values; a reboot with
/// the API server down leaves a kubelet unable to start the pod again (its object caches start
/// empty), nanolet starts it from its checkpoint: the Secret env, the ConfigMap file and the
/// last token as the kubelet's token file held it (token_manager.go: a token is used while it
/// is valid; an expired one is what the file would still hold). When the API server returns,
/// its state wins (the ConfigMap changed during the outage reaches the file; a fresh token is
/// requested) without a restart (restartCount 0, the same container), as the kubelet updates
/// volumes in place.
#[test]
fn api_pods_start_again_after_a_reboot_without_the_api_server() {
    let mut node = running_node(&[]);
    let cp = wait_for(Duration::from_secs(20), || {
        read_checkpoint(&node.n).filter(|cp| {
            names(cp, "secrets") == ["agent-secret"]
                && names(cp, "configMaps") == ["agent-config", "kube-root-ca.crt"]
                && cp["tokens"][0]["token"] == last_token(&node.api).as_str()
        })
    })
    .unwrap_or_else(|| {
        panic!(
            "no checkpoint with the pod's objects: {:?}\n{}",
            std::fs::read_to_string(checkpoint_path(&node.n)),
            node.n.log_tail()
        )
    });
    assert_eq!(cp["nodeName"], "node1");
    assert_eq!(cp["secrets"][0]["data"]["key"], SECRET_B64);
    assert_eq!(mode(&checkpoint_path(&node.n)), 0o600);
    let before = last_token(&node.api);
    let issued_before = pod_tokens(&node.api).len();

    node.api.set_down(true);
    reboot(&mut node);
    node.n.spawn();
    let rt = node.ctd.runtime();
    let id = wait_for(Duration::from_secs(90), || agent_container(&rt)).unwrap_or_else(|| {
        let log = std::fs::read_to_string(&node.n.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains("checkpoint")).collect();
        panic!(
            "the pod did not start again offline\n{}\n{}",
            lines.join("\n"),
            node.n.log_tail()
        )
    });
    assert_eq!(
        exec(&rt, &id, &["sh", "-c", "echo \"$AGENT_KEY\""]).trim(),
        SECRET_VALUE
    );
    // The Services come from the checkpoint too (the kubelet would refuse the container
    // until its service informer synced: "services have not yet been read at least once").
    assert_eq!(
        exec(
            &rt,
            &id,
            &[
                "sh",
                "-c",
                "echo \"$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT\""
            ]
        )
        .trim(),
        "10.96.0.1:443"
    );
    assert_eq!(
        exec(&rt, &id, &["cat", "/etc/agent/agent.conf"]),
        "level=1\n"
    );
    let token_file = format!("{SA_DIR}/token");
    assert_eq!(exec(&rt, &id, &["cat", &token_file]), before);
    assert_eq!(
        exec(&rt, &id, &["cat", &format!("{SA_DIR}/ca.crt")]),
        node.ca
    );
    assert_eq!(
        exec(&rt, &id, &["cat", &format!("{SA_DIR}/namespace")]),
        "kube-system"
    );
    let local = wait_for(Duration::from_secs(30), || {
        local_pod(&node.n).filter(|p| p["status"]["phase"] == "Running")
    })
    .unwrap_or_else(|| panic!("not Running in /pods\n{}", node.n.log_tail()));
    assert_eq!(local["status"]["containerStatuses"][0]["restartCount"], 0);
    assert_eq!(mode(&checkpoint_path(&node.n)), 0o600);
    assert_log_clean(&node);

    // The API server returns with a changed ConfigMap: its state wins, in place.
    node.api.modify(CONFIG_MAP, |o| {
        o["data"]["agent.conf"] = json!("level=2\n");
    });
    node.api.set_down(false);
    let fresh = wait_for(Duration::from_secs(90), || {
        let now = exec(&rt, &id, &["cat", &token_file]);
        (pod_tokens(&node.api).len() > issued_before && now == last_token(&node.api)).then_some(now)
    })
    .unwrap_or_else(|| panic!("no fresh token after the outage\n{}", node.n.log_tail()));
    assert_ne!(fresh, before);
    wait_for(Duration::from_secs(90), || {
        (exec(&rt, &id, &["cat", "/etc/agent/agent.conf"]) == "level=2\n").then_some(())
    })
    .unwrap_or_else(|| panic!("the API's ConfigMap never won\n{}", node.n.log_tail()));
    // The status in the API: Running, never restarted, this container.
    wait_for(Duration::from_secs(60), || {
        let p = node.api.get(POD_PATH)?;
        let c = &p["status"]["containerStatuses"][0];
        (p["status"]["phase"] == "Running"
            && c["restartCount"] == 0
            && c["containerID"] == format!("containerd://{id}").as_str())
        .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "API status: {:?}\n{}",
            node.api.get(POD_PATH),
            node.n.log_tail()
        )
    });
    // The checkpoint follows: the API's ConfigMap and the fresh token.
    wait_for(Duration::from_secs(20), || {
        read_checkpoint(&node.n).filter(|cp| {
            cp["tokens"][0]["token"] == fresh.as_str()
                && cp["configMaps"][0]["data"]["agent.conf"] == "level=2\n"
        })
    })
    .unwrap_or_else(|| panic!("the checkpoint did not follow the API server"));
    assert_eq!(
        pod_containers(&rt),
        vec![id.clone()],
        "a container was recreated"
    );
    assert_eq!(agent_container(&rt).as_deref(), Some(id.as_str()));
    let local = local_pod(&node.n).expect("the pod in nanolet's /pods");
    assert_eq!(local["status"]["containerStatuses"][0]["restartCount"], 0);
    assert_log_clean(&node);
}

/// `--checkpoint-secrets=false`: neither the Secret nor a token is written (the ConfigMaps
/// are); after a reboot with the API server down the pod waits as a kubelet's does (its
/// Secret lookup fails: makeEnvironmentVariables' error is CreateContainerConfigError) and
/// starts once the API server answers.
#[test]
fn without_checkpointed_secrets_the_pod_waits_for_the_api_server() {
    let mut node = running_node(&["--checkpoint-secrets=false"]);
    let cp = wait_for(Duration::from_secs(20), || {
        read_checkpoint(&node.n)
            .filter(|cp| names(cp, "configMaps") == ["agent-config", "kube-root-ca.crt"])
    })
    .unwrap_or_else(|| panic!("no checkpoint\n{}", node.n.log_tail()));
    assert_eq!(cp["secrets"], json!([]));
    assert_eq!(cp["tokens"], json!([]));
    let raw = std::fs::read_to_string(checkpoint_path(&node.n)).unwrap_or_default();
    assert!(!raw.contains(SECRET_B64) && !raw.contains(&last_token(&node.api)));

    node.api.set_down(true);
    reboot(&mut node);
    node.n.spawn();
    let rt = node.ctd.runtime();
    let message = wait_for(Duration::from_secs(60), || {
        let p = local_pod(&node.n)?;
        let w = &p["status"]["containerStatuses"][0]["state"]["waiting"];
        (w["reason"] == "CreateContainerConfigError")
            .then(|| w["message"].as_str().unwrap_or_default().to_string())
    })
    .unwrap_or_else(|| {
        panic!(
            "the pod does not wait for its Secret: {:?}\n{}",
            local_pod(&node.n),
            node.n.log_tail()
        )
    });
    assert!(message.contains("agent-secret"), "{message}");
    assert_eq!(agent_container(&rt), None, "ran without its Secret");
    node.api.set_down(false);
    let id = wait_for(Duration::from_secs(90), || agent_container(&rt)).unwrap_or_else(|| {
        panic!(
            "the pod never started once the API server answered\n{}",
            node.n.log_tail()
        )
    });
    assert_eq!(
        exec(&rt, &id, &["sh", "-c", "echo \"$AGENT_KEY\""]).trim(),
        SECRET_VALUE
    );
    assert_log_clean(&node);
}
