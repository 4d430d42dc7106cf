//! API-server mode (the kubelet's `--kubeconfig`): the client side of joining a cluster.
//! `kubeconfig` reads the credentials, `client` talks JSON over HTTPS, `node` registers the
//! Node and keeps its Lease and status fresh, `podsource` lists and watches this node's pods
//! (a third source for podconfig) and writes their status back. Without `--kubeconfig` none of
//! this runs and nanolet touches no network.
//!
//! Not yet (issue 10, in progress): the final DELETE of gracefully deleted pods, mirror pods,
//! and the offline checkpoint.

pub mod client;
pub mod kubeconfig;
pub mod node;
pub mod podsource;
