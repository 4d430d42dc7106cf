//! CRI streaming on a real containerd (its CRI plugin's streaming server): `nanolet exec -i`
//! and `-it` (stdin, a TTY on a pseudo-terminal, the terminal size, exit codes, the terminal
//! restored), `nanolet port-forward` (bytes both ways), and the kubelet-port proxy
//! (`server::stream::proxy_upgrade_with`) carrying a WebSocket exec to containerd's URL.

use nanolet_test_support as support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nanolet::cri::Runtime;
use nanolet::server::stream;
use nanolet::server::ws::{self, Message, WsReader, WsWriter};
use support::agent::{NODE, Nanolet};
use support::{Containerd, wait_for};

/// An echo server on 8080 (greets, then echoes each connection's bytes; `-ll`: one process per
/// connection, always listening) and a shell.
pub(crate) const SHELL: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: shell\nspec:\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [nc, -ll, -p, '8080', -e, sh, -c, 'echo hello-from-pod; cat']\n";

fn pod_name() -> String {
    format!("shell-{}", NODE.to_lowercase())
}

fn nanolet(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nanolet"));
    c.args(args);
    c
}

/// One agent and the shell pod for every step (containerd starts are the slow part).
#[test]
fn exec_port_forward_and_the_proxy_reach_a_container() {
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    n.write("shell.yaml", SHELL);
    n.wait_phase("shell", "Running");
    let endpoint = format!("--container-runtime-endpoint={}", ctd.endpoint());
    exec_with_stdin_passes_streams_and_the_exit_code(&endpoint);
    exec_with_a_tty_on_a_pty(&endpoint);
    port_forward_moves_bytes_both_ways(&endpoint);
    proxy_carries_a_websocket_exec_to_containerd(&ctd);
    kubectl_exec_through_the_proxy(&ctd, &n);
}

/// `nanolet exec -i`: stdin reaches the command, stdout and stderr come back apart, the exit
/// code is the v4 Status's ExitCode cause.
fn exec_with_stdin_passes_streams_and_the_exit_code(endpoint: &str) {
    let pod = pod_name();
    let mut child = nanolet(&[
        "exec",
        "-i",
        &pod,
        endpoint,
        "--",
        "sh",
        "-c",
        "read x; echo got:$x; echo oops >&2; exit 5",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn nanolet exec -i");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"line-one\n")
        .expect("write stdin");
    let out = child.wait_with_output().expect("nanolet exec -i");
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "got:line-one\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "oops\n");

    // Success is exit 0 (a Success Status), and -t without a terminal falls back as kubectl.
    let out = nanolet(&["exec", "-it", &pod, endpoint, "--", "echo", "plain"])
        .stdin(Stdio::null())
        .output()
        .expect("nanolet exec -it without a terminal");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "plain\n");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("Unable to use a TTY - input is not a terminal or the right kind of file"),
        "{out:?}"
    );
}

/// `nanolet exec -it` on a pseudo-terminal: the remote TTY gets the local size (resize channel)
/// and its changes (SIGWINCH), input goes out raw, the exit code comes back, and the local
/// terminal's mode is restored afterwards.
fn exec_with_a_tty_on_a_pty(endpoint: &str) {
    let pod = pod_name();
    let mut cmd = nanolet(&["exec", "-it", &pod, endpoint, "--", "sh", "-c", TTY_SCRIPT]);
    tty_session(&mut cmd, "nanolet exec -it");
}

/// The remote side of a TTY session: waits for the local size (the initial size races the
/// command's start, as with kubectl), reads a line, waits for the new size, exits 4.
pub(crate) const TTY_SCRIPT: &str = "wait_size() { i=0; while [ \"$(stty size 2>/dev/null)\" != \"$1\" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; echo size:$(stty size); }; \
                  wait_size '33 101'; read x; echo tty-got:$x; wait_size '20 60'; exit 4";

