//! Graceful node shutdown, the kubelet's `pkg/kubelet/nodeshutdown` on Linux: while nanolet
//! runs it holds a logind `delay` inhibitor lock on shutdown; when logind announces a
//! shutdown (`PrepareForShutdown(true)`) the manager stops admitting pods, marks the node not
//! ready, terminates the pods one priority group after another (lowest first; preStop hooks
//! run; each pod's grace period capped at its group's), writes their status (Failed,
//! `Terminated`, "Pod was terminated in response to imminent node shutdown.") and then
//! releases the lock, so the shutdown goes on. A cancelled shutdown (`PrepareForShutdown(false)`)
//! takes the lock again.
//!
//! Settings: `shutdownGracePeriod` and `shutdownGracePeriodCriticalPods` (two groups: all pods,
//! then critical ones), or `shutdownGracePeriodByPodPriority` (a group per priority). The total
//! must fit logind's `InhibitDelayMaxUSec`; when it does not, the manager writes a logind.conf
//! drop-in raising `InhibitDelayMaxSec` and has systemd reload logind, as the kubelet does.
//!
//! Parts: [`dbus`] (a minimal D-Bus client), [`systemd`] (logind and systemd calls). The pods
//! are reached through [`PodTerminator`], which `kubelet::wiring` implements over the sync
//! loop.

pub mod dbus;
pub mod systemd;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use crate::api::Pod;
use crate::api::helpers::priority;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};

/// The status reason of a pod terminated for a node shutdown (the kubelet's
/// `nodeShutdownReason`).
pub const REASON: &str = "Terminated";
/// Its message (`nodeShutdownMessage`).
pub const MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";
/// Admission's reason while the node shuts down (`nodeShutdownNotAdmittedReason`).
pub const NOT_ADMITTED_REASON: &str = "NodeShutdown";
/// Its message (`nodeShutdownNotAdmittedMessage`).
pub const NOT_ADMITTED_MESSAGE: &str = "Pod was rejected as the node is shutting down.";
/// The Node event's reason when a shutdown is announced or cancelled (`events.NodeShutdown`).
pub const EVENT_REASON: &str = "NodeShutdown";
/// Its message on a shutdown.
pub const DETECTED_MESSAGE: &str = "Shutdown manager detected shutdown event";
/// Its message on a cancellation.
pub const CANCELLED_MESSAGE: &str = "Shutdown manager detected shutdown cancellation";
/// What the Ready condition says meanwhile (the kubelet's `ShutdownStatus` error).
pub const NOT_READY_MESSAGE: &str = "node is shutting down";
/// The kubelet's `scheduling.SystemCriticalPriority`.
const SYSTEM_CRITICAL_PRIORITY: i64 = 2_000_000_000;
/// How long after losing the bus the manager tries again (the kubelet's
/// `dbusReconnectPeriod` is 1 s; nanolet backs off to this while logind stays away).
const MAX_RECONNECT: Duration = Duration::from_secs(60);

/// One `shutdownGracePeriodByPodPriority` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GracePeriodByPriority {
    pub priority: i64,
    pub shutdown_grace_period_seconds: i64,
}

/// The node shutdown settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShutdownConfig {
    /// `shutdownGracePeriod`: zero turns graceful shutdown off (the kubelet's default).
    pub grace_period: Duration,
    /// `shutdownGracePeriodCriticalPods`: the part of it reserved for critical pods.
    pub grace_period_critical_pods: Duration,
    /// `shutdownGracePeriodByPodPriority`: replaces the two above when not empty.
    pub by_pod_priority: Vec<GracePeriodByPriority>,
    /// Where the logind drop-in goes (`/etc/systemd/logind.conf.d`).
    pub logind_conf_dir: PathBuf,
}

impl ShutdownConfig {
    /// The priority groups, lowest priority first (the kubelet's `migrateConfig` when only
    /// the two periods are set); empty when graceful shutdown is off.
    pub fn groups(&self) -> Vec<GracePeriodByPriority> {
        let mut groups = if self.by_pod_priority.is_empty() {
            migrate_config(self.grace_period, self.grace_period_critical_pods)
        } else {
            self.by_pod_priority.clone()
        };
        groups.sort_by_key(|g| g.priority);
        groups
    }

    /// The validation errors of these settings (the kubelet's config validation).
    pub fn validate(&self) -> Result<(), String> {
        if self.grace_period_critical_pods > self.grace_period {
            return Err(format!(
                "shutdownGracePeriodCriticalPods ({:?}) must be <= shutdownGracePeriod ({:?})",
                self.grace_period_critical_pods, self.grace_period
            ));
        }
        if !self.by_pod_priority.is_empty() && !self.grace_period.is_zero() {
            return Err(
                "shutdownGracePeriodByPodPriority and shutdownGracePeriod cannot both be set"
                    .into(),
            );
        }
        if let Some(g) = self
            .by_pod_priority
            .iter()
            .find(|g| g.shutdown_grace_period_seconds < 0)
        {
            return Err(format!(
                "shutdownGracePeriodByPodPriority: priority {}: shutdownGracePeriodSeconds must not be negative",
                g.priority
            ));
        }
        Ok(())
    }
}

