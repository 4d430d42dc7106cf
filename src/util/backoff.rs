//! Crash-loop backoff with the semantics of the kubelet's `flowcontrol.Backoff`
//! (pkg/kubelet/kuberuntime: `doBackOff`, client-go util/flowcontrol/backoff.go):
//!
//! - The first restart is immediate: an unknown key is not in backoff.
//! - Each restart records `next()`: the delay starts at 10s and doubles, capped at 300s.
//! - A container is in backoff while `now - finished_at < delay`.
//! - An entry expires (the delay resets to 10s) when the event happened more than
//!   2 x max (10 minutes) after the entry was last updated: "reset after 10 minutes running".
//!
//! Pure: callers pass `now`, so tests drive time by hand.

use std::collections::HashMap;
use std::time::{Duration, Instant};

pub const INITIAL: Duration = Duration::from_secs(10);
pub const MAX: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy)]
struct Entry {
    delay: Duration,
    last_update: Instant,
}

#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, Entry>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(INITIAL, MAX)
    }
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            entries: HashMap::new(),
        }
    }

    fn expired(&self, e: &Entry, event: Instant) -> bool {
        event.saturating_duration_since(e.last_update) > self.max * 2
    }

    /// Is `key` in backoff for an event (container exit) at `event_time`? Returns the remaining
    /// wait when it is.
    pub fn remaining(&self, key: &str, event_time: Instant, now: Instant) -> Option<Duration> {
        let e = self.entries.get(key)?;
        if self.expired(e, event_time) {
            return None;
        }
        let since = now.saturating_duration_since(event_time);
        if since < e.delay {
            Some(e.delay - since)
        } else {
            None
        }
    }

    /// Time left of `key`'s back-off counted from its last update (the kubelet's
    /// `IsInBackOffSinceUpdate`, used for image pulls); `None` when it is over.
    pub fn remaining_since_update(&self, key: &str, now: Instant) -> Option<Duration> {
        let e = self.entries.get(key)?;
        if self.expired(e, now) {
            return None;
        }
        e.delay
            .checked_sub(now.saturating_duration_since(e.last_update))
            .filter(|d| !d.is_zero())
    }

    /// The current delay recorded for `key` (what the kubelet prints as "back-off 20s").
    pub fn delay(&self, key: &str) -> Option<Duration> {
        self.entries.get(key).map(|e| e.delay)
    }

    /// Record a restart at `now`: first call sets the initial delay, later calls double it up
    /// to the cap; an expired entry starts over.
    pub fn next(&mut self, key: &str, now: Instant) {
        let initial = self.initial;
        let max = self.max;
        let fresh = match self.entries.get(key) {
            None => true,
            Some(e) => self.expired(e, now),
        };
        if fresh {
            self.entries.insert(
                key.to_string(),
                Entry {
                    delay: initial,
                    last_update: now,
                },
            );
        } else if let Some(e) = self.entries.get_mut(key) {
            e.delay = (e.delay * 2).min(max);
            e.last_update = now;
        }
    }
}

/// The kubelet's pod worker retries a failed sync after `backOffPeriod` (10 s) jittered by up to
/// 50 % (pod_workers.go completeWork: `wait.Jitter(p.backOffPeriod,
/// workerBackOffPeriodJitterFactor)`), not at once: with the runtime down every pod fails
/// every sync. `jitter` is any number (the caller passes clock noise); it picks the point in
/// [10 s, 15 s).
pub fn sync_error_retry(jitter: u64) -> Duration {
    const BACK_OFF_PERIOD: Duration = Duration::from_secs(10);
    BACK_OFF_PERIOD + Duration::from_millis(jitter % 5000)
}

/// Rate limit for a warning that repeats with the same text (a sync error, a failed relist,
/// while containerd is down): the first is logged; repeats are suppressed and logged once per
/// back-off step (10 s, doubling up to 300 s, as [`Backoff`]) with the number suppressed since;
/// a different text, or [`RepeatLimiter::clear`] after a success, starts over. Pure.
#[derive(Debug, Clone)]
pub struct RepeatLimiter {
    last: Option<String>,
    suppressed: u64,
    step: Duration,
    next: Option<Instant>,
}

impl Default for RepeatLimiter {
    fn default() -> Self {
        RepeatLimiter {
            last: None,
            suppressed: 0,
            step: INITIAL,
            next: None,
        }
    }
}

impl RepeatLimiter {
    /// `Some(suppressed)` when this occurrence of `text` is to be logged, with the number of
    /// repeats suppressed before it; `None` to suppress it.
    pub fn check(&mut self, text: &str, now: Instant) -> Option<u64> {
        if self.last.as_deref() != Some(text) {
            self.last = Some(text.to_string());
            self.suppressed = 0;
            self.step = INITIAL;
            self.next = Some(now + INITIAL);
            return Some(0);
        }
        match self.next {
            Some(next) if now < next => {
                self.suppressed += 1;
                None
            }
            _ => {
                let n = self.suppressed;
                self.suppressed = 0;
                self.step = (self.step * 2).min(MAX);
                self.next = Some(now + self.step);
                Some(n)
            }
        }
    }

