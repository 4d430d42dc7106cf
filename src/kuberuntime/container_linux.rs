//! A container's Linux resources (Go's pkg/kubelet/kuberuntime/kuberuntime_container_linux.go).

use std::collections::BTreeMap;

use crate::api::quantity::parse_quantity;
use crate::api::{Container, Pod};
use crate::cri::LinuxResources;

/// CPU and memory limits to CRI resources, as the kubelet does for cgroup v1/v2
/// (shares from the request, CFS quota from the limit over a 100ms period).
pub fn linux_resources(c: &Container) -> LinuxResources {
    const PERIOD: i64 = 100_000;
    let milli = |m: &BTreeMap<String, serde_json::Value>, k: &str| {
        m.get(k)
            .and_then(|v| parse_quantity(v).ok())
            .map(|q| q.milli_value())
    };
    let cpu_req = milli(&c.resources.requests, "cpu").or_else(|| milli(&c.resources.limits, "cpu"));
    let cpu_lim = milli(&c.resources.limits, "cpu");
    let mem_lim = c
        .resources
        .limits
        .get("memory")
        .and_then(|v| parse_quantity(v).ok())
        .map(|q| q.value());
    let shares = match cpu_req {
        Some(m) if m > 0 => ((m * 1024) / 1000).max(2),
        _ => 2,
    };
    let quota = cpu_lim
        .map(|m| ((m * PERIOD) / 1000).max(1000))
        .unwrap_or(0);
    LinuxResources {
        cpu_period: if quota > 0 { PERIOD } else { 0 },
        cpu_quota: quota,
        cpu_shares: shares,
        memory_limit_in_bytes: mem_lim.unwrap_or(0),
        oom_score_adj: 0,
    }
}

/// The container's resources with its QoS OOM score (`generateLinuxContainerResources`).
pub fn container_resources(pod: &Pod, c: &Container) -> LinuxResources {
    LinuxResources {
        oom_score_adj: crate::cm::oom_score_adj(pod, c, crate::node::capacity().memory_bytes),
        ..linux_resources(c)
    }
}
