//! Which containerd the harness runs: `NANOLET_TEST_RUNTIME` picks one of
//! - `1.6` (the default): Debian 12's containerd, runc and shim from the system's PATH, with a
//!   version 2 configuration;
//! - `1.7`: containerd 1.7 built by `scripts/upstream` (`containerd-1.7`, with the `runc` pin),
//!   version 2 configuration;
//! - `2`: containerd 2.x built by `scripts/upstream` (`containerd-2`, `runc`), version 3
//!   configuration (plugins `io.containerd.cri.v1.images` / `io.containerd.cri.v1.runtime`,
//!   the sandbox image under `pinned_images`, registry hosts in `certs.d`).
//!
//! Everything else about the private containerd (temp dir, CNI bridge, tear-down) is the same
//! for the three ([docs/testing.md](../../../docs/testing.md#runtimes)).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::PAUSE_IMAGE;

/// The runtime this test process runs against.
#[derive(Debug)]
pub struct TestRuntime {
    /// `1.6`, `1.7` or `2`.
    pub name: &'static str,
    /// The containerd configuration format (`version = N`).
    pub config_version: u8,
    /// The directory of containerd, ctr and containerd-shim-runc-v2 (None: the system's PATH).
    pub bin_dir: Option<PathBuf>,
    /// The runc the CRI plugin runs (None: the `runc` on containerd's PATH).
    pub runc: Option<PathBuf>,
}

impl TestRuntime {
    /// The containerd executable.
    pub fn containerd(&self) -> PathBuf {
        self.tool("containerd")
    }

    /// containerd's `ctr` of the same version.
    pub fn ctr(&self) -> PathBuf {
        self.tool("ctr")
    }

    fn tool(&self, name: &str) -> PathBuf {
        match &self.bin_dir {
            Some(d) => d.join(name),
            None => PathBuf::from(name),
        }
    }

    /// PATH for containerd: its own directory first, so it starts the shim of its version.
    pub fn path_env(&self) -> std::ffi::OsString {
        let system =
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
        match &self.bin_dir {
            Some(d) => {
                let mut dirs = vec![d.clone()];
                dirs.extend(std::env::split_paths(&system));
                std::env::join_paths(dirs).unwrap_or(system)
            }
            None => system,
        }
    }
}

/// `scripts/upstream path NAME`: builds the peer once (cached outside the work tree) and
/// returns its bin directory.
pub fn upstream_path(name: &str) -> PathBuf {
    let script = crate::repo_root().join("scripts/upstream");
    let out = Command::new("bash")
        .arg(&script)
        .args(["path", name])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = stdout.lines().last().unwrap_or_default().trim();
    assert!(
        out.status.success() && !path.is_empty(),
        "scripts/upstream path {name} failed ({}): it prints why above",
        out.status
    );
    PathBuf::from(path)
}

/// The runtime chosen by `NANOLET_TEST_RUNTIME` (read once per process). Panics on an
/// unknown value, naming the valid ones.
pub fn test_runtime() -> &'static TestRuntime {
    static RT: OnceLock<TestRuntime> = OnceLock::new();
    RT.get_or_init(|| {
        let wanted = std::env::var("NANOLET_TEST_RUNTIME").unwrap_or_default();
        match wanted.as_str() {
            "" | "1.6" | "debian" => TestRuntime {
                name: "1.6",
                config_version: 2,
                bin_dir: None,
                runc: None,
            },
            "1.7" => TestRuntime {
                name: "1.7",
                config_version: 2,
                bin_dir: Some(upstream_path("containerd-1.7")),
                runc: Some(upstream_path("runc").join("runc")),
            },
            "2" => TestRuntime {
                name: "2",
                config_version: 3,
                bin_dir: Some(upstream_path("containerd-2")),
                runc: Some(upstream_path("runc").join("runc")),
            },
            other => panic!(
                "NANOLET_TEST_RUNTIME={other:?}: expected 1.6 (Debian's containerd, the default), 1.7 or 2"
            ),
        }
    })
}

/// The second runtime handler every test containerd has (runc with its own state root,
/// `<tmp>/runc-alt`): what a RuntimeClass names in the runtime class tests.
pub const ALT_HANDLER: &str = "nanolet-alt";

