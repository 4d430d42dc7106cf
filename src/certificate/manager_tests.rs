//! The certificate manager against a small CSR API stub (tiny_http, plain HTTP) that signs with
//! the real openssl CLI: bootstrap approved, denied then approved, never approved, API down;
//! rotation and the live credential swap; the rotation deadline's bounds; expired certificates.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::certificate::pem;
use crate::certificate::testutil::{openssl, openssl_self_signed, write};
use crate::certificate::x509::Template;

/// What the stub does with each new CSR.
#[derive(Clone, Copy, PartialEq)]
enum Policy {
    Approve,
    /// Deny the first CSR, approve later ones.
    DenyFirst,
    Never,
}

#[derive(Default)]
struct Seen {
    posts: Vec<Value>,
    authorization: Vec<String>,
    gets: usize,
}

struct Stub {
    url: String,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

/// Signs a CSR PEM with the stub's openssl CA for `days`.
fn sign(dir: &std::path::Path, csr_pem: &[u8], n: usize) -> Vec<u8> {
    let csr = write(dir, &format!("r{n}.csr"), &String::from_utf8_lossy(csr_pem));
    let out = dir.join(format!("c{n}.crt"));
    openssl(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        dir.join("ca.crt").to_str().unwrap(),
        "-CAkey",
        dir.join("ca.key").to_str().unwrap(),
        "-set_serial",
        &format!("{}", 100 + n),
        "-days",
        "1",
        "-copy_extensions",
        "copy",
        "-out",
        out.to_str().unwrap(),
    ]);
    std::fs::read(out).unwrap()
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code, "message": reason})
}

impl Stub {
    fn start(policy: Policy) -> Stub {
        let dir = tempfile::tempdir().unwrap();
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            dir.path().join("ca.key").to_str().unwrap(),
            "-out",
            dir.path().join("ca.crt").to_str().unwrap(),
            "-days",
            "2",
            "-subj",
            "/CN=stub-ca",
        ]);
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let url = format!("http://{}", server.server_addr().to_ip().unwrap());
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2, ca_dir) = (seen.clone(), stop.clone(), dir.path().to_path_buf());
        let thread = std::thread::spawn(move || {
            let mut csrs: HashMap<String, Value> = HashMap::new();
            let mut n = 0;
            while !stop2.load(Ordering::SeqCst) {
                let Ok(Some(mut req)) = server.recv_timeout(Duration::from_millis(20)) else {
                    continue;
                };
                let auth = req
                    .headers()
                    .iter()
                    .find(|h| h.field.equiv("Authorization"))
                    .map(|h| h.value.to_string())
                    .unwrap_or_default();
                let mut body = String::new();
                let _ = req.as_reader().read_to_string(&mut body);
                let path = req.url().to_string();
                let (code, reply) = match req.method() {
                    tiny_http::Method::Post if path == CSR_PATH => {
                        let mut csr: Value = serde_json::from_str(&body).unwrap();
                        let mut s = seen2.lock().unwrap();
                        s.posts.push(csr.clone());
                        s.authorization.push(auth);
                        drop(s);
                        let name = match csr["metadata"]["name"].as_str() {
                            Some(n) => n.to_string(),
                            None => format!("csr-{n}"),
                        };
                        if let std::collections::hash_map::Entry::Vacant(slot) =
                            csrs.entry(name.clone())
                        {
                            n += 1;
                            csr["metadata"]["name"] = name.clone().into();
                            csr["metadata"]["uid"] = format!("uid-{n}").into();
                            let deny = policy == Policy::DenyFirst && n == 1;
                            if policy != Policy::Never && !deny {
                                let req_pem = crate::util::base64::decode(
                                    csr["spec"]["request"].as_str().unwrap(),
                                )
                                .unwrap();
                                let cert = sign(&ca_dir, &req_pem, n);
                                csr["status"] = json!({
                                    "conditions": [{"type": "Approved", "status": "True", "reason": "AutoApproved"}],
                                    "certificate": crate::util::base64::encode(&cert),
                                });
                            } else if deny {
                                csr["status"] = json!({"conditions": [{"type": "Denied", "status": "True", "reason": "TestDenied", "message": "not this one"}]});
                            }
                            slot.insert(csr.clone());
                            (201, csr)
                        } else {
                            (409, status(409, "AlreadyExists"))
                        }
                    }
                    tiny_http::Method::Get => {
                        seen2.lock().unwrap().gets += 1;
                        let name = path.rsplit('/').next().unwrap_or_default();
                        match csrs.get(name) {
                            Some(c) => (200, c.clone()),
                            None => (404, status(404, "NotFound")),
                        }
                    }
                    _ => (405, status(405, "MethodNotAllowed")),
                };
                let _ = req.respond(
                    tiny_http::Response::from_string(reply.to_string()).with_status_code(code),
                );
            }
        });
        Stub {
            url,
            seen,
            stop,
            thread: Some(thread),
            _dir: dir,
        }
    }
}

