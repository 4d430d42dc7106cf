//! The kubelet's streaming endpoints (`/exec`, `/attach`, `/portForward`, `/run`'s streaming
//! twin): the request's query parsed with the kubelet's rules, the CRI call that answers the
//! runtime streaming server's URL ([`stream_url`]), and the upgrade-aware proxy that joins the
//! client's connection to that URL ([`proxy_upgrade`]).
//!
//! Upstream (pkg/kubelet/server/server.go): `getExec`/`getAttach`/`getPortForward` parse the
//! options (remotecommand `NewOptions`, portforward `NewV4Options`), ask the runtime for the URL
//! and always proxy to it (`proxyStream`, an `UpgradeAwareHandler`; the redirect mode was removed
//! in 1.20). The runtime's streaming server (containerd's CRI plugin, on 127.0.0.1) speaks SPDY/3.1
//! and WebSocket itself; the proxy only relays bytes, so both work through it unchanged.
//!
//! The proxy is one thread per stream: after the backend's `101 Switching Protocols` it waits on
//! both sockets with poll(2) and copies whatever is readable, so a TLS client stream (which cannot
//! be cloned for a second thread) works as well as a plain one ([`ReadWrite`]). The client's end
//! of input is passed on as a half-close (`shutdown(Write)` to the runtime, whose remaining
//! output still reaches the client); the stream ends when the runtime's side ends (as the
//! kubelet's proxy, which stops when either copy stops), on a reset, or after
//! [`STREAM_IDLE_TIMEOUT`] without a byte.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::api::query_unescape;
use super::httpd::Request;
use super::ws;
use crate::cri::{AttachRequest, ErrorKind, ExecRequest, Runtime, RuntimeError};

/// The kubelet's `streamingConnectionIdleTimeout` default: a stream with no byte in either
/// direction for this long is closed.
pub const STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 3600);

/// Time to connect to the runtime's streaming server and to read its response head.
const BACKEND_TIMEOUT: Duration = Duration::from_secs(30);

/// Time a write to either side may block (a peer that stops reading ends the stream).
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// Largest non-101 response body relayed from the backend (an error text).
const MAX_ERROR_BODY: u64 = 64 * 1024;

/// The request headers passed to the backend: what an upgrade needs, nothing that
/// authenticates the client to nanolet (Authorization stays here).
const FORWARDED_HEADERS: &[&str] = &["Connection", "Upgrade"];
const FORWARDED_PREFIXES: &[&str] = &["sec-websocket-", "x-stream-protocol-version"];

/// What to stream, with the runtime's ids (the caller has resolved the pod and container).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamKind {
    Exec {
        container_id: String,
        cmd: Vec<String>,
        tty: bool,
        stdin: bool,
        stdout: bool,
        stderr: bool,
    },
    Attach {
        container_id: String,
        tty: bool,
        stdin: bool,
        stdout: bool,
        stderr: bool,
    },
    PortForward {
        sandbox_id: String,
        ports: Vec<u16>,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The request's parameters, with the kubelet's text (HTTP 400).
    #[error("{0}")]
    BadRequest(String),
    /// The pod is not on this node (HTTP 404), e.g. "pod does not exist".
    #[error("{0}")]
    NotFound(String),
    /// The pod is there but not what the request needs (HTTP 500, as the kubelet's GetExec
    /// errors), e.g. `container not found ("c")`.
    #[error("{0}")]
    Internal(String),
    /// The runtime refused or failed the CRI call.
    #[error("{op} for {target}: {source}")]
    Runtime {
        op: &'static str,
        target: String,
        #[source]
        source: RuntimeError,
    },
}

impl StreamError {
    /// The HTTP status the kubelet answers (streaming.WriteError: NotFound 404, else 500; a
    /// parameter error 400).
    pub fn http_status(&self) -> u16 {
        match self {
            StreamError::BadRequest(_) => 400,
            StreamError::NotFound(_) => 404,
            StreamError::Internal(_) => 500,
            StreamError::Runtime { source, .. } if source.kind == ErrorKind::NotFound => 404,
            StreamError::Runtime { .. } => 500,
        }
    }
}

