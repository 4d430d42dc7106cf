//! Merges the sources' snapshots into the desired pod set.
//!
//! - Each source's latest snapshot replaces its previous one (snapshots are complete).
//! - A source that has not delivered a snapshot yet is not ready; `all_sources_ready` is false
//!   until every expected source delivered one, and the sync loop must not clean up pods it
//!   cannot prove orphaned until then.
//! - Conflicts (the same namespace/name, or UID, from two sources) are resolved
//!   deterministically: the earlier [`SourceKind`] wins (file before http before api); the
//!   loser is rejected with a [`ManifestError`].

use std::collections::{BTreeMap, BTreeSet};

use crate::config::{ManifestError, Snapshot, SourceKind, SourcePod};

/// The merged desired state.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Desired {
    /// Desired pods by UID.
    pub pods: BTreeMap<String, SourcePod>,
    /// Every rejected manifest, sources in order, then cross-source conflicts.
    pub errors: Vec<ManifestError>,
    /// Every expected source delivered at least one snapshot.
    pub all_sources_ready: bool,
    pub ready_sources: BTreeSet<SourceKind>,
}

impl Desired {
    /// Pods by `namespace/name` (the key the kubelet uses for static pods' full names).
    #[cfg(test)]
    pub fn by_full_name(&self) -> BTreeMap<String, &SourcePod> {
        self.pods
            .values()
            .map(|sp| {
                (
                    format!("{}/{}", sp.pod.metadata.namespace, sp.pod.metadata.name),
                    sp,
                )
            })
            .collect()
    }

    /// Whether pods owned by `source` may be cleaned up (that source has reported).
    #[cfg(test)]
    pub fn source_ready(&self, source: SourceKind) -> bool {
        self.ready_sources.contains(&source)
    }
}

/// What changed between two desired sets, by UID.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg(test)]
pub struct Changes {
    pub added: Vec<String>,
    /// Same UID, different pod (only annotations such as config.seen can differ, since the UID
    /// hashes the content).
    pub updated: Vec<String>,
    pub removed: Vec<String>,
}

/// ADD / UPDATE / REMOVE between two desired sets.
#[cfg(test)]
pub fn diff(old: &Desired, new: &Desired) -> Changes {
    let mut c = Changes::default();
    for (uid, sp) in &new.pods {
        match old.pods.get(uid) {
            None => c.added.push(uid.clone()),
            Some(prev) if prev != sp => c.updated.push(uid.clone()),
            Some(_) => {}
        }
    }
    for uid in old.pods.keys() {
        if !new.pods.contains_key(uid) {
            c.removed.push(uid.clone());
        }
    }
    c
}

/// The merger. Feed it every snapshot; it returns the new desired set when it changed.
#[derive(Debug, Clone)]
pub struct PodConfig {
    expected: BTreeSet<SourceKind>,
    latest: BTreeMap<SourceKind, Snapshot>,
    /// Errors of sources that have not answered yet (reported, but they do not make it ready).
    unready_errors: BTreeMap<SourceKind, Vec<ManifestError>>,
    last: Option<Desired>,
}

impl PodConfig {
    pub fn new(expected_sources: &[SourceKind]) -> Self {
        PodConfig {
            expected: expected_sources.iter().copied().collect(),
            latest: BTreeMap::new(),
            unready_errors: BTreeMap::new(),
            last: None,
        }
    }

    /// The current merged set (None before any snapshot).
    #[cfg(test)]
    pub fn current(&self) -> Option<&Desired> {
        self.last.as_ref()
    }

    /// Apply one snapshot; `Some(desired)` when the merged result changed.
    pub fn update(&mut self, snap: Snapshot) -> Option<Desired> {
        if !self.expected.contains(&snap.source) {
            tracing::warn!(
                source = snap.source.as_str(),
                "snapshot from a source that was not expected; merging it anyway"
            );
        }
        if snap.ready {
            self.unready_errors.remove(&snap.source);
            self.latest.insert(snap.source, snap);
        } else if let Some(ready) = self.latest.get_mut(&snap.source) {
            // A source that answered once keeps its pods; only its errors are replaced.
            ready.errors = snap.errors;
        } else {
            self.unready_errors.insert(snap.source, snap.errors);
        }
        let merged = self.merge();
        if self.last.as_ref() == Some(&merged) {
            return None;
        }
        self.last = Some(merged.clone());
        Some(merged)
    }

