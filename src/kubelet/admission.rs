//! The kubelet's GeneralPredicates beyond resources, for admission (pure): node affinity
//! (`nodeSelector` and required `nodeAffinity` against the node's labels and name) and host
//! ports (no two active pods on one hostIP/protocol/port). The kubelet runs them for every pod,
//! static ones too, against the node object it builds for itself.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::api::Pod;

/// The kubelet's rejection of a failed predicate: reason = the predicate's name.
pub const NODE_AFFINITY: (&str, &str) = (
    "NodeAffinity",
    "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
);
pub const NODE_PORTS: (&str, &str) = (
    "NodePorts",
    "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports",
);

/// The kubelet's OS admission checks (pkg/kubelet/lifecycle/predicate.go), which run before the
/// general predicates: the node OS is Linux (Go's runtime.GOOS for a Linux kubelet).
pub const POD_OS_SELECTOR: (&str, &str) = (
    "PodOSSelectorNodeLabelDoesNotMatch",
    "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
);
pub const POD_OS_NOT_SUPPORTED: (&str, &str) = (
    "PodOSNotSupported",
    "Failed to admit pod as the OS field doesn't match node OS",
);

/// Why the kubelet refuses `pod` for its OS: a `kubernetes.io/os` pod label other than
/// `linux` (rejectPodAdmissionBasedOnOSSelector), or a `spec.os` whose name is not `linux`
/// (rejectPodAdmissionBasedOnOSField; `os: {}` has the empty name, refused too).
pub fn os_rejection(pod: &Pod) -> Option<(&'static str, &'static str)> {
    if pod
        .metadata
        .labels
        .get("kubernetes.io/os")
        .is_some_and(|os| os != "linux")
    {
        return Some(POD_OS_SELECTOR);
    }
    match pod.spec.extra.get("os") {
        None | Some(Value::Null) => None,
        Some(os) if os.get("name").and_then(Value::as_str) == Some("linux") => None,
        Some(_) => Some(POD_OS_NOT_SUPPORTED),
    }
}

/// The node's labels as the kubelet sets them on its own Node: `kubernetes.io/hostname`,
/// `kubernetes.io/os`, `kubernetes.io/arch` (and the beta ones), then `--node-labels`.
pub fn node_labels(node_name: &str, extra: &[(String, String)]) -> BTreeMap<String, String> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        other => other,
    };
    let mut l = BTreeMap::new();
    l.insert("kubernetes.io/hostname".to_string(), node_name.to_string());
    l.insert("kubernetes.io/os".to_string(), "linux".to_string());
    l.insert("kubernetes.io/arch".to_string(), arch.to_string());
    l.insert("beta.kubernetes.io/os".to_string(), "linux".to_string());
    l.insert("beta.kubernetes.io/arch".to_string(), arch.to_string());
    for (k, v) in extra {
        l.insert(k.clone(), v.clone());
    }
    l
}

/// `nodeSelector` (every pair equal) and `affinity.nodeAffinity.requiredDuringScheduling
/// IgnoredDuringExecution` (any term; in a term every expression) against the node.
pub fn node_affinity_matches(
    pod: &Pod,
    labels: &BTreeMap<String, String>,
    node_name: &str,
) -> bool {
    if let Some(Value::Object(sel)) = pod.spec.extra.get("nodeSelector") {
        for (k, v) in sel {
            if labels.get(k).map(String::as_str) != Some(v.as_str().unwrap_or_default()) {
                return false;
            }
        }
    }
    let required = pod
        .spec
        .extra
        .get("affinity")
        .and_then(|a| a.get("nodeAffinity"))
        .and_then(|a| a.get("requiredDuringSchedulingIgnoredDuringExecution"));
    let Some(required) = required else {
        return true;
    };
    let terms = required
        .get("nodeSelectorTerms")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    // Terms are ORed; an empty or null term matches nothing.
    terms.iter().any(|term| {
        let exprs = term.get("matchExpressions").and_then(Value::as_array);
        let fields = term.get("matchFields").and_then(Value::as_array);
        let n = exprs.map_or(0, Vec::len) + fields.map_or(0, Vec::len);
        n > 0
            && exprs
                .into_iter()
                .flatten()
                .all(|e| expression_matches(e, |k| labels.get(k).cloned()))
            && fields.into_iter().flatten().all(|e| {
                expression_matches(e, |k| (k == "metadata.name").then(|| node_name.to_string()))
            })
    })
}

/// One NodeSelectorRequirement: In, NotIn, Exists, DoesNotExist, Gt, Lt.
fn expression_matches(e: &Value, get: impl Fn(&str) -> Option<String>) -> bool {
    let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
    let values: Vec<&str> = e
        .get("values")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let have = get(key);
    match e
        .get("operator")
        .and_then(Value::as_str)
        .unwrap_or_default()
    {
        "In" => have.is_some_and(|h| values.contains(&h.as_str())),
        "NotIn" => have.is_none_or(|h| !values.contains(&h.as_str())),
        "Exists" => have.is_some(),
        "DoesNotExist" => have.is_none(),
        op @ ("Gt" | "Lt") => {
            let (Some(h), [v]) = (have, values.as_slice()) else {
                return false;
            };
            match (h.parse::<i64>(), v.parse::<i64>()) {
                (Ok(h), Ok(v)) => {
                    if op == "Gt" {
                        h > v
                    } else {
                        h < v
                    }
                }
                _ => false,
            }
        }
        _ => false,
    }
}

