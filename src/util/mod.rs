//! Small helpers with no nanolet dependencies, usable from every layer.

pub mod backoff;
pub mod base64;
pub mod flags;
pub mod pool;
pub mod redact;
pub mod shutdown;
