//! The URL source (`staticPodURL`): GET every `check_frequency` with a 10s timeout and the
//! configured extra headers; the body is one Pod or a PodList.
//!
//! - Non-200, transport errors and undecodable bodies are logged and send **no** snapshot: the
//!   last good snapshot stays in force; before the first good body nothing is sent at all, so
//!   podconfig keeps blocking cleanup of pods this source might own.
//! - As in the kubelet, a body with any invalid pod is rejected whole. Once a good snapshot
//!   exists, the rejection is reported as a snapshot holding the last good pods plus the errors.
//! - Unchanged bytes skip all work. Requests are conditional: `If-None-Match` with the last
//!   `ETag`, `If-Modified-Since` with the last `Last-Modified`; a `304 Not Modified` keeps the
//!   previous outcome without transferring the body.
//! - Header values are secrets: never logged (the `Debug` impl redacts them). The URL is shown
//!   (logs, errors, `/manifests/errors`) only through [`redact`]: no userinfo, no query values.

use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use md5::{Digest, Md5};

use super::{
    ManifestError, SeenCache, Snapshot, SourceKind, bounded, build_pods, dedupe_by_name,
    now_rfc3339_nano,
};
use crate::config::naming::{DecodedDoc, MAX_MANIFEST_BYTES, decode_manifest};

/// Default request timeout (the kubelet's).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum UrlSourceError {
    #[error("fetching {url}: {message}")]
    Transport { url: String, message: String },
    #[error("fetching {url}: HTTP status {status}")]
    Status { url: String, status: u16 },
    #[error("reading body of {url}: {message}")]
    Body { url: String, message: String },
}

/// `url` as logs, errors and `/manifests/errors` show it ([`crate::util::redact::redact_url`]:
/// userinfo, every query value and the fragment redacted).
pub fn redact(url: &str) -> String {
    crate::util::redact::redact_url(url)
}

