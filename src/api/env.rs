//! Container environment as the kubelet builds it (kubelet_pods.go `makeEnvironmentVariables`)
//! and `$(VAR)` expansion (third_party/forked/golang/expansion): pure, no I/O.
//!
//! Supported: `value`; `valueFrom.fieldRef` (metadata.name, namespace, uid,
//! labels['k'], annotations['k'], spec.nodeName, spec.serviceAccountName, status.podIP,
//! status.podIPs, status.hostIP, status.hostIPs); `valueFrom.resourceFieldRef` (limits/requests
//! of cpu, memory, ephemeral-storage with `divisor`; CPU rounds up; unset limits default to
//! node allocatable). ConfigMap/Secret references are refused for static pods by validation.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::quantity::{QuantityError, parse_quantity};
use super::{Container, Pod};

/// What the environment may refer to beyond the pod itself.
#[derive(Debug, Clone, Default)]
pub struct EnvContext {
    pub pod_ips: Vec<String>,
    pub host_ips: Vec<String>,
    /// Node allocatable CPU in millicores and memory/ephemeral storage in bytes: the values of
    /// unset limits (the kubelet's rule).
    pub node_cpu_millis: i64,
    pub node_memory_bytes: i64,
    pub node_ephemeral_bytes: i64,
    /// The local ConfigMap/Secret store (configMapKeyRef, secretKeyRef, envFrom).
    pub store: Option<Arc<dyn ConfigMapsAndSecrets>>,
    /// The Services of the service-link variables; `None`: no service lister (no API server:
    /// no variables at all, the kubelet's rule for kubelets without one).
    pub services: Option<ServiceSource>,
}

/// Where the Services come from (`apiobjects::services::Services` implements it).
pub trait ServiceLister: std::fmt::Debug + Send + Sync {
    /// The first list answered (or an offline checkpoint was restored).
    fn has_synced(&self) -> bool;
    /// Every Service known, as JSON (see [`super::envvars`]).
    fn list(&self) -> Vec<Value>;
}

/// A pod's view of the service lister.
#[derive(Debug, Clone)]
pub struct ServiceSource {
    pub lister: Arc<dyn ServiceLister>,
    /// The pod is not a static pod: its environment waits for the first list
    /// (makeEnvironmentVariables: `!IsStaticPod(pod) && !serviceHasSynced()`).
    pub wait_for_sync: bool,
}

/// makeEnvironmentVariables' text while the Services were never listed.
pub const SERVICES_NOT_SYNCED: &str =
    "services have not yet been read at least once, cannot construct envvars";

/// The service variables of `pod` (kubelet_pods.go `getServiceEnvVarMap`).
fn service_env(pod: &Pod, ctx: &EnvContext) -> Result<BTreeMap<String, String>, EnvError> {
    let Some(src) = &ctx.services else {
        return Ok(BTreeMap::new());
    };
    if src.wait_for_sync && !src.lister.has_synced() {
        return Err(EnvError {
            field: String::new(),
            reason: SERVICES_NOT_SYNCED.into(),
        });
    }
    Ok(super::envvars::service_env_map(
        &src.lister.list(),
        &pod.metadata.namespace,
        pod.spec.enable_service_links.unwrap_or(true),
    ))
}

/// The data of one ConfigMap or Secret, key -> bytes.
pub type ObjectData = BTreeMap<String, Vec<u8>>;

/// A lookup failure, shown to the user as the reason of an [`EnvError`].
pub type LookupError = Box<dyn std::error::Error + Send + Sync>;

/// Where ConfigMaps and Secrets come from (`localstore::LocalStore` implements it): a trait
/// here so that the pod API depends on no store.
pub trait ConfigMapsAndSecrets: std::fmt::Debug + Send + Sync {
    fn config_map(&self, namespace: &str, name: &str) -> Result<ObjectData, LookupError>;
    fn secret(&self, namespace: &str, name: &str) -> Result<ObjectData, LookupError>;
    /// One key of a ConfigMap (`secret` false) or Secret.
    fn key(
        &self,
        secret: bool,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Result<Vec<u8>, LookupError>;
}

/// A lookup error whose text is the kubelet's own message (`secret "x" not found`): the
/// environment shows it alone, without a field path, as the kubelet does for API objects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KubeletMessage(pub String);

/// An object that could not be read (API server unreachable, forbidden): unlike a missing
/// one, `optional: true` does not skip it (the kubelet skips only `IsNotFound`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

/// Whether `optional: true` skips this lookup error.
pub fn optional_skips(e: &LookupError) -> bool {
    e.downcast_ref::<Unavailable>().is_none()
}

/// A TokenRequest for a projected `serviceAccountToken` source, bound to the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRequestSpec {
    pub namespace: String,
    pub service_account: String,
    /// Empty: the API server's default audiences.
    pub audiences: Vec<String>,
    pub expiration_seconds: u64,
    pub pod_name: String,
    pub pod_uid: String,
}

