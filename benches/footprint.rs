//! Footprint and speed benchmark (issue 8): drives the real release binary
//! (`target/release/nanolet`, or `$NANOLET_BIN`) against a private containerd and, in the same
//! run, the raw CRI "floor" (RunPodSandbox + CreateContainer + StartContainer issued directly).
//!
//! Run with `scripts/bench [--quick]` or `cargo bench --bench footprint [-- --quick]`.
//! Without `--bench` in its arguments (as under `cargo test --all-targets`) it only prints a note.
//! Prints markdown tables; writes `results/footprint-<unix>.json`, `results/footprint-latest.json`
//! and `results/footprint-latest.md`. Never fails on a number: a phase that times out is
//! reported as n/a.
//!
//! The private containerd (own root/state/socket, CNI bridge, local busybox/pause images, and a
//! tear-down that also runs on panic) is the integration-test harness itself: the
//! `nanolet-test-support` crate in tests/support/, a dev-dependency.

use nanolet_test_support as support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nanolet::cri::client::CriRuntime;
use nanolet::cri::{
    ContainerConfig, ContainerInfo, ContainerState, LABEL_POD_NAME, PodSandboxConfig, Runtime,
    RuntimeEvent,
};
use serde_json::{Value, json};

use support::{BUSYBOX_IMAGE, Containerd};

const NODE: &str = "bench";
const POLL: Duration = Duration::from_millis(5);
const TIMEOUT: Duration = Duration::from_secs(60);

struct Opts {
    #[allow(dead_code)]
    quick: bool,
    /// Pods for the start / crash / termination latencies.
    n: usize,
    /// Running-pod counts for the memory / CPU phase.
    counts: Vec<usize>,
    /// Seconds of each CPU window (split into 3 sub-windows for min/median/max).
    window: u64,
    /// Phases to run (`NANOLET_BENCH_PHASES=idle,start,crash,scale,...`; default all).
    phases: Vec<String>,
}

impl Opts {
    fn runs(&self, phase: &str) -> bool {
        self.phases.is_empty() || self.phases.iter().any(|p| p == phase)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") {
        println!(
            "footprint: benchmark skipped (not run with --bench); use scripts/bench [--quick]"
        );
        return;
    }
    let quick =
        args.iter().any(|a| a == "--quick") || std::env::var_os("NANOLET_BENCH_QUICK").is_some();
    let mut opts = if quick {
        Opts {
            quick,
            n: 5,
            counts: vec![10],
            window: 15,
            phases: Vec::new(),
        }
    } else {
        Opts {
            quick,
            n: 20,
            counts: vec![10, 50, 100],
            window: 60,
            phases: Vec::new(),
        }
    };
    // Overrides for investigations (e.g. one RSS figure at 100 pods with MALLOC_ARENA_MAX set:
    // NANOLET_BENCH_PHASES=idle,scale NANOLET_BENCH_COUNTS=100).
    if let Ok(p) = std::env::var("NANOLET_BENCH_PHASES") {
        opts.phases = p.split(',').map(|s| s.trim().to_string()).collect();
    }
    if let Ok(c) = std::env::var("NANOLET_BENCH_COUNTS") {
        let counts: Vec<usize> = c.split(',').filter_map(|s| s.trim().parse().ok()).collect();
        if !counts.is_empty() {
            opts.counts = counts;
        }
    }
    if let Some(w) = std::env::var("NANOLET_BENCH_WINDOW")
        .ok()
        .and_then(|w| w.parse().ok())
    {
        opts.window = w;
    }
    let started = Instant::now();
    let bin = nanolet_bin();
    if !bin.is_file() {
        eprintln!(
            "footprint: {} not found: run `cargo build --release` (or scripts/bench)",
            bin.display()
        );
        std::process::exit(1);
    }
    let mut report = Report::default();
    report.json.insert("quick".into(), json!(quick));
    report
        .json
        .insert("binary".into(), json!(bin.display().to_string()));
    if bin.components().any(|c| c.as_os_str() == "debug") {
        let line = format!(
            "\nNOTE: measuring the debug binary {} (CI's quick run reuses the test build): \
             latencies, CPU and RSS are higher than a release build's; use scripts/bench for \
             representative figures.\n",
            bin.display()
        );
        print!("{line}");
        report.md.push_str(&line);
    }
    report.json.insert("nproc".into(), json!(nproc()));
    report.json.insert("loadavg_start".into(), json!(loadavg()));
    report.json.insert(
        "malloc_arena_max".into(),
        json!(std::env::var("MALLOC_ARENA_MAX").ok()),
    );
    report.binary_sizes(&bin);

    if opts.runs("sync") {
        sync_sweep(&mut report);
    }
    let ctd = Containerd::start();
    let rt = ctd.runtime();
    let nl = NanoletProc::start(&ctd, &bin);
    println!(
        "footprint: nanolet pid {} on {} ({} mode)",
        nl.pid(),
        ctd.endpoint(),
        if quick { "quick" } else { "full" }
    );

    let mut b = Bench {
        ctd: &ctd,
        rt: &rt,
        nl: &nl,
        opts: &opts,
        report: &mut report,
        footprints: Vec::new(),
    };
    if opts.runs("idle") {
        b.idle();
    }
    if opts.runs("start") {
        b.start_latency();
    }
    if opts.runs("crash") {
        b.crash_restart();
    }
    if opts.runs("cold") {
        b.cold_start();
    }
    if opts.runs("scale") {
        b.scale();
    }
    if opts.runs("probes") {
        b.probes();
    }
    b.footprint_tables();
    drop(nl);
    if opts.runs("kubelet") {
        kubelet_peer(&mut report, &ctd, &bin, &opts);
    }
    if opts.runs("logrotate") {
        log_rotation(&mut report, &ctd, &bin, &opts);
    }

    let secs = started.elapsed().as_secs_f64();
    report.json.insert("duration_s".into(), json!(secs));
    report.json.insert("loadavg_end".into(), json!(loadavg()));
    let line = format!(
        "\nRun took {secs:.0} s ({} mode, {} CPUs; load average {} at the start, {} at the end).\n",
        if quick { "quick" } else { "full" },
        nproc(),
        report.json["loadavg_start"].as_str().unwrap_or(""),
        loadavg()
    );
    print!("{line}");
    report.md.push_str(&line);
    drop(rt);
    drop(ctd);
    report.write();
}

fn nproc() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// `$NANOLET_BIN`, else the binary cargo built with this bench's profile: target/release under
/// `cargo bench` (scripts/bench), target/debug under `cargo test --bench footprint -- --bench`
/// (CI's quick run, which reuses the test build).
fn nanolet_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("NANOLET_BIN") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_BIN_EXE_nanolet"))
}

// ---------------------------------------------------------------------------------------------
// nanolet process

struct NanoletProc {
    child: Child,
    /// nanolet's own pid: the child's, or, under `NANOLET_BENCH_WRAP`, the wrapper's child
    /// running the binary.
    pid: i32,
    manifests: PathBuf,
    port: u16,
}

/// `NANOLET_BENCH_WRAP`: a command line (split at whitespace) put before nanolet's, e.g.
/// `heaptrack -o /tmp/nanolet-heap` (scripts/heap-profile). Empty or unset: none.
fn bench_wrap() -> Vec<String> {
    std::env::var("NANOLET_BENCH_WRAP")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The process under `parent` (itself or a descendant, searched breadth-first) whose
/// executable is `bin`: the real nanolet under a wrapper such as heaptrack.
fn find_exe_under(parent: i32, bin: &Path) -> Option<i32> {
    let want = fs::canonicalize(bin).ok()?;
    let mut queue = vec![parent];
    while let Some(p) = queue.pop() {
        if fs::read_link(format!("/proc/{p}/exe")).ok().as_deref() == Some(want.as_path()) {
            return Some(p);
        }
        for e in fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|v| v.parse::<i32>().ok());
            if ppid == Some(p) {
                queue.push(pid);
            }
        }
    }
    None
}

impl NanoletProc {
    fn start(ctd: &Containerd, bin: &Path) -> NanoletProc {
        NanoletProc::start_in(ctd, bin, "nanolet", &[])
    }

    /// A nanolet of its own under `<tmp>/<name>`, with `extra` flags.
    fn start_in(ctd: &Containerd, bin: &Path, name: &str, extra: &[&str]) -> NanoletProc {
        let dir = ctd.tmp().join(name);
        let manifests = dir.join("manifests");
        fs::create_dir_all(&manifests).expect("manifest dir");
        let port = support::agent::free_port();
        let log = fs::File::create(dir.join("nanolet.log")).expect("nanolet log");
        let wrap = bench_wrap();
        let mut cmd = match wrap.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        if std::env::var_os("NANOLET_BENCH_SYSTEMD").is_some() {
            // As under the packaged unit (Type=notify, WatchdogSec=120s): a notify socket that
            // is read all the time, and the watchdog interval.
            let sock = dir.join("notify.sock");
            let rx = std::os::unix::net::UnixDatagram::bind(&sock).expect("notify socket");
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while rx.recv(&mut buf).is_ok() {}
            });
            cmd.env("NOTIFY_SOCKET", &sock)
                .env("WATCHDOG_USEC", "120000000");
        }
        let child = cmd
            .arg("run")
            .arg(format!("--pod-manifest-path={}", manifests.display()))
            .arg(format!("--container-runtime-endpoint={}", ctd.endpoint()))
            .arg(format!("--hostname-override={NODE}"))
            .arg(format!("--root-dir={}", dir.join("root").display()))
            .arg("--device-plugin-dir=")
            .arg("--pod-resources-dir=")
            .arg(format!("--pod-logs-dir={}", dir.join("log/pods").display()))
            .arg(format!("--read-only-port={port}"))
            .arg(format!("--healthz-port={}", support::agent::free_port()))
            // Not the default 10250: another bench or test on the machine may hold it (the
            // kubelet server then fails to start and nanolet exits).
            .arg(format!("--port={}", support::agent::free_port()))
            // As in the tests: no eviction thresholds and no image GC. On a shared machine
            // whose disk is past the default imagefs.available<15 % (86 % used on 2026-11-23),
            // nanolet would reject every bench pod with DiskPressure and garbage-collect the
            // busybox image. The eviction manager still runs its 10 s passes (stats and usage).
            .arg("--eviction-hard=memory.available<0%")
            .arg("--image-gc-high-threshold=100")
            .arg("--image-gc-low-threshold=99")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log)
            .spawn()
            .expect("start nanolet");
        let mut nl = NanoletProc {
            pid: child.id() as i32,
            child,
            manifests,
            port,
        };
        let url = format!("http://127.0.0.1:{port}/healthz");
        // A wrapper (heaptrack) slows start-up down: give it longer.
        let start_timeout = Duration::from_secs(if wrap.is_empty() { 30 } else { 120 });
        let ok = support::wait_for(start_timeout, || {
            ureq::get(&url)
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .filter(|b| b == "ok")
        });
        if ok.is_none() {
            eprintln!(
                "footprint: nanolet healthz never became ok:\n{}",
                support::tail(
                    &fs::read_to_string(dir.join("nanolet.log")).unwrap_or_default(),
                    30
                )
            );
        }
        if !wrap.is_empty() {
            match find_exe_under(nl.pid, bin) {
                Some(p) => nl.pid = p,
                None => eprintln!(
                    "footprint: no process running {} under the wrapper {wrap:?}; measuring the \
                     wrapper's pid {}",
                    bin.display(),
                    nl.pid
                ),
            }
        }
        nl
    }

    /// nanolet's own /metrics (Prometheus text), series -> value; empty on error.
    fn metrics(&self) -> BTreeMap<String, f64> {
        self.metrics_at("/metrics")
    }

    /// A Prometheus text endpoint of nanolet's (`/metrics`, `/metrics/probes`).
    fn metrics_at(&self, path: &str) -> BTreeMap<String, f64> {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let body = ureq::get(&url)
            .call()
            .ok()
            .and_then(|mut r| r.body_mut().read_to_string().ok())
            .unwrap_or_default();
        parse_metrics(&body)
    }

    fn pid(&self) -> i32 {
        self.pid
    }

    fn write(&self, name: &str, body: &str) {
        write_manifest(&self.manifests, name, body);
    }

    fn remove(&self, name: &str) {
        let _ = fs::remove_file(self.manifests.join(format!("{name}.yaml")));
    }
}

