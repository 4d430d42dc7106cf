//! Running one probe or hook action: exec (CRI ExecSync), httpGet, tcpSocket, grpc.
//! Results and messages follow the kubelet's prober (pkg/probe/{exec,http,tcp,grpc}).

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::api::Container;
use crate::cri::{ErrorKind, Runtime};

use super::spec::{Handler, HttpGetAction, resolve_port};

/// The User-Agent the kubelet sends: `kube-probe/<major>.<minor>`. nanolet speaks the v1 API of
/// this Kubernetes release.
pub const USER_AGENT: &str = "kube-probe/1.33";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// Counts as success, with a message (e.g. a redirect to another host).
    Warning,
    Failure,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeResult {
    pub outcome: Outcome,
    pub message: String,
}

impl ProbeResult {
    fn ok() -> Self {
        ProbeResult {
            outcome: Outcome::Success,
            message: String::new(),
        }
    }
    fn fail(message: impl Into<String>) -> Self {
        ProbeResult {
            outcome: Outcome::Failure,
            message: message.into(),
        }
    }
    pub fn is_success(&self) -> bool {
        self.outcome != Outcome::Failure
    }
}

/// Where the action runs.
pub struct Target<'a> {
    pub runtime: &'a dyn Runtime,
    pub container: &'a Container,
    pub container_id: &'a str,
    /// The pod IP (the host IP for hostNetwork pods).
    pub pod_ip: &'a str,
}

/// A handler that could not be run: a prober error, which the kubelet throws away (unlike a
/// failed result).
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    #[error(transparent)]
    Port(#[from] super::spec::PortError),
    /// The runtime could not run an exec handler (other than a timeout, which is a failure).
    #[error(transparent)]
    Runtime(#[from] crate::cri::RuntimeError),
    #[error("missing probe handler")]
    Missing,
}

/// Run a handler. `Err` is a prober error (the kubelet throws such results away).
pub fn run(h: &Handler, t: &Target<'_>, timeout: Duration) -> Result<ProbeResult, HandlerError> {
    if let Some(e) = &h.exec {
        return exec(t, &e.command, timeout);
    }
    if let Some(g) = &h.http_get {
        return http_get(t, g, timeout);
    }
    if let Some(s) = &h.tcp_socket {
        let port = resolve_port(t.container, &s.port)?;
        let host = if s.host.is_empty() {
            t.pod_ip
        } else {
            s.host.as_str()
        };
        return Ok(tcp(host, port, timeout));
    }
    if let Some(g) = &h.grpc {
        let port =
            u16::try_from(g.port).map_err(|_| super::spec::PortError::Number(g.port.into()))?;
        return Ok(grpc(
            t.pod_ip,
            port,
            g.service.as_deref().unwrap_or(""),
            timeout,
        ));
    }
    if let Some(s) = &h.sleep {
        std::thread::sleep(Duration::from_secs(s.seconds.max(0) as u64).min(timeout));
        return Ok(ProbeResult::ok());
    }
    Err(HandlerError::Missing)
}

fn exec(t: &Target<'_>, cmd: &[String], timeout: Duration) -> Result<ProbeResult, HandlerError> {
    match t.runtime.exec_sync(t.container_id, cmd, timeout) {
        Ok(r) if r.exit_code == 0 => Ok(ProbeResult::ok()),
        Ok(r) => {
            let mut out = String::from_utf8_lossy(&r.stdout).into_owned();
            out.push_str(&String::from_utf8_lossy(&r.stderr));
            let out = out.trim();
            Ok(ProbeResult::fail(if out.is_empty() {
                format!("command {cmd:?} exited with {}", r.exit_code)
            } else {
                out.chars().take(1024).collect()
            }))
        }
        // ExecProbeTimeout (GA): a timed-out exec probe is a failure.
        Err(e) if e.kind == ErrorKind::DeadlineExceeded => {
            Ok(ProbeResult::fail(format!("command {cmd:?} timed out")))
        }
        Err(e) => Err(e.into()),
    }
}

fn tcp(host: &str, port: u16, timeout: Duration) -> ProbeResult {
    let addrs: Vec<SocketAddr> = match (host, port).to_socket_addrs() {
        Ok(a) => a.collect(),
        Err(e) => return ProbeResult::fail(format!("dial tcp {host}:{port}: {e}")),
    };
    let Some(addr) = addrs.first() else {
        return ProbeResult::fail(format!("dial tcp {host}:{port}: no address"));
    };
    match TcpStream::connect_timeout(addr, timeout) {
        Ok(_) => ProbeResult::ok(),
        Err(e) => ProbeResult::fail(format!("dial tcp {addr}: {e}")),
    }
}

fn agent(timeout: Duration) -> ureq::Agent {
    // One agent per distinct timeout would be tidier; probes are cheap enough to build the
    // config per call, but the TLS config (no verification, as the kubelet) is shared.
    let builder = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .max_redirects(0)
        .http_status_as_error(false)
        .user_agent(USER_AGENT);
    #[cfg(feature = "tls")]
    let builder = {
        static TLS: std::sync::OnceLock<ureq::tls::TlsConfig> = std::sync::OnceLock::new();
        builder.tls_config(
            TLS.get_or_init(|| {
                ureq::tls::TlsConfig::builder()
                    .disable_verification(true)
                    .build()
            })
            .clone(),
        )
    };
    builder.build().new_agent()
}

/// The probe result for an HTTPS probe or hook in a build without the `tls` feature.
#[cfg(not(feature = "tls"))]
fn no_tls(url: &str) -> ProbeResult {
    ProbeResult::fail(format!(
        "Get \"{url}\": HTTPS is not available: this nanolet was built without the tls feature"
    ))
}

fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let authority = rest.split('/').next().unwrap_or("");
    let authority = authority
        .rsplit_once('@')
        .map(|(_, a)| a)
        .unwrap_or(authority);
    match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or("").to_string(),
        None => authority.split(':').next().unwrap_or("").to_string(),
    }
}