/// Where ServiceAccount tokens come from (`apiobjects::ApiObjects` implements it).
pub trait ServiceAccountTokens: std::fmt::Debug + Send + Sync {
    fn token(&self, req: &TokenRequestSpec) -> Result<String, LookupError>;
}

/// The field and reason of a failed ConfigMap/Secret lookup (a [`KubeletMessage`] stands alone).
fn lookup_error(field: String, e: &LookupError) -> EnvError {
    match e.downcast_ref::<KubeletMessage>() {
        Some(m) => EnvError {
            field: String::new(),
            reason: m.0.clone(),
        },
        None => EnvError {
            field,
            reason: e.to_string(),
        },
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{reason}", if field.is_empty() { String::new() } else { format!("{field}: ") })]
pub struct EnvError {
    pub field: String,
    pub reason: String,
}

/// Why a `fieldRef` or `resourceFieldRef` cannot be resolved (the apiserver's messages).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    #[error("Unsupported value: \"{0}\"")]
    Unsupported(String),
    #[error("resource: Required value")]
    ResourceRequired,
    #[error("divisor: {0}")]
    Divisor(QuantityError),
    #[error("{resource}: {source}")]
    Quantity {
        resource: String,
        source: QuantityError,
    },
}

/// `$(VAR)` expansion with the kubelet's rules: `$$` is an escaped `$`; a reference to an
/// undefined variable is left as written; a `$` not followed by `(` or `$` stays.
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let b = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    let mut last = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            match b[i + 1] {
                b'$' => {
                    out.push_str(&input[last..i]);
                    out.push('$');
                    i += 2;
                    last = i;
                    continue;
                }
                b'(' => {
                    if let Some(close) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + close];
                        out.push_str(&input[last..i]);
                        match lookup(name) {
                            Some(v) => out.push_str(&v),
                            None => out.push_str(&input[i..i + 3 + close]),
                        }
                        i += 3 + close;
                        last = i;
                        continue;
                    }
                }
                _ => {}
            }
        }
        i += 1;
    }
    out.push_str(&input[last..]);
    out
}

pub fn field_ref(pod: &Pod, ctx: &EnvContext, path: &str) -> Result<String, RefError> {
    let m = &pod.metadata;
    let quoted_key = |prefix: &str| -> Option<String> {
        let rest = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(rest.to_string())
    };
    if let Some(k) = quoted_key("metadata.labels['") {
        return Ok(m.labels.get(&k).cloned().unwrap_or_default());
    }
    if let Some(k) = quoted_key("metadata.annotations['") {
        return Ok(m.annotations.get(&k).cloned().unwrap_or_default());
    }
    let kv = |map: &std::collections::BTreeMap<String, String>| {
        map.iter()
            .map(|(k, v)| format!("{k}=\"{v}\""))
            .collect::<Vec<_>>()
            .join("\n")
    };
    Ok(match path {
        "metadata.name" => m.name.clone(),
        "metadata.namespace" => m.namespace.clone(),
        "metadata.uid" => m.uid.clone(),
        "metadata.labels" => kv(&m.labels),
        "metadata.annotations" => kv(&m.annotations),
        "spec.nodeName" => pod.spec.node_name.clone(),
        "spec.serviceAccountName" => pod.spec.service_account_name.clone(),
        "status.podIP" => ctx.pod_ips.first().cloned().unwrap_or_default(),
        "status.podIPs" => ctx.pod_ips.join(","),
        "status.hostIP" => ctx.host_ips.first().cloned().unwrap_or_default(),
        "status.hostIPs" => ctx.host_ips.join(","),
        other => return Err(RefError::Unsupported(other.into())),
    })
}

