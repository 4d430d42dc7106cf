//! Small helpers with no nanolet dependencies, usable from every layer.

pub mod backoff;
pub mod base64;
pub mod redact;
pub mod shutdown;
