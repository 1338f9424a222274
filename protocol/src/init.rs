//! The contract between the host and golem-worker's `init`, the PID 1 of every worker container.
//!
//! The host builds the container's entrypoint with [`InitArgs::argv`]; the init reads it back with
//! [`parse`]. Both sides also agree here on what the init's exit codes mean, on how long after the
//! session's timeout the init's own deadline falls, and on how the init names in its tar stream an
//! entry it could not archive. Spelling any of these on one side only would let the two drift
//! apart silently: a host that misreads 124 reports a timeout as a crash, an init that stops
//! accepting a flag makes every container refuse to start.
//!
//! The entrypoint reads
//!
//! ```text
//! /.golem-init-<random> init --pid1 --deadline SECS --output /output -- PROGRAM [ARGS...]
//! ```

use std::ffi::{OsStr, OsString};
use std::fmt;

/// The golem-worker subcommand that runs the init.
pub const COMMAND: &str = "init";
/// Refuse to start anything unless the init is PID 1 of its PID namespace: only a namespace's init
/// is immune to the worker's signals and may kill every process before archiving.
pub const FLAG_PID1: &str = "--pid1";
/// Followed by whole seconds: when the init kills everything itself and exits [`EXIT_DEADLINE`].
pub const FLAG_DEADLINE: &str = "--deadline";
/// Followed by the directory the init streams as a tar once the worker has ended.
pub const FLAG_OUTPUT: &str = "--output";
/// Ends the init's options: everything after it is the worker's program and its arguments, even
/// when they look like the init's own flags.
pub const END_OF_OPTIONS: &str = "--";
/// Asks the init for its usage text instead of running anything.
const HELP: [&str; 2] = ["--help", "-h"];

/// The deadline when the host names none: a backstop for a dead orchestrator, which normally stops
/// the container long before.
pub const DEFAULT_DEADLINE_SECS: u64 = 3600;
/// The longest deadline the init accepts (a week). A longer session timeout ends at the init's
/// deadline and is reported as a timeout.
pub const MAX_DEADLINE_SECS: u64 = 604_800;
/// How much longer than the session's timeout the init waits before it kills the worker itself:
/// the host stops the container at its timeout, so the init's deadline is only ever the backstop
/// for an orchestrator that died, never the normal path.
pub const GRACE_SECS: u64 = 60;
// The default is a deadline the init itself would accept.
const _: () = assert!(DEFAULT_DEADLINE_SECS <= MAX_DEADLINE_SECS);

/// Exit code: the init's deadline passed; everything was killed and no archive written. The host
/// reports it as a timeout (as `timeout(1)` does, whose status it borrows).
pub const EXIT_DEADLINE: i32 = 124;
/// Exit code: the archive could not be written (the host went away, or a file was shorter than
/// its size); the stream has no end marker, so the host refuses it as cut.
pub const EXIT_ARCHIVE_FAILED: i32 = 125;
/// Exit code: the init refused to run (it is not PID 1 where it must be, or it could not protect
/// itself); nothing was started and no archive written.
pub const EXIT_REFUSED: i32 = 126;
/// Exit code: the worker's program could not be started (as a shell reports it); the archive is
/// still written.
pub const EXIT_CANNOT_RUN: i32 = 127;

/// The tar entry type the init gives an entry it could not archive (a file it could not open, a
/// directory it could not list, a socket, a path too long to walk), so the host lists it as a
/// rejection instead of never hearing of it. One of the types POSIX leaves to implementations and
/// no tar writer uses; the worker never writes the archive, so only the init can emit it.
pub const REFUSAL_TYPE: u8 = b'Z';
/// The PAX record before a [`REFUSAL_TYPE`] entry that says why the init could not archive it.
pub const REFUSAL_KEY: &str = "GOLEM.refused";

/// The init's deadline for a session whose timeout is `timeout_secs`: the timeout plus
/// [`GRACE_SECS`], capped at what the init accepts so a very long timeout still starts.
pub fn deadline_for(timeout_secs: u64) -> u64 {
    timeout_secs
        .saturating_add(GRACE_SECS)
        .min(MAX_DEADLINE_SECS)
}

