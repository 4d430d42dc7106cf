//! An X.509 certificate (DER) as nanolet reads it, and as the issuer of another.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nanolet::fuzzing::tls::x509(data));