/// A transport error's text with no URL credentials in it: ureq names URIs in some errors
/// (`bad uri: ...`). The configured URL and its query/fragment are replaced by their redacted
/// forms, and any other word that holds a URL (a redirect target, a normalised form) is
/// redacted as one.
fn scrub(message: &str, url: &str) -> String {
    let mut message = message.replace(url, &redact(url));
    if let Some(i) = url.find(['?', '#']) {
        let shown = redact(url);
        let shown_tail = shown.find(['?', '#']).map_or("", |j| &shown[j..]);
        if url.len() - i > 1 {
            message = message.replace(&url[i..], shown_tail);
        }
    }
    message
        .split(' ')
        .map(|word| {
            if word.contains("://") {
                redact(word)
            } else {
                word.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why a fetch failed, without the URL (which may carry credentials; the error's origin names
/// it, redacted) and never with header values.
fn fetch_reason(e: &UrlSourceError) -> String {
    match e {
        UrlSourceError::Transport { message, .. } => {
            format!("fetching the manifest URL failed: {message}")
        }
        UrlSourceError::Status { status, .. } => {
            format!("fetching the manifest URL failed: HTTP status {status}")
        }
        UrlSourceError::Body { message, .. } => {
            format!("reading the manifest URL's body failed: {message}")
        }
    }
}

/// The URL source; start it with [`UrlSource::spawn`].
#[derive(Debug)]
pub struct UrlSource;

/// URL source configuration. Requests time out after [`DEFAULT_TIMEOUT`].
#[derive(Clone)]
pub struct UrlSourceConfig {
    pub url: String,
    /// Extra request headers (`staticPodURLHeader`). Values are secrets.
    pub headers: Vec<(String, String)>,
    pub node_name: String,
    /// Poll period (`httpCheckFrequency`, default 20s).
    pub check_frequency: Duration,
    /// TLS for an https:// URL: a private CA and a client certificate (PEM files).
    pub tls: UrlTlsFiles,
}

/// PEM files for an https:// manifest URL (all optional; without a CA file the built-in web
/// roots verify the server).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UrlTlsFiles {
    pub ca_file: Option<PathBuf>,
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

/// Problems with the TLS files, found at start. Never carries file content.
#[derive(Debug, thiserror::Error)]
// Without the `tls` feature no TLS file is read, so neither variant is built.
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
pub enum UrlTlsError {
    #[error("reading {what} {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what} {}: {reason}", path.display())]
    Invalid {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
}

/// The ureq TLS configuration for `files`, or `None` when none is set.
#[cfg(feature = "tls")]
pub fn tls_config(files: &UrlTlsFiles) -> Result<Option<ureq::tls::TlsConfig>, UrlTlsError> {
    use std::path::Path;
    use ureq::tls::{ClientCert, PemItem, RootCerts, TlsConfig, parse_pem};
    if files == &UrlTlsFiles::default() {
        return Ok(None);
    }
    let read = |what: &'static str, path: &Path| {
        std::fs::read(path).map_err(|source| UrlTlsError::Read {
            what,
            path: path.to_path_buf(),
            source,
        })
    };
    let invalid = |what: &'static str, path: &Path, reason: &str| UrlTlsError::Invalid {
        what,
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    // Items that do not parse are reported by kind only: a key's bytes never reach a message.
    let pem_items = |what: &'static str, path: &Path| {
        let bytes = read(what, path)?;
        parse_pem(&bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| invalid(what, path, "not valid PEM"))
    };
    // The certificates of a PEM file; at least one.
    let certs = |what: &'static str, path: &Path| {
        let certs: Vec<_> = pem_items(what, path)?
            .into_iter()
            .filter_map(|i| match i {
                PemItem::Certificate(c) => Some(c),
                _ => None,
            })
            .collect();
        if certs.is_empty() {
            return Err(invalid(what, path, "no PEM certificate in it"));
        }
        Ok(certs)
    };
    let mut builder = TlsConfig::builder();
    if let Some(path) = &files.ca_file {
        let roots = certs("manifest URL CA file", path)?;
        builder = builder.root_certs(RootCerts::new_with_certs(&roots));
    }
    if let (Some(cert), Some(key)) = (&files.client_cert, &files.client_key) {
        let chain = certs("manifest URL client certificate", cert)?;
        let key_item = pem_items("manifest URL client key", key)?
            .into_iter()
            .find_map(|i| match i {
                PemItem::PrivateKey(k) => Some(k),
                _ => None,
            })
            .ok_or_else(|| invalid("manifest URL client key", key, "no PEM private key in it"))?;
        builder = builder.client_cert(Some(ClientCert::new_with_certs(&chain, key_item)));
    }
    Ok(Some(builder.build()))
}

/// The HTTP agent of the URL source (TLS files read and checked here, at start).
fn build_agent(cfg: &UrlSourceConfig) -> Result<ureq::Agent, UrlTlsError> {
    let builder = ureq::Agent::config_builder()
        .timeout_global(Some(DEFAULT_TIMEOUT))
        .http_status_as_error(false);
    #[cfg(feature = "tls")]
    let builder = match tls_config(&cfg.tls)? {
        Some(tls) => builder.tls_config(tls),
        None => builder,
    };
    #[cfg(not(feature = "tls"))]
    let _ = &cfg.tls;
    Ok(builder.build().into())
}

impl UrlSourceConfig {
    #[cfg(test)]
    pub fn new(url: impl Into<String>, node_name: impl Into<String>) -> Self {
        UrlSourceConfig {
            url: url.into(),
            headers: Vec::new(),
            node_name: node_name.into(),
            check_frequency: Duration::from_secs(20),
            tls: UrlTlsFiles::default(),
        }
    }
}

impl std::fmt::Debug for UrlSourceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<String> = self
            .headers
            .iter()
            .map(|(k, _)| format!("{k}: <redacted>"))
            .collect();
        f.debug_struct("UrlSourceConfig")
            .field("url", &redact(&self.url))
            .field("headers", &headers)
            .field("node_name", &self.node_name)
            .field("check_frequency", &self.check_frequency)
            .finish()
    }
}

/// Running URL source; dropping it (or [`UrlSourceHandle::stop`]) ends its thread (waiting at
/// most for one in-flight request, bounded by the timeout).
pub struct UrlSourceHandle {
    ctl: Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl UrlSourceHandle {
    #[cfg(test)]
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let _ = self.ctl.send(());
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("url source thread panicked");
            }
        }
    }
}