    /// The warning's condition is over: true when a warning had been logged (so the caller
    /// can say it recovered). The next occurrence is logged at once.
    pub fn clear(&mut self) -> bool {
        self.suppressed = 0;
        self.step = INITIAL;
        self.next = None;
        self.last.take().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_warning_is_logged_once_per_back_off_step_with_the_suppressed_count() {
        let t0 = Instant::now();
        let mut l = RepeatLimiter::default();
        let s = Duration::from_secs;
        assert_eq!(l.check("down", t0), Some(0));
        // Every second for the first step: suppressed.
        for i in 1..10 {
            assert_eq!(l.check("down", t0 + s(i)), None, "{i}");
        }
        assert_eq!(l.check("down", t0 + s(10)), Some(9));
        // The next step is 20 s.
        assert_eq!(l.check("down", t0 + s(29)), None);
        assert_eq!(l.check("down", t0 + s(30)), Some(1));
        // A different error is logged at once, and a success starts over.
        assert_eq!(l.check("other", t0 + s(31)), Some(0));
        assert!(l.clear());
        assert!(!l.clear());
        assert_eq!(l.check("other", t0 + s(32)), Some(0));
        // The step is capped at MAX (300 s).
        let mut l = RepeatLimiter::default();
        let mut t = t0;
        let mut logged = vec![];
        l.check("x", t);
        for _ in 0..2000 {
            t += s(1);
            if l.check("x", t).is_some() {
                logged.push(t);
            }
        }
        let gaps: Vec<u64> = logged.windows(2).map(|w| (w[1] - w[0]).as_secs()).collect();
        assert_eq!(&gaps[..4], &[20, 40, 80, 160]);
        assert!(gaps[4..].iter().all(|g| *g == 300), "{gaps:?}");
    }

    #[test]
    fn a_failed_sync_is_retried_after_the_kubelets_jittered_10s() {
        // pod_workers.go: backOffPeriod 10 s, workerBackOffPeriodJitterFactor 0.5.
        for j in [0, 1, 4999, 5000, 123_456_789] {
            let d = sync_error_retry(j);
            assert!(
                d >= Duration::from_secs(10) && d < Duration::from_secs(15),
                "{d:?}"
            );
        }
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn image_backoff_counts_from_the_last_failure() {
        let t0 = Instant::now();
        let mut b = Backoff::default();
        assert_eq!(b.remaining_since_update("img", t0), None);
        b.next("img", t0);
        assert_eq!(b.remaining_since_update("img", t0 + secs(3)), Some(secs(7)));
        assert_eq!(b.remaining_since_update("img", t0 + secs(10)), None);
        b.next("img", t0 + secs(10));
        assert_eq!(
            b.remaining_since_update("img", t0 + secs(15)),
            Some(secs(15))
        );
        assert_eq!(b.remaining_since_update("img", t0 + secs(30)), None);
    }

    #[test]
    fn first_restart_is_immediate() {
        // kubelet: an unknown key is never in backoff, so the first restart happens at once.
        let b = Backoff::default();
        let t0 = Instant::now();
        assert_eq!(b.remaining("c", t0, t0), None);
    }

    #[test]
    fn backoff_doubles_from_10s_capped_at_300s() {
        // "backoff doubles from 10s, capped at 300s" (flowcontrol.Backoff with 10s/300s).
        let mut b = Backoff::default();
        let mut now = Instant::now();
        let mut seen = vec![];
        for _ in 0..8 {
            b.next("c", now);
            seen.push(b.delay("c").map(|d| d.as_secs()).unwrap_or(0));
            now += secs(1);
        }
        assert_eq!(seen, vec![10, 20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn in_backoff_until_delay_after_exit() {
        let mut b = Backoff::default();
        let t0 = Instant::now();
        b.next("c", t0); // first restart (immediate), delay now 10s
        let exit = t0 + secs(2); // second crash
        assert_eq!(b.remaining("c", exit, exit), Some(secs(10)));
        assert_eq!(b.remaining("c", exit, exit + secs(9)), Some(secs(1)));
        assert_eq!(b.remaining("c", exit, exit + secs(10)), None);
    }

    #[test]
    fn resets_after_ten_minutes_running() {
        // client-go hasExpired: eventTime - lastUpdate > 2 * maxDuration (600s) resets the entry.
        let mut b = Backoff::default();
        let t0 = Instant::now();
        for i in 0..5 {
            b.next("c", t0 + secs(i));
        }
        assert_eq!(b.delay("c"), Some(secs(160)));
        let exit = t0 + secs(4) + secs(601);
        assert_eq!(
            b.remaining("c", exit, exit),
            None,
            "expired entry is not in backoff"
        );
        b.next("c", exit);
        assert_eq!(b.delay("c"), Some(secs(10)), "delay starts over at 10s");
        // But 599s is not enough.
        let mut b2 = Backoff::default();
        b2.next("c", t0);
        b2.next("c", t0);
        let exit2 = t0 + secs(599);
        assert_eq!(b2.remaining("c", exit2, exit2), Some(secs(20)));
    }

    #[test]
    fn keys_are_independent() {
        let mut b = Backoff::default();
        let t0 = Instant::now();
        b.next("a", t0);
        b.next("a", t0 + secs(1));
        b.next("b", t0 + secs(700));
        assert_eq!(b.delay("a"), Some(secs(20)));
        assert_eq!(b.delay("b"), Some(secs(10)));
    }
}
