//! Static-pod decoding, naming and UID, mirroring the kubelet's `pkg/kubelet/config/common.go`.
//!
//! Order of operations (as in the kubelet's `tryDecodeSinglePod` + `applyDefaults`):
//! 1. decode (YAML or JSON; `apiVersion: v1` and `kind` are required) and apply the API defaults
//!    (the kubelet's decoder defaults the object as it decodes it);
//! 2. if the manifest carries no `metadata.uid`: UID = md5 over the canonical JSON of that
//!    defaulted pod (type meta cleared, name/namespace/annotations as written), then
//!    `"host:" + nodeName` and `"file:" + path` for the file source, or `"url:" + url` for the
//!    URL source (the kubelet writes no host for URLs). The kubelet prints the Go struct with
//!    spew instead of canonical JSON, so the bytes differ; the shape and properties are the same;
//! 3. name becomes `<name>-<lowercased node name>`, namespace defaults to `default`,
//!    `spec.nodeName` = node name, annotations `kubernetes.io/config.hash` (= UID),
//!    `kubernetes.io/config.source`, `kubernetes.io/config.seen`; file pods get the
//!    `NoExecute`/`Exists` toleration the kubelet adds;
//! 4. validate the result.

use md5::{Digest, Md5};
use serde::Deserialize;
use serde_json::Value;

use super::{ManifestError, SourceKind};
use crate::api::Pod;
use crate::api::validate::{FieldError, apply_api_defaults, validate};

pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
pub const CONFIG_SEEN_ANNOTATION: &str = "kubernetes.io/config.seen";

/// Largest manifest accepted (the kubelet's maxConfigLength).
pub const MAX_MANIFEST_BYTES: usize = 10 * 1024 * 1024;

/// A decoded manifest document.
#[derive(Debug, Clone, PartialEq)]
pub enum DecodedDoc {
    Pod(Box<Pod>),
    /// `kind: PodList` (accepted from the URL source only).
    PodList(Vec<Pod>),
}

fn merr(origin: &str, field: impl Into<String>, reason: impl Into<String>) -> ManifestError {
    ManifestError {
        origin: origin.to_string(),
        field: field.into(),
        reason: reason.into(),
    }
}

#[derive(Deserialize)]
struct RawPodList {
    #[serde(default)]
    items: Vec<Pod>,
}

/// Decode one YAML or JSON document holding a `v1` Pod or PodList. Never panics. Notes about
/// what was read but ignored (further YAML documents) are logged as warnings naming `origin`.
pub fn decode_manifest(bytes: &[u8], origin: &str) -> Result<DecodedDoc, ManifestError> {
    let (doc, notes) = decode_manifest_with_notes(bytes, origin)?;
    for note in notes {
        tracing::warn!(manifest = %origin.escape_debug(), "{note}");
    }
    Ok(doc)
}

/// [`decode_manifest`], handing back the notes instead of logging them (for `nanolet validate`).
pub fn decode_manifest_with_notes(
    bytes: &[u8],
    origin: &str,
) -> Result<(DecodedDoc, Vec<String>), ManifestError> {
    let mut notes = Vec::new();
    let doc = decode_document(bytes, origin, &mut notes)?;
    Ok((doc, notes))
}

fn decode_document(
    bytes: &[u8],
    origin: &str,
    notes: &mut Vec<String>,
) -> Result<DecodedDoc, ManifestError> {
    let value = parse_document(bytes, origin, notes)?;
    let Value::Object(obj) = &value else {
        return Err(merr(
            origin,
            "",
            "manifest must be an object (a Pod or a PodList)",
        ));
    };
    let kind = v1_kind(obj, origin)?;
    // Go's JSON type rules for every v1 Pod field (api::schema), before anything reads them.
    let type_error = match kind {
        "Pod" => crate::api::schema::type_errors(&value, &crate::api::schema::POD)
            .into_iter()
            .next(),
        "PodList" => value
            .get("items")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .find_map(|(i, item)| {
                crate::api::schema::type_errors(item, &crate::api::schema::POD)
                    .into_iter()
                    .next()
                    .map(|(p, r)| (format!("items[{i}].{p}"), r))
            }),
        _ => None,
    };
    if let Some((field, reason)) = type_error {
        return Err(merr(origin, field, reason));
    }
    match kind {
        "Pod" => {
            let pod: Pod =
                serde_path_to_error::deserialize(&value).map_err(|e| path_error(origin, "", e))?;
            Ok(DecodedDoc::Pod(Box::new(pod)))
        }
        "PodList" => {
            let list: RawPodList =
                serde_path_to_error::deserialize(&value).map_err(|e| path_error(origin, "", e))?;
            Ok(DecodedDoc::PodList(list.items))
        }
        other => Err(merr(
            origin,
            "kind",
            format!("Unsupported value: {other:?}: supported values: \"Pod\", \"PodList\""),
        )),
    }
}

