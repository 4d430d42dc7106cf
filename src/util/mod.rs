//! Small helpers with no nanolet dependencies, usable from every layer.

pub mod redact;
