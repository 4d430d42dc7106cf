//! Resource usage: the kubelet Summary API (`/stats/summary`,
//! k8s.io/kubelet/pkg/apis/stats/v1alpha1, exact JSON field names) and the metrics derived from
//! it (`/metrics/resource`, `/metrics/cadvisor`).
//!
//! Node figures come from /proc and statvfs; pod and container figures from CRI
//! ListContainerStats. `usageNanoCores` is a rate: it is computed from the previous scrape's
//! cumulative CPU time (per container and for the node), as the kubelet does when the runtime
//! does not provide it.

use crate::timeutil::now_unix_nanos;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::api::Pod;
use crate::cri::{ContainerStats, LABEL_MANAGED_BY, LABEL_POD_UID, Runtime};
use crate::timeutil::{from_unix_nanos, rfc3339};

/// Per-scrape state: the previous cumulative CPU samples (key → (time ns, core-ns)).
#[derive(Default)]
pub struct StatsProvider {
    cpu: Mutex<BTreeMap<String, (i64, u64)>>,
}

fn ts(nanos: i64) -> String {
    rfc3339(from_unix_nanos(nanos))
}

/// What the summary needs besides the runtime.
pub struct SummaryInput<'a> {
    pub node_name: &'a str,
    pub pods: &'a [Pod],
    /// The filesystem holding nanolet's root dir (node `fs`).
    pub root_dir: &'a Path,
    pub pod_logs_dir: &'a Path,
}

impl StatsProvider {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, (i64, u64)>> {
        self.cpu.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The rate since the previous sample of `key` in nano-cores; `None` on the first one.
    fn nano_cores(&self, key: &str, time: i64, core_ns: u64) -> Option<u64> {
        let mut g = self.lock();
        let prev = g.insert(key.to_string(), (time, core_ns));
        let (t0, c0) = prev?;
        let dt = time.checked_sub(t0).filter(|d| *d > 0)?;
        let dc = core_ns.checked_sub(c0)?;
        Some(((dc as u128 * 1_000_000_000) / dt as u128) as u64)
    }

    /// The Summary. Container stats that the runtime cannot give are left out (`pods` then
    /// lists pods without containers).
    pub fn summary(&self, runtime: Option<&dyn Runtime>, input: &SummaryInput<'_>) -> Value {
        let stats = match runtime.map(|r| r.list_container_stats()) {
            Some(Ok(s)) => s,
            Some(Err(e)) => {
                tracing::debug!(error = %e, "ListContainerStats for the summary");
                vec![]
            }
            None => vec![],
        };
        let node = self.node_stats(input);
        let pods = self.pod_stats(&stats, input);
        json!({"node": node, "pods": pods})
    }

