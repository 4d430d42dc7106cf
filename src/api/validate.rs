//! Pod defaulting (the apiserver's v1 defaults the kubelet relies on) and validation with
//! field paths and apiserver-style reasons. Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::quantity::{Quantity, parse_quantity};
use super::types::{Container, Pod};

/// One validation failure: `field` is a path like `spec.containers[1].ports[0].containerPort`,
/// `reason` reads like the apiserver's (`Required value`, `Invalid value: "Foo": ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub reason: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

// ---------------------------------------------------------------------------------------------
// Defaulting

/// All defaults: the API-level ones (see [`apply_api_defaults`]) plus namespace `default`
/// (the namespace is set by `config::naming` in the real path).
#[cfg(test)]
pub fn apply_defaults(pod: &mut Pod) {
    apply_api_defaults(pod);
    if pod.metadata.namespace.is_empty() {
        pod.metadata.namespace = "default".to_string();
    }
}

/// The defaults the apiserver's v1 decoding applies (SetDefaults_Pod / _PodSpec / _Container /
/// _Probe ...). The namespace is *not* an API default: the kubelet sets it after hashing the
/// pod for its UID (see `naming`).
pub fn apply_api_defaults(pod: &mut Pod) {
    let spec = &mut pod.spec;
    if spec.restart_policy.is_empty() {
        spec.restart_policy = "Always".to_string();
    }
    if spec.termination_grace_period_seconds.is_none() {
        spec.termination_grace_period_seconds = Some(30);
    }
    if spec.dns_policy.is_empty() {
        spec.dns_policy = "ClusterFirst".to_string();
    }
    if spec.scheduler_name.is_empty() {
        spec.scheduler_name = "default-scheduler".to_string();
    }
    if spec.enable_service_links.is_none() {
        spec.enable_service_links = Some(true);
    }
    // No `priority`: it is not an API default but the Priority admission plugin's, which
    // refuses a pod whose integer priority differs from its class; the kubelet's static pods
    // (and so their mirror pods) leave it unset. `helpers::priority` resolves the built-in
    // classes for nanolet's own use.
    let host_network = spec.host_network;
    for c in spec
        .init_containers
        .iter_mut()
        .chain(spec.containers.iter_mut())
        .chain(spec.ephemeral_containers.iter_mut())
    {
        default_container(c, host_network);
    }
}

fn default_container(c: &mut Container, host_network: bool) {
    if c.image_pull_policy.is_empty() {
        c.image_pull_policy = default_pull_policy(&c.image).to_string();
    }
    if c.termination_message_path.is_empty() {
        c.termination_message_path = "/dev/termination-log".to_string();
    }
    if c.termination_message_policy.is_empty() {
        c.termination_message_policy = "File".to_string();
    }
    for p in &mut c.ports {
        if p.protocol.is_empty() {
            p.protocol = "TCP".to_string();
        }
        if host_network && p.host_port.unwrap_or(0) == 0 {
            p.host_port = Some(p.container_port);
        }
    }
    // Requests default to limits for every resource that has a limit but no request.
    let limits: Vec<(String, Value)> = c
        .resources
        .limits
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in limits {
        c.resources.requests.entry(k).or_insert(v);
    }
    for key in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(Value::Object(probe)) = c.extra.get_mut(key) {
            default_probe(probe);
        }
    }
    if let Some(Value::Object(lifecycle)) = c.extra.get_mut("lifecycle") {
        for hook in ["postStart", "preStop"] {
            if let Some(Value::Object(h)) = lifecycle.get_mut(hook) {
                default_handler(h);
            }
        }
    }
}

fn default_probe(probe: &mut Map<String, Value>) {
    for (k, v) in [
        ("timeoutSeconds", 1),
        ("periodSeconds", 10),
        ("successThreshold", 1),
        ("failureThreshold", 3),
    ] {
        let missing = match probe.get(k) {
            None | Some(Value::Null) => true,
            Some(Value::Number(n)) => n.as_i64() == Some(0),
            _ => false,
        };
        if missing {
            probe.insert(k.to_string(), Value::from(v));
        }
    }
    // Go drops a zero int32 with omitempty: explicit 0 and omitted are the same object.
    if probe.get("initialDelaySeconds").and_then(Value::as_i64) == Some(0) {
        probe.remove("initialDelaySeconds");
    }
    default_handler(probe);
}

fn default_handler(h: &mut Map<String, Value>) {
    if let Some(Value::Object(get)) = h.get_mut("httpGet") {
        let empty = |v: Option<&Value>| {
            matches!(v, None | Some(Value::Null)) || v.and_then(Value::as_str) == Some("")
        };
        if empty(get.get("path")) {
            get.insert("path".to_string(), Value::from("/"));
        }
        if empty(get.get("scheme")) {
            get.insert("scheme".to_string(), Value::from("HTTP"));
        }
    }
}

/// Kubernetes' rule: `Always` when the tag is `latest` or there is neither tag nor digest,
/// else `IfNotPresent` (a digest without a tag means `IfNotPresent`).
pub fn default_pull_policy(image: &str) -> &'static str {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let last_slash = name.rfind('/').map(|i| i + 1).unwrap_or(0);
    let tag = name[last_slash..].rsplit_once(':').map(|(_, t)| t);
    match (tag, digest) {
        (Some("latest"), _) => "Always",
        (Some(_), _) => "IfNotPresent",
        (None, Some(_)) => "IfNotPresent",
        (None, None) => "Always",
    }
}

// ---------------------------------------------------------------------------------------------
// Validation

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric \
characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or \
'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. \
'example.com', regex used for validation is \
'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const QUALIFIED_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or \
'.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or \
'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric \
characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. \
'MyValue',  or 'my_value',  or '12345', regex used for validation is \
'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const TOTAL_ANNOTATION_SIZE: usize = 256 * 1024;

fn quote(s: &str) -> String {
    // Go's %q-ish quoting; serde_json escapes the same characters that matter here.
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

struct Errs(Vec<FieldError>);

impl Errs {
    fn push(&mut self, field: impl Into<String>, reason: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            reason: reason.into(),
        });
    }
    fn required(&mut self, field: impl Into<String>) {
        self.push(field, "Required value");
    }
    fn invalid_str(&mut self, field: impl Into<String>, value: &str, msg: &str) {
        self.push(field, format!("Invalid value: {}: {msg}", quote(value)));
    }
    fn invalid_int(&mut self, field: impl Into<String>, value: i64, msg: &str) {
        self.push(field, format!("Invalid value: {value}: {msg}"));
    }
    fn duplicate(&mut self, field: impl Into<String>, value: &str) {
        self.push(field, format!("Duplicate value: {}", quote(value)));
    }
    fn unsupported(&mut self, field: impl Into<String>, value: &str, supported: &[&str]) {
        let list: Vec<String> = supported.iter().map(|s| quote(s)).collect();
        self.push(
            field,
            format!(
                "Unsupported value: {}: supported values: {}",
                quote(value),
                list.join(", ")
            ),
        );
    }
    fn forbidden(&mut self, field: impl Into<String>, msg: &str) {
        self.push(field, format!("Forbidden: {msg}"));
    }
}

