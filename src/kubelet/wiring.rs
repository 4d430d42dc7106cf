//! `nanolet run` (upstream `NewMainKubelet` + `Kubelet.Run`): [`Kubelet::new`] takes the
//! settings and the [`Dependencies`] (runtime, status store, API client, node IPs) and checks
//! what must hold before anything starts; [`Kubelet::run`] starts every part (HTTP servers,
//! sources and podconfig, images directory, log rotation, PLEG, eviction, node status, prober),
//! each registering its stop with one [`Shutdown`], runs the sync loop until SIGTERM/SIGINT,
//! then stops them all. Construction only: what each part does lives in its module. The
//! producers' events (PLEG, eviction, prober) are adapted to the sync loop's messages here.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{self, Sender};
use std::time::Duration;

use tracing::{error, info, warn};

use super::podconfig::PodConfigLoop;
use super::{LoopMsg, SyncLoop, SyncSettings, WorkerContext};
use crate::apiclient::client::ApiClient;
use crate::config::merge::PodConfig;
use crate::config::{Snapshot, SourceKind};
use crate::cri::Runtime;
use crate::cri::client::CriRuntime;
use crate::cri::instrumented::InstrumentedRuntime;
use crate::kubeletconfig::Config;
use crate::kuberuntime::RuntimeSettings;
use crate::nodestatus::NodeContext;
use crate::nodestatus::mirror::MirrorFilter;
use crate::pleg::Pleg;
use crate::server::{self, ReadOnlyOptions};
use crate::status::StatusStore;
use crate::util::shutdown::Shutdown;

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
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
    #[error("device manager: {0}")]
    DeviceManager(crate::devicemanager::DeviceError),
    #[error("{0}")]
    ApiServer(crate::apiclient::kubeconfig::KubeconfigError),
    #[error("API server client: {0}")]
    ApiClient(crate::apiclient::client::ApiError),
    #[error(transparent)]
    TokenFile(#[from] crate::server::TokenFileError),
    #[cfg(feature = "tls")]
    #[error("kubelet server: {0}")]
    Secure(crate::server::secure::SecureError),
    /// The manifest directory is writable by others (see `config::file::check_secure`).
    #[error("refusing to start: {0}")]
    ManifestDir(crate::config::file::FileSourceError),
    #[cfg(feature = "tls")]
    #[error("certificates: {0}")]
    Certificates(crate::certificate::CertificateError),
}

/// The legacy `/var/log/containers` directory: the `containers` sibling of podLogsDir.
pub fn container_logs_dir(pod_logs_dir: &std::path::Path) -> PathBuf {
    match pod_logs_dir.parent() {
        Some(p) => p.join("containers"),
        None => PathBuf::from("/var/log/containers"),
    }
}

/// Run nanolet until SIGTERM/SIGINT. Pods keep running after nanolet exits.
pub fn run(cfg: Config) -> Result<(), KubeletError> {
    // Before any thread exists, so every thread inherits the mask.
    let sigs = block_stop_signals()?;
    let deps = Dependencies::connect(&cfg)?;
    Kubelet::new(cfg, deps)?.run(sigs)
}

/// What the kubelet is built from besides its settings (upstream `kubelet.Dependencies`).
pub struct Dependencies {
    /// The container runtime (CRI), every call counted for /metrics.
    pub runtime: Arc<dyn Runtime>,
    /// The status store every part reports into and the HTTP servers read.
    pub store: Arc<StatusStore>,
    /// API-server mode (a kubeconfig is given): one client for the pod source, the status
    /// writer and the node heartbeat.
    pub api_client: Option<Arc<ApiClient>>,
    /// The node's IPs, primary first: `--node-ip`, else the default route's interface address.
    pub host_ips: Vec<String>,
    /// TLS bootstrap still to do (`--bootstrap-kubeconfig`, and `--kubeconfig` missing or its
    /// client certificate expired): `api_client` is `None` until it is done, on its own thread.
    #[cfg(feature = "tls")]
    pub bootstrap: Option<crate::certificate::Bootstrap>,
}

impl Dependencies {
    /// The real dependencies of `cfg`: dials the runtime (it need not answer yet), loads the
    /// kubeconfig. Nothing is started.
    pub fn connect(cfg: &Config) -> Result<Dependencies, KubeletError> {
        let health_deadline = (cfg.sync_frequency * 2).max(Duration::from_secs(300));
        let store = Arc::new(StatusStore::new(health_deadline));
        #[cfg(feature = "tls")]
        let bootstrap = pending_bootstrap(cfg);
        #[cfg(feature = "tls")]
        let api_client = match bootstrap {
            Some(_) => None,
            None => api_client(cfg)?,
        };
        #[cfg(not(feature = "tls"))]
        let api_client = api_client(cfg)?;
        Ok(Dependencies {
            runtime: connect_runtime(cfg, &store)?,
            store,
            api_client,
            host_ips: node_ips(cfg),
            #[cfg(feature = "tls")]
            bootstrap,
        })
    }
}

/// nanolet, built and not yet running.
pub struct Kubelet {
    cfg: Config,
    deps: Dependencies,
    /// The read-only port's bearer token (`--read-only-token-file`).
    token: Option<String>,
}

impl Kubelet {
    /// Checks what must hold before anything starts: the read-only token file, the manifest
    /// directory's permissions.
    pub fn new(cfg: Config, deps: Dependencies) -> Result<Kubelet, KubeletError> {
        let token = match &cfg.read_only_token_file {
            Some(path) if cfg.read_only_port != 0 => Some(server::read_token_file(path)?),
            _ => None,
        };
        check_manifest_dir(&cfg)?;
        Ok(Kubelet { cfg, deps, token })
    }

