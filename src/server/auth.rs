//! Authentication and authorization of the kubelet server on `--port` (the kubelet's
//! `pkg/kubelet/server/auth.go` and `InstallAuthFilter`, and the apiserver authenticators it
//! delegates to), independent of the transport so every rule is tested directly.
//!
//! Authentication, as the kubelet's delegating authenticator: a verified client certificate
//! (user = CN, groups = O) or a bearer token checked with a TokenReview (cached for
//! `authentication.webhook.cacheTTL`, keyed by the token's SHA-256, never the token); a request
//! that presents credentials that fail is 401 even with anonymous auth (the union authenticator
//! fails on error before the anonymous one); only a request with no credentials is
//! `system:anonymous` / `system:unauthenticated`, and only with `--anonymous-auth`. Every
//! authenticated user gets `system:authenticated` (the authenticated-group adder).
//!
//! Authorization: AlwaysAllow, or a SubjectAccessReview per attribute set (cached: allowed for
//! `cacheAuthorizedTTL`, denied for `cacheUnauthorizedTTL`, errors not cached) with the
//! attributes of `nodeAuthorizerAttributesGetter` (KubeletFineGrainedAuthz, GA in 1.36): see
//! [`request_attributes`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::apiclient::client::{ApiClient, ApiError};

/// The body of a 401, as the kubelet's (`resp.WriteErrorString(401, "Unauthorized")`).
pub const UNAUTHORIZED: &str = "Unauthorized";

/// At most this many entries per cache (expired ones are dropped first, then all).
const CACHE_MAX: usize = 4096;

/// An authenticated user (`user.Info`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What a review against the API server failed with (never holds a token).
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("TokenReview: {0}")]
    TokenReview(Box<ApiError>),
    #[error("SubjectAccessReview for {user} ({verb} nodes/{subresource}): {source}")]
    AccessReview {
        user: String,
        verb: String,
        subresource: String,
        source: Box<ApiError>,
    },
    #[error("{kind}: unexpected answer: {reason}")]
    Answer { kind: &'static str, reason: String },
}

/// The API server's reviews, a seam so the rules are tested without one.
pub trait Reviewer: Send + Sync {
    /// A TokenReview: the user, or `None` when the token is not authenticated.
    fn review_token(&self, token: &str) -> Result<Option<UserInfo>, AuthError>;
    /// A SubjectAccessReview: whether `user` may do `attrs`.
    fn review_access(&self, user: &UserInfo, attrs: &Attributes) -> Result<bool, AuthError>;
}

/// The authorization attributes of one request (`authorizer.AttributesRecord`; resource is
/// always `nodes`, API version `v1`, no namespace or group).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    pub verb: &'static str,
    pub subresource: &'static str,
    /// The node's name.
    pub name: String,
}

/// The API verb of an HTTP method (`GetRequestAttributes`: POST create, GET get, PUT update,
/// PATCH patch, DELETE delete). HEAD is `get` here: the kubelet leaves it empty (no verb
/// matches it), nanolet serves HEAD as GET on every other port and authorizes it so.
pub fn verb(method: &str) -> &'static str {
    match method {
        "GET" | "HEAD" => "get",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    }
}

/// `isSubpath`: `path` is `base` or below it (`base` without its trailing slash).
fn is_subpath(path: &str, base: &str) -> bool {
    let base = base.trim_end_matches('/');
    path == base || (path.starts_with(base) && path.as_bytes().get(base.len()) == Some(&b'/'))
}

/// The subresources a request is authorized against, in order (the first allowed one wins), as
/// the kubelet's `nodeAuthorizerAttributesGetter` with KubeletFineGrainedAuthz (beta and on in
/// 1.33, GA in 1.36): `/pods`, `/runningpods/` -> pods then proxy; `/healthz` -> healthz then
/// proxy; `/configz` -> configz then proxy; `/statusz` -> statusz then proxy; `/stats/*` stats;
/// `/metrics/*` metrics; `/logs/*` log; `/checkpoint/*` checkpoint; everything else
/// (`/containerLogs`, `/exec`, `/run`, `/spec/`, ...) proxy.
pub fn subresources(path: &str) -> Vec<&'static str> {
    let fine = [
        ("/pods", "pods"),
        ("/healthz", "healthz"),
        ("/configz", "configz"),
        ("/statusz", "statusz"),
        ("/runningpods/", "pods"),
    ];
    if let Some((_, sub)) = fine.iter().find(|(base, _)| is_subpath(path, base)) {
        return vec![sub, "proxy"];
    }
    let coarse = [
        ("/stats", "stats"),
        ("/metrics", "metrics"),
        ("/logs", "log"),
        ("/checkpoint", "checkpoint"),
    ];
    match coarse.iter().find(|(base, _)| is_subpath(path, base)) {
        Some((_, sub)) => vec![sub],
        None => vec!["proxy"],
    }
}

