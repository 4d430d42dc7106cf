//! Generates the CRI `runtime.v1` client (our own subset, proto/runtime.proto) and the
//! grpc.health.v1 client (proto/health.proto, for grpc probes) with tonic.
//! protoc comes from protoc-bin-vendored so the build needs nothing installed on the host.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const PROTOS: [&str; 2] = ["proto/runtime.proto", "proto/health.proto"];
    for p in PROTOS {
        println!("cargo:rerun-if-changed={p}");
    }
    println!("cargo:rerun-if-changed=build.rs");

    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        // Labels and annotations land in our BTreeMap-based domain types without conversion.
        .btree_map(".")
        .compile_with_config(config, &PROTOS, &["proto"])?;
    Ok(())
}
