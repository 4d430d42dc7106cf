//! The runtime manager of one pod (Go's pkg/kubelet/kuberuntime/kuberuntime_manager.go): what
//! it needs from the node's settings ([`RuntimeSettings`]), what it keeps between syncs
//! ([`RuntimeManagerState`]), and [`RuntimeManager`], the per-pod value the pod worker builds
//! for each step. Its methods live beside their upstream files: `sandbox`, `container`, `gc`;
//! here `kill_pod` and what they share.

use std::path::PathBuf;
use std::sync::Arc;

use tracing::warn;

use crate::api::Pod;
use crate::api::env::{ConfigMapsAndSecrets, EnvContext};
use crate::api::helpers::pod_log_dir_name;
use crate::cri::Runtime;
use crate::events::EventRecorder;
use crate::images::manager::{CredentialSources, ImageManager};
use crate::localstore::LocalStore;

use super::state::PodRuntimeState;
use super::termination_order::TerminationOrdering;

/// The kubelet always gives containers at least this long to stop unless told otherwise
/// (kuberuntime `minimumGracePeriodInSeconds`).
pub const MIN_GRACE_SECONDS: i64 = 2;

/// The node settings the runtime half of a pod sync needs (part of the kubelet's
/// `SyncSettings`).
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    /// The node's IPs (`--node-ip`, else detected), primary first: status.hostIP(s) and the
    /// pod IPs of hostNetwork pods.
    pub host_ips: Vec<String>,
    pub pod_logs_dir: PathBuf,
    /// nanolet's state directory (`--root-dir`): `pods/<uid>/...` lives below it.
    pub root_dir: PathBuf,
    /// The local ConfigMap/Secret store (configMap/secret volumes and env references of
    /// static pods).
    pub store: Option<LocalStore>,
    /// API-server mode: the ConfigMaps, Secrets and ServiceAccount tokens of API pods.
    pub api_objects: Option<Arc<crate::apiobjects::ApiObjects>>,
    /// The node's registry credentials file (docker config.json), tried after the pod's
    /// imagePullSecrets; `None` when disabled.
    pub registry_config: Option<PathBuf>,
    /// Directory of the legacy `<pod>_<ns>_<container>-<id>.log` symlinks.
    pub container_logs_dir: PathBuf,
    /// cgroupDriver: how pod cgroup parents are named (and whether nanolet writes pod totals).
    pub cgroup_driver: crate::cm::CgroupDriver,
    /// `podPidsLimit`: pids.max of the pod cgroup (TasksMax of the pod slice with the systemd
    /// driver); <= 0: none.
    pub pod_pids_limit: i64,
    /// The systemd driver's connection to systemd, for the pod slices; `None` with cgroupfs.
    pub systemd_cgroups: Option<Arc<crate::cm::systemd::Manager>>,
    /// `memorySwap.swapBehavior` and the host's swap (NodeSwap).
    pub swap: super::container_linux::SwapHost,
    /// The node's resolv.conf (`--resolv-conf`), read at every sandbox creation.
    pub host_dns: Arc<crate::api::dns::HostResolvConf>,
    /// `--cluster-dns` / `--cluster-domain`: the DNS of ClusterFirst pods, pods' FQDNs.
    pub cluster_dns: crate::api::dns::ClusterDns,
    /// The node's RuntimeClasses (local directory and, joined, the API's): a pod's
    /// `runtimeClassName` resolves to its CRI handler at every sandbox creation.
    pub runtime_classes: Arc<crate::runtimeclass::RuntimeClasses>,
    /// The device manager (device plugins): what a container's allocated devices add to its
    /// config. `None` when disabled (`--device-plugin-dir=""`) or in tests.
    pub devices: Option<Arc<crate::devicemanager::DeviceManager>>,
}