impl Drop for NanoletProc {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.pid());
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        // A wrapper (heaptrack) ends after nanolet, once it has written its profile.
        let wait = if bench_wrap().is_empty() { 10 } else { 120 };
        let deadline = Instant::now() + Duration::from_secs(wait);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes `<dir>/<name>.yaml` as a rename of a dot file (both agents' file sources skip dot
/// files: the rename is the manifest's arrival, never a half-written file).
fn write_manifest(dir: &Path, name: &str, body: &str) {
    let tmp = dir.join(format!(".{name}.yaml.tmp"));
    fs::write(&tmp, body).expect("write manifest");
    fs::rename(&tmp, dir.join(format!("{name}.yaml"))).expect("rename manifest");
}

/// A pod manifest: one busybox container running `cmd`.
fn manifest(name: &str, host_network: bool, grace: u32, cmd: &[&str]) -> String {
    let cmd: Vec<String> = cmd.iter().map(|c| format!("{c:?}")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  \
         hostNetwork: {host_network}\n  terminationGracePeriodSeconds: {grace}\n  \
         restartPolicy: Always\n  containers:\n  - name: c\n    image: {BUSYBOX_IMAGE}\n    \
         imagePullPolicy: Never\n    command: [{}]\n",
        cmd.join(", ")
    )
}

/// `sleep` as PID 1 ignores SIGTERM; this one exits on it (so grace>0 measures the TERM path).
const SLEEP_TRAP: &[&str] = &["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"];
const SLEEP: &[&str] = &["sleep", "3600"];

fn full_name(name: &str) -> String {
    format!("{name}-{NODE}")
}

fn containers_of<'a>(list: &'a [ContainerInfo], pod: &str) -> Vec<&'a ContainerInfo> {
    let full = full_name(pod);
    list.iter()
        .filter(|c| c.labels.get(LABEL_POD_NAME).map(String::as_str) == Some(full.as_str()))
        .collect()
}

/// Polls CRI every 5 ms until `f(list)` holds; returns the elapsed time since `t0`.
fn poll_until(
    rt: &CriRuntime,
    t0: Instant,
    timeout: Duration,
    mut f: impl FnMut(&[ContainerInfo]) -> bool,
) -> Option<Duration> {
    loop {
        if let Ok(list) = rt.list_containers() {
            if f(&list) {
                return Some(t0.elapsed());
            }
        }
        if t0.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

type Samples = Vec<Option<f64>>;

fn ms(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64() * 1000.0)
}

// ---------------------------------------------------------------------------------------------
// statistics and output

#[derive(Default)]
struct Report {
    md: String,
    json: serde_json::Map<String, Value>,
    /// Whitespace-separated data files for the gnuplot charts (scripts/bench-charts.gp):
    /// results/<name>.dat.
    dat: BTreeMap<String, String>,
}

struct Stats {
    n: usize,
    min: f64,
    p50: f64,
    p95: f64,
    max: f64,
}

fn stats(v: &[Option<f64>]) -> Option<Stats> {
    let mut v: Vec<f64> = v.iter().flatten().copied().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Some(Stats {
        n: v.len(),
        min: v[0],
        p50: rank(0.5),
        p95: rank(0.95),
        max: v[v.len() - 1],
    })
}

fn stats_json(s: &Option<Stats>, raw: &[Option<f64>]) -> Value {
    match s {
        Some(s) => json!({"n": s.n, "min": s.min, "p50": s.p50, "p95": s.p95, "max": s.max,
                          "samples": raw}),
        None => json!({"n": 0, "samples": raw}),
    }
}

fn f1(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn stat_cells(s: &Option<Stats>) -> Vec<String> {
    match s {
        Some(s) => vec![s.n.to_string(), f1(s.p50), f1(s.p95), f1(s.min), f1(s.max)],
        None => vec![
            "0".into(),
            "n/a".into(),
            "n/a".into(),
            "n/a".into(),
            "n/a".into(),
        ],
    }
}

impl Report {
    fn table(&mut self, title: &str, head: &[&str], rows: Vec<Vec<String>>) {
        let mut s = format!("\n### {title}\n\n| {} |\n|", head.join(" | "));
        for _ in head {
            s.push_str("---|");
        }
        s.push('\n');
        for r in rows {
            let _ = writeln!(s, "| {} |", r.join(" | "));
        }
        print!("{s}");
        self.md.push_str(&s);
    }

    fn binary_sizes(&mut self, bin: &Path) {
        let mut rows = Vec::new();
        let mut j = serde_json::Map::new();
        let mut add = |label: String, p: &Path| {
            if let Ok(m) = fs::metadata(p) {
                rows.push(vec![
                    label.clone(),
                    format!("{:.2}", m.len() as f64 / 1048576.0),
                    m.len().to_string(),
                ]);
                j.insert(label, json!(m.len()));
            }
        };
        add(bin.display().to_string(), bin);
        let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("dist");
        if let Ok(entries) = fs::read_dir(&dist) {
            let mut entries: Vec<_> = entries.flatten().collect();
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                let p = e.path().join("nanolet");
                add(
                    format!("dist/{}/nanolet", e.file_name().to_string_lossy()),
                    &p,
                );
            }
        }
        self.json.insert("binary_bytes".into(), Value::Object(j));
        self.table("Binary size", &["binary", "MiB", "bytes"], rows);
    }

    fn write(&self) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
        let _ = fs::create_dir_all(&dir);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let body =
            serde_json::to_string_pretty(&Value::Object(self.json.clone())).unwrap_or_default();
        let _ = fs::write(dir.join(format!("footprint-{now}.json")), &body);
        let _ = fs::write(dir.join("footprint-latest.json"), &body);
        let _ = fs::write(dir.join("footprint-latest.md"), &self.md);
        for (name, body) in &self.dat {
            let _ = fs::write(dir.join(format!("{name}.dat")), body);
        }
        println!(
            "\nfootprint: wrote {}/footprint-{now}.json, footprint-latest.{{json,md}}",
            dir.display()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// /proc sampling

fn read_kb(path: &str, key: &str) -> Option<u64> {
    fs::read_to_string(path).ok()?.lines().find_map(|l| {
        l.strip_prefix(key)?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    })
}

/// (VmRSS KiB, Pss KiB) of one process.
fn mem_of(pid: i32) -> (u64, u64) {
    (
        read_kb(&format!("/proc/{pid}/status"), "VmRSS:").unwrap_or(0),
        read_kb(&format!("/proc/{pid}/smaps_rollup"), "Pss:").unwrap_or(0),
    )
}

/// utime+stime (seconds, whole process including dead threads).
fn cpu_of(pid: i32) -> f64 {
    let tck = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.to_string()))
        .map(|r| {
            let f: Vec<&str> = r.split_whitespace().collect();
            // after ")": state=0, ..., utime=11, stime=12
            let u: f64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0.0);
            let s: f64 = f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0.0);
            (u + s) / tck
        })
        .unwrap_or(0.0)
}

/// Sum over live threads of /proc/PID/task/*/schedstat: (ns on CPU, timeslices run).
fn schedstat_of(pid: i32) -> (u64, u64) {
    let mut sum = (0, 0);
    if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = fs::read_to_string(t.path().join("schedstat")) {
                let f: Vec<u64> = s
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                if f.len() >= 3 {
                    sum.0 += f[0];
                    sum.1 += f[2];
                }
            }
        }
    }
    sum
}

/// One thread's counters: (name, ns on CPU, timeslices run, voluntary context switches).
type ThreadSample = (String, u64, u64, u64);

/// Every live thread of `pid` by thread id (`NANOLET_BENCH_THREADS`: the idle-CPU attribution
/// of docs/benchmarks/idle-profile.md).
fn per_thread(pid: i32) -> BTreeMap<u64, ThreadSample> {
    let mut out = BTreeMap::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let comm = fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let sched: Vec<u64> = fs::read_to_string(t.path().join("schedstat"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        let vol = fs::read_to_string(t.path().join("status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if sched.len() >= 3 {
            out.insert(tid, (comm.trim().to_string(), sched[0], sched[2], vol));
        }
    }
    out
}

/// Per thread name (the pod workers `pod-*` as one row), over `secs`: CPU ms per minute,
/// wake-ups (timeslices run) per minute, voluntary context switches per minute; and the CRI
/// calls per minute by method from `kubelet_runtime_operations_total`.
fn thread_table(
    report: &mut Report,
    pods: usize,
    secs: f64,
    before: &BTreeMap<u64, ThreadSample>,
    after: &BTreeMap<u64, ThreadSample>,
    ops0: &BTreeMap<String, f64>,
    ops1: &BTreeMap<String, f64>,
) {
    let per_min = 60.0 / secs;
    let mut by_name: BTreeMap<String, (usize, u64, u64, u64)> = BTreeMap::new();
    for (tid, (name, ns, runs, vol)) in after {
        let (ns0, runs0, vol0) = before.get(tid).map_or((0, 0, 0), |b| (b.1, b.2, b.3));
        let key = if name.starts_with("pod-") {
            "pod-* (workers)".to_string()
        } else {
            name.clone()
        };
        let e = by_name.entry(key).or_default();
        e.0 += 1;
        e.1 += ns.saturating_sub(ns0);
        e.2 += runs.saturating_sub(runs0);
        e.3 += vol.saturating_sub(vol0);
    }
    let mut rows: Vec<(String, (usize, u64, u64, u64))> = by_name.into_iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1.1));
    let total = rows.iter().fold((0, 0, 0, 0), |t, (_, r)| {
        (t.0 + r.0, t.1 + r.1, t.2 + r.2, t.3 + r.3)
    });
    rows.push(("total (live threads)".into(), total));
    let cells = rows
        .into_iter()
        .map(|(name, (n, ns, runs, vol))| {
            vec![
                name,
                n.to_string(),
                format!("{:.1}", ns as f64 / 1e6 * per_min),
                format!("{:.0}", runs as f64 * per_min),
                format!("{:.0}", vol as f64 * per_min),
            ]
        })
        .collect();
    report.table(
        &format!("Per thread at {pods} pods over {secs:.0} s (per minute)"),
        &[
            "thread",
            "threads",
            "CPU ms",
            "wake-ups",
            "voluntary switches",
        ],
        cells,
    );
    let ops: Vec<Vec<String>> = cri_calls_by_verb(ops0, ops1)
        .into_iter()
        .map(|(op, d)| vec![op, format!("{:.1}", d * per_min)])
        .collect();
    report.table(
        &format!("CRI calls per minute by method at {pods} pods"),
        &["operation", "calls/min"],
        ops,
    );
}

