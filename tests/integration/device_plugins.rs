//! The device plugin API v1beta1 (issue 32) against device plugins nobody here wrote, built
//! from their Go modules by `scripts/upstream`, on a real containerd.
//!
//! Kubernetes' own e2e plugin (test/images/sample-device-plugin, k8s.io/kubernetes v1.36.3:
//! resource `example.com/resource`, devices Dev-1 and Dev-2; its Allocate answers a mount of
//! /tmp/<id> per device) registers on nanolet's kubelet.sock. It dials the kubelet's fixed path
//! /var/lib/kubelet/device-plugins/kubelet.sock, so it runs in a mount namespace of its own
//! where the test's directory is bind-mounted over /var/lib: nanolet serves
//! `<test>/varlib/kubelet/device-plugins/kubelet.sock`, the plugin sees it at the kubelet's path.

use nanolet_test_support as support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::Containerd;
use support::agent::Nanolet;
use support::wait_for;

const WAIT: Duration = Duration::from_secs(90);
const RESOURCE: &str = "example.com/resource";

/// The sample device plugin in its own mount namespace (the test's directory over /var/lib),
/// stopped (SIGTERM, then SIGKILL) by its PID when dropped. The files its Allocate makes
/// (/tmp/Dev-1, /tmp/Dev-2: host paths containerd mounts) are removed too.
struct SamplePlugin {
    child: Option<Child>,
    varlib: PathBuf,
    log: PathBuf,
    /// With CDI: the directory put over /run in the plugin's namespace (its `cdi` links to
    /// the test containerd's CDI spec directory), where it writes /var/run/cdi/example.com.json.
    cdi_run: Option<PathBuf>,
}

impl SamplePlugin {
    fn start(varlib: &Path, log: &Path) -> SamplePlugin {
        let mut p = SamplePlugin {
            child: None,
            varlib: varlib.to_path_buf(),
            log: log.to_path_buf(),
            cdi_run: None,
        };
        p.spawn();
        p
    }

    fn spawn(&mut self) {
        let bin =
            support::runtime::upstream_path("sample-device-plugin").join("sample-device-plugin");
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("plugin log");
        // unshare execs sh, sh execs the plugin: the child's PID is the plugin's.
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg("mount --bind \"$1\" /var/lib && { [ -z \"$3\" ] || mount --bind \"$3\" /run; } && exec \"$2\"")
            .arg("sh")
            .arg(&self.varlib)
            .arg(&bin);
        match &self.cdi_run {
            Some(run) => {
                cmd.arg(run).env("CDI_ENABLED", "1");
            }
            None => {
                cmd.arg("");
            }
        }
        let child = cmd
            .env("PLUGIN_SOCK_DIR", "/var/lib/kubelet/device-plugins")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("starting the sample device plugin");
        self.child = Some(child);
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            if wait_for(Duration::from_secs(10), || c.try_wait().ok().flatten()).is_none() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for SamplePlugin {
    fn drop(&mut self) {
        self.stop();
        for id in ["Dev-1", "Dev-2"] {
            let _ = fs::remove_file(Path::new("/tmp").join(id));
        }
    }
}

/// The node's (capacity, allocatable) of `resource` on the local API, "" when absent.
fn node_counts(n: &Nanolet, resource: &str) -> (String, String) {
    let Some(body) = n.get("/api/v1/nodes") else {
        return (String::new(), String::new());
    };
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    let s = &v["items"][0]["status"];
    let get = |k: &str| s[k][resource].as_str().unwrap_or_default().to_string();
    (get("capacity"), get("allocatable"))
}

fn wait_counts(n: &Nanolet, p: &SamplePlugin, cap: &str, alloc: &str) {
    let ok = wait_for(WAIT, || {
        (node_counts(n, RESOURCE) == (cap.to_string(), alloc.to_string())).then_some(())
    });
    assert!(
        ok.is_some(),
        "node capacity/allocatable of {RESOURCE}: want {cap}/{alloc}, have {:?}\nnanolet:\n{}\nplugin:\n{}",
        node_counts(n, RESOURCE),
        n.log_tail(),
        p.log()
    );
}

fn pod(name: &str, count: u32) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'ls /tmp/Dev-*; sleep 600']\n    resources:\n      limits: {{{RESOURCE}: {count}}}\n"
    )
}

