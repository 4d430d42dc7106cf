//! `scripts/differential --timeline [ci|full]`: behaviour over time, recorded under each agent
//! the same way and compared as the instant record is (docs/testing.md, "Behaviour over time").
//!
//! One run per agent, all scenarios side by side from the same start (`T0`, the manifests
//! written):
//! - `crashloop`: a container that exits 1 at once, restartPolicy Always: each attempt's CRI
//!   start and finish, the delay from a finish to the next start as a back-off step, the states
//!   and CrashLoopBackOff messages `/pods` showed;
//! - `liveness`: an exec liveness probe that always fails (periodSeconds 3, failureThreshold 1):
//!   each attempt's run time in probe periods, then the back-off delays as above;
//! - `edit`: a running pod's manifest gets a new env value at T0+20 s: old and new UID, old
//!   container stopped, new sandbox or not, attempts, time to the new container running;
//! - `delete`: a running pod's manifest is removed at T0+20 s: time to its container stopped,
//!   its sandbox not ready and removed; what remains in CRI at the end;
//! - `containerd` (full only): a running pod across a containerd restart after the window:
//!   restart count, the same sandbox and container or new ones, Ready after.
//!
//! Times are compared through buckets so that each agent's own jitter does not make a
//! difference (the tolerances, docs/testing.md): a delay between a finish and the next start
//! is the back-off step B of the kubelet's schedule (0, 10 s doubling to 300 s, v1.36.3
//! `initialCrashLoopBackOff`/`MaxCrashLoopBackOff`) with B <= delay + 1 s < 2B (the kubelet
//! starts a backed-off container at the first pod sync after the back-off ended: its worker
//! requeues a failed sync after 10 s with up to 50 % jitter); a run time is the number of probe
//! periods it took, rounded up with 1.5 s of slack; other durations fall in the buckets of
//! [`span`].

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nanolet::cri::client::CriRuntime;
use nanolet::cri::{ContainerState, LABEL_POD_NAME, Runtime, SandboxState};
use nanolet_test_support::Containerd;
use serde_json::Value;

use super::{Agent, Fields, NODE, Record, start_agent, stop_side};

/// The kubelet's crash-loop back-off steps (v1.36.3 pkg/kubelet/kubelet.go:
/// initialCrashLoopBackOff 10 s, MaxCrashLoopBackOff 300 s, doubling, no jitter in the
/// back-off itself; ReduceDefaultCrashLoopBackOffDecay is alpha and off).
const STEPS: &[u64] = &[10, 20, 40, 80, 160, 300];
/// The liveness pod's probe period.
const PROBE_PERIOD: u64 = 3;
/// When the edit and the deletion happen, after T0.
const CHANGE_AT: Duration = Duration::from_secs(20);

const CRASHLOOP: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: tl-crashloop, namespace: default}
spec:
  restartPolicy: Always
  terminationGracePeriodSeconds: 2
  containers:
  - name: c
    image: localhost/busybox:1.36
    imagePullPolicy: Never
    command: ["sh", "-c", "exit 1"]
"#;

const LIVENESS: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: tl-liveness, namespace: default}
spec:
  restartPolicy: Always
  terminationGracePeriodSeconds: 5
  containers:
  - name: c
    image: localhost/busybox:1.36
    imagePullPolicy: Never
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    livenessProbe:
      exec: {command: ["false"]}
      periodSeconds: 3
      failureThreshold: 1
"#;

/// A pod that runs until told to stop (SIGTERM ends it within a second).
fn steady(name: &str, version: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: c
    image: localhost/busybox:1.36
    imagePullPolicy: Never
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    env:
    - {{name: VERSION, value: "{version}"}}
"#
    )
}

/// What `--timeline` runs: the window each agent is watched, and whether containerd is
/// restarted after it.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub window: Duration,
    pub containerd_restart: bool,
    /// The crash loop's and the liveness pod's attempts compared (0..=N): those that start
    /// inside the window even when the kubelet takes each back-off step's whole jitter, and
    /// whose step its jitter does not change.
    pub crash_attempts: u32,
    pub liveness_attempts: u32,
}