    fn node_stats(&self, input: &SummaryInput<'_>) -> Value {
        let t = now_unix_nanos();
        let time = ts(t);
        let mut node = json!({
            "nodeName": input.node_name,
            "systemContainers": [],
            "startTime": boot_time().map(rfc3339).unwrap_or_default(),
        });
        if let Some(core_ns) = node_cpu_core_nanos() {
            let mut cpu = json!({"time": time, "usageCoreNanoSeconds": core_ns});
            if let Some(r) = self.nano_cores("/node", t, core_ns) {
                cpu["usageNanoCores"] = json!(r);
            }
            node["cpu"] = cpu;
        }
        let mi = meminfo();
        if let (Some(total), Some(free)) = (mi.get("MemTotal"), mi.get("MemFree")) {
            let usage = total.saturating_sub(*free);
            let inactive = mi.get("Inactive(file)").copied().unwrap_or(0);
            let vm = vmstat();
            let mut mem = json!({
                "time": time,
                "availableBytes": mi.get("MemAvailable").copied().unwrap_or(*free),
                "usageBytes": usage,
                "workingSetBytes": usage.saturating_sub(inactive),
                "rssBytes": mi.get("AnonPages").copied().unwrap_or(0),
            });
            if let (Some(pf), Some(mpf)) = (vm.get("pgfault"), vm.get("pgmajfault")) {
                mem["pageFaults"] = json!(pf);
                mem["majorPageFaults"] = json!(mpf);
            }
            node["memory"] = mem;
            if let (Some(st), Some(sf)) = (mi.get("SwapTotal"), mi.get("SwapFree")) {
                node["swap"] = json!({
                    "time": time,
                    "swapAvailableBytes": sf,
                    "swapUsageBytes": st.saturating_sub(*sf),
                });
            }
        }
        let ifaces = net_dev();
        if !ifaces.is_empty() {
            let default = default_interface();
            let list: Vec<Value> = ifaces
                .iter()
                .map(|(name, (rx, rxe, tx, txe))| {
                    json!({"name": name, "rxBytes": rx, "rxErrors": rxe, "txBytes": tx, "txErrors": txe})
                })
                .collect();
            let mut net = json!({"time": time, "interfaces": list});
            if let Some((rx, rxe, tx, txe)) = default.as_ref().and_then(|d| ifaces.get(d)) {
                net["name"] = json!(default);
                net["rxBytes"] = json!(rx);
                net["rxErrors"] = json!(rxe);
                net["txBytes"] = json!(tx);
                net["txErrors"] = json!(txe);
            }
            node["network"] = net;
        }
        let root = if input.root_dir.exists() {
            input.root_dir.to_path_buf()
        } else {
            PathBuf::from("/")
        };
        if let Some(fs) = fs_stats(&root, &time) {
            node["fs"] = fs;
        }
        let containerd_root = Path::new("/var/lib/containerd");
        let rt_root = if containerd_root.exists() {
            containerd_root
        } else {
            root.as_path()
        };
        if let Some(fs) = fs_stats(rt_root, &time) {
            node["runtime"] = json!({"imageFs": fs, "containerFs": fs});
        }
        let maxpid = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok());
        let curproc = std::fs::read_dir("/proc").map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                })
                .count()
        });
        let mut rl = json!({"time": time});
        if let Some(m) = maxpid {
            rl["maxpid"] = json!(m);
        }
        if let Ok(c) = curproc {
            rl["curproc"] = json!(c);
        }
        node["rlimit"] = rl;
        node
    }

    fn pod_stats(&self, stats: &[ContainerStats], input: &SummaryInput<'_>) -> Vec<Value> {
        // Latest attempt per (pod uid, container name), nanolet's containers only.
        let mut latest: BTreeMap<(String, String), &ContainerStats> = BTreeMap::new();
        for s in stats {
            if !s.labels.contains_key(LABEL_MANAGED_BY) {
                continue;
            }
            let Some(uid) = s.labels.get(LABEL_POD_UID) else {
                continue;
            };
            let key = (uid.clone(), s.name.clone());
            if latest.get(&key).is_none_or(|o| o.attempt <= s.attempt) {
                latest.insert(key, s);
            }
        }
        let mut out = vec![];
        for pod in input.pods {
            let m = &pod.metadata;
            let running: BTreeMap<&str, Option<&str>> = pod
                .status
                .iter()
                .flat_map(|st| {
                    st.container_statuses
                        .iter()
                        .chain(&st.init_container_statuses)
                })
                .filter_map(|c| {
                    c.state
                        .running
                        .as_ref()
                        .map(|r| (c.name.as_str(), r.started_at.as_deref()))
                })
                .collect();
            let mut containers = vec![];
            let (mut cpu_ns, mut cpu_rate, mut ws, mut usage, mut rss) =
                (0u64, 0u64, 0u64, 0u64, 0u64);
            let mut eph = 0u64;
            let log_dir = input
                .pod_logs_dir
                .join(format!("{}_{}_{}", m.namespace, m.name, m.uid));
            for (name, started) in &running {
                let Some(s) = latest.get(&(m.uid.clone(), name.to_string())) else {
                    continue;
                };
                let c = self.container_json(s, name, *started);
                cpu_ns += s.usage_core_nano_seconds.unwrap_or(0);
                cpu_rate += c["cpu"]["usageNanoCores"].as_u64().unwrap_or(0);
                ws += s.working_set_bytes.unwrap_or(0);
                usage += s.usage_bytes.unwrap_or(0);
                rss += s.rss_bytes.unwrap_or(0);
                let logs = dir_size(&log_dir.join(name));
                eph += s.fs_used_bytes.unwrap_or(0) + logs;
                let mut c = c;
                c["logs"] = json!({"time": ts(now_unix_nanos()), "usedBytes": logs});
                containers.push(c);
            }
            let time = ts(now_unix_nanos());
            // Volumes nanolet keeps on the node (emptyDir and the API-data volumes), each with
            // its filesystem's capacity and its own usage; disk emptyDirs count toward the pod's
            // ephemeral storage, memory-medium ones do not.
            let pod_dir = input.root_dir.join("pods").join(&m.uid);
            let mut volumes = vec![];
            for (name, dir, on_disk) in pod_volume_dirs(pod, &pod_dir) {
                let (used, inodes_used) = tree_usage(&dir);
                if on_disk {
                    eph += used;
                }
                if let Some(mut v) = fs_stats(&dir, &time) {
                    v["name"] = json!(name);
                    v["usedBytes"] = json!(used);
                    v["inodesUsed"] = json!(inodes_used);
                    volumes.push(v);
                }
            }
            let mut p = json!({
                "podRef": {"name": m.name, "namespace": m.namespace, "uid": m.uid},
                "startTime": pod.status.as_ref().and_then(|s| s.start_time.clone()).unwrap_or_default(),
                "containers": containers,
                "volume": volumes,
                "ephemeral-storage": {"time": time, "usedBytes": eph},
            });
            if let Some(n) = pod_process_count(&m.uid) {
                p["process_stats"] = json!({"process_count": n});
            }
            if !containers_is_empty(&p) {
                p["cpu"] = json!({"time": time, "usageCoreNanoSeconds": cpu_ns, "usageNanoCores": cpu_rate});
                p["memory"] = json!({"time": time, "workingSetBytes": ws, "usageBytes": usage, "rssBytes": rss});
            }
            out.push(p);
        }
        out
    }

    fn container_json(&self, s: &ContainerStats, name: &str, started: Option<&str>) -> Value {
        let mut c = json!({"name": name, "startTime": started.unwrap_or_default()});
        if let Some(core_ns) = s.usage_core_nano_seconds {
            let t = if s.cpu_time > 0 {
                s.cpu_time
            } else {
                now_unix_nanos()
            };
            let rate = s
                .usage_nano_cores
                .or_else(|| self.nano_cores(&s.id, t, core_ns));
            let mut cpu = json!({"time": ts(t), "usageCoreNanoSeconds": core_ns});
            if let Some(r) = rate {
                cpu["usageNanoCores"] = json!(r);
            }
            c["cpu"] = cpu;
        }
        if s.working_set_bytes.is_some() || s.usage_bytes.is_some() {
            let t = if s.memory_time > 0 {
                s.memory_time
            } else {
                now_unix_nanos()
            };
            let mut mem = json!({"time": ts(t)});
            for (k, v) in [
                ("availableBytes", s.available_bytes),
                ("usageBytes", s.usage_bytes),
                ("workingSetBytes", s.working_set_bytes),
                ("rssBytes", s.rss_bytes),
                ("pageFaults", s.page_faults),
                ("majorPageFaults", s.major_page_faults),
            ] {
                if let Some(v) = v {
                    mem[k] = json!(v);
                }
            }
            c["memory"] = mem;
        }
        if let Some(used) = s.fs_used_bytes {
            let t = if s.fs_time > 0 {
                s.fs_time
            } else {
                now_unix_nanos()
            };
            let mut fs = json!({"time": ts(t), "usedBytes": used});
            if let Some(i) = s.fs_inodes_used {
                fs["inodesUsed"] = json!(i);
            }
            c["rootfs"] = fs;
        }
        c
    }
}

