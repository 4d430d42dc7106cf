//! systemd `Type=notify` support, written against the sd_notify protocol directly (one
//! datagram per message to `$NOTIFY_SOCKET`, a path or an abstract `@name`):
//!
//! - `READY=1` once the sync loop has run (the first sync is done), with a `STATUS=` line;
//! - `STATUS=` when the pod counts change (looked at every [`STATUS_PERIOD`]);
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

/// How long a notification may wait for room in the receiver's queue. A datagram socket
/// whose reader stalls fills after `net.unix.max_dgram_qlen` (10 by default) messages, and a
/// plain blocking send would then hang the sender (at shutdown: nanolet itself) for good.
const SEND_TIMEOUT: Duration = Duration::from_secs(2);

/// Sends one notification (`READY=1`, `STATUS=...`); false when it could not be sent. Errors
/// are logged at debug level only: a missing, broken or stalled notify socket must never
/// disturb the agent.
pub fn notify(message: &str) -> bool {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return false;
    };
    notify_to(&path.to_string_lossy(), message)
}

/// [`notify`] to the socket `path` (a path or an abstract `@name`), waiting at most
/// [`SEND_TIMEOUT`].
pub fn notify_to(path: &str, message: &str) -> bool {
    let sent = UnixDatagram::unbound().and_then(|s| {
        s.set_write_timeout(Some(SEND_TIMEOUT))?;
        let addr = socket_addr(path)?;
        s.send_to_addr(message.as_bytes(), &addr)
    });
    match sent {
        Ok(_) => true,
        Err(e) => {
            tracing::debug!(socket = %path, error = %e, "sd_notify failed");
            false
        }
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

/// After READY, how often the pod counts of the `STATUS=` line are taken: counting copies
/// every pod from the status store (at 100 pods, every second was most of an idle agent's
/// CPU), and systemd shows the line only on `systemctl status`.
pub const STATUS_PERIOD: Duration = Duration::from_secs(10);

/// Until READY: how often the notifier looks for the first sync.
const READY_TICK: Duration = Duration::from_secs(1);

/// How long the notifier sleeps between looks: [`READY_TICK`] until READY, then
/// [`STATUS_PERIOD`]; never longer than the watchdog interval (already half of
/// `WatchdogSec=`), so a ping is at most one such sleep late.
fn tick(ready: bool, watchdog: Option<Duration>) -> Duration {
    let t = if ready { STATUS_PERIOD } else { READY_TICK };
    watchdog.map_or(t, |w| w.min(t))
}

/// Whether a due watchdog ping is sent: only while every health check passes (`Ok`), else
/// the names of the failing checks (no ping: systemd's `WatchdogSec=` then restarts nanolet).
fn watchdog_verdict(health: &[crate::status::HealthCheck]) -> Result<(), Vec<&str>> {
    let failed: Vec<&str> = health
        .iter()
        .filter(|c| !c.ok)
        .map(|c| c.name.as_str())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed)
    }
}

/// Starts the notifier thread when `$NOTIFY_SOCKET` is set.
pub fn spawn(store: Arc<StatusStore>) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    let watchdog = watchdog_interval();
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
                    let status = status_line(&store);
                    // Not sent (the receiver's queue stayed full): tried again next tick.
                    if notify(&format!("READY=1\nSTATUS={status}")) {
                        tracing::info!("notified systemd: ready");
                        last_status = status;
                        ready = true;
                    }
                } else if ready {
                    let s = status_line(&store);
                    if s != last_status && notify(&format!("STATUS={s}")) {
                        last_status = s;
                    }
                }
                if let Some(w) = watchdog {
                    if last_ping.elapsed() >= w {
                        match watchdog_verdict(&health) {
                            Ok(()) => {
                                notify("WATCHDOG=1");
                            }
                            Err(failed) => {
                                tracing::warn!(checks = %failed.join(","), "health checks failing: not pinging the systemd watchdog");
                            }
                        }
                        last_ping = std::time::Instant::now();
                    }
                }
                std::thread::sleep(tick(ready, watchdog));
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the sd_notify thread");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// sd_watchdog_enabled's interval is half of WatchdogSec: the notifier never sleeps longer
    /// than that, looks for READY every second, and after READY recounts pods for `STATUS=`
    /// every STATUS_PERIOD instead of every second.
    #[test]
    fn the_notifier_sleeps_a_second_until_ready_then_the_status_period() {
        assert_eq!(tick(false, None), Duration::from_secs(1));
        assert_eq!(tick(true, None), STATUS_PERIOD);
        // The packaged unit: WatchdogSec=120s, pinged every 60 s.
        assert_eq!(tick(true, Some(Duration::from_secs(60))), STATUS_PERIOD);
        assert_eq!(
            tick(true, Some(Duration::from_millis(500))),
            Duration::from_millis(500)
        );
        assert_eq!(
            tick(false, Some(Duration::from_millis(500))),
            Duration::from_millis(500)
        );
    }

    /// docs/operating.md: "with `WatchdogSec=` nanolet pings the watchdog only while every
    /// health check passes". Against the real health checks of a status store: no ping before
    /// the first sync and relist, none while the runtime is down, a ping once all pass.
    #[test]
    fn the_watchdog_is_pinged_only_while_every_health_check_passes() {
        let store = StatusStore::new(Duration::from_secs(300));
        assert_eq!(
            watchdog_verdict(&store.health()),
            Err(vec!["syncloop", "runtime", "pleg"])
        );
        store.mark_sync();
        store.mark_relist();
        assert_eq!(watchdog_verdict(&store.health()), Ok(()));
        store.mark_runtime_error(&"connection refused");
        assert_eq!(watchdog_verdict(&store.health()), Err(vec!["runtime"]));
        store.mark_relist();
        assert_eq!(watchdog_verdict(&store.health()), Ok(()));
    }

    /// A receiver that stops reading (a wedged supervisor, or a test that reads the socket
    /// only now and then) fills its queue; a notification then gives up after SEND_TIMEOUT
    /// instead of blocking the sender forever (at shutdown, nanolet's main thread).
    #[test]
    fn a_stalled_receiver_never_blocks_the_sender_for_long() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("notify.sock");
        let receiver = UnixDatagram::bind(&path).expect("bind");
        let path = path.to_string_lossy().into_owned();
        assert!(notify_to(&path, "READY=1"));
        let mut buf = [0u8; 64];
        let n = receiver.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"READY=1");
        // Fill the receiver's queue (net.unix.max_dgram_qlen datagrams: 10 by the kernel's
        // default, 512 under systemd's sysctl defaults) without blocking. One sender can also
        // stop on its own send buffer first, so add senders until a fresh one cannot queue
        // a single datagram.
        let mut fillers = Vec::new();
        loop {
            let filler = UnixDatagram::unbound().expect("socket");
            filler.set_nonblocking(true).expect("nonblocking");
            let mut queued = 0;
            while filler.send_to(b"WATCHDOG=1", &path).is_ok() {
                queued += 1;
            }
            fillers.push(filler);
            if queued == 0 {
                break;
            }
            assert!(fillers.len() < 1000, "the queue never filled");
        }
        let started = Instant::now();
        assert!(
            !notify_to(&path, "STOPPING=1"),
            "a full queue cannot take more"
        );
        let took = started.elapsed();
        assert!(
            took >= SEND_TIMEOUT - Duration::from_millis(100) && took < SEND_TIMEOUT * 2,
            "gave up after {took:?}"
        );
        // Once the receiver reads again, notifications go through.
        let _ = receiver.recv(&mut buf).expect("recv");
        assert!(notify_to(&path, "STATUS=ok"));
    }
}
