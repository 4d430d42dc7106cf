//! Graceful node shutdown (issue 33) on a real containerd, with logind's D-Bus interface
//! served by a stand-in (`tests/support/logind_standin.py`, python3-dbus) on a private
//! `dbus-daemon`: the real bus daemon between nanolet and "logind", the stand-in sends the
//! same `PrepareForShutdown` signal logind sends.
//!
//! Upstream rules checked (pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go,
//! systemd/inhibit_linux.go):
//! - a `delay` inhibitor lock on `shutdown` is held while nothing happens;
//! - logind's InhibitDelayMaxUSec below the total grace is raised with a logind.conf drop-in
//!   and a SIGHUP to logind through systemd's KillUnit;
//! - on PrepareForShutdown(true): pods are terminated group by group, lowest priority first,
//!   each group waited for at most its period; a pod's grace is capped at its group's; preStop
//!   hooks run; the pods end Failed with reason `Terminated` and the kubelet's message; new
//!   pods are refused (`NodeShutdown`); the node is not Ready; then the lock is released;
//! - on PrepareForShutdown(false) the lock is taken again.

use nanolet_test_support as support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::Value;
use support::Containerd;
use support::agent::Nanolet;
use support::dbus::{LogindStandIn, PrivateBus};
use support::wait_for;

const WAIT: Duration = Duration::from_secs(60);

/// A pod whose preStop hook appends "<name> <seconds since boot>" (/proc/uptime, the stand-in's
/// clock) to /shared/order, then runs
/// `then`; its container exits on SIGTERM.
fn pod(name: &str, priority: &str, grace: u32, then: &str, shared: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  hostNetwork: true
  {priority}
  terminationGracePeriodSeconds: {grace}
  containers:
  - name: c
    image: localhost/busybox:1.36
    command: [sh, -c, \"trap 'exit 0' TERM; while true; do sleep 1; done\"]
    volumeMounts:
    - name: shared
      mountPath: /shared
    lifecycle:
      preStop:
        exec:
          command: [sh, -c, \"echo {name} $(cut -d' ' -f1 /proc/uptime) >> /shared/order; {then}\"]
  volumes:
  - name: shared
    hostPath:
      path: {shared}
"
    )
}

/// The hook lines: (pod name, seconds since boot).
fn hook_order(path: &std::path::Path) -> Vec<(String, f64)> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (name, at) = l.split_once(' ')?;
            Some((name.to_string(), at.trim().parse::<f64>().ok()?))
        })
        .collect()
}

fn node_ready(n: &Nanolet) -> Value {
    let nodes: Value = n
        .get("/api/v1/nodes")
        .and_then(|b| serde_json::from_str(&b).ok())
        .unwrap_or(Value::Null);
    nodes["items"][0]["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready").cloned())
        .unwrap_or(Value::Null)
}

