//! Authentication (client certificates, bearer-token table, bootstrap tokens, anonymous),
//! certificates.k8s.io/v1 CertificateSigningRequests with kube-controller-manager's signer and
//! an optional auto-approver, TokenReview and SubjectAccessReview, as kube-apiserver.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{State, now_secs, rfc3339, status};
use crate::pki::Ca;
use crate::tls::Peer;

/// An authenticated user (k8s.io/apiserver's user.Info).
#[derive(Clone, Debug, PartialEq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

/// The signers the double's "kube-controller-manager" signs for.
pub const CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";

pub(super) struct AuthState {
    pub tokens: HashMap<String, UserInfo>,
    /// Bootstrap tokens: id -> secret.
    pub bootstrap: HashMap<String, String>,
    pub auto_approve: BTreeSet<String>,
    /// Set by the test: overrides spec.expirationSeconds and the 1-year default.
    pub lifetime: Option<Duration>,
    pub backdate: Duration,
    pub ca: Option<Arc<Ca>>,
    /// (user, verb, resource, subresource), "*" matches anything.
    pub rules: Vec<[String; 4]>,
    pub allow_all: bool,
    /// Relay WebSocket upgrades of exec/attach/portforward to the kubelet as they are
    /// (true) or refuse them so kubectl falls back to SPDY (false, the default).
    pub websocket_passthrough: bool,
    pub access_reviews: Vec<Value>,
    pub token_reviews: Vec<Value>,
    /// The user of the request being handled.
    pub user: Option<UserInfo>,
}

impl AuthState {
    pub fn new() -> AuthState {
        AuthState {
            tokens: HashMap::new(),
            bootstrap: HashMap::new(),
            auto_approve: BTreeSet::new(),
            lifetime: None,
            // kube-controller-manager's signer: Backdate 5 minutes.
            backdate: Duration::from_secs(300),
            ca: None,
            rules: Vec::new(),
            allow_all: false,
            websocket_passthrough: false,
            access_reviews: Vec::new(),
            token_reviews: Vec::new(),
            user: None,
        }
    }
}

