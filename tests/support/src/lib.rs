//! The integration-test harness (the `nanolet-test-support` crate): a private containerd in a
//! temp directory, and beside it `agent` (a running `nanolet run`), `apiserver` (the API server
//! test double), `kubectl` (the real kubectl against it) and `gate` (which tests may run side by
//! side in the one test process); for the double's HTTPS side `front` (its TLS front and node
//! proxy relay), `tls` (rustls configs, certificate subjects, an HTTPS test client), `pki`
//! (the CA and certificates through the `openssl` CLI) and `standin` (a stand-in kubelet).
//! Used by the integration tests (`tests/integration/`) and the benchmark
//! (`benches/footprint.rs`).
//!
//! `Containerd::start()` gives each test its own containerd (own root, state, socket, CNI
//! bridge and /16 subnet) with the local test images imported:
//! - `localhost/busybox:1.36` (Cmd `sh`) and `localhost/pause:3.9` (the sandbox image),
//!   built by `scripts/build-images.sh` from Debian's busybox-static, cached in
//!   `target/test-images/<hash>`.
//!
//! Dropping it (also on panic) removes every sandbox through CRI, stops containerd, kills
//! leftover shims of *this* containerd (and their children), unmounts everything below the temp
//! dir, deletes the bridge and the temp dir. Tear-down is bounded: it never waits forever.
//!
//! Requires root and the tools from `scripts/install-deps.sh`.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nanolet::cri::Runtime;
use nanolet::cri::client::CriRuntime;

pub mod agent;
pub mod apiserver;
pub mod cluster;
pub mod dbus;
pub mod devices;
pub mod front;
pub mod gate;
pub mod kubectl;
pub mod kubelet;
pub mod pki;
pub mod runtime;
pub mod sdinit;
pub mod standin;
pub mod tls;

pub use gate::exclusive;
pub use runtime::test_runtime;
use runtime::{containerd_config_v2, containerd_config_v3};

pub const BUSYBOX_IMAGE: &str = "localhost/busybox:1.36";
pub const PAUSE_IMAGE: &str = "localhost/pause:3.9";

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Second octets of the 10.X.0.0/16 pod subnets the harness may use.
const SUBNET_OCTETS: std::ops::RangeInclusive<u8> = 200..=254;
const NET_LOCK_DIR: &str = "/tmp/nanolet-test-nets";

static INSTANCE: AtomicUsize = AtomicUsize::new(0);

/// The nanolet repository (this crate is `tests/support` in it).
pub fn repo_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("{} is not <repo>/tests/support", here.display()))
        .to_path_buf()
}

/// The `nanolet` executable cargo built for the running test or bench binary.
///
/// `env!("CARGO_BIN_EXE_nanolet")` only exists while cargo compiles an integration test or a
/// bench of the nanolet package, not this library. Cargo >= 1.94 also sets it in the
/// environment of the test and bench processes it runs; otherwise (an older cargo, or a test
/// binary run by hand) it is where cargo puts it beside the running executable:
/// `target/<profile>/deps/<name>-<hash>` -> `target/<profile>/nanolet` (cargo builds a
/// package's binaries before its integration tests and benches, with the same profile).
pub fn nanolet_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = match std::env::var_os("CARGO_BIN_EXE_nanolet") {
            Some(p) => PathBuf::from(p),
            None => {
                let exe = std::env::current_exe()
                    .unwrap_or_else(|e| panic!("the test binary's path: {e}"));
                let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
                if dir.ends_with("deps") || dir.ends_with("examples") {
                    dir.pop();
                }
                dir.join("nanolet")
            }
        };
        assert!(
            bin.is_file(),
            "no nanolet binary at {} (cargo builds it with the integration tests and benches)",
            bin.display()
        );
        bin
    })
}

