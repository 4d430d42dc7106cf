//! Container log rotation, done by the kubelet (not containerd) and so by nanolet
//! (pkg/kubelet/logs/container_log_manager.go): every 10 s, a running container whose current
//! log file is larger than `containerLogMaxSize` has it renamed to `<n>.log.<timestamp>` and
//! the runtime reopens the log (CRI ReopenContainerLog); at most `containerLogMaxFiles` files
//! (the current one included) are kept, oldest removed first. If the runtime cannot reopen the
//! log, the rename is undone so no output is lost. As in the kubelet, every rotated file but
//! the newest is gzip-compressed (`N.log.<timestamp>.gz`).

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant, SystemTime};

use nix::poll::{PollFd, PollFlags, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use tracing::{debug, info, warn};

use crate::cri::{ContainerState, LABEL_MANAGED_BY, Runtime};

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
#[cfg(test)]
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
    let rotated = PathBuf::from(format!("{}.{}", log.display(), stamp(SystemTime::now())));
    {
        let _dir = lock_dirs();
        let mut old = rotated_files(log);
        while old.len() + 1 > keep_rotated && !old.is_empty() {
            let f = old.remove(0);
            if let Err(e) = std::fs::remove_file(&f) {
                warn!(file = %f.display(), error = %e, "removing an old rotated log");
                break;
            }
        }
        if let Err(e) = std::fs::rename(log, &rotated) {
            warn!(file = %log.display(), error = %e, "rotating container log");
            return false;
        }
    }
    let t0 = Instant::now();
    match rt.reopen_container_log(container_id) {
        Ok(()) => {
            let reopen_ms = t0.elapsed().as_millis() as u64;
            info!(container_id, file = %log.display(), size = meta.len(), reopen_ms, "rotated container log");
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
        match gzip_file(f) {
            Ok(()) => {}
            // Removed by a rotation meanwhile (it was the oldest).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => warn!(file = %f.display(), error = %e, "compressing a rotated log"),
        }
    }
}

/// Held while a rotation lists, removes and renames files in a log directory, and while the
/// compressor swaps `f` for `f.gz`: the two run on different threads.
fn lock_dirs() -> std::sync::MutexGuard<'static, ()> {
    static DIRS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    DIRS.lock().unwrap_or_else(|e| e.into_inner())
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
        // f.gz appears only while f is still there (not removed by a rotation meanwhile), and
        // f goes in the same step: a rotation never counts, or misses, one rotation twice.
        let _dir = lock_dirs();
        std::fs::metadata(f)?;
        std::fs::rename(&tmp, &gz)?;
        std::fs::remove_file(f)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The least time between two looks at logs that grew. inotify reports every write; while
/// nanolet waits, the kernel folds a file's repeated IN_MODIFY events into one, so containers
/// writing without pause cost at most 50 wake-ups a second in all, and a log is renamed at most
/// this long (plus the CRI ReopenContainerLog round trip) after it passed containerLogMaxSize.
pub const MIN_GAP: Duration = Duration::from_millis(20);

/// A new container log file in the pod logs tree: the pass that tracks it runs this much later
/// (so the runtime's StartContainer, which creates the file, has returned).
pub const NEW_LOG_DELAY: Duration = Duration::from_millis(100);

/// Without inotify (no instance or no watch left: fs.inotify.max_user_instances or
/// max_user_watches reached), tracked logs are stat'ed this often instead.
pub const HOT_TICK: Duration = Duration::from_millis(250);

/// A log that could not be rotated (the container stopped; reopening failed and the rename
/// was undone) is looked at again after this long, not at every write.
const RETRY: Duration = Duration::from_secs(1);

/// What an inotify watch is on.
#[derive(Debug, Clone)]
enum Watch {
    /// A tracked container's current log file (IN_MODIFY).
    Log(String),
    /// The pod logs directory (depth 0), a pod's directory (1) or a container's (2): IN_CREATE.
    Dir(PathBuf, u8),
}

/// One tracked container log.
#[derive(Debug)]
struct Tracked {
    log: PathBuf,
    wd: Option<WatchDescriptor>,
    /// Not looked at until then (a log not there yet after a reopen, or not rotatable).
    rest_until: Option<Instant>,
}

/// The rotation state of one thread. Full passes (every containerLogMonitorInterval, as the
/// kubelet) find the running containers and their logs; in between, inotify reports each write
/// to a tracked log (IN_MODIFY) and each new log file in the pod logs tree (IN_CREATE), so
/// rotation reacts to growth instead of waiting for a tick (kubernetes/kubernetes#110630: the
/// kubelet's 10 s check lets a fast writer run far past containerLogMaxSize).
pub struct Rotator<'a> {
    rt: &'a dyn Runtime,
    policy: RotationPolicy,
    inotify: Option<Inotify>,
    tracked: HashMap<String, Tracked>,
    watches: HashMap<WatchDescriptor, Watch>,
    /// Where older rotations go to be gzip-compressed (off this thread: compressing a 10 MiB
    /// file takes longer than a rename, and growth must not wait for it). None: inline.
    compress: Option<Sender<PathBuf>>,
    /// Some log could not be watched: tracked logs without a watch are stat'ed every
    /// [`HOT_TICK`].
    polled: bool,
    /// A full pass asked for before the periodic one (a new log file appeared).
    pass_due: Option<Instant>,
    /// How many more passes a new log may ask for while its container is still Created.
    asks_left: u32,
}

