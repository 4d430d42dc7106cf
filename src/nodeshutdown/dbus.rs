//! A minimal D-Bus client, written against the D-Bus specification (wire format, SASL
//! `EXTERNAL`, unix fd passing): enough for the few calls the node shutdown manager makes to
//! logind and systemd, and for the one signal it watches. Blocking, one connection per user,
//! no introspection, no object server ([decision](../../docs/decisions/dbus-client.md)).
//!
//! - Address: `$DBUS_SYSTEM_BUS_ADDRESS` (`unix:path=...` or `unix:abstract=...`, several
//!   separated by `;`), else `/run/dbus/system_bus_socket`, as libdbus and godbus do.
//! - Authentication: `AUTH EXTERNAL <uid as hex digits>`, then `NEGOTIATE_UNIX_FD` (the
//!   inhibitor lock arrives as a file descriptor) and `BEGIN`; then `Hello`.
//! - Messages: little-endian out; both byte orders in. Values: the basic types, arrays,
//!   structs, dict entries and variants. File descriptors arrive as `SCM_RIGHTS` ancillary data
//!   and are handed to the message that names them (`UNIX_FDS`).

use std::collections::VecDeque;
use std::io::{IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// What can go wrong talking to the bus.
#[derive(Debug, thiserror::Error)]
pub enum DbusError {
    #[error("D-Bus address {0:?}: no usable unix: address")]
    Address(String),
    #[error("connecting to the D-Bus socket {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("D-Bus I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("D-Bus authentication refused: {0:?}")]
    Auth(String),
    #[error("the bus does not pass file descriptors: {0:?}")]
    NoUnixFd(String),
    #[error("malformed D-Bus message: {0}")]
    Malformed(&'static str),
    #[error("D-Bus message of {0} bytes is too large")]
    TooLarge(usize),
    #[error("the bus closed the connection")]
    Closed,
    #[error("no reply to {member} within {timeout:?}")]
    Timeout { member: String, timeout: Duration },
    #[error("{member}: {name}: {message}")]
    Remote {
        member: String,
        name: String,
        message: String,
    },
}

/// Messages larger than this are refused (the spec allows 128 MiB; nanolet's replies are tiny).
const MAX_MESSAGE: usize = 1 << 20;

/// A D-Bus value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Byte(u8),
    Bool(bool),
    I16(i16),
    U16(u16),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    Double(f64),
    Str(String),
    Path(String),
    Signature(String),
    /// A unix fd: the index into the message's file descriptors.
    Fd(u32),
    Array(Vec<Value>),
    /// An empty array of the element type given by its signature (`(sa(sv))`).
    EmptyArray(String),
    Struct(Vec<Value>),
    DictEntry(Box<Value>, Box<Value>),
    Variant(Box<Value>),
}

impl Value {
    /// The value's type signature. An empty array is written as an array of bytes.
    pub fn signature(&self) -> String {
        match self {
            Value::Byte(_) => "y".into(),
            Value::Bool(_) => "b".into(),
            Value::I16(_) => "n".into(),
            Value::U16(_) => "q".into(),
            Value::I32(_) => "i".into(),
            Value::U32(_) => "u".into(),
            Value::I64(_) => "x".into(),
            Value::U64(_) => "t".into(),
            Value::Double(_) => "d".into(),
            Value::Str(_) => "s".into(),
            Value::Path(_) => "o".into(),
            Value::Signature(_) => "g".into(),
            Value::Fd(_) => "h".into(),
            Value::Array(items) => {
                format!("a{}", items.first().map_or("y".into(), Value::signature))
            }
            Value::EmptyArray(elem) => format!("a{elem}"),
            Value::Struct(fields) => {
                let inner: String = fields.iter().map(Value::signature).collect();
                format!("({inner})")
            }
            Value::DictEntry(k, v) => format!("{{{}{}}}", k.signature(), v.signature()),
            Value::Variant(_) => "v".into(),
        }
    }
}

/// Alignment of a type by its first signature character.
fn alignment(code: u8) -> usize {
    match code {
        b'n' | b'q' => 2,
        b'b' | b'i' | b'u' | b's' | b'o' | b'h' | b'a' => 4,
        b'x' | b't' | b'd' | b'(' | b'{' => 8,
        _ => 1,
    }
}

/// Splits the first complete type off a signature.
fn split_type(sig: &[u8]) -> Result<(&[u8], &[u8]), DbusError> {
    let bad = DbusError::Malformed("signature");
    let first = *sig.first().ok_or(DbusError::Malformed("empty signature"))?;
    let len = match first {
        b'a' => 1 + split_type(&sig[1..])?.0.len(),
        b'(' | b'{' => {
            let close = if first == b'(' { b')' } else { b'}' };
            let mut rest = &sig[1..];
            let mut n = 1;
            loop {
                match rest.first() {
                    Some(&c) if c == close => break n + 1,
                    Some(_) => {
                        let (t, r) = split_type(rest)?;
                        n += t.len();
                        rest = r;
                    }
                    None => return Err(bad),
                }
            }
        }
        b'y' | b'b' | b'n' | b'q' | b'i' | b'u' | b'x' | b't' | b'd' | b's' | b'o' | b'g'
        | b'h' | b'v' => 1,
        _ => return Err(bad),
    };
    Ok(sig.split_at(len))
}

/// Writes values (little-endian), aligned relative to the buffer's start.
#[derive(Default)]
struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    fn pad(&mut self, n: usize) {
        while self.buf.len() % n != 0 {
            self.buf.push(0);
        }
    }

    fn u32(&mut self, v: u32) {
        self.pad(4);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }

    fn sig(&mut self, s: &str) {
        self.buf.push(s.len() as u8);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }

    fn value(&mut self, v: &Value) {
        match v {
            Value::Byte(b) => self.buf.push(*b),
            Value::Bool(b) => self.u32(u32::from(*b)),
            Value::I16(n) => {
                self.pad(2);
                self.buf.extend_from_slice(&n.to_le_bytes());
            }
            Value::U16(n) => {
                self.pad(2);
                self.buf.extend_from_slice(&n.to_le_bytes());
            }
            Value::I32(n) => {
                self.pad(4);
                self.buf.extend_from_slice(&n.to_le_bytes());
            }
            Value::U32(n) | Value::Fd(n) => self.u32(*n),
            Value::I64(n) => {
                self.pad(8);
                self.buf.extend_from_slice(&n.to_le_bytes());
            }
            Value::U64(n) => {
                self.pad(8);
                self.buf.extend_from_slice(&n.to_le_bytes());
            }
            Value::Double(d) => {
                self.pad(8);
                self.buf.extend_from_slice(&d.to_le_bytes());
            }
            Value::Str(s) | Value::Path(s) => self.str(s),
            Value::Signature(s) => self.sig(s),
            Value::Array(items) => {
                self.pad(4);
                let at = self.buf.len();
                self.buf.extend_from_slice(&[0; 4]);
                let elem = v.signature();
                self.pad(alignment(elem.as_bytes()[1]));
                let start = self.buf.len();
                for item in items {
                    self.value(item);
                }
                let len = (self.buf.len() - start) as u32;
                self.buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
            }
            Value::EmptyArray(elem) => {
                self.u32(0);
                self.pad(elem.bytes().next().map_or(1, alignment));
            }
            Value::Struct(fields) => {
                self.pad(8);
                for f in fields {
                    self.value(f);
                }
            }
            Value::DictEntry(k, val) => {
                self.pad(8);
                self.value(k);
                self.value(val);
            }
            Value::Variant(inner) => {
                self.sig(&inner.signature());
                self.value(inner);
            }
        }
    }
}

