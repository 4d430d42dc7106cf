//! The file source: every `*.yaml`, `*.yml`, `*.json` file (no dotfiles, no recursion) in the
//! static-pod directory is one Pod. Reacts to inotify events (debounced) and re-lists every
//! `check_frequency` as the safety net. Sends a complete [`Snapshot`] whenever the content
//! changed (`kubernetes.io/config.seen` ignored); a missing directory is an empty snapshot.
//!
//! Unlike the kubelet, `x.yaml.bak`, `x~` and other extensions are ignored (see
//! kubernetes/kubernetes#136962).
//!
//! Hostile entries (issue 16): only regular files (or symbolic links to them, as the kubelet
//! follows them) of at most [`MAX_MANIFEST_BYTES`] are read, through [`read_limited`] (which
//! `nanolet validate` shares). A FIFO, device, socket or directory with a manifest name, a
//! dangling symbolic link, a symbolic link loop and a name that is not UTF-8 are manifest
//! errors naming the file (escaped: [`super::escape_path`]); hidden files stay ignored.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};

use super::{
    ManifestError, SeenCache, Snapshot, SourceKind, SourcePod, bounded, build_pods, dedupe_by_name,
    escape_path, escape_text, now_rfc3339_nano,
};
use crate::config::naming::{DecodedDoc, MAX_MANIFEST_BYTES, decode_manifest};

/// How long the directory must be quiet after an event before re-listing.
const DEBOUNCE: Duration = Duration::from_millis(100);
/// Upper bound on waiting for a burst of events to settle.
const MAX_DEBOUNCE: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum FileSourceError {
    #[error("reading static pod directory {dir}: {source}")]
    ReadDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("manifest file {}: {source}", escape_path(path))]
    ReadFile { path: PathBuf, source: ReadError },
    #[error("watching {path}: {source}")]
    Watch {
        path: PathBuf,
        source: notify::Error,
    },
    /// The directory (or one of its parents) is writable by others: see [`check_secure`].
    #[error(transparent)]
    Insecure(InsecurePath),
}

/// A path others than root or nanolet's user can change (see [`check_secure_for`]). `what`
/// names the path ("manifest directory", "parent directory", ...), `risk` says what someone
/// who can write there could do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InsecurePath {
    #[error(
        "{what} {} is world-writable (mode {mode:04o}): {risk}; remove the write permission \
         (chmod o-w) or, for development only, pass --allow-insecure-manifest-dir",
        path.display()
    )]
    WorldWritable {
        what: String,
        path: PathBuf,
        mode: u32,
        risk: String,
    },
    #[error(
        "{what} {} is owned by uid {uid}, not root or nanolet's uid {me}: {risk}; chown it or, \
         for development only, pass --allow-insecure-manifest-dir",
        path.display()
    )]
    ForeignOwner {
        what: String,
        path: PathBuf,
        uid: u32,
        me: u32,
        risk: String,
    },
}

/// Why a manifest file was not read (the caller's error names the file).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(
        "not a regular file but {0}; only regular files (or symbolic links to them) are read \
         as manifests"
    )]
    NotRegular(&'static str),
    #[error("a dangling symbolic link: its target {0} does not exist")]
    Dangling(String),
    #[error("larger than {MAX_MANIFEST_BYTES} bytes (the manifest size limit): {0} bytes")]
    TooLarge(u64),
    #[error(
        "larger than {MAX_MANIFEST_BYTES} bytes (the manifest size limit): it grew while being \
         read"
    )]
    Grew,
    #[error("cannot be read: {0}")]
    Io(#[from] std::io::Error),
}

impl ReadError {
    /// The file is not there (any more): a listing skips it.
    fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

/// What a file that is not a regular file is, for [`ReadError::NotRegular`].
fn file_kind(ft: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else {
        "a special file"
    }
}

fn check_regular(meta: &std::fs::Metadata) -> Result<(), ReadError> {
    if meta.is_file() {
        Ok(())
    } else {
        Err(ReadError::NotRegular(file_kind(&meta.file_type())))
    }
}

/// A `stat` of `path` (following symbolic links) that failed with `e`: a dangling symbolic
/// link says so (and where it points), anything else is `e`.
fn stat_error(path: &Path, e: std::io::Error) -> ReadError {
    if e.kind() == std::io::ErrorKind::NotFound {
        if let Ok(target) = std::fs::read_link(path) {
            return ReadError::Dangling(escape_path(&target));
        }
    }
    ReadError::Io(e)
}

/// Reads one manifest file as `nanolet run` does (the file source and `nanolet validate`):
/// - only a regular file, or a symbolic link to one: the type is checked with `stat` before
///   opening (a FIFO would block the open until a writer comes, a device may act on open or
///   never end: a symbolic link to /dev/zero), the file is opened with `O_NONBLOCK` (a path
///   swapped for a FIFO in between does not block) and checked again with `fstat` on the
///   opened descriptor;
/// - at most [`MAX_MANIFEST_BYTES`] (the kubelet's maxConfigLength): a larger size from
///   `fstat` is refused before reading anything (a sparse 1 GiB file costs nothing), and the
///   read itself is bounded too (a file that grows while being read).
pub fn read_limited(path: &Path) -> Result<Vec<u8>, FileSourceError> {
    read_manifest(path).map_err(|source| FileSourceError::ReadFile {
        path: path.to_path_buf(),
        source,
    })
}

/// [`read_limited`] without the path in the error.
pub fn read_manifest(path: &Path) -> Result<Vec<u8>, ReadError> {
    use std::os::unix::fs::OpenOptionsExt;
    let meta = std::fs::metadata(path).map_err(|e| stat_error(path, e))?;
    check_regular(&meta)?;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)?;
    let meta = f.metadata()?;
    check_regular(&meta)?;
    if meta.len() > MAX_MANIFEST_BYTES as u64 {
        return Err(ReadError::TooLarge(meta.len()));
    }
    // The size is at most MAX_MANIFEST_BYTES here.
    let mut buf = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    f.take(MAX_MANIFEST_BYTES as u64 + 1)
        .read_to_end(&mut buf)?;
    if buf.len() > MAX_MANIFEST_BYTES {
        return Err(ReadError::Grew);
    }
    Ok(buf)
}

/// Whether a manifest directory, its parents or a manifest file can be changed by someone other
/// than root or the user nanolet runs as. Anyone who can write a manifest can run a privileged
/// container, i.e. own the node, so nanolet refuses such paths unless
/// `--allow-insecure-manifest-dir` is set:
/// - the path is world-writable (a directory with the sticky bit, like /tmp, only as a parent:
///   others cannot rename or delete what is ours in it), or
/// - it is owned by a user other than root or nanolet's effective user.
///
/// `what` names the path in the message ("manifest directory", "manifest file").
pub fn check_secure(path: &Path, meta: &std::fs::Metadata, what: &str) -> Result<(), InsecurePath> {
    check_secure_for(path, meta, what, MANIFEST_RISK)
}

/// What a writable manifest directory or file lets others do (in the refusal message).
pub const MANIFEST_RISK: &str =
    "anyone who can write there can run privileged containers on this node";

