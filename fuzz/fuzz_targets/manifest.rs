//! A static pod manifest file: decode (YAML/JSON), default, validate, name and hash, the path
//! `nanolet validate` and the file source take. Must never panic, whatever the bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nanolet::fuzzing::manifest(data));
