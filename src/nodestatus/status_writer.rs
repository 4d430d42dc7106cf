//! The pod status writer of API-server mode (the kubelet's status manager, upstream
//! pkg/kubelet/status/status_manager.go): statuses from the status store go to the API server
//! as merge patches, for API pods and (through their mirror pods) for static pods.

use std::collections::BTreeMap;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::apiclient::client::ApiClient;
use crate::config::SourceKind;
use crate::config::apiserver::ApiView;
use crate::config::naming::{CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION};

/// Writes the status of API pods (and of static pods to their mirror pods) back to the API
/// server: a strategic-merge patch of `status` ([`status_patch`]) whenever it changed, checked
/// every second (the kubelet's status manager batches the same way). It also sends the final DELETE of gracefully deleted
/// pods once they stopped, and runs the mirror manager.
pub struct StatusWriter {
    client: Arc<ApiClient>,
    store: Arc<crate::status::StatusStore>,
    runtime: Arc<dyn crate::cri::Runtime>,
    view: Arc<Mutex<ApiView>>,
    mirrors: Option<super::mirror::MirrorManager>,
    /// Status key (pod UID, plus the mirror UID for static pods) -> the body last sent (or
    /// refused: it waits for the next reconciliation, not the next second).
    sent: BTreeMap<String, String>,
    /// Terminating UIDs whose final DELETE went out.
    deleted: std::collections::BTreeSet<String>,
    /// Per status key, the warning of a status write the API server refused (4xx), logged once
    /// per back-off step.
    refused: BTreeMap<String, crate::util::backoff::RepeatLimiter>,
    /// When the statuses were last compared with the API's copies.
    last_reconcile: Option<Instant>,
}

/// How often every status is compared with the API's copy (the status manager's
/// `syncPeriod`, its `syncBatch(all)`).
pub const RECONCILE_PERIOD: Duration = Duration::from_secs(10);

/// `metav1.Time` to the second (`normalizeStatus`: the API server keeps RFC 3339 seconds).
fn second(t: &str) -> &str {
    match t.split_once('.') {
        Some((s, _)) => s,
        None => t.strip_suffix('Z').unwrap_or(t),
    }
}

/// Whether `v` is what Go's `omitempty` leaves out (absent in the API's copy means this).
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// Whether the API's value `api` holds everything of nanolet's `ours`: objects key by key (a
/// key nanolet leaves out is not compared: the API server adds fields of its own), container
/// statuses matched by name (`normalizeStatus` sorts them), timestamps to the second.
fn covers(api: Option<&Value>, ours: &Value, key: &str) -> bool {
    let Some(api) = api.filter(|a| !a.is_null()) else {
        return is_empty(ours);
    };
    match (api, ours) {
        (Value::Object(a), Value::Object(o)) => o.iter().all(|(k, v)| covers(a.get(k), v, k)),
        (Value::Array(a), Value::Array(o))
            if matches!(
                key,
                "containerStatuses" | "initContainerStatuses" | "ephemeralContainerStatuses"
            ) =>
        {
            a.len() == o.len()
                && o.iter().all(|c| {
                    let twin = a.iter().find(|x| x.get("name") == c.get("name"));
                    twin.is_some() && covers(twin, c, "")
                })
        }
        (Value::Array(a), Value::Array(o)) => {
            a.len() == o.len() && a.iter().zip(o).all(|(x, y)| covers(Some(x), y, ""))
        }
        (Value::String(a), Value::String(o)) if key.ends_with("At") || key.ends_with("Time") => {
            second(a) == second(o)
        }
        (a, o) => a == o,
    }
}

/// The status manager's `needsReconcile` / `isPodStatusByKubeletEqual`: whether the API's copy
/// of a pod's status (`api`) still says what nanolet's (`ours`) says. Each condition the
/// kubelet owns or shares must be there with the same status, reason and message (so a
/// `Ready=False` written by the node lifecycle controller's `MarkPodsNotReady` is a
/// difference); conditions others own are not compared; the rest as [`covers`] says.
pub fn api_status_matches(api: &Value, ours: &Value) -> bool {
    let none = Vec::new();
    let api_conds = api["conditions"].as_array().unwrap_or(&none);
    let conds_match = ours["conditions"]
        .as_array()
        .unwrap_or(&none)
        .iter()
        .all(|c| {
            let t = c["type"].as_str().unwrap_or_default();
            if !crate::api::helpers::is_kubelet_condition(t) && t != "DisruptionTarget" {
                return true;
            }
            api_conds.iter().any(|a| {
                a["type"] == c["type"]
                    && ["status", "reason", "message"]
                        .iter()
                        .all(|f| covers(a.get(*f), &c[*f], f) && covers(c.get(*f), &a[*f], f))
            })
        });
    let (mut a, mut o) = (api.clone(), ours.clone());
    for v in [&mut a, &mut o] {
        if let Some(m) = v.as_object_mut() {
            m.remove("conditions");
        }
    }
    conds_match && covers(Some(&a), &o, "")
}

