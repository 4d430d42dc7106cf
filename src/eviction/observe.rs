//! Measuring: the node's eviction signals and each pod's usage.
//!
//! - memory.available = MemTotal - working set, working set = usage - inactive_file. Usage and
//!   inactive_file come from the root memory cgroup on cgroup v1 (`memory.usage_in_bytes`,
//!   `total_inactive_file`), from /proc/meminfo on cgroup v2 (MemTotal - MemFree,
//!   `Inactive(file)`), as cAdvisor does for the root container.
//! - nodefs: statvfs of the root dir, or of the pod logs dir when that is another filesystem
//!   with less room; imagefs: statvfs of the mountpoint CRI ImageFsInfo names (nodefs when the
//!   runtime does not answer).
//! - pid.available = min(pid_max, threads-max) - current tasks (/proc/loadavg).
//! - Pods: memory working set and writable layers from CRI ListContainerStats; logs and
//!   disk-backed emptyDirs by walking their directories (st_blocks, one filesystem only, so a
//!   memory-medium emptyDir's tmpfs is never counted as disk); PIDs from the pod's pids cgroup.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::threshold::{Observation, Observations, Signal};
use crate::cri::{ContainerStats, LABEL_POD_UID, Runtime};

/// Filesystem figures from statvfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FsFigures {
    pub dev: u64,
    pub available: i64,
    pub capacity: i64,
    pub inodes_free: i64,
    pub inodes: i64,
}

// statvfs field types differ between targets (u32 on 32-bit ARM), hence the conversions.
#[allow(clippy::useless_conversion)]
pub fn fs_figures(path: &Path) -> Option<FsFigures> {
    let s = nix::sys::statvfs::statvfs(path).ok()?;
    let frag = u64::from(s.fragment_size());
    let dev = std::fs::metadata(path).map(|m| m.dev()).unwrap_or(0);
    let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    Some(FsFigures {
        dev,
        available: clamp(u64::from(s.blocks_available()).saturating_mul(frag)),
        capacity: clamp(u64::from(s.blocks()).saturating_mul(frag)),
        inodes_free: clamp(u64::from(s.files_free())),
        inodes: clamp(u64::from(s.files())),
    })
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The value of `key` in a cgroup `memory.stat` text.
pub fn stat_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// /proc/meminfo value in bytes.
pub fn meminfo_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        if k != key {
            return None;
        }
        let kib: u64 = v.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib.saturating_mul(1024))
    })
}

/// Where the memory figures come from.
#[derive(Debug, Clone)]
pub struct MemorySource {
    /// The v1 root memory cgroup, when the memory controller is mounted as v1.
    pub cgroup_v1: Option<PathBuf>,
}

impl MemorySource {
    pub fn detect() -> MemorySource {
        let v1 = PathBuf::from("/sys/fs/cgroup/memory");
        MemorySource {
            cgroup_v1: v1.join("memory.usage_in_bytes").exists().then_some(v1),
        }
    }

    /// (capacity, working set) in bytes.
    pub fn read(&self) -> Option<(i64, i64)> {
        let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
        let total = meminfo_value(&meminfo, "MemTotal")?;
        let ws = match &self.cgroup_v1 {
            Some(root) => {
                let usage = read_u64(&root.join("memory.usage_in_bytes"))?;
                let stat = std::fs::read_to_string(root.join("memory.stat")).ok()?;
                let inactive = stat_value(&stat, "total_inactive_file").unwrap_or(0);
                usage.saturating_sub(inactive)
            }
            None => {
                let free = meminfo_value(&meminfo, "MemFree")?;
                let inactive = meminfo_value(&meminfo, "Inactive(file)").unwrap_or(0);
                total.saturating_sub(free).saturating_sub(inactive)
            }
        };
        let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        Some((clamp(total), clamp(ws)))
    }
}

