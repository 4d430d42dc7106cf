//! [`CriRuntime`]: the [`Runtime`] seam implemented over containerd's Unix socket.
//!
//! - CRI `runtime.v1` (our own subset, `proto/runtime.proto`) for every verb.
//! - containerd's native Events service for task start/exit hints.
//!
//! Threading: one dedicated thread drives a current-thread tokio runtime. Each blocking trait
//! call spawns its future onto that runtime and waits for the answer on a std channel, so the
//! caller never needs a tokio context and a dead runtime thread turns into an error instead of
//! a hang. Every call is bounded twice: a gRPC deadline (sent to containerd, which cancels the
//! work) plus a slightly longer local wait as a backstop.
//!
//! The channel connects lazily: `connect` succeeds while containerd is down, the first call
//! dials, and after containerd restarts the next call re-dials. Calls made while containerd is
//! away fail with [`ErrorKind::Unavailable`].

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use prost::Message;
use tonic::transport::{Channel, Endpoint};

use super::{
    ContainerConfig, ContainerInfo, ContainerState, ContainerStatus, ErrorKind, ExecResult,
    FsUsage, GrpcCode, ImageInfo, MountPropagation, PodSandboxConfig, Protocol, Result, Runtime,
    RuntimeError, RuntimeEvent, RuntimeVersion, SandboxInfo, SandboxState, SandboxStatus,
};

/// Generated CRI client and messages. Private: nothing outside this module sees prost types.
#[allow(clippy::all, dead_code, missing_docs)]
mod pb {
    tonic::include_proto!("runtime.v1");
}

use super::containerd_api as ctrd;
use ctrd::services::events::v1::events_client::EventsClient;
use ctrd::services::events::v1::{PublishRequest, SubscribeRequest};
use ctrd::services::tasks::v1::tasks_client::TasksClient;
use ctrd::services::tasks::v1::{DeleteTaskRequest, GetRequest, KillRequest, WaitRequest};
use pb::image_service_client::ImageServiceClient;
use pb::runtime_service_client::RuntimeServiceClient;

/// The containerd namespace the CRI plugin uses.
pub const K8S_NAMESPACE: &str = "k8s.io";
/// The CRI API version we speak.
const CRI_API_VERSION: &str = "v1";
/// Extra time StopContainer may take beyond the grace period (kill, reap, shim cleanup).
const STOP_SLACK: Duration = Duration::from_secs(30);
/// Extra time ExecSync may take beyond the command's own timeout.
const EXEC_SLACK: Duration = Duration::from_secs(5);
/// Backstop beyond the gRPC deadline for the local wait on a reply.
const LOCAL_SLACK: Duration = Duration::from_secs(5);
/// Topic of the probe event used to learn that an event subscription is live.
const PROBE_TOPIC: &str = "/nanolet/subscribe-probe";
/// How often the probe is re-published until the subscription sees it.
const PROBE_INTERVAL: Duration = Duration::from_millis(50);

/// A CRI client on containerd's socket. Cheap to share behind an `Arc`; all methods take `&self`.
pub struct CriRuntime {
    socket: PathBuf,
    channel: Channel,
    handle: tokio::runtime::Handle,
    default_timeout: Duration,
    pull_timeout: Duration,
    shutdown: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for CriRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CriRuntime")
            .field("socket", &self.socket)
            .field("default_timeout", &self.default_timeout)
            .field("pull_timeout", &self.pull_timeout)
            .finish()
    }
}

/// A lazily connecting tonic channel to a Unix socket, driven by `handle`'s runtime: the first
/// call dials, and a call after the peer restarted re-dials. Shared with `images::containerd`.
pub(crate) fn unix_channel(socket: &Path, handle: &tokio::runtime::Handle) -> Channel {
    // The URI is required by tonic but unused: the connector dials the Unix socket.
    let ep = Endpoint::from_static("http://containerd.sock");
    let dial_path = socket.to_path_buf();
    let connector = tower::service_fn(move |_: tonic::transport::Uri| {
        let path = dial_path.clone();
        async move {
            let stream = tokio::net::UnixStream::connect(path).await?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
        }
    });
    // Channel::new spawns its worker onto the current runtime: enter ours first.
    let _guard = handle.enter();
    ep.connect_with_connector_lazy(connector)
}

/// `unix:///run/containerd/containerd.sock` or a bare absolute/relative path.
pub(crate) fn socket_path(endpoint: &str) -> Result<PathBuf> {
    let path = if let Some(rest) = endpoint.strip_prefix("unix://") {
        rest
    } else if endpoint.contains("://") {
        return Err(RuntimeError::new(
            "connect",
            endpoint,
            ErrorKind::Other,
            "only unix:// endpoints (or bare socket paths) are supported",
        ));
    } else {
        endpoint
    };
    if path.is_empty() {
        return Err(RuntimeError::new(
            "connect",
            endpoint,
            ErrorKind::Other,
            "empty socket path",
        ));
    }
    Ok(PathBuf::from(path))
}

/// Maps a gRPC status to our error kinds. `by_id` says the call names one existing object
/// (container/sandbox), where a "not found" message without the NotFound code still means
/// the object is gone (older CRI plugins wrapped some lookups in Unknown).
fn map_status(op: &'static str, target: &str, status: &tonic::Status, by_id: bool) -> RuntimeError {
    use tonic::Code;
    let message = status.message().to_string();
    let kind = match status.code() {
        Code::NotFound => ErrorKind::NotFound,
        Code::Unavailable => ErrorKind::Unavailable,
        Code::DeadlineExceeded => ErrorKind::DeadlineExceeded,
        Code::Unimplemented => ErrorKind::Unimplemented,
        Code::Unknown if by_id && looks_not_found(&message) => ErrorKind::NotFound,
        _ => ErrorKind::Other,
    };
    let message = if message.is_empty() {
        format!("{:?}", status.code())
    } else {
        message
    };
    RuntimeError::new(op, target, kind, message).with_code(grpc_code(status.code()))
}

/// tonic's code as the runtime's [`GrpcCode`].
fn grpc_code(code: tonic::Code) -> GrpcCode {
    use tonic::Code;
    match code {
        Code::Ok => GrpcCode::Ok,
        Code::Cancelled => GrpcCode::Canceled,
        Code::Unknown => GrpcCode::Unknown,
        Code::InvalidArgument => GrpcCode::InvalidArgument,
        Code::DeadlineExceeded => GrpcCode::DeadlineExceeded,
        Code::NotFound => GrpcCode::NotFound,
        Code::AlreadyExists => GrpcCode::AlreadyExists,
        Code::PermissionDenied => GrpcCode::PermissionDenied,
        Code::ResourceExhausted => GrpcCode::ResourceExhausted,
        Code::FailedPrecondition => GrpcCode::FailedPrecondition,
        Code::Aborted => GrpcCode::Aborted,
        Code::OutOfRange => GrpcCode::OutOfRange,
        Code::Unimplemented => GrpcCode::Unimplemented,
        Code::Internal => GrpcCode::Internal,
        Code::Unavailable => GrpcCode::Unavailable,
        Code::DataLoss => GrpcCode::DataLoss,
        Code::Unauthenticated => GrpcCode::Unauthenticated,
    }
}

/// The sandbox image in the CRI plugin's configuration (verbose Status `info["config"]`):
/// `sandboxImage` (containerd 1.6, 1.7), else the pinned `sandbox` image (2.x, where it moved
/// to `pinned_images`).
fn sandbox_image_of(config: &str) -> Option<String> {
    let config: serde_json::Value = serde_json::from_str(config).ok()?;
    let pinned = ["PinnedImages", "pinnedImages", "pinned_images"]
        .iter()
        .find_map(|k| config.get(*k))
        .and_then(|p| p.get("sandbox"));
    config
        .get("sandboxImage")
        .or(pinned)
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .map(String::from)
}

fn looks_not_found(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    // containerd's errdefs text for ErrNotFound is "not found"; the CRI store says "does not exist".
    m.ends_with(": not found") || m.contains("does not exist") || m == "not found"
}

/// Whole seconds for a CRI timeout field, rounding up so a sub-second grace is not "0 = now".
fn ceil_secs(d: Duration) -> i64 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i64::try_from(secs).unwrap_or(i64::MAX)
}

fn with_deadline<T>(msg: T, deadline: Duration) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.set_timeout(deadline);
    req
}

fn with_namespace<T>(msg: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut().insert(
        "containerd-namespace",
        tonic::metadata::MetadataValue::from_static(K8S_NAMESPACE),
    );
    req
}

/// A call whose target may be gone: NotFound is `Ok(None)`.
fn not_found_ok<T>(
    r: std::result::Result<T, tonic::Status>,
) -> std::result::Result<Option<T>, tonic::Status> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(s) if s.code() == tonic::Code::NotFound => Ok(None),
        Err(s) => Err(s),
    }
}

