//! The offline checkpoint of what API pods need to start again without the API server
//! (`<root-dir>/api-objects.json`, beside the pod checkpoint `api-pods.json`): the ConfigMaps
//! and Secrets they refer to as the API server last showed them (name, namespace, uid,
//! resourceVersion, type and data only: no annotations, which may hold a copy of the data in
//! `last-applied-configuration`), the last token of each TokenRequest, and (for the Services
//! informer) the Services of its snapshot.
//!
//! The file is written atomically and owner-only (0600) from its creation
//! ([`crate::statefile::write_atomic_private`]), only when its bytes change and at most once
//! per [`WRITE_EVERY`]. With `checkpointSecrets: false` it holds no Secret and no token (those
//! of an earlier checkpoint are gone with its next write, right after start). A damaged file
//! is quarantined, another node's is ignored. Its `Debug` shows counts only, and nothing of it
//! is logged.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};
use tracing::{debug, warn};

use super::token::SavedToken;

/// The checkpoint's file name under root-dir.
pub const OBJECTS_FILE: &str = "api-objects.json";

/// How often the writer looks for changes (the rate limit of writes).
pub const WRITE_EVERY: Duration = Duration::from_secs(1);

const KIND: &str = "NanoletApiObjectCheckpoint";
const VERSION: u32 = 1;

/// The file's content.
#[derive(Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectCheckpoint {
    pub kind: String,
    pub version: u32,
    /// The node the pods were scheduled to; a checkpoint of another node name is ignored.
    pub node_name: String,
    #[serde(default)]
    pub config_maps: Vec<Value>,
    #[serde(default)]
    pub secrets: Vec<Value>,
    #[serde(default)]
    pub tokens: Vec<SavedToken>,
    /// The Services informer's snapshot (its `restore` takes them back).
    #[serde(default)]
    pub services: Vec<Value>,
}

impl std::fmt::Debug for ObjectCheckpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectCheckpoint")
            .field("node_name", &self.node_name)
            .field("config_maps", &self.config_maps.len())
            .field("secrets", &self.secrets.len())
            .field("tokens", &self.tokens.len())
            .field("services", &self.services.len())
            .finish()
    }
}

impl ObjectCheckpoint {
    pub fn new(node: &str) -> ObjectCheckpoint {
        ObjectCheckpoint {
            kind: KIND.into(),
            version: VERSION,
            node_name: node.to_string(),
            config_maps: vec![],
            secrets: vec![],
            tokens: vec![],
            services: vec![],
        }
    }
}

/// Where and what to checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointSettings {
    /// `<root-dir>/api-objects.json`.
    pub path: PathBuf,
    pub node: String,
    /// Secrets and tokens too (`checkpointSecrets`, default true).
    pub secrets: bool,
}

/// What the checkpoint keeps of the ConfigMap or Secret `ns/name`.
pub fn trim(o: &Value, ns: &str, name: &str) -> Value {
    let mut out = Map::new();
    for k in [
        "apiVersion",
        "kind",
        "type",
        "immutable",
        "data",
        "binaryData",
    ] {
        if let Some(v) = o.get(k).filter(|v| !v.is_null()) {
            out.insert(k.into(), v.clone());
        }
    }
    let mut meta = Map::new();
    meta.insert("name".into(), name.into());
    meta.insert("namespace".into(), ns.into());
    for k in ["uid", "resourceVersion"] {
        if let Some(v) = o["metadata"].get(k).filter(|v| !v.is_null()) {
            meta.insert(k.into(), v.clone());
        }
    }
    out.insert("metadata".into(), Value::Object(meta));
    Value::Object(out)
}

/// The checkpoint of this node, if one exists (a damaged one or one of an unknown kind is
/// quarantined, another node's is ignored).
pub fn load(s: &CheckpointSettings) -> Option<ObjectCheckpoint> {
    let cp: ObjectCheckpoint = match crate::statefile::read_or_quarantine(&s.path) {
        Ok(Some(cp)) => cp,
        Ok(None) => return None,
        Err(e) => {
            warn!(path = %s.path.display(), error = %e, "cannot read the API object checkpoint");
            return None;
        }
    };
    if cp.kind != KIND || cp.version != VERSION {
        crate::statefile::quarantine(
            &s.path,
            &format!("unknown kind/version {}/{}", cp.kind, cp.version),
        );
        return None;
    }
    if cp.node_name != s.node {
        warn!(path = %s.path.display(), checkpoint_node = %cp.node_name, node = %s.node,
            "the API object checkpoint belongs to another node name; ignoring it");
        return None;
    }
    Some(cp)
}

