//! The local HTTP endpoints, on [`crate::server::httpd`] (bounded: one reactor thread, a small worker
//! pool, connection/size/time limits per server).
//!
//! - healthz server (`--healthz-bind-address:--healthz-port`, default 127.0.0.1:10248):
//!   `/healthz`, `/healthz/<check>`.
//! - read-only server (`--address:--read-only-port`, default 127.0.0.1:10255): `/healthz`,
//!   `/healthz/<check>`, `/pods` (a v1 PodList), `/manifests/errors` (nanolet extra),
//!   `/configz` (the redacted configuration), `/metrics` (Prometheus text), and the read-only
//!   Kubernetes API subset of [`crate::server::api`] (`/api`, `/apis`, `/version`, ...).
//!   With a token (`--read-only-token-file`) every request needs `Authorization: Bearer
//!   <token>`; 401 otherwise. The token is never logged or served.
//!
//! The healthz text mirrors the kubelet/apiserver healthz handler: `ok`; with `?verbose` one
//! `[+]name ok` line per check and `healthz check passed`; on failure (always verbose, status 500)
//! `[-]name failed: reason withheld` lines and `healthz check failed`. As there, the reasons are
//! not in the aggregate body (the read-only port may be exposed); `GET /healthz/<name>` answers
//! `internal server error: <reason>` for one check, and the reasons are logged at debug level.
//! `?exclude=<name>` skips a check, as in the apiserver.
//!
//! Only GET and HEAD are served (405 with `Allow: GET, HEAD` otherwise; a `Status` object on API
//! paths); unknown paths are 404. `follow=true` log requests are streamed on a thread of their
//! own (at most [`MAX_FOLLOWERS`] at once) so they never block the server.

pub mod api;
pub mod auth;
#[cfg(feature = "tls")]
pub mod auth_x509;
pub(crate) mod httpd;
#[cfg(feature = "tls")]
pub mod secure;
pub mod stream;
pub mod ws;

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use self::api::{ApiOutcome, logs::LogFollow};
use crate::api::PodList;
use crate::nodestatus::NodeContext;
use crate::server::httpd::Limits;
use crate::status::{HealthCheck, StatusStore};

/// A running server. `stop()` or dropping it stops its threads and closes the socket.
pub struct ServerHandle {
    server: Option<httpd::Server>,
    local_addr: SocketAddr,
}

impl ServerHandle {
    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops serving and waits for the server threads to finish.
    pub fn stop(mut self) {
        if let Some(server) = self.server.take() {
            server.stop();
            tracing::debug!(addr = %self.local_addr, "HTTP server stopped");
        }
    }
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("local_addr", &self.local_addr)
            .finish()
    }
}

/// At most this many `follow=true` log streams at once.
pub const MAX_FOLLOWERS: usize = 16;

/// What the read-only server serves besides the status store.
pub struct ReadOnlyOptions {
    pub node: NodeContext,
    /// The bearer token every request must carry; `None` serves without authentication.
    pub token: Option<String>,
    /// The `/configz` document (already redacted).
    pub configz: serde_json::Value,
    /// CPU-rate state for `/stats/summary` and `/metrics/resource`.
    pub stats: crate::stats::StatsProvider,
    /// The prober, once `kubelet::wiring` has started it (`/metrics/probes`).
    pub probes: Arc<std::sync::OnceLock<Arc<crate::prober::Prober>>>,
}

impl ReadOnlyOptions {
    pub fn new(node_name: &str) -> ReadOnlyOptions {
        ReadOnlyOptions {
            node: NodeContext::new(node_name),
            token: None,
            configz: serde_json::Value::Null,
            stats: crate::stats::StatsProvider::new(),
            probes: Arc::default(),
        }
    }
}

impl std::fmt::Debug for ReadOnlyOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOnlyOptions")
            .field("node", &self.node.node_name)
            .field(
                "token",
                &self.token.as_ref().map(|_| crate::util::redact::REDACTED),
            )
            .finish()
    }
}

/// Which set of endpoints a server exposes.
#[derive(Debug, Clone)]
enum Endpoints {
    Healthz,
    ReadOnly(Arc<ReadOnlyOptions>),
}

