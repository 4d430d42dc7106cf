//! CRI container log lines (`<RFC3339Nano> <stream> <P|F> <text>`), as the logs endpoint and
//! `nanolet logs` read them from files a container writes into.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nanolet::fuzzing::cri_log(data));
