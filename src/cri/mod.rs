//! The runtime seam: CRI verbs on nanolet's own domain types.
//!
//! Everything above this module talks to containers through [`Runtime`]; nothing above it
//! imports tokio, tonic or prost. Implementations:
//! - [`client::CriRuntime`]: tonic over containerd's Unix socket (CRI `runtime.v1`), plus
//!   containerd's native event stream for task exits.
//! - [`fake::FakeRuntime`]: in memory, with a call log, error injection and simulated exits,
//!   for unit tests of the decision logic.
//!
//! The trait is blocking: callers are plain threads (pod workers, PLEG, prober). The CRI
//! implementation drives one current-thread tokio runtime on its own thread.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration;

use crate::api::dns::DnsConfig;
// The security settings are computed from the pod (api::security) and passed on as they are.
pub use crate::api::security::{ContainerSecurity, SecurityProfile};

pub mod client;
pub(crate) mod containerd_api;
#[cfg(any(test, feature = "testing"))]
pub mod fake;
pub(crate) mod grpc_health;
pub(crate) mod instrumented;

/// Labels the kubelet puts on every CRI sandbox and container (kuberuntime_labels.go).
/// containerd's CRI socket where Debian's containerd and the kubelet's default put it
/// (`--container-runtime-endpoint` / `containerRuntimeEndpoint`).
pub const DEFAULT_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";
pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// Annotations the kubelet puts on containers.
pub const ANN_CONTAINER_HASH: &str = "io.kubernetes.container.hash";
pub const ANN_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
pub const ANN_TERMINATION_MESSAGE_PATH: &str = "io.kubernetes.container.terminationMessagePath";
pub const ANN_TERMINATION_MESSAGE_POLICY: &str = "io.kubernetes.container.terminationMessagePolicy";
pub const ANN_POD_TERMINATION_GRACE: &str = "io.kubernetes.pod.terminationGracePeriod";
/// nanolet's own marker: which manager created the object (so we never touch foreign pods).
pub const LABEL_MANAGED_BY: &str = "io.nanolet.managed";
/// nanolet's own annotation: "init" / "sidecar" / "regular" / "ephemeral".
pub const ANN_CONTAINER_TYPE: &str = "io.nanolet.container.type";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    NotFound,
    Unavailable,
    DeadlineExceeded,
    /// The runtime does not serve the call (gRPC Unimplemented): for CRI calls, containerd's
    /// CRI plugin is disabled (`unknown service runtime.v1.RuntimeService`).
    Unimplemented,
    Other,
}

/// A failed runtime call: which verb, on what, and why.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{op} {target}: {kind:?}: {message}")]
pub struct RuntimeError {
    pub op: &'static str,
    pub target: String,
    pub kind: ErrorKind,
    pub message: String,
    /// The gRPC status code of the runtime's answer; `None` when the error is the client's
    /// own (no reply, no socket).
    pub code: Option<GrpcCode>,
}

/// A gRPC status code, as the runtime answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrpcCode {
    Ok,
    Canceled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

impl GrpcCode {
    /// The code as grpc-go's `codes.Code.String()` names it (what the kubelet prints).
    pub fn as_str(self) -> &'static str {
        match self {
            GrpcCode::Ok => "OK",
            GrpcCode::Canceled => "Canceled",
            GrpcCode::Unknown => "Unknown",
            GrpcCode::InvalidArgument => "InvalidArgument",
            GrpcCode::DeadlineExceeded => "DeadlineExceeded",
            GrpcCode::NotFound => "NotFound",
            GrpcCode::AlreadyExists => "AlreadyExists",
            GrpcCode::PermissionDenied => "PermissionDenied",
            GrpcCode::ResourceExhausted => "ResourceExhausted",
            GrpcCode::FailedPrecondition => "FailedPrecondition",
            GrpcCode::Aborted => "Aborted",
            GrpcCode::OutOfRange => "OutOfRange",
            GrpcCode::Unimplemented => "Unimplemented",
            GrpcCode::Internal => "Internal",
            GrpcCode::Unavailable => "Unavailable",
            GrpcCode::DataLoss => "DataLoss",
            GrpcCode::Unauthenticated => "Unauthenticated",
        }
    }
}