/// Runs `cmd` (a client running [`TTY_SCRIPT`] with a TTY) on a pseudo-terminal of 33x101 and
/// checks: the size arrives, the terminal is raw meanwhile, typed input reaches the remote
/// TTY, a resize plus SIGWINCH arrives, exit code 4, the terminal's mode restored.
pub(crate) fn tty_session(cmd: &mut Command, what: &str) {
    use nix::pty::{Winsize, openpty};
    use nix::sys::termios::{LocalFlags, tcgetattr};
    let size = Winsize {
        ws_row: 33,
        ws_col: 101,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = openpty(Some(&size), None).expect("openpty");
    let before = tcgetattr(&pty.slave).expect("termios before");
    let dup = |fd: &OwnedFd| Stdio::from(fd.try_clone().expect("dup slave"));
    let mut child = cmd
        .stdin(dup(&pty.slave))
        .stdout(dup(&pty.slave))
        .stderr(dup(&pty.slave))
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let master = std::fs::File::from(pty.master);
    let mut reader = master.try_clone().expect("clone master");
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    // EIO comes only once every slave descriptor is closed: the test holds one, so the thread
    // ends when the test drops `pty.slave` after the child exits.
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(k) = reader.read(&mut buf) {
            if k == 0 || tx.send(buf[..k].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut text = String::new();
    let wait_text = |want: &str, text: &mut String| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !text.contains(want) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(b) => text.push_str(&String::from_utf8_lossy(&b)),
                Err(_) => panic!("{what}: no {want:?} in the terminal's output: {text:?}"),
            }
        }
    };
    wait_text("size:33 101", &mut text);
    let raw = tcgetattr(&pty.slave).expect("termios during");
    assert!(
        !raw.local_flags.contains(LocalFlags::ECHO),
        "raw mode while the command runs"
    );
    (&master).write_all(b"abc\r").expect("type into the pty");
    wait_text("tty-got:abc", &mut text);
    assert!(
        !text.contains("abc\r\nabc"),
        "typed once, echoed by the remote TTY only: {text:?}"
    );
    let new = nix::libc::winsize {
        ws_row: 20,
        ws_col: 60,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from the pointer, valid for the call.
    let r = unsafe {
        nix::libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&master),
            nix::libc::TIOCSWINSZ,
            &new,
        )
    };
    assert_eq!(r, 0, "set the pty size");
    // The child is not the pty's session leader, so the kernel does not signal it: as a terminal
    // emulator's shell would be signalled, send SIGWINCH ourselves.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGWINCH).expect("SIGWINCH");
    wait_text("size:20 60", &mut text);
    let status = child.wait().expect("the TTY client");
    assert_eq!(status.code(), Some(4), "{what}: {text}");
    let after = tcgetattr(&pty.slave).expect("termios after");
    assert_eq!(
        (after.local_flags, after.input_flags, after.output_flags),
        (before.local_flags, before.input_flags, before.output_flags),
        "raw mode restored on exit"
    );
}