/// Starts the healthz server on `addr`.
pub fn spawn_healthz(addr: SocketAddr, store: Arc<StatusStore>) -> io::Result<ServerHandle> {
    spawn("healthz", addr, store, Endpoints::Healthz)
}

/// Starts the read-only API server on `addr`.
pub fn spawn_read_only(
    addr: SocketAddr,
    store: Arc<StatusStore>,
    options: ReadOnlyOptions,
) -> io::Result<ServerHandle> {
    spawn(
        "read-only",
        addr,
        store,
        Endpoints::ReadOnly(Arc::new(options)),
    )
}

fn spawn(
    kind: &'static str,
    addr: SocketAddr,
    store: Arc<StatusStore>,
    endpoints: Endpoints,
) -> io::Result<ServerHandle> {
    let stopping = Arc::new(AtomicBool::new(false));
    let followers = Arc::new(AtomicUsize::new(0));
    let limits = Limits {
        // The read-only port renders larger documents (/pods, /metrics); healthz is tiny.
        workers: if matches!(endpoints, Endpoints::ReadOnly(_)) {
            3
        } else {
            1
        },
        ..Limits::default()
    };
    let handler: httpd::Handler = {
        let stopping = Arc::clone(&stopping);
        Arc::new(move |request: &httpd::Request| {
            handle(kind, request, &store, &endpoints, &stopping, &followers)
        })
    };
    let server = httpd::Server::start(kind, addr, limits, stopping, handler)
        .map_err(|e| io::Error::other(format!("binding: {e}")))?;
    let local_addr = server.local_addr();
    tracing::info!(addr = %local_addr, "{kind} server listening");
    Ok(ServerHandle {
        server: Some(server),
        local_addr,
    })
}

fn handle(
    kind: &str,
    request: &httpd::Request,
    store: &Arc<StatusStore>,
    endpoints: &Endpoints,
    stopping: &Arc<AtomicBool>,
    followers: &Arc<AtomicUsize>,
) -> httpd::Response {
    let req = Req {
        method: request.method.clone(),
        url: request.target.clone(),
        authorization: request.header("Authorization").to_string(),
        accept: request.header("Accept").to_string(),
    };
    let reply = match route_request(endpoints, &req, store) {
        Outcome::Reply(r) => r,
        Outcome::Follow(follow) => {
            if followers.fetch_add(1, Ordering::SeqCst) >= MAX_FOLLOWERS {
                followers.fetch_sub(1, Ordering::SeqCst);
                api_reply(
                    429,
                    &api::status(
                        429,
                        "TooManyRequests",
                        "too many log streams are open; try again later",
                        None,
                    ),
                )
            } else {
                let (store, stopping, followers) = (
                    Arc::clone(store),
                    Arc::clone(stopping),
                    Arc::clone(followers),
                );
                let http11 = request.http11;
                return httpd::Response::Takeover(Box::new(move |stream| {
                    spawn_follower(stream, http11, follow, &store, &stopping, &followers)
                }));
            }
        }
    };
    tracing::trace!(method = %req.method, url = %req.url, status = reply.status, "{kind} server");
    httpd::Response::Full {
        status: reply.status,
        headers: reply
            .headers
            .into_iter()
            .map(|(n, v)| (n, v.to_string()))
            .collect(),
        body: reply.body,
    }
}

/// Routes one raw request (pure apart from reading the store; the fuzz target `http_request`
/// drives it): the status and body the server would answer, or `None` for a log stream.
pub fn answer_raw(raw: &[u8], store: &StatusStore, token: Option<&str>) -> Option<(u16, Vec<u8>)> {
    let request = match httpd::parse_head(raw, &Limits::default()) {
        httpd::Parse::Done { request, .. } => request,
        httpd::Parse::Reject(status, why) => return Some((status, why.as_bytes().to_vec())),
        httpd::Parse::Incomplete => return Some((400, b"incomplete".to_vec())),
    };
    let mut options = ReadOnlyOptions::new("fuzz-node");
    options.token = token.map(String::from);
    let req = Req {
        method: request.method.clone(),
        url: request.target.clone(),
        authorization: request.header("Authorization").to_string(),
        accept: request.header("Accept").to_string(),
    };
    match route_request(&Endpoints::ReadOnly(Arc::new(options)), &req, store) {
        Outcome::Reply(r) => Some((r.status, r.body)),
        Outcome::Follow(_) => None,
    }
}

