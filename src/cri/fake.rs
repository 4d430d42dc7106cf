//! In-memory runtime for unit tests of the decision logic: records every call, lets a test
//! inject errors per verb, and simulate container exits.

use crate::timeutil::now_unix_nanos;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, mpsc};
use std::time::Duration;

use super::*;

#[derive(Debug, Clone)]
struct FakeSandbox {
    config: PodSandboxConfig,
    state: SandboxState,
    created_at: i64,
    ip: String,
}

#[derive(Debug, Clone)]
struct FakeContainer {
    sandbox_id: String,
    config: ContainerConfig,
    state: ContainerState,
    created_at: i64,
    started_at: i64,
    finished_at: i64,
    exit_code: i32,
    reason: String,
    /// Exited in CRI while its task still runs (see [`Runtime::remove_orphan_task`]).
    orphan_task: bool,
}

#[derive(Default)]
struct Inner {
    sandboxes: BTreeMap<String, FakeSandbox>,
    containers: BTreeMap<String, FakeContainer>,
    images: BTreeMap<String, ImageInfo>,
    calls: Vec<String>,
    /// verb -> errors to return on the next calls of that verb (FIFO; the target is filled
    /// in by the call).
    errors: HashMap<&'static str, Vec<RuntimeError>>,
    /// What Status answers (`None`: both conditions true, no sandbox image named).
    status: Option<RuntimeStatus>,
    /// Exit code a container gets when it is started, by container name (simulated crash).
    exit_on_start: HashMap<String, i32>,
    subscribers: Vec<mpsc::Sender<RuntimeEvent>>,
    down: bool,
    /// Exit code of ExecSync in containers named so (default 0).
    exec_exit: HashMap<String, i32>,
    /// Base URL of a test streaming server: Exec/Attach/PortForward answer `{base}/{verb}/{id}`
    /// (None: they fail as a runtime without a streaming server).
    stream_base: Option<String>,
    /// What `runtime_handlers` answers (default: none, as containerd 1.6).
    handlers: Vec<super::RuntimeHandler>,
}

/// See module docs.
pub struct FakeRuntime {
    inner: Mutex<Inner>,
    next_id: AtomicU64,
    /// CreateContainer of containers with these names blocks until released (a hung runtime
    /// call), and how many such calls block now.
    hang: Mutex<(std::collections::HashSet<String>, usize)>,
    hang_released: std::sync::Condvar,
}

