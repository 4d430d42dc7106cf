//! `nanolet exec -i/-t` and `nanolet port-forward`: interactive streams to a container through
//! the runtime's CRI streaming server, without a cluster.
//!
//! Both ask containerd for a streaming URL (CRI `Exec` / `PortForward` on the runtime socket,
//! like `nanolet exec` without `-i`/`-t` asks for `ExecSync`) and speak WebSocket
//! `v4.channel.k8s.io` to it (containerd 1.6's server has no v5): channel 0 stdin, 1 stdout,
//! 2 stderr, 3 the error channel (a v1 `Status`; the exit code is its
//! `details.causes[reason=ExitCode]`), 4 terminal resize (`{"Width":..,"Height":..}`). For
//! port-forward each local connection gets its own URL and WebSocket: channel 0 data, 1 errors,
//! the first two bytes of each the port (little endian).
//!
//! v4 has no way to close stdin alone (v5's close message does that): when stdin ends the remote
//! command does not see end-of-file. Commands that read to end-of-file need a TTY (Ctrl-D) or
//! SPDY/v5 clients (kubectl through the secure port).

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

use crate::cri::Runtime;
use crate::server::ws::{self, Message, V4_CHANNEL_PROTOCOL, WsReader, WsWriter};

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;

type SharedWriter = Arc<Mutex<WsWriter<TcpStream>>>;

/// Sends on the shared writer; a poisoned lock is as good as a closed connection.
fn send(w: &SharedWriter, ch: u8, data: &[u8]) -> io::Result<()> {
    match w.lock() {
        Ok(mut g) => g.send_channel(ch, data),
        Err(_) => Err(io::Error::other("connection writer poisoned")),
    }
}

/// The terminal in raw mode until dropped (every return path, errors included).
struct RawMode {
    saved: nix::sys::termios::Termios,
}

impl RawMode {
    fn enter() -> anyhow::Result<RawMode> {
        use nix::sys::termios::{SetArg, cfmakeraw, tcgetattr, tcsetattr};
        let stdin = io::stdin();
        let saved = tcgetattr(stdin.as_fd()).context("reading the terminal's mode")?;
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw).context("setting raw mode")?;
        // A closed stdout must not kill the process before the terminal is restored (client
        // commands run with SIGPIPE's default action): ignored, a write fails with EPIPE and
        // the error returns through this guard.
        // SAFETY: SIG_IGN installs no handler code.
        unsafe {
            let _ = nix::sys::signal::signal(
                nix::sys::signal::Signal::SIGPIPE,
                nix::sys::signal::SigHandler::SigIgn,
            );
        }
        Ok(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = nix::sys::termios::tcsetattr(
            io::stdin().as_fd(),
            nix::sys::termios::SetArg::TCSANOW,
            &self.saved,
        );
    }
}

/// The terminal's size as the resize channel's JSON (`remotecommand.TerminalSize`).
fn terminal_size_json() -> Option<Vec<u8>> {
    let mut ws = nix::libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct we pass, which lives across the
    // call; fd 0 stays open.
    let r = unsafe { nix::libc::ioctl(0, nix::libc::TIOCGWINSZ, &mut ws) };
    (r == 0 && ws.ws_col > 0)
        .then(|| format!("{{\"Width\":{},\"Height\":{}}}", ws.ws_col, ws.ws_row).into_bytes())
}

/// Blocks SIGWINCH in the calling thread, so threads started afterwards (the runtime client's
/// too) inherit the mask and the signal is only ever read from the signalfd. Call before
/// connecting to the runtime.
pub(crate) fn block_sigwinch() {
    let mut set = nix::sys::signal::SigSet::empty();
    set.add(nix::sys::signal::Signal::SIGWINCH);
    let _ = set.thread_block();
}

