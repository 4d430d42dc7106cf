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

/// A pod's or container's CPU (millicores) and memory (bytes), each `None` where nothing
/// names it (a Go `ResourceList` without the key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuMemory {
    pub cpu_millis: Option<i64>,
    pub memory_bytes: Option<i64>,
}

impl CpuMemory {
    /// `addResourceList`: the sum, for each resource either names.
    fn add(self, o: CpuMemory) -> CpuMemory {
        let add = |a: Option<i64>, b: Option<i64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
        };
        CpuMemory {
            cpu_millis: add(self.cpu_millis, o.cpu_millis),
            memory_bytes: add(self.memory_bytes, o.memory_bytes),
        }
    }

    /// `maxResourceList`: the larger, for each resource either names.
    fn max(self, o: CpuMemory) -> CpuMemory {
        let max = |a: Option<i64>, b: Option<i64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        CpuMemory {
            cpu_millis: max(self.cpu_millis, o.cpu_millis),
            memory_bytes: max(self.memory_bytes, o.memory_bytes),
        }
    }
}

fn cpu_memory(m: &std::collections::BTreeMap<String, serde_json::Value>) -> CpuMemory {
    let q = |k: &str| m.get(k).and_then(|v| parse_quantity(v).ok());
    CpuMemory {
        cpu_millis: q("cpu").map(|q| q.milli_value()),
        memory_bytes: q("memory").map(|q| q.value()),
    }
}

/// A container's requests after the API's defaulting (`SetDefaults_Container`: a resource
/// with a limit and no request requests its limit).
pub fn container_requests(c: &Container) -> CpuMemory {
    let (r, l) = (
        cpu_memory(&c.resources.requests),
        cpu_memory(&c.resources.limits),
    );
    CpuMemory {
        cpu_millis: r.cpu_millis.or(l.cpu_millis),
        memory_bytes: r.memory_bytes.or(l.memory_bytes),
    }
}

/// A container's limits.
pub fn container_limits(c: &Container) -> CpuMemory {
    cpu_memory(&c.resources.limits)
}

/// The kubelet's `resourcehelper.AggregateContainerRequests` / `AggregateContainerLimits`
/// (component-helpers, KEP 753's formula) over `per_container`: the sum of the containers and
/// the sidecars (restartable init containers), or, where larger, what an init container needs
/// while it runs (itself plus the sidecars started before it). Without the overhead.
pub fn aggregate_containers(
    pod: &Pod,
    per_container: impl Fn(&Container) -> CpuMemory,
) -> CpuMemory {
    let mut total = pod
        .spec
        .containers
        .iter()
        .map(&per_container)
        .fold(CpuMemory::default(), CpuMemory::add);
    let (mut sidecars, mut init) = (CpuMemory::default(), CpuMemory::default());
    for c in &pod.spec.init_containers {
        let r = per_container(c);
        let running = if is_sidecar(c) {
            total = total.add(r);
            sidecars = sidecars.add(r);
            sidecars
        } else {
            r.add(sidecars)
        };
        init = init.max(running);
    }
    total.max(init)
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

/// The pod's QoS class as the kubelet takes it (pkg/apis/core/helper/qos `GetPodQOS`): the
/// API's `status.qosClass` when set (it is immutable in the API, and the kubelet uses the
/// persisted value for cgroups and status alike), else [`compute_qos_class`].
pub fn qos_class(pod: &Pod) -> String {
    match pod.status.as_ref().map(|s| s.qos_class.as_str()) {
        Some(q) if !q.is_empty() => q.to_string(),
        _ => compute_qos_class(pod),
    }
}

/// `ComputePodQOS` over the containers and init containers: only cpu and memory count, and
/// only quantities above zero (`cpu: "0"` is as good as unset); BestEffort when no container
/// has any; Guaranteed when every container has cpu and memory limits above zero and, per
/// resource, the summed requests equal the summed limits (a request left out counts as its
/// limit, as API defaulting fills it in); Burstable otherwise.
pub fn compute_qos_class(pod: &Pod) -> String {
    use std::collections::BTreeMap;
    let positive = |v: &serde_json::Value| {
        parse_quantity(v)
            .ok()
            .map(|q| i128::from(q.milli_value()))
            .filter(|m| *m > 0)
    };
    let mut requests: BTreeMap<&str, i128> = BTreeMap::new();
    let mut limits: BTreeMap<&str, i128> = BTreeMap::new();
    let mut guaranteed = true;
    for c in pod.spec.containers.iter().chain(&pod.spec.init_containers) {
        let mut limited = 0;
        for r in ["cpu", "memory"] {
            let limit = c.resources.limits.get(r).and_then(positive);
            let request = match c.resources.requests.get(r) {
                Some(v) => positive(v),
                None => limit,
            };
            if let Some(q) = request {
                *requests.entry(r).or_default() += q;
            }
            if let Some(q) = limit {
                *limits.entry(r).or_default() += q;
                limited += 1;
            }
        }
        if limited < 2 {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort".into();
    }
    if guaranteed && requests == limits {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(containers: serde_json::Value, qos: Option<&str>) -> Pod {
        let mut v =
            serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": containers}});
        if let Some(q) = qos {
            v["status"] = serde_json::json!({"qosClass": q});
        }
        serde_json::from_value(v).expect("pod")
    }

    /// pkg/apis/core/helper/qos ComputePodQOS: only quantities above zero count (zero cpu and
    /// memory are BestEffort, not Burstable); Guaranteed compares the summed requests with the
    /// summed limits per resource, every container needing cpu and memory limits.
    #[test]
    fn qos_class_is_computed_as_upstream() {
        use serde_json::json;
        let zero = json!([{"name": "a", "image": "i",
            "resources": {"requests": {"cpu": "0", "memory": "0"}, "limits": {"cpu": "0"}}}]);
        assert_eq!(compute_qos_class(&pod(zero, None)), "BestEffort");
        let g = json!([{"name": "a", "image": "i", "resources": {
            "requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1000m", "memory": "1Gi"}}}]);
        assert_eq!(compute_qos_class(&pod(g, None)), "Guaranteed");
        // Sums, not per container: 1+2 requested, 2+1 limited.
        let sums = json!([
            {"name": "a", "image": "i", "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                "limits": {"cpu": "2", "memory": "1Gi"}}},
            {"name": "b", "image": "i", "resources": {"requests": {"cpu": "2", "memory": "1Gi"},
                "limits": {"cpu": "1", "memory": "1Gi"}}}]);
        assert_eq!(compute_qos_class(&pod(sums, None)), "Guaranteed");
        // A container without a memory limit: Burstable; an extended resource does not count.
        let b = json!([{"name": "a", "image": "i", "resources": {"limits": {"cpu": "1", "example.com/x": "1"}}}]);
        assert_eq!(compute_qos_class(&pod(b, None)), "Burstable");
        let only_ext =
            json!([{"name": "a", "image": "i", "resources": {"limits": {"example.com/x": "1"}}}]);
        assert_eq!(compute_qos_class(&pod(only_ext, None)), "BestEffort");
    }

    /// GetPodQOS: the API's status.qosClass (immutable there) wins over the computation.
    #[test]
    fn qos_class_keeps_the_api_value() {
        let zero = serde_json::json!([{"name": "a", "image": "i", "resources": {"requests": {"cpu": "0"}}}]);
        assert_eq!(
            qos_class(&pod(zero.clone(), Some("Burstable"))),
            "Burstable"
        );
        assert_eq!(qos_class(&pod(zero, None)), "BestEffort");
    }

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
