//! The API objects of API pods (the kubelet's `pkg/kubelet/{configmap,secret,token}`):
//! ConfigMaps and Secrets through per-object watches by name ([`watch`]), ServiceAccount tokens
//! through TokenRequest ([`token`]). Static pods never use this: they keep the local store.
//!
//! The kubelet's pod manager registers every pod with the ConfigMap and Secret managers when it
//! is added or updated and unregisters it when it is gone; here the pod worker does the same
//! ([`ApiObjects::register_pod`] before each sync, [`ApiObjects::unregister_pod`] when the pod
//! is cleaned up). The reflector of an object lives while some pod refers to it.
//!
//! The API client may appear after this is built (TLS bootstrap): [`ApiObjects::attach_client`].
//!
//! Offline through a reboot ([`checkpoint`]): [`ApiObjects::with_checkpoint`] restores the
//! checkpointed objects (answered while the API server does not answer) and tokens (used while
//! no fresh one can be requested), and [`ApiObjects::spawn_checkpoint_writer`] keeps the file
//! current.

pub mod checkpoint;
pub mod services;
pub mod token;
pub mod watch;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;
use tracing::info;

use crate::api::Pod;
use crate::api::env::{
    ConfigMapsAndSecrets, KubeletMessage, LookupError, ObjectData, ServiceAccountTokens,
    TokenRequestSpec, Unavailable,
};
use crate::apiclient::client::ApiClient;

use checkpoint::{CheckpointSettings, ObjectCheckpoint};
use watch::{FIRST_LIST_WAIT, Journal, Kind, Manager};

/// Why an API object or token is not available (texts as the kubelet's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    /// `apierrors.NewNotFound(corev1.Resource("configmap"), name)`.
    #[error("{kind} \"{name}\" not found")]
    NotFound { kind: &'static str, name: String },
    /// The first list did not answer (API server unreachable, forbidden, ...).
    #[error("{kind} \"{namespace}/{name}\" not available: {reason}")]
    Unavailable {
        kind: &'static str,
        namespace: String,
        name: String,
        reason: String,
    },
    /// makeEnvironmentVariables: `couldn't find key %v in ConfigMap %v/%v`.
    #[error("couldn't find key {key} in {kind} {namespace}/{name}")]
    NoKey {
        kind: &'static str,
        namespace: String,
        name: String,
        key: String,
    },
    /// A value of the Secret's `data` or the ConfigMap's `binaryData` is not base64.
    #[error("{kind} \"{namespace}/{name}\": key {key} is not valid base64")]
    Base64 {
        kind: &'static str,
        namespace: String,
        name: String,
        key: String,
    },
    /// The token manager's `failed to fetch token: %v`.
    #[error("failed to fetch token for service account \"{service_account}\": {reason}")]
    Token {
        service_account: String,
        reason: String,
    },
}

/// As a lookup error: the kubelet's text alone, or (unreadable object) one `optional` does not
/// skip.
fn kubelet_message(e: ObjectError) -> LookupError {
    match e {
        ObjectError::Unavailable { .. } => Box::new(Unavailable(e.to_string())),
        _ => Box::new(KubeletMessage(e.to_string())),
    }
}

/// The ConfigMaps, Secrets and tokens of API pods.
#[derive(Debug)]
pub struct ApiObjects {
    client: Arc<OnceLock<Arc<ApiClient>>>,
    config_maps: Manager,
    secrets: Manager,
    tokens: token::TokenManager,
    /// pod UID -> (namespace, config maps, secrets) it was registered with.
    pods: Mutex<BTreeMap<String, Refs>>,
    /// How long a lookup waits for an object's first list.
    first_list_wait: std::time::Duration,
    /// The service lister (service-link variables); its Services are checkpointed too.
    services: Arc<services::Services>,
    /// What the offline checkpoint follows.
    journal: Arc<Journal>,
    /// The checkpoint writer and the (journal, services) counts it last wrote for.
    checkpoint: Option<Mutex<(checkpoint::Writer, Option<ChangeCounts>)>>,
}

