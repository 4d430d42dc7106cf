//! Security defaults against the real `nanolet` binary and a real containerd: the HTTP servers
//! under a connection flood and slow clients, request limits, admission hardening options and
//! the manifest-directory permission check.

use nanolet_test_support as support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::Containerd;
use support::agent::Nanolet;

/// `Threads` and `VmRSS` (KiB) of a process, from /proc/<pid>/status.
fn threads_and_rss(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{name} missing in {status}"))
    };
    (field("Threads:"), field("VmRSS:"))
}

/// Sends `raw` on a fresh connection and returns the status code and the whole answer.
fn raw_request(addr: SocketAddr, raw: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let _ = s.write_all(raw);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

fn healthz_port(n: &Nanolet) -> u16 {
    n.args
        .iter()
        .find_map(|a| a.strip_prefix("--healthz-port="))
        .and_then(|p| p.parse().ok())
        .expect("healthz port")
}

#[test]
fn servers_survive_a_thousand_idle_and_slow_connections() {
    // Alone: the 1000 connections are file descriptors of this test process, which every other
    // test of the one binary also uses (the soft limit is often 1024), and answers are timed.
    let _alone = support::exclusive();
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    let pid = n.child.as_ref().expect("child").id();
    let ro: SocketAddr = format!("127.0.0.1:{}", n.port).parse().expect("addr");
    let hz: SocketAddr = format!("127.0.0.1:{}", healthz_port(&n))
        .parse()
        .expect("addr");
    let (threads0, rss0) = threads_and_rss(pid);

    // 1000 connections: 700 on the read-only port (more than its 512 cap), 300 on healthz.
    // Every third one drips an incomplete request head one byte at a time; the rest are idle.
    let mut conns = Vec::new();
    for i in 0..1000 {
        let addr = if i < 700 { ro } else { hz };
        let s = TcpStream::connect(addr).expect("connect");
        s.set_nonblocking(true).expect("nonblocking");
        conns.push((s, i % 3 == 0));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let dripper = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let head = b"GET /pods HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
            let mut k = 0;
            while !stop.load(Ordering::SeqCst) {
                for (s, slow) in &mut conns {
                    if *slow {
                        let _ = s.write(&head[k % head.len()..k % head.len() + 1]);
                    }
                }
                k += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            conns
        })
    };

    // While they hang on, health checks and /pods keep answering quickly, and nanolet's thread
    // count and memory stay put.
    let mut worst = Duration::ZERO;
    let (mut max_threads, mut max_rss) = (threads0, rss0);
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        for (addr, path) in [(ro, "/healthz"), (hz, "/healthz"), (ro, "/pods")] {
            let t = Instant::now();
            let (status, text) = raw_request(
                addr,
                format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
            );
            worst = worst.max(t.elapsed());
            assert_eq!(status, 200, "{path} during the flood: {text}");
        }
        let (t, r) = threads_and_rss(pid);
        max_threads = max_threads.max(t);
        max_rss = max_rss.max(r);
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "flood: threads {threads0} -> max {max_threads}, VmRSS {rss0} KiB -> max {max_rss} KiB, \
         slowest answer {worst:?}"
    );
    // Bounds with room for a loaded CI machine, far below what a blocked server shows (an
    // answer stuck behind a slow head waits out the 10 s head timeout; a thread per
    // connection is 1000 threads).
    assert!(worst < Duration::from_secs(3), "slowest answer {worst:?}");
    assert!(
        max_threads <= threads0 + 4,
        "threads grew from {threads0} to {max_threads}"
    );
    assert!(
        max_rss < rss0 + 16 * 1024,
        "VmRSS grew from {rss0} KiB to {max_rss} KiB"
    );

    // Slow heads are cut off after the 10 s head timeout (408) and idle ones closed.
    stop.store(true, Ordering::SeqCst);
    let mut conns = dripper.join().expect("dripper");
    let (mut slow, _) = conns.pop().expect("a connection");
    slow.set_nonblocking(false).expect("blocking");
    slow.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let mut answer = Vec::new();
    let read = slow.read_to_end(&mut answer);
    assert!(
        read.is_ok(),
        "the server never closed a slow connection: {read:?}"
    );
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408 "),
        "{answer}"
    );
    drop(conns);
}