/// A version 2 configuration (containerd 1.6 and 1.7): the CRI plugin is one plugin,
/// `io.containerd.grpc.v1.cri`.
pub(crate) fn containerd_config_v2(t: &str, rt: &TestRuntime, registries: &[String]) -> String {
    let mut c = format!(
        r#"version = 2
root = "{t}/root"
state = "{t}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{t}/containerd.sock"
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{t}/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "{PAUSE_IMAGE}"
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
"#
    );
    // runc is named explicitly: a config naming any runtime replaces containerd's default
    // runtimes map (1.6 then has no `runc`). A second handler (RuntimeClass tests): runc with
    // its own state root, so a sandbox created through it is seen under
    // `<tmp>/runc-alt/k8s.io/<id>`.
    let binary = rt
        .runc
        .as_ref()
        .map(|r| format!("          BinaryName = \"{}\"\n", r.display()))
        .unwrap_or_default();
    c.push_str(&format!(
        r#"      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
{binary}      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{ALT_HANDLER}]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{ALT_HANDLER}.options]
          Root = "{t}/runc-alt"
{binary}"#
    ));
    c.push_str(&format!(
        r#"    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "{t}/cni"
"#
    ));
    for h in registries {
        c.push_str(&format!(
            "    [plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.\"{h}\"]\n      endpoint = [\"http://{h}\"]\n"
        ));
    }
    c
}

/// A version 3 configuration (containerd 2.x): images and runtime are separate CRI plugins,
/// the sandbox image is a pinned image, registries are configured by hosts.toml files.
pub(crate) fn containerd_config_v3(
    t: &str,
    rt: &TestRuntime,
    registries: &[String],
    tmp: &Path,
) -> String {
    let runc = rt
        .runc
        .as_ref()
        .map(|r| format!("          BinaryName = '{}'\n", r.display()))
        .unwrap_or_default();
    for h in registries {
        // certs.d/<host>/hosts.toml: plain http for this host (containerd's docs/hosts.md).
        let dir = tmp.join("certs.d").join(h);
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(
            dir.join("hosts.toml"),
            format!(
                "server = \"http://{h}\"\n[host.\"http://{h}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
            ),
        );
    }
    format!(
        r#"version = 3
root = '{t}/root'
state = '{t}/state'
disabled_plugins = ['io.containerd.snapshotter.v1.btrfs', 'io.containerd.snapshotter.v1.zfs', 'io.containerd.snapshotter.v1.devmapper']
[grpc]
  address = '{t}/containerd.sock'
[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = '{t}/opt'
  [plugins.'io.containerd.nri.v1.nri']
    # NRI is on by default in 2.x with one host-wide socket (/var/run/nri/nri.sock): two
    # test containerds starting together would race for it ("bind: address already in use").
    socket_path = '{t}/nri.sock'
    plugin_path = '{t}/nri/plugins'
    plugin_config_path = '{t}/nri/conf.d'
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{PAUSE_IMAGE}'
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = '{t}/certs.d'
  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    cdi_spec_dirs = ['{t}/cdi']
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
{runc}      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.{ALT_HANDLER}]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.{ALT_HANDLER}.options]
          Root = '{t}/runc-alt'
{runc}    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['/usr/lib/cni']
      conf_dir = '{t}/cni'
"#
    )
}

/// Removes the pod cgroups nanolet made for these pods (by UID, pushed as each pod is seen)
/// once containerd is gone: declared before the `Containerd`, it is dropped after it, also when
/// the test fails. Pods of the second handler need it: their containers are stopped with
/// containerd, after nanolet, which then cannot remove the pod cgroups itself.
#[derive(Default)]
pub struct PodCgroups(pub std::cell::RefCell<Vec<String>>);

impl Drop for PodCgroups {
    fn drop(&mut self) {
        let root = std::path::Path::new("/sys/fs/cgroup");
        let Ok(hiers) = std::fs::read_dir(root) else {
            return;
        };
        // cgroup v1: one hierarchy per controller below the root; v2: the root itself.
        let mut hiers: Vec<_> = hiers.flatten().map(|e| e.path()).collect();
        hiers.push(root.to_path_buf());
        for uid in self.0.borrow().iter() {
            for h in &hiers {
                for qos in ["", "burstable/", "besteffort/"] {
                    let _ = std::fs::remove_dir(h.join(format!("kubepods/{qos}pod{uid}")));
                }
            }
        }
    }
}
