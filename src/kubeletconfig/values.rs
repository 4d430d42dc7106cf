//! Value parsers shared by flags and config-file fields. They say why a value is refused
//! ([`ValueError`]); the caller adds the flag name or the file and field.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::AuthorizationMode;
use crate::eviction::threshold::ThresholdError;
use crate::timeutil::parse_go_duration;
use crate::util::redact::redact_url;

/// Why a flag's or config-file field's value is refused (never echoing a secret).
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    /// The config-file value has the wrong JSON type (serde's message).
    #[error("{0}")]
    Type(#[from] serde_json::Error),
    #[error("invalid boolean {0:?}: use true or false")]
    Bool(String),
    /// `--allowed-unsafe-sysctls`: the kubelet's NewAllowlist error.
    #[error(transparent)]
    Sysctl(#[from] crate::api::sysctl::PatternError),
    /// `--extended-resources`: a name outside the extended resource names, or a count that is
    /// not a whole number >= 0.
    #[error("invalid extended resource {0:?}: {1}")]
    ExtendedResource(String, &'static str),
    #[error("invalid duration {text:?}: {reason}")]
    Duration {
        text: String,
        reason: crate::timeutil::DurationError,
    },
    #[error("invalid number {0:?}: must be an integer (-1: no limit)")]
    PidsLimit(String),
    #[error("invalid priority=seconds pair {0:?}: both must be integers")]
    ShutdownGroup(String),
    #[error("must be greater than zero, got {0:?}")]
    NotPositive(String),
    #[error("invalid IP address {0:?}")]
    Ip(String),
    /// `--node-ip`: `{ip} is a loopback address`.
    #[error("{ip} is {kind} address")]
    NodeIp { ip: IpAddr, kind: &'static str },
    #[error("{0:?}: two addresses must be one IPv4 and one IPv6 (dual-stack)")]
    NodeIpFamilies(String),
    #[error("{0:?}: at most two addresses, one IPv4 and one IPv6")]
    NodeIpCount(String),
    #[error("invalid port {0:?}: must be an integer from 0 to 65535")]
    Port(String),
    #[error("invalid port {0}: must be from 0 to 65535")]
    PortRange(i64),
    /// A quantity that does not parse (the quantity parser's reason).
    #[error("{0}")]
    Quantity(crate::api::quantity::QuantityError),
    #[error("invalid size {0:?}: must be positive")]
    Size(String),
    #[error("invalid value {0:?}: must be an integer >= 2")]
    LogFiles(String),
    #[error("invalid number {0:?}: must be a non-negative integer")]
    MaxPods(String),
    #[error("invalid number {0:?}: must be an integer from 1 to 256")]
    Threads(String),
    #[error("invalid number {0:?}: must be an integer from 0 (as many as maxPods) to 1024")]
    MaxThreads(String),
    #[error("invalid number {0}: must be a non-negative integer")]
    MaxPodsRange(i64),
    #[error("invalid level {0:?}: must be an integer from 0 to 10")]
    Verbosity(String),
    #[error("{0}: must be an integer from 0 to 10")]
    VerbosityRange(i64),
    #[error("must be an integer between 0 and 100, got {0:?}")]
    Percent(String),
    #[error("invalid integer {0:?}")]
    Integer(String),
    #[error("{0} must be from 0 to 2147483647")]
    Negative(i64),
    #[error("{0:?} is not a snapshotter name (e.g. overlayfs, native)")]
    Snapshotter(String),
    #[error("must not be empty")]
    Empty,
    #[error("{0:?} is not an absolute path without '..' components")]
    HostPath(String),
    /// The URL is shown redacted.
    #[error(
        "invalid URL {0:?}: https:// needs TLS and this nanolet was built without the `tls` \
         feature (use an http:// URL or a build with default features)"
    )]
    UrlNeedsTls(String),
    /// The URL is shown redacted.
    #[error("invalid URL {0:?}: must be an http:// or https:// URL with a host")]
    Url(String),
    #[error("invalid header name {0:?}")]
    HeaderName(String),
    #[error("header {0:?}: value contains a line break or NUL")]
    HeaderValue(String),
    /// The item is not shown: it may be a secret with a missing name.
    #[error("malformed header #{0} (expected Name:Value; value not shown)")]
    MalformedHeader(usize),
    #[error("expected a map of header name to list of values, found {0}")]
    HeaderMap(&'static str),
    #[error("expected a list of strings, found {0} (value not shown)")]
    HeaderList(&'static str),
    #[error("expected a string, found {0} (value not shown)")]
    HeaderItem(&'static str),
    #[error("expected a string, found {0}")]
    NotAString(&'static str),
    #[error("invalid taint spec {0:?}: expected <key>=<value>:<effect> or <key>:<effect>")]
    TaintSyntax(String),
    #[error("invalid taint spec {0:?}: the key is empty")]
    TaintKeyEmpty(String),
    #[error("invalid taint spec {spec:?}: key: {reason}")]
    TaintKey { spec: String, reason: String },
    #[error("invalid taint spec {spec:?}: value: {reason}")]
    TaintValue { spec: String, reason: String },
    #[error(
        "invalid taint spec {spec:?}: invalid taint effect {effect:?}, unsupported taint effect (NoSchedule, PreferNoSchedule, NoExecute)"
    )]
    TaintEffect { spec: String, effect: String },
    #[error("duplicated taints with the same key and effect: {key}:{effect}")]
    TaintDuplicate { key: String, effect: String },
    /// `--cgroup-driver` (the cgroup manager's reason).
    #[error("{0}")]
    CgroupDriver(crate::cm::UnknownDriver),
    /// `--memory-swap-behavior` / `memorySwap.swapBehavior`.
    #[error("{0}")]
    SwapBehavior(crate::kuberuntime::container_linux::UnknownSwapBehavior),
    /// `--qos-reserved` / `qosReserved` (the kubelet's ParseQOSReserved).
    #[error("cannot reserve {0:?} resource")]
    QosReservedResource(String),
    #[error("failed to parse percentage {value:?} for \"memory\" resource: {reason}")]
    QosReservedPercent { value: String, reason: String },
    /// Eviction thresholds, grace periods, reservations and labels in the flag form.
    #[error(transparent)]
    Threshold(Box<ThresholdError>),
    #[error("needs --manifest-url-client-key (config: staticPodURLClientKeyFile)")]
    ClientCertWithoutKey,
    #[error("needs --manifest-url-client-cert (config: staticPodURLClientCertFile)")]
    ClientKeyWithoutCert,
    #[error("the manifest URL TLS settings need an https:// --manifest-url (config: staticPodURL)")]
    TlsWithoutHttps,
    /// `apiVersion` / `kind` with another value.
    #[error("expected {want:?}, found {found:?}")]
    Unexpected { want: &'static str, found: String },
    #[error("expected the string {want:?}, found {kind}")]
    NotTheString {
        want: &'static str,
        kind: &'static str,
    },
    #[error("missing; expected {0:?}")]
    Missing(&'static str),
    #[error("invalid authorization mode {0:?}: use AlwaysAllow or Webhook")]
    AuthorizationMode(String),
    /// `--authorization-mode=Webhook` or `--authentication-token-webhook` without an API server.
    #[error("{0} needs --kubeconfig (the reviews are sent to the API server)")]
    WebhookNeedsKubeconfig(&'static str),
    /// The kubelet server on --port is HTTPS only.
    #[error(
        "the kubelet server on --port needs a build with the tls feature (this nanolet was \
         built without it); set --port=0 to disable it"
    )]
    PortNeedsTls,
}

/// `--authorization-mode` / `authorization.mode`: `AlwaysAllow` or `Webhook`.
pub(super) fn parse_authorization_mode(s: &str) -> Result<AuthorizationMode, ValueError> {
    match s.trim() {
        "AlwaysAllow" => Ok(AuthorizationMode::AlwaysAllow),
        "Webhook" => Ok(AuthorizationMode::Webhook),
        other => Err(ValueError::AuthorizationMode(other.to_string())),
    }
}

impl From<ThresholdError> for ValueError {
    fn from(e: ThresholdError) -> ValueError {
        ValueError::Threshold(Box::new(e))
    }
}

/// A Go duration greater than zero (sync and check frequencies, timeouts).
pub(super) fn parse_frequency(s: &str) -> Result<Duration, ValueError> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(ValueError::NotPositive(s.to_string()));
    }
    Ok(d)
}

/// A Go duration, zero allowed.
pub(super) fn parse_duration(s: &str) -> Result<Duration, ValueError> {
    parse_go_duration(s).map_err(|reason| ValueError::Duration {
        text: s.to_string(),
        reason,
    })
}

pub(super) fn parse_ip(s: &str) -> Result<IpAddr, ValueError> {
    s.trim().parse().map_err(|_| ValueError::Ip(s.to_string()))
}

/// `--node-ip` (the kubelet's ParseNodeIPArgument and validateNodeIP): one address, or an IPv4
/// and an IPv6 one; none loopback, link-local, multicast or unspecified. Whether the address
/// is on an interface of this host is not checked (nanolet does not refuse to start over it).
pub fn parse_node_ips(s: &str) -> Result<Vec<IpAddr>, ValueError> {
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
            return Err(ValueError::NodeIp { ip, kind });
        }
        ips.push(ip);
    }
    match ips.as_slice() {
        [_] => Ok(ips),
        [a, b] if a.is_ipv4() != b.is_ipv4() => Ok(ips),
        [_, _] => Err(ValueError::NodeIpFamilies(s.to_string())),
        _ => Err(ValueError::NodeIpCount(s.to_string())),
    }
}