impl RuntimeSettings {
    /// `<root-dir>/pods/<uid>`: the pod's own directory (volumes, /etc/hosts, termination
    /// message files).
    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        self.root_dir.join("pods").join(uid)
    }

    /// `<pod-logs-dir>/<namespace>_<name>_<uid>`: the pod's log directory.
    pub fn pod_log_dir(&self, pod: &Pod) -> PathBuf {
        self.pod_logs_dir.join(pod_log_dir_name(pod))
    }

    /// What env references and downward API volumes of `pod` resolve against, with the pod
    /// IP `pod_ip` ("" while unknown).
    pub fn env_context(&self, pod: &Pod, pod_ip: &str) -> EnvContext {
        let cap = crate::node::capacity();
        EnvContext {
            pod_ips: if pod.spec.host_network {
                self.host_ips.clone()
            } else if pod_ip.is_empty() {
                vec![]
            } else {
                vec![pod_ip.to_string()]
            },
            host_ips: self.host_ips.clone(),
            node_cpu_millis: cap.cpu_millis,
            node_memory_bytes: cap.memory_bytes,
            node_ephemeral_bytes: 0,
            store: self.objects_for(pod),
            // API-server mode only (the kubelet's service lister exists with a client);
            // static pods do not wait for its first list.
            services: self
                .api_objects
                .as_ref()
                .map(|o| crate::api::env::ServiceSource {
                    lister: o.services().clone(),
                    wait_for_sync: Self::is_api_pod(pod),
                }),
        }
    }

    /// Whether `pod` came from the API server (its objects and tokens come from there too).
    fn is_api_pod(pod: &Pod) -> bool {
        pod.metadata
            .annotations
            .get(crate::config::naming::CONFIG_SOURCE_ANNOTATION)
            .is_some_and(|s| s == crate::config::SourceKind::Api.as_str())
    }

    /// Where `pod`'s ConfigMaps and Secrets come from: the API for API pods (in API-server
    /// mode), else the local store.
    pub fn objects_for(&self, pod: &Pod) -> Option<Arc<dyn ConfigMapsAndSecrets>> {
        match &self.api_objects {
            Some(o) if Self::is_api_pod(pod) => Some(o.clone() as Arc<dyn ConfigMapsAndSecrets>),
            _ => self
                .store
                .clone()
                .map(|s| Arc::new(s) as Arc<dyn ConfigMapsAndSecrets>),
        }
    }

    /// What `pod`'s API-data volumes are made from, with the pod IP `pod_ip`.
    pub fn volume_context(&self, pod: &Pod, pod_ip: &str) -> crate::volumes::VolumeContext {
        crate::volumes::VolumeContext {
            store: self.objects_for(pod),
            tokens: match &self.api_objects {
                Some(o) if Self::is_api_pod(pod) => {
                    Some(o.clone() as Arc<dyn crate::api::env::ServiceAccountTokens>)
                }
                _ => None,
            },
            env: self.env_context(pod, pod_ip),
            fs_group: crate::api::security::fs_group(pod),
        }
    }

    /// Reference what an API pod refers to (its object watches start); static pods: nothing.
    pub fn register_pod(&self, pod: &Pod) {
        if let Some(o) = &self.api_objects {
            if Self::is_api_pod(pod) {
                o.register_pod(pod);
            }
        }
    }

    /// The pod is gone: drop its references and tokens.
    pub fn unregister_pod(&self, uid: &str) {
        if let Some(o) = &self.api_objects {
            o.unregister_pod(uid);
        }
    }

    /// Where image pulls of `pod` find credentials.
    pub fn credential_sources<'a>(
        &'a self,
        store: Option<&'a dyn ConfigMapsAndSecrets>,
    ) -> CredentialSources<'a> {
        CredentialSources {
            store,
            registry_config: self.registry_config.as_ref(),
        }
    }
}

/// What a pod's runtime manager keeps between syncs.
#[derive(Debug, Default)]
pub struct RuntimeManagerState {
    /// The pod IP as last seen (hooks connect to it; /etc/hosts and the downward API show it).
    pub pod_ip: String,
    /// The pod's image pulls and their back-off.
    pub images: ImageManager,
    /// Per container: its config error's warning (a missing ConfigMap or Secret, FailedMount),
    /// which repeats at every sync while the object is missing: logged once per back-off step
    /// (`util::backoff::RepeatLimiter`, docs/decisions/warning-rate-limit.md).
    pub config_warnings: std::collections::BTreeMap<String, crate::util::backoff::RepeatLimiter>,
}

/// One pod's runtime manager, built by its pod worker for each step from the runtime, the pod,
/// the events recorder, the settings and the state it keeps.
pub struct RuntimeManager<'a> {
    pub runtime: &'a dyn Runtime,
    pub pod: &'a Pod,
    pub events: &'a EventRecorder,
    pub settings: &'a RuntimeSettings,
    pub state: &'a mut RuntimeManagerState,
    /// `namespace/name`, as the logs name the pod.
    pub full_name: &'a str,
}

impl RuntimeManager<'_> {
    pub(super) fn uid(&self) -> &str {
        &self.pod.metadata.uid
    }

    /// The grace period of a kill: `override_secs` (a probe's), else the pod's (at least
    /// [`MIN_GRACE_SECONDS`]).
    pub(super) fn grace_seconds(&self, override_secs: Option<i64>) -> i64 {
        match override_secs {
            Some(g) => g.max(0),
            None => self
                .pod
                .spec
                .termination_grace_period_seconds
                .unwrap_or(30)
                .max(MIN_GRACE_SECONDS),
        }
    }

    pub(super) fn log_dir(&self) -> PathBuf {
        self.settings.pod_log_dir(self.pod)
    }

    pub(super) fn pod_dir(&self) -> PathBuf {
        self.settings.pod_dir(self.uid())
    }

    /// What env references and downward API volumes resolve against.
    pub fn env_context(&self) -> EnvContext {
        self.settings.env_context(self.pod, &self.state.pod_ip)
    }

    /// Stop every container, then the sandboxes (kuberuntime `killPodWithSyncResult`): all at
    /// once, each running its preStop hook at once; with sidecars in the spec, a sidecar stops
    /// only after the regular containers and the next later sidecar did
    /// (`killContainersWithSyncResult` with a `terminationOrdering`).
    pub fn kill_pod(&self, state: &PodRuntimeState, grace_override: Option<i64>) {
        let running: Vec<_> = state.running().cloned().collect();
        let ordering = self
            .pod
            .spec
            .init_containers
            .iter()
            .any(crate::api::helpers::is_sidecar)
            .then(|| TerminationOrdering::new(self.pod, running.iter().map(|c| c.name.as_str())));
        let ordering = ordering.as_ref();
        std::thread::scope(|s| {
            for c in &running {
                s.spawn(move || {
                    self.kill_container(
                        &c.id,
                        &c.name,
                        grace_override,
                        "Stopping container",
                        ordering,
                    )
                });
            }
        });
        for sb in state.sandboxes.iter().filter(|s| s.ready) {
            if let Err(e) = self.runtime.stop_pod_sandbox(&sb.id) {
                if !e.is_not_found() {
                    warn!(pod = %self.full_name, sandbox = %sb.id, error = %e, "stopping sandbox failed");
                }
            }
        }
    }
}