impl Default for FakeRuntime {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeRuntime {
    pub fn new() -> Self {
        FakeRuntime {
            inner: Mutex::new(Inner::default()),
            next_id: AtomicU64::new(1),
            hang: Mutex::new(Default::default()),
            hang_released: std::sync::Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn id(&self, prefix: &str) -> String {
        format!("{prefix}{:04}", self.next_id.fetch_add(1, Ordering::SeqCst))
    }

    /// Make an image present locally.
    pub fn add_image(&self, name: &str) {
        let info = ImageInfo {
            id: format!("sha256:{:064x}", name.len()),
            repo_tags: vec![name.to_string()],
            repo_digests: vec![],
            size: 1,
            uid: None,
            username: String::new(),
            pinned: false,
        };
        self.lock().images.insert(name.to_string(), info);
    }

    /// Inject an error for the next call of `verb` (e.g. "create_container").
    pub fn inject_error(&self, verb: &'static str, kind: ErrorKind) {
        let e = RuntimeError::new(verb, "", kind, "injected error");
        self.lock().errors.entry(verb).or_default().push(e);
    }

    /// Inject the runtime's answer for the next call of `verb`: gRPC status `code` with
    /// `message`, as containerd would send it.
    pub fn inject_status_error(&self, verb: &'static str, code: GrpcCode, message: &str) {
        let kind = match code {
            GrpcCode::NotFound => ErrorKind::NotFound,
            GrpcCode::Unavailable => ErrorKind::Unavailable,
            GrpcCode::DeadlineExceeded => ErrorKind::DeadlineExceeded,
            GrpcCode::Unimplemented => ErrorKind::Unimplemented,
            _ => ErrorKind::Other,
        };
        let e = RuntimeError::new(verb, "", kind, message).with_code(code);
        self.lock().errors.entry(verb).or_default().push(e);
    }

    /// What CRI Status answers from now on.
    pub fn set_status(&self, status: RuntimeStatus) {
        self.lock().status = Some(status);
    }

    /// CreateContainer for containers named `name` hangs (holding no runtime lock) until
    /// [`FakeRuntime::release_hangs`].
    pub fn hang_create(&self, name: &str) {
        self.hang
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .insert(name.to_string());
    }

    /// StopContainer of containers named `name` hangs (holding no runtime lock, before the
    /// container stops) until [`FakeRuntime::release_hangs`]: a preStop hook or grace period
    /// still running.
    pub fn hang_stop(&self, name: &str) {
        self.hang
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .insert(format!("stop:{name}"));
    }

    /// Hung calls return (and go on as usual); no call hangs any more.
    pub fn release_hangs(&self) {
        self.hang
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clear();
        self.hang_released.notify_all();
    }

    /// How many calls hang now.
    pub fn hanging(&self) -> usize {
        self.hang.lock().unwrap_or_else(|e| e.into_inner()).1
    }

    fn maybe_hang(&self, name: &str) {
        let mut g = self.hang.lock().unwrap_or_else(|e| e.into_inner());
        if !g.0.contains(name) {
            return;
        }
        g.1 += 1;
        while g.0.contains(name) {
            g = self
                .hang_released
                .wait(g)
                .unwrap_or_else(|e| e.into_inner());
        }
        g.1 -= 1;
    }

    /// Every container named `name` exits with `code` as soon as it starts.
    pub fn exit_on_start(&self, name: &str, code: i32) {
        self.lock().exit_on_start.insert(name.to_string(), code);
    }

    pub fn clear_exit_on_start(&self, name: &str) {
        self.lock().exit_on_start.remove(name);
    }

    /// ExecSync (exec probes and hooks) in containers named `name` exits with `code`.
    pub fn set_exec_exit(&self, name: &str, code: i32) {
        self.lock().exec_exit.insert(name.to_string(), code);
    }

    /// Exec, Attach and PortForward answer URLs under `base` (a test streaming endpoint):
    /// `{base}/exec/{container_id}`, `{base}/attach/{container_id}`,
    /// `{base}/portforward/{sandbox_id}`.
    pub fn set_stream_base(&self, base: &str) {
        self.lock().stream_base = Some(base.trim_end_matches('/').to_string());
    }

    /// The runtime handlers (and features) CRI `Status` reports.
    pub fn set_runtime_handlers(&self, handlers: Vec<super::RuntimeHandler>) {
        self.lock().handlers = handlers;
    }

    /// The config each sandbox was created with (by pod name).
    pub fn sandbox_configs(&self) -> Vec<PodSandboxConfig> {
        self.lock()
            .sandboxes
            .values()
            .map(|s| s.config.clone())
            .collect()
    }

    /// The config the container `id` was created with.
    pub fn container_config(&self, id: &str) -> Option<ContainerConfig> {
        self.lock().containers.get(id).map(|c| c.config.clone())
    }

    /// Simulate the runtime being down: every call fails with Unavailable.
    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }

    /// Simulate a running container exiting with `code`.
    pub fn exit_container(&self, id: &str, code: i32) {
        self.exit_container_quietly(id, code);
        self.publish(RuntimeEvent::TaskExit {
            id: id.to_string(),
            exit_code: code as u32,
        });
    }

    /// Deliver `ev` to every subscriber (containerd publishing an event).
    pub fn publish(&self, ev: RuntimeEvent) {
        self.lock()
            .subscribers
            .retain(|s| s.send(ev.clone()).is_ok());
    }

    /// The state change of [`FakeRuntime::exit_container`] without its event: with
    /// [`FakeRuntime::publish`] first, containerd's CRI state lagging its task exit event.
    pub fn exit_container_quietly(&self, id: &str, code: i32) {
        let mut g = self.lock();
        if let Some(c) = g.containers.get_mut(id) {
            c.state = ContainerState::Exited;
            c.exit_code = code;
            c.finished_at = now_unix_nanos();
            c.reason = if code == 0 {
                "Completed".into()
            } else {
                "Error".into()
            };
        }
    }

    /// Simulate containerd 1.6 after an interrupted StartContainer: the container reads
    /// Exited (StartError) in CRI while its task still runs, so RemoveContainer fails with
    /// "cannot delete running task" until the task is removed.
    pub fn orphan_task(&self, id: &str) {
        let mut g = self.lock();
        if let Some(c) = g.containers.get_mut(id) {
            c.state = ContainerState::Exited;
            c.exit_code = 128;
            c.finished_at = now_unix_nanos();
            c.reason = "StartError".into();
            c.orphan_task = true;
        }
    }

    /// Simulate the sandbox dying (pause container killed): like containerd, publishes the
    /// pause task's exit.
    pub fn kill_sandbox(&self, id: &str) {
        let mut g = self.lock();
        if let Some(s) = g.sandboxes.get_mut(id) {
            s.state = SandboxState::NotReady;
        }
        let ev = RuntimeEvent::TaskExit {
            id: id.to_string(),
            exit_code: 137,
        };
        g.subscribers.retain(|s| s.send(ev.clone()).is_ok());
    }

    /// All calls so far, as "verb target" strings.
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// Count calls whose string starts with `prefix`.
    pub fn count_calls(&self, prefix: &str) -> usize {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.starts_with(prefix))
            .count()
    }