/// (volume name, directory, counts as disk) for the pod's node-local volumes.
fn pod_volume_dirs(pod: &Pod, pod_dir: &Path) -> Vec<(String, std::path::PathBuf, bool)> {
    let mut out = vec![];
    let vols = pod.spec.extra.get("volumes").and_then(Value::as_array);
    for v in vols.into_iter().flatten() {
        let Some(name) = v.get("name").and_then(Value::as_str) else {
            continue;
        };
        let (plugin, on_disk) = if let Some(ed) = v.get("emptyDir") {
            (
                "kubernetes.io~empty-dir",
                ed.get("medium").and_then(Value::as_str) != Some("Memory"),
            )
        } else if v.get("configMap").is_some() {
            ("kubernetes.io~configmap", true)
        } else if v.get("secret").is_some() {
            ("kubernetes.io~secret", false)
        } else if v.get("downwardAPI").is_some() {
            ("kubernetes.io~downward-api", true)
        } else if v.get("projected").is_some() {
            ("kubernetes.io~projected", true)
        } else {
            continue;
        };
        let dir = pod_dir.join("volumes").join(plugin).join(name);
        if dir.is_dir() {
            out.push((name.to_string(), dir, on_disk));
        }
    }
    out
}

/// Bytes and inodes below `dir`, not following symlinks.
fn tree_usage(dir: &Path) -> (u64, u64) {
    let mut bytes = 0;
    let mut inodes = 1;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(m) = e.path().symlink_metadata() else {
            continue;
        };
        if m.is_dir() {
            let (b, i) = tree_usage(&e.path());
            bytes += b;
            inodes += i;
        } else {
            bytes += m.len();
            inodes += 1;
        }
    }
    (bytes, inodes)
}

