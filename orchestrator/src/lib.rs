//! golem-orch: run untrusted content in one locked Docker container per session and clear what
//! comes out through a reviewable stage before it can reach a git repository.
//!
//! The binary (`src/main.rs`) is a thin shell over this library; see `ARCHITECTURE.md` for the
//! flow of one session and the invariants each module keeps.

#![warn(missing_docs)]

pub mod audit;
pub mod batch;
pub mod container;
pub mod diff;
pub mod engine;
pub mod extract;
pub mod gateway;
pub mod gc;
pub mod home;
pub mod image;
pub mod intake;
pub mod outcome;
pub mod owner;
pub mod plan;
pub mod policy;
pub mod push;
pub mod render;
pub mod secret;
pub mod sensitive;
pub mod session;
pub mod spec;
pub mod stage;
pub mod target;
pub mod transcript;
pub mod units;
pub mod urlcheck;
pub mod verify;
pub mod warnings;
pub mod worker_uid;
pub mod workers;
pub mod workspace;