    /// Ids of running containers named `name`.
    pub fn running(&self, name: &str) -> Vec<String> {
        self.lock()
            .containers
            .iter()
            .filter(|(_, c)| c.config.name == name && c.state == ContainerState::Running)
            .map(|(id, _)| id.clone())
            .collect()
    }

    pub fn container_count(&self) -> usize {
        self.lock().containers.len()
    }

    pub fn sandbox_count(&self) -> usize {
        self.lock().sandboxes.len()
    }

    fn enter(&self, verb: &'static str, target: &str) -> Result<MutexGuard<'_, Inner>> {
        let mut g = self.lock();
        g.calls.push(format!("{verb} {target}"));
        if g.down {
            return Err(RuntimeError::new(
                verb,
                target,
                ErrorKind::Unavailable,
                "runtime is down",
            ));
        }
        if let Some(q) = g.errors.get_mut(verb) {
            if !q.is_empty() {
                let mut e = q.remove(0);
                e.target = target.to_string();
                return Err(e);
            }
        }
        Ok(g)
    }
}

fn not_found(op: &'static str, id: &str) -> RuntimeError {
    RuntimeError::new(op, id, ErrorKind::NotFound, "not found")
}

impl Runtime for FakeRuntime {
    fn version(&self) -> Result<RuntimeVersion> {
        let _g = self.enter("version", "")?;
        Ok(RuntimeVersion {
            runtime_name: "fake".into(),
            runtime_version: "0".into(),
            runtime_api_version: "v1".into(),
        })
    }

    fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<String> {
        let id = self.id("sb");
        let mut g = self.enter("run_pod_sandbox", &config.name)?;
        // As containerd: a handler it has no runtime for fails the sandbox (never the default).
        let h = &config.runtime_handler;
        if !h.is_empty() && !g.handlers.iter().any(|x| &x.name == h) {
            return Err(RuntimeError::new(
                "run_pod_sandbox",
                &config.name,
                ErrorKind::Other,
                format!("failed to get sandbox runtime: no runtime for \"{h}\" is configured"),
            )
            .with_code(GrpcCode::Unknown));
        }
        let ip = if config.host_network {
            String::new()
        } else {
            format!("10.0.0.{}", g.sandboxes.len() + 2)
        };
        g.sandboxes.insert(
            id.clone(),
            FakeSandbox {
                config: config.clone(),
                state: SandboxState::Ready,
                created_at: now_unix_nanos(),
                ip,
            },
        );
        let ev = RuntimeEvent::TaskStart { id: id.clone() };
        g.subscribers.retain(|s| s.send(ev.clone()).is_ok());
        Ok(id)
    }

