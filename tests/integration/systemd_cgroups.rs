//! `--cgroup-driver=systemd` against the real systemd (issue 33): nanolet makes kubepods.slice
//! at node allocatable, the QoS tier slices, and each pod's slice with its totals and
//! `podPidsLimit`, as transient units through systemd's D-Bus API with the values the kubelet
//! (libcontainer's systemd manager) gives them, and stops a removed pod's slice.
//!
//! This machine runs no systemd as PID 1, so the test starts Debian's systemd as PID 1 of its
//! own PID, mount and cgroup namespaces over a cgroup subtree made for it
//! (support::sdinit), and runs nanolet in those namespaces: with no system bus there, nanolet
//! talks to systemd's private socket, as go-systemd does for root. The values are read back
//! from systemd (`systemctl show`) and from the cgroup files systemd wrote. The harness's
//! containerd still places containers with its cgroupfs driver (under the host's cgroup root, not
//! in these slices): what is tested is nanolet's side, the slices.

use nanolet_test_support as support;

use std::time::Duration;

use support::Containerd;
use support::agent::Nanolet;
use support::sdinit::SystemdInit;
use support::wait_for;

const WAIT: Duration = Duration::from_secs(60);
const PIDS_LIMIT: u64 = 64;

fn pod(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'exec sleep 600']\n{spec}"
    )
}

/// Removes the cgroups the harness's containerd (cgroupfs driver) made for these pods under
/// the host's root from the slice-shaped parents nanolet gave it; after containerd is gone.
struct RuntimeCgroups(std::cell::RefCell<Vec<String>>);

impl Drop for RuntimeCgroups {
    fn drop(&mut self) {
        let Ok(hiers) = std::fs::read_dir("/sys/fs/cgroup") else {
            return;
        };
        for h in hiers.flatten() {
            let base = h.path().join("kubepods.slice");
            for uid in self.0.borrow().iter() {
                let uid = uid.replace('-', "_");
                for (tier, pod) in [
                    (
                        "kubepods-burstable.slice",
                        format!("kubepods-burstable-pod{uid}.slice"),
                    ),
                    (
                        "kubepods-besteffort.slice",
                        format!("kubepods-besteffort-pod{uid}.slice"),
                    ),
                ] {
                    let dir = base.join(tier).join(pod);
                    if let Ok(kids) = std::fs::read_dir(&dir) {
                        for k in kids.flatten() {
                            let _ = std::fs::remove_dir(k.path());
                        }
                    }
                    let _ = std::fs::remove_dir(&dir);
                    let _ = std::fs::remove_dir(base.join(tier));
                }
            }
            let _ = std::fs::remove_dir(&base);
        }
    }
}