fn run_ok(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{cmd:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Panics with a pointer to install-deps.sh if a required tool is missing.
fn check_deps() {
    let mut missing = Vec::new();
    // An upstream runtime (NANOLET_TEST_RUNTIME=1.7|2) brings its own containerd, ctr and runc.
    let system_runtime: &[&str] = if test_runtime().bin_dir.is_some() {
        &[]
    } else {
        &["containerd", "ctr", "runc"]
    };
    for bin in system_runtime
        .iter()
        .copied()
        .chain(["ip", "umount", "tar", "gzip", "sha256sum"])
    {
        let found = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
            .unwrap_or(false)
            || ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
                .iter()
                .any(|d| Path::new(d).join(bin).is_file());
        if !found {
            missing.push(bin.to_string());
        }
    }
    for f in [
        "/usr/lib/cni/bridge",
        "/usr/lib/cni/host-local",
        "/usr/lib/cni/portmap",
        "/usr/lib/cni/loopback",
        "/bin/busybox",
    ] {
        if !Path::new(f).exists() {
            missing.push(f.to_string());
        }
    }
    if !missing.is_empty() {
        panic!(
            "integration tests need {}: run scripts/install-deps.sh (as root) first",
            missing.join(", ")
        );
    }
    if !nix::unistd::geteuid().is_root() {
        panic!("integration tests run a private containerd and must run as root");
    }
}

/// Builds (once per process, cached on disk across processes) the test image archives.
/// Returns the directory holding busybox.tar and pause.tar.
pub fn test_images() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        check_deps();
        let script = repo_root().join("scripts/build-images.sh");
        let sums = run_ok(Command::new("sha256sum").arg("/bin/busybox").arg(&script))
            .unwrap_or_else(|e| panic!("hashing image inputs: {e}"));
        let key: String = {
            let joined: String = sums
                .split_whitespace()
                .step_by(2)
                .collect::<Vec<_>>()
                .join("");
            let out = Command::new("sha256sum")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .and_then(|mut c| {
                    if let Some(mut stdin) = c.stdin.take() {
                        stdin.write_all(joined.as_bytes())?;
                    }
                    c.wait_with_output()
                })
                .unwrap_or_else(|e| panic!("sha256sum: {e}"));
            String::from_utf8_lossy(&out.stdout)
                .chars()
                .take(16)
                .collect()
        };
        let base = repo_root().join("target/test-images");
        let dir = base.join(&key);
        if dir.join("busybox.tar").is_file() && dir.join("pause.tar").is_file() {
            return dir;
        }
        fs::create_dir_all(&base).unwrap_or_else(|e| panic!("creating {}: {e}", base.display()));
        // Build into a private dir, then rename: concurrent test processes race benignly.
        let tmp = base.join(format!(".{key}.{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        run_ok(Command::new("bash").arg(&script).arg(&tmp))
            .unwrap_or_else(|e| panic!("building test images: {e}"));
        if fs::rename(&tmp, &dir).is_err() {
            let _ = fs::remove_dir_all(&tmp);
        }
        assert!(
            dir.join("busybox.tar").is_file(),
            "test images missing in {}",
            dir.display()
        );
        dir
    })
}

fn pid_alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Claims a 10.X.0.0/16 subnet no other harness instance (in any process) holds and no route
/// on this machine overlaps. The claim is a lock file holding our pid; stale ones are reclaimed.
fn claim_subnet(instance: usize) -> (u8, PathBuf) {
    fs::create_dir_all(NET_LOCK_DIR).unwrap_or_else(|e| panic!("creating {NET_LOCK_DIR}: {e}"));
    let routes = run_ok(Command::new("ip").args(["-o", "-4", "route", "show", "table", "all"]))
        .unwrap_or_default();
    // Each instance starts from its own octet (its own number, not a re-read of the shared
    // counter: two tests starting together read the same value and raced for one subnet).
    let start = (std::process::id() as usize + instance * 7) % SUBNET_OCTETS.clone().count();
    let octets: Vec<u8> = SUBNET_OCTETS.collect();
    for i in 0..octets.len() {
        let x = octets[(start + i) % octets.len()];
        if routes.contains(&format!("10.{x}.")) {
            continue;
        }
        let lock = Path::new(NET_LOCK_DIR).join(format!("10.{x}"));
        for _attempt in 0..2 {
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&lock)
            {
                Ok(mut f) => {
                    let _ = write!(f, "{}", std::process::id());
                    return (x, lock);
                }
                Err(_) => {
                    let holder = fs::read_to_string(&lock)
                        .ok()
                        .and_then(|s| s.trim().parse::<i32>().ok());
                    // An empty file is a claim being written (create_new, then the pid): it
                    // is held unless it stayed empty for long (its writer died in between).
                    let fresh = fs::metadata(&lock)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age < Duration::from_secs(30));
                    match holder {
                        Some(pid) if pid_alive(pid) => break,
                        None if fresh => break,
                        _ => {
                            let _ = fs::remove_file(&lock);
                        }
                    }
                }
            }
        }
    }
    panic!("no free 10.X.0.0/16 test subnet in {SUBNET_OCTETS:?} (see {NET_LOCK_DIR})");
}

