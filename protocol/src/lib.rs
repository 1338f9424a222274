//! golem-protocol: the small set of facts the host orchestrator and the worker must agree on.
//!
//! It has no dependencies and no I/O, so both sides of the container boundary can use it without
//! pulling anything else in. Today it holds one thing: [`chars`], the characters that are never
//! accepted in a name and never reach a person's terminal raw.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod chars;
