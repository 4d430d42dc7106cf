//! Pod API types, defaulting, validation with field paths, static-pod naming and UID.
//! Pure: no I/O.

pub mod dns;
pub mod env;
pub mod envvars;
pub mod helpers;
pub mod quantity;
pub mod schema;
pub mod security;
pub mod sysctl;
pub mod types;
pub mod validate;

pub use types::*;
