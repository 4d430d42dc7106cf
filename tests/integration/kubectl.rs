//! The API-server test double (tests/support/src/apiserver.rs): its wire format checked request by
//! request, then its fidelity proven with the real `kubectl` binary (get, apply, delete,
//! get -w). No containerd: only the double, kubectl and nanolet's API client.
//!
//! Each assertion names the upstream kube-apiserver / kubectl behaviour it mirrors.

use nanolet_test_support as support;

use std::io::{BufRead, Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::apiserver::{FakeApiServer, parse_rfc3339};
use support::kubectl::Kubectl;
use support::wait_for;

const TOKEN: &str = "kubectl-t0ken";

/// One HTTP/1.1 request with `Connection: close`; (status, JSON body).
fn call(api: &FakeApiServer, method: &str, path: &str, ctype: &str, body: &str) -> (u16, Value) {
    call_as(api, method, path, ctype, body, TOKEN)
}

fn call_as(
    api: &FakeApiServer,
    method: &str,
    path: &str,
    ctype: &str,
    body: &str,
    token: &str,
) -> (u16, Value) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", api.port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nContent-Type: {ctype}\r\nAccept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").expect("http response");
    let code: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut r = rest;
        while let Some((size, tail)) = r.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            out.push_str(&tail[..n]);
            r = &tail[n + 2..];
        }
        out
    } else {
        rest.to_string()
    };
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

fn post_pod(api: &FakeApiServer, ns: &str, pod: &Value) -> (u16, Value) {
    call(
        api,
        "POST",
        &format!("/api/v1/namespaces/{ns}/pods"),
        "application/json",
        &pod.to_string(),
    )
}

