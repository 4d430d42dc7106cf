//! The kubelet server on `--port` (default 10250): HTTPS (rustls, blocking), every request
//! authenticated and authorized by [`crate::server::auth`], the kubelet's paths.
//!
//! Transport, bounded like the read-only port: one accept thread (epoll on the listener and a
//! stop eventfd) and one thread per connection, at most [`MAX_CONNECTIONS`]; at the cap the
//! oldest connection still in its TLS handshake or request head is closed, and a new one is
//! refused when every connection is busy. The TLS handshake plus the request head must arrive
//! within [`HEAD_TIMEOUT`]; responses are written within [`WRITE_TIMEOUT`]; one request per
//! connection (`Connection: close`, so no idle keep-alive is held). Request heads and bodies
//! have the read-only port's limits (`httpd::Limits`, `httpd::parse_head`). Long-lived
//! answers (log `follow`, exec/attach/port-forward) count against [`MAX_STREAMS`].
//!
//! Client certificates are requested, not required (Go's `tls.RequestClientCert`, as the
//! kubelet): the handshake accepts any certificate whose key signs the handshake, and the
//! request is authenticated only if it chains to `--client-ca-file` with the client-auth usage
//! (rustls' `WebPkiClientVerifier`), so a certificate from another CA gets the kubelet's 401,
//! not a TLS alert. A certificate of the device's local client CA (`nanolet
//! admin-kubeconfig`, `LocalAdmins`) is a local administrator's, allowed without the
//! authorizer; so certificates are requested also without `--client-ca-file`.
//!
//! Endpoints: `/pods`, `/healthz`, `/configz`, `/stats/summary`, `/metrics`,
//! `/metrics/{resource,cadvisor,probes}` and the kubectl-compatible `/api` subset (the
//! read-only port's routing), `/containerLogs/{ns}/{pod}/{container}`, `/run/...` (ExecSync),
//! and the streaming routes `/exec`, `/attach`, `/portForward` (CRI Exec/Attach/PortForward,
//! the upgrade proxied to the runtime's streaming server by [`super::stream`]), and kubectl's
//! `/api/v1/namespaces/{ns}/pods/{name}/{exec,attach,portforward}` (`api_stream`: what
//! kube-apiserver does before its node proxy, then the same streams).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ResolvesServerCert, ServerConfig, ServerConnection, WebPkiClientVerifier};
use rustls::{DistinguishedName, RootCertStore, StreamOwned};

use super::auth::{Auth, ClientCert, Decision};
use super::httpd::{self, Limits, Parse};
use super::stream;
use super::{Endpoints, Outcome, ReadOnlyOptions, Reply, Req, route_request, split_url};
use crate::status::StatusStore;

/// Connections served at once (threads).
pub const MAX_CONNECTIONS: usize = 128;
/// Long-lived answers at once (log follows, exec, attach, port-forward).
pub const MAX_STREAMS: usize = 32;
/// From accept to a complete request head, TLS handshake included.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Writing one response.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// A refused TLS setting of the kubelet server (the file and why; never key material).
#[derive(Debug, thiserror::Error)]
pub enum SecureError {
    #[error("{}: {reason}", path.display())]
    File { path: PathBuf, reason: String },
    #[error("TLS configuration: {0}")]
    Tls(String),
}

/// What the kubelet server serves and how it checks requests.
pub struct SecureOptions {
    /// The endpoints it shares with the read-only port (node, `/configz`, stats, probes).
    pub shared: ReadOnlyOptions,
    pub auth: Arc<Auth>,
    /// The serving certificate (`certificate::ServingCertificate` once merged; a fixed one
    /// from `--tls-cert-file`/`--tls-private-key-file` until then: [`resolver_from_pem_files`]).
    pub certificate: Arc<dyn ResolvesServerCert>,
    /// `--client-ca-file`'s certificates; `None`: client certificates are not requested
    /// (unless `local_admin_ca` is set).
    pub client_ca: Option<Vec<CertificateDer<'static>>>,
    /// The device's local client CA file (`<cert-dir>/nanolet-client-ca.crt`, made by `nanolet
    /// admin-kubeconfig`): read whenever it changes; the users it vouches for are local
    /// administrators, allowed without the authorizer. `None`: no local administrators.
    pub local_admin_ca: Option<PathBuf>,
    /// The ExecSync timeout of `/run`.
    pub run_timeout: Duration,
    /// The directory `/logs/` serves (`/var/log` with `enableSystemLogHandler`); `None`: 404.
    pub system_logs: Option<PathBuf>,
}

impl std::fmt::Debug for SecureOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecureOptions")
            .field("node", &self.shared.node.node_name)
            .field("auth", &self.auth)
            .field("client_ca", &self.client_ca.as_ref().map(Vec::len))
            .field("local_admin_ca", &self.local_admin_ca)
            .finish()
    }
}

/// The certificates of a PEM file (`--client-ca-file`).
pub fn load_client_ca(path: &Path) -> Result<Vec<CertificateDer<'static>>, SecureError> {
    let err = |reason: String| SecureError::File {
        path: path.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("no certificate in the file".into()));
    }
    Ok(certs)
}

/// A resolver that always serves one certificate chain.
struct FixedCertificate(Arc<rustls::sign::CertifiedKey>);

/// Written by hand: nothing of the key is shown.
impl std::fmt::Debug for FixedCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FixedCertificate")
            .field("chain", &self.0.cert.len())
            .finish()
    }
}

impl ResolvesServerCert for FixedCertificate {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }
}

