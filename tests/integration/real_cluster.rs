//! nanolet as a node of a real control plane (issue 29): etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler of the pinned Kubernetes (scripts/upstream.pins),
//! set up by `scripts/cluster` as kubeadm sets one up (Node,RBAC authorization,
//! NodeRestriction, bootstrap tokens and kubeadm's RBAC bindings, the CSR approver and signer,
//! node lifecycle), each test with its own control plane in a network namespace and the node
//! (containerd and nanolet) in another, so the node has a real, non-loopback address.
//!
//! What only the API-server double can do (fault injection: refusals, outages on demand, a
//! watch that expires) stays in apiserver.rs and cluster_node.rs.

use std::time::Duration;

use nanolet_test_support as support;
use serde_json::Value;

use support::agent::Nanolet;
use support::cluster::Cluster;
use support::{Containerd, wait_for};

const NODE: &str = "node1";
const LONG: Duration = Duration::from_secs(180);

/// nanolet joining `cluster` as kubeadm's `kubeadm join` makes a kubelet join: the bootstrap
/// kubeconfig with the token, the kubelet port on 10250 of the node's address with
/// webhook authentication and authorization against the API server.
fn join(cluster: &Cluster, ctd: &Containerd, extra: &[&str]) -> Nanolet {
    let dir = ctd.tmp().join("node");
    std::fs::create_dir_all(&dir).expect("node dir");
    // docs/apiserver-mode.md's join: the kubelet port on every address of the node (its
    // namespace here); the read-only port then needs its bearer token.
    let token = dir.join("read-only-token");
    std::fs::write(&token, "read-only-t0ken\n").expect("token file");
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("token mode");
    let mut flags = vec![
        "--address=0.0.0.0".to_string(),
        format!("--read-only-token-file={}", token.display()),
        format!("--kubeconfig={}", dir.join("kubelet.conf").display()),
        format!(
            "--bootstrap-kubeconfig={}",
            cluster.bootstrap_kubeconfig().display()
        ),
        format!("--cert-dir={}", dir.join("pki").display()),
        "--port=10250".to_string(),
        format!("--client-ca-file={}", cluster.ca_file().display()),
        "--authentication-token-webhook".to_string(),
        "--authorization-mode=Webhook".to_string(),
    ];
    flags.extend(extra.iter().map(|s| s.to_string()));
    Nanolet::start(ctd, &flags)
}

fn ready(obj: &Value) -> bool {
    Cluster::condition(obj, "Ready").as_deref() == Some("True")
}

fn wait_node_ready(cluster: &Cluster, n: &Nanolet) -> Value {
    wait_for(LONG, || cluster.get_json(&["node", NODE]).filter(ready)).unwrap_or_else(|| {
        panic!(
            "node {NODE} never Ready; now: {:#}\nnanolet log:\n{}\nkube-apiserver:\n{}",
            cluster.get_json(&["node", NODE]).unwrap_or(Value::Null),
            n.log_tail(),
            cluster.log_tail("kube-apiserver", 20)
        )
    })
}

/// The pod of `selector` on this node once it is Running.
fn wait_running(cluster: &Cluster, ns: &str, selector: &str, n: &Nanolet) -> Value {
    wait_for(LONG, || {
        cluster
            .get_json(&["pods", "-n", ns, "-l", selector])
            .and_then(|l| {
                l["items"].as_array().and_then(|items| {
                    items
                        .iter()
                        .find(|p| {
                            p["spec"]["nodeName"] == NODE && p["status"]["phase"] == "Running"
                        })
                        .cloned()
                })
            })
    })
    .unwrap_or_else(|| {
        panic!(
            "no Running pod {selector} on {NODE}; now: {:#}\nnanolet log:\n{}",
            cluster
                .get_json(&["pods", "-n", ns, "-l", selector])
                .unwrap_or(Value::Null),
            n.log_tail()
        )
    })
}

