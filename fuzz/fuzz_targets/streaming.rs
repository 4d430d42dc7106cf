//! The streaming query parsers and the WebSocket reader (`nanolet::fuzzing::streaming`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nanolet::fuzzing::streaming(data));
