//! A pod's containers (Go's pkg/kubelet/kuberuntime/kuberuntime_container.go): starting one
//! (`startContainer`: image, config, create, start, legacy log symlink, postStart hook), its
//! config (`generateContainerConfig`) with the mounts the kubelet adds itself (/etc/hosts, the
//! termination message file), killing one (`killContainer`, preStop hook), lifecycle hooks,
//! and termination messages (file, else the log tail).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::api::env::{EnvError, expand_all, resolve_env};
use crate::api::{Container, Pod};
use crate::cri::{ContainerConfig, ContainerState, Mount, PodSandboxConfig, RuntimeError};
use crate::events::{EventType, container_ref};
use crate::images::manager::PullError;
use crate::prober::handlers::Target;
use crate::prober::spec::{Handler, lifecycle_of};
use crate::volumes::VolumeError;

use super::container_linux::container_resources;
use super::labels::{ContainerType, container_annotations, container_labels};
use super::manager::{MIN_GRACE_SECONDS, RuntimeManager};
use super::state::PodRuntimeState;
use super::termination_order::TerminationOrdering;

/// Why a container's config could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A bad env reference.
    #[error("{}", env_message(container, source))]
    Env { container: String, source: EnvError },
    /// A volume could not be set up or mounted (the kubelet's FailedMount text).
    #[error(transparent)]
    Volumes(#[from] VolumeError),
    /// runAsNonRoot and the effective user is root or unknown (the kubelet's message).
    #[error(transparent)]
    RunAsNonRoot(crate::api::security::NonRootError),
    /// The container's device plugin options (PreStartContainer failed, the plugin is gone).
    #[error("container {container}: {source}")]
    Devices {
        container: String,
        source: crate::devicemanager::DeviceError,
    },
    /// An ephemeral container's `targetContainerName` has no container in the runtime (the
    /// kubelet's getTargetID message).
    #[error("unable to find target container {0}")]
    NoTarget(String),
}

/// `spec.containers{c}.<field>: <reason>`, or the kubelet's own message alone (API objects).
fn env_message(container: &str, e: &EnvError) -> String {
    if e.field.is_empty() {
        e.reason.clone()
    } else {
        format!("spec.containers{{{container}}}.{e}")
    }
}

impl ConfigError {
    /// The container's waiting reason while this lasts.
    pub fn reason(&self) -> &'static str {
        match self {
            // A volumeMount that cannot be made (an absolute or escaping subPath, ...) fails
            // the kubelet's makeMounts inside generateContainerConfig: a config error. A
            // volume that is not set up yet waits in the volume manager: ContainerCreating.
            ConfigError::Volumes(crate::volumes::VolumeError::Mount { .. }) => {
                "CreateContainerConfigError"
            }
            ConfigError::Volumes(_) => "ContainerCreating",
            ConfigError::Env { .. }
            | ConfigError::RunAsNonRoot(_)
            | ConfigError::Devices { .. }
            | ConfigError::NoTarget(_) => "CreateContainerConfigError",
        }
    }
}

/// Why a container did not start. The text is the waiting message the pod status shows;
/// [`StartError::reason`] is its reason.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Image(#[from] PullError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// CRI CreateContainer failed.
    #[error("{}", .0.message)]
    Create(RuntimeError),
    /// CRI StartContainer failed.
    #[error("{}", .0.message)]
    Run(RuntimeError),
}

impl StartError {
    /// The container's waiting reason while this lasts.
    pub fn reason(&self) -> &'static str {
        match self {
            StartError::Image(e) => e.reason(),
            StartError::Config(e) => e.reason(),
            StartError::Create(_) => "CreateContainerError",
            StartError::Run(_) => "RunContainerError",
        }
    }

    /// How soon the pod should be synced again; `None`: at the next periodic resync.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            StartError::Image(e) => e.retry_after(),
            StartError::Config(_) => Some(Duration::from_secs(5)),
            StartError::Create(_) | StartError::Run(_) => Some(Duration::from_secs(2)),
        }
    }
}

