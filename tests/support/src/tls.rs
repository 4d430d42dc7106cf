//! The double's real TLS (rustls, ring): the server config with optional client certificates
//! (kube-apiserver's `tls.RequestClientCert` + the x509 authenticator: a certificate that does
//! not verify against the client CA is not a handshake failure but an unauthenticated request,
//! 401), the client config the double dials kubelets with, the subject (CN, O) of a DER
//! certificate, and a lock-sharing wrapper that lets two threads relay one TLS stream.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

pub use rustls;

/// What the TLS layer learned about the client.
#[derive(Clone, Debug, PartialEq)]
pub enum Peer {
    /// No client certificate.
    None,
    /// A certificate that verifies against the client CA: its CN and Os.
    Cert { cn: String, orgs: Vec<String> },
    /// A certificate that does not verify (another CA, expired, not for client auth).
    Invalid(String),
}

pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

pub fn load_certs(path: &Path) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(path)
        .expect("read certificate PEM")
        .collect::<Result<Vec<_>, _>>()
        .expect("parse certificate PEM")
}

pub fn load_key(path: &Path) -> PrivateKeyDer<'static> {
    PrivateKeyDer::from_pem_file(path).expect("read key PEM")
}

fn roots(ca: &Path) -> rustls::RootCertStore {
    let mut r = rustls::RootCertStore::empty();
    for c in load_certs(ca) {
        r.add(c).expect("CA certificate");
    }
    r
}

/// The client-CA check, kept for after the handshake.
pub fn client_verifier(ca: &Path, optional: bool) -> Arc<dyn ClientCertVerifier> {
    let b = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots(ca)),
        provider(),
    );
    let b = if optional {
        b.allow_unauthenticated()
    } else {
        b
    };
    b.build().expect("client verifier")
}

