//! A stand-in "kubelet" for the double's node proxy tests: an HTTPS server (rustls) with its
//! own serving CA that requires a client certificate from the API server's CA (as the
//! kubelet's `--client-ca-file`), and answers:
//! - `/containerLogs/...?previous=true`: the kubelet's 404 for a container without a previous
//!   instance;
//! - `/containerLogs/...`: 200 text/plain `target=<path?query>` then, with `follow=true`,
//!   `line 1`, and `line 2` once `release()` is called;
//! - an upgrade request (`Connection: Upgrade`): 101 with the same `Upgrade` and the
//!   `X-Stream-Protocol-Version` asked for first, then echoes every byte;
//! - anything else: 200 JSON `{"method", "target", "user", "groups"}`.
//! It records each request's (client CN, method, target).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::pki::Ca;

pub struct StandInKubelet {
    pub port: u16,
    pub seen: Arc<Mutex<Vec<(String, String, String)>>>,
    /// The `Upgrade` header of each upgrade request, in order.
    pub upgrades: Arc<Mutex<Vec<String>>>,
    release: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    _ca: Ca,
}

fn head(s: &mut impl Read) -> Option<(String, String, Vec<(String, String)>)> {
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => buf.push(b[0]),
            _ => return None,
        }
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    let mut lines = text.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (m, t) = (first.next()?.to_string(), first.next()?.to_string());
    let hs = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some((m, t, hs))
}

impl StandInKubelet {
    /// Starts it; `client_ca`: the CA whose client certificates it accepts.
    pub fn start(client_ca: &std::path::Path) -> StandInKubelet {
        let ca = Ca::new("standin-kubelet-ca");
        let files = ca.issue(
            ca.dir(),
            "kubelet",
            "standin-kubelet",
            &[],
            &["IP:127.0.0.1".to_string()],
            &["digital signature", "key encipherment", "server auth"],
        );
        let cfg = crate::tls::strict_server_config(&files.cert, &files.key, client_ca);
        let listener = TcpListener::bind("127.0.0.1:0").expect("stand-in kubelet");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let upgrades = Arc::new(Mutex::new(Vec::new()));
        let release = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (seen, release, stop) = (seen.clone(), release.clone(), stop.clone());
            let upgrades = upgrades.clone();
            std::thread::spawn(move || {
                for c in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(c) = c else { continue };
                    let (cfg, seen, release) = (cfg.clone(), seen.clone(), release.clone());
                    let upgrades = upgrades.clone();
                    std::thread::spawn(move || serve(c, cfg, &seen, &upgrades, &release));
                }
            })
        };
        StandInKubelet {
            port,
            seen,
            upgrades,
            release,
            stop,
            thread: Some(thread),
            _ca: ca,
        }
    }

    /// The CA that signed its serving certificate (for `set_kubelet_ca`).
    pub fn ca_cert(&self) -> std::path::PathBuf {
        self._ca.cert.clone()
    }

    /// Lets a `follow` log stream send its second line and end.
    pub fn release(&self) {
        self.release.store(true, Ordering::SeqCst);
    }

    pub fn upgrades(&self) -> Vec<String> {
        self.upgrades
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn seen(&self) -> Vec<(String, String, String)> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

fn serve(
    c: TcpStream,
    cfg: Arc<rustls::ServerConfig>,
    seen: &Mutex<Vec<(String, String, String)>>,
    upgrades: &Mutex<Vec<String>>,
    release: &AtomicBool,
) {
    let _ = c.set_read_timeout(Some(std::time::Duration::from_secs(20)));
    let Ok(conn) = rustls::ServerConnection::new(cfg) else {
        return;
    };
    let mut s = rustls::StreamOwned::new(conn, c);
    let Some((method, target, hs)) = head(&mut s) else {
        return;
    };
    let (cn, orgs) = s
        .conn
        .peer_certificates()
        .and_then(|c| c.first().and_then(|d| crate::tls::subject(d)))
        .unwrap_or_default();
    seen.lock().unwrap_or_else(|e| e.into_inner()).push((
        cn.clone(),
        method.clone(),
        target.clone(),
    ));
    let h = |k: &str| hs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    if let Some(up) = h("upgrade") {
        upgrades
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(up.clone());
        let proto = h("x-stream-protocol-version")
            .map(|v| v.split(',').next().unwrap_or("").trim().to_string())
            .unwrap_or_default();
        let resp = format!(
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: {up}\r\nX-Stream-Protocol-Version: {proto}\r\n\r\n"
        );
        let _ = s.write_all(resp.as_bytes());
        let _ = s.flush();
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 || s.write_all(&buf[..n]).is_err() || s.flush().is_err() {
                break;
            }
        }
        return;
    }
    if target.starts_with("/containerLogs/") && target.contains("previous=true") {
        // The kubelet's answer when there is no previous instance.
        let c = target
            .split('?')
            .next()
            .unwrap_or("")
            .rsplit('/')
            .next()
            .unwrap_or("");
        let body = format!("previous terminated container \"{c}\" in pod \"web\" not found");
        let resp = format!(
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = s.write_all(resp.as_bytes());
        let _ = s.flush();
        s.conn.send_close_notify();
        let _ = s.flush();
        return;
    }
    if target.starts_with("/containerLogs/") {
        let follow = target.contains("follow=true");
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n");
        let _ = s.write_all(format!("target={target}\n").as_bytes());
        if follow {
            let _ = s.write_all(b"line 1\n");
            let _ = s.flush();
            let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while !release.load(Ordering::SeqCst) && std::time::Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let _ = s.write_all(b"line 2\n");
        }
        let _ = s.flush();
        s.conn.send_close_notify();
        let _ = s.flush();
        return;
    }
    let body = serde_json::json!({"method": method, "target": target, "user": cn, "groups": orgs})
        .to_string();
    let resp = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = s.write_all(resp.as_bytes());
    let _ = s.flush();
    s.conn.send_close_notify();
    let _ = s.flush();
}

impl Drop for StandInKubelet {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
