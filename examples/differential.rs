//! The engine of `scripts/differential` (docs/testing.md, "The kubelet as the oracle"): runs the
//! same static-pod manifests under the real kubelet (`scripts/upstream path kubelet`) and then
//! under nanolet, one after the other, against one private containerd of the test harness
//! (`nanolet_test_support::Containerd`: the harness's configuration and test images), records
//! what each one produced, and compares it field by field.
//!
//! Recorded per pod, after both agents had the same time to run the pods:
//! - `status.*`, `spec.*`, `metadata.*`: the pod as the agent's `/pods` reports it;
//! - `cri.sandbox.*`, `cri.container[NAME].*`: what reached the runtime, read back through CRI
//!   (`PodSandboxStatus`/`ContainerStatus` verbose: containerd's copy of the CRI config it got
//!   and the OCI spec it made from it), plus the log path;
//! - `files[NAME].*`: what the running container sees (resolv.conf, hosts, hostname, `id`, and
//!   every file below its volume mounts with mode, type, size and small contents), through CRI
//!   ExecSync;
//! - `cgroup.*`: the pod's and the containers' cgroup values (cgroup v1 or v2).
//!
//! Normalised only where the two runs must differ: times (RFC 3339 values), 64-hex runtime IDs,
//! pod UIDs, pod IPs, PIDs, the agent's own directory, the kubelet's private cgroup root and the
//! projected volumes' timestamped directories. A difference is "documented" when its
//! `POD/FIELD` matches a pattern of `docs/kubelet-differences.list`; the exit code is 1 when
//! any is not. Not part of nanolet.
//!
//! `--timeline ci|full` records behaviour over time instead (crash-loop back-off, liveness
//! restarts, a manifest edit and deletion, a containerd restart): `differential/timeline.rs`.
//!
//! Usage: `differential MANIFEST_DIR [--observe SECS] [--out DIR] [--only kubelet|nanolet]`,
//! `differential --timeline ci|full [--out DIR] [--only kubelet|nanolet]`
//! (the kubelet binary: `$KUBELET` or `scripts/upstream path kubelet`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nanolet::cri::Runtime;
use nanolet::cri::client::CriRuntime;
use nanolet_test_support::agent::Nanolet;
use nanolet_test_support::kubelet::{
    Kubelet, Tunables, cgroup_root as kubelet_cgroup_root, hierarchies, remove_all_pods,
    remove_cgroup_tree,
};
use nanolet_test_support::{Containerd, repo_root, wait_for};
use serde_json::Value;

#[path = "differential/timeline.rs"]
mod timeline;

/// The node name both agents run as (lowercase: the kubelet lowercases `--hostname-override`).
const NODE: &str = "diffnode";

type Fields = BTreeMap<String, String>;
/// Pod key (`namespace/name`) -> field -> value.
type Record = BTreeMap<String, Fields>;