/// Sends the terminal size now and on every SIGWINCH, on a thread of its own.
fn spawn_resizer(w: SharedWriter) {
    if let Some(j) = terminal_size_json() {
        let _ = send(&w, RESIZE, &j);
    }
    let mut set = nix::sys::signal::SigSet::empty();
    set.add(nix::sys::signal::Signal::SIGWINCH);
    let Ok(sfd) = nix::sys::signalfd::SignalFd::new(&set) else {
        tracing::debug!("no signalfd: terminal resizes are not passed on");
        return;
    };
    let _ = std::thread::Builder::new()
        .name("exec-resize".into())
        .spawn(move || {
            while let Ok(Some(_)) = sfd.read_signal() {
                if let Some(j) = terminal_size_json() {
                    if send(&w, RESIZE, &j).is_err() {
                        return;
                    }
                }
            }
        });
}

/// Copies stdin to channel 0 on a thread of its own (left blocked in read when the command
/// ends; the process exits).
fn spawn_stdin(w: SharedWriter) {
    let _ = std::thread::Builder::new()
        .name("exec-stdin".into())
        .spawn(move || {
            let mut buf = [0u8; 8192];
            let mut stdin = io::stdin().lock();
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        if send(&w, STDIN, &buf[..n]).is_err() {
                            return;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return,
                }
            }
        });
}

/// The exit code from the error channel's v4 `Status`: Success 0; NonZeroExitCode with an
/// `ExitCode` cause: that code; any other failure is an error with the status's message. An
/// empty error channel (nothing written) is success.
pub fn exit_code_from_status(raw: &[u8]) -> anyhow::Result<i32> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Ok(0);
    }
    let v: Value = serde_json::from_slice(raw).map_err(|e| {
        anyhow!(
            "error channel: not a Status ({e}): {}",
            String::from_utf8_lossy(raw)
        )
    })?;
    if v["status"] == "Success" {
        return Ok(0);
    }
    if v["reason"] == "NonZeroExitCode" {
        let code = v["details"]["causes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["reason"] == "ExitCode")
            .and_then(|c| c["message"].as_str())
            .and_then(|m| m.parse::<i32>().ok());
        if let Some(code) = code {
            return Ok(code);
        }
    }
    bail!(
        "{}",
        v["message"]
            .as_str()
            .unwrap_or("command failed without a message")
    )
}

/// Runs `cmd` in `container_id` interactively; answers its exit code. `tty` is dropped (with
/// kubectl's warning) when stdin is not a terminal.
pub(crate) fn exec_interactive(
    rt: &dyn Runtime,
    container_id: &str,
    cmd: &[String],
    stdin: bool,
    tty: bool,
) -> anyhow::Result<i32> {
    let stdin_is_tty = nix::unistd::isatty(io::stdin().as_fd()).unwrap_or(false);
    let tty = if tty && stdin && !stdin_is_tty {
        eprintln!("Unable to use a TTY - input is not a terminal or the right kind of file");
        false
    } else {
        tty
    };
    let req = crate::cri::ExecRequest {
        container_id: container_id.to_string(),
        cmd: cmd.to_vec(),
        tty,
        stdin,
        stdout: true,
        stderr: !tty,
    };
    let url = rt.exec(&req).map_err(|e| anyhow!("{e}"))?;
    let (stream, _) = ws::connect(&url, &[V4_CHANNEL_PROTOCOL])
        .map_err(|e| anyhow!("connecting to the runtime's streaming server: {e}"))?;
    let writer: SharedWriter = Arc::new(Mutex::new(WsWriter::new(
        stream.try_clone().context("cloning the stream socket")?,
    )));
    // As kubectl: the local terminal goes raw only when it is the command's input.
    let _raw = if tty && stdin && stdin_is_tty {
        Some(RawMode::enter()?)
    } else {
        None
    };
    if tty {
        spawn_resizer(writer.clone());
    }
    if stdin {
        spawn_stdin(writer.clone());
    }
    let status = pump_output(stream, &writer)?;
    drop(_raw);
    exit_code_from_status(&status)
}

