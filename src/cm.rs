//! Pod-level cgroups, the kubelet's way (cgroupsPerQOS): every pod gets a cgroup under its QoS
//! class's (`/kubepods/pod<uid>` for Guaranteed, `/kubepods/burstable/pod<uid>`,
//! `/kubepods/besteffort/pod<uid>`), the sandbox and containers go below it, and the pod cgroup
//! carries the pod's totals (pkg/kubelet/cm `ResourceConfigForPod`):
//! - `cpu.shares` from the sum of CPU requests (2 for BestEffort),
//! - a CFS quota from the sum of CPU limits when every container has one,
//! - a memory limit from the sum of memory limits when every container has one,
//! - `pids.max` from `podPidsLimit`.
//!
//! Above the pods (node_container_manager, qos_container_manager): `kubepods` at node
//! allocatable ([`enforce_pods_allocatable`]), the reserved cgroups ([`enforce_reserved`]), the
//! QoS tiers' CPU shares ([`update_qos_cgroups`]). Each on cgroup v1 and v2.
//!
//! With the cgroupfs driver nanolet writes these itself before the sandbox starts (the runtime
//! creates missing directories but sets no pod totals). With the systemd driver each of these
//! cgroups is a slice (`kubepods-burstable-pod<uid>.slice`) that nanolet creates as a transient
//! unit and gives its values through systemd's D-Bus API ([`systemd`]), as the kubelet does.
//!
//! Also: a pod's process count ([`pod_pids`]), removing a terminated pod's (empty) cgroups
//! ([`remove_pod_cgroups`]), and a
//! container's OOM score by QoS class ([`oom_score_adj`], the kubelet's pkg/kubelet/qos).

use std::path::{Path, PathBuf};

use tracing::debug;

pub mod systemd;

use crate::api::quantity::parse_quantity;
use crate::api::{Container, Pod};

/// `cgroupDriver`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CgroupDriver {
    #[default]
    Cgroupfs,
    Systemd,
}

/// A cgroupDriver other than `cgroupfs` or `systemd`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown cgroup driver {0:?} (cgroupfs or systemd)")]
pub struct UnknownDriver(pub String);

impl CgroupDriver {
    pub fn parse(s: &str) -> Result<CgroupDriver, UnknownDriver> {
        match s {
            "cgroupfs" => Ok(CgroupDriver::Cgroupfs),
            "systemd" => Ok(CgroupDriver::Systemd),
            other => Err(UnknownDriver(other.into())),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CgroupDriver::Cgroupfs => "cgroupfs",
            CgroupDriver::Systemd => "systemd",
        }
    }
}

/// The QoS level of the pod's cgroup: "" (Guaranteed), "burstable", "besteffort".
fn qos_level(pod: &Pod) -> &'static str {
    match crate::api::helpers::qos_class(pod).as_str() {
        "Guaranteed" => "",
        "Burstable" => "burstable",
        _ => "besteffort",
    }
}

/// A cgroup named by its parts (the kubelet's `CgroupName`, e.g. `[kubepods, burstable,
/// pod<uid>]`) in the driver's form, as the kubelet's cgroup manager `Name` gives it: cgroupfs
/// `/kubepods/burstable/pod<uid>`; systemd (`ToSystemd`: each part's `-` escaped to `_`,
/// joined with `-`, `.slice`, expanded to its parent slices)
/// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`.
pub fn cgroup_name(parts: &[&str], driver: CgroupDriver) -> String {
    match driver {
        CgroupDriver::Cgroupfs => format!("/{}", parts.join("/")),
        CgroupDriver::Systemd if parts.is_empty() => "/".into(),
        CgroupDriver::Systemd => {
            let escaped: Vec<String> = parts.iter().map(|p| p.replace('-', "_")).collect();
            let slice = format!("{}.slice", escaped.join("-"));
            format!("/{}", systemd_slice_path(&slice).display())
        }
    }
}

/// The QoS tier's cgroup (the kubelet's QOSContainersInfo): `kubepods` for Guaranteed,
/// `kubepods/burstable`, `kubepods/besteffort`, in the driver's form.
pub fn qos_cgroup_name(qos_class: &str, driver: CgroupDriver) -> String {
    match qos_class {
        "Burstable" => cgroup_name(&["kubepods", "burstable"], driver),
        "BestEffort" => cgroup_name(&["kubepods", "besteffort"], driver),
        _ => cgroup_name(&["kubepods"], driver),
    }
}

/// The pod's cgroup parent as CRI takes it (`LinuxPodSandboxConfig.cgroup_parent`, the
/// kubelet's `GetPodCgroupParent`): its QoS tier's cgroup, then `pod<uid>`
/// ([`cgroup_name`]). containerd's systemd cgroup mode uses the last slice and adds its
/// `cri-containerd:<id>` scope.
pub fn pod_cgroup_parent(pod: &Pod, driver: CgroupDriver) -> String {
    let pod_part = format!("pod{}", pod.metadata.uid);
    match qos_level(pod) {
        "" => cgroup_name(&["kubepods", &pod_part], driver),
        level => cgroup_name(&["kubepods", level, &pod_part], driver),
    }
}

