//! A bounded in-memory ring of Kubernetes-style events about pods (Pulled, Created, Started,
//! Killing, Unhealthy, BackOff, ...), served as v1 `Event`s on `/api/v1/.../events` and shown by
//! `kubectl describe pod`.
//!
//! As the kubelet's event correlator does, an event identical to one already in the ring (same
//! pod, type, reason and message) is not stored twice: its `count` and `lastTimestamp` are
//! bumped. The ring keeps the most recent [`CAPACITY`] distinct events.
//!
//! In API-server mode a sink ([`EventRecorder::set_sink`]) also gets every occurrence, without
//! blocking: `nodestatus::event_sink` correlates and posts them to the API server. Events can
//! be about this Node too ([`PodRef::node`]).

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use serde_json::{Value, json};

use crate::timeutil::rfc3339;

/// How many distinct events are kept.
pub const CAPACITY: usize = 1000;

/// `Normal` or `Warning`, as in `corev1.EventTypeNormal/EventTypeWarning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The object an event is about: a pod, optionally one of its containers, or the Node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodRef {
    /// The kind of the involved object: false for a Pod, true for this Node (then `name` is
    /// the node name, `uid` too and `namespace` is empty, as the kubelet's `nodeRef`).
    pub node: bool,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Container name, for `involvedObject.fieldPath` (`spec.containers{c}`); empty for the pod.
    pub container: String,
    /// True when `container` is an init container (`spec.initContainers{c}`).
    pub init: bool,
    /// True when `container` is an ephemeral container (`spec.ephemeralContainers{c}`).
    pub ephemeral: bool,
}

impl PodRef {
    pub fn pod(namespace: &str, name: &str, uid: &str) -> PodRef {
        PodRef {
            namespace: namespace.into(),
            name: name.into(),
            uid: uid.into(),
            ..Default::default()
        }
    }

    /// This node, as the kubelet's `nodeRef`: kind Node, name and UID the node name, no
    /// namespace (the event itself goes to `default`, as client-go's recorder does).
    pub fn node(name: &str) -> PodRef {
        PodRef {
            node: true,
            name: name.into(),
            uid: name.into(),
            ..Default::default()
        }
    }

    /// The kind of the involved object.
    pub fn kind(&self) -> &'static str {
        if self.node { "Node" } else { "Pod" }
    }

    /// The namespace the event object lives in: the object's, `default` for the Node.
    pub fn event_namespace(&self) -> &str {
        if self.namespace.is_empty() {
            "default"
        } else {
            &self.namespace
        }
    }

    /// The same pod, about one container.
    pub fn container(&self, container: &str, init: bool) -> PodRef {
        PodRef {
            container: container.into(),
            init,
            ..self.clone()
        }
    }

    pub fn field_path(&self) -> String {
        match (self.container.is_empty(), self.init) {
            (true, _) => String::new(),
            (false, _) if self.ephemeral => {
                format!("spec.ephemeralContainers{{{}}}", self.container)
            }
            (false, false) => format!("spec.containers{{{}}}", self.container),
            (false, true) => format!("spec.initContainers{{{}}}", self.container),
        }
    }
}

impl PodRef {
    /// The v1 `ObjectReference` of `involvedObject`.
    pub fn involved_object(&self) -> Value {
        let mut o = json!({
            "kind": self.kind(),
            "name": self.name,
            "uid": self.uid,
            "apiVersion": "v1",
        });
        if !self.namespace.is_empty() {
            o["namespace"] = Value::String(self.namespace.clone());
        }
        let fp = self.field_path();
        if !fp.is_empty() {
            o["fieldPath"] = Value::String(fp);
        }
        o
    }
}

/// The event object for one container of `pod` (init, regular or ephemeral, from the spec;
/// the field path as pkg/kubelet/container/ref.go `fieldPath` makes it).
pub fn container_ref(pod: &crate::api::Pod, container: &str) -> PodRef {
    let m = &pod.metadata;
    let spec = &pod.spec;
    let init = spec.init_containers.iter().any(|c| c.name == container);
    let ephemeral = !init
        && !spec.containers.iter().any(|c| c.name == container)
        && spec
            .ephemeral_containers
            .iter()
            .any(|c| c.name == container);
    PodRef {
        ephemeral,
        ..PodRef::pod(&m.namespace, &m.name, &m.uid).container(container, init)
    }
}

/// One stored event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub seq: u64,
    pub object: PodRef,
    pub type_: EventType,
    pub reason: String,
    pub message: String,
    pub first: SystemTime,
    pub last: SystemTime,
    pub count: u32,
}

