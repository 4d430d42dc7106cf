//! The double's ConfigMaps, Secrets, ServiceAccounts and the TokenRequest subresource
//! (`POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token`), with kube-apiserver's
//! semantics where nanolet or kubectl can see them:
//! - ConfigMaps, Secrets and ServiceAccounts are ordinary stored objects: get, list, watch
//!   (by name with `fieldSelector=metadata.name=<name>`, resourceVersion, 410, bookmarks),
//!   create, update, patch, delete, as the double's other resources.
//! - A Secret's `stringData` is merged into `data` (base64) on create and update and never
//!   stored; `type` defaults to `Opaque` (the registry's strategy).
//! - TokenRequest: the ServiceAccount must exist (404 `serviceaccounts "x" not found`);
//!   `expirationSeconds` defaults to 3600 and must be at least 600 (422, the validation text);
//!   a `boundObjectRef` of kind Pod must name an existing pod with that UID (404 / 409 as
//!   kube-apiserver); `audiences` default to the API server's
//!   (`https://kubernetes.default.svc.cluster.local`). The answer echoes the spec and gives
//!   `status.token` (a JWT-shaped token with the claims kube-apiserver puts in, unsigned) and
//!   `status.expirationTimestamp`. [`FakeApiServer::issued_tokens`] lists what was issued.
//! - The controller-manager's parts the kubelet relies on are explicit calls here:
//!   [`FakeApiServer::create_service_account`] (the ServiceAccount controller's `default`) and
//!   [`FakeApiServer::publish_root_ca`] (the root-ca-cert-publisher's `kube-root-ca.crt`).

use serde_json::{Value, json};

use super::csr::{pb_fields, pb_str};
use super::{FakeApiServer, Res, State, base64_encode, now_secs, rfc3339, status, status_for};

/// kube-apiserver's default `--api-audiences` (its service account issuer).
pub const DEFAULT_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// What the double records of TokenRequests, and its knobs.
#[derive(Debug, Default)]
pub(super) struct TokenState {
    /// Every TokenRequest answered (the response bodies, tokens included).
    pub(super) issued: Vec<Value>,
    /// Grant this lifetime instead of the one asked for (tests of the refresh rule).
    pub(super) lifetime_override: Option<i64>,
}

/// The resources of this file: kind, apiVersion, namespaced.
pub(super) fn resource_info(prefix: &str, resource: &str) -> Option<(&'static str, &'static str, bool)> {
    match (prefix, resource) {
        ("/api/v1", "configmaps") => Some(("ConfigMap", "v1", true)),
        ("/api/v1", "secrets") => Some(("Secret", "v1", true)),
        ("/api/v1", "serviceaccounts") => Some(("ServiceAccount", "v1", true)),
        // Stored and watched like the others (list, watch, create, delete); no discovery entry.
        ("/apis/node.k8s.io/v1", "runtimeclasses") => {
            Some(("RuntimeClass", "node.k8s.io/v1", false))
        }
        _ => None,
    }
}

/// The discovery entries of this file's resources (`/api/v1`).
pub(super) fn discovery(verbs: &Value) -> Vec<Value> {
    vec![
        json!({"name": "configmaps", "singularName": "configmap", "namespaced": true,
               "kind": "ConfigMap", "verbs": verbs, "shortNames": ["cm"]}),
        json!({"name": "secrets", "singularName": "secret", "namespaced": true,
               "kind": "Secret", "verbs": verbs}),
        json!({"name": "serviceaccounts", "singularName": "serviceaccount", "namespaced": true,
               "kind": "ServiceAccount", "verbs": verbs, "shortNames": ["sa"]}),
        json!({"name": "serviceaccounts/token", "singularName": "", "namespaced": true,
               "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest",
               "verbs": ["create"]}),
    ]
}

/// The Secret strategy on create and update: `stringData` into `data`, `type` defaulted.
pub(super) fn prepare_for_write(resource: &str, obj: &mut Value) {
    if resource != "secrets" {
        return;
    }
    if let Some(sd) = obj
        .as_object_mut()
        .and_then(|o| o.remove("stringData"))
        .and_then(|v| v.as_object().cloned())
    {
        for (k, v) in sd {
            obj["data"][k] = json!(base64_encode(v.as_str().unwrap_or_default().as_bytes()));
        }
    }
    if obj["type"].as_str().unwrap_or_default().is_empty() {
        obj["type"] = json!("Opaque");
    }
}

fn b64url(b: &[u8]) -> String {
    base64_encode(b)
        .trim_end_matches('=')
        .replace('+', "-")
        .replace('/', "_")
}

