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
        // Always the period, quota 0 without a limit: the kubelet's calculateLinuxResources
        // sets CpuPeriod whenever cpuCFSQuota is on (its default).
        cpu_period: PERIOD,
        cpu_quota: quota,
        cpu_shares: shares,
        memory_limit_in_bytes: mem_lim.unwrap_or(0),
        ..Default::default()
    }
}

/// The container's resources with its QoS OOM score and its swap
/// (`generateLinuxContainerResources`).
pub fn container_resources(pod: &Pod, c: &Container, swap: &SwapHost) -> LinuxResources {
    let mut r = LinuxResources {
        oom_score_adj: crate::cm::oom_score_adj(pod, c, crate::node::capacity().memory_bytes),
        ..linux_resources(c)
    };
    configure_swap(&mut r, swap, pod, c);
    r
}

/// `memorySwap.swapBehavior` (the kubelet's NodeSwap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SwapBehavior {
    /// Pods get no swap (the default).
    #[default]
    NoSwap,
    /// Burstable pods' containers get swap in proportion to their memory request.
    LimitedSwap,
}

/// A swapBehavior other than `NoSwap` or `LimitedSwap`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown memorySwap.swapBehavior {0:?} (NoSwap or LimitedSwap)")]
pub struct UnknownSwapBehavior(pub String);

impl SwapBehavior {
    /// "" is the kubelet's unset value, which means NoSwap.
    pub fn parse(s: &str) -> Result<SwapBehavior, UnknownSwapBehavior> {
        match s {
            "" | "NoSwap" => Ok(SwapBehavior::NoSwap),
            "LimitedSwap" => Ok(SwapBehavior::LimitedSwap),
            other => Err(UnknownSwapBehavior(other.into())),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SwapBehavior::NoSwap => "NoSwap",
            SwapBehavior::LimitedSwap => "LimitedSwap",
        }
    }
}

/// The swap setting and what the host offers, read once at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SwapHost {
    pub behavior: SwapBehavior,
    /// The unified cgroup v2 hierarchy at /sys/fs/cgroup (libcontainer's
    /// IsCgroup2UnifiedMode).
    pub cgroup_v2: bool,
    /// The swap controller (the kubelet's `swapControllerAvailable`): v1
    /// `memory/memory.memsw.limit_in_bytes`, v2 `memory.swap.max` in nanolet's own cgroup.
    /// Without it nothing about swap is sent.
    pub controller: bool,
    /// MemTotal and SwapTotal (/proc/meminfo), bytes.
    pub memory_capacity: i64,
    pub swap_capacity: i64,
}

impl SwapHost {
    pub fn detect(behavior: SwapBehavior) -> SwapHost {
        let cgroup_v2 = nix::sys::statfs::statfs("/sys/fs/cgroup")
            .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC);
        let controller = if cgroup_v2 {
            // The process's own cgroup ("0::/path"): the root cgroup has no memory.swap.max.
            std::fs::read_to_string("/proc/self/cgroup")
                .ok()
                .and_then(|t| {
                    t.lines()
                        .find_map(|l| l.strip_prefix("0::").map(str::to_string))
                })
                .is_some_and(|own| {
                    std::path::Path::new("/sys/fs/cgroup")
                        .join(own.trim_start_matches('/'))
                        .join("memory.swap.max")
                        .exists()
                })
        } else {
            std::path::Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists()
        };
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        SwapHost {
            behavior,
            cgroup_v2,
            controller,
            memory_capacity: crate::node::capacity().memory_bytes,
            swap_capacity: crate::node::parse_meminfo_kib(&meminfo, "SwapTotal").map_or(0, |kib| {
                i64::try_from(kib).unwrap_or(i64::MAX).saturating_mul(1024)
            }),
        }
    }
}

/// Why LimitedSwap cannot give a container swap (then it gets none).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SwapError {
    #[error("total node memory is 0")]
    NoMemory,
    #[error("container request {request} is larger than total node memory {total}")]
    RequestTooLarge { request: i64, total: i64 },
}

