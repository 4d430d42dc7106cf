//! `nanolet run` flags and the KubeletConfiguration file, merged into one validated [`Config`].
//!
//! Precedence is the current kubelet's: built-in defaults < config file (`--config`) < flags.
//! Flag names, config-file field names and duration syntax are the kubelet's, so an existing
//! kubelet command line or `KubeletConfiguration` file keeps working; fields nanolet does not
//! support are warned about and ignored.
//!
//! The command-line parser is hand-written (no clap) and follows Go's pflag conventions:
//! `--flag=value`, `--flag value`, boolean `--flag` / `--flag=false`, repeatable flags, and the
//! one shorthand the kubelet has, `-v` (`-v 3`, `-v=3`, `-v3`).
//!
//! Secrets: the values of manifest URL headers (and credentials embedded in the manifest URL) are
//! never printed: `Debug` is written by hand, error messages do not echo them, and
//! [`Config::redacted_json`] replaces them with `"<redacted>"`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::eviction::threshold;
use crate::timeutil::{format_go_duration, parse_go_duration};
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
}

impl Default for SecurityPolicy {
    fn default() -> SecurityPolicy {
        SecurityPolicy {
            allow_privileged: true,
            allowed_host_paths: Vec::new(),
            deny_host_namespaces: false,
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
    InvalidFlag { flag: String, reason: String },
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
        reason: String,
    },
    #[error("node name: {0}")]
    NodeName(String),
    /// Eviction and image GC settings that do not fit together (the error names the field).
    #[error("{0}")]
    Eviction(String),
    /// The read-only port bound off loopback without a token.
    #[error(
        "--address {0} is not a loopback address: the read-only port would be reachable from the network; set --read-only-token-file (config: readOnlyTokenFile) to require a bearer token, or --read-only-port=0 to disable it"
    )]
    ReadOnlyNeedsToken(IpAddr),
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
    /// Bind address of the read-only port.
    pub address: IpAddr,
    /// 0 disables the read-only server.
    pub read_only_port: u16,
    /// File holding the bearer token the read-only server requires (`readOnlyTokenFile`, a
    /// nanolet extension). Required when `address` is not loopback. The path is not secret;
    /// the file's content is, and is only read by the agent at start.
    pub read_only_token_file: Option<PathBuf>,
    /// `--resolv-conf` / `resolvConf`: the node's resolv.conf pods get; `None` for `""` (no
    /// host DNS, the kubelet's rule).
    pub resolv_conf: Option<PathBuf>,
    /// `--node-ip`: at most one IPv4 and one IPv6 address, the first the primary; empty: the
    /// address of the default route's interface (see `agent::detect_host_ip`).
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
    /// `containerLogMaxSize` in bytes (default 10Mi): a running container's log is rotated
    /// beyond it.
    pub container_log_max_size: u64,
    /// `containerLogMaxFiles` (default 5): log files kept per container, the current included.
    pub container_log_max_files: usize,
    /// `--kubeconfig`: API-server mode when set (nanolet stays standalone otherwise).
    pub kubeconfig: Option<PathBuf>,
    /// `--node-labels` added to the registered Node.
    pub node_labels: Vec<(String, String)>,
    /// `--register-with-taints` / `registerWithTaints`: taints of the registered Node.
    pub register_with_taints: Vec<Taint>,
    /// `nodeStatusUpdateFrequency` (10s).
    pub node_status_update_frequency: Duration,
    /// `cgroupDriver` (default cgroupfs).
    pub cgroup_driver: crate::cm::CgroupDriver,
    /// `containerLogMonitorInterval` (default 10s): how often logs are checked for rotation.
    pub container_log_monitor_interval: Duration,
    /// Eviction thresholds, reservations and image GC (evictionHard, systemReserved,
    /// imageGCHighThresholdPercent, ...).
    pub eviction: crate::eviction::EvictionConfig,
    /// `--v`, 0..=10; see [`verbosity_level`].
    pub verbosity: u8,
    /// Warnings found while loading the config file (ignored fields, each naming the file and
    /// field). Tracing is initialized only once the config (and `--v`) is known, so they are not
    /// logged while parsing: `main` calls [`Config::log_warnings`] (`tracing::warn!`) after.
    pub warnings: Vec<String>,
}

