//! The certificate manager: TLS bootstrap of the client certificate (upstream
//! pkg/kubelet/certificate/bootstrap `LoadClientCert`), the CSR flow (client-go
//! util/certificate/csr `RequestCertificate` / `WaitForCertificate`) and rotation (client-go
//! util/certificate `manager`: `nextRotationDeadline`, `rotateCerts`).
//!
//! Threads: [`Bootstrap::run`] and [`Rotation::run`] block their caller (the wiring gives each its
//! own thread); every wait ends at once when the stop receiver fires. Nothing here logs a key,
//! a token or a certificate's bytes; CSR names, signers and paths are logged.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use tracing::{error, info, warn};

use super::CertificateError;
use super::csr::Request;
use super::key::EcKey;
use super::store::{CLIENT_PREFIX, FileStore, Pair, write_private};
use super::x509::Certificate;
use crate::apiclient::client::ApiClient;
use crate::apiclient::kubeconfig::Kubeconfig;

/// certificates.k8s.io/v1 `KubeAPIServerClientKubeletSignerName`.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// certificates.k8s.io/v1 `KubeletServingSignerName`.
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// The usages client-go requests for an ECDSA key (no key encipherment).
pub const CLIENT_USAGES: &[&str] = &["digital signature", "client auth"];
pub const SERVING_USAGES: &[&str] = &["digital signature", "server auth"];
/// Where bootstrap keeps its key while the CSR is pending (upstream `tmpPrivateKeyFile`), so a
/// restart asks again with the same key and finds the same CSR.
pub const BOOTSTRAP_KEY_FILE: &str = "kubelet-client.key.tmp";
const CSR_PATH: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

/// How long the manager waits and retries. Tests shorten these.
#[derive(Debug, Clone)]
pub struct Timing {
    /// Between two reads of a pending CSR.
    pub poll: Duration,
    /// How long one CSR is waited for (upstream: 1 h for bootstrap, 15 min for rotation).
    pub wait_timeout: Duration,
    /// Back-off between failed attempts (upstream: 2 s doubling, capped at 128 s).
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
}

impl Timing {
    pub fn bootstrap() -> Timing {
        Timing {
            poll: Duration::from_secs(2),
            wait_timeout: Duration::from_secs(3600),
            backoff_initial: Duration::from_secs(2),
            backoff_max: Duration::from_secs(128),
        }
    }

    pub fn rotation() -> Timing {
        Timing {
            wait_timeout: Duration::from_secs(15 * 60),
            ..Timing::bootstrap()
        }
    }
}

/// Waits `d` unless stopped; true when stopped (a message or the sender gone).
pub(crate) fn sleep_or_stop(stop: &Receiver<()>, d: Duration) -> bool {
    !matches!(stop.recv_timeout(d), Err(RecvTimeoutError::Timeout))
}

/// The CSR object's own settings.
#[derive(Debug, Clone, Copy)]
pub struct CsrSpec<'a> {
    pub signer: &'a str,
    pub usages: &'a [&'a str],
    /// `Some`: this name (bootstrap's digested name); `None`: `generateName: csr-`.
    pub name: Option<&'a str>,
}

/// The CSR for `key`: submitted under `name` (bootstrap: the digested `node-csr-...` name, an
/// existing CSR of the same key is reused) or `generateName: csr-` (rotation); then waited for
/// until approved and issued, denied, failed or timed out. Returns the issued PEM chain.
pub fn request_certificate(
    client: &ApiClient,
    key: &EcKey,
    request: &Request,
    spec: &CsrSpec<'_>,
    timing: &Timing,
    stop: &Receiver<()>,
) -> Result<Vec<u8>, CertificateError> {
    let CsrSpec {
        signer,
        usages,
        name,
    } = *spec;
    let csr_pem = request.sign_pem(key)?;
    let metadata = match name {
        Some(n) => json!({ "name": n }),
        None => json!({ "generateName": "csr-" }),
    };
    let body = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": metadata,
        "spec": {
            "request": crate::util::base64::encode(csr_pem.as_bytes()),
            "signerName": signer,
            "usages": usages,
        },
    });
    let created = match client.post(CSR_PATH, &body) {
        Ok(v) => v,
        Err(e) if e.status() == Some(409) && name.is_some() => {
            let n = name.unwrap_or_default();
            let existing = client.get(&format!("{CSR_PATH}/{n}"))?;
            ensure_compatible(&existing, key, signer, n)?;
            info!(
                csr = n,
                signer, "certificate signing request already exists; waiting for it"
            );
            existing
        }
        Err(e) => return Err(e.into()),
    };
    let csr_name = created["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let uid = created["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if csr_name.is_empty() {
        return Err(CertificateError::Csr {
            name: String::new(),
            reason: "the API server returned no name".into(),
        });
    }
    info!(csr = %csr_name, signer, "certificate signing request submitted; waiting for approval");
    wait_for_certificate(client, &csr_name, &uid, timing, stop)
}