impl Plan {
    pub fn parse(s: &str) -> Option<Plan> {
        match s {
            // The crash loop starts near 0, 1, 11, 32, 73, 154, 314 s (the kubelet up to 15 s
            // later per step); the liveness pod near 0, 4, 8, 21, 44, 87, 170 s.
            "ci" => Some(Plan {
                window: Duration::from_secs(70),
                containerd_restart: false,
                crash_attempts: 3,
                liveness_attempts: 3,
            }),
            // The liveness pod's attempt 4 is not compared: the kubelet judges a liveness kill's
            // restart against the previous exit (doBackOff: the latest exited container's
            // finish), so after the 10 s step its killing sync finds the 20 s back-off over or
            // not depending on its own sync jitter (measured: 2.2 s and 22.7 s).
            "full" => Some(Plan {
                window: Duration::from_secs(240),
                containerd_restart: true,
                crash_attempts: 5,
                liveness_attempts: 3,
            }),
            _ => None,
        }
    }
}

fn unix_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// One container attempt as CRI reported it (times in Unix nanoseconds, 0 = not yet).
#[derive(Debug, Clone, Default)]
struct Attempt {
    pod: String,
    sandbox: String,
    attempt: u32,
    created: i64,
    started: i64,
    finished: i64,
    exit: i32,
    reason: String,
    /// When the recorder first saw it exited (Unix ns), for containers it saw running.
    seen_exited: i64,
    /// When the recorder no longer found it (removed), 0 while it exists.
    gone: i64,
}

#[derive(Debug, Clone, Default)]
struct SandboxSeen {
    pod: String,
    uid: String,
    attempt: u32,
    created: i64,
    not_ready: i64,
    gone: i64,
}

/// What `/pods` showed over time for one pod name.
#[derive(Debug, Default)]
struct PodSeen {
    uids: Vec<String>,
    states: BTreeSet<String>,
    messages: BTreeSet<String>,
    restart_counts: Vec<u64>,
    last: Value,
    /// When the pod was first missing from `/pods` after it had been listed.
    unlisted: i64,
}

#[derive(Default)]
struct Recorder {
    containers: BTreeMap<String, Attempt>,
    sandboxes: BTreeMap<String, SandboxSeen>,
    pods: BTreeMap<String, PodSeen>,
}

impl Recorder {
    /// One sample of CRI and `/pods`.
    fn sample(&mut self, rt: &CriRuntime, agent: &Agent) {
        let now = unix_nanos();
        if let Ok(list) = rt.list_pod_sandboxes() {
            let ids: BTreeSet<&String> = list.iter().map(|s| &s.id).collect();
            for s in self.sandboxes.iter_mut() {
                if s.1.gone == 0 && !ids.contains(s.0) {
                    s.1.gone = now;
                    // Stopped and removed between two samples.
                    if s.1.not_ready == 0 {
                        s.1.not_ready = now;
                    }
                }
            }
            for s in &list {
                let e = self.sandboxes.entry(s.id.clone()).or_insert(SandboxSeen {
                    pod: s.name.clone(),
                    uid: s.uid.clone(),
                    attempt: s.attempt,
                    created: s.created_at,
                    ..Default::default()
                });
                if s.state != SandboxState::Ready && e.not_ready == 0 {
                    e.not_ready = now;
                }
            }
        }
        if let Ok(list) = rt.list_containers() {
            let ids: BTreeSet<&String> = list.iter().map(|c| &c.id).collect();
            for c in self.containers.iter_mut() {
                if c.1.gone == 0 && !ids.contains(c.0) {
                    c.1.gone = now;
                }
            }
            for c in &list {
                let pod = c.labels.get(LABEL_POD_NAME).cloned().unwrap_or_default();
                let known = self.containers.get(&c.id).is_some_and(|a| a.finished != 0);
                if known {
                    continue;
                }
                let Ok(st) = rt.container_status(&c.id) else {
                    continue;
                };
                let e = self.containers.entry(c.id.clone()).or_default();
                e.pod = pod;
                e.sandbox = c.sandbox_id.clone();
                e.attempt = st.attempt;
                e.created = st.created_at;
                e.started = st.started_at;
                e.finished = st.finished_at;
                e.exit = st.exit_code;
                e.reason = st.reason.clone();
                if st.state == ContainerState::Exited && e.seen_exited == 0 {
                    e.seen_exited = now;
                }
            }
        }
        let Some(pods) = agent.pods() else {
            return;
        };
        // States are recorded from the first container start on: before it, `ContainerCreating`
        // lasts a sample or none, by chance.
        let started: BTreeSet<String> = self
            .containers
            .values()
            .filter(|a| a.started != 0)
            .map(|a| a.pod.clone())
            .collect();
        let mut listed = BTreeSet::new();
        for p in &pods {
            let name = p["metadata"]["name"].as_str().unwrap_or_default();
            let Some(short) = name.strip_suffix(&format!("-{NODE}")) else {
                continue;
            };
            listed.insert(short.to_string());
            let seen = self.pods.entry(short.to_string()).or_default();
            let uid = p["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if !uid.is_empty() && !seen.uids.contains(&uid) {
                seen.uids.push(uid.clone());
            }
            let cs = &p["status"]["containerStatuses"][0];
            if !started.contains(name) {
                seen.last = p.clone();
                continue;
            }
            if let Some(state) = cs["state"].as_object().and_then(|o| o.iter().next()) {
                let reason = state.1["reason"].as_str().unwrap_or("");
                seen.states.insert(format!("{}/{reason}", state.0));
                if let Some(m) = state.1["message"].as_str() {
                    seen.messages.insert(m.replace(&uid, "<uid>"));
                }
            }
            if let Some(n) = cs["restartCount"].as_u64() {
                if seen.restart_counts.last() != Some(&n) {
                    seen.restart_counts.push(n);
                }
            }
            seen.last = p.clone();
        }
        for (name, seen) in self.pods.iter_mut() {
            if !listed.contains(name) && seen.unlisted == 0 {
                seen.unlisted = now;
            }
        }
    }

