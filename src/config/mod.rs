//! Pod sources. Each source delivers *complete snapshots* ("this is everything I have now"),
//! never diffs. A source that has not delivered its first snapshot blocks cleanup of pods it
//! might own (see `podconfig`).

use crate::api::Pod;

pub(crate) mod apiserver;
pub(crate) mod file;
pub(crate) mod http;
pub(crate) mod merge;
pub(crate) mod naming;

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
///
/// The pod is shared (`Arc`): a source's decode cache, its last snapshot, the merger's latest
/// snapshot per source and its last merged set all hold the same pod, not a copy each (the
/// heap profile at 100 pods: docs/benchmarks/heap-profile.md). Changing one (`config.seen`)
/// copies it then (`Arc::make_mut`).
#[derive(Debug, Clone, PartialEq)]
pub struct SourcePod {
    pub pod: std::sync::Arc<Pod>,
    /// File path or URL the pod came from.
    pub origin: String,
}

/// One complete snapshot of one source.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub source: SourceKind,
    pub pods: Vec<SourcePod>,
    pub errors: Vec<ManifestError>,
    /// False when the source has never produced a complete pod set (e.g. the first fetch of
    /// the manifest URL failed): only its `errors` count, `pods` is empty, and the source does
    /// not become ready (orphan cleanup stays gated on it).
    pub ready: bool,
}

// ---------------------------------------------------------------------------------------------
// Helpers shared by the sources.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::naming::{CONFIG_SEEN_ANNOTATION, make_static_pod};

/// Current time as RFC 3339 with nanoseconds, trailing zeros trimmed (Go's RFC3339Nano).
pub fn now_rfc3339_nano() -> String {
    crate::timeutil::rfc3339_nanos(std::time::SystemTime::now())
}

impl Snapshot {
    /// The snapshot without `kubernetes.io/config.seen` annotations, for change detection.
    pub fn without_seen(&self) -> Snapshot {
        let mut s = self.clone();
        for p in &mut s.pods {
            std::sync::Arc::make_mut(&mut p.pod)
                .metadata
                .annotations
                .remove(CONFIG_SEEN_ANNOTATION);
        }
        s
    }

    /// Equality ignoring `kubernetes.io/config.seen`.
    pub fn same_content(&self, other: &Snapshot) -> bool {
        self.source == other.source
            && self.ready == other.ready
            && self.errors == other.errors
            && self.pods.len() == other.pods.len()
            && self.pods.iter().zip(other.pods.iter()).all(|(a, b)| {
                a.origin == b.origin && crate::config::naming::same_content(&a.pod, &b.pod)
            })
    }
}

/// Keeps `kubernetes.io/config.seen` stable for pods whose UID (hence content) did not change.
#[derive(Debug, Default)]
pub struct SeenCache {
    by_uid: BTreeMap<String, String>,
}

impl SeenCache {
    /// Rewrite each pod's config.seen to the time its UID was first seen, and forget UIDs that
    /// are gone.
    pub fn stabilize(&mut self, pods: &mut [SourcePod]) {
        let mut next = BTreeMap::new();
        for sp in pods.iter_mut() {
            let uid = sp.pod.metadata.uid.clone();
            let current = sp.pod.metadata.annotations.get(CONFIG_SEEN_ANNOTATION);
            let seen = match self.by_uid.get(&uid) {
                Some(old) => old.clone(),
                None => current.cloned().unwrap_or_default(),
            };
            // Written only when it differs: a pod shared with a source's cache is copied only
            // then.
            if current != Some(&seen) {
                std::sync::Arc::make_mut(&mut sp.pod)
                    .metadata
                    .annotations
                    .insert(CONFIG_SEEN_ANNOTATION.to_string(), seen.clone());
            }
            next.insert(uid, seen);
        }
        self.by_uid = next;
    }
}

