//! The images directory (default `<root-dir>/images`, as k3s's `agent/images`): every
//! `*.tar`, `*.tar.gz`/`*.tgz`, `*.tar.zst`/`*.tzst` file in it (no dotfiles, no recursion) is
//! imported at start and whenever a new or changed file appears (inotify, debounced, plus a
//! re-list every minute as the safety net). Imported files are remembered by size and mtime in
//! `<root-dir>/images-imported.json`, so a restart does not import them again. A failure is
//! logged and reported through the callback (an event), and retried only when the file changes
//! or nanolet restarts; it never stops the agent.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, UNIX_EPOCH};

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};

use super::archive::Platform;
use super::containerd::Client;
use super::{ImportOptions, import_archive};

/// Quiet time after the last event before importing (a file being copied in keeps firing).
const SETTLE: Duration = Duration::from_secs(1);
/// Upper bound on waiting for a burst of events to settle.
const MAX_SETTLE: Duration = Duration::from_secs(30);
/// Re-list period (the safety net when inotify misses something).
const RELIST: Duration = Duration::from_secs(60);
/// The state file below the root dir.
pub const STATE_FILE: &str = "images-imported.json";

/// Images directory settings.
#[derive(Debug, Clone)]
pub struct ImagesDirConfig {
    pub dir: PathBuf,
    pub root_dir: PathBuf,
    pub endpoint: String,
    pub snapshotter: String,
    /// `--allow-insecure-manifest-dir`: also import from a directory or files others can write.
    pub allow_insecure: bool,
}

/// What a writable images directory lets others do (in the refusal message).
const IMAGES_RISK: &str = "anyone who can write there can replace the images pods on this node run";

/// Reports an import result: (archive file name, warning?, reason, message). `kubelet::wiring` turns it
/// into an event and, after a success, re-syncs pods (one may wait for the image).
pub type Report = Box<dyn Fn(&str, bool, &str, &str) + Send>;

/// Whether a directory entry name is an archive the images directory imports.
pub fn is_archive_name(name: &str) -> bool {
    !name.starts_with('.')
        && [".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst"]
            .iter()
            .any(|s| name.len() > s.len() && name.ends_with(s))
}

/// What we remember about an imported file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileStamp {
    pub size: u64,
    pub mtime_ns: u128,
    #[serde(default)]
    pub images: Vec<String>,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct StateFile {
    files: BTreeMap<String, FileStamp>,
}

fn stamp(path: &Path) -> Option<(u64, u128)> {
    let md = std::fs::metadata(path).ok()?;
    if !md.is_file() {
        return None;
    }
    let mtime = md
        .modified()
        .ok()?
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    Some((md.len(), mtime))
}

fn load_state(root: &Path) -> BTreeMap<String, FileStamp> {
    let path = root.join(STATE_FILE);
    // A damaged record is moved aside: the archives are simply imported again.
    match crate::statefile::read_or_quarantine::<StateFile>(&path) {
        Ok(Some(s)) => s.files,
        Ok(None) => BTreeMap::new(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "reading the images state");
            BTreeMap::new()
        }
    }
}

fn save_state(root: &Path, files: &BTreeMap<String, FileStamp>) {
    let path = root.join(STATE_FILE);
    let body = match serde_json::to_vec_pretty(&StateFile {
        files: files.clone(),
    }) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "serialising the images state");
            return;
        }
    };
    if let Err(e) =
        std::fs::create_dir_all(root).and_then(|()| crate::statefile::write_atomic(&path, &body))
    {
        tracing::warn!(path = %path.display(), error = %e, "writing the images state");
    }
}

/// The archives of `dir` that are new or changed since they were last imported, by name.
pub fn pending(dir: &Path, state: &BTreeMap<String, FileStamp>) -> Vec<(String, u64, u128)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, u64, u128)> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            if !is_archive_name(&name) {
                return None;
            }
            let (size, mtime) = stamp(&e.path())?;
            let known = state
                .get(&name)
                .is_some_and(|s| s.size == size && s.mtime_ns == mtime);
            (!known).then_some((name, size, mtime))
        })
        .collect();
    out.sort();
    out
}

enum Msg {
    Changed,
    Stop,
}

/// The running watcher; dropping it stops the thread (after the import in progress).
pub struct ImagesDirHandle {
    ctl: Sender<Msg>,
    thread: Option<JoinHandle<()>>,
    first_pass: FirstPass,
}

impl ImagesDirHandle {
    /// Done once the archives present at start have been imported (or failed).
    pub fn first_pass(&self) -> FirstPass {
        self.first_pass.clone()
    }
}

/// Whether the images directory's first pass (the archives present at start) is over: the
/// runtime status check waits for it before it calls the sandbox image absent.
#[derive(Debug, Clone, Default)]
pub struct FirstPass(Arc<AtomicBool>);