/// The node's task limit, the kubelet's `pidlimit.Stats` MaxPID (its "pid" capacity): the
/// smaller of `kernel.pid_max` and `kernel.threads-max`, of those readable; `None` when neither
/// is.
pub fn max_pids() -> Option<i64> {
    ["/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"]
        .iter()
        .filter_map(|f| read_u64(Path::new(f)))
        .min()
        .map(|v| i64::try_from(v).unwrap_or(i64::MAX))
}

/// pid.available's figures: (max, current).
pub fn pid_figures() -> Option<(i64, i64)> {
    let pid_max = read_u64(Path::new("/proc/sys/kernel/pid_max"))?;
    let max =
        read_u64(Path::new("/proc/sys/kernel/threads-max")).map_or(pid_max, |t| t.min(pid_max));
    let loadavg = std::fs::read_to_string("/proc/loadavg").ok()?;
    let cur: u64 = loadavg
        .split_whitespace()
        .nth(3)?
        .split_once('/')?
        .1
        .parse()
        .ok()?;
    Some((max as i64, cur as i64))
}

/// Everything one pass needs from the node.
pub struct NodeProbe<'a> {
    pub memory: &'a MemorySource,
    pub root_dir: &'a Path,
    pub pod_logs_dir: &'a Path,
    /// The image filesystem's mountpoint ([`image_fs_mountpoint`]); `None`: imagefs is nodefs.
    pub imagefs: Option<&'a Path>,
}

/// The mountpoint of the runtime's image filesystem (CRI ImageFsInfo), `None` when the runtime
/// does not answer or names none.
pub fn image_fs_mountpoint(rt: &dyn Runtime) -> Option<PathBuf> {
    rt.image_fs_info()
        .ok()?
        .into_iter()
        .find(|f| !f.mountpoint.is_empty())
        .map(|f| PathBuf::from(f.mountpoint))
}

/// The node's signals. A signal that cannot be measured is left out (and so never crosses a
/// threshold).
pub fn observe_node(p: &NodeProbe<'_>) -> Observations {
    let mut obs = Observations::new();
    if let Some((capacity, ws)) = p.memory.read() {
        obs.insert(
            Signal::MemoryAvailable,
            Observation {
                available: capacity - ws,
                capacity,
            },
        );
    }
    let root = fs_figures(p.root_dir);
    let logs = fs_figures(p.pod_logs_dir);
    let nodefs = match (root, logs) {
        (Some(r), Some(l)) if r.dev != l.dev => {
            // The tighter of the two filesystems decides.
            if (l.available as f64 / l.capacity.max(1) as f64)
                < (r.available as f64 / r.capacity.max(1) as f64)
            {
                Some(l)
            } else {
                Some(r)
            }
        }
        (Some(r), _) => Some(r),
        (None, l) => l,
    };
    let imagefs = p.imagefs.and_then(fs_figures).or(nodefs);
    for (fs, avail, inodes) in [
        (nodefs, Signal::NodeFsAvailable, Signal::NodeFsInodesFree),
        (imagefs, Signal::ImageFsAvailable, Signal::ImageFsInodesFree),
    ] {
        if let Some(f) = fs {
            obs.insert(
                avail,
                Observation {
                    available: f.available,
                    capacity: f.capacity,
                },
            );
            if f.inodes > 0 {
                obs.insert(
                    inodes,
                    Observation {
                        available: f.inodes_free,
                        capacity: f.inodes,
                    },
                );
            }
        }
    }
    if let Some((max, cur)) = pid_figures() {
        obs.insert(
            Signal::PidAvailable,
            Observation {
                available: max - cur,
                capacity: max,
            },
        );
    }
    obs
}

/// Whether the runtime's image filesystem is the root dir's filesystem.
pub fn images_share_nodefs(rt: &dyn Runtime, root_dir: &Path) -> bool {
    let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev()).ok();
    let images = rt
        .image_fs_info()
        .ok()
        .and_then(|v| v.into_iter().find(|f| !f.mountpoint.is_empty()))
        .and_then(|f| dev(Path::new(&f.mountpoint)));
    images.is_none() || images == dev(root_dir)
}

