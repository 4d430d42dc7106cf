//! A read-only, kubectl-compatible subset of the Kubernetes API, served on the read-only port:
//!
//! - discovery: `/api` (APIVersions), `/api/v1` (APIResourceList), `/apis` (APIGroupList),
//!   `/version`;
//! - pods: `/api/v1/pods`, `/api/v1/namespaces/{ns}/pods[/{name}]` (with `labelSelector`),
//!   `/api/v1/namespaces/{ns}/pods/{name}/log` (`container`, `previous`, `tailLines`,
//!   `sinceSeconds`, `sinceTime`, `timestamps`, `follow`);
//! - nodes: `/api/v1/nodes[/{name}]`: this node;
//! - events: `/api/v1/events`, `/api/v1/namespaces/{ns}/events` (with `fieldSelector` on
//!   `involvedObject.*`, `type`, `reason`), from the [`crate::events`] ring.
//!
//! When the client asks for `as=Table` in `Accept` (kubectl does), pods, nodes and events are
//! answered with a `meta.k8s.io/v1` Table carrying the columns of the apiserver's printers;
//! otherwise plain JSON. Errors are `Status` objects. Everything is computed from the status
//! store; nothing here writes.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::cri::Runtime;
use crate::events::Event;
use crate::status::StatusStore;
use crate::timeutil::{parse_rfc3339, rfc3339};

/// The version nanolet reports as its kubelet version: the kubelet API it follows with
/// nanolet's version as semver build metadata, `v1.33.0+nanolet.<version>` (build.rs). Build
/// metadata does not take part in ordering, so version-skew checks see v1.33.0 (a
/// `v1.33.0-nanolet` pre-release sorts below v1.33.0).
pub const KUBELET_VERSION: &str = env!("NANOLET_KUBELET_VERSION");

/// What the API needs besides the status store.
pub struct NodeContext {
    pub node_name: String,
    /// The node's IPs, primary first (`InternalIP` addresses).
    pub host_ips: Vec<String>,
    pub max_pods: u32,
    pub pod_logs_dir: PathBuf,
    /// nanolet's root dir (the node filesystem of `/stats/summary`).
    pub root_dir: PathBuf,
    /// For `containerRuntimeVersion`; `None` in tests.
    pub runtime: Option<Arc<dyn Runtime>>,
    /// The node object's creationTimestamp (when nanolet started).
    pub started: SystemTime,
    runtime_version: OnceLock<String>,
}

impl NodeContext {
    pub fn new(node_name: &str) -> NodeContext {
        NodeContext {
            node_name: node_name.into(),
            host_ips: vec!["127.0.0.1".into()],
            max_pods: 110,
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            root_dir: PathBuf::from("/var/lib/nanolet"),
            runtime: None,
            started: SystemTime::now(),
            runtime_version: OnceLock::new(),
        }
    }

    /// `containerd://1.7.24`, from CRI Version, cached after the first answer.
    fn runtime_version(&self) -> String {
        if let Some(v) = self.runtime_version.get() {
            return v.clone();
        }
        let Some(rt) = &self.runtime else {
            return String::new();
        };
        match rt.version() {
            Ok(v) => {
                let s = format!("{}://{}", v.runtime_name, v.runtime_version);
                let _ = self.runtime_version.set(s.clone());
                s
            }
            Err(e) => {
                tracing::debug!(error = %e, "runtime version for the node object");
                String::new()
            }
        }
    }
}

/// An API answer.
#[derive(Debug)]
pub enum ApiOutcome {
    Response {
        status: u16,
        content_type: &'static str,
        body: Vec<u8>,
    },
    /// `follow=true` logs: the server streams it on its own thread.
    Follow(LogFollow),
}

impl ApiOutcome {
    fn json(status: u16, v: &Value) -> ApiOutcome {
        ApiOutcome::Response {
            status,
            content_type: "application/json",
            body: serde_json::to_vec(v).unwrap_or_default(),
        }
    }

    fn text(body: Vec<u8>) -> ApiOutcome {
        ApiOutcome::Response {
            status: 200,
            content_type: "text/plain",
            body,
        }
    }
}

/// A `Status` object (`kind: Status`, `status: Failure`).
pub fn status(code: u16, reason: &str, message: &str, details: Option<(&str, &str)>) -> Value {
    let mut v = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let Some((kind, name)) = details {
        v["details"] = json!({"name": name, "kind": kind});
    }
    v
}

fn fail(code: u16, reason: &str, message: &str, details: Option<(&str, &str)>) -> ApiOutcome {
    ApiOutcome::json(code, &status(code, reason, message, details))
}

fn not_found(kind: &str, name: &str) -> ApiOutcome {
    fail(
        404,
        "NotFound",
        &format!("{kind} \"{name}\" not found"),
        Some((kind, name)),
    )
}

fn bad_request(message: &str) -> ApiOutcome {
    fail(400, "BadRequest", message, None)
}

/// The 405 for any write on an API path.
pub fn method_not_allowed() -> Value {
    status(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource: nanolet serves a read-only API",
        None,
    )
}

/// Whether `path` belongs to this module.
pub fn is_api_path(path: &str) -> bool {
    path == "/api"
        || path.starts_with("/api/")
        || path == "/apis"
        || path.starts_with("/apis/")
        || path == "/version"
}

/// Decoded query parameters (`a=b&c`), percent-decoding values.
fn query_params(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// Decodes a URL query component (`+` is a space, `%XX` a byte; a malformed `%` stays).
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16)
                {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.split(';').any(|p| p.trim() == "as=Table"))
}

