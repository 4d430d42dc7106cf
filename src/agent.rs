//! `nanolet run`: wires sources, podconfig, the sync loop, PLEG, the runtime and the HTTP
//! endpoints together. Everything here is plain threads and channels.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{self, Sender};
use std::time::Duration;

use tracing::{error, info, warn};

use crate::config::Config;
use crate::kubeapi::NodeContext;
use crate::pleg::Pleg;
use crate::podconfig::PodConfig;
use crate::runtime::Runtime;
use crate::runtime::cri::CriRuntime;
use crate::runtime::instrumented::InstrumentedRuntime;
use crate::server::{self, ReadOnlyOptions};
use crate::source::naming::CONFIG_SOURCE_ANNOTATION;
use crate::source::{Snapshot, SourceKind};
use crate::status::StatusStore;
use crate::sync::{DesiredPods, LoopMsg, SyncLoop, SyncSettings, WorkerContext};

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    // `source` fields are the error's source: main prints the chain with `{:#}`, so the
    // messages do not repeat them.
    #[error("container runtime {endpoint}")]
    Runtime {
        endpoint: String,
        source: crate::runtime::RuntimeError,
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
    /// The manifest directory is writable by others (see `source::file::check_secure`).
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
    // Block the stop signals in every thread; one thread waits for them.
    let mut sigs = nix::sys::signal::SigSet::empty();
    sigs.add(nix::sys::signal::Signal::SIGTERM);
    sigs.add(nix::sys::signal::Signal::SIGINT);
    sigs.thread_block().map_err(AgentError::Signals)?;

    let health_deadline = (cfg.sync_frequency * 2).max(Duration::from_secs(300));
    let store = Arc::new(StatusStore::new(health_deadline));
    let token = match &cfg.read_only_token_file {
        Some(path) if cfg.read_only_port != 0 => Some(read_token_file(path)?),
        _ => None,
    };
    if !cfg.pod_manifest_path.as_os_str().is_empty() {
        if cfg.allow_insecure_manifest_dir {
            warn!(dir = %cfg.pod_manifest_path.display(), "--allow-insecure-manifest-dir: manifest directory and file permissions are not checked");
        } else if let Err(e) = crate::source::file::check_dir_secure(&cfg.pod_manifest_path) {
            return Err(AgentError::ManifestDir(e.to_string()));
        }
    }

    let cri: Arc<dyn Runtime> = Arc::new(
        CriRuntime::connect(&cfg.runtime_endpoint, cfg.runtime_request_timeout).map_err(
            |source| AgentError::Runtime {
                endpoint: cfg.runtime_endpoint.clone(),
                source,
            },
        )?,
    );
    // Every CRI call is counted for /metrics (kubelet_runtime_operations_total).
    let runtime: Arc<dyn Runtime> =
        Arc::new(InstrumentedRuntime::new(cri, store.metrics().clone()));
    match runtime.version() {
        Ok(v) => {
            info!(runtime = %v.runtime_name, version = %v.runtime_version, api = %v.runtime_api_version, "connected to container runtime")
        }
        Err(e) => warn!(error = %e, "container runtime does not answer yet; will keep trying"),
    }

    // --node-ip, else the default route's interface address.
    let host_ips: Vec<String> = if cfg.node_ips.is_empty() {
        vec![detect_host_ip().to_string()]
    } else {
        cfg.node_ips.iter().map(IpAddr::to_string).collect()
    };
    let host_ip = host_ips.join(",");
    // The read-only server starts before the prober; it reads the prober through this slot.
    let probes_slot: Arc<std::sync::OnceLock<Arc<crate::prober::Prober>>> = Arc::default();
    info!(version = crate::VERSION, node = %cfg.node_name, host_ip = %host_ip, "starting nanolet");

    let mut servers = vec![];
    if cfg.healthz_port != 0 {
        let addr = SocketAddr::new(cfg.healthz_bind_address, cfg.healthz_port);
        servers.push(
            server::spawn_healthz(addr, store.clone()).map_err(|source| AgentError::Bind {
                what: "healthz",
                addr,
                source,
            })?,
        );
    }
    if cfg.read_only_port != 0 {
        let addr = SocketAddr::new(cfg.address, cfg.read_only_port);
        servers.push(
            server::spawn_read_only(
                addr,
                store.clone(),
                ReadOnlyOptions {
                    node: {
                        let mut n = NodeContext::new(&cfg.node_name);
                        n.host_ips = host_ips.clone();
                        n.max_pods = cfg.max_pods;
                        n.pod_logs_dir = cfg.pod_logs_dir.clone();
                        n.root_dir = cfg.root_dir.clone();
                        n.runtime = Some(runtime.clone());
                        n
                    },
                    token: token.clone(),
                    configz: cfg.redacted_json(),
                    stats: crate::stats::StatsProvider::new(),
                    probes: probes_slot.clone(),
                },
            )
            .map_err(|source| AgentError::Bind {
                what: "read-only server",
                addr,
                source,
            })?,
        );
    }

    let (loop_tx, loop_rx) = mpsc::channel::<LoopMsg>();

    // Sources -> podconfig -> sync loop.
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
    // API-server mode: one client for the pod source, the status writer and the node agent.
    let api_client = match &cfg.kubeconfig {
        Some(path) => {
            let kc = crate::apiclient::kubeconfig::Kubeconfig::load(path)
                .map_err(AgentError::ApiServer)?;
            let client = crate::apiclient::client::ApiClient::new(&kc, Duration::from_secs(10))
                .map_err(|e| AgentError::ApiClient(e.to_string()))?;
            info!(server = %kc.server, "API-server mode: joining the cluster");
            expected.push(SourceKind::Api);
            Some(Arc::new(client))
        }
        None => None,
    };
    let (api_stop_tx, api_stop_rx) = mpsc::channel::<()>();
    let (status_stop_tx, status_stop_rx) = mpsc::channel::<()>();
    let api_view: Arc<std::sync::Mutex<crate::apiclient::podsource::ApiView>> = Arc::default();
    let static_pods: Arc<std::sync::Mutex<crate::apiclient::mirror::StaticPods>> = Arc::default();
    if let Some(client) = &api_client {
        let source = crate::apiclient::podsource::ApiPodSource::new(
            client.clone(),
            &cfg.node_name,
            snap_tx.clone(),
            api_view.clone(),
            &cfg.root_dir,
        );
        std::thread::Builder::new()
            .name("api-pods".into())
            .stack_size(1024 * 1024)
            .spawn(move || source.run(api_stop_rx))
            .map_err(|source| AgentError::Start {
                what: "API pod source",
                source,
            })?;
        let mirrors = crate::apiclient::mirror::MirrorManager::new(
            client.clone(),
            &cfg.node_name,
            api_view.clone(),
            static_pods.clone(),
        );
        let writer = crate::apiclient::podsource::StatusWriter::new(
            client.clone(),
            store.clone(),
            runtime.clone(),
            api_view.clone(),
            Some(mirrors),
        );
        std::thread::Builder::new()
            .name("api-status".into())
            .stack_size(1024 * 1024)
            .spawn(move || writer.run(status_stop_rx))
            .map_err(|source| AgentError::Start {
                what: "API status writer",
                source,
            })?;
    }
    {
        let loop_tx = loop_tx.clone();
        let expected = expected.clone();
        let store = store.clone();
        let api_mode = api_client.is_some();
        let static_pods = static_pods.clone();
        std::thread::Builder::new()
            .name("podconfig".into())
            .spawn(move || {
                let mut pc = PodConfig::new(&expected);
                let mut flagged = std::collections::BTreeSet::new();
                // Each source's errors of its previous snapshot: a rejection is logged (and
                // recorded as an event) once, when it appears, not on every re-list.
                let mut reported: std::collections::HashMap<SourceKind, std::collections::BTreeSet<String>> =
                    std::collections::HashMap::new();
                for snap in snap_rx.iter() {
                    let now: std::collections::BTreeSet<String> =
                        snap.errors.iter().map(ToString::to_string).collect();
                    let before = reported.remove(&snap.source).unwrap_or_default();
                    for e in &snap.errors {
                        if !before.contains(&e.to_string()) {
                            warn!(error = %e, "manifest rejected");
                            record_failed_validation(&store, e);
                        }
                    }
                    reported.insert(snap.source, now);
                    if let Some(d) = pc.update(snap) {
                        let mut errors = d.errors;
                        if api_mode {
                            let mut statics = crate::apiclient::mirror::StaticPods {
                                pods: vec![],
                                all_sources_ready: d.all_sources_ready,
                            };
                            let mut now_flagged = std::collections::BTreeSet::new();
                            for sp in d.pods.values() {
                                if sp.pod.metadata.annotations.get(CONFIG_SOURCE_ANNOTATION).map(String::as_str)
                                    == Some(SourceKind::Api.as_str())
                                {
                                    continue;
                                }
                                match no_mirror_reason(sp) {
                                    Some(e) => {
                                        if !flagged.contains(&sp.pod.metadata.uid) {
                                            warn!(pod = %format!("{}/{}", sp.pod.metadata.namespace, sp.pod.metadata.name), error = %e, "no mirror pod for this static pod");
                                            store.events().record(
                                                &crate::events::PodRef::pod(
                                                    &sp.pod.metadata.namespace,
                                                    &sp.pod.metadata.name,
                                                    &sp.pod.metadata.uid,
                                                ),
                                                crate::events::EventType::Warning,
                                                "MirrorPodRefused",
                                                &e.to_string(),
                                            );
                                        }
                                        now_flagged.insert(sp.pod.metadata.uid.clone());
                                        errors.push(e);
                                    }
                                    None => statics.pods.push(sp.pod.clone()),
                                }
                            }
                            flagged = now_flagged;
                            *static_pods.lock().unwrap_or_else(|e| e.into_inner()) = statics;
                        }
                        let desired = DesiredPods {
                            pods: d.pods.into_iter().map(|(uid, sp)| (uid, sp.pod)).collect(),
                            errors,
                            all_sources_ready: d.all_sources_ready,
                        };
                        if loop_tx.send(LoopMsg::Desired(Box::new(desired))).is_err() {
                            return;
                        }
                    }
                }
            })
            .map_err(|source| AgentError::Start {
                what: "podconfig",
                source,
            })?;
    }
    let _file = if !file_enabled {
        None
    } else {
        Some(
            crate::source::file::FileSource::spawn(
                crate::source::file::FileSourceConfig {
                    dir: cfg.pod_manifest_path.clone(),
                    node_name: cfg.node_name.clone(),
                    check_frequency: cfg.file_check_frequency,
                    allow_insecure: cfg.allow_insecure_manifest_dir,
                },
                snap_tx.clone(),
            )
            .map_err(|source| AgentError::Start {
                what: "file source",
                source,
            })?,
        )
    };
    let _url = match &cfg.manifest_url {
        Some(url) => Some(
            crate::source::url::UrlSource::spawn(
                crate::source::url::UrlSourceConfig {
                    url: url.clone(),
                    headers: cfg.manifest_url_headers.clone(),
                    node_name: cfg.node_name.clone(),
                    check_frequency: cfg.http_check_frequency,
                    tls: crate::source::url::UrlTlsFiles {
                        ca_file: cfg.manifest_url_ca_file.clone(),
                        client_cert: cfg.manifest_url_client_cert.clone(),
                        client_key: cfg.manifest_url_client_key.clone(),
                    },
                },
                snap_tx.clone(),
            )
            .map_err(|source| AgentError::Start {
                what: "URL source",
                source,
            })?,
        ),
        None => None,
    };
    drop(snap_tx);

    // Air-gapped images: archives in the images directory are imported into containerd.
    let _images_dir = match cfg.images_dir() {
        Some(dir) => {
            let events = store.clone();
            let poke = loop_tx.clone();
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
                root_dir: cfg.root_dir.clone(),
                endpoint: cfg.runtime_endpoint.clone(),
                snapshotter: cfg.image_snapshotter.clone(),
                allow_insecure: cfg.allow_insecure_manifest_dir,
            };
            Some(
                crate::images::dir::spawn(dir_cfg, report).map_err(|source| AgentError::Start {
                    what: "images directory",
                    source,
                })?,
            )
        }
        None => None,
    };

    // Container log rotation (the kubelet's job, not containerd's). It stops when the write
    // end of its stop pipe is dropped (it waits in poll(2) on that pipe and on inotify).
    let (rotate_stop_rx, rotate_stop_tx) = nix::unistd::pipe().map_err(|e| AgentError::Start {
        what: "log rotation",
        source: e.into(),
    })?;
    {
        let rt = runtime.clone();
        let policy = crate::logrotate::RotationPolicy {
            max_size: cfg.container_log_max_size,
            max_files: cfg.container_log_max_files,
            interval: cfg.container_log_monitor_interval,
        };
        let logs_dir = cfg.pod_logs_dir.clone();
        std::thread::Builder::new()
            .name("logrotate".into())
            .spawn(move || crate::logrotate::run(rt, policy, logs_dir, rotate_stop_rx))
            .map_err(|source| AgentError::Start {
                what: "log rotation",
                source,
            })?;
    }

    // PLEG.
    let (pleg_stop_tx, pleg_stop_rx) = mpsc::channel::<()>();
    {
        let pleg = Pleg::new(
            runtime.clone(),
            store.clone(),
            pleg_to_loop(loop_tx.clone()),
        );
        std::thread::Builder::new()
            .name("pleg".into())
            .spawn(move || pleg.run(pleg_stop_rx))
            .map_err(|source| AgentError::Start {
                what: "PLEG",
                source,
            })?;
    }

    // The eviction manager (node pressure, local storage limits, image GC).
    let (evict_stop_tx, evict_stop_rx) = mpsc::channel::<()>();
    {
        let rt = runtime.clone();
        let root = cfg.root_dir.clone();
        let manager = crate::eviction::Manager::new(
            cfg.eviction.clone(),
            runtime.clone(),
            store.clone(),
            eviction_to_loop(loop_tx.clone()),
            crate::eviction::Paths {
                root_dir: cfg.root_dir.clone(),
                pod_logs_dir: cfg.pod_logs_dir.clone(),
            },
            Box::new(move || crate::eviction::gc::pinned_images(rt.as_ref(), &root)),
        );
        std::thread::Builder::new()
            .name("eviction".into())
            .stack_size(512 * 1024)
            .spawn(move || manager.run(evict_stop_rx))
            .map_err(|source| AgentError::Start {
                what: "eviction manager",
                source,
            })?;
    }

    // API-server mode: register the Node, keep its Lease and status fresh.
    let (node_stop_tx, node_stop_rx) = mpsc::channel::<()>();
    if let Some(client) = &api_client {
        let mut ctx = NodeContext::new(&cfg.node_name);
        ctx.host_ips = host_ips.clone();
        ctx.max_pods = cfg.max_pods;
        ctx.pod_logs_dir = cfg.pod_logs_dir.clone();
        ctx.root_dir = cfg.root_dir.clone();
        ctx.runtime = Some(runtime.clone());
        let agent = crate::apiclient::node::NodeAgent::new(
            client.clone(),
            Arc::new(ctx),
            store.clone(),
            crate::apiclient::node::NodeSettings {
                labels: cfg.node_labels.clone(),
                taints: cfg.register_with_taints.clone(),
                status_update_frequency: cfg.node_status_update_frequency,
            },
        );
        std::thread::Builder::new()
            .name("node-status".into())
            .stack_size(1024 * 1024)
            .spawn(move || agent.run(node_stop_rx))
            .map_err(|source| AgentError::Start {
                what: "node status",
                source,
            })?;
    }

    spawn_signal_waiter(sigs, loop_tx.clone())?;
    // systemd Type=notify: READY=1 after the first sync, watchdog pings tied to healthz.
    crate::sdnotify::spawn(store.clone());

    let ctx = Arc::new(WorkerContext {
        runtime: runtime.clone(),
        prober: {
            let prober = crate::prober::Prober::start(
                runtime.clone(),
                Some(probe_updates_to_loop(loop_tx.clone())),
            );
            prober.set_event_store(store.clone());
            let _ = probes_slot.set(prober.clone());
            prober
        },
        store: store.clone(),
        settings: SyncSettings {
            node_name: cfg.node_name.clone(),
            host_ips: host_ips.clone(),
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
            resync: cfg.sync_frequency,
            max_pods: cfg.max_pods,
            // Allocatable = capacity - systemReserved - kubeReserved - the hard
            // memory.available threshold.
            allocatable_cpu_millis: cfg.eviction.allocatable(crate::node::capacity()).0,
            allocatable_memory_bytes: cfg.eviction.allocatable(crate::node::capacity()).1,
            eviction_transition: cfg.eviction.pressure_transition_period,
            cgroup_driver: cfg.cgroup_driver,
            security: cfg.security.clone(),
            host_security: crate::pod::security::HostSecurity::detect(),
            node_labels: crate::sync::predicates::node_labels(&cfg.node_name, &cfg.node_labels),
            host_dns: Arc::new(crate::pod::dns::HostResolvConf::new(
                cfg.resolv_conf.clone(),
                // Test seam (ARCHITECTURE "Seams"): where systemd-resolved's own file is.
                std::env::var_os("NANOLET_SYSTEMD_RESOLVED_RESOLV_CONF")
                    .map(std::path::PathBuf::from)
                    .unwrap_or_else(|| crate::pod::dns::SYSTEMD_RESOLVED_UPSTREAM.into()),
            )),
        },
    });
    SyncLoop::new(ctx, loop_tx).run(loop_rx);
    let _ = pleg_stop_tx.send(());
    drop(rotate_stop_tx);
    let _ = evict_stop_tx.send(());
    let _ = node_stop_tx.send(());
    let _ = api_stop_tx.send(());
    let _ = status_stop_tx.send(());
    drop(servers);
    let _ = crate::sdnotify::notify("STOPPING=1");
    info!("nanolet stopped; pods keep running");
    Ok(())
}

/// API-server mode: why a static pod gets no mirror pod (it references API objects, which the
/// API server's NodeRestriction admission refuses in mirror pods and the kubelet rejects since
/// PreventStaticPodAPIReferences). nanolet still runs the pod from the local configMap/secret
/// store; the error is reported on `/manifests/errors` and as a `MirrorPodRefused` event.
fn no_mirror_reason(sp: &crate::source::SourcePod) -> Option<crate::source::ManifestError> {
    let (field, resource) = crate::apiclient::mirror::api_object_reference(&sp.pod)?;
    Some(crate::source::ManifestError {
        origin: sp.origin.clone(),
        field,
        reason: format!(
            "static pods may not reference {resource}: no mirror pod is created in API-server mode (the pod runs from the local store)"
        ),
    })
}

/// A `FailedValidation` Warning event for a rejected manifest. The pod never existed, so the
/// event names the manifest (the file name without extension, or the URL) in `default`.
fn record_failed_validation(store: &StatusStore, e: &crate::source::ManifestError) {
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