/// Reads values from a buffer whose offset 0 is 8-aligned in the message.
struct Reader<'a> {
    buf: &'a [u8],
    off: usize,
    big: bool,
}

impl Reader<'_> {
    fn align(&mut self, n: usize) -> Result<(), DbusError> {
        let to = self.off.div_ceil(n) * n;
        if to > self.buf.len() {
            return Err(DbusError::Malformed("truncated padding"));
        }
        self.off = to;
        Ok(())
    }

    fn take(&mut self, n: usize) -> Result<&[u8], DbusError> {
        let end = self
            .off
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or(DbusError::Malformed("truncated value"))?;
        let s = &self.buf[self.off..end];
        self.off = end;
        Ok(s)
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], DbusError> {
        self.align(N)?;
        let mut b = [0u8; N];
        b.copy_from_slice(self.take(N)?);
        if self.big {
            b.reverse();
        }
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, DbusError> {
        Ok(u32::from_le_bytes(self.fixed()?))
    }

    fn string(&mut self, len: usize) -> Result<String, DbusError> {
        let bytes = self.take(len)?.to_vec();
        if self.take(1)? != [0] {
            return Err(DbusError::Malformed("string without NUL"));
        }
        String::from_utf8(bytes).map_err(|_| DbusError::Malformed("string not UTF-8"))
    }

    fn signature(&mut self) -> Result<String, DbusError> {
        let len = usize::from(self.take(1)?[0]);
        self.string(len)
    }

    /// One value of the complete type `sig`; `depth` bounds nesting.
    fn value(&mut self, sig: &[u8], depth: u32) -> Result<Value, DbusError> {
        if depth > 64 {
            return Err(DbusError::Malformed("nested too deeply"));
        }
        let code = *sig.first().ok_or(DbusError::Malformed("empty signature"))?;
        Ok(match code {
            b'y' => Value::Byte(self.take(1)?[0]),
            b'b' => match self.u32()? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                _ => return Err(DbusError::Malformed("boolean not 0 or 1")),
            },
            b'n' => Value::I16(i16::from_le_bytes(self.fixed()?)),
            b'q' => Value::U16(u16::from_le_bytes(self.fixed()?)),
            b'i' => Value::I32(i32::from_le_bytes(self.fixed()?)),
            b'u' => Value::U32(self.u32()?),
            b'h' => Value::Fd(self.u32()?),
            b'x' => Value::I64(i64::from_le_bytes(self.fixed()?)),
            b't' => Value::U64(u64::from_le_bytes(self.fixed()?)),
            b'd' => Value::Double(f64::from_le_bytes(self.fixed()?)),
            b's' | b'o' => {
                let len = self.u32()? as usize;
                let s = self.string(len)?;
                if code == b's' {
                    Value::Str(s)
                } else {
                    Value::Path(s)
                }
            }
            b'g' => Value::Signature(self.signature()?),
            b'v' => {
                let inner = self.signature()?;
                let (t, rest) = split_type(inner.as_bytes())?;
                if !rest.is_empty() {
                    return Err(DbusError::Malformed("variant of several types"));
                }
                Value::Variant(Box::new(self.value(t, depth + 1)?))
            }
            b'a' => {
                let len = self.u32()? as usize;
                let (elem, _) = split_type(&sig[1..])?;
                self.align(alignment(elem[0]))?;
                let end = self
                    .off
                    .checked_add(len)
                    .filter(|e| *e <= self.buf.len())
                    .ok_or(DbusError::Malformed("array past the end"))?;
                let mut items = Vec::new();
                while self.off < end {
                    items.push(self.value(elem, depth + 1)?);
                }
                Value::Array(items)
            }
            b'(' | b'{' => {
                self.align(8)?;
                let mut inner = &sig[1..sig.len() - 1];
                let mut fields = Vec::new();
                while !inner.is_empty() {
                    let (t, rest) = split_type(inner)?;
                    fields.push(self.value(t, depth + 1)?);
                    inner = rest;
                }
                if code == b'{' {
                    let mut it = fields.into_iter();
                    match (it.next(), it.next(), it.next()) {
                        (Some(k), Some(v), None) => Value::DictEntry(Box::new(k), Box::new(v)),
                        _ => return Err(DbusError::Malformed("dict entry not a pair")),
                    }
                } else {
                    Value::Struct(fields)
                }
            }
            _ => return Err(DbusError::Malformed("unknown type code")),
        })
    }
}