/// A private containerd. See the module docs.
pub struct Containerd {
    tmp: PathBuf,
    socket: PathBuf,
    config: PathBuf,
    child: Option<Child>,
    bridge: String,
    subnet: String,
    net_lock: PathBuf,
    /// Registry hosts (`127.0.0.1:PORT`) the CRI plugin reaches over plain http (a mirror
    /// entry per host in the config); empty for every test but the fake-registry ones.
    plain_http_registries: Vec<String>,
    /// The network namespace (`/run/netns/NAME`) containerd runs in, so that its pods' CNI
    /// bridge and hostNetwork pods are there (a real cluster's node: `cluster::Cluster`).
    netns: Option<PathBuf>,
    /// The shared gate while this containerd lives (`None` for a stale instance being reaped).
    _gate: Option<gate::Shared>,
}

impl Containerd {
    /// Starts a containerd in a fresh temp dir and imports the test images. Panics (after
    /// cleaning up) if anything fails.
    pub fn start() -> Containerd {
        Self::start_with_plain_http_registries(&[])
    }

    /// As [`Containerd::start`], with CRI registry mirrors that reach `hosts` over plain http.
    pub fn start_with_plain_http_registries(hosts: &[String]) -> Containerd {
        Self::start_inner(hosts, None, |_| {})
    }

    /// As [`Containerd::start`], running in the network namespace `netns` (`/run/netns/NAME`,
    /// entered with `nsenter --net`: only the network namespace, so mounts and cgroups are
    /// the host's as for a containerd on the node).
    pub fn start_in_netns(netns: &Path) -> Containerd {
        Self::start_inner(&[], Some(netns.to_path_buf()), |_| {})
    }

    /// As [`Containerd::start`], with `prepare(tmp)` run before containerd starts (e.g. to mount
    /// a small filesystem on `<tmp>/root`, containerd's root: the image filesystem). Mounts
    /// below the temp dir are unmounted on drop.
    pub fn start_prepared(prepare: impl FnOnce(&Path)) -> Containerd {
        Self::start_inner(&[], None, prepare)
    }

    fn start_inner(
        hosts: &[String],
        netns: Option<PathBuf>,
        prepare: impl FnOnce(&Path),
    ) -> Containerd {
        // First: no containerd starts while a test that must run alone runs.
        let gate = gate::shared();
        check_deps();
        reap_stale_instances();
        let images = test_images();
        let n = INSTANCE.fetch_add(1, Ordering::SeqCst);
        let (octet, net_lock) = claim_subnet(n);
        let tmp = PathBuf::from(format!("/tmp/nanolet-ctd-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir_all(tmp.join("cni"))
            .unwrap_or_else(|e| panic!("creating {}: {e}", tmp.display()));
        let mut ctd = Containerd {
            socket: tmp.join("containerd.sock"),
            config: tmp.join("config.toml"),
            tmp,
            child: None,
            bridge: format!("nlt{octet}"),
            subnet: format!("10.{octet}.0.0/16"),
            net_lock,
            plain_http_registries: hosts.to_vec(),
            netns,
            _gate: Some(gate),
        };
        ctd.write_config();
        prepare(&ctd.tmp);
        ctd.start_daemon();
        for tar in ["pause.tar", "busybox.tar"] {
            ctd.import_image(&images.join(tar));
        }
        ctd
    }

    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// `unix://<socket>`
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// The network namespace containerd runs in, if not this process's.
    pub fn netns(&self) -> Option<&Path> {
        self.netns.as_deref()
    }

    /// The instance's temp dir (put sandbox log directories, host paths etc. below it).
    pub fn tmp(&self) -> &Path {
        &self.tmp
    }

    /// The pod subnet (CIDR) of this instance's CNI bridge.
    pub fn subnet(&self) -> &str {
        &self.subnet
    }

    /// A fresh CRI client for this containerd (30 s default deadline).
    pub fn runtime(&self) -> CriRuntime {
        CriRuntime::connect(&self.endpoint(), Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("connecting to test containerd: {e}"))
    }

    /// containerd's log so far (for assertion messages).
    pub fn log(&self) -> String {
        fs::read_to_string(self.tmp.join("containerd.log")).unwrap_or_default()
    }

    /// Imports an OCI/docker archive into namespace k8s.io with `nanolet images import` (the
    /// product's own import path; its pin record goes to `<tmp>/image-pins`).
    pub fn import_image(&self, tar: &Path) {
        if let Err(e) = run_ok(
            Command::new(nanolet_bin())
                .args(["images", "import"])
                .arg(format!("--container-runtime-endpoint={}", self.endpoint()))
                .arg(format!(
                    "--root-dir={}",
                    self.tmp.join("image-pins").display()
                ))
                .arg(tar),
        ) {
            panic!(
                "importing {}: {e}\ncontainerd log tail:\n{}",
                tar.display(),
                tail(&self.log(), 30)
            );
        }
    }

    fn write_config(&self) {
        let t = self.tmp.display();
        let rt = test_runtime();
        let config = match rt.config_version {
            2 => containerd_config_v2(&t.to_string(), rt, &self.plain_http_registries),
            _ => containerd_config_v3(&t.to_string(), rt, &self.plain_http_registries, &self.tmp),
        };
        fs::write(&self.config, config)
            .unwrap_or_else(|e| panic!("writing containerd config: {e}"));
        let conflist = format!(
            r#"{{
  "cniVersion": "0.4.0",
  "name": "nanolet-test-{bridge}",
  "plugins": [
    {{
      "type": "bridge",
      "bridge": "{bridge}",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {{
        "type": "host-local",
        "dataDir": "{t}/cni-ipam",
        "ranges": [[{{ "subnet": "{subnet}" }}]],
        "routes": [{{ "dst": "0.0.0.0/0" }}]
      }}
    }},
    {{ "type": "portmap", "capabilities": {{ "portMappings": true }} }}
  ]
}}
"#,
            bridge = self.bridge,
            subnet = self.subnet,
        );
        fs::write(self.tmp.join("cni/10-nanolet-test.conflist"), conflist)
            .unwrap_or_else(|e| panic!("writing CNI conflist: {e}"));
    }