impl State {
    /// `POST .../serviceaccounts/<name>/token`; None when `res` is not that.
    pub(super) fn token_request(&mut self, method: &str, res: &Res, body: &Value) -> Option<(u16, Value)> {
        if res.resource != "serviceaccounts" || res.sub.as_deref() != Some("token") {
            return None;
        }
        if method != "POST" {
            return Some(status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource"));
        }
        let ns = res.ns.clone().unwrap_or_default();
        let sa = res.name.clone().unwrap_or_default();
        let Some(sa_obj) = self.objects.get(&res.key(&sa)).cloned() else {
            return Some(status_for(404, "NotFound", &format!("serviceaccounts \"{sa}\" not found"), "serviceaccounts", &sa));
        };
        let spec = &body["spec"];
        let asked = spec["expirationSeconds"].as_i64().unwrap_or(3600);
        if asked < 600 {
            return Some(status(
                422,
                "Invalid",
                &format!("TokenRequest.authentication.k8s.io \"{sa}\" is invalid: spec.expirationSeconds: Invalid value: {asked}: may not specify a duration less than 10 minutes"),
            ));
        }
        let bound = &spec["boundObjectRef"];
        let mut pod_claim = Value::Null;
        if !bound.is_null() {
            let name = bound["name"].as_str().unwrap_or_default();
            if bound["kind"].as_str() != Some("Pod") {
                return Some(status(400, "BadRequest", &format!("cannot bind token to object of type {}", bound["kind"].as_str().unwrap_or_default())));
            }
            let Some(pod) = self.objects.get(&format!("/api/v1/namespaces/{ns}/pods/{name}")) else {
                return Some(status_for(404, "NotFound", &format!("pods \"{name}\" not found"), "pods", name));
            };
            let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
            if bound["uid"].as_str().is_some_and(|u| !u.is_empty() && u != uid) {
                return Some(status_for(409, "Conflict", &format!("the UID in the bound object reference ({}) does not match the UID in record. The object might have been deleted and then recreated", bound["uid"].as_str().unwrap_or_default()), "pods", name));
            }
            pod_claim = json!({"name": name, "uid": uid});
        }
        let audiences = match spec["audiences"].as_array() {
            Some(a) if !a.is_empty() => Value::Array(a.clone()),
            _ => json!([DEFAULT_AUDIENCE]),
        };
        let granted = self.tokens.lifetime_override.unwrap_or(asked);
        let now = now_secs();
        self.seq += 1;
        let claims = json!({
            "aud": audiences, "exp": now + granted, "iat": now, "nbf": now,
            "iss": DEFAULT_AUDIENCE, "jti": format!("jti-{}", self.seq),
            "sub": format!("system:serviceaccount:{ns}:{sa}"),
            "kubernetes.io": {"namespace": ns, "pod": pod_claim,
                "serviceaccount": {"name": sa, "uid": sa_obj["metadata"]["uid"]}},
        });
        let token = format!(
            "{}.{}.{}",
            b64url(br#"{"alg":"RS256","kid":"double"}"#),
            b64url(claims.to_string().as_bytes()),
            b64url(format!("sig-{}", self.seq).as_bytes())
        );
        let mut spec_out = spec.clone();
        spec_out["audiences"] = audiences;
        spec_out["expirationSeconds"] = json!(granted);
        let out = json!({
            "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": sa, "namespace": ns, "creationTimestamp": null},
            "spec": spec_out,
            "status": {"token": token, "expirationTimestamp": rfc3339(now + granted)},
        });
        self.tokens.issued.push(out.clone());
        Some((201, out))
    }
}

impl FakeApiServer {
    /// The ServiceAccount controller's work: `ns/name` exists (idempotent).
    pub fn create_service_account(&self, ns: &str, name: &str) -> Value {
        let mut st = self.st();
        st.ensure_namespace(ns);
        let key = format!("/api/v1/namespaces/{ns}/serviceaccounts/{name}");
        if let Some(o) = st.objects.get(&key) {
            return o.clone();
        }
        st.create(
            &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
            json!({"metadata": {"name": name, "namespace": ns}}),
            "serviceaccounts",
        )
        .1
    }

