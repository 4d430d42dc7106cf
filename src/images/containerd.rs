//! The gRPC side of image import: containerd's native content, images, snapshots, diff and
//! leases services (our subset of containerd's API in proto/containerd/, `cri::containerd_api`), all in namespace `k8s.io`.
//!
//! Like `cri::client`, a dedicated thread drives a current-thread tokio runtime and every
//! call blocks the caller on a std channel; the Unix-socket channel comes from
//! [`crate::cri::client::unix_channel`]. Requests carry the `containerd-namespace` metadata
//! and, while an import runs, `containerd-lease` so containerd's garbage collector keeps what
//! was written until the image records reference it.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::io::Read;
use std::sync::{Mutex, mpsc};
use std::time::{Duration, SystemTime};

use crate::cri::containerd_api::services::content::v1::{
    self as content, content_client::ContentClient,
};
use crate::cri::containerd_api::services::diff::v1::{self as diff, diff_client::DiffClient};
use crate::cri::containerd_api::services::images::v1::{
    self as images, images_client::ImagesClient,
};
use crate::cri::containerd_api::services::leases::v1::{
    self as leases, leases_client::LeasesClient,
};
use crate::cri::containerd_api::services::snapshots::v1::{
    self as snap, snapshots_client::SnapshotsClient,
};
use crate::cri::containerd_api::types::{Descriptor, Mount};
use tonic::transport::Channel;

use crate::cri::client::K8S_NAMESPACE;

/// Chunk size of Content.Write (containerd's gRPC limit is 16 MiB per message).
const CHUNK: usize = 1 << 20;
/// Deadline of one small call.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Deadline of one layer write or apply (a big layer on an SD card is slow).
const LONG_TIMEOUT: Duration = Duration::from_secs(3600);

#[derive(Debug, thiserror::Error)]
pub enum ContainerdError {
    #[error("{op} {target}: {code:?}: {message}")]
    Call {
        op: &'static str,
        target: String,
        code: tonic::Code,
        message: String,
    },
    #[error("{op} {target}: {message}")]
    Local {
        op: &'static str,
        target: String,
        message: String,
    },
}

impl ContainerdError {
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            ContainerdError::Call {
                code: tonic::Code::NotFound,
                ..
            }
        )
    }
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            ContainerdError::Call {
                code: tonic::Code::Unavailable | tonic::Code::DeadlineExceeded,
                ..
            }
        )
    }
    fn is_already_exists(&self) -> bool {
        matches!(
            self,
            ContainerdError::Call {
                code: tonic::Code::AlreadyExists,
                ..
            }
        )
    }
}

type Result<T> = std::result::Result<T, ContainerdError>;

/// A content blob's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentInfo {
    pub size: i64,
    pub labels: HashMap<String, String>,
}

/// An image record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRecord {
    pub name: String,
    pub labels: HashMap<String, String>,
    pub target_digest: String,
    pub target_media_type: String,
    pub target_size: i64,
}

/// A client for containerd's native API on one socket.
pub struct Client {
    channel: Channel,
    handle: tokio::runtime::Handle,
    shutdown: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    lease: Mutex<Option<String>>,
    pub snapshotter: String,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("containerd::Client")
            .field("snapshotter", &self.snapshotter)
            .finish()
    }
}

fn local(
    op: &'static str,
    target: impl Into<String>,
    message: impl Into<String>,
) -> ContainerdError {
    ContainerdError::Local {
        op,
        target: target.into(),
        message: message.into(),
    }
}

