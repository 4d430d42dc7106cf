//! API-server mode: events to the API server (client-go's event broadcaster and
//! `recordToSink`, our own code). Every event the recorder stores also goes into a bounded
//! queue of [`QUEUE_CAPACITY`] (upstream's `maxQueuedEvents`); when it is full the event is
//! dropped, so a pod worker never waits for the API server. One thread drains the queue
//! through the [`Correlator`] and a client-side rate limit (`eventRecordQPS` /
//! `eventBurst`), POSTs new events to `/api/v1/namespaces/NS/events` and PATCHes repeated
//! ones (strategic merge of count, lastTimestamp, message). An event the API server cannot be
//! reached for is tried [`MAX_TRIES`] times, [`RETRY_SLEEP`] apart (the first sleep a random
//! part of it), holding the queue meanwhile, as `recordToSink` does; an event the server
//! answered with an error is not retried (upstream: "will not retry!").

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant, SystemTime};

use crate::apiclient::client::{ApiClient, ApiError};
use crate::events::{Event, EventSink};

use super::correlator::{Correlated, Correlator, Outgoing};

/// `maxQueuedEvents` of client-go's broadcaster.
pub const QUEUE_CAPACITY: usize = 1000;

/// `maxTriesPerEvent` of client-go's broadcaster.
pub const MAX_TRIES: u32 = 12;

/// `defaultSleepDuration` between two tries of one event.
pub const RETRY_SLEEP: Duration = Duration::from_secs(10);

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
        retry_sleep: RETRY_SLEEP,
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

/// The end of one event's tries.
#[derive(Debug, PartialEq, Eq)]
enum Written {
    /// Written, rejected, or given up after [`MAX_TRIES`].
    Done,
    /// The agent is stopping.
    Stopped,
}

struct Writer {
    client: Arc<ApiClient>,
    node: String,
    correlator: Correlator,
    limiter: RateLimiter,
    retry_sleep: Duration,
}

