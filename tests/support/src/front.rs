//! The double's HTTPS front: terminates TLS (rustls), learns the client certificate's identity
//! (`tls::Peer`), and hands each request to the plain tiny_http double over a loopback
//! connection whose local address it registers with that identity (the double looks the
//! peer up by the request's remote address; nothing a client sends can set it). Requests for
//! the node proxy subresources (pods/log, pods/exec, pods/attach, pods/portforward,
//! nodes/NAME/proxy) are answered here instead: the front dials the kubelet over TLS with the
//! API server's kubelet-client certificate and relays, upgrade-aware (a 101 and then bytes
//! both ways) or streaming (`kubectl logs -f`), as kube-apiserver's UpgradeAwareHandler.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::tls::{Peer, Shared};

type ServerTls = rustls::StreamOwned<rustls::ServerConnection, TcpStream>;
type ClientTls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A parsed request head.
#[derive(Clone, Debug)]
pub struct Head {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    pub headers: Vec<(String, String)>,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn content_length(&self) -> usize {
        self.header("Content-Length")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    fn chunked(&self) -> bool {
        self.header("Transfer-Encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    }

    pub fn is_upgrade(&self) -> bool {
        self.header("Upgrade").is_some()
            && self
                .header("Connection")
                .is_some_and(|v| v.to_ascii_lowercase().contains("upgrade"))
    }
}

/// What the double decides for a request the front sees.
pub enum Route {
    /// Not a proxy subresource: to the tiny_http double.
    Pass,
    /// An answer from the double itself (status, JSON body), e.g. 401 or 404.
    Reply(u16, String),
    /// Dial the kubelet at `addr` and send `target` (path and query) there. `log`: a non-2xx
    /// answer becomes a `Status` (kube-apiserver's GenericHttpResponseChecker for pods/log).
    Dial {
        addr: SocketAddr,
        target: String,
        log: bool,
    },
}

pub type Router = Arc<dyn Fn(&Head, &Peer) -> Route + Send + Sync>;

/// Everything a connection needs.
pub struct Ctx {
    pub tls: Arc<rustls::ServerConfig>,
    pub client_ca: Arc<dyn rustls::server::danger::ClientCertVerifier>,
    pub backend: SocketAddr,
    pub ids: Arc<Mutex<HashMap<SocketAddr, Peer>>>,
    pub router: Router,
    /// The kubelet-client side (cert, optional kubelet CA), read at each dial.
    pub kubelet_client: Arc<Mutex<Option<Arc<rustls::ClientConfig>>>>,
}

pub struct Front {
    pub port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Front {
    pub fn start(ctx: Ctx) -> Front {
        let listener = TcpListener::bind("127.0.0.1:0").expect("front listener");
        let port = listener.local_addr().expect("front addr").port();
        let stop = Arc::new(AtomicBool::new(false));
        let ctx = Arc::new(ctx);
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let ctx = ctx.clone();
                    std::thread::spawn(move || connection(&ctx, conn));
                }
            })
        };
        Front {
            port,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn connection(ctx: &Ctx, tcp: TcpStream) {
    let _ = tcp.set_nodelay(true);
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(conn) = rustls::ServerConnection::new(ctx.tls.clone()) else {
        return;
    };
    let mut s = rustls::StreamOwned::new(conn, tcp);
    while s.conn.is_handshaking() {
        if s.conn.complete_io(&mut s.sock).is_err() {
            return;
        }
    }
    let peer = crate::tls::peer(&s.conn, ctx.client_ca.as_ref());
    let client = Shared::new(s);
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let Some(head) = read_head(&client, &mut buf) else {
            break;
        };
        let route = (ctx.router)(&head, &peer);
        match route {
            Route::Pass => {
                if !pass(ctx, &client, &peer, &head, &mut buf) {
                    break;
                }
            }
            Route::Reply(code, body) => {
                let _ = take_body(&client, &head, &mut buf);
                let close = head
                    .header("Connection")
                    .is_some_and(|v| v.eq_ignore_ascii_case("close"));
                let resp = format!(
                    "HTTP/1.1 {code} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}\r\n{body}",
                    reason(code),
                    body.len(),
                    if close { "Connection: close\r\n" } else { "" }
                );
                if client.write_all(resp.as_bytes()).is_err() || close {
                    break;
                }
            }
            Route::Dial { addr, target, log } => {
                proxy(ctx, &client, &head, &mut buf, addr, &target, log);
                break;
            }
        }
    }
    client.close();
}

/// Forwards one request to the tiny_http double on a connection of its own (`Connection:
/// close`; the client's connection stays open) and relays the answer. A fresh backend
/// connection per request: tiny_http's task pool can leave a new connection's task queued
/// behind long-lived keep-alive connections when several arrive at once (kubectl's parallel
/// discovery), which stalled requests until the client's timeout. False: the client
/// connection is done.
fn pass(
    ctx: &Ctx,
    client: &Arc<Shared<ServerTls>>,
    peer: &Peer,
    head: &Head,
    buf: &mut Vec<u8>,
) -> bool {
    if head.chunked() {
        // client-go sends bodies with a length; chunked request bodies are not relayed.
        let body = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"chunked request bodies are not supported by the test double","reason":"BadRequest","code":400}"#;
        let resp = format!(
            "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = client.write_all(resp.as_bytes());
        return false;
    }
    let Some(body) = take_body(client, head, buf) else {
        return false;
    };
    let Ok(mut b) = TcpStream::connect(ctx.backend) else {
        return false;
    };
    let _ = b.set_nodelay(true);
    let addr = b.local_addr().ok();
    if let Some(a) = addr {
        ctx.ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(a, peer.clone());
    }
    let sent = b
        .write_all(&raw_head(
            head,
            &head.target,
            &[("Connection", "close".into())],
        ))
        .and_then(|()| b.write_all(&body))
        .is_ok();
    let ok = sent && relay_back(client, &mut b);
    if let Some(a) = addr {
        ctx.ids.lock().unwrap_or_else(|e| e.into_inner()).remove(&a);
    }
    let _ = b.shutdown(std::net::Shutdown::Both);
    ok && !head
        .header("Connection")
        .is_some_and(|v| v.eq_ignore_ascii_case("close"))
}

/// The double's answer to the client: its head without the `Connection: close` the front
/// asked for, then everything until the double closes (the body is framed by
/// Content-Length or chunks, so the client connection can carry on).
fn relay_back(client: &Shared<ServerTls>, b: &mut TcpStream) -> bool {
    let mut data = Vec::new();
    let mut chunk = vec![0u8; 16384];
    let end = loop {
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        match b.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => data.extend_from_slice(&chunk[..n]),
        }
    };
    let text = String::from_utf8_lossy(&data[..end]).into_owned();
    let mut out = String::new();
    for (i, line) in text.split("\r\n").enumerate() {
        if i > 0 && line.to_ascii_lowercase().starts_with("connection:") {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    if client.write_all(out.as_bytes()).is_err() || client.write_all(&data[end + 4..]).is_err() {
        return false;
    }
    loop {
        match b.read(&mut chunk) {
            Ok(0) => return true,
            Err(_) => return false,
            Ok(n) => {
                if client.write_all(&chunk[..n]).is_err() {
                    return false;
                }
            }
        }
    }
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// Reads until a whole request head is in `buf`, takes it out and parses it.
fn read_head(client: &Shared<ServerTls>, buf: &mut Vec<u8>) -> Option<Head> {
    let mut chunk = vec![0u8; 16384];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let text = String::from_utf8_lossy(&buf[..i]).into_owned();
            buf.drain(..i + 4);
            let mut lines = text.split("\r\n");
            let mut first = lines.next()?.split(' ');
            let (method, target) = (first.next()?.to_string(), first.next()?.to_string());
            let headers = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .collect();
            return Some(Head {
                method,
                target,
                headers,
            });
        }
        if buf.len() > 1 << 20 {
            return None;
        }
        match client.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The request's body (Content-Length bytes) out of `buf` and the stream.
fn take_body(client: &Shared<ServerTls>, head: &Head, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let want = head.content_length();
    let mut chunk = vec![0u8; 16384];
    while buf.len() < want {
        match client.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    Some(buf.drain(..want).collect())
}

/// The head as bytes, with `target`, without the headers named in `drop` (and with `extra`).
fn raw_head(head: &Head, target: &str, extra: &[(&str, String)]) -> Vec<u8> {
    let mut s = format!("{} {target} HTTP/1.1\r\n", head.method);
    let skip: Vec<&str> = extra.iter().map(|(k, _)| *k).collect();
    for (k, v) in &head.headers {
        if !skip.iter().any(|d| d.eq_ignore_ascii_case(k)) {
            s.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    for (k, v) in extra {
        if !v.is_empty() {
            s.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    s.push_str("\r\n");
    s.into_bytes()
}

fn dial(ctx: &Ctx, addr: SocketAddr) -> Result<ClientTls, String> {
    let cfg = ctx
        .kubelet_client
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .ok_or("no kubelet-client certificate")?;
    let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("dial {addr}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(10)));
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let conn = rustls::ClientConnection::new(cfg, name).map_err(|e| e.to_string())?;
    let mut s = rustls::StreamOwned::new(conn, tcp);
    while s.conn.is_handshaking() {
        s.conn
            .complete_io(&mut s.sock)
            .map_err(|e| format!("TLS to the kubelet at {addr}: {e}"))?;
    }
    Ok(s)
}

/// kube-apiserver's error for a backend it cannot reach (a 500 Status from the proxy's
/// error responder; the message names the failure).
fn backend_error(client: &Shared<ServerTls>, msg: &str) {
    let body = serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": format!("error trying to reach service: {msg}"),
        "reason": "InternalError", "code": 500})
    .to_string();
    let resp = format!(
        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(resp.as_bytes());
}

/// Relays one request to the kubelet and its answer back; the client connection ends after.
fn proxy(
    ctx: &Ctx,
    client: &Arc<Shared<ServerTls>>,
    head: &Head,
    buf: &mut Vec<u8>,
    addr: SocketAddr,
    target: &str,
    log: bool,
) {
    let upgrade = head.is_upgrade();
    let body = if upgrade {
        Some(Vec::new())
    } else {
        take_body(client, head, buf)
    };
    let Some(body) = body else { return };
    let kubelet = match dial(ctx, addr) {
        Ok(k) => Shared::new(k),
        Err(e) => return backend_error(client, &e),
    };
    // The client's credentials are for the API server, not the kubelet.
    let mut extra = vec![("Host", addr.to_string()), ("Authorization", String::new())];
    if !upgrade {
        extra.push(("Connection", "close".to_string()));
    }
    if kubelet.write_all(&raw_head(head, target, &extra)).is_err()
        || kubelet.write_all(&body).is_err()
    {
        return backend_error(client, "writing the request");
    }
    if upgrade {
        // Bytes already read past the head belong to the upgraded stream.
        if !buf.is_empty() && kubelet.write_all(buf).is_err() {
            return;
        }
        buf.clear();
        let (c, k) = (client.clone(), kubelet.clone());
        let up = std::thread::spawn(move || copy(&c, &k));
        copy(&kubelet, client);
        client.close();
        kubelet.close();
        let _ = up.join();
        return;
    }
    relay_response(client, &kubelet, log);
    kubelet.close();
}

fn copy<A, B>(from: &Shared<A>, to: &Shared<B>)
where
    A: Read + Write + crate::tls::Sock,
    B: Read + Write + crate::tls::Sock,
{
    let mut chunk = vec![0u8; 16384];
    loop {
        match from.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&chunk[..n]).is_err() {
                    break;
                }
            }
        }
    }
    to.closed.store(true, Ordering::SeqCst);
    from.closed.store(true, Ordering::SeqCst);
}

/// A plain answer: the head with `Connection: close` (the front ends the connection after
/// it), then the body as it comes (flushed per read: `logs -f` lines arrive at once).
fn relay_response(client: &Shared<ServerTls>, kubelet: &Shared<ClientTls>, log: bool) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 16384];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        match kubelet.read(&mut chunk) {
            Ok(0) | Err(_) => return backend_error(client, "no response from the kubelet"),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let text = String::from_utf8_lossy(&buf[..end]).into_owned();
    let rest = buf[end + 4..].to_vec();
    let code: u16 = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(502);
    if log && !(200..300).contains(&code) {
        return log_error(client, kubelet, code, &text, rest);
    }
    let mut out = String::new();
    for (i, line) in text.split("\r\n").enumerate() {
        if i > 0 && line.to_ascii_lowercase().starts_with("connection:") {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    if client.write_all(out.as_bytes()).is_err() || client.write_all(&rest).is_err() {
        return;
    }
    loop {
        match kubelet.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if client.write_all(&chunk[..n]).is_err() {
                    break;
                }
            }
        }
    }
}

/// pods/log: a kubelet error answer becomes a `Status` with its body as the message.
fn log_error(
    client: &Shared<ServerTls>,
    kubelet: &Shared<ClientTls>,
    code: u16,
    head: &str,
    mut body: Vec<u8>,
) {
    let mut chunk = vec![0u8; 16384];
    let len = head
        .split("\r\n")
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(50_000);
    while body.len() < len.min(50_000) {
        match kubelet.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    let reason = match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        _ => "InternalError",
    };
    let msg = String::from_utf8_lossy(&body).trim().to_string();
    let v = serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": msg, "reason": reason, "code": code});
    let s = v.to_string();
    let resp = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{s}",
        reason_text(code),
        s.len()
    );
    let _ = client.write_all(resp.as_bytes());
}

fn reason_text(code: u16) -> &'static str {
    reason(code)
}
