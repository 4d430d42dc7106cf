//! The API pod source: this node's pods from the API server (the kubelet's `config/apiserver.go`
//! reflector), as complete snapshots for podconfig like the file and URL sources.
//!
//! List `GET /api/v1/pods?fieldSelector=spec.nodeName=<node>`, then watch from the list's
//! resourceVersion with bookmarks; every event updates the set and sends a snapshot. A watch
//! that ends (server timeout) resumes from the last resourceVersion; `410 Gone` (an ERROR event
//! or the HTTP status) relists; transport errors back off (1 s doubling to 30 s). Nothing is sent
//! before the first successful list, so an API server that is down at boot never makes the
//! sync loop think this source has no pods.
//!
//! Pods being deleted (`deletionTimestamp` set) stay in the snapshot with their deletion
//! metadata; the sync loop takes them out of the desired set and stops them with
//! `deletionGracePeriodSeconds` (issue 20), and `nodestatus::status_writer::StatusWriter` sends the final DELETE (grace 0, UID
//! precondition) once their containers and sandbox have stopped, as the kubelet's status
//! manager does.
//!
//! Mirror pods (annotation `kubernetes.io/config.mirror`) are never run: the kubelet filters them
//! out of the API source too; they are published in [`ApiView`] for `nodestatus::mirror`.
//!
//! Offline autonomy: every change of the set is checkpointed atomically to
//! `<root-dir>/api-pods.json` (see [`Checkpoint`]); when the first list fails at start, the
//! checkpointed pods are sent as this source's snapshot, so they run (and are adopted, same UIDs)
//! while the API server is unreachable; the first successful list replaces them.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tracing::{debug, info, warn};

use crate::api::Pod;
use crate::apiclient::client::{ApiClient, ApiError};
use crate::config::naming::{CONFIG_SEEN_ANNOTATION, CONFIG_SOURCE_ANNOTATION};
use crate::config::{ManifestError, Snapshot, SourceKind, SourcePod};

/// The server-side timeout asked for on each watch (the kubelet's reflector uses 5-10 min).
const WATCH_TIMEOUT_SECONDS: u64 = 300;

/// The kubelet's `kubernetes.io/config.mirror` annotation: on a mirror pod, the config hash of
/// the static pod it mirrors.
pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The checkpoint's file name under root-dir.
pub const CHECKPOINT_FILE: &str = "api-pods.json";

/// The offline checkpoint: this node's API pods as the API server last listed them (without
/// status, resourceVersion and managedFields, which change on every status write).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    pub kind: String,
    pub version: u32,
    /// The node the pods were scheduled to; a checkpoint of another node name is ignored.
    pub node_name: String,
    pub pods: Vec<Value>,
}

const CHECKPOINT_KIND: &str = "NanoletApiPodCheckpoint";

/// What the API pod source knows about the API server, for the status writer and the mirror
/// manager (shared, updated with every snapshot).
#[derive(Debug, Default)]
pub struct ApiView {
    /// A list succeeded since start: `mirrors` and `terminating` reflect the API server.
    pub listed: bool,
    /// Pods with `deletionTimestamp`: uid -> (namespace, name), waiting for the final DELETE.
    pub terminating: BTreeMap<String, (String, String)>,
    /// Mirror pods in the API by `namespace/name`.
    pub mirrors: BTreeMap<String, MirrorPod>,
    /// The API's copy of each pod's status (API pods and mirror pods), by UID: the status
    /// writer reconciles against it (the kubelet's status manager `needsReconcile`).
    pub statuses: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MirrorPod {
    pub uid: String,
    /// Its `kubernetes.io/config.mirror` annotation.
    pub hash: String,
    /// `deletionTimestamp` is set (someone deleted it gracefully).
    pub deleting: bool,
}

pub fn is_mirror(v: &Value) -> bool {
    v["metadata"]["annotations"][CONFIG_MIRROR_ANNOTATION].is_string()
}

/// Drops what changes without the pod changing (status writes bump resourceVersion); of the
/// status only the conditions others own (readiness gates) and the immutable `qosClass` are
/// kept.
fn strip_volatile(v: &mut Value) {
    if let Some(m) = v.as_object_mut() {
        let foreign = foreign_conditions(m.get("status"));
        let qos = m
            .get("status")
            .and_then(|s| s.get("qosClass"))
            .filter(|q| q.as_str().is_some_and(|q| !q.is_empty()))
            .cloned();
        m.remove("status");
        let mut status = serde_json::Map::new();
        if !foreign.is_empty() {
            status.insert("conditions".into(), Value::Array(foreign));
        }
        if let Some(q) = qos {
            status.insert("qosClass".into(), q);
        }
        if !status.is_empty() {
            m.insert("status".into(), Value::Object(status));
        }
    }
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("resourceVersion");
        m.remove("managedFields");
    }
}

