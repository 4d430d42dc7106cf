//! kubeconfig files (the kubelet's `--kubeconfig`): the current context's cluster (server, CA)
//! and user (bearer token or token file, client certificate and key), inline `*-data` fields
//! or files relative to the kubeconfig's directory. Secrets never appear in errors or Debug.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    #[error("kubeconfig {}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
    #[error("kubeconfig {}: {field}: {reason}", path.display())]
    Field {
        path: PathBuf,
        field: String,
        reason: String,
    },
}

/// `current-context` names a context the file does not have.
#[derive(Debug, thiserror::Error)]
#[error("no context named {0:?}")]
struct NoContext(String);

/// What nanolet needs from a kubeconfig.
#[derive(Clone, PartialEq, Eq)]
pub struct Kubeconfig {
    /// `https://host:port` (no trailing slash).
    pub server: String,
    /// PEM of the CA bundle; `None`: the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    pub insecure_skip_tls_verify: bool,
    /// Bearer token. SECRET.
    pub token: Option<String>,
    /// PEM client certificate chain and key. The key is SECRET.
    pub client_cert_pem: Option<Vec<u8>>,
    pub client_key_pem: Option<Vec<u8>>,
}

impl Kubeconfig {
    /// The ServiceAccount a bearer token authenticates as (`namespace:name`), read from the
    /// `sub` claim of a ServiceAccount JWT (`system:serviceaccount:<ns>:<name>`, what both
    /// TokenRequest and legacy Secret tokens carry); `None` for any other credential. Only
    /// the claims are read, nothing is verified: it names the identity, it grants nothing.
    pub fn service_account(&self) -> Option<String> {
        let token = self.token.as_deref()?;
        let mut parts = token.split('.');
        let (_header, claims, _sig) = (parts.next()?, parts.next()?, parts.next()?);
        let claims: serde_json::Value =
            serde_json::from_slice(&crate::util::base64::decode_raw_url(claims)?).ok()?;
        claims["sub"]
            .as_str()?
            .strip_prefix("system:serviceaccount:")
            .map(String::from)
    }
}

impl fmt::Debug for Kubeconfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kubeconfig")
            .field("server", &self.server)
            .field("ca", &self.ca_pem.as_ref().map(|c| c.len()))
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("client_cert", &self.client_cert_pem.is_some())
            .field(
                "client_key",
                &self.client_key_pem.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct File {
    #[serde(default)]
    clusters: Vec<NamedCluster>,
    #[serde(default)]
    users: Vec<NamedUser>,
    #[serde(default)]
    contexts: Vec<NamedContext>,
    #[serde(default)]
    current_context: String,
}

#[derive(Deserialize)]
struct NamedCluster {
    name: String,
    #[serde(default)]
    cluster: Cluster,
}

#[derive(Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default)]
    user: User,
}