/// The CRI calls made between two scrapes of `/metrics`, by `operation_type` (the verb) of
/// `kubelet_runtime_operations_total`, which nanolet and the kubelet both export; verbs with
/// no call left out.
fn cri_calls_by_verb(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    let key = "kubelet_runtime_operations_total{operation_type=\"";
    after
        .iter()
        .filter_map(|(k, v)| {
            let op = k.strip_prefix(key)?.split('"').next()?;
            let d = v - before.get(k).unwrap_or(&0.0);
            (d > 0.0).then(|| (op.to_string(), d))
        })
        .collect()
}

/// Where a process's resident memory is, from /proc/PID/smaps, KiB: the executable's own
/// mappings, shared libraries, the brk heap (glibc's main malloc arena), other malloc arenas
/// (anonymous read-write mappings starting on a 64 MiB boundary: glibc's HEAP_MAX_SIZE
/// alignment), and the remaining anonymous memory (thread stacks, large mmap'd allocations).
#[derive(Default, Clone, Copy)]
struct Breakdown {
    binary: u64,
    libs: u64,
    heap: u64,
    arenas: u64,
    arena_count: u64,
    anon: u64,
    anon_count: u64,
}

fn smaps_breakdown(pid: i32) -> Option<Breakdown> {
    let text = fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    let exe = fs::read_link(format!("/proc/{pid}/exe")).ok();
    let mut b = Breakdown::default();
    // (kind, start address) of the current mapping; kind: 0 binary, 1 lib, 2 heap, 3 anon.
    let mut cur: Option<(u8, u64, bool)> = None;
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(first), Some(second)) = (f.next(), f.next()) else {
            continue;
        };
        if first.contains('-') && second.len() == 4 {
            // header: start-end perms offset dev inode [path]
            let start = first
                .split('-')
                .next()
                .and_then(|a| u64::from_str_radix(a, 16).ok())
                .unwrap_or(1);
            let path: Vec<&str> = f.skip(3).collect();
            let path = path.join(" ");
            let kind = if path.is_empty() {
                3
            } else if path == "[heap]" {
                2
            } else if exe
                .as_ref()
                .is_some_and(|e| Path::new(&path) == e.as_path() || path.ends_with("/nanolet"))
            {
                0
            } else if path.starts_with('/') {
                1
            } else {
                4 // [stack], [vdso], ...: counted as anon
            };
            cur = Some((kind, start, second.starts_with("rw")));
        } else if first == "Rss:" {
            let kb: u64 = second.parse().unwrap_or(0);
            match cur {
                Some((0, ..)) => b.binary += kb,
                Some((1, ..)) => b.libs += kb,
                Some((2, ..)) => b.heap += kb,
                Some((3, start, true)) if start % (64 << 20) == 0 => {
                    b.arenas += kb;
                    b.arena_count += 1;
                }
                Some(_) => {
                    b.anon += kb;
                    if kb > 0 {
                        b.anon_count += 1;
                    }
                }
                None => {}
            }
        }
    }
    Some(b)
}

/// The 1/5/15-minute load average (`uptime`), for the record: the numbers are noisy on a busy
/// machine.
fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// (containerd pid, shim pids) of the private containerd below `tmp`.
fn containerd_procs(tmp: &Path) -> (Option<i32>, Vec<i32>) {
    let needle = format!("{}/", tmp.display());
    let mut ctd = None;
    let mut shims = Vec::new();
    if let Ok(entries) = fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let cmd = fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            if !cmd.contains(&needle) {
                continue;
            }
            if cmd.contains("containerd-shim") {
                shims.push(pid);
            } else if cmd.starts_with("containerd ") {
                ctd = Some(pid);
            }
        }
    }
    (ctd, shims)
}

// ---------------------------------------------------------------------------------------------
// phases

struct Bench<'a> {
    ctd: &'a Containerd,
    rt: &'a CriRuntime,
    nl: &'a NanoletProc,
    opts: &'a Opts,
    report: &'a mut Report,
    footprints: Vec<Footprint>,
}

struct Footprint {
    pods: usize,
    rss: Vec<Option<f64>>,
    pss: Vec<Option<f64>>,
    cpu: Vec<Option<f64>>,
    cpu_sched: Vec<Option<f64>>,
    wakeups: Vec<Option<f64>>,
    relist_ms: Vec<Option<f64>>,
    threads: Vec<Option<f64>>,
    ctd_rss: Vec<Option<f64>>,
    ctd_pss: Vec<Option<f64>>,
    shims: usize,
    shim_rss: Vec<Option<f64>>,
    shim_pss: Vec<Option<f64>>,
    breakdown: Option<Breakdown>,
    /// Every pod carries an exec liveness and an httpGet readiness probe (10 s period).
    probes: bool,
}

impl Bench<'_> {
    /// Measures memory (3 samples) and CPU (3 sub-windows) of nanolet with `pods` running.
    fn footprint(&mut self, pods: usize) -> Footprint {
        self.footprint_window(pods, self.opts.window)
    }

    fn footprint_window(&mut self, pods: usize, window: u64) -> Footprint {
        let pid = self.nl.pid();
        let sub = Duration::from_secs(window) / 3;
        let mut fp = Footprint {
            pods,
            rss: vec![],
            pss: vec![],
            cpu: vec![],
            cpu_sched: vec![],
            wakeups: vec![],
            relist_ms: vec![],
            threads: vec![],
            ctd_rss: vec![],
            ctd_pss: vec![],
            shims: 0,
            shim_rss: vec![],
            shim_pss: vec![],
            breakdown: None,
            probes: false,
        };
        let threads0 = per_thread(pid);
        let ops0 = self.nl.metrics();
        let w0 = Instant::now();
        for _ in 0..3 {
            let m0 = self.nl.metrics();
            let (c0, s0, t0) = (cpu_of(pid), schedstat_of(pid), Instant::now());
            std::thread::sleep(sub);
            let (c1, s1, dt) = (cpu_of(pid), schedstat_of(pid), t0.elapsed().as_secs_f64());
            fp.cpu.push(Some((c1 - c0) * 60.0 / dt));
            fp.cpu_sched
                .push(Some(s1.0.saturating_sub(s0.0) as f64 / 1e9 * 60.0 / dt));
            fp.wakeups.push(Some(s1.1.saturating_sub(s0.1) as f64 / dt));
            let m1 = self.nl.metrics();
            let d = |k: &str| m1.get(k).unwrap_or(&0.0) - m0.get(k).unwrap_or(&0.0);
            let n = d("kubelet_pleg_relist_duration_seconds_count");
            fp.relist_ms.push(
                (n > 0.0).then(|| d("kubelet_pleg_relist_duration_seconds_sum") / n * 1000.0),
            );
            let (rss, pss) = mem_of(pid);
            fp.rss.push(Some(rss as f64 / 1024.0));
            fp.pss.push(Some(pss as f64 / 1024.0));
            fp.threads
                .push(read_kb(&format!("/proc/{pid}/status"), "Threads:").map(|t| t as f64));
            let (ctd, shims) = containerd_procs(self.ctd.tmp());
            if let Some(c) = ctd {
                let (r, p) = mem_of(c);
                fp.ctd_rss.push(Some(r as f64 / 1024.0));
                fp.ctd_pss.push(Some(p as f64 / 1024.0));
            }
            fp.shims = shims.len();
            let (r, p) = shims
                .iter()
                .map(|s| mem_of(*s))
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
            fp.shim_rss.push(Some(r as f64 / 1024.0));
            fp.shim_pss.push(Some(p as f64 / 1024.0));
        }
        if std::env::var_os("NANOLET_BENCH_THREADS").is_some() {
            let secs = w0.elapsed().as_secs_f64();
            let ops1 = self.nl.metrics();
            thread_table(
                self.report,
                pods,
                secs,
                &threads0,
                &per_thread(pid),
                &ops0,
                &ops1,
            );
        }
        fp.breakdown = smaps_breakdown(pid);
        println!(
            "footprint: {pods} pods: nanolet RSS {:?} MiB, CPU {:?} s/min",
            fp.rss, fp.cpu
        );
        fp
    }

    fn idle(&mut self) {
        std::thread::sleep(Duration::from_secs(2));
        let fp = self.footprint(0);
        self.footprints.push(fp);
    }
}

fn mmm(v: &[Option<f64>]) -> String {
    match stats(v) {
        Some(s) => format!("{} ({}–{})", f1(s.p50), f1(s.min), f1(s.max)),
        None => "n/a".into(),
    }
}

struct FloorPod {
    sandbox: String,
    container: String,
}

/// The floor's three calls for one hostNetwork pod (RunPodSandbox + CreateContainer +
/// StartContainer), without waiting for Running: for k pods at once, one thread each.
fn floor_issue(rt: &CriRuntime, tmp: &Path, name: &str, cmd: &[&str]) -> Result<FloorPod, String> {
    let uid = format!("floor-{name}-{}", std::process::id());
    let logdir = tmp.join("floor").join(&uid);
    let mut labels = BTreeMap::new();
    labels.insert(LABEL_POD_NAME.to_string(), format!("floor-{name}"));
    let sb = PodSandboxConfig {
        name: format!("floor-{name}"),
        namespace: "bench".into(),
        uid,
        log_directory: logdir.display().to_string(),
        host_network: true,
        labels: labels.clone(),
        ..Default::default()
    };
    let cc = ContainerConfig {
        name: "c".into(),
        image: BUSYBOX_IMAGE.into(),
        command: cmd.iter().map(|s| s.to_string()).collect(),
        log_path: "c/0.log".into(),
        labels,
        ..Default::default()
    };
    let _ = fs::create_dir_all(&logdir);
    let sandbox = rt.run_pod_sandbox(&sb).map_err(|e| e.to_string())?;
    let mut pod = FloorPod {
        sandbox,
        container: String::new(),
    };
    match rt.create_container(&pod.sandbox, &cc, &sb) {
        Ok(c) => pod.container = c,
        Err(e) => {
            floor_remove(rt, &pod);
            return Err(e.to_string());
        }
    }
    if let Err(e) = rt.start_container(&pod.container) {
        floor_remove(rt, &pod);
        return Err(e.to_string());
    }
    Ok(pod)
}