/// The manifest's first document as JSON, refusing what is too large, not UTF-8, empty or
/// nested absurdly deep; a note tells of further YAML documents.
fn parse_document(
    bytes: &[u8],
    origin: &str,
    notes: &mut Vec<String>,
) -> Result<Value, ManifestError> {
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(merr(
            origin,
            "",
            format!(
                "manifest is too large ({} bytes, limit {MAX_MANIFEST_BYTES})",
                bytes.len()
            ),
        ));
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|e| merr(origin, "", format!("manifest is not UTF-8: {e}")))?;
    if text.trim().is_empty() {
        return Err(merr(origin, "", "manifest is empty"));
    }
    // libyaml is quadratic on deeply nested flow collections: refuse absurd nesting up front
    // (real manifests nest a few dozen levels at most).
    if flow_nesting_depth(bytes) > MAX_FLOW_NESTING {
        return Err(merr(
            origin,
            "",
            format!("manifest nests more than {MAX_FLOW_NESTING} levels of [ or {{"),
        ));
    }
    // As the kubelet: JSON when it starts with `{`, else the first YAML document read with
    // go-yaml v2's YAML 1.1 rules, then Go's null rules (crate::yaml).
    let decoded = crate::yaml::to_json(text).map_err(|e| merr(origin, "", e.to_string()))?;
    let value = decoded.value;
    if value.is_null() {
        return Err(merr(
            origin,
            "",
            "the first YAML document is empty (the kubelet reads only the first document of a file)",
        ));
    }
    if decoded.more_documents > 0 {
        notes.push(format!(
            "holds {} more YAML document(s) after the first; like the kubelet, only the first is read: put each Pod in its own file",
            decoded.more_documents
        ));
    }
    Ok(value)
}

/// The document's `kind`, once `apiVersion` and `kind` are strings and the version is `v1`.
fn v1_kind<'a>(
    obj: &'a serde_json::Map<String, Value>,
    origin: &str,
) -> Result<&'a str, ManifestError> {
    let api_version = match obj.get("apiVersion") {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => {
            return Err(merr(
                origin,
                "apiVersion",
                "Invalid value: must be a string",
            ));
        }
    };
    let kind = match obj.get("kind") {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(merr(origin, "kind", "Invalid value: must be a string")),
    };
    if kind.is_empty() {
        return Err(merr(
            origin,
            "kind",
            "Required value: Object 'Kind' is missing",
        ));
    }
    if api_version.is_empty() {
        return Err(merr(
            origin,
            "apiVersion",
            "Required value: Object 'apiVersion' is missing",
        ));
    }
    if api_version != "v1" {
        return Err(merr(
            origin,
            "apiVersion",
            format!(
                "Unsupported value: {api_version:?}: supported values: \"v1\" (no kind {kind:?} is registered for it)"
            ),
        ));
    }
    Ok(kind)
}

const MAX_FLOW_NESTING: usize = 100;

