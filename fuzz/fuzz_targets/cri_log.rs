//! CRI container log lines (`<RFC3339Nano> <stream> <P|F> <text>`), as the logs endpoint and
//! `nanolet logs` read them from files a container writes into.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for line in data.split(|b| *b == b'\n') {
        let _ = nanolet::kubeapi::parse_cri_line(line);
    }
});
