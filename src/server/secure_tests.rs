//! The kubelet server over real TLS: certificates made by the openssl CLI, requests made by
//! curl (both Debian's), the server in-process over the status store.

use super::*;
use crate::api::{ObjectMeta, Pod};
use crate::server::auth::{AuthOptions, Reviewer, UserInfo};
use std::process::Command;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`<name>-ca.crt`) and a leaf signed by it (`<leaf>.crt`, `<leaf>.key`).
fn ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            &format!("/CN={name}-ca"),
            "-keyout",
            &format!("{name}-ca.key"),
            "-out",
            &format!("{name}-ca.crt"),
        ],
    );
}

fn leaf(dir: &Path, ca: &str, leaf: &str, subject: &str, ext: &str) {
    std::fs::write(dir.join(format!("{leaf}.ext")), ext).unwrap();
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            subject,
            "-keyout",
            &format!("{leaf}.key"),
            "-out",
            &format!("{leaf}.csr"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{leaf}.csr"),
            "-CA",
            &format!("{ca}-ca.crt"),
            "-CAkey",
            &format!("{ca}-ca.key"),
            "-set_serial",
            "4242",
            "-days",
            "1",
            "-extfile",
            &format!("{leaf}.ext"),
            "-out",
            &format!("{leaf}.crt"),
        ],
    );
}

/// The PKI of these tests: the cluster CA with a serving and a client certificate, another
/// CA with a client certificate of the same name, and a cluster certificate for servers only.
fn pki() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ca(d, "cluster");
    ca(d, "other");
    leaf(
        d,
        "cluster",
        "serving",
        "/CN=node1",
        "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
    );
    leaf(
        d,
        "cluster",
        "admin",
        "/O=system:masters/CN=admin",
        "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
    );
    leaf(
        d,
        "other",
        "stranger",
        "/O=system:masters/CN=admin",
        "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
    );
    leaf(
        d,
        "cluster",
        "server-only",
        "/CN=admin",
        "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    );
    dir
}

/// A reviewer that allows `admin` everything and nobody else anything.
struct OnlyAdmin;

impl Reviewer for OnlyAdmin {
    fn review_token(
        &self,
        _token: &str,
    ) -> Result<Option<UserInfo>, crate::server::auth::AuthError> {
        Ok(None)
    }
    fn review_access(
        &self,
        user: &UserInfo,
        _attrs: &crate::server::auth::Attributes,
    ) -> Result<bool, crate::server::auth::AuthError> {
        Ok(user.name == "admin" && user.groups.iter().any(|g| g == "system:masters"))
    }
}

fn start(dir: &Path, anonymous: bool, webhook: bool) -> (SecureServerHandle, Arc<StatusStore>) {
    let store = Arc::new(StatusStore::new(Duration::from_secs(300)));
    store.set_pod(Pod {
        api_version: "v1".into(),
        kind: "Pod".into(),
        metadata: ObjectMeta {
            name: "web-node1".into(),
            namespace: "default".into(),
            uid: "0123456789abcdef0123456789abcdef".into(),
            ..Default::default()
        },
        ..Default::default()
    });
    let auth = Auth::new(
        AuthOptions {
            node_name: "node1".into(),
            anonymous,
            token_webhook_ttl: None,
            authz_webhook_ttls: webhook
                .then_some((Duration::from_secs(300), Duration::from_secs(30))),
        },
        Some(Arc::new(OnlyAdmin)),
    );
    let options = SecureOptions {
        shared: ReadOnlyOptions::new("node1"),
        auth: Arc::new(auth),
        certificate: resolver_from_pem_files(&dir.join("serving.crt"), &dir.join("serving.key"))
            .unwrap(),
        client_ca: Some(load_client_ca(&dir.join("cluster-ca.crt")).unwrap()),
        local_admin_ca: Some(dir.join("local-ca.crt")),
        run_timeout: Duration::from_secs(10),
        system_logs: Some(dir.join("varlog")),
    };
    let h = spawn_secure("127.0.0.1:0".parse().unwrap(), store.clone(), options).unwrap();
    (h, store)
}

/// curl's status code and body; `cert` names a `<cert>.crt`/`.key` pair in `dir`.
fn curl(dir: &Path, port: u16, method: &str, path: &str, cert: Option<&str>) -> (String, String) {
    let mut c = Command::new("curl");
    c.current_dir(dir)
        .args([
            "-sS",
            "--path-as-is",
            "--max-time",
            "10",
            "--cacert",
            "cluster-ca.crt",
            "-X",
            method,
        ])
        .args(["-w", "\n%{http_code}"]);
    if let Some(name) = cert {
        c.args([
            "--cert",
            &format!("{name}.crt"),
            "--key",
            &format!("{name}.key"),
        ]);
    }
    let out = c
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.to_string(), body.to_string())
}

