//! `nanolet run`: wires sources, podconfig, the sync loop, PLEG, the runtime and the HTTP
//! endpoints together. Everything here is plain threads and channels.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{self, Sender};
use std::time::Duration;

use tracing::{error, info, warn};

use crate::apiclient::client::ApiClient;
use crate::config::merge::PodConfig;
use crate::config::naming::CONFIG_SOURCE_ANNOTATION;
use crate::config::{Snapshot, SourceKind};
use crate::cri::Runtime;
use crate::cri::client::CriRuntime;
use crate::cri::instrumented::InstrumentedRuntime;
use crate::kubeapi::NodeContext;
use crate::kubelet::{DesiredPods, LoopMsg, SyncLoop, SyncSettings, WorkerContext};
use crate::kubeletconfig::Config;
use crate::kuberuntime::RuntimeSettings;
use crate::pleg::Pleg;
use crate::server::{self, ReadOnlyOptions};
use crate::status::StatusStore;
use crate::util::shutdown::Shutdown;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    // `source` fields are the error's source: main prints the chain with `{:#}`, so the
    // messages do not repeat them.
    #[error("container runtime {endpoint}")]
    Runtime {
        endpoint: String,
        source: crate::cri::RuntimeError,
    },
    #[error("{what} on {addr}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("starting {what}")]
    Start {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("blocking signals: {0}")]
    Signals(nix::Error),
    #[error("{0}")]
    ApiServer(crate::apiclient::kubeconfig::KubeconfigError),
    #[error("API server client: {0}")]
    ApiClient(String),
    #[error("read-only token file {}: {reason}", path.display())]
    TokenFile { path: PathBuf, reason: String },
    /// The manifest directory is writable by others (see `config::file::check_secure`).
    #[error("refusing to start: {0}")]
    ManifestDir(String),
}

/// Reads the read-only server's bearer token (the file's content, trimmed). The token itself
/// never appears in errors or logs.
pub fn read_token_file(path: &std::path::Path) -> Result<String, AgentError> {
    let err = |reason: String| AgentError::TokenFile {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(err("the file is empty".into()));
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(err(
            "the token must be one line without spaces or control characters".into(),
        ));
    }
    Ok(token.to_string())
}

/// The node's primary IPv4 address: the address of the interface carrying the default route,
/// else the first non-loopback IPv4 address, else 127.0.0.1.
pub fn detect_host_ip() -> IpAddr {
    let default_iface = std::fs::read_to_string("/proc/net/route")
        .ok()
        .and_then(|s| {
            s.lines().skip(1).find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() > 2 && f[1] == "00000000").then(|| f[0].to_string())
            })
        });
    let mut first: Option<IpAddr> = None;
    if let Ok(addrs) = nix::ifaddrs::getifaddrs() {
        for a in addrs {
            let Some(ip) = a
                .address
                .as_ref()
                .and_then(|s| s.as_sockaddr_in())
                .map(|s| IpAddr::V4(s.ip()))
            else {
                continue;
            };
            if ip.is_loopback() {
                continue;
            }
            if default_iface.as_deref() == Some(a.interface_name.as_str()) {
                return ip;
            }
            first.get_or_insert(ip);
        }
    }
    first.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// The legacy `/var/log/containers` directory: the `containers` sibling of podLogsDir.
pub fn container_logs_dir(pod_logs_dir: &std::path::Path) -> PathBuf {
    match pod_logs_dir.parent() {
        Some(p) => p.join("containers"),
        None => PathBuf::from("/var/log/containers"),
    }
}

