//! X.509 certificates (RFC 5280): the parts nanolet reads (validity, subject CN and O, SANs, the
//! public key, to match it with a key) and a writer for the certificates nanolet signs itself
//! (the self-signed serving pair). Signatures are not verified here: a certificate comes from a
//! file nanolet wrote or from the API server's CSR status, and TLS peers verify chains.

use std::net::IpAddr;
use std::time::SystemTime;

use super::CertificateError;
use super::der::{self, Reader, Tlv};
use super::key::{EcKey, ecdsa_sha256_algorithm};

const OID_CN: &[u64] = &[2, 5, 4, 3];
const OID_O: &[u64] = &[2, 5, 4, 10];
pub(crate) const OID_SAN: &[u64] = &[2, 5, 29, 17];
const OID_KEY_USAGE: &[u64] = &[2, 5, 29, 15];
const OID_BASIC_CONSTRAINTS: &[u64] = &[2, 5, 29, 19];
const OID_EXT_KEY_USAGE: &[u64] = &[2, 5, 29, 37];
const OID_SUBJECT_KEY_ID: &[u64] = &[2, 5, 29, 14];
const OID_AUTHORITY_KEY_ID: &[u64] = &[2, 5, 29, 35];
const OID_SERVER_AUTH: &[u64] = &[1, 3, 6, 1, 5, 5, 7, 3, 1];
const OID_CLIENT_AUTH: &[u64] = &[1, 3, 6, 1, 5, 5, 7, 3, 2];

/// What nanolet reads from a certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certificate {
    pub der: Vec<u8>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    /// The subjectPublicKey bits (for EC: the uncompressed point).
    pub public_key: Vec<u8>,
    /// The subject Name as encoded (the whole TLV): what a certificate this one issues
    /// carries as its issuer, byte for byte (RFC 5280 4.1.2.4, 7.1: chains are built by
    /// comparing names; a re-encoded name may differ in string types or RDNs).
    pub subject_der: Vec<u8>,
    /// The subjectKeyIdentifier extension's key id, if the certificate has one.
    pub subject_key_id: Option<Vec<u8>>,
}

fn bad(reason: impl Into<String>) -> CertificateError {
    CertificateError::Certificate(reason.into())
}

impl Certificate {
    pub fn parse(der_bytes: &[u8]) -> Result<Certificate, CertificateError> {
        let cert = Reader::new(der_bytes).expect(der::SEQUENCE)?;
        let tbs = cert.reader().expect(der::SEQUENCE)?;
        let mut r = tbs.reader();
        r.optional(der::context(0))?; // version
        r.expect(der::INTEGER)?; // serialNumber
        r.expect(der::SEQUENCE)?; // signature
        r.expect(der::SEQUENCE)?; // issuer
        let validity = r.expect(der::SEQUENCE)?;
        let mut v = validity.reader();
        let not_before = parse_time(&v.any()?)?;
        let not_after = parse_time(&v.any()?)?;
        let subject = r.expect(der::SEQUENCE)?;
        let (common_name, organizations) = parse_name(&subject)?;
        let subject_der = subject.raw.to_vec();
        let mut subject_key_id = None;
        let spki = r.expect(der::SEQUENCE)?;
        let mut s = spki.reader();
        s.expect(der::SEQUENCE)?;
        let public_key = der::bit_string_bytes(&s.expect(der::BIT_STRING)?)?.to_vec();
        r.optional(der::context_primitive(1))?;
        r.optional(der::context_primitive(2))?;
        let mut dns_names = vec![];
        let mut ip_addresses = vec![];
        if let Some(exts) = r.optional(der::context(3))? {
            let list = exts.reader().expect(der::SEQUENCE)?;
            let mut l = list.reader();
            while !l.is_empty() {
                let ext = l.expect(der::SEQUENCE)?;
                let mut e = ext.reader();
                let oid = e.expect(der::OID)?;
                e.optional(der::BOOLEAN)?;
                let value = e.expect(der::OCTET_STRING)?;
                if oid.content == der::oid_content(OID_SAN) {
                    parse_sans(value.content, &mut dns_names, &mut ip_addresses)?;
                } else if oid.content == der::oid_content(OID_SUBJECT_KEY_ID) {
                    let id = Reader::new(value.content).expect(der::OCTET_STRING)?;
                    subject_key_id = Some(id.content.to_vec());
                }
            }
        }
        Ok(Certificate {
            der: der_bytes.to_vec(),
            not_before,
            not_after,
            common_name,
            organizations,
            dns_names,
            ip_addresses,
            public_key,
            subject_der,
            subject_key_id,
        })
    }