fn is_dns1123_label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Reasons a string is not a DNS-1123 label (≤63), empty when it is one.
pub fn dns1123_label_errors(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push("must be no more than 63 characters".to_string());
    }
    if !is_dns1123_label_chars(s) {
        out.push(DNS1123_LABEL_MSG.to_string());
    }
    out
}

/// Reasons a string is not a DNS-1123 subdomain (≤253), empty when it is one.
pub fn dns1123_subdomain_errors(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 253 {
        out.push("must be no more than 253 characters".to_string());
    }
    if s.is_empty() || !s.split('.').all(is_dns1123_label_chars) {
        out.push(DNS1123_SUBDOMAIN_MSG.to_string());
    }
    out
}

fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// Reasons a label/annotation key is not a qualified name (`[prefix/]name`).
pub fn qualified_name_errors(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            out.push("prefix part must be non-empty".to_string());
        } else {
            for e in dns1123_subdomain_errors(p) {
                out.push(format!("prefix part {e}"));
            }
        }
    }
    if name.is_empty() {
        out.push("name part must be non-empty".to_string());
    } else {
        if name.len() > 63 {
            out.push("name part must be no more than 63 characters".to_string());
        }
        if !is_qualified_name_part(name) {
            out.push(QUALIFIED_NAME_MSG.to_string());
        }
    }
    out
}

pub fn label_value_errors(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push("must be no more than 63 characters".to_string());
    }
    if !s.is_empty() && !is_qualified_name_part(s) {
        out.push(LABEL_VALUE_MSG.to_string());
    }
    out
}

/// IANA_SVC_NAME (port names): ≤15, lowercase alphanumerics and '-', at least one letter.
fn iana_svc_name_errors(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 15 {
        out.push("must be no more than 15 characters".to_string());
    }
    if !s
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    {
        out.push(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string(),
        );
    }
    if s.contains("--") {
        out.push("must not contain consecutive hyphens".to_string());
    }
    if !s.bytes().any(|c| c.is_ascii_lowercase()) {
        out.push("must contain at least one letter (a-z)".to_string());
    }
    if s.starts_with('-') || s.ends_with('-') {
        out.push("must not begin or end with a hyphen".to_string());
    }
    out
}

/// Validate a (defaulted) pod. Returns every problem found, in field order.
pub fn validate(pod: &Pod) -> Vec<FieldError> {
    let mut e = Errs(Vec::new());
    validate_meta(pod, &mut e);
    validate_spec(pod, &mut e);
    e.0
}

fn validate_meta(pod: &Pod, e: &mut Errs) {
    let m = &pod.metadata;
    if m.name.is_empty() {
        e.push(
            "metadata.name",
            "Required value: name or generateName is required",
        );
    } else {
        for msg in dns1123_subdomain_errors(&m.name) {
            e.invalid_str("metadata.name", &m.name, &msg);
        }
    }
    if !m.namespace.is_empty() {
        for msg in dns1123_label_errors(&m.namespace) {
            e.invalid_str("metadata.namespace", &m.namespace, &msg);
        }
    }
    for (k, v) in &m.labels {
        for msg in qualified_name_errors(k) {
            e.invalid_str("metadata.labels", k, &msg);
        }
        for msg in label_value_errors(v) {
            e.invalid_str(format!("metadata.labels[{k}]"), v, &msg);
        }
    }
    let mut total = 0usize;
    for (k, v) in &m.annotations {
        for msg in qualified_name_errors(&k.to_ascii_lowercase()) {
            e.invalid_str("metadata.annotations", k, &msg);
        }
        total = total.saturating_add(k.len()).saturating_add(v.len());
    }
    if total > TOTAL_ANNOTATION_SIZE {
        e.push(
            "metadata.annotations",
            format!("Too long: must have at most {TOTAL_ANNOTATION_SIZE} bytes"),
        );
    }
}

fn validate_spec(pod: &Pod, e: &mut Errs) {
    let s = &pod.spec;
    if s.containers.is_empty() {
        e.required("spec.containers");
    }
    let volumes = validate_volumes(s.extra.get("volumes"), e);

    let mut names: BTreeSet<&str> = BTreeSet::new();
    for (i, c) in s.init_containers.iter().enumerate() {
        validate_container(
            c,
            &format!("spec.initContainers[{i}]"),
            true,
            s.host_network,
            &volumes,
            &mut names,
            e,
        );
    }
    for (i, c) in s.containers.iter().enumerate() {
        validate_container(
            c,
            &format!("spec.containers[{i}]"),
            false,
            s.host_network,
            &volumes,
            &mut names,
            e,
        );
    }
    validate_ephemeral_containers(s, &volumes, &mut names, e);

    if !s.restart_policy.is_empty()
        && !matches!(s.restart_policy.as_str(), "Always" | "OnFailure" | "Never")
    {
        e.unsupported(
            "spec.restartPolicy",
            &s.restart_policy,
            &["Always", "OnFailure", "Never"],
        );
    }
    if !s.dns_policy.is_empty()
        && !matches!(
            s.dns_policy.as_str(),
            "ClusterFirstWithHostNet" | "ClusterFirst" | "Default" | "None"
        )
    {
        e.unsupported(
            "spec.dnsPolicy",
            &s.dns_policy,
            &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
        );
    }
    if let Some(g) = s.termination_grace_period_seconds {
        if g < 0 {
            e.invalid_int(
                "spec.terminationGracePeriodSeconds",
                g,
                "must be greater than or equal to 0",
            );
        }
    }
    if let Some(a) = s.active_deadline_seconds {
        if a < 1 {
            e.invalid_int(
                "spec.activeDeadlineSeconds",
                a,
                "must be between 1 and 2147483647, inclusive",
            );
        }
    }
    if !s.hostname.is_empty() {
        for msg in dns1123_label_errors(&s.hostname) {
            e.invalid_str("spec.hostname", &s.hostname, &msg);
        }
    }
    // validateHostnameOverride (HostnameOverride, beta and on since v1.35).
    if let Some(o) = s.extra.get("hostnameOverride") {
        let o = o.as_str().unwrap_or_default();
        let fp = "spec.hostnameOverride";
        if s.extra.get("setHostnameAsFQDN").and_then(Value::as_bool) == Some(true) {
            e.forbidden(fp, "may not be specified when setHostnameAsFQDN is true");
        }
        if s.host_network {
            e.forbidden(fp, "may not be specified when hostNetwork is true");
        }
        if o.len() > 64 {
            e.push(fp, "Too long: may not be more than 64 bytes");
        }
        for msg in dns1123_subdomain_errors(o) {
            e.invalid_str(fp, o, &msg);
        }
    }

    validate_node_selector(s.extra.get("nodeSelector"), e);
    validate_tolerations(s.extra.get("tolerations"), e);
    validate_topology_spread(s.extra.get("topologySpreadConstraints"), e);

    validate_static_pod_create(s, e);
}