/// Serves one GET of an API path.
pub fn handle(
    ctx: &NodeContext,
    store: &StatusStore,
    path: &str,
    query: &str,
    accept: &str,
) -> ApiOutcome {
    let q = query_params(query);
    let table = wants_table(accept);
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    match parts.as_slice() {
        ["version"] => ApiOutcome::json(200, &version_info()),
        ["api"] => ApiOutcome::json(
            200,
            &json!({
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
            }),
        ),
        ["apis"] => ApiOutcome::json(
            200,
            &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": []}),
        ),
        ["api", "v1"] => ApiOutcome::json(200, &resource_list()),
        ["api", "v1", "pods"] => list_pods(ctx, store, None, &q, table),
        ["api", "v1", "namespaces", ns, "pods"] => list_pods(ctx, store, Some(ns), &q, table),
        ["api", "v1", "namespaces", ns, "pods", name] => match find_pod(store, ns, name) {
            Some(p) => {
                if table {
                    ApiOutcome::json(200, &pod_table(&[p], &q, SystemTime::now()))
                } else {
                    ApiOutcome::json(200, &p)
                }
            }
            None => not_found("pods", name),
        },
        ["api", "v1", "namespaces", ns, "pods", name, "log"] => pod_log(ctx, store, ns, name, &q),
        ["api", "v1", "nodes"] => {
            let node = node_object(ctx, store);
            if table {
                ApiOutcome::json(200, &node_table(&[node], &q, SystemTime::now()))
            } else {
                ApiOutcome::json(200, &list("NodeList", vec![node]))
            }
        }
        ["api", "v1", "nodes", name] if *name == ctx.node_name => {
            let node = node_object(ctx, store);
            if table {
                ApiOutcome::json(200, &node_table(&[node], &q, SystemTime::now()))
            } else {
                ApiOutcome::json(200, &node)
            }
        }
        ["api", "v1", "nodes", name] => not_found("nodes", name),
        ["api", "v1", "events"] => list_events(ctx, store, None, &q, table),
        ["api", "v1", "namespaces", ns, "events"] => list_events(ctx, store, Some(ns), &q, table),
        _ => fail(
            404,
            "NotFound",
            "the server could not find the requested resource",
            None,
        ),
    }
}

fn version_info() -> Value {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        other => other,
    };
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": KUBELET_VERSION,
        "gitCommit": "",
        "gitTreeState": "",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("linux/{arch}"),
    })
}

fn resource_list() -> Value {
    let res = |name: &str,
               singular: &str,
               namespaced: bool,
               kind: &str,
               verbs: &[&str],
               short: &[&str]| {
        let mut v = json!({
            "name": name,
            "singularName": singular,
            "namespaced": namespaced,
            "kind": kind,
            "verbs": verbs,
        });
        if !short.is_empty() {
            v["shortNames"] = json!(short);
        }
        v
    };
    json!({
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            res("events", "event", true, "Event", &["get", "list"], &["ev"]),
            res("nodes", "node", false, "Node", &["get", "list"], &["no"]),
            res("pods", "pod", true, "Pod", &["get", "list"], &["po"]),
            res("pods/log", "", true, "Pod", &["get"], &[]),
        ],
    })
}

fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({
        "kind": kind,
        "apiVersion": "v1",
        "metadata": {"resourceVersion": ""},
        "items": items,
    })
}

/// A pod from the store as the API serves it: kind/apiVersion set, and a creationTimestamp
/// (static pods have none; the time the source first saw it, else the start time).
fn pod_view(p: &crate::api::Pod) -> Value {
    let mut v = serde_json::to_value(p).unwrap_or(Value::Null);
    if !v.is_object() {
        return v;
    }
    v["kind"] = json!("Pod");
    v["apiVersion"] = json!("v1");
    if v["metadata"]["creationTimestamp"].as_str().is_none() {
        let seen = v["metadata"]["annotations"]["kubernetes.io/config.seen"]
            .as_str()
            .and_then(parse_rfc3339);
        let start = v["status"]["startTime"].as_str().and_then(parse_rfc3339);
        if let Some(t) = seen.or(start) {
            v["metadata"]["creationTimestamp"] = json!(rfc3339(t));
        }
    }
    v
}

fn find_pod(store: &StatusStore, ns: &str, name: &str) -> Option<Value> {
    store
        .pods()
        .iter()
        .find(|p| p.metadata.namespace == ns && p.metadata.name == name)
        .map(pod_view)
}

/// `labelSelector` with the equality-based syntax: `k=v`, `k==v`, `k!=v`, `k`, `!k`.
fn label_selector_matches(selector: &str, labels: &Value) -> bool {
    selector
        .split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .all(|req| {
            let get = |k: &str| labels.get(k.trim()).and_then(Value::as_str);
            if let Some((k, v)) = req.split_once("!=") {
                get(k) != Some(v.trim())
            } else if let Some((k, v)) = req.split_once("==").or_else(|| req.split_once('=')) {
                get(k) == Some(v.trim())
            } else if let Some(k) = req.strip_prefix('!') {
                get(k).is_none()
            } else {
                get(req).is_some()
            }
        })
}

fn list_pods(
    _ctx: &NodeContext,
    store: &StatusStore,
    ns: Option<&str>,
    q: &BTreeMap<String, String>,
    table: bool,
) -> ApiOutcome {
    let selector = q.get("labelSelector").map(String::as_str).unwrap_or("");
    let pods: Vec<Value> = store
        .pods()
        .iter()
        .filter(|p| ns.is_none_or(|n| p.metadata.namespace == n))
        .map(pod_view)
        .filter(|p| label_selector_matches(selector, &p["metadata"]["labels"]))
        .collect();
    if table {
        ApiOutcome::json(200, &pod_table(&pods, q, SystemTime::now()))
    } else {
        ApiOutcome::json(200, &list("PodList", pods))
    }
}

// ---------------------------------------------------------------------------------------------
// Tables

fn column(name: &str, type_: &str, format: &str, priority: u8, description: &str) -> Value {
    json!({
        "name": name,
        "type": type_,
        "format": format,
        "description": description,
        "priority": priority,
    })
}

/// The row's object: the full object with `includeObject=Object`, `None` omits it, otherwise
/// (the default, `Metadata`) a PartialObjectMetadata.
fn row_object(obj: &Value, q: &BTreeMap<String, String>) -> Option<Value> {
    match q.get("includeObject").map(String::as_str) {
        Some("None") => None,
        Some("Object") => Some(obj.clone()),
        _ => Some(json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj["metadata"],
        })),
    }
}

fn table(columns: Vec<Value>, rows: Vec<Value>) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": ""},
        "columnDefinitions": columns,
        "rows": rows,
    })
}

fn row(cells: Vec<Value>, obj: &Value, q: &BTreeMap<String, String>) -> Value {
    let mut r = json!({"cells": cells});
    if let Some(o) = row_object(obj, q) {
        r["object"] = o;
    }
    r
}

