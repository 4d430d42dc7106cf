//! `nanolet run` flags and the KubeletConfiguration file, merged into one validated [`Config`].
//!
//! Precedence is the current kubelet's: built-in defaults < config file (`--config`) < flags.
//! Flag names, config-file field names and duration syntax are the kubelet's, so an existing
//! kubelet command line or `KubeletConfiguration` file keeps working; fields nanolet does not
//! support are warned about and ignored.
//!
//! Each setting is defined once, in `settings::SETTINGS`: its flag, its config-file field, its
//! help and default, and the one `apply` that sets [`Config`] from either source; `--help`, the
//! man page and completions (`cmd::docgen`) and `/configz` ([`Config::redacted_json`]) are
//! generated from it. The flags are lexed by `util::flags` (Go's pflag conventions, shared with
//! the client commands); `load` reads the file, applies both and checks the whole; `values`
//! holds the value parsers shared by flags and fields.
//!
//! Secrets: the values of manifest URL headers (and credentials embedded in the manifest URL) are
//! never printed: `Debug` is written by hand, error messages do not echo them, and
//! [`Config::redacted_json`] replaces them with `"<redacted>"`.

mod load;
mod settings;
#[cfg(test)]
mod tests;
mod values;

pub use load::{parse_config_text, parse_run_args};
pub use settings::{FlagDoc, flag_docs, help_text};
pub use values::{Taint, ValueError, parse_node_ips, parse_taints};

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::util::redact::{REDACTED, redact_url};

const CONFIG_API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
const CONFIG_KIND: &str = "KubeletConfiguration";

/// What the operator allows on this node: the admission hardening options, checked by
/// `kubelet::policy` (`--allow-privileged`, `--allowed-host-paths`, `--deny-host-namespaces`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityPolicy {
    /// `--allow-privileged` (the kubelet's flag; default true).
    pub allow_privileged: bool,
    /// `--allowed-host-paths`: hostPath volumes must lie below one of these (whole path
    /// components); empty allows every path.
    pub allowed_host_paths: Vec<PathBuf>,
    /// `--deny-host-namespaces`: refuse hostNetwork, hostPID and hostIPC.
    pub deny_host_namespaces: bool,
    /// `--allowed-unsafe-sysctls`: sysctl names or `prefix*` patterns pods may set beyond the
    /// safe set (`api::sysctl`).
    pub allowed_unsafe_sysctls: Vec<String>,
}

impl Default for SecurityPolicy {
    fn default() -> SecurityPolicy {
        SecurityPolicy {
            allow_privileged: true,
            allowed_host_paths: Vec::new(),
            deny_host_namespaces: false,
            allowed_unsafe_sysctls: Vec::new(),
        }
    }
}

/// Errors from flags or the config file. Messages name the flag or the file and field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown flag: {0} (see `nanolet run --help`)")]
    UnknownFlag(String),
    #[error("flag needs an argument: {0}")]
    MissingValue(String),
    #[error("unexpected argument {0:?}: `nanolet run` takes only flags (see `nanolet run --help`)")]
    UnexpectedArgument(String),
    /// `--sync-frequency: invalid duration "x": ...`
    #[error("{flag}: {reason}")]
    InvalidFlag { flag: String, reason: ValueError },
    #[error("reading config file {}: {source}", path.display())]
    ReadFile {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file as a whole is unusable (syntax, wrong kind).
    #[error("{}: {reason}", path.display())]
    InvalidFile { path: PathBuf, reason: String },
    /// `config.yaml: fileCheckFrequency: ...`
    #[error("{}: {field}: {reason}", path.display())]
    InvalidField {
        path: PathBuf,
        field: String,
        reason: ValueError,
    },
    #[error("node name: {0}")]
    NodeName(String),
    /// Eviction and image GC settings that do not fit together (the error names the field).
    #[error("{0}")]
    Eviction(String),
    /// enforceNodeAllocatable settings that do not fit together.
    #[error("{0}")]
    NodeAllocatable(String),
    /// Graceful node shutdown settings that do not fit together.
    #[error("{0}")]
    Shutdown(String),
    /// The read-only port bound off loopback without a token.
    #[error(
        "--address {0} is not a loopback address: the read-only port would be reachable from the network; set --read-only-token-file (config: readOnlyTokenFile) to require a bearer token, or --read-only-port=0 to disable it"
    )]
    ReadOnlyNeedsToken(IpAddr),
    /// `--node-labels` the kubelet refuses (its `ValidateKubeletFlags` message, verbatim).
    #[error("{0}")]
    NodeLabels(String),
    /// Certificate settings that do not fit together, or need the `tls` feature.
    #[error("{flag}: {reason}")]
    Certificates { flag: &'static str, reason: String },
}

