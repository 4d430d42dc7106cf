//! The client side of API-server mode (the kubelet's `--kubeconfig`), as client-go and
//! clientcmd are upstream: `kubeconfig` reads the credentials, `client` talks JSON over HTTPS.
//! What uses it: `config::apiserver` (this node's pods as a source), `nodestatus` (the Node,
//! its Lease and status, pod statuses, mirror pods). Without `--kubeconfig` none of this runs
//! and nanolet touches no network.

pub mod client;
pub mod kubeconfig;
