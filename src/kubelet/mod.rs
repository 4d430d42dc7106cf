//! The kubelet proper (Go's pkg/kubelet): the wiring (`Kubelet::new`/`run`), the podconfig
//! thread, the sync loop, pod workers, admission, the security policy and the API status
//! computation.

pub mod admission;
pub mod apistatus;
pub mod pod_workers;
pub mod podconfig;
pub mod policy;
pub mod sync_loop;
pub mod wiring;

pub use pod_workers::{SyncSettings, WorkerContext, WorkerMsg, WorkerReport};
pub use sync_loop::{DesiredPods, LoopMsg, SyncLoop};
pub use wiring::{Dependencies, Kubelet, KubeletError, run};