/// What `nanolet run <args>` should do.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // built once at startup
pub enum ParseOutcome {
    Run(Config),
    /// `--help` / `-h` was given: print this text and exit 0.
    Help(String),
}

/// The validated configuration of `nanolet run`.
#[derive(Clone, PartialEq)]
pub struct Config {
    /// Directory of static pod manifests (`staticPodPath`). An empty path disables the file
    /// source, as in the kubelet.
    pub pod_manifest_path: PathBuf,
    /// `staticPodURL`; `None` disables the URL source.
    pub manifest_url: Option<String>,
    /// `staticPodURLHeader` as (name, value) pairs in the order they are sent. SECRET values.
    pub manifest_url_headers: Vec<(String, String)>,
    /// CA bundle (PEM) that verifies an https:// manifest URL instead of the built-in web
    /// roots (`--manifest-url-ca-file`, config `staticPodURLCAFile`; nanolet only).
    pub manifest_url_ca_file: Option<PathBuf>,
    /// Client certificate and key (PEM) presented to an https:// manifest URL
    /// (`--manifest-url-client-cert`/`--manifest-url-client-key`, config
    /// `staticPodURLClientCertFile`/`staticPodURLClientKeyFile`; nanolet only). Both or neither.
    /// The paths are not secret; the key file's content is, and is never logged or served.
    pub manifest_url_client_cert: Option<PathBuf>,
    pub manifest_url_client_key: Option<PathBuf>,
    /// Run manifests from a world-writable or foreign-owned directory or file
    /// (`--allow-insecure-manifest-dir`, config `allowInsecureManifestDir`; development only).
    pub allow_insecure_manifest_dir: bool,
    /// Write API pods' Secrets and ServiceAccount tokens into the offline checkpoint
    /// (`<root-dir>/api-objects.json`, 0600) so they start again without the API server
    /// (`--checkpoint-secrets`, config `checkpointSecrets`; nanolet only; default true).
    pub checkpoint_secrets: bool,
    /// Admission hardening: `--allow-privileged`, `--allowed-host-paths`,
    /// `--deny-host-namespaces` (config `allowPrivileged`, `allowedHostPaths`,
    /// `denyHostNamespaces`).
    pub security: SecurityPolicy,
    pub file_check_frequency: Duration,
    pub http_check_frequency: Duration,
    pub sync_frequency: Duration,
    /// `containerRuntimeEndpoint`, e.g. `unix:///run/containerd/containerd.sock`.
    pub runtime_endpoint: String,
    pub runtime_request_timeout: Duration,
    /// `--hostname-override` or the machine hostname, lowercased; a DNS-1123 subdomain.
    pub node_name: String,
    pub root_dir: PathBuf,
    pub pod_logs_dir: PathBuf,
    /// Directory of ConfigMap manifests that static pods may reference (nanolet extension).
    pub config_map_dir: PathBuf,
    /// Directory of Secret manifests that static pods may reference (nanolet extension).
    pub secret_dir: PathBuf,
    /// Directory of RuntimeClass manifests (`node.k8s.io/v1`) static pods may name in
    /// `runtimeClassName` (nanolet extension; joined, the API's classes count too).
    pub runtime_class_dir: PathBuf,
    /// `--device-plugin-dir`: where the device plugin registration socket (`kubelet.sock`) is
    /// served and plugins put theirs; `None` (an empty value): no device plugins.
    pub device_plugin_dir: Option<PathBuf>,
    /// `--pod-resources-dir`: where the pod-resources API socket (`kubelet.sock`) is served;
    /// `None` (an empty value): not served.
    pub pod_resources_dir: Option<PathBuf>,
    /// `--extended-resources`: extended resources this node has (name -> count), in its
    /// capacity and allocatable and checked at admission (nanolet extension).
    pub extended_resources: std::collections::BTreeMap<String, i64>,
    /// Bind address of the read-only port.
    pub address: IpAddr,
    /// 0 disables the read-only server.
    pub read_only_port: u16,
    /// The kubelet server on `--port` (HTTPS, authenticated): 0 disables it.
    pub port: u16,
    /// `--client-ca-file` / `authentication.x509.clientCAFile`: client certificates signed by
    /// it authenticate (CN user, O groups); `None`: no client-certificate authentication.
    pub client_ca_file: Option<PathBuf>,
    /// `--anonymous-auth` / `authentication.anonymous.enabled` (nanolet default false).
    pub anonymous_auth: bool,
    /// `--authentication-token-webhook` / `authentication.webhook.enabled`: bearer tokens are
    /// checked with a TokenReview.
    pub authentication_token_webhook: bool,
    /// `authentication.webhook.cacheTTL` (2m).
    pub authentication_token_webhook_cache_ttl: Duration,
    /// `--authorization-mode` / `authorization.mode`; `None`: Webhook with `--kubeconfig`,
    /// AlwaysAllow without (see [`Config::authorization_mode`]).
    pub authorization_mode: Option<AuthorizationMode>,
    /// `authorization.webhook.cacheAuthorizedTTL` (5m).
    pub authorization_webhook_cache_authorized_ttl: Duration,
    /// `authorization.webhook.cacheUnauthorizedTTL` (30s).
    pub authorization_webhook_cache_unauthorized_ttl: Duration,
    /// `enableSystemLogHandler` (default true): `/logs/` serves /var/log on the kubelet server.
    pub enable_system_log_handler: bool,
    /// File holding the bearer token the read-only server requires (`readOnlyTokenFile`, a
    /// nanolet extension). Required when `address` is not loopback. The path is not secret;
    /// the file's content is, and is only read by `kubelet::wiring` at start.
    pub read_only_token_file: Option<PathBuf>,
    /// `--resolv-conf` / `resolvConf`: the node's resolv.conf pods get; `None` for `""` (no
    /// host DNS, the kubelet's rule).
    pub resolv_conf: Option<PathBuf>,
    /// `--cluster-dns` / `clusterDNS`: the nameservers of cluster-DNS pods; empty: none (they
    /// get the node's resolv.conf, the kubelet's fallback).
    pub cluster_dns: Vec<IpAddr>,
    /// `--cluster-domain` / `clusterDomain`, e.g. `cluster.local`; empty: none.
    pub cluster_domain: String,
    /// `--node-ip`: at most one IPv4 and one IPv6 address, the first the primary; empty: the
    /// address of the default route's interface (see `node::detect_host_ip`).
    pub node_ips: Vec<IpAddr>,
    /// The images directory (`imagesDir`, nanolet only): image archives in it are imported at
    /// start and whenever one appears. `None`: `<root-dir>/images`; an empty path disables it.
    pub images_dir: Option<PathBuf>,
    /// A docker `config.json` with registry credentials (`imageCredentialsFile`, nanolet only;
    /// the kubelet reads /var/lib/kubelet/config.json). `None`: `<root-dir>/config.json`; an
    /// empty path disables it. The path is not secret; the file's content is.
    pub image_credentials_file: Option<PathBuf>,
    /// The containerd snapshotter imported images are unpacked into (`imageSnapshotter`,
    /// nanolet only; default `overlayfs`, containerd's CRI default).
    pub image_snapshotter: String,
    pub healthz_bind_address: IpAddr,
    /// 0 disables the healthz server.
    pub healthz_port: u16,
    pub max_pods: u32,
    /// Pod worker pool (`podWorkerThreads`, `maxPodWorkerThreads`, nanolet only): threads
    /// kept (2) and at most (0: as many as `max_pods`); see `kubelet::worker_pool`.
    pub pod_worker_threads: usize,
    pub max_pod_worker_threads: usize,
    /// `containerLogMaxSize` in bytes (default 10Mi): a running container's log is rotated
    /// beyond it.
    pub container_log_max_size: u64,
    /// `containerLogMaxFiles` (default 5): log files kept per container, the current included.
    pub container_log_max_files: usize,
    /// `--kubeconfig`: API-server mode when set (nanolet stays standalone otherwise).
    pub kubeconfig: Option<PathBuf>,
    /// `--bootstrap-kubeconfig` (flag only, as upstream): TLS bootstrap of the client
    /// certificate when `--kubeconfig` is missing or its certificate expired.
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// `--cert-dir` (flag only, as upstream); `None`: `<root-dir>/pki`, see [`Config::cert_dir`].
    pub cert_dir: Option<PathBuf>,
    /// `rotateCertificates` / `--rotate-certificates` (default false).
    pub rotate_certificates: bool,
    /// `serverTLSBootstrap` / `--rotate-server-certificates` (default false).
    pub server_tls_bootstrap: bool,
    /// `tlsCertFile` / `--tls-cert-file`; with `tls_private_key_file`.
    pub tls_cert_file: Option<PathBuf>,
    /// `tlsPrivateKeyFile` / `--tls-private-key-file`.
    pub tls_private_key_file: Option<PathBuf>,
    /// `--node-labels` added to the registered Node.
    pub node_labels: Vec<(String, String)>,
    /// `--register-with-taints` / `registerWithTaints`: taints of the registered Node.
    pub register_with_taints: Vec<Taint>,
    /// `nodeStatusUpdateFrequency` as set (default 10s: [`Config::node_status_update_frequency`]).
    pub node_status_update_frequency: Option<Duration>,
    /// `nodeStatusReportFrequency` as set ([`Config::node_status_report_frequency`]).
    pub node_status_report_frequency: Option<Duration>,
    /// `eventRecordQPS` / `--event-qps` (50; 0: no limit): event writes per second.
    pub event_record_qps: u32,
    /// `eventBurst` / `--event-burst` (100).
    pub event_burst: u32,
    /// `cgroupDriver` (default cgroupfs).
    pub cgroup_driver: crate::cm::CgroupDriver,
    /// `podPidsLimit` (`--pod-max-pids`): pids.max of each pod cgroup; <= 0: no limit.
    pub pod_pids_limit: i64,
    /// `qosReserved` (`--qos-reserved=memory=N%`): the percentage of the higher QoS tiers'
    /// memory requests kept from the lower tiers' cgroups; `None`: off.
    pub qos_reserved_memory_percent: Option<i64>,
    /// `memorySwap.swapBehavior` (`--memory-swap-behavior`): NoSwap (default) or LimitedSwap.
    pub memory_swap_behavior: crate::kuberuntime::container_linux::SwapBehavior,
    /// `enforceNodeAllocatable`: `pods`, `system-reserved`, `kube-reserved` (or `none`).
    pub enforce_node_allocatable: Vec<String>,
    /// `systemReservedCgroup`, `kubeReservedCgroup`: the cgroups those limits go on.
    pub system_reserved_cgroup: String,
    pub kube_reserved_cgroup: String,
    /// `containerLogMonitorInterval` (default 10s): how often logs are checked for rotation.
    pub container_log_monitor_interval: Duration,
    /// Eviction thresholds, reservations and image GC (evictionHard, systemReserved,
    /// imageGCHighThresholdPercent, ...).
    pub eviction: crate::eviction::EvictionConfig,
    /// Graceful node shutdown (shutdownGracePeriod, shutdownGracePeriodCriticalPods,
    /// shutdownGracePeriodByPodPriority).
    pub shutdown: crate::nodeshutdown::ShutdownConfig,
    /// `--v`, 0..=10; see [`verbosity_level`].
    pub verbosity: u8,
    /// Warnings found while loading the config file (ignored fields, each naming the file and
    /// field). Tracing is initialized only once the config (and `--v`) is known, so they are not
    /// logged while parsing: `main` calls [`Config::log_warnings`] (`tracing::warn!`) after.
    pub warnings: Vec<String>,
}

