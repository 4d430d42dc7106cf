//! The pod status writer of API-server mode (the kubelet's status manager, upstream
//! pkg/kubelet/status/status_manager.go): statuses from the status store go to the API server
//! as merge patches, for API pods and (through their mirror pods) for static pods.

use std::collections::BTreeMap;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::{debug, info, warn};

use crate::apiclient::client::ApiClient;
use crate::config::SourceKind;
use crate::config::apiserver::ApiView;
use crate::config::naming::{CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION};

/// Writes the status of API pods (and of static pods to their mirror pods) back to the API
/// server: a merge patch of `status` whenever it changed, checked every second (the kubelet's
/// status manager batches the same way). It also sends the final DELETE of gracefully deleted
/// pods once they stopped, and runs the mirror manager.
pub struct StatusWriter {
    client: Arc<ApiClient>,
    store: Arc<crate::status::StatusStore>,
    runtime: Arc<dyn crate::cri::Runtime>,
    view: Arc<Mutex<ApiView>>,
    mirrors: Option<super::mirror::MirrorManager>,
    /// Status key (pod UID, plus the mirror UID for static pods) -> the body last sent.
    sent: BTreeMap<String, String>,
    /// Terminating UIDs whose final DELETE went out.
    deleted: std::collections::BTreeSet<String>,
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
        }
    }

    /// One pass; returns how many statuses were written.
    pub fn pass(&mut self) -> usize {
        if let Some(m) = &mut self.mirrors {
            m.pass();
        }
        let (listed, mirrors, terminating) = {
            let v = self.view.lock().unwrap_or_else(|e| e.into_inner());
            (v.listed, v.mirrors.clone(), v.terminating.clone())
        };
        if !listed {
            // Offline start: nothing to write to until the API server answered.
            return 0;
        }
        let mut written = 0;
        let pods = self.store.pods();
        let mut live = std::collections::BTreeSet::new();
        for p in pods {
            let full = format!("{}/{}", p.metadata.namespace, p.metadata.name);
            let ann = &p.metadata.annotations;
            let key = match ann.get(CONFIG_SOURCE_ANNOTATION).map(String::as_str) {
                Some(s) if s == SourceKind::Api.as_str() => p.metadata.uid.clone(),
                // A static pod: its status goes to its mirror pod, when one matches it.
                Some(_) => match (mirrors.get(&full), ann.get(CONFIG_HASH_ANNOTATION)) {
                    (Some(m), Some(hash)) if !m.deleting && m.hash == *hash => {
                        format!("{}/{}", p.metadata.uid, m.uid)
                    }
                    _ => continue,
                },
                None => continue,
            };
            let Some(status) = &p.status else { continue };
            live.insert(key.clone());
            let body = serde_json::json!({"status": status});
            let text = body.to_string();
            if self.sent.get(&key) == Some(&text) {
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
                    self.sent.insert(key, text);
                    written += 1;
                }
                Err(e) if e.status() == Some(404) => {
                    self.sent.insert(key, text);
                }
                Err(e) => {
                    debug!(pod = %full, error = %e, "writing pod status failed; will retry");
                }
            }
        }
        self.sent.retain(|u, _| live.contains(u));
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

    /// The final DELETE (grace 0, UID precondition) of pods being deleted whose containers and
    /// sandbox have stopped: only then does the pod leave the API server, as with the kubelet.
    fn finish_deletions(&mut self, terminating: &BTreeMap<String, (String, String)>) {
        self.deleted.retain(|u| terminating.contains_key(u));
        for (uid, (ns, name)) in terminating {
            if self.deleted.contains(uid) || !self.stopped(uid) {
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
