//! The event correlator of client-go's `tools/record` (events_cache.go), our own code: what
//! the kubelet does to each event before it reaches the API server.
//!
//! - **Aggregation** (`EventAggregator`, `EventAggregatorByReasonFunc`): events of one
//!   source and object with the same type and reason but different messages; once
//!   [`AGGREGATE_MAX_EVENTS`] distinct messages were seen within [`AGGREGATE_INTERVAL`] of the
//!   previous one, the event becomes one aggregate event whose message is
//!   `(combined from similar events): <message>`, counted from then on.
//! - **Counting** (`eventLogger`): an event identical to one already sent (same key, message
//!   included) is sent as a strategic-merge PATCH of `count`, `lastTimestamp` and `message`
//!   of the first one's object (same name, same `firstTimestamp`).
//! - **Spam filter** (`EventSourceObjectSpamFilter`): a token bucket per source and object,
//!   burst [`SPAM_BURST`], refilled by one token every [`SPAM_REFILL`]; an event without a
//!   token is dropped.
//!
//! Every cache holds at most [`LRU_ENTRIES`] keys (the least recently used goes first), as
//! upstream's `maxLruCacheEntries`.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::events::{Event, PodRef};
use crate::timeutil::rfc3339;

/// `maxLruCacheEntries`.
pub const LRU_ENTRIES: usize = 4096;
/// `defaultAggregateMaxEvents`: similar events seen before they are aggregated.
pub const AGGREGATE_MAX_EVENTS: usize = 10;
/// `defaultAggregateIntervalInSeconds`: 10 minutes.
pub const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);
/// `defaultSpamBurst`.
pub const SPAM_BURST: f64 = 25.0;
/// `defaultSpamQPS` is 1/300: one token every 5 minutes.
pub const SPAM_REFILL: Duration = Duration::from_secs(300);
/// `EventAggregatorByReasonMessageFunc`'s prefix.
pub const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// An event as the sink sends it: the fields of the v1 Event the correlator looks at.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub object: PodRef,
    pub type_: &'static str,
    pub reason: String,
    pub message: String,
    /// `metadata.name`.
    pub name: String,
    pub first: SystemTime,
    pub last: SystemTime,
    pub count: u32,
}

impl Outgoing {
    /// The v1 Event to POST: `source.component` kubelet, `source.host` and
    /// `reportingInstance` the node, `reportingComponent` kubelet.
    pub fn to_json(&self, node: &str) -> Value {
        json!({
            "kind": "Event",
            "apiVersion": "v1",
            "metadata": {"name": self.name, "namespace": self.object.event_namespace()},
            "involvedObject": self.object.involved_object(),
            "reason": self.reason,
            "message": self.message,
            "source": {"component": "kubelet", "host": node},
            "firstTimestamp": rfc3339(self.first),
            "lastTimestamp": rfc3339(self.last),
            "count": self.count,
            "type": self.type_,
            "eventTime": null,
            "reportingComponent": "kubelet",
            "reportingInstance": node,
        })
    }

    /// The strategic-merge patch of a repeated event (what upstream's two-way merge patch
    /// between the event with count, lastTimestamp and message cleared and the event holds).
    pub fn patch(&self) -> Value {
        json!({
            "count": self.count,
            "lastTimestamp": rfc3339(self.last),
            "message": self.message,
        })
    }
}

/// What to do with one event.
#[derive(Debug, Clone, PartialEq)]
pub enum Correlated {
    /// Dropped by the spam filter.
    Skip,
    /// The first occurrence: POST it.
    Create(Outgoing),
    /// A repeat: PATCH the object named `name` (POST it when the server lost it).
    Update(Outgoing),
}

/// A map bounded to [`LRU_ENTRIES`] keys; the least recently used key is evicted.
struct Lru<V> {
    map: HashMap<String, (u64, V)>,
    tick: u64,
    cap: usize,
}

impl<V> Lru<V> {
    fn new(cap: usize) -> Self {
        Lru {
            map: HashMap::new(),
            tick: 0,
            cap,
        }
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(key).map(|(t, v)| {
            *t = tick;
            v
        })
    }