/// Turn decoded manifest pods into named, validated source pods; rejected ones become errors.
///
/// `raws` are (pod, origin used in the UID, field prefix for errors); `shown` turns that origin
/// into the one pods and errors carry (escaped file name, redacted URL): the UID keeps hashing
/// the exact origin. Nothing is logged here: this runs on every listing, and the rejections are
/// logged where a snapshot is received (once per snapshot that carries them).
pub fn build_pods(
    raws: Vec<(crate::api::Pod, String, String)>,
    node_name: &str,
    source: SourceKind,
    seen: &str,
    shown: impl Fn(&str) -> String,
    errors: &mut Vec<ManifestError>,
) -> Vec<SourcePod> {
    let mut out = Vec::new();
    for (raw, origin, prefix) in raws {
        match make_static_pod(raw, node_name, source, &origin, seen) {
            Ok(pod) => out.push(SourcePod {
                pod: std::sync::Arc::new(pod),
                origin: shown(&origin),
            }),
            Err(errs) => {
                for e in errs {
                    errors.push(bounded(ManifestError {
                        origin: shown(&origin),
                        field: format!("{prefix}{}", e.field),
                        reason: e.reason,
                    }));
                }
            }
        }
    }
    out
}

/// Longest field path or reason a [`ManifestError`] keeps, in bytes. A decode error may quote
/// the offending value (serde writes `invalid type: string "..."` with the whole string): a
/// 10 MiB scalar must not become a 10 MiB error held in the source's cache, the status store
/// and every log line.
pub const MAX_ERROR_TEXT: usize = 1024;

/// `e` with its field and reason cut to [`MAX_ERROR_TEXT`] bytes (on a character boundary,
/// saying how much was cut).
pub fn bounded(mut e: ManifestError) -> ManifestError {
    fn cut(s: &mut String) {
        if s.len() <= MAX_ERROR_TEXT {
            return;
        }
        let mut end = MAX_ERROR_TEXT;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        let dropped = s.len() - end;
        s.truncate(end);
        s.push_str(&format!("... ({dropped} more bytes)"));
        s.shrink_to_fit();
    }
    cut(&mut e.field);
    cut(&mut e.reason);
    e
}

/// Writes `s` with every control character (`char::is_control`: C0 including newline and NUL,
/// DEL, C1) escaped as Rust's `escape_debug` writes it (`\n`, `\0`, `\u{1b}`), so text from a
/// manifest or a file name can neither split a line nor reach a terminal as an escape
/// sequence. The one escaping rule of nanolet: manifest errors ([`escape_text`],
/// [`escape_path`]) and every log field (the binary's log formatter) use it.
pub fn write_escaped(out: &mut impl std::fmt::Write, s: &str) -> std::fmt::Result {
    let mut rest = s;
    while let Some(i) = rest.find(char::is_control) {
        out.write_str(&rest[..i])?;
        let c = rest[i..].chars().next().unwrap_or_default();
        for e in c.escape_debug() {
            out.write_char(e)?;
        }
        rest = &rest[i + c.len_utf8()..];
    }
    out.write_str(rest)
}

/// `s` escaped by [`write_escaped`].
pub fn escape_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let _ = write_escaped(&mut out, s);
    out
}

/// A path as manifest errors and messages name it: [`write_escaped`] on its UTF-8 parts,
/// `\xNN` for each byte that is not UTF-8.
pub fn escape_path(p: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for chunk in p.as_os_str().as_bytes().utf8_chunks() {
        let _ = write_escaped(&mut out, chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Within one source, the first pod with a given namespace/name wins (input order); later ones
/// are rejected with an error naming both origins.
pub fn dedupe_by_name(pods: Vec<SourcePod>, errors: &mut Vec<ManifestError>) -> Vec<SourcePod> {
    let mut seen: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut uids: BTreeSet<String> = BTreeSet::new();
    let mut out = Vec::with_capacity(pods.len());
    for sp in pods {
        let key = (
            sp.pod.metadata.namespace.clone(),
            sp.pod.metadata.name.clone(),
        );
        if let Some(first) = seen.get(&key) {
            errors.push(ManifestError {
                origin: sp.origin.clone(),
                field: "metadata.name".to_string(),
                reason: format!(
                    "Duplicate value: pod {}/{} is already defined by {first}; ignoring {}",
                    key.0, key.1, sp.origin
                ),
            });
            continue;
        }
        if !uids.insert(sp.pod.metadata.uid.clone()) {
            errors.push(ManifestError {
                origin: sp.origin.clone(),
                field: "metadata.uid".to_string(),
                reason: format!("Duplicate value: {:?}", sp.pod.metadata.uid),
            });
            continue;
        }
        seen.insert(key, sp.origin.clone());
        out.push(sp);
    }
    out
}