/// kubectl's `duration.HumanDuration`.
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs_f64().round() as u64;
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// Age of an RFC 3339 timestamp at `now`; `<unknown>` when absent.
fn age(ts: Option<&str>, now: SystemTime) -> String {
    match ts.and_then(parse_rfc3339) {
        Some(t) => human_duration(now.duration_since(t).unwrap_or_default()),
        None => "<unknown>".into(),
    }
}

fn reason_of_terminated(t: &Value) -> String {
    if let Some(r) = t["reason"].as_str().filter(|r| !r.is_empty()) {
        return r.to_string();
    }
    match t["signal"].as_i64().filter(|s| *s != 0) {
        Some(s) => format!("Signal:{s}"),
        None => format!("ExitCode:{}", t["exitCode"].as_i64().unwrap_or(0)),
    }
}

/// (READY, STATUS, RESTARTS) as kubectl's pod printer computes them.
pub fn pod_columns(p: &Value, now: SystemTime) -> (String, String, String) {
    let st = &p["status"];
    let empty = vec![];
    let spec_containers = p["spec"]["containers"].as_array().unwrap_or(&empty);
    let statuses = st["containerStatuses"].as_array().unwrap_or(&empty);
    let init_statuses = st["initContainerStatuses"].as_array().unwrap_or(&empty);
    let init_specs = p["spec"]["initContainers"].as_array().unwrap_or(&empty);
    let mut reason = st["phase"].as_str().unwrap_or("").to_string();
    if let Some(r) = st["reason"].as_str().filter(|r| !r.is_empty()) {
        reason = r.to_string();
    }
    let mut restarts: i64 = 0;
    let mut last_restart: Option<SystemTime> = None;
    let mut note_restart = |c: &Value| {
        restarts += c["restartCount"].as_i64().unwrap_or(0);
        if let Some(t) = c["lastState"]["terminated"]["finishedAt"]
            .as_str()
            .and_then(parse_rfc3339)
        {
            if last_restart.is_none_or(|l| t > l) {
                last_restart = Some(t);
            }
        }
    };
    let mut initializing = false;
    for (i, c) in init_statuses.iter().enumerate() {
        note_restart(c);
        let term = &c["state"]["terminated"];
        if term.is_object() && term["exitCode"].as_i64() == Some(0) {
            continue;
        }
        if c["started"] == true && c["state"]["running"].is_object() {
            // A running restartable init container (sidecar) does not block.
            let sidecar = init_specs
                .iter()
                .find(|s| s["name"] == c["name"])
                .is_some_and(|s| s["restartPolicy"] == "Always");
            if sidecar {
                continue;
            }
        }
        reason = if term.is_object() {
            format!("Init:{}", reason_of_terminated(term))
        } else if let Some(w) = c["state"]["waiting"]["reason"]
            .as_str()
            .filter(|r| !r.is_empty() && *r != "PodInitializing")
        {
            format!("Init:{w}")
        } else {
            format!("Init:{i}/{}", init_specs.len())
        };
        initializing = true;
        break;
    }
    let mut ready = 0;
    if !initializing {
        let mut has_running = false;
        for c in statuses.iter().rev() {
            note_restart(c);
            if let Some(w) = c["state"]["waiting"]["reason"]
                .as_str()
                .filter(|r| !r.is_empty())
            {
                reason = w.to_string();
            } else if c["state"]["terminated"].is_object() {
                reason = reason_of_terminated(&c["state"]["terminated"]);
            } else if c["ready"] == true && c["state"]["running"].is_object() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let pod_ready = st["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
            reason = if pod_ready { "Running" } else { "NotReady" }.into();
        }
    } else {
        for c in statuses {
            note_restart(c);
        }
    }
    if p["metadata"]["deletionTimestamp"].is_string() {
        reason = "Terminating".into();
    }
    let restarts = match last_restart {
        Some(t) if restarts > 0 => format!(
            "{restarts} ({} ago)",
            human_duration(now.duration_since(t).unwrap_or_default())
        ),
        _ => restarts.to_string(),
    };
    (
        format!("{ready}/{}", spec_containers.len()),
        reason,
        restarts,
    )
}

pub fn pod_table(pods: &[Value], q: &BTreeMap<String, String>, now: SystemTime) -> Value {
    let columns = vec![
        column(
            "Name",
            "string",
            "name",
            0,
            "Name must be unique within a namespace.",
        ),
        column(
            "Ready",
            "string",
            "",
            0,
            "The aggregate readiness state of this pod for accepting traffic.",
        ),
        column(
            "Status",
            "string",
            "",
            0,
            "The aggregate status of the containers in this pod.",
        ),
        column(
            "Restarts",
            "string",
            "",
            0,
            "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
        ),
        column(
            "Age",
            "string",
            "",
            0,
            "CreationTimestamp is a timestamp representing the server time when this object was created.",
        ),
        column("IP", "string", "", 1, "IP address allocated to the pod."),
        column(
            "Node",
            "string",
            "",
            1,
            "Name of the node the pod is assigned to.",
        ),
        column(
            "Nominated Node",
            "string",
            "",
            1,
            "Name of the node the pod is nominated to.",
        ),
        column(
            "Readiness Gates",
            "string",
            "",
            1,
            "Readiness gates of the pod.",
        ),
    ];
    let rows = pods
        .iter()
        .map(|p| {
            let (ready, status, restarts) = pod_columns(p, now);
            let none = || json!("<none>");
            let ip = p["status"]["podIP"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map_or_else(none, |s| json!(s));
            let node = p["spec"]["nodeName"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map_or_else(none, |s| json!(s));
            row(
                vec![
                    p["metadata"]["name"].clone(),
                    json!(ready),
                    json!(status),
                    json!(restarts),
                    json!(age(p["metadata"]["creationTimestamp"].as_str(), now)),
                    ip,
                    node,
                    none(),
                    none(),
                ],
                p,
                q,
            )
        })
        .collect();
    table(columns, rows)
}

fn node_table(nodes: &[Value], q: &BTreeMap<String, String>, now: SystemTime) -> Value {
    let columns = vec![
        column(
            "Name",
            "string",
            "name",
            0,
            "Name must be unique within a namespace.",
        ),
        column("Status", "string", "", 0, "The status of the node"),
        column("Roles", "string", "", 0, "The roles of the node"),
        column(
            "Age",
            "string",
            "",
            0,
            "CreationTimestamp is a timestamp representing the server time when this object was created.",
        ),
        column(
            "Version",
            "string",
            "",
            0,
            "Kubelet Version reported by the node.",
        ),
        column(
            "Internal-IP",
            "string",
            "",
            1,
            "List of internal IPs in the PodStatus.",
        ),
        column(
            "External-IP",
            "string",
            "",
            1,
            "List of external IPs in the PodStatus.",
        ),
        column(
            "OS-Image",
            "string",
            "",
            1,
            "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
        ),
        column(
            "Kernel-Version",
            "string",
            "",
            1,
            "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
        ),
        column(
            "Container-Runtime",
            "string",
            "",
            1,
            "Container Runtime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
        ),
    ];
    let rows = nodes
        .iter()
        .map(|n| {
            let info = &n["status"]["nodeInfo"];
            let internal = n["status"]["addresses"]
                .as_array()
                .and_then(|a| a.iter().find(|x| x["type"] == "InternalIP"))
                .map_or(json!("<none>"), |x| x["address"].clone());
            row(
                vec![
                    n["metadata"]["name"].clone(),
                    json!("Ready"),
                    json!("<none>"),
                    json!(age(n["metadata"]["creationTimestamp"].as_str(), now)),
                    info["kubeletVersion"].clone(),
                    internal,
                    json!("<none>"),
                    info["osImage"].clone(),
                    info["kernelVersion"].clone(),
                    info["containerRuntimeVersion"].clone(),
                ],
                n,
                q,
            )
        })
        .collect();
    table(columns, rows)
}

fn event_table(events: &[Value], q: &BTreeMap<String, String>, now: SystemTime) -> Value {
    let columns = vec![
        column(
            "Last Seen",
            "string",
            "",
            0,
            "Time when this Event was last seen",
        ),
        column(
            "Type",
            "string",
            "",
            0,
            "Type of this event (Normal, Warning), new types could be added in the future.",
        ),
        column(
            "Reason",
            "string",
            "",
            0,
            "A machine-readable description of why this event was generated.",
        ),
        column("Object", "string", "", 0, "The object this Event is about."),
        column(
            "Subobject",
            "string",
            "",
            1,
            "The subobject this Event is about.",
        ),
        column(
            "Source",
            "string",
            "",
            1,
            "The component reporting this event.",
        ),
        column(
            "Message",
            "string",
            "",
            0,
            "A human-readable description of the status of this operation.",
        ),
        column(
            "First Seen",
            "string",
            "",
            1,
            "Time when this Event was first seen",
        ),
        column(
            "Count",
            "string",
            "",
            1,
            "The number of times this event has occurred.",
        ),
        column("Name", "string", "name", 1, "The name of this event"),
    ];
    let rows = events
        .iter()
        .map(|e| {
            let io = &e["involvedObject"];
            row(
                vec![
                    json!(age(e["lastTimestamp"].as_str(), now)),
                    e["type"].clone(),
                    e["reason"].clone(),
                    json!(format!("pod/{}", io["name"].as_str().unwrap_or_default())),
                    json!(io["fieldPath"].as_str().unwrap_or("")),
                    json!(format!(
                        "kubelet, {}",
                        e["source"]["host"].as_str().unwrap_or_default()
                    )),
                    e["message"].clone(),
                    json!(age(e["firstTimestamp"].as_str(), now)),
                    json!(e["count"].as_i64().unwrap_or(1).to_string()),
                    e["metadata"]["name"].clone(),
                ],
                e,
                q,
            )
        })
        .collect();
    table(columns, rows)
}

// ---------------------------------------------------------------------------------------------
// Events

/// `fieldSelector` on events: `involvedObject.{kind,name,namespace,uid,fieldPath}`, `type`,
/// `reason`, `metadata.namespace`, `metadata.name`, with `=`, `==` or `!=`.
fn event_field_matches(selector: &str, e: &Value) -> Result<bool, String> {
    for req in selector.split(',').map(str::trim).filter(|r| !r.is_empty()) {
        let (key, want, negate) = if let Some((k, v)) = req.split_once("!=") {
            (k, v, true)
        } else if let Some((k, v)) = req.split_once("==").or_else(|| req.split_once('=')) {
            (k, v, false)
        } else {
            return Err(format!("invalid selector: {req:?}"));
        };
        let got = match key.trim() {
            "involvedObject.kind" => &e["involvedObject"]["kind"],
            "involvedObject.name" => &e["involvedObject"]["name"],
            "involvedObject.namespace" => &e["involvedObject"]["namespace"],
            "involvedObject.uid" => &e["involvedObject"]["uid"],
            "involvedObject.fieldPath" => &e["involvedObject"]["fieldPath"],
            "involvedObject.apiVersion" => &e["involvedObject"]["apiVersion"],
            "type" => &e["type"],
            "reason" => &e["reason"],
            "source" => &e["source"]["component"],
            "metadata.namespace" => &e["metadata"]["namespace"],
            "metadata.name" => &e["metadata"]["name"],
            other => {
                return Err(format!("field label not supported: {other}"));
            }
        };
        let eq = got.as_str().unwrap_or("") == want.trim();
        if eq == negate {
            return Ok(false);
        }
    }
    Ok(true)
}

fn list_events(
    ctx: &NodeContext,
    store: &StatusStore,
    ns: Option<&str>,
    q: &BTreeMap<String, String>,
    table: bool,
) -> ApiOutcome {
    let selector = q.get("fieldSelector").map(String::as_str).unwrap_or("");
    let mut items = vec![];
    for e in store.events().list() {
        if ns.is_some_and(|n| e.object.namespace != n) {
            continue;
        }
        let v = Event::to_json(&e, &ctx.node_name);
        match event_field_matches(selector, &v) {
            Ok(true) => items.push(v),
            Ok(false) => {}
            Err(m) => return bad_request(&m),
        }
    }
    if table {
        ApiOutcome::json(200, &event_table(&items, q, SystemTime::now()))
    } else {
        ApiOutcome::json(200, &list("EventList", items))
    }
}

// ---------------------------------------------------------------------------------------------
// Node

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn os_image() -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                Some(
                    l.strip_prefix("PRETTY_NAME=")?
                        .trim_matches('"')
                        .to_string(),
                )
            })
        })
        .unwrap_or_else(|| "Unknown".into())
}