/// Run the agent until SIGTERM/SIGINT. Pods keep running after nanolet exits.
pub fn run(cfg: Config) -> Result<(), AgentError> {
    let sigs = block_stop_signals()?;
    let health_deadline = (cfg.sync_frequency * 2).max(Duration::from_secs(300));
    let store = Arc::new(StatusStore::new(health_deadline));
    let token = match &cfg.read_only_token_file {
        Some(path) if cfg.read_only_port != 0 => Some(read_token_file(path)?),
        _ => None,
    };
    check_manifest_dir(&cfg)?;
    let runtime = connect_runtime(&cfg, &store)?;
    let host_ips = node_ips(&cfg);
    info!(version = crate::VERSION, node = %cfg.node_name, host_ip = %host_ips.join(","), "starting nanolet");
    let (loop_tx, loop_rx) = mpsc::channel::<LoopMsg>();
    let mut w = Wiring {
        cfg: &cfg,
        store,
        runtime,
        host_ips,
        loop_tx,
        shutdown: Shutdown::new(),
        probes: Arc::default(),
    };
    w.start_servers(token)?;
    let api_client = w.start_sources()?;
    w.start_images_dir()?;
    w.start_log_rotation()?;
    w.start_pleg()?;
    w.start_eviction()?;
    if let Some(client) = &api_client {
        w.start_node_agent(client)?;
    }
    spawn_signal_waiter(sigs, w.loop_tx.clone())?;
    // systemd Type=notify: READY=1 after the first sync, watchdog pings tied to healthz.
    crate::sdnotify::spawn(w.store.clone());
    let ctx = w.worker_context();
    SyncLoop::new(ctx, w.loop_tx.clone()).run(loop_rx);
    w.shutdown.trigger();
    let _ = crate::sdnotify::notify("STOPPING=1");
    info!("nanolet stopped; pods keep running");
    Ok(())
}

/// Block the stop signals in every thread (threads inherit the mask); one thread waits for them.
fn block_stop_signals() -> Result<nix::sys::signal::SigSet, AgentError> {
    let mut sigs = nix::sys::signal::SigSet::empty();
    sigs.add(nix::sys::signal::Signal::SIGTERM);
    sigs.add(nix::sys::signal::Signal::SIGINT);
    sigs.thread_block().map_err(AgentError::Signals)?;
    Ok(sigs)
}

/// The static-pod directory's permission check (unless `--allow-insecure-manifest-dir`).
fn check_manifest_dir(cfg: &Config) -> Result<(), AgentError> {
    if cfg.pod_manifest_path.as_os_str().is_empty() {
        return Ok(());
    }
    if cfg.allow_insecure_manifest_dir {
        warn!(dir = %cfg.pod_manifest_path.display(), "--allow-insecure-manifest-dir: manifest directory and file permissions are not checked");
        return Ok(());
    }
    crate::config::file::check_dir_secure(&cfg.pod_manifest_path)
        .map_err(|e| AgentError::ManifestDir(e.to_string()))
}

/// The CRI client, every call counted for /metrics (kubelet_runtime_operations_total).
fn connect_runtime(cfg: &Config, store: &StatusStore) -> Result<Arc<dyn Runtime>, AgentError> {
    let cri: Arc<dyn Runtime> = Arc::new(
        CriRuntime::connect(&cfg.runtime_endpoint, cfg.runtime_request_timeout).map_err(
            |source| AgentError::Runtime {
                endpoint: cfg.runtime_endpoint.clone(),
                source,
            },
        )?,
    );
    let runtime: Arc<dyn Runtime> =
        Arc::new(InstrumentedRuntime::new(cri, store.metrics().clone()));
    match runtime.version() {
        Ok(v) => {
            info!(runtime = %v.runtime_name, version = %v.runtime_version, api = %v.runtime_api_version, "connected to container runtime")
        }
        Err(e) => warn!(error = %e, "container runtime does not answer yet; will keep trying"),
    }
    Ok(runtime)
}

/// --node-ip, else the default route's interface address.
fn node_ips(cfg: &Config) -> Vec<String> {
    if cfg.node_ips.is_empty() {
        vec![detect_host_ip().to_string()]
    } else {
        cfg.node_ips.iter().map(IpAddr::to_string).collect()
    }
}

/// What every part is built from. Each `start_*` constructs one part and its thread and
/// registers how to stop it with the one `shutdown`.
struct Wiring<'a> {
    cfg: &'a Config,
    store: Arc<StatusStore>,
    runtime: Arc<dyn Runtime>,
    host_ips: Vec<String>,
    loop_tx: Sender<LoopMsg>,
    shutdown: Shutdown,
    /// The read-only server starts before the prober; it reads the prober through this slot.
    probes: Arc<std::sync::OnceLock<Arc<crate::prober::Prober>>>,
}

