//! A Kubernetes API server test double (in memory; plain HTTP with `start`, HTTPS with
//! `start_tls`) that speaks the real REST and watch wire format for what nanolet (API-server
//! mode) and kubectl use. Its fidelity is checked against the real `kubectl` in
//! tests/integration/kubectl.rs.
//!
//! What it implements, as kube-apiserver does:
//! - Objects: pods, pods/status, nodes, nodes/status, namespaces, events, services (core v1;
//!   services' defaults, ClusterIP allocation and printer in `services.rs`), leases
//!   (coordination.k8s.io/v1). The server sets `uid`, `creationTimestamp` (wall clock),
//!   `resourceVersion` (one global counter, as etcd's revision), `kind`/`apiVersion`; keeps
//!   `ownerReferences`; `generateName`; create with an existing name -> 409 AlreadyExists; a
//!   namespaced create in a missing namespace -> 404 (default, kube-system, kube-public and
//!   kube-node-lease exist). Pods get the defaults the apiserver sets (restartPolicy,
//!   terminationGracePeriodSeconds 30, dnsPolicy, schedulerName, imagePullPolicy,
//!   terminationMessagePath/Policy, status.phase Pending, status.qosClass as `ComputePodQOS`)
//!   and a pod update may only change `spec.containers[*].image` (and metadata): anything else
//!   is 422 Invalid; a `/status` write changing `qosClass` is 422 (immutable).
//! - Update (PUT) with a stale `metadata.resourceVersion` -> 409 Conflict (an empty one is an
//!   unconditional update); the main resource ignores `status`, `/status` takes only `status`.
//! - PATCH: `application/merge-patch+json` (RFC 7386) and `application/strategic-merge-patch+json`
//!   (lists merged by their upstream `patchMergeKey`: containers/volumes/env by `name`, ports by
//!   `containerPort`, volumeMounts by `mountPath`, conditions by `type`, podIPs/hostIPs by
//!   `ip`, ownerReferences by `uid`; lists without a merge key, e.g. `status.containerStatuses`
//!   (`listType=atomic` upstream), are replaced; directives `$patch: delete|replace`,
//!   `$setElementOrder/<list>`, `$retainKeys`, `$deleteFromPrimitiveList/<list>`). A patch that
//!   changes nothing writes nothing (no new resourceVersion, no event), as etcd's
//!   GuaranteedUpdate. Other patch types -> 415.
//! - DELETE with `DeleteOptions` (body) or `?gracePeriodSeconds=`: a pod bound to a node with a
//!   grace period > 0 gets `deletionTimestamp` (now + grace) and `deletionGracePeriodSeconds`
//!   and stays (MODIFIED event, 200 with the pod); a later delete may only shorten the grace;
//!   grace 0, an unbound pod or a Succeeded/Failed one is removed (DELETED event, 200 with the
//!   pod). Default grace = spec.terminationGracePeriodSeconds. `preconditions.uid` /
//!   `preconditions.resourceVersion` mismatch -> 409 Conflict "Precondition failed: ...".
//!   Other kinds are removed at once and answer a `Status` Success.
//! - List and watch with `fieldSelector` (metadata.name, metadata.namespace, spec.nodeName,
//!   status.phase; events' involvedObject.*, reason, type, source; `=`, `==`, `!=`) and
//!   `labelSelector` (`=`, `==`, `!=`, `in`, `notin`, exists, `!key`). Watch (`watch=true|1`): resourceVersion unset or "0" -> synthetic ADDED
//!   events for the current objects, then live; RV -> every event after RV; an object leaving
//!   the selector is a DELETED event, one entering it an ADDED event (the watch cache's rule);
//!   `allowWatchBookmarks=true` -> BOOKMARK events every `set_bookmark_interval` (default 60 s)
//!   and on `send_bookmarks()`; a resourceVersion older than the last compaction
//!   (`expire_watches()`) -> an `ERROR` event with a 410 Expired `Status`; `timeoutSeconds`
//!   ends the stream (default 1800 s).
//! - kubectl: /version, legacy discovery (/api, /api/v1, /apis, /apis/coordination.k8s.io[/v1];
//!   aggregated discovery is not served, the plain JSON answer makes kubectl fall back, as
//!   against an older server), no OpenAPI (404: kubectl apply falls back to its compiled-in
//!   patch metadata), server-side `Table`s (`Accept: ...;as=Table;g=meta.k8s.io;v=v1`) with the
//!   apiserver printers' columns for pods, nodes, leases and namespaces, also on watches.
//! - `Status` objects for errors (`reason`, `code`, `details`), 401 without credentials;
//!   `set_down(true)` answers 503 to everything (an outage without closing the port);
//!   `refuse(method, path, code, ...)` answers one request with a refusal (fault injection).
//! - Node `status.capacity`/`allocatable` quantities stored in canonical form (`4096Mi` comes
//!   back as `4Gi`), as resource.Quantity serializes them.
//! - Real TLS (`start_tls`, `front.rs`, certificates made by the openssl CLI in `pki.rs`) and
//!   the union authenticator: client certificate (CN user, O groups; one from another CA is a
//!   401, not a handshake failure), bearer tokens (`add_token`), bootstrap tokens
//!   (`add_bootstrap_token` -> system:bootstrap:<id>, system:bootstrappers), anonymous only
//!   when allowed; every authenticated user is in system:authenticated.
//! - certificates.k8s.io/v1 CertificateSigningRequests (`csr.rs`): create with the requester
//!   written into spec.username/groups/uid, get/list/watch/delete, `/approval`, `/status`,
//!   kubectl's protobuf approval bodies; kube-controller-manager's signer for the two kubelet
//!   signers (its validation, backdating and TTL rules; `openssl ca`) and an optional
//!   auto-approver; the printer's Table columns.
//! - TokenReview and SubjectAccessReview from tables the test sets, recorded;
//!   SelfSubjectReview (`kubectl auth whoami`).
//! - The node proxy subresources (`proxy.rs`, `start_tls` only): pods/log, exec, attach,
//!   portforward and nodes/NAME/proxy to the kubelet URL kube-apiserver builds, dialled with
//!   the kubelet-client certificate, upgrade-aware and streaming. WebSocket exec/attach/
//!   portforward upgrades are refused (kubectl falls back to SPDY) unless
//!   `websocket_passthrough(true)`: kube-apiserver >= 1.30 translates them to SPDY itself.
//!
//! Deliberately not implemented: admission plugins (ServiceAccount token volumes,
//! DefaultTolerationSeconds, LimitRanger), finalizers, server-side apply, JSON patch
//! (RFC 6902), protobuf (other than CSR approval/status bodies), pagination (`limit` is
//! ignored: everything fits in one page), other resources, field validation, authorization
//! of the double's own requests (any authenticated user may do anything; proxied requests
//! are authenticated only), the approver's SubjectAccessReview, the other
//! authorization.k8s.io reviews.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::pki::{Ca, CertFiles};
use crate::tls::Peer;

mod csr;
mod objects;
mod proxy;
mod services;

pub use csr::{CLIENT_KUBELET, KUBELET_SERVING, UserInfo, base64_decode, base64_encode};
pub use objects::DEFAULT_AUDIENCE;
pub use services::KUBERNETES_SERVICE_IP;

/// One request the double received.
#[derive(Clone, Debug)]
pub struct SeenRequest {
    pub method: String,
    pub path: String,
    /// The raw query string (percent-encoded), without `?`.
    pub query: String,
    pub body: String,
    pub content_type: String,
    pub accept: String,
    /// The authenticated user's name ("" when the request was refused with 401).
    pub user: String,
    /// When it arrived, and (set once answered) how long its answer took to write; for a
    /// watch, the lines its body has handed to tiny_http so far (node proxy requests relayed
    /// by the HTTPS front record no answer). What a failing test prints
    /// (see [`FakeApiServer`]'s `Drop`) to tell a request never answered from one answered.
    pub received: Instant,
    pub answered: Arc<Mutex<Option<Duration>>>,
    pub watch_lines: Arc<std::sync::atomic::AtomicUsize>,
}

impl SeenRequest {
    /// A query parameter, percent-decoded.
    pub fn param(&self, key: &str) -> Option<String> {
        query_param(&self.query, key)
    }

    /// The body as JSON (Null when empty or not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

fn query_param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (nanolet::server::api::percent_decode(k) == key)
            .then(|| nanolet::server::api::percent_decode(v))
    })
}

/// RFC 3339 (seconds, UTC) of a Unix time.
pub fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86400);
    let sod = secs.rem_euclid(86400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

/// Unix time of an RFC 3339 `YYYY-MM-DDTHH:MM:SSZ`.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let n = |r: std::ops::Range<usize>| s.get(r).and_then(|x| x.parse::<i64>().ok());
    let (y, m, d) = (n(0..4)?, n(5..7)?, n(8..10)?);
    let (hh, mm, ss) = (n(11..13)?, n(14..16)?, n(17..19)?);
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86400 + hh * 3600 + mm * 60 + ss)
}

pub(crate) fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// apimachinery's `duration.HumanDuration`, as the printers' AGE column.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    let m = s / 60;
    let h = s / 3600;
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        if h % 24 == 0 {
            format!("{}d", h / 24)
        } else {
            format!("{}d{}h", h / 24, h % 24)
        }
    } else if h < 24 * 365 * 2 {
        format!("{}d", h / 24)
    } else {
        format!("{}y", h / 24 / 365)
    }
}

/// What the double knows about a resource: kind, apiVersion, namespaced.
fn resource_info(prefix: &str, resource: &str) -> Option<(&'static str, &'static str, bool)> {
    match (prefix, resource) {
        ("/api/v1", "pods") => Some(("Pod", "v1", true)),
        ("/api/v1", "nodes") => Some(("Node", "v1", false)),
        ("/api/v1", "namespaces") => Some(("Namespace", "v1", false)),
        ("/api/v1", "events") => Some(("Event", "v1", true)),
        ("/api/v1", "services") => Some(("Service", "v1", true)),
        ("/apis/coordination.k8s.io/v1", "leases") => {
            Some(("Lease", "coordination.k8s.io/v1", true))
        }
        ("/apis/certificates.k8s.io/v1", "certificatesigningrequests") => {
            Some(("CertificateSigningRequest", "certificates.k8s.io/v1", false))
        }
        _ => objects::resource_info(prefix, resource),
    }
}

/// A parsed resource path.
#[derive(Clone, Debug)]
struct Res {
    prefix: String,
    ns: Option<String>,
    resource: String,
    name: Option<String>,
    sub: Option<String>,
}

impl Res {
    fn parse(path: &str) -> Option<Res> {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (prefix, rest) = match segs.as_slice() {
            ["api", "v1", rest @ ..] => ("/api/v1".to_string(), rest),
            ["apis", g, v, rest @ ..] => (format!("/apis/{g}/{v}"), rest),
            _ => return None,
        };
        let s = |i: usize| rest.get(i).map(|x| x.to_string());
        let r = match rest {
            ["namespaces", _, _, ..] => Res {
                prefix,
                ns: s(1),
                resource: s(2)?,
                name: s(3),
                sub: s(4),
            },
            [_, ..] => Res {
                prefix,
                ns: None,
                resource: s(0)?,
                name: s(1),
                sub: s(2),
            },
            [] => return None,
        };
        if rest.len() > 5 || r.name.as_deref() == Some("") {
            return None;
        }
        Some(r)
    }

    fn info(&self) -> Option<(&'static str, &'static str, bool)> {
        resource_info(&self.prefix, &self.resource)
    }

    fn collection(&self) -> String {
        match &self.ns {
            Some(ns) => format!("{}/namespaces/{ns}/{}", self.prefix, self.resource),
            None => format!("{}/{}", self.prefix, self.resource),
        }
    }