/// The Node object for this node (served on `/api/v1/nodes`, registered in API-server mode).
pub fn node_object(ctx: &NodeContext, store: &StatusStore) -> Value {
    let cpus = crate::node::capacity().cpu_millis / 1000;
    let mem = format!("{}Ki", crate::node::capacity().memory_bytes / 1024);
    let resources = json!({
        "cpu": cpus.to_string(),
        "memory": mem,
        "pods": ctx.max_pods.to_string(),
    });
    let started = rfc3339(ctx.started);
    let now = rfc3339(SystemTime::now());
    // The kubelet's Ready=False message names what is not ready ("container runtime status
    // check may not have completed yet", "PLEG is not healthy: ..."); so does ours.
    let failing: Vec<String> = store
        .health()
        .into_iter()
        .filter(|c| !c.ok)
        .map(|c| format!("{}: {}", c.name, c.message))
        .collect();
    let healthy = failing.is_empty();
    // Pressure conditions as the eviction manager holds them (transition period included).
    let pressure = store.node_conditions();
    let cond = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({
            "type": type_,
            "status": status,
            "lastHeartbeatTime": now,
            "lastTransitionTime": started,
            "reason": reason,
            "message": message,
        })
    };
    let cond_at = |type_: &str, status: &str, reason: &str, message: &str, since: SystemTime| {
        let mut c = cond(type_, status, reason, message);
        c["lastTransitionTime"] = json!(rfc3339(since));
        c
    };
    let ready = if healthy {
        cond(
            "Ready",
            "True",
            "KubeletReady",
            "nanolet is posting ready status",
        )
    } else {
        cond(
            "Ready",
            "False",
            "KubeletNotReady",
            &format!("nanolet is not ready: {}", failing.join("; ")),
        )
    };
    // kubelet nodestatus.NodeAddress with --node-ip: one InternalIP per node IP (primary
    // first), then the Hostname.
    let mut addresses: Vec<Value> = ctx
        .host_ips
        .iter()
        .map(|ip| json!({"type": "InternalIP", "address": ip}))
        .collect();
    addresses.push(json!({"type": "Hostname", "address": ctx.node_name}));
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    json!({
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": ctx.node_name,
            "uid": read_trimmed("/etc/machine-id"),
            "creationTimestamp": started,
            "labels": {
                "kubernetes.io/hostname": ctx.node_name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": arch,
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": arch,
            },
        },
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                match pressure.get("MemoryPressure") {
                    Some(t) => cond_at("MemoryPressure", "True", "KubeletHasInsufficientMemory", "nanolet has insufficient memory available", *t),
                    None => cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "nanolet has sufficient memory available"),
                },
                match pressure.get("DiskPressure") {
                    Some(t) => cond_at("DiskPressure", "True", "KubeletHasDiskPressure", "nanolet has disk pressure", *t),
                    None => cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "nanolet has no disk pressure"),
                },
                match pressure.get("PIDPressure") {
                    Some(t) => cond_at("PIDPressure", "True", "KubeletHasInsufficientPID", "nanolet has insufficient PID available", *t),
                    None => cond("PIDPressure", "False", "KubeletHasSufficientPID", "nanolet has sufficient PID available"),
                },
                ready,
            ],
            "addresses": addresses,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": read_trimmed("/etc/machine-id"),
                "systemUUID": read_trimmed("/sys/class/dmi/id/product_uuid"),
                "bootID": read_trimmed("/proc/sys/kernel/random/boot_id"),
                "kernelVersion": read_trimmed("/proc/sys/kernel/osrelease"),
                "osImage": os_image(),
                "containerRuntimeVersion": ctx.runtime_version(),
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": arch,
            },
        },
    })
}