/// Asks for a client certificate and accepts any (the handshake signature is still checked);
/// whether it verifies is decided after the handshake (`Peer`).
#[derive(Debug)]
struct RequestClientCert(Arc<dyn ClientCertVerifier>);

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }
    fn client_auth_mandatory(&self) -> bool {
        false
    }
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.0.root_hint_subjects()
    }
    fn verify_client_cert(
        &self,
        _end: &CertificateDer<'_>,
        _inter: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(m, c, d)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(m, c, d)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// A server config: `cert`/`key`, client certificates requested and checked against
/// `client_ca` afterwards (see `peer`), ALPN http/1.1 only.
pub fn server_config(cert: &Path, key: &Path, client_ca: &Path) -> Arc<rustls::ServerConfig> {
    let verifier = Arc::new(RequestClientCert(client_verifier(client_ca, true)));
    let mut c = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(load_certs(cert), load_key(key))
        .expect("server certificate");
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(c)
}

/// A server config that requires a client certificate from `client_ca` (the stand-in kubelet).
pub fn strict_server_config(
    cert: &Path,
    key: &Path,
    client_ca: &Path,
) -> Arc<rustls::ServerConfig> {
    let mut c = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_client_cert_verifier(client_verifier(client_ca, false))
        .with_single_cert(load_certs(cert), load_key(key))
        .expect("server certificate");
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(c)
}

/// The peer of a finished handshake, checked against `verifier` (the client CA).
pub fn peer(conn: &rustls::ServerConnection, verifier: &dyn ClientCertVerifier) -> Peer {
    let Some(chain) = conn.peer_certificates().filter(|c| !c.is_empty()) else {
        return Peer::None;
    };
    if let Err(e) = verifier.verify_client_cert(&chain[0], &chain[1..], UnixTime::now()) {
        return Peer::Invalid(e.to_string());
    }
    match subject(&chain[0]) {
        Some((cn, orgs)) => Peer::Cert { cn, orgs },
        None => Peer::Invalid("unparsable subject".into()),
    }
}

/// Skips verifying the server's certificate (the handshake signatures are still checked):
/// kube-apiserver dialing a kubelet without `--kubelet-certificate-authority`.
#[derive(Debug)]
struct NoServerVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for NoServerVerify {
    fn verify_server_cert(
        &self,
        _e: &CertificateDer<'_>,
        _i: &[CertificateDer<'_>],
        _n: &ServerName<'_>,
        _o: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A client config with a client certificate; the server verified against `ca` or, without
/// one, not at all.
pub fn client_config(cert: &Path, key: &Path, ca: Option<&Path>) -> Arc<rustls::ClientConfig> {
    let b = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("protocol versions");
    let b = match ca {
        Some(ca) => b.with_root_certificates(roots(ca)),
        None => b
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoServerVerify(provider()))),
    };
    let mut c = b
        .with_client_auth_cert(load_certs(cert), load_key(key))
        .expect("client certificate");
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(c)
}

/// One DER TLV: (tag, contents, rest).
fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *b.first()?;
    let l0 = *b.get(1)?;
    let (len, hdr) = if l0 < 0x80 {
        (usize::from(l0), 2)
    } else {
        let n = usize::from(l0 & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for i in 0..n {
            len = (len << 8) | usize::from(*b.get(2 + i)?);
        }
        (len, 2 + n)
    };
    let end = hdr.checked_add(len)?;
    Some((tag, b.get(hdr..end)?, b.get(end..)?))
}

/// The subject's CN and O values of a DER certificate.
pub fn subject(der: &[u8]) -> Option<(String, Vec<String>)> {
    let (_, cert, _) = tlv(der)?;
    let (_, tbs, _) = tlv(cert)?;
    let mut rest = tbs;
    if rest.first() == Some(&0xa0) {
        rest = tlv(rest)?.2;
    }
    // serial, signature algorithm, issuer, validity, then the subject.
    for _ in 0..4 {
        rest = tlv(rest)?.2;
    }
    let (_, name, _) = tlv(rest)?;
    name_cn_orgs(name)
}

/// CN and O values of an X.501 Name's contents.
fn name_cn_orgs(mut name: &[u8]) -> Option<(String, Vec<String>)> {
    let (mut cn, mut orgs) = (String::new(), Vec::new());
    while !name.is_empty() {
        let (_, mut set, next) = tlv(name)?;
        name = next;
        while !set.is_empty() {
            let (_, atv, next) = tlv(set)?;
            set = next;
            let (_, oid, val) = tlv(atv)?;
            let (_, v, _) = tlv(val)?;
            let v = String::from_utf8_lossy(v).into_owned();
            match oid {
                [0x55, 0x04, 0x03] => cn = v,
                [0x55, 0x04, 0x0a] => orgs.push(v),
                _ => {}
            }
        }
    }
    Some((cn, orgs))
}

/// What a PKCS#10 request asks for: subject CN and Os, and its SANs (from the
/// extensionRequest attribute).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CsrInfo {
    pub cn: String,
    pub orgs: Vec<String>,
    pub dns: Vec<String>,
    pub ips: Vec<Vec<u8>>,
    pub emails: Vec<String>,
    pub uris: Vec<String>,
}

/// Parses a DER CertificationRequest (RFC 2986) far enough for kube-controller-manager's
/// kubelet CSR checks.
pub fn csr_info(der: &[u8]) -> Option<CsrInfo> {
    let (_, req, _) = tlv(der)?;
    let (_, info, _) = tlv(req)?;
    let rest = tlv(info)?.2; // version
    let (_, name, rest) = tlv(rest)?;
    let (cn, orgs) = name_cn_orgs(name)?;
    let mut out = CsrInfo {
        cn,
        orgs,
        ..CsrInfo::default()
    };
    let rest = tlv(rest)?.2; // subjectPKInfo
    let Some((0xa0, mut attrs, _)) = tlv(rest) else {
        return Some(out);
    };
    const EXT_REQ: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e];
    while !attrs.is_empty() {
        let (_, attr, next) = tlv(attrs)?;
        attrs = next;
        let (_, oid, vals) = tlv(attr)?;
        if oid != EXT_REQ {
            continue;
        }
        let (_, set, _) = tlv(vals)?;
        let (_, mut exts, _) = tlv(set)?;
        while !exts.is_empty() {
            let (_, ext, next) = tlv(exts)?;
            exts = next;
            let (_, oid, mut rest) = tlv(ext)?;
            if oid != [0x55, 0x1d, 0x11] {
                continue;
            }
            if rest.first() == Some(&0x01) {
                rest = tlv(rest)?.2; // critical
            }
            let (_, octets, _) = tlv(rest)?;
            let (_, mut names, _) = tlv(octets)?;
            while !names.is_empty() {
                let (tag, v, next) = tlv(names)?;
                names = next;
                let text = String::from_utf8_lossy(v).into_owned();
                match tag {
                    0x81 => out.emails.push(text),
                    0x82 => out.dns.push(text),
                    0x86 => out.uris.push(text),
                    0x87 => out.ips.push(v.to_vec()),
                    _ => {}
                }
            }
        }
    }
    Some(out)
}

/// A stream two threads share: the reader waits for the socket without the lock, so a writer
/// never waits behind a blocked read.
pub struct Shared<S> {
    inner: Mutex<S>,
    /// The same socket, to wait for readability without holding `inner`.
    waiter: Option<std::net::TcpStream>,
    pub closed: AtomicBool,
}

