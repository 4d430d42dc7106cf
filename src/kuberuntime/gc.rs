//! A pod's garbage (Go's pkg/kubelet/kuberuntime/kuberuntime_gc.go): dead containers and old
//! sandboxes beyond what the status needs, every runtime object of a pod that is going away,
//! and its legacy log symlinks.

use std::collections::BTreeMap;
use std::time::Duration;

use tracing::{debug, warn};

use crate::cri::{ContainerState, ErrorKind, RuntimeError};

use super::manager::RuntimeManager;
use super::state::PodRuntimeState;

impl RuntimeManager<'_> {
    /// Remove dead containers beyond the newest two per name (current + lastState), and old
    /// sandboxes that no kept container needs (the kubelet's GC with MaxPerPodContainer=1).
    /// Returns whether it asked the runtime to remove anything.
    pub fn gc(&self, state: &PodRuntimeState) -> bool {
        let mut removed = false;
        let mut kept: BTreeMap<&str, usize> = BTreeMap::new();
        let mut keep_sandboxes: Vec<&str> = state
            .newest_sandbox()
            .map(|s| s.id.as_str())
            .into_iter()
            .collect();
        for c in &state.containers {
            let n = kept.entry(c.name.as_str()).or_default();
            *n += 1;
            if *n <= 2 || c.state == ContainerState::Running {
                keep_sandboxes.push(&c.sandbox_id);
                continue;
            }
            debug!(pod = %self.full_name, container = %c.name, id = %c.id, "removing dead container");
            removed = true;
            if let Err(e) = self.runtime.remove_container(&c.id) {
                debug!(pod = %self.full_name, container = %c.name, error = %e, "removing dead container failed");
            }
        }
        for sb in &state.sandboxes {
            if !sb.ready && !keep_sandboxes.contains(&sb.id.as_str()) {
                removed = true;
                if let Err(e) = self.runtime.remove_pod_sandbox(&sb.id) {
                    debug!(pod = %self.full_name, sandbox = %sb.id, error = %e, "removing old sandbox failed");
                }
            }
        }
        removed
    }

    /// Removes every container and sandbox of `state` (gone already is fine).
    pub fn remove_all(&self, state: &PodRuntimeState) -> Result<(), RuntimeError> {
        let gone = |r: Result<(), RuntimeError>| {
            r.or_else(|e| if e.is_not_found() { Ok(()) } else { Err(e) })
        };
        for c in &state.containers {
            // A container whose start was interrupted (nanolet killed during StartContainer)
            // can be Created or Unknown in CRI while its task runs; RemoveContainer then fails
            // with "cannot delete running task" forever. Stop anything not Exited first (found
            // by the kill -9 churn test).
            if c.state != ContainerState::Exited {
                if let Err(e) = self.runtime.stop_container(&c.id, Duration::ZERO) {
                    debug!(pod = %self.full_name, container = %c.name, error = %e, "stopping before removal");
                }
            }
            match gone(self.runtime.remove_container(&c.id)) {
                Ok(()) => {}
                // An Exited container whose task still runs (StartContainer interrupted in
                // containerd 1.6): CRI StopContainer will not touch it, so kill and delete the
                // task through containerd's tasks API, then remove again.
                Err(e) if e.kind == ErrorKind::Other => {
                    match self.runtime.remove_orphan_task(&c.id) {
                        Ok(true) => {
                            warn!(pod = %self.full_name, container = %c.name, id = %c.id, error = %e,
                            "killed a task the runtime reported as exited, to remove its container");
                            gone(self.runtime.remove_container(&c.id))?;
                        }
                        Ok(false) => return Err(e),
                        Err(e2) => {
                            debug!(pod = %self.full_name, container = %c.name, error = %e2, "removing orphan task");
                            return Err(e);
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
        for sb in &state.sandboxes {
            gone(self.runtime.remove_pod_sandbox(&sb.id))?;
        }
        Ok(())
    }

    /// Remove the pod's legacy `<pod>_<ns>_<container>-<id>.log` symlinks (those pointing into
    /// its log directory).
    pub fn remove_legacy_links(&self) {
        let prefix = format!(
            "{}_{}_",
            self.pod.metadata.name, self.pod.metadata.namespace
        );
        let dir = &self.settings.container_logs_dir;
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        let ours = self.log_dir();
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with(&prefix) {
                continue;
            }
            if std::fs::read_link(e.path()).is_ok_and(|t| t.starts_with(&ours)) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}
