//! What the runtime has for one pod, read through the seam and grouped by pod UID.

use std::collections::BTreeMap;

use crate::cri::{
    ANN_CONTAINER_HASH, ANN_CONTAINER_TYPE, ANN_RESTART_COUNT, ContainerState, LABEL_MANAGED_BY,
    LABEL_POD_UID, Runtime, RuntimeError, SandboxState,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedSandbox {
    pub id: String,
    pub attempt: u32,
    pub ready: bool,
    pub created_at: i64,
    pub ip: String,
    pub additional_ips: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedContainer {
    pub id: String,
    pub sandbox_id: String,
    pub name: String,
    /// From the `io.kubernetes.container.restartCount` annotation.
    pub restart_count: u32,
    /// From the `io.kubernetes.container.hash` annotation.
    pub hash: String,
    /// "init", "sidecar", "regular" or "ephemeral".
    pub kind: String,
    pub state: ContainerState,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    pub image: String,
    pub image_ref: String,
    pub log_path: String,
}

/// Everything the runtime holds for one pod UID. Sandboxes and containers are sorted newest
/// first (by creation time), as the kubelet's `PodStatus` is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodRuntimeState {
    pub sandboxes: Vec<ObservedSandbox>,
    pub containers: Vec<ObservedContainer>,
}

impl PodRuntimeState {
    /// The newest container with this name.
    pub fn latest(&self, name: &str) -> Option<&ObservedContainer> {
        self.containers.iter().find(|c| c.name == name)
    }

    /// The newest exited container with this name (what backoff and lastState look at).
    pub fn latest_exited(&self, name: &str) -> Option<&ObservedContainer> {
        self.containers
            .iter()
            .find(|c| c.name == name && c.state == ContainerState::Exited)
    }

    /// The second newest container with this name (its lastState).
    pub fn previous(&self, name: &str) -> Option<&ObservedContainer> {
        self.containers.iter().filter(|c| c.name == name).nth(1)
    }

    pub fn running(&self) -> impl Iterator<Item = &ObservedContainer> {
        self.containers
            .iter()
            .filter(|c| c.state == ContainerState::Running)
    }

    pub fn newest_sandbox(&self) -> Option<&ObservedSandbox> {
        self.sandboxes.first()
    }

    pub fn is_empty(&self) -> bool {
        self.sandboxes.is_empty() && self.containers.is_empty()
    }
}

/// Read the runtime's view of the pod `uid` (only objects nanolet created).
pub fn observe_pod(rt: &dyn Runtime, uid: &str) -> Result<PodRuntimeState, RuntimeError> {
    let ours = |labels: &BTreeMap<String, String>| {
        labels.get(LABEL_POD_UID).map(String::as_str) == Some(uid)
            && labels.contains_key(LABEL_MANAGED_BY)
    };
    let mut state = PodRuntimeState::default();
    for sb in rt
        .list_pod_sandboxes_of_pod(uid)?
        .into_iter()
        .filter(|s| ours(&s.labels))
    {
        let (ip, additional_ips) = if sb.state == SandboxState::Ready {
            match rt.pod_sandbox_status(&sb.id) {
                Ok(st) => (st.ip, st.additional_ips),
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            }
        } else {
            (String::new(), vec![])
        };
        state.sandboxes.push(ObservedSandbox {
            id: sb.id,
            attempt: sb.attempt,
            ready: sb.state == SandboxState::Ready,
            created_at: sb.created_at,
            ip,
            additional_ips,
        });
    }
    for c in rt
        .list_containers_of_pod(uid)?
        .into_iter()
        .filter(|c| ours(&c.labels))
    {
        let st = match rt.container_status(&c.id) {
            Ok(st) => st,
            Err(e) if e.is_not_found() => continue, // removed between list and status
            Err(e) => return Err(e),
        };
        let ann = |k: &str| {
            st.annotations
                .get(k)
                .cloned()
                .or_else(|| c.annotations.get(k).cloned())
        };
        state.containers.push(ObservedContainer {
            id: c.id,
            sandbox_id: c.sandbox_id,
            name: c.name,
            restart_count: ann(ANN_RESTART_COUNT)
                .and_then(|v| v.parse().ok())
                .unwrap_or(st.attempt),
            hash: ann(ANN_CONTAINER_HASH).unwrap_or_default(),
            kind: ann(ANN_CONTAINER_TYPE).unwrap_or_else(|| "regular".into()),
            state: st.state,
            created_at: st.created_at,
            started_at: st.started_at,
            finished_at: st.finished_at,
            exit_code: st.exit_code,
            reason: st.reason,
            message: st.message,
            image: st.image,
            image_ref: st.image_ref,
            log_path: st.log_path,
        });
    }
    state.sandboxes.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then(b.attempt.cmp(&a.attempt))
    });
    state.containers.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then(b.restart_count.cmp(&a.restart_count))
    });
    Ok(state)
}