struct Args {
    manifests: PathBuf,
    observe: Duration,
    out: Option<PathBuf>,
    only: Option<String>,
    /// `--timeline ci|full`: the scenarios over time instead of the manifests.
    timeline: Option<timeline::Plan>,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        manifests: PathBuf::new(),
        observe: Duration::from_secs(45),
        out: None,
        only: None,
        timeline: None,
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--observe" => {
                let v = it.next().ok_or("--observe needs seconds")?;
                a.observe = Duration::from_secs(v.parse().map_err(|_| "--observe: seconds")?);
            }
            "--out" => a.out = Some(it.next().ok_or("--out needs a directory")?.into()),
            "--only" => a.only = Some(it.next().ok_or("--only needs kubelet|nanolet")?),
            "--timeline" => {
                let v = it.next().ok_or("--timeline needs ci|full")?;
                a.timeline = Some(timeline::Plan::parse(&v).ok_or("--timeline: ci or full")?);
            }
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            s => a.manifests = PathBuf::from(s),
        }
    }
    if a.manifests.as_os_str().is_empty() && a.timeline.is_none() {
        return Err("usage: differential MANIFEST_DIR [--observe SECS] [--out DIR]".into());
    }
    Ok(a)
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("differential: {e}");
            std::process::exit(2);
        }
    };
    let manifests: Vec<PathBuf> = if args.timeline.is_some() {
        Vec::new()
    } else {
        let mut v: Vec<PathBuf> = fs::read_dir(&args.manifests)
            .unwrap_or_else(|e| panic!("{}: {e}", args.manifests.display()))
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.extension()
                    .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
            })
            .collect();
        v.sort();
        v
    };
    let kubelet = std::env::var_os("KUBELET")
        .map(PathBuf::from)
        .unwrap_or_else(|| nanolet_test_support::runtime::upstream_path("kubelet").join("kubelet"));
    let mut ctd = Containerd::start();
    let started = Instant::now();
    let mut records: BTreeMap<&str, Record> = BTreeMap::new();
    for side in ["kubelet", "nanolet"] {
        if args.only.as_deref().is_some_and(|o| o != side) {
            continue;
        }
        let t = Instant::now();
        let rec = match args.timeline {
            Some(plan) => timeline::run_side(&mut ctd, side, &kubelet, plan),
            None => run_side(&ctd, side, &kubelet, &manifests, args.observe),
        };
        if let Some(out) = &args.out {
            // The agent's own log, for reading a difference's cause.
            let _ = fs::create_dir_all(out);
            let log = if side == "kubelet" {
                "kubelet.log"
            } else {
                "nanolet.log"
            };
            let _ = fs::copy(ctd.tmp().join(side).join(log), out.join(log));
        }
        eprintln!(
            "differential: {side}: {} pods recorded in {:.0?}",
            rec.len(),
            t.elapsed()
        );
        if let Some(out) = &args.out {
            let _ = fs::create_dir_all(out);
            let _ = fs::write(
                out.join(format!("{side}.json")),
                serde_json::to_string_pretty(&rec).unwrap_or_default(),
            );
        }
        records.insert(side, rec);
    }
    drop(ctd);
    // The corpus's hostPath volumes live below this directory.
    let _ = fs::remove_dir_all("/tmp/nanolet-differential");
    if args.only.is_some() {
        return;
    }
    let empty = Record::new();
    let k = records.get("kubelet").unwrap_or(&empty);
    let n = records.get("nanolet").unwrap_or(&empty);
    let deliberate = load_deliberate(&repo_root().join("docs/kubelet-differences.list"));
    let undocumented = report(k, n, &deliberate);
    eprintln!("differential: took {:.0?}", started.elapsed());
    std::process::exit(if undocumented > 0 { 1 } else { 0 });
}

// ---------------------------------------------------------------------------------------------
// Running one agent.