// ---------------------------------------------------------------------------------------------
// Logs

/// One line of a CRI log file: `<RFC3339Nano> <stream> <tag> <content>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriLine<'a> {
    pub time: &'a str,
    pub stream: &'a str,
    /// Tag `P`: the content continues on the next line.
    pub partial: bool,
    pub content: &'a [u8],
}

/// Parses one CRI log line (without its `\n`). `None` for lines that are not in the format.
pub fn parse_cri_line(line: &[u8]) -> Option<CriLine<'_>> {
    let mut it = line.splitn(4, |b| *b == b' ');
    let time = std::str::from_utf8(it.next()?).ok()?;
    let stream = std::str::from_utf8(it.next()?).ok()?;
    let tag = std::str::from_utf8(it.next()?).ok()?;
    let content = it.next().unwrap_or(&[]);
    if !matches!(stream, "stdout" | "stderr") || parse_rfc3339(time).is_none() {
        return None;
    }
    // Tags are `:`-separated; the first is P (partial) or F (full).
    let partial = match tag.split(':').next() {
        Some("P") => true,
        Some("F") => false,
        _ => return None,
    };
    Some(CriLine {
        time,
        stream,
        partial,
        content,
    })
}

/// Options of a log request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogOptions {
    pub timestamps: bool,
    pub tail_lines: Option<usize>,
    pub since: Option<SystemTime>,
}

/// Joins partial CRI lines into whole log lines (`(time of the first part, text + \n)`).
#[derive(Debug, Default)]
pub struct LogAssembler {
    pending: Option<(String, Vec<u8>)>,
}

impl LogAssembler {
    /// Feeds one raw line; returns a complete line when one is finished.
    pub fn feed(&mut self, raw: &[u8]) -> Option<(String, Vec<u8>)> {
        let l = parse_cri_line(raw)?;
        let (time, mut text) = self
            .pending
            .take()
            .unwrap_or_else(|| (l.time.to_string(), Vec::new()));
        text.extend_from_slice(l.content);
        if l.partial {
            self.pending = Some((time, text));
            None
        } else {
            text.push(b'\n');
            Some((time, text))
        }
    }
}

