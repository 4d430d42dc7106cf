//! A raw HTTP request to the read-only port: head parsing with its limits
//! (`httpd::parse_head`), then authentication and routing of the path and query over a status
//! store holding one pod (`server::answer_raw`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nanolet::fuzzing::http_request(data));
