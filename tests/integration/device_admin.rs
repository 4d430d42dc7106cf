//! The device's local administrator (issue 19 section 3): `nanolet admin-kubeconfig` writes a
//! 0600 kubeconfig whose certificate the running kubelet server trusts (made after the server
//! started), and the real kubectl uses it against the device's own API on the secure port:
//! `get pods`, `exec -i` (stdin, the exit code; the container defaulted as kube-apiserver),
//! `port-forward` (bytes both ways) on a real containerd. Without a certificate: 401; the same
//! exec path on the read-only port: refused, a WebSocket upgrade too.

use nanolet_test_support as support;

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::agent::{NODE, Nanolet, TIMEOUT, free_port};
use support::{Containerd, wait_for};

/// An echo server on 8080 (greets, then echoes each connection's bytes) in the only container.
const SHELL: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: shell\nspec:\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [nc, -ll, -p, '8080', -e, sh, -c, 'echo hello-from-pod; cat']\n";

/// Kills the child it holds when dropped (the port-forward runs until interrupted).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// curl's (status, body) for a request to the secure port without a client certificate.
fn curl_secure(port: u16, method: &str, path: &str) -> (String, String) {
    let out = Command::new("curl")
        .args(["-sS", "-k", "--max-time", "20", "-X", method])
        .args(["-w", "\n%{http_code}"])
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .stdin(Stdio::null())
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.to_string(), body.to_string())
}

fn kubectl(home: &Path, kubeconfig: &Path) -> Command {
    let mut c = Command::new("kubectl");
    c.env("HOME", home)
        .env_remove("KUBECONFIG")
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--cache-dir={}", home.join("cache").display()))
        .arg("--request-timeout=30s");
    c
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).expect("stat").permissions().mode() & 0o777
}

#[test]
fn kubectl_with_the_admin_kubeconfig_gets_execs_and_forwards() {
    let ctd = Containerd::start();
    let port = free_port();
    let n = Nanolet::start(&ctd, &[format!("--port={port}")]);
    let root = n.dir.join("root");
    let pki = root.join("pki");
    let listening = wait_for(TIMEOUT, || {
        (curl_secure(port, "GET", "/pods").0 == "401").then_some(())
    });
    assert!(
        listening.is_some(),
        "kubelet server never answered:\n{}",
        n.log_tail()
    );

    // The administrator's kubeconfig, made while nanolet runs.
    let conf = n.dir.join("admin/admin.conf");
    let out = Command::new(env!("CARGO_BIN_EXE_nanolet"))
        .args(["admin-kubeconfig", "--user=ops"])
        .arg(format!("--root-dir={}", root.display()))
        .arg(format!("--server=https://127.0.0.1:{port}"))
        .arg(format!("--out={}", conf.display()))
        .stdin(Stdio::null())
        .output()
        .expect("nanolet admin-kubeconfig");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(mode(&conf), 0o600, "the kubeconfig holds a key");
    assert_eq!(mode(&pki.join("nanolet-client-ca.key")), 0o600);
    assert!(pki.join("nanolet-client-ca.crt").exists());
    let text = fs::read_to_string(&conf).expect("kubeconfig");
    assert!(text.contains("client-key-data: "), "{text}");

    n.write("shell.yaml", SHELL);
    n.wait_phase("shell", "Running");
    let pod = format!("shell-{}", NODE.to_lowercase());
    let home = n.dir.join("kube-home-admin");
    fs::create_dir_all(&home).expect("kube home");

    // Without a certificate: the kubelet's 401, on the API paths too.
    let exec_path = format!("/api/v1/namespaces/default/pods/{pod}/exec?command=true&stdout=true");
    assert_eq!(
        curl_secure(port, "POST", &exec_path),
        ("401".into(), "Unauthorized".into())
    );
    assert_eq!(
        curl_secure(port, "GET", "/api/v1/namespaces/default/pods").0,
        "401"
    );

    // kubectl get pods.
    let out = kubectl(&home, &conf)
        .args(["get", "pods"])
        .stdin(Stdio::null())
        .output()
        .expect("kubectl get pods");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}\n{}", n.log_tail());
    assert!(
        stdout.contains(&pod) && stdout.contains("Running"),
        "{stdout}"
    );

    kubectl_exec(&home, &conf, &pod);
    kubectl_exec_tty(&home, &conf, &pod);
    kubectl_port_forward(&home, &conf, &pod);
    read_only_port_refuses_exec(&n, &pod);
    drop(n);
}