    /// This certificate as the issuer of another: its subject Name DER, and its key id (the
    /// subjectKeyIdentifier when it has one, else computed from its key as RFC 5280 4.2.1.2
    /// (1) does).
    pub fn as_issuer(&self) -> Issuer {
        Issuer {
            name: self.subject_der.clone(),
            key_id: self
                .subject_key_id
                .clone()
                .unwrap_or_else(|| key_id(&self.public_key)),
        }
    }

    /// Every certificate of a PEM text, leaf first as written.
    pub fn parse_pem_chain(text: &[u8]) -> Result<Vec<Certificate>, CertificateError> {
        let ders = super::pem::certificates(text)?;
        if ders.is_empty() {
            return Err(bad("no PEM CERTIFICATE block"));
        }
        ders.iter().map(|d| Certificate::parse(d)).collect()
    }

    /// The certificate's public key is `key`'s.
    pub fn matches_key(&self, key: &EcKey) -> bool {
        self.public_key == key.public_key()
    }

    /// Valid at `now` (notBefore <= now <= notAfter).
    pub fn is_valid_at(&self, now: SystemTime) -> bool {
        self.not_before <= now && now <= self.not_after
    }
}

fn parse_time(t: &Tlv<'_>) -> Result<SystemTime, CertificateError> {
    let s = std::str::from_utf8(t.content).map_err(|_| bad("time is not ASCII"))?;
    let full = match (t.tag, s.len()) {
        (der::UTC_TIME, 13) => {
            let yy: u32 = s[..2].parse().map_err(|_| bad("bad UTCTime"))?;
            format!("{}{s}", if yy >= 50 { "19" } else { "20" })
        }
        (der::GENERALIZED_TIME, 15) => s.to_string(),
        _ => return Err(bad(format!("unsupported time {s:?}"))),
    };
    let b = full.as_bytes();
    if !full.ends_with('Z') || !b[..14].iter().all(u8::is_ascii_digit) {
        return Err(bad(format!("unsupported time {s:?}")));
    }
    let text = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &full[0..4],
        &full[4..6],
        &full[6..8],
        &full[8..10],
        &full[10..12],
        &full[12..14]
    );
    crate::timeutil::parse_rfc3339(&text).ok_or_else(|| bad(format!("bad time {s:?}")))
}

/// UTCTime before 2050, GeneralizedTime from then on (RFC 5280 4.1.2.5).
pub(crate) fn encode_time(t: SystemTime) -> Vec<u8> {
    let digits: String = crate::timeutil::rfc3339(t)
        .chars()
        .filter(char::is_ascii_digit)
        .take(14)
        .collect();
    let year: u32 = digits[..4].parse().unwrap_or(0);
    if (1950..2050).contains(&year) {
        der::tlv(der::UTC_TIME, format!("{}Z", &digits[2..]).as_bytes())
    } else {
        der::tlv(der::GENERALIZED_TIME, format!("{digits}Z").as_bytes())
    }
}

fn parse_name(name: &Tlv<'_>) -> Result<(String, Vec<String>), CertificateError> {
    name_cn_and_organizations(name.content)
}

