//! golem-orch: run untrusted content in one locked Docker container per session and clear what
//! comes out through a reviewable stage before it can reach a git repository.
//!
//! The binary (`src/main.rs`) is a thin shell over this library; see `ARCHITECTURE.md` for the
//! flow of one session and the invariants each module keeps.

pub mod policy;
pub mod units;