    /// The attempts of pod `short` (all its containers named `c`), by start time.
    fn attempts(&self, short: &str) -> Vec<&Attempt> {
        let full = format!("{short}-{NODE}");
        let mut v: Vec<&Attempt> = self.containers.values().filter(|a| a.pod == full).collect();
        v.sort_by_key(|a| (a.created, a.attempt));
        v
    }

    fn sandboxes_of(&self, short: &str) -> Vec<&SandboxSeen> {
        let full = format!("{short}-{NODE}");
        let mut v: Vec<&SandboxSeen> = self.sandboxes.values().filter(|s| s.pod == full).collect();
        v.sort_by_key(|s| s.created);
        v
    }
}

/// The back-off step of a delay in seconds (0: at once).
fn backoff_secs(delay_ns: i64) -> u64 {
    let secs = delay_ns as f64 / 1e9 + 1.0;
    STEPS
        .iter()
        .rev()
        .find(|b| secs >= **b as f64)
        .copied()
        .unwrap_or(0)
}

/// A delay from a finish to the next start as the back-off step it kept: `0` (at once), or the
/// largest step B of [`STEPS`] with B <= delay + 1 s (so below the next step, 2B).
pub fn backoff_step(delay_ns: i64) -> String {
    match backoff_secs(delay_ns) {
        0 => "0".into(),
        b => format!("{b}s"),
    }
}

/// A run time in probe periods, rounded up with 1.5 s of slack.
pub fn periods(run_ns: i64, period: u64) -> String {
    let secs = run_ns as f64 / 1e9 - 1.5;
    let n = (secs / period as f64).ceil().max(1.0) as u64;
    format!("{n}x period")
}

/// A duration as a bucket: `<5s` (within the pods' 5 s grace period: both agents stop and
/// start these pods in 1-3 s, jitter included), `5-10s`, `10-30s`, `30-70s`, `>70s` (70: past
/// the kubelet's one-minute container GC period with its slack).
pub fn span(ns: i64) -> String {
    if ns <= 0 {
        return "(never)".into();
    }
    let s = ns as f64 / 1e9;
    match s {
        s if s < 5.0 => "<5s",
        s if s < 10.0 => "5-10s",
        s if s < 30.0 => "10-30s",
        s if s < 70.0 => "30-70s",
        _ => ">70s",
    }
    .into()
}

