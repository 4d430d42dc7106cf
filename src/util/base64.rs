//! Standard base64 decoding (RFC 4648 §4), as Kubernetes stores Secret data and kubeconfigs
//! carry certificates.

/// A byte outside the base64 alphabet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("illegal base64 data: {0:?}")]
pub struct Base64Error(pub char);

/// Decode standard base64 (padding optional, whitespace ignored).
pub fn decode(s: &str) -> Result<Vec<u8>, Base64Error> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for ch in s.bytes().filter(|b| !b.is_ascii_whitespace()) {
        if ch == b'=' {
            break;
        }
        let v = match ch {
            b'A'..=b'Z' => ch - b'A',
            b'a'..=b'z' => ch - b'a' + 26,
            b'0'..=b'9' => ch - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return Err(Base64Error(ch as char)),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_reference_vectors() {
        for (enc, dec) in [
            ("", ""),
            ("Zg==", "f"),
            ("Zm8=", "fo"),
            ("Zm9v", "foo"),
            ("Zm9vYmFy", "foobar"),
            ("Zm9v\nYmE=", "fooba"),
        ] {
            assert_eq!(decode(enc).expect("decode"), dec.as_bytes(), "{enc}");
        }
        assert!(decode("a*b").is_err());
    }
}