/// What the host asks the init to do: the options after [`COMMAND`], then the worker's command.
/// `S` is `String` on the host (an engine's entrypoint is text) and `OsString` in the init (its
/// own argv need not be).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitArgs<S> {
    /// [`FLAG_PID1`]: the host always asks for it; an engine configured to inject its own init
    /// (`docker run --init`) would otherwise silently make golem's init PID 2.
    pub require_pid1: bool,
    /// [`FLAG_DEADLINE`], 1 to [`MAX_DEADLINE_SECS`]; [`DEFAULT_DEADLINE_SECS`] when absent.
    pub deadline_secs: u64,
    /// [`FLAG_OUTPUT`]; the init's own default when absent.
    pub output: Option<S>,
    /// The worker's program (looked up through `PATH` when it has no `/`), then its arguments.
    /// [`parse`] refuses a command line without one; the host never builds an empty one, as a
    /// plan without a command is refused before it is made.
    pub command: Vec<S>,
}

impl<S> InitArgs<S> {
    /// Arguments with the defaults: no PID 1 requirement, the default deadline and output.
    pub fn new(command: Vec<S>) -> Self {
        InitArgs {
            require_pid1: false,
            deadline_secs: DEFAULT_DEADLINE_SECS,
            output: None,
            command,
        }
    }
}

impl<S: Clone + for<'a> From<&'a str> + From<String>> InitArgs<S> {
    /// The init's command line from [`COMMAND`] on (the caller puts the init's own path first).
    /// The deadline is written even at its default, so what runs is exactly what a plan shows.
    pub fn argv(&self) -> Vec<S> {
        let mut argv: Vec<S> = vec![COMMAND.into()];
        if self.require_pid1 {
            argv.push(FLAG_PID1.into());
        }
        argv.push(FLAG_DEADLINE.into());
        argv.push(self.deadline_secs.to_string().into());
        if let Some(output) = &self.output {
            argv.push(FLAG_OUTPUT.into());
            argv.push(output.clone());
        }
        argv.push(END_OF_OPTIONS.into());
        argv.extend(self.command.iter().cloned());
        argv
    }
}

/// What the init's command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed<S> {
    /// Run the worker with these arguments.
    Run(InitArgs<S>),
    /// Show the usage text (`--help` or `-h` among the options).
    Help,
}

/// Why the init's command line was refused; the init then exits with its usage status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// The options never ended with [`END_OF_OPTIONS`].
    NoEndOfOptions,
    /// A flag that takes a value came last.
    MissingValue(&'static str),
    /// [`FLAG_DEADLINE`] was not a whole number of seconds in range.
    BadDeadline(OsString),
    /// An option the init does not know.
    UnknownOption(OsString),
    /// Nothing followed [`END_OF_OPTIONS`].
    NoProgram,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::NoEndOfOptions => write!(f, "init: expected -- PROGRAM [ARGS...]"),
            ParseError::MissingValue(flag) => write!(f, "init: {flag} needs a value"),
            ParseError::BadDeadline(value) => write!(
                f,
                "init: {FLAG_DEADLINE}: expected 1 to {MAX_DEADLINE_SECS} seconds, got {value:?}"
            ),
            ParseError::UnknownOption(flag) => write!(f, "init: unknown option {flag:?}"),
            ParseError::NoProgram => write!(f, "init: PROGRAM is missing after --"),
        }
    }
}

impl std::error::Error for ParseError {}

