//! golem-orch's integration tests: user stories run against the real Docker engine.
//!
//! Every test drives the real binary with its own project and state directory and ends by
//! checking that no container or volume of its own is left in the engine.

// Test code: a panic is the failure report, so the workspace's unwrap/expect lints apply as in
// any other test (clippy.toml allows both in tests).
#![cfg(test)]

mod attacks;
mod bad_input;
mod batch;
mod clearance;
mod cli;
mod crashes;
mod documents;
mod folders;
mod harness;
mod host_users;
mod intake_races;
mod model;
mod policy_narrowing;
mod refusals;
mod review;
mod runtimes;
mod session;
mod state_dir;
mod terminal;
mod warnings;
mod workers;
