//! Images: air-gapped import of OCI-layout and docker-archive tarballs into containerd
//! ([`import_archive`]), the pin record image GC must respect ([`pinned_images`]), the images
//! directory watcher ([`dir`]), registry credentials for pulls ([`credentials`]) and a pod's
//! image manager: pull policy, pull back-off and image events ([`manager`], the kubelet's
//! pkg/kubelet/images).
//!
//! Import data flow (all in containerd namespace `k8s.io`, under one lease):
//! archive --pass 1 (hash, keep JSON)--> [`archive::plan`] --> Content.Write of missing blobs
//! (pass 2 streams layers) --> unpack (Snapshots.Prepare / Diff.Apply / Snapshots.Commit per
//! chain ID) --> Images.Create/Update with the CRI labels --> pin record --> lease deleted.

pub mod archive;
pub(crate) mod cli;
pub(crate) mod containerd;
pub(crate) mod credentials;
pub(crate) mod dir;
pub(crate) mod manager;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use archive::{ArchiveError, Plan, Platform, Source};
use containerd::{Client, ContainerdError, ImageRecord};

/// The snapshotter containerd's CRI plugin uses by default.
pub const DEFAULT_SNAPSHOTTER: &str = "overlayfs";
/// containerd's CRI plugin marks the images it manages with this label (value `managed`).
pub const LABEL_CRI_MANAGED: &str = "io.cri-containerd.image";
/// containerd 1.7+'s CRI plugin reports images with this label (value `pinned`) as pinned.
pub const LABEL_CRI_PINNED: &str = "io.cri-containerd.pinned";
/// nanolet's pin record, below the root dir.
pub const PIN_FILE: &str = "pinned-images.json";
/// How long the import lease lives if nanolet dies before deleting it.
const LEASE_EXPIRY: Duration = Duration::from_secs(4 * 3600);

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error("{file}: {source}")]
    Containerd {
        file: PathBuf,
        #[source]
        source: ContainerdError,
    },
    #[error("pin record {path}: {reason}")]
    Pins { path: PathBuf, reason: String },
}

impl ImageError {
    /// containerd did not answer (down or restarting): worth retrying later.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, ImageError::Containerd { source, .. } if source.is_unavailable())
    }
}

type Result<T> = std::result::Result<T, ImageError>;

/// What [`import_archive`] reports while it works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Pass 1: bytes of the archive's members read so far.
    Scan { bytes: u64 },
    /// A blob being written to the content store.
    Write {
        digest: String,
        done: u64,
        total: u64,
    },
    /// Layer `index` (0-based) of `count` being unpacked, or found unpacked already.
    Unpack {
        image: String,
        index: usize,
        count: usize,
        existed: bool,
    },
}

/// Import settings.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    pub platform: Platform,
    /// The platform came from `--arch`: import images of another platform too.
    pub forced_platform: bool,
    /// Where the pin record lives (`--root-dir`); `None` skips it.
    pub root_dir: Option<PathBuf>,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            platform: Platform::host(),
            forced_platform: false,
            root_dir: None,
        }
    }
}

/// One imported image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    pub names: Vec<String>,
    /// The image record's target (index or manifest) digest.
    pub digest: String,
    /// The config digest (the CRI image ID).
    pub config_digest: String,
    pub platform: String,
    /// Blobs written now vs. already in the store.
    pub written: usize,
    pub reused: usize,
    /// Layers unpacked now vs. already unpacked.
    pub unpacked: usize,
}

fn ctd_err(file: &Path) -> impl Fn(ContainerdError) -> ImageError + '_ {
    move |source| ImageError::Containerd {
        file: file.to_path_buf(),
        source,
    }
}

