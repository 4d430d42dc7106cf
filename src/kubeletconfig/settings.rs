//! Every setting of `nanolet run`, each defined once ([`SETTINGS`]): its flag (name, shorthand,
//! kind), its KubeletConfiguration field (if it has one), the placeholder and default `--help`
//! shows, its help text, the one `apply` that sets [`Config`] from either the flag's text or the
//! field's value (so the two can never disagree), and its entry in `/configz`.
//!
//! `--help`, the man page and the shell completions (`cmd::docgen`, through [`flag_docs`]), the
//! flag lexer (`util::flags`), the config file's known fields and [`Config::redacted_json`] all
//! read this table. Adding a setting: a `Config` field with its default in
//! [`Config::defaults`], and one entry here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::Config;
use super::values::*;
use crate::timeutil::format_go_duration;
use crate::util::flags::{Flag, Spec};
use crate::util::redact::{REDACTED, redact_url};

/// Sets a setting from a flag's text or a config-file field's value.
pub(super) type Apply = fn(&mut Config, &Input<'_>) -> Result<(), Invalid>;

/// A setting's value as `/configz` shows it.
pub(super) type Show = fn(&Config) -> Value;

/// One setting of `nanolet run`.
pub(super) struct Setting {
    /// The flag: long name, shorthand, kind (boolean, value, repeatable).
    pub flag: Flag,
    /// The KubeletConfiguration field; `None` for flag-only settings.
    pub field: Option<&'static str>,
    /// Placeholder for the value in `--help`.
    pub value_name: &'static str,
    /// Shown as `(default ...)`; empty shows nothing.
    pub default: &'static str,
    pub help: &'static str,
    /// Sets the setting from the flag's text or the field's value.
    pub apply: Apply,
    /// Its key and value in `/configz` ([`Config::redacted_json`]); `None`: not shown.
    pub configz: Option<(&'static str, Show)>,
}

impl Spec for Setting {
    fn flag(&self) -> &Flag {
        &self.flag
    }
}

/// Where a setting's value comes from.
pub(super) enum Input<'a> {
    /// A flag as given (a boolean's text is `true` or `false`); `flag` is `--name`. `first`:
    /// the flag's first occurrence, which for a repeatable flag replaces the file's value
    /// (later ones add to it).
    Flag {
        flag: &'a str,
        text: &'a str,
        first: bool,
    },
    /// A config-file field's value. Relative paths are relative to `dir`, the file's
    /// directory, as in the kubelet; `file` names the file in warnings.
    File {
        value: &'a Value,
        dir: &'a Path,
        file: &'a Path,
    },
}

/// A refused value: why, and where below the config-file field (`""` for the field itself,
/// `.key` or `[i]` below it).
#[derive(Debug)]
pub(super) struct Invalid {
    pub at: String,
    pub reason: ValueError,
}

impl From<ValueError> for Invalid {
    fn from(reason: ValueError) -> Invalid {
        Invalid {
            at: String::new(),
            reason,
        }
    }
}

impl Invalid {
    /// The value has the wrong JSON type (a file reports these before other problems, as
    /// decoding the whole file did).
    pub fn is_type_error(&self) -> bool {
        matches!(self.reason, ValueError::Type(_))
    }

    fn below(self, at: &str) -> Invalid {
        Invalid {
            at: format!("{at}{}", self.at),
            reason: self.reason,
        }
    }
}

/// A config-file value decoded as `T`, `None` for null (an absent setting, as in Go).
fn decode<T: DeserializeOwned>(value: &Value) -> Result<Option<T>, Invalid> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let at = match path.as_str() {
            "." => String::new(),
            p if p.starts_with('[') => p.to_string(),
            p => format!(".{p}"),
        };
        Invalid {
            at,
            reason: ValueError::Type(e.into_inner()),
        }
    })
}

impl Input<'_> {
    /// The text of a flag or of a string field.
    fn text(&self) -> Result<Option<String>, Invalid> {
        match self {
            Input::Flag { text, .. } => Ok(Some(text.to_string())),
            Input::File { value, .. } => decode(value),
        }
    }

    /// The text parsed by `parse`, the same for the flag and the field.
    fn parse<T>(&self, parse: fn(&str) -> Result<T, ValueError>) -> Result<Option<T>, Invalid> {
        then(self.text(), |s| parse(&s))
    }

    /// A number: the flag's text parsed by `flag`, the field's integer checked by `field`.
    fn int<T>(
        &self,
        flag: fn(&str) -> Result<T, ValueError>,
        field: fn(i64) -> Result<T, ValueError>,
    ) -> Result<Option<T>, Invalid> {
        match self {
            Input::Flag { text, .. } => Ok(Some(flag(text)?)),
            Input::File { value, .. } => then(decode(value), field),
        }
    }

    /// A whole number: the flag's text or the field's integer (as its decimal text), both
    /// parsed by `parse`.
    fn whole<T>(&self, parse: fn(&str) -> Result<T, ValueError>) -> Result<Option<T>, Invalid> {
        match self {
            Input::Flag { text, .. } => Ok(Some(parse(text)?)),
            Input::File { value, .. } => then(decode::<i64>(value), |n| parse(&n.to_string())),
        }
    }

    fn bool(&self) -> Result<Option<bool>, Invalid> {
        match self {
            Input::Flag { text, .. } => Ok(Some(*text == "true")),
            Input::File { value, .. } => decode(value),
        }
    }

    /// A path; a relative one in the file is relative to the file's directory.
    fn path(&self) -> Result<Option<PathBuf>, Invalid> {
        match self {
            Input::Flag { text, .. } => Ok(Some(PathBuf::from(text))),
            Input::File { value, dir, .. } => then(decode::<String>(value), |p| {
                let p = PathBuf::from(p);
                Ok(if p.as_os_str().is_empty() || p.is_absolute() {
                    p
                } else {
                    dir.join(p)
                })
            }),
        }
    }

    /// A path where empty means none.
    fn optional_path(&self) -> Result<Option<Option<PathBuf>>, Invalid> {
        then(
            self.path(),
            |p| Ok((!p.as_os_str().is_empty()).then_some(p)),
        )
    }

    /// A path that must not be empty.
    fn nonempty_path(&self) -> Result<Option<PathBuf>, Invalid> {
        then(self.path(), |p| {
            if p.as_os_str().is_empty() {
                Err(ValueError::Empty)
            } else {
                Ok(p)
            }
        })
    }

    /// A list: comma-separated in the flag (items trimmed, empty ones skipped), a list of
    /// strings in the file.
    fn list(&self) -> Result<Option<Vec<String>>, Invalid> {
        match self {
            Input::Flag { text, .. } => Ok(Some(
                text.split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .collect(),
            )),
            Input::File { value, .. } => decode(value),
        }
    }

    /// A map of strings: `a=b,c=d` in the flag, a map in the file (numbers taken as text).
    fn pairs(&self) -> Result<Option<BTreeMap<String, String>>, Invalid> {
        match self {
            Input::Flag { flag, text, .. } => Ok(Some(parse_pairs(flag, text)?)),
            Input::File { value, .. } => string_map(value),
        }
    }

    /// Eviction thresholds: `memory.available<100Mi,...` in the flag, a map in the file.
    fn statements(&self) -> Result<Option<BTreeMap<String, String>>, Invalid> {
        match self {
            Input::Flag { flag, text, .. } => Ok(Some(
                crate::eviction::threshold::parse_statements(flag, text)
                    .map_err(ValueError::from)?,
            )),
            Input::File { value, .. } => string_map(value),
        }
    }
}

/// `f` applied to a present value.
fn then<T, U>(
    value: Result<Option<T>, Invalid>,
    f: impl FnOnce(T) -> Result<U, ValueError>,
) -> Result<Option<U>, Invalid> {
    match value? {
        Some(v) => Ok(Some(f(v)?)),
        None => Ok(None),
    }
}

/// Stores a present value.
/// `--extended-resources` pairs as counts: extended resource names, whole numbers >= 0.
fn extended_resources(
    pairs: Result<Option<BTreeMap<String, String>>, Invalid>,
) -> Result<Option<BTreeMap<String, i64>>, Invalid> {
    let Some(pairs) = pairs? else {
        return Ok(None);
    };
    let mut out = BTreeMap::new();
    for (k, v) in pairs {
        if !crate::api::helpers::is_extended_resource_name(&k) {
            return Err(ValueError::ExtendedResource(
                k,
                "must be a domain-prefixed name outside kubernetes.io (e.g. example.com/dongle)",
            )
            .into());
        }
        let q = crate::api::quantity::parse_quantity_str(&v).ok();
        match q.filter(|q| q.milli_value() >= 0 && q.milli_value() % 1000 == 0) {
            Some(q) => {
                out.insert(k, q.value());
            }
            None => {
                return Err(ValueError::ExtendedResource(
                    format!("{k}={v}"),
                    "the count must be a whole number >= 0",
                )
                .into());
            }
        }
    }
    Ok(Some(out))
}