/// Processes in the pod's cgroup (`pids.current` of `/kubepods/.../pod<uid>`, cgroup v1 pids
/// controller or v2).
fn pod_process_count(uid: &str) -> Option<u64> {
    for qos in ["", "burstable/", "besteffort/"] {
        for root in ["/sys/fs/cgroup/pids", "/sys/fs/cgroup"] {
            let f = Path::new(root).join(format!("kubepods/{qos}pod{uid}/pids.current"));
            if let Ok(s) = std::fs::read_to_string(&f) {
                return s.trim().parse().ok();
            }
        }
    }
    None
}

fn containers_is_empty(p: &Value) -> bool {
    p["containers"].as_array().is_none_or(|a| a.is_empty())
}

fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

// statvfs field types differ between targets (u32 on 32-bit ARM), hence the conversions.
#[allow(clippy::useless_conversion)]
fn fs_stats(path: &Path, time: &str) -> Option<Value> {
    let s = nix::sys::statvfs::statvfs(path).ok()?;
    let frag = u64::from(s.fragment_size());
    let capacity = u64::from(s.blocks()).saturating_mul(frag);
    let available = u64::from(s.blocks_available()).saturating_mul(frag);
    let free = u64::from(s.blocks_free()).saturating_mul(frag);
    let inodes = u64::from(s.files());
    let inodes_free = u64::from(s.files_free());
    Some(json!({
        "time": time,
        "availableBytes": available,
        "capacityBytes": capacity,
        "usedBytes": capacity.saturating_sub(free),
        "inodesFree": inodes_free,
        "inodes": inodes,
        "inodesUsed": inodes.saturating_sub(inodes_free),
    }))
}

/// /proc/meminfo in bytes.
fn meminfo() -> BTreeMap<String, u64> {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            let mut it = v.split_whitespace();
            let n: u64 = it.next()?.parse().ok()?;
            let mult = if it.next() == Some("kB") { 1024 } else { 1 };
            Some((k.trim().to_string(), n.saturating_mul(mult)))
        })
        .collect()
}

fn vmstat() -> BTreeMap<String, u64> {
    std::fs::read_to_string("/proc/vmstat")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

fn clock_ticks() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|t| *t > 0)
        .map_or(100, |t| t as u64)
}

/// Cumulative busy CPU time of the node (all CPUs) in nanoseconds.
fn node_cpu_core_nanos() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let line = s.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    let busy: u64 = [0usize, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|i| f.get(*i))
        .sum();
    Some(busy.saturating_mul(1_000_000_000) / clock_ticks())
}

