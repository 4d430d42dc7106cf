//! The kubelet's certificate file store (client-go `util/certificate` FileStore): a pair is
//! written as one PEM file `<prefix>-<timestamp>.pem` (certificate chain then key, 0600,
//! timestamp `2006-01-02-15-04-05` in UTC), and the symlink `<prefix>-current.pem` points at the
//! newest (a `<prefix>-updated.pem` symlink renamed over it, so readers never see it missing).
//! Without `-current.pem` the store falls back to `<prefix>.crt` / `<prefix>.key`, as upstream.
//! Prefixes: `kubelet-client` and `kubelet-server`. Writes go through a temp file, fsync and
//! rename, and the directory is fsynced.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::CertificateError;
use super::key::EcKey;
use super::x509::Certificate;

pub const CLIENT_PREFIX: &str = "kubelet-client";
pub const SERVER_PREFIX: &str = "kubelet-server";

/// A certificate chain and its key, both as loaded or issued.
#[derive(Debug)]
pub struct Pair {
    /// PEM of the chain, leaf first.
    pub cert_pem: Vec<u8>,
    pub key: EcKey,
    /// The parsed leaf.
    pub leaf: Certificate,
}

impl Pair {
    /// Checks that the chain's leaf carries `key`'s public key.
    pub fn new(cert_pem: Vec<u8>, key: EcKey) -> Result<Pair, CertificateError> {
        let leaf = Certificate::parse_pem_chain(&cert_pem)?
            .into_iter()
            .next()
            .ok_or_else(|| CertificateError::Certificate("empty chain".into()))?;
        if !leaf.matches_key(&key) {
            return Err(CertificateError::Certificate(
                "the certificate does not match the private key".into(),
            ));
        }
        Ok(Pair {
            cert_pem,
            key,
            leaf,
        })
    }

    /// Certificate then key, one PEM file (the store's format). The key is SECRET.
    pub fn to_pem_file(&self) -> Vec<u8> {
        let mut out = self.cert_pem.clone();
        if !out.ends_with(b"\n") {
            out.push(b'\n');
        }
        out.extend_from_slice(self.key.to_pem().as_bytes());
        out
    }

    /// Loads a pair from a certificate file and a key file (they may be the same file).
    pub fn load(cert: &Path, key: &Path) -> Result<Pair, CertificateError> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|e| CertificateError::Io {
                path: p.to_path_buf(),
                source: e,
            })
        };
        let cert_text = read(cert)?;
        let key_text = if key == cert {
            cert_text.clone()
        } else {
            read(key)?
        };
        let in_file = |path: &Path| {
            let path = path.to_path_buf();
            move |e: CertificateError| CertificateError::File {
                path,
                reason: e.to_string(),
            }
        };
        let key = EcKey::from_pem(&key_text).map_err(in_file(key))?;
        // Only the CERTIFICATE blocks: the key never travels with the chain.
        let certs = super::pem::decode_all(&cert_text).map_err(in_file(cert))?;
        let chain: String = certs
            .iter()
            .filter(|b| b.label == super::pem::CERTIFICATE)
            .map(|b| super::pem::encode(b.label, &b.der))
            .collect();
        Pair::new(chain.into_bytes(), key).map_err(in_file(cert))
    }
}

/// One prefix's files in the certificate directory.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
    prefix: &'static str,
}

impl FileStore {
    pub fn new(dir: &Path, prefix: &'static str) -> FileStore {
        FileStore {
            dir: dir.to_path_buf(),
            prefix,
        }
    }

    /// `<dir>/<prefix>-current.pem`.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.prefix))
    }

    /// The current pair: `-current.pem`, else `<prefix>.crt` + `<prefix>.key`; `Ok(None)` when
    /// neither exists.
    pub fn current(&self) -> Result<Option<Pair>, CertificateError> {
        let current = self.current_path();
        if current.exists() {
            return Pair::load(&current, &current).map(Some);
        }
        let crt = self.dir.join(format!("{}.crt", self.prefix));
        let key = self.dir.join(format!("{}.key", self.prefix));
        if crt.exists() && key.exists() {
            return Pair::load(&crt, &key).map(Some);
        }
        Ok(None)
    }

    /// Writes the pair as `<prefix>-<timestamp>.pem` (0600) and points `-current.pem` at it.
    /// Returns the new file's path.
    pub fn update(&self, pair: &Pair) -> Result<PathBuf, CertificateError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| CertificateError::Io { path, source }
        };
        create_private_dir(&self.dir)?;
        let stamp = crate::timeutil::rfc3339(SystemTime::now())
            .trim_end_matches('Z')
            .replace(['T', ':'], "-");
        let file = self.dir.join(format!("{}-{stamp}.pem", self.prefix));
        write_private(&file, &pair.to_pem_file())?;
        let updated = self.dir.join(format!("{}-updated.pem", self.prefix));
        match std::fs::remove_file(&updated) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&updated)(e)),
            _ => {}
        }
        std::os::unix::fs::symlink(&file, &updated).map_err(io(&updated))?;
        let current = self.current_path();
        std::fs::rename(&updated, &current).map_err(io(&current))?;
        sync_dir(&self.dir)?;
        Ok(file)
    }
}