#[test]
fn shutdown_stops_pods_by_priority_within_their_grace_then_releases_the_lock() {
    let ctd = Containerd::start();
    let bus = PrivateBus::start(&ctd.tmp().join("dbus"));
    let conf_dir = ctd.tmp().join("logind.conf.d");
    // logind's default InhibitDelayMaxSec is 5 s; the groups below need 16 s.
    let logind = LogindStandIn::start(&bus, &conf_dir, 5_000_000);
    let shared = ctd.tmp().join("shared");
    fs::create_dir_all(&shared).expect("shared dir");
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).expect("mode");
    let address = bus.address();
    let conf = conf_dir.display().to_string();
    let n = Nanolet::start_with_env(
        &ctd,
        &["--shutdown-grace-period-by-pod-priority=0=4,1000=8,2000000000=4".into()],
        &[
            ("DBUS_SYSTEM_BUS_ADDRESS", address.as_str()),
            ("NANOLET_LOGIND_CONF_DIR", conf.as_str()),
        ],
    );
    let s = shared.display().to_string();
    // low: its hook hangs and its own grace is 30 s: the group's 4 s cap it.
    n.write("low.yaml", &pod("low", "", 30, "sleep 60", &s));
    n.write("mid.yaml", &pod("mid", "priority: 1000", 30, "true", &s));
    n.write(
        "critical.yaml",
        &pod(
            "critical",
            "priorityClassName: system-node-critical",
            30,
            "true",
            &s,
        ),
    );
    for name in ["low", "mid", "critical"] {
        n.wait_phase(name, "Running");
    }
    // The lock is held; InhibitDelayMaxSec was raised to the groups' total (4 + 8 + 4 s).
    wait_for(WAIT, || {
        logind.event_at("inhibit shutdown nanolet delay", 0)
    })
    .unwrap_or_else(|| {
        panic!(
            "no delay lock taken: {:?}\n{}",
            logind.events(),
            n.log_tail()
        )
    });
    let drop_in = fs::read_to_string(conf_dir.join("99-nanolet.conf")).expect("drop-in");
    assert!(
        drop_in.contains("[Login]\nInhibitDelayMaxSec=16\n"),
        "{drop_in}"
    );
    let events = logind.events();
    assert!(
        events
            .iter()
            .any(|(_, e)| e == "KillUnit systemd-logind.service all 1"),
        "logind not reloaded: {events:?}"
    );
    assert!(
        logind.event_at("released", 0).is_none(),
        "lock released early"
    );
    assert_eq!(node_ready(&n)["status"], "True", "{:#}", node_ready(&n));

    let before = logind.events().len();
    bus.call(
        "org.freedesktop.login1",
        "/org/freedesktop/login1",
        "org.nanolet.Test.Shutdown",
        &["boolean:true"],
    );
    let signalled = logind
        .event_at("PrepareForShutdown True", before)
        .expect("signal sent");
    let released =
        wait_for(WAIT, || logind.event_at("released nanolet", before)).unwrap_or_else(|| {
            panic!(
                "lock never released: {:?}\n{}",
                logind.events(),
                n.log_tail()
            )
        });

    let order = hook_order(&shared.join("order"));
    let names: Vec<&str> = order.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["low", "mid", "critical"],
        "preStop hooks out of priority order: {order:?}"
    );
    let (low, mid, critical) = (order[0].1, order[1].1, order[2].1);
    // The lowest group is waited for its whole period (its hook hangs), not the pod's 30 s.
    assert!(
        mid - low >= 3.5 && mid - low < 10.0,
        "mid's hook {:.1}s after low's",
        mid - low
    );
    // mid stopped within ~2 s (hook, SIGTERM, the shell's trap after its `sleep 1`): the
    // critical group did not wait mid's 8 s period out.
    assert!(
        critical - mid < 6.0,
        "critical's hook {:.1}s after mid's",
        critical - mid
    );
    assert!(
        released >= critical,
        "lock released before the critical pod's hook"
    );
    assert!(
        released - signalled < 19.0,
        "release took {:.1}s, more than the 16 s total",
        released - signalled
    );
    eprintln!(
        "hooks at +{:.1}s, +{:.1}s, +{:.1}s; lock released at +{:.1}s",
        low - signalled,
        mid - signalled,
        critical - signalled,
        released - signalled
    );

    // Statuses: Failed, the kubelet's reason and message; containers stopped.
    for name in ["low", "mid", "critical"] {
        let p = n.wait_pod(name, "terminated for the shutdown", |p| {
            p["status"]["phase"] == "Failed"
                && p["status"]["containerStatuses"][0]["state"]["terminated"].is_object()
        });
        assert_eq!(p["status"]["reason"], "Terminated", "{:#}", p["status"]);
        assert_eq!(
            p["status"]["message"],
            "Pod was terminated in response to imminent node shutdown."
        );
        // PodDisruptionConditions (GA in 1.31): DisruptionTarget, TerminationByKubelet.
        let disruption = p["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "DisruptionTarget").cloned())
            .unwrap_or(Value::Null);
        assert_eq!(
            disruption["reason"], "TerminationByKubelet",
            "{:#}",
            p["status"]
        );
    }
    let ready = node_ready(&n);
    assert_eq!(ready["status"], "False", "{ready:#}");
    assert!(
        ready["message"]
            .as_str()
            .is_some_and(|m| m.contains("node is shutting down")),
        "{ready:#}"
    );
    // Admission refuses new pods while the node shuts down.
    n.write("late.yaml", &pod("late", "", 1, "true", &s));
    let late = n.wait_pod("late", "rejected", |p| p["status"]["phase"] == "Failed");
    assert_eq!(
        late["status"]["reason"], "NodeShutdown",
        "{:#}",
        late["status"]
    );
    assert_eq!(
        late["status"]["message"],
        "Pod was rejected as the node is shutting down."
    );

    // A cancelled shutdown: the lock is taken again, pods run again.
    let before = logind.events().len();
    bus.call(
        "org.freedesktop.login1",
        "/org/freedesktop/login1",
        "org.nanolet.Test.Shutdown",
        &["boolean:false"],
    );
    wait_for(WAIT, || {
        logind.event_at("inhibit shutdown nanolet delay", before)
    })
    .unwrap_or_else(|| panic!("lock not taken again: {:?}", logind.events()));
    n.wait_phase("mid", "Running");
    n.wait_phase("late", "Running");
    assert_eq!(node_ready(&n)["status"], "True", "{:#}", node_ready(&n));
}