impl Drop for UrlSourceHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl UrlSource {
    /// Start polling; the first GET happens right away on the new thread.
    pub fn spawn(cfg: UrlSourceConfig, tx: Sender<Snapshot>) -> std::io::Result<UrlSourceHandle> {
        let (ctl, rx) = mpsc::channel::<()>();
        let agent = build_agent(&cfg).map_err(std::io::Error::other)?;
        let thread = std::thread::Builder::new()
            .name("source-url".into())
            .spawn(move || Poller::new(cfg, tx, agent).run(rx))?;
        Ok(UrlSourceHandle {
            ctl,
            thread: Some(thread),
        })
    }
}

/// What a GET brought.
enum Fetched {
    /// A 200 with its body and the validators to send next time.
    Body {
        body: Vec<u8>,
        validators: Validators,
    },
    /// A 304 to our conditional request: the body is the one we had.
    NotModified,
}

/// The cache validators of the last 200 answer, sent back as `If-None-Match` and
/// `If-Modified-Since`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Validators {
    etag: Option<String>,
    last_modified: Option<String>,
}

impl Validators {
    fn from_response(resp: &ureq::http::Response<ureq::Body>) -> Self {
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        Validators {
            etag: header("etag"),
            last_modified: header("last-modified"),
        }
    }

    fn any(&self) -> bool {
        self.etag.is_some() || self.last_modified.is_some()
    }
}

struct Poller {
    cfg: UrlSourceConfig,
    /// The URL as logs and errors show it ([`redact`]).
    shown_url: String,
    tx: Sender<Snapshot>,
    agent: ureq::Agent,
    last_body: Option<[u8; 16]>,
    /// Validators of the last body (kept across failures: a 304 then means that body).
    validators: Validators,
    /// The errors of the last body (empty when it was good): what a 304 repeats.
    body_errors: Vec<ManifestError>,
    last_good: Option<Snapshot>,
    last_sent: Option<Snapshot>,
    seen: SeenCache,
}

impl Poller {
    fn new(cfg: UrlSourceConfig, tx: Sender<Snapshot>, agent: ureq::Agent) -> Self {
        Poller {
            shown_url: redact(&cfg.url),
            cfg,
            tx,
            agent,
            last_body: None,
            validators: Validators::default(),
            body_errors: Vec::new(),
            last_good: None,
            last_sent: None,
            seen: SeenCache::default(),
        }
    }

