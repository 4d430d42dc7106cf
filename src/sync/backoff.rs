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

    /// Drop entries not updated for 2 x max (the kubelet's periodic GC of the backoff map).
    pub fn gc(&mut self, now: Instant) {
        let limit = self.max * 2;
        self.entries
            .retain(|_, e| now.saturating_duration_since(e.last_update) <= limit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn keys_are_independent_and_gc_drops_old() {
        let mut b = Backoff::default();
        let t0 = Instant::now();
        b.next("a", t0);
        b.next("b", t0 + secs(700));
        b.gc(t0 + secs(701));
        assert_eq!(b.delay("a"), None);
        assert_eq!(b.delay("b"), Some(secs(10)));
    }
}