#[test]
fn client_certificates_authenticate_others_are_401() {
    let dir = pki();
    let d = dir.path();
    let (h, _store) = start(d, false, false);
    let port = h.local_addr().port();
    // No certificate, no anonymous auth: the kubelet's 401.
    assert_eq!(
        curl(d, port, "GET", "/pods", None),
        ("401".into(), "Unauthorized".into())
    );
    // Another CA's certificate: the handshake succeeds (requested, not required), then 401.
    assert_eq!(
        curl(d, port, "GET", "/pods", Some("stranger")),
        ("401".into(), "Unauthorized".into())
    );
    // The right CA without the client-auth usage.
    assert_eq!(curl(d, port, "GET", "/pods", Some("server-only")).0, "401");
    let (code, body) = curl(d, port, "GET", "/pods", Some("admin"));
    assert_eq!(code, "200", "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["kind"], "PodList");
    assert_eq!(v["items"][0]["metadata"]["name"], "web-node1");
    assert_eq!(
        curl(d, port, "GET", "/healthz/ping", Some("admin")),
        ("200".into(), "ok".into())
    );
    let (code, body) = curl(d, port, "GET", "/stats/summary", Some("admin"));
    assert_eq!(code, "200");
    assert!(body.contains("\"nodeName\":\"node1\""), "{body}");
    // The read-only port's rule holds here too: no writes to /pods.
    assert_eq!(curl(d, port, "POST", "/pods", Some("admin")).0, "405");
    h.stop();
}

#[test]
fn webhook_denials_are_403_with_the_kubelets_text() {
    let dir = pki();
    let d = dir.path();
    let (h, _store) = start(d, true, true);
    let port = h.local_addr().port();
    // Anonymous is authenticated, then denied by the review.
    assert_eq!(
        curl(d, port, "GET", "/stats/summary", None),
        (
            "403".into(),
            "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource(s)=[stats])\n"
                .into()
        )
    );
    assert_eq!(curl(d, port, "GET", "/metrics", Some("admin")).0, "200");
    h.stop();
}

#[test]
fn streaming_and_run_resolve_the_pod_first() {
    let dir = pki();
    let d = dir.path();
    let (h, _store) = start(d, false, false);
    let port = h.local_addr().port();
    let (code, body) = curl(
        d,
        port,
        "POST",
        "/exec/default/nope/c?command=sh",
        Some("admin"),
    );
    assert_eq!(
        (code.as_str(), body.as_str()),
        ("404", "pod does not exist")
    );
    let (code, body) = curl(
        d,
        port,
        "POST",
        "/run/default/web-node1/app?cmd=ls",
        Some("admin"),
    );
    assert_eq!(
        (code.as_str(), body.as_str()),
        ("500", "container not found (\"app\")")
    );
    assert_eq!(
        curl(d, port, "GET", "/run/default/web-node1/app", Some("admin")).0,
        "405"
    );
    // getContainerLogs' texts.
    assert_eq!(
        curl(
            d,
            port,
            "GET",
            "/containerLogs/default/nope/app",
            Some("admin")
        ),
        ("404".into(), "pod \"nope\" does not exist".into())
    );
    assert_eq!(
        curl(
            d,
            port,
            "GET",
            "/containerLogs/default/web-node1/app",
            Some("admin")
        ),
        (
            "404".into(),
            "container \"app\" not found in pod \"web-node1\"".into()
        )
    );
    h.stop();
}

/// At the cap, a new connection closes the oldest one still waiting for its request.
#[test]
fn slots_close_the_oldest_waiting_connection_at_the_cap() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let slots = Slots::default();
    let mut clients = Vec::new();
    let mut taken = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        clients.push(TcpStream::connect(addr).unwrap());
        let (server_side, _) = listener.accept().unwrap();
        taken.push(slots.take(&server_side).unwrap());
    }
    // The first one is busy (answering), so the second is the oldest waiting.
    taken[0].waiting.store(false, Ordering::SeqCst);
    clients.push(TcpStream::connect(addr).unwrap());
    let (extra, _) = listener.accept().unwrap();
    assert!(slots.take(&extra).is_some());
    let mut byte = [0u8; 1];
    clients[1]
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(
        clients[1].read(&mut byte).unwrap(),
        0,
        "closed by the server"
    );
    assert_eq!(slots.open.lock().unwrap().len(), MAX_CONNECTIONS);
    // With every connection busy a new one is refused.
    for s in &taken {
        s.waiting.store(false, Ordering::SeqCst);
    }
    let open = slots.open.lock().unwrap().len();
    for (_, _, _, w) in slots.open.lock().unwrap().iter() {
        w.store(false, Ordering::SeqCst);
    }
    assert_eq!(open, MAX_CONNECTIONS);
    clients.push(TcpStream::connect(addr).unwrap());
    let (refused, _) = listener.accept().unwrap();
    assert!(slots.take(&refused).is_none());
}