    /// Starts every part, runs the sync loop until a signal of `stop_signals` arrives (they
    /// must be blocked in every thread), then stops every part through one [`Shutdown`].
    pub fn run(self, stop_signals: nix::sys::signal::SigSet) -> Result<(), KubeletError> {
        let Kubelet { cfg, deps, token } = self;
        info!(version = crate::VERSION, node = %cfg.node_name, host_ip = %deps.host_ips.join(","), "starting nanolet");
        let (loop_tx, loop_rx) = mpsc::channel::<LoopMsg>();
        let mut w = Wiring {
            cfg: &cfg,
            store: deps.store,
            runtime: deps.runtime,
            host_ips: deps.host_ips,
            loop_tx,
            shutdown: Shutdown::new(),
            probes: Arc::default(),
            pod_cache: Arc::default(),
            kubelet_port: 0,
            on_api_client: Vec::new(),
            api_objects: None,
            runtime_classes: crate::runtimeclass::RuntimeClasses::new(
                Some(cfg.runtime_class_dir.clone()),
                cfg.allow_insecure_manifest_dir,
            ),
            devices: None,
            node_status_wake: {
                let (tx, rx) = mpsc::channel();
                (tx, Some(rx))
            },
            systemd_cgroups: (cfg.cgroup_driver == crate::cm::CgroupDriver::Systemd).then(|| {
                Arc::new(crate::cm::systemd::Manager::new(std::path::Path::new(
                    CGROUP_ROOT,
                )))
            }),
        };
        w.start_device_manager()?;
        w.start_pod_resources()?;
        w.start_secure_server(deps.api_client.as_ref())?;
        w.start_servers(token)?;
        #[cfg(feature = "tls")]
        let bootstrap = deps.bootstrap;
        #[cfg(not(feature = "tls"))]
        let bootstrap: Option<()> = None;
        if deps.api_client.is_some() || bootstrap.is_some() {
            w.attach_api_objects();
        }
        let api_mode = w.start_sources(deps.api_client.is_some() || bootstrap.is_some())?;
        let first_pass = w.start_images_dir()?;
        w.start_runtime_status(first_pass)?;
        w.start_log_rotation()?;
        w.start_pleg()?;
        w.start_eviction()?;
        w.start_node_shutdown();
        enforce_node_allocatable(&cfg, w.systemd_cgroups.as_deref());
        // API-server mode starts once a client credential exists: now, or when TLS bootstrap
        // (its own thread) has one. Static pods never wait for it.
        match (deps.api_client, api_mode, bootstrap) {
            (Some(client), Some(mode), _) => mode.start(client)?,
            #[cfg(feature = "tls")]
            (None, Some(mode), Some(b)) => mode.after_bootstrap(b)?,
            _ => {}
        }
        spawn_signal_waiter(stop_signals, w.loop_tx.clone())?;
        // systemd Type=notify: READY=1 after the first sync, watchdog pings tied to healthz.
        crate::sdnotify::spawn(w.store.clone());
        let ctx = w.worker_context();
        SyncLoop::new(ctx, w.loop_tx.clone()).run(loop_rx);
        w.shutdown.trigger();
        let _ = crate::sdnotify::notify("STOPPING=1");
        info!("nanolet stopped; pods keep running");
        Ok(())
    }
}

/// Block the stop signals in every thread (threads inherit the mask); one thread waits for them.
fn block_stop_signals() -> Result<nix::sys::signal::SigSet, KubeletError> {
    let mut sigs = nix::sys::signal::SigSet::empty();
    sigs.add(nix::sys::signal::Signal::SIGTERM);
    sigs.add(nix::sys::signal::Signal::SIGINT);
    sigs.thread_block().map_err(KubeletError::Signals)?;
    Ok(sigs)
}

/// The static-pod directory's permission check (unless `--allow-insecure-manifest-dir`).
fn check_manifest_dir(cfg: &Config) -> Result<(), KubeletError> {
    if cfg.pod_manifest_path.as_os_str().is_empty() {
        return Ok(());
    }
    if cfg.allow_insecure_manifest_dir {
        warn!(dir = %cfg.pod_manifest_path.display(), "--allow-insecure-manifest-dir: manifest directory and file permissions are not checked");
        return Ok(());
    }
    crate::config::file::check_dir_secure(&cfg.pod_manifest_path).map_err(KubeletError::ManifestDir)
}