impl Config {
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
            address: IpAddr::from([127, 0, 0, 1]),
            read_only_port: 10255,
            read_only_token_file: None,
            resolv_conf: Some(PathBuf::from("/etc/resolv.conf")),
            node_ips: Vec::new(),
            images_dir: None,
            image_credentials_file: None,
            image_snapshotter: crate::images::DEFAULT_SNAPSHOTTER.into(),
            healthz_bind_address: IpAddr::from([127, 0, 0, 1]),
            healthz_port: 10248,
            max_pods: 110,
            container_log_max_size: 10 << 20,
            container_log_max_files: 5,
            container_log_monitor_interval: Duration::from_secs(10),
            cgroup_driver: crate::cm::CgroupDriver::Cgroupfs,
            kubeconfig: None,
            node_labels: Vec::new(),
            register_with_taints: Vec::new(),
            node_status_update_frequency: Duration::from_secs(10),
            eviction: crate::eviction::EvictionConfig::default(),
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
    pub fn redacted_json(&self) -> serde_json::Value {
        let path_text = |p: &Option<PathBuf>| {
            p.as_deref()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let mut headers = serde_json::Map::new();
        for (name, _) in &self.manifest_url_headers {
            let entry = headers
                .entry(name.clone())
                .or_insert_with(|| serde_json::json!([]));
            if let Some(list) = entry.as_array_mut() {
                list.push(serde_json::Value::String(REDACTED.into()));
            }
        }
        let mut doc = serde_json::json!({
            "kind": CONFIG_KIND,
            "apiVersion": CONFIG_API_VERSION,
            "staticPodPath": self.pod_manifest_path.to_string_lossy(),
            "staticPodURL": self.manifest_url.as_deref().map(redact_url).unwrap_or_default(),
            "staticPodURLHeader": headers,
            "fileCheckFrequency": format_go_duration(self.file_check_frequency),
            "httpCheckFrequency": format_go_duration(self.http_check_frequency),
            "syncFrequency": format_go_duration(self.sync_frequency),
            "containerRuntimeEndpoint": self.runtime_endpoint,
            "runtimeRequestTimeout": format_go_duration(self.runtime_request_timeout),
            "address": self.address.to_string(),
            "readOnlyPort": self.read_only_port,
            "readOnlyTokenFile": self
                .read_only_token_file
                .as_deref()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
            "healthzBindAddress": self.healthz_bind_address.to_string(),
            "healthzPort": self.healthz_port,
            "maxPods": self.max_pods,
            "containerLogMaxSize": self.container_log_max_size.to_string(),
            "containerLogMaxFiles": self.container_log_max_files,
            "containerLogMonitorInterval": format_go_duration(self.container_log_monitor_interval),
            "cgroupDriver": self.cgroup_driver.as_str(),
            "kubeconfig": self.kubeconfig.as_deref().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default(),
            "nodeStatusUpdateFrequency": format_go_duration(self.node_status_update_frequency),
            "evictionHard": self.eviction.raw.hard,
            "evictionSoft": self.eviction.raw.soft,
            "evictionSoftGracePeriod": self.eviction.raw.soft_grace,
            "evictionMinimumReclaim": self.eviction.raw.min_reclaim,
            "evictionMaxPodGracePeriod": self.eviction.max_pod_grace_period,
            "evictionPressureTransitionPeriod": format_go_duration(self.eviction.pressure_transition_period),
            "evictionMonitoringPeriod": format_go_duration(self.eviction.monitoring_period),
            "imageGCHighThresholdPercent": self.eviction.image_gc.high_percent,
            "imageGCLowThresholdPercent": self.eviction.image_gc.low_percent,
            "imageMinimumGCAge": format_go_duration(self.eviction.image_gc.min_age),
            "podLogsDir": self.pod_logs_dir.to_string_lossy(),
            "nodeName": self.node_name,
            "rootDir": self.root_dir.to_string_lossy(),
            "configMapDir": self.config_map_dir.to_string_lossy(),
            "secretDir": self.secret_dir.to_string_lossy(),
            "imagesDir": self.images_dir().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default(),
            "imageCredentialsFile": self.image_credentials_file().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default(),
            "imageSnapshotter": self.image_snapshotter,
            "verbosity": self.verbosity,
        });
        if let Some(m) = doc.as_object_mut() {
            let extra = serde_json::json!({
                "registerWithTaints": self.register_with_taints,
                "staticPodURLCAFile": path_text(&self.manifest_url_ca_file),
                "staticPodURLClientCertFile": path_text(&self.manifest_url_client_cert),
                "staticPodURLClientKeyFile": path_text(&self.manifest_url_client_key),
                "allowInsecureManifestDir": self.allow_insecure_manifest_dir,
                "allowPrivileged": self.security.allow_privileged,
                "allowedHostPaths": self
                    .security
                    .allowed_host_paths
                    .iter()
                    .map(|p| p.to_string_lossy().into_owned())
                    .collect::<Vec<_>>(),
                "denyHostNamespaces": self.security.deny_host_namespaces,
                "resolvConf": path_text(&self.resolv_conf),
            });
            if let serde_json::Value::Object(extra) = extra {
                m.extend(extra);
            }
        }
        doc
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
            .field("address", &self.address)
            .field("read_only_port", &self.read_only_port)
            .field("read_only_token_file", &self.read_only_token_file)
            .field("resolv_conf", &self.resolv_conf)
            .field("node_ips", &self.node_ips)
            .field("manifest_url_ca_file", &self.manifest_url_ca_file)
            .field("manifest_url_client_cert", &self.manifest_url_client_cert)
            .field("manifest_url_client_key", &self.manifest_url_client_key)
            .field(
                "allow_insecure_manifest_dir",
                &self.allow_insecure_manifest_dir,
            )
            .field("security", &self.security)
            .field("images_dir", &self.images_dir)
            .field("image_credentials_file", &self.image_credentials_file)
            .field("image_snapshotter", &self.image_snapshotter)
            .field("healthz_bind_address", &self.healthz_bind_address)
            .field("healthz_port", &self.healthz_port)
            .field("max_pods", &self.max_pods)
            .field("container_log_max_size", &self.container_log_max_size)
            .field("container_log_max_files", &self.container_log_max_files)
            .field(
                "container_log_monitor_interval",
                &self.container_log_monitor_interval,
            )
            .field("cgroup_driver", &self.cgroup_driver)
            .field("kubeconfig", &self.kubeconfig)
            .field("node_labels", &self.node_labels)
            .field("register_with_taints", &self.register_with_taints)
            .field(
                "node_status_update_frequency",
                &self.node_status_update_frequency,
            )
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

// ---------------------------------------------------------------------------------------------
// Flags

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bool,
    Value,
    /// A value flag whose occurrences accumulate.
    Repeated,
}

struct FlagSpec {
    name: &'static str,
    shorthand: Option<char>,
    kind: Kind,
    /// Placeholder for the value in `--help`.
    value_name: &'static str,
    /// Shown as `(default ...)`; empty shows nothing.
    default: &'static str,
    help: &'static str,
}

const FLAGS: &[FlagSpec] = &[
    FlagSpec {
        name: "address",
        shorthand: None,
        kind: Kind::Value,
        value_name: "ip",
        default: "127.0.0.1",
        help: "IP address the read-only port listens on (config: address). NOTE: the kubelet defaults to 0.0.0.0; nanolet defaults to loopback only",
    },
    FlagSpec {
        name: "cgroup-driver",
        shorthand: None,
        kind: Kind::Value,
        value_name: "string",
        default: "cgroupfs",
        help: "cgroupfs or systemd; must match containerd's runc SystemdCgroup setting (config: cgroupDriver)",
    },
    FlagSpec {
        name: "config-map-dir",
        shorthand: None,
        kind: Kind::Value,
        value_name: "path",
        default: "/etc/nanolet/configmaps",
        help: "Directory of ConfigMap manifests static pods may reference in volumes and env (nanolet extension; the kubelet refuses them)",
    },
    FlagSpec {
        name: "config",
        shorthand: None,
        kind: Kind::Value,
        value_name: "file",
        default: "",
        help: "KubeletConfiguration file (YAML or JSON, apiVersion kubelet.config.k8s.io/v1beta1); flags override its fields, unsupported fields are warned about and ignored",
    },
    FlagSpec {
        name: "container-log-max-files",
        shorthand: None,
        kind: Kind::Value,
        value_name: "int",
        default: "5",
        help: "Log files kept per container, the current one included (config: containerLogMaxFiles)",
    },
    FlagSpec {
        name: "container-log-max-size",
        shorthand: None,
        kind: Kind::Value,
        value_name: "quantity",
        default: "10Mi",
        help: "Rotate a container's log beyond this size (config: containerLogMaxSize)",
    },
    FlagSpec {
        name: "container-log-monitor-interval",
        shorthand: None,
        kind: Kind::Value,
        value_name: "duration",
        default: "10s",
        help: "How often container logs are checked for rotation (config: containerLogMonitorInterval)",
    },
    FlagSpec {
        name: "container-runtime-endpoint",
        shorthand: None,
        kind: Kind::Value,
        value_name: "string",
        default: crate::cri::DEFAULT_ENDPOINT,
        help: "CRI endpoint of containerd (config: containerRuntimeEndpoint)",
    },
    FlagSpec {
        name: "eviction-hard",
        shorthand: None,
        kind: Kind::Value,
        value_name: "mapStringString",
        default: "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%",
        help: "Hard eviction thresholds; setting any replaces all the defaults, 0% disables one (config: evictionHard)",
    },
    FlagSpec {
        name: "eviction-max-pod-grace-period",
        shorthand: None,
        kind: Kind::Value,
        value_name: "int",
        default: "0",
        help: "Longest grace period for soft evictions, seconds; 0 = the pod's own (config: evictionMaxPodGracePeriod)",
    },
    FlagSpec {
        name: "eviction-minimum-reclaim",
        shorthand: None,
        kind: Kind::Value,
        value_name: "mapStringString",
        default: "",
        help: "Extra amount to reclaim once a threshold is met, e.g. memory.available=0Mi,nodefs.available=500Mi (config: evictionMinimumReclaim)",
    },
    FlagSpec {
        name: "eviction-monitoring-period",
        shorthand: None,
        kind: Kind::Value,
        value_name: "duration",
        default: "10s",
        help: "How often the eviction manager measures the node (config: evictionMonitoringPeriod; nanolet extension, the kubelet's is fixed at 10s)",
    },
    FlagSpec {
        name: "eviction-pressure-transition-period",
        shorthand: None,
        kind: Kind::Value,
        value_name: "duration",
        default: "5m0s",
        help: "How long a pressure condition is held after its signal clears (config: evictionPressureTransitionPeriod)",
    },
    FlagSpec {
        name: "eviction-soft",
        shorthand: None,
        kind: Kind::Value,
        value_name: "mapStringString",
        default: "",
        help: "Soft eviction thresholds, e.g. memory.available<300Mi; each needs a grace period (config: evictionSoft)",
    },
    FlagSpec {
        name: "eviction-soft-grace-period",
        shorthand: None,
        kind: Kind::Value,
        value_name: "mapStringString",
        default: "",
        help: "Grace periods of the soft thresholds, e.g. memory.available=1m30s (config: evictionSoftGracePeriod)",
    },
    FlagSpec {
        name: "file-check-frequency",
        shorthand: None,
        kind: Kind::Value,
        value_name: "duration",
        default: "20s",
        help: "How often to rescan --pod-manifest-path for changes (config: fileCheckFrequency)",
    },
    FlagSpec {
        name: "healthz-bind-address",
        shorthand: None,
        kind: Kind::Value,
        value_name: "ip",
        default: "127.0.0.1",
        help: "IP address the healthz server listens on (config: healthzBindAddress)",
    },
    FlagSpec {
        name: "allow-insecure-manifest-dir",
        shorthand: None,
        kind: Kind::Bool,
        value_name: "",
        default: "false",
        help: "Run manifests from a world-writable or not root-owned directory or file (development only: whoever can write there can run privileged containers) (config: allowInsecureManifestDir, nanolet only)",
    },
    FlagSpec {
        name: "allow-privileged",
        shorthand: None,
        kind: Kind::Bool,
        value_name: "",
        default: "true",
        help: "Admit pods with privileged containers; false rejects them with reason Forbidden (config: allowPrivileged)",
    },
    FlagSpec {
        name: "allowed-host-paths",
        shorthand: None,
        kind: Kind::Value,
        value_name: "path,...",
        default: "",
        help: "Absolute path prefixes hostPath volumes must lie below (whole components); empty allows all (config: allowedHostPaths, nanolet only)",
    },
    FlagSpec {
        name: "deny-host-namespaces",
        shorthand: None,
        kind: Kind::Bool,
        value_name: "",
        default: "false",
        help: "Reject pods with hostNetwork, hostPID or hostIPC (config: denyHostNamespaces, nanolet only)",
    },
    FlagSpec {
        name: "healthz-port",
        shorthand: None,
        kind: Kind::Value,
        value_name: "port",
        default: "10248",
        help: "Port of the healthz server, 0 disables it (config: healthzPort)",
    },
    FlagSpec {
        name: "help",
        shorthand: Some('h'),
        kind: Kind::Bool,
        value_name: "",
        default: "",
        help: "Print this help and exit",
    },
    FlagSpec {
        name: "hostname-override",
        shorthand: None,
        kind: Kind::Value,
        value_name: "string",
        default: "",
        help: "Node name used in static pod names (default: the machine hostname, lowercased)",
    },
    FlagSpec {
        name: "http-check-frequency",
        shorthand: None,
        kind: Kind::Value,
        value_name: "duration",
        default: "20s",
        help: "How often to fetch --manifest-url (config: httpCheckFrequency)",
    },
    FlagSpec {
        name: "image-gc-high-threshold",
        shorthand: None,
        kind: Kind::Value,
        value_name: "int",
        default: "85",
        help: "Image filesystem usage percent at which image GC starts (config: imageGCHighThresholdPercent)",
    },
    FlagSpec {
        name: "image-gc-low-threshold",
        shorthand: None,
        kind: Kind::Value,
        value_name: "int",
        default: "80",
        help: "Image filesystem usage percent image GC frees down to (config: imageGCLowThresholdPercent)",
    },
    FlagSpec {
        name: "kube-reserved",
        shorthand: None,
        kind: Kind::Value,
        value_name: "mapStringString",
        default: "",
        help: "Resources reserved for Kubernetes daemons, e.g. cpu=100m,memory=100Mi (config: kubeReserved)",
    },
    FlagSpec {
        name: "manifest-url",
        shorthand: None,
        kind: Kind::Value,
        value_name: "url",
        default: "",
        help: "http(s) URL serving static pod manifests; empty disables the URL source (config: staticPodURL)",
    },
    FlagSpec {
        name: "manifest-url-header",
        shorthand: None,
        kind: Kind::Repeated,
        value_name: "Name:Value,...",
        default: "",
        help: "HTTP header(s) sent with --manifest-url requests; repeatable and comma-separated, e.g. 'a:hello,b:again' (config: staticPodURLHeader); values are never logged",
    },
    FlagSpec {
        name: "manifest-url-ca-file",
        shorthand: None,
        kind: Kind::Value,
        value_name: "path",
        default: "",
        help: "PEM CA bundle that verifies an https:// --manifest-url instead of the built-in web roots (config: staticPodURLCAFile, nanolet only)",
    },
    FlagSpec {
        name: "manifest-url-client-cert",
        shorthand: None,
        kind: Kind::Value,
        value_name: "path",
        default: "",
        help: "PEM client certificate (chain) for an https:// --manifest-url; needs --manifest-url-client-key (config: staticPodURLClientCertFile, nanolet only)",
    },
    FlagSpec {
        name: "manifest-url-client-key",
        shorthand: None,
        kind: Kind::Value,
        value_name: "path",
        default: "",
        help: "PEM private key of --manifest-url-client-cert (config: staticPodURLClientKeyFile, nanolet only)",
    },
    FlagSpec {
        name: "images-dir",
        shorthand: None,
        kind: Kind::Value,
        value_name: "path",
        default: "<root-dir>/images",
        help: "Directory of image archives (OCI layout or docker-archive .tar, .tar.gz, .tar.zst) imported into containerd at start and whenever one appears, and pinned; empty disables (config: imagesDir, nanolet only)",
    },
    FlagSpec {
        name: "image-credentials-file",
        shorthand: None,
        kind: Kind::Value,
        value_name: "path",
        default: "<root-dir>/config.json",
        help: "docker config.json with registry credentials for image pulls, after the pod's imagePullSecrets (the kubelet's /var/lib/kubelet/config.json); empty disables (config: imageCredentialsFile, nanolet only)",
    },
    FlagSpec {
        name: "image-snapshotter",
        shorthand: None,
        kind: Kind::Value,
        value_name: "name",
        default: "overlayfs",
        help: "containerd snapshotter imported images are unpacked into; must match the CRI plugin's (config: imageSnapshotter, nanolet only)",
    },
    FlagSpec {
        name: "kubeconfig",
        shorthand: None,
        kind: Kind::Value,
        value_name: "file",
        default: "",
        help: "Join a cluster (API-server mode): kubeconfig with the API server, CA and credentials; empty = standalone",
    },
    FlagSpec {
        name: "max-pods",
        shorthand: None,
        kind: Kind::Value,
        value_name: "int",
        default: "110",
        help: "Maximum number of pods nanolet runs (config: maxPods)",
    },
    FlagSpec {
        name: "minimum-image-ttl-duration",
        shorthand: None,
        kind: Kind::Value,
        value_name: "duration",
        default: "2m0s",
        help: "Minimum age of an unused image before image GC may remove it (config: imageMinimumGCAge)",
    },
    FlagSpec {
        name: "pod-logs-dir",
        shorthand: None,
        kind: Kind::Value,
        value_name: "path",
        default: "/var/log/pods",
        help: "Directory for container log files (config: podLogsDir)",
    },
    FlagSpec {
        name: "node-ip",
        shorthand: None,
        kind: Kind::Value,
        value_name: "ips",
        default: "",
        help: "The node's IP address, or an IPv4 and an IPv6 one comma-separated (primary first): hostNetwork pods' IPs, status.hostIP(s), the Node's InternalIP addresses; empty detects the default route's interface address",
    },
    FlagSpec {
        name: "node-labels",
        shorthand: None,
        kind: Kind::Value,
        value_name: "mapStringString",
        default: "",
        help: "Labels added to the registered Node, e.g. node-role.kubernetes.io/edge=,site=a (API-server mode)",
    },
    FlagSpec {
        name: "register-with-taints",
        shorthand: None,
        kind: Kind::Value,
        value_name: "taints",
        default: "",
        help: "Taints of the registered Node, <key>=<value>:<effect> or <key>:<effect>, comma separated; effect NoSchedule, PreferNoSchedule or NoExecute (API-server mode; config: registerWithTaints)",
    },
    FlagSpec {
        name: "node-status-update-frequency",
        shorthand: None,
        kind: Kind::Value,
        value_name: "duration",
        default: "10s",
        help: "How often the Node status is posted in API-server mode (config: nodeStatusUpdateFrequency)",
    },
    FlagSpec {
        name: "pod-manifest-path",
        shorthand: None,
        kind: Kind::Value,
        value_name: "path",
        default: "/etc/kubernetes/manifests",
        help: "Directory of static pod manifest files; empty disables the file source (config: staticPodPath)",
    },
    FlagSpec {
        name: "read-only-port",
        shorthand: None,
        kind: Kind::Value,
        value_name: "port",
        default: "10255",
        help: "Port of the read-only API (/pods, /healthz, /metrics, /configz, the kubectl-compatible /api), 0 disables it (config: readOnlyPort)",
    },
    FlagSpec {
        name: "read-only-token-file",
        shorthand: None,
        kind: Kind::Value,
        value_name: "file",
        default: "",
        help: "File holding a bearer token every read-only request must present (Authorization: Bearer <token>); required when --address is not loopback (config: readOnlyTokenFile, nanolet only)",
    },
    FlagSpec {
        name: "resolv-conf",
        shorthand: None,
        kind: Kind::Value,
        value_name: "path",
        default: "/etc/resolv.conf",
        help: "The node's resolv.conf that pods with dnsPolicy Default/ClusterFirst get; if its only nameserver is systemd-resolved's stub 127.0.0.53, /run/systemd/resolve/resolv.conf is used instead; empty means no host DNS (config: resolvConf)",
    },
    FlagSpec {
        name: "root-dir",
        shorthand: None,
        kind: Kind::Value,
        value_name: "path",
        default: "/var/lib/nanolet",
        help: "Directory for nanolet's own state",
    },
    FlagSpec {
        name: "runtime-request-timeout",
        shorthand: None,
        kind: Kind::Value,
        value_name: "duration",
        default: "2m0s",
        help: "Timeout of every CRI request except long-running ones (config: runtimeRequestTimeout)",
    },
    FlagSpec {
        name: "secret-dir",
        shorthand: None,
        kind: Kind::Value,
        value_name: "path",
        default: "/etc/nanolet/secrets",
        help: "Directory of Secret manifests static pods may reference; secret volumes live on tmpfs (nanolet extension)",
    },
    FlagSpec {
        name: "sync-frequency",
        shorthand: None,
        kind: Kind::Value,
        value_name: "duration",
        default: "1m0s",
        help: "Maximum period between resyncs of running pods (config: syncFrequency)",
    },
    FlagSpec {
        name: "system-reserved",
        shorthand: None,
        kind: Kind::Value,
        value_name: "mapStringString",
        default: "",
        help: "Resources reserved for the operating system, e.g. cpu=100m,memory=200Mi (config: systemReserved)",
    },
    FlagSpec {
        name: "v",
        shorthand: Some('v'),
        kind: Kind::Value,
        value_name: "int",
        default: "0",
        help: "Log verbosity 0-10: 0-2 info, 3-4 debug, 5+ trace",
    },
];

/// One flag of `nanolet run`, read-only, for documentation generated from the flag table
/// (`nanolet man`, `nanolet completion`: src/cmd/docgen.rs).
#[derive(Debug, Clone, Copy)]
pub struct FlagDoc {
    pub name: &'static str,
    pub shorthand: Option<char>,
    /// Takes a value (`--name value` / `--name=value`); false for booleans.
    pub takes_value: bool,
    /// Placeholder for the value, as `--help` shows it.
    pub value_name: &'static str,
    /// Empty when `--help` shows no default.
    pub default: &'static str,
    pub help: &'static str,
}

/// Every flag of `nanolet run`, in `--help` order.
pub fn flag_docs() -> impl Iterator<Item = FlagDoc> {
    FLAGS.iter().map(|f| FlagDoc {
        name: f.name,
        shorthand: f.shorthand,
        takes_value: f.kind != Kind::Bool,
        value_name: f.value_name,
        default: f.default,
        help: f.help,
    })
}

fn find_flag(name: &str) -> Option<&'static FlagSpec> {
    FLAGS.iter().find(|f| f.name == name)
}

fn find_shorthand(c: char) -> Option<&'static FlagSpec> {
    FLAGS.iter().find(|f| f.shorthand == Some(c))
}