/// An existing CSR of the same name is ours when its signer and public key are.
fn ensure_compatible(
    existing: &Value,
    key: &EcKey,
    signer: &str,
    name: &str,
) -> Result<(), CertificateError> {
    let incompatible = |reason: &str| CertificateError::Csr {
        name: name.to_string(),
        reason: format!("exists and is not ours: {reason}"),
    };
    if existing["spec"]["signerName"].as_str() != Some(signer) {
        return Err(incompatible("another signer"));
    }
    let request = existing["spec"]["request"].as_str().unwrap_or_default();
    let text = crate::util::base64::decode(request).map_err(|_| incompatible("bad request"))?;
    let spki = super::csr::request_spki(&text).map_err(|e| incompatible(&e.to_string()))?;
    if spki != key.spki_der() {
        return Err(incompatible("another public key"));
    }
    Ok(())
}

/// Reads the CSR every `timing.poll` until it is issued or refused (upstream
/// WaitForCertificate: Denied and Failed end the wait; Approved with a certificate returns it).
pub fn wait_for_certificate(
    client: &ApiClient,
    name: &str,
    uid: &str,
    timing: &Timing,
    stop: &Receiver<()>,
) -> Result<Vec<u8>, CertificateError> {
    let deadline = Instant::now() + timing.wait_timeout;
    loop {
        let csr = client.get(&format!("{CSR_PATH}/{name}"))?;
        let found_uid = csr["metadata"]["uid"].as_str().unwrap_or_default();
        if !uid.is_empty() && found_uid != uid {
            return Err(CertificateError::Csr {
                name: name.to_string(),
                reason: "changed UIDs".into(),
            });
        }
        if let Some(cert) = issued(&csr, name)? {
            info!(
                csr = name,
                "certificate signing request approved and issued"
            );
            return Ok(cert);
        }
        if Instant::now() >= deadline {
            return Err(CertificateError::Csr {
                name: name.to_string(),
                reason: format!(
                    "not approved and issued within {}",
                    crate::timeutil::format_go_duration(timing.wait_timeout)
                ),
            });
        }
        if sleep_or_stop(stop, timing.poll) {
            return Err(CertificateError::Stopped);
        }
    }
}

/// The issued certificate, `None` while pending, an error when denied or failed.
fn issued(csr: &Value, name: &str) -> Result<Option<Vec<u8>>, CertificateError> {
    let mut approved = false;
    for c in csr["status"]["conditions"].as_array().into_iter().flatten() {
        let kind = c["type"].as_str().unwrap_or_default();
        if (kind == "Denied" || kind == "Failed") && c["status"].as_str() != Some("False") {
            return Err(CertificateError::Refused {
                name: name.to_string(),
                denied: kind == "Denied",
                reason: c["reason"].as_str().unwrap_or_default().to_string(),
                message: c["message"].as_str().unwrap_or_default().to_string(),
            });
        }
        approved |= kind == "Approved" && c["status"].as_str() != Some("False");
    }
    let cert = csr["status"]["certificate"].as_str().unwrap_or_default();
    if !approved || cert.is_empty() {
        return Ok(None);
    }
    let pem_bytes = crate::util::base64::decode(cert).map_err(|_| CertificateError::Csr {
        name: name.to_string(),
        reason: "status.certificate is not base64".into(),
    })?;
    Ok(Some(pem_bytes))
}