/// The crash path's floor for one container: it exits 1 after `sleep`; ContainerStatus is
/// polled every millisecond until CRI shows it Exited, and CreateContainer is issued at once
/// for attempt 1. Returns ms after the exit (`finished_at`): the runtime's exit event received
/// (NaN if none within 2 s of CRI showing the exit), CRI shows Exited, replacement `created_at`.
fn floor_crash(rt: &CriRuntime, tmp: &Path, name: &str, sleep: f64) -> Result<[f64; 3], String> {
    let events = rt.subscribe_events().map_err(|e| e.to_string())?;
    let script = format!("sleep {sleep:.1}; exit 1");
    let pod = floor_issue(rt, tmp, name, &["sh", "-c", &script])?;
    let wall = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64)
    };
    let measured = (|| {
        let deadline = Instant::now() + Duration::from_secs(30);
        // CRI is polled (every millisecond) until it shows the exit, and the runtime's exit
        // event (containerd's task exit on 1.6/1.7, its CRI CONTAINER_STOPPED event on 2.x) is
        // noted when it arrives: the floor is when CRI shows the exit, whichever came first.
        let mut event_at = None;
        let (status, seen_at) = loop {
            while let Ok(ev) = events.try_recv() {
                let exit = match &ev {
                    RuntimeEvent::TaskExit { id, .. } => id == &pod.container,
                    RuntimeEvent::Container {
                        id,
                        kind: nanolet::cri::ContainerEventKind::Stopped,
                        ..
                    } => id == &pod.container,
                    _ => false,
                };
                if exit && event_at.is_none() {
                    event_at = Some(wall());
                }
            }
            let st = rt
                .container_status(&pod.container)
                .map_err(|e| e.to_string())?;
            if st.state == ContainerState::Exited {
                break (st, wall());
            }
            if Instant::now() > deadline {
                return Err("CRI never showed the container exited".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        // An event that comes after CRI showed the exit (containerd 2 sends it after the
        // state change) is waited for briefly, so the row says how late it is.
        let event_at = match event_at {
            Some(t) => t,
            None => {
                let until = Instant::now() + Duration::from_secs(2);
                loop {
                    match events.recv_timeout(until.saturating_duration_since(Instant::now())) {
                        Ok(RuntimeEvent::TaskExit { id, .. }) if id == pod.container => {
                            break wall();
                        }
                        Ok(RuntimeEvent::Container {
                            id,
                            kind: nanolet::cri::ContainerEventKind::Stopped,
                            ..
                        }) if id == pod.container => break wall(),
                        Ok(_) => {}
                        Err(_) => break i64::MAX,
                    }
                }
            }
        };
        let sb = PodSandboxConfig {
            name: format!("floor-{name}"),
            namespace: "bench".into(),
            uid: format!("floor-{name}-{}", std::process::id()),
            host_network: true,
            ..Default::default()
        };
        let cc = ContainerConfig {
            name: "c".into(),
            attempt: 1,
            image: BUSYBOX_IMAGE.into(),
            command: vec!["sleep".into(), "60".into()],
            log_path: "c/1.log".into(),
            ..Default::default()
        };
        let again = rt
            .create_container(&pod.sandbox, &cc, &sb)
            .map_err(|e| e.to_string())?;
        let created = rt.container_status(&again).map(|s| s.created_at);
        let _ = rt.remove_container(&again);
        let created = created.map_err(|e| e.to_string())?;
        let ms = |t: i64| (t - status.finished_at) as f64 / 1e6;
        // No event within 2 s of CRI showing the exit: the row gets NaN (left out).
        let ev = if event_at == i64::MAX {
            f64::NAN
        } else {
            ms(event_at)
        };
        Ok([ev, ms(seen_at), ms(created)])
    })();
    floor_remove(rt, &pod);
    measured
}

/// Stop and remove a floor pod at once (grace 0).
fn floor_remove(rt: &CriRuntime, pod: &FloorPod) {
    if !pod.container.is_empty() {
        let _ = rt.stop_container(&pod.container, Duration::ZERO);
        let _ = rt.remove_container(&pod.container);
    }
    let _ = rt.stop_pod_sandbox(&pod.sandbox);
    let _ = rt.remove_pod_sandbox(&pod.sandbox);
}

impl Bench<'_> {
    /// The raw floor: RunPodSandbox + CreateContainer + StartContainer, until CRI lists the
    /// container Running.
    fn floor_start(
        &self,
        name: &str,
        host: bool,
        cmd: &[&str],
    ) -> (Option<Duration>, Option<FloorPod>) {
        let rt = self.rt;
        let uid = format!("floor-{name}-{}", std::process::id());
        let logdir = self.ctd.tmp().join("floor").join(&uid);
        let mut labels = BTreeMap::new();
        labels.insert(LABEL_POD_NAME.to_string(), format!("floor-{name}"));
        let sb = PodSandboxConfig {
            name: format!("floor-{name}"),
            namespace: "bench".into(),
            uid,
            hostname: if host {
                String::new()
            } else {
                format!("floor-{name}")
            },
            log_directory: logdir.display().to_string(),
            host_network: host,
            labels: labels.clone(),
            ..Default::default()
        };
        let cc = ContainerConfig {
            name: "c".into(),
            image: BUSYBOX_IMAGE.into(),
            command: cmd.iter().map(|s| s.to_string()).collect(),
            log_path: "c/0.log".into(),
            labels,
            ..Default::default()
        };
        let t0 = Instant::now();
        let _ = fs::create_dir_all(&logdir);
        let sid = match rt.run_pod_sandbox(&sb) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("footprint: floor {name}: {e}");
                return (None, None);
            }
        };
        let mut pod = FloorPod {
            sandbox: sid,
            container: String::new(),
        };
        match rt.create_container(&pod.sandbox, &cc, &sb).and_then(|c| {
            pod.container = c.clone();
            rt.start_container(&c)
        }) {
            Ok(()) => {}
            Err(e) => {
                eprintln!("footprint: floor {name}: {e}");
                return (None, Some(pod));
            }
        }
        let cid = pod.container.clone();
        let d = poll_until(rt, t0, TIMEOUT, |l| {
            l.iter()
                .any(|c| c.id == cid && c.state == ContainerState::Running)
        });
        (d, Some(pod))
    }

    /// Floor termination: StopContainer(grace) + StopPodSandbox (what "stopped" means for
    /// nanolet too); then the removal of both.
    fn floor_stop(&self, pod: &FloorPod, grace: u64) -> (Option<Duration>, Option<Duration>) {
        let t0 = Instant::now();
        let ok = (pod.container.is_empty()
            || self
                .rt
                .stop_container(&pod.container, Duration::from_secs(grace))
                .is_ok())
            && self.rt.stop_pod_sandbox(&pod.sandbox).is_ok();
        let stopped = ok.then(|| t0.elapsed());
        if !pod.container.is_empty() {
            let _ = self.rt.remove_container(&pod.container);
        }
        let removed = self
            .rt
            .remove_pod_sandbox(&pod.sandbox)
            .is_ok()
            .then(|| t0.elapsed());
        (stopped, removed.filter(|_| ok))
    }

    fn nanolet_start(&self, name: &str, host: bool, grace: u32, cmd: &[&str]) -> Option<Duration> {
        let body = manifest(name, host, grace, cmd);
        let t0 = Instant::now();
        self.nl.write(name, &body);
        poll_until(self.rt, t0, TIMEOUT, |l| {
            containers_of(l, name)
                .iter()
                .any(|c| c.state == ContainerState::Running)
        })
    }

    /// Deletes the manifests; returns when no container of those pods runs and their
    /// sandboxes are not ready.
    fn nanolet_delete(&self, names: &[String], timeout: Duration) -> Option<Duration> {
        let t0 = Instant::now();
        for n in names {
            self.nl.remove(n);
        }
        let fulls: Vec<String> = names.iter().map(|n| full_name(n)).collect();
        poll_until(self.rt, t0, timeout, |l| {
            let running = names.iter().any(|n| {
                containers_of(l, n)
                    .iter()
                    .any(|c| c.state == ContainerState::Running)
            });
            !running
                && self.rt.list_pod_sandboxes().is_ok_and(|s| {
                    !s.iter().any(|sb| {
                        fulls.contains(&sb.name) && sb.state == nanolet::cri::SandboxState::Ready
                    })
                })
        })
    }

    fn start_latency(&mut self) {
        let n = self.opts.n;
        let kinds: [(&str, bool, u32, &[&str]); 2] =
            [("host", true, 0, SLEEP), ("cni", false, 1, SLEEP_TRAP)];
        let mut start: BTreeMap<&str, (Samples, Samples)> = BTreeMap::new();
        let mut floors: Vec<(&str, Option<FloorPod>)> = Vec::new();
        let m0 = self.nl.metrics();
        for i in 0..n {
            for (kind, host, grace, cmd) in kinds {
                let name = format!("{kind}{i}");
                let d = ms(self.nanolet_start(&name, host, grace, cmd));
                let (f, pod) = self.floor_start(&name, host, cmd);
                let e = start.entry(kind).or_default();
                e.0.push(d);
                e.1.push(ms(f));
                floors.push((kind, pod));
            }
        }
        let m1 = self.nl.metrics();
        let delta = |k: &str| m1.get(k).unwrap_or(&0.0) - m0.get(k).unwrap_or(&0.0);
        let started = delta("kubelet_pod_start_duration_seconds_count");
        let seen_to_running = (started > 0.0)
            .then(|| delta("kubelet_pod_start_duration_seconds_sum") / started * 1000.0);
        let ops: f64 = m1
            .keys()
            .filter(|k| k.starts_with("kubelet_runtime_operations_total{"))
            .map(|k| delta(k))
            .sum();
        let ops_per_pod = (started > 0.0).then(|| ops / started);
        let mut rows = Vec::new();
        let mut j = serde_json::Map::new();
        j.insert(
            "nanolet_seen_to_running_mean_ms".into(),
            json!(seen_to_running),
        );
        j.insert("nanolet_cri_calls_per_pod_start".into(), json!(ops_per_pod));
        let mut dat = String::from("# network nanolet_p50 nanolet_p95 floor_p50 floor_p95 (ms)\n");
        for (kind, (nl, fl)) in &start {
            let (sn, sf) = (stats(nl), stats(fl));
            if let (Some(a), Some(b)) = (&sn, &sf) {
                let _ = writeln!(
                    dat,
                    "{} {:.1} {:.1} {:.1} {:.1}",
                    if *kind == "host" {
                        "hostNetwork"
                    } else {
                        "CNI"
                    },
                    a.p50,
                    a.p95,
                    b.p50,
                    b.p95
                );
            }
            let ratio = match (&sn, &sf) {
                (Some(a), Some(b)) if b.p50 > 0.0 => format!("{:.2}", a.p50 / b.p50),
                _ => "n/a".into(),
            };
            let label = if *kind == "host" {
                "hostNetwork"
            } else {
                "CNI"
            };
            let mut r = vec![label.to_string(), "nanolet".into()];
            r.extend(stat_cells(&sn));
            r.push(ratio.clone());
            rows.push(r);
            let mut r = vec![label.to_string(), "raw CRI floor".into()];
            r.extend(stat_cells(&sf));
            r.push(String::new());
            rows.push(r);
            j.insert(
                kind.to_string(),
                json!({"nanolet_ms": stats_json(&sn, nl), "floor_ms": stats_json(&sf, fl),
                       "ratio_p50": ratio}),
            );
        }
        self.report.dat.insert("bench-start".into(), dat);
        self.report
            .json
            .insert("start_latency".into(), Value::Object(j));
        self.report.table(
            "Pod start latency (manifest written / first CRI call -> container Running in CRI ListContainers), ms",
            &["network", "who", "n", "p50", "p95", "min", "max", "nanolet/floor p50"],
            rows,
        );
        let line = format!(
            "\nnanolet's own kubelet_pod_start_duration_seconds (pod first seen -> all containers \
             running), mean over these pods: {} ms; CRI calls by nanolet per pod start (all \
             verbs, incl. PLEG relists meanwhile): {} (the floor: 3 + its ListContainers polls).\n",
            seen_to_running.map(f1).unwrap_or_else(|| "n/a".into()),
            ops_per_pod.map(f1).unwrap_or_else(|| "n/a".into()),
        );
        print!("{line}");
        self.report.md.push_str(&line);

        // Termination of the same pods, one at a time, interleaved with the floor's.
        let mut term: BTreeMap<&str, [Vec<Option<f64>>; 3]> = BTreeMap::new();
        let mut fi = floors.into_iter();
        for i in 0..n {
            for (kind, _, grace, _) in kinds {
                let name = format!("{kind}{i}");
                let d = ms(self.nanolet_delete(&[name], Duration::from_secs(30)));
                let e = term.entry(kind).or_default();
                e[0].push(d);
                if let Some((_, Some(pod))) = fi.next() {
                    let (s, r) = self.floor_stop(&pod, grace as u64);
                    e[1].push(ms(s));
                    e[2].push(ms(r));
                }
            }
        }
        let mut rows = Vec::new();
        let mut j = serde_json::Map::new();
        for (kind, [nl, fs_, fr]) in &term {
            let label = if *kind == "host" {
                "hostNetwork, grace 0 (`sleep` ignores TERM: 2 s minimum grace)"
            } else {
                "CNI, grace 1 (container exits on TERM)"
            };
            for (who, v) in [
                ("nanolet: manifest deleted -> stopped", nl),
                ("floor: StopContainer + StopPodSandbox", fs_),
                ("floor: ... + RemoveContainer + RemovePodSandbox", fr),
            ] {
                let mut r = vec![label.to_string(), who.to_string()];
                r.extend(stat_cells(&stats(v)));
                rows.push(r);
            }
            j.insert(
                kind.to_string(),
                json!({"nanolet_stopped_ms": stats_json(&stats(nl), nl),
                       "floor_stopped_ms": stats_json(&stats(fs_), fs_),
                       "floor_removed_ms": stats_json(&stats(fr), fr)}),
            );
        }
        self.report
            .json
            .insert("termination".into(), Value::Object(j));
        self.report.table(
            "Termination (until no container of the pod runs and its sandbox is not ready), ms",
            &["pods", "what", "n", "p50", "p95", "min", "max"],
            rows,
        );
    }

    fn crash_restart(&mut self) {
        let n = self.opts.n;
        let names: Vec<String> = (0..n).map(|i| format!("crash{i}")).collect();
        for (i, name) in names.iter().enumerate() {
            // Exits spread 300 ms apart so each restart is measured on its own.
            let script = format!("sleep {:.1}; exit 1", 2.0 + 0.3 * i as f64);
            self.nl
                .write(name, &manifest(name, true, 0, &["sh", "-c", &script]));
        }
        let t0 = Instant::now();
        let _ = poll_until(self.rt, t0, Duration::from_secs(60 + n as u64), |l| {
            names
                .iter()
                .all(|nm| containers_of(l, nm).iter().any(|c| c.attempt >= 1))
        });
        let list = self.rt.list_containers().unwrap_or_default();
        let mut created = Vec::new();
        let mut started = Vec::new();
        for nm in &names {
            let cs = containers_of(&list, nm);
            let first = cs.iter().find(|c| c.attempt == 0);
            let second = cs.iter().find(|c| c.attempt == 1);
            let (Some(a), Some(b)) = (first, second) else {
                created.push(None);
                started.push(None);
                continue;
            };
            let (Ok(a), Ok(b)) = (
                self.rt.container_status(&a.id),
                self.rt.container_status(&b.id),
            ) else {
                created.push(None);
                started.push(None);
                continue;
            };
            let d = |t: i64| (t > 0 && a.finished_at > 0).then(|| (t - a.finished_at) as f64 / 1e6);
            created.push(d(b.created_at));
            started.push(d(b.started_at));
        }
        let _ = self.nanolet_delete(&names, Duration::from_secs(30));
        // The floor of the same path, one container at a time: where containerd's own time goes.
        let mut floor: [Samples; 3] = Default::default();
        for i in 0..n {
            match floor_crash(self.rt, self.ctd.tmp(), &format!("crash{i}"), 0.5) {
                Ok(ms) => {
                    for (k, v) in ms.into_iter().enumerate() {
                        floor[k].push((!v.is_nan()).then_some(v));
                    }
                }
                Err(e) => eprintln!("footprint: floor crash{i}: {e}"),
            }
        }
        let (sc, ss) = (stats(&created), stats(&started));
        let mut r1 = vec!["exit (finished_at) -> replacement created_at".to_string()];
        r1.extend(stat_cells(&sc));
        let mut r2 = vec!["exit (finished_at) -> replacement started_at".to_string()];
        r2.extend(stat_cells(&ss));
        let floor_rows = [
            "floor: exit (finished_at) -> the runtime's exit event received (task exit; CRI event on 2.x)",
            "floor: exit (finished_at) -> CRI ContainerStatus shows Exited (polled every 1 ms)",
            "floor: exit (finished_at) -> replacement created_at (CreateContainer at once)",
        ];
        let mut rows = vec![r1, r2];
        let mut floor_json = serde_json::Map::new();
        for (k, label) in floor_rows.iter().enumerate() {
            let st = stats(&floor[k]);
            let mut row = vec![label.to_string()];
            row.extend(stat_cells(&st));
            rows.push(row);
            floor_json.insert(format!("floor_{k}"), stats_json(&st, &floor[k]));
        }
        self.report.json.insert(
            "crash_restart".into(),
            json!({"to_created_ms": stats_json(&sc, &created), "to_started_ms": stats_json(&ss, &started), "floor": floor_json}),
        );
        self.report.table(
            "Crash to restart (first restart, immediate in the kubelet; CRI timestamps), ms",
            &["interval", "n", "p50", "p95", "min", "max"],
            rows,
        );
    }

    fn scale(&mut self) {
        let mut current = 0;
        let mut rows = Vec::new();
        let mut j = Vec::new();
        let counts = self.opts.counts.clone();
        for k in counts {
            let names: Vec<String> = (current..k).map(|i| format!("scale{i}")).collect();
            let all: Vec<String> = (0..k).map(|i| format!("scale{i}")).collect();
            let t0 = Instant::now();
            for nm in &names {
                self.nl.write(nm, &manifest(nm, true, 0, SLEEP));
            }
            let d = poll_until(self.rt, t0, Duration::from_secs(60 + 2 * k as u64), |l| {
                all.iter().all(|nm| {
                    containers_of(l, nm)
                        .iter()
                        .any(|c| c.state == ContainerState::Running)
                })
            });
            let secs = d.map(|d| d.as_secs_f64());
            rows.push(vec![
                format!("{current} -> {k}"),
                (k - current).to_string(),
                secs.map(|s| format!("{s:.2}"))
                    .unwrap_or_else(|| "n/a (timeout)".into()),
            ]);
            j.push(json!({"from": current, "to": k, "seconds": secs}));
            current = k;
            std::thread::sleep(Duration::from_secs(3));
            let fp = self.footprint(k);
            self.footprints.push(fp);
        }
        let all: Vec<String> = (0..current).map(|i| format!("scale{i}")).collect();
        if !bench_wrap().is_empty() {
            // Under a heap profiler: SIGKILL nanolet at the last count, so that what the
            // profile reports as never freed ("leaked") is the heap live with `current` pods
            // running (a clean exit would free it). The harness removes the pods.
            let pid = nix::unistd::Pid::from_raw(self.nl.pid());
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            println!(
                "footprint: NANOLET_BENCH_WRAP: nanolet (pid {pid}) killed with {current} pods \
                 running; its profile's leaked bytes are the live heap then"
            );
            self.report.table(
                "Pods at once (manifests written together -> all Running; hostNetwork), s",
                &["pods running", "added", "seconds"],
                rows,
            );
            return;
        }
        let del = self.nanolet_delete(&all, Duration::from_secs(120));
        rows.push(vec![
            format!("delete all {current}"),
            current.to_string(),
            del.map(|d| format!("{:.2}", d.as_secs_f64()))
                .unwrap_or_else(|| "n/a (timeout)".into()),
        ]);
        self.report.json.insert(
            "batch".into(),
            json!({"start": j, "delete_all_seconds": del.map(|d| d.as_secs_f64())}),
        );
        self.report.table(
            "Pods at once (manifests written together -> all Running; hostNetwork), s",
            &["pods running", "added", "seconds"],
            rows,
        );
    }

    /// `k` pods (the largest running-pod count) that each carry an exec liveness probe and an
    /// httpGet readiness probe against busybox httpd, period 10 s: memory, CPU and wake-ups
    /// over a window of at least 30 s (3 probe periods).
    fn probes(&mut self) {
        let k = self.opts.counts.iter().copied().max().unwrap_or(10);
        let names: Vec<String> = (0..k).map(|i| format!("probe{i}")).collect();
        let t0 = Instant::now();
        for (i, nm) in names.iter().enumerate() {
            let port = 20000 + i;
            let body = format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {nm}\nspec:\n  hostNetwork: true\n  \
                 terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: {BUSYBOX_IMAGE}\n    \
                 imagePullPolicy: Never\n    command: [sh, -c, 'mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p {port} -h /www']\n    \
                 livenessProbe:\n      exec:\n        command: [\"true\"]\n      periodSeconds: 10\n    \
                 readinessProbe:\n      httpGet:\n        path: /\n        port: {port}\n      periodSeconds: 10\n"
            );
            self.nl.write(nm, &body);
        }
        let d = poll_until(self.rt, t0, Duration::from_secs(60 + 2 * k as u64), |l| {
            names.iter().all(|nm| {
                containers_of(l, nm)
                    .iter()
                    .any(|c| c.state == ContainerState::Running)
            })
        });
        println!(
            "footprint: {k} pods with probes running after {:?}",
            d.map(|d| d.as_secs_f64())
        );
        std::thread::sleep(Duration::from_secs(12));
        let m0 = self.nl.metrics_at("/metrics/probes");
        let mut fp = self.footprint_window(k, self.opts.window.max(30));
        let m1 = self.nl.metrics_at("/metrics/probes");
        fp.probes = true;
        let runs: f64 = m1
            .iter()
            .filter(|(key, _)| key.starts_with("prober_probe_total{"))
            .map(|(key, v)| v - m0.get(key).unwrap_or(&0.0))
            .sum();
        let failed: f64 = m1
            .iter()
            .filter(|(key, _)| {
                key.starts_with("prober_probe_total{") && !key.contains("successful")
            })
            .map(|(key, v)| v - m0.get(key).unwrap_or(&0.0))
            .sum();
        let line = format!(
            "\n{k} pods with probes: {runs:.0} probe runs during the measurement ({failed:.0} not \
             successful). Probe runs are short-lived threads: their CPU is in utime+stime but not \
             in the live threads' schedstat sum, nor their wake-ups.\n"
        );
        print!("{line}");
        self.report.md.push_str(&line);
        self.report.json.insert(
            "probes".into(),
            json!({"pods": k, "probe_runs": runs, "not_successful": failed}),
        );
        self.footprints.push(fp);
        let _ = self.nanolet_delete(&names, Duration::from_secs(120));
    }

    /// Cold start: `k` manifests written at once with no pod running -> all Running; then all
    /// deleted (and gone) before the next `k`.
    fn cold_start(&mut self) {
        let mut sizes: Vec<usize> = if self.opts.quick {
            vec![1, 10]
        } else {
            vec![1, 10, 50, 100]
        };
        if let Ok(c) = std::env::var("NANOLET_BENCH_COLD") {
            sizes = c.split(',').filter_map(|s| s.trim().parse().ok()).collect();
        }
        let mut rows = Vec::new();
        let mut j = Vec::new();
        let mut dat = String::from("# pods seconds_to_all_running\n");
        for k in sizes {
            let names: Vec<String> = (0..k).map(|i| format!("cold{k}x{i}")).collect();
            let t0 = Instant::now();
            for nm in &names {
                self.nl.write(nm, &manifest(nm, true, 0, SLEEP));
            }
            let d = poll_until(self.rt, t0, Duration::from_secs(60 + 2 * k as u64), |l| {
                names.iter().all(|nm| {
                    containers_of(l, nm)
                        .iter()
                        .any(|c| c.state == ContainerState::Running)
                })
            });
            let secs = d.map(|d| d.as_secs_f64());
            let _ = self.nanolet_delete(&names, Duration::from_secs(120));
            std::thread::sleep(Duration::from_secs(2));
            // The raw floor for the same k pods at once: k threads issue the three calls
            // concurrently over one CRI connection; one poller waits for all Running.
            let (rt, tmp) = (self.rt, self.ctd.tmp());
            let t0 = Instant::now();
            let pods: Vec<Result<FloorPod, String>> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..k)
                    .map(|i| {
                        let name = format!("cold{k}f{i}");
                        s.spawn(move || floor_issue(rt, tmp, &name, SLEEP))
                    })
                    .collect();
                hs.into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Err("panicked".into())))
                    .collect()
            });
            let ids: Vec<String> = pods
                .iter()
                .filter_map(|p| p.as_ref().ok().map(|p| p.container.clone()))
                .collect();
            let fd = if ids.len() == k {
                poll_until(self.rt, t0, Duration::from_secs(60 + 2 * k as u64), |l| {
                    ids.iter().all(|id| {
                        l.iter()
                            .any(|c| &c.id == id && c.state == ContainerState::Running)
                    })
                })
            } else {
                for p in &pods {
                    if let Err(e) = p {
                        eprintln!("footprint: cold floor: {e}");
                    }
                }
                None
            };
            std::thread::scope(|s| {
                for p in pods.iter().flatten() {
                    s.spawn(move || floor_remove(rt, p));
                }
            });
            let fsecs = fd.map(|d| d.as_secs_f64());
            rows.push(vec![
                k.to_string(),
                secs.map(|s| format!("{s:.2}"))
                    .unwrap_or_else(|| "n/a (timeout)".into()),
                secs.map(|s| format!("{:.0}", s * 1000.0 / k as f64))
                    .unwrap_or_default(),
                fsecs
                    .map(|s| format!("{s:.2}"))
                    .unwrap_or_else(|| "n/a".into()),
                match (secs, fsecs) {
                    (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
                    _ => String::new(),
                },
            ]);
            if let Some(s) = secs {
                let _ = writeln!(dat, "{k} {s:.3}");
            }
            j.push(json!({"pods": k, "seconds": secs, "floor_seconds": fsecs}));
            std::thread::sleep(Duration::from_secs(2));
        }
        self.report.dat.insert("bench-cold".into(), dat);
        self.report.json.insert("cold_start".into(), json!(j));
        self.report.table(
            "Cold start (no pod running; k manifests written at once -> all Running; hostNetwork)",
            &[
                "pods",
                "seconds",
                "ms per pod",
                "raw CRI floor, k at once, s",
                "nanolet/floor",
            ],
            rows,
        );
    }

    fn footprint_tables(&mut self) {
        let w = self.opts.window;
        let mut mem = Vec::new();
        let mut cpu = Vec::new();
        let mut j = Vec::new();
        for fp in &self.footprints {
            let label = if fp.probes {
                format!("{} + probes", fp.pods)
            } else {
                fp.pods.to_string()
            };
            mem.push(vec![
                label.clone(),
                mmm(&fp.rss),
                mmm(&fp.pss),
                mmm(&fp.threads),
                mmm(&fp.ctd_rss),
                mmm(&fp.ctd_pss),
                fp.shims.to_string(),
                mmm(&fp.shim_rss),
                mmm(&fp.shim_pss),
            ]);
            let pct: Vec<Option<f64>> = fp
                .cpu_sched
                .iter()
                .map(|c| c.map(|c| c / 60.0 * 100.0))
                .collect();
            cpu.push(vec![
                label,
                mmm(&fp.cpu),
                mmm(&fp.cpu_sched),
                mmm(&pct),
                mmm(&fp.wakeups),
                mmm(&fp.relist_ms),
            ]);
            j.push(json!({
                "pods": fp.pods, "probes": fp.probes,
                "nanolet_rss_mib": fp.rss, "nanolet_pss_mib": fp.pss, "nanolet_threads": fp.threads,
                "containerd_rss_mib": fp.ctd_rss, "containerd_pss_mib": fp.ctd_pss,
                "shims": fp.shims, "shims_rss_mib": fp.shim_rss, "shims_pss_mib": fp.shim_pss,
                "nanolet_cpu_s_per_min_stat": fp.cpu, "nanolet_cpu_s_per_min_schedstat": fp.cpu_sched,
                "nanolet_wakeups_per_s": fp.wakeups, "pleg_relist_mean_ms": fp.relist_ms,
            }));
        }
        let mib = |k: u64| format!("{:.1}", k as f64 / 1024.0);
        let mut brk = Vec::new();
        for fp in &self.footprints {
            if let Some(b) = fp.breakdown {
                brk.push(vec![
                    if fp.probes {
                        format!("{} + probes", fp.pods)
                    } else {
                        fp.pods.to_string()
                    },
                    mib(b.binary),
                    mib(b.libs),
                    mib(b.heap),
                    format!("{} in {}", mib(b.arenas), b.arena_count),
                    format!("{} in {}", mib(b.anon), b.anon_count),
                ]);
            }
        }
        for (fp, j) in self.footprints.iter().zip(j.iter_mut()) {
            if let (Some(b), Some(o)) = (fp.breakdown, j.as_object_mut()) {
                o.insert(
                    "nanolet_rss_breakdown_kib".into(),
                    json!({"binary": b.binary, "libs": b.libs, "brk_heap": b.heap,
                           "other_arenas": b.arenas, "other_arena_count": b.arena_count,
                           "other_anon": b.anon, "other_anon_mappings": b.anon_count}),
                );
            }
        }
        let mut dat = String::from(
            "# pods rss_p50 rss_min rss_max pss_p50 cpu_pct_p50 cpu_pct_min cpu_pct_max wakeups_p50 threads\n",
        );
        for fp in self.footprints.iter().filter(|f| !f.probes) {
            let pct: Vec<Option<f64>> = fp
                .cpu_sched
                .iter()
                .map(|c| c.map(|c| c / 60.0 * 100.0))
                .collect();
            if let (Some(r), Some(p), Some(c), Some(wk), Some(t)) = (
                stats(&fp.rss),
                stats(&fp.pss),
                stats(&pct),
                stats(&fp.wakeups),
                stats(&fp.threads),
            ) {
                let _ = writeln!(
                    dat,
                    "{} {:.2} {:.2} {:.2} {:.2} {:.3} {:.3} {:.3} {:.1} {:.0}",
                    fp.pods, r.p50, r.min, r.max, p.p50, c.p50, c.min, c.max, wk.p50, t.p50
                );
            }
        }
        self.report.dat.insert("bench-footprint".into(), dat);
        self.report
            .json
            .insert("footprint".into(), json!({"window_s": w, "samples": j}));
        self.report.table(
            "Memory, MiB: median (min–max) of 3 samples",
            &[
                "pods",
                "nanolet RSS",
                "nanolet PSS",
                "nanolet threads",
                "containerd RSS",
                "containerd PSS",
                "shims",
                "shims RSS (sum)",
                "shims PSS (sum)",
            ],
            mem,
        );
        self.report.table(
            "Where nanolet's RSS is (/proc/PID/smaps, last sample), MiB",
            &[
                "pods",
                "binary",
                "shared libs",
                "brk heap (main arena)",
                "other malloc arenas (MiB in n)",
                "other anonymous: stacks, mmaps (MiB in n mappings)",
            ],
            brk,
        );
        self.report.table(
            &format!("nanolet CPU: median (min–max) of 3 windows of {} s", w / 3),
            &[
                "pods",
                "CPU s/min (utime+stime)",
                "CPU s/min (schedstat)",
                "% of one core",
                "wakeups/s (timeslices)",
                "PLEG relist mean, ms",
            ],
            cpu,
        );
    }
}