/// The message types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    MethodCall = 1,
    MethodReturn = 2,
    Error = 3,
    Signal = 4,
}

/// A received message.
#[derive(Debug, Default)]
pub struct Message {
    pub kind: Option<Kind>,
    pub serial: u32,
    pub reply_serial: Option<u32>,
    pub path: String,
    pub interface: String,
    pub member: String,
    pub error_name: String,
    pub sender: String,
    pub signature: String,
    pub body: Vec<Value>,
    /// The file descriptors the message carries (`h` values index into it).
    pub fds: Vec<OwnedFd>,
}

/// What a method call or signal says about itself.
pub struct Call<'a> {
    pub destination: Option<&'a str>,
    pub path: &'a str,
    pub interface: &'a str,
    pub member: &'a str,
    pub args: &'a [Value],
}

/// Encodes a message (little-endian).
fn encode(kind: Kind, serial: u32, call: &Call<'_>) -> Vec<u8> {
    let mut body = Writer::default();
    for a in call.args {
        body.value(a);
    }
    let signature: String = call.args.iter().map(Value::signature).collect();
    let mut fields = vec![
        (1u8, Value::Path(call.path.into())),
        (2, Value::Str(call.interface.into())),
        (3, Value::Str(call.member.into())),
    ];
    if let Some(d) = call.destination {
        fields.push((6, Value::Str(d.into())));
    }
    if !signature.is_empty() {
        fields.push((8, Value::Signature(signature)));
    }
    let mut w = Writer::default();
    w.buf.extend_from_slice(&[b'l', kind as u8, 0, 1]);
    w.u32(body.buf.len() as u32);
    w.u32(serial);
    w.value(&Value::Array(
        fields
            .into_iter()
            .map(|(code, v)| Value::Struct(vec![Value::Byte(code), Value::Variant(Box::new(v))]))
            .collect(),
    ));
    w.pad(8);
    w.buf.extend_from_slice(&body.buf);
    w.buf
}

