//! A small WebSocket (RFC 6455) client: the opening handshake over a plain TCP stream, frame
//! encoding (client frames masked), frame and message reading (fragmented messages joined,
//! control frames interleaved), ping/pong and close, and the Kubernetes channel protocols
//! (`channel.k8s.io` family: the first byte of each binary message is the channel number).
//!
//! Used by `nanolet exec -it` and `nanolet port-forward` to talk to the CRI streaming server
//! (containerd's, on 127.0.0.1) and by the streaming proxy's tests. Only `ws://`-style plain
//! HTTP: the runtime's streaming server listens on loopback without TLS.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;

/// The channel protocol nanolet's client asks for (exec/attach and port-forward alike): binary
/// messages, first byte = channel, error channel carrying a v1 `Status` (v4).
pub const V4_CHANNEL_PROTOCOL: &str = "v4.channel.k8s.io";

/// The largest message (joined fragments) accepted; the streaming server sends at most 32 KiB
/// per message, and nothing larger is needed for a `Status`.
pub const MAX_MESSAGE: usize = 1 << 20;

pub const OP_CONTINUATION: u8 = 0x0;
pub const OP_TEXT: u8 = 0x1;
pub const OP_BINARY: u8 = 0x2;
pub const OP_CLOSE: u8 = 0x8;
pub const OP_PING: u8 = 0x9;
pub const OP_PONG: u8 = 0xA;

/// Time to connect and to get the server's answer to the upgrade.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The GUID of RFC 6455 section 1.3 that the server appends to the key.
const HANDSHAKE_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

#[derive(Debug, thiserror::Error)]
pub enum WsError {
    #[error("websocket I/O: {0}")]
    Io(#[from] io::Error),
    #[error("websocket URL {url}: {reason}")]
    Url { url: String, reason: String },
    #[error("websocket upgrade refused by {url}: {status}")]
    Refused { url: String, status: String },
    #[error("websocket handshake with {url}: {reason}")]
    Handshake { url: String, reason: String },
    #[error("websocket protocol violation: {0}")]
    Protocol(String),
    #[error("websocket message of {size} bytes is over the limit of {limit}")]
    TooLarge { size: u64, limit: usize },
}

/// One frame as read from the wire (payload unmasked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub fin: bool,
    pub opcode: u8,
    pub payload: Vec<u8>,
}

/// What [`WsReader::read_message`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A complete text (opcode 1) or binary (opcode 2) message.
    Data {
        opcode: u8,
        data: Vec<u8>,
    },
    /// A ping; the caller answers with a pong of the same payload.
    Ping(Vec<u8>),
    Pong(Vec<u8>),
    /// A close frame: status code (if any) and reason.
    Close(Option<u16>, String),
}

/// Encodes one frame. `mask` is Some for client frames (RFC 6455 5.3: a client masks every
/// frame), None for server frames.
pub fn encode_frame(fin: bool, opcode: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 14);
    out.push(if fin { 0x80 } else { 0 } | (opcode & 0x0f));
    let m = if mask.is_some() { 0x80 } else { 0 };
    let len = payload.len();
    if len < 126 {
        out.push(m | len as u8);
    } else if len <= 0xffff {
        out.push(m | 126);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(m | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    match mask {
        Some(k) => {
            out.extend_from_slice(&k);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ k[i % 4]));
        }
        None => out.extend_from_slice(payload),
    }
    out
}

