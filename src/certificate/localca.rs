//! The device's local client CA (issue 19 section 3): `nanolet admin-kubeconfig` creates it in
//! the certificate directory and signs administrator certificates with it; the kubelet server
//! trusts it next to `--client-ca-file` and treats the users it vouches for as the device's
//! administrators (docs/kubelet-server.md, "Local administrator").
//!
//! No kubelet has this: the kubelet's clients are the API server and cluster users whose
//! certificates the cluster CA signs. The CA is made as nanolet's self-signed serving CA
//! (ECDSA P-256, `basicConstraints CA:TRUE`, `keyCertSign`), named `nanolet-client-ca@<unix>`,
//! valid from one hour ago for ten years (kubeadm's CA lifetime); client certificates are
//! `CN=<user>, O=system:masters`, extended key usage clientAuth, one year (kubeadm's
//! `admin.conf` certificate lifetime).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::CertificateError;
use super::key::EcKey;
use super::pem;
use super::store::{Pair, create_private_dir, write_private};
use super::x509::{Certificate, Template};

/// The CA certificate's file name in the certificate directory.
pub const CA_CERT: &str = "nanolet-client-ca.crt";
/// The CA key's file name (0600).
pub const CA_KEY: &str = "nanolet-client-ca.key";
/// The group every local administrator certificate carries (kube-apiserver's superuser group).
pub const ADMIN_GROUP: &str = "system:masters";
/// The default user name.
pub const DEFAULT_USER: &str = "nanolet-admin";

const HOUR: Duration = Duration::from_secs(3600);
const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// `<cert-dir>/nanolet-client-ca.crt` and `.key`.
pub fn paths(cert_dir: &Path) -> (PathBuf, PathBuf) {
    (cert_dir.join(CA_CERT), cert_dir.join(CA_KEY))
}

/// The local CA: its certificate and key.
#[derive(Debug)]
pub struct LocalCa {
    pub cert: Certificate,
    pub key: EcKey,
}

impl LocalCa {
    /// A new CA, valid from an hour before `now` for ten years.
    pub fn generate(now: SystemTime) -> Result<LocalCa, CertificateError> {
        let unix = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let key = EcKey::generate()?;
        let not_before = now - HOUR;
        let template = Template {
            serial: unix.max(1),
            common_name: format!("nanolet-client-ca@{unix}"),
            organizations: vec![],
            not_before,
            not_after: not_before + 10 * YEAR,
            is_ca: true,
            dns_names: vec![],
            ip_addresses: vec![],
        };
        let der = template.sign(&key, None, &key)?;
        Ok(LocalCa {
            cert: Certificate::parse(&der)?,
            key,
        })
    }

    /// Loads the CA of `cert_dir`, or creates it (key first, both 0600 and atomic) when neither
    /// file exists. One file without the other is an error: nanolet never replaces a CA
    /// that may have signed certificates in use.
    pub fn load_or_create(cert_dir: &Path) -> Result<(LocalCa, bool), CertificateError> {
        let (crt, key) = paths(cert_dir);
        match (crt.exists(), key.exists()) {
            (true, true) => {
                let pair = Pair::load(&crt, &key)?;
                Ok((
                    LocalCa {
                        cert: pair.leaf,
                        key: pair.key,
                    },
                    false,
                ))
            }
            (false, false) => {
                let ca = LocalCa::generate(SystemTime::now())?;
                create_private_dir(cert_dir)?;
                write_private(&key, ca.key.to_pem().as_bytes())?;
                write_private(&crt, ca.cert_pem().as_bytes())?;
                tracing::info!(cert = %crt.display(), key = %key.display(), "created the local client CA");
                Ok((ca, true))
            }
            (has_crt, _) => {
                let (missing, present) = if has_crt { (&key, &crt) } else { (&crt, &key) };
                Err(CertificateError::File {
                    path: missing.clone(),
                    reason: format!(
                        "missing while {} exists; remove both to make a new local client CA",
                        present.display()
                    ),
                })
            }
        }
    }

    pub fn cert_pem(&self) -> String {
        pem::encode(pem::CERTIFICATE, &self.cert.der)
    }