/// How many bytes the message starting at `buf` needs in all, once its fixed header is there.
fn message_len(buf: &[u8]) -> Result<Option<usize>, DbusError> {
    if buf.len() < 16 {
        return Ok(None);
    }
    let big = match buf[0] {
        b'l' => false,
        b'B' => true,
        _ => return Err(DbusError::Malformed("unknown byte order")),
    };
    let word = |at: usize| {
        let mut b = [0u8; 4];
        b.copy_from_slice(&buf[at..at + 4]);
        if big {
            u32::from_be_bytes(b) as usize
        } else {
            u32::from_le_bytes(b) as usize
        }
    };
    let (body, fields) = (word(4), word(12));
    let total = (16 + fields).div_ceil(8) * 8 + body;
    if total > MAX_MESSAGE {
        return Err(DbusError::TooLarge(total));
    }
    Ok(Some(total))
}

/// Decodes one complete message; also returns how many descriptors it carries (`UNIX_FDS`).
fn decode(buf: &[u8]) -> Result<(Message, u32), DbusError> {
    let big = buf[0] == b'B';
    let mut r = Reader { buf, off: 4, big };
    let mut m = Message {
        kind: match buf[1] {
            1 => Some(Kind::MethodCall),
            2 => Some(Kind::MethodReturn),
            3 => Some(Kind::Error),
            4 => Some(Kind::Signal),
            _ => None,
        },
        ..Default::default()
    };
    let body_len = r.u32()? as usize;
    m.serial = r.u32()?;
    let Value::Array(fields) = r.value(b"a(yv)", 0)? else {
        return Err(DbusError::Malformed("header fields"));
    };
    let mut n_fds = 0;
    for f in fields {
        let Value::Struct(pair) = f else { continue };
        let (Some(Value::Byte(code)), Some(Value::Variant(v))) = (pair.first(), pair.get(1)) else {
            continue;
        };
        match (code, v.as_ref()) {
            (1, Value::Path(s)) => m.path = s.clone(),
            (2, Value::Str(s)) => m.interface = s.clone(),
            (3, Value::Str(s)) => m.member = s.clone(),
            (4, Value::Str(s)) => m.error_name = s.clone(),
            (5, Value::U32(n)) => m.reply_serial = Some(*n),
            (7, Value::Str(s)) => m.sender = s.clone(),
            (8, Value::Signature(s)) => m.signature = s.clone(),
            (9, Value::U32(n)) => n_fds = *n,
            _ => {}
        }
    }
    r.align(8)?;
    let body = r.take(body_len)?;
    let mut br = Reader {
        buf: body,
        off: 0,
        big,
    };
    let mut sig = m.signature.as_bytes();
    while !sig.is_empty() {
        let (t, rest) = split_type(sig)?;
        m.body.push(br.value(t, 0)?);
        sig = rest;
    }
    Ok((m, n_fds))
}

