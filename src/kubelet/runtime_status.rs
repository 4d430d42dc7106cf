//! Whether the container runtime's configuration can run pods (the kubelet's `updateRuntimeUp`
//! and its `runtimeState`): CRI `Status` (its `RuntimeReady` and `NetworkReady` conditions, the
//! sandbox image of its configuration), the sandbox image's presence (`ImageStatus`, one
//! `PullImage` when absent), and whether the runtime serves CRI at all. A `runtime-status`
//! thread checks at start and every [`PERIOD`]; each problem is logged once, in one line that
//! says what is wrong and what to do, and published in the status store: `/healthz?verbose`
//! lists them, and those the kubelet counts (runtime and network not ready, no CRI) make the
//! node NotReady.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use tracing::{error, info, warn};

use crate::cri::{ErrorKind, NETWORK_READY, RUNTIME_READY, Runtime, RuntimeCondition};
use crate::images::dir::FirstPass;
use crate::status::{RuntimeProblem, StatusStore};

/// How often the runtime is checked (the kubelet: every 5 s; nanolet's own relist health
/// covers a runtime that is down).
pub const PERIOD: Duration = Duration::from_secs(10);

/// What keeps the runtime from running pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The runtime answers but not CRI (gRPC Unimplemented): containerd's CRI plugin is
    /// disabled (`disabled_plugins = ["cri"]`, as Docker's containerd package ships it).
    CriDisabled { endpoint: String, message: String },
    /// `RuntimeReady` is false or missing.
    RuntimeNotReady(Option<RuntimeCondition>),
    /// `NetworkReady` is false or missing: pods without hostNetwork cannot start.
    NetworkNotReady(Option<RuntimeCondition>),
    /// The sandbox ("pause") image is not present and could not be pulled: no pod can start.
    SandboxImage { image: String, error: String },
}

/// A condition as the kubelet prints it, `<nil>` when the runtime does not report it.
fn condition_text(c: &Option<RuntimeCondition>) -> String {
    c.as_ref()
        .map_or_else(|| "<nil>".to_string(), ToString::to_string)
}

impl Problem {
    /// The kubelet's own text where it has one (kubelet.go updateRuntimeUp: "container runtime
    /// not ready: <condition>", "container runtime network not ready: <condition>").
    pub fn message(&self) -> String {
        match self {
            Problem::CriDisabled { message, .. } => {
                format!("container runtime does not serve CRI: {message}")
            }
            Problem::RuntimeNotReady(c) => {
                format!("container runtime not ready: {}", condition_text(c))
            }
            Problem::NetworkNotReady(c) => {
                format!("container runtime network not ready: {}", condition_text(c))
            }
            Problem::SandboxImage { image, error } => {
                format!("sandbox image {image} is not present and cannot be pulled: {error}")
            }
        }
    }

    /// Whether the kubelet marks the node NotReady for it (its runtimeState errors). A missing
    /// sandbox image is not one of them: the kubelet's node stays Ready and its pods fail
    /// with FailedCreatePodSandBox.
    pub fn node_not_ready(&self) -> bool {
        !matches!(self, Problem::SandboxImage { .. })
    }

    /// The one log line: what is wrong and what to do. `images_dir`: where image archives are
    /// imported from (`None`: disabled).
    pub fn advice(&self, images_dir: Option<&std::path::Path>) -> String {
        match self {
            Problem::CriDisabled { endpoint, message } => format!(
                "container runtime at {endpoint} does not serve CRI ({message}): its CRI plugin \
                 is disabled; remove \"cri\" from disabled_plugins in containerd's config.toml \
                 (/etc/containerd/config.toml) and restart containerd"
            ),
            Problem::RuntimeNotReady(c) => format!(
                "container runtime not ready ({}): no pod can start until it is; see the \
                 runtime's log (journalctl -u containerd)",
                condition_text(c)
            ),
            Problem::NetworkNotReady(c) => format!(
                "container runtime network not ready ({}): pods without hostNetwork cannot \
                 start; give containerd's CRI plugin a CNI network configuration (its cni \
                 conf_dir, /etc/cni/net.d by default) and the CNI plugins (bin_dir)",
                condition_text(c)
            ),
            Problem::SandboxImage { image, .. } => {
                let dir = images_dir.map_or_else(String::new, |d| {
                    format!(
                        " or put its archive in the images directory {}",
                        d.display()
                    )
                });
                format!(
                    "sandbox image {image} is not present and cannot be pulled: no pod can \
                     start; import it with `nanolet images import <archive>`{dir} \
                     (docs/images.md: the pause image on an air-gapped device)"
                )
            }
        }
    }
}

