//! API pods with ServiceAccount tokens, ConfigMaps and Secrets from the API server (issue 20,
//! items 1 and 2) against the API server double and a real containerd; the double's
//! TokenRequest, ConfigMaps and Secrets driven by the real kubectl.

use nanolet_test_support as support;

use std::time::Duration;

use nanolet::cri::Runtime;
use serde_json::{Value, json};
use support::agent::Nanolet;
use support::apiserver::FakeApiServer;
use support::{Containerd, wait_for};

const TOKEN: &str = "t0ken-for-the-objects-test";
const SECRET_VALUE: &str = "s3cr3t-value-never-logged";
pub(crate) const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A DaemonSet's pod as kube-apiserver stores it after the ServiceAccount admission plugin
/// (plugin/pkg/admission/serviceaccount `TokenVolumeSource`: defaultMode 420, token with
/// expirationSeconds 3607, `kube-root-ca.crt`'s `ca.crt`, the namespace from the downward
/// API) and the scheduler bound it: a ConfigMap volume, a Secret env, tolerations, hostNetwork.
pub(crate) fn daemonset_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "node-agent-x2kfp", "generateName": "node-agent-",
                     "labels": {"app": "node-agent", "controller-revision-hash": "6d4f8b9c7",
                                "pod-template-generation": "1"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                         "name": "node-agent", "uid": "9b2f7c1e-0000-4000-8000-000000000001",
                         "controller": true, "blockOwnerDeletion": true}]},
        "spec": {
            "nodeName": "node1",
            "hostNetwork": true,
            "dnsPolicy": "ClusterFirstWithHostNet",
            "serviceAccountName": "node-agent",
            "serviceAccount": "node-agent",
            "terminationGracePeriodSeconds": 1,
            "restartPolicy": "Always",
            "tolerations": [
                {"operator": "Exists", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}],
            "containers": [{
                "name": "agent", "image": "localhost/busybox:1.36",
                "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
                "env": [{"name": "AGENT_KEY",
                         "valueFrom": {"secretKeyRef": {"name": "agent-secret", "key": "key"}}}],
                "volumeMounts": [
                    {"name": "config", "mountPath": "/etc/agent"},
                    {"name": "kube-api-access-x7k2p", "mountPath": SA_DIR, "readOnly": true}]}],
            "volumes": [
                {"name": "config", "configMap": {"name": "agent-config", "defaultMode": 420}},
                {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt",
                                   "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace",
                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}]
        }
    })
}

pub(crate) const POD_PATH: &str = "/api/v1/namespaces/kube-system/pods/node-agent-x2kfp";

pub(crate) fn agent_container(rt: &impl Runtime) -> Option<String> {
    rt.list_containers()
        .unwrap_or_default()
        .into_iter()
        .find(|c| {
            c.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some("node-agent-x2kfp")
                && c.state == nanolet::cri::ContainerState::Running
        })
        .map(|c| c.id)
}

/// `cat <path>` (or any command) in the running container.
pub(crate) fn exec(rt: &impl Runtime, id: &str, cmd: &[&str]) -> String {
    let cmd: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
    match rt.exec_sync(id, &cmd, Duration::from_secs(10)) {
        Ok(r) if r.exit_code == 0 => String::from_utf8_lossy(&r.stdout).into_owned(),
        Ok(r) => format!(
            "exit {}: {}{}",
            r.exit_code,
            String::from_utf8_lossy(&r.stdout),
            String::from_utf8_lossy(&r.stderr)
        ),
        Err(e) => format!("exec failed: {e}"),
    }
}

fn waiting(api: &FakeApiServer) -> (String, String) {
    let p = api.get(POD_PATH).unwrap_or_default();
    let w = &p["status"]["containerStatuses"][0]["state"]["waiting"];
    (
        w["reason"].as_str().unwrap_or_default().to_string(),
        w["message"].as_str().unwrap_or_default().to_string(),
    )
}

/// The token of the last TokenRequest bound to the pod.
pub(crate) fn last_token(api: &FakeApiServer) -> String {
    api.issued_tokens()
        .iter()
        .rev()
        .find(|t| t["spec"]["boundObjectRef"]["name"] == "node-agent-x2kfp")
        .and_then(|t| t["status"]["token"].as_str().map(String::from))
        .unwrap_or_default()
}

