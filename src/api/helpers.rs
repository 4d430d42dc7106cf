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
/// a container's request defaults to its limit.
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
    (sum.0.max(init_max.0), sum.1.max(init_max.1))
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

/// The label keys a kubelet may set on its own Node (k8s.io/kubelet/pkg/apis
/// well_known_labels.go `kubeletLabels`), sorted as `KubeletLabels()` lists them.
pub const KUBELET_LABELS: &[&str] = &[
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "kubernetes.io/arch",
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
];

/// The label key namespaces (and their subdomains) a kubelet may set on its own Node
/// (`kubeletLabelNamespaces`, sorted).
pub const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

/// The prefix of a label key (`""` without one).
fn label_namespace(key: &str) -> &str {
    key.split_once('/').map_or("", |(ns, _)| ns)
}

/// Whether a kubelet may set label `key` on its own Node (`IsKubeletLabel`): one of
/// [`KUBELET_LABELS`], or in a namespace of [`KUBELET_LABEL_NAMESPACES`] or a subdomain of one.
pub fn is_kubelet_label(key: &str) -> bool {
    if KUBELET_LABELS.contains(&key) {
        return true;
    }
    let ns = label_namespace(key);
    KUBELET_LABEL_NAMESPACES
        .iter()
        .any(|allowed| ns == *allowed || ns.strip_suffix(allowed).is_some_and(|s| s.ends_with('.')))
}

/// Whether label `key` is in the `kubernetes.io` or `k8s.io` namespace or a subdomain of one
/// (the kubelet's `isKubernetesLabel`): the NodeRestriction admission plugin refuses such
/// labels on a Node unless [`is_kubelet_label`].
pub fn is_kubernetes_label(key: &str) -> bool {
    let ns = label_namespace(key);
    ["kubernetes.io", "k8s.io"]
        .iter()
        .any(|d| ns == *d || ns.strip_suffix(d).is_some_and(|s| s.ends_with('.')))
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
