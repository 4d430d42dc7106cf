//! Soak: many pods with probes every second for a long time, against a real containerd. nanolet's
//! RSS, open file descriptors and threads are sampled over time and must stay flat, and no
//! probe period may be missed by more than one period.
//!
//! CI runs a short version (20 pods, 60 s). The full run of the issue (100 pods, 10 minutes):
//!
//! ```text
//! NANOLET_SOAK_PODS=100 NANOLET_SOAK_SECS=600 scripts/test soak:: -- --nocapture
//! ```
//!
//! Half the pods carry an exec readiness probe, half an httpGet readiness probe (busybox httpd),
//! all with `periodSeconds: 1` (`NANOLET_SOAK_EXEC_EVERY=N`: every Nth pod exec, the rest
//! httpGet; 0: no exec probes). Besides nanolet's own figures it prints the CPU time containerd
//! and its shims (with the runc processes they reaped: exec probes cost a `runc exec` each)
//! spent in the window.

use nanolet_test_support as support;

use std::time::{Duration, Instant};

use support::agent::Nanolet;
use support::{Containerd, wait_for};

fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pod(i: u64, exec_every: u64) -> String {
    let probe = if exec_every != 0 && i % exec_every == 0 {
        "    readinessProbe:\n      exec: {command: [cat, /etc/hostname]}\n      periodSeconds: 1\n"
            .to_string()
    } else {
        "    readinessProbe:\n      httpGet: {path: /, port: 8080}\n      periodSeconds: 1\n"
            .to_string()
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: soak{i}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www']\n{probe}"
    )
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Duration,
    rss_kb: u64,
    fds: u64,
    threads: u64,
    probes: u64,
}

fn status_field(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key)?.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// `prober_probe_total` summed per pod.
fn probes_by_pod(n: &Nanolet) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for l in n.get("/metrics/probes").unwrap_or_default().lines() {
        if !l.starts_with("prober_probe_total{") {
            continue;
        }
        let pod = l
            .split("pod=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or_default()
            .to_string();
        let v = l
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0) as u64;
        *out.entry(pod).or_insert(0) += v;
    }
    out
}

/// utime + stime (+ reaped children's) in clock ticks of `pid`, from /proc/PID/stat.
fn cpu_ticks(pid: u32, children: bool) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may contain spaces) start at field 3 (state).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // utime, stime, cutime, cstime are fields 14-17 (1-based): index 11-14 here.
    let own = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    let reaped = f.get(13).copied().unwrap_or(0) + f.get(14).copied().unwrap_or(0);
    own + if children { reaped } else { 0 }
}

/// CPU ticks of this test's containerd and its shims (their command lines name its socket or
/// state directory), including the runc processes they reaped.
fn runtime_ticks(ctd: &Containerd) -> u64 {
    let tag = ctd.tmp().display().to_string();
    let mut total = 0;
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd);
        let argv0 = cmd.split('\0').next().unwrap_or_default();
        let exe = argv0.rsplit('/').next().unwrap_or_default();
        if cmd.contains(&tag) && exe.starts_with("containerd") {
            total += cpu_ticks(pid, true);
        }
    }
    total
}

fn probe_total(n: &Nanolet) -> u64 {
    probes_by_pod(n).values().sum()
}

fn sample(n: &Nanolet, pid: u32, start: Instant) -> Sample {
    Sample {
        at: start.elapsed(),
        rss_kb: status_field(pid, "VmRSS:"),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count() as u64)
            .unwrap_or(0),
        threads: status_field(pid, "Threads:"),
        probes: probe_total(n),
    }
}

