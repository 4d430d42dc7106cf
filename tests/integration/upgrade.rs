//! Package upgrade against a real containerd (issue 7's "Done when"): the amd64 .deb is
//! installed into a scratch root with `dpkg --root`, the installed binary runs pods on a private
//! containerd the way systemd runs it (the unit's ExecStart, `Type=notify` socket, watchdog,
//! SIGTERM to the main process only: `KillMode=process`), then a second package with a higher
//! version is installed over it (maintainer scripts run), nanolet is restarted as systemd would
//! restart it, and the pods must be untouched: same sandboxes and containers, same start
//! times, same PIDs, restart counts unchanged, no CRI call that creates, starts or stops
//! anything, and the new binary reports the new version.
//!
//! The second package's binary is built here from the same source with
//! `NANOLET_VERSION=<version>+upgrade1` and `--no-default-features` (so CI also links the
//! feature-less build; the test's config uses no https) in its own target directory below
//! cargo's `CARGO_TARGET_TMPDIR` (about 2 minutes on 2 cores the first time, seconds after).

use nanolet_test_support as support;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::agent::{Nanolet, TIMEOUT};
use support::{Containerd, wait_for};

const REPO: &str = env!("CARGO_MANIFEST_DIR");
/// The version cargo test's binary carries (Cargo.toml's, or NANOLET_VERSION at build time).
const OLD_VERSION: &str = nanolet::VERSION;

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        support::tail(&String::from_utf8_lossy(&out.stdout), 40),
        support::tail(&String::from_utf8_lossy(&out.stderr), 40)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `packaging/build-deb --binary BIN --out OUT amd64` with NANOLET_VERSION=`version`.
fn build_deb(bin: &Path, out: &Path, version: &str) -> PathBuf {
    run(Command::new(Path::new(REPO).join("packaging/build-deb"))
        .arg("--binary")
        .arg(bin)
        .arg("--out")
        .arg(out)
        .arg("amd64")
        .env("NANOLET_VERSION", version));
    let deb = out.join(format!("nanolet_{version}_amd64.deb"));
    assert!(deb.is_file(), "build-deb made no {}", deb.display());
    deb
}

/// The "new release": the same source built with another version stamped in. Alone (the
/// exclusive gate, so before the test's containerd starts): a cold build takes both cores for
/// minutes, which tests of other areas timing probes or back-offs must not run beside.
fn build_new_binary(version: &str) -> PathBuf {
    let _alone = support::exclusive();
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("upgrade-build");
    run(Command::new(env!("CARGO"))
        .args([
            "build",
            "--locked",
            "--offline",
            "--no-default-features",
            "--bin",
            "nanolet",
        ])
        .current_dir(REPO)
        .env("CARGO_TARGET_DIR", &target)
        .env("NANOLET_VERSION", version));
    target.join("debug/nanolet")
}

/// A scratch root with an empty dpkg database.
struct DpkgRoot(PathBuf);

impl DpkgRoot {
    fn new(path: PathBuf) -> DpkgRoot {
        let admin = path.join("var/lib/dpkg");
        for d in ["info", "updates", "triggers"] {
            fs::create_dir_all(admin.join(d)).expect("dpkg admin dir");
        }
        fs::write(admin.join("status"), "").expect("dpkg status");
        DpkgRoot(path)
    }

    /// `dpkg --root` as apt would call it non-interactively (keep the admin's conffile edits);
    /// the maintainer scripts run with DPKG_ROOT set and touch nothing outside the root.
    fn install(&self, deb: &Path) -> String {
        run(Command::new("dpkg")
            .arg(format!("--root={}", self.0.display()))
            .args([
                "--force-depends",
                "--force-script-chrootless",
                "--no-triggers",
                "--force-confold",
                "-i",
            ])
            .arg(deb))
    }

    fn status(&self) -> String {
        run(Command::new("dpkg-query")
            .arg(format!(
                "--admindir={}",
                self.0.join("var/lib/dpkg").display()
            ))
            .args(["-W", "-f=${Status} ${Version}", "nanolet"]))
    }

    fn path(&self, p: &str) -> PathBuf {
        self.0.join(p.trim_start_matches('/'))
    }
}

