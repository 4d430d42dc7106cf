//! The `nanolet` CLI commands that talk to a running agent or work offline (being written).