/// The CRI client, every call counted for /metrics (kubelet_runtime_operations_total).
fn connect_runtime(cfg: &Config, store: &StatusStore) -> Result<Arc<dyn Runtime>, KubeletError> {
    let cri: Arc<dyn Runtime> = Arc::new(
        CriRuntime::connect(&cfg.runtime_endpoint, cfg.runtime_request_timeout).map_err(
            |source| KubeletError::Runtime {
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
        // It answers, but not CRI: the runtime status check says so and what to do.
        Err(e) if e.kind == crate::cri::ErrorKind::Unimplemented => {}
        Err(e) => warn!(error = %e, "container runtime does not answer yet; will keep trying"),
    }
    Ok(runtime)
}

/// --node-ip, else the default route's interface address.
fn node_ips(cfg: &Config) -> Vec<String> {
    if cfg.node_ips.is_empty() {
        let ip = crate::node::detect_host_ip();
        if cfg.kubeconfig.is_some() && !crate::node::is_node_ip(ip) {
            warn!(node = %cfg.node_name, ip = %ip, "no global unicast address found for the node's InternalIP; the API server refuses loopback and link-local addresses for nodes/proxy (kubectl logs/exec); set --node-ip");
        }
        vec![ip.to_string()]
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
    /// The pod cache: the PLEG fills it, the pod workers read it.
    pod_cache: Arc<crate::kuberuntime::cache::PodCache>,
    /// The kubelet server's port once it serves (the Node's daemonEndpoints), else 0.
    kubelet_port: u16,
    /// Parts built before API-server mode has its client (TLS bootstrap may make it later)
    /// register what to do with it here, e.g. the serving certificate's
    /// `certificate::ServingCertificate::attach_client`. [`ApiMode::start`] runs them.
    on_api_client: Vec<ApiClientHook>,
    /// API-server mode: the ConfigMaps, Secrets and tokens of API pods.
    api_objects: Option<Arc<crate::apiobjects::ApiObjects>>,
    /// The node's RuntimeClasses: the local directory, and the API's once joined.
    runtime_classes: Arc<crate::runtimeclass::RuntimeClasses>,
    /// The device manager (device plugins' registration socket), unless disabled.
    devices: Option<Arc<crate::devicemanager::DeviceManager>>,
    /// `--cgroup-driver=systemd`: the connection to systemd for the slices (opened on first
    /// use).
    systemd_cgroups: Option<Arc<crate::cm::systemd::Manager>>,
    /// Wakes the node status loop (API-server mode): the node shutdown manager asks for an
    /// immediate status, the one `Shutdown` stops it.
    node_status_wake: (
        Sender<crate::nodestatus::heartbeat::Wake>,
        Option<mpsc::Receiver<crate::nodestatus::heartbeat::Wake>>,
    ),
}

/// Run once the API client exists (see `Wiring::on_api_client`).
type ApiClientHook = Box<dyn FnOnce(&Arc<ApiClient>) + Send>;

fn start_error(what: &'static str) -> impl FnOnce(std::io::Error) -> KubeletError {
    move |source| KubeletError::Start { what, source }
}

impl Wiring<'_> {
    /// API-server mode: the API pods' ConfigMaps, Secrets and tokens, served once the client
    /// exists, restored from and kept in the offline checkpoint.
    fn attach_api_objects(&mut self) {
        use crate::apiobjects::checkpoint::{CheckpointSettings, OBJECTS_FILE};
        let objects = Arc::new(crate::apiobjects::ApiObjects::with_checkpoint(
            CheckpointSettings {
                path: self.cfg.root_dir.join(OBJECTS_FILE),
                node: self.cfg.node_name.clone(),
                secrets: self.cfg.checkpoint_secrets,
            },
        ));
        if let Err(e) = objects.spawn_checkpoint_writer() {
            warn!(error = %e, "starting the API object checkpoint writer; API pods' objects are not checkpointed");
        }
        let o = objects.clone();
        self.on_api_client
            .push(Box::new(move |client: &Arc<ApiClient>| {
                o.attach_client(client);
                o.services().start(client);
            }));
        let classes = self.runtime_classes.clone();
        self.on_api_client
            .push(Box::new(move |client: &Arc<ApiClient>| {
                crate::runtimeclass::reflect::start(&classes, client);
            }));
        self.api_objects = Some(objects);
    }

    /// The device plugin registration server on `<device-plugin-dir>/kubelet.sock` (the
    /// kubelet fails to start without it too). A change of devices wakes the node status.
    fn start_device_manager(&mut self) -> Result<(), KubeletError> {
        let Some(dir) = &self.cfg.device_plugin_dir else {
            return Ok(());
        };
        let dm = crate::devicemanager::DeviceManager::start(dir, &self.cfg.root_dir)
            .map_err(KubeletError::DeviceManager)?;
        let wake = std::sync::Mutex::new(self.node_status_wake.0.clone());
        dm.on_change(Box::new(move || {
            let tx = wake.lock().unwrap_or_else(|p| p.into_inner());
            let _ = tx.send(crate::nodestatus::heartbeat::Wake::StatusNow);
        }));
        self.devices = Some(dm);
        Ok(())
    }

    /// The pod-resources API on `<pod-resources-dir>/kubelet.sock`, unless disabled.
    fn start_pod_resources(&mut self) -> Result<(), KubeletError> {
        let Some(dir) = &self.cfg.pod_resources_dir else {
            return Ok(());
        };
        crate::devicemanager::podresources::start(dir, self.store.clone(), self.devices.clone())
            .map_err(KubeletError::DeviceManager)
    }

    /// This node as the HTTP API and the Node object describe it.
    fn node_context(&self) -> NodeContext {
        let mut n = NodeContext::new(&self.cfg.node_name);
        n.host_ips = self.host_ips.clone();
        n.max_pods = self.cfg.max_pods;
        n.pod_logs_dir = self.cfg.pod_logs_dir.clone();
        n.root_dir = self.cfg.root_dir.clone();
        n.runtime = Some(self.runtime.clone());
        n.kubelet_port = self.kubelet_port;
        n.eviction = self.cfg.eviction.clone();
        n.extended = self.cfg.extended_resources.clone();
        n.devices = self.devices.clone();
        n
    }

    /// The kubelet server on `--port` (HTTPS): authentication and authorization from the
    /// settings, the reviews through the API client.
    #[cfg(feature = "tls")]
    fn start_secure_server(&mut self, api: Option<&Arc<ApiClient>>) -> Result<(), KubeletError> {
        use crate::server::auth::{ApiReviewer, Auth, AuthOptions, Reviewer};
        use crate::server::secure;
        let cfg = self.cfg;
        if cfg.port == 0 {
            return Ok(());
        }
        let certificate = crate::certificate::ServingCertificate::from_config(cfg, api.cloned())
            .map_err(KubeletError::Certificates)?;
        let client_ca = match &cfg.client_ca_file {
            Some(path) => Some(secure::load_client_ca(path).map_err(KubeletError::Secure)?),
            None => None,
        };
        if client_ca.is_none() && !cfg.authentication_token_webhook && !cfg.anonymous_auth {
            warn!(
                "kubelet server on port {}: no authentication is configured (--client-ca-file, --authentication-token-webhook or --anonymous-auth): every request but a local administrator's (nanolet admin-kubeconfig) is refused with 401",
                cfg.port
            );
        }
        let webhook = cfg.authorization_mode() == crate::kubeletconfig::AuthorizationMode::Webhook;
        let options = AuthOptions {
            node_name: cfg.node_name.clone(),
            anonymous: cfg.anonymous_auth,
            token_webhook_ttl: cfg
                .authentication_token_webhook
                .then_some(cfg.authentication_token_webhook_cache_ttl),
            authz_webhook_ttls: webhook.then_some((
                cfg.authorization_webhook_cache_authorized_ttl,
                cfg.authorization_webhook_cache_unauthorized_ttl,
            )),
        };
        let reviewer = api.map(|client| {
            Arc::new(ApiReviewer {
                client: client.clone(),
            }) as Arc<dyn Reviewer>
        });
        let addr = SocketAddr::new(cfg.address, cfg.port);
        let auth = Arc::new(Auth::new(options, reviewer));
        if api.is_none() {
            // TLS bootstrap makes the client later: the webhooks and the serving certificate's
            // rotation (serverTLSBootstrap) start with it.
            let (auth, certificate) = (auth.clone(), certificate.clone());
            self.on_api_client
                .push(Box::new(move |client: &Arc<ApiClient>| {
                    auth.set_reviewer(Arc::new(ApiReviewer {
                        client: client.clone(),
                    }));
                    if let Err(e) = certificate.attach_client(client.clone()) {
                        warn!(error = %e, "serving certificate rotation");
                    }
                }));
        }
        let options = secure::SecureOptions {
            shared: ReadOnlyOptions {
                node: self.node_context(),
                token: None,
                configz: cfg.redacted_json(),
                stats: crate::stats::StatsProvider::new(),
                probes: self.probes.clone(),
            },
            auth,
            certificate,
            client_ca,
            // The device's local administrators (`nanolet admin-kubeconfig`).
            local_admin_ca: Some(crate::certificate::localca::paths(&cfg.cert_dir()).0),
            run_timeout: cfg.runtime_request_timeout,
            system_logs: cfg
                .enable_system_log_handler
                .then(|| PathBuf::from("/var/log")),
        };
        let handle = secure::spawn_secure(addr, self.store.clone(), options).map_err(|source| {
            KubeletError::Bind {
                what: "kubelet server",
                addr,
                source,
            }
        })?;
        self.kubelet_port = handle.local_addr().port();
        self.shutdown.hold(handle);
        Ok(())
    }

    /// Without TLS there is no kubelet server (the config check refuses a non-zero --port).
    #[cfg(not(feature = "tls"))]
    fn start_secure_server(&mut self, _api: Option<&Arc<ApiClient>>) -> Result<(), KubeletError> {
        Ok(())
    }

    /// The healthz server and the read-only port.
    fn start_servers(&mut self, token: Option<String>) -> Result<(), KubeletError> {
        let cfg = self.cfg;
        if cfg.healthz_port != 0 {
            let addr = SocketAddr::new(cfg.healthz_bind_address, cfg.healthz_port);
            let healthz = server::spawn_healthz(addr, self.store.clone()).map_err(|source| {
                KubeletError::Bind {
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
                    KubeletError::Bind {
                        what: "read-only server",
                        addr,
                        source,
                    }
                })?;
            self.shutdown.hold(read_only);
        }
        Ok(())
    }

    /// Sources -> podconfig -> sync loop: the file and URL sources and, in API-server mode
    /// (`api`), what the API pod source, status writer and heartbeat need, started later by
    /// [`ApiMode::start`].
    fn start_sources(&mut self, api: bool) -> Result<Option<ApiMode>, KubeletError> {
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
        let static_pods: Arc<std::sync::Mutex<crate::nodestatus::mirror::StaticPods>> =
            Arc::default();
        let api_mode = api.then(|| {
            expected.push(SourceKind::Api);
            self.api_mode(snap_tx.clone(), static_pods.clone())
        });
        let mirrors = api.then(|| MirrorFilter::new(static_pods));
        let podconfig = PodConfigLoop::new(
            PodConfig::new(&expected),
            self.store.clone(),
            self.loop_tx.clone(),
            mirrors,
        );
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
        Ok(api_mode)
    }

    /// API-server mode's parts, ready to start once a client exists.
    fn api_mode(
        &mut self,
        snap_tx: Sender<Snapshot>,
        static_pods: Arc<std::sync::Mutex<crate::nodestatus::mirror::StaticPods>>,
    ) -> ApiMode {
        // API-server mode starts once: the receiver is there (a second call's loop would stop
        // at once on a channel of its own without senders).
        let status_wake = self
            .node_status_wake
            .1
            .take()
            .unwrap_or_else(|| mpsc::channel().1);
        self.shutdown.hold(crate::nodestatus::heartbeat::StopOnDrop(
            self.node_status_wake.0.clone(),
        ));
        ApiMode {
            cfg: self.cfg.clone(),
            store: self.store.clone(),
            runtime: self.runtime.clone(),
            node: self.node_context(),
            snap_tx,
            static_pods,
            stop_pods: self.shutdown.receiver(),
            stop_status: self.shutdown.receiver(),
            status_wake,
            stop_events: self.shutdown.receiver(),
            stop_rotation: self.shutdown.receiver(),
            stop_bootstrap: self.shutdown.receiver(),
            on_client: std::mem::take(&mut self.on_api_client),
        }
    }

    /// Air-gapped images: archives in the images directory are imported into containerd.
    /// The images directory thread; returns its first pass (`None`: the directory is off).
    fn start_images_dir(&mut self) -> Result<Option<crate::images::dir::FirstPass>, KubeletError> {
        let Some(dir) = self.cfg.images_dir() else {
            return Ok(None);
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
        let first_pass = handle.first_pass();
        self.shutdown.hold(handle);
        Ok(Some(first_pass))
    }

    /// The runtime status check (`super::runtime_status`): whether the runtime's configuration
    /// can run pods, said in one line at start and whenever it changes.
    fn start_runtime_status(
        &mut self,
        first_pass: Option<crate::images::dir::FirstPass>,
    ) -> Result<(), KubeletError> {
        let checker = super::runtime_status::Checker::new(
            self.runtime.clone(),
            &self.cfg.runtime_endpoint,
            first_pass,
        );
        let store = self.store.clone();
        let images_dir = self.cfg.images_dir();
        let stop = self.shutdown.receiver();
        std::thread::Builder::new()
            .name("runtime-status".into())
            .stack_size(256 * 1024)
            .spawn(move || super::runtime_status::run(checker, store, images_dir, stop))
            .map_err(start_error("runtime status check"))?;
        Ok(())
    }

    /// Container log rotation (the kubelet's job, not containerd's). It waits in poll(2) on
    /// inotify and a stop pipe.
    fn start_log_rotation(&mut self) -> Result<(), KubeletError> {
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

    fn start_pleg(&mut self) -> Result<(), KubeletError> {
        let pleg = Pleg::new(
            self.runtime.clone(),
            self.store.clone(),
            pleg_to_loop(self.loop_tx.clone()),
        )
        .with_cache(self.pod_cache.clone());
        let stop = self.shutdown.receiver();
        std::thread::Builder::new()
            .name("pleg".into())
            .spawn(move || pleg.run(stop))
            .map_err(start_error("PLEG"))?;
        Ok(())
    }

    /// The eviction manager (node pressure, local storage limits, image GC).
    fn start_eviction(&mut self) -> Result<(), KubeletError> {
        let rt = self.runtime.clone();
        let root = self.cfg.root_dir.clone();
        let manager = crate::eviction::Manager::new(
            self.cfg.eviction.clone(),
            self.runtime.clone(),
            self.store.clone(),
            eviction_to_loop(
                self.loop_tx.clone(),
                self.store.clone(),
                &self.cfg.node_name,
            ),
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

    /// The graceful node shutdown manager, when shutdownGracePeriod (or ByPodPriority) is set.
    fn start_node_shutdown(&mut self) {
        let mut config = self.cfg.shutdown.clone();
        // Test seam: the tests' stand-in logind reads its drop-ins elsewhere.
        if let Some(dir) = std::env::var_os("NANOLET_LOGIND_CONF_DIR") {
            config.logind_conf_dir = PathBuf::from(dir);
        }
        let terminator = Arc::new(ShutdownTerminator {
            store: self.store.clone(),
            runtime: self.runtime.clone(),
            tx: self.loop_tx.clone(),
            node: crate::events::PodRef::node(&self.cfg.node_name),
            node_status: self.node_status_wake.0.clone(),
        });
        let stop = self.shutdown.receiver();
        crate::nodeshutdown::Manager::start(config, terminator, stop);
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
        prober.set_readiness_writer(super::apistatus::readiness_writer(self.store.clone()));
        let _ = self.probes.set(prober.clone());
        let (allocatable_cpu_millis, allocatable_memory_bytes) =
            cfg.eviction.allocatable(crate::node::capacity());
        Arc::new(WorkerContext {
            runtime: self.runtime.clone(),
            cache: self.pod_cache.clone(),
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
                    api_objects: self.api_objects.clone(),
                    registry_config: cfg.image_credentials_file(),
                    container_logs_dir: container_logs_dir(&cfg.pod_logs_dir),
                    cgroup_driver: cfg.cgroup_driver,
                    pod_pids_limit: cfg.pod_pids_limit,
                    systemd_cgroups: self.systemd_cgroups.clone(),
                    swap: crate::kuberuntime::container_linux::SwapHost::detect(
                        cfg.memory_swap_behavior,
                    ),
                    host_dns: Arc::new(crate::api::dns::HostResolvConf::new(
                        cfg.resolv_conf.clone(),
                        // Test seam (ARCHITECTURE "Seams"): where systemd-resolved's own file is.
                        std::env::var_os("NANOLET_SYSTEMD_RESOLVED_RESOLV_CONF")
                            .map(std::path::PathBuf::from)
                            .unwrap_or_else(|| crate::api::dns::SYSTEMD_RESOLVED_UPSTREAM.into()),
                    )),
                    cluster_dns: crate::api::dns::ClusterDns {
                        servers: cfg.cluster_dns.iter().map(ToString::to_string).collect(),
                        domain: cfg.cluster_domain.clone(),
                    },
                    runtime_classes: self.runtime_classes.clone(),
                    devices: self.devices.clone(),
                },
                resync: cfg.sync_frequency,
                worker_threads: crate::util::pool::PoolSize {
                    min: cfg.pod_worker_threads,
                    max: match cfg.max_pod_worker_threads {
                        0 => cfg.max_pods as usize,
                        n => n,
                    },
                },
                max_pods: cfg.max_pods,
                // Allocatable = capacity - systemReserved - kubeReserved - the hard
                // memory.available threshold.
                allocatable_cpu_millis,
                extended_allocatable: cfg.extended_resources.clone(),
                allocatable_memory_bytes,
                eviction_transition: cfg.eviction.pressure_transition_period,
                security: cfg.security.clone(),
                host_security: crate::api::security::HostSecurity::detect(),
                node_labels: crate::kubelet::admission::node_labels(
                    &cfg.node_name,
                    &cfg.node_labels,
                ),
                qos_cgroup_root: (cfg.cgroup_driver == crate::cm::CgroupDriver::Cgroupfs)
                    .then(|| PathBuf::from(CGROUP_ROOT)),
                qos_systemd: self.systemd_cgroups.clone(),
                // Allocatable as the kubelet's GetNodeAllocatableAbsolute: capacity minus the
                // reservations (the eviction threshold is not taken off).
                qos_memory_reserve: cfg.qos_reserved_memory_percent.map(|percent| {
                    crate::cm::QosMemoryReserve {
                        allocatable: (crate::node::capacity().memory_bytes
                            - cfg.eviction.reserved_memory)
                            .max(0),
                        percent,
                    }
                }),
            },
        })
    }
}

/// API-server mode, built before its client exists (TLS bootstrap may make it later): the API
/// pod source, the status writer (with mirror pods), the node heartbeat and, with
/// `--rotate-certificates`, the client certificate's rotation.
struct ApiMode {
    cfg: Config,
    store: Arc<StatusStore>,
    runtime: Arc<dyn Runtime>,
    node: NodeContext,
    snap_tx: Sender<Snapshot>,
    static_pods: Arc<std::sync::Mutex<crate::nodestatus::mirror::StaticPods>>,
    stop_pods: mpsc::Receiver<()>,
    stop_status: mpsc::Receiver<()>,
    status_wake: mpsc::Receiver<crate::nodestatus::heartbeat::Wake>,
    stop_events: mpsc::Receiver<()>,
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    stop_rotation: mpsc::Receiver<()>,
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    stop_bootstrap: mpsc::Receiver<()>,
    on_client: Vec<ApiClientHook>,
}

/// What the API pod source and the status writer are built from.
struct ApiParts {
    store: Arc<StatusStore>,
    runtime: Arc<dyn Runtime>,
    snap_tx: Sender<Snapshot>,
    static_pods: Arc<std::sync::Mutex<crate::nodestatus::mirror::StaticPods>>,
    stop_pods: mpsc::Receiver<()>,
    stop_status: mpsc::Receiver<()>,
}

impl ApiMode {
    /// Starts every API-server part with `client` (all of them share it, so a rotated
    /// certificate reaches them all).
    fn start(self, client: Arc<ApiClient>) -> Result<(), KubeletError> {
        let ApiMode {
            cfg,
            store,
            runtime,
            node,
            snap_tx,
            static_pods,
            stop_pods,
            stop_status,
            status_wake,
            stop_events,
            stop_rotation,
            stop_bootstrap: _,
            on_client,
        } = self;
        // First, so that the pod source's first pods' events reach the API.
        Self::start_events(&cfg, &store, stop_events, &client)?;
        #[cfg(feature = "tls")]
        let events_store = store.clone();
        let pod_cidr_runtime = runtime.clone();
        let parts = ApiParts {
            store: store.clone(),
            runtime,
            snap_tx,
            static_pods,
            stop_pods,
            stop_status,
        };
        Self::start_api_pods(&cfg, parts, &client)?;
        let heartbeat = (node, store, status_wake, pod_cidr_runtime);
        Self::start_node_heartbeat(&cfg, heartbeat, &client)?;
        for hook in on_client {
            hook(&client);
        }
        #[cfg(feature = "tls")]
        start_client_rotation(&cfg, client, events_store, stop_rotation)?;
        #[cfg(not(feature = "tls"))]
        drop(stop_rotation);
        Ok(())
    }

    /// TLS bootstrap on its own thread; API-server mode starts when it is done.
    #[cfg(feature = "tls")]
    fn after_bootstrap(
        mut self,
        bootstrap: crate::certificate::Bootstrap,
    ) -> Result<(), KubeletError> {
        let (_, stop) = mpsc::channel();
        let stop = std::mem::replace(&mut self.stop_bootstrap, stop);
        info!(bootstrap_kubeconfig = %bootstrap.bootstrap_kubeconfig.display(), cert_dir = %bootstrap.cert_dir.display(), "TLS bootstrap: requesting a client certificate; static pods start without waiting");
        std::thread::Builder::new()
            .name("tls-bootstrap".into())
            .stack_size(512 * 1024)
            .spawn(move || {
                let Some(kc) = bootstrap.run(&stop) else {
                    return;
                };
                let client = match ApiClient::new(&kc, Duration::from_secs(10)) {
                    Ok(c) => Arc::new(c),
                    Err(e) => {
                        error!(error = %e, "API server client from the bootstrapped kubeconfig");
                        return;
                    }
                };
                info!(server = %kc.server, "API-server mode: joining the cluster");
                if let Err(e) = self.start(client) {
                    error!(error = %e, "starting API-server mode after TLS bootstrap");
                }
            })
            .map(|_| ())
            .map_err(start_error("TLS bootstrap"))
    }

    /// API-server mode: this node's pods as the third source, and the status writer (with
    /// mirror pods for static pods).
    fn start_api_pods(
        cfg: &Config,
        parts: ApiParts,
        client: &Arc<ApiClient>,
    ) -> Result<(), KubeletError> {
        let ApiParts {
            store,
            runtime,
            snap_tx,
            static_pods,
            stop_pods,
            stop_status,
        } = parts;
        let api_view: Arc<std::sync::Mutex<crate::config::apiserver::ApiView>> = Arc::default();
        let source = crate::config::apiserver::ApiPodSource::new(
            client.clone(),
            &cfg.node_name,
            snap_tx,
            api_view.clone(),
            &cfg.root_dir,
        );
        let stop = stop_pods;
        std::thread::Builder::new()
            .name("api-pods".into())
            .stack_size(1024 * 1024)
            .spawn(move || source.run(stop))
            .map_err(start_error("API pod source"))?;
        let mirrors = crate::nodestatus::mirror::MirrorManager::new(
            client.clone(),
            &cfg.node_name,
            api_view.clone(),
            static_pods,
        );
        let writer = crate::nodestatus::status_writer::StatusWriter::new(
            client.clone(),
            store,
            runtime,
            api_view,
            Some(mirrors),
        );
        let stop = stop_status;
        std::thread::Builder::new()
            .name("api-status".into())
            .stack_size(1024 * 1024)
            .spawn(move || writer.run(stop))
            .map_err(start_error("API status writer"))?;
        Ok(())
    }

    /// Every recorded event (those before now included) also goes to the API
    /// server through the correlator; "Starting kubelet." is the Node's first, as upstream.
    fn start_events(
        cfg: &Config,
        store: &StatusStore,
        stop: mpsc::Receiver<()>,
        client: &Arc<ApiClient>,
    ) -> Result<(), KubeletError> {
        let rate = crate::nodestatus::event_sink::EventRate {
            qps: cfg.event_record_qps,
            burst: cfg.event_burst,
        };
        let sink = crate::nodestatus::event_sink::start(client.clone(), &cfg.node_name, rate, stop)
            .map_err(start_error("API events"))?;
        store.events().set_sink(sink);
        store.events().record(
            &crate::events::PodRef::node(&cfg.node_name),
            crate::events::EventType::Normal,
            "Starting",
            "Starting kubelet.",
        );
        Ok(())
    }

    /// API-server mode: register the Node, keep its Lease and status fresh.
    /// The Node's `spec.podCIDR` goes to the runtime (CRI UpdateRuntimeConfig) when it appears
    /// or changes, as the kubelet's `updatePodCIDR`.
    fn start_node_heartbeat(
        cfg: &Config,
        (node, store, wake, runtime): (
            NodeContext,
            Arc<StatusStore>,
            mpsc::Receiver<crate::nodestatus::heartbeat::Wake>,
            Arc<dyn Runtime>,
        ),
        client: &Arc<ApiClient>,
    ) -> Result<(), KubeletError> {
        let heartbeat = crate::nodestatus::heartbeat::NodeHeartbeat::new(
            client.clone(),
            Arc::new(node),
            store,
            crate::nodestatus::heartbeat::NodeSettings {
                labels: cfg.node_labels.clone(),
                taints: cfg.register_with_taints.clone(),
                status_update_frequency: cfg.node_status_update_frequency(),
                status_report_frequency: cfg.node_status_report_frequency(),
            },
        )
        .with_pod_cidr_sink(Box::new(move |cidr| {
            match runtime.update_runtime_config(cidr) {
                Ok(()) => {
                    info!(pod_cidr = cidr, "sent the node's pod CIDR to the runtime");
                    true
                }
                Err(e) => {
                    warn!(pod_cidr = cidr, error = %e, "UpdateRuntimeConfig failed; retrying");
                    false
                }
            }
        }));
        std::thread::Builder::new()
            .name("node-status".into())
            .stack_size(1024 * 1024)
            .spawn(move || heartbeat.run(wake))
            .map_err(start_error("node status"))?;
        Ok(())
    }
}

/// `--rotate-certificates`: the client certificate's rotation on its own thread.
#[cfg(feature = "tls")]
fn start_client_rotation(
    cfg: &Config,
    client: Arc<ApiClient>,
    store: Arc<StatusStore>,
    stop: mpsc::Receiver<()>,
) -> Result<(), KubeletError> {
    let Some(kubeconfig) = cfg.kubeconfig.as_ref().filter(|_| cfg.rotate_certificates) else {
        return Ok(());
    };
    let mut rotation = crate::certificate::manager::prepare_client_rotation(
        client,
        kubeconfig,
        &cfg.cert_dir(),
        &cfg.node_name,
    )
    .map_err(KubeletError::Certificates)?;
    // Denied or failing CSRs and rotations as Node events.
    let node = crate::events::PodRef::node(&cfg.node_name);
    rotation.on_event = Some(Arc::new(move |warning, reason, message| {
        let type_ = if warning {
            crate::events::EventType::Warning
        } else {
            crate::events::EventType::Normal
        };
        store.events().record(&node, type_, reason, message);
    }));
    std::thread::Builder::new()
        .name("cert-rotation".into())
        .stack_size(512 * 1024)
        .spawn(move || rotation.run(stop))
        .map(|_| ())
        .map_err(start_error("certificate rotation"))
}

/// TLS bootstrap is to be done: `--bootstrap-kubeconfig` is set and `--kubeconfig` is missing
/// or its client certificate is not valid (upstream LoadClientCert's first check).
#[cfg(feature = "tls")]
fn pending_bootstrap(cfg: &Config) -> Option<crate::certificate::Bootstrap> {
    let b = crate::certificate::Bootstrap {
        kubeconfig: cfg.kubeconfig.clone()?,
        bootstrap_kubeconfig: cfg.bootstrap_kubeconfig.clone()?,
        cert_dir: cfg.cert_dir(),
        node_name: cfg.node_name.clone(),
        timing: crate::certificate::manager::Timing::bootstrap(),
    };
    if b.kubeconfig_still_valid(std::time::SystemTime::now()) {
        info!(kubeconfig = %b.kubeconfig.display(), "kubeconfig exists and is valid, skipping bootstrap");
        return None;
    }
    Some(b)
}

/// API-server mode (a kubeconfig is given): one client for the pod source, the status writer
/// and the node heartbeat.
fn api_client(cfg: &Config) -> Result<Option<Arc<ApiClient>>, KubeletError> {
    let Some(path) = &cfg.kubeconfig else {
        return Ok(None);
    };
    let kc =
        crate::apiclient::kubeconfig::Kubeconfig::load(path).map_err(KubeletError::ApiServer)?;
    let client = ApiClient::new(&kc, Duration::from_secs(10)).map_err(KubeletError::ApiClient)?;
    info!(server = %kc.server, "API-server mode: joining the cluster");
    if let Some(sa) = kc.service_account() {
        warn!(
            node = %cfg.node_name,
            service_account = %sa,
            "the kubeconfig authenticates as a ServiceAccount, not as a node (system:node:{} in \
             group system:nodes): the API server's Node authorizer and NodeRestriction admission \
             do not apply to it, so the system:node ClusterRole lets this box read every Secret \
             and ConfigMap of the cluster and modify any Node; join with a bootstrap token \
             (--bootstrap-kubeconfig) or a node client certificate instead \
             (docs/apiserver-mode.md)",
            cfg.node_name
        );
    }
    Ok(Some(Arc::new(client)))
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

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// `enforceNodeAllocatable`, as the kubelet's node container manager: `pods` limits the
/// `kubepods` cgroup to capacity - systemReserved - kubeReserved (CPU, memory, and PIDs:
/// the kubelet's internal capacity counts `pid`, min(pid_max, threads-max)); `system-reserved`
/// / `kube-reserved` limit their cgroups to the reservation. With the cgroupfs driver by
/// writing the cgroup files, with the systemd driver as slices through systemd (`sd`).
fn enforce_node_allocatable(cfg: &Config, sd: Option<&crate::cm::systemd::Manager>) {
    let root = std::path::Path::new(CGROUP_ROOT);
    let ev = &cfg.eviction;
    for what in &cfg.enforce_node_allocatable {
        let (cgroup, cpu, mem, pids) = match what.as_str() {
            "pods" => {
                let cap = crate::node::capacity();
                let cpu = (cap.cpu_millis - ev.reserved_cpu_millis).max(0);
                let mem = (cap.memory_bytes - ev.reserved_memory).max(0);
                let pids = allocatable_pids(
                    crate::eviction::observe::max_pids(),
                    &[&ev.system_reserved, &ev.kube_reserved],
                );
                info!(
                    cpu_millis = cpu,
                    memory_bytes = mem,
                    pids,
                    "enforcing node allocatable on kubepods"
                );
                ("kubepods", cpu, Some(mem), pids)
            }
            "system-reserved" => {
                let (cpu, mem, pids) = reservation(&ev.system_reserved);
                (cfg.system_reserved_cgroup.as_str(), cpu, mem, pids)
            }
            "kube-reserved" => {
                let (cpu, mem, pids) = reservation(&ev.kube_reserved);
                (cfg.kube_reserved_cgroup.as_str(), cpu, mem, pids)
            }
            _ => continue,
        };
        match (cfg.cgroup_driver, sd) {
            (crate::cm::CgroupDriver::Systemd, Some(sd)) => {
                if let Err(e) = crate::cm::enforce_slice(sd, cgroup, cpu, mem, pids) {
                    warn!(enforce = %what, error = %e, "could not enforce node allocatable on the slice");
                }
            }
            (crate::cm::CgroupDriver::Systemd, None) => {}
            (crate::cm::CgroupDriver::Cgroupfs, _) => {
                let written = if what == "pods" {
                    crate::cm::enforce_pods_allocatable(root, cpu, mem.unwrap_or(0), pids)
                } else {
                    crate::cm::enforce_reserved(root, cgroup, cpu, mem, pids)
                };
                if written.is_empty() {
                    warn!(enforce = %what, "could not write the node allocatable cgroup");
                }
            }
        }
    }
}

fn reserved_quantity(
    map: &std::collections::BTreeMap<String, String>,
    k: &str,
) -> Option<crate::api::quantity::Quantity> {
    map.get(k)
        .and_then(|v| crate::api::quantity::parse_quantity_str(v).ok())
}

/// A reservation's CPU (millicores), memory (bytes) and PIDs, each if set.
fn reservation(
    map: &std::collections::BTreeMap<String, String>,
) -> (i64, Option<i64>, Option<i64>) {
    (
        reserved_quantity(map, "cpu").map_or(0, |q| q.milli_value()),
        reserved_quantity(map, "memory").map(|q| q.value()),
        reserved_quantity(map, "pid").map(|q| q.value()),
    )
}

/// The allocatable PIDs `kubepods` gets (`getNodeAllocatableAbsoluteImpl` over the internal
/// capacity): the node's task limit minus each reservation's `pid`, never below 0; `None`
/// when the limit cannot be read (the kubelet then has no `pid` capacity and sets none).
fn allocatable_pids(
    capacity: Option<i64>,
    reserved: &[&std::collections::BTreeMap<String, String>],
) -> Option<i64> {
    let reserved: i64 = reserved
        .iter()
        .filter_map(|m| reserved_quantity(m, "pid"))
        .map(|q| q.value())
        .sum();
    capacity.map(|c| c.saturating_sub(reserved).max(0))
}

/// What the node shutdown manager needs, over the status store, the runtime and the sync
/// loop (which kills through the pod workers, as for an eviction).
struct ShutdownTerminator {
    store: Arc<StatusStore>,
    runtime: Arc<dyn Runtime>,
    tx: Sender<LoopMsg>,
    /// The Node, for the NodeShutdown events.
    node: crate::events::PodRef,
    /// Asks the node status loop for an immediate status (API-server mode; nobody listens
    /// otherwise).
    node_status: Sender<crate::nodestatus::heartbeat::Wake>,
}

impl crate::nodeshutdown::PodTerminator for ShutdownTerminator {
    fn active_pods(&self) -> Vec<Arc<crate::api::Pod>> {
        self.store
            .pods()
            .into_iter()
            .filter(|p| {
                !p.status
                    .as_ref()
                    .is_some_and(|s| s.phase == "Succeeded" || s.phase == "Failed")
            })
            .map(Arc::new)
            .collect()
    }

    /// As the kubelet's shutdown manager: a Normal `NodeShutdown` event on the Node, the flag
    /// (admission, Ready), and on a shutdown the node status sent at once (`syncNodeStatus`).
    fn set_shutting_down(&self, shutting_down: bool) {
        let message = if shutting_down {
            crate::nodeshutdown::DETECTED_MESSAGE
        } else {
            crate::nodeshutdown::CANCELLED_MESSAGE
        };
        self.store.events().record(
            &self.node,
            crate::events::EventType::Normal,
            crate::nodeshutdown::EVENT_REASON,
            message,
        );
        self.store.set_shutting_down(shutting_down);
        if shutting_down {
            let _ = self
                .node_status
                .send(crate::nodestatus::heartbeat::Wake::StatusNow);
        } else {
            self.send(LoopMsg::ShutdownCancelled);
        }
    }

    fn terminate(&self, pod: &crate::api::Pod, grace_seconds: i64) {
        self.send(LoopMsg::ShutdownKill {
            uid: pod.metadata.uid.clone(),
            grace_seconds,
        });
    }

    fn running(&self) -> std::collections::HashSet<String> {
        match self.runtime.list_containers() {
            Ok(list) => list
                .into_iter()
                .filter(|c| c.state == crate::cri::ContainerState::Running)
                .filter_map(|c| c.labels.get(crate::cri::LABEL_POD_UID).cloned())
                .collect(),
            Err(e) => {
                warn!(error = %e, "node shutdown: listing containers failed");
                self.store.uids().into_iter().collect()
            }
        }
    }
}

impl ShutdownTerminator {
    fn send(&self, msg: LoopMsg) {
        let _ = self.tx.send(msg);
    }
}

/// The eviction manager's events, as sync loop messages.
fn eviction_to_loop(
    tx: Sender<LoopMsg>,
    store: Arc<StatusStore>,
    node_name: &str,
) -> crate::eviction::EventSink {
    // The eviction manager's Node events (pressure transitions,
    // EvictionThresholdMet), as upstream's setters and eviction manager record them.
    let node = crate::events::PodRef::node(node_name);
    let seen = std::sync::Mutex::new(std::collections::BTreeSet::<&'static str>::new());
    Box::new(move |event| {
        let msg = match event {
            crate::eviction::ManagerEvent::Evict(eviction) => {
                if let Some(c) = eviction.condition {
                    let message = crate::nodestatus::setters::eviction_threshold_event(c);
                    let warning = crate::events::EventType::Warning;
                    store
                        .events()
                        .record(&node, warning, "EvictionThresholdMet", &message);
                }
                LoopMsg::Evict(eviction)
            }
            crate::eviction::ManagerEvent::NodeConditionsChanged => {
                let now: std::collections::BTreeSet<&'static str> =
                    store.node_conditions().into_keys().collect();
                let mut before = seen.lock().unwrap_or_else(|e| e.into_inner());
                let name = node.name.as_str();
                for (reason, message) in
                    crate::nodestatus::setters::pressure_events(name, &before, &now)
                {
                    let normal = crate::events::EventType::Normal;
                    store.events().record(&node, normal, reason, &message);
                }
                *before = now;
                LoopMsg::NodeConditions
            }
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
) -> Result<(), KubeletError> {
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
        .map_err(|source| KubeletError::Start {
            what: "signal waiter",
            source,
        })
}

#[cfg(all(test, feature = "tls"))]
mod tests {
    use super::*;

    /// The `pid` of kubepods' allocatable (node_container_manager
    /// getNodeAllocatableAbsoluteImpl over the internal capacity, pidlimit.Stats' MaxPID):
    /// the task limit minus systemReserved's and kubeReserved's `pid`, never negative; none
    /// without a readable task limit.
    #[test]
    fn kubepods_pids_are_the_task_limit_minus_the_reservations() {
        let m = |v: &[(&str, &str)]| -> std::collections::BTreeMap<String, String> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let (sys, kube) = (m(&[("pid", "1k"), ("cpu", "1")]), m(&[("pid", "500")]));
        assert_eq!(allocatable_pids(Some(32768), &[]), Some(32768));
        assert_eq!(allocatable_pids(Some(32768), &[&sys, &kube]), Some(31268));
        assert_eq!(allocatable_pids(Some(1200), &[&sys, &kube]), Some(0));
        assert_eq!(allocatable_pids(None, &[&sys]), None);
        assert_eq!(reservation(&sys), (1000, None, Some(1000)));
    }

    #[test]
    fn bootstrap_is_pending_only_with_a_bootstrap_kubeconfig_and_no_valid_kubeconfig() {
        // upstream LoadClientCert: skipped when the kubeconfig exists and is valid.
        let d = tempfile::tempdir().unwrap();
        let mut cfg = Config::defaults("edge-1".into());
        cfg.root_dir = d.path().to_path_buf();
        cfg.kubeconfig = Some(d.path().join("kubelet.conf"));
        assert!(
            pending_bootstrap(&cfg).is_none(),
            "no --bootstrap-kubeconfig"
        );
        cfg.bootstrap_kubeconfig = Some(d.path().join("bootstrap.conf"));
        let b = pending_bootstrap(&cfg).expect("the kubeconfig is missing");
        assert_eq!(b.cert_dir, d.path().join("pki"));
        assert_eq!(b.node_name, "edge-1");
        // A kubeconfig with a valid client certificate: no bootstrap.
        let pair = crate::certificate::selfsigned::generate("edge-1", std::time::SystemTime::now())
            .unwrap();
        let pem = crate::util::base64::encode;
        std::fs::write(
            d.path().join("kubelet.conf"),
            format!(
                "clusters: [{{name: c, cluster: {{server: 'https://x'}}}}]\nusers: [{{name: u, user: {{client-certificate-data: {}, client-key-data: {}}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n",
                pem(&pair.cert_pem),
                pem(pair.key.to_pem().as_bytes())
            ),
        )
        .unwrap();
        assert!(pending_bootstrap(&cfg).is_none());
    }
}
