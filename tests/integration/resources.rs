//! Pods that misbehave with resources (issue 33): a fork bomb held by `podPidsLimit` (pids.max
//! on the pod cgroup, the kubelet's `ResourceConfigForPod` PidsLimit) and a memory hog held by
//! its memory limit (OOMKilled, restarted), while nanolet, containerd and another pod keep
//! working; the node allocatable and QoS tier cgroups hold the kubelet's values; a container's
//! memory+swap limit is the kubelet's NoSwap on cgroup v1, the tiers' memory limits its
//! qosReserved. On this machine's cgroup v1
//! hierarchy (the v2 layout has unit tests in `cm` and `kuberuntime::container_linux`).

use nanolet_test_support as support;

use std::fs;
use std::time::Duration;

use nanolet::cri::Runtime;
use serde_json::Value;
use support::Containerd;
use support::agent::Nanolet;
use support::wait_for;

const WAIT: Duration = Duration::from_secs(90);
const PIDS_LIMIT: u64 = 64;

fn pod(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n{spec}"
    )
}

/// The first line of a file below the v1 pids hierarchy of a BestEffort pod.
fn pids_file(uid: &str, file: &str) -> Option<String> {
    fs::read_to_string(format!(
        "/sys/fs/cgroup/pids/kubepods/besteffort/pod{uid}/{file}"
    ))
    .ok()
    .map(|s| s.trim().to_string())
}

/// Removes the (empty) pod cgroups nanolet created for these pods, after containerd is gone
/// (declared before it, so dropped after it), also when the test fails, and lifts the tiers'
/// qosReserved memory limits.
struct PodCgroups(std::cell::RefCell<Vec<String>>);

impl Drop for PodCgroups {
    fn drop(&mut self) {
        let Ok(hiers) = fs::read_dir("/sys/fs/cgroup") else {
            return;
        };
        let hiers: Vec<_> = hiers.flatten().map(|e| e.path()).collect();
        for uid in self.0.borrow().iter() {
            for h in &hiers {
                for qos in ["", "burstable/", "besteffort/"] {
                    let _ = fs::remove_dir(h.join(format!("kubepods/{qos}pod{uid}")));
                }
            }
        }
        // The tiers are shared: their qosReserved memory limits go back to unlimited.
        for qos in ["burstable", "besteffort"] {
            let _ = fs::write(
                format!("/sys/fs/cgroup/memory/kubepods/{qos}/memory.limit_in_bytes"),
                "-1",
            );
        }
    }
}