fn boot_time() -> Option<SystemTime> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let secs: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// /proc/net/dev: interface → (rxBytes, rxErrors, txBytes, txErrors), without `lo`.
fn net_dev() -> BTreeMap<String, (u64, u64, u64, u64)> {
    std::fs::read_to_string("/proc/net/dev")
        .unwrap_or_default()
        .lines()
        .skip(2)
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let name = name.trim();
            if name == "lo" {
                return None;
            }
            let f: Vec<u64> = rest
                .split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect();
            Some((
                name.to_string(),
                (*f.first()?, *f.get(2)?, *f.get(8)?, *f.get(10)?),
            ))
        })
        .collect()
}

fn default_interface() -> Option<String> {
    std::fs::read_to_string("/proc/net/route")
        .ok()
        .and_then(|s| {
            s.lines().skip(1).find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() > 2 && f[1] == "00000000").then(|| f[0].to_string())
            })
        })
}

// ---------------------------------------------------------------------------------------------
// Metrics derived from the summary

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn ms(ts: &Value) -> String {
    ts.as_str()
        .and_then(crate::timeutil::parse_rfc3339)
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(|d| format!(" {}", d.as_millis()))
        .unwrap_or_default()
}

/// `/metrics/resource`, the kubelet's resource metrics (as metrics-server reads them).
pub fn resource_metrics(summary: &Value) -> String {
    let mut out = String::new();
    let node = &summary["node"];
    let empty = vec![];
    let pods = summary["pods"].as_array().unwrap_or(&empty);
    type Row = (String, f64, String);
    let mut fam = |name: &str, help: &str, kind: &str, rows: Vec<Row>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, v, ts) in rows {
            let _ = writeln!(out, "{name}{labels} {v}{ts}");
        }
    };
    let node_rows = |f: &dyn Fn(&Value) -> Option<f64>, part: &str| -> Vec<Row> {
        f(&node[part])
            .map(|v| vec![(String::new(), v, ms(&node[part]["time"]))])
            .unwrap_or_default()
    };
    fam(
        "node_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the node in core-seconds",
        "counter",
        node_rows(&|c| Some(c["usageCoreNanoSeconds"].as_f64()? / 1e9), "cpu"),
    );
    fam(
        "node_memory_working_set_bytes",
        "Current working set of the node in bytes",
        "gauge",
        node_rows(&|m| m["workingSetBytes"].as_f64(), "memory"),
    );
    let mut c_cpu = vec![];
    let mut c_mem = vec![];
    let mut p_cpu = vec![];
    let mut p_mem = vec![];
    for p in pods {
        let r = &p["podRef"];
        let pl = format!(
            "namespace=\"{}\",pod=\"{}\"",
            esc(r["namespace"].as_str().unwrap_or_default()),
            esc(r["name"].as_str().unwrap_or_default())
        );
        if let Some(v) = p["cpu"]["usageCoreNanoSeconds"].as_f64() {
            p_cpu.push((format!("{{{pl}}}"), v / 1e9, ms(&p["cpu"]["time"])));
        }
        if let Some(v) = p["memory"]["workingSetBytes"].as_f64() {
            p_mem.push((format!("{{{pl}}}"), v, ms(&p["memory"]["time"])));
        }
        for c in p["containers"].as_array().unwrap_or(&empty) {
            let cl = format!(
                "{{container=\"{}\",{pl}}}",
                esc(c["name"].as_str().unwrap_or_default())
            );
            if let Some(v) = c["cpu"]["usageCoreNanoSeconds"].as_f64() {
                c_cpu.push((cl.clone(), v / 1e9, ms(&c["cpu"]["time"])));
            }
            if let Some(v) = c["memory"]["workingSetBytes"].as_f64() {
                c_mem.push((cl, v, ms(&c["memory"]["time"])));
            }
        }
    }
    fam(
        "container_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the container in core-seconds",
        "counter",
        c_cpu,
    );
    fam(
        "container_memory_working_set_bytes",
        "Current working set of the container in bytes",
        "gauge",
        c_mem,
    );
    fam(
        "pod_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the pod in core-seconds",
        "counter",
        p_cpu,
    );
    fam(
        "pod_memory_working_set_bytes",
        "Current working set of the pod in bytes",
        "gauge",
        p_mem,
    );
    fam(
        "resource_scrape_error",
        "1 if there was an error while getting container metrics, 0 otherwise",
        "gauge",
        vec![(String::new(), 0.0, String::new())],
    );
    out
}

