//! PEM text: blocks (rustls-pki-types' parser), certificate chains and private keys.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nanolet::fuzzing::tls::pem(data));