fn name(obj: &Value) -> String {
    obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// kubeadm-style join: the bootstrap token's CSR is approved by the controller manager's
/// csrapproving controller (kubeadm's `kubeadm:node-autoapprove-bootstrap` binding) and signed
/// by csrsigning; the Node registers through NodeRestriction and the Node authorizer and
/// becomes Ready. Then a DaemonSet (its pods made by the DaemonSet controller with node
/// affinity for each node, bound by the real scheduler) runs on nanolet with the default `kube-api-access-*` projected volume (a bound token the Node
/// authorizer lets this node request), a ConfigMap volume and a Secret in its environment;
/// `kubectl logs` reaches the container through the API server's node proxy on 10250.
#[test]
fn joins_with_a_bootstrap_token_and_runs_a_daemonset_with_token_config_map_and_secret() {
    let cluster = Cluster::up();
    let ctd = Containerd::start_in_netns(&cluster.node_netns());
    // NodeRestriction lets a node set labels outside kubernetes.io/k8s.io, and those under
    // kubelet.kubernetes.io/ and node.kubernetes.io/ (k8s.io/kubelet's IsKubeletLabel).
    let n = join(
        &cluster,
        &ctd,
        &["--node-labels=example.com/site=lab,kubelet.kubernetes.io/edge-class=small"],
    );
    let node = wait_node_ready(&cluster, &n);
    assert_eq!(
        node["metadata"]["labels"]["example.com/site"], "lab",
        "{node:#}"
    );
    assert_eq!(
        node["metadata"]["labels"]["kubelet.kubernetes.io/edge-class"],
        "small"
    );
    // The kubelet's address order: the InternalIP first, the node's real (non-loopback) one.
    let addresses = node["status"]["addresses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        addresses
            .first()
            .map(|a| (a["type"].clone(), a["address"].clone())),
        Some((Value::from("InternalIP"), Value::from(cluster.node_ip()))),
        "addresses: {addresses:?}"
    );
    // The client CSR: from the bootstrap token's user, auto-approved and issued.
    let csrs = cluster.get_json(&["csr"]).expect("kubectl get csr");
    let client_csr = csrs["items"]
        .as_array()
        .and_then(|items| {
            items
                .iter()
                .find(|c| c["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet")
        })
        .cloned()
        .unwrap_or_else(|| panic!("no client CSR: {csrs:#}"));
    let bootstrap_user = format!(
        "system:bootstrap:{}",
        cluster
            .var("BOOTSTRAP_TOKEN")
            .split('.')
            .next()
            .unwrap_or_default()
    );
    assert_eq!(client_csr["spec"]["username"], bootstrap_user.as_str());
    assert_eq!(
        client_csr["status"]["conditions"][0]["reason"], "AutoApproved",
        "{client_csr:#}"
    );
    assert!(
        client_csr["status"]["certificate"].is_string(),
        "not issued: {client_csr:#}"
    );
    // The node's credential is the issued certificate: system:node:node1 in system:nodes.
    let kubeconfig =
        std::fs::read_to_string(ctd.tmp().join("node/kubelet.conf")).expect("kubelet.conf");
    assert!(kubeconfig.contains("client-certificate"), "{kubeconfig}");

    cluster
        .apply(
            r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: greeting, namespace: default}
data: {greeting: hello-from-configmap}
---
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: default}
stringData: {password: s3cret-value}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ds, namespace: default}
spec:
  selector: {matchLabels: {app: ds}}
  template:
    metadata: {labels: {app: ds}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: c
        image: localhost/busybox:1.36
        command: ["sh", "-c", "echo ns=$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace); echo secret=$PASSWORD; echo cm=$(cat /cfg/greeting); echo token-bytes=$(wc -c < /var/run/secrets/kubernetes.io/serviceaccount/token); echo ca=$(grep -c BEGIN /var/run/secrets/kubernetes.io/serviceaccount/ca.crt); exec sleep 3600"]
        env:
        - name: PASSWORD
          valueFrom: {secretKeyRef: {name: creds, key: password}}
        volumeMounts:
        - {name: cfg, mountPath: /cfg}
      volumes:
      - name: cfg
        configMap: {name: greeting}
"#,
        )
        .expect("apply the DaemonSet");
    let pod = wait_running(&cluster, "default", "app=ds", &n);
    let pod_name = name(&pod);
    let volumes = pod["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        volumes.iter().any(|v| v["name"]
            .as_str()
            .is_some_and(|s| s.starts_with("kube-api-access-"))),
        "the ServiceAccount admission plugin's projected volume: {volumes:?}"
    );
    let logs = wait_for(Duration::from_secs(60), || {
        cluster
            .kubectl(&["logs", "-n", "default", &pod_name])
            .ok()
            .filter(|l| l.contains("ca="))
    })
    .unwrap_or_else(|| {
        panic!(
            "kubectl logs never showed the pod's output: {:?}\nnanolet log:\n{}",
            cluster.kubectl(&["logs", "-n", "default", &pod_name]),
            n.log_tail()
        )
    });
    assert!(logs.contains("ns=default"), "{logs}");
    assert!(logs.contains("secret=s3cret-value"), "{logs}");
    assert!(logs.contains("cm=hello-from-configmap"), "{logs}");
    assert!(logs.contains("ca=1"), "{logs}");
    let token_bytes: usize = logs
        .lines()
        .find_map(|l| l.strip_prefix("token-bytes="))
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    assert!(token_bytes > 200, "a bound ServiceAccount JWT: {logs}");
    // Ready in the API, as nanolet reports it.
    let pod = cluster
        .get_json(&["pod", "-n", "default", &pod_name])
        .expect("the pod");
    assert!(ready(&pod), "{pod:#}");
    assert_eq!(pod["status"]["hostIP"], cluster.node_ip());
}

/// A node's mirror pods pass the Priority admission plugin with a `globalDefault`
/// PriorityClass present (it refuses a pod whose integer `spec.priority` differs from the
/// class it resolves: the kubelet's mirror pods carry none) and the NodeRestriction plugin (a
/// mirror pod must be bound to this node, carry the mirror annotation and reference no
/// ServiceAccount, Secret or ConfigMap).
#[test]
fn a_static_pod_gets_its_mirror_pod_with_a_global_default_priority_class() {
    let cluster = Cluster::up();
    cluster
        .apply(
            r#"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: everyday}
value: 1000
globalDefault: true
"#,
        )
        .expect("PriorityClass");
    let ctd = Containerd::start_in_netns(&cluster.node_netns());
    let n = join(&cluster, &ctd, &[]);
    n.write(
        "web.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: default\nspec:\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [\"sleep\", \"3600\"]\n",
    );
    wait_node_ready(&cluster, &n);
    let mirror = cluster.wait_object(
        &["pod", "-n", "default", &format!("web-{NODE}")],
        "the mirror pod Running",
        LONG,
        |p| p["status"]["phase"] == "Running",
    );
    assert!(
        mirror["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string(),
        "{mirror:#}"
    );
    assert_eq!(
        mirror["spec"]["priorityClassName"], "everyday",
        "{mirror:#}"
    );
    assert_eq!(mirror["spec"]["priority"], 1000, "{mirror:#}");
    assert_eq!(
        mirror["metadata"]["ownerReferences"][0]["kind"], "Node",
        "{mirror:#}"
    );
}

/// The IDs of the containers of the pod named `pod_name` (a static pod's is `NAME-NODE`) on this node's containerd.
fn container_ids(ctd: &Containerd, pod_name: &str) -> Vec<String> {
    use nanolet::cri::Runtime;
    let rt = ctd.runtime();
    let sandboxes = rt.list_pod_sandboxes().unwrap_or_default();
    let ids: Vec<String> = sandboxes
        .iter()
        .filter(|s| s.name == pod_name)
        .map(|s| s.id.clone())
        .collect();
    let mut out: Vec<String> = rt
        .list_containers()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| ids.contains(&c.sandbox_id))
        .map(|c| c.id)
        .collect();
    out.sort();
    out
}