/// Creates `dir` (0700 when new) with its parents.
pub fn create_private_dir(dir: &Path) -> Result<(), CertificateError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| CertificateError::Io {
            path: dir.to_path_buf(),
            source,
        })
}

fn sync_dir(dir: &Path) -> Result<(), CertificateError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| CertificateError::Io {
            path: dir.to_path_buf(),
            source,
        })
}

/// `body` to `path` atomically: a 0600 temp file in the same directory, fsync, rename, fsync
/// of the directory. A failed write leaves the old file and no temp file.
pub fn write_private(path: &Path, body: &[u8]) -> Result<(), CertificateError> {
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
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(body)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(source) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(CertificateError::Io {
            path: path.to_path_buf(),
            source,
        });
    }
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => sync_dir(dir),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificate::testutil::{openssl, write};
    use std::os::unix::fs::PermissionsExt;

    /// A pair made by openssl (`req -x509`), loaded through Pair::load.
    pub(crate) fn openssl_pair(dir: &Path, cn: &str) -> Pair {
        let (key, crt) = crate::certificate::testutil::openssl_self_signed(
            dir,
            cn,
            &format!("/CN={cn}"),
            1,
            &[],
        );
        Pair::load(&crt, &key).unwrap()
    }

    #[test]
    fn update_writes_a_0600_timestamped_file_and_moves_the_current_symlink() {
        let d = tempfile::tempdir().unwrap();
        let pki = d.path().join("pki");
        let store = FileStore::new(&pki, CLIENT_PREFIX);
        assert!(store.current().unwrap().is_none());
        let first = openssl_pair(d.path(), "one");
        let f1 = store.update(&first).unwrap();
        let name = f1.file_name().unwrap().to_string_lossy().into_owned();
        // kubelet-client-2006-01-02-15-04-05.pem
        assert!(
            name.starts_with("kubelet-client-") && name.ends_with(".pem"),
            "{name}"
        );
        assert_eq!(
            name.len(),
            "kubelet-client-2006-01-02-15-04-05.pem".len(),
            "{name}"
        );
        let mode = std::fs::metadata(&f1).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(&pki).unwrap().permissions().mode() & 0o777;
        assert_eq!(dir_mode, 0o700);
        let link = pki.join("kubelet-client-current.pem");
        assert_eq!(std::fs::read_link(&link).unwrap(), f1);
        assert_eq!(store.current().unwrap().unwrap().leaf.common_name, "one");
        // openssl reads both blocks of the one file.
        let cur = link.to_str().unwrap();
        assert!(openssl(&["x509", "-in", cur, "-noout", "-subject"]).contains("CN = one"));
        openssl(&["pkey", "-in", cur, "-noout"]);

        std::thread::sleep(std::time::Duration::from_millis(1100)); // a new timestamp (seconds)
        let second = openssl_pair(d.path(), "two");
        let f2 = store.update(&second).unwrap();
        assert_ne!(f1, f2);
        assert_eq!(std::fs::read_link(&link).unwrap(), f2);
        assert_eq!(store.current().unwrap().unwrap().leaf.common_name, "two");
        assert!(!pki.join("kubelet-client-updated.pem").exists());
        let leftovers: Vec<_> = std::fs::read_dir(&pki)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp."))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn falls_back_to_crt_and_key_and_rejects_a_mismatched_pair() {
        let d = tempfile::tempdir().unwrap();
        let a = openssl_pair(d.path(), "a");
        let b = openssl_pair(d.path(), "b");
        write(
            d.path(),
            "kubelet-server.crt",
            &String::from_utf8_lossy(&a.cert_pem),
        );
        write(d.path(), "kubelet-server.key", &a.key.to_pem());
        let store = FileStore::new(d.path(), SERVER_PREFIX);
        assert_eq!(store.current().unwrap().unwrap().leaf.common_name, "a");
        let e = Pair::new(a.cert_pem.clone(), b.key)
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not match"), "{e}");
        // Errors name the file, never its content.
        write(
            d.path(),
            "kubelet-server.key",
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        );
        let e = store.current().unwrap_err().to_string();
        assert!(
            e.contains("kubelet-server.key") && !e.contains("AAAA"),
            "{e}"
        );
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temp() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        write_private(&p, b"old").unwrap();
        // A directory where the temp file would go makes the write fail.
        let tmp = d.path().join(format!(".f.tmp.{}", std::process::id()));
        std::fs::create_dir(&tmp).unwrap();
        std::fs::write(tmp.join("x"), "").unwrap();
        assert!(write_private(&p, b"new").is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        std::fs::remove_dir_all(&tmp).unwrap();
        write_private(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