pub fn resource_field_ref(
    c: &Container,
    ctx: &EnvContext,
    spec: &Value,
) -> Result<String, RefError> {
    let resource = spec
        .get("resource")
        .and_then(Value::as_str)
        .ok_or(RefError::ResourceRequired)?;
    let divisor = match spec.get("divisor") {
        None | Some(Value::Null) => None,
        Some(d) => Some(parse_quantity(d).map_err(RefError::Divisor)?),
    };
    let (kind, name) = resource
        .split_once('.')
        .ok_or_else(|| RefError::Unsupported(resource.into()))?;
    let map = match kind {
        "limits" => &c.resources.limits,
        "requests" => &c.resources.requests,
        _ => return Err(RefError::Unsupported(resource.into())),
    };
    // Requests default to limits (API defaulting); unset limits are node allocatable.
    let set = map.get(name).or_else(|| {
        if kind == "requests" {
            c.resources.limits.get(name)
        } else {
            None
        }
    });
    let value_milli: i64 = match (name, set) {
        (_, Some(v)) => parse_quantity(v)
            .map_err(|source| RefError::Quantity {
                resource: resource.into(),
                source,
            })?
            .milli_value(),
        ("cpu", None) if kind == "limits" => ctx.node_cpu_millis,
        ("memory", None) if kind == "limits" => ctx.node_memory_bytes.saturating_mul(1000),
        ("ephemeral-storage", None) if kind == "limits" => {
            ctx.node_ephemeral_bytes.saturating_mul(1000)
        }
        ("cpu" | "memory" | "ephemeral-storage", None) => 0,
        _ => return Err(RefError::Unsupported(resource.into())),
    };
    let divisor_milli = divisor
        .map(|d| d.milli_value())
        .filter(|d| *d > 0)
        .unwrap_or(1000);
    // ceil(value / divisor): CPU "rounds up to whole cores" with the default divisor of 1.
    let q = value_milli / divisor_milli + i64::from(value_milli % divisor_milli != 0);
    Ok(q.to_string())
}

fn optional(v: &Value) -> bool {
    v.get("optional").and_then(Value::as_bool).unwrap_or(false)
}

/// An envFrom name nanolet can pass on. The kubelet (kubelet_pods.go makeEnvironmentVariables,
/// v1.36) takes every key with its prefix as it is: the API server already checked the keys
/// (`[-._a-zA-Z0-9]+`) and the prefix (any printable ASCII but `=`, RelaxedEnvironmentVariable
/// Validation), so `1-data-1` and `$_-data-1` are variables. Only what cannot be one in an
/// environment (empty, or with `=`, possible in a local store's manifest) is left out.
fn valid_env_name(k: &str) -> bool {
    !k.is_empty() && !k.contains('=')
}

/// `envFrom`: every key of a ConfigMap/Secret from the local store, with `prefix`.
fn env_from(
    pod: &Pod,
    c: &Container,
    ctx: &EnvContext,
    out: &mut Vec<(String, String)>,
) -> Result<(), EnvError> {
    let Some(Value::Array(list)) = c.extra.get("envFrom") else {
        return Ok(());
    };
    for (i, src) in list.iter().enumerate() {
        let prefix = src
            .get("prefix")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let (field, secret, r) = match (src.get("configMapRef"), src.get("secretRef")) {
            (Some(r), _) => ("configMapRef", false, r),
            (_, Some(r)) => ("secretRef", true, r),
            _ => continue,
        };
        let name = r.get("name").and_then(Value::as_str).unwrap_or_default();
        let ns = &pod.metadata.namespace;
        let data = ctx.store.as_ref().map(|s| {
            if secret {
                s.secret(ns, name)
            } else {
                s.config_map(ns, name)
            }
        });
        match data {
            Some(Ok(d)) => {
                for (k, v) in d {
                    let key = format!("{prefix}{k}");
                    if valid_env_name(&key) {
                        out.push((key, String::from_utf8_lossy(&v).into_owned()));
                    }
                }
            }
            Some(Err(e)) if optional(r) && optional_skips(&e) => {}
            None if optional(r) => {}
            Some(Err(e)) => return Err(lookup_error(format!("envFrom[{i}].{field}"), &e)),
            None => {
                return Err(EnvError {
                    field: format!("envFrom[{i}].{field}"),
                    reason: "no local store configured".into(),
                });
            }
        }
    }
    Ok(())
}