/// The pod cgroup's resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodCgroupResources {
    pub cpu_shares: u64,
    /// CFS quota in microseconds per `cpu_period`; `None` = unlimited.
    pub cpu_quota: Option<i64>,
    pub cpu_period: u64,
    pub memory_limit: Option<i64>,
}

/// The kubelet's `MilliCPUToShares`: 1024 per core, at least 2.
fn shares(milli: i64) -> u64 {
    if milli <= 0 {
        return 2;
    }
    ((milli * 1024) / 1000).max(2) as u64
}

/// The kubelet's `ResourceConfigForPod` (with `spec.overhead`): requests default to limits;
/// init containers count with the largest one (max(sum of regular, largest init)).
pub fn pod_resources(pod: &Pod) -> PodCgroupResources {
    const PERIOD: u64 = 100_000;
    let get = |m: &std::collections::BTreeMap<String, serde_json::Value>, k: &str, milli: bool| {
        m.get(k)
            .and_then(|v| parse_quantity(v).ok())
            .map(|q| if milli { q.milli_value() } else { q.value() })
    };
    let (mut cpu_req, mut cpu_lim, mut mem_lim) = (0i64, 0i64, 0i64);
    let (mut all_cpu_lim, mut all_mem_lim) = (true, true);
    for c in &pod.spec.containers {
        let l_cpu = get(&c.resources.limits, "cpu", true);
        let l_mem = get(&c.resources.limits, "memory", false);
        cpu_req += get(&c.resources.requests, "cpu", true)
            .or(l_cpu)
            .unwrap_or(0);
        match l_cpu {
            Some(v) => cpu_lim += v,
            None => all_cpu_lim = false,
        }
        match l_mem {
            Some(v) => mem_lim += v,
            None => all_mem_lim = false,
        }
    }
    for c in &pod.spec.init_containers {
        let l_cpu = get(&c.resources.limits, "cpu", true);
        let l_mem = get(&c.resources.limits, "memory", false);
        cpu_req = cpu_req.max(
            get(&c.resources.requests, "cpu", true)
                .or(l_cpu)
                .unwrap_or(0),
        );
        if let Some(v) = l_cpu {
            cpu_lim = cpu_lim.max(v);
        }
        if let Some(v) = l_mem {
            mem_lim = mem_lim.max(v);
        }
    }
    // The pod's overhead (its RuntimeClass's) joins the requests and the limits it has.
    let (oh_cpu, oh_mem) = crate::api::helpers::pod_overhead(pod);
    cpu_req += oh_cpu;
    cpu_lim += oh_cpu;
    mem_lim += oh_mem;
    let qos = crate::api::helpers::qos_class(pod);
    if qos == "BestEffort" {
        return PodCgroupResources {
            cpu_shares: 2,
            cpu_quota: None,
            cpu_period: PERIOD,
            memory_limit: None,
        };
    }
    PodCgroupResources {
        cpu_shares: shares(cpu_req),
        // MilliCPUToQuota: at least 1 ms per period.
        cpu_quota: (all_cpu_lim && cpu_lim > 0)
            .then(|| ((cpu_lim * PERIOD as i64) / 1000).max(1000)),
        cpu_period: PERIOD,
        memory_limit: (all_mem_lim && mem_lim > 0).then_some(mem_lim),
    }
}

/// The cgroup v2 weight for v1 shares (the runc/kubelet conversion).
pub fn shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    1 + ((shares.saturating_sub(2)) * 9999) / 262_142
}

fn write(dir: &Path, file: &str, value: &str) {
    if let Err(e) = std::fs::write(dir.join(file), value) {
        debug!(dir = %dir.display(), file, value, error = %e, "writing pod cgroup setting");
    }
}

/// Creates the pod cgroup (cgroupfs driver) and writes its totals, and `pids.max` when
/// `pids_limit` > 0 (`podPidsLimit`, the kubelet's `ResourceConfigForPod` PidsLimit); failures
/// are logged at debug level and never stop the pod (the containers' own limits still apply).
/// Returns the directories written, for tests and logs.
pub fn apply(pod: &Pod, root: &Path, pids_limit: i64) -> Vec<PathBuf> {
    let parent = pod_cgroup_parent(pod, CgroupDriver::Cgroupfs);
    let rel = parent.trim_start_matches('/');
    let r = pod_resources(pod);
    let mut done = vec![];
    if root.join("cgroup.controllers").exists() {
        // cgroup v2: enable the controllers down the path (as runc's fs2 manager does), then
        // write the pod's files.
        let dir = root.join(rel);
        if std::fs::create_dir_all(&dir).is_ok() {
            let mut at = root.to_path_buf();
            for part in Path::new(rel).components() {
                // One at a time: a controller the host lacks must not block the others.
                for controller in ["+cpu", "+memory", "+pids"] {
                    write(&at, "cgroup.subtree_control", controller);
                }
                at.push(part);
            }
            write(
                &dir,
                "cpu.weight",
                &shares_to_weight(r.cpu_shares).to_string(),
            );
            let quota = r.cpu_quota.map_or("max".to_string(), |q| q.to_string());
            write(&dir, "cpu.max", &format!("{quota} {}", r.cpu_period));
            if let Some(m) = r.memory_limit {
                write(&dir, "memory.max", &m.to_string());
            }
            if pids_limit > 0 {
                write(&dir, "pids.max", &pids_limit.to_string());
            }
            done.push(dir);
        }
        return done;
    }
    let v1 = |controller: &str, files: &[(&str, String)], done: &mut Vec<PathBuf>| {
        let hier = root.join(controller);
        if !hier.is_dir() {
            return;
        }
        let dir = hier.join(rel);
        if std::fs::create_dir_all(&dir).is_ok() {
            for (file, value) in files {
                write(&dir, file, value);
            }
            done.push(dir);
        }
    };
    v1(
        "cpu",
        &[
            ("cpu.shares", r.cpu_shares.to_string()),
            ("cpu.cfs_period_us", r.cpu_period.to_string()),
            ("cpu.cfs_quota_us", r.cpu_quota.unwrap_or(-1).to_string()),
        ],
        &mut done,
    );
    let memory: Vec<(&str, String)> = r
        .memory_limit
        .map(|m| ("memory.limit_in_bytes", m.to_string()))
        .into_iter()
        .collect();
    v1("memory", &memory, &mut done);
    if pids_limit > 0 {
        v1("pids", &[("pids.max", pids_limit.to_string())], &mut done);
    }
    done
}