/// A partition longer than the node-monitor grace period: the nodelifecycle controller sets
/// the Node's conditions to Unknown ("Kubelet stopped posting node status.") and every pod on
/// it Ready=False (`MarkPodsNotReady`); nanolet's containers keep running. When the link
/// returns nanolet puts both right within seconds, as the kubelet does: its status manager
/// compares with the API's copy (`needsReconcile`), its node status update reads the Node
/// back (`tryUpdateNodeStatus`), so neither waits for a local change or the report
/// frequency. No container restarts.
#[test]
fn a_partition_longer_than_the_grace_period_is_undone_within_seconds_when_the_link_returns() {
    let cluster = Cluster::up_with(&[("NODE_MONITOR_GRACE_PERIOD", "20s")]);
    let ctd = Containerd::start_in_netns(&cluster.node_netns());
    let n = join(&cluster, &ctd, &[]);
    n.write(
        "web.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: default\nspec:\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [\"sleep\", \"3600\"]\n",
    );
    wait_node_ready(&cluster, &n);
    let mirror = format!("web-{NODE}");
    cluster.wait_object(
        &["pod", "-n", "default", &mirror],
        "the mirror pod Ready",
        LONG,
        ready,
    );
    let before = container_ids(&ctd, &mirror);
    assert_eq!(before.len(), 1, "one container: {before:?}");

    cluster.set_node_link(false);
    let unknown = cluster.wait_object(&["node", NODE], "the Node's Ready Unknown", LONG, |n| {
        Cluster::condition(n, "Ready").as_deref() == Some("Unknown")
    });
    let cond = unknown["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready").cloned())
        .unwrap_or_default();
    assert_eq!(cond["reason"], "NodeStatusUnknown", "{cond:#}");
    cluster.wait_object(
        &["pod", "-n", "default", &mirror],
        "the pod Ready=False (MarkPodsNotReady)",
        LONG,
        |p| Cluster::condition(p, "Ready").as_deref() == Some("False"),
    );

    cluster.set_node_link(true);
    let back = std::time::Instant::now();
    // nodeStatusUpdateFrequency (10 s) plus a reconnect; well below nodeStatusReportFrequency.
    let within = Duration::from_secs(45);
    cluster.wait_object(&["node", NODE], "the Node Ready again", within, ready);
    cluster.wait_object(
        &["pod", "-n", "default", &mirror],
        "the pod Ready again",
        within,
        ready,
    );
    eprintln!(
        "node and pod Ready {:?} after the link returned",
        back.elapsed()
    );
    assert_eq!(
        container_ids(&ctd, &mirror),
        before,
        "no container restarted"
    );
    assert!(
        n.pod("web").is_some(),
        "the static pod is still listed locally"
    );
}

/// `kubectl cordon` and `kubectl drain`: the node becomes unschedulable, drain evicts the API
/// pods through the Eviction API (pods/eviction) and nanolet stops them, while the static pod
/// (drain skips mirror pods) keeps running.
#[test]
fn cordon_and_drain_evict_api_pods_and_leave_static_pods() {
    let cluster = Cluster::up();
    let ctd = Containerd::start_in_netns(&cluster.node_netns());
    let n = join(&cluster, &ctd, &[]);
    n.write(
        "web.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: default\nspec:\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [\"sleep\", \"3600\"]\n",
    );
    wait_node_ready(&cluster, &n);
    cluster
        .apply(
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - {name: c, image: "localhost/busybox:1.36", command: ["sleep", "3600"]}
"#,
        )
        .expect("Deployment");
    let pod = wait_running(&cluster, "default", "app=app", &n);
    let pod_name = name(&pod);
    let cri_name = pod_name.clone();
    assert_eq!(container_ids(&ctd, &cri_name).len(), 1);

    cluster.kubectl(&["cordon", NODE]).expect("kubectl cordon");
    let node = cluster.get_json(&["node", NODE]).expect("node");
    assert_eq!(node["spec"]["unschedulable"], true, "{node:#}");
    let out = cluster
        .kubectl(&["drain", NODE, "--ignore-daemonsets", "--timeout=120s"])
        .unwrap_or_else(|e| panic!("kubectl drain: {e}\nnanolet log:\n{}", n.log_tail()));
    assert!(
        out.contains(&format!("evicting pod default/{pod_name}")),
        "{out}"
    );
    assert!(out.contains("drained"), "{out}");
    // Gone from the API (nanolet confirmed the deletion) and from the runtime.
    assert!(
        wait_for(Duration::from_secs(60), || cluster
            .get_json(&["pod", "-n", "default", &pod_name])
            .is_none()
            .then_some(()))
        .is_some(),
        "the evicted pod is still in the API"
    );
    assert!(
        wait_for(Duration::from_secs(60), || container_ids(&ctd, &cri_name)
            .is_empty()
            .then_some(()))
        .is_some(),
        "the evicted pod's container still runs"
    );
    // The replacement cannot be scheduled on the cordoned node.
    let pending = cluster.wait_object(
        &["pods", "-n", "default", "-l", "app=app"],
        "the replacement Pending",
        LONG,
        |l| {
            l["items"].as_array().is_some_and(|items| {
                items
                    .iter()
                    .any(|p| p["status"]["phase"] == "Pending" && p["spec"]["nodeName"].is_null())
            })
        },
    );
    assert!(pending["items"].is_array());
    // The static pod and its mirror are untouched.
    assert_eq!(
        container_ids(&ctd, &format!("web-{NODE}")).len(),
        1,
        "the static pod runs on"
    );
    cluster.wait_object(
        &["pod", "-n", "default", &format!("web-{NODE}")],
        "the mirror pod",
        LONG,
        ready,
    );
}

/// The certificate's (notBefore, notAfter) as Unix seconds, through `openssl x509`.
fn cert_validity(pem_path: &std::path::Path) -> (i64, i64) {
    let out = std::process::Command::new("openssl")
        .args([
            "x509",
            "-noout",
            "-startdate",
            "-enddate",
            "-dateopt",
            "iso_8601",
            "-in",
        ])
        .arg(pem_path)
        .output()
        .expect("openssl x509");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let when = |key: &str| {
        let v = text
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {text}"));
        let out = std::process::Command::new("date")
            .args(["-u", "+%s", "-d", v.trim()])
            .output()
            .expect("date");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<i64>()
            .unwrap_or_else(|_| panic!("date of {v}"))
    };
    (when("notBefore="), when("notAfter="))
}

