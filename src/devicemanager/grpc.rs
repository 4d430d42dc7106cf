//! A unary-only gRPC server over HTTP/2 on a Unix socket, for the two sockets nanolet serves
//! (device plugin registration, pod-resources).
//!
//! Why not tonic's server (hyper + h2's server): h2's server refuses a request whose
//! `:authority` is not a valid URI authority with RST_STREAM(PROTOCOL_ERROR) (hyperium/h2#487,
//! open), and grpc-go clients dialling a bare socket path — the device plugin stub's
//! `Register`, Kubernetes' pod-resources client — send the socket path as `:authority`. So
//! this speaks HTTP/2 itself on h2's frame codec (`h2::Codec`, HPACK included): it reads the
//! preface, answers SETTINGS and PING, returns received bytes to the flow-control windows, and
//! for each stream passes the `:path` and the one request message to the handler, then
//! writes the response headers, the message and the `grpc-status` trailers (or a
//! trailers-only error). Responses larger than the client's initial window (64 KiB) are not
//! sent in parts (nanolet's answers are a few KiB).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use h2::frame::{self, Frame, Headers, Pseudo, StreamId};
use tokio::io::AsyncReadExt;
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::StreamExt;
use tracing::{debug, warn};

/// The HTTP/2 client connection preface (RFC 9113 section 3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The largest request message accepted (gRPC's default receive limit is 4 MiB).
const MAX_REQUEST: usize = 4 << 20;

/// gRPC status codes used here.
pub const UNKNOWN: u32 = 2;
pub const INVALID_ARGUMENT: u32 = 3;
pub const UNIMPLEMENTED: u32 = 12;

/// A call's outcome: the encoded response message, or (gRPC status code, message).
pub type Reply = Result<Vec<u8>, (u32, String)>;
type BoxReply = Pin<Box<dyn Future<Output = Reply> + Send>>;
/// The handler: (`:path`, request message) -> reply.
pub type Handler = Arc<dyn Fn(String, Bytes) -> BoxReply + Send + Sync>;

#[derive(Debug, thiserror::Error)]
enum ConnError {
    #[error("reading the HTTP/2 preface: {0}")]
    Preface(std::io::Error),
    #[error("not an HTTP/2 client (bad preface)")]
    BadPreface,
    #[error("HTTP/2: {0}")]
    Proto(String),
    #[error("writing: {0}")]
    Write(std::io::Error),
}