/// Kills the child it holds when dropped (the port-forward runs until interrupted).
pub(crate) struct KillOnDrop(pub(crate) Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Drives a port-forward client (`nanolet port-forward` or `kubectl port-forward ... :8080`,
/// whose first line is kubectl's "Forwarding from 127.0.0.1:PORT -> 8080") to the echo pod of
/// [`SHELL`]: `rounds` connections one after the other, each greeted by the pod and echoing a
/// line of `bytes` bytes. `context` adds to a failure's message. The client is killed at the end.
pub(crate) fn forward_and_echo(
    cmd: &mut Command,
    what: &str,
    rounds: usize,
    bytes: usize,
    context: &dyn Fn() -> String,
) {
    let mut pf = KillOnDrop(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}")),
    );
    let mut lines = BufReader::new(pf.0.stdout.take().expect("stdout"));
    let mut first = String::new();
    lines.read_line(&mut first).expect("Forwarding line");
    let local = first
        .strip_prefix("Forwarding from ")
        .and_then(|r| r.strip_suffix(" -> 8080\n"))
        .unwrap_or_else(|| panic!("{what}: unexpected first line {first:?}"))
        .to_string();
    for round in 0..rounds {
        // Until the pod's nc listens (it starts with the container), a connection is refused
        // in the pod and ends at once here: poll for the greeting.
        let greeted = wait_for(Duration::from_secs(20), || {
            let c = TcpStream::connect(&local).ok()?;
            c.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
            let mut r = BufReader::new(c.try_clone().ok()?);
            let mut greet = String::new();
            r.read_line(&mut greet).ok()?;
            (greet == "hello-from-pod\n").then_some((c, r))
        });
        let Some((mut c, mut r)) = greeted else {
            let _ = pf.0.kill();
            let mut err = String::new();
            if let Some(mut e) = pf.0.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            panic!(
                "{what}, round {round}: no greeting from the pod: {err}\n{}",
                context()
            );
        };
        let msg = format!("ping-{round}-{}\n", "x".repeat(bytes));
        c.write_all(msg.as_bytes()).expect("send to the pod");
        let mut echo = String::new();
        r.read_line(&mut echo).expect("echo from the pod");
        assert_eq!(echo.len(), msg.len(), "{what}, round {round}");
        assert_eq!(echo, msg, "{what}, round {round}");
    }
}

/// `nanolet port-forward POD :8080`: three connections one after the other, each greeted by
/// the pod and echoing 70 KB.
fn port_forward_moves_bytes_both_ways(endpoint: &str) {
    let pod = pod_name();
    let mut cmd = nanolet(&["port-forward", &pod, ":8080", endpoint]);
    forward_and_echo(&mut cmd, "nanolet port-forward", 3, 70_000, &String::new);
}

/// The kubelet port's proxy: a plain TCP listener runs `proxy_upgrade_with` to the URL CRI Exec
/// answered; a WebSocket client speaks v4.channel.k8s.io through it.
fn proxy_carries_a_websocket_exec_to_containerd(ctd: &Containerd) {
    let rt = ctd.runtime();
    let pod = pod_name();
    let cid = container_id(&rt, &pod);
    let kind = stream::exec_kind(
        &cid,
        "command=sh&command=-c&command=echo%20via-proxy%3B%20head%20-n%201%3B%20exit%202&input=1&output=1&error=1",
    )
    .expect("query");
    let url = stream::stream_url(&rt, kind).expect("CRI Exec URL");
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    // Attach and PortForward answer URLs of the same server (the proto's field numbers are
    // runtime.v1's, or containerd would refuse or misread the requests).
    let attach = stream::stream_url(&rt, stream::attach_kind(&cid, "output=1").expect("query"))
        .expect("CRI Attach URL");
    assert!(attach.contains("/attach/"), "{attach}");
    let sandbox = stream::find_sandbox(&rt, "default", &pod, None).expect("the shell sandbox");
    let pf = stream::port_forward_kind(&sandbox, "port=8080", true).expect("query");
    let pf_url = stream::stream_url(&rt, pf).expect("CRI PortForward URL");
    assert!(pf_url.contains("/portforward/"), "{pf_url}");
    let missing = stream::exec_kind("no-such-container", "output=1&command=true").expect("query");
    let e = stream::stream_url(&rt, missing).expect_err("no such container");
    assert_eq!(e.http_status(), 404, "{e}");

    let front = TcpListener::bind("127.0.0.1:0").expect("bind");
    let faddr = front.local_addr().expect("addr");
    let proxy = std::thread::spawn(move || {
        let (mut c, _) = front.accept().expect("accept");
        let (line, headers) = ws::read_response_head(&mut c).expect("request head");
        let method = line.split(' ').next().unwrap_or("GET").to_string();
        stream::proxy_upgrade_with(&mut c, &method, &headers, &url, Duration::from_secs(60))
    });
    let (sock, proto) = ws::connect(
        &format!("http://{faddr}/exec/default/shell/c?command=ignored"),
        &[ws::V4_CHANNEL_PROTOCOL],
    )
    .expect("WebSocket through the proxy");
    assert_eq!(proto, ws::V4_CHANNEL_PROTOCOL);
    let mut w = WsWriter::new(sock.try_clone().expect("clone"));
    w.send_channel(0, b"stdin-through-proxy\n").expect("stdin");
    let mut r = WsReader::new(sock.try_clone().expect("clone"));
    let (mut out, mut status) = (Vec::new(), Vec::new());
    loop {
        match r.read_message().expect("message") {
            Some(Message::Data { data, .. }) => match data.split_first() {
                Some((1, rest)) => out.extend_from_slice(rest),
                Some((3, rest)) => status.extend_from_slice(rest),
                _ => {}
            },
            Some(Message::Close(..)) | None => break,
            Some(_) => {}
        }
    }
    assert_eq!(
        String::from_utf8_lossy(&out),
        "via-proxy\nstdin-through-proxy\n"
    );
    let v: serde_json::Value = serde_json::from_slice(&status).expect("v4 Status JSON");
    assert_eq!(v["status"], "Failure", "{v}");
    assert_eq!(v["reason"], "NonZeroExitCode", "{v}");
    assert_eq!(v["details"]["causes"][0]["reason"], "ExitCode", "{v}");
    assert_eq!(v["details"]["causes"][0]["message"], "2", "{v}");
    let _ = w.close();
    proxy
        .join()
        .expect("proxy thread")
        .expect("proxy ends cleanly");
}

/// The real kubectl against a minimal pods API whose `exec` subresource is `proxy_upgrade_with`
/// to containerd's URL (what the API server's node proxy and the kubelet port do together):
/// kubectl tries WebSocket v5, containerd 1.6 refuses it, kubectl falls back to SPDY, and the
/// SPDY stream passes through the proxy: stdin in, stdout out, the exit code back.
fn kubectl_exec_through_the_proxy(ctd: &Containerd, n: &Nanolet) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let rt = Arc::new(ctd.runtime());
    let pod = pod_name();
    let cid = container_id(rt.as_ref(), &pod);
    let api = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = api.local_addr().expect("addr");
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let server = {
        let (stop, seen, pod) = (stop.clone(), seen.clone(), pod.clone());
        std::thread::spawn(move || {
            for conn in api.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(c) = conn else { continue };
                let (rt, seen, pod, cid) = (rt.clone(), seen.clone(), pod.clone(), cid.clone());
                std::thread::spawn(move || mini_api(c, rt.as_ref(), &pod, &cid, &seen));
            }
        })
    };
    let home = n.dir.join("kube-home-streaming");
    std::fs::create_dir_all(&home).expect("kube home");
    let mut child = Command::new("kubectl")
        .env("HOME", &home)
        .env("KUBECONFIG", home.join("none"))
        .arg(format!("--server=http://{addr}"))
        .arg(format!("--cache-dir={}", home.join("cache").display()))
        .args(["exec", "-i", &pod, "-c", "c", "--", "sh", "-c"])
        .arg("read x; echo kubectl-got:$x; echo to-stderr >&2; exit 6")
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
    let seen_all = seen;
    let seen = seen_all.lock().map(|g| g.clone()).unwrap_or_default();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "kubectl-got:hello\n",
        "{out:?}\nrequests: {seen:#?}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("to-stderr"),
        "{out:?}"
    );
    assert_eq!(out.status.code(), Some(6), "{out:?}\nrequests: {seen:#?}");
    kubectl_port_forward_through_the_proxy(&home, addr, &pod, &seen_all);
    // kubectl exec -it: SPDY with a TTY and its resize stream, through the proxy.
    let mut cmd = Command::new("kubectl");
    cmd.env("HOME", &home)
        .env("KUBECONFIG", home.join("none"))
        .arg(format!("--server=http://{addr}"))
        .arg(format!("--cache-dir={}", home.join("cache").display()))
        .args(["exec", "-it", &pod, "-c", "c", "--", "sh", "-c", TTY_SCRIPT]);
    tty_session(&mut cmd, "kubectl exec -it");
    let seen = seen_all.lock().map(|g| g.clone()).unwrap_or_default();
    let exec_upgrades: Vec<&String> = seen
        .iter()
        .filter(|r| r.contains("/exec?") && !r.contains("tty=true"))
        .collect();
    // kubectl 1.32: WebSocket (v5) first; containerd 1.6 refuses it (relayed as is), then SPDY.
    assert_eq!(exec_upgrades.len(), 2, "{seen:#?}");
    assert!(
        exec_upgrades[0].contains("(Upgrade: websocket)"),
        "{seen:#?}"
    );
    assert!(
        exec_upgrades[1].starts_with("POST ") && exec_upgrades[1].contains("(Upgrade: SPDY/3.1)"),
        "{seen:#?}"
    );
    assert!(
        seen.iter().any(|r| r.starts_with("POST ")
            && r.contains("/exec?")
            && r.contains("tty=true")
            && r.contains("(Upgrade: SPDY/3.1)")),
        "kubectl exec -it over SPDY: {seen:#?}"
    );
    let pf: Vec<&String> = seen.iter().filter(|r| r.contains("/portforward")).collect();
    assert!(
        pf.iter()
            .any(|r| r.starts_with("POST ") && r.contains("(Upgrade: SPDY/3.1)")),
        "kubectl port-forward fell back to SPDY: {seen:#?}"
    );
    stop.store(true, Ordering::SeqCst);
    let _ = TcpStream::connect(addr);
    server.join().expect("mini API thread");
}

