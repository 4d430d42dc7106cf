//! Device plugins for the device manager tests.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The extended resource `test-device-plugin` serves in the tests.
pub const SERIAL: &str = "nanolet.test/serial";

/// Makes `count` character devices 1:3 (the kernel's null device: writes succeed when the
/// device cgroup lets them through) named ttyNANO0.. in `dir`, and returns the plugin's
/// DEVICES value for them (`ttyNANO0=<dir>/ttyNANO0,...`).
pub fn make_device_nodes(dir: &Path, count: usize) -> String {
    use nix::sys::stat::{Mode, SFlag, makedev, mknod};
    fs::create_dir_all(dir).expect("mkdir device nodes");
    let mut devices = Vec::new();
    for i in 0..count {
        let node = dir.join(format!("ttyNANO{i}"));
        mknod(
            &node,
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            makedev(1, 3),
        )
        .expect("mknod");
        devices.push(format!("ttyNANO{i}={}", node.display()));
    }
    devices.join(",")
}

/// `test-device-plugin` (tests/peers/device-plugin: Kubernetes' own device plugin server, the
/// stub of pkg/kubelet/cm/devicemanager/plugin/v1beta1 at the pin, with device nodes and
/// health changes), stopped by its PID when dropped.
pub struct NodePlugin {
    child: Child,
    log: PathBuf,
}

impl NodePlugin {
    pub fn start(kubelet_sock: &Path, devices: &str, health: &Path, log: &Path) -> NodePlugin {
        let bin = crate::runtime::upstream_path("test-device-plugin").join("test-device-plugin");
        let out = fs::File::create(log).expect("plugin log");
        let child = Command::new(bin)
            .env("KUBELET_SOCKET", kubelet_sock)
            .env("RESOURCE_NAME", SERIAL)
            .env("DEVICES", devices)
            .env("HEALTH_FILE", health)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("starting test-device-plugin");
        NodePlugin {
            child,
            log: log.to_path_buf(),
        }
    }

    /// Sends the devices again with those listed in the health file unhealthy.
    pub fn health_changed(&self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGUSR1,
        )
        .expect("signalling the plugin");
    }

    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for NodePlugin {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        if crate::wait_for(Duration::from_secs(10), || {
            self.child.try_wait().ok().flatten()
        })
        .is_none()
        {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
