//! Command-line interface: argument parsing, human and `--json` output, exit codes.
//!
//! This is the binary's edge: library errors become one `golem-orch: ...` line on stderr and a
//! non-zero exit code here, and nowhere else. Everything it prints goes through the rendering
//! gate (`golem_orch::render`, by the macros below), and every value from a file, a path, an
//! engine object, a container or a URL is passed through `render::line` first so that it also
//! stays on its own line.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use serde_json::json;

use golem_orch::audit::Audit;
use golem_orch::home::{self, Home};
use golem_orch::intake::{self, IntakeLimits};
use golem_orch::policy::{self, TrustLevel};
use golem_orch::render::{self, line};
use golem_orch::session::{self, RunOptions, SessionStatus};
use golem_orch::stage::Stage;
use golem_orch::units::{Limit, Size};
use golem_orch::{engine, gc, image, plan, workers};

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
        render::outln(format_args!($($arg)*))
    };
}

/// [`outln!`] without the newline.
macro_rules! out {
    ($($arg:tt)*) => {
        render::out(format_args!($($arg)*))
    };
}

/// Writes a line to stderr through the rendering gate.
macro_rules! errln {
    ($($arg:tt)*) => {
        render::errln(format_args!($($arg)*))
    };
}

/// [`errln!`] without the newline.
macro_rules! err {
    ($($arg:tt)*) => {
        render::err(format_args!($($arg)*))
    };
}

const AFTER_HELP: &str = "\
Trust levels (lowest first): untrusted, session, workspace, full. See `golem-orch policy show LEVEL`.

Typical flow:
  golem-orch run --untrusted https://example.org/paper.pdf   # parse it in a locked container
  golem-orch staged                                           # what is waiting for review
  golem-orch show ID                                          # provenance, files, rejected entries

State lives in ./.golem (or --home / GOLEM_HOME). Nothing is ever pulled from a registry.";