/// A fixed serving certificate from PEM files (`--tls-cert-file`, `--tls-private-key-file`).
/// The one seam the certificate manager's `ServingCertificate` replaces.
pub fn resolver_from_pem_files(
    cert: &Path,
    key: &Path,
) -> Result<Arc<dyn ResolvesServerCert>, SecureError> {
    let chain = load_client_ca(cert)?;
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| SecureError::File {
        path: key.to_path_buf(),
        reason: format!("reading the private key: {e}"),
    })?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key_der).map_err(|e| {
        SecureError::File {
            path: key.to_path_buf(),
            reason: format!("unsupported private key: {e}"),
        }
    })?;
    Ok(Arc::new(FixedCertificate(Arc::new(
        rustls::sign::CertifiedKey::new(chain, signer),
    ))))
}

/// Requests a client certificate and accepts any whose key signs the handshake; the chain is
/// checked per request ([`client_cert`], [`LocalAdmins::user`]), as Go's `RequestClientCert`
/// plus the x509 authenticator.
#[derive(Debug)]
struct RequestClientCert {
    /// The client CAs' subjects (certificate_authorities in the CertificateRequest).
    hints: Vec<DistinguishedName>,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A client-auth verifier over `certs` (rustls' `WebPkiClientVerifier`: chain, validity,
/// extended key usage clientAuth).
fn client_verifier(
    certs: &[CertificateDer<'static>],
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Result<Verifier, SecureError> {
    let mut roots = RootCertStore::empty();
    for c in certs {
        roots
            .add(c.clone())
            .map_err(|e| SecureError::Tls(format!("client CA certificate: {e}")))?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(provider))
        .allow_unauthenticated()
        .build()
        .map_err(|e| SecureError::Tls(format!("client CA: {e}")))
}

/// The client CA's verifier, used per request.
type Verifier = Arc<dyn ClientCertVerifier>;

/// The rustls configuration and the client CA verifier (checked per request). Client
/// certificates are requested when there is a client CA or a local administrator CA may
/// appear; the CertificateRequest names the client CA's subjects and the local CA's, if it
/// exists at start.
fn tls_config(
    options: &SecureOptions,
) -> Result<(Arc<ServerConfig>, Option<Verifier>), SecureError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| SecureError::Tls(e.to_string()))?;
    let verifier = match &options.client_ca {
        Some(certs) => Some(client_verifier(certs, &provider)?),
        None => None,
    };
    let local = options
        .local_admin_ca
        .as_deref()
        .filter(|p| p.exists())
        .and_then(|p| load_client_ca(p).ok())
        .unwrap_or_default();
    let builder = if verifier.is_some() || options.local_admin_ca.is_some() {
        let mut hint_certs = options.client_ca.clone().unwrap_or_default();
        hint_certs.extend(local);
        let hints = if hint_certs.is_empty() {
            Vec::new()
        } else {
            client_verifier(&hint_certs, &provider)?
                .root_hint_subjects()
                .to_vec()
        };
        builder.with_client_cert_verifier(Arc::new(RequestClientCert {
            hints,
            algorithms: provider.signature_verification_algorithms,
        }))
    } else {
        builder.with_no_client_auth()
    };
    let mut config = builder.with_cert_resolver(Arc::clone(&options.certificate));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((Arc::new(config), verifier))
}

/// A file's identity and version: reloaded when any of them changes.
type FileStamp = (u64, u64, Option<std::time::SystemTime>);

fn file_stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.len(), m.modified().ok()))
}

/// The device's local administrators: client certificates of the local client CA
/// (`nanolet admin-kubeconfig`). The CA file is read when it appears or changes, so a
/// kubeconfig made while nanolet runs works at once.
struct LocalAdmins {
    path: PathBuf,
    provider: Arc<rustls::crypto::CryptoProvider>,
    cached: Mutex<Option<(FileStamp, Option<Verifier>)>>,
}

impl LocalAdmins {
    fn new(path: PathBuf) -> LocalAdmins {
        LocalAdmins {
            path,
            provider: Arc::new(rustls::crypto::ring::default_provider()),
            cached: Mutex::new(None),
        }
    }

    /// The verifier of the CA file as it is now; `None` without a (usable) file.
    fn verifier(&self) -> Option<Verifier> {
        let stamp = file_stamp(&self.path)?;
        let mut cached = self.cached.lock().ok()?;
        if let Some((s, v)) = cached.as_ref() {
            if *s == stamp {
                return v.clone();
            }
        }
        let loaded = load_client_ca(&self.path).and_then(|c| client_verifier(&c, &self.provider));
        let v = match loaded {
            Ok(v) => {
                tracing::info!(ca = %self.path.display(), "kubelet server: trusting the local client CA for local administrators");
                Some(v)
            }
            Err(e) => {
                tracing::warn!(ca = %self.path.display(), "kubelet server: the local client CA is unusable: {e}");
                None
            }
        };
        *cached = Some((stamp, v.clone()));
        v
    }

    /// The local administrator of a finished handshake (CN, O plus `system:authenticated`),
    /// `None` when the certificate is not the local CA's (other authenticators decide).
    fn user(&self, conn: &ServerConnection) -> Option<super::auth::UserInfo> {
        let (leaf, intermediates) = conn.peer_certificates()?.split_first()?;
        let verifier = self.verifier()?;
        verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .ok()?;
        let (name, mut groups) = super::auth_x509::subject_cn_and_organizations(leaf)?;
        if name.is_empty() {
            return None;
        }
        groups.push("system:authenticated".into());
        Some(super::auth::UserInfo {
            name,
            groups,
            ..Default::default()
        })
    }
}

