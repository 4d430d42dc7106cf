//! The kubelet's self-signed serving certificate (upstream: when neither --tls-cert-file nor
//! serverTLSBootstrap is set, the kubelet writes `<cert-dir>/kubelet.crt` and `kubelet.key` made
//! by certutil.GenerateSelfSignedCertKey(hostname) unless both files can already be read):
//! a CA `<host>-ca@<unix>` and a leaf `<host>@<unix>` signed by it, both valid from one hour ago
//! for one year, the leaf a TLS server certificate whose SAN is the host (an IP SAN when the host
//! is an IP, else a DNS SAN); `kubelet.crt` holds the leaf then the CA.
//! nanolet's difference: ECDSA P-256 keys instead of RSA 2048 (ring generates no RSA keys).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::CertificateError;
use super::key::EcKey;
use super::pem;
use super::store::{Pair, create_private_dir, write_private};
use super::x509::{Certificate, Template};

/// `<cert-dir>/kubelet.crt` and `<cert-dir>/kubelet.key`.
pub fn paths(cert_dir: &Path) -> (PathBuf, PathBuf) {
    (cert_dir.join("kubelet.crt"), cert_dir.join("kubelet.key"))
}

/// The pair for `host`, as certutil.GenerateSelfSignedCertKey(host, nil, nil) makes it.
pub fn generate(host: &str, now: SystemTime) -> Result<Pair, CertificateError> {
    let valid_from = now - Duration::from_secs(3600);
    let max_age = Duration::from_secs(365 * 24 * 3600);
    let unix = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let ca_key = EcKey::generate()?;
    let ca_cn = format!("{host}-ca@{unix}");
    let ca = Template {
        serial: 1,
        common_name: ca_cn.clone(),
        organizations: vec![],
        not_before: valid_from,
        not_after: valid_from + max_age,
        is_ca: true,
        dns_names: vec![],
        ip_addresses: vec![],
    };
    let ca_der = ca.sign(&ca_key, None, &ca_key)?;
    let key = EcKey::generate()?;
    let (dns_names, ip_addresses) = match host.parse() {
        Ok(ip) => (vec![], vec![ip]),
        Err(_) => (vec![host.to_string()], vec![]),
    };
    let leaf = Template {
        serial: 2,
        common_name: format!("{host}@{unix}"),
        is_ca: false,
        dns_names,
        ip_addresses,
        ..ca
    };
    let issuer = Certificate::parse(&ca_der)?.as_issuer();
    let leaf_der = leaf.sign(&key, Some(&issuer), &ca_key)?;
    let chain = pem::encode(pem::CERTIFICATE, &leaf_der) + &pem::encode(pem::CERTIFICATE, &ca_der);
    Pair::new(chain.into_bytes(), key)
}

/// The kubelet's choice: load `kubelet.crt`/`kubelet.key` when both can be read, else make
/// and write them (0600, atomically).
pub fn load_or_generate(cert_dir: &Path, host: &str) -> Result<Pair, CertificateError> {
    let (crt, key) = paths(cert_dir);
    if crt.exists() && key.exists() {
        return Pair::load(&crt, &key);
    }
    let pair = generate(host, SystemTime::now())?;
    create_private_dir(cert_dir)?;
    write_private(&key, pair.key.to_pem().as_bytes())?;
    write_private(&crt, &pair.cert_pem)?;
    tracing::info!(cert = %crt.display(), key = %key.display(), host, "wrote a self-signed serving certificate");
    Ok(pair)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificate::testutil::openssl;
    use crate::certificate::x509::Certificate;

    #[test]
    fn the_pair_is_a_leaf_and_its_ca_as_certutil_makes_them_and_openssl_verifies() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("pki");
        let now = SystemTime::now();
        let pair = load_or_generate(&dir, "edge-7").unwrap();
        let (crt, key) = paths(&dir);
        let chain = Certificate::parse_pem_chain(&std::fs::read(&crt).unwrap()).unwrap();
        assert_eq!(chain.len(), 2, "leaf then CA");
        let (leaf, ca) = (&chain[0], &chain[1]);
        assert!(
            leaf.common_name.starts_with("edge-7@"),
            "{}",
            leaf.common_name
        );
        assert!(
            ca.common_name.starts_with("edge-7-ca@"),
            "{}",
            ca.common_name
        );
        assert_eq!(leaf.dns_names, ["edge-7"]);
        // Valid from an hour ago for a year (certutil: validFrom = now-1h, maxAge = 1 year).
        let from = now.duration_since(leaf.not_before).unwrap().as_secs();
        assert!((3599..=3601).contains(&from), "{from}");
        let life = leaf.not_after.duration_since(leaf.not_before).unwrap();
        assert_eq!(life, Duration::from_secs(365 * 24 * 3600));
        assert!(leaf.matches_key(&pair.key));
        use std::os::unix::fs::PermissionsExt;
        for f in [&crt, &key] {
            assert_eq!(
                std::fs::metadata(f).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
        // The CA (second block) verifies the leaf.
        let ca_file = d.path().join("ca.pem");
        std::fs::write(&ca_file, pem::encode(pem::CERTIFICATE, &ca.der)).unwrap();
        let out = openssl(&[
            "verify",
            "-CAfile",
            ca_file.to_str().unwrap(),
            crt.to_str().unwrap(),
        ]);
        assert!(out.contains(": OK"), "{out}");
        // A second start reuses the files.
        let again = load_or_generate(&dir, "edge-7").unwrap();
        assert_eq!(again.cert_pem, pair.cert_pem);
    }

    #[test]
    fn an_ip_host_gets_an_ip_san() {
        let pair = generate("192.168.7.1", SystemTime::now()).unwrap();
        assert!(pair.leaf.dns_names.is_empty());
        assert_eq!(
            pair.leaf.ip_addresses,
            ["192.168.7.1".parse::<std::net::IpAddr>().unwrap()]
        );
    }
}
