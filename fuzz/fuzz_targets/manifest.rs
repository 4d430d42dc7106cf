//! A static pod manifest file: decode (YAML/JSON), default, validate, name and hash, the path
//! `nanolet validate` and the file source take. Must never panic, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = nanolet::cli::validate_bytes(data, "/etc/kubernetes/manifests/fuzz.yaml", "node1");
});