/// The stream options of an exec or attach request (remotecommand `NewOptions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamOptions {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// Decoded `key=value` pairs of a query, in order, repeated keys kept.
fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            // Go's url.ParseQuery drops a pair whose key or value does not unescape.
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Some((query_unescape(k)?, query_unescape(v)?))
        })
        .collect()
}

/// The first value of `key` (Go's `FormValue`), or "".
fn first<'a>(pairs: &'a [(String, String)], key: &str) -> &'a str {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map_or("", |(_, v)| v.as_str())
}

/// The kubelet's flag: `name=1` (api.ExecStdinParam "input" etc.). nanolet also takes the
/// PodExecOptions names (`stdin`, `stdout`, `stderr`) with `true` or `1`, as a client talking
/// to the node directly would send them.
fn flag(pairs: &[(String, String)], kubelet: &str, alias: &str) -> bool {
    first(pairs, kubelet) == "1" || matches!(first(pairs, alias), "1" | "true")
}

/// remotecommand `NewOptions`: `input`, `output`, `error`, `tty` (value "1"); stderr is dropped
/// with a TTY (the kubelet logs "bypassing stderr"); at least one stream is required.
pub fn parse_stream_options(query: &str) -> Result<StreamOptions, StreamError> {
    let q = query_pairs(query);
    let tty = flag(&q, "tty", "tty");
    let mut o = StreamOptions {
        stdin: flag(&q, "input", "stdin"),
        stdout: flag(&q, "output", "stdout"),
        stderr: flag(&q, "error", "stderr"),
        tty,
    };
    if o.tty && o.stderr {
        tracing::debug!("access to exec with tty and stderr is not supported, bypassing stderr");
        o.stderr = false;
    }
    if !o.stdin && !o.stdout && !o.stderr {
        return Err(StreamError::BadRequest(
            "you must specify at least 1 of stdin, stdout, stderr".into(),
        ));
    }
    Ok(o)
}

/// The `command` parameters, in order (api.ExecCommandParam).
pub fn parse_command(query: &str) -> Vec<String> {
    query_pairs(query)
        .into_iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v)
        .collect()
}

/// portforward `NewV4Options`: for a WebSocket request the `port` parameters (repeated, each
/// may be a comma-separated list) are required; an SPDY request names its ports per stream
/// (none here).
pub fn parse_ports(query: &str, websocket: bool) -> Result<Vec<u16>, StreamError> {
    if !websocket {
        return Ok(Vec::new());
    }
    let values: Vec<String> = query_pairs(query)
        .into_iter()
        .filter(|(k, _)| k == "port")
        .map(|(_, v)| v)
        .collect();
    if values.is_empty() {
        return Err(StreamError::BadRequest(
            "query parameter \"port\" is required".into(),
        ));
    }
    let mut ports = Vec::new();
    for v in &values {
        if v.is_empty() {
            return Err(StreamError::BadRequest(
                "query parameter \"port\" cannot be empty".into(),
            ));
        }
        for p in v.split(',') {
            let port: u16 = p.parse().map_err(|e| {
                StreamError::BadRequest(format!("unable to parse {v:?} as a port: {e}"))
            })?;
            if port < 1 {
                return Err(StreamError::BadRequest(format!("port {v:?} must be > 0")));
            }
            ports.push(port);
        }
    }
    Ok(ports)
}