/// The text printed by `nanolet run --help`.
pub fn help_text() -> String {
    let mut out = String::from(
        "Usage: nanolet run [flags]\n\n\
         Runs the static pods in --pod-manifest-path and --manifest-url on containerd (CRI),\n\
         with the kubelet's semantics.\n\
         Precedence: built-in defaults < --config file < flags.\n\n\
         Flags:\n",
    );
    let left: Vec<String> = FLAGS
        .iter()
        .map(|f| {
            let short = match f.shorthand {
                Some(c) => format!("-{c}, "),
                None => "    ".into(),
            };
            let value = if f.value_name.is_empty() {
                String::new()
            } else {
                format!(" {}", f.value_name)
            };
            format!("  {short}--{}{value}", f.name)
        })
        .collect();
    let width = left.iter().map(|s| s.chars().count()).max().unwrap_or(0);
    for (f, l) in FLAGS.iter().zip(left) {
        let default = if f.default.is_empty() {
            String::new()
        } else {
            format!(" (default {})", f.default)
        };
        out.push_str(&format!("{l:width$}   {}{default}\n", f.help));
    }
    out
}

/// Go's `strconv.ParseBool`.
fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// Splits the arguments into (flag, value) occurrences, in order.
fn lex(args: &[String]) -> Result<Vec<(&'static FlagSpec, String)>, ConfigError> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            if let Some(extra) = args.get(i) {
                return Err(ConfigError::UnexpectedArgument(extra.clone()));
            }
            break;
        }
        let (spec, inline, shown) = if let Some(body) = arg.strip_prefix("--") {
            let (name, inline) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (body, None),
            };
            let spec =
                find_flag(name).ok_or_else(|| ConfigError::UnknownFlag(format!("--{name}")))?;
            (spec, inline, format!("--{name}"))
        } else if let Some(body) = arg.strip_prefix('-').filter(|b| !b.is_empty()) {
            let mut chars = body.chars();
            let c = chars.next().unwrap_or('-');
            let spec =
                find_shorthand(c).ok_or_else(|| ConfigError::UnknownFlag(format!("-{c}")))?;
            let rest = chars.as_str();
            let inline = if rest.is_empty() {
                None
            } else if let Some(v) = rest.strip_prefix('=') {
                Some(v.to_string())
            } else if spec.kind == Kind::Bool {
                // pflag would read `-hx` as `-h -x`; nanolet has no other boolean shorthand.
                return Err(ConfigError::UnknownFlag(format!(
                    "-{}",
                    rest.chars().next().unwrap_or('-')
                )));
            } else {
                Some(rest.to_string()) // `-v3`
            };
            (spec, inline, format!("-{c}"))
        } else {
            return Err(ConfigError::UnexpectedArgument(arg.clone()));
        };
        let value = match (spec.kind, inline) {
            (Kind::Bool, None) => "true".to_string(),
            (Kind::Bool, Some(v)) => match parse_bool(&v) {
                Some(b) => b.to_string(),
                None => {
                    return Err(ConfigError::InvalidFlag {
                        flag: shown,
                        reason: format!("invalid boolean {v:?}: use true or false"),
                    });
                }
            },
            (_, Some(v)) => v,
            (_, None) => match args.get(i) {
                // Like pflag, the next argument is the value even if it starts with '-'.
                Some(v) => {
                    i += 1;
                    v.clone()
                }
                None => return Err(ConfigError::MissingValue(shown)),
            },
        };
        out.push((spec, value));
    }
    Ok(out)
}

/// Parses the arguments that follow `nanolet run` (without the program name and without `run`),
/// loads `--config` if given, and validates the result.
pub fn parse_run_args(args: &[String]) -> Result<ParseOutcome, ConfigError> {
    parse_run_args_with(args, &machine_hostname)
}

fn machine_hostname() -> Result<String, String> {
    let name = nix::unistd::gethostname().map_err(|e| format!("reading the hostname: {e}"))?;
    name.into_string()
        .map_err(|_| "the hostname is not valid UTF-8".to_string())
}

fn parse_run_args_with(
    args: &[String],
    hostname: &dyn Fn() -> Result<String, String>,
) -> Result<ParseOutcome, ConfigError> {
    let flags = lex(args)?;
    if flags.iter().any(|(f, v)| f.name == "help" && v == "true") {
        return Ok(ParseOutcome::Help(help_text()));
    }

    // Placeholder node name until flags are applied; resolved last.
    let mut cfg = Config::defaults(String::new());

    if let Some((_, path)) = flags.iter().rev().find(|(f, _)| f.name == "config") {
        if !path.is_empty() {
            let path = PathBuf::from(path);
            let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::ReadFile {
                path: path.clone(),
                source,
            })?;
            // Warnings are kept in `cfg.warnings`: tracing is not set up yet at this point.
            apply_file(&mut cfg, &path, &text)?;
        }
    }

    let mut pending = PendingFlags::default();
    for (spec, value) in &flags {
        apply_flag(&mut cfg, &mut pending, spec.name, value)?;
    }
    pending.finish(cfg, hostname)
}

/// Flag values that take effect only after every flag is read: the node name, and the
/// settings a flag replaces whole instead of merging into the file's.
#[derive(Default)]
struct PendingFlags {
    hostname_override: String,
    system_reserved: Option<BTreeMap<String, String>>,
    kube_reserved: Option<BTreeMap<String, String>>,
    header_flags: Option<Vec<(String, String)>>,
}

impl PendingFlags {
    /// Applies the pending values, resolves the node name and checks the whole configuration.
    fn finish(
        self,
        mut cfg: Config,
        hostname: &dyn Fn() -> Result<String, String>,
    ) -> Result<ParseOutcome, ConfigError> {
        if let Some(headers) = self.header_flags {
            cfg.manifest_url_headers = headers;
        }
        if let Some(r) = self.system_reserved {
            cfg.eviction.system_reserved = r;
        }
        if let Some(r) = self.kube_reserved {
            cfg.eviction.kube_reserved = r;
        }
        finish_eviction(&mut cfg)?;

        let raw_name = if self.hostname_override.trim().is_empty() {
            hostname().map_err(ConfigError::NodeName)?
        } else {
            self.hostname_override
        };
        cfg.node_name = normalize_node_name(&raw_name)?;
        if cfg.read_only_port != 0
            && !cfg.address.is_loopback()
            && cfg.read_only_token_file.is_none()
        {
            return Err(ConfigError::ReadOnlyNeedsToken(cfg.address));
        }
        check_manifest_url_tls(&cfg)?;
        Ok(ParseOutcome::Run(cfg))
    }
}

/// Applies one occurrence of a flag onto `cfg` (or `pending`), by area.
fn apply_flag(
    cfg: &mut Config,
    pending: &mut PendingFlags,
    name: &str,
    value: &str,
) -> Result<(), ConfigError> {
    let flag = format!("--{name}");
    let known = apply_source_flag(cfg, pending, name, &flag, value)?
        || apply_runtime_flag(cfg, name, &flag, value)?
        || apply_node_flag(cfg, pending, name, &flag, value)?
        || apply_eviction_flag(cfg, pending, name, &flag, value)?;
    if known {
        Ok(())
    } else {
        Err(ConfigError::UnknownFlag(flag))
    }
}

/// Applies one pod-source flag (static pod path and URL, their checks); `Ok(false)` when `name` is not one.
fn apply_source_flag(
    cfg: &mut Config,
    pending: &mut PendingFlags,
    name: &str,
    flag: &str,
    value: &str,
) -> Result<bool, ConfigError> {
    let err = |reason: String| ConfigError::InvalidFlag {
        flag: flag.to_string(),
        reason,
    };
    match name {
        "config" | "help" => {}
        "pod-manifest-path" => cfg.pod_manifest_path = PathBuf::from(value),
        "manifest-url" => cfg.manifest_url = parse_manifest_url(value).map_err(err)?,
        "manifest-url-header" => {
            // Like the kubelet, the flag replaces the file's headers instead of merging.
            let list = pending.header_flags.get_or_insert_with(Vec::new);
            list.extend(parse_header_list(value).map_err(err)?);
        }
        "file-check-frequency" => cfg.file_check_frequency = parse_frequency(value).map_err(err)?,
        "http-check-frequency" => cfg.http_check_frequency = parse_frequency(value).map_err(err)?,
        "manifest-url-ca-file" => cfg.manifest_url_ca_file = optional_path(value),
        "manifest-url-client-cert" => cfg.manifest_url_client_cert = optional_path(value),
        "manifest-url-client-key" => cfg.manifest_url_client_key = optional_path(value),
        "allow-insecure-manifest-dir" => cfg.allow_insecure_manifest_dir = value == "true",
        _ => return Ok(false),
    }
    Ok(true)
}

