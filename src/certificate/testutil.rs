//! Test helpers: the real openssl CLI (Debian's), and files in a temporary directory.

use std::path::{Path, PathBuf};

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

/// A self-signed ECDSA P-256 certificate made by openssl (`req -x509`): `dir/<stem>.key` and
/// `dir/<stem>.crt`, valid `days`, with `subj` and any `extra` arguments (e.g. `-addext`).
pub fn openssl_self_signed(
    dir: &Path,
    stem: &str,
    subj: &str,
    days: u32,
    extra: &[&str],
) -> (PathBuf, PathBuf) {
    let key = dir.join(format!("{stem}.key"));
    let crt = dir.join(format!("{stem}.crt"));
    let days = days.to_string();
    let mut args = vec![
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        key.to_str().unwrap(),
        "-out",
        crt.to_str().unwrap(),
        "-days",
        &days,
        "-subj",
        subj,
    ];
    args.extend_from_slice(extra);
    openssl(&args);
    (key, crt)
}
