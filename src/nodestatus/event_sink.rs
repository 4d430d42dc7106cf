//! API-server mode: events to the API server (client-go's event broadcaster and
//! `recordToSink`, our own code). Every event the recorder stores also goes into a bounded
//! queue of [`QUEUE_CAPACITY`] (upstream's `maxQueuedEvents`); when it is full the event is
//! dropped, so a pod worker never waits for the API server. One thread drains the queue
//! through the [`Correlator`] and a client-side rate limit (`eventRecordQPS` /
//! `eventBurst`), POSTs new events to `/api/v1/namespaces/NS/events` and PATCHes repeated
//! ones (strategic merge of count, lastTimestamp, message). Offline, an event that cannot be
//! written is dropped after one attempt (the kubelet retries 12 times, 10 s apart; a queue
//! that must not grow does not wait).

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant, SystemTime};

use crate::apiclient::client::{ApiClient, ApiError};
use crate::events::{Event, EventSink};

use super::correlator::{Correlated, Correlator, Outgoing};

/// `maxQueuedEvents` of client-go's broadcaster.
pub const QUEUE_CAPACITY: usize = 1000;

/// The client-side limit of event writes: `eventRecordQPS` (0: none) and `eventBurst`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EventRate {
    pub qps: u32,
    pub burst: u32,
}

/// A token bucket over the monotonic clock (client-go's `flowcontrol` rate limiter).
struct RateLimiter {
    rate: EventRate,
    tokens: f64,
    at: Instant,
}

impl RateLimiter {
    fn new(rate: EventRate) -> Self {
        RateLimiter {
            rate,
            tokens: f64::from(rate.burst.max(1)),
            at: Instant::now(),
        }
    }

    /// How long to wait before the next write (and takes its token).
    fn reserve(&mut self, now: Instant) -> Duration {
        if self.rate.qps == 0 {
            return Duration::ZERO;
        }
        let qps = f64::from(self.rate.qps);
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * qps).min(f64::from(self.rate.burst.max(1)));
        self.at = now;
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / qps)
        }
    }
}

/// Starts the writer thread and returns the recorder's sink (the queue's sending side).
pub fn start(
    client: Arc<ApiClient>,
    node_name: &str,
    rate: EventRate,
    stop: Receiver<()>,
) -> std::io::Result<EventSink> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Event>(QUEUE_CAPACITY);
    let writer = Writer {
        client,
        node: node_name.to_string(),
        correlator: Correlator::new(),
        limiter: RateLimiter::new(rate),
    };
    std::thread::Builder::new()
        .name("api-events".into())
        .stack_size(512 * 1024)
        .spawn(move || writer.run(&rx, &stop))?;
    Ok(queue_sink(tx))
}

/// The sink: a non-blocking send; a full queue drops the event (logged at debug).
fn queue_sink(tx: SyncSender<Event>) -> EventSink {
    Box::new(move |e: &Event| match tx.try_send(e.clone()) {
        Ok(()) | Err(TrySendError::Disconnected(_)) => {}
        Err(TrySendError::Full(e)) => tracing::debug!(
            pod = %format!("{}/{}", e.object.namespace, e.object.name),
            reason = %e.reason,
            "event queue full ({QUEUE_CAPACITY}): event to the API server dropped"
        ),
    })
}

struct Writer {
    client: Arc<ApiClient>,
    node: String,
    correlator: Correlator,
    limiter: RateLimiter,
}

impl Writer {
    fn run(mut self, rx: &Receiver<Event>, stop: &Receiver<()>) {
        loop {
            match stop.try_recv() {
                Ok(()) | Err(std::sync::mpsc::TryRecvError::Disconnected) => return,
                Err(std::sync::mpsc::TryRecvError::Empty) => {}
            }
            let e = match rx.recv_timeout(Duration::from_secs(1)) {
                Ok(e) => e,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return,
            };
            let out = self.correlator.correlate(&e, SystemTime::now());
            let wait = match out {
                Correlated::Skip => {
                    tracing::debug!(pod = %e.object.name, reason = %e.reason, "event dropped by the spam filter");
                    continue;
                }
                _ => self.limiter.reserve(Instant::now()),
            };
            if !wait.is_zero() && stop.recv_timeout(wait).is_ok() {
                return;
            }
            self.write(out);
        }
    }

    fn write(&self, out: Correlated) {
        let result = match &out {
            Correlated::Skip => return,
            Correlated::Create(o) => self.create(o),
            Correlated::Update(o) => self.update(o),
        };
        if let Err(err) = result {
            let (Correlated::Create(o) | Correlated::Update(o)) = &out else {
                return;
            };
            tracing::debug!(
                object = %format!("{}/{}", o.object.event_namespace(), o.object.name),
                reason = %o.reason,
                error = %err,
                "event not written to the API server (dropped)"
            );
        }
    }

    fn collection(o: &Outgoing) -> String {
        format!("/api/v1/namespaces/{}/events", o.object.event_namespace())
    }

    fn create(&self, o: &Outgoing) -> Result<(), ApiError> {
        match self
            .client
            .post(&Self::collection(o), &o.to_json(&self.node))
        {
            // The same name written before (a retry that did reach the server).
            Err(e) if e.status() == Some(409) => Ok(()),
            r => r.map(|_| ()),
        }
    }

    /// PATCH of a repeat; the server lost the object (expired, 404): create it again, as
    /// `recordEvent` does.
    fn update(&self, o: &Outgoing) -> Result<(), ApiError> {
        let path = format!("{}/{}", Self::collection(o), o.name);
        match self
            .client
            .patch(&path, "application/strategic-merge-patch+json", &o.patch())
        {
            Err(e) if e.status() == Some(404) => self.create(o),
            r => r.map(|_| ()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// eventRecordQPS 50 / eventBurst 100 (the kubelet's defaults): 100 writes at once, the
    /// 101st waits 1/50 s; qps 0 is no limit.
    #[test]
    fn rate_limiter_burst_then_qps() {
        let mut l = RateLimiter::new(EventRate {
            qps: 50,
            burst: 100,
        });
        let now = l.at;
        for i in 0..100 {
            assert_eq!(l.reserve(now), Duration::ZERO, "write {i}");
        }
        let w = l.reserve(now);
        assert!((w.as_secs_f64() - 0.02).abs() < 1e-6, "{w:?}");
        let mut free = RateLimiter::new(EventRate { qps: 0, burst: 0 });
        for _ in 0..1000 {
            assert_eq!(free.reserve(now), Duration::ZERO);
        }
    }

    #[test]
    fn a_full_queue_drops_without_blocking() {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Event>(2);
        let sink = queue_sink(tx);
        let e = Event {
            seq: 0,
            object: crate::events::PodRef::pod("ns", "p", "u"),
            type_: crate::events::EventType::Normal,
            reason: "Pulled".into(),
            message: "m".into(),
            first: SystemTime::UNIX_EPOCH,
            last: SystemTime::UNIX_EPOCH,
            count: 1,
        };
        for _ in 0..5 {
            sink(&e);
        }
        assert_eq!(rx.try_iter().count(), 2);
    }
}
