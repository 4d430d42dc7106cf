//! A real cluster node (issue 19), end to end: nanolet, a real containerd, the API-server double
//! over real TLS (tests/support/src/apiserver.rs, `start_tls`) and the real kubectl.
//!
//! - TLS bootstrap from a bootstrap-token kubeconfig (`kubeadm token create`'s shape): the node
//!   CSR (signer kubernetes.io/kube-apiserver-client-kubelet, CN system:node:node1, O
//!   system:nodes, usages digital signature + client auth), approved with `kubectl certificate
//!   approve`, the kubeconfig written (0600) with the issued certificate, the node Ready. Static
//!   pods run while the CSR waits.
//! - Through the API server's node proxy to the kubelet port (authenticated with the API server's
//!   kubelet-client certificate, authorized by SubjectAccessReview): `kubectl logs` (and `-f`),
//!   `kubectl exec -i` (stdin, exit code), `kubectl exec -it` (TTY, resize), `kubectl
//!   port-forward` (bytes both ways), `kubectl get --raw /api/v1/nodes/node1/proxy/stats/summary`.
//! - Refusals on the kubelet port: no client certificate 401, another CA's 401, a user the
//!   SubjectAccessReview denies 403 with the kubelet's text.
//! - Certificate rotation (`--rotate-certificates`) under load: a 30 s certificate is renewed at
//!   70-90 % of its life and the node keeps talking to the API server after the first
//!   certificate expired, with no pod restarted.

use nanolet_test_support as support;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::agent::Nanolet;
use support::apiserver::FakeApiServer;
use support::kubectl::Kubectl;
use support::{Containerd, wait_for};

use crate::streaming::{KillOnDrop, TTY_SCRIPT, forward_and_echo, tty_session};

const TOKEN: &str = "t0ken-for-the-test";
const NODE_PATH: &str = "/api/v1/nodes/node1";
const LEASE_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node1";
const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// The shell pod as the API server delivers it: an echo server on 8080 that also logs a line.
fn shell_pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "shell", "namespace": "default"},
        "spec": {
            "nodeName": "node1",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "c",
                "image": support::BUSYBOX_IMAGE,
                "command": ["sh", "-c", "echo started-shell; exec nc -ll -p 8080 -e sh -c 'echo hello-from-pod; cat'"],
            }],
        },
    })
}

fn api_phase(api: &FakeApiServer, path: &str) -> String {
    api.get(path)
        .and_then(|p| p["status"]["phase"].as_str().map(String::from))
        .unwrap_or_default()
}

