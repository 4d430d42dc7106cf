//! The commands behind `nanolet`'s argv (Go's cmd/): the client commands (`get`, `describe`,
//! `logs`, `exec`, `images`, `validate`) and the generated man page and completions.

pub mod client;
pub mod docgen;