/// The client certificate of a finished handshake, checked against the client CA.
fn client_cert(
    conn: &ServerConnection,
    verifier: Option<&Arc<dyn ClientCertVerifier>>,
) -> ClientCert {
    let (Some(verifier), Some(chain)) = (verifier, conn.peer_certificates()) else {
        return ClientCert::None;
    };
    let Some((leaf, intermediates)) = chain.split_first() else {
        return ClientCert::None;
    };
    if let Err(e) = verifier.verify_client_cert(leaf, intermediates, UnixTime::now()) {
        return ClientCert::Invalid(e.to_string());
    }
    match super::auth_x509::subject_cn_and_organizations(leaf) {
        Some((common_name, organizations)) => ClientCert::Verified {
            common_name,
            organizations,
        },
        None => ClientCert::Invalid("the certificate's subject cannot be read".into()),
    }
}

/// The running kubelet server; `stop()` or dropping it stops the accept thread (connections
/// in progress finish on their own, within their timeouts).
pub struct SecureServerHandle {
    local_addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    wake: Arc<EventFd>,
    thread: Option<JoinHandle<()>>,
}

impl SecureServerHandle {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(t) = self.thread.take() {
            self.stopping.store(true, Ordering::SeqCst);
            if let Err(e) = self.wake.write(1) {
                tracing::warn!("kubelet server: waking the accept thread: {e}");
            }
            if t.join().is_err() {
                tracing::error!(addr = %self.local_addr, "kubelet server thread panicked");
            }
            tracing::debug!(addr = %self.local_addr, "kubelet server stopped");
        }
    }
}

impl Drop for SecureServerHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl std::fmt::Debug for SecureServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecureServerHandle")
            .field("local_addr", &self.local_addr)
            .finish()
    }
}

/// What every connection thread shares.
struct Shared {
    store: Arc<StatusStore>,
    endpoints: Endpoints,
    options: Arc<ReadOnlyOptions>,
    auth: Arc<Auth>,
    tls: Arc<ServerConfig>,
    verifier: Option<Arc<dyn ClientCertVerifier>>,
    local_admins: Option<LocalAdmins>,
    run_timeout: Duration,
    system_logs: Option<PathBuf>,
    stopping: Arc<AtomicBool>,
    streams: AtomicUsize,
    slots: Slots,
}

/// Starts the kubelet server on `addr`.
pub fn spawn_secure(
    addr: SocketAddr,
    store: Arc<StatusStore>,
    options: SecureOptions,
) -> Result<SecureServerHandle, io::Error> {
    let (tls, verifier) = tls_config(&options).map_err(io::Error::other)?;
    let listener = TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let local_addr = listener.local_addr()?;
    let stopping = Arc::new(AtomicBool::new(false));
    let wake = Arc::new(
        EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .map_err(io::Error::from)?,
    );
    let shared_opts = Arc::new(options.shared);
    let shared = Arc::new(Shared {
        store,
        endpoints: Endpoints::ReadOnly(Arc::clone(&shared_opts)),
        options: shared_opts,
        auth: options.auth,
        tls,
        verifier,
        local_admins: options.local_admin_ca.map(LocalAdmins::new),
        run_timeout: options.run_timeout,
        system_logs: options.system_logs,
        stopping: Arc::clone(&stopping),
        streams: AtomicUsize::new(0),
        slots: Slots::default(),
    });
    let thread = {
        let wake = Arc::clone(&wake);
        std::thread::Builder::new()
            .name("https-kubelet".into())
            .stack_size(256 * 1024)
            .spawn(move || accept_loop(&listener, &wake, &shared))?
    };
    tracing::info!(addr = %local_addr, "kubelet server (HTTPS) listening");
    Ok(SecureServerHandle {
        local_addr,
        stopping,
        wake,
        thread: Some(thread),
    })
}

fn accept_loop(listener: &TcpListener, wake: &EventFd, shared: &Arc<Shared>) {
    let epoll = match Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).and_then(|e| {
        e.add(listener.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, 0))?;
        e.add(wake.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, 1))?;
        Ok(e)
    }) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("kubelet server: epoll: {e}");
            return;
        }
    };
    let mut events = [EpollEvent::empty(); 4];
    while !shared.stopping.load(Ordering::SeqCst) {
        // No timeout: `shutdown` sets `stopping` and then writes `wake`.
        if let Err(e) = epoll.wait(&mut events, EpollTimeout::NONE) {
            if e != nix::errno::Errno::EINTR {
                tracing::error!("kubelet server: epoll wait: {e}");
                return;
            }
        }
        loop {
            match listener.accept() {
                Ok((tcp, peer)) => admit(tcp, peer, shared),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::warn!("kubelet server: accept: {e}");
                    break;
                }
            }
        }
    }
}

/// Starts a connection's thread if a slot is free (closing the oldest waiting one at the cap).
fn admit(tcp: TcpStream, peer: SocketAddr, shared: &Arc<Shared>) {
    let Some(slot) = shared.slots.take(&tcp) else {
        tracing::debug!(%peer, "kubelet server: every connection busy, refusing one");
        return;
    };
    let shared_t = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name("https-kubelet-conn".into())
        .stack_size(512 * 1024)
        .spawn(move || {
            if let Err(e) = serve(tcp, &slot, &shared_t) {
                tracing::debug!(%peer, "kubelet server connection: {e}");
            }
            shared_t.slots.release(slot.id);
        });
    if let Err(e) = spawned {
        tracing::warn!("kubelet server: starting a connection thread: {e}");
    }
}

