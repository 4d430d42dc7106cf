//! The runtime-facing half of a pod sync (Go's pkg/kubelet/kuberuntime): what the runtime
//! holds for a pod (`state`), the pod cache the PLEG fills and workers read (`cache`), the
//! actions that bring it to the spec (`actions`), and the per-pod runtime manager that carries
//! them out (`manager`; `sandbox`, `container`, `container_linux`, `labels`, `gc`,
//! `termination_order` after the upstream files of the same names).

pub mod actions;
pub mod cache;
pub mod container;
pub mod container_linux;
pub mod gc;
pub mod labels;
pub mod manager;
pub mod sandbox;
pub mod state;
pub mod termination_order;
pub mod userns;

pub use manager::{RuntimeManager, RuntimeManagerState, RuntimeSettings};
