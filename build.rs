//! Generates nanolet's gRPC clients with tonic from our own protos in `proto/`:
//! - the CRI `runtime.v1` subset (proto/runtime.proto),
//! - grpc.health.v1 (proto/health.proto, for grpc probes),
//! - the subset of containerd's native API that image import and PLEG use (proto/containerd/:
//!   events, tasks, content, diff, images, leases, snapshots).
//!
//! protoc and the well-known types come from protoc-bin-vendored, so the build needs nothing
//! installed on the host but Rust (ARCHITECTURE "Decisions": why not the containerd-client crate).

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
    Ok(())
}
