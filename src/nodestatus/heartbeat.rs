//! The node's life in the cluster (API-server mode): registration, the node Lease heartbeat in
//! `kube-node-lease` and node status updates, the kubelet's way:
//! - register: POST the Node (labels `kubernetes.io/hostname`, `kubernetes.io/os`,
//!   `kubernetes.io/arch`, plus `--node-labels`; `spec.taints` from `--register-with-taints`);
//!   AlreadyExists means it is ours already;
//!   retried with backoff (the kubelet: 100 ms doubling to 7 s);
//! - Lease `kube-node-lease/<node>`: holderIdentity = node, leaseDurationSeconds 40, renewTime
//!   renewed every 10 s (a quarter of the duration), owner reference to the Node; a 409 on
//!   renewal (someone else wrote it) re-reads and retries;
//! - status: every nodeStatusUpdateFrequency (10 s) the Node is read back and nanolet's
//!   capacity, allocatable, conditions (Ready and the eviction manager's pressure conditions),
//!   addresses, daemonEndpoints and nodeInfo (kubeletVersion honestly nanolet's) are applied to
//!   the API's copy (each condition keeping its lastTransitionTime while its status holds);
//!   sent as a strategic merge patch (conditions merged by type, so other agents' conditions
//!   stay) when that changed the API's copy (conditions compared without `lastHeartbeatTime`:
//!   a controller's `Unknown` is repaired at the next update) or nodeStatusReportFrequency
//!   (5 m) passed since the last one (`tryUpdateNodeStatus`).
//!
//! The API server being unreachable never touches pods: errors are logged, counted, and the
//! loop retries.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::apiclient::client::{ApiClient, ApiError};
use crate::nodestatus::NodeContext;
use crate::status::StatusStore;

/// What wakes the node status loop besides its timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// nanolet stops.
    Stop,
    /// Compute and send the node's status now: the node shutdown manager's `syncNodeStatus`
    /// when logind announces a shutdown, so the cluster sees Ready=False at once rather than
    /// up to nodeStatusUpdateFrequency later.
    StatusNow,
}

/// Sends [`Wake::Stop`] when dropped (held by the one `Shutdown` of `nanolet run`).
pub struct StopOnDrop(pub Sender<Wake>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(Wake::Stop);
    }
}

/// The kubelet's node lease duration (`nodeLeaseDurationSeconds`).
pub const LEASE_DURATION_SECONDS: i64 = 40;
/// Renew interval: a quarter of the duration (the kubelet's 0.25 fraction).
pub const LEASE_RENEW: Duration = Duration::from_secs(10);

/// Settings of the node heartbeat.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    /// `--node-labels`.
    pub labels: Vec<(String, String)>,
    /// `--register-with-taints`: `spec.taints` of the registered Node (set at registration
    /// only, as the kubelet does; later changes belong to the cluster).
    pub taints: Vec<crate::kubeletconfig::Taint>,
    /// `nodeStatusUpdateFrequency` (10 s).
    pub status_update_frequency: Duration,
    /// `nodeStatusReportFrequency` (5 m): an unchanged status is sent this often.
    pub status_report_frequency: Duration,
}

/// When the node status was last reported (`tryUpdateNodeStatus` sends an unchanged status
/// once nodeStatusReportFrequency has passed since the last report).
#[derive(Debug, Default)]
struct StatusReports {
    last: Option<Instant>,
}

impl StatusReports {
    fn due(&self, changed: bool, now: Instant, report_every: Duration) -> bool {
        changed
            || self
                .last
                .is_none_or(|at| now.saturating_duration_since(at) >= report_every)
    }

    fn sent(&mut self, now: Instant) {
        self.last = Some(now);
    }

    /// The next status must be sent (the Node was registered again).
    fn forget(&mut self) {
        self.last = None;
    }
}

