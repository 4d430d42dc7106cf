//! A KubeletConfiguration file (`--config`): parsed, applied over the defaults and checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nanolet::fuzzing::config(data));
