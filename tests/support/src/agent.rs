//! A running `nanolet run` for black-box tests: own manifest, root and log dirs, free ports,
//! its output in `<tmp>/nanolet/nanolet.log`; stopped (SIGTERM, then SIGKILL) on drop.
//! (The helper of the integration tests that run the binary: e2e, api, probes, ...)

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::{Containerd, tail, wait_for};

pub const NODE: &str = "Node1";
pub const TIMEOUT: Duration = Duration::from_secs(30);

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A running `nanolet run` with its own dirs and ports.
pub struct Nanolet {
    pub child: Option<Child>,
    pub args: Vec<String>,
    pub dir: PathBuf,
    pub port: u16,
    pub log: PathBuf,
    pub starts: usize,
    /// The bearer token, read from `--read-only-token-file=PATH` in the extra args.
    pub token: Option<String>,
    pub env: Vec<(String, String)>,
    /// The executable: cargo's `nanolet`, or another one (the upgrade test: an installed package).
    pub bin: PathBuf,
    /// The network namespace it runs in: its containerd's (a node of `cluster::Cluster`).
    pub netns: Option<PathBuf>,
    /// Other namespaces to enter (nsenter options, e.g. `--target=PID --pid --mount`): the
    /// systemd-driver test runs nanolet beside a systemd in its own namespaces.
    pub nsenter: Vec<String>,
}

impl Nanolet {
    pub fn start(ctd: &Containerd, extra: &[String]) -> Nanolet {
        Self::start_with_env(ctd, extra, &[])
    }

    /// As [`Nanolet::start`], with extra environment variables for the process.
    pub fn start_with_env(ctd: &Containerd, extra: &[String], env: &[(&str, &str)]) -> Nanolet {
        Self::start_binary(ctd, super::nanolet_bin(), extra, env)
    }

    /// As [`Nanolet::start_with_env`], running the executable `bin`.
    pub fn start_binary(
        ctd: &Containerd,
        bin: &std::path::Path,
        extra: &[String],
        env: &[(&str, &str)],
    ) -> Nanolet {
        Self::start_entering(ctd, bin, extra, env, &[])
    }

    /// As [`Nanolet::start_binary`], in the namespaces `nsenter` (nsenter options) names.
    pub fn start_entering(
        ctd: &Containerd,
        bin: &std::path::Path,
        extra: &[String],
        env: &[(&str, &str)],
        nsenter: &[String],
    ) -> Nanolet {
        let dir = ctd.tmp().join("nanolet");
        fs::create_dir_all(dir.join("manifests")).expect("manifest dir");
        // Explicit modes: nanolet refuses world-writable manifests, whatever the umask.
        fs::set_permissions(dir.join("manifests"), fs::Permissions::from_mode(0o755))
            .expect("manifest dir mode");
        let port = free_port();
        let healthz_port = free_port();
        let mut args: Vec<String> = vec![
            "run".into(),
            format!("--pod-manifest-path={}", dir.join("manifests").display()),
            format!("--container-runtime-endpoint={}", ctd.endpoint()),
            format!("--hostname-override={NODE}"),
            format!("--root-dir={}", dir.join("root").display()),
            format!("--pod-logs-dir={}", dir.join("log/pods").display()),
            // The device plugin registration socket in the test's directory, not the
            // kubelet's shared /var/lib/kubelet/device-plugins (agents run side by side).
            format!("--device-plugin-dir={}", dir.join("device-plugins").display()),
            format!("--pod-resources-dir={}", dir.join("pod-resources").display()),
            format!("--read-only-port={port}"),
            format!("--healthz-port={healthz_port}"),
            // No kubelet server (HTTPS, default 10250) unless a test asks for one on a free
            // port: agents run side by side.
            "--port=0".into(),
            "--file-check-frequency=2s".into(),
            "--http-check-frequency=1s".into(),
            "--v=3".into(),
            // Eviction and image GC off unless a test turns them on (later flags win): a
            // nearly full disk on the test machine must not evict other tests' pods or delete
            // their images.
            "--eviction-hard=memory.available<0%".into(),
            "--image-gc-high-threshold=100".into(),
            "--image-gc-low-threshold=99".into(),
        ];
        args.extend(extra.iter().cloned());
        let token = extra
            .iter()
            .find_map(|a| a.strip_prefix("--read-only-token-file="))
            .and_then(|p| fs::read_to_string(p).ok())
            .map(|t| t.trim().to_string());
        let mut n = Nanolet {
            child: None,
            args,
            log: dir.join("nanolet.log"),
            dir,
            port,
            starts: 0,
            token,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            bin: bin.to_path_buf(),
            netns: ctd.netns().map(PathBuf::from),
            nsenter: nsenter.to_vec(),
        };
        n.spawn();
        n
    }