// ---------------------------------------------------------------------------------------------
// sync cost (in-process, fake runtime)

/// One PLEG relist pass (list sandboxes + containers, fingerprint, compare, report changed
/// pods to the sync loop) over nanolet's in-memory fake runtime holding `n` pods: the first pass
/// (every pod is new), passes with nothing changed, and passes after one container exited.
/// The fake has no gRPC cost, so this isolates nanolet's own work per pass; the real relist
/// against containerd is in the CPU table ("PLEG relist mean").
fn sync_sweep(report: &mut Report) {
    use nanolet::cri::fake::FakeRuntime;
    use nanolet::cri::{LABEL_MANAGED_BY, LABEL_POD_UID};
    use nanolet::pleg::Pleg;
    use nanolet::status::StatusStore;
    use std::sync::Arc;

    let mut rows = Vec::new();
    let mut j = Vec::new();
    let mut dat = String::from("# pods first_us steady_p50_us one_change_p50_us\n");
    for n in [1usize, 100, 250] {
        let fake = Arc::new(FakeRuntime::new());
        fake.add_image(BUSYBOX_IMAGE);
        let mut containers = Vec::new();
        for i in 0..n {
            let mut labels = BTreeMap::new();
            labels.insert(LABEL_MANAGED_BY.to_string(), "nanolet".to_string());
            labels.insert(LABEL_POD_UID.to_string(), format!("uid-{i}"));
            labels.insert(LABEL_POD_NAME.to_string(), format!("pod{i}-{NODE}"));
            let sb = PodSandboxConfig {
                name: format!("pod{i}-{NODE}"),
                namespace: "default".into(),
                uid: format!("uid-{i}"),
                labels: labels.clone(),
                ..Default::default()
            };
            let cc = ContainerConfig {
                name: "c".into(),
                image: BUSYBOX_IMAGE.into(),
                labels,
                ..Default::default()
            };
            let id = fake
                .run_pod_sandbox(&sb)
                .and_then(|sid| fake.create_container(&sid, &cc, &sb))
                .and_then(|cid| fake.start_container(&cid).map(|()| cid));
            match id {
                Ok(cid) => containers.push(cid),
                Err(e) => eprintln!("footprint: sync sweep: fake runtime: {e}"),
            }
        }
        let store = Arc::new(StatusStore::new(Duration::from_secs(60)));
        let (tx, rx) = std::sync::mpsc::channel();
        let rt: Arc<dyn Runtime> = fake.clone();
        let mut pleg = Pleg::new(rt, store, Box::new(move |event| tx.send(event).is_ok()));
        let time = |pleg: &mut Pleg| {
            let t0 = Instant::now();
            pleg.relist();
            t0.elapsed().as_secs_f64() * 1e6
        };
        let first = time(&mut pleg);
        let steady: Vec<Option<f64>> = (0..50).map(|_| Some(time(&mut pleg))).collect();
        let mut one = Vec::new();
        for cid in containers.iter().take(50) {
            fake.exit_container(cid, 1);
            one.push(Some(time(&mut pleg)));
        }
        let msgs = rx.try_iter().count();
        let (ss, so) = (stats(&steady), stats(&one));
        let p50 = |s: &Option<Stats>| s.as_ref().map(|s| s.p50);
        rows.push(vec![
            n.to_string(),
            f1(first),
            p50(&ss).map(f1).unwrap_or_else(|| "n/a".into()),
            p50(&so).map(f1).unwrap_or_else(|| "n/a".into()),
            msgs.to_string(),
        ]);
        let _ = writeln!(
            dat,
            "{n} {first:.1} {:.1} {:.1}",
            p50(&ss).unwrap_or(0.0),
            p50(&so).unwrap_or(0.0)
        );
        j.push(json!({"pods": n, "first_pass_us": first,
                      "steady_us": stats_json(&ss, &steady), "one_change_us": stats_json(&so, &one),
                      "messages_to_sync_loop": msgs}));
    }
    report.dat.insert("bench-sync".into(), dat);
    report.json.insert("sync_sweep".into(), json!(j));
    report.table(
        "Sync cost: one PLEG relist pass over the in-memory fake runtime (nanolet's own work, no gRPC), µs",
        &[
            "pods",
            "first pass (all pods new)",
            "pass, nothing changed (p50 of 50)",
            "pass, one container exited (p50 of min(50, pods))",
            "messages to the sync loop",
        ],
        rows,
    );
}