fn set<T>(slot: &mut T, value: Result<Option<T>, Invalid>) -> Result<(), Invalid> {
    if let Some(v) = value? {
        *slot = v;
    }
    Ok(())
}

/// A map of strings from the file; numbers are taken as their text.
fn string_map(value: &Value) -> Result<Option<BTreeMap<String, String>>, Invalid> {
    let Some(m) = decode::<BTreeMap<String, Value>>(value)? else {
        return Ok(None);
    };
    m.into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s)),
            Value::Number(n) => Ok((k, n.to_string())),
            other => {
                Err(Invalid::from(ValueError::NotAString(yaml_kind(&other)))
                    .below(&format!(".{k}")))
            }
        })
        .collect::<Result<_, _>>()
        .map(Some)
}

fn duration_json(d: Duration) -> Value {
    format_go_duration(d).into()
}

fn path_json(p: &Path) -> Value {
    p.to_string_lossy().into_owned().into()
}

/// A path, `""` for none.
fn optional_path_json(p: &Option<PathBuf>) -> Value {
    p.as_deref().map(path_json).unwrap_or_else(|| "".into())
}

/// `staticPodURLHeader` with every value replaced by `"<redacted>"`.
fn redacted_headers(headers: &[(String, String)]) -> Value {
    let mut out = serde_json::Map::new();
    for (name, _) in headers {
        if let Some(list) = out
            .entry(name.clone())
            .or_insert_with(|| json!([]))
            .as_array_mut()
        {
            list.push(REDACTED.into());
        }
    }
    Value::Object(out)
}

/// `--cluster-dns` (repeatable, comma-separated: the flags replace the file's list, then add
/// up) and `clusterDNS: [ip, ...]`. Each item must be an IP address (the kubelet skips bad ones
/// with a log line; nanolet refuses them).
fn apply_cluster_dns(c: &mut Config, v: &Input<'_>) -> Result<(), Invalid> {
    let Some(items) = v.list()? else {
        return Ok(());
    };
    let mut ips = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let ip = parse_ip(item).map_err(|e| match v {
            Input::File { .. } => Invalid::from(e).below(&format!("[{i}]")),
            Input::Flag { .. } => Invalid::from(e),
        })?;
        ips.push(ip);
    }
    match v {
        Input::Flag { first: false, .. } => c.cluster_dns.extend(ips),
        _ => c.cluster_dns = ips,
    }
    Ok(())
}

/// `--shutdown-grace-period-by-pod-priority=0=10,1000=20` and
/// `shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 10}, ...]`.
fn apply_shutdown_by_priority(c: &mut Config, v: &Input<'_>) -> Result<(), Invalid> {
    use crate::nodeshutdown::GracePeriodByPriority;
    let groups = match v {
        Input::Flag { flag, text, .. } => parse_pairs(flag, text)?
            .into_iter()
            .map(|(k, s)| {
                let bad = || ValueError::ShutdownGroup(format!("{k}={s}"));
                Ok(GracePeriodByPriority {
                    priority: k.trim().parse().map_err(|_| bad())?,
                    shutdown_grace_period_seconds: s.trim().parse().map_err(|_| bad())?,
                })
            })
            .collect::<Result<Vec<_>, ValueError>>()?,
        Input::File { value, .. } => match decode::<Vec<GracePeriodByPriority>>(value)? {
            Some(g) => g,
            None => return Ok(()),
        },
    };
    c.shutdown.by_pod_priority = groups;
    Ok(())
}

/// `--manifest-url-header` (repeatable: the flags replace the file's headers, then add up) and
/// `staticPodURLHeader: {Name: [value, ...]}`. Errors never show a value.
fn apply_headers(c: &mut Config, v: &Input<'_>) -> Result<(), Invalid> {
    match v {
        Input::Flag { text, first, .. } => {
            if *first {
                c.manifest_url_headers.clear();
            }
            c.manifest_url_headers.extend(parse_header_list(text)?);
        }
        Input::File { value, .. } => c.manifest_url_headers = file_headers(value)?,
    }
    Ok(())
}

/// `staticPodURLHeader`, read by hand so that no error echoes a value; null is no headers.
fn file_headers(v: &Value) -> Result<Vec<(String, String)>, Invalid> {
    let map = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Object(m) => m,
        other => return Err(ValueError::HeaderMap(yaml_kind(other)).into()),
    };
    // Sorted by name for a deterministic order (the kubelet's map has none).
    let sorted: BTreeMap<&String, &Value> = map.iter().collect();
    let mut out = Vec::new();
    for (name, vals) in sorted {
        let at = format!(".{name}");
        let Value::Array(list) = vals else {
            return Err(Invalid::from(ValueError::HeaderList(yaml_kind(vals))).below(&at));
        };
        for (i, item) in list.iter().enumerate() {
            let Some(value) = item.as_str() else {
                let e = ValueError::HeaderItem(yaml_kind(item));
                return Err(Invalid::from(e).below(&format!("{at}[{i}]")));
            };
            check_header(name, value).map_err(|e| Invalid::from(e).below(&at))?;
            out.push((name.clone(), value.to_string()));
        }
    }
    Ok(out)
}

/// `--register-with-taints` and `registerWithTaints` (each taint checked, errors naming its
/// index).
fn apply_taints(c: &mut Config, v: &Input<'_>) -> Result<(), Invalid> {
    match v {
        Input::Flag { text, .. } => c.register_with_taints = parse_taints(text)?,
        Input::File { value, .. } => {
            let Some(taints) = decode::<Vec<Taint>>(value)? else {
                return Ok(());
            };
            let mut out: Vec<Taint> = Vec::new();
            for (i, t) in taints.into_iter().enumerate() {
                let at = format!("[{i}]");
                t.validate().map_err(|e| Invalid::from(e).below(&at))?;
                check_duplicate_taint(&out, &t).map_err(|e| Invalid::from(e).below(&at))?;
                out.push(t);
            }
            c.register_with_taints = out;
        }
    }
    Ok(())
}

/// KubeletConfiguration `logging` (component-base LoggingConfiguration): only `verbosity`.
#[derive(Debug, Default, serde::Deserialize)]
struct FileLogging {
    verbosity: Option<i64>,
}

/// `--v` and the file's `logging.verbosity`; the other `logging` fields (format,
/// flushFrequency, options) are warned about as ignored.
fn apply_verbosity(c: &mut Config, v: &Input<'_>) -> Result<(), Invalid> {
    match v {
        Input::Flag { text, .. } => c.verbosity = parse_verbosity(text)?,
        Input::File { value, file, .. } => {
            if let Value::Object(logging) = value {
                for k in logging.keys().filter(|k| k.as_str() != "verbosity") {
                    c.warnings.push(format!(
                        "{}: ignoring field \"logging.{k}\": unknown or not supported by nanolet",
                        file.display()
                    ));
                }
            }
            let Some(n) = decode::<FileLogging>(value)?.and_then(|l| l.verbosity) else {
                return Ok(());
            };
            c.verbosity = u8::try_from(n.clamp(0, 10)).unwrap_or(10);
            if n < 0 {
                return Err(Invalid::from(ValueError::VerbosityRange(n)).below(".verbosity"));
            }
        }
    }
    Ok(())
}