fn render_line(opts: &LogOptions, time: &str, text: &[u8], out: &mut Vec<u8>) -> bool {
    if let Some(since) = opts.since {
        if parse_rfc3339(time).is_some_and(|t| t < since) {
            return false;
        }
    }
    if opts.timestamps {
        out.extend_from_slice(time.as_bytes());
        out.push(b' ');
    }
    out.extend_from_slice(text);
    true
}

/// Formats the whole of a CRI log file's bytes for the API.
pub fn format_log(data: &[u8], opts: &LogOptions) -> Vec<u8> {
    let mut asm = LogAssembler::default();
    let mut lines: Vec<(String, Vec<u8>)> = data
        .split(|b| *b == b'\n')
        .filter_map(|raw| asm.feed(raw))
        .filter(|(t, _)| {
            opts.since
                .is_none_or(|s| parse_rfc3339(t).is_none_or(|t| t >= s))
        })
        .collect();
    if let Some(n) = opts.tail_lines {
        let skip = lines.len().saturating_sub(n);
        lines.drain(..skip);
    }
    let mut out = vec![];
    for (t, text) in &lines {
        render_line(opts, t, text, &mut out);
    }
    out
}

/// A `follow=true` log request, resolved to its file.
#[derive(Debug)]
pub struct LogFollow {
    pub path: PathBuf,
    pub opts: LogOptions,
    pub uid: String,
    pub container: String,
    pub restart_count: i64,
}

/// Whether the container (this restart) is still running, per the status store.
fn still_running(store: &StatusStore, uid: &str, container: &str, restart_count: i64) -> bool {
    let Some(p) = store.get(uid) else {
        return false;
    };
    let Some(st) = &p.status else {
        return false;
    };
    st.container_statuses
        .iter()
        .chain(&st.init_container_statuses)
        .any(|c| {
            c.name == container
                && i64::from(c.restart_count) == restart_count
                && c.state.running.is_some()
        })
}