    fn stop_pod_sandbox(&self, sandbox_id: &str) -> Result<()> {
        let mut g = self.enter("stop_pod_sandbox", sandbox_id)?;
        let now = now_unix_nanos();
        let mut events = vec![];
        if let Some(s) = g.sandboxes.get_mut(sandbox_id) {
            if s.state == SandboxState::Ready {
                events.push(RuntimeEvent::TaskExit {
                    id: sandbox_id.to_string(),
                    exit_code: 137,
                });
            }
            s.state = SandboxState::NotReady;
        }
        for (id, c) in g
            .containers
            .iter_mut()
            .filter(|(_, c)| c.sandbox_id == sandbox_id)
        {
            if c.state == ContainerState::Running {
                c.state = ContainerState::Exited;
                c.exit_code = 137;
                c.finished_at = now;
                c.reason = "Error".into();
                events.push(RuntimeEvent::TaskExit {
                    id: id.clone(),
                    exit_code: 137,
                });
            }
        }
        for ev in events {
            g.subscribers.retain(|s| s.send(ev.clone()).is_ok());
        }
        Ok(())
    }

    fn remove_pod_sandbox(&self, sandbox_id: &str) -> Result<()> {
        let mut g = self.enter("remove_pod_sandbox", sandbox_id)?;
        g.sandboxes.remove(sandbox_id);
        g.containers.retain(|_, c| c.sandbox_id != sandbox_id);
        Ok(())
    }

    fn pod_sandbox_status(&self, sandbox_id: &str) -> Result<SandboxStatus> {
        let g = self.enter("pod_sandbox_status", sandbox_id)?;
        let s = g
            .sandboxes
            .get(sandbox_id)
            .ok_or_else(|| not_found("pod_sandbox_status", sandbox_id))?;
        Ok(SandboxStatus {
            info: sandbox_info(sandbox_id, s),
            ip: s.ip.clone(),
            additional_ips: vec![],
        })
    }

    fn list_pod_sandboxes(&self) -> Result<Vec<SandboxInfo>> {
        let g = self.enter("list_pod_sandboxes", "")?;
        Ok(g.sandboxes
            .iter()
            .map(|(id, s)| sandbox_info(id, s))
            .collect())
    }

    fn create_container(
        &self,
        sandbox_id: &str,
        config: &ContainerConfig,
        _sandbox_config: &PodSandboxConfig,
    ) -> Result<String> {
        self.maybe_hang(&config.name);
        let id = self.id("ctr");
        let mut g = self.enter("create_container", &config.name)?;
        if !g.sandboxes.contains_key(sandbox_id) {
            return Err(not_found("create_container", sandbox_id));
        }
        if !g.images.contains_key(&config.image) {
            return Err(RuntimeError::new(
                "create_container",
                &config.name,
                ErrorKind::Other,
                "image not found",
            ));
        }
        g.containers.insert(
            id.clone(),
            FakeContainer {
                sandbox_id: sandbox_id.to_string(),
                config: config.clone(),
                state: ContainerState::Created,
                created_at: now_unix_nanos(),
                started_at: 0,
                finished_at: 0,
                exit_code: 0,
                reason: String::new(),
                orphan_task: false,
            },
        );
        Ok(id)
    }

    fn start_container(&self, container_id: &str) -> Result<()> {
        let mut g = self.enter("start_container", container_id)?;
        let now = now_unix_nanos();
        let exit = {
            let c = g
                .containers
                .get(container_id)
                .ok_or_else(|| not_found("start_container", container_id))?;
            g.exit_on_start.get(&c.config.name).copied()
        };
        if let Some(c) = g.containers.get_mut(container_id) {
            c.started_at = now;
            match exit {
                Some(code) => {
                    c.state = ContainerState::Exited;
                    c.exit_code = code;
                    c.finished_at = now;
                    c.reason = if code == 0 {
                        "Completed".into()
                    } else {
                        "Error".into()
                    };
                }
                None => c.state = ContainerState::Running,
            }
        }
        // As containerd: the task's start, and its exit when it died at once.
        let mut events = vec![RuntimeEvent::TaskStart {
            id: container_id.to_string(),
        }];
        if let Some(code) = exit {
            events.push(RuntimeEvent::TaskExit {
                id: container_id.to_string(),
                exit_code: code as u32,
            });
        }
        for ev in events {
            g.subscribers.retain(|s| s.send(ev.clone()).is_ok());
        }
        Ok(())
    }