/// Imports every named image of `file` (plain, .gz or .zst tar; OCI layout or docker-archive).
/// Nothing is written to containerd before the whole archive was read and checked, so a
/// truncated or corrupt archive leaves no trace.
pub fn import_archive(
    client: &Client,
    file: &Path,
    opts: &ImportOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<Imported>> {
    let scan = archive::scan(file, &mut |bytes| progress(Progress::Scan { bytes }))?;
    let plan = archive::plan(file, &scan, &opts.platform, opts.forced_platform)?;
    for s in &plan.skipped {
        tracing::warn!(file = %file.display(), "skipping an unnamed image: {s}");
    }
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let lease = format!("nanolet-import-{}-{nanos}", std::process::id());
    client
        .begin_lease(&lease, LEASE_EXPIRY)
        .map_err(ctd_err(file))?;
    let res = import_planned(client, file, &plan, progress);
    // Deleting the lease leaves only what the image records reference.
    if let Err(e) = client.end_lease() {
        tracing::warn!(file = %file.display(), lease, error = %e, "deleting the import lease");
    }
    let imported = res?;
    if let Some(root) = &opts.root_dir {
        record_pins(root, file, &imported)?;
    }
    Ok(imported)
}

fn import_planned(
    client: &Client,
    file: &Path,
    plan: &Plan,
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<Imported>> {
    let missing = missing_blobs(client, file, plan)?;
    write_missing_blobs(client, file, plan, &missing, progress)?;
    plan.images
        .iter()
        .map(|img| unpack_and_name(client, file, plan, img, missing.len(), progress))
        .collect()
}

/// Which of the plan's blobs containerd lacks; present ones get any label they lack.
fn missing_blobs(client: &Client, file: &Path, plan: &Plan) -> Result<BTreeSet<String>> {
    let err = ctd_err(file);
    let mut missing: BTreeSet<String> = BTreeSet::new();
    for b in &plan.blobs {
        match client.content_info(&b.digest).map_err(&err)? {
            Some(info) => {
                let lacking: BTreeMap<String, String> = b
                    .labels
                    .iter()
                    .filter(|(k, v)| info.labels.get(*k) != Some(*v))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                client
                    .content_set_labels(&b.digest, &lacking)
                    .map_err(&err)?;
            }
            None => {
                missing.insert(b.digest.clone());
            }
        }
    }
    Ok(missing)
}

/// Writes the missing blobs: layers straight from the archive, then those held in memory.
fn write_missing_blobs(
    client: &Client,
    file: &Path,
    plan: &Plan,
    missing: &BTreeSet<String>,
    progress: &mut dyn FnMut(Progress),
) -> Result<()> {
    let err = ctd_err(file);
    // Pass 2: layers straight from the archive.
    let wanted: BTreeMap<String, &archive::Blob> = plan
        .blobs
        .iter()
        .filter(|b| missing.contains(&b.digest))
        .filter_map(|b| match &b.source {
            Source::Archive(p) => Some((p.clone(), b)),
            Source::Memory(_) => None,
        })
        .collect();
    if !wanted.is_empty() {
        let paths: BTreeSet<String> = wanted.keys().cloned().collect();
        archive::for_each_entry(file, &paths, &mut |path, r: &mut dyn Read| {
            let Some(b) = wanted.get(path) else {
                return Ok(());
            };
            let mut cb = |done| {
                progress(Progress::Write {
                    digest: b.digest.clone(),
                    done,
                    total: b.size,
                })
            };
            client.write_blob(&b.digest, b.size, &b.labels, r, &mut cb)
        })
        .map_err(|e| match e {
            archive::EntryError::Callback(source) => ImageError::Containerd {
                file: file.to_path_buf(),
                source,
            },
            archive::EntryError::Archive(e) => ImageError::Archive(e),
        })?;
    }
    for b in &plan.blobs {
        if let (true, Source::Memory(bytes)) = (missing.contains(&b.digest), &b.source) {
            let mut r: &[u8] = bytes;
            client
                .write_blob(&b.digest, b.size, &b.labels, &mut r, &mut |_| {})
                .map_err(&err)?;
        }
    }
    Ok(())
}

/// Unpacks one image's layers (those not yet snapshotted) and creates its image records;
/// `written` blobs of the plan were new.
fn unpack_and_name(
    client: &Client,
    file: &Path,
    plan: &Plan,
    img: &archive::ImagePlan,
    written: usize,
    progress: &mut dyn FnMut(Progress),
) -> Result<Imported> {
    let err = ctd_err(file);
    let name = img.names.first().cloned().unwrap_or_default();
    let diff_ids: Vec<String> = img.layers.iter().map(|l| l.diff_id.clone()).collect();
    let chain = archive::chain_ids(&diff_ids);
    let mut unpacked = 0;
    for (i, layer) in img.layers.iter().enumerate() {
        let existed = client.snapshot_exists(&chain[i]).map_err(&err)?;
        progress(Progress::Unpack {
            image: name.clone(),
            index: i,
            count: img.layers.len(),
            existed,
        });
        if !existed {
            let parent = if i == 0 { "" } else { chain[i - 1].as_str() };
            client
                .unpack_layer(layer, &chain[i], parent)
                .map_err(&err)?;
            unpacked += 1;
        }
    }
    if let Some(top) = chain.last() {
        let mut l = BTreeMap::new();
        l.insert(
            format!("containerd.io/gc.ref.snapshot.{}", client.snapshotter),
            top.clone(),
        );
        client
            .content_set_labels(&img.config_digest, &l)
            .map_err(&err)?;
    }
    let mut labels = HashMap::new();
    labels.insert(LABEL_CRI_MANAGED.to_string(), "managed".to_string());
    labels.insert(LABEL_CRI_PINNED.to_string(), "pinned".to_string());
    for n in &img.names {
        client
            .put_image(&ImageRecord {
                name: n.clone(),
                labels: labels.clone(),
                target_digest: img.target_digest.clone(),
                target_media_type: img.target_media_type.clone(),
                target_size: img.target_size as i64,
            })
            .map_err(&err)?;
    }
    let blobs_of_image = plan.blobs.len();
    Ok(Imported {
        names: img.names.clone(),
        digest: img.target_digest.clone(),
        config_digest: img.config_digest.clone(),
        platform: img.platform.clone(),
        written,
        reused: blobs_of_image - written,
        unpacked,
    })
}

// ---------------------------------------------------------------------------------------------
// pin record

/// One pinned image in nanolet's pin record.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PinnedImage {
    /// Target (index or manifest) digest.
    pub digest: String,
    /// Config digest: the CRI image ID.
    pub image_id: String,
    /// The archive it came from.
    pub source: String,
    pub imported_at: String,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct PinFile {
    images: BTreeMap<String, PinnedImage>,
}

/// The images nanolet imported and pinned, by name (`<root-dir>/pinned-images.json`). Image GC
/// (and anything else that removes images) must leave every one of these alone; match on the
/// name or on `image_id` (CRI `Image.id`). A missing file is an empty set.
pub fn pinned_images(root_dir: &Path) -> Result<BTreeMap<String, PinnedImage>> {
    let path = root_dir.join(PIN_FILE);
    // A damaged record is moved aside (reported) and starts afresh, so imports keep working;
    // image GC stays off while the quarantined copy exists (see `pins_trustworthy`).
    match crate::statefile::read_or_quarantine::<PinFile>(&path) {
        Ok(f) => Ok(f.map(|f| f.images).unwrap_or_default()),
        Err(e) => Err(ImageError::Pins {
            path,
            reason: e.to_string(),
        }),
    }
}

/// False while a damaged pin record sits quarantined beside the current one: pins may have
/// been lost, so nothing that removes images should trust the current set. Deleting the
/// `pinned-images.json.corrupt-*` file (after re-importing what matters) restores trust.
pub fn pins_trustworthy(root_dir: &Path) -> bool {
    !crate::statefile::has_quarantined(&root_dir.join(PIN_FILE))
}

/// Whether `image` (a name, or a CRI image ID) is pinned by nanolet.
pub fn is_pinned(pins: &BTreeMap<String, PinnedImage>, image: &str) -> bool {
    pins.contains_key(image) || pins.values().any(|p| p.image_id == image)
}

fn record_pins(root_dir: &Path, file: &Path, imported: &[Imported]) -> Result<()> {
    let path = root_dir.join(PIN_FILE);
    let perr = |reason: String| ImageError::Pins {
        path: path.clone(),
        reason,
    };
    std::fs::create_dir_all(root_dir).map_err(|e| perr(e.to_string()))?;
    // The CLI and the agent may both import: serialise read-modify-write with a lock file.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(root_dir.join(".pinned-images.lock"))
        .map_err(|e| perr(format!("lock file: {e}")))?;
    let _lock = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| perr(format!("lock: {e}")))?;
    let mut pins = pinned_images(root_dir)?;
    let now = crate::timeutil::rfc3339(SystemTime::now());
    for img in imported {
        for n in &img.names {
            pins.insert(
                n.clone(),
                PinnedImage {
                    digest: img.digest.clone(),
                    image_id: img.config_digest.clone(),
                    source: file.display().to_string(),
                    imported_at: now.clone(),
                },
            );
        }
    }
    let body =
        serde_json::to_vec_pretty(&PinFile { images: pins }).map_err(|e| perr(e.to_string()))?;
    crate::statefile::write_atomic(&path, &body).map_err(|e| perr(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_roundtrip_and_lookup() {
        let dir = tempfile::tempdir().unwrap();
        assert!(pinned_images(dir.path()).unwrap().is_empty());
        let imp2 = || Imported {
            names: vec!["docker.io/library/a:1".into()],
            digest: "sha256:aa".into(),
            config_digest: "sha256:cc".into(),
            platform: "linux/amd64".into(),
            written: 1,
            reused: 0,
            unpacked: 1,
        };
        record_pins(dir.path(), Path::new("/x/a.tar"), &[imp2()]).unwrap();
        let pins = pinned_images(dir.path()).unwrap();
        assert!(is_pinned(&pins, "docker.io/library/a:1"));
        assert!(is_pinned(&pins, "sha256:cc"));
        assert!(!is_pinned(&pins, "docker.io/library/b:1"));
        assert_eq!(pins["docker.io/library/a:1"].source, "/x/a.tar");
        // A damaged record (power loss, disk full) never blocks: it is moved aside, imports
        // start a fresh one, and image GC stops trusting the pins until an operator clears it.
        assert!(pins_trustworthy(dir.path()));
        std::fs::write(dir.path().join(PIN_FILE), "{").unwrap();
        assert!(pinned_images(dir.path()).unwrap().is_empty());
        assert!(!pins_trustworthy(dir.path()));
        record_pins(dir.path(), Path::new("/x/a.tar"), &[imp2()]).unwrap();
        assert!(is_pinned(
            &pinned_images(dir.path()).unwrap(),
            "docker.io/library/a:1"
        ));
    }
}