/// Whether a request asks for a WebSocket upgrade (wsstream `IsWebSocketRequest`).
pub fn is_websocket_request(req: &Request) -> bool {
    req.header("Upgrade").eq_ignore_ascii_case("websocket")
        && req
            .header("Connection")
            .split(',')
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// An exec request for `container_id` from the kubelet's query.
pub fn exec_kind(container_id: &str, query: &str) -> Result<StreamKind, StreamError> {
    let o = parse_stream_options(query)?;
    Ok(StreamKind::Exec {
        container_id: container_id.to_string(),
        cmd: parse_command(query),
        tty: o.tty,
        stdin: o.stdin,
        stdout: o.stdout,
        stderr: o.stderr,
    })
}

/// An attach request for `container_id` from the kubelet's query.
pub fn attach_kind(container_id: &str, query: &str) -> Result<StreamKind, StreamError> {
    let o = parse_stream_options(query)?;
    Ok(StreamKind::Attach {
        container_id: container_id.to_string(),
        tty: o.tty,
        stdin: o.stdin,
        stdout: o.stdout,
        stderr: o.stderr,
    })
}

/// A port-forward request into `sandbox_id` from the kubelet's query.
pub fn port_forward_kind(
    sandbox_id: &str,
    query: &str,
    websocket: bool,
) -> Result<StreamKind, StreamError> {
    Ok(StreamKind::PortForward {
        sandbox_id: sandbox_id.to_string(),
        ports: parse_ports(query, websocket)?,
    })
}

/// Whether a runtime object carries nanolet's labels for pod `namespace`/`pod` (and `uid` when
/// the request names one). Objects of other managers are never streamed to.
fn is_pod(
    labels: &std::collections::BTreeMap<String, String>,
    namespace: &str,
    pod: &str,
    uid: Option<&str>,
) -> bool {
    use crate::cri::{LABEL_MANAGED_BY, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID};
    labels.contains_key(LABEL_MANAGED_BY)
        && labels.get(LABEL_POD_NAME).map(String::as_str) == Some(pod)
        && labels.get(LABEL_POD_NAMESPACE).map(String::as_str) == Some(namespace)
        && uid.is_none_or(|u| labels.get(LABEL_POD_UID).map(String::as_str) == Some(u))
}

/// The running container `container` of pod `namespace`/`pod` (its latest attempt), for exec
/// and attach. The kubelet's answers: no such pod, 404 `pod does not exist`; no such running
/// container, `container not found ("c")` (500, as the kubelet's GetExec error).
pub fn find_container(
    runtime: &dyn Runtime,
    namespace: &str,
    pod: &str,
    uid: Option<&str>,
    container: &str,
) -> Result<String, StreamError> {
    use crate::cri::{ContainerState, LABEL_CONTAINER_NAME};
    let list = runtime
        .list_containers()
        .map_err(|source| StreamError::Runtime {
            op: "ListContainers",
            target: format!("pod {namespace}/{pod}"),
            source,
        })?;
    let mut of_pod: Vec<_> = list
        .into_iter()
        .filter(|c| is_pod(&c.labels, namespace, pod, uid))
        .collect();
    if of_pod.is_empty() {
        return Err(StreamError::NotFound("pod does not exist".into()));
    }
    of_pod.retain(|c| {
        c.state == ContainerState::Running
            && c.labels.get(LABEL_CONTAINER_NAME).map(String::as_str) == Some(container)
    });
    of_pod.sort_by_key(|c| c.attempt);
    of_pod
        .pop()
        .map(|c| c.id)
        .ok_or_else(|| StreamError::Internal(format!("container not found ({container:?})")))
}

/// The ready sandbox of pod `namespace`/`pod` (the newest), for port-forward; 404 `pod does
/// not exist` otherwise.
pub fn find_sandbox(
    runtime: &dyn Runtime,
    namespace: &str,
    pod: &str,
    uid: Option<&str>,
) -> Result<String, StreamError> {
    let list = runtime
        .list_pod_sandboxes()
        .map_err(|source| StreamError::Runtime {
            op: "ListPodSandbox",
            target: format!("pod {namespace}/{pod}"),
            source,
        })?;
    list.into_iter()
        .filter(|s| {
            s.state == crate::cri::SandboxState::Ready && is_pod(&s.labels, namespace, pod, uid)
        })
        .max_by_key(|s| s.created_at)
        .map(|s| s.id)
        .ok_or_else(|| StreamError::NotFound("pod does not exist".into()))
}

/// Asks the runtime for the streaming URL of `kind` (CRI Exec, Attach or PortForward).
pub fn stream_url(runtime: &dyn Runtime, kind: StreamKind) -> Result<String, StreamError> {
    let (op, target, r) = match kind {
        StreamKind::Exec {
            container_id,
            cmd,
            tty,
            stdin,
            stdout,
            stderr,
        } => {
            check_streams(stdin, stdout, stderr)?;
            let req = ExecRequest {
                container_id,
                cmd,
                tty,
                stdin,
                stdout,
                stderr: stderr && !tty,
            };
            ("Exec", req.container_id.clone(), runtime.exec(&req))
        }
        StreamKind::Attach {
            container_id,
            tty,
            stdin,
            stdout,
            stderr,
        } => {
            check_streams(stdin, stdout, stderr)?;
            let req = AttachRequest {
                container_id,
                tty,
                stdin,
                stdout,
                stderr: stderr && !tty,
            };
            ("Attach", req.container_id.clone(), runtime.attach(&req))
        }
        StreamKind::PortForward { sandbox_id, ports } => {
            let r = runtime.port_forward(&sandbox_id, &ports);
            ("PortForward", sandbox_id, r)
        }
    };
    r.map_err(|source| StreamError::Runtime { op, target, source })
}

fn check_streams(stdin: bool, stdout: bool, stderr: bool) -> Result<(), StreamError> {
    if stdin || stdout || stderr {
        Ok(())
    } else {
        Err(StreamError::BadRequest(
            "you must specify at least 1 of stdin, stdout, stderr".into(),
        ))
    }
}

/// A client connection the proxy can serve: a byte stream with a socket to poll.
///
/// `has_buffered` says whether a read would return bytes already decoded above the socket (a
/// TLS stream's plaintext buffer), which poll(2) on the socket cannot see. `shutdown_write`
/// ends the client-bound direction (TCP: `shutdown(Write)`; TLS: send close_notify and flush).
pub trait ReadWrite: Read + Write + Send {
    fn poll_fd(&self) -> BorrowedFd<'_>;
    fn has_buffered(&mut self) -> bool {
        false
    }
    fn shutdown_write(&mut self) -> io::Result<()>;
}

impl ReadWrite for TcpStream {
    fn poll_fd(&self) -> BorrowedFd<'_> {
        self.as_fd()
    }
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
}

