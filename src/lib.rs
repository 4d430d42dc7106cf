//! nanolet: a standalone static-pod runner for edge devices.
//!
//! Data flows one way (see ARCHITECTURE.md):
//! config (sources --snapshots--> merge) --desired set--> kubelet (sync loop --> pod workers)
//! --> cri (containerd);
//! PLEG (events + relist) --> sync loop; status store --> server (HTTP).

pub(crate) mod api;
pub mod apiclient;
pub(crate) mod apiobjects;
/// The kubelet's certificates: TLS bootstrap, rotation, the serving certificate (`tls` only).
#[cfg(feature = "tls")]
pub mod certificate;
pub(crate) mod cm;
pub mod cmd;
pub mod config;
pub mod cri;
/// The device plugin API (the device manager) and the pod-resources API.
pub mod devicemanager;
pub(crate) mod events;
pub mod eviction;
#[cfg(test)]
mod function_length_tests;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod images;
pub mod kubelet;
pub mod kubeletconfig;
pub(crate) mod kuberuntime;
pub(crate) mod localstore;
pub(crate) mod logrotate;
pub mod malloc;
pub(crate) mod metrics;
pub mod node;
pub(crate) mod nodeshutdown;
pub(crate) mod nodestatus;
pub mod pleg;
pub(crate) mod prober;
pub(crate) mod runtimeclass;
pub(crate) mod sdnotify;
pub mod server;
pub(crate) mod statefile;
pub(crate) mod stats;
pub mod status;
#[cfg(test)]
mod structure_tests;
pub mod timeutil;
pub(crate) mod util;
pub(crate) mod volumes;
pub(crate) mod yaml;

/// The version nanolet reports as its kubelet version: the kubelet API it follows with
/// nanolet's version as semver build metadata, `v1.33.0+nanolet.<version>` (build.rs). Build
/// metadata does not take part in ordering, so version-skew checks see v1.33.0 (a
/// `v1.33.0-nanolet` pre-release sorts below v1.33.0).
pub const KUBELET_VERSION: &str = env!("NANOLET_KUBELET_VERSION");

/// nanolet's version: `NANOLET_VERSION` at build time (packagers stamp a package version in,
/// e.g. `0.1.0-2`), else Cargo.toml's. `nanolet version` and the start-up log line show it.
pub const VERSION: &str = match option_env!("NANOLET_VERSION") {
    Some(v) => v,
    None => env!("CARGO_PKG_VERSION"),
};

/// The git commit nanolet was built from (build.rs: `git rev-parse HEAD`), "unknown" when
/// built outside a git checkout (a release tarball).
pub const GIT_COMMIT: &str = env!("NANOLET_GIT_COMMIT");

/// The target triple nanolet was built for.
pub const TARGET: &str = env!("NANOLET_TARGET");

/// The Cargo features compiled in, comma-separated ("" for none).
pub const FEATURES: &str = if cfg!(feature = "tls") { "tls" } else { "" };