/// Reads one frame; refuses payloads over `limit`, reserved bits, and fragmented or long
/// control frames (RFC 6455 5.5).
pub fn read_frame(r: &mut impl Read, limit: usize) -> Result<Frame, WsError> {
    let mut h = [0u8; 2];
    r.read_exact(&mut h)?;
    if h[0] & 0x70 != 0 {
        return Err(WsError::Protocol(
            "reserved bits set without an extension".into(),
        ));
    }
    let fin = h[0] & 0x80 != 0;
    let opcode = h[0] & 0x0f;
    let masked = h[1] & 0x80 != 0;
    let len = match h[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            r.read_exact(&mut b)?;
            u64::from(u16::from_be_bytes(b))
        }
        127 => {
            let mut b = [0u8; 8];
            r.read_exact(&mut b)?;
            u64::from_be_bytes(b)
        }
        n => u64::from(n),
    };
    if opcode >= 0x8 && (!fin || len > 125) {
        return Err(WsError::Protocol(format!(
            "control frame {opcode:#x} fragmented or over 125 bytes"
        )));
    }
    if !matches!(opcode, 0x0..=0x2 | 0x8..=0xA) {
        return Err(WsError::Protocol(format!("unknown opcode {opcode:#x}")));
    }
    if len > limit as u64 {
        return Err(WsError::TooLarge { size: len, limit });
    }
    let mut key = [0u8; 4];
    if masked {
        r.read_exact(&mut key)?;
    }
    let mut payload = vec![0u8; len as usize];
    r.read_exact(&mut payload)?;
    if masked {
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= key[i % 4];
        }
    }
    Ok(Frame {
        fin,
        opcode,
        payload,
    })
}

/// The reading half: joins fragments into messages, passes control frames through.
pub struct WsReader<R> {
    inner: R,
    limit: usize,
    /// A fragmented message being joined (kept across interleaved control frames).
    partial: Option<(u8, Vec<u8>)>,
}

impl<R: Read> WsReader<R> {
    pub fn new(inner: R) -> Self {
        WsReader {
            inner,
            limit: MAX_MESSAGE,
            partial: None,
        }
    }

    /// The next message. Control frames between fragments are returned at once (the partial
    /// message is kept). Ok(None) at a clean end of the stream before a frame starts.
    pub fn read_message(&mut self) -> Result<Option<Message>, WsError> {
        loop {
            let partial = &mut self.partial;
            let f = match read_frame(&mut self.inner, self.limit) {
                Ok(f) => f,
                Err(WsError::Io(e))
                    if e.kind() == io::ErrorKind::UnexpectedEof && partial.is_none() =>
                {
                    return Ok(None);
                }
                Err(e) => return Err(e),
            };
            match f.opcode {
                OP_PING => return Ok(Some(Message::Ping(f.payload))),
                OP_PONG => return Ok(Some(Message::Pong(f.payload))),
                OP_CLOSE => return Ok(Some(close_message(&f.payload))),
                OP_CONTINUATION => {
                    let Some((_, buf)) = partial.as_mut() else {
                        return Err(WsError::Protocol(
                            "continuation without a first frame".into(),
                        ));
                    };
                    if buf.len() + f.payload.len() > self.limit {
                        return Err(WsError::TooLarge {
                            size: (buf.len() + f.payload.len()) as u64,
                            limit: self.limit,
                        });
                    }
                    buf.extend_from_slice(&f.payload);
                }
                op => {
                    if partial.is_some() {
                        return Err(WsError::Protocol(
                            "new message inside a fragmented one".into(),
                        ));
                    }
                    *partial = Some((op, f.payload));
                }
            }
            if f.fin {
                if let Some((opcode, data)) = partial.take() {
                    return Ok(Some(Message::Data { opcode, data }));
                }
            }
        }
    }
}

fn close_message(p: &[u8]) -> Message {
    if p.len() >= 2 {
        let code = u16::from_be_bytes([p[0], p[1]]);
        Message::Close(Some(code), String::from_utf8_lossy(&p[2..]).into_owned())
    } else {
        Message::Close(None, String::new())
    }
}

/// The writing half of a client: every frame masked with a fresh key.
pub struct WsWriter<W> {
    inner: W,
    keys: KeySource,
}

impl<W: Write> WsWriter<W> {
    pub fn new(inner: W) -> Self {
        WsWriter {
            inner,
            keys: KeySource::new(),
        }
    }

    /// Sends one unfragmented frame.
    pub fn send(&mut self, opcode: u8, payload: &[u8]) -> io::Result<()> {
        let key = self.keys.next();
        self.inner
            .write_all(&encode_frame(true, opcode, payload, Some(key)))?;
        self.inner.flush()
    }

    /// Sends `data` on channel `ch` of a binary `channel.k8s.io` protocol.
    pub fn send_channel(&mut self, ch: u8, data: &[u8]) -> io::Result<()> {
        let mut m = Vec::with_capacity(data.len() + 1);
        m.push(ch);
        m.extend_from_slice(data);
        self.send(OP_BINARY, &m)
    }