fn cgroup_v2() -> bool {
    Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

/// The agent under test: the kubelet or nanolet, each with a `/pods` on loopback.
enum Agent {
    Kubelet(Box<Kubelet>),
    Nanolet(Box<Nanolet>),
}

impl Agent {
    fn port(&self) -> u16 {
        match self {
            Agent::Kubelet(k) => k.port,
            Agent::Nanolet(n) => n.port,
        }
    }

    fn pods(&self) -> Option<Vec<Value>> {
        let url = format!("http://127.0.0.1:{}/pods", self.port());
        let mut resp = ureq::get(&url)
            .config()
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .call()
            .ok()?;
        let body = resp.body_mut().read_to_string().ok()?;
        let v: Value = serde_json::from_str(&body).ok()?;
        // The kubelet's empty list is `"items": null` (a nil Go slice).
        match &v["items"] {
            Value::Null if v["kind"] == "PodList" => Some(Vec::new()),
            items => items.as_array().cloned(),
        }
    }

    fn log_tail(&self) -> String {
        match self {
            Agent::Kubelet(k) => k.log_tail(40),
            Agent::Nanolet(n) => n.log_tail(),
        }
    }

    fn stop(&mut self) {
        match self {
            Agent::Kubelet(k) => k.stop(),
            Agent::Nanolet(n) => n.stop(),
        }
    }
}

/// Starts one agent (its directory `<tmp>/<side>`, manifests in `manifests/` there) and waits
/// until its `/pods` answers; returns it with its directory and manifest directory.
fn start_agent(ctd: &Containerd, side: &str, kubelet: &Path) -> (Agent, PathBuf, PathBuf) {
    // The harness's nanolet lives in `<tmp>/nanolet` (its manifests, root and log dirs there);
    // the kubelet gets the same layout in `<tmp>/kubelet`.
    let dir = ctd.tmp().join(side);
    let mdir = dir.join("manifests");
    fs::create_dir_all(&mdir).expect("manifest dir");
    fs::set_permissions(&mdir, fs::Permissions::from_mode(0o755)).expect("mode");
    let agent = match side {
        // scripts/differential runs this in a private mount namespace with copies over the
        // kernel settings, containerd inside it: the kubelet's volume mounts are seen.
        "kubelet" => Agent::Kubelet(Box::new(Kubelet::start(
            ctd,
            kubelet,
            &dir,
            NODE,
            Tunables::Inherited,
        ))),
        _ => Agent::Nanolet(Box::new(Nanolet::start(
            ctd,
            &[format!("--hostname-override={NODE}")],
        ))),
    };
    // Up: /pods answers.
    if wait_for(Duration::from_secs(60), || agent.pods()).is_none() {
        panic!("{side}: /pods never answered:\n{}", agent.log_tail());
    }
    (agent, dir, mdir)
}

/// Runs one agent on the manifests, records what it made, then removes its pods.
fn run_side(
    ctd: &Containerd,
    side: &str,
    kubelet: &Path,
    manifests: &[PathBuf],
    observe: Duration,
) -> Record {
    let (agent, dir, mdir) = start_agent(ctd, side, kubelet);
    for m in manifests {
        if let Some(name) = m.file_name() {
            fs::copy(m, mdir.join(name)).expect("copy manifest");
            fs::set_permissions(mdir.join(name), fs::Permissions::from_mode(0o644)).expect("mode");
        }
    }
    // Every manifest's pod listed, then the same observation time for both agents.
    let listed = wait_for(Duration::from_secs(60), || {
        agent
            .pods()
            .filter(|p| p.len() >= manifests.len())
            .map(|_| ())
    });
    if listed.is_none() {
        eprintln!("{side}: not every manifest became a pod within 60 s");
    }
    std::thread::sleep(observe);
    let rt = ctd.runtime();
    let pods = agent.pods().unwrap_or_default();
    let record = record_side(&rt, side, &dir, &pods);
    let names: Vec<std::ffi::OsString> = manifests
        .iter()
        .filter_map(|m| m.file_name().map(Into::into))
        .collect();
    stop_side(ctd, side, agent, &dir, &mdir, &names, &pods);
    record
}

/// Removes the manifests `names` from `mdir`, waits until the agent removed its pods, stops it
/// and removes what is left: CRI objects, mounts below `dir`, the pods' cgroups.
fn stop_side(
    ctd: &Containerd,
    side: &str,
    mut agent: Agent,
    dir: &Path,
    mdir: &Path,
    names: &[std::ffi::OsString],
    pods: &[Value],
) {
    let rt = ctd.runtime();
    // Clean up: the manifests go, the agent removes its pods, then it stops.
    for name in names {
        let _ = fs::remove_file(mdir.join(name));
    }
    let gone = wait_for(Duration::from_secs(60), || {
        let sandboxes = rt.list_pod_sandboxes().ok()?;
        let running = sandboxes
            .iter()
            .any(|s| s.state == nanolet::cri::SandboxState::Ready);
        let listed = agent.pods().map(|p| p.len()).unwrap_or(0);
        (!running && listed == 0).then_some(())
    });
    if gone.is_none() {
        eprintln!("{side}: pods still there 60 s after their manifests went; removing them");
    }
    agent.stop();
    if let Agent::Kubelet(k) = &agent {
        eprintln!("differential: kubelet log: {}", k.log.display());
    }
    remove_all_pods(&rt);
    unmount_below(dir);
    // Pod cgroups left behind (the agent was stopped before it removed them).
    let uids: Vec<String> = pods
        .iter()
        .filter_map(|p| p["metadata"]["uid"].as_str().map(str::to_string))
        .collect();
    for h in hierarchies() {
        if side == "kubelet" {
            remove_cgroup_tree(&h.join(kubelet_cgroup_root().trim_start_matches('/')));
        } else {
            for tier in ["", "burstable", "besteffort"] {
                for uid in &uids {
                    remove_cgroup_tree(&h.join("kubepods").join(tier).join(format!("pod{uid}")));
                }
            }
        }
    }
}

fn unmount_below(dir: &Path) {
    let prefix = format!("{}/", dir.display());
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<&str> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| p.starts_with(&prefix))
        .collect();
    points.reverse();
    for p in points {
        let _ = Command::new("umount").args(["-l", p]).status();
    }
}

