//! The kubelet server on `--port` (HTTPS, authenticated), the real binary on a real
//! containerd: certificates made by the openssl CLI, requests by curl and the real kubectl.

use nanolet_test_support as support;

use serde_json::Value;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::agent::{NODE, Nanolet, TIMEOUT, free_port};
use support::{Containerd, wait_for};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `<name>-ca.crt`/`.key`: a CA.
fn ca(dir: &Path, name: &str) {
    let (subj, key, crt) = (
        format!("/CN={name}-ca"),
        format!("{name}-ca.key"),
        format!("{name}-ca.crt"),
    );
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
            &subj,
            "-keyout",
            &key,
            "-out",
            &crt,
        ],
    );
}

/// `<leaf>.crt`/`.key`, signed by `<ca>-ca`, with the extensions `ext`.
fn leaf(dir: &Path, ca: &str, leaf: &str, subject: &str, ext: &str) {
    fs::write(dir.join(format!("{leaf}.ext")), ext).expect("ext file");
    let (key, csr, crt) = (
        format!("{leaf}.key"),
        format!("{leaf}.csr"),
        format!("{leaf}.crt"),
    );
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
            &key,
            "-out",
            &csr,
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
            &format!("{ca}-ca.crt"),
            "-CAkey",
            &format!("{ca}-ca.key"),
            "-set_serial",
            "77",
            "-days",
            "1",
            "-extfile",
            &format!("{leaf}.ext"),
            "-out",
            &crt,
        ],
    );
}

/// (status, body) of an HTTPS request by curl to the kubelet server; `cert` names a
/// `<cert>.crt`/`.key` pair in `pki`.
fn curl(pki: &Path, port: u16, method: &str, path: &str, cert: Option<&str>) -> (String, String) {
    let mut c = Command::new("curl");
    c.current_dir(pki)
        .args([
            "-sS",
            "--max-time",
            "20",
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
        .stdin(Stdio::null())
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.to_string(), body.to_string())
}

const WEB: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'echo first; echo second; echo third; sleep 3600']\n";

/// No client certificate and another CA's certificate are 401 with the kubelet's text; a
/// certificate of the client CA reads /pods, /stats/summary and a running pod's
/// /containerLogs, runs a command through /run (CRI ExecSync), and kubectl reads the same with
/// it; the Node advertises the port; the read-only port still refuses writes.
#[test]
fn client_certificates_reach_pods_stats_and_logs_others_are_401() {
    let ctd = Containerd::start();
    let pki = ctd.tmp().join("pki");
    fs::create_dir_all(&pki).expect("pki dir");
    ca(&pki, "cluster");
    ca(&pki, "other");
    let serve =
        "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n";
    let client = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n";
    leaf(&pki, "cluster", "serving", "/CN=node1", serve);
    leaf(
        &pki,
        "cluster",
        "admin",
        "/O=system:masters/CN=admin",
        client,
    );
    leaf(
        &pki,
        "other",
        "stranger",
        "/O=system:masters/CN=admin",
        client,
    );
    // The serving certificate where nanolet looks for it until the certificate manager is
    // merged (<root-dir>/pki/kubelet.crt and .key, the kubelet's names).
    let root_pki = ctd.tmp().join("nanolet/root/pki");
    fs::create_dir_all(&root_pki).expect("root pki");
    fs::copy(pki.join("serving.crt"), root_pki.join("kubelet.crt")).expect("copy cert");
    fs::copy(pki.join("serving.key"), root_pki.join("kubelet.key")).expect("copy key");

    let port = free_port();
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--port={port}"),
            format!("--client-ca-file={}", pki.join("cluster-ca.crt").display()),
        ],
    );
    let listening = wait_for(TIMEOUT, || {
        let (code, _) = curl(&pki, port, "GET", "/healthz/ping", Some("admin"));
        (code == "200").then_some(())
    });
    assert!(
        listening.is_some(),
        "kubelet server never answered:\n{}",
        n.log_tail()
    );

    // Refusals first (they need no pod).
    let unauthorized = ("401".to_string(), "Unauthorized".to_string());
    assert_eq!(curl(&pki, port, "GET", "/pods", None), unauthorized);
    assert_eq!(
        curl(&pki, port, "GET", "/pods", Some("stranger")),
        unauthorized
    );
    assert_eq!(
        curl(&pki, port, "GET", "/stats/summary", None),
        unauthorized
    );

    n.write("web.yaml", WEB);
    let web = format!("web-{}", NODE.to_lowercase());
    n.wait_pod("web", "Running", |p| p["status"]["phase"] == "Running");
    // The log file fills as the container runs.
    let logs = wait_for(TIMEOUT, || {
        let (code, body) = curl(
            &pki,
            port,
            "GET",
            &format!("/containerLogs/default/{web}/c"),
            Some("admin"),
        );
        (code == "200" && body == "first\nsecond\nthird\n").then_some(body)
    });
    assert!(
        logs.is_some(),
        "/containerLogs never showed the three lines"
    );
    let (code, body) = curl(
        &pki,
        port,
        "GET",
        &format!("/containerLogs/default/{web}/c?tailLines=1"),
        Some("admin"),
    );
    assert_eq!((code.as_str(), body.as_str()), ("200", "third\n"));

    let (code, body) = curl(&pki, port, "GET", "/pods", Some("admin"));
    assert_eq!(code, "200", "{body}");
    let pods: Value = serde_json::from_str(&body).expect("PodList");
    assert!(
        pods["items"]
            .as_array()
            .is_some_and(|a| a.iter().any(|p| p["metadata"]["name"] == web.as_str())),
        "{body}"
    );
    let summary = wait_for(TIMEOUT, || {
        let (code, body) = curl(&pki, port, "GET", "/stats/summary", Some("admin"));
        let v: Value = serde_json::from_str(&body).ok()?;
        let has_web = v["pods"]
            .as_array()
            .is_some_and(|a| a.iter().any(|p| p["podRef"]["name"] == web.as_str()));
        (code == "200" && has_web).then_some(v)
    });
    assert!(summary.is_some(), "/stats/summary never listed {web}");

    // /run: POST, the command through CRI ExecSync, its output answered.
    let (code, body) = curl(
        &pki,
        port,
        "POST",
        &format!("/run/default/{web}/c?cmd=echo+hello+there"),
        Some("admin"),
    );
    assert_eq!((code.as_str(), body.as_str()), ("200", "hello there\n"));

    // The real kubectl with the client certificate, as the API server or an admin would.
    let home = n.dir.join("kube-home");
    fs::create_dir_all(&home).expect("home");
    let out = Command::new("kubectl")
        .env("HOME", &home)
        .env("KUBECONFIG", home.join("none"))
        .arg(format!("--server=https://127.0.0.1:{port}"))
        .arg(format!(
            "--certificate-authority={}",
            pki.join("cluster-ca.crt").display()
        ))
        .arg(format!(
            "--client-certificate={}",
            pki.join("admin.crt").display()
        ))
        .arg(format!("--client-key={}", pki.join("admin.key").display()))
        .args(["get", "--raw", "/stats/summary", "--request-timeout=20s"])
        .stdin(Stdio::null())
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("summary JSON");
    assert_eq!(v["node"]["nodeName"], NODE.to_lowercase());

    // The Node advertises the kubelet port; the read-only port still refuses writes.
    let node: Value = serde_json::from_str(
        &n.get(&format!("/api/v1/nodes/{}", NODE.to_lowercase()))
            .expect("node"),
    )
    .expect("node JSON");
    assert_eq!(
        node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"],
        port
    );
    let out = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"])
        .arg(format!("{}/pods", n.url()))
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "405");
    drop(n);
}

