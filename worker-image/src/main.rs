//! `golem-worker`: the program inside golem-orch's locked container.
//!
//! It runs as a static binary in a `FROM scratch` image (no shell, no libc
//! lookups), so the argument parsing is hand-rolled and tiny.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use golem_worker::{run_report, ReportOptions, EXIT_USAGE, VERSION};

const USAGE: &str = "\
usage: golem-worker [report] [--input DIR] [--output DIR] [--task FILE]
       golem-worker hold
       golem-worker version
       golem-worker --help

report   (default) describe every regular file under --input (default /input):
         size, sha256, kind, line count and first lines; writes report.md and
         report.json into --output (default /output). Symbolic links and
         special files are listed but never followed or read. The first line
         of --task (default /task/instructions.md), if present, heads the report.
         Exit 0: all inputs reported; 1: some input unreadable (still
         reported); 2: the report could not be written; 64: bad usage.
hold     block forever (keeps the output volume mounted; expects SIGKILL).
version  print the version.
";

/// What the command line asked for.
enum Command {
    Report(ReportOptions),
    Hold,
    Version,
    Help,
}

fn parse(args: Vec<OsString>) -> Result<Command, String> {
    let mut args = args.into_iter().peekable();
    let sub = match args.peek().and_then(|a| a.to_str()) {
        None => "report",
        Some(a) if a.starts_with("--") && a != "--help" && a != "--version" => "report",
        Some(_) => {
            let a = args.next().unwrap_or_default();
            match a.to_str() {
                Some("report") => "report",
                Some("hold") => "hold",
                Some("version") => "version",
                Some("--help" | "-h" | "help") => return Ok(Command::Help),
                Some("--version" | "-V") => return Ok(Command::Version),
                _ => return Err(format!("unknown command {a:?}")),
            }
        }
    };
    match sub {
        "report" => {
            let mut opts = ReportOptions::default();
            while let Some(flag) = args.next() {
                let slot = match flag.to_str() {
                    Some("--input") => &mut opts.input,
                    Some("--output") => &mut opts.output,
                    Some("--task") => &mut opts.task,
                    Some("--help" | "-h") => return Ok(Command::Help),
                    _ => return Err(format!("unknown option {flag:?}")),
                };
                match args.next() {
                    Some(value) => *slot = PathBuf::from(value),
                    None => return Err(format!("{flag:?} needs a value")),
                }
            }
            Ok(Command::Report(opts))
        }
        other => match args.next() {
            Some(extra) => Err(format!("{other} takes no arguments, got {extra:?}")),
            None if other == "hold" => Ok(Command::Hold),
            None => Ok(Command::Version),
        },
    }
}

/// Blocks forever. As PID 1 of the holder container it has no signal
/// handlers, so SIGTERM is ignored by the kernel and the orchestrator ends it
/// with SIGKILL; `park` may wake spuriously, hence the loop.
fn hold() -> ! {
    loop {
        std::thread::park();
    }
}

fn main() -> ExitCode {
    let code = match parse(std::env::args_os().skip(1).collect()) {
        Ok(Command::Report(opts)) => run_report(&opts),
        Ok(Command::Hold) => hold(),
        Ok(Command::Version) => {
            println!("golem-worker {VERSION}");
            0
        }
        Ok(Command::Help) => {
            print!("{USAGE}");
            0
        }
        Err(msg) => {
            eprintln!("golem-worker: {msg}\n\n{USAGE}");
            EXIT_USAGE
        }
    };
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}
