//! Pure computation of the v1 PodStatus from the runtime's view, after the kubelet's
//! `generateAPIPodStatus`, `convertToAPIContainerStatuses`, `getPhase` and
//! pkg/kubelet/status/generate.go.

use std::collections::BTreeMap;

use crate::api::helpers::qos_class;
use crate::api::{
    ContainerStateView, ContainerStatus, IpEntry, Pod, PodCondition, PodStatus, StateRunning,
    StateTerminated, StateWaiting,
};
use crate::cri::ContainerState;
use crate::timeutil;

use crate::kuberuntime::state::{ObservedContainer, PodRuntimeState};

/// Why a container is waiting, as the worker last saw it (CrashLoopBackOff, ErrImagePull, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingReason {
    pub reason: String,
    pub message: String,
}

/// Why the pod fails as a whole (status.reason, status.message): DeadlineExceeded, Evicted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFailure {
    pub reason: String,
    pub message: String,
}

/// Inputs beside the spec and runtime state.
#[derive(Debug, Clone, Default)]
pub struct StatusInputs {
    /// The node's IPs, primary first (status.hostIPs; podIPs of hostNetwork pods).
    pub host_ips: Vec<String>,
    /// Unix nanoseconds "now" for transition times.
    pub now_nanos: i64,
    /// Pod start time (Unix nanoseconds) once known.
    pub start_time_nanos: Option<i64>,
    pub waiting: BTreeMap<String, WaitingReason>,
    /// Set when the pod must end Failed for a pod-level reason (DeadlineExceeded, init failure).
    pub failed_reason: Option<PodFailure>,
    /// The worker is terminating the pod (its manifest is gone).
    pub terminating: bool,
    /// What the probes say per container (ready/started); absent = no probe.
    pub probes: BTreeMap<String, crate::prober::ProbeView>,
    /// The pod's runtime handler does recursive read-only mounts (`IfPossible` is `Enabled`).
    pub recursive_read_only: bool,
}

/// The status's `volumeMounts` of a container (convertToAPIContainerStatuses, the
/// RecursiveReadOnlyMounts gate, on since v1.33): each of the spec's volumeMounts by name,
/// path and readOnly; a read-only one also says whether it is recursively read-only. A mount
/// whose mode cannot be resolved (the container was refused for it) says `Disabled`, as the
/// kubelet's does.
fn volume_mount_statuses(
    c: &crate::api::Container,
    rro: bool,
) -> Vec<crate::api::VolumeMountStatus> {
    let Some(serde_json::Value::Array(mounts)) = c.extra.get("volumeMounts") else {
        return vec![];
    };
    mounts
        .iter()
        .map(|m| {
            let read_only = m.get("readOnly").and_then(|v| v.as_bool()) == Some(true);
            let recursive = read_only.then(|| {
                let on = crate::volumes::resolve_recursive_read_only(m, &|| rro).unwrap_or(false);
                if on { "Enabled" } else { "Disabled" }.to_string()
            });
            crate::api::VolumeMountStatus {
                name: m
                    .get("name")
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_string(),
                mount_path: m
                    .get("mountPath")
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_string(),
                read_only,
                recursive_read_only: recursive,
            }
        })
        .collect()
}

fn ts(n: i64) -> Option<String> {
    (n > 0).then(|| timeutil::rfc3339(timeutil::from_unix_nanos(n)))
}

/// A runtime time as the kubelet converts it (`time.Unix(0, ns)`): an unset one (0) is the
/// epoch, not absent (toKubeContainerStatus sets an exited container's StartedAt and
/// FinishedAt from CRI whatever they are: a container that never started shows
/// `startedAt: 1970-01-01T00:00:00Z`).
fn ts_unix(n: i64) -> Option<String> {
    Some(timeutil::rfc3339(timeutil::from_unix_nanos(n.max(0))))
}

fn cri_id(id: &str) -> String {
    format!("containerd://{id}")
}

fn terminated_of(c: &ObservedContainer) -> StateTerminated {
    let reason = if !c.reason.is_empty() {
        c.reason.clone()
    } else if c.exit_code == 0 {
        "Completed".into()
    } else {
        "Error".into()
    };
    StateTerminated {
        exit_code: c.exit_code,
        signal: None,
        reason,
        message: c.message.clone(),
        started_at: ts_unix(c.started_at),
        finished_at: ts_unix(c.finished_at),
        container_id: cri_id(&c.id),
    }
}

fn state_of(c: &ObservedContainer) -> ContainerStateView {
    match c.state {
        ContainerState::Running => ContainerStateView {
            running: Some(StateRunning {
                started_at: ts(c.started_at),
            }),
            ..Default::default()
        },
        ContainerState::Exited => ContainerStateView {
            terminated: Some(terminated_of(c)),
            ..Default::default()
        },
        ContainerState::Created => ContainerStateView {
            waiting: Some(StateWaiting {
                reason: "ContainerCreating".into(),
                message: String::new(),
            }),
            ..Default::default()
        },
        ContainerState::Unknown => ContainerStateView {
            terminated: Some(StateTerminated {
                exit_code: 137,
                reason: "ContainerStatusUnknown".into(),
                message: "The container could not be located when the pod was terminated".into(),
                container_id: cri_id(&c.id),
                ..Default::default()
            }),
            ..Default::default()
        },
    }
}

