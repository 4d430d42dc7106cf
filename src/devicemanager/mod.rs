//! The device manager (the kubelet's pkg/kubelet/cm/devicemanager): the device plugin API
//! v1beta1 as the kubelet serves it.
//!
//! - `Registration.Register` on `<dir>/kubelet.sock` (default `/var/lib/kubelet/device-plugins`,
//!   so unmodified plugins find it). At start the stale sockets in the directory are removed
//!   and `kubelet.sock` is created anew: plugins watching for it re-register.
//! - A registered plugin is dialled at `<dir>/<endpoint>`: `GetDevicePluginOptions`, then a
//!   `ListAndWatch` stream whose devices (Healthy or not) are the resource's capacity
//!   (all) and allocatable (healthy). When the stream ends the devices turn unhealthy and
//!   after 5 minutes (endpointStopGracePeriod) without re-registration the resource is gone.
//! - Admission allocates (`allocate`): devices not in use, `GetPreferredAllocation` when the
//!   plugin offers it, `Allocate`; too few healthy devices is the kubelet's
//!   `UnexpectedAdmissionError`. Container creation takes the response's devices, mounts,
//!   envs, annotations and CDI devices (`container_options`), and calls `PreStartContainer`
//!   when the plugin asked for it.
//! - Allocations are checkpointed in nanolet's root directory (`device-manager-checkpoint.json`,
//!   the kubelet checkpoint's fields: see docs/decisions/device-plugin-api.md), so a
//!   restarted nanolet keeps them and running containers keep their devices.
//!
//! gRPC runs on a current-thread tokio runtime of its own; the sync loop and pod workers call
//! in through `Handle::block_on`.

mod grpc;
pub mod podresources;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tonic::{Response, Status};
use tracing::{info, warn};

use crate::api::{Container, Pod};

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod pb {
    tonic::include_proto!("v1beta1");
}

/// The registration socket's file name in the device plugins directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// The only API version the kubelet (and nanolet) accepts.
pub const VERSION: &str = "v1beta1";
/// `Device.health` of a usable device.
pub const HEALTHY: &str = "Healthy";
/// How long a plugin whose stream ended keeps its resource (unhealthy) before it is removed
/// (devicemanager `endpointStopGracePeriod`).
pub const STOP_GRACE_PERIOD: Duration = Duration::from_secs(5 * 60);
/// The checkpoint's file name in nanolet's root directory.
pub const CHECKPOINT_FILE: &str = "device-manager-checkpoint.json";
/// Deadline of one call to a plugin.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("device manager runtime: {0}")]
    Runtime(std::io::Error),
    /// The kubelet's devicesToAllocate error, word for word.
    #[error(
        "requested number of devices unavailable for {resource}. Requested: {needed}, Available: {available}"
    )]
    Unavailable {
        resource: String,
        needed: usize,
        available: usize,
    },
    #[error("unknown Device Plugin {0}")]
    UnknownPlugin(String),
    #[error("device plugin {resource}: {call}: {message}")]
    Rpc {
        resource: String,
        call: &'static str,
        message: String,
    },
}

/// What a container gets from its allocations (the kubelet's DeviceRunContainerOptions).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunContainerOptions {
    pub envs: Vec<(String, String)>,
    pub mounts: Vec<crate::cri::Mount>,
    pub devices: Vec<crate::cri::DeviceSpec>,
    pub annotations: BTreeMap<String, String>,
    pub cdi_devices: Vec<String>,
}

/// One registered (or checkpointed) plugin.
#[derive(Debug)]
struct Endpoint {
    options: pb::DevicePluginOptions,
    /// When its stream ended (None while connected).
    stopped: Option<Instant>,
    /// Which registration this is: a stream of an older one ending does not touch it.
    generation: u64,
    channel: Option<tonic::transport::Channel>,
}