fn start_error(what: &'static str) -> impl FnOnce(std::io::Error) -> AgentError {
    move |source| AgentError::Start { what, source }
}

impl Wiring<'_> {
    /// This node as the HTTP API and the Node object describe it.
    fn node_context(&self) -> NodeContext {
        let mut n = NodeContext::new(&self.cfg.node_name);
        n.host_ips = self.host_ips.clone();
        n.max_pods = self.cfg.max_pods;
        n.pod_logs_dir = self.cfg.pod_logs_dir.clone();
        n.root_dir = self.cfg.root_dir.clone();
        n.runtime = Some(self.runtime.clone());
        n
    }

    /// The healthz server and the read-only port.
    fn start_servers(&mut self, token: Option<String>) -> Result<(), AgentError> {
        let cfg = self.cfg;
        if cfg.healthz_port != 0 {
            let addr = SocketAddr::new(cfg.healthz_bind_address, cfg.healthz_port);
            let healthz = server::spawn_healthz(addr, self.store.clone()).map_err(|source| {
                AgentError::Bind {
                    what: "healthz",
                    addr,
                    source,
                }
            })?;
            self.shutdown.hold(healthz);
        }
        if cfg.read_only_port != 0 {
            let addr = SocketAddr::new(cfg.address, cfg.read_only_port);
            let options = ReadOnlyOptions {
                node: self.node_context(),
                token,
                configz: cfg.redacted_json(),
                stats: crate::stats::StatsProvider::new(),
                probes: self.probes.clone(),
            };
            let read_only =
                server::spawn_read_only(addr, self.store.clone(), options).map_err(|source| {
                    AgentError::Bind {
                        what: "read-only server",
                        addr,
                        source,
                    }
                })?;
            self.shutdown.hold(read_only);
        }
        Ok(())
    }

    /// Sources -> podconfig -> sync loop: the file and URL sources and, with a kubeconfig, the
    /// API pod source and status writer. Returns the API client (API-server mode).
    fn start_sources(&mut self) -> Result<Option<Arc<ApiClient>>, AgentError> {
        let cfg = self.cfg;
        let (snap_tx, snap_rx) = mpsc::channel::<Snapshot>();
        // An empty staticPodPath disables the file source, as in the kubelet.
        let file_enabled = !cfg.pod_manifest_path.as_os_str().is_empty();
        let mut expected = vec![];
        if file_enabled {
            expected.push(SourceKind::File);
        }
        if cfg.manifest_url.is_some() {
            expected.push(SourceKind::Http);
        }
        let api_client = api_client(cfg)?;
        let static_pods: Arc<std::sync::Mutex<crate::apiclient::mirror::StaticPods>> =
            Arc::default();
        if let Some(client) = &api_client {
            expected.push(SourceKind::Api);
            self.start_api_pods(client, snap_tx.clone(), static_pods.clone())?;
        }
        let mirrors = api_client.as_ref().map(|_| MirrorFilter {
            static_pods,
            flagged: std::collections::BTreeSet::new(),
        });
        let podconfig = PodConfigLoop {
            pc: PodConfig::new(&expected),
            store: self.store.clone(),
            loop_tx: self.loop_tx.clone(),
            reported: std::collections::HashMap::new(),
            mirrors,
        };
        std::thread::Builder::new()
            .name("podconfig".into())
            .spawn(move || podconfig.run(snap_rx))
            .map_err(start_error("podconfig"))?;
        if file_enabled {
            let file = crate::config::file::FileSource::spawn(
                crate::config::file::FileSourceConfig {
                    dir: cfg.pod_manifest_path.clone(),
                    node_name: cfg.node_name.clone(),
                    check_frequency: cfg.file_check_frequency,
                    allow_insecure: cfg.allow_insecure_manifest_dir,
                },
                snap_tx.clone(),
            )
            .map_err(start_error("file source"))?;
            self.shutdown.hold(file);
        }
        if let Some(url) = &cfg.manifest_url {
            let source = crate::config::http::UrlSource::spawn(
                crate::config::http::UrlSourceConfig {
                    url: url.clone(),
                    headers: cfg.manifest_url_headers.clone(),
                    node_name: cfg.node_name.clone(),
                    check_frequency: cfg.http_check_frequency,
                    tls: crate::config::http::UrlTlsFiles {
                        ca_file: cfg.manifest_url_ca_file.clone(),
                        client_cert: cfg.manifest_url_client_cert.clone(),
                        client_key: cfg.manifest_url_client_key.clone(),
                    },
                },
                snap_tx,
            )
            .map_err(start_error("URL source"))?;
            self.shutdown.hold(source);
        }
        Ok(api_client)
    }

    /// API-server mode: this node's pods as the third source, and the status writer (with
    /// mirror pods for static pods).
    fn start_api_pods(
        &mut self,
        client: &Arc<ApiClient>,
        snap_tx: Sender<Snapshot>,
        static_pods: Arc<std::sync::Mutex<crate::apiclient::mirror::StaticPods>>,
    ) -> Result<(), AgentError> {
        let api_view: Arc<std::sync::Mutex<crate::apiclient::podsource::ApiView>> = Arc::default();
        let source = crate::apiclient::podsource::ApiPodSource::new(
            client.clone(),
            &self.cfg.node_name,
            snap_tx,
            api_view.clone(),
            &self.cfg.root_dir,
        );
        let stop = self.shutdown.receiver();
        std::thread::Builder::new()
            .name("api-pods".into())
            .stack_size(1024 * 1024)
            .spawn(move || source.run(stop))
            .map_err(start_error("API pod source"))?;
        let mirrors = crate::apiclient::mirror::MirrorManager::new(
            client.clone(),
            &self.cfg.node_name,
            api_view.clone(),
            static_pods,
        );
        let writer = crate::apiclient::podsource::StatusWriter::new(
            client.clone(),
            self.store.clone(),
            self.runtime.clone(),
            api_view,
            Some(mirrors),
        );
        let stop = self.shutdown.receiver();
        std::thread::Builder::new()
            .name("api-status".into())
            .stack_size(1024 * 1024)
            .spawn(move || writer.run(stop))
            .map_err(start_error("API status writer"))?;
        Ok(())
    }

    /// Air-gapped images: archives in the images directory are imported into containerd.
    fn start_images_dir(&mut self) -> Result<(), AgentError> {
        let Some(dir) = self.cfg.images_dir() else {
            return Ok(());
        };
        let events = self.store.clone();
        let poke = self.loop_tx.clone();
        let report: crate::images::dir::Report = Box::new(move |file, warning, reason, msg| {
            let kind = if warning {
                crate::events::EventType::Warning
            } else {
                crate::events::EventType::Normal
            };
            // No object to name but the archive: like FailedValidation, in `default`.
            events.events().record(
                &crate::events::PodRef::pod("default", file, ""),
                kind,
                reason,
                msg,
            );
            if !warning {
                // Pods waiting for this image (ErrImageNeverPull) retry now.
                let _ = poke.send(LoopMsg::PodsChanged(events.uids()));
            }
        });
        let dir_cfg = crate::images::dir::ImagesDirConfig {
            dir,
            root_dir: self.cfg.root_dir.clone(),
            endpoint: self.cfg.runtime_endpoint.clone(),
            snapshotter: self.cfg.image_snapshotter.clone(),
            allow_insecure: self.cfg.allow_insecure_manifest_dir,
        };
        let handle =
            crate::images::dir::spawn(dir_cfg, report).map_err(start_error("images directory"))?;
        self.shutdown.hold(handle);
        Ok(())
    }

    /// Container log rotation (the kubelet's job, not containerd's). It waits in poll(2) on
    /// inotify and a stop pipe.
    fn start_log_rotation(&mut self) -> Result<(), AgentError> {
        let stop = self.shutdown.pipe().map_err(start_error("log rotation"))?;
        let rt = self.runtime.clone();
        let policy = crate::logrotate::RotationPolicy {
            max_size: self.cfg.container_log_max_size,
            max_files: self.cfg.container_log_max_files,
            interval: self.cfg.container_log_monitor_interval,
        };
        let logs_dir = self.cfg.pod_logs_dir.clone();
        std::thread::Builder::new()
            .name("logrotate".into())
            .spawn(move || crate::logrotate::run(rt, policy, logs_dir, stop))
            .map_err(start_error("log rotation"))?;
        Ok(())
    }

    fn start_pleg(&mut self) -> Result<(), AgentError> {
        let pleg = Pleg::new(
            self.runtime.clone(),
            self.store.clone(),
            pleg_to_loop(self.loop_tx.clone()),
        );
        let stop = self.shutdown.receiver();
        std::thread::Builder::new()
            .name("pleg".into())
            .spawn(move || pleg.run(stop))
            .map_err(start_error("PLEG"))?;
        Ok(())
    }

    /// The eviction manager (node pressure, local storage limits, image GC).
    fn start_eviction(&mut self) -> Result<(), AgentError> {
        let rt = self.runtime.clone();
        let root = self.cfg.root_dir.clone();
        let manager = crate::eviction::Manager::new(
            self.cfg.eviction.clone(),
            self.runtime.clone(),
            self.store.clone(),
            eviction_to_loop(self.loop_tx.clone()),
            crate::eviction::Paths {
                root_dir: self.cfg.root_dir.clone(),
                pod_logs_dir: self.cfg.pod_logs_dir.clone(),
            },
            Box::new(move || crate::eviction::gc::pinned_images(rt.as_ref(), &root)),
        );
        let stop = self.shutdown.receiver();
        std::thread::Builder::new()
            .name("eviction".into())
            .stack_size(512 * 1024)
            .spawn(move || manager.run(stop))
            .map_err(start_error("eviction manager"))?;
        Ok(())
    }

    /// API-server mode: register the Node, keep its Lease and status fresh.
    fn start_node_agent(&mut self, client: &Arc<ApiClient>) -> Result<(), AgentError> {
        let agent = crate::apiclient::node::NodeAgent::new(
            client.clone(),
            Arc::new(self.node_context()),
            self.store.clone(),
            crate::apiclient::node::NodeSettings {
                labels: self.cfg.node_labels.clone(),
                taints: self.cfg.register_with_taints.clone(),
                status_update_frequency: self.cfg.node_status_update_frequency,
            },
        );
        let stop = self.shutdown.receiver();
        std::thread::Builder::new()
            .name("node-status".into())
            .stack_size(1024 * 1024)
            .spawn(move || agent.run(stop))
            .map_err(start_error("node status"))?;
        Ok(())
    }

    /// What every pod worker shares: the runtime, the prober (started here), the status store
    /// and the settings.
    fn worker_context(&self) -> Arc<WorkerContext> {
        let cfg = self.cfg;
        let prober = crate::prober::Prober::start(
            self.runtime.clone(),
            Some(probe_updates_to_loop(self.loop_tx.clone())),
        );
        prober.set_event_store(self.store.clone());
        let _ = self.probes.set(prober.clone());
        let (allocatable_cpu_millis, allocatable_memory_bytes) =
            cfg.eviction.allocatable(crate::node::capacity());
        Arc::new(WorkerContext {
            runtime: self.runtime.clone(),
            prober,
            store: self.store.clone(),
            settings: SyncSettings {
                node_name: cfg.node_name.clone(),
                runtime: RuntimeSettings {
                    host_ips: self.host_ips.clone(),
                    pod_logs_dir: cfg.pod_logs_dir.clone(),
                    root_dir: cfg.root_dir.clone(),
                    store: Some(
                        crate::localstore::LocalStore::new(
                            cfg.config_map_dir.clone(),
                            cfg.secret_dir.clone(),
                        )
                        .allowing_insecure(cfg.allow_insecure_manifest_dir),
                    ),
                    registry_config: cfg.image_credentials_file(),
                    container_logs_dir: container_logs_dir(&cfg.pod_logs_dir),
                    cgroup_driver: cfg.cgroup_driver,
                    host_dns: Arc::new(crate::api::dns::HostResolvConf::new(
                        cfg.resolv_conf.clone(),
                        // Test seam (ARCHITECTURE "Seams"): where systemd-resolved's own file is.
                        std::env::var_os("NANOLET_SYSTEMD_RESOLVED_RESOLV_CONF")
                            .map(std::path::PathBuf::from)
                            .unwrap_or_else(|| crate::api::dns::SYSTEMD_RESOLVED_UPSTREAM.into()),
                    )),
                },
                resync: cfg.sync_frequency,
                max_pods: cfg.max_pods,
                // Allocatable = capacity - systemReserved - kubeReserved - the hard
                // memory.available threshold.
                allocatable_cpu_millis,
                allocatable_memory_bytes,
                eviction_transition: cfg.eviction.pressure_transition_period,
                security: cfg.security.clone(),
                host_security: crate::api::security::HostSecurity::detect(),
                node_labels: crate::kubelet::admission::node_labels(
                    &cfg.node_name,
                    &cfg.node_labels,
                ),
            },
        })
    }
}

