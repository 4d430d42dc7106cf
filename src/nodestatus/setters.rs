//! This node as a v1 Node object (upstream pkg/kubelet/nodestatus/setters.go): capacity and
//! allocatable, addresses, nodeInfo, conditions from the status store. Served on the read-only
//! port (`/api/v1/nodes`) and registered with the API server.

use crate::nodeshutdown::NOT_READY_MESSAGE as NOT_READY;
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
    /// Reservations and hard eviction thresholds, subtracted from capacity for allocatable.
    pub eviction: crate::eviction::EvictionConfig,
    /// Extended resources (name -> count), in capacity and allocatable alike.
    pub extended: std::collections::BTreeMap<String, i64>,
    /// Device plugins' resources: every device in capacity, the healthy ones in allocatable.
    pub devices: Option<Arc<crate::devicemanager::DeviceManager>>,
    /// the Ready status last posted (for NodeReady / NodeNotReady events).
    ready_posted: std::sync::Mutex<Option<bool>>,
    /// Per condition type, its last status and since when (the local view's
    /// lastTransitionTime; the API's copy keeps its own, see `heartbeat::merge_node_status`).
    transitions: std::sync::Mutex<std::collections::BTreeMap<String, (String, String)>>,
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
            eviction: crate::eviction::EvictionConfig::default(),
            extended: Default::default(),
            devices: None,
            ready_posted: std::sync::Mutex::new(None),
            transitions: Default::default(),
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

/// A resource list with the node's extended resources added (as counts).
fn with_extended(mut v: Value, extended: &std::collections::BTreeMap<String, i64>) -> Value {
    for (k, n) in extended {
        v[k.as_str()] = json!(n.to_string());
    }
    v
}

/// A node's capacity or allocatable (upstream nodestatus.MachineInfo).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resources {
    pub cpu_millis: i64,
    pub memory_bytes: i64,
    /// The root directory's filesystem (nodefs); `None` when it cannot be read.
    pub ephemeral_bytes: Option<i64>,
    pub pods: i64,
}

/// Bytes as resource.Quantity prints a BinarySI value (`CanonicalizeBytes` /
/// `AsCanonicalBase1024Bytes`): the largest of `Ki`, `Mi`, `Gi`, `Ti`, `Pi`, `Ei` that divides
/// it exactly, plain bytes below 1024 or when none does; what the API server stores and
/// returns.
fn bytes_quantity(v: i64) -> String {
    const SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if v.unsigned_abs() < 1024 {
        return v.to_string();
    }
    let (mut n, mut suffix) = (v, "");
    for s in SUFFIXES {
        if n % 1024 != 0 {
            break;
        }
        n /= 1024;
        suffix = s;
    }
    format!("{n}{suffix}")
}

impl Resources {
    pub fn to_json(self) -> Value {
        let cpu = if self.cpu_millis % 1000 == 0 {
            (self.cpu_millis / 1000).to_string()
        } else {
            format!("{}m", self.cpu_millis)
        };
        let mut v = json!({
            "cpu": cpu,
            "memory": bytes_quantity(self.memory_bytes),
            "pods": self.pods.to_string(),
        });
        if let Some(e) = self.ephemeral_bytes {
            v["ephemeral-storage"] = json!(bytes_quantity(e));
        }
        v
    }
}

/// Size of the filesystem holding `path` (statvfs: blocks x fragment size).
// statvfs field types differ between targets (u32 on 32-bit ARM), hence the conversions.
#[allow(clippy::useless_conversion)]
fn fs_capacity(path: &std::path::Path) -> Option<i64> {
    let s = nix::sys::statvfs::statvfs(path).ok()?;
    let bytes = u64::from(s.blocks()).saturating_mul(u64::from(s.fragment_size()));
    i64::try_from(bytes).ok()
}

/// The ephemeral-storage of systemReserved + kubeReserved (validated at load).
fn reserved_ephemeral(ev: &crate::eviction::EvictionConfig) -> i64 {
    [&ev.system_reserved, &ev.kube_reserved]
        .iter()
        .filter_map(|m| m.get("ephemeral-storage"))
        .filter_map(|v| crate::api::quantity::parse_quantity_str(v).ok())
        .map(|q| q.value())
        .sum()
}

