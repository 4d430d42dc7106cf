//! PEM (RFC 7468): encoding blocks with 64-column base64, reading every block of a file.

use super::CertificateError;

pub const CERTIFICATE: &str = "CERTIFICATE";
pub const PRIVATE_KEY: &str = "PRIVATE KEY";
pub const EC_PRIVATE_KEY: &str = "EC PRIVATE KEY";
pub const RSA_PRIVATE_KEY: &str = "RSA PRIVATE KEY";
pub const CERTIFICATE_REQUEST: &str = "CERTIFICATE REQUEST";

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
pub fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// One PEM block.
pub fn encode(label: &str, der: &[u8]) -> String {
    let b64 = base64(der);
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
    pub label: String,
    pub der: Vec<u8>,
}

impl std::fmt::Debug for Block {
    // The content may be a key: only its label and size.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Block({}, {} bytes)", self.label, self.der.len())
    }
}

/// Every PEM block of `text`, in order (text between blocks is ignored, as Go's pem.Decode does).
pub fn decode_all(text: &[u8]) -> Result<Vec<Block>, CertificateError> {
    let text = String::from_utf8_lossy(text);
    let mut blocks = vec![];
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let line = line.trim();
        let Some(label) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        else {
            continue;
        };
        let end = format!("-----END {label}-----");
        let mut body = String::new();
        let mut closed = false;
        for l in lines.by_ref() {
            let l = l.trim();
            if l == end {
                closed = true;
                break;
            }
            if l.contains(':') {
                // RFC 1421 headers (Proc-Type: encrypted keys) are not supported.
                return Err(CertificateError::Pem(format!(
                    "{label} block has headers (an encrypted key?)"
                )));
            }
            body.push_str(l);
        }
        if !closed {
            return Err(CertificateError::Pem(format!(
                "{label} block is not closed"
            )));
        }
        let der = crate::util::base64::decode(&body)
            .map_err(|_| CertificateError::Pem(format!("{label} block is not valid base64")))?;
        blocks.push(Block {
            label: label.to_string(),
            der,
        });
    }
    Ok(blocks)
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
    fn base64_matches_rfc4648_vectors() {
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), enc);
        }
    }

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
}