/// ValidatePodSpec's `ValidateLabels(spec.NodeSelector)`: every key a qualified name (a label
/// key), every value a label value; paths and messages as for `metadata.labels`.
fn validate_node_selector(sel: Option<&Value>, e: &mut Errs) {
    let Some(Value::Object(sel)) = sel else {
        return;
    };
    for (k, v) in sel {
        for msg in qualified_name_errors(k) {
            e.invalid_str("spec.nodeSelector", k, &msg);
        }
        let v = v.as_str().unwrap_or_default();
        for msg in label_value_errors(v) {
            e.invalid_str(format!("spec.nodeSelector[{k}]"), v, &msg);
        }
    }
}

/// ValidateTolerations (pkg/apis/core/validation): the key a label key; an empty key only with
/// `Exists`; `tolerationSeconds` only with `NoExecute`; the operator `Equal` (or empty) with a
/// label value, or `Exists` with no value; the effect one of the three taint effects.
fn validate_tolerations(list: Option<&Value>, e: &mut Errs) {
    let Some(Value::Array(list)) = list else {
        return;
    };
    for (i, t) in list.iter().enumerate() {
        let p = format!("spec.tolerations[{i}]");
        let text = |f: &str| t.get(f).and_then(Value::as_str).unwrap_or_default();
        let (key, op, value, effect) =
            (text("key"), text("operator"), text("value"), text("effect"));
        let seconds = t.get("tolerationSeconds").filter(|v| !v.is_null());
        if !key.is_empty() {
            for msg in qualified_name_errors(key) {
                e.invalid_str(format!("{p}.key"), key, &msg);
            }
        }
        if key.is_empty() && op != "Exists" {
            e.invalid_str(
                format!("{p}.operator"),
                op,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            );
        }
        if seconds.is_some() && effect != "NoExecute" {
            e.invalid_str(
                format!("{p}.effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            );
        }
        match op {
            "Equal" | "" => {
                let errs = label_value_errors(value);
                if !errs.is_empty() {
                    e.invalid_str(format!("{p}.operator"), value, &errs.join(";"));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    // Go prints the whole core.Toleration (%#v) as the value.
                    let secs = match seconds.and_then(Value::as_i64) {
                        Some(s) => format!("(*int64)({s})"),
                        None => "(*int64)(nil)".to_string(),
                    };
                    e.push(
                        format!("{p}.operator"),
                        format!(
                            "Invalid value: core.Toleration{{Key:{}, Operator:\"Exists\", Value:{}, Effect:{}, TolerationSeconds:{secs}}}: value must be empty when `operator` is 'Exists'",
                            quote(key),
                            quote(value),
                            quote(effect)
                        ),
                    );
                }
            }
            other => e.unsupported(format!("{p}.operator"), other, &["Equal", "Exists"]),
        }
        if !effect.is_empty() && !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute")
        {
            e.unsupported(
                format!("{p}.effect"),
                effect,
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
            );
        }
    }
}

/// ValidateTopologySpreadConstraints: `maxSkew` > 0, a `topologyKey`, `whenUnsatisfiable`
/// DoNotSchedule or ScheduleAnyway, no repeated {topologyKey, whenUnsatisfiable} pair, and
/// `minDomains` > 0 only with DoNotSchedule.
fn validate_topology_spread(list: Option<&Value>, e: &mut Errs) {
    const NOT_POSITIVE: &str = "must be greater than zero";
    let Some(Value::Array(list)) = list else {
        return;
    };
    let pair = |c: &Value| {
        let text = |f: &str| {
            c.get(f)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        (text("topologyKey"), text("whenUnsatisfiable"))
    };
    for (i, c) in list.iter().enumerate() {
        let p = format!("spec.topologySpreadConstraints[{i}]");
        let skew = c.get("maxSkew").and_then(Value::as_i64).unwrap_or(0);
        if skew <= 0 {
            e.invalid_int(format!("{p}.maxSkew"), skew, NOT_POSITIVE);
        }
        let (key, action) = pair(c);
        if key.is_empty() {
            e.push(
                format!("{p}.topologyKey"),
                "Required value: can not be empty",
            );
        }
        if !matches!(action.as_str(), "DoNotSchedule" | "ScheduleAnyway") {
            e.unsupported(
                format!("{p}.whenUnsatisfiable"),
                &action,
                &["DoNotSchedule", "ScheduleAnyway"],
            );
        }
        if list[i + 1..]
            .iter()
            .any(|o| pair(o) == (key.clone(), action.clone()))
        {
            e.duplicate(
                format!("{p}.{{topologyKey, whenUnsatisfiable}}"),
                &format!("{{{key}, {action}}}"),
            );
        }
        if let Some(min) = c.get("minDomains").and_then(Value::as_i64) {
            if min <= 0 {
                e.invalid_int(format!("{p}.minDomains"), min, NOT_POSITIVE);
            }
            if action != "DoNotSchedule" {
                e.invalid_int(
                    format!("{p}.minDomains"),
                    min,
                    &format!(
                        "can only use minDomains if whenUnsatisfiable=DoNotSchedule, not {action}"
                    ),
                );
            }
        }
    }
}

/// What the kubelet refuses when it creates a static pod: fields set only through the API and
/// references to API objects.
fn validate_static_pod_create(s: &super::types::PodSpec, e: &mut Errs) {
    // ValidatePodCreate, which the kubelet runs on static pods after setting spec.nodeName.
    if !s.ephemeral_containers.is_empty() {
        e.forbidden("spec.ephemeralContainers", "cannot be set on create");
    }
    if s.extra
        .get("schedulingGates")
        .and_then(Value::as_array)
        .is_some_and(|l| !l.is_empty())
    {
        // A static pod's nodeName is always set (to this node) before validation.
        e.forbidden(
            "spec.nodeName",
            "cannot be set until all schedulingGates have been cleared",
        );
    }
    if s.extra
        .get("resourceClaims")
        .and_then(Value::as_array)
        .is_some_and(|l| !l.is_empty())
    {
        e.forbidden(
            "spec.resourceClaims",
            "static pods may not reference ResourceClaims (kubelet refuses)",
        );
    }

    // Static-pod restrictions: the kubelet refuses pods that reference API objects.
    if !s.service_account_name.is_empty() {
        e.forbidden(
            "spec.serviceAccountName",
            "static pods may not reference a ServiceAccount (kubelet refuses)",
        );
    }
    if let Some(Value::String(sa)) = s.extra.get("serviceAccount") {
        if !sa.is_empty() {
            e.forbidden(
                "spec.serviceAccount",
                "static pods may not reference a ServiceAccount (kubelet refuses)",
            );
        }
    }
}

/// Volume names (validated), for volumeMount lookups; also the static-pod reference checks.
fn validate_volumes<'a>(v: Option<&'a Value>, e: &mut Errs) -> BTreeSet<&'a str> {
    let mut names = BTreeSet::new();
    let Some(v) = v else { return names };
    let Value::Array(list) = v else {
        e.push("spec.volumes", "Invalid value: must be a list");
        return names;
    };
    for (i, vol) in list.iter().enumerate() {
        let path = format!("spec.volumes[{i}]");
        let Value::Object(obj) = vol else {
            e.push(path, "Invalid value: must be an object");
            continue;
        };
        match obj.get("name").and_then(Value::as_str) {
            None | Some("") => e.required(format!("{path}.name")),
            Some(n) => {
                for msg in dns1123_label_errors(n) {
                    e.invalid_str(format!("{path}.name"), n, &msg);
                }
                if !names.insert(n) {
                    e.duplicate(format!("{path}.name"), n);
                }
            }
        }
        if obj.contains_key("persistentVolumeClaim") {
            e.forbidden(
                format!("{path}.persistentVolumeClaim"),
                "static pods may not reference PersistentVolumeClaims (kubelet refuses)",
            );
        }
        if obj.contains_key("ephemeral") {
            e.forbidden(
                format!("{path}.ephemeral"),
                "static pods may not use generic ephemeral volumes: their PersistentVolumeClaims come from the API (kubelet refuses)",
            );
        }
        if let Some(Value::Array(sources)) = obj.get("projected").and_then(|p| p.get("sources")) {
            for (j, src) in sources.iter().enumerate() {
                let sp = format!("{path}.projected.sources[{j}]");
                if src.get("serviceAccountToken").is_some() {
                    e.forbidden(
                        format!("{sp}.serviceAccountToken"),
                        "static pods may not reference a ServiceAccount (kubelet refuses)",
                    );
                }
                if src.get("clusterTrustBundle").is_some() {
                    e.forbidden(
                        format!("{sp}.clusterTrustBundle"),
                        "static pods may not reference ClusterTrustBundles (kubelet refuses)",
                    );
                }
                if src.get("podCertificate").is_some() {
                    e.forbidden(
                        format!("{sp}.podCertificate"),
                        "static pods may not use podCertificate projections (kubelet refuses)",
                    );
                }
            }
        }
    }
    names
}

fn validate_container<'a>(
    c: &'a Container,
    path: &str,
    is_init: bool,
    host_network: bool,
    volumes: &BTreeSet<&str>,
    names: &mut BTreeSet<&'a str>,
    e: &mut Errs,
) {
    if c.name.is_empty() {
        e.required(format!("{path}.name"));
    } else {
        for msg in dns1123_label_errors(&c.name) {
            e.invalid_str(format!("{path}.name"), &c.name, &msg);
        }
        if !names.insert(c.name.as_str()) {
            e.duplicate(format!("{path}.name"), &c.name);
        }
    }
    if c.image.trim().is_empty() {
        e.required(format!("{path}.image"));
    }
    if !c.image_pull_policy.is_empty()
        && !matches!(
            c.image_pull_policy.as_str(),
            "Always" | "IfNotPresent" | "Never"
        )
    {
        e.unsupported(
            format!("{path}.imagePullPolicy"),
            &c.image_pull_policy,
            &["Always", "IfNotPresent", "Never"],
        );
    }
    if !c.termination_message_policy.is_empty()
        && !matches!(
            c.termination_message_policy.as_str(),
            "File" | "FallbackToLogsOnError"
        )
    {
        e.unsupported(
            format!("{path}.terminationMessagePolicy"),
            &c.termination_message_policy,
            &["File", "FallbackToLogsOnError"],
        );
    }
    match (&c.restart_policy, is_init) {
        (None, _) => {}
        // An ephemeral container's restartPolicy is refused by its own rules (below).
        (Some(_), false) if path.starts_with("spec.ephemeralContainers") => {}
        (Some(_), false) => e.forbidden(
            format!("{path}.restartPolicy"),
            "may not be set for non-init containers",
        ),
        (Some(p), true) if p != "Always" => {
            e.unsupported(format!("{path}.restartPolicy"), p, &["Always"])
        }
        _ => {}
    }

    validate_ports(c, path, host_network, e);
    validate_env_and_mounts(c, path, volumes, e);
    validate_resources(c, path, e);
}