/// Allocatable = capacity - systemReserved - kubeReserved - the hard eviction threshold, for
/// cpu, memory (memory.available) and ephemeral-storage (nodefs.available), never below zero
/// (upstream ContainerManager.GetNodeAllocatableAbsolute and hardEvictionReservation); pods
/// unchanged. Admission uses the same figures (`EvictionConfig::allocatable`).
pub fn allocatable(cap: &Resources, ev: &crate::eviction::EvictionConfig) -> Resources {
    use crate::eviction::threshold::{Signal, allocatable as minus};
    let (cpu_millis, _) = ev.allocatable(crate::node::Capacity {
        cpu_millis: cap.cpu_millis,
        memory_bytes: cap.memory_bytes,
    });
    Resources {
        cpu_millis,
        memory_bytes: minus(
            cap.memory_bytes,
            ev.reserved_memory,
            &ev.thresholds,
            Signal::MemoryAvailable,
        ),
        ephemeral_bytes: cap.ephemeral_bytes.map(|c| {
            minus(
                c,
                reserved_ephemeral(ev),
                &ev.thresholds,
                Signal::NodeFsAvailable,
            )
        }),
        pods: cap.pods,
    }
}

/// The Node events of pressure conditions that changed from `before` to `after` (condition
/// types), as upstream's MemoryPressureCondition/DiskPressureCondition/PIDPressureCondition
/// setters record them: the reason, and "Node <node> status is now: <reason>".
pub fn pressure_events(
    node: &str,
    before: &std::collections::BTreeSet<&str>,
    after: &std::collections::BTreeSet<&str>,
) -> Vec<(&'static str, String)> {
    const REASONS: [(&str, &str, &str); 3] = [
        (
            "MemoryPressure",
            "NodeHasInsufficientMemory",
            "NodeHasSufficientMemory",
        ),
        (
            "DiskPressure",
            "NodeHasDiskPressure",
            "NodeHasNoDiskPressure",
        ),
        (
            "PIDPressure",
            "NodeHasInsufficientPID",
            "NodeHasSufficientPID",
        ),
    ];
    REASONS
        .iter()
        .filter_map(
            |(cond, on, off)| match (before.contains(cond), after.contains(cond)) {
                (false, true) => Some(*on),
                (true, false) => Some(*off),
                _ => None,
            },
        )
        .map(|reason| (reason, format!("Node {node} status is now: {reason}")))
        .collect()
}

impl NodeContext {
    /// Sets each condition's `lastTransitionTime` to when its status last changed: kept while
    /// the status holds; at a change, the time the condition carries when it is not the
    /// start time (a pressure condition's onset), else `now`.
    fn stamp_transitions(&self, conditions: &mut [Value], now: &str, started: &str) {
        let mut seen = self.transitions.lock().unwrap_or_else(|e| e.into_inner());
        for c in conditions {
            let (Some(t), Some(status)) = (c["type"].as_str(), c["status"].as_str()) else {
                continue;
            };
            let since = match seen.get(t) {
                Some((s, since)) if s == status => since.clone(),
                previous => {
                    let own = c["lastTransitionTime"].as_str().unwrap_or(started);
                    let since = if previous.is_none() || own != started {
                        own.to_string()
                    } else {
                        now.to_string()
                    };
                    seen.insert(t.to_string(), (status.to_string(), since.clone()));
                    since
                }
            };
            c["lastTransitionTime"] = json!(since);
        }
    }

    /// The Node event for the Ready condition of `node` (about to be posted), as upstream's
    /// ReadyCondition setter records it: `NodeReady` / `NodeNotReady` when the status changed
    /// since the last post (none for the first), with "Node <node> status is now: <reason>".
    pub fn ready_event(&self, node: &Value) -> Option<(&'static str, String)> {
        let ready = node["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Ready")
            .map(|c| c["status"] == "True")?;
        let mut last = self.ready_posted.lock().unwrap_or_else(|e| e.into_inner());
        let before = last.replace(ready);
        let reason = match before {
            Some(b) if b != ready => {
                if ready {
                    "NodeReady"
                } else {
                    "NodeNotReady"
                }
            }
            _ => return None,
        };
        Some((
            reason,
            format!("Node {} status is now: {reason}", self.node_name),
        ))
    }
}

/// The eviction manager's Node event before it evicts for `condition` (upstream:
/// Warning EvictionThresholdMet "Attempting to reclaim <resource>").
pub fn eviction_threshold_event(condition: crate::api::helpers::NodeCondition) -> String {
    use crate::api::helpers::NodeCondition;
    let resource = match condition {
        NodeCondition::MemoryPressure => "memory",
        NodeCondition::DiskPressure => "ephemeral-storage",
        NodeCondition::PidPressure => "pids",
    };
    format!("Attempting to reclaim {resource}")
}

