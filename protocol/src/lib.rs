//! golem-protocol: the small set of facts the host orchestrator and the worker must agree on.
//!
//! It has no dependencies and no I/O, so both sides of the container boundary can use it without
//! pulling anything else in. It holds [`chars`], the characters that are never accepted in a name
//! and never reach a person's terminal raw, and [`init`], how the host starts the worker's init
//! and reads what it reports back (argv, exit codes, deadline, refusal entries), and [`markdown`],
//! how a name becomes inert Markdown in either side's `index.md`.

#![forbid(unsafe_code)]

pub mod chars;
pub mod init;
pub mod markdown;
