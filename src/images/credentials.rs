//! Registry credentials for image pulls, with the kubelet's rules (pkg/credentialprovider):
//!
//! - sources: the pod's `imagePullSecrets` (from the local secret store: type
//!   `kubernetes.io/dockerconfigjson` key `.dockerconfigjson`, or `kubernetes.io/dockercfg` key
//!   `.dockercfg`), then the node's docker `config.json` (the kubelet reads
//!   `/var/lib/kubelet/config.json`; nanolet `--image-credentials-file`, default
//!   `<root-dir>/config.json`). Every matching credential is tried in that order; with none,
//!   the pull is anonymous.
//! - keys: the scheme is dropped, `/v1/` and `/v2/` path prefixes count as the host;
//!   `index.docker.io` serves images without a registry host and `docker.io/...`.
//! - matching: same number of host parts, each matched as a glob (`*.example.com`), the same
//!   port, and the key's path a prefix of the image's; more specific keys (reverse sort order)
//!   first.
//!
//! Credentials never reach logs, events, status or errors: [`Credential`]'s Debug redacts them
//! and errors name only the file, secret or key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::api::env::ConfigMapsAndSecrets;
use crate::util::base64::decode as base64_decode;

const DEFAULT_REGISTRY_HOST: &str = "index.docker.io";

#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("{origin}: {reason}")]
    Invalid { origin: String, reason: String },
    #[error("{origin}: {source}")]
    Io {
        origin: String,
        #[source]
        source: std::io::Error,
    },
}

/// One username/password (or token) for a registry key. Debug never shows the secrets.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Credential {
    /// The config key it came from (e.g. `registry.example.com:5000`).
    pub server: String,
    pub username: String,
    pub password: String,
    pub identity_token: String,
    pub registry_token: String,
    /// Where it came from, for logs: `secret default/regcred` or the file's path.
    pub origin: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("server", &self.server)
            .field("origin", &self.origin)
            .field("username", &"<redacted>")
            .finish()
    }
}

/// Credentials by normalised key, looked up with the kubelet's matching rules.
#[derive(Debug, Clone, Default)]
pub struct Keyring {
    creds: BTreeMap<String, Vec<Credential>>,
}

/// `https://host:port/path` -> (host, port, path).
fn split_schemeless(s: &str) -> (String, String, String) {
    let s = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"))
        .unwrap_or(s);
    let (hostport, path) = match s.find('/') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => (h, p),
        _ => (hostport, ""),
    };
    (
        host.to_ascii_lowercase(),
        port.to_string(),
        path.to_string(),
    )
}

/// Go's `filepath.Match` for one host part: `*` (any run), `?` (one char), `[...]` classes.
fn glob(pattern: &[u8], s: &[u8]) -> bool {
    match pattern.first() {
        None => s.is_empty(),
        Some(b'*') => (0..=s.len()).any(|i| glob(&pattern[1..], &s[i..])),
        Some(b'?') => !s.is_empty() && glob(&pattern[1..], &s[1..]),
        Some(b'[') => {
            let Some(end) = pattern.iter().position(|b| *b == b']') else {
                return false;
            };
            let Some(c) = s.first() else { return false };
            let mut class = &pattern[1..end];
            let negate = class.first().is_some_and(|b| *b == b'^');
            if negate {
                class = &class[1..];
            }
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == b'-' {
                    hit |= class[i] <= *c && *c <= class[i + 2];
                    i += 3;
                } else {
                    hit |= class[i] == *c;
                    i += 1;
                }
            }
            hit != negate && glob(&pattern[end + 1..], &s[1..])
        }
        Some(p) => s.first() == Some(p) && glob(&pattern[1..], &s[1..]),
    }
}

/// The kubelet's `URLsMatch` for a key and an image repository (both without scheme).
pub fn urls_match(key: &str, image: &str) -> bool {
    let (gh, gp, gpath) = split_schemeless(key);
    let (th, tp, tpath) = split_schemeless(image);
    if gp != tp {
        return false;
    }
    let gparts: Vec<&str> = gh.split('.').collect();
    let tparts: Vec<&str> = th.split('.').collect();
    if gparts.len() != tparts.len() || !tpath.starts_with(&gpath) {
        return false;
    }
    gparts
        .iter()
        .zip(&tparts)
        .all(|(g, t)| glob(g.as_bytes(), t.as_bytes()))
}