/// Applies one runtime, directory, security or container-log flag; `Ok(false)` when `name` is not one.
fn apply_runtime_flag(
    cfg: &mut Config,
    name: &str,
    flag: &str,
    value: &str,
) -> Result<bool, ConfigError> {
    let err = |reason: String| ConfigError::InvalidFlag {
        flag: flag.to_string(),
        reason,
    };
    match name {
        "sync-frequency" => cfg.sync_frequency = parse_frequency(value).map_err(err)?,
        "container-runtime-endpoint" => {
            cfg.runtime_endpoint = parse_endpoint(value).map_err(err)?
        }
        "runtime-request-timeout" => {
            cfg.runtime_request_timeout = parse_frequency(value).map_err(err)?
        }
        "root-dir" => cfg.root_dir = parse_nonempty_path(value).map_err(err)?,
        "pod-logs-dir" => cfg.pod_logs_dir = parse_nonempty_path(value).map_err(err)?,
        "config-map-dir" => cfg.config_map_dir = parse_nonempty_path(value).map_err(err)?,
        "secret-dir" => cfg.secret_dir = parse_nonempty_path(value).map_err(err)?,
        "images-dir" => cfg.images_dir = Some(PathBuf::from(value)),
        "allow-privileged" => cfg.security.allow_privileged = value == "true",
        "deny-host-namespaces" => cfg.security.deny_host_namespaces = value == "true",
        "allowed-host-paths" => {
            cfg.security.allowed_host_paths =
                parse_host_path_prefixes(value.split(',').map(str::trim).filter(|p| !p.is_empty()))
                    .map_err(err)?
        }
        "image-credentials-file" => cfg.image_credentials_file = Some(PathBuf::from(value)),
        "resolv-conf" => cfg.resolv_conf = optional_path(value),
        "image-snapshotter" => cfg.image_snapshotter = parse_snapshotter(value).map_err(err)?,
        "max-pods" => cfg.max_pods = parse_max_pods(value).map_err(err)?,
        "container-log-max-size" => {
            cfg.container_log_max_size = parse_log_size(value).map_err(err)?
        }
        "container-log-max-files" => {
            cfg.container_log_max_files = parse_log_files(value).map_err(err)?
        }
        "cgroup-driver" => {
            cfg.cgroup_driver = crate::cm::CgroupDriver::parse(value).map_err(err)?
        }
        "container-log-monitor-interval" => {
            cfg.container_log_monitor_interval = parse_frequency(value).map_err(err)?
        }
        "v" => cfg.verbosity = parse_verbosity(value).map_err(err)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// Applies one node, serving or API-server flag; `Ok(false)` when `name` is not one.
fn apply_node_flag(
    cfg: &mut Config,
    pending: &mut PendingFlags,
    name: &str,
    flag: &str,
    value: &str,
) -> Result<bool, ConfigError> {
    let err = |reason: String| ConfigError::InvalidFlag {
        flag: flag.to_string(),
        reason,
    };
    match name {
        "hostname-override" => pending.hostname_override = value.to_string(),
        "node-ip" => cfg.node_ips = parse_node_ips(value).map_err(err)?,
        "address" => cfg.address = parse_ip(value).map_err(err)?,
        "read-only-port" => cfg.read_only_port = parse_port(value).map_err(err)?,
        "read-only-token-file" => {
            cfg.read_only_token_file = if value.is_empty() {
                None
            } else {
                Some(PathBuf::from(value))
            }
        }
        "healthz-bind-address" => cfg.healthz_bind_address = parse_ip(value).map_err(err)?,
        "healthz-port" => cfg.healthz_port = parse_port(value).map_err(err)?,
        "kubeconfig" => cfg.kubeconfig = (!value.is_empty()).then(|| PathBuf::from(value)),
        "node-labels" => {
            cfg.node_labels = threshold::parse_pairs(flag, value)
                .map_err(|e| err(e.to_string()))?
                .into_iter()
                .collect()
        }
        "node-status-update-frequency" => {
            cfg.node_status_update_frequency = parse_frequency(value).map_err(err)?
        }
        "register-with-taints" => cfg.register_with_taints = parse_taints(value).map_err(err)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// Applies one eviction or image-GC flag; `Ok(false)` when `name` is not one.
fn apply_eviction_flag(
    cfg: &mut Config,
    pending: &mut PendingFlags,
    name: &str,
    flag: &str,
    value: &str,
) -> Result<bool, ConfigError> {
    let err = |reason: String| ConfigError::InvalidFlag {
        flag: flag.to_string(),
        reason,
    };
    match name {
        "eviction-hard" => {
            cfg.eviction.raw.hard =
                threshold::parse_statements(flag, value).map_err(|e| err(e.to_string()))?
        }
        "eviction-soft" => {
            cfg.eviction.raw.soft =
                threshold::parse_statements(flag, value).map_err(|e| err(e.to_string()))?
        }
        "eviction-soft-grace-period" => {
            cfg.eviction.raw.soft_grace =
                threshold::parse_pairs(flag, value).map_err(|e| err(e.to_string()))?
        }
        "eviction-minimum-reclaim" => {
            cfg.eviction.raw.min_reclaim =
                threshold::parse_pairs(flag, value).map_err(|e| err(e.to_string()))?
        }
        "eviction-max-pod-grace-period" => {
            cfg.eviction.max_pod_grace_period = value
                .trim()
                .parse()
                .map_err(|_| err(format!("invalid integer {value:?}")))?
        }
        "eviction-pressure-transition-period" => {
            cfg.eviction.pressure_transition_period = parse_go_duration(value)
                .map_err(|e| err(format!("invalid duration {value:?}: {e}")))?
        }
        "eviction-monitoring-period" => {
            cfg.eviction.monitoring_period = parse_frequency(value).map_err(err)?
        }
        "image-gc-high-threshold" => {
            cfg.eviction.image_gc.high_percent = parse_percent(value).map_err(err)?
        }
        "image-gc-low-threshold" => {
            cfg.eviction.image_gc.low_percent = parse_percent(value).map_err(err)?
        }
        "minimum-image-ttl-duration" => {
            cfg.eviction.image_gc.min_age = parse_go_duration(value)
                .map_err(|e| err(format!("invalid duration {value:?}: {e}")))?
        }
        "system-reserved" => {
            pending.system_reserved =
                Some(threshold::parse_pairs(flag, value).map_err(|e| err(e.to_string()))?)
        }
        "kube-reserved" => {
            pending.kube_reserved =
                Some(threshold::parse_pairs(flag, value).map_err(|e| err(e.to_string()))?)
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// An empty value unsets a path.
fn optional_path(value: &str) -> Option<PathBuf> {
    (!value.is_empty()).then(|| PathBuf::from(value))
}

/// `--allowed-host-paths` / `allowedHostPaths`: absolute, without `..`.
fn parse_host_path_prefixes<'a>(
    items: impl Iterator<Item = &'a str>,
) -> Result<Vec<PathBuf>, String> {
    items
        .map(|p| {
            let path = PathBuf::from(p);
            if !path.is_absolute()
                || path
                    .components()
                    .any(|c| c == std::path::Component::ParentDir)
            {
                Err(format!(
                    "{p:?} is not an absolute path without '..' components"
                ))
            } else {
                Ok(path)
            }
        })
        .collect()
}

/// The manifest URL's TLS settings fit together: a client key with its certificate, and only
/// with an https:// URL in a build with TLS.
fn check_manifest_url_tls(cfg: &Config) -> Result<(), ConfigError> {
    let flag = |name: &str, reason: String| ConfigError::InvalidFlag {
        flag: format!("--{name}"),
        reason,
    };
    match (&cfg.manifest_url_client_cert, &cfg.manifest_url_client_key) {
        (Some(_), None) => {
            return Err(flag(
                "manifest-url-client-cert",
                "needs --manifest-url-client-key (config: staticPodURLClientKeyFile)".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(flag(
                "manifest-url-client-key",
                "needs --manifest-url-client-cert (config: staticPodURLClientCertFile)".into(),
            ));
        }
        _ => {}
    }
    let tls_set = cfg.manifest_url_ca_file.is_some() || cfg.manifest_url_client_cert.is_some();
    let https = cfg
        .manifest_url
        .as_deref()
        .is_some_and(|u| u.to_ascii_lowercase().starts_with("https://"));
    if tls_set && !https {
        return Err(flag(
            "manifest-url-ca-file",
            "the manifest URL TLS settings need an https:// --manifest-url (config: staticPodURL)"
                .into(),
        ));
    }
    Ok(())
}

fn normalize_node_name(raw: &str) -> Result<String, ConfigError> {
    let name = raw.trim().to_lowercase();
    if name.is_empty() {
        return Err(ConfigError::NodeName(
            "the hostname is empty; set --hostname-override".into(),
        ));
    }
    if !is_dns_subdomain(&name) {
        return Err(ConfigError::NodeName(format!(
            "{name:?} is not a valid node name (lowercase letters, digits, '-' and '.', \
             starting and ending with a letter or digit, at most 253 characters); \
             set --hostname-override"
        )));
    }
    Ok(name)
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

/// Validates the eviction settings as a whole and derives the thresholds and reservations.
fn finish_eviction(cfg: &mut Config) -> Result<(), ConfigError> {
    let ev = &mut cfg.eviction;
    ev.thresholds = threshold::build(&ev.raw).map_err(|e| ConfigError::Eviction(e.to_string()))?;
    let (high, low) = (ev.image_gc.high_percent, ev.image_gc.low_percent);
    if low >= high {
        return Err(ConfigError::Eviction(format!(
            "imageGCLowThresholdPercent ({low}) must be less than imageGCHighThresholdPercent ({high})"
        )));
    }
    if ev.max_pod_grace_period < 0 {
        return Err(ConfigError::Eviction(format!(
            "evictionMaxPodGracePeriod: must not be negative, got {}",
            ev.max_pod_grace_period
        )));
    }
    let (mut cpu, mut mem) = (0i64, 0i64);
    for (field, map) in [
        ("systemReserved", &ev.system_reserved),
        ("kubeReserved", &ev.kube_reserved),
    ] {
        for (k, v) in map {
            let bad = |reason: String| ConfigError::Eviction(format!("{field}: {k}: {reason}"));
            let q = crate::api::quantity::parse_quantity_str(v)
                .map_err(|e| bad(format!("invalid quantity {v:?}: {e}")))?;
            if q.is_negative() {
                return Err(bad(format!("must not be negative, got {v:?}")));
            }
            match k.as_str() {
                "cpu" => cpu += q.milli_value(),
                "memory" => mem += q.value(),
                "ephemeral-storage" | "pid" => {}
                _ => {
                    return Err(bad(
                        "unknown resource (cpu, memory, ephemeral-storage or pid)".into(),
                    ));
                }
            }
        }
    }
    ev.reserved_cpu_millis = cpu;
    ev.reserved_memory = mem;
    Ok(())
}

fn parse_percent(s: &str) -> Result<u8, String> {
    match s.trim().parse::<i64>() {
        Ok(n) if (0..=100).contains(&n) => Ok(n as u8),
        _ => Err(format!("must be an integer between 0 and 100, got {s:?}")),
    }
}

// ---------------------------------------------------------------------------------------------
// Value parsers shared by flags and the config file. They return the reason only; the caller
// adds the flag name or the file and field.

/// A Node taint (`--register-with-taints`, `registerWithTaints`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Taint {
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    pub effect: String,
}

impl Taint {
    /// Validates key (a qualified name), value (a label value) and effect, as the kubelet's
    /// `ParseTaints` / the API's taint validation.
    pub fn validate(&self) -> Result<(), String> {
        let spec = if self.value.is_empty() {
            format!("{}:{}", self.key, self.effect)
        } else {
            format!("{}={}:{}", self.key, self.value, self.effect)
        };
        if self.key.is_empty() {
            return Err(format!("invalid taint spec {spec:?}: the key is empty"));
        }
        if let Some(e) = crate::api::validate::qualified_name_errors(&self.key).first() {
            return Err(format!("invalid taint spec {spec:?}: key: {e}"));
        }
        if let Some(e) = crate::api::validate::label_value_errors(&self.value).first() {
            return Err(format!("invalid taint spec {spec:?}: value: {e}"));
        }
        if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&self.effect.as_str()) {
            return Err(format!(
                "invalid taint spec {spec:?}: invalid taint effect {:?}, unsupported taint effect (NoSchedule, PreferNoSchedule, NoExecute)",
                self.effect
            ));
        }
        Ok(())
    }
}

/// `--register-with-taints`: `<key>=<value>:<effect>` or `<key>:<effect>`, comma separated; a
/// key and effect given twice is an error (the kubelet's `ParseTaints`).
pub fn parse_taints(s: &str) -> Result<Vec<Taint>, String> {
    let mut out: Vec<Taint> = Vec::new();
    for spec in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let Some((kv, effect)) = spec.rsplit_once(':') else {
            return Err(format!(
                "invalid taint spec {spec:?}: expected <key>=<value>:<effect> or <key>:<effect>"
            ));
        };
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        let t = Taint {
            key: key.to_string(),
            value: value.to_string(),
            effect: effect.to_string(),
        };
        t.validate()?;
        check_duplicate_taint(&out, &t)?;
        out.push(t);
    }
    Ok(out)
}

fn check_duplicate_taint(seen: &[Taint], t: &Taint) -> Result<(), String> {
    if seen.iter().any(|o| o.key == t.key && o.effect == t.effect) {
        return Err(format!(
            "duplicated taints with the same key and effect: {}:{}",
            t.key, t.effect
        ));
    }
    Ok(())
}

fn parse_frequency(s: &str) -> Result<Duration, String> {
    let d = parse_go_duration(s).map_err(|e| format!("invalid duration {s:?}: {e}"))?;
    if d.is_zero() {
        return Err(format!("must be greater than zero, got {s:?}"));
    }
    Ok(d)
}

fn parse_ip(s: &str) -> Result<IpAddr, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("invalid IP address {s:?}"))
}

/// `--node-ip` (the kubelet's ParseNodeIPArgument and validateNodeIP): one address, or an IPv4
/// and an IPv6 one; none loopback, link-local, multicast or unspecified. Whether the address
/// is on an interface of this host is not checked (nanolet does not refuse to start over it).
pub fn parse_node_ips(s: &str) -> Result<Vec<IpAddr>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(Vec::new());
    }
    let mut ips = Vec::new();
    for part in s.split(',') {
        let ip = parse_ip(part)?;
        let link_local = match ip {
            IpAddr::V4(v4) => v4.is_link_local(),
            IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
        };
        let bad = if ip.is_loopback() {
            Some("a loopback")
        } else if ip.is_unspecified() {
            Some("an unspecified")
        } else if ip.is_multicast() {
            Some("a multicast")
        } else if link_local {
            Some("a link-local")
        } else {
            None
        };
        if let Some(kind) = bad {
            return Err(format!("{ip} is {kind} address"));
        }
        ips.push(ip);
    }
    match ips.as_slice() {
        [_] => Ok(ips),
        [a, b] if a.is_ipv4() != b.is_ipv4() => Ok(ips),
        [_, _] => Err(format!(
            "{s:?}: two addresses must be one IPv4 and one IPv6 (dual-stack)"
        )),
        _ => Err(format!(
            "{s:?}: at most two addresses, one IPv4 and one IPv6"
        )),
    }
}

fn parse_port(s: &str) -> Result<u16, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("invalid port {s:?}: must be an integer from 0 to 65535"))
}

fn port_from_int(n: i64) -> Result<u16, String> {
    u16::try_from(n).map_err(|_| format!("invalid port {n}: must be from 0 to 65535"))
}

fn parse_log_size(s: &str) -> Result<u64, String> {
    let q = crate::api::quantity::parse_quantity(&serde_json::Value::String(s.to_string()))
        .map_err(|e| e.to_string())?;
    u64::try_from(q.value())
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| format!("invalid size {s:?}: must be positive"))
}