fn container_statuses(
    specs: &[crate::api::Container],
    state: &PodRuntimeState,
    inputs: &StatusInputs,
    default_waiting: &str,
    old: &[ContainerStatus],
) -> Vec<ContainerStatus> {
    specs
        .iter()
        .map(|spec| {
            let old = old.iter().find(|o| o.name == spec.name);
            let latest = state.latest(&spec.name);
            let mut st = ContainerStatus {
                name: spec.name.clone(),
                image: spec.image.clone(),
                image_id: String::new(),
                ready: false,
                restart_count: 0,
                started: Some(false),
                volume_mounts: volume_mount_statuses(spec, inputs.recursive_read_only),
                ..Default::default()
            };
            (st.allocated_resources, st.resources) = container_resources(spec);
            match latest {
                Some(l) => {
                    st.state = state_of(l);
                    st.restart_count = l.restart_count as i32;
                    st.container_id = cri_id(&l.id);
                    st.image_id = l.image_ref.clone();
                    if let Some(prev) = state.previous(&spec.name) {
                        st.last_state = state_of(prev);
                    }
                    let running = l.state == ContainerState::Running;
                    // started: running and the startup probe (if any) succeeded; ready: started
                    // and the readiness probe (if any) succeeded.
                    // Results of another (older) container do not count, and a container
                    // whose probe has no result yet is neither started nor ready (the kubelet
                    // has a probe worker from the start; only a probe-less container defaults
                    // to started/ready).
                    let view = inputs
                        .probes
                        .get(&spec.name)
                        .filter(|v| v.container_id.is_empty() || v.container_id == l.id);
                    let no_probe = |kind| crate::prober::spec::probe_of(spec, kind).is_none();
                    let started = running
                        && view
                            .and_then(|v| v.started)
                            .unwrap_or_else(|| no_probe(crate::prober::ProbeKind::Startup));
                    st.started = Some(started);
                    st.ready = started
                        && view
                            .and_then(|v| v.ready)
                            .unwrap_or_else(|| no_probe(crate::prober::ProbeKind::Readiness));
                    // A dead container that will be restarted shows Waiting with the reason,
                    // and the dead one moves to lastState (kubelet: CrashLoopBackOff).
                    if l.state != ContainerState::Running {
                        if let Some(w) = inputs.waiting.get(&spec.name) {
                            if l.state == ContainerState::Exited {
                                st.last_state = state_of(l);
                            }
                            st.state = ContainerStateView {
                                waiting: Some(StateWaiting {
                                    reason: w.reason.clone(),
                                    message: w.message.clone(),
                                }),
                                ..Default::default()
                            };
                        }
                    }
                }
                None => {
                    let w = inputs
                        .waiting
                        .get(&spec.name)
                        .cloned()
                        .unwrap_or(WaitingReason {
                            reason: default_waiting.into(),
                            message: String::new(),
                        });
                    st.state = ContainerStateView {
                        waiting: Some(StateWaiting {
                            reason: w.reason,
                            message: w.message,
                        }),
                        ..Default::default()
                    };
                }
            }
            // Restart counts never decrease (e.g. after the runtime lost old containers).
            if let Some(o) = old {
                st.restart_count = st.restart_count.max(o.restart_count);
            }
            st
        })
        .collect()
}

fn is_terminated(s: &ContainerStatus) -> Option<&StateTerminated> {
    s.state.terminated.as_ref()
}

/// The kubelet's `getPhase`.
pub fn phase(pod: &Pod, init: &[ContainerStatus], regular: &[ContainerStatus]) -> &'static str {
    let policy = pod.spec.restart_policy.as_str();
    let mut pending_init = 0;
    let mut failed_init = 0;
    for (spec, s) in pod.spec.init_containers.iter().zip(init) {
        if crate::api::helpers::is_sidecar(spec) {
            if s.state.running.is_none() {
                pending_init += 1;
            }
            continue;
        }
        if let Some(t) = is_terminated(s) {
            if t.exit_code != 0 {
                failed_init += 1;
            }
        } else if s.state.waiting.is_some() {
            match s.last_state.terminated.as_ref() {
                Some(t) if t.exit_code != 0 => failed_init += 1,
                _ => pending_init += 1,
            }
        } else {
            pending_init += 1;
        }
    }
    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    for s in regular {
        if s.state.running.is_some() {
            running += 1;
        } else if let Some(t) = is_terminated(s) {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if s.state.waiting.is_some() {
            if s.last_state.terminated.is_some() {
                stopped += 1;
            } else {
                waiting += 1;
            }
        } else {
            unknown += 1;
        }
    }
    if failed_init > 0 && policy == "Never" {
        return "Failed";
    }
    if pending_init > 0 || failed_init > 0 || waiting > 0 {
        return "Pending";
    }
    if running > 0 && unknown == 0 {
        return "Running";
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        if policy == "Always" {
            return "Running";
        }
        if stopped == succeeded {
            return "Succeeded";
        }
        if policy == "Never" {
            return "Failed";
        }
        return "Running";
    }
    "Pending"
}

fn cond(type_: &str, ok: bool, reason: &str, message: String) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        last_probe_time: None,
        last_transition_time: None,
        reason: if ok { String::new() } else { reason.into() },
        message: if ok { String::new() } else { message },
        observed_generation: 0,
    }
}

fn names(v: &[&str]) -> String {
    format!("[{}]", v.join(" "))
}