/// Disk usage of a directory tree: (bytes by allocated blocks, inodes). Stays on the tree's
/// filesystem (a tmpfs mounted inside is not counted), does not follow symlinks, and stops
/// descending past a depth of 64.
pub fn dir_usage(path: &Path) -> (i64, i64) {
    fn walk(p: &Path, dev: u64, depth: u32, acc: &mut (i64, i64)) {
        let Ok(rd) = std::fs::read_dir(p) else {
            return;
        };
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.dev() != dev {
                continue;
            }
            acc.0 = acc
                .0
                .saturating_add((m.blocks() as i64).saturating_mul(512));
            acc.1 += 1;
            if m.is_dir() && depth < 64 {
                walk(&e.path(), dev, depth + 1, acc);
            }
        }
    }
    let Ok(m) = std::fs::symlink_metadata(path) else {
        return (0, 0);
    };
    if !m.is_dir() {
        return ((m.blocks() as i64).saturating_mul(512), 1);
    }
    let mut acc = ((m.blocks() as i64).saturating_mul(512), 1);
    walk(path, m.dev(), 0, &mut acc);
    acc
}

/// A pod's measured usage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodUsage {
    pub memory: i64,
    /// Writable layers + logs + disk emptyDirs.
    pub disk: i64,
    pub inodes: i64,
    /// The containers' writable layers alone (bytes, inodes): what an image filesystem of its
    /// own holds of the pod (the kubelet's `fsStatsRoot`).
    pub rootfs: i64,
    pub rootfs_inodes: i64,
    pub pids: i64,
    /// Per container: writable layer + its logs (bytes).
    pub containers: BTreeMap<String, i64>,
    /// Per container: memory working set (for eviction messages).
    pub container_memory: BTreeMap<String, i64>,
    /// Per disk-backed emptyDir volume: bytes.
    pub empty_dirs: BTreeMap<String, i64>,
}

/// CRI stats grouped by pod UID, keeping only the newest attempt of each container.
pub fn stats_by_pod(stats: Vec<ContainerStats>) -> BTreeMap<String, Vec<ContainerStats>> {
    let mut newest: BTreeMap<(String, String), ContainerStats> = BTreeMap::new();
    for s in stats {
        let Some(uid) = s.labels.get(LABEL_POD_UID).cloned() else {
            continue;
        };
        let key = (uid, s.name.clone());
        match newest.get(&key) {
            Some(old) if old.attempt > s.attempt => {}
            _ => {
                newest.insert(key, s);
            }
        }
    }
    let mut out: BTreeMap<String, Vec<ContainerStats>> = BTreeMap::new();
    for ((uid, _), s) in newest {
        out.entry(uid).or_default().push(s);
    }
    out
}

/// Where a pod's files are.
pub struct PodPaths<'a> {
    pub uid: &'a str,
    /// `<pod-logs-dir>/<ns>_<name>_<uid>`
    pub log_dir: PathBuf,
    /// `<root-dir>/pods/<uid>`
    pub pod_dir: PathBuf,
    /// The pod (its cgroup: `crate::cm::pod_pids`).
    pub pod: &'a crate::api::Pod,
}