/// Streams one container log (with `follow`, until the container stops) on its own thread,
/// with chunked encoding (HTTP/1.1) or until the connection closes (HTTP/1.0).
fn spawn_follower(
    stream: TcpStream,
    chunked: bool,
    follow: LogFollow,
    store: &Arc<StatusStore>,
    stopping: &Arc<AtomicBool>,
    followers: &Arc<AtomicUsize>,
) {
    let store = Arc::clone(store);
    let stopping = Arc::clone(stopping);
    let followers_t = Arc::clone(followers);
    let spawned = std::thread::Builder::new()
        .name("http-log-follow".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            let mut w = stream;
            let head = if chunked {
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            } else {
                "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
            };
            let result = w.write_all(head.as_bytes()).and_then(|()| {
                let mut out = ChunkWriter { inner: &mut w, chunked };
                follow.stream(&store, &mut out, &|| stopping.load(Ordering::SeqCst))?;
                if chunked {
                    out.inner.write_all(b"0\r\n\r\n")?;
                }
                out.inner.flush()
            });
            if let Err(e) = result {
                tracing::debug!(container = %follow.container, pod_uid = %follow.uid, "log stream ended: {e}");
            }
            followers_t.fetch_sub(1, Ordering::SeqCst);
        });
    if let Err(e) = spawned {
        followers.fetch_sub(1, Ordering::SeqCst);
        tracing::warn!("starting a log stream thread: {e}");
    }
}

/// Writes each `write_all` as one HTTP chunk.
struct ChunkWriter<'a> {
    inner: &'a mut dyn Write,
    chunked: bool,
}