/// upstream nextRotationDeadline: notBefore + lifetime * (0.7 + 0.2 * u), u uniform in [0, 1)
/// (wait.Jitter(total, 0.2) - 0.3 * total).
pub fn rotation_deadline(leaf: &Certificate, u: f64) -> SystemTime {
    let total = leaf
        .not_after
        .duration_since(leaf.not_before)
        .unwrap_or_default();
    leaf.not_before + total.mul_f64(0.7 + 0.2 * u.clamp(0.0, 1.0))
}

/// A uniform number in [0, 1) from the system's random source.
pub fn uniform() -> f64 {
    let mut b = [0u8; 8];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
}

/// The node's client certificate request (CN system:node:<node>, O system:nodes).
pub fn client_request(node_name: &str) -> Request {
    Request {
        common_name: format!("system:node:{node_name}"),
        organizations: vec!["system:nodes".into()],
        ..Request::default()
    }
}

/// upstream digestedName: `node-csr-` + base64url(SHA-512/256 over the public key, CN, O and
/// usages, each base64url encoded and followed by `|`), so a restart finds its own CSR.
pub fn digested_name(key: &EcKey, request: &Request, usages: &[&str]) -> String {
    use sha2::Digest;
    let enc = crate::util::base64::encode_raw_url;
    let mut h = sha2::Sha512_256::new();
    let mut write = |d: &[u8]| {
        h.update(enc(d).as_bytes());
        h.update(b"|");
    };
    write(&key.spki_der());
    write(request.common_name.as_bytes());
    for o in &request.organizations {
        write(o.as_bytes());
    }
    for u in usages {
        write(u.as_bytes());
    }
    format!("node-csr-{}", enc(&h.finalize()))
}

/// TLS bootstrap of the client certificate (`--bootstrap-kubeconfig`).
#[derive(Debug, Clone)]
pub struct Bootstrap {
    pub kubeconfig: PathBuf,
    pub bootstrap_kubeconfig: PathBuf,
    pub cert_dir: PathBuf,
    pub node_name: String,
    pub timing: Timing,
}

impl Bootstrap {
    /// upstream isClientConfigStillValid: the kubeconfig exists, loads, and every certificate
    /// of its client certificate is unexpired. A kubeconfig without a client certificate (a
    /// token) is not (the kubelet bootstraps then too).
    pub fn kubeconfig_still_valid(&self, now: SystemTime) -> bool {
        if !self.kubeconfig.exists() {
            return false;
        }
        let kc = match Kubeconfig::load(&self.kubeconfig) {
            Ok(kc) => kc,
            Err(e) => {
                warn!(error = %e, "unable to read the existing kubeconfig; bootstrapping");
                return false;
            }
        };
        let certs = kc
            .client_cert_pem
            .as_deref()
            .map(Certificate::parse_pem_chain)
            .and_then(Result::ok)
            .unwrap_or_default();
        if certs.is_empty() {
            warn!(kubeconfig = %self.kubeconfig.display(), "the kubeconfig has no client certificate; bootstrapping");
            return false;
        }
        if let Some(c) = certs.iter().find(|c| now > c.not_after) {
            warn!(kubeconfig = %self.kubeconfig.display(), not_after = %crate::timeutil::rfc3339(c.not_after), "part of the existing client certificate is expired; bootstrapping");
            return false;
        }
        true
    }