/// The socket address of a `unix:` address entry.
fn socket_addr(entry: &str) -> Option<std::os::unix::net::SocketAddr> {
    let rest = entry.strip_prefix("unix:")?;
    for kv in rest.split(',') {
        let (k, v) = kv.split_once('=')?;
        let v = unescape(v)?;
        match k {
            "path" => return std::os::unix::net::SocketAddr::from_pathname(v).ok(),
            "abstract" => {
                use std::os::linux::net::SocketAddrExt;
                return std::os::unix::net::SocketAddr::from_abstract_name(v.as_bytes()).ok();
            }
            _ => {}
        }
    }
    None
}

/// Undoes the address format's `%XX` escapes.
fn unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The system bus address: `$DBUS_SYSTEM_BUS_ADDRESS`, else the well-known socket.
pub fn system_bus_address() -> String {
    std::env::var("DBUS_SYSTEM_BUS_ADDRESS")
        .ok()
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| "unix:path=/run/dbus/system_bus_socket".into())
}

/// A connection to a message bus.
pub struct Connection {
    stream: UnixStream,
    serial: u32,
    rbuf: Vec<u8>,
    /// Descriptors received and not yet handed to a message.
    fds: VecDeque<OwnedFd>,
    /// Signals read while waiting for a reply.
    queued: VecDeque<Message>,
    /// The name the bus gave us (`Hello`).
    pub unique_name: String,
}

impl Connection {
    /// Connects to the first reachable address of `address` and authenticates.
    pub fn connect(address: &str) -> Result<Connection, DbusError> {
        Connection::open(address, true)
    }

    /// Connects to a peer that is not a bus (systemd's private socket, `/run/systemd/private`,
    /// as go-systemd's `NewSystemdConnection`): authenticated, but no `Hello`.
    pub fn connect_direct(address: &str) -> Result<Connection, DbusError> {
        Connection::open(address, false)
    }

    fn open(address: &str, hello: bool) -> Result<Connection, DbusError> {
        let mut last = None;
        for entry in address.split(';').filter(|e| !e.is_empty()) {
            let Some(addr) = socket_addr(entry) else {
                continue;
            };
            match UnixStream::connect_addr(&addr) {
                Ok(stream) => return Connection::handshake(stream, hello),
                Err(source) => {
                    last = Some(DbusError::Connect {
                        addr: entry.to_string(),
                        source,
                    })
                }
            }
        }
        Err(last.unwrap_or_else(|| DbusError::Address(address.to_string())))
    }

    fn handshake(mut stream: UnixStream, hello: bool) -> Result<Connection, DbusError> {
        stream.set_read_timeout(Some(Duration::from_secs(25)))?;
        let uid = nix::unistd::geteuid().as_raw().to_string();
        let hex: String = uid.bytes().map(|b| format!("{b:02x}")).collect();
        stream.write_all(format!("\0AUTH EXTERNAL {hex}\r\n").as_bytes())?;
        let ok = read_line(&mut stream)?;
        if !ok.starts_with("OK ") {
            return Err(DbusError::Auth(ok));
        }
        stream.write_all(b"NEGOTIATE_UNIX_FD\r\n")?;
        let agree = read_line(&mut stream)?;
        if agree != "AGREE_UNIX_FD" {
            return Err(DbusError::NoUnixFd(agree));
        }
        stream.write_all(b"BEGIN\r\n")?;
        let mut c = Connection {
            stream,
            serial: 0,
            rbuf: Vec::new(),
            fds: VecDeque::new(),
            queued: VecDeque::new(),
            unique_name: String::new(),
        };
        if !hello {
            return Ok(c);
        }
        let reply = c.call(
            &Call {
                destination: Some("org.freedesktop.DBus"),
                path: "/org/freedesktop/DBus",
                interface: "org.freedesktop.DBus",
                member: "Hello",
                args: &[],
            },
            Duration::from_secs(25),
        )?;
        if let Some(Value::Str(name)) = reply.body.first() {
            c.unique_name = name.clone();
        }
        Ok(c)
    }

