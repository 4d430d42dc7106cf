//! A pod's sandbox (Go's pkg/kubelet/kuberuntime/kuberuntime_sandbox.go): its CRI config
//! (`generatePodSandboxConfig`), its creation (`createPodSandbox`) and the pod IP
//! (`determinePodSandboxIPs`).

use tracing::{info, warn};

use crate::api::Pod;
use crate::cri::{
    LABEL_MANAGED_BY, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID, PodSandboxConfig,
    PortMapping, Protocol, RuntimeError,
};

use super::manager::RuntimeManager;
use super::state::PodRuntimeState;

/// Why a sandbox could not be created.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("creating log directory {path}: {source}")]
    LogDir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The node's resolv.conf could not be read.
    #[error(transparent)]
    Dns(#[from] crate::api::dns::DnsError),
    /// hostUsers: false and no user namespace range could be recorded.
    #[error("user namespace: {0}")]
    UserNamespace(#[from] super::userns::UsernsError),
    /// The pod's RuntimeClass is unknown, or its handler is one the runtime does not report.
    #[error(transparent)]
    RuntimeClass(#[from] crate::runtimeclass::RuntimeClassError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

impl SandboxError {
    /// The error as the kubelet's `FailedCreatePodSandBox` event quotes it: a runtime error as
    /// its CRI client prints one (`rpc error: code = ... desc = ...`), else the error's text.
    pub fn event_text(&self) -> String {
        match self {
            SandboxError::Runtime(e) => e.grpc_text(),
            other => other.to_string(),
        }
    }
}

/// The pod IP probes and hooks connect to: the newest sandbox's IP, or the host IP for
/// hostNetwork pods.
pub fn pod_ip(pod: &Pod, host_ips: &[String], state: &PodRuntimeState) -> String {
    if pod.spec.host_network {
        return host_ips.first().cloned().unwrap_or_default();
    }
    state
        .newest_sandbox()
        .map(|s| s.ip.clone())
        .unwrap_or_default()
}

/// The sandbox's hostname: empty for hostNetwork pods (the node's), else the kubelet's
/// (`api::dns::pod_hostname_and_domain`).
fn hostname(p: &Pod) -> String {
    if p.spec.host_network {
        String::new()
    } else {
        crate::api::dns::pod_hostname_and_domain(p, "").0
    }
}

/// The containers' ports as CRI port mappings, every one of them, with or without a hostPort
/// (the kubelet's `generatePodSandboxConfig` over `MakePortMappings`; the runtime maps only
/// those with a hostPort). A port whose name (or, unnamed, family, protocol, hostIP,
/// containerPort and hostPort) repeats within a container is sent once.
fn port_mappings(p: &Pod) -> Vec<PortMapping> {
    let mut port_mappings = vec![];
    for c in &p.spec.containers {
        let mut names = std::collections::BTreeSet::new();
        for port in &c.ports {
            let host_port = port.host_port.unwrap_or(0);
            let name = if port.name.is_empty() {
                let family = match port.host_ip.parse::<std::net::IpAddr>() {
                    _ if port.host_ip.is_empty() => "any",
                    Ok(std::net::IpAddr::V6(_)) => "v6",
                    _ => "v4",
                };
                format!(
                    "{family}-{}-{}:{}:{host_port}",
                    port.protocol, port.host_ip, port.container_port
                )
            } else {
                port.name.clone()
            };
            if !names.insert(name) {
                continue;
            }
            port_mappings.push(PortMapping {
                protocol: match port.protocol.as_str() {
                    "UDP" => Protocol::Udp,
                    "SCTP" => Protocol::Sctp,
                    _ => Protocol::Tcp,
                },
                container_port: port.container_port,
                host_port,
                host_ip: port.host_ip.clone(),
            });
        }
    }
    port_mappings
}

impl RuntimeManager<'_> {
    /// The CRI handler of the pod's RuntimeClass (the kubelet's `LookupRuntimeHandler`): an
    /// unknown class fails the sandbox with the API's NotFound text; where the runtime reports
    /// its handlers (containerd 2) one it does not report fails it too, before any RunPodSandbox
    /// (containerd 1.6 and 1.7 refuse it themselves). Never the default handler for a class.
    fn runtime_handler(&self) -> Result<String, SandboxError> {
        let Some(class) = crate::runtimeclass::runtime_class_name(self.pod) else {
            return Ok(String::new());
        };
        let handler = self.settings.runtime_classes.lookup_handler(self.pod)?;
        let reported = self.runtime.status(false)?.handlers;
        crate::runtimeclass::check_handler(class, &handler, &reported)?;
        info!(pod = %self.full_name, runtime_class = class, runtime_handler = %handler, "running pod with runtime handler");
        Ok(handler)
    }

    /// Remember the newest sandbox's IP while it is ready.
    pub fn observe_pod_ip(&mut self, state: &PodRuntimeState) {
        if state.newest_sandbox().is_some_and(|s| s.ready) {
            self.state.pod_ip = pod_ip(self.pod, &self.settings.host_ips, state);
        }
    }

    /// The sandbox config of attempt `attempt` (without DNS: [`Self::create_sandbox`] adds it).
    pub fn sandbox_config(&self, attempt: u32) -> PodSandboxConfig {
        let p = self.pod;
        let mut labels = p.metadata.labels.clone();
        labels.insert(LABEL_POD_NAME.into(), p.metadata.name.clone());
        labels.insert(LABEL_POD_NAMESPACE.into(), p.metadata.namespace.clone());
        labels.insert(LABEL_POD_UID.into(), p.metadata.uid.clone());
        labels.insert(LABEL_MANAGED_BY.into(), "nanolet".into());
        PodSandboxConfig {
            name: p.metadata.name.clone(),
            namespace: p.metadata.namespace.clone(),
            uid: p.metadata.uid.clone(),
            attempt,
            hostname: hostname(p),
            log_directory: self.log_dir().to_string_lossy().into_owned(),
            host_network: p.spec.host_network,
            host_pid: p.spec.host_pid,
            host_ipc: p.spec.host_ipc,
            // Set in `create_sandbox`.
            dns: None,
            port_mappings: port_mappings(p),
            labels,
            annotations: p.metadata.annotations.clone(),
            cgroup_parent: crate::cm::pod_cgroup_parent(p, self.settings.cgroup_driver),
            share_pid: crate::api::security::share_process_namespace(p),
            security: crate::api::security::sandbox_security(p),
            sysctls: crate::api::security::sysctls(p),
            resources: Some(super::container_linux::sandbox_resources(p)),
            overhead: Some(super::container_linux::sandbox_overhead(p)),
            // A hostUsers: false pod's recorded range (`create_sandbox` allocates it the
            // first time); an unreadable record fails `create_sandbox` the same way.
            user_namespace: if super::userns::wants_user_namespace(p) {
                super::userns::read(&self.pod_dir()).ok().flatten()
            } else {
                None
            },
            // Set in `create_sandbox` (looked up at each creation, as the kubelet does).
            runtime_handler: String::new(),
        }
    }

    /// Create the sandbox of `cfg` ([`Self::run_sandbox`]). When that fails, the pod gets the
    /// kubelet's Warning event (kuberuntime_manager.go SyncPod): reason
    /// `FailedCreatePodSandBox`, message `Failed to create pod sandbox: <error>`.
    pub fn create_sandbox(&mut self, cfg: &mut PodSandboxConfig) -> Result<String, SandboxError> {
        let created = self.run_sandbox(cfg);
        if let Err(e) = &created {
            let p = self.pod;
            self.events.record(
                &crate::events::PodRef::pod(
                    &p.metadata.namespace,
                    &p.metadata.name,
                    &p.metadata.uid,
                ),
                crate::events::EventType::Warning,
                "FailedCreatePodSandBox",
                &format!("Failed to create pod sandbox: {}", e.event_text()),
            );
        }
        created
    }

    /// Its DNS from the node's resolv.conf (kubelet generatePodSandboxConfig -> GetPodDNS: only
    /// a new sandbox needs it), the pod's log directory, the pod cgroup (cgroupfs driver), then
    /// RunPodSandbox. Remembers the pod IP.
    fn run_sandbox(&mut self, cfg: &mut PodSandboxConfig) -> Result<String, SandboxError> {
        cfg.runtime_handler = self.runtime_handler()?;
        let host = self.settings.host_dns.read()?;
        cfg.dns = Some(crate::api::dns::pod_dns(
            self.pod,
            &host,
            &self.settings.cluster_dns,
        ));
        if super::userns::wants_user_namespace(self.pod) && cfg.user_namespace.is_none() {
            let pods_dir = self.settings.root_dir.join("pods");
            cfg.user_namespace = Some(super::userns::get_or_allocate(
                &pods_dir,
                &self.pod.metadata.uid,
                super::userns::host_range(),
            )?);
        }
        let dir = self.log_dir();
        std::fs::create_dir_all(&dir).map_err(|source| SandboxError::LogDir {
            path: dir.display().to_string(),
            source,
        })?;
        info!(pod = %self.full_name, attempt = cfg.attempt, "creating pod sandbox");
        if self.settings.cgroup_driver == crate::cm::CgroupDriver::Cgroupfs {
            // The pod cgroup with the pod's totals, before anything runs in it.
            crate::cm::apply(
                self.pod,
                std::path::Path::new("/sys/fs/cgroup"),
                self.settings.pod_pids_limit,
            );
        }
        if let Some(sd) = &self.settings.systemd_cgroups {
            // The pod's slice with its totals before the runtime puts the sandbox in it (the
            // kubelet's EnsureExists); on failure the pod still starts (the runtime makes the
            // slice without values), as with the cgroupfs driver.
            if let Err(e) = crate::cm::ensure_pod_slice(sd, self.pod, self.settings.pod_pids_limit)
            {
                warn!(pod = %self.full_name, error = %e, "creating the pod's slice");
            }
        }
        let id = self.runtime.run_pod_sandbox(cfg)?;
        self.state.pod_ip = if self.pod.spec.host_network {
            self.settings.host_ips.first().cloned().unwrap_or_default()
        } else {
            self.runtime
                .pod_sandbox_status(&id)
                .map(|s| s.ip)
                .unwrap_or_default()
        };
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Container, ContainerPort};

    #[test]
    fn every_container_port_is_a_port_mapping_once() {
        // generatePodSandboxConfig sends MakePortMappings of every container: ports without a
        // hostPort too (host_port 0), a repeated name (or unnamed family-protocol-hostIP:
        // containerPort:hostPort) once per container.
        let port = |name: &str, cp: i32, hp: Option<i32>| ContainerPort {
            name: name.into(),
            container_port: cp,
            host_port: hp,
            protocol: "TCP".into(),
            ..Default::default()
        };
        let mut p = Pod::default();
        p.spec.containers = vec![
            Container {
                name: "a".into(),
                ports: vec![
                    port("", 80, None),
                    port("", 80, None),
                    port("web", 8080, Some(18080)),
                ],
                ..Default::default()
            },
            Container {
                name: "b".into(),
                ports: vec![port("", 80, None)],
                ..Default::default()
            },
        ];
        let got: Vec<(i32, i32)> = port_mappings(&p)
            .iter()
            .map(|m| (m.container_port, m.host_port))
            .collect();
        assert_eq!(got, vec![(80, 0), (8080, 18080), (80, 0)]);
    }
}
