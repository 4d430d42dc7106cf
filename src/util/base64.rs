//! Standard base64 decoding (RFC 4648 §4): [`decode`] is lenient (padding optional), as
//! nanolet has always read Secret data, kubeconfig certificates and registry `auth` fields;
//! [`decode_strict`] is Go's `base64.StdEncoding` after line breaks are removed, as go-yaml
//! decodes `!!binary`.

/// Why a base64 text does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Base64Error {
    /// A byte outside the base64 alphabet (lenient decoder's message).
    #[error("illegal base64 data: {0:?}")]
    Illegal(char),
    /// A byte outside the base64 alphabet (strict decoder's message).
    #[error("invalid character {0:?}")]
    InvalidCharacter(char),
    #[error("length is not a multiple of 4")]
    Length,
    #[error("misplaced padding")]
    Padding,
}

/// Decode standard base64 (padding optional, whitespace ignored).
pub fn decode(s: &str) -> Result<Vec<u8>, Base64Error> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for ch in s.bytes().filter(|b| !b.is_ascii_whitespace()) {
        if ch == b'=' {
            break;
        }
        let v = sextet(ch).ok_or(Base64Error::Illegal(ch as char))?;
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Ok(out)
}

/// RFC 4648 base64 as Go's `base64.StdEncoding` reads it after whitespace is removed: the
/// length must be a multiple of 4 and padding may only end the text.
pub fn decode_strict(s: &str) -> Result<Vec<u8>, Base64Error> {
    let clean: Vec<u8> = s.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    if clean.len() % 4 != 0 {
        return Err(Base64Error::Length);
    }
    let mut out = Vec::with_capacity(clean.len() / 4 * 3);
    for (n, chunk) in clean.chunks(4).enumerate() {
        let last = n + 1 == clean.len() / 4;
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return Err(Base64Error::Padding);
        }
        let mut acc = 0u32;
        for &c in &chunk[..4 - pad] {
            let v = sextet(c).ok_or(Base64Error::InvalidCharacter(c as char))?;
            acc = acc << 6 | u32::from(v);
        }
        acc <<= 6 * pad as u32;
        let bytes = [(acc >> 16) as u8, (acc >> 8) as u8, acc as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Ok(out)
}

fn sextet(c: u8) -> Option<u8> {
    Some(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    })
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

    /// Go's StdEncoding: padding required, only at the end.
    #[test]
    fn strict_decoding_is_go_std_encoding() {
        assert_eq!(decode_strict("aGVs\nbG8=").expect("decode"), b"hello");
        assert_eq!(decode_strict("aGVsbG8"), Err(Base64Error::Length));
        assert_eq!(decode_strict("aG==bG8="), Err(Base64Error::Padding));
        assert_eq!(
            decode_strict("aGV*bG8=").unwrap_err().to_string(),
            "invalid character '*'"
        );
        assert_eq!(decode("aGVsbG8").expect("lenient"), b"hello");
    }
}