/// A taken connection slot.
struct Slot {
    id: u64,
    /// Still in the handshake or request head (may be closed for a new connection).
    waiting: Arc<AtomicBool>,
}

/// An open connection: its slot id, when it came, a handle to close it, and whether it is
/// still waiting for its request.
type OpenConnection = (u64, Instant, Option<TcpStream>, Arc<AtomicBool>);

#[derive(Default)]
struct Slots {
    next: AtomicU64,
    open: Mutex<Vec<OpenConnection>>,
}

impl Slots {
    fn take(&self, tcp: &TcpStream) -> Option<Slot> {
        let mut open = self.open.lock().ok()?;
        if open.len() >= MAX_CONNECTIONS {
            let oldest = open
                .iter()
                .enumerate()
                .filter(|(_, c)| c.3.load(Ordering::SeqCst))
                .min_by_key(|(_, c)| c.1)
                .map(|(i, _)| i)?;
            let (_, _, stream, _) = open.remove(oldest);
            if let Some(s) = stream {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let waiting = Arc::new(AtomicBool::new(true));
        open.push((
            id,
            Instant::now(),
            tcp.try_clone().ok(),
            Arc::clone(&waiting),
        ));
        Some(Slot { id, waiting })
    }

    fn release(&self, id: u64) {
        if let Ok(mut open) = self.open.lock() {
            open.retain(|c| c.0 != id);
        }
    }
}

type Tls = StreamOwned<ServerConnection, TcpStream>;

/// One connection: handshake, request head, authentication, authorization, the answer.
fn serve(tcp: TcpStream, slot: &Slot, shared: &Shared) -> io::Result<()> {
    tcp.set_nonblocking(false)?;
    tcp.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let deadline = Instant::now() + HEAD_TIMEOUT;
    let conn = ServerConnection::new(Arc::clone(&shared.tls)).map_err(io::Error::other)?;
    let mut tls = StreamOwned::new(conn, tcp);
    while tls.conn.is_handshaking() {
        set_deadline(&tls.sock, deadline)?;
        tls.conn.complete_io(&mut tls.sock)?;
    }
    let limits = Limits::default();
    let (request, body_len, mut buf) = match read_head(&mut tls, deadline, &limits)? {
        Ok(v) => v,
        Err((status, why)) => {
            let body = format!("{status} {}: {why}\n", httpd::reason(status).to_lowercase());
            return respond(&mut tls, status, TEXT_HEADERS, body.as_bytes(), false);
        }
    };
    // The body (bounded by the limits) is read and discarded: no endpoint here takes one.
    while buf.len() < body_len {
        set_deadline(&tls.sock, deadline)?;
        let mut chunk = [0u8; 4096];
        let n = tls.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    slot.waiting.store(false, Ordering::SeqCst);
    tls.sock.set_read_timeout(None)?;
    let cert = client_cert(&tls.conn, shared.verifier.as_ref());
    let (path, _) = split_url(&request.target);
    let path = path.to_string();
    let local_admin = shared.local_admins.as_ref().and_then(|l| l.user(&tls.conn));
    let decision = match local_admin {
        // The device's administrators: authorized here, whatever the authorization mode (as
        // system:masters bypasses authorization in kube-apiserver; the cluster cannot know
        // them).
        Some(user) => {
            tracing::debug!(user = %user.name, method = %request.method, %path, "kubelet server: local administrator");
            Decision::Allow(user)
        }
        None => shared.auth.check(
            &cert,
            request.header("Authorization"),
            &request.method,
            &path,
        ),
    };
    let head_only = request.method == "HEAD";
    if let Some((status, body)) = decision.refusal() {
        tracing::debug!(method = %request.method, %path, status, "kubelet server: refused");
        return respond(&mut tls, status, TEXT_HEADERS, body.as_bytes(), head_only);
    }
    if let Decision::Allow(user) = &decision {
        tracing::trace!(user = %user.name, method = %request.method, %path, "kubelet server request");
    }
    answer(&mut tls, &request, shared)
}

const TEXT_HEADERS: &[(&str, &str)] = &[
    ("Content-Type", "text/plain; charset=utf-8"),
    ("X-Content-Type-Options", "nosniff"),
];

fn set_deadline(tcp: &TcpStream, deadline: Instant) -> io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "handshake or request head too slow",
        ));
    }
    tcp.set_read_timeout(Some(left))
}