/// Does the image live on Docker Hub (no registry host, or docker.io)?
fn is_default_registry(image: &str) -> bool {
    let mut parts = image.splitn(2, '/');
    let first = parts.next().unwrap_or("");
    if first.is_empty() {
        return false;
    }
    match parts.next() {
        None => true,
        Some(_) => {
            first == "docker.io" || first == DEFAULT_REGISTRY_HOST || !first.contains(['.', ':'])
        }
    }
}

/// The repository part of an image reference, normalised (`busybox:1` ->
/// `docker.io/library/busybox`), as the kubelet looks it up.
pub fn repository(image: &str) -> String {
    let full = super::archive::normalize_ref(image).unwrap_or_else(|_| image.to_string());
    let no_digest = full.split('@').next().unwrap_or(&full);
    // Strip a tag: the last ':' after the last '/'.
    match no_digest.rfind(':') {
        Some(i) if i > no_digest.rfind('/').unwrap_or(0) => no_digest[..i].to_string(),
        _ => no_digest.to_string(),
    }
}

impl Keyring {
    /// Parses a docker `config.json` (`{"auths": {...}}`) or a legacy `.dockercfg` (the map
    /// itself). `origin` names the source in errors and logs.
    pub fn parse(bytes: &[u8], origin: &str) -> Result<Keyring, CredentialError> {
        let inv = |reason: String| CredentialError::Invalid {
            origin: origin.to_string(),
            reason,
        };
        let v: Value =
            serde_json::from_slice(bytes).map_err(|e| inv(format!("invalid JSON: {e}")))?;
        let map = match v.get("auths") {
            Some(a) => a,
            None => &v,
        };
        let map = map
            .as_object()
            .ok_or_else(|| inv("expected an object of registry entries".into()))?;
        let mut ring = Keyring::default();
        for (loc, entry) in map {
            let field = |k: &str| {
                entry
                    .get(k)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            let mut cred = Credential {
                server: loc.clone(),
                username: field("username"),
                password: field("password"),
                identity_token: field("identitytoken"),
                registry_token: field("registrytoken"),
                origin: origin.to_string(),
            };
            let auth = field("auth");
            if !auth.is_empty() {
                // Never echo the value: only say which entry is bad.
                let decoded = base64_decode(&auth)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| {
                        inv(format!("auths[{loc:?}].auth: not base64 of user:password"))
                    })?;
                let (u, p) = decoded.split_once(':').ok_or_else(|| {
                    inv(format!("auths[{loc:?}].auth: not base64 of user:password"))
                })?;
                cred.username = u.to_string();
                cred.password = p.to_string();
            }
            ring.add(loc, cred);
        }
        Ok(ring)
    }

    /// Reads a docker config file; a missing file is an empty keyring.
    pub fn from_file(path: &Path) -> Result<Keyring, CredentialError> {
        match std::fs::read(path) {
            Ok(b) => Keyring::parse(&b, &path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Keyring::default()),
            Err(source) => Err(CredentialError::Io {
                origin: path.display().to_string(),
                source,
            }),
        }
    }

    fn add(&mut self, loc: &str, cred: Credential) {
        let (host, port, path) = split_schemeless(loc);
        let path = path
            .strip_prefix("/v2/")
            .or_else(|| path.strip_prefix("/v1/"))
            .map(|p| format!("/{p}"))
            .unwrap_or(path);
        let host = if port.is_empty() {
            host
        } else {
            format!("{host}:{port}")
        };
        let key = if path.is_empty() || path == "/" {
            host
        } else {
            format!("{host}{}", path.trim_end_matches('/'))
        };
        self.creds.entry(key).or_default().push(cred);
    }

    /// The credentials for an image repository, most specific key first.
    pub fn lookup(&self, image: &str) -> Vec<Credential> {
        let repo = repository(image);
        let mut out = Vec::new();
        for (k, v) in self.creds.iter().rev() {
            if urls_match(k, &repo) {
                out.extend(v.iter().cloned());
            }
        }
        if out.is_empty() && is_default_registry(&repo) {
            if let Some(v) = self.creds.get(DEFAULT_REGISTRY_HOST) {
                out.extend(v.iter().cloned());
            }
        }
        out
    }
}