    fn key(&self, name: &str) -> String {
        format!("{}/{name}", self.collection())
    }
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

fn status_for(code: u16, reason: &str, message: &str, resource: &str, name: &str) -> (u16, Value) {
    let (c, mut v) = status(code, reason, message);
    v["details"] = json!({"name": name, "kind": resource});
    (c, v)
}

fn not_found(resource: &str, name: &str) -> (u16, Value) {
    status_for(
        404,
        "NotFound",
        &format!("{resource} \"{name}\" not found"),
        resource,
        name,
    )
}

fn conflict(resource: &str, name: &str, why: &str) -> (u16, Value) {
    status_for(
        409,
        "Conflict",
        &format!("Operation cannot be fulfilled on {resource} \"{name}\": {why}"),
        resource,
        name,
    )
}

const STALE: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            if let Value::Object(t) = target {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// The upstream `patchMergeKey` of a list, by its field path (list indices left out).
fn merge_key(path: &str) -> Option<&'static str> {
    let last = path.rsplit('.').next().unwrap_or(path);
    match path {
        "spec.containers" | "spec.initContainers" | "spec.ephemeralContainers" => Some("name"),
        "spec.volumes" | "spec.imagePullSecrets" => Some("name"),
        "spec.hostAliases" | "status.podIPs" | "status.hostIPs" => Some("ip"),
        "status.conditions" | "status.addresses" => Some("type"),
        "metadata.ownerReferences" => Some("uid"),
        _ if path.starts_with("spec.containers.")
            || path.starts_with("spec.initContainers.")
            || path.starts_with("spec.ephemeralContainers.") =>
        {
            match last {
                "env" => Some("name"),
                "ports" => Some("containerPort"),
                "volumeMounts" => Some("mountPath"),
                "volumeDevices" => Some("devicePath"),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Removes strategic-merge directives (`$...` keys) from a value being inserted.
fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

/// Strategic merge patch (the subset described in the module docs). `path` is the dotted
/// field path of `target` ("" at the top).
pub fn strategic_merge_patch(target: &mut Value, patch: &Value, path: &str) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        *target = strip_directives(patch);
        return;
    }
    if !target.is_object() {
        *target = json!({});
    }
    let Value::Object(t) = target else { return };
    let mut orders = Vec::new();
    for (k, v) in p {
        if let Some(list) = k.strip_prefix("$setElementOrder/") {
            orders.push((list.to_string(), v.clone()));
            continue;
        }
        if let Some(list) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(cur)), Value::Array(del)) = (t.get_mut(list), v) {
                cur.retain(|x| !del.contains(x));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        let sub = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        match v {
            Value::Null => {
                t.remove(k);
            }
            Value::Object(_) => {
                let slot = t.entry(k.clone()).or_insert(Value::Null);
                if v.get("$patch").and_then(Value::as_str) == Some("delete") {
                    t.remove(k);
                } else {
                    strategic_merge_patch(slot, v, &sub);
                }
            }
            Value::Array(items) => match merge_key(&sub) {
                Some(key) => {
                    let slot = t.entry(k.clone()).or_insert(json!([]));
                    if !slot.is_array() {
                        *slot = json!([]);
                    }
                    merge_list(slot, items, key, &sub);
                }
                None if sub == "metadata.finalizers" => {
                    let slot = t.entry(k.clone()).or_insert(json!([]));
                    if let Value::Array(cur) = slot {
                        for x in items {
                            if !cur.contains(x) {
                                cur.push(x.clone());
                            }
                        }
                    }
                }
                None => {
                    t.insert(k.clone(), strip_directives(v));
                }
            },
            other => {
                t.insert(k.clone(), other.clone());
            }
        }
    }
    if let Some(Value::Array(keep)) = p.get("$retainKeys") {
        t.retain(|k, _| keep.iter().any(|x| x.as_str() == Some(k)));
    }
    for (list, order) in orders {
        let sub = if path.is_empty() {
            list.clone()
        } else {
            format!("{path}.{list}")
        };
        let (Some(key), Some(Value::Array(cur)), Value::Array(order)) =
            (merge_key(&sub), t.get_mut(&list), order)
        else {
            continue;
        };
        let pos = |e: &Value| {
            order
                .iter()
                .position(|o| o.get(key) == e.get(key))
                .unwrap_or(usize::MAX)
        };
        cur.sort_by_key(|e| pos(e));
    }
}

fn merge_list(target: &mut Value, items: &[Value], key: &str, path: &str) {
    let Value::Array(cur) = target else { return };
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *cur = items
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .map(strip_directives)
            .collect();
        return;
    }
    for item in items {
        let Some(k) = item.get(key) else {
            cur.push(strip_directives(item));
            continue;
        };
        let existing = cur.iter().position(|e| e.get(key) == Some(k));
        if item.get("$patch").and_then(Value::as_str) == Some("delete") {
            cur.retain(|e| e.get(key) != Some(k));
            continue;
        }
        match existing {
            Some(i) => strategic_merge_patch(&mut cur[i], item, path),
            None => cur.push(strip_directives(item)),
        }
    }
}

/// One requirement of a field or label selector.
#[derive(Clone, Debug)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// Splits on commas outside parentheses.
fn split_top(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0);
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn parse_selector(s: &str, labels: bool) -> Result<Vec<Req>, String> {
    let mut reqs = Vec::new();
    for part in split_top(s) {
        let set = |rest: &str| -> Result<Vec<String>, String> {
            let rest = rest.trim();
            let inner = rest
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(|| format!("unable to parse requirement: {part}"))?;
            Ok(inner.split(',').map(|v| v.trim().to_string()).collect())
        };
        let r = if let Some((k, v)) = part.split_once("!=") {
            Req::Ne(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = part.split_once("==") {
            Req::Eq(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = part.split_once('=') {
            Req::Eq(k.trim().into(), v.trim().into())
        } else if !labels {
            return Err(format!(
                "invalid selector: '{s}'; can't understand '{part}'"
            ));
        } else if let Some((k, v)) = part.split_once(" notin ") {
            Req::NotIn(k.trim().into(), set(v)?)
        } else if let Some((k, v)) = part.split_once(" in ") {
            Req::In(k.trim().into(), set(v)?)
        } else if let Some(k) = part.strip_prefix('!') {
            Req::NotExists(k.trim().into())
        } else {
            Req::Exists(part.clone())
        };
        reqs.push(r);
    }
    Ok(reqs)
}

fn field_value(obj: &Value, field: &str) -> Option<String> {
    let v = match field {
        "metadata.name" => &obj["metadata"]["name"],
        "metadata.namespace" => &obj["metadata"]["namespace"],
        "spec.nodeName" => &obj["spec"]["nodeName"],
        "status.phase" => &obj["status"]["phase"],
        // Events (pkg/apis/core/v1 conversion: the event field label set).
        "involvedObject.kind"
        | "involvedObject.namespace"
        | "involvedObject.name"
        | "involvedObject.uid"
        | "involvedObject.apiVersion"
        | "involvedObject.resourceVersion"
        | "involvedObject.fieldPath" => {
            let k = field.trim_start_matches("involvedObject.");
            &obj["involvedObject"][k]
        }
        "reason" | "type" | "reportingComponent" => &obj[field],
        "source" => &obj["source"]["component"],
        "spec.unschedulable" => {
            return Some(
                obj["spec"]["unschedulable"]
                    .as_bool()
                    .unwrap_or(false)
                    .to_string(),
            );
        }
        _ => return None,
    };
    Some(v.as_str().unwrap_or("").to_string())
}

fn req_matches(r: &Req, get: &dyn Fn(&str) -> Option<String>) -> bool {
    match r {
        Req::Eq(k, v) => get(k).as_deref() == Some(v.as_str()),
        Req::Ne(k, v) => get(k).as_deref() != Some(v.as_str()),
        Req::In(k, vs) => get(k).is_some_and(|x| vs.contains(&x)),
        Req::NotIn(k, vs) => !get(k).is_some_and(|x| vs.contains(&x)),
        Req::Exists(k) => get(k).is_some(),
        Req::NotExists(k) => get(k).is_none(),
    }
}

/// Which objects a list or watch selects.
#[derive(Clone, Debug)]
struct Filter {
    prefix: String,
    resource: String,
    ns: Option<String>,
    fields: Vec<Req>,
    labels: Vec<Req>,
}

impl Filter {
    fn new(res: &Res, query: &str) -> Result<Filter, (u16, Value)> {
        let fields = match query_param(query, "fieldSelector") {
            Some(s) => parse_selector(&s, false).map_err(|e| status(400, "BadRequest", &e))?,
            None => vec![],
        };
        for f in &fields {
            let (Req::Eq(k, _) | Req::Ne(k, _)) = f else {
                continue;
            };
            if field_value(&json!({}), k).is_none() {
                return Err(status(
                    400,
                    "BadRequest",
                    &format!("field label not supported: {k}"),
                ));
            }
        }
        let labels = match query_param(query, "labelSelector") {
            Some(s) => parse_selector(&s, true).map_err(|e| status(400, "BadRequest", &e))?,
            None => vec![],
        };
        Ok(Filter {
            prefix: res.prefix.clone(),
            resource: res.resource.clone(),
            ns: res.ns.clone(),
            fields,
            labels,
        })
    }

    fn matches(&self, key: &str, obj: &Value) -> bool {
        let Some(r) = Res::parse(key) else {
            return false;
        };
        if r.prefix != self.prefix || r.resource != self.resource || r.sub.is_some() {
            return false;
        }
        if self.ns.is_some() && r.ns != self.ns {
            return false;
        }
        let f = |k: &str| field_value(obj, k);
        let l = |k: &str| obj["metadata"]["labels"][k].as_str().map(String::from);
        self.fields.iter().all(|r| req_matches(r, &f))
            && self.labels.iter().all(|r| req_matches(r, &l))
    }
}

/// An object change, as the watch cache keeps it.
#[derive(Clone)]
struct Event {
    rv: u64,
    kind: &'static str,
    key: String,
    prev: Option<Value>,
    obj: Value,
}

struct Watcher {
    tx: Sender<String>,
    filter: Filter,
    table: Option<TableOpts>,
    bookmarks: bool,
    kind: &'static str,
    api_version: &'static str,
}

#[derive(Clone, Copy, Debug)]
struct TableOpts {
    /// `includeObject=Object` (else `Metadata`; `None` leaves it out).
    include: Include,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Include {
    None,
    Metadata,
    Object,
}

impl Watcher {
    /// The watch line for `ev`, if this watch sees it (the watch cache's rule: an object
    /// leaving the selector is DELETED with its previous content, one entering it ADDED).
    fn line(&self, ev: &Event) -> Option<String> {
        let now = self.filter.matches(&ev.key, &ev.obj);
        let before = ev
            .prev
            .as_ref()
            .is_some_and(|p| self.filter.matches(&ev.key, p));
        let (kind, obj) = match ev.kind {
            "ADDED" if now => ("ADDED", ev.obj.clone()),
            "MODIFIED" if now && before => ("MODIFIED", ev.obj.clone()),
            "MODIFIED" if now => ("ADDED", ev.obj.clone()),
            "MODIFIED" if before => {
                let mut p = ev.prev.clone().unwrap_or_default();
                p["metadata"]["resourceVersion"] = json!(ev.rv.to_string());
                ("DELETED", p)
            }
            "DELETED" if now => ("DELETED", ev.obj.clone()),
            _ => return None,
        };
        let obj = match self.table {
            Some(t) => to_table(&self.filter.resource, &[obj], ev.rv, t),
            None => obj,
        };
        Some(json!({"type": kind, "object": obj}).to_string())
    }

    fn bookmark(&self, rv: u64) -> String {
        json!({"type": "BOOKMARK", "object": {"kind": self.kind, "apiVersion": self.api_version,
               "metadata": {"resourceVersion": rv.to_string()}}})
        .to_string()
    }
}

/// The apiserver's printer for a pod's STATUS column (pkg/printers/internalversion printPod):
/// status.reason or the phase, overridden by a container's waiting/terminated reason, and
/// "Terminating" once deletionTimestamp is set.
fn pod_row(p: &Value) -> (Vec<Value>, Vec<Value>) {
    let total = p["spec"]["containers"].as_array().map_or(0, Vec::len);
    let mut reason = p["status"]["phase"].as_str().unwrap_or("").to_string();
    if let Some(r) = p["status"]["reason"].as_str().filter(|r| !r.is_empty()) {
        reason = r.to_string();
    }
    let (mut ready, mut restarts, mut running) = (0, 0i64, false);
    let statuses = p["status"]["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for c in statuses.iter().rev() {
        restarts += c["restartCount"].as_i64().unwrap_or(0);
        let st = &c["state"];
        if let Some(r) = st["waiting"]["reason"].as_str().filter(|r| !r.is_empty()) {
            reason = r.to_string();
        } else if let Some(r) = st["terminated"]["reason"]
            .as_str()
            .filter(|r| !r.is_empty())
        {
            reason = r.to_string();
        } else if st["terminated"].is_object() {
            reason = match st["terminated"]["signal"].as_i64().unwrap_or(0) {
                0 => format!(
                    "ExitCode:{}",
                    st["terminated"]["exitCode"].as_i64().unwrap_or(0)
                ),
                s => format!("Signal:{s}"),
            };
        } else if c["ready"].as_bool() == Some(true) && st["running"].is_object() {
            running = true;
            ready += 1;
        }
    }
    if reason == "Completed" && running {
        let pod_ready = p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        reason = if pod_ready { "Running" } else { "NotReady" }.into();
    }
    if p["metadata"]["deletionTimestamp"].is_string() {
        reason = if p["status"]["reason"] == "NodeLost" {
            "Unknown"
        } else {
            "Terminating"
        }
        .into();
    }
    let none = |v: &Value| json!(v.as_str().filter(|s| !s.is_empty()).unwrap_or("<none>"));
    (
        vec![
            json!({"name": "Name", "type": "string", "format": "name", "priority": 0}),
            json!({"name": "Ready", "type": "string", "format": "", "priority": 0}),
            json!({"name": "Status", "type": "string", "format": "", "priority": 0}),
            json!({"name": "Restarts", "type": "string", "format": "", "priority": 0}),
            json!({"name": "Age", "type": "string", "format": "", "priority": 0}),
            json!({"name": "IP", "type": "string", "format": "", "priority": 1}),
            json!({"name": "Node", "type": "string", "format": "", "priority": 1}),
            json!({"name": "Nominated Node", "type": "string", "format": "", "priority": 1}),
            json!({"name": "Readiness Gates", "type": "string", "format": "", "priority": 1}),
        ],
        vec![
            p["metadata"]["name"].clone(),
            json!(format!("{ready}/{total}")),
            json!(reason),
            json!(restarts),
            json!(age(p)),
            none(&p["status"]["podIP"]),
            none(&p["spec"]["nodeName"]),
            none(&p["status"]["nominatedNodeName"]),
            json!("<none>"),
        ],
    )
}

fn age(o: &Value) -> String {
    match o["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(parse_rfc3339)
    {
        Some(t) => human_duration(now_secs() - t),
        None => "<unknown>".into(),
    }
}

/// printNode: STATUS from the Ready condition (+ SchedulingDisabled), ROLES from the
/// node-role.kubernetes.io/* and kubernetes.io/role labels.
fn node_row(n: &Value) -> (Vec<Value>, Vec<Value>) {
    let ready = n["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .map(|c| match c["status"].as_str() {
            Some("True") => "Ready",
            Some("False") => "NotReady",
            _ => "Unknown",
        })
        .unwrap_or("Unknown");
    let mut st = ready.to_string();
    if n["spec"]["unschedulable"].as_bool() == Some(true) {
        st.push_str(",SchedulingDisabled");
    }
    let mut roles: Vec<String> = n["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            if let Some(r) = k.strip_prefix("node-role.kubernetes.io/") {
                Some(r.to_string())
            } else if k == "kubernetes.io/role" {
                v.as_str().map(String::from)
            } else {
                None
            }
        })
        .filter(|r| !r.is_empty())
        .collect();
    roles.sort();
    roles.dedup();
    let roles = if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.join(",")
    };
    let addr = |t: &str| {
        n["status"]["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["type"] == t)
            .and_then(|a| a["address"].as_str())
            .unwrap_or("<none>")
            .to_string()
    };
    let info = &n["status"]["nodeInfo"];
    let s = |v: &Value| json!(v.as_str().unwrap_or(""));
    (
        vec![
            json!({"name": "Name", "type": "string", "format": "name", "priority": 0}),
            json!({"name": "Status", "type": "string", "format": "", "priority": 0}),
            json!({"name": "Roles", "type": "string", "format": "", "priority": 0}),
            json!({"name": "Age", "type": "string", "format": "", "priority": 0}),
            json!({"name": "Version", "type": "string", "format": "", "priority": 0}),
            json!({"name": "Internal-IP", "type": "string", "format": "", "priority": 1}),
            json!({"name": "External-IP", "type": "string", "format": "", "priority": 1}),
            json!({"name": "OS-Image", "type": "string", "format": "", "priority": 1}),
            json!({"name": "Kernel-Version", "type": "string", "format": "", "priority": 1}),
            json!({"name": "Container-Runtime", "type": "string", "format": "", "priority": 1}),
        ],
        vec![
            n["metadata"]["name"].clone(),
            json!(st),
            json!(roles),
            json!(age(n)),
            s(&info["kubeletVersion"]),
            json!(addr("InternalIP")),
            json!(addr("ExternalIP")),
            s(&info["osImage"]),
            s(&info["kernelVersion"]),
            s(&info["containerRuntimeVersion"]),
        ],
    )
}

fn generic_row(resource: &str, o: &Value) -> (Vec<Value>, Vec<Value>) {
    let mut cols = vec![json!({"name": "Name", "type": "string", "format": "name", "priority": 0})];
    let mut cells = vec![o["metadata"]["name"].clone()];
    match resource {
        // printLease: NAME HOLDER AGE.
        "leases" => {
            cols.push(json!({"name": "Holder", "type": "string", "format": "", "priority": 0}));
            cells.push(json!(o["spec"]["holderIdentity"].as_str().unwrap_or("")));
        }
        // printNamespace: NAME STATUS AGE.
        "namespaces" => {
            cols.push(json!({"name": "Status", "type": "string", "format": "", "priority": 0}));
            cells.push(json!(o["status"]["phase"].as_str().unwrap_or("")));
        }
        _ => {}
    }
    cols.push(json!({"name": "Age", "type": "string", "format": "", "priority": 0}));
    cells.push(json!(age(o)));
    (cols, cells)
}

/// A meta.k8s.io/v1 Table of `objs`, as the apiserver answers
/// `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`.
fn to_table(resource: &str, objs: &[Value], rv: u64, opts: TableOpts) -> Value {
    let mut cols = Vec::new();
    let mut rows = Vec::new();
    for o in objs {
        let (c, cells) = match resource {
            "pods" => pod_row(o),
            "nodes" => node_row(o),
            "certificatesigningrequests" => csr::csr_row(o),
            "services" => services::service_row(o),
            _ => generic_row(resource, o),
        };
        cols = c;
        let mut row = json!({"cells": cells});
        match opts.include {
            Include::Object => row["object"] = o.clone(),
            Include::Metadata => {
                row["object"] = json!({"kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"].clone()});
            }
            Include::None => {}
        }
        rows.push(row);
    }
    if cols.is_empty() {
        cols = match resource {
            "pods" => pod_row(&json!({})).0,
            "nodes" => node_row(&json!({})).0,
            "certificatesigningrequests" => csr::csr_row(&json!({})).0,
            "services" => services::service_row(&json!({})).0,
            _ => generic_row(resource, &json!({})).0,
        };
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1",
           "metadata": {"resourceVersion": rv.to_string()},
           "columnDefinitions": cols, "rows": rows})
}

fn wants_table(accept: &str, query: &str) -> Option<TableOpts> {
    if !accept.split(',').next().unwrap_or("").contains("as=Table") {
        return None;
    }
    let include = match query_param(query, "includeObject").as_deref() {
        Some("None") => Include::None,
        Some("Object") => Include::Object,
        _ => Include::Metadata,
    };
    Some(TableOpts { include })
}

/// The pod defaults the apiserver sets on create (pkg/apis/core/v1/defaults.go).
fn default_pod(pod: &mut Value) {
    let spec = &mut pod["spec"];
    for (k, v) in [
        ("restartPolicy", json!("Always")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("securityContext", json!({})),
        ("enableServiceLinks", json!(true)),
    ] {
        if spec.get(k).is_none_or(Value::is_null) {
            spec[k] = v;
        }
    }
    for list in ["initContainers", "containers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs {
                let image = c["image"].as_str().unwrap_or("").to_string();
                let tag = image
                    .rsplit('/')
                    .next()
                    .and_then(|last| last.split_once(':'))
                    .map(|(_, t)| t.to_string());
                let policy = if image.contains('@') || tag.as_deref().is_some_and(|t| t != "latest")
                {
                    "IfNotPresent"
                } else {
                    "Always"
                };
                for (k, v) in [
                    ("imagePullPolicy", json!(policy)),
                    ("terminationMessagePath", json!("/dev/termination-log")),
                    ("terminationMessagePolicy", json!("File")),
                    ("resources", json!({})),
                ] {
                    if c.get(k).is_none_or(Value::is_null) {
                        c[k] = v;
                    }
                }
            }
        }
    }
    if pod["status"]["phase"].as_str().is_none() {
        pod["status"] = json!({"phase": "Pending"});
    }
    // podStrategy.PrepareForCreate: status.qosClass = ComputePodQOS(pod).
    if pod["status"]["qosClass"].as_str().is_none_or(str::is_empty) {
        pod["status"]["qosClass"] = json!(compute_pod_qos(pod));
    }
}

/// A quantity in its canonical form, as resource.Quantity's `String()` writes it back (what
/// the API server stores): a binary-suffixed value with the largest power-of-1024 suffix that
/// divides it exactly (below 1024: plain), any other with the largest decimal suffix (`m`, ``,
/// `k`, `M`, `G`, `T`, `P`, `E`) that keeps it an integer. `None` for what this cannot parse
/// (left as sent).
fn canonical_quantity(q: &str) -> Option<String> {
    let binary = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
        .iter()
        .any(|s| q.ends_with(s));
    let m = milli(&json!(q))?;
    if m == 0 {
        return Some("0".into());
    }
    if binary && m % 1000 == 0 && (m / 1000).abs() >= 1024 {
        let (mut n, mut suffix) = (m / 1000, "");
        for s in ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"] {
            if n % 1024 != 0 {
                break;
            }
            n /= 1024;
            suffix = s;
        }
        return Some(format!("{n}{suffix}"));
    }
    let (mut n, mut suffix) = (m, "m");
    for s in ["", "k", "M", "G", "T", "P", "E"] {
        if n % 1000 != 0 {
            break;
        }
        n /= 1000;
        suffix = s;
    }
    Some(format!("{n}{suffix}"))
}