impl RuntimeError {
    pub fn new(
        op: &'static str,
        target: impl Into<String>,
        kind: ErrorKind,
        message: impl Into<String>,
    ) -> Self {
        RuntimeError {
            op,
            target: target.into(),
            kind,
            message: message.into(),
            code: None,
        }
    }

    /// The same error as the runtime's answer with gRPC status code `code`.
    pub fn with_code(mut self, code: GrpcCode) -> Self {
        self.code = Some(code);
        self
    }

    pub fn is_not_found(&self) -> bool {
        self.kind == ErrorKind::NotFound
    }

    /// The error as the kubelet's CRI client prints it (grpc-go's status error,
    /// `rpc error: code = <code> desc = <message>`), which is what its events quote (e.g.
    /// `Failed to create pod sandbox: rpc error: code = Unknown desc = ...`). An error of the
    /// client itself is its message alone.
    pub fn grpc_text(&self) -> String {
        match self.code {
            Some(code) => format!(
                "rpc error: code = {} desc = {}",
                code.as_str(),
                self.message
            ),
            None => self.message.clone(),
        }
    }
}

/// One condition of CRI `RuntimeStatus` (`RuntimeReady`, `NetworkReady`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeCondition {
    pub type_: String,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

impl std::fmt::Display for RuntimeCondition {
    /// As the kubelet prints a runtime condition (kubecontainer `RuntimeCondition.String`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}={} reason:{} message:{}",
            self.type_, self.status, self.reason, self.message
        )
    }
}

/// The condition types the kubelet requires (CRI `RuntimeReady`, `NetworkReady`).
pub const RUNTIME_READY: &str = "RuntimeReady";
pub const NETWORK_READY: &str = "NetworkReady";

/// CRI `Status`: the runtime's conditions and, when asked verbosely, its pod sandbox
/// ("pause") image (containerd's `sandboxImage`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuntimeStatus {
    pub conditions: Vec<RuntimeCondition>,
    pub sandbox_image: Option<String>,
    /// The runtime handlers and their features (containerd 2.x reports them; 1.6 and 1.7
    /// report none: then no handler is known to support user namespaces).
    pub handlers: Vec<RuntimeHandler>,
}

impl RuntimeStatus {
    /// Whether `handler` ("" the default) reports recursive read-only mounts (the kubelet's
    /// runtimeHandlerSupportsRecursiveReadOnlyMounts; 1.6 and 1.7 report no handler: none).
    pub fn supports_recursive_read_only(&self, handler: &str) -> bool {
        self.handlers
            .iter()
            .any(|h| h.name == handler && h.recursive_read_only_mounts)
    }

    /// Whether the default runtime handler (named "") reports user namespace support.
    pub fn supports_user_namespaces(&self) -> bool {
        self.handlers
            .iter()
            .any(|h| h.name.is_empty() && h.user_namespaces)
    }