/// The settings of `nanolet run`, in `--help` order.
pub(super) const SETTINGS: &[Setting] = &[
    Setting {
        flag: Flag::value("address"),
        field: Some("address"),
        value_name: "ip",
        default: "127.0.0.1",
        help: "IP address the read-only port listens on (config: address). NOTE: the kubelet defaults to 0.0.0.0; nanolet defaults to loopback only",
        apply: |c, v| set(&mut c.address, v.parse(parse_ip)),
        configz: Some(("address", |c| c.address.to_string().into())),
    },
    Setting {
        flag: Flag::value("cgroup-driver"),
        field: Some("cgroupDriver"),
        value_name: "string",
        default: "cgroupfs",
        help: "cgroupfs or systemd; must match containerd's runc SystemdCgroup setting (config: cgroupDriver)",
        apply: |c, v| set(&mut c.cgroup_driver, v.parse(parse_cgroup_driver)),
        configz: Some(("cgroupDriver", |c| c.cgroup_driver.as_str().into())),
    },
    Setting {
        flag: Flag::repeated("cluster-dns"),
        field: Some("clusterDNS"),
        value_name: "ip,...",
        default: "",
        help: "DNS server IP(s) pods with dnsPolicy ClusterFirst (not hostNetwork) or ClusterFirstWithHostNet get as their only nameservers, with the cluster search domains and ndots:5; repeatable and comma-separated; empty: those pods get the node's resolv.conf (config: clusterDNS)",
        apply: apply_cluster_dns,
        configz: Some(("clusterDNS", |c| {
            c.cluster_dns
                .iter()
                .map(|ip| Value::from(ip.to_string()))
                .collect()
        })),
    },
    Setting {
        flag: Flag::value("cluster-domain"),
        field: Some("clusterDomain"),
        value_name: "string",
        default: "",
        help: "The cluster's DNS domain, e.g. cluster.local: the search domains of cluster-DNS pods (<namespace>.svc.<domain>, svc.<domain>, <domain>) and the /etc/hosts name of pods with a subdomain (config: clusterDomain)",
        apply: |c, v| set(&mut c.cluster_domain, v.text()),
        configz: Some(("clusterDomain", |c| c.cluster_domain.clone().into())),
    },
    Setting {
        flag: Flag::value("config-map-dir"),
        field: None,
        value_name: "path",
        default: "/etc/nanolet/configmaps",
        help: "Directory of ConfigMap manifests static pods may reference in volumes and env (nanolet extension; the kubelet refuses them)",
        apply: |c, v| set(&mut c.config_map_dir, v.nonempty_path()),
        configz: Some(("configMapDir", |c| path_json(&c.config_map_dir))),
    },
    Setting {
        flag: Flag::value("runtime-class-dir"),
        field: None,
        value_name: "path",
        default: "/etc/nanolet/runtimeclasses",
        help: "Directory of RuntimeClass manifests (node.k8s.io/v1) static pods may name in runtimeClassName; their handler goes to CRI, their overhead counts (nanolet extension; joined, the API's RuntimeClasses too, a local file wins)",
        apply: |c, v| set(&mut c.runtime_class_dir, v.nonempty_path()),
        configz: Some(("runtimeClassDir", |c| path_json(&c.runtime_class_dir))),
    },
    Setting {
        flag: Flag::value("device-plugin-dir"),
        field: None,
        value_name: "path",
        default: "/var/lib/kubelet/device-plugins",
        help: "Directory of the device plugin API v1beta1: nanolet serves the registration socket kubelet.sock there and dials the plugins' sockets in it (the kubelet's path, so unmodified plugins find it); their devices are extended resources in the node's capacity, allocated at admission (empty: no device plugins)",
        apply: |c, v| set(&mut c.device_plugin_dir, v.optional_path()),
        configz: Some(("devicePluginDir", |c| {
            optional_path_json(&c.device_plugin_dir)
        })),
    },
    Setting {
        flag: Flag::value("pod-resources-dir"),
        field: None,
        value_name: "path",
        default: "/var/lib/kubelet/pod-resources",
        help: "Directory of the pod-resources API v1 socket kubelet.sock (List, Get, GetAllocatableResources: the devices pods hold), the kubelet's path by default (empty: not served)",
        apply: |c, v| set(&mut c.pod_resources_dir, v.optional_path()),
        configz: Some(("podResourcesDir", |c| {
            optional_path_json(&c.pod_resources_dir)
        })),
    },
    Setting {
        flag: Flag::value("extended-resources"),
        field: None,
        value_name: "mapStringString",
        default: "",
        help: "Extended resources this node has, e.g. example.com/dongle=2 (what a cluster administrator PATCHes into a node's capacity): in the node's capacity and allocatable, and pods requesting more are refused with OutOf<name> (nanolet extension)",
        apply: |c, v| set(&mut c.extended_resources, extended_resources(v.pairs())),
        configz: Some(("extendedResources", |c| json!(c.extended_resources))),
    },
    Setting {
        flag: Flag::value("config"),
        field: None,
        value_name: "file",
        default: "",
        help: "KubeletConfiguration file (YAML or JSON, apiVersion kubelet.config.k8s.io/v1beta1); flags override its fields, unsupported fields are warned about and ignored",
        apply: |_, _| Ok(()), // read before the other flags, by `load`
        configz: None,
    },
    Setting {
        flag: Flag::value("container-log-max-files"),
        field: Some("containerLogMaxFiles"),
        value_name: "int",
        default: "5",
        help: "Log files kept per container, the current one included (config: containerLogMaxFiles)",
        apply: |c, v| set(&mut c.container_log_max_files, v.whole(parse_log_files)),
        configz: Some(("containerLogMaxFiles", |c| c.container_log_max_files.into())),
    },
    Setting {
        flag: Flag::value("container-log-max-size"),
        field: Some("containerLogMaxSize"),
        value_name: "quantity",
        default: "10Mi",
        help: "Rotate a container's log beyond this size (config: containerLogMaxSize)",
        apply: |c, v| set(&mut c.container_log_max_size, v.parse(parse_log_size)),
        configz: Some(("containerLogMaxSize", |c| {
            c.container_log_max_size.to_string().into()
        })),
    },
    Setting {
        flag: Flag::value("container-log-monitor-interval"),
        field: Some("containerLogMonitorInterval"),
        value_name: "duration",
        default: "10s",
        help: "How often container logs are checked for rotation (config: containerLogMonitorInterval)",
        apply: |c, v| {
            set(
                &mut c.container_log_monitor_interval,
                v.parse(parse_frequency),
            )
        },
        configz: Some(("containerLogMonitorInterval", |c| {
            duration_json(c.container_log_monitor_interval)
        })),
    },
    Setting {
        flag: Flag::value("container-runtime-endpoint"),
        field: Some("containerRuntimeEndpoint"),
        value_name: "string",
        default: crate::cri::DEFAULT_ENDPOINT,
        help: "CRI endpoint of containerd (config: containerRuntimeEndpoint)",
        apply: |c, v| set(&mut c.runtime_endpoint, v.parse(parse_endpoint)),
        configz: Some(("containerRuntimeEndpoint", |c| {
            c.runtime_endpoint.clone().into()
        })),
    },
    Setting {
        flag: Flag::value("event-burst"),
        field: Some("eventBurst"),
        value_name: "int32",
        default: "100",
        help: "Maximum size of a burst of event creations in API-server mode, with event-qps > 0 (config: eventBurst)",
        apply: |c, v| {
            set(
                &mut c.event_burst,
                v.int(parse_event_limit, event_limit_from_int),
            )
        },
        configz: Some(("eventBurst", |c| c.event_burst.into())),
    },
    Setting {
        flag: Flag::value("event-qps"),
        field: Some("eventRecordQPS"),
        value_name: "int32",
        default: "50",
        help: "Maximum event creations per second in API-server mode; 0 for no limit (config: eventRecordQPS)",
        apply: |c, v| {
            set(
                &mut c.event_record_qps,
                v.int(parse_event_limit, event_limit_from_int),
            )
        },
        configz: Some(("eventRecordQPS", |c| c.event_record_qps.into())),
    },
    Setting {
        flag: Flag::value("eviction-hard"),
        field: Some("evictionHard"),
        value_name: "mapStringString",
        default: "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%",
        help: "Hard eviction thresholds; setting any replaces all the defaults, 0% disables one (config: evictionHard)",
        apply: |c, v| set(&mut c.eviction.raw.hard, v.statements()),
        configz: Some(("evictionHard", |c| json!(c.eviction.raw.hard))),
    },
    Setting {
        flag: Flag::value("eviction-max-pod-grace-period"),
        field: Some("evictionMaxPodGracePeriod"),
        value_name: "int",
        default: "0",
        help: "Longest grace period for soft evictions, seconds; 0 = the pod's own (config: evictionMaxPodGracePeriod)",
        apply: |c, v| {
            set(
                &mut c.eviction.max_pod_grace_period,
                v.int(parse_integer, Ok),
            )
        },
        configz: Some(("evictionMaxPodGracePeriod", |c| {
            c.eviction.max_pod_grace_period.into()
        })),
    },
    Setting {
        flag: Flag::value("eviction-minimum-reclaim"),
        field: Some("evictionMinimumReclaim"),
        value_name: "mapStringString",
        default: "",
        help: "Extra amount to reclaim once a threshold is met, e.g. memory.available=0Mi,nodefs.available=500Mi (config: evictionMinimumReclaim)",
        apply: |c, v| set(&mut c.eviction.raw.min_reclaim, v.pairs()),
        configz: Some(("evictionMinimumReclaim", |c| {
            json!(c.eviction.raw.min_reclaim)
        })),
    },
    Setting {
        flag: Flag::value("eviction-monitoring-period"),
        field: Some("evictionMonitoringPeriod"),
        value_name: "duration",
        default: "10s",
        help: "How often the eviction manager measures the node (config: evictionMonitoringPeriod; nanolet extension, the kubelet's is fixed at 10s)",
        apply: |c, v| set(&mut c.eviction.monitoring_period, v.parse(parse_frequency)),
        configz: Some(("evictionMonitoringPeriod", |c| {
            duration_json(c.eviction.monitoring_period)
        })),
    },
    Setting {
        flag: Flag::value("eviction-pressure-transition-period"),
        field: Some("evictionPressureTransitionPeriod"),
        value_name: "duration",
        default: "5m0s",
        help: "How long a pressure condition is held after its signal clears (config: evictionPressureTransitionPeriod)",
        apply: |c, v| {
            set(
                &mut c.eviction.pressure_transition_period,
                v.parse(parse_duration),
            )
        },
        configz: Some(("evictionPressureTransitionPeriod", |c| {
            duration_json(c.eviction.pressure_transition_period)
        })),
    },
    Setting {
        flag: Flag::value("eviction-soft"),
        field: Some("evictionSoft"),
        value_name: "mapStringString",
        default: "",
        help: "Soft eviction thresholds, e.g. memory.available<300Mi; each needs a grace period (config: evictionSoft)",
        apply: |c, v| set(&mut c.eviction.raw.soft, v.statements()),
        configz: Some(("evictionSoft", |c| json!(c.eviction.raw.soft))),
    },
    Setting {
        flag: Flag::value("eviction-soft-grace-period"),
        field: Some("evictionSoftGracePeriod"),
        value_name: "mapStringString",
        default: "",
        help: "Grace periods of the soft thresholds, e.g. memory.available=1m30s (config: evictionSoftGracePeriod)",
        apply: |c, v| set(&mut c.eviction.raw.soft_grace, v.pairs()),
        configz: Some(("evictionSoftGracePeriod", |c| {
            json!(c.eviction.raw.soft_grace)
        })),
    },
    Setting {
        flag: Flag::value("file-check-frequency"),
        field: Some("fileCheckFrequency"),
        value_name: "duration",
        default: "20s",
        help: "How often to rescan --pod-manifest-path for changes (config: fileCheckFrequency)",
        apply: |c, v| set(&mut c.file_check_frequency, v.parse(parse_frequency)),
        configz: Some(("fileCheckFrequency", |c| {
            duration_json(c.file_check_frequency)
        })),
    },
    Setting {
        flag: Flag::value("healthz-bind-address"),
        field: Some("healthzBindAddress"),
        value_name: "ip",
        default: "127.0.0.1",
        help: "IP address the healthz server listens on (config: healthzBindAddress)",
        apply: |c, v| set(&mut c.healthz_bind_address, v.parse(parse_ip)),
        configz: Some(("healthzBindAddress", |c| {
            c.healthz_bind_address.to_string().into()
        })),
    },
    Setting {
        flag: Flag::bool("allow-insecure-manifest-dir"),
        field: Some("allowInsecureManifestDir"),
        value_name: "",
        default: "false",
        help: "Run manifests from a world-writable or not root-owned directory or file (development only: whoever can write there can run privileged containers) (config: allowInsecureManifestDir, nanolet only)",
        apply: |c, v| set(&mut c.allow_insecure_manifest_dir, v.bool()),
        configz: Some(("allowInsecureManifestDir", |c| {
            c.allow_insecure_manifest_dir.into()
        })),
    },
    Setting {
        flag: Flag::bool("checkpoint-secrets"),
        field: Some("checkpointSecrets"),
        value_name: "",
        default: "true",
        help: "Keep API pods' Secrets and ServiceAccount tokens in the offline checkpoint (<root-dir>/api-objects.json, mode 0600) so those pods start again after a reboot without the API server; false: they wait for it (config: checkpointSecrets, nanolet only)",
        apply: |c, v| set(&mut c.checkpoint_secrets, v.bool()),
        configz: Some(("checkpointSecrets", |c| c.checkpoint_secrets.into())),
    },
    Setting {
        flag: Flag::bool("allow-privileged"),
        field: Some("allowPrivileged"),
        value_name: "",
        default: "true",
        help: "Admit pods with privileged containers; false rejects them with reason Forbidden (config: allowPrivileged)",
        apply: |c, v| set(&mut c.security.allow_privileged, v.bool()),
        configz: Some(("allowPrivileged", |c| c.security.allow_privileged.into())),
    },
    Setting {
        flag: Flag::value("allowed-host-paths"),
        field: Some("allowedHostPaths"),
        value_name: "path,...",
        default: "",
        help: "Absolute path prefixes hostPath volumes must lie below (whole components); empty allows all (config: allowedHostPaths, nanolet only)",
        apply: |c, v| {
            set(
                &mut c.security.allowed_host_paths,
                then(v.list(), |l| {
                    parse_host_path_prefixes(l.iter().map(String::as_str))
                }),
            )
        },
        configz: Some(("allowedHostPaths", |c| {
            c.security
                .allowed_host_paths
                .iter()
                .map(|p| path_json(p))
                .collect()
        })),
    },
    Setting {
        flag: Flag::value("allowed-unsafe-sysctls"),
        field: Some("allowedUnsafeSysctls"),
        value_name: "strings",
        default: "",
        help: "Sysctls (or prefix* patterns) pods may set beyond the safe set; a pod setting any other is refused with SysctlForbidden (config: allowedUnsafeSysctls)",
        apply: |c, v| {
            set(
                &mut c.security.allowed_unsafe_sysctls,
                then(v.list(), |l| {
                    crate::api::sysctl::check_patterns(&l)?;
                    Ok(l)
                }),
            )
        },
        configz: Some(("allowedUnsafeSysctls", |c| {
            json!(c.security.allowed_unsafe_sysctls)
        })),
    },
    Setting {
        flag: Flag::bool("deny-host-namespaces"),
        field: Some("denyHostNamespaces"),
        value_name: "",
        default: "false",
        help: "Reject pods with hostNetwork, hostPID or hostIPC (config: denyHostNamespaces, nanolet only)",
        apply: |c, v| set(&mut c.security.deny_host_namespaces, v.bool()),
        configz: Some(("denyHostNamespaces", |c| {
            c.security.deny_host_namespaces.into()
        })),
    },
    Setting {
        flag: Flag::value("healthz-port"),
        field: Some("healthzPort"),
        value_name: "port",
        default: "10248",
        help: "Port of the healthz server, 0 disables it (config: healthzPort)",
        apply: |c, v| set(&mut c.healthz_port, v.int(parse_port, port_from_int)),
        configz: Some(("healthzPort", |c| c.healthz_port.into())),
    },
    Setting {
        flag: Flag::bool("help").short('h'),
        field: None,
        value_name: "",
        default: "",
        help: "Print this help and exit",
        apply: |_, _| Ok(()), // answered by `load` before anything else
        configz: None,
    },
    Setting {
        flag: Flag::value("hostname-override"),
        field: None,
        value_name: "string",
        default: "",
        help: "Node name used in static pod names (default: the machine hostname, lowercased)",
        // Normalized last; when empty, the machine hostname is taken.
        apply: |c, v| set(&mut c.node_name, v.text()),
        configz: Some(("nodeName", |c| c.node_name.clone().into())),
    },
    Setting {
        flag: Flag::value("http-check-frequency"),
        field: Some("httpCheckFrequency"),
        value_name: "duration",
        default: "20s",
        help: "How often to fetch --manifest-url (config: httpCheckFrequency)",
        apply: |c, v| set(&mut c.http_check_frequency, v.parse(parse_frequency)),
        configz: Some(("httpCheckFrequency", |c| {
            duration_json(c.http_check_frequency)
        })),
    },
    Setting {
        flag: Flag::value("image-gc-high-threshold"),
        field: Some("imageGCHighThresholdPercent"),
        value_name: "int",
        default: "85",
        help: "Image filesystem usage percent at which image GC starts (config: imageGCHighThresholdPercent)",
        apply: |c, v| {
            set(
                &mut c.eviction.image_gc.high_percent,
                v.whole(parse_percent),
            )
        },
        configz: Some(("imageGCHighThresholdPercent", |c| {
            c.eviction.image_gc.high_percent.into()
        })),
    },
    Setting {
        flag: Flag::value("image-gc-low-threshold"),
        field: Some("imageGCLowThresholdPercent"),
        value_name: "int",
        default: "80",
        help: "Image filesystem usage percent image GC frees down to (config: imageGCLowThresholdPercent)",
        apply: |c, v| set(&mut c.eviction.image_gc.low_percent, v.whole(parse_percent)),
        configz: Some(("imageGCLowThresholdPercent", |c| {
            c.eviction.image_gc.low_percent.into()
        })),
    },
    Setting {
        flag: Flag::value("kube-reserved"),
        field: Some("kubeReserved"),
        value_name: "mapStringString",
        default: "",
        help: "Resources reserved for Kubernetes daemons, e.g. cpu=100m,memory=100Mi (config: kubeReserved)",
        apply: |c, v| set(&mut c.eviction.kube_reserved, v.pairs()),
        configz: None,
    },
    Setting {
        flag: Flag::value("manifest-url"),
        field: Some("staticPodURL"),
        value_name: "url",
        default: "",
        help: "http(s) URL serving static pod manifests; empty disables the URL source (config: staticPodURL)",
        apply: |c, v| set(&mut c.manifest_url, v.parse(parse_manifest_url)),
        configz: Some(("staticPodURL", |c| {
            c.manifest_url
                .as_deref()
                .map(redact_url)
                .unwrap_or_default()
                .into()
        })),
    },
    Setting {
        flag: Flag::repeated("manifest-url-header"),
        field: Some("staticPodURLHeader"),
        value_name: "Name:Value,...",
        default: "",
        help: "HTTP header(s) sent with --manifest-url requests; repeatable and comma-separated, e.g. 'a:hello,b:again' (config: staticPodURLHeader); values are never logged",
        apply: apply_headers,
        configz: Some(("staticPodURLHeader", |c| {
            redacted_headers(&c.manifest_url_headers)
        })),
    },
    Setting {
        flag: Flag::value("manifest-url-ca-file"),
        field: Some("staticPodURLCAFile"),
        value_name: "path",
        default: "",
        help: "PEM CA bundle that verifies an https:// --manifest-url instead of the built-in web roots (config: staticPodURLCAFile, nanolet only)",
        apply: |c, v| set(&mut c.manifest_url_ca_file, v.optional_path()),
        configz: Some(("staticPodURLCAFile", |c| {
            optional_path_json(&c.manifest_url_ca_file)
        })),
    },
    Setting {
        flag: Flag::value("manifest-url-client-cert"),
        field: Some("staticPodURLClientCertFile"),
        value_name: "path",
        default: "",
        help: "PEM client certificate (chain) for an https:// --manifest-url; needs --manifest-url-client-key (config: staticPodURLClientCertFile, nanolet only)",
        apply: |c, v| set(&mut c.manifest_url_client_cert, v.optional_path()),
        configz: Some(("staticPodURLClientCertFile", |c| {
            optional_path_json(&c.manifest_url_client_cert)
        })),
    },
    Setting {
        flag: Flag::value("manifest-url-client-key"),
        field: Some("staticPodURLClientKeyFile"),
        value_name: "path",
        default: "",
        help: "PEM private key of --manifest-url-client-cert (config: staticPodURLClientKeyFile, nanolet only)",
        apply: |c, v| set(&mut c.manifest_url_client_key, v.optional_path()),
        configz: Some(("staticPodURLClientKeyFile", |c| {
            optional_path_json(&c.manifest_url_client_key)
        })),
    },
    Setting {
        flag: Flag::value("images-dir"),
        field: Some("imagesDir"),
        value_name: "path",
        default: "<root-dir>/images",
        help: "Directory of image archives (OCI layout or docker-archive .tar, .tar.gz, .tar.zst) imported into containerd at start and whenever one appears, and pinned; empty disables (config: imagesDir, nanolet only)",
        apply: |c, v| set(&mut c.images_dir, then(v.path(), |p| Ok(Some(p)))),
        configz: Some(("imagesDir", |c| optional_path_json(&c.images_dir()))),
    },
    Setting {
        flag: Flag::value("image-credentials-file"),
        field: Some("imageCredentialsFile"),
        value_name: "path",
        default: "<root-dir>/config.json",
        help: "docker config.json with registry credentials for image pulls, after the pod's imagePullSecrets (the kubelet's /var/lib/kubelet/config.json); empty disables (config: imageCredentialsFile, nanolet only)",
        apply: |c, v| {
            set(
                &mut c.image_credentials_file,
                then(v.path(), |p| Ok(Some(p))),
            )
        },
        configz: Some(("imageCredentialsFile", |c| {
            optional_path_json(&c.image_credentials_file())
        })),
    },
    Setting {
        flag: Flag::value("image-snapshotter"),
        field: Some("imageSnapshotter"),
        value_name: "name",
        default: "overlayfs",
        help: "containerd snapshotter imported images are unpacked into; must match the CRI plugin's (config: imageSnapshotter, nanolet only)",
        apply: |c, v| set(&mut c.image_snapshotter, v.parse(parse_snapshotter)),
        configz: Some(("imageSnapshotter", |c| c.image_snapshotter.clone().into())),
    },
    Setting {
        flag: Flag::value("kubeconfig"),
        field: None,
        value_name: "file",
        default: "",
        help: "Join a cluster (API-server mode): kubeconfig with the API server, CA and credentials; empty = standalone",
        apply: |c, v| set(&mut c.kubeconfig, v.optional_path()),
        configz: Some(("kubeconfig", |c| optional_path_json(&c.kubeconfig))),
    },
    Setting {
        flag: Flag::value("bootstrap-kubeconfig"),
        field: None,
        value_name: "file",
        default: "",
        help: "TLS bootstrap: when --kubeconfig is missing or its client certificate expired, request a client certificate with this kubeconfig's credentials (a bootstrap token) and write --kubeconfig pointing at it",
        apply: |c, v| set(&mut c.bootstrap_kubeconfig, v.optional_path()),
        configz: Some(("bootstrapKubeconfig", |c| {
            optional_path_json(&c.bootstrap_kubeconfig)
        })),
    },
    Setting {
        flag: Flag::value("cert-dir"),
        field: None,
        value_name: "dir",
        default: "<root-dir>/pki",
        help: "Directory of the TLS certificates and keys: the bootstrapped and rotated client and serving certificates, the self-signed kubelet.crt/kubelet.key",
        apply: |c, v| set(&mut c.cert_dir, then(v.path(), |p| Ok(Some(p)))),
        configz: Some(("certDir", |c| {
            c.cert_dir().to_string_lossy().into_owned().into()
        })),
    },
    Setting {
        flag: Flag::bool("rotate-certificates"),
        field: Some("rotateCertificates"),
        value_name: "",
        default: "false",
        help: "Renew the client certificate through the CSR API at 70-90 % of its lifetime, switching to the new one live (config: rotateCertificates)",
        apply: |c, v| set(&mut c.rotate_certificates, v.bool()),
        configz: Some(("rotateCertificates", |c| c.rotate_certificates.into())),
    },
    Setting {
        flag: Flag::bool("rotate-server-certificates"),
        field: Some("serverTLSBootstrap"),
        value_name: "",
        default: "false",
        help: "Request the serving certificate from the cluster (signer kubernetes.io/kubelet-serving) and rotate it, instead of a self-signed one (config: serverTLSBootstrap)",
        apply: |c, v| set(&mut c.server_tls_bootstrap, v.bool()),
        configz: Some(("serverTLSBootstrap", |c| c.server_tls_bootstrap.into())),
    },
    Setting {
        flag: Flag::value("tls-cert-file"),
        field: Some("tlsCertFile"),
        value_name: "file",
        default: "",
        help: "x509 certificate (chain) of the HTTPS server; without it and --rotate-server-certificates, a self-signed pair in --cert-dir (config: tlsCertFile)",
        apply: |c, v| set(&mut c.tls_cert_file, v.optional_path()),
        configz: Some(("tlsCertFile", |c| optional_path_json(&c.tls_cert_file))),
    },
    Setting {
        flag: Flag::value("tls-private-key-file"),
        field: Some("tlsPrivateKeyFile"),
        value_name: "file",
        default: "",
        help: "Private key of --tls-cert-file (config: tlsPrivateKeyFile)",
        apply: |c, v| set(&mut c.tls_private_key_file, v.optional_path()),
        configz: Some(("tlsPrivateKeyFile", |c| {
            optional_path_json(&c.tls_private_key_file)
        })),
    },
    Setting {
        flag: Flag::value("pod-worker-threads"),
        field: Some("podWorkerThreads"),
        value_name: "int",
        default: "2",
        help: "Threads kept to sync pods (each pod syncs on one at a time); more start while work waits, up to --max-pod-worker-threads, and leave after 30 s idle (config: podWorkerThreads, nanolet only)",
        apply: |c, v| set(&mut c.pod_worker_threads, v.whole(parse_threads)),
        configz: Some(("podWorkerThreads", |c| c.pod_worker_threads.into())),
    },
    Setting {
        flag: Flag::value("max-pod-worker-threads"),
        field: Some("maxPodWorkerThreads"),
        value_name: "int",
        default: "0",
        help: "Most threads syncing pods at once (0: as many as --max-pods): a pod whose CRI call, hook or kill blocks holds one, so only this many blocked at once can hold up the others' syncs; at least --pod-worker-threads (config: maxPodWorkerThreads, nanolet only)",
        apply: |c, v| set(&mut c.max_pod_worker_threads, v.whole(parse_max_threads)),
        configz: Some(("maxPodWorkerThreads", |c| c.max_pod_worker_threads.into())),
    },
    Setting {
        flag: Flag::value("enforce-node-allocatable"),
        field: Some("enforceNodeAllocatable"),
        value_name: "strings",
        default: "pods",
        help: "Limits to enforce with the cgroupfs driver: pods (the kubepods cgroup at capacity - systemReserved - kubeReserved), system-reserved, kube-reserved (their cgroups at the reservation), or none (config: enforceNodeAllocatable)",
        apply: |c, v| set(&mut c.enforce_node_allocatable, v.list()),
        configz: Some(("enforceNodeAllocatable", |c| {
            json!(c.enforce_node_allocatable)
        })),
    },
    Setting {
        flag: Flag::value("system-reserved-cgroup"),
        field: Some("systemReservedCgroup"),
        value_name: "string",
        default: "",
        help: "The cgroup of the operating system's daemons, limited to --system-reserved with --enforce-node-allocatable=system-reserved (config: systemReservedCgroup)",
        apply: |c, v| set(&mut c.system_reserved_cgroup, v.text()),
        configz: Some(("systemReservedCgroup", |c| {
            c.system_reserved_cgroup.clone().into()
        })),
    },
    Setting {
        flag: Flag::value("kube-reserved-cgroup"),
        field: Some("kubeReservedCgroup"),
        value_name: "string",
        default: "",
        help: "The cgroup of nanolet and containerd, limited to --kube-reserved with --enforce-node-allocatable=kube-reserved (config: kubeReservedCgroup)",
        apply: |c, v| set(&mut c.kube_reserved_cgroup, v.text()),
        configz: Some(("kubeReservedCgroup", |c| {
            c.kube_reserved_cgroup.clone().into()
        })),
    },
    Setting {
        flag: Flag::value("qos-reserved"),
        field: Some("qosReserved"),
        value_name: "memory=percent",
        default: "",
        help: "Keep this percentage of the higher QoS tiers' memory requests out of the lower tiers' cgroups, e.g. memory=50% (kubepods/burstable and kubepods/besteffort memory limits, cgroupfs driver; the kubelet's QOSReserved, alpha there; config: qosReserved)",
        apply: |c, v| {
            set(
                &mut c.qos_reserved_memory_percent,
                then(v.pairs(), |m| parse_qos_reserved(&m)),
            )
        },
        configz: Some(("qosReserved", |c| match c.qos_reserved_memory_percent {
            Some(p) => json!({"memory": format!("{p}%")}),
            None => json!({}),
        })),
    },
    Setting {
        flag: Flag::value("memory-swap-behavior"),
        field: Some("memorySwap.swapBehavior"),
        value_name: "string",
        default: "NoSwap",
        help: "NoSwap or LimitedSwap: LimitedSwap gives Burstable pods' containers swap in proportion to their memory request, on cgroup v2 with swap on (config: memorySwap.swapBehavior; the kubelet has no flag)",
        apply: |c, v| set(&mut c.memory_swap_behavior, v.parse(parse_swap_behavior)),
        configz: Some(("memorySwap.swapBehavior", |c| {
            c.memory_swap_behavior.as_str().into()
        })),
    },
    Setting {
        flag: Flag::value("pod-max-pids"),
        field: Some("podPidsLimit"),
        value_name: "int",
        default: "-1",
        help: "The most processes a pod may run (pids.max of its cgroup, cgroupfs driver); -1: no limit (config: podPidsLimit)",
        apply: |c, v| set(&mut c.pod_pids_limit, v.int(parse_pids_limit, Ok)),
        configz: Some(("podPidsLimit", |c| c.pod_pids_limit.into())),
    },
    Setting {
        flag: Flag::value("max-pods"),
        field: Some("maxPods"),
        value_name: "int",
        default: "110",
        help: "Maximum number of pods nanolet runs (config: maxPods)",
        apply: |c, v| set(&mut c.max_pods, v.int(parse_max_pods, max_pods_from_int)),
        configz: Some(("maxPods", |c| c.max_pods.into())),
    },
    Setting {
        flag: Flag::value("minimum-image-ttl-duration"),
        field: Some("imageMinimumGCAge"),
        value_name: "duration",
        default: "2m0s",
        help: "Minimum age of an unused image before image GC may remove it (config: imageMinimumGCAge)",
        apply: |c, v| set(&mut c.eviction.image_gc.min_age, v.parse(parse_duration)),
        configz: Some(("imageMinimumGCAge", |c| {
            duration_json(c.eviction.image_gc.min_age)
        })),
    },
    Setting {
        flag: Flag::value("pod-logs-dir"),
        field: Some("podLogsDir"),
        value_name: "path",
        default: "/var/log/pods",
        help: "Directory for container log files (config: podLogsDir)",
        apply: |c, v| set(&mut c.pod_logs_dir, v.nonempty_path()),
        configz: Some(("podLogsDir", |c| path_json(&c.pod_logs_dir))),
    },
    Setting {
        flag: Flag::value("node-ip"),
        field: None,
        value_name: "ips",
        default: "",
        help: "The node's IP address, or an IPv4 and an IPv6 one comma-separated (primary first): hostNetwork pods' IPs, status.hostIP(s), the Node's InternalIP addresses; empty detects the default route's interface address",
        apply: |c, v| set(&mut c.node_ips, v.parse(parse_node_ips)),
        configz: None,
    },
    Setting {
        flag: Flag::value("node-labels"),
        field: None,
        value_name: "mapStringString",
        default: "",
        help: "Labels added to the registered Node, e.g. node.kubernetes.io/edge=,example.com/site=a (API-server mode); kubernetes.io and k8s.io labels only from the kubelet's set (kubelet.kubernetes.io/ and node.kubernetes.io/ prefixes, the well-known keys), as the API server's NodeRestriction admits",
        apply: |c, v| {
            set(
                &mut c.node_labels,
                then(v.pairs(), |m| Ok(m.into_iter().collect())),
            )
        },
        configz: None,
    },
    Setting {
        flag: Flag::value("register-with-taints"),
        field: Some("registerWithTaints"),
        value_name: "taints",
        default: "",
        help: "Taints of the registered Node, <key>=<value>:<effect> or <key>:<effect>, comma separated; effect NoSchedule, PreferNoSchedule or NoExecute (API-server mode; config: registerWithTaints)",
        apply: apply_taints,
        configz: Some(("registerWithTaints", |c| json!(c.register_with_taints))),
    },
    Setting {
        flag: Flag::value("node-status-update-frequency"),
        field: Some("nodeStatusUpdateFrequency"),
        value_name: "duration",
        default: "",
        help: "How often the Node status is computed in API-server mode, default 10s; it is sent when it changed or nodeStatusReportFrequency passed (config: nodeStatusUpdateFrequency)",
        apply: |c, v| {
            let d = v.parse(parse_frequency)?;
            set(&mut c.node_status_update_frequency, Ok(d.map(Some)))
        },
        configz: Some(("nodeStatusUpdateFrequency", |c| {
            duration_json(c.node_status_update_frequency())
        })),
    },
    Setting {
        flag: Flag::value("node-status-report-frequency"),
        field: Some("nodeStatusReportFrequency"),
        value_name: "duration",
        default: "",
        help: "How often an unchanged Node status is still sent in API-server mode, default 5m, or --node-status-update-frequency when that is set (nanolet's flag for the kubelet's config: nodeStatusReportFrequency)",
        apply: |c, v| {
            let d = v.parse(parse_frequency)?;
            set(&mut c.node_status_report_frequency, Ok(d.map(Some)))
        },
        configz: Some(("nodeStatusReportFrequency", |c| {
            duration_json(c.node_status_report_frequency())
        })),
    },
    Setting {
        flag: Flag::value("pod-manifest-path"),
        field: Some("staticPodPath"),
        value_name: "path",
        default: "/etc/kubernetes/manifests",
        help: "Directory of static pod manifest files; empty disables the file source (config: staticPodPath)",
        apply: |c, v| set(&mut c.pod_manifest_path, v.path()),
        configz: Some(("staticPodPath", |c| path_json(&c.pod_manifest_path))),
    },
    Setting {
        flag: Flag::value("read-only-port"),
        field: Some("readOnlyPort"),
        value_name: "port",
        default: "10255",
        help: "Port of the read-only API (/pods, /healthz, /metrics, /configz, the kubectl-compatible /api), 0 disables it (config: readOnlyPort)",
        apply: |c, v| set(&mut c.read_only_port, v.int(parse_port, port_from_int)),
        configz: Some(("readOnlyPort", |c| c.read_only_port.into())),
    },
    Setting {
        flag: Flag::value("port"),
        field: Some("port"),
        value_name: "port",
        default: "10250",
        help: "Port of the kubelet server (HTTPS, authenticated and authorized: /pods, /stats, /metrics, /containerLogs, /exec, /attach, /portForward, /run), 0 disables it (config: port)",
        apply: |c, v| set(&mut c.port, v.int(parse_port, port_from_int)),
        configz: Some(("port", |c| c.port.into())),
    },
    Setting {
        flag: Flag::value("client-ca-file"),
        field: Some("authentication.x509.clientCAFile"),
        value_name: "string",
        default: "",
        help: "Client certificates signed by a CA in this file authenticate to the kubelet server as their CommonName, with their Organizations as groups (config: authentication.x509.clientCAFile)",
        apply: |c, v| set(&mut c.client_ca_file, v.optional_path()),
        configz: Some(("authentication.x509.clientCAFile", |c| {
            optional_path_json(&c.client_ca_file)
        })),
    },
    Setting {
        flag: Flag::bool("anonymous-auth"),
        field: Some("authentication.anonymous.enabled"),
        value_name: "",
        default: "false",
        help: "Serve requests without credentials to the kubelet server as system:anonymous (group system:unauthenticated), still subject to authorization; nanolet's default is false, the kubelet's true (config: authentication.anonymous.enabled)",
        apply: |c, v| set(&mut c.anonymous_auth, v.bool()),
        configz: Some(("authentication.anonymous.enabled", |c| {
            c.anonymous_auth.into()
        })),
    },
    Setting {
        flag: Flag::bool("authentication-token-webhook"),
        field: Some("authentication.webhook.enabled"),
        value_name: "",
        default: "false",
        help: "Authenticate bearer tokens to the kubelet server with a TokenReview sent to the API server; needs --kubeconfig (config: authentication.webhook.enabled)",
        apply: |c, v| set(&mut c.authentication_token_webhook, v.bool()),
        configz: Some(("authentication.webhook.enabled", |c| {
            c.authentication_token_webhook.into()
        })),
    },
    Setting {
        flag: Flag::value("authentication-token-webhook-cache-ttl"),
        field: Some("authentication.webhook.cacheTTL"),
        value_name: "duration",
        default: "2m0s",
        help: "How long TokenReview answers are cached (config: authentication.webhook.cacheTTL)",
        apply: |c, v| {
            set(
                &mut c.authentication_token_webhook_cache_ttl,
                v.parse(parse_duration),
            )
        },
        configz: Some(("authentication.webhook.cacheTTL", |c| {
            duration_json(c.authentication_token_webhook_cache_ttl)
        })),
    },
    Setting {
        flag: Flag::value("authorization-mode"),
        field: Some("authorization.mode"),
        value_name: "string",
        default: "",
        help: "How the kubelet server authorizes requests: AlwaysAllow or Webhook (a SubjectAccessReview; needs --kubeconfig); default Webhook with --kubeconfig, else AlwaysAllow (config: authorization.mode)",
        apply: |c, v| {
            set(
                &mut c.authorization_mode,
                then(v.text(), |s| parse_authorization_mode(&s).map(Some)),
            )
        },
        configz: Some(("authorization.mode", |c| {
            c.authorization_mode().as_str().into()
        })),
    },
    Setting {
        flag: Flag::value("authorization-webhook-cache-authorized-ttl"),
        field: Some("authorization.webhook.cacheAuthorizedTTL"),
        value_name: "duration",
        default: "5m0s",
        help: "How long allowing SubjectAccessReview answers are cached (config: authorization.webhook.cacheAuthorizedTTL)",
        apply: |c, v| {
            set(
                &mut c.authorization_webhook_cache_authorized_ttl,
                v.parse(parse_duration),
            )
        },
        configz: Some(("authorization.webhook.cacheAuthorizedTTL", |c| {
            duration_json(c.authorization_webhook_cache_authorized_ttl)
        })),
    },
    Setting {
        flag: Flag::value("authorization-webhook-cache-unauthorized-ttl"),
        field: Some("authorization.webhook.cacheUnauthorizedTTL"),
        value_name: "duration",
        default: "30s",
        help: "How long denying SubjectAccessReview answers are cached (config: authorization.webhook.cacheUnauthorizedTTL)",
        apply: |c, v| {
            set(
                &mut c.authorization_webhook_cache_unauthorized_ttl,
                v.parse(parse_duration),
            )
        },
        configz: Some(("authorization.webhook.cacheUnauthorizedTTL", |c| {
            duration_json(c.authorization_webhook_cache_unauthorized_ttl)
        })),
    },
    Setting {
        flag: Flag::bool("enable-system-log-handler"),
        field: Some("enableSystemLogHandler"),
        value_name: "",
        default: "true",
        help: "Serve the node's logs under /var/log at /logs/ on the kubelet server (authorized as nodes/log); the kubelet has only the config field, nanolet also the flag (config: enableSystemLogHandler)",
        apply: |c, v| set(&mut c.enable_system_log_handler, v.bool()),
        configz: Some(("enableSystemLogHandler", |c| {
            c.enable_system_log_handler.into()
        })),
    },
    Setting {
        flag: Flag::value("read-only-token-file"),
        field: Some("readOnlyTokenFile"),
        value_name: "file",
        default: "",
        help: "File holding a bearer token every read-only request must present (Authorization: Bearer <token>); required when --address is not loopback (config: readOnlyTokenFile, nanolet only)",
        apply: |c, v| set(&mut c.read_only_token_file, v.optional_path()),
        configz: Some(("readOnlyTokenFile", |c| {
            optional_path_json(&c.read_only_token_file)
        })),
    },
    Setting {
        flag: Flag::value("resolv-conf"),
        field: Some("resolvConf"),
        value_name: "path",
        default: "/etc/resolv.conf",
        help: "The node's resolv.conf that pods with dnsPolicy Default/ClusterFirst get; if its only nameserver is systemd-resolved's stub 127.0.0.53, /run/systemd/resolve/resolv.conf is used instead; empty means no host DNS (config: resolvConf)",
        apply: |c, v| set(&mut c.resolv_conf, v.optional_path()),
        configz: Some(("resolvConf", |c| optional_path_json(&c.resolv_conf))),
    },
    Setting {
        flag: Flag::value("root-dir"),
        field: None,
        value_name: "path",
        default: "/var/lib/nanolet",
        help: "Directory for nanolet's own state",
        apply: |c, v| set(&mut c.root_dir, v.nonempty_path()),
        configz: Some(("rootDir", |c| path_json(&c.root_dir))),
    },
    Setting {
        flag: Flag::value("runtime-request-timeout"),
        field: Some("runtimeRequestTimeout"),
        value_name: "duration",
        default: "2m0s",
        help: "Timeout of every CRI request except long-running ones (config: runtimeRequestTimeout)",
        apply: |c, v| set(&mut c.runtime_request_timeout, v.parse(parse_frequency)),
        configz: Some(("runtimeRequestTimeout", |c| {
            duration_json(c.runtime_request_timeout)
        })),
    },
    Setting {
        flag: Flag::value("secret-dir"),
        field: None,
        value_name: "path",
        default: "/etc/nanolet/secrets",
        help: "Directory of Secret manifests static pods may reference; secret volumes live on tmpfs (nanolet extension)",
        apply: |c, v| set(&mut c.secret_dir, v.nonempty_path()),
        configz: Some(("secretDir", |c| path_json(&c.secret_dir))),
    },
    Setting {
        flag: Flag::value("shutdown-grace-period"),
        field: Some("shutdownGracePeriod"),
        value_name: "duration",
        default: "0s",
        help: "Graceful node shutdown: how long nanolet holds a shutdown back (logind delay inhibitor lock) to stop the pods, critical pods last; 0 turns it off (config: shutdownGracePeriod)",
        apply: |c, v| set(&mut c.shutdown.grace_period, v.parse(parse_duration)),
        configz: Some(("shutdownGracePeriod", |c| {
            duration_json(c.shutdown.grace_period)
        })),
    },
    Setting {
        flag: Flag::value("shutdown-grace-period-critical-pods"),
        field: Some("shutdownGracePeriodCriticalPods"),
        value_name: "duration",
        default: "0s",
        help: "The part of --shutdown-grace-period reserved for critical pods, stopped after all others (config: shutdownGracePeriodCriticalPods)",
        apply: |c, v| {
            set(
                &mut c.shutdown.grace_period_critical_pods,
                v.parse(parse_duration),
            )
        },
        configz: Some(("shutdownGracePeriodCriticalPods", |c| {
            duration_json(c.shutdown.grace_period_critical_pods)
        })),
    },
    Setting {
        flag: Flag::value("shutdown-grace-period-by-pod-priority"),
        field: Some("shutdownGracePeriodByPodPriority"),
        value_name: "priority=seconds,...",
        default: "",
        help: "Graceful node shutdown by pod priority, e.g. 0=10,100000=20,2000000000=10: each pod gets the seconds of the highest priority at or below its own, lowest priorities stopped first; replaces the two periods above (config: shutdownGracePeriodByPodPriority, a list of {priority, shutdownGracePeriodSeconds}; the kubelet has no flag)",
        apply: apply_shutdown_by_priority,
        configz: Some(("shutdownGracePeriodByPodPriority", |c| {
            json!(c.shutdown.by_pod_priority)
        })),
    },
    Setting {
        flag: Flag::value("sync-frequency"),
        field: Some("syncFrequency"),
        value_name: "duration",
        default: "1m0s",
        help: "Maximum period between resyncs of running pods (config: syncFrequency)",
        apply: |c, v| set(&mut c.sync_frequency, v.parse(parse_frequency)),
        configz: Some(("syncFrequency", |c| duration_json(c.sync_frequency))),
    },
    Setting {
        flag: Flag::value("system-reserved"),
        field: Some("systemReserved"),
        value_name: "mapStringString",
        default: "",
        help: "Resources reserved for the operating system, e.g. cpu=100m,memory=200Mi (config: systemReserved)",
        apply: |c, v| set(&mut c.eviction.system_reserved, v.pairs()),
        configz: None,
    },
    Setting {
        flag: Flag::value("v").short('v'),
        field: Some("logging"),
        value_name: "int",
        default: "0",
        help: "Log verbosity 0-10: 0-2 info, 3-4 debug, 5+ trace",
        apply: apply_verbosity,
        configz: Some(("verbosity", |c| c.verbosity.into())),
    },
];