impl Event {
    /// The v1 `Event` JSON; `node` is the reporting host.
    pub fn to_json(&self, node: &str) -> Value {
        let first_nanos = self
            .first
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        // The kubelet names events `<pod>.<hex unix nanos>`; the sequence number keeps names
        // unique when two events share a nanosecond.
        let name = format!("{}.{:x}{:x}", self.object.name, first_nanos, self.seq);
        let involved = self.object.involved_object();
        json!({
            "kind": "Event",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "namespace": self.object.event_namespace(),
                "uid": format!("{:032x}", u128::from(self.seq) ^ first_nanos),
                "creationTimestamp": rfc3339(self.first),
            },
            "involvedObject": involved,
            "reason": self.reason,
            "message": self.message,
            "source": {"component": "kubelet", "host": node},
            "firstTimestamp": rfc3339(self.first),
            "lastTimestamp": rfc3339(self.last),
            "count": self.count,
            "type": self.type_.as_str(),
            "eventTime": null,
            "reportingComponent": "kubelet",
            "reportingInstance": node,
        })
    }
}

#[derive(Default)]
struct Ring {
    events: VecDeque<Event>,
    next_seq: u64,
}

/// Where every recorded occurrence also goes (API-server mode: the event broadcaster's
/// bounded queue). Must not block.
pub type EventSink = Box<dyn Fn(&Event) + Send + Sync>;

/// The recorder. Cheap to call from any thread.
#[derive(Default)]
pub struct EventRecorder {
    ring: Mutex<Ring>,
    sink: std::sync::OnceLock<EventSink>,
}

impl EventRecorder {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends every later occurrence to `sink` as well, after the events already in the ring
    /// (each once, so that what happened before API-server mode started reaches the API
    /// server too). Only the first sink is kept; false if one was already set.
    pub fn set_sink(&self, sink: EventSink) -> bool {
        let ring = self.lock();
        for e in &ring.events {
            sink(e);
        }
        // Set under the ring lock so that no occurrence falls between the replay and the sink.
        let set = self.sink.set(sink).is_ok();
        drop(ring);
        set
    }

    /// Records an event about `object`, now. Also logs it (debug) naming pod and container.
    pub fn record(&self, object: &PodRef, type_: EventType, reason: &str, message: &str) {
        self.record_at(object, type_, reason, message, SystemTime::now());
    }

    pub fn record_at(
        &self,
        object: &PodRef,
        type_: EventType,
        reason: &str,
        message: &str,
        at: SystemTime,
    ) {
        tracing::debug!(
            pod = %format!("{}/{}", object.namespace, object.name),
            container = %object.container,
            reason,
            "event {}: {message}",
            type_.as_str()
        );
        let mut ring = self.lock();
        if let Some(pos) = ring.events.iter().position(|e| {
            e.object == *object && e.type_ == type_ && e.reason == reason && e.message == message
        }) {
            if let Some(mut e) = ring.events.remove(pos) {
                e.count = e.count.saturating_add(1);
                e.last = at;
                if let Some(sink) = self.sink.get() {
                    sink(&Event {
                        count: 1,
                        first: at,
                        ..e.clone()
                    });
                }
                ring.events.push_back(e);
            }
            return;
        }
        let seq = ring.next_seq;
        ring.next_seq += 1;
        if ring.events.len() >= CAPACITY {
            ring.events.pop_front();
        }
        let event = Event {
            seq,
            object: object.clone(),
            type_,
            reason: reason.into(),
            message: message.into(),
            first: at,
            last: at,
            count: 1,
        };
        if let Some(sink) = self.sink.get() {
            sink(&event);
        }
        ring.events.push_back(event);
    }

    /// All events, oldest (by last occurrence) first.
    pub fn list(&self) -> Vec<Event> {
        self.lock().events.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ring_is_bounded_and_dedupes() {
        let r = EventRecorder::new();
        let p = PodRef::pod("default", "web-node1", "u1");
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        r.record_at(
            &p.container("c", false),
            EventType::Normal,
            "Started",
            "Started container c",
            t0,
        );
        r.record_at(&p, EventType::Warning, "BackOff", "x", t0);
        r.record_at(
            &p.container("c", false),
            EventType::Normal,
            "Started",
            "Started container c",
            t0 + Duration::from_secs(5),
        );
        let l = r.list();
        assert_eq!(l.len(), 2);
        assert_eq!(l[1].reason, "Started");
        assert_eq!(l[1].count, 2);
        assert_eq!(l[1].first, t0);
        let j = l[1].to_json("node1");
        assert_eq!(j["involvedObject"]["fieldPath"], "spec.containers{c}");
        assert_eq!(j["count"], 2);
        assert_eq!(j["firstTimestamp"], "2023-11-14T22:13:20Z");
        assert_eq!(j["lastTimestamp"], "2023-11-14T22:13:25Z");
        assert_eq!(j["source"]["host"], "node1");
        assert!(
            l[0].to_json("n")["involvedObject"]
                .get("fieldPath")
                .is_none()
        );

        for i in 0..CAPACITY + 5 {
            r.record(&p, EventType::Normal, "Pulled", &format!("m{i}"));
        }
        let l = r.list();
        assert_eq!(l.len(), CAPACITY);
        assert_eq!(l.last().map(|e| e.message.as_str()), Some("m1004"));
    }
}