/// A Node's `status.capacity` and `status.allocatable` are stored canonical (a kubelet that
/// compares what it reads back with what it sent must compare by value).
fn canonical_node_quantities(resource: &str, obj: &mut Value) {
    if resource != "nodes" {
        return;
    }
    for list in ["capacity", "allocatable"] {
        for v in obj["status"][list]
            .as_object_mut()
            .into_iter()
            .flat_map(|m| m.values_mut())
        {
            if let Some(c) = v.as_str().and_then(canonical_quantity) {
                *v = json!(c);
            }
        }
    }
}

/// A quantity's value in thousandths (enough for the QoS rules: positive, and sums compared);
/// `None` when it does not parse.
fn milli(q: &Value) -> Option<i128> {
    let s = match q {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let scale: f64 = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1048576.0,
        "Gi" => 1073741824.0,
        "Ti" => 1099511627776.0,
        _ => return None,
    };
    let v: f64 = num.parse().ok()?;
    Some((v * scale * 1000.0).round() as i128)
}

/// pkg/apis/core/helper/qos ComputePodQOS (containers and init containers; cpu and memory
/// quantities above zero only).
fn compute_pod_qos(pod: &Value) -> &'static str {
    let mut requests: BTreeMap<&str, i128> = BTreeMap::new();
    let mut limits: BTreeMap<&str, i128> = BTreeMap::new();
    let mut guaranteed = true;
    let containers = ["containers", "initContainers"]
        .into_iter()
        .flat_map(|l| pod["spec"][l].as_array().cloned().unwrap_or_default());
    for c in containers {
        let mut limited = 0;
        for r in ["cpu", "memory"] {
            // SetDefaults_Pod: a request left out is the limit.
            let request = match &c["resources"]["requests"][r] {
                Value::Null => &c["resources"]["limits"][r],
                q => q,
            };
            if let Some(q) = milli(request).filter(|q| *q > 0) {
                *requests.entry(r).or_default() += q;
            }
            if let Some(q) = milli(&c["resources"]["limits"][r]).filter(|q| *q > 0) {
                *limits.entry(r).or_default() += q;
                limited += 1;
            }
        }
        if limited < 2 {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        "BestEffort"
    } else if guaranteed && requests == limits {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// ValidatePodUpdate: only `spec.containers[*].image` (and initContainers' images,
/// activeDeadlineSeconds, tolerations additions) may change; here: images only.
fn pod_spec_change_allowed(old: &Value, new: &Value) -> bool {
    let blank = |s: &Value| {
        let mut s = s.clone();
        for list in ["containers", "initContainers"] {
            if let Some(cs) = s.get_mut(list).and_then(Value::as_array_mut) {
                for c in cs {
                    c["image"] = json!("");
                }
            }
        }
        s
    };
    blank(&old["spec"]) == blank(&new["spec"])
}

struct State {
    objects: BTreeMap<String, Value>,
    rv: u64,
    requests: Vec<SeenRequest>,
    events: Vec<Event>,
    /// The last compaction's resourceVersion: watches from below it get 410 Gone.
    compacted: u64,
    watchers: Vec<Watcher>,
    bookmark_every: Duration,
    seq: u64,
    auth: csr::AuthState,
    tokens: objects::TokenState,
    /// Fault injection: (method, path) answered with (code, reason, message), as an
    /// admission plugin or validation of the real server refuses a request.
    refusals: Vec<(String, String, u16, String, String)>,
}

impl State {
    fn new() -> State {
        let mut st = State {
            objects: BTreeMap::new(),
            rv: 0,
            requests: Vec::new(),
            events: Vec::new(),
            compacted: 0,
            watchers: Vec::new(),
            bookmark_every: Duration::from_secs(60),
            seq: 0,
            auth: csr::AuthState::new(),
            tokens: objects::TokenState::default(),
            refusals: Vec::new(),
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            st.ensure_namespace(ns);
        }
        st
    }

    fn ensure_namespace(&mut self, ns: &str) {
        let key = format!("/api/v1/namespaces/{ns}");
        if !self.objects.contains_key(&key) {
            let _ = self.create(
                &format!("/api/v1/namespaces/{ns}"),
                json!({"metadata": {"name": ns}, "spec": {"finalizers": ["kubernetes"]},
                       "status": {"phase": "Active"}}),
                "namespaces",
            );
        }
    }

    fn next_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    fn uid(&mut self) -> String {
        self.seq += 1;
        // A v4-shaped UUID, unique per server and object.
        // A process-wide counter as well: servers of parallel tests must not hand out the same
        // UID in the same second (pod cgroups are host-wide).
        static GLOBAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let g = GLOBAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let x = (now_secs() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ (self.seq << 20)
            ^ (g << 40)
            ^ u64::from(std::process::id());
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            (x >> 32) as u32,
            (x >> 16) as u16,
            self.seq & 0xfff,
            (x >> 4) & 0xfff,
            self.seq
        )
    }

    /// Records an event and sends it to the watches that see it.
    fn emit(&mut self, kind: &'static str, key: &str, prev: Option<Value>, obj: &Value) {
        let ev = Event {
            rv: self.rv,
            kind,
            key: key.to_string(),
            prev,
            obj: obj.clone(),
        };
        self.watchers.retain(|w| match w.line(&ev) {
            Some(line) => w.tx.send(line).is_ok(),
            None => true,
        });
        self.events.push(ev);
    }

    /// Stores `obj` under `key` (a write: new resourceVersion, event).
    fn write(&mut self, key: &str, mut obj: Value) -> Value {
        let prev = self.objects.get(key).cloned();
        obj["metadata"]["resourceVersion"] = json!(self.next_rv());
        self.objects.insert(key.to_string(), obj.clone());
        let kind = if prev.is_some() { "MODIFIED" } else { "ADDED" };
        self.emit(kind, key, prev, &obj);
        obj
    }

    fn remove(&mut self, key: &str) -> Option<Value> {
        let mut obj = self.objects.remove(key)?;
        obj["metadata"]["resourceVersion"] = json!(self.next_rv());
        self.emit("DELETED", key, None, &obj);
        Some(obj)
    }

    /// `collection`: the collection's path (for a namespace object: its own path).
    fn create(&mut self, collection: &str, mut obj: Value, resource: &str) -> (u16, Value) {
        let name = match (
            obj["metadata"]["name"].as_str().filter(|n| !n.is_empty()),
            obj["metadata"]["generateName"].as_str(),
        ) {
            (Some(n), _) => n.to_string(),
            (None, Some(g)) => {
                self.seq += 1;
                const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
                let mut x = self.seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 7;
                let mut s = g.to_string();
                for _ in 0..5 {
                    s.push(ALPHA[(x % ALPHA.len() as u64) as usize] as char);
                    x /= ALPHA.len() as u64;
                }
                s
            }
            (None, None) => {
                return status(
                    422,
                    "Invalid",
                    "metadata.name: Required value: name or generateName is required",
                );
            }
        };
        let key = if resource == "namespaces" {
            format!("/api/v1/namespaces/{name}")
        } else {
            format!("{collection}/{name}")
        };
        if self.objects.contains_key(&key) {
            return status_for(
                409,
                "AlreadyExists",
                &format!("{resource} \"{name}\" already exists"),
                resource,
                &name,
            );
        }
        let Some(r) = Res::parse(&key) else {
            return status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            );
        };
        let Some((kind, api_version, _)) = r.info() else {
            return status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            );
        };
        if let Some(ns) = &r.ns {
            if !self
                .objects
                .contains_key(&format!("/api/v1/namespaces/{ns}"))
            {
                return not_found("namespaces", ns);
            }
            // The registry's BeforeCreate: the namespace comes from the request path.
            match obj["metadata"]["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
            {
                Some(given) if given != ns => {
                    return status(
                        400,
                        "BadRequest",
                        "the namespace of the provided object does not match the namespace sent on the request",
                    );
                }
                _ => obj["metadata"]["namespace"] = json!(ns),
            }
        }
        obj["kind"] = json!(kind);
        obj["apiVersion"] = json!(api_version);
        obj["metadata"]["name"] = json!(name);
        let uid = self.uid();
        obj["metadata"]["uid"] = json!(uid);
        obj["metadata"]["creationTimestamp"] = json!(rfc3339(now_secs()));
        if let Some(m) = obj["metadata"].as_object_mut() {
            for k in ["deletionTimestamp", "deletionGracePeriodSeconds"] {
                m.remove(k);
            }
        }
        if resource == "pods" {
            default_pod(&mut obj);
        }
        objects::prepare_for_write(resource, &mut obj);
        canonical_node_quantities(resource, &mut obj);
        if resource == "services" {
            if let Err(refused) = services::prepare_create(self, &mut obj) {
                return refused;
            }
        }
        (201, self.write(&key, obj))
    }

    fn list(&self, filter: &Filter, table: Option<TableOpts>) -> Value {
        let items: Vec<Value> = self
            .objects
            .iter()
            .filter(|(k, v)| filter.matches(k, v))
            .map(|(_, v)| {
                // A list's items carry no kind/apiVersion on the wire.
                let mut v = v.clone();
                if let Some(m) = v.as_object_mut() {
                    m.remove("kind");
                    m.remove("apiVersion");
                }
                v
            })
            .collect();
        if let Some(t) = table {
            return to_table(&filter.resource, &items, self.rv, t);
        }
        let (kind, api_version, _) =
            resource_info(&filter.prefix, &filter.resource).unwrap_or(("", "v1", true));
        json!({"kind": format!("{kind}List"), "apiVersion": api_version,
               "metadata": {"resourceVersion": self.rv.to_string()}, "items": items})
    }

    /// Opens a watch; `from` is the resourceVersion asked for.
    fn watch(
        &mut self,
        filter: Filter,
        from: Option<u64>,
        table: Option<TableOpts>,
        bookmarks: bool,
    ) -> Receiver<String> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (kind, api_version, _) =
            resource_info(&filter.prefix, &filter.resource).unwrap_or(("", "v1", true));
        let w = Watcher {
            tx,
            filter,
            table,
            bookmarks,
            kind,
            api_version,
        };
        match from {
            Some(rv) if rv > 0 && rv < self.compacted => {
                let _ = w.tx.send(
                    json!({"type": "ERROR", "object": status(410, "Expired",
                        &format!("too old resource version: {rv} ({})", self.compacted)).1})
                    .to_string(),
                );
                return rx;
            }
            Some(rv) if rv > 0 => {
                for ev in self.events.iter().filter(|e| e.rv > rv) {
                    if let Some(line) = w.line(ev) {
                        let _ = w.tx.send(line);
                    }
                }
            }
            _ => {
                // Unset or "0": synthetic ADDED events for the current state.
                for (k, v) in &self.objects {
                    if w.filter.matches(k, v) {
                        let ev = Event {
                            rv: self.rv,
                            kind: "ADDED",
                            key: k.clone(),
                            prev: None,
                            obj: v.clone(),
                        };
                        if let Some(line) = w.line(&ev) {
                            let _ = w.tx.send(line);
                        }
                    }
                }
            }
        }
        self.watchers.push(w);
        rx
    }

    fn delete(&mut self, res: &Res, key: &str, query: &str, body: &Value) -> (u16, Value) {
        let name = res.name.clone().unwrap_or_default();
        let Some(cur) = self.objects.get(key).cloned() else {
            return not_found(&res.resource, &name);
        };
        let pre = &body["preconditions"];
        if let Some(uid) = pre["uid"]
            .as_str()
            .filter(|u| cur["metadata"]["uid"].as_str() != Some(u))
        {
            return conflict(
                &res.resource,
                &name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    cur["metadata"]["uid"].as_str().unwrap_or("")
                ),
            );
        }
        if let Some(rv) = pre["resourceVersion"]
            .as_str()
            .filter(|r| cur["metadata"]["resourceVersion"].as_str() != Some(r))
        {
            return conflict(
                &res.resource,
                &name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    cur["metadata"]["resourceVersion"].as_str().unwrap_or("")
                ),
            );
        }
        if res.resource != "pods" {
            self.remove(key);
            return (
                200,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                       "details": {"name": name, "kind": res.resource, "uid": cur["metadata"]["uid"]}}),
            );
        }
        // The pod strategy's CheckGracefulDelete: the requested grace, else the pod's
        // terminationGracePeriodSeconds; 0 for an unscheduled or terminated pod; negative -> 1.
        let asked = body["gracePeriodSeconds"]
            .as_i64()
            .or_else(|| query_param(query, "gracePeriodSeconds").and_then(|g| g.parse().ok()));
        let mut grace = asked
            .or_else(|| cur["spec"]["terminationGracePeriodSeconds"].as_i64())
            .unwrap_or(0);
        let phase = cur["status"]["phase"].as_str().unwrap_or("");
        if cur["spec"]["nodeName"].as_str().unwrap_or("").is_empty()
            || phase == "Succeeded"
            || phase == "Failed"
        {
            grace = 0;
        }
        if grace < 0 {
            grace = 1;
        }
        if grace == 0 {
            let obj = self.remove(key).unwrap_or(cur);
            return (200, obj);
        }
        // Already terminating: a delete may only shorten the grace period.
        if cur["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .is_some_and(|old| grace >= old)
        {
            return (200, cur);
        }
        let mut obj = cur;
        obj["metadata"]["deletionTimestamp"] = json!(rfc3339(now_secs() + grace));
        obj["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        (200, self.write(key, obj))
    }

    /// A new version of the object at `key` from an update or patch: server-set fields kept,
    /// subresource rules applied, pod spec immutability checked; unchanged -> no write.
    fn update(&mut self, res: &Res, key: &str, mut new: Value) -> (u16, Value) {
        let name = res.name.clone().unwrap_or_default();
        let Some(cur) = self.objects.get(key).cloned() else {
            return not_found(&res.resource, &name);
        };
        if new["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|r| {
                !r.is_empty() && cur["metadata"]["resourceVersion"].as_str() != Some(r)
            })
        {
            return conflict(&res.resource, &name, STALE);
        }
        if let Some(uid) = new["metadata"]["uid"]
            .as_str()
            .filter(|u| !u.is_empty() && cur["metadata"]["uid"].as_str() != Some(u))
        {
            return conflict(
                &res.resource,
                &name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    cur["metadata"]["uid"].as_str().unwrap_or("")
                ),
            );
        }
        if new["metadata"]["name"].as_str().is_some_and(|n| n != name) {
            return status(
                400,
                "BadRequest",
                "the name of the object does not match the name on the URL",
            );
        }
        if res.sub.as_deref() == Some("status") {
            let mut obj = cur.clone();
            if let Some(st) = new.get_mut("status") {
                obj["status"] = st.take();
            }
            new = obj;
            // ValidatePodStatusUpdate: status.qosClass is immutable.
            let qos = |v: &Value| v["status"]["qosClass"].as_str().unwrap_or("").to_string();
            if res.resource == "pods" && qos(&new) != qos(&cur) {
                let (code, mut v) = status(
                    422,
                    "Invalid",
                    &format!(
                        "Pod \"{name}\" is invalid: status.qosClass: Invalid value: \"{}\": field is immutable",
                        qos(&new)
                    ),
                );
                v["details"] = json!({"name": name, "kind": "Pod", "causes": [
                    {"reason": "FieldValueInvalid", "message": "Invalid value: \"".to_string() + &qos(&new) + "\": field is immutable", "field": "status.qosClass"}]});
                return (code, v);
            }
        } else {
            if cur.get("status").is_some() {
                new["status"] = cur["status"].clone();
            }
            for k in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "namespace",
                "name",
            ] {
                match cur["metadata"].get(k) {
                    Some(v) => new["metadata"][k] = v.clone(),
                    None => {
                        if let Some(m) = new["metadata"].as_object_mut() {
                            m.remove(k);
                        }
                    }
                }
            }
            if res.resource == "pods" && !pod_spec_change_allowed(&cur, &new) {
                let why = "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";
                let (code, mut v) = status(
                    422,
                    "Invalid",
                    &format!("Pod \"{name}\" is invalid: spec: {why}"),
                );
                // NewInvalid: details name the kind and carry one cause per field.
                v["details"] = json!({"name": name, "kind": "Pod", "causes": [
                    {"reason": "FieldValueForbidden", "message": why, "field": "spec"}]});
                return (code, v);
            }
        }
        if let Some((kind, api_version, _)) = res.info() {
            new["kind"] = json!(kind);
            new["apiVersion"] = json!(api_version);
        }
        new["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"].clone();
        objects::prepare_for_write(&res.resource, &mut new);
        canonical_node_quantities(&res.resource, &mut new);
        if new == cur {
            return (200, cur);
        }
        (200, self.write(key, new))
    }

    fn handle(
        &mut self,
        method: &str,
        path: &str,
        query: &str,
        ctype: &str,
        accept: &str,
        raw: &[u8],
    ) -> (u16, Value) {
        if let Some(v) = self.discovery(method, path) {
            return v;
        }
        if let Some((.., code, reason, message)) = self
            .refusals
            .iter()
            .find(|(m, p, ..)| m == method && p == path)
        {
            return status(*code, reason, message);
        }
        let pb = ctype.starts_with("application/vnd.kubernetes.protobuf");
        let csr_pb =
            pb && path.starts_with("/apis/certificates.k8s.io/v1/certificatesigningrequests/");
        // A SelfSubjectReview has no spec: its body (protobuf from `kubectl auth whoami`)
        // says nothing.
        let whoami = pb && path == "/apis/authentication.k8s.io/v1/selfsubjectreviews";
        let objects_pb =
            pb && method == "POST" && objects::object_from_protobuf(path, raw).is_some();
        let decoded;
        let raw = match csr_pb
            .then(|| csr::csr_from_protobuf(raw))
            .flatten()
            .or_else(|| {
                pb.then(|| objects::object_from_protobuf(path, raw))
                    .flatten()
            }) {
            Some(v) => {
                decoded = v.to_string().into_bytes();
                &decoded[..]
            }
            None if whoami => b"{}",
            None => raw,
        };
        if pb && !csr_pb && !objects_pb && !whoami && !raw.is_empty() {
            // Protobuf is decoded only for CSRs (kubectl certificate approve|deny).
            return status(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml",
            );
        }
        let body: Value = if raw.iter().all(u8::is_ascii_whitespace) {
            Value::Null
        } else {
            match serde_json::from_slice(raw) {
                Ok(v) => v,
                Err(e) => return status(400, "BadRequest", &format!("error decoding body: {e}")),
            }
        };
        if let Some(v) = self.reviews(method, path, &body) {
            return v;
        }
        let Some(res) = Res::parse(path) else {
            return status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            );
        };
        // A namespace object's own path parses as a cluster-scoped "namespaces" + name.
        let Some((_, _, namespaced)) = res.info() else {
            return status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            );
        };
        if namespaced && res.ns.is_none() && res.name.is_some() {
            return status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            );
        }
        if let Some(v) = self.token_request(method, &res, &body) {
            return v;
        }
        let csr = res.resource == "certificatesigningrequests";
        if res.sub.as_deref().is_some_and(|s| {
            !(s == "status" && matches!(res.resource.as_str(), "pods" | "nodes")
                || csr && matches!(s, "status" | "approval"))
        }) {
            return status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            );
        }
        let table = wants_table(accept, query);
        match (method, &res.name) {
            ("GET", None) => match Filter::new(&res, query) {
                Ok(f) => (200, self.list(&f, table)),
                Err(e) => e,
            },
            ("POST", None) => {
                if let Some(ns) = &res.ns {
                    match body["metadata"]["namespace"].as_str() {
                        Some(b) if !b.is_empty() && b != ns => {
                            return status(
                                400,
                                "BadRequest",
                                "the namespace of the provided object does not match the namespace sent on the request",
                            );
                        }
                        _ => {}
                    }
                }
                let mut body = body;
                if !body.is_object() {
                    return status(
                        400,
                        "BadRequest",
                        "the body of the request must be an object",
                    );
                }
                if let Some(ns) = &res.ns {
                    body["metadata"]["namespace"] = json!(ns);
                }
                for k in ["uid", "resourceVersion", "creationTimestamp"] {
                    if let Some(m) = body["metadata"].as_object_mut() {
                        m.remove(k);
                    }
                }
                if csr {
                    if let Err(e) = self.prepare_csr(&mut body) {
                        return e;
                    }
                }
                let coll = res.collection();
                let (code, obj) = self.create(&coll, body, &res.resource);
                if csr && code == 201 {
                    let key = res.key(obj["metadata"]["name"].as_str().unwrap_or(""));
                    self.csr_controllers(&key);
                    return (code, self.objects.get(&key).cloned().unwrap_or(obj));
                }
                (code, obj)
            }
            ("GET", Some(name)) => {
                let key = res.key(name);
                match self.objects.get(&key) {
                    Some(o) => match table {
                        Some(t) => (
                            200,
                            to_table(&res.resource, std::slice::from_ref(o), self.rv, t),
                        ),
                        None => (200, o.clone()),
                    },
                    None => not_found(&res.resource, name),
                }
            }
            ("PUT", Some(name)) => {
                if !body.is_object() {
                    return status(
                        400,
                        "BadRequest",
                        "the body of the request must be an object",
                    );
                }
                let key = res.key(name);
                if csr && res.sub.as_deref() == Some("approval") {
                    return self.csr_approval(&key, name, &body);
                }
                let out = self.update(&res, &key, body);
                if csr {
                    self.csr_controllers(&key);
                }
                out
            }
            ("PATCH", Some(name)) => {
                let key = res.key(name);
                let Some(cur) = self.objects.get(&key).cloned() else {
                    return not_found(&res.resource, name);
                };
                // metadata.uid in a patch is a precondition (the kubelet's PatchPodStatus).
                if let (Some(want), Some(have)) = (
                    body["metadata"]["uid"].as_str(),
                    cur["metadata"]["uid"].as_str(),
                ) {
                    if want != have {
                        return status(
                            409,
                            "Conflict",
                            &format!(
                                "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: UID in precondition: {want}, UID in object meta: {have}",
                                res.resource
                            ),
                        );
                    }
                }
                let mut new = cur;
                match ctype.split(';').next().unwrap_or("").trim() {
                    "application/merge-patch+json" => merge_patch(&mut new, &body),
                    "application/strategic-merge-patch+json" => {
                        strategic_merge_patch(&mut new, &body, "")
                    }
                    other => {
                        return status(
                            415,
                            "UnsupportedMediaType",
                            &format!(
                                "the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json (got {other})"
                            ),
                        );
                    }
                }
                // A patch without a resourceVersion is unconditional.
                if body["metadata"]["resourceVersion"].is_null() {
                    new["metadata"]["resourceVersion"] = json!("");
                }
                self.update(&res, &key, new)
            }
            ("DELETE", Some(_)) if res.sub.is_none() => {
                let key = res.key(res.name.as_deref().unwrap_or(""));
                self.delete(&res, &key, query, &body)
            }
            _ => status(
                405,
                "MethodNotAllowed",
                &format!(
                    "the server does not allow this method on the requested resource ({method} {path})"
                ),
            ),
        }
    }

    /// /version and legacy discovery, as a kube-apiserver 1.32 with only these resources.
    fn discovery(&self, method: &str, path: &str) -> Option<(u16, Value)> {
        if method != "GET" {
            return None;
        }
        let verbs = json!([
            "create", "delete", "get", "list", "patch", "update", "watch"
        ]);
        let sub = json!(["get", "patch", "update"]);
        let v = match path.trim_end_matches('/') {
            "/version" => json!({"major": "1", "minor": "32", "gitVersion": "v1.32.0",
                "gitCommit": "nanolet-test-double", "gitTreeState": "clean",
                "buildDate": "2026-11-22T00:00:00Z", "goVersion": "go1.23.0",
                "compiler": "gc", "platform": "linux/amd64"}),
            "/api" => json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}),
            "/api/v1" => {
                let mut l = json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                {"name": "events", "singularName": "event", "namespaced": true, "kind": "Event",
                 "verbs": verbs, "shortNames": ["ev"]},
                {"name": "namespaces", "singularName": "namespace", "namespaced": false,
                 "kind": "Namespace", "verbs": verbs, "shortNames": ["ns"]},
                {"name": "nodes", "singularName": "node", "namespaced": false, "kind": "Node",
                 "verbs": verbs, "shortNames": ["no"]},
                {"name": "nodes/proxy", "singularName": "", "namespaced": false,
                 "kind": "NodeProxyOptions", "verbs": ["create", "delete", "get", "patch", "update"]},
                {"name": "nodes/status", "singularName": "", "namespaced": false, "kind": "Node",
                 "verbs": sub},
                {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod",
                 "verbs": verbs, "shortNames": ["po"], "categories": ["all"]},
                {"name": "pods/attach", "singularName": "", "namespaced": true,
                 "kind": "PodAttachOptions", "verbs": ["create", "get"]},
                {"name": "pods/exec", "singularName": "", "namespaced": true,
                 "kind": "PodExecOptions", "verbs": ["create", "get"]},
                {"name": "pods/log", "singularName": "", "namespaced": true, "kind": "Pod",
                 "verbs": ["get"]},
                {"name": "pods/portforward", "singularName": "", "namespaced": true,
                 "kind": "PodPortForwardOptions", "verbs": ["create", "get"]},
                {"name": "pods/status", "singularName": "", "namespaced": true, "kind": "Pod",
                 "verbs": sub}]});
                if let Some(a) = l["resources"].as_array_mut() {
                    a.extend(objects::discovery(&verbs));
                    a.push(services::discovery(&verbs));
                }
                l
            }
            "/apis" => json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                api_group("authentication.k8s.io"), api_group("authorization.k8s.io"),
                api_group("certificates.k8s.io"), api_group("coordination.k8s.io")]}),
            "/apis/authentication.k8s.io"
            | "/apis/authorization.k8s.io"
            | "/apis/certificates.k8s.io" => {
                let mut g = api_group(path.trim_end_matches('/').trim_start_matches("/apis/"));
                g["kind"] = json!("APIGroup");
                g["apiVersion"] = json!("v1");
                g
            }
            "/apis/authentication.k8s.io/v1" => resource_list(
                "authentication.k8s.io/v1",
                json!([
                {"name": "selfsubjectreviews", "singularName": "selfsubjectreview",
                 "namespaced": false, "kind": "SelfSubjectReview", "verbs": ["create"]},
                {"name": "tokenreviews", "singularName": "tokenreview", "namespaced": false,
                 "kind": "TokenReview", "verbs": ["create"]}]),
            ),
            "/apis/authorization.k8s.io/v1" => resource_list(
                "authorization.k8s.io/v1",
                json!([
                {"name": "subjectaccessreviews", "singularName": "subjectaccessreview",
                 "namespaced": false, "kind": "SubjectAccessReview", "verbs": ["create"]}]),
            ),
            "/apis/certificates.k8s.io/v1" => resource_list(
                "certificates.k8s.io/v1",
                json!([
                {"name": "certificatesigningrequests", "singularName": "certificatesigningrequest",
                 "namespaced": false, "kind": "CertificateSigningRequest",
                 "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
                 "shortNames": ["csr"]},
                {"name": "certificatesigningrequests/approval", "singularName": "",
                 "namespaced": false, "kind": "CertificateSigningRequest",
                 "verbs": ["get", "patch", "update"]},
                {"name": "certificatesigningrequests/status", "singularName": "",
                 "namespaced": false, "kind": "CertificateSigningRequest",
                 "verbs": ["get", "patch", "update"]}]),
            ),
            "/apis/coordination.k8s.io" => json!({"kind": "APIGroup", "apiVersion": "v1",
                "name": "coordination.k8s.io",
                "versions": [{"groupVersion": "coordination.k8s.io/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "coordination.k8s.io/v1", "version": "v1"}}),
            "/apis/coordination.k8s.io/v1" => json!({"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": "coordination.k8s.io/v1", "resources": [
                {"name": "leases", "singularName": "lease", "namespaced": true, "kind": "Lease",
                 "verbs": verbs}]}),
            "/openapi/v3" => json!({"paths": {
                "api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=0"},
                "apis/coordination.k8s.io/v1":
                    {"serverRelativeURL": "/openapi/v3/apis/coordination.k8s.io/v1?hash=0"},
                "apis/certificates.k8s.io/v1":
                    {"serverRelativeURL": "/openapi/v3/apis/certificates.k8s.io/v1?hash=0"}}}),
            "/openapi/v3/apis/certificates.k8s.io/v1" => openapi_v3(
                "/apis/certificates.k8s.io/v1",
                "certificates.k8s.io",
                "v1",
                &[(
                    "certificatesigningrequests",
                    "CertificateSigningRequest",
                    false,
                )],
            ),
            "/openapi/v3/api/v1" => openapi_v3(
                "/api/v1",
                "",
                "v1",
                &[
                    ("pods", "Pod", true),
                    ("nodes", "Node", false),
                    ("namespaces", "Namespace", false),
                    ("events", "Event", true),
                    ("configmaps", "ConfigMap", true),
                    ("secrets", "Secret", true),
                    ("serviceaccounts", "ServiceAccount", true),
                    ("services", "Service", true),
                ],
            ),
            "/openapi/v3/apis/coordination.k8s.io/v1" => openapi_v3(
                "/apis/coordination.k8s.io/v1",
                "coordination.k8s.io",
                "v1",
                &[("leases", "Lease", true)],
            ),
            p if p.starts_with("/openapi/") => {
                return Some(status(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                ));
            }
            _ => return None,
        };
        Some((200, v))
    }
}