/// How the kubelet server on `--port` authorizes a request (`authorization.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationMode {
    AlwaysAllow,
    /// A SubjectAccessReview per request (cached).
    Webhook,
}

impl AuthorizationMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthorizationMode::AlwaysAllow => "AlwaysAllow",
            AuthorizationMode::Webhook => "Webhook",
        }
    }
}

impl Config {
    /// `nodeStatusUpdateFrequency`: how often the node status is computed (10s).
    pub fn node_status_update_frequency(&self) -> Duration {
        self.node_status_update_frequency
            .unwrap_or(Duration::from_secs(10))
    }

    /// `nodeStatusReportFrequency`: how often an unchanged node status is still sent. Its
    /// default is 5m, or nodeStatusUpdateFrequency when that was set explicitly (upstream's
    /// defaulting, "for backward compatibility").
    pub fn node_status_report_frequency(&self) -> Duration {
        self.node_status_report_frequency
            .unwrap_or(match self.node_status_update_frequency {
                Some(d) => d,
                None => Duration::from_secs(300),
            })
    }

    /// The effective authorization mode: as set, else Webhook with `--kubeconfig` and
    /// AlwaysAllow without (nanolet's default; the kubelet's flag default is AlwaysAllow).
    pub fn authorization_mode(&self) -> AuthorizationMode {
        self.authorization_mode
            .unwrap_or(if self.kubeconfig.is_some() {
                AuthorizationMode::Webhook
            } else {
                AuthorizationMode::AlwaysAllow
            })
    }

