//! The subject of a client certificate (CN and O), read from its DER: the x509 authenticator's
//! user name and groups. The certificate itself is verified by rustls (chain to the client CA,
//! validity, client-auth usage) before this is read; this only walks the DER structure
//! (Certificate -> tbsCertificate -> subject Name -> RDNs) and refuses anything malformed.

/// One DER element: tag, contents, and what follows it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// The elements of a constructed value's contents.
fn children(mut contents: &[u8]) -> Option<Vec<(u8, &[u8])>> {
    let mut out = Vec::new();
    while !contents.is_empty() {
        let (tag, value, rest) = element(contents)?;
        out.push((tag, value));
        contents = rest;
    }
    Some(out)
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
/// 2.5.4.3 commonName
const CN: &[u8] = &[0x55, 0x04, 0x03];
/// 2.5.4.10 organizationName
const O: &[u8] = &[0x55, 0x04, 0x0a];

/// A directory string's text (UTF8String, PrintableString, IA5String, TeletexString as Latin-1,
/// BMPString as UTF-16BE).
fn text(tag: u8, value: &[u8]) -> Option<String> {
    match tag {
        0x0c | 0x13 | 0x16 => String::from_utf8(value.to_vec()).ok(),
        0x14 => Some(value.iter().map(|b| char::from(*b)).collect()),
        0x1e => {
            let units: Vec<u16> = value
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

/// The subject's CommonName (the last one, as Go's `pkix.Name` keeps) and Organizations, in
/// order; `None` for DER that is not a certificate.
pub fn subject_cn_and_organizations(cert_der: &[u8]) -> Option<(String, Vec<String>)> {
    let (tag, cert, _) = element(cert_der)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, tbs, _) = element(cert)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut fields = children(tbs)?;
    // version [0] EXPLICIT is optional.
    if fields.first().is_some_and(|(t, _)| *t == 0xa0) {
        fields.remove(0);
    }
    // serialNumber, signature, issuer, validity, subject
    let (tag, subject) = *fields.get(4)?;
    if tag != SEQUENCE {
        return None;
    }
    let (mut cn, mut orgs) = (String::new(), Vec::new());
    for (tag, rdn) in children(subject)? {
        if tag != SET {
            return None;
        }
        for (tag, atv) in children(rdn)? {
            let parts = children(atv)?;
            match (tag, parts.as_slice()) {
                (SEQUENCE, [(OID, oid), (vt, value)]) => {
                    if *oid == CN {
                        cn = text(*vt, value)?;
                    } else if *oid == O {
                        orgs.push(text(*vt, value)?);
                    }
                }
                _ => return None,
            }
        }
    }
    Some((cn, orgs))
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