/// Run untrusted content in a locked Docker container and clear its output through a reviewable stage.
#[derive(Debug, Parser)]
#[command(name = "golem-orch", version, about, after_help = AFTER_HELP)]
pub struct Cli {
    /// State directory (default: ./.golem).
    #[arg(long, global = true, env = "GOLEM_HOME", value_name = "DIR")]
    home: Option<PathBuf>,
    /// Load the four level policies from DIR instead of the built-in ones.
    #[arg(long, global = true, env = "GOLEM_POLICY_DIR", value_name = "DIR")]
    policy_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one session: take inputs in, process them in one locked container, stage the output.
    #[command(after_help = RUN_HELP)]
    Run(RunArgs),
    /// Process many documents, one locked container each, at most --jobs at once.
    #[command(after_help = BATCH_HELP)]
    Batch(BatchArgs),
    /// List sessions, newest first.
    Sessions(JsonFlag),
    /// Print a session's captured worker output (control characters escaped).
    Logs {
        /// Session id or unique prefix.
        session: String,
    },
    /// List staged commits: pending first, then pushed and discarded.
    Staged(JsonFlag),
    /// Show a staged commit's manifest: provenance, files, rejected entries.
    Show {
        /// Staged commit id or unique prefix.
        id: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Show what a staged commit would change on a branch: added and modified files, as a diff.
    Diff(TargetArgs),
    /// Commit a staged commit onto a branch of a git repository (asks first; never touches your work tree).
    #[command(after_help = PUSH_HELP)]
    Push {
        #[command(flatten)]
        target: TargetArgs,
        /// Commit message summary (provenance trailers are always added).
        #[arg(long, short = 'm', value_name = "MESSAGE")]
        message: Option<String>,
        /// Push without asking (required when not on a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
        /// Push even when the branch changed the same paths since the session read the repository,
        /// or when a file is a look-alike of another path (case, NFC/NFD, trailing dots/spaces).
        #[arg(long)]
        force: bool,
        /// Then push the branch to this remote with your own git credentials.
        #[arg(long, value_name = "NAME")]
        remote: Option<String>,
    },
    /// Throw a pending staged commit away (asks first).
    Discard {
        /// Staged commit id or unique prefix.
        id: String,
        /// Discard without asking (required when not on a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// List worker definitions: the built-ins and the project's workers/*.worker files.
    Workers(JsonFlag),
    /// Build the golem-worker image.
    Image {
        #[command(subcommand)]
        command: ImageCommand,
    },
    /// Inspect trust-level policies.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Check that everything a session needs is in place.
    Doctor(JsonFlag),
    /// Remove containers and volumes whose orchestrator died, and mark their sessions failed.
    Gc(JsonFlag),
    /// Show the append-only audit log.
    Audit {
        /// Only this session's records.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Check the hash chain: exits non-zero if a past record was changed or removed.
        #[arg(long)]
        verify: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
}

const PUSH_HELP: &str = "\
The commit's parent is the branch's tip; a missing branch is created from HEAD. The default branch
is golem/<id>, so a push never moves a branch you are working on; pushing to the checked-out
branch is refused. Every staged file is re-hashed against the manifest first, and the manifest
against the hash the audit log recorded when it was staged: a tampered stage is refused.
The commit message carries trailers: Golem-Staged, Golem-Session, Golem-Trust-Level, Golem-Image,
Golem-Input-Sha256 (one per input) and Golem-Manifest-Sha256.

Without --yes, push shows what would change and asks [d]iff / [y]es / [n]o (with --json and no
--yes, it prints the proposal and pushes nothing). Files that matter once pushed (CI, git
attributes and hooks, build and environment files, #! scripts, golem's own files) are marked
[sensitive: why]; look-alikes of other paths in the branch (differing only by case, Unicode
normalisation or trailing dots/spaces) are marked [collides with ...] and refused unless --force.";

/// Which repository, branch and files a diff or push is about.
#[derive(Debug, Args)]
struct TargetArgs {
    /// Staged commit id or unique prefix.
    id: String,
    /// The git repository (default: the one containing the current directory).
    #[arg(long, value_name = "PATH")]
    repo: Option<PathBuf>,
    /// Branch to compare with or commit on (default: golem/<id>).
    #[arg(long, short = 'b', value_name = "BRANCH")]
    branch: Option<String>,
    /// Directory inside the repository for the staged files (default: the root).
    #[arg(long, value_name = "DIR")]
    prefix: Option<String>,
    /// Only these staged files or directories.
    #[arg(long, value_name = "PATH", num_args = 1..)]
    only: Vec<String>,
    #[command(flatten)]
    json: JsonFlag,
}

#[derive(Debug, Subcommand)]
enum ImageCommand {
    /// Build (or rebuild) golem-worker from the binary embedded in golem-orch; never pulls.
    Build(JsonFlag),
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Print the effective policy for LEVEL after the project's golem.yaml is applied.
    Show {
        /// untrusted, session, workspace or full.
        level: TrustLevel,
        #[command(flatten)]
        json: JsonFlag,
    },
}

#[derive(Debug, Args, Clone, Copy)]
struct JsonFlag {
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

const RUN_HELP: &str = "\
Inputs are files, directories (taken recursively) and http(s) URLs. URLs are downloaded on the
host with a size cap, a timeout and a redirect limit; the host never parses content.

The worker sees its inputs read-only at /input and writes to /output; the output is validated
entry by entry and staged in .golem/staged/<id>/ for review. Use --image IMAGE -- ARGS... to run
your own local image under the same policy (ARGS replace the image's command, as with docker run).

--json prints one object: {session, status, exit_code, staged, timed_out, oom_killed, files,
bytes, rejected, error, logs}. status is staged, failed, timeout, oom, rejected or cancelled.

Exit codes: 0 staged and the worker succeeded; 1 error or failed; 2 bad usage; 3 staged but the
worker exited non-zero; 4 timeout; 5 out of memory; 6 output rejected; 130 cancelled.";

const BATCH_HELP: &str = "\
Every file found (directories recursively) and every line of --from FILE (paths or URLs; blank
lines and # comments ignored) is one document, processed in its own container exactly as
`golem-orch run` would, with the same trust level, worker and limits. A document that fails,
times out or runs out of memory is recorded and the others go on. Each document gets its own
staged commit, or with --stage-as-one the batch gets one, with a folder per document.

Ctrl-C stops launching, cancels the running documents (removing their containers) and records
the batch; `golem-orch batch --resume ID` runs only what did not finish, plus documents that
failed for a reason outside them (the engine went away, the disk was full). Records live in
.golem/batches/. Progress goes to stderr (a bar on a terminal, lines otherwise).

Exit codes: 0 every document staged and succeeded; 1 some did not; 130 cancelled.";

#[derive(Debug, Args)]
struct BatchArgs {
    /// Files, directories (recursive) or http(s) URLs; each file is one document.
    #[arg(value_name = "INPUT")]
    inputs: Vec<String>,
    /// Also read documents from FILE, one path or URL per line.
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
    /// Containers at once (default: the number of CPU cores).
    #[arg(long, short = 'j', value_name = "N")]
    jobs: Option<usize>,
    /// One staged commit for the whole batch, with a folder per document.
    #[arg(long)]
    stage_as_one: bool,
    /// Run what an earlier, cancelled or crashed batch did not finish.
    #[arg(long, value_name = "BATCH_ID", conflicts_with_all = ["inputs", "from", "stage_as_one", "max_input", "allow_private_urls"])]
    resume: Option<String>,
    #[command(flatten)]
    intake: IntakeArgs,
    #[command(flatten)]
    worker: WorkerArgs,
    #[command(flatten)]
    json: JsonFlag,
    /// Arguments for --image, after `--`.
    #[arg(last = true, value_name = "ARGS")]
    command: Vec<String>,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Files, directories or http(s) URLs to process.
    #[arg(value_name = "INPUT")]
    inputs: Vec<String>,
    #[command(flatten)]
    worker: WorkerArgs,
    /// Largest download accepted per URL.
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    max_download: Size,
    /// Wall-clock limit per download.
    #[arg(long, value_name = "DURATION", default_value = "2m")]
    download_timeout: Limit,
    #[command(flatten)]
    intake: IntakeArgs,
    /// Opt in to a network (only the full level allows it).
    #[arg(long)]
    allow_network: bool,
    /// Keep the stopped container afterwards for debugging (docker inspect; gc removes it later).
    #[arg(long)]
    keep: bool,
    /// Print the exact container that would be created and start nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    json: JsonFlag,
    /// Arguments for the image, after `--`.
    #[arg(last = true, value_name = "ARGS")]
    command: Vec<String>,
}

/// Intake limits a person may set; shared by `run` and `batch`.
#[derive(Debug, Args, Clone)]
struct IntakeArgs {
    /// Lower the session's total input cap (the policy's input.max_total_bytes; never raises it).
    #[arg(long, value_name = "SIZE")]
    max_input: Option<Size>,
    /// Let URLs (and their redirects) reach loopback, private and link-local addresses: your own
    /// intranet. Off by default, so a redirect cannot reach the host's or the network's services.
    #[arg(long)]
    allow_private_urls: bool,
}

impl IntakeArgs {
    /// Applies the cap to the policy and both settings to the session's intake limits.
    fn apply(&self, opts: &mut RunOptions) -> Result<()> {
        policy::narrow_input(&mut opts.policy, self.max_input)?;
        opts.intake.max_total_bytes = opts.policy.input.max_total_bytes.bytes();
        opts.intake.allow_private = self.allow_private_urls;
        Ok(())
    }
}

/// The trust level and what to run; shared by `run` and `batch`.
#[derive(Debug, Args, Clone)]
#[group(id = "worker_args", multiple = true)]
#[command(group(clap::ArgGroup::new("level").multiple(false).args(["trust", "untrusted", "session", "workspace", "full"])))]
struct WorkerArgs {
    /// Trust level for the session (default: untrusted; a worker needing more must be given it).
    #[arg(long, value_name = "LEVEL", conflicts_with_all = ["untrusted", "session", "workspace", "full"])]
    trust: Option<TrustLevel>,
    /// Same as --trust untrusted.
    #[arg(long)]
    untrusted: bool,
    /// Same as --trust session.
    #[arg(long)]
    session: bool,
    /// Same as --trust workspace.
    #[arg(long)]
    workspace: bool,
    /// Same as --trust full.
    #[arg(long)]
    full: bool,
    /// Worker definition to run (default: report). See `golem-orch workers`.
    #[arg(long, short = 'w', value_name = "NAME", conflicts_with = "image")]
    worker: Option<String>,
    /// Run this local image instead of a worker definition (never pulled).
    #[arg(long, value_name = "IMAGE")]
    image: Option<String>,
    /// Lower the policy's wall-clock limit for this run (e.g. 30s, 5m).
    #[arg(long, value_name = "DURATION")]
    timeout: Option<Limit>,
    /// Lower the policy's memory limit for this run (e.g. 256m, 1g, 512MiB).
    #[arg(long, value_name = "SIZE")]
    memory: Option<Size>,
}

impl WorkerArgs {
    /// The level the person asked for, if any.
    fn level(&self) -> Option<TrustLevel> {
        if self.session {
            Some(TrustLevel::Session)
        } else if self.workspace {
            Some(TrustLevel::Workspace)
        } else if self.full {
            Some(TrustLevel::Full)
        } else if self.untrusted {
            Some(TrustLevel::Untrusted)
        } else {
            self.trust
        }
    }
}

/// Parses arguments, runs the command and turns errors into one line and an exit code.
pub fn main() -> ExitCode {
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
        Command::Run(args) => run(cli.home.as_deref(), policy_dir, args).await,
        Command::Batch(args) => batch_cmd(cli.home.as_deref(), policy_dir, args).await,
        Command::Sessions(j) => sessions(&open_home(cli.home.as_deref())?, j.json),
        Command::Logs { session } => logs(&open_home(cli.home.as_deref())?, &session),
        Command::Staged(j) => staged(&open_home(cli.home.as_deref())?, j.json),
        Command::Show { id, json } => show(&open_home(cli.home.as_deref())?, &id, json.json),
        Command::Diff(t) => diff_cmd(&open_home(cli.home.as_deref())?, &t),
        Command::Push {
            target,
            message,
            yes,
            force,
            remote,
        } => push_cmd(
            &open_home(cli.home.as_deref())?,
            &target,
            message.as_deref(),
            yes,
            force,
            remote.as_deref(),
        ),
        Command::Discard { id, yes, json } => {
            discard_cmd(&open_home(cli.home.as_deref())?, &id, yes, json.json)
        }
        Command::Workers(j) => workers_cmd(j.json),
        Command::Image {
            command: ImageCommand::Build(j),
        } => image_build(j.json).await,
        Command::Policy {
            command: PolicyCommand::Show { level, json },
        } => policy_show(policy_dir, level, json.json),
        Command::Doctor(j) => doctor(cli.home.as_deref(), policy_dir, j.json).await,
        Command::Gc(j) => gc_cmd(&open_home(cli.home.as_deref())?, j.json).await,
        Command::Audit {
            session,
            verify,
            json,
        } => audit(&open_home(cli.home.as_deref())?, session, verify, json.json),
    }
}

fn open_home(explicit: Option<&Path>) -> Result<Home> {
    Ok(Home::open(explicit)?)
}

fn project_file() -> Option<PathBuf> {
    std::env::current_dir()
        .ok()
        .and_then(|d| policy::find_project_file(&d))
}

/// Prints `value` as pretty JSON whose bytes are inert on a terminal (`render::json`).
fn print_json(value: &impl serde::Serialize) -> Result<()> {
    render::print_json(value)?;
    Ok(())
}

/// Everything about a session except its inputs: the effective policy (level, project file,
/// worker definition, flags) and what to run. Shared by `run` and `batch`.
fn prepare(policy_dir: Option<&Path>, w: &WorkerArgs, command: &[String]) -> Result<RunOptions> {
    let (level, worker, image, memory, timeout) = (
        w.level(),
        w.worker.as_deref(),
        w.image.as_deref(),
        w.memory,
        w.timeout,
    );
    if !command.is_empty() && image.is_none() {
        bail!("arguments after -- are for --image IMAGE; golem-worker's command is fixed");
    }
    let project = project_file();
    // A worker definition (report by default) unless the person runs their own image directly.
    let definition = match image {
        Some(_) => None,
        None => Some(workers::find(
            workers_dir(project.as_deref()).as_deref(),
            worker.unwrap_or("report"),
        )?),
    };
    // Only the person's flags raise the level: a definition (which a cloned repository may
    // ship) that needs more is refused, never obeyed.
    let level = level.unwrap_or(TrustLevel::Untrusted);
    let mut effective = policy::load(level, policy_dir, project.as_deref())?;
    if let Some(def) = &definition {
        def.narrow(&mut effective.policy)?;
    }
    policy::narrow_for_run(&mut effective.policy, memory, timeout)?;
    let (image, command, instructions) = match &definition {
        Some(def) => (
            (!def.is_builtin_image()).then(|| def.image.clone()),
            def.command.clone(),
            Some(def.instructions.clone()).filter(|t| !t.is_empty()),
        ),
        None => (image.map(str::to_string), command.to_vec(), None),
    };
    Ok(RunOptions {
        policy: effective.policy,
        sources: Vec::new(),
        image,
        command,
        instructions,
        keep: false,
        allow_network: false,
        repo: std::env::current_dir()
            .ok()
            .and_then(|d| session::find_repo(&d)),
        intake: IntakeLimits::default(),
    })
}

async fn run(
    home_arg: Option<&Path>,
    policy_dir: Option<&Path>,
    args: RunArgs,
) -> Result<ExitCode> {
    let mut opts = prepare(policy_dir, &args.worker, &args.command)?;
    if args.inputs.is_empty() && opts.image.is_none() {
        bail!("nothing to process: give at least one file, directory or URL (see golem-orch run --help)");
    }
    opts.sources = intake::classify(&args.inputs)?;
    opts.keep = args.keep;
    opts.allow_network = args.allow_network;
    opts.intake = IntakeLimits {
        max_download_bytes: args.max_download.bytes(),
        download_timeout: args.download_timeout.duration(),
        ..IntakeLimits::default()
    };
    args.intake.apply(&mut opts)?;
    if args.dry_run {
        return dry_run(home_arg, &opts, args.json.json);
    }

    let home = open_home(home_arg)?;
    let (docker, _) = engine::connect().await?;
    // Leftovers of crashed runs go first; live sessions are never touched.
    if let Err(e) = gc::collect(&docker, &home, gc::Scope::Home).await {
        tracing::warn!("gc before run failed: {e}");
    }
    let outcome = session::run(&home, &docker, opts, shutdown_signal()).await?;
    if args.json.json {
        print_json(&outcome)?;
    } else {
        let short = home::short(&outcome.session);
        outln!("session {short}: {}", outcome.status.as_str());
        if let Some(code) = outcome.exit_code {
            outln!("  worker exit code {code}");
        }
        if let Some(staged) = &outcome.staged {
            outln!(
                "  staged {}: {} file(s), {}, {} rejected  (golem-orch show {})",
                home::short(staged),
                outcome.files,
                human_bytes(outcome.bytes),
                outcome.rejected,
                home::short(staged)
            );
        }
        outln!("  logs: golem-orch logs {short}");
    }
    // Scripts read stdout; a person should still see what went wrong, on one line.
    if let Some(e) = &outcome.error {
        let e = line(&e.replace(['\n', '\r'], " "));
        errln!(
            "golem-orch: session {} {}: {e}",
            home::short(&outcome.session),
            outcome.status.as_str()
        );
    }
    Ok(ExitCode::from(match outcome.status {
        SessionStatus::Staged if outcome.exit_code == Some(0) => 0,
        SessionStatus::Staged => 3,
        SessionStatus::Timeout => 4,
        SessionStatus::Oom => 5,
        SessionStatus::Rejected => 6,
        SessionStatus::Cancelled => 130,
        _ => 1,
    }))
}

async fn batch_cmd(
    home_arg: Option<&Path>,
    policy_dir: Option<&Path>,
    args: BatchArgs,
) -> Result<ExitCode> {
    use golem_orch::batch;
    let home = open_home(home_arg)?;
    let (record, worker_args, command, intake_args) = match &args.resume {
        Some(id) => {
            let record = batch::load(&home, id)?;
            let s = &record.settings;
            let intake_args = IntakeArgs {
                max_input: s.max_input,
                allow_private_urls: s.allow_private_urls,
            };
            let w = WorkerArgs {
                trust: Some(s.trust_level),
                untrusted: false,
                session: false,
                workspace: false,
                full: false,
                worker: s.worker.clone(),
                image: s.image.clone(),
                timeout: s.timeout,
                memory: s.memory,
            };
            let command = s.command.clone();
            (record, w, command, intake_args)
        }
        None => {
            let mut inputs = args.inputs.clone();
            if let Some(from) = &args.from {
                let text = std::fs::read_to_string(from)
                    .with_context(|| format!("reading {}", from.display()))?;
                inputs.extend(
                    text.lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty() && !l.starts_with('#'))
                        .map(str::to_string),
                );
            }
            if inputs.is_empty() {
                bail!("nothing to process: give files, directories, URLs or --from FILE (see golem-orch batch --help)");
            }
            let documents = batch::documents(&inputs)?;
            let w = &args.worker;
            let settings = batch::Settings {
                trust_level: w.level().unwrap_or(TrustLevel::Untrusted),
                worker: w.worker.clone(),
                image: w.image.clone(),
                command: args.command.clone(),
                memory: w.memory,
                timeout: w.timeout,
                jobs: args
                    .jobs
                    .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
                    .max(1),
                stage_as_one: args.stage_as_one,
                allow_private_urls: args.intake.allow_private_urls,
                max_input: args.intake.max_input,
            };
            let record = batch::new_record(settings, documents);
            (record, w.clone(), args.command.clone(), args.intake.clone())
        }
    };
    let mut template = prepare(policy_dir, &worker_args, &command)?;
    intake_args.apply(&mut template)?;
    let (docker, _) = engine::connect().await?;
    if let Err(e) = gc::collect(&docker, &home, gc::Scope::Home).await {
        tracing::warn!("gc before batch failed: {e}");
    }
    let images = session::resolve_images(&docker, &template).await?;
    let pending = record.documents.iter().filter(|d| d.needs_run()).count();
    errln!(
        "batch {}: {} document(s) to run, {} at a time",
        home::short(&record.id),
        pending,
        record.settings.jobs
    );
    let progress = BatchProgress::new(record.documents.len(), record.documents.len() - pending);
    let record = batch::run(
        &home,
        &docker,
        record,
        template,
        &images,
        &progress,
        shutdown_signal(),
    )
    .await?;
    progress.done();
    let summary = record.summary();
    if args.json.json {
        print_json(
            &json!({ "batch": record.id, "state": record.state, "staged": record.staged, "summary": summary, "documents": record.documents }),
        )?;
    } else {
        outln!(
            "batch {}: {}",
            home::short(&record.id),
            record.state.as_str()
        );
        outln!("  {:<10} {:>6}", "succeeded", summary.succeeded);
        outln!("  {:<10} {:>6}", "partial", summary.partial);
        outln!("  {:<10} {:>6}", "failed", summary.failed);
        outln!("  {:<10} {:>6}", "timed out", summary.timed_out);
        outln!("  {:<10} {:>6}", "oom", summary.oom);
        outln!("  {:<10} {:>6}", "rejected", summary.rejected);
        outln!("  {:<10} {:>6}", "not run", summary.not_run);
        outln!(
            "  rejected entries {}, bytes staged {}",
            summary.rejected_entries,
            human_bytes(summary.bytes_staged)
        );
        for d in record.documents.iter().filter(|d| {
            !matches!(
                d.status,
                batch::DocStatus::Staged | batch::DocStatus::Pending
            )
        }) {
            outln!(
                "  {:<9} {}  {}",
                d.status.as_str(),
                line(&d.source),
                line(d.error.as_deref().unwrap_or(""))
            );
        }
        if let Some(staged) = &record.staged {
            outln!("  staged as one: golem-orch show {}", home::short(staged));
        }
        if record.state == batch::BatchState::Cancelled {
            outln!(
                "  resume with: golem-orch batch --resume {}",
                home::short(&record.id)
            );
        } else if summary.retryable > 0 {
            outln!(
                "  {} failed outside the document (engine or host); run them again with: golem-orch batch --resume {}",
                summary.retryable,
                home::short(&record.id)
            );
        }
    }
    Ok(ExitCode::from(match record.state {
        batch::BatchState::Cancelled => 130,
        _ if summary.succeeded == summary.total => 0,
        _ => 1,
    }))
}

/// Progress for a batch: a bar on a terminal, one line per finished document otherwise; both
/// through the rendering gate (`render::Progress` renders every message and line).
struct BatchProgress {
    bar: render::Progress,
}

impl BatchProgress {
    fn new(total: usize, done: usize) -> BatchProgress {
        BatchProgress {
            bar: render::Progress::new(total, done),
        }
    }

    fn done(&self) {
        self.bar.finish();
    }
}

impl golem_orch::batch::Progress for BatchProgress {
    fn started(&self, doc: &golem_orch::batch::Document) {
        self.bar.set_message(&doc.folder);
    }

    fn finished(&self, doc: &golem_orch::batch::Document, done: usize, total: usize) {
        let text = format!(
            "[{done}/{total}] {:<9} {}{}",
            doc.status.as_str(),
            line(&doc.source),
            doc.error
                .as_deref()
                .map(|e| format!("  ({})", line(&e.replace(['\n', '\r'], " "))))
                .unwrap_or_default()
        );
        self.bar.set_position(done);
        if !self.bar.is_bar() || doc.status != golem_orch::batch::DocStatus::Staged {
            self.bar.println(&text);
        }
    }
}

/// Prints the plan without creating anything: no session, no download, no engine call.
fn dry_run(home_arg: Option<&Path>, opts: &RunOptions, json: bool) -> Result<ExitCode> {
    let home = Home::peek(home_arg);
    let id = "0".repeat(32);
    let mut paths = session::host_paths(&home, &id, &opts.policy, opts.repo.clone(), false)?;
    if opts.instructions.is_some() {
        paths.task = Some(home.session_dir(&id).join("task"));
    }
    let owner = golem_orch::owner::Owner::current();
    let command = if opts.command.is_empty() && opts.image.is_none() {
        session::default_command()
    } else {
        opts.command.clone()
    };
    let plan = plan::build(
        "(new session)",
        &opts.policy,
        &paths,
        &plan::Command {
            image: opts.image.clone().unwrap_or_else(image::worker_tag),
            image_id: None,
            // A person's image is not inspected in a dry run (no engine call).
            entrypoint: opts
                .image
                .is_none()
                .then(|| vec![image::WORKER_ENTRYPOINT.to_string()]),
            cmd: command,
        },
        session::labels(&home, "(new session)", &owner),
        opts.allow_network,
    )?;
    let inputs: Vec<String> = opts.sources.iter().map(intake::describe).collect();
    if json {
        print_json(&json!({ "dry_run": true, "inputs": inputs, "plan": plan }))?;
    } else {
        outln!("dry run: nothing was created\ninputs");
        for i in &inputs {
            outln!("  {}", line(i));
        }
        out!("{plan}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Resolves on Ctrl-C, SIGTERM, SIGHUP (the terminal closed) or SIGQUIT, so every way a person
/// stops a session still removes its container instead of leaving it running unsupervised.
async fn shutdown_signal() {
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

fn sessions(home: &Home, json: bool) -> Result<ExitCode> {
    let list = session::list(home)?;
    if json {
        print_json(&list)?;
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        outln!("no sessions yet: golem-orch run --untrusted FILE");
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{:<12}  {:<10}  {:<9}  {:>4}  {:<20}  SOURCE",
        "SESSION",
        "STATUS",
        "TRUST",
        "EXIT",
        "STARTED"
    );
    for r in list {
        let exit = r
            .exit
            .code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into());
        let source = r
            .inputs
            .first()
            .map(|i| line(&i.source))
            .unwrap_or_default();
        outln!(
            "{:<12}  {:<10}  {:<9}  {:>4}  {:<20}  {}",
            home::short(&r.id),
            r.status.as_str(),
            r.trust_level.as_str(),
            exit,
            r.created_at
                .get(..19)
                .unwrap_or(&r.created_at)
                .replace('T', " "),
            source
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn logs(home: &Home, id: &str) -> Result<ExitCode> {
    let id = home::resolve_id(&home.sessions_dir(), id, "session")?;
    let path = home.session_dir(&id).join(session::LOGS);
    // Escaped again when printed: never trust that the file on disk is what was written.
    match std::fs::read(&path) {
        Ok(raw) => out!("{}", render::block_bytes(&raw)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            errln!(
                "session {} has no logs (its worker never ran)",
                home::short(&id)
            )
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    Ok(ExitCode::SUCCESS)
}

fn staged(home: &Home, json: bool) -> Result<ExitCode> {
    let list = Stage::new(home.staged_dir()).list()?;
    if json {
        print_json(&list)?;
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        outln!("nothing staged");
        return Ok(ExitCode::SUCCESS);
    }
    let now = chrono::Utc::now();
    outln!(
        "{:<12}  {:<9}  {:>6}  {:>5}  {:>9}  {:>8}  {:<9}  SOURCE",
        "ID",
        "STATUS",
        "AGE",
        "FILES",
        "BYTES",
        "REJECTED",
        "TRUST"
    );
    for s in list {
        let age = chrono::DateTime::parse_from_rfc3339(&s.created_at)
            .map(|t| human_age(now.signed_duration_since(t.with_timezone(&chrono::Utc))))
            .unwrap_or_else(|_| "?".into());
        outln!(
            "{:<12}  {:<9}  {:>6}  {:>5}  {:>9}  {:>8}  {:<9}  {}",
            home::short(&s.id),
            s.status,
            age,
            s.files,
            human_bytes(s.bytes),
            s.rejected,
            s.trust_level.as_str(),
            line(&s.source)
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn show(home: &Home, id: &str, json: bool) -> Result<ExitCode> {
    let id = home::resolve_id(&home.staged_dir(), id, "staged commit")?;
    let stage = Stage::new(home.staged_dir());
    let m = stage.manifest(&id)?;
    let status = stage.status(&id)?;
    if json {
        let mut value = serde_json::to_value(&m)?;
        value["status"] = json!(status.word());
        value["path"] = json!(stage.dir(&id).join(golem_orch::stage::FILES));
        print_json(&value)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("staged   {}  ({})", line(&m.id), status.word());
    outln!("session  {}", line(&m.session));
    outln!("created  {}", line(&m.created_at));
    outln!("trust    {}", m.trust_level);
    outln!("image    {}  ({})", line(&m.image), line(&m.image_id));
    let command: Vec<String> = m.command.iter().map(|a| line(a)).collect();
    outln!("command  {}", command.join(" "));
    outln!(
        "exit     {}",
        m.exit_code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into())
    );
    outln!(
        "files in {}",
        render::path(&stage.dir(&id).join(golem_orch::stage::FILES))
    );
    outln!("\ninputs ({})", m.inputs.len());
    for i in &m.inputs {
        outln!(
            "  {}  {:>9}  {}  <- {}",
            short_hash(&i.sha256),
            human_bytes(i.size),
            line(&i.name),
            line(&i.source)
        );
        if i.hops.len() > 1 {
            outln!("      redirected: {}", i.hops.join(" -> "));
        }
    }
    outln!("\nfiles ({}, {})", m.files.len(), human_bytes(m.bytes));
    for f in &m.files {
        outln!(
            "  {}  {:>9}  {}",
            short_hash(&f.sha256),
            human_bytes(f.size),
            line(&f.path)
        );
    }
    let rejected = m.rejected.len() as u64 + m.rejected_omitted;
    outln!("\nrejected ({rejected})");
    for r in &m.rejected {
        outln!("  {}: {}", line(&r.path), line(&r.reason));
    }
    if m.rejected_omitted > 0 {
        outln!(
            "  ... and {} more (see golem-orch audit --session {})",
            m.rejected_omitted,
            home::short(&m.session)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Resolves the staged id and opens the target repository, branch and prefix.
fn open_target(home: &Home, t: &TargetArgs) -> Result<(String, golem_orch::target::Target)> {
    let id = home::resolve_id(&home.staged_dir(), &t.id, "staged commit")?;
    let repo = match &t.repo {
        Some(r) => r.clone(),
        None => std::env::current_dir()?,
    };
    let branch = t
        .branch
        .clone()
        .unwrap_or_else(|| golem_orch::target::default_branch(&id));
    let target = golem_orch::target::Target::open(&repo, &branch, t.prefix.as_deref())?;
    Ok((id, target))
}

fn color_wanted() -> bool {
    render::stdout_is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

fn diff_cmd(home: &Home, t: &TargetArgs) -> Result<ExitCode> {
    let (id, target) = open_target(home, t)?;
    let stage = Stage::new(home.staged_dir());
    let manifest = stage.manifest(&id)?;
    let diffs = golem_orch::diff::compute(&stage, &id, &manifest, &target, &t.only)?;
    if t.json.json {
        print_json(
            &json!({ "staged": id, "repo": target.path, "branch": target.branch, "summary": golem_orch::diff::summary(&diffs), "files": diffs }),
        )?;
    } else {
        // Colours are golem-orch's own, added after the content was rendered; the gate keeps
        // exactly those and escapes anything else.
        render::out_coloured(&golem_orch::diff::render(&diffs, color_wanted()));
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints what a push would do: target, branch, and each file with A/M and its size.
fn print_proposal(p: &golem_orch::push::Proposal) {
    let branch = if p.new_branch {
        format!("{} (new, from HEAD)", line(&p.branch))
    } else {
        line(&p.branch)
    };
    errln!(
        "push {} into {} on branch {branch}",
        line(home::short(&p.staged)),
        line(&p.repo)
    );
    for f in &p.files {
        let (added, removed) = golem_orch::diff::line_counts(f);
        let note = match f.change {
            golem_orch::diff::Change::Unchanged => "unchanged, skipped".to_string(),
            _ => format!("+{added} -{removed}"),
        };
        errln!(
            "  {}  {:<40}  {:>9}  {note}{}",
            f.change.mark(),
            line(&f.path),
            human_bytes(f.size),
            line(&golem_orch::diff::marks(f))
        );
    }
    if let Some(summary) = golem_orch::diff::summary(&p.files) {
        errln!("  !! {summary}: look at the marked files before you say yes");
    }
    if !p.conflicts.is_empty() {
        let conflicts: Vec<String> = p.conflicts.iter().map(|c| line(c)).collect();
        errln!(
            "  conflicts (changed on the branch since the session started): {}",
            conflicts.join(", ")
        );
    }
}

/// Asks on the terminal; `None` when there is no terminal to ask on.
fn ask(question: &str) -> Option<String> {
    if !std::io::stdin().is_terminal() {
        return None;
    }
    err!("{question}");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).ok()?;
    Some(line.trim().to_ascii_lowercase())
}

fn push_cmd(
    home: &Home,
    t: &TargetArgs,
    message: Option<&str>,
    yes: bool,
    force: bool,
    remote: Option<&str>,
) -> Result<ExitCode> {
    let (id, target) = open_target(home, t)?;
    let stage = Stage::new(home.staged_dir());
    let audit = Audit::new(home.audit_path());
    let proposal = golem_orch::push::propose(&stage, &audit, &id, &target, &t.only)?;
    if !yes && t.json.json {
        // A script asking without consent gets the proposal (marks included), and nothing moves.
        print_json(&proposal)?;
        bail!("push needs a person's consent: pass --yes to push");
    }
    if !yes && !std::io::stdin().is_terminal() {
        bail!("push needs a person's consent: run it on a terminal, or pass --yes");
    }
    if !yes {
        print_proposal(&proposal);
        loop {
            match ask("push it? [d]iff / [y]es / [n]o: ").as_deref() {
                None => bail!("push needs a person's consent: run it on a terminal, or pass --yes"),
                Some("d" | "diff") => render::err_coloured(&golem_orch::diff::render(
                    &proposal.files,
                    render::stderr_is_terminal(),
                )),
                Some("y" | "yes") => break,
                Some(_) => {
                    errln!("not pushed; the staged commit stays pending");
                    return Ok(ExitCode::FAILURE);
                }
            }
        }
    }
    let request = golem_orch::push::Request {
        only: t.only.clone(),
        message: message.map(str::to_string),
        force,
        remote: remote.map(str::to_string),
    };
    let pushed = golem_orch::push::execute(&stage, &audit, &id, &target, &request)?;
    if t.json.json {
        print_json(&pushed)?;
    } else {
        let recovered = if pushed.recovered {
            " (found from an interrupted earlier push)"
        } else {
            ""
        };
        outln!(
            "pushed {} as {} on {}{recovered}",
            home::short(&id),
            line(pushed.commit.get(..12).unwrap_or(&pushed.commit)),
            line(&pushed.branch)
        );
        if let Some(r) = &pushed.remote {
            outln!("  and to remote {}", line(r));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn discard_cmd(home: &Home, id: &str, yes: bool, json: bool) -> Result<ExitCode> {
    let id = home::resolve_id(&home.staged_dir(), id, "staged commit")?;
    let stage = Stage::new(home.staged_dir());
    if !yes {
        let m = stage.manifest(&id)?;
        let question = format!(
            "discard {} ({} file(s), {})? [y/N]: ",
            home::short(&id),
            m.files.len(),
            human_bytes(m.bytes)
        );
        match ask(&question).as_deref() {
            None => bail!("discard needs a person's consent: run it on a terminal, or pass --yes"),
            Some("y" | "yes") => {}
            Some(_) => {
                errln!("kept");
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    golem_orch::push::discard(&stage, &Audit::new(home.audit_path()), &id)?;
    if json {
        print_json(&json!({ "staged": id, "status": "discarded" }))?;
    } else {
        outln!("discarded {}", home::short(&id));
    }
    Ok(ExitCode::SUCCESS)
}

/// Project worker definitions live in `workers/` beside the project's golem.yaml.
fn workers_dir(project_file: Option<&Path>) -> Option<PathBuf> {
    project_file
        .and_then(Path::parent)
        .map(|d| d.join("workers"))
}

fn workers_cmd(json: bool) -> Result<ExitCode> {
    let defs = workers::load_all(workers_dir(project_file().as_deref()).as_deref())?;
    if json {
        print_json(&defs)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{:<12}  {:<9}  {:<16}  DESCRIPTION",
        "NAME",
        "TRUST",
        "IMAGE"
    );
    for d in defs {
        outln!(
            "{:<12}  {:<9}  {:<16}  {}",
            line(&d.name),
            d.trust.as_str(),
            line(&d.image),
            line(&d.description)
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn image_build(json: bool) -> Result<ExitCode> {
    let (docker, _) = engine::connect().await?;
    let (tag, id) = image::build(&docker).await?;
    if json {
        print_json(&json!({ "image": tag, "id": id }))?;
    } else {
        outln!("built {} ({})", line(&tag), line(&id));
    }
    Ok(ExitCode::SUCCESS)
}

fn policy_show(policy_dir: Option<&Path>, level: TrustLevel, json: bool) -> Result<ExitCode> {
    let effective = policy::load(level, policy_dir, project_file().as_deref())?;
    if json {
        print_json(&effective)?;
    } else {
        outln!(
            "# effective {level} policy, from: {}",
            line(&effective.sources.join(" + "))
        );
        out!("{}", serde_yaml::to_string(&effective.policy)?);
    }
    Ok(ExitCode::SUCCESS)
}

async fn doctor(
    home_arg: Option<&Path>,
    policy_dir: Option<&Path>,
    json: bool,
) -> Result<ExitCode> {
    let mut checks: Vec<(bool, String, String)> = Vec::new();
    let mut add =
        |ok: bool, name: &str, detail: String| checks.push((ok, name.to_string(), detail));
    match engine::connect().await {
        Ok((docker, info)) => {
            add(
                true,
                "engine",
                format!(
                    "Docker {} (API {}) on {}",
                    info.version, info.api_version, info.platform
                ),
            );
            match image::current(&docker).await {
                Ok(Some(id)) => add(
                    true,
                    "image",
                    format!("{} present ({id})", image::worker_tag()),
                ),
                Ok(None) => add(
                    true,
                    "image",
                    format!(
                        "{} not built yet; `run` builds it, or `golem-orch image build`",
                        image::worker_tag()
                    ),
                ),
                Err(e) => add(false, "image", e.to_string()),
            }
        }
        Err(e) => add(false, "engine", e.to_string()),
    }
    let project = project_file();
    for level in TrustLevel::ALL {
        match policy::load(level, policy_dir, project.as_deref()) {
            Ok(p) => add(true, &format!("policy {level}"), p.sources.join(" + ")),
            Err(e) => add(false, &format!("policy {level}"), e.to_string()),
        }
    }
    match Home::open(home_arg) {
        Ok(home) => {
            add(true, "state", home.root().display().to_string());
            match Audit::new(home.audit_path()).verify() {
                Ok(n) => add(true, "audit", format!("hash chain intact ({n} records)")),
                Err(e) => add(false, "audit", e.to_string()),
            }
        }
        Err(e) => add(false, "state", e.to_string()),
    }
    let healthy = checks.iter().all(|(ok, _, _)| *ok);
    if json {
        let list: Vec<_> = checks
            .iter()
            .map(|(ok, name, detail)| json!({ "check": name, "ok": ok, "detail": detail }))
            .collect();
        print_json(&json!({ "ok": healthy, "checks": list }))?;
    } else {
        for (ok, name, detail) in &checks {
            outln!(
                "{:<4}  {:<16}  {}",
                if *ok { "ok" } else { "FAIL" },
                name,
                line(detail)
            );
        }
    }
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn gc_cmd(home: &Home, json: bool) -> Result<ExitCode> {
    let (docker, _) = engine::connect().await?;
    let report = gc::collect(&docker, home, gc::Scope::Engine).await?;
    if json {
        print_json(&report)?;
    } else {
        outln!(
            "removed {} container(s), {} volume(s), {} half-staged commit(s); marked {} session(s) failed; left {} live resource(s) alone",
            report.containers.len(),
            report.volumes.len(),
            report.stage_orphans.len(),
            report.sessions_failed.len(),
            report.live
        );
        if !report.images.is_empty() || !report.init_binaries.is_empty() {
            outln!(
                "removed {} worker image tag(s) and {} init binary(ies) of other golem-orch builds",
                report.images.len(),
                report.init_binaries.len()
            );
        }
        for e in &report.errors {
            outln!("  could not remove {}", line(e));
        }
    }
    Ok(if report.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn audit(home: &Home, session: Option<String>, verify: bool, json: bool) -> Result<ExitCode> {
    let log = Audit::new(home.audit_path());
    if verify {
        let n = log.verify()?;
        if json {
            print_json(&json!({ "ok": true, "records": n }))?;
        } else {
            outln!("audit log intact: {n} records, hash chain unbroken");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let filter = match session {
        Some(s) => Some(home::resolve_id(&home.sessions_dir(), &s, "session")?),
        None => None,
    };
    let records: Vec<_> = log
        .read()?
        .into_iter()
        .filter(|r| filter.is_none() || r.session == filter)
        .collect();
    if json {
        print_json(&records)?;
        return Ok(ExitCode::SUCCESS);
    }
    let color = color_wanted();
    for r in records {
        let session = line(r.session.as_deref().map(home::short).unwrap_or("-"));
        let data = line(&compact(&r.data));
        let event = format!("{:<22}", line(&r.event));
        let text = format!("{}  {:<12}  ", line(&r.ts), session);
        if color && (r.event.contains("rejected") || r.event.contains("failed")) {
            let event = render::paint(render::Colour::Red, &event);
            render::out_coloured(&format!("{text}{event}  {data}\n"));
        } else {
            outln!("{text}{event}  {data}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `key=value` pairs for a one-line view of an audit record's data.
fn compact(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Object(map) => map
            .iter()
            .filter(|(k, _)| k.as_str() != "plan")
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

fn short_hash(h: &str) -> &str {
    h.get(..12).unwrap_or(h)
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

fn human_age(d: chrono::TimeDelta) -> String {
    let s = d.num_seconds().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}
