//! Base64 (RFC 4648) for every caller in nanolet, on the `base64` crate that tonic already links
//! (no decoder of our own: issue 34).
//!
//! [`decode`] is Go's `base64.StdEncoding.DecodeString`, which the API server (`[]byte` JSON
//! fields: Secret `data`, ConfigMap `binaryData`, CSR `request`/`certificate`), client-go
//! (kubeconfig `*-data`), the kubelet's credential provider (registry `auth`) and go-yaml
//! (`!!binary`) all use: the alphabet `A-Za-z0-9+/`, padding required and only at the end, CR
//! and LF ignored anywhere, any other byte (spaces included) refused. Go's non-`Strict` decoder
//! accepts non-zero bits after the last full byte (`"Zh=="` is `"f"`), so this does too.

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

/// Go's `base64.StdEncoding` (see the module documentation).
const GO_STD: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical)
        .with_decode_allow_trailing_bits(true),
);

/// Why a base64 text does not decode; the offsets count bytes of the input after CR and LF
/// are removed, as Go's `CorruptInputError` does not (it counts the raw input), so the message
/// names the byte instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Base64Error {
    /// A byte outside the alphabet, or `=` before the end.
    #[error("illegal base64 data: byte {byte:?} at offset {offset}")]
    Illegal { byte: char, offset: usize },
    /// The text (without line breaks) is not a whole number of 4-character groups: a lone
    /// trailing character, or missing padding.
    #[error("illegal base64 data: length {0} is not a multiple of 4 (padding is required)")]
    Length(usize),
    /// Padding where it cannot be (`"Zg="`, `"Zm9v===="`).
    #[error("illegal base64 data: misplaced padding")]
    Padding,
}

/// Standard base64 with padding (Go's `StdEncoding.EncodeToString`).
pub fn encode(bytes: &[u8]) -> String {
    GO_STD.encode(bytes)
}

/// Unpadded base64url (Go's `base64.RawURLEncoding.EncodeToString`): the certificate
/// manager's CSR names.
#[cfg(feature = "tls")]
pub fn encode_raw_url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Decode unpadded base64url (a JWT's segments); `None` when it is not.
pub fn decode_raw_url(s: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .ok()
}

/// Decode as Go's `base64.StdEncoding.DecodeString` (see the module documentation).
pub fn decode(s: &str) -> Result<Vec<u8>, Base64Error> {
    let clean: Vec<u8> = s.bytes().filter(|b| !matches!(b, b'\r' | b'\n')).collect();
    GO_STD.decode(&clean).map_err(|e| match e {
        base64::DecodeError::InvalidByte(offset, b) => Base64Error::Illegal {
            byte: char::from(b),
            offset,
        },
        base64::DecodeError::InvalidLength(n) => Base64Error::Length(n),
        // With trailing bits allowed this is not produced; report it as the length it is.
        base64::DecodeError::InvalidLastSymbol(offset, b) => Base64Error::Illegal {
            byte: char::from(b),
            offset,
        },
        base64::DecodeError::InvalidPadding => Base64Error::Padding,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4648 section 10 test vectors, both ways.
    #[test]
    fn rfc4648_section_10_vectors() {
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode(plain.as_bytes()), enc);
            assert_eq!(decode(enc).expect("decode"), plain.as_bytes(), "{enc}");
        }
        #[cfg(feature = "tls")]
        assert_eq!(encode_raw_url(&[0xfb, 0xff]), "-_8");
    }

    /// Go's StdEncoding stops at nothing: data after the padding is an error
    /// (`CorruptInputError`), where the old lenient decoder returned "f" for "Zg==junk".
    #[test]
    fn go_std_encoding_rejects_data_after_padding() {
        assert!(matches!(
            decode("Zg==junk"),
            Err(Base64Error::Illegal { byte: '=', .. })
        ));
        assert!(decode("Zg==Zg==").is_err());
    }

    /// Go's StdEncoding: a lone trailing sextet (6 bits, not a byte) and missing padding are
    /// errors; the old decoder dropped the sextet and read unpadded text.
    #[test]
    fn go_std_encoding_rejects_a_lone_sextet_and_missing_padding() {
        for bad in ["Zm9vY", "Zm9vY===", "Zg", "Zm8", "Zg=", "Zm9v===="] {
            assert!(decode(bad).is_err(), "{bad:?}: {:?}", decode(bad));
        }
    }

    /// Go's decoder drops '\r' and '\n' anywhere and refuses every other byte outside the
    /// alphabet, spaces and tabs included.
    #[test]
    fn go_std_encoding_ignores_only_cr_and_lf() {
        assert_eq!(decode("Zm9v\r\nYmE=\n").expect("decode"), b"fooba");
        assert_eq!(decode("Zm\n9v").expect("decode"), b"foo");
        assert!(decode("Zm9v YmE=").is_err());
        assert!(decode("Zm9v\tYmE=").is_err());
        assert!(decode("Zm9v-_==").is_err());
        assert_eq!(
            decode("aGV*bG8=").unwrap_err().to_string(),
            "illegal base64 data: byte '*' at offset 3"
        );
    }

    /// Go's StdEncoding is not `Strict()`: non-zero bits after the last byte are dropped.
    #[test]
    fn go_std_encoding_accepts_trailing_bits() {
        assert_eq!(decode("Zh==").expect("decode"), b"f");
    }
}