const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub fn base64_encode(data: &[u8]) -> String {
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for b in s.bytes().filter(|b| !b.is_ascii_whitespace() && *b != b'=') {
        let v = B64.iter().position(|x| *x == b)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

fn with_authenticated(mut groups: Vec<String>) -> Vec<String> {
    if !groups.iter().any(|g| g == "system:authenticated") {
        groups.push("system:authenticated".into());
    }
    groups
}

impl State {
    /// kube-apiserver's union authenticator, in its order: x509 client certificate, then the
    /// bearer token (static token table, bootstrap tokens), then anonymous if allowed.
    pub(super) fn authenticate(
        &self,
        peer: &Peer,
        header: &str,
        anonymous: bool,
    ) -> Option<UserInfo> {
        if let Peer::Cert { cn, orgs } = peer {
            return Some(UserInfo {
                name: cn.clone(),
                uid: String::new(),
                groups: with_authenticated(orgs.clone()),
            });
        }
        if let Some(tok) = header.strip_prefix("Bearer ") {
            return self.token_user(tok.trim());
        }
        if header.is_empty() && anonymous {
            return Some(UserInfo {
                name: "system:anonymous".into(),
                uid: String::new(),
                groups: vec!["system:unauthenticated".into()],
            });
        }
        None
    }

    /// A token's user: the table, or a bootstrap token `<id>.<secret>` (id [a-z0-9]{6},
    /// secret [a-z0-9]{16}) -> `system:bootstrap:<id>`, groups system:bootstrappers (the
    /// bootstrap token authenticator; kubeadm's tokens add
    /// `system:bootstrappers:kubeadm:default-node-token` through auth-extra-groups).
    pub(super) fn token_user(&self, tok: &str) -> Option<UserInfo> {
        if let Some(u) = self.auth.tokens.get(tok) {
            return Some(u.clone());
        }
        let (id, secret) = tok.split_once('.')?;
        let ok = |s: &str, n: usize| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        if !ok(id, 6) || !ok(secret, 16) || self.auth.bootstrap.get(id)? != secret {
            return None;
        }
        Some(UserInfo {
            name: format!("system:bootstrap:{id}"),
            uid: String::new(),
            groups: with_authenticated(vec!["system:bootstrappers".into()]),
        })
    }

    /// Create: the server fills spec.username/uid/groups from the requester (the CSR
    /// strategy's PrepareForCreate) and clears status; validation of the required fields.
    pub(super) fn prepare_csr(&self, body: &mut Value) -> Result<(), (u16, Value)> {
        let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
        let invalid = |field: &str, why: &str| {
            status(
                422,
                "Invalid",
                &format!(
                    "CertificateSigningRequest.certificates.k8s.io \"{name}\" is invalid: {field}: {why}"
                ),
            )
        };
        let req = body["spec"]["request"].as_str().unwrap_or("");
        let pem = base64_decode(req).unwrap_or_default();
        if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE REQUEST-----") {
            return Err(invalid(
                "spec.request",
                "Invalid value: []byte{...}: PEM block type must be CERTIFICATE REQUEST",
            ));
        }
        if body["spec"]["signerName"].as_str().unwrap_or("").is_empty() {
            return Err(invalid("spec.signerName", "Required value"));
        }
        if body["spec"]["usages"]
            .as_array()
            .is_none_or(|u| u.is_empty())
        {
            return Err(invalid("spec.usages", "Required value"));
        }
        if let Some(s) = body["spec"]["expirationSeconds"].as_i64() {
            if s < 600 {
                return Err(invalid(
                    "spec.expirationSeconds",
                    &format!(
                        "Invalid value: {s}: may not specify a duration less than 600 seconds (10 minutes)"
                    ),
                ));
            }
        }
        let user = self.auth.user.clone().unwrap_or(UserInfo {
            name: String::new(),
            uid: String::new(),
            groups: vec![],
        });
        body["spec"]["username"] = json!(user.name);
        body["spec"]["groups"] = json!(user.groups);
        if user.uid.is_empty() {
            if let Some(m) = body["spec"].as_object_mut() {
                m.remove("uid");
            }
        } else {
            body["spec"]["uid"] = json!(user.uid);
        }
        body["status"] = json!({});
        Ok(())
    }

    /// After a CSR write: the auto-approver (csrapproving) and the signer (csrsigning).
    pub(super) fn csr_controllers(&mut self, key: &str) {
        let Some(csr) = self.objects.get(key).cloned() else {
            return;
        };
        let signer = csr["spec"]["signerName"].as_str().unwrap_or("").to_string();
        let conds = csr["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if conds.is_empty() && self.auth.auto_approve.contains(&signer) {
            let mut c = csr.clone();
            c["status"]["conditions"] = json!([condition(
                "Approved",
                "AutoApproved",
                if signer == KUBELET_SERVING {
                    "Auto approving kubelet serving certificate after SubjectAccessReview."
                } else {
                    "Auto approving kubelet client certificate after SubjectAccessReview."
                }
            )]);
            self.write(key, c);
        }
        let Some(csr) = self.objects.get(key).cloned() else {
            return;
        };
        let conds = csr["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let has_now = |t: &str| conds.iter().any(|c| c["type"] == t);
        if !has_now("Approved") || has_now("Denied") || has_now("Failed") {
            return;
        }
        if csr["status"]["certificate"]
            .as_str()
            .is_some_and(|c| !c.is_empty())
        {
            return;
        }
        if signer != CLIENT_KUBELET && signer != KUBELET_SERVING {
            return;
        }
        let mut c = csr.clone();
        match validate_kubelet_csr(&csr).and_then(|()| self.sign(&csr)) {
            Ok(pem) => c["status"]["certificate"] = json!(base64_encode(pem.as_bytes())),
            Err(e) => {
                let mut cs = conds.clone();
                cs.push(condition("Failed", "SignerValidationFailure", &e));
                c["status"]["conditions"] = json!(cs);
            }
        }
        self.write(key, c);
    }

    /// kube-controller-manager's signer: TTL = min(expirationSeconds, 1 year) (or the test's),
    /// NotBefore = now - backdate, NotAfter = now + TTL for TTLs under 8 h, else now + TTL -
    /// backdate (PermissiveSigningPolicy).
    fn sign(&mut self, csr: &Value) -> Result<String, String> {
        let pem = base64_decode(csr["spec"]["request"].as_str().unwrap_or(""))
            .ok_or("spec.request is not base64")?;
        let usages: Vec<String> = csr["spec"]["usages"]
            .as_array()
            .map(|u| {
                u.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let year = 365 * 86400;
        let ttl = match self.auth.lifetime {
            Some(d) => d.as_secs() as i64,
            None => csr["spec"]["expirationSeconds"]
                .as_i64()
                .map_or(year, |s| s.min(year)),
        };
        let backdate = self.auth.backdate.as_secs() as i64;
        let now = now_secs();
        let not_after = if ttl < 8 * 3600 {
            now + ttl
        } else {
            now + ttl - backdate
        };
        let ca = self.ca();
        ca.sign_csr(&pem, &usages, now - backdate, not_after)
    }

    pub(super) fn ca(&mut self) -> Arc<Ca> {
        self.auth
            .ca
            .get_or_insert_with(|| Arc::new(Ca::new("kubernetes")))
            .clone()
    }

    /// PUT .../certificatesigningrequests/NAME/approval: only status.conditions are taken;
    /// Approved and Denied exclude each other; timestamps filled in.
    pub(super) fn csr_approval(&mut self, key: &str, name: &str, body: &Value) -> (u16, Value) {
        let Some(cur) = self.objects.get(key).cloned() else {
            return super::not_found("certificatesigningrequests.certificates.k8s.io", name);
        };
        if let Some(rv) = body["metadata"]["resourceVersion"]
            .as_str()
            .filter(|r| !r.is_empty())
        {
            if cur["metadata"]["resourceVersion"].as_str() != Some(rv) {
                return super::conflict(
                    "certificatesigningrequests.certificates.k8s.io",
                    name,
                    super::STALE,
                );
            }
        }
        let mut conds = body["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let has = |t: &str| conds.iter().any(|c| c["type"] == t);
        if has("Approved") && has("Denied") {
            return status(
                422,
                "Invalid",
                &format!(
                    "CertificateSigningRequest.certificates.k8s.io \"{name}\" is invalid: status.conditions[1].type: Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive"
                ),
            );
        }
        let now = rfc3339(now_secs());
        for c in &mut conds {
            for k in ["lastUpdateTime", "lastTransitionTime"] {
                if c[k].as_str().is_none_or(str::is_empty) {
                    c[k] = json!(now);
                }
            }
            if c["status"].as_str().is_none_or(str::is_empty) {
                c["status"] = json!("True");
            }
        }
        let mut new = cur.clone();
        new["status"]["conditions"] = json!(conds);
        let out = self.write(key, new);
        self.csr_controllers(key);
        (200, self.objects.get(key).cloned().unwrap_or(out))
    }

    /// POST /apis/authentication.k8s.io/v1/tokenreviews and
    /// /apis/authorization.k8s.io/v1/subjectaccessreviews.
    pub(super) fn reviews(
        &mut self,
        method: &str,
        path: &str,
        body: &Value,
    ) -> Option<(u16, Value)> {
        let path = path.trim_end_matches('/');
        let kind = match path {
            "/apis/authentication.k8s.io/v1/tokenreviews" => "TokenReview",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews" => "SubjectAccessReview",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews" => "SelfSubjectReview",
            _ => return None,
        };
        if method != "POST" {
            return Some(status(
                405,
                "MethodNotAllowed",
                &format!(
                    "the server does not allow this method on the requested resource ({method} {path})"
                ),
            ));
        }
        let mut out = body.clone();
        out["kind"] = json!(kind);
        out["apiVersion"] = json!(if kind != "SubjectAccessReview" {
            "authentication.k8s.io/v1"
        } else {
            "authorization.k8s.io/v1"
        });
        if out["metadata"].is_null() {
            out["metadata"] = json!({});
        }
        out["metadata"]["creationTimestamp"] = Value::Null;
        if kind == "SelfSubjectReview" {
            // `kubectl auth whoami`: the requester as authenticated.
            let u = self.auth.user.clone();
            let mut info = json!({});
            if let Some(u) = u {
                info = json!({"username": u.name, "groups": u.groups});
                if !u.uid.is_empty() {
                    info["uid"] = json!(u.uid);
                }
            }
            out["status"] = json!({"userInfo": info});
        } else if kind == "TokenReview" {
            let tok = body["spec"]["token"].as_str().unwrap_or("");
            let audiences = match body["spec"]["audiences"].as_array() {
                Some(a) if !a.is_empty() => json!(a),
                _ => json!(["https://kubernetes.default.svc.cluster.local"]),
            };
            out["status"] = match self.token_user(tok) {
                Some(u) => {
                    let mut user = json!({"username": u.name, "groups": u.groups});
                    if !u.uid.is_empty() {
                        user["uid"] = json!(u.uid);
                    }
                    json!({"authenticated": true, "user": user, "audiences": audiences})
                }
                None => json!({"user": {}}),
            };
            self.auth.token_reviews.push(body.clone());
        } else {
            out["status"] = self.access_review(&body["spec"]);
            self.auth.access_reviews.push(body.clone());
        }
        Some((201, out))
    }

    fn access_review(&self, spec: &Value) -> Value {
        let user = spec["user"].as_str().unwrap_or("");
        let groups: Vec<&str> = spec["groups"]
            .as_array()
            .map(|g| g.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        // kube-apiserver's privileged-group authorizer runs before RBAC.
        if groups.contains(&"system:masters") {
            return json!({"allowed": true});
        }
        if self.auth.allow_all {
            return json!({"allowed": true, "reason": "allowed by the test double's allow-all switch"});
        }
        let (verb, resource, sub) = match spec.get("resourceAttributes") {
            Some(r) => (
                r["verb"].as_str().unwrap_or(""),
                r["resource"].as_str().unwrap_or(""),
                r["subresource"].as_str().unwrap_or(""),
            ),
            None => (
                spec["nonResourceAttributes"]["verb"].as_str().unwrap_or(""),
                "",
                "",
            ),
        };
        let m = |rule: &str, v: &str| rule == "*" || rule == v;
        let hit = self.auth.rules.iter().any(|[u, v, r, s]| {
            (m(u, user) || groups.contains(&u.as_str()))
                && m(v, verb)
                && m(r, resource)
                && m(s, sub)
        });
        if hit {
            json!({"allowed": true, "reason": format!(
                "RBAC: allowed by ClusterRoleBinding \"nanolet-test\" of ClusterRole \"nanolet-test\" to User \"{user}\"")})
        } else {
            json!({"allowed": false})
        }
    }
}

/// The PEM request of a CSR object as DER.
fn request_der(csr: &Value) -> Option<Vec<u8>> {
    let pem = base64_decode(csr["spec"]["request"].as_str()?)?;
    let pem = String::from_utf8(pem).ok()?;
    let body = pem
        .split("-----BEGIN CERTIFICATE REQUEST-----")
        .nth(1)?
        .split("-----END CERTIFICATE REQUEST-----")
        .next()?;
    base64_decode(body)
}

/// kube-controller-manager's signer checks for its two kubelet signers
/// (k8s.io/kubernetes pkg/apis/certificates ValidateKubeletClientCSR /
/// ValidateKubeletServingCSR): a failure is a Failed condition, reason
/// SignerValidationFailure, with these messages.
fn validate_kubelet_csr(csr: &Value) -> Result<(), String> {
    let signer = csr["spec"]["signerName"].as_str().unwrap_or("");
    let info = request_der(csr)
        .and_then(|d| crate::tls::csr_info(&d))
        .ok_or("PEM block type must be CERTIFICATE REQUEST")?;
    let usages: BTreeSet<String> = csr["spec"]["usages"]
        .as_array()
        .map(|u| {
            u.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let set = |xs: &[&str]| {
        xs.iter()
            .map(|x| x.to_string())
            .collect::<BTreeSet<String>>()
    };
    if info.orgs != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    let node_cn = info.cn.starts_with("system:node:");
    if signer == CLIENT_KUBELET {
        let e = if !info.dns.is_empty() {
            "DNS subjectAltNames are not allowed"
        } else if !info.emails.is_empty() {
            "Email subjectAltNames are not allowed"
        } else if !info.ips.is_empty() {
            "IP subjectAltNames are not allowed"
        } else if !info.uris.is_empty() {
            "URI subjectAltNames are not allowed"
        } else if !node_cn {
            "subject common name does not begin with system:node:"
        } else if usages != set(&["digital signature", "client auth"])
            && usages != set(&["digital signature", "key encipherment", "client auth"])
        {
            "usages did not match [client auth digital signature key encipherment]"
        } else {
            return Ok(());
        };
        return Err(e.into());
    }
    let e = if info.dns.is_empty() && info.ips.is_empty() {
        "DNS or IP subjectAltName is required"
    } else if !info.emails.is_empty() {
        "Email subjectAltNames are not allowed"
    } else if !info.uris.is_empty() {
        "URI subjectAltNames are not allowed"
    } else if usages != set(&["digital signature", "server auth"])
        && usages != set(&["digital signature", "key encipherment", "server auth"])
    {
        "usages did not match [digital signature key encipherment server auth]"
    } else if !node_cn {
        "subject common name does not begin with system:node:"
    } else {
        return Ok(());
    };
    Err(e.into())
}

/// A CSR condition as kubectl and the approver write it.
pub fn condition(kind: &str, reason: &str, message: &str) -> Value {
    let now = rfc3339(now_secs());
    json!({"type": kind, "status": "True", "reason": reason, "message": message,
           "lastUpdateTime": now, "lastTransitionTime": now})
}

/// printCertificateSigningRequest: NAME AGE SIGNERNAME REQUESTOR REQUESTEDDURATION CONDITION.
pub(super) fn csr_row(o: &Value) -> (Vec<Value>, Vec<Value>) {
    let col = |n: &str, f: &str| json!({"name": n, "type": "string", "format": f, "priority": 0});
    let cols = vec![
        col("Name", "name"),
        col("Age", ""),
        col("SignerName", ""),
        col("Requestor", ""),
        col("RequestedDuration", ""),
        col("Condition", ""),
    ];
    let conds = o["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let has = |t: &str| conds.iter().any(|c| c["type"] == t);
    let mut st = if has("Denied") {
        "Denied"
    } else if has("Approved") {
        "Approved"
    } else {
        "Pending"
    }
    .to_string();
    if has("Failed") {
        st.push_str(",Failed");
    }
    if o["status"]["certificate"]
        .as_str()
        .is_some_and(|c| !c.is_empty())
    {
        st.push_str(",Issued");
    }
    let signer = o["spec"]["signerName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or("<none>");
    let dur = o["spec"]["expirationSeconds"]
        .as_i64()
        .map_or("<none>".to_string(), super::human_duration);
    let cells = vec![
        o["metadata"]["name"].clone(),
        json!(super::age(o)),
        json!(signer),
        json!(o["spec"]["username"].as_str().unwrap_or("")),
        json!(dur),
        json!(st),
    ];
    (cols, cells)
}

/// Protobuf wire format: (field, wire type, varint value, bytes) per field of a message.
pub(super) fn pb_fields(mut b: &[u8]) -> Option<Vec<(u64, u64, &[u8])>> {
    fn varint(b: &mut &[u8]) -> Option<u64> {
        let mut r = 0u64;
        for s in (0..64).step_by(7) {
            let (x, rest) = b.split_first()?;
            *b = rest;
            r |= u64::from(x & 0x7f) << s;
            if x & 0x80 == 0 {
                return Some(r);
            }
        }
        None
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b)?;
        let (field, wire) = (key >> 3, key & 7);
        match wire {
            0 => out.push((field, varint(&mut b)?, &b[..0])),
            2 => {
                let n = usize::try_from(varint(&mut b)?).ok()?;
                let (v, rest) = (b.get(..n)?, b.get(n..)?);
                b = rest;
                out.push((field, 0, v));
            }
            1 => b = b.get(8..)?,
            5 => b = b.get(4..)?,
            _ => return None,
        }
    }
    Some(out)
}

pub(super) fn pb_str(v: &[u8]) -> Value {
    json!(String::from_utf8_lossy(v))
}

/// A CertificateSigningRequest sent as `application/vnd.kubernetes.protobuf` (what
/// kubectl's clientset sends for `certificate approve|deny`), as JSON with the fields the
/// approval and status subresources take: metadata.name/resourceVersion/uid and
/// status.conditions (k8s.io/api certificates/v1 generated.proto field numbers).
pub(super) fn csr_from_protobuf(raw: &[u8]) -> Option<Value> {
    let unknown = raw.strip_prefix(b"k8s\0")?;
    let obj = pb_fields(unknown)?.into_iter().find(|f| f.0 == 2)?.2;
    let mut out = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
                         "metadata": {}, "status": {}});
    let time = |v: &[u8]| {
        let secs = pb_fields(v)?.into_iter().find(|f| f.0 == 1)?.1 as i64;
        Some(json!(rfc3339(secs)))
    };
    for (f, _, v) in pb_fields(obj)? {
        match f {
            1 => {
                for (mf, _, mv) in pb_fields(v)? {
                    match mf {
                        1 => out["metadata"]["name"] = pb_str(mv),
                        5 => out["metadata"]["uid"] = pb_str(mv),
                        6 => out["metadata"]["resourceVersion"] = pb_str(mv),
                        _ => {}
                    }
                }
            }
            3 => {
                let mut conds = Vec::new();
                for (sf, _, sv) in pb_fields(v)? {
                    if sf != 1 {
                        continue;
                    }
                    let mut c = json!({});
                    for (cf, _, cv) in pb_fields(sv)? {
                        match cf {
                            1 => c["type"] = pb_str(cv),
                            2 => c["reason"] = pb_str(cv),
                            3 => c["message"] = pb_str(cv),
                            4 => c["lastUpdateTime"] = time(cv).unwrap_or(Value::Null),
                            5 => c["lastTransitionTime"] = time(cv).unwrap_or(Value::Null),
                            6 => c["status"] = pb_str(cv),
                            _ => {}
                        }
                    }
                    conds.push(c);
                }
                out["status"]["conditions"] = json!(conds);
            }
            _ => {}
        }
    }
    Some(out)
}
