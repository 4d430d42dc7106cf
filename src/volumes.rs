//! Pod volumes on the node, as the kubelet's volume plugins lay them out:
//! - `hostPath` with every `type` check (`DirectoryOrCreate`, `Directory`, `FileOrCreate`,
//!   `File`, `Socket`, `CharDevice`, `BlockDevice`; empty = no check);
//! - `emptyDir` under `<root-dir>/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>`, and
//!   `medium: Memory` as a tmpfs honouring `sizeLimit`.
//!
//! - `configMap`, `secret`, `downwardAPI` and `projected` (configMap, secret, downwardAPI and
//!   `serviceAccountToken` sources), written by the atomic writer ([`write_atomic`]) and
//!   rewritten in place at every sync. Their objects come from the [`VolumeContext`]: the local
//!   store for static pods, the API server (`apiobjects`) for API pods; tokens only for API pods.
//!
//! and the container's `volumeMounts` (readOnly, subPath, subPathExpr, mountPropagation).
//! Other volume types are reported as unsupported: the pod waits in ContainerCreating with the
//! reason.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::api::env::{ConfigMapsAndSecrets, EnvContext, ServiceAccountTokens, TokenRequestSpec};
use crate::api::quantity::parse_quantity;
use crate::api::{Container, Pod};
use crate::cri::{Mount, MountPropagation};
use crate::localstore::Data;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VolumeError {
    #[error("MountVolume.SetUp failed for volume \"{volume}\" : {reason}")]
    SetUp { volume: String, reason: String },
    #[error("volumeMounts[{index}] ({name}): {reason}")]
    Mount {
        index: usize,
        name: String,
        reason: String,
    },
}

/// Why the files of a configMap, secret, downwardAPI or projected volume cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DataSourceError {
    #[error("{what} has no key \"{key}\"")]
    NoKey { what: String, key: String },
    #[error("no local configmap/secret store configured")]
    NoStore,
    /// The local store's error, as text (it names the file).
    #[error("{0}")]
    Store(String),
    #[error(transparent)]
    Ref(#[from] crate::api::env::RefError),
    #[error("resourceFieldRef: container \"{0}\" not found")]
    NoContainer(String),
    #[error("downwardAPI item \"{0}\" needs fieldRef or resourceFieldRef")]
    NoRef(String),
    #[error("projected source not supported (serviceAccountToken needs an API server)")]
    Projected,
    /// The token manager's error (the kubelet's `failed to fetch token: ...`).
    #[error("{0}")]
    Token(String),
    #[error(transparent)]
    Path(#[from] SubPathError),
}

/// A `subPath` (or an item's `path`) that would leave its volume.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubPathError {
    #[error("subPath \"{0}\" must be a relative path")]
    Absolute(String),
    #[error("subPath \"{0}\" must not contain '..'")]
    ParentDir(String),
}

fn setup_err(volume: &str, reason: impl Into<String>) -> VolumeError {
    VolumeError::SetUp {
        volume: volume.to_string(),
        reason: reason.into(),
    }
}

/// What API-data volumes (configMap, secret, downwardAPI, projected) are made from.
#[derive(Debug, Clone, Default)]
pub struct VolumeContext {
    /// ConfigMaps and Secrets: the local store (static pods) or the API objects (API pods).
    pub store: Option<std::sync::Arc<dyn ConfigMapsAndSecrets>>,
    /// ServiceAccount tokens (API pods only).
    pub tokens: Option<std::sync::Arc<dyn ServiceAccountTokens>>,
    pub env: EnvContext,
    /// spec.securityContext.fsGroup: emptyDir and API-data volumes become group-owned by it
    /// (setgid directories, group read/write), as the kubelet's SetVolumeOwnership does.
    pub fs_group: Option<u32>,
}

/// Give `path` (recursively) to group `gid`: group rw (read-only volumes: r), +x on
/// directories, setgid directories.
fn set_ownership(path: &Path, gid: u32, read_only: bool) {
    let g = Some(nix::unistd::Gid::from_raw(gid));
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if m.file_type().is_symlink() {
            return;
        }
        let _ = nix::unistd::chown(path, None, g);
        let mode = m.permissions().mode() & 0o7777;
        let group = if read_only { 0o040 } else { 0o060 };
        let new = if m.is_dir() {
            mode | 0o2010 | group
        } else {
            mode | group
        };
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(new));
        if m.is_dir() {
            for e in std::fs::read_dir(path).into_iter().flatten().flatten() {
                set_ownership(&e.path(), gid, read_only);
            }
        }
    }
}

/// Files of an API-data volume: relative path -> (content, mode).
pub type Files = BTreeMap<String, (Vec<u8>, u32)>;

fn plugin_dir(v: &Value) -> &'static str {
    if v.get("configMap").is_some() {
        "kubernetes.io~configmap"
    } else if v.get("secret").is_some() {
        "kubernetes.io~secret"
    } else if v.get("downwardAPI").is_some() {
        "kubernetes.io~downward-api"
    } else {
        "kubernetes.io~projected"
    }
}

fn mode_of(v: Option<&Value>, default: u32) -> u32 {
    v.and_then(Value::as_u64)
        .map(|m| (m & 0o7777) as u32)
        .unwrap_or(default)
}

/// Items of a configMap/secret source: all keys, or the listed ones (a missing listed key is an
/// error unless the source is optional).
fn key_files(
    data: &Data,
    src: &Value,
    default_mode: u32,
    what: &str,
    files: &mut Files,
) -> Result<(), DataSourceError> {
    match src.get("items").and_then(Value::as_array) {
        Some(items) if !items.is_empty() => {
            for it in items {
                let key = it.get("key").and_then(Value::as_str).unwrap_or_default();
                let path = it.get("path").and_then(Value::as_str).unwrap_or(key);
                clean_relative(path)?;
                match data.get(key) {
                    Some(v) => {
                        files.insert(
                            path.to_string(),
                            (v.clone(), mode_of(it.get("mode"), default_mode)),
                        );
                    }
                    None if src
                        .get("optional")
                        .and_then(Value::as_bool)
                        .unwrap_or(false) => {}
                    None => {
                        return Err(DataSourceError::NoKey {
                            what: what.into(),
                            key: key.into(),
                        });
                    }
                }
            }
        }
        _ => {
            for (k, v) in data {
                files.insert(k.clone(), (v.clone(), default_mode));
            }
        }
    }
    Ok(())
}