impl<'a> Rotator<'a> {
    /// `pod_logs_dir`: watched for new container logs (None: found by full passes only).
    /// `inotify: false` gives the polling fallback (and tests of it).
    pub fn new(
        rt: &'a dyn Runtime,
        policy: RotationPolicy,
        pod_logs_dir: Option<&Path>,
        inotify: bool,
    ) -> Rotator<'a> {
        let inotify = if inotify {
            match Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC) {
                Ok(i) => Some(i),
                Err(e) => {
                    warn!(error = %e, "log rotation: no inotify instance; container logs are checked every 250 ms");
                    None
                }
            }
        } else {
            None
        };
        let mut r = Rotator {
            rt,
            policy,
            polled: inotify.is_none(),
            inotify,
            tracked: HashMap::new(),
            watches: HashMap::new(),
            compress: None,
            pass_due: None,
            asks_left: 0,
        };
        if let Some(dir) = pod_logs_dir {
            r.watch_dir(dir, 0);
        }
        r
    }

    /// Watch a directory of the pod logs tree for new entries, and (down to the container
    /// directories) the directories already in it.
    fn watch_dir(&mut self, dir: &Path, depth: u8) {
        let Some(ino) = &self.inotify else {
            return;
        };
        let flags =
            AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_ONLYDIR;
        match ino.add_watch(dir, flags) {
            Ok(wd) => {
                self.watches
                    .insert(wd, Watch::Dir(dir.to_path_buf(), depth));
            }
            Err(e) => {
                debug!(dir = %dir.display(), error = %e, "log rotation: not watching a log directory");
                return;
            }
        }
        if depth < 2 {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    self.watch_dir(&e.path(), depth + 1);
                }
            }
        }
    }

    /// One full pass over the containers nanolet manages: track new running ones (a
    /// container's log path never changes, so it is asked for once: at 100 pods that saves 100
    /// ContainerStatus calls per pass), forget stopped ones, rotate what is over the limit.
    /// Older rotations are compressed when a log rotates and once when its container is first
    /// tracked (rotations left from before a restart), not on every pass: a pass over logs that
    /// did not grow is one ListContainers and one stat per log (the kubelet's rotateLogs, too,
    /// compresses only when it rotates).
    pub fn full_pass(&mut self, now: Instant) {
        let asked = self.pass_due.take().is_some();
        let Ok(list) = self.rt.list_containers() else {
            return;
        };
        let managed = |c: &&crate::cri::ContainerInfo| c.labels.contains_key(LABEL_MANAGED_BY);
        let running: Vec<_> = list
            .iter()
            .filter(managed)
            .filter(|c| c.state == ContainerState::Running)
            .collect();
        // A pass asked for by a new log file may come before StartContainer returned: while a
        // container is still Created, ask again (at most 20 times in a row, 2 s).
        let starting = list
            .iter()
            .filter(managed)
            .any(|c| c.state == ContainerState::Created);
        if asked && starting && self.asks_left > 0 {
            self.asks_left -= 1;
            self.pass_due = Some(now + NEW_LOG_DELAY);
        }
        let gone: Vec<String> = self
            .tracked
            .keys()
            .filter(|id| !running.iter().any(|c| c.id == **id))
            .cloned()
            .collect();
        for id in gone {
            self.unwatch(&id);
            self.tracked.remove(&id);
        }
        for c in running {
            let new = !self.tracked.contains_key(&c.id);
            if new {
                match self.rt.container_status(&c.id) {
                    Ok(st) if !st.log_path.is_empty() => {
                        let t = Tracked {
                            log: PathBuf::from(&st.log_path),
                            wd: None,
                            rest_until: None,
                        };
                        self.tracked.insert(c.id.clone(), t);
                    }
                    Ok(_) => continue,
                    Err(e) => {
                        debug!(container_id = %c.id, error = %e, "container status for log rotation");
                        continue;
                    }
                }
            }
            if !self.check(&c.id, now) && new {
                if let Some(log) = self.tracked.get(&c.id).map(|t| t.log.clone()) {
                    self.compress_older(log);
                }
            }
        }
    }

    /// Look at one log: rotate it when it is over the limit, and keep it watched. Returns true
    /// when it rotated.
    fn check(&mut self, id: &str, now: Instant) -> bool {
        let Some(log) = self.tracked.get(id).map(|t| t.log.clone()) else {
            return false;
        };
        match std::fs::metadata(&log).map(|m| m.len()) {
            Ok(s) if s >= self.policy.max_size => {
                // The old watch follows the renamed file: drop it, watch the reopened one.
                self.unwatch(id);
                if rotate(self.rt, id, &log, self.policy, false) {
                    self.compress_older(log);
                    self.watch(id, now);
                    true
                } else {
                    self.rest(id, now + RETRY);
                    false
                }
            }
            Ok(_) => {
                self.watch(id, now);
                false
            }
            // Not there (between a rename and the reopen): soon again.
            Err(_) => {
                self.unwatch(id);
                self.rest(id, now + MIN_GAP);
                false
            }
        }
    }

    fn rest(&mut self, id: &str, until: Instant) {
        if let Some(t) = self.tracked.get_mut(id) {
            t.rest_until = Some(until);
        }
    }

    fn watch(&mut self, id: &str, now: Instant) {
        let Some(t) = self.tracked.get_mut(id) else {
            return;
        };
        t.rest_until = None;
        if t.wd.is_some() {
            return;
        }
        let Some(ino) = &self.inotify else {
            return;
        };
        match ino.add_watch(&t.log, AddWatchFlags::IN_MODIFY) {
            Ok(wd) => {
                t.wd = Some(wd);
                self.watches.insert(wd, Watch::Log(id.to_string()));
            }
            Err(nix::errno::Errno::ENOENT) => t.rest_until = Some(now + MIN_GAP),
            Err(e) => {
                if !self.polled {
                    warn!(container_id = id, error = %e, "log rotation: cannot watch a container log (fs.inotify.max_user_watches?); logs without a watch are checked every 250 ms");
                }
                self.polled = true;
            }
        }
    }

    fn unwatch(&mut self, id: &str) {
        if let Some(wd) = self.tracked.get_mut(id).and_then(|t| t.wd.take()) {
            self.watches.remove(&wd);
            if let Some(ino) = &self.inotify {
                // EINVAL: the file is gone and the kernel dropped the watch already.
                let _ = ino.rm_watch(wd);
            }
        }
    }

    fn compress_older(&self, log: PathBuf) {
        match &self.compress {
            Some(tx) => {
                let _ = tx.send(log);
            }
            None => compress_older(&log),
        }
    }

    /// Read the pending inotify events (non-blocking): returns the tracked containers whose
    /// logs changed; new directories are watched and a new log file asks for a full pass.
    fn changed(&mut self, now: Instant) -> Vec<String> {
        let mut events = vec![];
        if let Some(ino) = &self.inotify {
            while let Ok(batch) = ino.read_events() {
                events.extend(batch);
            }
        }
        let mut ids = vec![];
        for ev in events {
            if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                // Events were lost: look at every tracked log, and for new ones.
                ids.extend(self.tracked.keys().cloned());
                self.pass_due = Some(now);
                continue;
            }
            let Some(w) = self.watches.get(&ev.wd).cloned() else {
                continue;
            };
            if ev.mask.contains(AddWatchFlags::IN_IGNORED) {
                // The kernel dropped the watch (file or directory deleted).
                self.watches.remove(&ev.wd);
                if let Watch::Log(id) = w {
                    if let Some(t) = self.tracked.get_mut(&id) {
                        t.wd = None;
                        t.rest_until = Some(now + MIN_GAP);
                    }
                }
                continue;
            }
            match w {
                Watch::Log(id) => ids.push(id),
                Watch::Dir(dir, depth) => {
                    let Some(name) = ev.name else { continue };
                    let path = dir.join(&name);
                    if depth < 2 && ev.mask.contains(AddWatchFlags::IN_ISDIR) {
                        self.watch_dir(&path, depth + 1);
                    } else if depth == 2 && name.to_string_lossy().ends_with(".log") {
                        let at = now + NEW_LOG_DELAY;
                        self.pass_due = Some(self.pass_due.map_or(at, |d| d.min(at)));
                        self.asks_left = 20;
                    }
                }
            }
        }
        ids.sort();
        ids.dedup();
        ids
    }

    /// Logs whose rest has ended, and (when polling) tracked logs without a watch: look again.
    fn wake_rested(&mut self, now: Instant) {
        let polled = self.polled;
        let due: Vec<String> = self
            .tracked
            .iter()
            .filter(|(_, t)| match t.rest_until {
                Some(u) => u <= now,
                None => polled && t.wd.is_none(),
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            self.check(&id, now);
        }
    }

    /// When the loop must next look without an event: the next full pass (periodic or asked
    /// for), a rest ending, or the polling tick.
    fn next_deadline(&self, next_full: Instant, now: Instant) -> Instant {
        let mut at = self.pass_due.map_or(next_full, |d| d.min(next_full));
        for t in self.tracked.values() {
            if let Some(u) = t.rest_until {
                at = at.min(u);
            }
        }
        if self.polled {
            at = at.min(now + HOT_TICK);
        }
        at
    }
}