/// Items 1 and 2 end to end: the pod waits with the kubelet's CreateContainerConfigError
/// while its Secret is missing and starts once it is created; the projected volume holds the
/// TokenRequest's token (bound to the pod, expirationSeconds 3607), the root CA and the
/// namespace; the token is refreshed in place (the double grants 20 s: refresh after 80 %);
/// a ConfigMap change reaches the file in the container within the sync period; the container
/// is never restarted for either; neither the Secret nor a token appears in the log.
#[test]
fn daemonset_pod_gets_token_config_map_and_secret_from_the_api() {
    let ctd = Containerd::start();
    let api = FakeApiServer::start(TOKEN);
    let kc = ctd.tmp().join("kubeconfig");
    api.write_kubeconfig(&kc, TOKEN);
    api.create_service_account("kube-system", "node-agent");
    let ca = api.publish_root_ca("kube-system");
    api.create_object(
        "/api/v1/namespaces/kube-system/configmaps",
        json!({"metadata": {"name": "agent-config"}, "data": {"agent.conf": "level=1\n"}}),
    );
    api.set_token_lifetime(Some(20));
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--kubeconfig={}", kc.display()),
            "--sync-frequency=2s".into(),
        ],
    );
    api.create_pod("kube-system", daemonset_pod());

    // kubelet_pods.go makeEnvironmentVariables: the secret manager's NotFound, as is (on a
    // loaded machine the first sync may still say the Secret is not listed yet).
    let w = wait_for(Duration::from_secs(60), || {
        let w = waiting(&api);
        (w.0 == "CreateContainerConfigError" && w.1.contains("not found")).then_some(w)
    })
    .unwrap_or_else(|| {
        panic!(
            "no CreateContainerConfigError: {:?}\n{}",
            api.get(POD_PATH),
            n.log_tail()
        )
    });
    assert_eq!(w.1, "secret \"agent-secret\" not found");

    api.create_object(
        "/api/v1/namespaces/kube-system/secrets",
        json!({"metadata": {"name": "agent-secret"}, "stringData": {"key": SECRET_VALUE}}),
    );
    let rt = ctd.runtime();
    let id = wait_for(Duration::from_secs(60), || agent_container(&rt)).unwrap_or_else(|| {
        panic!(
            "the pod never ran once its Secret existed: {:?}\n{}",
            api.get(POD_PATH),
            n.log_tail()
        )
    });
    assert_eq!(
        exec(&rt, &id, &["sh", "-c", "echo \"$AGENT_KEY\""]).trim(),
        SECRET_VALUE
    );
    assert_eq!(exec(&rt, &id, &["cat", &format!("{SA_DIR}/ca.crt")]), ca);
    assert_eq!(
        exec(&rt, &id, &["cat", &format!("{SA_DIR}/namespace")]),
        "kube-system"
    );
    assert_eq!(
        exec(&rt, &id, &["cat", "/etc/agent/agent.conf"]),
        "level=1\n"
    );

    // The TokenRequest: POST serviceaccounts/node-agent/token bound to the pod.
    let pod_uid = api.get(POD_PATH).expect("pod")["metadata"]["uid"].clone();
    let first = api
        .issued_tokens()
        .into_iter()
        .find(|t| t["spec"]["boundObjectRef"]["name"] == "node-agent-x2kfp")
        .expect("a TokenRequest for the pod");
    assert_eq!(
        first["spec"]["boundObjectRef"],
        json!({"kind": "Pod", "apiVersion": "v1", "name": "node-agent-x2kfp", "uid": pod_uid})
    );
    assert_eq!(first["metadata"]["name"], "node-agent");
    let token_file = format!("{SA_DIR}/token");
    let in_container = exec(&rt, &id, &["cat", &token_file]);
    assert!(in_container.starts_with("eyJ"), "{in_container}");
    assert!(
        api.issued_tokens()
            .iter()
            .any(|t| t["status"]["token"] == in_container.as_str()),
        "the token file holds a TokenRequest's token"
    );
    let asked: Vec<Value> = api
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/serviceaccounts/node-agent/token"))
        .filter_map(|r| serde_json::from_str::<Value>(&r.body).ok())
        .collect();
    assert_eq!(asked[0]["spec"]["expirationSeconds"], 3607);

    // Refreshed in place: a newer token in the same file, same container.
    let refreshed = wait_for(Duration::from_secs(60), || {
        let now = exec(&rt, &id, &["cat", &token_file]);
        (now != in_container && now == last_token(&api)).then_some(now)
    });
    assert!(
        refreshed.is_some(),
        "token never refreshed\n{}",
        n.log_tail()
    );

    // The ConfigMap changes: the file follows, through the per-object watch.
    api.modify(
        "/api/v1/namespaces/kube-system/configmaps/agent-config",
        |o| {
            o["data"]["agent.conf"] = json!("level=2\n");
        },
    );
    let changed = wait_for(Duration::from_secs(30), || {
        (exec(&rt, &id, &["cat", "/etc/agent/agent.conf"]) == "level=2\n").then_some(())
    });
    assert!(
        changed.is_some(),
        "ConfigMap change never reached the container\n{}",
        n.log_tail()
    );
    // The watch expires (410 Gone): the reflector relists and keeps following.
    api.expire_watches();
    api.modify(
        "/api/v1/namespaces/kube-system/configmaps/agent-config",
        |o| {
            o["data"]["agent.conf"] = json!("level=3\n");
        },
    );
    let relisted = wait_for(Duration::from_secs(60), || {
        (exec(&rt, &id, &["cat", "/etc/agent/agent.conf"]) == "level=3\n").then_some(())
    });
    assert!(
        relisted.is_some(),
        "ConfigMap not followed after a 410\n{}",
        n.log_tail()
    );
    // Watched by name, as the Node authorizer allows.
    assert!(api.requests().iter().any(|r| {
        r.path == "/api/v1/namespaces/kube-system/configmaps"
            && r.query
                .contains("fieldSelector=metadata.name%3Dagent-config")
            && r.query.contains("watch=1")
    }));
    assert_eq!(
        agent_container(&rt).as_deref(),
        Some(id.as_str()),
        "no restart"
    );

    let log = std::fs::read_to_string(&n.log).unwrap_or_default();
    assert!(
        !log.contains(SECRET_VALUE),
        "the Secret's value is in the log"
    );
    for t in api.issued_tokens() {
        let t = t["status"]["token"].as_str().unwrap_or_default();
        assert!(!log.contains(t), "a token is in the log");
    }
}

