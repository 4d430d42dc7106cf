//! The one DER reader (certificate::der), walked into every constructed element.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nanolet::fuzzing::tls::der(data));