/// Writes `files` (v1 name, v2 name, value) into the cgroup `rel` below `root`: on cgroup v2
/// into `root/rel` (controllers enabled down the path), on v1 into each controller's
/// hierarchy (an empty name: not on that version). Creates the directories; returns those
/// written.
fn write_cgroup(root: &Path, rel: &str, files: &[(&str, &str, String)]) -> Vec<PathBuf> {
    let rel = rel.trim_start_matches('/');
    let mut done = vec![];
    if root.join("cgroup.controllers").exists() {
        let dir = root.join(rel);
        if std::fs::create_dir_all(&dir).is_ok() {
            let mut at = root.to_path_buf();
            for part in Path::new(rel).components() {
                for controller in ["+cpu", "+memory", "+pids"] {
                    write(&at, "cgroup.subtree_control", controller);
                }
                at.push(part);
            }
            for (_, v2, value) in files.iter().filter(|f| !f.1.is_empty()) {
                write(&dir, v2, value);
            }
            done.push(dir);
        }
        return done;
    }
    for (v1, _, value) in files {
        let Some((controller, _)) = v1.split_once('.') else {
            continue;
        };
        let hier = root.join(controller);
        let dir = hier.join(rel);
        if hier.is_dir() && std::fs::create_dir_all(&dir).is_ok() {
            write(&dir, v1, value);
            if !done.contains(&dir) {
                done.push(dir);
            }
        }
    }
    done
}

/// `enforceNodeAllocatable: [pods]` (the kubelet's node_container_manager): the `kubepods`
/// cgroup gets cpu shares for the allocatable CPU, a memory limit at allocatable memory and
/// `pids.max` at the allocatable PIDs, each capacity minus systemReserved and kubeReserved
/// (the hard eviction threshold is not taken off: the kubelet leaves that margin to eviction).
pub fn enforce_pods_allocatable(
    root: &Path,
    cpu_millis: i64,
    memory_bytes: i64,
    pids: Option<i64>,
) -> Vec<PathBuf> {
    enforce(root, "kubepods", cpu_millis, Some(memory_bytes), pids)
}

/// `enforceNodeAllocatable: [system-reserved]` / `[kube-reserved]`: the reservation as the
/// limit of its cgroup (`systemReservedCgroup`, `kubeReservedCgroup`).
pub fn enforce_reserved(
    root: &Path,
    cgroup: &str,
    cpu_millis: i64,
    memory_bytes: Option<i64>,
    pids: Option<i64>,
) -> Vec<PathBuf> {
    enforce(root, cgroup, cpu_millis, memory_bytes, pids)
}

/// The kubelet's `getCgroupConfig` written by its cgroup manager: shares, the memory limit
/// (none: unlimited) and, when positive, `pids.max` (libcontainer leaves a 0 `PidsLimit`
/// alone).
fn enforce(
    root: &Path,
    cgroup: &str,
    cpu_millis: i64,
    memory: Option<i64>,
    pids: Option<i64>,
) -> Vec<PathBuf> {
    let s = shares(cpu_millis);
    let v2 = root.join("cgroup.controllers").exists();
    let cpu = if v2 { shares_to_weight(s) } else { s }.to_string();
    let mem = match memory {
        Some(m) => m.to_string(),
        None if v2 => "max".into(),
        None => "-1".into(),
    };
    let mut files = vec![
        ("cpu.shares", "cpu.weight", cpu),
        ("memory.limit_in_bytes", "memory.max", mem),
    ];
    if let Some(p) = pids.filter(|p| *p > 0) {
        files.push(("pids.max", "pids.max", p.to_string()));
    }
    write_cgroup(root, cgroup, &files)
}

/// `qosReserved: {memory: N%}` (the kubelet's QOSReserved): node allocatable memory (capacity
/// minus the reservations) and the percentage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QosMemoryReserve {
    pub allocatable: i64,
    pub percent: i64,
}