/// Why the node is not Ready (empty: it is). The kubelet's Ready=False message names what is
/// not ready ("container runtime status check may not have completed yet", "PLEG is not
/// healthy: ..."); so does ours. The runtime's own conditions count as the kubelet's
/// runtimeState errors do (kubelet.go updateRuntimeUp -> the ReadyCondition setter):
/// RuntimeReady or NetworkReady false, no CRI.
fn not_ready_reasons(store: &StatusStore) -> Vec<String> {
    store
        .health()
        .into_iter()
        .filter(|c| !c.ok)
        .map(|c| format!("{}: {}", c.name, c.message))
        .chain(
            store
                .runtime_problems()
                .into_iter()
                .filter(|p| p.node_not_ready)
                .map(|p| p.message),
        )
        .collect()
}

/// The node's conditions (the pressure setters and ReadyCondition): the eviction manager's
/// pressure as it holds it (transition period included), Ready from the health checks and
/// the runtime's problems; transition times as [`NodeContext::stamp_transitions`] keeps them.
fn node_conditions(ctx: &NodeContext, store: &StatusStore) -> Vec<Value> {
    let started = rfc3339(ctx.started);
    let now = rfc3339(SystemTime::now());
    let mut failing = not_ready_reasons(store);
    if store.shutting_down() {
        failing.push(NOT_READY.to_string());
    }
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
    let mut conditions = vec![
        match pressure.get("MemoryPressure") {
            Some(t) => cond_at(
                "MemoryPressure",
                "True",
                "KubeletHasInsufficientMemory",
                "kubelet has insufficient memory available",
                *t,
            ),
            None => cond(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
        },
        match pressure.get("DiskPressure") {
            Some(t) => cond_at(
                "DiskPressure",
                "True",
                "KubeletHasDiskPressure",
                "kubelet has disk pressure",
                *t,
            ),
            None => cond(
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            ),
        },
        match pressure.get("PIDPressure") {
            Some(t) => cond_at(
                "PIDPressure",
                "True",
                "KubeletHasInsufficientPID",
                "kubelet has insufficient PID available",
                *t,
            ),
            None => cond(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
        },
        ready,
    ];
    ctx.stamp_transitions(&mut conditions, &now, &started);
    conditions
}

/// The Node object for this node (served on `/api/v1/nodes`, registered in API-server mode).
pub fn node_object(ctx: &NodeContext, store: &StatusStore) -> Value {
    let machine = crate::node::capacity();
    let capacity = Resources {
        cpu_millis: machine.cpu_millis / 1000 * 1000,
        memory_bytes: machine.memory_bytes,
        ephemeral_bytes: fs_capacity(&ctx.root_dir),
        pods: i64::from(ctx.max_pods),
    };
    let allocatable = allocatable(&capacity, &ctx.eviction);
    // `--extended-resources`, then the device plugins' (kubelet setters.MachineInfo: the device
    // manager's capacity and allocatable).
    let mut ext_capacity = ctx.extended.clone();
    let mut ext_allocatable = ctx.extended.clone();
    if let Some(dm) = &ctx.devices {
        let (c, a) = dm.capacity();
        ext_capacity.extend(c);
        ext_allocatable.extend(a);
    }
    let started = rfc3339(ctx.started);
    let conditions = node_conditions(ctx, store);
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
            "capacity": with_extended(capacity.to_json(), &ext_capacity),
            "allocatable": with_extended(allocatable.to_json(), &ext_allocatable),
            "conditions": conditions,
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
    /// Upstream's ReadyCondition setter: an event on each change of Ready, none at first.
    #[test]
    fn ready_transitions_are_node_events() {
        let ctx = NodeContext::new("n1");
        let node = |s: &str| json!({"status": {"conditions": [{"type": "Ready", "status": s}]}});
        assert_eq!(ctx.ready_event(&node("False")), None);
        assert_eq!(
            ctx.ready_event(&node("True")),
            Some(("NodeReady", "Node n1 status is now: NodeReady".to_string()))
        );
        assert_eq!(ctx.ready_event(&node("True")), None);
        assert_eq!(
            ctx.ready_event(&node("False")).map(|e| e.0),
            Some("NodeNotReady")
        );
    }

    /// Upstream's pressure condition setters: one Normal event per transition, named as
    /// recordNodeStatusEvent names it.
    #[test]
    fn pressure_transitions_are_node_events() {
        let before: std::collections::BTreeSet<&str> = ["DiskPressure"].into();
        let after: std::collections::BTreeSet<&str> = ["MemoryPressure"].into();
        assert_eq!(
            pressure_events("n1", &before, &after),
            vec![
                (
                    "NodeHasInsufficientMemory",
                    "Node n1 status is now: NodeHasInsufficientMemory".to_string()
                ),
                (
                    "NodeHasNoDiskPressure",
                    "Node n1 status is now: NodeHasNoDiskPressure".to_string()
                ),
            ]
        );
        assert!(pressure_events("n1", &after, &after).is_empty());
        assert_eq!(
            eviction_threshold_event(crate::api::helpers::NodeCondition::MemoryPressure),
            "Attempting to reclaim memory"
        );
    }

    /// Node allocatable as upstream's GetNodeAllocatableAbsolute (node-allocatable doc):
    /// capacity - kubeReserved - systemReserved - hard eviction (memory.available for memory,
    /// nodefs.available for ephemeral-storage, a percentage of capacity); pods unchanged.
    #[test]
    fn allocatable_is_capacity_minus_reservations_and_hard_eviction() {
        let args: Vec<String> = [
            "--system-reserved=cpu=500m,memory=1Gi,ephemeral-storage=1Gi",
            "--kube-reserved=cpu=100m,memory=512Mi,ephemeral-storage=2Gi",
            "--eviction-hard=memory.available<100Mi,nodefs.available<10%",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let crate::kubeletconfig::ParseOutcome::Run(cfg) =
            crate::kubeletconfig::parse_run_args(&args).expect("flags parse")
        else {
            panic!("not a run")
        };
        let cap = Resources {
            cpu_millis: 4000,
            memory_bytes: 8 << 30,
            ephemeral_bytes: Some(100 << 30),
            pods: 110,
        };
        let a = allocatable(&cap, &cfg.eviction);
        assert_eq!(a.cpu_millis, 4000 - 500 - 100);
        assert_eq!(
            a.memory_bytes,
            (8 << 30) - (1 << 30) - (512 << 20) - (100 << 20)
        );
        assert_eq!(
            a.ephemeral_bytes,
            Some((100i64 << 30) - (3 << 30) - (100i64 << 30) / 10)
        );
        assert_eq!(a.pods, 110);
        assert_eq!(
            a.to_json(),
            json!({"cpu": "3400m", "memory": "6556Mi", "pods": "110",
                   "ephemeral-storage": "87Gi"})
        );
        // Never below zero.
        let tiny = Resources {
            cpu_millis: 100,
            memory_bytes: 64 << 20,
            ephemeral_bytes: None,
            pods: 1,
        };
        let a = allocatable(&tiny, &cfg.eviction);
        assert_eq!((a.cpu_millis, a.memory_bytes), (0, 0));
    }

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

    /// resource.Quantity's canonical BinarySI form, which the API server stores: the
    /// largest power-of-1024 suffix that divides exactly.
    #[test]
    fn byte_quantities_print_as_the_api_server_stores_them() {
        assert_eq!(bytes_quantity(0), "0");
        assert_eq!(bytes_quantity(1000), "1000");
        assert_eq!(bytes_quantity(1536), "1536");
        assert_eq!(bytes_quantity(2048), "2Ki");
        assert_eq!(bytes_quantity(1 << 30), "1Gi");
        assert_eq!(bytes_quantity(1536 << 20), "1536Mi");
        assert_eq!(bytes_quantity(24_570_848 * 1024), "24570848Ki");
    }

    /// The condition setters: a condition's lastTransitionTime is when its status last
    /// changed, not the process start, and holds across heartbeats.
    #[test]
    fn condition_transition_times_follow_status_changes() {
        let ctx = NodeContext::new("n1");
        let cond =
            |s: &str, t: &str| json!({"type": "Ready", "status": s, "lastTransitionTime": t});
        let mut c = vec![cond("True", "start")];
        ctx.stamp_transitions(&mut c, "t1", "start");
        assert_eq!(c[0]["lastTransitionTime"], "start");
        let mut c = vec![cond("False", "start")];
        ctx.stamp_transitions(&mut c, "t2", "start");
        assert_eq!(c[0]["lastTransitionTime"], "t2");
        let mut c = vec![cond("False", "start")];
        ctx.stamp_transitions(&mut c, "t3", "start");
        assert_eq!(c[0]["lastTransitionTime"], "t2");
        // A pressure condition's own onset is kept.
        let mut c = vec![cond("True", "onset")];
        ctx.stamp_transitions(&mut c, "t4", "start");
        assert_eq!(c[0]["lastTransitionTime"], "onset");
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
