//! Pure helpers over the core/v1 subset that several layers share (upstream: the API helpers of
//! `pkg/apis/core/v1/helper`, `qos`, `resource` and `kubelet/types`): sidecars, priority and the
//! critical-pod rule, effective requests, the QoS class, the pod log directory name, and the
//! node pressure condition type. They live here, at the bottom, so that the sync loop,
//! eviction, the prober and the status store can all use them without importing each other.

use super::quantity::parse_quantity;
use super::{Container, Pod};

/// The node conditions the signals map to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[allow(clippy::enum_variant_names)] // the Kubernetes condition types
pub enum NodeCondition {
    MemoryPressure,
    DiskPressure,
    PidPressure,
}

impl NodeCondition {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeCondition::MemoryPressure => "MemoryPressure",
            NodeCondition::DiskPressure => "DiskPressure",
            NodeCondition::PidPressure => "PIDPressure",
        }
    }
}

/// `scheduling.SystemCriticalPriority`: pods at or above it are never evicted.
pub const CRITICAL_PRIORITY: i64 = 2_000_000_000;

/// The priority of a pod: `spec.priority` when set, else the built-in value of its
/// priorityClassName (`system-node-critical` 2000001000, `system-cluster-critical`
/// 2000000000), else 0 (no PriorityClass objects exist without an API server).
pub fn priority(pod: &Pod) -> i64 {
    if let Some(p) = pod.spec.priority {
        return i64::from(p);
    }
    match pod.spec.priority_class_name.as_str() {
        "system-node-critical" => 2_000_001_000,
        "system-cluster-critical" => 2_000_000_000,
        _ => 0,
    }
}

pub fn is_critical(pod: &Pod) -> bool {
    priority(pod) >= CRITICAL_PRIORITY
}

pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// A pod's effective requests (CPU millicores, memory bytes) as the scheduler and the kubelet's
/// admission count them: max(sum of containers (+ sidecars), the largest init container), where
/// a container's request defaults to its limit; plus the pod's overhead ([`pod_overhead`]).
pub fn pod_requests(pod: &Pod) -> (i64, i64) {
    let one = |c: &Container| {
        let get = |k: &str| {
            c.resources
                .requests
                .get(k)
                .or_else(|| c.resources.limits.get(k))
                .and_then(|v| parse_quantity(v).ok())
        };
        (
            get("cpu").map(|q| q.milli_value()).unwrap_or(0),
            get("memory").map(|q| q.value()).unwrap_or(0),
        )
    };
    let mut sum = pod
        .spec
        .containers
        .iter()
        .map(one)
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let mut init_max = (0, 0);
    for c in &pod.spec.init_containers {
        let r = one(c);
        if is_sidecar(c) {
            sum = (sum.0 + r.0, sum.1 + r.1);
        } else {
            init_max = (init_max.0.max(r.0), init_max.1.max(r.1));
        }
    }
    let (oc, om) = pod_overhead(pod);
    (sum.0.max(init_max.0) + oc, sum.1.max(init_max.1) + om)
}