/// [`check_secure`] for any input path nanolet trusts, with `risk` saying in the message what
/// someone who can write there could do (the local ConfigMap/Secret directories and the images
/// directory use it too; `--allow-insecure-manifest-dir` skips all of them).
pub fn check_secure_for(
    path: &Path,
    meta: &std::fs::Metadata,
    what: &str,
    risk: &str,
) -> Result<(), InsecurePath> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    let mode = meta.mode() & 0o7777;
    let sticky_parent = what == "parent directory" && mode & 0o1000 != 0;
    if mode & 0o002 != 0 && !sticky_parent {
        return Err(InsecurePath::WorldWritable {
            what: what.into(),
            path: path.into(),
            mode,
            risk: risk.into(),
        });
    }
    if meta.uid() != 0 && meta.uid() != me {
        return Err(InsecurePath::ForeignOwner {
            what: what.into(),
            path: path.into(),
            uid: meta.uid(),
            me,
            risk: risk.into(),
        });
    }
    Ok(())
}

/// [`check_secure`] for the manifest directory and every parent (a missing directory passes:
/// it is an empty source until it appears, and is checked on every listing).
pub fn check_dir_secure(dir: &Path) -> Result<(), FileSourceError> {
    check_dir_chain(dir, "manifest directory", MANIFEST_RISK)
}

/// [`check_secure_for`] for the directory `dir` (named `what`) and every parent; a missing
/// path passes (nothing can be read from it).
pub fn check_dir_chain(dir: &Path, what: &str, risk: &str) -> Result<(), FileSourceError> {
    let mut what = what;
    for p in dir.ancestors() {
        match std::fs::metadata(p) {
            Ok(meta) => {
                check_secure_for(p, &meta, what, risk).map_err(FileSourceError::Insecure)?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(FileSourceError::ReadDir {
                    dir: p.to_path_buf(),
                    source,
                });
            }
        }
        what = "parent directory";
    }
    Ok(())
}

/// The file source; start it with [`FileSource::spawn`].
#[derive(Debug)]
pub struct FileSource;

/// File source configuration.
#[derive(Debug, Clone)]
pub struct FileSourceConfig {
    /// The static pod directory (`staticPodPath`).
    pub dir: PathBuf,
    pub node_name: String,
    /// Full re-list period (`fileCheckFrequency`, default 20s).
    pub check_frequency: Duration,
    /// `--allow-insecure-manifest-dir`: skip [`check_secure`].
    pub allow_insecure: bool,
}

enum Msg {
    /// A relevant inotify event; `settled` when it marks a complete file (see [`is_settled`]).
    Changed {
        settled: bool,
    },
    Stop,
}

/// Running file source; dropping it (or [`FileSourceHandle::stop`]) ends its thread.
pub struct FileSourceHandle {
    ctl: Sender<Msg>,
    thread: Option<JoinHandle<()>>,
}

impl FileSourceHandle {
    /// Stop the source and wait for its thread.
    #[cfg(test)]
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let _ = self.ctl.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("file source thread panicked");
            }
        }
    }
}

impl Drop for FileSourceHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl FileSource {
    /// Start watching; the first snapshot is sent from the new thread right away.
    pub fn spawn(cfg: FileSourceConfig, tx: Sender<Snapshot>) -> std::io::Result<FileSourceHandle> {
        let (ctl, rx) = mpsc::channel::<Msg>();
        let events = ctl.clone();
        let watcher =
            match notify::recommended_watcher(move |res: notify::Result<notify::Event>| match res {
                Ok(ev) if is_relevant(&ev.kind) => {
                    let _ = events.send(Msg::Changed {
                        settled: is_settled(&ev.kind) && names_a_manifest(&ev.paths),
                    });
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "file watch error; relying on periodic re-list");
                    let _ = events.send(Msg::Changed { settled: false });
                }
            }) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(dir = %cfg.dir.display(), error = %e,
                    "cannot create file watcher; relying on periodic re-list only");
                    None
                }
            };
        let thread = std::thread::Builder::new()
            .name("source-file".into())
            .spawn(move || Worker::new(cfg, tx, watcher).run(rx))?;
        Ok(FileSourceHandle {
            ctl,
            thread: Some(thread),
        })
    }
}

/// Our own reads open files: only changes matter.
fn is_relevant(kind: &EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode};
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Events after which the file they name is complete: a writer closed it (IN_CLOSE_WRITE) or
/// it was renamed into place (IN_MOVED_TO: the atomic-write idiom). Creation, modification,
/// renames away and deletions are not: the writer may be half-way, and an editor that saves
/// by renaming the old file away (`a.yaml` → `a.yaml~`) and writing a new one must not make
/// the pod disappear for a moment.
fn is_settled(kind: &EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
    matches!(
        kind,
        EventKind::Access(AccessKind::Close(AccessMode::Write))
            | EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Both))
    )
}

/// Whether an event's file is a manifest (a rename event names source, then destination: the
/// destination counts).
fn names_a_manifest(paths: &[PathBuf]) -> bool {
    paths.last().is_some_and(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(is_manifest_name)
    })
}

/// What an immediate (undebounced) re-list did.
#[derive(Debug, PartialEq, Eq)]
enum Eager {
    /// The listing was complete and is in force (sent, or unchanged).
    Done,
    /// A file did not decode (maybe a partial write): wait for the debounce instead.
    Deferred,
    /// The receiver is gone.
    Gone,
}

struct Worker {
    cfg: FileSourceConfig,
    /// DEBOUNCE and MAX_DEBOUNCE (fields so tests can stretch them).
    debounce: Duration,
    max_debounce: Duration,
    tx: Sender<Snapshot>,
    watcher: Option<RecommendedWatcher>,
    watched: Option<PathBuf>,
    last_sent: Option<Snapshot>,
    seen: SeenCache,
    decoded: DecodeCache,
    /// What the directory looked like before the last clean listing (see [`DirStamp`]).
    stamp: Option<DirStamp>,
    /// [`RACY`] (a field so tests can shorten it), and how many listings read the files.
    racy: Duration,
    listings: u64,
}

/// What a listing sees of the directory without reading a file: per manifest name the
/// file's device, inode, size, modification and change times (ns), mode and owner (symbolic
/// links followed). Equal stamps mean the same bytes, so a periodic re-list whose stamp
/// equals the last clean listing's skips reading, hashing and building the pods (at 100 pods
/// that was the file source's idle cost, and every read woke the inotify watcher). A file
/// changed within the last [`RACY`] is never trusted (git's "racily clean" rule: two writes of
/// the same size within the file system's timestamp granularity leave its times unchanged).
#[derive(Debug, Clone, PartialEq, Eq)]
struct DirStamp(Vec<(std::ffi::OsString, [i64; 10])>);

/// How recent a change makes a file's times untrustworthy for [`DirStamp`].
const RACY: Duration = Duration::from_secs(2);

/// The stamp of `dir` now, or None when it cannot be taken or a file changed too recently.
fn dir_stamp(dir: &Path, racy: Duration) -> Option<DirStamp> {
    use std::os::unix::fs::MetadataExt;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs() as i64;
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).ok()? {
        let entry = entry.ok()?;
        let name = entry.file_name();
        if !is_manifest_name(&name.to_string_lossy()) {
            continue;
        }
        let m = std::fs::metadata(entry.path()).ok()?;
        let racy = racy.as_secs() as i64;
        if now - m.ctime() < racy || now - m.mtime() < racy {
            return None;
        }
        let id = [
            m.dev() as i64,
            m.ino() as i64,
            m.size() as i64,
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
            i64::from(m.mode()),
            i64::from(m.uid()),
            i64::from(m.gid()),
        ];
        files.push((name, id));
    }
    files.sort();
    Some(DirStamp(files))
}