    fn stop_container(&self, container_id: &str, _timeout: Duration) -> Result<()> {
        let name = self
            .lock()
            .containers
            .get(container_id)
            .map(|c| format!("stop:{}", c.config.name));
        if let Some(name) = name {
            self.maybe_hang(&name);
        }
        let mut g = self.enter("stop_container", container_id)?;
        let now = now_unix_nanos();
        let c = g
            .containers
            .get_mut(container_id)
            .ok_or_else(|| not_found("stop_container", container_id))?;
        if c.state == ContainerState::Running {
            c.state = ContainerState::Exited;
            c.exit_code = 143;
            c.finished_at = now;
            c.reason = "Error".into();
            let ev = RuntimeEvent::TaskExit {
                id: container_id.to_string(),
                exit_code: 143,
            };
            g.subscribers.retain(|s| s.send(ev.clone()).is_ok());
        }
        Ok(())
    }

    fn remove_container(&self, container_id: &str) -> Result<()> {
        let mut g = self.enter("remove_container", container_id)?;
        if g.containers
            .get(container_id)
            .is_some_and(|c| c.orphan_task)
        {
            return Err(RuntimeError::new(
                "remove_container",
                container_id,
                ErrorKind::Other,
                format!("cannot delete running task {container_id}: failed precondition"),
            ));
        }
        g.containers.remove(container_id);
        Ok(())
    }

    fn remove_orphan_task(&self, container_id: &str) -> Result<bool> {
        let mut g = self.enter("remove_orphan_task", container_id)?;
        Ok(g.containers
            .get_mut(container_id)
            .is_some_and(|c| std::mem::replace(&mut c.orphan_task, false)))
    }

    fn list_containers(&self) -> Result<Vec<ContainerInfo>> {
        let g = self.enter("list_containers", "")?;
        Ok(g.containers
            .iter()
            .map(|(id, c)| ContainerInfo {
                id: id.clone(),
                sandbox_id: c.sandbox_id.clone(),
                name: c.config.name.clone(),
                attempt: c.config.attempt,
                image: c.config.image.clone(),
                image_ref: g
                    .images
                    .get(&c.config.image)
                    .map(|i| i.id.clone())
                    .unwrap_or_default(),
                state: c.state,
                created_at: c.created_at,
                labels: c.config.labels.clone(),
                annotations: c.config.annotations.clone(),
            })
            .collect())
    }

    fn container_status(&self, container_id: &str) -> Result<ContainerStatus> {
        let g = self.enter("container_status", container_id)?;
        let c = g
            .containers
            .get(container_id)
            .ok_or_else(|| not_found("container_status", container_id))?;
        let log_dir = g
            .sandboxes
            .get(&c.sandbox_id)
            .map(|s| s.config.log_directory.clone())
            .unwrap_or_default();
        Ok(ContainerStatus {
            id: container_id.to_string(),
            name: c.config.name.clone(),
            attempt: c.config.attempt,
            state: c.state,
            created_at: c.created_at,
            started_at: c.started_at,
            finished_at: c.finished_at,
            exit_code: c.exit_code,
            image: c.config.image.clone(),
            image_ref: g
                .images
                .get(&c.config.image)
                .map(|i| i.id.clone())
                .unwrap_or_default(),
            reason: c.reason.clone(),
            message: String::new(),
            labels: c.config.labels.clone(),
            annotations: c.config.annotations.clone(),
            log_path: format!("{log_dir}/{}", c.config.log_path),
        })
    }

    fn status(&self, _verbose: bool) -> Result<RuntimeStatus> {
        let g = self.enter("status", "")?;
        let ok = |t: &str| RuntimeCondition {
            type_: t.into(),
            status: true,
            reason: String::new(),
            message: String::new(),
        };
        let mut st = g.status.clone().unwrap_or_else(|| RuntimeStatus {
            conditions: vec![ok(RUNTIME_READY), ok(NETWORK_READY)],
            sandbox_image: None,
            handlers: Vec::new(),
        });
        if st.handlers.is_empty() {
            st.handlers = g.handlers.clone();
        }
        Ok(st)
    }

    fn image_status(&self, image: &str) -> Result<Option<ImageInfo>> {
        let g = self.enter("image_status", image)?;
        Ok(g.images.get(image).cloned())
    }

    fn pull_image(&self, image: &str) -> Result<String> {
        let g = self.enter("pull_image", image)?;
        match g.images.get(image) {
            Some(i) => Ok(i.id.clone()),
            None => Err(RuntimeError::new(
                "pull_image",
                image,
                ErrorKind::Other,
                "no registry reachable",
            )),
        }
    }