/// Writes the checkpoint when its bytes change.
#[derive(Debug)]
pub struct Writer {
    pub settings: CheckpointSettings,
    written: Option<Vec<u8>>,
}

impl Writer {
    pub fn new(settings: CheckpointSettings) -> Writer {
        Writer {
            settings,
            written: None,
        }
    }

    /// Writes `cp` unless the file already holds these bytes; `false` when the write failed
    /// (it is tried again on the next change).
    pub fn write(&mut self, cp: &ObjectCheckpoint) -> bool {
        let Ok(body) = serde_json::to_vec(cp) else {
            return false;
        };
        if self.written.as_ref() == Some(&body) {
            return true;
        }
        let path = &self.settings.path;
        match crate::statefile::write_atomic_private(path, &body) {
            Ok(()) => {
                debug!(path = %path.display(), config_maps = cp.config_maps.len(), secrets = cp.secrets.len(),
                    tokens = cp.tokens.len(), "API object checkpoint written");
                self.written = Some(body);
                true
            }
            Err(e) => {
                warn!(path = %path.display(), error = %e, "writing the API object checkpoint failed; will retry");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings(dir: &std::path::Path) -> CheckpointSettings {
        CheckpointSettings {
            path: dir.join(OBJECTS_FILE),
            node: "node1".into(),
            secrets: true,
        }
    }

    fn sample() -> ObjectCheckpoint {
        let mut cp = ObjectCheckpoint::new("node1");
        cp.config_maps
            .push(json!({"metadata": {"name": "c", "namespace": "ns"}, "data": {"a": "1"}}));
        cp.secrets
            .push(json!({"metadata": {"name": "s", "namespace": "ns"}, "data": {"k": "dg=="}}));
        cp.tokens.push(SavedToken {
            key: "k".into(),
            pod_uid: "u".into(),
            token: "t0k3n-value".into(),
            expiration: 10,
            expiration_seconds: 3607,
        });
        cp
    }

    /// Round trip; the file is 0600; an equal checkpoint is not written again; Debug shows
    /// no data; a file without `services` (older writer) reads with none.
    #[test]
    fn round_trip_owner_only_and_written_on_change() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let s = settings(d.path());
        let mut w = Writer::new(s.clone());
        assert!(w.write(&sample()));
        let mode = std::fs::metadata(&s.path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(load(&s), Some(sample()));
        std::fs::remove_file(&s.path).unwrap();
        assert!(w.write(&sample()));
        assert!(!s.path.exists(), "unchanged bytes are not written again");
        let dbg = format!("{:?}", sample());
        assert!(!dbg.contains("t0k3n") && !dbg.contains("dg=="), "{dbg}");
        let mut v = serde_json::to_value(sample()).unwrap();
        v.as_object_mut().unwrap().remove("services");
        std::fs::write(&s.path, serde_json::to_vec(&v).unwrap()).unwrap();
        assert_eq!(load(&s).map(|c| c.services.len()), Some(0));
    }

    /// A damaged file is moved aside and treated as absent; another node's is ignored (and
    /// kept); an unknown kind is quarantined.
    #[test]
    fn damaged_quarantined_and_other_nodes_ignored() {
        let d = tempfile::tempdir().unwrap();
        let s = settings(d.path());
        std::fs::write(&s.path, b"{\"kind\": \"NanoletApiObj").unwrap();
        assert_eq!(load(&s), None);
        assert!(!s.path.exists());
        assert!(crate::statefile::has_quarantined(&s.path));
        let mut other = sample();
        other.node_name = "node2".into();
        Writer::new(s.clone()).write(&other);
        assert_eq!(load(&s), None);
        assert!(s.path.exists());
        let mut odd = sample();
        odd.kind = "Something".into();
        Writer::new(s.clone()).write(&odd);
        assert_eq!(load(&s), None);
        assert!(!s.path.exists());
    }

    /// Only data and identity are kept: annotations (kubectl's last-applied-configuration
    /// holds the data again) and managedFields are dropped.
    #[test]
    fn trim_keeps_identity_and_data_only() {
        let o = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "s", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{..}"},
                "managedFields": [{}]},
            "data": {"k": "dg=="}});
        assert_eq!(
            trim(&o, "ns", "s"),
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": "s", "namespace": "ns", "uid": "u", "resourceVersion": "7"},
                "data": {"k": "dg=="}})
        );
    }
}