fn store_source(
    pod: &Pod,
    ctx: &VolumeContext,
    src: &Value,
    secret: bool,
    default_mode: u32,
    files: &mut Files,
) -> Result<(), DataSourceError> {
    let name_field = if secret { "secretName" } else { "name" };
    let name = src
        .get(name_field)
        .or_else(|| src.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let ns = &pod.metadata.namespace;
    let what = format!(
        "{} \"{ns}/{name}\"",
        if secret { "secret" } else { "configmap" }
    );
    let Some(store) = ctx.store.as_ref() else {
        return Err(DataSourceError::NoStore);
    };
    match if secret {
        store.secret(ns, name)
    } else {
        store.config_map(ns, name)
    } {
        Ok(data) => key_files(&data, src, default_mode, &what, files),
        Err(e)
            if crate::api::env::optional_skips(&e)
                && src
                    .get("optional")
                    .and_then(Value::as_bool)
                    .unwrap_or(false) =>
        {
            Ok(())
        }
        Err(e) => Err(DataSourceError::Store(e.to_string())),
    }
}

/// The TokenRequest of a projected `serviceAccountToken` source of `pod` (the kubelet's
/// projected volume: audiences `[audience]` or none, expirationSeconds defaulting to 3600,
/// bound to the pod).
pub fn token_request(pod: &Pod, src: &Value) -> TokenRequestSpec {
    let sa = &pod.spec.service_account_name;
    TokenRequestSpec {
        namespace: pod.metadata.namespace.clone(),
        service_account: if sa.is_empty() {
            "default".into()
        } else {
            sa.clone()
        },
        audiences: src
            .get("audience")
            .and_then(Value::as_str)
            .filter(|a| !a.is_empty())
            .map(|a| vec![a.to_string()])
            .unwrap_or_default(),
        expiration_seconds: src
            .get("expirationSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(3600),
        pod_name: pod.metadata.name.clone(),
        pod_uid: pod.metadata.uid.clone(),
    }
}

fn token_source(
    pod: &Pod,
    ctx: &VolumeContext,
    src: &Value,
    default_mode: u32,
    files: &mut Files,
) -> Result<(), DataSourceError> {
    let path = src.get("path").and_then(Value::as_str).unwrap_or_default();
    clean_relative(path)?;
    let Some(tokens) = ctx.tokens.as_ref() else {
        return Err(DataSourceError::Projected);
    };
    let token = tokens
        .token(&token_request(pod, src))
        .map_err(|e| DataSourceError::Token(e.to_string()))?;
    files.insert(path.to_string(), (token.into_bytes(), default_mode));
    Ok(())
}

fn downward_items(
    pod: &Pod,
    ctx: &VolumeContext,
    items: Option<&Value>,
    default_mode: u32,
    files: &mut Files,
) -> Result<(), DataSourceError> {
    for it in items.and_then(Value::as_array).into_iter().flatten() {
        let path = it.get("path").and_then(Value::as_str).unwrap_or_default();
        clean_relative(path)?;
        let value = if let Some(fr) = it.get("fieldRef") {
            let fp = fr
                .get("fieldPath")
                .and_then(Value::as_str)
                .unwrap_or_default();
            crate::api::env::field_ref(pod, &ctx.env, fp)?
        } else if let Some(rf) = it.get("resourceFieldRef") {
            let cname = rf
                .get("containerName")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let c = pod
                .spec
                .containers
                .iter()
                .chain(&pod.spec.init_containers)
                .find(|c| c.name == cname)
                .ok_or_else(|| DataSourceError::NoContainer(cname.into()))?;
            crate::api::env::resource_field_ref(c, &ctx.env, rf)?
        } else {
            return Err(DataSourceError::NoRef(path.into()));
        };
        files.insert(
            path.to_string(),
            (value.into_bytes(), mode_of(it.get("mode"), default_mode)),
        );
    }
    Ok(())
}

/// The files of a configMap, secret, downwardAPI or projected volume, and whether it lives on
/// tmpfs (secrets). `Ok(None)` for other volume types.
fn api_data_volume(
    pod: &Pod,
    v: &Value,
    ctx: &VolumeContext,
) -> Option<(Result<Files, DataSourceError>, bool)> {
    let mut files = Files::new();
    if let Some(src) = v.get("configMap") {
        let dm = mode_of(src.get("defaultMode"), 0o644);
        let r = store_source(pod, ctx, src, false, dm, &mut files).map(|()| files);
        return Some((r, false));
    }
    if let Some(src) = v.get("secret") {
        let dm = mode_of(src.get("defaultMode"), 0o644);
        let r = store_source(pod, ctx, src, true, dm, &mut files).map(|()| files);
        return Some((r, true));
    }
    if let Some(src) = v.get("downwardAPI") {
        let dm = mode_of(src.get("defaultMode"), 0o644);
        let r = downward_items(pod, ctx, src.get("items"), dm, &mut files).map(|()| files);
        return Some((r, false));
    }
    if let Some(src) = v.get("projected") {
        let dm = mode_of(src.get("defaultMode"), 0o644);
        let mut secret = false;
        let mut r = Ok(());
        for s in src
            .get("sources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            r = r.and_then(|()| {
                if let Some(c) = s.get("configMap") {
                    store_source(pod, ctx, c, false, dm, &mut files)
                } else if let Some(c) = s.get("secret") {
                    secret = true;
                    store_source(pod, ctx, c, true, dm, &mut files)
                } else if let Some(d) = s.get("downwardAPI") {
                    downward_items(pod, ctx, d.get("items"), dm, &mut files)
                } else if let Some(t) = s.get("serviceAccountToken") {
                    // A credential: the volume is a tmpfs, as the kubelet's projected volume.
                    secret = true;
                    token_source(pod, ctx, t, dm, &mut files)
                } else {
                    Err(DataSourceError::Projected)
                }
            });
        }
        return Some((r.map(|()| files), secret));
    }
    None
}