/// The runtime status check's state between checks.
pub struct Checker {
    runtime: Arc<dyn Runtime>,
    /// `--container-runtime-endpoint`, for the advice.
    endpoint: String,
    /// The runtime's sandbox image, once its verbose Status named it.
    sandbox_image: Option<String>,
    /// The pull error of the sandbox image while it stays absent (one pull per absence).
    pull_error: Option<String>,
    /// The images directory's first pass: the sandbox image is judged only after it (its
    /// archive may be there). `None`: no images directory.
    first_pass: Option<FirstPass>,
    /// Whether the default handler supports user namespaces, from the last Status answered.
    pub user_namespaces: Option<bool>,
}

impl Checker {
    pub fn new(runtime: Arc<dyn Runtime>, endpoint: &str, first_pass: Option<FirstPass>) -> Self {
        Checker {
            runtime,
            endpoint: endpoint.to_string(),
            sandbox_image: None,
            pull_error: None,
            first_pass,
            user_namespaces: None,
        }
    }

    /// One check. `None` when the runtime did not answer (its relist health check reports
    /// that); else what keeps it from running pods.
    pub fn check(&mut self) -> Option<Vec<Problem>> {
        let status = match self.runtime.status(self.sandbox_image.is_none()) {
            Ok(s) => s,
            Err(e) if e.kind == ErrorKind::Unimplemented => {
                return Some(vec![Problem::CriDisabled {
                    endpoint: self.endpoint.clone(),
                    message: e.message,
                }]);
            }
            Err(_) => return None,
        };
        if self.sandbox_image.is_none() {
            self.sandbox_image = status.sandbox_image.clone();
        }
        self.user_namespaces = Some(status.supports_user_namespaces());
        let mut problems = vec![];
        match status.condition(RUNTIME_READY) {
            Some(c) if c.status => {}
            c => problems.push(Problem::RuntimeNotReady(c.cloned())),
        }
        match status.condition(NETWORK_READY) {
            Some(c) if c.status => {}
            c => problems.push(Problem::NetworkNotReady(c.cloned())),
        }
        if let Some(p) = self.check_sandbox_image() {
            problems.push(p);
        }
        Some(problems)
    }

    /// The sandbox image is present, or pulled now; one pull per absence (the pods' sandbox
    /// creations try again anyway).
    fn check_sandbox_image(&mut self) -> Option<Problem> {
        if self.first_pass.as_ref().is_some_and(|f| !f.is_done()) {
            return None;
        }
        let image = self.sandbox_image.clone()?;
        match self.runtime.image_status(&image) {
            Ok(Some(_)) => {
                self.pull_error = None;
                None
            }
            Ok(None) => {
                if self.pull_error.is_none() {
                    match self.runtime.pull_image(&image) {
                        Ok(_) => {
                            info!(image = %image, "pulled the runtime's sandbox image");
                            return None;
                        }
                        Err(e) => self.pull_error = Some(e.grpc_text()),
                    }
                }
                Some(Problem::SandboxImage {
                    image,
                    error: self.pull_error.clone().unwrap_or_default(),
                })
            }
            Err(_) => None,
        }
    }
}

/// Logs what changed between `old` and `new` (each problem once when it appears, once when it
/// is gone) and publishes `new` in the store.
pub fn report(
    store: &StatusStore,
    old: &[Problem],
    new: &[Problem],
    images_dir: Option<&std::path::Path>,
) {
    for p in new.iter().filter(|p| !old.contains(p)) {
        match p {
            Problem::NetworkNotReady(_) => warn!("{}", p.advice(images_dir)),
            // Why the pull failed (no such host, connection refused, ...) beside the advice.
            Problem::SandboxImage { error, .. } => {
                error!(error = %error, "{}", p.advice(images_dir))
            }
            _ => error!("{}", p.advice(images_dir)),
        }
    }
    for p in old.iter().filter(|p| !new.contains(p)) {
        info!(was = %p.message(), "container runtime problem resolved");
    }
    store.set_runtime_problems(
        new.iter()
            .map(|p| RuntimeProblem {
                message: p.message(),
                node_not_ready: p.node_not_ready(),
            })
            .collect(),
    );
}

