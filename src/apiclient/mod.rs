//! API-server mode (the kubelet's `--kubeconfig`): the client side of joining a cluster.
//! `kubeconfig` reads the credentials, `client` talks JSON over HTTPS, `node` registers the
//! Node and keeps its Lease and status fresh. Without `--kubeconfig` none of this runs and
//! nanolet touches no network.
//!
//! Not yet (issue 10, in progress): the pod source (list + watch of this node's pods), status
//! write-back, mirror pods, and the offline checkpoint.

pub mod client;
pub mod kubeconfig;
pub mod node;
