//! nanolet's own metrics, rendered in the Prometheus text exposition format (0.0.4) on
//! `/metrics`, with the kubelet's metric names where one exists.
//!
//! Counters live here (runtime operations, counted by [`crate::cri::instrumented`]; the
//! PLEG relist histogram, fed by the PLEG); gauges are computed at scrape time from the status
//! store and `/proc/self`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use crate::api::Pod;

/// The kubelet's PLEG relist histogram buckets (`metrics.DefBuckets`-like, in seconds).
const RELIST_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The kubelet's `kubelet_pod_start_duration_seconds` buckets.
const POD_START_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

#[derive(Debug, Clone, Default)]
struct Histogram {
    bounds: &'static [f64],
    /// Cumulative per bucket upper bound.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, secs: f64) {
        for (le, c) in self.bounds.iter().zip(self.counts.iter_mut()) {
            if secs <= *le {
                *c += 1;
            }
        }
        self.sum += secs;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (le, c) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{}\"}} {c}", fmt_f64(*le));
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}", fmt_f64(self.sum));
        let _ = writeln!(out, "{name}_count {}", self.count);
    }
}

#[derive(Default)]
struct Inner {
    /// operation_type → (total, errors)
    ops: BTreeMap<&'static str, (u64, u64)>,
    relist: Histogram,
    pod_start: Histogram,
    /// eviction signal -> pods evicted (`kubelet_evictions`).
    evictions: BTreeMap<String, u64>,
    eviction_passes: u64,
}

