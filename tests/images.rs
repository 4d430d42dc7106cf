//! Images against a real containerd: `nanolet images import` of generated OCI-layout and
//! docker-archive tarballs (plain and gzip), the images directory, pods with
//! `imagePullPolicy: Never` running the imported images, idempotent re-import, corrupt
//! archives, ErrImagePull/ImagePullBackOff with the kubelet's backoff, and registry
//! credentials (node config.json and imagePullSecrets from the local store) against a tiny
//! fake registry.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::agent::{NODE, Nanolet};
use common::{Containerd, test_images, wait_for};
use nanolet::runtime::Runtime;
use serde_json::Value;

fn nanolet_bin() -> &'static str {
    env!("CARGO_BIN_EXE_nanolet")
}

fn sh(cmd: &str) {
    let out = Command::new("sh").args(["-ec", cmd]).output().expect("sh");
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn import(ctd: &Containerd, root: &Path, files: &[&Path]) -> Output {
    Command::new(nanolet_bin())
        .args(["images", "import"])
        .arg(format!("--container-runtime-endpoint={}", ctd.endpoint()))
        .arg(format!("--root-dir={}", root.display()))
        .args(files)
        .output()
        .expect("run nanolet images import")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Unpacks the busybox OCI test archive into `dir`.
fn extract_busybox(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    let tar = test_images().join("busybox.tar");
    sh(&format!("tar -C {} -xf {}", dir.display(), tar.display()));
}

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn blob(layout: &Path, digest: &str) -> PathBuf {
    layout.join("blobs/sha256").join(&digest[7..])
}

/// An OCI-layout tarball of the busybox image named `name`.
fn oci_archive(work: &Path, name: &str, out: &Path) {
    let d = work.join(format!("oci-{}", name.replace(['/', ':'], "_")));
    extract_busybox(&d);
    let mut index = read_json(&d.join("index.json"));
    index["manifests"][0]["annotations"]["io.containerd.image.name"] = Value::from(name);
    fs::write(d.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
    sh(&format!("tar -C {} -cf {} .", d.display(), out.display()));
}

/// A `docker save`-style archive (manifest.json, <config>.json, <id>/layer.tar uncompressed)
/// of the busybox image tagged `tag`.
fn docker_archive(work: &Path, tag: &str, out: &Path) {
    let src = work.join("docker-src");
    extract_busybox(&src);
    let index = read_json(&src.join("index.json"));
    let mdigest = index["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let manifest = read_json(&blob(&src, &mdigest));
    let cdigest = manifest["config"]["digest"].as_str().unwrap().to_string();
    let ldigest = manifest["layers"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let d = work.join("docker");
    fs::create_dir_all(d.join("layer1")).unwrap();
    fs::copy(
        blob(&src, &cdigest),
        d.join(format!("{}.json", &cdigest[7..])),
    )
    .unwrap();
    sh(&format!(
        "gzip -dc {} > {}",
        blob(&src, &ldigest).display(),
        d.join("layer1/layer.tar").display()
    ));
    let m = serde_json::json!([{
        "Config": format!("{}.json", &cdigest[7..]),
        "RepoTags": [tag],
        "Layers": ["layer1/layer.tar"],
    }]);
    fs::write(d.join("manifest.json"), serde_json::to_vec(&m).unwrap()).unwrap();
    sh(&format!("tar -C {} -cf {} .", d.display(), out.display()));
}

fn pod_yaml(name: &str, image: &str, policy: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: Never\n{extra_spec}  containers:\n  - name: c\n    image: {image}\n    imagePullPolicy: {policy}\n    command: [sh, -c, 'echo hello from {name}']\n"
    )
}

fn container_log(n: &Nanolet, pod: &Value, name: &str) -> String {
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    let p = n.pod_logs().join(format!(
        "default_{name}-{}_{uid}/c/0.log",
        NODE.to_lowercase()
    ));
    fs::read_to_string(&p).unwrap_or_default()
}

/// Runs `name` with `image` and `imagePullPolicy: Never` to completion; checks its output.
fn assert_runs(n: &Nanolet, name: &str, image: &str) {
    n.write(&format!("{name}.yaml"), &pod_yaml(name, image, "Never", ""));
    let p = n.wait_phase(name, "Succeeded");
    let want = format!("hello from {name}");
    let log = wait_for(Duration::from_secs(10), || {
        Some(container_log(n, &p, name)).filter(|l| l.contains(&want))
    });
    assert!(log.is_some(), "{name}: no {want:?} in its log");
}

/// The kubelet runs images it finds in the runtime (imagePullPolicy Never: the image must be
/// present, ErrImageNeverPull otherwise); containerd's CRI plugin sees images created through
/// the native images API in namespace k8s.io once they are unpacked into its snapshotter.
#[test]
fn import_oci_docker_and_gzip_archives_then_pods_run_them() {
    let ctd = Containerd::start();
    let work = ctd.tmp().join("img-work");
    fs::create_dir_all(&work).unwrap();
    let root = ctd.tmp().join("nanolet/root");
    let oci = work.join("ocibox.tar");
    oci_archive(&work, "localhost/ocibox:1", &oci);
    let gz_src = work.join("gzbox.tar");
    oci_archive(&work, "localhost/gzbox:1", &gz_src);
    sh(&format!(
        "gzip -c {} > {}.gz",
        gz_src.display(),
        gz_src.display()
    ));
    let gz = work.join("gzbox.tar.gz");
    let docker = work.join("dockerbox.tar");
    docker_archive(&work, "dockerbox:1", &docker);

    let out = import(&ctd, &root, &[&oci, &gz, &docker]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for name in [
        "localhost/ocibox:1",
        "localhost/gzbox:1",
        "docker.io/library/dockerbox:1",
    ] {
        assert!(
            stdout.contains(&format!("imported {name} ")),
            "{name}: {}",
            text(&out)
        );
    }

    // CRI sees them (ImageStatus), with the config digest as the image ID.
    let rt = ctd.runtime();
    for name in [
        "localhost/ocibox:1",
        "localhost/gzbox:1",
        "docker.io/library/dockerbox:1",
    ] {
        let st = rt.image_status(name).expect("ImageStatus");
        let st = st.unwrap_or_else(|| panic!("CRI does not see {name}"));
        assert!(
            st.id.starts_with("sha256:") && st.size > 0,
            "{name}: {st:?}"
        );
    }
    // The pin record lists every image.
    let pins = nanolet::images::pinned_images(&root).expect("pin record");
    assert!(
        pins.contains_key("localhost/ocibox:1")
            && pins.contains_key("docker.io/library/dockerbox:1"),
        "{pins:?}"
    );

    // Re-import is idempotent: nothing written, nothing unpacked, same target digest.
    let again = import(&ctd, &root, &[&oci, &docker]);
    assert!(again.status.success(), "{}", text(&again));
    let again_out = String::from_utf8_lossy(&again.stdout);
    assert_eq!(
        again_out
            .matches("0 layers unpacked, 0 blobs written")
            .count(),
        2,
        "{}",
        text(&again)
    );

    // `images ls` shows them pinned.
    let ls = Command::new(nanolet_bin())
        .args(["images", "ls"])
        .arg(format!("--container-runtime-endpoint={}", ctd.endpoint()))
        .arg(format!("--root-dir={}", root.display()))
        .output()
        .unwrap();
    let ls_out = String::from_utf8_lossy(&ls.stdout);
    let line = ls_out
        .lines()
        .find(|l| l.starts_with("localhost/ocibox:1 "))
        .unwrap_or_else(|| panic!("{}", text(&ls)));
    assert!(
        line.contains("sha256:") && line.trim_end().ends_with("yes"),
        "{line}"
    );

    // Pods with imagePullPolicy Never run all three.
    let n = Nanolet::start(&ctd, &[]);
    assert_runs(&n, "ocibox", "localhost/ocibox:1");
    assert_runs(&n, "gzbox", "localhost/gzbox:1");
    assert_runs(&n, "dockerbox", "dockerbox:1");
}

/// A truncated or corrupt archive is refused before anything reaches containerd: a clear
/// error naming the file, exit status 1, and no image.
#[test]
fn corrupt_archives_give_a_clear_error_and_leave_no_image() {
    let ctd = Containerd::start();
    let work = ctd.tmp().join("img-work");
    fs::create_dir_all(&work).unwrap();
    let root = ctd.tmp().join("root");
    let full = work.join("full.tar");
    oci_archive(&work, "localhost/broken:1", &full);
    let bytes = fs::read(&full).unwrap();
    let cut = work.join("cut.tar");
    fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let gz = work.join("cut.tar.gz");
    sh(&format!(
        "gzip -c {} | head -c 20000 > {}",
        full.display(),
        gz.display()
    ));

    let out = import(&ctd, &root, &[&cut, &gz]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:", cut.display())), "{err}");
    assert!(
        err.contains("truncated") || err.contains("unexpected end"),
        "{err}"
    );
    assert!(
        err.contains("2 of 2 archives failed") && err.contains("cut.tar.gz"),
        "{err}"
    );
    assert!(
        ctd.runtime()
            .image_status("localhost/broken:1")
            .unwrap()
            .is_none()
    );
    assert!(nanolet::images::pinned_images(&root).unwrap().is_empty());
}

/// The images directory (k3s's agent/images model): an archive present at start is imported
/// and a pod waiting for it (ErrImageNeverPull) starts; one dropped in later is imported too;
/// a restart does not import again (size+mtime state); a bad file is an event, not a crash.
#[test]
fn images_directory_imports_at_start_and_on_new_files() {
    let ctd = Containerd::start();
    let work = ctd.tmp().join("img-work");
    fs::create_dir_all(&work).unwrap();
    let images = ctd.tmp().join("nanolet/root/images");
    fs::create_dir_all(&images).unwrap();
    oci_archive(&work, "localhost/early:1", &images.join("early.tar"));
    let mut n = Nanolet::start(&ctd, &[]);
    assert_runs(&n, "early", "localhost/early:1");

    // A pod for an image that is not there yet waits, then runs once the archive appears.
    n.write(
        "late.yaml",
        &pod_yaml("late", "localhost/late:1", "Never", ""),
    );
    n.wait_pod("late", "ErrImageNeverPull", |p| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ErrImageNeverPull"
    });
    let staged = work.join("late.tar");
    oci_archive(&work, "localhost/late:1", &staged);
    fs::rename(&staged, images.join("late.tar")).unwrap();
    let started = Instant::now();
    n.wait_phase("late", "Succeeded");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "late pod took {:?}",
        started.elapsed()
    );

    // A broken archive: a Warning event naming it; the agent stays healthy.
    fs::write(images.join("junk.tar"), b"not a tar archive at all").unwrap();
    let ev = wait_for(Duration::from_secs(20), || {
        let body = n.get("/api/v1/namespaces/default/events")?;
        let v: Value = serde_json::from_str(&body).ok()?;
        v["items"]
            .as_array()?
            .iter()
            .find(|e| e["reason"] == "ImageImportFailed")
            .cloned()
    })
    .unwrap_or_else(|| panic!("no ImageImportFailed event\n{}", n.log_tail()));
    assert!(
        ev["message"].as_str().unwrap_or("").contains("junk.tar"),
        "{ev}"
    );
    assert_eq!(n.get("/healthz").as_deref(), Some("ok"));

    // Restart: the state file says both are imported; nothing is imported again.
    let before = fs::read_to_string(&n.log)
        .unwrap_or_default()
        .matches("importing image archive file=")
        .count();
    n.stop();
    n.spawn();
    n.write(
        "again.yaml",
        &pod_yaml("again", "localhost/early:1", "Never", ""),
    );
    n.wait_phase("again", "Succeeded");
    let log = fs::read_to_string(&n.log).unwrap_or_default();
    let after = log.matches("importing image archive file=").count();
    // Only junk.tar (failed, so not remembered) is tried again.
    assert_eq!(after - before, 1, "{}", n.log_tail());
}

fn waiting_reason(p: &Value) -> String {
    p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// The kubelet's image pull back-off (pkg/kubelet/images: flowcontrol.NewBackOff(10s, 300s)):
/// a failed pull is `ErrImagePull`, the status then shows `ImagePullBackOff` while the next
/// pull waits 10 s, then 20 s (doubling up to 300 s).
#[test]
fn missing_registry_goes_err_image_pull_then_image_pull_backoff_with_backoff() {
    let ctd = Containerd::start();
    // A port nothing listens on: the pull fails fast with "connection refused".
    let port = common::agent::free_port();
    let image = format!("127.0.0.1:{port}/nope/busybox:1");
    let n = Nanolet::start(&ctd, &[]);
    n.write("nope.yaml", &pod_yaml("nope", &image, "IfNotPresent", ""));
    let p = n.wait_pod("nope", "ErrImagePull", |p| {
        waiting_reason(p) == "ErrImagePull"
    });
    assert_eq!(p["status"]["phase"], "Pending");
    n.wait_pod("nope", "ImagePullBackOff", |p| {
        waiting_reason(p) == "ImagePullBackOff"
    });
    let p = n.pod("nope").unwrap();
    let msg = p["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or("");
    assert_eq!(msg, format!("Back-off pulling image \"{image}\""));

    // The pull attempts, timed by nanolet's own log lines: 10 s after the first failure,
    // then 20 s.
    let failures = |log: &str| -> Vec<std::time::SystemTime> {
        log.lines()
            .filter(|l| l.contains("pulling image failed") && l.contains("nope-node1"))
            .filter_map(|l| nanolet::timeutil::parse_rfc3339(l.split_whitespace().next()?))
            .collect()
    };
    let times = wait_for(Duration::from_secs(45), || {
        Some(failures(&fs::read_to_string(&n.log).unwrap_or_default())).filter(|t| t.len() >= 3)
    })
    .unwrap_or_else(|| panic!("three pull failures expected\n{}", n.log_tail()));
    let gap = |i: usize| times[i + 1].duration_since(times[i]).unwrap_or_default();
    assert!(
        gap(0) >= Duration::from_millis(9_500) && gap(0) <= Duration::from_millis(12_000),
        "first back-off should be 10 s, was {:?}",
        gap(0)
    );
    assert!(
        gap(1) >= Duration::from_millis(19_500) && gap(1) <= Duration::from_millis(22_000),
        "second back-off should be 20 s, was {:?}",
        gap(1)
    );
    // ... and back to ImagePullBackOff after each failure.
    n.wait_pod("nope", "ImagePullBackOff again", |p| {
        waiting_reason(p) == "ImagePullBackOff"
    });
}

fn b64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A registry v2 serving the busybox test image under any repository and tag, over plain
/// HTTP, requiring Basic auth `user:password`. Counts authorised manifest requests.
struct FakeRegistry {
    port: u16,
    authorised: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    server: std::sync::Arc<tiny_http::Server>,
}

impl FakeRegistry {
    fn start(layout: &Path, user: &str, password: &str) -> FakeRegistry {
        let index = read_json(&layout.join("index.json"));
        let mdigest = index["manifests"][0]["digest"]
            .as_str()
            .unwrap()
            .to_string();
        let manifest = fs::read(blob(layout, &mdigest)).unwrap();
        let mt = index["manifests"][0]["mediaType"]
            .as_str()
            .unwrap()
            .to_string();
        let layout = layout.to_path_buf();
        let server = std::sync::Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let port = server.server_addr().to_ip().unwrap().port();
        let want = format!("Basic {}", b64(format!("{user}:{password}").as_bytes()));
        let authorised = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (srv, count) = (server.clone(), authorised.clone());
        std::thread::spawn(move || {
            for req in srv.incoming_requests() {
                let authz = req
                    .headers()
                    .iter()
                    .find(|x| x.field.equiv("Authorization"))
                    .map(|x| x.value.as_str().to_string());
                let h = |k: &str, v: &str| tiny_http::Header::from_bytes(k, v).unwrap();
                if authz.as_deref() != Some(want.as_str()) {
                    let r = tiny_http::Response::from_string("unauthorized")
                        .with_status_code(401)
                        .with_header(h("WWW-Authenticate", "Basic realm=\"nanolet-test\""));
                    let _ = req.respond(r);
                    continue;
                }
                let url = req.url().to_string();
                let resp = if url == "/v2/" {
                    tiny_http::Response::from_data(b"{}".to_vec())
                } else if url.contains("/manifests/") {
                    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    tiny_http::Response::from_data(manifest.clone())
                        .with_header(h("Content-Type", &mt))
                        .with_header(h("Docker-Content-Digest", &mdigest))
                } else if let Some(d) = url.split("/blobs/").nth(1) {
                    match fs::read(blob(&layout, d)) {
                        Ok(b) => tiny_http::Response::from_data(b)
                            .with_header(h("Docker-Content-Digest", d)),
                        Err(_) => tiny_http::Response::from_data(Vec::new()).with_status_code(404),
                    }
                } else {
                    tiny_http::Response::from_data(Vec::new()).with_status_code(404)
                };
                let _ = req.respond(resp);
            }
        });
        FakeRegistry {
            port,
            authorised,
            server,
        }
    }
}

impl Drop for FakeRegistry {
    fn drop(&mut self) {
        self.server.unblock();
    }
}

/// The kubelet's registry credentials (pkg/credentialprovider): the pod's imagePullSecrets
/// first, then the node's docker config.json, each entry matched to the image by host, port
/// and path prefix; with no match the pull is anonymous. Credentials go to the runtime as
/// CRI AuthConfig and never into logs, events or status.
#[test]
fn registry_credentials_from_config_json_and_pull_secrets() {
    let password = "s3cr3t-pw-42";
    let work_tmp = tempfile::tempdir().unwrap();
    let layout = work_tmp.path().join("layout");
    extract_busybox(&layout);
    let reg = FakeRegistry::start(&layout, "nano", password);
    let host = format!("127.0.0.1:{}", reg.port);
    let ctd = Containerd::start_with_plain_http_registries(std::slice::from_ref(&host));
    let cfg_dir = ctd.tmp().join("creds");
    fs::create_dir_all(cfg_dir.join("secrets")).unwrap();
    let auth = b64(format!("nano:{password}").as_bytes());
    // The node file knows only <host>/node; the pull secret only <host>/pod.
    let node_file = cfg_dir.join("config.json");
    fs::write(
        &node_file,
        format!(r#"{{"auths":{{"{host}/node":{{"auth":"{auth}"}}}}}}"#),
    )
    .unwrap();
    let dcj = b64(format!(
        r#"{{"auths":{{"http://{host}/pod":{{"username":"nano","password":"{password}"}}}}}}"#
    )
    .as_bytes());
    fs::write(
        cfg_dir.join("secrets/regcred.yaml"),
        format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: regcred\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: {dcj}\n"),
    )
    .unwrap();
    let n = Nanolet::start(
        &ctd,
        &[
            format!("--image-credentials-file={}", node_file.display()),
            format!("--secret-dir={}", cfg_dir.join("secrets").display()),
        ],
    );

    // No matching credentials: anonymous, refused by the registry.
    n.write(
        "anon.yaml",
        &pod_yaml(
            "anon",
            &format!("{host}/anon/busybox:1"),
            "IfNotPresent",
            "",
        ),
    );
    let p = n.wait_pod("anon", "ErrImagePull", |p| {
        matches!(
            waiting_reason(p).as_str(),
            "ErrImagePull" | "ImagePullBackOff"
        )
    });
    assert_eq!(p["status"]["phase"], "Pending");
    assert_eq!(reg.authorised.load(std::sync::atomic::Ordering::SeqCst), 0);

    // The node's config.json.
    n.write(
        "node.yaml",
        &pod_yaml(
            "node",
            &format!("{host}/node/busybox:1"),
            "IfNotPresent",
            "",
        ),
    );
    n.wait_phase("node", "Succeeded");
    // An imagePullSecret from the local store.
    let secret_spec = "  imagePullSecrets:\n  - name: regcred\n";
    n.write(
        "pod.yaml",
        &pod_yaml(
            "pod",
            &format!("{host}/pod/busybox:1"),
            "IfNotPresent",
            secret_spec,
        ),
    );
    n.wait_phase("pod", "Succeeded");
    assert!(reg.authorised.load(std::sync::atomic::Ordering::SeqCst) >= 2);

    // The secrets appear nowhere nanolet writes.
    let log = fs::read_to_string(&n.log).unwrap_or_default();
    let pods = n.get("/pods").unwrap_or_default();
    let events = n.get("/api/v1/events").unwrap_or_default();
    for (what, text) in [("log", &log), ("/pods", &pods), ("events", &events)] {
        assert!(
            !text.contains(password) && !text.contains(&auth),
            "credentials in {what}"
        );
    }
}
