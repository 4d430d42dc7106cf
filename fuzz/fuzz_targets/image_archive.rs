//! An image archive (`nanolet images import`, the images directory): outer compression, the
//! tar stream (ustar, GNU long names, pax), the OCI layout or docker archive planned for
//! import. Must never panic, whatever the bytes; every error names the file.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nanolet::fuzzing::image_archive(data));