    fn run(mut self, rx: Receiver<()>) {
        tracing::info!(url = %self.shown_url, every = ?self.cfg.check_frequency, "url source started");
        loop {
            if !self.poll_once() {
                return;
            }
            match rx.recv_timeout(self.cfg.check_frequency) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn fetch(&self) -> Result<Fetched, UrlSourceError> {
        let url = &self.cfg.url;
        let mut req = self.agent.get(url);
        for (k, v) in &self.cfg.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        if let Some(etag) = &self.validators.etag {
            req = req.header("If-None-Match", etag.as_str());
        }
        if let Some(date) = &self.validators.last_modified {
            req = req.header("If-Modified-Since", date.as_str());
        }
        let mut resp = req.call().map_err(|e| UrlSourceError::Transport {
            url: self.shown_url.clone(),
            message: scrub(&e.to_string(), url),
        })?;
        let status = resp.status().as_u16();
        // A 304 only answers a conditional request; to any other it is just a bad status.
        if status == 304 && self.validators.any() {
            return Ok(Fetched::NotModified);
        }
        if status != 200 {
            return Err(UrlSourceError::Status {
                url: self.shown_url.clone(),
                status,
            });
        }
        let validators = Validators::from_response(&resp);
        let body = resp
            .body_mut()
            .with_config()
            .limit(MAX_MANIFEST_BYTES as u64)
            .read_to_vec()
            .map_err(|e| UrlSourceError::Body {
                url: self.shown_url.clone(),
                message: scrub(&e.to_string(), url),
            })?;
        Ok(Fetched::Body { body, validators })
    }

    /// `errors` beside the pods still in force (the last good snapshot); before any good
    /// snapshot, the errors alone and the source not ready.
    fn with_errors(&self, errors: Vec<ManifestError>) -> Snapshot {
        match &self.last_good {
            Some(good) => Snapshot {
                source: SourceKind::Http,
                pods: good.pods.clone(),
                errors,
                ready: true,
            },
            None => Snapshot {
                source: SourceKind::Http,
                pods: Vec::new(),
                errors,
                ready: false,
            },
        }
    }

    /// Returns false when the receiving side is gone.
    fn poll_once(&mut self) -> bool {
        let snap = match self.fetch() {
            Err(e) => {
                // Logged once, by the receiver of the snapshot below (sent only when the
                // failure changes), not on every poll.
                tracing::debug!(error = %e, "url source: keeping the previous snapshot");
                // The next good body is processed again even if unchanged (it clears this).
                self.last_body = None;
                // Report the failure beside the pods still in force; before the first good
                // snapshot as a not-ready snapshot (an empty ready one would let orphan cleanup
                // kill pods this source started before a restart).
                self.with_errors(vec![ManifestError {
                    origin: self.shown_url.clone(),
                    field: String::new(),
                    reason: fetch_reason(&e),
                }])
            }
            // The server still has the body we decoded last: its outcome stands (after a
            // failure this clears the failure).
            Ok(Fetched::NotModified) => self.with_errors(self.body_errors.clone()),
            Ok(Fetched::Body { body, validators }) => {
                self.validators = validators;
                let digest: [u8; 16] = Md5::digest(&body).into();
                if self.last_body == Some(digest) {
                    return true;
                }
                self.last_body = Some(digest);
                match parse_body(
                    &body,
                    &self.cfg.url,
                    &self.cfg.node_name,
                    &now_rfc3339_nano(),
                ) {
                    Ok(mut snap) => {
                        self.seen.stabilize(&mut snap.pods);
                        self.last_good = Some(snap.clone());
                        self.body_errors.clear();
                        snap
                    }
                    Err(errors) => {
                        // Logged by the receiver of the snapshot (once per change).
                        self.body_errors = errors.clone();
                        self.with_errors(errors)
                    }
                }
            }
        };
        if self
            .last_sent
            .as_ref()
            .is_some_and(|l| l.same_content(&snap))
        {
            return true;
        }
        tracing::info!(url = %self.shown_url, pods = snap.pods.len(), errors = snap.errors.len(),
            "url source: sending snapshot");
        if self.tx.send(snap.clone()).is_err() {
            return false;
        }
        self.last_sent = Some(snap);
        true
    }
}

/// Decode a URL body into a complete snapshot, or the errors that reject it whole.
pub fn parse_body(
    body: &[u8],
    url: &str,
    node_name: &str,
    seen: &str,
) -> Result<Snapshot, Vec<ManifestError>> {
    // Pods and errors name the URL redacted; the UID hashes the exact URL (as before).
    let shown = redact(url);
    let raws = match decode_manifest(body, &shown).map_err(|e| vec![bounded(e)])? {
        DecodedDoc::Pod(p) => vec![(*p, url.to_string(), String::new())],
        DecodedDoc::PodList(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, p)| (p, url.to_string(), format!("items[{i}].")))
            .collect(),
    };
    let mut errors = Vec::new();
    let pods = build_pods(
        raws,
        node_name,
        SourceKind::Http,
        seen,
        |_| shown.clone(),
        &mut errors,
    );
    let pods = dedupe_by_name(pods, &mut errors);
    if errors.is_empty() {
        Ok(Snapshot {
            source: SourceKind::Http,
            pods,
            errors,
            ready: true,
        })
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    const TIMEOUT: Duration = Duration::from_secs(10);

    fn pod_json(name: &str, image: &str) -> String {
        format!(
            r#"{{"metadata":{{"name":"{name}"}},"spec":{{"containers":[{{"name":"c","image":"{image}"}}]}}}}"#
        )
    }

    fn list(items: &[String]) -> String {
        format!(
            r#"{{"apiVersion":"v1","kind":"PodList","items":[{}]}}"#,
            items.join(",")
        )
    }

    #[derive(Default)]
    struct Served {
        status: u16,
        body: String,
        requests: usize,
        auth_seen: Vec<String>,
    }

    fn serve() -> (String, Arc<Mutex<Served>>, Arc<tiny_http::Server>) {
        let server = match tiny_http::Server::http("127.0.0.1:0") {
            Ok(s) => Arc::new(s),
            Err(e) => panic!("{e}"),
        };
        let port = server.server_addr().to_ip().map(|a| a.port()).unwrap_or(0);
        let state = Arc::new(Mutex::new(Served {
            status: 200,
            ..Default::default()
        }));
        let (s2, st2) = (server.clone(), state.clone());
        std::thread::spawn(move || {
            for req in s2.incoming_requests() {
                let (status, body) = {
                    let Ok(mut st) = st2.lock() else { return };
                    st.requests += 1;
                    for h in req.headers() {
                        if h.field.equiv("X-Auth") {
                            st.auth_seen.push(h.value.to_string());
                        }
                    }
                    (st.status, st.body.clone())
                };
                let _ =
                    req.respond(tiny_http::Response::from_string(body).with_status_code(status));
            }
        });
        (format!("http://127.0.0.1:{port}/pods"), state, server)
    }

    fn set(state: &Arc<Mutex<Served>>, status: u16, body: &str) {
        if let Ok(mut st) = state.lock() {
            st.status = status;
            st.body = body.to_string();
        }
    }

    fn requests(state: &Arc<Mutex<Served>>) -> usize {
        state.lock().map(|s| s.requests).unwrap_or(0)
    }

    /// Wait until the server has answered `n` more requests (the poller then had its chance).
    fn wait_requests(state: &Arc<Mutex<Served>>, n: usize) {
        let target = requests(state) + n;
        let deadline = std::time::Instant::now() + TIMEOUT;
        while requests(state) < target {
            assert!(
                std::time::Instant::now() < deadline,
                "server got no requests"
            );
            std::thread::yield_now();
        }
    }

    /// What the conditional server answered.
    #[derive(Default)]
    struct Conditional {
        status: u16,
        body: String,
        etag: Option<String>,
        last_modified: Option<String>,
        /// 200s with the body, and 304s.
        full: usize,
        not_modified: usize,
        /// Every request, answered or not (the poller had its chance).
        requests: usize,
    }

    /// A server honouring `If-None-Match` / `If-Modified-Since` as a file server does.
    fn serve_conditional() -> (String, Arc<Mutex<Conditional>>, Arc<tiny_http::Server>) {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("server"));
        let port = server.server_addr().to_ip().map(|a| a.port()).unwrap_or(0);
        let state = Arc::new(Mutex::new(Conditional {
            status: 200,
            ..Default::default()
        }));
        let (s2, st2) = (server.clone(), state.clone());
        std::thread::spawn(move || {
            for req in s2.incoming_requests() {
                let header = |name: &'static str| {
                    req.headers()
                        .iter()
                        .find(|h| h.field.equiv(name))
                        .map(|h| h.value.to_string())
                };
                let (inm, ims) = (header("If-None-Match"), header("If-Modified-Since"));
                let resp = {
                    let Ok(mut st) = st2.lock() else { return };
                    st.requests += 1;
                    let fresh = match (&inm, &st.etag, &ims, &st.last_modified) {
                        (Some(a), Some(b), _, _) => a == b,
                        (None, _, Some(a), Some(b)) => a == b,
                        _ => false,
                    };
                    if st.status != 200 {
                        tiny_http::Response::from_string("oops").with_status_code(st.status)
                    } else if fresh {
                        st.not_modified += 1;
                        tiny_http::Response::from_string("").with_status_code(304)
                    } else {
                        st.full += 1;
                        let mut r = tiny_http::Response::from_string(st.body.clone());
                        for (name, value) in
                            [("ETag", &st.etag), ("Last-Modified", &st.last_modified)]
                        {
                            if let Some(v) = value {
                                if let Ok(h) = tiny_http::Header::from_bytes(name, v.as_bytes()) {
                                    r.add_header(h);
                                }
                            }
                        }
                        r
                    }
                };
                let _ = req.respond(resp);
            }
        });
        (format!("http://127.0.0.1:{port}/pods"), state, server)
    }

