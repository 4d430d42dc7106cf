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
//! Pods being deleted (`deletionTimestamp` set) leave the desired set: the sync loop stops them
//! with their grace period. (The final DELETE with a UID precondition is a later step.)

use std::collections::BTreeMap;
use std::io::BufRead;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};
use std::time::Duration;

use serde_json::Value;
use tracing::{debug, info, warn};

use super::client::{ApiClient, ApiError};
use crate::pod::Pod;
use crate::pod::naming::{CONFIG_SEEN_ANNOTATION, CONFIG_SOURCE_ANNOTATION};
use crate::source::{ManifestError, Snapshot, SourceKind, SourcePod};

/// The server-side timeout asked for on each watch (the kubelet's reflector uses 5-10 min).
const WATCH_TIMEOUT_SECONDS: u64 = 300;

fn selector(node: &str) -> String {
    format!("fieldSelector=spec.nodeName%3D{node}")
}

/// Decodes one API pod; `Err` names the pod and why.
pub fn decode_pod(v: &Value, seen: &str) -> Result<Pod, ManifestError> {
    let origin = format!(
        "api:{}/{}",
        v["metadata"]["namespace"].as_str().unwrap_or_default(),
        v["metadata"]["name"].as_str().unwrap_or_default()
    );
    let mut pod: Pod = serde_path_to_error::deserialize(v).map_err(|e| ManifestError {
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
    pod.status = None;
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
        let now = crate::source::now_rfc3339_nano();
        for (uid, v) in &self.pods {
            if !v["metadata"]["deletionTimestamp"].is_null() {
                continue;
            }
            let seen = self.seen.entry(uid.clone()).or_insert_with(|| now.clone());
            match decode_pod(v, seen) {
                Ok(pod) => pods.push(SourcePod {
                    origin: format!("api:{}/{}", pod.metadata.namespace, pod.metadata.name),
                    pod,
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
}

impl ApiPodSource {
    pub fn new(client: Arc<ApiClient>, node: &str, tx: Sender<Snapshot>) -> ApiPodSource {
        ApiPodSource {
            client,
            node: node.to_string(),
            tx,
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

    fn send(&self, set: &mut PodSet) -> bool {
        self.tx.send(set.snapshot()).is_ok()
    }

    fn watch(&self, set: &mut PodSet, rv: &str, stop: &Receiver<()>) -> Result<WatchEnd, ApiError> {
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
    pub fn run(self, stop: Receiver<()>) {
        let mut set = PodSet::default();
        let mut backoff = Duration::from_secs(1);
        let mut rv: Option<String> = None;
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
                        if !self.send(&mut set) {
                            return;
                        }
                        backoff = Duration::from_secs(1);
                        r
                    }
                    Err(e) => {
                        warn!(error = %e, "API pod source: list failed; keeping the pods as they are");
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

/// Writes the status of API pods back to the API server: a merge patch of `status` whenever it
/// changed, checked every second (the kubelet's status manager batches the same way).
pub struct StatusWriter {
    client: Arc<ApiClient>,
    store: Arc<crate::status::StatusStore>,
    sent: BTreeMap<String, String>,
}

impl StatusWriter {
    pub fn new(client: Arc<ApiClient>, store: Arc<crate::status::StatusStore>) -> StatusWriter {
        StatusWriter {
            client,
            store,
            sent: BTreeMap::new(),
        }
    }

    /// One pass; returns how many statuses were written.
    pub fn pass(&mut self) -> usize {
        let mut written = 0;
        let pods = self.store.pods();
        let mut live = std::collections::BTreeSet::new();
        for p in pods {
            if p.metadata
                .annotations
                .get(CONFIG_SOURCE_ANNOTATION)
                .map(String::as_str)
                != Some(SourceKind::Api.as_str())
            {
                continue;
            }
            let Some(status) = &p.status else { continue };
            let uid = p.metadata.uid.clone();
            live.insert(uid.clone());
            let body = serde_json::json!({"status": status});
            let text = body.to_string();
            if self.sent.get(&uid) == Some(&text) {
                continue;
            }
            let path = format!(
                "/api/v1/namespaces/{}/pods/{}/status",
                p.metadata.namespace, p.metadata.name
            );
            match self
                .client
                .patch(&path, "application/merge-patch+json", &body)
            {
                Ok(_) => {
                    self.sent.insert(uid, text);
                    written += 1;
                }
                Err(e) if e.status() == Some(404) => {
                    self.sent.insert(uid, text);
                }
                Err(e) => {
                    debug!(pod = %format!("{}/{}", p.metadata.namespace, p.metadata.name), error = %e, "writing pod status failed; will retry");
                }
            }
        }
        self.sent.retain(|u, _| live.contains(u));
        written
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
        assert_eq!(snap.pods.len(), 1);
        let p = &snap.pods[0].pod;
        assert_eq!(
            (p.metadata.name.as_str(), p.metadata.uid.as_str()),
            ("a", "u1")
        );
        assert_eq!(p.metadata.annotations[CONFIG_SOURCE_ANNOTATION], "api");
        assert!(p.status.is_none());
        let seen = p.metadata.annotations[CONFIG_SEEN_ANNOTATION].clone();
        // config.seen is stable across snapshots.
        assert_eq!(
            set.snapshot().pods[0].pod.metadata.annotations[CONFIG_SEEN_ANNOTATION],
            seen
        );
        let e = decode_pod(
            &json!({"metadata": {"name": "x", "namespace": "d"}, "spec": {"containers": 5}}),
            "t",
        )
        .unwrap_err();
        assert_eq!(e.origin, "api:d/x");
        assert!(e.field.contains("containers"), "{e:?}");
    }
}
