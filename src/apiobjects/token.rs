//! The kubelet's ServiceAccount token manager (`pkg/kubelet/token/token_manager.go`): tokens
//! of projected `serviceAccountToken` sources come from the TokenRequest API
//! (`POST /api/v1/namespaces/<ns>/serviceaccounts/<sa>/token`), bound to the pod (name and
//! UID), and are cached per (service account, namespace, audiences, expirationSeconds, bound
//! pod). A cached token is used until `requires_refresh` (older than 80 % of its lifetime or
//! than 24 h, minus a jitter of up to 10 s); a refresh that fails keeps the old token while it
//! has not expired. A pod's tokens leave the cache when it is unregistered. Tokens are never
//! logged.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use tracing::{debug, warn};

use crate::api::env::TokenRequestSpec;
use crate::apiclient::client::ApiClient;

use super::ObjectError;

/// upstream `maxTTL`: a token older than this is refreshed whatever its lifetime.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// upstream `maxJitter`: refreshes are spread by up to this much.
pub const MAX_JITTER: Duration = Duration::from_secs(10);

/// upstream `requiresRefresh`: `iat` is `exp - expirationSeconds`; refresh when `now` is past
/// `iat + maxTTL - jitter` or past `exp - 20 % of expirationSeconds - jitter`.
pub fn requires_refresh(
    now: SystemTime,
    expiration: SystemTime,
    expiration_seconds: u64,
    jitter: Duration,
) -> bool {
    let ttl = Duration::from_secs(expiration_seconds);
    let iat = expiration
        .checked_sub(ttl)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let max_age = MAX_TTL.saturating_sub(jitter);
    if now > iat + max_age {
        return true;
    }
    let margin = Duration::from_secs(expiration_seconds * 20 / 100) + jitter;
    let refresh_at = expiration
        .checked_sub(margin)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    now > refresh_at
}

#[derive(Clone)]
struct Cached {
    token: String,
    expiration: SystemTime,
    expiration_seconds: u64,
    pod_uid: String,
    /// From the offline checkpoint: used (even expired: it is what the kubelet's token file
    /// would still hold after a reboot) while a fresh one cannot be requested; replaced by a
    /// fresh one once the API server has answered since start.
    restored: bool,
}

/// A token as the offline checkpoint keeps it (the cache key, the token, its expiry). Its
/// Debug shows no token.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SavedToken {
    pub key: String,
    pub pod_uid: String,
    pub token: String,
    /// Unix seconds.
    pub expiration: u64,
    pub expiration_seconds: u64,
}

impl std::fmt::Debug for SavedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SavedToken")
            .field("pod_uid", &self.pod_uid)
            .field("expiration", &self.expiration)
            .finish_non_exhaustive()
    }
}

/// The token manager.
pub struct TokenManager {
    client: Arc<OnceLock<Arc<ApiClient>>>,
    cache: Mutex<BTreeMap<String, Cached>>,
    journal: Arc<super::watch::Journal>,
    /// The clock (a seam for tests).
    now: fn() -> SystemTime,
}

impl std::fmt::Debug for TokenManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.cache.lock().map(|c| c.len()).unwrap_or(0);
        f.debug_struct("TokenManager")
            .field("cached_tokens", &n)
            .finish()
    }
}

/// The cache key (upstream `keyFunc`: name, namespace, audiences, expiration, bound object).
fn key(spec: &TokenRequestSpec) -> String {
    format!(
        "{:?}/{:?}/{:?}/{}/{}/{}",
        spec.service_account,
        spec.namespace,
        spec.audiences,
        spec.expiration_seconds,
        spec.pod_name,
        spec.pod_uid
    )
}

/// A deterministic jitter in [0, MAX_JITTER) per cache key (upstream draws it at random on
/// every check; a stable one per token keeps refreshes spread without a random source).
fn jitter_for(key: &str) -> Duration {
    let h = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    Duration::from_millis(h % (MAX_JITTER.as_millis() as u64))
}

impl TokenManager {
    pub fn new(
        client: Arc<OnceLock<Arc<ApiClient>>>,
        journal: Arc<super::watch::Journal>,
    ) -> TokenManager {
        TokenManager {
            client,
            cache: Mutex::new(BTreeMap::new()),
            journal,
            now: SystemTime::now,
        }
    }