/// name, help, type, and how to read the value from a Summary container.
type Family<'a> = (&'a str, &'a str, &'a str, &'a dyn Fn(&Value) -> Option<f64>);

/// `/metrics/cadvisor`: the cAdvisor container metrics nanolet can fill from CRI stats.
pub fn cadvisor_metrics(summary: &Value) -> String {
    let mut out = String::new();
    let empty = vec![];
    let families: [Family<'_>; 5] = [
        (
            "container_cpu_usage_seconds_total",
            "Cumulative cpu time consumed in seconds.",
            "counter",
            &|c| Some(c["cpu"]["usageCoreNanoSeconds"].as_f64()? / 1e9),
        ),
        (
            "container_memory_working_set_bytes",
            "Current working set in bytes.",
            "gauge",
            &|c| c["memory"]["workingSetBytes"].as_f64(),
        ),
        (
            "container_memory_usage_bytes",
            "Current memory usage in bytes, including all memory regardless of when it was accessed",
            "gauge",
            &|c| c["memory"]["usageBytes"].as_f64(),
        ),
        (
            "container_memory_rss",
            "Size of RSS in bytes.",
            "gauge",
            &|c| c["memory"]["rssBytes"].as_f64(),
        ),
        (
            "container_fs_usage_bytes",
            "Number of bytes that are consumed by the container on this filesystem.",
            "gauge",
            &|c| c["rootfs"]["usedBytes"].as_f64(),
        ),
    ];
    for (name, help, kind, get) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for p in summary["pods"].as_array().unwrap_or(&empty) {
            let r = &p["podRef"];
            for c in p["containers"].as_array().unwrap_or(&empty) {
                if let Some(v) = get(c) {
                    let _ = writeln!(
                        out,
                        "{name}{{container=\"{}\",namespace=\"{}\",pod=\"{}\"}} {v}",
                        esc(c["name"].as_str().unwrap_or_default()),
                        esc(r["namespace"].as_str().unwrap_or_default()),
                        esc(r["name"].as_str().unwrap_or_default())
                    );
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_summary_has_the_field_names() {
        let p = StatsProvider::new();
        let dir = tempfile::tempdir().unwrap();
        let input = SummaryInput {
            node_name: "node1",
            pods: &[],
            root_dir: dir.path(),
            pod_logs_dir: dir.path(),
        };
        let s = p.summary(None, &input);
        let n = &s["node"];
        assert_eq!(n["nodeName"], "node1");
        assert!(n["cpu"]["usageCoreNanoSeconds"].as_u64().is_some(), "{n}");
        assert!(
            n["memory"]["workingSetBytes"]
                .as_u64()
                .is_some_and(|v| v > 0),
            "{n}"
        );
        assert!(n["memory"]["availableBytes"].as_u64().is_some(), "{n}");
        assert!(
            n["fs"]["capacityBytes"].as_u64().is_some_and(|v| v > 0),
            "{n}"
        );
        assert!(n["fs"]["inodesUsed"].as_u64().is_some(), "{n}");
        assert!(n["rlimit"]["maxpid"].as_u64().is_some(), "{n}");
        assert!(n["startTime"].as_str().is_some_and(|t| t.ends_with('Z')));
        assert_eq!(s["pods"], json!([]));
        // The second scrape has a rate.
        let s = p.summary(None, &input);
        assert!(s["node"]["cpu"]["usageNanoCores"].as_u64().is_some(), "{s}");
        let text = resource_metrics(&s);
        assert!(
            text.contains(
                "# TYPE node_cpu_usage_seconds_total counter\nnode_cpu_usage_seconds_total "
            ),
            "{text}"
        );
    }

    #[test]
    fn rates_from_samples() {
        let p = StatsProvider::new();
        assert_eq!(p.nano_cores("c", 1_000_000_000, 0), None);
        assert_eq!(
            p.nano_cores("c", 2_000_000_000, 500_000_000),
            Some(500_000_000)
        );
        assert_eq!(p.nano_cores("c", 2_000_000_000, 600_000_000), None); // no time passed
        assert_eq!(p.nano_cores("c", 3_000_000_000, 100), None); // counter reset
    }
}