/// The registry of counters and histograms.
pub struct Metrics {
    inner: Mutex<Inner>,
    start: SystemTime,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        Metrics {
            inner: Mutex::new(Inner {
                ops: BTreeMap::new(),
                relist: Histogram::new(RELIST_BUCKETS),
                pod_start: Histogram::new(POD_START_BUCKETS),
                evictions: BTreeMap::new(),
                eviction_passes: 0,
            }),
            start: process_start_time().unwrap_or_else(SystemTime::now),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One runtime (CRI) call of `operation` (the kubelet's `operation_type` names).
    pub fn runtime_operation(&self, operation: &'static str, failed: bool) {
        let mut g = self.lock();
        let e = g.ops.entry(operation).or_insert((0, 0));
        e.0 += 1;
        if failed {
            e.1 += 1;
        }
    }

    /// (total, errors) of one operation so far.
    pub fn runtime_operations(&self, operation: &str) -> (u64, u64) {
        self.lock().ops.get(operation).copied().unwrap_or((0, 0))
    }

    /// The PLEG calls this after each relist.
    pub fn observe_pleg_relist(&self, took: Duration) {
        self.lock().relist.observe(took.as_secs_f64());
    }

    /// A pod ran for the first time, `took` after nanolet first saw it.
    pub fn observe_pod_start(&self, took: Duration) {
        self.lock().pod_start.observe(took.as_secs_f64());
    }

    /// A pod was evicted because of `signal` (a node condition or `ephemeral-storage`).
    pub fn inc_evictions(&self, signal: &str) {
        *self.lock().evictions.entry(signal.to_string()).or_default() += 1;
    }

    /// The eviction manager finished a pass.
    pub fn inc_eviction_passes(&self) {
        self.lock().eviction_passes += 1;
    }

    /// Eviction manager passes so far (tests wait for "one more pass" with it).
    pub fn eviction_passes(&self) -> u64 {
        self.lock().eviction_passes
    }

    /// The full `/metrics` text for these pods.
    pub fn render(&self, pods: &[Pod]) -> String {
        let mut out = String::new();
        render_build_info(&mut out);
        render_pods(&mut out, pods);
        self.render_recorded(&mut out);
        self.render_process(&mut out);
        out
    }

    /// The counters and histograms recorded so far: runtime operations, evictions, PLEG
    /// relists and pod starts.
    fn render_recorded(&self, out: &mut String) {
        let g = self.lock();
        let total: Vec<(String, f64)> = g
            .ops
            .iter()
            .map(|(op, (n, _))| (format!("operation_type=\"{op}\""), *n as f64))
            .collect();
        let errors: Vec<(String, f64)> = g
            .ops
            .iter()
            .map(|(op, (_, e))| (format!("operation_type=\"{op}\""), *e as f64))
            .collect();
        family(
            out,
            "kubelet_runtime_operations_total",
            "Cumulative number of runtime operations by operation type.",
            "counter",
            &total,
        );
        family(
            out,
            "kubelet_runtime_operations_errors_total",
            "Cumulative number of runtime operation errors by operation type.",
            "counter",
            &errors,
        );
        let ev: Vec<(String, f64)> = g
            .evictions
            .iter()
            .map(|(sig, n)| {
                (
                    format!("eviction_signal=\"{}\"", label_value(sig)),
                    *n as f64,
                )
            })
            .collect();
        family(
            out,
            "kubelet_evictions",
            "Cumulative number of pod evictions by eviction signal",
            "counter",
            &ev,
        );
        family(
            out,
            "nanolet_eviction_manager_passes_total",
            "Cumulative number of eviction manager passes",
            "counter",
            &[(String::new(), g.eviction_passes as f64)],
        );
        g.relist.render(
            out,
            "kubelet_pleg_relist_duration_seconds",
            "Duration in seconds for relisting pods in PLEG.",
        );
        g.pod_start.render(
            out,
            "kubelet_pod_start_duration_seconds",
            "Duration in seconds from nanolet seeing a pod for the first time to the pod starting to run",
        );
    }

    /// The process_* metrics of nanolet's own process.
    fn render_process(&self, out: &mut String) {
        let p = ProcessStats::read();
        gauge(
            out,
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            &[(String::new(), p.rss_bytes as f64)],
        );
        family(
            out,
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            "counter",
            &[(String::new(), p.cpu_seconds)],
        );
        gauge(
            out,
            "process_open_fds",
            "Number of open file descriptors.",
            &[(String::new(), p.open_fds as f64)],
        );
        let start = self
            .start
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        gauge(
            out,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            &[(String::new(), start)],
        );
    }
}

/// `nanolet_build_info`.
fn render_build_info(out: &mut String) {
    // The kube `*_build_info` convention: a constant 1 carrying the build in its labels.
    gauge(
        out,
        "nanolet_build_info",
        "A metric with a constant '1' value labeled by nanolet's version, git commit and target triple",
        &[(
            format!(
                "version=\"{}\",commit=\"{}\",target=\"{}\"",
                label_value(crate::VERSION),
                label_value(crate::GIT_COMMIT),
                label_value(crate::TARGET)
            ),
            1.0,
        )],
    );
}

/// The running pods and containers gauges.
fn render_pods(out: &mut String, pods: &[Pod]) {
    let (running_pods, states) = pod_gauges(pods);
    gauge(
        out,
        "kubelet_running_pods",
        "Number of pods that have a running pod sandbox",
        &[(String::new(), running_pods as f64)],
    );
    let rows: Vec<(String, f64)> = states
        .iter()
        .map(|(s, n)| (format!("container_state=\"{s}\""), *n as f64))
        .collect();
    gauge(
        out,
        "kubelet_running_containers",
        "Number of containers currently running",
        &rows,
    );
}

/// One prober counter, as `Prober::totals` reports them. Ordered by its fields in this order
/// (the rendering order).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProbeTotal {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// `Liveness`, `Readiness` or `Startup`.
    pub probe_type: &'static str,
    /// `successful`, `failed` or `unknown`.
    pub result: &'static str,
    pub count: u64,
}

fn label_value(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `/metrics/probes`: the kubelet's `prober_probe_total` counter.
pub fn render_probes(totals: &[ProbeTotal]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP prober_probe_total Cumulative number of a liveness, readiness or startup probe for a container by result.\n# TYPE prober_probe_total counter"
    );
    let mut sorted: Vec<&ProbeTotal> = totals.iter().collect();
    sorted.sort();
    for t in sorted {
        let _ = writeln!(
            out,
            "prober_probe_total{{container=\"{}\",namespace=\"{}\",pod=\"{}\",probe_type=\"{}\",result=\"{}\"}} {}",
            label_value(&t.container),
            label_value(&t.namespace),
            label_value(&t.pod),
            t.probe_type,
            t.result,
            t.count
        );
    }
    out
}

/// Pods with a ready sandbox, and containers by state (`running`, `exited`, `created`,
/// `unknown`), from the pods' statuses.
fn pod_gauges(pods: &[Pod]) -> (usize, BTreeMap<&'static str, usize>) {
    let mut states: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut running = 0;
    for p in pods {
        let Some(st) = &p.status else { continue };
        let sandbox = st
            .conditions
            .iter()
            .any(|c| c.type_ == "PodReadyToStartContainers" && c.status == "True");
        let any_running = st
            .container_statuses
            .iter()
            .chain(&st.init_container_statuses)
            .any(|c| c.state.running.is_some());
        if sandbox || any_running {
            running += 1;
        }
        for c in st
            .container_statuses
            .iter()
            .chain(&st.init_container_statuses)
        {
            let s = if c.state.running.is_some() {
                "running"
            } else if c.state.terminated.is_some() {
                "exited"
            } else if c.container_id.is_empty() {
                continue;
            } else if c.last_state.terminated.is_some() {
                "exited"
            } else {
                "created"
            };
            *states.entry(s).or_default() += 1;
        }
    }
    (running, states)
}

fn fmt_f64(v: f64) -> String {
    if v.is_finite() && v == v.trunc() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

fn gauge(out: &mut String, name: &str, help: &str, rows: &[(String, f64)]) {
    family(out, name, help, "gauge", rows);
}

fn family(out: &mut String, name: &str, help: &str, kind: &str, rows: &[(String, f64)]) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, v) in rows {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {}", fmt_f64(*v));
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {}", fmt_f64(*v));
        }
    }
}