/// The node's status as the kubelet's setters leave the Node it read back (`tryUpdateNodeStatus`
/// runs `setNodeStatus` on a copy of the API's Node): nanolet's conditions replace those of the
/// same type, each keeping the API's `lastTransitionTime` while its status is unchanged and
/// taking `now` when it changed (the condition setters' rule), with `lastHeartbeatTime` `now`;
/// conditions of other types (NetworkUnavailable, node-problem-detector's) stay; capacity,
/// allocatable and nodeInfo keys nanolet sets are overwritten, others kept (MachineInfo never
/// blindly overwrites capacity); addresses and daemonEndpoints are nanolet's.
pub fn merge_node_status(api: &Value, ours: &Value, now: &str) -> Value {
    let mut merged = if api.is_object() {
        api.clone()
    } else {
        json!({})
    };
    let api_conds = api["conditions"].as_array().cloned().unwrap_or_default();
    let mut conds = api_conds.clone();
    for c in ours["conditions"].as_array().into_iter().flatten() {
        let mut c = c.clone();
        let old = api_conds.iter().find(|a| a["type"] == c["type"]);
        c["lastTransitionTime"] = match old {
            Some(a) if a["status"] == c["status"] && a["lastTransitionTime"].is_string() => {
                a["lastTransitionTime"].clone()
            }
            _ => json!(now),
        };
        c["lastHeartbeatTime"] = json!(now);
        match conds.iter_mut().find(|a| a["type"] == c["type"]) {
            Some(slot) => *slot = c,
            None => conds.push(c),
        }
    }
    merged["conditions"] = Value::Array(conds);
    for map in ["capacity", "allocatable", "nodeInfo"] {
        if !merged[map].is_object() {
            merged[map] = json!({});
        }
        for (k, v) in ours[map].as_object().into_iter().flatten() {
            merged[map][k] = v.clone();
        }
    }
    for whole in ["addresses", "daemonEndpoints"] {
        if !ours[whole].is_null() {
            merged[whole] = ours[whole].clone();
        }
    }
    merged
}

/// `nodeStatusHasChanged`: the conditions compared by type without `lastHeartbeatTime`, the
/// rest as it is.
pub fn node_status_has_changed(api: &Value, status: &Value) -> bool {
    let conditions = |s: &Value| {
        let mut c: Vec<Value> = s["conditions"].as_array().cloned().unwrap_or_default();
        for x in &mut c {
            if let Some(o) = x.as_object_mut() {
                o.remove("lastHeartbeatTime");
            }
        }
        c.sort_by(|a, b| a["type"].as_str().cmp(&b["type"].as_str()));
        c
    };
    // Quantities compare by value (apiequality.Semantic): the API server stores them in
    // canonical form (`1024Mi` comes back as `1Gi`).
    let rest = |s: &Value| {
        let mut s = s.clone();
        if let Some(o) = s.as_object_mut() {
            o.remove("conditions");
        }
        for list in ["capacity", "allocatable"] {
            for v in s[list]
                .as_object_mut()
                .into_iter()
                .flat_map(|m| m.values_mut())
            {
                if let Some(q) = v
                    .as_str()
                    .and_then(|q| crate::api::quantity::parse_quantity_str(q).ok())
                {
                    *v = json!(q.milli_value());
                }
            }
        }
        s
    };
    conditions(api) != conditions(status) || rest(api) != rest(status)
}

/// The strategic merge patch of `nodes/<node>/status` taking the API's status to `status`
/// (`PatchNodeStatus`): nanolet's conditions by type (the list's patchMergeKey; other
/// agents' conditions untouched), capacity, allocatable, daemonEndpoints and nodeInfo merged;
/// `addresses`, whose merge key `type` would fold two InternalIPs into one, replaced whole
/// with `$patch: replace` when they changed (upstream's `fixupPatchForNodeStatusAddresses`).
pub fn node_status_patch(api: &Value, status: &Value, ours: &Value) -> Value {
    let own: Vec<Value> = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            ours["conditions"]
                .as_array()
                .is_some_and(|o| o.iter().any(|x| x["type"] == c["type"]))
        })
        .cloned()
        .collect();
    let mut patch = json!({"conditions": own});
    for key in ["capacity", "allocatable", "daemonEndpoints", "nodeInfo"] {
        if api[key] != status[key] {
            patch[key] = status[key].clone();
        }
    }
    if api["addresses"] != status["addresses"] {
        let mut list = status["addresses"].as_array().cloned().unwrap_or_default();
        list.push(json!({"$patch": "replace"}));
        patch["addresses"] = Value::Array(list);
    }
    json!({"status": patch})
}