#[test]
fn request_limits_and_methods() {
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    let ro: SocketAddr = format!("127.0.0.1:{}", n.port).parse().expect("addr");
    let long_line = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(10_000));
    assert_eq!(raw_request(ro, long_line.as_bytes()).0, 414);
    let big_header = format!(
        "GET /pods HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "b".repeat(20_000)
    );
    assert_eq!(raw_request(ro, big_header.as_bytes()).0, 431);
    let many: String = (0..150).map(|i| format!("X-{i}: v\r\n")).collect();
    let many = format!("GET /pods HTTP/1.1\r\n{many}\r\n");
    assert_eq!(raw_request(ro, many.as_bytes()).0, 431);
    let big_body = b"POST /pods HTTP/1.1\r\nContent-Length: 1000000\r\n\r\nxx";
    assert_eq!(raw_request(ro, big_body).0, 413);
    let post = b"POST /pods HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
    let (status, text) = raw_request(ro, post);
    assert_eq!(status, 405, "{text}");
    assert!(text.contains("Allow: GET, HEAD"), "{text}");
    for method in ["PUT", "DELETE", "PATCH", "OPTIONS"] {
        let req = format!("{method} /api/v1/pods HTTP/1.1\r\n\r\n");
        assert_eq!(raw_request(ro, req.as_bytes()).0, 405, "{method}");
    }
    let (status, text) = raw_request(ro, b"HEAD /pods HTTP/1.1\r\n\r\n");
    assert_eq!(status, 200);
    assert!(text.ends_with("\r\n\r\n"), "HEAD has no body: {text}");
    assert_eq!(n.get("/healthz").as_deref(), Some("ok"));
}

fn pod_yaml(name: &str, spec: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{spec}")
}

const SLEEP: &str = "    image: localhost/busybox:1.36\n    command: [sh, -c, 'sleep 3600']\n";

/// The events nanolet recorded for pod `full_name`, as (reason, message).
fn events_of(n: &Nanolet, full_name: &str) -> Vec<(String, String)> {
    let v: serde_json::Value = n
        .get("/api/v1/namespaces/default/events")
        .and_then(|b| serde_json::from_str(&b).ok())
        .unwrap_or_default();
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["involvedObject"]["name"] == full_name)
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or_default().to_string(),
                e["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn hardening_options_reject_pods_at_admission_until_the_manifest_changes() {
    let ctd = Containerd::start();
    let allowed = ctd.tmp().join("allowed");
    std::fs::create_dir_all(&allowed).expect("mkdir");
    let n = Nanolet::start(
        &ctd,
        &[
            "--allow-privileged=false".into(),
            "--deny-host-namespaces".into(),
            format!("--allowed-host-paths={}", allowed.display()),
        ],
    );
    let privileged = format!(
        "  containers:\n  - name: c\n{SLEEP}    securityContext:\n      privileged: true\n"
    );
    n.write("priv.yaml", &pod_yaml("priv", &privileged));
    n.write(
        "hostnet.yaml",
        &pod_yaml(
            "hostnet",
            &format!("  hostNetwork: true\n  containers:\n  - name: c\n{SLEEP}"),
        ),
    );
    n.write(
        "etc.yaml",
        &pod_yaml(
            "etc",
            &format!(
                "  containers:\n  - name: c\n{SLEEP}  volumes:\n  - name: ok\n    hostPath:\n      path: {}\n  - name: etc\n    hostPath:\n      path: /etc\n",
                allowed.display()
            ),
        ),
    );
    for (name, message) in [
        (
            "priv",
            "spec.containers[0].securityContext.privileged: Forbidden: privileged containers are not allowed on this node (--allow-privileged=false)",
        ),
        (
            "hostnet",
            "spec.hostNetwork: Forbidden: host namespaces are not allowed on this node (--deny-host-namespaces)",
        ),
        (
            "etc",
            "spec.volumes[1].hostPath.path: Forbidden: \"/etc\" is not below an allowed host path",
        ),
    ] {
        let p = n.wait_phase(name, "Failed");
        assert_eq!(p["status"]["reason"], "Forbidden", "{p:#}");
        let got = p["status"]["message"].as_str().unwrap_or_default();
        assert!(got.starts_with(message), "{name}: {got}");
        let full = format!("{name}-node1");
        let events = support::wait_for(Duration::from_secs(10), || {
            Some(events_of(&n, &full)).filter(|e| !e.is_empty())
        })
        .unwrap_or_default();
        assert!(
            events
                .iter()
                .any(|(r, m)| r == "Forbidden" && m.starts_with(message)),
            "{name}: {events:?}"
        );
    }
    // Nothing of them reached containerd.
    let rt = ctd.runtime();
    use nanolet::cri::Runtime;
    let sandboxes = rt.list_pod_sandboxes().expect("list sandboxes");
    assert!(sandboxes.is_empty(), "{sandboxes:?}");

    // The edited manifest is admitted.
    n.write(
        "priv.yaml",
        &pod_yaml("priv", &format!("  containers:\n  - name: c\n{SLEEP}")),
    );
    n.wait_phase("priv", "Running");
    assert_eq!(
        n.pod("hostnet").expect("hostnet")["status"]["phase"],
        "Failed"
    );
}