    fn list_images(&self) -> Result<Vec<ImageInfo>> {
        let g = self.enter("list_images", "")?;
        let mut seen = std::collections::BTreeSet::new();
        Ok(g.images
            .values()
            .filter(|i| seen.insert(i.id.clone()))
            .cloned()
            .collect())
    }

    fn remove_image(&self, image: &str) -> Result<()> {
        let mut g = self.enter("remove_image", image)?;
        g.images.retain(|name, i| name != image && i.id != image);
        Ok(())
    }

    fn image_fs_info(&self) -> Result<Vec<FsUsage>> {
        let g = self.enter("image_fs_info", "")?;
        let used = g.images.values().map(|i| i.size).sum();
        Ok(vec![FsUsage {
            mountpoint: "/fake/imagefs".into(),
            used_bytes: Some(used),
            inodes_used: Some(g.images.len() as u64),
        }])
    }

    fn exec_sync(
        &self,
        container_id: &str,
        _cmd: &[String],
        _timeout: Duration,
    ) -> Result<ExecResult> {
        let g = self.enter("exec_sync", container_id)?;
        match g.containers.get(container_id) {
            Some(c) if c.state == ContainerState::Running => Ok(ExecResult {
                exit_code: g.exec_exit.get(&c.config.name).copied().unwrap_or(0),
                stdout: vec![],
                stderr: vec![],
            }),
            _ => Err(not_found("exec_sync", container_id)),
        }
    }

    fn exec(&self, req: &crate::cri::ExecRequest) -> Result<String> {
        let g = self.enter("exec", &req.container_id)?;
        fake_stream_url(&g, "exec", &req.container_id)
    }

    fn attach(&self, req: &crate::cri::AttachRequest) -> Result<String> {
        let g = self.enter("attach", &req.container_id)?;
        fake_stream_url(&g, "attach", &req.container_id)
    }

    fn port_forward(&self, sandbox_id: &str, _ports: &[u16]) -> Result<String> {
        let g = self.enter("port_forward", sandbox_id)?;
        match g.sandboxes.get(sandbox_id) {
            Some(s) if s.state == SandboxState::Ready => {}
            _ => return Err(not_found("port_forward", sandbox_id)),
        }
        match &g.stream_base {
            Some(b) => Ok(format!("{b}/portforward/{sandbox_id}")),
            None => Err(RuntimeError::new(
                "port_forward",
                sandbox_id,
                ErrorKind::Other,
                "this runtime has no streaming server",
            )),
        }
    }

    fn update_runtime_config(&self, pod_cidr: &str) -> Result<()> {
        let _g = self.enter("update_runtime_config", pod_cidr)?;
        Ok(())
    }

    fn reopen_container_log(&self, container_id: &str) -> Result<()> {
        let g = self.enter("reopen_container_log", container_id)?;
        if g.containers.contains_key(container_id) {
            Ok(())
        } else {
            Err(not_found("reopen_container_log", container_id))
        }
    }

    fn subscribe_events(&self) -> Result<mpsc::Receiver<RuntimeEvent>> {
        let mut g = self.enter("subscribe_events", "")?;
        let (tx, rx) = mpsc::channel();
        g.subscribers.push(tx);
        Ok(rx)
    }
}

/// Exec/Attach in the fake: a running container and a configured streaming base.
fn fake_stream_url(g: &Inner, verb: &'static str, container_id: &str) -> Result<String> {
    match g.containers.get(container_id) {
        Some(c) if c.state == ContainerState::Running => {}
        _ => return Err(not_found(verb, container_id)),
    }
    match &g.stream_base {
        Some(b) => Ok(format!("{b}/{verb}/{container_id}")),
        None => Err(RuntimeError::new(
            verb,
            container_id,
            ErrorKind::Other,
            "this runtime has no streaming server",
        )),
    }
}

fn sandbox_info(id: &str, s: &FakeSandbox) -> SandboxInfo {
    SandboxInfo {
        id: id.to_string(),
        name: s.config.name.clone(),
        namespace: s.config.namespace.clone(),
        uid: s.config.uid.clone(),
        attempt: s.config.attempt,
        state: s.state,
        created_at: s.created_at,
        labels: s.config.labels.clone(),
        annotations: s.config.annotations.clone(),
    }
}