impl Worker {
    fn new(
        cfg: FileSourceConfig,
        tx: Sender<Snapshot>,
        watcher: Option<RecommendedWatcher>,
    ) -> Self {
        Worker {
            cfg,
            debounce: DEBOUNCE,
            max_debounce: MAX_DEBOUNCE,
            tx,
            watcher,
            watched: None,
            last_sent: None,
            seen: SeenCache::default(),
            decoded: DecodeCache::default(),
            stamp: None,
            racy: RACY,
            listings: 0,
        }
    }

    /// The source loop. The first event of a burst that marks a complete file
    /// ([`is_settled`]) gets an immediate listing, applied when every manifest decodes (a pod
    /// written with `write` + `close` or renamed into place is seen about a millisecond after
    /// the close instead of DEBOUNCE later). Events before it (create, modify) and after it
    /// are debounced as before, and any event after the eager listing means one more listing
    /// once the directory is quiet, so a burst of writes still ends in a listing of its final
    /// state.
    fn run(mut self, rx: Receiver<Msg>) {
        tracing::info!(dir = %self.cfg.dir.display(), every = ?self.cfg.check_frequency, "file source started");
        let mut relist = true;
        loop {
            if relist {
                self.ensure_watch();
                if !self.relist() {
                    return; // receiver gone
                }
            }
            relist = true;
            match rx.recv_timeout(self.cfg.check_frequency) {
                Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                Ok(Msg::Changed { settled }) => {
                    // Debounce: wait until no event arrived for DEBOUNCE (bounded); the first
                    // settled event of the burst gets an eager listing.
                    let start = Instant::now();
                    let mut eager: Option<Eager> = None;
                    let mut more = false;
                    let mut next = Some(settled);
                    loop {
                        match next.take() {
                            Some(true) if eager.is_none() => {
                                self.ensure_watch();
                                let e = self.relist_if_complete();
                                if e == Eager::Gone {
                                    return;
                                }
                                eager = Some(e);
                                more = false; // the listing saw everything before it
                            }
                            Some(_) => more = true,
                            None => {}
                        }
                        match rx.recv_timeout(self.debounce) {
                            Ok(Msg::Changed { settled }) if start.elapsed() < self.max_debounce => {
                                next = Some(settled);
                            }
                            Ok(Msg::Changed { .. }) => {
                                more = true;
                                break;
                            }
                            Err(RecvTimeoutError::Timeout) => break,
                            Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                        }
                    }
                    // Nothing happened since a complete eager listing: it is still the truth.
                    relist = more || eager != Some(Eager::Done);
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// The directory listed now (through the decode cache).
    fn list(&mut self) -> Result<Snapshot, FileSourceError> {
        self.listings += 1;
        list_dir_cached(
            &self.cfg.dir,
            &self.cfg.node_name,
            &now_rfc3339_nano(),
            self.cfg.allow_insecure,
            &mut self.decoded,
        )
    }

    /// The listing, sent only when it has no manifest error that the last sent snapshot did
    /// not have (a decode error may be a partial write caught mid-way).
    fn relist_if_complete(&mut self) -> Eager {
        let snap = match self.list() {
            Ok(s) => s,
            Err(_) => return Eager::Deferred,
        };
        let known = |e: &ManifestError| {
            self.last_sent
                .as_ref()
                .is_some_and(|l| l.errors.iter().any(|k| k == e))
        };
        if !snap.errors.iter().all(known) {
            tracing::debug!(dir = %self.cfg.dir.display(), "file source: a manifest does not decode yet; debouncing");
            return Eager::Deferred;
        }
        if self.send_if_changed(snap) {
            Eager::Done
        } else {
            Eager::Gone
        }
    }

    /// Watch the directory when it exists, else its parent (to notice it appear).
    fn ensure_watch(&mut self) {
        let Some(w) = self.watcher.as_mut() else {
            return;
        };
        let dir = &self.cfg.dir;
        let want = if dir.is_dir() {
            Some(dir.clone())
        } else {
            dir.parent().filter(|p| p.is_dir()).map(Path::to_path_buf)
        };
        if want == self.watched {
            return;
        }
        if let Some(old) = self.watched.take() {
            let _ = w.unwatch(&old);
        }
        if let Some(path) = want {
            match w.watch(&path, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    tracing::debug!(path = %path.display(), "watching");
                    self.watched = Some(path);
                }
                Err(source) => {
                    let e = FileSourceError::Watch { path, source };
                    tracing::warn!(error = %e, "relying on periodic re-list");
                }
            }
        }
    }

    /// Returns false when the receiving side is gone. Nothing is read when the directory's
    /// stamp equals the one taken before the last clean listing (and the directory is still
    /// secure): that listing is still the truth.
    fn relist(&mut self) -> bool {
        let stamp = dir_stamp(&self.cfg.dir, self.racy);
        let secure = self.cfg.allow_insecure || check_dir_secure(&self.cfg.dir).is_ok();
        if secure && stamp.is_some() && stamp == self.stamp && self.last_sent.is_some() {
            return true;
        }
        self.stamp = None;
        let snap = match self.list() {
            Ok(s) => s,
            Err(e) => {
                // Not sending: the last snapshot stays in force (or none, which blocks cleanup).
                tracing::error!(error = %e, "file source: keeping the previous snapshot");
                return true;
            }
        };
        // Only a listing without errors is trusted to repeat (a read error may be transient).
        let clean = snap.errors.is_empty();
        let alive = self.send_if_changed(snap);
        if clean {
            self.stamp = stamp;
        }
        alive
    }

    /// Send `snap` unless its content equals the last one sent. Returns false when the
    /// receiving side is gone.
    fn send_if_changed(&mut self, mut snap: Snapshot) -> bool {
        self.seen.stabilize(&mut snap.pods);
        if self
            .last_sent
            .as_ref()
            .is_some_and(|l| l.same_content(&snap))
        {
            return true;
        }
        // The rejections themselves are logged once by the receiver of the snapshot (the
        // podconfig thread: `manifest rejected`), not here as well.
        tracing::info!(dir = %self.cfg.dir.display(), pods = snap.pods.len(), errors = snap.errors.len(),
            "file source: sending snapshot");
        if self.tx.send(snap.clone()).is_err() {
            tracing::debug!("file source: receiver dropped, stopping");
            return false;
        }
        self.last_sent = Some(snap);
        true
    }
}

/// Whether a directory entry name is a manifest we read.
pub fn is_manifest_name(name: &str) -> bool {
    if name.starts_with('.') {
        return false;
    }
    match Path::new(name).extension().and_then(|e| e.to_str()) {
        Some(ext) => matches!(ext, "yaml" | "yml" | "json"),
        None => false,
    }
}

/// One complete listing of `dir`. A missing directory is an empty snapshot; other directory
/// errors are returned (the caller keeps its previous snapshot).
#[cfg(test)]
pub fn list_dir(dir: &Path, node_name: &str, seen: &str) -> Result<Snapshot, FileSourceError> {
    list_dir_with(dir, node_name, seen, false)
}

/// [`list_dir`]; with `allow_insecure` false an insecure directory is an error (the previous
/// snapshot stays) and an insecure file is a manifest error (see [`check_secure`]).
#[cfg(test)]
pub fn list_dir_with(
    dir: &Path,
    node_name: &str,
    seen: &str,
    allow_insecure: bool,
) -> Result<Snapshot, FileSourceError> {
    list_dir_cached(
        dir,
        node_name,
        seen,
        allow_insecure,
        &mut DecodeCache::default(),
    )
}

/// What each manifest decoded to at the last listing, keyed by the length and SHA-256 of its
/// bytes: a periodic re-list of unchanged files (every `fileCheckFrequency`) reads them but
/// does not parse the YAML again (issue 8: at 100 pods the parse was ~11 ms of CPU per
/// re-list, the file source's whole idle cost).
///
/// The bytes themselves are not kept (issue 16: fifteen invalid 9.5 MB files kept 152 MB
/// alive), and an error's field and reason are bounded ([`bounded`]), so a file that does not
/// decode costs its path, the digest and at most ~2 KiB of error text whatever its size
/// (tested: 15 such files of 9.5 MB, 5.5 KB in all); a decoded pod is kept as the snapshot
/// keeps it.
#[derive(Default)]
pub struct DecodeCache {
    files: std::collections::HashMap<PathBuf, CachedDecode>,
}

struct CachedDecode {
    len: usize,
    sha256: [u8; 32],
    result: Result<DecodedDoc, ManifestError>,
}

impl DecodeCache {
    fn decode(
        &mut self,
        path: &Path,
        bytes: &[u8],
        origin: &str,
    ) -> Result<DecodedDoc, ManifestError> {
        use sha2::{Digest, Sha256};
        let sha256: [u8; 32] = Sha256::digest(bytes).into();
        if let Some(c) = self.files.get(path) {
            if c.len == bytes.len() && c.sha256 == sha256 {
                return c.result.clone();
            }
        }
        let result = decode_manifest(bytes, origin).map_err(bounded);
        self.files.insert(
            path.to_path_buf(),
            CachedDecode {
                len: bytes.len(),
                sha256,
                result: result.clone(),
            },
        );
        result
    }

    /// Heap bytes the cache holds on to: its keys, entries and error texts, and a decoded
    /// pod's size as JSON (an estimate of its heap). For tests.
    #[cfg(test)]
    fn retained_bytes(&self) -> usize {
        self.files
            .iter()
            .map(|(path, c)| {
                path.as_os_str().len()
                    + std::mem::size_of::<CachedDecode>()
                    + match &c.result {
                        Ok(doc) => serde_json::to_vec(&doc_pods(doc)).map_or(0, |v| v.len()),
                        Err(e) => e.origin.len() + e.field.len() + e.reason.len(),
                    }
            })
            .sum()
    }
}

#[cfg(test)]
fn doc_pods(doc: &DecodedDoc) -> Vec<&crate::api::Pod> {
    match doc {
        DecodedDoc::Pod(p) => vec![p],
        DecodedDoc::PodList(items) => items.iter().collect(),
    }
}

/// [`list_dir_with`] reusing (and refreshing) `cache`; files no longer listed leave it.
fn list_dir_cached(
    dir: &Path,
    node_name: &str,
    seen: &str,
    allow_insecure: bool,
    cache: &mut DecodeCache,
) -> Result<Snapshot, FileSourceError> {
    let mut errors: Vec<ManifestError> = Vec::new();
    if !allow_insecure {
        check_dir_secure(dir)?;
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Snapshot {
                source: SourceKind::File,
                pods: Vec::new(),
                errors,
                ready: true,
            });
        }
        Err(source) => {
            return Err(FileSourceError::ReadDir {
                dir: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut paths = manifest_paths(dir, entries, allow_insecure, &mut errors)?;
    paths.sort();
    cache.files.retain(|p, _| paths.contains(p));

    let (raws, shown_origins) = decode_files(paths, cache, &mut errors);
    let pods: Vec<SourcePod> = build_pods(
        raws,
        node_name,
        SourceKind::File,
        seen,
        |origin| {
            shown_origins
                .get(origin)
                .cloned()
                .unwrap_or_else(|| escape_text(origin))
        },
        &mut errors,
    );
    let pods = dedupe_by_name(pods, &mut errors);
    Ok(Snapshot {
        source: SourceKind::File,
        pods,
        errors,
        ready: true,
    })
}

/// The manifest files among `entries` that may be read; names that are not UTF-8, entries
/// that are not regular files and (unless `allow_insecure`) insecure files are `errors`.
fn manifest_paths(
    dir: &Path,
    entries: std::fs::ReadDir,
    allow_insecure: bool,
    errors: &mut Vec<ManifestError>,
) -> Result<Vec<PathBuf>, FileSourceError> {
    let mut paths: Vec<PathBuf> = Vec::new();
    for entry in entries {
        let entry = match entry {
            Ok(e) => e,
            Err(source) => {
                return Err(FileSourceError::ReadDir {
                    dir: dir.to_path_buf(),
                    source,
                });
            }
        };
        let name = entry.file_name();
        let path = entry.path();
        let Some(name) = name.to_str() else {
            // The name is the pod's origin (its UID hashes it): one that is not UTF-8 would be
            // shown and hashed lossily, so such a file is reported instead of read. Hidden and
            // non-manifest names stay ignored.
            if is_manifest_name(&name.to_string_lossy()) {
                errors.push(ManifestError {
                    origin: escape_path(&path),
                    field: String::new(),
                    reason: format!(
                        "manifest file {}: the file name is not valid UTF-8 (the bytes that are \
                         not are shown as \\xNN); rename the file",
                        escape_path(&path)
                    ),
                });
            }
            continue;
        };
        if !is_manifest_name(name) {
            continue;
        }
        // Follows symlinks (as the kubelet does). Anything but a regular file with a manifest
        // name (a directory, FIFO, device, socket, a dangling link or a link loop) is an error
        // naming it; a file gone since the directory was read is skipped.
        let checked = std::fs::metadata(&path)
            .map_err(|e| stat_error(&path, e))
            .and_then(|m| check_regular(&m).map(|()| m));
        match checked {
            Ok(m) => match check_secure(&path, &m, "manifest file") {
                Err(reason) if !allow_insecure => errors.push(ManifestError {
                    origin: escape_path(&path),
                    field: String::new(),
                    reason: escape_text(&reason.to_string()),
                }),
                _ => paths.push(path),
            },
            Err(e) if e.is_not_found() => {
                tracing::debug!(file = %path.display(), error = %e, "skipping vanished file");
            }
            Err(source) => errors.push(ManifestError {
                origin: escape_path(&path),
                field: String::new(),
                reason: FileSourceError::ReadFile { path, source }.to_string(),
            }),
        }
    }
    Ok(paths)
}

/// Decoded pods as [`build_pods`] takes them, and each origin as shown (escaped).
type DecodedFiles = (
    Vec<(crate::api::Pod, String, String)>,
    std::collections::HashMap<String, String>,
);

/// Reads and decodes (through `cache`) each manifest file: the pods with their origins, and
/// each origin as shown (escaped); what fails is in `errors`.
fn decode_files(
    paths: Vec<PathBuf>,
    cache: &mut DecodeCache,
    errors: &mut Vec<ManifestError>,
) -> DecodedFiles {
    let mut raws = Vec::new();
    // Pods and errors name the file escaped; the UID keeps hashing the (lossy) path as before.
    let mut shown_origins = std::collections::HashMap::new();
    for path in paths {
        let origin = path.to_string_lossy().into_owned();
        let shown = escape_path(&path);
        let bytes = match read_limited(&path) {
            Ok(b) => b,
            Err(FileSourceError::ReadFile { source, .. }) if source.is_not_found() => continue,
            Err(e) => {
                errors.push(ManifestError {
                    origin: shown,
                    field: String::new(),
                    reason: e.to_string(),
                });
                continue;
            }
        };
        match cache.decode(&path, &bytes, &shown) {
            Ok(DecodedDoc::Pod(pod)) => {
                shown_origins.insert(origin.clone(), shown);
                raws.push((*pod, origin, String::new()));
            }
            Ok(DecodedDoc::PodList(_)) => errors.push(ManifestError {
                origin: shown,
                field: "kind".into(),
                reason: "Unsupported value: \"PodList\": a manifest file holds exactly one Pod"
                    .into(),
            }),
            Err(e) => errors.push(e),
        }
    }
    (raws, shown_origins)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    const TIMEOUT: Duration = Duration::from_secs(10);

    fn manifest(name: &str, image: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: c\n    image: {image}\n"
        )
    }

    fn recv(rx: &Receiver<Snapshot>) -> Snapshot {
        match rx.recv_timeout(TIMEOUT) {
            Ok(s) => s,
            Err(e) => panic!("no snapshot: {e}"),
        }
    }

    /// Receive snapshots until one satisfies `pred` (intermediate states are allowed).
    fn recv_until(rx: &Receiver<Snapshot>, pred: impl Fn(&Snapshot) -> bool) -> Snapshot {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(s) if pred(&s) => return s,
                Ok(_) => continue,
                Err(e) => panic!("expected snapshot never arrived: {e}"),
            }
        }
    }

    fn names(s: &Snapshot) -> Vec<String> {
        s.pods.iter().map(|p| p.pod.metadata.name.clone()).collect()
    }

    fn tmp() -> tempfile::TempDir {
        match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => panic!("tempdir: {e}"),
        }
    }

    fn write(path: &Path, text: &str) {
        if let Err(e) = fs::write(path, text) {
            panic!("write {}: {e}", path.display());
        }
        // Explicit mode: world-writable manifests are refused, whatever the umask.
        use std::os::unix::fs::PermissionsExt;
        if let Err(e) = fs::set_permissions(path, fs::Permissions::from_mode(0o644)) {
            panic!("chmod {}: {e}", path.display());
        }
    }

    #[test]
    fn filenames() {
        assert!(is_manifest_name("a.yaml"));
        assert!(is_manifest_name("a.yml"));
        assert!(is_manifest_name("a.json"));
        assert!(!is_manifest_name(".a.yaml"));
        assert!(!is_manifest_name("a.yaml.bak"));
        assert!(!is_manifest_name("a.yaml~"));
        assert!(!is_manifest_name("a.yaml.swp"));
        assert!(!is_manifest_name("yaml"));
    }

    #[test]
    fn listing_rules_and_errors() {
        let d = tmp();
        write(&d.path().join("web.yaml"), &manifest("web", "busybox:1"));
        write(
            &d.path().join(".hidden.yaml"),
            &manifest("hidden", "busybox:1"),
        );
        write(
            &d.path().join("web.yaml.bak"),
            &manifest("bak", "busybox:1"),
        );
        let sub = d.path().join("sub");
        if let Err(e) = fs::create_dir(&sub) {
            panic!("{e}");
        }
        write(&sub.join("deep.yaml"), &manifest("deep", "busybox:1"));
        let bad = manifest("bad", "busybox:1").replace(
            "image: busybox:1",
            "image: x\n    ports:\n    - containerPort: nope",
        );
        write(&d.path().join("bad.yaml"), &bad);
        let snap = match list_dir(d.path(), "Node1", "t") {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(names(&snap), vec!["web-node1"]);
        assert_eq!(snap.errors.len(), 1);
        let e = &snap.errors[0];
        assert!(e.origin.ends_with("bad.yaml"), "{e}");
        assert_eq!(e.field, "spec.containers[0].ports[0].containerPort");
        assert_eq!(
            snap.pods[0].origin,
            d.path().join("web.yaml").to_string_lossy()
        );

        // Missing directory: empty snapshot.
        let missing = list_dir(&d.path().join("nope"), "n", "t");
        assert!(matches!(missing, Ok(ref s) if s.pods.is_empty() && s.errors.is_empty()));
    }

    #[test]
    fn insecure_directories_and_files_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tmp();
        write(&d.path().join("good.yaml"), &manifest("good", "img"));
        write(&d.path().join("open.yaml"), &manifest("open", "img"));
        write(&d.path().join("foreign.yaml"), &manifest("foreign", "img"));
        let chmod = |p: &Path, mode: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod")
        };
        chmod(&d.path().join("open.yaml"), 0o666);
        let me = nix::unistd::geteuid();
        let foreign_owner = me.is_root();
        if foreign_owner {
            nix::unistd::chown(
                &d.path().join("foreign.yaml"),
                Some(nix::unistd::Uid::from_raw(4321)),
                None,
            )
            .expect("chown");
        }
        let snap = list_dir(d.path(), "n", "t").expect("listing");
        let mut want = vec!["good-n".to_string()];
        if !foreign_owner {
            want.push("foreign-n".into());
        }
        want.sort();
        assert_eq!(names(&snap), want);
        let open = snap
            .errors
            .iter()
            .find(|e| e.origin.ends_with("open.yaml"))
            .expect("open.yaml error");
        assert!(
            open.reason.contains("is world-writable (mode 0666)")
                && open.reason.contains("run privileged containers")
                && open.reason.contains("--allow-insecure-manifest-dir"),
            "{}",
            open.reason
        );
        if foreign_owner {
            let foreign = snap
                .errors
                .iter()
                .find(|e| e.origin.ends_with("foreign.yaml"))
                .expect("foreign.yaml error");
            assert!(
                foreign.reason.contains("owned by uid 4321"),
                "{}",
                foreign.reason
            );
        }
        // The override reads them all.
        let snap = list_dir_with(d.path(), "n", "t", true).expect("listing");
        assert_eq!(snap.pods.len(), 3, "{:?}", snap.errors);
        // A world-writable directory is refused as a whole; a sticky world-writable parent
        // (like /tmp) is fine.
        chmod(d.path(), 0o777);
        let e = list_dir(d.path(), "n", "t").unwrap_err().to_string();
        assert!(e.starts_with("manifest directory "), "{e}");
        assert!(e.contains("world-writable (mode 0777)"), "{e}");
        assert!(check_dir_secure(d.path()).is_err());
        let inner = d.path().join("manifests");
        std::fs::create_dir(&inner).expect("mkdir");
        chmod(&inner, 0o755);
        chmod(d.path(), 0o1777);
        assert!(check_dir_secure(&inner).is_ok());
        chmod(d.path(), 0o777);
        let e = check_dir_secure(&inner).unwrap_err().to_string();
        assert!(e.starts_with("parent directory "), "{e}");
        chmod(d.path(), 0o700);
        assert!(check_dir_secure(&d.path().join("missing")).is_ok());
    }

