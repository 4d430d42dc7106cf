//! A manifest URL body: a Pod or a PodList, decoded, defaulted, validated and deduplicated into
//! a snapshot (`source::url::parse_body`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = nanolet::source::url::parse_body(data, "https://fuzz.example/pods", "node1", "t");
});
