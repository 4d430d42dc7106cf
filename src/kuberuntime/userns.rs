//! User namespaces for `hostUsers: false` pods (Go's pkg/kubelet/userns): each such pod gets
//! its own range of 65536 host IDs, UID and GID alike, container ID 0 mapped to the range's
//! first host ID. Ranges are slots of 65536 IDs from 65536 up to 2^32 (the kubelet's default
//! when the host has no `kubelet` entry in /etc/subuid), or the `kubelet` user's subordinate
//! range when /etc/subuid and /etc/subgid give it the same one. A pod's mapping is kept in
//! `<root-dir>/pods/<uid>/userns` as the kubelet writes it (`{"uidMappings":[{"hostId":..,
//! "containerId":0,"length":65536}],"gidMappings":[..]}`), so it survives a restart and is
//! never handed to another pod while that file exists; it goes with the pod's directory.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::cri::IdMapping;

/// IDs per pod (the kubelet's `userNsUnitLength` and default `idsPerPod`).
pub const IDS_PER_POD: u32 = 65536;
/// The file in the pod directory (the kubelet's `mappingsFile`).
pub const MAPPINGS_FILE: &str = "userns";

/// The kubelet's default range: every ID from 65536 up (`getKubeletMappings`).
const DEFAULT_FIRST: u32 = 1 << 16;
const DEFAULT_LEN: u64 = (1u64 << 32) - DEFAULT_FIRST as u64;

#[derive(Debug, thiserror::Error)]
pub enum UsernsError {
    #[error("reading user namespace mappings {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("writing user namespace mappings {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "could not find an empty slot to allocate a user namespace ({slots} slots of {IDS_PER_POD} IDs all in use)"
    )]
    Exhausted { slots: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct FileMapping {
    #[serde(rename = "hostId")]
    host_id: u32,
    #[serde(rename = "containerId")]
    container_id: u32,
    length: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct MappingsFile {
    #[serde(rename = "uidMappings")]
    uid_mappings: Vec<FileMapping>,
    #[serde(rename = "gidMappings")]
    gid_mappings: Vec<FileMapping>,
}

/// The host ID range pods' namespaces are carved from: (first ID, number of IDs).
pub fn host_range() -> (u32, u64) {
    let sub = |f: &str| {
        std::fs::read_to_string(f)
            .ok()
            .and_then(|s| subid_range(&s, "kubelet"))
    };
    match (sub("/etc/subuid"), sub("/etc/subgid")) {
        (Some(u), Some(g)) if u == g => u,
        _ => (DEFAULT_FIRST, DEFAULT_LEN),
    }
}

/// The `user:first:count` line of /etc/subuid for `user`, when it is usable as the kubelet
/// requires (first a multiple of 65536 and at least 65536, count a multiple of 65536).
fn subid_range(text: &str, user: &str) -> Option<(u32, u64)> {
    text.lines().find_map(|l| {
        let mut f = l.trim().split(':');
        if f.next()? != user {
            return None;
        }
        let first: u32 = f.next()?.parse().ok()?;
        let count: u64 = f.next()?.parse().ok()?;
        let ok = first >= IDS_PER_POD
            && first % IDS_PER_POD == 0
            && count >= IDS_PER_POD as u64
            && count % IDS_PER_POD as u64 == 0;
        ok.then_some((first, count))
    })
}

fn mappings_path(pod_dir: &Path) -> PathBuf {
    pod_dir.join(MAPPINGS_FILE)
}

/// The pod's recorded mapping (one range, UIDs and GIDs alike, container ID 0), if any.
pub fn read(pod_dir: &Path) -> Result<Option<IdMapping>, UsernsError> {
    let path = mappings_path(pod_dir);
    let body = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(UsernsError::Read {
                path: path.display().to_string(),
                reason: e.to_string(),
            });
        }
    };
    let bad = |reason: &str| UsernsError::Read {
        path: path.display().to_string(),
        reason: reason.to_string(),
    };
    let f: MappingsFile = serde_json::from_slice(&body).map_err(|e| bad(&e.to_string()))?;
    // The kubelet's checks on the file (parseUserNsFileAndRecord).
    let ([u], [g]) = (f.uid_mappings.as_slice(), f.gid_mappings.as_slice()) else {
        return Err(bad("exactly one UID and one GID mapping expected"));
    };
    if u != g {
        return Err(bad("GID and UID mapping should be identical"));
    }
    if u.container_id != 0 {
        return Err(bad("UID 0 must be mapped"));
    }
    if u.length != IDS_PER_POD || u.host_id % IDS_PER_POD != 0 {
        return Err(bad("wrong user namespace length or offset"));
    }
    Ok(Some(IdMapping {
        host_id: u.host_id,
        container_id: 0,
        length: u.length,
    }))
}

/// One allocation at a time in this process: two pods never pick the same free slot.
static ALLOCATING: Mutex<()> = Mutex::new(());

