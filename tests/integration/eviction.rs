//! Eviction, local storage limits and admission against a real containerd, with the real
//! binary. Each test in this file runs alone: one at a time, and beside no test of another area
//! (they measure the node's memory and disk; `support::gate::exclusive()`).

use nanolet_test_support as support;

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use support::agent::{NODE, Nanolet, TIMEOUT};
use support::{Containerd, Tmpfs, wait_for};

/// Held for the whole test, before its containerd starts: no other test of any area runs
/// meanwhile (it was a mutex of this file's when each file was its own test process, which
/// cargo ran after the others).
fn serial() -> support::gate::Exclusive {
    support::exclusive()
}

fn pod_yaml(name: &str, body: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n{body}")
}

fn container<'a>(p: &'a Value, name: &str) -> &'a Value {
    p["status"]["containerStatuses"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

fn running_id(p: &Value) -> (String, i64) {
    let c = container(p, "c");
    (
        c["containerID"].as_str().unwrap_or_default().to_string(),
        c["restartCount"].as_i64().unwrap_or(-1),
    )
}

fn is_evicted(p: &Value) -> bool {
    p["status"]["phase"] == "Failed" && p["status"]["reason"] == "Evicted"
}

fn ready(p: &Value) -> bool {
    p["status"]["conditions"].as_array().is_some_and(|a| {
        a.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn healthz(n: &Nanolet) -> String {
    n.get("/healthz?verbose").unwrap_or_default()
}

/// The eviction manager's pass counter from /metrics.
fn passes(n: &Nanolet) -> u64 {
    n.get("/metrics")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("nanolet_eviction_manager_passes_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Waits until the eviction manager has completed `k` more passes.
fn wait_passes(n: &Nanolet, k: u64) {
    let start = passes(n);
    wait_for(TIMEOUT, || (passes(n) >= start + k).then_some(())).unwrap_or_else(|| {
        panic!(
            "eviction manager stuck at {} passes\n{}",
            passes(n),
            n.log_tail()
        )
    });
}

fn evicted_event(n: &Nanolet, pod: &str) -> Option<String> {
    let full = format!("{pod}-{}", NODE.to_lowercase());
    let events: Value = serde_json::from_str(&n.get("/api/v1/namespaces/default/events")?).ok()?;
    events["items"].as_array()?.iter().find_map(|e| {
        (e["reason"] == "Evicted" && e["involvedObject"]["name"] == full.as_str())
            .then(|| e["message"].as_str().unwrap_or_default().to_string())
    })
}

/// Disk pressure (nodefs.available on a 64 MiB root dir): the BestEffort pod that fills its
/// emptyDir is evicted (Failed/Evicted, an Evicted event naming ephemeral-storage), the
/// system-node-critical pod beside it is untouched (nanolet's edge rule: priority >=
/// 2000000000 is never evicted), DiskPressure shows in /healthz?verbose and in the node object,
/// clears after evictionPressureTransitionPeriod, and then the evicted pod is re-admitted.
#[test]
fn disk_pressure_evicts_the_filler_not_the_critical_pod_and_readmits_it() {
    let _serial = serial();
    let ctd = Containerd::start();
    let small = Tmpfs::mount(&ctd.tmp().join("small-root"), "64m");
    let marker = ctd.tmp().join("marker");
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--root-dir={}", small.0.display()),
            // Logs on the same small filesystem: nodefs is only this one.
            format!("--pod-logs-dir={}", small.0.join("log/pods").display()),
            "--eviction-hard=nodefs.available<30%".into(),
            "--eviction-monitoring-period=1s".into(),
            "--eviction-pressure-transition-period=5s".into(),
        ],
    );
    n.write(
        "critical.yaml",
        &pod_yaml(
            "critical",
            "spec:\n  priorityClassName: system-node-critical\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '3600']\n",
        ),
    );
    let crit = n.wait_phase("critical", "Running");
    let crit_before = running_id(&crit);
    n.write(
        "filler.yaml",
        &pod_yaml(
            "filler",
            &format!(
                "spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'if [ -e /marker/done ]; then exec sleep 3600; fi; touch /marker/done; dd if=/dev/zero of=/scratch/fill bs=1M count=50; exec sleep 3600']\n    volumeMounts:\n    - {{name: scratch, mountPath: /scratch}}\n    - {{name: marker, mountPath: /marker}}\n  volumes:\n  - name: scratch\n    emptyDir: {{}}\n  - name: marker\n    hostPath: {{path: {}, type: DirectoryOrCreate}}\n",
                marker.display()
            ),
        ),
    );
    // DiskPressure shows (it is held for the 5 s transition period, so polling sees it).
    wait_for(TIMEOUT * 2, || {
        healthz(&n).contains("DiskPressure=True").then_some(())
    })
    .unwrap_or_else(|| panic!("no DiskPressure: {}\n{}", healthz(&n), n.log_tail()));
    let p = n.wait_pod("filler", "Failed/Evicted", is_evicted);
    let msg = p["status"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("The node was low on resource: ephemeral-storage. Threshold quantity: "),
        "{msg}"
    );
    let ev = wait_for(TIMEOUT, || evicted_event(&n, "filler")).expect("an Evicted event");
    assert_eq!(ev, msg);
    // Its emptyDir is gone: the space came back, the condition clears after 5 s.
    wait_for(TIMEOUT, || {
        healthz(&n).contains("DiskPressure=False").then_some(())
    })
    .unwrap_or_else(|| {
        let du = std::process::Command::new("du")
            .args(["-a", "-k"])
            .arg(&small.0)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let log = fs::read_to_string(ctd.tmp().join("nanolet/nanolet.log")).unwrap_or_default();
        let log: Vec<&str> = log
            .lines()
            .filter(|l| {
                !l.contains("DEBUG")
                    && !l.contains("reclaimed")
                    && !l.contains("every pod is critical")
            })
            .collect();
        panic!(
            "DiskPressure never cleared: {}\n{du}\n{}",
            healthz(&n),
            log.join("\n")
        )
    });
    // Re-admitted (afresh: restart count 0); the marker keeps it from filling again.
    let back = n.wait_pod("filler", "re-admitted and Running", |p| {
        p["status"]["phase"] == "Running" && container(p, "c")["state"]["running"].is_object()
    });
    assert_eq!(running_id(&back).1, 0);
    // The critical pod never moved.
    let crit = n.pod("critical").expect("critical pod");
    assert_eq!(crit["status"]["phase"], "Running");
    assert_eq!(running_id(&crit), crit_before, "critical pod untouched");
}

/// LocalStorageCapacityIsolation: an emptyDir over its sizeLimit is evicted with the kubelet's
/// message and the DisruptionTarget condition; one at 99% of its limit is not; a memory-medium emptyDir filled to its sizeLimit is
/// not evicted on disk grounds (it counts as memory).
#[test]
fn empty_dir_size_limit_evicts_only_the_pod_over_its_limit() {
    let _serial = serial();
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &["--eviction-monitoring-period=1s".into()]);
    let pod = |name: &str, medium: &str, bytes: u64| {
        pod_yaml(
            name,
            &format!(
                "spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'dd if=/dev/zero of=/scratch/fill bs=1000 count={} && touch /tmp/written; exec sleep 3600']\n    readinessProbe:\n      exec: {{command: [cat, /tmp/written]}}\n      periodSeconds: 1\n    volumeMounts:\n    - {{name: scratch, mountPath: /scratch}}\n  volumes:\n  - name: scratch\n    emptyDir: {{{medium}sizeLimit: 8Mi}}\n",
                bytes / 1000
            ),
        )
    };
    // 8Mi = 8388608 bytes; 99% = 8304721.
    n.write("under.yaml", &pod("under", "", 8_300_000));
    n.write("ram.yaml", &pod("ram", "medium: Memory, ", 8_300_000));
    n.write("over.yaml", &pod("over", "", 10_000_000));
    let p = n.wait_pod("over", "Failed/Evicted", is_evicted);
    assert_eq!(
        p["status"]["message"],
        "Usage of EmptyDir volume \"scratch\" exceeds the limit \"8Mi\". "
    );
    // PodDisruptionConditions (GA in 1.31): the kubelet's evictPod adds DisruptionTarget.
    let dt = p["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "DisruptionTarget"))
        .unwrap_or_else(|| panic!("no DisruptionTarget: {p:#}"));
    assert_eq!(
        (&dt["status"], &dt["reason"], &dt["message"]),
        (
            &json!("True"),
            &json!("TerminationByKubelet"),
            &p["status"]["message"]
        )
    );
    let under = n.wait_pod("under", "Ready", ready);
    let ram = n.wait_pod("ram", "Ready", ready);
    // Both have written everything; two more full passes must leave them alone.
    wait_passes(&n, 2);
    for (name, before) in [("under", under), ("ram", ram)] {
        let now = n.pod(name).expect("pod");
        assert_eq!(now["status"]["phase"], "Running", "{name}: {now:#}");
        assert_eq!(running_id(&now), running_id(&before), "{name} untouched");
    }
    assert!(evicted_event(&n, "under").is_none());
}

/// Memory pressure (memory.available set just below what the node has now): the pod using the
/// most memory above its requests is evicted, with the kubelet's message naming its container;
/// the small BestEffort pod and the critical pod stay; once MemoryPressure has cleared for the
/// transition period, the evicted pod runs again.
#[test]
fn memory_pressure_evicts_the_biggest_user_above_requests() {
    let _serial = serial();
    let ctd = Containerd::start();
    let marker = ctd.tmp().join("hog-marker");
    let writer = |name: &str, prio: &str, mib: u32, with_marker: bool| {
        let guard = if with_marker {
            "if [ -e /marker/done ]; then touch /tmp/written; exec sleep 3600; fi; touch /marker/done; "
        } else {
            ""
        };
        let marker_mount = if with_marker {
            "    - {name: marker, mountPath: /marker}\n"
        } else {
            ""
        };
        let marker_vol = if with_marker {
            format!(
                "  - name: marker\n    hostPath: {{path: {}, type: DirectoryOrCreate}}\n",
                marker.display()
            )
        } else {
            String::new()
        };
        pod_yaml(
            name,
            &format!(
                "spec:\n{prio}  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, '{guard}dd if=/dev/zero of=/mem/fill bs=1M count={mib} && touch /tmp/written; exec sleep 3600']\n    readinessProbe:\n      exec: {{command: [cat, /tmp/written]}}\n      periodSeconds: 1\n    volumeMounts:\n    - {{name: mem, mountPath: /mem}}\n{marker_mount}  volumes:\n  - name: mem\n    emptyDir: {{medium: Memory, sizeLimit: 2Gi}}\n{marker_vol}"
            ),
        )
    };
    let mem = nanolet::eviction::observe::MemorySource::detect();
    let available = || {
        let (cap, ws) = mem.read().expect("memory figures");
        cap - ws
    };
    // First the bystanders, with the eviction threshold still off.
    let mut n = Nanolet::start(&ctd, &["--eviction-monitoring-period=1s".into()]);
    n.write(
        "crit.yaml",
        &writer(
            "crit",
            "  priorityClassName: system-node-critical\n",
            100,
            false,
        ),
    );
    n.write("small.yaml", &writer("small", "", 1, false));
    let crit = n.wait_pod("crit", "Ready", ready);
    let small = n.wait_pod("small", "Ready", ready);
    // Restart nanolet with memory.available 800 MiB under what is available now (pods stay):
    // the 1200 MiB hog crosses it, and other processes on the machine (a compiler next to the
    // test) may take up to 800 MiB meanwhile without pushing the node into pressure again.
    let threshold = available() - (800 << 20);
    n.stop();
    n.args
        .push(format!("--eviction-hard=memory.available<{threshold}"));
    n.args
        .push("--eviction-pressure-transition-period=5s".into());
    n.spawn();
    wait_passes(&n, 2);
    assert!(
        healthz(&n).contains("MemoryPressure=False"),
        "no pressure before the hog: {}",
        healthz(&n)
    );
    n.write("hog.yaml", &writer("hog", "", 1200, true));
    let p = n.wait_pod("hog", "Failed/Evicted", is_evicted);
    let msg = p["status"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        msg.starts_with("The node was low on resource: memory. Threshold quantity: ")
            && msg.contains("Container c was using ")
            && msg.contains("request is 0, has larger consumption of memory. "),
        "{msg}"
    );
    assert!(wait_for(TIMEOUT, || evicted_event(&n, "hog")).is_some());
    // Pressure clears (the hog's tmpfs is gone), the hog comes back without allocating again.
    wait_for(TIMEOUT, || {
        healthz(&n).contains("MemoryPressure=False").then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "MemoryPressure never cleared: {}\n{}",
            healthz(&n),
            n.log_tail()
        )
    });
    n.wait_pod("hog", "re-admitted and Ready", |p| {
        p["status"]["phase"] == "Running" && ready(p)
    });
    for (name, before) in [("crit", crit), ("small", small)] {
        let now = n.pod(name).expect("pod");
        assert_eq!(now["status"]["phase"], "Running", "{name}: {now:#}");
        assert_eq!(running_id(&now), running_id(&before), "{name} untouched");
        assert!(evicted_event(&n, name).is_none(), "{name} was evicted");
    }
}

/// Admission (the kubelet's reasons and messages): maxPods -> OutOfpods, requests beyond
/// allocatable (capacity - systemReserved - kubeReserved - hard memory threshold) -> OutOfcpu /
/// OutOfmemory; a rejected pod is admitted once room appears.
#[test]
fn admission_rejects_with_the_kubelet_reasons_and_admits_when_room_appears() {
    let _serial = serial();
    let ctd = Containerd::start();
    let cap = nanolet::node::capacity();
    // Leave 64Mi of allocatable memory: capacity - reserved - 100Mi = 64Mi.
    let reserved = cap.memory_bytes - (100 << 20) - (64 << 20);
    let n = Nanolet::start(
        &ctd,
        &[
            "--max-pods=2".into(),
            format!("--system-reserved=memory={reserved}"),
            "--eviction-hard=memory.available<100Mi".into(),
        ],
    );
    let pod = |name: &str, resources: &str| {
        pod_yaml(
            name,
            &format!(
                "spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '3600']\n{resources}"
            ),
        )
    };
    n.write("a.yaml", &pod("a", ""));
    n.wait_phase("a", "Running");
    let cpu = (cap.cpu_millis + 1000) / 1000;
    n.write(
        "cpu.yaml",
        &pod(
            "cpu",
            &format!("    resources: {{requests: {{cpu: '{cpu}'}}}}\n"),
        ),
    );
    let p = n.wait_pod("cpu", "OutOfcpu", |p| p["status"]["reason"] == "OutOfcpu");
    assert_eq!(p["status"]["phase"], "Failed");
    assert_eq!(
        p["status"]["message"],
        format!(
            "Node didn't have enough resource: cpu, requested: {}, used: 0, capacity: {}",
            cpu * 1000,
            cap.cpu_millis
        )
    );
    n.write(
        "mem.yaml",
        &pod("mem", "    resources: {requests: {memory: 65Mi}}\n"),
    );
    let p = n.wait_pod("mem", "OutOfmemory", |p| {
        p["status"]["reason"] == "OutOfmemory"
    });
    assert_eq!(
        p["status"]["message"],
        format!(
            "Node didn't have enough resource: memory, requested: {}, used: 0, capacity: {}",
            65 << 20,
            64 << 20
        )
    );
    n.remove("cpu.yaml");
    n.remove("mem.yaml");
    n.write("b.yaml", &pod("b", ""));
    n.wait_phase("b", "Running");
    n.write("c.yaml", &pod("c", ""));
    let p = n.wait_pod("c", "OutOfpods", |p| p["status"]["reason"] == "OutOfpods");
    assert_eq!(
        p["status"]["message"],
        "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"
    );
    // Room appears: c runs.
    n.remove("a.yaml");
    n.wait_phase("c", "Running");
}

fn sh(cmd: &str) {
    let out = std::process::Command::new("sh")
        .args(["-ec", cmd])
        .output()
        .expect("sh");
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A docker-archive of the busybox test image tagged `tag`, made a distinct image (its own
/// config digest, so its own CRI image ID) by an extra environment variable.
fn distinct_image(work: &Path, tag: &str) -> PathBuf {
    use sha2::Digest;
    let name = tag.replace(['/', ':'], "_");
    let src = work.join(format!("src-{name}"));
    fs::create_dir_all(&src).expect("dir");
    sh(&format!(
        "tar -C {} -xf {}",
        src.display(),
        support::test_images().join("busybox.tar").display()
    ));
    let blob = |d: &str| src.join("blobs/sha256").join(&d[7..]);
    let index = read_json(&src.join("index.json"));
    let manifest = read_json(&blob(
        index["manifests"][0]["digest"].as_str().expect("digest"),
    ));
    let mut config = read_json(&blob(
        manifest["config"]["digest"].as_str().expect("config"),
    ));
    config["config"]["Env"] = serde_json::json!([format!("DISTINCT={tag}")]);
    let config = serde_json::to_vec(&config).expect("json");
    let digest = format!("{:x}", sha2::Sha256::digest(&config));
    let d = work.join(format!("docker-{name}"));
    fs::create_dir_all(d.join("layer1")).expect("dir");
    fs::write(d.join(format!("{digest}.json")), &config).expect("config");
    sh(&format!(
        "gzip -dc {} > {}",
        blob(manifest["layers"][0]["digest"].as_str().expect("layer")).display(),
        d.join("layer1/layer.tar").display()
    ));
    let m = serde_json::json!([{
        "Config": format!("{digest}.json"),
        "RepoTags": [tag],
        "Layers": ["layer1/layer.tar"],
    }]);
    fs::write(
        d.join("manifest.json"),
        serde_json::to_vec(&m).expect("json"),
    )
    .expect("write");
    let out = work.join(format!("{name}.tar"));
    sh(&format!("tar -C {} -cf {} .", d.display(), out.display()));
    out
}

fn import(ctd: &Containerd, pins: &Path, archive: &Path) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nanolet"))
        .args(["images", "import"])
        .arg(format!("--container-runtime-endpoint={}", ctd.endpoint()))
        .arg(format!("--root-dir={}", pins.display()))
        .arg(archive)
        .output()
        .expect("nanolet images import");
    assert!(
        out.status.success(),
        "import {}: {}",
        archive.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Image GC (imageGCHighThresholdPercent / imageGCLowThresholdPercent / imageMinimumGCAge):
/// with the high threshold at 1% every unused image is a candidate; the unused, unpinned image
/// is removed; images nanolet imported (its pin record), the sandbox image and an image a
/// running pod uses are kept.
#[test]
fn image_gc_removes_unused_unpinned_images_only() {
    use nanolet::cri::Runtime;
    let _serial = serial();
    let ctd = Containerd::start();
    let work = ctd.tmp().join("gc-images");
    fs::create_dir_all(&work).expect("dir");
    // The harness imported busybox and pause with this pin record: nanolet uses it as its
    // root dir, so those count as imported (pinned) images.
    let pins = ctd.tmp().join("image-pins");
    let other = ctd.tmp().join("other-pins");
    import(&ctd, &pins, &distinct_image(&work, "localhost/kept:1"));
    import(&ctd, &other, &distinct_image(&work, "localhost/unused:1"));
    let rt = ctd.runtime();
    let present = |img: &str| rt.image_status(img).ok().flatten().is_some();
    assert!(present("localhost/kept:1") && present("localhost/unused:1"));
    // `nanolet images import` labels what it imports io.cri-containerd.pinned=pinned:
    // containerd >= 1.7's CRI reports such images pinned (Image.pinned), and image GC, like
    // the kubelet's, never removes a pinned image; 1.6's CRI ignores the label (then
    // nanolet's own pin record decides). Unpin "unused" in containerd, as an image pulled by
    // someone else would be.
    let pinned = |img: &str| {
        rt.image_status(img)
            .ok()
            .flatten()
            .is_some_and(|i| i.pinned)
    };
    assert_eq!(
        pinned("localhost/unused:1"),
        support::test_runtime().name != "1.6",
        "CRI's pinned flag for an imported image"
    );
    let out = std::process::Command::new(support::test_runtime().ctr())
        .arg("--address")
        .arg(ctd.socket_path())
        .args(["-n", "k8s.io", "images", "label", "localhost/unused:1"])
        .arg("io.cri-containerd.pinned=")
        .output()
        .expect("ctr images label");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for(TIMEOUT, || (!pinned("localhost/unused:1")).then_some(()))
        .expect("CRI reports the unlabelled image unpinned");
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--root-dir={}", pins.display()),
            "--image-gc-high-threshold=1".into(),
            "--image-gc-low-threshold=0".into(),
            "--minimum-image-ttl-duration=0s".into(),
            "--eviction-monitoring-period=1s".into(),
        ],
    );
    wait_for(TIMEOUT, || (!present("localhost/unused:1")).then_some(()))
        .unwrap_or_else(|| panic!("unused image not collected\n{}", n.log_tail()));
    for img in [
        "localhost/kept:1",
        support::BUSYBOX_IMAGE,
        support::PAUSE_IMAGE,
    ] {
        assert!(present(img), "{img} was removed");
    }
}

/// This node's Node object condition of `type_` from the read-only API (`/api/v1/nodes`).
fn node_condition(n: &Nanolet, type_: &str) -> Option<Value> {
    let nodes: Value = serde_json::from_str(&n.get("/api/v1/nodes")?).ok()?;
    nodes["items"].as_array()?.first()?["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

/// Waits for the node condition `type_` to be True and checks the kubelet's reason and
/// message (pkg/kubelet/nodestatus/setters.go, the pressure condition setters).
fn wait_condition_true(n: &Nanolet, type_: &str, reason: &str, message: &str) {
    let c = wait_for(TIMEOUT * 2, || {
        node_condition(n, type_).filter(|c| c["status"] == "True")
    })
    .unwrap_or_else(|| {
        panic!(
            "{type_} never True: {:?}\n{}\n{}",
            node_condition(n, type_),
            healthz(n),
            n.log_tail()
        )
    });
    assert_eq!(
        (&c["reason"], &c["message"]),
        (&json!(reason), &json!(message))
    );
    assert!(
        healthz(n).contains(&format!("{type_}=True")),
        "{}",
        healthz(n)
    );
}

/// The pods nanolet evicted, in the order it evicted them (its "evicting pod" log lines).
fn eviction_order(n: &Nanolet) -> Vec<String> {
    let log = fs::read_to_string(&n.log).unwrap_or_default();
    log.lines()
        .filter(|l| l.contains("evicting pod"))
        .filter_map(|l| {
            let name = l.split("pod=default/").nth(1)?.split([' ', '"']).next()?;
            Some(
                name.trim_end_matches(&format!("-{}", NODE.to_lowercase()))
                    .to_string(),
            )
        })
        .collect()
}

/// A pod running `script` in busybox with a hostPath `/marker` (so a re-admitted pod does not
/// do its work again) and a disk emptyDir at `/scratch`; `spec_extra` goes into the spec.
fn worker_pod(name: &str, spec_extra: &str, script: &str, marker: &Path) -> String {
    pod_yaml(
        name,
        &format!(
            "spec:\n{spec_extra}  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'if [ -e /marker/{name} ]; then exec sleep 3600; fi; touch /marker/{name}; {script}; touch /tmp/done; exec sleep 3600']\n    readinessProbe:\n      exec: {{command: [cat, /tmp/done]}}\n      periodSeconds: 1\n    volumeMounts:\n    - {{name: scratch, mountPath: /scratch}}\n    - {{name: marker, mountPath: /marker}}\n  volumes:\n  - name: scratch\n    emptyDir: {{}}\n  - name: marker\n    hostPath: {{path: {}, type: DirectoryOrCreate}}\n",
            marker.display()
        ),
    )
}

const CRITICAL: &str = "  priorityClassName: system-node-critical\n";

/// PID pressure under real processes (pid.available = min(pid_max, threads-max) - the node's
/// tasks): a pod forking 600 processes pushes the node under a threshold set 300 below what
/// was available. The kubelet's rankPIDPressure (pkg/kubelet/eviction/helpers.go): priority,
/// then the pod's process count, read from its cgroup's pids.current; so the forker is
/// evicted, not the idle pod of the same priority, and never the critical pod. PIDPressure
/// shows with the kubelet's reason and message, and clears once the processes are gone.
/// On this machine (cgroup v1 + hybrid: `unified/` has no pids controller) the count comes
/// from the v1 hierarchy, `/sys/fs/cgroup/pids/kubepods/besteffort/pod<uid>/pids.current`.
#[test]
fn pid_pressure_evicts_the_pod_with_the_most_processes() {
    let _serial = serial();
    let ctd = Containerd::start();
    let marker = ctd.tmp().join("markers");
    let mut n = Nanolet::start(&ctd, &["--eviction-monitoring-period=1s".into()]);
    n.write("crit.yaml", &worker_pod("crit", CRITICAL, "true", &marker));
    n.write("idle.yaml", &worker_pod("idle", "", "true", &marker));
    let crit = n.wait_pod("crit", "Ready", ready);
    let idle = n.wait_pod("idle", "Ready", ready);
    // Everything but the forker runs: the threshold goes 300 below what is available now.
    let (max, current) = nanolet::eviction::observe::pid_figures().expect("pid figures");
    let threshold = max - current - 300;
    n.stop();
    n.args.extend([
        format!("--eviction-hard=pid.available<{threshold}"),
        "--eviction-pressure-transition-period=5s".into(),
    ]);
    n.spawn();
    wait_passes(&n, 2);
    assert!(healthz(&n).contains("PIDPressure=False"), "{}", healthz(&n));
    n.write(
        "forker.yaml",
        &worker_pod(
            "forker",
            "",
            "i=0; while [ $i -lt 600 ]; do sleep 3600 & i=$((i+1)); done",
            &marker,
        ),
    );
    wait_condition_true(
        &n,
        "PIDPressure",
        "KubeletHasInsufficientPID",
        "kubelet has insufficient PID available",
    );
    let p = n.wait_pod("forker", "Failed/Evicted", is_evicted);
    let uid = p["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let msg = p["status"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with(&format!(
            "The node was low on resource: pids. Threshold quantity: {threshold}, available: "
        )),
        "{msg}"
    );
    assert_eq!(eviction_order(&n), ["forker"], "{}", n.log_tail());
    // Where this machine keeps the pod's count (the path eviction read).
    let v1 = format!("/sys/fs/cgroup/pids/kubepods/besteffort/pod{uid}");
    let unified_pids = fs::read_to_string("/sys/fs/cgroup/unified/cgroup.controllers")
        .is_ok_and(|c| c.split_whitespace().any(|c| c == "pids"));
    eprintln!(
        "pid test: cgroup layout: v1 pids hierarchy {}, unified pids controller {unified_pids}",
        Path::new("/sys/fs/cgroup/pids").is_dir()
    );
    // The processes are gone with the pod, the pressure clears.
    wait_for(TIMEOUT, || {
        healthz(&n).contains("PIDPressure=False").then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "PIDPressure never cleared: {}\n{}",
            healthz(&n),
            n.log_tail()
        )
    });
    assert!(
        fs::read_to_string(format!("{v1}/pids.current")).map_or(true, |c| c.trim() == "0"),
        "processes left in {v1}"
    );
    for (name, before) in [("crit", crit), ("idle", idle)] {
        let now = n.pod(name).expect("pod");
        assert_eq!(now["status"]["phase"], "Running", "{name}: {now:#}");
        assert_eq!(running_id(&now), running_id(&before), "{name} untouched");
    }
}

/// Inode pressure (nodefs.inodesFree) on a root dir that is a tmpfs with 2000 inodes: a pod
/// creating 1200 files in its emptyDir crosses `nodefs.inodesFree<50%`. The kubelet ranks inode
/// pressure (rankDiskPressureFunc with resourceInodes) by usage above requests (none are
/// requested), then priority, then inodes used: the small pod of priority 0 goes first, then,
/// the pressure still there, the priority-10 hoarder; the critical pod stays. DiskPressure
/// shows with the kubelet's reason and message.
#[test]
fn inode_pressure_evicts_by_priority_then_inodes_used() {
    let _serial = serial();
    let ctd = Containerd::start();
    let small = Tmpfs::mount_with(
        &ctd.tmp().join("few-inodes"),
        "size=64m,nr_inodes=2000,mode=755",
    );
    let marker = ctd.tmp().join("markers");
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--root-dir={}", small.0.display()),
            format!("--pod-logs-dir={}", small.0.join("log/pods").display()),
            "--eviction-hard=nodefs.inodesFree<50%".into(),
            "--eviction-monitoring-period=1s".into(),
            "--eviction-pressure-transition-period=5s".into(),
        ],
    );
    n.write("crit.yaml", &worker_pod("crit", CRITICAL, "true", &marker));
    n.write(
        "low.yaml",
        &worker_pod(
            "low",
            "  priority: 0\n",
            "cd /scratch && seq 1 20 | xargs touch",
            &marker,
        ),
    );
    let crit = n.wait_pod("crit", "Ready", ready);
    n.wait_pod("low", "Ready", ready);
    assert!(
        healthz(&n).contains("DiskPressure=False"),
        "{}",
        healthz(&n)
    );
    n.write(
        "hoarder.yaml",
        &worker_pod(
            "hoarder",
            "  priority: 10\n",
            "cd /scratch && seq 1 1200 | xargs touch",
            &marker,
        ),
    );
    wait_condition_true(
        &n,
        "DiskPressure",
        "KubeletHasDiskPressure",
        "kubelet has disk pressure",
    );
    let low = n.wait_pod("low", "Failed/Evicted", is_evicted);
    let msg = low["status"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with(
            "The node was low on resource: inodes. Threshold quantity: 1000, available: "
        ),
        "{msg}"
    );
    n.wait_pod("hoarder", "Failed/Evicted", is_evicted);
    assert_eq!(eviction_order(&n), ["low", "hoarder"], "{}", n.log_tail());
    wait_for(TIMEOUT, || {
        healthz(&n).contains("DiskPressure=False").then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "DiskPressure never cleared: {}\n{}",
            healthz(&n),
            n.log_tail()
        )
    });
    let now = n.pod("crit").expect("crit");
    assert_eq!(now["status"]["phase"], "Running", "{now:#}");
    assert_eq!(running_id(&now), running_id(&crit), "crit untouched");
}