    fn insert(&mut self, key: String, value: V) {
        self.tick += 1;
        if !self.map.contains_key(&key) && self.map.len() >= self.cap {
            if let Some(oldest) = self
                .map
                .iter()
                .min_by_key(|(_, (t, _))| *t)
                .map(|(k, _)| k.clone())
            {
                self.map.remove(&oldest);
            }
        }
        self.map.insert(key, (self.tick, value));
    }
}

struct AggregateRecord {
    local_keys: HashSet<String>,
    last: SystemTime,
}

struct EventLog {
    count: u32,
    first: SystemTime,
    name: String,
}

/// The token bucket of one source and object (`flowcontrol.NewTokenBucketRateLimiter`).
struct Bucket {
    tokens: f64,
    at: SystemTime,
}

/// The correlator. Single-threaded: the sink's thread owns it.
pub struct Correlator {
    aggregates: Lru<AggregateRecord>,
    logs: Lru<EventLog>,
    spam: Lru<Bucket>,
    last_name_nanos: u128,
}

impl Default for Correlator {
    fn default() -> Self {
        Self::new()
    }
}

/// The object and source part shared by every key (`getSpamKey`).
fn object_key(o: &PodRef) -> String {
    format!(
        "kubelet\u{0}{}\u{0}{}\u{0}{}\u{0}{}\u{0}v1",
        o.kind(),
        o.namespace,
        o.name,
        o.uid
    )
}

/// `getEventKey`: source, object (with fieldPath), type, reason and message.
fn event_key(o: &PodRef, type_: &str, reason: &str, message: &str) -> String {
    format!(
        "{}\u{0}{}\u{0}{type_}\u{0}{reason}\u{0}{message}",
        object_key(o),
        o.field_path()
    )
}

impl Correlator {
    pub fn new() -> Self {
        Correlator {
            aggregates: Lru::new(LRU_ENTRIES),
            logs: Lru::new(LRU_ENTRIES),
            spam: Lru::new(LRU_ENTRIES),
            last_name_nanos: 0,
        }
    }

    /// A unique `<object>.<hex unix nanos>` name, as the recorder's `makeEvent`.
    fn name(&mut self, object: &PodRef, at: SystemTime) -> String {
        let nanos = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
            .max(self.last_name_nanos + 1);
        self.last_name_nanos = nanos;
        format!("{}.{nanos:x}", object.name)
    }

    /// Aggregation (`EventAggregate`): the event to send and its counting key.
    fn aggregate(&mut self, e: &Event, now: SystemTime) -> (String, String) {
        let type_ = e.type_.as_str();
        let full_key = event_key(&e.object, type_, &e.reason, &e.message);
        // EventAggregatorByReasonFunc: source, object (no fieldPath), type, reason,
        // reportingController, reportingInstance (ours are fixed per node).
        let agg_key = format!("{}\u{0}{type_}\u{0}{}", object_key(&e.object), e.reason);
        let mut record = match self.aggregates.map.remove(&agg_key) {
            Some((_, r))
                if now.duration_since(r.last).unwrap_or_default() <= AGGREGATE_INTERVAL =>
            {
                r
            }
            _ => AggregateRecord {
                local_keys: HashSet::new(),
                last: now,
            },
        };
        record.local_keys.insert(e.message.clone());
        record.last = now;
        if record.local_keys.len() < AGGREGATE_MAX_EVENTS {
            self.aggregates.insert(agg_key, record);
            return (e.message.clone(), full_key);
        }
        // Do not grow the set beyond the maximum.
        if let Some(any) = record.local_keys.iter().next().cloned() {
            record.local_keys.remove(&any);
        }
        self.aggregates.insert(agg_key.clone(), record);
        (format!("{COMBINED_PREFIX}{}", e.message), agg_key)
    }