fn pod(name: &str, node: Option<&str>) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "localhost/busybox:1.36"}]}
    });
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    p
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Create as kube-apiserver: server-set uid/creationTimestamp/resourceVersion and defaults,
/// ownerReferences kept, 409 AlreadyExists, generateName, 404 for a missing namespace,
/// 400 for a namespace mismatch, 401 without the token.
#[test]
fn create_sets_server_fields_and_refuses_duplicates() {
    let api = FakeApiServer::start(TOKEN);
    let mut p = pod("web", Some("node1"));
    p["metadata"]["uid"] = json!("client-chosen");
    p["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "Node", "name": "node1", "uid": "n-1"}]);
    let (code, created) = post_pod(&api, "default", &p);
    assert_eq!(code, 201, "{created}");
    let meta = &created["metadata"];
    assert_ne!(meta["uid"], "client-chosen", "the server sets the uid");
    assert_eq!(meta["uid"].as_str().map(str::len), Some(36), "a UUID");
    assert!(
        meta["resourceVersion"]
            .as_str()
            .is_some_and(|r| r.parse::<u64>().is_ok())
    );
    let created_at = meta["creationTimestamp"]
        .as_str()
        .and_then(parse_rfc3339)
        .expect("creationTimestamp");
    assert!((created_at - now()).abs() <= 2);
    assert_eq!(meta["ownerReferences"][0]["uid"], "n-1");
    assert_eq!(created["kind"], "Pod");
    // The apiserver's defaults (pkg/apis/core/v1/defaults.go).
    assert_eq!(created["spec"]["terminationGracePeriodSeconds"], 30);
    assert_eq!(created["spec"]["restartPolicy"], "Always");
    assert_eq!(
        created["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert_eq!(created["status"]["phase"], "Pending");

    let (code, dup) = post_pod(&api, "default", &pod("web", None));
    assert_eq!(code, 409);
    assert_eq!(dup["reason"], "AlreadyExists");
    assert_eq!(dup["message"], "pods \"web\" already exists");
    assert_eq!(dup["details"]["name"], "web");

    let mut g = pod("", None);
    g["metadata"] = json!({"generateName": "web-"});
    let (code, gen1) = post_pod(&api, "default", &g);
    let (_, gen2) = post_pod(&api, "default", &g);
    assert_eq!(code, 201);
    let n1 = gen1["metadata"]["name"].as_str().unwrap_or("");
    assert!(n1.starts_with("web-") && n1.len() == 9, "{n1}");
    assert_ne!(gen1["metadata"]["name"], gen2["metadata"]["name"]);

    let (code, nf) = post_pod(&api, "nope", &pod("x", None));
    assert_eq!(
        (code, nf["message"].as_str()),
        (404, Some("namespaces \"nope\" not found"))
    );
    let mut other = pod("y", None);
    other["metadata"]["namespace"] = json!("kube-system");
    assert_eq!(post_pod(&api, "default", &other).0, 400);
    let (code, unauth) = call_as(&api, "GET", "/api/v1/pods", "application/json", "", "wrong");
    assert_eq!(
        (code, unauth["reason"].as_str()),
        (401, Some("Unauthorized"))
    );
}

/// Graceful deletion as the pod registry (pkg/registry/core/pod/strategy.go
/// CheckGracefulDelete + the generic store's BeforeDelete): a bound pod with grace > 0 gets
/// deletionTimestamp = now + grace and deletionGracePeriodSeconds and stays (200 with the
/// pod); the grace is the request's, else spec.terminationGracePeriodSeconds; a later delete
/// may only shorten it; grace 0 removes it; an unbound pod is removed at once; a UID or
/// resourceVersion precondition that does not match is 409 Conflict.
#[test]
fn delete_is_graceful_for_bound_pods_and_checks_preconditions() {
    let api = FakeApiServer::start(TOKEN);
    let (_, bound) = post_pod(&api, "default", &pod("bound", Some("node1")));
    let uid = bound["metadata"]["uid"].as_str().unwrap_or("").to_string();
    let path = "/api/v1/namespaces/default/pods/bound";

    let (code, marked) = call(&api, "DELETE", path, "application/json", "");
    assert_eq!(code, 200, "{marked}");
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 30);
    let at = marked["metadata"]["deletionTimestamp"]
        .as_str()
        .and_then(parse_rfc3339)
        .expect("deletionTimestamp");
    assert!(
        (at - (now() + 30)).abs() <= 2,
        "deletionTimestamp = now + 30 s"
    );
    assert!(
        api.get(path).is_some(),
        "the pod stays until the kubelet's final delete"
    );
    assert_ne!(
        marked["metadata"]["resourceVersion"],
        bound["metadata"]["resourceVersion"]
    );

    // A longer grace does not extend it; a shorter one (query parameter) shortens it.
    let (_, same) = call(
        &api,
        "DELETE",
        path,
        "application/json",
        r#"{"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":60}"#,
    );
    assert_eq!(same["metadata"]["deletionGracePeriodSeconds"], 30);
    let (_, shorter) = call(
        &api,
        "DELETE",
        &format!("{path}?gracePeriodSeconds=5"),
        "application/json",
        "",
    );
    assert_eq!(shorter["metadata"]["deletionGracePeriodSeconds"], 5);

    // The kubelet's final delete: grace 0 with a UID precondition.
    let (code, c) = call(
        &api,
        "DELETE",
        path,
        "application/json",
        r#"{"gracePeriodSeconds":0,"preconditions":{"uid":"not-the-uid"}}"#,
    );
    assert_eq!(code, 409);
    assert_eq!(c["reason"], "Conflict");
    assert_eq!(
        c["message"],
        format!(
            "Operation cannot be fulfilled on pods \"bound\": Precondition failed: UID in precondition: not-the-uid, UID in object meta: {uid}"
        )
    );
    let (code, c) = call(
        &api,
        "DELETE",
        path,
        "application/json",
        r#"{"preconditions":{"resourceVersion":"1"}}"#,
    );
    assert_eq!(code, 409);
    assert!(
        c["message"]
            .as_str()
            .is_some_and(|m| m.contains("Precondition failed: ResourceVersion in precondition: 1"))
    );
    assert!(
        api.get(path).is_some(),
        "a failed precondition deletes nothing"
    );
    let (code, gone) = call(
        &api,
        "DELETE",
        path,
        "application/json",
        &json!({"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}).to_string(),
    );
    assert_eq!(
        (code, gone["metadata"]["name"].as_str()),
        (200, Some("bound"))
    );
    assert!(api.get(path).is_none());
    let (code, nf) = call(&api, "GET", path, "application/json", "");
    assert_eq!((code, nf["reason"].as_str()), (404, Some("NotFound")));

    // The pod's own terminationGracePeriodSeconds is the default grace.
    let mut short = pod("short", Some("node1"));
    short["spec"]["terminationGracePeriodSeconds"] = json!(3);
    post_pod(&api, "default", &short);
    let marked = api.delete_pod("default", "short");
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 3);

    // Unscheduled: deleted at once, whatever the grace.
    post_pod(&api, "default", &pod("unbound", None));
    let (code, _) = call(
        &api,
        "DELETE",
        "/api/v1/namespaces/default/pods/unbound",
        "application/json",
        "",
    );
    assert_eq!(code, 200);
    assert!(api.get("/api/v1/namespaces/default/pods/unbound").is_none());

    // The request log lets tests check what a client sent.
    let last_delete = api
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.method == "DELETE" && r.path == path)
        .expect("logged");
    assert_eq!(last_delete.json()["preconditions"]["uid"], json!(uid));
}

/// The status subresource: a strategic merge patch merges status.conditions by their
/// patchMergeKey `type` and replaces status.containerStatuses (no merge key upstream:
/// `listType=atomic` in k8s.io/api core/v1 PodStatus); a JSON merge patch replaces lists; a
/// patch to /status cannot change the spec; a PUT with a stale resourceVersion is 409; a patch
/// that changes nothing does not bump the resourceVersion.
#[test]
fn status_patches_merge_like_the_apiserver() {
    let api = FakeApiServer::start(TOKEN);
    post_pod(&api, "default", &pod("p", Some("node1")));
    let st = "/api/v1/namespaces/default/pods/p/status";
    let smp = "application/strategic-merge-patch+json";
    let (code, a) = call(
        &api,
        "PATCH",
        st,
        smp,
        &json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}],
            "containerStatuses": [{"name": "c", "ready": false, "restartCount": 0}]},
            "spec": {"nodeName": "elsewhere"}})
        .to_string(),
    );
    assert_eq!(code, 200, "{a}");
    assert_eq!(a["spec"]["nodeName"], "node1", "/status ignores the spec");
    let (_, b) = call(
        &api,
        "PATCH",
        st,
        smp,
        &json!({"status": {"conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "c", "ready": true}]}})
        .to_string(),
    );
    let conds = b["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(conds.len(), 2, "merged by type: {conds:?}");
    assert!(
        conds
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    );
    assert!(conds.iter().any(|c| c["type"] == "Initialized"));
    assert_eq!(b["status"]["phase"], "Running");
    assert_eq!(
        b["status"]["containerStatuses"],
        json!([{"name": "c", "ready": true}]),
        "containerStatuses is atomic: replaced"
    );
    // `$patch: delete` removes one condition by its key.
    let (_, c) = call(
        &api,
        "PATCH",
        st,
        smp,
        r#"{"status":{"conditions":[{"type":"Initialized","$patch":"delete"}]}}"#,
    );
    assert_eq!(
        c["status"]["conditions"],
        json!([{"type": "Ready", "status": "True"}])
    );
    // JSON merge patch: lists are replaced.
    let (_, d) = call(
        &api,
        "PATCH",
        st,
        "application/merge-patch+json",
        r#"{"status":{"conditions":[{"type":"PodScheduled","status":"True"}]}}"#,
    );
    assert_eq!(
        d["status"]["conditions"],
        json!([{"type": "PodScheduled", "status": "True"}])
    );
    // Nothing changed: no write.
    let (_, e) = call(
        &api,
        "PATCH",
        st,
        "application/merge-patch+json",
        r#"{"status":{"phase":"Running"}}"#,
    );
    assert_eq!(
        e["metadata"]["resourceVersion"],
        d["metadata"]["resourceVersion"]
    );
    // PUT /status with a stale resourceVersion.
    let mut stale = d.clone();
    stale["metadata"]["resourceVersion"] = a["metadata"]["resourceVersion"].clone();
    stale["status"]["phase"] = json!("Failed");
    let (code, conflict) = call(&api, "PUT", st, "application/json", &stale.to_string());
    assert_eq!((code, conflict["reason"].as_str()), (409, Some("Conflict")));
    let mut fresh = d.clone();
    fresh["status"]["phase"] = json!("Succeeded");
    let (code, put) = call(&api, "PUT", st, "application/json", &fresh.to_string());
    assert_eq!(
        (code, put["status"]["phase"].as_str()),
        (200, Some("Succeeded"))
    );
    // Unsupported patch types: 415, as for JSON patch without support.
    assert_eq!(
        call(&api, "PATCH", st, "application/json-patch+json", "[]").0,
        415
    );
    // ValidatePodUpdate: the spec is immutable but for images.
    let (code, inv) = call(
        &api,
        "PATCH",
        "/api/v1/namespaces/default/pods/p",
        smp,
        r#"{"spec":{"containers":[{"name":"c","command":["sh"]}]}}"#,
    );
    assert_eq!((code, inv["reason"].as_str()), (422, Some("Invalid")));
    let (code, img) = call(
        &api,
        "PATCH",
        "/api/v1/namespaces/default/pods/p",
        smp,
        r#"{"spec":{"$setElementOrder/containers":[{"name":"c"}],"containers":[{"name":"c","image":"localhost/busybox:1.37"}]}}"#,
    );
    assert_eq!(code, 200, "{img}");
    assert_eq!(
        img["spec"]["containers"][0]["image"],
        "localhost/busybox:1.37"
    );
    assert_eq!(img["spec"]["containers"][0]["name"], "c");
    assert_eq!(
        img["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
}

/// Watch lines from nanolet's API client (the consumer the double serves), as a channel.
fn watch(api: &FakeApiServer, query: &str) -> Receiver<Value> {
    let client = api.client(TOKEN);
    let (tx, rx) = std::sync::mpsc::channel();
    let before = api.requests().len();
    let path = format!("/api/v1/pods?{query}");
    std::thread::spawn(move || {
        let Ok(r) = client.stream(&path) else { return };
        for line in std::io::BufReader::new(r).lines() {
            let Ok(line) = line else { return };
            if line.trim().is_empty() {
                continue;
            }
            let Ok(v) = serde_json::from_str::<Value>(line.trim()) else {
                return;
            };
            if tx.send(v).is_err() {
                return;
            }
        }
    });
    // The watch is registered in the same step the double logs the request.
    wait_for(Duration::from_secs(10), || {
        (api.requests().len() > before).then_some(())
    })
    .expect("watch opened");
    rx
}

fn next(rx: &Receiver<Value>) -> Value {
    rx.recv_timeout(Duration::from_secs(10))
        .expect("a watch event within 10 s")
}

fn ev(v: &Value) -> (String, String) {
    (
        v["type"].as_str().unwrap_or("").to_string(),
        v["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string(),
    )
}

/// Watch semantics of kube-apiserver's watch cache: from a resourceVersion, every later event;
/// `fieldSelector` / `labelSelector` filter, and an object leaving the selector arrives as
/// DELETED (entering: ADDED); resourceVersion "0" starts with synthetic ADDED events; bookmarks
/// carry the current resourceVersion and only go to watches that asked; a compacted
/// resourceVersion is an ERROR event with a 410 Expired Status; timeoutSeconds ends the stream.
#[test]
fn watch_replays_filters_bookmarks_and_expires() {
    let api = FakeApiServer::start(TOKEN);
    post_pod(&api, "default", &pod("a", Some("node1")));
    let after_a = api.resource_version();
    post_pod(&api, "default", &pod("b", Some("node2")));
    post_pod(&api, "kube-system", &pod("c", Some("node1")));

    // Replay after RV, filtered by node.
    let rx = watch(
        &api,
        &format!(
            "fieldSelector=spec.nodeName%3Dnode1&watch=true&allowWatchBookmarks=true&resourceVersion={after_a}"
        ),
    );
    assert_eq!(
        ev(&next(&rx)),
        ("ADDED".into(), "c".into()),
        "b is on node2"
    );
    // Live: a status change, then the pod moves out of the selector (DELETED).
    api.modify("/api/v1/namespaces/default/pods/a", |p| {
        p["status"]["phase"] = json!("Running")
    });
    let m = next(&rx);
    assert_eq!(ev(&m), ("MODIFIED".into(), "a".into()));
    assert_eq!(m["object"]["status"]["phase"], "Running");
    api.modify("/api/v1/namespaces/default/pods/a", |p| {
        p["spec"]["nodeName"] = json!("node3")
    });
    let d = next(&rx);
    assert_eq!(ev(&d), ("DELETED".into(), "a".into()));
    assert_eq!(
        d["object"]["spec"]["nodeName"], "node1",
        "the previous content"
    );
    assert_eq!(
        d["object"]["metadata"]["resourceVersion"],
        json!(api.resource_version().to_string())
    );
    // Bookmarks on demand carry the current resourceVersion.
    api.send_bookmarks();
    let bm = next(&rx);
    assert_eq!(bm["type"], "BOOKMARK");
    assert_eq!(bm["object"]["kind"], "Pod");
    assert_eq!(
        bm["object"]["metadata"]["resourceVersion"],
        json!(api.resource_version().to_string())
    );

    // resourceVersion=0: synthetic ADDED for the current state; labelSelector.
    post_pod(&api, "default", &{
        let mut p = pod("other", Some("node1"));
        p["metadata"]["labels"] = json!({"app": "db"});
        p
    });
    assert_eq!(ev(&next(&rx)), ("ADDED".into(), "other".into()));
    let rx0 = watch(&api, "labelSelector=app%3Dweb&watch=1&resourceVersion=0");
    let mut names: Vec<String> = (0..3).map(|_| ev(&next(&rx0)).1).collect();
    names.sort();
    assert_eq!(names, ["a", "b", "c"], "'other' has app=db");
    api.send_bookmarks();
    assert_eq!(next(&rx)["type"], "BOOKMARK", "rx allowed bookmarks");
    api.create_pod("default", pod("d", None));
    assert_eq!(
        ev(&next(&rx0)),
        ("ADDED".into(), "d".into()),
        "no bookmark without allowWatchBookmarks"
    );

    // Periodic bookmarks.
    api.set_bookmark_interval(Duration::from_millis(300));
    let rxb = watch(
        &api,
        &format!(
            "watch=true&allowWatchBookmarks=true&resourceVersion={}",
            api.resource_version()
        ),
    );
    let t0 = Instant::now();
    assert_eq!(next(&rxb)["type"], "BOOKMARK");
    assert!(t0.elapsed() < Duration::from_secs(5));

    // Compaction: the open watches end with 410, and so does a watch from an old RV.
    api.expire_watches();
    let e = next(&rx);
    assert_eq!(e["type"], "ERROR");
    assert_eq!(e["object"]["code"], 410);
    assert_eq!(e["object"]["reason"], "Expired");
    let old = watch(&api, &format!("watch=true&resourceVersion={after_a}"));
    let e = next(&old);
    assert_eq!(
        (e["type"].as_str(), e["object"]["code"].as_i64()),
        (Some("ERROR"), Some(410))
    );

    // timeoutSeconds ends the stream (the channel closes). The clock starts before the
    // request: the server's deadline does too.
    let t0 = Instant::now();
    let short = watch(
        &api,
        &format!(
            "watch=true&timeoutSeconds=1&resourceVersion={}",
            api.resource_version()
        ),
    );
    assert!(short.recv_timeout(Duration::from_secs(10)).is_err());
    assert!(t0.elapsed() >= Duration::from_millis(900));
    assert!(t0.elapsed() < Duration::from_secs(9));

    // List with selectors.
    let (_, list) = call(
        &api,
        "GET",
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode1,metadata.name%21%3Dother",
        "application/json",
        "",
    );
    assert_eq!(list["kind"], "PodList");
    let names: Vec<&str> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["c"]);
    assert!(
        list["items"][0].get("kind").is_none(),
        "list items carry no kind"
    );
    let (code, bad) = call(
        &api,
        "GET",
        "/api/v1/pods?fieldSelector=spec.bogus%3Dx",
        "application/json",
        "",
    );
    assert_eq!(
        (code, bad["message"].as_str()),
        (400, Some("field label not supported: spec.bogus"))
    );
}

// ---------------------------------------------------------------------------------------------
// The real kubectl against the double.

/// A running `kubectl ... -w`: stdout lines as they come; killed on drop.
struct Streaming {
    child: std::process::Child,
    lines: Receiver<String>,
}

impl Streaming {
    fn start(k: &Kubectl, args: &[&str]) -> Streaming {
        let mut child = k
            .cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn kubectl");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines() {
                let Ok(l) = l else { return };
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        Streaming { child, lines }
    }

    fn next(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(15))
            .expect("kubectl printed a line within 15 s")
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn has_kubectl() -> bool {
    Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn cols(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// `kubectl get`: server-side Tables with the apiserver printers' columns
/// (pkg/printers/internalversion: pods NAME READY STATUS RESTARTS AGE, -o wide adds IP NODE
/// NOMINATED NODE READINESS GATES; nodes NAME STATUS ROLES AGE VERSION; leases NAME HOLDER
/// AGE), `-o json` the List with kind/apiVersion, a missing pod `Error from server (NotFound)`.
#[test]
fn kubectl_get_prints_what_a_cluster_prints() {
    assert!(
        has_kubectl(),
        "kubectl not installed (scripts/install-deps.sh)"
    );
    let api = FakeApiServer::start(TOKEN);
    let k = Kubectl::new(&api, TOKEN);
    assert_eq!(
        k.ok(&["get", "pods"]).trim(),
        "",
        "no pods: nothing on stdout"
    );
    api.create_pod("default", pod("web", Some("node1")));
    api.modify("/api/v1/namespaces/default/pods/web", |p| {
        p["status"] = json!({"phase": "Running", "podIP": "10.1.0.5",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "c", "ready": true, "restartCount": 2,
                "state": {"running": {"startedAt": "2026-11-22T00:00:00Z"}}}]});
    });
    api.create_pod("default", pod("pending", None));

    let out = k.ok(&["get", "pods"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        cols(lines[0]),
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{out}"
    );
    assert_eq!(
        cols(lines[1])[..4],
        ["pending", "0/1", "Pending", "0"],
        "{out}"
    );
    assert_eq!(cols(lines[2])[..4], ["web", "1/1", "Running", "2"], "{out}");
    assert!(cols(lines[2])[4].ends_with('s'), "AGE in seconds: {out}");

    let wide = k.ok(&["get", "pod", "web", "-o", "wide"]);
    let w: Vec<&str> = wide.lines().collect();
    assert_eq!(
        cols(w[0]),
        [
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED",
            "NODE",
            "READINESS",
            "GATES"
        ],
        "{wide}"
    );
    assert_eq!(
        cols(w[1])[5..],
        ["10.1.0.5", "node1", "<none>", "<none>"],
        "{wide}"
    );

    let json_out: Value =
        serde_json::from_str(&k.ok(&["get", "pods", "-o", "json"])).expect("json");
    assert_eq!(json_out["kind"], "List");
    assert_eq!(json_out["items"][1]["metadata"]["name"], "web");
    assert_eq!(json_out["items"][1]["kind"], "Pod");
    let one: Value =
        serde_json::from_str(&k.ok(&["get", "pod", "web", "-o", "json"])).expect("json");
    assert_eq!(one["status"]["podIP"], "10.1.0.5");

    let sel = k.ok(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "--field-selector",
        "spec.nodeName=node1",
        "-o",
        "name",
    ]);
    assert_eq!(sel.trim(), "pod/web");

    // All namespaces: the NAMESPACE column first, as the printer adds it.
    let all = k.ok(&["get", "pods", "-A"]);
    assert_eq!(
        cols(all.lines().next().unwrap_or(""))[..2],
        ["NAMESPACE", "NAME"],
        "{all}"
    );
    // describe: GET the pod, then list its events by involvedObject field selectors.
    let desc = k.ok(&["describe", "pod", "web"]);
    assert!(desc.contains("Node:") && desc.contains("node1"), "{desc}");
    assert!(desc.contains("Events:"), "{desc}");
    assert!(api.requests().iter().any(|r| {
        r.path == "/api/v1/namespaces/default/events"
            && r.param("fieldSelector")
                .is_some_and(|f| f.contains("involvedObject.name=web"))
    }));
    let ns = k.ok(&["get", "namespaces", "--no-headers"]);
    assert!(
        ns.lines()
            .any(|l| cols(l)[..2] == ["kube-node-lease", "Active"]),
        "{ns}"
    );

    let (ok, _, err) = k.run(&["get", "pod", "nope"]);
    assert!(!ok);
    assert!(
        err.contains("Error from server (NotFound): pods \"nope\" not found"),
        "{err}"
    );

    // Nodes and leases, as nanolet registers them.
    create(
        &api,
        "/api/v1/nodes",
        json!({"metadata": {"name": "node1", "labels": {
            "kubernetes.io/hostname": "node1", "node-role.kubernetes.io/edge": ""}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "192.168.1.9"}],
            "nodeInfo": {"kubeletVersion": "nanolet-0.1.0", "osImage": "Debian",
                "kernelVersion": "6.1", "containerRuntimeVersion": "containerd://1.6.20"}}}),
    );
    let nodes = k.ok(&["get", "nodes"]);
    let n: Vec<&str> = nodes.lines().collect();
    assert_eq!(
        cols(n[0]),
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        "{nodes}"
    );
    let row = cols(n[1]);
    assert_eq!(
        (row[0], row[1], row[2], row[4]),
        ("node1", "Ready", "edge", "nanolet-0.1.0")
    );
    let nw = k.ok(&["get", "node", "node1", "-o", "wide"]);
    assert!(
        nw.contains("192.168.1.9") && nw.contains("containerd://1.6.20"),
        "{nw}"
    );

    create(
        &api,
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
        json!({"metadata": {"name": "node1"},
               "spec": {"holderIdentity": "node1", "leaseDurationSeconds": 40}}),
    );
    let leases = k.ok(&["get", "lease", "-n", "kube-node-lease"]);
    let l: Vec<&str> = leases.lines().collect();
    assert_eq!(cols(l[0]), ["NAME", "HOLDER", "AGE"], "{leases}");
    assert_eq!(cols(l[1])[..2], ["node1", "node1"]);
}

fn create(api: &FakeApiServer, collection: &str, obj: Value) -> Value {
    let (code, v) = call(
        api,
        "POST",
        collection,
        "application/json",
        &obj.to_string(),
    );
    assert_eq!(code, 201, "{v}");
    v
}

const POD_YAML: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: applied\n  labels:\n    app: one\nspec:\n  nodeName: node1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '3600']\n";

/// `kubectl apply -f`: the first creates (POST, "pod/applied created"), the second with a
/// changed label GETs and sends a strategic merge patch with the last-applied annotation
/// ("pod/applied configured"); unchanged -> "unchanged" and no PATCH. `kubectl delete
/// --wait=false` marks the bound pod terminating (STATUS Terminating, as printPod shows a
/// deletionTimestamp); `--grace-period=0 --force` removes it at once.
#[test]
fn kubectl_apply_patches_and_delete_is_graceful() {
    assert!(
        has_kubectl(),
        "kubectl not installed (scripts/install-deps.sh)"
    );
    let api = FakeApiServer::start(TOKEN);
    let k = Kubectl::new(&api, TOKEN);
    let f = k.write("pod.yaml", POD_YAML);
    let f = f.to_str().unwrap_or_default();
    assert_eq!(k.ok(&["apply", "-f", f]).trim(), "pod/applied created");
    let path = "/api/v1/namespaces/default/pods/applied";
    let first = api.get(path).expect("created");
    assert_eq!(first["metadata"]["labels"]["app"], "one");
    assert!(
        first["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string()
    );

    assert_eq!(k.ok(&["apply", "-f", f]).trim(), "pod/applied unchanged");
    assert_eq!(api.count("PATCH", path), 0);

    k.write("pod.yaml", &POD_YAML.replace("app: one", "app: two"));
    assert_eq!(k.ok(&["apply", "-f", f]).trim(), "pod/applied configured");
    let patch = api
        .requests()
        .into_iter()
        .find(|r| r.method == "PATCH" && r.path == path)
        .expect("apply patched");
    assert_eq!(patch.content_type, "application/strategic-merge-patch+json");
    assert_eq!(patch.json()["metadata"]["labels"]["app"], "two");
    let second = api.get(path).expect("still there");
    assert_eq!(second["metadata"]["labels"]["app"], "two");
    assert_eq!(second["metadata"]["uid"], first["metadata"]["uid"]);
    assert_eq!(
        second["spec"]["containers"][0]["command"],
        json!(["sleep", "3600"])
    );

    // A new image goes through (containers merged by name); a new command is refused as
    // the apiserver refuses pod spec updates.
    k.write(
        "pod.yaml",
        &POD_YAML
            .replace("app: one", "app: two")
            .replace("1.36", "1.37"),
    );
    assert_eq!(k.ok(&["apply", "-f", f]).trim(), "pod/applied configured");
    let third = api.get(path).expect("there");
    assert_eq!(
        third["spec"]["containers"][0]["image"],
        "localhost/busybox:1.37"
    );
    assert_eq!(third["spec"]["containers"][0]["name"], "c");
    k.write(
        "pod.yaml",
        &POD_YAML
            .replace("3600", "7200")
            .replace("app: one", "app: two"),
    );
    let (ok, _, err) = k.run(&["apply", "-f", f]);
    assert!(
        !ok && err.contains("Forbidden: pod updates may not change fields"),
        "{err}"
    );

    // Graceful delete.
    let out = k.ok(&["delete", "pod", "applied", "--wait=false"]);
    assert_eq!(out.trim(), "pod \"applied\" deleted");
    let marked = api.get(path).expect("terminating, not gone");
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 30);
    let get = k.ok(&["get", "pod", "applied", "--no-headers"]);
    assert_eq!(cols(&get)[2], "Terminating", "{get}");
    let (ok, out, err) = k.run(&["delete", "pod", "applied", "--grace-period=0", "--force"]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("pod \"applied\" force deleted"), "{out}");
    assert!(err.contains("Immediate deletion does not wait"), "{err}");
    assert!(api.get(path).is_none());
    let (ok, _, err) = k.run(&["get", "pod", "applied"]);
    assert!(!ok && err.contains("NotFound"), "{err}");
}

/// `kubectl get pods -w` (server-side Table watch) prints the current rows, then one row per
/// change as it happens; `-w -o name` prints `pod/NAME` per event.
#[test]
fn kubectl_get_watch_prints_changes_as_they_happen() {
    assert!(
        has_kubectl(),
        "kubectl not installed (scripts/install-deps.sh)"
    );
    let api = FakeApiServer::start(TOKEN);
    let k = Kubectl::new(&api, TOKEN);
    api.create_pod("default", pod("first", Some("node1")));
    let w = Streaming::start(&k, &["get", "pods", "-w"]);
    assert_eq!(cols(&w.next())[..2], ["NAME", "READY"]);
    assert_eq!(cols(&w.next())[..3], ["first", "0/1", "Pending"]);
    let names = Streaming::start(&k, &["get", "pods", "--watch", "-o", "name"]);
    assert_eq!(names.next(), "pod/first");
    // The watch is open once kubectl's GET ...watch=true is logged.
    wait_for(Duration::from_secs(10), || {
        (api.requests()
            .iter()
            .filter(|r| r.param("watch").as_deref() == Some("true"))
            .count()
            >= 2)
            .then_some(())
    })
    .expect("both kubectl watches opened");

    api.create_pod("default", pod("second", Some("node1")));
    assert_eq!(cols(&w.next())[..3], ["second", "0/1", "Pending"]);
    assert_eq!(names.next(), "pod/second");
    api.modify("/api/v1/namespaces/default/pods/first", |p| {
        p["status"] = json!({"phase": "Running", "containerStatuses": [
            {"name": "c", "ready": true, "restartCount": 0, "state": {"running": {}}}]});
    });
    assert_eq!(cols(&w.next())[..3], ["first", "1/1", "Running"]);
    assert_eq!(names.next(), "pod/first");
    api.delete_pod("default", "first");
    assert_eq!(cols(&w.next())[..3], ["first", "1/1", "Terminating"]);
    api.delete("/api/v1/namespaces/default/pods/first");
    assert_eq!(cols(&w.next())[..3], ["first", "1/1", "Terminating"]);
}

// ---- issue 19: the double's TLS, CSR API, reviews and node proxy ----

use support::apiserver::{CLIENT_KUBELET, KUBELET_SERVING, base64_decode};
use support::{pki, tls};

fn csr_yaml(
    name: &str,
    pem: &str,
    signer: &str,
    usages: &[&str],
    expiration: Option<i64>,
) -> String {
    let us: Vec<String> = usages.iter().map(|u| format!("  - {u}")).collect();
    let exp = expiration.map_or(String::new(), |e| format!("  expirationSeconds: {e}\n"));
    format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: {name}\nspec:\n  request: {}\n  signerName: {signer}\n{exp}  usages:\n{}\n",
        support::apiserver::base64_encode(pem.as_bytes()),
        us.join("\n")
    )
}

fn issued(api: &FakeApiServer, name: &str) -> String {
    let v = api
        .get(&format!(
            "/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}"
        ))
        .expect("csr");
    let b = v["status"]["certificate"].as_str().unwrap_or("");
    String::from_utf8(base64_decode(b).unwrap_or_default()).unwrap_or_default()
}

/// kube-apiserver's authenticators over real TLS: a client certificate from the CA is its CN
/// with its Os as groups, a bootstrap token is system:bootstrap:<id> in
/// system:bootstrappers (the CSR's spec.username/groups, set by the server from the
/// requester), no credentials or a certificate from another CA -> 401 `Status`.
#[test]
fn tls_double_authenticates_like_kube_apiserver() {
    let api = FakeApiServer::start_tls(TOKEN);
    let ca = api.ca_cert_path();
    let alice = api.client_cert("alice", &["team-a"]);
    let two = api.client_cert("bob", &["g1", "g2"]);
    let der = tls::load_certs(&two.cert);
    assert_eq!(
        tls::subject(&der[0]),
        Some(("bob".to_string(), vec!["g1".to_string(), "g2".to_string()])),
        "one O per group, in order"
    );
    let ns = "/api/v1/namespaces/default";
    let (code, _) = tls::request(
        api.port,
        tls::test_client_config(Some(&alice), &ca),
        "GET",
        ns,
        &[],
        "",
    );
    assert_eq!(code, 200, "a client certificate from the CA authenticates");
    let (code, body) = tls::request(
        api.port,
        tls::test_client_config(None, &ca),
        "GET",
        ns,
        &[],
        "",
    );
    assert_eq!(code, 401, "no credentials: {body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap_or_default()["reason"],
        "Unauthorized"
    );
    let other = pki::Ca::new("another-ca");
    let mallory = other.issue(
        other.dir(),
        "m",
        "mallory",
        &["system:masters"],
        &[],
        &["client auth", "digital signature"],
    );
    let (code, _) = tls::request(
        api.port,
        tls::test_client_config(Some(&mallory), &ca),
        "GET",
        ns,
        &[],
        "",
    );
    assert_eq!(code, 401, "a certificate from another CA is not a user");
    let (code, _) = tls::request(
        api.port,
        tls::test_client_config(None, &ca),
        "GET",
        ns,
        &[("Authorization", "Bearer abcdef.0123456789abcdef")],
        "",
    );
    assert_eq!(code, 401, "an unknown bootstrap token");
    api.add_bootstrap_token("abcdef", "0123456789abcdef");

    let dir = tempfile::tempdir().expect("tmp");
    let (pem, _) = pki::make_csr(dir.path(), "n1", "system:node:n1", &["system:nodes"], &[]);
    // spec.username/groups sent by the client are overwritten by the server.
    let v = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},
        "spec": {"request": support::apiserver::base64_encode(pem.as_bytes()),
            "signerName": CLIENT_KUBELET, "usages": ["digital signature", "client auth"],
            "username": "forged", "groups": ["system:masters"]}});
    let (code, out) = tls::request(
        api.port,
        tls::test_client_config(None, &ca),
        "POST",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        &[
            ("Authorization", "Bearer abcdef.0123456789abcdef"),
            ("Content-Type", "application/json"),
        ],
        &v.to_string(),
    );
    assert_eq!(code, 201, "{out}");
    let csr: Value = serde_json::from_str(&out).unwrap_or_default();
    assert!(
        csr["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .starts_with("csr-"),
        "generateName: {csr}"
    );
    assert_eq!(
        csr["spec"]["username"], "system:bootstrap:abcdef",
        "the server sets the requester"
    );
    assert_eq!(
        csr["spec"]["groups"],
        json!(["system:bootstrappers", "system:authenticated"])
    );

    // nanolet's own API client (rustls, the kubeconfig's CA data), by token and by client
    // certificate.
    let ns = api
        .client(TOKEN)
        .get("/api/v1/namespaces/default")
        .expect("GET over https");
    assert_eq!(ns["metadata"]["name"], "default");
    let kc = dir.path().join("kc");
    api.write_kubeconfig_cert(&kc, &api.client_cert("system:node:n1", &["system:nodes"]));
    let kc = nanolet::apiclient::kubeconfig::Kubeconfig::load(&kc).expect("kubeconfig");
    let c =
        nanolet::apiclient::client::ApiClient::new(&kc, Duration::from_secs(10)).expect("client");
    let csrs = c
        .get("/apis/certificates.k8s.io/v1/certificatesigningrequests")
        .expect("GET with a client certificate");
    assert_eq!(csrs["items"].as_array().map(Vec::len), Some(1), "{csrs}");

    // The real kubectl with a client certificate: `kubectl auth whoami` (SelfSubjectReview)
    // shows the CN as user and the Os (plus system:authenticated) as groups.
    if has_kubectl() {
        let k = Kubectl::with_cert(&api, &alice);
        let who: Value =
            serde_json::from_str(&k.ok(&["auth", "whoami", "-o", "json"])).unwrap_or_default();
        assert_eq!(who["status"]["userInfo"]["username"], "alice", "{who}");
        assert_eq!(
            who["status"]["userInfo"]["groups"],
            json!(["team-a", "system:authenticated"])
        );
    }

    // A bootstrap kubeconfig: nanolet's client is system:bootstrap:<id>.
    let bkc = dir.path().join("bootstrap-kc");
    api.write_bootstrap_kubeconfig(&bkc, "07401b", "f395accd246ae52d");
    let kc = nanolet::apiclient::kubeconfig::Kubeconfig::load(&bkc).expect("kubeconfig");
    let c =
        nanolet::apiclient::client::ApiClient::new(&kc, Duration::from_secs(10)).expect("client");
    let body = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": "boot"},
        "spec": {"request": support::apiserver::base64_encode(pem.as_bytes()),
            "signerName": CLIENT_KUBELET, "usages": ["digital signature", "client auth"]}});
    let csr = c
        .post(
            "/apis/certificates.k8s.io/v1/certificatesigningrequests",
            &body,
        )
        .expect("POST CSR");
    assert_eq!(csr["spec"]["username"], "system:bootstrap:07401b", "{csr}");
}

