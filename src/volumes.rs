//! Pod volumes on the node, as the kubelet's volume plugins lay them out:
//! - `hostPath` with every `type` check (`DirectoryOrCreate`, `Directory`, `FileOrCreate`,
//!   `File`, `Socket`, `CharDevice`, `BlockDevice`; empty = no check);
//! - `emptyDir` under `<root-dir>/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>`, and
//!   `medium: Memory` as a tmpfs honouring `sizeLimit`.
//!
//! and the container's `volumeMounts` (readOnly, subPath, subPathExpr, mountPropagation).
//! Other volume types (downwardAPI, projected, and the local configMap/secret store) are
//! reported as unsupported: the pod waits in ContainerCreating with the reason.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::pod::quantity::parse_quantity;
use crate::pod::{Container, Pod};
use crate::runtime::{Mount, MountPropagation};

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

fn setup_err(volume: &str, reason: impl Into<String>) -> VolumeError {
    VolumeError::SetUp {
        volume: volume.to_string(),
        reason: reason.into(),
    }
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
pub fn prepare(pod: &Pod, pod_dir: &Path) -> Result<BTreeMap<String, PathBuf>, VolumeError> {
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
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777));
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
                let opts = format!("mode=0777{size}");
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

fn clean_relative(p: &str) -> Result<PathBuf, String> {
    let path = Path::new(p);
    if path.is_absolute() {
        return Err(format!("subPath \"{p}\" must be a relative path"));
    }
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(format!("subPath \"{p}\" must not contain '..'"));
    }
    Ok(path.to_path_buf())
}

/// The CRI mounts for the container's `volumeMounts`. `env` expands `subPathExpr`.
pub fn mounts_for(
    c: &Container,
    volumes: &BTreeMap<String, PathBuf>,
    env: &[(String, String)],
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
                Some(crate::pod::env::expand(expr, &lookup))
            }
            _ => None,
        };
        let host = match sub {
            Some(s) => {
                let rel = clean_relative(&s).map_err(err)?;
                let p = base.join(rel);
                if !p.exists() && base.is_dir() {
                    // The kubelet creates a missing subPath as a directory.
                    std::fs::create_dir_all(&p)
                        .map_err(|e| err(format!("creating subPath {}: {e}", p.display())))?;
                }
                p
            }
            None => base.clone(),
        };
        let propagation = match m.get("mountPropagation").and_then(Value::as_str) {
            Some("HostToContainer") => MountPropagation::HostToContainer,
            Some("Bidirectional") => MountPropagation::Bidirectional,
            _ => MountPropagation::Private,
        };
        out.push(Mount {
            container_path: mount_path.to_string(),
            host_path: host.to_string_lossy().into_owned(),
            readonly: m.get("readOnly").and_then(Value::as_bool).unwrap_or(false),
            propagation,
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
    let prefix = format!("{}/", empty_dir_root(pod_dir).to_string_lossy());
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
    use serde_json::json;

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
        let vols = prepare(&pod, &pod_dir).expect("volumes");
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
        let ms = mounts_for(&c, &vols, &[("POD".into(), "web".into())]).expect("mounts");
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
            mounts_for(&c, &vols, &[]).is_err(),
            "subPath may not escape the volume"
        );
        c.extra.insert(
            "volumeMounts".into(),
            json!([{"name": "nope", "mountPath": "/x"}]),
        );
        assert!(mounts_for(&c, &vols, &[]).is_err());
    }

    #[test]
    fn unsupported_volume_types_are_named() {
        let d = tempfile::tempdir().expect("tempdir");
        let e = prepare(
            &pod_with(json!([{"name": "dapi", "downwardAPI": {"items": []}}])),
            d.path(),
        )
        .expect_err("unsupported");
        assert!(
            e.to_string().contains("\"downwardAPI\" is not supported"),
            "{e}"
        );
    }
}
