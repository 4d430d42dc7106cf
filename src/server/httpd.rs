//! A small HTTP/1.x server with fixed bounds, for nanolet's local endpoints (healthz and the
//! read-only API; routing lives in [`crate::server`]).
//!
//! Why not a thread per connection (tiny_http, which nanolet used before): an edge agent's port
//! must survive a thousand idle or slow clients (slowloris) without a thousand threads. Here:
//!
//! - one reactor thread per server owns the listener and every connection that has not yet sent
//!   a complete request, on epoll (non-blocking sockets, per-connection buffers that grow only
//!   with the bytes received);
//! - at most [`Limits::max_connections`] such connections: when a new one arrives at the cap (or
//!   `accept` fails for lack of descriptors) the oldest is closed, so a flood of idle clients
//!   cannot lock out a health checker for longer than it takes to send a request;
//! - a request head must arrive within [`Limits::head_timeout`] of the connection (408, closed);
//!   the request line is limited (414), the head (431, also more than [`MAX_HEADERS`] lines) and
//!   a body (413; a body without `Content-Length` is 411);
//! - complete requests go to a fixed pool of [`Limits::workers`] threads through a bounded queue
//!   (503 when it is full); responses are written with [`Limits::write_timeout`], and every
//!   connection is closed after one response (`Connection: close`: no keep-alive state to hold).
//!
//! A handler may take a connection over (`follow=true` log streams), for a thread of its own.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::EventFd;

/// At most this many header lines in a request head (431 beyond).
pub const MAX_HEADERS: usize = 100;

/// The bounds one server works within.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections waiting for their request head (the oldest is closed beyond).
    pub max_connections: usize,
    /// Threads answering complete requests.
    pub workers: usize,
    /// Longest request line (414 beyond).
    pub max_request_line: usize,
    /// Longest request head, request line included (431 beyond).
    pub max_head: usize,
    /// Largest request body accepted and discarded (413 beyond).
    pub max_body: usize,
    /// Time from accept to a complete request (408 after).
    pub head_timeout: Duration,
    /// Time to write a response.
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 512,
            workers: 2,
            max_request_line: 8 * 1024,
            max_head: 16 * 1024,
            max_body: 64 * 1024,
            head_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
        }
    }
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The request target as sent (origin-form `/path?query` or absolute-form).
    pub target: String,
    /// HTTP/1.1 (else HTTP/1.0).
    pub http11: bool,
    pub headers: Vec<(String, String)>,
}

impl Request {
    /// The first header of that name (case-insensitive), or "".
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map_or("", |(_, v)| v.as_str())
    }
}

/// A handler's answer.
pub enum Response {
    Full {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
    },
    /// The handler takes the connection over (it writes the status line itself).
    Takeover(Box<dyn FnOnce(TcpStream) + Send>),
}

/// Handles one complete request on a worker thread.
pub type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;