/// The `$NOTIFY_SOCKET` systemd would listen on. Like systemd, it reads all the time (a
/// thread drains the socket into a channel): a reader that stops reading fills the socket's
/// queue after `net.unix.max_dgram_qlen` (10) datagrams, after which nanolet's notifications
/// are dropped (src/sdnotify.rs gives up after 2 s rather than hang).
struct NotifySocket {
    path: PathBuf,
    rx: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl NotifySocket {
    fn bind(path: PathBuf) -> NotifySocket {
        let sock = UnixDatagram::bind(&path).expect("bind notify socket");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = sock.recv(&mut buf) {
                if tx
                    .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                    .is_err()
                {
                    return;
                }
            }
        });
        NotifySocket {
            path,
            rx,
            seen: vec![],
        }
    }

    /// Waits until a datagram has a line equal to `line`; returns every datagram received
    /// since the last call.
    fn wait_line(&mut self, line: &str, timeout: Duration) -> Vec<String> {
        let found = wait_for(timeout, || {
            // Everything queued since the last look, or the next datagram within 200 ms.
            let first = self.rx.recv_timeout(Duration::from_millis(200)).ok()?;
            let mut hit = false;
            for msg in std::iter::once(first).chain(self.rx.try_iter()) {
                hit |= msg.lines().any(|l| l == line);
                self.seen.push(msg);
            }
            hit.then_some(())
        });
        assert!(
            found.is_some(),
            "no {line} on the notify socket; got {:?}",
            self.seen
        );
        std::mem::take(&mut self.seen)
    }
}

/// (container, containerID, startedAt, restartCount)
type ContainerFacts = (String, String, String, i64);

/// What must not change across the upgrade, per pod and per running CRI task.
#[derive(Debug, PartialEq)]
struct Snapshot {
    /// pod name -> (uid, podIP, containers)
    pods: BTreeMap<String, (String, String, Vec<ContainerFacts>)>,
    /// containerd task (sandbox or container) ID -> PID
    tasks: BTreeMap<String, u32>,
}

fn tasks(ctd: &Containerd) -> BTreeMap<String, u32> {
    let out = run(Command::new(support::test_runtime().ctr())
        .arg("--address")
        .arg(ctd.socket_path())
        .args(["-n", "k8s.io", "tasks", "ls"]));
    out.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                [id, pid, "RUNNING"] => Some((id.to_string(), pid.parse().ok()?)),
                _ => None,
            }
        })
        .collect()
}

fn snapshot(n: &Nanolet, ctd: &Containerd) -> Snapshot {
    let mut pods = BTreeMap::new();
    for p in n.pods() {
        let containers = p["status"]["containerStatuses"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or_default().to_string(),
                    c["containerID"].as_str().unwrap_or_default().to_string(),
                    c["state"]["running"]["startedAt"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    c["restartCount"].as_i64().unwrap_or(-1),
                )
            })
            .collect();
        pods.insert(
            p["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            (
                p["metadata"]["uid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                p["status"]["podIP"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                containers,
            ),
        );
    }
    Snapshot {
        pods,
        tasks: tasks(ctd),
    }
}

fn all_ready(n: &Nanolet, count: usize) -> bool {
    let pods = n.pods();
    pods.len() == count
        && pods.iter().all(|p| {
            p["status"]["phase"] == "Running"
                && p["status"]["containerStatuses"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().all(|c| c["ready"] == true))
        })
}

fn cgroup_of(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default()
}