/// Every attribute set a request is checked against, in order.
pub fn request_attributes(node_name: &str, method: &str, path: &str) -> Vec<Attributes> {
    subresources(path)
        .into_iter()
        .map(|subresource| Attributes {
            verb: verb(method),
            subresource,
            name: node_name.to_string(),
        })
        .collect()
}

/// The client certificate the TLS layer saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientCert {
    None,
    /// Chains to the client CA with the client-auth usage: its subject's CN and O.
    Verified {
        common_name: String,
        organizations: Vec<String>,
    },
    /// Presented but not verified (another CA, expired, wrong usage): the reason, for logs.
    Invalid(String),
}

/// The settings of [`Auth`].
#[derive(Debug, Clone)]
pub struct AuthOptions {
    pub node_name: String,
    pub anonymous: bool,
    /// TokenReview with this cache TTL; `None`: bearer tokens are not accepted.
    pub token_webhook_ttl: Option<Duration>,
    /// SubjectAccessReview with (authorized, unauthorized) cache TTLs; `None`: AlwaysAllow.
    pub authz_webhook_ttls: Option<(Duration, Duration)>,
}

/// The outcome for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow(UserInfo),
    /// 401 with [`UNAUTHORIZED`].
    Unauthorized,
    /// 403 with this body.
    Forbidden(String),
    /// 500 with this body (a review failed).
    Error(String),
}

impl Decision {
    /// The status and text body of a refusal; `None` for `Allow`.
    pub fn refusal(&self) -> Option<(u16, String)> {
        match self {
            Decision::Allow(_) => None,
            Decision::Unauthorized => Some((401, UNAUTHORIZED.to_string())),
            Decision::Forbidden(m) => Some((403, m.clone())),
            Decision::Error(m) => Some((500, m.clone())),
        }
    }
}

/// A map whose entries expire.
struct TtlCache<K, V> {
    entries: HashMap<K, (V, Instant)>,
}

impl<K: std::hash::Hash + Eq, V: Clone> TtlCache<K, V> {
    fn new() -> Self {
        TtlCache {
            entries: HashMap::new(),
        }
    }

    fn get(&self, key: &K, now: Instant) -> Option<V> {
        match self.entries.get(key) {
            Some((v, expires)) if *expires > now => Some(v.clone()),
            _ => None,
        }
    }

    fn put(&mut self, key: K, value: V, ttl: Duration, now: Instant) {
        if ttl.is_zero() {
            return;
        }
        if self.entries.len() >= CACHE_MAX {
            self.entries.retain(|_, (_, expires)| *expires > now);
            if self.entries.len() >= CACHE_MAX {
                self.entries.clear();
            }
        }
        self.entries.insert(key, (value, now + ttl));
    }
}

/// The kubelet server's authenticator and authorizer.
pub struct Auth {
    options: AuthOptions,
    /// Set at construction or later, once TLS bootstrap has made the API client
    /// ([`Auth::set_reviewer`]); until then a webhook answers 500 and tokens are refused.
    reviewer: std::sync::OnceLock<Arc<dyn Reviewer>>,
    tokens: Mutex<TtlCache<[u8; 32], Option<UserInfo>>>,
    decisions: Mutex<TtlCache<String, bool>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("options", &self.options)
            .finish()
    }
}

impl Auth {
    /// `reviewer` is needed by the webhooks (the config check makes sure there is one); without
    /// it a webhook answers 500 / refuses tokens.
    pub fn new(options: AuthOptions, reviewer: Option<Arc<dyn Reviewer>>) -> Auth {
        let cell = std::sync::OnceLock::new();
        if let Some(r) = reviewer {
            let _ = cell.set(r);
        }
        Auth {
            options,
            reviewer: cell,
            tokens: Mutex::new(TtlCache::new()),
            decisions: Mutex::new(TtlCache::new()),
        }
    }

