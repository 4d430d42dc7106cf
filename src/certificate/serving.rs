//! The kubelet's serving certificate for the HTTPS server on `--port`, as a rustls certificate
//! resolver whose key can be swapped while the server runs. Where it comes from (upstream
//! kubelet server.go and pkg/kubelet/certificate `NewKubeletServerCertificateManager`):
//! 1. `--tls-cert-file` + `--tls-private-key-file` (any key rustls supports: ECDSA, RSA, Ed25519);
//! 2. else `serverTLSBootstrap`: a CSR to `kubernetes.io/kubelet-serving` (CN
//!    `system:node:<node>`, O `system:nodes`, SANs: node name, hostname, node addresses),
//!    rotated like the client certificate, kept as `<cert-dir>/kubelet-server-current.pem`;
//!    until the first one is issued there is no certificate and handshakes fail, as upstream;
//! 3. else the self-signed `<cert-dir>/kubelet.crt` / `kubelet.key` ([`super::selfsigned`]).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer,
};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::CertificateError;
use super::csr::Request;
use super::manager::{Rotation, SERVING_SIGNER, SERVING_USAGES, Timing};
use super::pem;
use super::store::{FileStore, Pair, SERVER_PREFIX};
use crate::apiclient::client::ApiClient;
use crate::kubeletconfig::Config;

/// Where the serving certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Files {
        cert: PathBuf,
        key: PathBuf,
    },
    /// serverTLSBootstrap, in this certificate directory.
    Bootstrap {
        cert_dir: PathBuf,
    },
    SelfSigned {
        cert: PathBuf,
        key: PathBuf,
    },
}

/// The serving certificate: a rustls resolver over a swappable [`CertifiedKey`].
pub struct ServingCertificate {
    current: RwLock<Option<Arc<CertifiedKey>>>,
    origin: Origin,
    /// For serverTLSBootstrap: the node name and the SANs to request.
    node_name: String,
    sans: (Vec<String>, Vec<IpAddr>),
    /// The rotation thread was started (only the first client attached counts).
    attached: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for ServingCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCertificate")
            .field("origin", &self.origin)
            .field("loaded", &self.current().is_some())
            .finish()
    }
}

impl ResolvesServerCert for ServingCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current()
    }
}

fn file_error(path: &Path, reason: impl ToString) -> CertificateError {
    CertificateError::File {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// A rustls CertifiedKey from PEM files (the key may be PKCS#8, SEC1 or PKCS#1).
pub fn certified_key_from_files(cert: &Path, key: &Path) -> Result<CertifiedKey, CertificateError> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| file_error(p, e));
    let chain: Vec<CertificateDer<'static>> = pem::certificates(&read(cert)?)
        .map_err(|e| file_error(cert, e))?
        .into_iter()
        .map(CertificateDer::from)
        .collect();
    if chain.is_empty() {
        return Err(file_error(cert, "no PEM CERTIFICATE block"));
    }
    let blocks = pem::decode_all(&read(key)?).map_err(|e| file_error(key, e))?;
    let der = blocks
        .into_iter()
        .find_map(|b| match b.label {
            pem::PRIVATE_KEY => Some(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(b.der))),
            pem::EC_PRIVATE_KEY => Some(PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(b.der))),
            pem::RSA_PRIVATE_KEY => Some(PrivateKeyDer::Pkcs1(PrivatePkcs1KeyDer::from(b.der))),
            _ => None,
        })
        .ok_or_else(|| file_error(key, "no PEM private key block"))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&der)
        .map_err(|_| file_error(key, "unsupported private key"))?;
    let ck = CertifiedKey::new(chain, signing);
    match ck.keys_match() {
        Ok(()) => Ok(ck),
        // rustls cannot tell for some key types: accept then.
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(ck),
        Err(_) => Err(file_error(
            cert,
            "the certificate does not match the private key",
        )),
    }
}

/// A rustls CertifiedKey from a pair nanolet holds.
pub fn certified_key(pair: &Pair) -> Result<CertifiedKey, CertificateError> {
    let chain: Vec<CertificateDer<'static>> = pem::certificates(&pair.cert_pem)?
        .into_iter()
        .map(CertificateDer::from)
        .collect();
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pair.key.pkcs8_der().to_vec()));
    let signing = rustls::crypto::ring::sign::any_ecdsa_type(&der)
        .map_err(|_| CertificateError::Key("rustls refused the key".into()))?;
    Ok(CertifiedKey::new(chain, signing))
}