/// The tiers' memory limits under `qosReserved` (qos_container_manager `setMemoryReserve`):
/// burstable = allocatable - guaranteed requests x percent / 100, besteffort = burstable -
/// burstable requests x percent / 100. `(burstable, besteffort)`; `None` without allocatable
/// memory (the kubelet then sets none).
pub fn qos_memory_limits(
    reserve: QosMemoryReserve,
    guaranteed_requests: i64,
    burstable_requests: i64,
) -> Option<(i64, i64)> {
    if reserve.allocatable == 0 {
        return None;
    }
    let burstable = reserve.allocatable - guaranteed_requests * reserve.percent / 100;
    let best_effort = burstable - burstable_requests * reserve.percent / 100;
    Some((burstable, best_effort))
}

/// The QoS tier cgroups (the kubelet's qos_container_manager `setCPUCgroupConfig`):
/// `kubepods/besteffort` gets the minimum 2 shares, `kubepods/burstable` the shares of the sum
/// of its pods' CPU requests; with `qosReserved` memory also their memory limits
/// ([`qos_memory_limits`]). Called whenever the set of pods changes.
pub fn update_qos_cgroups<'a>(
    root: &Path,
    pods: impl Iterator<Item = &'a Pod>,
    memory_reserve: Option<QosMemoryReserve>,
) -> Vec<PathBuf> {
    let [best_effort_tier, burstable_tier] = qos_tiers(pods, memory_reserve);
    let v2 = root.join("cgroup.controllers").exists();
    let files = |t: QosTier| {
        let cpu = if v2 { shares_to_weight(t.cpu_shares) } else { t.cpu_shares };
        let mut f = vec![("cpu.shares", "cpu.weight", cpu.to_string())];
        f.extend(
            t.memory
                .map(|m| ("memory.limit_in_bytes", "memory.max", m.to_string())),
        );
        f
    };
    let tier = |class| qos_cgroup_name(class, CgroupDriver::Cgroupfs);
    let mut done = write_cgroup(root, &tier("BestEffort"), &files(best_effort_tier));
    done.extend(write_cgroup(root, &tier("Burstable"), &files(burstable_tier)));
    done
}

/// A QoS tier's values: CPU shares and, with `qosReserved`, a memory limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QosTier {
    pub cpu_shares: u64,
    pub memory: Option<i64>,
}

/// The tiers' values for the pods that run, `[besteffort, burstable]` (qos_container_manager
/// `setCPUCgroupConfig` and `setMemoryReserve`).
pub fn qos_tiers<'a>(
    pods: impl Iterator<Item = &'a Pod>,
    memory_reserve: Option<QosMemoryReserve>,
) -> [QosTier; 2] {
    let (mut burstable_millis, mut burstable_mem, mut guaranteed_mem) = (0i64, 0i64, 0i64);
    for p in pods {
        let (cpu, mem) = crate::api::helpers::pod_requests(p);
        match qos_level(p) {
            "burstable" => {
                burstable_millis += cpu;
                burstable_mem += mem;
            }
            "" => guaranteed_mem += mem,
            _ => {}
        }
    }
    let limits = memory_reserve.and_then(|r| qos_memory_limits(r, guaranteed_mem, burstable_mem));
    [
        QosTier {
            cpu_shares: 2,
            memory: limits.map(|l| l.1.max(0)),
        },
        QosTier {
            cpu_shares: shares(burstable_millis),
            memory: limits.map(|l| l.0.max(0)),
        },
    ]
}

/// The QoS tiers as systemd slices (`kubepods-besteffort.slice`, `kubepods-burstable.slice`):
/// created if missing, then given the values of [`qos_tiers`].
pub fn update_qos_slices<'a>(
    sd: &systemd::Manager,
    pods: impl Iterator<Item = &'a Pod>,
    memory_reserve: Option<QosMemoryReserve>,
) -> Result<(), systemd::SystemdError> {
    let tiers = qos_tiers(pods, memory_reserve);
    for (class, t) in ["BestEffort", "Burstable"].into_iter().zip(tiers) {
        let unit = systemd::slice_unit(&qos_cgroup_name(class, CgroupDriver::Systemd));
        sd.ensure(
            &unit,
            &systemd::SliceResources {
                cpu_shares: Some(t.cpu_shares),
                memory: t.memory,
                ..Default::default()
            },
        )?;
    }
    Ok(())
}

/// The pod's slice (`kubepods[-<qos>]-pod<uid>.slice`) with the pod's totals and
/// `podPidsLimit`, as the kubelet's pod container manager `EnsureExists` makes it.
pub fn ensure_pod_slice(
    sd: &systemd::Manager,
    pod: &Pod,
    pids_limit: i64,
) -> Result<(), systemd::SystemdError> {
    let unit = systemd::slice_unit(&pod_cgroup_parent(pod, CgroupDriver::Systemd));
    let r = pod_resources(pod);
    sd.ensure(
        &unit,
        &systemd::SliceResources {
            cpu_shares: Some(r.cpu_shares),
            cpu_quota: r.cpu_quota.map(|q| (q, r.cpu_period)),
            memory: r.memory_limit,
            pids: (pids_limit > 0).then_some(pids_limit),
        },
    )
}

