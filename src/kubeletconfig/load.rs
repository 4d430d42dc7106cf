//! Loading the configuration: the flags of `nanolet run` lexed (`util::flags`), the
//! `--config` file read, both applied through the settings, and the result checked as a whole.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::settings::{Input, Invalid, SETTINGS, Setting, by_field, help_text};
use super::values::{ValueError, yaml_kind};
use super::{CONFIG_API_VERSION, CONFIG_KIND, Config, ConfigError, ParseOutcome};
use crate::eviction::threshold;
use crate::util::flags::{self, Arg, FlagError};

impl From<FlagError> for ConfigError {
    fn from(e: FlagError) -> ConfigError {
        match e {
            FlagError::Unknown(f) => ConfigError::UnknownFlag(f),
            FlagError::MissingValue(f) => ConfigError::MissingValue(f),
            FlagError::InvalidBool { flag, value } => ConfigError::InvalidFlag {
                flag,
                reason: ValueError::Bool(value),
            },
        }
    }
}

/// Parses the arguments that follow `nanolet run` (without the program name and without `run`),
/// loads `--config` if given, and validates the result.
pub fn parse_run_args(args: &[String]) -> Result<ParseOutcome, ConfigError> {
    parse_run_args_with(args, &machine_hostname)
}

fn machine_hostname() -> Result<String, ConfigError> {
    let name = nix::unistd::gethostname()
        .map_err(|e| ConfigError::NodeName(format!("reading the hostname: {e}")))?;
    name.into_string()
        .map_err(|_| ConfigError::NodeName("the hostname is not valid UTF-8".into()))
}

/// Splits the arguments into (setting, flag value) occurrences, in order; `nanolet run` takes
/// no positional arguments.
fn lex(args: &[String]) -> Result<Vec<(&'static Setting, String)>, ConfigError> {
    let mut out = Vec::new();
    for arg in flags::lex(SETTINGS, args) {
        match arg? {
            Arg::Flag { spec, value } => out.push((spec, value)),
            Arg::Positional(extra) => return Err(ConfigError::UnexpectedArgument(extra)),
            Arg::Rest(rest) => {
                if let Some(extra) = rest.into_iter().next() {
                    return Err(ConfigError::UnexpectedArgument(extra));
                }
            }
        }
    }
    Ok(out)
}

pub(super) fn parse_run_args_with(
    args: &[String],
    hostname: &dyn Fn() -> Result<String, ConfigError>,
) -> Result<ParseOutcome, ConfigError> {
    let flags = lex(args)?;
    if flags
        .iter()
        .any(|(s, v)| s.flag.name == "help" && v == "true")
    {
        return Ok(ParseOutcome::Help(help_text()));
    }

    // No node name until flags are applied (`--hostname-override`); resolved last.
    let mut cfg = Config::defaults(String::new());

    if let Some((_, path)) = flags.iter().rev().find(|(s, _)| s.flag.name == "config") {
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

    // Flags over the file's fields; the last occurrence of a flag wins, a repeatable one's add up.
    let mut seen = BTreeSet::new();
    for (setting, text) in &flags {
        let flag = format!("--{}", setting.flag.name);
        let input = Input::Flag {
            flag: &flag,
            text,
            first: seen.insert(setting.flag.name),
        };
        (setting.apply)(&mut cfg, &input).map_err(|e| ConfigError::InvalidFlag {
            flag: flag.clone(),
            reason: e.reason,
        })?;
    }
    finish(cfg, hostname)
}

/// Resolves the node name and checks the whole configuration.
fn finish(
    mut cfg: Config,
    hostname: &dyn Fn() -> Result<String, ConfigError>,
) -> Result<ParseOutcome, ConfigError> {
    finish_eviction(&mut cfg)?;
    cfg.shutdown.validate().map_err(ConfigError::Shutdown)?;
    check_node_allocatable(&cfg)?;
    check_node_labels(&cfg.node_labels)?;
    let raw_name = if cfg.node_name.trim().is_empty() {
        hostname()?
    } else {
        std::mem::take(&mut cfg.node_name)
    };
    cfg.node_name = normalize_node_name(&raw_name)?;
    if cfg.read_only_port != 0 && !cfg.address.is_loopback() && cfg.read_only_token_file.is_none() {
        return Err(ConfigError::ReadOnlyNeedsToken(cfg.address));
    }
    check_manifest_url_tls(&cfg)?;
    check_kubelet_server(&cfg)?;
    check_certificates(&cfg)?;
    Ok(ParseOutcome::Run(cfg))
}

/// The kubelet server's settings fit together: the webhooks need an API server, and the
/// server itself (HTTPS) a build with TLS.
fn check_kubelet_server(cfg: &Config) -> Result<(), ConfigError> {
    let flag = |name: &str, reason: ValueError| ConfigError::InvalidFlag {
        flag: format!("--{name}"),
        reason,
    };
    if !cfg!(feature = "tls") && cfg.port != 0 {
        return Err(flag("port", ValueError::PortNeedsTls));
    }
    if cfg.kubeconfig.is_none() {
        if cfg.authentication_token_webhook {
            return Err(flag(
                "authentication-token-webhook",
                ValueError::WebhookNeedsKubeconfig("--authentication-token-webhook"),
            ));
        }
        if cfg.authorization_mode == Some(super::AuthorizationMode::Webhook) {
            return Err(flag(
                "authorization-mode",
                ValueError::WebhookNeedsKubeconfig("--authorization-mode=Webhook"),
            ));
        }
    }
    Ok(())
}

/// The certificate settings fit together: the serving pair both or neither, bootstrap with a
/// --kubeconfig to write, and any of them only in a build with the `tls` feature.
fn check_certificates(cfg: &Config) -> Result<(), ConfigError> {
    let err = |flag: &'static str, reason: &str| ConfigError::Certificates {
        flag,
        reason: reason.to_string(),
    };
    let used = [
        ("--bootstrap-kubeconfig", cfg.bootstrap_kubeconfig.is_some()),
        ("--rotate-certificates", cfg.rotate_certificates),
        ("--rotate-server-certificates", cfg.server_tls_bootstrap),
        ("--tls-cert-file", cfg.tls_cert_file.is_some()),
        ("--tls-private-key-file", cfg.tls_private_key_file.is_some()),
    ];
    if !cfg!(feature = "tls") {
        if let Some((flag, _)) = used.iter().find(|(_, set)| *set) {
            return Err(err(flag, "needs a build with the tls feature"));
        }
    }
    match (&cfg.tls_cert_file, &cfg.tls_private_key_file) {
        (Some(_), None) => {
            return Err(err(
                "--tls-cert-file",
                "needs --tls-private-key-file (config: tlsPrivateKeyFile)",
            ));
        }
        (None, Some(_)) => {
            return Err(err(
                "--tls-private-key-file",
                "needs --tls-cert-file (config: tlsCertFile)",
            ));
        }
        _ => {}
    }
    if cfg.bootstrap_kubeconfig.is_some() && cfg.kubeconfig.is_none() {
        return Err(err(
            "--bootstrap-kubeconfig",
            "needs --kubeconfig: the path bootstrap writes the node's kubeconfig to",
        ));
    }
    Ok(())
}

