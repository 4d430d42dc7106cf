//! Runtime classes (Go's pkg/kubelet/runtimeclass): a pod's `runtimeClassName` names a
//! `node.k8s.io/v1` RuntimeClass whose `handler` goes to CRI `RunPodSandbox.runtime_handler`.
//!
//! The classes come from a local directory of RuntimeClass manifests (`--runtime-class-dir`,
//! one object per file, `*.yaml`, `*.yml` or `*.json`, no dotfiles), read when a pod needs one as
//! the local ConfigMap store is, and, in API-server mode, from the API (`reflect`: list + watch
//! of `/apis/node.k8s.io/v1/runtimeclasses`, the kubelet's RuntimeClass informer). A local file
//! wins over an API object of the same name.
//!
//! What the kubelet does with a class, and what nanolet adds for static pods (which no API
//! server admission plugin ever saw):
//! - the handler is looked up at every sandbox creation (`LookupRuntimeHandler`); an unknown
//!   class fails the sandbox with the API's NotFound text (`runtimeclass.node.k8s.io "x" not
//!   found`), the pod stays Pending and is retried;
//! - `overhead.podFixed` becomes the pod's `spec.overhead` when it has none (the RuntimeClass
//!   admission plugin's `setOverhead`), a different one refuses the pod (the plugin's
//!   `validateOverhead`); the kubelet counts `spec.overhead` in admission and the pod cgroup;
//! - `scheduling.nodeSelector` joins the pod's node selection (the plugin merges it into
//!   `spec.nodeSelector`; the scheduler would never place the pod elsewhere).

pub mod reflect;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::api::Pod;

/// The API group/resource of the NotFound error (apimachinery `NewNotFound`).
pub const GROUP_RESOURCE: &str = "runtimeclass.node.k8s.io";

/// Where the kubelet would refuse or fail a pod for its runtime class.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeClassError {
    /// The API's NotFound error, as `LookupRuntimeHandler` returns it.
    #[error("{GROUP_RESOURCE} \"{name}\" not found")]
    NotFound { name: String },
    /// The runtime reports its handlers (CRI `Status`, containerd 2) and this one is not
    /// among them: the sandbox is never created on another handler.
    #[error(
        "RuntimeClass \"{class}\": the runtime has no handler \"{handler}\" (CRI status reports: {reported})"
    )]
    HandlerNotReported {
        class: String,
        handler: String,
        reported: String,
    },
    /// A RuntimeClass manifest that cannot be used: file, field path, reason.
    #[error("RuntimeClass manifest {file}: {field}: {reason}")]
    Invalid {
        file: String,
        field: String,
        reason: String,
    },
    /// The directory (or a parent) can be written by others.
    #[error("runtime class directory not read: {0}")]
    Insecure(String),
}

/// One `node.k8s.io/v1` RuntimeClass, reduced to what a node uses.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RuntimeClass {
    pub name: String,
    /// The CRI runtime handler (a DNS label; containerd's `runtimes.<handler>`).
    pub handler: String,
    /// `overhead.podFixed`: resource name -> quantity (as written).
    pub overhead: BTreeMap<String, Value>,
    /// `scheduling.nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// `scheduling.tolerations`, kept as written (nanolet's node has no taints to check).
    pub tolerations: Vec<Value>,
    /// Where it came from: a file path, or `api`.
    pub origin: String,
}

