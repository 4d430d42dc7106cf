//! The real systemd (Debian's `/lib/systemd/systemd`) as PID 1 of its own PID, mount and cgroup
//! namespaces, the way systemd runs in a container: `container=` set, a private `/run`, a new
//! `/proc`, the cgroup hierarchies mounted again inside a cgroup namespace rooted at a subtree
//! made for it (`<our cgroup>/<name>` in every hierarchy, so it manages only that), and a
//! target of its own with no dependencies as the boot unit (none of the host's units start).
//! Its API is its private socket, `/run/systemd/private` inside; it answers only peers in its
//! PID namespace, so its clients run there too ([`SystemdInit::nsenter_args`]).
//!
//! Drop stops it by PID (the namespace and everything in it end with it), then removes the
//! cgroups below the subtree and the subtree.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::wait_for;

pub struct SystemdInit {
    /// The `unshare` process; systemd is its only child.
    unshare: Child,
    /// systemd's PID (in our namespace).
    pub pid: i32,
    /// The subtree made for it, one per hierarchy.
    pub cgroups: Vec<PathBuf>,
    pub log: PathBuf,
}

/// The shell run in the new namespaces before systemd replaces it.
const INSIDE: &str = r#"set -e
mount -t proc proc /proc
mount -t tmpfs tmpfs /run
mkdir -p /run/systemd/system
printf '[Unit]\nDescription=nanolet test boot target\nDefaultDependencies=no\n' > /run/systemd/system/nanolet-test.target
mount -t tmpfs -o mode=755 tmpfs /sys/fs/cgroup
for h in $V1; do mkdir /sys/fs/cgroup/$h; mount -t cgroup -o $h cgroup /sys/fs/cgroup/$h; done
mkdir /sys/fs/cgroup/systemd; mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd
mkdir /sys/fs/cgroup/unified; mount -t cgroup2 cgroup2 /sys/fs/cgroup/unified
exec env -i container=nanolet-test /lib/systemd/systemd --system --unit=nanolet-test.target --log-target=console
"#;

impl SystemdInit {
    /// Starts systemd; returns once its private socket answers (`systemctl is-system-running`
    /// inside says anything). On this host's hybrid cgroup layout (v1 controllers, systemd's
    /// own `name=systemd` and a cgroup2 `unified`).
    pub fn start(dir: &Path) -> SystemdInit {
        let name = format!(
            "nanolet-sd-{}-{}",
            std::process::id(),
            crate::agent::free_port()
        );
        // Our cgroup in each hierarchy (/proc/self/cgroup: "id:controllers:path").
        let own = fs::read_to_string("/proc/self/cgroup").expect("/proc/self/cgroup");
        let mut cgroups = vec![];
        let mut v1 = vec![];
        for line in own.lines() {
            let mut f = line.splitn(3, ':');
            let (_, ctrl, path) = (f.next(), f.next().unwrap_or(""), f.next().unwrap_or("/"));
            let hier = match ctrl {
                "" => "unified".to_string(),
                "name=systemd" => "systemd".to_string(),
                c => {
                    v1.push(c.to_string());
                    c.to_string()
                }
            };
            cgroups.push(
                Path::new("/sys/fs/cgroup")
                    .join(hier)
                    .join(path.trim_start_matches('/'))
                    .join(&name),
            );
        }
        let log = dir.join("systemd.log");
        let out = fs::File::create(&log).expect("systemd log");
        // The shell moves itself into the subtree (cpuset needs its cpus and mems first), then
        // becomes unshare, whose child becomes systemd.
        let mut join = String::from("set -e\n");
        for cg in &cgroups {
            let parent = cg.parent().expect("parent").display().to_string();
            let cg = cg.display();
            join.push_str(&format!("mkdir -p {cg}\n"));
            if parent.contains("/cpuset") {
                join.push_str(&format!(
                    "cat {parent}/cpuset.cpus > {cg}/cpuset.cpus; cat {parent}/cpuset.mems > {cg}/cpuset.mems\n"
                ));
            }
            join.push_str(&format!("echo $$ > {cg}/cgroup.procs\n"));
        }
        join.push_str("exec unshare --pid --fork --mount --cgroup --propagation private bash -c \"$INSIDE\"\n");
        let unshare = Command::new("bash")
            .arg("-c")
            .arg(&join)
            .env("INSIDE", INSIDE)
            .env("V1", v1.join(" "))
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("start unshare");
        let upid = unshare.id();
        let mut sd = SystemdInit {
            unshare,
            pid: 0,
            cgroups,
            log,
        };
        // systemd: the child of unshare.
        sd.pid = wait_for(Duration::from_secs(20), || {
            let kids = fs::read_to_string(format!("/proc/{upid}/task/{upid}/children")).ok()?;
            let pid: i32 = kids.split_whitespace().next()?.parse().ok()?;
            let exe = fs::read_link(format!("/proc/{pid}/exe")).ok()?;
            exe.to_string_lossy().contains("systemd").then_some(pid)
        })
        .unwrap_or_else(|| {
            panic!(
                "systemd did not start: {}",
                fs::read_to_string(&sd.log).unwrap_or_default()
            )
        });
        let up = wait_for(Duration::from_secs(30), || {
            let out = sd.inside(&["systemctl", "is-system-running"]);
            (!out.is_empty()).then_some(out)
        });
        assert!(
            up.is_some(),
            "systemd's bus did not answer: {}",
            fs::read_to_string(&sd.log).unwrap_or_default()
        );
        sd
    }

    /// nsenter options for a process beside systemd: its PID and mount namespaces (its bus
    /// answers only peers in its PID namespace; its socket and cgroups are in its mounts).
    pub fn nsenter_args(&self) -> Vec<String> {
        vec![
            format!("--target={}", self.pid),
            "--pid".into(),
            "--mount".into(),
        ]
    }

    /// Runs a command beside systemd; its standard output, trimmed.
    pub fn inside(&self, cmd: &[&str]) -> String {
        Command::new("nsenter")
            .args(self.nsenter_args())
            .arg("--")
            .args(cmd)
            .stderr(Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    }

    /// A unit's property as systemd reports it (`systemctl show -p NAME --value`).
    pub fn property(&self, unit: &str, name: &str) -> String {
        self.inside(&["systemctl", "show", unit, "-p", name, "--value"])
    }

    /// A file of a cgroup as the namespace sees it (`/sys/fs/cgroup/<hier>/<path>`).
    pub fn cgroup_file(&self, rel: &str) -> Option<String> {
        let out = self.inside(&["cat", &format!("/sys/fs/cgroup/{rel}")]);
        (!out.is_empty()).then_some(out)
    }
}

fn remove_tree(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                remove_tree(&e.path());
            }
        }
    }
    let _ = fs::remove_dir(dir);
}

impl Drop for SystemdInit {
    fn drop(&mut self) {
        if self.pid > 0 {
            // PID 1 of the namespace: the kernel ends every process in it with it.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
        // The cgroups empty as the processes exit; then they go, deepest first.
        for cg in &self.cgroups {
            let _ = wait_for(Duration::from_secs(10), || {
                remove_tree(cg);
                (!cg.exists()).then_some(())
            });
        }
    }
}