/// The outcome of parsing the bytes received so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parse {
    /// More bytes are needed.
    Incomplete,
    /// A complete head of `head_len` bytes, followed by a body of `body_len` bytes.
    Done {
        request: Request,
        head_len: usize,
        body_len: usize,
    },
    /// The request is refused with this status and reason.
    Reject(u16, &'static str),
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Parses a request head (pure; the fuzz target `http_request` drives it).
pub fn parse_head(buf: &[u8], limits: &Limits) -> Parse {
    // A server should ignore empty lines before the request line (RFC 9112 2.2).
    let start = buf
        .iter()
        .position(|b| *b != b'\r' && *b != b'\n')
        .unwrap_or(buf.len());
    let buf_all = buf;
    let buf = &buf[start..];
    let Some(line_end) = buf.iter().position(|b| *b == b'\n') else {
        return if buf.len() > limits.max_request_line {
            Parse::Reject(414, "request line too long")
        } else if start > limits.max_head {
            Parse::Reject(400, "empty lines")
        } else {
            Parse::Incomplete
        };
    };
    if line_end > limits.max_request_line {
        return Parse::Reject(414, "request line too long");
    }
    let head_end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
        .into_iter()
        .chain(buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2))
        .min();
    let Some(head_len) = head_end else {
        return if buf.len() > limits.max_head {
            Parse::Reject(431, "request header fields too large")
        } else {
            Parse::Incomplete
        };
    };
    if head_len > limits.max_head {
        return Parse::Reject(431, "request header fields too large");
    }
    let Ok(head) = std::str::from_utf8(&buf[..head_len]) else {
        return Parse::Reject(400, "request head is not UTF-8");
    };
    let request_line = head.split('\n').next().unwrap_or("");
    let request_line = request_line.strip_suffix('\r').unwrap_or(request_line);
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Parse::Reject(400, "malformed request line");
    };
    if !is_token(method) {
        return Parse::Reject(400, "malformed method");
    }
    if target.is_empty() || target.bytes().any(|b| b.is_ascii_control()) {
        return Parse::Reject(400, "malformed request target");
    }
    let http11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        v if v.starts_with("HTTP/") => return Parse::Reject(505, "HTTP version not supported"),
        _ => return Parse::Reject(400, "malformed HTTP version"),
    };
    let headers = match header_fields(&buf[..head_len]) {
        Ok(h) => h,
        Err((status, why)) => return Parse::Reject(status, why),
    };
    let (body_len, chunked) = match body_framing(&headers) {
        Ok(f) => f,
        Err((status, why)) => return Parse::Reject(status, why),
    };
    let body_len = if chunked {
        match chunked_len(&buf[head_len..], limits.max_body) {
            Ok(Some(n)) => n,
            Ok(None) => return Parse::Incomplete,
            Err((status, why)) => return Parse::Reject(status, why),
        }
    } else {
        body_len.unwrap_or(0)
    };
    if body_len > limits.max_body {
        return Parse::Reject(413, "request body too large");
    }
    Parse::Done {
        request: Request {
            method: method.to_string(),
            target: target.to_string(),
            http11,
            headers,
        },
        head_len: head_len + (buf_all.len() - buf.len()),
        body_len,
    }
}

/// The header fields of a whole request head, read by `httparse` (already linked through hyper),
/// which holds them to RFC 9110 5.5 as Go's `httpguts.ValidHeaderFieldValue` does: no control
/// characters but HTAB in a value (a CR, LF or NUL smuggled into a value is refused, not
/// passed on), a token for a name, no obsolete line folding (RFC 9112 5.2).
fn header_fields(head: &[u8]) -> Result<Vec<(String, String)>, Refusal> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut fields);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err((400, "malformed request head")),
        Err(httparse::Error::TooManyHeaders) => return Err((431, "too many header fields")),
        Err(httparse::Error::HeaderName) => return Err((400, "malformed header field name")),
        Err(httparse::Error::HeaderValue) => {
            return Err((400, "control character in a header field value"));
        }
        Err(httparse::Error::Token | httparse::Error::Version | httparse::Error::Status) => {
            return Err((400, "malformed request line"));
        }
        Err(_) => return Err((400, "malformed header field")),
    }
    Ok(req
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value)
                    .trim_matches([' ', '\t'])
                    .to_string(),
            )
        })
        .collect())
}

/// The body's framing from the header fields: its Content-Length, and whether it is chunked.
fn body_framing(headers: &[(String, String)]) -> Result<(Option<usize>, bool), Refusal> {
    let mut body_len: Option<usize> = None;
    let mut chunked = false;
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("transfer-encoding") {
            if !value.eq_ignore_ascii_case("chunked") || chunked {
                return Err((501, "unsupported Transfer-Encoding"));
            }
            chunked = true;
        }
        if name.eq_ignore_ascii_case("content-length") {
            // RFC 9110 8.6: Content-Length = 1*DIGIT. Rust's `u64::from_str` also takes a
            // leading '+' ("+5"), which Go's strconv.ParseUint refuses (and hyper since
            // RUSTSEC-2021-0078): a front end and nanolet must not frame a body differently.
            let Some(n) = parse_digits(value) else {
                return Err((400, "malformed Content-Length"));
            };
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            if body_len.is_some_and(|b| b != n) {
                return Err((400, "conflicting Content-Length"));
            }
            body_len = Some(n);
        }
    }
    if chunked && body_len.is_some() {
        return Err((400, "both Content-Length and Transfer-Encoding"));
    }
    Ok((body_len, chunked))
}

