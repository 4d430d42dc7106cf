//! Small helpers with no nanolet dependencies, usable from every layer.

pub mod backoff;
pub mod redact;
pub mod shutdown;