    /// The condition of type `type_`, if the runtime reports it.
    pub fn condition(&self, type_: &str) -> Option<&RuntimeCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

pub type Result<T> = std::result::Result<T, RuntimeError>;

/// A CRI Exec request (runtime.v1 ExecRequest): a command with the streams it uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecRequest {
    pub container_id: String,
    pub cmd: Vec<String>,
    pub tty: bool,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

/// A CRI Attach request (runtime.v1 AttachRequest).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AttachRequest {
    pub container_id: String,
    pub tty: bool,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

fn no_streaming(op: &'static str, target: &str) -> RuntimeError {
    RuntimeError::new(
        op,
        target,
        ErrorKind::Other,
        "this runtime has no streaming server",
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    #[default]
    Tcp,
    Udp,
    Sctp,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PortMapping {
    pub protocol: Protocol,
    pub container_port: i32,
    pub host_port: i32,
    pub host_ip: String,
}

/// CRI PodSandboxConfig, reduced to what nanolet sets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodSandboxConfig {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub attempt: u32,
    pub hostname: String,
    /// Absolute directory for container logs: `<podLogsDir>/<ns>_<name>_<uid>`.
    pub log_directory: String,
    pub host_network: bool,
    pub host_pid: bool,
    pub host_ipc: bool,
    pub dns: Option<DnsConfig>,
    pub port_mappings: Vec<PortMapping>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub cgroup_parent: String,
    /// shareProcessNamespace: containers share the sandbox's PID namespace.
    pub share_pid: bool,
    /// Sandbox (pause) security: the pod-level user, groups, seccomp; privileged when any
    /// container is.
    pub security: ContainerSecurity,
    pub sysctls: BTreeMap<String, String>,
    /// CRI `LinuxPodSandboxConfig.resources`: the pod's totals without its overhead (the
    /// kubelet's `calculateSandboxResources`); containerd shows them as the
    /// `io.kubernetes.cri.sandbox-*` annotations.
    pub resources: Option<LinuxResources>,
    /// CRI `LinuxPodSandboxConfig.overhead`: the pod's `spec.overhead` as resources (the
    /// kubelet's `convertOverheadToLinuxResources`; all zero without one).
    pub overhead: Option<LinuxResources>,
    /// `hostUsers: false`: the pod's own user namespace, this one range for UIDs and GIDs
    /// (CRI `userns_options` mode POD, on the sandbox and each container); None: the host's.
    pub user_namespace: Option<IdMapping>,
    /// CRI `RunPodSandboxRequest.runtime_handler`: the pod's RuntimeClass handler; empty for the
    /// runtime's default (a pod without `runtimeClassName` only).
    pub runtime_handler: String,
}

/// CRI `IDMapping`: `length` IDs from `container_id` inside map to `host_id` on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IdMapping {
    pub host_id: u32,
    pub container_id: u32,
    pub length: u32,
}

/// A runtime handler and what it supports (CRI `StatusResponse.runtime_handlers`; the default
/// handler's name is empty).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuntimeHandler {
    pub name: String,
    pub user_namespaces: bool,
    pub recursive_read_only_mounts: bool,
}

/// CRI MountPropagation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MountPropagation {
    #[default]
    Private,
    HostToContainer,
    Bidirectional,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mount {
    pub container_path: String,
    pub host_path: String,
    pub readonly: bool,
    pub propagation: MountPropagation,
    /// Read-only all the way down (submounts too): `recursiveReadOnly` resolved to true.
    pub recursive_read_only: bool,
}

/// CRI Device: a host device node in the container (from a device plugin's Allocate).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceSpec {
    pub container_path: String,
    pub host_path: String,
    /// cgroup permissions: `r`, `w`, `m` combined.
    pub permissions: String,
}

/// CRI LinuxContainerResources (0 = unset).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LinuxResources {
    pub cpu_period: i64,
    pub cpu_quota: i64,
    pub cpu_shares: i64,
    pub memory_limit_in_bytes: i64,
    pub oom_score_adj: i64,
    /// cgroup v1 memory+swap limit (`memory.memsw.limit_in_bytes`; 0 = unset).
    pub memory_swap_limit_in_bytes: i64,
    /// cgroup v2 files to write as they are (`memory.swap.max`).
    pub unified: std::collections::BTreeMap<String, String>,
    /// Per huge page size of the host, the container's limit (0 when it asks for none).
    pub hugepage_limits: Vec<HugepageLimit>,
}

/// CRI HugepageLimit: `page_size` as the hugetlb controller names it (`2MB`, `1GB`), `limit`
/// in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HugepageLimit {
    pub page_size: String,
    pub limit: u64,
}