    #[test]
    fn unchanged_files_are_not_parsed_again_and_changed_ones_are() {
        let d = tmp();
        let a = d.path().join("a.yaml");
        write(&a, &manifest("web", "busybox:1"));
        let mut cache = DecodeCache::default();
        let snap = list_dir_cached(d.path(), "n", "t", false, &mut cache).expect("listing");
        assert_eq!(names(&snap), vec!["web-n"]);
        // Plant a different result for the same bytes: a listing that parsed again would
        // not return it.
        let planted = decode_manifest(manifest("planted", "busybox:1").as_bytes(), "x");
        if let Some(entry) = cache.files.get_mut(&a) {
            entry.result = planted;
        }
        let snap = list_dir_cached(d.path(), "n", "t", false, &mut cache).expect("listing");
        assert_eq!(
            names(&snap),
            vec!["planted-n"],
            "unchanged bytes were parsed again"
        );
        // New bytes are parsed.
        write(&a, &manifest("web2", "busybox:1"));
        let snap = list_dir_cached(d.path(), "n", "t", false, &mut cache).expect("listing");
        assert_eq!(names(&snap), vec!["web2-n"]);
        // A removed file leaves the cache.
        std::fs::remove_file(&a).expect("rm");
        let snap = list_dir_cached(d.path(), "n", "t", false, &mut cache).expect("listing");
        assert!(snap.pods.is_empty());
        assert!(cache.files.is_empty());
    }