    fn next_serial(&mut self) -> u32 {
        self.serial = self.serial.wrapping_add(1).max(1);
        self.serial
    }

    /// Calls a method and waits for its reply; an error reply is [`DbusError::Remote`].
    /// Signals that arrive meanwhile are kept for [`Connection::next_signal`].
    pub fn call(&mut self, call: &Call<'_>, timeout: Duration) -> Result<Message, DbusError> {
        let serial = self.next_serial();
        self.stream
            .write_all(&encode(Kind::MethodCall, serial, call))?;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(m) = self.read_message(left)? else {
                return Err(DbusError::Timeout {
                    member: call.member.to_string(),
                    timeout,
                });
            };
            match m.kind {
                Some(Kind::MethodReturn) if m.reply_serial == Some(serial) => return Ok(m),
                Some(Kind::Error) if m.reply_serial == Some(serial) => {
                    let message = match m.body.first() {
                        Some(Value::Str(s)) => s.clone(),
                        _ => String::new(),
                    };
                    return Err(DbusError::Remote {
                        member: call.member.to_string(),
                        name: m.error_name,
                        message,
                    });
                }
                Some(Kind::Signal) => self.queued.push_back(m),
                _ => {}
            }
        }
    }

    /// The next signal, waiting at most `timeout`; `None` when none came.
    pub fn next_signal(&mut self, timeout: Duration) -> Result<Option<Message>, DbusError> {
        if let Some(m) = self.queued.pop_front() {
            return Ok(Some(m));
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.read_message(left)? {
                None => return Ok(None),
                Some(m) if m.kind == Some(Kind::Signal) => return Ok(Some(m)),
                Some(_) => {}
            }
        }
    }

    /// One message, waiting at most `timeout` for it to begin arriving.
    fn read_message(&mut self, timeout: Duration) -> Result<Option<Message>, DbusError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(total) = message_len(&self.rbuf)? {
                if self.rbuf.len() >= total {
                    let raw: Vec<u8> = self.rbuf.drain(..total).collect();
                    let (mut m, n) = decode(&raw)?;
                    let n = n as usize;
                    if n > self.fds.len() {
                        return Err(DbusError::Malformed("fewer fds than UNIX_FDS"));
                    }
                    m.fds = self.fds.drain(..n).collect();
                    return Ok(Some(m));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() && self.rbuf.is_empty() {
                return Ok(None);
            }
            // A message begun is read to its end (the bus sends whole messages).
            let wait = if self.rbuf.is_empty() {
                left
            } else {
                Duration::from_secs(25)
            };
            if !self.fill(wait)? {
                if self.rbuf.is_empty() {
                    return Ok(None);
                }
                return Err(DbusError::Malformed("message cut off"));
            }
        }
    }

    /// Reads what is there (bytes and descriptors); false on timeout.
    fn fill(&mut self, timeout: Duration) -> Result<bool, DbusError> {
        use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
        self.stream
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        let mut chunk = [0u8; 4096];
        let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; 16]);
        let (n, fds) = {
            let mut iov = [IoSliceMut::new(&mut chunk)];
            let r = match recvmsg::<()>(
                self.stream.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                Ok(r) => r,
                Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EINTR) => {
                    return Ok(false);
                }
                Err(e) => return Err(DbusError::Io(e.into())),
            };
            let mut fds = Vec::new();
            for c in r.cmsgs().map_err(|e| DbusError::Io(e.into()))? {
                if let ControlMessageOwned::ScmRights(raw) = c {
                    fds.extend(raw);
                }
            }
            (r.bytes, fds)
        };
        for fd in fds {
            // SAFETY: the kernel just installed this descriptor for us (SCM_RIGHTS); nothing
            // else owns it.
            self.fds.push_back(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        if n == 0 {
            return Err(DbusError::Closed);
        }
        self.rbuf.extend_from_slice(&chunk[..n]);
        Ok(true)
    }
}

