//! Security defaults against the real `nanolet` binary and a real containerd: the HTTP servers
//! under a connection flood and slow clients, request limits, admission hardening options and
//! the manifest-directory permission check.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::Containerd;
use common::agent::Nanolet;

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
    assert!(worst < Duration::from_secs(1), "slowest answer {worst:?}");
    assert!(
        max_threads <= threads0 + 2,
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