/// The CSR API with the real kubectl: `kubectl get csr` prints the apiserver's columns
/// (printCertificateSigningRequest: NAME AGE SIGNERNAME REQUESTOR REQUESTEDDURATION
/// CONDITION), `kubectl certificate approve` (PUT .../approval) makes the signer issue a
/// certificate from the double's CA with the usages and SANs; `deny` leaves none; the
/// auto-approver issues at once.
#[test]
fn kubectl_certificate_approve_and_deny_drive_the_signer() {
    assert!(
        has_kubectl(),
        "kubectl not installed (scripts/install-deps.sh)"
    );
    let api = FakeApiServer::start_tls(TOKEN);
    let k = Kubectl::new(&api, TOKEN);
    api.add_bootstrap_token("abcdef", "0123456789abcdef");
    let node = Kubectl::new(&api, "abcdef.0123456789abcdef");
    let dir = tempfile::tempdir().expect("tmp");
    let (client_pem, _) = pki::make_csr(dir.path(), "c", "system:node:n1", &["system:nodes"], &[]);
    let sans = vec!["DNS:n1".to_string(), "IP:10.0.0.5".to_string()];
    let (serving_pem, _) =
        pki::make_csr(dir.path(), "s", "system:node:n1", &["system:nodes"], &sans);
    let f = node.write(
        "c.yaml",
        &csr_yaml(
            "node-client",
            &client_pem,
            CLIENT_KUBELET,
            &["digital signature", "client auth"],
            Some(3600),
        ),
    );
    node.ok(&["create", "-f", &f.display().to_string()]);
    let f = node.write(
        "s.yaml",
        &csr_yaml(
            "node-serving",
            &serving_pem,
            KUBELET_SERVING,
            &["digital signature", "server auth"],
            None,
        ),
    );
    node.ok(&["create", "-f", &f.display().to_string()]);

    let out = k.ok(&["get", "csr"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        cols(lines[0]),
        [
            "NAME",
            "AGE",
            "SIGNERNAME",
            "REQUESTOR",
            "REQUESTEDDURATION",
            "CONDITION"
        ],
        "{out}"
    );
    let row = lines
        .iter()
        .find(|l| l.starts_with("node-client"))
        .expect("row");
    assert_eq!(
        cols(row)[2..],
        [CLIENT_KUBELET, "system:bootstrap:abcdef", "60m", "Pending"],
        "{out}"
    );

    let out = k.ok(&["certificate", "approve", "node-client"]);
    assert!(out.contains("approved"), "{out}");
    let csr = api
        .get("/apis/certificates.k8s.io/v1/certificatesigningrequests/node-client")
        .expect("csr");
    let c = &csr["status"]["conditions"][0];
    assert_eq!(
        (
            c["type"].as_str(),
            c["reason"].as_str(),
            c["status"].as_str()
        ),
        (Some("Approved"), Some("KubectlApprove"), Some("True")),
        "{csr}"
    );
    let pem = issued(&api, "node-client");
    let text = pki::cert_text(&pem);
    assert!(
        text.contains("Subject: O = system:nodes, CN = system:node:n1"),
        "{text}"
    );
    assert!(text.contains("TLS Web Client Authentication"), "{text}");
    // expirationSeconds 3600 < 8 h: NotBefore = now - 5 min, NotAfter = now + 1 h.
    let cert_file = dir.path().join("issued.crt");
    std::fs::write(&cert_file, &pem).expect("write");
    let verify = Command::new("openssl")
        .args(["verify", "-CAfile"])
        .arg(api.ca_cert_path())
        .arg(&cert_file)
        .output()
        .expect("openssl verify");
    assert!(
        verify.status.success(),
        "issued by the double's CA: {verify:?}"
    );
    let out = k.ok(&["get", "csr", "node-client"]);
    assert!(out.contains("Approved,Issued"), "{out}");

    k.ok(&["certificate", "deny", "node-serving"]);
    let out = k.ok(&["get", "csr", "node-serving"]);
    assert!(out.contains("Denied") && !out.contains("Issued"), "{out}");
    assert_eq!(
        issued(&api, "node-serving"),
        "",
        "a denied CSR gets no certificate"
    );

    // A serving CSR approved: SANs copied, server auth.
    let f = node.write(
        "s2.yaml",
        &csr_yaml(
            "node-serving-2",
            &serving_pem,
            KUBELET_SERVING,
            &["digital signature", "server auth"],
            None,
        ),
    );
    node.ok(&["create", "-f", &f.display().to_string()]);
    k.ok(&["certificate", "approve", "node-serving-2"]);
    let text = pki::cert_text(&issued(&api, "node-serving-2"));
    assert!(
        text.contains("DNS:n1, IP Address:10.0.0.5")
            && text.contains("TLS Web Server Authentication"),
        "{text}"
    );

    // The auto-approver (csrapproving) for the client signer.
    api.auto_approve(CLIENT_KUBELET, true);
    let f = node.write(
        "c2.yaml",
        &csr_yaml(
            "node-client-2",
            &client_pem,
            CLIENT_KUBELET,
            &["digital signature", "client auth"],
            None,
        ),
    );
    node.ok(&["create", "-f", &f.display().to_string()]);
    let out = k.ok(&["get", "csr", "node-client-2"]);
    assert!(out.contains("Approved,Issued"), "{out}");
    // The signer's own checks (ValidateKubeletClientCSR): a client CSR not in system:nodes is
    // approved but fails, with the upstream message, and gets no certificate.
    let (bad_pem, _) = pki::make_csr(dir.path(), "b", "system:node:n1", &["evil"], &[]);
    let f = node.write(
        "b.yaml",
        &csr_yaml(
            "bad-org",
            &bad_pem,
            CLIENT_KUBELET,
            &["digital signature", "client auth"],
            None,
        ),
    );
    node.ok(&["create", "-f", &f.display().to_string()]);
    let out = k.ok(&["get", "csr", "bad-org"]);
    assert!(out.contains("Approved,Failed"), "{out}");
    let csr = api
        .get("/apis/certificates.k8s.io/v1/certificatesigningrequests/bad-org")
        .expect("csr");
    let failed = &csr["status"]["conditions"][1];
    assert_eq!(failed["reason"], "SignerValidationFailure", "{csr}");
    assert_eq!(
        failed["message"],
        "subject organization is not system:nodes"
    );
    assert_eq!(issued(&api, "bad-org"), "");

    // A watch on one CSR (fieldSelector metadata.name, as the kubelet's certificate manager
    // waits): only that CSR, ADDED with its current state.
    let ca = api.ca_cert_path();
    let (code, body) = tls::request(
        api.port,
        tls::test_client_config(None, &ca),
        "GET",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests?watch=true&fieldSelector=metadata.name%3Dnode-client&timeoutSeconds=1",
        &[("Authorization", &format!("Bearer {TOKEN}"))],
        "",
    );
    assert_eq!(code, 200, "{body}");
    let events: Vec<Value> = body
        .split('\n')
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l.trim()).unwrap_or_default())
        .collect();
    assert_eq!(events.len(), 1, "{body}");
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(events[0]["object"]["metadata"]["name"], "node-client");
    assert!(events[0]["object"]["status"]["certificate"].is_string());
}