fn parse_log_files(s: &str) -> Result<usize, String> {
    s.parse::<usize>()
        .ok()
        .filter(|n| *n >= 2)
        .ok_or_else(|| format!("invalid value {s:?}: must be an integer >= 2"))
}

fn parse_max_pods(s: &str) -> Result<u32, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("invalid number {s:?}: must be a non-negative integer"))
}

fn max_pods_from_int(n: i64) -> Result<u32, String> {
    u32::try_from(n).map_err(|_| format!("invalid number {n}: must be a non-negative integer"))
}

fn parse_verbosity(s: &str) -> Result<u8, String> {
    let v: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("invalid level {s:?}: must be an integer from 0 to 10"))?;
    Ok(v.min(10) as u8)
}

fn parse_snapshotter(s: &str) -> Result<String, String> {
    if s.is_empty()
        || !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(format!(
            "{s:?} is not a snapshotter name (e.g. overlayfs, native)"
        ));
    }
    Ok(s.to_string())
}

fn parse_nonempty_path(s: &str) -> Result<PathBuf, String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    Ok(PathBuf::from(s))
}

fn parse_endpoint(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    Ok(s.to_string())
}

fn parse_manifest_url(s: &str) -> Result<Option<String>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    let lower = s.to_ascii_lowercase();
    let host = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"));
    match host {
        Some(_) if !cfg!(feature = "tls") && lower.starts_with("https://") => Err(format!(
            "invalid URL {:?}: https:// needs TLS and this nanolet was built without the `tls` \
             feature (use an http:// URL or a build with default features)",
            redact_url(s)
        )),
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => Ok(Some(s.to_string())),
        _ => Err(format!(
            "invalid URL {:?}: must be an http:// or https:// URL with a host",
            redact_url(s)
        )),
    }
}

/// HTTP token characters (RFC 9110) for header names.
fn is_header_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Checks one header; messages never contain the value.
fn check_header(name: &str, value: &str) -> Result<(), String> {
    if !is_header_name(name) {
        return Err(format!("invalid header name {name:?}"));
    }
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(format!(
            "header {name:?}: value contains a line break or NUL"
        ));
    }
    Ok(())
}

/// `--manifest-url-header` value: `Name:Value[,Name:Value...]`, split like the kubelet
/// (on ',' then on the first ':', both sides trimmed, empty items skipped).
fn parse_header_list(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (i, item) in s.split(',').enumerate() {
        if item.is_empty() {
            continue;
        }
        let Some((name, value)) = item.split_once(':') else {
            // Do not echo the item: it may be a secret with a missing name.
            return Err(format!(
                "malformed header #{} (expected Name:Value; value not shown)",
                i + 1
            ));
        };
        let (name, value) = (name.trim(), value.trim());
        check_header(name, value)?;
        out.push((name.to_string(), value.to_string()));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Config file

/// The KubeletConfiguration fields nanolet reads. `staticPodURLHeader` is read by hand so that
/// type errors never echo a header value.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FileConfig {
    static_pod_path: Option<String>,
    #[serde(rename = "staticPodURL")]
    static_pod_url: Option<String>,
    file_check_frequency: Option<String>,
    http_check_frequency: Option<String>,
    sync_frequency: Option<String>,
    address: Option<String>,
    read_only_port: Option<i64>,
    read_only_token_file: Option<String>,
    resolv_conf: Option<String>,
    #[serde(rename = "staticPodURLCAFile")]
    static_pod_url_ca_file: Option<String>,
    #[serde(rename = "staticPodURLClientCertFile")]
    static_pod_url_client_cert_file: Option<String>,
    #[serde(rename = "staticPodURLClientKeyFile")]
    static_pod_url_client_key_file: Option<String>,
    allow_insecure_manifest_dir: Option<bool>,
    allow_privileged: Option<bool>,
    allowed_host_paths: Option<Vec<String>>,
    deny_host_namespaces: Option<bool>,
    images_dir: Option<String>,
    image_credentials_file: Option<String>,
    image_snapshotter: Option<String>,
    healthz_bind_address: Option<String>,
    healthz_port: Option<i64>,
    max_pods: Option<i64>,
    container_log_max_size: Option<String>,
    container_log_max_files: Option<i64>,
    pod_logs_dir: Option<String>,
    container_runtime_endpoint: Option<String>,
    runtime_request_timeout: Option<String>,
    container_log_monitor_interval: Option<String>,
    cgroup_driver: Option<String>,
    node_status_update_frequency: Option<String>,
    register_with_taints: Option<Vec<Taint>>,
    eviction_hard: Option<BTreeMap<String, serde_json::Value>>,
    eviction_soft: Option<BTreeMap<String, serde_json::Value>>,
    eviction_soft_grace_period: Option<BTreeMap<String, serde_json::Value>>,
    eviction_minimum_reclaim: Option<BTreeMap<String, serde_json::Value>>,
    eviction_max_pod_grace_period: Option<i64>,
    eviction_pressure_transition_period: Option<String>,
    eviction_monitoring_period: Option<String>,
    system_reserved: Option<BTreeMap<String, serde_json::Value>>,
    kube_reserved: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(rename = "imageGCHighThresholdPercent")]
    image_gc_high_threshold_percent: Option<i64>,
    #[serde(rename = "imageGCLowThresholdPercent")]
    image_gc_low_threshold_percent: Option<i64>,
    #[serde(rename = "imageMinimumGCAge")]
    image_minimum_gc_age: Option<String>,
    logging: Option<FileLogging>,
}

/// KubeletConfiguration `logging` (component-base LoggingConfiguration): only `verbosity`;
/// the others (format, flushFrequency, options) are warned about as ignored.
#[derive(Debug, Default, Deserialize)]
struct FileLogging {
    verbosity: Option<i64>,
}

const FILE_FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "staticPodPath",
    "staticPodURL",
    "staticPodURLHeader",
    "fileCheckFrequency",
    "httpCheckFrequency",
    "syncFrequency",
    "address",
    "readOnlyPort",
    "readOnlyTokenFile",
    "resolvConf",
    "staticPodURLCAFile",
    "staticPodURLClientCertFile",
    "staticPodURLClientKeyFile",
    "allowInsecureManifestDir",
    "allowPrivileged",
    "allowedHostPaths",
    "denyHostNamespaces",
    "imagesDir",
    "imageCredentialsFile",
    "imageSnapshotter",
    "healthzBindAddress",
    "healthzPort",
    "maxPods",
    "containerLogMaxSize",
    "containerLogMaxFiles",
    "podLogsDir",
    "containerRuntimeEndpoint",
    "runtimeRequestTimeout",
    "containerLogMonitorInterval",
    "cgroupDriver",
    "nodeStatusUpdateFrequency",
    "registerWithTaints",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionMinimumReclaim",
    "evictionMaxPodGracePeriod",
    "evictionPressureTransitionPeriod",
    "evictionMonitoringPeriod",
    "systemReserved",
    "kubeReserved",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "imageMinimumGCAge",
    "logging",
];

/// A map of strings from the file; numbers and booleans are taken as their text.
fn string_map(
    field: &str,
    m: &BTreeMap<String, serde_json::Value>,
) -> Result<BTreeMap<String, String>, (String, String)> {
    m.iter()
        .map(|(k, v)| {
            let text = match v {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                other => {
                    return Err((
                        format!("{field}.{k}"),
                        format!("expected a string, found {}", yaml_kind(other)),
                    ));
                }
            };
            Ok((k.clone(), text))
        })
        .collect()
}