#[test]
fn insecure_manifest_dirs_and_files_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let ctd = Containerd::start();
    let chmod = |p: &std::path::Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod")
    };
    // At start: a world-writable directory stops nanolet with a clear error.
    let open = ctd.tmp().join("open-manifests");
    std::fs::create_dir_all(&open).expect("mkdir");
    chmod(&open, 0o777);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nanolet"))
        .args([
            "run".to_string(),
            format!("--pod-manifest-path={}", open.display()),
            format!("--container-runtime-endpoint={}", ctd.endpoint()),
            "--read-only-port=0".into(),
            "--healthz-port=0".into(),
            format!("--root-dir={}", ctd.tmp().join("root-open").display()),
            "--device-plugin-dir=".into(),
            "--pod-resources-dir=".into(),
        ])
        .output()
        .expect("run nanolet");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "manifest directory {} is world-writable (mode 0777)",
            open.display()
        )) && stderr.contains("anyone who can write there can run privileged containers")
            && stderr.contains("--allow-insecure-manifest-dir"),
        "{stderr}"
    );

    // While running: a world-writable file is a manifest error naming the file; fixed, it runs.
    // The local ConfigMap directory and the images directory are checked the same way.
    let cm_dir = ctd.tmp().join("configmaps");
    std::fs::create_dir_all(&cm_dir).expect("mkdir");
    std::fs::write(
        cm_dir.join("app.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  mode: edge\n",
    )
    .expect("configmap");
    chmod(&cm_dir, 0o777);
    let images = ctd.tmp().join("nanolet/root/images");
    std::fs::create_dir_all(&images).expect("mkdir");
    std::fs::write(images.join("planted.tar"), b"not an image").expect("archive");
    chmod(&images.join("planted.tar"), 0o666);
    let n = Nanolet::start(&ctd, &[format!("--config-map-dir={}", cm_dir.display())]);
    let import_refused = support::wait_for(Duration::from_secs(30), || {
        let events = n.get("/api/v1/namespaces/default/events")?;
        (events.contains("planted.tar is world-writable")
            && events.contains("can replace the images"))
        .then_some(())
    });
    assert!(
        import_refused.is_some(),
        "a world-writable archive is refused: {:?}",
        n.get("/api/v1/namespaces/default/events")
    );
    n.write(
        "usescm.yaml",
        &pod_yaml(
            "usescm",
            &format!(
                "  containers:\n  - name: c\n{SLEEP}    env:\n    - name: MODE\n      valueFrom:\n        configMapKeyRef: {{name: app, key: mode}}\n"
            ),
        ),
    );
    let waiting = n.wait_pod("usescm", "CreateContainerConfigError", |p| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
            == "CreateContainerConfigError"
    });
    let message = waiting["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains(&format!(
            "configmap directory {} is world-writable",
            cm_dir.display()
        )) && message.contains("--allow-insecure-manifest-dir"),
        "{message}"
    );
    chmod(&cm_dir, 0o755);
    n.wait_phase("usescm", "Running");
    // Publish the file already world-writable (temp + chmod + rename): a chmod after the
    // rename would race nanolet's immediate read of the new file.
    let file = n.manifests().join("open.yaml");
    let tmp = n.manifests().join(".open.yaml.tmp");
    std::fs::write(
        &tmp,
        pod_yaml("open", &format!("  containers:\n  - name: c\n{SLEEP}")),
    )
    .expect("write manifest");
    chmod(&tmp, 0o666);
    std::fs::rename(&tmp, &file).expect("rename manifest");
    let errors = support::wait_for(Duration::from_secs(15), || {
        n.get("/manifests/errors")
            .filter(|b| b.contains("open.yaml") && b.contains("world-writable"))
    });
    assert!(errors.is_some(), "{:?}", n.get("/manifests/errors"));
    assert!(n.pod("open").is_none());
    chmod(&file, 0o644);
    n.wait_phase("open", "Running");
}

/// Runs `openssl` with `args` in `dir`, failing the test on an error.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (scripts/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A private CA, a server certificate for 127.0.0.1 and a client certificate signed by it, made
/// with the openssl CLI in `dir`.
fn make_pki(dir: &std::path::Path) {
    let ca = "/CN=nanolet test CA";
    openssl(
        dir,
        &[
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", "ca.key",
            "-out", "ca.pem", "-subj", ca,
        ],
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    .expect("ext");
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").expect("ext");
    for (name, cn) in [("server", "/CN=127.0.0.1"), ("client", "/CN=nanolet")] {
        let (key, csr, pem, ext) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
        );
        openssl(
            dir,
            &[
                "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", cn,
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-out",
                &pem,
                "-extfile",
                &ext,
            ],
        );
    }
}