type Head = Result<(httpd::Request, usize, Vec<u8>), (u16, &'static str)>;

/// Reads until a complete request head: the request, its body length, and the bytes after
/// the head; or the refusal `parse_head` gives.
fn read_head(tls: &mut Tls, deadline: Instant, limits: &Limits) -> io::Result<Head> {
    let mut buf = Vec::new();
    loop {
        match httpd::parse_head(&buf, limits) {
            Parse::Done {
                request,
                head_len,
                body_len,
            } => return Ok(Ok((request, body_len, buf.split_off(head_len)))),
            Parse::Reject(status, why) => return Ok(Err((status, why))),
            Parse::Incomplete => {}
        }
        set_deadline(&tls.sock, deadline)?;
        let mut chunk = [0u8; 4096];
        let n = tls.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed before a complete request",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn respond(
    tls: &mut Tls,
    status: u16,
    headers: &[(&str, &str)],
    body: &[u8],
    head_only: bool,
) -> io::Result<()> {
    let headers: Vec<(&str, String)> = headers.iter().map(|(n, v)| (*n, v.to_string())).collect();
    tls.write_all(&httpd::render(status, &headers, body, head_only))?;
    tls.conn.send_close_notify();
    tls.flush()
}

fn reply(tls: &mut Tls, r: Reply, head_only: bool) -> io::Result<()> {
    respond(tls, r.status, &r.headers, &r.body, head_only)
}

/// Routes an authorized request.
fn answer(tls: &mut Tls, request: &httpd::Request, shared: &Shared) -> io::Result<()> {
    let (path, query) = split_url(&request.target);
    let head_only = request.method == "HEAD";
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        ["containerLogs", ns, pod, container] => {
            if !super::is_read(&request.method) {
                return reply(tls, method_not_allowed("GET, HEAD"), head_only);
            }
            container_logs(tls, request, shared, (ns, pod, container), query)
        }
        ["logs", rest @ ..] => {
            if !super::is_read(&request.method) {
                return reply(tls, method_not_allowed("GET, HEAD"), head_only);
            }
            node_logs(tls, shared.system_logs.as_deref(), rest, head_only)
        }
        ["run", ns, pod, rest @ ..] => {
            if request.method != "POST" {
                return reply(tls, method_not_allowed("POST"), head_only);
            }
            let r = run(shared, ns, pod, rest, query);
            reply(tls, r, false)
        }
        [
            kind @ ("exec" | "attach" | "portForward"),
            ns,
            pod,
            rest @ ..,
        ] => {
            if request.method != "GET" && request.method != "POST" {
                return reply(tls, method_not_allowed("GET, POST"), head_only);
            }
            streaming(tls, request, shared, kind, (ns, pod, rest), query)
        }
        [
            "api",
            "v1",
            "namespaces",
            ns,
            "pods",
            pod,
            sub @ ("exec" | "attach" | "portforward"),
        ] => api_stream(tls, request, shared, (ns, pod, sub), query),
        _ => {
            let req = Req {
                method: request.method.clone(),
                url: request.target.clone(),
                authorization: String::new(),
                accept: request.header("Accept").to_string(),
            };
            match route_request(&shared.endpoints, &req, &shared.store) {
                Outcome::Reply(r) => reply(tls, r, head_only),
                Outcome::Follow(f) => follow(tls, request.http11, &f, shared),
            }
        }
    }
}

fn method_not_allowed(allow: &'static str) -> Reply {
    let mut r = Reply::text(405, "405 method not allowed\n".into());
    r.headers.push(("Allow", allow));
    r
}

/// `/containerLogs/{ns}/{pod}/{container}`: the pod log API of the read-only port with the
/// container from the path (follow, tailLines, timestamps, previous, sinceSeconds, limitBytes).
fn container_logs(
    tls: &mut Tls,
    request: &httpd::Request,
    shared: &Shared,
    (ns, pod, container): (&str, &str, &str),
    query: &str,
) -> io::Result<()> {
    let head_only = request.method == "HEAD";
    let decode = super::api::percent_decode;
    let (ns, pod, container) = (decode(ns), decode(pod), decode(container));
    let safe = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    };
    if !safe(&ns) || !safe(&pod) || !safe(&container) {
        return reply(
            tls,
            Reply::text(400, "invalid name in the path\n".into()),
            head_only,
        );
    }
    // getContainerLogs' own answers for a missing pod or container (plain text).
    let found = shared
        .store
        .pods()
        .into_iter()
        .find(|p| p.metadata.namespace == ns && p.metadata.name == pod);
    let Some(found) = found else {
        let r = Reply::text(404, format!("pod {pod:?} does not exist"));
        return reply(tls, r, head_only);
    };
    let spec = &found.spec;
    let in_spec = spec.all_containers().any(|c| c.name == container);
    if !in_spec {
        let r = Reply::text(
            404,
            format!("container {container:?} not found in pod {pod:?}"),
        );
        return reply(tls, r, head_only);
    }
    let path = format!("/api/v1/namespaces/{ns}/pods/{pod}/log");
    let query = format!("container={container}&{}", legacy_tail(query));
    let outcome = super::api::handle(
        &shared.options.node,
        &shared.store,
        &path,
        &query,
        request.header("Accept"),
    );
    match outcome {
        super::api::ApiOutcome::Follow(f) => follow(tls, request.http11, &f, shared),
        super::api::ApiOutcome::Response {
            status,
            content_type,
            body,
        } => {
            let r = Reply {
                status,
                headers: vec![("Content-Type", content_type)],
                body,
            };
            reply(tls, r, head_only)
        }
    }
}

/// `/logs/<path>`: a file or a directory listing below the node's log directory
/// (`InstallSystemLogHandler`, a Go `http.FileServer` over /var/log). Paths with `..` are
/// refused and symbolic links must stay inside the directory (Go's file server would follow
/// them out). Files are streamed, not read into memory.
fn node_logs(tls: &mut Tls, root: Option<&Path>, rest: &[&str], head_only: bool) -> io::Result<()> {
    let not_found = || Reply::text(404, "404 page not found\n".into());
    let Some(root) = root else {
        return reply(tls, not_found(), head_only);
    };
    let parts: Vec<String> = rest
        .iter()
        .map(|p| super::api::percent_decode(p))
        .filter(|p| !p.is_empty() && p != ".")
        .collect();
    if parts.iter().any(|p| p == ".." || p.contains(['/', '\0'])) {
        return reply(tls, Reply::text(400, "invalid path\n".into()), head_only);
    }
    let (Ok(base), Ok(target)) = (
        root.canonicalize(),
        parts
            .iter()
            .fold(root.to_path_buf(), |p, c| p.join(c))
            .canonicalize(),
    ) else {
        return reply(tls, not_found(), head_only);
    };
    if !target.starts_with(&base) {
        return reply(tls, not_found(), head_only);
    }
    if target.is_dir() {
        let r = Reply {
            status: 200,
            headers: vec![("Content-Type", "text/html; charset=utf-8")],
            body: dir_listing(&target).into_bytes(),
        };
        return reply(tls, r, head_only);
    }
    let Ok(mut file) = std::fs::File::open(&target) else {
        return reply(tls, not_found(), head_only);
    };
    let len = file.metadata()?.len();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
    );
    tls.write_all(head.as_bytes())?;
    if !head_only {
        io::copy(&mut (&mut file).take(len), tls)?;
    }
    tls.conn.send_close_notify();
    tls.flush()
}