#[derive(Deserialize)]
struct NamedContext {
    name: String,
    #[serde(default)]
    context: Context,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    #[serde(default)]
    server: String,
    certificate_authority: Option<String>,
    certificate_authority_data: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct User {
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<String>,
    client_certificate: Option<String>,
    client_certificate_data: Option<String>,
    client_key: Option<String>,
    client_key_data: Option<String>,
}

#[derive(Deserialize, Default)]
struct Context {
    #[serde(default)]
    cluster: String,
    #[serde(default)]
    user: String,
}

impl Kubeconfig {
    pub fn load(path: &Path) -> Result<Kubeconfig, KubeconfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| KubeconfigError::Invalid {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        Self::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<Kubeconfig, KubeconfigError> {
        let field = |field: &str, reason: String| KubeconfigError::Field {
            path: path.to_path_buf(),
            field: field.to_string(),
            reason,
        };
        let file = decode_file(path, text)?;
        let base = path.parent().unwrap_or_else(|| Path::new(""));
        let (cluster_name, user_name) = file
            .context_names()
            .map_err(|r| field("current-context", r.to_string()))?;
        let cluster = file
            .clusters
            .iter()
            .find(|c| c.name == cluster_name)
            .map(|c| &c.cluster)
            .ok_or_else(|| field("clusters", format!("no cluster named {cluster_name:?}")))?;
        let server = cluster.server.trim_end_matches('/').to_string();
        if !(server.starts_with("https://") || server.starts_with("http://")) {
            return Err(field(
                &format!("clusters[{cluster_name}].cluster.server"),
                format!("expected an https:// URL, got {server:?}"),
            ));
        }
        let read = |f: &str, p: &str| {
            let p = base.join(p);
            std::fs::read(&p).map_err(|e| field(f, format!("reading {}: {e}", p.display())))
        };
        let decode = |f: &str, d: &str| {
            crate::util::base64::decode(d.trim()).map_err(|_| field(f, "not valid base64".into()))
        };
        let ca_pem = match (
            &cluster.certificate_authority_data,
            &cluster.certificate_authority,
        ) {
            (Some(d), _) => Some(decode("certificate-authority-data", d)?),
            (None, Some(p)) => Some(read("certificate-authority", p)?),
            (None, None) => None,
        };
        let user = match file.users.iter().find(|u| u.name == user_name) {
            Some(u) => &u.user,
            None if user_name.is_empty() => &User::default(),
            None => return Err(field("users", format!("no user named {user_name:?}"))),
        };
        let token = match (&user.token, &user.token_file) {
            (Some(t), _) => Some(t.trim().to_string()),
            (None, Some(p)) => Some(
                String::from_utf8_lossy(&read("tokenFile", p)?)
                    .trim()
                    .to_string(),
            ),
            (None, None) => None,
        };
        let client_cert_pem = match (&user.client_certificate_data, &user.client_certificate) {
            (Some(d), _) => Some(decode("client-certificate-data", d)?),
            (None, Some(p)) => Some(read("client-certificate", p)?),
            (None, None) => None,
        };
        let client_key_pem = match (&user.client_key_data, &user.client_key) {
            (Some(d), _) => Some(decode("client-key-data", d)?),
            (None, Some(p)) => Some(read("client-key", p)?),
            (None, None) => None,
        };
        if client_cert_pem.is_some() != client_key_pem.is_some() {
            return Err(field(
                &format!("users[{user_name}].user"),
                "a client certificate needs its key and the other way round".into(),
            ));
        }
        Ok(Kubeconfig {
            server,
            ca_pem,
            insecure_skip_tls_verify: cluster.insecure_skip_tls_verify,
            token,
            client_cert_pem,
            client_key_pem,
        })
    }
}

/// Decodes the kubeconfig text into its typed form.
fn decode_file(path: &Path, text: &str) -> Result<File, KubeconfigError> {
    // Read as client-go reads it (sigs.k8s.io/yaml: YAML 1.1, first document). Errors may
    // quote the offending value (a token): report the position only.
    let invalid = |reason: String| KubeconfigError::Invalid {
        path: path.to_path_buf(),
        reason,
    };
    let doc = crate::yaml::to_json(text).map_err(|e| {
        invalid(match e {
            crate::yaml::DecodeError::Yaml(crate::yaml::YamlError::Syntax {
                line, column, ..
            }) => {
                format!("invalid YAML at line {line} column {column}")
            }
            crate::yaml::DecodeError::Json(j) => {
                format!("invalid JSON at line {} column {}", j.line(), j.column())
            }
            crate::yaml::DecodeError::Yaml(_) => "invalid YAML".to_string(),
        })
    })?;
    serde_path_to_error::deserialize(&doc.value)
        .map_err(|e| invalid(format!("invalid kubeconfig at {}", e.path())))
}

impl File {
    /// The (cluster, user) names of the current context (the first context when none is
    /// current; the first cluster and user when there is no context).
    fn context_names(&self) -> Result<(String, String), NoContext> {
        let ctx_name = if self.current_context.is_empty() {
            self.contexts
                .first()
                .map(|c| c.name.clone())
                .unwrap_or_default()
        } else {
            self.current_context.clone()
        };
        match self.contexts.iter().find(|c| c.name == ctx_name) {
            Some(c) => Ok((c.context.cluster.clone(), c.context.user.clone())),
            None if self.contexts.is_empty() => Ok((
                self.clusters
                    .first()
                    .map(|c| c.name.clone())
                    .unwrap_or_default(),
                self.users
                    .first()
                    .map(|u| u.name.clone())
                    .unwrap_or_default(),
            )),
            None => Err(NoContext(ctx_name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KC: &str = "apiVersion: v1
kind: Config
current-context: edge
clusters:
- name: k3s
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority-data: LS0tLS1CRUdJTg==
contexts:
- name: edge
  context: {cluster: k3s, user: node}
users:
- name: node
  user:
    token: s3cret-token
";

    #[test]
    fn a_service_account_token_is_recognised() {
        let jwt = |claims: &str| {
            format!(
                "{}.{}.sig",
                crate::util::base64::encode(br#"{"alg":"RS256"}"#).trim_end_matches('='),
                crate::util::base64::encode(claims.as_bytes())
                    .trim_end_matches('=')
                    .replace('+', "-")
                    .replace('/', "_")
            )
        };
        let with = |token: &str| {
            let mut k = Kubeconfig::parse(Path::new("kc"), KC).expect("parses");
            k.token = Some(token.to_string());
            k
        };
        let sa = jwt(
            r#"{"iss":"https://kubernetes.default.svc","sub":"system:serviceaccount:kube-system:nanolet-edge1"}"#,
        );
        assert_eq!(
            with(&sa).service_account().as_deref(),
            Some("kube-system:nanolet-edge1")
        );
        // A bootstrap token, an opaque static token, another subject: not a ServiceAccount.
        assert_eq!(with("abcdef.0123456789abcdef").service_account(), None);
        assert_eq!(with("s3cret-token").service_account(), None);
        assert_eq!(
            with(&jwt(r#"{"sub":"system:node:n1"}"#)).service_account(),
            None
        );
    }

    #[test]
    fn current_context_cluster_and_token() {
        let k = Kubeconfig::parse(Path::new("/etc/nanolet/kubeconfig"), KC).unwrap();
        assert_eq!(k.server, "https://10.0.0.1:6443");
        assert_eq!(k.ca_pem.as_deref(), Some(&b"-----BEGIN"[..]));
        assert_eq!(k.token.as_deref(), Some("s3cret-token"));
        assert!(!format!("{k:?}").contains("s3cret"));
    }

    #[test]
    fn files_are_relative_to_the_kubeconfig_and_errors_name_fields() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("ca.crt"), "CA").unwrap();
        std::fs::write(d.path().join("token"), "tok\n").unwrap();
        let text = KC
            .replace(
                "certificate-authority-data: LS0tLS1CRUdJTg==",
                "certificate-authority: ca.crt",
            )
            .replace("token: s3cret-token", "tokenFile: token");
        let k = Kubeconfig::parse(&d.path().join("kc"), &text).unwrap();
        assert_eq!(k.ca_pem.as_deref(), Some(&b"CA"[..]));
        assert_eq!(k.token.as_deref(), Some("tok"));
        let e = Kubeconfig::parse(
            &d.path().join("kc"),
            &KC.replace("current-context: edge", "current-context: nope"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("current-context") && e.contains("nope"), "{e}");
        let e = Kubeconfig::parse(
            Path::new("/kc"),
            &KC.replace("https://10.0.0.1:6443/", "10.0.0.1"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("cluster.server"), "{e}");
        let e = Kubeconfig::parse(
            Path::new("/kc"),
            &KC.replace("    token: s3cret-token", "    token: [s3cret-token"),
        )
        .unwrap_err()
        .to_string();
        assert!(!e.contains("s3cret"), "{e}");
    }
}