/// One container's devices of one resource, and the plugin's answer.
#[derive(Debug, Clone)]
struct Allocation {
    pod_uid: String,
    container: String,
    resource: String,
    ids: Vec<String>,
    resp: pb::ContainerAllocateResponse,
    /// Read from the checkpoint (made before this nanolet started).
    restored: bool,
}

#[derive(Debug, Default)]
struct State {
    endpoints: BTreeMap<String, Endpoint>,
    /// resource -> device ID -> healthy.
    devices: BTreeMap<String, BTreeMap<String, bool>>,
    allocations: Vec<Allocation>,
    generation: u64,
}

/// The checkpoint: the kubelet checkpoint's data (`PodDeviceEntries`, `RegisteredDevices`),
/// the allocation response as protobuf bytes (base64 in JSON, as Go marshals `[]byte`).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Checkpoint {
    pod_device_entries: Vec<CheckpointEntry>,
    registered_devices: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CheckpointEntry {
    #[serde(rename = "PodUID")]
    pod_uid: String,
    container_name: String,
    resource_name: String,
    #[serde(rename = "DeviceIDs")]
    device_ids: Vec<String>,
    alloc_resp: String,
}

pub struct DeviceManager {
    dir: PathBuf,
    checkpoint: PathBuf,
    state: Mutex<State>,
    handle: tokio::runtime::Handle,
    /// Called when capacity changes (node status refresh).
    on_change: Mutex<Vec<Box<dyn Fn() + Send + Sync>>>,
}

impl std::fmt::Debug for DeviceManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceManager")
            .field("dir", &self.dir)
            .field("checkpoint", &self.checkpoint)
            .finish()
    }
}

