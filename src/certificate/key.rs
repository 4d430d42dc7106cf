//! ECDSA P-256 keys (ring): generated as PKCS#8, loaded from PKCS#8 `PRIVATE KEY` or SEC1
//! `EC PRIVATE KEY` PEM (SEC1 is wrapped into PKCS#8 here), signing with ecdsa-with-SHA256
//! (ASN.1 DER signatures, as X.509 and PKCS#10 carry them). RSA and other curves are refused
//! with a clear error. The key material never appears in Debug, errors or logs.

use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};

use super::CertificateError;
use super::der::{self, Reader};
use super::pem;

/// id-ecPublicKey 1.2.840.10045.2.1
pub const OID_EC_PUBLIC_KEY: &[u64] = &[1, 2, 840, 10045, 2, 1];
/// prime256v1 / secp256r1 1.2.840.10045.3.1.7
pub const OID_P256: &[u64] = &[1, 2, 840, 10045, 3, 1, 7];
/// rsaEncryption 1.2.840.113549.1.1.1
const OID_RSA: &[u64] = &[1, 2, 840, 113549, 1, 1, 1];
/// ecdsa-with-SHA256 1.2.840.10045.4.3.2
pub const OID_ECDSA_SHA256: &[u64] = &[1, 2, 840, 10045, 4, 3, 2];

/// An ECDSA P-256 private key.
pub struct EcKey {
    pkcs8: Vec<u8>,
    pair: EcdsaKeyPair,
}

impl std::fmt::Debug for EcKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EcKey(P-256, <redacted>)")
    }
}

fn rejected(reason: impl Into<String>) -> CertificateError {
    CertificateError::Key(reason.into())
}

impl EcKey {
    /// A fresh key from the system's random source.
    pub fn generate() -> Result<EcKey, CertificateError> {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
            .map_err(|_| rejected("generating an ECDSA P-256 key failed"))?;
        Self::from_pkcs8(doc.as_ref().to_vec())
    }

    fn from_pkcs8(pkcs8: Vec<u8>) -> Result<EcKey, CertificateError> {
        let pair = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_ASN1_SIGNING,
            &pkcs8,
            &SystemRandom::new(),
        )
        .map_err(|e| rejected(format!("not a usable ECDSA P-256 key: {e}")))?;
        Ok(EcKey { pkcs8, pair })
    }

    /// The first private key of a PEM text: `PRIVATE KEY` (PKCS#8) or `EC PRIVATE KEY` (SEC1).
    pub fn from_pem(text: &[u8]) -> Result<EcKey, CertificateError> {
        let blocks = pem::decode_all(text)?;
        let block = blocks
            .iter()
            .find(|b| b.label.ends_with("PRIVATE KEY"))
            .ok_or_else(|| rejected("no PEM private key block"))?;
        match block.label {
            pem::PRIVATE_KEY => {
                check_pkcs8_algorithm(&block.der)?;
                Self::from_pkcs8(block.der.clone())
            }
            pem::EC_PRIVATE_KEY => Self::from_pkcs8(sec1_to_pkcs8(&block.der)?),
            pem::RSA_PRIVATE_KEY => Err(rejected(
                "RSA keys are not supported: nanolet uses ECDSA P-256 keys",
            )),
            other => Err(rejected(format!("unsupported key block {other:?}"))),
        }
    }

    /// PKCS#8 `PRIVATE KEY` PEM. SECRET.
    pub fn to_pem(&self) -> String {
        pem::encode(pem::PRIVATE_KEY, &self.pkcs8)
    }

    /// PKCS#8 DER. SECRET.
    pub fn pkcs8_der(&self) -> &[u8] {
        &self.pkcs8
    }

    /// The uncompressed public point (65 bytes).
    pub fn public_key(&self) -> &[u8] {
        self.pair.public_key().as_ref()
    }

    /// SubjectPublicKeyInfo DER.
    pub fn spki_der(&self) -> Vec<u8> {
        let alg = der::seq(&[&der::oid(OID_EC_PUBLIC_KEY), &der::oid(OID_P256)]);
        der::seq(&[&alg, &der::bit_string(self.public_key())])
    }

    /// ecdsa-with-SHA256 over `msg`, DER encoded.
    pub fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, CertificateError> {
        self.pair
            .sign(&SystemRandom::new(), msg)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| rejected("signing failed"))
    }
}

/// The AlgorithmIdentifier `SEQUENCE { ecdsa-with-SHA256 }` (no parameters, RFC 5758 3.2).
pub fn ecdsa_sha256_algorithm() -> Vec<u8> {
    der::seq(&[&der::oid(OID_ECDSA_SHA256)])
}

