//! golem-orch's integration tests: user stories run against the real Docker engine.
//!
//! Every test drives the real binary with its own project and state directory and ends by
//! checking that no container or volume of its own is left in the engine.

mod attacks;
mod bad_input;
mod batch;
mod clearance;
mod crashes;
mod documents;
mod harness;
mod policy_narrowing;
mod refusals;
mod session;
mod workers;