    /// Starts containerd (again) with this instance's config and waits until CRI answers.
    pub fn start_daemon(&mut self) {
        assert!(self.child.is_none(), "containerd already running");
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.tmp.join("containerd.log"))
            .unwrap_or_else(|e| panic!("opening containerd log: {e}"));
        let log2 = log
            .try_clone()
            .unwrap_or_else(|e| panic!("cloning log fd: {e}"));
        let rt = test_runtime();
        let mut cmd = match &self.netns {
            Some(ns) => {
                // nsenter execs containerd: the child's pid is containerd's.
                let mut c = Command::new("nsenter");
                c.arg(format!("--net={}", ns.display()))
                    .arg("--")
                    .arg(rt.containerd());
                c
            }
            None => Command::new(rt.containerd()),
        };
        let child = cmd
            .env("PATH", rt.path_env())
            .arg("--config")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", rt.containerd().display()));
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let rt = CriRuntime::connect(&self.endpoint(), Duration::from_secs(2))
            .unwrap_or_else(|e| panic!("CRI client: {e}"));
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    panic!(
                        "containerd exited during start-up ({status}):\n{}",
                        tail(&self.log(), 40)
                    );
                }
            }
            let err = match rt.version() {
                Ok(_) => return,
                Err(e) => e,
            };
            if Instant::now() > deadline {
                panic!(
                    "containerd not ready after {READY_TIMEOUT:?}: {err}\n{}",
                    tail(&self.log(), 40)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops containerd: SIGTERM, then SIGKILL after a bound. Shims and containers keep
    /// running (as with a real containerd restart).
    pub fn stop_daemon(&mut self) {
        self.signal_daemon(nix::sys::signal::Signal::SIGTERM);
    }

    /// Kills containerd with SIGKILL (a crash). Shims and containers keep running.
    /// The containerd process id while it runs.
    pub fn daemon_pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn kill_daemon(&mut self) {
        self.signal_daemon(nix::sys::signal::Signal::SIGKILL);
    }

    fn signal_daemon(&mut self, sig: nix::sys::signal::Signal) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, sig);
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() > deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        // A dead containerd leaves its socket file behind; remove it so a restart is clean.
        let _ = fs::remove_file(&self.socket);
    }

    /// Best effort: stop and remove every sandbox (and so every container) through CRI.
    fn remove_all_pods(&self) {
        let Ok(rt) = CriRuntime::connect(&self.endpoint(), Duration::from_secs(10)) else {
            return;
        };
        let Ok(sandboxes) = rt.list_pod_sandboxes() else {
            return;
        };
        if let Ok(containers) = rt.list_containers() {
            for c in containers {
                let _ = rt.stop_container(&c.id, Duration::ZERO);
                let _ = rt.remove_container(&c.id);
            }
        }
        for s in sandboxes {
            let _ = rt.stop_pod_sandbox(&s.id);
            let _ = rt.remove_pod_sandbox(&s.id);
        }
    }

    fn kill_leftover_processes(&self) {
        // Shims carry `-address <tmp>/containerd.sock`, containerd `--config <tmp>/config.toml`
        // (a stale instance may still run it); the trailing slash keeps "...-1" from
        // matching "...-10".
        let needle = format!("{}/", self.tmp.display());
        let Ok(entries) = fs::read_dir("/proc") else {
            return;
        };
        let mut procs: Vec<(i32, i32, String)> = Vec::new(); // pid, ppid, cmdline
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let cmdline = fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            let ppid = fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.to_string()))
                .and_then(|rest| {
                    rest.split_whitespace()
                        .nth(1)
                        .and_then(|p| p.parse::<i32>().ok())
                })
                .unwrap_or(0);
            procs.push((pid, ppid, cmdline));
        }
        let shims: Vec<i32> = procs
            .iter()
            .filter(|(_, _, cmd)| cmd.contains("containerd") && cmd.contains(&needle))
            .map(|(pid, _, _)| *pid)
            .collect();
        // Kill the shims' descendants (container processes) first, then the shims.
        let mut victims = Vec::new();
        let mut frontier = shims.clone();
        while let Some(p) = frontier.pop() {
            for (pid, ppid, _) in &procs {
                if *ppid == p && !victims.contains(pid) {
                    victims.push(*pid);
                    frontier.push(*pid);
                }
            }
        }
        victims.extend(shims);
        for pid in victims {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    fn unmount_all(&self) {
        let prefix = self.tmp.display().to_string();
        let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
            return;
        };
        let mut points: Vec<String> = info
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .map(unescape_mountinfo)
            .filter(|p| p == &prefix || p.starts_with(&format!("{prefix}/")))
            .collect();
        // Later mounts may sit on top of earlier ones: unmount in reverse order.
        points.reverse();
        for p in points {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(&p)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.remove_all_pods();
        }
        self.stop_daemon();
        self.kill_leftover_processes();
        self.unmount_all();
        if !self.bridge.is_empty() {
            // The bridge is where containerd ran its CNI plugins.
            let mut ip = Command::new("nsenter");
            match &self.netns {
                Some(ns) => ip.arg(format!("--net={}", ns.display())),
                None => ip.arg("--net=/proc/self/ns/net"),
            };
            let _ = ip
                .args(["--", "ip", "link", "del", &self.bridge])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        if std::env::var_os("NANOLET_KEEP_TEST_DIRS").is_none() {
            if let Err(e) = fs::remove_dir_all(&self.tmp) {
                eprintln!("harness: could not delete {}: {e}", self.tmp.display());
            }
        }
        if !self.net_lock.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.net_lock);
        }
    }
}

