//! The runtime-facing half of a pod sync (Go's pkg/kubelet/kuberuntime): what the runtime
//! holds for a pod (state) and the actions that bring it to the spec (compute_pod_actions).

pub mod actions;
pub mod state;