/// The strategic-merge patch that takes the pod's status from `before` (what was last sent;
/// `None`: unknown) to `now`, as the status manager's `PatchPodStatus`: the UID as a
/// precondition; conditions merged by type, so the conditions others own (readiness gates')
/// are never touched (`DisruptionTarget`, shared, is sent when present) and a kubelet
/// condition no longer reported is deleted; `podIPs` and `hostIPs` replaced whole; a field no longer reported set to null.
pub fn status_patch(uid: &str, before: Option<&Value>, now: &Value) -> Value {
    let mut status = now.clone();
    if let (Some(Value::Object(b)), Value::Object(n)) = (before, &mut status) {
        for k in b.keys() {
            if !n.contains_key(k) {
                n.insert(k.clone(), Value::Null);
            }
        }
    }
    if let Value::Object(n) = &mut status {
        let owned = |c: &&Value| {
            c.get("type")
                .and_then(Value::as_str)
                .is_some_and(crate::api::helpers::is_kubelet_condition)
        };
        // DisruptionTarget is shared: the kubelet sets it when it evicts the pod.
        let sent = |c: &&Value| owned(c) || c.get("type") == Some(&json!("DisruptionTarget"));
        let mut conditions: Vec<Value> = n
            .get("conditions")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter(sent).cloned().collect())
            .unwrap_or_default();
        let kept: Vec<Value> = conditions.iter().map(|c| c["type"].clone()).collect();
        let gone = before
            .and_then(|b| b.get("conditions"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(owned)
            .filter(|c| !kept.contains(&c["type"]))
            .map(|c| json!({"type": c["type"], "$patch": "delete"}));
        conditions.extend(gone.collect::<Vec<_>>());
        if conditions.is_empty() {
            n.remove("conditions");
        } else {
            n.insert("conditions".into(), Value::Array(conditions));
        }
        for list in ["podIPs", "hostIPs"] {
            if let Some(Value::Array(a)) = n.get_mut(list) {
                a.push(json!({"$patch": "replace"}));
            }
        }
    }
    json!({"metadata": {"uid": uid}, "status": status})
}

impl StatusWriter {
    pub fn new(
        client: Arc<ApiClient>,
        store: Arc<crate::status::StatusStore>,
        runtime: Arc<dyn crate::cri::Runtime>,
        view: Arc<Mutex<ApiView>>,
        mirrors: Option<super::mirror::MirrorManager>,
    ) -> StatusWriter {
        StatusWriter {
            client,
            store,
            runtime,
            view,
            mirrors,
            sent: BTreeMap::new(),
            deleted: Default::default(),
            refused: BTreeMap::new(),
            last_reconcile: None,
        }
    }

    /// One pass; returns how many statuses were written.
    pub fn pass(&mut self) -> usize {
        if let Some(m) = &mut self.mirrors {
            m.pass();
        }
        let (listed, mirrors, terminating, api_statuses) = {
            let v = self.view.lock().unwrap_or_else(|e| e.into_inner());
            (
                v.listed,
                v.mirrors.clone(),
                v.terminating.clone(),
                v.statuses.clone(),
            )
        };
        if !listed {
            // Offline start: nothing to write to until the API server answered.
            return 0;
        }
        let now_at = Instant::now();
        let reconcile = self
            .last_reconcile
            .is_none_or(|at| now_at.saturating_duration_since(at) >= RECONCILE_PERIOD);
        if reconcile {
            self.last_reconcile = Some(now_at);
        }
        let mut written = 0;
        let pods = self.store.pods();
        let mut live = std::collections::BTreeSet::new();
        for p in pods {
            let full = format!("{}/{}", p.metadata.namespace, p.metadata.name);
            let ann = &p.metadata.annotations;
            // The status key, and the UID of the API object the status goes to.
            let (key, api_uid) = match ann.get(CONFIG_SOURCE_ANNOTATION).map(String::as_str) {
                Some(s) if s == SourceKind::Api.as_str() => {
                    (p.metadata.uid.clone(), p.metadata.uid.clone())
                }
                // A static pod: its status goes to its mirror pod, when one matches it.
                Some(_) => match (mirrors.get(&full), ann.get(CONFIG_HASH_ANNOTATION)) {
                    (Some(m), Some(hash)) if !m.deleting && m.hash == *hash => {
                        (format!("{}/{}", p.metadata.uid, m.uid), m.uid.clone())
                    }
                    _ => continue,
                },
                None => continue,
            };
            let Some(status) = &p.status else { continue };
            live.insert(key.clone());
            let Ok(mut now) = serde_json::to_value(status) else {
                continue;
            };
            let api_status = api_statuses.get(&api_uid);
            // status.qosClass is immutable in the API: keep its value (the kubelet's
            // GetPodQOS), so a write is never refused for it.
            if let Some(q) = api_status
                .and_then(|a| a["qosClass"].as_str())
                .filter(|q| !q.is_empty())
            {
                now["qosClass"] = json!(q);
            }
            let text = now.to_string();
            if self.sent.get(&key) == Some(&text) {
                // Unchanged since the last write: every RECONCILE_PERIOD, compare with the
                // API's copy (someone else, e.g. the node lifecycle controller's
                // MarkPodsNotReady, may have changed it) and write again when it differs.
                let drifted = reconcile && api_status.is_some_and(|a| !api_status_matches(a, &now));
                if !drifted {
                    continue;
                }
                info!(pod = %full, "pod status in the API differs from the node's; writing it again");
            }
            // The patch goes from the API's copy (the status manager's PatchPodStatus diffs
            // against the pod it read), else from what was last sent.
            let before = api_status.cloned().or_else(|| {
                self.sent
                    .get(&key)
                    .and_then(|t| serde_json::from_str(t).ok())
            });
            let body = status_patch(&api_uid, before.as_ref(), &now);
            let path = format!(
                "/api/v1/namespaces/{}/pods/{}/status",
                p.metadata.namespace, p.metadata.name
            );
            match self
                .client
                .patch(&path, "application/strategic-merge-patch+json", &body)
            {
                Ok(_) => {
                    if self.refused.remove(&key).is_some_and(|mut l| l.clear()) {
                        info!(pod = %full, "writing pod status works again");
                    }
                    self.sent.insert(key, text);
                    written += 1;
                }
                // Gone, or another pod of the same name (UID precondition): not ours to write.
                Err(e) if matches!(e.status(), Some(404 | 409)) => {
                    self.sent.insert(key, text);
                }
                // Refused (403 from an admission plugin, 422 Invalid, ...): the same body would
                // be refused again, so it waits for a change or the next reconciliation (as the
                // status manager, which retries at its next syncBatch), and the API's message
                // is logged at warning, once per back-off step.
                Err(e) if e.status().is_some_and(|s| (400..500).contains(&s)) => {
                    let message = e.message();
                    let limiter = self.refused.entry(key.clone()).or_default();
                    if let Some(suppressed) = limiter.check(&message, Instant::now()) {
                        warn!(pod = %full, status = e.status().unwrap_or_default(), suppressed, message = %message, "the API server refused the pod status");
                    }
                    self.sent.insert(key, text);
                }
                Err(e) => {
                    debug!(pod = %full, error = %e, "writing pod status failed; will retry");
                }
            }
        }
        self.sent.retain(|u, _| live.contains(u));
        self.refused.retain(|u, _| live.contains(u));
        self.finish_deletions(&terminating);
        written
    }

    /// Whether nothing of pod `uid` runs any more: no container that has not exited and no
    /// ready sandbox (the kubelet's `podResourcesAreReclaimed`, minus volumes, which nanolet
    /// keeps on the host). A runtime error means "not yet".
    fn stopped(&self, uid: &str) -> bool {
        use crate::cri::{ContainerState, LABEL_POD_UID, SandboxState};
        let (Ok(sandboxes), Ok(containers)) = (
            self.runtime.list_pod_sandboxes(),
            self.runtime.list_containers(),
        ) else {
            return false;
        };
        !sandboxes
            .iter()
            .any(|s| s.uid == uid && s.state == SandboxState::Ready)
            && !containers.iter().any(|c| {
                c.labels.get(LABEL_POD_UID).map(String::as_str) == Some(uid)
                    && c.state != ContainerState::Exited
            })
    }

    /// Whether the status nanolet reports for API pod `uid` (written earlier in the same
    /// pass) still shows a running container: its stopped containers are reported first.
    fn reports_running(&self, uid: &str) -> bool {
        self.store
            .get(uid)
            .and_then(|p| p.status)
            .and_then(|s| serde_json::to_value(s).ok())
            .is_some_and(|v| {
                [
                    "initContainerStatuses",
                    "containerStatuses",
                    "ephemeralContainerStatuses",
                ]
                .iter()
                .filter_map(|k| v[*k].as_array())
                .flatten()
                .any(|c| !c["state"]["running"].is_null())
            })
    }

    /// The final DELETE (grace 0, UID precondition) of pods being deleted whose containers and
    /// sandbox have stopped: only then does the pod leave the API server, as with the kubelet.
    fn finish_deletions(&mut self, terminating: &BTreeMap<String, (String, String)>) {
        self.deleted.retain(|u| terminating.contains_key(u));
        for (uid, (ns, name)) in terminating {
            if self.deleted.contains(uid) || !self.stopped(uid) || self.reports_running(uid) {
                continue;
            }
            match super::mirror::delete_final(&self.client, ns, name, uid) {
                Ok(_) => {
                    info!(pod = %format!("{ns}/{name}"), uid, "pod terminated; deleted it from the API server");
                    self.deleted.insert(uid.clone());
                }
                Err(e) => {
                    warn!(pod = %format!("{ns}/{name}"), uid, error = %e, "final delete failed; will retry")
                }
            }
        }
    }

    pub fn run(mut self, stop: Receiver<()>) {
        loop {
            self.pass();
            match stop.recv_timeout(Duration::from_secs(1)) {
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                _ => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// status_manager.go needsReconcile / isPodStatusByKubeletEqual / normalizeStatus: the
    /// node lifecycle controller's MarkPodsNotReady (Ready=False, reason/message of its own)
    /// is a difference to write back; fields the API server adds, conditions others own,
    /// sub-second timestamps and the order of container statuses are not.
    #[test]
    fn the_api_copy_is_compared_as_the_status_manager_does() {
        let ours = json!({
            "phase": "Running", "startTime": "2026-11-28T10:00:00Z",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-28T10:00:01Z"}],
            "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": "2026-11-28T10:00:01.123Z"}}},
                {"name": "b", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": "2026-11-28T10:00:01Z"}}}]});
        let mut api = ours.clone();
        api["qosClass"] = json!("BestEffort");
        api["containerStatuses"] = json!([
            {"name": "b", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": "2026-11-28T10:00:01Z"}}, "started": true},
            {"name": "a", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": "2026-11-28T10:00:01Z"}}}]);
        api["conditions"] = json!([
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-28T10:00:01Z"},
            {"type": "example.com/gate", "status": "False"}]);
        assert!(api_status_matches(&api, &ours));
        // MarkPodsNotReady (pkg/controller/util/node): Ready=False, reason NodeNotReady.
        let mut marked = api.clone();
        marked["conditions"][0]["status"] = json!("False");
        marked["conditions"][0]["reason"] = json!("NodeNotReady");
        assert!(!api_status_matches(&marked, &ours));
        // The same status with another reason is a difference too.
        let mut reason = api.clone();
        reason["conditions"][0]["reason"] = json!("NodeNotReady");
        assert!(!api_status_matches(&reason, &ours));
        let mut restarted = api.clone();
        restarted["containerStatuses"][1]["restartCount"] = json!(1);
        assert!(!api_status_matches(&restarted, &ours));
        let mut gone = api.clone();
        gone["conditions"] = json!([]);
        assert!(!api_status_matches(&gone, &ours));
    }

    /// status_manager.go PatchPodStatus / mergePodStatus: the UID is a precondition; only the
    /// kubelet's conditions are sent, merged by type (a readiness gate's condition, owned by a
    /// controller, is never in the patch), one no longer reported is deleted; podIPs and
    /// hostIPs are replaced whole; a field gone from the status is set to null.
    #[test]
    fn status_patch_touches_only_what_the_kubelet_owns() {
        let before = json!({
            "phase": "Running", "podIP": "10.0.0.1", "message": "m",
            "podIPs": [{"ip": "10.0.0.1"}],
            "conditions": [{"type": "Ready", "status": "True"},
                           {"type": "PodReadyToStartContainers", "status": "True"},
                           {"type": "example.com/gate", "status": "True"}]});
        let now = json!({
            "phase": "Running", "podIP": "10.0.0.2",
            "podIPs": [{"ip": "10.0.0.2"}],
            "conditions": [{"type": "example.com/gate", "status": "True"},
                           {"type": "Ready", "status": "False"}]});
        let p = status_patch("uid-1", Some(&before), &now);
        assert_eq!(p["metadata"], json!({"uid": "uid-1"}));
        let s = &p["status"];
        assert_eq!(
            s["conditions"],
            json!([{"type": "Ready", "status": "False"},
                   {"type": "PodReadyToStartContainers", "$patch": "delete"}])
        );
        assert_eq!(
            s["podIPs"],
            json!([{"ip": "10.0.0.2"}, {"$patch": "replace"}])
        );
        assert_eq!(s["message"], Value::Null);
        assert!(s.as_object().is_some_and(|o| o.contains_key("message")));
        assert_eq!(s["phase"], "Running");
        // Nothing sent before: no deletions, no nulls.
        let first = status_patch("uid-1", None, &now);
        assert!(first["status"].get("message").is_none());
        assert_eq!(
            first["status"]["conditions"].as_array().map(Vec::len),
            Some(1)
        );
    }
}
