//! One kind (ConfigMaps or Secrets) of the kubelet's watch-based object manager
//! (`pkg/kubelet/util/manager/watch_based_manager.go`): every object a pod on this node refers
//! to gets its own reflector, a list and watch restricted by `fieldSelector=metadata.name=<name>`
//! in the object's namespace (all the Node authorizer lets a node read: objects referenced by
//! pods bound to it). References are counted per pod; the reflector of an object stops when the
//! last pod referring to it is unregistered.
//!
//! `get` answers from the reflector's store, waiting (bounded) for its first list as the
//! kubelet's `objectCacheItem` does; an object the list or a `DELETED` event says is absent is
//! the kubelet's `<kind> "<name>" not found` (`apierrors.NewNotFound(corev1.Resource("configmap"),
//! name)`).

use std::collections::BTreeMap;
use std::io::BufRead;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;
use tracing::{debug, info, warn};

use crate::apiclient::client::{ApiClient, ApiError};

use super::ObjectError;

/// The server-side timeout of each watch (the reflector's minimum watch timeout is 5 min).
const WATCH_TIMEOUT_SECONDS: u64 = 300;

/// How long a `get` waits for the reflector's first list before it answers with the error.
pub const FIRST_LIST_WAIT: Duration = Duration::from_secs(5);

/// Which resource a manager watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    ConfigMap,
    Secret,
}

impl Kind {
    /// The resource in URLs.
    pub fn resource(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmaps",
            Kind::Secret => "secrets",
        }
    }

    /// The kubelet's group resource in not-found messages (`corev1.Resource("configmap")`).
    pub fn singular(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmap",
            Kind::Secret => "secret",
        }
    }
}

/// What a reflector knows of its object.
#[derive(Debug, Clone, PartialEq)]
pub enum Known {
    /// The first list has not answered yet (or failed: the error text).
    Pending(Option<String>),
    /// The API server says there is no such object.
    Absent,
    /// The object as last listed or watched.
    Present(Arc<Value>),
}

/// What the offline checkpoint follows (shared by the managers and the token manager): a
/// counter bumped on every change it would see, and whether the API server has answered since
/// start (until then, checkpointed objects no pod refers to yet are kept).
#[derive(Debug, Default)]
pub struct Journal {
    changes: AtomicU64,
    live: AtomicBool,
}

impl Journal {
    pub fn bump(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
    }

    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    /// The API server answered (a list, a TokenRequest).
    pub fn set_live(&self) {
        if !self.live.swap(true, Ordering::SeqCst) {
            self.bump();
        }
    }

    pub fn live(&self) -> bool {
        self.live.load(Ordering::SeqCst)
    }
}

/// One object's reflector state, shared with its thread. Its Debug shows no data (Secrets).
pub struct Item {
    known: Mutex<Known>,
    changed: Condvar,
    stop: AtomicBool,
    /// The object as checkpointed before a restart: answered while no list has answered.
    stale: Option<Arc<Value>>,
    journal: Arc<Journal>,
}

impl std::fmt::Debug for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &*self.known.lock().unwrap_or_else(|p| p.into_inner()) {
            Known::Pending(_) => "pending",
            Known::Absent => "absent",
            Known::Present(_) => "present",
        };
        f.debug_struct("Item").field("state", &state).finish()
    }
}

impl Item {
    fn new(stale: Option<Arc<Value>>, journal: Arc<Journal>) -> Arc<Item> {
        Arc::new(Item {
            known: Mutex::new(Known::Pending(None)),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            stale,
            journal,
        })
    }

    fn set(&self, k: Known) {
        let mut g = self.known.lock().unwrap_or_else(|p| p.into_inner());
        *g = k;
        self.changed.notify_all();
        self.journal.bump();
    }

    /// What the checkpoint keeps of it: the object as last listed or watched, else (no list
    /// answered since start) the checkpointed one; nothing once the API server says it is gone.
    pub fn checkpointed(&self) -> Option<Arc<Value>> {
        match &*self.known.lock().unwrap_or_else(|p| p.into_inner()) {
            Known::Present(v) => Some(v.clone()),
            Known::Absent => None,
            Known::Pending(_) => self.stale.clone(),
        }
    }

    /// The state, waiting up to `wait` while the first list has not answered yet (once a
    /// list failed, lookups answer at once with its error: an unreachable API server must not
    /// stall every sync). While no list has answered, a checkpointed object answers (offline
    /// after a restart); the first answer of the API server replaces it.
    pub fn get(&self, wait: Duration) -> Known {
        let g = self.known.lock().unwrap_or_else(|p| p.into_inner());
        let (g, _) = self
            .changed
            .wait_timeout_while(g, wait, |k| matches!(k, Known::Pending(None)))
            .unwrap_or_else(|p| p.into_inner());
        match (&*g, &self.stale) {
            (Known::Pending(_), Some(v)) => Known::Present(v.clone()),
            (k, _) => k.clone(),
        }
    }