    /// A close frame with status 1000 (normal closure).
    pub fn close(&mut self) -> io::Result<()> {
        self.send(OP_CLOSE, &1000u16.to_be_bytes())
    }
}

/// Masking keys: from the kernel's random source, else (no /dev/urandom) from std's randomly
/// seeded hasher. The mask protects intermediaries, not secrets (RFC 6455 10.3).
struct KeySource {
    urandom: Option<std::fs::File>,
    counter: u64,
}

impl KeySource {
    fn new() -> Self {
        KeySource {
            urandom: std::fs::File::open("/dev/urandom").ok(),
            counter: 0,
        }
    }
    fn next(&mut self) -> [u8; 4] {
        let mut k = [0u8; 4];
        if let Some(f) = self.urandom.as_mut() {
            if f.read_exact(&mut k).is_ok() {
                return k;
            }
        }
        use std::hash::{BuildHasher, Hasher};
        self.counter += 1;
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(self.counter);
        let v = h.finish().to_le_bytes();
        [v[0], v[1], v[2], v[3]]
    }
}

/// A parsed `http://host:port/path?query` URL (the CRI streaming server's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    /// host:port, as to connect to and to send in `Host`.
    pub authority: String,
    /// path and query, "/" at least.
    pub target: String,
}

pub fn parse_http_url(url: &str) -> Result<HttpUrl, WsError> {
    let bad = |reason: &str| WsError::Url {
        url: url.to_string(),
        reason: reason.to_string(),
    };
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| bad("only http:// streaming URLs are supported"))?;
    let (auth, target) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if auth.is_empty() || auth.contains('@') {
        return Err(bad("no host, or user information in the URL"));
    }
    let authority = if auth
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        auth.to_string()
    } else {
        format!("{auth}:80")
    };
    Ok(HttpUrl {
        authority,
        target: target.to_string(),
    })
}

/// Connects to `url` and performs the opening handshake asking for `protocols`; answers the
/// stream (positioned after the response head) and the protocol the server chose ("" if none).
pub fn connect(url: &str, protocols: &[&str]) -> Result<(TcpStream, String), WsError> {
    let u = parse_http_url(url)?;
    let addr = std::net::ToSocketAddrs::to_socket_addrs(u.authority.as_str())?
        .next()
        .ok_or_else(|| WsError::Url {
            url: url.to_string(),
            reason: "the host has no address".into(),
        })?;
    let mut s = TcpStream::connect_timeout(&addr, HANDSHAKE_TIMEOUT)?;
    s.set_nodelay(true)?;
    // Bounded until the upgrade is answered; the stream itself may be idle for long.
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let key = crate::util::base64::encode(&KeySource::new().next_16());
    let mut head = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n",
        u.target, u.authority
    );
    if !protocols.is_empty() {
        head.push_str(&format!(
            "Sec-WebSocket-Protocol: {}\r\n",
            protocols.join(", ")
        ));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    let (status, headers) = read_response_head(&mut s)?;
    if status.split(' ').nth(1) != Some("101") {
        return Err(WsError::Refused {
            url: url.to_string(),
            status,
        });
    }
    let hs = |reason: String| WsError::Handshake {
        url: url.to_string(),
        reason,
    };
    let get = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map_or("", |(_, v)| v.as_str())
    };
    // RFC 6455 4.1, the client's checks 2 and 3 (gorilla/websocket's Dialer makes them too):
    // `Upgrade: websocket` and a `Connection` holding `Upgrade`, or the connection fails.
    if !get("Upgrade").eq_ignore_ascii_case("websocket") {
        return Err(hs(format!(
            "the response's Upgrade is {:?}, not \"websocket\"",
            get("Upgrade")
        )));
    }
    if !has_token(get("Connection"), "upgrade") {
        return Err(hs(format!(
            "the response's Connection is {:?}, without \"Upgrade\"",
            get("Connection")
        )));
    }
    if get("Sec-WebSocket-Accept") != accept_key(&key) {
        return Err(hs("Sec-WebSocket-Accept does not match the key".into()));
    }
    let chosen = get("Sec-WebSocket-Protocol").to_string();
    if !chosen.is_empty() && !protocols.contains(&chosen.as_str()) {
        return Err(hs(format!(
            "server chose protocol {chosen:?} that was not offered"
        )));
    }
    s.set_read_timeout(None)?;
    Ok((s, chosen))
}

