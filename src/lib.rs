//! nanolet: a standalone static-pod runner for edge devices.
//!
//! Data flows one way (see ARCHITECTURE.md):
//! sources --snapshots--> podconfig --desired set--> sync loop --> pod workers --> runtime (CRI)
//! PLEG (events + relist) --> sync loop; status store --> HTTP server.

pub mod config;
pub mod pod;
pub mod source;
pub mod podconfig;
pub mod runtime;
pub mod sync;
pub mod pleg;
pub mod status;
pub mod server;
pub mod timeutil;
// pub mod agent; (enabled once sources, CRI client and server land)