/// When a stopped object was removed: `<5s` (by the agent at once), `later` (at 5 s or more,
/// or not within the window: the kubelet's container garbage collection runs every minute,
/// `ContainerGCPeriod`, so its removal falls anywhere in that minute).
pub fn removal(ns: i64) -> String {
    if ns > 0 && ns < 5_000_000_000 {
        "<5s".into()
    } else {
        "later".into()
    }
}

fn write_manifest(mdir: &Path, file: &str, body: &str) {
    // Written beside and renamed: neither agent reads half a file.
    let tmp = mdir.join(format!(".{file}.tmp"));
    fs::write(&tmp, body).expect("write manifest");
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o644)).expect("mode");
    fs::rename(&tmp, mdir.join(file)).expect("rename manifest");
}

/// Runs the scenarios under one agent; returns its record (pods `timeline/<scenario>`).
pub fn run_side(ctd: &mut Containerd, side: &str, kubelet: &Path, plan: Plan) -> Record {
    let (agent, dir, mdir) = start_agent(ctd, side, kubelet);
    let rt = ctd.runtime();
    let mut rec = Recorder::default();
    let mut files = vec![
        "crashloop.yaml",
        "liveness.yaml",
        "edit.yaml",
        "delete.yaml",
    ];
    write_manifest(&mdir, "edit.yaml", &steady("tl-edit", "1"));
    write_manifest(&mdir, "delete.yaml", &steady("tl-delete", "1"));
    if plan.containerd_restart {
        write_manifest(&mdir, "steady.yaml", &steady("tl-steady", "1"));
        files.push("steady.yaml");
    }
    write_manifest(&mdir, "crashloop.yaml", CRASHLOOP);
    write_manifest(&mdir, "liveness.yaml", LIVENESS);
    let t0 = Instant::now();
    let mut edit_at = 0i64;
    let mut delete_at = 0i64;
    while t0.elapsed() < plan.window {
        rec.sample(&rt, &agent);
        if edit_at == 0 && t0.elapsed() >= CHANGE_AT {
            edit_at = unix_nanos();
            write_manifest(&mdir, "edit.yaml", &steady("tl-edit", "2"));
            delete_at = unix_nanos();
            let _ = fs::remove_file(mdir.join("delete.yaml"));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    rec.sample(&rt, &agent);
    // The raw delays, for reading a bucket's margin (not compared).
    for short in ["tl-crashloop", "tl-liveness"] {
        let delays: Vec<String> = rec
            .attempts(short)
            .windows(2)
            .filter(|p| p[0].finished != 0 && p[1].started != 0)
            .map(|p| format!("{:.1}", (p[1].started - p[0].finished) as f64 / 1e9))
            .collect();
        eprintln!("timeline: {side}: {short} delays (s): {}", delays.join(" "));
    }
    if let Some(p) = rec
        .sandboxes_of("tl-edit")
        .iter()
        .find(|s| s.created >= edit_at)
    {
        eprintln!(
            "timeline: {side}: tl-edit new sandbox {:.1} s after the edit",
            (p.created - edit_at) as f64 / 1e9
        );
    }
    let mut f = BTreeMap::new();
    crashloop(&rec, plan.crash_attempts, &mut f);
    liveness(&rec, plan.liveness_attempts, &mut f);
    edit(&rec, edit_at, &mut f);
    let settled = plan.window >= CHANGE_AT + Duration::from_secs(100);
    delete(&rec, delete_at, settled, &mut f);
    if plan.containerd_restart {
        containerd_restart(ctd, &rt, &agent, &mut rec, &mut f);
    }
    let pods: Vec<Value> = rec
        .pods
        .values()
        .flat_map(|p| {
            p.uids
                .iter()
                .map(|u| serde_json::json!({"metadata": {"uid": u}}))
        })
        .collect();
    let names: Vec<std::ffi::OsString> = files.iter().map(Into::into).collect();
    stop_side(ctd, side, agent, &dir, &mdir, &names, &pods);
    f
}

fn fields<'a>(f: &'a mut Record, scenario: &str) -> &'a mut Fields {
    f.entry(format!("timeline/{scenario}")).or_default()
}