/// The double's objects through the real kubectl: `create configmap`, `create secret generic`
/// (data base64), `create serviceaccount`, `create token` (TokenRequest, kube-apiserver's
/// 10-minute minimum), `get`.
#[test]
fn kubectl_creates_config_maps_secrets_and_tokens_on_the_double() {
    let api = FakeApiServer::start(TOKEN);
    let k = support::kubectl::Kubectl::new(&api, TOKEN);
    assert_eq!(
        k.ok(&[
            "create",
            "configmap",
            "app",
            "--from-literal=a=1",
            "-n",
            "default"
        ])
        .trim(),
        "configmap/app created"
    );
    assert_eq!(
        k.ok(&[
            "create",
            "secret",
            "generic",
            "pw",
            "--from-literal=p=hunter2"
        ])
        .trim(),
        "secret/pw created"
    );
    let s = api
        .get("/api/v1/namespaces/default/secrets/pw")
        .expect("secret");
    assert_eq!(s["data"]["p"], "aHVudGVyMg==");
    assert_eq!(s["type"], "Opaque");
    assert_eq!(
        k.ok(&["get", "configmap", "app", "-o", "jsonpath={.data.a}"]),
        "1"
    );
    assert_eq!(
        k.ok(&["create", "serviceaccount", "robot"]).trim(),
        "serviceaccount/robot created"
    );
    let token = k.ok(&["create", "token", "robot", "--duration=15m"]);
    let issued = api.issued_tokens();
    assert_eq!(issued.len(), 1);
    assert_eq!(issued[0]["status"]["token"], token.trim());
    assert_eq!(issued[0]["spec"]["expirationSeconds"], 900);
    let (ok, _, err) = k.run(&["create", "token", "robot", "--duration=5m"]);
    assert!(!ok);
    assert!(
        err.contains("may not specify a duration less than 10 minutes"),
        "{err}"
    );
    let (ok, _, err) = k.run(&["create", "token", "nobody"]);
    assert!(!ok);
    assert!(
        err.contains("serviceaccounts \"nobody\" not found"),
        "{err}"
    );
}

