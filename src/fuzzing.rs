//! The bodies of the fuzz targets (`fuzz/fuzz_targets/*.rs`), here so that the libFuzzer binaries
//! and the stable regression test (`tests/integration/fuzz_regressions.rs`, which replays the
//! committed seeds and every input a fuzzer ever crashed on, `fuzz/regressions/<target>/`) run the
//! same code. Each must never panic, whatever the bytes. Not part of nanolet's API.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::status::StatusStore;

/// A fuzz target's body.
pub type Target = fn(&[u8]);

/// The targets, by the names of `fuzz/fuzz_targets/<name>.rs`; with the `tls` feature also
/// [`TLS_TARGETS`] (see [`targets`]).
pub const TARGETS: [(&str, Target); 7] = [
    ("manifest", manifest),
    ("podlist", podlist),
    ("config", config),
    ("cri_log", cri_log),
    ("http_request", http_request),
    ("image_archive", image_archive),
    ("streaming", streaming),
];

/// The parsers of certificates, keys and the client-certificate identity (`tls` feature).
#[cfg(feature = "tls")]
pub const TLS_TARGETS: [(&str, Target); 5] = [
    ("pem", tls::pem),
    ("der", tls::der),
    ("x509", tls::x509),
    ("csr", tls::csr),
    ("client_identity", tls::client_identity),
];

/// Every target this build has.
pub fn targets() -> Vec<(&'static str, Target)> {
    #[allow(unused_mut)]
    let mut all = TARGETS.to_vec();
    #[cfg(feature = "tls")]
    all.extend(TLS_TARGETS);
    all
}

/// Issue 34: the parsers that decide a certificate's, a key's and a client's identity.
#[cfg(feature = "tls")]
pub mod tls {
    use crate::certificate::{csr as csr_mod, der as der_mod, key, pem as pem_mod, x509};

    /// PEM text (rustls-pki-types' parser behind `certificate::pem`), then each block as a
    /// certificate chain and as a private key, as --cert-dir files and kubeconfigs are read.
    pub fn pem(data: &[u8]) {
        if let Ok(blocks) = pem_mod::decode_all(data) {
            for b in &blocks {
                assert!(!b.label.is_empty());
            }
        }
        let _ = x509::Certificate::parse_pem_chain(data);
        let _ = key::EcKey::from_pem(data);
    }

    /// The one DER reader (`certificate::der`), walked into every constructed element (depth
    /// bounded); every element it returns lies within the input.
    pub fn der(data: &[u8]) {
        fn walk(bytes: &[u8], depth: usize) {
            let mut r = der_mod::Reader::new(bytes);
            while let Ok(t) = r.any() {
                assert!(t.raw.len() <= bytes.len() && t.content.len() < t.raw.len());
                if t.tag & 0x20 != 0 && depth < 32 {
                    walk(t.content, depth + 1);
                }
            }
        }
        walk(data, 0);
    }

    /// An X.509 certificate as DER: nanolet's reader (validity, names, SANs, key), and as the
    /// issuer of another (subject DER and key id).
    pub fn x509(data: &[u8]) {
        if let Ok(c) = x509::Certificate::parse(data) {
            let issuer = c.as_issuer();
            assert!(!issuer.name.is_empty());
        }
    }

    /// A CSR object's `spec.request` PEM: the public key the certificate manager compares.
    pub fn csr(data: &[u8]) {
        let _ = csr_mod::request_spki(data);
    }

    /// A client certificate's DER: the x509 authenticator's user and groups (webpki's parse,
    /// then the Name reader); what it returns must agree with nanolet's own certificate
    /// reader whenever both read the certificate (no parser differential on identity).
    pub fn client_identity(data: &[u8]) {
        let who = crate::server::auth_x509::subject_cn_and_organizations(data);
        if let (Some((cn, orgs)), Ok(c)) = (&who, x509::Certificate::parse(data)) {
            assert_eq!(
                (cn, orgs),
                (&c.common_name, &c.organizations),
                "identity differs"
            );
        }
    }
}

/// A static pod manifest file: decode (YAML/JSON), default, validate, name and hash: the path
/// `nanolet validate` and the file source take.
pub fn manifest(data: &[u8]) {
    let _ =
        crate::cmd::client::validate_bytes(data, "/etc/kubernetes/manifests/fuzz.yaml", "node1");
}

