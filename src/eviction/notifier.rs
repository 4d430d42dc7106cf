//! The memory threshold notifier (the kubelet's fast path for memory.available): on cgroup v1
//! the kernel signals an eventfd when the root memory cgroup's usage crosses a threshold
//! (`cgroup.event_control`), so the manager need not wait for its next 10 s pass. The threshold
//! on usage is `capacity - memory.available threshold + inactive_file`, re-armed after every pass
//! because inactive_file moves. cgroup v2 has no usage thresholds; there the manager polls only
//! (as the kubelet does).

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, poll};
use nix::sys::eventfd::{EfdFlags, EventFd};
use tracing::debug;

use super::observe::{MemorySource, stat_value};
use super::threshold::{Signal, Threshold};

struct Armed {
    efd: EventFd,
    // Kept open: the registration lives as long as both descriptors.
    _usage: File,
    threshold: u64,
}

pub struct MemoryNotifier {
    root: PathBuf,
    armed: Option<Armed>,
}

impl MemoryNotifier {
    /// `None` where there is no v1 memory cgroup to watch.
    pub fn new() -> Option<MemoryNotifier> {
        let root = PathBuf::from("/sys/fs/cgroup/memory");
        root.join("cgroup.event_control")
            .exists()
            .then_some(MemoryNotifier { root, armed: None })
    }

    /// (Re-)registers the usage threshold for the tightest memory.available threshold.
    pub fn arm(&mut self, thresholds: &[Threshold], memory: &MemorySource) {
        let Some((capacity, _)) = memory.read() else {
            return;
        };
        let Some(min_available) = thresholds
            .iter()
            .filter(|t| t.signal == Signal::MemoryAvailable)
            .map(|t| t.value.resolve(capacity))
            .max()
        else {
            self.armed = None;
            return;
        };
        let inactive = std::fs::read_to_string(self.root.join("memory.stat"))
            .ok()
            .and_then(|s| stat_value(&s, "total_inactive_file"))
            .unwrap_or(0);
        let threshold = (capacity - min_available).max(0) as u64 + inactive;
        // Re-register only when the threshold moved by more than 1/64 of the capacity.
        if let Some(a) = &self.armed {
            if a.threshold.abs_diff(threshold) < (capacity as u64) / 64 {
                return;
            }
        }
        match self.register(threshold) {
            Ok(a) => {
                debug!(threshold, "memory threshold notifier armed");
                self.armed = Some(a);
            }
            Err(e) => {
                debug!(error = %e, "memory threshold notifier unavailable");
                self.armed = None;
            }
        }
    }

    fn register(&self, threshold: u64) -> std::io::Result<Armed> {
        let efd = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .map_err(std::io::Error::from)?;
        let usage = File::open(self.root.join("memory.usage_in_bytes"))?;
        let mut ctl = std::fs::OpenOptions::new()
            .write(true)
            .open(self.root.join("cgroup.event_control"))?;
        ctl.write_all(format!("{} {} {threshold}", efd.as_raw_fd(), usage.as_raw_fd()).as_bytes())?;
        Ok(Armed {
            efd,
            _usage: usage,
            threshold,
        })
    }

    /// Blocks in poll(2) until the threshold is crossed or `timeout` has passed: whether it
    /// was crossed; `None` when nothing is armed (there is nothing to wait on).
    pub fn wait(&self, timeout: Duration) -> Option<bool> {
        let a = self.armed.as_ref()?;
        let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(a.efd.as_fd(), PollFlags::POLLIN)];
        // EINTR: the caller looks at the time left and waits again.
        let _ = poll(&mut fds, ms);
        Some(self.fired())
    }

    /// Whether the threshold was crossed since the last call (non-blocking).
    pub fn fired(&self) -> bool {
        self.armed
            .as_ref()
            .is_some_and(|a| a.efd.read().is_ok_and(|n| n > 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a cgroup v1 host the notifier arms for the default threshold and does not fire while
    /// usage stays far below it.
    #[test]
    fn arms_on_cgroup_v1_and_stays_quiet_below_the_threshold() {
        let Some(mut n) = MemoryNotifier::new() else {
            // cgroup v2 host: the kubelet has no notifier there either.
            assert!(!PathBuf::from("/sys/fs/cgroup/memory/cgroup.event_control").exists());
            return;
        };
        let mem = MemorySource::detect();
        let t = super::super::EvictionConfig::default().thresholds;
        n.arm(&t, &mem);
        if nix::unistd::geteuid().is_root() {
            assert!(n.armed.is_some(), "root can write cgroup.event_control");
        }
        assert!(!n.fired());
        if n.armed.is_some() {
            // Armed: the wait blocks for its whole timeout (no crossing), not a short tick.
            let t0 = std::time::Instant::now();
            assert_eq!(n.wait(Duration::from_millis(300)), Some(false));
            assert!(
                t0.elapsed() >= Duration::from_millis(290),
                "{:?}",
                t0.elapsed()
            );
        }
    }

    /// Nothing armed (no memory.available threshold): nothing to wait on, the caller blocks on
    /// its stop channel instead.
    #[test]
    fn an_unarmed_notifier_has_nothing_to_wait_on() {
        let n = MemoryNotifier {
            root: PathBuf::from("/nonexistent"),
            armed: None,
        };
        assert_eq!(n.wait(Duration::from_secs(5)), None);
    }
}
