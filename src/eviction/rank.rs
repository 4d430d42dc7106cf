//! Victim choice: the kubelet's ranking, and nanolet's critical-pod rule.
//!
//! The kubelet ranks (pkg/kubelet/eviction/helpers.go):
//! - memory: pods whose usage exceeds their requests first, then by priority (lowest first),
//!   then by usage minus requests (largest first);
//! - ephemeral storage: the same with ephemeral-storage usage and requests;
//! - inodes and PIDs: by priority only (nanolet breaks ties by usage, largest first).
//!
//! Edge rule: the kubelet never evicts static pods, because they are all "critical". Here every
//! pod is static, so nanolet evicts them, except pods whose priority is at least
//! [`CRITICAL_PRIORITY`] (`system-cluster-critical`, `system-node-critical`, or
//! `spec.priority` >= 2000000000).

#[cfg(test)]
use std::cmp::Ordering;

use super::threshold::Resource;
use crate::api::helpers::CRITICAL_PRIORITY;

/// One pod's measured usage of the resource being ranked, and its request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub uid: String,
    pub priority: i64,
    pub usage: i64,
    pub request: i64,
}

/// Sorts candidates, the first to evict first.
pub fn rank(resource: Resource, pods: &mut [Candidate]) {
    match resource {
        Resource::Memory | Resource::EphemeralStorage => pods.sort_by(|a, b| {
            let exceeds = |c: &Candidate| c.usage > c.request;
            // Exceeding requests first.
            exceeds(b)
                .cmp(&exceeds(a))
                .then(a.priority.cmp(&b.priority))
                .then((b.usage - b.request).cmp(&(a.usage - a.request)))
                .then_with(|| a.uid.cmp(&b.uid))
        }),
        Resource::Inodes | Resource::Pids => pods.sort_by(|a, b| {
            a.priority
                .cmp(&b.priority)
                .then(b.usage.cmp(&a.usage))
                .then_with(|| a.uid.cmp(&b.uid))
        }),
    }
}

/// The first candidate that may be evicted (critical pods never are).
pub fn victim(resource: Resource, mut pods: Vec<Candidate>) -> Option<Candidate> {
    pods.retain(|c| c.priority < CRITICAL_PRIORITY);
    rank(resource, &mut pods);
    pods.into_iter().next()
}

/// Ordering helper for tests and callers that only need a comparison.
#[cfg(test)]
pub fn compare(resource: Resource, a: &Candidate, b: &Candidate) -> Ordering {
    let mut v = [a.clone(), b.clone()];
    rank(resource, &mut v);
    if v[0] == *a {
        Ordering::Less
    } else {
        Ordering::Greater
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Pod;
    use crate::api::helpers::{is_critical, priority};

    fn c(uid: &str, priority: i64, usage: i64, request: i64) -> Candidate {
        Candidate {
            uid: uid.into(),
            priority,
            usage,
            request,
        }
    }

    /// "pods whose usage exceeds requests first, then priority, then usage - requests".
    #[test]
    fn memory_ranking_is_the_kubelets() {
        let mut v = vec![
            c("guaranteed-big", 0, 900, 1000), // under its request
            c("besteffort-small", 0, 10, 0),   // over (request 0)
            c("burstable-over", 0, 300, 100),  // over by 200
            c("besteffort-high-prio", 100, 500, 0),
        ];
        rank(Resource::Memory, &mut v);
        let order: Vec<&str> = v.iter().map(|c| c.uid.as_str()).collect();
        assert_eq!(
            order,
            [
                "burstable-over",
                "besteffort-small",
                "besteffort-high-prio",
                "guaranteed-big"
            ]
        );
    }

    /// Inodes and PIDs: by priority only (usage only breaks ties).
    #[test]
    fn pid_and_inode_ranking_is_by_priority() {
        let mut v = vec![c("a", 10, 1, 0), c("b", 0, 1000, 0), c("c", 0, 5000, 0)];
        rank(Resource::Pids, &mut v);
        assert_eq!(v[0].uid, "c");
        assert_eq!(v[2].uid, "a");
        assert_eq!(compare(Resource::Inodes, &v[1], &v[2]), Ordering::Less);
    }

    /// nanolet's edge rule: priority >= 2000000000 is never evicted; everything else is.
    #[test]
    fn critical_pods_are_never_victims() {
        let v = vec![c("crit", 2_000_001_000, 10_000, 0), c("normal", 0, 1, 0)];
        assert_eq!(victim(Resource::Memory, v).unwrap().uid, "normal");
        assert!(victim(Resource::Memory, vec![c("crit", 2_000_000_000, 1, 0)]).is_none());
        let mut pod = Pod::default();
        assert!(!is_critical(&pod));
        pod.spec.priority_class_name = "system-node-critical".into();
        assert_eq!(priority(&pod), 2_000_001_000);
        assert!(is_critical(&pod));
        pod.spec.priority_class_name = "system-cluster-critical".into();
        assert!(is_critical(&pod));
        // spec.priority wins over the class name.
        pod.spec.priority = Some(5);
        assert!(!is_critical(&pod));
        pod.spec.priority_class_name.clear();
        pod.spec.priority = Some(2_000_000_000);
        assert!(is_critical(&pod));
    }
}