// ---------------------------------------------------------------------------------------------
// Recording.

fn record_side(rt: &CriRuntime, side: &str, dir: &Path, pods: &[Value]) -> Record {
    let mut rec = Record::new();
    // Strings to replace before comparing: this run's UIDs, IPs, directory, cgroup root.
    let mut subst: Vec<(String, String)> = vec![(dir.display().to_string(), "<agent-dir>".into())];
    if side == "kubelet" {
        subst.push((kubelet_cgroup_root(), String::new()));
        subst.push((
            kubelet_cgroup_root().trim_start_matches('/').to_string() + "/",
            String::new(),
        ));
    }
    for p in pods {
        if let Some(uid) = p["metadata"]["uid"].as_str().filter(|u| !u.is_empty()) {
            subst.push((uid.to_string(), "<uid>".into()));
            subst.push((uid.replace('-', "_"), "<uid>".into()));
        }
        for ip in p["status"]["podIPs"].as_array().into_iter().flatten() {
            if let Some(ip) = ip["ip"].as_str() {
                subst.push((ip.to_string(), "<pod-ip>".into()));
            }
        }
    }
    // Longest first: 10.1.0.5 must not replace the start of 10.1.0.50.
    subst.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
    let sandboxes = rt.list_pod_sandboxes().unwrap_or_default();
    let containers = rt.list_containers().unwrap_or_default();
    for p in pods {
        let ns = p["metadata"]["namespace"].as_str().unwrap_or("");
        let name = p["metadata"]["name"].as_str().unwrap_or("");
        let uid = p["metadata"]["uid"].as_str().unwrap_or("");
        let key = format!("{ns}/{name}");
        let mut f = Fields::new();
        for part in ["metadata", "spec", "status"] {
            flatten(part, &p[part], &mut f);
        }
        // The newest sandbox of the pod.
        let sb = sandboxes
            .iter()
            .filter(|s| s.uid == uid)
            .max_by_key(|s| s.created_at);
        if let Some(sb) = sb {
            f.insert("cri.sandbox.attempt".into(), sb.attempt.to_string());
            if let Ok(info) = rt.pod_sandbox_status_info(&sb.id) {
                flatten_info("cri.sandbox", &info, &mut f);
            }
            // Per container name, its newest attempt.
            let mut newest: BTreeMap<&str, &nanolet::cri::ContainerInfo> = BTreeMap::new();
            for c in containers.iter().filter(|c| c.sandbox_id == sb.id) {
                let e = newest.entry(c.name.as_str()).or_insert(c);
                if c.attempt > e.attempt {
                    *e = c;
                }
            }
            let mut pod_cgroup: Option<String> = None;
            for (cname, c) in newest {
                let prefix = format!("cri.container[{cname}]");
                if let Ok(st) = rt.container_status(&c.id) {
                    f.insert(format!("{prefix}.logPath"), st.log_path.clone());
                    f.insert(format!("{prefix}.state"), format!("{:?}", st.state));
                }
                let info = rt.container_status_info(&c.id).unwrap_or_default();
                flatten_info(&prefix, &info, &mut f);
                let spec: Value = info
                    .get("info")
                    .and_then(|s| serde_json::from_str::<Value>(s).ok())
                    .map(|v| v["runtimeSpec"].clone())
                    .unwrap_or(Value::Null);
                if let Some(path) = spec["linux"]["cgroupsPath"].as_str() {
                    record_cgroup(&format!("cgroup.container[{cname}]"), path, &mut f);
                    if let Some((parent, _)) = path.rsplit_once('/') {
                        pod_cgroup = Some(parent.to_string());
                    }
                }
                if c.state == nanolet::cri::ContainerState::Running {
                    record_files(rt, &c.id, &format!("files[{cname}]"), &spec, &mut f);
                }
            }
            if let Some(pc) = pod_cgroup {
                record_cgroup("cgroup.pod", &pc, &mut f);
                if let Some((tier, _)) = pc.rsplit_once('/') {
                    record_cgroup("cgroup.tier", tier, &mut f);
                }
            }
        }
        let f = f
            .into_iter()
            .filter_map(|(k, v)| normalise(&k, &v, &subst))
            .collect();
        // The key is the same for both agents: same namespace, name and node name.
        rec.insert(key, f);
    }
    rec
}