fn with_namespace_deadline<T>(msg: T, deadline: Duration) -> tonic::Request<T> {
    let mut req = with_namespace(msg);
    req.set_timeout(deadline);
    req
}

impl CriRuntime {
    /// Creates the client. Does not dial: the channel connects on first use and re-dials after
    /// containerd restarts, so this only fails for a malformed endpoint or if the runtime thread
    /// cannot be started.
    pub fn connect(endpoint: &str, default_timeout: Duration) -> Result<Self> {
        let socket = socket_path(endpoint)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| {
                RuntimeError::new(
                    "connect",
                    endpoint,
                    ErrorKind::Other,
                    format!("tokio runtime: {e}"),
                )
            })?;
        let handle = rt.handle().clone();

        let channel = unix_channel(&socket, &handle);

        let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("cri-runtime".into())
            .spawn(move || {
                rt.block_on(async {
                    let _ = shutdown_rx.await;
                });
                // Dropping the runtime cancels remaining tasks (event pumps, in-flight calls).
                drop(rt);
            })
            .map_err(|e| {
                RuntimeError::new(
                    "connect",
                    endpoint,
                    ErrorKind::Other,
                    format!("spawning runtime thread: {e}"),
                )
            })?;

        tracing::debug!(socket = %socket.display(), "CRI client created");
        Ok(CriRuntime {
            socket,
            channel,
            handle,
            default_timeout,
            pull_timeout: default_timeout.max(Duration::from_secs(300)),
            shutdown: Mutex::new(Some(shutdown_tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The socket this client dials.
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// Deadline for PullImage (default: max(default_timeout, 5 min)).
    pub fn set_pull_timeout(&mut self, timeout: Duration) {
        self.pull_timeout = timeout;
    }

    fn runtime_client(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(self.channel.clone())
    }

    fn image_client(&self) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(self.channel.clone())
    }

    /// Runs `fut` on the runtime thread and waits for it, bounded by `deadline` (+ slack).
    fn run<T, Fut>(
        &self,
        op: &'static str,
        target: &str,
        deadline: Duration,
        by_id: bool,
        fut: Fut,
    ) -> Result<T>
    where
        T: Send + 'static,
        Fut: Future<Output = std::result::Result<T, tonic::Status>> + Send + 'static,
    {
        let (tx, rx) = mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let out = tokio::time::timeout(deadline, fut).await;
            let _ = tx.send(out);
        });
        match rx.recv_timeout(deadline + LOCAL_SLACK) {
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(status))) => {
                let err = map_status(op, target, &status, by_id);
                tracing::debug!(op, target, kind = ?err.kind, message = %err.message, "CRI call failed");
                Err(err)
            }
            Ok(Err(_)) | Err(mpsc::RecvTimeoutError::Timeout) => Err(RuntimeError::new(
                op,
                target,
                ErrorKind::DeadlineExceeded,
                format!("no reply within {deadline:?}"),
            )),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(RuntimeError::new(
                op,
                target,
                ErrorKind::Unavailable,
                "CRI client runtime thread is gone",
            )),
        }
    }

    /// ListPodSandbox with an optional filter (None: every sandbox).
    fn list_sandboxes_filtered(
        &self,
        filter: Option<pb::PodSandboxFilter>,
    ) -> Result<Vec<SandboxInfo>> {
        let mut c = self.runtime_client();
        let req = with_deadline(pb::ListPodSandboxRequest { filter }, self.default_timeout);
        let resp = self.run(
            "ListPodSandbox",
            "sandboxes",
            self.default_timeout,
            false,
            async move { c.list_pod_sandbox(req).await.map(|r| r.into_inner()) },
        )?;
        Ok(resp
            .items
            .into_iter()
            .map(|s| {
                sandbox_info(
                    s.id,
                    s.metadata,
                    s.state,
                    s.created_at,
                    s.labels,
                    s.annotations,
                )
            })
            .collect())
    }

    /// ListContainers with an optional filter (None: every container).
    fn list_containers_filtered(
        &self,
        filter: Option<pb::ContainerFilter>,
    ) -> Result<Vec<ContainerInfo>> {
        let mut c = self.runtime_client();
        let req = with_deadline(pb::ListContainersRequest { filter }, self.default_timeout);
        let resp = self.run(
            "ListContainers",
            "containers",
            self.default_timeout,
            false,
            async move { c.list_containers(req).await.map(|r| r.into_inner()) },
        )?;
        Ok(resp
            .containers
            .into_iter()
            .map(|c| {
                let md = c.metadata.unwrap_or_default();
                ContainerInfo {
                    id: c.id,
                    sandbox_id: c.pod_sandbox_id,
                    name: md.name,
                    attempt: md.attempt,
                    image: image_name(c.image),
                    image_ref: c.image_ref,
                    state: container_state(c.state),
                    created_at: c.created_at,
                    labels: c.labels,
                    annotations: c.annotations,
                }
            })
            .collect())
    }

    /// ReopenContainerLog: ask the runtime to reopen the container's log file (after rotation).
    pub fn reopen_container_log(&self, container_id: &str) -> Result<()> {
        let mut c = self.runtime_client();
        let req = with_deadline(
            pb::ReopenContainerLogRequest {
                container_id: container_id.to_string(),
            },
            self.default_timeout,
        );
        self.run(
            "ReopenContainerLog",
            &format!("container {container_id}"),
            self.default_timeout,
            true,
            async move { c.reopen_container_log(req).await.map(|_| ()) },
        )
    }

    /// UpdateRuntimeConfig with the node's pod CIDR.
    pub fn update_runtime_config(&self, pod_cidr: &str) -> Result<()> {
        let mut c = self.runtime_client();
        let req = with_deadline(
            pb::UpdateRuntimeConfigRequest {
                runtime_config: Some(pb::RuntimeConfig {
                    network_config: Some(pb::NetworkConfig {
                        pod_cidr: pod_cidr.to_string(),
                    }),
                }),
            },
            self.default_timeout,
        );
        self.run(
            "UpdateRuntimeConfig",
            &format!("pod CIDR {pod_cidr}"),
            self.default_timeout,
            false,
            async move { c.update_runtime_config(req).await.map(|_| ()) },
        )
    }

    /// ListImages (all local images in the k8s.io namespace).
    pub fn list_images(&self) -> Result<Vec<ImageInfo>> {
        let mut c = self.image_client();
        let req = with_deadline(pb::ListImagesRequest { filter: None }, self.default_timeout);
        let resp = self.run(
            "ListImages",
            "images",
            self.default_timeout,
            false,
            async move { c.list_images(req).await.map(|r| r.into_inner()) },
        )?;
        Ok(resp.images.into_iter().map(image_info).collect())
    }
}

impl Drop for CriRuntime {
    fn drop(&mut self) {
        if let Ok(mut tx) = self.shutdown.lock() {
            if let Some(tx) = tx.take() {
                let _ = tx.send(());
            }
        }
        if let Ok(mut t) = self.thread.lock() {
            if let Some(t) = t.take() {
                // Never join from the runtime thread itself (would deadlock).
                if t.thread().id() != std::thread::current().id() {
                    let _ = t.join();
                }
            }
        }
    }
}

// ---- conversions: domain -> CRI ----

fn ns_mode(host: bool) -> i32 {
    if host {
        pb::NamespaceMode::Node as i32
    } else {
        pb::NamespaceMode::Pod as i32
    }
}

/// `hostUsers: false`: mode POD with the pod's range for UIDs and GIDs (the kubelet's
/// GetOrCreateUserNamespaceMappings); otherwise mode NODE, which the kubelet sends explicitly
/// (`runtimeapi.NamespaceMode_NODE` from its user namespace manager when hostUsers is unset).
fn userns_pb(m: Option<super::IdMapping>) -> Option<pb::UserNamespace> {
    let Some(m) = m else {
        return Some(pb::UserNamespace {
            mode: pb::NamespaceMode::Node as i32,
            ..Default::default()
        });
    };
    let map = pb::IdMapping {
        host_id: m.host_id,
        container_id: m.container_id,
        length: m.length,
    };
    Some(pb::UserNamespace {
        mode: pb::NamespaceMode::Pod as i32,
        uids: vec![map],
        gids: vec![map],
    })
}