/// Through the real API server, which always speaks SPDY to the kubelet port (kubectl speaks
/// WebSocket to it and it translates): `kubectl logs -f`, `kubectl exec -i` (stdin, stdout and stderr apart, the
/// exit code), `exec -it` on a pty with resize, `attach`, `port-forward` (bytes both ways) and
/// `get --raw .../nodes/N/proxy/stats/summary`; the serving certificate comes from a
/// kubelet-serving CSR that only `kubectl certificate approve` lets through (the controller
/// manager never auto-approves that signer). With the real signer issuing short-lived client
/// certificates, nanolet rotates before expiry and keeps its pods.
#[test]
fn streams_stats_serving_certificate_and_rotation_through_the_real_api_server() {
    use std::io::Write;
    use std::process::Stdio;
    let cluster = Cluster::up_with(&[("CLUSTER_SIGNING_DURATION", "90s")]);
    let ctd = Containerd::start_in_netns(&cluster.node_netns());
    let n = join(
        &cluster,
        &ctd,
        &["--rotate-certificates", "--rotate-server-certificates"],
    );
    wait_node_ready(&cluster, &n);
    // The serving CSR: from the node itself, pending until an administrator approves it.
    let serving = wait_for(LONG, || {
        cluster.get_json(&["csr"]).and_then(|l| {
            l["items"]
                .as_array()?
                .iter()
                .find(|c| c["spec"]["signerName"] == "kubernetes.io/kubelet-serving")
                .cloned()
        })
    })
    .unwrap_or_else(|| panic!("no kubelet-serving CSR\n{}", n.log_tail()));
    assert_eq!(
        serving["spec"]["username"],
        format!("system:node:{NODE}").as_str()
    );
    assert!(
        serving["status"]["conditions"].is_null(),
        "the controller manager does not approve kubelet-serving CSRs: {serving:#}"
    );
    cluster
        .kubectl(&["certificate", "approve", &name(&serving)])
        .expect("kubectl certificate approve");
    cluster
        .apply(
            r#"
apiVersion: v1
kind: Pod
metadata: {name: shell, namespace: default}
spec:
  nodeName: node1
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: localhost/busybox:1.36
    stdin: true
    tty: false
    command: ["sh", "-c", "echo started-shell; nc -ll -p 8080 -e sh -c 'echo hello-from-pod; cat' & while read line; do echo attached:$line; done"]
"#,
        )
        .expect("pod");
    cluster.wait_object(&["pod", "shell"], "the pod Running", LONG, |p| {
        p["status"]["phase"] == "Running"
    });
    let serving_cert = ctd.tmp().join("node/pki/kubelet-server-current.pem");
    wait_for(Duration::from_secs(60), || {
        serving_cert.exists().then_some(())
    })
    .unwrap_or_else(|| panic!("no serving certificate\n{}", n.log_tail()));

    // logs -f: the first line, then one written later (to PID 1's stdout, through exec).
    {
        use std::io::BufRead;
        let mut follow = crate::streaming::KillOnDrop(
            cluster
                .kubectl_cmd()
                .args(["logs", "-f", "shell"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("kubectl logs -f"),
        );
        let mut lines = std::io::BufReader::new(follow.0.stdout.take().expect("stdout"));
        let mut first = String::new();
        lines.read_line(&mut first).expect("first line");
        assert_eq!(first, "started-shell\n");
        cluster
            .kubectl(&[
                "exec",
                "shell",
                "--",
                "sh",
                "-c",
                "echo followed-line > /proc/1/fd/1",
            ])
            .expect("exec");
        let mut next = String::new();
        lines.read_line(&mut next).expect("followed line");
        assert_eq!(next, "followed-line\n");
    }
    // exec -i: stdin in, stdout and stderr apart, the exit code.
    crate::cluster_node::exec_i_round_trip(cluster.kubectl_cmd(), &n.log_tail());
    // exec -it on a pty, with a resize.
    let mut cmd = cluster.kubectl_cmd();
    cmd.args([
        "exec",
        "-it",
        "shell",
        "--",
        "sh",
        "-c",
        crate::streaming::TTY_SCRIPT,
    ]);
    crate::streaming::tty_session(&mut cmd, "kubectl exec -it (through kube-apiserver)");
    // attach: a line into the container's stdin comes back on its stdout.
    let mut attach = crate::streaming::KillOnDrop(
        cluster
            .kubectl_cmd()
            .args(["attach", "-i", "shell", "-c", "c"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl attach"),
    );
    let mut stdin = attach.0.stdin.take().expect("stdin");
    let mut lines = std::io::BufReader::new(attach.0.stdout.take().expect("stdout"));
    let got = wait_for(Duration::from_secs(30), || {
        stdin.write_all(b"ping\n").ok()?;
        let mut line = String::new();
        std::io::BufRead::read_line(&mut lines, &mut line).ok()?;
        line.contains("attached:ping").then_some(line)
    });
    assert!(got.is_some(), "kubectl attach: no echo\n{}", n.log_tail());
    drop(attach);
    // port-forward: the pod's greeting and a 50 KB echo.
    let mut cmd = cluster.kubectl_cmd();
    cmd.args(["port-forward", "--address=127.0.0.1", "shell", ":8080"]);
    crate::streaming::forward_and_echo(
        &mut cmd,
        "kubectl port-forward (through kube-apiserver)",
        1,
        50_000,
        &|| n.log_tail(),
    );
    // stats/summary through the node proxy.
    let summary = cluster
        .kubectl(&[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{NODE}/proxy/stats/summary"),
        ])
        .unwrap_or_else(|e| panic!("stats/summary: {e}\n{}", n.log_tail()));
    let summary: Value = serde_json::from_str(&summary).expect("summary JSON");
    assert_eq!(summary["node"]["nodeName"], NODE, "{summary:#}");
    assert!(
        summary["pods"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["podRef"]["name"] == "shell")),
        "{summary:#}"
    );

    // Rotation: the real signer's 90 s client certificate is replaced at 70-90 % of its life
    // (client-go's nextRotationDeadline), through a self-renewal CSR auto-approved for
    // system:nodes (kubeadm's `kubeadm:node-autoapprove-certificate-rotation`).
    let current = ctd.tmp().join("node/pki/kubelet-client-current.pem");
    let first = std::fs::read_link(&current).expect("client certificate symlink");
    let (not_before, not_after) = cert_validity(&current);
    eprintln!(
        "client certificate valid {not_before}..{not_after} ({} s)",
        not_after - not_before
    );
    let restarts = || {
        cluster
            .get_json(&["pod", "shell"])
            .and_then(|p| p["status"]["containerStatuses"][0]["restartCount"].as_i64())
    };
    assert_eq!(restarts(), Some(0));
    let wait = Duration::from_secs((not_after - not_before).max(0) as u64 + 30);
    wait_for(wait, || {
        (std::fs::read_link(&current).ok()? != first).then_some(())
    })
    .unwrap_or_else(|| panic!("no rotation within {wait:?}\n{}", n.log_tail()));
    let renewal = wait_for(Duration::from_secs(10), || {
        cluster.get_json(&["csr"]).and_then(|l| {
            l["items"]
                .as_array()?
                .iter()
                .find(|c| {
                    c["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
                        && c["spec"]["username"] == format!("system:node:{NODE}").as_str()
                })
                .cloned()
        })
    })
    .unwrap_or_else(|| panic!("no self-renewal CSR"));
    assert_eq!(
        renewal["status"]["conditions"][0]["reason"], "AutoApproved",
        "{renewal:#}"
    );
    // Past the first certificate's end the node still heartbeats with the new one.
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0)
    };
    while now() < not_after + 2 {
        std::thread::sleep(Duration::from_millis(500));
    }
    let renew_time = || {
        cluster
            .get_json(&["lease", "-n", "kube-node-lease", NODE])
            .map(|l| l["spec"]["renewTime"].clone())
    };
    let before = renew_time();
    wait_for(Duration::from_secs(40), || {
        (renew_time() != before).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "Lease not renewed after the first certificate expired\n{}",
            n.log_tail()
        )
    });
    assert_eq!(restarts(), Some(0), "no pod restarted by the rotation");
}

/// kubeadm's kube-proxy add-on, as a DaemonSet on nanolet: kube-proxy of the pinned
/// Kubernetes in a locally built image (scripts/build-images.sh --kube-proxy: the binary
/// scripts/upstream built and this host's iptables), hostNetwork, privileged, its
/// ServiceAccount token (the `kubeadm:node-proxier` binding) and its ConfigMap. It programs the
/// node's iptables from the Services and EndpointSlices of the real API server (the endpoint
/// slice controller reads the Ready status nanolet reports), and a pod on nanolet reaches
/// another through the ClusterIP. `masqueradeAll`: the node's pod bridge does not pass bridged
/// traffic through iptables (no br_netfilter in a test namespace), so a reply between two pods
/// of one bridge would skip the reverse NAT.
#[test]
fn kube_proxy_as_a_daemonset_makes_a_cluster_ip_reachable_from_a_pod() {
    let cluster = Cluster::up();
    let ctd = Containerd::start_in_netns(&cluster.node_netns());
    let kube_proxy = support::runtime::upstream_path("kube-proxy").join("kube-proxy");
    let images = ctd.tmp().join("kube-proxy-image");
    let out = std::process::Command::new(support::repo_root().join("scripts/build-images.sh"))
        .arg("--kube-proxy")
        .arg(&kube_proxy)
        .arg(&images)
        .output()
        .expect("scripts/build-images.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ctd.import_image(&images.join("kube-proxy.tar"));
    let n = join(&cluster, &ctd, &[]);
    wait_node_ready(&cluster, &n);
    let apiserver = cluster.var("APISERVER");
    cluster
        .apply(&format!(
            r#"
apiVersion: v1
kind: ConfigMap
metadata: {{name: kube-proxy, namespace: kube-system}}
data:
  config.conf: |
    apiVersion: kubeproxy.config.k8s.io/v1alpha1
    kind: KubeProxyConfiguration
    clientConnection:
      kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
    mode: iptables
    iptables:
      masqueradeAll: true
    conntrack:
      maxPerCore: 0
      tcpEstablishedTimeout: 0s
      tcpCloseWaitTimeout: 0s
  kubeconfig.conf: |
    apiVersion: v1
    kind: Config
    clusters:
    - name: default
      cluster:
        certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
        server: {apiserver}
    contexts:
    - name: default
      context: {{cluster: default, namespace: default, user: default}}
    current-context: default
    users:
    - name: default
      user:
        tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: kube-proxy, namespace: kube-system, labels: {{k8s-app: kube-proxy}}}}
spec:
  selector: {{matchLabels: {{k8s-app: kube-proxy}}}}
  template:
    metadata: {{labels: {{k8s-app: kube-proxy}}}}
    spec:
      priorityClassName: system-node-critical
      serviceAccountName: kube-proxy
      hostNetwork: true
      tolerations: [{{operator: Exists}}]
      containers:
      - name: kube-proxy
        image: localhost/kube-proxy:v1.36.3
        imagePullPolicy: IfNotPresent
        command: ["/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf", "--hostname-override=$(NODE_NAME)"]
        env:
        - name: NODE_NAME
          valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}
        securityContext: {{privileged: true}}
        volumeMounts:
        - {{name: kube-proxy, mountPath: /var/lib/kube-proxy}}
        - {{name: xtables-lock, mountPath: /run/xtables.lock}}
        - {{name: lib-modules, mountPath: /lib/modules, readOnly: true}}
      volumes:
      - name: kube-proxy
        configMap: {{name: kube-proxy}}
      - name: xtables-lock
        hostPath: {{path: {lock}, type: FileOrCreate}}
      - name: lib-modules
        hostPath: {{path: /lib/modules}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: default}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: httpd
        image: localhost/busybox:1.36
        command: ["sh", "-c", "mkdir -p /www && echo hello-through-the-service > /www/index.html && exec httpd -f -p 8080 -h /www"]
        readinessProbe:
          tcpSocket: {{port: 8080}}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: default}}
