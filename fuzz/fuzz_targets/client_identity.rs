//! A client certificate (DER): the x509 authenticator's user and groups, which must agree
//! with nanolet's own certificate reader.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nanolet::fuzzing::tls::client_identity(data));