/// API-server mode (a kubeconfig is given): one client for the pod source, the status writer
/// and the node agent.
fn api_client(cfg: &Config) -> Result<Option<Arc<ApiClient>>, AgentError> {
    let Some(path) = &cfg.kubeconfig else {
        return Ok(None);
    };
    let kc = crate::apiclient::kubeconfig::Kubeconfig::load(path).map_err(AgentError::ApiServer)?;
    let client = ApiClient::new(&kc, Duration::from_secs(10))
        .map_err(|e| AgentError::ApiClient(e.to_string()))?;
    info!(server = %kc.server, "API-server mode: joining the cluster");
    Ok(Some(Arc::new(client)))
}

/// The podconfig thread: merges the sources' snapshots and hands the desired pods to the sync
/// loop. Each source's rejected manifests are logged (and recorded as an event) once, when
/// they appear, not on every re-list.
struct PodConfigLoop {
    pc: PodConfig,
    store: Arc<StatusStore>,
    loop_tx: Sender<LoopMsg>,
    reported: std::collections::HashMap<SourceKind, std::collections::BTreeSet<String>>,
    /// API-server mode: which static pods get mirror pods.
    mirrors: Option<MirrorFilter>,
}

impl PodConfigLoop {
    fn run(mut self, snaps: mpsc::Receiver<Snapshot>) {
        for snap in snaps.iter() {
            self.report_new_errors(&snap);
            let Some(d) = self.pc.update(snap) else {
                continue;
            };
            let mut errors = d.errors;
            if let Some(m) = &mut self.mirrors {
                m.update(&self.store, &d.pods, d.all_sources_ready, &mut errors);
            }
            let desired = DesiredPods {
                pods: d.pods.into_iter().map(|(uid, sp)| (uid, sp.pod)).collect(),
                errors,
                all_sources_ready: d.all_sources_ready,
            };
            if self
                .loop_tx
                .send(LoopMsg::Desired(Box::new(desired)))
                .is_err()
            {
                return;
            }
        }
    }