fn fast() -> Timing {
    Timing {
        poll: Duration::from_millis(20),
        wait_timeout: Duration::from_secs(10),
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(100),
    }
}

fn bootstrap_kubeconfig(dir: &std::path::Path, server: &str) -> PathBuf {
    let p = dir.join("bootstrap-kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\nusers:\n- name: u\n  user:\n    token: abcdef.0123456789abcdef\n",
        crate::util::base64::encode(b"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    );
    std::fs::write(&p, text).unwrap();
    p
}

fn bootstrap_for(dir: &std::path::Path, server: &str) -> Bootstrap {
    Bootstrap {
        kubeconfig: dir.join("etc/kubelet.conf"),
        bootstrap_kubeconfig: bootstrap_kubeconfig(dir, server),
        cert_dir: dir.join("pki"),
        node_name: "edge-1".into(),
        timing: fast(),
    }
}

fn never() -> (std::sync::mpsc::Sender<()>, Receiver<()>) {
    std::sync::mpsc::channel()
}

/// Polls `cond` for up to 10 s.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn bootstrap_requests_the_node_client_certificate_and_writes_the_kubeconfig() {
    // upstream LoadClientCert + writeKubeconfigFromBootstrapping.
    let stub = Stub::start(Policy::Approve);
    let d = tempfile::tempdir().unwrap();
    let b = bootstrap_for(d.path(), &stub.url);
    assert!(
        !b.kubeconfig_still_valid(SystemTime::now()),
        "no kubeconfig yet"
    );
    let (_tx, stop) = never();
    let kc = b.run(&stop).expect("bootstrapped");
    let seen = stub.seen.lock().unwrap();
    let post = &seen.posts[0];
    assert_eq!(post["spec"]["signerName"], CLIENT_SIGNER);
    assert_eq!(
        post["spec"]["usages"],
        json!(["digital signature", "client auth"])
    );
    let name = post["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("node-csr-"), "{name}");
    assert_eq!(seen.authorization[0], "Bearer abcdef.0123456789abcdef");
    // The issued certificate is the node's, stored as the kubelet stores it.
    let current = d.path().join("pki/kubelet-client-current.pem");
    let pair = Pair::load(&current, &current).unwrap();
    assert_eq!(pair.leaf.common_name, "system:node:edge-1");
    assert_eq!(pair.leaf.organizations, ["system:nodes"]);
    assert!(!d.path().join("pki").join(BOOTSTRAP_KEY_FILE).exists());
    // The kubeconfig: 0600, the bootstrap server and CA, both client paths the current pem.
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(&b.kubeconfig).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let text = std::fs::read_to_string(&b.kubeconfig).unwrap();
    assert!(
        text.contains(&format!("client-certificate: \"{}\"", current.display())),
        "{text}"
    );
    assert!(
        text.contains(&format!("client-key: \"{}\"", current.display())),
        "{text}"
    );
    assert!(
        !text.contains("abcdef.0123456789abcdef"),
        "the bootstrap token is not copied"
    );
    assert_eq!(kc.server, stub.url);
    assert!(kc.ca_pem.is_some() && kc.token.is_none());
    assert!(b.kubeconfig_still_valid(SystemTime::now()));
    // Once it expires, bootstrap is needed again (isClientConfigStillValid).
    assert!(!b.kubeconfig_still_valid(SystemTime::now() + Duration::from_secs(3 * 86400)));
}

#[test]
fn a_denied_csr_is_an_error_naming_it_and_the_retry_with_a_new_key_is_approved() {
    let stub = Stub::start(Policy::DenyFirst);
    let d = tempfile::tempdir().unwrap();
    let b = bootstrap_for(d.path(), &stub.url);
    let (_tx, stop) = never();
    let e = b.attempt(&stop).unwrap_err();
    let first = stub.seen.lock().unwrap().posts[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let text = e.to_string();
    assert!(
        text.contains(&first)
            && text.contains("is denied, reason: TestDenied, message: not this one")
            && text.contains("TestDenied"),
        "{text}"
    );
    assert!(!b.kubeconfig.exists());
    b.run(&stop).expect("approved on retry");
    let seen = stub.seen.lock().unwrap();
    assert_eq!(seen.posts.len(), 2);
    assert_ne!(
        seen.posts[1]["metadata"]["name"].as_str().unwrap(),
        first,
        "a new key, a new name"
    );
}

#[test]
fn a_never_approved_csr_is_retried_with_the_same_key_until_stopped() {
    let stub = Stub::start(Policy::Never);
    let d = tempfile::tempdir().unwrap();
    let mut b = bootstrap_for(d.path(), &stub.url);
    b.timing.wait_timeout = Duration::from_millis(100);
    let (tx, stop) = never();
    let runner = std::thread::spawn(move || b.run(&stop));
    // Two submissions: the second finds the first CSR (same key, same digested name).
    eventually("a second submission", || {
        stub.seen.lock().unwrap().posts.len() >= 2
    });
    tx.send(()).unwrap();
    assert!(runner.join().unwrap().is_none(), "stopped, no panic");
    let seen = stub.seen.lock().unwrap();
    assert_eq!(
        seen.posts[0]["metadata"]["name"],
        seen.posts[1]["metadata"]["name"]
    );
    assert!(seen.gets >= 2);
    assert!(
        d.path().join("pki").join(BOOTSTRAP_KEY_FILE).exists(),
        "kept for the next start"
    );
    assert!(!d.path().join("etc/kubelet.conf").exists());
}

#[test]
fn an_api_server_that_is_down_keeps_the_key_and_retries_until_stopped() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let d = tempfile::tempdir().unwrap();
    let b = bootstrap_for(d.path(), &format!("http://127.0.0.1:{port}"));
    let (_tx, stop) = never();
    let e = b.attempt(&stop).unwrap_err().to_string();
    assert!(
        e.contains("POST") && e.contains("certificatesigningrequests"),
        "{e}"
    );
    assert!(!e.contains("abcdef"), "no token in errors: {e}");
    let key_path = d.path().join("pki").join(BOOTSTRAP_KEY_FILE);
    let key = std::fs::read(&key_path).unwrap();
    b.attempt(&stop).unwrap_err();
    assert_eq!(
        std::fs::read(&key_path).unwrap(),
        key,
        "the same key across attempts"
    );
    let (tx, stop) = never();
    let runner = std::thread::spawn(move || b.run(&stop));
    std::thread::sleep(Duration::from_millis(100)); // let it retry a few times (not a sync)
    tx.send(()).unwrap();
    assert!(runner.join().unwrap().is_none());
}

#[test]
fn rotation_stores_a_new_pair_and_swaps_the_clients_credentials_live() {
    let stub = Stub::start(Policy::Approve);
    let d = tempfile::tempdir().unwrap();
    let b = bootstrap_for(d.path(), &stub.url);
    let (_tx, stop) = never();
    let kc = b.run(&stop).unwrap();
    let client = Arc::new(ApiClient::new(&kc, Duration::from_secs(5)).unwrap());
    let before = FileStore::new(&b.cert_dir, CLIENT_PREFIX)
        .current()
        .unwrap()
        .unwrap();
    let mut rotation = client_rotation(client.clone(), &b.cert_dir, "edge-1", kc.clone());
    rotation.timing = fast();
    rotation.rotate(&stop).unwrap();
    let after = FileStore::new(&b.cert_dir, CLIENT_PREFIX)
        .current()
        .unwrap()
        .unwrap();
    assert_ne!(before.leaf.public_key, after.leaf.public_key, "a new key");
    assert_eq!(after.leaf.common_name, "system:node:edge-1");
    let seen = stub.seen.lock().unwrap();
    let post = seen.posts.last().unwrap();
    assert_eq!(post["metadata"]["generateName"], "csr-");
    assert!(post["metadata"].get("name").is_none());
}

#[test]
fn set_credentials_reaches_every_holder_of_the_client() {
    let stub = Stub::start(Policy::Never);
    let mut kc = Kubeconfig::parse(
        Path::new("/kc"),
        &format!("clusters: [{{name: c, cluster: {{server: '{}'}}}}]\nusers: [{{name: u, user: {{token: one}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n", stub.url),
    )
    .unwrap();
    let client = Arc::new(ApiClient::new(&kc, Duration::from_secs(5)).unwrap());
    let holder = client.clone();
    let _ = holder.post(CSR_PATH, &json!({"metadata": {"name": "a"}}));
    kc.token = Some("two".into());
    client.set_credentials(&kc).unwrap();
    let _ = holder.post(CSR_PATH, &json!({"metadata": {"name": "b"}}));
    let seen = stub.seen.lock().unwrap();
    assert_eq!(seen.authorization, ["Bearer one", "Bearer two"]);
    assert!(!format!("{client:?}").contains("two"));
}

fn leaf(not_before: SystemTime, life: Duration) -> Certificate {
    let k = EcKey::generate().unwrap();
    let t = Template {
        serial: 1,
        common_name: "system:node:n".into(),
        organizations: vec!["system:nodes".into()],
        not_before,
        not_after: not_before + life,
        is_ca: false,
        dns_names: vec![],
        ip_addresses: vec![],
    };
    Certificate::parse(&t.sign(&k, None, &k).unwrap()).unwrap()
}

#[test]
fn the_rotation_deadline_is_between_70_and_90_percent_of_the_lifetime() {
    // upstream nextRotationDeadline / jitteryDuration: wait.Jitter(total, 0.2) - 0.3*total.
    let start = crate::timeutil::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
    let c = leaf(start, Duration::from_secs(1000));
    assert_eq!(rotation_deadline(&c, 0.0), start + Duration::from_secs(700));
    assert_eq!(rotation_deadline(&c, 0.5), start + Duration::from_secs(800));
    let mut min = f64::MAX;
    let mut max = f64::MIN;
    for _ in 0..2000 {
        let u = uniform();
        assert!((0.0..1.0).contains(&u));
        let at = rotation_deadline(&c, u)
            .duration_since(start)
            .unwrap()
            .as_secs_f64();
        assert!((700.0..=900.0).contains(&at), "{at}");
        min = min.min(at);
        max = max.max(at);
    }
    assert!(
        min < 720.0 && max > 880.0,
        "spread over the range: {min}..{max}"
    );
}

#[test]
fn digested_names_are_stable_per_key_and_url_safe() {
    let k = EcKey::generate().unwrap();
    let r = client_request("edge-1");
    let a = digested_name(&k, &r, CLIENT_USAGES);
    assert_eq!(a, digested_name(&k, &r, CLIENT_USAGES));
    assert_ne!(
        a,
        digested_name(&EcKey::generate().unwrap(), &r, CLIENT_USAGES)
    );
    // node-csr- + 43 characters of unpadded base64url (32 bytes of SHA-512/256).
    assert_eq!(a.len(), "node-csr-".len() + 43, "{a}");
    assert!(
        a["node-csr-".len()..]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    );
}

#[test]
fn an_expired_client_certificate_in_the_kubeconfig_needs_bootstrap() {
    let d = tempfile::tempdir().unwrap();
    let k = EcKey::generate().unwrap();
    let old = SystemTime::now() - Duration::from_secs(10 * 86400);
    let t = Template {
        serial: 1,
        common_name: "system:node:edge-1".into(),
        organizations: vec![],
        not_before: old,
        not_after: old + Duration::from_secs(86400),
        is_ca: false,
        dns_names: vec![],
        ip_addresses: vec![],
    };
    let cert = pem::encode(pem::CERTIFICATE, &t.sign(&k, None, &k).unwrap());
    let b = bootstrap_for(d.path(), "http://127.0.0.1:1");
    std::fs::create_dir_all(b.kubeconfig.parent().unwrap()).unwrap();
    std::fs::write(
        &b.kubeconfig,
        format!(
            "clusters: [{{name: c, cluster: {{server: 'https://x'}}}}]\nusers: [{{name: u, user: {{client-certificate-data: {}, client-key-data: {}}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n",
            crate::util::base64::encode(cert.as_bytes()),
            crate::util::base64::encode(k.to_pem().as_bytes())
        ),
    )
    .unwrap();
    assert!(!b.kubeconfig_still_valid(SystemTime::now()));
    assert!(b.kubeconfig_still_valid(old + Duration::from_secs(3600)));
}

#[test]
fn server_tls_bootstrap_requests_a_serving_certificate_and_swaps_it_in() {
    // upstream NewKubeletServerCertificateManager: signer kubernetes.io/kubelet-serving,
    // CN system:node:<node>, O system:nodes, SANs from the node's names and addresses.
    let stub = Stub::start(Policy::Approve);
    let d = tempfile::tempdir().unwrap();
    let mut cfg = crate::kubeletconfig::Config::defaults("edge-1".into());
    cfg.root_dir = d.path().to_path_buf();
    cfg.server_tls_bootstrap = true;
    cfg.node_ips = vec!["10.0.0.9".parse().unwrap()];
    let kc = Kubeconfig::parse(
        Path::new("/kc"),
        &format!("clusters: [{{name: c, cluster: {{server: '{}'}}}}]\nusers: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n", stub.url),
    )
    .unwrap();
    let client = Arc::new(ApiClient::new(&kc, Duration::from_secs(5)).unwrap());
    let sc = crate::certificate::ServingCertificate::from_config(&cfg, Some(client)).unwrap();
    eventually("the serving certificate", || sc.current().is_some());
    let post = stub.seen.lock().unwrap().posts[0].clone();
    assert_eq!(post["spec"]["signerName"], SERVING_SIGNER);
    assert_eq!(
        post["spec"]["usages"],
        json!(["digital signature", "server auth"])
    );
    let csr = crate::util::base64::decode(post["spec"]["request"].as_str().unwrap()).unwrap();
    let file = write(d.path(), "serving.csr", &String::from_utf8_lossy(&csr));
    let text = openssl(&["req", "-in", &file, "-verify", "-noout", "-text"]);
    assert!(
        text.contains("O = system:nodes, CN = system:node:edge-1"),
        "{text}"
    );
    assert!(
        text.contains("DNS:edge-1") && text.contains("IP Address:10.0.0.9"),
        "{text}"
    );
    let served = sc.current().unwrap();
    let stored = FileStore::new(&d.path().join("pki"), super::super::store::SERVER_PREFIX)
        .current()
        .unwrap()
        .unwrap();
    assert_eq!(
        served.cert[0].as_ref(),
        pem::certificates(&stored.cert_pem).unwrap()[0]
    );
}

/// An HTTPS server that requires a client certificate from `client_ca` and answers every
/// request with the presented certificate's CN (one request per connection).
fn mtls_server(
    server: &Pair,
    client_ca: &[u8],
    requests: usize,
) -> (u16, std::thread::JoinHandle<Vec<String>>) {
    use std::io::{Read, Write};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for der in pem::certificates(client_ca).unwrap() {
        roots
            .add(rustls::pki_types::CertificateDer::from(der))
            .unwrap();
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let chain: Vec<rustls::pki_types::CertificateDer<'static>> =
        pem::certificates(&server.cert_pem)
            .unwrap()
            .into_iter()
            .map(rustls::pki_types::CertificateDer::from)
            .collect();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(server.key.pkcs8_der().to_vec().into());
    let cfg = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .unwrap(),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        let mut cns = vec![];
        for _ in 0..requests {
            let (mut tcp, _) = listener.accept().unwrap();
            let mut conn = rustls::ServerConnection::new(cfg.clone()).unwrap();
            let mut head = vec![];
            let mut byte = [0u8; 1];
            {
                let mut tls = rustls::Stream::new(&mut conn, &mut tcp);
                while !head.ends_with(b"\r\n\r\n") && tls.read(&mut byte).unwrap() == 1 {
                    head.push(byte[0]);
                }
            }
            let peer = conn.peer_certificates().unwrap()[0].as_ref().to_vec();
            let cn = Certificate::parse(&peer).unwrap().common_name;
            let body = json!({"cn": cn}).to_string();
            let mut tls = rustls::Stream::new(&mut conn, &mut tcp);
            write!(
                tls,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            tls.flush().unwrap();
            conn.send_close_notify();
            let _ = conn.write_tls(&mut tcp);
            cns.push(cn);
        }
        cns
    });
    (port, t)
}

#[test]
fn set_credentials_swaps_the_client_certificate_on_the_wire() {
    // The rotation's live swap: the next TLS connection presents the new certificate.
    let d = tempfile::tempdir().unwrap();
    let server = crate::certificate::selfsigned::generate("127.0.0.1", SystemTime::now()).unwrap();
    let server_ca = pem::encode(
        pem::CERTIFICATE,
        &pem::certificates(&server.cert_pem).unwrap()[1],
    );
    // A client CA and two client certificates made by openssl.
    let (ca_key, ca_crt) = openssl_self_signed(d.path(), "ca", "/CN=client-ca", 1, &[]);
    let client_pair = |cn: &str| -> (Vec<u8>, Vec<u8>) {
        let key = EcKey::generate().unwrap();
        let req = Request {
            common_name: cn.into(),
            ..Request::default()
        };
        let csr = write(d.path(), &format!("{cn}.csr"), &req.sign_pem(&key).unwrap());
        let out = d.path().join(format!("{cn}.crt"));
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            ca_crt.to_str().unwrap(),
            "-CAkey",
            ca_key.to_str().unwrap(),
            "-set_serial",
            "7",
            "-days",
            "1",
            "-extfile",
            &write(d.path(), "ext", "extendedKeyUsage=clientAuth\n"),
            "-out",
            out.to_str().unwrap(),
        ]);
        (std::fs::read(out).unwrap(), key.to_pem().into_bytes())
    };
    let (one_crt, one_key) = client_pair("system:node:one");
    let (two_crt, two_key) = client_pair("system:node:two");
    let (port, server_thread) = mtls_server(&server, &std::fs::read(&ca_crt).unwrap(), 2);
    let mut kc = Kubeconfig {
        server: format!("https://127.0.0.1:{port}"),
        ca_pem: Some(server_ca.into_bytes()),
        insecure_skip_tls_verify: false,
        token: None,
        client_cert_pem: Some(one_crt),
        client_key_pem: Some(one_key),
    };
    let client = Arc::new(ApiClient::new(&kc, Duration::from_secs(5)).unwrap());
    let holder = client.clone();
    assert_eq!(holder.get("/x").unwrap()["cn"], "system:node:one");
    kc.client_cert_pem = Some(two_crt);
    kc.client_key_pem = Some(two_key);
    client.set_credentials(&kc).unwrap();
    assert_eq!(holder.get("/x").unwrap()["cn"], "system:node:two");
    assert_eq!(
        server_thread.join().unwrap(),
        ["system:node:one", "system:node:two"]
    );
}