#[test]
fn systemd_driver_makes_the_kubelets_slices_through_the_real_systemd() {
    let runtime_cgroups = RuntimeCgroups(Default::default());
    let ctd = Containerd::start();
    let sd = SystemdInit::start(ctd.tmp());
    let n = Nanolet::start_entering(
        &ctd,
        support::nanolet_bin(),
        &[
            "--cgroup-driver=systemd".into(),
            format!("--pod-max-pids={PIDS_LIMIT}"),
            "--system-reserved=cpu=500m,memory=256Mi".into(),
            "--enforce-node-allocatable=pods".into(),
        ],
        &[],
        &sd.nsenter_args(),
    );
    // enforceNodeAllocatable=pods (node_container_manager): kubepods.slice at capacity minus
    // the reservation, CPUShares = MilliCPUToShares(allocatable), MemoryLimit (cgroup v1).
    let cap = nanolet::node::capacity();
    let cpu_shares = ((cap.cpu_millis - 500) * 1024 / 1000).to_string();
    let memory = (cap.memory_bytes - (256 << 20)).to_string();
    let got = wait_for(WAIT, || {
        let s = sd.property("kubepods.slice", "CPUShares");
        (s == cpu_shares).then_some(s)
    });
    assert!(
        got.is_some(),
        "kubepods.slice CPUShares {:?}, want {cpu_shares}\n{}",
        sd.property("kubepods.slice", "CPUShares"),
        n.log_tail()
    );
    assert_eq!(sd.property("kubepods.slice", "MemoryLimit"), memory);
    assert_eq!(
        sd.property("kubepods.slice", "Description"),
        "libcontainer container kubepods.slice"
    );
    assert_eq!(
        sd.cgroup_file("cpu/kubepods.slice/cpu.shares").as_deref(),
        Some(cpu_shares.as_str())
    );
    // The kernel keeps whole pages.
    let page = 4096i64;
    let limit: i64 = sd
        .cgroup_file("memory/kubepods.slice/memory.limit_in_bytes")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    assert_eq!(limit, (cap.memory_bytes - (256 << 20)) / page * page);
    // TasksMax at the allocatable PIDs (getCgroupConfig's PidsLimit from the internal
    // capacity's `pid`, min(pid_max, threads-max); nothing reserved), in pids.max too. As
    // nanolet sees them: pid_max belongs to the PID namespace (Linux 6.14+).
    let sysctl = |k: &str| -> u64 {
        sd.inside(&["cat", &format!("/proc/sys/kernel/{k}")])
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("kernel.{k}: {e}"))
    };
    let max_pids = sysctl("pid_max").min(sysctl("threads-max")).to_string();
    assert_eq!(sd.property("kubepods.slice", "TasksMax"), max_pids);
    assert_eq!(
        sd.cgroup_file("pids/kubepods.slice/pids.max").as_deref(),
        Some(max_pids.as_str())
    );

    n.write(
        "burst.yaml",
        &pod(
            "burst",
            "    resources:\n      requests: {cpu: 300m}\n      limits: {cpu: 505m, memory: 64Mi}\n",
        ),
    );
    n.write("idle.yaml", &pod("idle", ""));
    let mut uids = vec![];
    for name in ["burst", "idle"] {
        let p = n.wait_pod(name, "created", |p| p["metadata"]["uid"].is_string());
        let uid = p["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        runtime_cgroups.0.borrow_mut().push(uid.clone());
        uids.push(uid.replace('-', "_"));
        n.wait_phase(name, "Running");
    }
    // The pod slices (pod_container_manager EnsureExists, ResourceConfigForPod): Burstable
    // with CPU shares of its request (300m -> 307), the CFS quota of its limit as
    // CPUQuotaPerSecUSec (505m -> 505 ms per second, rounded up to 510 ms as libcontainer
    // does) and then written exactly into the file (cfs_quota_us 50500 of 100000, as
    // libcontainer's Set after SetUnitProperties), its memory limit, TasksMax = podPidsLimit;
    // BestEffort with the minimum 2 shares and TasksMax.
    let burst = format!("kubepods-burstable-pod{}.slice", uids[0]);
    let idle = format!("kubepods-besteffort-pod{}.slice", uids[1]);
    assert_eq!(sd.property(&burst, "ActiveState"), "active");
    assert_eq!(sd.property(&burst, "CPUShares"), "307");
    assert_eq!(sd.property(&burst, "CPUQuotaPerSecUSec"), "510ms");
    assert_eq!(sd.property(&burst, "CPUQuotaPeriodUSec"), "100ms");
    assert_eq!(
        sd.property(&burst, "MemoryLimit"),
        (64u64 << 20).to_string()
    );
    assert_eq!(sd.property(&burst, "TasksMax"), PIDS_LIMIT.to_string());
    let burst_dir = format!("kubepods.slice/kubepods-burstable.slice/{burst}");
    assert_eq!(
        sd.cgroup_file(&format!("cpu/{burst_dir}/cpu.cfs_quota_us"))
            .as_deref(),
        Some("50500")
    );
    assert_eq!(
        sd.cgroup_file(&format!("cpu/{burst_dir}/cpu.shares"))
            .as_deref(),
        Some("307")
    );
    assert_eq!(
        sd.cgroup_file(&format!("memory/{burst_dir}/memory.limit_in_bytes")),
        Some((64u64 << 20).to_string())
    );
    assert_eq!(
        sd.cgroup_file(&format!("pids/{burst_dir}/pids.max")),
        Some(PIDS_LIMIT.to_string())
    );
    assert_eq!(sd.property(&idle, "CPUShares"), "2");
    assert_eq!(sd.property(&idle, "TasksMax"), PIDS_LIMIT.to_string());
    assert_eq!(
        sd.cgroup_file(&format!(
            "pids/kubepods.slice/kubepods-besteffort.slice/{idle}/pids.max"
        )),
        Some(PIDS_LIMIT.to_string())
    );
    // The QoS tiers (qos_container_manager): besteffort at MinShares, burstable at the shares
    // of its pods' summed CPU requests, each Wants= its parent slice.
    assert_eq!(sd.property("kubepods-besteffort.slice", "CPUShares"), "2");
    assert_eq!(sd.property("kubepods-burstable.slice", "CPUShares"), "307");
    assert_eq!(
        sd.property("kubepods-burstable.slice", "Wants"),
        "kubepods.slice"
    );
    assert_eq!(
        sd.cgroup_file("cpu/kubepods.slice/kubepods-burstable.slice/cpu.shares")
            .as_deref(),
        Some("307")
    );

    // A removed pod's slice is stopped (the pod container manager's Destroy: systemd removes
    // its cgroup), and the burstable tier goes back to the 2 shares of no requests.
    n.remove("burst.yaml");
    let gone = wait_for(WAIT, || {
        let state = sd.property(&burst, "ActiveState");
        (state == "inactive"
            && sd
                .cgroup_file(&format!("cpu/{burst_dir}/cpu.shares"))
                .is_none())
        .then_some(state)
    });
    assert!(
        gone.is_some(),
        "{burst}: {}\n{}",
        sd.property(&burst, "ActiveState"),
        n.log_tail()
    );
    let tier = wait_for(WAIT, || {
        (sd.property("kubepods-burstable.slice", "CPUShares") == "2").then_some(())
    });
    assert!(tier.is_some(), "{}", n.log_tail());
    // systemd first: nanolet ends with its namespace (nsenter does not pass SIGTERM on).
    drop(sd);
    drop(n);
}