/// The container's environment in order (envFrom first, then env, then the service variables
/// not declared), with `$(VAR)` references expanded against the variables defined before each
/// one, then the service variables (makeEnvironmentVariables' `MappingFuncFor(tmpEnv,
/// serviceEnv)`). Declared variables win over service ones of the same name.
pub fn resolve_env(
    pod: &Pod,
    c: &Container,
    ctx: &EnvContext,
) -> Result<Vec<(String, String)>, EnvError> {
    let service_env = service_env(pod, ctx)?;
    let mut out: Vec<(String, String)> = vec![];
    env_from(pod, c, ctx, &mut out)?;
    for (i, e) in c.env.iter().enumerate() {
        let field = |sub: &str| format!("env[{i}]{sub}");
        let value = match (&e.value, &e.value_from) {
            (_, Some(from)) => {
                if let Some(fr) = from.get("fieldRef") {
                    let path = fr
                        .get("fieldPath")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    field_ref(pod, ctx, path).map_err(|e| EnvError {
                        field: field(".valueFrom.fieldRef.fieldPath"),
                        reason: e.to_string(),
                    })?
                } else if let Some(rf) = from.get("resourceFieldRef") {
                    resource_field_ref(c, ctx, rf).map_err(|e| EnvError {
                        field: field(".valueFrom.resourceFieldRef"),
                        reason: e.to_string(),
                    })?
                } else if let Some((sub, secret, r)) = from
                    .get("configMapKeyRef")
                    .map(|r| (".valueFrom.configMapKeyRef", false, r))
                    .or_else(|| {
                        from.get("secretKeyRef")
                            .map(|r| (".valueFrom.secretKeyRef", true, r))
                    })
                {
                    let name = r.get("name").and_then(Value::as_str).unwrap_or_default();
                    let key = r.get("key").and_then(Value::as_str).unwrap_or_default();
                    let ns = &pod.metadata.namespace;
                    match ctx.store.as_ref().map(|s| s.key(secret, ns, name, key)) {
                        Some(Ok(v)) => String::from_utf8_lossy(&v).into_owned(),
                        // An optional reference that does not resolve leaves the variable out.
                        Some(Err(e)) if optional(r) && optional_skips(&e) => continue,
                        None if optional(r) => continue,
                        Some(Err(e)) => return Err(lookup_error(field(sub), &e)),
                        None => {
                            return Err(EnvError {
                                field: field(sub),
                                reason: "no local store configured".into(),
                            });
                        }
                    }
                } else {
                    return Err(EnvError {
                        field: field(".valueFrom"),
                        reason: "one of fieldRef, resourceFieldRef, configMapKeyRef or secretKeyRef is required".into(),
                    });
                }
            }
            (Some(v), None) => {
                let lookup = |n: &str| {
                    out.iter()
                        .rev()
                        .find(|(k, _)| k == n)
                        .map(|(_, v)| v.clone())
                        .or_else(|| service_env.get(n).cloned())
                };
                expand(v, &lookup)
            }
            (None, None) => String::new(),
        };
        out.push((e.name.clone(), value));
    }
    // "Append remaining service env vars" (in name order; the kubelet's is a Go map's).
    for (k, v) in service_env {
        if !out.iter().any(|(n, _)| *n == k) {
            out.push((k, v));
        }
    }
    Ok(out)
}

