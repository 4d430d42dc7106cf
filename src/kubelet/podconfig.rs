//! The podconfig thread: the sources' snapshots go through `config::merge` and the merged
//! desired set to the sync loop (upstream, PodConfig's mux feeding the kubelet's configCh).

use std::sync::Arc;
use std::sync::mpsc::{self, Sender};

use tracing::warn;

use super::{DesiredPods, LoopMsg};
use crate::config::merge::PodConfig;
use crate::config::{Snapshot, SourceKind};
use crate::nodestatus::mirror::MirrorFilter;
use crate::status::StatusStore;

/// The podconfig thread: merges the sources' snapshots and hands the desired pods to the sync
/// loop. Each source's rejected manifests are logged (and recorded as an event) once, when
/// they appear, not on every re-list.
pub(super) struct PodConfigLoop {
    pc: PodConfig,
    store: Arc<StatusStore>,
    loop_tx: Sender<LoopMsg>,
    reported: std::collections::HashMap<SourceKind, std::collections::BTreeSet<String>>,
    /// API-server mode: which static pods get mirror pods.
    mirrors: Option<MirrorFilter>,
}

impl PodConfigLoop {
    /// `mirrors`: in API-server mode, which static pods get mirror pods.
    pub(super) fn new(
        pc: PodConfig,
        store: Arc<StatusStore>,
        loop_tx: Sender<LoopMsg>,
        mirrors: Option<MirrorFilter>,
    ) -> PodConfigLoop {
        PodConfigLoop {
            pc,
            store,
            loop_tx,
            reported: std::collections::HashMap::new(),
            mirrors,
        }
    }

    pub(super) fn run(mut self, snaps: mpsc::Receiver<Snapshot>) {
        for snap in snaps.iter() {
            self.report_new_errors(&snap);
            let Some(d) = self.pc.update(snap) else {
                continue;
            };
            let mut errors = d.errors;
            if let Some(m) = &mut self.mirrors {
                m.update(&self.store, &d.pods, d.all_sources_ready, &mut errors);
            }
            let desired = DesiredPods {
                pods: d.pods.into_iter().map(|(uid, sp)| (uid, sp.pod)).collect(),
                errors,
                all_sources_ready: d.all_sources_ready,
            };
            if self
                .loop_tx
                .send(LoopMsg::Desired(Box::new(desired)))
                .is_err()
            {
                return;
            }
        }
    }

    fn report_new_errors(&mut self, snap: &Snapshot) {
        let now: std::collections::BTreeSet<String> =
            snap.errors.iter().map(ToString::to_string).collect();
        let before = self.reported.remove(&snap.source).unwrap_or_default();
        for e in &snap.errors {
            if !before.contains(&e.to_string()) {
                warn!(error = %e, "manifest rejected");
                record_failed_validation(&self.store, e);
            }
        }
        self.reported.insert(snap.source, now);
    }
}

/// A `FailedValidation` Warning event for a rejected manifest. The pod never existed, so the
/// event names the manifest (the file name without extension, or the URL) in `default`.
fn record_failed_validation(store: &StatusStore, e: &crate::config::ManifestError) {
    let name = std::path::Path::new(&e.origin)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !e.origin.contains("://") && !s.is_empty())
        .unwrap_or_else(|| e.origin.clone());
    store.events().record(
        &crate::events::PodRef::pod("default", &name, ""),
        crate::events::EventType::Warning,
        "FailedValidation",
        &e.to_string(),
    );
}