    /// One bootstrap attempt: the kept (or a new) key, the CSR with the bootstrap credentials,
    /// the store, then `--kubeconfig` written atomically (0600). Returns the new kubeconfig.
    pub fn attempt(&self, stop: &Receiver<()>) -> Result<Kubeconfig, CertificateError> {
        let bootstrap = Kubeconfig::load(&self.bootstrap_kubeconfig)?;
        let client = ApiClient::new(&bootstrap, Duration::from_secs(10))?;
        super::store::create_private_dir(&self.cert_dir)?;
        let key_path = self.cert_dir.join(BOOTSTRAP_KEY_FILE);
        let key = load_or_generate_key(&key_path)?;
        let request = client_request(&self.node_name);
        let name = digested_name(&key, &request, CLIENT_USAGES);
        let cert = request_certificate(
            &client,
            &key,
            &request,
            &CsrSpec {
                signer: CLIENT_SIGNER,
                usages: CLIENT_USAGES,
                name: Some(&name),
            },
            &self.timing,
            stop,
        )
        .inspect_err(|e| {
            if matches!(e, CertificateError::Refused { .. }) {
                // nanolet's choice: a denied CSR is not asked again with the same key (its
                // digested name would find the same denied CSR); the next attempt uses a new one.
                let _ = std::fs::remove_file(&key_path);
            }
        })?;
        let pair = Pair::new(cert, key)?;
        let store = FileStore::new(&self.cert_dir, CLIENT_PREFIX);
        let file = store.update(&pair)?;
        if let Err(e) = std::fs::remove_file(&key_path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                warn!(path = %key_path.display(), error = %e, "removing the bootstrap key file");
            }
        }
        write_kubeconfig(&self.kubeconfig, &bootstrap, &store.current_path())?;
        info!(cert = %file.display(), kubeconfig = %self.kubeconfig.display(), node = %self.node_name, "TLS bootstrap done: client certificate issued");
        Ok(Kubeconfig::load(&self.kubeconfig)?)
    }

    /// Bootstraps until it succeeds (`Some`) or `stop` fires (`None`), retrying with back-off.
    /// Static pods do not wait for this: the caller runs it on its own thread.
    pub fn run(&self, stop: &Receiver<()>) -> Option<Kubeconfig> {
        let mut delay = self.timing.backoff_initial;
        loop {
            match self.attempt(stop) {
                Ok(kc) => return Some(kc),
                Err(CertificateError::Stopped) => return None,
                Err(e) => {
                    log_failure("TLS bootstrap", &e, delay);
                }
            }
            if sleep_or_stop(stop, delay) {
                return None;
            }
            delay = (delay * 2).min(self.timing.backoff_max);
        }
    }
}

fn log_failure(what: &str, e: &CertificateError, retry_in: Duration) {
    let retry = crate::timeutil::format_go_duration(retry_in);
    match e {
        CertificateError::Refused { name, .. } => {
            error!(csr = %name, error = %e, retry_in = %retry, "{what}: certificate signing request refused; pods keep running");
        }
        CertificateError::Csr { name, .. } => {
            warn!(csr = %name, error = %e, retry_in = %retry, "{what}: certificate signing request not issued; pods keep running");
        }
        _ => warn!(error = %e, retry_in = %retry, "{what} failed; pods keep running"),
    }
}

/// The bootstrap key kept across restarts while the CSR is pending.
fn load_or_generate_key(path: &Path) -> Result<EcKey, CertificateError> {
    if let Ok(text) = std::fs::read(path) {
        match EcKey::from_pem(&text) {
            Ok(k) => return Ok(k),
            Err(e) => {
                warn!(path = %path.display(), error = %e, "unusable bootstrap key; generating a new one")
            }
        }
    }
    let key = EcKey::generate()?;
    write_private(path, key.to_pem().as_bytes())?;
    Ok(key)
}

/// upstream writeKubeconfigFromBootstrapping: cluster `default-cluster` (the bootstrap
/// kubeconfig's server and CA, CA inline), user `default-auth` with client-certificate and
/// client-key both `pem_path`, context `default-context` (namespace default), current.
pub fn write_kubeconfig(
    path: &Path,
    bootstrap: &Kubeconfig,
    pem_path: &Path,
) -> Result<(), CertificateError> {
    let q = |s: &str| Value::from(s).to_string();
    let mut cluster = format!("    server: {}\n", q(&bootstrap.server));
    if let Some(ca) = &bootstrap.ca_pem {
        cluster.push_str(&format!(
            "    certificate-authority-data: {}\n",
            crate::util::base64::encode(ca)
        ));
    }
    if bootstrap.insecure_skip_tls_verify {
        cluster.push_str("    insecure-skip-tls-verify: true\n");
    }
    let pem = q(&pem_path.to_string_lossy());
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n{cluster}  name: default-cluster\n\
         contexts:\n- context:\n    cluster: default-cluster\n    namespace: default\n    user: default-auth\n  name: default-context\n\
         current-context: default-context\npreferences: {{}}\n\
         users:\n- name: default-auth\n  user:\n    client-certificate: {pem}\n    client-key: {pem}\n"
    );
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        super::store::create_private_dir(dir)?;
    }
    write_private(path, text.as_bytes())
}