fn node_ready(api: &FakeApiServer) -> bool {
    api.get(NODE_PATH).is_some_and(|n| {
        n["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
    })
}

/// The agent's flags for a node that bootstraps and serves the kubelet port on `port`. The
/// double dials the node's InternalIP (the default route's address: `--node-ip` refuses
/// loopback), so both ports bind every interface and the read-only port needs its token.
fn node_flags(api: &FakeApiServer, dir: &Path, port: u16, extra: &[&str]) -> Vec<String> {
    let bootstrap = dir.join("bootstrap-kubelet.conf");
    api.write_kubeconfig(&bootstrap, "abcdef.0123456789abcdef");
    let token = dir.join("read-only-token");
    std::fs::write(&token, "read-only-t0ken\n").expect("token file");
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("token mode");
    let mut flags = vec![
        format!("--kubeconfig={}", dir.join("kubelet.conf").display()),
        format!("--bootstrap-kubeconfig={}", bootstrap.display()),
        format!("--cert-dir={}", dir.join("pki").display()),
        "--address=0.0.0.0".into(),
        format!("--read-only-token-file={}", token.display()),
        format!("--port={port}"),
        format!("--client-ca-file={}", api.ca_cert_path().display()),
        "--authentication-token-webhook".into(),
        "--authorization-mode=Webhook".into(),
    ];
    flags.extend(extra.iter().map(|s| s.to_string()));
    flags
}

/// `curl` against the kubelet port: (HTTP status, body).
fn curl(port: u16, path: &str, cert: Option<&support::pki::CertFiles>) -> (u16, String) {
    let mut c = Command::new("curl");
    c.args(["-sk", "--max-time", "20", "-w", "\n%{http_code}"]);
    if let Some(cert) = cert {
        c.arg("--cert").arg(&cert.cert).arg("--key").arg(&cert.key);
    }
    let out = c
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// Bootstrap to Ready, then everything kubectl does through the API server's node proxy, then
/// the kubelet port's refusals.
#[test]
fn bootstraps_and_serves_kubectl_logs_exec_port_forward_and_stats() {
    let ctd = Containerd::start();
    let api = FakeApiServer::start_tls(TOKEN);
    api.add_bootstrap_token("abcdef", "0123456789abcdef");
    // The API server's kubelet-client identity may do anything on nodes (kubeadm's
    // system:kube-apiserver-to-kubelet role); nobody else is allowed.
    api.allow("kube-apiserver-kubelet-client", "*", "nodes", "*");
    let admin = Kubectl::with_cert(
        &api,
        &api.client_cert("kubernetes-admin", &["system:masters"]),
    );
    let port = support::agent::free_port();
    let dir = ctd.tmp().join("node");
    std::fs::create_dir_all(&dir).expect("node dir");
    let mut n = Nanolet::start(&ctd, &node_flags(&api, &dir, port, &[]));

    // Static pods do not wait for the certificate.
    n.write(
        "web.yaml",
        &crate::streaming::SHELL.replace("name: shell", "name: web"),
    );
    n.wait_phase("web", "Running");
    let csr = wait_for(Duration::from_secs(30), || api.csrs().into_iter().next())
        .unwrap_or_else(|| panic!("no CSR\n{}", n.log_tail()));
    assert!(
        api.get(NODE_PATH).is_none(),
        "no Node before the certificate"
    );
    let name = csr["metadata"]["name"]
        .as_str()
        .expect("CSR name")
        .to_string();
    assert_eq!(csr["spec"]["signerName"], CLIENT_SIGNER);
    assert_eq!(
        csr["spec"]["usages"],
        json!(["digital signature", "client auth"])
    );
    assert_eq!(csr["spec"]["username"], "system:bootstrap:abcdef");
    let pending = admin.ok(&["get", "csr"]);
    assert!(
        pending.contains(&name) && pending.contains("Pending"),
        "{pending}"
    );
    admin.ok(&["certificate", "approve", &name]);
    wait_for(Duration::from_secs(60), || node_ready(&api).then_some(()))
        .unwrap_or_else(|| panic!("node never Ready after approval\n{}", n.log_tail()));
    let kc = dir.join("kubelet.conf");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&kc)
            .expect("kubeconfig written")
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "kubeconfig 0600");
    let current = dir.join("pki/kubelet-client-current.pem");
    assert!(
        std::fs::read_link(&current).is_ok(),
        "kubelet-client-current.pem is a symlink"
    );
    let subject = Command::new("openssl")
        .args(["x509", "-noout", "-subject", "-in"])
        .arg(&current)
        .output()
        .expect("openssl");
    let subject = String::from_utf8_lossy(&subject.stdout).replace(' ', "");
    assert!(
        subject.contains("O=system:nodes") && subject.contains("CN=system:node:node1"),
        "{subject}"
    );
    let node = api.get(NODE_PATH).expect("node");
    assert_eq!(
        node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"],
        port
    );
    assert!(
        api.requests().iter().any(|r| r.method == "POST"
            && r.path == "/api/v1/nodes"
            && r.user == "system:node:node1"),
        "registered with the bootstrapped certificate"
    );

    // An API pod, then kubectl through the node proxy.
    api.create_pod("default", shell_pod());
    wait_for(Duration::from_secs(60), || {
        (api_phase(&api, "/api/v1/namespaces/default/pods/shell") == "Running").then_some(())
    })
    .unwrap_or_else(|| panic!("API pod never Running\n{}", n.log_tail()));
    let logs = wait_for(Duration::from_secs(20), || {
        let (ok, out, _) = admin.run(&["logs", "shell"]);
        (ok && out.contains("started-shell")).then_some(out)
    })
    .unwrap_or_else(|| panic!("kubectl logs: {:?}", admin.run(&["logs", "shell"])));
    assert_eq!(logs, "started-shell\n");
    kubectl_logs_follow(&admin);
    kubectl_exec(&admin);
    kubectl_port_forward(&admin);
    let summary = admin.ok(&["get", "--raw", "/api/v1/nodes/node1/proxy/stats/summary"]);
    let summary: Value = serde_json::from_str(&summary).expect("summary JSON");
    assert_eq!(summary["node"]["nodeName"], "node1");
    assert!(
        summary["pods"]
            .as_array()
            .is_some_and(|ps| ps.iter().any(|p| p["podRef"]["name"] == "shell")),
        "{summary}"
    );
    // What the kubelet asked the SubjectAccessReview: the API server's identity, nodes/proxy for
    // exec (POST -> create), nodes/stats for the summary.
    let reviews = api.access_reviews();
    let asked = |verb: &str, sub: &str| {
        reviews.iter().any(|r| {
            let a = &r["spec"]["resourceAttributes"];
            r["spec"]["user"] == "kube-apiserver-kubelet-client"
                && a["verb"] == verb
                && a["resource"] == "nodes"
                && a["subresource"] == sub
                && a["name"] == "node1"
        })
    };
    assert!(
        asked("create", "proxy"),
        "exec reviewed as create nodes/proxy: {reviews:#?}"
    );
    assert!(
        asked("get", "stats"),
        "summary reviewed as get nodes/stats: {reviews:#?}"
    );

    // Refusals on the kubelet port itself.
    assert_eq!(curl(port, "/pods", None), (401, "Unauthorized".into()));
    let other = FakeApiServer::start_tls(TOKEN);
    let foreign = other.client_cert("kube-apiserver-kubelet-client", &[]);
    assert_eq!(
        curl(port, "/pods", Some(&foreign)).0,
        401,
        "another CA's certificate"
    );
    let someone = api.client_cert("someone", &["devs"]);
    let (code, body) = curl(port, "/stats/summary", Some(&someone));
    assert_eq!(code, 403);
    assert_eq!(
        body,
        "Forbidden (user=someone, verb=get, resource=nodes, subresource(s)=[stats])\n"
    );
    let (code, _) = curl(port, "/pods", Some(&api.kubelet_client_cert()));
    assert_eq!(code, 200, "the API server's identity is allowed");
    n.stop();
}

