//! A Kubernetes API server test double (plain HTTP, in memory) for the endpoints nanolet uses in
//! API-server mode. It keeps the wire format of the real one where nanolet can tell:
//! JSON objects with `metadata.uid`, `resourceVersion` (a global counter, as etcd's revision),
//! `creationTimestamp`; `Status` objects with `reason` and `code` for errors (404 NotFound,
//! 409 AlreadyExists / Conflict on a stale resourceVersion, 401 Unauthorized); JSON merge patch
//! (RFC 7386) on `/status`. `set_down(true)` makes it answer 503 to everything (an outage
//! without closing the port).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

#[derive(Default)]
struct State {
    objects: BTreeMap<String, Value>,
    rv: u64,
    /// (method, path) of every request, in order.
    requests: Vec<(String, String)>,
    /// Pod watch events as JSON lines, with the resourceVersion they happened at.
    events: Vec<(u64, String)>,
    /// Watches from a resourceVersion below this get 410 Gone (etcd compaction).
    compacted: u64,
    watchers: Vec<std::sync::mpsc::Sender<String>>,
}

fn is_pod_key(key: &str) -> bool {
    key.starts_with("/api/v1/namespaces/") && key.contains("/pods/")
}

/// A watch body: JSON lines from a channel until the deadline or the channel closes.
struct WatchBody {
    rx: std::sync::mpsc::Receiver<String>,
    deadline: std::time::Instant,
    buf: Vec<u8>,
}

impl std::io::Read for WatchBody {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.buf.is_empty() {
            let left = self
                .deadline
                .saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(0);
            }
            match self.rx.recv_timeout(left) {
                Ok(line) => {
                    // tiny_http's chunked encoder sends its 8 KiB buffer only when more data
                    // arrives: pad each event (line, newline, spaces) to k * 8192 + 1 bytes so
                    // the line goes out at once, as a real API server flushes per event. The
                    // one space left over leads the next line (JSON allows it).
                    self.buf = line.into_bytes();
                    self.buf.push(b'\n');
                    let k = self.buf.len().div_ceil(8192);
                    let total = k * 8192 + 1;
                    self.buf.resize(total, b' ');
                }
                Err(_) => return Ok(0),
            }
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf[..n]);
        self.buf.drain(..n);
        Ok(n)
    }
}

