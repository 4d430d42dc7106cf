//! Pod sources. Each source delivers *complete snapshots* ("this is everything I have now"),
//! never diffs. A source that has not delivered its first snapshot blocks cleanup of pods it
//! might own (see `podconfig`).

use crate::pod::Pod;

pub mod file;
pub mod url;

/// Which source a pod came from; also the value of `kubernetes.io/config.source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceKind {
    File,
    Http,
    Api,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::File => "file",
            SourceKind::Http => "http",
            SourceKind::Api => "api",
        }
    }
}

/// A manifest that was rejected: where, which field, why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ManifestError {
    /// File path or URL.
    pub origin: String,
    /// Field path, e.g. `spec.containers[0].image` ("" when the whole document is bad).
    pub field: String,
    pub reason: String,
}

impl std::fmt::Display for ManifestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.origin, self.reason)
        } else {
            write!(f, "{}: {}: {}", self.origin, self.field, self.reason)
        }
    }
}

/// A pod as a source delivers it: already named (`<name>-<node>`), namespaced, defaulted,
/// validated, with UID and the config.* annotations set.
#[derive(Debug, Clone, PartialEq)]
pub struct SourcePod {
    pub pod: Pod,
    /// File path or URL the pod came from.
    pub origin: String,
}

/// One complete snapshot of one source.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub source: SourceKind,
    pub pods: Vec<SourcePod>,
    pub errors: Vec<ManifestError>,
}