impl ServingCertificate {
    /// The serving certificate `cfg` asks for (see the module doc). With serverTLSBootstrap
    /// and a `client`, its rotation starts now ([`ServingCertificate::attach_client`]);
    /// without one, the wiring attaches the client once bootstrap has made it.
    pub fn from_config(
        cfg: &Config,
        client: Option<Arc<ApiClient>>,
    ) -> Result<Arc<ServingCertificate>, CertificateError> {
        let cert_dir = cfg.cert_dir();
        let (origin, current) = match (&cfg.tls_cert_file, &cfg.tls_private_key_file) {
            (Some(cert), Some(key)) => (
                Origin::Files {
                    cert: cert.clone(),
                    key: key.clone(),
                },
                Some(certified_key_from_files(cert, key)?),
            ),
            _ if cfg.server_tls_bootstrap => {
                let stored = FileStore::new(&cert_dir, SERVER_PREFIX).current()?;
                let ck = stored.as_ref().map(certified_key).transpose()?;
                (
                    Origin::Bootstrap {
                        cert_dir: cert_dir.clone(),
                    },
                    ck,
                )
            }
            _ => {
                // upstream: nodeutil.GetHostname(--hostname-override), our node name.
                let pair = super::selfsigned::load_or_generate(&cert_dir, &cfg.node_name)?;
                let (cert, key) = super::selfsigned::paths(&cert_dir);
                (
                    Origin::SelfSigned { cert, key },
                    Some(certified_key(&pair)?),
                )
            }
        };
        let sc = Arc::new(ServingCertificate {
            current: RwLock::new(current.map(Arc::new)),
            origin,
            node_name: cfg.node_name.clone(),
            sans: serving_sans(cfg),
            attached: std::sync::atomic::AtomicBool::new(false),
        });
        if let Some(client) = client {
            sc.attach_client(client)?;
        }
        Ok(sc)
    }

    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The certificate served now (`None` while serverTLSBootstrap waits for the first one).
    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        match self.current.read() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Serves `ck` from the next handshake on.
    pub fn set(&self, ck: CertifiedKey) {
        let ck = Some(Arc::new(ck));
        match self.current.write() {
            Ok(mut c) => *c = ck,
            Err(p) => *p.into_inner() = ck,
        }
    }

    /// serverTLSBootstrap: starts the rotation thread (requests at once when there is no
    /// certificate yet) with `client`'s credentials; it ends when this certificate is dropped.
    /// A second call, or any call without serverTLSBootstrap, does nothing.
    pub fn attach_client(self: &Arc<Self>, client: Arc<ApiClient>) -> Result<(), CertificateError> {
        let Origin::Bootstrap { cert_dir } = &self.origin else {
            return Ok(());
        };
        if self
            .attached
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return Ok(());
        }
        let weak = Arc::downgrade(self);
        let node = self.node_name.clone();
        let (dns, ips) = self.sans.clone();
        let rotation = Rotation {
            client,
            store: FileStore::new(cert_dir, SERVER_PREFIX),
            request: Box::new(move || Request {
                common_name: format!("system:node:{node}"),
                organizations: vec!["system:nodes".into()],
                dns_names: dns.clone(),
                ip_addresses: ips.clone(),
            }),
            signer: SERVING_SIGNER,
            usages: SERVING_USAGES,
            on_renewed: Box::new(move |pair| {
                if let Some(sc) = weak.upgrade() {
                    sc.set(certified_key(pair)?);
                }
                Ok(())
            }),
            timing: Timing::rotation(),
            name: "serving",
            // the serving rotation records no Node event yet.
            on_event: None,
        };
        // The thread stops when the certificate is gone: a watcher drops the stop sender then.
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let watch = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("serving-cert".into())
            .stack_size(512 * 1024)
            .spawn(move || {
                let guard = std::thread::Builder::new()
                    .name("serving-cert-watch".into())
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        while watch.strong_count() > 0 {
                            std::thread::park_timeout(std::time::Duration::from_secs(5));
                        }
                        drop(stop_tx);
                    });
                if guard.is_err() {
                    tracing::warn!(
                        "serving certificate: no watcher thread; rotation runs until exit"
                    );
                }
                rotation.run(stop_rx)
            })
            .map_err(|source| CertificateError::Io {
                path: cert_dir.clone(),
                source,
            })?;
        Ok(())
    }
}

/// The machine's hostname (lowercase), else `fallback`.
fn hostname_or(fallback: &str) -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .map(|h| h.trim().to_lowercase())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| fallback.to_string())
}

