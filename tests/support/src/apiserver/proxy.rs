//! The node proxy subresources, routed as kube-apiserver's pod and node REST storage does
//! (pkg/registry/core/pod LogLocation / ExecLocation / AttachLocation / PortForwardLocation,
//! pkg/registry/core/node ResourceLocation): which kubelet URL a request goes to. The front
//! (`front.rs`) dials it with the kubelet-client certificate and relays.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::{SeenRequest, State, not_found, query_param, status};
use crate::front::{Head, Route};
use crate::tls::Peer;

/// Go's url.QueryEscape.
fn escape(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn all_params(query: &str, key: &str) -> Vec<String> {
    query
        .split('&')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let dec = |s: &str| nanolet::server::api::percent_decode(&s.replace('+', " "));
            (dec(k) == key).then(|| dec(v))
        })
        .collect()
}

fn truthy(v: Option<String>) -> bool {
    matches!(
        v.as_deref(),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True")
    )
}

/// url.Values.Encode: keys sorted, values in order.
fn encode(mut pairs: Vec<(&str, String)>) -> String {
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", escape(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn json_reply((code, v): (u16, Value)) -> Route {
    Route::Reply(code, v.to_string())
}

/// The node's address for the kubelet: kubeadm's --kubelet-preferred-address-types
/// (InternalIP, ExternalIP, Hostname) and daemonEndpoints.kubeletEndpoint.Port (10250 when
/// unset).
fn node_addr(node: &Value) -> Option<SocketAddr> {
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_u64()
        .filter(|p| *p > 0 && *p < 65536)
        .unwrap_or(10250) as u16;
    let addrs = node["status"]["addresses"].as_array()?;
    for t in ["InternalIP", "ExternalIP", "Hostname"] {
        for a in addrs.iter().filter(|a| a["type"] == t) {
            let host = a["address"].as_str().unwrap_or("");
            if let Ok(ip) = host.parse::<std::net::IpAddr>() {
                return Some(SocketAddr::new(ip, port));
            }
            if let Some(sa) = (host, port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut i| i.next())
            {
                return Some(sa);
            }
        }
    }
    None
}

impl State {
    fn pod_container(&self, pod: &Value, name: &str, query: &str) -> Result<String, Route> {
        if let Some(c) = query_param(query, "container").filter(|c| !c.is_empty()) {
            let known = ["containers", "initContainers", "ephemeralContainers"]
                .iter()
                .flat_map(|k| pod["spec"][k].as_array().cloned().unwrap_or_default())
                .any(|x| x["name"] == c.as_str());
            if !known {
                return Err(json_reply(status(
                    400,
                    "BadRequest",
                    &format!("container {c} is not valid for pod {name}"),
                )));
            }
            return Ok(c);
        }
        let names: Vec<String> = pod["spec"]["containers"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c["name"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        match names.as_slice() {
            [one] => Ok(one.clone()),
            _ => Err(json_reply(status(
                400,
                "BadRequest",
                &format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    names.join(" ")
                ),
            ))),
        }
    }

    fn node_of(&self, node: &str) -> Result<SocketAddr, Route> {
        let Some(n) = self.objects.get(&format!("/api/v1/nodes/{node}")) else {
            return Err(json_reply(not_found("nodes", node)));
        };
        node_addr(n).ok_or_else(|| {
            json_reply(status(
                500,
                "InternalError",
                &format!(
                    "Internal error occurred: no preferred addresses found; known addresses: {}",
                    n["status"]["addresses"]
                ),
            ))
        })
    }

    /// The kubelet URL for a pod subresource request.
    fn pod_route(&self, ns: &str, name: &str, sub: &str, method: &str, query: &str) -> Route {
        let allowed = match sub {
            "log" => method == "GET",
            _ => method == "GET" || method == "POST",
        };
        if !allowed {
            return json_reply(status(
                405,
                "MethodNotAllowed",
                &format!(
                    "the server does not allow this method on the requested resource ({method} pods/{sub})"
                ),
            ));
        }
        let Some(pod) = self
            .objects
            .get(&format!("/api/v1/namespaces/{ns}/pods/{name}"))
        else {
            return json_reply(not_found("pods", name));
        };
        let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) else {
            return json_reply(status(
                400,
                "BadRequest",
                &format!("pod {name} does not have a host assigned"),
            ));
        };
        let addr = match self.node_of(node) {
            Ok(a) => a,
            Err(r) => return r,
        };
        let p = |k: &str| query_param(query, k);
        let (path, params) = match sub {
            "portforward" => {
                let ports = all_params(query, "ports");
                let pairs = ports.into_iter().map(|v| ("port", v)).collect();
                (format!("/portForward/{ns}/{name}"), pairs)
            }
            _ => {
                let c = match self.pod_container(pod, name, query) {
                    Ok(c) => c,
                    Err(r) => return r,
                };
                let mut pairs: Vec<(&str, String)> = Vec::new();
                if sub == "log" {
                    for k in ["follow", "previous", "timestamps"] {
                        if truthy(p(k)) {
                            pairs.push((k, "true".into()));
                        }
                    }
                    for k in ["sinceSeconds", "sinceTime", "tailLines", "limitBytes"] {
                        if let Some(v) = p(k).filter(|v| !v.is_empty()) {
                            pairs.push((k, v));
                        }
                    }
                } else {
                    for (k, to) in [
                        ("stdin", "input"),
                        ("stdout", "output"),
                        ("stderr", "error"),
                        ("tty", "tty"),
                    ] {
                        if truthy(p(k)) {
                            pairs.push((to, "1".into()));
                        }
                    }
                    if sub == "exec" {
                        for c in all_params(query, "command") {
                            pairs.push(("command", c));
                        }
                    }
                }
                let base = if sub == "log" { "containerLogs" } else { sub };
                (format!("/{base}/{ns}/{name}/{c}"), pairs)
            }
        };
        let q = encode(params);
        let target = if q.is_empty() {
            path
        } else {
            format!("{path}?{q}")
        };
        Route::Dial {
            addr,
            target,
            log: sub == "log",
        }
    }