/// An HTTPS server (Python's ssl module, TLS 1.2/1.3) serving `pods.yaml` of its directory,
/// that requires a client certificate signed by the test CA (`CERT_REQUIRED`: no certificate,
/// no handshake) and appends each request's path and Authorization header to `requests.log`;
/// killed on drop.
struct TlsServer(std::process::Child);

const TLS_SERVER: &str = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open("requests.log", "a") as f:
            f.write("%s %s\n" % (self.path, self.headers.get("Authorization", "-")))
        body = open("pods.yaml", "rb").read()
        self.send_response(200)
        self.send_header("Content-Type", "application/yaml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("server.pem", "server.key")
ctx.load_verify_locations("ca.pem")
ctx.verify_mode = ssl.CERT_REQUIRED
s = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
s.socket = ctx.wrap_socket(s.socket, server_side=True)
s.serve_forever()
"#;

impl TlsServer {
    fn start(dir: &std::path::Path, port: u16) -> TlsServer {
        let child = std::process::Command::new("python3")
            .args(["-c", TLS_SERVER, &port.to_string()])
            .current_dir(dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("python3 (scripts/install-deps.sh installs it)");
        let server = TlsServer(child);
        let up = support::wait_for(Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", port)).ok()
        });
        assert!(up.is_some(), "the TLS test server did not listen on {port}");
        server
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Issue 9 "Manifest URL over HTTPS with a custom CA file and optional client certificate;
/// headers and tokens never appear in logs, /configz, metrics or errors": against a server with
/// a private CA that requires a client certificate, nanolet without the CA file refuses the
/// server (an error on /manifests/errors, no pod), with the CA file and client certificate it
/// runs the pod and sends the Authorization header, which appears nowhere nanolet shows.
#[test]
fn manifest_url_over_https_with_a_private_ca_and_a_client_certificate() {
    let ctd = Containerd::start();
    let pki = ctd.tmp().join("pki");
    std::fs::create_dir_all(&pki).expect("mkdir");
    make_pki(&pki);
    let body = pod_yaml("fromtls", &format!("  containers:\n  - name: c\n{SLEEP}"));
    std::fs::write(pki.join("pods.yaml"), body).expect("pods.yaml");
    let port = support::agent::free_port();
    let _server = TlsServer::start(&pki, port);
    let url = format!("https://127.0.0.1:{port}/pods.yaml");
    let secret = "Bearer tls-s3cr3t-token";
    let pki_arg = |flag: &str, file: &str| format!("--{flag}={}", pki.join(file).display());

    // 1. Without the CA file the server's certificate is not trusted (webpki roots only).
    let mut untrusting = Nanolet::start(
        &ctd,
        &[
            format!("--manifest-url={url}"),
            format!("--manifest-url-header=Authorization:{secret}"),
            pki_arg("manifest-url-client-cert", "client.pem"),
            pki_arg("manifest-url-client-key", "client.key"),
        ],
    );
    let errors = support::wait_for(Duration::from_secs(30), || {
        let e = untrusting.get("/manifests/errors")?;
        e.contains(&url).then_some(e)
    })
    .expect("an untrusted server certificate is reported on /manifests/errors");
    assert!(
        errors.to_lowercase().contains("certificate"),
        "the error names the certificate problem: {errors}"
    );
    assert!(!errors.contains("tls-s3cr3t-token"), "{errors}");
    assert!(
        untrusting.pods().is_empty(),
        "no pod from an untrusted server"
    );
    untrusting.stop();
    assert!(
        !std::fs::read_to_string(pki.join("requests.log"))
            .unwrap_or_default()
            .contains("tls-s3cr3t-token"),
        "no request (and no header) reached the server over an untrusted connection"
    );

    // 2. With the CA file and the client certificate the pod runs.
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--manifest-url={url}"),
            format!("--manifest-url-header=Authorization:{secret}"),
            pki_arg("manifest-url-ca-file", "ca.pem"),
            pki_arg("manifest-url-client-cert", "client.pem"),
            pki_arg("manifest-url-client-key", "client.key"),
        ],
    );
    n.wait_phase("fromtls", "Running");
    let seen = std::fs::read_to_string(pki.join("requests.log")).expect("requests.log");
    assert!(
        seen.lines().any(|l| l == format!("/pods.yaml {secret}")),
        "the header went to the server over TLS: {seen}"
    );
    let key = std::fs::read_to_string(pki.join("client.key")).expect("key");
    let key_line = key.lines().nth(1).expect("a key line").to_string();
    let configz = n.get("/configz").expect("configz");
    assert!(
        configz.contains("client.key"),
        "configz names the key file: {configz}"
    );
    for (what, text) in [
        ("configz", configz),
        ("metrics", n.get("/metrics").unwrap_or_default()),
        ("pods", n.get("/pods").unwrap_or_default()),
        ("errors", n.get("/manifests/errors").unwrap_or_default()),
        ("log", n.log_tail()),
    ] {
        assert!(
            !text.contains("tls-s3cr3t-token"),
            "{what} shows the header value"
        );
        assert!(!text.contains(&key_line), "{what} shows the client key");
    }
}

/// `nanolet run` with `args` (its sources), pointed at a containerd socket that does not
/// exist (these tests need no runtime), its read-only port on `port`, both output streams into
/// `log`; killed when dropped.
fn run_without_containerd(
    tmp: &std::path::Path,
    port: u16,
    log: std::fs::File,
    args: &[String],
) -> KillOnDrop {
    let mut all = vec![
        "run".to_string(),
        format!(
            "--container-runtime-endpoint=unix://{}",
            tmp.join("no-containerd.sock").display()
        ),
        format!("--root-dir={}", tmp.join("root").display()),
        "--device-plugin-dir=".into(),
        "--pod-resources-dir=".into(),
        format!("--pod-logs-dir={}", tmp.join("log/pods").display()),
        format!("--read-only-port={port}"),
        "--healthz-port=0".into(),
        "--hostname-override=node1".into(),
        "--eviction-hard=memory.available<0%".into(),
        "--image-gc-high-threshold=100".into(),
        "--image-gc-low-threshold=99".into(),
    ];
    all.extend_from_slice(args);
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_nanolet"))
        .args(&all)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("start nanolet");
    KillOnDrop(child)
}

/// A child process killed (by its id) and reaped when the test ends, passed or not.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// GET /manifests/errors on the read-only port `addr`; `None` while nothing answers.
fn manifest_errors(addr: SocketAddr) -> Option<Vec<serde_json::Value>> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /manifests/errors HTTP/1.1\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let (head, body) = out.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| serde_json::from_str(body).ok())
        .flatten()
}