/// The serving CSR's SANs: DNS the node name and the hostname (when different), IPs the node
/// addresses (`--node-ip`, else the default route's address), as the kubelet's
/// node-address-based template.
fn serving_sans(cfg: &Config) -> (Vec<String>, Vec<IpAddr>) {
    let mut dns = vec![cfg.node_name.clone()];
    let host = hostname_or(&cfg.node_name);
    if !dns.contains(&host) && host.parse::<IpAddr>().is_err() {
        dns.push(host);
    }
    let ips = if cfg.node_ips.is_empty() {
        vec![crate::node::detect_host_ip()]
    } else {
        cfg.node_ips.clone()
    };
    (dns, ips)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_when_nothing_is_given_and_files_when_given() {
        let d = tempfile::tempdir().unwrap();
        let mut cfg = Config::defaults("edge-1".into());
        cfg.root_dir = d.path().to_path_buf();
        cfg.node_ips = vec!["10.0.0.9".parse().unwrap()];
        let sc = ServingCertificate::from_config(&cfg, None).unwrap();
        assert!(matches!(sc.origin(), Origin::SelfSigned { .. }));
        let ck = sc.current().unwrap();
        assert_eq!(ck.cert.len(), 2, "leaf and its CA");
        assert!(d.path().join("pki/kubelet.crt").exists());
        assert!(!format!("{sc:?}").contains("PRIVATE"));

        // --tls-cert-file/--tls-private-key-file: an openssl RSA pair is served as is.
        let key = d.path().join("tls.key");
        let crt = d.path().join("tls.crt");
        crate::certificate::testutil::openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            key.to_str().unwrap(),
            "-out",
            crt.to_str().unwrap(),
            "-days",
            "1",
            "-subj",
            "/CN=edge-1",
        ]);
        cfg.tls_cert_file = Some(crt.clone());
        cfg.tls_private_key_file = Some(key.clone());
        let sc = ServingCertificate::from_config(&cfg, None).unwrap();
        assert_eq!(
            sc.origin(),
            &Origin::Files {
                cert: crt.clone(),
                key: key.clone()
            }
        );
        assert_eq!(sc.current().unwrap().cert.len(), 1);

        // A mismatched key is refused naming the file.
        let other = d.path().join("other.key");
        crate::certificate::testutil::openssl(&[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            other.to_str().unwrap(),
        ]);
        cfg.tls_private_key_file = Some(other);
        let e = ServingCertificate::from_config(&cfg, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("tls.crt") && e.contains("does not match"), "{e}");
    }

    #[test]
    fn server_tls_bootstrap_serves_nothing_until_issued() {
        let d = tempfile::tempdir().unwrap();
        let mut cfg = Config::defaults("edge-1".into());
        cfg.root_dir = d.path().to_path_buf();
        cfg.server_tls_bootstrap = true;
        cfg.node_ips = vec!["10.0.0.9".parse().unwrap()];
        let sc = ServingCertificate::from_config(&cfg, None).unwrap();
        assert!(sc.current().is_none());
        let (dns, ips) = serving_sans(&cfg);
        assert_eq!(dns[0], "edge-1");
        assert_eq!(ips, ["10.0.0.9".parse::<IpAddr>().unwrap()]);
    }

    #[test]
    fn openssl_s_client_verifies_the_self_signed_chain_served_through_the_resolver() {
        use std::io::{Read, Write};
        let d = tempfile::tempdir().unwrap();
        let mut cfg = Config::defaults("edge-1".into());
        cfg.root_dir = d.path().to_path_buf();
        let sc = ServingCertificate::from_config(&cfg, None).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server_cfg = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_cert_resolver(sc.clone()),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut tcp, _) = listener.accept().unwrap();
            let mut conn = rustls::ServerConnection::new(server_cfg).unwrap();
            let mut tls = rustls::Stream::new(&mut conn, &mut tcp);
            let mut buf = [0u8; 5];
            tls.read_exact(&mut buf).unwrap();
            tls.write_all(b"pong\n").unwrap();
            tls.flush().unwrap();
            conn.send_close_notify();
            let _ = conn.write_tls(&mut tcp);
            buf
        });
        // The CA is the second certificate of kubelet.crt.
        let chain = std::fs::read(d.path().join("pki/kubelet.crt")).unwrap();
        let ca = pem::certificates(&chain).unwrap()[1].clone();
        let ca_file = d.path().join("ca.pem");
        std::fs::write(&ca_file, pem::encode(pem::CERTIFICATE, &ca)).unwrap();
        let mut child = std::process::Command::new("openssl")
            .args([
                "s_client",
                "-connect",
                &format!("127.0.0.1:{port}"),
                "-CAfile",
                ca_file.to_str().unwrap(),
                "-verify_return_error",
                "-verify_hostname",
                "edge-1",
                "-quiet",
                "-ign_eof",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.as_mut().unwrap().write_all(b"ping\n").unwrap();
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("pong"),
            "{stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(&server.join().unwrap(), b"ping\n");
    }
}