/// A lifecycle hook that did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The handler ran and failed.
    #[error("{0}")]
    Failed(String),
    /// The handler could not be run (the prober's error).
    #[error(transparent)]
    Handler(crate::prober::handlers::HandlerError),
}

/// The spec of the container (regular, init or ephemeral) called `name`.
pub fn find_spec<'p>(pod: &'p Pod, name: &str) -> Option<&'p Container> {
    pod.spec
        .containers
        .iter()
        .chain(&pod.spec.init_containers)
        .chain(&pod.spec.ephemeral_containers)
        .find(|c| c.name == name)
}

/// The runtime ID of the container whose PID namespace an ephemeral container joins (the
/// kubelet's `getTargetID`: the newest container named `targetContainerName`); "" without a
/// target or for other containers.
fn pid_target(
    c: &Container,
    kind: ContainerType,
    state: &PodRuntimeState,
) -> Result<String, ConfigError> {
    let target = c.target_container_name();
    if kind != ContainerType::Ephemeral || target.is_empty() {
        return Ok(String::new());
    }
    state
        .latest(target)
        .map(|t| t.id.clone())
        .ok_or_else(|| ConfigError::NoTarget(target.to_string()))
}

/// Read at most `max` bytes of a file as text ("" when missing).
fn read_capped(path: &Path, max: usize) -> String {
    use std::io::Read;
    let mut buf = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(max as u64).read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// The last `lines` lines of a CRI-format log (`<time> <stream> <P|F> <text>`), joined as the
/// container wrote them, at most `max` bytes (the end is kept).
pub fn log_tail(path: &Path, lines: usize, max: usize) -> String {
    let Ok(text) = std::fs::read_to_string(path) else {
        return String::new();
    };
    let mut out = String::new();
    for l in text.lines() {
        let mut parts = l.splitn(4, ' ');
        let (_ts, _stream, tag, msg) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next().unwrap_or(""),
        );
        out.push_str(msg);
        if tag != Some("P") {
            out.push('\n');
        }
    }
    let all: Vec<&str> = out.lines().collect();
    let mut tail = all[all.len().saturating_sub(lines)..].join("\n");
    // A last line written without a newline (`echo -n DONE; exit 1`) stays without one, as
    // the kubelet's log reader returns it.
    if !tail.is_empty() && out.ends_with('\n') {
        tail.push('\n');
    }
    if tail.len() > max {
        let mut cut = tail.len() - max;
        while !tail.is_char_boundary(cut) {
            cut += 1;
        }
        tail = tail[cut..].to_string();
    }
    tail
}