spec:
  selector: {{app: web}}
  ports:
  - {{port: 80, targetPort: 8080}}
---
apiVersion: v1
kind: Pod
metadata: {{name: client, namespace: default}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {{name: c, image: "localhost/busybox:1.36", command: ["sleep", "3600"]}}
"#,
            // The host's xtables lock is the host namespace's; the node's own (a file of the
            // test) keeps kube-proxy from waiting on other tests' iptables.
            lock = ctd.tmp().join("xtables.lock").display()
        ))
        .expect("kube-proxy, web and client");
    wait_running(&cluster, "kube-system", "k8s-app=kube-proxy", &n);
    wait_running(&cluster, "default", "app=web", &n);
    cluster.wait_object(&["pod", "client"], "the client Running", LONG, |p| {
        p["status"]["phase"] == "Running"
    });
    let svc = cluster.get_json(&["service", "web"]).expect("service");
    let ip = svc["spec"]["clusterIP"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(ip.starts_with("10."), "{svc:#}");
    // busybox's nc (its static wget resolves even an address through glibc's NSS, which a
    // static binary cannot load in this image).
    let fetch = format!("printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {ip} 80");
    let body = wait_for(Duration::from_secs(120), || {
        cluster
            .kubectl(&["exec", "client", "--", "sh", "-c", &fetch])
            .ok()
            .filter(|b| b.contains("hello-through-the-service"))
    });
    assert!(
        body.is_some(),
        "the ClusterIP {ip} never answered: {:?}\nkube-proxy log: {:?}\nnanolet log:\n{}",
        cluster.kubectl(&["exec", "client", "--", "sh", "-c", &fetch]),
        cluster.kubectl(&[
            "logs",
            "-n",
            "kube-system",
            "-l",
            "k8s-app=kube-proxy",
            "--tail=30"
        ]),
        n.log_tail()
    );
}