/// One entry of /apis (v1 only, preferred v1).
fn api_group(name: &str) -> Value {
    let gv = json!({"groupVersion": format!("{name}/v1"), "version": "v1"});
    json!({"name": name, "versions": [gv.clone()], "preferredVersion": gv})
}

fn resource_list(gv: &str, resources: Value) -> Value {
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
           "resources": resources})
}

/// An OpenAPI v3 document for one group-version with only the operations and their
/// `fieldValidation` query parameter (what kubectl's QueryParamVerifierV3 looks for before
/// it relies on server-side field validation), no schemas: kubectl then computes apply
/// patches from its compiled-in types.
fn openapi_v3(prefix: &str, group: &str, version: &str, kinds: &[(&str, &str, bool)]) -> Value {
    let mut paths = serde_json::Map::new();
    for (resource, kind, namespaced) in kinds {
        let gvk = json!({"group": group, "version": version, "kind": kind});
        let op = |action: &str| {
            json!({"operationId": format!("{action}{kind}"),
                "parameters": [{"name": "fieldValidation", "in": "query",
                    "schema": {"type": "string", "uniqueItems": true}}],
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk})
        };
        let coll = if *namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{resource}")
        } else {
            format!("{prefix}/{resource}")
        };
        paths.insert(coll.clone(), json!({"post": op("post")}));
        paths.insert(
            format!("{coll}/{{name}}"),
            json!({"put": op("put"), "patch": op("patch")}),
        );
    }
    json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"},
           "paths": paths, "components": {"schemas": {}}})
}