    /// Waits until the conditional server has seen `n` more requests.
    fn wait_conditional(state: &Arc<Mutex<Conditional>>, n: usize) {
        let count = || state.lock().map(|s| s.requests).unwrap_or(0);
        let target = count() + n;
        let deadline = std::time::Instant::now() + TIMEOUT;
        while count() < target {
            assert!(
                std::time::Instant::now() < deadline,
                "server got no requests"
            );
            std::thread::yield_now();
        }
    }

    fn counts(state: &Arc<Mutex<Conditional>>) -> (usize, usize) {
        state
            .lock()
            .map(|s| (s.full, s.not_modified))
            .unwrap_or_default()
    }

    #[test]
    fn unchanged_bodies_are_not_downloaded_again() {
        let (url, state, server) = serve_conditional();
        if let Ok(mut st) = state.lock() {
            st.body = list(&[pod_json("a", "x:1")]);
            st.etag = Some("\"v1\"".into());
        }
        let (tx, rx) = mpsc::channel();
        let mut cfg = UrlSourceConfig::new(url, "n");
        cfg.check_frequency = Duration::from_millis(20);
        let handle = UrlSource::spawn(cfg, tx).expect("spawn");
        let snap = rx.recv_timeout(TIMEOUT).expect("first snapshot");
        assert_eq!(snap.pods.len(), 1);
        // Polls with the ETag: 304s, no body, nothing sent.
        wait_conditional(&state, 5);
        let (full, not_modified) = counts(&state);
        assert_eq!(full, 1, "the unchanged body was downloaded again");
        assert!(not_modified >= 4, "{not_modified}");
        assert!(rx.try_recv().is_err());

        // A new version (new ETag) is downloaded once and sent.
        if let Ok(mut st) = state.lock() {
            st.body = list(&[pod_json("a", "x:2")]);
            st.etag = Some("\"v2\"".into());
        }
        let snap = rx.recv_timeout(TIMEOUT).expect("new version");
        assert_eq!(snap.pods[0].pod.spec.containers[0].image, "x:2");
        wait_conditional(&state, 3);
        assert_eq!(counts(&state).0, 2);

        // A failure is reported; the 304 after it (same body) clears it without a download.
        if let Ok(mut st) = state.lock() {
            st.status = 503;
        }
        let snap = rx.recv_timeout(TIMEOUT).expect("failure");
        assert!(snap.errors[0].reason.contains("503"), "{:?}", snap.errors);
        assert_eq!(snap.pods.len(), 1);
        if let Ok(mut st) = state.lock() {
            st.status = 200;
        }
        let snap = rx.recv_timeout(TIMEOUT).expect("recovered");
        assert!(
            snap.errors.is_empty() && snap.pods.len() == 1,
            "{:?}",
            snap.errors
        );
        assert_eq!(
            counts(&state).0,
            2,
            "recovery downloaded the unchanged body"
        );

        // A server with Last-Modified only: If-Modified-Since.
        if let Ok(mut st) = state.lock() {
            st.body = list(&[pod_json("a", "x:3")]);
            st.etag = None;
            st.last_modified = Some("Wed, 21 Oct 2026 07:28:00 GMT".into());
        }
        let snap = rx.recv_timeout(TIMEOUT).expect("third version");
        assert_eq!(snap.pods[0].pod.spec.containers[0].image, "x:3");
        wait_conditional(&state, 3);
        assert_eq!(counts(&state).0, 3, "If-Modified-Since was not honoured");
        assert!(rx.try_recv().is_err());
        handle.stop();
        server.unblock();
    }