pub trait Sock {
    fn tcp(&self) -> &std::net::TcpStream;
    fn close(&mut self);
    /// Plaintext already received (WouldBlock when none, Ok(0) at a clean end).
    fn buffered(&mut self, buf: &mut [u8]) -> std::io::Result<usize>;
    /// Reads what the socket has (it is readable) and processes it. Ok(false) at EOF.
    fn fill(&mut self) -> std::io::Result<bool>;
}

macro_rules! tls_sock {
    ($conn:ty) => {
        impl Sock for rustls::StreamOwned<$conn, std::net::TcpStream> {
            fn tcp(&self) -> &std::net::TcpStream {
                &self.sock
            }
            fn close(&mut self) {
                self.conn.send_close_notify();
                let _ = self.conn.complete_io(&mut self.sock);
                let _ = self.sock.shutdown(std::net::Shutdown::Both);
            }
            fn buffered(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                self.conn.reader().read(buf)
            }
            fn fill(&mut self) -> std::io::Result<bool> {
                let n = self.conn.read_tls(&mut self.sock)?;
                self.conn
                    .process_new_packets()
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
                while self.conn.wants_write() {
                    self.conn.write_tls(&mut self.sock)?;
                }
                Ok(n > 0)
            }
        }
    };
}
tls_sock!(rustls::ServerConnection);
tls_sock!(rustls::ClientConnection);

impl<S: Read + Write + Sock> Shared<S> {
    pub fn new(s: S) -> Arc<Shared<S>> {
        let _ = s.tcp().set_read_timeout(Some(Duration::from_millis(50)));
        let waiter = s.tcp().try_clone().ok();
        Arc::new(Shared {
            inner: Mutex::new(s),
            waiter,
            closed: AtomicBool::new(false),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, S> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads some bytes (0 = end of stream or closed). Waits for the socket without the
    /// lock (a writer never waits for a reader), then reads and decrypts under it.
    pub fn read(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::io::ErrorKind::{TimedOut, UnexpectedEof, WouldBlock};
        let mut eof = false;
        loop {
            if self.closed.load(Ordering::SeqCst) {
                return Ok(0);
            }
            match self.lock().buffered(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == WouldBlock => {}
                Err(e) if e.kind() == UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            if eof {
                return Ok(0);
            }
            let Some(w) = &self.waiter else {
                return Ok(0);
            };
            match w.peek(&mut [0u8; 1]) {
                Ok(_) => {}
                Err(e) if matches!(e.kind(), WouldBlock | TimedOut) => continue,
                Err(e) => return Err(e),
            }
            match self.lock().fill() {
                Ok(more) => eof = !more,
                Err(e) if matches!(e.kind(), WouldBlock | TimedOut) => {}
                Err(e) => return Err(e),
            }
        }
    }

    pub fn write_all(&self, data: &[u8]) -> std::io::Result<()> {
        let mut s = self.lock();
        s.write_all(data)?;
        s.flush()
    }

    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.lock().close();
    }
}

/// A client config with an optional client certificate; the server verified against `ca`.
pub fn test_client_config(
    cert: Option<&crate::pki::CertFiles>,
    ca: &Path,
) -> Arc<rustls::ClientConfig> {
    let b = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots(ca));
    let mut c = match cert {
        Some(c) => b
            .with_client_auth_cert(load_certs(&c.cert), load_key(&c.key))
            .expect("client certificate"),
        None => b.with_no_client_auth(),
    };
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(c)
}

/// An HTTPS connection to 127.0.0.1:`port` (server name 127.0.0.1) for raw requests.
pub fn connect(
    port: u16,
    cfg: Arc<rustls::ClientConfig>,
) -> rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream> {
    let tcp = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let name = ServerName::IpAddress(std::net::IpAddr::from([127, 0, 0, 1]).into());
    let conn = rustls::ClientConnection::new(cfg, name).expect("TLS client");
    rustls::StreamOwned::new(conn, tcp)
}

/// One request with `Connection: close` over HTTPS: (status, body text). A handshake
/// failure is status 0 with the error as the body.
pub fn request(
    port: u16,
    cfg: Arc<rustls::ClientConfig>,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut s = connect(port, cfg);
    let mut req = format!(
        "{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    if let Err(e) = s.write_all(req.as_bytes()) {
        return (0, e.to_string());
    }
    let mut raw = Vec::new();
    if let Err(e) = s.read_to_end(&mut raw) {
        if raw.is_empty() {
            return (0, e.to_string());
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let Some((head, rest)) = text.split_once("\r\n\r\n") else {
        return (0, text);
    };
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut r = rest;
        while let Some((size, tail)) = r.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 || tail.len() < n {
                break;
            }
            out.push_str(&tail[..n]);
            r = tail.get(n + 2..).unwrap_or("");
        }
        out
    } else {
        rest.to_string()
    };
    (code, body)
}