impl io::Write for ChunkWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.chunked {
            // One write per chunk: over TLS one record, flushed by the caller.
            let mut chunk = format!("{:x}\r\n", buf.len()).into_bytes();
            chunk.extend_from_slice(buf);
            chunk.extend_from_slice(b"\r\n");
            self.inner.write_all(&chunk)?;
        } else {
            self.inner.write_all(buf)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The parts of a request routing looks at.
#[derive(Debug, Clone)]
struct Req {
    method: String,
    url: String,
    authorization: String,
    accept: String,
}

enum Outcome {
    Reply(Reply),
    Follow(LogFollow),
}

fn api_reply(status: u16, v: &serde_json::Value) -> Reply {
    let mut r = Reply::json(v);
    r.status = status;
    r
}

/// Constant-time comparison of the presented bearer token with the configured one.
fn token_ok(authorization: &str, token: &str) -> bool {
    let presented = authorization
        .strip_prefix("Bearer ")
        .or_else(|| authorization.strip_prefix("bearer "))
        .unwrap_or("")
        .trim();
    let (a, b) = (presented.as_bytes(), token.as_bytes());
    let mut diff = a.len() ^ b.len();
    for (i, x) in b.iter().enumerate() {
        diff |= usize::from(x ^ a.get(i).copied().unwrap_or(0));
    }
    diff == 0 && !token.is_empty()
}

fn route_request(endpoints: &Endpoints, req: &Req, store: &StatusStore) -> Outcome {
    let Endpoints::ReadOnly(opts) = endpoints else {
        return Outcome::Reply(route(endpoints, &req.method, &req.url, store));
    };
    let (path, query) = split_url(&req.url);
    if let Some(token) = &opts.token {
        if !token_ok(&req.authorization, token) {
            let mut r = if api::is_api_path(path) {
                api_reply(401, &api::status(401, "Unauthorized", "Unauthorized", None))
            } else {
                Reply::text(401, "Unauthorized\n".into())
            };
            r.headers.push(("WWW-Authenticate", "Bearer"));
            return Outcome::Reply(r);
        }
    }
    if api::is_api_path(path) {
        if !is_read(&req.method) {
            let mut r = api_reply(405, &api::method_not_allowed());
            r.headers.push(("Allow", "GET, HEAD"));
            return Outcome::Reply(r);
        }
        return match api::handle(&opts.node, store, path, query, &req.accept) {
            ApiOutcome::Follow(f) => Outcome::Follow(f),
            ApiOutcome::Response {
                status,
                content_type,
                body,
            } => Outcome::Reply(Reply {
                status,
                headers: vec![("Content-Type", content_type)],
                body,
            }),
        };
    }
    Outcome::Reply(route(endpoints, &req.method, &req.url, store))
}

/// A response, independent of the transport so routing can be tested directly.
#[derive(Debug, Clone, PartialEq)]
struct Reply {
    status: u16,
    headers: Vec<(&'static str, &'static str)>,
    body: Vec<u8>,
}

const TEXT: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json";

impl Reply {
    fn text(status: u16, body: String) -> Reply {
        Reply {
            status,
            headers: vec![
                ("Content-Type", TEXT),
                ("X-Content-Type-Options", "nosniff"),
            ],
            body: body.into_bytes(),
        }
    }

    fn json<T: serde::Serialize>(value: &T) -> Reply {
        match serde_json::to_vec(value) {
            Ok(body) => Reply {
                status: 200,
                headers: vec![("Content-Type", JSON)],
                body,
            },
            Err(e) => {
                tracing::error!("serializing response: {e}");
                Reply::text(
                    500,
                    "internal server error: cannot serialize the response\n".into(),
                )
            }
        }
    }
}

/// GET and HEAD are the only methods served.
fn is_read(method: &str) -> bool {
    method == "GET" || method == "HEAD"
}

fn route(endpoints: &Endpoints, method: &str, url: &str, store: &StatusStore) -> Reply {
    let (path, query) = split_url(url);
    let known = match path {
        "/healthz" => true,
        p if p.starts_with("/healthz/") => true,
        "/pods" | "/manifests/errors" | "/configz" | "/metrics" | "/stats/summary" | "/stats"
        | "/stats/" | "/metrics/resource" | "/metrics/cadvisor" | "/metrics/probes" => {
            matches!(endpoints, Endpoints::ReadOnly(_))
        }
        _ => false,
    };
    if !known {
        return Reply::text(404, "404 page not found\n".into());
    }
    if !is_read(method) {
        let mut r = Reply::text(405, "405 method not allowed\n".into());
        r.headers.push(("Allow", "GET, HEAD"));
        return r;
    }
    match path {
        "/healthz" => healthz(&checks(store), query, &node_conditions_text(store)),
        "/pods" => Reply::json(&PodList {
            kind: "PodList".into(),
            api_version: "v1".into(),
            metadata: serde_json::Map::new(),
            items: store.pods(),
        }),
        "/manifests/errors" => Reply::json(&store.manifest_errors()),
        "/configz" => match endpoints {
            Endpoints::ReadOnly(o) => Reply::json(&serde_json::json!({"kubeletconfig": o.configz})),
            Endpoints::Healthz => Reply::text(404, "404 page not found\n".into()),
        },
        "/metrics/probes" => {
            let totals = match endpoints {
                Endpoints::ReadOnly(o) => o.probes.get().map(|p| p.totals()).unwrap_or_default(),
                Endpoints::Healthz => vec![],
            };
            Reply {
                status: 200,
                headers: vec![("Content-Type", "text/plain; version=0.0.4; charset=utf-8")],
                body: crate::metrics::render_probes(&totals).into_bytes(),
            }
        }
        "/stats/summary" | "/stats" | "/stats/" | "/metrics/resource" | "/metrics/cadvisor" => {
            let Endpoints::ReadOnly(o) = endpoints else {
                return Reply::text(404, "404 page not found\n".into());
            };
            let pods = store.pods();
            let summary = o.stats.summary(
                o.node.runtime.as_deref(),
                &crate::stats::SummaryInput {
                    node_name: &o.node.node_name,
                    pods: &pods,
                    root_dir: &o.node.root_dir,
                    pod_logs_dir: &o.node.pod_logs_dir,
                },
            );
            let text = |body: String| Reply {
                status: 200,
                headers: vec![("Content-Type", "text/plain; version=0.0.4; charset=utf-8")],
                body: body.into_bytes(),
            };
            match path {
                "/metrics/resource" => text(crate::stats::resource_metrics(&summary)),
                "/metrics/cadvisor" => text(crate::stats::cadvisor_metrics(&summary)),
                _ => Reply::json(&summary),
            }
        }
        "/metrics" => Reply {
            status: 200,
            headers: vec![("Content-Type", "text/plain; version=0.0.4; charset=utf-8")],
            body: store.metrics().render(&store.pods()).into_bytes(),
        },
        p => {
            let name = p.trim_start_matches("/healthz/");
            match checks(store).into_iter().find(|c| c.name == name) {
                Some(c) if c.ok => Reply::text(200, "ok".into()),
                Some(c) => Reply::text(500, format!("internal server error: {}\n", c.message)),
                None => Reply::text(404, "404 page not found\n".into()),
            }
        }
    }
}

/// Path and query of a request target (origin-form, or absolute-form `http://host/path`).
fn split_url(url: &str) -> (&str, &str) {
    let mut target = url;
    for scheme in ["http://", "https://"] {
        if let Some(rest) = target.strip_prefix(scheme) {
            target = rest.find('/').map_or("/", |i| &rest[i..]);
        }
    }
    let target = target.split('#').next().unwrap_or("");
    match target.split_once('?') {
        Some((p, q)) => (p, q),
        None => (target, ""),
    }
}

/// The store's checks behind the always-passing `ping` check the kubelet also has.
fn checks(store: &StatusStore) -> Vec<HealthCheck> {
    let mut v = vec![HealthCheck {
        name: "ping".into(),
        ok: true,
        message: "ok".into(),
    }];
    v.extend(store.health());
    v
}

/// The node pressure conditions and what keeps the runtime from running pods, for
/// `/healthz?verbose` (information, never a failure: the kubelet's healthz stays ok under
/// pressure and with its runtime not ready, and a failing healthz would have systemd's
/// watchdog restart nanolet, which mends neither).
fn node_conditions_text(store: &StatusStore) -> String {
    let on = store.node_conditions();
    let cond = |n: &str| if on.contains_key(n) { "True" } else { "False" };
    let mut text = format!(
        "node conditions: MemoryPressure={} DiskPressure={} PIDPressure={}\n",
        cond("MemoryPressure"),
        cond("DiskPressure"),
        cond("PIDPressure")
    );
    for p in store.runtime_problems() {
        text.push_str(&format!("runtime cannot run pods: {}\n", p.message));
    }
    text
}

fn healthz(checks: &[HealthCheck], query: &str, info: &str) -> Reply {
    let mut verbose = false;
    let mut exclude: Vec<String> = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "verbose" => verbose = true,
            "exclude" => {
                exclude.extend(value.split(',').filter(|s| !s.is_empty()).map(String::from))
            }
            _ => {}
        }
    }
    let mut out = String::new();
    let mut failed: Vec<&HealthCheck> = Vec::new();
    for c in checks {
        if let Some(i) = exclude.iter().position(|e| *e == c.name) {
            exclude.remove(i);
            out.push_str(&format!("[+]{} excluded: ok\n", c.name));
        } else if c.ok {
            out.push_str(&format!("[+]{} ok\n", c.name));
        } else {
            out.push_str(&format!("[-]{} failed: reason withheld\n", c.name));
            failed.push(c);
        }
    }
    if !exclude.is_empty() {
        let names: Vec<String> = exclude.iter().map(|e| format!("{e:?}")).collect();
        out.push_str(&format!(
            "warn: some health checks cannot be excluded: no matches for {}\n",
            names.join(",")
        ));
    }
    if !failed.is_empty() {
        let details: Vec<String> = failed
            .iter()
            .map(|c| format!("{}: {}", c.name, c.message))
            .collect();
        tracing::debug!("healthz check failed: {}", details.join("; "));
        out.push_str("healthz check failed\n");
        return Reply::text(500, out);
    }
    if !verbose {
        return Reply::text(200, "ok".into());
    }
    out.push_str(info);
    out.push_str("healthz check passed\n");
    Reply::text(200, out)
}

