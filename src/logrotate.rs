//! Container log rotation, done by the kubelet (not containerd) and so by nanolet
//! (pkg/kubelet/logs/container_log_manager.go): every 10 s, a running container whose current
//! log file is larger than `containerLogMaxSize` has it renamed to `<n>.log.<timestamp>` and
//! the runtime reopens the log (CRI ReopenContainerLog); at most `containerLogMaxFiles` files
//! (the current one included) are kept, oldest removed first. If the runtime cannot reopen the
//! log, the rename is undone so no output is lost. As in the kubelet, every rotated file but
//! the newest is gzip-compressed (`N.log.<timestamp>.gz`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use tracing::{debug, info, warn};

use crate::runtime::{ContainerState, LABEL_MANAGED_BY, Runtime};

/// The kubelet's containerLogMonitorInterval default.
pub const MONITOR_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RotationPolicy {
    pub max_size: u64,
    pub max_files: usize,
    /// containerLogMonitorInterval: how often logs are checked.
    pub interval: Duration,
}

impl Default for RotationPolicy {
    /// containerLogMaxSize 10Mi, containerLogMaxFiles 5, containerLogMonitorInterval 10s.
    fn default() -> Self {
        RotationPolicy {
            max_size: 10 << 20,
            max_files: 5,
            interval: MONITOR_INTERVAL,
        }
    }
}