pub(super) fn parse_port(s: &str) -> Result<u16, ValueError> {
    s.trim()
        .parse()
        .map_err(|_| ValueError::Port(s.to_string()))
}

pub(super) fn port_from_int(n: i64) -> Result<u16, ValueError> {
    u16::try_from(n).map_err(|_| ValueError::PortRange(n))
}

/// `--event-qps`, `--event-burst`: a whole number from 0 to 2^31-1 (int32, not negative).
pub(super) fn parse_event_limit(s: &str) -> Result<u32, ValueError> {
    s.trim()
        .parse::<i64>()
        .map_err(|_| ValueError::Integer(s.to_string()))
        .and_then(event_limit_from_int)
}

pub(super) fn event_limit_from_int(n: i64) -> Result<u32, ValueError> {
    u32::try_from(n)
        .ok()
        .filter(|n| i32::try_from(*n).is_ok())
        .ok_or(ValueError::Negative(n))
}

pub(super) fn parse_log_size(s: &str) -> Result<u64, ValueError> {
    let q = crate::api::quantity::parse_quantity(&serde_json::Value::String(s.to_string()))
        .map_err(ValueError::Quantity)?;
    u64::try_from(q.value())
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| ValueError::Size(s.to_string()))
}

pub(super) fn parse_log_files(s: &str) -> Result<usize, ValueError> {
    s.parse::<usize>()
        .ok()
        .filter(|n| *n >= 2)
        .ok_or_else(|| ValueError::LogFiles(s.to_string()))
}