/// The fields both restart scenarios share: attempts, back-off steps, exit codes, states.
fn restarts(rec: &Recorder, short: &str, cap: u32, out: &mut Fields) {
    let mut attempts = rec.attempts(short);
    attempts.retain(|a| a.attempt <= cap);
    let nums: Vec<String> = attempts.iter().map(|a| a.attempt.to_string()).collect();
    out.insert("attempts".into(), nums.join(","));
    for (i, pair) in attempts.windows(2).enumerate() {
        if pair[0].finished != 0 && pair[1].started != 0 {
            out.insert(
                format!("delay[{}]", i + 1),
                backoff_step(pair[1].started - pair[0].finished),
            );
        }
    }
    let exits: BTreeSet<String> = attempts
        .iter()
        .filter(|a| a.finished != 0)
        .map(|a| format!("{} {}", a.exit, a.reason))
        .collect();
    out.insert(
        "exits".into(),
        exits.into_iter().collect::<Vec<_>>().join(", "),
    );
    let sandboxes = rec.sandboxes_of(short);
    out.insert("sandboxes".into(), sandboxes.len().to_string());
    if let Some(p) = rec.pods.get(short) {
        out.insert(
            "states".into(),
            p.states.iter().cloned().collect::<Vec<_>>().join(", "),
        );
        // The messages' form; the back-off in them is `<back-off>` (which values were shown
        // depends on when each agent wrote the status: the delays above compare the steps).
        let messages: BTreeSet<String> = p
            .messages
            .iter()
            .map(|m| match m.strip_prefix("back-off ") {
                Some(r) => format!(
                    "back-off <back-off>{}",
                    r.split_once(' ')
                        .map(|(_, t)| format!(" {t}"))
                        .unwrap_or_default()
                ),
                None => m.clone(),
            })
            .collect();
        out.insert(
            "messages".into(),
            messages.into_iter().collect::<Vec<_>>().join(" | "),
        );
        // Each count from 1 to the cap lasts a back-off step or a probe period: all are seen.
        let rc: Vec<String> = p
            .restart_counts
            .iter()
            .filter(|n| **n >= 1 && **n <= u64::from(cap))
            .map(u64::to_string)
            .collect();
        out.insert("restartCounts".into(), rc.join(","));
        let last = &p.last["status"]["containerStatuses"][0];
        if let Some(t) = last["lastState"]["terminated"].as_object() {
            out.insert(
                "lastState.terminated".into(),
                format!(
                    "{} {}",
                    t.get("exitCode").map(super::scalar).unwrap_or_default(),
                    t.get("reason").map(super::scalar).unwrap_or_default()
                ),
            );
        }
    }
}

fn crashloop(rec: &Recorder, cap: u32, f: &mut Record) {
    let out = fields(f, "crashloop");
    restarts(rec, "tl-crashloop", cap, out);
}

fn liveness(rec: &Recorder, cap: u32, f: &mut Record) {
    let out = fields(f, "liveness");
    restarts(rec, "tl-liveness", cap, out);
    let attempts = rec.attempts("tl-liveness");
    for (i, a) in attempts.iter().filter(|a| a.attempt <= cap).enumerate() {
        if a.finished != 0 && a.started != 0 {
            out.insert(
                format!("run[{i}]"),
                periods(a.finished - a.started, PROBE_PERIOD),
            );
        }
    }
}

