//! A container's Linux resources (Go's pkg/kubelet/kuberuntime/kuberuntime_container_linux.go).

use std::collections::BTreeMap;

use crate::api::quantity::parse_quantity;
use crate::api::{Container, Pod};
use crate::cri::LinuxResources;

/// The CFS period the kubelet sends (`cm.QuotaPeriod`, 100 ms: `cpuCFSQuotaPeriod` stays at
/// its default).
const QUOTA_PERIOD: i64 = 100_000;

/// The kubelet's `cm.MilliCPUToShares`: 1024 per core, between 2 and 262144; 2 for none.
pub fn milli_cpu_to_shares(milli: i64) -> i64 {
    const MIN_SHARES: i64 = 2;
    const MAX_SHARES: i64 = 262_144;
    if milli == 0 {
        return MIN_SHARES;
    }
    (milli.saturating_mul(1024) / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// The kubelet's `cm.MilliCPUToQuota`: the limit's share of `period`, at least 1 ms; 0 (no
/// quota) without a limit.
pub fn milli_cpu_to_quota(milli: i64, period: i64) -> i64 {
    const MIN_QUOTA: i64 = 1000;
    if milli == 0 {
        return 0;
    }
    (milli.saturating_mul(period) / 1000).max(MIN_QUOTA)
}

/// The kubelet's `calculateLinuxResources` (kuberuntime_container_linux.go): shares from the
/// CPU request, or from the limit when no request is named; the memory limit (0 = unset); the
/// CFS quota of the CPU limit over the 100 ms period, the period always (`cpuCFSQuota` on, its
/// default).
fn calculate_linux_resources(
    cpu_request: Option<i64>,
    cpu_limit: i64,
    memory_limit: i64,
) -> LinuxResources {
    LinuxResources {
        cpu_shares: milli_cpu_to_shares(cpu_request.unwrap_or(cpu_limit)),
        memory_limit_in_bytes: memory_limit,
        cpu_quota: milli_cpu_to_quota(cpu_limit, QUOTA_PERIOD),
        cpu_period: QUOTA_PERIOD,
        ..Default::default()
    }
}

/// A container's CPU and memory as CRI resources (`generateLinuxContainerResources` through
/// `calculateLinuxResources`).
pub fn linux_resources(c: &Container) -> LinuxResources {
    let req = crate::api::helpers::container_requests(c);
    let lim = crate::api::helpers::container_limits(c);
    calculate_linux_resources(
        req.cpu_millis,
        lim.cpu_millis.unwrap_or(0),
        lim.memory_bytes.unwrap_or(0),
    )
}

/// The pod's totals for the sandbox, CRI `LinuxPodSandboxConfig.resources` (the kubelet's
/// `calculateSandboxResources`, kuberuntime_sandbox_linux.go): `PodRequests` and `PodLimits`
/// without the overhead (the containers and sidecars, or the largest init container), through
/// `calculateLinuxResources`. A limit counts where a container names one (unlike the pod
/// cgroup's, which needs every container's); shares come from the summed CPU requests, or from
/// the CPU limits when no container requests CPU.
pub fn sandbox_resources(pod: &Pod) -> LinuxResources {
    use crate::api::helpers::{aggregate_containers, container_limits, container_requests};
    let req = aggregate_containers(pod, container_requests);
    let lim = aggregate_containers(pod, container_limits);
    calculate_linux_resources(
        req.cpu_millis,
        lim.cpu_millis.unwrap_or(0),
        lim.memory_bytes.unwrap_or(0),
    )
}

/// CRI `LinuxPodSandboxConfig.overhead` (the kubelet's `convertOverheadToLinuxResources`):
/// `spec.overhead` as requests equal to limits; all zero for a pod without overhead.
pub fn sandbox_overhead(pod: &Pod) -> LinuxResources {
    if !pod.spec.extra.contains_key("overhead") {
        return LinuxResources::default();
    }
    let (cpu, memory) = crate::api::helpers::pod_overhead(pod);
    calculate_linux_resources(Some(cpu), cpu, memory)
}

/// The host's huge page sizes as the hugetlb controller names them (libcontainer's
/// `cgroups.HugePageSizes`): each `hugepages-<N>kB` of /sys/kernel/mm/hugepages, in
/// directory order, as `<N>KB`, `<N/1024>MB` or `<N/1048576>GB`. None when unreadable.
pub fn host_huge_page_sizes(dir: &std::path::Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let kib: u64 = name
                .to_str()?
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            Some(if kib >= 1 << 20 {
                format!("{}GB", kib >> 20)
            } else if kib >= 1 << 10 {
                format!("{}MB", kib >> 10)
            } else {
                format!("{kib}KB")
            })
        })
        .collect()
}

