//! A private D-Bus system bus for a test (`dbus-daemon` with its own socket in the test's temp
//! dir, every name and message allowed) and a stand-in logind on it
//! (`tests/support/logind_standin.py`, python3-dbus). Both are killed by PID on drop.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::wait_for;

const START_TIMEOUT: Duration = Duration::from_secs(20);

fn stop(child: &mut Child) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    if wait_for(Duration::from_secs(5), || child.try_wait().ok().flatten()).is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A `dbus-daemon` listening on `<dir>/bus.sock`.
pub struct PrivateBus {
    child: Child,
    socket: PathBuf,
}

impl PrivateBus {
    pub fn start(dir: &Path) -> PrivateBus {
        fs::create_dir_all(dir).expect("bus dir");
        let socket = dir.join("bus.sock");
        let config = dir.join("bus.conf");
        fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
                socket.display()
            ),
        )
        .expect("bus config");
        let log = fs::File::create(dir.join("dbus-daemon.log")).expect("bus log");
        let mut child = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--nopidfile"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start dbus-daemon (scripts/install-deps.sh installs it)");
        if wait_for(START_TIMEOUT, || socket.exists().then_some(())).is_none() {
            stop(&mut child);
            panic!(
                "dbus-daemon never listened on {}: {}",
                socket.display(),
                fs::read_to_string(dir.join("dbus-daemon.log")).unwrap_or_default()
            );
        }
        PrivateBus { child, socket }
    }

    /// Its address, for `DBUS_SYSTEM_BUS_ADDRESS`.
    pub fn address(&self) -> String {
        format!("unix:path={}", self.socket.display())
    }

    /// Calls a method with `dbus-send` (a client of the bus other than nanolet), e.g.
    /// `call("org.freedesktop.login1", "/org/freedesktop/login1", "org.nanolet.Test.Shutdown",
    /// &["boolean:true"])`.
    pub fn call(&self, dest: &str, path: &str, method: &str, args: &[&str]) -> String {
        let out = Command::new("dbus-send")
            .arg(format!("--bus={}", self.address()))
            .args(["--print-reply", "--reply-timeout=10000"])
            .arg(format!("--dest={dest}"))
            .arg(path)
            .arg(method)
            .args(args)
            .output()
            .expect("run dbus-send");
        assert!(
            out.status.success(),
            "dbus-send {method}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl PrivateBus {
    /// Whether a client owns `name` on the bus (`NameHasOwner`, asked with dbus-send).
    pub fn has_owner(&self, name: &str) -> bool {
        Command::new("dbus-send")
            .arg(format!("--bus={}", self.address()))
            .args([
                "--print-reply",
                "--dest=org.freedesktop.DBus",
                "/org/freedesktop/DBus",
            ])
            .arg("org.freedesktop.DBus.NameHasOwner")
            .arg(format!("string:{name}"))
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("boolean true"))
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// The stand-in logind (and systemd's `KillUnit`) on a [`PrivateBus`]; its events are lines
/// in [`LogindStandIn::log`].
pub struct LogindStandIn {
    child: Child,
    pub log: PathBuf,
}

impl LogindStandIn {
    /// Starts it with `InhibitDelayMaxUSec` = `delay_usec`; KillUnit(SIGHUP) re-reads
    /// `InhibitDelayMaxSec` from the `*.conf` files in `conf_dir`.
    pub fn start(bus: &PrivateBus, conf_dir: &Path, delay_usec: u64) -> LogindStandIn {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("logind_standin.py");
        let log = conf_dir
            .parent()
            .unwrap_or(conf_dir)
            .join("logind-standin.log");
        let err = fs::File::create(log.with_extension("stderr")).expect("stand-in stderr");
        // Debian's python3, where python3-dbus and python3-gi live (not a pyenv shim's).
        let mut child = Command::new("/usr/bin/python3")
            .arg(&script)
            .arg(bus.address())
            .arg(conf_dir)
            .arg(delay_usec.to_string())
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("start the logind stand-in");
        let ready = wait_for(START_TIMEOUT, || {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(Err(status));
            }
            fs::read_to_string(&log)
                .is_ok_and(|l| l.contains(" ready"))
                .then_some(Ok(()))
        });
        if !matches!(ready, Some(Ok(()))) {
            stop(&mut child);
            panic!(
                "the logind stand-in did not start ({ready:?}): {}",
                fs::read_to_string(log.with_extension("stderr")).unwrap_or_default()
            );
        }
        LogindStandIn { child, log }
    }

    /// Its event lines: (seconds since boot, as /proc/uptime, the rest of the line).
    pub fn events(&self) -> Vec<(f64, String)> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (t, rest) = l.split_once(' ')?;
                Some((t.parse().ok()?, rest.to_string()))
            })
            .collect()
    }

    /// The time of the first event starting with `prefix`, after `since` events.
    pub fn event_at(&self, prefix: &str, since: usize) -> Option<f64> {
        self.events()
            .into_iter()
            .skip(since)
            .find(|(_, e)| e.starts_with(prefix))
            .map(|(t, _)| t)
    }
}

