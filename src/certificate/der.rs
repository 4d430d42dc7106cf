//! A minimal DER writer and reader (X.690), enough for PKCS#8, SEC1, PKCS#10 and X.509: the
//! tags nanolet writes and the structure walks its parsers need. Lengths are definite and
//! minimal (DER). The one DER reader in nanolet (issue 34): keys, CSRs, certificates and the
//! x509 authenticator's subject names all go through [`Reader`].

use super::CertificateError;

pub const BOOLEAN: u8 = 0x01;
pub const INTEGER: u8 = 0x02;
pub const BIT_STRING: u8 = 0x03;
pub const OCTET_STRING: u8 = 0x04;
pub const NULL: u8 = 0x05;
pub const OID: u8 = 0x06;
pub const UTF8_STRING: u8 = 0x0c;
pub const PRINTABLE_STRING: u8 = 0x13;
pub const UTC_TIME: u8 = 0x17;
pub const GENERALIZED_TIME: u8 = 0x18;
pub const SEQUENCE: u8 = 0x30;
pub const SET: u8 = 0x31;

/// Context-specific tag `[n]`, constructed.
pub const fn context(n: u8) -> u8 {
    0xa0 | n
}

/// Context-specific tag `[n]`, primitive (SAN entries: `[2]` dNSName, `[7]` iPAddress).
pub const fn context_primitive(n: u8) -> u8 {
    0x80 | n
}

/// One TLV.
pub fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(content.len() + 6);
    out.push(tag);
    let n = content.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes = n.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}

/// A SEQUENCE of already encoded parts.
pub fn seq(parts: &[&[u8]]) -> Vec<u8> {
    tlv(SEQUENCE, &parts.concat())
}

/// A SET of already encoded parts (callers give a single element or sorted ones).
pub fn set(parts: &[&[u8]]) -> Vec<u8> {
    tlv(SET, &parts.concat())
}

/// An INTEGER from unsigned big-endian bytes (minimal, with a 0 pad when the top bit is set).
pub fn uint(be: &[u8]) -> Vec<u8> {
    let skip = be.iter().take_while(|b| **b == 0).count();
    let mut v = be[skip..].to_vec();
    if v.first().is_none_or(|b| b & 0x80 != 0) {
        v.insert(0, 0);
    }
    tlv(INTEGER, &v)
}

pub fn small_uint(n: u64) -> Vec<u8> {
    uint(&n.to_be_bytes())
}

/// An OBJECT IDENTIFIER from its dotted arcs.
pub fn oid(arcs: &[u64]) -> Vec<u8> {
    tlv(OID, &oid_content(arcs))
}

pub fn oid_content(arcs: &[u64]) -> Vec<u8> {
    let mut out = vec![];
    let first = arcs.first().copied().unwrap_or(0) * 40 + arcs.get(1).copied().unwrap_or(0);
    for arc in std::iter::once(first).chain(arcs.iter().skip(2).copied()) {
        let mut groups = vec![(arc & 0x7f) as u8];
        let mut rest = arc >> 7;
        while rest > 0 {
            groups.push(0x80 | (rest & 0x7f) as u8);
            rest >>= 7;
        }
        groups.reverse();
        out.extend(groups);
    }
    out
}

/// A BIT STRING with no unused bits.
pub fn bit_string(bytes: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(bytes.len() + 1);
    v.push(0);
    v.extend_from_slice(bytes);
    tlv(BIT_STRING, &v)
}

pub fn octet_string(bytes: &[u8]) -> Vec<u8> {
    tlv(OCTET_STRING, bytes)
}

pub fn utf8(s: &str) -> Vec<u8> {
    tlv(UTF8_STRING, s.as_bytes())
}

/// One element read by [`Reader`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tlv<'a> {
    pub tag: u8,
    pub content: &'a [u8],
    /// The whole element, tag and length included (what a signature covers).
    pub raw: &'a [u8],
}

impl<'a> Tlv<'a> {
    /// A reader over this element's content.
    pub fn reader(&self) -> Reader<'a> {
        Reader::new(self.content)
    }
}

/// Reads TLVs one after the other.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

