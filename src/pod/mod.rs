//! Pod API types, defaulting, validation with field paths, static-pod naming and UID.
//! Pure: no I/O.

pub mod types;
pub mod quantity;
pub mod validate;
pub mod naming;

pub use types::*;