    fn report_new_errors(&mut self, snap: &Snapshot) {
        let now: std::collections::BTreeSet<String> =
            snap.errors.iter().map(ToString::to_string).collect();
        let before = self.reported.remove(&snap.source).unwrap_or_default();
        for e in &snap.errors {
            if !before.contains(&e.to_string()) {
                warn!(error = %e, "manifest rejected");
                record_failed_validation(&self.store, e);
            }
        }
        self.reported.insert(snap.source, now);
    }
}

/// API-server mode: the static pods that get mirror pods (published for the status writer);
/// a static pod referencing API objects gets none, with an error and a `MirrorPodRefused`
/// event once.
struct MirrorFilter {
    static_pods: Arc<std::sync::Mutex<crate::apiclient::mirror::StaticPods>>,
    flagged: std::collections::BTreeSet<String>,
}

impl MirrorFilter {
    fn update(
        &mut self,
        store: &StatusStore,
        pods: &std::collections::BTreeMap<String, crate::config::SourcePod>,
        all_sources_ready: bool,
        errors: &mut Vec<crate::config::ManifestError>,
    ) {
        let mut statics = crate::apiclient::mirror::StaticPods {
            pods: vec![],
            all_sources_ready,
        };
        let mut now_flagged = std::collections::BTreeSet::new();
        for sp in pods.values() {
            let meta = &sp.pod.metadata;
            if meta
                .annotations
                .get(CONFIG_SOURCE_ANNOTATION)
                .map(String::as_str)
                == Some(SourceKind::Api.as_str())
            {
                continue;
            }
            match no_mirror_reason(sp) {
                Some(e) => {
                    if !self.flagged.contains(&meta.uid) {
                        warn!(pod = %format!("{}/{}", meta.namespace, meta.name), error = %e, "no mirror pod for this static pod");
                        store.events().record(
                            &crate::events::PodRef::pod(&meta.namespace, &meta.name, &meta.uid),
                            crate::events::EventType::Warning,
                            "MirrorPodRefused",
                            &e.to_string(),
                        );
                    }
                    now_flagged.insert(meta.uid.clone());
                    errors.push(e);
                }
                None => statics.pods.push(sp.pod.clone()),
            }
        }
        self.flagged = now_flagged;
        *self.static_pods.lock().unwrap_or_else(|e| e.into_inner()) = statics;
    }
}