/// The same shutdown with the real systemd-logind (Debian's /lib/systemd/systemd-logind, on the
/// private bus) instead of the stand-in: logind itself takes nanolet's delay lock, and on a
/// `PowerOff` call (what `systemctl poweroff` asks logind) it sends PrepareForShutdown(true),
/// waits for the delay lock, and only then asks systemd to start `poweroff.target`. systemd
/// (PID 1 on a real box) is the one stand-in left (`tests/support/systemd_standin.py`: this
/// machine has no systemd as PID 1); it records StartUnit and powers nothing off.
/// The groups total 4 s, under logind's default InhibitDelayMaxSec of 5 s: no drop-in is
/// written (the real logind reads /etc/systemd/logind.conf.d, shared by the machine).
#[test]
fn real_logind_waits_for_the_pods_before_starting_poweroff() {
    use support::dbus::{RealLogind, SystemdStandIn};
    let ctd = Containerd::start();
    let dir = ctd.tmp().join("dbus");
    let bus = PrivateBus::start(&dir);
    let systemd = SystemdStandIn::start(&bus, &dir);
    let logind = RealLogind::start(&bus, &dir);
    let shared = ctd.tmp().join("shared");
    fs::create_dir_all(&shared).expect("shared dir");
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).expect("mode");
    let address = bus.address();
    let n = Nanolet::start_with_env(
        &ctd,
        &["--shutdown-grace-period-by-pod-priority=0=2,2000000000=2".into()],
        &[("DBUS_SYSTEM_BUS_ADDRESS", address.as_str())],
    );
    let s = shared.display().to_string();
    n.write("low.yaml", &pod("low", "", 30, "true", &s));
    n.write(
        "critical.yaml",
        &pod(
            "critical",
            "priorityClassName: system-node-critical",
            30,
            "true",
            &s,
        ),
    );
    for name in ["low", "critical"] {
        n.wait_phase(name, "Running");
    }
    // logind lists nanolet's delay lock on shutdown.
    let inhibitors = || {
        let out = bus.call(
            "org.freedesktop.login1",
            "/org/freedesktop/login1",
            "org.freedesktop.login1.Manager.ListInhibitors",
            &[],
        );
        out.contains("\"nanolet\"") && out.contains("\"delay\"")
    };
    wait_for(WAIT, || inhibitors().then_some(())).unwrap_or_else(|| {
        panic!(
            "logind lists no delay lock of nanolet\n{}\n{}",
            logind.log_text(),
            n.log_tail()
        )
    });
    let asked = uptime();
    bus.call(
        "org.freedesktop.login1",
        "/org/freedesktop/login1",
        "org.freedesktop.login1.Manager.PowerOff",
        &["boolean:false"],
    );
    let started =
        wait_for(WAIT, || systemd.event_at("StartUnit poweroff.target")).unwrap_or_else(|| {
            panic!(
                "logind never started poweroff.target\n{}\n{}",
                logind.log_text(),
                n.log_tail()
            )
        });
    let order = hook_order(&shared.join("order"));
    let names: Vec<&str> = order.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["low", "critical"], "{order:?}");
    assert!(
        order.iter().all(|(_, at)| *at <= started),
        "poweroff.target started before the preStop hooks ran: {order:?}, {started}"
    );
    // logind went on when nanolet released the lock, not at its own 5 s timeout.
    assert!(
        started - asked < 4.5,
        "poweroff.target {:.1}s after PowerOff",
        started - asked
    );
    assert!(
        logind.log_text().contains("mode=delay stopped"),
        "{}",
        logind.log_text()
    );
    for name in ["low", "critical"] {
        let p = n.wait_pod(name, "terminated for the shutdown", |p| {
            p["status"]["phase"] == "Failed"
        });
        assert_eq!(p["status"]["reason"], "Terminated", "{:#}", p["status"]);
    }
    eprintln!(
        "real logind: hooks at +{:.1}s, +{:.1}s; poweroff.target at +{:.1}s",
        order[0].1 - asked,
        order[1].1 - asked,
        started - asked
    );
    drop(n);
    drop(logind);
    drop(systemd);
}