/// `1*DIGIT` as a number (`None` for anything else: a sign, a space, an empty text, overflow).
pub fn parse_digits(value: &str) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

/// A status and reason to refuse a request with.
type Refusal = (u16, &'static str);
/// A chunk line without its line end, and the offset after it.
type ChunkLine<'a> = Option<(&'a [u8], usize)>;

/// The encoded length of a complete chunked body at the start of `buf` (`None`: incomplete);
/// the decoded size may not pass `max_body` (413).
fn chunked_len(buf: &[u8], max_body: usize) -> Result<Option<usize>, Refusal> {
    let line_at = |pos: usize| -> Result<ChunkLine<'_>, Refusal> {
        let rest = buf.get(pos..).unwrap_or_default();
        match rest.iter().position(|b| *b == b'\n') {
            Some(nl) if nl > 1024 => Err((400, "chunk line too long")),
            Some(nl) => {
                let line = &rest[..nl];
                Ok(Some((
                    line.strip_suffix(b"\r").unwrap_or(line),
                    pos + nl + 1,
                )))
            }
            None if rest.len() > 1024 => Err((400, "chunk line too long")),
            None => Ok(None),
        }
    };
    let (mut pos, mut total) = (0usize, 0usize);
    loop {
        let Some((line, next)) = line_at(pos)? else {
            return Ok(None);
        };
        let size = line.split(|b| *b == b';').next().unwrap_or_default();
        // RFC 9112 7.1: chunk-size = 1*HEXDIG (then BWS before an extension); no sign, no
        // leading space ("+5" and " 5" are refused, as Go's parseHexUint refuses them).
        // httparse::parse_chunk_size is not used: it reads an empty size line as 0.
        let size = std::str::from_utf8(size)
            .ok()
            .map(|s| s.trim_end_matches([' ', '\t']))
            .filter(|s| !s.is_empty() && s.len() <= 16 && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|s| usize::from_str_radix(s, 16).ok())
            .ok_or((400, "malformed chunk size"))?;
        pos = next;
        if size == 0 {
            // Trailer fields up to an empty line.
            loop {
                let Some((line, next)) = line_at(pos)? else {
                    return Ok(None);
                };
                pos = next;
                if line.is_empty() {
                    return Ok(Some(pos));
                }
                if pos > max_body.saturating_mul(2) {
                    return Err((413, "request body too large"));
                }
            }
        }
        total = total.saturating_add(size);
        if total > max_body || pos > max_body.saturating_mul(2) {
            return Err((413, "request body too large"));
        }
        let end = pos + size;
        match buf.get(end..end + 2) {
            None if buf.len() <= end + 1 => return Ok(None),
            Some(b"\r\n") => pos = end + 2,
            _ if buf.get(end) == Some(&b'\n') => pos = end + 1,
            _ => return Err((400, "malformed chunk")),
        }
    }
}

/// The reason phrase of the statuses nanolet sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        410 => "Gone",
        411 => "Length Required",
        413 => "Content Too Large",
        414 => "URI Too Long",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        501 => "Not Implemented",
        505 => "HTTP Version Not Supported",
        _ => "Status",
    }
}