/// `metav1.MicroTime`: RFC 3339 with microseconds.
pub fn micro_time(t: SystemTime) -> String {
    let micros = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_micros())
        .unwrap_or(0);
    let secs = crate::timeutil::rfc3339(t);
    // "2026-11-22T22:45:01Z" -> "2026-11-22T22:45:01.123456Z"
    match secs.strip_suffix('Z') {
        Some(b) => format!("{}.{micros:06}Z", b.split('.').next().unwrap_or(b)),
        None => secs,
    }
}

/// The Node object nanolet registers: the read-only API's node view with `--node-labels`.
pub fn node_for_registration(ctx: &NodeContext, store: &StatusStore, s: &NodeSettings) -> Value {
    let mut node = crate::nodestatus::node_object(ctx, store);
    if let Some(m) = node["metadata"].as_object_mut() {
        m.remove("uid");
        m.remove("creationTimestamp");
        m.remove("resourceVersion");
    }
    for (k, v) in &s.labels {
        node["metadata"]["labels"][k] = json!(v);
    }
    if !s.taints.is_empty() {
        node["spec"]["taints"] = json!(s.taints);
    }
    node
}

fn lease_path(node: &str) -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}")
}

/// The node heartbeat: call [`NodeHeartbeat::run`] on its own thread.
pub struct NodeHeartbeat {
    client: Arc<ApiClient>,
    ctx: Arc<NodeContext>,
    store: Arc<StatusStore>,
    settings: NodeSettings,
    node_uid: Option<String>,
    lease_rv: Option<String>,
    reports: StatusReports,
    /// Takes the Node's `spec.podCIDR` (CRI UpdateRuntimeConfig); true once applied.
    pod_cidr_sink: Option<PodCidrSink>,
    /// The pod CIDR last applied.
    pod_cidr: String,
}

/// Where a new pod CIDR goes; returns whether it was applied.
pub type PodCidrSink = Box<dyn Fn(&str) -> bool + Send>;

impl NodeHeartbeat {
    /// Send the Node's `spec.podCIDR` to `sink` whenever it appears or changes (the kubelet's
    /// `updatePodCIDR`, from the Node it reads at every status update).
    pub fn with_pod_cidr_sink(mut self, sink: PodCidrSink) -> NodeHeartbeat {
        self.pod_cidr_sink = Some(sink);
        self
    }

    /// Applies the Node's `spec.podCIDR` when it appeared or changed.
    fn apply_pod_cidr(&mut self, node: &Value) {
        let Some(sink) = &self.pod_cidr_sink else {
            return;
        };
        let cidr = node["spec"]["podCIDR"].as_str().unwrap_or_default();
        if !cidr.is_empty() && cidr != self.pod_cidr && sink(cidr) {
            self.pod_cidr = cidr.to_string();
        }
    }

    pub fn new(
        client: Arc<ApiClient>,
        ctx: Arc<NodeContext>,
        store: Arc<StatusStore>,
        settings: NodeSettings,
    ) -> NodeHeartbeat {
        NodeHeartbeat {
            client,
            ctx,
            store,
            settings,
            node_uid: None,
            lease_rv: None,
            reports: StatusReports::default(),
            pod_cidr_sink: None,
            pod_cidr: String::new(),
        }
    }

    /// Registers the node; Ok once it exists (created now or before).
    pub fn register(&mut self) -> Result<(), ApiError> {
        let node = node_for_registration(&self.ctx, &self.store, &self.settings);
        let created = match self.client.post("/api/v1/nodes", &node) {
            Ok(v) => {
                info!(node = %self.ctx.node_name, "node registered with the API server");
                v
            }
            Err(e) if e.status() == Some(409) => {
                debug!(node = %self.ctx.node_name, "node already registered");
                self.client
                    .get(&format!("/api/v1/nodes/{}", self.ctx.node_name))?
            }
            Err(e) => return Err(e),
        };
        self.node_uid = created["metadata"]["uid"].as_str().map(String::from);
        // The registered Ready status is the base of NodeReady/NodeNotReady.
        let _ = self.ctx.ready_event(&created);
        Ok(())
    }