/// Seconds since boot (/proc/uptime), the clock of the hooks and the stand-ins.
fn uptime() -> f64 {
    fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .expect("/proc/uptime")
}

/// API-server mode: on PrepareForShutdown(true) the kubelet's shutdown manager calls
/// `syncNodeStatus` at once (nodeshutdown_manager_linux.go: "Update node status and ready
/// condition") and records a Normal `NodeShutdown` event "Shutdown manager detected shutdown
/// event" on the Node. nodeStatusUpdateFrequency is 10 minutes here, so without the immediate
/// push the cluster would not see Ready=False for up to 10 minutes; the test wants it within
/// 10 s, with the kubelet's reason and the shutdown manager's message.
#[test]
fn shutdown_sends_the_node_status_at_once_when_joined() {
    use support::apiserver::FakeApiServer;
    const TOKEN: &str = "t0ken-for-the-shutdown-test";
    let ctd = Containerd::start();
    let api = FakeApiServer::start(TOKEN);
    let kc = ctd.tmp().join("kubeconfig");
    api.write_kubeconfig(&kc, TOKEN);
    let bus = PrivateBus::start(&ctd.tmp().join("dbus"));
    let conf_dir = ctd.tmp().join("logind.conf.d");
    let logind = LogindStandIn::start(&bus, &conf_dir, 30_000_000);
    let address = bus.address();
    let conf = conf_dir.display().to_string();
    let n = Nanolet::start_with_env(
        &ctd,
        &[
            format!("--kubeconfig={}", kc.display()),
            "--node-status-update-frequency=10m".into(),
            "--shutdown-grace-period=4s".into(),
            "--shutdown-grace-period-critical-pods=2s".into(),
        ],
        &[
            ("DBUS_SYSTEM_BUS_ADDRESS", address.as_str()),
            ("NANOLET_LOGIND_CONF_DIR", conf.as_str()),
        ],
    );
    let node_ready = || {
        api.get("/api/v1/nodes/node1").and_then(|node| {
            node["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Ready")
                .cloned()
        })
    };
    // Registered and its first status sent (the next one is due in 10 minutes), and the lock
    // held.
    wait_for(WAIT, || {
        (api.count("PATCH", "/api/v1/nodes/node1/status") > 0).then_some(())
    })
    .unwrap_or_else(|| panic!("no node status sent\n{}", n.log_tail()));
    wait_for(WAIT, || {
        logind.event_at("inhibit shutdown nanolet delay", 0)
    })
    .unwrap_or_else(|| panic!("no delay lock: {:?}\n{}", logind.events(), n.log_tail()));
    let before = logind.events().len();
    bus.call(
        "org.freedesktop.login1",
        "/org/freedesktop/login1",
        "org.nanolet.Test.Shutdown",
        &["boolean:true"],
    );
    logind
        .event_at("PrepareForShutdown True", before)
        .expect("signal sent");
    // The status that says the node shuts down can only be the immediate push.
    let ready = wait_for(Duration::from_secs(10), || {
        node_ready().filter(|c| {
            c["status"] == "False"
                && c["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("node is shutting down"))
        })
    })
    .unwrap_or_else(|| {
        panic!(
            "Ready not False at the API server within 10 s: {:?}\n{}",
            node_ready(),
            n.log_tail()
        )
    });
    assert_eq!(ready["reason"], "KubeletNotReady", "{ready:#}");
    let event = wait_for(Duration::from_secs(10), || {
        api.requests().into_iter().find(|r| {
            r.method == "POST" && r.path.ends_with("/events") && r.body.contains("\"NodeShutdown\"")
        })
    })
    .unwrap_or_else(|| panic!("no NodeShutdown event\n{}", n.log_tail()));
    let event: Value = serde_json::from_str(&event.body).expect("event JSON");
    assert_eq!(
        (
            &event["type"],
            &event["message"],
            &event["involvedObject"]["kind"]
        ),
        (
            &Value::from("Normal"),
            &Value::from("Shutdown manager detected shutdown event"),
            &Value::from("Node")
        ),
        "{event:#}"
    );
}