    /// Authenticates and authorizes one request.
    pub fn check(
        &self,
        cert: &ClientCert,
        authorization: &str,
        method: &str,
        path: &str,
    ) -> Decision {
        self.check_at(cert, authorization, method, path, Instant::now())
    }

    fn check_at(
        &self,
        cert: &ClientCert,
        authorization: &str,
        method: &str,
        path: &str,
        now: Instant,
    ) -> Decision {
        let Some(user) = self.authenticate(cert, authorization, now) else {
            return Decision::Unauthorized;
        };
        self.authorize(user, method, path, now)
    }

    /// The user, or `None` (401).
    fn authenticate(
        &self,
        cert: &ClientCert,
        authorization: &str,
        now: Instant,
    ) -> Option<UserInfo> {
        let mut failed = false;
        match cert {
            ClientCert::Verified {
                common_name,
                organizations,
            } => {
                return Some(authenticated(UserInfo {
                    name: common_name.clone(),
                    groups: organizations.clone(),
                    ..UserInfo::default()
                }));
            }
            ClientCert::Invalid(reason) => {
                tracing::debug!("kubelet server: client certificate refused: {reason}");
                failed = true;
            }
            ClientCert::None => {}
        }
        // Without the token webhook a bearer token is not a credential (the kubelet has no
        // token authenticator then).
        let token = bearer(authorization).filter(|_| self.options.token_webhook_ttl.is_some());
        if let Some(token) = token {
            match self.token_user(token, now) {
                Some(user) => return Some(authenticated(user)),
                None => failed = true,
            }
        }
        if failed || !self.options.anonymous {
            return None;
        }
        Some(UserInfo {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            ..UserInfo::default()
        })
    }

    /// The reviewer once the API client exists (after TLS bootstrap); a second call is ignored.
    pub fn set_reviewer(&self, reviewer: Arc<dyn Reviewer>) {
        let _ = self.reviewer.set(reviewer);
    }

    /// The TokenReview's user for `token` (cached by its hash), `None` if not authenticated or
    /// the review failed.
    fn token_user(&self, token: &str, now: Instant) -> Option<UserInfo> {
        let ttl = self.options.token_webhook_ttl?;
        let reviewer = self.reviewer.get()?;
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Ok(cache) = self.tokens.lock() {
            if let Some(hit) = cache.get(&key, now) {
                return hit;
            }
        }
        match reviewer.review_token(token) {
            Ok(user) => {
                if let Ok(mut cache) = self.tokens.lock() {
                    cache.put(key, user.clone(), ttl, now);
                }
                user
            }
            Err(e) => {
                tracing::warn!("kubelet server: authenticating a bearer token: {e}");
                None
            }
        }
    }

    fn authorize(&self, user: UserInfo, method: &str, path: &str, now: Instant) -> Decision {
        let Some((allowed_ttl, denied_ttl)) = self.options.authz_webhook_ttls else {
            return Decision::Allow(user);
        };
        let attrs = request_attributes(&self.options.node_name, method, path);
        for a in &attrs {
            let key = sar_spec(&user, a).to_string();
            let cached = self.decisions.lock().ok().and_then(|c| c.get(&key, now));
            let allowed = match cached {
                Some(v) => v,
                None => {
                    let answer = match self.reviewer.get() {
                        Some(r) => r.review_access(&user, a),
                        None => Err(AuthError::Answer {
                            kind: "SubjectAccessReview",
                            reason: "no API server client".into(),
                        }),
                    };
                    match answer {
                        Ok(v) => {
                            let ttl = if v { allowed_ttl } else { denied_ttl };
                            if let Ok(mut c) = self.decisions.lock() {
                                c.put(key, v, ttl, now);
                            }
                            v
                        }
                        Err(e) => {
                            tracing::error!(user = %user.name, "kubelet server: authorization error: {e}");
                            return Decision::Error(format!(
                                "Authorization error (user={}, verb={}, resource=nodes, subresource={})",
                                user.name, a.verb, a.subresource
                            ));
                        }
                    }
                }
            };
            if allowed {
                return Decision::Allow(user);
            }
        }
        let subs: Vec<&str> = attrs.iter().map(|a| a.subresource).collect();
        let verb = attrs.first().map_or("", |a| a.verb);
        // Debug, as the kubelet's V(2): a client can cause one per request.
        tracing::debug!(user = %user.name, verb, subresources = ?subs, path, "kubelet server: forbidden");
        Decision::Forbidden(forbidden_text(&user.name, verb, &subs))
    }
}