/// The fields of `EphemeralContainerCommon` an ephemeral container may not set, in the
/// struct's order, with what makes one set (not its Go zero value).
const EPHEMERAL_FORBIDDEN: &[&str] = &[
    "ports",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "restartPolicyRules",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
];

/// ValidatePodSpec's `validateEphemeralContainers`: the common container rules, a name unique
/// across every container type, a `targetContainerName` naming a regular or init container,
/// the fields outside `allowedEphemeralContainerFields` unset ("cannot be set for an Ephemeral
/// Container"), and no volumeMount `subPath` / `subPathExpr`.
fn validate_ephemeral_containers<'a>(
    s: &'a super::types::PodSpec,
    volumes: &BTreeSet<&str>,
    names: &mut BTreeSet<&'a str>,
    e: &mut Errs,
) {
    const WHY: &str = "cannot be set for an Ephemeral Container";
    let others: BTreeSet<&str> = s
        .init_containers
        .iter()
        .chain(&s.containers)
        .map(|c| c.name.as_str())
        .collect();
    for (i, c) in s.ephemeral_containers.iter().enumerate() {
        let path = format!("spec.ephemeralContainers[{i}]");
        validate_container(c, &path, false, s.host_network, volumes, names, e);
        let target = c.target_container_name();
        if !target.is_empty() && !others.contains(target) {
            e.push(
                format!("{path}.targetContainerName"),
                format!("Not found: {}", quote(target)),
            );
        }
        for field in EPHEMERAL_FORBIDDEN {
            let set = match *field {
                "ports" => !c.ports.is_empty(),
                "resources" => !c.resources.is_empty(),
                "restartPolicy" => c.restart_policy.is_some(),
                other => c.extra.get(other).is_some_and(|v| !v.is_null()),
            };
            if set {
                e.forbidden(format!("{path}.{field}"), WHY);
            }
        }
        if let Some(Value::Array(mounts)) = c.extra.get("volumeMounts") {
            for (j, m) in mounts.iter().enumerate() {
                for key in ["subPath", "subPathExpr"] {
                    if m.get(key)
                        .and_then(Value::as_str)
                        .is_some_and(|v| !v.is_empty())
                    {
                        e.forbidden(format!("{path}.volumeMounts[{j}].{key}"), WHY);
                    }
                }
            }
        }
    }
}