#[test]
fn many_pods_with_probes_every_second_stay_flat() {
    // Alone: the probe periods and the CPU figures are the whole machine's (it ran in a process
    // of its own, after the other test files, before the tests became one binary).
    let _alone = support::exclusive();
    let pods = env_u64("NANOLET_SOAK_PODS", 20);
    let secs = env_u64("NANOLET_SOAK_SECS", 60);
    let exec_every = env_u64("NANOLET_SOAK_EXEC_EVERY", 2);
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    for i in 0..pods {
        n.write(&format!("soak{i}.yaml"), &pod(i, exec_every));
    }
    // All Ready (their probes pass), then a minute of warm-up is not needed: the prober's
    // threads are per run, so the steady state starts at once.
    wait_for(Duration::from_secs(60 + pods * 2), || {
        let list = n.pods();
        (list.len() as u64 == pods
            && list.iter().all(|p| {
                p["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
            }))
        .then_some(())
    })
    .unwrap_or_else(|| panic!("pods never all Ready\n{}", n.log_tail()));
    let pid = n.child.as_ref().expect("running").id();
    let start = Instant::now();
    let per_pod_start = probes_by_pod(&n);
    let (nanolet_cpu0, runtime_cpu0) = (cpu_ticks(pid, true), runtime_ticks(&ctd));
    let mut samples = vec![sample(&n, pid, start)];
    let step = Duration::from_secs((secs / 12).max(5));
    while start.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(step);
        samples.push(sample(&n, pid, start));
    }
    println!("\n| t (s) | RSS (KiB) | fds | threads | probes run |");
    println!("|---:|---:|---:|---:|---:|");
    for s in &samples {
        println!(
            "| {} | {} | {} | {} | {} |",
            s.at.as_secs(),
            s.rss_kb,
            s.fds,
            s.threads,
            s.probes
        );
    }
    let first = samples[0];
    let last = *samples.last().expect("samples");
    let half = samples.len() / 2;
    let max = |f: fn(&Sample) -> u64, xs: &[Sample]| xs.iter().map(f).max().unwrap_or(0);
    // Probes: "no probe period missed by more than one period": every pod's probe ran at
    // least once per two periods. The overall rate is printed (on an idle machine ~100 %).
    let elapsed = (last.at - first.at).as_secs_f64();
    let ran = last.probes - first.probes;
    println!(
        "probe runs: {ran} in {elapsed:.0} s for {pods} pods at a 1 s period ({:.1} % of one per period)",
        100.0 * ran as f64 / (elapsed * pods as f64)
    );
    // Clock ticks are 1/100 s on Linux (USER_HZ).
    let (nanolet_cpu, runtime_cpu) = (
        (cpu_ticks(pid, true) - nanolet_cpu0) as f64 / 100.0,
        runtime_ticks(&ctd).saturating_sub(runtime_cpu0) as f64 / 100.0,
    );
    println!(
        "CPU in the window: nanolet {nanolet_cpu:.1} s ({:.1} % of one core), containerd + shims + runc {runtime_cpu:.1} s ({:.1} %); load average now: {}",
        100.0 * nanolet_cpu / elapsed,
        100.0 * runtime_cpu / elapsed,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let per_pod_end = probes_by_pod(&n);
    for (pod, end) in &per_pod_end {
        let runs = end - per_pod_start.get(pod).copied().unwrap_or(0);
        let floor = ((elapsed / 2.0).floor() as u64).saturating_sub(1);
        assert!(
            runs >= floor,
            "{pod}: {runs} probe runs in {elapsed:.0} s: a gap of more than two periods"
        );
    }
    // Flat: the second half's median never exceeds the first half's peak by more than noise.
    // Threads and fds include the probe runs in flight at the sampling instant (one short-lived
    // thread, and for httpGet one socket, per run), which a load spike raises for a moment; a
    // leak raises the level for good, so the median of the second half is what is compared.
    let (a, b) = samples.split_at(half);
    let median = |f: fn(&Sample) -> u64, xs: &[Sample]| {
        let mut v: Vec<u64> = xs.iter().map(f).collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    };
    assert!(
        median(|s| s.threads, b) <= max(|s| s.threads, a) + 4,
        "threads grow: {samples:?}"
    );
    assert!(
        median(|s| s.fds, b) <= max(|s| s.fds, a) + 4,
        "fds grow: {samples:?}"
    );
    assert!(
        max(|s| s.rss_kb, b) <= max(|s| s.rss_kb, a) + max(|s| s.rss_kb, a) / 10 + 1024,
        "RSS grows: {samples:?}"
    );
}