/// Periodic bookmarks of a watch body: (state, next, interval, kind, apiVersion).
type Bookmarks = (
    Arc<Mutex<State>>,
    Instant,
    Duration,
    &'static str,
    &'static str,
);

/// A watch body: JSON lines from a channel until the deadline or the channel closes, with
/// periodic bookmarks when asked for.
struct WatchBody {
    rx: Receiver<String>,
    /// Lines handed out (the request's `watch_lines`).
    lines: Arc<std::sync::atomic::AtomicUsize>,
    deadline: Instant,
    buf: Vec<u8>,
    /// Set when the watch allowed bookmarks.
    bookmarks: Option<Bookmarks>,
}

impl std::io::Read for WatchBody {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.buf.is_empty() {
            let now = Instant::now();
            let mut until = self.deadline;
            if let Some((_, next, ..)) = &self.bookmarks {
                until = until.min(*next);
            }
            let left = until.saturating_duration_since(now);
            if self.deadline <= now {
                return Ok(0);
            }
            let line = match self.rx.recv_timeout(left) {
                Ok(line) => line,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Ok(0),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    let Some((state, next, every, kind, api_version)) = &mut self.bookmarks else {
                        continue;
                    };
                    if Instant::now() < *next {
                        continue;
                    }
                    *next = Instant::now() + *every;
                    // Under the lock no event can be sent: an empty channel here means the
                    // bookmark's resourceVersion covers everything this watch was sent.
                    let st = state.lock().unwrap_or_else(|e| e.into_inner());
                    match self.rx.try_recv() {
                        Ok(line) => line,
                        Err(_) => json!({"type": "BOOKMARK", "object": {"kind": *kind,
                            "apiVersion": *api_version,
                            "metadata": {"resourceVersion": st.rv.to_string()}}})
                        .to_string(),
                    }
                }
            };
            // tiny_http's chunked encoder sends its 8 KiB buffer only when more data arrives:
            // pad each event (line, newline, spaces) to k * 8192 + 1 bytes so the line goes
            // out at once, as a real API server flushes per event. The one space left over
            // leads the next line (JSON allows it).
            self.lines.fetch_add(1, Ordering::SeqCst);
            self.buf = line.into_bytes();
            self.buf.push(b'\n');
            let k = self.buf.len().div_ceil(8192);
            self.buf.resize(k * 8192 + 1, b' ');
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf[..n]);
        self.buf.drain(..n);
        Ok(n)
    }
}