/// containerd's verbose `info`: the "info" key holds JSON; its `config` (the CRI config it
/// got) and `runtimeSpec` (the OCI spec it made) are compared, the rest is containerd's state.
fn flatten_info(prefix: &str, info: &BTreeMap<String, String>, f: &mut Fields) {
    let Some(v) = info
        .get("info")
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
    else {
        return;
    };
    flatten(&format!("{prefix}.config"), &v["config"], f);
    flatten(&format!("{prefix}.spec"), &v["runtimeSpec"], f);
    if let Some(h) = v["runtimeHandler"].as_str() {
        f.insert(format!("{prefix}.runtimeHandler"), h.to_string());
    }
}

fn record_cgroup(prefix: &str, path: &str, f: &mut Fields) {
    let files: &[(&str, &str)] = if cgroup_v2() {
        &[
            ("", "cpu.weight"),
            ("", "cpu.max"),
            ("", "memory.max"),
            ("", "memory.min"),
            ("", "memory.high"),
            ("", "memory.swap.max"),
            ("", "pids.max"),
        ]
    } else {
        &[
            ("cpu", "cpu.shares"),
            ("cpu", "cpu.cfs_quota_us"),
            ("cpu", "cpu.cfs_period_us"),
            ("memory", "memory.limit_in_bytes"),
            ("memory", "memory.memsw.limit_in_bytes"),
            ("pids", "pids.max"),
        ]
    };
    f.insert(format!("{prefix}.path"), path.to_string());
    for (ctrl, file) in files {
        let p = Path::new("/sys/fs/cgroup")
            .join(ctrl)
            .join(path.trim_start_matches('/'))
            .join(file);
        let v = fs::read_to_string(&p)
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "(absent)".into());
        f.insert(format!("{prefix}.{file}"), v);
    }
}

fn exec(rt: &CriRuntime, id: &str, script: &str) -> String {
    let cmd = vec!["sh".to_string(), "-c".to_string(), script.to_string()];
    match rt.exec_sync(id, &cmd, Duration::from_secs(10)) {
        Ok(r) => {
            let mut s = String::from_utf8_lossy(&r.stdout).into_owned();
            if r.exit_code != 0 {
                s.push_str(&format!(
                    "(exit {}: {})",
                    r.exit_code,
                    String::from_utf8_lossy(&r.stderr).trim()
                ));
            }
            s
        }
        Err(e) => format!("(exec failed: {e})"),
    }
}