/// A thread count of the pod worker pool: 1 to 256.
pub(super) fn parse_threads(s: &str) -> Result<usize, ValueError> {
    s.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=256).contains(n))
        .ok_or_else(|| ValueError::Threads(s.to_string()))
}

/// The pool's most threads: 0 (as many as maxPods) to 1024.
pub(super) fn parse_max_threads(s: &str) -> Result<usize, ValueError> {
    s.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| *n <= 1024)
        .ok_or_else(|| ValueError::MaxThreads(s.to_string()))
}

pub(super) fn parse_max_pods(s: &str) -> Result<u32, ValueError> {
    s.trim()
        .parse()
        .map_err(|_| ValueError::MaxPods(s.to_string()))
}

/// `--pod-max-pids`: an integer; zero or less means no limit, as in the kubelet.
pub(super) fn parse_pids_limit(s: &str) -> Result<i64, ValueError> {
    s.trim()
        .parse()
        .map_err(|_| ValueError::PidsLimit(s.to_string()))
}

pub(super) fn max_pods_from_int(n: i64) -> Result<u32, ValueError> {
    u32::try_from(n).map_err(|_| ValueError::MaxPodsRange(n))
}

/// `--v`: 0..=10, larger values are taken as 10.
pub(super) fn parse_verbosity(s: &str) -> Result<u8, ValueError> {
    let v: u64 = s
        .trim()
        .parse()
        .map_err(|_| ValueError::Verbosity(s.to_string()))?;
    Ok(v.min(10) as u8)
}

