//! Service environment variables and cluster DNS for API pods (issue 20, item 3) against the
//! API server double and a real containerd; the double's Services driven by the real kubectl.

use nanolet_test_support as support;

use std::time::Duration;

use serde_json::{Value, json};
use support::agent::Nanolet;
use support::apiserver::{FakeApiServer, KUBERNETES_SERVICE_IP};
use support::{Containerd, wait_for};

const TOKEN: &str = "t0ken-for-the-services-test";
const NS: &str = "shop";
const END: &str = "END-OF-OUTPUT";

/// An API pod in `shop` bound to node1 that prints its environment, resolv.conf and hosts file.
fn printer_pod(name: &str, links: bool) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": "node1",
            "automountServiceAccountToken": false,
            "enableServiceLinks": links,
            "hostname": name,
            "subdomain": "printers",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "c", "image": "localhost/busybox:1.36",
                "imagePullPolicy": "IfNotPresent",
                "env": [{"name": "API_URL",
                         "value": "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"}],
                "command": ["sh", "-c",
                    format!("env | sort; cat /etc/resolv.conf /etc/hosts; echo {END}; sleep 3600")]}]
        }
    })
}

/// A printer pod whose container fails (and is restarted) until `var` is set.
fn waiting_pod(name: &str, var: &str) -> Value {
    let mut p = printer_pod(name, true);
    let cmd = format!(
        "[ -n \"${var}\" ] || exit 1; {}",
        p["spec"]["containers"][0]["command"][2]
            .as_str()
            .unwrap_or_default()
    );
    p["spec"]["containers"][0]["command"][2] = json!(cmd);
    p
}

/// The container's output, once complete (in whichever attempt's log it is).
fn output(api: &FakeApiServer, n: &Nanolet, name: &str) -> String {
    let path = format!("/api/v1/namespaces/{NS}/pods/{name}");
    wait_for(Duration::from_secs(90), || {
        let uid = api.get(&path)?["metadata"]["uid"].as_str()?.to_string();
        let dir = n.pod_logs().join(format!("{NS}_{name}_{uid}/c"));
        std::fs::read_dir(dir).ok()?.flatten().find_map(|e| {
            std::fs::read_to_string(e.path())
                .ok()
                .filter(|s| s.contains(END))
        })
    })
    .unwrap_or_else(|| {
        panic!(
            "no output from {name}: {:?}\n{}",
            api.get(&path),
            n.log_tail()
        )
    })
}

/// The value of `NAME=` in the output (CRI log lines end with the text).
fn var(out: &str, name: &str) -> Option<String> {
    let prefix = format!(" {name}=");
    out.lines()
        .find_map(|l| l.split_once(&prefix).map(|(_, v)| v.to_string()))
}

