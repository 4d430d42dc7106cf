//! systemd `Type=notify` support, written against the sd_notify protocol directly (one
//! datagram per message to `$NOTIFY_SOCKET`, a path or an abstract `@name`):
//!
//! - `READY=1` once the sync loop has run (the first sync is done), with a `STATUS=` line;
//! - `STATUS=` whenever the pod counts change;
//! - `WATCHDOG=1` every `$WATCHDOG_USEC / 2` while every health check passes, so systemd's
//!   `WatchdogSec=` restarts nanolet when it is wedged (pods keep running meanwhile);
//! - `STOPPING=1` on shutdown.
//!
//! Without `$NOTIFY_SOCKET` all of this is a no-op.

use std::os::unix::net::UnixDatagram;
use std::sync::Arc;
use std::time::Duration;

use crate::status::StatusStore;

fn socket_addr(path: &str) -> std::io::Result<std::os::unix::net::SocketAddr> {
    if let Some(name) = path.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
    } else {
        std::os::unix::net::SocketAddr::from_pathname(path)
    }
}

/// Sends one notification (`READY=1`, `STATUS=...`). Errors are logged at debug level only:
/// a missing or broken notify socket must never disturb the agent.
pub fn notify(message: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let path = path.to_string_lossy().into_owned();
    let sent = UnixDatagram::unbound().and_then(|s| {
        let addr = socket_addr(&path)?;
        s.send_to_addr(message.as_bytes(), &addr)
    });
    if let Err(e) = sent {
        tracing::debug!(socket = %path, error = %e, "sd_notify failed");
    }
}

/// The watchdog interval systemd asked for (`$WATCHDOG_USEC`, for this process per
/// `$WATCHDOG_PID`), halved as sd_watchdog_enabled recommends.
fn watchdog_interval() -> Option<Duration> {
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.trim().parse::<u32>().ok() != Some(std::process::id()) {
            return None;
        }
    }
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.trim().parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

fn status_line(store: &StatusStore) -> String {
    let pods = store.pods();
    let running = pods
        .iter()
        .filter(|p| p.status.as_ref().is_some_and(|s| s.phase == "Running"))
        .count();
    let errors = store.manifest_errors().len();
    let mut s = format!("{} pods, {running} running", pods.len());
    if errors > 0 {
        s.push_str(&format!(", {errors} manifest errors"));
    }
    s
}

/// Starts the notifier thread when `$NOTIFY_SOCKET` is set.
pub fn spawn(store: Arc<StatusStore>) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    let watchdog = watchdog_interval();
    let tick = watchdog.map_or(Duration::from_secs(1), |w| w.min(Duration::from_secs(1)));
    let spawned = std::thread::Builder::new()
        .name("sd-notify".into())
        .stack_size(128 * 1024)
        .spawn(move || {
            let mut ready = false;
            let mut last_status = String::new();
            let mut last_ping = std::time::Instant::now();
            loop {
                let health = store.health();
                if !ready && health.iter().any(|c| c.name == "syncloop" && c.ok) {
                    last_status = status_line(&store);
                    notify(&format!("READY=1\nSTATUS={last_status}"));
                    tracing::info!("notified systemd: ready");
                    ready = true;
                } else if ready {
                    let s = status_line(&store);
                    if s != last_status {
                        notify(&format!("STATUS={s}"));
                        last_status = s;
                    }
                }
                if let Some(w) = watchdog {
                    if last_ping.elapsed() >= w {
                        if health.iter().all(|c| c.ok) {
                            notify("WATCHDOG=1");
                        } else {
                            let failed: Vec<&str> = health
                                .iter()
                                .filter(|c| !c.ok)
                                .map(|c| c.name.as_str())
                                .collect();
                            tracing::warn!(checks = %failed.join(","), "health checks failing: not pinging the systemd watchdog");
                        }
                        last_ping = std::time::Instant::now();
                    }
                }
                std::thread::sleep(tick);
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the sd_notify thread");
    }
}