/// The agent pod's running container in the runtime, if any.
fn running_agent(rt: &impl nanolet::cri::Runtime) -> Option<nanolet::cri::ContainerInfo> {
    rt.list_containers().ok()?.into_iter().find(|c| {
        c.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some("agent")
            && c.state == nanolet::cri::ContainerState::Running
    })
}

/// The node with the agent pod (Secret env, ConfigMap volume, bound token) Ready, its
/// objects in nanolet's offline checkpoint as `checkpointed` wants them.
fn agent_node(
    extra: &[&str],
    checkpointed: impl Fn(&str) -> bool,
) -> (Cluster, Containerd, Nanolet) {
    let cluster = Cluster::up();
    let ctd = Containerd::start_in_netns(&cluster.node_netns());
    let mut args = vec!["--sync-frequency=2s"];
    args.extend_from_slice(extra);
    let n = join(&cluster, &ctd, &args);
    wait_node_ready(&cluster, &n);
    cluster
        .apply(
            r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: agent-config, namespace: default}
data: {agent.conf: "level=1"}
---
apiVersion: v1
kind: Secret
metadata: {name: agent-secret, namespace: default}
stringData: {key: r3boot-s3cret}
---
apiVersion: v1
kind: Pod
metadata: {name: agent, namespace: default}
spec:
  nodeName: node1
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: localhost/busybox:1.36
    command: ["sleep", "3600"]
    env:
    - name: AGENT_KEY
      valueFrom: {secretKeyRef: {name: agent-secret, key: key}}
    volumeMounts:
    - {name: cfg, mountPath: /etc/agent}
  volumes:
  - name: cfg
    configMap: {name: agent-config}
"#,
        )
        .expect("agent pod");
    cluster.wait_object(&["pod", "agent"], "the pod Ready", LONG, ready);
    let checkpoint = n.dir.join("root/api-objects.json");
    wait_for(Duration::from_secs(30), || {
        let cp = std::fs::read_to_string(&checkpoint).ok()?;
        checkpointed(&cp).then_some(())
    })
    .unwrap_or_else(|| panic!("no checkpoint with the pod's objects\n{}", n.log_tail()));

    (cluster, ctd, n)
}

/// Issue 20's offline reboot against the real server: an API pod (Secret env, ConfigMap
/// volume, the bound token) is checkpointed; the node reboots while its link to the control
/// plane is cut, and nanolet starts the pod again from the checkpoint; the ConfigMap changed
/// during the outage reaches the pod's file once the link returns, with no restart, and the
/// API shows the pod Ready again.
#[test]
fn an_api_pod_starts_again_after_a_reboot_without_the_control_plane_and_reconciles() {
    let (cluster, mut ctd, mut n) = agent_node(&[], |cp| {
        cp.contains("agent-config") && cp.contains("agent-secret") && cp.contains("\"tokens\"")
    });
    cluster.set_node_link(false);
    crate::api_reboot::reboot_node(&mut n, &mut ctd);
    n.spawn();
    let rt = ctd.runtime();
    let running = || running_agent(&rt);
    let c = wait_for(Duration::from_secs(90), running)
        .unwrap_or_else(|| panic!("the pod did not start again offline\n{}", n.log_tail()));
    let env = crate::api_objects::exec(&rt, &c.id, &["sh", "-c", "echo $AGENT_KEY"]);
    assert_eq!(env.trim(), "r3boot-s3cret");
    // During the outage the ConfigMap changes (the host still reaches the control plane).
    cluster
        .kubectl(&[
            "patch",
            "configmap",
            "agent-config",
            "-p",
            r#"{"data":{"agent.conf":"level=2"}}"#,
        ])
        .expect("patch the ConfigMap");

    cluster.set_node_link(true);
    let file = wait_for(Duration::from_secs(90), || {
        let f = crate::api_objects::exec(&rt, &c.id, &["cat", "/etc/agent/agent.conf"]);
        (f.trim() == "level=2").then_some(f)
    });
    assert!(
        file.is_some(),
        "the ConfigMap's new value never reached the file\n{}",
        n.log_tail()
    );
    // The API shows the container started offline, Ready (the status written when the link
    // returned; until then it holds the one from before the reboot).
    let want = format!("containerd://{}", c.id);
    cluster.wait_object(
        &["pod", "agent"],
        "the pod Ready with the container started offline",
        LONG,
        |p| ready(p) && p["status"]["containerStatuses"][0]["containerID"] == want.as_str(),
    );
    assert_eq!(
        running().map(|r| r.id),
        Some(c.id),
        "no restart after the link returned"
    );
}