/// `/logs/`: the node's log directory (a Go file server's listing and files), no way out of it.
#[test]
fn node_logs_list_and_serve_files_inside_the_directory_only() {
    let dir = pki();
    let d = dir.path();
    let logs = d.join("varlog");
    std::fs::create_dir_all(logs.join("pods")).unwrap();
    std::fs::write(logs.join("syslog"), "line one\nline two\n").unwrap();
    std::os::unix::fs::symlink(d.join("cluster-ca.key"), logs.join("escape")).unwrap();
    let (h, _store) = start(d, false, false);
    let port = h.local_addr().port();
    let (code, body) = curl(d, port, "GET", "/logs/", Some("admin"));
    assert_eq!(code, "200");
    assert_eq!(
        body,
        "<pre>\n<a href=\"escape\">escape</a>\n<a href=\"pods/\">pods/</a>\n<a href=\"syslog\">syslog</a>\n</pre>\n"
    );
    assert_eq!(
        curl(d, port, "GET", "/logs/syslog", Some("admin")),
        ("200".into(), "line one\nline two\n".into())
    );
    assert_eq!(
        curl(d, port, "GET", "/logs/../cluster-ca.key", Some("admin")).0,
        "400"
    );
    assert_eq!(
        curl(d, port, "GET", "/logs/%2e%2e/cluster-ca.key", Some("admin")).0,
        "400"
    );
    assert_eq!(curl(d, port, "GET", "/logs/escape", Some("admin")).0, "404");
    assert_eq!(curl(d, port, "GET", "/logs/nope", Some("admin")).0, "404");
    assert_eq!(curl(d, port, "GET", "/logs/syslog", None).0, "401");
    h.stop();
}

#[test]
fn legacy_tail_parameter() {
    assert_eq!(legacy_tail("tail=5&follow=true"), "tailLines=5&follow=true");
    assert_eq!(legacy_tail("tail=all&timestamps=true"), "timestamps=true");
    assert_eq!(legacy_tail(""), "");
}

