//! Mirror pods (the kubelet's `pod/mirror_client.go` and the static-pod part of `syncPod`): for
//! every static pod (file or URL source) a pod object in the API server, so `kubectl get pods`
//! shows it.
//!
//! - Created with the static pod's name, namespace, labels, annotations (config.hash, .source,
//!   .seen) and spec, plus `kubernetes.io/config.mirror` = the static pod's config hash and an
//!   owner reference to the Node (apiVersion v1, kind Node, name, uid, controller true). An
//!   AlreadyExists answer is fine (the watch reports the existing one).
//! - A mirror pod whose config.mirror no longer matches the static pod (the manifest changed) or
//!   that was deleted gracefully (deletionTimestamp) is deleted with grace 0 and a UID
//!   precondition (404 and 409 tolerated) and created again.
//! - Mirror pods whose static pod is gone are deleted the same way, only once every source has
//!   answered (a manifest URL that is down at boot must not delete them).
//! - Static pods that reference API objects are given no mirror pod (see
//!   [`api_object_reference`]).
//!
//! Nothing happens before the API pod source listed (it reports which mirror pods exist).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::api::Pod;
use crate::apiclient::client::{ApiClient, ApiError};
use crate::config::SourceKind;
use crate::config::apiserver::{ApiView, CONFIG_MIRROR_ANNOTATION};
use crate::config::naming::{CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION};
use crate::status::StatusStore;

/// How long a created (or deleted) mirror pod is given to show up in (or leave) the watch before
/// the manager acts on it again.
const SETTLE: Duration = Duration::from_secs(5);

/// The desired static pods, as podconfig last merged them (shared with the podconfig thread).
#[derive(Debug, Default, Clone)]
pub struct StaticPods {
    /// Static pods that get a mirror pod (those referencing API objects are left out).
    pub pods: Vec<Pod>,
    /// Every source answered: orphaned mirror pods may be deleted.
    pub all_sources_ready: bool,
}

/// `DeleteOptions` of a final delete: grace period 0 and the UID as precondition (what the
/// kubelet's status manager sends for a terminated pod and its mirror client for a mirror pod).
pub fn final_delete_options(uid: &str) -> Value {
    json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
           "preconditions": {"uid": uid}})
}

