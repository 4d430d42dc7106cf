//! A KubeletConfiguration file (`--config`): parsed, applied over the defaults and checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = nanolet::config::parse_config_text(std::path::Path::new("/etc/nanolet/config.yaml"), text);
    }
});