/// The journal's and the Services' change counts.
type ChangeCounts = (u64, u64);

/// What one pod refers to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refs {
    pub namespace: String,
    pub config_maps: BTreeSet<String>,
    pub secrets: BTreeSet<String>,
}

fn str_at<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The ConfigMaps and Secrets `pod` refers to (upstream `VisitPodConfigmapNames`,
/// `VisitPodSecretNames`: volumes, projected sources, env, envFrom, imagePullSecrets).
pub fn pod_refs(pod: &Pod) -> Refs {
    let mut r = Refs {
        namespace: pod.metadata.namespace.clone(),
        ..Refs::default()
    };
    let arr = |v: Option<&Value>| v.and_then(Value::as_array).cloned().unwrap_or_default();
    for s in arr(pod.spec.extra.get("imagePullSecrets")) {
        if let Some(n) = str_at(&s, "name") {
            r.secrets.insert(n.into());
        }
    }
    for v in arr(pod.spec.extra.get("volumes")) {
        if let Some(n) = v.get("configMap").and_then(|c| str_at(c, "name")) {
            r.config_maps.insert(n.into());
        }
        if let Some(n) = v.get("secret").and_then(|c| str_at(c, "secretName")) {
            r.secrets.insert(n.into());
        }
        for s in arr(v.get("projected").and_then(|p| p.get("sources"))) {
            if let Some(n) = s.get("configMap").and_then(|c| str_at(c, "name")) {
                r.config_maps.insert(n.into());
            }
            if let Some(n) = s.get("secret").and_then(|c| str_at(c, "name")) {
                r.secrets.insert(n.into());
            }
        }
    }
    // podutil.VisitPodConfigmapNames / VisitPodSecretNames visit every container type.
    for c in pod.spec.all_containers() {
        for f in arr(c.extra.get("envFrom")) {
            if let Some(n) = f.get("configMapRef").and_then(|c| str_at(c, "name")) {
                r.config_maps.insert(n.into());
            }
            if let Some(n) = f.get("secretRef").and_then(|c| str_at(c, "name")) {
                r.secrets.insert(n.into());
            }
        }
        for e in &c.env {
            let Some(from) = &e.value_from else { continue };
            if let Some(n) = from.get("configMapKeyRef").and_then(|c| str_at(c, "name")) {
                r.config_maps.insert(n.into());
            }
            if let Some(n) = from.get("secretKeyRef").and_then(|c| str_at(c, "name")) {
                r.secrets.insert(n.into());
            }
        }
    }
    r
}

/// The data of a ConfigMap (`data` as is, `binaryData` base64) or Secret (`data` base64).
fn object_data(kind: Kind, ns: &str, name: &str, o: &Value) -> Result<ObjectData, ObjectError> {
    let mut out = ObjectData::new();
    let decode = |key: &str, v: &str| {
        crate::util::base64::decode(v).map_err(|_| ObjectError::Base64 {
            kind: kind.singular(),
            namespace: ns.to_string(),
            name: name.to_string(),
            key: key.to_string(),
        })
    };
    let map = |k: &str| {
        o.get(k)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    match kind {
        Kind::ConfigMap => {
            for (k, v) in map("data") {
                out.insert(k, v.as_str().unwrap_or_default().as_bytes().to_vec());
            }
            for (k, v) in map("binaryData") {
                let b = decode(&k, v.as_str().unwrap_or_default())?;
                out.insert(k, b);
            }
        }
        Kind::Secret => {
            for (k, v) in map("data") {
                let b = decode(&k, v.as_str().unwrap_or_default())?;
                out.insert(k, b);
            }
        }
    }
    Ok(out)
}

impl ApiObjects {
    pub fn new() -> ApiObjects {
        let client = Arc::new(OnceLock::new());
        let journal = Arc::new(Journal::default());
        ApiObjects {
            config_maps: Manager::new(Kind::ConfigMap, client.clone(), journal.clone()),
            secrets: Manager::new(Kind::Secret, client.clone(), journal.clone()),
            tokens: token::TokenManager::new(client.clone(), journal.clone()),
            client,
            pods: Mutex::new(BTreeMap::new()),
            first_list_wait: FIRST_LIST_WAIT,
            journal,
            checkpoint: None,
            services: Arc::default(),
        }
    }

    /// With the offline checkpoint at `settings.path`: what it holds is restored (Secrets and
    /// tokens only when `settings.secrets`), and [`ApiObjects::write_checkpoint`] keeps it.
    pub fn with_checkpoint(settings: CheckpointSettings) -> ApiObjects {
        let mut o = ApiObjects::new();
        if let Some(cp) = checkpoint::load(&settings) {
            info!(path = %settings.path.display(), config_maps = cp.config_maps.len(),
                secrets = if settings.secrets { cp.secrets.len() } else { 0 },
                tokens = if settings.secrets { cp.tokens.len() } else { 0 },
                services = cp.services.len(), "API objects restored from the checkpoint");
            o.restore(cp, settings.secrets);
        }
        o.checkpoint = Some(Mutex::new((checkpoint::Writer::new(settings), None)));
        o
    }

    fn restore(&self, cp: ObjectCheckpoint, secrets: bool) {
        self.config_maps.seed(cp.config_maps);
        if secrets {
            self.secrets.seed(cp.secrets);
            self.tokens.restore(cp.tokens);
        }
        self.services.restore(cp.services);
    }

    /// The service lister; its reflector starts with [`services::Services::start`].
    pub fn services(&self) -> &Arc<services::Services> {
        &self.services
    }

    /// The checkpoint as things stand: referenced ConfigMaps and Secrets (see
    /// [`Manager::checkpointed`]), the tokens of registered pods (all restored ones until the
    /// API server has answered), Secrets and tokens only with `secrets`.
    pub fn checkpoint_body(&self, node: &str, secrets: bool) -> ObjectCheckpoint {
        let mut cp = ObjectCheckpoint::new(node);
        cp.config_maps = self.config_maps.checkpointed();
        if secrets {
            cp.secrets = self.secrets.checkpointed();
            let live = self.journal.live();
            let pods = self.pods.lock().unwrap_or_else(|p| p.into_inner());
            cp.tokens = self
                .tokens
                .saved()
                .into_iter()
                .filter(|t| !live || pods.contains_key(&t.pod_uid))
                .collect();
        }
        cp.services = self.services.snapshot();
        cp
    }

    /// Writes the checkpoint if anything changed since the last write (the bytes are compared
    /// too). Without a checkpoint: nothing.
    pub fn write_checkpoint(&self) {
        let Some(cp) = &self.checkpoint else { return };
        let mut g = cp.lock().unwrap_or_else(|p| p.into_inner());
        let (writer, seen) = &mut *g;
        let now = (self.journal.changes(), self.services.changes());
        if *seen == Some(now) {
            return;
        }
        let body = self.checkpoint_body(&writer.settings.node, writer.settings.secrets);
        if writer.write(&body) {
            *seen = Some(now);
        }
    }

    /// The checkpoint writer: every [`checkpoint::WRITE_EVERY`], while `self` lives.
    pub fn spawn_checkpoint_writer(self: &Arc<Self>) -> std::io::Result<()> {
        let weak = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("api-objects-checkpoint".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                // The first write a moment after start (root-dir is made by then).
                loop {
                    std::thread::sleep(checkpoint::WRITE_EVERY);
                    let Some(o) = weak.upgrade() else { break };
                    o.write_checkpoint();
                }
            })
            .map(|_| ())
    }

    #[cfg(test)]
    fn without_threads() -> ApiObjects {
        let o = ApiObjects::new();
        ApiObjects {
            config_maps: Manager::without_threads(Kind::ConfigMap, o.journal.clone()),
            secrets: Manager::without_threads(Kind::Secret, o.journal.clone()),
            first_list_wait: std::time::Duration::ZERO,
            ..o
        }
    }

    /// The API client, once it exists (the first one wins; later rotations swap its
    /// credentials in place).
    pub fn attach_client(&self, client: &Arc<ApiClient>) {
        let _ = self.client.set(client.clone());
    }

    /// The pod was added or updated: reference what it refers to now, then drop what it no
    /// longer does (new references first, so a kept object's reflector never restarts).
    pub fn register_pod(&self, pod: &Pod) {
        let refs = pod_refs(pod);
        let mut pods = self.pods.lock().unwrap_or_else(|p| p.into_inner());
        let old = pods.get(&pod.metadata.uid);
        if old == Some(&refs) {
            return;
        }
        for n in &refs.config_maps {
            self.config_maps.add_ref(&refs.namespace, n);
        }
        for n in &refs.secrets {
            self.secrets.add_ref(&refs.namespace, n);
        }
        if let Some(old) = pods.insert(pod.metadata.uid.clone(), refs) {
            self.drop_refs(&old);
        }
    }

    fn drop_refs(&self, r: &Refs) {
        for n in &r.config_maps {
            self.config_maps.del_ref(&r.namespace, n);
        }
        for n in &r.secrets {
            self.secrets.del_ref(&r.namespace, n);
        }
    }

    /// The pod is gone: drop its references and its tokens.
    pub fn unregister_pod(&self, uid: &str) {
        let old = self
            .pods
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uid);
        if let Some(old) = old {
            self.drop_refs(&old);
        }
        self.tokens.delete_pod_tokens(uid);
    }

    /// The referenced ConfigMaps and Secrets with their reference counts.
    #[cfg(test)]
    pub fn referenced(&self) -> (Vec<watch::Referenced>, Vec<watch::Referenced>) {
        (self.config_maps.referenced(), self.secrets.referenced())
    }

    fn data(&self, kind: Kind, ns: &str, name: &str) -> Result<ObjectData, ObjectError> {
        let m = match kind {
            Kind::ConfigMap => &self.config_maps,
            Kind::Secret => &self.secrets,
        };
        let o = m.get(ns, name, self.first_list_wait)?;
        object_data(kind, ns, name, &o)
    }
}