/// Parses the file text as the kubelet does (JSON when it starts with `{`, else the first YAML
/// document with YAML 1.1 rules: `crate::yaml`) into a JSON value. Further YAML documents are
/// ignored, as by the kubelet, with a warning.
fn parse_document(path: &Path, text: &str) -> Result<(serde_json::Value, usize), ConfigError> {
    let d = crate::yaml::to_json(text).map_err(|e| ConfigError::InvalidFile {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok((d.value, d.more_documents))
}

/// Loads the config file text onto `cfg` (fields present in the file replace the defaults).
/// The defaults with a config file's text applied and checked, as `--config` does (the fuzz
/// target `config` drives it).
pub fn parse_config_text(path: &Path, text: &str) -> Result<Config, ConfigError> {
    let mut cfg = Config::defaults("node1".into());
    apply_file(&mut cfg, path, text)?;
    finish_eviction(&mut cfg)?;
    Ok(cfg)
}

fn apply_file(cfg: &mut Config, path: &Path, text: &str) -> Result<(), ConfigError> {
    let (fc, doc) = read_file_config(cfg, path, text)?;
    // Relative paths in the file are relative to the file's directory, as in the kubelet.
    let f = FileFields {
        path,
        base: path.parent().unwrap_or_else(|| Path::new("")),
    };
    f.apply_sources_and_serving(cfg, &fc, &doc)?;
    f.apply_node(cfg, &fc)?;
    f.apply_eviction(cfg, &fc)
}

/// Parses and checks the config file (apiVersion, kind), warns of fields nanolet ignores, and
/// returns it typed and as the parsed document.
fn read_file_config(
    cfg: &mut Config,
    path: &Path,
    text: &str,
) -> Result<(FileConfig, serde_json::Value), ConfigError> {
    let field_err = |field: &str, reason: String| ConfigError::InvalidField {
        path: path.to_path_buf(),
        field: field.to_string(),
        reason,
    };
    let (doc, more_documents) = parse_document(path, text)?;
    if more_documents > 0 {
        cfg.warnings.push(format!(
            "{}: ignoring {more_documents} YAML document(s) after the first (the kubelet reads only the first)",
            path.display()
        ));
    }
    let serde_json::Value::Object(map) = &doc else {
        return Err(ConfigError::InvalidFile {
            path: path.to_path_buf(),
            reason: format!(
                "expected a {CONFIG_KIND} mapping, found {}",
                yaml_kind(&doc)
            ),
        });
    };

    // apiVersion and kind are required, as in the kubelet.
    for (field, want) in [("apiVersion", CONFIG_API_VERSION), ("kind", CONFIG_KIND)] {
        match map.get(field) {
            Some(serde_json::Value::String(s)) if s == want => {}
            Some(serde_json::Value::String(s)) => {
                return Err(field_err(field, format!("expected {want:?}, found {s:?}")));
            }
            Some(other) => {
                return Err(field_err(
                    field,
                    format!("expected the string {want:?}, found {}", yaml_kind(other)),
                ));
            }
            None => return Err(field_err(field, format!("missing; expected {want:?}"))),
        }
    }

    for k in map.keys() {
        if !FILE_FIELDS.contains(&k.as_str()) {
            cfg.warnings.push(format!(
                "{}: ignoring field {k:?}: unknown or not supported by nanolet",
                path.display()
            ));
        }
    }

    if let Some(serde_json::Value::Object(logging)) = map.get("logging") {
        for k in logging.keys().filter(|k| k.as_str() != "verbosity") {
            cfg.warnings.push(format!(
                "{}: ignoring field \"logging.{k}\": unknown or not supported by nanolet",
                path.display()
            ));
        }
    }

    let fc: FileConfig = serde_path_to_error::deserialize(doc.clone()).map_err(|e| {
        let field = e.path().to_string();
        let field = if field == "." { String::new() } else { field };
        field_err(&field, e.inner().to_string())
    })?;
    Ok((fc, doc))
}

/// The config file whose fields are being applied: names it in errors, resolves its paths.
struct FileFields<'a> {
    path: &'a Path,
    base: &'a Path,
}

impl FileFields<'_> {
    /// An invalid `field` of this file.
    fn err(&self, field: &str, reason: String) -> ConfigError {
        ConfigError::InvalidField {
            path: self.path.to_path_buf(),
            field: field.to_string(),
            reason,
        }
    }

    /// A path from the file: relative ones are relative to the file's directory.
    fn resolve(&self, p: &str) -> PathBuf {
        let p = PathBuf::from(p);
        if p.as_os_str().is_empty() || p.is_absolute() {
            p
        } else {
            self.base.join(p)
        }
    }

    /// Applies the pod-source fields, the sync and runtime timings and the serving addresses.
    fn apply_sources_and_serving(
        &self,
        cfg: &mut Config,
        fc: &FileConfig,
        doc: &serde_json::Value,
    ) -> Result<(), ConfigError> {
        if let Some(p) = &fc.static_pod_path {
            cfg.pod_manifest_path = self.resolve(p);
        }
        if let Some(u) = &fc.static_pod_url {
            cfg.manifest_url = parse_manifest_url(u).map_err(|r| self.err("staticPodURL", r))?;
        }
        if let Some(v) = doc.get("staticPodURLHeader") {
            cfg.manifest_url_headers = file_headers(v).map_err(|(f, r)| self.err(&f, r))?;
        }
        let durations = [
            (
                "fileCheckFrequency",
                &fc.file_check_frequency,
                &mut cfg.file_check_frequency,
            ),
            (
                "httpCheckFrequency",
                &fc.http_check_frequency,
                &mut cfg.http_check_frequency,
            ),
            ("syncFrequency", &fc.sync_frequency, &mut cfg.sync_frequency),
            (
                "runtimeRequestTimeout",
                &fc.runtime_request_timeout,
                &mut cfg.runtime_request_timeout,
            ),
        ];
        for (field, value, slot) in durations {
            if let Some(s) = value {
                *slot = parse_frequency(s).map_err(|r| self.err(field, r))?;
            }
        }
        if let Some(s) = &fc.address {
            cfg.address = parse_ip(s).map_err(|r| self.err("address", r))?;
        }
        if let Some(s) = &fc.healthz_bind_address {
            cfg.healthz_bind_address =
                parse_ip(s).map_err(|r| self.err("healthzBindAddress", r))?;
        }
        if let Some(n) = fc.read_only_port {
            cfg.read_only_port = port_from_int(n).map_err(|r| self.err("readOnlyPort", r))?;
        }
        if let Some(p) = &fc.resolv_conf {
            // A KubeletConfiguration path ref: relative to the file's directory.
            cfg.resolv_conf = (!p.is_empty()).then(|| self.resolve(p));
        }
        if let Some(p) = &fc.read_only_token_file {
            cfg.read_only_token_file = (!p.is_empty()).then(|| self.resolve(p));
        }
        for (value, slot) in [
            (&fc.static_pod_url_ca_file, &mut cfg.manifest_url_ca_file),
            (
                &fc.static_pod_url_client_cert_file,
                &mut cfg.manifest_url_client_cert,
            ),
            (
                &fc.static_pod_url_client_key_file,
                &mut cfg.manifest_url_client_key,
            ),
        ] {
            if let Some(p) = value {
                *slot = (!p.is_empty()).then(|| self.resolve(p));
            }
        }
        if let Some(b) = fc.allow_insecure_manifest_dir {
            cfg.allow_insecure_manifest_dir = b;
        }
        Ok(())
    }

    /// Applies the security, image, logging, pod-limit, container-log, runtime and node fields.
    fn apply_node(&self, cfg: &mut Config, fc: &FileConfig) -> Result<(), ConfigError> {
        if let Some(b) = fc.allow_privileged {
            cfg.security.allow_privileged = b;
        }
        if let Some(b) = fc.deny_host_namespaces {
            cfg.security.deny_host_namespaces = b;
        }
        if let Some(list) = &fc.allowed_host_paths {
            cfg.security.allowed_host_paths =
                parse_host_path_prefixes(list.iter().map(String::as_str))
                    .map_err(|r| self.err("allowedHostPaths", r))?;
        }
        if let Some(p) = &fc.images_dir {
            cfg.images_dir = Some(if p.is_empty() {
                PathBuf::new()
            } else {
                self.resolve(p)
            });
        }
        if let Some(p) = &fc.image_credentials_file {
            cfg.image_credentials_file = Some(if p.is_empty() {
                PathBuf::new()
            } else {
                self.resolve(p)
            });
        }
        if let Some(s) = &fc.image_snapshotter {
            cfg.image_snapshotter =
                parse_snapshotter(s).map_err(|r| self.err("imageSnapshotter", r))?;
        }
        if let Some(n) = fc.healthz_port {
            cfg.healthz_port = port_from_int(n).map_err(|r| self.err("healthzPort", r))?;
        }
        if let Some(v) = fc.logging.as_ref().and_then(|l| l.verbosity) {
            // `--v` (a flag) overrides it, as every flag does the file.
            cfg.verbosity = u8::try_from(v.clamp(0, 10)).unwrap_or(10);
            if v < 0 {
                return Err(self.err(
                    "logging.verbosity",
                    format!("{v}: must be an integer from 0 to 10"),
                ));
            }
        }
        if let Some(n) = fc.max_pods {
            cfg.max_pods = max_pods_from_int(n).map_err(|r| self.err("maxPods", r))?;
        }
        if let Some(v) = &fc.container_log_max_size {
            cfg.container_log_max_size =
                parse_log_size(v).map_err(|r| self.err("containerLogMaxSize", r))?;
        }
        if let Some(n) = fc.container_log_max_files {
            cfg.container_log_max_files =
                parse_log_files(&n.to_string()).map_err(|r| self.err("containerLogMaxFiles", r))?;
        }
        if let Some(p) = &fc.pod_logs_dir {
            parse_nonempty_path(p).map_err(|r| self.err("podLogsDir", r))?;
            cfg.pod_logs_dir = self.resolve(p);
        }
        if let Some(s) = &fc.container_runtime_endpoint {
            cfg.runtime_endpoint =
                parse_endpoint(s).map_err(|r| self.err("containerRuntimeEndpoint", r))?;
        }
        if let Some(s) = &fc.node_status_update_frequency {
            cfg.node_status_update_frequency =
                parse_frequency(s).map_err(|r| self.err("nodeStatusUpdateFrequency", r))?;
        }
        if let Some(taints) = &fc.register_with_taints {
            let mut out: Vec<Taint> = Vec::new();
            for (i, t) in taints.iter().enumerate() {
                let field = format!("registerWithTaints[{i}]");
                t.validate().map_err(|r| self.err(&field, r))?;
                check_duplicate_taint(&out, t).map_err(|r| self.err(&field, r))?;
                out.push(t.clone());
            }
            cfg.register_with_taints = out;
        }
        if let Some(s) = &fc.cgroup_driver {
            cfg.cgroup_driver =
                crate::cm::CgroupDriver::parse(s).map_err(|r| self.err("cgroupDriver", r))?;
        }
        if let Some(s) = &fc.container_log_monitor_interval {
            cfg.container_log_monitor_interval =
                parse_frequency(s).map_err(|r| self.err("containerLogMonitorInterval", r))?;
        }
        Ok(())
    }

    /// Applies the eviction and image garbage-collection fields.
    fn apply_eviction(&self, cfg: &mut Config, fc: &FileConfig) -> Result<(), ConfigError> {
        let ev = &mut cfg.eviction;
        for (field, value, slot) in [
            ("evictionHard", &fc.eviction_hard, &mut ev.raw.hard),
            ("evictionSoft", &fc.eviction_soft, &mut ev.raw.soft),
            (
                "evictionSoftGracePeriod",
                &fc.eviction_soft_grace_period,
                &mut ev.raw.soft_grace,
            ),
            (
                "evictionMinimumReclaim",
                &fc.eviction_minimum_reclaim,
                &mut ev.raw.min_reclaim,
            ),
            (
                "systemReserved",
                &fc.system_reserved,
                &mut ev.system_reserved,
            ),
            ("kubeReserved", &fc.kube_reserved, &mut ev.kube_reserved),
        ] {
            if let Some(m) = value {
                *slot = string_map(field, m).map_err(|(f, r)| self.err(&f, r))?;
            }
        }
        if let Some(n) = fc.eviction_max_pod_grace_period {
            ev.max_pod_grace_period = n;
        }
        for (field, value, slot, zero_ok) in [
            (
                "evictionPressureTransitionPeriod",
                &fc.eviction_pressure_transition_period,
                &mut ev.pressure_transition_period,
                true,
            ),
            (
                "evictionMonitoringPeriod",
                &fc.eviction_monitoring_period,
                &mut ev.monitoring_period,
                false,
            ),
            (
                "imageMinimumGCAge",
                &fc.image_minimum_gc_age,
                &mut ev.image_gc.min_age,
                true,
            ),
        ] {
            if let Some(s) = value {
                *slot = if zero_ok {
                    parse_go_duration(s)
                        .map_err(|e| self.err(field, format!("invalid duration {s:?}: {e}")))?
                } else {
                    parse_frequency(s).map_err(|r| self.err(field, r))?
                };
            }
        }
        for (field, value, slot) in [
            (
                "imageGCHighThresholdPercent",
                fc.image_gc_high_threshold_percent,
                &mut ev.image_gc.high_percent,
            ),
            (
                "imageGCLowThresholdPercent",
                fc.image_gc_low_threshold_percent,
                &mut ev.image_gc.low_percent,
            ),
        ] {
            if let Some(n) = value {
                *slot = parse_percent(&n.to_string()).map_err(|r| self.err(field, r))?;
            }
        }
        Ok(())
    }
}

/// `staticPodURLHeader: {Name: [value, ...]}`. Errors name the field path but never a value.
fn file_headers(v: &serde_json::Value) -> Result<Vec<(String, String)>, (String, String)> {
    const FIELD: &str = "staticPodURLHeader";
    let map = match v {
        serde_json::Value::Null => return Ok(Vec::new()),
        serde_json::Value::Object(m) => m,
        other => {
            return Err((
                FIELD.into(),
                format!(
                    "expected a map of header name to list of values, found {}",
                    yaml_kind(other)
                ),
            ));
        }
    };
    // Sorted by name for a deterministic order (the kubelet's map has none).
    let sorted: BTreeMap<&String, &serde_json::Value> = map.iter().collect();
    let mut out = Vec::new();
    for (name, vals) in sorted {
        let field = format!("{FIELD}.{name}");
        let serde_json::Value::Array(list) = vals else {
            return Err((
                field,
                format!(
                    "expected a list of strings, found {} (value not shown)",
                    yaml_kind(vals)
                ),
            ));
        };
        for (i, item) in list.iter().enumerate() {
            let Some(value) = item.as_str() else {
                return Err((
                    format!("{field}[{i}]"),
                    format!(
                        "expected a string, found {} (value not shown)",
                        yaml_kind(item)
                    ),
                ));
            };
            check_header(name, value).map_err(|r| (field.clone(), r))?;
            out.push((name.clone(), value.to_string()));
        }
    }
    Ok(out)
}