pub struct FakeApiServer {
    server: Arc<tiny_http::Server>,
    state: Arc<Mutex<State>>,
    down: Arc<AtomicBool>,
    pub port: u16,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            if let Value::Object(t) = target {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

impl State {
    fn next_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    /// Records a pod event and sends it to the open watches.
    fn pod_event(&mut self, kind: &str, obj: &Value) {
        let line = json!({"type": kind, "object": obj}).to_string();
        self.events.push((self.rv, line.clone()));
        self.watchers.retain(|w| w.send(line.clone()).is_ok());
    }

    fn pod_list(&self) -> Value {
        let items: Vec<Value> = self
            .objects
            .iter()
            .filter(|(k, _)| is_pod_key(k))
            .map(|(_, v)| v.clone())
            .collect();
        json!({"kind": "PodList", "apiVersion": "v1",
               "metadata": {"resourceVersion": self.rv.to_string()}, "items": items})
    }

    /// Opens a watch from `from`: the events after it, then live ones; 410 when compacted.
    fn watch(&mut self, from: u64) -> std::sync::mpsc::Receiver<String> {
        let (tx, rx) = std::sync::mpsc::channel();
        if from < self.compacted {
            let _ = tx.send(
                json!({"type": "ERROR", "object": status(410, "Expired", "too old resource version").1})
                    .to_string(),
            );
            return rx;
        }
        for (rv, line) in &self.events {
            if *rv > from {
                let _ = tx.send(line.clone());
            }
        }
        self.watchers.push(tx);
        rx
    }

    fn create(&mut self, collection: &str, mut obj: Value) -> (u16, Value) {
        let Some(name) = obj["metadata"]["name"].as_str().map(String::from) else {
            return status(422, "Invalid", "metadata.name: Required value");
        };
        let key = format!("{collection}/{name}");
        if self.objects.contains_key(&key) {
            return status(409, "AlreadyExists", &format!("\"{name}\" already exists"));
        }
        let rv = self.next_rv();
        obj["metadata"]["uid"] = json!(format!("{:08x}-0000-4000-8000-{:012x}", self.rv, self.rv));
        obj["metadata"]["resourceVersion"] = json!(rv);
        obj["metadata"]["creationTimestamp"] = json!("2026-11-22T00:00:00Z");
        if is_pod_key(&key) {
            self.objects.insert(key, obj.clone());
            self.pod_event("ADDED", &obj);
        } else {
            self.objects.insert(key, obj.clone());
        }
        (201, obj)
    }

    fn handle(&mut self, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
        let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        match (method, segs.as_slice()) {
            ("POST", ["api", "v1", "nodes"]) => self.create("/api/v1/nodes", body),
            ("POST", ["api", "v1", "namespaces", ns, "pods"]) => {
                let mut body = body;
                body["metadata"]["namespace"] = json!(ns);
                self.create(&format!("/api/v1/namespaces/{ns}/pods"), body)
            }
            ("GET", ["api", "v1", "pods"]) => (200, self.pod_list()),
            ("DELETE", ["api", "v1", "namespaces", _, "pods", _]) => {
                // Graceful deletion: the object stays with deletionTimestamp until the kubelet
                // (here: nanolet) or the test removes it.
                let Some(cur) = self.objects.get(path).cloned() else {
                    return status(404, "NotFound", &format!("{path} not found"));
                };
                let mut obj = cur;
                obj["metadata"]["deletionTimestamp"] = json!("2026-11-22T00:00:30Z");
                obj["metadata"]["deletionGracePeriodSeconds"] = json!(30);
                obj["metadata"]["resourceVersion"] = json!(self.next_rv());
                self.objects.insert(path.to_string(), obj.clone());
                self.pod_event("MODIFIED", &obj);
                (200, obj)
            }
            (
                "POST",
                [
                    "apis",
                    "coordination.k8s.io",
                    "v1",
                    "namespaces",
                    ns,
                    "leases",
                ],
            ) => self.create(
                &format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"),
                body,
            ),
            ("GET", _) => match self.objects.get(path) {
                Some(o) => (200, o.clone()),
                None => status(404, "NotFound", &format!("{path} not found")),
            },
            ("PUT", _) => {
                let Some(cur) = self.objects.get(path) else {
                    return status(404, "NotFound", &format!("{path} not found"));
                };
                if body["metadata"]["resourceVersion"] != cur["metadata"]["resourceVersion"] {
                    return status(
                        409,
                        "Conflict",
                        "the object has been modified; please apply your changes to the latest version and try again",
                    );
                }
                let mut obj = body;
                obj["metadata"]["uid"] = cur["metadata"]["uid"].clone();
                obj["metadata"]["creationTimestamp"] = cur["metadata"]["creationTimestamp"].clone();
                obj["metadata"]["resourceVersion"] = json!(self.next_rv());
                self.objects.insert(path.to_string(), obj.clone());
                (200, obj)
            }
            ("PATCH", [.., "status"]) => {
                let key = path.trim_end_matches("/status").to_string();
                let Some(cur) = self.objects.get_mut(&key) else {
                    return status(404, "NotFound", &format!("{key} not found"));
                };
                let patch = json!({"status": body["status"].clone()});
                merge_patch(cur, &patch);
                self.rv += 1;
                cur["metadata"]["resourceVersion"] = json!(self.rv.to_string());
                let obj = cur.clone();
                if is_pod_key(&key) {
                    self.pod_event("MODIFIED", &obj);
                }
                (200, obj)
            }
            ("DELETE", _) => match self.objects.remove(path) {
                Some(o) => (200, o),
                None => status(404, "NotFound", &format!("{path} not found")),
            },
            _ => status(405, "MethodNotAllowed", &format!("{method} {path}")),
        }
    }
}

impl FakeApiServer {
    /// Starts the double; requests must carry `Authorization: Bearer <token>`.
    pub fn start(token: &str) -> FakeApiServer {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("fake apiserver"));
        let port = server.server_addr().to_ip().expect("addr").port();
        let state = Arc::new(Mutex::new(State::default()));
        let down = Arc::new(AtomicBool::new(false));
        let thread = {
            let (server, state, down) = (server.clone(), state.clone(), down.clone());
            let want = format!("Bearer {token}");
            std::thread::spawn(move || {
                for mut req in server.incoming_requests() {
                    let method = req.method().as_str().to_string();
                    let url = req.url().to_string();
                    let path = url.split('?').next().unwrap_or_default().to_string();
                    let query = url
                        .split_once('?')
                        .map(|(_, q)| q.to_string())
                        .unwrap_or_default();
                    let param = |k: &str| {
                        query
                            .split('&')
                            .find_map(|kv| kv.strip_prefix(&format!("{k}=")).map(String::from))
                    };
                    if method == "GET" && param("watch").as_deref() == Some("1") {
                        let from = param("resourceVersion")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        let secs = param("timeoutSeconds")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(60u64);
                        let rx = {
                            let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
                            st.requests.push((method.clone(), path.clone()));
                            if down.load(Ordering::SeqCst) {
                                None
                            } else {
                                Some(st.watch(from))
                            }
                        };
                        std::thread::spawn(move || {
                            let _ = match rx {
                                Some(rx) => req.respond(tiny_http::Response::new(
                                    200.into(),
                                    vec![
                                        tiny_http::Header::from_bytes(
                                            &b"Content-Type"[..],
                                            &b"application/json"[..],
                                        )
                                        .expect("header"),
                                    ],
                                    WatchBody {
                                        rx,
                                        deadline: std::time::Instant::now()
                                            + std::time::Duration::from_secs(secs),
                                        buf: vec![],
                                    },
                                    None,
                                    None,
                                )),
                                None => req.respond(
                                    tiny_http::Response::from_string("down").with_status_code(503),
                                ),
                            };
                        });
                        continue;
                    }
                    let mut body = Vec::new();
                    let _ = std::io::Read::read_to_end(req.as_reader(), &mut body);
                    let authed = req
                        .headers()
                        .iter()
                        .any(|h| h.field.equiv("Authorization") && h.value.as_str() == want);
                    let (code, v) = {
                        let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
                        st.requests.push((method.clone(), path.clone()));
                        if down.load(Ordering::SeqCst) {
                            status(503, "ServiceUnavailable", "the server is down (test)")
                        } else if !authed {
                            status(401, "Unauthorized", "Unauthorized")
                        } else {
                            st.handle(&method, &path, &body)
                        }
                    };
                    let resp = tiny_http::Response::from_string(v.to_string())
                        .with_status_code(code)
                        .with_header(
                            tiny_http::Header::from_bytes(
                                &b"Content-Type"[..],
                                &b"application/json"[..],
                            )
                            .expect("header"),
                        );
                    let _ = req.respond(resp);
                }
            })
        };
        FakeApiServer {
            server,
            state,
            down,
            port,
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn get(&self, path: &str) -> Option<Value> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .objects
            .get(path)
            .cloned()
    }

    pub fn delete(&self, path: &str) {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .objects
            .remove(path);
    }

    /// How many requests matched `method` and `path`.
    pub fn count(&self, method: &str, path: &str) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .requests
            .iter()
            .filter(|(m, p)| m == method && p == path)
            .count()
    }

    /// Compacts: every open watch gets `ERROR 410 Gone` and ends; watches from an older
    /// resourceVersion are refused the same way (clients must relist).
    pub fn expire_watches(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.compacted = st.rv + 1;
        let line = json!({"type": "ERROR", "object": status(410, "Expired", "too old resource version").1})
            .to_string();
        for w in st.watchers.drain(..) {
            let _ = w.send(line.clone());
        }
        st.events.clear();
    }

    /// Creates a pod as `kubectl apply` would (POST to the namespace's pods).
    pub fn create_pod(&self, ns: &str, pod: Value) -> Value {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut pod = pod;
        pod["metadata"]["namespace"] = json!(ns);
        st.create(&format!("/api/v1/namespaces/{ns}/pods"), pod).1
    }

    /// Deletes a pod gracefully (sets deletionTimestamp), as `kubectl delete pod` does.
    pub fn delete_pod(&self, ns: &str, name: &str) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.handle(
            "DELETE",
            &format!("/api/v1/namespaces/{ns}/pods/{name}"),
            b"",
        );
    }

    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// A kubeconfig for this server with `token`, written to `path`.
    pub fn write_kubeconfig(&self, path: &std::path::Path, token: &str) {
        std::fs::write(
            path,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: fake\n  cluster:\n    server: {}\ncontexts:\n- name: test\n  context: {{cluster: fake, user: node}}\nusers:\n- name: node\n  user:\n    token: {token}\n",
                self.url()
            ),
        )
        .expect("write kubeconfig");
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
