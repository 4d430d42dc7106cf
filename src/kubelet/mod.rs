//! The kubelet proper (Go's pkg/kubelet): the wiring (`Kubelet::new`/`run`), the podconfig
//! thread, the sync loop, pod workers, admission, the security policy and the API status
//! computation.

pub(crate) mod admission;
pub(crate) mod apistatus;
pub(crate) mod pod_workers;
pub(crate) mod podconfig;
pub(crate) mod policy;
pub(crate) mod runtime_status;
pub(crate) mod sync_loop;
pub mod wiring;
pub(crate) mod worker_pool;

pub(crate) use pod_workers::{SyncSettings, WorkerContext};
pub(crate) use sync_loop::{DesiredPods, LoopMsg, SyncLoop};
pub use wiring::{Dependencies, Kubelet, KubeletError, run};