/// A directory listing as Go's `http.FileServer` writes it: `<pre>`, one link per entry
/// (directories with a trailing slash), sorted by name.
fn dir_listing(dir: &Path) -> String {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    let mut name = e.file_name().to_string_lossy().into_owned();
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        name.push('/');
                    }
                    name
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let mut out = String::from("<pre>\n");
    for name in names {
        let href: String = name
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                    char::from(b).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let text = name
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&#34;")
            .replace('\'', "&#39;");
        out.push_str(&format!("<a href=\"{href}\">{text}</a>\n"));
    }
    out.push_str("</pre>\n");
    out
}

/// The query with the kubelet's legacy `tail` parameter as `tailLines` (`tail=all` dropped).
fn legacy_tail(query: &str) -> String {
    query
        .split('&')
        .filter_map(|pair| match pair.split_once('=') {
            Some(("tail", "all")) => None,
            Some(("tail", n)) => Some(format!("tailLines={n}")),
            _ => Some(pair.to_string()),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// Counts one long-lived answer; `None` when [`MAX_STREAMS`] are open.
fn stream_permit(shared: &Shared) -> Option<StreamPermit<'_>> {
    if shared.streams.fetch_add(1, Ordering::SeqCst) >= MAX_STREAMS {
        shared.streams.fetch_sub(1, Ordering::SeqCst);
        return None;
    }
    Some(StreamPermit(&shared.streams))
}

struct StreamPermit<'a>(&'a AtomicUsize);

impl Drop for StreamPermit<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn too_many_streams() -> Reply {
    Reply::text(429, "too many streams are open; try again later\n".into())
}

/// A `follow=true` log, on this connection's thread.
fn follow(
    tls: &mut Tls,
    http11: bool,
    f: &super::api::logs::LogFollow,
    shared: &Shared,
) -> io::Result<()> {
    let Some(_permit) = stream_permit(shared) else {
        return reply(tls, too_many_streams(), false);
    };
    let head = if http11 {
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    } else {
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
    };
    tls.write_all(head.as_bytes())?;
    tls.flush()?;
    let stopping = Arc::clone(&shared.stopping);
    let mut flushing = FlushEach(tls);
    let mut out = super::ChunkWriter {
        inner: &mut flushing,
        chunked: http11,
    };
    let result = f.stream(&shared.store, &mut out, &|| stopping.load(Ordering::SeqCst));
    if let Err(e) = &result {
        tracing::debug!(container = %f.container, pod_uid = %f.uid, "kubelet server log stream ended: {e}");
    }
    if http11 {
        tls.write_all(b"0\r\n\r\n")?;
    }
    tls.conn.send_close_notify();
    tls.flush()
}

/// Flushes the TLS stream after every write, so each log chunk leaves at once.
struct FlushEach<'a>(&'a mut Tls);

impl Write for FlushEach<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.0.write(buf)?;
        self.0.flush()?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// A running container of a pod, from the status store: the CRI container ID. `uid`, when in
/// the path, must match the pod's. Errors: the status and text to answer.
fn resolve_container(
    store: &StatusStore,
    ns: &str,
    pod: &str,
    uid: Option<&str>,
    container: &str,
) -> Result<String, Reply> {
    let found = store
        .pods()
        .into_iter()
        .find(|p| p.metadata.namespace == ns && p.metadata.name == pod);
    let Some(p) = found.filter(|p| uid.is_none_or(|u| u == p.metadata.uid)) else {
        return Err(Reply::text(404, "pod does not exist".into()));
    };
    let status = p
        .status
        .as_ref()
        .and_then(|st| st.all_container_statuses().find(|c| c.name == container));
    let Some(c) = status else {
        return Err(Reply::text(
            404,
            format!("container not found ({container:?})"),
        ));
    };
    let id = c.container_id.as_str();
    let id = id.split_once("://").map_or(id, |(_, id)| id);
    if c.state.running.is_none() || id.is_empty() {
        return Err(Reply::text(
            400,
            format!("container {container:?} is not running"),
        ));
    }
    Ok(id.to_string())
}

/// The sandbox of a pod (for port-forward), from the runtime.
fn resolve_sandbox(
    shared: &Shared,
    ns: &str,
    pod: &str,
    uid: Option<&str>,
) -> Result<String, Reply> {
    let found = shared
        .store
        .pods()
        .into_iter()
        .find(|p| p.metadata.namespace == ns && p.metadata.name == pod);
    let Some(p) = found.filter(|p| uid.is_none_or(|u| u == p.metadata.uid)) else {
        return Err(Reply::text(404, "pod does not exist".into()));
    };
    let Some(rt) = shared.options.node.runtime.as_ref() else {
        return Err(Reply::text(500, "no container runtime\n".into()));
    };
    let sandboxes = rt
        .list_pod_sandboxes_of_pod(&p.metadata.uid)
        .map_err(|e| Reply::text(500, format!("listing the pod's sandboxes: {e}\n")))?;
    sandboxes
        .into_iter()
        .filter(|s| s.state == crate::cri::SandboxState::Ready)
        .max_by_key(|s| s.created_at)
        .map(|s| s.id)
        .ok_or_else(|| Reply::text(400, "the pod has no ready sandbox\n".into()))
}