/// `Registration.Register` (the kubelet's server.Register): the version, the resource name,
/// then dialling the plugin; an error goes back to the plugin as a gRPC error (code Unknown,
/// as a plain Go error returned by a grpc-go handler).
async fn register(manager: Arc<DeviceManager>, r: pb::RegisterRequest) -> grpc::Reply {
    info!(resource = %r.resource_name, endpoint = %r.endpoint, "device plugin registration");
    if r.version != VERSION {
        // The kubelet's errUnsupportedVersion (its %q of []string{"v1beta1"}).
        let msg = format!(
            "requested API version {:?} is not supported by kubelet. Supported version is [\"{VERSION}\"]",
            r.version
        );
        warn!(resource = %r.resource_name, "{msg}");
        return Err((grpc::UNKNOWN, msg));
    }
    if !crate::api::helpers::is_extended_resource_name(&r.resource_name) {
        let msg = format!("the ResourceName {:?} is invalid", r.resource_name);
        warn!("{msg}");
        return Err((grpc::UNKNOWN, msg));
    }
    manager
        .connect(r.resource_name, &r.endpoint)
        .await
        .map_err(|e| (grpc::UNKNOWN, e.to_string()))?;
    Ok(prost::Message::encode_to_vec(&pb::Empty {}))
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn rpc_error(resource: &str, call: &'static str, s: &Status) -> DeviceError {
    DeviceError::Rpc {
        resource: resource.to_string(),
        call,
        message: s.message().to_string(),
    }
}

/// A container's count of `resource` (its limit, the request when there is no limit): the
/// kubelet allocates device plugin resources by the container's limits (request = limit).
fn container_count(c: &Container, resource: &str) -> i64 {
    c.resources
        .limits
        .get(resource)
        .or_else(|| c.resources.requests.get(resource))
        .and_then(|v| crate::api::quantity::parse_quantity(v).ok())
        .map(|q| q.value())
        .unwrap_or(0)
}

impl DeviceManager {
    /// Starts the registration server on `<dir>/kubelet.sock` and restores the checkpoint in
    /// `root_dir`.
    pub fn start(dir: &Path, root_dir: &Path) -> Result<Arc<Self>, DeviceError> {
        let io = |what, path: &Path| {
            let path = path.to_path_buf();
            move |source| DeviceError::Io { what, path, source }
        };
        std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
        cleanup_sockets(dir);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(DeviceError::Runtime)?;
        let handle = rt.handle().clone();
        let mgr = Arc::new(DeviceManager {
            dir: dir.to_path_buf(),
            checkpoint: root_dir.join(CHECKPOINT_FILE),
            state: Mutex::new(State::default()),
            handle: handle.clone(),
            on_change: Mutex::new(Vec::new()),
        });
        mgr.read_checkpoint();
        let sock = dir.join(KUBELET_SOCKET);
        let listener = {
            let _g = handle.enter();
            tokio::net::UnixListener::bind(&sock).map_err(io("listening on", &sock))?
        };
        let weak = Arc::downgrade(&mgr);
        let handler: grpc::Handler = Arc::new(move |path: String, msg: bytes::Bytes| {
            let weak = weak.clone();
            Box::pin(async move {
                if path != "/v1beta1.Registration/Register" {
                    return Err((grpc::UNIMPLEMENTED, format!("unknown method {path}")));
                }
                let req = <pb::RegisterRequest as prost::Message>::decode(msg)
                    .map_err(|e| (grpc::INVALID_ARGUMENT, e.to_string()))?;
                let Some(mgr) = weak.upgrade() else {
                    return Err((grpc::UNKNOWN, "the device manager stopped".to_string()));
                };
                register(mgr, req).await
            })
        });
        std::thread::Builder::new()
            .name("device-manager".into())
            .spawn(move || {
                rt.block_on(grpc::serve(listener, "device-plugin-registration", handler))
            })
            .map_err(DeviceError::Runtime)?;
        info!(socket = %sock.display(), "device plugin registration server listening");
        Ok(mgr)
    }

    /// The device plugins directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Calls `f` whenever a resource's devices change.
    pub fn on_change(&self, f: Box<dyn Fn() + Send + Sync>) {
        self.on_change
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(f);
    }

    fn changed(&self) {
        for f in self
            .on_change
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            f();
        }
    }

    /// Dials a registering plugin, reads its options and starts its ListAndWatch stream (the
    /// kubelet's connectClient + PluginConnected + runClient).
    async fn connect(self: Arc<Self>, resource: String, endpoint: &str) -> Result<(), DeviceError> {
        let socket = self.dir.join(endpoint);
        let channel = crate::cri::client::unix_channel(&socket, &self.handle);
        let mut client = pb::device_plugin_client::DevicePluginClient::new(channel.clone());
        let options =
            tokio::time::timeout(CALL_TIMEOUT, client.get_device_plugin_options(pb::Empty {}))
                .await
                .map_err(|_| DeviceError::Rpc {
                    resource: resource.clone(),
                    call: "GetDevicePluginOptions",
                    message: "timed out".into(),
                })?
                .map_err(|s| rpc_error(&resource, "GetDevicePluginOptions", &s))?
                .into_inner();
        let generation = {
            let mut st = lock(&self.state);
            st.generation += 1;
            let generation = st.generation;
            st.endpoints.insert(
                resource.clone(),
                Endpoint {
                    options,
                    stopped: None,
                    generation,
                    channel: Some(channel),
                },
            );
            generation
        };
        info!(resource = %resource, socket = %socket.display(), "device plugin registered");
        let mgr = self.clone();
        self.handle.spawn(async move {
            mgr.list_and_watch(resource, client, generation).await;
        });
        Ok(())
    }

    async fn list_and_watch(
        self: Arc<Self>,
        resource: String,
        mut client: pb::device_plugin_client::DevicePluginClient<tonic::transport::Channel>,
        generation: u64,
    ) {
        match client.list_and_watch(pb::Empty {}).await {
            Ok(stream) => {
                let mut stream = stream.into_inner();
                loop {
                    match stream.message().await {
                        Ok(Some(resp)) => self.update_devices(&resource, generation, &resp.devices),
                        Ok(None) => break,
                        Err(s) => {
                            warn!(resource = %resource, error = %s.message(), "device plugin ListAndWatch ended");
                            break;
                        }
                    }
                }
            }
            Err(s) => {
                warn!(resource = %resource, error = %s.message(), "device plugin ListAndWatch failed")
            }
        }
        // PluginDisconnected: every device unhealthy, the endpoint stopped (grace period).
        {
            let mut st = lock(&self.state);
            let current = st
                .endpoints
                .get(&resource)
                .is_some_and(|e| e.generation == generation);
            if !current {
                return;
            }
            if let Some(e) = st.endpoints.get_mut(&resource) {
                e.stopped = Some(Instant::now());
                e.channel = None;
            }
            if let Some(devs) = st.devices.get_mut(&resource) {
                for h in devs.values_mut() {
                    *h = false;
                }
            }
        }
        warn!(resource = %resource, "device plugin disconnected: its devices are unhealthy until it registers again");
        self.write_checkpoint();
        self.changed();
    }

    fn update_devices(&self, resource: &str, generation: u64, devices: &[pb::Device]) {
        {
            let mut st = lock(&self.state);
            let current = st
                .endpoints
                .get(resource)
                .is_some_and(|e| e.generation == generation);
            if !current {
                return;
            }
            let devs: BTreeMap<String, bool> = devices
                .iter()
                .map(|d| (d.id.clone(), d.health == HEALTHY))
                .collect();
            let healthy = devs.values().filter(|h| **h).count();
            info!(resource = %resource, total = devs.len(), healthy, "device plugin devices updated");
            st.devices.insert(resource.to_string(), devs);
        }
        self.write_checkpoint();
        self.changed();
    }

    /// Capacity (every device) and allocatable (healthy devices) per resource, as the
    /// kubelet's GetCapacity: a plugin stopped longer than the grace period is dropped.
    pub fn capacity(&self) -> (BTreeMap<String, i64>, BTreeMap<String, i64>) {
        let mut st = lock(&self.state);
        let expired: Vec<String> = st
            .endpoints
            .iter()
            .filter(|(_, e)| e.stopped.is_some_and(|t| t.elapsed() > STOP_GRACE_PERIOD))
            .map(|(k, _)| k.clone())
            .collect();
        for r in &expired {
            st.endpoints.remove(r);
            st.devices.remove(r);
        }
        let mut cap = BTreeMap::new();
        let mut alloc = BTreeMap::new();
        for (r, devs) in &st.devices {
            cap.insert(r.clone(), devs.len() as i64);
            alloc.insert(r.clone(), devs.values().filter(|h| **h).count() as i64);
        }
        drop(st);
        if !expired.is_empty() {
            self.write_checkpoint();
        }
        (cap, alloc)
    }

    /// Whether `resource` is served by a device plugin (registered now or checkpointed).
    pub fn is_device_plugin_resource(&self, resource: &str) -> bool {
        let st = lock(&self.state);
        st.devices.contains_key(resource) || st.endpoints.contains_key(resource)
    }

    /// Drops the allocations of pods not in `active` (the kubelet's UpdateAllocatedDevices).
    pub fn retain_pods(&self, active: &BTreeSet<String>) {
        let changed = {
            let mut st = lock(&self.state);
            let before = st.allocations.len();
            st.allocations.retain(|a| active.contains(&a.pod_uid));
            st.allocations.len() != before
        };
        if changed {
            self.write_checkpoint();
        }
    }

    /// Admission: allocates the device plugin resources of every container of `pod` (init
    /// containers first), reusing what it already holds (after a restart, from the
    /// checkpoint). An error is the kubelet's `Allocate failed due to <err>, which is
    /// unexpected`.
    pub fn allocate(&self, pod: &Pod) -> Result<(), DeviceError> {
        let containers = pod
            .spec
            .init_containers
            .iter()
            .chain(pod.spec.containers.iter());
        for c in containers {
            let resources: BTreeSet<&String> = c
                .resources
                .limits
                .keys()
                .chain(c.resources.requests.keys())
                .filter(|k| self.is_device_plugin_resource(k))
                .collect();
            for r in resources {
                let n = container_count(c, r);
                if n > 0 {
                    self.allocate_container(pod, &c.name, r, n as usize)?;
                }
            }
        }
        Ok(())
    }

    fn allocate_container(
        &self,
        pod: &Pod,
        container: &str,
        resource: &str,
        needed: usize,
    ) -> Result<(), DeviceError> {
        let uid = pod.metadata.uid.as_str();
        let (channel, options, available) = {
            let st = lock(&self.state);
            if st
                .allocations
                .iter()
                .any(|a| a.pod_uid == uid && a.container == container && a.resource == resource)
            {
                return Ok(());
            }
            let Some(ep) = st.endpoints.get(resource) else {
                return Err(DeviceError::UnknownPlugin(resource.to_string()));
            };
            let in_use: BTreeSet<&String> = st
                .allocations
                .iter()
                .filter(|a| a.resource == resource)
                .flat_map(|a| a.ids.iter())
                .collect();
            let available: Vec<String> = st
                .devices
                .get(resource)
                .map(|d| {
                    d.iter()
                        .filter(|(id, h)| **h && !in_use.contains(id))
                        .map(|(id, _)| id.clone())
                        .collect()
                })
                .unwrap_or_default();
            if available.len() < needed {
                return Err(DeviceError::Unavailable {
                    resource: resource.to_string(),
                    needed,
                    available: available.len(),
                });
            }
            let Some(channel) = ep.channel.clone() else {
                return Err(DeviceError::UnknownPlugin(resource.to_string()));
            };
            (channel, ep.options, available)
        };
        let mut client = pb::device_plugin_client::DevicePluginClient::new(channel);
        let mut ids: Vec<String> = available.iter().take(needed).cloned().collect();
        if options.get_preferred_allocation_available {
            let req = pb::PreferredAllocationRequest {
                container_requests: vec![pb::ContainerPreferredAllocationRequest {
                    available_device_i_ds: available.clone(),
                    must_include_device_i_ds: vec![],
                    allocation_size: needed as i32,
                }],
            };
            let resp = self.call(
                resource,
                "GetPreferredAllocation",
                client.get_preferred_allocation(req),
            )?;
            if let Some(pref) = resp.container_responses.into_iter().next() {
                let valid = pref.device_i_ds.len() == needed
                    && pref.device_i_ds.iter().all(|d| available.contains(d));
                if valid {
                    ids = pref.device_i_ds;
                }
            }
        }
        let req = pb::AllocateRequest {
            container_requests: vec![pb::ContainerAllocateRequest {
                devices_ids: ids.clone(),
            }],
        };
        let resp = self.call(resource, "Allocate", client.allocate(req))?;
        let Some(resp) = resp.container_responses.into_iter().next() else {
            return Err(DeviceError::Rpc {
                resource: resource.to_string(),
                call: "Allocate",
                message: "no response for the container".into(),
            });
        };
        info!(pod = %format!("{}/{}", pod.metadata.namespace, pod.metadata.name), container = %container, resource = %resource, devices = ?ids, "devices allocated");
        lock(&self.state).allocations.push(Allocation {
            pod_uid: uid.to_string(),
            container: container.to_string(),
            resource: resource.to_string(),
            ids,
            resp,
            restored: false,
        });
        self.write_checkpoint();
        Ok(())
    }

    fn call<T>(
        &self,
        resource: &str,
        call: &'static str,
        fut: impl std::future::Future<Output = Result<Response<T>, Status>>,
    ) -> Result<T, DeviceError> {
        match self
            .handle
            .block_on(async { tokio::time::timeout(CALL_TIMEOUT, fut).await })
        {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(s)) => Err(rpc_error(resource, call, &s)),
            Err(_) => Err(DeviceError::Rpc {
                resource: resource.to_string(),
                call,
                message: "timed out".into(),
            }),
        }
    }

    /// What the container's allocations add to its CRI config (the kubelet's
    /// GetDeviceRunContainerOptions), after `PreStartContainer` for plugins that asked for it.
    pub fn container_options(
        &self,
        pod_uid: &str,
        container: &str,
    ) -> Result<RunContainerOptions, DeviceError> {
        let (allocs, prestart): (Vec<Allocation>, Vec<_>) = {
            let st = lock(&self.state);
            let allocs: Vec<Allocation> = st
                .allocations
                .iter()
                .filter(|a| a.pod_uid == pod_uid && a.container == container)
                .cloned()
                .collect();
            let prestart = allocs
                .iter()
                .filter_map(|a| {
                    let ep = st.endpoints.get(&a.resource)?;
                    ep.options
                        .pre_start_required
                        .then(|| (a.resource.clone(), a.ids.clone(), ep.channel.clone()))
                })
                .collect();
            (allocs, prestart)
        };
        for (resource, ids, channel) in prestart {
            let Some(channel) = channel else {
                return Err(DeviceError::UnknownPlugin(resource));
            };
            let mut client = pb::device_plugin_client::DevicePluginClient::new(channel);
            self.call(
                &resource,
                "PreStartContainer",
                client.pre_start_container(pb::PreStartContainerRequest { devices_ids: ids }),
            )?;
        }
        let mut o = RunContainerOptions::default();
        for a in allocs {
            let r = a.resp;
            for (k, v) in r.envs {
                o.envs.retain(|(ek, _)| *ek != k);
                o.envs.push((k, v));
            }
            for m in r.mounts {
                if o.mounts
                    .iter()
                    .any(|x| x.container_path == m.container_path)
                {
                    continue;
                }
                o.mounts.push(crate::cri::Mount {
                    container_path: m.container_path,
                    host_path: m.host_path,
                    readonly: m.read_only,
                    ..Default::default()
                });
            }
            for d in r.devices {
                if o.devices
                    .iter()
                    .any(|x| x.container_path == d.container_path)
                {
                    continue;
                }
                o.devices.push(crate::cri::DeviceSpec {
                    container_path: d.container_path,
                    host_path: d.host_path,
                    permissions: d.permissions,
                });
            }
            o.annotations.extend(r.annotations);
            for c in r.cdi_devices {
                if !o.cdi_devices.contains(&c.name) {
                    o.cdi_devices.push(c.name);
                }
            }
        }
        Ok(o)
    }

    /// Whether the pod holds devices of `resource` from before this nanolet started (the
    /// checkpoint): its admission after a restart does not count them against an allocatable
    /// its plugin has not re-reported yet.
    pub fn holds_restored(&self, pod_uid: &str, resource: &str) -> bool {
        lock(&self.state)
            .allocations
            .iter()
            .any(|a| a.restored && a.pod_uid == pod_uid && a.resource == resource)
    }

    /// Every allocation: (pod UID, container, resource, device IDs), for pod-resources.
    pub fn allocations(&self) -> Vec<(String, String, String, Vec<String>)> {
        lock(&self.state)
            .allocations
            .iter()
            .map(|a| {
                (
                    a.pod_uid.clone(),
                    a.container.clone(),
                    a.resource.clone(),
                    a.ids.clone(),
                )
            })
            .collect()
    }

    /// Every healthy device per resource, for pod-resources GetAllocatableResources.
    pub fn healthy_devices(&self) -> BTreeMap<String, Vec<String>> {
        lock(&self.state)
            .devices
            .iter()
            .map(|(r, d)| {
                (
                    r.clone(),
                    d.iter()
                        .filter(|(_, h)| **h)
                        .map(|(id, _)| id.clone())
                        .collect(),
                )
            })
            .collect()
    }

    fn write_checkpoint(&self) {
        let cp = {
            let st = lock(&self.state);
            Checkpoint {
                pod_device_entries: st
                    .allocations
                    .iter()
                    .map(|a| CheckpointEntry {
                        pod_uid: a.pod_uid.clone(),
                        container_name: a.container.clone(),
                        resource_name: a.resource.clone(),
                        device_ids: a.ids.clone(),
                        alloc_resp: crate::util::base64::encode(&prost::Message::encode_to_vec(
                            &a.resp,
                        )),
                    })
                    .collect(),
                registered_devices: st
                    .devices
                    .iter()
                    .map(|(r, d)| (r.clone(), d.keys().cloned().collect()))
                    .collect(),
            }
        };
        let body = match serde_json::to_vec(&cp) {
            Ok(b) => b,
            Err(e) => {
                warn!(error = %e, "encoding the device manager checkpoint");
                return;
            }
        };
        if let Err(e) = crate::statefile::write_atomic(&self.checkpoint, &body) {
            warn!(path = %self.checkpoint.display(), error = %e, "writing the device manager checkpoint");
        }
    }

    /// Restores allocations and the registered resources (as stopped endpoints with no
    /// devices, awaiting re-registration: the kubelet's readCheckpoint).
    fn read_checkpoint(&self) {
        let cp: Checkpoint = match crate::statefile::read_or_quarantine(&self.checkpoint) {
            Ok(Some(cp)) => cp,
            Ok(None) => return,
            Err(e) => {
                warn!(path = %self.checkpoint.display(), error = %e, "reading the device manager checkpoint");
                return;
            }
        };
        let mut st = lock(&self.state);
        for e in cp.pod_device_entries {
            let resp = crate::util::base64::decode(&e.alloc_resp)
                .ok()
                .and_then(|b| {
                    <pb::ContainerAllocateResponse as prost::Message>::decode(b.as_slice()).ok()
                });
            let Some(resp) = resp else {
                warn!(pod_uid = %e.pod_uid, container = %e.container_name, "checkpointed allocation unreadable; dropped");
                continue;
            };
            st.allocations.push(Allocation {
                pod_uid: e.pod_uid,
                container: e.container_name,
                resource: e.resource_name,
                ids: e.device_ids,
                resp,
                restored: true,
            });
        }
        for r in cp.registered_devices.into_keys() {
            st.generation += 1;
            let generation = st.generation;
            st.devices.insert(r.clone(), BTreeMap::new());
            st.endpoints.insert(
                r,
                Endpoint {
                    options: pb::DevicePluginOptions::default(),
                    stopped: Some(Instant::now()),
                    generation,
                    channel: None,
                },
            );
        }
        info!(
            allocations = st.allocations.len(),
            "device manager checkpoint restored"
        );
    }
}