/// `/proc/self` figures for the process_* metrics; zeros where unreadable.
#[derive(Debug, Default)]
struct ProcessStats {
    rss_bytes: u64,
    cpu_seconds: f64,
    open_fds: u64,
}

fn clock_ticks() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|t| *t > 0)
        .map_or(100.0, |t| t as f64)
}

/// Fields of /proc/self/stat after the `(comm)`; index 0 is field 3 (state).
fn stat_fields() -> Option<Vec<String>> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(String::from).collect())
}

fn process_start_time() -> Option<SystemTime> {
    let f = stat_fields()?;
    let ticks: f64 = f.get(19)?.parse().ok()?; // field 22: starttime
    let btime: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())?;
    let secs = btime as f64 + ticks / clock_ticks();
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs_f64(secs))
}

impl ProcessStats {
    fn read() -> ProcessStats {
        let mut p = ProcessStats::default();
        if let Some(f) = stat_fields() {
            let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            p.cpu_seconds = (num(11) + num(12)) / clock_ticks(); // utime, stime
            let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
                .ok()
                .flatten()
                .unwrap_or(4096);
            p.rss_bytes = (num(21).max(0.0) as u64).saturating_mul(page.max(0) as u64); // rss pages
        }
        p.open_fds = std::fs::read_dir("/proc/self/fd")
            .map(|d| d.count() as u64)
            .unwrap_or(0);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_totals() {
        let t = render_probes(&[ProbeTotal {
            namespace: "default".into(),
            pod: "web-node1".into(),
            container: "c".into(),
            probe_type: "Readiness",
            result: "successful",
            count: 3,
        }]);
        assert_eq!(
            t,
            "# HELP prober_probe_total Cumulative number of a liveness, readiness or startup probe for a container by result.\n# TYPE prober_probe_total counter\nprober_probe_total{container=\"c\",namespace=\"default\",pod=\"web-node1\",probe_type=\"Readiness\",result=\"successful\"} 3\n"
        );
        assert_eq!(label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn text_format_has_the_families() {
        let m = Metrics::new();
        m.runtime_operation("list_containers", false);
        m.runtime_operation("list_containers", true);
        m.observe_pleg_relist(Duration::from_millis(30));
        m.observe_pod_start(Duration::from_millis(2500));
        let t = m.render(&[]);
        assert!(
            t.contains("# TYPE kubelet_running_pods gauge\nkubelet_running_pods 0\n"),
            "{t}"
        );
        assert!(
            t.contains(&format!(
                "# TYPE nanolet_build_info gauge\nnanolet_build_info{{version=\"{}\",commit=\"{}\",target=\"{}\"}} 1\n",
                crate::VERSION,
                crate::GIT_COMMIT,
                crate::TARGET
            )),
            "{t}"
        );
        assert!(
            t.contains("kubelet_runtime_operations_total{operation_type=\"list_containers\"} 2\n")
        );
        assert!(t.contains(
            "kubelet_runtime_operations_errors_total{operation_type=\"list_containers\"} 1\n"
        ));
        assert!(t.contains("kubelet_pleg_relist_duration_seconds_bucket{le=\"0.025\"} 0\n"));
        assert!(t.contains("kubelet_pleg_relist_duration_seconds_bucket{le=\"0.05\"} 1\n"));
        assert!(t.contains("kubelet_pleg_relist_duration_seconds_count 1\n"));
        assert!(
            t.contains("kubelet_pod_start_duration_seconds_bucket{le=\"2\"} 0\n"),
            "{t}"
        );
        assert!(
            t.contains("kubelet_pod_start_duration_seconds_bucket{le=\"3\"} 1\n"),
            "{t}"
        );
        assert!(
            t.contains("kubelet_pod_start_duration_seconds_sum 2.5\n"),
            "{t}"
        );
        let rss = t
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        assert!(rss > 0.0, "{t}");
        let start = t
            .lines()
            .find_map(|l| l.strip_prefix("process_start_time_seconds "))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        assert!(start > 1.6e9, "{t}");
    }
}
