//! logind and systemd over the system bus, as the kubelet's `nodeshutdown/systemd` uses them:
//! a `delay` inhibitor lock on `shutdown`, logind's `InhibitDelayMaxUSec`, the
//! `PrepareForShutdown` signal, and the logind.conf drop-in that raises `InhibitDelayMaxSec`
//! (applied by sending logind SIGHUP through systemd's `KillUnit`).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::dbus::{Call, Connection, DbusError, Value};

const LOGIND: &str = "org.freedesktop.login1";
const LOGIND_PATH: &str = "/org/freedesktop/login1";
const LOGIND_MANAGER: &str = "org.freedesktop.login1.Manager";
/// How long a call to logind or systemd may take (libdbus's default).
const CALL_TIMEOUT: Duration = Duration::from_secs(25);

/// The drop-in's file name; the kubelet's is `99-kubelet.conf` in the same directory.
pub const DROP_IN: &str = "99-nanolet.conf";

/// What can go wrong with logind.
#[derive(Debug, thiserror::Error)]
pub enum LogindError {
    #[error("system bus: {0}")]
    Bus(#[from] DbusError),
    #[error("logind's InhibitDelayMaxUSec is not a uint64: {0:?}")]
    DelayType(String),
    #[error("logind's Inhibit returned no file descriptor")]
    NoLock,
    #[error("writing the logind drop-in {}: {source}", path.display())]
    DropIn {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A connection to logind on the system bus.
pub struct Logind {
    conn: Connection,
}

/// logind's answer to the lock request: the lock is held as long as this descriptor is open.
pub struct InhibitLock(#[allow(dead_code)] OwnedFd);

impl Logind {
    /// Connects to the system bus (`$DBUS_SYSTEM_BUS_ADDRESS` or the well-known socket).
    pub fn connect() -> Result<Logind, LogindError> {
        let conn = Connection::connect(&super::dbus::system_bus_address())?;
        Ok(Logind { conn })
    }

    /// logind's `InhibitDelayMaxUSec`: how long a delay lock may hold a shutdown back.
    pub fn inhibit_delay_max(&mut self) -> Result<Duration, LogindError> {
        let reply = self.conn.call(
            &Call {
                destination: Some(LOGIND),
                path: LOGIND_PATH,
                interface: "org.freedesktop.DBus.Properties",
                member: "Get",
                args: &[
                    Value::Str(LOGIND_MANAGER.into()),
                    Value::Str("InhibitDelayMaxUSec".into()),
                ],
            },
            CALL_TIMEOUT,
        )?;
        match reply.body.first() {
            Some(Value::Variant(v)) => match v.as_ref() {
                Value::U64(us) => Ok(Duration::from_micros(*us)),
                other => Err(LogindError::DelayType(other.signature())),
            },
            _ => Err(LogindError::DelayType(reply.signature)),
        }
    }

    /// Takes a `delay` inhibitor lock on `shutdown` (logind's `Inhibit`).
    pub fn inhibit_shutdown(&mut self) -> Result<InhibitLock, LogindError> {
        let reply = self.conn.call(
            &Call {
                destination: Some(LOGIND),
                path: LOGIND_PATH,
                interface: LOGIND_MANAGER,
                member: "Inhibit",
                args: &[
                    Value::Str("shutdown".into()),
                    Value::Str("nanolet".into()),
                    Value::Str("nanolet needs time to handle node shutdown".into()),
                    Value::Str("delay".into()),
                ],
            },
            CALL_TIMEOUT,
        )?;
        let index = match reply.body.first() {
            Some(Value::Fd(i)) => *i as usize,
            _ => return Err(LogindError::NoLock),
        };
        let mut fds = reply.fds;
        if index >= fds.len() {
            return Err(LogindError::NoLock);
        }
        Ok(InhibitLock(fds.swap_remove(index)))
    }

    /// Asks systemd to send logind SIGHUP, which makes it read its configuration again (the
    /// kubelet's `ReloadLogindConf`).
    pub fn reload_logind(&mut self) -> Result<(), LogindError> {
        self.conn.call(
            &Call {
                destination: Some("org.freedesktop.systemd1"),
                path: "/org/freedesktop/systemd1",
                interface: "org.freedesktop.systemd1.Manager",
                member: "KillUnit",
                args: &[
                    Value::Str("systemd-logind.service".into()),
                    Value::Str("all".into()),
                    Value::I32(1),
                ],
            },
            CALL_TIMEOUT,
        )?;
        Ok(())
    }

    /// Subscribes to logind's `PrepareForShutdown` (from logind only: the match names the
    /// sender, so no other client of the bus can make nanolet stop its pods).
    pub fn watch_shutdown(&mut self) -> Result<(), LogindError> {
        let rule = format!(
            "type='signal',sender='{LOGIND}',interface='{LOGIND_MANAGER}',member='PrepareForShutdown',path='{LOGIND_PATH}'"
        );
        self.conn.call(
            &Call {
                destination: Some("org.freedesktop.DBus"),
                path: "/org/freedesktop/DBus",
                interface: "org.freedesktop.DBus",
                member: "AddMatch",
                args: &[Value::Str(rule)],
            },
            CALL_TIMEOUT,
        )?;
        Ok(())
    }

    /// The next `PrepareForShutdown(active)`, waiting at most `timeout`.
    pub fn next_event(&mut self, timeout: Duration) -> Result<Option<bool>, LogindError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let Some(m) = self.conn.next_signal(left)? else {
                return Ok(None);
            };
            if m.member != "PrepareForShutdown" || m.interface != LOGIND_MANAGER {
                continue;
            }
            match m.body.first() {
                Some(Value::Bool(active)) => return Ok(Some(*active)),
                _ => tracing::warn!(
                    signature = %m.signature,
                    "ignoring a PrepareForShutdown signal without a boolean"
                ),
            }
        }
    }
}

/// Writes the logind drop-in that raises `InhibitDelayMaxSec` to `delay` (whole seconds,
/// rounded up), as the kubelet's `OverrideInhibitDelay` writes `99-kubelet.conf`.
pub fn write_drop_in(dir: &Path, delay: Duration) -> Result<PathBuf, LogindError> {
    let path = dir.join(DROP_IN);
    let err = |source| LogindError::DropIn {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(err)?;
    let secs = delay.as_secs() + u64::from(delay.subsec_nanos() > 0);
    let body = format!(
        "# Written by nanolet (shutdownGracePeriod): logind holds a shutdown back this long\n# for nanolet's delay inhibitor lock.\n[Login]\nInhibitDelayMaxSec={secs}\n"
    );
    let tmp = dir.join(format!(".{DROP_IN}.tmp"));
    std::fs::write(&tmp, body).map_err(err)?;
    std::fs::rename(&tmp, &path).map_err(err)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_in_sets_inhibit_delay_max_sec_in_whole_seconds() {
        let dir = std::env::temp_dir().join(format!("nanolet-logind-{}", std::process::id()));
        let path = write_drop_in(&dir, Duration::from_millis(30_500)).unwrap();
        let body = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(body.contains("[Login]\nInhibitDelayMaxSec=31\n"), "{body}");
        assert!(path.ends_with("99-nanolet.conf"));
    }
}