// ---------------------------------------------------------------------------------------------
// log rotation under load

/// How far past containerLogMaxSize a container log runs, as a function of the write rate
/// (issue 17): a nanolet with containerLogMaxSize 1Mi and containerLogMaxFiles 3, one pod per
/// rate writing `yes` lines in bursts every 0.1 s (the last one without pause), the log
/// directory sampled every 2 ms. Rate is the growth of the CRI log files (about 2.7 times the
/// text written: each 17-byte line gets a timestamp, stream and tag).
fn log_rotation(report: &mut Report, ctd: &Containerd, bin: &Path, opts: &Opts) {
    const LIMIT: u64 = 1 << 20;
    let nl = NanoletProc::start_in(
        ctd,
        bin,
        "nanolet-logs",
        &[
            "--container-log-max-size=1Mi",
            "--container-log-max-files=3",
        ],
    );
    let logs = ctd.tmp().join("nanolet-logs/log/pods");
    let window = Duration::from_secs(if opts.quick { 8 } else { 20 });
    // Lines of 17 bytes per 0.1 s burst; 0 = no pause.
    let bursts: &[u64] = &[600, 6_000, 30_000, 0];
    let mut rows = Vec::new();
    let mut j = Vec::new();
    for (i, lines) in bursts.iter().enumerate() {
        let name = format!("logs{i}");
        let script = if *lines == 0 {
            "yes 0123456789abcdef".to_string()
        } else {
            format!("while true; do yes 0123456789abcdef | head -n {lines}; sleep 0.1; done")
        };
        nl.write(&name, &manifest(&name, true, 0, &["sh", "-c", &script]));
        // The container's log directory: <ns>_<pod>_<uid>/c.
        let dir = support::wait_for(TIMEOUT, || {
            fs::read_dir(&logs)
                .ok()?
                .flatten()
                .find(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("default_{}_", full_name(&name)))
                })
                .map(|e| e.path().join("c"))
                .filter(|d| d.join("0.log").exists())
        });
        let Some(dir) = dir else {
            rows.push(vec![
                name.clone(),
                "n/a".into(),
                "".into(),
                "".into(),
                "".into(),
                "".into(),
                "".into(),
            ]);
            nl.remove(&name);
            continue;
        };
        use std::os::unix::fs::MetadataExt;
        // inode -> (size when first seen, largest size seen, name). A freed inode number is
        // soon reused by the next 0.log: a rotated name turning into 0.log, or a size going
        // down, starts a new file.
        let mut seen: BTreeMap<u64, (u64, u64, String)> = BTreeMap::new();
        let mut done: Vec<(u64, u64)> = Vec::new();
        let mut most_files = 0;
        let cpu0 = cpu_of(nl.pid());
        let t0 = Instant::now();
        while t0.elapsed() < window {
            let mut stems = std::collections::BTreeSet::new();
            for e in fs::read_dir(&dir).into_iter().flatten().flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.starts_with('.') {
                    continue;
                }
                // A compression in progress briefly shows f and f.gz: one rotation.
                stems.insert(n.trim_end_matches(".gz").to_string());
                if n.ends_with(".gz") {
                    continue;
                }
                if let Ok(m) = e.metadata() {
                    let v = seen
                        .entry(m.ino())
                        .or_insert((m.size(), m.size(), n.clone()));
                    if m.size() < v.1 || (n == "0.log" && v.2 != "0.log") {
                        done.push((v.0, v.1));
                        *v = (m.size(), m.size(), n.clone());
                    }
                    v.1 = v.1.max(m.size());
                    v.2 = n;
                }
            }
            most_files = most_files.max(stems.len());
            std::thread::sleep(Duration::from_millis(2));
        }
        done.extend(seen.values().map(|v| (v.0, v.1)));
        let secs = t0.elapsed().as_secs_f64();
        let cpu = (cpu_of(nl.pid()) - cpu0) / secs * 100.0;
        nl.remove(&name);
        let written: u64 = done.iter().map(|(a, b)| b - a).sum();
        let largest = done.iter().map(|v| v.1).max().unwrap_or(0);
        let rate = written as f64 / secs;
        let over = largest.saturating_sub(LIMIT);
        let over_ms = if rate > 0.0 {
            over as f64 / rate * 1000.0
        } else {
            0.0
        };
        rows.push(vec![
            if *lines == 0 {
                "no pause".into()
            } else {
                format!("{lines} lines / 0.1 s")
            },
            f1(rate / 1e6),
            f1(largest as f64 / 1048576.0),
            format!("{}", over / 1024),
            f1(over_ms),
            format!("{most_files}"),
            f1(cpu),
        ]);
        j.push(
            json!({"burst_lines": lines, "rate_bytes_per_s": rate, "largest_bytes": largest,
            "over_limit_bytes": over, "over_limit_ms_of_writes": over_ms, "most_files": most_files,
            "nanolet_cpu_percent": cpu}),
        );
        // Wait for the container to go before the next rate.
        let _ = support::wait_for(TIMEOUT, || {
            (!dir.join("0.log").exists()
                || fs::read_dir(&logs)
                    .ok()?
                    .flatten()
                    .all(|e| !e.file_name().to_string_lossy().contains(&full_name(&name))))
            .then_some(())
        });
    }
    let log = fs::read_to_string(ctd.tmp().join("nanolet-logs/nanolet.log")).unwrap_or_default();
    let rotations = log.matches("rotated container log").count();
    println!("footprint: nanolet logged {rotations} rotations");
    if std::env::var_os("NANOLET_BENCH_VERBOSE").is_some() {
        for l in log
            .lines()
            .filter(|l| l.contains("rotat") || l.contains("WARN"))
        {
            println!("  {l}");
        }
    }
    report.json.insert("log_rotation".into(), json!(j));
    report.table(
        "Log rotation under a writing container (containerLogMaxSize 1Mi, containerLogMaxFiles 3; CRI file growth)",
        &["writer", "MB/s", "largest file, MiB", "over the limit, KiB", "over / rate, ms", "most files", "nanolet CPU %"],
        rows,
    );
    drop(nl);
}

