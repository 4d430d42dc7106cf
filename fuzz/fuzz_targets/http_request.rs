//! A raw HTTP request to the read-only port: head parsing with its limits
//! (`httpd::parse_head`), then authentication and routing of the path and query over a status
//! store holding one pod (`server::answer_raw`).
#![no_main]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use nanolet::status::StatusStore;

fn store() -> &'static Arc<StatusStore> {
    static STORE: OnceLock<Arc<StatusStore>> = OnceLock::new();
    STORE.get_or_init(|| {
        let store = Arc::new(StatusStore::new(Duration::from_secs(300)));
        store.mark_sync();
        let pod: nanolet::pod::Pod = serde_json::from_str(
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-node1","namespace":"default","uid":"0123456789abcdef0123456789abcdef"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}"#,
        )
        .expect("pod");
        store.set_pod(pod);
        store
    })
}

fuzz_target!(|data: &[u8]| {
    // Half the inputs with a token configured (the prefix byte decides), half without.
    let (token, raw) = match data.split_first() {
        Some((b, rest)) if b % 2 == 0 => (Some("s3cr3t"), rest),
        _ => (None, data),
    };
    if let Some((status, body)) = nanolet::server::answer_raw(raw, store(), token) {
        assert!((200..600).contains(&status));
        assert!(!String::from_utf8_lossy(&body).contains("s3cr3t"));
    }
});
