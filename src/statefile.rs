//! nanolet's own state files (the images-directory import record, the image pin record):
//! written atomically and durably, and never able to stop the agent when damaged.
//!
//! - [`write_atomic`]: temp file in the same directory, fsync, rename over the target, fsync the
//!   directory, so after a power loss the file is the old or the new content, never a mix.
//! - [`read_or_quarantine`]: a file that cannot be parsed (truncated, corrupted) is renamed to
//!   `<name>.corrupt-<unix seconds>` with a warning naming both paths, and treated as absent.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `body` to `path` through a temp file, fsync and rename, then fsyncs the directory.
pub fn write_atomic(path: &Path, body: &[u8]) -> std::io::Result<()> {
    write_atomic_mode(path, body, 0o666)
}

/// As [`write_atomic`], the file readable and writable by its owner only (0600) from its
/// creation: the temp file is created with that mode, so there is no moment when the content
/// is readable by others (for state holding Secrets and tokens).
pub fn write_atomic_private(path: &Path, body: &[u8]) -> std::io::Result<()> {
    write_atomic_mode(path, body, 0o600)
}

/// The temp file is created with `mode` (before the umask); an existing temp of the same name
/// (a crash) is replaced.
fn write_atomic_mode(path: &Path, body: &[u8], mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(body)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Where a damaged state file was moved.
pub fn quarantine(path: &Path, why: &str) -> Option<PathBuf> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let aside = PathBuf::from(format!("{}.corrupt-{secs}", path.display()));
    match std::fs::rename(path, &aside) {
        Ok(()) => {
            tracing::warn!(path = %path.display(), moved_to = %aside.display(), reason = why,
                "state file is damaged; moved aside and starting without it");
            Some(aside)
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), reason = why, error = %e,
                "state file is damaged and could not be moved aside; ignoring it");
            None
        }
    }
}

/// Reads and parses `path`. `Ok(None)` when it does not exist or was damaged (then it is
/// quarantined); `Err` only for I/O errors other than "not found".
pub fn read_or_quarantine<T: serde::de::DeserializeOwned>(
    path: &Path,
) -> std::io::Result<Option<T>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match serde_json::from_slice(&bytes) {
        Ok(v) => Ok(Some(v)),
        Err(e) => {
            quarantine(path, &format!("invalid JSON: {e}"));
            Ok(None)
        }
    }
}

/// Whether a quarantined copy of `path` exists (`<name>.corrupt-*` beside it).
pub fn has_quarantined(path: &Path) -> bool {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return false;
    };
    let prefix = format!("{}.corrupt-", name.to_string_lossy());
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.json");
        write_atomic(&p, b"{\"a\":1}").unwrap();
        write_atomic(&p, b"{\"a\":2}").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "{\"a\":2}");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    /// A private state file is 0600 from its creation, also when it replaces a wider one.
    #[test]
    fn private_files_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("secret.json");
        write_atomic(&p, b"{}").unwrap();
        write_atomic_private(&p, b"{\"a\":1}").unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    /// A truncated file never stops anything: it is moved aside and treated as absent.
    #[test]
    fn damaged_files_are_quarantined() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.json");
        assert!(
            read_or_quarantine::<serde_json::Value>(&p)
                .unwrap()
                .is_none()
        );
        std::fs::write(&p, b"{\"files\": {\"a\": ").unwrap();
        assert!(!has_quarantined(&p));
        assert!(
            read_or_quarantine::<serde_json::Value>(&p)
                .unwrap()
                .is_none()
        );
        assert!(!p.exists());
        assert!(has_quarantined(&p));
        write_atomic(&p, b"{}").unwrap();
        assert!(
            read_or_quarantine::<serde_json::Value>(&p)
                .unwrap()
                .is_some()
        );
    }
}