/// The config file's fields, with the nested ones KubeletConfiguration has
/// (`authentication: {x509: {clientCAFile: ...}}`) named by their dotted path
/// (`authentication.x509.clientCAFile`), as the settings name them. A mapping is descended
/// only where some setting lives below it; anything else keeps its own name (and is warned
/// about when unknown).
fn fields<'a>(
    map: &'a serde_json::Map<String, serde_json::Value>,
    prefix: &str,
    out: &mut Vec<(String, &'a serde_json::Value)>,
) {
    for (key, value) in map {
        let name = format!("{prefix}{key}");
        let below = format!("{name}.");
        let nested = SETTINGS
            .iter()
            .any(|s| s.field.is_some_and(|f| f.starts_with(&below)));
        match value {
            serde_json::Value::Object(inner) if nested && by_field(&name).is_none() => {
                fields(inner, &below, out)
            }
            _ => out.push((name, value)),
        }
    }
}

/// The manifest URL's TLS settings fit together: a client key with its certificate, and only
/// with an https:// URL in a build with TLS.
fn check_manifest_url_tls(cfg: &Config) -> Result<(), ConfigError> {
    let flag = |name: &str, reason: ValueError| ConfigError::InvalidFlag {
        flag: format!("--{name}"),
        reason,
    };
    match (&cfg.manifest_url_client_cert, &cfg.manifest_url_client_key) {
        (Some(_), None) => {
            return Err(flag(
                "manifest-url-client-cert",
                ValueError::ClientCertWithoutKey,
            ));
        }
        (None, Some(_)) => {
            return Err(flag(
                "manifest-url-client-key",
                ValueError::ClientKeyWithoutCert,
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
        return Err(flag("manifest-url-ca-file", ValueError::TlsWithoutHttps));
    }
    Ok(())
}

/// `--node-labels` as the kubelet's `ValidateKubeletFlags` checks them, with its messages: a
/// `kubernetes.io` / `k8s.io` label (or one of their subdomains) outside the kubelet's set
/// (`IsKubeletLabel`) is refused, because the API server's NodeRestriction admission plugin
/// refuses a Node carrying it, so the node could never register; then every key must be a
/// qualified name and every value a label value.
pub(super) fn check_node_labels(labels: &[(String, String)]) -> Result<(), ConfigError> {
    use crate::api::helpers::{
        KUBELET_LABEL_NAMESPACES, KUBELET_LABELS, is_kubelet_label, is_kubernetes_label,
    };
    use crate::api::validate::{label_value_errors, qualified_name_errors};
    let unknown: BTreeSet<&str> = labels
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| is_kubernetes_label(k) && !is_kubelet_label(k))
        .collect();
    if !unknown.is_empty() {
        return Err(ConfigError::NodeLabels(format!(
            "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [{}]\n\
             --node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix \
             ({}) or be in the specifically allowed set ({})",
            unknown.into_iter().collect::<Vec<_>>().join(" "),
            KUBELET_LABEL_NAMESPACES.join(", "),
            KUBELET_LABELS.join(", "),
        )));
    }
    let mut invalid: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for (k, v) in labels {
        let key_errs = qualified_name_errors(k);
        if !key_errs.is_empty() {
            invalid.entry(k).or_default().extend(key_errs);
        }
        let value_errs = label_value_errors(v);
        if !value_errs.is_empty() {
            invalid.entry(v).or_default().extend(value_errs);
        }
    }
    if !invalid.is_empty() {
        let each: Vec<String> = invalid
            .iter()
            .map(|(k, errs)| format!("'{k}' - {}", errs.join(", ")))
            .collect();
        return Err(ConfigError::NodeLabels(format!(
            "invalid node labels: {}",
            each.join("; ")
        )));
    }
    Ok(())
}

pub(super) fn normalize_node_name(raw: &str) -> Result<String, ConfigError> {
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

/// `enforceNodeAllocatable` as the kubelet validates it: known keys, `none` alone, and each
/// reservation enforced only with its cgroup named.
fn check_node_allocatable(cfg: &Config) -> Result<(), ConfigError> {
    let e = &cfg.enforce_node_allocatable;
    for v in e {
        let needs = match v.as_str() {
            "pods" | "none" => continue,
            "system-reserved" => ("systemReservedCgroup", &cfg.system_reserved_cgroup),
            "kube-reserved" => ("kubeReservedCgroup", &cfg.kube_reserved_cgroup),
            other => {
                return Err(ConfigError::NodeAllocatable(format!(
                    "enforceNodeAllocatable: invalid option {other:?} (pods, system-reserved, kube-reserved or none)"
                )));
            }
        };
        if needs.1.is_empty() {
            return Err(ConfigError::NodeAllocatable(format!(
                "enforceNodeAllocatable: {v} needs {}",
                needs.0
            )));
        }
    }
    if e.len() > 1 && e.iter().any(|v| v == "none") {
        return Err(ConfigError::NodeAllocatable(
            "enforceNodeAllocatable: none cannot be combined with other options".into(),
        ));
    }
    Ok(())
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

// ---------------------------------------------------------------------------------------------
// Config file

/// The defaults with a config file's text applied and checked, as `--config` does (the fuzz
/// target `config` drives it).
pub fn parse_config_text(path: &Path, text: &str) -> Result<Config, ConfigError> {
    let mut cfg = Config::defaults("node1".into());
    apply_file(&mut cfg, path, text)?;
    finish_eviction(&mut cfg)?;
    Ok(cfg)
}

/// Loads the config file text onto `cfg`: fields present in the file replace the defaults.
/// Type errors are reported before other problems, each kind for the first field in key order.
fn apply_file(cfg: &mut Config, path: &Path, text: &str) -> Result<(), ConfigError> {
    let doc = read_file(cfg, path, text)?;
    let serde_json::Value::Object(map) = &doc else {
        return Ok(()); // read_file refuses anything else
    };
    // Relative paths in the file are relative to the file's directory, as in the kubelet.
    let dir = path.parent().unwrap_or_else(|| Path::new(""));
    let (mut type_error, mut value_error) = (None, None);
    let mut all = Vec::new();
    fields(map, "", &mut all);
    for (field, value) in all {
        let Some(setting) = by_field(&field) else {
            continue;
        };
        let input = Input::File {
            value,
            dir,
            file: path,
        };
        if let Err(e) = (setting.apply)(cfg, &input) {
            let first = if e.is_type_error() {
                &mut type_error
            } else {
                &mut value_error
            };
            first.get_or_insert((field, e));
        }
    }
    match type_error.or(value_error) {
        Some((field, Invalid { at, reason })) => Err(ConfigError::InvalidField {
            path: path.to_path_buf(),
            field: format!("{field}{at}"),
            reason,
        }),
        None => Ok(()),
    }
}

/// Parses the file as the kubelet does (JSON when it starts with `{`, else the first YAML
/// document with YAML 1.1 rules: `crate::yaml`), checks apiVersion and kind, and warns of
/// further documents and of fields nanolet ignores.
fn read_file(cfg: &mut Config, path: &Path, text: &str) -> Result<serde_json::Value, ConfigError> {
    let d = crate::yaml::to_json(text).map_err(|e| ConfigError::InvalidFile {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let (doc, more_documents) = (d.value, d.more_documents);
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
        let reason = match map.get(field) {
            Some(serde_json::Value::String(s)) if s == want => continue,
            Some(serde_json::Value::String(s)) => ValueError::Unexpected {
                want,
                found: s.clone(),
            },
            Some(other) => ValueError::NotTheString {
                want,
                kind: yaml_kind(other),
            },
            None => ValueError::Missing(want),
        };
        return Err(ConfigError::InvalidField {
            path: path.to_path_buf(),
            field: field.to_string(),
            reason,
        });
    }

    let mut all = Vec::new();
    fields(map, "", &mut all);
    for (k, _) in &all {
        if by_field(k).is_none() && k != "apiVersion" && k != "kind" {
            cfg.warnings.push(format!(
                "{}: ignoring field {k:?}: unknown or not supported by nanolet",
                path.display()
            ));
        }
    }
    Ok(doc)
}