    /// No list has answered yet (whatever a restored object would answer).
    fn pending(&self) -> bool {
        matches!(
            &*self.known.lock().unwrap_or_else(|p| p.into_inner()),
            Known::Pending(_)
        )
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// A watched object: namespace, name, reference count.
pub type Referenced = (String, String, usize);

struct Entry {
    refs: usize,
    item: Arc<Item>,
}

/// The manager of one kind: (namespace, name) -> reference count and reflector.
pub struct Manager {
    kind: Kind,
    client: Arc<OnceLock<Arc<ApiClient>>>,
    items: Mutex<BTreeMap<(String, String), Entry>>,
    /// Objects restored from the offline checkpoint, by (namespace, name).
    seeds: Mutex<BTreeMap<(String, String), Arc<Value>>>,
    journal: Arc<Journal>,
    /// Test seam: no threads, the state is set by [`Manager::inject`].
    start_threads: bool,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("kind", &self.kind)
            .field("objects", &self.referenced())
            .finish()
    }
}

impl Manager {
    pub fn new(
        kind: Kind,
        client: Arc<OnceLock<Arc<ApiClient>>>,
        journal: Arc<Journal>,
    ) -> Manager {
        Manager {
            kind,
            client,
            items: Mutex::new(BTreeMap::new()),
            seeds: Mutex::new(BTreeMap::new()),
            journal,
            start_threads: true,
        }
    }

    /// Objects from the offline checkpoint: each answers lookups of a pod referring to it
    /// while the API server has not answered for it.
    pub fn seed(&self, objects: Vec<Value>) {
        let mut seeds = self.seeds.lock().unwrap_or_else(|p| p.into_inner());
        for o in objects {
            let m = &o["metadata"];
            let (Some(ns), Some(name)) = (m["namespace"].as_str(), m["name"].as_str()) else {
                continue;
            };
            seeds.insert((ns.to_string(), name.to_string()), Arc::new(o.clone()));
        }
    }

    /// What the checkpoint holds of this kind, sorted by namespace and name: every referenced
    /// object as known (see [`Item::checkpointed`]) and, until the API server has answered
    /// since start, the restored objects no pod refers to yet.
    pub fn checkpointed(&self) -> Vec<Value> {
        let items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: BTreeMap<&(String, String), Arc<Value>> = items
            .iter()
            .filter_map(|(k, e)| e.item.checkpointed().map(|v| (k, v)))
            .collect();
        let seeds = self.seeds.lock().unwrap_or_else(|p| p.into_inner());
        if !self.journal.live() {
            for (k, v) in seeds.iter() {
                if !items.contains_key(k) {
                    out.insert(k, v.clone());
                }
            }
        }
        out.into_iter()
            .map(|((ns, name), v)| super::checkpoint::trim(&v, ns, name))
            .collect()
    }

    /// Without reflector threads (unit tests set the state with [`Manager::inject`]).
    #[cfg(test)]
    pub fn without_threads(kind: Kind, journal: Arc<Journal>) -> Manager {
        Manager {
            start_threads: false,
            ..Manager::new(kind, Arc::new(OnceLock::new()), journal)
        }
    }

    #[cfg(test)]
    pub fn inject(&self, ns: &str, name: &str, k: Known) {
        let items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = items.get(&(ns.to_string(), name.to_string())) {
            e.item.set(k);
        }
    }

    /// The objects with a reflector, and their reference counts.
    pub fn referenced(&self) -> Vec<Referenced> {
        let items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        items
            .iter()
            .map(|((ns, n), e)| (ns.clone(), n.clone(), e.refs))
            .collect()
    }

    /// One more pod refers to `ns/name`: the first reference starts its reflector.
    pub fn add_ref(&self, ns: &str, name: &str) {
        let mut items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        let key = (ns.to_string(), name.to_string());
        if let Some(e) = items.get_mut(&key) {
            e.refs += 1;
            return;
        }
        let stale = self
            .seeds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned();
        let item = Item::new(stale, self.journal.clone());
        self.journal.bump();
        if self.start_threads {
            let (kind, client, it) = (self.kind, self.client.clone(), item.clone());
            let (ns, name) = key.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("watch-{}", kind.singular()))
                .spawn(move || reflect(kind, &client, &ns, &name, &it));
            if let Err(e) = spawned {
                warn!(error = %e, "starting an object reflector");
            }
        }
        items.insert(key, Entry { refs: 1, item });
    }

