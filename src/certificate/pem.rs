//! PEM (RFC 7468): writing blocks with 64-column base64, and reading every block of a text with
//! the PEM parser of `rustls-pki-types` (`PemObject`), the one rustls, ureq and the HTTPS server
//! already use (issue 34: one parser per format).

use rustls::pki_types::pem::{self as pki_pem, PemObject, SectionKind};

use super::CertificateError;

pub const CERTIFICATE: &str = "CERTIFICATE";
pub const PRIVATE_KEY: &str = "PRIVATE KEY";
pub const EC_PRIVATE_KEY: &str = "EC PRIVATE KEY";
pub const RSA_PRIVATE_KEY: &str = "RSA PRIVATE KEY";
pub const CERTIFICATE_REQUEST: &str = "CERTIFICATE REQUEST";

/// One PEM block.
pub fn encode(label: &str, der: &[u8]) -> String {
    let b64 = crate::util::base64::encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// A decoded PEM block.
#[derive(Clone, PartialEq, Eq)]
pub struct Block {
    /// The label of a kind `rustls-pki-types` knows (one of the constants above, `PUBLIC KEY`,
    /// `X509 CRL`, `ECHCONFIG`).
    pub label: &'static str,
    pub der: Vec<u8>,
}

impl std::fmt::Debug for Block {
    // The content may be a key: only its label and size.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Block({}, {} bytes)", self.label, self.der.len())
    }
}

fn label(kind: SectionKind) -> &'static str {
    match kind {
        SectionKind::Certificate => CERTIFICATE,
        SectionKind::PrivateKey => PRIVATE_KEY,
        SectionKind::EcPrivateKey => EC_PRIVATE_KEY,
        SectionKind::RsaPrivateKey => RSA_PRIVATE_KEY,
        SectionKind::Csr => CERTIFICATE_REQUEST,
        SectionKind::PublicKey => "PUBLIC KEY",
        SectionKind::Crl => "X509 CRL",
        _ => "ECHCONFIG",
    }
}

/// The reason a text is not PEM, without any of its content (a key's bytes never reach a
/// message: the parser's own errors can carry a byte of the block).
fn pem_error(e: &pki_pem::Error) -> CertificateError {
    CertificateError::Pem(
        match e {
            pki_pem::Error::MissingSectionEnd { .. } => "a block is not closed",
            pki_pem::Error::IllegalSectionStart { .. } => "a BEGIN line is malformed",
            pki_pem::Error::Base64Decode(_) => {
                "a block is not valid base64 (RFC 1421 headers: an encrypted key?)"
            }
            pki_pem::Error::SectionTooLarge => "a block is larger than 256 MB",
            _ => "not valid PEM",
        }
        .to_string(),
    )
}

/// Every PEM block of a kind `rustls-pki-types` knows, in order (text between blocks and
/// blocks of other labels are skipped, as its `PemObject` iterators do).
pub fn decode_all(text: &[u8]) -> Result<Vec<Block>, CertificateError> {
    <(SectionKind, Vec<u8>)>::pem_slice_iter(text)
        .map(|item| {
            item.map(|(kind, der)| Block {
                label: label(kind),
                der,
            })
            .map_err(|e| pem_error(&e))
        })
        .collect()
}

/// The DER of every `CERTIFICATE` block.
pub fn certificates(text: &[u8]) -> Result<Vec<Vec<u8>>, CertificateError> {
    Ok(decode_all(text)?
        .into_iter()
        .filter(|b| b.label == CERTIFICATE)
        .map(|b| b.der)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_and_wrap_at_64() {
        let der: Vec<u8> = (0..=255).collect();
        let text = encode(CERTIFICATE, &der) + "junk\n" + &encode(PRIVATE_KEY, b"k");
        assert!(text.lines().all(|l| l.len() <= 64));
        let blocks = decode_all(text.as_bytes()).unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].der, der);
        assert_eq!(blocks[1].label, PRIVATE_KEY);
        assert!(!format!("{:?}", blocks[1]).contains("aw"));
        assert!(decode_all(b"-----BEGIN X-----\nAAAA\n").is_err());
    }

    /// RFC 7468 section 2: no headers in these labels; an RFC 1421 encrypted key (Proc-Type,
    /// DEK-Info) is refused, and the message carries none of the block's bytes.
    #[test]
    fn encrypted_keys_are_refused_without_their_bytes() {
        let text = "-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\nQUJD\n-----END EC PRIVATE KEY-----\n";
        let e = decode_all(text.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("encrypted key"), "{e}");
        assert!(!e.contains("QUJD") && !e.contains("Proc"), "{e}");
    }
}