/// Once per process: tears down instances left by test processes that died without running
/// `Drop` (SIGKILL, timeout): their containerd, shims, containers, mounts, bridge and dir.
fn reap_stale_instances() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let Ok(entries) = fs::read_dir("/tmp") else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix("nanolet-ctd-")
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<i32>().ok())
            else {
                continue;
            };
            if pid_alive(pid) {
                continue;
            }
            let tmp = e.path();
            let conflist =
                fs::read_to_string(tmp.join("cni/10-nanolet-test.conflist")).unwrap_or_default();
            let bridge = conflist
                .split("\"bridge\": \"")
                .nth(1)
                .and_then(|s| s.split('"').next())
                .filter(|b| b.starts_with("nlt"))
                .unwrap_or_default()
                .to_string();
            eprintln!("harness: reaping stale instance {}", tmp.display());
            drop(Containerd {
                socket: tmp.join("containerd.sock"),
                config: tmp.join("config.toml"),
                tmp,
                child: None,
                bridge,
                subnet: String::new(),
                net_lock: PathBuf::new(),
                plain_http_registries: Vec::new(),
                netns: None,
                _gate: None,
            });
        }
    });
}

/// mountinfo escapes space, tab, newline and backslash as \ooo.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A tmpfs mounted for a test (root dirs and emptyDirs on a small filesystem), unmounted
/// lazily, with everything below it, on drop.
pub struct Tmpfs(pub PathBuf);

impl Tmpfs {
    pub fn mount(dir: &Path, size: &str) -> Tmpfs {
        Self::mount_with(dir, &format!("size={size}"))
    }

    /// With tmpfs options, e.g. `size=64m,nr_inodes=2000` (a filesystem with few inodes).
    pub fn mount_with(dir: &Path, options: &str) -> Tmpfs {
        fs::create_dir_all(dir).expect("tmpfs dir");
        nix::mount::mount(
            Some("tmpfs"),
            dir,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some(options),
        )
        .expect("mount tmpfs");
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Polls `f` every 20 ms until it returns Some or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
