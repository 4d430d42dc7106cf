//! This node as a v1 Node object (upstream pkg/kubelet/nodestatus/setters.go): capacity and
//! allocatable, addresses, nodeInfo, conditions from the status store. Served on the read-only
//! port (`/api/v1/nodes`) and registered with the API server.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use serde_json::{Value, json};

use crate::KUBELET_VERSION;
use crate::cri::Runtime;
use crate::status::StatusStore;
use crate::timeutil::rfc3339;

/// What the API needs besides the status store.
pub struct NodeContext {
    pub node_name: String,
    /// The node's IPs, primary first (`InternalIP` addresses).
    pub host_ips: Vec<String>,
    pub max_pods: u32,
    pub pod_logs_dir: PathBuf,
    /// nanolet's root dir (the node filesystem of `/stats/summary`).
    pub root_dir: PathBuf,
    /// For `containerRuntimeVersion`; `None` in tests.
    pub runtime: Option<Arc<dyn Runtime>>,
    /// The node object's creationTimestamp (when nanolet started).
    pub started: SystemTime,
    /// The kubelet server's port (`daemonEndpoints.kubeletEndpoint.Port`); 0 when it is not
    /// serving.
    pub kubelet_port: u16,
    runtime_version: OnceLock<String>,
}

impl NodeContext {
    pub fn new(node_name: &str) -> NodeContext {
        NodeContext {
            node_name: node_name.into(),
            host_ips: vec!["127.0.0.1".into()],
            max_pods: 110,
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            root_dir: PathBuf::from("/var/lib/nanolet"),
            runtime: None,
            started: SystemTime::now(),
            kubelet_port: 0,
            runtime_version: OnceLock::new(),
        }
    }

    /// `containerd://1.7.24`, from CRI Version, cached after the first answer.
    fn runtime_version(&self) -> String {
        if let Some(v) = self.runtime_version.get() {
            return v.clone();
        }
        let Some(rt) = &self.runtime else {
            return String::new();
        };
        match rt.version() {
            Ok(v) => {
                let s = format!("{}://{}", v.runtime_name, v.runtime_version);
                let _ = self.runtime_version.set(s.clone());
                s
            }
            Err(e) => {
                tracing::debug!(error = %e, "runtime version for the node object");
                String::new()
            }
        }
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn os_image() -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                Some(
                    l.strip_prefix("PRETTY_NAME=")?
                        .trim_matches('"')
                        .to_string(),
                )
            })
        })
        .unwrap_or_else(|| "Unknown".into())
}

/// The Node object for this node (served on `/api/v1/nodes`, registered in API-server mode).
pub fn node_object(ctx: &NodeContext, store: &StatusStore) -> Value {
    let cpus = crate::node::capacity().cpu_millis / 1000;
    let mem = format!("{}Ki", crate::node::capacity().memory_bytes / 1024);
    let resources = json!({
        "cpu": cpus.to_string(),
        "memory": mem,
        "pods": ctx.max_pods.to_string(),
    });
    let started = rfc3339(ctx.started);
    let now = rfc3339(SystemTime::now());
    // The kubelet's Ready=False message names what is not ready ("container runtime status
    // check may not have completed yet", "PLEG is not healthy: ..."); so does ours.
    let failing: Vec<String> = store
        .health()
        .into_iter()
        .filter(|c| !c.ok)
        .map(|c| format!("{}: {}", c.name, c.message))
        .collect();
    let healthy = failing.is_empty();
    // Pressure conditions as the eviction manager holds them (transition period included).
    let pressure = store.node_conditions();
    let cond = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({
            "type": type_,
            "status": status,
            "lastHeartbeatTime": now,
            "lastTransitionTime": started,
            "reason": reason,
            "message": message,
        })
    };
    let cond_at = |type_: &str, status: &str, reason: &str, message: &str, since: SystemTime| {
        let mut c = cond(type_, status, reason, message);
        c["lastTransitionTime"] = json!(rfc3339(since));
        c
    };
    let ready = if healthy {
        cond(
            "Ready",
            "True",
            "KubeletReady",
            "nanolet is posting ready status",
        )
    } else {
        cond(
            "Ready",
            "False",
            "KubeletNotReady",
            &format!("nanolet is not ready: {}", failing.join("; ")),
        )
    };
    // kubelet nodestatus.NodeAddress with --node-ip: one InternalIP per node IP (primary
    // first), then the Hostname.
    let mut addresses: Vec<Value> = ctx
        .host_ips
        .iter()
        .map(|ip| json!({"type": "InternalIP", "address": ip}))
        .collect();
    addresses.push(json!({"type": "Hostname", "address": ctx.node_name}));
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    json!({
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": ctx.node_name,
            "uid": read_trimmed("/etc/machine-id"),
            "creationTimestamp": started,
            "labels": {
                "kubernetes.io/hostname": ctx.node_name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": arch,
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": arch,
            },
        },
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                match pressure.get("MemoryPressure") {
                    Some(t) => cond_at("MemoryPressure", "True", "KubeletHasInsufficientMemory", "nanolet has insufficient memory available", *t),
                    None => cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "nanolet has sufficient memory available"),
                },
                match pressure.get("DiskPressure") {
                    Some(t) => cond_at("DiskPressure", "True", "KubeletHasDiskPressure", "nanolet has disk pressure", *t),
                    None => cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "nanolet has no disk pressure"),
                },
                match pressure.get("PIDPressure") {
                    Some(t) => cond_at("PIDPressure", "True", "KubeletHasInsufficientPID", "nanolet has insufficient PID available", *t),
                    None => cond("PIDPressure", "False", "KubeletHasSufficientPID", "nanolet has sufficient PID available"),
                },
                ready,
            ],
            "addresses": addresses,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": ctx.kubelet_port}},
            "nodeInfo": {
                "machineID": read_trimmed("/etc/machine-id"),
                "systemUUID": read_trimmed("/sys/class/dmi/id/product_uuid"),
                "bootID": read_trimmed("/proc/sys/kernel/random/boot_id"),
                "kernelVersion": read_trimmed("/proc/sys/kernel/osrelease"),
                "osImage": os_image(),
                "containerRuntimeVersion": ctx.runtime_version(),
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": arch,
            },
        },
    })
}

// ---------------------------------------------------------------------------------------------
// Logs

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_version_is_v1_33_0_with_nanolet_as_build_metadata() {
        // semver 2.0.0 §10/§11: build metadata (after +) does not affect precedence, so
        // skew checks (a control plane comparing kubeletVersion) see v1.33.0; a pre-release
        // (-nanolet) would sort below v1.33.0.
        let plain: String = crate::VERSION
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        assert_eq!(KUBELET_VERSION, format!("v1.33.0+nanolet.{plain}"));
        assert!(!KUBELET_VERSION.contains("-nanolet"));
    }

    /// `status.daemonEndpoints.kubeletEndpoint.Port` is the port the kubelet server serves on
    /// (the kubelet's `DaemonEndpoints` setter), 0 while it does not serve.
    #[test]
    fn daemon_endpoints_name_the_kubelet_port() {
        let store = StatusStore::new(std::time::Duration::from_secs(300));
        let mut ctx = NodeContext::new("node1");
        let port = |ctx: &NodeContext| {
            node_object(ctx, &store)["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].clone()
        };
        assert_eq!(port(&ctx), serde_json::json!(0));
        ctx.kubelet_port = 10250;
        assert_eq!(port(&ctx), serde_json::json!(10250));
    }
}
