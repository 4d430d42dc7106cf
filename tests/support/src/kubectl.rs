//! The real `kubectl` binary against the API-server test double (`apiserver.rs`).

use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::apiserver::FakeApiServer;

/// kubectl with its own kubeconfig and cache directory (and HOME) in a temp dir.
pub struct Kubectl {
    kubeconfig: PathBuf,
    cache: PathBuf,
    _dir: tempfile::TempDir,
}

impl Kubectl {
    /// kubectl for `api`. client-go sends the bearer token only over TLS
    /// (kubernetes/kubectl#744) and the double speaks plain HTTP, so the double serves
    /// anonymous requests as kube-apiserver with `--anonymous-auth=true` would.
    pub fn new(api: &FakeApiServer, token: &str) -> Kubectl {
        if !api.is_tls() {
            api.allow_anonymous(true);
        }
        let dir = tempfile::tempdir().expect("tmp");
        let kubeconfig = dir.path().join("kubeconfig");
        api.write_kubeconfig(&kubeconfig, token);
        Kubectl {
            kubeconfig,
            cache: dir.path().join("cache"),
            _dir: dir,
        }
    }

    /// kubectl for a `start_tls` double authenticating with a client certificate.
    pub fn with_cert(api: &FakeApiServer, cert: &crate::pki::CertFiles) -> Kubectl {
        let dir = tempfile::tempdir().expect("tmp");
        let kubeconfig = dir.path().join("kubeconfig");
        api.write_kubeconfig_cert(&kubeconfig, cert);
        Kubectl {
            kubeconfig,
            cache: dir.path().join("cache"),
            _dir: dir,
        }
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("kubectl");
        c.arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--cache-dir={}", self.cache.display()))
            .arg("--request-timeout=20s")
            .args(args)
            .env("HOME", self._dir.path())
            .stdin(Stdio::null());
        c
    }

    /// Runs kubectl to completion: (success, stdout, stderr).
    pub fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = self.cmd(args).output().expect("run kubectl");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args);
        assert!(ok, "kubectl {args:?} failed:\n{out}\n{err}");
        out
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self._dir.path().join(name);
        std::fs::write(&p, text).expect("write");
        p
    }
}