/// TokenReview from the token table (and a bootstrap token), SubjectAccessReview from the
/// test's rules (default deny; system:masters always allowed, as the privileged-group
/// authorizer), both recorded.
#[test]
fn token_and_subject_access_reviews_answer_from_the_tables() {
    let api = FakeApiServer::start_tls(TOKEN);
    let ca = api.ca_cert_path();
    let cfg = || tls::test_client_config(None, &ca);
    let hdr = [
        ("Authorization", "Bearer kubectl-t0ken"),
        ("Content-Type", "application/json"),
    ];
    api.add_token(
        "metrics-token",
        "system:serviceaccount:kube-system:metrics-server",
        &[],
    );
    let review = |tok: &str| {
        let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": tok}});
        let (code, out) = tls::request(
            api.port,
            cfg(),
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            &hdr,
            &body.to_string(),
        );
        assert_eq!(code, 201, "{out}");
        serde_json::from_str::<Value>(&out).unwrap_or_default()
    };
    let r = review("metrics-token");
    assert_eq!(r["status"]["authenticated"], true, "{r}");
    assert_eq!(
        r["status"]["user"]["username"],
        "system:serviceaccount:kube-system:metrics-server"
    );
    assert_eq!(
        r["status"]["user"]["groups"],
        json!(["system:authenticated"])
    );
    let r = review("nope");
    assert!(
        r["status"]["authenticated"].is_null() || r["status"]["authenticated"] == false,
        "{r}"
    );
    assert_eq!(api.token_reviews().len(), 2);

    api.allow("alice", "get", "nodes", "proxy");
    let sar = |user: &str, groups: &[&str], verb: &str, sub: &str| {
        let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": groups, "resourceAttributes":
                {"verb": verb, "resource": "nodes", "subresource": sub, "name": "n1"}}});
        let (code, out) = tls::request(
            api.port,
            cfg(),
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            &hdr,
            &body.to_string(),
        );
        assert_eq!(code, 201, "{out}");
        serde_json::from_str::<Value>(&out).unwrap_or_default()["status"]["allowed"].clone()
    };
    assert_eq!(sar("alice", &[], "get", "proxy"), true);
    assert_eq!(sar("alice", &[], "create", "proxy"), false, "default deny");
    assert_eq!(sar("bob", &[], "get", "proxy"), false);
    assert_eq!(sar("root", &["system:masters"], "create", "stats"), true);
    let seen = api.access_reviews();
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[1]["spec"]["resourceAttributes"]["verb"], "create");
}

