//! A real Kubernetes control plane for tests: `scripts/cluster up` (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kubectl of the pinned Kubernetes, built by
//! `scripts/upstream`, set up as kubeadm sets one up) in its own network namespace, and a node
//! namespace for the containerd and nanolet that join it (`Containerd::start_in_netns`; a
//! `Nanolet` started on that containerd runs in the same namespace). Dropping a `Cluster` runs
//! `scripts/cluster down`, which stops every process it started by PID and deletes both
//! namespaces.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::{repo_root, tail, wait_for};

/// A control plane from `scripts/cluster`. See the module docs.
pub struct Cluster {
    dir: PathBuf,
    env: BTreeMap<String, String>,
    /// A control plane loads the machine like a containerd: held while it runs, so tests that
    /// must run alone (they measure the node's memory and disk) do not run beside it.
    _gate: super::gate::Shared,
}

impl Cluster {
    /// Starts a control plane (its controller manager's node-monitor grace period 25 s).
    pub fn up() -> Cluster {
        Self::up_with(&[])
    }

    /// As [`Cluster::up`] with `scripts/cluster`'s settings (`NODE_MONITOR_GRACE_PERIOD`,
    /// `CLUSTER_SIGNING_DURATION`).
    pub fn up_with(settings: &[(&str, &str)]) -> Cluster {
        let gate = super::gate::shared();
        let dir = std::env::temp_dir().join(format!(
            "nanolet-cluster-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let script = repo_root().join("scripts/cluster");
        let out = Command::new(&script)
            .arg("up")
            .arg(&dir)
            .envs(settings.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        let mut cluster = Cluster {
            dir: dir.clone(),
            env: BTreeMap::new(),
            _gate: gate,
        };
        if !out.status.success() {
            panic!(
                "scripts/cluster up failed ({}):\n{}",
                out.status,
                tail(&String::from_utf8_lossy(&out.stderr), 80)
            );
        }
        let env = std::fs::read_to_string(dir.join("env"))
            .unwrap_or_else(|e| panic!("reading {}/env: {e}", dir.display()));
        cluster.env = env
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        cluster
    }

    /// A value from `DIR/env` (scripts/cluster --help lists them).
    pub fn var(&self, key: &str) -> &str {
        self.env
            .get(key)
            .unwrap_or_else(|| panic!("{key} missing from {}/env", self.dir.display()))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `/run/netns/NAME` of the node's network namespace.
    pub fn node_netns(&self) -> PathBuf {
        PathBuf::from(self.var("NODE_NETNS_PATH"))
    }

    /// The node's address in its namespace (the API server reaches the kubelet port there).
    pub fn node_ip(&self) -> &str {
        self.var("NODE_IP")
    }

    pub fn bootstrap_kubeconfig(&self) -> PathBuf {
        PathBuf::from(self.var("BOOTSTRAP_KUBECONFIG"))
    }

    pub fn ca_file(&self) -> PathBuf {
        PathBuf::from(self.var("CA_FILE"))
    }

    /// The pinned Kubernetes' kubectl with the admin kubeconfig (system:masters).
    pub fn kubectl_cmd(&self) -> Command {
        let mut c = Command::new(self.var("KUBECTL"));
        c.env("KUBECONFIG", self.var("KUBECONFIG"))
            .env("HOME", &self.dir)
            .arg("--request-timeout=20s")
            .stdin(Stdio::null());
        c
    }

    /// Runs kubectl: Ok(stdout) or Err(stderr).
    pub fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        let out = self
            .kubectl_cmd()
            .args(args)
            .output()
            .map_err(|e| format!("kubectl: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// `kubectl get ARGS -o json`, parsed; None when kubectl fails (e.g. not found).
    pub fn get_json(&self, args: &[&str]) -> Option<Value> {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        self.kubectl(&a)
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
    }

    /// `kubectl apply -f -` with `yaml` (or JSON).
    pub fn apply(&self, yaml: &str) -> Result<String, String> {
        let mut child = self
            .kubectl_cmd()
            .args(["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("kubectl: {e}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(yaml.as_bytes())
                .map_err(|e| format!("kubectl stdin: {e}"))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("kubectl: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// The condition `type` of a Node or Pod object: its status ("True", "False", "Unknown").
    pub fn condition(obj: &Value, kind: &str) -> Option<String> {
        obj["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == kind)
            .and_then(|c| c["status"].as_str())
            .map(String::from)
    }

    /// Waits until `f` holds for the object `kubectl get ARGS` returns.
    pub fn wait_object(
        &self,
        args: &[&str],
        what: &str,
        timeout: Duration,
        f: impl Fn(&Value) -> bool,
    ) -> Value {
        wait_for(timeout, || self.get_json(args).filter(|v| f(v))).unwrap_or_else(|| {
            panic!(
                "timed out after {timeout:?} waiting for {what} ({}); now: {:#}",
                args.join(" "),
                self.get_json(args).unwrap_or(Value::Null)
            )
        })
    }

    /// Cuts (`false`) or restores (`true`) the node's only link to the control plane: a
    /// network partition as a pulled cable makes it.
    pub fn set_node_link(&self, up: bool) {
        let st = Command::new("ip")
            .args(["-n", self.var("NODE_NETNS"), "link", "set", "eth0"])
            .arg(if up { "up" } else { "down" })
            .status()
            .expect("ip link set");
        assert!(st.success(), "ip link set eth0 failed");
        if up {
            // A link set down loses its routes; the node's default route goes with it.
            let cp = self
                .var("APISERVER")
                .trim_start_matches("https://")
                .split(':')
                .next()
                .unwrap_or_default()
                .to_string();
            let _ = Command::new("ip")
                .args([
                    "-n",
                    self.var("NODE_NETNS"),
                    "route",
                    "replace",
                    "default",
                    "via",
                ])
                .arg(&cp)
                .status();
        }
    }

    /// The tail of a control-plane component's log (`kube-apiserver`, `etcd`, ...).
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        tail(
            &std::fs::read_to_string(self.dir.join(format!("logs/{component}.log")))
                .unwrap_or_default(),
            lines,
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("scripts/cluster"))
            .arg("down")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Connects to `127.0.0.1:port` inside the network namespace `netns` (a thread enters it with
/// setns and connects; the socket stays in that namespace whichever thread uses it).
pub fn connect_in_netns(netns: &Path, port: u16) -> std::io::Result<TcpStream> {
    let ns = netns.to_path_buf();
    std::thread::spawn(move || -> std::io::Result<TcpStream> {
        let f = std::fs::File::open(&ns)?;
        nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)?;
        TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_secs(5),
        )
    })
    .join()
    .map_err(|_| std::io::Error::other("netns connect thread panicked"))?
}

/// A plain HTTP/1.0 GET of `path` on `127.0.0.1:port` in `netns`: the body of any answer.
pub fn http_get_in_netns(
    netns: &Path,
    port: u16,
    path: &str,
    token: Option<&str>,
) -> Option<String> {
    let mut s = connect_in_netns(netns, port).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{auth}\r\n").ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    text.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
}