/// Threads of a process.
fn threads(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// 300 idle or dripping connections (more than the 128-connection cap) do not lock a client
/// with a certificate out, and the server's threads stay bounded by the cap.
#[test]
fn idle_and_slow_connections_do_not_lock_out_the_kubelet_server() {
    // Alone: hundreds of descriptors of this process, and answers are timed.
    let _alone = support::exclusive();
    let ctd = Containerd::start();
    let pki = ctd.tmp().join("pki");
    fs::create_dir_all(&pki).expect("pki dir");
    ca(&pki, "cluster");
    let serve =
        "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n";
    leaf(&pki, "cluster", "serving", "/CN=node1", serve);
    leaf(
        &pki,
        "cluster",
        "admin",
        "/CN=admin",
        "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
    );
    let root_pki = ctd.tmp().join("nanolet/root/pki");
    fs::create_dir_all(&root_pki).expect("root pki");
    fs::copy(pki.join("serving.crt"), root_pki.join("kubelet.crt")).expect("copy cert");
    fs::copy(pki.join("serving.key"), root_pki.join("kubelet.key")).expect("copy key");
    let port = free_port();
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--port={port}"),
            format!("--client-ca-file={}", pki.join("cluster-ca.crt").display()),
        ],
    );
    let ready = wait_for(TIMEOUT, || {
        (curl(&pki, port, "GET", "/healthz/ping", Some("admin")).0 == "200").then_some(())
    });
    assert!(
        ready.is_some(),
        "kubelet server never answered:\n{}",
        n.log_tail()
    );
    let pid = n.child.as_ref().expect("child").id();
    let threads0 = threads(pid);

    let mut conns: Vec<std::net::TcpStream> = (0..300)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect"))
        .collect();
    // Every third one drips the start of a TLS ClientHello, a byte at a time.
    let mut worst = Duration::ZERO;
    let mut max_threads = threads0;
    let until = Instant::now() + Duration::from_secs(4);
    let mut k = 0;
    while Instant::now() < until {
        for (i, c) in conns.iter_mut().enumerate() {
            if i % 3 == 0 {
                let _ = std::io::Write::write(c, &[0x16, 0x03, 0x01][k % 3..k % 3 + 1]);
            }
        }
        k += 1;
        let t = Instant::now();
        let (code, body) = curl(&pki, port, "GET", "/healthz/ping", Some("admin"));
        worst = worst.max(t.elapsed());
        assert_eq!(
            (code.as_str(), body.as_str()),
            ("200", "ok"),
            "during the flood"
        );
        max_threads = max_threads.max(threads(pid));
    }
    println!("secure flood: threads {threads0} -> max {max_threads}, slowest answer {worst:?}");
    assert!(worst < Duration::from_secs(3), "slowest answer {worst:?}");
    // One thread per connection, at most 128 of them.
    assert!(
        max_threads <= threads0 + 130,
        "threads grew from {threads0} to {max_threads}"
    );
    // Idle ones are closed by the server (the oldest waiting at the cap, or the 10 s
    // handshake timeout).
    let last = conns.pop().expect("a connection");
    last.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let mut buf = Vec::new();
    let read = std::io::Read::read_to_end(&mut &last, &mut buf);
    assert!(
        read.is_ok(),
        "the server never closed an idle connection: {read:?}"
    );
    drop(conns);
}