/// An API pod's life on the real server: the Service environment variables of its
/// namespace (the `kubernetes` Service the API server keeps; a Service created before the
/// pod), its events (Scheduled from the scheduler, Pulled/Created/Started from nanolet, with
/// the node as source host), its deletion with a grace period (nanolet stops it, the final
/// DELETE removes it), and the podCIDR node IPAM gives the Node reaching the runtime
/// (UpdateRuntimeConfig).
#[test]
fn an_api_pod_gets_service_variables_events_graceful_deletion_and_the_pod_cidr() {
    let cluster = Cluster::up();
    let ctd = Containerd::start_in_netns(&cluster.node_netns());
    let n = join(&cluster, &ctd, &[]);
    let node = wait_node_ready(&cluster, &n);
    // node IPAM (--allocate-node-cidrs, cluster CIDR 10.244.0.0/16) gives the Node a /24.
    let cidr = wait_for(LONG, || {
        cluster
            .get_json(&["node", NODE])
            .and_then(|n| n["spec"]["podCIDR"].as_str().map(String::from))
    })
    .unwrap_or_else(|| panic!("no podCIDR: {node:#}"));
    assert!(cidr.starts_with("10.244."), "{cidr}");
    wait_for(Duration::from_secs(60), || {
        let m = n.get("/metrics")?;
        m.lines()
            .any(|l| {
                l.starts_with(
                    "kubelet_runtime_operations_total{operation_type=\"update_runtime_config\"}",
                ) && !l.ends_with(" 0")
            })
            .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "the pod CIDR {cidr} never reached the runtime\n{}",
            n.log_tail()
        )
    });
    cluster
        .apply(
            r#"
apiVersion: v1
kind: Service
metadata: {name: backend, namespace: default}
spec:
  selector: {app: none}
  ports:
  - {name: http, port: 8080}
---
apiVersion: v1
kind: Pod
metadata: {name: life, namespace: default}
spec:
  terminationGracePeriodSeconds: 20
  containers:
  - name: c
    image: localhost/busybox:1.36
    command: ["sh", "-c", "echo KUBERNETES_SERVICE_HOST=$KUBERNETES_SERVICE_HOST; echo BACKEND_SERVICE_PORT=$BACKEND_SERVICE_PORT; trap 'echo got-term; sleep 1; exit 0' TERM; while :; do sleep 1; done"]
"#,
        )
        .expect("Service and pod");
    cluster.wait_object(&["pod", "life"], "the pod Ready", LONG, ready);
    let svc = cluster
        .get_json(&["service", "kubernetes"])
        .expect("kubernetes Service");
    let logs = wait_for(Duration::from_secs(30), || {
        cluster
            .kubectl(&["logs", "life"])
            .ok()
            .filter(|l| l.contains("BACKEND"))
    })
    .unwrap_or_default();
    assert!(
        logs.contains(&format!(
            "KUBERNETES_SERVICE_HOST={}",
            svc["spec"]["clusterIP"].as_str().unwrap_or("?")
        )),
        "{logs}"
    );
    assert!(logs.contains("BACKEND_SERVICE_PORT=8080"), "{logs}");
    let events = wait_for(Duration::from_secs(60), || {
        cluster
            .get_json(&["events", "--field-selector", "involvedObject.name=life"])
            .filter(|e| {
                let reasons: Vec<&str> = e["items"]
                    .as_array()
                    .map(|i| i.iter().filter_map(|e| e["reason"].as_str()).collect())
                    .unwrap_or_default();
                ["Scheduled", "Pulled", "Created", "Started"]
                    .iter()
                    .all(|r| reasons.contains(r))
            })
    })
    .unwrap_or_else(|| {
        panic!(
            "events: {:#}",
            cluster
                .get_json(&["events", "--field-selector", "involvedObject.name=life"])
                .unwrap_or(Value::Null)
        )
    });
    let started = events["items"]
        .as_array()
        .and_then(|i| i.iter().find(|e| e["reason"] == "Started").cloned())
        .unwrap_or_default();
    assert_eq!(started["source"]["host"], NODE, "{started:#}");
    // Graceful deletion: nanolet sends SIGTERM, the container exits 0 within the grace, and
    // nanolet's final DELETE (grace 0) removes the object.
    let start = std::time::Instant::now();
    cluster
        .kubectl(&["delete", "pod", "life", "--wait=true", "--timeout=60s"])
        .unwrap_or_else(|e| panic!("kubectl delete: {e}\n{}", n.log_tail()));
    let took = start.elapsed();
    assert!(
        cluster.get_json(&["pod", "life"]).is_none(),
        "still in the API"
    );
    assert!(
        took < Duration::from_secs(20),
        "deleted after {took:?} (the container exits within ~1 s of SIGTERM)"
    );
    let gone = wait_for(Duration::from_secs(30), || {
        container_ids(&ctd, "life").is_empty().then_some(())
    });
    assert!(gone.is_some(), "the container is still in the runtime");
}