    fn merge(&self) -> Desired {
        let mut pods: BTreeMap<String, SourcePod> = BTreeMap::new();
        let mut owners: BTreeMap<(String, String), (SourceKind, String)> = BTreeMap::new();
        let mut errors = Vec::new();
        let mut conflicts = Vec::new();
        // BTreeMap iteration: File, Http, Api — the earlier source wins.
        for (kind, snap) in &self.latest {
            errors.extend(snap.errors.iter().cloned());
            for sp in &snap.pods {
                let meta = &sp.pod.metadata;
                let key = (meta.namespace.clone(), meta.name.clone());
                if let Some((owner_kind, owner_origin)) = owners.get(&key) {
                    let reason = format!(
                        "Duplicate value: pod {}/{} is already defined by the {} source ({owner_origin}); the {} source's pod from {} is ignored",
                        key.0,
                        key.1,
                        owner_kind.as_str(),
                        kind.as_str(),
                        sp.origin
                    );
                    tracing::warn!(pod = %format!("{}/{}", key.0, key.1), origin = %sp.origin, "{reason}");
                    conflicts.push(ManifestError {
                        origin: sp.origin.clone(),
                        field: "metadata.name".into(),
                        reason,
                    });
                    continue;
                }
                if pods.contains_key(&meta.uid) {
                    conflicts.push(ManifestError {
                        origin: sp.origin.clone(),
                        field: "metadata.uid".into(),
                        reason: format!(
                            "Duplicate value: {:?} (already used by another source's pod)",
                            meta.uid
                        ),
                    });
                    continue;
                }
                owners.insert(key, (*kind, sp.origin.clone()));
                pods.insert(meta.uid.clone(), sp.clone());
            }
        }
        errors.extend(self.unready_errors.values().flatten().cloned());
        errors.extend(conflicts);
        let ready_sources: BTreeSet<SourceKind> = self.latest.keys().copied().collect();
        let all_sources_ready = self.expected.is_subset(&ready_sources);
        Desired {
            pods,
            errors,
            all_sources_ready,
            ready_sources,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Pod;

    fn sp(name: &str, uid: &str, origin: &str) -> SourcePod {
        let mut pod = Pod::default();
        pod.metadata.name = name.into();
        pod.metadata.namespace = "default".into();
        pod.metadata.uid = uid.into();
        SourcePod {
            pod: std::sync::Arc::new(pod),
            origin: origin.into(),
        }
    }

    fn snap(source: SourceKind, pods: Vec<SourcePod>) -> Snapshot {
        Snapshot {
            source,
            pods,
            errors: Vec::new(),
            ready: true,
        }
    }

    /// Issue 21 (the heap per pod): the source's latest snapshot, the last merged set and the
    /// merged set handed on hold the pod the source sent, not a copy each.
    #[test]
    fn merged_sets_share_the_pods_a_source_sent() {
        use std::sync::Arc;
        let mut pc = PodConfig::new(&[SourceKind::File]);
        let s = snap(SourceKind::File, vec![sp("a-n", "u1", "/m/a.yaml")]);
        let sent = s.pods[0].pod.clone();
        let d = pc
            .update(s)
            .unwrap_or_else(|| panic!("first update must report"));
        assert!(Arc::ptr_eq(&d.pods["u1"].pod, &sent), "handed on");
        let last = pc.current().unwrap_or_else(|| panic!("a merged set"));
        assert!(Arc::ptr_eq(&last.pods["u1"].pod, &sent), "last merged set");
        assert!(
            Arc::ptr_eq(&pc.latest[&SourceKind::File].pods[0].pod, &sent),
            "latest snapshot"
        );
        // Here, the merger's latest snapshot and last merged set, the set handed on: four
        // owners of one pod.
        assert_eq!(Arc::strong_count(&sent), 4);
    }

    /// `kubernetes.io/config.seen` stays the time the UID was first seen (`SeenCache`), and
    /// issue 21: a pod shared with a source's earlier snapshot is copied only when that
    /// annotation has to change; the shared one is left as it was.
    #[test]
    fn seen_cache_copies_a_shared_pod_only_to_change_its_seen_time() {
        use crate::config::SeenCache;
        use crate::config::naming::CONFIG_SEEN_ANNOTATION;
        use std::sync::Arc;
        let with_seen = |t: &str| {
            let mut p = sp("a-n", "u1", "/m/a.yaml");
            Arc::make_mut(&mut p.pod)
                .metadata
                .annotations
                .insert(CONFIG_SEEN_ANNOTATION.into(), t.into());
            p
        };
        let mut cache = SeenCache::default();
        let mut first = vec![with_seen("t1")];
        cache.stabilize(&mut first);
        let kept = first[0].pod.clone();
        // The next listing's pod is seen at t2: rewritten to t1 in a copy of its own.
        let mut second = vec![with_seen("t2")];
        let shared = second[0].pod.clone();
        cache.stabilize(&mut second);
        assert_eq!(
            second[0].pod.metadata.annotations[CONFIG_SEEN_ANNOTATION],
            "t1"
        );
        assert!(!Arc::ptr_eq(&second[0].pod, &shared));
        assert_eq!(shared.metadata.annotations[CONFIG_SEEN_ANNOTATION], "t2");
        // A pod that already carries t1 is left shared.
        let mut third = vec![SourcePod {
            pod: kept.clone(),
            origin: "/m/a.yaml".into(),
        }];
        cache.stabilize(&mut third);
        assert!(Arc::ptr_eq(&third[0].pod, &kept));
    }

    #[test]
    fn readiness_and_change_detection() {
        let mut pc = PodConfig::new(&[SourceKind::File, SourceKind::Http]);
        let d = pc.update(snap(SourceKind::File, vec![sp("a-n", "u1", "/m/a.yaml")]));
        let d = d.unwrap_or_else(|| panic!("first update must report"));
        assert!(!d.all_sources_ready);
        assert_eq!(
            d.ready_sources.iter().copied().collect::<Vec<_>>(),
            vec![SourceKind::File]
        );
        assert!(d.source_ready(SourceKind::File) && !d.source_ready(SourceKind::Http));
        assert_eq!(d.pods.len(), 1);
        // Same snapshot again: no change.
        assert!(
            pc.update(snap(SourceKind::File, vec![sp("a-n", "u1", "/m/a.yaml")]))
                .is_none()
        );
        // Http's first (empty) snapshot changes readiness.
        let d = pc
            .update(snap(SourceKind::Http, vec![]))
            .unwrap_or_else(|| panic!("readiness change"));
        assert!(d.all_sources_ready);
        assert_eq!(pc.current(), Some(&d));
    }

    /// A source that never answered stays not ready (orphan cleanup stays gated, as the
    /// kubelet's `seenSources`), yet its errors are reported; its first good snapshot clears them.
    #[test]
    fn errors_of_a_source_that_never_answered_are_reported_without_readiness() {
        let mut pc = PodConfig::new(&[SourceKind::File, SourceKind::Http]);
        pc.update(snap(SourceKind::File, vec![]));
        let err = ManifestError {
            origin: "https://x/pods".into(),
            field: String::new(),
            reason: "invalid peer certificate: UnknownIssuer".into(),
        };
        let d = pc
            .update(Snapshot {
                source: SourceKind::Http,
                pods: vec![],
                errors: vec![err.clone()],
                ready: false,
            })
            .unwrap_or_else(|| panic!("errors change the result"));
        assert_eq!(d.errors, vec![err.clone()]);
        assert!(!d.all_sources_ready && !d.source_ready(SourceKind::Http));
        let d = pc
            .update(snap(
                SourceKind::Http,
                vec![sp("web-n", "h1", "https://x/pods")],
            ))
            .unwrap_or_else(|| panic!("answered"));
        assert!(d.errors.is_empty() && d.all_sources_ready && d.pods.len() == 1);
        // Not ready again later (cannot happen with today's sources): pods are kept.
        let d = pc
            .update(Snapshot {
                source: SourceKind::Http,
                pods: vec![],
                errors: vec![err.clone()],
                ready: false,
            })
            .unwrap_or_else(|| panic!("new errors"));
        assert_eq!((d.pods.len(), d.errors.len()), (1, 1));
        assert!(d.all_sources_ready);
    }

    #[test]
    fn file_wins_conflicts() {
        let mut pc = PodConfig::new(&[SourceKind::File, SourceKind::Http]);
        // Http arrives first, then file defines the same name: file wins regardless of order.
        pc.update(snap(
            SourceKind::Http,
            vec![
                sp("web-n", "h1", "http://x"),
                sp("other-n", "h2", "http://x"),
            ],
        ));
        let d = pc.update(snap(
            SourceKind::File,
            vec![sp("web-n", "f1", "/m/web.yaml")],
        ));
        let d = d.unwrap_or_else(|| panic!("changed"));
        let uids: Vec<&str> = d.pods.keys().map(String::as_str).collect();
        assert_eq!(uids, vec!["f1", "h2"]);
        assert_eq!(d.errors.len(), 1);
        assert_eq!(d.errors[0].origin, "http://x");
        assert!(d.errors[0].reason.contains("/m/web.yaml"));
        assert_eq!(
            d.by_full_name()
                .get("default/web-n")
                .map(|p| p.origin.as_str()),
            Some("/m/web.yaml")
        );
    }

    #[test]
    fn errors_are_carried_and_diff() {
        let mut pc = PodConfig::new(&[SourceKind::File]);
        let mut s = snap(SourceKind::File, vec![sp("a-n", "u1", "/m/a.yaml")]);
        s.errors.push(ManifestError {
            origin: "/m/b.yaml".into(),
            field: "kind".into(),
            reason: "x".into(),
        });
        let d1 = pc.update(s).unwrap_or_else(|| panic!("changed"));
        assert_eq!(d1.errors.len(), 1);
        let d2 = pc
            .update(snap(SourceKind::File, vec![sp("b-n", "u2", "/m/b.yaml")]))
            .unwrap_or_else(|| panic!("changed"));
        assert!(d2.errors.is_empty());
        let c = diff(&d1, &d2);
        assert_eq!(c.added, vec!["u2"]);
        assert_eq!(c.removed, vec!["u1"]);
        assert!(c.updated.is_empty());
        // Removing everything is a change; an identical empty snapshot is not.
        assert!(pc.update(snap(SourceKind::File, vec![])).is_some());
        assert!(pc.update(snap(SourceKind::File, vec![])).is_none());
    }
}