/// The setting a KubeletConfiguration field sets.
pub(super) fn by_field(field: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.field == Some(field))
}

/// One flag of `nanolet run`, read-only, for documentation generated from the settings
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
    SETTINGS.iter().map(|s| FlagDoc {
        name: s.flag.name,
        shorthand: s.flag.shorthand,
        takes_value: s.flag.takes_value(),
        value_name: s.value_name,
        default: s.default,
        help: s.help,
    })
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
    let left: Vec<String> = flag_docs()
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
    for (f, l) in flag_docs().zip(left) {
        let default = if f.default.is_empty() {
            String::new()
        } else {
            format!(" (default {})", f.default)
        };
        out.push_str(&format!("{l:width$}   {}{default}\n", f.help));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names, fields and `/configz` keys are unique; a help that names a config field names
    /// the setting's own (so the help cannot drift from the definition).
    #[test]
    fn each_setting_is_defined_once_and_its_help_names_its_field() {
        let mut names = std::collections::BTreeSet::new();
        let mut fields = std::collections::BTreeSet::new();
        let mut keys = std::collections::BTreeSet::new();
        for s in SETTINGS {
            assert!(names.insert(s.flag.name), "--{} twice", s.flag.name);
            if let Some(f) = s.field {
                assert!(fields.insert(f), "{f} twice");
            }
            if let Some((k, _)) = s.configz {
                assert!(keys.insert(k), "configz {k} twice");
            }
            let named = s.help.split("config: ").skip(1).map(|rest| {
                // Nested fields are named by their dotted path (authentication.x509.clientCAFile).
                rest.split(|c: char| !c.is_ascii_alphanumeric() && c != '.')
                    .next()
                    .unwrap_or_default()
            });
            for field in named {
                assert_eq!(
                    s.field,
                    Some(field),
                    "--{}: help names {field}",
                    s.flag.name
                );
            }
            // `logging` is a struct; its `verbosity` is `--v`'s field.
            if let Some(f) = s.field.filter(|f| *f != "logging") {
                assert!(
                    s.help.contains(&format!("config: {f}")),
                    "--{}: help does not name {f}",
                    s.flag.name
                );
            }
        }
    }

    /// The default `--help` shows is the one `Config::defaults` has: applying it as a flag
    /// changes nothing.
    #[test]
    fn shown_defaults_are_the_real_defaults() {
        let defaults = Config::defaults("node1".into());
        for s in SETTINGS {
            if s.default.is_empty() || s.default.starts_with('<') || s.flag.name == "help" {
                continue;
            }
            let mut c = defaults.clone();
            let flag = format!("--{}", s.flag.name);
            let input = Input::Flag {
                flag: &flag,
                text: s.default,
                first: true,
            };
            (s.apply)(&mut c, &input).unwrap_or_else(|e| panic!("{flag}: {:?}", e.reason));
            assert!(
                c == defaults,
                "{flag}: the default {:?} is not Config::defaults'",
                s.default
            );
        }
    }

    /// A flag and its config-file field set the same value (paths aside: the file's are
    /// relative to its directory).
    #[test]
    fn a_flag_and_its_field_agree() {
        let cases = [
            ("sync-frequency", "7s", json!("7s")),
            ("max-pods", "7", json!(7)),
            ("allow-privileged", "false", json!(false)),
            ("allowed-host-paths", "/a,/b", json!(["/a", "/b"])),
            (
                "eviction-hard",
                "memory.available<1Gi",
                json!({"memory.available": "1Gi"}),
            ),
            (
                "system-reserved",
                "cpu=1,memory=2",
                json!({"cpu": "1", "memory": 2}),
            ),
            (
                "register-with-taints",
                "a=b:NoSchedule",
                json!([{"key": "a", "value": "b", "effect": "NoSchedule"}]),
            ),
            ("manifest-url-header", "A:b", json!({"A": ["b"]})),
            ("image-gc-high-threshold", "90", json!(90)),
            ("resolv-conf", "", json!("")),
        ];
        for (name, text, value) in cases {
            let s = SETTINGS.iter().find(|s| s.flag.name == name).expect(name);
            let flag = format!("--{name}");
            let (mut by_flag, mut by_file) =
                (Config::defaults("n".into()), Config::defaults("n".into()));
            let input = Input::Flag {
                flag: &flag,
                text,
                first: true,
            };
            (s.apply)(&mut by_flag, &input).expect(name);
            let input = Input::File {
                value: &value,
                dir: Path::new("/etc"),
                file: Path::new("c"),
            };
            (s.apply)(&mut by_file, &input).expect(name);
            assert!(by_flag == by_file, "{name}");
            assert!(
                by_flag != Config::defaults("n".into()),
                "{name}: nothing set"
            );
        }
    }
}