#[test]
fn fork_bomb_and_memory_hog_leave_nanolet_containerd_and_other_pods_working() {
    // Alone: the QoS tier cgroups (kubepods/burstable, kubepods/besteffort) are shared by
    // every nanolet on the machine, and another test's Burstable pods would change them.
    let _alone = support::exclusive();
    let cgroups = PodCgroups(Default::default());
    let ctd = Containerd::start();
    // LimitedSwap on this cgroup v1 host: the kubelet gives swap only on cgroup v2, so every
    // container gets NoSwap, which on v1 is memory+swap = its memory limit.
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--pod-max-pids={PIDS_LIMIT}"),
            "--memory-swap-behavior=LimitedSwap".into(),
            "--qos-reserved=memory=50%".into(),
        ],
    );
    // Bounded at 1000 processes, so that without the limit it fails the test, not the machine.
    n.write(
        "bomb.yaml",
        &pod(
            "bomb",
            "  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'i=0; while [ $i -lt 1000 ]; do sleep 600 & i=$((i+1)); done; echo forked; exec sleep 600']\n",
        ),
    );
    // dd is the container's main process: the OOM killer takes the largest process, and a
    // shell around it would survive and keep the container running.
    n.write(
        "hog.yaml",
        &pod(
            "hog",
            "  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [dd, if=/dev/zero, of=/dev/null, bs=256M, count=4]\n    resources:\n      limits: {memory: 32Mi, cpu: 500m}\n",
        ),
    );
    n.write(
        "bystander.yaml",
        &pod(
            "bystander",
            "  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'exec sleep 600']\n    readinessProbe:\n      exec: {command: ['true']}\n      periodSeconds: 1\n",
        ),
    );
    n.write(
        "burst.yaml",
        &pod(
            "burst",
            "  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'exec sleep 600']\n    resources:\n      requests: {cpu: 300m}\n      limits: {memory: 64Mi}\n",
        ),
    );
    for name in ["bomb", "hog", "bystander", "burst"] {
        let p = n.wait_pod(name, "created", |p| p["metadata"]["uid"].is_string());
        let uid = p["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        cgroups.0.borrow_mut().push(uid);
    }
    n.wait_phase("burst", "Running");
    // enforceNodeAllocatable=pods (the default) and the QoS tiers, the kubelet's values:
    // kubepods at capacity (nothing reserved here), besteffort at the minimum 2 shares,
    // burstable at MilliCPUToShares(300m) = 307.
    let cap = nanolet::node::capacity();
    let read =
        |p: &str| fs::read_to_string(format!("/sys/fs/cgroup/{p}")).map(|s| s.trim().to_string());
    assert_eq!(
        read("cpu/kubepods/cpu.shares").ok(),
        Some((cap.cpu_millis * 1024 / 1000).to_string())
    );
    let limit: i64 = read("memory/kubepods/memory.limit_in_bytes")
        .ok()
        .and_then(|s| s.parse().ok())
        .expect("kubepods memory limit");
    assert!(
        limit <= cap.memory_bytes && limit > cap.memory_bytes - 4096,
        "{limit} vs {}",
        cap.memory_bytes
    );
    // And pids.max at the allocatable PIDs (node_container_manager getCgroupConfig:
    // PidsLimit from the internal capacity's `pid`, pidlimit.Stats' min(pid_max,
    // threads-max); nothing reserved here).
    let max_pids = nanolet::eviction::observe::max_pids().expect("the node's task limit");
    assert_eq!(
        read("pids/kubepods/pids.max").ok(),
        Some(max_pids.to_string())
    );
    assert_eq!(
        read("cpu/kubepods/besteffort/cpu.shares").ok().as_deref(),
        Some("2")
    );
    assert_eq!(
        read("cpu/kubepods/burstable/cpu.shares").ok().as_deref(),
        Some("307")
    );
    // qosReserved memory=50% (setMemoryReserve): burstable = allocatable - 50% of the
    // Guaranteed requests (the hog: 32Mi), besteffort = that - 50% of the Burstable requests
    // (burst: its 64Mi limit as request); the kernel rounds limits down to whole pages.
    let tier = |qos: &str| -> i64 {
        read(&format!("memory/kubepods/{qos}/memory.limit_in_bytes"))
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no memory limit on kubepods/{qos}"))
    };
    let burstable = cap.memory_bytes - (16 << 20);
    let besteffort = burstable - (32 << 20);
    for (qos, want) in [("burstable", burstable), ("besteffort", besteffort)] {
        let got = tier(qos);
        assert!(
            got <= want && got > want - 4096,
            "kubepods/{qos} memory limit {got}, want {want}"
        );
    }
    // NodeSwap, NoSwap on cgroup v1 (configureContainerSwapResources with a swap controller:
    // memory.memsw.limit_in_bytes exists here): CRI's memory_swap_limit_in_bytes = the memory
    // limit, which runc writes as the container's memory+swap limit.
    let burst = n.wait_phase("burst", "Running");
    let memsw = container_memory_file(&burst, "memory.memsw.limit_in_bytes");
    assert_eq!(
        memsw.as_deref(),
        Some("67108864"),
        "burst's memory+swap limit"
    );
    let bomb = n.wait_phase("bomb", "Running");
    let uid = bomb["metadata"]["uid"].as_str().expect("uid").to_string();
    assert_eq!(
        pids_file(&uid, "pids.max").as_deref(),
        Some(PIDS_LIMIT.to_string().as_str()),
        "pids.max of the pod cgroup"
    );
    // The bomb ran into the limit: its shell reports failed forks; the pod cgroup stays at it.
    wait_for(WAIT, || {
        let logs = n.pod_logs();
        let found = walk_logs(&logs).iter().any(|l| l.contains("can't fork"));
        found.then_some(())
    })
    .unwrap_or_else(|| panic!("the fork bomb never hit pids.max:\n{}", n.log_tail()));
    let current: u64 = pids_file(&uid, "pids.current")
        .and_then(|s| s.parse().ok())
        .expect("pids.current");
    assert!(current <= PIDS_LIMIT, "{current} processes in the pod");

    // The hog: OOM-killed by its own limit and restarted (the kubelet's OOMKilled).
    let hog = n.wait_pod("hog", "OOMKilled", |p| {
        p["status"]["containerStatuses"][0]["lastState"]["terminated"]["reason"] == "OOMKilled"
    });
    assert!(hog["status"]["containerStatuses"][0]["restartCount"].as_u64() >= Some(1));

    // Everything else works: the bystander stays ready and unrestarted, nanolet answers,
    // containerd answers, a new pod starts.
    let ready = |p: &Value| p["status"]["containerStatuses"][0]["ready"] == true;
    let by = n.wait_pod("bystander", "ready", ready);
    assert_eq!(by["status"]["containerStatuses"][0]["restartCount"], 0);
    assert_eq!(n.get("/healthz").as_deref(), Some("ok"));
    ctd.runtime().version().expect("containerd answers CRI");
    n.write(
        "late.yaml",
        &pod(
            "late",
            "  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'exec sleep 600']\n",
        ),
    );
    let late = n.wait_phase("late", "Running");
    let late_uid = late["metadata"]["uid"].as_str().unwrap_or_default();
    cgroups.0.borrow_mut().push(late_uid.to_string());
    let by = n.pod("bystander").expect("bystander");
    assert!(ready(&by), "{:#}", by["status"]);
}