    /// One pod less refers to `ns/name`: the last one stops its reflector.
    pub fn del_ref(&self, ns: &str, name: &str) {
        let mut items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        let key = (ns.to_string(), name.to_string());
        let last = match items.get_mut(&key) {
            Some(e) => {
                e.refs = e.refs.saturating_sub(1);
                e.refs == 0
            }
            None => false,
        };
        if last {
            if let Some(e) = items.remove(&key) {
                self.journal.bump();
                e.item.stop.store(true, Ordering::SeqCst);
                e.item.changed.notify_all();
            }
        }
    }

    /// The object's data as the reflector knows it. An object no pod refers to is fetched once
    /// (the kubelet refuses it as "not registered"; a pod is registered before it syncs, so
    /// this happens only in races with an update of the pod).
    pub fn get(&self, ns: &str, name: &str, wait: Duration) -> Result<Arc<Value>, ObjectError> {
        let item = {
            let items = self.items.lock().unwrap_or_else(|p| p.into_inner());
            items
                .get(&(ns.to_string(), name.to_string()))
                .map(|e| e.item.clone())
        };
        let known = match item {
            Some(i) => i.get(wait),
            None => self.get_once(ns, name),
        };
        match known {
            Known::Present(v) => Ok(v),
            Known::Absent => Err(ObjectError::NotFound {
                kind: self.kind.singular(),
                name: name.to_string(),
            }),
            Known::Pending(reason) => Err(ObjectError::Unavailable {
                kind: self.kind.singular(),
                namespace: ns.to_string(),
                name: name.to_string(),
                reason: reason.unwrap_or_else(|| "not listed yet".into()),
            }),
        }
    }

    fn get_once(&self, ns: &str, name: &str) -> Known {
        let Some(client) = self.client.get() else {
            return Known::Pending(Some("no API client yet".into()));
        };
        match list(client, self.kind, ns, name) {
            Ok((k, _)) => k,
            Err(e) => Known::Pending(Some(e.to_string())),
        }
    }
}

/// `/api/v1/namespaces/<ns>/<resource>?fieldSelector=metadata.name%3D<name>`.
fn path(kind: Kind, ns: &str, name: &str) -> String {
    format!(
        "/api/v1/namespaces/{ns}/{}?fieldSelector=metadata.name%3D{name}",
        kind.resource()
    )
}

/// List the one object: its state and the list's resourceVersion.
fn list(client: &ApiClient, kind: Kind, ns: &str, name: &str) -> Result<(Known, String), ApiError> {
    let v = client.get(&path(kind, ns, name))?;
    let rv = v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let found = v["items"].as_array().and_then(|a| {
        a.iter()
            .find(|o| o["metadata"]["name"].as_str() == Some(name))
    });
    Ok(match found {
        Some(o) => (Known::Present(Arc::new(o.clone())), rv),
        None => (Known::Absent, rv),
    })
}

/// How a watch ended.
pub(crate) enum End {
    Resume(String),
    Relist,
    Stop,
}

