//! A container's labels and annotations (Go's pkg/kubelet/kuberuntime/labels.go): what the
//! runtime keeps for nanolet and `state::observe_pod` reads back.

use std::collections::BTreeMap;

use crate::api::{Container, Pod};
use crate::cri::{
    ANN_CONTAINER_HASH, ANN_CONTAINER_TYPE, ANN_POD_TERMINATION_GRACE, ANN_RESTART_COUNT,
    ANN_TERMINATION_MESSAGE_PATH, ANN_TERMINATION_MESSAGE_POLICY, LABEL_CONTAINER_NAME,
    LABEL_MANAGED_BY, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID,
};

use super::actions::container_hash;

/// What a container is to its pod (the `io.kubernetes.container.type` annotation nanolet
/// writes, read back as `ObservedContainer::kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerType {
    Init,
    /// An init container with `restartPolicy: Always`.
    Sidecar,
    Regular,
    /// One of `spec.ephemeralContainers`: started once, never restarted.
    Ephemeral,
}

impl ContainerType {
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerType::Init => "init",
            ContainerType::Sidecar => "sidecar",
            ContainerType::Regular => "regular",
            ContainerType::Ephemeral => "ephemeral",
        }
    }
}

impl std::fmt::Display for ContainerType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `newContainerLabels`: pod name, namespace and UID, container name, and nanolet's mark.
pub fn container_labels(p: &Pod, c: &Container) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    labels.insert(LABEL_POD_NAME.to_string(), p.metadata.name.clone());
    labels.insert(
        LABEL_POD_NAMESPACE.to_string(),
        p.metadata.namespace.clone(),
    );
    labels.insert(LABEL_POD_UID.to_string(), p.metadata.uid.clone());
    labels.insert(LABEL_CONTAINER_NAME.to_string(), c.name.clone());
    labels.insert(LABEL_MANAGED_BY.to_string(), "nanolet".into());
    labels
}

/// `newContainerAnnotations`: spec hash, restart count, termination message path and policy,
/// the pod's grace period, and the container type.
pub fn container_annotations(
    c: &Container,
    kind: ContainerType,
    restart_count: u32,
    grace_seconds: i64,
) -> BTreeMap<String, String> {
    let mut ann = BTreeMap::new();
    ann.insert(ANN_CONTAINER_HASH.to_string(), container_hash(c));
    ann.insert(ANN_RESTART_COUNT.to_string(), restart_count.to_string());
    ann.insert(
        ANN_TERMINATION_MESSAGE_PATH.to_string(),
        c.termination_message_path.clone(),
    );
    ann.insert(
        ANN_TERMINATION_MESSAGE_POLICY.to_string(),
        c.termination_message_policy.clone(),
    );
    ann.insert(
        ANN_POD_TERMINATION_GRACE.to_string(),
        grace_seconds.to_string(),
    );
    ann.insert(ANN_CONTAINER_TYPE.to_string(), kind.as_str().to_string());
    if !c.ports.is_empty() {
        ann.insert(
            "io.kubernetes.container.ports".to_string(),
            ports_json(&c.ports),
        );
    }
    ann
}

/// The container's ports as the kubelet's `io.kubernetes.container.ports` annotation: Go's
/// JSON of `[]v1.ContainerPort` (fields in the struct's order: name, hostPort,
/// containerPort, protocol, hostIP; empty ones left out; the protocol defaulted to TCP).
fn ports_json(ports: &[crate::api::ContainerPort]) -> String {
    let quote = |v: &str| serde_json::Value::from(v).to_string();
    let items: Vec<String> = ports
        .iter()
        .map(|p| {
            // Field by field: serde_json's maps sort their keys (no preserve_order here).
            let mut fields = Vec::new();
            if !p.name.is_empty() {
                fields.push(format!("\"name\":{}", quote(&p.name)));
            }
            if let Some(h) = p.host_port.filter(|h| *h != 0) {
                fields.push(format!("\"hostPort\":{h}"));
            }
            fields.push(format!("\"containerPort\":{}", p.container_port));
            let proto = if p.protocol.is_empty() {
                "TCP"
            } else {
                &p.protocol
            };
            fields.push(format!("\"protocol\":{}", quote(proto)));
            if !p.host_ip.is_empty() {
                fields.push(format!("\"hostIP\":{}", quote(&p.host_ip)));
            }
            format!("{{{}}}", fields.join(","))
        })
        .collect();
    format!("[{}]", items.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ContainerPort;

    #[test]
    fn ports_annotation_is_gos_json_of_the_container_ports() {
        // labels.go newContainerAnnotations: json.Marshal(container.Ports) when there are
        // ports (fields in v1.ContainerPort's order, omitempty); none without ports.
        let mut c = Container {
            name: "web".into(),
            ..Default::default()
        };
        let ann = container_annotations(&c, ContainerType::Regular, 0, 30);
        assert!(!ann.contains_key("io.kubernetes.container.ports"));
        c.ports = vec![
            ContainerPort {
                name: "http".into(),
                container_port: 8080,
                host_port: Some(18080),
                protocol: "TCP".into(),
                ..Default::default()
            },
            ContainerPort {
                container_port: 53,
                protocol: "UDP".into(),
                host_ip: "127.0.0.1".into(),
                ..Default::default()
            },
        ];
        let ann = container_annotations(&c, ContainerType::Regular, 0, 30);
        assert_eq!(
            ann["io.kubernetes.container.ports"],
            r#"[{"name":"http","hostPort":18080,"containerPort":8080,"protocol":"TCP"},{"containerPort":53,"protocol":"UDP","hostIP":"127.0.0.1"}]"#
        );
    }
}