/// Proxies an upgrade request to the runtime's streaming URL `backend` (the kubelet's
/// `proxyStream`), with the kubelet's idle timeout. Returns when the stream has ended.
pub fn proxy_upgrade(
    client: &mut dyn ReadWrite,
    request: &Request,
    backend: &str,
) -> io::Result<()> {
    proxy_upgrade_with(
        client,
        &request.method,
        &request.headers,
        backend,
        STREAM_IDLE_TIMEOUT,
    )
}

/// [`proxy_upgrade`] from the request's parts, with an idle timeout of its own.
pub fn proxy_upgrade_with(
    client: &mut dyn ReadWrite,
    method: &str,
    headers: &[(String, String)],
    backend: &str,
    idle: Duration,
) -> io::Result<()> {
    let mut upstream = match connect_backend(backend) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(backend = %crate::util::redact::redact_url(backend), error = %e, "cannot reach the runtime's streaming server");
            let body = format!("error dialing backend: {e}\n");
            let head = format!(
                "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain; charset=utf-8\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            client.write_all(head.as_bytes())?;
            client.write_all(body.as_bytes())?;
            return client.flush();
        }
    };
    let target = backend_target(backend)?;
    upstream.write_all(backend_request(method, &target.0, &target.1, headers).as_bytes())?;
    let (status, resp_headers) = ws::read_response_head(&mut upstream).map_err(io::Error::other)?;
    let mut head = format!("{status}\r\n");
    for (k, v) in &resp_headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    client.write_all(head.as_bytes())?;
    client.flush()?;
    if status.split(' ').nth(1) != Some("101") {
        // An error answer (e.g. 403 for an unsupported protocol): pass its body on, bounded;
        // its Content-Length when it has one (the runtime may keep the connection open).
        let length = resp_headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("Content-Length"))
            .and_then(|(_, v)| super::httpd::parse_digits(v))
            .unwrap_or(MAX_ERROR_BODY);
        io::copy(
            &mut (&mut upstream).take(length.min(MAX_ERROR_BODY)),
            client,
        )?;
        return client.flush();
    }
    upstream.set_read_timeout(None)?;
    splice(client, &mut upstream, idle)
}