/// The conditions of an API pod's status that the kubelet does not own (readiness gates'
/// conditions, set by controllers): the kubelet copies them into the status it generates.
fn foreign_conditions(status: Option<&Value>) -> Vec<Value> {
    status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter(|c| {
                    c.get("type")
                        .and_then(Value::as_str)
                        .is_some_and(|t| !crate::api::helpers::is_kubelet_condition(t))
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

fn selector(node: &str) -> String {
    format!("fieldSelector=spec.nodeName%3D{node}")
}

/// Removes object fields whose value is `null`, recursively: Go's encoding/json (the API
/// server's and the kubelet's) treats `null` as the zero value, so `"initContainers": null`
/// means no init containers, not a type error.
fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(drop_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// Decodes one API pod; `Err` names the pod and why.
pub fn decode_pod(v: &Value, seen: &str) -> Result<Pod, ManifestError> {
    let origin = format!(
        "api:{}/{}",
        v["metadata"]["namespace"].as_str().unwrap_or_default(),
        v["metadata"]["name"].as_str().unwrap_or_default()
    );
    let mut v = v.clone();
    drop_nulls(&mut v);
    let mut pod: Pod = serde_path_to_error::deserialize(&v).map_err(|e| ManifestError {
        origin: origin.clone(),
        field: e.path().to_string(),
        reason: e.inner().to_string(),
    })?;
    if pod.metadata.uid.is_empty() {
        return Err(ManifestError {
            origin,
            field: "metadata.uid".into(),
            reason: "Required value".into(),
        });
    }
    // Of the status, only a terminal phase (such a pod is never run again), the conditions
    // others own (readiness gates) and `qosClass` (immutable in the API; the kubelet's
    // `GetPodQOS` uses it, so nanolet's own computation never contradicts it) are kept.
    pod.status = pod.status.take().and_then(|s| {
        let terminal = matches!(s.phase.as_str(), "Succeeded" | "Failed");
        let conditions: Vec<_> = s
            .conditions
            .into_iter()
            .filter(|c| !crate::api::helpers::is_kubelet_condition(&c.type_))
            .collect();
        (terminal || !conditions.is_empty() || !s.qos_class.is_empty()).then(|| {
            crate::api::PodStatus {
                phase: if terminal { s.phase } else { String::new() },
                reason: if terminal { s.reason } else { String::new() },
                message: if terminal { s.message } else { String::new() },
                conditions,
                qos_class: s.qos_class,
                ..Default::default()
            }
        })
    });
    pod.metadata.extra.remove("resourceVersion");
    pod.metadata.extra.remove("managedFields");
    let ann = &mut pod.metadata.annotations;
    ann.insert(
        CONFIG_SOURCE_ANNOTATION.into(),
        SourceKind::Api.as_str().into(),
    );
    ann.entry(CONFIG_SEEN_ANNOTATION.into())
        .or_insert_with(|| seen.to_string());
    Ok(pod)
}

/// The set as it stands: uid -> raw object.
#[derive(Default)]
struct PodSet {
    pods: BTreeMap<String, Value>,
    /// When nanolet first saw each UID (config.seen), stable across events.
    seen: BTreeMap<String, String>,
}

impl PodSet {
    fn snapshot(&mut self) -> Snapshot {
        let mut pods = vec![];
        let mut errors = vec![];
        let now = crate::config::now_rfc3339_nano();
        for (uid, v) in &self.pods {
            // pods being deleted are sent too, deletionTimestamp and
            // deletionGracePeriodSeconds in metadata; the sync loop stops them with that grace.
            if is_mirror(v) {
                continue;
            }
            let seen = self.seen.entry(uid.clone()).or_insert_with(|| now.clone());
            match decode_pod(v, seen) {
                Ok(pod) => pods.push(SourcePod {
                    origin: format!("api:{}/{}", pod.metadata.namespace, pod.metadata.name),
                    pod: std::sync::Arc::new(pod),
                }),
                Err(e) => errors.push(e),
            }
        }
        self.seen.retain(|u, _| self.pods.contains_key(u));
        Snapshot {
            source: SourceKind::Api,
            pods,
            errors,
            ready: true,
        }
    }

    /// The checkpoint body of the set (sorted by UID, so equal sets give equal bytes).
    fn checkpoint(&self, node: &str) -> Checkpoint {
        Checkpoint {
            kind: CHECKPOINT_KIND.into(),
            version: 1,
            node_name: node.to_string(),
            pods: self
                .pods
                .values()
                .filter(|v| !is_mirror(v))
                .map(|v| {
                    let mut v = v.clone();
                    strip_volatile(&mut v);
                    v
                })
                .collect(),
        }
    }

    fn update_view(&self, view: &mut ApiView) {
        view.terminating.clear();
        view.mirrors.clear();
        view.statuses.clear();
        for (uid, v) in &self.pods {
            if let Some(st) = v.get("status").filter(|s| s.is_object()) {
                view.statuses.insert(uid.clone(), st.clone());
            }
            let meta = &v["metadata"];
            let ns = meta["namespace"].as_str().unwrap_or_default().to_string();
            let name = meta["name"].as_str().unwrap_or_default().to_string();
            let deleting = !meta["deletionTimestamp"].is_null();
            if is_mirror(v) {
                view.mirrors.insert(
                    format!("{ns}/{name}"),
                    MirrorPod {
                        uid: uid.clone(),
                        hash: meta["annotations"][CONFIG_MIRROR_ANNOTATION]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                        deleting,
                    },
                );
            } else if deleting {
                view.terminating.insert(uid.clone(), (ns, name));
            }
        }
    }
}

enum WatchEnd {
    /// The server closed the stream (timeout): resume from this resourceVersion.
    Resume(String),
    /// 410 Gone: relist.
    Expired,
    Stop,
}

pub struct ApiPodSource {
    client: Arc<ApiClient>,
    node: String,
    tx: Sender<Snapshot>,
    view: Arc<Mutex<ApiView>>,
    /// `<root-dir>/api-pods.json`.
    checkpoint_path: PathBuf,
    /// The checkpoint bytes last written (or read), to write only on change.
    written: Option<Vec<u8>>,
}

impl ApiPodSource {
    pub fn new(
        client: Arc<ApiClient>,
        node: &str,
        tx: Sender<Snapshot>,
        view: Arc<Mutex<ApiView>>,
        root_dir: &std::path::Path,
    ) -> ApiPodSource {
        ApiPodSource {
            client,
            node: node.to_string(),
            tx,
            view,
            checkpoint_path: root_dir.join(CHECKPOINT_FILE),
            written: None,
        }
    }

    /// The checkpointed pods, if a checkpoint for this node exists (a damaged one is
    /// quarantined and treated as absent).
    fn load_checkpoint(&mut self) -> Option<BTreeMap<String, Value>> {
        let cp: Checkpoint = match crate::statefile::read_or_quarantine(&self.checkpoint_path) {
            Ok(Some(cp)) => cp,
            Ok(None) => return None,
            Err(e) => {
                warn!(path = %self.checkpoint_path.display(), error = %e, "cannot read the API pod checkpoint");
                return None;
            }
        };
        if cp.kind != CHECKPOINT_KIND || cp.version != 1 {
            crate::statefile::quarantine(
                &self.checkpoint_path,
                &format!("unknown kind/version {}/{}", cp.kind, cp.version),
            );
            return None;
        }
        if cp.node_name != self.node {
            warn!(path = %self.checkpoint_path.display(), checkpoint_node = %cp.node_name, node = %self.node,
                "the API pod checkpoint belongs to another node name; ignoring it");
            return None;
        }
        self.written = serde_json::to_vec(&cp).ok();
        let mut pods = BTreeMap::new();
        for v in cp.pods {
            if let Some(uid) = v["metadata"]["uid"].as_str() {
                pods.insert(uid.to_string(), v);
            }
        }
        Some(pods)
    }

    fn write_checkpoint(&mut self, set: &PodSet) {
        let Ok(body) = serde_json::to_vec(&set.checkpoint(&self.node)) else {
            return;
        };
        if self.written.as_ref() == Some(&body) {
            return;
        }
        match crate::statefile::write_atomic_private(&self.checkpoint_path, &body) {
            Ok(()) => {
                debug!(path = %self.checkpoint_path.display(), "API pod checkpoint written");
                self.written = Some(body);
            }
            Err(e) => {
                warn!(path = %self.checkpoint_path.display(), error = %e, "writing the API pod checkpoint failed; will retry on the next change");
            }
        }
    }

    fn list(&self, set: &mut PodSet) -> Result<String, ApiError> {
        let v = self
            .client
            .get(&format!("/api/v1/pods?{}", selector(&self.node)))?;
        set.pods.clear();
        for item in v["items"].as_array().into_iter().flatten() {
            if let Some(uid) = item["metadata"]["uid"].as_str() {
                // List items carry no kind; give them one for decoding.
                let mut item = item.clone();
                item["kind"] = Value::from("Pod");
                item["apiVersion"] = Value::from("v1");
                set.pods.insert(uid.to_string(), item);
            }
        }
        Ok(v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// Sends the set as a snapshot after checkpointing it and updating the shared view.
    fn send(&mut self, set: &mut PodSet) -> bool {
        self.write_checkpoint(set);
        {
            let mut view = self.view.lock().unwrap_or_else(|e| e.into_inner());
            view.listed = true;
            set.update_view(&mut view);
        }
        self.tx.send(set.snapshot()).is_ok()
    }

    fn watch(
        &mut self,
        set: &mut PodSet,
        rv: &str,
        stop: &Receiver<()>,
    ) -> Result<WatchEnd, ApiError> {
        let path = format!(
            "/api/v1/pods?{}&watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds={WATCH_TIMEOUT_SECONDS}",
            selector(&self.node)
        );
        let reader = self.client.stream(&path)?;
        let mut rv = rv.to_string();
        for line in std::io::BufReader::new(reader).lines() {
            if stop.try_recv().is_ok() {
                return Ok(WatchEnd::Stop);
            }
            let Ok(line) = line else { break };
            if line.trim().is_empty() {
                continue;
            }
            let ev: Value = match serde_json::from_str(&line) {
                Ok(v) => v,
                Err(e) => {
                    warn!(error = %e, "API pod watch: undecodable event; relisting");
                    return Ok(WatchEnd::Expired);
                }
            };
            let obj = &ev["object"];
            if let Some(r) = obj["metadata"]["resourceVersion"].as_str() {
                rv = r.to_string();
            }
            match ev["type"].as_str().unwrap_or_default() {
                "ADDED" | "MODIFIED" => {
                    if let Some(uid) = obj["metadata"]["uid"].as_str() {
                        let mut o = obj.clone();
                        o["kind"] = Value::from("Pod");
                        o["apiVersion"] = Value::from("v1");
                        set.pods.insert(uid.to_string(), o);
                    }
                }
                "DELETED" => {
                    if let Some(uid) = obj["metadata"]["uid"].as_str() {
                        set.pods.remove(uid);
                    }
                }
                "BOOKMARK" => continue,
                "ERROR" => {
                    if obj["code"].as_u64() == Some(410) {
                        info!("API pod watch expired (410 Gone); relisting");
                        return Ok(WatchEnd::Expired);
                    }
                    warn!(status = %obj, "API pod watch error; relisting");
                    return Ok(WatchEnd::Expired);
                }
                other => {
                    debug!(event = other, "API pod watch: unknown event type");
                    continue;
                }
            }
            if !self.send(set) {
                return Ok(WatchEnd::Stop);
            }
        }
        Ok(WatchEnd::Resume(rv))
    }

    /// The loop, until `stop` fires or the receiver of snapshots is gone.
    pub fn run(mut self, stop: Receiver<()>) {
        let mut set = PodSet::default();
        let mut backoff = Duration::from_secs(1);
        let mut rv: Option<String> = None;
        // Used once, when the first list fails: the pods run from the checkpoint until the API
        // server answers.
        let mut checkpoint = self.load_checkpoint();
        let mut answered = false;
        loop {
            if stop.try_recv().is_ok() {
                return;
            }
            let current = match rv.take() {
                Some(r) => r,
                None => match self.list(&mut set) {
                    Ok(r) => {
                        info!(
                            pods = set.pods.len(),
                            "API pod source: listed this node's pods"
                        );
                        answered = true;
                        checkpoint = None;
                        if !self.send(&mut set) {
                            return;
                        }
                        backoff = Duration::from_secs(1);
                        r
                    }
                    Err(e) => {
                        warn!(error = %e, "API pod source: list failed; keeping the pods as they are");
                        if let (false, Some(pods)) = (answered, checkpoint.take()) {
                            // Offline start: run what the API server last assigned to this
                            // node. Nothing is written back and the view stays unlisted.
                            warn!(
                                pods = pods.len(),
                                path = %self.checkpoint_path.display(),
                                "API server unreachable at start: running the checkpointed API pods"
                            );
                            let mut offline = PodSet {
                                pods,
                                ..Default::default()
                            };
                            if self.tx.send(offline.snapshot()).is_err() {
                                return;
                            }
                            set.seen = offline.seen;
                        }
                        if stop.recv_timeout(backoff).is_ok() {
                            return;
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(30));
                        continue;
                    }
                },
            };
            match self.watch(&mut set, &current, &stop) {
                Ok(WatchEnd::Resume(r)) => rv = Some(r),
                Ok(WatchEnd::Expired) => rv = None,
                Ok(WatchEnd::Stop) => return,
                Err(e) if e.status() == Some(410) => rv = None,
                Err(e) => {
                    warn!(error = %e, "API pod source: watch failed; retrying");
                    if stop.recv_timeout(backoff).is_ok() {
                        return;
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    rv = Some(current);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn api_pods_keep_their_identity_and_terminating_ones_leave_the_set() {
        let mut set = PodSet::default();
        let pod = |name: &str, uid: &str| {
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": "prod", "uid": uid, "resourceVersion": "5"},
                   "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "busybox"}]},
                   "status": {"phase": "Pending"}})
        };
        set.pods.insert("u1".into(), pod("a", "u1"));
        let mut gone = pod("b", "u2");
        gone["metadata"]["deletionTimestamp"] = json!("2026-11-22T00:00:00Z");
        set.pods.insert("u2".into(), gone);
        let snap = set.snapshot();
        assert_eq!(snap.source, SourceKind::Api);
        // the deleting pod is sent with its deletionTimestamp.
        assert_eq!(snap.pods.len(), 2);
        assert!(
            snap.pods[1]
                .pod
                .metadata
                .extra
                .contains_key("deletionTimestamp")
        );
        let p = &snap.pods[0].pod;
        assert_eq!(
            (p.metadata.name.as_str(), p.metadata.uid.as_str()),
            ("a", "u1")
        );
        assert_eq!(p.metadata.annotations[CONFIG_SOURCE_ANNOTATION], "api");
        assert!(p.status.is_none());
        // Of a running pod's status only the conditions others own are kept (readiness
        // gates), in the pod and in the checkpoint.
        let mut gated = pod("g", "u9");
        gated["status"]["conditions"] = json!([
            {"type": "Ready", "status": "True"},
            {"type": "example.com/gate", "status": "True"}]);
        let decoded = decode_pod(&gated, "t").expect("decodes");
        let st = decoded.status.expect("foreign conditions kept");
        assert_eq!(st.phase, "");
        let types: Vec<&str> = st.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["example.com/gate"]);
        strip_volatile(&mut gated);
        assert_eq!(
            gated["status"],
            json!({"conditions": [{"type": "example.com/gate", "status": "True"}]})
        );
        // status.qosClass is immutable in the API and the kubelet keeps it (GetPodQOS): it
        // stays in the decoded pod, where `helpers::qos_class` takes it, and in the checkpoint.
        let mut zero = pod("z", "u8");
        zero["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "0"}});
        zero["status"]["qosClass"] = json!("Burstable");
        let decoded = decode_pod(&zero, "t").expect("decodes");
        assert_eq!(crate::api::helpers::qos_class(&decoded), "Burstable");
        assert_eq!(decoded.status.as_ref().map(|s| s.phase.as_str()), Some(""));
        strip_volatile(&mut zero);
        assert_eq!(zero["status"], json!({"qosClass": "Burstable"}));
        let seen = p.metadata.annotations[CONFIG_SEEN_ANNOTATION].clone();
        // config.seen is stable across snapshots.
        assert_eq!(
            set.snapshot().pods[0].pod.metadata.annotations[CONFIG_SEEN_ANNOTATION],
            seen
        );
        // Go's JSON: null is the zero value.
        let nulls = decode_pod(
            &json!({"metadata": {"name": "n", "namespace": "d", "uid": "u3", "labels": null},
                    "spec": {"initContainers": null, "containers": [{"name": "c", "image": "i", "env": null}]}}),
            "t",
        )
        .expect("nulls decode");
        assert!(nulls.spec.init_containers.is_empty() && nulls.spec.containers[0].env.is_empty());
        let e = decode_pod(
            &json!({"metadata": {"name": "x", "namespace": "d"}, "spec": {"containers": 5}}),
            "t",
        )
        .unwrap_err();
        assert_eq!(e.origin, "api:d/x");
        assert!(e.field.contains("containers"), "{e:?}");
    }
}