    #[test]
    fn query_credentials_are_redacted_everywhere_but_the_request() {
        assert_eq!(
            redact("https://u:pw@h:8443/p?token=abc&X-Amz-Signature=def&page=2&bare#frag"),
            "https://<redacted>@h:8443/p?token=<redacted>&X-Amz-Signature=<redacted>\
             &page=<redacted>&<redacted>#<redacted>"
        );
        assert_eq!(redact("http://h/p"), "http://h/p");
        assert_eq!(
            scrub(
                "bad uri: http://h/p?sig=s3cret#x and ?sig=s3cret#x, to https://u:pw@o/x?k=v",
                "http://h/p?sig=s3cret#x"
            ),
            "bad uri: http://h/p?sig=<redacted>#<redacted> and ?sig=<redacted>#<redacted>, \
             to https://<redacted>@o/x?k=<redacted>"
        );

        // Against a server: errors and pods name the URL without the token (the log lines use
        // the same redacted form: tests/integration/security.rs checks a real nanolet's
        // log).
        let (url, state, server) = serve_conditional();
        let url = format!("{url}?access_token=s3cret");
        let mut cfg = UrlSourceConfig::new(url.clone(), "n");
        cfg.check_frequency = Duration::from_millis(20);
        assert!(!format!("{cfg:?}").contains("s3cret"));
        let (tx, rx) = mpsc::channel();
        let agent = build_agent(&cfg).expect("agent");
        let mut poller = Poller::new(cfg, tx, agent);
        let shown = redact(&url);
        assert!(shown.ends_with("?access_token=<redacted>"), "{shown}");
        assert_eq!(poller.shown_url, shown);
        if let Ok(mut st) = state.lock() {
            st.status = 500;
        }
        assert!(poller.poll_once());
        if let Ok(mut st) = state.lock() {
            st.status = 200;
            st.body = list(&[pod_json("a", "x:1"), pod_json("Bad", "x:1")]);
        }
        assert!(poller.poll_once());
        if let Ok(mut st) = state.lock() {
            st.body = list(&[pod_json("a", "x:1")]);
        }
        assert!(poller.poll_once());
        let snaps: Vec<Snapshot> = rx.try_iter().collect();
        assert_eq!(snaps.len(), 3);
        for e in snaps.iter().flat_map(|s| &s.errors) {
            assert_eq!(e.origin, shown);
            assert!(!e.reason.contains("s3cret"), "{e}");
        }
        assert_eq!(snaps[2].pods[0].origin, shown);
        // The UID still hashes the exact URL (pods keep their identity across this change).
        let other = parse_body(
            list(&[pod_json("a", "x:1")]).as_bytes(),
            &url.replace("s3cret", "other"),
            "n",
            "t",
        )
        .expect("parse");
        assert_ne!(
            other.pods[0].pod.metadata.uid,
            snaps[2].pods[0].pod.metadata.uid
        );
        // A transport error names the URL redacted too.
        let e = UrlSourceError::Transport {
            url: redact("http://127.0.0.1:1/p?token=s3cret"),
            message: scrub(
                "bad uri: http://127.0.0.1:1/p?token=s3cret",
                "http://127.0.0.1:1/p?token=s3cret",
            ),
        };
        assert!(!e.to_string().contains("s3cret"), "{e}");
        server.unblock();
    }