fn record_files(rt: &CriRuntime, id: &str, prefix: &str, spec: &Value, f: &mut Fields) {
    for file in ["/etc/resolv.conf", "/etc/hosts", "/etc/hostname"] {
        f.insert(
            format!("{prefix}.{file}"),
            exec(rt, id, &format!("cat {file}")),
        );
    }
    f.insert(format!("{prefix}.id"), exec(rt, id, "id"));
    f.insert(format!("{prefix}.umask"), exec(rt, id, "umask"));
    // Every file below the volume mounts (not the /etc files or /dev, /proc, /sys).
    for m in spec["mounts"].as_array().into_iter().flatten() {
        let Some(dest) = m["destination"].as_str() else {
            continue;
        };
        if [
            "/proc",
            "/dev",
            "/sys",
            "/etc/hosts",
            "/etc/hostname",
            "/etc/resolv.conf",
        ]
        .iter()
        .any(|p| dest == *p || dest.starts_with(&format!("{p}/")))
        {
            continue;
        }
        let listing = exec(
            rt,
            id,
            &format!(
                "cd '{dest}' 2>/dev/null && find . | sort | while read -r p; do \
                 echo \"$p $(stat -c '%a %F %s' \"$p\")\"; \
                 if [ -f \"$p\" ] && [ ! -L \"$p\" ] && [ $(stat -c %s \"$p\") -lt 512 ]; then \
                 echo \"  = $(cat \"$p\" | tr '\\n' '|')\"; fi; done"
            ),
        );
        let mut last = String::new();
        for line in listing.lines() {
            if let Some(content) = line.strip_prefix("  = ") {
                f.insert(format!("{last}.content"), content.to_string());
                continue;
            }
            let (path, rest) = line.split_once(' ').unwrap_or((line, ""));
            last = format!("{prefix}.volume[{dest}]{}", path.trim_start_matches('.'));
            f.insert(last.clone(), rest.to_string());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Flattening and normalising.

/// Array elements are keyed by their name where they have one (`env[NAME]`, `conditions[Ready]`,
/// `mounts[/path]`, `KEY=VALUE` strings by KEY), so one extra element is one difference, not a
/// shifted list; the order is recorded once as `PATH.#order`.
fn element_key(v: &Value) -> Option<String> {
    match v {
        Value::Object(o) => [
            "name",
            "type",
            "destination",
            "container_path",
            "containerPath",
            "mountPath",
            "path",
            "key",
        ]
        .iter()
        .find_map(|k| o.get(*k).and_then(Value::as_str).map(str::to_string)),
        Value::String(s) => s.split_once('=').map(|(k, _)| k.to_string()),
        _ => None,
    }
}

fn flatten(path: &str, v: &Value, f: &mut Fields) {
    match v {
        Value::Null => {}
        Value::Object(o) => {
            for (k, v) in o {
                flatten(&format!("{path}.{k}"), v, f);
            }
        }
        // containerd's RuntimeDefault profile is hundreds of rules: compared by count.
        Value::Array(a) if path.ends_with(".seccomp.syscalls") => {
            f.insert(format!("{path}.#count"), a.len().to_string());
        }
        Value::Array(a) => {
            let keys: Vec<Option<String>> = a.iter().map(element_key).collect();
            let unique: BTreeSet<&String> = keys.iter().flatten().collect();
            if !a.is_empty() && keys.iter().all(Option::is_some) && unique.len() == a.len() {
                let order: Vec<String> = keys.iter().flatten().cloned().collect();
                f.insert(format!("{path}.#order"), order.join(","));
                for (k, v) in keys.iter().flatten().zip(a) {
                    match v {
                        Value::String(s) => {
                            let val = s.split_once('=').map(|(_, v)| v).unwrap_or(s);
                            f.insert(format!("{path}[{k}]"), val.to_string());
                        }
                        _ => flatten(&format!("{path}[{k}]"), v, f),
                    }
                }
            } else if a.iter().all(|x| !x.is_object() && !x.is_array()) {
                let items: Vec<String> = a.iter().map(scalar).collect();
                f.insert(path.to_string(), format!("[{}]", items.join(", ")));
            } else {
                for (i, v) in a.iter().enumerate() {
                    flatten(&format!("{path}[{i}]"), v, f);
                }
            }
        }
        _ => {
            f.insert(path.to_string(), scalar(v));
        }
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Keys whose values are per-run by nature (process IDs, creation order, sizes of log files).
const PER_RUN_KEYS: &[&str] = &[".pid", ".resourceVersion", ".restartCount_"];

fn normalise(key: &str, value: &str, subst: &[(String, String)]) -> Option<(String, String)> {
    if PER_RUN_KEYS.iter().any(|k| key.ends_with(k)) {
        return None;
    }
    let mut k = key.to_string();
    let mut v = value.to_string();
    for (from, to) in subst {
        if !from.is_empty() {
            k = k.replace(from.as_str(), to);
            v = v.replace(from.as_str(), to);
        }
    }
    Some((replace_volatile(&k), replace_volatile(&v)))
}

/// 64-hex runtime IDs -> `<id>`, RFC 3339 times -> `<time>`, the projected volumes'
/// `..YYYY_MM_DD_HH_MM_SS.N` directories -> `..<timestamp>`, `containerd://<id>` kept with the
/// scheme.
fn replace_volatile(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b[i..].iter().take_while(|c| c.is_ascii_hexdigit()).count();
        if hex >= 64 && (i == 0 || !b[i - 1].is_ascii_alphanumeric()) {
            out.push_str("<id>");
            i += hex;
            continue;
        }
        if b[i..].starts_with(b"/proc/") && b.get(i + 6).is_some_and(u8::is_ascii_digit) {
            let n = b[i + 6..].iter().take_while(|c| c.is_ascii_digit()).count();
            out.push_str("/proc/<pid>");
            i += 6 + n;
            continue;
        }
        // containerd's network namespace files: cni-<uuid>.
        if b[i..].starts_with(b"/netns/cni-") {
            let n = b[i + 11..]
                .iter()
                .take_while(|c| c.is_ascii_hexdigit() || **c == b'-')
                .count();
            out.push_str("/netns/cni-<uuid>");
            i += 11 + n;
            continue;
        }
        if let Some(n) = rfc3339_len(&b[i..]) {
            out.push_str("<time>");
            i += n;
            continue;
        }
        if b[i..].starts_with(b"..")
            && b.len() > i + 6
            && b[i + 2..i + 6].iter().all(u8::is_ascii_digit)
        {
            let n = b[i + 2..]
                .iter()
                .take_while(|c| c.is_ascii_digit() || **c == b'_' || **c == b'.')
                .count();
            out.push_str("..<timestamp>");
            i += 2 + n;
            continue;
        }
        let ch = s[i..].chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// `YYYY-MM-DDTHH:MM:SS` with optional fraction and zone; its length.
fn rfc3339_len(b: &[u8]) -> Option<usize> {
    let shape = b"dddd-dd-ddTdd:dd:dd";
    if b.len() < shape.len() {
        return None;
    }
    for (c, s) in b.iter().zip(shape) {
        let ok = if *s == b'd' {
            c.is_ascii_digit()
        } else {
            c == s
        };
        if !ok {
            return None;
        }
    }
    let mut n = shape.len();
    n += b[n..]
        .iter()
        .take_while(|c| c.is_ascii_digit() || matches!(c, b'.' | b'Z' | b'+' | b'-' | b':'))
        .count();
    Some(n)
}

// ---------------------------------------------------------------------------------------------
// Comparing.

/// `docs/kubelet-differences.list`: `PATTERN<TAB>REASON` lines (`#` comments); PATTERN matches
/// `POD/FIELD` with `*` for any run of characters.
fn load_deliberate(path: &Path) -> Vec<(String, String)> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (p, r) = l.split_once('\t').unwrap_or((l, ""));
            (p.trim().to_string(), r.trim().to_string())
        })
        .collect()
}

fn glob(pattern: &str, s: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == s;
    }
    let mut rest = s;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(part) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(pos) => rest = &rest[pos + part.len()..],
                None => return false,
            }
        }
    }
    true
}