    /// Creates or renews the node Lease.
    pub fn renew_lease(&mut self) -> Result<(), ApiError> {
        let node = &self.ctx.node_name;
        let path = lease_path(node);
        let mut lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": node, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": node,
                "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                "renewTime": micro_time(SystemTime::now()),
            },
        });
        if let Some(uid) = &self.node_uid {
            lease["metadata"]["ownerReferences"] = json!([{
                "apiVersion": "v1", "kind": "Node", "name": node, "uid": uid,
            }]);
        }
        for _attempt in 0..3 {
            let result = match &self.lease_rv {
                Some(rv) => {
                    lease["metadata"]["resourceVersion"] = json!(rv);
                    self.client.put(&path, &lease)
                }
                None => match self.client.get(&path) {
                    Ok(existing) => {
                        self.lease_rv = existing["metadata"]["resourceVersion"]
                            .as_str()
                            .map(String::from);
                        continue;
                    }
                    Err(e) if e.status() == Some(404) => self.client.post(
                        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                        &lease,
                    ),
                    Err(e) => return Err(e),
                },
            };
            match result {
                Ok(v) => {
                    self.lease_rv = v["metadata"]["resourceVersion"].as_str().map(String::from);
                    return Ok(());
                }
                // A stale resourceVersion (409) or a lease deleted under us (404): re-read.
                Err(e) if matches!(e.status(), Some(409) | Some(404)) => {
                    self.lease_rv = None;
                }
                Err(e) => return Err(e),
            }
        }
        Err(ApiError::Status {
            method: "PUT",
            path,
            status: 409,
            reason: "Conflict".into(),
            message: "the lease kept changing under nanolet".into(),
        })
    }

    /// `tryUpdateNodeStatus`: reads the Node back, applies nanolet's status to the API's copy
    /// ([`merge_node_status`]) and sends a strategic merge patch ([`node_status_patch`]) when
    /// that changed it (a controller's `Unknown` is repaired at the next update) or
    /// nodeStatusReportFrequency has passed since the last report.
    pub fn update_status(&mut self) -> Result<(), ApiError> {
        let path = format!("/api/v1/nodes/{}", self.ctx.node_name);
        let api_node = match self.client.get(&path) {
            Ok(n) => n,
            // The Node was deleted: register again.
            Err(e) if e.status() == Some(404) => {
                self.node_uid = None;
                self.reports.forget();
                return self.register();
            }
            Err(e) => return Err(e),
        };
        self.apply_pod_cidr(&api_node);
        let node = crate::nodestatus::node_object(&self.ctx, &self.store);
        let now_text = crate::timeutil::rfc3339(SystemTime::now());
        let status = merge_node_status(&api_node["status"], &node["status"], &now_text);
        let changed = node_status_has_changed(&api_node["status"], &status);
        let now = Instant::now();
        if !self
            .reports
            .due(changed, now, self.settings.status_report_frequency)
        {
            return Ok(());
        }
        let patch = node_status_patch(&api_node["status"], &status, &node["status"]);
        match self.client.patch(
            &format!("{path}/status"),
            "application/strategic-merge-patch+json",
            &patch,
        ) {
            Ok(_) => {
                self.reports.sent(now);
                // NodeReady / NodeNotReady on a posted change.
                if let Some((reason, message)) = self.ctx.ready_event(&node) {
                    let node_ref = crate::events::PodRef::node(&self.ctx.node_name);
                    let normal = crate::events::EventType::Normal;
                    self.store
                        .events()
                        .record(&node_ref, normal, reason, &message);
                }
                Ok(())
            }
            Err(e) if e.status() == Some(404) => {
                self.node_uid = None;
                self.reports.forget();
                self.register()
            }
            Err(e) => Err(e),
        }
    }

    /// The loop: register (with backoff), then renew the lease every 10 s and patch the status
    /// every nodeStatusUpdateFrequency, and at once on [`Wake::StatusNow`], until
    /// [`Wake::Stop`] arrives or every sender is gone.
    pub fn run(mut self, wake: Receiver<Wake>) {
        let mut backoff = Duration::from_millis(100);
        let mut registered = false;
        let mut next_lease = Instant::now();
        let mut next_status = Instant::now();
        loop {
            let now = Instant::now();
            let mut wait = Duration::from_secs(1);
            if !registered {
                match self.register() {
                    Ok(()) => {
                        registered = true;
                        backoff = Duration::from_millis(100);
                    }
                    Err(e) => {
                        warn!(node = %self.ctx.node_name, error = %e, "registering the node failed; retrying");
                        wait = backoff;
                        backoff = (backoff * 2).min(Duration::from_secs(7));
                    }
                }
            }
            if registered && now >= next_lease {
                match self.renew_lease() {
                    Ok(()) => next_lease = now + LEASE_RENEW,
                    Err(e) => {
                        warn!(node = %self.ctx.node_name, error = %e, "renewing the node lease failed");
                        // The kubelet retries quickly (200 ms doubling to 7 s) on failures.
                        next_lease = now + backoff;
                        backoff = (backoff * 2).min(Duration::from_secs(7));
                    }
                }
            }
            if registered && now >= next_status {
                match self.update_status() {
                    Ok(()) => next_status = now + self.settings.status_update_frequency,
                    Err(e) => {
                        warn!(node = %self.ctx.node_name, error = %e, "updating the node status failed");
                        next_status = now + Duration::from_secs(1);
                    }
                }
            }
            if registered {
                let due = next_lease.min(next_status);
                wait = due
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(10));
            }
            match wake.recv_timeout(wait) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(Wake::StatusNow) => {
                    debug!(node = %self.ctx.node_name, "node status requested now");
                    next_status = Instant::now();
                }
                Ok(Wake::Stop) | Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kubelet_node_status.go tryUpdateNodeStatus: a status the API's copy already holds
    /// (only the heartbeat moved) is not sent before nodeStatusReportFrequency has passed; a
    /// change is sent at once.
    #[test]
    fn status_is_sent_on_change_or_every_report_frequency() {
        let every = Duration::from_secs(300);
        let t0 = Instant::now();
        let mut r = StatusReports::default();
        assert!(r.due(false, t0, every));
        r.sent(t0);
        let t1 = t0 + Duration::from_secs(10);
        assert!(!r.due(false, t1, every));
        assert!(r.due(true, t1, every));
        assert!(r.due(false, t0 + every, every));
        r.forget();
        assert!(r.due(false, t1, every));
    }

    /// The condition setters (pkg/kubelet/nodestatus/setters.go ReadyCondition,
    /// MemoryPressureCondition, ...) work on the Node read back from the API: a condition
    /// whose status is unchanged keeps the API's lastTransitionTime, a changed one (the node
    /// lifecycle controller's Unknown -> True) takes now; lastHeartbeatTime is now; conditions
    /// of other types (NetworkUnavailable, node-problem-detector's) are left alone.
    /// nodeStatusHasChanged ignores only the heartbeat.
    #[test]
    fn node_status_is_merged_into_the_api_copy_as_the_setters_do() {
        let api = json!({
            "conditions": [
                {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated",
                 "lastHeartbeatTime": "t0", "lastTransitionTime": "t0"},
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                 "lastHeartbeatTime": "t1", "lastTransitionTime": "t1"},
                {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                 "lastHeartbeatTime": "t1", "lastTransitionTime": "t2"},
                {"type": "KernelDeadlock", "status": "False", "reason": "KernelHasNoDeadlock",
                 "lastHeartbeatTime": "t1", "lastTransitionTime": "t0"}],
            "capacity": {"cpu": "2", "example.com/dongle": "1"},
            "addresses": [{"type": "InternalIP", "address": "192.0.2.5"}, {"type": "Hostname", "address": "n1"}],
        });
        let ours = json!({
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                 "lastHeartbeatTime": "x", "lastTransitionTime": "x"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "lastHeartbeatTime": "x", "lastTransitionTime": "x"}],
            "capacity": {"cpu": "4"},
            "addresses": [{"type": "InternalIP", "address": "192.0.2.5"}, {"type": "Hostname", "address": "n1"}],
        });
        let merged = merge_node_status(&api, &ours, "t9");
        let c = |t: &str| {
            merged["conditions"]
                .as_array()
                .and_then(|a| a.iter().find(|c| c["type"] == t).cloned())
                .unwrap_or(Value::Null)
        };
        assert_eq!(c("NetworkUnavailable"), api["conditions"][0]);
        assert_eq!(c("KernelDeadlock"), api["conditions"][3]);
        assert_eq!(c("MemoryPressure")["lastTransitionTime"], "t1");
        assert_eq!(c("MemoryPressure")["lastHeartbeatTime"], "t9");
        assert_eq!(c("Ready")["status"], "True");
        assert_eq!(c("Ready")["lastTransitionTime"], "t9");
        assert_eq!(
            merged["capacity"],
            json!({"cpu": "4", "example.com/dongle": "1"})
        );
        assert!(node_status_has_changed(&api, &merged));
        // The next heartbeat: only lastHeartbeatTime moves, which is no change.
        let again = merge_node_status(&merged, &ours, "t10");
        assert!(!node_status_has_changed(&merged, &again));
        // Quantities compare by value: the API server stores `4096Mi` as `4Gi`.
        let mut stored = merged.clone();
        stored["capacity"]["memory"] = json!("4Gi");
        let mut sent = merged.clone();
        sent["capacity"]["memory"] = json!("4096Mi");
        assert!(!node_status_has_changed(&stored, &sent));
        sent["capacity"]["memory"] = json!("4097Mi");
        assert!(node_status_has_changed(&stored, &sent));
        assert_eq!(
            again["conditions"]
                .as_array()
                .and_then(|a| a.iter().find(|c| c["type"] == "Ready"))
                .map(|c| c["lastTransitionTime"].clone()),
            Some(json!("t9"))
        );
        // The patch (PatchNodeStatus, strategic merge): only nanolet's condition types, never
        // another agent's; addresses only when they changed, replaced whole.
        let patch = node_status_patch(&api, &merged, &ours);
        let types: Vec<&str> = patch["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["type"].as_str())
            .collect();
        assert_eq!(types, ["MemoryPressure", "Ready"]);
        assert!(patch["status"].get("addresses").is_none());
        let mut moved = ours.clone();
        moved["addresses"] = json!([{"type": "InternalIP", "address": "192.0.2.6"},
                                    {"type": "InternalIP", "address": "2001:db8::6"},
                                    {"type": "Hostname", "address": "n1"}]);
        let merged = merge_node_status(&api, &moved, "t9");
        let patch = node_status_patch(&api, &merged, &moved);
        assert_eq!(
            patch["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "192.0.2.6"},
                   {"type": "InternalIP", "address": "2001:db8::6"},
                   {"type": "Hostname", "address": "n1"}, {"$patch": "replace"}])
        );
    }

    #[test]
    fn micro_time_has_six_fraction_digits() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        assert_eq!(micro_time(t), "2023-11-14T22:13:20.123456Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert!(micro_time(t).ends_with(":20.000000Z"), "{}", micro_time(t));
    }

    #[test]
    fn node_addresses_are_the_node_ips_then_the_hostname() {
        // kubelet nodestatus.NodeAddress with --node-ip: an InternalIP per node IP, primary
        // first, then Hostname.
        let mut ctx = NodeContext::new("edge-1");
        ctx.host_ips = vec!["192.0.2.5".into(), "2001:db8::5".into()];
        let store = StatusStore::new(Duration::from_secs(300));
        let n = crate::nodestatus::node_object(&ctx, &store);
        assert_eq!(
            n["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "192.0.2.5"},
                   {"type": "InternalIP", "address": "2001:db8::5"},
                   {"type": "Hostname", "address": "edge-1"}])
        );
    }

    #[test]
    fn registration_object_has_the_kubelet_labels_and_extra_ones() {
        let ctx = NodeContext::new("edge-1");
        let store = StatusStore::new(Duration::from_secs(300));
        let n = node_for_registration(
            &ctx,
            &store,
            &NodeSettings {
                labels: vec![("node.kubernetes.io/edge".into(), "".into())],
                taints: crate::kubeletconfig::parse_taints(
                    "dedicated=edge:NoSchedule,gpu:NoExecute",
                )
                .expect("taints"),
                status_update_frequency: Duration::from_secs(10),
                status_report_frequency: Duration::from_secs(300),
            },
        );
        assert_eq!(
            n["spec"]["taints"],
            json!([{"key": "dedicated", "value": "edge", "effect": "NoSchedule"},
                   {"key": "gpu", "effect": "NoExecute"}])
        );
        assert_eq!(n["metadata"]["labels"]["kubernetes.io/hostname"], "edge-1");
        assert_eq!(n["metadata"]["labels"]["kubernetes.io/os"], "linux");
        assert_eq!(n["metadata"]["labels"]["node.kubernetes.io/edge"], "");
        assert!(n["metadata"]["uid"].is_null());
        assert!(
            n["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.len() == 4)
        );
        assert!(n["status"]["nodeInfo"]["kubeletVersion"].as_str().is_some());
    }
}
