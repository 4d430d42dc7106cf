//! A minimal grpc.health.v1 server over cleartext HTTP/2 (prior knowledge), used by the grpc
//! probe tests as a real server process *inside* a test container (tests/integration/probes.rs
//! mounts this binary and the host's libraries into a busybox container). `grpc_health_server PORT`
//! answers `Health/Check` with SERVING, except NOT_SERVING for the service "broken", and prints
//! each requested service name on stdout. Not part of nanolet.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const END_STREAM: u8 = 1;
const END_HEADERS: u8 = 4;
const ACK: u8 = 1;

pub fn serve(port: u16) -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind(("0.0.0.0", port)).expect("bind grpc server");
    let port = l.local_addr().expect("addr").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            let s = s.clone();
            std::thread::spawn(move || {
                let _ = handle(conn, &s);
            });
        }
    });
    (port, seen)
}

fn frame(
    out: &mut TcpStream,
    kind: u8,
    flags: u8,
    stream: u32,
    payload: &[u8],
) -> std::io::Result<()> {
    let n = payload.len() as u32;
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    out.write_all(&f)
}

/// HPACK "literal header field without indexing, new name" (no Huffman).
fn header(block: &mut Vec<u8>, name: &str, value: &str) {
    block.push(0);
    block.push(name.len() as u8);
    block.extend_from_slice(name.as_bytes());
    block.push(value.len() as u8);
    block.extend_from_slice(value.as_bytes());
}

fn handle(mut c: TcpStream, seen: &Mutex<Vec<String>>) -> std::io::Result<()> {
    let mut preface = [0u8; 24];
    c.read_exact(&mut preface)?;
    frame(&mut c, SETTINGS, 0, 0, &[])?;
    let mut body: std::collections::BTreeMap<u32, Vec<u8>> = Default::default();
    loop {
        let mut h = [0u8; 9];
        c.read_exact(&mut h)?;
        let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
        let (kind, flags) = (h[3], h[4]);
        let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        c.read_exact(&mut payload)?;
        match kind {
            SETTINGS if flags & ACK == 0 => frame(&mut c, SETTINGS, ACK, 0, &[])?,
            PING if flags & ACK == 0 => frame(&mut c, PING, ACK, 0, &payload)?,
            DATA => body.entry(stream).or_default().extend_from_slice(&payload),
            _ => {}
        }
        if (kind == DATA || kind == HEADERS) && flags & END_STREAM != 0 {
            let msg = body.remove(&stream).unwrap_or_default();
            // gRPC frame (1 + 4 bytes) around HealthCheckRequest { string service = 1 }.
            let service = if msg.len() > 7 && msg[5] == 0x0a {
                String::from_utf8_lossy(&msg[7..7 + usize::from(msg[6])]).into_owned()
            } else {
                String::new()
            };
            let status: u8 = if service == "broken" { 2 } else { 1 };
            println!("check service={service}");
            seen.lock().expect("seen").push(service);
            let mut hb = vec![0x88]; // :status 200 (static table index 8)
            header(&mut hb, "content-type", "application/grpc");
            frame(&mut c, HEADERS, END_HEADERS, stream, &hb)?;
            // HealthCheckResponse { ServingStatus status = 1 }
            frame(&mut c, DATA, 0, stream, &[0, 0, 0, 0, 2, 0x08, status])?;
            let mut tb = Vec::new();
            header(&mut tb, "grpc-status", "0");
            frame(&mut c, HEADERS, END_HEADERS | END_STREAM, stream, &tb)?;
        }
    }
}

fn main() {
    let port = std::env::args()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(50051);
    let (port, _seen) = serve(port);
    println!("grpc health server listening on {port}");
    loop {
        std::thread::park();
    }
}