/// The query parameters of a request (`key=value&...`, percent-decoded, repeated keys kept).
fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let decode = |s: &str| super::api::percent_decode(&s.replace('+', " "));
            (decode(k), decode(v))
        })
        .collect()
}

/// `/run/{ns}/{pod}[/{uid}]/{container}?cmd=...` (POST): the command (split at spaces, as the
/// kubelet's `getRun`) through CRI ExecSync; the answer is its stdout then stderr.
fn run(shared: &Shared, ns: &str, pod: &str, rest: &[&str], query: &str) -> Reply {
    let (uid, container) = match rest {
        [c] => (None, *c),
        [u, c] => (Some(*u), *c),
        _ => return Reply::text(404, "404 page not found\n".into()),
    };
    let cmd: Vec<String> = query_pairs(query)
        .into_iter()
        .find(|(k, _)| k == "cmd")
        .map(|(_, v)| v.split(' ').map(String::from).collect())
        .unwrap_or_default();
    if cmd.iter().all(String::is_empty) {
        return Reply::text(400, "missing command (cmd)\n".into());
    }
    // RunInContainer's errors (container not found, not running) are 500 in the kubelet; only
    // a missing pod is 404.
    let id = match resolve_container(&shared.store, ns, pod, uid, container) {
        Ok(id) => id,
        Err(r) if r.body == b"pod does not exist" => return r,
        Err(r) => return Reply { status: 500, ..r },
    };
    let Some(rt) = shared.options.node.runtime.as_ref() else {
        return Reply::text(500, "no container runtime\n".into());
    };
    match rt.exec_sync(&id, &cmd, shared.run_timeout) {
        Ok(r) => {
            tracing::info!(pod = %pod, namespace = %ns, container = %container, exit_code = r.exit_code, "kubelet server: /run");
            let mut body = r.stdout;
            body.extend_from_slice(&r.stderr);
            Reply {
                status: 200,
                headers: vec![("Content-Type", "application/json")],
                body,
            }
        }
        Err(e) => Reply::text(500, format!("{e}\n")),
    }
}

/// A JSON `Status` answer of the kubectl-compatible API.
fn status_reply(code: u16, reason: &str, message: &str, details: Option<(&str, &str)>) -> Reply {
    let status = super::api::status(code, reason, message, details);
    Reply {
        status: code,
        headers: vec![("Content-Type", "application/json")],
        body: serde_json::to_vec(&status).unwrap_or_default(),
    }
}

/// kubectl's pod subresources on the device's kubectl-compatible API,
/// `/api/v1/namespaces/{ns}/pods/{name}/{exec,attach,portforward}`: what kube-apiserver does
/// before its node proxy (`ExecLocation`, `AttachLocation`, `PortForwardLocation`): the pod
/// (404 Status when absent), the container defaulted ([`default_container`]), the options'
/// query mapped to the kubelet's ([`kubelet_stream_query`]); then the same resolution and
/// proxy as `/exec`, `/attach`, `/portForward`. Authorized before this as every other path
/// (`nodes/proxy`, verb from the method).
fn api_stream(
    tls: &mut Tls,
    request: &httpd::Request,
    shared: &Shared,
    (ns, pod, sub): (&str, &str, &str),
    query: &str,
) -> io::Result<()> {
    if request.method != "GET" && request.method != "POST" {
        let mut r = status_reply(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
            None,
        );
        r.headers.push(("Allow", "GET, POST"));
        return reply(tls, r, false);
    }
    let decode = super::api::percent_decode;
    let (ns, pod) = (decode(ns), decode(pod));
    let found = shared
        .store
        .pods()
        .into_iter()
        .find(|p| p.metadata.namespace == ns && p.metadata.name == pod);
    let Some(found) = found else {
        let message = format!("pods \"{pod}\" not found");
        let r = status_reply(404, "NotFound", &message, Some(("pods", &pod)));
        return reply(tls, r, false);
    };
    let pairs = query_pairs(query);
    let (kind, container) = match sub {
        "portforward" => ("portForward", None),
        _ => {
            let requested = pairs
                .iter()
                .find(|(k, _)| k == "container")
                .map_or("", |(_, v)| v.as_str());
            match default_container(&found, requested) {
                Ok(c) => (if sub == "exec" { "exec" } else { "attach" }, Some(c)),
                Err(message) => {
                    let r = status_reply(400, "BadRequest", &message, None);
                    return reply(tls, r, false);
                }
            }
        }
    };
    let kubelet_query = kubelet_stream_query(kind, &pairs);
    let rest: Vec<&str> = container.iter().map(String::as_str).collect();
    streaming(
        tls,
        request,
        shared,
        kind,
        (&ns, &pod, &rest),
        &kubelet_query,
    )
}

/// The container of an exec or attach, as kube-apiserver's `validateContainer`: a named one
/// must be one of the pod's (init, regular, ephemeral; "container X is not valid for pod P");
/// none named is the only regular container, else a 400 naming every container (init, regular,
/// ephemeral, as `podutil.VisitContainers`, Go's `%s` of a string slice: `[a b]`).
pub(crate) fn default_container(pod: &crate::api::Pod, requested: &str) -> Result<String, String> {
    let name = &pod.metadata.name;
    let spec = &pod.spec;
    let all: Vec<&str> = spec.all_containers().map(|c| c.name.as_str()).collect();
    if !requested.is_empty() {
        return if all.contains(&requested) {
            Ok(requested.to_string())
        } else {
            Err(format!("container {requested} is not valid for pod {name}"))
        };
    }
    match spec.containers.as_slice() {
        [only] => Ok(only.name.clone()),
        [] => Err(format!("a container name must be specified for pod {name}")),
        _ => Err(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            all.join(" ")
        )),
    }
}