/// Whether `s` is a DNS-1123 label (the handler's and the class name's rule).
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Whether `s` is a DNS-1123 subdomain (metadata.name of cluster-scoped objects).
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Decodes and validates one RuntimeClass object (ValidateRuntimeClass: metadata.name a DNS
/// subdomain, handler a DNS label, overhead quantities >= 0, nodeSelector strings). `origin`
/// names the file (or `api`) in errors.
pub fn parse(v: &Value, origin: &str) -> Result<RuntimeClass, RuntimeClassError> {
    let invalid = |field: &str, reason: String| RuntimeClassError::Invalid {
        file: origin.to_string(),
        field: field.to_string(),
        reason,
    };
    let kind = v["kind"].as_str().unwrap_or_default();
    if kind != "RuntimeClass" {
        return Err(invalid(
            "kind",
            format!("Unsupported value: \"{kind}\": supported values: \"RuntimeClass\""),
        ));
    }
    let api_version = v["apiVersion"].as_str().unwrap_or_default();
    if api_version != "node.k8s.io/v1" {
        return Err(invalid(
            "apiVersion",
            format!("Unsupported value: \"{api_version}\": supported values: \"node.k8s.io/v1\""),
        ));
    }
    let name = v["metadata"]["name"].as_str().unwrap_or_default();
    if !is_dns_subdomain(name) {
        return Err(invalid(
            "metadata.name",
            format!("Invalid value: \"{name}\": a lowercase RFC 1123 subdomain is required"),
        ));
    }
    let handler = match &v["handler"] {
        Value::String(h) => h.clone(),
        Value::Null => return Err(invalid("handler", "Required value".into())),
        other => {
            return Err(invalid(
                "handler",
                format!("Invalid value: {other}: must be a string"),
            ));
        }
    };
    if !is_dns_label(&handler) {
        return Err(invalid(
            "handler",
            format!(
                "Invalid value: \"{handler}\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
            ),
        ));
    }
    let mut overhead = BTreeMap::new();
    match &v["overhead"]["podFixed"] {
        Value::Null => {}
        Value::Object(m) => {
            for (k, q) in m {
                let parsed = crate::api::quantity::parse_quantity(q).map_err(|e| {
                    invalid(
                        &format!("overhead.podFixed[{k}]"),
                        format!("Invalid value: {e}"),
                    )
                })?;
                if parsed.milli_value() < 0 {
                    return Err(invalid(
                        &format!("overhead.podFixed[{k}]"),
                        format!("Invalid value: {q}: must be greater than or equal to 0"),
                    ));
                }
                overhead.insert(k.clone(), q.clone());
            }
        }
        other => {
            return Err(invalid(
                "overhead.podFixed",
                format!("Invalid value: {other}: must be a map of quantities"),
            ));
        }
    }
    let mut node_selector = BTreeMap::new();
    match &v["scheduling"]["nodeSelector"] {
        Value::Null => {}
        Value::Object(m) => {
            for (k, s) in m {
                let Some(s) = s.as_str() else {
                    return Err(invalid(
                        &format!("scheduling.nodeSelector[{k}]"),
                        format!("Invalid value: {s}: must be a string"),
                    ));
                };
                node_selector.insert(k.clone(), s.to_string());
            }
        }
        other => {
            return Err(invalid(
                "scheduling.nodeSelector",
                format!("Invalid value: {other}: must be a map of strings"),
            ));
        }
    }
    let tolerations = v["scheduling"]["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Ok(RuntimeClass {
        name: name.to_string(),
        handler,
        overhead,
        node_selector,
        tolerations,
        origin: origin.to_string(),
    })
}