/// `kubectl logs -f`: the pod's next lines arrive while the stream is open.
fn kubectl_logs_follow(admin: &Kubectl) {
    let mut follow = KillOnDrop(
        admin
            .cmd(&["logs", "-f", "shell"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl logs -f"),
    );
    let mut lines = BufReader::new(follow.0.stdout.take().expect("stdout"));
    let mut first = String::new();
    lines.read_line(&mut first).expect("first line");
    assert_eq!(first, "started-shell\n");
    // The echo server greets each connection from a child that logs nothing, so write a line
    // to the container's stdout through exec (PID 1's stdout is the log).
    admin.ok(&[
        "exec",
        "shell",
        "--",
        "sh",
        "-c",
        "echo followed-line > /proc/1/fd/1",
    ]);
    let mut next = String::new();
    lines.read_line(&mut next).expect("followed line");
    assert_eq!(next, "followed-line\n");
}

/// `kubectl exec -i` into the pod `shell` through `kubectl` (a kubectl command with its
/// kubeconfig, no arguments yet): stdin in, stdout and stderr apart, the exit code.
pub(crate) fn exec_i_round_trip(mut kubectl: Command, context: &str) {
    let mut child = kubectl
        .args(["exec", "-i", "shell", "--", "sh", "-c"])
        .arg("read x; echo got:$x; echo err >&2; exit 7")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl exec");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"hi\n")
        .expect("stdin");
    let out = child.wait_with_output().expect("kubectl exec");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "got:hi\n",
        "{out:?}\n{context}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("err"),
        "{out:?}"
    );
    assert_eq!(out.status.code(), Some(7), "{out:?}");
}

/// `kubectl exec -i` (stdin in, stdout and stderr apart, the exit code) and `-it` on a pty.
fn kubectl_exec(admin: &Kubectl) {
    exec_i_round_trip(admin.cmd(&[]), "");
    let mut cmd = admin.cmd(&["exec", "-it", "shell", "--", "sh", "-c", TTY_SCRIPT]);
    tty_session(&mut cmd, "kubectl exec -it (through the API server)");
}

/// `kubectl port-forward`: the pod's greeting and a 50 KB echo, through the API server and the
/// kubelet port.
fn kubectl_port_forward(admin: &Kubectl) {
    let mut cmd = admin.cmd(&["port-forward", "--address=127.0.0.1", "shell", ":8080"]);
    forward_and_echo(
        &mut cmd,
        "kubectl port-forward (through the API server)",
        1,
        50_000,
        &String::new,
    );
}

/// `--rotate-certificates` with 30 s certificates (kube-controller-manager's approver on): a
/// new certificate at 70-90 % of the first one's life (client-go's nextRotationDeadline), the
/// Lease still renewed after the first certificate expired (the client switched without a
/// restart), and the API pod never restarted.
#[test]
fn rotates_the_client_certificate_without_restarting_pods() {
    let ctd = Containerd::start();
    let api = FakeApiServer::start_tls(TOKEN);
    api.add_bootstrap_token("abcdef", "0123456789abcdef");
    api.auto_approve(CLIENT_SIGNER, true);
    api.set_cert_lifetime(Duration::from_secs(30));
    api.set_cert_backdate(Duration::ZERO);
    let dir = ctd.tmp().join("node");
    std::fs::create_dir_all(&dir).expect("node dir");
    let port = support::agent::free_port();
    let mut n = Nanolet::start(
        &ctd,
        &node_flags(
            &api,
            &dir,
            port,
            &["--rotate-certificates", "--node-status-update-frequency=2s"],
        ),
    );
    let issued = wait_for(Duration::from_secs(30), || {
        api.get(LEASE_PATH).map(|_| Instant::now())
    })
    .unwrap_or_else(|| panic!("never joined\n{}", n.log_tail()));
    api.create_pod("default", shell_pod());
    wait_for(Duration::from_secs(60), || {
        (api_phase(&api, "/api/v1/namespaces/default/pods/shell") == "Running").then_some(())
    })
    .unwrap_or_else(|| panic!("API pod never Running\n{}", n.log_tail()));
    let restarts = |api: &FakeApiServer| {
        api.get("/api/v1/namespaces/default/pods/shell")
            .and_then(|p| p["status"]["containerStatuses"][0]["restartCount"].as_i64())
    };
    assert_eq!(restarts(&api), Some(0));
    let current = dir.join("pki/kubelet-client-current.pem");
    let first = std::fs::read_link(&current).expect("symlink");
    // Rotation: a second CSR, signed; the symlink moves (at 21-27 s of a 30 s certificate).
    wait_for(Duration::from_secs(40), || {
        (api.csrs().len() >= 2 && std::fs::read_link(&current).ok()? != first).then_some(())
    })
    .unwrap_or_else(|| panic!("no rotation: {:#?}\n{}", api.csrs(), n.log_tail()));
    let rotated_after = issued.elapsed();
    assert!(
        rotated_after < Duration::from_secs(30),
        "rotated before expiry: {rotated_after:?}"
    );
    // After the first certificate expired the node still renews its Lease: the live client has
    // the new certificate (the double refuses an expired one in the TLS handshake).
    let expired = issued + Duration::from_secs(32);
    while Instant::now() < expired {
        std::thread::sleep(Duration::from_millis(500));
    }
    let renew = |api: &FakeApiServer| api.get(LEASE_PATH).map(|l| l["spec"]["renewTime"].clone());
    let before = renew(&api);
    wait_for(Duration::from_secs(30), || {
        (renew(&api) != before).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "Lease not renewed after the first certificate expired\n{}",
            n.log_tail()
        )
    });
    assert_eq!(restarts(&api), Some(0), "no pod restarted by the rotation");
    n.stop();
}