    /// The effective images directory, `None` when disabled.
    pub fn images_dir(&self) -> Option<PathBuf> {
        match &self.images_dir {
            None => Some(self.root_dir.join("images")),
            Some(p) if p.as_os_str().is_empty() => None,
            Some(p) => Some(p.clone()),
        }
    }

    /// The effective registry credentials file, `None` when disabled.
    pub fn image_credentials_file(&self) -> Option<PathBuf> {
        match &self.image_credentials_file {
            None => Some(self.root_dir.join("config.json")),
            Some(p) if p.as_os_str().is_empty() => None,
            Some(p) => Some(p.clone()),
        }
    }

    /// The certificate directory: `--cert-dir`, else `<root-dir>/pki`
    /// (the kubelet's default is `/var/lib/kubelet/pki`).
    pub fn cert_dir(&self) -> PathBuf {
        match &self.cert_dir {
            Some(p) => p.clone(),
            None => self.root_dir.join("pki"),
        }
    }

    /// The built-in defaults (before the config file and flags), for the given node name.
    pub fn defaults(node_name: String) -> Config {
        Config {
            pod_manifest_path: PathBuf::from("/etc/kubernetes/manifests"),
            manifest_url: None,
            manifest_url_headers: Vec::new(),
            manifest_url_ca_file: None,
            manifest_url_client_cert: None,
            manifest_url_client_key: None,
            allow_insecure_manifest_dir: false,
            checkpoint_secrets: true,
            security: SecurityPolicy::default(),
            file_check_frequency: Duration::from_secs(20),
            http_check_frequency: Duration::from_secs(20),
            sync_frequency: Duration::from_secs(60),
            runtime_endpoint: crate::cri::DEFAULT_ENDPOINT.into(),
            runtime_request_timeout: Duration::from_secs(120),
            node_name,
            root_dir: PathBuf::from("/var/lib/nanolet"),
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            config_map_dir: PathBuf::from("/etc/nanolet/configmaps"),
            secret_dir: PathBuf::from("/etc/nanolet/secrets"),
            runtime_class_dir: PathBuf::from("/etc/nanolet/runtimeclasses"),
            device_plugin_dir: Some(PathBuf::from("/var/lib/kubelet/device-plugins")),
            pod_resources_dir: Some(PathBuf::from("/var/lib/kubelet/pod-resources")),
            extended_resources: Default::default(),
            address: IpAddr::from([127, 0, 0, 1]),
            read_only_port: 10255,
            // HTTPS only: a build without TLS has no kubelet server unless --port asks for
            // one (then a config error says why).
            port: if cfg!(feature = "tls") { 10250 } else { 0 },
            client_ca_file: None,
            anonymous_auth: false,
            authentication_token_webhook: false,
            authentication_token_webhook_cache_ttl: Duration::from_secs(120),
            authorization_mode: None,
            authorization_webhook_cache_authorized_ttl: Duration::from_secs(300),
            authorization_webhook_cache_unauthorized_ttl: Duration::from_secs(30),
            enable_system_log_handler: true,
            read_only_token_file: None,
            resolv_conf: Some(PathBuf::from("/etc/resolv.conf")),
            cluster_dns: Vec::new(),
            cluster_domain: String::new(),
            node_ips: Vec::new(),
            images_dir: None,
            image_credentials_file: None,
            image_snapshotter: crate::images::DEFAULT_SNAPSHOTTER.into(),
            healthz_bind_address: IpAddr::from([127, 0, 0, 1]),
            healthz_port: 10248,
            max_pods: 110,
            pod_worker_threads: 2,
            max_pod_worker_threads: 0,
            container_log_max_size: 10 << 20,
            container_log_max_files: 5,
            container_log_monitor_interval: Duration::from_secs(10),
            cgroup_driver: crate::cm::CgroupDriver::Cgroupfs,
            pod_pids_limit: -1,
            qos_reserved_memory_percent: None,
            memory_swap_behavior: Default::default(),
            enforce_node_allocatable: vec!["pods".into()],
            system_reserved_cgroup: String::new(),
            kube_reserved_cgroup: String::new(),
            kubeconfig: None,
            bootstrap_kubeconfig: None,
            cert_dir: None,
            rotate_certificates: false,
            server_tls_bootstrap: false,
            tls_cert_file: None,
            tls_private_key_file: None,
            node_labels: Vec::new(),
            register_with_taints: Vec::new(),
            node_status_update_frequency: None,
            node_status_report_frequency: None,
            event_record_qps: 50,
            event_burst: 100,
            eviction: crate::eviction::EvictionConfig::default(),
            shutdown: crate::nodeshutdown::ShutdownConfig {
                logind_conf_dir: PathBuf::from("/etc/systemd/logind.conf.d"),
                ..Default::default()
            },
            verbosity: 0,
            warnings: Vec::new(),
        }
    }