fn yaml_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "a map",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn host() -> Result<String, String> {
        Ok("Edge-Box-01".into())
    }

    fn parse(a: &[&str]) -> Result<Config, ConfigError> {
        match parse_run_args_with(&args(a), &host)? {
            ParseOutcome::Run(c) => Ok(c),
            ParseOutcome::Help(_) => panic!("unexpected help"),
        }
    }

    fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    }

    const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    #[test]
    fn defaults() {
        let c = parse(&[]).unwrap();
        let mut want = Config::defaults("edge-box-01".into());
        want.warnings.clear();
        assert_eq!(c, want);
        assert_eq!(
            c.pod_manifest_path,
            PathBuf::from("/etc/kubernetes/manifests")
        );
        assert_eq!(c.sync_frequency, Duration::from_secs(60));
        assert_eq!(c.runtime_request_timeout, Duration::from_secs(120));
        assert_eq!(c.address.to_string(), "127.0.0.1");
        assert_eq!(
            (c.read_only_port, c.healthz_port, c.max_pods),
            (10255, 10248, 110)
        );
        assert_eq!(c.runtime_endpoint, "unix:///run/containerd/containerd.sock");
        assert_eq!(c.manifest_url, None);
        assert_eq!(c.log_level(), tracing::Level::INFO);
    }

    #[test]
    fn flag_syntaxes() {
        let c = parse(&[
            "--sync-frequency=30s",
            "--file-check-frequency",
            "5s",
            "-v",
            "4",
            "--read-only-port=0",
            "--address",
            "0.0.0.0",
            "--hostname-override=Node-A",
            "--max-pods=5",
            "--help=false",
            "--pod-manifest-path=",
        ])
        .unwrap();
        assert_eq!(c.sync_frequency, Duration::from_secs(30));
        assert_eq!(c.file_check_frequency, Duration::from_secs(5));
        assert_eq!(c.verbosity, 4);
        assert_eq!(c.log_level(), tracing::Level::DEBUG);
        assert_eq!(c.read_only_port, 0);
        assert_eq!(c.address.to_string(), "0.0.0.0");
        assert_eq!(c.node_name, "node-a");
        assert_eq!(c.max_pods, 5);
        assert_eq!(c.pod_manifest_path, PathBuf::new());
        assert_eq!(parse(&["-v=7"]).unwrap().verbosity, 7);
        assert_eq!(parse(&["-v3"]).unwrap().verbosity, 3);
        assert_eq!(parse(&["--v=99"]).unwrap().verbosity, 10);
        assert_eq!(
            parse(&["--v=6"]).unwrap().log_level(),
            tracing::Level::TRACE
        );
        // Last occurrence of a single-valued flag wins.
        assert_eq!(
            parse(&["--max-pods=1", "--max-pods=2"]).unwrap().max_pods,
            2
        );
    }

    #[test]
    fn help() {
        for a in [
            &["--help"][..],
            &["-h"],
            &["--sync-frequency=1s", "--help=true"],
        ] {
            match parse_run_args_with(&args(a), &host).unwrap() {
                ParseOutcome::Help(text) => {
                    for f in FLAGS {
                        assert!(
                            text.contains(&format!("--{} ", f.name)),
                            "{} missing",
                            f.name
                        );
                        if !f.default.is_empty() {
                            assert!(text.contains(&format!("(default {})", f.default)));
                        }
                    }
                    assert!(text.contains("kubelet defaults to 0.0.0.0"));
                    assert_eq!(
                        text.lines()
                            .filter(|l| l.trim_start().starts_with('-'))
                            .count(),
                        FLAGS.len()
                    );
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn flag_errors() {
        let e = parse(&["--sync-frequency=x"]).unwrap_err().to_string();
        assert!(
            e.starts_with("--sync-frequency: invalid duration \"x\": "),
            "{e}"
        );
        let e = parse(&["--sync-frequency=0s"]).unwrap_err().to_string();
        assert!(e.contains("greater than zero"), "{e}");
        assert!(matches!(parse(&["--nope"]), Err(ConfigError::UnknownFlag(f)) if f == "--nope"));
        assert!(matches!(parse(&["-x"]), Err(ConfigError::UnknownFlag(f)) if f == "-x"));
        assert!(
            matches!(parse(&["--max-pods"]), Err(ConfigError::MissingValue(f)) if f == "--max-pods")
        );
        assert!(matches!(
            parse(&["extra"]),
            Err(ConfigError::UnexpectedArgument(_))
        ));
        assert!(matches!(
            parse(&["--", "extra"]),
            Err(ConfigError::UnexpectedArgument(_))
        ));
        assert!(
            parse(&["--help=maybe"])
                .unwrap_err()
                .to_string()
                .contains("invalid boolean")
        );
        assert!(
            parse(&["--read-only-port=70000"])
                .unwrap_err()
                .to_string()
                .starts_with("--read-only-port: invalid port")
        );
        assert!(parse(&["--max-pods=-1"]).is_err());
        assert!(
            parse(&["--address=localhost"])
                .unwrap_err()
                .to_string()
                .contains("invalid IP address")
        );
        assert!(parse(&["--manifest-url=ftp://x/"]).is_err());
        assert!(
            parse(&["--hostname-override=bad_name"])
                .unwrap_err()
                .to_string()
                .contains("--hostname-override")
        );
        let e = parse_run_args_with(&args(&[]), &|| Err("boom".into())).unwrap_err();
        assert!(matches!(e, ConfigError::NodeName(_)));
    }

    #[test]
    fn header_parsing() {
        let c = parse(&[
            "--manifest-url=http://example.com/pods",
            "--manifest-url-header=a:hello,b:again,c:world",
            "--manifest-url-header",
            "b:beautiful",
            "--manifest-url-header=Authorization: Bearer x:y ,",
        ])
        .unwrap();
        assert_eq!(
            c.manifest_url_headers,
            vec![
                ("a".to_string(), "hello".to_string()),
                ("b".into(), "again".into()),
                ("c".into(), "world".into()),
                ("b".into(), "beautiful".into()),
                ("Authorization".into(), "Bearer x:y".into()),
            ]
        );
        let e = parse(&["--manifest-url-header=Bearer-secret-token"])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--manifest-url-header: malformed header"),
            "{e}"
        );
        assert!(!e.contains("secret"), "{e}");
        assert!(parse(&["--manifest-url-header=bad name:x"]).is_err());
        assert!(parse(&["--manifest-url-header=:x"]).is_err());
    }

    #[test]
    fn file_then_flags_precedence() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "config.yaml",
            &format!(
                "{HEAD}staticPodPath: manifests\nsyncFrequency: 10s\nfileCheckFrequency: 1m30s\n\
                 readOnlyPort: 0\nhealthzPort: 1234\nmaxPods: 20\naddress: 0.0.0.0\n\
                 staticPodURL: http://10.0.0.1/pods\nstaticPodURLHeader:\n  X-Token: [\"file-secret\"]\n\
                 podLogsDir: /data/logs\ncontainerRuntimeEndpoint: unix:///tmp/c.sock\nruntimeRequestTimeout: 30s\n"
            ),
        );
        let c = parse(&["--config", &path, "--sync-frequency=5s", "--healthz-port=0"]).unwrap();
        // File values over defaults.
        assert_eq!(c.pod_manifest_path, dir.path().join("manifests"));
        assert_eq!(c.file_check_frequency, Duration::from_secs(90));
        assert_eq!(c.read_only_port, 0);
        assert_eq!(c.max_pods, 20);
        assert_eq!(c.address.to_string(), "0.0.0.0");
        assert_eq!(c.manifest_url.as_deref(), Some("http://10.0.0.1/pods"));
        assert_eq!(
            c.manifest_url_headers,
            vec![("X-Token".to_string(), "file-secret".to_string())]
        );
        assert_eq!(c.pod_logs_dir, PathBuf::from("/data/logs"));
        assert_eq!(c.runtime_endpoint, "unix:///tmp/c.sock");
        assert_eq!(c.runtime_request_timeout, Duration::from_secs(30));
        // Flags over file values, regardless of flag order relative to --config.
        assert_eq!(c.sync_frequency, Duration::from_secs(5));
        assert_eq!(c.healthz_port, 0);
        let c = parse(&["--max-pods=3", &format!("--config={path}")]).unwrap();
        assert_eq!(c.max_pods, 3);
        // Header flags replace the file's headers.
        let c = parse(&["--config", &path, "--manifest-url-header=A:b"]).unwrap();
        assert_eq!(
            c.manifest_url_headers,
            vec![("A".to_string(), "b".to_string())]
        );
        assert!(c.warnings.is_empty());
    }

    /// evictionHard etc. from the file and the kubelet's flags; flags win; errors name the
    /// field; reservations feed allocatable.
    #[test]
    fn eviction_settings_from_file_and_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "config.yaml",
            &format!(
                "{HEAD}evictionHard:\n  memory.available: 200Mi\n  nodefs.available: \"5%\"\n\
                 evictionSoft: {{memory.available: 1Gi}}\n\
                 evictionSoftGracePeriod: {{memory.available: 1m30s}}\n\
                 evictionPressureTransitionPeriod: 30s\n\
                 systemReserved: {{cpu: 500m, memory: 256Mi}}\n\
                 kubeReserved: {{memory: 256Mi}}\n\
                 imageGCHighThresholdPercent: 90\n\
                 imageMinimumGCAge: 5m\n\
                 containerLogMonitorInterval: 3s\n"
            ),
        );
        let c = parse(&["--config", &path]).unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!(c.eviction.thresholds.len(), 3);
        assert_eq!(
            c.eviction.pressure_transition_period,
            Duration::from_secs(30)
        );
        assert_eq!(c.eviction.reserved_memory, 512 << 20);
        assert_eq!(c.eviction.reserved_cpu_millis, 500);
        assert_eq!(c.eviction.image_gc.high_percent, 90);
        assert_eq!(c.eviction.image_gc.min_age, Duration::from_secs(300));
        assert_eq!(c.container_log_monitor_interval, Duration::from_secs(3));
        let (cpu, mem) = c.eviction.allocatable(crate::node::Capacity {
            cpu_millis: 2000,
            memory_bytes: 2 << 30,
        });
        assert_eq!((cpu, mem), (1500, (2 << 30) - (512 << 20) - (200 << 20)));
        // The flag replaces the file's whole map.
        let c = parse(&["--config", &path, "--eviction-hard=pid.available<1000"]).unwrap();
        assert_eq!(
            c.eviction.thresholds.iter().filter(|t| t.is_hard()).count(),
            1
        );
        // Defaults without any setting: the kubelet's four.
        assert_eq!(parse(&[]).unwrap().eviction.thresholds.len(), 4);

        let err = |args: &[&str]| parse(args).unwrap_err().to_string();
        assert!(err(&["--eviction-hard=memory.free<1Gi"]).contains("memory.free"));
        assert!(
            err(&["--eviction-soft=memory.available<1Gi"]).contains("evictionSoftGracePeriod"),
            "soft threshold without grace period"
        );
        assert!(
            err(&[
                "--image-gc-high-threshold=50",
                "--image-gc-low-threshold=60"
            ])
            .contains("imageGCLowThresholdPercent (60) must be less than")
        );
        assert!(err(&["--system-reserved=gpu=1"]).contains("systemReserved: gpu"));
        assert_eq!(
            parse(&["--cgroup-driver=systemd"]).unwrap().cgroup_driver,
            crate::cm::CgroupDriver::Systemd
        );
        assert!(err(&["--cgroup-driver=cgroupfs2"]).contains("--cgroup-driver"));
        let bad = write(
            &dir,
            "bad.yaml",
            &format!("{HEAD}evictionHard: {{memory.available: [1]}}\n"),
        );
        let e = parse(&["--config", &bad]).unwrap_err().to_string();
        assert!(
            e.contains("evictionHard.memory.available") && e.contains("bad.yaml"),
            "{e}"
        );
    }

    #[test]
    fn json_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "config.json",
            "{\n\t\"apiVersion\": \"kubelet.config.k8s.io/v1beta1\",\n\t\"kind\": \"KubeletConfiguration\",\n\t\"staticPodPath\": \"/srv/m\", \"maxPods\": 7}",
        );
        let c = parse(&["--config", &path]).unwrap();
        assert_eq!(
            (c.pod_manifest_path, c.max_pods),
            (PathBuf::from("/srv/m"), 7)
        );
    }

    /// The kubelet's `--register-with-taints` (`ParseTaints`: `key=value:Effect` or
    /// `key:Effect`, the three effects, no duplicate key+effect) and `registerWithTaints`.
    #[test]
    fn register_with_taints_from_flag_and_file() {
        let c =
            parse(&["--register-with-taints=dedicated=edge:NoSchedule, gpu:NoExecute"]).unwrap();
        assert_eq!(
            c.register_with_taints,
            vec![
                Taint {
                    key: "dedicated".into(),
                    value: "edge".into(),
                    effect: "NoSchedule".into()
                },
                Taint {
                    key: "gpu".into(),
                    value: String::new(),
                    effect: "NoExecute".into()
                },
            ]
        );
        for (bad, why) in [
            (
                "--register-with-taints=dedicated=edge",
                "expected <key>=<value>:<effect>",
            ),
            (
                "--register-with-taints=a=b:Sometimes",
                "unsupported taint effect",
            ),
            ("--register-with-taints=a b:NoSchedule", "key:"),
            (
                "--register-with-taints=a:NoSchedule,a=x:NoSchedule",
                "duplicated taints",
            ),
        ] {
            let e = parse(&[bad]).unwrap_err().to_string();
            assert!(
                e.contains("register-with-taints") && e.contains(why),
                "{bad}: {e}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "taints.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nregisterWithTaints:\n- {key: edge, effect: PreferNoSchedule}\n",
        );
        let c = parse(&["--config", &path]).unwrap();
        assert_eq!(c.register_with_taints[0].effect, "PreferNoSchedule");
        let path = write(
            &dir,
            "bad-taints.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nregisterWithTaints:\n- {key: edge, effect: NoSchedule}\n- {key: x, effect: Never}\n",
        );
        let e = parse(&["--config", &path]).unwrap_err().to_string();
        assert!(
            e.contains("registerWithTaints[1]") && e.contains("Never"),
            "{e}"
        );
    }

    #[test]
    fn unknown_fields_warn_but_do_not_fail() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "config.yaml",
            &format!(
                "{HEAD}cpuManagerPolicy: static\nauthentication:\n  anonymous: {{enabled: false}}\nmaxPods: 9\n"
            ),
        );
        let c = parse(&["--config", &path]).unwrap();
        assert_eq!(c.max_pods, 9);
        assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
        assert!(
            c.warnings
                .iter()
                .any(|w| w.contains("\"cpuManagerPolicy\"") && w.contains("config.yaml"))
        );
        assert!(c.warnings.iter().any(|w| w.contains("\"authentication\"")));
    }

    #[test]
    fn warnings_are_logged_with_tracing() {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "config.yaml", &format!("{HEAD}featureGates: {{}}\n"));
        let c = parse(&["--config", &path]).unwrap();
        let buf = Buf::default();
        let writer = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(sub, || c.log_warnings());
        let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(
            out.contains("WARN") && out.contains("\"featureGates\""),
            "{out}"
        );
    }

    #[test]
    fn bad_type_names_file_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "config.yaml",
            &format!("{HEAD}fileCheckFrequency: 20\n"),
        );
        let e = parse(&["--config", &path]).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(&e, ConfigError::InvalidField { field, .. } if field == "fileCheckFrequency"),
            "{msg}"
        );
        assert!(
            msg.starts_with(&format!("{path}: fileCheckFrequency: ")),
            "{msg}"
        );

        let path = write(&dir, "c2.yaml", &format!("{HEAD}fileCheckFrequency: 20x\n"));
        let msg = parse(&["--config", &path]).unwrap_err().to_string();
        assert!(
            msg.starts_with(&format!(
                "{path}: fileCheckFrequency: invalid duration \"20x\""
            )),
            "{msg}"
        );

        let path = write(&dir, "c3.yaml", &format!("{HEAD}readOnlyPort: 99999\n"));
        assert!(
            parse(&["--config", &path])
                .unwrap_err()
                .to_string()
                .contains(": readOnlyPort: invalid port")
        );

        let path = write(&dir, "c4.yaml", &format!("{HEAD}maxPods: lots\n"));
        assert!(
            parse(&["--config", &path])
                .unwrap_err()
                .to_string()
                .contains(": maxPods: invalid type")
        );

        let path = write(&dir, "c5.yaml", "kind: KubeletConfiguration\n");
        assert!(
            parse(&["--config", &path])
                .unwrap_err()
                .to_string()
                .contains(": apiVersion: missing")
        );

        let path = write(&dir, "c6.yaml", "apiVersion: v1\nkind: Pod\n");
        assert!(parse(&["--config", &path]).is_err());

        for (name, text) in [
            ("c7.yaml", "a: [\n"),
            ("c8.yaml", "- 1\n"),
            ("c9.yaml", ""),
            ("c10.json", "{\"a\":"),
        ] {
            let path = write(&dir, name, text);
            let e = parse(&["--config", &path]).unwrap_err();
            assert!(e.to_string().starts_with(&path), "{e}");
        }

        let e = parse(&["--config", "/nonexistent/nanolet.yaml"]).unwrap_err();
        assert!(matches!(e, ConfigError::ReadFile { .. }));
        assert!(e.to_string().contains("/nonexistent/nanolet.yaml"));
    }

    #[test]
    fn security_options_from_flags_and_file() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.security, SecurityPolicy::default());
        assert!(c.security.allow_privileged && !c.allow_insecure_manifest_dir);
        let c = parse(&[
            "--allow-privileged=false",
            "--deny-host-namespaces",
            "--allowed-host-paths=/var/log, /srv",
            "--allow-insecure-manifest-dir",
        ])
        .unwrap();
        assert!(!c.security.allow_privileged && c.security.deny_host_namespaces);
        assert_eq!(
            c.security.allowed_host_paths,
            vec![PathBuf::from("/var/log"), PathBuf::from("/srv")]
        );
        assert!(c.allow_insecure_manifest_dir);
        let j = c.redacted_json();
        assert_eq!(j["allowPrivileged"], false);
        assert_eq!(
            j["allowedHostPaths"],
            serde_json::json!(["/var/log", "/srv"])
        );
        let e = parse(&["--allowed-host-paths=var/log"])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--allowed-host-paths: \"var/log\""), "{e}");
        assert!(parse(&["--allowed-host-paths=/a/../etc"]).is_err());

        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "config.yaml",
            &format!(
                "{HEAD}allowPrivileged: false\ndenyHostNamespaces: true\nallowedHostPaths: [/data]\nallowInsecureManifestDir: true\n"
            ),
        );
        let c = parse(&["--config", &path]).unwrap();
        assert!(!c.security.allow_privileged && c.security.deny_host_namespaces);
        assert_eq!(c.security.allowed_host_paths, vec![PathBuf::from("/data")]);
        assert!(c.allow_insecure_manifest_dir);
        // Flags win over the file.
        let c = parse(&["--config", &path, "--allow-privileged=true"]).unwrap();
        assert!(c.security.allow_privileged);
        let path = write(&dir, "c2.yaml", &format!("{HEAD}allowedHostPaths: [rel]\n"));
        let e = parse(&["--config", &path]).unwrap_err().to_string();
        assert!(e.contains("allowedHostPaths: \"rel\""), "{e}");
    }

    #[test]
    fn manifest_url_tls_settings() {
        let url = "--manifest-url=https://example.test/pods";
        if !cfg!(feature = "tls") {
            return;
        }
        let c = parse(&[
            url,
            "--manifest-url-ca-file=/etc/nanolet/ca.pem",
            "--manifest-url-client-cert=/etc/nanolet/client.pem",
            "--manifest-url-client-key=/etc/nanolet/client-key.pem",
        ])
        .unwrap();
        assert_eq!(
            c.manifest_url_ca_file.as_deref(),
            Some(Path::new("/etc/nanolet/ca.pem"))
        );
        let j = c.redacted_json();
        assert_eq!(j["staticPodURLCAFile"], "/etc/nanolet/ca.pem");
        assert_eq!(
            j["staticPodURLClientKeyFile"],
            "/etc/nanolet/client-key.pem"
        );
        let e = parse(&[url, "--manifest-url-client-cert=/c.pem"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs --manifest-url-client-key"), "{e}");
        let e = parse(&[url, "--manifest-url-client-key=/k.pem"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs --manifest-url-client-cert"), "{e}");
        let e = parse(&[
            "--manifest-url=http://example.test/pods",
            "--manifest-url-ca-file=/ca.pem",
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("need an https:// --manifest-url"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "config.yaml",
            &format!(
                "{HEAD}staticPodURL: https://example.test/p\nstaticPodURLCAFile: ca.pem\nstaticPodURLClientCertFile: c.pem\nstaticPodURLClientKeyFile: k.pem\n"
            ),
        );
        let c = parse(&["--config", &path]).unwrap();
        assert_eq!(c.manifest_url_ca_file, Some(dir.path().join("ca.pem")));
        assert_eq!(c.manifest_url_client_key, Some(dir.path().join("k.pem")));
    }

    #[test]
    fn header_type_errors_do_not_leak_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "config.yaml",
            &format!("{HEAD}staticPodURLHeader:\n  Authorization: Bearer s3cr3t\n"),
        );
        let msg = parse(&["--config", &path]).unwrap_err().to_string();
        assert!(msg.contains("staticPodURLHeader.Authorization"), "{msg}");
        assert!(!msg.contains("s3cr3t"), "{msg}");
        let path = write(
            &dir,
            "c2.yaml",
            &format!("{HEAD}staticPodURLHeader:\n  Authorization: [\"a\\r\\nb: s3cr3t\"]\n"),
        );
        let msg = parse(&["--config", &path]).unwrap_err().to_string();
        assert!(
            msg.contains("line break") && !msg.contains("s3cr3t"),
            "{msg}"
        );
    }

    #[test]
    fn redaction() {
        let c = parse(&[
            "--manifest-url=http://user:pa55@example.com/pods?x=1",
            "--manifest-url-header=Authorization:Bearer s3cr3t,Authorization:second-s3cr3t,X-A:t0ken",
        ])
        .unwrap();
        let dbg = format!("{c:?} {c:#?}");
        assert!(
            !dbg.contains("s3cr3t") && !dbg.contains("t0ken") && !dbg.contains("pa55"),
            "{dbg}"
        );
        assert!(dbg.contains("Authorization: <redacted>"), "{dbg}");
        // Query values are redacted too (they may hold a presigned URL's credentials).
        assert!(
            dbg.contains("http://<redacted>@example.com/pods?x=<redacted>"),
            "{dbg}"
        );
        let j = c.redacted_json();
        let s = j.to_string();
        assert!(
            !s.contains("s3cr3t") && !s.contains("t0ken") && !s.contains("pa55"),
            "{s}"
        );
        assert_eq!(
            j["staticPodURLHeader"]["Authorization"],
            serde_json::json!(["<redacted>", "<redacted>"])
        );
        assert_eq!(
            j["staticPodURLHeader"]["X-A"],
            serde_json::json!(["<redacted>"])
        );
        assert_eq!(j["syncFrequency"], "1m0s");
        assert_eq!(j["runtimeRequestTimeout"], "2m0s");
        assert_eq!(j["readOnlyPort"], 10255);
        assert_eq!(j["nodeName"], "edge-box-01");
        assert_eq!(j["kind"], "KubeletConfiguration");
        // The real values are still there for the URL source to use.
        assert_eq!(c.manifest_url_headers[0].1, "Bearer s3cr3t");
    }

    #[test]
    fn https_manifest_url_needs_the_tls_feature() {
        let r = parse(&["--manifest-url=HTTPS://user:pa55@example.com/pods"]);
        if cfg!(feature = "tls") {
            assert!(r.is_ok(), "{r:?}");
        } else {
            let e = r.unwrap_err().to_string();
            assert!(
                e.contains("--manifest-url") && e.contains("`tls` feature"),
                "{e}"
            );
            assert!(!e.contains("pa55"), "{e}");
        }
        assert!(parse(&["--manifest-url=http://example.com/pods"]).is_ok());
    }

    #[test]
    fn url_redaction() {
        assert_eq!(redact_url("http://h/p"), "http://h/p");
        assert_eq!(
            redact_url("http://u@h:80/p@q"),
            "http://<redacted>@h:80/p@q"
        );
        assert_eq!(redact_url("not a url"), "not a url");
        // Query values and the fragment too (presigned URLs carry credentials there): what
        // /configz, Debug and flag errors show.
        assert_eq!(
            redact_url("https://h/p?token=s3cret&X-Amz-Signature=abc#frag"),
            format!("https://h/p?token={REDACTED}&X-Amz-Signature={REDACTED}#{REDACTED}")
        );
    }

    #[test]
    fn node_names() {
        assert_eq!(normalize_node_name(" My.Host-1 \n").unwrap(), "my.host-1");
        assert!(normalize_node_name("").is_err());
        assert!(normalize_node_name("-a").is_err());
        assert!(normalize_node_name("a..b").is_err());
        assert!(normalize_node_name(&"a".repeat(254)).is_err());
    }

    #[test]
    fn off_loopback_read_only_port_needs_a_token_file() {
        let e = parse(&["--address=0.0.0.0"]).unwrap_err();
        assert!(matches!(e, ConfigError::ReadOnlyNeedsToken(_)), "{e}");
        assert!(e.to_string().contains("--read-only-token-file"), "{e}");
        // Disabled port, loopback, or a token file: fine.
        assert!(parse(&["--address=0.0.0.0", "--read-only-port=0"]).is_ok());
        assert!(parse(&["--address=::1"]).is_ok());
        let c = parse(&[
            "--address=0.0.0.0",
            "--read-only-token-file=/etc/nanolet/token",
        ])
        .unwrap();
        assert_eq!(
            c.read_only_token_file.as_deref(),
            Some(Path::new("/etc/nanolet/token"))
        );
        assert_eq!(c.redacted_json()["readOnlyTokenFile"], "/etc/nanolet/token");

        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "config.yaml",
            &format!("{HEAD}address: 10.0.0.1\nreadOnlyTokenFile: token\n"),
        );
        let c = parse(&["--config", &path]).unwrap();
        assert_eq!(c.read_only_token_file, Some(dir.path().join("token")));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn node_ip_is_one_address_or_one_per_family() {
        // kubelet --node-ip: ParseNodeIPArgument (dual-stack pairs) and validateNodeIP.
        assert!(parse(&[]).unwrap().node_ips.is_empty());
        let c = parse(&["--node-ip=192.0.2.5"]).unwrap();
        assert_eq!(c.node_ips, vec![IpAddr::from([192, 0, 2, 5])]);
        let c = parse(&["--node-ip", "2001:db8::5, 192.0.2.5"]).unwrap();
        assert_eq!(c.node_ips.len(), 2);
        assert!(c.node_ips[0].is_ipv6() && c.node_ips[1].is_ipv4());
        for (bad, why) in [
            ("192.0.2.5,192.0.2.6", "one IPv4 and one IPv6"),
            ("192.0.2.5,2001:db8::5,2001:db8::6", "at most two"),
            ("127.0.0.1", "loopback"),
            ("::", "unspecified"),
            ("169.254.1.1", "link-local"),
            ("fe80::1", "link-local"),
            ("224.0.0.1", "multicast"),
            ("node1", "invalid IP address"),
        ] {
            let e = parse(&[&format!("--node-ip={bad}")])
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("--node-ip: ") && e.contains(why),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn logging_verbosity_in_the_file_and_v_over_it() {
        // KubeletConfiguration logging.verbosity (component-base); --v wins, as flags do.
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "config.yaml",
            &format!("{HEAD}logging:\n  verbosity: 4\n  format: text\n"),
        );
        let c = parse(&["--config", &path]).unwrap();
        assert_eq!(c.verbosity, 4);
        assert_eq!(c.log_level(), tracing::Level::DEBUG);
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(
            c.warnings[0].contains("\"logging.format\""),
            "{:?}",
            c.warnings
        );
        assert_eq!(parse(&["--config", &path, "--v=0"]).unwrap().verbosity, 0);
        let bad = write(
            &dir,
            "bad.yaml",
            &format!("{HEAD}logging:\n  verbosity: -1\n"),
        );
        let e = parse(&["--config", &bad]).unwrap_err().to_string();
        assert!(e.contains("logging.verbosity"), "{e}");
    }

    #[test]
    fn resolv_conf_flag_and_field() {
        // kubelet: --resolv-conf / resolvConf, default /etc/resolv.conf; "" is no host DNS;
        // resolvConf is a path ref, relative to the config file.
        assert_eq!(
            parse(&[]).unwrap().resolv_conf.as_deref(),
            Some(Path::new("/etc/resolv.conf"))
        );
        let c = parse(&["--resolv-conf="]).unwrap();
        assert_eq!(c.resolv_conf, None);
        assert_eq!(c.redacted_json()["resolvConf"], "");
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "config.yaml",
            &format!("{HEAD}resolvConf: dns/resolv.conf\n"),
        );
        let c = parse(&["--config", &path]).unwrap();
        assert_eq!(c.resolv_conf, Some(dir.path().join("dns/resolv.conf")));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let c = parse(&["--config", &path, "--resolv-conf=/run/r.conf"]).unwrap();
        assert_eq!(c.resolv_conf.as_deref(), Some(Path::new("/run/r.conf")));
    }
}