impl FirstPass {
    pub fn is_done(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    pub fn done(&self) {
        self.0.store(true, Ordering::Release);
    }
}

impl Drop for ImagesDirHandle {
    fn drop(&mut self) {
        let _ = self.ctl.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts the images directory thread. It creates the directory if missing.
pub fn spawn(cfg: ImagesDirConfig, report: Report) -> std::io::Result<ImagesDirHandle> {
    if let Err(e) = std::fs::create_dir_all(&cfg.dir) {
        tracing::warn!(dir = %cfg.dir.display(), error = %e, "cannot create the images directory");
    }
    let (ctl, rx) = mpsc::channel::<Msg>();
    let events = ctl.clone();
    let mut watcher: Option<RecommendedWatcher> = match notify::recommended_watcher(
        move |res: notify::Result<notify::Event>| {
            let relevant = match &res {
                Ok(ev) => {
                    !matches!(ev.kind, EventKind::Access(_))
                        || matches!(
                            ev.kind,
                            EventKind::Access(notify::event::AccessKind::Close(
                                notify::event::AccessMode::Write
                            ))
                        )
                }
                Err(_) => true,
            };
            if relevant {
                let _ = events.send(Msg::Changed);
            }
        },
    ) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(error = %e, "images directory: no inotify watcher; re-listing every minute");
            None
        }
    };
    if let Some(w) = watcher.as_mut() {
        if let Err(e) = w.watch(&cfg.dir, RecursiveMode::NonRecursive) {
            tracing::warn!(dir = %cfg.dir.display(), error = %e, "images directory: cannot watch; re-listing every minute");
        }
    }
    let first_pass = FirstPass::default();
    let done = first_pass.clone();
    let thread = std::thread::Builder::new()
        .name("images-dir".into())
        .stack_size(1 << 20)
        .spawn(move || {
            let _watcher = watcher;
            run(cfg, report, rx, done)
        })?;
    Ok(ImagesDirHandle {
        ctl,
        thread: Some(thread),
        first_pass,
    })
}

fn run(cfg: ImagesDirConfig, report: Report, rx: Receiver<Msg>, first_pass: FirstPass) {
    tracing::info!(dir = %cfg.dir.display(), "images directory watcher started");
    let mut w = Importer {
        state: load_state(&cfg.root_dir),
        cfg,
        report,
        failed: BTreeMap::new(),
        client: None,
        refused: None,
    };
    loop {
        let todo = w.todo();
        w.import(todo);
        w.forget_gone();
        first_pass.done();
        if !wait_for_change(&rx) {
            return;
        }
    }
}

/// The images-directory thread's state between passes.
struct Importer {
    cfg: ImagesDirConfig,
    report: Report,
    /// The imported files.
    state: BTreeMap<String, FileStamp>,
    /// Failed files are remembered in memory only: retried when they change or after a restart.
    failed: BTreeMap<String, (u64, u128)>,
    client: Option<Client>,
    /// The last refusal of the directory itself, reported once until it changes.
    refused: Option<String>,
}

impl Importer {
    /// The archives to import now (name, size, mtime): new or changed, not failed as they are,
    /// and (unless insecure is allowed) in a safe directory and safe themselves.
    fn todo(&mut self) -> Vec<(String, u64, u128)> {
        let mut todo: Vec<_> = pending(&self.cfg.dir, &self.state)
            .into_iter()
            .filter(|(n, s, m)| self.failed.get(n) != Some(&(*s, *m)))
            .collect();
        if !self.cfg.allow_insecure {
            match crate::config::file::check_dir_chain(
                &self.cfg.dir,
                "images directory",
                IMAGES_RISK,
            ) {
                Ok(()) => self.refused = None,
                Err(e) => {
                    let reason = e.to_string();
                    if self.refused.as_ref() != Some(&reason) {
                        tracing::error!(dir = %self.cfg.dir.display(), "images directory not imported: {reason}");
                        (self.report)(
                            &self.cfg.dir.display().to_string(),
                            true,
                            "ImageImportFailed",
                            &reason,
                        );
                        self.refused = Some(reason);
                    }
                    todo.clear();
                }
            }
            todo.retain(|(name, size, mtime)| {
                let path = self.cfg.dir.join(name);
                let checked = std::fs::metadata(&path)
                    .map_err(|e| e.to_string())
                    .and_then(|m| {
                        crate::config::file::check_secure_for(
                            &path,
                            &m,
                            "image archive",
                            IMAGES_RISK,
                        )
                        .map_err(|e| e.to_string())
                    });
                match checked {
                    Ok(()) => true,
                    Err(reason) => {
                        tracing::error!(file = %path.display(), "not importing: {reason}");
                        (self.report)(name, true, "ImageImportFailed", &reason);
                        // Retried when the file changes (a chmod changes ctime, not mtime:
                        // also after a restart).
                        self.failed.insert(name.clone(), (*size, *mtime));
                        false
                    }
                }
            });
        }
        todo
    }