    /// The tracing level for `self.verbosity`.
    pub fn log_level(&self) -> tracing::Level {
        verbosity_level(self.verbosity)
    }

    /// Logs [`Config::warnings`] through `tracing::warn!`.
    pub fn log_warnings(&self) {
        for w in &self.warnings {
            tracing::warn!("{w}");
        }
    }

    /// The configuration in KubeletConfiguration field names (for a `/configz`-style endpoint),
    /// with header values and URL credentials replaced by `"<redacted>"`. Fields that are not
    /// KubeletConfiguration fields (`nodeName`, `rootDir`, `verbosity`) use the same casing.
    /// Each setting says what it shows (`configz` in `settings::SETTINGS`).
    pub fn redacted_json(&self) -> serde_json::Value {
        let mut doc = serde_json::Map::new();
        doc.insert("kind".into(), CONFIG_KIND.into());
        doc.insert("apiVersion".into(), CONFIG_API_VERSION.into());
        for (key, show) in settings::SETTINGS.iter().filter_map(|s| s.configz) {
            insert_nested(&mut doc, key, show(self));
        }
        serde_json::Value::Object(doc)
    }
}

/// Inserts `value` at a dotted KubeletConfiguration path (`authentication.x509.clientCAFile`
/// becomes nested objects, as the kubelet's `/configz` shows them).
fn insert_nested(
    doc: &mut serde_json::Map<String, serde_json::Value>,
    key: &str,
    value: serde_json::Value,
) {
    match key.split_once('.') {
        None => {
            doc.insert(key.into(), value);
        }
        Some((head, rest)) => {
            let entry = doc
                .entry(head.to_string())
                .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
            if let serde_json::Value::Object(inner) = entry {
                insert_nested(inner, rest, value);
            }
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<String> = self
            .manifest_url_headers
            .iter()
            .map(|(n, _)| format!("{n}: {REDACTED}"))
            .collect();
        f.debug_struct("Config")
            .field("pod_manifest_path", &self.pod_manifest_path)
            .field(
                "manifest_url",
                &self.manifest_url.as_deref().map(redact_url),
            )
            .field("manifest_url_headers", &headers)
            .field("file_check_frequency", &self.file_check_frequency)
            .field("http_check_frequency", &self.http_check_frequency)
            .field("sync_frequency", &self.sync_frequency)
            .field("runtime_endpoint", &self.runtime_endpoint)
            .field("runtime_request_timeout", &self.runtime_request_timeout)
            .field("node_name", &self.node_name)
            .field("root_dir", &self.root_dir)
            .field("pod_logs_dir", &self.pod_logs_dir)
            .field("config_map_dir", &self.config_map_dir)
            .field("secret_dir", &self.secret_dir)
            .field("runtime_class_dir", &self.runtime_class_dir)
            .field("device_plugin_dir", &self.device_plugin_dir)
            .field("pod_resources_dir", &self.pod_resources_dir)
            .field("extended_resources", &self.extended_resources)
            .field("address", &self.address)
            .field("read_only_port", &self.read_only_port)
            .field("port", &self.port)
            .field("read_only_token_file", &self.read_only_token_file)
            .field("resolv_conf", &self.resolv_conf)
            .field("cluster_dns", &self.cluster_dns)
            .field("cluster_domain", &self.cluster_domain)
            .field("node_ips", &self.node_ips)
            .field("manifest_url_ca_file", &self.manifest_url_ca_file)
            .field("manifest_url_client_cert", &self.manifest_url_client_cert)
            .field("manifest_url_client_key", &self.manifest_url_client_key)
            .field(
                "allow_insecure_manifest_dir",
                &self.allow_insecure_manifest_dir,
            )
            .field("checkpoint_secrets", &self.checkpoint_secrets)
            .field("security", &self.security)
            .field("images_dir", &self.images_dir)
            .field("image_credentials_file", &self.image_credentials_file)
            .field("image_snapshotter", &self.image_snapshotter)
            .field("healthz_bind_address", &self.healthz_bind_address)
            .field("healthz_port", &self.healthz_port)
            .field("max_pods", &self.max_pods)
            .field("pod_worker_threads", &self.pod_worker_threads)
            .field("max_pod_worker_threads", &self.max_pod_worker_threads)
            .field("container_log_max_size", &self.container_log_max_size)
            .field("container_log_max_files", &self.container_log_max_files)
            .field(
                "container_log_monitor_interval",
                &self.container_log_monitor_interval,
            )
            .field("cgroup_driver", &self.cgroup_driver)
            .field("pod_pids_limit", &self.pod_pids_limit)
            .field(
                "qos_reserved_memory_percent",
                &self.qos_reserved_memory_percent,
            )
            .field("memory_swap_behavior", &self.memory_swap_behavior)
            .field("enforce_node_allocatable", &self.enforce_node_allocatable)
            .field("system_reserved_cgroup", &self.system_reserved_cgroup)
            .field("kube_reserved_cgroup", &self.kube_reserved_cgroup)
            .field("kubeconfig", &self.kubeconfig)
            .field("bootstrap_kubeconfig", &self.bootstrap_kubeconfig)
            .field("cert_dir", &self.cert_dir())
            .field("rotate_certificates", &self.rotate_certificates)
            .field("server_tls_bootstrap", &self.server_tls_bootstrap)
            .field("tls_cert_file", &self.tls_cert_file)
            .field("tls_private_key_file", &self.tls_private_key_file)
            .field("node_labels", &self.node_labels)
            .field("register_with_taints", &self.register_with_taints)
            .field(
                "node_status_update_frequency",
                &self.node_status_update_frequency(),
            )
            .field(
                "node_status_report_frequency",
                &self.node_status_report_frequency(),
            )
            .field("event_record_qps", &self.event_record_qps)
            .field("event_burst", &self.event_burst)
            .field("eviction", &self.eviction)
            .field("verbosity", &self.verbosity)
            .field("warnings", &self.warnings)
            .finish()
    }
}

/// Maps `--v` to a tracing level, following the Kubernetes logging conventions
/// (V(2) is the usual production level, V(4) is debug, V(5)+ is trace):
/// 0-2 → INFO, 3-4 → DEBUG, 5-10 → TRACE.
pub fn verbosity_level(v: u8) -> tracing::Level {
    match v {
        0..=2 => tracing::Level::INFO,
        3..=4 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    }
}
