//! The local ConfigMap/Secret store: static pods cannot reference ConfigMaps or Secrets in the
//! kubelet (there is no API server; kubernetes/kubernetes#27312). nanolet reads them from
//! directories of ordinary `v1` ConfigMap and Secret manifests instead (one object per file,
//! `*.yaml`, `*.yml` or `*.json`, no dotfiles; namespace defaults to `default`).
//!
//! The store is read when a pod needs it (each sync), so an edited file reaches running pods
//! within one sync period, as an API-server ConfigMap does with the kubelet.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("{kind} \"{namespace}/{name}\" not found (looked in {dir})")]
    NotFound {
        kind: &'static str,
        namespace: String,
        name: String,
        dir: String,
    },
    /// The directory, a parent or a file can be written by others (`--allow-insecure-manifest-dir`
    /// skips the check).
    #[error("{kind} \"{namespace}/{name}\" not read: {reason}")]
    Insecure {
        kind: &'static str,
        namespace: String,
        name: String,
        reason: String,
    },
    #[error("{kind} \"{namespace}/{name}\" has no key \"{key}\"")]
    NoKey {
        kind: &'static str,
        namespace: String,
        name: String,
        key: String,
    },
}

#[derive(Debug, Deserialize, Default)]
struct Meta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawObject {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    data: BTreeMap<String, String>,
    #[serde(default)]
    binary_data: BTreeMap<String, String>,
    #[serde(default)]
    string_data: BTreeMap<String, String>,
}

/// The data of one ConfigMap or Secret, key -> bytes.
pub type Data = BTreeMap<String, Vec<u8>>;

#[derive(Debug, Clone)]
pub struct LocalStore {
    pub config_map_dir: PathBuf,
    pub secret_dir: PathBuf,
    /// `--allow-insecure-manifest-dir`: do not refuse directories and files others can write.
    pub allow_insecure: bool,
}

/// What a writable ConfigMap/Secret directory lets others do (in the refusal message).
const STORE_RISK: &str = "anyone who can write there can change the configuration, secrets and \
                          commands of pods on this node";

impl LocalStore {
    pub fn new(config_map_dir: PathBuf, secret_dir: PathBuf) -> Self {
        LocalStore {
            config_map_dir,
            secret_dir,
            allow_insecure: false,
        }
    }

    /// The store that also reads directories and files others can write (development only).
    pub fn allowing_insecure(mut self, allow: bool) -> Self {
        self.allow_insecure = allow;
        self
    }

    /// The first object of `kind` named `namespace/name` in `dir`. With permission checks on,
    /// `dir` and its parents must pass [`crate::config::file::check_secure_for`] (else the
    /// error names the path and the risk), and files that do not are skipped with a warning.
    fn find(
        &self,
        dir: &Path,
        kind: &'static str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Data>, crate::config::file::FileSourceError> {
        let what = if kind == "Secret" {
            "secret directory"
        } else {
            "configmap directory"
        };
        if !self.allow_insecure {
            crate::config::file::check_dir_chain(dir, what, STORE_RISK)?;
        }
        let Some(files) = crate::localstore::manifest_files(dir) else {
            return Ok(None);
        };
        for f in files {
            if !self.allow_insecure {
                let checked = std::fs::metadata(&f)
                    .map_err(|e| e.to_string())
                    .and_then(|m| {
                        crate::config::file::check_secure_for(&f, &m, "file", STORE_RISK)
                            .map_err(|e| e.to_string())
                    });
                if let Err(reason) = checked {
                    tracing::warn!(file = %f.display(), "skipping {kind} manifest: {reason}");
                    continue;
                }
            }
            let Ok(bytes) = std::fs::read(&f) else {
                continue;
            };
            // Read as the kubelet reads manifests (YAML 1.1, first document, Go's nulls).
            let obj: RawObject = match std::str::from_utf8(&bytes)
                .map_err(|e| e.to_string())
                .and_then(|t| crate::yaml::to_json(t).map_err(|e| e.to_string()))
                .and_then(|d| serde_json::from_value(d.value).map_err(|e| e.to_string()))
            {
                Ok(o) => o,
                Err(e) => {
                    tracing::warn!(file = %f.display(), error = %e, "skipping unreadable {kind} manifest");
                    continue;
                }
            };
            let ns = if obj.metadata.namespace.is_empty() {
                "default"
            } else {
                obj.metadata.namespace.as_str()
            };
            if obj.kind != kind || obj.metadata.name != name || ns != namespace {
                continue;
            }
            let mut data: Data = BTreeMap::new();
            if kind == "Secret" {
                for (k, v) in &obj.data {
                    match crate::util::base64::decode(v) {
                        Ok(b) => {
                            data.insert(k.clone(), b);
                        }
                        Err(e) => {
                            tracing::warn!(file = %f.display(), key = %k, error = %e, "bad secret data")
                        }
                    }
                }
                for (k, v) in obj.string_data {
                    data.insert(k, v.into_bytes());
                }
            } else {
                for (k, v) in obj.data {
                    data.insert(k, v.into_bytes());
                }
                for (k, v) in &obj.binary_data {
                    if let Ok(b) = crate::util::base64::decode(v) {
                        data.insert(k.clone(), b);
                    }
                }
            }
            return Ok(Some(data));
        }
        Ok(None)
    }

    pub fn config_map(&self, namespace: &str, name: &str) -> Result<Data, StoreError> {
        match self.find(&self.config_map_dir, "ConfigMap", namespace, name) {
            Ok(Some(data)) => Ok(data),
            Ok(None) => Err(StoreError::NotFound {
                kind: "configmap",
                namespace: namespace.into(),
                name: name.into(),
                dir: self.config_map_dir.display().to_string(),
            }),
            Err(reason) => Err(StoreError::Insecure {
                kind: "configmap",
                namespace: namespace.into(),
                name: name.into(),
                reason: reason.to_string(),
            }),
        }
    }