/// Accepts connections on `listener` and serves each on its own task, until the runtime
/// stops.
pub async fn serve(listener: UnixListener, name: &'static str, handler: Handler) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let h = handler.clone();
                tokio::spawn(async move {
                    if let Err(e) = connection(stream, h).await {
                        debug!(server = name, error = %e, "gRPC connection ended");
                    }
                });
            }
            Err(e) => {
                warn!(server = name, error = %e, "accepting a gRPC connection");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

type Codec = h2::Codec<UnixStream, Bytes>;

async fn send(codec: &mut Codec, f: Frame<Bytes>) -> Result<(), ConnError> {
    std::future::poll_fn(|cx| codec.poll_ready(cx))
        .await
        .map_err(ConnError::Write)?;
    codec
        .buffer(f)
        .map_err(|e| ConnError::Proto(format!("{e:?}")))?;
    std::future::poll_fn(|cx| codec.flush(cx))
        .await
        .map_err(ConnError::Write)
}

async fn connection(mut io: UnixStream, handler: Handler) -> Result<(), ConnError> {
    let mut preface = [0u8; 24];
    io.read_exact(&mut preface)
        .await
        .map_err(ConnError::Preface)?;
    if &preface != PREFACE {
        return Err(ConnError::BadPreface);
    }
    let mut codec: Codec = h2::Codec::new(io);
    send(&mut codec, frame::Settings::default().into()).await?;
    // Open streams: their :path and the request bytes so far.
    let mut streams: HashMap<StreamId, (String, BytesMut)> = HashMap::new();
    while let Some(f) = codec.next().await {
        let f = f.map_err(|e| ConnError::Proto(format!("{e:?}")))?;
        let done = match f {
            Frame::Settings(s) => {
                if !s.is_ack() {
                    if let Some(n) = s.header_table_size() {
                        codec.set_send_header_table_size(n as usize);
                    }
                    if let Some(n) = s.max_frame_size() {
                        codec.set_max_send_frame_size(n as usize);
                    }
                    send(&mut codec, frame::Settings::ack().into()).await?;
                }
                None
            }
            Frame::Ping(p) => {
                if !p.is_ack() {
                    send(&mut codec, frame::Ping::pong(p.into_payload()).into()).await?;
                }
                None
            }
            Frame::Headers(h) => {
                let id = h.stream_id();
                let end = h.is_end_stream();
                if let std::collections::hash_map::Entry::Vacant(e) = streams.entry(id) {
                    let (pseudo, _) = h.into_parts();
                    let path = pseudo.path.map(|p| p.to_string()).unwrap_or_default();
                    e.insert((path, BytesMut::new()));
                }
                end.then_some(id)
            }
            Frame::Data(d) => {
                let id = d.stream_id();
                let end = d.is_end_stream();
                let payload = d.into_payload();
                let n = payload.len();
                if let Some((_, body)) = streams.get_mut(&id) {
                    if body.len() + n > MAX_REQUEST + 5 {
                        return Err(ConnError::Proto("request too large".into()));
                    }
                    body.extend_from_slice(&payload);
                }
                if n > 0 {
                    // Give the bytes back to the connection's window (and the stream's while
                    // it still sends).
                    send(
                        &mut codec,
                        frame::WindowUpdate::new(StreamId::zero(), n as u32).into(),
                    )
                    .await?;
                    if !end {
                        send(&mut codec, frame::WindowUpdate::new(id, n as u32).into()).await?;
                    }
                }
                end.then_some(id)
            }
            Frame::Reset(r) => {
                streams.remove(&r.stream_id());
                None
            }
            Frame::GoAway(_) => break,
            _ => None,
        };
        if let Some(id) = done {
            if let Some((path, body)) = streams.remove(&id) {
                let reply = match grpc_message(&body) {
                    Ok(msg) => handler(path, msg).await,
                    Err(e) => Err((INVALID_ARGUMENT, e)),
                };
                respond(&mut codec, id, reply).await?;
            }
        }
    }
    Ok(())
}

/// The one message of a unary request: 1 byte compressed flag (must be 0), 4 bytes length.
fn grpc_message(body: &[u8]) -> Result<Bytes, String> {
    if body.len() < 5 {
        return Err("request without a gRPC message".into());
    }
    if body[0] != 0 {
        return Err("compressed requests are not supported".into());
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    body.get(5..5 + len)
        .map(Bytes::copy_from_slice)
        .ok_or_else(|| "truncated gRPC message".to_string())
}

fn header_map(pairs: &[(&'static str, String)]) -> http::HeaderMap {
    let mut m = http::HeaderMap::new();
    for (k, v) in pairs {
        if let Ok(v) = http::HeaderValue::from_str(v) {
            m.insert(*k, v);
        }
    }
    m
}

/// gRPC's percent-encoding of `grpc-message`: bytes outside printable ASCII, and `%`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

async fn respond(codec: &mut Codec, id: StreamId, reply: Reply) -> Result<(), ConnError> {
    let ok = http::StatusCode::OK;
    match reply {
        Ok(msg) => {
            let head = header_map(&[("content-type", "application/grpc".into())]);
            send(codec, Headers::new(id, Pseudo::response(ok), head).into()).await?;
            let mut framed = Vec::with_capacity(msg.len() + 5);
            framed.push(0);
            framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
            framed.extend_from_slice(&msg);
            let max = codec.max_send_frame_size().max(1);
            for chunk in framed.chunks(max) {
                let d = frame::Data::new(id, Bytes::copy_from_slice(chunk));
                send(codec, d.into()).await?;
            }
            let mut trailers = Headers::trailers(id, header_map(&[("grpc-status", "0".into())]));
            trailers.set_end_stream();
            send(codec, trailers.into()).await
        }
        Err((code, message)) => {
            // Trailers-only: status, content type and the gRPC status in one HEADERS frame.
            let head = header_map(&[
                ("content-type", "application/grpc".into()),
                ("grpc-status", code.to_string()),
                ("grpc-message", percent_encode(&message)),
            ]);
            let mut h = Headers::new(id, Pseudo::response(ok), head);
            h.set_end_stream();
            send(codec, h.into()).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_messages_are_length_prefixed_and_status_messages_percent_encoded() {
        assert_eq!(
            grpc_message(&[0, 0, 0, 0, 2, 8, 1]).ok(),
            Some(Bytes::from_static(&[8, 1]))
        );
        assert!(grpc_message(&[1, 0, 0, 0, 0]).is_err());
        assert!(grpc_message(&[0, 0, 0, 0, 9, 1]).is_err());
        assert_eq!(percent_encode("50% \"x\"\n"), "50%25 \"x\"%0A");
    }
}