impl LogFollow {
    /// Streams the log to `out` (the initial content with tail/since applied, then new lines as
    /// the file grows) until the container stops or a write fails (the client went away).
    /// Each `write` call is one complete chunk of whole lines.
    pub fn stream(
        &self,
        store: &StatusStore,
        out: &mut dyn Write,
        stopping: &dyn Fn() -> bool,
    ) -> io::Result<()> {
        let mut f = File::open(&self.path)?;
        let mut data = vec![];
        f.read_to_end(&mut data)?;
        let mut offset = data.len() as u64;
        // Keep an unterminated last line for later.
        let cut = data.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let mut carry = data.split_off(cut);
        let first = format_log(&data, &self.opts);
        // The assembler state across the initial part: partial lines at the end of the
        // initial content are re-read below, so start a fresh assembler from the carry point.
        let mut asm = LogAssembler::default();
        if !first.is_empty() {
            out.write_all(&first)?;
            out.flush()?;
        }
        let live_opts = LogOptions {
            tail_lines: None,
            ..self.opts.clone()
        };
        let mut idle_checks = 0u32;
        loop {
            if stopping() {
                return Ok(());
            }
            let len = f.metadata().map(|m| m.len()).unwrap_or(offset);
            if len < offset {
                // Truncated or replaced: start over.
                f = File::open(&self.path)?;
                offset = 0;
                carry.clear();
            }
            let mut buf = vec![];
            f.seek(SeekFrom::Start(offset))?;
            let n = f.read_to_end(&mut buf)?;
            offset += n as u64;
            if n > 0 {
                carry.extend_from_slice(&buf);
                let cut = carry.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
                let rest = carry.split_off(cut);
                let mut chunk = vec![];
                for raw in carry.split(|b| *b == b'\n') {
                    if let Some((t, text)) = asm.feed(raw) {
                        render_line(&live_opts, &t, &text, &mut chunk);
                    }
                }
                carry = rest;
                if !chunk.is_empty() {
                    out.write_all(&chunk)?;
                    out.flush()?;
                }
                continue;
            }
            // Nothing new. Rotated (the path is a new file: containerd reopened the log after
            // the old one was renamed)? Go on with the new file from its start.
            if let (Ok(now), Ok(open)) = (std::fs::metadata(&self.path), f.metadata()) {
                use std::os::unix::fs::MetadataExt;
                if (now.dev(), now.ino()) != (open.dev(), open.ino()) {
                    if let Ok(nf) = File::open(&self.path) {
                        f = nf;
                        offset = 0;
                        carry.clear();
                        continue;
                    }
                }
            }
            // Is the container still running? Check every ~1s.
            idle_checks += 1;
            if idle_checks % 5 == 0
                && !still_running(store, &self.uid, &self.container, self.restart_count)
            {
                // One last read for what was written just before the exit.
                let mut buf = vec![];
                f.seek(SeekFrom::Start(offset))?;
                f.read_to_end(&mut buf)?;
                carry.extend_from_slice(&buf);
                let mut chunk = vec![];
                for raw in carry.split(|b| *b == b'\n') {
                    if let Some((t, text)) = asm.feed(raw) {
                        render_line(&live_opts, &t, &text, &mut chunk);
                    }
                }
                if !chunk.is_empty() {
                    out.write_all(&chunk)?;
                    out.flush()?;
                }
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn parse_bool(q: &BTreeMap<String, String>, key: &str) -> Result<bool, String> {
    match q.get(key).map(String::as_str) {
        None | Some("false") | Some("0") => Ok(false),
        Some("" | "true" | "1") => Ok(true),
        Some(v) => Err(format!("{key}: invalid boolean {v:?}")),
    }
}

fn parse_positive(q: &BTreeMap<String, String>, key: &str) -> Result<Option<i64>, String> {
    match q.get(key) {
        None => Ok(None),
        Some(v) => match v.parse::<i64>() {
            Ok(n) if n >= 0 => Ok(Some(n)),
            _ => Err(format!("{key}: must be a non-negative integer, got {v:?}")),
        },
    }
}

/// The log file of a container: `<dir>/<ns>_<name>_<uid>/<container>/<n>.log`.
pub fn log_path(dir: &Path, ns: &str, name: &str, uid: &str, container: &str, n: i64) -> PathBuf {
    dir.join(format!("{ns}_{name}_{uid}"))
        .join(container)
        .join(format!("{n}.log"))
}

fn pod_log(
    ctx: &NodeContext,
    store: &StatusStore,
    ns: &str,
    name: &str,
    q: &BTreeMap<String, String>,
) -> ApiOutcome {
    let Some(pod) = store
        .pods()
        .into_iter()
        .find(|p| p.metadata.namespace == ns && p.metadata.name == name)
    else {
        return not_found("pods", name);
    };
    let (follow, previous, opts) = match log_query(q) {
        Ok(v) => v,
        Err(m) => return bad_request(&m),
    };
    let container = match log_container(&pod, name, q) {
        Ok(c) => c,
        Err(m) => return bad_request(&m),
    };
    let status = pod.status.as_ref().and_then(|st| {
        st.container_statuses
            .iter()
            .chain(&st.init_container_statuses)
            .find(|c| c.name == container)
    });
    let restart_count = status.map_or(0, |c| i64::from(c.restart_count));
    let n = if previous {
        if restart_count == 0 {
            return bad_request(&format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            ));
        }
        restart_count - 1
    } else {
        restart_count
    };
    let path = log_path(
        &ctx.pod_logs_dir,
        ns,
        name,
        &pod.metadata.uid,
        &container,
        n,
    );
    if !path.is_file() {
        let waiting = status
            .and_then(|c| c.state.waiting.as_ref())
            .map(|w| w.reason.clone())
            .unwrap_or_default();
        let msg = if previous {
            format!("previous terminated container \"{container}\" in pod \"{name}\" not found")
        } else if !waiting.is_empty() || status.is_none_or(|c| c.container_id.is_empty()) {
            format!(
                "container \"{container}\" in pod \"{name}\" is waiting to start: {}",
                if waiting.is_empty() {
                    "ContainerCreating"
                } else {
                    &waiting
                }
            )
        } else {
            format!("log file of container \"{container}\" in pod \"{name}\" not found")
        };
        return bad_request(&msg);
    }
    if follow && !previous {
        return ApiOutcome::Follow(LogFollow {
            path,
            opts,
            uid: pod.metadata.uid.clone(),
            container,
            restart_count: n,
        });
    }
    match std::fs::read(&path) {
        Ok(data) => ApiOutcome::text(format_log(&data, &opts)),
        Err(e) => {
            tracing::warn!(pod = %format!("{ns}/{name}"), container = %container, error = %e, "reading container log");
            fail(
                500,
                "InternalError",
                &format!("reading the log of container \"{container}\": {e}"),
                None,
            )
        }
    }
}

/// The log query's parameters: (follow, previous, how to format the log).
fn log_query(q: &BTreeMap<String, String>) -> Result<(bool, bool, LogOptions), String> {
    let follow = parse_bool(q, "follow")?;
    let previous = parse_bool(q, "previous")?;
    let timestamps = parse_bool(q, "timestamps")?;
    let tail_lines = parse_positive(q, "tailLines")?.map(|n| n as usize);
    let mut since = parse_positive(q, "sinceSeconds")?
        .map(|s| SystemTime::now() - Duration::from_secs(s.unsigned_abs()));
    if let Some(t) = q.get("sinceTime") {
        since = Some(parse_rfc3339(t).ok_or_else(|| format!("sinceTime: invalid time {t:?}"))?);
    }
    Ok((
        follow,
        previous,
        LogOptions {
            timestamps,
            tail_lines,
            since,
        },
    ))
}

/// The container whose log is asked for: `container`, or the pod's only container.
fn log_container(
    pod: &crate::api::Pod,
    name: &str,
    q: &BTreeMap<String, String>,
) -> Result<String, String> {
    let names: Vec<&str> = pod
        .spec
        .init_containers
        .iter()
        .chain(&pod.spec.containers)
        .map(|c| c.name.as_str())
        .collect();
    let container = match q.get("container").filter(|c| !c.is_empty()) {
        Some(c) => c.clone(),
        None if pod.spec.containers.len() == 1 => pod.spec.containers[0].name.clone(),
        None => {
            return Err(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                names.join(" ")
            ));
        }
    };
    if !names.contains(&container.as_str()) {
        return Err(format!("container {container} is not valid for pod {name}"));
    }
    Ok(container)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_version_is_v1_33_0_with_nanolet_as_build_metadata() {
        // semver 2.0.0 §10/§11: build metadata (after +) does not affect precedence, so
        // skew checks (a control plane comparing kubeletVersion) see v1.33.0; a pre-release
        // (-nanolet) would sort below v1.33.0.
        let plain: String = crate::VERSION
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        assert_eq!(KUBELET_VERSION, format!("v1.33.0+nanolet.{plain}"));
        assert!(!KUBELET_VERSION.contains("-nanolet"));
    }

    #[test]
    fn cri_lines_parse_and_partials_join() {
        let l = parse_cri_line(b"2026-11-22T18:46:47.123456789Z stdout F hello world").unwrap();
        assert_eq!(l.time, "2026-11-22T18:46:47.123456789Z");
        assert_eq!(l.stream, "stdout");
        assert!(!l.partial);
        assert_eq!(l.content, b"hello world");
        let l = parse_cri_line(b"2026-11-22T18:46:47Z stderr P").unwrap();
        assert!(l.partial);
        assert_eq!(l.content, b"");
        assert!(parse_cri_line(b"2026-11-22T18:46:47Z stdin F x").is_none());
        assert!(parse_cri_line(b"yesterday stdout F x").is_none());
        assert!(parse_cri_line(b"2026-11-22T18:46:47Z stdout X x").is_none());
        assert!(parse_cri_line(b"").is_none());
        // Tags with extra `:`-separated parts.
        assert!(
            parse_cri_line(b"2026-11-22T18:46:47Z stdout P:x a")
                .unwrap()
                .partial
        );

        let data = b"2026-11-22T18:00:00Z stdout F one\n\
2026-11-22T18:00:01Z stdout P tw\n\
2026-11-22T18:00:02Z stdout F o\n\
garbage\n\
2026-11-22T18:00:03Z stderr F three\n\
2026-11-22T18:00:04Z stdout F \n";
        assert_eq!(
            format_log(data, &LogOptions::default()),
            b"one\ntwo\nthree\n\n".to_vec()
        );
        let tail = LogOptions {
            tail_lines: Some(2),
            timestamps: true,
            ..Default::default()
        };
        assert_eq!(
            String::from_utf8(format_log(data, &tail)).unwrap(),
            "2026-11-22T18:00:03Z three\n2026-11-22T18:00:04Z \n"
        );
        let since = LogOptions {
            since: parse_rfc3339("2026-11-22T18:00:01Z"),
            ..Default::default()
        };
        assert_eq!(format_log(data, &since), b"two\nthree\n\n".to_vec());
        assert_eq!(
            format_log(
                data,
                &LogOptions {
                    tail_lines: Some(0),
                    ..Default::default()
                }
            ),
            b"".to_vec()
        );
    }

    /// A writer that hands each chunk to a channel.
    struct ChanWriter(std::sync::mpsc::Sender<Vec<u8>>);
    impl Write for ChanWriter {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let _ = self.0.send(b.to_vec());
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn follow_streams_growth_and_rotation_and_ends_when_the_container_stops() {
        use crate::api::{ContainerStateView, ContainerStatus, Pod, PodStatus, StateRunning};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, "2026-11-22T18:00:00Z stdout F one\n").unwrap();
        let store = Arc::new(StatusStore::new(Duration::from_secs(300)));
        let mut pod = Pod::default();
        pod.metadata.uid = "u1".into();
        pod.status = Some(PodStatus {
            container_statuses: vec![ContainerStatus {
                name: "c".into(),
                state: ContainerStateView {
                    running: Some(StateRunning::default()),
                    ..Default::default()
                },
                ..Default::default()
            }],
            ..Default::default()
        });
        store.set_pod(pod.clone());
        let follow = LogFollow {
            path: path.clone(),
            opts: LogOptions::default(),
            uid: "u1".into(),
            container: "c".into(),
            restart_count: 0,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let t = {
            let store = store.clone();
            std::thread::spawn(move || follow.stream(&store, &mut ChanWriter(tx), &|| false))
        };
        let recv = || rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(recv(), b"one\n");
        // Growth, with a line written in two parts (P then F) and in two writes.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"2026-11-22T18:00:01Z stdout P tw").unwrap();
        f.flush().unwrap();
        f.write_all(b"\n2026-11-22T18:00:02Z stdout F o\n").unwrap();
        assert_eq!(recv(), b"two\n");
        // Rotation: rename, and a new file at the path.
        std::fs::rename(&path, dir.path().join("0.log.20261122180003")).unwrap();
        std::fs::write(&path, "2026-11-22T18:00:04Z stdout F three\n").unwrap();
        assert_eq!(recv(), b"three\n");
        // The container stops: the stream ends.
        if let Some(st) = pod.status.as_mut() {
            st.container_statuses[0].state = ContainerStateView::default();
        }
        store.set_pod(pod);
        t.join().unwrap().unwrap();
    }

    #[test]
    fn human_durations_like_kubectl() {
        for (s, want) in [
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60, "3h1m"),
            (10 * 3600, "10h"),
            (50 * 3600, "2d2h"),
            (10 * 86400, "10d"),
            (800 * 86400, "2y70d"),
        ] {
            assert_eq!(human_duration(Duration::from_secs(s)), want, "{s}");
        }
    }

    fn pod_json(status: Value) -> Value {
        json!({
            "metadata": {"name": "web-node1", "namespace": "default", "creationTimestamp": "2026-11-22T18:00:00Z"},
            "spec": {"nodeName": "node1", "containers": [{"name": "a"}, {"name": "b"}]},
            "status": status,
        })
    }

    #[test]
    fn pod_table_columns() {
        let now = parse_rfc3339("2026-11-22T18:05:00Z").unwrap();
        let p = pod_json(json!({
            "phase": "Running",
            "podIP": "10.1.0.5",
            "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 0, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 3,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-11-22T18:04:30Z"}}},
            ],
        }));
        let t = pod_table(&[p], &BTreeMap::new(), now);
        assert_eq!(t["kind"], "Table");
        assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "Name",
                "Ready",
                "Status",
                "Restarts",
                "Age",
                "IP",
                "Node",
                "Nominated Node",
                "Readiness Gates"
            ]
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "web-node1",
                "1/2",
                "CrashLoopBackOff",
                "3 (30s ago)",
                "5m",
                "10.1.0.5",
                "node1",
                "<none>",
                "<none>"
            ])
        );
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["rows"][0]["object"]["metadata"]["namespace"], "default");

        // Init containers and completed pods.
        let p = pod_json(json!({
            "phase": "Pending",
            "initContainerStatuses": [{"name": "i", "restartCount": 0, "state": {"running": {}}}],
        }));
        let mut p = p;
        p["spec"]["initContainers"] = json!([{"name": "i"}]);
        assert_eq!(pod_columns(&p, now).1, "Init:0/1");
        let p = pod_json(json!({
            "phase": "Succeeded",
            "containerStatuses": [
                {"name": "a", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                {"name": "b", "restartCount": 0, "state": {"terminated": {"exitCode": 137}}},
            ],
        }));
        assert_eq!(
            pod_columns(&p, now),
            ("0/2".into(), "Completed".into(), "0".into())
        );
    }

    #[test]
    fn selectors() {
        let labels = json!({"app": "web", "tier": "fe"});
        assert!(label_selector_matches("", &labels));
        assert!(label_selector_matches("app=web", &labels));
        assert!(label_selector_matches("app==web,tier", &labels));
        assert!(!label_selector_matches("app!=web", &labels));
        assert!(label_selector_matches("!nope", &labels));
        assert!(!label_selector_matches("app=db", &labels));
        let e = json!({"involvedObject": {"name": "x", "namespace": "default", "uid": "u"}, "type": "Normal"});
        assert_eq!(
            event_field_matches("involvedObject.name=x,involvedObject.namespace=default", &e),
            Ok(true)
        );
        assert_eq!(event_field_matches("involvedObject.name=y", &e), Ok(false));
        assert_eq!(event_field_matches("type!=Warning", &e), Ok(true));
        assert!(event_field_matches("spec.x=1", &e).is_err());
        assert_eq!(
            percent_decode("involvedObject.name%3Dx%2Cy"),
            "involvedObject.name=x,y"
        );
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("%zz%"), "%zz%");
    }

    #[test]
    fn tables_are_requested_by_accept() {
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
        assert!(!wants_table(""));
    }
}