// ---------------------------------------------------------------------------------------------
// The kubelet as a peer (issue 30): the same measurements on nanolet and on the real kubelet
// (standalone, static pods; `support::kubelet`), one after the other, on this run's containerd
// with the same manifests.

/// What the peer table needs of an agent: its process, its manifest directory and its
/// Prometheus text metrics.
trait Agent {
    fn pid(&self) -> i32;
    fn write(&self, name: &str, body: &str);
    fn remove(&self, name: &str);
    fn metrics(&self) -> BTreeMap<String, f64>;
}

/// Prometheus text -> series -> value.
fn parse_metrics(body: &str) -> BTreeMap<String, f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
}

impl Agent for NanoletProc {
    fn pid(&self) -> i32 {
        NanoletProc::pid(self)
    }
    fn write(&self, name: &str, body: &str) {
        NanoletProc::write(self, name, body)
    }
    fn remove(&self, name: &str) {
        NanoletProc::remove(self, name)
    }
    fn metrics(&self) -> BTreeMap<String, f64> {
        NanoletProc::metrics(self)
    }
}

impl Agent for support::kubelet::Kubelet {
    fn pid(&self) -> i32 {
        support::kubelet::Kubelet::pid(self)
    }
    fn write(&self, name: &str, body: &str) {
        write_manifest(&self.manifests, name, body);
    }
    fn remove(&self, name: &str) {
        let _ = fs::remove_file(self.manifests.join(format!("{name}.yaml")));
    }
    fn metrics(&self) -> BTreeMap<String, f64> {
        parse_metrics(&self.get("/metrics").unwrap_or_default())
    }
}