/// A client pair for `system:node:edge-1` valid from `not_before` for `life`, signed by itself.
fn short_pair(not_before: SystemTime, life: Duration) -> Pair {
    let k = EcKey::generate().unwrap();
    let t = Template {
        serial: 9,
        common_name: "system:node:edge-1".into(),
        organizations: vec!["system:nodes".into()],
        not_before,
        not_after: not_before + life,
        is_ca: false,
        dns_names: vec![],
        ip_addresses: vec![],
    };
    let der = t.sign(&k, None, &k).unwrap();
    Pair::new(pem::encode(pem::CERTIFICATE, &der).into_bytes(), k).unwrap()
}

fn token_client(url: &str) -> Arc<ApiClient> {
    let kc = Kubeconfig::parse(
        Path::new("/kc"),
        &format!("clusters: [{{name: c, cluster: {{server: '{url}'}}}}]\nusers: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n"),
    )
    .unwrap();
    Arc::new(ApiClient::new(&kc, Duration::from_secs(5)).unwrap())
}

#[test]
fn the_rotation_loop_renews_a_certificate_past_its_deadline_and_then_sleeps_until_stopped() {
    let stub = Stub::start(Policy::Approve);
    let d = tempfile::tempdir().unwrap();
    let store = FileStore::new(d.path(), CLIENT_PREFIX);
    // 10 minutes into a 10-minute lifetime: past any deadline in [70 %, 90 %].
    let old = short_pair(
        SystemTime::now() - Duration::from_secs(590),
        Duration::from_secs(600),
    );
    store.update(&old).unwrap();
    let renewed = Arc::new(Mutex::new(Vec::new()));
    let seen = renewed.clone();
    let rotation = Rotation {
        client: token_client(&stub.url),
        store: store.clone(),
        request: Box::new(|| client_request("edge-1")),
        signer: CLIENT_SIGNER,
        usages: CLIENT_USAGES,
        on_renewed: Box::new(move |p| {
            seen.lock().unwrap().push(p.leaf.public_key.clone());
            Ok(())
        }),
        timing: fast(),
        name: "client",
        on_event: None,
    };
    let (tx, stop) = never();
    let t = std::thread::spawn(move || rotation.run(stop));
    eventually("a renewal", || !renewed.lock().unwrap().is_empty());
    let current = store.current().unwrap().unwrap();
    assert_ne!(current.leaf.public_key, old.leaf.public_key);
    assert_eq!(renewed.lock().unwrap()[0], current.leaf.public_key);
    // The new certificate (1 day) is far from its deadline: one CSR only, then it sleeps.
    tx.send(()).unwrap();
    t.join().unwrap();
    assert_eq!(stub.seen.lock().unwrap().posts.len(), 1);
    assert_eq!(renewed.lock().unwrap().len(), 1);
}

