//! `golem-worker`: the program inside golem-orch's locked container.
//!
//! It runs as a static binary in a `FROM scratch` image (no shell, no libc
//! lookups), so the argument parsing is hand-rolled and tiny.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use golem_protocol::init::Parsed;
use golem_worker::agent::{self, AgentOptions};
use golem_worker::init::{self, InitOptions, INIT_COMMAND};
use golem_worker::sandbox::{self, Limits, CHILD_COMMAND};
use golem_worker::{run, Mode, Options, EXIT_USAGE, VERSION};

const USAGE: &str = "\
usage: golem-worker [report|text] [--input DIR] [--output DIR] [--task FILE]
                    [--per-input-timeout DURATION] [--per-input-memory SIZE]
                    [--jobs N] [--max-inputs N] [--max-output-bytes SIZE]
       golem-worker agent [--input DIR] [--output DIR] [--task FILE]
                    [--workspace DIR] [--socket PATH] [--max-steps N]
                    [--max-tokens N] [--per-input-timeout DURATION]
                    [--per-input-memory SIZE]
       golem-worker init [--pid1] [--deadline SECS] [--output DIR] -- PROGRAM [ARGS...]
       golem-worker version
       golem-worker --help

report   (default) for every regular file under --input (default /input),
         detect its type from its content (pdf, html, markdown, text, json,
         csv, docx, else binary), extract its text and structure, and write
         <path>.md and <path>.json into --output (default /output): title,
         metadata, outline, counts, links, summary, warnings (prompt
         injection, hidden text, scripts, embedded files, external
         resources) and a text excerpt. Also writes index.md and index.json.
text     write <path>.txt with the extracted text of every input (at most
         1 MiB each), plus index.md and index.json.
         Symbolic links and special files are listed, never followed or read.
         The first line of --task (default /task/instructions.md), if
         present, heads the index.
agent    an AI worker: reads the task (--task, default
         /task/instructions.md), surveys --input with the report's
         extractors and warnings, and asks the model behind the host's
         gateway (socket from --socket, else $GOLEM_MODEL_SOCKET, else
         /run/golem/model.sock) what to do, running the tools it calls:
         list_files, read_file (documents as text), write_file (only under
         --output, and --workspace, default /workspace when writable) and
         finish. Stops at the final answer, finish, --max-steps (else
         $GOLEM_AGENT_MAX_STEPS, default 20) or the budget; writes
         agent.md into --output. Exit 0: done; 1: stopped by the step
         limit or the budget; 2: agent.md not written; 3: protocol error.
init     be a worker container's PID 1: run PROGRAM (found through PATH)
         with stdin from /dev/null and its stdout and stderr on stderr; when
         it ends, kill every other process, write --output (default /output)
         to stdout as a tar stream and exit with PROGRAM's status (128+N if
         signal N killed it; 127 if it could not be run). After --deadline
         (default 3600, at most 604800 seconds) everything is killed and init
         exits 124 without an archive; 125: the archive could not be written;
         126: init refused to start anything (with --pid1: it is not PID 1).
version  print the version.

Each input is analysed in its own child process:
  --per-input-timeout DURATION  wall-clock limit per input (default 30s;
                                CPU time is limited to two thirds of it)
  --per-input-memory SIZE       address-space limit per input (default 256m)
  --jobs N                      inputs analysed at once (default 1, at most 8)
  --max-inputs N                inputs processed at most (default 100)
  --max-output-bytes SIZE       bytes written at most (default 24m); past it
                                report texts, then reports, are left out
DURATION is a number with ms, s or m (default s); SIZE a number with k, m or
g (binary units; default bytes).

Exit 0: all inputs processed; 1: some input failed (it has an error entry);
2: some output could not be written; 64: bad usage.
";

/// What the command line asked for.
enum Command {
    Run(Options),
    Agent(AgentOptions),
    Child(Mode, u64),
    Init(InitOptions),
    Version,
    Help,
}

/// Parses `30`, `30s`, `500ms`, `2m`.
fn parse_duration(s: &str) -> Option<Duration> {
    let (num, unit) = split_unit(s);
    let n: u64 = num.parse().ok()?;
    let d = match unit {
        "" | "s" => Duration::from_secs(n),
        "ms" => Duration::from_millis(n),
        "m" | "min" => Duration::from_secs(n.checked_mul(60)?),
        _ => return None,
    };
    (d >= Duration::from_millis(100) && d <= Duration::from_secs(3600)).then_some(d)
}