/// Expand `$(VAR)` in command and args with the container's environment.
pub fn expand_all(items: &[String], env: &[(String, String)]) -> Vec<String> {
    let lookup = |n: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.clone())
    };
    items.iter().map(|s| expand(s, &lookup)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::EnvVar;
    use serde_json::json;

    fn lookup(n: &str) -> Option<String> {
        match n {
            "A" => Some("x".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expansion_follows_the_kubelet_rules() {
        assert_eq!(expand("$(A)", &lookup), "x");
        assert_eq!(expand("a-$(A)-b", &lookup), "a-x-b");
        assert_eq!(expand("$$(A)", &lookup), "$(A)", "$$ escapes");
        assert_eq!(expand("$$$(A)", &lookup), "$x");
        assert_eq!(
            expand("$(UNDEFINED)", &lookup),
            "$(UNDEFINED)",
            "undefined stays"
        );
        assert_eq!(expand("$(EMPTY)z", &lookup), "z");
        assert_eq!(expand("$A $", &lookup), "$A $");
        assert_eq!(expand("$(A", &lookup), "$(A", "unclosed stays");
        assert_eq!(expand("ünï$(A)cödé", &lookup), "ünïxcödé");
    }

    fn pod() -> Pod {
        let mut p = Pod::default();
        p.metadata.name = "web-node1".into();
        p.metadata.namespace = "default".into();
        p.metadata.uid = "u1".into();
        p.metadata.labels.insert("app".into(), "web".into());
        p.spec.node_name = "node1".into();
        p
    }

    fn var(name: &str, value: Option<&str>, from: Option<Value>) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: value.map(String::from),
            value_from: from,
        }
    }

    #[test]
    fn field_refs_and_dependent_vars() {
        let mut c = Container {
            name: "c".into(),
            ..Default::default()
        };
        c.env = vec![
            var(
                "POD",
                None,
                Some(json!({"fieldRef": {"fieldPath": "metadata.name"}})),
            ),
            var(
                "NS",
                None,
                Some(json!({"fieldRef": {"fieldPath": "metadata.namespace"}})),
            ),
            var(
                "APP",
                None,
                Some(json!({"fieldRef": {"fieldPath": "metadata.labels['app']"}})),
            ),
            var(
                "NODE",
                None,
                Some(json!({"fieldRef": {"fieldPath": "spec.nodeName"}})),
            ),
            var(
                "IP",
                None,
                Some(json!({"fieldRef": {"fieldPath": "status.podIP"}})),
            ),
            var(
                "HOST",
                None,
                Some(json!({"fieldRef": {"fieldPath": "status.hostIP"}})),
            ),
            var("FULL", Some("$(NS)/$(POD) on $(NODE) $(LATER)"), None),
            var("LATER", Some("l"), None),
        ];
        let ctx = EnvContext {
            pod_ips: vec!["10.1.0.5".into()],
            host_ips: vec!["192.0.2.1".into()],
            ..Default::default()
        };
        let env = resolve_env(&pod(), &c, &ctx).expect("env");
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("POD"), Some("web-node1"));
        assert_eq!(get("APP"), Some("web"));
        assert_eq!(get("IP"), Some("10.1.0.5"));
        assert_eq!(get("HOST"), Some("192.0.2.1"));
        assert_eq!(
            get("FULL"),
            Some("default/web-node1 on node1 $(LATER)"),
            "only earlier vars expand"
        );
        assert_eq!(
            expand_all(&["echo $(POD)".into(), "$$(POD)".into()], &env),
            vec!["echo web-node1", "$(POD)"]
        );
    }

    #[test]
    fn resource_field_refs_round_up_and_default_to_allocatable() {
        let mut c = Container {
            name: "c".into(),
            ..Default::default()
        };
        c.resources.limits.insert("cpu".into(), json!("1250m"));
        c.resources.limits.insert("memory".into(), json!("64Mi"));
        c.resources.requests.insert("cpu".into(), json!("250m"));
        c.env = vec![
            var(
                "CPU_LIMIT",
                None,
                Some(json!({"resourceFieldRef": {"resource": "limits.cpu"}})),
            ),
            var(
                "CPU_REQ_M",
                None,
                Some(json!({"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}})),
            ),
            var(
                "MEM_MI",
                None,
                Some(json!({"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}})),
            ),
            var(
                "MEM_REQ",
                None,
                Some(json!({"resourceFieldRef": {"resource": "requests.memory"}})),
            ),
        ];
        let ctx = EnvContext {
            node_cpu_millis: 4000,
            node_memory_bytes: 8 << 30,
            ..Default::default()
        };
        let env = resolve_env(&pod(), &c, &ctx).expect("env");
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        assert_eq!(get("CPU_LIMIT"), "2", "1250m rounds up to 2 cores");
        assert_eq!(get("CPU_REQ_M"), "250");
        assert_eq!(get("MEM_MI"), "64");
        assert_eq!(
            get("MEM_REQ"),
            (64u64 << 20).to_string(),
            "requests default to limits"
        );
        // No limits at all: node allocatable.
        let mut c2 = Container {
            name: "c".into(),
            ..Default::default()
        };
        c2.env = vec![
            var(
                "CPU",
                None,
                Some(json!({"resourceFieldRef": {"resource": "limits.cpu"}})),
            ),
            var(
                "MEM",
                None,
                Some(json!({"resourceFieldRef": {"resource": "limits.memory"}})),
            ),
        ];
        let env = resolve_env(&pod(), &c2, &ctx).expect("env");
        assert_eq!(env[0].1, "4");
        assert_eq!(env[1].1, (8u64 << 30).to_string());
    }

    #[test]
    fn unsupported_refs_name_the_field() {
        let mut c = Container {
            name: "c".into(),
            ..Default::default()
        };
        c.env = vec![var(
            "X",
            None,
            Some(json!({"fieldRef": {"fieldPath": "spec.nope"}})),
        )];
        let e = resolve_env(&pod(), &c, &EnvContext::default()).expect_err("error");
        assert_eq!(e.field, "env[0].valueFrom.fieldRef.fieldPath");
        assert!(e.reason.contains("Unsupported value"));
    }

    #[derive(Debug)]
    struct ApiLike;

    impl ConfigMapsAndSecrets for ApiLike {
        fn config_map(&self, _: &str, name: &str) -> Result<ObjectData, LookupError> {
            Err(Box::new(KubeletMessage(format!(
                "configmap \"{name}\" not found"
            ))))
        }
        fn secret(&self, _: &str, name: &str) -> Result<ObjectData, LookupError> {
            Err(Box::new(KubeletMessage(format!(
                "secret \"{name}\" not found"
            ))))
        }
        fn key(&self, secret: bool, ns: &str, name: &str, _: &str) -> Result<Vec<u8>, LookupError> {
            if secret {
                self.secret(ns, name)
            } else {
                self.config_map(ns, name)
            }
            .map(|_| vec![])
        }
    }

    /// kubelet_pods.go makeEnvironmentVariables returns the object manager's error as is: the
    /// waiting message is `secret "x" not found`, no field path; optional references are skipped.
    #[test]
    fn api_object_errors_are_the_kubelet_message_alone() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "c", "image": "i",
                "env": [{"name": "O", "valueFrom": {"configMapKeyRef": {"name": "opt", "key": "k", "optional": true}}},
                        {"name": "S", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}]}]}
        }))
        .unwrap();
        let ctx = EnvContext {
            store: Some(Arc::new(ApiLike)),
            ..EnvContext::default()
        };
        let e = resolve_env(&pod, &pod.spec.containers[0], &ctx).unwrap_err();
        assert_eq!(e.to_string(), "secret \"db\" not found");
        let mut c = pod.spec.containers[0].clone();
        c.env.remove(1);
        c.extra.insert(
            "envFrom".into(),
            serde_json::json!([{"configMapRef": {"name": "cm"}}]),
        );
        let e = resolve_env(&pod, &c, &ctx).unwrap_err();
        assert_eq!(e.to_string(), "configmap \"cm\" not found");
    }

    #[derive(Debug)]
    struct OneConfigMap;

    impl ConfigMapsAndSecrets for OneConfigMap {
        fn config_map(&self, _: &str, _: &str) -> Result<ObjectData, LookupError> {
            Ok(BTreeMap::from([(
                "data-1".to_string(),
                b"value-1".to_vec(),
            )]))
        }
        fn secret(&self, ns: &str, name: &str) -> Result<ObjectData, LookupError> {
            self.config_map(ns, name)
        }
        fn key(&self, _: bool, _: &str, _: &str, _: &str) -> Result<Vec<u8>, LookupError> {
            Ok(vec![])
        }
    }

    /// kubelet_pods.go makeEnvironmentVariables (v1.36) takes every envFrom key with its
    /// prefix as it is (e2e "[sig-node] ConfigMap should be consumable as environment variable
    /// names with various prefixes [Conformance]": prefixes `1-`, `$_-`, `ABC_`, `#@!`).
    #[test]
    fn env_from_prefixes_need_not_make_c_identifiers() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "c", "image": "i", "envFrom": [
                {"configMapRef": {"name": "cm"}},
                {"prefix": "1-", "configMapRef": {"name": "cm"}},
                {"prefix": "$_-", "secretRef": {"name": "s"}},
                {"prefix": "#@!", "configMapRef": {"name": "cm"}}]}]}
        }))
        .unwrap();
        let ctx = EnvContext {
            store: Some(Arc::new(OneConfigMap)),
            ..EnvContext::default()
        };
        let env = resolve_env(&pod, &pod.spec.containers[0], &ctx).unwrap();
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        for want in ["data-1", "1-data-1", "$_-data-1", "#@!data-1"] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
    }

    #[derive(Debug)]
    struct FixedServices(bool, Vec<Value>);
    impl ServiceLister for FixedServices {
        fn has_synced(&self) -> bool {
            self.0
        }
        fn list(&self) -> Vec<Value> {
            self.1.clone()
        }
    }

    fn services_ctx(synced: bool, wait: bool) -> EnvContext {
        let svc = |ns: &str, name: &str, ip: &str, port: u16| {
            json!({"metadata": {"namespace": ns, "name": name},
                   "spec": {"clusterIP": ip, "ports": [{"port": port}]}})
        };
        EnvContext {
            services: Some(ServiceSource {
                lister: Arc::new(FixedServices(
                    synced,
                    vec![
                        svc("default", "kubernetes", "10.96.0.1", 443),
                        svc("default", "web", "10.96.0.20", 80),
                    ],
                )),
                wait_for_sync: wait,
            }),
            ..EnvContext::default()
        }
    }

    /// kubelet_pods.go makeEnvironmentVariables: service variables are a source of `$(VAR)`
    /// expansion after the declared ones; declared env (and envFrom) win over a service
    /// variable of the same name; the remaining service variables are appended.
    #[test]
    fn service_variables_expand_lose_to_declared_ones_and_are_appended() {
        let c = Container {
            env: vec![
                var("WEB_SERVICE_HOST", Some("overridden"), None),
                var(
                    "URL",
                    Some("https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"),
                    None,
                ),
                var("SELF", Some("$(WEB_SERVICE_HOST)"), None),
            ],
            ..Container::default()
        };
        let mut p = pod();
        p.metadata.namespace = "default".into();
        let env = resolve_env(&p, &c, &services_ctx(true, true)).expect("env");
        let all = |k: &str| {
            env.iter()
                .filter(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(all("WEB_SERVICE_HOST"), ["overridden"]);
        assert_eq!(all("URL"), ["https://10.96.0.1:443"]);
        assert_eq!(all("SELF"), ["overridden"]);
        assert_eq!(all("WEB_PORT"), ["tcp://10.96.0.20:80"]);
        assert_eq!(
            env[0].0, "WEB_SERVICE_HOST",
            "declared variables come first"
        );
        // enableServiceLinks: false keeps only the master service's variables.
        p.spec.enable_service_links = Some(false);
        let env = resolve_env(&p, &Container::default(), &services_ctx(true, true)).expect("env");
        assert!(env.iter().any(|(k, _)| k == "KUBERNETES_SERVICE_HOST"));
        assert!(!env.iter().any(|(k, _)| k.starts_with("WEB_")), "{env:?}");
        // No service lister (standalone): no variables at all.
        assert!(
            resolve_env(&p, &Container::default(), &EnvContext::default())
                .expect("env")
                .is_empty()
        );
    }

    /// makeEnvironmentVariables: `!IsStaticPod(pod) && !serviceHasSynced()` refuses with the
    /// kubelet's text (a CreateContainerConfigError); a static pod does not wait.
    #[test]
    fn api_pods_wait_for_the_first_service_list_static_pods_do_not() {
        let e = resolve_env(&pod(), &Container::default(), &services_ctx(false, true)).unwrap_err();
        assert_eq!(e.to_string(), SERVICES_NOT_SYNCED);
        assert!(e.field.is_empty());
        let env = resolve_env(&pod(), &Container::default(), &services_ctx(false, false))
            .expect("static");
        assert!(env.iter().any(|(k, _)| k == "KUBERNETES_SERVICE_HOST"));
    }
}