/// A manifest URL body: a Pod or a PodList, decoded, defaulted, validated and deduplicated
/// into a snapshot (`config::http::parse_body`).
pub fn podlist(data: &[u8]) {
    let _ = crate::config::http::parse_body(data, "https://fuzz.example/pods", "node1", "t");
}

/// A KubeletConfiguration file (`--config`): parsed, applied over the defaults and checked.
pub fn config(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::kubeletconfig::parse_config_text(
            std::path::Path::new("/etc/nanolet/config.yaml"),
            text,
        );
    }
}

/// CRI container log lines (`<RFC3339Nano> <stream> <P|F> <text>`), as the logs endpoint and
/// `nanolet logs` read them from files a container writes into.
pub fn cri_log(data: &[u8]) {
    for line in data.split(|b| *b == b'\n') {
        let _ = crate::server::api::logs::parse_cri_line(line);
    }
}

fn store() -> &'static Arc<StatusStore> {
    static STORE: OnceLock<Arc<StatusStore>> = OnceLock::new();
    STORE.get_or_init(|| {
        let store = Arc::new(StatusStore::new(Duration::from_secs(300)));
        store.mark_sync();
        let pod: Result<crate::api::Pod, _> = serde_json::from_str(
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

/// An image archive as `nanolet images import` and the images directory read it: the outer
/// compression told by magic bytes (plain, gzip, zstd), pass 1 over the tar stream (ustar, GNU
/// long names, pax records, links; `images::archive::scan_reader`), then the import plan of the
/// OCI layout or docker archive (`images::archive::plan`) for an amd64 host, an ARM v7 host
/// and a forced `--arch arm64`. Every error names the archive; a plan only refers to files the
/// scan found.
pub fn image_archive(data: &[u8]) {
    use crate::images::archive::{self, ArchiveError, Compression, Platform, Source};
    use std::io::Read as _;

    const FILE: &str = "/var/lib/nanolet/images/fuzz.tar";
    let file = std::path::Path::new(FILE);
    let named = |e: &ArchiveError| {
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!("{FILE}: ")),
            "error without the file: {msg}"
        );
    };
    let comp = Compression::detect(data);
    let reader = match archive::decoder(file, data, comp) {
        Ok(r) => r,
        Err(e) => return named(&e),
    };
    // A few KiB of gzip or zstd can inflate to gigabytes: that costs an import time, not
    // correctness, so the fuzzer reads at most 16 MiB of tar stream (a cut stream is an error
    // like any truncated archive).
    let scan = match archive::scan_reader(file, reader.take(16 << 20), comp, &mut |_| {}) {
        Ok(s) => s,
        Err(e) => return named(&e),
    };
    for (platform, forced) in [("linux/amd64", false), ("arm/v7", false), ("arm64", true)] {
        let Ok(platform) = Platform::parse(platform) else {
            continue;
        };
        match archive::plan(file, &scan, &platform, forced) {
            Ok(plan) => {
                assert!(!plan.images.is_empty(), "a plan without images");
                for b in &plan.blobs {
                    if let Source::Archive(path) = &b.source {
                        assert!(
                            scan.files.contains_key(path),
                            "the plan streams {path}, which the scan did not find"
                        );
                    }
                }
                for img in &plan.images {
                    assert!(!img.names.is_empty(), "an image without a name");
                    assert!(
                        plan.blobs.iter().any(|b| b.digest == img.target_digest),
                        "an image whose target is not among the blobs"
                    );
                }
            }
            Err(e) => named(&e),
        }
    }
}

/// What the streaming code reads from outside: the query of the kubelet server's `/exec`,
/// `/attach` and `/portForward` (the kubelet's option rules, `server::stream`), and WebSocket
/// frames as `nanolet exec -i/-t` and `port-forward` read them from the runtime's streaming
/// server (`server::ws`: fragments joined, control frames between them, the message size
/// limit). Every message read stays within that limit.
pub fn streaming(data: &[u8]) {
    use crate::server::{stream, ws};
    let query = String::from_utf8_lossy(data);
    let _ = stream::parse_stream_options(&query);
    let _ = stream::parse_command(&query);
    let _ = stream::parse_ports(&query, data.first().is_some_and(|b| b % 2 == 0));
    let mut reader = ws::WsReader::new(data);
    // Each message consumes at least a frame header, so this ends; the bound is a backstop.
    for _ in 0..data.len() + 1 {
        match reader.read_message() {
            Ok(Some(ws::Message::Data { data, .. })) => {
                assert!(data.len() <= ws::MAX_MESSAGE, "message over the limit")
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
}