fn backend_target(backend: &str) -> io::Result<(String, String)> {
    let u =
        ws::parse_http_url(backend).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    Ok((u.authority, u.target))
}

fn connect_backend(backend: &str) -> io::Result<TcpStream> {
    let (authority, _) = backend_target(backend)?;
    let addr = authority
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))?;
    let s = TcpStream::connect_timeout(&addr, BACKEND_TIMEOUT)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(BACKEND_TIMEOUT))?;
    s.set_write_timeout(Some(WRITE_TIMEOUT))?;
    Ok(s)
}

/// The request sent to the streaming server: the client's method, the CRI URL's path and
/// query, its upgrade headers, no body.
fn backend_request(
    method: &str,
    authority: &str,
    target: &str,
    headers: &[(String, String)],
) -> String {
    let mut out = format!("{method} {target} HTTP/1.1\r\nHost: {authority}\r\n");
    for (k, v) in headers {
        let lower = k.to_ascii_lowercase();
        if FORWARDED_HEADERS.iter().any(|h| h.eq_ignore_ascii_case(k))
            || FORWARDED_PREFIXES.iter().any(|p| lower.starts_with(p))
        {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    out.push_str("Content-Length: 0\r\n\r\n");
    out
}

/// Copies bytes both ways until the runtime's side ends (a client's end of input is passed on
/// as a half-close, and the runtime's last bytes still reach the client), a reset, or `idle`
/// passes with nothing to copy.
fn splice(client: &mut dyn ReadWrite, upstream: &mut TcpStream, idle: Duration) -> io::Result<()> {
    let mut buf = vec![0u8; 32 * 1024];
    let mut from_client = true;
    let idle_ms = u16::try_from(idle.as_millis()).unwrap_or(u16::MAX);
    let mut idle_left = idle;
    loop {
        let buffered = from_client && client.has_buffered();
        let (c_ready, u_ready) = {
            let mut fds = Vec::with_capacity(2);
            if from_client {
                fds.push(PollFd::new(client.poll_fd(), PollFlags::POLLIN));
            }
            fds.push(PollFd::new(upstream.as_fd(), PollFlags::POLLIN));
            let wait = if buffered {
                PollTimeout::ZERO
            } else {
                PollTimeout::from(
                    idle_ms.min(u16::try_from(idle_left.as_millis()).unwrap_or(u16::MAX)),
                )
            };
            let n = poll(&mut fds, wait).map_err(io::Error::from)?;
            let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
            let mut it = fds.iter();
            let c = from_client && it.next().is_some_and(ready);
            let u = it.next().is_some_and(ready);
            if n == 0 && !buffered {
                let step = Duration::from_millis(u64::from(wait.as_millis().unwrap_or(0)));
                idle_left = idle_left.saturating_sub(step);
                if idle_left.is_zero() {
                    tracing::info!("streaming connection idle for {idle:?}, closing it");
                    return Ok(());
                }
                continue;
            }
            (c || buffered, u)
        };
        idle_left = idle;
        if c_ready {
            match client.read(&mut buf) {
                Ok(0) => {
                    from_client = false;
                    let _ = upstream.shutdown(std::net::Shutdown::Write);
                }
                Ok(n) => upstream.write_all(&buf[..n])?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if is_reset(&e) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        if u_ready {
            match upstream.read(&mut buf) {
                Ok(0) => {
                    // The runtime's side is done: so is the stream (as the kubelet's proxy,
                    // which ends when either copy ends). The client's end is closed by the
                    // caller once this returns.
                    let _ = client.shutdown_write();
                    return Ok(());
                }
                Ok(n) => {
                    client.write_all(&buf[..n])?;
                    client.flush()?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_reset(&e) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }
}

fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::fake::FakeRuntime;
    use std::net::TcpListener;

    // pkg/kubelet/cri/streaming/remotecommand NewOptions: "1" only, stderr dropped with a tty,
    // at least one stream.
    #[test]
    fn remotecommand_new_options_rules() {
        let o = parse_stream_options("input=1&output=1&tty=1&error=1").unwrap();
        assert_eq!(
            o,
            StreamOptions {
                stdin: true,
                stdout: true,
                stderr: false,
                tty: true
            }
        );
        let e = parse_stream_options("input=true&tty=1").unwrap_err();
        assert_eq!(
            e.to_string(),
            "you must specify at least 1 of stdin, stdout, stderr"
        );
        assert_eq!(e.http_status(), 400);
        // nanolet's aliases (PodExecOptions names).
        assert!(parse_stream_options("stdout=true").unwrap().stdout);
    }

    #[test]
    fn command_is_repeated_and_percent_decoded() {
        assert_eq!(
            parse_command("command=sh&command=-c&command=echo%20a%26b&output=1"),
            vec!["sh", "-c", "echo a&b"]
        );
    }

    // pkg/kubelet/cri/streaming/portforward NewV4Options texts.
    #[test]
    fn portforward_new_v4_options_rules() {
        assert_eq!(parse_ports("", false).unwrap(), Vec::<u16>::new());
        assert_eq!(
            parse_ports("port=80&port=443,8080", true).unwrap(),
            vec![80, 443, 8080]
        );
        let err = |q| parse_ports(q, true).unwrap_err().to_string();
        assert_eq!(err(""), "query parameter \"port\" is required");
        assert_eq!(err("port="), "query parameter \"port\" cannot be empty");
        assert_eq!(err("port=0"), "port \"0\" must be > 0");
        assert!(err("port=x").starts_with("unable to parse \"x\" as a port: "));
        assert!(err("port=70000").starts_with("unable to parse \"70000\" as a port"));
    }

    #[test]
    fn stream_url_asks_the_runtime_and_maps_its_errors() {
        let rt = FakeRuntime::new();
        let kind = exec_kind("nope", "command=ls&output=1").unwrap();
        let e = stream_url(&rt, kind.clone()).unwrap_err();
        assert_eq!(e.http_status(), 404, "{e}");
        let e = stream_url(
            &rt,
            StreamKind::Attach {
                container_id: "c".into(),
                tty: false,
                stdin: false,
                stdout: false,
                stderr: false,
            },
        )
        .unwrap_err();
        assert_eq!(e.http_status(), 400);
        assert_eq!(rt.count_calls("attach"), 0, "refused before the runtime");
        rt.set_stream_base("http://127.0.0.1:1/");
        let e = stream_url(
            &rt,
            StreamKind::PortForward {
                sandbox_id: "nosuch".into(),
                ports: vec![80],
            },
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("PortForward for nosuch: "), "{e}");
    }

    #[test]
    fn pods_and_containers_are_found_by_nanolets_labels() {
        use crate::cri::{
            ContainerConfig, LABEL_CONTAINER_NAME, LABEL_MANAGED_BY, LABEL_POD_NAME,
            LABEL_POD_NAMESPACE, LABEL_POD_UID, PodSandboxConfig,
        };
        let rt = FakeRuntime::new();
        rt.add_image("img");
        let pod_labels: std::collections::BTreeMap<String, String> = [
            (LABEL_MANAGED_BY, "nanolet"),
            (LABEL_POD_NAME, "web-node1"),
            (LABEL_POD_NAMESPACE, "default"),
            (LABEL_POD_UID, "u1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let sb = rt
            .run_pod_sandbox(&PodSandboxConfig {
                name: "web-node1".into(),
                namespace: "default".into(),
                uid: "u1".into(),
                labels: pod_labels.clone(),
                ..Default::default()
            })
            .unwrap();
        let mut labels = pod_labels.clone();
        labels.insert(LABEL_CONTAINER_NAME.into(), "c".into());
        let cid = rt
            .create_container(
                &sb,
                &ContainerConfig {
                    name: "c".into(),
                    image: "img".into(),
                    labels,
                    ..Default::default()
                },
                &PodSandboxConfig::default(),
            )
            .unwrap();
        rt.start_container(&cid).unwrap();
        assert_eq!(
            find_container(&rt, "default", "web-node1", None, "c").unwrap(),
            cid
        );
        assert_eq!(
            find_container(&rt, "default", "web-node1", Some("u1"), "c").unwrap(),
            cid
        );
        let e = find_container(&rt, "default", "web-node1", Some("other"), "c").unwrap_err();
        assert_eq!(
            (e.to_string().as_str(), e.http_status()),
            ("pod does not exist", 404)
        );
        let e = find_container(&rt, "default", "web-node1", None, "d").unwrap_err();
        assert_eq!(
            (e.to_string().as_str(), e.http_status()),
            ("container not found (\"d\")", 500)
        );
        assert_eq!(find_sandbox(&rt, "default", "web-node1", None).unwrap(), sb);
        assert_eq!(
            find_sandbox(&rt, "kube-system", "web-node1", None)
                .unwrap_err()
                .http_status(),
            404
        );
        rt.set_stream_base("http://127.0.0.1:9");
        let url = stream_url(&rt, exec_kind(&cid, "command=ls&output=1").unwrap()).unwrap();
        assert_eq!(url, format!("http://127.0.0.1:9/exec/{cid}"));
    }

    #[test]
    fn backend_request_forwards_only_upgrade_headers() {
        let h = |k: &str, v: &str| (k.to_string(), v.to_string());
        let r = backend_request(
            "POST",
            "127.0.0.1:9",
            "/exec/tok",
            &[
                h("Connection", "Upgrade"),
                h("Upgrade", "SPDY/3.1"),
                h("X-Stream-Protocol-Version", "v4.channel.k8s.io"),
                h("Sec-WebSocket-Protocol", "v4.channel.k8s.io"),
                h("Authorization", "Bearer secret"),
                h("Content-Length", "12"),
            ],
        );
        assert!(
            r.starts_with("POST /exec/tok HTTP/1.1\r\nHost: 127.0.0.1:9\r\n"),
            "{r}"
        );
        assert!(r.contains("X-Stream-Protocol-Version: v4.channel.k8s.io\r\n"));
        assert!(r.contains("Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n"));
        assert!(r.contains("Upgrade: SPDY/3.1\r\n"));
        assert!(!r.contains("secret"));
        assert!(r.ends_with("Content-Length: 0\r\n\r\n"));
        assert_eq!(r.matches("Content-Length").count(), 1);
    }

    /// A backend that answers 101 and then echoes until its client half-closes, then says
    /// "bye" and closes: the proxy must carry both directions and both half-closes.
    #[test]
    fn proxy_splices_both_ways_and_passes_half_closes_on() {
        let backend = TcpListener::bind("127.0.0.1:0").unwrap();
        let baddr = backend.local_addr().unwrap();
        let bt = std::thread::spawn(move || {
            let (mut s, _) = backend.accept().unwrap();
            let (line, _) = ws::read_response_head(&mut s).unwrap();
            s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\nConnection: Upgrade\r\n\r\n").unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            s.write_all(&got).unwrap();
            s.write_all(b"bye").unwrap();
            (line, got)
        });
        let front = TcpListener::bind("127.0.0.1:0").unwrap();
        let faddr = front.local_addr().unwrap();
        let url = format!("http://{baddr}/exec/tok?x=1");
        let pt = std::thread::spawn(move || {
            let (mut c, _) = front.accept().unwrap();
            let request = Request {
                method: "POST".into(),
                target: "/exec/default/pod/c?command=ls&output=1".into(),
                http11: true,
                headers: vec![("Upgrade".to_string(), "SPDY/3.1".to_string())],
            };
            proxy_upgrade(&mut c, &request, &url)
        });
        let mut c = TcpStream::connect(faddr).unwrap();
        let (status, hdrs) = ws::read_response_head(&mut c).unwrap();
        assert_eq!(status, "HTTP/1.1 101 Switching Protocols");
        assert!(hdrs.iter().any(|(k, v)| k == "Upgrade" && v == "SPDY/3.1"));
        c.write_all(b"hello through the proxy").unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut back = Vec::new();
        c.read_to_end(&mut back).unwrap();
        assert_eq!(back, b"hello through the proxybye");
        pt.join().unwrap().unwrap();
        let (line, got) = bt.join().unwrap();
        assert_eq!(line, "POST /exec/tok?x=1 HTTP/1.1");
        assert_eq!(got, b"hello through the proxy");
    }

    /// No byte either way for `idle`: the stream is closed (streamingConnectionIdleTimeout).
    #[test]
    fn proxy_closes_an_idle_stream() {
        let backend = TcpListener::bind("127.0.0.1:0").unwrap();
        let baddr = backend.local_addr().unwrap();
        let bt = std::thread::spawn(move || {
            let (mut s, _) = backend.accept().unwrap();
            ws::read_response_head(&mut s).unwrap();
            s.write_all(b"HTTP/1.1 101 Switching Protocols\r\n\r\n")
                .unwrap();
            // Stays silent; sees the proxy close its side.
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
        });
        let front = TcpListener::bind("127.0.0.1:0").unwrap();
        let faddr = front.local_addr().unwrap();
        let url = format!("http://{baddr}/attach/tok");
        let pt = std::thread::spawn(move || {
            let (mut c, _) = front.accept().unwrap();
            let t = std::time::Instant::now();
            let r = proxy_upgrade_with(&mut c, "GET", &[], &url, Duration::from_millis(300));
            (r, t.elapsed())
        });
        let mut c = TcpStream::connect(faddr).unwrap();
        let (status, _) = ws::read_response_head(&mut c).unwrap();
        assert_eq!(status, "HTTP/1.1 101 Switching Protocols");
        let (r, took) = pt.join().unwrap();
        r.unwrap();
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(10), "{took:?}");
        bt.join().unwrap();
    }

    /// A refusal (containerd 1.6 answers a v5 WebSocket request so) is relayed with its body,
    /// and the proxy returns at the body's end even though the backend keeps the connection.
    #[test]
    fn proxy_relays_a_refusal_and_returns_at_its_end() {
        let backend = TcpListener::bind("127.0.0.1:0").unwrap();
        let baddr = backend.local_addr().unwrap();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let bt = std::thread::spawn(move || {
            let (mut s, _) = backend.accept().unwrap();
            ws::read_response_head(&mut s).unwrap();
            s.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 9\r\n\r\nforbidden")
                .unwrap();
            // Keeps the connection until the test is done.
            let _ = done_rx.recv();
        });
        let front = TcpListener::bind("127.0.0.1:0").unwrap();
        let faddr = front.local_addr().unwrap();
        let url = format!("http://{baddr}/exec/tok");
        let pt = std::thread::spawn(move || {
            let (mut c, _) = front.accept().unwrap();
            let headers = vec![
                ("Upgrade".to_string(), "websocket".to_string()),
                (
                    "Sec-WebSocket-Protocol".to_string(),
                    "v5.channel.k8s.io".to_string(),
                ),
            ];
            proxy_upgrade_with(&mut c, "GET", &headers, &url, Duration::from_secs(60))
        });
        let mut c = TcpStream::connect(faddr).unwrap();
        let mut all = String::new();
        c.read_to_string(&mut all).unwrap();
        assert_eq!(
            all,
            "HTTP/1.1 403 Forbidden\r\nContent-Length: 9\r\n\r\nforbidden"
        );
        pt.join().unwrap().unwrap();
        done_tx.send(()).unwrap();
        bt.join().unwrap();
    }

    #[test]
    fn proxy_answers_500_when_the_backend_is_unreachable() {
        let dead = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/exec/x", dead.local_addr().unwrap());
        drop(dead);
        let front = TcpListener::bind("127.0.0.1:0").unwrap();
        let faddr = front.local_addr().unwrap();
        let pt = std::thread::spawn(move || {
            let (mut c, _) = front.accept().unwrap();
            proxy_upgrade_with(&mut c, "GET", &[], &url, Duration::from_secs(5))
        });
        let mut c = TcpStream::connect(faddr).unwrap();
        let mut all = String::new();
        c.read_to_string(&mut all).unwrap();
        assert!(
            all.starts_with("HTTP/1.1 500 Internal Server Error\r\n"),
            "{all}"
        );
        assert!(all.contains("error dialing backend: "), "{all}");
        pt.join().unwrap().unwrap();
    }
}