pub(super) fn parse_percent(s: &str) -> Result<u8, ValueError> {
    match s.trim().parse::<i64>() {
        Ok(n) if (0..=100).contains(&n) => Ok(n as u8),
        _ => Err(ValueError::Percent(s.to_string())),
    }
}

/// A whole number of seconds as the flag gives it (`--eviction-max-pod-grace-period`).
pub(super) fn parse_integer(s: &str) -> Result<i64, ValueError> {
    s.trim()
        .parse()
        .map_err(|_| ValueError::Integer(s.to_string()))
}

pub(super) fn parse_snapshotter(s: &str) -> Result<String, ValueError> {
    if s.is_empty()
        || !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(ValueError::Snapshotter(s.to_string()));
    }
    Ok(s.to_string())
}

pub(super) fn parse_endpoint(s: &str) -> Result<String, ValueError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(ValueError::Empty);
    }
    Ok(s.to_string())
}

pub(super) fn parse_cgroup_driver(s: &str) -> Result<crate::cm::CgroupDriver, ValueError> {
    crate::cm::CgroupDriver::parse(s).map_err(ValueError::CgroupDriver)
}

pub(super) fn parse_swap_behavior(
    s: &str,
) -> Result<crate::kuberuntime::container_linux::SwapBehavior, ValueError> {
    crate::kuberuntime::container_linux::SwapBehavior::parse(s).map_err(ValueError::SwapBehavior)
}

/// `qosReserved` as the kubelet's ParseQOSReserved: only `memory`, a percentage 0-100 with
/// its `%`; `None` when the map is empty.
pub(super) fn parse_qos_reserved(m: &BTreeMap<String, String>) -> Result<Option<i64>, ValueError> {
    let mut memory = None;
    for (k, v) in m {
        if k != "memory" {
            return Err(ValueError::QosReservedResource(k.clone()));
        }
        let bad = |reason: &str| ValueError::QosReservedPercent {
            value: v.clone(),
            reason: reason.into(),
        };
        let digits = v
            .strip_suffix('%')
            .ok_or_else(|| bad(&format!("percentage expected, got '{v}'")))?;
        let p: i64 = digits
            .parse()
            .map_err(|_| bad(&format!("invalid number in percentage '{v}'")))?;
        if !(0..=100).contains(&p) {
            return Err(bad("percentage must be between 0 and 100"));
        }
        memory = Some(p);
    }
    Ok(memory)
}

/// `--allowed-host-paths` / `allowedHostPaths`: absolute, without `..`.
pub(super) fn parse_host_path_prefixes<'a>(
    items: impl Iterator<Item = &'a str>,
) -> Result<Vec<PathBuf>, ValueError> {
    items
        .map(|p| {
            let path = PathBuf::from(p);
            if !path.is_absolute()
                || path
                    .components()
                    .any(|c| c == std::path::Component::ParentDir)
            {
                Err(ValueError::HostPath(p.to_string()))
            } else {
                Ok(path)
            }
        })
        .collect()
}