    /// The root-ca-cert-publisher's work: the `kube-root-ca.crt` ConfigMap of `ns` with key
    /// `ca.crt` (the double's CA with `start_tls`, else a placeholder PEM). Returns the PEM.
    pub fn publish_root_ca(&self, ns: &str) -> String {
        let pem = match &self.tls {
            Some(_) => self.ca().pem(),
            None => "-----BEGIN CERTIFICATE-----\nZG91YmxlLWNh\n-----END CERTIFICATE-----\n".to_string(),
        };
        let mut st = self.st();
        st.ensure_namespace(ns);
        let _ = st.create(
            &format!("/api/v1/namespaces/{ns}/configmaps"),
            json!({"metadata": {"name": "kube-root-ca.crt", "namespace": ns,
                   "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}},
                   "data": {"ca.crt": pem}}),
            "configmaps",
        );
        pem
    }

    /// The TokenRequests answered so far (response bodies, tokens included).
    pub fn issued_tokens(&self) -> Vec<Value> {
        self.st().tokens.issued.clone()
    }

    /// Grant tokens of `secs` seconds whatever is asked (None: as asked), to see refreshes.
    pub fn set_token_lifetime(&self, secs: Option<i64>) {
        self.st().tokens.lifetime_override = secs;
    }
}

/// `ObjectMeta` fields a create sends (k8s.io/apimachinery generated.proto: name 1,
/// generateName 2, namespace 3, labels 11, annotations 12).
fn meta_from_protobuf(b: &[u8]) -> Option<Value> {
    let mut m = json!({});
    for (f, _, v) in pb_fields(b)? {
        match f {
            1 => m["name"] = pb_str(v),
            2 => m["generateName"] = pb_str(v),
            3 => m["namespace"] = pb_str(v),
            11 | 12 => {
                let (k, val) = map_entry(v)?;
                let field = if f == 11 { "labels" } else { "annotations" };
                m[field][k] = json!(String::from_utf8_lossy(&val));
            }
            _ => {}
        }
    }
    Some(m)
}

/// A protobuf map entry: key 1, value 2.
fn map_entry(b: &[u8]) -> Option<(String, Vec<u8>)> {
    let mut k = String::new();
    let mut val = Vec::new();
    for (f, _, v) in pb_fields(b)? {
        match f {
            1 => k = String::from_utf8_lossy(v).into_owned(),
            2 => val = v.to_vec(),
            _ => {}
        }
    }
    Some((k, val))
}

/// ConfigMaps, Secrets, ServiceAccounts and TokenRequests sent as
/// `application/vnd.kubernetes.protobuf` (kubectl's typed clientset: `create configmap`,
/// `create secret`, `create serviceaccount`, `create token`), as JSON (k8s.io/api core/v1 and
/// authentication/v1 generated.proto field numbers). None for other paths.
pub(super) fn object_from_protobuf(path: &str, raw: &[u8]) -> Option<Value> {
    if path.ends_with("/services") {
        let obj = pb_fields(raw.strip_prefix(b"k8s\0")?)?.into_iter().find(|f| f.0 == 2)?.2;
        return super::services::from_protobuf(obj, meta_from_protobuf);
    }
    let resource = if path.ends_with("/serviceaccounts") || path.ends_with("/configmaps") || path.ends_with("/secrets") {
        path.rsplit('/').next()?
    } else if path.contains("/serviceaccounts/") && path.ends_with("/token") {
        "token"
    } else {
        return None;
    };
    let unknown = raw.strip_prefix(b"k8s\0")?;
    let obj = pb_fields(unknown)?.into_iter().find(|f| f.0 == 2)?.2;
    let mut out = json!({});
    for (f, _, v) in pb_fields(obj)? {
        match (resource, f) {
            (_, 1) => out["metadata"] = meta_from_protobuf(v)?,
            // ConfigMap: data 2 (map<string,string>), binaryData 3 (map<string,bytes>).
            ("configmaps", 2) => {
                let (k, val) = map_entry(v)?;
                out["data"][k] = json!(String::from_utf8_lossy(&val));
            }
            ("configmaps", 3) => {
                let (k, val) = map_entry(v)?;
                out["binaryData"][k] = json!(base64_encode(&val));
            }
            // Secret: data 2 (map<string,bytes>), type 3, stringData 4.
            ("secrets", 2) => {
                let (k, val) = map_entry(v)?;
                out["data"][k] = json!(base64_encode(&val));
            }
            ("secrets", 3) => out["type"] = pb_str(v),
            ("secrets", 4) => {
                let (k, val) = map_entry(v)?;
                out["stringData"][k] = json!(String::from_utf8_lossy(&val));
            }
            // TokenRequestSpec: audiences 1, boundObjectRef 3 (kind 1, apiVersion 2, name 3,
            // uid 4), expirationSeconds 4.
            ("token", 2) => {
                let mut spec = json!({"audiences": []});
                for (sf, n, sv) in pb_fields(v)? {
                    match sf {
                        1 => {
                            if let Some(a) = spec["audiences"].as_array_mut() {
                                a.push(pb_str(sv));
                            }
                        }
                        3 => {
                            let mut r = json!({});
                            for (rf, _, rv) in pb_fields(sv)? {
                                let k = match rf {
                                    1 => "kind",
                                    2 => "apiVersion",
                                    3 => "name",
                                    4 => "uid",
                                    _ => continue,
                                };
                                r[k] = pb_str(rv);
                            }
                            spec["boundObjectRef"] = r;
                        }
                        4 => spec["expirationSeconds"] = json!(n),
                        _ => {}
                    }
                }
                out["spec"] = spec;
            }
            _ => {}
        }
    }
    Some(out)
}