pub fn pod_usage(paths: &PodPaths<'_>, stats: &[ContainerStats]) -> PodUsage {
    let mut u = PodUsage::default();
    for s in stats {
        let ws = s.working_set_bytes.unwrap_or(0) as i64;
        u.memory += ws;
        u.container_memory.insert(s.name.clone(), ws);
        let layer = s.fs_used_bytes.unwrap_or(0) as i64;
        let (logs, log_inodes) = dir_usage(&paths.log_dir.join(&s.name));
        u.containers.insert(s.name.clone(), layer + logs);
        u.disk += layer + logs;
        let layer_inodes = s.fs_inodes_used.unwrap_or(0) as i64;
        u.inodes += layer_inodes + log_inodes;
        u.rootfs += layer;
        u.rootfs_inodes += layer_inodes;
    }
    let ed_root = paths
        .pod_dir
        .join("volumes")
        .join("kubernetes.io~empty-dir");
    if let Ok(rd) = std::fs::read_dir(&ed_root) {
        let root_dev = std::fs::metadata(&ed_root).map(|m| m.dev()).ok();
        for e in rd.flatten() {
            let dev = e.metadata().map(|m| m.dev()).ok();
            if dev != root_dev {
                // A memory-medium emptyDir (tmpfs): memory, not disk.
                continue;
            }
            let (bytes, inodes) = dir_usage(&e.path());
            u.disk += bytes;
            u.inodes += inodes;
            u.empty_dirs
                .insert(e.file_name().to_string_lossy().into_owned(), bytes);
        }
    }
    u.pids = crate::cm::pod_pids(Path::new("/sys/fs/cgroup"), paths.pod).unwrap_or(0);
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_and_meminfo_values_parse() {
        let stat = "cache 10\ntotal_inactive_file 4096\ntotal_active_file 1\n";
        assert_eq!(stat_value(stat, "total_inactive_file"), Some(4096));
        assert_eq!(stat_value(stat, "inactive_file"), None);
        let mi = "MemTotal:       1000 kB\nInactive(file):   20 kB\n";
        assert_eq!(meminfo_value(mi, "MemTotal"), Some(1_024_000));
        assert_eq!(meminfo_value(mi, "Inactive(file)"), Some(20_480));
    }

    #[test]
    fn this_node_has_memory_fs_and_pid_signals() {
        let dir = tempfile::tempdir().unwrap();
        let mem = MemorySource::detect();
        let obs = observe_node(&NodeProbe {
            memory: &mem,
            root_dir: dir.path(),
            pod_logs_dir: dir.path(),
            imagefs: None,
        });
        for s in [
            Signal::MemoryAvailable,
            Signal::NodeFsAvailable,
            Signal::ImageFsAvailable,
            Signal::PidAvailable,
        ] {
            let o = obs.get(&s).unwrap_or_else(|| panic!("{s} missing"));
            assert!(o.capacity > 0 && o.available <= o.capacity, "{s}: {o:?}");
        }
    }

    #[test]
    fn dir_usage_counts_blocks_and_inodes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/f"), vec![1u8; 100_000]).unwrap();
        std::os::unix::fs::symlink("/etc", dir.path().join("link")).unwrap();
        let (bytes, inodes) = dir_usage(dir.path());
        assert!(bytes >= 100_000, "{bytes}");
        // dir, sub, f, link; /etc behind the symlink is not walked.
        assert_eq!(inodes, 4);
        assert_eq!(dir_usage(&dir.path().join("missing")), (0, 0));
    }

    #[test]
    fn newest_attempt_of_each_container_counts() {
        let s = |name: &str, attempt, uid: &str, ws| ContainerStats {
            name: name.into(),
            attempt,
            labels: [(LABEL_POD_UID.to_string(), uid.to_string())].into(),
            working_set_bytes: Some(ws),
            ..Default::default()
        };
        let by = stats_by_pod(vec![
            s("a", 0, "u1", 5),
            s("a", 1, "u1", 7),
            s("b", 0, "u1", 1),
            s("a", 0, "u2", 3),
        ]);
        assert_eq!(by["u1"].len(), 2);
        let dir = tempfile::tempdir().unwrap();
        let mut pod = crate::api::Pod::default();
        pod.metadata.uid = "u1".into();
        let u = pod_usage(
            &PodPaths {
                uid: "u1",
                log_dir: dir.path().join("logs"),
                pod_dir: dir.path().join("pod"),
                pod: &pod,
            },
            &by["u1"],
        );
        assert_eq!(u.memory, 8);
        assert_eq!(u.container_memory["a"], 7);
    }
}