    /// Imports each archive, connecting to containerd first if needed, and records the outcome.
    fn import(&mut self, todo: Vec<(String, u64, u128)>) {
        for (name, size, mtime) in todo {
            if self.client.is_none() {
                match Client::connect(&self.cfg.endpoint, &self.cfg.snapshotter) {
                    Ok(c) => self.client = Some(c),
                    Err(e) => {
                        tracing::error!(error = %e, "images directory: cannot create a containerd client");
                        break;
                    }
                }
            }
            let Some(c) = self.client.as_ref() else { break };
            let path = self.cfg.dir.join(&name);
            let opts = ImportOptions {
                platform: Platform::host(),
                forced_platform: false,
                root_dir: Some(self.cfg.root_dir.clone()),
            };
            let started = Instant::now();
            tracing::info!(file = %path.display(), size, "importing image archive");
            match import_archive(c, &path, &opts, &mut |_| {}) {
                Ok(imgs) => {
                    // The file may have changed while we read it: then it is imported again.
                    let names: Vec<String> = imgs.iter().flat_map(|i| i.names.clone()).collect();
                    let msg = format!(
                        "Imported {} from {} in {:.1}s",
                        names.join(", "),
                        path.display(),
                        started.elapsed().as_secs_f64()
                    );
                    tracing::info!(file = %path.display(), images = ?names, "{msg}");
                    (self.report)(&name, false, "ImageImported", &msg);
                    self.failed.remove(&name);
                    self.state.insert(
                        name,
                        FileStamp {
                            size,
                            mtime_ns: mtime,
                            images: names,
                        },
                    );
                    save_state(&self.cfg.root_dir, &self.state);
                }
                Err(e) => {
                    let unavailable = e.is_unavailable();
                    tracing::error!(file = %path.display(), error = %e, "importing image archive failed");
                    (self.report)(
                        &name,
                        true,
                        "ImageImportFailed",
                        &format!("Failed to import {}: {e}", path.display()),
                    );
                    if !unavailable {
                        // containerd down: retry at the next re-list; a bad file: when it changes.
                        self.failed.insert(name, (size, mtime));
                    }
                }
            }
        }
    }

    /// Forgets the state of files that are gone (a file put back is imported again).
    fn forget_gone(&mut self) {
        let before = self.state.len();
        self.state.retain(|n, _| self.cfg.dir.join(n).is_file());
        if self.state.len() != before {
            save_state(&self.cfg.root_dir, &self.state);
        }
    }
}

/// Waits for the next pass: a re-list period, or a change once the directory settles;
/// `false` when the watcher stops.
fn wait_for_change(rx: &Receiver<Msg>) -> bool {
    match rx.recv_timeout(RELIST) {
        Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => return false,
        Ok(Msg::Changed) => {
            let start = Instant::now();
            loop {
                match rx.recv_timeout(SETTLE) {
                    Ok(Msg::Changed) if start.elapsed() < MAX_SETTLE => continue,
                    Ok(Msg::Changed) | Err(RecvTimeoutError::Timeout) => break,
                    Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => return false,
                }
            }
        }
        Err(RecvTimeoutError::Timeout) => {}
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_names() {
        for ok in ["a.tar", "b.tar.gz", "c.tgz", "d.tar.zst", "e.tzst"] {
            assert!(is_archive_name(ok), "{ok}");
        }
        for no in [
            ".a.tar",
            "a.txt",
            "tar",
            ".tar",
            "a.tar.gz.part",
            "pinned-images.json",
        ] {
            assert!(!is_archive_name(no), "{no}");
        }
    }

    #[test]
    fn pending_skips_known_and_sees_changes() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.tar"), b"x").unwrap();
        std::fs::write(d.path().join("notes.txt"), b"x").unwrap();
        let mut state = BTreeMap::new();
        let p = pending(d.path(), &state);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].0, "a.tar");
        state.insert(
            "a.tar".to_string(),
            FileStamp {
                size: p[0].1,
                mtime_ns: p[0].2,
                images: vec![],
            },
        );
        assert!(pending(d.path(), &state).is_empty());
        std::fs::write(d.path().join("a.tar"), b"xy").unwrap();
        assert_eq!(
            pending(d.path(), &state).len(),
            1,
            "a changed size is new work"
        );
        save_state(d.path(), &state);
        assert_eq!(load_state(d.path()), state);
    }
}