/// `enforceNodeAllocatable` with the systemd driver: `kubepods.slice` (or a reserved cgroup's
/// slice) with the CPU shares of `cpu_millis`, the memory limit and the task limit.
pub fn enforce_slice(
    sd: &systemd::Manager,
    cgroup: &str,
    cpu_millis: i64,
    memory_bytes: Option<i64>,
    pids: Option<i64>,
) -> Result<String, systemd::SystemdError> {
    let unit = systemd::slice_unit(cgroup);
    sd.ensure(
        &unit,
        &systemd::SliceResources {
            cpu_shares: Some(shares(cpu_millis)),
            memory: memory_bytes,
            pids: pids.filter(|p| *p > 0),
            ..Default::default()
        },
    )?;
    Ok(unit)
}

/// systemd's cgroup path of a slice name: each `-` opens a parent slice
/// (`kubepods-burstable-pod_x.slice` is
/// `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod_x.slice`).
pub fn systemd_slice_path(slice: &str) -> PathBuf {
    let name = slice.trim_end_matches(".slice");
    let mut path = PathBuf::new();
    let mut prefix = String::new();
    for part in name.split('-') {
        if !prefix.is_empty() {
            prefix.push('-');
        }
        prefix.push_str(part);
        path.push(format!("{prefix}.slice"));
    }
    path
}

/// The pod's process count (`pids.current` of its cgroup) under the cgroup mount `root`: the v1
/// `pids` hierarchy, the hybrid `unified` one, or `root` itself on a pure cgroup v2 host (Debian
/// 12, Raspberry Pi OS); with either driver's layout.
pub fn pod_pids(root: &Path, pod: &Pod) -> Option<i64> {
    let fs_path =
        PathBuf::from(pod_cgroup_parent(pod, CgroupDriver::Cgroupfs).trim_start_matches('/'));
    let slice =
        PathBuf::from(pod_cgroup_parent(pod, CgroupDriver::Systemd).trim_start_matches('/'));
    for hier in ["pids", "unified", ""] {
        for rel in [&fs_path, &slice] {
            let file = root.join(hier).join(rel).join("pids.current");
            if let Some(n) = std::fs::read_to_string(&file)
                .ok()
                .and_then(|t| t.trim().parse::<i64>().ok())
            {
                return Some(n);
            }
        }
    }
    None
}

