//! The command line's shape: clap structs and help texts, and how the worker flags become a
//! library [`RunSpec`] (the rules that resolve it live in `golem_orch::spec`).

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};

use golem_orch::policy::TrustLevel;
use golem_orch::spec::RunSpec;
use golem_orch::units::{Limit, Size};

#[derive(Debug, Subcommand)]
pub(super) enum Command {
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
    /// List staged commits: waiting ones first (pending, partial), then pushed, discarded and merged.
    Staged(JsonFlag),
    /// Show a staged commit's manifest: provenance, files, rejected entries.
    Show {
        /// Staged commit id or unique prefix.
        id: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Print an AI worker's model transcript: every request it sent and every answer, as staged.
    #[command(after_help = TRANSCRIPT_HELP)]
    Transcript {
        /// Staged commit id or unique prefix.
        id: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Show what a staged commit would change on a branch: added and modified files, as a diff
    /// (through $PAGER, `less -R` by default, on a terminal; NO_COLOR turns colour off).
    Diff {
        #[command(flatten)]
        target: TargetArgs,
        /// Only a per-file summary (A/M/= with changed lines) and a total, like `git diff --stat`.
        #[arg(long)]
        stat: bool,
    },
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
    /// Throw a pending staged commit away, or the files of a partly pushed one not pushed yet (asks first).
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
    /// Remove containers and volumes whose orchestrator died, and mark their sessions failed
    /// (engine-wide for your own state directories; see the scopes below).
    #[command(after_help = GC_HELP)]
    Gc(GcArgs),
    /// Print a shell completion script on stdout (bash, zsh, fish, elvish, powershell).
    #[command(after_help = COMPLETIONS_HELP)]
    Completions {
        /// The shell to complete for.
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print golem-orch's man page (roff) on stdout.
    #[command(after_help = MAN_HELP)]
    Man,
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

const COMPLETIONS_HELP: &str = "\
Examples:
  golem-orch completions bash > ~/.local/share/bash-completion/completions/golem-orch
  golem-orch completions zsh > \"${fpath[1]}/_golem-orch\"
  golem-orch completions fish > ~/.config/fish/completions/golem-orch.fish";

const MAN_HELP: &str = "\
Examples:
  golem-orch man | man -l -
  golem-orch man > ~/.local/share/man/man1/golem-orch.1";

const GC_HELP: &str = "\
Two scopes:
  Engine-wide (this Docker engine, every project of yours): containers and volumes labelled
    golem.managed whose golem.token label proves one of your state directories created them and
    whose golem-orch process is gone, and golem-worker:<hash> image tags of other golem-orch builds
    that no container uses.
  State directories (./.golem or --home, and the ones the removed objects belong to): sessions
    whose golem-orch process died are marked failed, half-written staged commits are removed, and
    so are the init binaries of other builds in this state directory's bin/.
run and batch do the same tidy-up first, for their own state directory only.

Never touched: a live session's containers and volumes; objects whose labels do not carry a
valid token (another user's, or labels an image brings); images other than golem-worker tags of
other builds; pending, pushed or discarded staged commits; session records and logs (only a dead
session's status changes); the audit log (gc appends to it); your git repositories.

Examples:
  golem-orch gc            # after a crash or a reboot: tidy up and say what was removed
  golem-orch gc --dry-run  # what it would remove and mark failed; nothing changes
  golem-orch gc --json     # {containers, volumes, sessions_failed, ...} for scripts

Exit codes: 0 everything found was removed; 1 something could not be removed (listed) or the
engine could not be reached.";

const TRANSCRIPT_HELP: &str = "\
The transcript is what the worker told the model and what the model said, request by request:
seq, model, status (and why the gateway refused it), tokens, latency, then both bodies. It is the
one way data leaves the container, so read it like the files: a document's secrets in a request
went to the model's provider. Only the transcript as staged is shown (its sha256 is in the
manifest); every byte is rendered inert. --json prints {staged, model, exchanges}.";

const PUSH_HELP: &str = "\
The commit's parent is the branch's tip; a missing branch is created from HEAD. The default branch
is golem/<id>, so a push never moves a branch you are working on; pushing to the checked-out
branch is refused. Every staged file is re-hashed against the manifest first, and the manifest
against the hash the audit log recorded when it was staged: a tampered stage is refused.
The commit message carries trailers: Golem-Staged, Golem-Session, Golem-Trust-Level, Golem-Image,
Golem-Input-Sha256 (one per input) and Golem-Manifest-Sha256 (and Golem-Staged-Selection for a
partial push).

--only PATH... pushes part of a staged commit: it becomes partial, and a later push without
--only pushes exactly the files not pushed yet; --only of a file already pushed is refused.
`golem-orch show ID` lists each push and what is left; discard throws the rest away.

Without --yes, push shows what would change and asks [d]iff (through $PAGER) / [y]es / [n]o (with --json and no
--yes, it prints the proposal and pushes nothing). Files that matter once pushed (CI, git
attributes and hooks, build and environment files, #! scripts, golem's own files) are marked
[sensitive: why]; look-alikes of other paths in the branch (differing only by case, Unicode
normalisation or trailing dots/spaces) are marked [collides with ...] and refused unless --force.

Examples:
  golem-orch push ID                                # review, then commit onto golem/<id>
  golem-orch push ID -b docs/summaries --prefix docs -m \"Add summaries\"
  golem-orch push ID --only report.md --yes         # one file, no question (scripts, CI)
  golem-orch push ID --yes                          # then the rest of it, as a second commit
  golem-orch push ID --remote origin                # then push that branch with your own git credentials";

/// Which repository, branch and files a diff or push is about.
#[derive(Debug, Args)]
pub(super) struct TargetArgs {
    /// Staged commit id or unique prefix.
    pub(super) id: String,
    /// The git repository (default: the one containing the current directory).
    #[arg(long, value_name = "PATH")]
    pub(super) repo: Option<PathBuf>,
    /// Branch to compare with or commit on (default: golem/<id>).
    #[arg(long, short = 'b', value_name = "BRANCH")]
    pub(super) branch: Option<String>,
    /// Directory inside the repository for the staged files (default: the root).
    #[arg(long, value_name = "DIR")]
    pub(super) prefix: Option<String>,
    /// Only these staged files or directories; the rest stays pending for a later push.
    #[arg(long, value_name = "PATH", num_args = 1..)]
    pub(super) only: Vec<String>,
    #[command(flatten)]
    pub(super) json: JsonFlag,
}

#[derive(Debug, Subcommand)]
pub(super) enum ImageCommand {
    /// Build (or rebuild) golem-worker from the binary embedded in golem-orch; never pulls.
    Build(JsonFlag),
}

#[derive(Debug, Subcommand)]
pub(super) enum PolicyCommand {
    /// Print the effective policy for LEVEL after the project's golem.yaml is applied.
    Show {
        /// untrusted, session, workspace or full.
        level: TrustLevel,
        #[command(flatten)]
        json: JsonFlag,
    },
}

/// `gc`'s flags.
#[derive(Debug, Args, Clone, Copy)]
pub(super) struct GcArgs {
    /// List what would be removed (and which sessions marked failed); remove and change
    /// nothing, create no state directory, audit nothing.
    #[arg(long)]
    pub(super) dry_run: bool,
    #[command(flatten)]
    pub(super) json: JsonFlag,
}

#[derive(Debug, Args, Clone, Copy)]
pub(super) struct JsonFlag {
    /// Machine-readable output.
    #[arg(long)]
    pub(super) json: bool,
}

const RUN_HELP: &str = "\
Inputs are files, directories (taken recursively) and http(s) URLs. URLs are downloaded on the
host with a size cap, a timeout and a redirect limit; the host never parses content.

The worker sees its inputs read-only at /input and writes to /output; the output is validated
entry by entry and staged in .golem/staged/<id>/ for review. Use --image IMAGE -- ARGS... to run
your own local image under the same policy (ARGS replace the image's command, as with docker run).

A symbolic link inside an input folder is never followed: it is skipped and listed (--strict
fails the session instead, naming it). The report and text workers take at most 100 inputs per
session; on a larger folder run says how many were not processed: `golem-orch batch DIR` runs one
container per file.

--json prints one object: {session, status, exit_code, staged, timed_out, oom_killed, files,
bytes, rejected, error, logs, skipped, model, warnings, not_processed, inputs}. status is staged,
failed, timeout, oom, rejected or cancelled; model ({requests, input_tokens, output_tokens,
refused}) only for AI workers; not_processed and inputs only when the worker's input limit left
some out.

AI workers (--worker agent): the container still has no network. It reaches a model only
through a socket to golem-orch, which holds the key on the host (GOLEM_MODEL_API,
GOLEM_MODEL_BASE_URL, GOLEM_MODEL_KEY, GOLEM_MODEL). Every request and answer is kept as the
session's transcript and staged for review: `golem-orch transcript ID`.
  golem-orch run --worker agent --task \"Summarise each document in three bullet points\" paper.pdf
  golem-orch run --worker agent --task-file task.md --model llama3.1 --model-budget 20000 notes.html

Examples:
  golem-orch run --untrusted https://example.org/paper.pdf    # a report of one downloaded document
  golem-orch run --untrusted --timeout 30s --memory 256m notes/  # a folder, under lower limits
  golem-orch run --dry-run --json paper.pdf                   # the container it would create
  golem-orch run --strict inbox/                              # fail on a link inside inbox/
  golem-orch run --runtime runsc paper.pdf                    # under gVisor (see doctor)
  golem-orch run --image my-parser:local in.xml -- --strict   # your own local image, same policy

Exit codes: 0 staged and the worker succeeded; 1 error or failed; 2 bad usage; 3 staged but the
worker exited non-zero; 4 timeout; 5 out of memory; 6 output rejected; 130 cancelled.";

const BATCH_HELP: &str = "\
Every file found (directories recursively) and every line of --from FILE (paths or URLs; blank
lines and # comments ignored) is one document, processed in its own container exactly as
`golem-orch run` would, with the same trust level, worker and limits. A document that fails,
times out or runs out of memory is recorded and the others go on. Each document gets its own
staged commit, or with --stage-as-one the batch gets one, with a folder per document and a top
index.md listing every document, its folder and status (the per-document commits stay listed
as merged into it; only the combined one is pushed). Links inside folders are skipped when the
documents are listed; --strict refuses them. --dry-run prints the documents, their folders, the
policy and one document's container, and creates nothing.

Ctrl-C stops launching, cancels the running documents (removing their containers) and records
the batch; `golem-orch batch --resume ID` runs only what did not finish, plus documents that
failed for a reason outside them (the engine went away, the disk was full). Records live in
.golem/batches/. Progress goes to stderr (a bar on a terminal, lines otherwise).

--task, --model and --model-budget apply to every document, each in its own session with its own
budget; --json adds the model use summed over documents. --batch-model-budget TOKENS caps the
whole batch on top: input and output tokens together, summed over every document, reserved
before each request (a request it cannot cover gets 429, the worker's cue to stop); --resume goes
on with what is left of it. --stage-as-one is refused for AI workers
(each document's staged commit keeps its own transcript for review).

Examples:
  golem-orch batch -j 4 manuals/                      # every file in manuals/, four at a time
  golem-orch batch --from urls.txt --stage-as-one     # listed paths or URLs, one staged commit
  golem-orch batch --resume ID                        # finish a cancelled or crashed batch
  golem-orch batch --dry-run --json docs/             # the documents and container; runs nothing
  golem-orch -q batch --json docs/ > batch.json       # no progress, just the result

Exit codes: 0 every document staged and succeeded; 1 some did not; 130 cancelled.";

#[derive(Debug, Args)]
pub(super) struct BatchArgs {
    /// Files, directories (recursive) or http(s) URLs; each file is one document.
    #[arg(value_name = "INPUT")]
    pub(super) inputs: Vec<String>,
    /// Also read documents from FILE, one path or URL per line.
    #[arg(long, value_name = "FILE")]
    pub(super) from: Option<PathBuf>,
    /// Containers at once (default: the number of CPU cores).
    #[arg(long, short = 'j', value_name = "N")]
    pub(super) jobs: Option<usize>,
    /// One staged commit for the whole batch, with a folder per document.
    #[arg(long)]
    pub(super) stage_as_one: bool,
    /// Print what would run (the documents, their folders, the policy and one document's
    /// container) and start nothing: no batch record, session, container or audit line.
    #[arg(long)]
    pub(super) dry_run: bool,
    /// Run what an earlier, cancelled or crashed batch did not finish.
    #[arg(long, value_name = "BATCH_ID", conflicts_with_all = ["dry_run", "inputs", "from", "stage_as_one", "max_input", "allow_private_urls", "strict", "task", "task_file", "model", "model_budget", "batch_model_budget", "runtime"])]
    pub(super) resume: Option<String>,
    /// One model budget for the whole batch: at most TOKENS input and output tokens together,
    /// summed over every document, on top of each session's own budget (AI workers only).
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) batch_model_budget: Option<u64>,
    #[command(flatten)]
    pub(super) intake: IntakeArgs,
    #[command(flatten)]
    pub(super) worker: WorkerArgs,
    #[command(flatten)]
    pub(super) json: JsonFlag,
    /// Arguments for --image, after `--`.
    #[arg(last = true, value_name = "ARGS")]
    pub(super) command: Vec<String>,
}

#[derive(Debug, Args)]
pub(super) struct RunArgs {
    /// Files, directories or http(s) URLs to process.
    #[arg(value_name = "INPUT")]
    pub(super) inputs: Vec<String>,
    #[command(flatten)]
    pub(super) worker: WorkerArgs,
    /// Largest download accepted per URL.
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    pub(super) max_download: Size,
    /// Wall-clock limit per download.
    #[arg(long, value_name = "DURATION", default_value = "2m")]
    pub(super) download_timeout: Limit,
    #[command(flatten)]
    pub(super) intake: IntakeArgs,
    /// Opt in to a network (only the full level allows it).
    #[arg(long)]
    pub(super) allow_network: bool,
    /// Keep the stopped container afterwards for debugging (docker inspect; gc removes it later).
    #[arg(long)]
    pub(super) keep: bool,
    /// Print the exact container that would be created and start nothing.
    #[arg(long)]
    pub(super) dry_run: bool,
    #[command(flatten)]
    pub(super) json: JsonFlag,
    /// Arguments for the image, after `--`.
    #[arg(last = true, value_name = "ARGS")]
    pub(super) command: Vec<String>,
}

/// Intake limits a person may set; shared by `run` and `batch`.
#[derive(Debug, Args, Clone)]
pub(super) struct IntakeArgs {
    /// Lower the session's total input cap (the policy's input.max_total_bytes; never raises it).
    #[arg(long, value_name = "SIZE")]
    pub(super) max_input: Option<Size>,
    /// Let URLs (and their redirects) reach loopback, private and link-local addresses: your own
    /// intranet. Off by default, so a redirect cannot reach the host's or the network's services.
    #[arg(long)]
    pub(super) allow_private_urls: bool,
    /// Fail on a symbolic link inside an input folder, naming it, instead of skipping it (a
    /// link is never followed either way; skipped links are listed in the output and `show`).
    #[arg(long)]
    pub(super) strict: bool,
}

/// The trust level and what to run; shared by `run` and `batch`.
#[derive(Debug, Args, Clone)]
#[group(id = "worker_args", multiple = true)]
#[command(group(clap::ArgGroup::new("level").multiple(false).args(["trust", "untrusted", "session", "workspace", "full"])))]
pub(super) struct WorkerArgs {
    /// Trust level for the session (default: untrusted; a worker needing more must be given it).
    #[arg(long, value_name = "LEVEL", conflicts_with_all = ["untrusted", "session", "workspace", "full"])]
    pub(super) trust: Option<TrustLevel>,
    /// Same as --trust untrusted.
    #[arg(long)]
    pub(super) untrusted: bool,
    /// Same as --trust session.
    #[arg(long)]
    pub(super) session: bool,
    /// Same as --trust workspace.
    #[arg(long)]
    pub(super) workspace: bool,
    /// Same as --trust full.
    #[arg(long)]
    pub(super) full: bool,
    /// Worker definition to run (default: report). See `golem-orch workers`.
    #[arg(long, short = 'w', value_name = "NAME", conflicts_with = "image")]
    pub(super) worker: Option<String>,
    /// Run this local image instead of a worker definition (never pulled).
    #[arg(long, value_name = "IMAGE")]
    pub(super) image: Option<String>,
    /// Lower the policy's wall-clock limit for this run (e.g. 30s, 5m).
    #[arg(long, value_name = "DURATION")]
    pub(super) timeout: Option<Limit>,
    /// Lower the policy's memory limit for this run (e.g. 256m, 1g, 512MiB).
    #[arg(long, value_name = "SIZE")]
    pub(super) memory: Option<Size>,
    /// What the worker should do, in plain words; replaces the worker definition's
    /// instructions at /task/instructions.md (at most 64KiB, no control or bidi characters).
    #[arg(long, value_name = "TEXT", conflicts_with = "task_file")]
    pub(super) task: Option<String>,
    /// Like --task, read from FILE on the host (UTF-8 text; links are not followed).
    #[arg(long, value_name = "FILE")]
    pub(super) task_file: Option<PathBuf>,
    /// The model an AI worker uses (default: the host's GOLEM_MODEL); must be in the trust
    /// level's model.allow. Only for workers with model access, e.g. --worker agent.
    #[arg(long, value_name = "NAME")]
    pub(super) model: Option<String>,
    /// Lower the session's model budget: at most TOKENS input tokens and at most TOKENS output
    /// tokens (each budget only goes down; see `golem-orch policy show LEVEL`).
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) model_budget: Option<u64>,
    /// Run under this OCI runtime (e.g. runsc for gVisor): one of the level's `runtimes` (see
    /// `golem-orch policy show LEVEL` and `doctor`); refused when the engine lacks it.
    #[arg(long, value_name = "NAME")]
    pub(super) runtime: Option<String>,
}

impl WorkerArgs {
    /// What the person asked for, as the library resolves it: the level comes from these
    /// flags alone (untrusted when none is given).
    pub(super) fn spec(&self, intake: &IntakeArgs, command: &[String]) -> Result<RunSpec> {
        let task = match &self.task_file {
            Some(file) => Some(golem_orch::spec::read_task_file(file)?),
            None => self.task.clone(),
        };
        Ok(RunSpec {
            worker: self.worker.clone(),
            image: self.image.clone(),
            command: command.to_vec(),
            memory: self.memory,
            timeout: self.timeout,
            allow_private_urls: intake.allow_private_urls,
            max_input: intake.max_input,
            strict: intake.strict,
            task,
            model: self.model.clone(),
            model_budget: self.model_budget,
            runtime: self.runtime.clone(),
            ..RunSpec::new(self.level().unwrap_or(TrustLevel::Untrusted))
        })
    }

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