#[test]
fn an_expired_certificate_while_the_api_server_is_down_keeps_retrying_until_stopped() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let d = tempfile::tempdir().unwrap();
    let store = FileStore::new(d.path(), CLIENT_PREFIX);
    let expired = short_pair(
        SystemTime::now() - Duration::from_secs(7200),
        Duration::from_secs(3600),
    );
    store.update(&expired).unwrap();
    let rotation = Rotation {
        client: token_client(&format!("http://127.0.0.1:{port}")),
        store: store.clone(),
        request: Box::new(|| client_request("edge-1")),
        signer: CLIENT_SIGNER,
        usages: CLIENT_USAGES,
        on_renewed: Box::new(|_| panic!("nothing can be issued")),
        timing: fast(),
        name: "client",
        on_event: None,
    };
    let (tx, stop) = never();
    let t = std::thread::spawn(move || rotation.run(stop));
    std::thread::sleep(Duration::from_millis(200)); // a few failed attempts (not a sync)
    tx.send(()).unwrap();
    t.join()
        .expect("no panic: it kept retrying and stopped when asked");
    let still = store.current().unwrap().unwrap();
    assert_eq!(
        still.leaf.public_key, expired.leaf.public_key,
        "the old pair stays"
    );
}

/// A denied CSR is a Warning Node event naming it (reason CertificateSigningRequestDenied);
/// the next attempt's success a Normal CertificateRotated, through the wiring's callback.
#[test]
fn a_denied_then_issued_rotation_records_node_events() {
    let stub = Stub::start(Policy::DenyFirst);
    let d = tempfile::tempdir().unwrap();
    let store = FileStore::new(d.path(), CLIENT_PREFIX);
    let events: Arc<Mutex<Vec<(bool, String, String)>>> = Arc::default();
    let seen = events.clone();
    let rotation = Rotation {
        client: token_client(&stub.url),
        store: store.clone(),
        request: Box::new(|| client_request("edge-1")),
        signer: CLIENT_SIGNER,
        usages: CLIENT_USAGES,
        on_renewed: Box::new(|_| Ok(())),
        timing: fast(),
        name: "client",
        on_event: Some(Arc::new(move |w, r, m| {
            seen.lock().unwrap().push((w, r.to_string(), m.to_string()))
        })),
    };
    let (tx, stop) = never();
    let t = std::thread::spawn(move || rotation.run(stop));
    eventually("a rotation after the denial", || {
        events.lock().unwrap().iter().any(|e| e.1 == REASON_ROTATED)
    });
    tx.send(()).unwrap();
    t.join().unwrap();
    let events = events.lock().unwrap();
    let denied = &events[0];
    assert!(denied.0, "a warning");
    assert_eq!(denied.1, REASON_DENIED);
    // The stub names CSRs csr-0, csr-1, ... (generateName); the first was denied.
    assert!(denied.2.contains("\"csr-0\" is denied"), "{denied:?}");
    let rotated = events.iter().find(|e| e.1 == REASON_ROTATED).unwrap();
    assert!(
        !rotated.0
            && rotated
                .2
                .starts_with("client certificate rotated, valid until ")
    );
}
