//! The kubelet's service lister (kubelet.go: a Services informer over all namespaces, what the
//! Node authorizer lets a node list and watch): `GET /api/v1/services`, then a watch from the
//! list's resourceVersion with bookmarks ([`super::watch::follow`]); a watch the server ends
//! resumes from the last resourceVersion, `410 Gone` and errors relist (back-off 1 s doubling
//! to 30 s). The environment builder reads it through `api::env::ServiceLister`.
//!
//! `has_synced` is the informer's `HasSynced`: true once a list answered. API pods wait for it
//! (`services have not yet been read at least once, cannot construct envvars`); static pods do
//! not. Offline: [`Services::restore`] seeds the store from a checkpoint ([`Services::snapshot`])
//! and counts as synced, so API pods restarted without the API server get the variables they
//! had; the first live list replaces it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::api::env::ServiceLister;
use crate::apiclient::client::{ApiClient, ApiError};

use super::watch::{End, follow};

/// The list of all Services.
const PATH: &str = "/api/v1/services";

/// Where the store's content comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Nothing yet.
    Empty,
    /// An offline checkpoint ([`Services::restore`]).
    #[allow(dead_code)]
    Restored,
    /// The API server (a list answered).
    Live,
}

#[derive(Debug)]
struct Store {
    origin: Origin,
    /// (namespace, name) -> the trimmed Service.
    items: BTreeMap<(String, String), Value>,
}

/// All Services of the cluster, as far as the service-link variables need them.
pub struct Services {
    store: Mutex<Store>,
    started: AtomicBool,
    /// Bumped on every change of the store (the offline checkpoint writes on change).
    changes: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("Services")
            .field("origin", &s.origin)
            .field("services", &s.items.len())
            .finish()
    }
}

/// A Service trimmed to what the environment reads: namespace, name, clusterIP and the
/// ports' name, port and protocol.
pub fn trim(svc: &Value) -> Value {
    let ports: Vec<Value> = svc["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let mut t = json!({"port": p["port"].clone()});
            for k in ["name", "protocol"] {
                if let Some(v) = p[k].as_str().filter(|v| !v.is_empty()) {
                    t[k] = json!(v);
                }
            }
            t
        })
        .collect();
    json!({
        "metadata": {
            "namespace": svc["metadata"]["namespace"].as_str().unwrap_or_default(),
            "name": svc["metadata"]["name"].as_str().unwrap_or_default(),
        },
        "spec": {
            "clusterIP": svc["spec"]["clusterIP"].as_str().unwrap_or_default(),
            "ports": ports,
        },
    })
}

fn key(svc: &Value) -> Option<(String, String)> {
    let m = &svc["metadata"];
    Some((
        m["namespace"].as_str()?.to_string(),
        m["name"].as_str().filter(|n| !n.is_empty())?.to_string(),
    ))
}

