//! Command-line interface: argument parsing, human and `--json` output, exit codes.
//!
//! This is the binary's edge: library errors become one `golem-orch: ...` line on stderr and a
//! non-zero exit code here, and nowhere else. Everything it prints goes through the rendering
//! gate (`golem_orch::render`, by the macros below), and every value from a file, a path, an
//! engine object, a container or a URL is passed through `render::line` first so that it also
//! stays on its own line.

mod admin;
mod args;
mod batch;
mod present;
mod review;
mod run;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

use golem_orch::home::Home;
use golem_orch::render::{self, line};

use args::{Command, ImageCommand, PolicyCommand};

/// An error and its causes on one line. Causes whose text the message already carries (errors
/// that embed their source) are not repeated, and newlines are flattened so nothing a server or
/// a file sent can forge extra lines.
fn one_line(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
    }
    msg.replace(['\n', '\r'], " ")
}

/// Writes a line to stdout through the rendering gate (rendered inert); a closed pipe
/// (`golem-orch ... | head`) ends the process quietly, as it does for any Unix tool.
macro_rules! outln {
    ($($arg:tt)*) => {
        golem_orch::render::outln(format_args!($($arg)*))
    };
}

/// [`outln!`] without the newline.
macro_rules! out {
    ($($arg:tt)*) => {
        golem_orch::render::out(format_args!($($arg)*))
    };
}

/// Writes a line to stderr through the rendering gate.
macro_rules! errln {
    ($($arg:tt)*) => {
        golem_orch::render::errln(format_args!($($arg)*))
    };
}

/// Writes an informational line to stderr through the rendering gate; nothing under `-q`.
macro_rules! infoln {
    ($($arg:tt)*) => {
        golem_orch::render::info(format_args!($($arg)*))
    };
}

/// [`errln!`] without the newline.
macro_rules! err {
    ($($arg:tt)*) => {
        golem_orch::render::err(format_args!($($arg)*))
    };
}

pub(crate) use {err, errln, infoln, out, outln};

const AFTER_HELP: &str = "\
Trust levels (lowest first): untrusted, session, workspace, full. See `golem-orch policy show LEVEL`.

Typical flow:
  golem-orch run --untrusted https://example.org/paper.pdf   # parse it in a locked container
  golem-orch staged                                           # what is waiting for review
  golem-orch show ID                                          # provenance, files, rejected entries
  golem-orch transcript ID                                    # what an AI worker told its model

State lives in ./.golem (or --home / GOLEM_HOME). Nothing is ever pulled from a registry.";

/// Run untrusted content in a locked Docker container and clear its output through a reviewable stage.
#[derive(Debug, Parser)]
#[command(name = "golem-orch", version, about, after_help = AFTER_HELP)]
pub(crate) struct Cli {
    /// State directory (default: ./.golem).
    #[arg(long, global = true, env = "GOLEM_HOME", value_name = "DIR")]
    home: Option<PathBuf>,
    /// Load the four level policies from DIR instead of the built-in ones.
    #[arg(long, global = true, env = "GOLEM_POLICY_DIR", value_name = "DIR")]
    policy_dir: Option<PathBuf>,
    /// Quiet: no progress bar or progress lines, no informational lines on stderr and no
    /// next-step hints (`logs: golem-orch logs ID`). Results, errors, prompts and --json
    /// output are printed exactly as without it.
    #[arg(long, short = 'q', global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

/// Parses arguments, runs the command and turns errors into one line and an exit code.
pub(crate) fn main() -> ExitCode {
    // A panic's message may quote hostile text: it goes through the gate like everything else.
    std::panic::set_hook(Box::new(|info| {
        errln!("golem-orch: internal error: {}", line(&info.to_string()));
    }));
    // The argument parser quotes what it refuses (a hostile file name given by a shell glob):
    // its errors, help and version are rendered too, never printed by clap itself.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let text = e.render().to_string();
            if e.use_stderr() {
                err!("{text}");
            } else {
                out!("{text}");
            }
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    render::set_quiet(cli.quiet);
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GOLEM_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(render::LogWriter)
        .with_ansi(false)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            errln!("golem-orch: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            // One line: the chain joined, newlines flattened so nothing a server sent can forge
            // lines, and rendered so nothing a file or a server sent can drive the terminal.
            errln!("golem-orch: {}", line(&one_line(&e)));
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(cli: Cli) -> Result<ExitCode> {
    let policy_dir = cli.policy_dir.as_deref();
    match cli.command {
        Command::Run(args) => run::run(cli.home.as_deref(), policy_dir, args).await,
        Command::Batch(args) => batch::batch_cmd(cli.home.as_deref(), policy_dir, args).await,
        Command::Sessions(j) => admin::sessions(&open_home(cli.home.as_deref())?, j.json),
        Command::Logs { session } => admin::logs(&open_home(cli.home.as_deref())?, &session),
        Command::Staged(j) => review::staged(&open_home(cli.home.as_deref())?, j.json),
        Command::Show { id, json } => {
            review::show(&open_home(cli.home.as_deref())?, &id, json.json)
        }
        Command::Transcript { id, json } => {
            review::transcript(&open_home(cli.home.as_deref())?, &id, json.json)
        }
        Command::Diff { target, stat } => {
            review::diff_cmd(&open_home(cli.home.as_deref())?, &target, stat)
        }
        Command::Push {
            target,
            message,
            yes,
            force,
            remote,
        } => review::push_cmd(
            &open_home(cli.home.as_deref())?,
            &target,
            message.as_deref(),
            yes,
            force,
            remote.as_deref(),
        ),
        Command::Discard { id, yes, json } => {
            review::discard_cmd(&open_home(cli.home.as_deref())?, &id, yes, json.json)
        }
        Command::Workers(j) => admin::workers_cmd(policy_dir, j.json),
        Command::Image {
            command: ImageCommand::Build(j),
        } => admin::image_build(j.json).await,
        Command::Policy {
            command: PolicyCommand::Show { level, json },
        } => admin::policy_show(policy_dir, level, json.json),
        Command::Doctor(j) => admin::doctor(cli.home.as_deref(), policy_dir, j.json).await,
        Command::Gc(g) => admin::gc_cmd(cli.home.as_deref(), g.json.json, g.dry_run).await,
        Command::Completions { shell } => admin::completions(shell),
        Command::Man => admin::man(),
        Command::Audit {
            session,
            verify,
            json,
        } => admin::audit(&open_home(cli.home.as_deref())?, session, verify, json.json),
    }
}

/// Opens (creating) the state directory.
pub(super) fn open_home(explicit: Option<&Path>) -> Result<Home> {
    Ok(Home::open(explicit)?)
}

/// Prints `value` as pretty JSON whose bytes are inert on a terminal (`render::json`).
pub(super) fn print_json(value: &impl serde::Serialize) -> Result<()> {
    render::print_json(value)?;
    Ok(())
}

/// Resolves on Ctrl-C, SIGTERM, SIGHUP (the terminal closed) or SIGQUIT, so every way a person
/// stops a session still removes its container instead of leaving it running unsupervised.
pub(super) async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let kinds = [
        SignalKind::interrupt(),
        SignalKind::terminate(),
        SignalKind::hangup(),
        SignalKind::quit(),
    ];
    let mut streams: Vec<_> = kinds.into_iter().filter_map(|k| signal(k).ok()).collect();
    if streams.is_empty() {
        // Without handlers a stop is still cleaned up by gc; never cancel spuriously.
        std::future::pending::<()>().await;
    }
    let waits = streams.iter_mut().map(|s| Box::pin(s.recv()));
    futures_util::future::select_all(waits).await;
}