/// Item 2's other two users of API objects, end to end: the pod's `imagePullSecrets` name an
/// API Secret of type `kubernetes.io/dockerconfigjson` whose credentials the registry requires
/// (the kubelet's pull-secret keyring, pkg/credentialprovider/secrets), and `envFrom` takes a
/// ConfigMap and a prefixed Secret (kubelet_pods.go makeEnvironmentVariables: envFrom first,
/// then `env`, whose `$(VAR)` sees the envFrom variables). The password is never logged.
#[test]
fn api_pull_secret_and_env_from_reach_the_registry_and_the_container() {
    let password = "api-pull-pw-77";
    let work_tmp = tempfile::tempdir().expect("tmp");
    let layout = work_tmp.path().join("layout");
    crate::images::extract_busybox(&layout);
    let reg = crate::images::FakeRegistry::start(&layout, "nano", password);
    let host = format!("127.0.0.1:{}", reg.port);
    let ctd = Containerd::start_with_plain_http_registries(std::slice::from_ref(&host));
    let api = FakeApiServer::start(TOKEN);
    let kc = ctd.tmp().join("kubeconfig");
    api.write_kubeconfig(&kc, TOKEN);
    api.create_object("/api/v1/namespaces", json!({"metadata": {"name": "apps"}}));
    let dcj = crate::images::b64(
        format!(r#"{{"auths":{{"{host}":{{"username":"nano","password":"{password}"}}}}}}"#)
            .as_bytes(),
    );
    api.create_object(
        "/api/v1/namespaces/apps/secrets",
        json!({"metadata": {"name": "regcred"}, "type": "kubernetes.io/dockerconfigjson",
               "data": {".dockerconfigjson": dcj}}),
    );
    api.create_object(
        "/api/v1/namespaces/apps/configmaps",
        json!({"metadata": {"name": "app-config"}, "data": {"LEVEL": "3", "MODE": "edge"}}),
    );
    api.create_object(
        "/api/v1/namespaces/apps/secrets",
        json!({"metadata": {"name": "app-secret"}, "stringData": {"PASSWORD": SECRET_VALUE}}),
    );
    let n = Nanolet::start(&ctd, &[format!("--kubeconfig={}", kc.display())]);
    api.create_pod(
        "apps",
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "puller"},
            "spec": {
                "nodeName": "node1",
                "automountServiceAccountToken": false,
                "terminationGracePeriodSeconds": 1,
                "imagePullSecrets": [{"name": "regcred"}],
                "containers": [{
                    "name": "app", "image": format!("{host}/private/busybox:1"),
                    "imagePullPolicy": "Always",
                    "command": ["sleep", "3600"],
                    "envFrom": [{"configMapRef": {"name": "app-config"}},
                                {"prefix": "S_", "secretRef": {"name": "app-secret"}}],
                    "env": [{"name": "MODE", "value": "$(LEVEL)-override"}]}]
            }
        }),
    );
    let rt = ctd.runtime();
    let id = wait_for(Duration::from_secs(90), || {
        rt.list_containers()
            .unwrap_or_default()
            .into_iter()
            .find(|c| {
                c.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some("puller")
                    && c.state == nanolet::cri::ContainerState::Running
            })
            .map(|c| c.id)
    })
    .unwrap_or_else(|| {
        let secret_requests: Vec<String> = api
            .requests()
            .iter()
            .filter(|r| r.path.contains("secrets"))
            .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
            .collect();
        panic!(
            "the pod never ran: {:?}\nsecret requests: {secret_requests:?}\n{}",
            api.get("/api/v1/namespaces/apps/pods/puller"),
            n.log_tail()
        )
    });
    assert!(reg.authorised.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    let env = exec(&rt, &id, &["env"]);
    let mut vars: Vec<&str> = env
        .lines()
        .filter(|l| {
            ["LEVEL=", "MODE=", "S_PASSWORD="]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .collect();
    vars.sort_unstable();
    let want_secret = format!("S_PASSWORD={SECRET_VALUE}");
    assert_eq!(
        vars,
        ["LEVEL=3", "MODE=3-override", want_secret.as_str()],
        "{env}"
    );
    let log = std::fs::read_to_string(&n.log).unwrap_or_default();
    assert!(
        !log.contains(password) && !log.contains(SECRET_VALUE),
        "credentials in the log"
    );
}