/// The node proxy subresources reach the node's kubelet (status.addresses InternalIP,
/// daemonEndpoints.kubeletEndpoint.Port) with the API server's kubelet-client certificate:
/// `kubectl logs` (LogLocation's parameters), `kubectl logs -f` streaming line by line,
/// `kubectl get --raw .../nodes/N/proxy/...`, and an exec upgrade relayed (101, then bytes
/// both ways).
#[test]
fn node_proxy_subresources_reach_the_kubelet_with_the_client_certificate() {
    assert!(
        has_kubectl(),
        "kubectl not installed (scripts/install-deps.sh)"
    );
    let mut api = FakeApiServer::start_tls(TOKEN);
    let kubelet = support::standin::StandInKubelet::start(&api.ca_cert_path());
    api.create_object("/api/v1/nodes", json!({"metadata": {"name": "node1"}, "status": {
        "addresses": [{"type": "Hostname", "address": "node1"}, {"type": "InternalIP", "address": "127.0.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet.port}}}}));
    api.create_pod("default", pod("web", Some("node1")));
    let k = Kubectl::new(&api, TOKEN);

    let out = k.ok(&["logs", "web", "--tail=2", "--timestamps"]);
    assert_eq!(
        out.trim(),
        "target=/containerLogs/default/web/c?tailLines=2&timestamps=true"
    );
    let seen = kubelet.seen();
    assert_eq!(
        seen[0].0, "kube-apiserver-kubelet-client",
        "the kubelet-client certificate"
    );
    // A kubelet error on pods/log comes back as a Status with the kubelet's text
    // (GenericHttpResponseChecker), which kubectl prints.
    let (ok, _, err) = k.run(&["logs", "web", "--previous"]);
    assert!(!ok, "{err}");
    assert!(
        err.contains(
            "Error from server (NotFound): previous terminated container \"c\" in pod \"web\" not found"
        ),
        "{err}"
    );

    let out = k.ok(&[
        "get",
        "--raw",
        "/api/v1/nodes/node1/proxy/stats/summary?only_cpu_and_memory=true",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap_or_default();
    // The query goes through as sent (UpgradeAwareHandler keeps RawQuery; kubectl adds
    // --request-timeout as `timeout`).
    assert_eq!(
        v["target"], "/stats/summary?only_cpu_and_memory=true&timeout=20s",
        "{out}"
    );
    assert_eq!(v["groups"], json!(["kubeadm:cluster-admins"]));

    // logs -f: line 1 arrives before the kubelet sends line 2.
    let mut child = k
        .cmd(&["logs", "-f", "web"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("kubectl logs -f");
    let mut rd = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    rd.read_line(&mut line).expect("read");
    assert_eq!(
        line.trim(),
        "target=/containerLogs/default/web/c?follow=true"
    );
    line.clear();
    rd.read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "line 1", "streamed before the stream ends");
    kubelet.release();
    line.clear();
    rd.read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "line 2");
    assert!(child.wait().expect("wait").success());

    // An exec upgrade through the double: the kubelet's 101, then bytes both ways.
    let cfg = tls::test_client_config(None, &api.ca_cert_path());
    let mut s = tls::connect(api.port, cfg);
    let req = format!(
        "POST /api/v1/namespaces/default/pods/web/exec?command=sh&command=-c&command=echo%20hi&stdin=true&stdout=true&tty=true HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n"
    );
    s.write_all(req.as_bytes()).expect("send");
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).expect("101 head");
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        head.contains("X-Stream-Protocol-Version: v4.channel.k8s.io"),
        "{head}"
    );
    s.write_all(b"ping").expect("write");
    let mut echo = [0u8; 4];
    s.read_exact(&mut echo).expect("echo");
    assert_eq!(&echo, b"ping");
    let last = kubelet.seen().last().cloned().expect("exec seen");
    assert_eq!(
        (last.1.as_str(), last.2.as_str()),
        (
            "POST",
            "/exec/default/web/c?command=sh&command=-c&command=echo+hi&input=1&output=1&tty=1"
        )
    );

    // No credentials: 401 before any dial.
    let n = kubelet.seen().len();
    let (code, _) = tls::request(
        api.port,
        tls::test_client_config(None, &api.ca_cert_path()),
        "GET",
        "/api/v1/namespaces/default/pods/web/log",
        &[],
        "",
    );
    assert_eq!(code, 401);
    assert_eq!(kubelet.seen().len(), n);

    // --kubelet-certificate-authority: the stand-in's CA passes, another CA is refused
    // (500 from the proxy, nothing reaches the kubelet).
    api.set_kubelet_ca(Some(&kubelet.ca_cert()));
    k.ok(&["get", "--raw", "/api/v1/nodes/node1/proxy/healthz"]);
    api.set_kubelet_ca(Some(&api.ca_cert_path()));
    let n = kubelet.seen().len();
    let (ok, _, err) = k.run(&["get", "--raw", "/api/v1/nodes/node1/proxy/healthz"]);
    assert!(
        !ok && err.contains("error trying to reach service"),
        "{err}"
    );
    assert_eq!(kubelet.seen().len(), n);

    // The real `kubectl exec`: its WebSocket (v5.channel.k8s.io) is refused, so it falls back
    // to SPDY, which reaches the kubelet (what kube-apiserver >= 1.30 sends the kubelet after
    // translating). The stand-in only echoes, so kubectl is stopped once the kubelet saw it.
    api.set_kubelet_ca(Some(&kubelet.ca_cert()));
    let before = kubelet.upgrades().len();
    let mut exec = k
        .cmd(&["exec", "web", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl exec");
    let up = wait_for(Duration::from_secs(20), || {
        kubelet.upgrades().get(before).cloned()
    });
    let _ = exec.kill();
    let _ = exec.wait();
    assert_eq!(up.as_deref(), Some("SPDY/3.1"), "{:?}", kubelet.upgrades());
    let ws = api
        .requests()
        .into_iter()
        .filter(|r| r.path == "/api/v1/namespaces/default/pods/web/exec")
        .count();
    assert!(ws >= 2, "a WebSocket attempt, then SPDY");

    // websocket_passthrough(true): kubectl's WebSocket itself reaches the kubelet.
    api.websocket_passthrough(true);
    let before = kubelet.upgrades().len();
    let mut exec = k
        .cmd(&["exec", "web", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl exec");
    let up = wait_for(Duration::from_secs(20), || {
        kubelet.upgrades().get(before).cloned()
    });
    let _ = exec.kill();
    let _ = exec.wait();
    assert_eq!(up.as_deref(), Some("websocket"), "{:?}", kubelet.upgrades());
}