/// Parses `1048576`, `512k`, `256m`, `256MiB`, `1g`.
fn parse_size(s: &str) -> Option<u64> {
    let (num, unit) = split_unit(s);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

fn split_unit(s: &str) -> (&str, &str) {
    let at = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    (&s[..at], &s[at..])
}

/// One `--name value` pair from the command line, or `--help`.
enum Flag {
    Help,
    Pair(String, OsString),
}

/// The next flag and its value; `None` at the end. Every option of `report`, `text` and `agent`
/// takes a value, so a flag without one is an error.
fn next_flag(args: &mut impl Iterator<Item = OsString>) -> Result<Option<Flag>, String> {
    let Some(flag) = args.next() else {
        return Ok(None);
    };
    let name = match flag.to_str() {
        Some("--help" | "-h") => return Ok(Some(Flag::Help)),
        Some(f) => f.to_string(),
        None => return Err(format!("unknown option {flag:?}")),
    };
    let value = args
        .next()
        .ok_or_else(|| format!("{name:?} needs a value"))?;
    Ok(Some(Flag::Pair(name, value)))
}

/// The per-input sandbox flags every mode that reads documents shares; `Ok(false)` when `name`
/// is not one of them.
fn limit_flag(name: &str, value: &OsString, limits: &mut Limits) -> Result<bool, String> {
    let bad = |what: &str| format!("{name}: {what}, got {value:?}");
    let text = || {
        value
            .to_str()
            .ok_or_else(|| format!("{name} needs a plain value"))
    };
    match name {
        "--per-input-timeout" => {
            let d = parse_duration(text()?)
                .ok_or_else(|| bad("expected a duration between 100ms and 1h"))?;
            limits.timeout = d;
            limits.cpu_seconds = Limits::cpu_for(d);
        }
        "--per-input-memory" => {
            limits.memory = parse_size(text()?)
                .filter(|&m| (16 << 20..=64 << 30).contains(&m))
                .ok_or_else(|| bad("expected a size between 16m and 64g"))?;
        }
        _ => return Ok(false),
    }
    Ok(true)
}

fn parse_run(mode: Mode, args: &mut impl Iterator<Item = OsString>) -> Result<Command, String> {
    let mut opts = Options {
        mode,
        ..Options::default()
    };
    while let Some(flag) = next_flag(args)? {
        let Flag::Pair(name, value) = flag else {
            return Ok(Command::Help);
        };
        if limit_flag(&name, &value, &mut opts.limits)? {
            continue;
        }
        let text = || {
            value
                .to_str()
                .map(str::to_string)
                .ok_or_else(|| format!("{name} needs a plain value"))
        };
        let bad = |what: &str| format!("{name}: {what}, got {value:?}");
        match name.as_str() {
            "--input" => opts.input = PathBuf::from(&value),
            "--output" => opts.output = PathBuf::from(&value),
            "--task" => opts.task = PathBuf::from(&value),
            "--jobs" => {
                opts.jobs = text()?
                    .parse()
                    .ok()
                    .filter(|j| (1..=8).contains(j))
                    .ok_or_else(|| bad("expected 1 to 8"))?;
            }
            "--max-inputs" => {
                opts.max_inputs = text()?
                    .parse()
                    .ok()
                    .filter(|&n: &usize| n >= 1)
                    .ok_or_else(|| bad("expected a positive number"))?;
            }
            "--max-output-bytes" => {
                opts.max_output_bytes = parse_size(&text()?)
                    .filter(|&n| n >= 64 << 10)
                    .ok_or_else(|| bad("expected a size of at least 64k"))?;
            }
            _ => return Err(format!("unknown option {name:?}")),
        }
    }
    Ok(Command::Run(opts))
}

/// `golem-worker agent`'s flags; the environment supplies the socket and the step limit when
/// the flags do not (that is how the host configures a worker without changing its command).
fn parse_agent(
    args: &mut impl Iterator<Item = OsString>,
    env: impl Fn(&str) -> Option<OsString>,
) -> Result<Command, String> {
    let mut opts = AgentOptions::default();
    if let Some(socket) = env(agent::SOCKET_ENV).filter(|s| !s.is_empty()) {
        opts.socket = PathBuf::from(socket);
    }
    let steps = |v: &str, name: &str| {
        v.parse()
            .ok()
            .filter(|n| (1..=agent::MAX_MAX_STEPS).contains(n))
            .ok_or_else(|| format!("{name}: expected 1 to {}, got {v:?}", agent::MAX_MAX_STEPS))
    };
    if let Some(v) = env(agent::MAX_STEPS_ENV) {
        opts.max_steps = steps(&v.to_string_lossy(), agent::MAX_STEPS_ENV)?;
    }
    let mut workspace = None;
    while let Some(flag) = next_flag(args)? {
        let Flag::Pair(name, value) = flag else {
            return Ok(Command::Help);
        };
        if limit_flag(&name, &value, &mut opts.limits)? {
            continue;
        }
        let text = value.to_string_lossy().into_owned();
        match name.as_str() {
            "--input" => opts.roots.input = PathBuf::from(&value),
            "--output" => opts.roots.output = PathBuf::from(&value),
            "--task" => opts.task = PathBuf::from(&value),
            "--workspace" => workspace = Some(PathBuf::from(&value)),
            "--socket" => opts.socket = PathBuf::from(&value),
            "--max-steps" => opts.max_steps = steps(&text, &name)?,
            "--max-tokens" => {
                opts.max_tokens = text
                    .parse()
                    .ok()
                    .filter(|n| (1..=1_000_000).contains(n))
                    .ok_or_else(|| format!("{name}: expected 1 to 1000000, got {text:?}"))?;
            }
            _ => return Err(format!("unknown option {name:?}")),
        }
    }
    let workspace = workspace.unwrap_or_else(|| PathBuf::from(agent::DEFAULT_WORKSPACE));
    opts.roots.workspace = agent::writable_dir(&workspace).then_some(workspace);
    Ok(Command::Agent(opts))
}

fn parse_child(args: &mut impl Iterator<Item = OsString>) -> Result<Command, String> {
    let mut mode = Mode::Report;
    let mut size = 0;
    while let Some(flag) = args.next() {
        let value = args.next().and_then(|v| v.into_string().ok());
        match (flag.to_str(), value) {
            (Some("--mode"), Some(v)) => {
                mode = Mode::parse(&v).ok_or_else(|| format!("bad mode {v:?}"))?;
            }
            (Some("--size"), Some(v)) => {
                size = v.parse().map_err(|_| format!("bad size {v:?}"))?;
            }
            _ => return Err(format!("{CHILD_COMMAND}: bad argument {flag:?}")),
        }
    }
    Ok(Command::Child(mode, size))
}

/// The init's command line, read by the parser the host's builder is tested against
/// (`golem_protocol::init`), so the two cannot drift apart.
fn parse_init(args: &mut impl Iterator<Item = OsString>) -> Result<Command, String> {
    match golem_protocol::init::parse(args) {
        Ok(Parsed::Run(init)) => Ok(Command::Init(InitOptions::from(init))),
        Ok(Parsed::Help) => Ok(Command::Help),
        Err(e) => Err(e.to_string()),
    }
}

fn parse(args: Vec<OsString>) -> Result<Command, String> {
    let mut args = args.into_iter().peekable();
    let first = args.peek().and_then(|a| a.to_str()).map(str::to_string);
    match first.as_deref() {
        None => parse_run(Mode::Report, &mut args),
        Some(a) if a.starts_with("--") && a != "--help" && a != "--version" => {
            parse_run(Mode::Report, &mut args)
        }
        Some(_) => {
            let a = args.next().unwrap_or_default();
            match a.to_str() {
                Some("report") => parse_run(Mode::Report, &mut args),
                Some("text") => parse_run(Mode::Text, &mut args),
                Some("agent") => parse_agent(&mut args, |k| std::env::var_os(k)),
                Some(CHILD_COMMAND) => parse_child(&mut args),
                Some(INIT_COMMAND) => parse_init(&mut args),
                Some("--help" | "-h" | "help") => Ok(Command::Help),
                Some("--version" | "-V") => Ok(Command::Version),
                Some("version") => match args.next() {
                    Some(extra) => Err(format!("version takes no arguments, got {extra:?}")),
                    None => Ok(Command::Version),
                },
                _ => Err(format!("unknown command {a:?}")),
            }
        }
    }
}

fn main() -> ExitCode {
    let code = match parse(std::env::args_os().skip(1).collect()) {
        Ok(Command::Run(opts)) => run(&opts),
        Ok(Command::Agent(opts)) => agent::run(&opts),
        Ok(Command::Child(mode, size)) => sandbox::child_main(mode, size),
        Ok(Command::Init(opts)) => init::main(&opts),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("30"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("5ms"), None);
        assert_eq!(parse_duration("x"), None);
        assert_eq!(parse_size("256m"), Some(256 << 20));
        assert_eq!(parse_size("1GiB"), Some(1 << 30));
        assert_eq!(parse_size("12q"), None);
    }

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn init_command_line() {
        let Ok(Command::Init(opts)) = parse(args(&["init", "--", "worker"])) else {
            panic!("init with defaults");
        };
        assert_eq!(opts, InitOptions::new("worker", Vec::new()));

        let full = args(&[
            "init",
            "--pid1",
            "--deadline",
            "60",
            "--output",
            "/out",
            "--",
            "/bin/w",
            "--x",
            "--",
            "y",
        ]);
        let Ok(Command::Init(opts)) = parse(full) else {
            panic!("init with options");
        };
        assert_eq!(opts.deadline, Duration::from_secs(60));
        assert!(opts.require_pid1);
        assert_eq!(opts.output, PathBuf::from("/out"));
        assert_eq!(opts.program, OsString::from("/bin/w"));
        assert_eq!(opts.args, args(&["--x", "--", "y"]));

        for bad in [
            &["init"][..],
            &["init", "worker"],
            &["init", "--"],
            &["init", "--deadline", "0", "--", "w"],
            &["init", "--deadline", "604801", "--", "w"],
            &["init", "--deadline", "1m", "--", "w"],
            &["init", "--deadline"],
            &["init", "--output"],
            &["init", "--input", "/x", "--", "w"],
        ] {
            let result = parse(args(bad));
            assert!(result.is_err(), "{bad:?} should be bad usage");
        }
    }

    #[test]
    fn agent_command_line_and_environment() {
        let env = |k: &str| match k {
            "GOLEM_MODEL_SOCKET" => Some(OsString::from("/run/x.sock")),
            "GOLEM_AGENT_MAX_STEPS" => Some(OsString::from("7")),
            _ => None,
        };
        let Ok(Command::Agent(o)) = parse_agent(&mut args(&[]).into_iter(), env) else {
            panic!("agent with defaults");
        };
        assert_eq!(o.socket, PathBuf::from("/run/x.sock"));
        assert_eq!(o.max_steps, 7);
        assert_eq!(o.roots.input, PathBuf::from("/input"));
        assert_eq!(o.task, PathBuf::from("/task/instructions.md"));
        let tmp = tempfile::tempdir().unwrap();
        let flags = args(&["--max-steps", "3", "--socket", "/s", "--output", "/o"]);
        let mut flags = flags.into_iter().chain([
            OsString::from("--workspace"),
            tmp.path().as_os_str().to_owned(),
        ]);
        let Ok(Command::Agent(o)) = parse_agent(&mut flags, env) else {
            panic!("agent with flags");
        };
        assert_eq!((o.max_steps, o.socket.to_str()), (3, Some("/s")));
        assert_eq!(o.roots.output, PathBuf::from("/o"));
        assert_eq!(o.roots.workspace.as_deref(), Some(tmp.path()));
        let Ok(Command::Agent(o)) = parse(args(&["agent", "--workspace", "/nonexistent"])) else {
            panic!("agent through parse");
        };
        assert_eq!(
            o.roots.workspace, None,
            "a missing workspace is not offered"
        );
        for bad in [
            &["--max-steps", "0"][..],
            &["--max-steps", "x"],
            &["--bogus", "1"],
            &["--input"],
        ] {
            assert!(
                parse_agent(&mut args(bad).into_iter(), |_| None).is_err(),
                "{bad:?}"
            );
        }
        let bad_env = |k: &str| (k == "GOLEM_AGENT_MAX_STEPS").then(|| OsString::from("100000"));
        assert!(parse_agent(&mut args(&[]).into_iter(), bad_env).is_err());
    }

    /// The shipped definition (`workers/agent.worker`, compiled into golem-orch) names this
    /// binary's `agent` command, so the two cannot drift apart unnoticed.
    #[test]
    fn the_agent_worker_definition_runs_the_agent() {
        let def = include_str!("../../workers/agent.worker");
        for line in [
            "\nname: agent\n",
            "\nimage: golem-worker\n",
            "\ncommand: [agent]\n",
            "\ntrust: untrusted\n",
        ] {
            assert!(def.contains(line), "{line:?}");
        }
        assert!(matches!(parse(args(&["agent"])), Ok(Command::Agent(_))));
    }

    /// What the host builds (golem-orch's plan uses `InitArgs::argv`) is what this binary runs.
    #[test]
    fn the_hosts_init_command_line_parses_to_the_same_values() {
        let host = golem_protocol::init::InitArgs {
            require_pid1: true,
            deadline_secs: golem_protocol::init::deadline_for(600),
            output: Some("/output".to_string()),
            command: ["/golem-worker", "report", "--jobs", "2"]
                .map(String::from)
                .to_vec(),
        };
        let argv: Vec<OsString> = host.argv().into_iter().map(OsString::from).collect();
        let Ok(Command::Init(opts)) = parse(argv) else {
            panic!("the host's init command line must parse");
        };
        assert!(opts.require_pid1);
        assert_eq!(opts.deadline, Duration::from_secs(600 + 60));
        assert_eq!(opts.output, PathBuf::from("/output"));
        assert_eq!(opts.program, OsString::from("/golem-worker"));
        assert_eq!(opts.args, args(&["report", "--jobs", "2"]));
    }
}