/// Two groups from the two periods: every pod (priority 0 and up) gets `grace - critical`,
/// critical pods (`SystemCriticalPriority` and up) get `critical`.
pub fn migrate_config(grace: Duration, critical: Duration) -> Vec<GracePeriodByPriority> {
    if grace.is_zero() || critical > grace {
        return Vec::new();
    }
    vec![
        GracePeriodByPriority {
            priority: 0,
            shutdown_grace_period_seconds: (grace - critical).as_secs() as i64,
        },
        GracePeriodByPriority {
            priority: SYSTEM_CRITICAL_PRIORITY,
            shutdown_grace_period_seconds: critical.as_secs() as i64,
        },
    ]
}

/// The total time the groups need: what logind's `InhibitDelayMaxUSec` must allow.
pub fn period_requested(groups: &[GracePeriodByPriority]) -> Duration {
    Duration::from_secs(
        groups
            .iter()
            .map(|g| g.shutdown_grace_period_seconds.max(0) as u64)
            .sum(),
    )
}

/// Each pod goes to the group with the highest priority at or below its own (pods below the
/// lowest group go to the lowest); `groups` sorted lowest first, as the kubelet's
/// `groupByPriority`.
pub fn group_by_priority<'a>(
    groups: &[GracePeriodByPriority],
    pods: &'a [Arc<Pod>],
) -> Vec<(GracePeriodByPriority, Vec<&'a Arc<Pod>>)> {
    let mut out: Vec<_> = groups.iter().map(|g| (*g, Vec::new())).collect();
    if out.is_empty() {
        return out;
    }
    for pod in pods {
        let p = priority(pod);
        let index = out.iter().rposition(|(g, _)| g.priority <= p).unwrap_or(0);
        out[index].1.push(pod);
    }
    out
}

/// The grace period of a pod in `group`: the group's, or the pod's own when shorter.
pub fn grace_for(pod: &Pod, group: &GracePeriodByPriority) -> i64 {
    match pod.spec.termination_grace_period_seconds {
        Some(own) if own <= group.shutdown_grace_period_seconds => own,
        _ => group.shutdown_grace_period_seconds,
    }
}

/// What the manager needs of the rest of nanolet.
pub trait PodTerminator: Send + Sync {
    /// The pods that are running or about to (not terminal).
    fn active_pods(&self) -> Vec<Arc<Pod>>;
    /// The node is (or no longer is) shutting down: admission refuses pods meanwhile, the
    /// Ready condition is False.
    fn set_shutting_down(&self, shutting_down: bool);
    /// Terminate the pod with this grace period, its status Failed with [`REASON`] and
    /// [`MESSAGE`].
    fn terminate(&self, pod: &Pod, grace_seconds: i64);
    /// The UIDs of the pods with a container still running.
    fn running(&self) -> std::collections::HashSet<String>;
}

/// Terminates the active pods group by group, lowest priority first; waits for each group at
/// most its grace period (the kubelet moves on after it too). Returns when all groups are
/// done.
pub fn kill_pods_by_priority(
    terminator: &dyn PodTerminator,
    groups: &[GracePeriodByPriority],
    poll: Duration,
) {
    let pods = terminator.active_pods();
    for (group, members) in group_by_priority(groups, &pods) {
        if members.is_empty() {
            continue;
        }
        let started = Instant::now();
        for pod in &members {
            let grace = grace_for(pod, &group);
            info!(pod = %format!("{}/{}", pod.metadata.namespace, pod.metadata.name), grace_seconds = grace, priority = group.priority, "node shutdown: terminating pod");
            terminator.terminate(pod, grace);
        }
        let limit = Duration::from_secs(group.shutdown_grace_period_seconds.max(0) as u64);
        loop {
            let running = terminator.running();
            let left: Vec<_> = members
                .iter()
                .filter(|p| running.contains(&p.metadata.uid))
                .collect();
            if left.is_empty() {
                info!(priority = group.priority, elapsed = ?started.elapsed(), "node shutdown: pod group stopped");
                break;
            }
            if started.elapsed() >= limit {
                let names: Vec<String> = left.iter().map(|p| p.metadata.name.clone()).collect();
                warn!(priority = group.priority, grace_seconds = group.shutdown_grace_period_seconds, pods = ?names, "node shutdown: pod group still running at the end of its grace period; going on");
                break;
            }
            std::thread::sleep(poll.min(limit.saturating_sub(started.elapsed())));
        }
    }
}