/// A container's ports: numbers, protocols and unique names.
fn validate_ports(c: &Container, path: &str, host_network: bool, e: &mut Errs) {
    let mut port_names: BTreeSet<&str> = BTreeSet::new();
    for (j, p) in c.ports.iter().enumerate() {
        let pp = format!("{path}.ports[{j}]");
        if !(1..=65535).contains(&p.container_port) {
            e.invalid_int(
                format!("{pp}.containerPort"),
                i64::from(p.container_port),
                "must be between 1 and 65535, inclusive",
            );
        }
        if let Some(h) = p.host_port {
            if !(0..=65535).contains(&h) {
                e.invalid_int(
                    format!("{pp}.hostPort"),
                    i64::from(h),
                    "must be between 0 and 65535, inclusive",
                );
            } else if host_network && h != 0 && h != p.container_port {
                e.invalid_int(
                    format!("{pp}.hostPort"),
                    i64::from(h),
                    "must match `containerPort` when `hostNetwork` is true",
                );
            }
        }
        if p.protocol.is_empty() {
            e.required(format!("{pp}.protocol"));
        } else if !matches!(p.protocol.as_str(), "TCP" | "UDP" | "SCTP") {
            e.unsupported(
                format!("{pp}.protocol"),
                &p.protocol,
                &["SCTP", "TCP", "UDP"],
            );
        }
        if !p.name.is_empty() {
            for msg in iana_svc_name_errors(&p.name) {
                e.invalid_str(format!("{pp}.name"), &p.name, &msg);
            }
            if !port_names.insert(p.name.as_str()) {
                e.duplicate(format!("{pp}.name"), &p.name);
            }
        }
    }
}

/// A container's environment variable names and its volume mounts (of the pod's `volumes`).
fn validate_env_and_mounts(c: &Container, path: &str, volumes: &BTreeSet<&str>, e: &mut Errs) {
    for (j, env) in c.env.iter().enumerate() {
        let ep = format!("{path}.env[{j}]");
        if env.name.is_empty() {
            e.required(format!("{ep}.name"));
        } else if env.name.contains('=') || env.name.chars().any(char::is_control) {
            e.invalid_str(
                format!("{ep}.name"),
                &env.name,
                "a valid environment variable name must consist only of printable ASCII characters other than '='",
            );
        }
        if env.value_from.is_some() && env.value.as_deref().is_some_and(|v| !v.is_empty()) {
            e.invalid_str(
                format!("{ep}.valueFrom"),
                "",
                "may not be specified when `value` is not empty",
            );
        }
    }
    if let Some(Value::Array(mounts)) = c.extra.get("volumeMounts") {
        for (j, m) in mounts.iter().enumerate() {
            let mp = format!("{path}.volumeMounts[{j}]");
            match m.get("name").and_then(Value::as_str) {
                None | Some("") => e.required(format!("{mp}.name")),
                Some(n) if !volumes.contains(n) => {
                    e.push(format!("{mp}.name"), format!("Not found: {}", quote(n)))
                }
                _ => {}
            }
            match m.get("mountPath").and_then(Value::as_str) {
                None | Some("") => e.required(format!("{mp}.mountPath")),
                _ => {}
            }
            // validateMountRecursiveReadOnly.
            let rp = format!("{mp}.recursiveReadOnly");
            match m.get("recursiveReadOnly").and_then(Value::as_str) {
                None | Some("Disabled") => {}
                Some("Enabled" | "IfPossible") => {
                    if m.get("readOnly").and_then(Value::as_bool) != Some(true) {
                        e.forbidden(&rp, "may only be specified when readOnly is true");
                    }
                    if m.get("mountPropagation")
                        .and_then(Value::as_str)
                        .is_some_and(|p| p != "None")
                    {
                        e.forbidden(
                            &rp,
                            "may only be specified when mountPropagation is None or not specified",
                        );
                    }
                }
                Some(other) => {
                    e.unsupported(&rp, other, &["Disabled", "Enabled", "IfPossible"]);
                }
            }
        }
    }
}

fn validate_resources(c: &Container, path: &str, e: &mut Errs) {
    let mut parse_all = |kind: &str, map: &BTreeMap<String, Value>| -> BTreeMap<String, Quantity> {
        let mut out = BTreeMap::new();
        for (k, v) in map {
            let fp = format!("{path}.resources.{kind}[{k}]");
            if k.is_empty() {
                e.required(format!("{path}.resources.{kind}"));
                continue;
            }
            match parse_quantity(v) {
                Ok(q) if q.is_negative() => {
                    e.push(
                        fp,
                        format!(
                            "Invalid value: {}: must be greater than or equal to 0",
                            display_value(v)
                        ),
                    );
                }
                Ok(q) => {
                    out.insert(k.clone(), q);
                }
                Err(msg) => e.push(fp, format!("Invalid value: {}: {msg}", display_value(v))),
            }
        }
        out
    };
    let limits = parse_all("limits", &c.resources.limits);
    let requests = parse_all("requests", &c.resources.requests);
    for (k, req) in &requests {
        if let Some(lim) = limits.get(k) {
            if req.cmp_value(lim) == std::cmp::Ordering::Greater {
                let shown = c
                    .resources
                    .requests
                    .get(k)
                    .map(display_value)
                    .unwrap_or_default();
                let lim_shown = c
                    .resources
                    .limits
                    .get(k)
                    .map(display_value)
                    .unwrap_or_default();
                e.push(
                    format!("{path}.resources.requests[{k}]"),
                    format!("Invalid value: {shown}: must be less than or equal to {k} limit of {lim_shown}"),
                );
            }
        }
    }
}