    /// A client certificate for `user` (`O=system:masters`, clientAuth), valid from an hour
    /// before `now` for one year, and its new key.
    pub fn sign_admin(&self, user: &str, now: SystemTime) -> Result<Pair, CertificateError> {
        if user.is_empty() {
            return Err(CertificateError::Certificate("empty user name".into()));
        }
        let key = EcKey::generate()?;
        let unix = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let not_before = now - HOUR;
        let template = Template {
            // Distinct per certificate (nanoseconds), positive and at most 63 bits.
            serial: (unix.as_nanos() as u64 & (u64::MAX >> 1)).max(2),
            common_name: user.to_string(),
            organizations: vec![ADMIN_GROUP.to_string()],
            not_before,
            not_after: not_before + YEAR,
            is_ca: false,
            dns_names: vec![],
            ip_addresses: vec![],
        };
        // The CA's own subject DER and key id: the CA may be one nanolet did not write.
        let der = template.sign_client(&key, Some(&self.cert.as_issuer()), &self.key)?;
        Pair::new(pem::encode(pem::CERTIFICATE, &der).into_bytes(), key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificate::testutil::{openssl, write};
    use std::os::unix::fs::PermissionsExt;

    /// RFC 5280 4.1.2.4 and 7.1: a certificate's issuer is its CA's subject as encoded; chains
    /// are built by comparing names. A CA nanolet did not write (openssl CLI, PrintableString
    /// values, C/O/OU/CN RDNs, an SKI openssl chose) must still verify the certificates nanolet
    /// signs with it, which carry SKI and an AKI matching the CA's SKI (RFC 5280 4.2.1.1-2).
    #[test]
    fn certificates_signed_by_an_openssl_ca_verify_with_its_issuer_copied_and_aki_ski() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("pki");
        std::fs::create_dir_all(&dir).unwrap();
        let (crt, key) = paths(&dir);
        let cnf = write(
            d.path(),
            "ca.cnf",
            "[req]\ndistinguished_name = dn\nstring_mask = nombstr\nprompt = no\n\
             [dn]\nC = DE\nO = Example Org\nOU = Edge Fleet\nCN = Example Root CA\n\
             [v3_ca]\nbasicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign\n\
             subjectKeyIdentifier = hash\n",
        );
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-config",
            &cnf,
            "-extensions",
            "v3_ca",
            "-days",
            "2",
            "-keyout",
            key.to_str().unwrap(),
            "-out",
            crt.to_str().unwrap(),
        ]);
        // PrintableString (0x13) values, as string_mask=nombstr writes them.
        let ca_der = crate::certificate::pem::certificates(&std::fs::read(&crt).unwrap())
            .unwrap()
            .remove(0);
        let (ca, created) = LocalCa::load_or_create(&dir).unwrap();
        assert!(!created);
        assert!(
            ca.cert.subject_der.windows(2).any(|w| w == [0x13, 11]),
            "PrintableString O"
        );
        assert_eq!(ca.cert.der, ca_der);
        let pair = ca.sign_admin("ops", SystemTime::now()).unwrap();
        assert_eq!(
            pair.leaf.subject_key_id.as_deref().map(<[u8]>::len),
            Some(20)
        );
        let leaf = write(
            d.path(),
            "ops.crt",
            std::str::from_utf8(&pair.cert_pem).unwrap(),
        );
        let out = openssl(&[
            "verify",
            "-purpose",
            "sslclient",
            "-CAfile",
            crt.to_str().unwrap(),
            &leaf,
        ]);
        assert!(out.contains(": OK"), "{out}");
        let text = openssl(&["x509", "-noout", "-text", "-in", &leaf]);
        let ca_ski = ca
            .cert
            .subject_key_id
            .clone()
            .expect("openssl wrote an SKI");
        let hex: Vec<String> = ca_ski.iter().map(|b| format!("{b:02X}")).collect();
        assert!(text.contains("X509v3 Authority Key Identifier"), "{text}");
        assert!(text.contains("X509v3 Subject Key Identifier"), "{text}");
        assert!(text.contains(&hex.join(":")), "AKI is the CA's SKI: {text}");
        assert!(
            text.contains("Issuer: C=DE, O=Example Org, OU=Edge Fleet, CN=Example Root CA")
                || text.contains(
                    "Issuer: C = DE, O = Example Org, OU = Edge Fleet, CN = Example Root CA"
                ),
            "{text}"
        );
    }

    #[test]
    fn the_ca_is_created_once_0600_and_signs_client_certificates_openssl_verifies() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("pki");
        let (ca, created) = LocalCa::load_or_create(&dir).unwrap();
        assert!(created);
        let (crt, key) = paths(&dir);
        for f in [&crt, &key] {
            let mode = std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", f.display());
        }
        let (again, created) = LocalCa::load_or_create(&dir).unwrap();
        assert!(!created, "an existing CA is reused");
        assert_eq!(again.cert.der, ca.cert.der);

        let now = SystemTime::now();
        let pair = ca.sign_admin("ops", now).unwrap();
        assert_eq!(pair.leaf.common_name, "ops");
        assert_eq!(pair.leaf.organizations, ["system:masters"]);
        let life = pair
            .leaf
            .not_after
            .duration_since(pair.leaf.not_before)
            .unwrap();
        assert_eq!(life, YEAR);
        let leaf = write(
            d.path(),
            "ops.crt",
            std::str::from_utf8(&pair.cert_pem).unwrap(),
        );
        // openssl checks the chain and the purpose (extended key usage clientAuth).
        let out = openssl(&[
            "verify",
            "-purpose",
            "sslclient",
            "-CAfile",
            crt.to_str().unwrap(),
            &leaf,
        ]);
        assert!(out.contains(": OK"), "{out}");
        let refused = std::process::Command::new("openssl")
            .args(["verify", "-purpose", "sslserver", "-CAfile"])
            .arg(&crt)
            .arg(&leaf)
            .output()
            .unwrap();
        assert!(
            !refused.status.success(),
            "a client certificate must not serve TLS"
        );
        let text = openssl(&["x509", "-in", &leaf, "-noout", "-text"]);
        assert!(text.contains("TLS Web Client Authentication"), "{text}");
    }

    #[test]
    fn half_a_ca_is_an_error_not_replaced() {
        let d = tempfile::tempdir().unwrap();
        let (ca, _) = LocalCa::load_or_create(d.path()).unwrap();
        let (crt, key) = paths(d.path());
        std::fs::remove_file(&key).unwrap();
        let err = LocalCa::load_or_create(d.path()).unwrap_err().to_string();
        assert!(err.contains(CA_KEY) && err.contains("remove both"), "{err}");
        assert_eq!(
            std::fs::read(&crt).unwrap(),
            ca.cert_pem().into_bytes(),
            "the certificate is kept"
        );
        assert!(
            LocalCa::generate(SystemTime::now())
                .unwrap()
                .sign_admin("", SystemTime::now())
                .is_err()
        );
    }
}