/// (hostIP, protocol, hostPort) of every container port with a host port; hostNetwork pods
/// use their container ports (the API default hostPort = containerPort there).
fn host_ports(pod: &Pod) -> BTreeSet<(String, String, i64)> {
    let mut out = BTreeSet::new();
    for c in pod.spec.init_containers.iter().chain(&pod.spec.containers) {
        for p in &c.ports {
            let port = match p.host_port {
                Some(h) if h > 0 => h as i64,
                _ if pod.spec.host_network => p.container_port as i64,
                _ => continue,
            };
            let ip = if p.host_ip.is_empty() {
                "0.0.0.0"
            } else {
                p.host_ip.as_str()
            };
            let proto = if p.protocol.is_empty() {
                "TCP"
            } else {
                p.protocol.as_str()
            };
            out.insert((ip.to_string(), proto.to_string(), port));
        }
    }
    out
}

/// Does `pod` want a host port that an active pod holds? `0.0.0.0` conflicts with any address.
pub fn host_port_conflict<'a>(pod: &Pod, active: impl IntoIterator<Item = &'a Pod>) -> bool {
    let want = host_ports(pod);
    if want.is_empty() {
        return false;
    }
    let used: BTreeSet<_> = active
        .into_iter()
        .filter(|p| p.metadata.uid != pod.metadata.uid)
        .flat_map(host_ports)
        .collect();
    want.iter().any(|(ip, proto, port)| {
        used.iter().any(|(uip, uproto, uport)| {
            uport == port && uproto == proto && (uip == ip || uip == "0.0.0.0" || ip == "0.0.0.0")
        })
    })
}

// API-pod correctness
/// True for a pod from the API server (`kubernetes.io/config.source: api`).
pub fn is_api_pod(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .get(crate::config::naming::CONFIG_SOURCE_ANNOTATION)
        .is_some_and(|s| s == crate::config::SourceKind::Api.as_str())
}

/// `Succeeded` or `Failed`.
pub fn is_terminal_phase(phase: &str) -> bool {
    matches!(phase, "Succeeded" | "Failed")
}

/// An API pod that reached Succeeded or Failed (evicted, OutOf*, activeDeadlineSeconds), as
/// the API server or this node's own status says, is never admitted again: its phase never
/// goes back (kubernetes/kubernetes#54530, the status manager refuses a transition out of a
/// terminal phase); its controller makes a new pod. Static pods have nowhere else to go, so
/// nanolet re-admits them (documented).
pub fn never_again(pod: &Pod, local_phase: Option<&str>) -> bool {
    is_api_pod(pod)
        && (pod
            .status
            .as_ref()
            .is_some_and(|s| is_terminal_phase(&s.phase))
            || local_phase.is_some_and(is_terminal_phase))
}