/// One line of the authentication exchange, without its `\r\n`.
fn read_line(stream: &mut UnixStream) -> Result<String, DbusError> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        if stream.read(&mut b)? == 0 {
            return Err(DbusError::Closed);
        }
        line.push(b[0]);
        if line.len() > 512 {
            return Err(DbusError::Malformed("authentication line too long"));
        }
    }
    line.truncate(line.len() - 2);
    Ok(String::from_utf8_lossy(&line).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_through_the_wire_format() {
        let values = vec![
            Value::Byte(7),
            Value::Bool(true),
            Value::I16(-3),
            Value::U64(30_000_000),
            Value::Str("shutdown".into()),
            Value::Path("/org/freedesktop/login1".into()),
            Value::Signature("a{sv}".into()),
            Value::Variant(Box::new(Value::U64(5_000_000))),
            Value::Array(vec![Value::DictEntry(
                Box::new(Value::Str("k".into())),
                Box::new(Value::Variant(Box::new(Value::I32(-1)))),
            )]),
            Value::Struct(vec![Value::Byte(1), Value::I64(-9)]),
            Value::Fd(0),
        ];
        let mut w = Writer::default();
        for v in &values {
            w.value(v);
        }
        let sig: String = values.iter().map(Value::signature).collect();
        assert_eq!(sig, "ybntsogva{sv}(yx)h");
        let mut r = Reader {
            buf: &w.buf,
            off: 0,
            big: false,
        };
        let mut s = sig.as_bytes();
        let mut back = vec![];
        while !s.is_empty() {
            let (t, rest) = split_type(s).unwrap();
            back.push(r.value(t, 0).unwrap());
            s = rest;
        }
        assert_eq!(back, values);
        assert_eq!(r.off, w.buf.len());
    }

    /// The D-Bus specification's layout: header fields padded to 8, the body after them, the
    /// signature field naming the body's types; a method call carries path, interface,
    /// member and destination.
    #[test]
    fn encoded_call_decodes_with_its_header_fields() {
        let raw = encode(
            Kind::MethodCall,
            5,
            &Call {
                destination: Some("org.freedesktop.login1"),
                path: "/org/freedesktop/login1",
                interface: "org.freedesktop.login1.Manager",
                member: "Inhibit",
                args: &[
                    Value::Str("shutdown".into()),
                    Value::Str("nanolet".into()),
                    Value::Str("why".into()),
                    Value::Str("delay".into()),
                ],
            },
        );
        assert_eq!(&raw[..4], b"l\x01\x00\x01");
        assert_eq!(message_len(&raw).unwrap(), Some(raw.len()));
        let (m, fds) = decode(&raw).unwrap();
        assert_eq!(fds, 0);
        assert_eq!(m.kind, Some(Kind::MethodCall));
        assert_eq!(m.serial, 5);
        assert_eq!(m.member, "Inhibit");
        assert_eq!(m.interface, "org.freedesktop.login1.Manager");
        assert_eq!(m.path, "/org/freedesktop/login1");
        assert_eq!(m.signature, "ssss");
        assert_eq!(m.body[3], Value::Str("delay".into()));
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        assert!(message_len(b"x\x01\x00\x01\0\0\0\0\0\0\0\0\0\0\0\0").is_err());
        // A body length past the 1 MiB cap.
        assert!(matches!(
            message_len(b"l\x02\x00\x01\xff\xff\xff\x7f\x01\0\0\0\0\0\0\0"),
            Err(DbusError::TooLarge(_))
        ));
        let mut r = Reader {
            buf: &[1, 0, 0],
            off: 0,
            big: false,
        };
        assert!(r.value(b"u", 0).is_err());
        assert!(split_type(b"(ss").is_err());
        assert!(split_type(b"z").is_err());
        // A string length past the end.
        let mut r = Reader {
            buf: &[9, 0, 0, 0, b'a', 0],
            off: 0,
            big: false,
        };
        assert!(r.value(b"s", 0).is_err());
    }

    #[test]
    fn addresses_are_parsed_as_libdbus_does() {
        assert!(socket_addr("unix:path=/run/dbus/system_bus_socket").is_some());
        assert!(socket_addr("unix:abstract=/tmp/dbus-x,guid=00").is_some());
        assert!(socket_addr("tcp:host=localhost,port=1").is_none());
        assert_eq!(unescape("/tmp/a%2cb").as_deref(), Some("/tmp/a,b"));
        assert_eq!(unescape("%zz"), None);
    }
}