    /// The cached tokens, for the offline checkpoint (sorted by key).
    pub fn saved(&self) -> Vec<SavedToken> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .iter()
            .map(|(k, c)| SavedToken {
                key: k.clone(),
                pod_uid: c.pod_uid.clone(),
                token: c.token.clone(),
                expiration: c
                    .expiration
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0),
                expiration_seconds: c.expiration_seconds,
            })
            .collect()
    }

    /// Tokens from the offline checkpoint: used while no fresh one can be requested.
    pub fn restore(&self, saved: Vec<SavedToken>) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        for t in saved {
            cache.entry(t.key).or_insert(Cached {
                token: t.token,
                expiration: SystemTime::UNIX_EPOCH + Duration::from_secs(t.expiration),
                expiration_seconds: t.expiration_seconds,
                pod_uid: t.pod_uid,
                restored: true,
            });
        }
    }

    /// The TokenRequest body (authentication.k8s.io/v1) the kubelet's projected volume sends.
    pub fn request_body(spec: &TokenRequestSpec) -> Value {
        json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": spec.audiences,
                "expirationSeconds": spec.expiration_seconds,
                "boundObjectRef": {
                    "kind": "Pod",
                    "apiVersion": "v1",
                    "name": spec.pod_name,
                    "uid": spec.pod_uid,
                },
            },
        })
    }

    fn fetch(&self, spec: &TokenRequestSpec) -> Result<Cached, ObjectError> {
        let client = self.client.get().ok_or_else(|| ObjectError::Token {
            service_account: spec.service_account.clone(),
            reason: "no API client yet".into(),
        })?;
        let path = format!(
            "/api/v1/namespaces/{}/serviceaccounts/{}/token",
            spec.namespace, spec.service_account
        );
        let err = |reason: String| ObjectError::Token {
            service_account: spec.service_account.clone(),
            reason,
        };
        let v = client
            .post(&path, &Self::request_body(spec))
            .map_err(|e| err(e.to_string()))?;
        let token = v["status"]["token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| err("the TokenRequest status has no token".into()))?;
        let expiration = v["status"]["expirationTimestamp"]
            .as_str()
            .and_then(crate::timeutil::parse_rfc3339)
            .ok_or_else(|| err("the TokenRequest status has no expirationTimestamp".into()))?;
        // The server may grant another lifetime than asked (3607 s becomes a year with
        // --service-account-extend-token-expiration): the spec it answers with is the truth.
        let expiration_seconds = v["spec"]["expirationSeconds"]
            .as_u64()
            .unwrap_or(spec.expiration_seconds);
        debug!(pod = %spec.pod_name, service_account = %spec.service_account, "token requested");
        self.journal.set_live();
        Ok(Cached {
            token: token.to_string(),
            expiration,
            expiration_seconds,
            pod_uid: spec.pod_uid.clone(),
            restored: false,
        })
    }

    /// upstream `GetServiceAccountToken`.
    pub fn token(&self, spec: &TokenRequestSpec) -> Result<String, ObjectError> {
        let k = key(spec);
        let now = (self.now)();
        let cached = {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            cache.get(&k).cloned()
        };
        // A restored token is used as a cached one until the API server has answered since
        // start; then a fresh one is requested (a request to an unreachable server may take
        // the client's whole timeout: offline starts must not wait for it on every sync).
        if let Some(c) = cached
            .as_ref()
            .filter(|c| !c.restored || !self.journal.live())
        {
            if !requires_refresh(now, c.expiration, c.expiration_seconds, jitter_for(&k)) {
                return Ok(c.token.clone());
            }
        }
        match self.fetch(spec) {
            Ok(fresh) => {
                let t = fresh.token.clone();
                let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
                cache.insert(k, fresh);
                self.journal.bump();
                Ok(t)
            }
            Err(e) => match cached {
                Some(c) if c.restored => {
                    warn!(pod = %spec.pod_name, service_account = %spec.service_account, error = %e, "couldn't request a token; using the checkpointed one");
                    Ok(c.token)
                }
                Some(c) if now < c.expiration => {
                    warn!(pod = %spec.pod_name, service_account = %spec.service_account, error = %e, "couldn't update token; using the cached one");
                    Ok(c.token)
                }
                Some(_) => Err(ObjectError::Token {
                    service_account: spec.service_account.clone(),
                    reason: format!("token expired and refresh failed: {e}"),
                }),
                None => Err(e),
            },
        }
    }

    /// upstream `DeleteServiceAccountToken`: forget the pod's tokens.
    pub fn delete_pod_tokens(&self, pod_uid: &str) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let before = cache.len();
        cache.retain(|_, c| c.pod_uid != pod_uid);
        if cache.len() != before {
            self.journal.bump();
        }
    }

    /// How many tokens are cached.
    #[cfg(test)]
    pub fn cached(&self) -> usize {
        self.cache.lock().map(|c| c.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    /// upstream `requiresRefresh` (token_manager.go): with expirationSeconds 7200 issued at t0,
    /// no refresh until 80 % (5760 s), refresh after it; a 48 h token refreshes after 24 h
    /// (maxTTL) although 80 % is 38.4 h.
    #[test]
    fn refresh_at_80_percent_of_the_ttl_or_24_hours() {
        let t0 = 1_000_000;
        let exp = at(t0 + 7200);
        let no_jitter = Duration::ZERO;
        assert!(!requires_refresh(at(t0 + 5759), exp, 7200, no_jitter));
        assert!(!requires_refresh(at(t0 + 5760), exp, 7200, no_jitter));
        assert!(requires_refresh(at(t0 + 5761), exp, 7200, no_jitter));
        // The jitter moves the refresh earlier, by at most maxJitter.
        assert!(requires_refresh(at(t0 + 5751), exp, 7200, MAX_JITTER));
        assert!(!requires_refresh(at(t0 + 5749), exp, 7200, MAX_JITTER));
        // 48 h token: 24 h (maxTTL) wins over 80 % (38.4 h).
        let exp48 = at(t0 + 48 * 3600);
        assert!(!requires_refresh(
            at(t0 + 24 * 3600),
            exp48,
            48 * 3600,
            no_jitter
        ));
        assert!(requires_refresh(
            at(t0 + 24 * 3600 + 1),
            exp48,
            48 * 3600,
            no_jitter
        ));
        // The admission plugin's 3607 s: refresh after 2885 s (3607 - 721).
        let exp3607 = at(t0 + 3607);
        assert!(!requires_refresh(at(t0 + 2886), exp3607, 3607, no_jitter));
        assert!(requires_refresh(at(t0 + 2887), exp3607, 3607, no_jitter));
    }

    #[test]
    fn jitter_is_below_max_jitter_and_stable() {
        for k in ["a", "b", "\"default\"/\"kube-system\"/[]/3607/p/u"] {
            assert!(jitter_for(k) < MAX_JITTER);
            assert_eq!(jitter_for(k), jitter_for(k));
        }
    }

    #[test]
    fn the_request_binds_the_pod_and_names_audiences_and_lifetime() {
        let spec = TokenRequestSpec {
            namespace: "kube-system".into(),
            service_account: "kube-proxy".into(),
            audiences: vec!["vault".into()],
            expiration_seconds: 3607,
            pod_name: "kube-proxy-abcde".into(),
            pod_uid: "u-1".into(),
        };
        let b = TokenManager::request_body(&spec);
        assert_eq!(b["kind"], "TokenRequest");
        assert_eq!(b["apiVersion"], "authentication.k8s.io/v1");
        assert_eq!(b["spec"]["audiences"], json!(["vault"]));
        assert_eq!(b["spec"]["expirationSeconds"], 3607);
        assert_eq!(
            b["spec"]["boundObjectRef"],
            json!({"kind": "Pod", "apiVersion": "v1", "name": "kube-proxy-abcde", "uid": "u-1"})
        );
        // Distinct cache keys for what upstream keys on.
        let mut other = spec.clone();
        other.pod_uid = "u-2".into();
        assert_ne!(key(&spec), key(&other));
        other = spec.clone();
        other.audiences.clear();
        assert_ne!(key(&spec), key(&other));
    }

    /// A one-hour token for pod `ns/p` (UID `u`) of ServiceAccount `default`.
    fn pod_spec() -> TokenRequestSpec {
        TokenRequestSpec {
            namespace: "ns".into(),
            service_account: "default".into(),
            audiences: vec![],
            expiration_seconds: 3600,
            pod_name: "p".into(),
            pod_uid: "u".into(),
        }
    }

    #[test]
    fn without_a_client_there_is_no_token_and_pod_tokens_are_forgotten() {
        let m = TokenManager::new(Arc::new(OnceLock::new()), Arc::default());
        let spec = pod_spec();
        let e = m.token(&spec).unwrap_err();
        assert!(e.to_string().contains("no API client yet"), "{e}");
        m.cache.lock().unwrap().insert(
            key(&spec),
            Cached {
                token: "t".into(),
                expiration: (m.now)() + Duration::from_secs(3600),
                expiration_seconds: 3600,
                pod_uid: "u".into(),
                restored: false,
            },
        );
        assert_eq!(m.token(&spec).unwrap(), "t");
        m.delete_pod_tokens("u");
        assert_eq!(m.cached(), 0);
    }

    /// Offline after a restart: the checkpointed token is used while no fresh one can be
    /// requested, even expired (it is what the kubelet's token file would still hold).
    #[test]
    fn a_restored_token_is_used_while_no_fresh_one_can_be_requested() {
        let m = TokenManager::new(Arc::new(OnceLock::new()), Arc::default());
        let spec = pod_spec();
        let saved = SavedToken {
            key: key(&spec),
            pod_uid: "u".into(),
            token: "old".into(),
            expiration: 1,
            expiration_seconds: 3600,
        };
        m.restore(vec![saved.clone()]);
        assert_eq!(m.token(&spec).unwrap(), "old");
        // Not expired, the API server not answered since start: used as a cached one.
        let now = (m.now)().duration_since(SystemTime::UNIX_EPOCH).unwrap();
        let other = TokenRequestSpec {
            pod_uid: "u2".into(),
            ..spec.clone()
        };
        m.restore(vec![SavedToken {
            key: key(&other),
            pod_uid: "u2".into(),
            token: "valid".into(),
            expiration: now.as_secs() + 3000,
            expiration_seconds: 3600,
        }]);
        assert_eq!(m.token(&other).unwrap(), "valid");
        // Once the API server answered, a fresh one is asked for (no client here: the
        // restored one is kept, with a warning).
        m.journal.set_live();
        assert_eq!(m.token(&other).unwrap(), "valid");
        m.delete_pod_tokens("u2");
        assert_eq!(m.saved(), vec![saved.clone()]);
        assert!(!format!("{saved:?}").contains("old"));
    }
}