/// The keyring of one pull secret from the local store.
pub fn secret_keyring(
    store: &dyn ConfigMapsAndSecrets,
    namespace: &str,
    name: &str,
) -> Result<Keyring, CredentialError> {
    let origin = format!("secret {namespace}/{name}");
    let data = store
        .secret(namespace, name)
        .map_err(|e| CredentialError::Invalid {
            origin: origin.clone(),
            reason: e.to_string(),
        })?;
    let bytes = data
        .get(".dockerconfigjson")
        .or_else(|| data.get(".dockercfg"))
        .ok_or_else(|| CredentialError::Invalid {
            origin: origin.clone(),
            reason: "has neither key .dockerconfigjson (type kubernetes.io/dockerconfigjson) nor .dockercfg (type kubernetes.io/dockercfg)".into(),
        })?;
    Keyring::parse(bytes, &origin)
}

/// The names of a pod's `spec.imagePullSecrets`.
pub fn pull_secret_names(pod_spec_extra: &BTreeMap<String, Value>) -> Vec<String> {
    pod_spec_extra
        .get("imagePullSecrets")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.get("name").and_then(Value::as_str))
                .filter(|n| !n.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Everything to try for `image`, in the kubelet's order: the pod's pull secrets (in spec
/// order), then the node's credential file. An unreadable secret or file is skipped with a
/// warning (as the kubelet does for a missing pull secret).
pub fn credentials_for(
    image: &str,
    namespace: &str,
    pull_secrets: &[String],
    store: Option<&dyn ConfigMapsAndSecrets>,
    node_file: Option<&PathBuf>,
) -> Vec<Credential> {
    let mut out = Vec::new();
    if let Some(store) = store {
        for s in pull_secrets {
            match secret_keyring(store, namespace, s) {
                Ok(k) => out.extend(k.lookup(image)),
                Err(e) => tracing::warn!(image, error = %e, "skipping an image pull secret"),
            }
        }
    }
    if let Some(f) = node_file {
        match Keyring::from_file(f) {
            Ok(k) => out.extend(k.lookup(image)),
            Err(e) => tracing::warn!(image, error = %e, "skipping the registry credentials file"),
        }
    }
    out
}

impl Credential {
    fn to_auth(&self) -> crate::cri::RegistryAuth {
        crate::cri::RegistryAuth {
            username: self.username.clone(),
            password: self.password.clone(),
            identity_token: self.identity_token.clone(),
            registry_token: self.registry_token.clone(),
        }
    }
}

/// Pulls `image` as the kubelet does: with each matching credential in order until one
/// works, anonymously when none matches. When all fail the errors are aggregated (the
/// kubelet's `[e1, e2]`); they come from containerd and never contain the credentials.
pub fn pull(
    rt: &dyn crate::cri::Runtime,
    image: &str,
    creds: &[Credential],
) -> Result<String, crate::cri::RuntimeError> {
    if creds.is_empty() {
        return rt.pull_image_with_auth(image, None);
    }
    let mut errors: Vec<crate::cri::RuntimeError> = Vec::new();
    for c in creds {
        match rt.pull_image_with_auth(image, Some(&c.to_auth())) {
            Ok(r) => {
                tracing::debug!(image, credentials = %c.origin, key = %c.server, "pulled with credentials");
                return Ok(r);
            }
            Err(e) => {
                tracing::debug!(image, credentials = %c.origin, key = %c.server, error = %e, "pull with credentials failed");
                errors.push(e);
            }
        }
    }
    let mut last = errors.pop().unwrap_or_else(|| {
        crate::cri::RuntimeError::new(
            "PullImage",
            image,
            crate::cri::ErrorKind::Other,
            "no credentials tried",
        )
    });
    if !errors.is_empty() {
        let all: Vec<String> = errors
            .iter()
            .map(|e| e.message.clone())
            .chain(std::iter::once(last.message.clone()))
            .collect();
        last.message = format!("[{}]", all.join(", "));
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_matching_follows_the_kubelet() {
        for (key, image, want) in [
            ("registry.io", "registry.io/a/b", true),
            ("*.registry.io", "x.registry.io/a", true),
            ("*.registry.io", "registry.io/a", false),
            ("*.io", "x.registry.io/a", false),
            ("k8s.*.io", "k8s.gcr.io/a", true),
            ("app*.k8s.io", "app1.k8s.io/a", true),
            ("registry.io:8080", "registry.io/a", false),
            ("registry.io:8080", "registry.io:8080/a", true),
            ("registry.io", "registry.io:8080/a", false),
            ("registry.io/team", "registry.io/team/app", true),
            ("registry.io/team", "registry.io/other/app", false),
            ("https://registry.io", "registry.io/a", true),
        ] {
            assert_eq!(urls_match(key, image), want, "{key} vs {image}");
        }
    }

    #[test]
    fn config_json_and_dockercfg_parse_and_lookup_order() {
        let cfg = br#"{"auths":{
            "https://index.docker.io/v1/": {"auth": "aHViOnNlY3JldA=="},
            "127.0.0.1:5000": {"username": "u", "password": "p"},
            "127.0.0.1:5000/team": {"username": "team", "password": "tp"},
            "*.example.com": {"username": "w", "password": "wp"}
        }}"#;
        let k = Keyring::parse(cfg, "/etc/config.json").unwrap();
        let users =
            |img: &str| -> Vec<String> { k.lookup(img).into_iter().map(|c| c.username).collect() };
        assert_eq!(users("busybox:1.36"), ["hub"]);
        assert_eq!(users("docker.io/me/app"), ["hub"]);
        assert_eq!(k.lookup("busybox")[0].password, "secret");
        assert_eq!(
            users("127.0.0.1:5000/team/app:1"),
            ["team", "u"],
            "specific key first"
        );
        assert_eq!(users("127.0.0.1:5000/x"), ["u"]);
        assert_eq!(users("a.example.com/x"), ["w"]);
        assert!(users("b.a.example.com/x").is_empty());
        assert!(users("quay.io/x").is_empty());
        // legacy .dockercfg: the map itself
        let k2 = Keyring::parse(br#"{"quay.io": {"auth": "cTpw"}}"#, "secret default/old").unwrap();
        assert_eq!(k2.lookup("quay.io/x/y")[0].username, "q");
    }

    #[test]
    fn errors_never_show_secrets() {
        let e = Keyring::parse(br#"{"auths":{"r.io":{"auth":"%%%notbase64"}}}"#, "/c.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/c.json") && e.contains("r.io") && !e.contains("notbase64"),
            "{e}"
        );
        let k = Keyring::parse(
            br#"{"auths":{"r.io":{"username":"u","password":"hunter2"}}}"#,
            "x",
        )
        .unwrap();
        let dbg = format!("{:?}", k.lookup("r.io/a"));
        assert!(!dbg.contains("hunter2") && !dbg.contains("\"u\""), "{dbg}");
    }

    #[test]
    fn pull_secrets_come_from_the_local_store_first() {
        let d = tempfile::tempdir().unwrap();
        let secrets = d.path().join("secrets");
        std::fs::create_dir_all(&secrets).unwrap();
        // {"auths":{"127.0.0.1:5000":{"username":"pod","password":"pp"}}}
        let dcj =
            "eyJhdXRocyI6eyIxMjcuMC4wLjE6NTAwMCI6eyJ1c2VybmFtZSI6InBvZCIsInBhc3N3b3JkIjoicHAifX19";
        std::fs::write(
            secrets.join("reg.yaml"),
            format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: regcred\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: {dcj}\n"),
        )
        .unwrap();
        let node = d.path().join("config.json");
        std::fs::write(
            &node,
            br#"{"auths":{"127.0.0.1:5000":{"username":"node","password":"np"}}}"#,
        )
        .unwrap();
        let store = crate::localstore::LocalStore::new(d.path().join("cm"), secrets);
        let extra: BTreeMap<String, Value> =
            serde_json::from_str(r#"{"imagePullSecrets":[{"name":"missing"},{"name":"regcred"}]}"#)
                .unwrap();
        let names = pull_secret_names(&extra);
        assert_eq!(names, ["missing", "regcred"]);
        let c = credentials_for(
            "127.0.0.1:5000/busybox:1",
            "default",
            &names,
            Some(&store as &dyn ConfigMapsAndSecrets),
            Some(&node),
        );
        let users: Vec<&str> = c.iter().map(|c| c.username.as_str()).collect();
        assert_eq!(users, ["pod", "node"]);
        assert_eq!(c[0].origin, "secret default/regcred");
        assert!(
            credentials_for(
                "other.io/x",
                "default",
                &names,
                Some(&store as &dyn ConfigMapsAndSecrets),
                Some(&node)
            )
            .is_empty()
        );
        let e = secret_keyring(&store, "default", "missing")
            .unwrap_err()
            .to_string();
        assert!(e.contains("secret default/missing"), "{e}");
    }

    #[test]
    fn repository_strips_tag_and_digest() {
        assert_eq!(repository("busybox:1.36"), "docker.io/library/busybox");
        assert_eq!(repository("127.0.0.1:5000/a/b:1"), "127.0.0.1:5000/a/b");
        assert_eq!(repository("127.0.0.1:5000/a@sha256:00"), "127.0.0.1:5000/a");
    }
}