/// Go's `strconv.ParseBool` true values (how the API server decodes PodExecOptions' booleans).
fn go_true(v: &str) -> bool {
    matches!(v, "1" | "t" | "T" | "TRUE" | "true" | "True")
}

/// Go's `url.QueryEscape`.
fn query_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            b' ' => "+".to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The kubelet's query for the API server's options (kube-apiserver's `streamParams`):
/// PodExecOptions/PodAttachOptions `stdin`, `stdout`, `stderr`, `tty` become `input`,
/// `output`, `error`, `tty` with the value `1`; an exec's `command` values stay, in order;
/// PodPortForwardOptions' `ports` become one `port` with the ports joined by commas. Anything
/// else (`container`, which is in the kubelet's path) is dropped.
pub(crate) fn kubelet_stream_query(kind: &str, pairs: &[(String, String)]) -> String {
    let mut out: Vec<String> = Vec::new();
    if kind == "portForward" {
        let ports: Vec<&str> = pairs
            .iter()
            .filter(|(k, _)| k == "ports")
            .map(|(_, v)| v.as_str())
            .collect();
        if !ports.is_empty() {
            out.push(format!("port={}", query_escape(&ports.join(","))));
        }
        return out.join("&");
    }
    for (flag, param) in [
        ("stdin", "input"),
        ("stdout", "output"),
        ("stderr", "error"),
        ("tty", "tty"),
    ] {
        // url.Values' Get: the first value.
        if pairs
            .iter()
            .find(|(k, _)| k == flag)
            .is_some_and(|(_, v)| go_true(v))
        {
            out.push(format!("{param}=1"));
        }
    }
    if kind == "exec" {
        out.extend(
            pairs
                .iter()
                .filter(|(k, _)| k == "command")
                .map(|(_, v)| format!("command={}", query_escape(v))),
        );
    }
    out.join("&")
}

/// The kubelet server's end of a TLS connection is what `server::stream::proxy_upgrade` splices:
/// poll the socket, but first drain the plaintext rustls already holds.
impl stream::ReadWrite for Tls {
    fn poll_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.sock.as_fd()
    }

    fn has_buffered(&mut self) -> bool {
        // Records already read from the socket but not yet returned as plaintext: rustls
        // decrypts them without touching the socket, so poll(2) cannot see them.
        self.conn
            .process_new_packets()
            .is_ok_and(|state| state.plaintext_bytes_to_read() > 0)
    }

    fn shutdown_write(&mut self) -> io::Result<()> {
        self.conn.send_close_notify();
        self.flush()
    }
}

/// `/exec/{ns}/{pod}[/{uid}]/{container}`, `/attach/...` and `/portForward/{ns}/{pod}[/{uid}]`:
/// resolved to CRI IDs, then, as the kubelet: the URL from CRI Exec/Attach/PortForward and the
/// upgrade proxied to the runtime's streaming server (`server::stream`).
fn streaming(
    tls: &mut Tls,
    request: &httpd::Request,
    shared: &Shared,
    kind: &str,
    (ns, pod, rest): (&str, &str, &[&str]),
    query: &str,
) -> io::Result<()> {
    let refused = |e: stream::StreamError| Reply::text(e.http_status(), format!("{e}\n"));
    let target = if kind == "portForward" {
        let uid = match rest {
            [] => None,
            [u] => Some(*u),
            _ => return reply(tls, Reply::text(404, "404 page not found\n".into()), false),
        };
        let sandbox_id = match resolve_sandbox(shared, ns, pod, uid) {
            Ok(id) => id,
            Err(r) => return reply(tls, r, false),
        };
        stream::port_forward_kind(&sandbox_id, query, stream::is_websocket_request(request))
    } else {
        let (uid, container) = match rest {
            [c] => (None, *c),
            [u, c] => (Some(*u), *c),
            _ => return reply(tls, Reply::text(404, "404 page not found\n".into()), false),
        };
        let container_id = match resolve_container(&shared.store, ns, pod, uid, container) {
            Ok(id) => id,
            Err(r) => return reply(tls, r, false),
        };
        if kind == "exec" {
            stream::exec_kind(&container_id, query)
        } else {
            stream::attach_kind(&container_id, query)
        }
    };
    let target = match target {
        Ok(t) => t,
        Err(e) => return reply(tls, refused(e), false),
    };
    let Some(_permit) = stream_permit(shared) else {
        return reply(tls, too_many_streams(), false);
    };
    let Some(runtime) = shared.options.node.runtime.as_ref() else {
        return reply(
            tls,
            Reply::text(500, "no container runtime\n".into()),
            false,
        );
    };
    tracing::info!(pod = %pod, namespace = %ns, kind, "kubelet server: stream requested");
    let url = match stream::stream_url(runtime.as_ref(), target) {
        Ok(url) => url,
        Err(e) => return reply(tls, refused(e), false),
    };
    // The head's deadline no longer applies: a stream may sit idle (the proxy bounds it).
    tls.sock.set_read_timeout(None)?;
    stream::proxy_upgrade(tls, request, &url)
}

#[cfg(test)]
#[path = "secure_tests.rs"]
mod tests;