/// The grace period to kill an API pod being deleted with: `deletionGracePeriodSeconds`
/// (`kubectl delete --grace-period=N`) when `deletionTimestamp` is set, as the kubelet's
/// `calculateEffectiveGracePeriod`; `None` for a pod not being deleted.
pub fn deletion_grace(pod: &Pod) -> Option<Option<i64>> {
    let extra = &pod.metadata.extra;
    extra
        .get("deletionTimestamp")
        .filter(|v| !v.is_null())
        .map(|_| {
            extra
                .get("deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
}

#[cfg(test)]
mod tests {
    fn api(phase: Option<&str>) -> Pod {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u",
                         "annotations": {"kubernetes.io/config.source": "api"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}
        }))
        .expect("pod");
        if let Some(phase) = phase {
            p.status = Some(crate::api::PodStatus {
                phase: phase.into(),
                ..Default::default()
            });
        }
        p
    }

    /// kubernetes/kubernetes#54530: a terminal API pod is never admitted again, whether the
    /// API server or this node recorded the terminal phase; a static pod is (nanolet's rule).
    #[test]
    fn terminal_api_pods_are_never_admitted_again() {
        assert!(never_again(&api(Some("Failed")), None));
        assert!(never_again(&api(Some("Succeeded")), None));
        assert!(never_again(&api(None), Some("Failed")));
        assert!(!never_again(&api(None), Some("Running")));
        assert!(!never_again(&api(Some("Running")), None));
        let mut file = api(None);
        file.metadata
            .annotations
            .insert("kubernetes.io/config.source".into(), "file".into());
        assert!(!never_again(&file, Some("Failed")));
    }

    /// calculateEffectiveGracePeriod: deletionGracePeriodSeconds wins once deletionTimestamp
    /// is set.
    #[test]
    fn deletion_grace_period_is_taken_from_the_deleted_pod() {
        let mut p = api(None);
        assert_eq!(deletion_grace(&p), None);
        p.metadata.extra.insert(
            "deletionTimestamp".into(),
            serde_json::json!("2026-11-26T00:00:00Z"),
        );
        assert_eq!(deletion_grace(&p), Some(None));
        p.metadata
            .extra
            .insert("deletionGracePeriodSeconds".into(), serde_json::json!(3));
        assert_eq!(deletion_grace(&p), Some(Some(3)));
    }

    use serde_json::json;

    use super::*;
    use crate::api::{Container, ContainerPort};

    fn pod_with(spec: Value) -> Pod {
        let mut p = Pod::default();
        p.metadata.uid = "u1".into();
        if let Value::Object(m) = spec {
            p.spec.extra = m.into_iter().collect();
        }
        p
    }

    /// predicate.go rejectPodAdmissionBasedOnOSField / ...OSSelector: on a Linux node a pod
    /// whose spec.os.name or kubernetes.io/os label is not "linux" is refused, with the
    /// kubelet's reasons and messages.
    #[test]
    fn pods_for_another_os_are_refused_as_the_kubelet_does() {
        assert_eq!(os_rejection(&pod_with(json!({}))), None);
        assert_eq!(
            os_rejection(&pod_with(json!({"os": {"name": "linux"}}))),
            None
        );
        assert_eq!(
            os_rejection(&pod_with(json!({"os": {"name": "windows"}}))),
            Some(POD_OS_NOT_SUPPORTED)
        );
        assert_eq!(
            os_rejection(&pod_with(json!({"os": {}}))),
            Some(POD_OS_NOT_SUPPORTED)
        );
        let mut p = pod_with(json!({}));
        p.metadata
            .labels
            .insert("kubernetes.io/os".into(), "windows".into());
        assert_eq!(os_rejection(&p), Some(POD_OS_SELECTOR));
        assert_eq!(POD_OS_NOT_SUPPORTED.0, "PodOSNotSupported");
    }

    #[test]
    fn node_selector_and_required_affinity_match_the_node_labels() {
        let labels = node_labels(
            "edge-1",
            &[
                ("site".into(), "berlin".into()),
                ("tier".into(), "3".into()),
            ],
        );
        let m = |spec: Value| node_affinity_matches(&pod_with(spec), &labels, "edge-1");
        assert!(m(json!({})));
        assert!(m(
            json!({"nodeSelector": {"kubernetes.io/os": "linux", "site": "berlin"}})
        ));
        assert!(!m(json!({"nodeSelector": {"site": "paris"}})));
        assert!(!m(json!({"nodeSelector": {"gpu": "true"}})));
        let req = |terms: Value| json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}});
        assert!(m(req(
            json!([{"matchExpressions": [{"key": "site", "operator": "In", "values": ["paris", "berlin"]}]}])
        )));
        assert!(!m(req(
            json!([{"matchExpressions": [{"key": "site", "operator": "NotIn", "values": ["berlin"]}]}])
        )));
        // Terms are ORed, expressions in a term ANDed.
        assert!(m(req(json!([
            {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
            {"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}, {"key": "tier", "operator": "Gt", "values": ["2"]}]}
        ]))));
        assert!(!m(req(
            json!([{"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}, {"key": "tier", "operator": "Lt", "values": ["2"]}]}])
        )));
        assert!(m(req(
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["edge-1"]}]}])
        )));
        assert!(!m(req(
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["edge-2"]}]}])
        )));
        // An empty term matches nothing.
        assert!(!m(req(json!([{}]))));
        // Preferred affinity never rejects.
        assert!(m(
            json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}}]}}})
        ));
    }

    #[test]
    fn host_ports_conflict_on_the_same_ip_protocol_and_port() {
        let with_port = |uid: &str, host_port: i32, ip: &str, proto: &str| {
            let mut p = Pod::default();
            p.metadata.uid = uid.into();
            p.spec.containers.push(Container {
                ports: vec![ContainerPort {
                    container_port: 80,
                    host_port: Some(host_port),
                    host_ip: ip.into(),
                    protocol: proto.into(),
                    ..Default::default()
                }],
                ..Default::default()
            });
            p
        };
        let a = with_port("a", 8080, "", "TCP");
        assert!(host_port_conflict(&with_port("b", 8080, "", ""), [&a]));
        assert!(host_port_conflict(
            &with_port("b", 8080, "10.0.0.1", "TCP"),
            [&a]
        ));
        assert!(!host_port_conflict(&with_port("b", 8080, "", "UDP"), [&a]));
        assert!(!host_port_conflict(&with_port("b", 8081, "", "TCP"), [&a]));
        let one = with_port("c", 9000, "10.0.0.1", "TCP");
        assert!(!host_port_conflict(
            &with_port("d", 9000, "10.0.0.2", "TCP"),
            [&one]
        ));
        // A pod never conflicts with itself.
        assert!(!host_port_conflict(&a, [&a]));
    }
}