/// The CommonName (the last one, as Go's `pkix.Name` keeps) and the Organizations, in order, of
/// a Name's RDNSequence content (without its outer SEQUENCE header: what
/// `webpki::Cert::subject` gives). Every value must be a directory string Go's crypto/x509
/// reads (`parseASN1String`): UTF8String, PrintableString and IA5String checked,
/// NumericString, TeletexString (as Latin-1), BMPString (UTF-16BE); anything else is an error,
/// not a guess. The one reader of a subject, for certificates nanolet reads and for the x509
/// authenticator's identity (src/server/auth_x509.rs).
pub fn name_cn_and_organizations(rdns: &[u8]) -> Result<(String, Vec<String>), CertificateError> {
    let mut cn = String::new();
    let mut orgs = vec![];
    let mut rdns = Reader::new(rdns);
    while !rdns.is_empty() {
        let rdn = rdns.expect(der::SET)?;
        let mut atvs = rdn.reader();
        while !atvs.is_empty() {
            let atv = atvs.expect(der::SEQUENCE)?;
            let mut a = atv.reader();
            let oid = a.expect(der::OID)?;
            let value = a.any()?;
            if !a.is_empty() {
                return Err(bad("an attribute has more than a type and a value"));
            }
            let is_cn = oid.content == der::oid_content(OID_CN);
            if is_cn || oid.content == der::oid_content(OID_O) {
                let text = directory_string(&value)
                    .ok_or_else(|| bad("a name attribute is not a readable string"))?;
                if is_cn {
                    cn = text;
                } else {
                    orgs.push(text);
                }
            }
        }
    }
    Ok((cn, orgs))
}