/// What a renewed pair is handed to (the client swaps its credentials, the serving certificate
/// its key).
pub type OnRenewed = Box<dyn Fn(&Pair) -> Result<(), CertificateError> + Send>;

/// Records a Node event: (warning, reason, message). The wiring passes one that records
/// through the event recorder, so that this module depends on nothing above it.
pub type OnEvent = Arc<dyn Fn(bool, &str, &str) + Send + Sync>;

/// Reason of the Node event for a denied certificate signing request (nanolet's own).
pub const REASON_DENIED: &str = "CertificateSigningRequestDenied";
/// Reason of the Node event for a failed request or rotation (nanolet's own).
pub const REASON_FAILED: &str = "CertificateRotationFailed";
/// Reason of the Node event for a rotated certificate (nanolet's own).
pub const REASON_ROTATED: &str = "CertificateRotated";

/// The Node event for a failed rotation of the `which` certificate: (reason, message).
pub fn failure_event(which: &str, e: &CertificateError) -> (&'static str, String) {
    match e {
        CertificateError::Refused { denied, .. } => (
            if *denied {
                REASON_DENIED
            } else {
                REASON_FAILED
            },
            format!("{which} certificate: {e}; pods keep running"),
        ),
        _ => (
            REASON_FAILED,
            format!("{which} certificate rotation failed: {e}; pods keep running"),
        ),
    }
}

/// Rotation of one certificate (client or serving) through the CSR API.
pub struct Rotation {
    /// The current credentials: the CSR is made with them.
    pub client: Arc<ApiClient>,
    pub store: FileStore,
    /// What to ask for (read at each rotation: node addresses may change).
    pub request: Box<dyn Fn() -> Request + Send>,
    pub signer: &'static str,
    pub usages: &'static [&'static str],
    pub on_renewed: OnRenewed,
    pub timing: Timing,
    /// `client` or `serving`, for logs.
    pub name: &'static str,
    /// Node events for failed and successful rotations, when set.
    pub on_event: Option<OnEvent>,
}

impl Rotation {
    /// Sleeps until the rotation deadline of the stored certificate (at once when there is
    /// none or it lacks what the request asks for), renews, hands the pair on, and again.
    /// Failures retry with back-off; an expired certificate is logged as such, pods keep running.
    pub fn run(self, stop: Receiver<()>) {
        let mut delay = self.timing.backoff_initial;
        loop {
            let current = match self.store.current() {
                Ok(c) => c,
                Err(e) => {
                    warn!(certificate = self.name, error = %e, "the stored certificate is unusable; requesting a new one");
                    None
                }
            };
            let now = SystemTime::now();
            let deadline = match &current {
                Some(p) if satisfies(&p.leaf, &(self.request)()) => {
                    rotation_deadline(&p.leaf, uniform())
                }
                _ => now,
            };
            if let Ok(wait) = deadline.duration_since(now) {
                info!(certificate = self.name, deadline = %crate::timeutil::rfc3339(deadline), "certificate rotation scheduled");
                if sleep_or_stop(&stop, wait) {
                    return;
                }
            }
            match self.rotate(&stop) {
                Ok(()) => delay = self.timing.backoff_initial,
                Err(CertificateError::Stopped) => return,
                Err(e) => {
                    if let Some(on_event) = &self.on_event {
                        let (reason, message) = failure_event(self.name, &e);
                        on_event(true, reason, &message);
                    }
                    if current
                        .as_ref()
                        .is_some_and(|p| SystemTime::now() > p.leaf.not_after)
                    {
                        error!(
                            certificate = self.name,
                            "the certificate has expired and could not be renewed yet; pods keep running, retrying"
                        );
                    }
                    log_failure("certificate rotation", &e, delay);
                    if sleep_or_stop(&stop, delay) {
                        return;
                    }
                    delay = (delay * 2).min(self.timing.backoff_max);
                }
            }
        }
    }

