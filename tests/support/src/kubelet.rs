//! The real kubelet (`scripts/upstream path kubelet`), standalone (static pods from a
//! directory, no API server), against a harness containerd: the oracle of the differential
//! (examples/differential.rs) and the peer column of the benchmark (benches/footprint.rs).
//!
//! Started as nanolet's tests start nanolet: its own directory (manifests, root, pod logs),
//! loopback ports, eviction and image GC off. Two things keep it from touching the machine:
//! - its own cgroup root (`--cgroup-root`, `/nanolet-kubelet-<pid>`), so its orphaned pod
//!   cgroup clean-up never sees the pods other agents run under `/kubepods`; removed on drop;
//! - the kernel settings it would write (`protectKernelDefaults: false`: vm.overcommit_memory,
//!   vm.panic_on_oom, kernel.panic, kernel.panic_on_oops, kernel.keys.root_max*) are
//!   bind-mounted copies in a mount namespace: with [`Tunables::OwnNamespace`] one of its own
//!   (mounts it makes there, tmpfs-backed volumes, stay there: fine for pods without such
//!   volumes, the benchmark's); with [`Tunables::Inherited`] the caller's, which the caller
//!   set up with its containerd inside (scripts/differential), so volumes are shared.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{Containerd, wait_for};

/// The kernel settings the kubelet sets unless protectKernelDefaults (pkg/kubelet/cm
/// setupKernelTunables), as paths below /proc/sys.
const KERNEL_TUNABLES: &[&str] = &[
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

/// Where the kubelet's kernel-setting writes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tunables {
    /// A mount namespace of the kubelet's own with copies over the settings.
    OwnNamespace,
    /// The caller's mount namespace, already private with copies (scripts/differential).
    Inherited,
}

/// The kubelet's cgroup root (`--cgroup-root`) for this process.
pub fn cgroup_root() -> String {
    format!("/nanolet-kubelet-{}", std::process::id())
}

/// The kubelet binary: `$KUBELET`, else the pinned one (built on first use).
pub fn binary() -> PathBuf {
    std::env::var_os("KUBELET")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::runtime::upstream_path("kubelet").join("kubelet"))
}

fn cgroup_v2() -> bool {
    Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

/// The cgroup hierarchies: v2's one, or each mounted v1 hierarchy.
pub fn hierarchies() -> Vec<PathBuf> {
    if cgroup_v2() {
        return vec![PathBuf::from("/sys/fs/cgroup")];
    }
    fs::read_dir("/sys/fs/cgroup")
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                // cpu,cpuacct's links (cpu, cpuacct) name the same hierarchy: once is enough.
                .filter(|p| p.is_dir() && !p.is_symlink())
                .collect()
        })
        .unwrap_or_default()
}

/// Removes a cgroup subtree, deepest first (only empty cgroups can go).
pub fn remove_cgroup_tree(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_cgroup_tree(&e.path());
        }
    }
    let _ = fs::remove_dir(dir);
}

/// A running kubelet; stopped (SIGTERM, then SIGKILL) by its PID and its cgroup root removed
/// when dropped.
pub struct Kubelet {
    child: Option<Child>,
    /// The read-only port (`/pods`, `/metrics`, `/healthz`) on 127.0.0.1.
    pub port: u16,
    pub log: PathBuf,
    pub manifests: PathBuf,
    pub cgroup_root: String,
}