/// Writes channels 1 and 2 to stdout and stderr until the server closes; answers the error
/// channel's bytes.
fn pump_output(stream: TcpStream, writer: &SharedWriter) -> anyhow::Result<Vec<u8>> {
    let mut reader = WsReader::new(stream);
    let mut status = Vec::new();
    let (mut out, mut err) = (io::stdout(), io::stderr());
    loop {
        let m = match reader.read_message() {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(ws::WsError::Io(e)) if e.kind() == io::ErrorKind::ConnectionReset => break,
            Err(e) => return Err(anyhow!("reading the stream: {e}")),
        };
        match m {
            Message::Data { data, .. } => match data.split_first() {
                Some((&STDOUT, rest)) => {
                    out.write_all(rest)?;
                    out.flush()?;
                }
                Some((&STDERR, rest)) => {
                    err.write_all(rest)?;
                    err.flush()?;
                }
                Some((&ERROR, rest)) => status.extend_from_slice(rest),
                _ => {}
            },
            Message::Ping(p) => {
                if let Ok(mut g) = writer.lock() {
                    let _ = g.send(ws::OP_PONG, &p);
                }
            }
            Message::Pong(_) => {}
            Message::Close(..) => {
                if let Ok(mut g) = writer.lock() {
                    let _ = g.close();
                }
                break;
            }
        }
    }
    Ok(status)
}

/// One `LOCAL:REMOTE` (or `PORT`, both the same) of `nanolet port-forward`, kubectl's syntax
/// (`:REMOTE` picks a free local port).
pub fn parse_port_mapping(s: &str) -> anyhow::Result<(u16, u16)> {
    let port = |p: &str, what: &str| -> anyhow::Result<u16> {
        p.parse::<u16>()
            .map_err(|_| anyhow!("Error parsing {what} port '{p}': not a port number"))
    };
    match s.split_once(':') {
        None => {
            let p = port(s, "local")?;
            Ok((p, p))
        }
        Some((l, r)) => {
            let remote = port(r, "remote")?;
            if remote == 0 {
                bail!("remote port must be > 0");
            }
            let local = if l.is_empty() { 0 } else { port(l, "local")? };
            Ok((local, remote))
        }
    }
}

/// Listens on `address:LOCAL` for every mapping and forwards each connection to REMOTE in the
/// sandbox, until killed. Prints kubectl's "Forwarding from ..." lines.
pub(crate) fn port_forward(
    rt: Arc<dyn Runtime>,
    sandbox_id: &str,
    address: &str,
    mappings: &[(u16, u16)],
) -> anyhow::Result<()> {
    let mut handles = Vec::new();
    for &(local, remote) in mappings {
        let l = TcpListener::bind((address, local))
            .with_context(|| format!("Unable to listen on port {local}"))?;
        let bound = l.local_addr()?;
        println!("Forwarding from {bound} -> {remote}");
        io::stdout().flush()?;
        let rt = rt.clone();
        let sandbox = sandbox_id.to_string();
        handles.push(std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { continue };
                println!("Handling connection for {}", bound.port());
                let _ = io::stdout().flush();
                let rt = rt.clone();
                let sandbox = sandbox.clone();
                let local = bound.port();
                std::thread::spawn(move || {
                    // kubectl's text; unlike kubectl (which then exits with "lost connection to
                    // pod"), the other connections and the listener go on.
                    if let Err(e) = forward_one(rt.as_ref(), &sandbox, remote, conn) {
                        eprintln!("an error occurred forwarding {local} -> {remote}: {e:#}");
                    }
                });
            }
        }));
    }
    for h in handles {
        let _ = h.join();
    }
    Ok(())
}