fn header(k: &str, v: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()).expect("header")
}

pub struct FakeApiServer {
    server: Arc<tiny_http::Server>,
    state: Arc<Mutex<State>>,
    down: Arc<AtomicBool>,
    anonymous: Arc<AtomicBool>,
    /// The port clients use (the HTTPS front's with `start_tls`).
    pub port: u16,
    thread: Option<std::thread::JoinHandle<()>>,
    /// With `start_tls`: the HTTPS front, the CA and the files made at start.
    tls: Option<TlsParts>,
    /// The shared gate while the double serves (see `gate`).
    _gate: crate::gate::Shared,
}

fn serve(
    server: &tiny_http::Server,
    state: &Arc<Mutex<State>>,
    down: &AtomicBool,
    anonymous: &AtomicBool,
    ids: &Mutex<HashMap<SocketAddr, Peer>>,
) {
    for mut req in server.incoming_requests() {
        let method = req.method().as_str().to_string();
        let url = req.url().to_string();
        let peer = req
            .remote_addr()
            .and_then(|a| {
                ids.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(a)
                    .cloned()
            })
            .unwrap_or(Peer::None);
        let (path, query) = match url.split_once('?') {
            Some((p, q)) => (p.to_string(), q.to_string()),
            None => (url.clone(), String::new()),
        };
        let hdr = |name: &'static str| {
            req.headers()
                .iter()
                .find(|h| h.field.equiv(name))
                .map(|h| h.value.as_str().to_string())
                .unwrap_or_default()
        };
        let (ctype, accept, auth) = (hdr("Content-Type"), hdr("Accept"), hdr("Authorization"));
        let mut body = Vec::new();
        let _ = std::io::Read::read_to_end(req.as_reader(), &mut body);
        let seen = SeenRequest {
            method: method.clone(),
            path: path.clone(),
            query: query.clone(),
            body: String::from_utf8_lossy(&body).into_owned(),
            content_type: ctype.clone(),
            accept: accept.clone(),
            user: String::new(),
            received: Instant::now(),
            answered: Arc::new(Mutex::new(None)),
            watch_lines: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        };
        let (answered, watch_lines) = (seen.answered.clone(), seen.watch_lines.clone());
        let received = seen.received;
        let is_watch = method == "GET"
            && matches!(query_param(&query, "watch").as_deref(), Some("true" | "1"));
        let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
        st.requests.push(seen);
        let answer = if down.load(Ordering::SeqCst) {
            Answer::Json(status(
                503,
                "ServiceUnavailable",
                "the server is down (test)",
            ))
        } else if let Some(user) = st.authenticate(&peer, &auth, anonymous.load(Ordering::SeqCst)) {
            if let Some(r) = st.requests.last_mut() {
                r.user = user.name.clone();
            }
            st.auth.user = Some(user);
            if is_watch {
                watch_request(&mut st, state, &path, &query, &accept, watch_lines)
            } else {
                Answer::Json(st.handle(&method, &path, &query, &ctype, &accept, &body))
            }
        } else {
            Answer::Json(status(401, "Unauthorized", "Unauthorized"))
        };
        st.auth.user = None;
        drop(st);
        match answer {
            Answer::Json((code, v)) => {
                let resp = tiny_http::Response::from_string(v.to_string())
                    .with_status_code(code)
                    .with_header(header("Content-Type", "application/json"));
                let _ = req.respond(resp);
                *answered.lock().unwrap_or_else(|e| e.into_inner()) = Some(received.elapsed());
            }
            Answer::Watch(body) => {
                *answered.lock().unwrap_or_else(|e| e.into_inner()) = Some(received.elapsed());
                std::thread::spawn(move || {
                    let _ = req.respond(tiny_http::Response::new(
                        200.into(),
                        vec![header("Content-Type", "application/json")],
                        *body,
                        None,
                        None,
                    ));
                });
            }
        }
    }
}