/// Upper bound of `[`/`{` nesting (brackets inside strings count too: an over-estimate).
fn flow_nesting_depth(bytes: &[u8]) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for b in bytes {
        match b {
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

fn path_error(
    origin: &str,
    prefix: &str,
    e: serde_path_to_error::Error<serde_json::Error>,
) -> ManifestError {
    let path = e.path().to_string();
    let path = if path == "." { String::new() } else { path };
    merr(
        origin,
        format!("{prefix}{path}"),
        e.into_inner().to_string(),
    )
}

/// Write `v` as JSON with object keys sorted, whatever serde_json's map ordering is.
fn write_canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(map) => {
            out.push(b'{');
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(&Value::String(k.clone()), out);
                out.push(b':');
                if let Some(val) = map.get(k) {
                    write_canonical(val, out);
                }
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => {
            // Serializing a scalar Value cannot fail.
            if let Ok(s) = serde_json::to_vec(scalar) {
                out.extend_from_slice(&s);
            }
        }
    }
}

/// Canonical JSON bytes of a pod (sorted keys, no whitespace).
pub fn canonical_json(pod: &Pod) -> Vec<u8> {
    let mut out = Vec::new();
    match serde_json::to_value(pod) {
        Ok(v) => write_canonical(&v, &mut out),
        // Not reachable for this model (all keys are strings); keep the hash total anyway.
        Err(e) => out.extend_from_slice(format!("unserializable:{e}").as_bytes()),
    }
    out
}

/// The static-pod UID for an API-defaulted pod (see the module docs for the recipe).
pub fn static_pod_uid(
    defaulted: &Pod,
    node_name: &str,
    source: SourceKind,
    origin: &str,
) -> String {
    let mut hashed = defaulted.clone();
    // The kubelet hashes the internal object, whose type meta is empty.
    hashed.kind.clear();
    hashed.api_version.clear();
    // Defaulting set `priority` (the built-in class's value, else 0) before nanolet stopped
    // sending it in mirror pods (the Priority admission plugin refuses a pod whose integer
    // priority differs from its class): hash it as then, so no static pod's UID (and so no
    // running pod) changes across that upgrade.
    if hashed.spec.priority.is_none() {
        let p = crate::api::helpers::priority(&hashed);
        hashed.spec.priority = i32::try_from(p).ok();
    }
    let mut h = Md5::new();
    h.update(canonical_json(&hashed));
    match source {
        SourceKind::File => {
            h.update(format!("host:{node_name}").as_bytes());
            h.update(format!("file:{origin}").as_bytes());
        }
        SourceKind::Http | SourceKind::Api => {
            h.update(format!("url:{origin}").as_bytes());
        }
    }
    let digest = h.finalize();
    let mut s = String::with_capacity(32);
    for b in digest.iter() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// `<name>-<lowercased node name>`.
pub fn static_pod_name(name: &str, node_name: &str) -> String {
    format!("{name}-{}", node_name.to_lowercase())
}

/// Default, hash, name, annotate and validate one manifest pod.
pub fn make_static_pod(
    raw: Pod,
    node_name: &str,
    source: SourceKind,
    origin: &str,
    seen: &str,
) -> Result<Pod, Vec<FieldError>> {
    let mut pod = raw;
    apply_api_defaults(&mut pod);
    if pod.metadata.name.is_empty() {
        return Err(vec![FieldError {
            field: "metadata.name".into(),
            reason: "Required value: name or generateName is required".into(),
        }]);
    }
    if pod.metadata.uid.is_empty() {
        pod.metadata.uid = static_pod_uid(&pod, node_name, source, origin);
    }
    pod.kind = "Pod".into();
    pod.api_version = "v1".into();
    pod.metadata.name = static_pod_name(&pod.metadata.name, node_name);
    if pod.metadata.namespace.is_empty() {
        pod.metadata.namespace = "default".into();
    }
    pod.spec.node_name = node_name.to_string();
    let uid = pod.metadata.uid.clone();
    let ann = &mut pod.metadata.annotations;
    ann.insert(CONFIG_HASH_ANNOTATION.into(), uid);
    ann.insert(CONFIG_SOURCE_ANNOTATION.into(), source.as_str().into());
    ann.insert(CONFIG_SEEN_ANNOTATION.into(), seen.into());
    if source == SourceKind::File {
        add_no_execute_toleration(&mut pod);
    }
    // Status is the agent's to compute, never the manifest's.
    pod.status = None;
    let errs = validate(&pod);
    if errs.is_empty() { Ok(pod) } else { Err(errs) }
}

/// The kubelet tolerates every NoExecute taint for file pods (AddOrUpdateTolerationInPod).
fn add_no_execute_toleration(pod: &mut Pod) {
    let tol = serde_json::json!({"operator": "Exists", "effect": "NoExecute"});
    match pod.spec.extra.get_mut("tolerations") {
        Some(Value::Array(list)) => {
            if !list.contains(&tol) {
                list.push(tol);
            }
        }
        Some(_) => {} // malformed; left alone (not modelled)
        None => {
            pod.spec
                .extra
                .insert("tolerations".into(), Value::Array(vec![tol]));
        }
    }
}

/// The pod without its `kubernetes.io/config.seen` annotation: use for change detection.
pub fn without_seen(pod: &Pod) -> Pod {
    let mut p = pod.clone();
    p.metadata.annotations.remove(CONFIG_SEEN_ANNOTATION);
    p
}

/// Equality ignoring `kubernetes.io/config.seen`.
pub fn same_content(a: &Pod, b: &Pod) -> bool {
    let mut a_ann = a.metadata.annotations.clone();
    let mut b_ann = b.metadata.annotations.clone();
    a_ann.remove(CONFIG_SEEN_ANNOTATION);
    b_ann.remove(CONFIG_SEEN_ANNOTATION);
    if a_ann != b_ann {
        return false;
    }
    without_seen(a) == without_seen(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: busybox:1.36\n";

    fn decode_pod(s: &str) -> Pod {
        match decode_manifest(s.as_bytes(), "/m/web.yaml") {
            Ok(DecodedDoc::Pod(p)) => *p,
            other => panic!("unexpected {other:?}"),
        }
    }

    fn make(s: &str, node: &str, path: &str) -> Pod {
        match make_static_pod(decode_pod(s), node, SourceKind::File, path, "t") {
            Ok(p) => p,
            Err(e) => panic!("{e:?}"),
        }
    }

    #[test]
    fn naming_and_annotations() {
        let p = make(POD, "Node-1", "/m/web.yaml");
        assert_eq!(p.metadata.name, "web-node-1");
        assert_eq!(p.metadata.namespace, "default");
        assert_eq!(p.spec.node_name, "Node-1");
        let uid = &p.metadata.uid;
        assert_eq!(uid.len(), 32);
        assert!(
            uid.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
        assert_eq!(
            p.metadata.annotations.get(CONFIG_HASH_ANNOTATION),
            Some(uid)
        );
        assert_eq!(
            p.metadata
                .annotations
                .get(CONFIG_SOURCE_ANNOTATION)
                .map(String::as_str),
            Some("file")
        );
        assert_eq!(
            p.metadata
                .annotations
                .get(CONFIG_SEEN_ANNOTATION)
                .map(String::as_str),
            Some("t")
        );
        assert_eq!(p.kind, "Pod");
    }

    #[test]
    fn uid_properties() {
        let a = make(POD, "node1", "/m/web.yaml").metadata.uid;
        assert_eq!(a, make(POD, "node1", "/m/web.yaml").metadata.uid, "stable");
        assert_ne!(a, make(POD, "node2", "/m/web.yaml").metadata.uid, "node");
        assert_ne!(a, make(POD, "node1", "/m/other.yaml").metadata.uid, "path");
        let changed = POD.replace("1.36", "1.37");
        assert_ne!(
            a,
            make(&changed, "node1", "/m/web.yaml").metadata.uid,
            "content"
        );
        // Explicit defaults hash like omitted ones.
        let explicit = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  restartPolicy: Always\n  \
            terminationGracePeriodSeconds: 30\n  dnsPolicy: ClusterFirst\n  enableServiceLinks: true\n  containers:\n  \
            - name: c\n    image: busybox:1.36\n    imagePullPolicy: IfNotPresent\n    terminationMessagePolicy: File\n";
        assert_eq!(a, make(explicit, "node1", "/m/web.yaml").metadata.uid);
        // An explicit `priority: 0` hashes like an omitted one, as when defaulting set it:
        // static pods keep their UIDs across the upgrade that stopped defaulting priority.
        let with_priority = POD.replace("spec:\n", "spec:\n  priority: 0\n");
        assert_eq!(a, make(&with_priority, "node1", "/m/web.yaml").metadata.uid);
        // JSON and YAML spellings of the same pod agree.
        let json = r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web"},"spec":{"containers":[{"image":"busybox:1.36","name":"c"}]}}"#;
        assert_eq!(a, make(json, "node1", "/m/web.yaml").metadata.uid);
        // config.seen does not enter the hash.
        let p1 = make_static_pod(
            decode_pod(POD),
            "n",
            SourceKind::File,
            "/x",
            "2024-01-01T00:00:00Z",
        );
        let p2 = make_static_pod(
            decode_pod(POD),
            "n",
            SourceKind::File,
            "/x",
            "2025-01-01T00:00:00Z",
        );
        let (Ok(p1), Ok(p2)) = (p1, p2) else {
            panic!("invalid")
        };
        assert_eq!(p1.metadata.uid, p2.metadata.uid);
        assert!(same_content(&p1, &p2));
        assert_ne!(p1, p2);
        // URL pods: "url:" + url, no host (as the kubelet).
        let u1 = make_static_pod(
            decode_pod(POD),
            "n1",
            SourceKind::Http,
            "http://x/pods",
            "t",
        );
        let u2 = make_static_pod(
            decode_pod(POD),
            "n2",
            SourceKind::Http,
            "http://x/pods",
            "t",
        );
        let (Ok(u1), Ok(u2)) = (u1, u2) else {
            panic!("invalid")
        };
        assert_eq!(u1.metadata.uid, u2.metadata.uid);
        assert_ne!(u1.metadata.uid, p1.metadata.uid);
        assert_eq!(
            u1.metadata
                .annotations
                .get(CONFIG_SOURCE_ANNOTATION)
                .map(String::as_str),
            Some("http")
        );
    }

    #[test]
    fn explicit_uid_is_kept() {
        let s = POD.replace("name: web\n", "name: web\n  uid: abc\n");
        assert_eq!(make(&s, "n", "/x").metadata.uid, "abc");
    }

    #[test]
    fn decode_errors_name_the_field() {
        let bad = POD.replace(
            "image: busybox:1.36",
            "image: busybox:1.36\n    ports:\n    - containerPort: x",
        );
        let e = decode_manifest(bad.as_bytes(), "/m/a.yaml")
            .err()
            .unwrap_or_else(|| panic!("accepted"));
        assert_eq!(e.origin, "/m/a.yaml");
        assert_eq!(e.field, "spec.containers[0].ports[0].containerPort");
        let reason = "Invalid value: \"x\": must be an integer (int32); the kubelet cannot decode a string into this field (write it unquoted; a leading 0 is octal)";
        assert_eq!(e.reason, reason);
        assert_eq!(
            e.to_string(),
            format!("/m/a.yaml: spec.containers[0].ports[0].containerPort: {reason}")
        );
    }

    #[test]
    fn decode_kinds() {
        assert!(matches!(
            decode_manifest(POD.as_bytes(), "o"),
            Ok(DecodedDoc::Pod(_))
        ));
        let list = "apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: a}\n  spec: {containers: [{name: c, image: x}]}\n";
        match decode_manifest(list.as_bytes(), "o") {
            Ok(DecodedDoc::PodList(items)) => assert_eq!(items.len(), 1),
            other => panic!("{other:?}"),
        }
        let no_kind = POD.replace("kind: Pod\n", "");
        assert_eq!(
            decode_manifest(no_kind.as_bytes(), "o")
                .err()
                .map(|e| e.field),
            Some("kind".to_string())
        );
        let no_ver = POD.replace("apiVersion: v1\n", "");
        assert_eq!(
            decode_manifest(no_ver.as_bytes(), "o")
                .err()
                .map(|e| e.field),
            Some("apiVersion".to_string())
        );
        let apps = POD.replace("apiVersion: v1", "apiVersion: apps/v1");
        assert!(decode_manifest(apps.as_bytes(), "o").is_err());
        let dep = POD.replace("kind: Pod", "kind: Deployment");
        assert!(decode_manifest(dep.as_bytes(), "o").is_err());
        let bad_item = "apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: a}\n  spec: {containers: [{name: 3}]}\n";
        let e = decode_manifest(bad_item.as_bytes(), "o")
            .err()
            .map(|e| e.field);
        assert_eq!(e, Some("items[0].spec.containers[0].name".to_string()));
    }

    #[test]
    fn hostile_inputs_never_panic() {
        let mut inputs: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"   \n".to_vec(),
            b"---\n".to_vec(),
            b"null".to_vec(),
            b"[]".to_vec(),
            b"42".to_vec(),
            b"{".to_vec(),
            b"\xff\xfe\x00".to_vec(),
            format!("{POD}---\n{POD}").into_bytes(),
            b"apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: c\n    image: x\n    ports:\n    - containerPort: 99999999999999999999999\n".to_vec(),
            b"apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: x, ports: [{containerPort: 1e400}]}]}\n".to_vec(),
            b"a: &a [*a]".to_vec(),
            b"apiVersion: v1\nkind: Pod\nmetadata: {name: a, labels: {1: 2}}\n".to_vec(),
            b"apiVersion: 1\nkind: Pod\n".to_vec(),
            b"{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"spec\":{\"containers\":\"no\"}}".to_vec(),
        ];
        inputs.push(format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes());
        inputs.push(format!("x: {}1{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes());
        inputs.push("- ".repeat(50_000).into_bytes());
        // Alias expansion bomb ("billion laughs").
        let mut bomb = String::from("a: &a [x,x,x,x,x,x,x,x,x,x]\n");
        for i in 0..9u8 {
            let (prev, cur) = ((b'a' + i) as char, (b'a' + i + 1) as char);
            bomb.push_str(&format!("{cur}: &{cur} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"));
        }
        inputs.push(bomb.into_bytes());
        inputs.push(
            format!(
                "{{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{}}}",
                "{\"a\":".repeat(10_000)
            )
            .into_bytes(),
        );
        // Pseudo-random bytes (xorshift), deterministic.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for len in [1usize, 7, 64, 512, 4096] {
            let mut v = Vec::with_capacity(len);
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                v.push((x & 0xff) as u8);
            }
            inputs.push(v);
        }
        for (i, input) in inputs.iter().enumerate() {
            let r = decode_manifest(input, "o");
            if i == 9 || i == 10 {
                assert!(r.is_err(), "input {i} should fail: {r:?}");
            }
            if let Ok(DecodedDoc::Pod(p)) = r {
                let _ = make_static_pod(*p, "n", SourceKind::File, "o", "t");
            }
        }
        // Several YAML documents: like the kubelet (go-yaml v2's Unmarshal), the first one is
        // read and the rest ignored, with a note telling the user to split the file.
        let other = POD.replace("name: web", "name: other");
        let (doc, notes) =
            decode_manifest_with_notes(format!("{POD}---\n{other}").as_bytes(), "o").unwrap();
        assert!(matches!(doc, DecodedDoc::Pod(p) if p.metadata.name == "web"));
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].contains("1 more YAML document") && notes[0].contains("own file"),
            "{notes:?}"
        );
        // A lone `---` after the Pod is no further document, and a BOM is skipped.
        let (_, notes) =
            decode_manifest_with_notes(format!("\u{FEFF}{POD}---\n").as_bytes(), "o").unwrap();
        assert!(notes.is_empty(), "{notes:?}");
        assert!(decode_manifest(b"", "o").is_err());
    }

    #[test]
    fn huge_and_invalid_make_errors() {
        let p = decode_pod(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: Web}\nspec: {containers: [{name: c, image: x}]}\n",
        );
        let errs = make_static_pod(p, "n", SourceKind::File, "o", "t")
            .err()
            .unwrap_or_default();
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "metadata.name");
        assert!(errs[0].reason.starts_with("Invalid value: \"Web-n\""));
        let p = decode_pod(
            "apiVersion: v1\nkind: Pod\nmetadata: {}\nspec: {containers: [{name: c, image: x}]}\n",
        );
        let errs = make_static_pod(p, "n", SourceKind::File, "o", "t")
            .err()
            .unwrap_or_default();
        assert_eq!(errs[0].field, "metadata.name");
    }
}
