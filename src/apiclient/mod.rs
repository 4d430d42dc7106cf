//! API-server mode (the kubelet's `--kubeconfig`): the client side of joining a cluster.
//! `kubeconfig` reads the credentials, `client` talks JSON over HTTPS, `node` registers the
//! Node and keeps its Lease and status fresh, `podsource` lists and watches this node's pods
//! (a third source for podconfig, checkpointed for offline starts), writes their status back
//! and sends the final DELETE of gracefully deleted ones, `mirror` keeps a mirror pod in the API
//! for every static pod. Without `--kubeconfig` none of this runs and nanolet touches no network.

pub mod client;
pub mod kubeconfig;
pub mod mirror;
pub mod node;
pub mod podsource;