/// API-server mode: why a static pod gets no mirror pod (it references API objects, which the
/// API server's NodeRestriction admission refuses in mirror pods and the kubelet rejects since
/// PreventStaticPodAPIReferences). nanolet still runs the pod from the local configMap/secret
/// store; the error is reported on `/manifests/errors` and as a `MirrorPodRefused` event.
fn no_mirror_reason(sp: &crate::config::SourcePod) -> Option<crate::config::ManifestError> {
    let (field, resource) = crate::apiclient::mirror::api_object_reference(&sp.pod)?;
    Some(crate::config::ManifestError {
        origin: sp.origin.clone(),
        field,
        reason: format!(
            "static pods may not reference {resource}: no mirror pod is created in API-server mode (the pod runs from the local store)"
        ),
    })
}

/// A `FailedValidation` Warning event for a rejected manifest. The pod never existed, so the
/// event names the manifest (the file name without extension, or the URL) in `default`.
fn record_failed_validation(store: &StatusStore, e: &crate::config::ManifestError) {
    let name = std::path::Path::new(&e.origin)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !e.origin.contains("://") && !s.is_empty())
        .unwrap_or_else(|| e.origin.clone());
    store.events().record(
        &crate::events::PodRef::pod("default", &name, ""),
        crate::events::EventType::Warning,
        "FailedValidation",
        &e.to_string(),
    );
}