    /// Routes a request the front sees: proxy subresources to the kubelet, the rest to the
    /// double.
    fn route(&mut self, head: &Head, peer: &Peer, anonymous: bool) -> Route {
        let (path, query) = head.target.split_once('?').unwrap_or((&head.target, ""));
        let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        enum Kind<'a> {
            Pod(&'a str, &'a str, &'a str),
            Node(&'a str, String),
        }
        let kind = match segs.as_slice() {
            ["api", "v1", "namespaces", ns, "pods", name, sub]
                if matches!(*sub, "log" | "exec" | "attach" | "portforward") =>
            {
                Kind::Pod(ns, name, sub)
            }
            ["api", "v1", "nodes", name, "proxy", rest @ ..] => Kind::Node(name, rest.join("/")),
            _ => return Route::Pass,
        };
        self.requests.push(SeenRequest {
            method: head.method.clone(),
            path: path.to_string(),
            query: query.to_string(),
            body: String::new(),
            content_type: head.header("Content-Type").unwrap_or("").to_string(),
            accept: head.header("Accept").unwrap_or("").to_string(),
            user: String::new(),
            received: std::time::Instant::now(),
            // Relayed by the front: its answer is not tracked.
            answered: Default::default(),
            watch_lines: Default::default(),
        });
        let auth = head.header("Authorization").unwrap_or("");
        let Some(user) = self.authenticate(peer, auth, anonymous) else {
            return json_reply(status(401, "Unauthorized", "Unauthorized"));
        };
        if let Some(r) = self.requests.last_mut() {
            r.user = user.name;
        }
        let websocket = head
            .header("Upgrade")
            .is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
        match kind {
            Kind::Pod(_, _, sub)
                if sub != "log" && websocket && !self.auth.websocket_passthrough =>
            {
                // kube-apiserver >= 1.30 (TranslateStreamsToWebSockets, PortForwardWebsockets)
                // ends kubectl's WebSocket itself and speaks SPDY to the kubelet; the double
                // does not translate, so it refuses the WebSocket and kubectl falls back to
                // SPDY, which reaches the kubelet as it would from a real API server.
                json_reply(status(
                    400,
                    "BadRequest",
                    "the test double does not translate WebSocket streams to SPDY",
                ))
            }
            Kind::Pod(ns, name, sub) => self.pod_route(ns, name, sub, &head.method, query),
            Kind::Node(name, rest) => match self.node_of(name) {
                Ok(addr) => Route::Dial {
                    addr,
                    target: if query.is_empty() {
                        format!("/{rest}")
                    } else {
                        format!("/{rest}?{query}")
                    },
                    log: false,
                },
                Err(r) => r,
            },
        }
    }
}

/// The front's router for this double.
pub(super) fn router(
    state: Arc<Mutex<State>>,
    anonymous: Arc<AtomicBool>,
    down: Arc<AtomicBool>,
) -> crate::front::Router {
    Arc::new(move |head: &Head, peer: &Peer| {
        if down.load(Ordering::SeqCst) {
            // `set_down`: the tiny_http double answers everything else with 503.
            return json_reply(status(
                503,
                "ServiceUnavailable",
                "the server is down (test)",
            ));
        }
        let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
        st.route(head, peer, anonymous.load(Ordering::SeqCst))
    })
}
