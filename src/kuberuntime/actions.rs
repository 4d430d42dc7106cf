//! `compute_pod_actions`: the pure heart of a pod sync, after the kubelet's
//! `kubeGenericRuntimeManager.computePodActions` (pkg/kubelet/kuberuntime).
//!
//! Given the desired pod, what the runtime has for it, and the backoff book, decide what to do:
//! kill and recreate the sandbox, which init container runs next, which containers start, which
//! are killed (and why), and which wait in CrashLoopBackOff.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::api::helpers::is_sidecar;
use crate::api::{Container, Pod};
use crate::cri::ContainerState;
use crate::prober::spec::probe_of;
use crate::prober::{ProbeKind, ProbeView};

use super::state::{ObservedContainer, PodRuntimeState};
use crate::util::backoff::Backoff;

/// FNV-32a, the hash the kubelet uses for container spec hashes.
pub fn fnv32a(data: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in data {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Container spec hash (FNV-32a over the container's canonical JSON), as hex like the kubelet's
/// `io.kubernetes.container.hash` annotation. A mismatch restarts the container.
pub fn container_hash(c: &Container) -> String {
    let json = serde_json::to_vec(c).unwrap_or_default();
    format!("{:x}", fnv32a(&json))
}

/// The backoff key: the kubelet's `getStableKey` (pod name, namespace, uid, container, hash).
pub fn backoff_key(pod: &Pod, c: &Container) -> String {
    format!(
        "{}_{}_{}_{}_{}",
        pod.metadata.name,
        pod.metadata.namespace,
        pod.metadata.uid,
        c.name,
        container_hash(c)
    )
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KillAction {
    pub id: String,
    pub name: String,
    pub reason: String,
    /// A probe's terminationGracePeriodSeconds, which overrides the pod's.
    pub grace_override: Option<i64>,
}

/// A container that should start but waits out its crash-loop backoff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackoffWait {
    pub name: String,
    pub init: bool,
    pub remaining: Duration,
    pub delay: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodActions {
    /// Stop every container and the sandbox.
    pub kill_pod: bool,
    /// Create a new sandbox (after kill_pod).
    pub create_sandbox: bool,
    /// The sandbox to run containers in, when it is kept.
    pub sandbox_id: Option<String>,
    /// Attempt number for a new sandbox.
    pub attempt: u32,
    /// Index into spec.initContainers of the init container to start next.
    pub init_to_start: Option<usize>,
    /// Indexes into spec.containers to start now (backoff already checked).
    pub containers_to_start: Vec<usize>,
    /// Indexes into spec.ephemeralContainers to start now: those the runtime has never seen
    /// (computePodActions' EphemeralContainersToStart; they are never restarted).
    pub ephemeral_to_start: Vec<usize>,
    pub containers_to_kill: Vec<KillAction>,
    /// Containers that must restart but are in backoff.
    pub backoff: Vec<BackoffWait>,
    /// An init container failed and restartPolicy is Never: the pod fails.
    pub init_failed: bool,
    /// Why the sandbox is being (re)created, for logs.
    pub sandbox_reason: String,
}

impl PodActions {
    pub fn is_noop(&self) -> bool {
        !self.kill_pod
            && !self.create_sandbox
            && self.init_to_start.is_none()
            && self.containers_to_start.is_empty()
            && self.ephemeral_to_start.is_empty()
            && self.containers_to_kill.is_empty()
    }
}

/// Time facts the decision needs, passed in so the function stays pure.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    pub instant: Instant,
    /// Wall clock, Unix nanoseconds (CRI timestamps are wall clock).
    pub wall_nanos: i64,
}

impl Now {
    /// The monotonic instant of a CRI wall-clock timestamp (clamped to not be in the future).
    pub fn instant_of(&self, wall_nanos: i64) -> Instant {
        let ago = self.wall_nanos.saturating_sub(wall_nanos).max(0) as u64;
        self.instant
            .checked_sub(Duration::from_nanos(ago))
            .unwrap_or(self.instant)
    }
}

/// The kubelet's `ShouldContainerBeRestarted`.
pub fn should_restart(policy: &str, latest: Option<&ObservedContainer>) -> bool {
    let Some(st) = latest else { return true };
    match st.state {
        ContainerState::Running => false,
        ContainerState::Created | ContainerState::Unknown => true,
        ContainerState::Exited => match policy {
            "Never" => false,
            "OnFailure" => st.exit_code != 0,
            _ => true,
        },
    }
}

/// Is the container in backoff? (the kubelet's `doBackOff`: the newest *exited* container's
/// finish time is the event time).
fn backoff_wait(
    pod: &Pod,
    c: &Container,
    init: bool,
    state: &PodRuntimeState,
    backoff: &Backoff,
    now: Now,
) -> Option<BackoffWait> {
    let exited = state.latest_exited(&c.name)?;
    let key = backoff_key(pod, c);
    let remaining = backoff.remaining(&key, now.instant_of(exited.finished_at), now.instant)?;
    Some(BackoffWait {
        name: c.name.clone(),
        init,
        remaining,
        delay: backoff.delay(&key).unwrap_or_default(),
    })
}

fn succeeded(state: &PodRuntimeState, name: &str) -> bool {
    state
        .latest(name)
        .is_some_and(|c| c.state == ContainerState::Exited && c.exit_code == 0)
}

/// See module docs. `terminal` means the pod already reached Succeeded/Failed (or its deadline):
/// nothing is started any more, everything still running is killed.
pub fn compute_pod_actions(
    pod: &Pod,
    state: &PodRuntimeState,
    backoff: &Backoff,
    probes: &BTreeMap<String, ProbeView>,
    now: Now,
) -> PodActions {
    let inputs = Inputs {
        pod,
        state,
        backoff,
        probes,
        now,
        policy: pod.spec.restart_policy.as_str(),
    };
    let mut a = PodActions::default();
    let newest = state.newest_sandbox();
    if let Some(reason) = inputs.sandbox_reason() {
        inputs.plan_new_sandbox(reason, &mut a);
        return a;
    }
    a.sandbox_id = newest.map(|s| s.id.clone());
    // computePodActions: ephemeral containers start in the kept sandbox (never with a new
    // one: the return above), even before initialization is done, each only if the runtime
    // has no container of its name (they are never restarted).
    a.ephemeral_to_start = pod
        .spec
        .ephemeral_containers
        .iter()
        .enumerate()
        .filter(|(_, c)| state.latest(&c.name).is_none())
        .map(|(i, _)| i)
        .collect();
    if inputs.plan_init_containers(&mut a) {
        inputs.plan_regular_containers(&mut a);
    }
    if a.kill_pod {
        // The sandbox is stopped in this sync (nothing of the pod runs or will): nothing
        // starts in it. (Upstream lists them still and their CreateContainer then fails.)
        a.ephemeral_to_start.clear();
    }
    a
}

/// The inputs of one [`compute_pod_actions`] call.
struct Inputs<'a> {
    pod: &'a Pod,
    state: &'a PodRuntimeState,
    backoff: &'a Backoff,
    probes: &'a BTreeMap<String, ProbeView>,
    now: Now,
    policy: &'a str,
}

impl Inputs<'_> {
    /// Why the pod needs a new sandbox, if it does.
    fn sandbox_reason(&self) -> Option<&'static str> {
        let Inputs { pod, state, .. } = *self;
        let ready: Vec<_> = state.sandboxes.iter().filter(|s| s.ready).collect();
        let newest = state.newest_sandbox();
        match newest {
            None => Some("no sandbox"),
            Some(s) if !s.ready => Some("sandbox is not ready"),
            Some(_) if ready.len() > 1 => Some("more than one ready sandbox"),
            Some(s) if !pod.spec.host_network && s.ip.is_empty() => Some("sandbox has no IP"),
            Some(_) => None,
        }
    }

    /// Plans a new sandbox: what is left is killed, then the first init container or the
    /// regular containers start.
    fn plan_new_sandbox(&self, reason: &str, a: &mut PodActions) {
        let Inputs {
            pod,
            state,
            backoff,
            now,
            policy,
            ..
        } = *self;
        a.sandbox_reason = reason.to_string();
        a.attempt = state.newest_sandbox().map(|s| s.attempt + 1).unwrap_or(0);
        a.kill_pod = !state.is_empty();
        a.create_sandbox = true;
        // kubelet: with restartPolicy Never, a pod whose containers already ran does not get a
        // new sandbox; it is left dead.
        if policy == "Never" && a.attempt != 0 && !state.containers.is_empty() {
            a.create_sandbox = false;
            return;
        }
        if let Some(first) = pod.spec.init_containers.first() {
            match backoff_wait(pod, first, true, state, backoff, now) {
                Some(w) => a.backoff.push(w),
                None => a.init_to_start = Some(0),
            }
            return;
        }
        for (i, c) in pod.spec.containers.iter().enumerate() {
            if policy == "OnFailure" && succeeded(state, &c.name) {
                continue;
            }
            if policy == "Never" && state.latest(&c.name).is_some() {
                continue;
            }
            match backoff_wait(pod, c, false, state, backoff, now) {
                Some(w) => a.backoff.push(w),
                None => a.containers_to_start.push(i),
            }
        }
        // Every container is done and none will start: no new sandbox just to kill it again.
        if a.containers_to_start.is_empty() && a.backoff.is_empty() {
            a.create_sandbox = false;
        }
    }

    /// Plans the init containers, sidecars included; `true` once initialization is done.
    fn plan_init_containers(&self, a: &mut PodActions) -> bool {
        let Inputs {
            pod,
            state,
            backoff,
            probes,
            now,
            policy,
        } = *self;
        for (i, c) in pod.spec.init_containers.iter().enumerate() {
            let latest = state.latest(&c.name);
            if is_sidecar(c) {
                // A sidecar counts as done once it runs; it is restarted whenever it is not running.
                match latest {
                    Some(l) if l.state == ContainerState::Running => {
                        let probe_kill = probes
                            .get(&c.name)
                            .and_then(|v| v.kill.as_ref())
                            .filter(|k| k.container_id == l.id);
                        if let Some(k) = probe_kill {
                            a.containers_to_kill.push(KillAction {
                                id: l.id.clone(),
                                name: c.name.clone(),
                                reason: k.message.clone(),
                                grace_override: k.grace_override,
                            });
                            a.init_to_start = Some(i);
                            continue;
                        }
                        if l.hash != container_hash(c) {
                            a.containers_to_kill.push(KillAction {
                                id: l.id.clone(),
                                name: c.name.clone(),
                                reason: format!("Init container {} definition changed", c.name),
                                grace_override: None,
                            });
                            a.init_to_start = Some(i);
                            return false;
                        }
                        // kubelet computeInitContainerActions: a sidecar with a startup probe
                        // counts as initialized only once that probe succeeded (for this
                        // container); until then nothing after it starts. A pod that already
                        // initialized (a regular container exists) is not held back.
                        let started = probes
                            .get(&c.name)
                            .filter(|v| v.container_id == l.id)
                            .and_then(|v| v.started)
                            .unwrap_or(false);
                        let initialized_before = pod
                            .spec
                            .containers
                            .iter()
                            .any(|rc| state.latest(&rc.name).is_some());
                        if probe_of(c, ProbeKind::Startup).is_some()
                            && !started
                            && !initialized_before
                        {
                            return false;
                        }
                        continue;
                    }
                    Some(l) if l.state == ContainerState::Exited => {
                        match backoff_wait(pod, c, true, state, backoff, now) {
                            Some(w) => a.backoff.push(w),
                            None => a.init_to_start = Some(i),
                        }
                        // An exited sidecar that had started before does not block the pod.
                        continue;
                    }
                    _ => {
                        a.init_to_start = Some(i);
                        return false;
                    }
                }
            }
            match latest {
                None => {
                    a.init_to_start = Some(i);
                    return false;
                }
                Some(l) => match l.state {
                    ContainerState::Running => {
                        return false;
                    }
                    ContainerState::Exited if l.exit_code == 0 => continue,
                    ContainerState::Exited => {
                        if policy == "Never" {
                            a.init_failed = true;
                            a.kill_pod = true;
                        } else {
                            match backoff_wait(pod, c, true, state, backoff, now) {
                                Some(w) => a.backoff.push(w),
                                None => a.init_to_start = Some(i),
                            }
                        }
                        return false;
                    }
                    ContainerState::Created | ContainerState::Unknown => {
                        a.init_to_start = Some(i);
                        return false;
                    }
                },
            }
        }
        true
    }

    /// Plans the regular containers: restart, kill or keep each; stop the pod when none runs.
    /// Regular container `i` starts now, or waits out its back-off. As the kubelet's
    /// `doBackOff`, checked at every start, also right after a kill for a failed liveness or
    /// startup probe: the newest *exited* container of the name (the one before the killed
    /// one) decides, so a container killed by its probe again and again backs off as a crash
    /// loop does (10 s, 20 s, 40 s ...), its first kill restarting at once.
    fn start_or_back_off(&self, i: usize, c: &Container, a: &mut PodActions) {
        match backoff_wait(self.pod, c, false, self.state, self.backoff, self.now) {
            Some(w) => a.backoff.push(w),
            None => a.containers_to_start.push(i),
        }
    }

    fn plan_regular_containers(&self, a: &mut PodActions) {
        let Inputs {
            pod,
            state,
            probes,
            policy,
            ..
        } = *self;
        let mut keep = 0usize;
        for (i, c) in pod.spec.containers.iter().enumerate() {
            let latest = state.latest(&c.name);
            match latest {
                Some(l) if l.state == ContainerState::Running => {
                    let probe_kill = probes
                        .get(&c.name)
                        .and_then(|v| v.kill.as_ref())
                        .filter(|k| k.container_id == l.id);
                    if l.hash != container_hash(c) {
                        // Restart regardless of the restart policy: the definition changed.
                        a.containers_to_kill.push(KillAction {
                            id: l.id.clone(),
                            name: c.name.clone(),
                            reason: format!("Container {} definition changed", c.name),
                            grace_override: None,
                        });
                        self.start_or_back_off(i, c, a);
                    } else if let Some(k) = probe_kill {
                        // Liveness/startup failure: kill, then restart unless restartPolicy is Never
                        // (the kubelet's shouldRestartOnFailure).
                        a.containers_to_kill.push(KillAction {
                            id: l.id.clone(),
                            name: c.name.clone(),
                            reason: k.message.clone(),
                            grace_override: k.grace_override,
                        });
                        if policy != "Never" {
                            self.start_or_back_off(i, c, a);
                        }
                    } else {
                        keep += 1;
                    }
                }
                _ => {
                    if should_restart(policy, latest) {
                        self.start_or_back_off(i, c, a);
                    }
                }
            }
        }
        if keep == 0 && a.containers_to_start.is_empty() && a.backoff.is_empty() {
            // Nothing runs and nothing will: stop the sandbox (kubelet: KillPod when keepCount == 0).
            a.kill_pod =
                state.sandboxes.iter().any(|s| s.ready) || state.running().next().is_some();
            a.sandbox_id = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Container, Pod};
    use crate::kuberuntime::state::ObservedSandbox;

    fn pod(policy: &str, containers: &[&str], inits: &[&str]) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = "web-node1".into();
        p.metadata.namespace = "default".into();
        p.metadata.uid = "0123456789abcdef0123456789abcdef".into();
        p.spec.restart_policy = policy.into();
        let mk = |n: &&str| Container {
            name: n.to_string(),
            image: "localhost/busybox:1.36".into(),
            ..Default::default()
        };
        p.spec.containers = containers.iter().map(mk).collect();
        p.spec.init_containers = inits.iter().map(mk).collect();
        p
    }

    fn sandbox(ready: bool, attempt: u32) -> ObservedSandbox {
        ObservedSandbox {
            id: format!("sb{attempt}"),
            attempt,
            ready,
            created_at: 1000 + attempt as i64,
            ip: "10.0.0.2".into(),
            additional_ips: vec![],
        }
    }

    fn ctr(
        p: &Pod,
        name: &str,
        state: ContainerState,
        exit: i32,
        n: u32,
        finished_at: i64,
    ) -> ObservedContainer {
        let spec = p
            .spec
            .containers
            .iter()
            .chain(&p.spec.init_containers)
            .find(|c| c.name == name)
            .cloned();
        ObservedContainer {
            id: format!("{name}-{n}"),
            sandbox_id: "sb0".into(),
            name: name.into(),
            restart_count: n,
            hash: spec.map(|c| container_hash(&c)).unwrap_or_default(),
            kind: "regular".into(),
            state,
            created_at: 2000 + n as i64,
            started_at: 2000 + n as i64,
            finished_at,
            exit_code: exit,
            reason: String::new(),
            message: String::new(),
            image: String::new(),
            image_ref: String::new(),
            log_path: String::new(),
        }
    }

    fn now() -> Now {
        Now {
            instant: Instant::now(),
            wall_nanos: 1_000_000_000_000,
        }
    }

    fn with_ephemeral(mut p: Pod, names: &[&str]) -> Pod {
        p.spec.ephemeral_containers = names
            .iter()
            .map(|n| Container {
                name: n.to_string(),
                image: "localhost/busybox:1.36".into(),
                ..Default::default()
            })
            .collect();
        p
    }

    /// kuberuntime_manager.go computePodActions: "Ephemeral containers may be started even if
    /// initialization is not yet complete" and "Ephemeral Containers are never restarted": an
    /// ephemeral container starts when the runtime has no container of its name, in the kept
    /// sandbox, also while an init container runs; once it ran (running or exited, any exit
    /// code, any restartPolicy) it is never started again.
    #[test]
    fn ephemeral_containers_start_once_and_are_never_restarted() {
        let n = now();
        let p = with_ephemeral(pod("Always", &["a"], &["i1"]), &["debug"]);
        let mut st = PodRuntimeState {
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![ctr(&p, "i1", ContainerState::Running, 0, 0, 0)],
        };
        let a = compute_pod_actions(&p, &st, &Backoff::default(), &BTreeMap::new(), n);
        assert_eq!(a.ephemeral_to_start, vec![0], "before initialization ends");
        assert_eq!(a.sandbox_id.as_deref(), Some("sb0"));
        assert!(!a.is_noop());
        st.containers = vec![
            ctr(&p, "a", ContainerState::Running, 0, 0, 0),
            ctr(&p, "i1", ContainerState::Exited, 0, 0, n.wall_nanos),
        ];
        let a = compute_pod_actions(&p, &st, &Backoff::default(), &BTreeMap::new(), n);
        assert_eq!(a.ephemeral_to_start, vec![0]);
        for (state, exit) in [
            (ContainerState::Running, 0),
            (ContainerState::Exited, 1),
            (ContainerState::Exited, 0),
        ] {
            let mut st = st.clone();
            st.containers.push(ObservedContainer {
                kind: "ephemeral".into(),
                ..ctr(&p, "debug", state, exit, 0, n.wall_nanos)
            });
            let a = compute_pod_actions(&p, &st, &Backoff::default(), &BTreeMap::new(), n);
            assert!(a.ephemeral_to_start.is_empty(), "{state:?} {exit}: {a:?}");
            assert!(a.is_noop(), "{state:?} {exit}: {a:?}");
            assert!(a.backoff.is_empty() && a.containers_to_kill.is_empty());
        }
    }

    /// computePodActions returns before the ephemeral containers when the sandbox is
    /// (re)created: they start only in a kept sandbox; and nothing starts in a sandbox this
    /// sync stops (keepCount == 0 -> KillPod).
    #[test]
    fn ephemeral_containers_never_start_with_a_new_or_dying_sandbox() {
        let n = now();
        let p = with_ephemeral(pod("Always", &["a"], &[]), &["debug"]);
        let a = compute_pod_actions(
            &p,
            &PodRuntimeState::default(),
            &Backoff::default(),
            &BTreeMap::new(),
            n,
        );
        assert!(a.create_sandbox && a.ephemeral_to_start.is_empty(), "{a:?}");
        let p = with_ephemeral(pod("Never", &["a"], &[]), &["debug"]);
        let st = PodRuntimeState {
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![ctr(&p, "a", ContainerState::Exited, 0, 0, n.wall_nanos)],
        };
        let a = compute_pod_actions(&p, &st, &Backoff::default(), &BTreeMap::new(), n);
        assert!(a.kill_pod && a.ephemeral_to_start.is_empty(), "{a:?}");
    }

    #[test]
    fn new_pod_creates_sandbox_and_starts_all_containers() {
        let p = pod("Always", &["a", "b"], &[]);
        let a = compute_pod_actions(
            &p,
            &PodRuntimeState::default(),
            &Backoff::default(),
            &BTreeMap::new(),
            now(),
        );
        assert!(a.create_sandbox);
        assert!(!a.kill_pod, "nothing to kill in an empty pod");
        assert_eq!(a.attempt, 0);
        assert_eq!(a.containers_to_start, vec![0, 1]);
    }

    #[test]
    fn new_pod_with_init_containers_starts_first_init_only() {
        let p = pod("Always", &["a"], &["i1", "i2"]);
        let a = compute_pod_actions(
            &p,
            &PodRuntimeState::default(),
            &Backoff::default(),
            &BTreeMap::new(),
            now(),
        );
        assert!(a.create_sandbox);
        assert_eq!(a.init_to_start, Some(0));
        assert!(a.containers_to_start.is_empty());
    }

    #[test]
    fn init_containers_run_in_order_each_must_exit_zero() {
        let p = pod("Always", &["a"], &["i1", "i2"]);
        let n = now();
        let mut st = PodRuntimeState {
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![],
        };
        st.containers = vec![ctr(&p, "i1", ContainerState::Running, 0, 0, 0)];
        let a = compute_pod_actions(&p, &st, &Backoff::default(), &BTreeMap::new(), n);
        assert!(a.is_noop(), "wait while i1 runs: {a:?}");
        st.containers = vec![ctr(&p, "i1", ContainerState::Exited, 0, 0, n.wall_nanos)];
        let a = compute_pod_actions(&p, &st, &Backoff::default(), &BTreeMap::new(), n);
        assert_eq!(a.init_to_start, Some(1));
        st.containers
            .insert(0, ctr(&p, "i2", ContainerState::Exited, 0, 0, n.wall_nanos));
        let a = compute_pod_actions(&p, &st, &Backoff::default(), &BTreeMap::new(), n);
        assert_eq!(a.init_to_start, None);
        assert_eq!(a.containers_to_start, vec![0]);
    }

    #[test]
    fn failed_init_container_with_never_fails_the_pod() {
        let p = pod("Never", &["a"], &["i1"]);
        let n = now();
        let st = PodRuntimeState {
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![ctr(&p, "i1", ContainerState::Exited, 1, 0, n.wall_nanos)],
        };
        let a = compute_pod_actions(&p, &st, &Backoff::default(), &BTreeMap::new(), n);
        assert!(a.init_failed);
        assert!(a.kill_pod);
        assert!(a.containers_to_start.is_empty() && a.init_to_start.is_none());
    }

    #[test]
    fn failed_init_container_is_retried_unless_never() {
        let p = pod("OnFailure", &["a"], &["i1"]);
        let n = now();
        let st = PodRuntimeState {
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![ctr(&p, "i1", ContainerState::Exited, 1, 0, n.wall_nanos)],
        };
        let a = compute_pod_actions(&p, &st, &Backoff::default(), &BTreeMap::new(), n);
        assert!(!a.init_failed);
        assert_eq!(a.init_to_start, Some(0), "first retry is immediate");
    }

    #[test]
    fn restart_policy_decides_restart_of_exited_container() {
        let n = now();
        for (policy, exit, restart) in [
            ("Always", 0, true),
            ("Always", 1, true),
            ("OnFailure", 0, false),
            ("OnFailure", 1, true),
            ("Never", 0, false),
            ("Never", 1, false),
        ] {
            let p = pod(policy, &["a"], &[]);
            let st = PodRuntimeState {
                sandboxes: vec![sandbox(true, 0)],
                containers: vec![ctr(&p, "a", ContainerState::Exited, exit, 0, n.wall_nanos)],
            };
            let a = compute_pod_actions(&p, &st, &Backoff::default(), &BTreeMap::new(), n);
            assert_eq!(
                a.containers_to_start == vec![0],
                restart,
                "{policy} exit {exit}: {a:?}"
            );
            // When nothing runs and nothing will, the sandbox is stopped.
            assert_eq!(a.kill_pod, !restart, "{policy} exit {exit}");
        }
    }

    #[test]
    fn running_container_is_kept_and_changed_hash_restarts_it() {
        let p = pod("Never", &["a"], &[]);
        let mut c = ctr(&p, "a", ContainerState::Running, 0, 0, 0);
        let st = PodRuntimeState {
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![c.clone()],
        };
        let a = compute_pod_actions(&p, &st, &Backoff::default(), &BTreeMap::new(), now());
        assert!(a.is_noop(), "{a:?}");
        // Container spec hash mismatch: restarted whatever the restart policy (here Never).
        c.hash = "deadbeef".into();
        let st = PodRuntimeState {
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![c],
        };
        let a = compute_pod_actions(&p, &st, &Backoff::default(), &BTreeMap::new(), now());
        assert_eq!(a.containers_to_kill.len(), 1);
        assert_eq!(
            a.containers_to_kill[0].reason,
            "Container a definition changed"
        );
        assert_eq!(a.containers_to_start, vec![0]);
    }

    #[test]
    fn dead_sandbox_kills_pod_and_recreates_with_next_attempt() {
        let p = pod("Always", &["a"], &[]);
        let st = PodRuntimeState {
            sandboxes: vec![sandbox(false, 0)],
            containers: vec![ctr(&p, "a", ContainerState::Running, 0, 0, 0)],
        };
        let a = compute_pod_actions(&p, &st, &Backoff::default(), &BTreeMap::new(), now());
        assert!(a.kill_pod && a.create_sandbox);
        assert_eq!(a.attempt, 1);
        assert_eq!(a.sandbox_reason, "sandbox is not ready");
    }

    #[test]
    fn dead_sandbox_with_never_is_not_recreated() {
        let n = now();
        let p = pod("Never", &["a"], &[]);
        let st = PodRuntimeState {
            sandboxes: vec![sandbox(false, 0)],
            containers: vec![ctr(&p, "a", ContainerState::Exited, 0, 0, n.wall_nanos)],
        };
        let a = compute_pod_actions(&p, &st, &Backoff::default(), &BTreeMap::new(), n);
        assert!(!a.create_sandbox);
        assert!(a.containers_to_start.is_empty());
    }

    #[test]
    fn crashed_container_waits_out_backoff() {
        // First restart immediate; the second crash within the 10s window waits.
        let n = now();
        let p = pod("Always", &["a"], &[]);
        let c0 = &p.spec.containers[0];
        let mut b = Backoff::default();
        let st = PodRuntimeState {
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![ctr(
                &p,
                "a",
                ContainerState::Exited,
                1,
                0,
                n.wall_nanos - 1_000_000_000,
            )],
        };
        let a = compute_pod_actions(&p, &st, &b, &BTreeMap::new(), n);
        assert_eq!(a.containers_to_start, vec![0], "first restart is immediate");
        b.next(
            &backoff_key(&p, c0),
            n.instant_of(st.containers[0].finished_at),
        );
        // Second crash, 3s after the first.
        let st = PodRuntimeState {
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![ctr(
                &p,
                "a",
                ContainerState::Exited,
                1,
                1,
                n.wall_nanos - 2_000_000_000,
            )],
        };
        let a = compute_pod_actions(&p, &st, &b, &BTreeMap::new(), n);
        assert!(a.containers_to_start.is_empty());
        assert_eq!(a.backoff.len(), 1);
        assert_eq!(a.backoff[0].delay, Duration::from_secs(10));
        assert_eq!(a.backoff[0].remaining, Duration::from_secs(8));
        assert!(!a.kill_pod, "a pod in backoff keeps its sandbox");
    }

    #[test]
    fn a_liveness_kill_restarts_at_once_then_backs_off_as_a_crash_loop() {
        // kuberuntime_manager.go: computePodActions kills the container that failed its
        // liveness probe and lists it to start; startContainer's doBackOff then looks at the
        // newest *exited* container of that name (the one before the killed one). The first
        // kill restarts at once; a kill within the back-off of the previous exit waits.
        let n = now();
        let p = pod("Always", &["a"], &[]);
        let c0 = &p.spec.containers[0];
        let kill = |id: &str| {
            BTreeMap::from([(
                "a".to_string(),
                ProbeView {
                    container_id: id.into(),
                    kill: Some(crate::prober::KillRequest {
                        container_id: id.into(),
                        message: "Container a failed liveness probe, will be restarted".into(),
                        grace_override: None,
                    }),
                    ..Default::default()
                },
            )])
        };
        let mut b = Backoff::default();
        // First kill: nothing exited before: kill and start.
        let first = PodRuntimeState {
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![ctr(&p, "a", ContainerState::Running, 0, 0, 0)],
        };
        let a = compute_pod_actions(&p, &first, &b, &kill("a-0"), n);
        assert_eq!(a.containers_to_kill.len(), 1);
        assert_eq!(
            a.containers_to_start,
            vec![0],
            "the first kill restarts at once"
        );
        // The second container runs 4 s, the first exited 5 s ago and its restart was
        // recorded (10 s back-off): killed, then it waits the 5 s left.
        let killed_at = n.wall_nanos - 5_000_000_000;
        b.next(&backoff_key(&p, c0), n.instant_of(killed_at));
        let second = PodRuntimeState {
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![
                ctr(&p, "a", ContainerState::Running, 0, 1, 0),
                ctr(&p, "a", ContainerState::Exited, 137, 0, killed_at),
            ],
        };
        let a = compute_pod_actions(&p, &second, &b, &kill("a-1"), n);
        assert_eq!(a.containers_to_kill.len(), 1, "{a:?}");
        assert!(a.containers_to_start.is_empty(), "{a:?}");
        assert_eq!(a.backoff.len(), 1);
        assert_eq!(a.backoff[0].remaining, Duration::from_secs(5));
        assert!(!a.kill_pod, "a container in back-off keeps the pod");
    }

    #[test]
    fn fnv32a_matches_reference_vectors() {
        assert_eq!(fnv32a(b""), 0x811c9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c292c);
        assert_eq!(fnv32a(b"foobar"), 0xbf9cf968);
    }

    #[test]
    fn sidecar_with_startup_probe_holds_back_later_containers_until_started() {
        // kubelet computeInitContainerActions: a running sidecar with a startup probe that
        // has not succeeded yet does not let the next containers start.
        let mut p = pod("Always", &["a"], &["side"]);
        p.spec.init_containers[0].restart_policy = Some("Always".into());
        p.spec.init_containers[0].extra.insert(
            "startupProbe".into(),
            serde_json::json!({"exec": {"command": ["true"]}}),
        );
        let mut side = ctr(&p, "side", ContainerState::Running, 0, 0, 0);
        side.kind = "sidecar".into();
        let st = PodRuntimeState {
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![side],
        };
        let view = |id: &str, started: bool| {
            BTreeMap::from([(
                "side".to_string(),
                ProbeView {
                    container_id: id.into(),
                    started: Some(started),
                    ..Default::default()
                },
            )])
        };
        for probes in [BTreeMap::new(), view("side-0", false), view("older", true)] {
            let a = compute_pod_actions(&p, &st, &Backoff::default(), &probes, now());
            assert!(a.containers_to_start.is_empty(), "{probes:?}: {a:?}");
        }
        let a = compute_pod_actions(&p, &st, &Backoff::default(), &view("side-0", true), now());
        assert_eq!(a.containers_to_start, vec![0]);
        // Without a startup probe, running is enough.
        p.spec.init_containers[0].extra.clear();
        let mut side = ctr(&p, "side", ContainerState::Running, 0, 0, 0);
        side.kind = "sidecar".into();
        let st = PodRuntimeState {
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![side],
        };
        let a = compute_pod_actions(&p, &st, &Backoff::default(), &BTreeMap::new(), now());
        assert_eq!(a.containers_to_start, vec![0]);
    }
}