/// kubelet_pods.go makeEnvironmentVariables / getServiceEnvVarMap and envvars.FromServices:
/// `KUBERNETES_SERVICE_*` from `default/kubernetes` always, the link variables of the pod's
/// namespace only with enableServiceLinks (headless Services none), service variables usable
/// in `$(VAR)`; a Service created after nanolet started (and after its watch expired with 410)
/// reaches a pod started later. dns.go GetPodDNS: ClusterFirst with `--cluster-dns` and
/// `--cluster-domain`: the cluster nameserver only, the cluster searches first, ndots:5;
/// managedHostsFileContent: the pod's FQDN `<hostname>.<subdomain>.<ns>.svc.<domain>`.
#[test]
fn api_pods_get_service_variables_and_the_cluster_dns() {
    let ctd = Containerd::start();
    let api = FakeApiServer::start(TOKEN);
    let kc = ctd.tmp().join("kubeconfig");
    api.write_kubeconfig(&kc, TOKEN);
    api.create_kubernetes_service();
    api.create_object("/api/v1/namespaces", json!({"metadata": {"name": NS}}));
    let web = api.create_object(
        &format!("/api/v1/namespaces/{NS}/services"),
        json!({"metadata": {"name": "web-api"},
               "spec": {"selector": {"app": "web"},
                        "ports": [{"name": "http", "port": 8080}, {"name": "metrics", "port": 9090, "protocol": "TCP"}]}}),
    );
    let web_ip = web["spec"]["clusterIP"]
        .as_str()
        .expect("allocated")
        .to_string();
    api.create_object(
        &format!("/api/v1/namespaces/{NS}/services"),
        json!({"metadata": {"name": "peers"}, "spec": {"clusterIP": "None", "ports": [{"port": 7000}]}}),
    );
    api.create_object(
        "/api/v1/namespaces/default/services",
        json!({"metadata": {"name": "elsewhere"}, "spec": {"ports": [{"port": 80}]}}),
    );
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--kubeconfig={}", kc.display()),
            "--cluster-dns=10.96.0.10".into(),
            "--cluster-domain=cluster.local".into(),
        ],
    );
    api.create_pod(NS, printer_pod("linked", true));
    api.create_pod(NS, printer_pod("unlinked", false));

    let out = output(&api, &n, "linked");
    assert_eq!(
        var(&out, "KUBERNETES_SERVICE_HOST").as_deref(),
        Some(KUBERNETES_SERVICE_IP),
        "{out}"
    );
    assert_eq!(var(&out, "KUBERNETES_SERVICE_PORT").as_deref(), Some("443"));
    assert_eq!(
        var(&out, "KUBERNETES_SERVICE_PORT_HTTPS").as_deref(),
        Some("443")
    );
    assert_eq!(
        var(&out, "KUBERNETES_PORT").as_deref(),
        Some("tcp://10.96.0.1:443")
    );
    assert_eq!(
        var(&out, "API_URL").as_deref(),
        Some("https://10.96.0.1:443")
    );
    assert_eq!(var(&out, "WEB_API_SERVICE_HOST"), Some(web_ip.clone()));
    assert_eq!(var(&out, "WEB_API_SERVICE_PORT").as_deref(), Some("8080"));
    assert_eq!(
        var(&out, "WEB_API_SERVICE_PORT_METRICS").as_deref(),
        Some("9090")
    );
    assert_eq!(
        var(&out, "WEB_API_PORT_9090_TCP"),
        Some(format!("tcp://{web_ip}:9090"))
    );
    assert_eq!(
        var(&out, "WEB_API_PORT_8080_TCP_ADDR"),
        Some(web_ip.clone())
    );
    assert!(var(&out, "PEERS_SERVICE_HOST").is_none(), "headless: {out}");
    assert!(
        var(&out, "ELSEWHERE_SERVICE_HOST").is_none(),
        "other namespace: {out}"
    );
    assert!(out.contains(" nameserver 10.96.0.10\n"), "{out}");
    assert_eq!(
        out.matches(" nameserver ").count(),
        1,
        "cluster DNS only: {out}"
    );
    assert!(
        out.contains(" search shop.svc.cluster.local svc.cluster.local cluster.local"),
        "{out}"
    );
    assert!(out.contains(" options ndots:5\n"), "{out}");
    assert!(
        out.contains("\tlinked.printers.shop.svc.cluster.local\tlinked\n"),
        "{out}"
    );

    let out = output(&api, &n, "unlinked");
    assert_eq!(
        var(&out, "KUBERNETES_SERVICE_HOST").as_deref(),
        Some(KUBERNETES_SERVICE_IP),
        "{out}"
    );
    assert!(
        var(&out, "WEB_API_SERVICE_HOST").is_none(),
        "enableServiceLinks false: {out}"
    );

    // The reflector: it listed all Services, then watches with bookmarks (the watch follows
    // the list: on a loaded machine it may not be open yet when the pods ran).
    let watching = wait_for(Duration::from_secs(30), || {
        api.requests()
            .iter()
            .any(|r| {
                r.path == "/api/v1/services"
                    && r.query.contains("watch=1")
                    && r.query.contains("allowWatchBookmarks=true")
            })
            .then_some(())
    });
    assert!(watching.is_some(), "no Service watch with bookmarks");
    api.send_bookmarks();
    // A Service created now reaches a pod started later through the watch. The pod's
    // container exits until it sees the variable (the kubelet's race between a pod and a new
    // Service: the restart rebuilds the environment), so a missing watch fails the test.
    api.create_object(
        &format!("/api/v1/namespaces/{NS}/services"),
        json!({"metadata": {"name": "late"}, "spec": {"ports": [{"port": 5432}]}}),
    );
    api.create_pod(NS, waiting_pod("later", "LATE_SERVICE_PORT"));
    let out = output(&api, &n, "later");
    assert_eq!(
        var(&out, "LATE_SERVICE_PORT").as_deref(),
        Some("5432"),
        "{out}"
    );
    assert!(var(&out, "WEB_API_SERVICE_HOST").is_some(), "{out}");
    // The watch expires (410 Gone): the reflector relists and follows again.
    let gets = api.count("GET", "/api/v1/services");
    api.expire_watches();
    let relisted = wait_for(Duration::from_secs(30), || {
        (api.count("GET", "/api/v1/services") >= gets + 2).then_some(())
    });
    assert!(
        relisted.is_some(),
        "no relist and new watch after 410\n{}",
        n.log_tail()
    );
    api.create_object(
        &format!("/api/v1/namespaces/{NS}/services"),
        json!({"metadata": {"name": "after-gone"}, "spec": {"ports": [{"port": 6379}]}}),
    );
    api.create_pod(NS, waiting_pod("relisted", "AFTER_GONE_SERVICE_PORT"));
    let out = output(&api, &n, "relisted");
    assert_eq!(
        var(&out, "AFTER_GONE_SERVICE_PORT").as_deref(),
        Some("6379"),
        "{out}"
    );
}