impl Drop for LogindStandIn {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// A stand-in for systemd's manager (`tests/support/systemd_standin.py`): what the real
/// systemd-logind asks of PID 1 (Subscribe, a target's LoadState, StartUnit for the
/// shutdown itself, which is only recorded). Killed by PID on drop.
pub struct SystemdStandIn {
    child: Child,
    pub log: PathBuf,
}

impl SystemdStandIn {
    pub fn start(bus: &PrivateBus, dir: &Path) -> SystemdStandIn {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd_standin.py");
        let log = dir.join("systemd-standin.log");
        let err = fs::File::create(dir.join("systemd-standin.stderr")).expect("stand-in stderr");
        let mut child = Command::new("/usr/bin/python3")
            .arg(&script)
            .arg(bus.address())
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("start the systemd stand-in");
        let ready = wait_for(START_TIMEOUT, || {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(Err(status));
            }
            fs::read_to_string(&log)
                .is_ok_and(|l| l.contains(" ready"))
                .then_some(Ok(()))
        });
        if !matches!(ready, Some(Ok(()))) {
            stop(&mut child);
            panic!(
                "the systemd stand-in did not start ({ready:?}): {}",
                fs::read_to_string(dir.join("systemd-standin.stderr")).unwrap_or_default()
            );
        }
        SystemdStandIn { child, log }
    }

    /// The time of the first event starting with `prefix` (seconds since boot).
    pub fn event_at(&self, prefix: &str) -> Option<f64> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once(' '))
            .find(|(_, e)| e.starts_with(prefix))
            .and_then(|(t, _)| t.parse().ok())
    }
}

impl Drop for SystemdStandIn {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// The real `systemd-logind` (Debian's, /lib/systemd/systemd-logind) on a [`PrivateBus`]
/// (`DBUS_SYSTEM_BUS_ADDRESS`), debug log to `<dir>/logind.log`. It keeps its state in
/// /run/systemd (seats, inhibitors, as it always does). Killed by PID on drop.
pub struct RealLogind {
    child: Child,
    pub log: PathBuf,
    /// logind's seat file, removed on drop when this logind made it.
    seat_file: Option<PathBuf>,
}

const SEAT_FILE: &str = "/run/systemd/seats/seat0";

impl RealLogind {
    pub fn start(bus: &PrivateBus, dir: &Path) -> RealLogind {
        let log = dir.join("logind.log");
        let out = fs::File::create(&log).expect("logind log");
        let seat_file = (!Path::new(SEAT_FILE).exists()).then(|| PathBuf::from(SEAT_FILE));
        let mut child = Command::new("/lib/systemd/systemd-logind")
            .env("DBUS_SYSTEM_BUS_ADDRESS", bus.address())
            .env("SYSTEMD_LOG_LEVEL", "debug")
            .env("SYSTEMD_LOG_TARGET", "console")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("start systemd-logind (Debian's systemd package)");
        let ready = wait_for(START_TIMEOUT, || {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(Err(status));
            }
            bus.has_owner("org.freedesktop.login1").then_some(Ok(()))
        });
        if !matches!(ready, Some(Ok(()))) {
            stop(&mut child);
            panic!(
                "systemd-logind did not take org.freedesktop.login1 ({ready:?}): {}",
                fs::read_to_string(&log).unwrap_or_default()
            );
        }
        RealLogind {
            child,
            log,
            seat_file,
        }
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for RealLogind {
    fn drop(&mut self) {
        stop(&mut self.child);
        if let Some(seat) = &self.seat_file {
            let _ = fs::remove_file(seat);
        }
    }
}
