use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A reviewer that answers from fixed tables and counts its calls.
#[derive(Default)]
struct Stub {
    /// token -> user
    tokens: Vec<(&'static str, &'static str)>,
    /// (user, subresource) pairs allowed
    allowed: Vec<(&'static str, &'static str)>,
    fail_sar: bool,
    token_calls: AtomicUsize,
    sar_calls: Mutex<Vec<(String, &'static str, Value)>>,
}

impl Reviewer for Stub {
    fn review_token(&self, token: &str) -> Result<Option<UserInfo>, AuthError> {
        self.token_calls.fetch_add(1, Ordering::SeqCst);
        Ok(self
            .tokens
            .iter()
            .find(|(t, _)| *t == token)
            .map(|(_, u)| UserInfo {
                name: u.to_string(),
                groups: vec!["system:serviceaccounts".into()],
                ..UserInfo::default()
            }))
    }

    fn review_access(&self, user: &UserInfo, a: &Attributes) -> Result<bool, AuthError> {
        self.sar_calls
            .lock()
            .unwrap()
            .push((user.name.clone(), a.subresource, sar_spec(user, a)));
        if self.fail_sar {
            return Err(AuthError::Answer {
                kind: "SubjectAccessReview",
                reason: "down".into(),
            });
        }
        Ok(self
            .allowed
            .iter()
            .any(|(u, s)| *u == user.name && *s == a.subresource))
    }
}

fn options(anonymous: bool, webhook: bool) -> AuthOptions {
    AuthOptions {
        node_name: "node1".into(),
        anonymous,
        token_webhook_ttl: Some(Duration::from_secs(120)),
        authz_webhook_ttls: webhook.then_some((Duration::from_secs(300), Duration::from_secs(30))),
    }
}

fn cert(cn: &str, orgs: &[&str]) -> ClientCert {
    ClientCert::Verified {
        common_name: cn.into(),
        organizations: orgs.iter().map(|s| s.to_string()).collect(),
    }
}

/// Upstream rule: pkg/kubelet/server/auth.go `nodeAuthorizerAttributesGetter.GetRequestAttributes`
/// with KubeletFineGrainedAuthz (the fine-grained subresource first, then proxy, for /pods,
/// /runningpods/, /healthz, /configz, /statusz; stats, metrics, log, checkpoint by path; proxy
/// else (`/spec/` included);
/// `isSubpath` matches the path itself or below a slash, not a longer name).
#[test]
fn subresources_follow_the_kubelets_path_rules() {
    let cases: &[(&str, &[&str])] = &[
        ("/pods", &["pods", "proxy"]),
        ("/pods/", &["pods", "proxy"]),
        ("/runningpods/", &["pods", "proxy"]),
        ("/healthz", &["healthz", "proxy"]),
        ("/healthz/ping", &["healthz", "proxy"]),
        ("/configz", &["configz", "proxy"]),
        ("/stats/summary", &["stats"]),
        ("/stats", &["stats"]),
        ("/metrics", &["metrics"]),
        ("/metrics/cadvisor", &["metrics"]),
        ("/metrics/probes", &["metrics"]),
        ("/logs/syslog", &["log"]),
        ("/logs/", &["log"]),
        ("/spec/", &["proxy"]),
        ("/statusz", &["statusz", "proxy"]),
        ("/checkpoint/ns/p/c", &["checkpoint"]),
        ("/containerLogs/ns/p/c", &["proxy"]),
        ("/exec/ns/p/c", &["proxy"]),
        ("/run/ns/p/c", &["proxy"]),
        ("/portForward/ns/p", &["proxy"]),
        ("/podsx", &["proxy"]),
        ("/statsd", &["proxy"]),
        ("/", &["proxy"]),
    ];
    for (path, want) in cases {
        assert_eq!(subresources(path), *want, "{path}");
    }
}

/// Upstream rule: GetRequestAttributes' method switch (POST create, GET get, PUT update, PATCH
/// patch, DELETE delete); the node's name and resource nodes.
#[test]
fn verbs_come_from_the_method() {
    for (m, v) in [
        ("GET", "get"),
        ("HEAD", "get"),
        ("POST", "create"),
        ("PUT", "update"),
        ("PATCH", "patch"),
        ("DELETE", "delete"),
        ("OPTIONS", ""),
    ] {
        assert_eq!(verb(m), v, "{m}");
    }
    let a = request_attributes("node1", "POST", "/exec/ns/p/c");
    assert_eq!(
        a,
        vec![Attributes {
            verb: "create",
            subresource: "proxy",
            name: "node1".into()
        }]
    );
}

#[test]
fn no_credentials_is_401_unless_anonymous() {
    let stub: Arc<dyn Reviewer> = Arc::new(Stub::default());
    let auth = Auth::new(options(false, false), Some(stub.clone()));
    let d = auth.check(&ClientCert::None, "", "GET", "/pods");
    assert_eq!(d, Decision::Unauthorized);
    assert_eq!(d.refusal(), Some((401, "Unauthorized".to_string())));

    let anon = Auth::new(options(true, false), Some(stub));
    match anon.check(&ClientCert::None, "", "GET", "/pods") {
        Decision::Allow(u) => {
            assert_eq!(u.name, "system:anonymous");
            assert_eq!(u.groups, vec!["system:unauthenticated"]);
        }
        other => panic!("{other:?}"),
    }
}

/// Upstream rule: the anonymous authenticator comes after a fail-on-error union
/// (`unionauth.NewFailOnError`), so credentials that fail are 401 even with anonymous auth.
#[test]
fn failed_credentials_are_401_even_with_anonymous_auth() {
    let stub = Arc::new(Stub {
        tokens: vec![("good", "sa")],
        ..Stub::default()
    });
    let auth = Auth::new(options(true, false), Some(stub));
    let bad_cert = ClientCert::Invalid("unknown issuer".into());
    assert_eq!(
        auth.check(&bad_cert, "", "GET", "/pods"),
        Decision::Unauthorized
    );
    assert_eq!(
        auth.check(&ClientCert::None, "Bearer wrong", "GET", "/pods"),
        Decision::Unauthorized
    );
    assert!(matches!(
        auth.check(&ClientCert::None, "Bearer good", "GET", "/pods"),
        Decision::Allow(u) if u.name == "sa"
    ));
}

/// x509: user = CN, groups = O + system:authenticated (AuthenticatedGroupAdder).
#[test]
fn client_certificate_user_and_groups() {
    let auth = Auth::new(options(false, false), None);
    match auth.check(&cert("admin", &["system:masters"]), "", "GET", "/pods") {
        Decision::Allow(u) => {
            assert_eq!(u.name, "admin");
            assert_eq!(u.groups, vec!["system:masters", "system:authenticated"]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn token_reviews_are_cached_by_hash_for_the_ttl() {
    let stub = Arc::new(Stub {
        tokens: vec![("good", "sa")],
        ..Stub::default()
    });
    let auth = Auth::new(options(false, false), Some(stub.clone()));
    let t0 = Instant::now();
    let allowed = |now| {
        matches!(
            auth.check_at(&ClientCert::None, "Bearer good", "GET", "/pods", now),
            Decision::Allow(_)
        )
    };
    assert!(allowed(t0));
    assert!(allowed(t0 + Duration::from_secs(119)));
    assert_eq!(stub.token_calls.load(Ordering::SeqCst), 1, "cached for 2m");
    assert!(allowed(t0 + Duration::from_secs(121)));
    assert_eq!(
        stub.token_calls.load(Ordering::SeqCst),
        2,
        "reviewed again after 2m"
    );
    // A refused token is cached too (the apiserver's cached token authenticator caches both).
    let denied = |now| auth.check_at(&ClientCert::None, "Bearer nope", "GET", "/pods", now);
    assert_eq!(denied(t0), Decision::Unauthorized);
    assert_eq!(denied(t0 + Duration::from_secs(1)), Decision::Unauthorized);
    assert_eq!(stub.token_calls.load(Ordering::SeqCst), 3);
    // The cache holds hashes, never a token.
    let cache = auth.tokens.lock().unwrap();
    let key: [u8; 32] = Sha256::digest(b"good").into();
    assert!(cache.entries.contains_key(&key));
}

/// Fine-grained authorization falls back to proxy: allowed by nodes/proxy alone, and the
/// attributes sent are the kubelet's (verb, version v1, resource nodes, subresource, name).
#[test]
fn webhook_falls_back_to_proxy_and_sends_the_kubelets_attributes() {
    let stub = Arc::new(Stub {
        allowed: vec![("admin", "proxy")],
        ..Stub::default()
    });
    let auth = Auth::new(options(false, true), Some(stub.clone()));
    assert!(matches!(
        auth.check(&cert("admin", &["ops"]), "", "GET", "/pods"),
        Decision::Allow(_)
    ));
    let calls = stub.sar_calls.lock().unwrap().clone();
    let subs: Vec<&str> = calls.iter().map(|c| c.1).collect();
    assert_eq!(subs, vec!["pods", "proxy"]);
    assert_eq!(
        calls[0].2,
        json!({
            "resourceAttributes": {"verb": "get", "version": "v1", "resource": "nodes",
                                   "subresource": "pods", "name": "node1"},
            "user": "admin",
            "groups": ["ops", "system:authenticated"],
        })
    );
}

/// Upstream text: InstallAuthFilter's `Forbidden (user=%s, verb=%s, resource=%s,
/// subresource(s)=%v)\n`, and `Authorization error (...)` with 500 when a review fails.
#[test]
fn forbidden_and_error_bodies() {
    let stub = Arc::new(Stub::default());
    let auth = Auth::new(options(false, true), Some(stub));
    let d = auth.check(&cert("bob", &[]), "", "GET", "/pods");
    assert_eq!(
        d.refusal(),
        Some((
            403,
            "Forbidden (user=bob, verb=get, resource=nodes, subresource(s)=[pods proxy])\n".into()
        ))
    );
    let d = auth.check(&cert("bob", &[]), "", "POST", "/exec/ns/p/c");
    assert_eq!(
        d,
        Decision::Forbidden(
            "Forbidden (user=bob, verb=create, resource=nodes, subresource(s)=[proxy])\n".into()
        )
    );
    let failing = Auth::new(
        options(false, true),
        Some(Arc::new(Stub {
            fail_sar: true,
            ..Stub::default()
        })),
    );
    assert_eq!(
        failing
            .check(&cert("bob", &[]), "", "GET", "/stats/summary")
            .refusal(),
        Some((
            500,
            "Authorization error (user=bob, verb=get, resource=nodes, subresource=stats)".into()
        ))
    );
}

/// Decisions are cached: allowed 5m, denied 30s (cacheAuthorizedTTL / cacheUnauthorizedTTL).
#[test]
fn decisions_are_cached_with_their_ttls() {
    let stub = Arc::new(Stub {
        allowed: vec![("admin", "stats")],
        ..Stub::default()
    });
    let auth = Auth::new(options(false, true), Some(stub.clone()));
    let t0 = Instant::now();
    let calls = || stub.sar_calls.lock().unwrap().len();
    let check = |user: &str, secs| {
        auth.check_at(
            &cert(user, &[]),
            "",
            "GET",
            "/stats/summary",
            t0 + Duration::from_secs(secs),
        )
    };
    assert!(matches!(check("admin", 0), Decision::Allow(_)));
    assert!(matches!(check("admin", 299), Decision::Allow(_)));
    assert_eq!(calls(), 1);
    assert!(matches!(check("admin", 301), Decision::Allow(_)));
    assert_eq!(calls(), 2);
    assert!(matches!(check("eve", 0), Decision::Forbidden(_)));
    assert!(matches!(check("eve", 29), Decision::Forbidden(_)));
    assert_eq!(calls(), 3);
    assert!(matches!(check("eve", 31), Decision::Forbidden(_)));
    assert_eq!(calls(), 4);
}

#[test]
fn always_allow_sends_no_review() {
    let stub = Arc::new(Stub::default());
    let auth = Auth::new(options(false, false), Some(stub.clone()));
    assert!(matches!(
        auth.check(&cert("bob", &[]), "", "DELETE", "/pods"),
        Decision::Allow(_)
    ));
    assert!(stub.sar_calls.lock().unwrap().is_empty());
}

#[test]
fn bearer_header_forms() {
    assert_eq!(bearer("Bearer abc"), Some("abc"));
    assert_eq!(bearer("bearer  abc "), Some("abc"));
    assert_eq!(bearer("Basic abc"), None);
    assert_eq!(bearer("Bearer "), None);
    assert_eq!(bearer(""), None);
}

/// The real wire format through `ApiClient`, against a tiny_http stand-in for the API server
/// (TokenReview and SubjectAccessReview; the real double gains them in another branch).
#[test]
fn api_reviewer_speaks_tokenreview_and_subjectaccessreview() {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let port = server.server_addr().to_ip().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::<(String, Value)>::new()));
    let seen_t = seen.clone();
    let thread = std::thread::spawn(move || {
        for _ in 0..3 {
            let Ok(mut req) = server.recv() else { return };
            let mut body = String::new();
            let _ = std::io::Read::read_to_string(req.as_reader(), &mut body);
            let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            let answer = match (req.url(), v.pointer("/spec/token").and_then(Value::as_str)) {
                ("/apis/authentication.k8s.io/v1/tokenreviews", Some("good")) => json!({
                    "kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                    "status": {"authenticated": true, "user": {"username": "system:serviceaccount:kube-system:metrics-server",
                        "uid": "u-1", "groups": ["system:serviceaccounts"], "extra": {"k": ["v"]}}}}),
                ("/apis/authentication.k8s.io/v1/tokenreviews", _) => json!({
                    "kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                    "status": {"authenticated": false, "error": "invalid bearer token"}}),
                _ => json!({"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                    "status": {"allowed": v.pointer("/spec/resourceAttributes/subresource") == Some(&json!("stats"))}}),
            };
            seen_t.lock().unwrap().push((req.url().to_string(), v));
            let _ = req.respond(
                tiny_http::Response::from_string(answer.to_string()).with_header(
                    "Content-Type: application/json"
                        .parse::<tiny_http::Header>()
                        .unwrap(),
                ),
            );
        }
    });
    let kc = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: http://127.0.0.1:{port}\ncontexts:\n- name: c\n  context: {{cluster: k, user: u}}\nusers:\n- name: u\n  user: {{token: node-token}}\n"
    );
    let kc =
        crate::apiclient::kubeconfig::Kubeconfig::parse(std::path::Path::new("/kc"), &kc).unwrap();
    let client = Arc::new(ApiClient::new(&kc, Duration::from_secs(5)).unwrap());
    let reviewer = ApiReviewer { client };
    let user = reviewer.review_token("good").unwrap().unwrap();
    assert_eq!(
        user.name,
        "system:serviceaccount:kube-system:metrics-server"
    );
    assert_eq!(user.uid, "u-1");
    assert_eq!(user.groups, vec!["system:serviceaccounts"]);
    assert_eq!(user.extra.get("k"), Some(&vec!["v".to_string()]));
    assert_eq!(reviewer.review_token("bad").unwrap(), None);
    let attrs = request_attributes("node1", "GET", "/stats/summary");
    assert!(reviewer.review_access(&user, &attrs[0]).unwrap());
    thread.join().unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0].1["kind"], "TokenReview");
    assert_eq!(seen[0].1["apiVersion"], "authentication.k8s.io/v1");
    assert_eq!(
        seen[2].0,
        "/apis/authorization.k8s.io/v1/subjectaccessreviews"
    );
    assert_eq!(
        seen[2].1["spec"]["resourceAttributes"]["subresource"],
        "stats"
    );
    assert_eq!(seen[2].1["spec"]["uid"], "u-1");
}
