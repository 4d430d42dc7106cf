//! The kubelet proper (Go's pkg/kubelet): the sync loop, pod workers, admission, the security
//! policy and the API status computation.

pub mod admission;
pub mod apistatus;
pub mod pod_workers;
pub mod policy;
pub mod sync_loop;

pub use pod_workers::{SyncSettings, WorkerContext, WorkerMsg, WorkerReport};
pub use sync_loop::{DesiredPods, LoopMsg, SyncLoop};