/// The most of one core compression may use: after each round it rests four times as long
/// as the round took. Under a log storm (a rotation every 50 ms at 20 MB/s) requests pile up
/// and are merged, and rotated files removed before their turn are never compressed: disk use
/// stays within containerLogMaxFiles x containerLogMaxSize either way, compression only
/// shrinks it further.
const COMPRESS_DUTY: u32 = 5;

/// Compress older rotations of the logs sent, merging requests that wait.
fn compressor(rx: std::sync::mpsc::Receiver<PathBuf>) {
    while let Ok(first) = rx.recv() {
        let mut logs = vec![first];
        logs.extend(rx.try_iter());
        logs.sort();
        logs.dedup();
        let t0 = Instant::now();
        for log in &logs {
            compress_older(log);
        }
        std::thread::sleep(t0.elapsed() * (COMPRESS_DUTY - 1));
    }
}

/// Block until `stop` or `inotify` is ready or `timeout` passed: (stop, inotify readable).
fn wait_for(stop: &OwnedFd, inotify: Option<&Inotify>, timeout: Duration) -> (bool, bool) {
    let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
    let mut fds = vec![PollFd::new(stop.as_fd(), PollFlags::POLLIN)];
    if let Some(ino) = inotify {
        fds.push(PollFd::new(ino.as_fd(), PollFlags::POLLIN));
    }
    match poll(&mut fds, ms) {
        Ok(_) => {
            let hit = |f: &PollFd| f.revents().is_some_and(|e| !e.is_empty());
            (hit(&fds[0]), fds.get(1).is_some_and(hit))
        }
        // EINTR: look again.
        Err(_) => (false, false),
    }
}

