//! Node-level reclaim: dead containers and sandboxes, then unused images.
//!
//! Image GC follows the kubelet's image manager: when the image filesystem is at or above
//! `imageGCHighThresholdPercent` used, delete unused images, least recently used first, until
//! usage is down to `imageGCLowThresholdPercent`. An image is in use while any container (running
//! or exited) references it; images younger than `imageMinimumGCAge` (since nanolet first saw
//! them), pinned images (CRI `pinned`, nanolet's imported images, the sandbox image) are never
//! removed. "Last used" is tracked in memory from the runtime's container list, so after a
//! restart every image counts as just used (conservative).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use crate::cri::{ContainerState, ImageInfo, LABEL_POD_UID, Runtime, SandboxState};

/// Image GC policy (KubeletConfiguration names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageGcPolicy {
    /// imageGCHighThresholdPercent (85): GC starts at this usage.
    pub high_percent: u8,
    /// imageGCLowThresholdPercent (80): GC frees down to this usage.
    pub low_percent: u8,
    /// imageMinimumGCAge (2m).
    pub min_age: Duration,
}

impl Default for ImageGcPolicy {
    fn default() -> Self {
        ImageGcPolicy {
            high_percent: 85,
            low_percent: 80,
            min_age: Duration::from_secs(120),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Record {
    first_seen: Instant,
    last_used: Instant,
}

/// The image manager's memory.
#[derive(Debug, Default)]
pub struct ImageGc {
    records: BTreeMap<String, Record>,
}

/// What one detection pass found.
pub struct ImageView {
    pub images: Vec<ImageInfo>,
    /// Image IDs (or references) containers use.
    pub in_use: BTreeSet<String>,
}

fn used_by(img: &ImageInfo, in_use: &BTreeSet<String>) -> bool {
    in_use.contains(&img.id)
        || img.repo_tags.iter().any(|t| in_use.contains(t))
        || img.repo_digests.iter().any(|d| in_use.contains(d))
}

impl ImageGc {
    /// Records what exists and what is used at `now`; forgets images that are gone.
    pub fn detect(&mut self, view: &ImageView, now: Instant) {
        let ids: BTreeSet<&str> = view.images.iter().map(|i| i.id.as_str()).collect();
        self.records.retain(|id, _| ids.contains(id.as_str()));
        for img in &view.images {
            let r = self.records.entry(img.id.clone()).or_insert(Record {
                first_seen: now,
                last_used: now,
            });
            if used_by(img, &view.in_use) {
                r.last_used = now;
            }
        }
    }

    /// The images to delete to free `bytes_to_free`, least recently used first (ties: oldest
    /// first seen). `pinned` are image IDs or references never to delete.
    pub fn plan(
        &self,
        view: &ImageView,
        pinned: &BTreeSet<String>,
        policy: &ImageGcPolicy,
        bytes_to_free: i64,
        now: Instant,
    ) -> Vec<ImageInfo> {
        let mut cands: Vec<(&ImageInfo, Record)> = view
            .images
            .iter()
            .filter(|i| !i.pinned && !used_by(i, &view.in_use) && !used_by(i, pinned))
            .filter_map(|i| self.records.get(&i.id).map(|r| (i, *r)))
            .filter(|(_, r)| now.saturating_duration_since(r.first_seen) >= policy.min_age)
            .collect();
        cands.sort_by(|a, b| {
            a.1.last_used
                .cmp(&b.1.last_used)
                .then(a.1.first_seen.cmp(&b.1.first_seen))
                .then_with(|| a.0.id.cmp(&b.0.id))
        });
        let mut freed = 0i64;
        let mut out = vec![];
        for (img, _) in cands {
            if freed >= bytes_to_free {
                break;
            }
            freed += img.size as i64;
            out.push(img.clone());
        }
        out
    }
}

/// How many bytes image GC must free for a filesystem of `capacity` with `available`: zero
/// below the high threshold, else down to the low threshold.
pub fn bytes_to_free(policy: &ImageGcPolicy, capacity: i64, available: i64) -> i64 {
    if capacity <= 0 {
        return 0;
    }
    let used = capacity - available;
    let usage_percent = used.saturating_mul(100) / capacity;
    if usage_percent < i64::from(policy.high_percent) {
        return 0;
    }
    used - capacity.saturating_mul(i64::from(policy.low_percent)) / 100
}

/// The runtime's images and the images its containers use.
pub fn image_view(rt: &dyn Runtime) -> Option<ImageView> {
    let images = rt
        .list_images()
        .map_err(|e| debug!(error = %e, "ListImages for image GC"))
        .ok()?;
    let containers = rt
        .list_containers()
        .map_err(|e| debug!(error = %e, "ListContainers for image GC"))
        .ok()?;
    let mut in_use = BTreeSet::new();
    for c in containers {
        if !c.image_ref.is_empty() {
            in_use.insert(c.image_ref);
        }
        if !c.image.is_empty() {
            in_use.insert(c.image);
        }
    }
    Some(ImageView { images, in_use })
}

/// Image references image GC must keep besides CRI's own `pinned` flag: the runtime's sandbox
/// image, and the images nanolet imported from archives (its pin record under the root dir;
/// containerd 1.6's CRI does not report the `io.cri-containerd.pinned` label). `None` when the
/// pin record cannot be read: then image GC does nothing rather than guess.
pub fn pinned_images(rt: &dyn Runtime, root_dir: &std::path::Path) -> Option<BTreeSet<String>> {
    if !crate::images::pins_trustworthy(root_dir) {
        warn!(root_dir = %root_dir.display(), "image GC skipped: a damaged pin record was quarantined (pinned-images.json.corrupt-*); re-import your images, then delete that file");
        return None;
    }
    let pins = match crate::images::pinned_images(root_dir) {
        Ok(p) => p,
        Err(e) => {
            warn!(error = %e, "image GC skipped: the pin record is unreadable");
            return None;
        }
    };
    let mut out = BTreeSet::new();
    for (name, p) in pins {
        out.insert(name);
        out.insert(p.image_id);
    }
    if let Some(img) = rt.sandbox_image() {
        out.insert(img);
    }
    Some(out)
}

/// Deletes `plan`; returns the bytes freed (by the images' reported sizes).
pub fn delete_images(rt: &dyn Runtime, plan: &[ImageInfo]) -> i64 {
    let mut freed = 0;
    for img in plan {
        let name = img
            .repo_tags
            .first()
            .cloned()
            .unwrap_or_else(|| img.id.clone());
        match rt.remove_image(&img.id) {
            Ok(()) => {
                info!(image = %name, size = img.size, "image garbage-collected");
                freed += img.size as i64;
            }
            Err(e) => warn!(image = %name, error = %e, "removing image failed"),
        }
    }
    freed
}

/// Dead-container reclaim (the kubelet's container GC with evictNonDeletedPods): removes every
/// exited container except the newest of each container of a pod in `keep_last` (its logs and
/// lastState), and every not-ready sandbox that is not the newest of such a pod. Returns how
/// many objects were removed.
pub fn reclaim_containers(rt: &dyn Runtime, keep_last: &BTreeSet<String>) -> usize {
    let Ok(containers) = rt.list_containers() else {
        return 0;
    };
    let mut removed = 0;
    let mut newest: BTreeMap<(String, String), (u32, i64)> = BTreeMap::new();
    for c in &containers {
        if let Some(uid) = c.labels.get(LABEL_POD_UID) {
            let e = newest
                .entry((uid.clone(), c.name.clone()))
                .or_insert((c.attempt, c.created_at));
            if (c.attempt, c.created_at) > *e {
                *e = (c.attempt, c.created_at);
            }
        }
    }
    let mut live_sandboxes = BTreeSet::new();
    for c in &containers {
        let Some(uid) = c.labels.get(LABEL_POD_UID) else {
            continue;
        };
        if matches!(
            c.state,
            ContainerState::Running | ContainerState::Created | ContainerState::Unknown
        ) {
            live_sandboxes.insert(c.sandbox_id.clone());
            continue;
        }
        let is_newest =
            newest.get(&(uid.clone(), c.name.clone())) == Some(&(c.attempt, c.created_at));
        if keep_last.contains(uid) && is_newest {
            live_sandboxes.insert(c.sandbox_id.clone());
            continue;
        }
        match rt.remove_container(&c.id) {
            Ok(()) => removed += 1,
            Err(e) if e.is_not_found() => {}
            Err(e) => debug!(container = %c.id, error = %e, "removing dead container"),
        }
    }
    if let Ok(sandboxes) = rt.list_pod_sandboxes() {
        let mut newest_sb: BTreeMap<String, (u32, i64)> = BTreeMap::new();
        for s in &sandboxes {
            let e = newest_sb
                .entry(s.uid.clone())
                .or_insert((s.attempt, s.created_at));
            if (s.attempt, s.created_at) > *e {
                *e = (s.attempt, s.created_at);
            }
        }
        for s in sandboxes {
            if s.state == SandboxState::Ready || live_sandboxes.contains(&s.id) {
                continue;
            }
            if keep_last.contains(&s.uid)
                && newest_sb.get(&s.uid) == Some(&(s.attempt, s.created_at))
            {
                continue;
            }
            match rt.remove_pod_sandbox(&s.id) {
                Ok(()) => removed += 1,
                Err(e) if e.is_not_found() => {}
                Err(e) => debug!(sandbox = %s.id, error = %e, "removing dead sandbox"),
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(id: &str, tag: &str, size: u64) -> ImageInfo {
        ImageInfo {
            id: id.into(),
            repo_tags: vec![tag.into()],
            repo_digests: vec![],
            size,
            uid: None,
            username: String::new(),
            pinned: false,
        }
    }

    /// imageGCHighThresholdPercent 85 / Low 80: nothing below 85% used; at 90% free down to 80%.
    #[test]
    fn gc_frees_from_high_down_to_low_threshold() {
        let p = ImageGcPolicy::default();
        assert_eq!(bytes_to_free(&p, 1000, 160), 0); // 84% used
        assert_eq!(bytes_to_free(&p, 1000, 150), 50); // 85% -> 80%
        assert_eq!(bytes_to_free(&p, 1000, 100), 100); // 90% -> 80%
        assert_eq!(bytes_to_free(&p, 0, 0), 0);
    }

    /// LRU by last use; in-use, pinned and too-young images are never chosen.
    #[test]
    fn plan_is_lru_and_skips_used_pinned_and_young_images() {
        let t0 = Instant::now();
        let mut gc = ImageGc::default();
        let mut pinned_img = img("sha256:p", "localhost/pinned:1", 100);
        pinned_img.pinned = true;
        let images = vec![
            img("sha256:a", "a:1", 100),
            img("sha256:b", "b:1", 100),
            img("sha256:c", "c:1", 100),
            img("sha256:ours", "localhost/imported:1", 100),
            pinned_img,
        ];
        // t0: b is in use.
        gc.detect(
            &ImageView {
                images: images.clone(),
                in_use: ["b:1".to_string()].into(),
            },
            t0,
        );
        // t0+10m: a is in use; afterwards nothing is.
        gc.detect(
            &ImageView {
                images: images.clone(),
                in_use: ["sha256:a".to_string()].into(),
            },
            t0 + Duration::from_secs(600),
        );
        let view = ImageView {
            images: images.clone(),
            in_use: BTreeSet::new(),
        };
        let ours: BTreeSet<String> = ["localhost/imported:1".to_string()].into();
        let p = ImageGcPolicy::default();
        let now = t0 + Duration::from_secs(700);
        let plan = gc.plan(&view, &ours, &p, 1000, now);
        let ids: Vec<&str> = plan.iter().map(|i| i.id.as_str()).collect();
        // b and c last used at t0 (c only "seen"), a at t0+10m; pinned ones never.
        assert_eq!(ids, ["sha256:b", "sha256:c", "sha256:a"]);
        // Stops once enough is freed.
        assert_eq!(gc.plan(&view, &ours, &p, 150, now).len(), 2);
        // In use now: not a candidate.
        let busy = ImageView {
            images,
            in_use: ["c:1".to_string()].into(),
        };
        assert!(
            !gc.plan(&busy, &ours, &p, 1000, now)
                .iter()
                .any(|i| i.id == "sha256:c")
        );
        // Younger than imageMinimumGCAge (2m): not a candidate.
        let mut fresh = ImageGc::default();
        fresh.detect(&view, now);
        assert!(
            fresh
                .plan(&view, &ours, &p, 1000, now + Duration::from_secs(119))
                .is_empty()
        );
        assert_eq!(
            fresh
                .plan(&view, &ours, &p, 1000, now + Duration::from_secs(120))
                .len(),
            3
        );
    }
}
