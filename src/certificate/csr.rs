//! PKCS#10 certificate signing requests (RFC 2986), as client-go's `cert.MakeCSR` makes them:
//! subject O then CN, the SANs (DNS names, IPs) in an extensionRequest attribute, signed with
//! ecdsa-with-SHA256.

use std::net::IpAddr;

use super::CertificateError;
use super::der;
use super::key::{EcKey, ecdsa_sha256_algorithm};
use super::pem;
use super::x509::{OID_SAN, encode_name, encode_sans};

/// pkcs-9 extensionRequest 1.2.840.113549.1.9.14
const OID_EXTENSION_REQUEST: &[u64] = &[1, 2, 840, 113549, 1, 9, 14];

/// The subjectPKInfo (DER, its whole TLV) of the first `CERTIFICATE REQUEST` block of a PEM
/// text: how the certificate manager tells its own CSR from another's.
pub fn request_spki(pem_text: &[u8]) -> Result<Vec<u8>, CertificateError> {
    let block = pem::decode_all(pem_text)?
        .into_iter()
        .find(|b| b.label == pem::CERTIFICATE_REQUEST)
        .ok_or_else(|| CertificateError::Pem("no CERTIFICATE REQUEST block".into()))?;
    // CertificationRequest { info { version, subject, subjectPKInfo, .. }, algorithm, sig }
    let outer = der::Reader::new(&block.der).expect(der::SEQUENCE)?;
    let info = outer.reader().expect(der::SEQUENCE)?;
    let mut r = info.reader();
    r.expect(der::INTEGER)?;
    r.expect(der::SEQUENCE)?;
    Ok(r.expect(der::SEQUENCE)?.raw.to_vec())
}

/// What a request asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
}

impl Request {
    /// The DER CertificationRequest signed by `key`.
    pub fn sign_der(&self, key: &EcKey) -> Result<Vec<u8>, CertificateError> {
        let attributes = if self.dns_names.is_empty() && self.ip_addresses.is_empty() {
            der::tlv(der::context(0), &[])
        } else {
            let san = der::seq(&[
                &der::oid(OID_SAN),
                &der::octet_string(&encode_sans(&self.dns_names, &self.ip_addresses)),
            ]);
            let extensions = der::seq(&[&san]);
            let attr = der::seq(&[&der::oid(OID_EXTENSION_REQUEST), &der::set(&[&extensions])]);
            der::tlv(der::context(0), &attr)
        };
        let info = der::seq(&[
            &der::small_uint(0),
            &encode_name(&self.common_name, &self.organizations),
            &key.spki_der(),
            &attributes,
        ]);
        let sig = key.sign(&info)?;
        Ok(der::seq(&[
            &info,
            &ecdsa_sha256_algorithm(),
            &der::bit_string(&sig),
        ]))
    }

    /// `CERTIFICATE REQUEST` PEM, as the CSR object's `spec.request` carries it (base64 of this).
    pub fn sign_pem(&self, key: &EcKey) -> Result<String, CertificateError> {
        Ok(pem::encode(pem::CERTIFICATE_REQUEST, &self.sign_der(key)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificate::testutil::{openssl, write};
    use crate::certificate::x509::Certificate;

    #[test]
    fn openssl_verifies_our_csr_and_an_openssl_ca_signs_it() {
        let key = EcKey::generate().unwrap();
        let req = Request {
            common_name: "system:node:edge-1".into(),
            organizations: vec!["system:nodes".into()],
            dns_names: vec!["edge-1".into()],
            ip_addresses: vec!["10.1.2.3".parse().unwrap()],
        };
        let d = tempfile::tempdir().unwrap();
        let csr = write(d.path(), "r.csr", &req.sign_pem(&key).unwrap());
        let text = openssl(&["req", "-in", &csr, "-verify", "-noout", "-text"]);
        assert!(
            text.contains("O = system:nodes, CN = system:node:edge-1"),
            "{text}"
        );
        assert!(text.contains("DNS:edge-1, IP Address:10.1.2.3"), "{text}");
        assert!(text.contains("ecdsa-with-SHA256"), "{text}");
        // An openssl CA signs it; the result carries our subject, SANs and key.
        let (ca_key, ca_crt) = crate::certificate::testutil::openssl_self_signed(
            d.path(),
            "ca",
            "/CN=test-ca",
            1,
            &[],
        );
        let out = d.path().join("out.crt");
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            ca_crt.to_str().unwrap(),
            "-CAkey",
            ca_key.to_str().unwrap(),
            "-CAcreateserial",
            "-days",
            "1",
            "-copy_extensions",
            "copy",
            "-out",
            out.to_str().unwrap(),
        ]);
        let c = &Certificate::parse_pem_chain(&std::fs::read(&out).unwrap()).unwrap()[0];
        assert_eq!(c.common_name, "system:node:edge-1");
        assert_eq!(c.organizations, ["system:nodes"]);
        assert_eq!(c.dns_names, ["edge-1"]);
        assert!(c.matches_key(&key));
    }

    #[test]
    fn a_csr_without_sans_has_empty_attributes_and_verifies() {
        let key = EcKey::generate().unwrap();
        let req = Request {
            common_name: "system:node:n".into(),
            organizations: vec!["system:nodes".into()],
            ..Request::default()
        };
        let d = tempfile::tempdir().unwrap();
        let csr = write(d.path(), "r.csr", &req.sign_pem(&key).unwrap());
        let text = openssl(&["req", "-in", &csr, "-verify", "-noout", "-text"]);
        assert!(!text.contains("Subject Alternative Name"), "{text}");
    }
}