/// The PLEG's events, as sync loop messages (false once the loop is gone).
fn pleg_to_loop(tx: Sender<LoopMsg>) -> crate::pleg::PlegSink {
    Box::new(move |event| {
        let msg = match event {
            crate::pleg::PlegEvent::PodsChanged(uids) => LoopMsg::PodsChanged(uids),
            crate::pleg::PlegEvent::RuntimePods(pods) => LoopMsg::RuntimePods(pods),
        };
        tx.send(msg).is_ok()
    })
}

/// The eviction manager's events, as sync loop messages.
fn eviction_to_loop(tx: Sender<LoopMsg>) -> crate::eviction::EventSink {
    Box::new(move |event| {
        let msg = match event {
            crate::eviction::ManagerEvent::Evict(eviction) => LoopMsg::Evict(eviction),
            crate::eviction::ManagerEvent::NodeConditionsChanged => LoopMsg::NodeConditions,
        };
        let _ = tx.send(msg);
    })
}

/// A changed probe result resyncs its pod.
fn probe_updates_to_loop(tx: Sender<LoopMsg>) -> crate::prober::ResultUpdates {
    Box::new(move |uid| {
        let _ = tx.send(LoopMsg::PodsChanged(vec![uid]));
    })
}

fn spawn_signal_waiter(
    sigs: nix::sys::signal::SigSet,
    tx: Sender<LoopMsg>,
) -> Result<(), AgentError> {
    std::thread::Builder::new()
        .name("signals".into())
        .stack_size(64 * 1024)
        .spawn(move || match sigs.wait() {
            Ok(sig) => {
                info!(signal = ?sig, "stopping");
                let _ = tx.send(LoopMsg::Shutdown);
            }
            Err(e) => error!(error = %e, "waiting for signals failed"),
        })
        .map(|_| ())
        .map_err(|source| AgentError::Start {
            what: "signal waiter",
            source,
        })
}