/// The kubelet's AtomicWriter: the files go into a fresh `..<timestamp>` directory, the
/// `..data` symlink is swapped to it with one rename, and each top-level name is a symlink into
/// `..data`. A reader inside the container sees the old set or the new set, never a mix.
/// Returns false (and writes nothing) when the content is unchanged.
pub fn write_atomic(dir: &Path, files: &Files) -> std::io::Result<bool> {
    use std::os::unix::fs::symlink;
    let data_link = dir.join("..data");
    let current = std::fs::read_link(&data_link).ok();
    if let Some(cur) = &current {
        let cur_dir = dir.join(cur);
        let same = files.iter().all(|(p, (content, mode))| {
            let f = cur_dir.join(p);
            std::fs::read(&f).is_ok_and(|c| c == *content)
                && std::fs::metadata(&f).is_ok_and(|m| m.permissions().mode() & 0o7777 == *mode)
        });
        let count = count_files(&cur_dir);
        if same && count == files.len() {
            return Ok(false);
        }
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let ts_name = format!("..{stamp}");
    let ts_dir = dir.join(&ts_name);
    std::fs::create_dir_all(&ts_dir)?;
    for (p, (content, mode)) in files {
        let f = ts_dir.join(p);
        if let Some(parent) = f.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&f, content)?;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(*mode))?;
    }
    let tmp_link = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp_link);
    symlink(&ts_name, &tmp_link)?;
    std::fs::rename(&tmp_link, &data_link)?;
    // Top-level names: one symlink each into ..data; drop the ones that went away.
    let top: std::collections::BTreeSet<String> = files
        .keys()
        .filter_map(|p| p.split('/').next().map(str::to_string))
        .collect();
    for name in &top {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(format!("..data/{name}"), &link)?;
        }
    }
    for e in std::fs::read_dir(dir)?.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with("..") {
            if n != ts_name && n != "..data" && e.path().is_dir() && !e.path().is_symlink() {
                let _ = std::fs::remove_dir_all(e.path());
            }
            continue;
        }
        if !top.contains(&n) && e.path().is_symlink() {
            let _ = std::fs::remove_file(e.path());
        }
    }
    Ok(true)
}

fn count_files(dir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| {
            if e.path().is_dir() {
                count_files(&e.path())
            } else {
                1
            }
        })
        .sum()
}

fn is_api_data_dir(p: &Path) -> bool {
    p.parent().and_then(|d| d.file_name()).is_some_and(|n| {
        let n = n.to_string_lossy();
        n == "kubernetes.io~configmap"
            || n == "kubernetes.io~secret"
            || n == "kubernetes.io~downward-api"
            || n == "kubernetes.io~projected"
    })
}

/// Where the emptyDir volumes of a pod live.
pub fn empty_dir_root(pod_dir: &Path) -> PathBuf {
    pod_dir.join("volumes").join("kubernetes.io~empty-dir")
}

fn check_host_path(name: &str, path: &Path, kind: &str) -> Result<(), VolumeError> {
    let meta = std::fs::metadata(path);
    let fail = |what: &str| {
        setup_err(
            name,
            format!(
                "hostPath type check failed: {} is not a {what}",
                path.display()
            ),
        )
    };
    match kind {
        "" => Ok(()),
        "DirectoryOrCreate" => match meta {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(fail("directory")),
            Err(_) => {
                std::fs::create_dir_all(path)
                    .map_err(|e| setup_err(name, format!("creating {}: {e}", path.display())))?;
                let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755));
                Ok(())
            }
        },
        "FileOrCreate" => match meta {
            Ok(m) if m.is_file() => Ok(()),
            Ok(_) => Err(fail("file")),
            Err(_) => {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| setup_err(name, format!("creating {}: {e}", path.display())))?;
                let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644));
                Ok(())
            }
        },
        "Directory" | "File" | "Socket" | "CharDevice" | "BlockDevice" => {
            let m = meta.map_err(|_| {
                setup_err(
                    name,
                    format!(
                        "hostPath type check failed: {} is not a {}",
                        path.display(),
                        kind_word(kind)
                    ),
                )
            })?;
            let ft = m.file_type();
            let ok = match kind {
                "Directory" => ft.is_dir(),
                "File" => ft.is_file(),
                "Socket" => ft.is_socket(),
                "CharDevice" => ft.is_char_device(),
                _ => ft.is_block_device(),
            };
            if ok {
                Ok(())
            } else {
                Err(fail(kind_word(kind)))
            }
        }
        other => Err(setup_err(
            name,
            format!("invalid hostPath type \"{other}\""),
        )),
    }
}

fn kind_word(kind: &str) -> &'static str {
    match kind {
        "Directory" => "directory",
        "File" => "file",
        "Socket" => "socket file",
        "CharDevice" => "character device",
        _ => "block device",
    }
}

/// Is `path` a mount point (per /proc/self/mountinfo)?
pub fn is_mount_point(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.to_string_lossy();
    info.lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|mp| mp == want))
}