    pub fn secret(&self, namespace: &str, name: &str) -> Result<Data, StoreError> {
        match self.find(&self.secret_dir, "Secret", namespace, name) {
            Ok(Some(data)) => Ok(data),
            Ok(None) => Err(StoreError::NotFound {
                kind: "secret",
                namespace: namespace.into(),
                name: name.into(),
                dir: self.secret_dir.display().to_string(),
            }),
            Err(reason) => Err(StoreError::Insecure {
                kind: "secret",
                namespace: namespace.into(),
                name: name.into(),
                reason: reason.to_string(),
            }),
        }
    }

    /// One key of a ConfigMap or Secret (for configMapKeyRef / secretKeyRef).
    pub fn key(
        &self,
        secret: bool,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Result<Vec<u8>, StoreError> {
        let data = if secret {
            self.secret(namespace, name)?
        } else {
            self.config_map(namespace, name)?
        };
        data.get(key).cloned().ok_or_else(|| StoreError::NoKey {
            kind: if secret { "secret" } else { "configmap" },
            namespace: namespace.into(),
            name: name.into(),
            key: key.into(),
        })
    }
}

impl crate::api::env::ConfigMapsAndSecrets for LocalStore {
    fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Data, crate::api::env::LookupError> {
        Ok(LocalStore::config_map(self, namespace, name)?)
    }

    fn secret(&self, namespace: &str, name: &str) -> Result<Data, crate::api::env::LookupError> {
        Ok(LocalStore::secret(self, namespace, name)?)
    }

    fn key(
        &self,
        secret: bool,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Result<Vec<u8>, crate::api::env::LookupError> {
        Ok(LocalStore::key(self, secret, namespace, name, key)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 9: anyone who can write the store's directory or a file in it could change a
    /// pod's configuration or secrets, so such paths are refused unless allowed.
    #[test]
    fn directories_and_files_others_can_write_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().expect("tmp");
        let cm = d.path().join("cm");
        std::fs::create_dir_all(&cm).expect("mkdir");
        std::fs::write(
            cm.join("a.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n",
        )
        .expect("write");
        let chmod = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod")
        };
        let store = LocalStore::new(cm.clone(), d.path().join("sec"));
        assert!(store.config_map("default", "a").is_ok());
        chmod(&cm, 0o777);
        match store.config_map("default", "a") {
            Err(StoreError::Insecure { reason, .. }) => {
                assert!(
                    reason.contains("configmap directory") && reason.contains("world-writable"),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
        chmod(&cm, 0o755);
        chmod(&cm.join("a.yaml"), 0o666);
        assert!(
            matches!(
                store.config_map("default", "a"),
                Err(StoreError::NotFound { .. })
            ),
            "a world-writable file is skipped"
        );
        let lax = store.clone().allowing_insecure(true);
        assert_eq!(
            lax.key(false, "default", "a", "k").ok(),
            Some(b"v".to_vec())
        );
    }

    #[test]
    fn reads_config_maps_and_secrets_by_namespace_and_name() {
        let d = tempfile::tempdir().expect("tempdir");
        let cm = d.path().join("cm");
        let sec = d.path().join("sec");
        std::fs::create_dir_all(&cm).expect("dir");
        std::fs::create_dir_all(&sec).expect("dir");
        std::fs::write(cm.join("app.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  mode: fast\n  conf.ini: |\n    a=1\n").expect("w");
        std::fs::write(
            cm.join(".hidden.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: hidden\ndata: {k: v}\n",
        )
        .expect("w");
        std::fs::write(cm.join("other-ns.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  namespace: kube-system\ndata:\n  mode: slow\n").expect("w");
        std::fs::write(sec.join("s.json"), r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"creds"},"data":{"password":"czNjcmV0"},"stringData":{"user":"admin"}}"#).expect("w");
        let store = LocalStore::new(cm.clone(), sec.clone());
        let app = store.config_map("default", "app").expect("app");
        assert_eq!(app["mode"], b"fast");
        assert_eq!(app["conf.ini"], b"a=1\n");
        assert_eq!(
            store.config_map("kube-system", "app").expect("ks")["mode"],
            b"slow"
        );
        assert!(
            store.config_map("default", "hidden").is_err(),
            "dotfiles are ignored"
        );
        assert_eq!(
            store.key(true, "default", "creds", "password").expect("pw"),
            b"s3cret"
        );
        assert_eq!(
            store.key(true, "default", "creds", "user").expect("user"),
            b"admin"
        );
        let e = store
            .key(false, "default", "app", "nope")
            .expect_err("no key");
        assert_eq!(
            e.to_string(),
            "configmap \"default/app\" has no key \"nope\""
        );
        assert!(matches!(
            store.secret("default", "missing"),
            Err(StoreError::NotFound { .. })
        ));
    }
}

/// The manifest files of `dir` (`*.yaml`, `*.yml`, `*.json`, not hidden), sorted; None when
/// the directory cannot be read. Shared by the local store and the RuntimeClass directory.
pub(crate) fn manifest_files(dir: &std::path::Path) -> Option<Vec<std::path::PathBuf>> {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            !n.starts_with('.')
                && (n.ends_with(".yaml") || n.ends_with(".yml") || n.ends_with(".json"))
                && p.is_file()
        })
        .collect();
    files.sort();
    Some(files)
}