/// Run until `stop` becomes readable or hung up (its write end is written to or dropped): a
/// full pass at once and then every `policy.interval`, and in between a look at each log that
/// grew and a pass for each new log (inotify), at most every [`MIN_GAP`]. Older rotations are
/// compressed on a helper thread.
pub fn run(rt: Arc<dyn Runtime>, policy: RotationPolicy, pod_logs_dir: PathBuf, stop: OwnedFd) {
    if let Err(e) = std::fs::create_dir_all(&pod_logs_dir) {
        debug!(dir = %pod_logs_dir.display(), error = %e, "creating the pod logs directory");
    }
    let mut r = Rotator::new(rt.as_ref(), policy, Some(&pod_logs_dir), true);
    let (tx, rx) = std::sync::mpsc::channel::<PathBuf>();
    let compressor = std::thread::Builder::new()
        .name("logcompress".into())
        // gzip (miniz_oxide) keeps large compressor state on the stack, especially in debug
        // builds; only the pages actually touched become resident.
        .stack_size(4 * 1024 * 1024)
        .spawn(move || compressor(rx));
    if compressor.is_ok() {
        r.compress = Some(tx);
    }
    let mut next_full = Instant::now();
    loop {
        let now = Instant::now();
        let wait = r
            .next_deadline(next_full, now)
            .saturating_duration_since(now);
        let (stop_now, grew) = wait_for(&stop, r.inotify.as_ref(), wait);
        if stop_now {
            return;
        }
        let now = Instant::now();
        if grew {
            for id in r.changed(now) {
                r.check(&id, now);
            }
        }
        if now >= next_full || r.pass_due.is_some_and(|d| d <= now) {
            r.full_pass(now);
            next_full = Instant::now() + policy.interval;
        }
        r.wake_rested(Instant::now());
        if grew {
            // Let writes gather (the kernel folds them into one event per file).
            std::thread::sleep(MIN_GAP);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::fake::FakeRuntime;
    use crate::cri::{ContainerConfig, PodSandboxConfig};

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
        let mut r = Rotator::new(&rt, RotationPolicy::default(), None, false);
        for _ in 0..3 {
            r.full_pass(Instant::now());
        }
        assert_eq!(rt.count_calls("container_status"), 1);
        assert_eq!(r.tracked.len(), 1);
        rt.stop_container(&id, std::time::Duration::ZERO)
            .expect("stop");
        r.full_pass(Instant::now());
        assert!(r.tracked.is_empty(), "forgotten once the container stops");
    }

    /// containerLogMonitorInterval passes over logs under containerLogMaxSize only stat them:
    /// older rotations are compressed once when a container is first tracked and again when
    /// its log rotates (the kubelet's rotateLogs compresses only when it rotates), not on
    /// every 10 s pass.
    #[test]
    fn passes_over_logs_that_did_not_grow_compress_nothing() {
        let d = tempfile::tempdir().expect("tempdir");
        let rt = FakeRuntime::new();
        let (_id, log) = container_with_log(&rt, d.path());
        std::fs::write(&log, b"x").expect("write");
        let policy = RotationPolicy {
            max_size: 100,
            ..RotationPolicy::default()
        };
        let mut r = Rotator::new(&rt, policy, None, false);
        let (tx, rx) = std::sync::mpsc::channel();
        r.compress = Some(tx);
        r.full_pass(Instant::now());
        assert_eq!(
            rx.try_iter().count(),
            1,
            "first tracked: leftovers compressed"
        );
        for _ in 0..5 {
            r.full_pass(Instant::now());
        }
        assert_eq!(rx.try_iter().count(), 0, "no growth: nothing to compress");
        std::fs::write(&log, vec![b'y'; 150]).expect("write");
        r.full_pass(Instant::now());
        assert_eq!(rt.count_calls("reopen_container_log"), 1);
        assert_eq!(
            rx.try_iter().count(),
            1,
            "rotated: older rotations compressed"
        );
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
        rt.inject_error("reopen_container_log", crate::cri::ErrorKind::Unavailable);
        assert!(!rotate_if_needed(&rt, &id, &log, policy));
        assert_eq!(
            std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0),
            150,
            "log restored"
        );
    }

    /// A running managed container in the fake runtime whose log is `<dir>/pod/c/0.log`.
    fn container_with_log(rt: &FakeRuntime, dir: &Path) -> (String, PathBuf) {
        rt.add_image("img");
        let sbc = PodSandboxConfig {
            log_directory: dir.join("pod").display().to_string(),
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
        std::fs::create_dir_all(dir.join("pod/c")).expect("log dir");
        (id, dir.join("pod/c/0.log"))
    }

    fn append(log: &Path, n: usize) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("open log");
        f.write_all(&vec![b'x'; n]).expect("append");
    }

    /// Rotation reacts to growth (inotify IN_MODIFY), not to the 10 s containerLogMonitorInterval:
    /// a log is watched once a full pass tracked it, and the write that takes it over the
    /// limit wakes the rotator, which rotates it with no pass between.
    #[test]
    fn a_write_past_the_limit_wakes_the_rotator() {
        let d = tempfile::tempdir().expect("tempdir");
        let rt = FakeRuntime::new();
        let (id, log) = container_with_log(&rt, d.path());
        let policy = RotationPolicy {
            max_size: 100,
            max_files: 3,
            interval: MONITOR_INTERVAL,
        };
        let mut r = Rotator::new(&rt, policy, None, true);
        assert!(r.inotify.is_some(), "inotify available on the test machine");
        append(&log, 10);
        r.full_pass(Instant::now());
        assert!(r.tracked[&id].wd.is_some(), "the log is watched");
        let (stop_rx, stop_tx) = nix::unistd::pipe().expect("pipe");
        let (stop, grew) = wait_for(&stop_rx, r.inotify.as_ref(), Duration::ZERO);
        assert!(!stop && !grew, "nothing written yet");
        append(&log, 100);
        let (stop, grew) = wait_for(&stop_rx, r.inotify.as_ref(), Duration::from_secs(10));
        assert!(!stop && grew, "the write is reported");
        assert_eq!(r.changed(Instant::now()), vec![id.clone()]);
        assert!(r.check(&id, Instant::now()), "rotated at once");
        assert_eq!(rt.count_calls("reopen_container_log"), 1);
        assert_eq!(rotated_files(&log).len(), 1);
        // Dropping the stop pipe's write end ends the wait.
        drop(stop_tx);
        let (stop, _) = wait_for(&stop_rx, r.inotify.as_ref(), Duration::from_secs(10));
        assert!(stop);
    }

    /// A container log file created in the pod logs tree (<pod dir>/<container>/N.log) asks for
    /// a full pass NEW_LOG_DELAY later, so a new container that writes fast is tracked at once
    /// instead of at the next containerLogMonitorInterval.
    #[test]
    fn a_new_log_file_asks_for_a_pass() {
        let d = tempfile::tempdir().expect("tempdir");
        let rt = FakeRuntime::new();
        let mut r = Rotator::new(&rt, RotationPolicy::default(), Some(d.path()), true);
        std::fs::create_dir_all(d.path().join("ns_pod_uid/c")).expect("dirs");
        let now = Instant::now();
        // The pod directory is reported and watched, with the container directory in it.
        assert!(r.changed(now).is_empty());
        let c = d.path().join("ns_pod_uid/c");
        assert!(
            r.watches
                .values()
                .any(|w| matches!(w, Watch::Dir(p, 2) if *p == c)),
            "container directory watched: {:?}",
            r.watches
        );
        assert_eq!(r.pass_due, None, "no log file yet");
        std::fs::write(c.join("0.log"), b"").expect("log");
        r.changed(now);
        assert_eq!(r.pass_due, Some(now + NEW_LOG_DELAY));
        assert_eq!(
            r.next_deadline(now + MONITOR_INTERVAL, now),
            now + NEW_LOG_DELAY
        );
        r.full_pass(now);
        assert_eq!(r.pass_due, None);
    }

    /// Without inotify, tracked logs are stat'ed every HOT_TICK.
    #[test]
    fn without_inotify_warm_logs_are_polled() {
        let d = tempfile::tempdir().expect("tempdir");
        let rt = FakeRuntime::new();
        let (id, log) = container_with_log(&rt, d.path());
        let policy = RotationPolicy {
            max_size: 100,
            max_files: 3,
            interval: MONITOR_INTERVAL,
        };
        let mut r = Rotator::new(&rt, policy, None, false);
        append(&log, 30);
        let t0 = Instant::now();
        r.full_pass(t0);
        assert!(r.polled);
        assert_eq!(r.next_deadline(t0 + MONITOR_INTERVAL, t0), t0 + HOT_TICK);
        append(&log, 80);
        r.wake_rested(t0 + HOT_TICK);
        assert_eq!(rt.count_calls("reopen_container_log"), 1);
        assert!(r.tracked.contains_key(&id));
    }
}