/// The shell pod's container, found as the secure port finds it (`find_container`).
fn container_id(rt: &dyn Runtime, pod: &str) -> String {
    wait_for(Duration::from_secs(10), || {
        stream::find_container(rt, "default", pod, None, "c").ok()
    })
    .expect("the shell container")
}

/// One connection of the minimal API: GET the pod, or an exec upgrade proxied to containerd.
fn mini_api(
    mut c: TcpStream,
    rt: &dyn Runtime,
    pod: &str,
    cid: &str,
    seen: &std::sync::Mutex<Vec<String>>,
) {
    let Ok((line, headers)) = ws::read_response_head(&mut c) else {
        return;
    };
    let upgrade = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("Upgrade"))
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    if let Ok(mut g) = seen.lock() {
        g.push(format!("{line} (Upgrade: {upgrade})"));
    }
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if path.ends_with("/portforward") {
        // The ports come per SPDY stream; a WebSocket attempt (kubectl's tunneling) gets
        // containerd's refusal relayed.
        let sandbox = rt
            .list_containers()
            .ok()
            .and_then(|cs| cs.into_iter().find(|x| x.id == cid))
            .map(|x| x.sandbox_id)
            .unwrap_or_default();
        let url = stream::port_forward_kind(&sandbox, query, false)
            .and_then(|k| stream::stream_url(rt, k));
        if let Ok(url) = url {
            let _ =
                stream::proxy_upgrade_with(&mut c, method, &headers, &url, Duration::from_secs(60));
        }
        return;
    }
    if path.ends_with("/exec") {
        // The API server's PodExecOptions query becomes the kubelet's (input/output/error).
        let q = query
            .replace("stdin=true", "input=1")
            .replace("stdout=true", "output=1")
            .replace("stderr=true", "error=1")
            .replace("tty=true", "tty=1");
        let url = stream::exec_kind(cid, &q).and_then(|k| stream::stream_url(rt, k));
        match url {
            Ok(url) => {
                let _ = stream::proxy_upgrade_with(
                    &mut c,
                    method,
                    &headers,
                    &url,
                    Duration::from_secs(60),
                );
            }
            Err(e) => {
                let body = e.to_string();
                let _ = write!(
                    c,
                    "HTTP/1.1 {} Error\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    e.http_status(),
                    body.len()
                );
            }
        }
        return;
    }
    // Just enough discovery for kubectl to map "pods".
    let body = if path == "/version" {
        r#"{"major":"1","minor":"32","gitVersion":"v1.32.0"}"#.to_string()
    } else if path == "/api" {
        r#"{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[{"clientCIDR":"0.0.0.0/0","serverAddress":"127.0.0.1"}]}"#.to_string()
    } else if path == "/apis" {
        r#"{"kind":"APIGroupList","apiVersion":"v1","groups":[]}"#.to_string()
    } else if path == "/api/v1" {
        r#"{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["get","list"],"shortNames":["po"]},{"name":"pods/exec","singularName":"","namespaced":true,"kind":"PodExecOptions","verbs":["create","get"]}]}"#.to_string()
    } else if path == format!("/api/v1/namespaces/default/pods/{pod}") {
        serde_json::json!({
            "kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": pod, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "localhost/busybox:1.36"}]},
            "status": {"phase": "Running"},
        })
        .to_string()
    } else {
        let _ = write!(
            c,
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        return;
    };
    let _ = write!(
        c,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// `kubectl port-forward` through the minimal API: bytes both ways to the pod's echo server.
fn kubectl_port_forward_through_the_proxy(
    home: &std::path::Path,
    addr: std::net::SocketAddr,
    pod: &str,
    seen: &std::sync::Mutex<Vec<String>>,
) {
    let mut cmd = Command::new("kubectl");
    cmd.env("HOME", home)
        .env("KUBECONFIG", home.join("none"))
        .arg(format!("--server=http://{addr}"))
        .arg(format!("--cache-dir={}", home.join("cache").display()))
        .args(["port-forward", "--address=127.0.0.1", pod, ":8080"]);
    let requests = || {
        let seen = seen.lock().map(|g| g.clone()).unwrap_or_default();
        format!("requests: {seen:#?}")
    };
    forward_and_echo(&mut cmd, "kubectl port-forward", 1, 20, &requests);
}