/// The 403 body, as the kubelet's `InstallAuthFilter` since fine-grained authorization
/// (`Forbidden (user=%s, verb=%s, resource=%s, subresource(s)=%v)\n`, `%v` of a Go string
/// slice: `[pods proxy]`).
pub fn forbidden_text(user: &str, verb: &str, subresources: &[&str]) -> String {
    format!(
        "Forbidden (user={user}, verb={verb}, resource=nodes, subresource(s)=[{}])\n",
        subresources.join(" ")
    )
}

/// The group every authenticated user gets (apiserver's `AuthenticatedGroupAdder`).
fn authenticated(mut user: UserInfo) -> UserInfo {
    let already = user
        .groups
        .iter()
        .any(|g| g == "system:authenticated" || g == "system:unauthenticated");
    if !already && user.name != "system:anonymous" {
        user.groups.push("system:authenticated".into());
    }
    user
}

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive, as the
/// apiserver's bearer token authenticator); `None` without one or with an empty token.
fn bearer(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// A SubjectAccessReview's spec (Go's `omitempty`: no namespace, group, uid or extra when
/// empty).
fn sar_spec(user: &UserInfo, a: &Attributes) -> Value {
    let mut spec = json!({
        "resourceAttributes": {
            "verb": a.verb,
            "version": "v1",
            "resource": "nodes",
            "subresource": a.subresource,
            "name": a.name,
        },
        "user": user.name,
    });
    if !user.groups.is_empty() {
        spec["groups"] = json!(user.groups);
    }
    if !user.uid.is_empty() {
        spec["uid"] = json!(user.uid);
    }
    if !user.extra.is_empty() {
        spec["extra"] = json!(user.extra);
    }
    spec
}

/// The reviews through the node's API client (`POST .../tokenreviews`,
/// `POST .../subjectaccessreviews`).
pub struct ApiReviewer {
    pub client: Arc<ApiClient>,
}

impl Reviewer for ApiReviewer {
    fn review_token(&self, token: &str) -> Result<Option<UserInfo>, AuthError> {
        let body = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        });
        let answer = self
            .client
            .post("/apis/authentication.k8s.io/v1/tokenreviews", &body)
            .map_err(|e| AuthError::TokenReview(Box::new(e)))?;
        token_review_user(&answer)
    }

    fn review_access(&self, user: &UserInfo, attrs: &Attributes) -> Result<bool, AuthError> {
        let body = json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": sar_spec(user, attrs),
        });
        let answer = self
            .client
            .post("/apis/authorization.k8s.io/v1/subjectaccessreviews", &body)
            .map_err(|source| AuthError::AccessReview {
                user: user.name.clone(),
                verb: attrs.verb.to_string(),
                subresource: attrs.subresource.to_string(),
                source: Box::new(source),
            })?;
        match answer.pointer("/status/allowed") {
            Some(Value::Bool(b)) => Ok(*b),
            // `allowed` is omitted when false (omitempty is not on it, but be lenient).
            None => Ok(false),
            Some(other) => Err(AuthError::Answer {
                kind: "SubjectAccessReview",
                reason: format!("status.allowed is {other}"),
            }),
        }
    }
}

/// The user of a TokenReview answer, `None` when `status.authenticated` is not true.
fn token_review_user(answer: &Value) -> Result<Option<UserInfo>, AuthError> {
    if answer.pointer("/status/authenticated") != Some(&Value::Bool(true)) {
        return Ok(None);
    }
    let user = answer.pointer("/status/user").unwrap_or(&Value::Null);
    let name = user["username"].as_str().unwrap_or("");
    if name.is_empty() {
        return Err(AuthError::Answer {
            kind: "TokenReview",
            reason: "authenticated without a username".into(),
        });
    }
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let extra = user["extra"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), strings(v))).collect())
        .unwrap_or_default();
    Ok(Some(UserInfo {
        name: name.to_string(),
        uid: user["uid"].as_str().unwrap_or("").to_string(),
        groups: strings(&user["groups"]),
        extra,
    }))
}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;