    /// The spam filter (`EventSourceObjectSpamFilter.Filter`): true to drop.
    fn spam(&mut self, object: &PodRef, now: SystemTime) -> bool {
        let key = object_key(object);
        let refill = 1.0 / SPAM_REFILL.as_secs_f64();
        let mut bucket = self
            .spam
            .map
            .remove(&key)
            .map(|(_, b)| b)
            .unwrap_or(Bucket {
                tokens: SPAM_BURST,
                at: now,
            });
        let elapsed = now.duration_since(bucket.at).unwrap_or_default();
        bucket.tokens = (bucket.tokens + elapsed.as_secs_f64() * refill).min(SPAM_BURST);
        bucket.at = now;
        let drop = bucket.tokens < 1.0;
        if !drop {
            bucket.tokens -= 1.0;
        }
        self.spam.insert(key, bucket);
        drop
    }

    /// One occurrence of `e` at `now`: aggregated, counted, then spam-filtered
    /// (`EventCorrelate`, in upstream's order).
    pub fn correlate(&mut self, e: &Event, now: SystemTime) -> Correlated {
        let (message, key) = self.aggregate(e, now);
        let previous = self
            .logs
            .get_mut(&key)
            .map(|l| (l.count, l.first, l.name.clone()));
        let (count, first, name) = match previous {
            Some((count, first, name)) => (count.saturating_add(1), first, name),
            None => (1, now, self.name(&e.object, now)),
        };
        self.logs.insert(
            key,
            EventLog {
                count,
                first,
                name: name.clone(),
            },
        );
        if self.spam(&e.object, now) {
            return Correlated::Skip;
        }
        let out = Outgoing {
            object: e.object.clone(),
            type_: e.type_.as_str(),
            reason: e.reason.clone(),
            message,
            name,
            first,
            last: now,
            count,
        };
        if count > 1 {
            Correlated::Update(out)
        } else {
            Correlated::Create(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventType;

    fn event(object: &PodRef, reason: &str, message: &str) -> Event {
        Event {
            seq: 0,
            object: object.clone(),
            type_: EventType::Warning,
            reason: reason.into(),
            message: message.into(),
            first: SystemTime::UNIX_EPOCH,
            last: SystemTime::UNIX_EPOCH,
            count: 1,
        }
    }

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn out(c: Correlated) -> Outgoing {
        match c {
            Correlated::Create(o) | Correlated::Update(o) => o,
            Correlated::Skip => panic!("skipped"),
        }
    }

    /// client-go's eventLogger: the same event again is a PATCH of the first one's object
    /// with count+1, the first timestamp kept.
    #[test]
    fn identical_events_are_counted_on_one_object() {
        let mut c = Correlator::new();
        let p = PodRef::pod("ns", "web", "u1").container("app", false);
        let e = event(&p, "BackOff", "Back-off restarting failed container app");
        let first = c.correlate(&e, t(0));
        let Correlated::Create(first) = first else {
            panic!("first occurrence must be created: {first:?}")
        };
        assert_eq!(first.count, 1);
        let second = c.correlate(&e, t(10));
        let Correlated::Update(second) = second else {
            panic!("a repeat must be a patch: {second:?}")
        };
        assert_eq!(second.name, first.name);
        assert_eq!(second.count, 2);
        assert_eq!(second.first, t(0));
        assert_eq!(second.last, t(10));
        assert_eq!(
            second.patch(),
            json!({"count": 2, "lastTimestamp": "2023-11-14T22:13:30Z",
                   "message": "Back-off restarting failed container app"})
        );
        let j = second.to_json("node1");
        assert_eq!(j["involvedObject"]["fieldPath"], "spec.containers{app}");
        assert_eq!(j["source"]["component"], "kubelet");
        assert_eq!(j["reportingInstance"], "node1");
        assert_eq!(j["metadata"]["namespace"], "ns");
    }

    /// defaultAggregateMaxEvents = 10: the 10th distinct message of one reason within
    /// 10 minutes becomes "(combined from similar events): ..." and is counted from then on.
    #[test]
    fn similar_events_are_aggregated_after_ten_messages() {
        let mut c = Correlator::new();
        let p = PodRef::pod("ns", "web", "u1");
        for i in 0..9 {
            let o = out(c.correlate(&event(&p, "Unhealthy", &format!("probe {i}")), t(i)));
            assert_eq!(o.message, format!("probe {i}"));
        }
        let tenth = c.correlate(&event(&p, "Unhealthy", "probe 9"), t(9));
        let Correlated::Create(tenth) = tenth else {
            panic!("the first aggregate is created: {tenth:?}")
        };
        assert_eq!(tenth.message, "(combined from similar events): probe 9");
        let eleventh = out(c.correlate(&event(&p, "Unhealthy", "probe 10"), t(10)));
        assert_eq!(eleventh.message, "(combined from similar events): probe 10");
        assert_eq!(eleventh.name, tenth.name);
        assert_eq!(eleventh.count, 2);
        // Another reason is not aggregated with these.
        let other = out(c.correlate(&event(&p, "Killing", "Stopping container"), t(11)));
        assert_eq!(other.message, "Stopping container");
    }

    /// defaultAggregateIntervalInSeconds = 600: a similar event more than 10 minutes after
    /// the previous one starts a fresh aggregation record.
    #[test]
    fn aggregation_window_is_ten_minutes_since_the_last_similar_event() {
        let mut c = Correlator::new();
        let p = PodRef::pod("ns", "web", "u1");
        for i in 0..9 {
            c.correlate(&event(&p, "Unhealthy", &format!("m{i}")), t(i));
        }
        let late = out(c.correlate(&event(&p, "Unhealthy", "m9"), t(8 + 601)));
        assert_eq!(late.message, "m9");
    }

    /// defaultSpamBurst = 25, defaultSpamQPS = 1/300: 25 events about one object pass, the
    /// 26th is dropped, one more passes 5 minutes later; another object has its own bucket.
    #[test]
    fn spam_filter_burst_25_refill_one_per_five_minutes() {
        let mut c = Correlator::new();
        let p = PodRef::pod("ns", "web", "u1");
        for i in 0..25 {
            let r = c.correlate(&event(&p, "Pulled", &format!("m{i}")), t(0));
            assert_ne!(r, Correlated::Skip, "event {i} of the burst");
        }
        assert_eq!(
            c.correlate(&event(&p, "Pulled", "m25"), t(0)),
            Correlated::Skip
        );
        assert_eq!(
            c.correlate(&event(&p, "Pulled", "m26"), t(299)),
            Correlated::Skip
        );
        assert_ne!(
            c.correlate(&event(&p, "Pulled", "m27"), t(301)),
            Correlated::Skip
        );
        assert_eq!(
            c.correlate(&event(&p, "Pulled", "m28"), t(302)),
            Correlated::Skip
        );
        let q = PodRef::pod("ns", "db", "u2");
        assert_ne!(
            c.correlate(&event(&q, "Pulled", "x"), t(302)),
            Correlated::Skip
        );
    }

    #[test]
    fn node_events_go_to_default_with_a_node_reference() {
        let mut c = Correlator::new();
        let n = PodRef::node("edge-1");
        let o = out(c.correlate(&event(&n, "Starting", "Starting kubelet."), t(0)));
        let j = o.to_json("edge-1");
        assert_eq!(j["metadata"]["namespace"], "default");
        assert_eq!(
            j["involvedObject"],
            json!({"kind": "Node", "name": "edge-1", "uid": "edge-1", "apiVersion": "v1"})
        );
        assert!(o.name.starts_with("edge-1."));
    }

    #[test]
    fn lru_evicts_the_least_recently_used() {
        let mut l = Lru::new(2);
        l.insert("a".into(), 1);
        l.insert("b".into(), 2);
        assert_eq!(l.get_mut("a").copied(), Some(1));
        l.insert("c".into(), 3);
        assert!(l.get_mut("b").is_none());
        assert!(l.get_mut("a").is_some());
        assert!(l.get_mut("c").is_some());
    }
}