/// Reads one RuntimeClass manifest file as the kubelet reads manifests (YAML 1.1 or JSON, the
/// first document).
pub fn read_file(path: &Path) -> Result<RuntimeClass, RuntimeClassError> {
    let file = path.display().to_string();
    let invalid = |reason: String| RuntimeClassError::Invalid {
        file: file.clone(),
        field: String::new(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| invalid(format!("reading: {e}")))?;
    let text = std::str::from_utf8(&bytes).map_err(|e| invalid(format!("not UTF-8: {e}")))?;
    let doc = crate::yaml::to_json(text).map_err(|e| invalid(e.to_string()))?;
    parse(&doc.value, &file)
}

/// What a writable runtime class directory lets others do (in the refusal message).
const DIR_RISK: &str = "anyone who can write there can choose the runtime (and its isolation) of \
                        pods on this node";

/// The node's runtime classes: the local directory (read at each lookup) and the API's
/// (filled by [`reflect`] in API-server mode).
#[derive(Debug)]
pub struct RuntimeClasses {
    dir: Option<PathBuf>,
    allow_insecure: bool,
    api: Mutex<BTreeMap<String, RuntimeClass>>,
}

impl RuntimeClasses {
    /// Classes from `dir` (none if `None`); with `allow_insecure`, directories and files others
    /// can write are read too (`--allow-insecure-manifest-dir`).
    pub fn new(dir: Option<PathBuf>, allow_insecure: bool) -> Arc<RuntimeClasses> {
        Arc::new(RuntimeClasses {
            dir,
            allow_insecure,
            api: Mutex::new(BTreeMap::new()),
        })
    }

    /// No local directory and no API: every class is unknown (tests).
    #[cfg(test)]
    pub fn none() -> Arc<RuntimeClasses> {
        RuntimeClasses::new(None, false)
    }

    fn api(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, RuntimeClass>> {
        self.api.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the API's classes (a list answered).
    pub fn set_api(&self, classes: BTreeMap<String, RuntimeClass>) {
        *self.api() = classes;
    }

    /// One watch event from the API.
    pub fn apply_api(&self, deleted: bool, class: RuntimeClass) {
        let mut api = self.api();
        if deleted {
            api.remove(&class.name);
        } else {
            api.insert(class.name.clone(), class);
        }
    }

    /// The class named `name` from the local directory. Unreadable or invalid files are
    /// skipped with a warning naming the file, field and reason.
    fn local(&self, name: &str) -> Result<Option<RuntimeClass>, RuntimeClassError> {
        let Some(dir) = &self.dir else {
            return Ok(None);
        };
        if !self.allow_insecure {
            crate::config::file::check_dir_chain(dir, "runtime class directory", DIR_RISK)
                .map_err(|e| RuntimeClassError::Insecure(e.to_string()))?;
        }
        let Some(files) = crate::localstore::manifest_files(dir) else {
            return Ok(None);
        };
        for f in files {
            if !self.allow_insecure {
                let checked = std::fs::metadata(&f)
                    .map_err(|e| e.to_string())
                    .and_then(|m| {
                        crate::config::file::check_secure_for(&f, &m, "file", DIR_RISK)
                            .map_err(|e| e.to_string())
                    });
                if let Err(reason) = checked {
                    tracing::warn!(file = %f.display(), "skipping RuntimeClass manifest: {reason}");
                    continue;
                }
            }
            match read_file(&f) {
                Ok(rc) if rc.name == name => return Ok(Some(rc)),
                Ok(_) => {}
                Err(e) => tracing::warn!(file = %f.display(), "skipping RuntimeClass: {e}"),
            }
        }
        Ok(None)
    }

    /// The class `name` (local first, then the API's), or the kubelet's NotFound.
    pub fn get(&self, name: &str) -> Result<RuntimeClass, RuntimeClassError> {
        if let Some(rc) = self.local(name)? {
            return Ok(rc);
        }
        self.api()
            .get(name)
            .cloned()
            .ok_or_else(|| RuntimeClassError::NotFound { name: name.into() })
    }

    /// The kubelet's `LookupRuntimeHandler`: the CRI handler of the pod's class; `""` (the
    /// runtime's default) only for a pod without `runtimeClassName`.
    pub fn lookup_handler(&self, pod: &Pod) -> Result<String, RuntimeClassError> {
        match runtime_class_name(pod) {
            None => Ok(String::new()),
            Some(name) => self.get(name).map(|rc| rc.handler),
        }
    }
}

/// The pod's `spec.runtimeClassName`, if set and not empty.
pub fn runtime_class_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .extra
        .get("runtimeClassName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Refuses `handler` when the runtime reports its handlers (containerd 2: CRI
/// `StatusResponse.runtime_handlers`) and it is not among them. A runtime that reports none
/// (containerd 1.6, 1.7) is asked by creating the sandbox: it fails with its own error
/// (containerd: `no runtime for "x" is configured`), never falling back to its default.
pub fn check_handler(
    class: &str,
    handler: &str,
    reported: &[crate::cri::RuntimeHandler],
) -> Result<(), RuntimeClassError> {
    if handler.is_empty() || reported.is_empty() || reported.iter().any(|h| h.name == handler) {
        return Ok(());
    }
    let names: Vec<String> = reported.iter().map(|h| format!("\"{}\"", h.name)).collect();
    Err(RuntimeClassError::HandlerNotReported {
        class: class.into(),
        handler: handler.into(),
        reported: names.join(", "),
    })
}

/// Why the pod's own `spec.overhead` cannot stand with its class's (the RuntimeClass
/// admission plugin's `validateOverhead`), or `None`.
pub const OVERHEAD_MISMATCH_REASON: &str = "RuntimeClassOverheadMismatch";

/// The pod with its class's `overhead.podFixed` as `spec.overhead` (the RuntimeClass admission
/// plugin's `setOverhead`): `Ok(None)` when nothing changes (no class, no overhead, or the same
/// already set), `Err(message)` when the pod sets a different overhead (the plugin rejects it:
/// "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead").
pub fn with_overhead(pod: &Pod, rc: &RuntimeClass) -> Result<Option<Pod>, String> {
    let current = pod.spec.extra.get("overhead");
    let wanted = (!rc.overhead.is_empty()).then(|| {
        Value::Object(
            rc.overhead
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
    });
    match (current, wanted) {
        (None, None) => Ok(None),
        (None, Some(w)) => {
            let mut p = pod.clone();
            p.spec.extra.insert("overhead".into(), w);
            Ok(Some(p))
        }
        (Some(c), w) => {
            if overhead_equal(c, w.as_ref()) {
                Ok(None)
            } else {
                Err(
                    "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
                        .into(),
                )
            }
        }
    }
}

/// Quantities compared by value (`100m` == `0.1`), as apiequality.Semantic compares them.
fn overhead_equal(a: &Value, b: Option<&Value>) -> bool {
    let empty = serde_json::Map::new();
    let a = a.as_object().unwrap_or(&empty);
    let b = b.and_then(Value::as_object).unwrap_or(&empty);
    let milli = |v: &Value| {
        crate::api::quantity::parse_quantity(v)
            .ok()
            .map(|q| q.milli_value())
    };
    a.len() == b.len()
        && a.iter().all(|(k, v)| {
            b.get(k)
                .is_some_and(|w| milli(v).is_some() && milli(v) == milli(w))
        })
}

/// Whether the node's labels satisfy the class's `scheduling.nodeSelector`.
pub fn node_selector_matches(rc: &RuntimeClass, labels: &BTreeMap<String, String>) -> bool {
    rc.node_selector
        .iter()
        .all(|(k, v)| labels.get(k).is_some_and(|l| l == v))
}

#[cfg(test)]
mod tests;