fn malformed(reason: &str) -> CertificateError {
    CertificateError::Der(reason.to_string())
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { rest: bytes }
    }

    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The next element's tag, without reading it.
    pub fn peek_tag(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    /// The next element (any tag).
    pub fn any(&mut self) -> Result<Tlv<'a>, CertificateError> {
        let all = self.rest;
        let (&tag, rest) = all.split_first().ok_or_else(|| malformed("truncated"))?;
        if tag & 0x1f == 0x1f {
            return Err(malformed("multi-byte tags are not used here"));
        }
        let (&first, mut rest) = rest.split_first().ok_or_else(|| malformed("truncated"))?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return Err(malformed("bad length"));
            }
            // X.690 10.1 (DER): the length in the fewest octets, so no leading zero octet and
            // no long form below 128, as Go's encoding/asn1 and cryptobyte refuse too: one
            // value, one encoding.
            if rest[0] == 0 {
                return Err(malformed("non-minimal length"));
            }
            let len = rest[..n]
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
            if len < 0x80 {
                return Err(malformed("non-minimal length"));
            }
            rest = &rest[n..];
            len
        };
        if rest.len() < len {
            return Err(malformed("truncated"));
        }
        let header = all.len() - rest.len();
        let content = &rest[..len];
        self.rest = &rest[len..];
        Ok(Tlv {
            tag,
            content,
            raw: &all[..header + len],
        })
    }

    /// The next element, which must carry `tag`.
    pub fn expect(&mut self, tag: u8) -> Result<Tlv<'a>, CertificateError> {
        let t = self.any()?;
        if t.tag != tag {
            return Err(CertificateError::Der(format!(
                "expected tag 0x{tag:02x}, found 0x{:02x}",
                t.tag
            )));
        }
        Ok(t)
    }

    /// The next element if it carries `tag`.
    pub fn optional(&mut self, tag: u8) -> Result<Option<Tlv<'a>>, CertificateError> {
        if self.peek_tag() == Some(tag) {
            self.any().map(Some)
        } else {
            Ok(None)
        }
    }
}

/// The content of a BIT STRING with no unused bits.
pub fn bit_string_bytes<'a>(t: &Tlv<'a>) -> Result<&'a [u8], CertificateError> {
    match t.content.split_first() {
        Some((0, rest)) if t.tag == BIT_STRING => Ok(rest),
        _ => Err(malformed("expected a BIT STRING with no unused bits")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_short_and_long_form_round_trip() {
        for n in [0usize, 1, 127, 128, 255, 256, 70000] {
            let content = vec![7u8; n];
            let enc = tlv(OCTET_STRING, &content);
            let mut r = Reader::new(&enc);
            let t = r.expect(OCTET_STRING).unwrap();
            assert_eq!(t.content.len(), n);
            assert_eq!(t.raw, &enc[..]);
            assert!(r.is_empty());
        }
        // 128 needs the long form 0x81 0x80 (X.690 10.1: definite, minimal).
        assert_eq!(&tlv(OCTET_STRING, &[0; 128])[..3], &[0x04, 0x81, 0x80]);
    }

    #[test]
    fn oids_and_integers_encode_as_x690() {
        // ecdsa-with-SHA256 1.2.840.10045.4.3.2
        assert_eq!(
            oid(&[1, 2, 840, 10045, 4, 3, 2]),
            [0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02]
        );
        assert_eq!(small_uint(0), [0x02, 0x01, 0x00]);
        assert_eq!(small_uint(128), [0x02, 0x02, 0x00, 0x80]);
        assert_eq!(uint(&[0, 0, 1]), [0x02, 0x01, 0x01]);
    }

    #[test]
    fn truncated_and_wrong_tags_are_errors() {
        assert!(Reader::new(&[0x30, 0x05, 0x01]).any().is_err());
        assert!(Reader::new(&[0x30]).any().is_err());
        assert!(Reader::new(&[0x30, 0x85, 1, 1, 1, 1, 1]).any().is_err());
        assert!(Reader::new(&[0x02, 0x00]).expect(SEQUENCE).is_err());
    }

    /// X.690 10.1: DER lengths use the fewest octets. A long form for a short length, or a
    /// leading zero octet, is BER, not DER, and refused (as Go's encoding/asn1 refuses it).
    #[test]
    fn non_minimal_lengths_are_refused_x690_10_1() {
        assert!(Reader::new(&[0x04, 0x81, 0x01, 0xaa]).any().is_err());
        assert!(Reader::new(&[0x04, 0x82, 0x00, 0x01, 0xaa]).any().is_err());
        let mut ok = vec![0x04, 0x81, 0x80];
        ok.extend([0u8; 0x80]);
        assert_eq!(Reader::new(&ok).any().unwrap().content.len(), 0x80);
        let mut padded = vec![0x04, 0x82, 0x00, 0x80];
        padded.extend([0u8; 0x80]);
        assert!(Reader::new(&padded).any().is_err());
    }
}