/// A uniform fraction in [0, 1) for the first retry's sleep (not a secret: std's per-process
/// random hash keys are enough to keep many nodes from retrying in step).
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
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
            if self.write(&out, stop) == Written::Stopped {
                return;
            }
        }
    }

    /// Writes one event, retrying while the API server cannot be reached (`recordToSink`).
    fn write(&self, out: &Correlated, stop: &Receiver<()>) -> Written {
        let (Correlated::Create(o) | Correlated::Update(o)) = out else {
            return Written::Done;
        };
        let object = format!("{}/{}", o.object.event_namespace(), o.object.name);
        for tries in 1..=MAX_TRIES {
            let result = match out {
                Correlated::Create(o) => self.create(o),
                _ => self.update(o),
            };
            let err = match result {
                Ok(()) => return Written::Done,
                // The server answered: something about the event is wrong; never retried.
                Err(e @ (ApiError::Status { .. } | ApiError::Decode { .. } | ApiError::Tls(_))) => {
                    tracing::debug!(object = %object, reason = %o.reason, error = %e,
                        "the API server rejected the event (will not retry)");
                    return Written::Done;
                }
                Err(e) => e,
            };
            if tries == MAX_TRIES {
                tracing::debug!(object = %object, reason = %o.reason, error = %err,
                    "event not written to the API server (retry limit exceeded)");
                break;
            }
            let sleep = if tries == 1 {
                self.retry_sleep.mul_f64(jitter())
            } else {
                self.retry_sleep
            };
            tracing::debug!(object = %object, reason = %o.reason, error = %err, try_ = tries,
                "event not written to the API server (will retry)");
            if !matches!(stop.recv_timeout(sleep), Err(RecvTimeoutError::Timeout)) {
                return Written::Stopped;
            }
        }
        Written::Done
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

    /// A server on loopback that drops the first `refuse` connections without an answer, then
    /// answers every request with `status`; returns its URL and the count of connections.
    fn flaky_server(refuse: usize, status: u16) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = seen.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut c) = conn else { return };
                let n = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if n < refuse {
                    continue; // dropped: the client sees the connection closed
                }
                // The whole request is read before the answer: a close with unread bytes
                // sends a reset, which the client may see before the answer (a transport
                // error, retried: the count would be off).
                read_request(&mut c);
                let body = if status == 201 {
                    r#"{"kind":"Event","apiVersion":"v1","metadata":{"name":"e"}}"#.to_string()
                } else {
                    format!(
                        r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"BadRequest","code":{status}}}"#
                    )
                };
                let _ = write!(
                    c,
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        (url, seen)
    }

    fn read_request(c: &mut std::net::TcpStream) {
        use std::io::Read;
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let Ok(n) = c.read(&mut buf) else { return };
            if n == 0 {
                return;
            }
            got.extend_from_slice(&buf[..n]);
            let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                return;
            }
        }
    }

    fn writer_for(url: &str) -> Writer {
        let kc = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: {url}\ncontexts:\n- name: c\n  context: {{cluster: k, user: u}}\nusers:\n- name: u\n  user: {{token: t}}\n"
        );
        let kc = crate::apiclient::kubeconfig::Kubeconfig::parse(std::path::Path::new("/kc"), &kc)
            .unwrap();
        Writer {
            client: Arc::new(ApiClient::new(&kc, Duration::from_secs(5)).unwrap()),
            node: "node1".into(),
            correlator: Correlator::new(),
            limiter: RateLimiter::new(EventRate { qps: 0, burst: 0 }),
            retry_sleep: Duration::from_millis(20),
        }
    }

    fn event() -> Event {
        Event {
            seq: 0,
            object: crate::events::PodRef::pod("ns", "p", "u"),
            type_: crate::events::EventType::Normal,
            reason: "Pulled".into(),
            message: "m".into(),
            first: SystemTime::UNIX_EPOCH,
            last: SystemTime::UNIX_EPOCH,
            count: 1,
        }
    }

    /// client-go recordToSink: an event the API server cannot be reached for is tried again
    /// (up to maxTriesPerEvent = 12, sleepDuration apart); it is written once the server answers.
    #[test]
    fn an_unreachable_server_is_retried_until_it_answers() {
        let (url, seen) = flaky_server(3, 201);
        let mut w = writer_for(&url);
        let out = w.correlator.correlate(&event(), SystemTime::now());
        let (_tx, stop) = std::sync::mpsc::channel();
        assert_eq!(w.write(&out, &stop), Written::Done);
        assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 4);
    }

    /// recordEvent: a StatusError ("Server rejected event") is never retried; and the tries
    /// stop at maxTriesPerEvent = 12 when the server never answers.
    #[test]
    fn a_rejected_event_is_not_retried_and_tries_are_bounded() {
        let (url, seen) = flaky_server(0, 400);
        let mut w = writer_for(&url);
        let out = w.correlator.correlate(&event(), SystemTime::now());
        let (_tx, stop) = std::sync::mpsc::channel();
        assert_eq!(w.write(&out, &stop), Written::Done);
        assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 1);
        let (url, seen) = flaky_server(usize::MAX, 201);
        let mut w = writer_for(&url);
        w.retry_sleep = Duration::from_millis(1);
        let out = w.correlator.correlate(&event(), SystemTime::now());
        assert_eq!(w.write(&out, &stop), Written::Done);
        assert_eq!(
            seen.load(std::sync::atomic::Ordering::SeqCst),
            MAX_TRIES as usize
        );
    }

    /// Stopping the agent ends a retry wait at once.
    #[test]
    fn stop_ends_the_retry_wait() {
        let (url, _seen) = flaky_server(usize::MAX, 201);
        let mut w = writer_for(&url);
        w.retry_sleep = Duration::from_secs(3600);
        let out = w.correlator.correlate(&event(), SystemTime::now());
        let (tx, stop) = std::sync::mpsc::channel();
        tx.send(()).unwrap();
        assert_eq!(w.write(&out, &stop), Written::Stopped);
    }

    #[test]
    fn a_full_queue_drops_without_blocking() {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Event>(2);
        let sink = queue_sink(tx);
        let e = event();
        for _ in 0..5 {
            sink(&e);
        }
        assert_eq!(rx.try_iter().count(), 2);
    }
}
