//! Generates nanolet's gRPC clients with tonic from our own protos in `proto/`:
//! - the CRI `runtime.v1` subset (proto/runtime.proto),
//! - grpc.health.v1 (proto/health.proto, for grpc probes),
//! - the subset of containerd's native API that image import and PLEG use (proto/containerd/:
//!   events, tasks, content, diff, images, leases, snapshots).
//!
//! protoc and the well-known types come from protoc-bin-vendored, so the build needs nothing
//! installed on the host but Rust (docs/decisions/own-containerd-proto.md: why not the
//! containerd-client crate).

const DEVICE_PLUGIN_PROTO: &str = "proto/deviceplugin/v1beta1.proto";
const POD_RESOURCES_PROTO: &str = "proto/podresources/v1.proto";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const PROTOS: [&str; 12] = [
        "proto/runtime.proto",
        "proto/health.proto",
        "proto/containerd/types.proto",
        "proto/containerd/task.proto",
        "proto/containerd/events.proto",
        "proto/containerd/services/events.proto",
        "proto/containerd/services/tasks.proto",
        "proto/containerd/services/content.proto",
        "proto/containerd/services/diff.proto",
        "proto/containerd/services/images.proto",
        "proto/containerd/services/leases.proto",
        "proto/containerd/services/snapshots.proto",
    ];
    for p in PROTOS {
        println!("cargo:rerun-if-changed={p}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    build_info();

    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let well_known = protoc_bin_vendored::include_path()?;
    let well_known = well_known
        .to_str()
        .ok_or("protoc-bin-vendored's include path is not UTF-8")?;
    let includes = ["proto", well_known];
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        // CRI labels and annotations land in our BTreeMap-based domain types without conversion.
        .btree_map(".runtime.v1")
        .compile_with_config(config, &PROTOS, &includes)?;

    // The device plugin API and the pod-resources API (src/devicemanager): clients only (the
    // plugins' DevicePlugin service; pod-resources for the tests). The services nanolet
    // serves (Registration, PodResourcesLister) are answered by src/devicemanager/grpc.rs on
    // the messages generated here.
    println!("cargo:rerun-if-changed={DEVICE_PLUGIN_PROTO}");
    println!("cargo:rerun-if-changed={POD_RESOURCES_PROTO}");
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .btree_map(".v1beta1")
        .compile_with_config(config, &[DEVICE_PLUGIN_PROTO, POD_RESOURCES_PROTO], &includes)?;
    Ok(())
}

/// Build metadata for `nanolet version`, `nanolet_build_info` and the Node's kubeletVersion:
/// - `NANOLET_GIT_COMMIT`: `git rev-parse HEAD` of the source tree, "unknown" without git or
///   a .git (a release tarball builds as well);
/// - `NANOLET_TARGET`: the target triple;
/// - `NANOLET_KUBELET_VERSION`: `v1.33.0+nanolet.<version>`, nanolet's version as semver build
///   metadata (which does not sort, unlike a `-nanolet` pre-release that sorts below v1.33.0),
///   characters outside `[0-9A-Za-z.-]` (a Debian `~` or `+`) replaced by `-`.
fn build_info() {
    println!("cargo:rerun-if-env-changed=NANOLET_VERSION");
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    // Only nanolet's own checkout: a tarball unpacked inside some other repository is not it.
    let own = git(&["rev-parse", "--show-toplevel"]).is_some_and(|top| {
        std::fs::canonicalize(top).ok() == std::fs::canonicalize(env!("CARGO_MANIFEST_DIR")).ok()
    });
    let commit = own
        .then(|| git(&["rev-parse", "HEAD"]))
        .flatten()
        .unwrap_or_else(|| "unknown".into());
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        // A new commit moves HEAD's reflog; a checkout rewrites HEAD. Only existing files: a
        // missing one would rerun this script (and recompile the crate) on every build.
        for f in ["HEAD", "logs/HEAD"] {
            let path = std::path::Path::new(&dir).join(f);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    println!("cargo:rustc-env=NANOLET_GIT_COMMIT={commit}");
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=NANOLET_TARGET={target}");
    let version = std::env::var("NANOLET_VERSION")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_string());
    let meta: String = version
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    println!("cargo:rustc-env=NANOLET_KUBELET_VERSION=v1.33.0+nanolet.{meta}");
}