fn http_get(
    t: &Target<'_>,
    g: &HttpGetAction,
    timeout: Duration,
) -> Result<ProbeResult, HandlerError> {
    let port = resolve_port(t.container, &g.port)?;
    let host = if g.host.is_empty() {
        t.pod_ip
    } else {
        g.host.as_str()
    };
    let scheme = if g.scheme.eq_ignore_ascii_case("https") {
        "https"
    } else {
        "http"
    };
    let path = if g.path.starts_with('/') {
        g.path.clone()
    } else {
        format!("/{}", g.path)
    };
    let host_part = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    let mut url = format!("{scheme}://{host_part}:{port}{path}");
    #[cfg(not(feature = "tls"))]
    if scheme == "https" {
        return Ok(no_tls(&url));
    }
    let agent = agent(timeout);
    // Redirects: followed only to the same host, at most 10 (the kubelet's rule); a redirect
    // elsewhere ends the probe as a success with a warning.
    for _ in 0..=10 {
        let mut req = agent.get(&url);
        let mut has_accept = false;
        for h in &g.http_headers {
            has_accept |= h.name.eq_ignore_ascii_case("accept");
            req = req.header(h.name.as_str(), h.value.as_str());
        }
        if !has_accept {
            req = req.header("Accept", "*/*");
        }
        #[cfg(not(feature = "tls"))]
        if url.starts_with("https://") {
            return Ok(no_tls(&url));
        }
        let mut resp = match req.call() {
            Ok(r) => r,
            Err(e) => return Ok(ProbeResult::fail(format!("Get \"{url}\": {e}"))),
        };
        let code = resp.status().as_u16();
        if (300..400).contains(&code) {
            let loc = resp
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let next = loc.map(|loc| {
                if loc.starts_with("http://") || loc.starts_with("https://") {
                    loc
                } else if loc.starts_with('/') {
                    format!("{scheme}://{host_part}:{port}{loc}")
                } else {
                    // Relative to the current path (Go's URL.ResolveReference).
                    let base = url.split('?').next().unwrap_or(&url);
                    let dir = base.rsplit_once('/').map_or(base, |(d, _)| d);
                    format!("{dir}/{loc}")
                }
            });
            if let Some(next) = next.filter(|n| host_of(n) == host_of(&url)) {
                url = next;
                continue;
            }
            // pkg/probe/http DoHTTPProbe: a 3xx that is not followed (another host, no
            // Location) ends the probe as a Warning, "Probe terminated redirects, Response
            // body: <body>" with at most maxRespBodyLength (10 KiB) of the body.
            return Ok(ProbeResult {
                outcome: Outcome::Warning,
                message: format!(
                    "Probe terminated redirects, Response body: {}",
                    read_body(&mut resp)
                ),
            });
        }
        if (200..400).contains(&code) {
            return Ok(ProbeResult::ok());
        }
        return Ok(ProbeResult::fail(format!(
            "HTTP probe failed with statuscode: {code}"
        )));
    }
    Ok(ProbeResult::fail(format!(
        "Get \"{url}\": stopped after 10 redirects"
    )))
}

/// The kubelet's maxRespBodyLength (pkg/probe/http): a probe reads at most 10 KiB of a body.
const MAX_RESP_BODY: u64 = 10 * 1024;