    #[test]
    fn debug_redacts_headers() {
        let mut cfg = UrlSourceConfig::new("http://x/", "n");
        cfg.headers
            .push(("Authorization".into(), "Bearer s3cret".into()));
        let s = format!("{cfg:?}");
        assert!(s.contains("Authorization") && !s.contains("s3cret"), "{s}");
    }

    #[test]
    fn parse_body_rules() {
        let body = list(&[pod_json("a", "x:1"), pod_json("b", "x:1")]);
        let snap =
            parse_body(body.as_bytes(), "http://u", "N1", "t").unwrap_or_else(|e| panic!("{e:?}"));
        let names: Vec<_> = snap
            .pods
            .iter()
            .map(|p| p.pod.metadata.name.as_str())
            .collect();
        assert_eq!(names, vec!["a-n1", "b-n1"]);
        assert_eq!(snap.pods[0].origin, "http://u");
        // One bad item rejects the whole body, the error names the item.
        let body = list(&[pod_json("a", "x:1"), pod_json("B", "x:1")]);
        let errs = parse_body(body.as_bytes(), "http://u", "n", "t")
            .err()
            .unwrap_or_default();
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "items[1].metadata.name");
        assert_eq!(errs[0].origin, "http://u");
        // Duplicates within the list.
        let body = list(&[pod_json("a", "x:1"), pod_json("a", "x:2")]);
        assert!(parse_body(body.as_bytes(), "http://u", "n", "t").is_err());
        // A single pod.
        let single = pod_json("a", "x:1").replacen('{', r#"{"apiVersion":"v1","kind":"Pod","#, 1);
        assert_eq!(
            parse_body(single.as_bytes(), "http://u", "n", "t").map(|s| s.pods.len()),
            Ok(1)
        );
    }