/// The device's local client CA (`nanolet admin-kubeconfig`): made while the server runs (read
/// when it appears), its users are allowed even where the webhook would deny them; the same
/// certificate is 401 before the CA exists, and a local CA certificate without clientAuth is
/// not an administrator.
#[test]
fn local_administrators_are_allowed_without_the_authorizer() {
    let dir = pki();
    let d = dir.path();
    let (h, _store) = start(d, false, true);
    let port = h.local_addr().port();
    ca(d, "local");
    let client = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n";
    leaf(d, "local", "ops", "/O=system:masters/CN=ops", client);
    leaf(
        d,
        "local",
        "ops-server",
        "/O=system:masters/CN=ops",
        "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    );
    // The CA file is not there yet (openssl wrote local-ca.crt, the server looks for it): 401.
    std::fs::rename(d.join("local-ca.crt"), d.join("local-ca.pending")).unwrap();
    assert_eq!(curl(d, port, "GET", "/pods", Some("ops")).0, "401");
    std::fs::rename(d.join("local-ca.pending"), d.join("local-ca.crt")).unwrap();
    // The webhook (OnlyAdmin) would deny "ops"; a local administrator is not asked about.
    let (code, body) = curl(d, port, "GET", "/pods", Some("ops"));
    assert_eq!(code, "200", "{body}");
    assert_eq!(curl(d, port, "GET", "/pods", Some("ops-server")).0, "401");
    // Another CA's certificate is still 401.
    assert_eq!(curl(d, port, "GET", "/pods", Some("stranger")).0, "401");
    h.stop();
}

/// kubectl's pod subresources on the secure port: the API server's answers before a stream
/// (`validateContainer`, `getPod`) as `Status` objects.
#[test]
fn api_pod_subresources_default_the_container_as_the_api_server() {
    let dir = pki();
    let d = dir.path();
    let (h, store) = start(d, false, false);
    let port = h.local_addr().port();
    let base = "/api/v1/namespaces/default/pods";
    let (code, body) = curl(
        d,
        port,
        "POST",
        &format!("{base}/nope/exec?command=sh&stdout=true"),
        Some("admin"),
    );
    assert_eq!(code, "404", "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["kind"], "Status");
    assert_eq!(v["message"], "pods \"nope\" not found");
    // web-node1 has no containers in its spec.
    let (code, body) = curl(
        d,
        port,
        "POST",
        &format!("{base}/web-node1/exec?command=sh&stdout=true"),
        Some("admin"),
    );
    assert_eq!(code, "400", "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["reason"], "BadRequest");
    assert_eq!(
        v["message"],
        "a container name must be specified for pod web-node1"
    );
    let mut pod = store.pods().into_iter().next().unwrap();
    for name in ["a", "b"] {
        pod.spec.containers.push(crate::api::Container {
            name: name.into(),
            ..Default::default()
        });
    }
    store.set_pod(pod);
    let (code, body) = curl(
        d,
        port,
        "GET",
        &format!("{base}/web-node1/attach?stdout=true"),
        Some("admin"),
    );
    assert_eq!(code, "400", "{body}");
    assert!(
        body.contains("a container name must be specified for pod web-node1, choose one of: [a b]"),
        "{body}"
    );
    // A named container passes to the kubelet's resolution (not running: no status).
    let (code, body) = curl(
        d,
        port,
        "POST",
        &format!("{base}/web-node1/exec?container=b&command=sh&stdout=true"),
        Some("admin"),
    );
    assert_eq!(code, "404", "{body}");
    assert!(body.contains("container not found"), "{body}");
    assert_eq!(
        curl(
            d,
            port,
            "PUT",
            &format!("{base}/web-node1/exec"),
            Some("admin")
        )
        .0,
        "405"
    );
    assert_eq!(
        curl(d, port, "POST", &format!("{base}/web-node1/exec"), None).0,
        "401"
    );
    h.stop();
}

fn pod_with(init: &[&str], containers: &[&str]) -> Pod {
    let c = |n: &&str| crate::api::Container {
        name: n.to_string(),
        ..Default::default()
    };
    let mut p = Pod {
        metadata: ObjectMeta {
            name: "p".into(),
            ..Default::default()
        },
        ..Default::default()
    };
    p.spec.init_containers = init.iter().map(c).collect();
    p.spec.containers = containers.iter().map(c).collect();
    p
}

/// kube-apiserver's validateContainer (pkg/registry/core/pod/strategy.go).
#[test]
fn container_defaulting_follows_validate_container() {
    assert_eq!(
        default_container(&pod_with(&["init"], &["app"]), ""),
        Ok("app".into())
    );
    assert_eq!(
        default_container(&pod_with(&[], &[]), ""),
        Err("a container name must be specified for pod p".into())
    );
    assert_eq!(
        default_container(&pod_with(&[], &["a", "b"]), ""),
        Err("a container name must be specified for pod p, choose one of: [a b]".into())
    );
    // VisitContainers: init containers first.
    assert_eq!(
        default_container(&pod_with(&["i"], &["a", "b"]), ""),
        Err("a container name must be specified for pod p, choose one of: [i a b]".into())
    );
    assert_eq!(
        default_container(&pod_with(&["i"], &["a", "b"]), "i"),
        Ok("i".into())
    );
    assert_eq!(
        default_container(&pod_with(&[], &["a", "b"]), "b"),
        Ok("b".into())
    );
    assert_eq!(
        default_container(&pod_with(&[], &["a"]), "x"),
        Err("container x is not valid for pod p".into())
    );
}

/// kube-apiserver's streamParams: PodExecOptions names to the kubelet's, values "1".
#[test]
fn api_options_map_to_the_kubelets_query() {
    let pairs = query_pairs(
        "command=sh&command=-c&command=echo+a%26b&container=c&stdin=true&stdout=1&stderr=false&tty=True",
    );
    assert_eq!(
        kubelet_stream_query("exec", &pairs),
        "input=1&output=1&tty=1&command=sh&command=-c&command=echo+a%26b"
    );
    let back = query_pairs(&kubelet_stream_query("exec", &pairs));
    assert_eq!(
        crate::server::stream::parse_command(&kubelet_stream_query("exec", &pairs)),
        ["sh", "-c", "echo a&b"]
    );
    assert!(back.iter().all(|(k, _)| k != "container" && k != "stdin"));
    // Attach has no command.
    assert_eq!(
        kubelet_stream_query("attach", &pairs),
        "input=1&output=1&tty=1"
    );
    // Port-forward: `ports` joined into one `port` (strconv, strings.Join with ",").
    let pf = query_pairs("ports=8080&ports=9090");
    assert_eq!(kubelet_stream_query("portForward", &pf), "port=8080%2C9090");
    assert_eq!(
        crate::server::stream::parse_ports(&kubelet_stream_query("portForward", &pf), true)
            .unwrap(),
        [8080, 9090]
    );
    assert_eq!(kubelet_stream_query("portForward", &[]), "");
}
