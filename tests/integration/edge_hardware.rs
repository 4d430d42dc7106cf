//! Edge hardware on a real containerd (issue 32). RuntimeClasses: a pod whose RuntimeClass names the
//! test containerd's second handler (`support::runtime::ALT_HANDLER`: runc with its own state
//! root) runs under that handler, its sandbox seen in that root; a pod naming an unknown class,
//! and one whose class names a handler containerd does not have, never get a sandbox on the
//! default handler: they stay Pending with the kubelet's `FailedCreatePodSandBox` event
//! (`runtimeclass.node.k8s.io "x" not found`; containerd 2, which reports its handlers in CRI
//! Status, refused by nanolet before RunPodSandbox; 1.6 and 1.7 refuse it themselves: `no
//! runtime for "x" is configured`). The class's overhead reaches the pod cgroup (cgroup v1
//! cpu.shares: the kubelet's ResourceConfigForPod counts spec.overhead).
//!
//! Extended resources: the node's (`--extended-resources`) are in its capacity and allocatable;
//! a pod asking for more than is left is refused with the kubelet's `OutOf<name>` and message,
//! one asking for a resource the node lacks too (the kubelet would run it without the device).

use nanolet_test_support as support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::Value;
use support::Containerd;
use support::agent::Nanolet;
use support::runtime::ALT_HANDLER;
use support::runtime::PodCgroups;
use support::wait_for;

const WAIT: Duration = Duration::from_secs(90);

fn pod(name: &str, class: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  runtimeClassName: {class}\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '600']\n{extra}"
    )
}

/// The messages of the pod's `FailedCreatePodSandBox` events on the local API.
fn sandbox_failures(n: &Nanolet, pod: &str) -> Vec<String> {
    let Some(body) = n.get("/api/v1/namespaces/default/events") else {
        return vec![];
    };
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["reason"] == "FailedCreatePodSandBox"
                && e["involvedObject"]["name"].as_str() == Some(pod)
        })
        .filter_map(|e| e["message"].as_str().map(String::from))
        .collect()
}

#[test]
fn runtime_class_handler_reaches_containerd_and_unknown_classes_never_run() {
    let cgroups = PodCgroups::default();
    let ctd = Containerd::start();
    let classes = ctd.tmp().join("runtimeclasses");
    fs::create_dir_all(&classes).expect("mkdir");
    // Explicit mode: a runtime class directory others can write is not read.
    fs::set_permissions(&classes, fs::Permissions::from_mode(0o755)).expect("chmod");
    fs::write(
        classes.join("alt.yaml"),
        format!(
            "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: alt\nhandler: {ALT_HANDLER}\noverhead:\n  podFixed:\n    cpu: 250m\n"
        ),
    )
    .expect("write");
    fs::write(
        classes.join("missing.yaml"),
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: missing\nhandler: no-such-handler\n",
    )
    .expect("write");
    let n = Nanolet::start(
        &ctd,
        &[format!("--runtime-class-dir={}", classes.display())],
    );
    // Burstable: 100m requested + 250m overhead = 350m -> cpu.shares 358 on the pod cgroup.
    n.write(
        "alt.yaml",
        &pod(
            "alt",
            "alt",
            "    resources:\n      requests: {cpu: 100m}\n",
        ),
    );
    n.write("ghost.yaml", &pod("ghost", "nonexistent", ""));
    n.write("lacking.yaml", &pod("lacking", "missing", ""));

    let alt = n.wait_phase("alt", "Running");
    let uid = alt["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    cgroups.0.borrow_mut().push(uid.clone());
    assert_eq!(
        alt["spec"]["overhead"],
        serde_json::json!({"cpu": "250m"}),
        "the class's overhead is the pod's"
    );
    // The sandbox ran under the second handler: its runc state is in that handler's root.
    let alt_root = ctd.tmp().join("runc-alt").join("k8s.io");
    let in_alt_root = wait_for(WAIT, || {
        let n = fs::read_dir(&alt_root).ok()?.count();
        (n > 0).then_some(n)
    });
    assert!(
        in_alt_root.is_some_and(|n| n >= 2),
        "sandbox and container under {}: {in_alt_root:?}\n{}",
        alt_root.display(),
        n.log_tail()
    );
    // This machine's cgroup v1 cpu hierarchy (the v2 weight has unit tests in `cm`).
    let shares = fs::read_to_string(format!(
        "/sys/fs/cgroup/cpu/kubepods/burstable/pod{uid}/cpu.shares"
    ))
    .expect("the pod cgroup's cpu.shares");
    assert_eq!(shares.trim(), "358", "(100m + 250m overhead) * 1024 / 1000");

    let ghost = wait_for(WAIT, || {
        sandbox_failures(&n, "ghost-node1").into_iter().next()
    })
    .unwrap_or_else(|| panic!("no FailedCreatePodSandBox for ghost\n{}", n.log_tail()));
    assert_eq!(
        ghost,
        "Failed to create pod sandbox: runtimeclass.node.k8s.io \"nonexistent\" not found"
    );
    let lacking = wait_for(WAIT, || {
        sandbox_failures(&n, "lacking-node1").into_iter().next()
    })
    .unwrap_or_else(|| panic!("no FailedCreatePodSandBox for lacking\n{}", n.log_tail()));
    if support::test_runtime().name == "2" {
        // containerd 2 reports its handlers: refused before RunPodSandbox.
        assert!(
            lacking.starts_with(
                "Failed to create pod sandbox: RuntimeClass \"missing\": the runtime has no handler \"no-such-handler\" (CRI status reports: "
            ) && lacking.contains(&format!("\"{ALT_HANDLER}\"")),
            "{lacking}"
        );
    } else {
        assert!(
            lacking.starts_with("Failed to create pod sandbox: rpc error: code = Unknown desc = ")
                && lacking.contains("no runtime for \"no-such-handler\" is configured"),
            "{lacking}"
        );
    }
    for name in ["ghost", "lacking"] {
        let p = n.pod(name).expect(name);
        assert_eq!(p["status"]["phase"], "Pending", "{name}: {p}");
        assert_eq!(
            p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"], "ContainerCreating",
            "{name}"
        );
    }
    // Only alt's sandbox exists in containerd: none was made on the default handler.
    let sandboxes = {
        use nanolet::cri::Runtime;
        ctd.runtime().list_pod_sandboxes().expect("list")
    };
    let names: Vec<&str> = sandboxes.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["alt-node1"], "{sandboxes:?}");
}