fn sandbox_config_pb(c: &PodSandboxConfig) -> pb::PodSandboxConfig {
    pb::PodSandboxConfig {
        metadata: Some(pb::PodSandboxMetadata {
            name: c.name.clone(),
            uid: c.uid.clone(),
            namespace: c.namespace.clone(),
            attempt: c.attempt,
        }),
        hostname: c.hostname.clone(),
        log_directory: c.log_directory.clone(),
        dns_config: c.dns.as_ref().map(|d| pb::DnsConfig {
            servers: d.servers.clone(),
            searches: d.searches.clone(),
            options: d.options.clone(),
        }),
        port_mappings: c
            .port_mappings
            .iter()
            .map(|p| pb::PortMapping {
                protocol: match p.protocol {
                    Protocol::Tcp => pb::Protocol::Tcp as i32,
                    Protocol::Udp => pb::Protocol::Udp as i32,
                    Protocol::Sctp => pb::Protocol::Sctp as i32,
                },
                container_port: p.container_port,
                host_port: p.host_port,
                host_ip: p.host_ip.clone(),
            })
            .collect(),
        labels: c.labels.clone(),
        annotations: c.annotations.clone(),
        linux: Some(pb::LinuxPodSandboxConfig {
            cgroup_parent: c.cgroup_parent.clone(),
            security_context: Some(pb::LinuxSandboxSecurityContext {
                namespace_options: Some(pb::NamespaceOption {
                    network: ns_mode(c.host_network),
                    pid: ns_mode(c.host_pid),
                    ipc: ns_mode(c.host_ipc),
                    target_id: String::new(),
                    userns_options: userns_pb(c.user_namespace),
                }),
                run_as_user: c.security.run_as_user.map(|value| pb::Int64Value { value }),
                run_as_group: c
                    .security
                    .run_as_group
                    .map(|value| pb::Int64Value { value }),
                supplemental_groups: c.security.supplemental_groups.clone(),
                privileged: c.security.privileged,
                seccomp: c.security.seccomp.as_ref().map(seccomp_pb),
                apparmor: c.security.apparmor.as_ref().map(seccomp_pb),
                selinux_options: c.security.selinux.as_ref().map(selinux_pb),
                ..Default::default()
            }),
            sysctls: c.sysctls.clone(),
            overhead: c.overhead.as_ref().map(resources_pb),
            resources: c.resources.as_ref().map(resources_pb),
        }),
    }
}

fn resources_pb(r: &super::LinuxResources) -> pb::LinuxContainerResources {
    pb::LinuxContainerResources {
        cpu_period: r.cpu_period,
        cpu_quota: r.cpu_quota,
        cpu_shares: r.cpu_shares,
        memory_limit_in_bytes: r.memory_limit_in_bytes,
        oom_score_adj: r.oom_score_adj,
        memory_swap_limit_in_bytes: r.memory_swap_limit_in_bytes,
        unified: r.unified.clone().into_iter().collect(),
        hugepage_limits: r
            .hugepage_limits
            .iter()
            .map(|h| pb::HugepageLimit {
                page_size: h.page_size.clone(),
                limit: h.limit,
            })
            .collect(),
        ..Default::default()
    }
}

fn mount_pb(m: &super::Mount) -> pb::Mount {
    pb::Mount {
        container_path: m.container_path.clone(),
        host_path: m.host_path.clone(),
        readonly: m.readonly,
        recursive_read_only: m.recursive_read_only,
        propagation: match m.propagation {
            MountPropagation::Private => pb::MountPropagation::PropagationPrivate as i32,
            MountPropagation::HostToContainer => {
                pb::MountPropagation::PropagationHostToContainer as i32
            }
            MountPropagation::Bidirectional => {
                pb::MountPropagation::PropagationBidirectional as i32
            }
        },
        ..Default::default()
    }
}

fn container_config_pb(c: &ContainerConfig, sandbox: &PodSandboxConfig) -> pb::ContainerConfig {
    // Containers follow the pod's namespaces; a non-hostPID container gets its own PID
    // namespace like the kubelet does (shareProcessNamespace is not supported).
    // An ephemeral container with a target joins that container's PID namespace
    // (kuberuntime_container_linux.go: TARGET only where the mode would be CONTAINER).
    let (pid, target_id) = if sandbox.host_pid {
        (pb::NamespaceMode::Node, String::new())
    } else if sandbox.share_pid {
        (pb::NamespaceMode::Pod, String::new())
    } else if !c.pid_target_id.is_empty() {
        (pb::NamespaceMode::Target, c.pid_target_id.clone())
    } else {
        (pb::NamespaceMode::Container, String::new())
    };
    let ns = pb::NamespaceOption {
        network: ns_mode(sandbox.host_network),
        pid: pid as i32,
        ipc: ns_mode(sandbox.host_ipc),
        target_id,
        userns_options: userns_pb(sandbox.user_namespace),
    };
    pb::ContainerConfig {
        metadata: Some(pb::ContainerMetadata {
            name: c.name.clone(),
            attempt: c.attempt,
        }),
        image: Some(pb::ImageSpec {
            image: c.image.clone(),
            ..Default::default()
        }),
        command: c.command.clone(),
        args: c.args.clone(),
        working_dir: c.working_dir.clone(),
        envs: c
            .envs
            .iter()
            .map(|(k, v)| pb::KeyValue {
                key: k.clone(),
                value: v.clone(),
            })
            .collect(),
        mounts: c.mounts.iter().map(mount_pb).collect(),
        devices: c
            .devices
            .iter()
            .map(|d| pb::Device {
                container_path: d.container_path.clone(),
                host_path: d.host_path.clone(),
                permissions: d.permissions.clone(),
            })
            .collect(),
        cdi_devices: c
            .cdi_devices
            .iter()
            .map(|name| pb::CdiDevice { name: name.clone() })
            .collect(),
        labels: c.labels.clone(),
        annotations: c.annotations.clone(),
        log_path: c.log_path.clone(),
        stdin: c.stdin,
        stdin_once: c.stdin_once,
        tty: c.tty,
        linux: Some(pb::LinuxContainerConfig {
            resources: c.resources.as_ref().map(resources_pb),
            security_context: Some(container_security_pb(c, ns)),
        }),
    }
}

/// The container's CRI security context, as the kubelet's determineEffectiveSecurityContext
/// fills it (namespaces from the sandbox).
fn container_security_pb(
    c: &ContainerConfig,
    ns: pb::NamespaceOption,
) -> pb::LinuxContainerSecurityContext {
    pb::LinuxContainerSecurityContext {
        namespace_options: Some(ns),
        run_as_user: c.security.run_as_user.map(|value| pb::Int64Value { value }),
        run_as_group: c
            .security
            .run_as_group
            .map(|value| pb::Int64Value { value }),
        supplemental_groups: c.security.supplemental_groups.clone(),
        privileged: c.security.privileged,
        capabilities: (!c.security.add_capabilities.is_empty()
            || !c.security.drop_capabilities.is_empty())
        .then(|| pb::Capability {
            add_capabilities: c.security.add_capabilities.clone(),
            drop_capabilities: c.security.drop_capabilities.clone(),
        }),
        readonly_rootfs: c.security.readonly_rootfs,
        no_new_privs: c.security.no_new_privs,
        seccomp: c.security.seccomp.as_ref().map(seccomp_pb),
        apparmor: c.security.apparmor.as_ref().map(seccomp_pb),
        // As the kubelet: the deprecated string too, for runtimes that read only it.
        apparmor_profile: c
            .security
            .apparmor
            .as_ref()
            .map(apparmor_legacy)
            .unwrap_or_default(),
        selinux_options: c.security.selinux.as_ref().map(selinux_pb),
        // procMount Unmasked is refused at admission, so always the Default lists.
        masked_paths: super::DEFAULT_MASKED_PATHS
            .iter()
            .map(|p| p.to_string())
            .collect(),
        readonly_paths: super::DEFAULT_READONLY_PATHS
            .iter()
            .map(|p| p.to_string())
            .collect(),
        ..Default::default()
    }
}

// ---- conversions: CRI -> domain ----

/// A CRI label selector for one pod's sandboxes or containers (containerd filters server-side,
/// so a pod worker's observation does not decode every pod's objects).
fn pod_uid_selector(uid: &str) -> std::collections::BTreeMap<String, String> {
    std::collections::BTreeMap::from([(super::LABEL_POD_UID.to_string(), uid.to_string())])
}

fn sandbox_state(s: i32) -> SandboxState {
    if s == pb::PodSandboxState::SandboxReady as i32 {
        SandboxState::Ready
    } else {
        SandboxState::NotReady
    }
}

fn container_state(s: i32) -> ContainerState {
    match pb::ContainerState::try_from(s) {
        Ok(pb::ContainerState::ContainerCreated) => ContainerState::Created,
        Ok(pb::ContainerState::ContainerRunning) => ContainerState::Running,
        Ok(pb::ContainerState::ContainerExited) => ContainerState::Exited,
        _ => ContainerState::Unknown,
    }
}

