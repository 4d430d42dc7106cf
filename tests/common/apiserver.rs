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
        self.objects.insert(key, obj.clone());
        (201, obj)
    }

    fn handle(&mut self, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
        let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        match (method, segs.as_slice()) {
            ("POST", ["api", "v1", "nodes"]) => self.create("/api/v1/nodes", body),
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
                (200, cur.clone())
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
                    let path = req.url().split('?').next().unwrap_or_default().to_string();
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