fn short(s: &str) -> String {
    let one = s.replace('\n', "\\n");
    if one.chars().count() > 70 {
        let cut: String = one.chars().take(67).collect();
        format!("{cut}...")
    } else {
        one
    }
}

/// Prints the table; returns how many differences are undocumented.
fn report(k: &Record, n: &Record, deliberate: &[(String, String)]) -> usize {
    let absent = "(absent)".to_string();
    let pods: BTreeSet<&String> = k.keys().chain(n.keys()).collect();
    let mut rows = Vec::new();
    let empty = Fields::new();
    for pod in pods {
        let kf = k.get(pod).unwrap_or(&empty);
        let nf = n.get(pod).unwrap_or(&empty);
        if !k.contains_key(pod) || !n.contains_key(pod) {
            rows.push((
                pod.to_string(),
                if k.contains_key(pod) {
                    "pod"
                } else {
                    "(absent)"
                }
                .to_string(),
                if n.contains_key(pod) {
                    "pod"
                } else {
                    "(absent)"
                }
                .to_string(),
            ));
            continue;
        }
        let fields: BTreeSet<&String> = kf.keys().chain(nf.keys()).collect();
        for field in fields {
            let a = kf.get(field).unwrap_or(&absent);
            let b = nf.get(field).unwrap_or(&absent);
            if a != b {
                rows.push((format!("{pod}/{field}"), a.clone(), b.clone()));
            }
        }
    }
    let mut undocumented = 0;
    println!("| field | kubelet | nanolet | deliberate |");
    println!("|---|---|---|---|");
    for (field, a, b) in &rows {
        let why = deliberate.iter().find(|(p, _)| glob(p, field));
        if why.is_none() {
            undocumented += 1;
        }
        println!(
            "| {} | {} | {} | {} |",
            field,
            short(a),
            short(b),
            why.map(|(_, r)| short(r)).unwrap_or_else(|| "NO".into())
        );
    }
    println!("{} differences, {undocumented} undocumented", rows.len());
    undocumented
}
