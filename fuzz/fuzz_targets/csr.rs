//! A CSR object's spec.request PEM: the public key the certificate manager compares.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nanolet::fuzzing::tls::csr(data));