fn edit(rec: &Recorder, at: i64, f: &mut Record) {
    let out = fields(f, "edit");
    let Some(p) = rec.pods.get("tl-edit") else {
        out.insert("pod".into(), "(never listed)".into());
        return;
    };
    out.insert("uids".into(), p.uids.len().to_string());
    let attempts = rec.attempts("tl-edit");
    let old: Vec<&&Attempt> = attempts.iter().filter(|a| a.created < at).collect();
    let new: Vec<&&Attempt> = attempts.iter().filter(|a| a.created >= at).collect();
    // A container stopped and removed between two samples: its removal bounds its stop.
    let stopped = old
        .iter()
        .map(|a| if a.finished != 0 { a.finished } else { a.gone })
        .max()
        .unwrap_or(0);
    out.insert(
        "old.container.stopped".into(),
        span(if stopped > 0 { stopped - at } else { 0 }),
    );
    // (The old container's exit code is not compared: nanolet removes it within a sample.)
    let old_gone = old.iter().all(|a| a.gone != 0);
    let gone_at = old.iter().map(|a| a.gone).max().unwrap_or(0);
    out.insert(
        "old.container.removed".into(),
        removal(if old_gone { gone_at - at } else { 0 }),
    );
    out.insert(
        "new.attempts".into(),
        new.iter()
            .map(|a| a.attempt.to_string())
            .collect::<Vec<_>>()
            .join(","),
    );
    let started = new.iter().map(|a| a.started).filter(|s| *s > 0).min();
    out.insert(
        "new.container.running".into(),
        span(started.map(|s| s - at).unwrap_or(0)),
    );
    let sandboxes = rec.sandboxes_of("tl-edit");
    let old_sb: Vec<&&SandboxSeen> = sandboxes.iter().filter(|s| s.created < at).collect();
    let new_sb: Vec<&&SandboxSeen> = sandboxes.iter().filter(|s| s.created >= at).collect();
    out.insert("new.sandboxes".into(), new_sb.len().to_string());
    out.insert(
        "new.sandbox.attempts".into(),
        new_sb
            .iter()
            .map(|s| s.attempt.to_string())
            .collect::<Vec<_>>()
            .join(","),
    );
    let new_uid_sandbox = new_sb.iter().any(|s| old_sb.iter().all(|o| o.uid != s.uid));
    out.insert("new.sandbox.newUid".into(), new_uid_sandbox.to_string());
    out.insert(
        "old.sandbox.notReady".into(),
        span(
            old_sb
                .iter()
                .map(|s| s.not_ready)
                .max()
                .map(|t| if t > 0 { t - at } else { 0 })
                .unwrap_or(0),
        ),
    );
    let old_sb_gone = old_sb.iter().all(|s| s.gone != 0);
    let gone_at = old_sb.iter().map(|s| s.gone).max().unwrap_or(0);
    out.insert(
        "old.sandbox.removed".into(),
        removal(if old_sb_gone { gone_at - at } else { 0 }),
    );
    let env = p.last["spec"]["containers"][0]["env"][0]["value"]
        .as_str()
        .unwrap_or("")
        .to_string();
    out.insert("last.spec.env[VERSION]".into(), env);
    let cs = &p.last["status"]["containerStatuses"][0];
    out.insert(
        "last.state".into(),
        cs["state"]
            .as_object()
            .and_then(|o| o.keys().next().cloned())
            .unwrap_or_default(),
    );
    out.insert(
        "last.restartCount".into(),
        cs["restartCount"].as_u64().unwrap_or(0).to_string(),
    );
}

/// `settled`: the window went on long enough after the deletion for the kubelet's container
/// garbage collection (every minute) to have run: what remains in CRI is compared.
fn delete(rec: &Recorder, at: i64, settled: bool, f: &mut Record) {
    let out = fields(f, "delete");
    let attempts = rec.attempts("tl-delete");
    // A container stopped and removed between two samples: its removal bounds its stop (its
    // exit code then unseen, so not compared).
    let stopped = attempts
        .iter()
        .map(|a| if a.finished != 0 { a.finished } else { a.gone })
        .max()
        .unwrap_or(0);
    let since = |t: i64| span(if t > 0 { t - at } else { 0 });
    out.insert("container.stopped".into(), since(stopped));
    let removed = attempts.iter().map(|a| a.gone).max().unwrap_or(0);
    let all_gone = attempts.iter().all(|a| a.gone != 0);
    out.insert(
        "container.removed".into(),
        removal(if all_gone { removed - at } else { 0 }),
    );
    let sandboxes = rec.sandboxes_of("tl-delete");
    out.insert("sandboxes".into(), sandboxes.len().to_string());
    let nr = sandboxes.iter().map(|s| s.not_ready).max().unwrap_or(0);
    out.insert("sandbox.notReady".into(), since(nr));
    let gone = sandboxes.iter().all(|s| s.gone != 0);
    let g = sandboxes.iter().map(|s| s.gone).max().unwrap_or(0);
    out.insert(
        "sandbox.removed".into(),
        removal(if gone { g - at } else { 0 }),
    );
    if settled {
        out.insert(
            "remaining.containers".into(),
            attempts.iter().filter(|a| a.gone == 0).count().to_string(),
        );
        out.insert(
            "remaining.sandboxes".into(),
            sandboxes.iter().filter(|s| s.gone == 0).count().to_string(),
        );
    }
    let unlisted = rec.pods.get("tl-delete").map(|p| p.unlisted).unwrap_or(0);
    out.insert("pods.unlisted".into(), since(unlisted));
}