/// Rotated siblings of `log` (`<log>.<suffix>`), oldest first.
pub fn rotated_files(log: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (log.parent(), log.file_name()) else {
        return vec![];
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

/// `20261122-184647.123456789`: sorts by time, unique per rotation.
fn stamp(t: SystemTime) -> String {
    let ts = crate::timeutil::rfc3339_nanos(t);
    ts.chars()
        .filter(|c| c.is_ascii_digit() || *c == '.')
        .collect::<String>()
}

/// Rotate one container's log if it is over the limit. Returns true when it rotated.
pub fn rotate_if_needed(
    rt: &dyn Runtime,
    container_id: &str,
    log: &Path,
    policy: RotationPolicy,
) -> bool {
    rotate(rt, container_id, log, policy, true)
}

/// As [`rotate_if_needed`]; `compress: false` leaves older rotations uncompressed (the hot
/// path: compressing takes longer than renaming, the next full pass compresses).
fn rotate(
    rt: &dyn Runtime,
    container_id: &str,
    log: &Path,
    policy: RotationPolicy,
    compress: bool,
) -> bool {
    let Ok(meta) = std::fs::metadata(log) else {
        return false;
    };
    if meta.len() < policy.max_size {
        return false;
    }
    // Keep max_files - 1 rotated files after this rotation (the current file is the last one).
    let keep_rotated = policy.max_files.saturating_sub(1);
    let mut old = rotated_files(log);
    while old.len() + 1 > keep_rotated && !old.is_empty() {
        let f = old.remove(0);
        if let Err(e) = std::fs::remove_file(&f) {
            warn!(file = %f.display(), error = %e, "removing an old rotated log");
            break;
        }
    }
    let rotated = PathBuf::from(format!("{}.{}", log.display(), stamp(SystemTime::now())));
    if let Err(e) = std::fs::rename(log, &rotated) {
        warn!(file = %log.display(), error = %e, "rotating container log");
        return false;
    }
    match rt.reopen_container_log(container_id) {
        Ok(()) => {
            info!(container_id, file = %log.display(), size = meta.len(), "rotated container log");
            if compress {
                compress_older(log);
            }
            true
        }
        Err(e) => {
            // Put it back: the runtime still writes to the renamed file.
            let _ = std::fs::rename(&rotated, log);
            warn!(container_id, error = %e, "reopening the container log failed; rotation undone");
            false
        }
    }
}

/// gzip every rotated file except the newest (which a log reader may still be following).
fn compress_older(log: &Path) {
    let rotated = rotated_files(log);
    let Some((_newest, older)) = rotated.split_last() else {
        return;
    };
    for f in older
        .iter()
        .filter(|f| f.extension().is_none_or(|e| e != "gz"))
    {
        if let Err(e) = gzip_file(f) {
            warn!(file = %f.display(), error = %e, "compressing a rotated log");
        }
    }
}

/// `f` -> `f.gz` (written to a temp name, then renamed), then `f` is removed.
fn gzip_file(f: &Path) -> std::io::Result<()> {
    let gz = PathBuf::from(format!("{}.gz", f.display()));
    // A dotfile while it is written, so log shippers globbing `*.log*` never see it.
    let tmp = f.with_file_name(format!(
        ".{}.gz.tmp",
        f.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    ));
    let result = (|| {
        let mut input = std::fs::File::open(f)?;
        let out = std::fs::File::create(&tmp)?;
        let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        std::io::copy(&mut input, &mut enc)?;
        enc.finish()?.sync_all()?;
        std::fs::rename(&tmp, &gz)?;
        std::fs::remove_file(f)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// How often "hot" logs (those that reached a quarter of containerLogMaxSize by the last full
/// pass) are checked between full passes. The kubelet only checks every
/// containerLogMonitorInterval, so a container writing fast runs far past the limit
/// (kubernetes/kubernetes#110630); this bounds a file at about max size + 250 ms of output.
pub const HOT_TICK: Duration = Duration::from_millis(250);

/// A container log worth watching closely: (container id, log path).
pub type HotLog = (String, PathBuf);

/// One pass over the running containers nanolet manages. Returns the logs that are hot: at
/// least a quarter of the limit, or just rotated.
/// `paths` caches each container's log path (it never changes for a container ID): at 100
/// pods that saves 100 ContainerStatus calls per pass.
pub fn rotate_all(
    rt: &dyn Runtime,
    policy: RotationPolicy,
    paths: &mut std::collections::HashMap<String, PathBuf>,
) -> Vec<HotLog> {
    let Ok(list) = rt.list_containers() else {
        return vec![];
    };
    let mut hot = vec![];
    let running: Vec<_> = list
        .iter()
        .filter(|c| c.state == ContainerState::Running && c.labels.contains_key(LABEL_MANAGED_BY))
        .collect();
    paths.retain(|id, _| running.iter().any(|c| c.id == *id));
    for c in running {
        let known = paths.get(&c.id).cloned();
        let status = match known {
            Some(p) => Ok(Some(p)),
            None => rt
                .container_status(&c.id)
                .map(|st| (!st.log_path.is_empty()).then(|| PathBuf::from(&st.log_path))),
        };
        match status {
            Ok(Some(log)) => {
                paths.insert(c.id.clone(), log.clone());
                let rotated = rotate_if_needed(rt, &c.id, &log, policy);
                if !rotated {
                    // Rotations made on the hot path are compressed here.
                    compress_older(&log);
                }
                let size = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
                if rotated || size >= policy.max_size / 4 {
                    hot.push((c.id.clone(), log));
                }
            }
            Ok(None) => {}
            Err(e) => debug!(container_id = %c.id, error = %e, "container status for log rotation"),
        }
    }
    hot
}

/// Run until `stop` fires or is dropped: a full pass every `policy.interval`, and the hot logs
/// every [`HOT_TICK`] in between.
pub fn run(rt: Arc<dyn Runtime>, policy: RotationPolicy, stop: Receiver<()>) {
    let mut hot: Vec<HotLog> = vec![];
    let mut paths = std::collections::HashMap::new();
    let mut next_full = Instant::now() + policy.interval;
    loop {
        let now = Instant::now();
        let mut wait = next_full.saturating_duration_since(now);
        if !hot.is_empty() {
            wait = wait.min(HOT_TICK);
        }
        match stop.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        if Instant::now() >= next_full {
            hot = rotate_all(rt.as_ref(), policy, &mut paths);
            next_full = Instant::now() + policy.interval;
        } else {
            // A log over the limit that cannot be rotated (the container stopped, reopening
            // failed and the rotation was undone) leaves the hot list until the next full pass.
            hot.retain(|(id, log)| {
                let over = std::fs::metadata(log).is_ok_and(|m| m.len() >= policy.max_size);
                !over || rotate(rt.as_ref(), id, log, policy, false)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::fake::FakeRuntime;
    use crate::runtime::{ContainerConfig, PodSandboxConfig};

    /// A container's log path never changes: full passes ask the runtime once per container.
    #[test]
    fn full_passes_ask_for_each_log_path_once() {
        let d = tempfile::tempdir().expect("tempdir");
        let rt = FakeRuntime::new();
        rt.add_image("img");
        let sbc = PodSandboxConfig {
            log_directory: d.path().display().to_string(),
            ..Default::default()
        };
        let sb = rt.run_pod_sandbox(&sbc).expect("sandbox");
        let id = rt
            .create_container(
                &sb,
                &ContainerConfig {
                    name: "c".into(),
                    image: "img".into(),
                    log_path: "c/0.log".into(),
                    labels: [(LABEL_MANAGED_BY.to_string(), "true".to_string())].into(),
                    ..Default::default()
                },
                &sbc,
            )
            .expect("container");
        rt.start_container(&id).expect("start");
        let mut paths = std::collections::HashMap::new();
        for _ in 0..3 {
            rotate_all(&rt, RotationPolicy::default(), &mut paths);
        }
        assert_eq!(rt.count_calls("container_status"), 1);
        assert_eq!(paths.len(), 1);
        rt.stop_container(&id, std::time::Duration::ZERO)
            .expect("stop");
        rotate_all(&rt, RotationPolicy::default(), &mut paths);
        assert!(paths.is_empty(), "forgotten once the container stops");
    }

    #[test]
    fn rotates_over_the_limit_and_keeps_max_files() {
        // containerLogMaxSize / containerLogMaxFiles: at most max_files files in all.
        let d = tempfile::tempdir().expect("tempdir");
        let rt = FakeRuntime::new();
        rt.add_image("img");
        let sb = rt
            .run_pod_sandbox(&PodSandboxConfig::default())
            .expect("sandbox");
        let id = rt
            .create_container(
                &sb,
                &ContainerConfig {
                    name: "c".into(),
                    image: "img".into(),
                    ..Default::default()
                },
                &PodSandboxConfig::default(),
            )
            .expect("container");
        let log = d.path().join("0.log");
        let policy = RotationPolicy {
            max_size: 100,
            max_files: 3,
            ..RotationPolicy::default()
        };
        std::fs::write(&log, vec![b'x'; 50]).expect("write");
        assert!(!rotate_if_needed(&rt, &id, &log, policy), "under the limit");
        for round in 0..4 {
            std::fs::write(&log, vec![b'y'; 150]).expect("write");
            assert!(rotate_if_needed(&rt, &id, &log, policy), "round {round}");
            assert!(!log.exists(), "the runtime reopens a fresh file");
            let rotated = rotated_files(&log);
            assert!(
                rotated.len() <= 2,
                "max_files 3 = current + 2 rotated: {rotated:?}"
            );
        }
        assert_eq!(rt.count_calls("reopen_container_log"), 4);
        // All rotated files but the newest are gzip-compressed, and decompress to what was written.
        let rotated = rotated_files(&log);
        assert_eq!(rotated.len(), 2);
        assert!(rotated[0].to_string_lossy().ends_with(".gz"), "{rotated:?}");
        assert!(
            !rotated[1].to_string_lossy().ends_with(".gz"),
            "the newest stays plain: {rotated:?}"
        );
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut flate2::read::GzDecoder::new(std::fs::File::open(&rotated[0]).expect("open gz")),
            &mut text,
        )
        .expect("gunzip");
        assert_eq!(text, "y".repeat(150));
        // Reopen failure: the rename is undone.
        std::fs::write(&log, vec![b'z'; 150]).expect("write");
        rt.inject_error(
            "reopen_container_log",
            crate::runtime::ErrorKind::Unavailable,
        );
        assert!(!rotate_if_needed(&rt, &id, &log, policy));
        assert_eq!(
            std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0),
            150,
            "log restored"
        );
    }
}