/// The kubelet's `calcSwapForBurstablePods` (KEP 2400): the container's share of the node's
/// swap is its share of the node's memory, `request / MemTotal * SwapTotal`, truncated.
pub fn calc_swap_for_burstable(request: i64, total: i64, swap: i64) -> Result<i64, SwapError> {
    if total <= 0 {
        return Err(SwapError::NoMemory);
    }
    if request > total {
        return Err(SwapError::RequestTooLarge { request, total });
    }
    Ok(((request as f64 / total as f64) * swap as f64) as i64)
}

/// The kubelet's `GetContainerSwapBehavior`: LimitedSwap only with a swap controller on
/// cgroup v2, for a container of a Burstable, non-critical pod that requests memory below its
/// limit; NoSwap for everything else.
pub fn container_swap_behavior(host: &SwapHost, pod: &Pod, c: &Container) -> SwapBehavior {
    if host.behavior != SwapBehavior::LimitedSwap || !host.controller || !host.cgroup_v2 {
        return SwapBehavior::NoSwap;
    }
    if crate::api::helpers::is_critical(pod) {
        return SwapBehavior::NoSwap;
    }
    let bytes = |m: &BTreeMap<String, serde_json::Value>| {
        m.get("memory")
            .and_then(|v| parse_quantity(v).ok())
            .map_or(0, |q| q.value())
    };
    let (request, limit) = (bytes(&c.resources.requests), bytes(&c.resources.limits));
    if crate::api::helpers::qos_class(pod) != "Burstable"
        || (request == 0 && limit == 0)
        || request == limit
    {
        return SwapBehavior::NoSwap;
    }
    SwapBehavior::LimitedSwap
}

/// The kubelet's `configureContainerSwapResources`: nothing without a swap controller;
/// NoSwap is the memory limit as the memory+swap limit on v1 (no swap above the limit) and
/// `memory.swap.max=0` on v2; LimitedSwap is `memory.swap.max` from
/// [`calc_swap_for_burstable`] (NoSwap when that fails).
pub fn configure_swap(r: &mut LinuxResources, host: &SwapHost, pod: &Pod, c: &Container) {
    if !host.controller {
        return;
    }
    let no_swap = |r: &mut LinuxResources| {
        if host.cgroup_v2 {
            r.unified.insert("memory.swap.max".into(), "0".into());
        } else {
            r.memory_swap_limit_in_bytes = r.memory_limit_in_bytes;
        }
    };
    match container_swap_behavior(host, pod, c) {
        SwapBehavior::NoSwap => no_swap(r),
        SwapBehavior::LimitedSwap => {
            let request = c
                .resources
                .requests
                .get("memory")
                .and_then(|v| parse_quantity(v).ok())
                .map_or(0, |q| q.value());
            match calc_swap_for_burstable(request, host.memory_capacity, host.swap_capacity) {
                Ok(swap) => {
                    r.unified.insert("memory.swap.max".into(), swap.to_string());
                }
                Err(e) => {
                    tracing::warn!(pod = %pod.metadata.name, container = %c.name, error = %e, "cannot calculate swap allocation amount; disallowing swap");
                    no_swap(r);
                }
            }
        }
    }
}

#[cfg(test)]
mod swap_tests {
    use super::*;

