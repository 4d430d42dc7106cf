//! The pod-resources API v1 (the kubelet's pkg/kubelet/apis/podresources, server_v1.go) on
//! `<dir>/kubelet.sock` (default `/var/lib/kubelet/pod-resources`): `List` (every active pod,
//! its containers and restartable init containers with their devices), `Get` (one pod by
//! namespace and name), `GetAllocatableResources` (the healthy devices). Monitoring agents and
//! device plugins read it. nanolet has no CPU, memory or DRA managers: CPU IDs, memory and
//! dynamic resources are empty, as a kubelet's with those managers off.

use std::path::Path;
use std::sync::Arc;

use tracing::info;

use super::{DeviceError, DeviceManager, grpc};
use crate::api::Pod;
use crate::status::StatusStore;

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod pb {
    tonic::include_proto!("v1");
}

/// The socket's file name in the pod-resources directory.
pub const SOCKET: &str = "kubelet.sock";

struct Lister {
    store: Arc<StatusStore>,
    devices: Option<Arc<DeviceManager>>,
}

/// Pods that still hold resources: not Succeeded or Failed (the kubelet's GetActivePods).
fn active(p: &Pod) -> bool {
    !p.status
        .as_ref()
        .is_some_and(|s| s.phase == "Succeeded" || s.phase == "Failed")
}

impl Lister {
    fn pod_resources(&self, pod: &Pod) -> pb::PodResources {
        let allocations = self
            .devices
            .as_ref()
            .map(|d| d.allocations())
            .unwrap_or_default();
        let containers = pod
            .spec
            .init_containers
            .iter()
            .filter(|c| crate::api::helpers::is_sidecar(c))
            .chain(pod.spec.containers.iter())
            .map(|c| pb::ContainerResources {
                name: c.name.clone(),
                devices: allocations
                    .iter()
                    .filter(|(uid, name, _, _)| *uid == pod.metadata.uid && *name == c.name)
                    .map(|(_, _, resource, ids)| pb::ContainerDevices {
                        resource_name: resource.clone(),
                        device_ids: ids.clone(),
                        topology: None,
                    })
                    .collect(),
                ..Default::default()
            })
            .collect();
        pb::PodResources {
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            containers,
        }
    }
}

impl Lister {
    /// One call: `List`, `GetAllocatableResources` or `Get` (server_v1.go).
    fn call(&self, path: &str, msg: bytes::Bytes) -> grpc::Reply {
        use prost::Message;
        let bad = |e: prost::DecodeError| (grpc::INVALID_ARGUMENT, e.to_string());
        match path {
            "/v1.PodResourcesLister/List" => {
                pb::ListPodResourcesRequest::decode(msg).map_err(bad)?;
                let pod_resources = self
                    .store
                    .pods()
                    .iter()
                    .filter(|p| active(p))
                    .map(|p| self.pod_resources(p))
                    .collect();
                Ok(pb::ListPodResourcesResponse { pod_resources }.encode_to_vec())
            }
            "/v1.PodResourcesLister/GetAllocatableResources" => {
                pb::AllocatableResourcesRequest::decode(msg).map_err(bad)?;
                let devices = self
                    .devices
                    .as_ref()
                    .map(|d| d.healthy_devices())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(resource_name, device_ids)| pb::ContainerDevices {
                        resource_name,
                        device_ids,
                        topology: None,
                    })
                    .collect();
                Ok(pb::AllocatableResourcesResponse {
                    devices,
                    ..Default::default()
                }
                .encode_to_vec())
            }
            "/v1.PodResourcesLister/Get" => {
                let r = pb::GetPodResourcesRequest::decode(msg).map_err(bad)?;
                let pod = self.store.pods().into_iter().find(|p| {
                    p.metadata.namespace == r.pod_namespace && p.metadata.name == r.pod_name
                });
                let Some(pod) = pod else {
                    // server_v1.go's error (a plain Go error: gRPC code Unknown).
                    return Err((
                        grpc::UNKNOWN,
                        format!(
                            "pod {} in namespace {} not found",
                            r.pod_name, r.pod_namespace
                        ),
                    ));
                };
                Ok(pb::GetPodResourcesResponse {
                    pod_resources: Some(self.pod_resources(&pod)),
                }
                .encode_to_vec())
            }
            _ => Err((grpc::UNIMPLEMENTED, format!("unknown method {path}"))),
        }
    }
}

/// Serves the API on `<dir>/kubelet.sock` (a stale socket there is replaced) on a runtime
/// thread of its own.
pub fn start(
    dir: &Path,
    store: Arc<StatusStore>,
    devices: Option<Arc<DeviceManager>>,
) -> Result<(), DeviceError> {
    std::fs::create_dir_all(dir).map_err(|source| DeviceError::Io {
        what: "creating",
        path: dir.to_path_buf(),
        source,
    })?;
    let sock = dir.join(SOCKET);
    match std::fs::remove_file(&sock) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(DeviceError::Io {
                what: "removing",
                path: sock,
                source,
            });
        }
    }
    // On the device manager's runtime thread when there is one, else on a thread of its own.
    let (own, handle) = match &devices {
        Some(dm) => (None, dm.handle.clone()),
        None => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
                .map_err(DeviceError::Runtime)?;
            let handle = rt.handle().clone();
            (Some(rt), handle)
        }
    };
    let listener = {
        let _g = handle.enter();
        tokio::net::UnixListener::bind(&sock).map_err(|source| DeviceError::Io {
            what: "listening on",
            path: sock.clone(),
            source,
        })?
    };
    let lister = Arc::new(Lister { store, devices });
    let handler: grpc::Handler = Arc::new(move |path: String, msg: bytes::Bytes| {
        let lister = lister.clone();
        Box::pin(async move { lister.call(&path, msg) })
    });
    let serve = grpc::serve(listener, "pod-resources", handler);
    match own {
        Some(rt) => {
            std::thread::Builder::new()
                .name("pod-resources".into())
                .spawn(move || rt.block_on(serve))
                .map_err(DeviceError::Runtime)?;
        }
        None => {
            handle.spawn(serve);
        }
    }
    info!(socket = %sock.display(), "pod-resources API listening");
    Ok(())
}

/// (namespace, pod, container, resource, device IDs).
#[cfg(feature = "testing")]
pub type ListedDevices = (String, String, String, String, Vec<String>);

/// A pod-resources client for the tests: `List` on `socket`, flattened to (namespace, pod,
/// container, resource, device IDs).
#[cfg(feature = "testing")]
pub fn list_for_tests(socket: &Path) -> Result<Vec<ListedDevices>, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let channel = crate::cri::client::unix_channel(socket, rt.handle());
    let mut client = pb::pod_resources_lister_client::PodResourcesListerClient::new(channel);
    let resp = rt
        .block_on(client.list(pb::ListPodResourcesRequest {}))
        .map_err(|s| s.message().to_string())?
        .into_inner();
    let mut out = Vec::new();
    for p in resp.pod_resources {
        for c in p.containers {
            for d in c.devices {
                out.push((
                    p.namespace.clone(),
                    p.name.clone(),
                    c.name.clone(),
                    d.resource_name,
                    d.device_ids,
                ));
            }
        }
    }
    Ok(out)
}