/// The manifest URL, `None` for an empty one. Errors show it redacted.
pub(super) fn parse_manifest_url(s: &str) -> Result<Option<String>, ValueError> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    let lower = s.to_ascii_lowercase();
    let host = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"));
    match host {
        Some(_) if !cfg!(feature = "tls") && lower.starts_with("https://") => {
            Err(ValueError::UrlNeedsTls(redact_url(s)))
        }
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => Ok(Some(s.to_string())),
        _ => Err(ValueError::Url(redact_url(s))),
    }
}

/// HTTP token characters (RFC 9110) for header names.
fn is_header_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Checks one header; errors never contain the value.
pub(super) fn check_header(name: &str, value: &str) -> Result<(), ValueError> {
    if !is_header_name(name) {
        return Err(ValueError::HeaderName(name.to_string()));
    }
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(ValueError::HeaderValue(name.to_string()));
    }
    Ok(())
}

/// `--manifest-url-header` value: `Name:Value[,Name:Value...]`, split like the kubelet
/// (on ',' then on the first ':', both sides trimmed, empty items skipped).
pub(super) fn parse_header_list(s: &str) -> Result<Vec<(String, String)>, ValueError> {
    let mut out = Vec::new();
    for (i, item) in s.split(',').enumerate() {
        if item.is_empty() {
            continue;
        }
        let Some((name, value)) = item.split_once(':') else {
            return Err(ValueError::MalformedHeader(i + 1));
        };
        let (name, value) = (name.trim(), value.trim());
        check_header(name, value)?;
        out.push((name.to_string(), value.to_string()));
    }
    Ok(out)
}

/// What a JSON value is, for messages.
pub(super) fn yaml_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "a map",
    }
}

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
    pub fn validate(&self) -> Result<(), ValueError> {
        let spec = if self.value.is_empty() {
            format!("{}:{}", self.key, self.effect)
        } else {
            format!("{}={}:{}", self.key, self.value, self.effect)
        };
        if self.key.is_empty() {
            return Err(ValueError::TaintKeyEmpty(spec));
        }
        if let Some(e) = crate::api::validate::qualified_name_errors(&self.key).first() {
            return Err(ValueError::TaintKey {
                spec,
                reason: e.clone(),
            });
        }
        if let Some(e) = crate::api::validate::label_value_errors(&self.value).first() {
            return Err(ValueError::TaintValue {
                spec,
                reason: e.clone(),
            });
        }
        if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&self.effect.as_str()) {
            return Err(ValueError::TaintEffect {
                spec,
                effect: self.effect.clone(),
            });
        }
        Ok(())
    }
}

/// `--register-with-taints`: `<key>=<value>:<effect>` or `<key>:<effect>`, comma separated; a
/// key and effect given twice is an error (the kubelet's `ParseTaints`).
pub fn parse_taints(s: &str) -> Result<Vec<Taint>, ValueError> {
    let mut out: Vec<Taint> = Vec::new();
    for spec in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let Some((kv, effect)) = spec.rsplit_once(':') else {
            return Err(ValueError::TaintSyntax(spec.to_string()));
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

pub(super) fn check_duplicate_taint(seen: &[Taint], t: &Taint) -> Result<(), ValueError> {
    if seen.iter().any(|o| o.key == t.key && o.effect == t.effect) {
        return Err(ValueError::TaintDuplicate {
            key: t.key.clone(),
            effect: t.effect.clone(),
        });
    }
    Ok(())
}

/// A map of strings in the flag form `a=b,c=d` (`field` names it in errors).
pub(super) fn parse_pairs(field: &str, s: &str) -> Result<BTreeMap<String, String>, ValueError> {
    Ok(crate::eviction::threshold::parse_pairs(field, s)?)
}