/// Set up every volume of the pod; returns volume name -> host path.
pub fn prepare(
    pod: &Pod,
    pod_dir: &Path,
    ctx: &VolumeContext,
) -> Result<BTreeMap<String, PathBuf>, VolumeError> {
    let mut out = BTreeMap::new();
    let Some(Value::Array(vols)) = pod.spec.extra.get("volumes") else {
        return Ok(out);
    };
    for v in vols {
        let name = v
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if let Some(hp) = v.get("hostPath") {
            let path = PathBuf::from(hp.get("path").and_then(Value::as_str).unwrap_or_default());
            let kind = hp.get("type").and_then(Value::as_str).unwrap_or_default();
            check_host_path(&name, &path, kind)?;
            out.insert(name, path);
        } else if let Some(ed) = v.get("emptyDir") {
            let dir = empty_dir_root(pod_dir).join(&name);
            std::fs::create_dir_all(&dir)
                .map_err(|e| setup_err(&name, format!("creating {}: {e}", dir.display())))?;
            // Not again over a mounted tmpfs (every sync prepares the volumes): 0777 would
            // clear its sticky bit.
            if !is_mount_point(&dir) {
                let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777));
            }
            if ed.get("medium").and_then(Value::as_str) == Some("Memory") && !is_mount_point(&dir) {
                let size = match ed.get("sizeLimit") {
                    Some(q) if !q.is_null() => {
                        let bytes = parse_quantity(q)
                            .map_err(|e| setup_err(&name, format!("sizeLimit: {e}")))?
                            .value();
                        format!(",size={bytes}")
                    }
                    _ => String::new(),
                };
                // The kubelet mounts the tmpfs without a mode (a tmpfs root is 1777) and its
                // setupDir compares only the permission bits with 0777, so the sticky bit stays.
                let opts = format!("mode=1777{size}");
                nix::mount::mount(
                    Some("tmpfs"),
                    &dir,
                    Some("tmpfs"),
                    nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
                    Some(opts.as_str()),
                )
                .map_err(|e| {
                    setup_err(&name, format!("mounting tmpfs at {}: {e}", dir.display()))
                })?;
            }
            if let Some(gid) = ctx.fs_group {
                set_ownership(&dir, gid, false);
            }
            out.insert(name, dir);
        } else if let Some((files, tmpfs)) = api_data_volume(pod, v, ctx) {
            let files = files.map_err(|e| setup_err(&name, e.to_string()))?;
            let dir = pod_dir.join("volumes").join(plugin_dir(v)).join(&name);
            std::fs::create_dir_all(&dir)
                .map_err(|e| setup_err(&name, format!("creating {}: {e}", dir.display())))?;
            if tmpfs && !is_mount_point(&dir) {
                // Secrets never touch the disk: their volume is a tmpfs.
                nix::mount::mount(
                    Some("tmpfs"),
                    &dir,
                    Some("tmpfs"),
                    nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
                    Some("mode=0755"),
                )
                .map_err(|e| {
                    setup_err(&name, format!("mounting tmpfs at {}: {e}", dir.display()))
                })?;
            }
            write_atomic(&dir, &files)
                .map_err(|e| setup_err(&name, format!("writing {}: {e}", dir.display())))?;
            if let Some(gid) = ctx.fs_group {
                set_ownership(&dir, gid, true);
            }
            out.insert(name, dir);
        } else {
            let kind = v
                .as_object()
                .and_then(|o| o.keys().find(|k| *k != "name").cloned())
                .unwrap_or_else(|| "unknown".into());
            return Err(setup_err(
                &name,
                format!("volume type \"{kind}\" is not supported by nanolet yet"),
            ));
        }
    }
    Ok(out)
}