/// `kubelet_runtime_operations_total` for one operation type (0 when absent).
fn runtime_ops(n: &Nanolet, op: &str) -> f64 {
    let metrics = n.get("/metrics").unwrap_or_default();
    let key = format!("kubelet_runtime_operations_total{{operation_type=\"{op}\"}}");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

const SLEEPER: &str = "apiVersion: v1
kind: Pod
metadata:
  name: sleeper
spec:
  containers:
  - name: c
    image: localhost/busybox:1.36
    command: [sleep, '3600']
";

// Exits 1 on its first run (restartCount becomes 1), then runs; the marker survives in an
// emptyDir. Host network: one pod of each kind.
const ONCE: &str = "apiVersion: v1
kind: Pod
metadata:
  name: crash-once
spec:
  hostNetwork: true
  volumes:
  - name: d
    emptyDir: {}
  containers:
  - name: c
    image: localhost/busybox:1.36
    command: [sh, -c, 'if [ ! -e /d/ran ]; then touch /d/ran; exit 1; fi; exec sleep 3600']
    volumeMounts:
    - {name: d, mountPath: /d}
";

#[test]
fn deb_upgrade_and_restart_leave_running_pods_untouched() {
    let new_version = format!("{OLD_VERSION}+upgrade1");
    // First, alone (see build_new_binary).
    let new_bin = build_new_binary(&new_version);
    let ctd = Containerd::start();
    let tmp = ctd.tmp().join("upgrade");
    fs::create_dir_all(&tmp).expect("tmp");

    // --- the two packages
    let (deb1, deb2) = build_packages(&tmp, &new_bin, &new_version);

    // --- fresh install
    let root = DpkgRoot::new(tmp.join("root"));
    let config = install_and_edit_the_conffile(&root, &deb1);
    let exec = exec_start_of_the_unit(&root, &config);

    // --- "systemctl start nanolet": Type=notify with a 1 s watchdog
    let mut notify = NotifySocket::bind(tmp.join("notify.sock"));
    let (mut n, before) = start_as_the_unit_does(&ctd, &root, &exec, &mut notify);

    // --- the upgrade: dpkg replaces the binary under the running nanolet
    upgrade_under_the_running_nanolet(&root, &deb2, &config, &n, &new_version);

    // --- "systemctl restart nanolet": SIGTERM to the main process only, then ExecStart again
    restart_as_systemd_does(&mut n, &mut notify, &ctd, before, &new_version);
}

/// The .deb of cargo's binary (the old version) and of `new_bin` (the new one).
fn build_packages(tmp: &Path, new_bin: &Path, new_version: &str) -> (PathBuf, PathBuf) {
    let deb1 = build_deb(
        Path::new(env!("CARGO_BIN_EXE_nanolet")),
        &tmp.join("dist1"),
        OLD_VERSION,
    );
    let out = run(Command::new(new_bin).arg("version"));
    assert!(out.starts_with(&format!("nanolet {new_version} ")), "{out}");
    let deb2 = build_deb(new_bin, &tmp.join("dist2"), new_version);
    (deb1, deb2)
}

/// Installs the old package; the admin then edits its conffile. Returns the conffile's path.
fn install_and_edit_the_conffile(root: &DpkgRoot, deb1: &Path) -> PathBuf {
    root.install(deb1);
    assert_eq!(root.status(), format!("install ok installed {OLD_VERSION}"));
    let installed = root.path("/usr/bin/nanolet");
    let out = run(Command::new(&installed).arg("version"));
    assert!(out.starts_with(&format!("nanolet {OLD_VERSION} ")), "{out}");

    // The admin's setting in the conffile, which the upgrade must keep.
    let config = root.path("/etc/nanolet/config.yaml");
    let mut text = fs::read_to_string(&config).expect("installed config");
    text.push_str("\n# local edit\nmaxPods: 42\n");
    fs::write(&config, text).expect("edit config");
    config
}

/// The unit's ExecStart with the scratch root's config file.
fn exec_start_of_the_unit(root: &DpkgRoot, config: &Path) -> Vec<String> {
    // ExecStart as the unit says, with the paths of the scratch root. The test's own paths
    // (manifests, containerd socket, ports, state) come as flags, which override the file.
    // $NANOLET_ARGS (from /etc/default/nanolet, empty as shipped) expands to no argument.
    let unit =
        fs::read_to_string(root.path("/usr/lib/systemd/system/nanolet.service")).expect("unit");
    let exec: Vec<String> = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart")
        .split_whitespace()
        .filter(|a| *a != "$NANOLET_ARGS")
        .map(|a| match a {
            "/etc/nanolet/config.yaml" => config.display().to_string(),
            a => a.to_string(),
        })
        .collect();
    assert_eq!(exec[0], "/usr/bin/nanolet");
    assert_eq!(exec[1], "run");
    for (key, want) in [
        ("Type=", "notify"),
        ("KillMode=", "process"),
        ("Restart=", "always"),
    ] {
        assert!(
            unit.lines().any(|l| l.strip_prefix(key) == Some(want)),
            "unit lacks {key}{want}"
        );
    }
    exec
}

/// Starts the installed binary as the unit does, with two pods (one restarted once); returns
/// it and the snapshot the upgrade must leave unchanged.
fn start_as_the_unit_does(
    ctd: &Containerd,
    root: &DpkgRoot,
    exec: &[String],
    notify: &mut NotifySocket,
) -> (Nanolet, Snapshot) {
    let installed = root.path("/usr/bin/nanolet");
    let env = [
        ("NOTIFY_SOCKET", notify.path.to_str().expect("utf-8 path")),
        ("WATCHDOG_USEC", "1000000"),
    ];
    let n = Nanolet::start_binary(ctd, &installed, &exec[2..], &env);
    n.write("sleeper.yaml", SLEEPER);
    n.write("crash-once.yaml", ONCE);
    notify.wait_line("READY=1", TIMEOUT);
    notify.wait_line("WATCHDOG=1", TIMEOUT);
    let ok = wait_for(TIMEOUT * 2, || {
        (all_ready(&n, 2)
            && n.pod("crash-once")
                .is_some_and(|p| p["status"]["containerStatuses"][0]["restartCount"] == 1))
        .then_some(())
    });
    assert!(
        ok.is_some(),
        "pods never all Running: {:#?}\n{}",
        n.pods(),
        n.log_tail()
    );
    let configz: Value =
        serde_json::from_str(&n.get("/configz").unwrap_or_default()).expect("configz");
    assert_eq!(
        configz["kubeletconfig"]["maxPods"], 42,
        "the installed config is read"
    );
    let before = snapshot(&n, ctd);
    assert_eq!(before.pods.len(), 2, "{before:#?}");
    // 2 sandboxes + 2 containers.
    assert_eq!(before.tasks.len(), 4, "{before:#?}");

    // The pods' processes are not in nanolet's cgroup (KillMode=control-group would spare
    // them too; KillMode=process says so explicitly).
    let old_pid = n.child.as_ref().expect("child").id();
    for pid in before.tasks.values() {
        assert_ne!(
            cgroup_of(*pid),
            cgroup_of(old_pid),
            "pid {pid} in nanolet's cgroup"
        );
    }
    (n, before)
}

fn upgrade_under_the_running_nanolet(
    root: &DpkgRoot,
    deb2: &Path,
    config: &Path,
    n: &Nanolet,
    new_version: &str,
) {
    let installed = root.path("/usr/bin/nanolet");
    let dpkg_out = root.install(deb2);
    assert_eq!(root.status(), format!("install ok installed {new_version}"));
    let out = run(Command::new(&installed).arg("version"));
    assert!(out.starts_with(&format!("nanolet {new_version} ")), "{out}");
    let text = fs::read_to_string(config).expect("config after upgrade");
    assert!(
        text.contains("maxPods: 42"),
        "upgrade replaced the edited conffile\n{dpkg_out}"
    );
    assert_eq!(
        n.get("/healthz").as_deref(),
        Some("ok"),
        "the old nanolet still runs"
    );
}

/// Stops nanolet as systemd does and starts the new binary: nothing of the pods may change.
fn restart_as_systemd_does(
    n: &mut Nanolet,
    notify: &mut NotifySocket,
    ctd: &Containerd,
    before: Snapshot,
    new_version: &str,
) {
    let mut child = n.child.take().expect("child");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let status = wait_for(Duration::from_secs(30), || child.try_wait().ok().flatten());
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "nanolet did not exit within TimeoutStopSec=30s of SIGTERM\n{}",
            n.log_tail()
        );
    };
    assert!(status.success(), "nanolet exited with {status} on SIGTERM");
    notify.wait_line("STOPPING=1", TIMEOUT);
    assert_eq!(
        tasks(ctd),
        before.tasks,
        "stopping nanolet changed the running tasks"
    );

    n.spawn();
    notify.wait_line("READY=1", TIMEOUT);
    let log = fs::read_to_string(&n.log).unwrap_or_default();
    let starts: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("starting nanolet"))
        .collect();
    assert_eq!(starts.len(), 2, "{starts:#?}");
    assert!(
        starts[0].contains(OLD_VERSION) && !starts[0].contains(new_version),
        "{}",
        starts[0]
    );
    assert!(starts[1].contains(new_version), "{}", starts[1]);

    let ok = wait_for(TIMEOUT, || all_ready(n, 2).then_some(()));
    assert!(
        ok.is_some(),
        "pods not Running after the restart: {:#?}",
        n.pods()
    );
    let after = snapshot(n, ctd);
    assert_eq!(
        after,
        before,
        "the upgrade changed the pods\n{}",
        n.log_tail()
    );
    for op in [
        "run_podsandbox",
        "create_container",
        "start_container",
        "stop_container",
        "stop_podsandbox",
        "remove_container",
    ] {
        assert_eq!(runtime_ops(n, op), 0.0, "the new nanolet called {op}");
    }
    let configz: Value =
        serde_json::from_str(&n.get("/configz").unwrap_or_default()).expect("configz");
    assert_eq!(
        configz["kubeletconfig"]["maxPods"], 42,
        "the kept config is read"
    );
    assert!(
        runtime_ops(n, "list_containers") > 0.0,
        "the metric names are right (the new nanolet lists containers)"
    );
}