/// The host's huge page sizes, read once (as libcontainer caches them).
fn huge_page_sizes() -> &'static [String] {
    static SIZES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    SIZES.get_or_init(|| host_huge_page_sizes(std::path::Path::new("/sys/kernel/mm/hugepages")))
}

/// A page size in bytes as the hugetlb controller names it (v1helper
/// `HugePageUnitSizeFromByteSize`): divided by 1024 while it divides, `B`..`PB`; `None` when
/// what remains is above 1024 (not a whole number of the largest unit).
fn huge_page_unit_size(mut size: i64) -> Option<String> {
    const UNITS: [&str; 6] = ["B", "KB", "MB", "GB", "TB", "PB"];
    if size <= 0 {
        return None;
    }
    let mut idx = 0;
    while size % 1024 == 0 && idx < UNITS.len() - 1 {
        size /= 1024;
        idx += 1;
    }
    if size > 1024 && idx < UNITS.len() - 1 {
        return None;
    }
    Some(format!("{size}{}", UNITS[idx]))
}

/// The kubelet's `GetHugepageLimitsFromResources` (kuberuntime_container_linux.go): a limit of
/// 0 for each huge page size of the host (`sizes`), replaced by the container's
/// `hugepages-<size>` limit where it has one (a size the host lacks is not sent).
pub fn hugepage_limits(c: &Container, sizes: &[String]) -> Vec<crate::cri::HugepageLimit> {
    let mut wanted: BTreeMap<String, u64> = BTreeMap::new();
    for (name, amount) in &c.resources.limits {
        let Some(size) = name.strip_prefix("hugepages-") else {
            continue;
        };
        let bytes = crate::api::quantity::parse_quantity_str(size).map(|q| q.value());
        let Some(unit) = bytes.ok().and_then(huge_page_unit_size) else {
            tracing::info!(container = %c.name, resource = %name, "invalid huge page size");
            continue;
        };
        if let Ok(q) = parse_quantity(amount) {
            wanted.insert(unit, u64::try_from(q.value()).unwrap_or(0));
        }
    }
    sizes
        .iter()
        .map(|page_size| crate::cri::HugepageLimit {
            page_size: page_size.clone(),
            limit: wanted.get(page_size).copied().unwrap_or(0),
        })
        .collect()
}