/// CRI ContainerConfig, reduced to what nanolet sets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerConfig {
    pub name: String,
    pub attempt: u32,
    pub image: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub working_dir: String,
    pub envs: Vec<(String, String)>,
    pub mounts: Vec<Mount>,
    /// Host devices (device plugins' Allocate responses).
    pub devices: Vec<DeviceSpec>,
    /// Fully qualified CDI device names (device plugins' Allocate responses).
    pub cdi_devices: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Relative to the sandbox's log_directory: `<container>/<restartCount>.log`.
    pub log_path: String,
    pub stdin: bool,
    pub stdin_once: bool,
    pub tty: bool,
    pub resources: Option<LinuxResources>,
    pub security: ContainerSecurity,
    /// An ephemeral container's target: the container ID whose PID namespace it joins (CRI
    /// NamespaceMode TARGET with `target_id`, when its PID mode would be CONTAINER); "" none.
    pub pid_target_id: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxState {
    Ready,
    NotReady,
}

/// The paths the kubelet masks in every container with procMount Default
/// (k8s.io/kubernetes pkg/securitycontext/util.go, `defaultMaskedPaths`), sent in CRI's
/// `masked_paths`: the runtime applies only what it is sent.
pub const DEFAULT_MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/interrupts",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// The paths the kubelet makes read-only in every container with procMount Default
/// (pkg/securitycontext/util.go, `defaultReadonlyPaths`), sent in CRI's `readonly_paths`.
pub const DEFAULT_READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// One entry of ListPodSandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxInfo {
    pub id: String,
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub attempt: u32,
    pub state: SandboxState,
    /// Unix nanoseconds.
    pub created_at: i64,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// PodSandboxStatus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxStatus {
    pub info: SandboxInfo,
    /// Primary pod IP ("" for none; the host IP is used for hostNetwork by the caller).
    pub ip: String,
    pub additional_ips: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    Unknown,
}

/// One entry of ListContainers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerInfo {
    pub id: String,
    pub sandbox_id: String,
    pub name: String,
    pub attempt: u32,
    pub image: String,
    pub image_ref: String,
    pub state: ContainerState,
    /// Unix nanoseconds.
    pub created_at: i64,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// ContainerStatus (times in Unix nanoseconds, 0 = unset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerStatus {
    pub id: String,
    pub name: String,
    pub attempt: u32,
    pub state: ContainerState,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub image: String,
    pub image_ref: String,
    pub reason: String,
    pub message: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub log_path: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInfo {
    pub id: String,
    pub repo_tags: Vec<String>,
    pub repo_digests: Vec<String>,
    pub size: u64,
    /// The image's numeric user, when its config names one (for runAsNonRoot).
    pub uid: Option<i64>,
    /// The image's user name, when it is not numeric.
    pub username: String,
    /// The runtime will not garbage-collect it (CRI `Image.pinned`).
    pub pinned: bool,
}

/// Registry credentials for one pull (CRI `AuthConfig`, runtime.v1 field names). SECRET: the
/// Debug output shows none of the values.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct RegistryAuth {
    pub username: String,
    pub password: String,
    pub identity_token: String,
    pub registry_token: String,
}

impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RegistryAuth(<redacted>)")
    }
}