/// containerd stopped (SIGTERM) and started again while the pods run; 30 s later: the steady
/// pod's restart count, its sandbox and container the same or new, Ready.
fn containerd_restart(
    ctd: &mut Containerd,
    rt: &CriRuntime,
    agent: &Agent,
    rec: &mut Recorder,
    f: &mut Record,
) {
    let running = |rec: &Recorder| -> (BTreeSet<String>, BTreeSet<String>) {
        let c = rec
            .containers
            .iter()
            .filter(|(_, a)| a.pod == format!("tl-steady-{NODE}") && a.gone == 0 && a.finished == 0)
            .map(|(id, _)| id.clone())
            .collect();
        let s = rec
            .sandboxes
            .iter()
            .filter(|(_, s)| {
                s.pod == format!("tl-steady-{NODE}") && s.gone == 0 && s.not_ready == 0
            })
            .map(|(id, _)| id.clone())
            .collect();
        (c, s)
    };
    let (c0, s0) = running(rec);
    let rc0 = rec
        .pods
        .get("tl-steady")
        .and_then(|p| p.restart_counts.last().copied())
        .unwrap_or(0);
    ctd.stop_daemon();
    let down = Instant::now();
    // Down for 5 s: each agent's CRI calls fail meanwhile.
    while down.elapsed() < Duration::from_secs(5) {
        let _ = agent.pods();
        std::thread::sleep(Duration::from_millis(500));
    }
    ctd.start_daemon();
    let up = Instant::now();
    while up.elapsed() < Duration::from_secs(30) {
        rec.sample(rt, agent);
        std::thread::sleep(Duration::from_millis(500));
    }
    rec.sample(rt, agent);
    let (c1, s1) = running(rec);
    let out = fields(f, "containerd");
    let p = rec.pods.get("tl-steady");
    let rc1 = p
        .and_then(|p| p.restart_counts.last().copied())
        .unwrap_or(0);
    out.insert(
        "restartCount.delta".into(),
        (rc1 - rc0.min(rc1)).to_string(),
    );
    out.insert(
        "container.same".into(),
        (c0 == c1 && !c0.is_empty()).to_string(),
    );
    out.insert(
        "sandbox.same".into(),
        (s0 == s1 && !s0.is_empty()).to_string(),
    );
    out.insert(
        "containers.after".into(),
        rec.attempts("tl-steady").len().to_string(),
    );
    out.insert(
        "sandboxes.after".into(),
        rec.sandboxes_of("tl-steady").len().to_string(),
    );
    if let Some(p) = p {
        let ready = p.last["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready")
            .map(|c| super::scalar(&c["status"]))
            .unwrap_or_default();
        out.insert("ready.after".into(), ready);
        out.insert(
            "phase.after".into(),
            super::scalar(&p.last["status"]["phase"]),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_steps_absorb_the_kubelets_requeue_jitter() {
        // The kubelet restarts at the first sync after the back-off: up to 15 s later.
        assert_eq!(backoff_step(300_000_000), "0");
        assert_eq!(backoff_step(10_000_000_000), "10s");
        assert_eq!(backoff_step(9_200_000_000), "10s");
        assert_eq!(backoff_step(16_000_000_000), "10s");
        assert_eq!(backoff_step(31_000_000_000), "20s");
        assert_eq!(backoff_step(55_000_000_000), "40s");
        assert_eq!(backoff_step(400_000_000_000), "300s");
    }

    #[test]
    fn spans_put_a_stop_within_the_grace_period_in_one_bucket() {
        assert_eq!(span(1_500_000_000), "<5s");
        assert_eq!(span(2_500_000_000), "<5s");
        assert_eq!(span(12_000_000_000), "10-30s");
        assert_eq!(span(0), "(never)");
    }

    #[test]
    fn run_times_in_probe_periods() {
        assert_eq!(periods(3_400_000_000, 3), "1x period");
        assert_eq!(periods(1_000_000_000, 3), "1x period");
        assert_eq!(periods(6_900_000_000, 3), "2x period");
    }
}
