//! Test helpers: the real openssl CLI (Debian's), and files in a temporary directory.

use std::path::Path;

/// Runs `openssl args...`; panics with its stderr when it fails. Returns stdout and stderr.
pub fn openssl(args: &[&str]) -> String {
    let out = std::process::Command::new("openssl")
        .args(args)
        .output()
        .expect("the openssl CLI (Debian package openssl) is needed for these tests");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "openssl {args:?} failed: {text}");
    text
}

/// Writes `text` to `dir/name`, returns the path as a string.
pub fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}
