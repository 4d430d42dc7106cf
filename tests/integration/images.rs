//! Images against a real containerd: `nanolet images import` of generated OCI-layout and
//! docker-archive tarballs (plain and gzip) and of the archives real tools write (`ctr images
//! export`, skopeo's oci-archive with gzip and zstd layers and docker-archive, `podman save`
//! in both formats), the images directory, pods with `imagePullPolicy: Never` running the
//! imported images, idempotent re-import, corrupt archives, ErrImagePull/ImagePullBackOff with the kubelet's backoff, and registry
//! credentials (node config.json and imagePullSecrets from the local store) against a tiny
//! fake registry; a containerd whose sandbox image is absent and cannot be pulled.

use nanolet_test_support as support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use nanolet::cri::Runtime;
use serde_json::Value;
use support::agent::{NODE, Nanolet};
use support::{Containerd, test_images, wait_for};

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
pub(crate) fn extract_busybox(dir: &Path) {
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
    let port = support::agent::free_port();
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

pub(crate) fn b64(data: &[u8]) -> String {
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
pub(crate) struct FakeRegistry {
    pub(crate) port: u16,
    pub(crate) authorised: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    server: std::sync::Arc<tiny_http::Server>,
}

impl FakeRegistry {
    pub(crate) fn start(layout: &Path, user: &str, password: &str) -> FakeRegistry {
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

// ---------------------------------------------------------------------------------------------
// Archives that real tools write (issue 16): built at test time by ctr, skopeo and podman
// from the harness's busybox test image, imported with `nanolet images import` into the
// harness's containerd, checked there (containerd's image record and CRI's view) and run.
// `docker save` is not among them: it needs a Docker engine, which these machines do not run.

/// The containerd namespace the ctr tests prepare their images in: k8s.io, where nanolet
/// imports, never sees them.
const TOOLS_NS: &str = "nanolet-tools";

fn sh_out(cmd: &str) -> String {
    let out = Command::new("sh").args(["-ec", cmd]).output().expect("sh");
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ctr` against the test's containerd, in namespace `ns`.
fn ctr(ctd: &Containerd, ns: &str, args: &str) -> String {
    sh_out(&format!(
        "ctr --address {} --namespace {ns} {args}",
        ctd.socket_path().display()
    ))
}

/// Panics, pointing at scripts/install-deps.sh, when `bin` is not installed.
fn require(bin: &str) {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()));
    assert!(
        found,
        "this test needs {bin}: run scripts/install-deps.sh (as root) first"
    );
}

/// Runs `cmd` (skopeo, podman) so that it leaves nothing on this machine outside `tmp`: in a
/// private mount namespace whose /var/lib is an empty tmpfs (containers/image, the library of
/// both, writes its blob-info cache to /var/lib/containers/cache when run as root, whatever
/// the flags say), with TMPDIR below `tmp` (their big temporary files). The namespace dies
/// with the command.
fn tool(tmp: &Path, cmd: &str) -> String {
    require("unshare");
    let tmpdir = tmp.join("tool-tmp");
    fs::create_dir_all(&tmpdir).unwrap();
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-ec"])
        .arg("mount -t tmpfs nanolet-test-tools /var/lib; eval \"$1\"")
        .args(["sh", cmd])
        .env("TMPDIR", &tmpdir)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("unshare");
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// podman with all its state below `dir` (vfs storage: no mounts; no systemd, no events file).
fn podman(dir: &Path) -> String {
    format!(
        "podman --root {d}/storage --runroot {d}/run --tmpdir {d}/tmp --storage-driver vfs --cgroup-manager cgroupfs --events-backend none",
        d = dir.display()
    )
}

fn write_json(p: &Path, v: &Value) {
    fs::write(p, serde_json::to_vec(v).unwrap()).unwrap();
}

/// Writes `bytes` as a blob of `layout`; returns its descriptor fields (digest, size).
fn put_blob(layout: &Path, bytes: &[u8]) -> (String, usize) {
    let d = nanolet::images::archive::sha256_digest(bytes);
    fs::write(blob(layout, &d), bytes).unwrap();
    (d, bytes.len())
}

/// The busybox OCI layout in `dir` with one more gzip layer holding `/etc/marker` (content
/// `marker`): a layer no other image has, so importing it really unpacks something.
fn busybox_with_marker(work: &Path, dir: &str, marker: &str) -> PathBuf {
    let d = work.join(dir);
    extract_busybox(&d);
    let files = work.join(format!("{dir}-layer"));
    fs::create_dir_all(files.join("etc")).unwrap();
    fs::write(files.join("etc/marker"), format!("{marker}\n")).unwrap();
    let layer_tar = work.join(format!("{dir}-layer.tar"));
    sh(&format!(
        "tar -C {} --owner=0 --group=0 -cf {} etc",
        files.display(),
        layer_tar.display()
    ));
    let diff_id = nanolet::images::archive::sha256_digest(&fs::read(&layer_tar).unwrap());
    sh(&format!("gzip -n -k {}", layer_tar.display()));
    let gz = fs::read(work.join(format!("{dir}-layer.tar.gz"))).unwrap();
    let (ldigest, lsize) = put_blob(&d, &gz);
    let mut index = read_json(&d.join("index.json"));
    let mdigest = index["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let mut manifest = read_json(&blob(&d, &mdigest));
    let cdigest = manifest["config"]["digest"].as_str().unwrap().to_string();
    let mut config = read_json(&blob(&d, &cdigest));
    config["rootfs"]["diff_ids"]
        .as_array_mut()
        .unwrap()
        .push(Value::from(diff_id));
    let (cdigest, csize) = put_blob(&d, &serde_json::to_vec(&config).unwrap());
    manifest["config"]["digest"] = Value::from(cdigest);
    manifest["config"]["size"] = Value::from(csize);
    manifest["layers"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": ldigest,
            "size": lsize,
        }));
    let (mdigest, msize) = put_blob(&d, &serde_json::to_vec(&manifest).unwrap());
    index["manifests"][0]["digest"] = Value::from(mdigest);
    index["manifests"][0]["size"] = Value::from(msize);
    write_json(&d.join("index.json"), &index);
    d
}

/// What `archive`, as the tool wrote it, says image `name` is, read with tar and not with
/// nanolet: the target digest containerd's image record must have (`None` for a docker
/// archive, whose manifest the importer writes) and the config digest (CRI's image ID). From
/// an index it follows the host's platform, else a child without platform (containerd's
/// rule), never an attestation.
fn expected_ids(work: &Path, archive: &Path, name: &str) -> (Option<String>, String) {
    let d = work.join(format!(
        "x-{}",
        archive.file_name().unwrap().to_string_lossy()
    ));
    if !d.is_dir() {
        fs::create_dir_all(&d).unwrap();
        sh(&format!("tar -C {} -xf {}", d.display(), archive.display()));
    }
    let host = nanolet::images::archive::Platform::host();
    if d.join("index.json").is_file() {
        let index = read_json(&d.join("index.json"));
        let entries = index["manifests"].as_array().cloned().unwrap_or_default();
        let top = entries
            .iter()
            .find(|m| {
                let a = &m["annotations"];
                a["io.containerd.image.name"] == name
                    || a["org.opencontainers.image.ref.name"] == name
            })
            .unwrap_or_else(|| panic!("{}: no entry for {name}", archive.display()))
            .clone();
        let target = top["digest"].as_str().unwrap().to_string();
        let mut desc = top;
        loop {
            let v = read_json(&blob(&d, desc["digest"].as_str().unwrap()));
            let Some(children) = v["manifests"].as_array() else {
                let config = v["config"]["digest"].as_str().unwrap().to_string();
                return (Some(target), config);
            };
            let usable = |c: &&Value| {
                c["platform"]["os"] != "unknown"
                    && c["annotations"]["vnd.docker.reference.type"] != "attestation-manifest"
            };
            desc = children
                .iter()
                .filter(usable)
                .find(|c| c["platform"]["architecture"] == host.architecture.as_str())
                .or_else(|| {
                    children
                        .iter()
                        .filter(usable)
                        .find(|c| c.get("platform").is_none())
                })
                .unwrap_or_else(|| panic!("{}: nothing for {host} in {v}", archive.display()))
                .clone();
        }
    }
    let m = read_json(&d.join("manifest.json"));
    let entry = m
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            e["RepoTags"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t == name))
        })
        .unwrap_or_else(|| panic!("{}: no RepoTags {name} in {m}", archive.display()))
        .clone();
    let config = fs::read(d.join(entry["Config"].as_str().unwrap())).unwrap();
    (None, nanolet::images::archive::sha256_digest(&config))
}

/// After `out` (a `nanolet images import` of all of `archives`): each `(archive, name)` was
/// imported, containerd's image record in k8s.io has the target digest the archive names,
/// and CRI sees the image with the archive's config digest as its ID.
fn assert_imported(ctd: &Containerd, work: &Path, out: &Output, archives: &[(&Path, &str)]) {
    assert!(out.status.success(), "{}", text(out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rt = ctd.runtime();
    for (archive, name) in archives {
        let (target, config) = expected_ids(work, archive, name);
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("imported {name} (")))
            .unwrap_or_else(|| panic!("{name} not imported\n{}", text(out)));
        let listed = ctr(ctd, "k8s.io", &format!("images ls name=={name}"));
        if let Some(t) = &target {
            assert!(
                line.contains(&format!("({t}, ")),
                "{name}: want {t}: {line}"
            );
            assert!(
                listed.contains(t.as_str()),
                "{name}: containerd lists {listed}"
            );
        } else {
            assert!(listed.contains(*name), "{name}: containerd lists {listed}");
        }
        let st = rt
            .image_status(name)
            .expect("ImageStatus")
            .unwrap_or_else(|| panic!("CRI does not see {name}"));
        assert_eq!(st.id, config, "{name}: CRI image ID: {st:?}");
        assert!(st.repo_tags.iter().any(|t| t == name), "{name}: {st:?}");
    }
}

/// Runs one pod per `(pod, image, marker)` at once, `imagePullPolicy: Never`, and checks that
/// each ran to completion and logged its greeting and, when given, the content of its image's
/// `/etc/marker` (the layer only that image has).
fn assert_pods_run(n: &Nanolet, pods: &[(&str, &str, Option<&str>)]) {
    for (pod, image, _) in pods {
        n.write(
            &format!("{pod}.yaml"),
            &format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {pod}\nspec:\n  restartPolicy: Never\n  containers:\n  - name: c\n    image: {image}\n    imagePullPolicy: Never\n    command: [sh, -c, 'echo hello from {pod}; cat /etc/marker 2>/dev/null || true']\n"
            ),
        );
    }
    for (pod, _, marker) in pods {
        let p = n.wait_phase(pod, "Succeeded");
        let mut want = vec![format!("hello from {pod}")];
        want.extend(marker.map(str::to_string));
        let log = wait_for(Duration::from_secs(10), || {
            Some(container_log(n, &p, pod)).filter(|l| want.iter().all(|w| l.contains(w.as_str())))
        });
        assert!(
            log.is_some(),
            "{pod}: {want:?} not in its log: {:?}",
            container_log(n, &p, pod)
        );
    }
}

/// `ctr images export` (containerd's own client; Debian's containerd 1.6) as nanolet must
/// take it: a plain image; an image whose index has a child without `platform` (issue 16: it
/// was refused, "no manifest for platform ... (it has: none)", where containerd takes such a
/// child for any platform); and a two-platform index exported with `--platform <host>` (the
/// other platform's blobs left out) and with `--all-platforms`. The source images are made
/// with `ctr images import` (`--index-name` keeps an archive's index.json as the image's
/// index) in a namespace of their own, so k8s.io, where nanolet imports, starts without them.
#[test]
fn ctr_export_archives_import_and_pods_run_them() {
    let ctd = Containerd::start();
    let work = ctd.tmp().join("img-work");
    fs::create_dir_all(&work).unwrap();
    let root = ctd.tmp().join("nanolet/root");
    let host = nanolet::images::archive::Platform::host();
    let tools = |args: &str| ctr(&ctd, TOOLS_NS, args);
    let w = |f: &str| work.join(f);
    tools(&format!(
        "images import {}",
        test_images().join("busybox.tar").display()
    ));

    // A plain image.
    tools("images tag localhost/busybox:1.36 localhost/ctr-plain:1");
    tools(&format!(
        "images export {} localhost/ctr-plain:1",
        w("ctr-plain.tar").display()
    ));

    // An index whose only child has no platform: busybox's index.json without the platform
    // (and without names) becomes the index of localhost/ctr-noplat:1.
    let src = w("noplat-src");
    extract_busybox(&src);
    let mut index = read_json(&src.join("index.json"));
    let entry = index["manifests"][0].as_object_mut().unwrap();
    entry.remove("platform");
    entry.remove("annotations");
    write_json(&src.join("index.json"), &index);
    sh(&format!(
        "tar -C {} -cf {} .",
        src.display(),
        w("noplat-src.tar").display()
    ));
    tools(&format!(
        "images import --index-name localhost/ctr-noplat:1 {}",
        w("noplat-src.tar").display()
    ));
    tools(&format!(
        "images export {} localhost/ctr-noplat:1",
        w("ctr-noplat.tar").display()
    ));
    // The archive is the case of the issue: index.json -> an index -> a child without platform.
    let x = w("x-check-noplat");
    fs::create_dir_all(&x).unwrap();
    sh(&format!(
        "tar -C {} -xf {}",
        x.display(),
        w("ctr-noplat.tar").display()
    ));
    let top = read_json(&x.join("index.json"));
    assert_eq!(
        top["manifests"][0]["mediaType"], "application/vnd.oci.image.index.v1+json",
        "{top}"
    );
    let inner = read_json(&blob(&x, top["manifests"][0]["digest"].as_str().unwrap()));
    assert!(inner["manifests"][0].get("platform").is_none(), "{inner}");

    // A two-platform index: the host's busybox and the same layer under a config for another
    // architecture.
    let other = if host.architecture == "s390x" {
        "ppc64le"
    } else {
        "s390x"
    };
    let src = w("multi-src");
    extract_busybox(&src);
    let mut index = read_json(&src.join("index.json"));
    let host_entry = index["manifests"][0].clone();
    let mut manifest = read_json(&blob(&src, host_entry["digest"].as_str().unwrap()));
    let mut config = read_json(&blob(&src, manifest["config"]["digest"].as_str().unwrap()));
    config["architecture"] = Value::from(other);
    config.as_object_mut().unwrap().remove("variant");
    let (cdigest, csize) = put_blob(&src, &serde_json::to_vec(&config).unwrap());
    manifest["config"]["digest"] = Value::from(cdigest);
    manifest["config"]["size"] = Value::from(csize);
    let (odigest, osize) = put_blob(&src, &serde_json::to_vec(&manifest).unwrap());
    let mut host_entry = host_entry;
    host_entry.as_object_mut().unwrap().remove("annotations");
    index["manifests"] = serde_json::json!([
        {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": odigest,
            "size": osize,
            "platform": {"os": "linux", "architecture": other},
        },
        host_entry,
    ]);
    write_json(&src.join("index.json"), &index);
    sh(&format!(
        "tar -C {} -cf {} .",
        src.display(),
        w("multi-src.tar").display()
    ));
    tools(&format!(
        "images import --all-platforms --index-name localhost/ctr-multi:1 {}",
        w("multi-src.tar").display()
    ));
    tools("images tag localhost/ctr-multi:1 localhost/ctr-platform:1");
    tools(&format!(
        "images export --platform {host} {} localhost/ctr-platform:1",
        w("ctr-platform.tar").display()
    ));
    let members = sh_out(&format!("tar -tf {}", w("ctr-platform.tar").display()));
    assert!(
        !members.contains(&odigest[7..]),
        "--platform {host} exported the {other} manifest too:\n{members}"
    );
    tools("images tag localhost/ctr-multi:1 localhost/ctr-all:1");
    tools(&format!(
        "images export --all-platforms {} localhost/ctr-all:1",
        w("ctr-all.tar").display()
    ));
    assert!(sh_out(&format!("tar -tf {}", w("ctr-all.tar").display())).contains(&odigest[7..]));

    let archives = [
        (w("ctr-plain.tar"), "localhost/ctr-plain:1"),
        (w("ctr-noplat.tar"), "localhost/ctr-noplat:1"),
        (w("ctr-platform.tar"), "localhost/ctr-platform:1"),
        (w("ctr-all.tar"), "localhost/ctr-all:1"),
    ];
    let rt = ctd.runtime();
    for (_, name) in &archives {
        assert!(
            rt.image_status(name).unwrap().is_none(),
            "{name} in k8s.io already"
        );
    }
    let files: Vec<&Path> = archives.iter().map(|(f, _)| f.as_path()).collect();
    let out = import(&ctd, &root, &files);
    let pairs: Vec<(&Path, &str)> = archives.iter().map(|(f, n)| (f.as_path(), *n)).collect();
    assert_imported(&ctd, &work, &out, &pairs);

    let n = Nanolet::start(&ctd, &[]);
    assert_pods_run(
        &n,
        &[
            ("ctr-plain", "localhost/ctr-plain:1", None),
            ("ctr-noplat", "localhost/ctr-noplat:1", None),
            ("ctr-platform", "localhost/ctr-platform:1", None),
            ("ctr-all", "localhost/ctr-all:1", None),
        ],
    );
}

/// skopeo (Debian's package) copies an OCI layout into the archives it writes: `oci-archive:`
/// with gzip layers, `oci-archive:` with `--dest-compress-format zstd` (every layer zstd),
/// and `docker-archive:` (uncompressed layers, symlinked `<id>/layer.tar`, `repositories`).
/// Each source has a layer of its own, so each import unpacks a layer from that format.
#[test]
fn skopeo_oci_zstd_and_docker_archives_import_and_pods_run_them() {
    require("skopeo");
    let ctd = Containerd::start();
    let work = ctd.tmp().join("img-work");
    fs::create_dir_all(&work).unwrap();
    let root = ctd.tmp().join("nanolet/root");
    let w = |f: &str| work.join(f);
    let cases = [
        ("skopeo-oci", "oci-archive", "", "skopeo oci-archive layer"),
        (
            "skopeo-zstd",
            "oci-archive",
            "--dest-compress-format zstd",
            "skopeo zstd layer",
        ),
        (
            "skopeo-docker",
            "docker-archive",
            "",
            "skopeo docker-archive layer",
        ),
    ];
    let mut archives = Vec::new();
    for (name, transport, flags, marker) in cases {
        let layout = busybox_with_marker(&work, &format!("{name}-src"), marker);
        let out = w(&format!("{name}.tar"));
        tool(
            ctd.tmp(),
            &format!(
                "skopeo copy --quiet {flags} oci:{}:1.36 {transport}:{}:localhost/{name}:1",
                layout.display(),
                out.display()
            ),
        );
        archives.push((out, format!("localhost/{name}:1")));
    }
    // skopeo really wrote zstd layers (containerd 1.6 unpacks them).
    let x = w("x-check-zstd");
    fs::create_dir_all(&x).unwrap();
    sh(&format!(
        "tar -C {} -xf {}",
        x.display(),
        w("skopeo-zstd.tar").display()
    ));
    let top = read_json(&x.join("index.json"));
    let m = read_json(&blob(&x, top["manifests"][0]["digest"].as_str().unwrap()));
    let types: Vec<&str> = m["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["mediaType"].as_str().unwrap())
        .collect();
    assert_eq!(
        types, ["application/vnd.oci.image.layer.v1.tar+zstd"; 2],
        "{m}"
    );

    let files: Vec<&Path> = archives.iter().map(|(f, _)| f.as_path()).collect();
    let out = import(&ctd, &root, &files);
    let pairs: Vec<(&Path, &str)> = archives
        .iter()
        .map(|(f, n)| (f.as_path(), n.as_str()))
        .collect();
    assert_imported(&ctd, &work, &out, &pairs);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.matches(", 1 layers unpacked,").count(),
        3,
        "each archive's own layer unpacked: {}",
        text(&out)
    );

    let n = Nanolet::start(&ctd, &[]);
    assert_pods_run(
        &n,
        &[
            ("skopeo-oci", "localhost/skopeo-oci:1", Some(cases[0].3)),
            ("skopeo-zstd", "localhost/skopeo-zstd:1", Some(cases[1].3)),
            (
                "skopeo-docker",
                "localhost/skopeo-docker:1",
                Some(cases[2].3),
            ),
        ],
    );
}

/// podman (Debian's package; vfs storage, root, run and tmp dirs in the test's directory)
/// loads the busybox test archive, builds two images on it (`COPY` only: no container runs),
/// and writes them with `podman save --format docker-archive`, `--format oci-archive`, and a
/// two-image docker archive (`podman save -m`).
#[test]
fn podman_save_docker_and_oci_archives_import_and_pods_run_them() {
    require("podman");
    let ctd = Containerd::start();
    let work = ctd.tmp().join("img-work");
    fs::create_dir_all(&work).unwrap();
    let root = ctd.tmp().join("nanolet/root");
    let w = |f: &str| work.join(f);
    let p = podman(&ctd.tmp().join("podman"));
    tool(
        ctd.tmp(),
        &format!(
            "{p} load -q -i {}",
            test_images().join("busybox.tar").display()
        ),
    );
    for (name, marker) in [
        ("podman-docker", "podman docker-archive layer"),
        ("podman-oci", "podman oci-archive layer"),
    ] {
        let ctx = w(&format!("{name}-build"));
        fs::create_dir_all(&ctx).unwrap();
        fs::write(ctx.join("marker"), format!("{marker}\n")).unwrap();
        fs::write(
            ctx.join("Containerfile"),
            "FROM localhost/busybox:1.36\nCOPY marker /etc/marker\n",
        )
        .unwrap();
        tool(
            ctd.tmp(),
            &format!(
                "{p} build -q --pull=never --isolation chroot -t localhost/{name}:1 {}",
                ctx.display()
            ),
        );
    }
    tool(
        ctd.tmp(),
        &format!(
            "{p} save -q --format docker-archive -o {} localhost/podman-docker:1
             {p} save -q --format oci-archive -o {} localhost/podman-oci:1
             {p} tag localhost/podman-docker:1 localhost/podman-multi-a:1
             {p} tag localhost/busybox:1.36 localhost/podman-multi-b:1
             {p} save -q -m --format docker-archive -o {} localhost/podman-multi-a:1 localhost/podman-multi-b:1",
            w("podman-docker.tar").display(),
            w("podman-oci.tar").display(),
            w("podman-multi.tar").display(),
        ),
    );

    let archives = [
        (w("podman-docker.tar"), "localhost/podman-docker:1"),
        (w("podman-oci.tar"), "localhost/podman-oci:1"),
        (w("podman-multi.tar"), "localhost/podman-multi-a:1"),
        (w("podman-multi.tar"), "localhost/podman-multi-b:1"),
    ];
    let files: Vec<&Path> = archives[..3].iter().map(|(f, _)| f.as_path()).collect();
    let out = import(&ctd, &root, &files);
    let pairs: Vec<(&Path, &str)> = archives.iter().map(|(f, n)| (f.as_path(), *n)).collect();
    assert_imported(&ctd, &work, &out, &pairs);

    let n = Nanolet::start(&ctd, &[]);
    assert_pods_run(
        &n,
        &[
            (
                "podman-docker",
                "localhost/podman-docker:1",
                Some("podman docker-archive layer"),
            ),
            (
                "podman-oci",
                "localhost/podman-oci:1",
                Some("podman oci-archive layer"),
            ),
            (
                "podman-multi-a",
                "localhost/podman-multi-a:1",
                Some("podman docker-archive layer"),
            ),
            ("podman-multi-b", "localhost/podman-multi-b:1", None),
        ],
    );
}

/// A containerd whose sandbox image is absent and cannot be pulled (no registry), as on an
/// air-gapped device with containerd's packaged configuration:
/// - nanolet says so at start in one line, naming the image and what to do;
/// - kubelet: every admitted pod is listed from its first sync, Pending with its container
///   waiting in ContainerCreating (kubelet_pods.go convertToAPIContainerStatuses), with a
///   Warning FailedCreatePodSandBox "Failed to create pod sandbox: rpc error: code = ..."
///   (kuberuntime_manager.go SyncPod), in `/pods`, `nanolet get pods` and the events;
/// - the pause image's archive put into the images directory mends it: the pod runs.
#[test]
fn sandbox_image_absent_pods_are_pending_with_the_kubelets_event_until_its_archive_lands() {
    let ctd = Containerd::start();
    let pause = support::PAUSE_IMAGE;
    let rt = ctd.runtime();
    rt.remove_image(pause).expect("remove the sandbox image");
    assert!(rt.image_status(pause).expect("ImageStatus").is_none());
    let n = Nanolet::start(&ctd, &[]);
    let images = n.dir.join("root/images");
    let problem = format!("sandbox image {pause} is not present and cannot be pulled");
    let lines = |n: &Nanolet| -> Vec<String> {
        fs::read_to_string(&n.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(&problem) && l.contains("nanolet images import"))
            .map(String::from)
            .collect()
    };
    // containerd 2 does not report its sandbox image over CRI (Status has no image config;
    // 1.6 and 1.7 name it in the verbose config): there the first pod's
    // FailedCreatePodSandBox event is what names it.
    if support::test_runtime().name != "2" {
        let line = wait_for(Duration::from_secs(30), || lines(&n).first().cloned())
            .unwrap_or_else(|| {
                panic!("no startup line about the sandbox image\n{}", n.log_tail())
            });
        assert!(
            line.contains("ERROR")
                && line.contains("nanolet images import")
                && line.contains(&format!("images directory {}", images.display())),
            "{line}"
        );
    }

    n.write(
        "web.yaml",
        &pod_yaml("web", support::BUSYBOX_IMAGE, "Never", ""),
    );
    let p = n.wait_pod("web", "Pending in ContainerCreating", |p| {
        p["status"]["phase"] == "Pending" && waiting_reason(p) == "ContainerCreating"
    });
    let cond = |t: &str| {
        let c = p["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == t))
            .cloned()
            .unwrap_or_else(|| panic!("no {t} condition: {p:#}"));
        (
            c["status"].as_str().unwrap_or_default().to_string(),
            c["reason"].as_str().unwrap_or_default().to_string(),
        )
    };
    assert_eq!(cond("PodScheduled").0, "True");
    assert_eq!(cond("PodReadyToStartContainers").0, "False");
    assert_eq!(cond("Initialized").0, "True");
    assert_eq!(cond("Ready"), ("False".into(), "ContainersNotReady".into()));
    assert_eq!(
        cond("ContainersReady"),
        ("False".into(), "ContainersNotReady".into())
    );
    assert_eq!(p["status"]["containerStatuses"][0]["ready"], false);

    let ev = wait_for(Duration::from_secs(30), || {
        let body = n.get("/api/v1/namespaces/default/events")?;
        let v: Value = serde_json::from_str(&body).ok()?;
        v["items"]
            .as_array()?
            .iter()
            .find(|e| e["reason"] == "FailedCreatePodSandBox")
            .cloned()
    })
    .unwrap_or_else(|| panic!("no FailedCreatePodSandBox event\n{}", n.log_tail()));
    let msg = ev["message"].as_str().unwrap_or_default();
    assert_eq!(ev["type"], "Warning", "{ev}");
    assert_eq!(ev["involvedObject"]["kind"], "Pod", "{ev}");
    assert!(
        msg.starts_with("Failed to create pod sandbox: rpc error: code = ") && msg.contains(pause),
        "{ev}"
    );

    let out = Command::new(nanolet_bin())
        .args(["get", "pods", "-A", &format!("--server={}", n.url())])
        .output()
        .expect("nanolet get pods");
    let table = String::from_utf8_lossy(&out.stdout);
    let row = table
        .lines()
        .find(|l| l.contains(&format!("web-{}", NODE.to_lowercase())))
        .unwrap_or_else(|| panic!("pod not listed:\n{}", text(&out)));
    assert!(
        row.contains("0/1") && row.contains("ContainerCreating"),
        "{row}"
    );

    // healthz stays ok (the kubelet's does; the watchdog must not restart nanolet for it), and
    // says why pods cannot run.
    assert_eq!(n.get("/healthz").as_deref(), Some("ok"));
    let named = support::test_runtime().name != "2";
    let verbose = n.get("/healthz?verbose").unwrap_or_default();
    assert_eq!(verbose.contains(&problem), named, "{verbose}");

    // The air-gapped fix: the pause archive into the images directory.
    let staged = ctd.tmp().join("pause-staged.tar");
    fs::copy(test_images().join("pause.tar"), &staged).expect("copy pause.tar");
    fs::rename(&staged, images.join("pause.tar")).expect("into the images directory");
    n.wait_phase("web", "Succeeded");
    assert_eq!(lines(&n).len(), usize::from(named), "one line, not one per check");
    let healed = wait_for(Duration::from_secs(30), || {
        let v = n.get("/healthz?verbose")?;
        (!v.contains(&problem)).then_some(())
    });
    assert!(healed.is_some(), "{}", n.log_tail());
}
