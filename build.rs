//! Generates the CRI `runtime.v1` client (our own subset, proto/runtime.proto) with tonic.
//! protoc comes from protoc-bin-vendored so the build needs nothing installed on the host.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const PROTO: &str = "proto/runtime.proto";
    println!("cargo:rerun-if-changed={PROTO}");
    println!("cargo:rerun-if-changed=build.rs");

    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        // Labels and annotations land in our BTreeMap-based domain types without conversion.
        .btree_map(".")
        .compile_with_config(config, &[PROTO], &["proto"])?;
    Ok(())
}