/// One filesystem's usage as CRI ImageFsInfo reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FsUsage {
    pub mountpoint: String,
    pub used_bytes: Option<u64>,
    pub inodes_used: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecResult {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// One entry of ListContainerStats (CRI ContainerStats; `None` where the runtime gave none).
/// Times are Unix nanoseconds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerStats {
    pub id: String,
    pub name: String,
    pub attempt: u32,
    pub labels: BTreeMap<String, String>,
    pub cpu_time: i64,
    pub usage_core_nano_seconds: Option<u64>,
    pub usage_nano_cores: Option<u64>,
    pub memory_time: i64,
    pub working_set_bytes: Option<u64>,
    pub available_bytes: Option<u64>,
    pub usage_bytes: Option<u64>,
    pub rss_bytes: Option<u64>,
    pub page_faults: Option<u64>,
    pub major_page_faults: Option<u64>,
    pub fs_time: i64,
    pub fs_mountpoint: String,
    pub fs_used_bytes: Option<u64>,
    pub fs_inodes_used: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeVersion {
    pub runtime_name: String,
    pub runtime_version: String,
    pub runtime_api_version: String,
}

/// A lifecycle event pushed by the runtime: a CRI container event (`GetContainerEvents`,
/// containerd 2) or, where the runtime has none to offer, containerd's native task event
/// (namespace k8s.io). PLEG observes the pod it names; it does not take state from the event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeEvent {
    /// A task (container or sandbox) exited; `id` is the containerd container id == CRI id.
    /// containerd publishes it before its CRI state shows the exit.
    TaskExit { id: String, exit_code: u32 },
    /// A task started.
    TaskStart { id: String },
    /// A CRI container event: sent after the runtime's CRI state changed, so an observation
    /// made after it shows the change. `id` is the container's (or the sandbox's) id,
    /// `pod_uid` the pod's (from the event's sandbox status; empty when the runtime sent none).
    Container {
        id: String,
        pod_uid: String,
        kind: ContainerEventKind,
        /// The pod's sandbox carries nanolet's managed-by label (others' pods on the same
        /// containerd are not nanolet's to observe).
        managed: bool,
    },
    /// The event stream broke; the subscriber should relist (and resubscribe).
    StreamLost,
}

/// CRI `ContainerEventType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerEventKind {
    Created,
    Started,
    Stopped,
    Deleted,
}

/// The CRI verbs nanolet uses, on its own types. Blocking; implementations bound every call
/// with a deadline so a hung runtime cannot wedge a caller forever.
pub trait Runtime: Send + Sync {
    fn version(&self) -> Result<RuntimeVersion>;

    fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<String>;
    fn stop_pod_sandbox(&self, sandbox_id: &str) -> Result<()>;
    fn remove_pod_sandbox(&self, sandbox_id: &str) -> Result<()>;
    fn pod_sandbox_status(&self, sandbox_id: &str) -> Result<SandboxStatus>;
    fn list_pod_sandboxes(&self) -> Result<Vec<SandboxInfo>>;

    fn create_container(
        &self,
        sandbox_id: &str,
        config: &ContainerConfig,
        sandbox_config: &PodSandboxConfig,
    ) -> Result<String>;
    fn start_container(&self, container_id: &str) -> Result<()>;
    /// Stop with a grace period: SIGTERM (or STOPSIGNAL), SIGKILL after `timeout`.
    fn stop_container(&self, container_id: &str, timeout: Duration) -> Result<()>;
    fn remove_container(&self, container_id: &str) -> Result<()>;
    /// Kill (SIGKILL to every process) and delete the runtime task of a container that the
    /// CRI no longer reports as running while its task still exists. containerd 1.6 leaves
    /// this behind when StartContainer is interrupted (the caller killed mid-call): the CRI
    /// marks the container Exited (StartError), its failed cleanup leaves the task running,
    /// CRI StopContainer is a no-op for an Exited container, and RemoveContainer fails with
    /// "cannot delete running task" forever. Returns whether such a task was found and removed;
    /// `Ok(false)` when there is none (or the runtime has no native task API).
    fn remove_orphan_task(&self, container_id: &str) -> Result<bool>;
    fn list_containers(&self) -> Result<Vec<ContainerInfo>>;
    /// The sandboxes labelled with pod `uid` ([`LABEL_POD_UID`]). The CRI implementation asks
    /// the runtime to filter (a label selector), so a pod worker's observation costs the same
    /// at 1 and at 100 pods; the default filters the full list.
    fn list_pod_sandboxes_of_pod(&self, uid: &str) -> Result<Vec<SandboxInfo>> {
        let mut all = self.list_pod_sandboxes()?;
        all.retain(|s| s.labels.get(LABEL_POD_UID).map(String::as_str) == Some(uid));
        Ok(all)
    }
    /// The containers labelled with pod `uid`; see [`Runtime::list_pod_sandboxes_of_pod`].
    fn list_containers_of_pod(&self, uid: &str) -> Result<Vec<ContainerInfo>> {
        let mut all = self.list_containers()?;
        all.retain(|c| c.labels.get(LABEL_POD_UID).map(String::as_str) == Some(uid));
        Ok(all)
    }
    fn container_status(&self, container_id: &str) -> Result<ContainerStatus>;