fn sandbox_info(
    id: String,
    md: Option<pb::PodSandboxMetadata>,
    state: i32,
    created_at: i64,
    labels: std::collections::BTreeMap<String, String>,
    annotations: std::collections::BTreeMap<String, String>,
) -> SandboxInfo {
    let md = md.unwrap_or_default();
    SandboxInfo {
        id,
        name: md.name,
        namespace: md.namespace,
        uid: md.uid,
        attempt: md.attempt,
        state: sandbox_state(state),
        created_at,
        labels,
        annotations,
    }
}

fn image_info(i: pb::Image) -> ImageInfo {
    ImageInfo {
        id: i.id,
        repo_tags: i.repo_tags,
        repo_digests: i.repo_digests,
        size: i.size,
        uid: i.uid.map(|u| u.value),
        username: i.username,
        pinned: i.pinned,
    }
}

fn selinux_pb(o: &[String; 4]) -> pb::SeLinuxOption {
    pb::SeLinuxOption {
        user: o[0].clone(),
        role: o[1].clone(),
        r#type: o[2].clone(),
        level: o[3].clone(),
    }
}

/// The deprecated `apparmor_profile` string: `runtime/default`, `unconfined`,
/// `localhost/<name>` (the kubelet's legacy annotation values).
fn apparmor_legacy(p: &super::SecurityProfile) -> String {
    match p {
        super::SecurityProfile::RuntimeDefault => "runtime/default".into(),
        super::SecurityProfile::Unconfined => "unconfined".into(),
        super::SecurityProfile::Localhost(name) => format!("localhost/{name}"),
    }
}

/// A CRI SecurityProfile (seccomp or AppArmor).
fn seccomp_pb(s: &super::SecurityProfile) -> pb::SecurityProfile {
    use pb::security_profile::ProfileType;
    match s {
        super::SecurityProfile::RuntimeDefault => pb::SecurityProfile {
            profile_type: ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        },
        super::SecurityProfile::Unconfined => pb::SecurityProfile {
            profile_type: ProfileType::Unconfined as i32,
            localhost_ref: String::new(),
        },
        super::SecurityProfile::Localhost(path) => pb::SecurityProfile {
            profile_type: ProfileType::Localhost as i32,
            localhost_ref: path.clone(),
        },
    }
}

fn image_name(spec: Option<pb::ImageSpec>) -> String {
    spec.map(|s| s.image).unwrap_or_default()
}

// ---- events ----

fn decode_event(env: &ctrd::types::Envelope) -> Option<RuntimeEvent> {
    if env.namespace != K8S_NAMESPACE {
        return None;
    }
    let any = env.event.as_ref()?;
    match env.topic.as_str() {
        "/tasks/exit" => match ctrd::events::TaskExit::decode(any.value.as_slice()) {
            // Exec processes exit too (id = exec id); only the init process ends the container.
            Ok(ev) if ev.id.is_empty() || ev.id == ev.container_id => {
                Some(RuntimeEvent::TaskExit {
                    id: ev.container_id,
                    exit_code: ev.exit_status,
                })
            }
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(topic = %env.topic, error = %e, "undecodable containerd event");
                None
            }
        },
        "/tasks/start" => match ctrd::events::TaskStart::decode(any.value.as_slice()) {
            Ok(ev) => Some(RuntimeEvent::TaskStart {
                id: ev.container_id,
            }),
            Err(e) => {
                tracing::warn!(topic = %env.topic, error = %e, "undecodable containerd event");
                None
            }
        },
        _ => None,
    }
}

impl Runtime for CriRuntime {
    fn reopen_container_log(&self, container_id: &str) -> Result<()> {
        CriRuntime::reopen_container_log(self, container_id)
    }

    fn update_runtime_config(&self, pod_cidr: &str) -> Result<()> {
        CriRuntime::update_runtime_config(self, pod_cidr)
    }

    fn version(&self) -> Result<RuntimeVersion> {
        let mut c = self.runtime_client();
        let req = with_deadline(
            pb::VersionRequest {
                version: CRI_API_VERSION.into(),
            },
            self.default_timeout,
        );
        let target = self.socket.display().to_string();
        let v = self.run(
            "Version",
            &target,
            self.default_timeout,
            false,
            async move { c.version(req).await.map(|r| r.into_inner()) },
        )?;
        Ok(RuntimeVersion {
            runtime_name: v.runtime_name,
            runtime_version: v.runtime_version,
            runtime_api_version: v.runtime_api_version,
        })
    }

    fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<String> {
        let mut c = self.runtime_client();
        let req = with_deadline(
            pb::RunPodSandboxRequest {
                config: Some(sandbox_config_pb(config)),
                runtime_handler: config.runtime_handler.clone(),
            },
            self.default_timeout,
        );
        let target = format!("pod {}/{}", config.namespace, config.name);
        let id = self.run(
            "RunPodSandbox",
            &target,
            self.default_timeout,
            false,
            async move {
                c.run_pod_sandbox(req)
                    .await
                    .map(|r| r.into_inner().pod_sandbox_id)
            },
        )?;
        tracing::debug!(pod = %format!("{}/{}", config.namespace, config.name), sandbox = %id, "sandbox running");
        Ok(id)
    }

    fn stop_pod_sandbox(&self, sandbox_id: &str) -> Result<()> {
        let mut c = self.runtime_client();
        let req = with_deadline(
            pb::StopPodSandboxRequest {
                pod_sandbox_id: sandbox_id.into(),
            },
            self.default_timeout,
        );
        self.run(
            "StopPodSandbox",
            &format!("sandbox {sandbox_id}"),
            self.default_timeout,
            true,
            async move { c.stop_pod_sandbox(req).await.map(|_| ()) },
        )
    }

    fn remove_pod_sandbox(&self, sandbox_id: &str) -> Result<()> {
        let mut c = self.runtime_client();
        let req = with_deadline(
            pb::RemovePodSandboxRequest {
                pod_sandbox_id: sandbox_id.into(),
            },
            self.default_timeout,
        );
        self.run(
            "RemovePodSandbox",
            &format!("sandbox {sandbox_id}"),
            self.default_timeout,
            true,
            async move { c.remove_pod_sandbox(req).await.map(|_| ()) },
        )
    }

    fn pod_sandbox_status(&self, sandbox_id: &str) -> Result<SandboxStatus> {
        let mut c = self.runtime_client();
        let req = with_deadline(
            pb::PodSandboxStatusRequest {
                pod_sandbox_id: sandbox_id.into(),
                verbose: false,
            },
            self.default_timeout,
        );
        let target = format!("sandbox {sandbox_id}");
        let resp = self.run(
            "PodSandboxStatus",
            &target,
            self.default_timeout,
            true,
            async move { c.pod_sandbox_status(req).await.map(|r| r.into_inner()) },
        )?;
        let s = resp.status.ok_or_else(|| {
            RuntimeError::new(
                "PodSandboxStatus",
                target,
                ErrorKind::Other,
                "reply without status",
            )
        })?;
        let network = s.network.unwrap_or_default();
        Ok(SandboxStatus {
            info: sandbox_info(
                s.id,
                s.metadata,
                s.state,
                s.created_at,
                s.labels,
                s.annotations,
            ),
            ip: network.ip,
            additional_ips: network.additional_ips.into_iter().map(|p| p.ip).collect(),
        })
    }

    fn list_pod_sandboxes(&self) -> Result<Vec<SandboxInfo>> {
        self.list_sandboxes_filtered(None)
    }

    fn list_pod_sandboxes_of_pod(&self, uid: &str) -> Result<Vec<SandboxInfo>> {
        self.list_sandboxes_filtered(Some(pb::PodSandboxFilter {
            label_selector: pod_uid_selector(uid),
            ..Default::default()
        }))
    }

    fn list_containers_of_pod(&self, uid: &str) -> Result<Vec<ContainerInfo>> {
        self.list_containers_filtered(Some(pb::ContainerFilter {
            label_selector: pod_uid_selector(uid),
            ..Default::default()
        }))
    }

