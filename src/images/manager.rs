//! The image manager of one pod (Go's pkg/kubelet/images/image_manager.go): `EnsureImageExists`
//! with the pull policy, the per-image pull back-off and the kubelet's image events.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tracing::warn;

use crate::api::{Container, Pod};
use crate::cri::{ErrorKind, Runtime, RuntimeError};
use crate::events::{EventRecorder, EventType, container_ref};
use crate::util::backoff::Backoff;

use super::credentials;

/// Why a container's image is not there (yet). The text is the waiting message the pod status
/// shows; [`PullError::reason`] is its reason.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// The runtime could not say whether the image is present.
    #[error(transparent)]
    Inspect(RuntimeError),
    /// Pull policy Never and the image is not present.
    #[error("Container image \"{image}\" is not present with pull policy of Never")]
    NeverPull { image: String },
    /// An earlier pull failed and its back-off has `remaining` to run.
    #[error("Back-off pulling image \"{image}\"")]
    BackOff { image: String, remaining: Duration },
    /// The pull failed; the next one waits for `delay`.
    #[error("{}", .source.message)]
    Pull {
        source: RuntimeError,
        delay: Duration,
    },
}

impl PullError {
    /// The container's waiting reason while this lasts.
    pub fn reason(&self) -> &'static str {
        match self {
            PullError::Inspect(_) | PullError::Pull { .. } => "ErrImagePull",
            PullError::NeverPull { .. } => "ErrImageNeverPull",
            PullError::BackOff { .. } => "ImagePullBackOff",
        }
    }

    /// How soon the pod should be synced again; `None`: at the next periodic resync.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            PullError::Inspect(_) => Some(Duration::from_secs(2)),
            PullError::NeverPull { .. } => None,
            PullError::BackOff { remaining, .. } => Some(*remaining),
            // Sync again shortly so the status moves on to ImagePullBackOff while the back-off
            // runs (as the kubelet shows it); the next pull waits for `delay`.
            PullError::Pull { delay, .. } => Some((*delay).min(Duration::from_secs(1))),
        }
    }
}

/// Where pull credentials come from: the pod's imagePullSecrets (local store), then the node's
/// registry credentials file.
#[derive(Debug, Clone, Copy)]
pub struct CredentialSources<'a> {
    /// The pod's ConfigMap/Secret source (local store for static pods, the API for API pods).
    pub store: Option<&'a dyn crate::api::env::ConfigMapsAndSecrets>,
    pub registry_config: Option<&'a PathBuf>,
}

/// One pod's image manager: the pull back-off of its images.
#[derive(Debug, Default)]
pub struct ImageManager {
    backoff: Backoff,
}

impl ImageManager {
    /// The kubelet's `EnsureImageExists`: pull `c`'s image as its pull policy says, unless an
    /// earlier failed pull is still backing off; record the image events on the container.
    /// `now` is when the sync began (the back-off check).
    pub fn ensure_image_exists(
        &mut self,
        rt: &dyn Runtime,
        events: &EventRecorder,
        sources: CredentialSources<'_>,
        pod: &Pod,
        c: &Container,
        now: Instant,
    ) -> Result<(), PullError> {
        let image = c.image.as_str();
        let policy = c.image_pull_policy.as_str();
        let present = rt
            .image_status(image)
            .map_err(PullError::Inspect)?
            .is_some();
        let must_pull = match policy {
            "Always" => true,
            "Never" if present => return Ok(()),
            "Never" => {
                return Err(PullError::NeverPull {
                    image: image.to_string(),
                });
            }
            _ => !present,
        };
        let event = |type_, reason, message: &str| {
            events.record(&container_ref(pod, &c.name), type_, reason, message);
        };
        if !must_pull {
            event(
                EventType::Normal,
                "Pulled",
                &format!("Container image \"{image}\" already present on machine"),
            );
            return Ok(());
        }
        let key = format!("image:{}:{}", pod.metadata.uid, image);
        if let Some(remaining) = self.backoff.remaining_since_update(&key, now) {
            return Err(PullError::BackOff {
                image: image.to_string(),
                remaining,
            });
        }
        // imagePullSecrets (local store), then the node's config.json, else anonymous.
        let creds = credentials::credentials_for(
            image,
            &pod.metadata.namespace,
            &credentials::pull_secret_names(&pod.spec.extra),
            sources.store,
            sources.registry_config,
        );
        let full_name = format!("{}/{}", pod.metadata.namespace, pod.metadata.name);
        match credentials::pull(rt, image, &creds) {
            Ok(_) => {
                event(
                    EventType::Normal,
                    "Pulled",
                    &format!("Successfully pulled image \"{image}\""),
                );
                Ok(())
            }
            Err(e) if policy == "Always" && present && registry_unreachable(&e) => {
                // An air-gapped box cannot reach the registry, but the image is here: use it.
                // A registry that answered and refused (no credentials for this image, no such
                // image) fails below, as in the kubelet.
                warn!(pod = %full_name, container = %c.name, image, error = %e,
                    "the registry cannot be reached; using the local copy");
                Ok(())
            }
            Err(e) => {
                // The kubelet's image manager stamps the back-off when the pull fails
                // (backOff.Next(key, Clock.Now())), not when the sync began: a slow sandbox
                // start before the pull must not shorten the 10 s.
                self.backoff.next(&key, Instant::now());
                let delay = self.backoff.delay(&key).unwrap_or(Duration::from_secs(10));
                warn!(pod = %full_name, container = %c.name, image, error = %e, "pulling image failed");
                event(
                    EventType::Warning,
                    "Failed",
                    &format!("Failed to pull image \"{image}\": {}", e.message),
                );
                Err(PullError::Pull { source: e, delay })
            }
        }
    }
}