/// Readiness gates on the real server: the pod stays Ready=False with the kubelet's reason and
/// message until a controller (here `kubectl patch --subresource=status`, with the admin's
/// rights) sets the gate's condition; nanolet's later status writes keep that condition (a
/// status patch merges conditions by type).
#[test]
fn a_readiness_gate_set_by_a_controller_makes_the_pod_ready_and_stays() {
    let cluster = Cluster::up();
    let ctd = Containerd::start_in_netns(&cluster.node_netns());
    let n = join(&cluster, &ctd, &[]);
    wait_node_ready(&cluster, &n);
    cluster
        .apply(
            r#"
apiVersion: v1
kind: Pod
metadata: {name: gated, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  readinessGates:
  - conditionType: example.com/lb-ready
  containers:
  - {name: c, image: "localhost/busybox:1.36", command: ["sleep", "3600"]}
"#,
        )
        .expect("pod");
    let cond = |p: &Value, t: &str| {
        p["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == t).cloned())
            .unwrap_or_default()
    };
    let pod = cluster.wait_object(&["pod", "gated"], "ReadinessGatesNotReady", LONG, |p| {
        cond(p, "Ready")["reason"] == "ReadinessGatesNotReady"
    });
    assert_eq!(cond(&pod, "Ready")["status"], "False");
    assert_eq!(
        cond(&pod, "Ready")["message"],
        "corresponding condition of pod readiness gate \"example.com/lb-ready\" does not exist."
    );
    assert_eq!(cond(&pod, "ContainersReady")["status"], "True");
    cluster
        .kubectl(&[
            "patch",
            "pod",
            "gated",
            "--subresource=status",
            "--type=strategic",
            "-p",
            r#"{"status":{"conditions":[{"type":"example.com/lb-ready","status":"True"}]}}"#,
        ])
        .expect("set the gate's condition");
    cluster.wait_object(&["pod", "gated"], "Ready", LONG, ready);
    // A restart makes nanolet write the status again; the gate's condition stays.
    let id = container_ids(&ctd, "gated").pop().expect("container");
    {
        use nanolet::cri::Runtime;
        ctd.runtime()
            .stop_container(&id, Duration::ZERO)
            .expect("stop the container");
    }
    let pod = cluster.wait_object(&["pod", "gated"], "restarted and Ready", LONG, |p| {
        p["status"]["containerStatuses"][0]["restartCount"] == 1 && ready(p)
    });
    assert_eq!(
        cond(&pod, "example.com/lb-ready")["status"],
        "True",
        "{pod:#}"
    );
}

/// `--checkpoint-secrets=false` against the real server: the checkpoint holds no Secret and no
/// token; after a reboot without the control plane the pod waits in CreateContainerConfigError
/// naming its Secret, and starts once the link returns.
#[test]
fn without_checkpointed_secrets_the_pod_waits_for_the_control_plane_after_a_reboot() {
    let (cluster, mut ctd, mut n) = agent_node(&["--checkpoint-secrets=false"], |cp| {
        cp.contains("agent-config") && !cp.contains("agent-secret")
    });
    let raw = std::fs::read_to_string(n.dir.join("root/api-objects.json")).unwrap_or_default();
    assert!(
        !raw.contains("r3boot-s3cret") && !raw.contains("cjNib290LXMzY3JldA=="),
        "{raw}"
    );
    cluster.set_node_link(false);
    crate::api_reboot::reboot_node(&mut n, &mut ctd);
    n.spawn();
    let rt = ctd.runtime();
    let agent_running = || running_agent(&rt);
    let message = wait_for(Duration::from_secs(60), || {
        let p = n
            .pods()
            .into_iter()
            .find(|p| p["metadata"]["name"] == "agent")?;
        let w = &p["status"]["containerStatuses"][0]["state"]["waiting"];
        (w["reason"] == "CreateContainerConfigError")
            .then(|| w["message"].as_str().unwrap_or_default().to_string())
    })
    .unwrap_or_else(|| panic!("the pod does not wait for its Secret\n{}", n.log_tail()));
    assert!(message.contains("agent-secret"), "{message}");
    assert!(agent_running().is_none(), "ran without its Secret");
    cluster.set_node_link(true);
    let c = wait_for(Duration::from_secs(120), agent_running)
        .unwrap_or_else(|| panic!("never started once the link returned\n{}", n.log_tail()));
    let env = crate::api_objects::exec(&rt, &c.id, &["sh", "-c", "echo $AGENT_KEY"]);
    assert_eq!(env.trim(), "r3boot-s3cret");
}

/// Issue 32 judged by the real control plane: a device plugin's resource reaches the Node the
/// API server stores (capacity and allocatable, written by the node through NodeRestriction),
/// the real scheduler places a pod asking for the devices on nanolet and leaves a second pod
/// asking for more than remain Pending with its `Insufficient <resource>` (noderesources
/// fit); the RuntimeClass the pod names comes from the API (node.k8s.io/v1, created after
/// the node joined) and its handler runs the pod; the device nodes reach the container.
#[test]
fn device_plugin_resources_and_api_runtime_classes_meet_the_real_scheduler() {
    use support::devices::{NodePlugin, SERIAL, make_device_nodes};
    use support::runtime::{ALT_HANDLER, PodCgroups};
    let cgroups = PodCgroups::default();
    let cluster = Cluster::up();
    let ctd = Containerd::start_in_netns(&cluster.node_netns());
    let dp = ctd.tmp().join("device-plugins");
    std::fs::create_dir_all(&dp).expect("mkdir");
    let devices = make_device_nodes(&ctd.tmp().join("devnodes"), 2);
    let n = join(
        &cluster,
        &ctd,
        &[&format!("--device-plugin-dir={}", dp.display())],
    );
    wait_node_ready(&cluster, &n);
    let plugin = NodePlugin::start(
        &dp.join("kubelet.sock"),
        &devices,
        &ctd.tmp().join("unhealthy"),
        &ctd.tmp().join("test-device-plugin.log"),
    );
    wait_for(LONG, || {
        cluster.get_json(&["node", NODE]).filter(|node| {
            node["status"]["capacity"][SERIAL] == "2"
                && node["status"]["allocatable"][SERIAL] == "2"
        })
    })
    .unwrap_or_else(|| {
        panic!(
            "the Node's {SERIAL}: {:#}\nnanolet:\n{}\nplugin:\n{}",
            cluster.get_json(&["node", NODE]).unwrap_or(Value::Null)["status"],
            n.log_tail(),
            plugin.log()
        )
    });
    let pod = |name: &str, count: u32| {
        format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  runtimeClassName: alt
  hostNetwork: true
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: localhost/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: [sh, -c, 'for d in /dev/ttyNANO*; do [ -c $d ] && echo x > $d && echo WROTE $d; done; sleep 600']
    resources:
      limits: {{{SERIAL}: {count}}}
"#
        )
    };
    cluster
        .apply(&format!(
            "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {{name: alt}}\nhandler: {ALT_HANDLER}\n---{}",
            pod("both", 2)
        ))
        .expect("RuntimeClass and pod");
    let both = cluster.wait_object(&["pod", "both"], "the pod Running", LONG, |p| {
        p["status"]["phase"] == "Running"
    });
    cgroups.0.borrow_mut().push(
        both["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    );
    assert_eq!(both["spec"]["nodeName"], NODE);
    let logs = wait_for(Duration::from_secs(60), || {
        cluster
            .kubectl(&["logs", "both"])
            .ok()
            .filter(|l| l.matches("WROTE").count() == 2)
    })
    .unwrap_or_else(|| panic!("both devices written\n{}\n{}", n.log_tail(), plugin.log()));
    assert!(
        logs.contains("WROTE /dev/ttyNANO0") && logs.contains("WROTE /dev/ttyNANO1"),
        "{logs}"
    );
    // The sandbox ran under the class's handler: its runc state is in that handler's root.
    let alt_root = ctd.tmp().join("runc-alt").join("k8s.io");
    let in_alt_root = std::fs::read_dir(&alt_root).map(|d| d.count()).unwrap_or(0);
    assert!(
        in_alt_root >= 2,
        "sandbox and container under {}",
        alt_root.display()
    );

    // None left: the scheduler keeps the next pod Pending, saying why.
    cluster.apply(&pod("more", 1)).expect("pod more");
    let more = cluster.wait_object(&["pod", "more"], "FailedScheduling", LONG, |p| {
        p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                c["type"] == "PodScheduled"
                    && c["status"] == "False"
                    && c["message"]
                        .as_str()
                        .is_some_and(|m| m.contains(&format!("Insufficient {SERIAL}")))
            })
    });
    assert_eq!(more["status"]["phase"], "Pending");
    assert!(more["spec"]["nodeName"].is_null(), "{more:#}");
    let _ = cluster.kubectl(&[
        "delete",
        "pod",
        "both",
        "more",
        "--wait=true",
        "--timeout=60s",
    ]);
}