/// One agent's figures in the peer table.
#[derive(Default)]
struct PeerFigures {
    start_ms: Samples,
    cri_calls_per_start: Option<f64>,
    /// The same calls by `operation_type` (the CRI verb), per pod start.
    cri_calls_by_verb: BTreeMap<String, f64>,
    batch_ms: Option<f64>,
    crash_ms: Samples,
    idle_cpu_pct: Option<f64>,
    idle_rss_kib: Option<u64>,
}

/// All containers of `names` running.
fn all_running(l: &[ContainerInfo], names: &[String]) -> bool {
    names.iter().all(|nm| {
        containers_of(l, nm)
            .iter()
            .any(|c| c.state == ContainerState::Running)
    })
}

/// The measurements on one agent: pod start one at a time (and the CRI calls it took), a
/// batch written at once, idle CPU and VmRSS with `idle_pods` running, crash -> restart; every
/// pod is deleted at the end.
fn measure_agent(
    a: &dyn Agent,
    rt: &CriRuntime,
    opts: &Opts,
    batch: usize,
    idle_pods: usize,
) -> PeerFigures {
    let mut f = PeerFigures::default();
    let mut names: Vec<String> = Vec::new();
    let m0 = a.metrics();
    for i in 0..opts.n {
        let name = format!("peer-start{i}");
        let t0 = Instant::now();
        a.write(&name, &manifest(&name, true, 0, SLEEP));
        let one = [name.clone()];
        f.start_ms
            .push(ms(poll_until(rt, t0, TIMEOUT, |l| all_running(l, &one))));
        names.push(name);
    }
    let m1 = a.metrics();
    if !m1.is_empty() && opts.n > 0 {
        let per_start = |d: f64| d / opts.n as f64;
        f.cri_calls_by_verb = cri_calls_by_verb(&m0, &m1)
            .into_iter()
            .map(|(verb, d)| (verb, per_start(d)))
            .collect();
        f.cri_calls_per_start = Some(f.cri_calls_by_verb.values().sum());
    }
    let wave: Vec<String> = (0..batch).map(|i| format!("peer-batch{i}")).collect();
    let t0 = Instant::now();
    for nm in &wave {
        a.write(nm, &manifest(nm, true, 0, SLEEP));
    }
    f.batch_ms = ms(poll_until(
        rt,
        t0,
        Duration::from_secs(60 + 2 * batch as u64),
        |l| all_running(l, &wave),
    ));
    names.extend(wave);
    let extra: Vec<String> = (names.len()..idle_pods)
        .map(|i| format!("peer-idle{i}"))
        .collect();
    for nm in &extra {
        a.write(nm, &manifest(nm, true, 0, SLEEP));
    }
    names.extend(extra);
    let settled = poll_until(
        rt,
        Instant::now(),
        Duration::from_secs(60 + 2 * idle_pods as u64),
        |l| all_running(l, &names),
    );
    if settled.is_some() {
        // Settle (the start-up work done), then one window.
        std::thread::sleep(Duration::from_secs(5));
        let c0 = cpu_of(a.pid());
        let t0 = Instant::now();
        std::thread::sleep(Duration::from_secs(opts.window));
        f.idle_cpu_pct = Some((cpu_of(a.pid()) - c0) / t0.elapsed().as_secs_f64() * 100.0);
        f.idle_rss_kib = Some(mem_of(a.pid()).0);
    }
    for nm in &names {
        a.remove(nm);
    }
    let crash: Vec<String> = (0..opts.n).map(|i| format!("peer-crash{i}")).collect();
    for (i, nm) in crash.iter().enumerate() {
        let script = format!("sleep {:.1}; exit 1", 2.0 + 0.3 * i as f64);
        a.write(nm, &manifest(nm, true, 0, &["sh", "-c", &script]));
    }
    let _ = poll_until(
        rt,
        Instant::now(),
        Duration::from_secs(60 + opts.n as u64),
        |l| {
            crash
                .iter()
                .all(|nm| containers_of(l, nm).iter().any(|c| c.attempt >= 1))
        },
    );
    let list = rt.list_containers().unwrap_or_default();
    for nm in &crash {
        let cs = containers_of(&list, nm);
        let pair = (
            cs.iter().find(|c| c.attempt == 0),
            cs.iter().find(|c| c.attempt == 1),
        );
        let d = match pair {
            (Some(x), Some(y)) => match (rt.container_status(&x.id), rt.container_status(&y.id)) {
                (Ok(x), Ok(y)) if x.finished_at > 0 && y.started_at > 0 => {
                    Some((y.started_at - x.finished_at) as f64 / 1e6)
                }
                _ => None,
            },
            _ => None,
        };
        f.crash_ms.push(d);
        a.remove(nm);
    }
    names.extend(crash);
    // Gone: no sandbox of these pods ready.
    let fulls: Vec<String> = names.iter().map(|n| full_name(n)).collect();
    let _ = support::wait_for(Duration::from_secs(120), || {
        rt.list_pod_sandboxes()
            .ok()
            .filter(|s| {
                !s.iter().any(|sb| {
                    fulls.contains(&sb.name) && sb.state == nanolet::cri::SandboxState::Ready
                })
            })
            .map(|_| ())
    });
    f
}

/// `NANOLET_BENCH_KEEP_LOGS=DIR`: an agent's log copied to DIR/NAME before the run's temporary
/// directory goes (`RUST_LOG` sets nanolet's level), to read what a figure came from.
fn keep_log(log: &Path, name: &str) {
    let Some(dir) = std::env::var_os("NANOLET_BENCH_KEEP_LOGS") else {
        return;
    };
    let to = Path::new(&dir).join(name);
    match fs::create_dir_all(&dir).and_then(|()| fs::copy(log, &to)) {
        Ok(_) => println!("footprint: kept {}", to.display()),
        Err(e) => println!("footprint: cannot keep {}: {e}", log.display()),
    }
}

fn kubelet_peer(report: &mut Report, ctd: &Containerd, bin: &Path, opts: &Opts) {
    let rt = ctd.runtime();
    let batch = if opts.quick { 10 } else { 50 };
    let idle_pods = if opts.quick { 10 } else { 100 }.max(batch + opts.n);
    support::kubelet::remove_all_pods(&rt);
    let nl = NanoletProc::start_in(ctd, bin, "peer-nanolet", &[]);
    let n_fig = measure_agent(&nl, &rt, opts, batch, idle_pods);
    drop(nl);
    keep_log(
        &ctd.tmp().join("peer-nanolet/nanolet.log"),
        "peer-nanolet.log",
    );
    support::kubelet::remove_all_pods(&rt);
    let kubelet_bin = support::kubelet::binary();
    let version = Command::new(&kubelet_bin)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let dir = ctd.tmp().join("peer-kubelet");
    let k = support::kubelet::Kubelet::start(
        ctd,
        &kubelet_bin,
        &dir,
        NODE,
        support::kubelet::Tunables::OwnNamespace,
    );
    let k_fig = measure_agent(&k, &rt, opts, batch, idle_pods);
    drop(k);
    keep_log(&dir.join("kubelet.log"), "peer-kubelet.log");
    support::kubelet::remove_all_pods(&rt);

    let p50 = |v: &Samples| stats(v).map(|s| s.p50);
    let cell = |v: Option<f64>| v.map(f1).unwrap_or_else(|| "n/a".into());
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "n/a".into(),
    };
    let kib = |v: Option<u64>| v.map(|x| x as f64 / 1024.0);
    // (label, its short name in results/bench-kubelet.dat, nanolet, kubelet)
    let rows_data: [(String, &str, Option<f64>, Option<f64>); 6] = [
        (
            format!(
                "single pod start, p50 of {} (manifest -> Running in CRI), ms",
                opts.n
            ),
            "start",
            p50(&n_fig.start_ms),
            p50(&k_fig.start_ms),
        ),
        (
            format!("{batch} pods written at once -> all Running, ms"),
            "batch",
            n_fig.batch_ms,
            k_fig.batch_ms,
        ),
        (
            format!(
                "crash -> restart (exit -> replacement started), p50 of {}, ms",
                opts.n
            ),
            "crash->restart",
            p50(&n_fig.crash_ms),
            p50(&k_fig.crash_ms),
        ),
        (
            format!(
                "idle CPU with {idle_pods} pods, % of one core over {} s",
                opts.window
            ),
            "idle CPU",
            n_fig.idle_cpu_pct,
            k_fig.idle_cpu_pct,
        ),
        (
            format!("VmRSS with {idle_pods} pods, MiB"),
            "VmRSS",
            kib(n_fig.idle_rss_kib),
            kib(k_fig.idle_rss_kib),
        ),
        (
            "CRI calls per pod start (kubelet_runtime_operations_total, all verbs)".into(),
            "CRI calls/start",
            n_fig.cri_calls_per_start,
            k_fig.cri_calls_per_start,
        ),
    ];
    let mut rows = Vec::new();
    let mut j = serde_json::Map::new();
    // results/bench-kubelet.dat (scripts/bench-charts.gp: bench-kubelet.png, the ratios).
    let mut dat = String::from("# measure nanolet kubelet nanolet/kubelet\n");
    for (label, short, n, k) in &rows_data {
        rows.push(vec![label.clone(), cell(*n), cell(*k), ratio(*n, *k)]);
        j.insert(label.clone(), json!({"nanolet": n, "kubelet": k}));
        if let (Some(n), Some(k)) = (n, k) {
            if *k > 0.0 {
                let _ = writeln!(dat, "\"{short}\" {n:.3} {k:.3} {:.3}", n / k);
            }
        }
    }
    report.dat.insert("bench-kubelet".into(), dat);
    j.insert("kubelet_version".into(), json!(version));
    // Each pod's crash -> restart, in the order the pods crashed (pod i exits 2 + 0.3 i s after
    // it starts): a p50 hides whether the late ones or all of them were slow.
    let samples = |v: &Samples| -> Vec<String> { v.iter().map(|x| cell(*x)).collect() };
    j.insert(
        "crash_restart_samples_ms".into(),
        json!({"nanolet": n_fig.crash_ms, "kubelet": k_fig.crash_ms}),
    );
    let mut verbs: Vec<&String> = n_fig
        .cri_calls_by_verb
        .keys()
        .chain(k_fig.cri_calls_by_verb.keys())
        .collect();
    verbs.sort();
    verbs.dedup();
    let by = |f: &PeerFigures, v: &str| f.cri_calls_by_verb.get(v).copied().unwrap_or(0.0);
    let lines: Vec<String> = verbs
        .iter()
        .map(|v| format!("{v} {:.1}/{:.1}", by(&n_fig, v), by(&k_fig, v)))
        .collect();
    println!(
        "CRI calls per pod start by verb, nanolet/kubelet: {}",
        lines.join(", ")
    );
    println!(
        "crash -> restart per pod, ms: nanolet [{}]; kubelet [{}]",
        samples(&n_fig.crash_ms).join(", "),
        samples(&k_fig.crash_ms).join(", ")
    );
    report.json.insert("kubelet_peer".into(), Value::Object(j));
    report.table(
        &format!(
            "nanolet beside the kubelet ({version}, standalone, static pods; same containerd, same manifests, one after the other)"
        ),
        &["measure", "nanolet", "kubelet", "nanolet/kubelet"],
        rows,
    );
}