/// Reads the init's command line after [`COMMAND`]: the inverse of [`InitArgs::argv`].
pub fn parse<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> Result<Parsed<S>, ParseError> {
    let mut args = args.into_iter();
    let mut require_pid1 = false;
    let mut deadline_secs = DEFAULT_DEADLINE_SECS;
    let mut output = None;
    loop {
        let flag = args.next().ok_or(ParseError::NoEndOfOptions)?;
        match flag.as_ref().to_str() {
            Some(END_OF_OPTIONS) => break,
            Some(f) if HELP.contains(&f) => return Ok(Parsed::Help),
            Some(FLAG_PID1) => require_pid1 = true,
            Some(FLAG_DEADLINE) => {
                let value = args.next().ok_or(ParseError::MissingValue(FLAG_DEADLINE))?;
                deadline_secs = value
                    .as_ref()
                    .to_str()
                    .and_then(|v| v.parse().ok())
                    .filter(|s| (1..=MAX_DEADLINE_SECS).contains(s))
                    .ok_or_else(|| ParseError::BadDeadline(value.as_ref().to_owned()))?;
            }
            Some(FLAG_OUTPUT) => {
                output = Some(args.next().ok_or(ParseError::MissingValue(FLAG_OUTPUT))?);
            }
            _ => return Err(ParseError::UnknownOption(flag.as_ref().to_owned())),
        }
    }
    let command: Vec<S> = args.collect();
    if command.is_empty() {
        return Err(ParseError::NoProgram);
    }
    Ok(Parsed::Run(InitArgs {
        require_pid1,
        deadline_secs,
        output,
        command,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn what_the_host_builds_the_init_reads_back() {
        let host = InitArgs {
            require_pid1: true,
            deadline_secs: deadline_for(300),
            output: Some("/output".to_string()),
            command: strings(&["/golem-worker", "report", "--", "--deadline", "1"]),
        };
        let argv = host.argv();
        assert_eq!(
            argv,
            strings(&[
                "init",
                "--pid1",
                "--deadline",
                "360",
                "--output",
                "/output",
                "--",
                "/golem-worker",
                "report",
                "--",
                "--deadline",
                "1",
            ])
        );
        // The init sees its argv as OsStrings, after the subcommand.
        let os: Vec<OsString> = argv.iter().map(OsString::from).collect();
        assert_eq!(os[0], COMMAND);
        let Ok(Parsed::Run(init)) = parse(os[1..].to_vec()) else {
            panic!("the host's argv must parse");
        };
        assert!(init.require_pid1);
        assert_eq!(init.deadline_secs, 360);
        assert_eq!(init.output.as_deref(), Some(OsStr::new("/output")));
        assert_eq!(init.command, os[7..]);
        assert_eq!(init.command[0], "/golem-worker");
        // And back again, as OsStrings this time.
        assert_eq!(init.argv(), os);
    }

    #[test]
    fn defaults_round_trip_too() {
        let plain = InitArgs::new(vec!["w".to_string()]);
        let argv = plain.argv();
        assert_eq!(argv, strings(&["init", "--deadline", "3600", "--", "w"]));
        assert_eq!(
            parse(&argv[1..]),
            Ok(Parsed::Run(InitArgs::new(vec![&argv[4]])))
        );
        assert_eq!(
            parse(["--", "w"]),
            Ok(Parsed::Run(InitArgs::new(vec!["w"])))
        );
    }

    #[test]
    fn the_deadline_backstop_follows_the_timeout_up_to_the_init_maximum() {
        assert_eq!(deadline_for(1), 1 + GRACE_SECS);
        assert_eq!(deadline_for(30 * 86_400), MAX_DEADLINE_SECS);
        assert_eq!(deadline_for(u64::MAX), MAX_DEADLINE_SECS);
    }

    #[test]
    fn bad_command_lines_are_refused_with_a_reason() {
        let cases: [(&[&str], ParseError); 8] = [
            (&[], ParseError::NoEndOfOptions),
            (&["worker"], ParseError::UnknownOption("worker".into())),
            (&["--"], ParseError::NoProgram),
            (
                &["--deadline", "0", "--", "w"],
                ParseError::BadDeadline("0".into()),
            ),
            (
                &["--deadline", "604801", "--", "w"],
                ParseError::BadDeadline("604801".into()),
            ),
            (
                &["--deadline", "1m", "--", "w"],
                ParseError::BadDeadline("1m".into()),
            ),
            (&["--deadline"], ParseError::MissingValue(FLAG_DEADLINE)),
            (&["--output"], ParseError::MissingValue(FLAG_OUTPUT)),
        ];
        for (args, want) in cases {
            assert_eq!(parse(args), Err(want), "{args:?}");
        }
        assert_eq!(
            ParseError::BadDeadline("0".into()).to_string(),
            "init: --deadline: expected 1 to 604800 seconds, got \"0\""
        );
        assert_eq!(parse(["--pid1", "-h"]), Ok(Parsed::Help));
    }

    #[test]
    fn exit_codes_are_distinct_and_above_what_a_worker_usually_returns() {
        let codes = [
            EXIT_DEADLINE,
            EXIT_ARCHIVE_FAILED,
            EXIT_REFUSED,
            EXIT_CANNOT_RUN,
        ];
        for (i, a) in codes.iter().enumerate() {
            assert!((124..128).contains(a));
            assert!(codes[i + 1..].iter().all(|b| b != a));
        }
    }
}
