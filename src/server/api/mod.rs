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
use std::time::SystemTime;

use serde_json::{Value, json};

use crate::events::Event;
use crate::status::StatusStore;
use crate::timeutil::{parse_rfc3339, rfc3339};

pub mod logs;
pub mod printers;

use crate::KUBELET_VERSION;
use crate::nodestatus::{NodeContext, node_object};
use logs::{LogFollow, pod_log};
use printers::{event_table, node_table, pod_table};

/// A query parameter the API refuses (400 BadRequest; the message is the Status message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    #[error("{key}: invalid boolean {value:?}")]
    Bool { key: String, value: String },
    #[error("{key}: must be a non-negative integer, got {value:?}")]
    NonNegative { key: String, value: String },
    #[error("invalid stream type {0:?}")]
    Stream(String),
    #[error("sinceTime: invalid time {0:?}")]
    SinceTime(String),
    #[error("a container name must be specified for pod {pod}, choose one of: [{choices}]")]
    ContainerRequired { pod: String, choices: String },
    #[error("container {container} is not valid for pod {pod}")]
    UnknownContainer { container: String, pod: String },
    #[error("invalid selector: {0:?}")]
    Selector(String),
    #[error("field label not supported: {0}")]
    FieldLabel(String),
}

/// An API answer.
#[derive(Debug)]
pub enum ApiOutcome {
    Response {
        status: u16,
        content_type: &'static str,
        body: Vec<u8>,
    },
    /// A container log: the server streams it (chunked; with `follow`, on its own thread).
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
        .filter_map(|p| {
            // Go's url.ParseQuery drops a pair whose key or value does not unescape.
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Some((query_unescape(k)?, query_unescape(v)?))
        })
        .collect()
}

/// Decodes a URL query component (`+` is a space, `%XX` a byte); a malformed `%` (not followed
/// by two hex digits) stays as it is. Paths use this; query parameters [`query_unescape`].
pub fn percent_decode(s: &str) -> String {
    unescape(s, true).unwrap_or_else(|bad| bad)
}

/// Go's `url.QueryUnescape`: `+` is a space, `%XX` a byte where X is a hex digit; `None` for a
/// `%` not followed by two hex digits (`"%+1"`, `"%2"`, `"%zz"`), which Go refuses (its `ishex`;
/// `u8::from_str_radix` alone would read `"+1"` as 1).
pub fn query_unescape(s: &str) -> Option<String> {
    unescape(s, false).ok()
}

/// Decodes `s`; a malformed escape is kept (`Err` of the lenient text) or refused.
fn unescape(s: &str, keep_malformed: bool) -> Result<String, String> {
    let hex = |c: u8| char::from(c).to_digit(16);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut malformed = false;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => match (
                b.get(i + 1).and_then(|c| hex(*c)),
                b.get(i + 2).and_then(|c| hex(*c)),
            ) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => {
                    malformed = true;
                    if !keep_malformed {
                        return Err(String::new());
                    }
                    out.push(b'%');
                }
            },
            c => out.push(c),
        }
        i += 1;
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    if malformed { Err(text) } else { Ok(text) }
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

/// `fieldSelector` on events: `involvedObject.{kind,name,namespace,uid,fieldPath}`, `type`,
/// `reason`, `metadata.namespace`, `metadata.name`, with `=`, `==` or `!=`.
fn event_field_matches(selector: &str, e: &Value) -> Result<bool, QueryError> {
    for req in selector.split(',').map(str::trim).filter(|r| !r.is_empty()) {
        let (key, want, negate) = if let Some((k, v)) = req.split_once("!=") {
            (k, v, true)
        } else if let Some((k, v)) = req.split_once("==").or_else(|| req.split_once('=')) {
            (k, v, false)
        } else {
            return Err(QueryError::Selector(req.into()));
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
                return Err(QueryError::FieldLabel(other.into()));
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
        // Node events live in `default`, as on the API server.
        if ns.is_some_and(|n| e.object.event_namespace() != n) {
            continue;
        }
        let v = Event::to_json(&e, &ctx.node_name);
        match event_field_matches(selector, &v) {
            Ok(true) => items.push(v),
            Ok(false) => {}
            Err(e) => return bad_request(&e.to_string()),
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

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Go's url.QueryUnescape takes `%` with two hex digits only (`ishex`): "%+1" is an error,
    /// not 0x01 (`u8::from_str_radix` accepts a sign); url.ParseQuery drops such a pair.
    #[test]
    fn query_unescape_is_go_strict_about_escapes() {
        assert_eq!(query_unescape("a%2Bb+c").as_deref(), Some("a+b c"));
        for bad in ["%+1", "%-1", "%2", "%", "%zz", "a%+1b"] {
            assert_eq!(query_unescape(bad), None, "{bad:?}");
        }
        assert_eq!(percent_decode("%+1"), "% 1", "kept, not 0x01");
        let q = query_params("a=%+1&b=2&%+1=c");
        assert_eq!(q.len(), 1, "{q:?}");
        assert_eq!(q.get("b").map(String::as_str), Some("2"));
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