/// A directory string's text, as Go's `parseASN1String` reads it (`None`: not one, or not
/// valid for its type).
fn directory_string(t: &Tlv<'_>) -> Option<String> {
    let v = t.content;
    match t.tag {
        der::UTF8_STRING => String::from_utf8(v.to_vec()).ok(),
        // PrintableString: A-Z a-z 0-9 space ' ( ) + , - . / : = ? (Go also takes * and &).
        der::PRINTABLE_STRING
            if v.iter()
                .all(|b| b.is_ascii_alphanumeric() || b" '()+,-./:=?*&".contains(b)) =>
        {
            String::from_utf8(v.to_vec()).ok()
        }
        // IA5String: ASCII.
        0x16 if v.is_ascii() => String::from_utf8(v.to_vec()).ok(),
        // NumericString: digits and space.
        0x12 if v.iter().all(|b| b.is_ascii_digit() || *b == b' ') => {
            String::from_utf8(v.to_vec()).ok()
        }
        // TeletexString (T61String), read as Latin-1 as Go does.
        0x14 => Some(v.iter().map(|b| char::from(*b)).collect()),
        // BMPString: UTF-16BE.
        0x1e if v.len() % 2 == 0 => {
            let units: Vec<u16> = v
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

fn parse_sans(
    value: &[u8],
    dns: &mut Vec<String>,
    ips: &mut Vec<IpAddr>,
) -> Result<(), CertificateError> {
    let names = Reader::new(value).expect(der::SEQUENCE)?;
    let mut r = names.reader();
    while !r.is_empty() {
        let n = r.any()?;
        if n.tag == der::context_primitive(2) {
            dns.push(String::from_utf8_lossy(n.content).into_owned());
        } else if n.tag == der::context_primitive(7) {
            match n.content.len() {
                4 => ips.push(IpAddr::from(
                    <[u8; 4]>::try_from(n.content).unwrap_or_default(),
                )),
                16 => ips.push(IpAddr::from(
                    <[u8; 16]>::try_from(n.content).unwrap_or_default(),
                )),
                _ => return Err(bad("SAN IP address of a bad length")),
            }
        }
    }
    Ok(())
}

/// A Name with O (if any) then CN, in the order Go's pkix.Name writes them.
pub(crate) fn encode_name(common_name: &str, organizations: &[String]) -> Vec<u8> {
    let atv = |oid: &[u64], v: &str| der::set(&[&der::seq(&[&der::oid(oid), &der::utf8(v)])]);
    let mut rdns: Vec<Vec<u8>> = organizations.iter().map(|o| atv(OID_O, o)).collect();
    if !common_name.is_empty() {
        rdns.push(atv(OID_CN, common_name));
    }
    let parts: Vec<&[u8]> = rdns.iter().map(Vec::as_slice).collect();
    der::seq(&parts)
}

/// GeneralNames of DNS names and IPs (the SAN extension's value).
pub(crate) fn encode_sans(dns: &[String], ips: &[IpAddr]) -> Vec<u8> {
    let mut names: Vec<Vec<u8>> = dns
        .iter()
        .map(|d| der::tlv(der::context_primitive(2), d.as_bytes()))
        .collect();
    for ip in ips {
        let bytes = match ip {
            IpAddr::V4(v4) => v4.octets().to_vec(),
            IpAddr::V6(v6) => v6.octets().to_vec(),
        };
        names.push(der::tlv(der::context_primitive(7), &bytes));
    }
    let parts: Vec<&[u8]> = names.iter().map(Vec::as_slice).collect();
    der::seq(&parts)
}

fn extension(oid: &[u64], critical: bool, value: &[u8]) -> Vec<u8> {
    let crit = if critical {
        der::tlv(der::BOOLEAN, &[0xff])
    } else {
        vec![]
    };
    der::seq(&[&der::oid(oid), &crit, &der::octet_string(value)])
}

/// RFC 5280 4.2.1.2 method (1): the SHA-1 of the subjectPublicKey BIT STRING's bits (what Go's
/// crypto/x509 and openssl use too).
pub fn key_id(public_key: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, public_key)
        .as_ref()
        .to_vec()
}

/// The issuer of a certificate nanolet signs: the issuing certificate's subject Name DER
/// (copied, never re-encoded) and its key identifier (for the authorityKeyIdentifier).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issuer {
    pub name: Vec<u8>,
    pub key_id: Vec<u8>,
}

/// A certificate nanolet signs itself.
#[derive(Debug, Clone)]
pub struct Template {
    pub serial: u64,
    pub common_name: String,
    pub organizations: Vec<String>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    /// A CA (basicConstraints CA:TRUE, keyUsage with keyCertSign) or a TLS server leaf
    /// (serverAuth).
    pub is_ca: bool,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
}

impl Template {
    /// The DER certificate for `subject`'s public key, signed by `issuer_key` as `issuer`
    /// (its Name DER and key id; `None`: self-signed, the template's own subject and key).
    /// Every certificate carries subjectKeyIdentifier and authorityKeyIdentifier (RFC 5280
    /// 4.2.1.1-2: a CA's certificates MUST have both, and path building uses them).
    pub fn sign(
        &self,
        subject: &EcKey,
        issuer: Option<&Issuer>,
        issuer_key: &EcKey,
    ) -> Result<Vec<u8>, CertificateError> {
        self.sign_with_usage(subject, issuer, issuer_key, OID_SERVER_AUTH)
    }

    /// As [`Template::sign`], a TLS client leaf (extended key usage clientAuth) when not a CA.
    pub fn sign_client(
        &self,
        subject: &EcKey,
        issuer: Option<&Issuer>,
        issuer_key: &EcKey,
    ) -> Result<Vec<u8>, CertificateError> {
        self.sign_with_usage(subject, issuer, issuer_key, OID_CLIENT_AUTH)
    }

    fn sign_with_usage(
        &self,
        subject: &EcKey,
        issuer: Option<&Issuer>,
        issuer_key: &EcKey,
        extended_usage: &[u64],
    ) -> Result<Vec<u8>, CertificateError> {
        let subject_name = encode_name(&self.common_name, &self.organizations);
        let subject_key_id = key_id(subject.public_key());
        let (issuer_name, authority_key_id) = match issuer {
            Some(i) => (i.name.clone(), i.key_id.clone()),
            None => (subject_name.clone(), subject_key_id.clone()),
        };
        // keyUsage: digitalSignature | keyEncipherment (| keyCertSign), as
        // certutil.GenerateSelfSignedCertKey sets them.
        let key_usage = if self.is_ca {
            der::tlv(der::BIT_STRING, &[2, 0xa4])
        } else {
            der::tlv(der::BIT_STRING, &[5, 0xa0])
        };
        let mut exts = vec![extension(OID_KEY_USAGE, true, &key_usage)];
        if self.is_ca {
            let bc = der::seq(&[&der::tlv(der::BOOLEAN, &[0xff])]);
            exts.push(extension(OID_BASIC_CONSTRAINTS, true, &bc));
        } else {
            let eku = der::seq(&[&der::oid(extended_usage)]);
            exts.push(extension(OID_EXT_KEY_USAGE, false, &eku));
            exts.push(extension(OID_BASIC_CONSTRAINTS, true, &der::seq(&[])));
        }
        exts.push(extension(
            OID_SUBJECT_KEY_ID,
            false,
            &der::octet_string(&subject_key_id),
        ));
        // AuthorityKeyIdentifier ::= SEQUENCE { keyIdentifier [0] IMPLICIT OCTET STRING, .. }
        let aki = der::seq(&[&der::tlv(der::context_primitive(0), &authority_key_id)]);
        exts.push(extension(OID_AUTHORITY_KEY_ID, false, &aki));
        if !self.dns_names.is_empty() || !self.ip_addresses.is_empty() {
            let sans = encode_sans(&self.dns_names, &self.ip_addresses);
            exts.push(extension(OID_SAN, false, &sans));
        }
        let ext_parts: Vec<&[u8]> = exts.iter().map(Vec::as_slice).collect();
        let tbs = der::seq(&[
            &der::tlv(der::context(0), &der::small_uint(2)),
            &der::small_uint(self.serial),
            &ecdsa_sha256_algorithm(),
            &issuer_name,
            &der::seq(&[&encode_time(self.not_before), &encode_time(self.not_after)]),
            &subject_name,
            &subject.spki_der(),
            &der::tlv(der::context(3), &der::seq(&ext_parts)),
        ]);
        let sig = issuer_key.sign(&tbs)?;
        Ok(der::seq(&[
            &tbs,
            &ecdsa_sha256_algorithm(),
            &der::bit_string(&sig),
        ]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificate::pem;
    use crate::certificate::testutil::{openssl, write};
    use std::time::Duration;

    /// Go's crypto/x509 parseASN1String: PrintableString and IA5String are checked, T61String
    /// is Latin-1, BMPString UTF-16; another string type is an error, never a lossy guess. The
    /// CommonName is the last one (pkix.Name.FillFromRDNSequence).
    #[test]
    fn subject_strings_are_read_as_go_reads_them() {
        let atv = |oid: &[u64], tag: u8, v: &[u8]| {
            der::set(&[&der::seq(&[&der::oid(oid), &der::tlv(tag, v)])])
        };
        let name = |rdns: &[Vec<u8>]| rdns.concat();
        let ok = name(&[
            atv(OID_O, der::PRINTABLE_STRING, b"system:masters"),
            atv(OID_CN, 0x14, b"caf\xe9"),
            atv(OID_CN, 0x1e, &[0, b'a', 0, b'd']),
        ]);
        assert_eq!(
            name_cn_and_organizations(&ok).unwrap(),
            ("ad".to_string(), vec!["system:masters".to_string()])
        );
        let t61 = name(&[atv(OID_CN, 0x14, b"caf\xe9")]);
        assert_eq!(name_cn_and_organizations(&t61).unwrap().0, "caf\u{e9}");
        for bad in [
            atv(OID_CN, der::PRINTABLE_STRING, b"a@b"),
            atv(OID_CN, der::PRINTABLE_STRING, b"a_b"),
            atv(OID_CN, 0x16, b"\xff"),
            atv(OID_CN, der::UTF8_STRING, b"\xff"),
            atv(OID_CN, 0x1e, &[0, b'a', 0]),
            atv(OID_O, der::OCTET_STRING, b"x"),
        ] {
            assert!(name_cn_and_organizations(&bad).is_err(), "{bad:02x?}");
        }
    }

    /// Certificates and keys come from outside the process (the API server's CSR status, files
    /// in --cert-dir, --tls-cert-file): every prefix and every one-byte corruption of a real
    /// certificate, its PEM and a key is an error or a value, never a panic.
    #[test]
    fn truncated_and_corrupted_inputs_never_panic() {
        let pair = crate::certificate::selfsigned::generate("node1", SystemTime::now()).unwrap();
        let pem_text = pair.cert_pem.clone();
        let der_bytes = pem::certificates(&pem_text).unwrap().remove(0);
        assert!(Certificate::parse(&der_bytes).is_ok());
        let key_pem = pair.key.to_pem().into_bytes();
        for input in [&der_bytes, &pem_text, &key_pem] {
            for len in 0..input.len() {
                let _ = Certificate::parse(&input[..len]);
                let _ = Certificate::parse_pem_chain(&input[..len]);
                let _ = EcKey::from_pem(&input[..len]);
            }
            for i in 0..input.len() {
                for flip in [0x01u8, 0x80, 0xff] {
                    let mut bad = input.clone();
                    bad[i] ^= flip;
                    let _ = Certificate::parse(&bad);
                    let _ = Certificate::parse_pem_chain(&bad);
                    let _ = EcKey::from_pem(&bad);
                }
            }
        }
    }

    #[test]
    fn times_encode_as_rfc5280_and_parse_back() {
        let t = crate::timeutil::parse_rfc3339("2026-11-26T01:02:03Z").unwrap();
        assert_eq!(encode_time(t), der::tlv(der::UTC_TIME, b"261126010203Z"));
        let late = crate::timeutil::parse_rfc3339("2126-01-01T00:00:00Z").unwrap();
        assert_eq!(
            encode_time(late),
            der::tlv(der::GENERALIZED_TIME, b"21260101000000Z")
        );
        for x in [t, late] {
            let enc = encode_time(x);
            assert_eq!(parse_time(&Reader::new(&enc).any().unwrap()).unwrap(), x);
        }
    }

    #[test]
    fn our_ca_signs_a_leaf_that_openssl_verifies_and_we_parse_back() {
        let now = SystemTime::now();
        let ca_key = EcKey::generate().unwrap();
        let ca = Template {
            serial: 1,
            common_name: "edge-ca@1".into(),
            organizations: vec![],
            not_before: now - Duration::from_secs(3600),
            not_after: now + Duration::from_secs(86400),
            is_ca: true,
            dns_names: vec![],
            ip_addresses: vec![],
        };
        let ca_der = ca.sign(&ca_key, None, &ca_key).unwrap();
        let leaf_key = EcKey::generate().unwrap();
        let leaf = Template {
            serial: 2,
            common_name: "system:node:edge".into(),
            organizations: vec!["system:nodes".into()],
            is_ca: false,
            dns_names: vec!["edge".into()],
            ip_addresses: vec!["10.0.0.5".parse().unwrap(), "fd00::5".parse().unwrap()],
            ..ca.clone()
        };
        let leaf_der = leaf
            .sign(
                &leaf_key,
                Some(&Certificate::parse(&ca_der).unwrap().as_issuer()),
                &ca_key,
            )
            .unwrap();
        let d = tempfile::tempdir().unwrap();
        let ca_pem = write(d.path(), "ca.crt", &pem::encode(pem::CERTIFICATE, &ca_der));
        let leaf_pem = write(d.path(), "l.crt", &pem::encode(pem::CERTIFICATE, &leaf_der));
        let out = openssl(&["verify", "-CAfile", &ca_pem, &leaf_pem]);
        assert!(out.contains(": OK"), "{out}");
        let text = openssl(&["x509", "-in", &leaf_pem, "-noout", "-text"]);
        assert!(
            text.contains("DNS:edge, IP Address:10.0.0.5, IP Address:FD00:0:0:0:0:0:0:5"),
            "{text}"
        );
        assert!(text.contains("TLS Web Server Authentication"), "{text}");
        let c = Certificate::parse(&leaf_der).unwrap();
        assert_eq!(c.common_name, "system:node:edge");
        assert_eq!(c.organizations, ["system:nodes"]);
        assert_eq!(c.dns_names, ["edge"]);
        assert_eq!(c.ip_addresses.len(), 2);
        assert!(c.matches_key(&leaf_key) && !c.matches_key(&ca_key));
        assert!(c.is_valid_at(now) && !c.is_valid_at(now + Duration::from_secs(2 * 86400)));
    }

    #[test]
    fn an_openssl_made_certificate_parses() {
        let d = tempfile::tempdir().unwrap();
        let (key, crt) = crate::certificate::testutil::openssl_self_signed(
            d.path(),
            "c",
            "/O=system:nodes/CN=system:node:n1",
            2,
            &["-addext", "subjectAltName=DNS:n1,IP:192.168.1.9"],
        );
        let certs = Certificate::parse_pem_chain(&std::fs::read(&crt).unwrap()).unwrap();
        let k = EcKey::from_pem(&std::fs::read(&key).unwrap()).unwrap();
        let c = &certs[0];
        assert_eq!(c.common_name, "system:node:n1");
        assert_eq!(c.organizations, ["system:nodes"]);
        assert_eq!(c.dns_names, ["n1"]);
        assert_eq!(c.ip_addresses, ["192.168.1.9".parse::<IpAddr>().unwrap()]);
        assert!(c.matches_key(&k));
        let life = c.not_after.duration_since(c.not_before).unwrap();
        assert_eq!(life, Duration::from_secs(2 * 86400));
    }
}