impl Services {
    pub fn new() -> Services {
        Services {
            store: Mutex::new(Store {
                origin: Origin::Empty,
                items: BTreeMap::new(),
            }),
            started: AtomicBool::new(false),
            changes: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// A count that moves whenever the Services change.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The store, for a change: the change count moves.
    fn lock_mut(&self) -> std::sync::MutexGuard<'_, Store> {
        self.changes.fetch_add(1, Ordering::SeqCst);
        self.lock()
    }

    /// The Services as last listed (or restored), trimmed ([`trim`]), in namespace/name order:
    /// what an offline checkpoint keeps.
    pub fn snapshot(&self) -> Vec<Value> {
        self.lock().items.values().cloned().collect()
    }

    /// Seeds the store from an offline checkpoint, unless the API server already answered (live
    /// data wins); a restored store counts as synced.
    pub fn restore(&self, services: Vec<Value>) {
        let mut s = self.lock_mut();
        if s.origin == Origin::Live {
            return;
        }
        s.items = services
            .iter()
            .filter_map(|v| key(v).map(|k| (k, trim(v))))
            .collect();
        s.origin = Origin::Restored;
        info!(
            services = s.items.len(),
            "services restored from the offline checkpoint"
        );
    }

    /// Starts the reflector thread (once) with `client`.
    pub fn start(self: &Arc<Self>, client: &Arc<ApiClient>) {
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let (me, client) = (self.clone(), client.clone());
        let spawned = std::thread::Builder::new()
            .name("watch-services".into())
            .spawn(move || me.reflect(&client));
        if let Err(e) = spawned {
            warn!(error = %e, "starting the service reflector");
        }
    }

    /// Replaces the store with a list's items; the list's resourceVersion.
    fn relist(&self, client: &ApiClient) -> Result<String, ApiError> {
        let v = client.get(PATH)?;
        let items: BTreeMap<_, _> = v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| key(o).map(|k| (k, trim(o))))
            .collect();
        let mut s = self.lock_mut();
        s.items = items;
        s.origin = Origin::Live;
        Ok(v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    fn apply(&self, event: &str, obj: &Value) {
        let Some(k) = key(obj) else { return };
        debug!(event, namespace = %k.0, name = %k.1, "service changed");
        let mut s = self.lock_mut();
        if event == "DELETED" {
            s.items.remove(&k);
        } else {
            s.items.insert(k, trim(obj));
        }
    }

    /// The reflector: list, then watch; relist on 410 and errors, for the process's life.
    fn reflect(&self, client: &ApiClient) {
        let mut backoff = Duration::from_secs(1);
        let mut rv: Option<String> = None;
        loop {
            let from = match rv.take() {
                Some(r) => r,
                None => match self.relist(client) {
                    Ok(r) => {
                        debug!(services = self.lock().items.len(), rv = %r, "services listed");
                        r
                    }
                    Err(e) => {
                        warn!(error = %e, "listing services");
                        std::thread::sleep(backoff);
                        backoff = (backoff * 2).min(Duration::from_secs(30));
                        continue;
                    }
                },
            };
            match follow(client, PATH, &from, &|| false, &mut |t, o| self.apply(t, o)) {
                Ok(End::Resume(r)) => {
                    backoff = Duration::from_secs(1);
                    rv = Some(r);
                }
                Ok(End::Relist | End::Stop) => {}
                Err(e) => {
                    debug!(error = %e, "service watch failed; relisting");
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            }
        }
    }
}

impl Default for Services {
    fn default() -> Self {
        Services::new()
    }
}

impl ServiceLister for Services {
    fn has_synced(&self) -> bool {
        self.lock().origin != Origin::Empty
    }

    fn list(&self) -> Vec<Value> {
        self.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(ns: &str, name: &str, ip: &str) -> Value {
        json!({"kind": "Service", "metadata": {"namespace": ns, "name": name, "uid": "u",
                  "resourceVersion": "7", "labels": {"a": "b"}},
               "spec": {"clusterIP": ip, "type": "ClusterIP", "selector": {"app": "x"},
                        "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]},
               "status": {"loadBalancer": {}}})
    }

    /// The informer's HasSynced: false until the first list; an offline checkpoint counts;
    /// live data replaces the restored store and a later restore does not undo it.
    #[test]
    fn restored_services_count_as_synced_until_live_data_replaces_them() {
        let s = Services::new();
        assert!(!s.has_synced());
        s.restore(vec![svc("default", "kubernetes", "10.96.0.1")]);
        assert!(s.has_synced());
        assert_eq!(
            s.snapshot(),
            vec![
                json!({"metadata": {"namespace": "default", "name": "kubernetes"},
                        "spec": {"clusterIP": "10.96.0.1",
                                 "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
            ]
        );
        s.lock().origin = Origin::Live;
        s.apply("ADDED", &svc("prod", "web", "10.96.0.20"));
        s.apply("DELETED", &svc("default", "kubernetes", ""));
        s.restore(vec![]);
        let names: Vec<String> = s
            .list()
            .iter()
            .map(|v| {
                v["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        assert_eq!(names, ["web"]);
        assert_eq!(format!("{s:?}"), "Services { origin: Live, services: 1 }");
    }
}