/// Creates the missing directories of subPath `path` below volume `base` as the kubelet does
/// (makeMounts: `perm := GetMode(volumePath)`, then `SafeMakeDir(subPath, volumePath, perm)`):
/// every directory it creates gets the volume's whole mode after the umask, fchmod with the
/// permission bits and setgid, setuid and sticky. A Memory emptyDir with an fsGroup is
/// `dgtrwxrwxrwx` (tmpfs 1777 plus the ownership's setgid), and so is its new subPath.
fn make_sub_path_dirs(base: &Path, path: &Path) -> std::io::Result<()> {
    let mode = std::fs::metadata(base)?.permissions().mode() & 0o7777;
    let rel = path.strip_prefix(base).map_err(std::io::Error::other)?;
    let mut cur = base.to_path_buf();
    for c in rel.components() {
        cur.push(c);
        match std::fs::create_dir(&cur) {
            Ok(()) => std::fs::set_permissions(&cur, std::fs::Permissions::from_mode(mode))?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn clean_relative(p: &str) -> Result<PathBuf, SubPathError> {
    let path = Path::new(p);
    if path.is_absolute() {
        return Err(SubPathError::Absolute(p.into()));
    }
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(SubPathError::ParentDir(p.into()));
    }
    Ok(path.to_path_buf())
}

/// Whether a volumeMount is recursively read-only, the kubelet's `resolveRecursiveReadOnly`
/// (its errors, as its words): `Disabled` or unset is not; `IfPossible` is where the pod's
/// runtime handler supports it; `Enabled` is, or is an error where the handler does not.
/// `handler_supports` is asked only for a mount that wants it.
pub fn resolve_recursive_read_only(
    m: &Value,
    handler_supports: &dyn Fn() -> bool,
) -> Result<bool, String> {
    let name = m.get("name").and_then(Value::as_str).unwrap_or_default();
    let mode = match m.get("recursiveReadOnly").and_then(Value::as_str) {
        None | Some("Disabled") => return Ok(false),
        Some(mode) => mode,
    };
    if m.get("readOnly").and_then(Value::as_bool) != Some(true) {
        return Err(format!(
            "volume \"{name}\" requested recursive read-only mode, but it is not read-only"
        ));
    }
    if let Some(p) = m
        .get("mountPropagation")
        .and_then(Value::as_str)
        .filter(|p| *p != "None")
    {
        return Err(format!(
            "volume \"{name}\" requested recursive read-only mode, but it is not compatible with propagation \"{p}\""
        ));
    }
    match mode {
        "IfPossible" => Ok(handler_supports()),
        "Enabled" if handler_supports() => Ok(true),
        "Enabled" => Err(format!(
            "volume \"{name}\" requested recursive read-only mode, but it is not supported by the runtime"
        )),
        other => Err(format!("unknown recursive read-only mode \"{other}\"")),
    }
}

/// The CRI mounts for the container's `volumeMounts`. `env` expands `subPathExpr`;
/// `rro_supported`: whether the pod's runtime handler does recursive read-only mounts (asked
/// only when a mount wants one).
pub fn mounts_for(
    c: &Container,
    volumes: &BTreeMap<String, PathBuf>,
    env: &[(String, String)],
    rro_supported: &dyn Fn() -> bool,
) -> Result<Vec<Mount>, VolumeError> {
    let mut out = vec![];
    let Some(Value::Array(vms)) = c.extra.get("volumeMounts") else {
        return Ok(out);
    };
    for (index, m) in vms.iter().enumerate() {
        let name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let err = |reason: String| VolumeError::Mount {
            index,
            name: name.clone(),
            reason,
        };
        let base = volumes
            .get(&name)
            .ok_or_else(|| err("volume not found in spec.volumes".into()))?;
        let mount_path = m
            .get("mountPath")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let sub = match (
            m.get("subPath").and_then(Value::as_str),
            m.get("subPathExpr").and_then(Value::as_str),
        ) {
            (Some(s), _) if !s.is_empty() => Some(s.to_string()),
            (_, Some(expr)) if !expr.is_empty() => {
                let lookup = |n: &str| {
                    env.iter()
                        .rev()
                        .find(|(k, _)| k == n)
                        .map(|(_, v)| v.clone())
                };
                Some(crate::api::env::expand(expr, &lookup))
            }
            _ => None,
        };
        let host = match sub {
            Some(s) => {
                let rel = clean_relative(&s).map_err(|e| err(e.to_string()))?;
                let p = base.join(rel);
                if !p.exists() && base.is_dir() {
                    make_sub_path_dirs(base, &p)
                        .map_err(|e| err(format!("creating subPath {}: {e}", p.display())))?;
                }
                p
            }
            None => base.clone(),
        };
        let recursive_read_only = resolve_recursive_read_only(m, rro_supported)
            .map_err(|e| err(format!("failed to resolve recursive read-only mode: {e}")))?;
        let propagation = match m.get("mountPropagation").and_then(Value::as_str) {
            Some("HostToContainer") => MountPropagation::HostToContainer,
            Some("Bidirectional") => MountPropagation::Bidirectional,
            _ => MountPropagation::Private,
        };
        out.push(Mount {
            container_path: mount_path.to_string(),
            host_path: host.to_string_lossy().into_owned(),
            // configMap, secret, downwardAPI and projected volumes are always read-only.
            readonly: m.get("readOnly").and_then(Value::as_bool).unwrap_or(false)
                || is_api_data_dir(base),
            propagation,
            recursive_read_only,
        });
    }
    Ok(out)
}

/// Unmount every tmpfs the pod's emptyDir volumes use (deepest first) so the pod directory
/// can be removed. Never follows into host paths.
pub fn teardown(pod_dir: &Path) {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let prefix = format!("{}/", pod_dir.join("volumes").to_string_lossy());
    let mut points: Vec<&str> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|mp| mp.starts_with(&prefix))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        if let Err(e) = nix::mount::umount2(p, nix::mount::MntFlags::MNT_DETACH) {
            tracing::warn!(path = p, error = %e, "unmounting emptyDir tmpfs");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::localstore::LocalStore;
    use serde_json::json;
    use std::sync::Arc;

    fn pod_with(vols: Value) -> Pod {
        let mut p = Pod::default();
        p.spec.extra.insert("volumes".into(), vols);
        p
    }

    #[test]
    fn host_path_types_are_checked_like_the_kubelet() {
        let d = tempfile::tempdir().expect("tempdir");
        let base = d.path();
        std::fs::write(base.join("f"), "x").expect("file");
        let check = |path: &str, kind: &str| check_host_path("v", &base.join(path), kind);
        assert!(check("f", "File").is_ok());
        assert!(check("", "Directory").is_ok());
        let e = check("f", "Directory").expect_err("not a dir");
        assert_eq!(
            e.to_string(),
            format!(
                "MountVolume.SetUp failed for volume \"v\" : hostPath type check failed: {}/f is not a directory",
                base.display()
            )
        );
        assert!(check("missing", "File").is_err());
        assert!(check("f", "Socket").is_err());
        assert!(check("f", "CharDevice").is_err());
        assert!(check("f", "BlockDevice").is_err());
        assert!(check_host_path("v", Path::new("/dev/null"), "CharDevice").is_ok());
        assert!(check("new/dir", "DirectoryOrCreate").is_ok());
        assert!(base.join("new/dir").is_dir());
        assert!(check("newfile", "FileOrCreate").is_ok());
        assert!(base.join("newfile").is_file());
        assert!(
            check("f", "DirectoryOrCreate").is_err(),
            "an existing file is not a directory"
        );
        assert!(check("x", "Weird").is_err());
    }

    #[test]
    fn empty_dir_and_mounts_with_sub_paths() {
        let d = tempfile::tempdir().expect("tempdir");
        let host = d.path().join("host");
        std::fs::create_dir_all(&host).expect("host dir");
        let pod = pod_with(json!([
            {"name": "scratch", "emptyDir": {}},
            {"name": "data", "hostPath": {"path": host.to_string_lossy(), "type": "Directory"}}
        ]));
        let pod_dir = d.path().join("pods/u1");
        let vols = prepare(&pod, &pod_dir, &VolumeContext::default()).expect("volumes");
        assert_eq!(
            vols["scratch"],
            pod_dir.join("volumes/kubernetes.io~empty-dir/scratch")
        );
        assert!(vols["scratch"].is_dir());
        let mut c = Container::default();
        c.extra.insert(
            "volumeMounts".into(),
            json!([
                {"name": "scratch", "mountPath": "/scratch"},
                {"name": "data", "mountPath": "/data", "readOnly": true, "subPath": "sub/dir", "mountPropagation": "HostToContainer"},
                {"name": "data", "mountPath": "/per-pod", "subPathExpr": "$(POD)"}
            ]),
        );
        let ms = mounts_for(&c, &vols, &[("POD".into(), "web".into())], &|| false).expect("mounts");
        assert!(ms.iter().all(|m| !m.recursive_read_only));
        assert_eq!(ms[0].host_path, vols["scratch"].to_string_lossy());
        assert!(!ms[0].readonly);
        assert_eq!(ms[1].host_path, host.join("sub/dir").to_string_lossy());
        assert!(
            ms[1].readonly && host.join("sub/dir").is_dir(),
            "missing subPath created"
        );
        assert_eq!(ms[1].propagation, MountPropagation::HostToContainer);
        assert_eq!(ms[2].host_path, host.join("web").to_string_lossy());
        c.extra.insert(
            "volumeMounts".into(),
            json!([{"name": "data", "mountPath": "/x", "subPath": "../etc"}]),
        );
        assert!(
            mounts_for(&c, &vols, &[], &|| false).is_err(),
            "subPath may not escape the volume"
        );
        c.extra.insert(
            "volumeMounts".into(),
            json!([{"name": "nope", "mountPath": "/x"}]),
        );
        assert!(mounts_for(&c, &vols, &[], &|| false).is_err());
    }

    /// Found by scripts/differential: under the kubelet a subPathExpr directory it creates in
    /// an emptyDir is 0777 like the volume (makeMounts creates it with the volume's mode), and
    /// a Memory emptyDir keeps the tmpfs root's sticky bit (1777).
    #[test]
    fn created_sub_paths_get_the_volumes_mode_and_memory_empty_dirs_are_1777() {
        let d = tempfile::tempdir().expect("tempdir");
        let pod = pod_with(json!([
            {"name": "scratch", "emptyDir": {}},
            {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}
        ]));
        let pod_dir = d.path().join("pods/u1");
        let vols = prepare(&pod, &pod_dir, &VolumeContext::default()).expect("volumes");
        // Every sync prepares the volumes again.
        let again = prepare(&pod, &pod_dir, &VolumeContext::default());
        let mode = |p: &Path| {
            std::fs::metadata(p)
                .map(|m| m.permissions().mode() & 0o7777)
                .unwrap_or(0)
        };
        let mem_mode = mode(&vols["mem"]);
        let _ = nix::mount::umount2(&vols["mem"], nix::mount::MntFlags::MNT_DETACH);
        assert!(again.is_ok());
        assert_eq!(mem_mode, 0o1777, "Memory emptyDir root after a second sync");
        let mut c = Container::default();
        c.extra.insert(
            "volumeMounts".into(),
            json!([{"name": "scratch", "mountPath": "/by-name", "subPathExpr": "$(POD)"}]),
        );
        let ms = mounts_for(&c, &vols, &[("POD".into(), "web".into())], &|| false).expect("mounts");
        assert_eq!(mode(Path::new(&ms[0].host_path)), 0o777, "created subPath");
    }

    /// e2e `EmptyDir volumes when FSGroup is specified ... nonexistent volume subPath should
    /// have the correct mode and owner using FSGroup`: makeMounts creates the subPath with the
    /// volume's whole mode (`hu.GetMode`, then SafeMakeDir's fchmod keeps setgid and sticky):
    /// `dgtrwxrwxrwx`, group 123, for a Memory emptyDir with fsGroup 123; every directory
    /// created on the way gets it, the umask does not apply.
    #[test]
    fn a_created_sub_path_gets_the_volumes_setgid_and_sticky_bits() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().expect("tempdir");
        let pod = pod_with(json!([{"name": "mem", "emptyDir": {"medium": "Memory"}}]));
        let ctx = VolumeContext {
            fs_group: Some(123),
            ..VolumeContext::default()
        };
        let vols = prepare(&pod, &d.path().join("pods/u1"), &ctx).expect("volumes");
        let mut c = Container::default();
        c.extra.insert(
            "volumeMounts".into(),
            json!([{"name": "mem", "mountPath": "/test-volume", "subPath": "test-sub/deeper"}]),
        );
        let ms = mounts_for(&c, &vols, &[], &|| false);
        let meta =
            |p: &Path| std::fs::metadata(p).map(|m| (m.permissions().mode() & 0o7777, m.gid()));
        let (top, sub) = (
            meta(&vols["mem"].join("test-sub")),
            meta(&vols["mem"].join("test-sub/deeper")),
        );
        let _ = nix::mount::umount2(&vols["mem"], nix::mount::MntFlags::MNT_DETACH);
        let ms = ms.expect("mounts");
        assert!(
            ms[0].host_path.ends_with("mem/test-sub/deeper"),
            "{:?}",
            ms[0]
        );
        assert_eq!(
            top.expect("test-sub"),
            (0o3777, 123),
            "created subPath directory"
        );
        assert_eq!(sub.expect("deeper"), (0o3777, 123), "every created level");
    }

    #[test]
    fn unsupported_volume_types_are_named() {
        let d = tempfile::tempdir().expect("tempdir");
        let pod = pod_with(json!([{"name": "n", "nfs": {"server": "x", "path": "/"}}]));
        let e = prepare(&pod, d.path(), &VolumeContext::default()).expect_err("unsupported");
        assert!(e.to_string().contains("\"nfs\" is not supported"), "{e}");
    }

    fn store_dirs(d: &Path) -> LocalStore {
        let (cm, sec) = (d.join("cm"), d.join("sec"));
        std::fs::create_dir_all(&cm).expect("dir");
        std::fs::create_dir_all(&sec).expect("dir");
        std::fs::write(cm.join("app.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata:\n  mode: fast\n  level: \"3\"\n").expect("w");
        LocalStore::new(cm, sec)
    }

    #[test]
    fn config_map_volume_items_modes_and_atomic_update() {
        let d = tempfile::tempdir().expect("tempdir");
        let store = store_dirs(d.path());
        let mut pod = pod_with(json!([
            {"name": "all", "configMap": {"name": "app"}},
            {"name": "some", "configMap": {"name": "app", "defaultMode": 0o600, "items": [{"key": "mode", "path": "sub/m.txt", "mode": 0o400}]}},
            {"name": "missing-ok", "configMap": {"name": "nope", "optional": true}},
            {"name": "dapi", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}, {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}
        ]));
        pod.metadata.namespace = "default".into();
        pod.metadata.name = "web-node1".into();
        pod.metadata.labels.insert("app".into(), "web".into());
        let ctx = VolumeContext {
            store: Some(Arc::new(store.clone()) as Arc<dyn ConfigMapsAndSecrets>),
            tokens: None,
            env: EnvContext::default(),
            fs_group: None,
        };
        let pod_dir = d.path().join("pod");
        let vols = prepare(&pod, &pod_dir, &ctx).expect("volumes");
        let all = &vols["all"];
        assert!(all.ends_with("volumes/kubernetes.io~configmap/all"));
        assert_eq!(
            std::fs::read_to_string(all.join("mode")).expect("mode"),
            "fast"
        );
        assert!(
            std::fs::symlink_metadata(all.join("mode"))
                .expect("meta")
                .file_type()
                .is_symlink(),
            "top-level names are symlinks into ..data"
        );
        let m = vols["some"].join("sub/m.txt");
        assert_eq!(std::fs::read_to_string(&m).expect("item"), "fast");
        assert_eq!(
            std::fs::metadata(&m).expect("meta").permissions().mode() & 0o777,
            0o400
        );
        assert!(
            !vols["some"].join("level").exists(),
            "only the listed items"
        );
        assert_eq!(
            std::fs::read_to_string(vols["dapi"].join("labels")).expect("labels"),
            "app=\"web\""
        );
        assert_eq!(
            std::fs::read_to_string(vols["dapi"].join("name")).expect("name"),
            "web-node1"
        );
        // Unchanged content: nothing rewritten.
        let data_before = std::fs::read_link(all.join("..data")).expect("..data");
        prepare(&pod, &pod_dir, &ctx).expect("again");
        assert_eq!(
            std::fs::read_link(all.join("..data")).expect("..data"),
            data_before
        );
        // The source changes: new ..data target, new content, removed key gone.
        std::fs::write(
            store.config_map_dir.join("app.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata:\n  mode: slow\n",
        )
        .expect("w");
        prepare(&pod, &pod_dir, &ctx).expect("update");
        assert_ne!(
            std::fs::read_link(all.join("..data")).expect("..data"),
            data_before
        );
        assert_eq!(
            std::fs::read_to_string(all.join("mode")).expect("mode"),
            "slow"
        );
        assert!(!all.join("level").exists(), "a removed key disappears");
        let dirs = std::fs::read_dir(all)
            .expect("rd")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("..1"))
            .count();
        assert_eq!(dirs, 1, "the old timestamped directory is removed");
        // A missing, non-optional ConfigMap fails with the kubelet's wording.
        let bad = pod_with(json!([{"name": "x", "configMap": {"name": "nope"}}]));
        let e = prepare(&bad, &pod_dir, &ctx).expect_err("missing");
        assert!(
            e.to_string().contains("configmap \"/nope\" not found"),
            "{e}"
        );
    }
}

#[cfg(test)]
mod projected_tests {
    use super::*;
    use crate::api::env::{LookupError, ObjectData};
    use serde_json::json;
    use std::sync::{Arc, Mutex};

    #[derive(Debug, Default)]
    struct Fake {
        token: Mutex<String>,
        requests: Mutex<Vec<TokenRequestSpec>>,
    }

    impl ConfigMapsAndSecrets for Fake {
        fn config_map(&self, _: &str, name: &str) -> Result<ObjectData, LookupError> {
            match name {
                "kube-root-ca.crt" => Ok([("ca.crt".to_string(), b"PEM".to_vec())].into()),
                _ => Err(Box::new(crate::api::env::KubeletMessage(format!(
                    "configmap \"{name}\" not found"
                )))),
            }
        }
        fn secret(&self, _: &str, name: &str) -> Result<ObjectData, LookupError> {
            self.config_map("", name)
        }
        fn key(&self, _: bool, _: &str, _: &str, _: &str) -> Result<Vec<u8>, LookupError> {
            Err("unused".into())
        }
    }

    impl ServiceAccountTokens for Fake {
        fn token(&self, req: &TokenRequestSpec) -> Result<String, LookupError> {
            self.requests.lock().unwrap().push(req.clone());
            Ok(self.token.lock().unwrap().clone())
        }
    }

    /// The ServiceAccount admission plugin's volume (plugin/pkg/admission/serviceaccount:
    /// defaultMode 0644, token expirationSeconds 3607, kube-root-ca.crt's ca.crt, the
    /// namespace), on a tmpfs, rewritten in place by the atomic writer when the token changes.
    #[test]
    fn the_kube_api_access_volume_is_token_ca_and_namespace() {
        let d = tempfile::tempdir().unwrap();
        let mut pod = Pod::default();
        pod.metadata.name = "ds-abcde".into();
        pod.metadata.namespace = "kube-system".into();
        pod.metadata.uid = "uid-1".into();
        pod.spec.service_account_name = "kube-proxy".into();
        pod.spec.extra.insert("volumes".into(), json!([{"name": "kube-api-access-x7k2p", "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}]));
        let fake = Arc::new(Fake::default());
        *fake.token.lock().unwrap() = "tok-1".into();
        let ctx = VolumeContext {
            store: Some(fake.clone() as Arc<dyn ConfigMapsAndSecrets>),
            tokens: Some(fake.clone() as Arc<dyn ServiceAccountTokens>),
            ..VolumeContext::default()
        };
        let pod_dir = d.path().join("pod");
        let vols = prepare(&pod, &pod_dir, &ctx).expect("volumes");
        let dir = &vols["kube-api-access-x7k2p"];
        assert!(dir.ends_with("volumes/kubernetes.io~projected/kube-api-access-x7k2p"));
        assert!(is_mount_point(dir), "a projected token volume is a tmpfs");
        assert_eq!(std::fs::read(dir.join("token")).unwrap(), b"tok-1");
        assert_eq!(std::fs::read(dir.join("ca.crt")).unwrap(), b"PEM");
        assert_eq!(
            std::fs::read(dir.join("namespace")).unwrap(),
            b"kube-system"
        );
        let mode = std::fs::metadata(dir.join("token"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o644);
        assert_eq!(
            std::fs::read_link(dir.join("token")).unwrap(),
            Path::new("..data/token")
        );
        let req = fake.requests.lock().unwrap()[0].clone();
        assert_eq!(req.expiration_seconds, 3607);
        assert_eq!(req.service_account, "kube-proxy");
        assert_eq!(
            (req.pod_name.as_str(), req.pod_uid.as_str()),
            ("ds-abcde", "uid-1")
        );
        assert!(req.audiences.is_empty());
        // A refreshed token is swapped in through ..data; the directory stays the same mount.
        let before = std::fs::read_link(dir.join("..data")).unwrap();
        *fake.token.lock().unwrap() = "tok-2".into();
        prepare(&pod, &pod_dir, &ctx).expect("volumes again");
        assert_eq!(std::fs::read(dir.join("token")).unwrap(), b"tok-2");
        assert_ne!(std::fs::read_link(dir.join("..data")).unwrap(), before);
        teardown(&pod_dir);
        assert!(!is_mount_point(dir));
    }

    /// A required ConfigMap that does not exist: the kubelet's FailedMount text.
    #[test]
    fn a_missing_config_map_fails_the_mount_with_the_kubelet_text() {
        let d = tempfile::tempdir().unwrap();
        let mut pod = Pod::default();
        pod.metadata.namespace = "ns".into();
        pod.spec.extra.insert(
            "volumes".into(),
            json!([{"name": "cfg", "configMap": {"name": "app"}},
                   {"name": "opt", "configMap": {"name": "other", "optional": true}}]),
        );
        let fake = Arc::new(Fake::default());
        let ctx = VolumeContext {
            store: Some(fake as Arc<dyn ConfigMapsAndSecrets>),
            ..VolumeContext::default()
        };
        let e = prepare(&pod, d.path(), &ctx).unwrap_err();
        assert_eq!(
            e.to_string(),
            "MountVolume.SetUp failed for volume \"cfg\" : configmap \"app\" not found"
        );
        // A token source without a token manager (a static pod) is refused, as before.
        pod.spec.extra.insert(
            "volumes".into(),
            json!([{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]),
        );
        let e = prepare(&pod, d.path(), &ctx).unwrap_err();
        assert!(
            e.to_string().contains("projected source not supported"),
            "{e}"
        );
        teardown(d.path());
    }

    /// resolveRecursiveReadOnly (kubelet_pods.go): IfPossible follows the runtime handler,
    /// Enabled without it is refused with the kubelet's words, and only read-only mounts
    /// without propagation may ask; a container asking for it gets the CRI mount's
    /// `recursive_read_only`.
    #[test]
    fn recursive_read_only_is_resolved_as_the_kubelet_resolves_it() {
        let m = |v: Value| v;
        let yes = || true;
        let no = || false;
        let rro = |v: &Value, s: &dyn Fn() -> bool| resolve_recursive_read_only(v, s);
        assert_eq!(
            rro(&m(json!({"name": "v", "readOnly": true})), &yes),
            Ok(false)
        );
        assert_eq!(
            rro(
                &m(json!({"name": "v", "readOnly": true, "recursiveReadOnly": "Disabled"})),
                &yes
            ),
            Ok(false)
        );
        let if_possible = json!({"name": "v", "readOnly": true, "recursiveReadOnly": "IfPossible"});
        assert_eq!(rro(&if_possible, &yes), Ok(true));
        assert_eq!(rro(&if_possible, &no), Ok(false));
        let enabled = json!({"name": "v", "readOnly": true, "recursiveReadOnly": "Enabled"});
        assert_eq!(rro(&enabled, &yes), Ok(true));
        assert_eq!(
            rro(&enabled, &no),
            Err("volume \"v\" requested recursive read-only mode, but it is not supported by the runtime".into())
        );
        assert_eq!(
            rro(&json!({"name": "v", "recursiveReadOnly": "Enabled"}), &yes),
            Err("volume \"v\" requested recursive read-only mode, but it is not read-only".into())
        );
        assert_eq!(
            rro(
                &json!({"name": "v", "readOnly": true, "recursiveReadOnly": "Enabled", "mountPropagation": "HostToContainer"}),
                &yes
            ),
            Err("volume \"v\" requested recursive read-only mode, but it is not compatible with propagation \"HostToContainer\"".into())
        );

        let dir = tempfile::tempdir().unwrap();
        let vols: BTreeMap<String, PathBuf> = [("v".to_string(), dir.path().to_path_buf())].into();
        let mut c = Container::default();
        c.extra.insert("volumeMounts".into(), json!([{"name": "v", "mountPath": "/v", "readOnly": true, "recursiveReadOnly": "Enabled"}]));
        let ms = mounts_for(&c, &vols, &[], &yes).expect("mounts");
        assert!(ms[0].readonly && ms[0].recursive_read_only);
        let err = mounts_for(&c, &vols, &[], &no).expect_err("refused without support");
        assert_eq!(
            err.to_string(),
            "volumeMounts[0] (v): failed to resolve recursive read-only mode: volume \"v\" requested recursive read-only mode, but it is not supported by the runtime"
        );
    }
}