    /// Ok(None) when the image is not present locally.
    fn image_status(&self, image: &str) -> Result<Option<ImageInfo>>;
    /// Returns the image ref (id/digest).
    fn pull_image(&self, image: &str) -> Result<String>;
    /// PullImage with registry credentials (CRI `AuthConfig`). A runtime without credential
    /// support ignores `auth` (the in-memory fake).
    fn pull_image_with_auth(&self, image: &str, auth: Option<&RegistryAuth>) -> Result<String> {
        let _ = auth;
        self.pull_image(image)
    }
    /// ListImages: every image the runtime has.
    fn list_images(&self) -> Result<Vec<ImageInfo>>;
    /// RemoveImage by id or reference; removing an image that is gone is not an error.
    fn remove_image(&self, image: &str) -> Result<()>;
    /// ImageFsInfo: the filesystem(s) holding images (the kubelet's imagefs signals).
    fn image_fs_info(&self) -> Result<Vec<FsUsage>>;
    /// The runtime's pod sandbox ("pause") image, from verbose CRI Status (containerd's
    /// `sandboxImage`); image GC never removes it. `None` when the runtime does not say.
    fn sandbox_image(&self) -> Option<String> {
        self.status(true).ok().and_then(|s| s.sandbox_image)
    }
    /// CRI Status: the runtime's conditions; with `verbose`, also its sandbox image.
    fn status(&self, verbose: bool) -> Result<RuntimeStatus>;

    fn exec_sync(
        &self,
        container_id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<ExecResult>;

    /// CRI Exec: the URL of the runtime's streaming server that runs `req` once a client
    /// connects to it (WebSocket or SPDY). The default: the runtime does not stream.
    fn exec(&self, req: &ExecRequest) -> Result<String> {
        Err(no_streaming("Exec", &req.container_id))
    }
    /// CRI Attach: the streaming URL attaching to the container's main process.
    fn attach(&self, req: &AttachRequest) -> Result<String> {
        Err(no_streaming("Attach", &req.container_id))
    }
    /// CRI PortForward: the streaming URL forwarding to `ports` in the sandbox's network
    /// namespace (empty: the client names the ports per stream).
    fn port_forward(&self, sandbox_id: &str, _ports: &[u16]) -> Result<String> {
        Err(no_streaming("PortForward", sandbox_id))
    }

    /// ListContainerStats: resource usage of the runtime's containers (for `/stats/summary`
    /// and `/metrics/resource`). The default (used by the fake runtime) reports none.
    fn list_container_stats(&self) -> Result<Vec<ContainerStats>> {
        Ok(vec![])
    }

    /// ReopenContainerLog: the runtime closes and reopens the container's log file (after the
    /// file was rotated away).
    fn reopen_container_log(&self, container_id: &str) -> Result<()>;

    /// UpdateRuntimeConfig: the node's pod CIDR (API-server mode, once the Node has one), as the
    /// kubelet's `updatePodCIDR` sends it.
    fn update_runtime_config(&self, pod_cidr: &str) -> Result<()>;

    /// Subscribe to task lifecycle events. The receiver yields `StreamLost` and then closes if
    /// the stream breaks; callers resubscribe with backoff.
    fn subscribe_events(&self) -> Result<mpsc::Receiver<RuntimeEvent>>;
}