    /// One renewal: a new key and CSR, stored, handed on.
    pub fn rotate(&self, stop: &Receiver<()>) -> Result<(), CertificateError> {
        info!(certificate = self.name, "rotating certificate");
        let key = EcKey::generate()?;
        let request = (self.request)();
        let cert = request_certificate(
            &self.client,
            &key,
            &request,
            &CsrSpec {
                signer: self.signer,
                usages: self.usages,
                name: None,
            },
            &self.timing,
            stop,
        )?;
        let pair = Pair::new(cert, key)?;
        let file = self.store.update(&pair)?;
        (self.on_renewed)(&pair)?;
        if let Some(on_event) = &self.on_event {
            let message = format!(
                "{} certificate rotated, valid until {}",
                self.name,
                crate::timeutil::rfc3339(pair.leaf.not_after)
            );
            on_event(false, REASON_ROTATED, &message);
        }
        info!(certificate = self.name, file = %file.display(), not_after = %crate::timeutil::rfc3339(pair.leaf.not_after), "certificate rotated");
        Ok(())
    }
}

/// upstream certSatisfiesTemplate: same CN, and no requested DNS name, IP or O missing.
fn satisfies(leaf: &Certificate, want: &Request) -> bool {
    leaf.common_name == want.common_name
        && want.dns_names.iter().all(|d| leaf.dns_names.contains(d))
        && want
            .ip_addresses
            .iter()
            .all(|i| leaf.ip_addresses.contains(i))
        && want
            .organizations
            .iter()
            .all(|o| leaf.organizations.contains(o))
}

/// The client rotation: renewed pairs go live in `client` at once (no restart).
pub fn client_rotation(
    client: Arc<ApiClient>,
    cert_dir: &Path,
    node_name: &str,
    kubeconfig: Kubeconfig,
) -> Rotation {
    let live = client.clone();
    let node = node_name.to_string();
    Rotation {
        client,
        store: FileStore::new(cert_dir, CLIENT_PREFIX),
        request: Box::new(move || client_request(&node)),
        signer: CLIENT_SIGNER,
        usages: CLIENT_USAGES,
        on_renewed: Box::new(move |pair| {
            let mut kc = kubeconfig.clone();
            kc.token = None;
            kc.client_cert_pem = Some(pair.cert_pem.clone());
            kc.client_key_pem = Some(pair.key.to_pem().into_bytes());
            live.set_credentials(&kc)?;
            Ok(())
        }),
        timing: Timing::rotation(),
        name: "client",
        on_event: None,
    }
}

/// Alias kept for the module's re-export.
pub type ClientRotation = Rotation;

/// `--rotate-certificates`: the client rotation for the client made from `kubeconfig`, as the
/// kubelet's client certificate manager starts it: the store's current pair (a previous
/// rotation's) is used when it is valid and newer than the kubeconfig's, else the kubeconfig's
/// pair seeds the store (upstream: the store falls back to the kubeconfig's cert and key files).
pub fn prepare_client_rotation(
    client: Arc<ApiClient>,
    kubeconfig: &Path,
    cert_dir: &Path,
    node_name: &str,
) -> Result<Rotation, CertificateError> {
    let kc = Kubeconfig::load(kubeconfig)?;
    let store = FileStore::new(cert_dir, CLIENT_PREFIX);
    let from_kubeconfig = match (&kc.client_cert_pem, &kc.client_key_pem) {
        (Some(c), Some(k)) => EcKey::from_pem(k)
            .and_then(|k| Pair::new(c.clone(), k))
            .ok(),
        _ => None,
    };
    let now = SystemTime::now();
    match (store.current(), from_kubeconfig) {
        (Ok(Some(stored)), kc_pair)
            if stored.leaf.is_valid_at(now)
                && kc_pair
                    .as_ref()
                    .is_none_or(|p| p.leaf.not_before < stored.leaf.not_before) =>
        {
            let mut live = kc.clone();
            live.token = None;
            live.client_cert_pem = Some(stored.cert_pem.clone());
            live.client_key_pem = Some(stored.key.to_pem().into_bytes());
            client.set_credentials(&live)?;
            info!(cert = %store.current_path().display(), "client certificate: using the rotated one from the certificate directory");
        }
        (Ok(None), Some(p)) => {
            store.update(&p)?;
        }
        _ => {}
    }
    Ok(client_rotation(client, cert_dir, node_name, kc))
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