    #[test]
    fn polling_against_local_server() {
        let (url, state, server) = serve();
        set(&state, 404, "not found");
        let (tx, rx) = mpsc::channel();
        let mut cfg = UrlSourceConfig::new(url.clone(), "node1");
        cfg.check_frequency = Duration::from_millis(30);
        cfg.headers.push(("X-Auth".into(), "token-123".into()));
        let handle = match UrlSource::spawn(cfg, tx) {
            Ok(h) => h,
            Err(e) => panic!("{e}"),
        };
        // 404 before any good body: one not-ready snapshot with the error only (repeated
        // failures are not re-sent); the source does not count as ready.
        wait_requests(&state, 2);
        let first = rx.recv_timeout(TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
        assert!(!first.ready && first.pods.is_empty());
        assert_eq!(first.errors.len(), 1);
        assert!(first.errors[0].reason.contains("404"), "{:?}", first.errors);
        assert!(rx.try_recv().is_err());

        set(
            &state,
            200,
            &list(&[pod_json("a", "x:1"), pod_json("b", "x:1")]),
        );
        let snap = rx.recv_timeout(TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(snap.source, SourceKind::Http);
        assert_eq!(snap.pods.len(), 2);
        assert!(snap.errors.is_empty());
        assert!(
            state
                .lock()
                .map(|s| s.auth_seen.iter().all(|v| v == "token-123") && !s.auth_seen.is_empty())
                .unwrap_or(false)
        );

        // Unchanged body: polled, nothing sent.
        wait_requests(&state, 3);
        assert!(rx.try_recv().is_err());

        // 500: the last good pods stay in force, with the failure reported beside them (once,
        // not on every poll).
        set(&state, 500, "oops");
        let snap = rx.recv_timeout(TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(snap.pods.len(), 2);
        assert_eq!(snap.errors.len(), 1);
        assert!(
            snap.errors[0].reason.contains("HTTP status 500"),
            "{:?}",
            snap.errors
        );
        assert!(!snap.errors[0].reason.contains("token-123"));
        wait_requests(&state, 3);
        assert!(rx.try_recv().is_err());

        // Back to a (changed) good body.
        set(&state, 200, &list(&[pod_json("a", "x:2")]));
        let snap = rx.recv_timeout(TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(snap.pods.len(), 1);
        assert_eq!(snap.pods[0].pod.spec.containers[0].image, "x:2");

        // Invalid body after a good one: last good pods plus the errors.
        set(
            &state,
            200,
            &list(&[pod_json("a", "x:3"), pod_json("Bad", "x:3")]),
        );
        let snap = rx.recv_timeout(TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(snap.pods.len(), 1);
        assert_eq!(snap.pods[0].pod.spec.containers[0].image, "x:2");
        assert_eq!(snap.errors.len(), 1);

        handle.stop();
        server.unblock();
    }
}