/// At most `MAX_RESP_BODY` bytes of the body (what could be read before an error).
fn read_body(resp: &mut ureq::http::Response<ureq::Body>) -> String {
    use std::io::Read;
    let mut buf = Vec::new();
    let _ = resp
        .body_mut()
        .as_reader()
        .take(MAX_RESP_BODY)
        .read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

fn grpc(host: &str, port: u16, service: &str, timeout: Duration) -> ProbeResult {
    match crate::cri::grpc_health::check(host, port, service, timeout) {
        Ok(1) => ProbeResult::ok(),
        Ok(status) => ProbeResult::fail(format!(
            "service unhealthy (responded with \"{}\")",
            match status {
                0 => "UNKNOWN",
                2 => "NOT_SERVING",
                3 => "SERVICE_UNKNOWN",
                _ => "UNRECOGNIZED",
            }
        )),
        Err(e) => ProbeResult::fail(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::fake::FakeRuntime;
    use crate::prober::spec::{HttpHeader, IntOrString};
    use std::sync::mpsc;

    fn serve(
        status: u16,
        location: Option<String>,
    ) -> (u16, mpsc::Receiver<Vec<(String, String)>>) {
        let server = tiny_http::Server::http("127.0.0.1:0").expect("server");
        let port = server
            .server_addr()
            .to_ip()
            .map(|a| a.port())
            .expect("port");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for req in server.incoming_requests().take(3) {
                let hs = req
                    .headers()
                    .iter()
                    .map(|h| (h.field.to_string(), h.value.to_string()))
                    .collect();
                let _ = tx.send(hs);
                let mut resp = tiny_http::Response::from_string("x").with_status_code(status);
                if let Some(l) = &location {
                    resp = resp.with_header(
                        tiny_http::Header::from_bytes("Location", l.as_bytes()).expect("header"),
                    );
                }
                let _ = req.respond(resp);
            }
        });
        (port, rx)
    }

    fn target<'a>(rt: &'a FakeRuntime, c: &'a Container) -> Target<'a> {
        Target {
            runtime: rt,
            container: c,
            container_id: "x",
            pod_ip: "127.0.0.1",
        }
    }

    fn get(port: u16) -> HttpGetAction {
        HttpGetAction {
            path: "/healthz".into(),
            port: IntOrString::Int(port as i32),
            http_headers: vec![HttpHeader {
                name: "X-Custom".into(),
                value: "yes".into(),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn http_success_range_and_kube_probe_headers() {
        let rt = FakeRuntime::new();
        let c = Container::default();
        for (code, ok) in [
            (200, true),
            (204, true),
            (399, true),
            (400, false),
            (500, false),
        ] {
            let (port, rx) = serve(code, None);
            let r = http_get(&target(&rt, &c), &get(port), Duration::from_secs(2)).expect("probe");
            assert_eq!(r.is_success(), ok, "status {code}: {r:?}");
            if !ok {
                assert_eq!(
                    r.message,
                    format!("HTTP probe failed with statuscode: {code}")
                );
            }
            let hs = rx
                .recv_timeout(Duration::from_secs(2))
                .expect("request seen");
            let h = |n: &str| {
                hs.iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(n))
                    .map(|(_, v)| v.clone())
            };
            assert_eq!(h("User-Agent").as_deref(), Some(USER_AGENT));
            assert_eq!(h("Accept").as_deref(), Some("*/*"));
            assert_eq!(h("X-Custom").as_deref(), Some("yes"));
        }
    }

    #[test]
    fn redirect_to_other_host_is_a_warning_success() {
        let rt = FakeRuntime::new();
        let c = Container::default();
        let (port, _rx) = serve(302, Some("http://192.0.2.1:1/elsewhere".into()));
        let r = http_get(&target(&rt, &c), &get(port), Duration::from_secs(2)).expect("probe");
        assert_eq!(r.outcome, Outcome::Warning);
        // pkg/probe/http DoHTTPProbe: the message carries the 3xx response's body (the e2e
        // non-local redirect test waits for an event containing it).
        assert_eq!(r.message, "Probe terminated redirects, Response body: x");
        // A 3xx without a Location is not followed either: the same Warning.
        let (port, _rx) = serve(302, None);
        let r = http_get(&target(&rt, &c), &get(port), Duration::from_secs(2)).expect("probe");
        assert_eq!(r.outcome, Outcome::Warning);
        assert_eq!(r.message, "Probe terminated redirects, Response body: x");
    }

    #[test]
    fn tcp_open_and_closed_ports() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        assert!(tcp("127.0.0.1", port, Duration::from_secs(1)).is_success());
        drop(l);
        let r = tcp("127.0.0.1", port, Duration::from_secs(1));
        assert_eq!(r.outcome, Outcome::Failure);
        assert!(
            r.message.starts_with("dial tcp 127.0.0.1:"),
            "{}",
            r.message
        );
    }

    #[test]
    fn host_of_urls() {
        assert_eq!(host_of("http://10.0.0.1:80/x"), "10.0.0.1");
        assert_eq!(host_of("https://[::1]:443/"), "::1");
        assert_eq!(host_of("http://a.b/c"), "a.b");
    }
}