fn display_value(v: &Value) -> String {
    match v {
        Value::String(s) => quote(s),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::types::{ContainerPort, EnvVar};
    use serde_json::json;

    fn pod() -> Pod {
        let mut p = Pod::default();
        p.metadata.name = "web".into();
        p.spec.containers.push(Container {
            name: "c".into(),
            image: "busybox:1.36".into(),
            ..Default::default()
        });
        p
    }

    fn fields(p: &Pod) -> Vec<String> {
        validate(p).into_iter().map(|e| e.field).collect()
    }

    fn reason_for(p: &Pod, field: &str) -> String {
        validate(p)
            .into_iter()
            .find(|e| e.field == field)
            .map(|e| e.reason)
            .unwrap_or_default()
    }

    /// validateHostnameOverride: a DNS-1123 subdomain of at most 64 bytes, not with
    /// setHostnameAsFQDN nor hostNetwork.
    #[test]
    fn hostname_override_follows_validate_hostname_override() {
        let mut p = pod();
        p.spec
            .extra
            .insert("hostnameOverride".into(), json!("override.example.host"));
        assert!(!fields(&p).contains(&"spec.hostnameOverride".to_string()));
        p.spec
            .extra
            .insert("hostnameOverride".into(), json!("Not-RFC1123"));
        assert!(
            reason_for(&p, "spec.hostnameOverride")
                .starts_with("Invalid value: \"Not-RFC1123\": a lowercase RFC 1123 subdomain"),
            "{:?}",
            validate(&p)
        );
        p.spec
            .extra
            .insert("hostnameOverride".into(), json!("override-host"));
        p.spec.host_network = true;
        assert_eq!(
            reason_for(&p, "spec.hostnameOverride"),
            "Forbidden: may not be specified when hostNetwork is true"
        );
        p.spec.host_network = false;
        p.spec.extra.insert("setHostnameAsFQDN".into(), json!(true));
        assert_eq!(
            reason_for(&p, "spec.hostnameOverride"),
            "Forbidden: may not be specified when setHostnameAsFQDN is true"
        );
    }

    /// validateMountRecursiveReadOnly: Enabled/IfPossible only on a readOnly mount without
    /// propagation; an unknown mode is NotSupported.
    #[test]
    fn recursive_read_only_follows_validate_mount_recursive_read_only() {
        let mut p = pod();
        p.spec
            .extra
            .insert("volumes".into(), json!([{"name": "v", "emptyDir": {}}]));
        p.spec.containers[0].extra.insert(
            "volumeMounts".into(),
            json!([
                {"name": "v", "mountPath": "/a", "readOnly": true, "recursiveReadOnly": "Enabled"},
                {"name": "v", "mountPath": "/b", "recursiveReadOnly": "IfPossible"},
                {"name": "v", "mountPath": "/c", "readOnly": true, "recursiveReadOnly": "Enabled", "mountPropagation": "HostToContainer"},
                {"name": "v", "mountPath": "/d", "readOnly": true, "recursiveReadOnly": "Always"}
            ]),
        );
        let f = |i: usize| format!("spec.containers[0].volumeMounts[{i}].recursiveReadOnly");
        assert!(!fields(&p).contains(&f(0)), "{:?}", validate(&p));
        assert_eq!(
            reason_for(&p, &f(1)),
            "Forbidden: may only be specified when readOnly is true"
        );
        assert_eq!(
            reason_for(&p, &f(2)),
            "Forbidden: may only be specified when mountPropagation is None or not specified"
        );
        assert!(reason_for(&p, &f(3)).starts_with("Unsupported value: \"Always\""));
    }

    /// ValidateTolerations: an unknown operator is NotSupported at `.operator` (Equal, Exists);
    /// an empty key needs Exists; an unknown effect is NotSupported; the key is a label key.
    #[test]
    fn tolerations_follow_validate_tolerations() {
        let mut p = pod();
        p.spec.extra.insert(
            "tolerations".into(),
            json!([
                {"key": "k", "operator": "Bogus"},
                {"operator": "Equal", "value": "v"},
                {"key": "k", "operator": "Exists", "effect": "Sometimes"},
                {"key": "bad key", "operator": "Equal", "value": "v", "effect": "NoSchedule", "tolerationSeconds": 5},
                {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5},
                {"operator": "Exists"}
            ]),
        );
        assert_eq!(
            reason_for(&p, "spec.tolerations[0].operator"),
            "Unsupported value: \"Bogus\": supported values: \"Equal\", \"Exists\""
        );
        assert_eq!(
            reason_for(&p, "spec.tolerations[1].operator"),
            "Invalid value: \"Equal\": operator must be Exists when `key` is empty, which means \"match all values and all keys\""
        );
        assert_eq!(
            reason_for(&p, "spec.tolerations[2].effect"),
            "Unsupported value: \"Sometimes\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\""
        );
        assert!(
            reason_for(&p, "spec.tolerations[3].key").starts_with("Invalid value: \"bad key\": ")
        );
        assert_eq!(
            reason_for(&p, "spec.tolerations[3].effect"),
            "Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is set"
        );
        let f = fields(&p);
        assert!(
            !f.iter()
                .any(|f| f.starts_with("spec.tolerations[4]")
                    || f.starts_with("spec.tolerations[5]")),
            "{f:?}"
        );
    }

    /// ValidatePodSpec: `ValidateLabels(spec.NodeSelector)`, keys must be label keys.
    #[test]
    fn node_selector_keys_must_be_label_keys() {
        let mut p = pod();
        p.spec.extra.insert(
            "nodeSelector".into(),
            json!({"not a key!": "x", "disk": "ssd", "zone": "bad value!"}),
        );
        assert_eq!(
            validate(&p)
                .into_iter()
                .map(|e| (
                    e.field,
                    e.reason.split(':').take(2).collect::<Vec<_>>().join(":")
                ))
                .collect::<Vec<_>>(),
            vec![
                (
                    "spec.nodeSelector".to_string(),
                    "Invalid value: \"not a key!\"".to_string()
                ),
                (
                    "spec.nodeSelector[zone]".to_string(),
                    "Invalid value: \"bad value!\"".to_string()
                ),
            ]
        );
    }

    /// ValidateTopologySpreadConstraints: ValidateMaxSkew, ValidateTopologyKey,
    /// ValidateWhenUnsatisfiable, ValidateSpreadConstraintNotRepeat.
    #[test]
    fn topology_spread_constraints_follow_upstream_rules() {
        let mut p = pod();
        p.spec.extra.insert(
            "topologySpreadConstraints".into(),
            json!([
                {"maxSkew": 0, "topologyKey": "", "whenUnsatisfiable": "Nope"},
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
            ]),
        );
        let p0 = "spec.topologySpreadConstraints[0]";
        assert_eq!(
            reason_for(&p, &format!("{p0}.maxSkew")),
            "Invalid value: 0: must be greater than zero"
        );
        assert_eq!(
            reason_for(&p, &format!("{p0}.topologyKey")),
            "Required value: can not be empty"
        );
        assert_eq!(
            reason_for(&p, &format!("{p0}.whenUnsatisfiable")),
            "Unsupported value: \"Nope\": supported values: \"DoNotSchedule\", \"ScheduleAnyway\""
        );
        assert_eq!(
            reason_for(
                &p,
                "spec.topologySpreadConstraints[1].{topologyKey, whenUnsatisfiable}"
            ),
            "Duplicate value: \"{zone, DoNotSchedule}\""
        );
        assert_eq!(fields(&p).len(), 4, "{:?}", validate(&p));
    }

    #[test]
    fn defaults() {
        let mut p = pod();
        p.spec.host_network = true;
        p.spec.containers[0].ports.push(ContainerPort {
            container_port: 80,
            ..Default::default()
        });
        p.spec.containers[0]
            .resources
            .limits
            .insert("cpu".into(), json!("500m"));
        p.spec.containers[0].extra.insert(
            "livenessProbe".into(),
            json!({"httpGet": {"port": 80}, "initialDelaySeconds": 0}),
        );
        apply_defaults(&mut p);
        assert_eq!(p.metadata.namespace, "default");
        assert_eq!(p.spec.restart_policy, "Always");
        assert_eq!(p.spec.termination_grace_period_seconds, Some(30));
        assert_eq!(p.spec.dns_policy, "ClusterFirst");
        assert_eq!(p.spec.scheduler_name, "default-scheduler");
        assert_eq!(p.spec.enable_service_links, Some(true));
        // The Priority admission plugin sets priority, not defaulting (and it refuses a pod
        // whose integer priority differs from its class): static pods leave it unset.
        assert_eq!(p.spec.priority, None);
        let mut crit = p.clone();
        crit.spec.priority_class_name = "system-node-critical".into();
        apply_defaults(&mut crit);
        assert_eq!(crit.spec.priority, None);
        assert_eq!(crate::api::helpers::priority(&crit), 2_000_001_000);
        let c = &p.spec.containers[0];
        assert_eq!(c.image_pull_policy, "IfNotPresent");
        assert_eq!(c.termination_message_path, "/dev/termination-log");
        assert_eq!(c.termination_message_policy, "File");
        assert_eq!(c.ports[0].protocol, "TCP");
        assert_eq!(c.ports[0].host_port, Some(80));
        assert_eq!(c.resources.requests.get("cpu"), Some(&json!("500m")));
        assert_eq!(
            c.extra.get("livenessProbe"),
            Some(
                &json!({"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"}, "timeoutSeconds": 1,
                "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
            )
        );
        assert!(validate(&p).is_empty(), "{:?}", validate(&p));
    }

    #[test]
    fn pull_policy_rule() {
        for (img, want) in [
            ("busybox", "Always"),
            ("busybox:latest", "Always"),
            ("busybox:1.36", "IfNotPresent"),
            ("localhost:5000/busybox", "Always"),
            ("localhost:5000/busybox:1", "IfNotPresent"),
            ("busybox@sha256:abcd", "IfNotPresent"),
            ("busybox:latest@sha256:abcd", "Always"),
            ("", "Always"),
        ] {
            assert_eq!(default_pull_policy(img), want, "{img}");
        }
    }

    #[test]
    fn names() {
        let mut p = pod();
        p.metadata.name = "Foo".into();
        assert!(
            reason_for(&p, "metadata.name")
                .starts_with("Invalid value: \"Foo\": a lowercase RFC 1123 subdomain")
        );
        p.metadata.name = String::new();
        assert!(reason_for(&p, "metadata.name").starts_with("Required value"));
        p.metadata.name = "a".repeat(254);
        assert!(
            validate(&p)
                .iter()
                .any(|e| e.reason.contains("no more than 253"))
        );
        p.metadata.name = "a.b-c".into();
        p.metadata.namespace = "a.b".into();
        assert_eq!(fields(&p), vec!["metadata.namespace"]);
    }

    #[test]
    fn containers() {
        let mut p = pod();
        p.spec.containers.clear();
        assert_eq!(fields(&p), vec!["spec.containers"]);
        let mut p = pod();
        p.spec.init_containers.push(Container {
            name: "c".into(),
            image: "x".into(),
            ..Default::default()
        });
        p.spec.containers.push(Container {
            name: "Bad_Name".into(),
            ..Default::default()
        });
        let errs = validate(&p);
        assert!(
            errs.iter()
                .any(|e| e.field == "spec.containers[0].name"
                    && e.reason == "Duplicate value: \"c\"")
        );
        assert!(
            errs.iter().any(
                |e| e.field == "spec.containers[1].name" && e.reason.contains("RFC 1123 label")
            )
        );
        assert!(
            errs.iter()
                .any(|e| e.field == "spec.containers[1].image" && e.reason == "Required value")
        );
    }

    #[test]
    fn ports() {
        let mut p = pod();
        let c = &mut p.spec.containers[0];
        c.ports.push(ContainerPort {
            container_port: 0,
            protocol: "TCP".into(),
            ..Default::default()
        });
        c.ports.push(ContainerPort {
            name: "http".into(),
            container_port: 80,
            host_port: Some(70000),
            protocol: "ICMP".into(),
            ..Default::default()
        });
        c.ports.push(ContainerPort {
            name: "http".into(),
            container_port: 81,
            protocol: "UDP".into(),
            ..Default::default()
        });
        c.ports.push(ContainerPort {
            name: "123".into(),
            container_port: 82,
            protocol: "TCP".into(),
            ..Default::default()
        });
        let errs = validate(&p);
        let get = |f: &str| {
            errs.iter()
                .filter(|e| e.field == f)
                .map(|e| e.reason.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            get("spec.containers[0].ports[0].containerPort"),
            vec!["Invalid value: 0: must be between 1 and 65535, inclusive"]
        );
        assert_eq!(
            get("spec.containers[0].ports[1].hostPort"),
            vec!["Invalid value: 70000: must be between 0 and 65535, inclusive"]
        );
        assert_eq!(
            get("spec.containers[0].ports[1].protocol"),
            vec!["Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\""]
        );
        assert_eq!(
            get("spec.containers[0].ports[2].name"),
            vec!["Duplicate value: \"http\""]
        );
        assert_eq!(
            get("spec.containers[0].ports[3].name"),
            vec!["Invalid value: \"123\": must contain at least one letter (a-z)"]
        );
    }

    #[test]
    fn policies_and_numbers() {
        let mut p = pod();
        p.spec.restart_policy = "Sometimes".into();
        p.spec.termination_grace_period_seconds = Some(-1);
        p.spec.active_deadline_seconds = Some(0);
        p.spec.containers[0].restart_policy = Some("Always".into());
        p.spec.init_containers.push(Container {
            name: "init".into(),
            image: "x".into(),
            restart_policy: Some("Never".into()),
            ..Default::default()
        });
        assert_eq!(
            reason_for(&p, "spec.restartPolicy"),
            "Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""
        );
        assert_eq!(
            reason_for(&p, "spec.terminationGracePeriodSeconds"),
            "Invalid value: -1: must be greater than or equal to 0"
        );
        assert!(reason_for(&p, "spec.activeDeadlineSeconds").starts_with("Invalid value: 0"));
        assert_eq!(
            reason_for(&p, "spec.containers[0].restartPolicy"),
            "Forbidden: may not be set for non-init containers"
        );
        assert_eq!(
            reason_for(&p, "spec.initContainers[0].restartPolicy"),
            "Unsupported value: \"Never\": supported values: \"Always\""
        );
    }

    #[test]
    fn env_and_resources() {
        let mut p = pod();
        let c = &mut p.spec.containers[0];
        c.env.push(EnvVar {
            name: String::new(),
            value: Some("x".into()),
            value_from: None,
        });
        c.env.push(EnvVar {
            name: "A=B".into(),
            value: None,
            value_from: None,
        });
        c.env.push(EnvVar {
            name: "S".into(),
            value: None,
            value_from: Some(json!({"secretKeyRef": {"name": "s", "key": "k"}})),
        });
        c.resources.limits.insert("memory".into(), json!("64Mi"));
        c.resources.requests.insert("memory".into(), json!("128Mi"));
        c.resources.requests.insert("cpu".into(), json!("lots"));
        let errs = validate(&p);
        let fs: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert!(fs.contains(&"spec.containers[0].env[0].name"));
        assert!(fs.contains(&"spec.containers[0].env[1].name"));
        // secretKeyRef resolves against the local store (nanolet goes beyond the kubelet).
        assert!(!fs.contains(&"spec.containers[0].env[2].valueFrom.secretKeyRef"));
        assert!(fs.contains(&"spec.containers[0].resources.requests[cpu]"));
        assert_eq!(
            reason_for(&p, "spec.containers[0].resources.requests[memory]"),
            "Invalid value: \"128Mi\": must be less than or equal to memory limit of \"64Mi\""
        );
    }

    #[test]
    fn validate_pod_create_and_api_references_refused_as_by_the_kubelet() {
        // ValidatePodCreate (run by the kubelet on static pods, after it set spec.nodeName) and
        // the references only an API server can resolve.
        let mut p = pod();
        p.spec.ephemeral_containers = vec![Container {
            name: "debug".into(),
            image: "busybox".into(),
            ..Default::default()
        }];
        p.spec
            .extra
            .insert("schedulingGates".into(), json!([{"name": "wait"}]));
        p.spec.extra.insert(
            "resourceClaims".into(),
            json!([{"name": "gpu", "resourceClaimName": "gpu-0"}]),
        );
        p.spec.extra.insert(
            "volumes".into(),
            json!([
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}},
                {"name": "certs", "projected": {"sources": [{"clusterTrustBundle": {"name": "b", "path": "b.pem"}}, {"podCertificate": {"signerName": "x/y", "keyType": "ED25519", "credentialBundlePath": "c"}}]}}
            ]),
        );
        assert_eq!(
            reason_for(&p, "spec.ephemeralContainers"),
            "Forbidden: cannot be set on create"
        );
        assert_eq!(
            reason_for(&p, "spec.nodeName"),
            "Forbidden: cannot be set until all schedulingGates have been cleared"
        );
        let fs = fields(&p);
        for f in [
            "spec.resourceClaims",
            "spec.volumes[0].ephemeral",
            "spec.volumes[1].projected.sources[0].clusterTrustBundle",
            "spec.volumes[1].projected.sources[1].podCertificate",
        ] {
            assert!(fs.iter().any(|x| x == f), "missing {f} in {fs:?}");
        }
        // Empty lists are fine.
        let mut ok = pod();
        ok.spec.extra.insert("schedulingGates".into(), json!([]));
        let ok: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"schedulingGates": [], "ephemeralContainers": [],
                     "containers": ok.spec.containers}
        }))
        .expect("decodes");
        assert!(fields(&ok).is_empty(), "{:?}", fields(&ok));
    }

    /// validation.go validateEphemeralContainers (ValidatePodSpec, which the kubelet runs on a
    /// static pod through ValidatePodCreate beside "cannot be set on create"): names unique
    /// across all container types, targetContainerName a regular or init container, the fields
    /// outside allowedEphemeralContainerFields (ports, resources, restartPolicy, probes,
    /// lifecycle) "cannot be set for an Ephemeral Container", no volumeMount subPath.
    #[test]
    fn ephemeral_containers_forbid_ports_probes_resources_lifecycle() {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [{"name": "app", "image": "busybox"}],
                "volumes": [{"name": "v", "emptyDir": {}}],
                "ephemeralContainers": [
                    {"name": "debug", "image": "busybox", "targetContainerName": "missing",
                     "ports": [{"containerPort": 80}],
                     "resources": {"limits": {"cpu": "1"}},
                     "restartPolicy": "Always",
                     "livenessProbe": {"exec": {"command": ["true"]}},
                     "readinessProbe": {"exec": {"command": ["true"]}},
                     "startupProbe": {"exec": {"command": ["true"]}},
                     "lifecycle": {"preStop": {"exec": {"command": ["true"]}}},
                     "volumeMounts": [{"name": "v", "mountPath": "/v", "subPath": "x"}]},
                    {"name": "app", "image": "busybox", "targetContainerName": "app"}
                ]
            }
        }))
        .expect("decodes");
        let why = "Forbidden: cannot be set for an Ephemeral Container";
        for f in [
            "ports",
            "resources",
            "restartPolicy",
            "livenessProbe",
            "readinessProbe",
            "startupProbe",
            "lifecycle",
            "volumeMounts[0].subPath",
        ] {
            assert_eq!(
                reason_for(&p, &format!("spec.ephemeralContainers[0].{f}")),
                why
            );
        }
        assert_eq!(
            reason_for(&p, "spec.ephemeralContainers[0].targetContainerName"),
            "Not found: \"missing\""
        );
        assert_eq!(
            reason_for(&p, "spec.ephemeralContainers[1].name"),
            "Duplicate value: \"app\""
        );
        // A valid target and no forbidden field: only the create rule remains.
        let fs = fields(&p);
        assert!(
            !fs.iter()
                .any(|f| f == "spec.ephemeralContainers[1].targetContainerName")
        );
        assert!(fs.iter().any(|f| f == "spec.ephemeralContainers"));
    }

    #[test]
    fn static_pod_references_refused() {
        let mut p = pod();
        p.spec.service_account_name = "sa".into();
        p.spec.extra.insert(
            "volumes".into(),
            json!([
                {"name": "a", "configMap": {"name": "cm"}},
                {"name": "b", "secret": {"secretName": "s"}},
                {"name": "c", "projected": {"sources": [{"configMap": {"name": "x"}}, {"serviceAccountToken": {}}]}},
                {"name": "d", "emptyDir": {}},
                {"name": "d", "emptyDir": {}}
            ]),
        );
        p.spec.containers[0].extra.insert(
            "envFrom".into(),
            json!([{"configMapRef": {"name": "x"}}, {"secretRef": {"name": "y"}}]),
        );
        p.spec.containers[0].extra.insert(
            "volumeMounts".into(),
            json!([{"name": "d", "mountPath": "/d"}, {"name": "zz", "mountPath": "/z"}]),
        );
        let fs = fields(&p);
        for f in [
            "spec.volumes[2].projected.sources[1].serviceAccountToken",
            "spec.volumes[4].name",
            "spec.containers[0].volumeMounts[1].name",
            "spec.serviceAccountName",
        ] {
            assert!(fs.iter().any(|x| x == f), "missing {f} in {fs:?}");
        }
        // nanolet goes beyond the kubelet: ConfigMaps and Secrets come from the local store.
        for f in [
            "spec.volumes[0].configMap",
            "spec.volumes[1].secret",
            "spec.volumes[2].projected.sources[0].configMap",
            "spec.containers[0].envFrom[0].configMapRef",
            "spec.containers[0].envFrom[1].secretRef",
        ] {
            assert!(!fs.iter().any(|x| x == f), "{f} must be allowed: {fs:?}");
        }
        assert_eq!(
            reason_for(&p, "spec.serviceAccountName"),
            "Forbidden: static pods may not reference a ServiceAccount (kubelet refuses)"
        );
    }

    #[test]
    fn labels_and_annotations() {
        let mut p = pod();
        p.metadata
            .labels
            .insert("app.kubernetes.io/name".into(), "web".into());
        p.metadata.labels.insert("bad key!".into(), "ok".into());
        p.metadata.labels.insert("k".into(), "-bad".into());
        p.metadata.labels.insert("long".into(), "a".repeat(64));
        p.metadata
            .annotations
            .insert("example.com/Note".into(), "anything at all!".into());
        p.metadata.annotations.insert("/x".into(), "v".into());
        let fs = fields(&p);
        assert_eq!(
            fs,
            vec![
                "metadata.labels",
                "metadata.labels[k]",
                "metadata.labels[long]",
                "metadata.annotations"
            ]
        );
    }
}