impl Client {
    /// Creates the client (does not dial: the first call does).
    pub fn connect(endpoint: &str, snapshotter: &str) -> Result<Client> {
        let socket = crate::cri::client::socket_path(endpoint)
            .map_err(|e| local("connect", endpoint, e.message))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| local("connect", endpoint, format!("tokio runtime: {e}")))?;
        let handle = rt.handle().clone();
        let channel = crate::cri::client::unix_channel(&socket, &handle);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("containerd-images".into())
            .spawn(move || {
                rt.block_on(async {
                    let _ = rx.await;
                });
                drop(rt);
            })
            .map_err(|e| local("connect", endpoint, format!("spawning thread: {e}")))?;
        Ok(Client {
            channel,
            handle,
            shutdown: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            lease: Mutex::new(None),
            snapshotter: snapshotter.to_string(),
        })
    }

    fn req<T>(&self, msg: T, timeout: Duration) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        r.set_timeout(timeout);
        r.metadata_mut().insert(
            "containerd-namespace",
            tonic::metadata::MetadataValue::from_static(K8S_NAMESPACE),
        );
        if let Some(l) = self.lease.lock().ok().and_then(|g| g.clone()) {
            if let Ok(v) = tonic::metadata::MetadataValue::try_from(l.as_str()) {
                r.metadata_mut().insert("containerd-lease", v);
            }
        }
        r
    }

    fn run<T, Fut>(&self, op: &'static str, target: &str, deadline: Duration, fut: Fut) -> Result<T>
    where
        T: Send + 'static,
        Fut: Future<Output = std::result::Result<T, tonic::Status>> + Send + 'static,
    {
        let (tx, rx) = mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let out = tokio::time::timeout(deadline, fut).await;
            let _ = tx.send(out);
        });
        match rx.recv_timeout(deadline + Duration::from_secs(5)) {
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(s))) => Err(ContainerdError::Call {
                op,
                target: target.to_string(),
                code: s.code(),
                message: s.message().to_string(),
            }),
            Ok(Err(_)) | Err(mpsc::RecvTimeoutError::Timeout) => Err(ContainerdError::Call {
                op,
                target: target.to_string(),
                code: tonic::Code::DeadlineExceeded,
                message: format!("no reply within {deadline:?}"),
            }),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(local(op, target, "client runtime thread is gone"))
            }
        }
    }

    // ---- leases ----

    /// Creates a lease that expires by itself after `expire` (if nanolet dies mid-import) and
    /// attaches it to every following request until [`Client::end_lease`].
    pub fn begin_lease(&self, id: &str, expire: Duration) -> Result<()> {
        let mut c = LeasesClient::new(self.channel.clone());
        let until = crate::timeutil::rfc3339(SystemTime::now() + expire);
        let mut labels = HashMap::new();
        labels.insert("containerd.io/gc.expire".to_string(), until);
        let req = self.req(
            leases::CreateRequest {
                id: id.to_string(),
                labels,
            },
            CALL_TIMEOUT,
        );
        self.run("Leases.Create", id, CALL_TIMEOUT, async move {
            c.create(req).await.map(|_| ())
        })?;
        if let Ok(mut g) = self.lease.lock() {
            *g = Some(id.to_string());
        }
        Ok(())
    }

    /// Deletes the current lease; what it alone referenced becomes garbage.
    pub fn end_lease(&self) -> Result<()> {
        let id = self.lease.lock().ok().and_then(|mut g| g.take());
        let Some(id) = id else { return Ok(()) };
        let mut c = LeasesClient::new(self.channel.clone());
        let req = self.req(
            leases::DeleteRequest {
                id: id.clone(),
                sync: false,
            },
            CALL_TIMEOUT,
        );
        match self.run("Leases.Delete", &id, CALL_TIMEOUT, async move {
            c.delete(req).await.map(|_| ())
        }) {
            Err(e) if e.is_not_found() => Ok(()),
            r => r,
        }
    }

    // ---- content ----

    /// Content.Info, `None` when the blob is not in the store.
    pub fn content_info(&self, digest: &str) -> Result<Option<ContentInfo>> {
        let mut c = ContentClient::new(self.channel.clone());
        let req = self.req(
            content::InfoRequest {
                digest: digest.to_string(),
            },
            CALL_TIMEOUT,
        );
        match self.run("Content.Info", digest, CALL_TIMEOUT, async move {
            c.info(req).await.map(|r| r.into_inner().info)
        }) {
            Ok(Some(i)) => Ok(Some(ContentInfo {
                size: i.size,
                labels: i.labels,
            })),
            Ok(None) => Ok(None),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Content.Update of just these labels (field paths `labels.<key>`).
    pub fn content_set_labels(
        &self,
        digest: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<()> {
        if labels.is_empty() {
            return Ok(());
        }
        let mut c = ContentClient::new(self.channel.clone());
        let req = self.req(
            content::UpdateRequest {
                info: Some(content::Info {
                    digest: digest.to_string(),
                    labels: labels.clone().into_iter().collect(),
                    ..Default::default()
                }),
                update_mask: Some(prost_types::FieldMask {
                    paths: labels.keys().map(|k| format!("labels.{k}")).collect(),
                }),
            },
            CALL_TIMEOUT,
        );
        self.run("Content.Update", digest, CALL_TIMEOUT, async move {
            c.update(req).await.map(|_| ())
        })
    }

    /// Streams `size` bytes from `data` into the content store (Content.Write: WRITE chunks,
    /// then COMMIT with the expected digest and size, which containerd verifies) with
    /// `labels`. A blob that appeared meanwhile (AlreadyExists) is success.
    pub fn write_blob(
        &self,
        digest: &str,
        size: u64,
        labels: &BTreeMap<String, String>,
        data: &mut dyn Read,
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        let mut c = ContentClient::new(self.channel.clone());
        let total = i64::try_from(size).map_err(|_| local("Content.Write", digest, "too big"))?;
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let wref = format!("nanolet-{}-{nanos}-{digest}", std::process::id());
        let (tx, rx) = tokio::sync::mpsc::channel::<content::WriteContentRequest>(4);
        let req = self.req(
            tokio_stream::wrappers::ReceiverStream::new(rx),
            LONG_TIMEOUT,
        );
        let (done_tx, done_rx) = mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let out = async {
                let mut stream = c.write(req).await?.into_inner();
                let mut last = None;
                while let Some(m) = stream.message().await? {
                    last = Some(m);
                }
                Ok::<_, tonic::Status>(last)
            };
            let out = tokio::time::timeout(LONG_TIMEOUT, out).await;
            let _ = done_tx.send(out);
        });
        let mut offset: u64 = 0;
        let mut buf = vec![0u8; CHUNK];
        let mut send_failed = false;
        loop {
            let n = match read_chunk(data, &mut buf) {
                Ok(n) => n,
                Err(e) => {
                    drop(tx);
                    let _ = done_rx.recv_timeout(CALL_TIMEOUT);
                    return Err(local("Content.Write", digest, format!("reading: {e}")));
                }
            };
            if n == 0 {
                break;
            }
            let msg = content::WriteContentRequest {
                action: content::WriteAction::Write as i32,
                r#ref: wref.clone(),
                total,
                expected: digest.to_string(),
                offset: offset as i64,
                data: buf[..n].to_vec(),
                labels: HashMap::new(),
            };
            if tx.blocking_send(msg).is_err() {
                send_failed = true;
                break;
            }
            offset += n as u64;
            progress(offset);
        }
        if !send_failed {
            if offset != size {
                drop(tx);
                let _ = done_rx.recv_timeout(CALL_TIMEOUT);
                return Err(local(
                    "Content.Write",
                    digest,
                    format!("got {offset} bytes, expected {size}"),
                ));
            }
            let commit = content::WriteContentRequest {
                action: content::WriteAction::Commit as i32,
                r#ref: wref.clone(),
                total,
                expected: digest.to_string(),
                offset: offset as i64,
                data: Vec::new(),
                labels: labels.clone().into_iter().collect(),
            };
            let _ = tx.blocking_send(commit);
        }
        drop(tx);
        let res = match done_rx.recv_timeout(LONG_TIMEOUT + Duration::from_secs(5)) {
            Ok(Ok(Ok(_))) => Ok(()),
            Ok(Ok(Err(s))) => Err(ContainerdError::Call {
                op: "Content.Write",
                target: digest.to_string(),
                code: s.code(),
                message: s.message().to_string(),
            }),
            Ok(Err(_)) | Err(_) => Err(local("Content.Write", digest, "no reply")),
        };
        match res {
            Err(e) if e.is_already_exists() => self.content_set_labels(digest, labels),
            Ok(()) if send_failed => Err(local("Content.Write", digest, "stream closed early")),
            r => r,
        }
    }

    // ---- snapshots + diff ----

    /// Snapshots.Stat: does the committed snapshot `key` exist?
    pub fn snapshot_exists(&self, key: &str) -> Result<bool> {
        let mut c = SnapshotsClient::new(self.channel.clone());
        let req = self.req(
            snap::StatSnapshotRequest {
                snapshotter: self.snapshotter.clone(),
                key: key.to_string(),
            },
            CALL_TIMEOUT,
        );
        match self.run("Snapshots.Stat", key, CALL_TIMEOUT, async move {
            c.stat(req).await.map(|_| ())
        }) {
            Ok(()) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Unpacks one layer: Snapshots.Prepare(key, parent) -> Diff.Apply -> Snapshots.Commit
    /// (name = chain ID). The prepared snapshot is removed again when a step fails.
    pub fn unpack_layer(
        &self,
        layer: &super::archive::Layer,
        chain_id: &str,
        parent: &str,
    ) -> Result<()> {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let key = format!("extract-{nanos}-{chain_id}");
        let mut labels = HashMap::new();
        labels.insert(
            "containerd.io/snapshot.ref".to_string(),
            chain_id.to_string(),
        );
        let mut sc = SnapshotsClient::new(self.channel.clone());
        let req = self.req(
            snap::PrepareSnapshotRequest {
                snapshotter: self.snapshotter.clone(),
                key: key.clone(),
                parent: parent.to_string(),
                labels: labels.clone(),
            },
            CALL_TIMEOUT,
        );
        let mounts: Vec<Mount> = self.run("Snapshots.Prepare", &key, CALL_TIMEOUT, async move {
            sc.prepare(req).await.map(|r| r.into_inner().mounts)
        })?;
        let res = self.apply_and_commit(layer, &key, chain_id, mounts, labels);
        // Another import committed the same chain ID meanwhile: same content, drop ours.
        let raced = matches!(&res, Err(e) if e.is_already_exists());
        if res.is_err() {
            let mut sc = SnapshotsClient::new(self.channel.clone());
            let req = self.req(
                snap::RemoveSnapshotRequest {
                    snapshotter: self.snapshotter.clone(),
                    key: key.clone(),
                },
                CALL_TIMEOUT,
            );
            if let Err(e) = self.run("Snapshots.Remove", &key, CALL_TIMEOUT, async move {
                sc.remove(req).await.map(|_| ())
            }) {
                tracing::warn!(snapshot = %key, error = %e, "removing a failed unpack's snapshot");
            }
        }
        if raced { Ok(()) } else { res }
    }

    fn apply_and_commit(
        &self,
        layer: &super::archive::Layer,
        key: &str,
        chain_id: &str,
        mounts: Vec<Mount>,
        labels: HashMap<String, String>,
    ) -> Result<()> {
        let mut dc = DiffClient::new(self.channel.clone());
        let req = self.req(
            diff::ApplyRequest {
                diff: Some(Descriptor {
                    media_type: layer.media_type.clone(),
                    digest: layer.digest.clone(),
                    size: layer.size as i64,
                    annotations: HashMap::new(),
                }),
                mounts,
                payloads: HashMap::new(),
                sync_fs: false,
            },
            LONG_TIMEOUT,
        );
        let applied = self.run("Diff.Apply", &layer.digest, LONG_TIMEOUT, async move {
            dc.apply(req).await.map(|r| r.into_inner().applied)
        })?;
        if let Some(a) = applied {
            if a.digest != layer.diff_id {
                return Err(local(
                    "Diff.Apply",
                    &layer.digest,
                    format!(
                        "uncompressed layer is {} but the image config says {}",
                        a.digest, layer.diff_id
                    ),
                ));
            }
        }
        let mut sc = SnapshotsClient::new(self.channel.clone());
        let req = self.req(
            snap::CommitSnapshotRequest {
                snapshotter: self.snapshotter.clone(),
                name: chain_id.to_string(),
                key: key.to_string(),
                labels,
            },
            CALL_TIMEOUT,
        );
        self.run("Snapshots.Commit", chain_id, CALL_TIMEOUT, async move {
            sc.commit(req).await.map(|_| ())
        })
    }

    // ---- images ----

    /// Images.Get, `None` when there is no such image.
    pub fn get_image(&self, name: &str) -> Result<Option<ImageRecord>> {
        let mut c = ImagesClient::new(self.channel.clone());
        let req = self.req(
            images::GetImageRequest {
                name: name.to_string(),
            },
            CALL_TIMEOUT,
        );
        match self.run("Images.Get", name, CALL_TIMEOUT, async move {
            c.get(req).await.map(|r| r.into_inner().image)
        }) {
            Ok(i) => Ok(i.map(record)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Images.List (all images in `k8s.io`).
    pub fn list_images(&self) -> Result<Vec<ImageRecord>> {
        let mut c = ImagesClient::new(self.channel.clone());
        let req = self.req(
            images::ListImagesRequest {
                filters: Vec::new(),
            },
            CALL_TIMEOUT,
        );
        let imgs = self.run("Images.List", "", CALL_TIMEOUT, async move {
            c.list(req).await.map(|r| r.into_inner().images)
        })?;
        Ok(imgs.into_iter().map(record).collect())
    }

    /// Images.Create, or Images.Update (target and labels) when the name exists.
    pub fn put_image(&self, img: &ImageRecord) -> Result<()> {
        let image = images::Image {
            name: img.name.clone(),
            labels: img.labels.clone(),
            target: Some(Descriptor {
                media_type: img.target_media_type.clone(),
                digest: img.target_digest.clone(),
                size: img.target_size,
                annotations: HashMap::new(),
            }),
            created_at: None,
            updated_at: None,
        };
        let mut c = ImagesClient::new(self.channel.clone());
        let req = self.req(
            images::CreateImageRequest {
                image: Some(image.clone()),
                source_date_epoch: None,
            },
            CALL_TIMEOUT,
        );
        match self.run("Images.Create", &img.name, CALL_TIMEOUT, async move {
            c.create(req).await.map(|_| ())
        }) {
            Err(e) if e.is_already_exists() => {}
            r => return r,
        }
        let mut c = ImagesClient::new(self.channel.clone());
        let mut paths = vec!["target".to_string()];
        paths.extend(img.labels.keys().map(|k| format!("labels.{k}")));
        let req = self.req(
            images::UpdateImageRequest {
                image: Some(image),
                update_mask: Some(prost_types::FieldMask { paths }),
                source_date_epoch: None,
            },
            CALL_TIMEOUT,
        );
        self.run("Images.Update", &img.name, CALL_TIMEOUT, async move {
            c.update(req).await.map(|_| ())
        })
    }
}

fn record(i: images::Image) -> ImageRecord {
    let t = i.target.unwrap_or_default();
    ImageRecord {
        name: i.name,
        labels: i.labels,
        target_digest: t.digest,
        target_media_type: t.media_type,
        target_size: t.size,
    }
}

fn read_chunk(r: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.end_lease();
        if let Some(tx) = self.shutdown.lock().ok().and_then(|mut g| g.take()) {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.lock().ok().and_then(|mut g| g.take()) {
            let _ = t.join();
        }
    }
}
