//! The bodies of the fuzz targets (`fuzz/fuzz_targets/*.rs`), here so that the libFuzzer
//! binaries and the stable regression test (`tests/fuzz_regressions.rs`, which replays the
//! committed seeds and every input a fuzzer ever crashed on, `fuzz/regressions/<target>/`) run
//! the same code. Each must never panic, whatever the bytes. Not part of nanolet's API.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::status::StatusStore;

/// A fuzz target's body.
pub type Target = fn(&[u8]);

/// The targets, by the names of `fuzz/fuzz_targets/<name>.rs`.
pub const TARGETS: [(&str, Target); 5] = [
    ("manifest", manifest),
    ("podlist", podlist),
    ("config", config),
    ("cri_log", cri_log),
    ("http_request", http_request),
];

/// A static pod manifest file: decode (YAML/JSON), default, validate, name and hash: the path
/// `nanolet validate` and the file source take.
pub fn manifest(data: &[u8]) {
    let _ = crate::cli::validate_bytes(data, "/etc/kubernetes/manifests/fuzz.yaml", "node1");
}

/// A manifest URL body: a Pod or a PodList, decoded, defaulted, validated and deduplicated
/// into a snapshot (`source::url::parse_body`).
pub fn podlist(data: &[u8]) {
    let _ = crate::source::url::parse_body(data, "https://fuzz.example/pods", "node1", "t");
}

/// A KubeletConfiguration file (`--config`): parsed, applied over the defaults and checked.
pub fn config(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::config::parse_config_text(
            std::path::Path::new("/etc/nanolet/config.yaml"),
            text,
        );
    }
}

/// CRI container log lines (`<RFC3339Nano> <stream> <P|F> <text>`), as the logs endpoint and
/// `nanolet logs` read them from files a container writes into.
pub fn cri_log(data: &[u8]) {
    for line in data.split(|b| *b == b'\n') {
        let _ = crate::kubeapi::parse_cri_line(line);
    }
}

fn store() -> &'static Arc<StatusStore> {
    static STORE: OnceLock<Arc<StatusStore>> = OnceLock::new();
    STORE.get_or_init(|| {
        let store = Arc::new(StatusStore::new(Duration::from_secs(300)));
        store.mark_sync();
        let pod: Result<crate::pod::Pod, _> = serde_json::from_str(
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-node1","namespace":"default","uid":"0123456789abcdef0123456789abcdef"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}"#,
        );
        if let Ok(pod) = pod {
            store.set_pod(pod);
        }
        store
    })
}

/// A raw HTTP request to the read-only port: head parsing with its limits
/// (`httpd::parse_head`), then authentication and routing of the path and query over a status
/// store holding one pod (`server::answer_raw`). The answer's status is a real HTTP status
/// and the configured token never appears in a body.
pub fn http_request(data: &[u8]) {
    // Half the inputs with a token configured (the first byte decides), half without.
    let (token, raw) = match data.split_first() {
        Some((b, rest)) if b % 2 == 0 => (Some("s3cr3t"), rest),
        _ => (None, data),
    };
    if let Some((status, body)) = crate::server::answer_raw(raw, store(), token) {
        assert!((200..600).contains(&status), "status {status}");
        assert!(
            !String::from_utf8_lossy(&body).contains("s3cr3t"),
            "the token leaked into a body"
        );
    }
}