/// Whether a failed pull says the registry could not be reached (an air-gapped or offline box:
/// no route, no DNS, refused or timed-out connections, containerd's own timeout) rather than
/// that it answered and refused. Only the first lets `imagePullPolicy: Always` fall back to a
/// local copy (docs/kubelet-differences.md). A refusal (401/403: the pod's credentials cannot
/// fetch this image; 404: no such image or tag) fails with `ErrImagePull` as in the kubelet,
/// whose image manager pulls for `Always` whatever is present: `Always` keeps meaning "only
/// with credentials that can fetch it", which the AlwaysPullImages admission plugin relies on
/// to keep one tenant's private image, cached on the node, from another's pods.
fn registry_unreachable(e: &RuntimeError) -> bool {
    const REFUSED: &[&str] = &[
        "401 Unauthorized",
        "403 Forbidden",
        "404 Not Found",
        ": not found",
        "unexpected status",
    ];
    const UNREACHABLE: &[&str] = &[
        "no such host",
        "server misbehaving",
        "connection refused",
        "connection reset by peer",
        "network is unreachable",
        "no route to host",
        "i/o timeout",
        "TLS handshake timeout",
        "Client.Timeout exceeded",
        "context deadline exceeded",
    ];
    if REFUSED.iter().any(|r| e.message.contains(r)) {
        return false;
    }
    matches!(e.kind, ErrorKind::Unavailable | ErrorKind::DeadlineExceeded)
        || UNREACHABLE.iter().any(|u| e.message.contains(u))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::GrpcCode;
    use crate::cri::fake::FakeRuntime;

    fn pod_with(image: &str, policy: &str) -> Pod {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": image}]}
        }))
        .expect("pod");
        p.spec.containers[0].image_pull_policy = policy.into();
        p
    }

    fn ensure(rt: &FakeRuntime, pod: &Pod, events: &EventRecorder) -> Result<(), PullError> {
        let sources = CredentialSources {
            store: None,
            registry_config: None,
        };
        ImageManager::default().ensure_image_exists(
            rt,
            events,
            sources,
            pod,
            &pod.spec.containers[0],
            Instant::now(),
        )
    }

    /// docs/kubelet-differences.md: "With `imagePullPolicy: Always` and no registry reachable
    /// (air-gapped boxes), a locally present image is used with a warning instead of failing
    /// with `ErrImagePull`". The pull is tried (and fails), the local image is used, and no
    /// `Failed` event is recorded; without a local copy the failure stands.
    #[test]
    fn always_with_no_registry_reachable_uses_the_local_image() {
        let rt = FakeRuntime::new();
        rt.add_image("busybox:1");
        rt.inject_error("pull_image", ErrorKind::Unavailable);
        let events = EventRecorder::new();
        let pod = pod_with("busybox:1", "Always");
        assert!(ensure(&rt, &pod, &events).is_ok());
        assert!(
            rt.calls().iter().any(|c| c == "pull_image busybox:1"),
            "the pull was tried: {:?}",
            rt.calls()
        );
        assert!(
            !events.list().iter().any(|e| e.reason == "Failed"),
            "{:?}",
            events.list()
        );

        // Not present locally: ErrImagePull with the kubelet's Failed event.
        let missing = pod_with("nginx:1", "Always");
        assert!(matches!(
            ensure(&rt, &missing, &events),
            Err(PullError::Pull { .. })
        ));
        assert!(events.list().iter().any(|e| e.reason == "Failed"));
    }

    /// The kubelet's image manager pulls for `imagePullPolicy: Always` whatever is present and
    /// fails with ErrImagePull when the registry refuses (the e2e test "should not be able to
    /// pull from private registry without secret"): a cached private image is not used by a
    /// pod whose credentials cannot fetch it. Only an unreachable registry falls back.
    #[test]
    fn always_with_a_registry_that_refuses_fails_even_with_a_local_copy() {
        let rt = FakeRuntime::new();
        rt.add_image("localhost:5000/pause:testing");
        let events = EventRecorder::new();
        let pod = pod_with("localhost:5000/pause:testing", "Always");
        rt.inject_status_error(
            "pull_image",
            GrpcCode::Unknown,
            "failed to pull and unpack image \"localhost:5000/pause:testing\": failed to resolve \
             reference \"localhost:5000/pause:testing\": pulling from host localhost:5000 failed \
             with status code [manifests testing]: 401 Unauthorized",
        );
        assert!(matches!(
            ensure(&rt, &pod, &events),
            Err(PullError::Pull { .. })
        ));
        assert!(events.list().iter().any(|e| e.reason == "Failed"));

        // The same image with the registry's host unresolvable: the local copy is used.
        let mut p2 = pod_with("localhost:5000/pause:testing", "Always");
        p2.metadata.uid = "u2".into(); // its own back-off key
        rt.inject_status_error(
            "pull_image",
            GrpcCode::Unknown,
            "failed to pull and unpack image \"registry.example/app:1\": failed to resolve reference \
             \"registry.example/app:1\": failed to do request: Head \"https://registry.example/v2/app/\
             manifests/1\": dial tcp: lookup registry.example on 10.0.0.1:53: no such host",
        );
        assert!(ensure(&rt, &p2, &events).is_ok());
    }
}