/// Image filesystem pressure: containerd's root (its image filesystem, which also holds the
/// containers' writable layers) is a 200 MiB tmpfs the test mounts before containerd starts,
/// nanolet's root dir stays on the host disk, so the imagefs is a filesystem of its own. A pod
/// writing 120 MB into its container's root filesystem crosses `imagefs.available<50%`. With a
/// dedicated imagefs the kubelet ranks imagefs pressure by the writable layers only
/// (buildSignalToRankFunc: fsStatsRoot), so the writer is evicted first, not the pod that
/// wrote more (150 MB) into an emptyDir on the node filesystem; the critical pod stays.
/// DiskPressure shows with the kubelet's reason and message, and clears once the writer's
/// layer is gone.
///
/// The writer writes 60 MB (no pressure yet), waits 12 s, then 60 MB more: containerd
/// refreshes writable-layer usage in CRI stats every `stats_collect_period` (10 s), and the
/// kubelet ranks on the same figures, so a victim chosen before they show any write would be
/// chosen on zeros. containerd removes an evicted container's layer in its garbage collector,
/// which may run after the eviction manager's next pass: the volume pod may then be evicted
/// second, which the test allows (never first).
#[test]
fn imagefs_pressure_evicts_the_writable_layer_writer() {
    let _serial = serial();
    let mut imagefs = None;
    let ctd = Containerd::start_prepared(|tmp| {
        imagefs = Some(Tmpfs::mount(&tmp.join("root"), "200m"));
    });
    let marker = ctd.tmp().join("markers");
    let n = Nanolet::start(
        &ctd,
        &[
            "--eviction-hard=imagefs.available<50%".into(),
            "--eviction-monitoring-period=1s".into(),
            "--eviction-pressure-transition-period=5s".into(),
        ],
    );
    n.write("crit.yaml", &worker_pod("crit", CRITICAL, "true", &marker));
    n.write(
        "volume.yaml",
        &worker_pod(
            "volume",
            "",
            "dd if=/dev/zero of=/scratch/fill bs=1M count=150",
            &marker,
        ),
    );
    let crit = n.wait_pod("crit", "Ready", ready);
    n.wait_pod("volume", "Ready", ready);
    assert!(
        healthz(&n).contains("DiskPressure=False"),
        "{}",
        healthz(&n)
    );
    n.write(
        "writer.yaml",
        &worker_pod(
            "writer",
            "",
            "dd if=/dev/zero of=/fill bs=1M count=60; sleep 12; dd if=/dev/zero of=/fill2 bs=1M count=60",
            &marker,
        ),
    );
    wait_condition_true(
        &n,
        "DiskPressure",
        "KubeletHasDiskPressure",
        "kubelet has disk pressure",
    );
    let p = n.wait_pod("writer", "Failed/Evicted", is_evicted);
    let msg = p["status"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with(
            "The node was low on resource: ephemeral-storage. Threshold quantity: 100Mi, available: "
        ) && msg.contains("Container c was using "),
        "{msg}"
    );
    wait_for(TIMEOUT * 2, || {
        healthz(&n).contains("DiskPressure=False").then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "DiskPressure never cleared: {}\n{}",
            healthz(&n),
            n.log_tail()
        )
    });
    let order = eviction_order(&n);
    assert_eq!(
        order.first().map(String::as_str),
        Some("writer"),
        "{order:?}"
    );
    assert!(!order.iter().any(|p| p == "crit"), "{order:?}");
    eprintln!("imagefs test: evicted in order {order:?}");
    let now = n.pod("crit").expect("crit");
    assert_eq!(now["status"]["phase"], "Running", "{now:#}");
    assert_eq!(running_id(&now), running_id(&crit), "crit untouched");
    drop(n);
    drop(ctd);
    drop(imagefs);
}