    /// `f` on another thread, failing the test (instead of hanging it) after 10 s.
    fn within_timeout<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        match rx.recv_timeout(TIMEOUT) {
            Ok(v) => v,
            Err(_) => panic!("{what} did not return within {TIMEOUT:?} (blocked?)"),
        }
    }

    #[test]
    fn hostile_directory_entries_are_manifest_errors_naming_them() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let d = tmp();
        let dir = d.path();
        let elsewhere = tmp();
        let mode = nix::sys::stat::Mode::from_bits_truncate(0o644);
        write(&dir.join("good.yaml"), &manifest("good", "busybox:1"));
        nix::unistd::mkfifo(&dir.join("fifo.yaml"), mode).expect("mkfifo");
        nix::unistd::mkfifo(&dir.join(".hidden.yaml"), mode).expect("mkfifo");
        nix::unistd::mkfifo(&dir.join("pipe.txt"), mode).expect("mkfifo");
        fs::create_dir(dir.join("dir.yaml")).expect("mkdir");
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero.yaml")).expect("symlink");
        std::os::unix::fs::symlink(dir.join("gone.yaml"), dir.join("dangling.json"))
            .expect("symlink");
        std::os::unix::fs::symlink(dir.join("loop.yml"), dir.join("loop.yml")).expect("symlink");
        let _sock = std::os::unix::net::UnixListener::bind(dir.join("sock.yaml")).expect("bind");
        let mut latin1 = dir.as_os_str().as_bytes().to_vec();
        latin1.extend_from_slice(b"/caf\xe9.yaml");
        write(
            Path::new(OsStr::from_bytes(&latin1)),
            &manifest("latin1", "busybox:1"),
        );
        // A symbolic link to a regular file is read, as by the kubelet.
        write(
            &elsewhere.path().join("real.yaml"),
            &manifest("linked", "busybox:1"),
        );
        std::os::unix::fs::symlink(elsewhere.path().join("real.yaml"), dir.join("link.yaml"))
            .expect("symlink");
        // A newline in a valid manifest's name: it runs; it is shown escaped.
        write(
            &dir.join("new\nline.yaml"),
            &manifest("newline", "busybox:1"),
        );

        let listed = dir.to_path_buf();
        let snap = within_timeout("listing", move || list_dir(&listed, "n", "t")).expect("listing");
        assert_eq!(
            names(&snap),
            vec!["good-n", "linked-n", "newline-n"],
            "{:?}",
            snap.errors
        );
        let newline = snap
            .pods
            .iter()
            .find(|p| p.pod.metadata.name == "newline-n");
        assert_eq!(
            newline.map(|p| p.origin.clone()),
            Some(format!("{}/new\\nline.yaml", dir.display()))
        );
        let reason = |file: &str| {
            let origin = format!("{}/{file}", dir.display());
            let found: Vec<&ManifestError> =
                snap.errors.iter().filter(|e| e.origin == origin).collect();
            assert_eq!(found.len(), 1, "{file}: {:?}", snap.errors);
            found[0].reason.clone()
        };
        for (file, what) in [
            ("fifo.yaml", "not a regular file but a FIFO (named pipe)"),
            ("dir.yaml", "not a regular file but a directory"),
            ("zero.yaml", "not a regular file but a character device"),
            ("sock.yaml", "not a regular file but a socket"),
            ("dangling.json", "a dangling symbolic link: its target"),
            (
                "loop.yml",
                "cannot be read: Too many levels of symbolic links",
            ),
            ("caf\\xe9.yaml", "the file name is not valid UTF-8"),
        ] {
            let r = reason(file);
            assert!(r.contains(what), "{file}: {r}");
            assert!(
                r.contains(&format!("manifest file {}/{file}", dir.display())),
                "{r}"
            );
        }
        assert!(reason("dangling.json").contains("gone.yaml does not exist"));
        assert_eq!(
            snap.errors.len(),
            7,
            "hidden and non-manifest names stay ignored: {:?}",
            snap.errors
        );
        for e in &snap.errors {
            assert!(
                !e.origin.contains(char::is_control) && !e.reason.contains(char::is_control),
                "{e:?}"
            );
        }
    }

    #[test]
    fn read_limited_reads_only_small_regular_files_and_never_blocks() {
        let d = tmp();
        let fifo = d.path().join("fifo.yaml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644))
            .expect("mkfifo");
        let e = within_timeout("reading a FIFO", move || read_limited(&fifo))
            .expect_err("a FIFO is refused");
        assert!(
            e.to_string()
                .contains("not a regular file but a FIFO (named pipe)"),
            "{e}"
        );

        let zero = d.path().join("zero.yaml");
        std::os::unix::fs::symlink("/dev/zero", &zero).expect("symlink");
        let e = within_timeout("reading /dev/zero", move || read_limited(&zero))
            .expect_err("a device is refused");
        assert!(e.to_string().contains("a character device"), "{e}");

        // 1 GiB, sparse: refused by its size, nothing read.
        let huge = d.path().join("huge.yaml");
        fs::File::create(&huge)
            .and_then(|f| f.set_len(1 << 30))
            .expect("sparse file");
        let started = Instant::now();
        let e = read_limited(&huge).expect_err("too large");
        assert!(
            matches!(e, FileSourceError::ReadFile { source: ReadError::TooLarge(n), .. } if n == 1 << 30),
            "{e}"
        );
        assert!(e.to_string().contains("larger than 10485760 bytes"), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );

        // Exactly the limit is fine; a symbolic link to a regular file is followed.
        let max = d.path().join("max.yaml");
        fs::File::create(&max)
            .and_then(|f| f.set_len(MAX_MANIFEST_BYTES as u64))
            .expect("file");
        let link = d.path().join("link.yaml");
        std::os::unix::fs::symlink(&max, &link).expect("symlink");
        assert_eq!(
            read_limited(&link).map(|b| b.len()).ok(),
            Some(MAX_MANIFEST_BYTES)
        );
    }

    #[test]
    fn the_cache_keeps_no_bytes_of_large_invalid_files() {
        let d = tmp();
        let size = 9_500_000;
        // Fifteen 9.5 MB files that do not decode: not UTF-8 (sparse after the first byte) and
        // one whose YAML error quotes a 9.5 MB string.
        for i in 0..14 {
            let p = d.path().join(format!("bad{i:02}.yaml"));
            write(&p, "-");
            fs::write(&p, [0xffu8])
                .and_then(|()| fs::OpenOptions::new().write(true).open(&p))
                .and_then(|f| f.set_len(size))
                .expect("a sparse file that is not UTF-8");
        }
        let head = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec: \"";
        let body = format!("{head}{}\"\n", "a".repeat(size as usize - head.len() - 2));
        write(&d.path().join("quote.yaml"), &body);
        let mut cache = DecodeCache::default();
        let snap = list_dir_cached(d.path(), "n", "t", false, &mut cache).expect("listing");
        assert_eq!(
            snap.errors.len(),
            15,
            "{:?}",
            snap.errors.iter().map(|e| &e.origin).collect::<Vec<_>>()
        );
        assert_eq!(cache.files.len(), 15);
        let retained = cache.retained_bytes();
        println!("decode cache after 15 invalid 9.5 MB files: {retained} bytes");
        assert!(retained < 15 * 2048, "the cache keeps {retained} bytes");
        let quoted = snap
            .errors
            .iter()
            .find(|e| e.origin.ends_with("quote.yaml"))
            .expect("quote.yaml");
        assert!(
            quoted.reason.len() < 2 * crate::config::MAX_ERROR_TEXT,
            "{}",
            quoted.reason.len()
        );
        // A relist of the unchanged files is served from the cache and keeps the bound.
        let again = list_dir_cached(d.path(), "n", "t", false, &mut cache).expect("listing");
        assert_eq!(again.errors, snap.errors);
        assert!(cache.retained_bytes() < 15 * 2048);
    }

    #[test]
    fn duplicate_names_first_file_wins() {
        let d = tmp();
        write(&d.path().join("a.yaml"), &manifest("web", "busybox:1"));
        write(&d.path().join("b.yaml"), &manifest("web", "busybox:2"));
        let snap = match list_dir(d.path(), "n", "t") {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(snap.pods.len(), 1);
        assert!(snap.pods[0].origin.ends_with("a.yaml"));
        assert_eq!(snap.errors.len(), 1);
        let reason = &snap.errors[0].reason;
        assert!(snap.errors[0].origin.ends_with("b.yaml"));
        assert!(
            reason.contains("a.yaml") && reason.contains("b.yaml"),
            "{reason}"
        );
    }

    #[test]
    fn watch_create_edit_delete() {
        let d = tmp();
        let dir = d.path().join("manifests"); // does not exist yet
        let (tx, rx) = mpsc::channel();
        let cfg = FileSourceConfig {
            dir: dir.clone(),
            node_name: "node1".into(),
            check_frequency: Duration::from_secs(3600),
            allow_insecure: false,
        };
        let handle = match FileSource::spawn(cfg, tx) {
            Ok(h) => h,
            Err(e) => panic!("{e}"),
        };
        let first = recv(&rx);
        assert!(first.pods.is_empty() && first.errors.is_empty());

        // The directory appears (watching the parent notices), with a manifest.
        if let Err(e) = fs::create_dir(&dir) {
            panic!("{e}");
        }
        write(&dir.join("web.yaml"), &manifest("web", "busybox:1"));
        let s = recv_until(&rx, |s| s.pods.len() == 1);
        assert_eq!(names(&s), vec!["web-node1"]);
        let uid1 = s.pods[0].pod.metadata.uid.clone();

        // Ignored files do not produce a snapshot; the next snapshot is the edit.
        write(&dir.join(".web.yaml.swp"), "garbage");
        write(&dir.join("web.yaml.bak"), "garbage");
        write(&dir.join("web.yaml"), &manifest("web", "busybox:2"));
        let s = recv_until(&rx, |s| {
            s.pods.len() == 1 && s.pods[0].pod.metadata.uid != uid1
        });
        assert!(s.errors.is_empty());
        assert_eq!(s.pods[0].pod.spec.containers[0].image, "busybox:2");

        // Invalid file beside the valid one.
        write(
            &dir.join("bad.json"),
            "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"bad\"},\"spec\":{\"containers\":[{\"name\":\"c\"}]}}",
        );
        // (A listing between the file's creation and its write sees it empty: wait for the
        // error about its content.)
        let s = recv_until(&rx, |s| {
            s.errors
                .iter()
                .any(|e| e.field == "spec.containers[0].image")
        });
        assert_eq!(s.pods.len(), 1);
        assert!(s.errors[0].origin.ends_with("bad.json"));
        assert_eq!(s.errors[0].field, "spec.containers[0].image");

        // Delete everything.
        let _ = fs::remove_file(dir.join("bad.json"));
        let _ = fs::remove_file(dir.join("web.yaml"));
        let s = recv_until(&rx, |s| s.pods.is_empty() && s.errors.is_empty());
        assert!(s.pods.is_empty());

        handle.stop();
        // After stop the sender is dropped: the channel disconnects.
        loop {
            match rx.recv_timeout(TIMEOUT) {
                Ok(_) => continue,
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => panic!("source thread did not stop"),
            }
        }
    }

    /// Runs the source loop on `dir` fed by the returned sender instead of inotify, with a
    /// debounce of `debounce`.
    fn loop_with_debounce(
        dir: &Path,
        debounce: Duration,
    ) -> (Sender<Msg>, Receiver<Snapshot>, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel();
        let cfg = FileSourceConfig {
            dir: dir.to_path_buf(),
            node_name: "n".into(),
            check_frequency: Duration::from_secs(3600),
            allow_insecure: false,
        };
        let mut w = Worker::new(cfg, tx, None);
        w.debounce = debounce;
        w.max_debounce = debounce * 2;
        let (ctl, ctl_rx) = mpsc::channel();
        let t = std::thread::spawn(move || w.run(ctl_rx));
        (ctl, rx, t)
    }

    #[test]
    fn complete_files_are_delivered_without_waiting_for_the_debounce() {
        let d = tmp();
        write(&d.path().join("a.yaml"), &manifest("a", "busybox:1"));
        // A debounce far longer than the test: only an eager listing can deliver in time.
        let (ctl, rx, t) = loop_with_debounce(d.path(), Duration::from_secs(3600));
        assert_eq!(names(&recv(&rx)), vec!["a-n"]);

        // Create/modify (the writer may be half-way): debounced, nothing is sent.
        write(&d.path().join("b.yaml"), &manifest("b", "busybox:1"));
        ctl.send(Msg::Changed { settled: false }).expect("send");
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "an unsettled event was not debounced"
        );
        // The close of the written file: listed and sent at once, in the same burst.
        let asked = Instant::now();
        ctl.send(Msg::Changed { settled: true }).expect("send");
        assert_eq!(names(&recv(&rx)), vec!["a-n", "b-n"]);
        assert!(asked.elapsed() < TIMEOUT);
        // Only the first settled event of a burst is eager: the rest wait for quiet.
        write(&d.path().join("c.yaml"), &manifest("c", "busybox:1"));
        ctl.send(Msg::Changed { settled: true }).expect("send");
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
        ctl.send(Msg::Stop).expect("send");
        t.join().expect("source thread");
    }

    #[test]
    fn a_file_that_does_not_decode_yet_waits_for_the_debounce() {
        let d = tmp();
        write(&d.path().join("a.yaml"), &manifest("a", "busybox:1"));
        let (ctl, rx, t) = loop_with_debounce(d.path(), Duration::from_millis(200));
        assert_eq!(names(&recv(&rx)), vec!["a-n"]);
        // A partial write caught mid-way: the eager listing is not sent...
        write(
            &d.path().join("b.yaml"),
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: b\nspec:\n  containers:\n  - name: c\n",
        );
        let asked = Instant::now();
        ctl.send(Msg::Changed { settled: true }).expect("send");
        // ...the listing after the quiet period is (here the file stayed invalid: reported).
        let s = recv(&rx);
        assert!(
            asked.elapsed() >= Duration::from_millis(200),
            "sent before the debounce: {:?}",
            asked.elapsed()
        );
        assert_eq!(names(&s), vec!["a-n"]);
        assert_eq!(s.errors.len(), 1, "{:?}", s.errors);
        assert!(s.errors[0].origin.ends_with("b.yaml"));
        ctl.send(Msg::Stop).expect("send");
        t.join().expect("source thread");
    }

    #[test]
    fn close_and_rename_into_place_are_settled_the_rest_is_not() {
        use notify::event::{
            AccessKind, AccessMode, CreateKind, DataChange, ModifyKind, RemoveKind, RenameMode,
        };
        assert!(is_settled(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(is_settled(&EventKind::Modify(ModifyKind::Name(
            RenameMode::To
        ))));
        assert!(is_settled(&EventKind::Modify(ModifyKind::Name(
            RenameMode::Both
        ))));
        assert!(!is_settled(&EventKind::Remove(RemoveKind::File)));
        assert!(!is_settled(&EventKind::Create(CreateKind::File)));
        assert!(!is_settled(&EventKind::Modify(ModifyKind::Data(
            DataChange::Any
        ))));
        assert!(!is_settled(&EventKind::Modify(ModifyKind::Name(
            RenameMode::From
        ))));
        assert!(names_a_manifest(&[PathBuf::from("/m/web.yaml")]));
        assert!(names_a_manifest(&[
            PathBuf::from("/m/.web.tmp"),
            PathBuf::from("/m/web.yaml")
        ]));
        assert!(!names_a_manifest(&[PathBuf::from("/m/web.yaml~")]));
        assert!(!names_a_manifest(&[
            PathBuf::from("/m/web.yaml"),
            PathBuf::from("/m/web.yaml~")
        ]));
        assert!(!names_a_manifest(&[PathBuf::from("/m/.web.yaml.swp")]));
    }

    /// The kubelet re-reads every manifest each fileCheckFrequency; nanolet gets the same
    /// snapshots without reading files whose stamp (inode, size, times, mode, owner) did not
    /// change since a clean listing, and reads them all again when one changed, when one is
    /// added, or when a change is too recent to trust (racily clean).
    #[test]
    fn a_relist_of_unchanged_files_reads_none_and_a_change_is_read() {
        let d = tmp();
        let file = d.path().join("web.yaml");
        write(&file, &manifest("web", "busybox:1"));
        let (tx, rx) = mpsc::channel();
        let cfg = FileSourceConfig {
            dir: d.path().to_path_buf(),
            node_name: "n".into(),
            check_frequency: Duration::from_secs(20),
            allow_insecure: false,
        };
        let mut w = Worker::new(cfg, tx, None);
        // Every change is too recent to trust with the real window: each relist reads.
        assert!(w.relist() && w.relist());
        assert_eq!(w.listings, 2, "racily clean files are read again");
        assert_eq!(
            rx.try_iter().count(),
            1,
            "one snapshot for unchanged content"
        );
        w.racy = Duration::ZERO;
        assert!(w.relist());
        let after_clean = w.listings;
        assert!(w.relist() && w.relist());
        assert_eq!(w.listings, after_clean, "unchanged stamps: nothing read");
        // A changed file (another size, so its stamp differs even within one clock tick).
        write(&file, &manifest("web", "busybox:1.36"));
        assert!(w.relist());
        assert_eq!(w.listings, after_clean + 1);
        let snap = rx.try_iter().last().expect("a snapshot for the change");
        assert_eq!(snap.pods[0].pod.spec.containers[0].image, "busybox:1.36");
        // A new file is a new stamp too.
        write(&d.path().join("z.yaml"), &manifest("zed", "busybox:1"));
        assert!(w.relist());
        assert_eq!(rx.try_iter().last().map(|s| s.pods.len()), Some(2));
        // A listing with a manifest error is never trusted to repeat.
        write(&d.path().join("bad.yaml"), "kind: Pod\nspec: [");
        assert!(w.relist() && w.relist());
        assert_eq!(w.listings, after_clean + 4);
    }

    #[test]
    fn unchanged_relist_sends_nothing_and_seen_is_stable() {
        let d = tmp();
        write(&d.path().join("web.yaml"), &manifest("web", "busybox:1"));
        let (tx, rx) = mpsc::channel();
        let cfg = FileSourceConfig {
            dir: d.path().to_path_buf(),
            node_name: "n".into(),
            check_frequency: Duration::from_millis(50),
            allow_insecure: false,
        };
        let handle = match FileSource::spawn(cfg, tx) {
            Ok(h) => h,
            Err(e) => panic!("{e}"),
        };
        let first = recv(&rx);
        assert_eq!(first.pods.len(), 1);
        let seen1 = first.pods[0]
            .pod
            .metadata
            .annotations
            .get(crate::config::naming::CONFIG_SEEN_ANNOTATION)
            .cloned();
        // Many relists happen in 500ms; none may produce a snapshot.
        assert!(rx.recv_timeout(Duration::from_millis(500)).is_err());
        // A second file: snapshot holds both, and the first pod's config.seen is unchanged.
        write(&d.path().join("z.yaml"), &manifest("zed", "busybox:1"));
        let s = recv_until(&rx, |s| s.pods.len() == 2);
        let seen2 = s.pods[0]
            .pod
            .metadata
            .annotations
            .get(crate::config::naming::CONFIG_SEEN_ANNOTATION)
            .cloned();
        assert_eq!(seen1, seen2);
        drop(handle);
    }
}