/// Makes a FIFO at `path`.
fn mkfifo(path: &std::path::Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
}

/// `nanolet validate` reads files as `nanolet run` does: a FIFO (no writer will ever come), a
/// symbolic link to /dev/zero (never ends) and a sparse 1 GiB file are refused at once, each
/// with a message naming the file and what it is, and nothing of them is read. The binary runs
/// with 1 GiB of address space (`ulimit -v`): a regression fails here instead of eating the
/// machine's memory.
#[test]
fn validate_refuses_a_fifo_dev_zero_and_a_huge_file_without_blocking_or_reading() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("fifo.yaml");
    mkfifo(&fifo);
    let zero = dir.path().join("zero.yaml");
    std::os::unix::fs::symlink("/dev/zero", &zero).expect("symlink");
    let huge = dir.path().join("huge.yaml");
    std::fs::File::create(&huge)
        .and_then(|f| f.set_len(1 << 30))
        .expect("sparse file");
    let good = dir.path().join("good.yaml");
    std::fs::write(
        &good,
        pod_yaml("good", "  containers:\n  - name: c\n    image: busybox\n"),
    )
    .expect("manifest");
    let started = Instant::now();
    let child = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 1048576 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_nanolet"))
        .arg("validate")
        .args([&fifo, &zero, &huge, &good])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run nanolet validate");
    let mut child = KillOnDrop(child);
    let exited = support::wait_for(Duration::from_secs(20), || {
        child.0.try_wait().ok().flatten()
    });
    assert!(
        exited.is_some(),
        "nanolet validate still runs after 20 s (blocked on the FIFO or reading /dev/zero?)"
    );
    let took = started.elapsed();
    let (mut stdout, mut stderr) = (String::new(), String::new());
    if let Some(o) = child.0.stdout.as_mut() {
        let _ = o.read_to_string(&mut stdout);
    }
    if let Some(e) = child.0.stderr.as_mut() {
        let _ = e.read_to_string(&mut stderr);
    }
    assert_eq!(exited.and_then(|s| s.code()), Some(1), "{stdout}{stderr}");
    for (file, what) in [
        (&fifo, "not a regular file but a FIFO (named pipe)"),
        (&zero, "not a regular file but a character device"),
        (
            &huge,
            "larger than 10485760 bytes (the manifest size limit): 1073741824 bytes",
        ),
    ] {
        let line = format!("{}: {what}", file.display());
        assert!(stderr.contains(&line), "no {line:?} in {stderr}");
    }
    assert!(
        stdout.contains(&format!("{}: valid", good.display())),
        "{stdout}"
    );
    assert!(stderr.contains("3 of 4 manifests are invalid"), "{stderr}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

/// `nanolet run` (no containerd needed: the manifest directory is read all the same) with
/// hostile entries named like manifests: a FIFO, a symbolic link to /dev/zero, a directory, a
/// dangling symbolic link, a symbolic link loop, a name that is not UTF-8, and a manifest named
/// `new<LF>line.yaml` whose pod name holds a NUL and an ESC, in a directory whose name holds a
/// newline and an ESC. Each is on /manifests/errors with
/// its name escaped; the log has no raw control character, no split line, and the one
/// rejection is logged once however often the directory is re-listed.
#[test]
fn hostile_manifest_directory_entries_are_reported_and_logged_escaped_once() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    // The directory's own name holds a newline and an ESC: it is in many log lines.
    let dir = tmp.path().join("mani\x1bfe\nsts");
    std::fs::create_dir(&dir).expect("mkdir");
    mkfifo(&dir.join("fifo.yaml"));
    std::os::unix::fs::symlink("/dev/zero", dir.join("zero.yaml")).expect("symlink");
    std::fs::create_dir(dir.join("dir.yaml")).expect("mkdir");
    std::os::unix::fs::symlink(dir.join("gone.yaml"), dir.join("dangling.yaml")).expect("link");
    std::os::unix::fs::symlink(dir.join("loop.yaml"), dir.join("loop.yaml")).expect("link");
    mkfifo(&dir.join(".hidden.yaml"));
    let mut latin1 = dir.as_os_str().as_bytes().to_vec();
    latin1.extend_from_slice(b"/caf\xe9.yaml");
    std::fs::write(std::ffi::OsStr::from_bytes(&latin1), "x: 1\n").expect("write");
    std::fs::write(
        dir.join("new\nline.yaml"),
        pod_yaml(
            "\"bad\\0\\e[31mname\"",
            "  containers:\n  - name: c\n    image: busybox\n",
        ),
    )
    .expect("write");
    for p in [tmp.path(), &dir] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let log_path = tmp.path().join("nanolet.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let port = support::agent::free_port();
    let mut child = run_without_containerd(
        tmp.path(),
        port,
        log,
        &[
            format!("--pod-manifest-path={}", dir.display()),
            "--file-check-frequency=1s".into(),
            "--v=2".into(),
        ],
    );
    let ro: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let d = dir
        .display()
        .to_string()
        .replace('\n', "\\n")
        .replace('\x1b', "\\u{1b}");
    let expected = [
        (
            format!("{d}/fifo.yaml"),
            "not a regular file but a FIFO (named pipe)",
        ),
        (
            format!("{d}/zero.yaml"),
            "not a regular file but a character device",
        ),
        (
            format!("{d}/dir.yaml"),
            "not a regular file but a directory",
        ),
        (format!("{d}/dangling.yaml"), "a dangling symbolic link"),
        (
            format!("{d}/loop.yaml"),
            "Too many levels of symbolic links",
        ),
        (
            format!("{d}/caf\\xe9.yaml"),
            "the file name is not valid UTF-8",
        ),
        (format!("{d}/new\\nline.yaml"), "Invalid value"),
    ];
    let errors = support::wait_for(Duration::from_secs(30), || {
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!(
                "nanolet exited ({status}): {}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        let errors = manifest_errors(ro)?;
        (errors.len() >= expected.len()).then_some(errors)
    })
    .unwrap_or_else(|| {
        panic!(
            "not all entries reported: {:?}\n{}",
            manifest_errors(ro),
            std::fs::read_to_string(&log_path).unwrap_or_default()
        )
    });
    assert_eq!(
        errors.len(),
        expected.len(),
        "hidden files stay ignored: {errors:?}"
    );
    for (origin, what) in &expected {
        let found = errors.iter().find(|e| e["origin"] == origin.as_str());
        let reason = found.and_then(|e| e["reason"].as_str()).unwrap_or_default();
        assert!(reason.contains(what), "{origin}: {what} not in {errors:?}");
    }
    // An observation window, not a synchronisation: three more re-lists (1 s apart) happen
    // in it, and none may log the rejection again.
    std::thread::sleep(Duration::from_millis(3500));
    let log = std::fs::read(&log_path).expect("log");
    assert!(
        !log.iter().any(|&b| b == 0 || b == 0x1b),
        "raw NUL or ESC in the log: {}",
        String::from_utf8_lossy(&log)
    );
    let log = String::from_utf8_lossy(&log);
    for line in log.lines() {
        assert!(
            line.starts_with("20") && line.get(10..11) == Some("T"),
            "a log line that does not start with a timestamp (a split line?): {line:?}"
        );
    }
    let rejections: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("new\\nline.yaml"))
        .collect();
    assert_eq!(
        rejections.len(),
        1,
        "logged more than once: {rejections:#?}"
    );
    assert!(
        rejections[0].contains(r#"Invalid value: "bad\u0000\u001b[31mname-node1""#),
        "{}",
        rejections[0]
    );
}

/// `nanolet run` (no containerd needed) polling a manifest URL with credentials in its query:
/// the URL is never shown with them (log, /manifests/errors), requests are conditional (one
/// full body, then `304 Not Modified` only) and the rejected body is logged once, not on
/// every poll.
#[test]
fn manifest_url_query_credentials_are_redacted_and_unchanged_bodies_not_downloaded() {
    use std::sync::Mutex;
    let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("server"));
    let port = server
        .server_addr()
        .to_ip()
        .map(|a| a.port())
        .expect("port");
    // (full bodies, 304s)
    let counts = Arc::new(Mutex::new((0usize, 0usize)));
    let serving = {
        let (server, counts) = (server.clone(), counts.clone());
        std::thread::spawn(move || {
            for req in server.incoming_requests() {
                let fresh = req
                    .headers()
                    .iter()
                    .any(|h| h.field.equiv("If-None-Match") && h.value == "\"v1\"");
                let mut c = counts.lock().unwrap_or_else(|e| e.into_inner());
                let resp = if fresh {
                    c.1 += 1;
                    tiny_http::Response::from_string("").with_status_code(304)
                } else {
                    c.0 += 1;
                    let body = pod_yaml("Bad_Name", "  containers:\n  - name: c\n    image: x\n");
                    let etag = tiny_http::Header::from_bytes("ETag", "\"v1\"").expect("header");
                    tiny_http::Response::from_string(body).with_header(etag)
                };
                drop(c);
                let _ = req.respond(resp);
            }
        })
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let log_path = tmp.path().join("nanolet.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let ro_port = support::agent::free_port();
    let mut child = run_without_containerd(
        tmp.path(),
        ro_port,
        log,
        &[
            "--pod-manifest-path=".into(),
            format!("--manifest-url=http://127.0.0.1:{port}/pods?access_token=s3cret&sig=s3cret2"),
            "--http-check-frequency=1s".into(),
            "--v=4".into(),
        ],
    );
    let ro: SocketAddr = format!("127.0.0.1:{ro_port}").parse().expect("addr");
    let shown = format!("http://127.0.0.1:{port}/pods?access_token=<redacted>&sig=<redacted>");
    let errors = support::wait_for(Duration::from_secs(30), || {
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!(
                "nanolet exited ({status}): {}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        manifest_errors(ro).filter(|e| !e.is_empty())
    })
    .expect("the rejected body on /manifests/errors");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["origin"], shown.as_str(), "{errors:?}");
    assert_eq!(errors[0]["field"], "metadata.name", "{errors:?}");
    // Three more polls: each a 304.
    let polled = support::wait_for(Duration::from_secs(30), || {
        let c = *counts.lock().unwrap_or_else(|e| e.into_inner());
        (c.1 >= 3).then_some(c)
    });
    assert_eq!(
        polled.map(|c| c.0),
        Some(1),
        "the unchanged body was downloaded again: {polled:?}"
    );
    let text = std::fs::read_to_string(&log_path).expect("log");
    assert!(
        !text.contains("s3cret") && text.contains(&shown),
        "the log shows the query credentials or not the redacted URL:\n{text}"
    );
    let rejected = text
        .lines()
        .filter(|l| l.contains("manifest rejected"))
        .count();
    assert_eq!(rejected, 1, "the rejection is logged once:\n{text}");
    drop(child);
    server.unblock();
    serving.join().expect("server thread");
}

/// The host pids of the processes in container `id` (its id is in their cgroup path).
fn pids_of_container(id: &str) -> Vec<i32> {
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| c.contains(id)) {
            out.push(pid);
        }
    }
    out
}

#[test]
fn host_users_false_runs_in_its_own_user_namespace_where_the_runtime_supports_it() {
    // KEP-127 / the kubelet's userns manager: `hostUsers: false` maps the pod's UID 0 to an
    // unprivileged 65536-ID host range (from 65536 up) when the runtime's default handler
    // reports user namespace support (CRI Status runtime_handlers: containerd 2 + runc >= 1.2);
    // elsewhere the kubelet's error: "can't set `spec.hostUsers: false`, runtime does not
    // support user namespaces" (nanolet refuses at admission, reason UserNamespacesNotSupported).
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    n.write(
        "userns.yaml",
        &pod_yaml(
            "userns",
            &format!("  hostUsers: false\n  containers:\n  - name: c\n{SLEEP}"),
        ),
    );
    use nanolet::cri::Runtime;
    let supported = default_handler(&ctd).is_some_and(|h| h.user_namespaces);
    assert_eq!(
        supported,
        support::test_runtime().name == "2",
        "containerd 2 with runc 1.5 reports user namespaces on this kernel; 1.6 and 1.7 report no handlers"
    );
    if !supported {
        let p = n.wait_phase("userns", "Failed");
        assert_eq!(p["status"]["reason"], "UserNamespacesNotSupported", "{p:#}");
        assert_eq!(
            p["status"]["message"],
            "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
        );
        assert!(ctd.runtime().list_pod_sandboxes().expect("list").is_empty());
        return;
    }
    let p = n.wait_phase("userns", "Running");
    let id = p["status"]["containerStatuses"][0]["containerID"]
        .as_str()
        .and_then(|s| s.strip_prefix("containerd://"))
        .expect("containerID")
        .to_string();
    let pids = support::wait_for(Duration::from_secs(10), || {
        Some(pids_of_container(&id)).filter(|p| !p.is_empty())
    })
    .expect("the container's processes on the host");
    for pid in pids {
        // Inside: UID 0. On the host (/proc/<pid>/status, real UID): the range's first ID,
        // unprivileged, a multiple of 65536.
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let uid: u32 = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|u| u.parse().ok())
            .expect("Uid line");
        assert!(
            uid >= 65536 && uid % 65536 == 0,
            "pid {pid} runs as host UID {uid}"
        );
        let map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).expect("uid_map");
        let fields: Vec<&str> = map.split_whitespace().collect();
        assert_eq!(
            fields,
            ["0", &uid.to_string(), "65536"],
            "uid_map of {pid}: {map}"
        );
    }
    // The mapping is recorded where the kubelet keeps it.
    let uid = p["metadata"]["uid"].as_str().expect("uid");
    let file = n.dir.join("root/pods").join(uid).join("userns");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    assert!(
        text.contains("\"containerId\":0,\"length\":65536"),
        "{text}"
    );
}