/// The `runtime-status` thread: checks at start (then every second while the images
/// directory's first pass runs) and every [`PERIOD`] until `stop`.
pub fn run(
    mut checker: Checker,
    store: Arc<StatusStore>,
    images_dir: Option<PathBuf>,
    stop: Receiver<()>,
) {
    let mut last: Vec<Problem> = vec![];
    loop {
        let checked = checker.check();
        if let Some(supported) = checker.user_namespaces {
            store.set_runtime_user_namespaces(supported);
        }
        if let Some(problems) = checked {
            // A problem can only be judged fully once the runtime answered (a sandbox image
            // also after the images directory's first pass).
            report(&store, &last, &problems, images_dir.as_deref());
            last = problems;
        }
        let pending = checker.first_pass.as_ref().is_some_and(|f| !f.is_done());
        let wait = if pending {
            Duration::from_secs(1)
        } else {
            PERIOD
        };
        match stop.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::RuntimeStatus;
    use crate::cri::fake::FakeRuntime;

    const PAUSE: &str = "registry.k8s.io/pause:3.8";

    fn cond(type_: &str, status: bool, reason: &str, message: &str) -> RuntimeCondition {
        RuntimeCondition {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn ready_with_pause(rt: &FakeRuntime) {
        rt.set_status(RuntimeStatus {
            conditions: vec![
                cond(RUNTIME_READY, true, "", ""),
                cond(NETWORK_READY, true, "", ""),
            ],
            sandbox_image: Some(PAUSE.into()),
            handlers: Vec::new(),
        });
    }

    fn checker(rt: &Arc<FakeRuntime>, first_pass: Option<FirstPass>) -> Checker {
        Checker::new(
            rt.clone(),
            "unix:///run/containerd/containerd.sock",
            first_pass,
        )
    }

    /// The node's Ready condition (status, message) with the sync loop and relist healthy.
    fn node_ready(store: &StatusStore) -> (String, String) {
        let node = crate::nodestatus::setters::node_object(
            &crate::nodestatus::setters::NodeContext::new("node1"),
            store,
        );
        let ready = node["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
            .cloned()
            .unwrap_or_default();
        (
            ready["status"].as_str().unwrap_or_default().to_string(),
            ready["message"].as_str().unwrap_or_default().to_string(),
        )
    }

    /// A runtime whose sandbox image is absent and cannot be pulled runs no pod: the check
    /// names the image and the pull error, pulls once per absence (each pod's RunPodSandbox
    /// tries again anyway), and the problem is gone once the image is there. The kubelet
    /// keeps the node Ready for it (no runtimeState error), so does nanolet.
    #[test]
    fn sandbox_image_absent_and_not_pullable_is_named_with_what_to_do() {
        let rt = Arc::new(FakeRuntime::new());
        ready_with_pause(&rt);
        let pass = FirstPass::default();
        let mut c = checker(&rt, Some(pass.clone()));
        assert_eq!(
            c.check(),
            Some(vec![]),
            "not judged before the images directory's first pass (its archive may be there)"
        );
        assert_eq!(rt.count_calls("pull_image"), 0);
        pass.done();
        let problems = c.check().expect("answered");
        let [Problem::SandboxImage { image, error }] = problems.as_slice() else {
            panic!("{problems:?}");
        };
        assert_eq!(image, PAUSE);
        assert!(error.contains("no registry reachable"), "{error}");
        let advice = problems[0].advice(Some(std::path::Path::new("/var/lib/nanolet/images")));
        assert!(
            advice.starts_with(&format!(
                "sandbox image {PAUSE} is not present and cannot be pulled"
            )) && advice.contains("nanolet images import")
                && advice.contains("images directory /var/lib/nanolet/images"),
            "{advice}"
        );
        assert_eq!(c.check(), Some(problems.clone()));
        assert_eq!(rt.count_calls("pull_image"), 1, "one pull per absence");

        let store = StatusStore::new(Duration::from_secs(300));
        store.mark_sync();
        store.mark_relist();
        report(&store, &[], &problems, None);
        assert_eq!(store.runtime_problems().len(), 1);
        assert_eq!(node_ready(&store).0, "True");

        rt.add_image(PAUSE);
        assert_eq!(c.check(), Some(vec![]));
        report(&store, &problems, &[], None);
        assert!(store.runtime_problems().is_empty());
    }

    /// kubelet.go updateRuntimeUp: RuntimeReady or NetworkReady false (or missing) are the
    /// runtimeState errors "container runtime not ready: <cond>" and "container runtime
    /// network not ready: <cond>" (kubecontainer RuntimeCondition.String), and the node's
    /// Ready condition turns False with them.
    #[test]
    fn runtime_or_network_not_ready_makes_the_node_not_ready_with_the_kubelets_text() {
        let rt = Arc::new(FakeRuntime::new());
        rt.set_status(RuntimeStatus {
            conditions: vec![
                cond(RUNTIME_READY, true, "", ""),
                cond(
                    NETWORK_READY,
                    false,
                    "NetworkPluginNotReady",
                    "Network plugin returns error: cni plugin not initialized",
                ),
            ],
            sandbox_image: None,
            handlers: Vec::new(),
        });
        let mut c = checker(&rt, None);
        let problems = c.check().expect("answered");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(
            problems[0].message(),
            "container runtime network not ready: NetworkReady=false \
             reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not \
             initialized"
        );
        assert!(problems[0].advice(None).contains("hostNetwork"));

        let store = StatusStore::new(Duration::from_secs(300));
        store.mark_sync();
        store.mark_relist();
        assert_eq!(node_ready(&store).0, "True");
        report(&store, &[], &problems, None);
        let (status, message) = node_ready(&store);
        assert_eq!(status, "False");
        assert!(message.contains(&problems[0].message()), "{message}");
        assert!(
            store.health().iter().all(|h| h.ok),
            "healthz stays ok, as the kubelet's"
        );

        // No conditions at all: both missing, printed as Go prints a nil condition.
        rt.set_status(RuntimeStatus::default());
        let problems = c.check().expect("answered");
        let texts: Vec<String> = problems.iter().map(Problem::message).collect();
        assert_eq!(
            texts,
            vec![
                "container runtime not ready: <nil>",
                "container runtime network not ready: <nil>"
            ]
        );
    }

    /// containerd with its CRI plugin disabled answers every CRI call with Unimplemented
    /// ("unknown service runtime.v1.RuntimeService"): the check says so and what to change.
    /// A runtime that does not answer at all is no configuration problem (the relist's health
    /// check reports it).
    /// The kubelet's HandlerSupportsUserNamespaces reads the runtime's latest handlers: each
    /// check records whether the default handler ("") supports user namespaces, which
    /// admission then reads from the store instead of asking the runtime on the sync loop.
    #[test]
    fn each_check_records_whether_the_default_handler_supports_user_namespaces() {
        let rt = Arc::new(FakeRuntime::new());
        let mut c = checker(&rt, None);
        c.check().expect("answered");
        assert_eq!(c.user_namespaces, Some(false), "no handlers reported (containerd 1.6)");
        rt.set_runtime_handlers(vec![crate::cri::RuntimeHandler {
            name: String::new(),
            user_namespaces: true,
            recursive_read_only_mounts: false,
        }]);
        c.check().expect("answered");
        assert_eq!(c.user_namespaces, Some(true));
        rt.set_runtime_handlers(vec![crate::cri::RuntimeHandler {
            name: "kata".into(),
            user_namespaces: true,
            recursive_read_only_mounts: false,
        }]);
        c.check().expect("answered");
        assert_eq!(c.user_namespaces, Some(false), "only the default handler counts");
    }

    #[test]
    fn cri_plugin_disabled_is_named_with_what_to_do() {
        let rt = Arc::new(FakeRuntime::new());
        rt.inject_status_error(
            "status",
            crate::cri::GrpcCode::Unimplemented,
            "unknown service runtime.v1.RuntimeService",
        );
        let mut c = checker(&rt, None);
        let problems = c.check().expect("answered");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].node_not_ready());
        let advice = problems[0].advice(None);
        assert!(
            advice.contains("unix:///run/containerd/containerd.sock does not serve CRI")
                && advice.contains("unknown service runtime.v1.RuntimeService")
                && advice.contains("disabled_plugins"),
            "{advice}"
        );
        rt.set_down(true);
        assert_eq!(c.check(), None);
    }
}