/// Errors of one session with logind.
#[derive(Debug, thiserror::Error)]
pub enum ShutdownError {
    #[error(transparent)]
    Logind(#[from] systemd::LogindError),
    #[error(
        "logind's InhibitDelayMaxSec is {current:?} after raising it to {requested:?} (the shutdown grace periods' total); is the drop-in directory {dir} read by logind?"
    )]
    DelayTooShort {
        current: Duration,
        requested: Duration,
        dir: String,
    },
}

/// The running manager: a thread that holds the lock and waits for logind's signal.
pub struct Manager;

impl Manager {
    /// Starts the manager's thread when graceful shutdown is configured; `None` when it is
    /// off (zero periods), as the kubelet's stub.
    pub fn start(
        config: ShutdownConfig,
        terminator: Arc<dyn PodTerminator>,
        stop: Receiver<()>,
    ) -> Option<std::thread::JoinHandle<()>> {
        let groups = config.groups();
        if groups.is_empty() {
            debug!("graceful node shutdown off (shutdownGracePeriod is 0)");
            return None;
        }
        info!(groups = ?groups, "graceful node shutdown on");
        let spawned = std::thread::Builder::new()
            .name("node-shutdown".into())
            .stack_size(256 * 1024)
            .spawn(move || run(&config, &groups, terminator.as_ref(), &stop));
        match spawned {
            Ok(h) => Some(h),
            Err(e) => {
                warn!(error = %e, "cannot start the node shutdown manager");
                None
            }
        }
    }
}

/// nanolet is stopping (a message, or the sender gone).
fn stopped(stop: &Receiver<()>) -> bool {
    !matches!(stop.try_recv(), Err(TryRecvError::Empty))
}

/// Sessions with logind until nanolet stops; a lost bus is reconnected with a back-off.
fn run(
    config: &ShutdownConfig,
    groups: &[GracePeriodByPriority],
    terminator: &dyn PodTerminator,
    stop: &Receiver<()>,
) {
    let mut wait = Duration::from_secs(1);
    let mut last_error = String::new();
    while !stopped(stop) {
        match session(config, groups, terminator, stop) {
            Ok(()) => return,
            Err(e) => {
                let text = e.to_string();
                if text != last_error {
                    warn!(error = %text, retry = ?wait, "node shutdown manager cannot watch for shutdowns; pods will not be stopped gracefully on a shutdown until it can");
                    last_error = text;
                } else {
                    debug!(error = %text, retry = ?wait, "node shutdown manager still cannot watch for shutdowns");
                }
            }
        }
        if !matches!(stop.recv_timeout(wait), Err(RecvTimeoutError::Timeout)) {
            return;
        }
        wait = (wait * 2).min(MAX_RECONNECT);
    }
}

/// One connection: check and raise the inhibit delay, take the lock, watch for the signal.
/// Returns Ok when nanolet stops.
fn session(
    config: &ShutdownConfig,
    groups: &[GracePeriodByPriority],
    terminator: &dyn PodTerminator,
    stop: &Receiver<()>,
) -> Result<(), ShutdownError> {
    let mut logind = systemd::Logind::connect()?;
    let requested = period_requested(groups);
    let current = logind.inhibit_delay_max()?;
    if requested > current {
        let path = systemd::write_drop_in(&config.logind_conf_dir, requested)?;
        info!(path = %path.display(), from = ?current, to = ?requested, "raising logind's InhibitDelayMaxSec; reloading logind");
        logind.reload_logind()?;
        let now = logind.inhibit_delay_max()?;
        if requested > now {
            return Err(ShutdownError::DelayTooShort {
                current: now,
                requested,
                dir: config.logind_conf_dir.display().to_string(),
            });
        }
    }
    logind.watch_shutdown()?;
    let mut lock = Some(logind.inhibit_shutdown()?);
    info!(delay = ?requested, "holding logind's shutdown delay lock");
    loop {
        if stopped(stop) {
            return Ok(());
        }
        let Some(active) = logind.next_event(Duration::from_secs(1))? else {
            continue;
        };
        if active {
            info!("node shutdown: logind announced a shutdown; stopping pods by priority");
            terminator.set_shutting_down(true);
            kill_pods_by_priority(terminator, groups, Duration::from_millis(200));
            lock = None;
            info!("node shutdown: pods stopped; released the delay lock, the node shuts down now");
        } else {
            info!("node shutdown: the shutdown was cancelled; taking the delay lock again");
            terminator.set_shutting_down(false);
            if lock.is_none() {
                lock = Some(logind.inhibit_shutdown()?);
            }
        }
    }
}

#[cfg(test)]
mod tests;