impl Kubelet {
    /// Starts the kubelet in `dir` (manifests in `dir/manifests`, made here) as node `node`,
    /// and waits until its `/healthz` answers.
    pub fn start(
        ctd: &Containerd,
        bin: &Path,
        dir: &Path,
        node: &str,
        tunables: Tunables,
    ) -> Kubelet {
        let cgroup_root = cgroup_root();
        // The kubelet wants its cgroup root to exist in every hierarchy.
        for h in hierarchies() {
            let _ = fs::create_dir_all(h.join(cgroup_root.trim_start_matches('/')));
        }
        let manifests = dir.join("manifests");
        fs::create_dir_all(&manifests).expect("kubelet manifest dir");
        let port = crate::agent::free_port();
        let config = serde_json::json!({
            "kind": "KubeletConfiguration",
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "staticPodPath": manifests,
            "podLogsDir": dir.join("log/pods"),
            "fileCheckFrequency": "2s",
            "address": "127.0.0.1",
            "port": crate::agent::free_port(),
            "readOnlyPort": port,
            "healthzPort": crate::agent::free_port(),
            "healthzBindAddress": "127.0.0.1",
            "authentication": {"anonymous": {"enabled": true}, "webhook": {"enabled": false}},
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": cgroup_root,
            "failSwapOn": false,
            "failCgroupV1": false,
            "containerRuntimeEndpoint": ctd.endpoint(),
            // As the harness runs nanolet: eviction and image GC off, so a nearly full disk on
            // the machine neither evicts pods nor deletes the test images.
            "evictionHard": {"memory.available": "0%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
        });
        let cfg = dir.join("kubelet-config.json");
        fs::write(&cfg, config.to_string()).expect("kubelet config");
        let copies = dir.join("kernel-tunables");
        let log = dir.join("kubelet.log");
        let out = fs::File::create(&log).expect("kubelet log");
        // unshare execs sh, sh execs the kubelet: the child's PID is the kubelet's.
        let mut cmd = match tunables {
            Tunables::OwnNamespace => {
                fs::create_dir_all(&copies).expect("tunables dir");
                let mut c = Command::new("unshare");
                c.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
                    .arg(
                        "d=$1; shift; for k in $TUNABLES; do f=$d/$(echo $k | tr / _); \
                         cat /proc/sys/$k >$f && mount --bind $f /proc/sys/$k || exit 1; done; \
                         exec \"$@\"",
                    )
                    .arg("sh")
                    .arg(&copies)
                    .arg(bin);
                c
            }
            Tunables::Inherited => Command::new(bin),
        };
        let child = cmd
            .arg(format!("--config={}", cfg.display()))
            .arg(format!("--root-dir={}", dir.join("root").display()))
            .arg(format!("--hostname-override={node}"))
            .arg("--v=2")
            .env("TUNABLES", KERNEL_TUNABLES.join(" "))
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let mut k = Kubelet {
            child: Some(child),
            port,
            log,
            manifests,
            cgroup_root,
        };
        let url = format!("http://127.0.0.1:{port}/healthz");
        let up = wait_for(Duration::from_secs(60), || {
            if k.child
                .as_mut()
                .is_some_and(|c| c.try_wait().ok().flatten().is_some())
            {
                return Some(false);
            }
            ureq::get(&url)
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .filter(|b| b == "ok")
                .map(|_| true)
        });
        if up != Some(true) {
            eprintln!(
                "kubelet: /healthz never answered ok; its log:\n{}",
                k.log_tail(40)
            );
        }
        k
    }

    /// The kubelet's PID (0 once stopped).
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    pub fn log_tail(&self, lines: usize) -> String {
        crate::tail(&fs::read_to_string(&self.log).unwrap_or_default(), lines)
    }

    /// A GET on the read-only port; None on any error.
    pub fn get(&self, path: &str) -> Option<String> {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        ureq::get(&url)
            .config()
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .call()
            .ok()?
            .body_mut()
            .read_to_string()
            .ok()
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(c.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            if wait_for(Duration::from_secs(10), || c.try_wait().ok().flatten()).is_none() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    /// Removes the kubelet's cgroup root (after its pods are gone: only empty cgroups go).
    pub fn remove_cgroups(&self) {
        for h in hierarchies() {
            remove_cgroup_tree(&h.join(self.cgroup_root.trim_start_matches('/')));
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.stop();
        self.remove_cgroups();
    }
}

/// Stops and removes every container and sandbox of the runtime: what an agent (the kubelet
/// or nanolet) left after it was stopped, before the other one starts on the same containerd
/// (the kubelet kills pods it does not know).
pub fn remove_all_pods(rt: &nanolet::cri::client::CriRuntime) {
    use nanolet::cri::Runtime;
    if let Ok(cs) = rt.list_containers() {
        for c in cs {
            let _ = rt.stop_container(&c.id, Duration::ZERO);
            let _ = rt.remove_container(&c.id);
        }
    }
    if let Ok(ss) = rt.list_pod_sandboxes() {
        for s in ss {
            let _ = rt.stop_pod_sandbox(&s.id);
            let _ = rt.remove_pod_sandbox(&s.id);
        }
    }
}