/// The read-only server's token file is unusable (the token is never part of the message).
#[derive(Debug, thiserror::Error)]
#[error("read-only token file {}: {reason}", path.display())]
pub struct TokenFileError {
    pub path: std::path::PathBuf,
    pub reason: String,
}

/// Reads the read-only server's bearer token (the file's content, trimmed). The token itself
/// never appears in errors or logs.
pub fn read_token_file(path: &std::path::Path) -> Result<String, TokenFileError> {
    let err = |reason: String| TokenFileError {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(err("the file is empty".into()));
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(err(
            "the token must be one line without spaces or control characters".into(),
        ));
    }
    Ok(token.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    use crate::api::{ObjectMeta, Pod};
    use crate::config::ManifestError;

    fn pod() -> Pod {
        Pod {
            api_version: "v1".into(),
            kind: "Pod".into(),
            metadata: ObjectMeta {
                name: "web-node1".into(),
                namespace: "default".into(),
                uid: "0123456789abcdef0123456789abcdef".into(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn healthy_store() -> Arc<StatusStore> {
        let store = Arc::new(StatusStore::new(Duration::from_secs(300)));
        store.mark_sync();
        store.mark_relist();
        store.set_pod(pod());
        store.set_manifest_errors(vec![ManifestError {
            origin: "/etc/kubernetes/manifests/bad.yaml".into(),
            field: "spec.containers[0].image".into(),
            reason: "Required value".into(),
        }]);
        store
    }

    struct Resp {
        status: u16,
        headers: String,
        body: String,
    }

    /// A minimal HTTP/1.0 client: the server closes the connection after the response.
    fn request(addr: SocketAddr, method: &str, path: &str) -> Resp {
        request_with(addr, method, path, "")
    }

    fn request_with(addr: SocketAddr, method: &str, path: &str, headers: &str) -> Resp {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.0\r\nHost: localhost\r\n{headers}\r\n"
        )
        .unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        Resp {
            status,
            headers: head.to_ascii_lowercase(),
            body: body.to_string(),
        }
    }

    /// The listener is closed once the server is stopped.
    fn closed_soon(addr: SocketAddr) -> bool {
        for _ in 0..200 {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_err() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    fn get(addr: SocketAddr, path: &str) -> Resp {
        request(addr, "GET", path)
    }

    #[test]
    fn read_only_server_endpoints() {
        let store = healthy_store();
        let srv = spawn_read_only(
            "127.0.0.1:0".parse().unwrap(),
            store.clone(),
            ReadOnlyOptions::new("node1"),
        )
        .unwrap();
        let addr = srv.local_addr();
        assert_ne!(addr.port(), 0);

        let r = get(addr, "/pods");
        assert_eq!(r.status, 200);
        assert!(
            r.headers.contains("content-type: application/json"),
            "{}",
            r.headers
        );
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["kind"], "PodList");
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["metadata"], serde_json::json!({}));
        assert_eq!(v["items"].as_array().unwrap().len(), 1);
        assert_eq!(v["items"][0]["metadata"]["name"], "web-node1");
        assert_eq!(v["items"][0]["metadata"]["namespace"], "default");

        let r = get(addr, "/manifests/errors");
        assert_eq!(r.status, 200);
        assert!(r.headers.contains("content-type: application/json"));
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(
            v,
            serde_json::json!([{
                "origin": "/etc/kubernetes/manifests/bad.yaml",
                "field": "spec.containers[0].image",
                "reason": "Required value"
            }])
        );

        let r = get(addr, "/healthz");
        assert_eq!((r.status, r.body.as_str()), (200, "ok"));
        assert!(r.headers.contains("content-type: text/plain"));

        let r = get(addr, "/nope");
        assert_eq!(r.status, 404);
        let r = get(addr, "/pods/");
        assert_eq!(r.status, 404);

        for m in ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"] {
            let r = request(addr, m, "/pods");
            assert_eq!(r.status, 405, "{m}");
            assert!(r.headers.contains("allow: get, head"), "{m}: {}", r.headers);
        }

        let r = request(addr, "HEAD", "/pods");
        assert_eq!(r.status, 200);
        assert!(r.body.is_empty());

        // Query strings do not change routing.
        assert_eq!(get(addr, "/pods?fieldSelector=x").status, 200);

        // The server sees later updates of the store.
        store.remove_pod("0123456789abcdef0123456789abcdef");
        let v: serde_json::Value = serde_json::from_str(&get(addr, "/pods").body).unwrap();
        assert_eq!(v["items"], serde_json::json!([]));

        srv.stop();
        assert!(closed_soon(addr), "still listening after stop");
    }

    #[test]
    fn token_configz_api_statuses_and_metrics() {
        let store = healthy_store();
        let mut opts = ReadOnlyOptions::new("node1");
        opts.token = Some("s3cret-token".into());
        opts.configz = serde_json::json!({"kind": "KubeletConfiguration", "readOnlyPort": 1});
        let srv = spawn_read_only("127.0.0.1:0".parse().unwrap(), store, opts).unwrap();
        let addr = srv.local_addr();
        let auth = "Authorization: Bearer s3cret-token\r\n";

        // Without (or with a wrong) token: 401 everywhere, before routing.
        for path in ["/pods", "/healthz", "/nope", "/configz"] {
            let r = get(addr, path);
            assert_eq!(r.status, 401, "{path}");
            assert!(
                r.headers.contains("www-authenticate: bearer"),
                "{}",
                r.headers
            );
            assert!(!r.body.contains("s3cret"), "{}", r.body);
        }
        let r = request_with(
            addr,
            "GET",
            "/pods",
            "Authorization: Bearer s3cret-tokeX\r\n",
        );
        assert_eq!(r.status, 401);
        let r = request_with(addr, "GET", "/pods", "Authorization: s3cret-token\r\n");
        assert_eq!(r.status, 401);
        let r = get(addr, "/api/v1/pods");
        assert_eq!(r.status, 401);
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(
            (v["kind"].as_str(), v["reason"].as_str(), v["code"].as_i64()),
            (Some("Status"), Some("Unauthorized"), Some(401))
        );

        assert_eq!(request_with(addr, "GET", "/pods", auth).status, 200);
        let r = request_with(addr, "GET", "/configz", auth);
        assert_eq!(r.status, 200);
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["kubeletconfig"]["readOnlyPort"], 1);

        // API: JSON pods, 404 and 405 Status objects.
        let r = request_with(
            addr,
            "GET",
            "/api/v1/namespaces/default/pods/web-node1",
            auth,
        );
        assert_eq!(r.status, 200);
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(
            (v["kind"].as_str(), v["metadata"]["name"].as_str()),
            (Some("Pod"), Some("web-node1"))
        );
        let r = request_with(addr, "GET", "/api/v1/namespaces/default/pods/nope", auth);
        assert_eq!(r.status, 404);
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["kind"], "Status");
        assert_eq!(v["status"], "Failure");
        assert_eq!(v["reason"], "NotFound");
        assert_eq!(v["message"], "pods \"nope\" not found");
        assert_eq!(
            v["details"],
            serde_json::json!({"name": "nope", "kind": "pods"})
        );
        for m in ["POST", "PUT", "PATCH", "DELETE"] {
            let r = request_with(addr, m, "/api/v1/namespaces/default/pods", auth);
            assert_eq!(r.status, 405, "{m}");
            let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
            assert_eq!(v["reason"], "MethodNotAllowed");
            assert_eq!(v["code"], 405);
        }
        let r = request_with(
            addr,
            "GET",
            "/api/v1/pods",
            &format!(
                "{auth}Accept: application/json;as=Table;v=v1;g=meta.k8s.io,application/json\r\n"
            ),
        );
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["kind"], "Table");
        assert_eq!(v["rows"][0]["cells"][0], "web-node1");

        let r = request_with(addr, "GET", "/metrics", auth);
        assert_eq!(r.status, 200);
        assert!(
            r.headers
                .contains("content-type: text/plain; version=0.0.4"),
            "{}",
            r.headers
        );
        assert!(r.body.contains("\nkubelet_running_pods 0\n"), "{}", r.body);
    }

    #[test]
    fn token_comparison() {
        assert!(token_ok("Bearer abc", "abc"));
        assert!(!token_ok("Bearer abcd", "abc"));
        assert!(!token_ok("Bearer ab", "abc"));
        assert!(!token_ok("Bearer ", ""));
        assert!(!token_ok("", "abc"));
    }

    #[test]
    fn healthz_server_texts() {
        let store = healthy_store();
        let srv = spawn_healthz("127.0.0.1:0".parse().unwrap(), store.clone()).unwrap();
        let addr = srv.local_addr();

        let r = get(addr, "/healthz");
        assert_eq!((r.status, r.body.as_str()), (200, "ok"));
        let r = get(addr, "/healthz?verbose");
        assert_eq!(r.status, 200);
        assert_eq!(
            r.body,
            "[+]ping ok\n[+]syncloop ok\n[+]runtime ok\n[+]pleg ok\nnode conditions: MemoryPressure=False DiskPressure=False PIDPressure=False\nhealthz check passed\n"
        );
        let r = get(addr, "/healthz/syncloop");
        assert_eq!((r.status, r.body.as_str()), (200, "ok"));

        // The healthz server has no API endpoints.
        assert_eq!(get(addr, "/pods").status, 404);
        assert_eq!(get(addr, "/manifests/errors").status, 404);
        assert_eq!(request(addr, "POST", "/healthz").status, 405);

        // Runtime down: 500, always verbose, reason withheld in the aggregate.
        store.mark_runtime_error(&"connection refused");
        let r = get(addr, "/healthz");
        assert_eq!(r.status, 500);
        assert_eq!(
            r.body,
            "[+]ping ok\n[+]syncloop ok\n[-]runtime failed: reason withheld\n[+]pleg ok\nhealthz check failed\n"
        );
        let r = get(addr, "/healthz/runtime");
        assert_eq!(r.status, 500);
        assert_eq!(
            r.body,
            "internal server error: container runtime is down: connection refused\n"
        );
        assert_eq!(get(addr, "/healthz/nope").status, 404);

        // Excluding the failing check passes.
        let r = get(addr, "/healthz?exclude=runtime&verbose");
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.body.contains("[+]runtime excluded: ok\n"));
        drop(srv); // Drop stops the server too.
        assert!(closed_soon(addr), "still listening after drop");
    }

    #[test]
    fn healthz_fails_before_first_sync() {
        let store = Arc::new(StatusStore::new(Duration::from_secs(300)));
        let srv = spawn_healthz("127.0.0.1:0".parse().unwrap(), store).unwrap();
        let r = get(srv.local_addr(), "/healthz");
        assert_eq!(r.status, 500);
        assert!(
            r.body.contains("[-]syncloop failed: reason withheld\n"),
            "{}",
            r.body
        );
        assert!(r.body.ends_with("healthz check failed\n"));
    }

    #[test]
    fn garbage_requests_do_not_kill_the_server() {
        let srv = spawn_read_only(
            "127.0.0.1:0".parse().unwrap(),
            healthy_store(),
            ReadOnlyOptions::new("node1"),
        )
        .unwrap();
        let addr = srv.local_addr();
        for junk in [
            "\r\n\r\n",
            "GARBAGE\r\n\r\n",
            "GET\r\n\r\n",
            "GET /pods HTTP/9.9\r\n\r\n",
            "\u{0}\u{1}\u{2}",
        ] {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let _ = s.write_all(junk.as_bytes());
            let _ = s.shutdown(std::net::Shutdown::Write);
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
        }
        assert_eq!(get(addr, "/healthz").status, 200);
    }

    #[test]
    fn bind_error_is_reported() {
        let srv = spawn_healthz("127.0.0.1:0".parse().unwrap(), healthy_store()).unwrap();
        let e = spawn_healthz(srv.local_addr(), healthy_store()).unwrap_err();
        assert!(e.to_string().contains("binding"), "{e}");
    }

    #[test]
    fn url_splitting() {
        assert_eq!(split_url("/pods"), ("/pods", ""));
        assert_eq!(
            split_url("/healthz?verbose&exclude=a"),
            ("/healthz", "verbose&exclude=a")
        );
        assert_eq!(split_url("http://127.0.0.1:10255/pods?x"), ("/pods", "x"));
        assert_eq!(split_url("http://host"), ("/", ""));
    }

    #[test]
    fn healthz_exclude_unknown_warns() {
        let checks = vec![HealthCheck {
            name: "a".into(),
            ok: true,
            message: String::new(),
        }];
        let r = healthz(&checks, "verbose&exclude=zz", "");
        assert_eq!(r.status, 200);
        assert_eq!(
            String::from_utf8(r.body).unwrap(),
            "[+]a ok\nwarn: some health checks cannot be excluded: no matches for \"zz\"\nhealthz check passed\n"
        );
    }
}