/// Deletes `namespace/name` if it still has `uid`. `Ok(false)`: it was gone (404) or is another
/// pod now (409 on the precondition); both are success for the caller.
pub fn delete_final(
    client: &ApiClient,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<bool, ApiError> {
    let path = format!("/api/v1/namespaces/{namespace}/pods/{name}");
    match client.delete_with(&path, &final_delete_options(uid)) {
        Ok(_) => Ok(true),
        Err(e) if matches!(e.status(), Some(404) | Some(409)) => {
            debug!(pod = %format!("{namespace}/{name}"), uid, error = %e, "final delete: already gone or replaced");
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// The first reference to an API object in a static pod, as the kubelet's
/// `podutil.HasAPIObjectReference` finds them (feature PreventStaticPodAPIReferences): the field
/// path and the plural resource. The API server's NodeRestriction admission refuses mirror pods
/// with such references.
pub fn api_object_reference(pod: &Pod) -> Option<(String, &'static str)> {
    let v = serde_json::to_value(pod).ok()?;
    let spec = &v["spec"];
    if spec["serviceAccountName"]
        .as_str()
        .is_some_and(|s| !s.is_empty())
    {
        return Some(("spec.serviceAccountName".into(), "serviceaccounts"));
    }
    if spec["imagePullSecrets"]
        .as_array()
        .is_some_and(|a| !a.is_empty())
    {
        return Some(("spec.imagePullSecrets".into(), "secrets"));
    }
    let mut configmap = None;
    for kind in ["initContainers", "containers", "ephemeralContainers"] {
        for (i, c) in spec[kind].as_array().into_iter().flatten().enumerate() {
            for (j, e) in c["env"].as_array().into_iter().flatten().enumerate() {
                let at = format!("spec.{kind}[{i}].env[{j}].valueFrom");
                if !e["valueFrom"]["secretKeyRef"].is_null() {
                    return Some((format!("{at}.secretKeyRef"), "secrets"));
                }
                if !e["valueFrom"]["configMapKeyRef"].is_null() && configmap.is_none() {
                    configmap = Some(format!("{at}.configMapKeyRef"));
                }
            }
            for (j, e) in c["envFrom"].as_array().into_iter().flatten().enumerate() {
                let at = format!("spec.{kind}[{i}].envFrom[{j}]");
                if !e["secretRef"].is_null() {
                    return Some((format!("{at}.secretRef"), "secrets"));
                }
                if !e["configMapRef"].is_null() && configmap.is_none() {
                    configmap = Some(format!("{at}.configMapRef"));
                }
            }
        }
    }
    let volumes: Vec<&Value> = spec["volumes"].as_array().into_iter().flatten().collect();
    for (i, vol) in volumes.iter().enumerate() {
        if !vol["secret"].is_null() {
            return Some((format!("spec.volumes[{i}].secret"), "secrets"));
        }
        if !vol["azureFile"].is_null() {
            return Some((
                format!("spec.volumes[{i}].azureFile"),
                "secrets (via azureFile volumes)",
            ));
        }
    }
    if let Some(at) = configmap {
        return Some((at, "configmaps"));
    }
    for (i, vol) in volumes.iter().enumerate() {
        if !vol["configMap"].is_null() {
            return Some((format!("spec.volumes[{i}].configMap"), "configmaps"));
        }
    }
    if spec["resourceClaims"]
        .as_array()
        .is_some_and(|a| !a.is_empty())
    {
        return Some(("spec.resourceClaims".into(), "resourceclaims"));
    }
    for (i, vol) in volumes.iter().enumerate() {
        let at = format!("spec.volumes[{i}]");
        if !vol["persistentVolumeClaim"].is_null() {
            return Some((
                format!("{at}.persistentVolumeClaim"),
                "persistentvolumeclaims",
            ));
        }
        if !vol["ephemeral"].is_null() {
            return Some((
                format!("{at}.ephemeral"),
                "persistentvolumeclaims (via ephemeral volumes)",
            ));
        }
        if !vol["csi"].is_null() {
            return Some((format!("{at}.csi"), "csidrivers (via CSI volumes)"));
        }
        for (j, s) in vol["projected"]["sources"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let at = format!("{at}.projected.sources[{j}]");
            for (key, resource) in [
                ("configMap", "configmaps (via projected volumes)"),
                ("secret", "secrets (via projected volumes)"),
                (
                    "serviceAccountToken",
                    "serviceaccounts (via projected volumes)",
                ),
                ("clusterTrustBundle", "clustertrustbundles"),
                ("podCertificate", "podcertificates"),
            ] {
                if !s[key].is_null() {
                    return Some((format!("{at}.{key}"), resource));
                }
            }
        }
    }
    None
}

/// The mirror pod object for `pod`.
pub fn mirror_body(pod: &Pod, node: &str, node_uid: &str) -> Value {
    let mut v = serde_json::to_value(pod).unwrap_or_else(|_| json!({}));
    v["apiVersion"] = json!("v1");
    v["kind"] = json!("Pod");
    if let Some(m) = v.as_object_mut() {
        m.remove("status");
    }
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("uid");
        m.remove("creationTimestamp");
        m.remove("resourceVersion");
    }
    let hash = config_hash(pod);
    v["metadata"]["annotations"][CONFIG_MIRROR_ANNOTATION] = json!(hash);
    v["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": true
    }]);
    v
}

pub struct MirrorManager {
    client: Arc<ApiClient>,
    node: String,
    view: Arc<Mutex<ApiView>>,
    statics: Arc<Mutex<StaticPods>>,
    /// full name -> (hash, when) of mirror pods created and not yet seen in the watch.
    created: BTreeMap<String, (String, Instant)>,
    /// mirror UID -> when its final delete was sent.
    deleted: BTreeMap<String, Instant>,
}

impl MirrorManager {
    pub fn new(
        client: Arc<ApiClient>,
        node: &str,
        view: Arc<Mutex<ApiView>>,
        statics: Arc<Mutex<StaticPods>>,
    ) -> MirrorManager {
        MirrorManager {
            client,
            node: node.to_string(),
            view,
            statics,
            created: BTreeMap::new(),
            deleted: BTreeMap::new(),
        }
    }

    fn delete(&mut self, full: &str, uid: &str, why: &str) {
        if self
            .deleted
            .get(uid)
            .is_some_and(|at| at.elapsed() < SETTLE)
        {
            return;
        }
        let (ns, name) = full.split_once('/').unwrap_or(("", full));
        info!(pod = %full, uid, reason = why, "deleting mirror pod");
        match delete_final(&self.client, ns, name, uid) {
            Ok(_) => {
                self.deleted.insert(uid.to_string(), Instant::now());
            }
            Err(e) => warn!(pod = %full, uid, error = %e, "deleting mirror pod failed; will retry"),
        }
    }

    fn node_uid(&self) -> Result<String, ApiError> {
        let node = self.client.get(&format!("/api/v1/nodes/{}", self.node))?;
        Ok(node["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// One reconciliation; returns how many mirror pods were created.
    pub fn pass(&mut self) -> usize {
        let (listed, mirrors) = {
            let v = self.view.lock().unwrap_or_else(|e| e.into_inner());
            (v.listed, v.mirrors.clone())
        };
        if !listed {
            return 0;
        }
        let statics = self
            .statics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        self.deleted.retain(|_, at| at.elapsed() < SETTLE);
        let mut want = BTreeMap::new();
        for p in &statics.pods {
            want.insert(format!("{}/{}", p.metadata.namespace, p.metadata.name), p);
        }
        let mut node_uid: Option<String> = None;
        let mut created = 0;
        for (full, pod) in &want {
            let hash = config_hash(pod);
            if let Some(m) = mirrors.get(full) {
                if !m.deleting && m.hash == hash {
                    self.created.remove(full);
                    continue;
                }
                let why = if m.deleting {
                    "the mirror pod was deleted"
                } else {
                    "the static pod changed"
                };
                self.delete(full, &m.uid, why);
                if self.deleted.contains_key(&m.uid) {
                    // Sent (now or within SETTLE): create once it is gone from the watch.
                    continue;
                }
            }
            if self
                .created
                .get(full)
                .is_some_and(|(h, at)| *h == hash && at.elapsed() < SETTLE)
            {
                continue;
            }
            let uid = match &node_uid {
                Some(u) => u.clone(),
                None => match self.node_uid() {
                    Ok(u) if !u.is_empty() => {
                        node_uid = Some(u.clone());
                        u
                    }
                    Ok(_) | Err(_) => {
                        debug!("mirror pods: the Node is not registered yet");
                        return created;
                    }
                },
            };
            let body = mirror_body(pod, &self.node, &uid);
            let path = format!("/api/v1/namespaces/{}/pods", pod.metadata.namespace);
            match self.client.post(&path, &body) {
                Ok(_) => {
                    info!(pod = %full, hash, "created mirror pod");
                    created += 1;
                    self.created.insert(full.clone(), (hash, Instant::now()));
                }
                Err(e) if e.status() == Some(409) => {
                    debug!(pod = %full, "mirror pod already exists");
                    self.created.insert(full.clone(), (hash, Instant::now()));
                }
                Err(e) => {
                    warn!(pod = %full, error = %e, "creating mirror pod failed; will retry")
                }
            }
        }
        if statics.all_sources_ready {
            for (full, m) in &mirrors {
                if !want.contains_key(full) {
                    self.delete(full, &m.uid, "its static pod is gone");
                }
            }
        }
        self.created.retain(|full, _| want.contains_key(full));
        created
    }
}

/// The static pod's `kubernetes.io/config.hash`, which its mirror pod carries as
/// `kubernetes.io/config.mirror`.
fn config_hash(pod: &Pod) -> String {
    pod.metadata
        .annotations
        .get(CONFIG_HASH_ANNOTATION)
        .cloned()
        .unwrap_or_default()
}

/// API-server mode: the static pods that get mirror pods (published for the status writer);
/// a static pod referencing API objects gets none, with an error and a `MirrorPodRefused`
/// event once.
pub struct MirrorFilter {
    static_pods: Arc<Mutex<StaticPods>>,
    flagged: std::collections::BTreeSet<String>,
}

impl MirrorFilter {
    /// Publishes into `static_pods`, which the mirror manager reads.
    pub fn new(static_pods: Arc<Mutex<StaticPods>>) -> MirrorFilter {
        MirrorFilter {
            static_pods,
            flagged: std::collections::BTreeSet::new(),
        }
    }

    pub fn update(
        &mut self,
        store: &StatusStore,
        pods: &std::collections::BTreeMap<String, crate::config::SourcePod>,
        all_sources_ready: bool,
        errors: &mut Vec<crate::config::ManifestError>,
    ) {
        let mut statics = StaticPods {
            pods: vec![],
            all_sources_ready,
        };
        let mut now_flagged = std::collections::BTreeSet::new();
        for sp in pods.values() {
            let meta = &sp.pod.metadata;
            if meta
                .annotations
                .get(CONFIG_SOURCE_ANNOTATION)
                .map(String::as_str)
                == Some(SourceKind::Api.as_str())
            {
                continue;
            }
            match no_mirror_reason(sp) {
                Some(e) => {
                    if !self.flagged.contains(&meta.uid) {
                        warn!(pod = %format!("{}/{}", meta.namespace, meta.name), error = %e, "no mirror pod for this static pod");
                        store.events().record(
                            &crate::events::PodRef::pod(&meta.namespace, &meta.name, &meta.uid),
                            crate::events::EventType::Warning,
                            "MirrorPodRefused",
                            &e.to_string(),
                        );
                    }
                    now_flagged.insert(meta.uid.clone());
                    errors.push(e);
                }
                None => statics.pods.push(crate::api::Pod::clone(&sp.pod)),
            }
        }
        self.flagged = now_flagged;
        *self.static_pods.lock().unwrap_or_else(|e| e.into_inner()) = statics;
    }
}

/// API-server mode: why a static pod gets no mirror pod (it references API objects, which the
/// API server's NodeRestriction admission refuses in mirror pods and the kubelet rejects since
/// PreventStaticPodAPIReferences). nanolet still runs the pod from the local configMap/secret
/// store; the error is reported on `/manifests/errors` and as a `MirrorPodRefused` event.
fn no_mirror_reason(sp: &crate::config::SourcePod) -> Option<crate::config::ManifestError> {
    let (field, resource) = api_object_reference(&sp.pod)?;
    Some(crate::config::ManifestError {
        origin: sp.origin.clone(),
        field,
        reason: format!(
            "static pods may not reference {resource}: no mirror pod is created in API-server mode (the pod runs from the local store)"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: Value) -> Pod {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p-node1", "namespace": "default", "uid": "u1",
                         "labels": {"app": "x"},
                         "annotations": {"kubernetes.io/config.hash": "u1",
                                         "kubernetes.io/config.source": "file"}},
            "spec": spec}))
        .expect("pod")
    }

    /// The kubelet's mirror_client.CreateMirrorPod: config.mirror = the static pod's hash, an
    /// owner reference to the Node with controller=true, no uid/status of the static pod.
    #[test]
    fn mirror_body_carries_hash_and_node_owner() {
        let p = pod(json!({"containers": [{"name": "c", "image": "i"}], "nodeName": "node1"}));
        let m = mirror_body(&p, "node1", "node-uid");
        assert_eq!(m["metadata"]["annotations"][CONFIG_MIRROR_ANNOTATION], "u1");
        assert_eq!(
            m["metadata"]["annotations"]["kubernetes.io/config.source"],
            "file"
        );
        assert_eq!(m["metadata"]["labels"]["app"], "x");
        assert!(m["metadata"]["uid"].is_null() && m["status"].is_null());
        assert_eq!(
            m["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Node", "name": "node1", "uid": "node-uid", "controller": true}])
        );
        assert_eq!(m["spec"]["nodeName"], "node1");
        assert_eq!(
            final_delete_options("u9"),
            json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0, "preconditions": {"uid": "u9"}})
        );
    }

    /// pkg/kubelet/pod/mirror_client.go CreateMirrorPod sends the static pod as the kubelet
    /// decoded it, and the kubelet's defaulting never sets `spec.priority`: the API server's
    /// Priority admission plugin fills it from priorityClassName (or the globalDefault class)
    /// and refuses a pod whose integer priority differs from its class. So a mirror pod made
    /// from a static pod (the real path: decode, default, name) carries no `priority`, and
    /// keeps its priorityClassName.
    #[test]
    fn mirror_pods_carry_no_priority() {
        let yaml = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  \
            priorityClassName: system-node-critical\n  containers:\n  - name: c\n    image: i\n";
        let raw = match crate::config::naming::decode_manifest(yaml.as_bytes(), "/m/web.yaml") {
            Ok(crate::config::naming::DecodedDoc::Pod(p)) => *p,
            other => panic!("unexpected {other:?}"),
        };
        let p = crate::config::naming::make_static_pod(
            raw,
            "node1",
            crate::config::SourceKind::File,
            "/m/web.yaml",
            "t",
        )
        .expect("valid");
        let m = mirror_body(&p, "node1", "node-uid");
        assert!(m["spec"].get("priority").is_none(), "{}", m["spec"]);
        assert_eq!(m["spec"]["priorityClassName"], "system-node-critical");
        // nanolet itself still ranks it as the class says (eviction, shutdown).
        assert_eq!(crate::api::helpers::priority(&p), 2_000_001_000);
    }

    /// podutil.HasAPIObjectReference: service accounts, secrets, config maps, claims and the
    /// projected sources that need the API; hostPath/emptyDir/downwardAPI do not.
    #[test]
    fn api_object_references_are_found_with_their_field_path() {
        let c = json!([{"name": "c", "image": "i"}]);
        let none = pod(json!({"containers": c, "volumes": [
            {"name": "h", "hostPath": {"path": "/x"}}, {"name": "e", "emptyDir": {}},
            {"name": "d", "projected": {"sources": [{"downwardAPI": {"items": []}}]}}]}));
        assert_eq!(api_object_reference(&none), None);
        let cases = [
            (
                json!({"containers": c, "serviceAccountName": "sa"}),
                "spec.serviceAccountName",
                "serviceaccounts",
            ),
            (
                json!({"containers": c, "volumes": [{"name": "h", "hostPath": {"path": "/x"}}, {"name": "s", "secret": {"secretName": "s"}}]}),
                "spec.volumes[1].secret",
                "secrets",
            ),
            (
                json!({"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"},
                {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]}]}),
                "spec.containers[0].env[1].valueFrom.configMapKeyRef",
                "configmaps",
            ),
            (
                json!({"containers": [{"name": "c", "image": "i", "envFrom": [{"secretRef": {"name": "s"}}]}]}),
                "spec.containers[0].envFrom[0].secretRef",
                "secrets",
            ),
            (
                json!({"containers": c, "volumes": [{"name": "cm", "configMap": {"name": "cm"}}]}),
                "spec.volumes[0].configMap",
                "configmaps",
            ),
            (
                json!({"containers": c, "volumes": [{"name": "p", "persistentVolumeClaim": {"claimName": "x"}}]}),
                "spec.volumes[0].persistentVolumeClaim",
                "persistentvolumeclaims",
            ),
            (
                json!({"containers": c, "volumes": [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]}),
                "spec.volumes[0].projected.sources[0].serviceAccountToken",
                "serviceaccounts (via projected volumes)",
            ),
        ];
        for (spec, field, resource) in cases {
            let got = api_object_reference(&pod(spec.clone()));
            assert_eq!(got, Some((field.to_string(), resource)), "{spec}");
        }
    }
}
