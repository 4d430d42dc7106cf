//! nanolet's integration tests: one test binary, a module per area (as ripgrep and cargo lay
//! theirs out), so the harness (`nanolet-test-support`, tests/support/) and nanolet are linked
//! once instead of once per area. docs/testing.md describes each area.
//!
//! ```text
//! cargo test --test integration                  # all of them (as root: they run containerd)
//! cargo test --test integration e2e::            # one area
//! cargo test --test integration -- --exact soak::many_pods_with_probes_every_second_stay_flat
//! ```
//!
//! Tests of every area run side by side in this one process. Those that must run alone (they
//! measure the node, or load it for minutes) take `support::gate::exclusive()`; every
//! containerd and API server double the harness starts holds the shared side of that gate
//! (tests/support/src/gate.rs, docs/testing.md "Running side by side").

/// The read-only port with the real kubectl, promtool and the CLI.
mod api;
/// Events to the API server and API-pod correctness (issue 20).
mod api_events;
/// API pods' ServiceAccount tokens, ConfigMaps and Secrets from the API server double.
mod api_objects;
/// API pods through a reboot without the API server: the offline object checkpoint.
mod api_reboot;
/// Service environment variables and cluster DNS for API pods; Services with the real kubectl.
mod api_services;
/// API-server mode against the API server test double.
mod apiserver;
/// A real cluster node: TLS bootstrap, rotation, kubectl through the node proxy (issue 19).
mod cluster_node;
/// The CRI client against a real containerd.
mod cri_runtime;
/// The device plugin API v1beta1 with Kubernetes' sample device plugin (issue 32).
mod device_plugins;
/// The device's local administrator: `nanolet admin-kubeconfig` and the real kubectl on the
/// kubelet server (get, exec, port-forward).
mod device_admin;
/// The real binary against a real containerd: the static-pod semantics end to end.
mod e2e;
/// Disk and memory pressure, emptyDir limits, admission, image GC (each test alone).
mod eviction;
/// Fault injection: kill -9 during churn, manifest directory and URL faults, a hung containerd,
/// a full disk.
mod faults;
/// Every fuzz seed and past crash input through the fuzz targets' code.
mod fuzz_regressions;
/// Image import, the images directory, pull errors and back-off, registry credentials.
mod images;
/// The API server test double itself, then with the real kubectl.
mod kubectl;
/// How the binary writes its log.
mod logging;
/// Graceful node shutdown: logind's delay lock on a private bus, pods stopped by priority.
mod nodeshutdown;
/// Probes, lifecycle hooks, termination messages, init and sidecar containers.
mod probes;
/// nanolet as a node of a real control plane (scripts/cluster; issue 29).
mod real_cluster;
/// The kubelet server on --port: HTTPS, client certificates, the kubelet's endpoints.
mod secure_port;
/// The HTTP servers under floods and slow clients, request limits, admission hardening.
mod security;
/// Many pods with probes every second: threads, fds and RSS stay flat (alone).
mod soak;
/// A fork bomb (podPidsLimit) and a memory hog beside other pods.
mod resources;
/// --cgroup-driver=systemd against the real systemd (PID 1 of its own namespaces): the slices.
mod systemd_cgroups;
/// Edge hardware (issue 32): RuntimeClasses (the handler reaches containerd, unknown classes
/// and handlers never run) and extended resources at admission.
mod edge_hardware;
/// CRI streaming on real containerd: `nanolet exec -i/-t`, `nanolet port-forward`, the proxy.
mod streaming;
/// The .deb upgrade leaves running pods untouched.
mod upgrade;