fn watch(
    client: &ApiClient,
    kind: Kind,
    ns: &str,
    name: &str,
    rv: &str,
    item: &Item,
) -> Result<End, ApiError> {
    follow(
        client,
        &path(kind, ns, name),
        rv,
        &|| item.stopped(),
        &mut |t, obj| {
            if obj["metadata"]["name"].as_str() != Some(name) {
                return;
            }
            match t {
                "ADDED" | "MODIFIED" => {
                    debug!(
                        kind = kind.singular(),
                        namespace = ns,
                        name,
                        rv = obj["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap_or_default(),
                        "object changed"
                    );
                    item.set(Known::Present(Arc::new(obj.clone())));
                }
                "DELETED" => item.set(Known::Absent),
                _ => {}
            }
        },
    )
}

/// One watch request of the list `path` (with or without a query) from resourceVersion `rv`,
/// with bookmarks and the reflector's server-side timeout: each `ADDED`, `MODIFIED` or
/// `DELETED` event goes to `on` (its type and object); a `BOOKMARK` only moves the
/// resourceVersion; an `ERROR` event (410 Gone or another) or an undecodable line ends it with
/// [`End::Relist`], the server closing the stream with [`End::Resume`] from the last
/// resourceVersion seen, `stopped()` with [`End::Stop`]. Shared by every reflector here.
pub(crate) fn follow(
    client: &ApiClient,
    path: &str,
    rv: &str,
    stopped: &dyn Fn() -> bool,
    on: &mut dyn FnMut(&str, &Value),
) -> Result<End, ApiError> {
    let sep = if path.contains('?') { '&' } else { '?' };
    let p = format!(
        "{path}{sep}watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds={WATCH_TIMEOUT_SECONDS}"
    );
    let reader = client.stream(&p)?;
    let mut rv = rv.to_string();
    for line in std::io::BufReader::new(reader).lines() {
        if stopped() {
            return Ok(End::Stop);
        }
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let Ok(ev) = serde_json::from_str::<Value>(&line) else {
            warn!(watch = path, "undecodable watch event; relisting");
            return Ok(End::Relist);
        };
        let obj = &ev["object"];
        if let Some(r) = obj["metadata"]["resourceVersion"].as_str() {
            rv = r.to_string();
        }
        match ev["type"].as_str().unwrap_or_default() {
            t @ ("ADDED" | "MODIFIED" | "DELETED") => on(t, obj),
            "ERROR" => {
                if obj["code"].as_u64() == Some(410) {
                    info!(watch = path, "watch expired (410 Gone); relisting");
                } else {
                    warn!(
                        watch = path,
                        message = obj["message"].as_str().unwrap_or_default(),
                        "watch error; relisting"
                    );
                }
                return Ok(End::Relist);
            }
            _ => {}
        }
    }
    Ok(End::Resume(rv))
}

/// Sleep `d` in small steps, returning early when the item is stopped.
fn pause(item: &Item, d: Duration) {
    let g = item.known.lock().unwrap_or_else(|p| p.into_inner());
    let _ = item
        .changed
        .wait_timeout_while(g, d, |_| !item.stopped())
        .unwrap_or_else(|p| p.into_inner());
}

/// The reflector thread of one object: list, then watch from the list's resourceVersion;
/// relist on 410 and errors (back-off 1 s doubling to 30 s) until the item is stopped.
fn reflect(kind: Kind, client: &OnceLock<Arc<ApiClient>>, ns: &str, name: &str, item: &Item) {
    let mut backoff = Duration::from_secs(1);
    let mut rv: Option<String> = None;
    while !item.stopped() {
        let Some(c) = client.get() else {
            item.set(Known::Pending(Some("no API client yet".into())));
            pause(item, backoff);
            continue;
        };
        let from = match rv.take() {
            Some(r) => r,
            None => match list(c, kind, ns, name) {
                Ok((k, r)) => {
                    item.journal.set_live();
                    item.set(k);
                    r
                }
                Err(e) => {
                    warn!(kind = kind.singular(), namespace = ns, name, error = %e, "listing");
                    if item.pending() {
                        item.set(Known::Pending(Some(e.to_string())));
                    }
                    pause(item, backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    continue;
                }
            },
        };
        match watch(c, kind, ns, name, &from, item) {
            Ok(End::Resume(r)) => {
                backoff = Duration::from_secs(1);
                rv = Some(r);
            }
            Ok(End::Relist) => {}
            Ok(End::Stop) => break,
            Err(e) => {
                debug!(kind = kind.singular(), namespace = ns, name, error = %e, "watch failed; relisting");
                pause(item, backoff);
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
    debug!(
        kind = kind.singular(),
        namespace = ns,
        name,
        "reflector stopped"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// The objectCacheItem rule: a lookup waits for the first list, but not once a list failed.
    #[test]
    fn lookups_wait_for_the_first_list_only() {
        let item = Item::new(None, Arc::default());
        let it = item.clone();
        let setter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            it.set(Known::Absent);
        });
        let t = Instant::now();
        assert_eq!(item.get(Duration::from_secs(10)), Known::Absent);
        assert!(t.elapsed() < Duration::from_secs(5));
        setter.join().unwrap();
        item.set(Known::Pending(Some("connection refused".into())));
        let t = Instant::now();
        assert_eq!(
            item.get(Duration::from_secs(10)),
            Known::Pending(Some("connection refused".into()))
        );
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(format!("{item:?}"), "Item { state: \"pending\" }");
    }

    /// A restored object answers while no list has answered; the first answer replaces it.
    #[test]
    fn a_restored_object_answers_until_a_list_does() {
        let stale = Arc::new(serde_json::json!({"data": {"k": "old"}}));
        let item = Item::new(Some(stale.clone()), Arc::default());
        assert!(item.pending());
        assert_eq!(item.get(Duration::ZERO), Known::Present(stale.clone()));
        item.set(Known::Pending(Some("connection refused".into())));
        let t = Instant::now();
        assert_eq!(
            item.get(Duration::from_secs(10)),
            Known::Present(stale.clone())
        );
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(item.checkpointed(), Some(stale));
        item.set(Known::Absent);
        assert_eq!(item.get(Duration::ZERO), Known::Absent);
        assert_eq!(item.checkpointed(), None);
    }

    #[test]
    fn the_watch_path_selects_the_object_by_name() {
        assert_eq!(
            path(Kind::Secret, "kube-system", "agent"),
            "/api/v1/namespaces/kube-system/secrets?fieldSelector=metadata.name%3Dagent"
        );
        assert_eq!(Kind::ConfigMap.singular(), "configmap");
    }
}