    pub fn spawn(&mut self) {
        self.starts += 1;
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let mut cmd = match &self.netns {
            Some(ns) => {
                // nsenter execs nanolet: the child's pid is nanolet's.
                let mut c = Command::new("nsenter");
                c.arg(format!("--net={}", ns.display()))
                    .args(&self.nsenter)
                    .arg("--")
                    .arg(&self.bin);
                c
            }
            // With --pid nsenter forks: the child is nsenter, and nanolet ends with the
            // namespace's init (the test stops that).
            None if !self.nsenter.is_empty() => {
                let mut c = Command::new("nsenter");
                c.args(&self.nsenter).arg("--").arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        let child = cmd
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start nanolet");
        self.child = Some(child);
        // Healthy, and it is our process answering: free_port() only found ports that were
        // free a moment ago, so another test may have taken one since.
        let dir = self.dir.display().to_string();
        let ok = wait_for(TIMEOUT, || {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                return Some(Err(status));
            }
            let ours = self.get("/healthz").is_some_and(|b| b == "ok")
                && self.get("/configz").is_some_and(|b| b.contains(&dir));
            ours.then_some(Ok(()))
        });
        match ok {
            Some(Ok(())) => {}
            Some(Err(status))
                if self.starts < 5 && self.log_tail().contains("Address already in use") =>
            {
                eprintln!("nanolet exited ({status}): a port was taken; retrying on new ports");
                self.port = free_port();
                let healthz_port = free_port();
                for a in &mut self.args {
                    if a.starts_with("--read-only-port=") {
                        *a = format!("--read-only-port={}", self.port);
                    } else if a.starts_with("--healthz-port=") {
                        *a = format!("--healthz-port={healthz_port}");
                    }
                }
                self.child = None;
                self.spawn();
            }
            Some(Err(status)) => panic!("nanolet exited ({status}):\n{}", self.log_tail()),
            None => panic!("nanolet healthz never became ok:\n{}", self.log_tail()),
        }
    }

    pub fn manifests(&self) -> PathBuf {
        self.dir.join("manifests")
    }

    pub fn pod_logs(&self) -> PathBuf {
        self.dir.join("log/pods")
    }

    pub fn write(&self, file: &str, body: &str) {
        // Write then rename, as an editor or config management tool would.
        let tmp = self.manifests().join(format!(".{file}.tmp"));
        fs::write(&tmp, body).expect("write manifest");
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o644)).expect("manifest mode");
        fs::rename(&tmp, self.manifests().join(file)).expect("rename manifest");
    }

    pub fn remove(&self, file: &str) {
        fs::remove_file(self.manifests().join(file)).expect("remove manifest");
    }

    pub fn get(&self, path: &str) -> Option<String> {
        if let Some(ns) = &self.netns {
            return crate::cluster::http_get_in_netns(ns, self.port, path, self.token.as_deref());
        }
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let mut req = ureq::get(&url);
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let mut resp = req
            .config()
            .http_status_as_error(false)
            .build()
            .call()
            .ok()?;
        resp.body_mut().read_to_string().ok()
    }

    /// The read-only server's base URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pods(&self) -> Vec<Value> {
        self.get("/pods")
            .and_then(|b| serde_json::from_str::<Value>(&b).ok())
            .and_then(|v| v["items"].as_array().cloned())
            .unwrap_or_default()
    }

    pub fn pod(&self, name: &str) -> Option<Value> {
        let full = format!("{name}-{}", NODE.to_lowercase());
        self.pods()
            .into_iter()
            .find(|p| p["metadata"]["name"] == full.as_str())
    }

    pub fn wait_pod(&self, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        wait_for(TIMEOUT * 2, || self.pod(name).filter(|p| f(p))).unwrap_or_else(|| {
            panic!(
                "pod {name}: timed out waiting for {what}; now: {:#}\nnanolet log:\n{}",
                self.pod(name).unwrap_or(Value::Null),
                self.log_tail()
            )
        })
    }

    pub fn wait_phase(&self, name: &str, phase: &str) -> Value {
        self.wait_pod(name, phase, |p| p["status"]["phase"] == phase)
    }

    pub fn log_tail(&self) -> String {
        tail(&fs::read_to_string(&self.log).unwrap_or_default(), 60)
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let done = wait_for(Duration::from_secs(10), || c.try_wait().ok().flatten());
            if done.is_none() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

impl Drop for Nanolet {
    fn drop(&mut self) {
        self.stop();
    }
}