/// The container's resources with its QoS OOM score, its huge page limits and its swap
/// (`generateLinuxContainerResources`).
pub fn container_resources(pod: &Pod, c: &Container, swap: &SwapHost) -> LinuxResources {
    let mut r = LinuxResources {
        oom_score_adj: crate::cm::oom_score_adj(pod, c, crate::node::capacity().memory_bytes),
        hugepage_limits: hugepage_limits(c, huge_page_sizes()),
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

#[cfg(test)]
mod resources_tests {
    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        let mut v =
            serde_json::json!({"metadata": {"name": "p", "namespace": "default", "uid": "u"}});
        v["spec"] = spec;
        serde_json::from_value(v).unwrap()
    }

    const MI: i64 = 1 << 20;

    /// calculateSandboxResources (kuberuntime_sandbox_linux.go): PodRequests and PodLimits
    /// without the overhead (AggregateContainerRequests/Limits: the containers plus the
    /// sidecars, or an init container with the sidecars before it where larger), through
    /// calculateLinuxResources. A limit counts where a container names one.
    #[test]
    fn the_sandbox_gets_the_pods_totals_as_calculate_sandbox_resources() {
        let p = pod(serde_json::json!({
            "initContainers": [
                {"name": "side", "image": "i", "restartPolicy": "Always",
                 "resources": {"requests": {"cpu": "100m", "memory": "16Mi"}}},
                {"name": "big", "image": "i",
                 "resources": {"limits": {"cpu": "2", "memory": "512Mi"}}},
            ],
            "containers": [
                {"name": "a", "image": "i",
                 "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "500m", "memory": "64Mi"}}},
                {"name": "b", "image": "i", "resources": {"requests": {"cpu": "150m"}}},
            ],
            "overhead": {"cpu": "250m", "memory": "120Mi"},
        }));
        let r = sandbox_resources(&p);
        // Requests: a 250m + b 150m + side 100m = 500m; big while it runs: 2000m (its limit)
        // + side 100m = 2100m, the larger. Limits: a 500m (b and side have none); big 2000m.
        // Memory limits: a 64Mi; big 512Mi. The overhead is not in them.
        assert_eq!(r.cpu_shares, milli_cpu_to_shares(2100));
        assert_eq!(r.cpu_shares, 2150);
        assert_eq!(r.cpu_quota, 200_000);
        assert_eq!(r.cpu_period, 100_000);
        assert_eq!(r.memory_limit_in_bytes, 512 * MI);
        assert_eq!(r.oom_score_adj, 0);
        assert!(r.hugepage_limits.is_empty());

        // convertOverheadToLinuxResources: requests = limits = spec.overhead.
        let o = sandbox_overhead(&p);
        assert_eq!(
            (
                o.cpu_shares,
                o.cpu_quota,
                o.cpu_period,
                o.memory_limit_in_bytes
            ),
            (256, 25_000, 100_000, 120 * MI)
        );
        // Without overhead: all zero (the kubelet still sends the empty message).
        let plain = pod(serde_json::json!({"containers": [{"name": "a", "image": "i"}]}));
        assert_eq!(sandbox_overhead(&plain), LinuxResources::default());
        // BestEffort: the minimum shares, no quota, no memory limit; the period always.
        let r = sandbox_resources(&plain);
        assert_eq!(
            (
                r.cpu_shares,
                r.cpu_quota,
                r.cpu_period,
                r.memory_limit_in_bytes
            ),
            (2, 0, 100_000, 0)
        );
    }

    /// The sums keep what the containers name: a memory limit on one container of two is the
    /// sandbox's limit (PodLimits sums what is there), unlike the pod cgroup's
    /// (ResourceConfigForPod needs every container's).
    #[test]
    fn a_partial_memory_limit_is_the_sandboxs_limit() {
        let p = pod(serde_json::json!({"containers": [
            {"name": "a", "image": "i", "resources": {"limits": {"memory": "64Mi"}}},
            {"name": "b", "image": "i", "resources": {"requests": {"memory": "32Mi"}}},
        ]}));
        assert_eq!(sandbox_resources(&p).memory_limit_in_bytes, 64 * MI);
        assert_eq!(crate::cm::pod_resources(&p).memory_limit, None);
    }

    /// MilliCPUToShares and MilliCPUToQuota (pkg/kubelet/cm/helpers_linux.go).
    #[test]
    fn shares_and_quota_are_the_kubelets() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(1_000_000), 262_144);
        assert_eq!(milli_cpu_to_quota(0, 100_000), 0);
        assert_eq!(milli_cpu_to_quota(5, 100_000), 1000);
        assert_eq!(milli_cpu_to_quota(1500, 100_000), 150_000);
    }

    /// libcontainer's HugePageSizes: `hugepages-<N>kB` entries as KB/MB/GB, others ignored.
    #[test]
    fn host_huge_page_sizes_are_named_as_libcontainer_names_them() {
        let d = tempfile::tempdir().unwrap();
        for e in [
            "hugepages-2048kB",
            "hugepages-1048576kB",
            "hugepages-64kB",
            "other",
        ] {
            std::fs::create_dir(d.path().join(e)).unwrap();
        }
        let mut sizes = host_huge_page_sizes(d.path());
        sizes.sort();
        assert_eq!(sizes, ["1GB", "2MB", "64KB"]);
        assert!(host_huge_page_sizes(&d.path().join("missing")).is_empty());
    }

    /// GetHugepageLimitsFromResources (kuberuntime_container_linux.go): a 0 limit for each
    /// size of the host, the container's `hugepages-<size>` limit where it names one; a size
    /// the host lacks is not sent. HugePageUnitSizeFromByteSize names the sizes.
    #[test]
    fn every_host_page_size_gets_a_limit_zero_unless_asked() {
        let sizes = vec!["1GB".to_string(), "2MB".to_string()];
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c", "image": "i",
            "resources": {"limits": {"hugepages-2Mi": "8Mi", "hugepages-32Mi": "32Mi", "memory": "64Mi"}},
        }))
        .unwrap();
        let got: Vec<(String, u64)> = hugepage_limits(&c, &sizes)
            .into_iter()
            .map(|h| (h.page_size, h.limit))
            .collect();
        assert_eq!(got, [("1GB".to_string(), 0), ("2MB".to_string(), 8 << 20)]);
        let none = hugepage_limits(&Container::default(), &sizes);
        assert!(none.iter().all(|h| h.limit == 0) && none.len() == 2);
        assert!(hugepage_limits(&c, &[]).is_empty());
        assert_eq!(huge_page_unit_size(2 << 20).as_deref(), Some("2MB"));
        assert_eq!(huge_page_unit_size(1 << 30).as_deref(), Some("1GB"));
        assert_eq!(huge_page_unit_size(64 << 10).as_deref(), Some("64KB"));
        assert_eq!(huge_page_unit_size(1025), None);
        assert_eq!(huge_page_unit_size(0), None);
    }
}
