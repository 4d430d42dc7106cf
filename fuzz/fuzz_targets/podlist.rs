//! A manifest URL body: a Pod or a PodList, decoded, defaulted, validated and deduplicated into
//! a snapshot (`config::http::parse_body`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nanolet::fuzzing::podlist(data));