enum Answer {
    Json((u16, Value)),
    Watch(Box<WatchBody>),
}

fn watch_request(
    st: &mut State,
    state: &Arc<Mutex<State>>,
    path: &str,
    query: &str,
    accept: &str,
    lines: Arc<std::sync::atomic::AtomicUsize>,
) -> Answer {
    let bad = Answer::Json;
    let Some(res) = Res::parse(path).filter(|r| r.info().is_some() && r.sub.is_none()) else {
        return bad(status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ));
    };
    // A watch on one object: the collection with metadata.name=<name>.
    let mut q = query.to_string();
    let coll = match &res.name {
        Some(n) => {
            q.push_str(&format!("&fieldSelector=metadata.name%3D{n}"));
            Res {
                name: None,
                ..res.clone()
            }
        }
        None => res.clone(),
    };
    let filter = match Filter::new(&coll, &q) {
        Ok(f) => f,
        Err(e) => return bad(e),
    };
    let from = match query_param(query, "resourceVersion").filter(|v| !v.is_empty()) {
        None => None,
        Some(v) => match v.parse::<u64>() {
            Ok(v) => Some(v),
            Err(_) => {
                return bad(status(
                    400,
                    "BadRequest",
                    &format!("invalid resource version: {v}"),
                ));
            }
        },
    };
    let secs = query_param(query, "timeoutSeconds")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1800u64);
    let bookmarks = query_param(query, "allowWatchBookmarks").as_deref() == Some("true");
    let table = wants_table(accept, query);
    let every = st.bookmark_every;
    let (kind, api_version, _) = coll.info().unwrap_or(("", "v1", true));
    let rx = st.watch(filter, from, table, bookmarks);
    Answer::Watch(Box::new(WatchBody {
        rx,
        lines,
        deadline: Instant::now() + Duration::from_secs(secs),
        buf: vec![],
        bookmarks: bookmarks.then(|| {
            (
                state.clone(),
                Instant::now() + every,
                every,
                kind,
                api_version,
            )
        }),
    }))
}

struct TlsParts {
    front: Option<crate::front::Front>,
    ca: Arc<Ca>,
    /// Serving and client certificates made for this server.
    _dir: tempfile::TempDir,
    kubelet_client: CertFiles,
    kubelet_ca: Option<PathBuf>,
    kubelet_cfg: Arc<Mutex<Option<Arc<rustls::ClientConfig>>>>,
}

fn csr_groups(groups: Vec<String>) -> Vec<String> {
    let mut g = groups;
    if !g.iter().any(|x| x == "system:authenticated") {
        g.push("system:authenticated".into());
    }
    g
}

/// The user the `start`/`start_tls` token authenticates as (kubeadm's admin.conf user).
pub const ADMIN_USER: &str = "kubernetes-admin";
pub const ADMIN_GROUP: &str = "kubeadm:cluster-admins";

impl FakeApiServer {
    /// Starts the double (plain HTTP); requests must carry `Authorization: Bearer <token>`
    /// (user `kubernetes-admin`, groups kubeadm:cluster-admins, system:masters).
    pub fn start(token: &str) -> FakeApiServer {
        Self::start_inner(token, Arc::new(Mutex::new(HashMap::new())))
    }