/// Remove the (empty) pod cgroup directories of `uid` in every hierarchy (cgroup v1
/// controllers and the unified v2 tree). Only empty directories can be removed, so a cgroup
/// still holding processes is left alone.
pub fn remove_pod_cgroups(uid: &str) {
    let Ok(roots) = std::fs::read_dir("/sys/fs/cgroup") else {
        return;
    };
    let mut hierarchies: Vec<PathBuf> = vec![PathBuf::from("/sys/fs/cgroup")];
    hierarchies.extend(roots.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
    for h in hierarchies {
        for qos in ["", "burstable/", "besteffort/"] {
            let dir = h.join(format!("kubepods/{qos}pod{uid}"));
            if dir.is_dir() {
                if let Err(e) = std::fs::remove_dir(&dir) {
                    debug!(dir = %dir.display(), error = %e, "removing pod cgroup");
                }
            }
        }
    }
}

/// oom_score_adj per QoS class (pkg/kubelet/qos/policy.go): Guaranteed -997, BestEffort 1000,
/// Burstable 1000 - 1000 * memoryRequest / memoryCapacity, kept within [3, 999]; pods of the
/// `system-node-critical` priority class get -997. Where the runtime refuses to lower the score
/// (containerd's restrict_oom_score_adj), it clamps the value itself.
pub fn oom_score_adj(pod: &Pod, c: &Container, memory_capacity: i64) -> i64 {
    const GUARANTEED: i64 = -997;
    const BEST_EFFORT: i64 = 1000;
    if pod.spec.priority_class_name == "system-node-critical" {
        return GUARANTEED;
    }
    match crate::api::helpers::qos_class(pod).as_str() {
        "Guaranteed" => GUARANTEED,
        "BestEffort" => BEST_EFFORT,
        _ => {
            let req = c
                .resources
                .requests
                .get("memory")
                .or_else(|| c.resources.limits.get("memory"))
                .and_then(|v| parse_quantity(v).ok())
                .map(|q| q.value())
                .unwrap_or(0);
            let adj = if memory_capacity > 0 {
                1000 - (1000 * req as i128 / memory_capacity as i128) as i64
            } else {
                1000
            };
            if adj < 1000 + GUARANTEED {
                1000 + GUARANTEED
            } else if adj == BEST_EFFORT {
                adj - 1
            } else {
                adj
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(containers: serde_json::Value, init: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "uid": "0123-abcd"},
            "spec": {"containers": containers, "initContainers": init}
        }))
        .unwrap()
    }

    #[test]
    fn parents_follow_the_qos_class_and_driver() {
        let be = pod(json!([{"name": "a", "image": "i"}]), json!([]));
        assert_eq!(
            pod_cgroup_parent(&be, CgroupDriver::Cgroupfs),
            "/kubepods/besteffort/pod0123-abcd"
        );
        // The kubelet's ToSystemd: the expanded slice path (containerd uses its last part).
        assert_eq!(
            pod_cgroup_parent(&be, CgroupDriver::Systemd),
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0123_abcd.slice"
        );
        let gu = pod(
            json!([{"name": "a", "image": "i", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]),
            json!([]),
        );
        assert_eq!(
            pod_cgroup_parent(&gu, CgroupDriver::Cgroupfs),
            "/kubepods/pod0123-abcd"
        );
        assert_eq!(
            pod_cgroup_parent(&gu, CgroupDriver::Systemd),
            "/kubepods.slice/kubepods-pod0123_abcd.slice"
        );
        let bu = pod(
            json!([{"name": "a", "image": "i", "resources": {"requests": {"cpu": "1"}}}]),
            json!([]),
        );
        assert_eq!(
            pod_cgroup_parent(&bu, CgroupDriver::Systemd),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0123_abcd.slice"
        );
        assert_eq!(
            pod_cgroup_parent(&bu, CgroupDriver::Cgroupfs),
            "/kubepods/burstable/pod0123-abcd"
        );
        // The QoS tiers (QOSContainersInfo) in both forms.
        for (class, fs, sd) in [
            ("Guaranteed", "/kubepods", "/kubepods.slice"),
            (
                "Burstable",
                "/kubepods/burstable",
                "/kubepods.slice/kubepods-burstable.slice",
            ),
            (
                "BestEffort",
                "/kubepods/besteffort",
                "/kubepods.slice/kubepods-besteffort.slice",
            ),
        ] {
            assert_eq!(qos_cgroup_name(class, CgroupDriver::Cgroupfs), fs);
            assert_eq!(qos_cgroup_name(class, CgroupDriver::Systemd), sd);
        }
        assert_eq!(cgroup_name(&[], CgroupDriver::Systemd), "/");
        assert_eq!(CgroupDriver::parse("systemd"), Ok(CgroupDriver::Systemd));
        assert!(CgroupDriver::parse("cgroupfs2").is_err());
    }

    /// ResourceConfigForPod: shares from summed requests; quota and memory limit only when
    /// every container declares a limit; init containers count with the largest.
    #[test]
    fn pod_totals_are_the_kubelets() {
        let gu = pod(
            json!([
                {"name": "a", "image": "i", "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}}},
                {"name": "b", "image": "i", "resources": {"limits": {"cpu": "250m", "memory": "32Mi"}}}
            ]),
            json!([{"name": "init", "image": "i", "resources": {"limits": {"cpu": "2", "memory": "16Mi"}}}]),
        );
        let r = pod_resources(&gu);
        assert_eq!(r.cpu_shares, 2048); // max(750m, 2000m)
        assert_eq!(r.cpu_quota, Some(200_000));
        assert_eq!(r.memory_limit, Some(96 << 20));
        let bu = pod(
            json!([
                {"name": "a", "image": "i", "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "64Mi"}}},
                {"name": "b", "image": "i"}
            ]),
            json!([]),
        );
        let r = pod_resources(&bu);
        assert_eq!(r.cpu_shares, 102);
        assert_eq!(r.cpu_quota, None, "not every container has a CPU limit");
        assert_eq!(
            r.memory_limit, None,
            "not every container has a memory limit"
        );
        let be = pod(json!([{"name": "a", "image": "i"}]), json!([]));
        assert_eq!(pod_resources(&be).cpu_shares, 2);
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(shares_to_weight(262_144), 10_000);
    }

    #[test]
    fn apply_writes_v1_files_under_a_fake_root() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("cpu")).unwrap();
        std::fs::create_dir_all(root.path().join("memory")).unwrap();
        let gu = pod(
            json!([{"name": "a", "image": "i", "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}}}]),
            json!([]),
        );
        let dirs = apply(&gu, root.path(), -1);
        assert_eq!(dirs.len(), 2);
        let read = |p: &str| std::fs::read_to_string(root.path().join(p)).unwrap();
        assert_eq!(read("cpu/kubepods/pod0123-abcd/cpu.shares"), "512");
        assert_eq!(read("cpu/kubepods/pod0123-abcd/cpu.cfs_quota_us"), "50000");
        assert_eq!(
            read("memory/kubepods/pod0123-abcd/memory.limit_in_bytes"),
            (64u64 << 20).to_string()
        );
        // No pids hierarchy written without podPidsLimit.
        assert!(!root.path().join("pids/kubepods").exists());
    }

    /// podPidsLimit: the kubelet's ResourceConfigForPod sets PidsLimit on the pod cgroup
    /// (pids.max), on v1 in the pids hierarchy, on v2 in the pod's own directory with the
    /// pids controller enabled down the path.
    #[test]
    fn pod_pids_limit_is_the_pod_cgroups_pids_max_on_v1_and_v2() {
        let be = pod(json!([{"name": "a", "image": "i"}]), json!([]));
        let v1 = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(v1.path().join("pids")).unwrap();
        apply(&be, v1.path(), 100);
        let read = |root: &Path, p: &str| std::fs::read_to_string(root.join(p)).unwrap();
        assert_eq!(
            read(v1.path(), "pids/kubepods/besteffort/pod0123-abcd/pids.max"),
            "100"
        );
        let v2 = tempfile::tempdir().unwrap();
        std::fs::write(v2.path().join("cgroup.controllers"), "cpu memory pids").unwrap();
        apply(&be, v2.path(), 100);
        assert_eq!(
            read(v2.path(), "kubepods/besteffort/pod0123-abcd/pids.max"),
            "100"
        );
        // Written one controller at a time; a plain file keeps the last.
        assert_eq!(
            read(v2.path(), "kubepods/besteffort/cgroup.subtree_control"),
            "+pids"
        );
        assert_eq!(read(v2.path(), "cgroup.subtree_control"), "+pids");
    }
}

#[cfg(test)]
mod oom_tests {
    use super::*;

    #[test]
    fn oom_score_adj_follows_the_kubelet_qos_policy() {
        let gib = 1i64 << 30;
        let mut p = Pod::default();
        p.spec.containers.push(Container {
            name: "c".into(),
            ..Default::default()
        });
        assert_eq!(
            oom_score_adj(&p, &p.spec.containers[0].clone(), 8 * gib),
            1000,
            "BestEffort"
        );
        p.spec.containers[0]
            .resources
            .requests
            .insert("memory".into(), serde_json::json!("2Gi"));
        assert_eq!(
            oom_score_adj(&p, &p.spec.containers[0].clone(), 8 * gib),
            750,
            "Burstable: 1000 - 1000*2/8"
        );
        p.spec.containers[0]
            .resources
            .requests
            .insert("memory".into(), serde_json::json!("8Gi"));
        assert_eq!(
            oom_score_adj(&p, &p.spec.containers[0].clone(), 8 * gib),
            3,
            "never below 3"
        );
        p.spec.containers[0]
            .resources
            .requests
            .insert("memory".into(), serde_json::json!("1"));
        assert_eq!(
            oom_score_adj(&p, &p.spec.containers[0].clone(), 8 * gib),
            999,
            "never equal to BestEffort"
        );
        for r in ["cpu", "memory"] {
            p.spec.containers[0]
                .resources
                .limits
                .insert(r.into(), serde_json::json!("1"));
            p.spec.containers[0]
                .resources
                .requests
                .insert(r.into(), serde_json::json!("1"));
        }
        assert_eq!(
            oom_score_adj(&p, &p.spec.containers[0].clone(), 8 * gib),
            -997,
            "Guaranteed"
        );
    }

    /// Issue 33: on a pure cgroup v2 host (the unified hierarchy at the mount root, no `pids/`
    /// or `unified/`) a pod's PIDs were read from v1 paths and were always 0, so PID pressure
    /// never found a victim. The kubelet reads the pod cgroup's pids.current on v2.
    #[test]
    fn pod_pids_are_read_on_v1_hybrid_and_pure_v2_and_systemd_layouts() {
        let mut pod = Pod::default();
        pod.metadata.uid = "a-b".into();
        let root = tempfile::tempdir().unwrap();
        assert_eq!(pod_pids(root.path(), &pod), None);
        let put = |rel: &str, n: &str| {
            let d = root.path().join(rel);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("pids.current"), n).unwrap();
        };
        // Pure v2, systemd driver.
        put(
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poda_b.slice",
            "7\n",
        );
        assert_eq!(pod_pids(root.path(), &pod), Some(7));
        // Pure v2, cgroupfs driver (found first).
        put("kubepods/besteffort/poda-b", "9\n");
        assert_eq!(pod_pids(root.path(), &pod), Some(9));
        // v1: the pids hierarchy wins.
        put("pids/kubepods/besteffort/poda-b", "11\n");
        assert_eq!(pod_pids(root.path(), &pod), Some(11));
    }

    /// qosReserved memory (qos_container_manager setMemoryReserve): burstable = allocatable -
    /// guaranteed requests x percent, besteffort = burstable - burstable requests x percent;
    /// written as the tiers' memory limits on v1 and v2; none without allocatable memory.
    #[test]
    fn qos_reserved_memory_limits_the_lower_tiers() {
        let gib = 1i64 << 30;
        let r = |percent| QosMemoryReserve {
            allocatable: 8 * gib,
            percent,
        };
        assert_eq!(
            qos_memory_limits(r(50), 2 * gib, 2 * gib),
            Some((7 * gib, 6 * gib))
        );
        assert_eq!(
            qos_memory_limits(r(100), 2 * gib, gib),
            Some((6 * gib, 5 * gib))
        );
        assert_eq!(
            qos_memory_limits(r(0), 2 * gib, gib),
            Some((8 * gib, 8 * gib))
        );
        assert_eq!(
            qos_memory_limits(
                QosMemoryReserve {
                    allocatable: 0,
                    percent: 50
                },
                1,
                1
            ),
            None
        );
        let pod = |uid: &str, resources: serde_json::Value| {
            let mut p = Pod::default();
            p.metadata.uid = uid.into();
            p.spec.containers = vec![
                serde_json::from_value(
                    serde_json::json!({"name": "a", "image": "i", "resources": resources}),
                )
                .unwrap(),
            ];
            p
        };
        let gu = pod(
            "g",
            serde_json::json!({"limits": {"cpu": "1", "memory": "2Gi"}}),
        );
        let bu = pod("b", serde_json::json!({"requests": {"memory": "1Gi"}}));
        let be = pod("e", serde_json::json!({}));
        let read = |root: &Path, p: &str| std::fs::read_to_string(root.join(p)).unwrap();
        let v1 = tempfile::tempdir().unwrap();
        for c in ["cpu", "memory"] {
            std::fs::create_dir_all(v1.path().join(c)).unwrap();
        }
        update_qos_cgroups(v1.path(), [&gu, &bu, &be].into_iter(), Some(r(50)));
        assert_eq!(
            read(v1.path(), "memory/kubepods/burstable/memory.limit_in_bytes"),
            (7 * gib).to_string()
        );
        assert_eq!(
            read(
                v1.path(),
                "memory/kubepods/besteffort/memory.limit_in_bytes"
            ),
            (7 * gib - gib / 2).to_string()
        );
        let v2 = tempfile::tempdir().unwrap();
        std::fs::write(v2.path().join("cgroup.controllers"), "cpu memory pids").unwrap();
        update_qos_cgroups(v2.path(), [&gu, &bu, &be].into_iter(), Some(r(50)));
        assert_eq!(
            read(v2.path(), "kubepods/burstable/memory.max"),
            (7 * gib).to_string()
        );
        // Without qosReserved no memory limit is written.
        let off = tempfile::tempdir().unwrap();
        for c in ["cpu", "memory"] {
            std::fs::create_dir_all(off.path().join(c)).unwrap();
        }
        update_qos_cgroups(off.path(), [&gu, &bu, &be].into_iter(), None);
        assert!(!off.path().join("memory/kubepods/burstable").exists());
    }

    #[test]
    fn systemd_slice_paths_nest_at_each_dash() {
        assert_eq!(
            systemd_slice_path("kubepods-burstable-pod12_34.slice"),
            PathBuf::from(
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice"
            )
        );
        assert_eq!(
            systemd_slice_path("kubepods.slice"),
            PathBuf::from("kubepods.slice")
        );
    }

    /// enforceNodeAllocatable=pods and the QoS tiers, as the kubelet writes them: kubepods at
    /// allocatable (MilliCPUToShares(2000) = 2048 shares, the memory limit, pids.max at the
    /// allocatable PIDs: node_container_manager's getCgroupConfig sets PidsLimit from the
    /// internal capacity's `pid`), besteffort at the minimum 2 shares, burstable at the shares
    /// of its pods' summed CPU requests; v2 weights converted from the shares.
    #[test]
    fn node_allocatable_and_qos_tiers_on_v1_and_v2() {
        let v1 = tempfile::tempdir().unwrap();
        for c in ["cpu", "memory", "pids"] {
            std::fs::create_dir_all(v1.path().join(c)).unwrap();
        }
        enforce_pods_allocatable(v1.path(), 2000, 1 << 30, Some(32768));
        let read = |root: &Path, p: &str| std::fs::read_to_string(root.join(p)).unwrap();
        assert_eq!(read(v1.path(), "cpu/kubepods/cpu.shares"), "2048");
        assert_eq!(
            read(v1.path(), "memory/kubepods/memory.limit_in_bytes"),
            "1073741824"
        );
        assert_eq!(read(v1.path(), "pids/kubepods/pids.max"), "32768");
        let mut burst = Pod::default();
        burst.spec.containers = vec![
            serde_json::from_value(serde_json::json!(
                {"name": "a", "image": "i", "resources": {"requests": {"cpu": "250m"}}}
            ))
            .unwrap(),
        ];
        let mut burst2 = burst.clone();
        burst2.metadata.uid = "b".into();
        let mut be = Pod::default();
        be.spec.containers =
            vec![serde_json::from_value(serde_json::json!({"name": "a", "image": "i"})).unwrap()];
        update_qos_cgroups(v1.path(), [&burst, &burst2, &be].into_iter(), None);
        assert_eq!(read(v1.path(), "cpu/kubepods/burstable/cpu.shares"), "512");
        assert_eq!(read(v1.path(), "cpu/kubepods/besteffort/cpu.shares"), "2");
        enforce_reserved(v1.path(), "/system.slice", 500, Some(256 << 20), Some(1000));
        assert_eq!(read(v1.path(), "cpu/system.slice/cpu.shares"), "512");
        assert_eq!(
            read(v1.path(), "memory/system.slice/memory.limit_in_bytes"),
            "268435456"
        );
        assert_eq!(read(v1.path(), "pids/system.slice/pids.max"), "1000");
        // No pid reservation, or an allocatable of 0: libcontainer leaves pids.max alone.
        enforce_reserved(v1.path(), "/kube.slice", 500, None, None);
        enforce_reserved(v1.path(), "/zero.slice", 500, None, Some(0));
        assert!(!v1.path().join("pids/kube.slice/pids.max").exists());
        assert!(!v1.path().join("pids/zero.slice/pids.max").exists());

        let v2 = tempfile::tempdir().unwrap();
        std::fs::write(v2.path().join("cgroup.controllers"), "cpu memory pids").unwrap();
        enforce_pods_allocatable(v2.path(), 2000, 1 << 30, Some(4096));
        assert_eq!(
            read(v2.path(), "kubepods/cpu.weight"),
            shares_to_weight(2048).to_string()
        );
        assert_eq!(read(v2.path(), "kubepods/memory.max"), "1073741824");
        assert_eq!(read(v2.path(), "kubepods/pids.max"), "4096");
        update_qos_cgroups(v2.path(), [&burst, &be].into_iter(), None);
        assert_eq!(read(v2.path(), "kubepods/besteffort/cpu.weight"), "1");
        assert_eq!(
            read(v2.path(), "kubepods/burstable/cpu.weight"),
            shares_to_weight(256).to_string()
        );
    }
}