/// A file of the running container's cgroup in the v1 memory hierarchy (cgroupfs driver:
/// `kubepods[/<qos>]/pod<uid>/<container id>`), found below `kubepods` by the container's ID.
fn container_memory_file(pod: &Value, file: &str) -> Option<String> {
    let id = pod["status"]["containerStatuses"][0]["containerID"]
        .as_str()?
        .rsplit("://")
        .next()?
        .to_string();
    fn find(dir: &std::path::Path, id: &str, depth: u32) -> Option<std::path::PathBuf> {
        for e in fs::read_dir(dir).ok()?.flatten() {
            let p = e.path();
            if !p.is_dir() {
                continue;
            }
            if e.file_name().to_str() == Some(id) {
                return Some(p);
            }
            if depth < 3 {
                if let Some(found) = find(&p, id, depth + 1) {
                    return Some(found);
                }
            }
        }
        None
    }
    let dir = find(
        std::path::Path::new("/sys/fs/cgroup/memory/kubepods"),
        &id,
        0,
    )?;
    fs::read_to_string(dir.join(file))
        .ok()
        .map(|s| s.trim().to_string())
}

/// The lines of every container log below `dir`.
fn walk_logs(dir: &std::path::Path) -> Vec<String> {
    let mut out = vec![];
    let Ok(rd) = fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk_logs(&p));
        } else if let Ok(text) = fs::read_to_string(&p) {
            out.extend(text.lines().map(str::to_string));
        }
    }
    out
}

#[test]
fn a_completed_pod_gives_back_its_volumes_and_its_pod_cgroup() {
    // kubelet.go SyncTerminatedPod: once a pod is terminal and nothing of it runs, the volume
    // manager unmounts its volumes (an emptyDir's data goes) and the pod container manager
    // destroys its pod cgroup; its dead containers stay (status, logs) until it is removed.
    let cgroups = PodCgroups(Default::default());
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    n.write(
        "done.yaml",
        &pod(
            "done",
            "  restartPolicy: Never\n  volumes:\n  - name: scratch\n    emptyDir: {}\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'echo data > /scratch/f && cat /scratch/f']\n    volumeMounts:\n    - name: scratch\n      mountPath: /scratch\n",
        ),
    );
    let running = n.wait_pod("done", "a UID", |p| p["metadata"]["uid"].is_string());
    let uid = running["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    cgroups.0.borrow_mut().push(uid.clone());
    let p = n.wait_phase("done", "Succeeded");
    let empty_dir = n
        .dir
        .join("root/pods")
        .join(&uid)
        .join("volumes/kubernetes.io~empty-dir/scratch");
    let pod_cgroup = format!("/sys/fs/cgroup/pids/kubepods/besteffort/pod{uid}");
    let released = wait_for(WAIT, || {
        (!empty_dir.exists() && !std::path::Path::new(&pod_cgroup).exists()).then_some(())
    });
    assert!(
        released.is_some(),
        "a Succeeded pod keeps its emptyDir ({}: {}) or its pod cgroup ({pod_cgroup}: {})\n{}",
        empty_dir.display(),
        empty_dir.exists(),
        std::path::Path::new(&pod_cgroup).exists(),
        n.log_tail()
    );
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 0,
        "{p:#}"
    );
    // The dead container stays, with its log.
    let containers = ctd.runtime().list_containers().expect("list containers");
    assert!(
        containers.iter().any(|c| c.name == "c"),
        "the dead container is kept until the pod is removed"
    );
    let log = n
        .pod_logs()
        .join(format!("default_done-node1_{uid}"))
        .join("c/0.log");
    let logs = fs::read_to_string(&log).unwrap_or_default();
    assert!(logs.contains("data"), "{}: {logs:?}", log.display());
}