/// Removes the sockets in `dir` (not directories, not other files): the kubelet's
/// CleanupPluginDirectory, so plugins see `kubelet.sock` created anew and re-register.
fn cleanup_sockets(dir: &Path) {
    use std::os::unix::fs::FileTypeExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let is_socket = e.file_type().is_ok_and(|t| t.is_socket());
        if is_socket {
            if let Err(err) = std::fs::remove_file(e.path()) {
                warn!(path = %e.path().display(), error = %err, "removing a stale device plugin socket");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, count: u32) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": uid},
            "spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"limits": {"example.com/resource": count.to_string()}}}]}
        }))
        .expect("pod")
    }

    /// devicemanager devicesToAllocate: too few free healthy devices is its error, word for
    /// word (the sync loop wraps it in UnexpectedAdmissionError); an unhealthy device is
    /// capacity but not allocatable.
    #[test]
    fn too_few_healthy_devices_is_the_kubelets_error() {
        let dir = tempfile::tempdir().expect("tmp");
        let dm = DeviceManager::start(&dir.path().join("dp"), dir.path()).expect("start");
        assert!(dir.path().join("dp").join(KUBELET_SOCKET).exists());
        {
            let mut st = lock(&dm.state);
            st.endpoints.insert(
                "example.com/resource".into(),
                Endpoint {
                    options: pb::DevicePluginOptions::default(),
                    stopped: None,
                    generation: 1,
                    channel: None,
                },
            );
        }
        let dev = |id: &str, health: &str| pb::Device {
            id: id.into(),
            health: health.into(),
            topology: None,
        };
        dm.update_devices(
            "example.com/resource",
            1,
            &[dev("a", HEALTHY), dev("b", "Unhealthy")],
        );
        let (cap, alloc) = dm.capacity();
        assert_eq!(cap.get("example.com/resource"), Some(&2));
        assert_eq!(alloc.get("example.com/resource"), Some(&1));
        let err = dm.allocate(&pod("u1", 2)).expect_err("2 of 1");
        assert_eq!(
            err.to_string(),
            "requested number of devices unavailable for example.com/resource. Requested: 2, Available: 1"
        );
        // A stream of an older registration does not touch the current one.
        dm.update_devices("example.com/resource", 0, &[]);
        assert_eq!(dm.capacity().0.get("example.com/resource"), Some(&2));
    }

    /// The checkpoint brings allocations back after a restart (the response's mounts, envs
    /// and devices for the container) and the resource back as a stopped endpoint without
    /// devices; allocations of pods no longer active are dropped (UpdateAllocatedDevices).
    #[test]
    fn checkpointed_allocations_survive_a_restart() {
        let dir = tempfile::tempdir().expect("tmp");
        let dm = DeviceManager::start(&dir.path().join("dp"), dir.path()).expect("start");
        let resp = pb::ContainerAllocateResponse {
            envs: [("DEV".to_string(), "a".to_string())].into(),
            mounts: vec![pb::Mount {
                container_path: "/dev/x".into(),
                host_path: "/tmp/x".into(),
                read_only: true,
            }],
            devices: vec![pb::DeviceSpec {
                container_path: "/dev/ttyX".into(),
                host_path: "/dev/ttyUSB0".into(),
                permissions: "rw".into(),
            }],
            annotations: Default::default(),
            cdi_devices: vec![pb::CdiDevice {
                name: "example.com/resource=a".into(),
            }],
        };
        {
            let mut st = lock(&dm.state);
            st.devices.insert(
                "example.com/resource".into(),
                [("a".to_string(), true)].into(),
            );
            st.allocations.push(Allocation {
                pod_uid: "u1".into(),
                container: "c".into(),
                resource: "example.com/resource".into(),
                ids: vec!["a".into()],
                resp,
                restored: false,
            });
        }
        dm.write_checkpoint();
        drop(dm);
        let dir2 = dir.path().join("dp2");
        let again = DeviceManager::start(&dir2, dir.path()).expect("restart");
        assert!(again.holds_restored("u1", "example.com/resource"));
        assert!(again.is_device_plugin_resource("example.com/resource"));
        assert_eq!(again.capacity().1.get("example.com/resource"), Some(&0));
        // Re-admission reuses the allocation: no plugin is needed.
        again.allocate(&pod("u1", 1)).expect("reused");
        let o = again.container_options("u1", "c").expect("options");
        assert_eq!(o.envs, vec![("DEV".to_string(), "a".to_string())]);
        assert_eq!(o.mounts[0].container_path, "/dev/x");
        assert!(o.mounts[0].readonly);
        assert_eq!(o.devices[0].host_path, "/dev/ttyUSB0");
        assert_eq!(o.cdi_devices, vec!["example.com/resource=a".to_string()]);
        again.retain_pods(&BTreeSet::new());
        assert!(again.allocations().is_empty());
    }
}
