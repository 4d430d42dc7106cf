//! The cluster side of this node (upstream pkg/kubelet/nodestatus, the status manager and the
//! mirror client): `setters` builds the v1 Node object (also served on the read-only port);
//! in API-server mode `heartbeat` registers the Node and keeps its Lease and status fresh,
//! `status_writer` writes pod statuses back and sends the final DELETE of gracefully deleted
//! pods, `mirror` keeps a mirror pod in the API for every static pod, and `event_sink` posts
//! the recorded events through the `correlator` (client-go's aggregation, counting, spam filter).

pub mod correlator;
pub mod event_sink;
pub mod heartbeat;
pub mod mirror;
pub mod setters;
pub mod status_writer;

pub use setters::{NodeContext, node_object};