impl Default for ApiObjects {
    fn default() -> Self {
        ApiObjects::new()
    }
}

impl ConfigMapsAndSecrets for ApiObjects {
    fn config_map(&self, namespace: &str, name: &str) -> Result<ObjectData, LookupError> {
        self.data(Kind::ConfigMap, namespace, name)
            .map_err(kubelet_message)
    }

    fn secret(&self, namespace: &str, name: &str) -> Result<ObjectData, LookupError> {
        self.data(Kind::Secret, namespace, name)
            .map_err(kubelet_message)
    }

    fn key(
        &self,
        secret: bool,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Result<Vec<u8>, LookupError> {
        let kind = if secret {
            Kind::Secret
        } else {
            Kind::ConfigMap
        };
        let mut d = self.data(kind, namespace, name).map_err(kubelet_message)?;
        d.remove(key).ok_or_else(|| {
            kubelet_message(ObjectError::NoKey {
                kind: if secret { "Secret" } else { "ConfigMap" },
                namespace: namespace.into(),
                name: name.into(),
                key: key.into(),
            })
        })
    }
}

impl ServiceAccountTokens for ApiObjects {
    fn token(&self, req: &TokenRequestSpec) -> Result<String, LookupError> {
        self.tokens.token(req).map_err(kubelet_message)
    }
}

#[cfg(test)]
mod tests {
    use super::watch::Known;
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, spec: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "kube-system", "uid": uid},
            "spec": spec,
        }))
        .unwrap()
    }

    fn daemonset_pod(uid: &str) -> Pod {
        pod(
            uid,
            json!({
                "imagePullSecrets": [{"name": "regcred"}],
                "containers": [{
                    "name": "c", "image": "i",
                    "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "k"}}},
                            {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "cm1", "key": "k"}}}],
                    "envFrom": [{"configMapRef": {"name": "cm2"}}, {"secretRef": {"name": "s2"}}],
                }],
                "volumes": [
                    {"name": "kube-api-access-x", "projected": {"sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}},
                    {"name": "cfg", "configMap": {"name": "cm3"}},
                    {"name": "sec", "secret": {"secretName": "s3"}},
                ],
            }),
        )
    }

    /// upstream VisitPodSecretNames / VisitPodConfigmapNames.
    #[test]
    fn a_pod_refers_to_its_volumes_env_env_from_and_pull_secrets() {
        let r = pod_refs(&daemonset_pod("u"));
        assert_eq!(r.namespace, "kube-system");
        let cms: Vec<&str> = r.config_maps.iter().map(String::as_str).collect();
        assert_eq!(cms, ["cm1", "cm2", "cm3", "kube-root-ca.crt"]);
        let secrets: Vec<&str> = r.secrets.iter().map(String::as_str).collect();
        assert_eq!(secrets, ["regcred", "s1", "s2", "s3"]);
    }

    /// The watch-based manager's reference counting: an object is watched while at least one
    /// registered pod refers to it; re-registering an unchanged pod changes nothing.
    #[test]
    fn references_are_counted_per_pod_and_dropped_with_the_last_one() {
        let o = ApiObjects::without_threads();
        o.register_pod(&daemonset_pod("a"));
        o.register_pod(&daemonset_pod("a"));
        o.register_pod(&daemonset_pod("b"));
        let (cms, secrets) = o.referenced();
        assert!(cms.iter().all(|(_, _, n)| *n == 2), "{cms:?}");
        assert_eq!(secrets.len(), 4);
        // Pod b changes: it no longer refers to cm3.
        let mut b = daemonset_pod("b");
        if let Some(Value::Array(v)) = b.spec.extra.get_mut("volumes") {
            v.retain(|x| x["name"] != "cfg");
        }
        o.register_pod(&b);
        let (cms, _) = o.referenced();
        assert!(
            cms.contains(&("kube-system".into(), "cm3".into(), 1)),
            "{cms:?}"
        );
        assert!(
            cms.contains(&("kube-system".into(), "cm1".into(), 2)),
            "{cms:?}"
        );
        o.unregister_pod("a");
        let (cms, _) = o.referenced();
        assert!(!cms.iter().any(|(_, n, _)| n == "cm3"), "{cms:?}");
        o.unregister_pod("b");
        assert_eq!(o.referenced(), (vec![], vec![]));
    }

    #[test]
    fn lookups_answer_with_the_kubelet_texts() {
        let o = ApiObjects::without_threads();
        o.register_pod(&daemonset_pod("a"));
        o.secrets.inject("kube-system", "s1", Known::Absent);
        let e = o.secret("kube-system", "s1").unwrap_err();
        assert_eq!(e.to_string(), "secret \"s1\" not found");
        assert!(e.downcast_ref::<KubeletMessage>().is_some());
        o.config_maps.inject(
            "kube-system",
            "cm1",
            Known::Present(Arc::new(json!({
                "metadata": {"name": "cm1"},
                "data": {"a": "x"},
                "binaryData": {"b": "AAE="},
            }))),
        );
        let d = o.config_map("kube-system", "cm1").unwrap();
        assert_eq!(d["a"], b"x");
        assert_eq!(d["b"], [0, 1]);
        let e = o.key(false, "kube-system", "cm1", "zz").unwrap_err();
        assert_eq!(
            e.to_string(),
            "couldn't find key zz in ConfigMap kube-system/cm1"
        );
        o.secrets.inject(
            "kube-system",
            "s2",
            Known::Present(Arc::new(
                json!({"metadata": {"name": "s2"}, "data": {"k": "c2VjcmV0"}}),
            )),
        );
        assert_eq!(o.key(true, "kube-system", "s2", "k").unwrap(), b"secret");
        // Not listed yet and no client: unavailable, with the reason.
        let e = o
            .data(Kind::ConfigMap, "kube-system", "cm2")
            .err()
            .map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("not available")));
        // optional: true skips a missing object, never an unreadable one.
        let missing = o.secret("kube-system", "s1").unwrap_err();
        assert!(crate::api::env::optional_skips(&missing));
        let unreadable = o.config_map("kube-system", "cm2").unwrap_err();
        assert!(!crate::api::env::optional_skips(&unreadable));
    }

    /// A Secret with `k` = base64 `b64`.
    fn secret(name: &str, b64: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "kube-system",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x"}},
            "data": {"k": b64}})
    }

    /// The names of the Secrets in a checkpoint body.
    fn secret_names(body: &ObjectCheckpoint) -> Vec<&str> {
        body.secrets
            .iter()
            .filter_map(|s| s["metadata"]["name"].as_str())
            .collect()
    }

    /// Offline after a restart, the checkpointed objects answer lookups while no list has
    /// answered; the API server's answer replaces them (a deleted object is NotFound, as the
    /// kubelet would see it); objects no pod refers to leave the checkpoint once the API server
    /// has answered; with the opt-out, Secrets and tokens are neither restored nor written.
    #[test]
    fn checkpointed_objects_answer_until_the_api_server_does() {
        let d = tempfile::tempdir().unwrap();
        let settings = |secrets| CheckpointSettings {
            path: d.path().join(checkpoint::OBJECTS_FILE),
            node: "node1".into(),
            secrets,
        };
        let mut cp = ObjectCheckpoint::new("node1");
        cp.secrets = vec![secret("s1", "b2xk"), secret("unused", "eA==")];
        cp.config_maps = vec![
            json!({"metadata": {"name": "cm1", "namespace": "kube-system"},
            "data": {"k": "v"}}),
        ];
        checkpoint::Writer::new(settings(true)).write(&cp);
        // with_checkpoint restores what the file holds: kept while nothing answered.
        let restored = ApiObjects::with_checkpoint(settings(true));
        let again = restored.checkpoint_body("node1", true);
        assert_eq!(again.config_maps, cp.config_maps);
        assert_eq!(again.secrets.len(), 2);
        assert_eq!(again.secrets[0]["data"], cp.secrets[0]["data"]);
        let o = ApiObjects {
            checkpoint: None,
            ..ApiObjects::without_threads()
        };
        o.restore(checkpoint::load(&settings(true)).unwrap(), true);
        o.register_pod(&daemonset_pod("a"));
        o.secrets
            .inject("kube-system", "s1", Known::Pending(Some("refused".into())));
        assert_eq!(o.key(true, "kube-system", "s1", "k").unwrap(), b"old");
        assert_eq!(o.key(false, "kube-system", "cm1", "k").unwrap(), b"v");
        // Not yet live: the unreferenced object stays; annotations are not kept.
        let body = o.checkpoint_body("node1", true);
        let names = secret_names(&body);
        assert_eq!(names, ["s1", "unused"]);
        assert!(body.secrets[0]["metadata"]["annotations"].is_null());
        // The API server answers: its data wins, a deleted object is NotFound.
        o.journal.set_live();
        o.secrets.inject(
            "kube-system",
            "s1",
            Known::Present(Arc::new(secret("s1", "bmV3"))),
        );
        assert_eq!(o.key(true, "kube-system", "s1", "k").unwrap(), b"new");
        o.config_maps.inject("kube-system", "cm1", Known::Absent);
        let e = o.config_map("kube-system", "cm1").unwrap_err();
        assert_eq!(e.to_string(), "configmap \"cm1\" not found");
        let body = o.checkpoint_body("node1", true);
        let names = secret_names(&body);
        assert_eq!(names, ["s1"]);
        assert!(body.config_maps.is_empty());
        assert!(o.checkpoint_body("node1", false).secrets.is_empty());
        // The opt-out: nothing of the Secrets restored, and the next write drops them.
        drop(restored);
        let off = ApiObjects::with_checkpoint(settings(false));
        off.write_checkpoint();
        let on_disk = checkpoint::load(&settings(false)).unwrap();
        assert!(on_disk.secrets.is_empty() && on_disk.tokens.is_empty());
        assert_eq!(on_disk.config_maps.len(), 1);
    }
}