#[test]
fn extended_resources_are_in_node_capacity_and_refuse_pods_asking_for_more() {
    let cgroups = PodCgroups::default();
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &["--extended-resources=example.com/dongle=1".into()]);
    let with = |name: &str, res: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '600']\n    resources:\n      limits: {{{res}: 1}}\n"
        )
    };
    n.write("first.yaml", &with("first", "example.com/dongle"));
    let first = n.wait_phase("first", "Running");
    let uid = |p: &Value| {
        p["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    cgroups.0.borrow_mut().push(uid(&first));
    n.write("second.yaml", &with("second", "example.com/dongle"));
    n.write("serial.yaml", &with("serial", "squat.ai/serial"));
    let second = n.wait_pod("second", "OutOfexample.com/dongle", |p| {
        p["status"]["reason"] == "OutOfexample.com/dongle"
    });
    assert_eq!(second["status"]["phase"], "Failed");
    assert_eq!(
        second["status"]["message"],
        "Node didn't have enough resource: example.com/dongle, requested: 1, used: 1, capacity: 1"
    );
    let serial = n.wait_pod("serial", "OutOfsquat.ai/serial", |p| {
        p["status"]["reason"] == "OutOfsquat.ai/serial"
    });
    assert_eq!(
        serial["status"]["message"],
        "Node didn't have enough resource: squat.ai/serial, requested: 1, used: 0, capacity: 0"
    );
    let nodes: Value = serde_json::from_str(&n.get("/api/v1/nodes").expect("nodes")).expect("json");
    let status = &nodes["items"][0]["status"];
    assert_eq!(status["capacity"]["example.com/dongle"], "1", "{status}");
    assert_eq!(status["allocatable"]["example.com/dongle"], "1", "{status}");
    // The holder goes: the refused pod is admitted and gets the dongle.
    n.remove("first.yaml");
    let second = n.wait_phase("second", "Running");
    cgroups.0.borrow_mut().push(uid(&second));
}

/// Joined (API-server mode), RuntimeClasses come from the API as the kubelet's informer reads
/// them: a class created after nanolet started (a watch event) is the handler of an API pod
/// bound to the node; a class the API does not have fails the sandbox with the kubelet's
/// event, posted to the API server.
#[test]
fn joined_runtime_classes_come_from_the_api_watch() {
    use support::apiserver::FakeApiServer;
    const TOKEN: &str = "t0ken-for-the-runtime-class-test";
    let cgroups = PodCgroups::default();
    let ctd = Containerd::start();
    let api = FakeApiServer::start(TOKEN);
    let kc = ctd.tmp().join("kubeconfig");
    api.write_kubeconfig(&kc, TOKEN);
    let empty = ctd.tmp().join("no-local-classes");
    fs::create_dir_all(&empty).expect("mkdir");
    fs::set_permissions(&empty, fs::Permissions::from_mode(0o755)).expect("chmod");
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--kubeconfig={}", kc.display()),
            format!("--runtime-class-dir={}", empty.display()),
            "--extended-resources=example.com/dongle=3".into(),
        ],
    );
    // The node registered (with its extended resources in capacity and allocatable): the
    // watch is running; the class arrives by a watch event.
    let node = wait_for(WAIT, || {
        api.get("/api/v1/nodes/node1")
            .filter(|n| n["status"]["allocatable"]["example.com/dongle"] == "3")
    })
    .unwrap_or_else(|| panic!("node not registered with its dongles\n{}", n.log_tail()));
    assert_eq!(node["status"]["capacity"]["example.com/dongle"], "3");
    api.create_object(
        "/apis/node.k8s.io/v1/runtimeclasses",
        serde_json::json!({"metadata": {"name": "alt"}, "handler": ALT_HANDLER}),
    );
    let api_pod = |name: &str, class: &str| {
        serde_json::json!({
            "metadata": {"name": name},
            "spec": {"nodeName": "node1", "automountServiceAccountToken": false,
                     "hostNetwork": true, "terminationGracePeriodSeconds": 1,
                     "runtimeClassName": class,
                     "containers": [{"name": "c", "image": "localhost/busybox:1.36",
                                     "imagePullPolicy": "IfNotPresent",
                                     "command": ["sleep", "600"]}]}
        })
    };
    // The pod may reach nanolet before the class's watch event does: its first sandbox then
    // fails (NotFound) and the retry runs it, as with the kubelet.
    api.create_pod("default", api_pod("alt", "alt"));
    api.create_pod("default", api_pod("ghost", "ghost"));
    let running = wait_for(Duration::from_secs(120), || {
        let p = api.get("/api/v1/namespaces/default/pods/alt")?;
        (p["status"]["phase"] == "Running").then_some(p)
    })
    .unwrap_or_else(|| panic!("alt not Running\n{}", n.log_tail()));
    cgroups.0.borrow_mut().push(
        running["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    );
    let alt_root = ctd.tmp().join("runc-alt").join("k8s.io");
    let in_alt_root = fs::read_dir(&alt_root).map(|d| d.count()).unwrap_or(0);
    assert!(
        in_alt_root >= 2,
        "sandbox and container under {}",
        alt_root.display()
    );
    // The events nanolet POSTed to the API server (client-go's recorder).
    let ghost_event = wait_for(WAIT, || {
        api.requests().iter().find_map(|r| {
            let e: Value = serde_json::from_str(&r.body).ok()?;
            (r.method == "POST"
                && r.path == "/api/v1/namespaces/default/events"
                && e["reason"] == "FailedCreatePodSandBox"
                && e["involvedObject"]["name"] == "ghost")
                .then(|| e["message"].as_str().unwrap_or_default().to_string())
        })
    })
    .unwrap_or_else(|| {
        panic!(
            "no FailedCreatePodSandBox event for ghost\n{}",
            n.log_tail()
        )
    });
    assert_eq!(
        ghost_event,
        "Failed to create pod sandbox: runtimeclass.node.k8s.io \"ghost\" not found"
    );
    if let Some(p) = api.get("/api/v1/namespaces/default/pods/ghost") {
        cgroups.0.borrow_mut().push(
            p["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        assert_ne!(p["status"]["phase"], "Running");
    }
}

/// The serial-device recipe of docs/edge-hardware.md until the device plugin API exists: a
/// device node made by the test (mknod, /dev/zero's numbers, in the test's directory) reaches
/// the container through a `hostPath` volume of type `CharDevice`; the extended resource
/// counting the device (`--extended-resources=squat.ai/serial=1`) refuses a second pod asking
/// for it with the kubelet's `OutOfsquat.ai/serial`.
#[test]
fn a_device_node_reaches_the_container_and_a_second_claim_is_refused() {
    let cgroups = PodCgroups::default();
    let ctd = Containerd::start();
    let dev = ctd.tmp().join("dev");
    fs::create_dir_all(&dev).expect("mkdir");
    let node = dev.join("ttyNANO0");
    nix::sys::stat::mknod(
        &node,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 5),
    )
    .expect("mknod");
    let n = Nanolet::start(&ctd, &["--extended-resources=squat.ai/serial=1".into()]);
    let modem = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'head -c 3 /dev/ttyUSB0 | od -An -tx1; sleep 600']\n    resources:\n      limits: {{squat.ai/serial: 1}}\n    securityContext: {{privileged: true}}\n    volumeMounts: [{{name: tty, mountPath: /dev/ttyUSB0}}]\n  volumes:\n  - name: tty\n    hostPath: {{path: {}, type: CharDevice}}\n",
            node.display()
        )
    };
    n.write("modem.yaml", &modem("modem"));
    let p = n.wait_phase("modem", "Running");
    let uid = p["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    cgroups.0.borrow_mut().push(uid.clone());
    let log_dir = n.pod_logs().join(format!("default_modem-node1_{uid}/c"));
    let read = wait_for(WAIT, || {
        let text = fs::read_to_string(log_dir.join("0.log")).ok()?;
        text.contains("00 00 00").then_some(text)
    });
    assert!(
        read.is_some(),
        "the device's bytes in the container's log under {}\n{}",
        log_dir.display(),
        n.log_tail()
    );
    n.write("modem2.yaml", &modem("modem2"));
    let second = n.wait_pod("modem2", "OutOfsquat.ai/serial", |p| {
        p["status"]["reason"] == "OutOfsquat.ai/serial"
    });
    assert_eq!(
        second["status"]["message"],
        "Node didn't have enough resource: squat.ai/serial, requested: 1, used: 1, capacity: 1"
    );
}