/// `kubectl exec -i` without `-c`: the only container, stdin in, stdout and stderr out, exit
/// code 3 (kubectl tries WebSocket v5, containerd refuses it, SPDY through the proxy).
fn kubectl_exec(home: &Path, conf: &Path, pod: &str) {
    let mut child = kubectl(home, conf)
        .args(["exec", "-i", pod, "--", "sh", "-c"])
        .arg("read x; echo admin-got:$x; echo to-stderr >&2; exit 3")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl on PATH");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"hello\n")
        .expect("kubectl stdin");
    let out = child.wait_with_output().expect("kubectl exec");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "admin-got:hello\n",
        "{out:?}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("to-stderr"),
        "{out:?}"
    );
    assert_eq!(out.status.code(), Some(3), "{out:?}");
}

/// `kubectl exec -it` on a pseudo-terminal of 33x101: the remote command has a TTY of the local
/// size (kube-apiserver's `tty=true` reaches the kubelet as `tty=1`, the size over the resize
/// stream), exit code 4.
fn kubectl_exec_tty(home: &Path, conf: &Path, pod: &str) {
    use nix::pty::{Winsize, openpty};
    let size = Winsize {
        ws_row: 33,
        ws_col: 101,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = openpty(Some(&size), None).expect("openpty");
    let dup = |fd: &std::os::fd::OwnedFd| Stdio::from(fd.try_clone().expect("dup slave"));
    // The initial size races the command's start (as with any kubectl): wait for it.
    let script = "i=0; while [ \"$(stty size)\" != '33 101' ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; [ -t 0 ] && echo size:$(stty size); exit 4";
    let mut child = KillOnDrop(
        kubectl(home, conf)
            .args(["exec", "-it", pod, "--", "sh", "-c", script])
            .stdin(dup(&pty.slave))
            .stdout(dup(&pty.slave))
            .stderr(dup(&pty.slave))
            .spawn()
            .expect("kubectl exec -it"),
    );
    let mut reader = std::fs::File::from(pty.master);
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    // Ends with EIO once the test drops its slave descriptor after the child exits.
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(k) = reader.read(&mut buf) {
            if k == 0 || tx.send(buf[..k].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut text = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !text.contains("size:33 101") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(b) => text.push_str(&String::from_utf8_lossy(&b)),
            Err(_) => panic!("kubectl exec -it: no TTY of 33x101: {text:?}"),
        }
    }
    let status = child.0.wait().expect("kubectl exec -it");
    assert_eq!(status.code(), Some(4), "{text:?}");
    drop(pty.slave);
}

/// `kubectl port-forward POD :8080`: two connections, each greeted by the pod and echoing.
fn kubectl_port_forward(home: &Path, conf: &Path, pod: &str) {
    let mut cmd = kubectl(home, conf);
    cmd.args(["port-forward", "--address=127.0.0.1", pod, ":8080"]);
    crate::streaming::forward_and_echo(
        &mut cmd,
        "kubectl port-forward (admin kubeconfig)",
        2,
        50_000,
        &String::new,
    );
}

/// The read-only port has no exec, attach or port-forward: GET and POST are refused, and a
/// WebSocket upgrade gets no 101.
fn read_only_port_refuses_exec(n: &Nanolet, pod: &str) {
    for sub in ["exec", "attach", "portforward"] {
        let url = format!(
            "{}/api/v1/namespaces/default/pods/{pod}/{sub}?command=sh&stdin=true&stdout=true&ports=8080",
            n.url()
        );
        for method in ["GET", "POST"] {
            let out = Command::new("curl")
                .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", method])
                .arg(&url)
                .output()
                .expect("curl");
            let code = String::from_utf8_lossy(&out.stdout).to_string();
            assert!(
                code == "404" || code == "405",
                "{method} {sub} on the read-only port: {code}"
            );
        }
        let addr = n.url().trim_start_matches("http://").to_string();
        let mut c = TcpStream::connect(&addr).expect("read-only port");
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let path = url.trim_start_matches(&format!("http://{addr}"));
        write!(
            c,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n"
        )
        .expect("send upgrade");
        let mut status = String::new();
        BufReader::new(&c)
            .read_line(&mut status)
            .expect("status line");
        assert!(
            status.starts_with("HTTP/1.1 404") || status.starts_with("HTTP/1.1 405"),
            "WebSocket {sub} on the read-only port: {status:?}"
        );
    }
}