    fn start_inner(token: &str, ids: Arc<Mutex<HashMap<SocketAddr, Peer>>>) -> FakeApiServer {
        let gate = crate::gate::shared();
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("fake apiserver"));
        let port = server.server_addr().to_ip().expect("addr").port();
        let state = Arc::new(Mutex::new(State::new()));
        state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .auth
            .tokens
            .insert(
                token.to_string(),
                UserInfo {
                    name: ADMIN_USER.into(),
                    uid: String::new(),
                    groups: vec![
                        ADMIN_GROUP.into(),
                        "system:masters".into(),
                        "system:authenticated".into(),
                    ],
                },
            );
        let down = Arc::new(AtomicBool::new(false));
        let anonymous = Arc::new(AtomicBool::new(false));
        let thread = {
            let (server, state, down, anon) = (
                server.clone(),
                state.clone(),
                down.clone(),
                anonymous.clone(),
            );
            std::thread::spawn(move || serve(&server, &state, &down, &anon, &ids))
        };
        FakeApiServer {
            server,
            state,
            down,
            anonymous,
            port,
            thread: Some(thread),
            tls: None,
            _gate: gate,
        }
    }

    /// Starts the double behind real TLS (`https://127.0.0.1:PORT`): a CA made now with the
    /// openssl CLI, a serving certificate for 127.0.0.1/localhost, client certificates
    /// requested (optional) and authenticated as kube-apiserver's x509 authenticator (CN =
    /// user, O = groups); `token` as in `start`. The node proxy subresources are served (see
    /// the module doc).
    pub fn start_tls(token: &str) -> FakeApiServer {
        let ids = Arc::new(Mutex::new(HashMap::new()));
        let mut api = Self::start_inner(token, ids.clone());
        let ca = Arc::new(Ca::new("kubernetes"));
        let dir = tempfile::tempdir().expect("tmp for the apiserver's certificates");
        let sans: Vec<String> = ["IP:127.0.0.1", "DNS:localhost", "DNS:kubernetes"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let serving = ca.issue(
            dir.path(),
            "apiserver",
            "kube-apiserver",
            &[],
            &sans,
            &["digital signature", "key encipherment", "server auth"],
        );
        // kubeadm's apiserver-kubelet-client.crt.
        let kubelet_client = ca.issue(
            dir.path(),
            "apiserver-kubelet-client",
            "kube-apiserver-kubelet-client",
            &[ADMIN_GROUP],
            &[],
            &["digital signature", "key encipherment", "client auth"],
        );
        api.st().auth.ca = Some(ca.clone());
        let kubelet_cfg = Arc::new(Mutex::new(Some(crate::tls::client_config(
            &kubelet_client.cert,
            &kubelet_client.key,
            None,
        ))));
        let ctx = crate::front::Ctx {
            tls: crate::tls::server_config(&serving.cert, &serving.key, &ca.cert),
            client_ca: crate::tls::client_verifier(&ca.cert, true),
            backend: SocketAddr::from(([127, 0, 0, 1], api.port)),
            ids,
            router: proxy::router(api.state.clone(), api.anonymous.clone(), api.down.clone()),
            kubelet_client: kubelet_cfg.clone(),
        };
        let front = crate::front::Front::start(ctx);
        api.port = front.port;
        api.tls = Some(TlsParts {
            front: Some(front),
            ca,
            _dir: dir,
            kubelet_client,
            kubelet_ca: None,
            kubelet_cfg,
        });
        api
    }

    fn tls(&self) -> &TlsParts {
        self.tls.as_ref().expect("a double started with start_tls")
    }

    /// The CA (its certificate signs the serving certificate, client certificates and
    /// approved CSRs). A `start` double makes one on first use.
    pub fn ca(&self) -> Arc<Ca> {
        self.st().ca()
    }

    /// The CA certificate's path (the clients' `certificate-authority`, a kubelet's
    /// `--client-ca-file`).
    pub fn ca_cert_path(&self) -> PathBuf {
        self.ca().cert.clone()
    }

    /// A new client certificate and key (PEM files, in the double's temp dir) for `user`
    /// with `groups` as O, from the double's CA.
    pub fn client_cert(&self, user: &str, groups: &[&str]) -> CertFiles {
        let ca = self.ca();
        let dir = ca.dir().to_path_buf();
        let dir = dir.as_path();
        let stem = format!("client-{}", self.st().uid());
        ca.issue(
            dir,
            &stem,
            user,
            groups,
            &[],
            &["digital signature", "key encipherment", "client auth"],
        )
    }

    /// The API server's kubelet-client certificate (CN kube-apiserver-kubelet-client, O
    /// kubeadm:cluster-admins), what a kubelet's `--client-ca-file` must accept.
    pub fn kubelet_client_cert(&self) -> CertFiles {
        self.tls().kubelet_client.clone()
    }

    /// Verify kubelets' serving certificates against `ca` (kube-apiserver's
    /// `--kubelet-certificate-authority`); `None` (the default) skips the check.
    pub fn set_kubelet_ca(&mut self, ca: Option<&Path>) {
        let t = self.tls.as_mut().expect("a double started with start_tls");
        t.kubelet_ca = ca.map(Path::to_path_buf);
        let cfg = crate::tls::client_config(&t.kubelet_client.cert, &t.kubelet_client.key, ca);
        *t.kubelet_cfg.lock().unwrap_or_else(|e| e.into_inner()) = Some(cfg);
    }

    /// A bearer token for `user` with `groups` (plus system:authenticated), as a line of
    /// kube-apiserver's `--token-auth-file`.
    pub fn add_token(&self, token: &str, user: &str, groups: &[&str]) {
        let groups = groups.iter().map(|g| g.to_string()).collect();
        self.st().auth.tokens.insert(
            token.to_string(),
            UserInfo {
                name: user.into(),
                uid: String::new(),
                groups: csr_groups(groups),
            },
        );
    }

    /// A bootstrap token `<id>.<secret>` (as `kubeadm token create`; a Secret
    /// bootstrap-token-<id> in kube-system upstream): user system:bootstrap:<id>, group
    /// system:bootstrappers.
    pub fn add_bootstrap_token(&self, id: &str, secret: &str) {
        self.st().auth.bootstrap.insert(id.into(), secret.into());
    }

    /// Adds the bootstrap token `<id>.<secret>` and writes a kubeconfig that uses it (what
    /// `kubeadm token create --print-join-command` leads to: nanolet's
    /// `--bootstrap-kubeconfig`).
    pub fn write_bootstrap_kubeconfig(&self, path: &Path, id: &str, secret: &str) {
        self.add_bootstrap_token(id, secret);
        self.write_kubeconfig(path, &format!("{id}.{secret}"));
    }

    /// Approve CSRs for `signer` as soon as they are created (kube-controller-manager's
    /// csrapproving for node client CSRs), or stop doing so.
    pub fn auto_approve(&self, signer: &str, on: bool) {
        let mut st = self.st();
        if on {
            st.auth.auto_approve.insert(signer.into());
        } else {
            st.auth.auto_approve.remove(signer);
        }
    }

    /// Issued certificates' lifetime (instead of spec.expirationSeconds / one year).
    pub fn set_cert_lifetime(&self, d: Duration) {
        self.st().auth.lifetime = Some(d);
    }

    /// How far NotBefore is set back (the signer's 5 minutes by default; 0 makes
    /// short lifetimes exact for rotation tests).
    pub fn set_cert_backdate(&self, d: Duration) {
        self.st().auth.backdate = d;
    }

    fn set_condition(&self, name: &str, kind: &str, reason: &str, message: &str) -> Value {
        let key = format!("/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}");
        let mut st = self.st();
        let Some(cur) = st.objects.get(&key).cloned() else {
            return Value::Null;
        };
        let mut body = cur.clone();
        let mut conds = cur["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        conds.push(csr::condition(kind, reason, message));
        body["status"]["conditions"] = json!(conds);
        st.csr_approval(&key, name, &body).1
    }

    /// Approves a CSR as `kubectl certificate approve` does (then the signer issues it).
    pub fn approve_csr(&self, name: &str) -> Value {
        self.set_condition(
            name,
            "Approved",
            "KubectlApprove",
            "This CSR was approved by kubectl certificate approve.",
        )
    }

    /// Denies a CSR as `kubectl certificate deny` does.
    pub fn deny_csr(&self, name: &str) -> Value {
        self.set_condition(
            name,
            "Denied",
            "KubectlDeny",
            "This CSR was denied by kubectl certificate deny.",
        )
    }

    /// Every CSR, by name.
    pub fn csrs(&self) -> Vec<Value> {
        let prefix = "/apis/certificates.k8s.io/v1/certificatesigningrequests/";
        self.st()
            .objects
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// SubjectAccessReview rule: `user` (or a group of the reviewed user; "*" any) may `verb`
    /// `resource`/`subresource` ("*" any, "" none).
    pub fn allow(&self, user: &str, verb: &str, resource: &str, subresource: &str) {
        self.st().auth.rules.push([
            user.into(),
            verb.into(),
            resource.into(),
            subresource.into(),
        ]);
    }

    /// exec/attach/portforward over WebSocket: relayed to the kubelet as is (true), or
    /// refused with 400 so kubectl falls back to SPDY (false, the default: kube-apiserver
    /// >= 1.30 translates kubectl's WebSocket to SPDY toward the kubelet, which the double
    /// does not do).
    pub fn websocket_passthrough(&self, on: bool) {
        self.st().auth.websocket_passthrough = on;
    }

    /// Every SubjectAccessReview allowed (true) or only the rules (false, the default).
    pub fn allow_all(&self, on: bool) {
        self.st().auth.allow_all = on;
    }

    /// The SubjectAccessReview requests received (bodies), in order.
    pub fn access_reviews(&self) -> Vec<Value> {
        self.st().auth.access_reviews.clone()
    }

    /// The TokenReview requests received (bodies), in order.
    pub fn token_reviews(&self) -> Vec<Value> {
        self.st().auth.token_reviews.clone()
    }

    /// A kubeconfig for this server authenticating with a client certificate.
    pub fn write_kubeconfig_cert(&self, path: &Path, cert: &CertFiles) {
        let user = format!(
            "    client-certificate: {}\n    client-key: {}\n",
            cert.cert.display(),
            cert.key.display()
        );
        self.write_kubeconfig_user(path, &user);
    }

    fn write_kubeconfig_user(&self, path: &Path, user: &str) {
        let ca = match &self.tls {
            Some(t) => format!(
                "    certificate-authority-data: {}\n",
                base64_encode(t.ca.pem().as_bytes())
            ),
            None => String::new(),
        };
        std::fs::write(
            path,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: fake\n  cluster:\n    server: {}\n{ca}contexts:\n- name: test\n  context: {{cluster: fake, user: node, namespace: default}}\nusers:\n- name: node\n  user:\n{user}",
                self.url()
            ),
        )
        .expect("write kubeconfig");
    }

    /// Whether this double serves HTTPS (`start_tls`).
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// For a failing test: the last requests, when each came, whether and how fast it was
    /// answered (a watch: when its stream began, and the lines sent on it). The state's lock
    /// is only tried (a stuck holder must not hang the failing test's unwinding).
    fn print_recent_requests(&self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        let st = loop {
            match self.state.try_lock() {
                Ok(g) => break Some(g),
                Err(std::sync::TryLockError::Poisoned(e)) => break Some(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(std::sync::TryLockError::WouldBlock) => break None,
            }
        };
        let Some(st) = st else {
            eprintln!("API server double: its state lock is held by someone else (2 s)");
            return;
        };
        let now = Instant::now();
        let recent = st.requests.len().saturating_sub(40);
        eprintln!(
            "API server double: the last {} of {} requests (age, answer time):",
            st.requests.len() - recent,
            st.requests.len()
        );
        for r in &st.requests[recent..] {
            let answered = *r.answered.lock().unwrap_or_else(|e| e.into_inner());
            let lines = r.watch_lines.load(Ordering::SeqCst);
            let query: String = r.query.chars().take(160).collect();
            eprintln!(
                "  -{:.3}s {} {}?{} user={:?} {}{}",
                now.duration_since(r.received).as_secs_f64(),
                r.method,
                r.path,
                query,
                r.user,
                match answered {
                    Some(d) => format!("answered in {:.3}s", d.as_secs_f64()),
                    None =>
                        "no answer recorded (not answered, or relayed by the front)".to_string(),
                },
                if lines > 0 {
                    format!(", {lines} watch lines sent")
                } else {
                    String::new()
                }
            );
        }
    }

    fn st(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The object stored at `path` (e.g. `/api/v1/namespaces/NS/pods/NAME`).
    pub fn get(&self, path: &str) -> Option<Value> {
        self.st().objects.get(path).cloned()
    }

    /// Removes the object at `path` at once (DELETED event), as an administrator's
    /// `kubectl delete --grace-period=0 --force`.
    pub fn delete(&self, path: &str) {
        self.st().remove(path);
    }

    /// Changes the object at `path` server-side, as another client would (new resourceVersion,
    /// MODIFIED event). Returns the new object.
    pub fn modify(&self, path: &str, f: impl FnOnce(&mut Value)) -> Option<Value> {
        let mut st = self.st();
        let mut obj = st.objects.get(path)?.clone();
        f(&mut obj);
        Some(st.write(path, obj))
    }

    /// How many requests matched `method` and `path`.
    pub fn count(&self, method: &str, path: &str) -> usize {
        self.st()
            .requests
            .iter()
            .filter(|r| r.method == method && r.path == path)
            .count()
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.st().requests.clone()
    }

    /// The current resourceVersion (the global counter).
    pub fn resource_version(&self) -> u64 {
        self.st().rv
    }

    /// Compacts: every open watch gets `ERROR 410 Gone` and ends; watches from an older
    /// resourceVersion are refused the same way (clients must relist).
    pub fn expire_watches(&self) {
        let mut st = self.st();
        // etcd compaction at the current revision: a watch from it (events after it) still
        // works, one from any older resourceVersion is too old.
        st.compacted = st.rv;
        let line = json!({"type": "ERROR", "object": status(410, "Expired",
            &format!("too old resource version: {} ({})", st.rv, st.compacted)).1})
        .to_string();
        for w in st.watchers.drain(..) {
            let _ = w.tx.send(line.clone());
        }
        st.events.clear();
    }

    /// Sends a BOOKMARK (the current resourceVersion) to every watch that allowed bookmarks.
    pub fn send_bookmarks(&self) {
        let mut st = self.st();
        let rv = st.rv;
        st.watchers
            .retain(|w| !w.bookmarks || w.tx.send(w.bookmark(rv)).is_ok());
    }

    /// How often watches with `allowWatchBookmarks=true` get a BOOKMARK (for watches opened
    /// afterwards; default 60 s, the watch cache's frequency).
    pub fn set_bookmark_interval(&self, every: Duration) {
        self.st().bookmark_every = every;
    }

    /// Creates a pod as `kubectl apply` would (POST to the namespace's pods; the namespace is
    /// created first if missing). Returns the created pod or the error `Status`.
    pub fn create_pod(&self, ns: &str, pod: Value) -> Value {
        let mut st = self.st();
        st.ensure_namespace(ns);
        let mut pod = pod;
        pod["metadata"]["namespace"] = json!(ns);
        st.create(&format!("/api/v1/namespaces/{ns}/pods"), pod, "pods")
            .1
    }

    /// Creates an object server-side (as another client would): `collection` is its
    /// collection's path, e.g. `/api/v1/nodes`. Returns the object or the error `Status`.
    pub fn create_object(&self, collection: &str, obj: Value) -> Value {
        let resource = collection.rsplit('/').next().unwrap_or("").to_string();
        self.st().create(collection, obj, &resource).1
    }

    /// Deletes a pod as `kubectl delete pod` does: graceful (the pod's own grace period;
    /// a bound pod gets deletionTimestamp and stays).
    pub fn delete_pod(&self, ns: &str, name: &str) -> Value {
        self.delete_pod_with(ns, name, &json!({}))
    }

    /// DELETE with a `DeleteOptions` body (gracePeriodSeconds, preconditions).
    pub fn delete_pod_with(&self, ns: &str, name: &str, options: &Value) -> Value {
        let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
        let mut st = self.st();
        let Some(res) = Res::parse(&path) else {
            return Value::Null;
        };
        st.delete(&res, &path, "", options).1
    }

    /// Serves requests without credentials too (a wrong token stays 401), as kube-apiserver
    /// with `--anonymous-auth=true` and `system:anonymous` authorized. kubectl (client-go)
    /// sends no credentials over plain HTTP (kubernetes/kubectl#744), so the kubectl tests
    /// need it.
    pub fn allow_anonymous(&self, allow: bool) {
        self.anonymous.store(allow, Ordering::SeqCst);
    }

    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Fault injection: answer `method path` with a `Status` of `code`, `reason` and `message`
    /// (what an admission plugin's refusal looks like) until [`FakeApiServer::clear_refusals`].
    pub fn refuse(&self, method: &str, path: &str, code: u16, reason: &str, message: &str) {
        self.st().refusals.push((
            method.into(),
            path.into(),
            code,
            reason.into(),
            message.into(),
        ));
    }

    /// Ends every [`FakeApiServer::refuse`].
    pub fn clear_refusals(&self) {
        self.st().refusals.clear();
    }

    /// A kubeconfig for this server with `token`, written to `path`.
    /// nanolet's own API client, configured for this server through a kubeconfig as nanolet
    /// itself is.
    pub fn client(&self, token: &str) -> nanolet::apiclient::client::ApiClient {
        let dir = tempfile::tempdir().expect("tmp");
        let kc = dir.path().join("kc");
        self.write_kubeconfig(&kc, token);
        let kc = nanolet::apiclient::kubeconfig::Kubeconfig::load(&kc).expect("kubeconfig");
        nanolet::apiclient::client::ApiClient::new(&kc, std::time::Duration::from_secs(10))
            .expect("client")
    }

    /// A kubeconfig for this server with a bearer token (and, with TLS, the CA's data).
    pub fn write_kubeconfig(&self, path: &std::path::Path, token: &str) {
        self.write_kubeconfig_user(path, &format!("    token: {token}\n"));
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.print_recent_requests();
        }
        // Ends the open watches (their channels close), then the accept loop.
        self.st().watchers.clear();
        if let Some(t) = self.tls.as_mut() {
            t.front.take();
        }
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