/// Whether `name` is an extended resource (v1helper.IsExtendedResourceName): a qualified name
/// outside the `kubernetes.io/` namespace (`nvidia.com/gpu`, `squat.ai/serial`), not a
/// `requests.` quota name.
pub fn is_extended_resource_name(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

/// A pod's extended resource requests (name -> count), counted as the kubelet's
/// `PodRequests` counts them: max(sum of containers (+ sidecars), the largest init
/// container), a request defaulting to its limit, plus the pod's overhead.
pub fn pod_extended_requests(pod: &Pod) -> std::collections::BTreeMap<String, i64> {
    use std::collections::BTreeMap;
    let one = |c: &Container| {
        let mut m: BTreeMap<String, i64> = BTreeMap::new();
        for (k, v) in c.resources.limits.iter().chain(c.resources.requests.iter()) {
            if is_extended_resource_name(k) {
                // requests after limits: a request wins over the limit it defaults from.
                if let Ok(q) = parse_quantity(v) {
                    m.insert(k.clone(), q.value());
                }
            }
        }
        m
    };
    let add = |a: &mut BTreeMap<String, i64>, b: BTreeMap<String, i64>| {
        for (k, v) in b {
            *a.entry(k).or_default() += v;
        }
    };
    let mut sum = BTreeMap::new();
    for c in &pod.spec.containers {
        add(&mut sum, one(c));
    }
    let mut init_max: BTreeMap<String, i64> = BTreeMap::new();
    for c in &pod.spec.init_containers {
        if is_sidecar(c) {
            add(&mut sum, one(c));
        } else {
            for (k, v) in one(c) {
                let e = init_max.entry(k).or_default();
                *e = (*e).max(v);
            }
        }
    }
    for (k, v) in init_max {
        let e = sum.entry(k).or_default();
        *e = (*e).max(v);
    }
    if let Some(o) = pod.spec.extra.get("overhead").and_then(|o| o.as_object()) {
        for (k, v) in o {
            if let (true, Ok(q)) = (is_extended_resource_name(k), parse_quantity(v)) {
                *sum.entry(k.clone()).or_default() += q.value();
            }
        }
    }
    sum
}

/// The pod's `spec.overhead` (CPU millicores, memory bytes): set from its RuntimeClass, added
/// to its requests and, where it has limits, to its limits (the kubelet's `PodRequests` and
/// `PodLimits`).
pub fn pod_overhead(pod: &Pod) -> (i64, i64) {
    let o = pod.spec.extra.get("overhead");
    let get = |k: &str| {
        o.and_then(|o| o.get(k))
            .and_then(|v| parse_quantity(v).ok())
    };
    (
        get("cpu").map(|q| q.milli_value()).unwrap_or(0),
        get("memory").map(|q| q.value()).unwrap_or(0),
    )
}

/// QoS class from requests/limits (pkg/apis/core/v1/helper/qos): Guaranteed when every
/// container has cpu and memory limits equal to requests, BestEffort when nobody sets any,
/// Burstable otherwise.
pub fn qos_class(pod: &Pod) -> String {
    let all: Vec<_> = pod
        .spec
        .init_containers
        .iter()
        .chain(&pod.spec.containers)
        .collect();
    let any_set = all.iter().any(|c| {
        c.resources
            .requests
            .keys()
            .chain(c.resources.limits.keys())
            .any(|k| k == "cpu" || k == "memory")
    });
    if !any_set {
        return "BestEffort".into();
    }
    let guaranteed = all.iter().all(|c| {
        ["cpu", "memory"].iter().all(|r| {
            let lim = c.resources.limits.get(*r);
            let req = c.resources.requests.get(*r).or(lim);
            match (lim, req) {
                (Some(l), Some(q)) => {
                    let pl = parse_quantity(l).map(|x| x.milli_value()).ok();
                    let pq = parse_quantity(q).map(|x| x.milli_value()).ok();
                    pl.is_some() && pl == pq
                }
                _ => false,
            }
        })
    });
    if guaranteed {
        "Guaranteed".into()
    } else {
        "Burstable".into()
    }
}

/// The pod condition types the kubelet owns (upstream `PodConditionsByKubelet`); every other
/// type (readiness gates' conditions, `DisruptionTarget` set by the API server, ...) belongs to
/// someone else and is kept, never overwritten.
pub const KUBELET_CONDITIONS: &[&str] = &[
    "PodScheduled",
    "Ready",
    "Initialized",
    "ContainersReady",
    "PodReadyToStartContainers",
];

/// Whether the kubelet owns pod condition type `t`.
pub fn is_kubelet_condition(t: &str) -> bool {
    KUBELET_CONDITIONS.contains(&t)
}

/// `<namespace>_<name>_<uid>`: the pod's log directory name.
pub fn pod_log_dir_name(pod: &Pod) -> String {
    format!(
        "{}_{}_{}",
        pod.metadata.namespace, pod.metadata.name, pod.metadata.uid
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// v1helper.IsExtendedResourceName, and PodRequests for extended resources: a limit
    /// stands for the request, containers and sidecars add up, the largest init container
    /// counts when larger, the overhead adds.
    #[test]
    fn extended_requests_count_as_pod_requests_does() {
        assert!(is_extended_resource_name("nvidia.com/gpu"));
        assert!(is_extended_resource_name("squat.ai/serial"));
        for native in [
            "cpu",
            "memory",
            "hugepages-2Mi",
            "kubernetes.io/x",
            "requests.a/b",
        ] {
            assert!(!is_extended_resource_name(native), "{native}");
        }
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "overhead": {"example.com/x": "1", "cpu": "100m"},
                "initContainers": [
                    {"name": "i", "resources": {"limits": {"example.com/x": "5", "example.com/y": 1}}},
                    {"name": "s", "restartPolicy": "Always",
                     "resources": {"limits": {"example.com/y": 2}}}],
                "containers": [
                    {"name": "a", "resources": {"limits": {"example.com/x": 1, "cpu": "1"}}},
                    {"name": "b", "resources": {"requests": {"example.com/x": "2"},
                                                 "limits": {"example.com/x": "2"}}}]}
        }))
        .expect("pod");
        let want: std::collections::BTreeMap<String, i64> = [
            ("example.com/x".to_string(), 6),
            ("example.com/y".to_string(), 2),
        ]
        .into();
        // x: max(1 + 2, init 5) + overhead 1 = 6; y: max(sidecar 2, init 1) = 2.
        assert_eq!(pod_extended_requests(&pod), want);
        assert_eq!(pod_requests(&pod).0, 1100, "cpu: 1 + overhead 100m");
    }
}
