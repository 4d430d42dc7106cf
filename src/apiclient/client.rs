//! A small blocking Kubernetes API client over ureq: JSON in and out, the kubeconfig's CA,
//! bearer token and client certificate, a per-request timeout, and errors that carry the HTTP
//! status and the API's `Status` message (never the token).

use std::time::Duration;

use serde_json::Value;

use super::kubeconfig::Kubeconfig;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{method} {path}: {message}")]
    Transport {
        method: &'static str,
        path: String,
        message: String,
    },
    #[error("{method} {path}: HTTP {status} {reason}: {message}")]
    Status {
        method: &'static str,
        path: String,
        status: u16,
        /// The `Status.reason` (NotFound, AlreadyExists, Conflict, Expired, ...).
        reason: String,
        message: String,
    },
    #[error("{method} {path}: decoding the response: {message}")]
    Decode {
        method: &'static str,
        path: String,
        message: String,
    },
    #[error("kubeconfig TLS settings: {0}")]
    Tls(String),
}

impl ApiError {
    /// The HTTP status, when the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ApiError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// What the server said (its `Status.message`), else the whole error.
    pub fn message(&self) -> String {
        match self {
            ApiError::Status { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }
}

/// The client. Cheap to share (`Arc`) across threads: every user holds the same one, so a
/// credential swap ([`ApiClient::set_credentials`], certificate rotation) reaches them all.
pub struct ApiClient {
    /// The agents and token, swapped together under the lock. A request clones what it
    /// needs (agents are reference counted) and does not hold the lock while it runs.
    credentials: std::sync::RwLock<Credentials>,
    base: String,
    timeout: Duration,
}

#[derive(Clone)]
struct Credentials {
    agent: ureq::Agent,
    /// For watches: long-lived responses (the server ends them after `timeoutSeconds`).
    watch_agent: ureq::Agent,
    token: Option<String>,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let token = self.credentials().token.is_some();
        f.debug_struct("ApiClient")
            .field("server", &self.base)
            .field("token", &token.then_some("<redacted>"))
            .finish()
    }
}

#[cfg(feature = "tls")]
fn tls_config(kc: &Kubeconfig) -> Result<ureq::tls::TlsConfig, ApiError> {
    use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};
    let mut b = TlsConfig::builder().disable_verification(kc.insecure_skip_tls_verify);
    if let Some(ca) = &kc.ca_pem {
        let certs: Vec<Certificate<'static>> = ureq::tls::parse_pem(ca)
            .filter_map(|i| match i {
                Ok(PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        if certs.is_empty() {
            return Err(ApiError::Tls(
                "the certificate authority holds no PEM certificate".into(),
            ));
        }
        b = b.root_certs(RootCerts::new_with_certs(&certs));
    }
    if let (Some(cert), Some(key)) = (&kc.client_cert_pem, &kc.client_key_pem) {
        let chain: Vec<Certificate<'static>> = ureq::tls::parse_pem(cert)
            .filter_map(|i| match i {
                Ok(PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        let key = PrivateKey::from_pem(key)
            .map_err(|_| ApiError::Tls("the client key is not a PEM private key".into()))?;
        if chain.is_empty() {
            return Err(ApiError::Tls(
                "the client certificate holds no PEM certificate".into(),
            ));
        }
        b = b.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
    }
    Ok(b.build())
}

impl Credentials {
    fn new(kc: &Kubeconfig, timeout: Duration) -> Result<Credentials, ApiError> {
        // `head`: how long the response's status line and headers may take. A watch's body
        // lasts minutes, but its head comes as fast as any answer: a watch whose head never
        // comes (a server or proxy that took the connection and went silent) is given up after
        // the per-request timeout and retried, instead of holding the source for the
        // watch's whole lifetime with nothing logged.
        let agent_with = |t: Duration, head: Duration| -> Result<ureq::Agent, ApiError> {
            let builder = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(t))
                .timeout_recv_response(Some(head));
            #[cfg(feature = "tls")]
            let builder = builder.tls_config(tls_config(kc)?);
            Ok(builder.build().new_agent())
        };
        Ok(Credentials {
            agent: agent_with(timeout, timeout)?,
            watch_agent: agent_with(Duration::from_secs(420), timeout)?,
            token: kc.token.clone(),
        })
    }
}

impl ApiClient {
    pub fn new(kc: &Kubeconfig, timeout: Duration) -> Result<ApiClient, ApiError> {
        if kc.server.starts_with("https://") && !cfg!(feature = "tls") {
            return Err(ApiError::Tls(
                "this nanolet was built without the `tls` feature and cannot reach an https:// API server"
                    .into(),
            ));
        }
        Ok(ApiClient {
            credentials: std::sync::RwLock::new(Credentials::new(kc, timeout)?),
            base: kc.server.clone(),
            timeout,
        })
    }

    /// The API server's URL (`https://host:port`).
    pub fn server(&self) -> &str {
        &self.base
    }

    /// Switches to `kc`'s credentials (CA, token, client certificate) for every later request
    /// of every holder of this client; requests in flight finish with the old ones. The server
    /// stays the one the client was made for. Certificate rotation calls this.
    pub fn set_credentials(&self, kc: &Kubeconfig) -> Result<(), ApiError> {
        let fresh = Credentials::new(kc, self.timeout)?;
        match self.credentials.write() {
            Ok(mut c) => *c = fresh,
            Err(poisoned) => *poisoned.into_inner() = fresh,
        }
        Ok(())
    }

    fn credentials(&self) -> Credentials {
        match self.credentials.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn finish(
        &self,
        method: &'static str,
        path: &str,
        r: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Value, ApiError> {
        let mut resp = r.map_err(|e| ApiError::Transport {
            method,
            path: path.to_string(),
            message: e.to_string(),
        })?;
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_vec()
            .map_err(|e| ApiError::Transport {
                method,
                path: path.to_string(),
                message: e.to_string(),
            })?;
        if !(200..300).contains(&status) {
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            return Err(ApiError::Status {
                method,
                path: path.to_string(),
                status,
                reason: v["reason"].as_str().unwrap_or_default().to_string(),
                message: v["message"].as_str().map(String::from).unwrap_or_else(|| {
                    String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned()
                }),
            });
        }
        if body.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&body).map_err(|e| ApiError::Decode {
            method,
            path: path.to_string(),
            message: e.to_string(),
        })
    }

    /// A request built on one snapshot of the credentials (agent and token together).
    fn request<B>(
        &self,
        build: impl FnOnce(&ureq::Agent) -> ureq::RequestBuilder<B>,
    ) -> ureq::RequestBuilder<B> {
        let c = self.credentials();
        c.auth(build(&c.agent))
    }
}

impl Credentials {
    fn auth<B>(&self, req: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        let req = req.header("Accept", "application/json");
        match &self.token {
            Some(t) => req.header("Authorization", &format!("Bearer {t}")),
            None => req,
        }
    }
}

impl ApiClient {
    pub fn get(&self, path: &str) -> Result<Value, ApiError> {
        let url = format!("{}{path}", self.base);
        let r = self.request(|a| a.get(&url)).call();
        self.finish("GET", path, r)
    }

    pub fn post(&self, path: &str, body: &Value) -> Result<Value, ApiError> {
        let url = format!("{}{path}", self.base);
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        let r = self
            .request(|a| a.post(&url))
            .header("Content-Type", "application/json")
            .send(&bytes[..]);
        self.finish("POST", path, r)
    }

    pub fn put(&self, path: &str, body: &Value) -> Result<Value, ApiError> {
        let url = format!("{}{path}", self.base);
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        let r = self
            .request(|a| a.put(&url))
            .header("Content-Type", "application/json")
            .send(&bytes[..]);
        self.finish("PUT", path, r)
    }

    /// PATCH with `content_type` (`application/merge-patch+json`,
    /// `application/strategic-merge-patch+json`).
    pub fn patch(&self, path: &str, content_type: &str, body: &Value) -> Result<Value, ApiError> {
        let url = format!("{}{path}", self.base);
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        let r = self
            .request(|a| a.patch(&url))
            .header("Content-Type", content_type)
            .send(&bytes[..]);
        self.finish("PATCH", path, r)
    }

    /// A streaming GET (a watch): the body as a reader of JSON lines. Errors before the body
    /// (transport, non-2xx status) are returned as such.
    pub fn stream(&self, path: &str) -> Result<impl std::io::Read + use<>, ApiError> {
        let url = format!("{}{path}", self.base);
        let resp = {
            let c = self.credentials();
            c.auth(c.watch_agent.get(&url))
        }
        .call()
        .map_err(|e| ApiError::Transport {
            method: "GET",
            path: path.to_string(),
            message: e.to_string(),
        })?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            return self.finish("GET", path, Ok(resp)).and_then(|_| {
                Err(ApiError::Status {
                    method: "GET",
                    path: path.to_string(),
                    status,
                    reason: String::new(),
                    message: String::new(),
                })
            });
        }
        Ok(resp.into_body().into_reader())
    }

    pub fn delete(&self, path: &str) -> Result<Value, ApiError> {
        let url = format!("{}{path}", self.base);
        let r = self.request(|a| a.delete(&url)).call();
        self.finish("DELETE", path, r)
    }

    /// DELETE with a body (`DeleteOptions`), as client-go sends it.
    pub fn delete_with(&self, path: &str, body: &Value) -> Result<Value, ApiError> {
        let url = format!("{}{path}", self.base);
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        let r = self
            .request(|a| a.delete(&url))
            .header("Content-Type", "application/json")
            .force_send_body()
            .send(&bytes[..]);
        self.finish("DELETE", path, r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::Instant;

    fn plain(server: String) -> Kubeconfig {
        Kubeconfig {
            server,
            ca_pem: None,
            insecure_skip_tls_verify: false,
            token: None,
            client_cert_pem: None,
            client_key_pem: None,
        }
    }

    /// A watch whose response head never comes is an error after the per-request timeout,
    /// not a wait of the watch's whole lifetime (420 s) with nothing logged.
    #[test]
    fn a_watch_whose_head_never_comes_fails_after_the_request_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // Takes the connection and reads the request, answers nothing until the test is done.
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let silent = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = std::io::Read::read(&mut conn, &mut buf);
            let _ = wait.recv_timeout(Duration::from_secs(30));
        });
        let client =
            ApiClient::new(&plain(format!("http://{addr}")), Duration::from_millis(300)).unwrap();
        let started = Instant::now();
        let err = client
            .stream("/api/v1/pods?watch=1")
            .err()
            .expect("the watch must fail");
        let took = started.elapsed();
        assert!(
            matches!(err, ApiError::Transport { method: "GET", .. }),
            "{err:?}"
        );
        assert!(took < Duration::from_secs(3), "took {took:?}");
        let _ = done.send(());
        let _ = silent.join();
    }
}