/// PKCS#8's algorithm must be id-ecPublicKey on P-256; RSA gets its own message.
fn check_pkcs8_algorithm(pkcs8: &[u8]) -> Result<(), CertificateError> {
    let top = Reader::new(pkcs8).expect(der::SEQUENCE)?;
    let mut r = top.reader();
    r.expect(der::INTEGER)?;
    let alg = r.expect(der::SEQUENCE)?;
    let mut a = alg.reader();
    let oid = a.expect(der::OID)?;
    if oid.content == der::oid_content(OID_RSA) {
        return Err(rejected(
            "RSA keys are not supported: nanolet uses ECDSA P-256 keys",
        ));
    }
    if oid.content != der::oid_content(OID_EC_PUBLIC_KEY) {
        return Err(rejected("the PKCS#8 key is not an EC key"));
    }
    match a.optional(der::OID)? {
        Some(curve) if curve.content == der::oid_content(OID_P256) => Ok(()),
        _ => Err(rejected("the EC key is not on the P-256 curve")),
    }
}

/// SEC1 ECPrivateKey (RFC 5915) wrapped into PKCS#8 PrivateKeyInfo (RFC 5208), dropping the
/// optional [0] parameters after checking they name P-256.
fn sec1_to_pkcs8(sec1: &[u8]) -> Result<Vec<u8>, CertificateError> {
    let top = Reader::new(sec1).expect(der::SEQUENCE)?;
    let mut r = top.reader();
    let version = r.expect(der::INTEGER)?;
    let private = r.expect(der::OCTET_STRING)?;
    if version.content != [1] {
        return Err(rejected("SEC1 key: unsupported version"));
    }
    let mut inner = vec![der::small_uint(1), private.raw.to_vec()];
    if let Some(params) = r.optional(der::context(0))? {
        let curve = params.reader().expect(der::OID)?;
        if curve.content != der::oid_content(OID_P256) {
            return Err(rejected("the EC key is not on the P-256 curve"));
        }
    }
    match r.optional(der::context(1))? {
        Some(public) => inner.push(public.raw.to_vec()),
        None => {
            return Err(rejected(
                "SEC1 key without its public key (openssl writes it; regenerate the key)",
            ));
        }
    }
    let parts: Vec<&[u8]> = inner.iter().map(Vec::as_slice).collect();
    let ec_private_key = der::seq(&parts);
    let alg = der::seq(&[&der::oid(OID_EC_PUBLIC_KEY), &der::oid(OID_P256)]);
    Ok(der::seq(&[
        &der::small_uint(0),
        &alg,
        &der::octet_string(&ec_private_key),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificate::testutil::openssl;

    #[test]
    fn generated_keys_round_trip_and_openssl_reads_them() {
        let k = EcKey::generate().unwrap();
        let again = EcKey::from_pem(k.to_pem().as_bytes()).unwrap();
        assert_eq!(k.public_key(), again.public_key());
        assert_eq!(k.public_key().len(), 65);
        assert_eq!(format!("{k:?}"), "EcKey(P-256, <redacted>)");
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("k.pem");
        std::fs::write(&p, k.to_pem()).unwrap();
        let out = openssl(&["pkey", "-in", p.to_str().unwrap(), "-noout", "-text"]);
        assert!(out.contains("prime256v1") || out.contains("P-256"), "{out}");
    }

    #[test]
    fn openssl_sec1_and_pkcs8_keys_load_and_rsa_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let sec1 = d.path().join("sec1.pem");
        openssl(&[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            sec1.to_str().unwrap(),
        ]);
        let text = std::fs::read(&sec1).unwrap();
        assert!(String::from_utf8_lossy(&text).contains("EC PRIVATE KEY"));
        let k = EcKey::from_pem(&text).unwrap();
        // openssl's own public key equals ours (the wrap kept it).
        let pubder = openssl(&[
            "ec",
            "-in",
            sec1.to_str().unwrap(),
            "-pubout",
            "-outform",
            "PEM",
        ]);
        let spki = pem::decode_all(pubder.as_bytes()).unwrap();
        assert_eq!(spki[0].der, k.spki_der());

        let p8 = d.path().join("p8.pem");
        openssl(&[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            p8.to_str().unwrap(),
        ]);
        EcKey::from_pem(&std::fs::read(&p8).unwrap()).unwrap();

        let rsa = d.path().join("rsa.pem");
        openssl(&[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:1024",
            "-out",
            rsa.to_str().unwrap(),
        ]);
        let e = EcKey::from_pem(&std::fs::read(&rsa).unwrap()).unwrap_err();
        assert!(e.to_string().contains("RSA keys are not supported"), "{e}");

        let p384 = d.path().join("p384.pem");
        openssl(&[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-384",
            "-out",
            p384.to_str().unwrap(),
        ]);
        let e = EcKey::from_pem(&std::fs::read(&p384).unwrap()).unwrap_err();
        assert!(e.to_string().contains("P-256"), "{e}");
    }
}