/// The bytes of a complete response (`Connection: close`; no body for HEAD).
pub fn render(status: u16, headers: &[(&str, String)], body: &[u8], head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reason(status),
        body.len()
    );
    for (name, value) in headers {
        // Values come from nanolet itself; keep the head well-formed whatever they hold.
        if !value.contains(['\r', '\n']) {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

fn error_bytes(status: u16, message: &str) -> Vec<u8> {
    render(
        status,
        &[("Content-Type", "text/plain; charset=utf-8".to_string())],
        format!(
            "{status} {}: {message}\n",
            reason(status).to_ascii_lowercase()
        )
        .as_bytes(),
        false,
    )
}

/// A running server; `stop()` or dropping it stops every thread and closes the socket.
pub struct Server {
    stopping: Arc<AtomicBool>,
    wake: Arc<EventFd>,
    reactor: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
    local_addr: SocketAddr,
    kind: &'static str,
}

impl Server {
    /// Binds `addr` and starts the reactor and worker threads (named `http-<kind>`).
    pub fn start(
        kind: &'static str,
        addr: SocketAddr,
        limits: Limits,
        stopping: Arc<AtomicBool>,
        handler: Handler,
    ) -> io::Result<Server> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let local_addr = listener.local_addr()?;
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(io::Error::from)?;
        let wake = Arc::new(
            EventFd::from_value_and_flags(
                0,
                nix::sys::eventfd::EfdFlags::EFD_CLOEXEC
                    | nix::sys::eventfd::EfdFlags::EFD_NONBLOCK,
            )
            .map_err(io::Error::from)?,
        );
        epoll
            .add(&listener, EpollEvent::new(EpollFlags::EPOLLIN, LISTENER))
            .map_err(io::Error::from)?;
        epoll
            .add(&*wake, EpollEvent::new(EpollFlags::EPOLLIN, WAKE))
            .map_err(io::Error::from)?;
        let (tx, rx) = mpsc::sync_channel::<(TcpStream, Request)>(limits.workers.max(1) * 8);
        let rx = Arc::new(Mutex::new(rx));
        let mut workers = Vec::new();
        for i in 0..limits.workers.max(1) {
            let rx = Arc::clone(&rx);
            let handler = Arc::clone(&handler);
            workers.push(
                std::thread::Builder::new()
                    .name(format!("http-{kind}-{i}"))
                    .stack_size(256 * 1024)
                    .spawn(move || work(&rx, &handler, limits))?,
            );
        }
        let reactor = {
            let stopping = Arc::clone(&stopping);
            let wake = Arc::clone(&wake);
            std::thread::Builder::new()
                .name(format!("http-{kind}"))
                .stack_size(256 * 1024)
                .spawn(move || {
                    Reactor {
                        kind,
                        epoll,
                        listener,
                        conns: BTreeMap::new(),
                        next: FIRST_CONN,
                        limits,
                        jobs: tx,
                    }
                    .run(&stopping, &wake)
                })?
        };
        Ok(Server {
            stopping,
            wake,
            reactor: Some(reactor),
            workers,
            local_addr,
            kind,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops serving and waits for the threads (a worker finishes the response it writes).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(reactor) = self.reactor.take() {
            self.stopping.store(true, Ordering::SeqCst);
            if let Err(e) = self.wake.write(1) {
                tracing::warn!("{} server: waking the reactor: {e}", self.kind);
            }
            if reactor.join().is_err() {
                tracing::error!(addr = %self.local_addr, "{} server thread panicked", self.kind);
            }
            for w in self.workers.drain(..) {
                if w.join().is_err() {
                    tracing::error!(addr = %self.local_addr, "{} worker panicked", self.kind);
                }
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

const LISTENER: u64 = 0;
const WAKE: u64 = 1;
const FIRST_CONN: u64 = 2;

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    deadline: Instant,
    /// A refusal was sent; the rest of the request is read and discarded until EOF, so closing
    /// does not reset the connection before the client reads the answer.
    draining: bool,
}

struct Reactor {
    kind: &'static str,
    epoll: Epoll,
    listener: TcpListener,
    /// By token; tokens grow with accept order, so the first entry is the oldest connection
    /// and has the earliest deadline.
    conns: BTreeMap<u64, Conn>,
    next: u64,
    limits: Limits,
    jobs: mpsc::SyncSender<(TcpStream, Request)>,
}

impl Reactor {
    fn run(mut self, stopping: &AtomicBool, wake: &EventFd) {
        let mut events = vec![EpollEvent::empty(); 64];
        loop {
            let timeout = match self.conns.first_key_value() {
                Some((_, c)) => {
                    let ms = c
                        .deadline
                        .saturating_duration_since(Instant::now())
                        .as_millis()
                        .saturating_add(1);
                    EpollTimeout::try_from(ms).unwrap_or(EpollTimeout::MAX)
                }
                None => EpollTimeout::NONE,
            };
            let n = match self.epoll.wait(&mut events, timeout) {
                Ok(n) => n,
                Err(nix::errno::Errno::EINTR) => 0,
                Err(e) => {
                    tracing::error!("{} server: epoll_wait: {e}", self.kind);
                    std::thread::sleep(Duration::from_millis(100));
                    0
                }
            };
            if stopping.load(Ordering::SeqCst) {
                return;
            }
            for ev in &events[..n] {
                match ev.data() {
                    LISTENER => self.accept_all(),
                    WAKE => {
                        let _ = wake.read();
                    }
                    token => self.readable(token),
                }
            }
            let now = Instant::now();
            while let Some(entry) = self.conns.first_entry() {
                if entry.get().deadline > now {
                    break;
                }
                let conn = entry.remove();
                if !conn.draining {
                    tracing::debug!("{} server: request head timed out", self.kind);
                    let _ = self.refuse(conn, 408, "the request did not arrive in time", false);
                }
            }
        }
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if self.conns.len() >= self.limits.max_connections {
                        self.close_oldest();
                    }
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let token = self.next;
                    self.next += 1;
                    let flags = EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP;
                    if let Err(e) = self.epoll.add(&stream, EpollEvent::new(flags, token)) {
                        tracing::warn!("{} server: registering a connection: {e}", self.kind);
                        continue;
                    }
                    self.conns.insert(
                        token,
                        Conn {
                            stream,
                            buf: Vec::new(),
                            deadline: Instant::now() + self.limits.head_timeout,
                            draining: false,
                        },
                    );
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(nix::libc::EMFILE | nix::libc::ENFILE)
                    ) =>
                {
                    // Out of descriptors: make room by closing the oldest waiting connection;
                    // with none to close, back off instead of spinning on the ready listener.
                    if self.conns.is_empty() {
                        tracing::warn!("{} server: accept: {e}", self.kind);
                        std::thread::sleep(Duration::from_millis(100));
                        return;
                    }
                    self.close_oldest();
                }
                Err(e) => {
                    tracing::debug!("{} server: accept: {e}", self.kind);
                    if e.kind() != io::ErrorKind::ConnectionAborted
                        && e.kind() != io::ErrorKind::Interrupted
                    {
                        return;
                    }
                }
            }
        }
    }

    fn close_oldest(&mut self) {
        if let Some((_, conn)) = self.conns.pop_first() {
            tracing::debug!(
                "{} server: connection limit reached, closing the oldest",
                self.kind
            );
            let _ = self.epoll.delete(&conn.stream);
        }
    }

    fn readable(&mut self, token: u64) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        let cap = self.limits.max_head + 2 * self.limits.max_body + 1;
        let mut chunk = [0u8; 4096];
        let mut eof = false;
        loop {
            match conn.stream.read(&mut chunk) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) if conn.draining => {
                    let _ = n;
                }
                Ok(n) => {
                    conn.buf.extend_from_slice(&chunk[..n]);
                    if conn.buf.len() >= cap {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    eof = true;
                    break;
                }
            }
        }
        if conn.draining {
            if eof {
                self.remove(token);
            }
            return;
        }
        match parse_head(&conn.buf, &self.limits) {
            Parse::Incomplete => {
                if eof {
                    self.remove(token);
                }
            }
            Parse::Reject(status, why) => {
                tracing::debug!("{} server: refusing a request: {status} {why}", self.kind);
                if let Some(conn) = self.conns.remove(&token) {
                    if let Some(conn) = self.refuse(conn, status, why, !eof) {
                        self.conns.insert(token, conn);
                    }
                }
            }
            Parse::Done {
                request,
                head_len,
                body_len,
            } => {
                if conn.buf.len() < head_len.saturating_add(body_len) {
                    if eof {
                        self.remove(token);
                    }
                    return;
                }
                let Some(conn) = self.conns.remove(&token) else {
                    return;
                };
                let _ = self.epoll.delete(&conn.stream);
                let stream = conn.stream;
                let ready = stream
                    .set_nonblocking(false)
                    .and_then(|()| stream.set_write_timeout(Some(self.limits.write_timeout)))
                    .and_then(|()| stream.set_read_timeout(Some(self.limits.write_timeout)));
                if ready.is_err() {
                    return;
                }
                match self.jobs.try_send((stream, request)) {
                    Ok(()) => {}
                    Err(mpsc::TrySendError::Full((mut stream, _))) => {
                        tracing::debug!("{} server: all workers busy, 503", self.kind);
                        let _ = stream.write_all(&error_bytes(503, "the server is busy"));
                    }
                    Err(mpsc::TrySendError::Disconnected(_)) => {}
                }
            }
        }
    }

    fn remove(&mut self, token: u64) {
        if let Some(conn) = self.conns.remove(&token) {
            let _ = self.epoll.delete(&conn.stream);
        }
    }

    /// Sends a short error answer (it fits the socket buffer of a fresh connection; a
    /// non-blocking write never stalls the reactor) and, with `drain`, keeps the connection to
    /// read the rest of the request before closing.
    fn refuse(&mut self, mut conn: Conn, status: u16, why: &str, drain: bool) -> Option<Conn> {
        let _ = conn.stream.write(&error_bytes(status, why));
        let _ = conn.stream.shutdown(std::net::Shutdown::Write);
        if drain {
            conn.draining = true;
            conn.buf = Vec::new();
            Some(conn)
        } else {
            let _ = self.epoll.delete(&conn.stream);
            None
        }
    }
}

fn work(rx: &Mutex<mpsc::Receiver<(TcpStream, Request)>>, handler: &Handler, limits: Limits) {
    loop {
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok((mut stream, request)) = job else {
            return;
        };
        match handler(&request) {
            Response::Full {
                status,
                headers,
                body,
            } => {
                let bytes = render(status, &headers, &body, request.method == "HEAD");
                if let Err(e) = stream.write_all(&bytes).and_then(|()| stream.flush()) {
                    tracing::debug!("writing a response: {e}");
                }
            }
            Response::Takeover(f) => {
                let _ = stream.set_write_timeout(Some(limits.write_timeout));
                f(stream);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Parse {
        parse_head(s.as_bytes(), &Limits::default())
    }

    #[test]
    fn parses_heads() {
        let Parse::Done {
            request,
            head_len,
            body_len,
        } = parse("\r\nGET /pods?x=1 HTTP/1.1\r\nHost: a\r\nAccept:  json \r\n\r\nrest")
        else {
            panic!("not done");
        };
        assert_eq!(request.method, "GET");
        assert_eq!(request.target, "/pods?x=1");
        assert!(request.http11);
        assert_eq!(request.header("accept"), "json");
        assert_eq!(request.header("missing"), "");
        assert_eq!((head_len, body_len), (53, 0));
        assert!(matches!(
            parse("POST / HTTP/1.0\nContent-Length: 3\n\nabc"),
            Parse::Done { body_len: 3, .. }
        ));
        assert_eq!(parse("GET / HTTP/1.1\r\nHost: a\r\n"), Parse::Incomplete);
        let chunked = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        for (body, len) in [
            ("3\r\nabc\r\n0\r\n\r\n", Some(13)),
            (
                "3;x=y\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nT: v\r\n\r\nnext",
                Some(45),
            ),
            ("3\r\nabc\r\n0\r\n", None),
            ("3\r\nab", None),
            ("3\r\nabc", None),
        ] {
            let got = match parse(&format!("{chunked}{body}")) {
                Parse::Done { body_len, .. } => Some(body_len),
                Parse::Incomplete => None,
                other => panic!("{body:?}: {other:?}"),
            };
            assert_eq!(got, len, "{body:?}");
        }
        assert_eq!(parse(""), Parse::Incomplete);
    }

    #[test]
    fn refuses_bad_and_oversized_heads() {
        let status = |s: &str| match parse(s) {
            Parse::Reject(code, _) => code,
            other => panic!("{s:?}: {other:?}"),
        };
        assert_eq!(status("GARBAGE\r\n\r\n"), 400);
        assert_eq!(status("GET /pods HTTP/9.9\r\n\r\n"), 505);
        assert_eq!(status("GET / HTTP/1.1\r\n folded\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nbad header\r\n\r\n"), 400);
        assert_eq!(status("POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n"), 400);
        assert_eq!(
            status("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
            400
        );
        assert_eq!(
            status("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"),
            501
        );
        assert_eq!(
            status("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n"),
            400
        );
        assert_eq!(
            status("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
            400
        );
        assert_eq!(
            status("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n20000\r\n"),
            413
        );
        assert_eq!(
            status("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n"),
            400
        );
        assert_eq!(
            status("POST / HTTP/1.1\r\nContent-Length: 70000\r\n\r\n"),
            413
        );
        let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(9000));
        assert_eq!(status(&long), 414);
        assert_eq!(status(&"a".repeat(9000)), 414);
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "b".repeat(17000));
        assert_eq!(status(&big), 431);
        // RFC 9110 8.6 (1*DIGIT) and RFC 9112 7.1 (1*HEXDIG), as Go's strconv.ParseUint and
        // parseHexUint: a sign is not a digit (RUSTSEC-2021-0078's class of framing bug).
        assert_eq!(status("POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n"), 400);
        assert_eq!(status("POST / HTTP/1.1\r\nContent-Length: -0\r\n\r\n"), 400);
        assert_eq!(status("POST / HTTP/1.1\r\nContent-Length: \r\n\r\n"), 400);
        for size in ["+5", "-5", " 5", "0x5", ""] {
            let req = format!(
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{size}\r\nabcde\r\n0\r\n\r\n"
            );
            assert_eq!(status(&req), 400, "chunk size {size:?}");
        }
        // RFC 9110 5.5 / Go's httpguts.ValidHeaderFieldValue: no CTL but HTAB in a value.
        for ctl in ["\x00", "\x01", "\x1b", "\x7f", "a\rb"] {
            let req = format!("GET / HTTP/1.1\r\nX: a{ctl}b\r\n\r\n");
            assert_eq!(status(&req), 400, "value with {ctl:?}");
        }
        assert!(matches!(
            parse("GET / HTTP/1.1\r\nX: a\tb é\r\n\r\n"),
            Parse::Done { .. }
        ));
        let many: String = (0..101).map(|i| format!("X{i}: y\r\n")).collect();
        assert_eq!(status(&format!("GET / HTTP/1.1\r\n{many}\r\n")), 431);
        assert_eq!(
            status(&format!("GET / HTTP/1.1\r\nX: {}", "b".repeat(17000))),
            431
        );
    }

    #[test]
    fn renders_responses() {
        let r = render(
            200,
            &[("A", "b".into()), ("Bad", "x\r\ny".into())],
            b"hi",
            false,
        );
        assert_eq!(
            String::from_utf8_lossy(&r),
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\nA: b\r\n\r\nhi"
        );
        let r = render(200, &[], b"hi", true);
        assert!(r.ends_with(b"\r\n\r\n"));
    }
}