    fn create_container(
        &self,
        sandbox_id: &str,
        config: &ContainerConfig,
        sandbox_config: &PodSandboxConfig,
    ) -> Result<String> {
        let mut c = self.runtime_client();
        let req = with_deadline(
            pb::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.into(),
                config: Some(container_config_pb(config, sandbox_config)),
                sandbox_config: Some(sandbox_config_pb(sandbox_config)),
            },
            self.default_timeout,
        );
        let target = format!(
            "container {} of pod {}/{}",
            config.name, sandbox_config.namespace, sandbox_config.name
        );
        self.run(
            "CreateContainer",
            &target,
            self.default_timeout,
            false,
            async move {
                c.create_container(req)
                    .await
                    .map(|r| r.into_inner().container_id)
            },
        )
    }

    fn start_container(&self, container_id: &str) -> Result<()> {
        let mut c = self.runtime_client();
        let req = with_deadline(
            pb::StartContainerRequest {
                container_id: container_id.into(),
            },
            self.default_timeout,
        );
        self.run(
            "StartContainer",
            &format!("container {container_id}"),
            self.default_timeout,
            true,
            async move { c.start_container(req).await.map(|_| ()) },
        )
    }

    fn stop_container(&self, container_id: &str, timeout: Duration) -> Result<()> {
        let mut c = self.runtime_client();
        let deadline = timeout + STOP_SLACK;
        let req = with_deadline(
            pb::StopContainerRequest {
                container_id: container_id.into(),
                timeout: ceil_secs(timeout),
            },
            deadline,
        );
        self.run(
            "StopContainer",
            &format!("container {container_id}"),
            deadline,
            true,
            async move { c.stop_container(req).await.map(|_| ()) },
        )
    }

    fn remove_container(&self, container_id: &str) -> Result<()> {
        let mut c = self.runtime_client();
        let req = with_deadline(
            pb::RemoveContainerRequest {
                container_id: container_id.into(),
            },
            self.default_timeout,
        );
        self.run(
            "RemoveContainer",
            &format!("container {container_id}"),
            self.default_timeout,
            true,
            async move { c.remove_container(req).await.map(|_| ()) },
        )
    }

    /// containerd's tasks API in namespace k8s.io (the CRI has no verb for this): Get, and if the
    /// task exists, Kill(SIGKILL, all) unless it is already stopped, Wait for its exit, Delete.
    fn remove_orphan_task(&self, container_id: &str) -> Result<bool> {
        let mut tasks = TasksClient::new(self.channel.clone());
        let deadline = self.default_timeout;
        let id = container_id.to_string();
        self.run(
            "RemoveOrphanTask",
            &format!("container {container_id}"),
            // Get + Kill + Wait + Delete (+ Get), each bounded by the deadline.
            deadline * 5,
            true,
            async move {
                let get = || GetRequest {
                    container_id: id.clone(),
                    exec_id: String::new(),
                };
                let Some(got) =
                    not_found_ok(tasks.get(with_namespace_deadline(get(), deadline)).await)?
                else {
                    return Ok(false);
                };
                let stopped = got
                    .into_inner()
                    .process
                    .is_some_and(|p| p.status == ctrd::v1::types::Status::Stopped as i32);
                if !stopped {
                    let kill = KillRequest {
                        container_id: id.clone(),
                        exec_id: String::new(),
                        signal: 9,
                        all: true,
                    };
                    not_found_ok(tasks.kill(with_namespace_deadline(kill, deadline)).await)?;
                    let wait = WaitRequest {
                        container_id: id.clone(),
                        exec_id: String::new(),
                    };
                    not_found_ok(tasks.wait(with_namespace_deadline(wait, deadline)).await)?;
                }
                let delete = DeleteTaskRequest {
                    container_id: id.clone(),
                };
                match tasks
                    .delete(with_namespace_deadline(delete, deadline))
                    .await
                {
                    Ok(_) => Ok(true),
                    // The CRI plugin handles the same exit and deletes the task too; losing
                    // that race can fail ours ("ttrpc: closed"). Gone is gone.
                    Err(s) => match not_found_ok(
                        tasks.get(with_namespace_deadline(get(), deadline)).await,
                    ) {
                        Ok(None) => Ok(true),
                        _ if s.code() == tonic::Code::NotFound => Ok(true),
                        _ => Err(s),
                    },
                }
            },
        )
    }

    fn list_containers(&self) -> Result<Vec<ContainerInfo>> {
        self.list_containers_filtered(None)
    }

    fn list_container_stats(&self) -> Result<Vec<super::ContainerStats>> {
        let mut c = self.runtime_client();
        let req = with_deadline(
            pb::ListContainerStatsRequest { filter: None },
            self.default_timeout,
        );
        let resp = self.run(
            "ListContainerStats",
            "containers",
            self.default_timeout,
            false,
            async move { c.list_container_stats(req).await.map(|r| r.into_inner()) },
        )?;
        let v = |x: Option<pb::UInt64Value>| x.map(|x| x.value);
        Ok(resp
            .stats
            .into_iter()
            .map(|s| {
                let attrs = s.attributes.unwrap_or_default();
                let md = attrs.metadata.unwrap_or_default();
                let cpu = s.cpu.unwrap_or_default();
                let mem = s.memory.unwrap_or_default();
                let fs = s.writable_layer.unwrap_or_default();
                super::ContainerStats {
                    id: attrs.id,
                    name: md.name,
                    attempt: md.attempt,
                    labels: attrs.labels,
                    cpu_time: cpu.timestamp,
                    usage_core_nano_seconds: v(cpu.usage_core_nano_seconds),
                    usage_nano_cores: v(cpu.usage_nano_cores),
                    memory_time: mem.timestamp,
                    working_set_bytes: v(mem.working_set_bytes),
                    available_bytes: v(mem.available_bytes),
                    usage_bytes: v(mem.usage_bytes),
                    rss_bytes: v(mem.rss_bytes),
                    page_faults: v(mem.page_faults),
                    major_page_faults: v(mem.major_page_faults),
                    fs_time: fs.timestamp,
                    fs_mountpoint: fs.fs_id.map(|f| f.mountpoint).unwrap_or_default(),
                    fs_used_bytes: v(fs.used_bytes),
                    fs_inodes_used: v(fs.inodes_used),
                }
            })
            .collect())
    }

    fn container_status(&self, container_id: &str) -> Result<ContainerStatus> {
        let mut c = self.runtime_client();
        let req = with_deadline(
            pb::ContainerStatusRequest {
                container_id: container_id.into(),
                verbose: false,
            },
            self.default_timeout,
        );
        let target = format!("container {container_id}");
        let resp = self.run(
            "ContainerStatus",
            &target,
            self.default_timeout,
            true,
            async move { c.container_status(req).await.map(|r| r.into_inner()) },
        )?;
        let s = resp.status.ok_or_else(|| {
            RuntimeError::new(
                "ContainerStatus",
                target,
                ErrorKind::Other,
                "reply without status",
            )
        })?;
        let md = s.metadata.unwrap_or_default();
        Ok(ContainerStatus {
            id: s.id,
            name: md.name,
            attempt: md.attempt,
            state: container_state(s.state),
            created_at: s.created_at,
            started_at: s.started_at,
            finished_at: s.finished_at,
            exit_code: s.exit_code,
            image: image_name(s.image),
            image_ref: s.image_ref,
            reason: s.reason,
            message: s.message,
            labels: s.labels,
            annotations: s.annotations,
            log_path: s.log_path,
        })
    }

    fn image_status(&self, image: &str) -> Result<Option<ImageInfo>> {
        let mut c = self.image_client();
        let req = with_deadline(
            pb::ImageStatusRequest {
                image: Some(pb::ImageSpec {
                    image: image.to_string(),
                    ..Default::default()
                }),
                verbose: false,
            },
            self.default_timeout,
        );
        let resp = self.run(
            "ImageStatus",
            &format!("image {image}"),
            self.default_timeout,
            false,
            async move { c.image_status(req).await.map(|r| r.into_inner()) },
        )?;
        Ok(resp.image.map(image_info))
    }

    fn pull_image(&self, image: &str) -> Result<String> {
        self.pull_image_with_auth(image, None)
    }

    fn pull_image_with_auth(
        &self,
        image: &str,
        auth: Option<&super::RegistryAuth>,
    ) -> Result<String> {
        let mut c = self.image_client();
        let deadline = self.pull_timeout;
        // server_address stays empty, as the kubelet sends it: containerd then uses the
        // credentials for whichever host (or mirror) it pulls from.
        let auth = auth.map(|a| pb::AuthConfig {
            username: a.username.clone(),
            password: a.password.clone(),
            identity_token: a.identity_token.clone(),
            registry_token: a.registry_token.clone(),
            ..Default::default()
        });
        let req = with_deadline(
            pb::PullImageRequest {
                image: Some(pb::ImageSpec {
                    image: image.to_string(),
                    ..Default::default()
                }),
                auth,
                sandbox_config: None,
            },
            deadline,
        );
        self.run(
            "PullImage",
            &format!("image {image}"),
            deadline,
            false,
            async move { c.pull_image(req).await.map(|r| r.into_inner().image_ref) },
        )
    }

    fn list_images(&self) -> Result<Vec<ImageInfo>> {
        let mut c = self.image_client();
        let req = with_deadline(pb::ListImagesRequest { filter: None }, self.default_timeout);
        let resp = self.run(
            "ListImages",
            "images",
            self.default_timeout,
            false,
            async move { c.list_images(req).await.map(|r| r.into_inner()) },
        )?;
        Ok(resp.images.into_iter().map(image_info).collect())
    }

    fn remove_image(&self, image: &str) -> Result<()> {
        let mut c = self.image_client();
        let req = with_deadline(
            pb::RemoveImageRequest {
                image: Some(pb::ImageSpec {
                    image: image.to_string(),
                    ..Default::default()
                }),
            },
            self.default_timeout,
        );
        self.run(
            "RemoveImage",
            &format!("image {image}"),
            self.default_timeout,
            true,
            async move { c.remove_image(req).await.map(|_| ()) },
        )
        .or_else(|e| if e.is_not_found() { Ok(()) } else { Err(e) })
    }

    fn status(&self, verbose: bool) -> Result<super::RuntimeStatus> {
        let mut c = self.runtime_client();
        let req = with_deadline(pb::StatusRequest { verbose }, self.default_timeout);
        let resp = self.run(
            "Status",
            "runtime",
            self.default_timeout,
            false,
            async move { c.status(req).await.map(|r| r.into_inner()) },
        )?;
        let conditions = resp
            .status
            .map(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .map(|c| super::RuntimeCondition {
                type_: c.r#type,
                status: c.status,
                reason: c.reason,
                message: c.message,
            })
            .collect();
        let handlers = resp
            .runtime_handlers
            .into_iter()
            .map(|h| {
                let f = h.features.unwrap_or_default();
                super::RuntimeHandler {
                    name: h.name,
                    user_namespaces: f.user_namespaces,
                    recursive_read_only_mounts: f.recursive_read_only_mounts,
                }
            })
            .collect();
        Ok(super::RuntimeStatus {
            conditions,
            sandbox_image: resp.info.get("config").and_then(|c| sandbox_image_of(c)),
            handlers,
        })
    }

    fn image_fs_info(&self) -> Result<Vec<FsUsage>> {
        let mut c = self.image_client();
        let req = with_deadline(pb::ImageFsInfoRequest {}, self.default_timeout);
        let resp = self.run(
            "ImageFsInfo",
            "image filesystem",
            self.default_timeout,
            false,
            async move { c.image_fs_info(req).await.map(|r| r.into_inner()) },
        )?;
        Ok(resp
            .image_filesystems
            .into_iter()
            .map(|f| FsUsage {
                mountpoint: f.fs_id.map(|i| i.mountpoint).unwrap_or_default(),
                used_bytes: f.used_bytes.map(|v| v.value),
                inodes_used: f.inodes_used.map(|v| v.value),
            })
            .collect())
    }

    fn exec_sync(
        &self,
        container_id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<ExecResult> {
        let mut c = self.runtime_client();
        let deadline = timeout + EXEC_SLACK;
        // CRI's 0 means "no timeout"; never send that for a bounded call.
        let secs = ceil_secs(timeout).max(1);
        let req = with_deadline(
            pb::ExecSyncRequest {
                container_id: container_id.into(),
                cmd: cmd.to_vec(),
                timeout: secs,
            },
            deadline,
        );
        let r = self.run(
            "ExecSync",
            &format!("container {container_id}"),
            deadline,
            true,
            async move { c.exec_sync(req).await.map(|r| r.into_inner()) },
        )?;
        Ok(ExecResult {
            exit_code: r.exit_code,
            stdout: r.stdout,
            stderr: r.stderr,
        })
    }

    fn exec(&self, req: &super::ExecRequest) -> Result<String> {
        let mut c = self.runtime_client();
        let deadline = self.default_timeout;
        let preq = with_deadline(
            pb::ExecRequest {
                container_id: req.container_id.clone(),
                cmd: req.cmd.clone(),
                tty: req.tty,
                stdin: req.stdin,
                stdout: req.stdout,
                stderr: req.stderr,
            },
            deadline,
        );
        let target = format!("container {}", req.container_id);
        let r = self.run("Exec", &target, deadline, true, async move {
            c.exec(preq).await.map(|r| r.into_inner())
        })?;
        Ok(r.url)
    }

    fn attach(&self, req: &super::AttachRequest) -> Result<String> {
        let mut c = self.runtime_client();
        let deadline = self.default_timeout;
        let preq = with_deadline(
            pb::AttachRequest {
                container_id: req.container_id.clone(),
                stdin: req.stdin,
                tty: req.tty,
                stdout: req.stdout,
                stderr: req.stderr,
            },
            deadline,
        );
        let target = format!("container {}", req.container_id);
        let r = self.run("Attach", &target, deadline, true, async move {
            c.attach(preq).await.map(|r| r.into_inner())
        })?;
        Ok(r.url)
    }

    fn port_forward(&self, sandbox_id: &str, ports: &[u16]) -> Result<String> {
        let mut c = self.runtime_client();
        let deadline = self.default_timeout;
        let preq = with_deadline(
            pb::PortForwardRequest {
                pod_sandbox_id: sandbox_id.into(),
                port: ports.iter().map(|&p| i32::from(p)).collect(),
            },
            deadline,
        );
        let target = format!("sandbox {sandbox_id}");
        let r = self.run("PortForward", &target, deadline, true, async move {
            c.port_forward(preq).await.map(|r| r.into_inner())
        })?;
        Ok(r.url)
    }

    /// Subscribes to the runtime's lifecycle events: CRI container events
    /// (`GetContainerEvents`) where the runtime offers them to every subscriber (containerd
    /// 2, [`cri_events_usable`]), else containerd's native task events. On stream end or
    /// error the receiver yields `StreamLost` and then closes.
    fn subscribe_events(&self) -> Result<mpsc::Receiver<RuntimeEvent>> {
        let usable = match self.version() {
            Ok(v) => cri_events_usable(&v.runtime_name, &v.runtime_version),
            Err(e) => return Err(e),
        };
        if usable {
            match self.subscribe_container_events() {
                Ok(rx) => return Ok(rx),
                Err(e) => {
                    tracing::info!(error = %e, "CRI container events unavailable; using containerd's task events")
                }
            }
        }
        self.subscribe_task_events()
    }
}

/// How long a GetContainerEvents call may take to fail before the stream counts as open: a
/// runtime without the call answers Unimplemented at once, one with it sends nothing (not even
/// headers) until its first event.
const CRI_EVENTS_SETTLE: Duration = Duration::from_millis(100);

/// Whether a runtime's CRI container events can be trusted to reach nanolet: containerd 2
/// broadcasts each event to every GetContainerEvents stream; containerd 1.7 hands each event
/// to one stream only (a shared channel, containerd issue 7318), so another client
/// (`crictl events`, a second agent) would take events from nanolet, and it replays up to
/// 1000 stale ones; containerd 1.6 has no such call. Other CRI runtimes are asked.
pub fn cri_events_usable(runtime_name: &str, runtime_version: &str) -> bool {
    if runtime_name != "containerd" {
        return true;
    }
    let major = runtime_version
        .trim_start_matches('v')
        .split(['.', '-', '+', '~'])
        .next()
        .and_then(|m| m.parse::<u32>().ok());
    major.is_some_and(|m| m >= 2)
}

/// A CRI container event as nanolet's [`RuntimeEvent`]; `None` for an event of a pod nanolet
/// does not manage (another kubelet's on the same containerd) and for CREATED events (the pod
/// worker that created the container observes it; the kubelet's evented PLEG generates no
/// lifecycle event for them either).
fn container_event(ev: &pb::ContainerEventResponse) -> Option<RuntimeEvent> {
    let kind = match pb::ContainerEventType::try_from(ev.container_event_type).ok()? {
        pb::ContainerEventType::ContainerCreatedEvent => return None,
        pb::ContainerEventType::ContainerStartedEvent => super::ContainerEventKind::Started,
        pb::ContainerEventType::ContainerStoppedEvent => super::ContainerEventKind::Stopped,
        pb::ContainerEventType::ContainerDeletedEvent => super::ContainerEventKind::Deleted,
    };
    let sandbox = ev.pod_sandbox_status.as_ref();
    let pod_uid = sandbox
        .and_then(|s| s.metadata.as_ref())
        .map(|m| m.uid.clone())
        .unwrap_or_default();
    Some(RuntimeEvent::Container {
        id: ev.container_id.clone(),
        pod_uid,
        kind,
        managed: sandbox.is_some_and(|s| s.labels.contains_key(super::LABEL_MANAGED_BY)),
    })
}

impl CriRuntime {
    /// CRI `GetContainerEvents`: a stream that stays open until the runtime or the channel
    /// goes away. Fails when the runtime does not implement it.
    fn subscribe_container_events(&self) -> Result<mpsc::Receiver<RuntimeEvent>> {
        const OP: &str = "GetContainerEvents";
        let target = self.socket.display().to_string();
        let (ev_tx, ev_rx) = mpsc::channel();
        let (first_tx, first_rx) = mpsc::sync_channel::<std::result::Result<(), tonic::Status>>(1);
        let mut c = self.runtime_client();
        self.handle.spawn(async move {
            let mut stream = match c.get_container_events(pb::GetEventsRequest {}).await {
                Ok(r) => r.into_inner(),
                Err(status) => {
                    let _ = first_tx.try_send(Err(status));
                    let _ = ev_tx.send(RuntimeEvent::StreamLost);
                    return;
                }
            };
            let _ = first_tx.try_send(Ok(()));
            loop {
                match stream.message().await {
                    Ok(Some(ev)) => {
                        if let Some(ev) = container_event(&ev) {
                            if ev_tx.send(ev).is_err() {
                                return; // receiver dropped: the stream is dropped with us
                            }
                        }
                    }
                    Ok(None) => {
                        tracing::warn!("CRI container event stream ended");
                        break;
                    }
                    Err(status) => {
                        tracing::warn!(code = ?status.code(), message = %status.message(), "CRI container event stream broke");
                        break;
                    }
                }
            }
            let _ = ev_tx.send(RuntimeEvent::StreamLost);
        });
        match first_rx.recv_timeout(CRI_EVENTS_SETTLE) {
            Ok(Err(status)) => Err(map_status(OP, &target, &status, false)),
            Ok(Ok(())) | Err(mpsc::RecvTimeoutError::Timeout) => {
                tracing::info!("using CRI container events (GetContainerEvents) for the PLEG");
                Ok(ev_rx)
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(RuntimeError::new(
                OP,
                target,
                ErrorKind::Unavailable,
                "CRI client runtime thread is gone",
            )),
        }
    }

    /// Subscribes to containerd's `/tasks/exit` and `/tasks/start` events in namespace k8s.io.
    ///
    /// Returns only once the subscription is live (it has seen its own probe event), so any task
    /// event after this returns is delivered. On stream end or error the receiver yields
    /// `StreamLost` and then closes.
    fn subscribe_task_events(&self) -> Result<mpsc::Receiver<RuntimeEvent>> {
        const OP: &str = "SubscribeEvents";
        let target = self.socket.display().to_string();
        let filters = vec![
            format!("namespace==\"{K8S_NAMESPACE}\",topic==\"/tasks/exit\""),
            format!("namespace==\"{K8S_NAMESPACE}\",topic==\"/tasks/start\""),
            format!("topic==\"{PROBE_TOPIC}\""),
        ];
        let (ev_tx, ev_rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::sync_channel::<std::result::Result<(), RuntimeError>>(1);
        // Set once the pump no longer needs probes (subscription live, or failed).
        let live = Arc::new(AtomicBool::new(false));

        // The pump: subscribe, wait for our probe, then forward events until the stream ends.
        let mut events = EventsClient::new(self.channel.clone());
        let live_pump = live.clone();
        let target_pump = target.clone();
        self.handle.spawn(async move {
            let mut stream = match events.subscribe(with_namespace(SubscribeRequest { filters })).await {
                Ok(r) => r.into_inner(),
                Err(status) => {
                    live_pump.store(true, Ordering::SeqCst); // stops the prober
                    let _ = ready_tx.send(Err(map_status(OP, &target_pump, &status, false)));
                    return;
                }
            };
            let mut ready_tx = Some(ready_tx);
            loop {
                match stream.message().await {
                    Ok(Some(env)) => {
                        if env.topic == PROBE_TOPIC {
                            if let Some(tx) = ready_tx.take() {
                                live_pump.store(true, Ordering::SeqCst);
                                let _ = tx.send(Ok(()));
                            }
                            continue;
                        }
                        if let Some(ev) = decode_event(&env) {
                            if ev_tx.send(ev).is_err() {
                                return; // receiver dropped: unsubscribe by dropping the stream
                            }
                        }
                    }
                    Ok(None) => {
                        tracing::warn!("containerd event stream ended");
                        break;
                    }
                    Err(status) => {
                        tracing::warn!(code = ?status.code(), message = %status.message(), "containerd event stream broke");
                        break;
                    }
                }
            }
            live_pump.store(true, Ordering::SeqCst);
            if let Some(tx) = ready_tx.take() {
                let _ = tx.send(Err(RuntimeError::new(OP, target_pump, ErrorKind::Unavailable, "event stream ended")));
            }
            let _ = ev_tx.send(RuntimeEvent::StreamLost);
        });

        // The prober: containerd only answers the Subscribe call with its first event, so we
        // publish a private probe event until the subscription reports it has seen one.
        let mut publisher = EventsClient::new(self.channel.clone());
        let live_probe = live.clone();
        let give_up = self.default_timeout;
        self.handle.spawn(async move {
            let started = tokio::time::Instant::now();
            while !live_probe.load(Ordering::SeqCst) && started.elapsed() < give_up {
                let req = with_namespace(PublishRequest {
                    topic: PROBE_TOPIC.to_string(),
                    event: Some(prost_types::Any { type_url: "nanolet.SubscribeProbe".into(), value: Vec::new() }),
                });
                if let Err(status) = publisher.publish(req).await {
                    tracing::debug!(code = ?status.code(), message = %status.message(), "publishing subscribe probe failed");
                }
                tokio::time::sleep(PROBE_INTERVAL).await;
            }
        });

        match ready_rx.recv_timeout(self.default_timeout + LOCAL_SLACK) {
            Ok(Ok(())) => Ok(ev_rx),
            Ok(Err(e)) => Err(e),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(RuntimeError::new(
                OP,
                target,
                ErrorKind::DeadlineExceeded,
                "subscription did not become live",
            )),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(RuntimeError::new(
                OP,
                target,
                ErrorKind::Unavailable,
                "CRI client runtime thread is gone",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_forms() {
        assert_eq!(
            socket_path("unix:///run/c.sock").ok(),
            Some(PathBuf::from("/run/c.sock"))
        );
        assert_eq!(
            socket_path("/run/c.sock").ok(),
            Some(PathBuf::from("/run/c.sock"))
        );
        assert!(socket_path("tcp://1.2.3.4:5").is_err());
        assert!(socket_path("unix://").is_err());
    }

    #[test]
    fn status_mapping() {
        let s = tonic::Status::not_found(
            "an error occurred when try to find container \"x\": not found",
        );
        assert_eq!(map_status("X", "t", &s, true).kind, ErrorKind::NotFound);
        let s = tonic::Status::unknown("failed to stop container \"x\": not found");
        assert_eq!(map_status("X", "t", &s, true).kind, ErrorKind::NotFound);
        assert_eq!(map_status("X", "t", &s, false).kind, ErrorKind::Other);
        let s = tonic::Status::unavailable("connection refused");
        assert_eq!(map_status("X", "t", &s, false).kind, ErrorKind::Unavailable);
        let s = tonic::Status::deadline_exceeded("slow");
        assert_eq!(
            map_status("X", "t", &s, false).kind,
            ErrorKind::DeadlineExceeded
        );
        let s = tonic::Status::internal("boom");
        let e = map_status("StopContainer", "container abc", &s, true);
        assert_eq!(e.kind, ErrorKind::Other);
        assert!(e.to_string().contains("StopContainer container abc"));
    }

    #[test]
    fn ceil_secs_rounds_up() {
        assert_eq!(ceil_secs(Duration::from_millis(0)), 0);
        assert_eq!(ceil_secs(Duration::from_millis(1)), 1);
        assert_eq!(ceil_secs(Duration::from_secs(30)), 30);
        assert_eq!(ceil_secs(Duration::from_millis(30_500)), 31);
    }

    /// CRI `LinuxPodSandboxConfig.resources` (5) and `.overhead` (4), and
    /// `LinuxContainerResources.hugepage_limits` (8), as upstream's api.proto numbers them:
    /// what the kubelet's applySandboxResources and GetHugepageLimitsFromResources fill.
    #[test]
    fn sandbox_totals_and_hugepage_limits_reach_the_wire() {
        let r = super::super::LinuxResources {
            cpu_period: 100_000,
            cpu_shares: 716,
            memory_limit_in_bytes: 200 << 20,
            hugepage_limits: vec![super::super::HugepageLimit {
                page_size: "2MB".into(),
                limit: 0,
            }],
            ..Default::default()
        };
        let cfg = PodSandboxConfig {
            resources: Some(r.clone()),
            overhead: Some(Default::default()),
            ..Default::default()
        };
        let linux = sandbox_config_pb(&cfg).linux.unwrap_or_default();
        let res = linux.resources.clone().unwrap_or_default();
        assert_eq!(
            (res.cpu_period, res.cpu_shares, res.memory_limit_in_bytes),
            (100_000, 716, 200 << 20)
        );
        assert_eq!(res.hugepage_limits.len(), 1);
        assert_eq!(res.hugepage_limits[0].page_size, "2MB");
        assert_eq!(linux.overhead, Some(pb::LinuxContainerResources::default()));
        // The field numbers on the wire: overhead 4 (tag 0x22), resources 5 (tag 0x2a), each
        // present though empty; hugepage_limits 8 (tag 0x42).
        let empty = Some(pb::LinuxContainerResources::default());
        let only = |overhead, resources| {
            pb::LinuxPodSandboxConfig {
                overhead,
                resources,
                ..Default::default()
            }
            .encode_to_vec()
        };
        assert_eq!(only(empty.clone(), None), [0x22, 0x00]);
        assert_eq!(only(None, empty), [0x2a, 0x00]);
        let hp = pb::LinuxContainerResources {
            hugepage_limits: vec![pb::HugepageLimit::default()],
            ..Default::default()
        };
        assert_eq!(hp.encode_to_vec(), [0x42, 0x00]);
    }

    #[test]
    fn namespaces_follow_host_flags() {
        let cfg = PodSandboxConfig {
            host_network: true,
            ..Default::default()
        };
        let pb = sandbox_config_pb(&cfg);
        let ns = pb
            .linux
            .and_then(|l| l.security_context)
            .and_then(|s| s.namespace_options)
            .unwrap_or_default();
        assert_eq!(ns.network, pb::NamespaceMode::Node as i32);
        assert_eq!(ns.pid, pb::NamespaceMode::Pod as i32);
        assert_eq!(ns.ipc, pb::NamespaceMode::Pod as i32);
    }

    #[test]
    fn masked_and_readonly_paths_and_the_node_user_namespace_are_sent_as_the_kubelet_does() {
        // The kubelet (pkg/kubelet/kuberuntime/security_context.go, determineEffectiveSecurityContext)
        // sends securitycontext.ConvertToRuntimeMaskedPaths/ReadonlyPaths for procMount Default
        // (containerd otherwise applies none: a container could read /proc/kcore), and
        // NamespaceMode NODE for the user namespace of a pod without hostUsers: false.
        let sc = container_config_pb(&ContainerConfig::default(), &PodSandboxConfig::default())
            .linux
            .and_then(|l| l.security_context)
            .unwrap_or_default();
        assert!(sc.masked_paths.iter().any(|p| p == "/proc/kcore"));
        assert_eq!(sc.masked_paths.len(), 12);
        assert_eq!(
            sc.readonly_paths,
            [
                "/proc/bus",
                "/proc/fs",
                "/proc/irq",
                "/proc/sys",
                "/proc/sysrq-trigger"
            ]
        );
        let userns = sc
            .namespace_options
            .and_then(|n| n.userns_options)
            .unwrap_or_default();
        assert_eq!(userns.mode, pb::NamespaceMode::Node as i32);
        assert!(userns.uids.is_empty());
        let sb = sandbox_config_pb(&PodSandboxConfig::default())
            .linux
            .and_then(|l| l.security_context)
            .and_then(|s| s.namespace_options)
            .and_then(|n| n.userns_options)
            .unwrap_or_default();
        assert_eq!(sb.mode, pb::NamespaceMode::Node as i32);
    }

    /// kuberuntime_container_linux.go generateLinuxContainerConfig: an ephemeral container
    /// with a target gets PID NamespaceMode TARGET and the target's ID, but only where its mode
    /// would be CONTAINER (not with hostPID or shareProcessNamespace).
    #[test]
    fn an_ephemeral_target_is_pid_namespace_mode_target() {
        let c = ContainerConfig {
            pid_target_id: "abc123".into(),
            ..Default::default()
        };
        let ns = |sb: &PodSandboxConfig| {
            container_config_pb(&c, sb)
                .linux
                .and_then(|l| l.security_context)
                .and_then(|s| s.namespace_options)
                .unwrap_or_default()
        };
        let own = ns(&PodSandboxConfig::default());
        assert_eq!(own.pid, pb::NamespaceMode::Target as i32);
        assert_eq!(own.target_id, "abc123");
        for sb in [
            PodSandboxConfig {
                host_pid: true,
                ..Default::default()
            },
            PodSandboxConfig {
                share_pid: true,
                ..Default::default()
            },
        ] {
            let n = ns(&sb);
            assert_ne!(n.pid, pb::NamespaceMode::Target as i32);
            assert!(n.target_id.is_empty());
        }
        let plain = container_config_pb(&ContainerConfig::default(), &PodSandboxConfig::default())
            .linux
            .and_then(|l| l.security_context)
            .and_then(|s| s.namespace_options)
            .unwrap_or_default();
        assert_eq!(plain.pid, pb::NamespaceMode::Container as i32);
    }

    #[test]
    fn apparmor_and_selinux_reach_the_container_config() {
        let c = ContainerConfig {
            security: super::super::ContainerSecurity {
                apparmor: Some(super::super::SecurityProfile::Localhost(
                    "k8s-deny-write".into(),
                )),
                selinux: Some(["u".into(), "r".into(), "spc_t".into(), "s0".into()]),
                ..Default::default()
            },
            ..Default::default()
        };
        let sc = container_config_pb(&c, &PodSandboxConfig::default())
            .linux
            .and_then(|l| l.security_context)
            .unwrap_or_default();
        let aa = sc.apparmor.unwrap_or_default();
        assert_eq!(
            aa.profile_type,
            pb::security_profile::ProfileType::Localhost as i32
        );
        assert_eq!(aa.localhost_ref, "k8s-deny-write");
        assert_eq!(sc.apparmor_profile, "localhost/k8s-deny-write");
        let se = sc.selinux_options.unwrap_or_default();
        assert_eq!((se.r#type.as_str(), se.level.as_str()), ("spc_t", "s0"));
    }

    #[test]
    fn exec_exit_events_are_ignored() {
        let exit = |cid: &str, id: &str| ctrd::types::Envelope {
            timestamp: None,
            namespace: K8S_NAMESPACE.into(),
            topic: "/tasks/exit".into(),
            event: Some(prost_types::Any {
                type_url: "containerd.events.TaskExit".into(),
                value: ctrd::events::TaskExit {
                    container_id: cid.into(),
                    id: id.into(),
                    pid: 1,
                    exit_status: 3,
                    exited_at: None,
                }
                .encode_to_vec(),
            }),
        };
        assert_eq!(
            decode_event(&exit("c1", "c1")),
            Some(RuntimeEvent::TaskExit {
                id: "c1".into(),
                exit_code: 3
            })
        );
        assert_eq!(decode_event(&exit("c1", "exec-1")), None);
        let mut other_ns = exit("c1", "c1");
        other_ns.namespace = "default".into();
        assert_eq!(decode_event(&other_ns), None);
    }
}

/// The runtime's verbose `info` maps (containerd: `info` holds JSON with the CRI config it got
/// and the OCI runtime spec it made), for the differential harness (`examples/differential.rs`),
/// which compares what reached the runtime from the kubelet and from nanolet. Test builds only.
#[cfg(feature = "testing")]
impl CriRuntime {
    /// `ContainerStatus` with `verbose: true`: the reply's `info` map.
    pub fn container_status_info(
        &self,
        container_id: &str,
    ) -> Result<std::collections::BTreeMap<String, String>> {
        let mut c = self.runtime_client();
        let req = with_deadline(
            pb::ContainerStatusRequest {
                container_id: container_id.into(),
                verbose: true,
            },
            self.default_timeout,
        );
        let resp = self.run(
            "ContainerStatus",
            &format!("container {container_id}"),
            self.default_timeout,
            true,
            async move { c.container_status(req).await.map(|r| r.into_inner()) },
        )?;
        Ok(resp.info)
    }

    /// `PodSandboxStatus` with `verbose: true`: the reply's `info` map.
    pub fn pod_sandbox_status_info(
        &self,
        sandbox_id: &str,
    ) -> Result<std::collections::BTreeMap<String, String>> {
        let mut c = self.runtime_client();
        let req = with_deadline(
            pb::PodSandboxStatusRequest {
                pod_sandbox_id: sandbox_id.into(),
                verbose: true,
            },
            self.default_timeout,
        );
        let resp = self.run(
            "PodSandboxStatus",
            &format!("sandbox {sandbox_id}"),
            self.default_timeout,
            true,
            async move { c.pod_sandbox_status(req).await.map(|r| r.into_inner()) },
        )?;
        Ok(resp.info)
    }
}