/// Compute the full v1 PodStatus.
pub fn compute(
    pod: &Pod,
    state: &PodRuntimeState,
    inputs: &StatusInputs,
    old: Option<&PodStatus>,
) -> PodStatus {
    let empty = PodStatus::default();
    let old = old.unwrap_or(&empty);
    let init = container_statuses(
        &pod.spec.init_containers,
        state,
        inputs,
        "PodInitializing",
        &old.init_container_statuses,
    );
    let regular_default = if pod.spec.init_containers.is_empty() {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let regular = container_statuses(
        &pod.spec.containers,
        state,
        inputs,
        regular_default,
        &old.container_statuses,
    );

    // generateAPIPodStatus: ephemeral containers through convertToAPIContainerStatuses as
    // regular ones (the same default waiting reason); the prober manager sets neither
    // `ready` nor `started` for them (false, unset); the status manager sorts them by name
    // (SortedContainerStatuses). They count for neither the phase nor the conditions.
    let mut ephemeral = container_statuses(
        &pod.spec.ephemeral_containers,
        state,
        inputs,
        regular_default,
        &old.ephemeral_container_statuses,
    );
    for s in &mut ephemeral {
        s.ready = false;
        s.started = None;
    }
    ephemeral.sort_by(|a, b| a.name.cmp(&b.name));

    let (phase, reason, message) = phase_and_reason(pod, inputs, old, &init, &regular);
    let mut regular = regular;
    let mut init = init;
    // The kubelet's prober manager (UpdatePodStatus): an init container that is not a sidecar
    // is ready once it terminated with exit code 0.
    for (spec, s) in pod.spec.init_containers.iter().zip(init.iter_mut()) {
        if !crate::api::helpers::is_sidecar(spec)
            && is_terminated(s).is_some_and(|t| t.exit_code == 0)
        {
            s.ready = true;
        }
    }
    if phase == "Succeeded" || phase == "Failed" {
        for s in regular.iter_mut().chain(init.iter_mut()) {
            s.ready = false;
        }
    }
    // The prober manager's UpdatePodStatus: an init container that is not a sidecar is ready
    // once it terminated with exit code 0 (also in a terminal pod).
    for (spec, s) in pod.spec.init_containers.iter().zip(init.iter_mut()) {
        if !crate::api::helpers::is_sidecar(spec)
            && is_terminated(s).is_some_and(|t| t.exit_code == 0)
        {
            s.ready = true;
        }
    }

    // PodObservedGenerationTracking (GA at v1.35): the status and every condition the kubelet
    // owns carry the generation of the pod it synced (status_manager CalculatePodStatus-
    // ObservedGeneration, never lower than the last one sent; the generate*Condition
    // functions' CalculatePodConditionObservedGeneration).
    let generation = pod
        .metadata
        .extra
        .get("generation")
        .and_then(serde_json::Value::as_i64)
        .unwrap_or(0);
    let mut conditions = conditions(pod, state, inputs, old, &init, &regular, &phase);
    for c in conditions
        .iter_mut()
        .filter(|c| crate::api::helpers::is_kubelet_condition(&c.type_))
    {
        c.observed_generation = generation;
    }
    let (pod_ip, pod_ips) = pod_ips(pod, state, inputs, old, &phase);

    let allocated = pod_allocated(pod);
    PodStatus {
        phase,
        conditions,
        message,
        reason,
        host_ip: inputs.host_ips.first().cloned().unwrap_or_default(),
        host_ips: inputs
            .host_ips
            .iter()
            .map(|ip| IpEntry { ip: ip.clone() })
            .collect(),
        pod_ip,
        pod_ips,
        start_time: old
            .start_time
            .clone()
            .or_else(|| inputs.start_time_nanos.and_then(ts)),
        init_container_statuses: init,
        container_statuses: regular,
        qos_class: qos_class(pod),
        allocated_resources: allocated.requests.clone(),
        resources: Some(allocated).filter(|r| !r.is_empty()),
        ephemeral_container_statuses: ephemeral,
        observed_generation: generation.max(old.observed_generation),
    }
}

/// A container's requests after the API's defaulting (`SetDefaults_Container`: a resource
/// with a limit and no request requests its limit), every resource name, as written.
fn defaulted_requests(c: &crate::api::Container) -> BTreeMap<String, serde_json::Value> {
    let mut r = c.resources.requests.clone();
    for (k, v) in &c.resources.limits {
        r.entry(k.clone()).or_insert_with(|| v.clone());
    }
    r
}

/// A container status's `allocatedResources` (its requests as admitted) and `resources`
/// (convertContainerStatusResources, the InPlacePodVerticalScaling gate, GA at v1.35): the
/// spec's requirements, requests defaulted. The kubelet replaces a running container's
/// values with what the runtime reports where it reports them (containerd >= 1.7); what
/// nanolet sends converts back to the same values (shares, quota and bytes round-trip), so
/// only the printing can differ: the kubelet prints quantities canonically (`0.5` as `500m`,
/// a memory limit from the runtime in binary units), nanolet as the manifest wrote them.
fn container_resources(
    c: &crate::api::Container,
) -> (
    BTreeMap<String, serde_json::Value>,
    Option<crate::api::ResourceRequirements>,
) {
    let requests = defaulted_requests(c);
    let resources = crate::api::ResourceRequirements {
        limits: c.resources.limits.clone(),
        requests: requests.clone(),
        ..Default::default()
    };
    (requests, Some(resources).filter(|r| !r.is_empty()))
}

/// `1500` -> "1500m", `2000` -> "2": a CPU quantity from millicores (resource.DecimalSI).
pub(crate) fn format_milli_cpu(m: i64) -> String {
    if m % 1000 == 0 {
        (m / 1000).to_string()
    } else {
        format!("{m}m")
    }
}

/// A byte count as resource.Quantity prints it canonically: BinarySI (`64Mi`; a value
/// under 1024 plain) or DecimalSI (`100M`, `1500`).
pub(crate) fn format_bytes(b: i64, binary: bool) -> String {
    let (base, suffixes): (i64, [&str; 7]) = if binary && b.abs() >= 1024 {
        (1024, ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"])
    } else {
        (1000, ["", "k", "M", "G", "T", "P", "E"])
    };
    let (mut n, mut e) = (b, 0);
    while n != 0 && n % base == 0 && e < 6 {
        n /= base;
        e += 1;
    }
    format!("{n}{}", suffixes[e])
}

/// The pod's `allocatedResources` (resourcehelper.PodRequests: the containers' requests
/// aggregated as KEP 753 counts them, plus the overhead) and `resources` (requests and
/// resourcehelper.PodLimits, the overhead added to the limits the pod has), as the kubelet
/// v1.36 reports them for a static pod (convertToAPIPodLevelResourcesStatus's branch for a
/// pod object without a Running phase: the effective allocated resources). CPU and memory;
/// memory is printed in binary units when the first container naming it was.
fn pod_allocated(pod: &Pod) -> crate::api::ResourceRequirements {
    use crate::api::helpers::{aggregate_containers, container_limits, container_requests};
    let (oh_cpu, oh_mem) = crate::api::helpers::pod_overhead(pod);
    let has_overhead = |k: &str| {
        pod.spec
            .extra
            .get("overhead")
            .and_then(|o| o.get(k))
            .is_some()
    };
    let binary = pod
        .spec
        .init_containers
        .iter()
        .chain(&pod.spec.containers)
        .find_map(|c| {
            c.resources
                .requests
                .get("memory")
                .or_else(|| c.resources.limits.get("memory"))
        })
        .and_then(|v| v.as_str())
        .is_some_and(|s| s.ends_with('i'));
    let list = |cm: crate::api::helpers::CpuMemory, add_overhead: &dyn Fn(&str) -> bool| {
        let mut out = BTreeMap::new();
        let cpu = match cm.cpu_millis {
            Some(v) => Some(v + if add_overhead("cpu") { oh_cpu } else { 0 }),
            None if has_overhead("cpu") && add_overhead("cpu") => Some(oh_cpu),
            None => None,
        };
        let mem = match cm.memory_bytes {
            Some(v) => Some(v + if add_overhead("memory") { oh_mem } else { 0 }),
            None if has_overhead("memory") && add_overhead("memory") => Some(oh_mem),
            None => None,
        };
        if let Some(c) = cpu {
            out.insert("cpu".to_string(), format_milli_cpu(c).into());
        }
        if let Some(m) = mem {
            out.insert("memory".to_string(), format_bytes(m, binary).into());
        }
        out
    };
    let requests = aggregate_containers(pod, container_requests);
    let limits = aggregate_containers(pod, container_limits);
    crate::api::ResourceRequirements {
        // PodRequests adds the whole overhead; PodLimits only to the limits the pod has.
        requests: list(requests, &|_| true),
        limits: list(limits, &|k| match k {
            "cpu" => limits.cpu_millis.is_some(),
            _ => limits.memory_bytes.is_some(),
        }),
        ..Default::default()
    }
}

/// The pod's phase, reason and message: from its containers, a failure the pod worker
/// reported, or the old status once terminal.
fn phase_and_reason(
    pod: &Pod,
    inputs: &StatusInputs,
    old: &PodStatus,
    init: &[ContainerStatus],
    regular: &[ContainerStatus],
) -> (String, String, String) {
    let mut phase = phase(pod, init, regular).to_string();
    let mut reason = String::new();
    let mut message = String::new();
    if let Some(f) = &inputs.failed_reason {
        phase = "Failed".into();
        reason = f.reason.clone();
        message = f.message.clone();
    }
    // A terminal phase never goes back (the kubelet refuses Succeeded/Failed -> Running).
    if matches!(old.phase.as_str(), "Succeeded" | "Failed") {
        phase = old.phase.clone();
        if reason.is_empty() {
            reason = old.reason.clone();
            message = old.message.clone();
        }
    }
    (phase, reason, message)
}

/// The pod's conditions, in the order the kubelet reports them, with transition times kept
/// from the old status while unchanged.
fn conditions(
    pod: &Pod,
    state: &PodRuntimeState,
    inputs: &StatusInputs,
    old: &PodStatus,
    init: &[ContainerStatus],
    regular: &[ContainerStatus],
    phase: &str,
) -> Vec<PodCondition> {
    let sandbox_ready = state.newest_sandbox().is_some_and(|s| s.ready);
    let ready_to_start = cond(
        "PodReadyToStartContainers",
        sandbox_ready,
        "",
        String::new(),
    );

    let incomplete: Vec<&str> = pod
        .spec
        .init_containers
        .iter()
        .zip(init)
        .filter(|(spec, s)| {
            if crate::api::helpers::is_sidecar(spec) {
                s.started != Some(true)
            } else {
                is_terminated(s).is_none_or(|t| t.exit_code != 0)
            }
        })
        .map(|(spec, _)| spec.name.as_str())
        .collect();
    let was_initialized = old
        .conditions
        .iter()
        .any(|c| c.type_ == "Initialized" && c.status == "True");
    let initialized_ok = incomplete.is_empty() || was_initialized;
    let mut initialized = cond(
        "Initialized",
        initialized_ok,
        "ContainersNotInitialized",
        format!("containers with incomplete status: {}", names(&incomplete)),
    );
    // The kubelet v1.36 (GeneratePodInitializedCondition) gives a Succeeded pod's Initialized
    // condition the reason PodCompleted, with or without init containers.
    if phase == "Succeeded" && initialized_ok {
        initialized.reason = "PodCompleted".into();
    }

    let mut unready: Vec<&str> = regular
        .iter()
        .filter(|s| !s.ready)
        .map(|s| s.name.as_str())
        .collect();
    for (spec, s) in pod.spec.init_containers.iter().zip(init) {
        if crate::api::helpers::is_sidecar(spec) && !s.ready {
            unready.push(spec.name.as_str());
        }
    }
    let (cr, rr, msg) = if phase == "Succeeded" {
        (false, false, ("PodCompleted", String::new()))
    } else if !initialized_ok {
        (
            false,
            false,
            (
                "ContainersNotInitialized",
                format!("containers with incomplete status: {}", names(&incomplete)),
            ),
        )
    } else {
        let ok = unready.is_empty();
        (
            ok,
            ok,
            (
                "ContainersNotReady",
                format!("containers with unready status: {}", names(&unready)),
            ),
        )
    };
    // The conditions others own (readiness gates'), as the API server has them, come first.
    let foreign = foreign_conditions(pod);
    let ready = match readiness_gates_unready(pod, &foreign) {
        Some(why) if rr => cond("Ready", false, "ReadinessGatesNotReady", why),
        _ => cond("Ready", rr, msg.0, msg.1.clone()),
    };
    let containers_ready = cond("ContainersReady", cr, msg.0, msg.1);
    let scheduled = cond("PodScheduled", true, "", String::new());

    let mut own = vec![
        ready_to_start,
        initialized,
        ready,
        containers_ready,
        scheduled,
    ];
    for c in &mut own {
        let prev = old.conditions.iter().find(|o| o.type_ == c.type_);
        c.last_transition_time = match prev {
            Some(p) if p.status == c.status => p.last_transition_time.clone(),
            _ => ts(inputs.now_nanos),
        };
    }
    let mut conditions = foreign;
    if let Some(d) = disruption_target(inputs, old) {
        conditions.retain(|c| c.type_ != d.type_);
        conditions.push(d);
    }
    conditions.append(&mut own);
    conditions
}

/// status_manager.go SetContainerReadiness: a readiness probe result changed while the pod
/// worker is not generating the status (it is killing the pod): set the container's `ready`
/// (`containerID` of the CRI id `container_id`; a container no longer running stays not
/// ready, as UpdatePodStatus has it) and regenerate the Ready and ContainersReady conditions
/// from the container statuses (GeneratePodReadyCondition, GenerateContainersReadyCondition).
/// Returns whether the status changed.
pub fn set_container_readiness(
    pod: &mut Pod,
    container_id: &str,
    ready: bool,
    now_nanos: i64,
) -> bool {
    let sidecars: Vec<String> = pod
        .spec
        .init_containers
        .iter()
        .filter(|c| crate::api::helpers::is_sidecar(c))
        .map(|c| c.name.clone())
        .collect();
    let foreign = foreign_conditions(pod);
    let gates = readiness_gates_unready(pod, &foreign);
    let Some(status) = pod.status.as_mut() else {
        return false;
    };
    let id = cri_id(container_id);
    let Some(cs) = status
        .container_statuses
        .iter_mut()
        .chain(status.init_container_statuses.iter_mut())
        .find(|c| c.container_id == id)
    else {
        return false;
    };
    let ready = ready && cs.state.running.is_some();
    if cs.ready == ready {
        return false;
    }
    cs.ready = ready;
    let initialized = status
        .conditions
        .iter()
        .any(|c| c.type_ == "Initialized" && c.status == "True");
    if status.phase == "Succeeded" || !initialized {
        // PodCompleted / ContainersNotInitialized do not depend on readiness.
        return true;
    }
    let unready: Vec<&str> = status
        .container_statuses
        .iter()
        .chain(
            status
                .init_container_statuses
                .iter()
                .filter(|s| sidecars.contains(&s.name)),
        )
        .filter(|s| !s.ready)
        .map(|s| s.name.as_str())
        .collect();
    let ok = unready.is_empty();
    let message = format!("containers with unready status: {}", names(&unready));
    let ready_cond = match gates {
        Some(why) if ok => cond("Ready", false, "ReadinessGatesNotReady", why),
        _ => cond("Ready", ok, "ContainersNotReady", message.clone()),
    };
    let containers_ready = cond("ContainersReady", ok, "ContainersNotReady", message);
    for mut c in [ready_cond, containers_ready] {
        match status.conditions.iter_mut().find(|o| o.type_ == c.type_) {
            Some(o) => {
                c.last_transition_time = if o.status == c.status {
                    o.last_transition_time.clone()
                } else {
                    ts(now_nanos)
                };
                *o = c;
            }
            None => {
                c.last_transition_time = ts(now_nanos);
                status.conditions.push(c);
            }
        }
    }
    true
}

/// The prober's writer of a terminating pod's readiness changes into `store`.
pub fn readiness_writer(
    store: std::sync::Arc<crate::status::StatusStore>,
) -> crate::prober::ReadinessWriter {
    Box::new(move |uid, container_id, ready| {
        store.update_pod(uid, |pod| {
            set_container_readiness(pod, container_id, ready, timeutil::now_unix_nanos());
        });
    })
}

/// The `DisruptionTarget` condition of a pod the eviction manager evicted (the kubelet's
/// `evictPod` status function: True, reason `TerminationByKubelet`, the eviction message) or
/// the node shutdown manager terminated (the same, with its message), its transition time kept
/// once set.
fn disruption_target(inputs: &StatusInputs, old: &PodStatus) -> Option<PodCondition> {
    let f = inputs
        .failed_reason
        .as_ref()
        .filter(|f| f.reason == "Evicted" || f.message == crate::nodeshutdown::MESSAGE)?;
    let mut c = cond("DisruptionTarget", true, "", String::new());
    c.reason = "TerminationByKubelet".into();
    c.message = f.message.clone();
    c.last_transition_time = old
        .conditions
        .iter()
        .find(|o| o.type_ == c.type_ && o.status == "True")
        .and_then(|o| o.last_transition_time.clone())
        .or_else(|| ts(inputs.now_nanos));
    Some(c)
}

/// The conditions others own (readiness gates'), as the API server has them.
fn foreign_conditions(pod: &Pod) -> Vec<PodCondition> {
    pod.status
        .iter()
        .flat_map(|s| &s.conditions)
        .filter(|c| !crate::api::helpers::is_kubelet_condition(&c.type_))
        .cloned()
        .collect()
}

/// Why the pod's readiness gates keep it unready (upstream `GeneratePodReadyCondition`): each
/// `spec.readinessGates[].conditionType` must be a condition with status True; `None` when
/// they all are (or there are none).
fn readiness_gates_unready(pod: &Pod, conditions: &[PodCondition]) -> Option<String> {
    let gates = pod.spec.extra.get("readinessGates")?.as_array()?;
    let why: Vec<String> = gates
        .iter()
        .filter_map(|g| g.get("conditionType").and_then(serde_json::Value::as_str))
        .filter_map(|t| match conditions.iter().find(|c| c.type_ == t) {
            None => Some(format!(
                "corresponding condition of pod readiness gate \"{t}\" does not exist."
            )),
            Some(c) if c.status != "True" => Some(format!(
                "the status of pod readiness gate \"{t}\" is not \"True\", but {}",
                c.status
            )),
            Some(_) => None,
        })
        .collect();
    (!why.is_empty()).then(|| why.join(", "))
}

/// The pod's IP and IPs: the node's for hostNetwork, else the ready sandbox's (or the old ones
/// while the pod is torn down).
fn pod_ips(
    pod: &Pod,
    state: &PodRuntimeState,
    inputs: &StatusInputs,
    old: &PodStatus,
    phase: &str,
) -> (String, Vec<IpEntry>) {
    if pod.spec.host_network {
        // kubelet generateAPIPodStatus: a hostNetwork pod's podIPs are the node's IPs.
        (
            inputs.host_ips.first().cloned().unwrap_or_default(),
            inputs
                .host_ips
                .iter()
                .map(|ip| IpEntry { ip: ip.clone() })
                .collect(),
        )
    } else {
        match state
            .newest_sandbox()
            .filter(|s| s.ready && !s.ip.is_empty())
        {
            Some(s) => {
                let mut ips = vec![IpEntry { ip: s.ip.clone() }];
                ips.extend(s.additional_ips.iter().map(|ip| IpEntry { ip: ip.clone() }));
                (s.ip.clone(), ips)
            }
            // Keep the last known IP while the pod is being torn down, as the kubelet does.
            None if inputs.terminating || matches!(phase, "Succeeded" | "Failed") => {
                (old.pod_ip.clone(), old.pod_ips.clone())
            }
            None => (String::new(), vec![]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Container;
    use crate::kuberuntime::state::{ObservedContainer, ObservedSandbox};
    use crate::prober::ProbeView;

    fn running(id: &str) -> ObservedContainer {
        ObservedContainer {
            id: id.into(),
            sandbox_id: "sb".into(),
            name: "c".into(),
            restart_count: 0,
            hash: String::new(),
            kind: "regular".into(),
            state: ContainerState::Running,
            created_at: 1,
            started_at: 1,
            finished_at: 0,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            image: String::new(),
            image_ref: String::new(),
            log_path: String::new(),
        }
    }

    fn status_of(c: Container, probes: BTreeMap<String, ProbeView>) -> ContainerStatus {
        let mut pod = Pod::default();
        pod.spec.restart_policy = "Always".into();
        pod.spec.containers = vec![c];
        let state = PodRuntimeState {
            sandboxes: vec![ObservedSandbox {
                id: "sb".into(),
                attempt: 0,
                ready: true,
                created_at: 1,
                ip: "10.0.0.2".into(),
                additional_ips: vec![],
            }],
            containers: vec![running("new")],
        };
        let inputs = StatusInputs {
            probes,
            ..Default::default()
        };
        compute(&pod, &state, &inputs, None).container_statuses[0].clone()
    }

    /// The kubelet v1.36's resource fields (InPlacePodVerticalScaling, GA at v1.35; pod-level
    /// InPlacePodLevelResourcesVerticalScaling): a container's `allocatedResources` are its
    /// requests (defaulted from its limits), its `resources` the spec's; the pod's
    /// `allocatedResources` are resourcehelper.PodRequests (sum, or the largest init
    /// container) and its `resources` PodRequests with PodLimits. What `scripts/differential`
    /// recorded from the kubelet for the downward-API env example (limits 250m/64Mi, requests
    /// 125m/32Mi) and kubeadm's etcd (requests only).
    #[test]
    fn resources_in_the_status_are_the_allocated_ones() {
        let ctr = |name: &str, requests: serde_json::Value, limits: serde_json::Value| {
            let mut c = Container {
                name: name.into(),
                image: "busybox".into(),
                ..Default::default()
            };
            c.resources.requests = serde_json::from_value(requests).unwrap();
            c.resources.limits = serde_json::from_value(limits).unwrap();
            c
        };
        let mut pod = Pod::default();
        pod.spec.containers = vec![
            ctr(
                "app",
                serde_json::json!({"cpu": "125m", "memory": "32Mi"}),
                serde_json::json!({"cpu": "250m", "memory": "64Mi"}),
            ),
            ctr(
                "limited",
                serde_json::json!({}),
                serde_json::json!({"cpu": "1"}),
            ),
            ctr("free", serde_json::json!({}), serde_json::json!({})),
        ];
        pod.spec.init_containers = vec![ctr(
            "setup",
            serde_json::json!({"cpu": "2", "memory": "16Mi"}),
            serde_json::json!({}),
        )];
        let st = compute(
            &pod,
            &PodRuntimeState::default(),
            &StatusInputs::default(),
            None,
        );
        let v = serde_json::to_value(&st).unwrap();
        let app = &v["containerStatuses"][0];
        assert_eq!(
            app["allocatedResources"],
            serde_json::json!({"cpu": "125m", "memory": "32Mi"})
        );
        assert_eq!(
            app["resources"],
            serde_json::json!({"limits": {"cpu": "250m", "memory": "64Mi"}, "requests": {"cpu": "125m", "memory": "32Mi"}})
        );
        // SetDefaults_Container: the limit is the request.
        assert_eq!(
            v["containerStatuses"][1]["allocatedResources"],
            serde_json::json!({"cpu": "1"})
        );
        assert!(v["containerStatuses"][2].get("resources").is_none());
        assert!(
            v["containerStatuses"][2]
                .get("allocatedResources")
                .is_none()
        );
        assert_eq!(
            v["initContainerStatuses"][0]["allocatedResources"]["cpu"],
            "2"
        );
        // cpu: max(125m + 1, init 2) = 2; memory: max(32Mi, 16Mi). Limits: only where every
        // container names one (PodLimits sums what is named: cpu 250m + 1 = 1250m).
        assert_eq!(
            v["allocatedResources"],
            serde_json::json!({"cpu": "2", "memory": "32Mi"})
        );
        assert_eq!(
            v["resources"],
            serde_json::json!({"limits": {"cpu": "1250m", "memory": "64Mi"}, "requests": {"cpu": "2", "memory": "32Mi"}})
        );
        let mut best_effort = Pod::default();
        best_effort.spec.containers =
            vec![ctr("free", serde_json::json!({}), serde_json::json!({}))];
        let v = serde_json::to_value(compute(
            &best_effort,
            &PodRuntimeState::default(),
            &StatusInputs::default(),
            None,
        ))
        .unwrap();
        assert!(
            v.get("resources").is_none() && v.get("allocatedResources").is_none(),
            "{v}"
        );
    }

    /// toKubeContainerStatus: an exited container's StartedAt is `time.Unix(0, started_at)`
    /// whatever CRI says: one that failed to start (StartError, exit 128, never started)
    /// shows the epoch, as the kubelet's status did in `scripts/differential`.
    #[test]
    fn a_container_that_never_started_shows_the_epoch_as_its_start() {
        let mut c = running("dead");
        c.state = ContainerState::Exited;
        c.started_at = 0;
        c.finished_at = 2_000_000_000;
        c.exit_code = 128;
        c.reason = "StartError".into();
        let t = terminated_of(&c);
        assert_eq!(t.started_at.as_deref(), Some("1970-01-01T00:00:00Z"));
        assert_eq!(t.finished_at.as_deref(), Some("1970-01-01T00:00:02Z"));
        assert_eq!(t.reason, "StartError");
    }

    /// resource.Quantity's canonical printing of the values the kubelet computes.
    #[test]
    fn quantities_print_as_resource_quantity_prints_them() {
        assert_eq!(format_milli_cpu(1500), "1500m");
        assert_eq!(format_milli_cpu(2000), "2");
        assert_eq!(format_milli_cpu(0), "0");
        assert_eq!(format_bytes(64 << 20, true), "64Mi");
        assert_eq!(format_bytes(1 << 30, true), "1Gi");
        assert_eq!(format_bytes(1_000_000, true), "1000000");
        assert_eq!(format_bytes(512, true), "512");
        assert_eq!(format_bytes(100_000_000, false), "100M");
        assert_eq!(format_bytes(1500, false), "1500");
        assert_eq!(format_bytes(0, false), "0");
    }

    /// convertToAPIContainerStatuses (RecursiveReadOnlyMounts): every volumeMount of the
    /// spec by name, path and readOnly; read-only ones say Disabled or Enabled, `IfPossible`
    /// by what the runtime handler supports; a waiting container has them too.
    #[test]
    fn volume_mounts_are_in_the_status_with_their_recursive_read_only_mode() {
        let mut c = Container {
            name: "app".into(),
            image: "busybox".into(),
            ..Default::default()
        };
        c.extra.insert(
            "volumeMounts".into(),
            serde_json::json!([
                {"name": "data", "mountPath": "/data"},
                {"name": "conf", "mountPath": "/etc/conf", "readOnly": true},
                {"name": "host", "mountPath": "/host", "readOnly": true, "recursiveReadOnly": "IfPossible"},
                {"name": "sys", "mountPath": "/sys2", "readOnly": true, "recursiveReadOnly": "Enabled"}
            ]),
        );
        let mut pod = Pod::default();
        pod.spec.containers = vec![c];
        let show = |rro: bool| {
            let inputs = StatusInputs {
                recursive_read_only: rro,
                ..Default::default()
            };
            let st = compute(&pod, &PodRuntimeState::default(), &inputs, None);
            serde_json::to_value(&st.container_statuses[0].volume_mounts).unwrap()
        };
        assert_eq!(
            show(true),
            serde_json::json!([
                {"name": "data", "mountPath": "/data"},
                {"name": "conf", "mountPath": "/etc/conf", "readOnly": true, "recursiveReadOnly": "Disabled"},
                {"name": "host", "mountPath": "/host", "readOnly": true, "recursiveReadOnly": "Enabled"},
                {"name": "sys", "mountPath": "/sys2", "readOnly": true, "recursiveReadOnly": "Enabled"}
            ])
        );
        let without = show(false);
        assert_eq!(without[2]["recursiveReadOnly"], "Disabled");
        // Enabled cannot be resolved without support (the container is refused): Disabled.
        assert_eq!(without[3]["recursiveReadOnly"], "Disabled");
    }

    /// kubelet_pods.go generateAPIPodStatus: `ephemeralContainerStatuses` come from
    /// convertToAPIContainerStatuses over spec.ephemeralContainers (running with its
    /// containerID; one not created yet waits as a regular container would, ContainerCreating
    /// without init containers); prober_manager.go UpdatePodStatus leaves them not ready and
    /// `started` unset; status_manager.go sorts them by name; getPhase ignores them (an
    /// exited ephemeral container does not end a Running pod).
    #[test]
    fn ephemeral_container_statuses_are_reported_not_ready_sorted_by_name() {
        let mut pod = Pod::default();
        pod.spec.restart_policy = "Always".into();
        let mk = |n: &str| Container {
            name: n.into(),
            image: "busybox".into(),
            ..Default::default()
        };
        pod.spec.containers = vec![mk("c")];
        pod.spec.ephemeral_containers = vec![mk("zz-new"), mk("debugger"), mk("done")];
        let sandbox = ObservedSandbox {
            id: "sb".into(),
            attempt: 0,
            ready: true,
            created_at: 1,
            ip: "10.0.0.2".into(),
            additional_ips: vec![],
        };
        let debugger = ObservedContainer {
            name: "debugger".into(),
            kind: "ephemeral".into(),
            ..running("dbg")
        };
        let done = ObservedContainer {
            name: "done".into(),
            kind: "ephemeral".into(),
            state: ContainerState::Exited,
            exit_code: 1,
            finished_at: 2,
            ..running("dn")
        };
        let state = PodRuntimeState {
            sandboxes: vec![sandbox],
            containers: vec![running("c1"), debugger, done],
        };
        let st = compute(&pod, &state, &StatusInputs::default(), None);
        let names: Vec<&str> = st
            .ephemeral_container_statuses
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["debugger", "done", "zz-new"]);
        let e = &st.ephemeral_container_statuses;
        assert!(e[0].state.running.is_some());
        assert_eq!(e[0].container_id, "containerd://dbg");
        assert_eq!(e[1].state.terminated.as_ref().map(|t| t.exit_code), Some(1));
        assert_eq!(
            e[2].state.waiting.as_ref().map(|w| w.reason.as_str()),
            Some("ContainerCreating")
        );
        assert!(e.iter().all(|c| !c.ready && c.started.is_none()), "{e:?}");
        assert_eq!(st.phase, "Running");
        assert_eq!(st.container_statuses.len(), 1);
        assert!(st.container_statuses[0].ready);
        let json = serde_json::to_value(&st).expect("serializes");
        assert_eq!(json["ephemeralContainerStatuses"][0]["name"], "debugger");
        assert!(
            json["ephemeralContainerStatuses"][0]
                .get("started")
                .is_none()
        );
    }

    #[test]
    fn probed_container_without_a_result_is_neither_started_nor_ready() {
        // The kubelet has a probe worker from the moment the pod is added: until the first
        // success a container with a readiness (startup) probe is not ready (started). Only a
        // container without the probe defaults to ready (started) once running.
        let plain = Container {
            name: "c".into(),
            ..Default::default()
        };
        let st = status_of(plain.clone(), BTreeMap::new());
        assert_eq!((st.started, st.ready), (Some(true), true));

        let mut with_readiness = plain.clone();
        with_readiness.extra.insert(
            "readinessProbe".into(),
            serde_json::json!({"exec": {"command": ["true"]}}),
        );
        let st = status_of(with_readiness.clone(), BTreeMap::new());
        assert_eq!((st.started, st.ready), (Some(true), false));

        let mut with_startup = plain.clone();
        with_startup.extra.insert(
            "startupProbe".into(),
            serde_json::json!({"exec": {"command": ["true"]}}),
        );
        let st = status_of(with_startup, BTreeMap::new());
        assert_eq!((st.started, st.ready), (Some(false), false));

        // Results about an older container of the same name do not carry over.
        let old = ProbeView {
            container_id: "old".into(),
            ready: Some(true),
            ..Default::default()
        };
        let st = status_of(
            with_readiness.clone(),
            BTreeMap::from([("c".to_string(), old)]),
        );
        assert!(
            !st.ready,
            "a restarted container is not ready on the old one's result"
        );
        let current = ProbeView {
            container_id: "new".into(),
            ready: Some(true),
            ..Default::default()
        };
        let st = status_of(with_readiness, BTreeMap::from([("c".to_string(), current)]));
        assert!(st.ready);
    }

    /// Found by scripts/differential against the kubelet v1.36.3: a completed init container
    /// is `ready: true` (prober manager UpdatePodStatus for non-restartable init containers),
    /// and a Succeeded pod's Initialized condition has the reason PodCompleted.
    #[test]
    fn completed_init_containers_are_ready_and_a_succeeded_pod_is_initialized_by_completion() {
        let mut done = running("init1");
        done.name = "i".into();
        done.kind = "init".into();
        done.state = ContainerState::Exited;
        done.finished_at = 2;
        let mut pod = Pod::default();
        pod.spec.restart_policy = "Never".into();
        pod.spec.init_containers = vec![Container {
            name: "i".into(),
            ..Default::default()
        }];
        pod.spec.containers = vec![Container {
            name: "c".into(),
            ..Default::default()
        }];
        let state = PodRuntimeState {
            sandboxes: vec![],
            containers: vec![done, running("main1")],
        };
        let st = compute(&pod, &state, &StatusInputs::default(), None);
        assert_eq!(st.phase, "Running");
        assert!(
            st.init_container_statuses[0].ready,
            "a completed init container is ready"
        );

        // A pod without init containers whose container completed (complete-never.yaml).
        let mut main = running("main1");
        main.state = ContainerState::Exited;
        main.finished_at = 3;
        pod.spec.init_containers.clear();
        let state = PodRuntimeState {
            sandboxes: vec![],
            containers: vec![main],
        };
        let st = compute(&pod, &state, &StatusInputs::default(), None);
        assert_eq!(st.phase, "Succeeded");
        let init = st
            .conditions
            .iter()
            .find(|c| c.type_ == "Initialized")
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            (init.status.as_str(), init.reason.as_str()),
            ("True", "PodCompleted")
        );
    }

    #[test]
    fn an_init_container_that_exited_zero_is_ready_also_in_a_terminal_pod() {
        // pkg/kubelet/prober/prober_manager.go UpdatePodStatus: a non-restartable init
        // container whose state is Terminated with exit code 0 is Ready (e2e: "[sig-node]
        // InitContainer [NodeConformance] should invoke init containers on a RestartNever
        // pod" checks every init container of the Succeeded pod is Ready); a failed one is not.
        let mut pod = Pod::default();
        pod.spec.restart_policy = "Never".into();
        let named = |n: &str| Container {
            name: n.into(),
            ..Default::default()
        };
        pod.spec.init_containers = vec![named("init1"), named("init2")];
        pod.spec.containers = vec![named("run1")];
        let exited = |id: &str, name: &str, code: i32| ObservedContainer {
            name: name.into(),
            state: ContainerState::Exited,
            exit_code: code,
            finished_at: 2,
            kind: if name.starts_with("init") {
                "init"
            } else {
                "regular"
            }
            .into(),
            ..running(id)
        };
        let mut state = PodRuntimeState {
            sandboxes: vec![ObservedSandbox {
                id: "sb".into(),
                attempt: 0,
                ready: true,
                created_at: 1,
                ip: "10.0.0.2".into(),
                additional_ips: vec![],
            }],
            containers: vec![
                exited("i1", "init1", 0),
                exited("i2", "init2", 0),
                running("r"),
            ],
        };
        state.containers[2].name = "run1".into();
        let st = compute(&pod, &state, &StatusInputs::default(), None);
        assert_eq!(st.phase, "Running");
        assert!(st.init_container_statuses.iter().all(|c| c.ready), "{st:?}");
        state.containers[2] = exited("r", "run1", 0);
        let st = compute(&pod, &state, &StatusInputs::default(), None);
        assert_eq!(st.phase, "Succeeded");
        assert!(st.init_container_statuses.iter().all(|c| c.ready), "{st:?}");
        assert!(!st.container_statuses[0].ready);
        state.containers[1] = exited("i2", "init2", 1);
        let st = compute(&pod, &state, &StatusInputs::default(), None);
        assert!(st.init_container_statuses[0].ready);
        assert!(!st.init_container_statuses[1].ready);
    }

    #[test]
    fn node_ips_are_the_host_ips_and_a_host_network_pods_ips() {
        // kubelet generateAPIPodStatus: status.hostIP(s) are the node IPs (--node-ip, primary
        // first); a hostNetwork pod's podIP(s) are the same.
        let inputs = StatusInputs {
            host_ips: vec!["2001:db8::5".into(), "192.0.2.5".into()],
            ..Default::default()
        };
        let ips = |v: &[IpEntry]| v.iter().map(|e| e.ip.clone()).collect::<Vec<_>>();
        let mut pod = Pod::default();
        pod.spec.host_network = true;
        let st = compute(&pod, &PodRuntimeState::default(), &inputs, None);
        assert_eq!(st.host_ip, "2001:db8::5");
        assert_eq!(ips(&st.host_ips), vec!["2001:db8::5", "192.0.2.5"]);
        assert_eq!(st.pod_ip, "2001:db8::5");
        assert_eq!(ips(&st.pod_ips), vec!["2001:db8::5", "192.0.2.5"]);
        // A pod-network pod keeps its sandbox IP but reports the node's.
        pod.spec.host_network = false;
        let state = PodRuntimeState {
            sandboxes: vec![ObservedSandbox {
                id: "sb".into(),
                attempt: 0,
                ready: true,
                created_at: 1,
                ip: "10.0.0.2".into(),
                additional_ips: vec![],
            }],
            containers: vec![],
        };
        let st = compute(&pod, &state, &inputs, None);
        assert_eq!(ips(&st.host_ips), vec!["2001:db8::5", "192.0.2.5"]);
        assert_eq!(ips(&st.pod_ips), vec!["10.0.0.2"]);
    }

    /// status/generate.go GeneratePodReadyCondition: with its containers ready, a pod is Ready
    /// only when every readiness gate's condition exists with status True; otherwise Ready is
    /// False with reason ReadinessGatesNotReady and upstream's messages, joined by ", ".
    /// Conditions others own come first in the status and are kept as they are.
    #[test]
    fn readiness_gates_hold_ready_until_their_conditions_are_true() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "c", "image": "i"}],
                     "readinessGates": [{"conditionType": "example.com/a"},
                                        {"conditionType": "example.com/b"}]},
            "status": {"conditions": [{"type": "example.com/b", "status": "False"}]}
        }))
        .expect("pod");
        let ready = |pod: &Pod| {
            let state = PodRuntimeState {
                containers: vec![running("c1")],
                ..Default::default()
            };
            let st = compute(pod, &state, &StatusInputs::default(), None);
            let find = |t: &str| st.conditions.iter().find(|c| c.type_ == t).cloned();
            let r = find("Ready").expect("Ready");
            assert_eq!(
                find("ContainersReady").map(|c| c.status),
                Some("True".into())
            );
            (
                st.conditions[0].type_.clone(),
                r.status,
                r.reason,
                r.message,
            )
        };
        let (first, status, reason, message) = ready(&pod);
        assert_eq!(first, "example.com/b");
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "ReadinessGatesNotReady")
        );
        assert_eq!(
            message,
            "corresponding condition of pod readiness gate \"example.com/a\" does not exist., \
             the status of pod readiness gate \"example.com/b\" is not \"True\", but False"
        );
        if let Some(s) = pod.status.as_mut() {
            s.conditions = vec![
                PodCondition {
                    type_: "example.com/a".into(),
                    status: "True".into(),
                    ..Default::default()
                },
                PodCondition {
                    type_: "example.com/b".into(),
                    status: "True".into(),
                    ..Default::default()
                },
            ];
        }
        let (_, status, reason, _) = ready(&pod);
        assert_eq!((status.as_str(), reason.as_str()), ("True", ""));
    }

    /// e2e `Pods Extended (pod generation) pod generation should start at 1 and increment per
    /// update` and `pod observedGeneration field set in pod conditions`: with
    /// PodObservedGenerationTracking (GA, locked on at v1.35) status.observedGeneration is the
    /// synced pod's metadata.generation (status_manager: CalculatePodStatusObservedGeneration,
    /// never lowered), and so is each kubelet-owned condition's; others' conditions are kept.
    #[test]
    fn status_and_kubelet_conditions_carry_the_observed_generation() {
        let mut pod = Pod::default();
        pod.metadata.extra.insert("generation".into(), 3.into());
        pod.spec.containers = vec![Container {
            name: "c".into(),
            ..Default::default()
        }];
        let old = PodStatus {
            conditions: vec![PodCondition {
                type_: "example.com/gate".into(),
                status: "True".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let state = PodRuntimeState {
            sandboxes: vec![],
            containers: vec![running("c")],
        };
        let st = compute(&pod, &state, &StatusInputs::default(), Some(&old));
        assert_eq!(st.observed_generation, 3);
        for c in &st.conditions {
            let want = if crate::api::helpers::is_kubelet_condition(&c.type_) {
                3
            } else {
                0
            };
            assert_eq!(c.observed_generation, want, "{c:?}");
        }
        assert!(st.conditions.iter().any(|c| c.type_ == "PodScheduled"));
        let v = serde_json::to_value(&st).expect("json");
        assert_eq!(v["observedGeneration"], 3);
        // Never lower than what was sent already.
        let newer = PodStatus {
            observed_generation: 5,
            ..st
        };
        assert_eq!(
            compute(&pod, &state, &StatusInputs::default(), Some(&newer)).observed_generation,
            5
        );
    }
}