    fn pod(resources: serde_json::Value, class: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"priorityClassName": class,
                     "containers": [{"name": "c", "image": "i", "resources": resources}]}
        }))
        .unwrap()
    }

    const GIB: i64 = 1 << 30;

    fn host(behavior: SwapBehavior, v2: bool) -> SwapHost {
        SwapHost {
            behavior,
            cgroup_v2: v2,
            controller: true,
            memory_capacity: 8 * GIB,
            swap_capacity: 2 * GIB,
        }
    }

    /// calculateLinuxResources (kuberuntime_container_linux.go): with cpuCFSQuota on (the
    /// default) CpuPeriod is the 100 ms quota period even without a CPU limit (quota 0 then);
    /// shares 2 without a request.
    #[test]
    fn the_cpu_period_is_sent_without_a_limit_as_the_kubelet_does() {
        let r = linux_resources(&Container::default());
        assert_eq!((r.cpu_period, r.cpu_quota, r.cpu_shares), (100_000, 0, 2));
    }

    /// calcSwapForBurstablePods: request / MemTotal * SwapTotal; errors for a node without
    /// memory and for a request above it.
    #[test]
    fn limited_swap_is_the_requests_share_of_the_nodes_swap() {
        assert_eq!(calc_swap_for_burstable(GIB, 8 * GIB, 2 * GIB), Ok(GIB / 4));
        assert_eq!(calc_swap_for_burstable(0, 8 * GIB, 2 * GIB), Ok(0));
        // Truncated, as Go's int64(float64).
        assert_eq!(calc_swap_for_burstable(1, 3, 2), Ok(0));
        assert_eq!(calc_swap_for_burstable(1, 0, 2), Err(SwapError::NoMemory));
        assert_eq!(
            calc_swap_for_burstable(9 * GIB, 8 * GIB, GIB),
            Err(SwapError::RequestTooLarge {
                request: 9 * GIB,
                total: 8 * GIB
            })
        );
    }

    /// GetContainerSwapBehavior: LimitedSwap only for a Burstable, non-critical pod's
    /// container requesting memory below its limit, on cgroup v2 with a swap controller.
    #[test]
    fn limited_swap_applies_to_burstable_containers_on_v2_only() {
        let burst = pod(
            serde_json::json!({"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}}),
            "",
        );
        let c = &burst.spec.containers[0];
        let v2 = host(SwapBehavior::LimitedSwap, true);
        assert_eq!(
            container_swap_behavior(&v2, &burst, c),
            SwapBehavior::LimitedSwap
        );
        for other in [
            host(SwapBehavior::NoSwap, true),
            host(SwapBehavior::LimitedSwap, false),
            SwapHost {
                controller: false,
                ..v2
            },
        ] {
            assert_eq!(
                container_swap_behavior(&other, &burst, c),
                SwapBehavior::NoSwap
            );
        }
        let crit = pod(
            serde_json::json!({"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}}),
            "system-node-critical",
        );
        let guaranteed = pod(
            serde_json::json!({"requests": {"memory": "1Gi", "cpu": "1"}, "limits": {"memory": "1Gi", "cpu": "1"}}),
            "",
        );
        let best_effort = pod(serde_json::json!({}), "");
        let equal = pod(
            serde_json::json!({"requests": {"memory": "1Gi", "cpu": "1"}, "limits": {"memory": "1Gi"}}),
            "",
        );
        for p in [&crit, &guaranteed, &best_effort, &equal] {
            assert_eq!(
                container_swap_behavior(&v2, p, &p.spec.containers[0]),
                SwapBehavior::NoSwap,
                "{:?}",
                p.spec.containers[0].resources
            );
        }
    }

    /// configureContainerSwapResources: the CRI values per behavior and cgroup version.
    #[test]
    fn swap_goes_to_cri_as_the_kubelet_sends_it() {
        let burst = pod(
            serde_json::json!({"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}}),
            "",
        );
        let c = &burst.spec.containers[0];
        let r = |h: &SwapHost| {
            let mut r = linux_resources(c);
            configure_swap(&mut r, h, &burst, c);
            r
        };
        let limited = r(&host(SwapBehavior::LimitedSwap, true));
        assert_eq!(limited.unified["memory.swap.max"], (GIB / 4).to_string());
        assert_eq!(limited.memory_swap_limit_in_bytes, 0);
        let none_v2 = r(&host(SwapBehavior::NoSwap, true));
        assert_eq!(none_v2.unified["memory.swap.max"], "0");
        // v1: memory+swap = memory, no swap above the limit; nothing in unified.
        let none_v1 = r(&host(SwapBehavior::LimitedSwap, false));
        assert_eq!(none_v1.memory_swap_limit_in_bytes, 2 * GIB);
        assert!(none_v1.unified.is_empty());
        // No swap controller (no memory.memsw.limit_in_bytes, or no memory.swap.max): nothing.
        let nothing = r(&SwapHost {
            controller: false,
            ..host(SwapBehavior::LimitedSwap, true)
        });
        assert_eq!(nothing, linux_resources(c));
    }
}