/// One local connection: a fresh CRI PortForward URL (its token is single-use) and WebSocket.
fn forward_one(rt: &dyn Runtime, sandbox: &str, port: u16, local: TcpStream) -> anyhow::Result<()> {
    let url = rt
        .port_forward(sandbox, &[port])
        .map_err(|e| anyhow!("{e}"))?;
    let (stream, _) = ws::connect(&url, &[V4_CHANNEL_PROTOCOL])
        .map_err(|e| anyhow!("connecting to the runtime's streaming server: {e}"))?;
    let writer: SharedWriter = Arc::new(Mutex::new(WsWriter::new(stream.try_clone()?)));
    let mut local_out = local.try_clone()?;
    let remote_in = stream.try_clone()?;
    let w2 = writer.clone();
    // Remote -> local on a thread; local -> remote here.
    let reader = std::thread::spawn(move || -> anyhow::Result<()> {
        let r = relay_remote_to_local(remote_in, &mut local_out, &w2);
        let _ = local_out.shutdown(Shutdown::Both);
        r
    });
    let mut local_in = local;
    let mut buf = [0u8; 32 * 1024];
    loop {
        match local_in.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if send(&writer, 0, &buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    // v4 has no half-close: the local end is done, so the stream is.
    if let Ok(mut g) = writer.lock() {
        let _ = g.close();
    }
    let _ = stream.shutdown(Shutdown::Write);
    reader
        .join()
        .map_err(|_| anyhow!("port-forward reader panicked"))?
}

fn relay_remote_to_local(
    remote: TcpStream,
    local: &mut TcpStream,
    writer: &SharedWriter,
) -> anyhow::Result<()> {
    let mut reader = WsReader::new(remote);
    // The first message of each channel starts with the port (2 bytes, little endian).
    let mut prefix_left = [2usize, 2usize];
    let mut error = Vec::new();
    loop {
        let m = match reader.read_message() {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(ws::WsError::Io(_)) => break,
            Err(e) => return Err(anyhow!("reading the stream: {e}")),
        };
        match m {
            Message::Data { data, .. } => {
                let Some((&ch, mut rest)) = data.split_first() else {
                    continue;
                };
                let Some(left) = prefix_left.get_mut(usize::from(ch)) else {
                    continue;
                };
                let skip = (*left).min(rest.len());
                *left -= skip;
                rest = &rest[skip..];
                if ch == 0 {
                    if local.write_all(rest).is_err() {
                        break;
                    }
                } else {
                    error.extend_from_slice(rest);
                }
            }
            Message::Ping(p) => {
                if let Ok(mut g) = writer.lock() {
                    let _ = g.send(ws::OP_PONG, &p);
                }
            }
            Message::Pong(_) => {}
            Message::Close(..) => break,
        }
    }
    if !error.is_empty() {
        bail!("{}", String::from_utf8_lossy(&error));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // k8s.io/apimachinery remotecommand: v4 error channel Status, NonZeroExitCode with an
    // ExitCode cause (StatusCause.Type is serialized as "reason").
    #[test]
    fn exit_code_from_v4_status() {
        assert_eq!(exit_code_from_status(b"").unwrap(), 0);
        assert_eq!(
            exit_code_from_status(br#"{"metadata":{},"status":"Success"}"#).unwrap(),
            0
        );
        let failed = br#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#;
        assert_eq!(exit_code_from_status(failed).unwrap(), 3);
        let internal = br#"{"metadata":{},"status":"Failure","message":"Internal error occurred: error executing command in container: not found","reason":"InternalError","code":500}"#;
        let e = exit_code_from_status(internal).unwrap_err().to_string();
        assert!(e.contains("error executing command in container"), "{e}");
        assert!(exit_code_from_status(b"garbage").is_err());
    }

    // kubectl port-forward's mapping syntax.
    #[test]
    fn port_mappings() {
        assert_eq!(parse_port_mapping("8080:80").unwrap(), (8080, 80));
        assert_eq!(parse_port_mapping("5000").unwrap(), (5000, 5000));
        assert_eq!(parse_port_mapping(":80").unwrap(), (0, 80));
        assert!(parse_port_mapping("80:x").is_err());
        assert!(parse_port_mapping("80:0").is_err());
        assert!(parse_port_mapping("99999").is_err());
    }
}