/// Reads an HTTP head byte by byte (so nothing after it is consumed): the first line (a
/// response's status line; the test doubles read requests with it too) and the header fields,
/// which `httparse` reads as the HTTP server does (`httpd::parse_head`): a control character in
/// a value or a malformed line is an error, not relayed (RFC 9110 5.5). At most 16 KiB.
pub fn read_response_head(s: &mut impl Read) -> Result<(String, Vec<(String, String)>), WsError> {
    let mut r = BufReader::with_capacity(1, s);
    let mut head = Vec::new();
    loop {
        let n = r.read_until(b'\n', &mut head)?;
        if n == 0 {
            return Err(WsError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
        if head.len() > 16 * 1024 {
            return Err(WsError::Protocol("response head over 16 KiB".into()));
        }
        if head.ends_with(b"\n\n") || head.ends_with(b"\n\r\n") {
            break;
        }
    }
    let first_end = head.iter().position(|b| *b == b'\n').unwrap_or(head.len());
    let status = String::from_utf8_lossy(&head[..first_end])
        .trim_end_matches('\r')
        .to_string();
    if status.bytes().any(|b| b.is_ascii_control()) {
        return Err(WsError::Protocol(
            "control character in the status line".into(),
        ));
    }
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let rest = head.get(first_end + 1..).unwrap_or_default();
    let headers = match httparse::parse_headers(rest, &mut fields) {
        Ok(httparse::Status::Complete((_, fields))) => fields
            .iter()
            .map(|h| {
                (
                    h.name.to_string(),
                    String::from_utf8_lossy(h.value)
                        .trim_matches([' ', '\t'])
                        .to_string(),
                )
            })
            .collect(),
        Ok(httparse::Status::Partial) => {
            return Err(WsError::Protocol("incomplete response head".into()));
        }
        Err(e) => return Err(WsError::Protocol(format!("malformed response head: {e}"))),
    };
    Ok((status, headers))
}

/// A comma-separated header value holds `token`, ASCII case-insensitively (RFC 9110 5.6.1).
fn has_token(value: &str, token: &str) -> bool {
    value
        .split(',')
        .any(|t| t.trim_matches([' ', '\t']).eq_ignore_ascii_case(token))
}

impl KeySource {
    fn next_16(&mut self) -> [u8; 16] {
        let mut k = [0u8; 16];
        for c in k.chunks_mut(4) {
            c.copy_from_slice(&self.next());
        }
        k
    }
}

/// `Sec-WebSocket-Accept` for a key: base64(SHA-1(key + GUID)) (RFC 6455 4.2.2).
pub fn accept_key(key: &str) -> String {
    crate::util::base64::encode(&sha1(format!("{key}{HANDSHAKE_GUID}").as_bytes()))
}

/// SHA-1 (RFC 3174), only for the handshake's accept key (not for security).
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 80];
        for (i, c) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, v) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&v.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 6455 section 5.7 examples.
    #[test]
    fn rfc6455_5_7_single_frame_unmasked_and_masked() {
        let unmasked = [0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f];
        assert_eq!(encode_frame(true, OP_TEXT, b"Hello", None), unmasked);
        let f = read_frame(&mut &unmasked[..], 100).unwrap();
        assert_eq!(
            (f.fin, f.opcode, f.payload.as_slice()),
            (true, OP_TEXT, &b"Hello"[..])
        );

        let masked = [
            0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
        ];
        assert_eq!(
            encode_frame(true, OP_TEXT, b"Hello", Some([0x37, 0xfa, 0x21, 0x3d])),
            masked
        );
        let f = read_frame(&mut &masked[..], 100).unwrap();
        assert_eq!(f.payload, b"Hello");
    }

    #[test]
    fn rfc6455_5_7_fragmented_message_with_ping_between() {
        let mut wire = vec![0x01, 0x03, 0x48, 0x65, 0x6c]; // "Hel", not final
        wire.extend([0x89, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f]); // ping "Hello"
        wire.extend([0x80, 0x02, 0x6c, 0x6f]); // "lo", final continuation
        let mut r = WsReader::new(&wire[..]);
        // RFC 6455 5.4: control frames may be injected in the middle of a fragmented message.
        assert_eq!(
            r.read_message().unwrap(),
            Some(Message::Ping(b"Hello".to_vec()))
        );
        assert_eq!(
            r.read_message().unwrap(),
            Some(Message::Data {
                opcode: OP_TEXT,
                data: b"Hello".to_vec()
            })
        );
    }

    #[test]
    fn fragments_are_joined() {
        let mut wire = vec![0x02, 0x02, 1, 2];
        wire.extend([0x00, 0x01, 3]);
        wire.extend([0x80, 0x01, 4]);
        let mut r = WsReader::new(&wire[..]);
        assert_eq!(
            r.read_message().unwrap(),
            Some(Message::Data {
                opcode: OP_BINARY,
                data: vec![1, 2, 3, 4]
            })
        );
        assert_eq!(r.read_message().unwrap(), None);
    }

    #[test]
    fn rfc6455_5_7_256_and_64k_lengths() {
        let p = vec![7u8; 256];
        let e = encode_frame(true, OP_BINARY, &p, None);
        assert_eq!(&e[..4], &[0x82, 0x7E, 0x01, 0x00]);
        assert_eq!(read_frame(&mut &e[..], 1 << 20).unwrap().payload, p);
        let p = vec![9u8; 65536];
        let e = encode_frame(true, OP_BINARY, &p, None);
        assert_eq!(&e[..10], &[0x82, 0x7F, 0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(read_frame(&mut &e[..], 1 << 20).unwrap().payload, p);
        assert!(matches!(
            read_frame(&mut &e[..], 1000),
            Err(WsError::TooLarge { size: 65536, .. })
        ));
    }

    #[test]
    fn control_frames_must_be_short_and_final() {
        let long_ping = encode_frame(true, OP_PING, &[0; 126], None);
        assert!(matches!(
            read_frame(&mut &long_ping[..], 1 << 20),
            Err(WsError::Protocol(_))
        ));
        let fragmented_close = encode_frame(false, OP_CLOSE, &[3, 232], None);
        assert!(read_frame(&mut &fragmented_close[..], 100).is_err());
        let close = encode_frame(true, OP_CLOSE, &[3, 232, b'b', b'y', b'e'], None);
        assert_eq!(
            WsReader::new(&close[..]).read_message().unwrap(),
            Some(Message::Close(Some(1000), "bye".into()))
        );
    }

    #[test]
    fn rfc6455_1_3_accept_key_example() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn sha1_rfc3174_vectors() {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(
            hex(&sha1(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            hex(&sha1(
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
            )),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1"
        );
    }

    #[test]
    fn client_frames_are_masked_and_channel_prefixed() {
        let mut out = Vec::new();
        WsWriter::new(&mut out).send_channel(4, b"{}").unwrap();
        assert_eq!(out[0], 0x82);
        assert_eq!(out[1], 0x80 | 3, "masked, 3 bytes");
        let f = read_frame(&mut &out[..], 100).unwrap();
        assert_eq!(f.payload, vec![4, b'{', b'}']);
    }

    /// A one-shot server answering the upgrade with `answer(key)`.
    fn serve_once(
        answer: fn(&str) -> String,
    ) -> (String, std::thread::JoinHandle<Vec<(String, String)>>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/exec/tok", l.local_addr().unwrap());
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let (_, headers) = read_response_head(&mut s).unwrap();
            let key = headers
                .iter()
                .find(|(k, _)| k == "Sec-WebSocket-Key")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            s.write_all(answer(&key).as_bytes()).unwrap();
            headers
        });
        (url, t)
    }

    #[test]
    fn handshake_checks_the_accept_key_and_the_protocol() {
        let (url, t) = serve_once(|key| {
            format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                 Sec-WebSocket-Accept: {}\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n",
                accept_key(key)
            )
        });
        let (_, chosen) = connect(&url, &[V4_CHANNEL_PROTOCOL, "channel.k8s.io"]).unwrap();
        assert_eq!(chosen, V4_CHANNEL_PROTOCOL);
        let sent = t.join().unwrap();
        let get = |n: &str| sent.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("Sec-WebSocket-Version"), Some("13"));
        assert_eq!(
            get("Sec-WebSocket-Protocol"),
            Some("v4.channel.k8s.io, channel.k8s.io")
        );
        assert_eq!(
            get("Sec-WebSocket-Key").map(str::len),
            Some(24),
            "16 random bytes, base64"
        );

        let (url, t) = serve_once(|_| {
            "HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: wrong\r\n\r\n".into()
        });
        assert!(matches!(connect(&url, &[]), Err(WsError::Handshake { .. })));
        t.join().unwrap();

        let (url, t) = serve_once(|_| "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n".into());
        match connect(&url, &[V4_CHANNEL_PROTOCOL]) {
            Err(WsError::Refused { status, .. }) => assert_eq!(status, "HTTP/1.1 403 Forbidden"),
            other => panic!("{other:?}"),
        }
        t.join().unwrap();
    }

    /// RFC 6455 4.1, client checks 2 and 3: a 101 without `Upgrade: websocket`, or whose
    /// `Connection` lacks the `Upgrade` token, fails the connection; the token may share the
    /// field with others, in any case (RFC 9110 5.6.1, 7.6.1).
    #[test]
    fn handshake_checks_upgrade_and_connection_rfc6455_4_1() {
        fn answer(key: &str, upgrade: &str, connection: &str) -> String {
            format!(
                "HTTP/1.1 101 Switching Protocols\r\n{upgrade}{connection}\
                 Sec-WebSocket-Accept: {}\r\n\r\n",
                accept_key(key)
            )
        }
        let bad: [fn(&str) -> String; 4] = [
            |k| answer(k, "", "Connection: Upgrade\r\n"),
            |k| answer(k, "Upgrade: h2c\r\n", "Connection: Upgrade\r\n"),
            |k| answer(k, "Upgrade: websocket\r\n", ""),
            |k| answer(k, "Upgrade: websocket\r\n", "Connection: keep-alive\r\n"),
        ];
        for a in bad {
            let (url, t) = serve_once(a);
            match connect(&url, &[]) {
                Err(WsError::Handshake { reason, .. }) => {
                    assert!(reason.contains("Upgrade"), "{reason}")
                }
                other => panic!("{other:?}"),
            }
            t.join().unwrap();
        }
        let (url, t) = serve_once(|k| {
            answer(
                k,
                "Upgrade: WebSocket\r\n",
                "Connection: keep-alive, upgrade\r\n",
            )
        });
        assert!(connect(&url, &[]).is_ok());
        t.join().unwrap();
    }

    /// RFC 9110 5.5: a control character (other than HTAB) in a field value is refused, so it
    /// is never relayed (the streaming proxy passes the runtime's response head on).
    #[test]
    fn response_heads_with_control_characters_are_refused() {
        for head in [
            "HTTP/1.1 101 OK\r\nX: a\x01b\r\n\r\n",
            "HTTP/1.1 101 OK\r\nX: a\x00b\r\n\r\n",
            "HTTP/1.1 101 OK\r\nX: a\x7fb\r\n\r\n",
            "HTTP/1.1 101 O\x1bK\r\nX: y\r\n\r\n",
            "HTTP/1.1 101 OK\r\nbad header\r\n\r\n",
        ] {
            assert!(
                read_response_head(&mut head.as_bytes()).is_err(),
                "{head:?}"
            );
        }
        let (status, headers) =
            read_response_head(&mut &b"HTTP/1.1 101 OK\r\nX:  a\tb \r\n\r\nrest"[..]).unwrap();
        assert_eq!(status, "HTTP/1.1 101 OK");
        assert_eq!(headers, vec![("X".to_string(), "a\tb".to_string())]);
    }

    #[test]
    fn urls() {
        let u = parse_http_url("http://127.0.0.1:4321/exec/abc?x=1").unwrap();
        assert_eq!(u.authority, "127.0.0.1:4321");
        assert_eq!(u.target, "/exec/abc?x=1");
        assert_eq!(parse_http_url("http://h").unwrap().authority, "h:80");
        assert!(parse_http_url("https://h/").is_err());
    }
}