fn log_mentions(log: &Path, id: &str) -> bool {
    fs::read_to_string(log).is_ok_and(|t| t.contains(&format!("/tmp/{id}")))
}

fn container_id(p: &Value) -> String {
    p["status"]["containerStatuses"][0]["containerID"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Registration, ListAndWatch into the node's capacity and allocatable, Allocate's mounts in
/// the container, the kubelet's `UnexpectedAdmissionError` for a pod asking for more devices
/// than are free (devicemanager devicesToAllocate, cm/admission errors.go), the plugin's
/// restart (its stream ends: devices unhealthy, allocatable 0, capacity kept; it registers
/// again) and nanolet's restart (kubelet.sock made anew, the plugin re-registers; the
/// allocation comes back from the checkpoint): the running pod keeps its container and its
/// device throughout, and its device stays taken.
#[test]
fn sample_device_plugin_registers_allocates_and_survives_restarts() {
    let ctd = Containerd::start();
    let varlib = ctd.tmp().join("varlib");
    let dp = varlib.join("kubelet/device-plugins");
    fs::create_dir_all(&dp).expect("mkdir");
    let mut n = Nanolet::start(&ctd, &[format!("--device-plugin-dir={}", dp.display())]);
    assert!(
        dp.join("kubelet.sock").exists(),
        "kubelet.sock in {}",
        dp.display()
    );
    let mut plugin = SamplePlugin::start(&varlib, &ctd.tmp().join("sample-device-plugin.log"));
    wait_counts(&n, &plugin, "2", "2");

    n.write("one.yaml", &pod("one", 1));
    let one = n.wait_phase("one", "Running");
    let uid = one["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let log = n
        .pod_logs()
        .join(format!("default_one-node1_{uid}/c/0.log"));
    let listed = wait_for(WAIT, || {
        let t = fs::read_to_string(&log).ok()?;
        t.contains("/tmp/Dev-").then_some(t)
    });
    let listed = listed.unwrap_or_else(|| {
        panic!(
            "the allocated device's mount in the container ({})\n{}\n{}",
            log.display(),
            n.log_tail(),
            plugin.log()
        )
    });
    // One device, not both.
    assert_eq!(listed.matches("/tmp/Dev-").count(), 1, "{listed}");
    let cid = container_id(&one);
    // pod-resources List (server_v1.go): the pod's container and its one device.
    let sock = n
        .manifests()
        .parent()
        .expect("agent dir")
        .join("pod-resources/kubelet.sock");
    let listed = nanolet::devicemanager::podresources::list_for_tests(&sock)
        .unwrap_or_else(|e| panic!("pod-resources List on {}: {e}", sock.display()));
    let held: Vec<_> = listed
        .iter()
        .filter(|(ns, pod, c, r, _)| {
            ns == "default" && pod == "one-node1" && c == "c" && r == RESOURCE
        })
        .collect();
    assert_eq!(held.len(), 1, "{listed:?}");
    assert_eq!(held[0].4.len(), 1, "{listed:?}");
    assert!(
        listed
            .iter()
            .any(|(_, _, _, _, ids)| ids.iter().any(|id| log_mentions(&log, id))),
        "{listed:?}"
    );

    // Two more than the one left: the kubelet's reason and message, word for word.
    let refused = |n: &Nanolet, name: &str| {
        n.write(&format!("{name}.yaml"), &pod(name, 2));
        let p = n.wait_pod(name, "UnexpectedAdmissionError", |p| {
            p["status"]["reason"] == "UnexpectedAdmissionError"
        });
        assert_eq!(
            p["status"]["message"],
            format!(
                "Allocate failed due to requested number of devices unavailable for {RESOURCE}. Requested: 2, Available: 1, which is unexpected"
            )
        );
        assert_eq!(p["status"]["phase"], "Failed");
        n.remove(&format!("{name}.yaml"));
    };
    refused(&n, "two");

    // The plugin stops: its devices turn unhealthy (allocatable 0, capacity 2 within the
    // grace period); it starts again and registers: 2 allocatable.
    plugin.stop();
    wait_counts(&n, &plugin, "2", "0");
    plugin.spawn();
    wait_counts(&n, &plugin, "2", "2");

    // nanolet restarts: its kubelet.sock is new, the plugin registers again, the allocation
    // is the checkpoint's.
    n.stop();
    n.spawn();
    wait_counts(&n, &plugin, "2", "2");
    let one = n.wait_phase("one", "Running");
    assert_eq!(container_id(&one), cid, "the pod kept its container");
    assert_eq!(one["status"]["containerStatuses"][0]["restartCount"], 0);
    refused(&n, "three");
}

/// CDI (the sample plugin with CDI_ENABLED): its Allocate answers the CDI name
/// `example.com/resource=CDI-Dev-N` and it writes the CDI spec, whose edits set CDI_DEVICE in
/// the container. nanolet sends the name in CRI `CDI_devices`; containerd 2 (CDI on, the
/// test containerd's spec directory) applies the edits. containerd 1.6 and 1.7 as the harness
/// configures them have no CDI: the name is ignored there, as it is behind a kubelet.
#[test]
fn cdi_device_names_reach_the_runtime() {
    let ctd = Containerd::start();
    let varlib = ctd.tmp().join("varlib");
    let dp = varlib.join("kubelet/device-plugins");
    fs::create_dir_all(&dp).expect("mkdir");
    let run = ctd.tmp().join("plugin-run");
    fs::create_dir_all(ctd.tmp().join("cdi")).expect("mkdir cdi");
    fs::create_dir_all(&run).expect("mkdir run");
    std::os::unix::fs::symlink(ctd.tmp().join("cdi"), run.join("cdi")).expect("symlink");
    let n = Nanolet::start(&ctd, &[format!("--device-plugin-dir={}", dp.display())]);
    let mut plugin = SamplePlugin {
        child: None,
        varlib: varlib.clone(),
        log: ctd.tmp().join("sample-device-plugin.log"),
        cdi_run: Some(run),
    };
    plugin.spawn();
    wait_counts(&n, &plugin, "2", "2");
    assert!(
        ctd.tmp().join("cdi/example.com.json").exists(),
        "{}",
        plugin.log()
    );
    n.write(
        "cdi.yaml",
        &pod("cdi", 1).replace("ls /tmp/Dev-*;", "echo CDI_DEVICE=$CDI_DEVICE;"),
    );
    let p = n.wait_phase("cdi", "Running");
    let uid = p["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let log = n
        .pod_logs()
        .join(format!("default_cdi-node1_{uid}/c/0.log"));
    let text = wait_for(WAIT, || {
        let t = fs::read_to_string(&log).ok()?;
        t.contains("CDI_DEVICE=").then_some(t)
    })
    .unwrap_or_else(|| panic!("container log {}\n{}", log.display(), n.log_tail()));
    if support::runtime::test_runtime().name == "2" {
        assert!(text.contains("CDI_DEVICE=CDI-Dev-"), "{text}");
    } else {
        assert!(!text.contains("CDI_DEVICE=CDI-Dev-"), "{text}");
    }
}

use support::devices::{NodePlugin, SERIAL};

fn wait_serial(n: &Nanolet, p: &NodePlugin, cap: &str, alloc: &str) {
    let ok = wait_for(WAIT, || {
        (node_counts(n, SERIAL) == (cap.to_string(), alloc.to_string())).then_some(())
    });
    assert!(
        ok.is_some(),
        "node capacity/allocatable of {SERIAL}: want {cap}/{alloc}, have {:?}\nnanolet:\n{}\nplugin:\n{}",
        node_counts(n, SERIAL),
        n.log_tail(),
        p.log()
    );
}

fn serial_pod(name: &str, count: u32) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'for d in /dev/ttyNANO*; do [ -c $d ] && echo x > $d && echo WROTE $d; done; echo DEVS=$NANOLET_TEST_DEVICES; sleep 600']\n    resources:\n      limits: {{{SERIAL}: {count}}}\n"
    )
}

/// The container log of `name`'s container once it has printed its devices.
fn serial_log(n: &Nanolet, p: &NodePlugin, name: &str) -> String {
    let pod = n.wait_phase(name, "Running");
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let log = n
        .pod_logs()
        .join(format!("default_{name}-node1_{uid}/c/0.log"));
    wait_for(WAIT, || {
        let t = fs::read_to_string(&log).ok()?;
        t.contains("DEVS=").then_some(t)
    })
    .unwrap_or_else(|| {
        panic!(
            "container log {}\n{}\n{}",
            log.display(),
            n.log_tail(),
            p.log()
        )
    })
}

/// A device plugin whose Allocate answers device nodes (as serial, USB and GPU plugins do):
/// the node the test made reaches the container at the plugin's path, writable (the device
/// cgroup allows it, "rw"), and no other device does; the plugin's env reaches the container;
/// GetPreferredAllocation is asked and its answer taken (the plugin prefers the highest ids);
/// PreStartContainer is called before the container starts (the plugin asked for it,
/// devicemanager callPreStartContainerIfNeeded). An unhealthy device leaves allocatable, not
/// capacity (devicemanager genericDeviceUpdateCallback: allocatable counts healthy devices),
/// and is not allocated: the kubelet's UnexpectedAdmissionError; healthy again, it is.
#[test]
fn device_nodes_preferred_allocation_and_health_from_a_second_plugin() {
    let ctd = Containerd::start();
    let dp = ctd.tmp().join("device-plugins");
    fs::create_dir_all(&dp).expect("mkdir");
    let devices = support::devices::make_device_nodes(&ctd.tmp().join("devnodes"), 3);
    let health = ctd.tmp().join("unhealthy");
    let n = Nanolet::start(&ctd, &[format!("--device-plugin-dir={}", dp.display())]);
    let plugin = NodePlugin::start(
        &dp.join("kubelet.sock"),
        &devices,
        &health,
        &ctd.tmp().join("test-device-plugin.log"),
    );
    wait_serial(&n, &plugin, "3", "3");

    n.write("two.yaml", &serial_pod("two", 2));
    let text = serial_log(&n, &plugin, "two");
    for want in ["WROTE /dev/ttyNANO2", "WROTE /dev/ttyNANO1"] {
        assert!(text.contains(want), "{want} in\n{text}\n{}", plugin.log());
    }
    assert!(!text.contains("ttyNANO0"), "an unallocated device:\n{text}");
    let devs = text
        .lines()
        .find_map(|l| l.split("DEVS=").nth(1))
        .unwrap_or_default();
    let mut ids: Vec<&str> = devs.trim().split(',').collect();
    ids.sort_unstable();
    assert_eq!(ids, ["ttyNANO1", "ttyNANO2"], "{text}");
    let log = plugin.log();
    assert!(log.contains("GetPreferredAllocation"), "{log}");
    assert!(log.contains("PreStartContainer"), "{log}");

    // ttyNANO0, the one free device, turns unhealthy: allocatable 2 of capacity 3, and a pod
    // asking for one is refused with the kubelet's words.
    fs::write(&health, "ttyNANO0\n").expect("health file");
    plugin.health_changed();
    wait_serial(&n, &plugin, "3", "2");
    n.write("one.yaml", &serial_pod("one", 1));
    let p = n.wait_pod("one", "UnexpectedAdmissionError", |p| {
        p["status"]["reason"] == "UnexpectedAdmissionError"
    });
    assert_eq!(
        p["status"]["message"],
        format!(
            "Allocate failed due to requested number of devices unavailable for {SERIAL}. Requested: 1, Available: 0, which is unexpected"
        )
    );
    n.remove("one.yaml");

    // Healthy again: allocatable 3, and the next pod gets ttyNANO0.
    fs::write(&health, "").expect("health file");
    plugin.health_changed();
    wait_serial(&n, &plugin, "3", "3");
    n.write("again.yaml", &serial_pod("again", 1));
    let text = serial_log(&n, &plugin, "again");
    assert!(text.contains("WROTE /dev/ttyNANO0"), "{text}");
    assert!(text.contains("DEVS=ttyNANO0"), "{text}");
    // The first pod kept its devices throughout.
    assert_eq!(
        n.wait_phase("two", "Running")["status"]["containerStatuses"][0]["restartCount"],
        0
    );
}