/// The pod's mapping: the recorded one, else the first slot of `range` no pod directory under
/// `pods_dir` records, written to the pod's directory (atomically) before it is returned.
pub fn get_or_allocate(
    pods_dir: &Path,
    uid: &str,
    range: (u32, u64),
) -> Result<IdMapping, UsernsError> {
    let _held = ALLOCATING.lock().unwrap_or_else(|p| p.into_inner());
    let pod_dir = pods_dir.join(uid);
    if let Some(m) = read(&pod_dir)? {
        return Ok(m);
    }
    let mut used = std::collections::BTreeSet::new();
    if let Ok(entries) = std::fs::read_dir(pods_dir) {
        for e in entries.flatten() {
            // An unreadable file elsewhere still marks nothing used: its pod's own start
            // fails on it; a readable one reserves its slot.
            if let Ok(Some(m)) = read(&e.path()) {
                used.insert(m.host_id);
            }
        }
    }
    let (first, len) = range;
    let slots = len / IDS_PER_POD as u64;
    let host_id = (0..slots)
        .map(|i| first as u64 + i * IDS_PER_POD as u64)
        .filter(|id| *id <= u32::MAX as u64)
        .map(|id| id as u32)
        .find(|id| !used.contains(id))
        .ok_or(UsernsError::Exhausted { slots })?;
    let m = FileMapping {
        host_id,
        container_id: 0,
        length: IDS_PER_POD,
    };
    let file = MappingsFile {
        uid_mappings: vec![m],
        gid_mappings: vec![m],
    };
    let path = mappings_path(&pod_dir);
    let body = serde_json::to_vec(&file).unwrap_or_default();
    std::fs::create_dir_all(&pod_dir)
        .and_then(|()| crate::statefile::write_atomic(&path, &body))
        .map_err(|source| UsernsError::Write {
            path: path.display().to_string(),
            source,
        })?;
    Ok(IdMapping {
        host_id,
        container_id: 0,
        length: IDS_PER_POD,
    })
}

/// Whether the pod asks for its own user namespace (`spec.hostUsers: false`).
pub fn wants_user_namespace(pod: &crate::api::Pod) -> bool {
    pod.spec
        .extra
        .get("hostUsers")
        .and_then(serde_json::Value::as_bool)
        == Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nanolet-userns-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn pods_get_distinct_65536_id_slots_from_65536_up_and_keep_them() {
        // kubelet userns manager: default range starts at 1<<16, one 65536-ID slot per pod,
        // the pod's slot recorded in <pod dir>/userns and read back after a restart.
        let dir = tmp("alloc");
        let r = (DEFAULT_FIRST, DEFAULT_LEN);
        let a = get_or_allocate(&dir, "a", r).unwrap();
        let b = get_or_allocate(&dir, "b", r).unwrap();
        assert_eq!((a.host_id, a.container_id, a.length), (65536, 0, 65536));
        assert_eq!(b.host_id, 131072);
        assert_eq!(
            get_or_allocate(&dir, "a", r).unwrap(),
            a,
            "same pod, same slot"
        );
        let text = std::fs::read_to_string(dir.join("a/userns")).unwrap();
        assert_eq!(
            text,
            r#"{"uidMappings":[{"hostId":65536,"containerId":0,"length":65536}],"gidMappings":[{"hostId":65536,"containerId":0,"length":65536}]}"#
        );
        // A pod's directory removed frees its slot.
        std::fs::remove_dir_all(dir.join("a")).unwrap();
        assert_eq!(get_or_allocate(&dir, "c", r).unwrap().host_id, 65536);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_full_range_is_an_error_not_a_shared_slot() {
        let dir = tmp("full");
        let r = (65536, 2 * 65536);
        get_or_allocate(&dir, "a", r).unwrap();
        get_or_allocate(&dir, "b", r).unwrap();
        assert!(matches!(
            get_or_allocate(&dir, "c", r),
            Err(UsernsError::Exhausted { slots: 2 })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn mappings_files_the_kubelet_would_refuse_are_refused() {
        // parseUserNsFileAndRecord: one mapping, UID == GID, container ID 0.
        let dir = tmp("bad");
        for body in [
            r#"{"uidMappings":[],"gidMappings":[]}"#,
            r#"{"uidMappings":[{"hostId":65536,"containerId":0,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":0,"length":65536}]}"#,
            r#"{"uidMappings":[{"hostId":65536,"containerId":1,"length":65536}],"gidMappings":[{"hostId":65536,"containerId":1,"length":65536}]}"#,
            "not json",
        ] {
            std::fs::write(dir.join("userns"), body).unwrap();
            assert!(read(&dir).is_err(), "{body}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_kubelet_users_subordinate_range_is_used_when_aligned() {
        assert_eq!(
            subid_range("root:100000:65536\nkubelet:65536:7208960\n", "kubelet"),
            Some((65536, 7208960))
        );
        // Not a multiple of 65536: the kubelet refuses it; nanolet falls back to the default.
        assert_eq!(subid_range("kubelet:100000:65536\n", "kubelet"), None);
        assert_eq!(subid_range("other:65536:65536\n", "kubelet"), None);
    }
}
