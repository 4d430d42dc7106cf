//! The subject of a client certificate (CN and O): the x509 authenticator's user name and
//! groups. rustls verifies the certificate (chain to the client CA, validity, client-auth
//! usage) with webpki; the subject is taken from webpki's own parse of the same certificate
//! (`EndEntityCert`, the parse the chain was verified with), so no second parser decides where
//! the subject is. Its RDNs are read by the certificate module's one Name reader
//! ([`crate::certificate::x509::name_cn_and_organizations`], on the one DER reader
//! `certificate::der`). Anything malformed is refused. (Issue 34; the fuzz target
//! `client_identity` drives this.)

use rustls::pki_types::CertificateDer;

/// The subject's CommonName (the last one, as Go's `pkix.Name` keeps) and Organizations, in
/// order; `None` for DER that webpki does not take as an end-entity certificate, or whose
/// subject cannot be read.
pub fn subject_cn_and_organizations(cert_der: &[u8]) -> Option<(String, Vec<String>)> {
    let der = CertificateDer::from(cert_der);
    let cert = webpki::EndEntityCert::try_from(&der).ok()?;
    crate::certificate::x509::name_cn_and_organizations(cert.subject()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A certificate made by the openssl CLI, as DER.
    fn openssl_cert(subject: &str) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let (key, pem, der) = (
            dir.path().join("k.pem"),
            dir.path().join("c.pem"),
            dir.path().join("c.der"),
        );
        let ok = Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args(["-nodes", "-days", "1", "-subj", subject, "-utf8"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&pem)
            .output()
            .unwrap();
        assert!(
            ok.status.success(),
            "{}",
            String::from_utf8_lossy(&ok.stderr)
        );
        let ok = Command::new("openssl")
            .args(["x509", "-outform", "DER", "-in"])
            .arg(&pem)
            .arg("-out")
            .arg(&der)
            .output()
            .unwrap();
        assert!(ok.status.success());
        std::fs::read(der).unwrap()
    }

    #[test]
    fn cn_and_organizations_of_an_openssl_certificate() {
        let der = openssl_cert("/O=system:masters/O=ops team/CN=kube-apiserver-kubelet-client");
        assert_eq!(
            subject_cn_and_organizations(&der),
            Some((
                "kube-apiserver-kubelet-client".to_string(),
                vec!["system:masters".to_string(), "ops team".to_string()]
            ))
        );
        let der = openssl_cert("/CN=system:node:edge-1/O=system:nodes");
        assert_eq!(
            subject_cn_and_organizations(&der),
            Some((
                "system:node:edge-1".to_string(),
                vec!["system:nodes".to_string()]
            ))
        );
    }

    #[test]
    fn malformed_der_is_refused() {
        let der = openssl_cert("/CN=x");
        for cut in [0, 1, 2, 10, der.len() / 2] {
            assert_eq!(subject_cn_and_organizations(&der[..cut]), None, "cut {cut}");
        }
        assert_eq!(
            subject_cn_and_organizations(b"\x30\x84\xff\xff\xff\xff"),
            None
        );
        assert_eq!(subject_cn_and_organizations(b"\x02\x01\x00"), None);
    }
}