impl RuntimeManager<'_> {
    fn record(&self, container: &str, type_: EventType, reason: &str, message: &str) {
        self.events
            .record(&container_ref(self.pod, container), type_, reason, message);
    }

    /// Ensure the image, create and start one container, link its legacy log and run its
    /// postStart hook (a failed hook kills it: FailedPostStartHook). `now` is when the sync
    /// began.
    pub fn start_container(
        &mut self,
        c: &Container,
        kind: ContainerType,
        sandbox_id: &str,
        sandbox_cfg: &PodSandboxConfig,
        state: &PodRuntimeState,
        now: Instant,
    ) -> Result<(), StartError> {
        let name = c.name.as_str();
        let settings = self.settings;
        let objects = settings.objects_for(self.pod);
        self.state.images.ensure_image_exists(
            self.runtime,
            self.events,
            settings.credential_sources(objects.as_deref()),
            self.pod,
            c,
            now,
        )?;
        let restart_count = state.latest(name).map(|l| l.restart_count + 1).unwrap_or(0);
        let log_rel = format!("{name}/{restart_count}.log");
        let cdir = self.log_dir().join(name);
        if let Err(e) = std::fs::create_dir_all(&cdir) {
            warn!(pod = %self.full_name, container = %name, error = %e, "creating container log directory");
        }
        // startContainer: getTargetID, then generateContainerConfig (NamespaceMode TARGET).
        let cfg = pid_target(c, kind, state).and_then(|target| {
            let mut cfg = self.container_config(c, kind, restart_count, log_rel)?;
            cfg.pid_target_id = target;
            Ok(cfg)
        });
        let cfg = match cfg {
            Ok(cfg) => {
                let limiter = self.state.config_warnings.get_mut(name);
                if limiter.is_some_and(|l| l.clear()) {
                    info!(pod = %self.full_name, container = %name, "container config works again");
                }
                cfg
            }
            Err(e) => {
                // The same error at every sync (every few seconds while a ConfigMap is
                // missing): the first at once, then once per back-off step with the count.
                let limiter = self
                    .state
                    .config_warnings
                    .entry(name.to_string())
                    .or_default();
                if let Some(suppressed) = limiter.check(&e.to_string(), Instant::now()) {
                    warn!(pod = %self.full_name, container = %name, reason = %e.reason(), suppressed, "{e}");
                }
                // kuberuntime_container.go startContainer: a generateContainerConfig error is
                // a Warning `Failed` (events.FailedToCreateContainer) "Error: <message>" event
                // at every attempt. A volume not set up yet is the volume manager's wait
                // (its FailedMount event), before startContainer: no event here.
                if e.reason() == "CreateContainerConfigError" {
                    self.record(name, EventType::Warning, "Failed", &format!("Error: {e}"));
                }
                return Err(e.into());
            }
        };
        info!(pod = %self.full_name, container = %name, restart_count, kind = kind.as_str(), "starting container");
        let id = match self.runtime.create_container(sandbox_id, &cfg, sandbox_cfg) {
            Ok(id) => {
                let msg = format!("Created container {name}");
                self.record(name, EventType::Normal, "Created", &msg);
                id
            }
            Err(e) => {
                warn!(pod = %self.full_name, container = %name, error = %e, "create container failed");
                // startContainer: a CreateContainer error is the same `Failed` event.
                let msg = format!("Error: {}", e.message);
                self.record(name, EventType::Warning, "Failed", &msg);
                return Err(StartError::Create(e));
            }
        };
        if let Err(e) = self.runtime.start_container(&id) {
            warn!(pod = %self.full_name, container = %name, error = %e, "start container failed");
            let msg = format!("Error: {}", e.message);
            self.record(name, EventType::Warning, "Failed", &msg);
            return Err(StartError::Run(e));
        }
        let msg = format!("Started container {name}");
        self.record(name, EventType::Normal, "Started", &msg);
        self.link_legacy_log(name, &id, &cfg.log_path);
        if let Some(post_start) = lifecycle_of(c).post_start {
            // The kubelet runs postStart right after start; if it fails the container is killed
            // (FailedPostStartHook) and restartPolicy decides what happens next.
            let timeout = Duration::from_secs(self.grace_seconds(None).max(30) as u64);
            if let Err(e) = self.run_hook(&post_start, c, &id, timeout) {
                warn!(pod = %self.full_name, container = %name, "FailedPostStartHook: {e}");
                self.kill_container(&id, name, None, "FailedPostStartHook", None);
            }
        }
        Ok(())
    }

    /// The kubelet's `generateContainerConfig`.
    fn container_config(
        &self,
        c: &Container,
        kind: ContainerType,
        restart_count: u32,
        log_path: String,
    ) -> Result<ContainerConfig, ConfigError> {
        let p = self.pod;
        // Environment (value, fieldRef, resourceFieldRef) with $(VAR) expansion, as the kubelet
        // builds it; a bad reference keeps the container waiting (CreateContainerConfigError).
        let env_ctx = self.env_context();
        let envs = resolve_env(p, c, &env_ctx).map_err(|source| ConfigError::Env {
            container: c.name.clone(),
            source,
        })?;
        // Volumes: set up (idempotent) and mounted per volumeMounts; a failure keeps the
        // container in ContainerCreating with the kubelet's FailedMount text.
        let vctx = crate::volumes::VolumeContext {
            env: env_ctx,
            ..self.settings.volume_context(p, "")
        };
        // Whether the pod's runtime handler does recursive read-only mounts: the runtime's
        // handler features, asked only for a volumeMount with `recursiveReadOnly`.
        let rro_supported = || {
            let handler = self
                .settings
                .runtime_classes
                .lookup_handler(p)
                .unwrap_or_default();
            match self.runtime.status(false) {
                Ok(st) => st.supports_recursive_read_only(&handler),
                Err(e) => {
                    warn!(pod = %self.full_name, container = %c.name, error = %e, "cannot ask the runtime whether it supports recursive read-only mounts");
                    false
                }
            }
        };
        let volumes = crate::volumes::prepare(p, &self.pod_dir(), &vctx)
            .and_then(|v| crate::volumes::mounts_for(c, &v, &envs, &rro_supported))?;
        // Security context, and the kubelet's runAsNonRoot check against the image's user.
        let security = crate::api::security::container_security(p, c, &self.settings.root_dir);
        if crate::api::security::run_as_non_root(p, c) {
            let img = self.runtime.image_status(&c.image).ok().flatten();
            let (uid, user) = img
                .map(|i| (i.uid, i.username))
                .unwrap_or((None, String::new()));
            crate::api::security::verify_run_as_non_root(p, c, uid, &user)
                .map_err(ConfigError::RunAsNonRoot)?;
        }
        let mut mounts = volumes;
        self.add_runtime_mounts(c, restart_count, &mut mounts);
        // Device plugin allocations (GetDeviceRunContainerOptions, PreStartContainer first):
        // their envs after the container's own, their mounts, devices, annotations, CDI names.
        let mut envs = envs;
        let mut annotations =
            container_annotations(c, kind, restart_count, self.grace_seconds(None));
        let mut dev = crate::devicemanager::RunContainerOptions::default();
        if let Some(dm) = &self.settings.devices {
            dev = dm
                .container_options(&p.metadata.uid, &c.name)
                .map_err(|source| ConfigError::Devices {
                    container: c.name.clone(),
                    source,
                })?;
            envs.append(&mut dev.envs);
            mounts.append(&mut dev.mounts);
            annotations.extend(std::mem::take(&mut dev.annotations));
        }
        Ok(ContainerConfig {
            name: c.name.clone(),
            attempt: restart_count,
            image: c.image.clone(),
            command: expand_all(&c.command, &envs),
            args: expand_all(&c.args, &envs),
            working_dir: c.working_dir.clone(),
            envs,
            mounts,
            devices: dev.devices,
            cdi_devices: dev.cdi_devices,
            labels: container_labels(p, c),
            annotations,
            log_path,
            stdin: c.stdin,
            stdin_once: c.stdin_once,
            tty: c.tty,
            resources: Some(container_resources(p, c, &self.settings.swap)),
            security,
            pid_target_id: String::new(),
        })
    }

    /// Adds the mounts the kubelet adds itself: the pod's /etc/hosts (unless a volume mounts
    /// one) and the container's termination message file.
    fn add_runtime_mounts(&self, c: &Container, restart_count: u32, mounts: &mut Vec<Mount>) {
        if let Some(hosts) = self.hosts_file() {
            if !mounts.iter().any(|m| m.container_path == "/etc/hosts") {
                mounts.push(Mount {
                    container_path: "/etc/hosts".into(),
                    host_path: hosts.to_string_lossy().into_owned(),
                    readonly: false,
                    ..Default::default()
                });
            }
        }
        if !c.termination_message_path.is_empty() {
            let file = self.termination_message_file(&c.name, restart_count);
            let created = file
                .parent()
                .map(std::fs::create_dir_all)
                .unwrap_or(Ok(()))
                .and_then(|()| {
                    std::fs::write(&file, b"")?;
                    std::fs::set_permissions(
                        &file,
                        std::os::unix::fs::PermissionsExt::from_mode(0o666),
                    )
                });
            match created {
                Ok(()) => mounts.push(Mount {
                    container_path: c.termination_message_path.clone(),
                    host_path: file.to_string_lossy().into_owned(),
                    readonly: false,
                    ..Default::default()
                }),
                Err(e) => {
                    warn!(pod = %self.full_name, container = %c.name, error = %e, "creating the termination message file")
                }
            }
        }
    }

    /// The kubelet-managed /etc/hosts (`<root-dir>/pods/<uid>/etc-hosts`), mounted when the pod
    /// has an IP or is hostNetwork (kubelet_pods.go `shouldMountHostsFile`): for pod-network
    /// pods localhost, the pod's IP and hostname and hostAliases (`managedHostsFileContent`);
    /// for hostNetwork pods a header, the node's /etc/hosts and hostAliases
    /// (`nodeHostsFileContent`).
    fn hosts_file(&self) -> Option<PathBuf> {
        let p = self.pod;
        let content = if p.spec.host_network {
            let node = match std::fs::read_to_string("/etc/hosts") {
                Ok(s) => s,
                Err(e) => {
                    warn!(pod = %self.full_name, error = %e, "reading the node's /etc/hosts");
                    return None;
                }
            };
            format!(
                "# Kubernetes-managed hosts file (host network).\n{node}{}",
                crate::api::dns::host_aliases(p)
            )
        } else if self.state.pod_ip.is_empty() {
            return None;
        } else {
            let (hostname, domain) =
                crate::api::dns::pod_hostname_and_domain(p, &self.settings.cluster_dns.domain);
            crate::api::dns::managed_hosts(p, &self.state.pod_ip, &hostname, &domain)
        };
        let path = self.pod_dir().join("etc-hosts");
        if std::fs::read_to_string(&path).ok().as_deref() != Some(content.as_str()) {
            let written = std::fs::create_dir_all(self.pod_dir())
                .and_then(|()| std::fs::write(&path, &content));
            if let Err(e) = written {
                warn!(pod = %self.full_name, error = %e, "writing the pod's /etc/hosts");
                return None;
            }
        }
        Some(path)
    }

    fn termination_message_file(&self, name: &str, restart_count: u32) -> PathBuf {
        self.pod_dir()
            .join("containers")
            .join(name)
            .join(format!("termination-{restart_count}"))
    }

    /// The legacy `<container-logs-dir>/<pod>_<ns>_<container>-<id>.log` symlink to the log.
    fn link_legacy_log(&self, name: &str, id: &str, log_rel: &str) {
        let dir = &self.settings.container_logs_dir;
        if std::fs::create_dir_all(dir).is_err() {
            return;
        }
        let link = dir.join(format!(
            "{}_{}_{}-{}.log",
            self.pod.metadata.name, self.pod.metadata.namespace, name, id
        ));
        let target = self.log_dir().join(log_rel);
        let _ = std::fs::remove_file(&link);
        if let Err(e) = std::os::unix::fs::symlink(&target, &link) {
            tracing::debug!(pod = %self.full_name, container = %name, error = %e, "legacy log symlink");
        }
    }

    /// Kill one container the kubelet's way (kuberuntime `killContainer`): the grace period is
    /// the probe's own (`grace_override`, for liveness/startup kills) or the pod's; the preStop
    /// hook runs within it, the container gets what is left (at least 2 s: the kubelet's
    /// one-off extension); then SIGTERM (or the image's STOPSIGNAL) and SIGKILL at the end,
    /// through CRI StopContainer. With `ordering` (a pod's kill), the container's turn comes
    /// between the hook and the stop, within the grace period (`waitForTurn`).
    pub fn kill_container(
        &self,
        id: &str,
        name: &str,
        grace_override: Option<i64>,
        reason: &str,
        ordering: Option<&TerminationOrdering>,
    ) {
        self.record(
            name,
            EventType::Normal,
            "Killing",
            &format!("Stopping container {name}"),
        );
        // kuberuntime setTerminationGracePeriod: a liveness/startup kill uses the probe's own
        // terminationGracePeriodSeconds (also for the preStop hook), else the pod's.
        let mut grace = grace_override
            .or(self.pod.spec.termination_grace_period_seconds)
            .unwrap_or(30)
            .max(0);
        let spec = find_spec(self.pod, name);
        if let Some(pre_stop) = spec.and_then(|c| lifecycle_of(c).pre_stop) {
            if grace > 0 {
                let started = Instant::now();
                let spec = spec.cloned().unwrap_or_default();
                info!(pod = %self.full_name, container = %name, "running preStop hook");
                if let Err(e) =
                    self.run_hook(&pre_stop, &spec, id, Duration::from_secs(grace as u64))
                {
                    warn!(pod = %self.full_name, container = %name, "PreStopHook failed: {e}");
                }
                grace -= started.elapsed().as_secs() as i64;
            }
        }
        if let Some(o) = ordering.filter(|_| grace > 0) {
            grace -= o
                .wait_for_turn(name, Duration::from_secs(grace as u64))
                .as_secs() as i64;
        }
        // Always a minimal shutdown window (the kubelet's one-off 2 s).
        if grace < MIN_GRACE_SECONDS {
            grace = MIN_GRACE_SECONDS;
        }
        info!(pod = %self.full_name, container = %name, grace_seconds = grace, reason, "killing container");
        if let Err(e) = self
            .runtime
            .stop_container(id, Duration::from_secs(grace as u64))
        {
            if !e.is_not_found() {
                warn!(pod = %self.full_name, container = %name, error = %e, "stopping container failed");
            }
        }
        if let Some(o) = ordering {
            o.container_stopped(name);
        }
    }

    /// Run a lifecycle hook against the pod IP.
    fn run_hook(
        &self,
        h: &Handler,
        c: &Container,
        container_id: &str,
        timeout: Duration,
    ) -> Result<(), HookError> {
        let target = Target {
            runtime: self.runtime,
            container: c,
            container_id,
            pod_ip: &self.state.pod_ip,
        };
        match crate::prober::handlers::run(h, &target, timeout) {
            Ok(r) if r.is_success() => Ok(()),
            Ok(r) => Err(HookError::Failed(r.message)),
            Err(e) => Err(HookError::Handler(e)),
        }
    }

    /// The kubelet bind-mounts a host file at terminationMessagePath and reads it after the
    /// container exits (at most 4096 bytes); with FallbackToLogsOnError an empty message of a
    /// failed container is replaced by the log tail (80 lines, at most 2048 bytes).
    pub fn fill_termination_messages(&self, state: &mut PodRuntimeState) {
        for c in state
            .containers
            .iter_mut()
            .filter(|c| c.state == ContainerState::Exited)
        {
            let Some(spec) = find_spec(self.pod, &c.name) else {
                continue;
            };
            let file = self.termination_message_file(&c.name, c.restart_count);
            let mut msg = read_capped(&file, 4096);
            if msg.is_empty()
                && c.exit_code != 0
                && spec.termination_message_policy == "FallbackToLogsOnError"
            {
                msg = log_tail(Path::new(&c.log_path), 80, 2048);
            }
            if !msg.is_empty() {
                c.message = msg;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kubelet_pods.go makeMounts (called by generateContainerConfig) refuses an absolute or
    /// `..` subPath: the container waits with CreateContainerConfigError (e2e "[sig-node]
    /// Variable Expansion should fail substituting values in a volume subpath with absolute
    /// path [Conformance]" waits for that reason); a volume not set up yet is ContainerCreating.
    #[test]
    fn a_bad_sub_path_is_a_config_error_a_volume_set_up_is_not() {
        let c: crate::api::Container = serde_json::from_value(serde_json::json!({
            "name": "c", "image": "i",
            "volumeMounts": [{"name": "workdir1", "mountPath": "/logscontainer", "subPath": "/foo"}]
        }))
        .expect("container");
        let dir = tempfile::tempdir().expect("tempdir");
        let vols =
            std::collections::BTreeMap::from([("workdir1".to_string(), dir.path().to_path_buf())]);
        let e =
            crate::volumes::mounts_for(&c, &vols, &[], &|| false).expect_err("absolute subPath");
        assert_eq!(
            ConfigError::Volumes(e).reason(),
            "CreateContainerConfigError"
        );
        let setup = crate::volumes::VolumeError::SetUp {
            volume: "v".into(),
            reason: "configmap \"x\" not found".into(),
        };
        assert_eq!(ConfigError::Volumes(setup).reason(), "ContainerCreating");
    }

    /// The settings of a runtime manager on a fake runtime, under `dir`.
    fn test_settings(dir: &Path) -> super::super::RuntimeSettings {
        super::super::RuntimeSettings {
            host_ips: vec!["192.0.2.10".into()],
            pod_logs_dir: dir.join("pods"),
            root_dir: dir.join("root"),
            store: Some(crate::localstore::LocalStore::new(
                dir.join("configmaps"),
                dir.join("secrets"),
            )),
            api_objects: None,
            registry_config: None,
            container_logs_dir: dir.join("containers"),
            cgroup_driver: crate::cm::CgroupDriver::Cgroupfs,
            host_dns: std::sync::Arc::new(crate::api::dns::HostResolvConf::new(
                None,
                PathBuf::new(),
            )),
            cluster_dns: Default::default(),
            pod_pids_limit: -1,
            systemd_cgroups: None,
            runtime_classes: crate::runtimeclass::RuntimeClasses::none(),
            devices: None,
            swap: Default::default(),
        }
    }

    /// kuberuntime_container.go startContainer: when generateContainerConfig fails (here
    /// verifyRunAsNonRoot, security_context_others.go) the kubelet records a Warning event with
    /// reason `Failed` (events.FailedToCreateContainer) and message "Error: <message>"; the
    /// e2e "[sig-node] Security Context When creating a container with runAsNonRoot
    /// [NodeConformance] should not run without a specified user ID / with an explicit root
    /// user ID" wait for exactly that event reason.
    #[test]
    fn a_run_as_non_root_violation_records_the_failed_event() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = crate::cri::fake::FakeRuntime::new();
        rt.add_image("busybox:1");
        let settings = test_settings(dir.path());
        for (sc, want) in [
            (
                serde_json::json!({"runAsNonRoot": true}),
                "Error: container has runAsNonRoot and image will run as root (pod: \"implicit-root-uid_ns1(u1)\", container: c)",
            ),
            (
                serde_json::json!({"runAsNonRoot": true, "runAsUser": 0}),
                "Error: container's runAsUser breaks non-root policy (pod: \"implicit-root-uid_ns1(u1)\", container: c)",
            ),
        ] {
            let mut pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "implicit-root-uid", "namespace": "ns1", "uid": "u1"},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1",
                    "command": ["id", "-u"], "securityContext": sc}]}
            }))
            .expect("pod");
            pod.spec.containers[0].image_pull_policy = "IfNotPresent".into();
            let events = crate::events::EventRecorder::new();
            let mut state = super::super::RuntimeManagerState::default();
            let mut m = RuntimeManager {
                runtime: &rt,
                pod: &pod,
                events: &events,
                settings: &settings,
                state: &mut state,
                full_name: "ns1/implicit-root-uid",
            };
            let r = m.start_container(
                &pod.spec.containers[0],
                ContainerType::Regular,
                "sb",
                &PodSandboxConfig::default(),
                &PodRuntimeState::default(),
                Instant::now(),
            );
            let e = r.expect_err("runAsNonRoot with a root user");
            assert_eq!(e.reason(), "CreateContainerConfigError");
            let failed: Vec<_> = events
                .list()
                .into_iter()
                .filter(|e| e.reason == "Failed")
                .collect();
            assert_eq!(failed.len(), 1, "{:?}", events.list());
            assert_eq!(failed[0].type_, crate::events::EventType::Warning);
            assert_eq!(failed[0].message, want);
            assert_eq!(failed[0].object.container, "c");
        }
    }

    /// Captured log output of the current thread.
    #[derive(Clone, Default)]
    struct Buf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Issue 34: a container whose ConfigMap is missing fails its config at every sync (19
    /// identical WARN lines in 90 s before). Repeats go through the once-per-back-off-step
    /// limit (docs/decisions/warning-rate-limit.md): 19 syncs in a row log one WARN.
    #[test]
    fn a_missing_configmap_warns_once_per_back_off_step_not_per_sync() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = crate::cri::fake::FakeRuntime::new();
        rt.add_image("busybox:1");
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "busybox:1",
                "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "app", "key": "k"}}}]}]}
        }))
        .expect("pod");
        pod.spec.containers[0].image_pull_policy = "IfNotPresent".into();
        let settings = test_settings(dir.path());
        let events = crate::events::EventRecorder::new();
        let mut state = super::super::RuntimeManagerState::default();
        let buf = Buf::default();
        let writer = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let mut errors = 0;
        tracing::subscriber::with_default(sub, || {
            for _ in 0..19 {
                let mut m = RuntimeManager {
                    runtime: &rt,
                    pod: &pod,
                    events: &events,
                    settings: &settings,
                    state: &mut state,
                    full_name: "default/p",
                };
                let r = m.start_container(
                    &pod.spec.containers[0],
                    ContainerType::Regular,
                    "sb",
                    &PodSandboxConfig::default(),
                    &PodRuntimeState::default(),
                    Instant::now(),
                );
                errors += usize::from(matches!(r, Err(StartError::Config(_))));
            }
        });
        let out = String::from_utf8(buf.0.lock().expect("lock").clone()).expect("utf8");
        assert_eq!(errors, 19, "{out}");
        let warns: Vec<&str> = out.lines().filter(|l| l.contains("WARN")).collect();
        assert_eq!(warns.len(), 1, "{out}");
        assert!(
            warns[0].contains("configmap") && warns[0].contains("container=c"),
            "{out}"
        );
    }

    #[test]
    fn log_tail_joins_partial_lines_and_keeps_the_end() {
        // FallbackToLogsOnError: the last 80 lines, at most 2048 bytes.
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("0.log");
        let mut body = String::new();
        for i in 0..100 {
            body.push_str(&format!(
                "2026-11-22T00:00:00.000000001Z stdout F line {i}\n"
            ));
        }
        body.push_str(
            "2026-11-22T00:00:00.1Z stderr P part-\n2026-11-22T00:00:00.2Z stderr F end\n",
        );
        std::fs::write(&f, body).expect("write");
        let t = log_tail(&f, 80, 2048);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 80);
        assert_eq!(lines[0], "line 21");
        assert_eq!(lines[79], "part-end");
        assert_eq!(log_tail(&f, 80, 12), "99\npart-end\n");
        assert!(log_tail(&dir.path().join("missing"), 80, 2048).is_empty());
        // A partial last line (no newline written) is returned without one.
        std::fs::write(&f, "2026-11-22T00:00:00.1Z stdout P DONE\n").expect("write");
        assert_eq!(log_tail(&f, 80, 2048), "DONE");
        std::fs::write(&f, "2026-11-22T00:00:00.1Z stdout F DONE\n").expect("write");
        assert_eq!(log_tail(&f, 80, 2048), "DONE\n");
    }
}