/// The runtime's default handler as CRI `Status` reports it with its features (containerd 2);
/// `None` where it reports no handlers (1.6, 1.7).
fn default_handler(ctd: &Containerd) -> Option<nanolet::cri::RuntimeHandler> {
    use nanolet::cri::Runtime;
    ctd.runtime()
        .status(false)
        .expect("CRI Status")
        .handlers
        .into_iter()
        .find(|h| h.name.is_empty())
}

/// Unmounts the test's tmpfs when dropped (also when the test fails).
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn recursive_read_only_mounts_reach_the_runtime_or_the_container_is_refused() {
    // kubelet_pods.go resolveRecursiveReadOnly / makeMounts: `recursiveReadOnly: Enabled`
    // makes a read-only volumeMount read-only all the way down (CRI Mount
    // recursive_read_only) where the pod's runtime handler reports support (containerd 2 with
    // runc 1.5 here); where it does not, the container is not created: CreateContainerConfigError
    // "... requested recursive read-only mode, but it is not supported by the runtime". A
    // plain read-only bind would leave the submount writable (weaker than the manifest asks).
    let ctd = Containerd::start();
    let host = ctd.tmp().join("rro");
    let sub = host.join("sub");
    std::fs::create_dir_all(&sub).expect("mkdir");
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&sub)
        .status()
        .expect("mount");
    assert!(mounted.success(), "mount tmpfs on {}", sub.display());
    let _unmount = Unmount(sub.clone());
    let n = Nanolet::start(&ctd, &[]);
    n.write(
        "rro.yaml",
        &pod_yaml(
            "rro",
            &format!(
                "  restartPolicy: Never\n  volumes:\n  - name: h\n    hostPath:\n      path: {}\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'touch /ro/sub/x && exit 3; exit 7']\n    volumeMounts:\n    - name: h\n      mountPath: /ro\n      readOnly: true\n      recursiveReadOnly: Enabled\n",
                host.display()
            ),
        ),
    );
    let supported = default_handler(&ctd).is_some_and(|h| h.recursive_read_only_mounts);
    assert_eq!(
        supported,
        support::test_runtime().name == "2",
        "containerd 2 with runc 1.5 reports recursive read-only mounts on this kernel; 1.6 and 1.7 report no handlers"
    );
    if !supported {
        let p = n.wait_pod("rro", "CreateContainerConfigError", |p| {
            p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
                == "CreateContainerConfigError"
        });
        let msg = p["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            msg.contains(
                "failed to resolve recursive read-only mode: volume \"h\" requested recursive read-only mode, but it is not supported by the runtime"
            ),
            "{p:#}"
        );
        assert!(
            !sub.join("x").exists(),
            "no container may run with the mount weaker"
        );
        return;
    }
    let p = n.wait_phase("rro", "Failed");
    let st = &p["status"]["containerStatuses"][0];
    assert_eq!(
        st["state"]["terminated"]["exitCode"], 7,
        "the submount must be read-only too: {p:#}"
    );
    assert!(!sub.join("x").exists());
    assert_eq!(
        st["volumeMounts"][0]["recursiveReadOnly"], "Enabled",
        "{p:#}"
    );
}