/// A denied node CSR is followed by a new one (new key), which `kubectl certificate approve`
/// lets through; with `--rotate-server-certificates` (serverTLSBootstrap) the kubelet server's
/// certificate comes from a kubernetes.io/kubelet-serving CSR (SANs: the node's name and
/// addresses), and the API server, verifying kubelets against its CA
/// (`--kubelet-certificate-authority`), reaches it. Neither the bootstrap token's secret nor a
/// key is in the log or `/configz`.
#[test]
fn denied_requests_are_retried_and_the_serving_certificate_is_bootstrapped() {
    let ctd = Containerd::start();
    let mut api = FakeApiServer::start_tls(TOKEN);
    api.add_bootstrap_token("abcdef", "0123456789abcdef");
    api.allow("kube-apiserver-kubelet-client", "*", "nodes", "*");
    let ca = api.ca_cert_path();
    api.set_kubelet_ca(Some(&ca));
    let admin = Kubectl::with_cert(
        &api,
        &api.client_cert("kubernetes-admin", &["system:masters"]),
    );
    let dir = ctd.tmp().join("node");
    std::fs::create_dir_all(&dir).expect("node dir");
    let port = support::agent::free_port();
    let mut n = Nanolet::start(
        &ctd,
        &node_flags(&api, &dir, port, &["--rotate-server-certificates"]),
    );
    let csr_of = |signer: &str, api: &FakeApiServer| {
        api.csrs()
            .into_iter()
            .filter(|c| c["spec"]["signerName"] == signer)
            .collect::<Vec<_>>()
    };
    let first = wait_for(Duration::from_secs(30), || {
        csr_of(CLIENT_SIGNER, &api).pop()
    })
    .unwrap_or_else(|| panic!("no CSR\n{}", n.log_tail()));
    let denied = first["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    admin.ok(&["certificate", "deny", &denied]);
    // client-go's back-off after a failed attempt: 2 s, doubling.
    let second = wait_for(Duration::from_secs(30), || {
        csr_of(CLIENT_SIGNER, &api)
            .into_iter()
            .find(|c| c["metadata"]["name"] != denied.as_str())
    })
    .unwrap_or_else(|| panic!("no new CSR after the denial\n{}", n.log_tail()));
    assert_ne!(
        second["spec"]["request"], first["spec"]["request"],
        "a new key"
    );
    assert!(
        n.log_tail().contains(&denied),
        "the log names the denied CSR:\n{}",
        n.log_tail()
    );
    let name = second["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    admin.ok(&["certificate", "approve", &name]);
    wait_for(Duration::from_secs(60), || node_ready(&api).then_some(()))
        .unwrap_or_else(|| panic!("node never Ready\n{}", n.log_tail()));

    // The serving CSR, sent with the node's own certificate once it has one.
    let serving = wait_for(Duration::from_secs(30), || {
        csr_of("kubernetes.io/kubelet-serving", &api).pop()
    })
    .unwrap_or_else(|| panic!("no serving CSR\n{}", n.log_tail()));
    assert_eq!(serving["spec"]["username"], "system:node:node1");
    assert_eq!(
        serving["spec"]["usages"],
        json!(["digital signature", "server auth"])
    );
    let serving_name = serving["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    api.create_pod("default", shell_pod());
    wait_for(Duration::from_secs(60), || {
        (api_phase(&api, "/api/v1/namespaces/default/pods/shell") == "Running").then_some(())
    })
    .unwrap_or_else(|| panic!("API pod never Running\n{}", n.log_tail()));
    // Not approved yet: the kubelet server has no certificate, the API server cannot reach it.
    let (ok, _, _) = admin.run(&["logs", "shell"]);
    assert!(!ok, "kubectl logs before the serving certificate exists");
    admin.ok(&["certificate", "approve", &serving_name]);
    let logs = wait_for(Duration::from_secs(30), || {
        let (ok, out, _) = admin.run(&["logs", "shell"]);
        ok.then_some(out)
    })
    .unwrap_or_else(|| {
        panic!(
            "kubectl logs with a verified serving certificate: {:?}\n{}",
            admin.run(&["logs", "shell"]),
            n.log_tail()
        )
    });
    assert_eq!(logs, "started-shell\n");
    let san = Command::new("openssl")
        .args(["x509", "-noout", "-ext", "subjectAltName", "-in"])
        .arg(dir.join("pki/kubelet-server-current.pem"))
        .output()
        .expect("openssl");
    let san = String::from_utf8_lossy(&san.stdout).into_owned();
    assert!(san.contains("DNS:node1"), "{san}");
    assert!(san.contains("IP Address:"), "{san}");

    let log = std::fs::read_to_string(&n.log).expect("log");
    let configz = n.get("/configz").expect("configz");
    for (what, text) in [("log", &log), ("/configz", &configz)] {
        assert!(
            !text.contains("0123456789abcdef"),
            "the bootstrap token's secret in the {what}"
        );
        assert!(!text.contains("PRIVATE KEY"), "a key in the {what}");
    }
    n.stop();
}