/// The double's Services through the real kubectl: `create service clusterip` (protobuf;
/// kube-apiserver allocates the ClusterIP and defaults targetPort/protocol), headless with
/// `--clusterip=None`, `get services -A` with the printer's columns, `delete`.
#[test]
fn kubectl_creates_lists_and_deletes_services_on_the_double() {
    let api = FakeApiServer::start(TOKEN);
    let k = support::kubectl::Kubectl::new(&api, TOKEN);
    api.create_kubernetes_service();
    assert_eq!(
        k.ok(&[
            "create",
            "service",
            "clusterip",
            "web",
            "--tcp=80:8080",
            "-n",
            "kube-system"
        ])
        .trim(),
        "service/web created"
    );
    let s = api
        .get("/api/v1/namespaces/kube-system/services/web")
        .expect("service");
    let ip = s["spec"]["clusterIP"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        ip.starts_with("10.96.") && ip != KUBERNETES_SERVICE_IP,
        "{s}"
    );
    assert_eq!(
        s["spec"]["ports"][0],
        json!({"name": "80-8080", "port": 80, "protocol": "TCP", "targetPort": 8080})
    );
    assert_eq!(s["spec"]["selector"], json!({"app": "web"}));
    assert_eq!(s["spec"]["type"], "ClusterIP");
    assert_eq!(
        k.ok(&["create", "service", "clusterip", "hl", "--clusterip=None"])
            .trim(),
        "service/hl created"
    );
    let table = k.ok(&["get", "services", "-A"]);
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "NAMESPACE",
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE"
        ],
        "{table}"
    );
    assert!(
        lines.iter().any(|l| l[..6]
            == [
                "default",
                "kubernetes",
                "ClusterIP",
                "10.96.0.1",
                "<none>",
                "443/TCP"
            ]),
        "{table}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l[..6] == ["default", "hl", "ClusterIP", "None", "<none>", "<none>"]),
        "{table}"
    );
    assert!(
        lines.iter().any(|l| l[..6]
            == [
                "kube-system",
                "web",
                "ClusterIP",
                ip.as_str(),
                "<none>",
                "80/TCP"
            ]),
        "{table}"
    );
    let (ok, _, err) = k.run(&[
        "create",
        "service",
        "clusterip",
        "dup",
        "--tcp=1:1",
        "--clusterip=10.96.0.1",
    ]);
    assert!(
        !ok && err.contains("provided IP is already allocated"),
        "{err}"
    );
    assert_eq!(
        k.ok(&["delete", "service", "web", "-n", "kube-system"])
            .trim(),
        "service \"web\" deleted"
    );
    assert!(
        api.get("/api/v1/namespaces/kube-system/services/web")
            .is_none()
    );
}
