//! One session: intake, one hardened container, extraction into the stage, cleanup.
//!
//! The order of steps is the security argument, so it lives in one readable function
//! ([`run`]). Every engine object is registered in a [`Tracker`] before it is created and removed
//! at the end on every path; every step is audited; the session record is rewritten atomically
//! after each step so a crash leaves an accurate trail for `gc`.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::audit::{self, Audit, Event};
use crate::container::{self, Exit, LogBuffer, Tracker};
use crate::engine::{
    Attached, Chunk, Engine, EngineError, Select, LABEL_HOME, LABEL_MANAGED, LABEL_OWNER,
    LABEL_SESSION, LABEL_TOKEN,
};
use crate::extract::{self, Extraction, Limits};
use crate::home::{self, write_atomic, Home};
use crate::image::{self, ImageError};
use crate::intake::{self, InputRecord, IntakeError, IntakeLimits, Source};
use crate::owner::Owner;
use crate::plan::{self, ContainerPlan, HostPaths, PlanError};
use crate::policy::{Policy, TrustLevel};
use crate::stage::{self, Manifest, Stage, StageError};
use crate::worker_uid::{self, SessionUser, UidError};
use crate::workspace::{self, Scrubbed};

/// The session record's file name inside the session directory.
pub const RECORD: &str = "session.json";
/// The captured worker logs.
pub const LOGS: &str = "logs.txt";
/// Logs kept per session (Docker's own cap is 1 MiB).
const MAX_LOG_BYTES: usize = 1 << 20;
/// How long cleanup may take after a cancel before giving up (gc finishes the job).
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the archive may go without a byte once it has begun: it stops an archive that
/// stalls, never one that is long.
const ARCHIVE_TIMEOUT: Duration = Duration::from_secs(300);
/// Chunks of the archive in flight between the attach stream and the validator: bounded, so a
/// fast container never makes the host buffer its output.
const ARCHIVE_CHUNKS_IN_FLIGHT: usize = 16;

/// Where a session is in its life; the last one is what `run --json` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionStatus {
    /// Inputs being taken in.
    Created,
    /// The worker container is running.
    Running,
    /// Outputs are being validated.
    Extracting,
    /// Outputs are in the stage.
    Staged,
    /// Something failed; see `error`.
    Failed,
    /// Killed at its wall-clock limit.
    Timeout,
    /// Killed by the kernel for exceeding its memory limit.
    Oom,
    /// Its output broke the policy's caps as a whole and nothing was staged.
    Rejected,
    /// Stopped by Ctrl-C or SIGTERM.
    Cancelled,
}

impl SessionStatus {
    /// The lowercase word used in JSON and listings.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Created => "created",
            SessionStatus::Running => "running",
            SessionStatus::Extracting => "extracting",
            SessionStatus::Staged => "staged",
            SessionStatus::Failed => "failed",
            SessionStatus::Timeout => "timeout",
            SessionStatus::Oom => "oom",
            SessionStatus::Rejected => "rejected",
            SessionStatus::Cancelled => "cancelled",
        }
    }

    /// Whether the session is over.
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            SessionStatus::Created | SessionStatus::Running | SessionStatus::Extracting
        )
    }
}

/// The persistent record of a session (`sessions/<id>/session.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// Session id.
    pub id: String,
    /// When it started.
    pub created_at: String,
    /// When the record last changed.
    pub updated_at: String,
    /// Current status.
    pub status: SessionStatus,
    /// Trust level.
    pub trust_level: TrustLevel,
    /// Image reference.
    pub image: String,
    /// Command.
    pub command: Vec<String>,
    /// The orchestrator process running it.
    pub owner: String,
    /// What went in.
    pub inputs: Vec<InputRecord>,
    /// How the worker ended.
    pub exit: Exit,
    /// The staged commit, when one was made.
    pub staged: Option<String>,
    /// Files accepted.
    pub files: usize,
    /// Bytes accepted.
    pub bytes: u64,
    /// Entries rejected.
    pub rejected: u64,
    /// What went wrong, when something did.
    pub error: Option<String>,
    /// Whether the container was kept for inspection (`--keep`).
    pub kept: bool,
    /// It failed for a reason outside the document (the engine or the host's disk), so running
    /// it again may succeed; a batch's `--resume` does.
    #[serde(default)]
    pub host_failure: bool,
    /// The uid/gid the worker ran as: its own, which no host account and no other live
    /// session had (`worker_uid`), unless a `--policy-dir` pinned one.
    #[serde(default)]
    pub user: Option<SessionUser>,
    /// What the scrub of `/workspace` found before the session (left by an earlier one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_scrubbed_before: Option<Scrubbed>,
    /// What the scrub of `/workspace` removed after the session: set-id bits, special files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_scrubbed: Option<Scrubbed>,
}

/// What a person asked for.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Effective policy after project file and flags.
    pub policy: Policy,
    /// Inputs.
    pub sources: Vec<Source>,
    /// A person's own local image instead of golem-worker.
    pub image: Option<String>,
    /// Arguments replacing the image's command (like `docker run IMAGE ARGS`).
    pub command: Vec<String>,
    /// Keep the container and volume after the session (for debugging).
    pub keep: bool,
    /// Opt in to a network (only where the policy allows it).
    pub allow_network: bool,
    /// The project's git repository, for levels that mount it.
    pub repo: Option<PathBuf>,
    /// Download caps.
    pub intake: IntakeLimits,
    /// A worker definition's instructions, mounted read-only at `/task/instructions.md`.
    pub instructions: Option<String>,
}

/// The result `run` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// Session id.
    pub session: String,
    /// Final status.
    pub status: SessionStatus,
    /// The worker's exit code.
    pub exit_code: Option<i64>,
    /// The staged commit id, or null.
    pub staged: Option<String>,
    /// Killed at the timeout.
    pub timed_out: bool,
    /// OOM-killed.
    pub oom_killed: bool,
    /// Files staged.
    pub files: usize,
    /// Bytes staged.
    pub bytes: u64,
    /// Entries rejected.
    pub rejected: u64,
    /// What went wrong.
    pub error: Option<String>,
    /// Where the logs are.
    pub logs: PathBuf,
    /// It failed for a reason outside the document (the engine or the host), not the worker's.
    pub host_failure: bool,
}

/// Failures that end a session before its container could do its work.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Bad or unreachable input.
    #[error(transparent)]
    Intake(#[from] IntakeError),
    /// The plan is impossible for this level.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The image is missing or would not build.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The stage could not be written.
    #[error(transparent)]
    Stage(#[from] StageError),
    /// The audit log could not be written; a session that cannot be audited does not run.
    #[error(transparent)]
    Audit(#[from] audit::AuditError),
    /// Extraction failed on the host side (disk, stream), not because of the output.
    #[error("extracting the output: {0}")]
    Extract(String),
    /// The container ended without streaming its output: its init failed or was killed by
    /// something other than the worker (which cannot signal or trace it), or the engine dropped
    /// the stream.
    #[error("the container ended (exit {0}) without streaming its output; see the session's logs")]
    NoArchive(String),
    /// The output archive began but did not end: the engine cut the stream, it stalled, or the
    /// init could not finish writing it. The init finishes what it starts unless something
    /// outside kills it, so this counts as the host's failure (a worker can only cause it by
    /// lowering its init's hard CPU, memory or stack limits, which fails no one but its own
    /// document; see SECURITY.md, "What is not defended").
    #[error("the output archive was cut short ({0}); nothing was staged")]
    ArchiveCut(String),
    /// No worker identity could be allocated.
    #[error(transparent)]
    Uid(#[from] UidError),
    /// The repository could not be searched for state directories to hide.
    #[error("searching {path} for golem-orch state directories to hide: {why}")]
    StateSearch {
        /// The repository.
        path: PathBuf,
        /// What went wrong.
        why: String,
    },
    /// The state directory was replaced while the worker ran.
    #[error("the state directory {0} was replaced while the worker ran; nothing was staged")]
    StateReplaced(PathBuf),
    /// Local I/O.
    #[error("{path}: {source}")]
    Io {
        /// Path.
        path: PathBuf,
        /// Error.
        source: std::io::Error,
    },
}

impl SessionError {
    /// Whether the failure lies outside the document and its worker (the engine, the host's
    /// disk, the audit log), so that running the same document again may well succeed.
    pub fn is_host_failure(&self) -> bool {
        matches!(
            self,
            SessionError::Engine(_)
                | SessionError::Uid(_)
                | SessionError::Stage(_)
                | SessionError::Audit(_)
                | SessionError::Extract(_)
                | SessionError::NoArchive(_)
                | SessionError::ArchiveCut(_)
                | SessionError::Io { .. }
        )
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SessionError + '_ {
    move |source| SessionError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The image and command a session will run, resolved before the plan.
#[derive(Debug, Clone)]
pub struct Worker {
    /// Image reference.
    pub image: String,
    /// Image content id.
    pub image_id: String,
    /// The image's entrypoint, kept as with `docker run`; the init runs it.
    pub entrypoint: Vec<String>,
    /// Arguments after it: the person's, else the image's default command.
    pub cmd: Vec<String>,
}

impl Worker {
    /// What the plan runs.
    pub fn plan_command(&self) -> plan::Command {
        plan::Command {
            image: self.image.clone(),
            image_id: Some(self.image_id.clone()).filter(|id| !id.is_empty()),
            entrypoint: Some(self.entrypoint.clone()),
            cmd: self.cmd.clone(),
        }
    }
}

/// The default worker command: the document report.
pub fn default_command() -> Vec<String> {
    vec!["report".to_string()]
}

/// Labels for everything a session creates. `golem.token` (absent in a dry run) is what lets
/// `gc` tell this state directory's objects from an image's copies of the other labels.
pub fn labels(home: &Home, session: &str, owner: &Owner) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_SESSION.to_string(), session.to_string()),
        (LABEL_HOME.to_string(), home.root().display().to_string()),
        (LABEL_OWNER.to_string(), owner.to_string()),
    ]);
    if let Some(tag) = home.tag(session) {
        labels.insert(LABEL_TOKEN.to_string(), tag);
    }
    labels
}

/// Resolves host paths for the plan, creating the workspace directory (and its overlay's helper
/// directories) when the level mounts it. `user` is the session's identity, once allocated.
pub fn host_paths(
    home: &Home,
    session: &str,
    policy: &Policy,
    repo: Option<PathBuf>,
    create: bool,
) -> Result<HostPaths, SessionError> {
    let workspace = home.workspace_dir();
    if create && policy.mounts.workspace != crate::policy::Access::None {
        std::fs::create_dir_all(&workspace).map_err(io(&workspace))?;
        workspace::Overlay::for_workspace(&workspace)
            .create_dirs()
            .map_err(io(&workspace))?;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            // Not root: the workspace cannot be handed to each session's uid (see SECURITY.md).
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&workspace, std::fs::Permissions::from_mode(0o777))
                .map_err(io(&workspace))?;
        }
    }
    let other_states = match (&repo, policy.mounts.repo) {
        (Some(r), access) if access != crate::policy::Access::None => state_dirs_in(r)?,
        _ => Vec::new(),
    };
    Ok(HostPaths {
        input: home.session_dir(session).join("input"),
        workspace,
        repo,
        state: home.root().to_path_buf(),
        task: None,
        init: image::init_path(home.root()),
        user: None,
        other_states,
    })
}

/// Most directory entries searched for state directories before giving up (failing closed).
const MAX_REPO_ENTRIES: usize = 1_000_000;

/// Every golem-orch state directory inside `repo`: a directory holding [`home::STATE_MARKER`]
/// (written by `Home::open`), or one named `.golem` that looks like a state directory (made by
/// a version before the marker). Links are never followed, `.git` is skipped; a repository too
/// large to search is an error rather than a mount with something left unhidden.
pub fn state_dirs_in(repo: &Path) -> Result<Vec<PathBuf>, SessionError> {
    let mut found = Vec::new();
    let mut stack = vec![repo.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            // Unreadable to us means unreadable to compare with; the root must be readable.
            Err(e) if dir == repo => {
                return Err(SessionError::StateSearch {
                    path: repo.to_path_buf(),
                    why: e.to_string(),
                })
            }
            Err(_) => continue,
        };
        let looks_like_state = dir != repo
            && (dir.join(home::STATE_MARKER).is_file()
                || (dir.file_name() == Some(std::ffi::OsStr::new(".golem"))
                    && (dir.join("sessions").is_dir() || dir.join("staged").is_dir())));
        if looks_like_state {
            found.push(dir);
            continue;
        }
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_REPO_ENTRIES {
                return Err(SessionError::StateSearch {
                    path: repo.to_path_buf(),
                    why: format!("more than {MAX_REPO_ENTRIES} entries"),
                });
            }
            // file_type() does not follow links.
            if entry.file_type().is_ok_and(|t| t.is_dir()) && entry.file_name() != ".git" {
                stack.push(entry.path());
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Finds the git repository containing `start`, the way git does.
pub fn find_repo(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|d| d.join(".git").exists())
        .and_then(|d| d.canonicalize().ok())
}

/// Loads a session record.
pub fn load(home: &Home, id: &str) -> Result<Record, SessionError> {
    let path = home.session_dir(id).join(RECORD);
    let text = std::fs::read(&path).map_err(io(&path))?;
    serde_json::from_slice(&text).map_err(|e| SessionError::Io {
        path,
        source: std::io::Error::other(e.to_string()),
    })
}

/// Every session record, newest first; unreadable ones are skipped.
pub fn list(home: &Home) -> Result<Vec<Record>, SessionError> {
    let dir = home.sessions_dir();
    let mut out: Vec<Record> = std::fs::read_dir(&dir)
        .map_err(io(&dir))?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|id| load(home, &id).ok())
        .collect();
    out.sort_by(|a, b| b.id.cmp(&a.id));
    Ok(out)
}

/// Rewrites a session record atomically.
pub fn save(home: &Home, record: &Record) -> Result<(), SessionError> {
    let path = home.session_dir(&record.id).join(RECORD);
    let json = serde_json::to_vec_pretty(record).map_err(|e| SessionError::Io {
        path: path.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    write_atomic(&path, &json).map_err(io(&path))
}

/// Runs one session to its end. `cancel` resolving (Ctrl-C) stops it and cleans up.
///
/// Returns `Err` only when the session could not get going (bad input, engine down); once the
/// container exists every ending, including timeouts and rejected output, is an [`Outcome`].
pub async fn run(
    home: &Home,
    engine: &dyn Engine,
    opts: RunOptions,
    cancel: impl Future<Output = ()>,
) -> Result<Outcome, SessionError> {
    // Images first: a missing image is bad input and must fail before a session exists.
    let images = resolve_images(engine, &opts).await?;
    run_resolved(home, engine, opts, &images, cancel).await
}

/// [`run`] with images already resolved, so a batch resolves them once for all its documents.
pub async fn run_resolved(
    home: &Home,
    engine: &dyn Engine,
    opts: RunOptions,
    images: &Images,
    cancel: impl Future<Output = ()>,
) -> Result<Outcome, SessionError> {
    // A plan that cannot be made (a network the level forbids, a repository level without a
    // repository) is bad input: refuse it before a session exists. Nothing is created here.
    let probe_paths = host_paths(home, "validate", &opts.policy, opts.repo.clone(), false)?;
    plan::build(
        "validate",
        &opts.policy,
        &probe_paths,
        &images.worker.plan_command(),
        BTreeMap::new(),
        opts.allow_network,
    )?;
    let audit = Audit::new(home.audit_path());
    let owner = Owner::current();
    let id = home::new_id();
    let dir = home.session_dir(&id);
    let input = dir.join("input");
    // The session's directory is private; only `input/` inside it is opened up for the worker
    // (through its bind mount: other host users cannot pass the 0700 directories above it).
    home::create_private_dir(&dir).map_err(io(&dir))?;
    std::fs::create_dir(&input).map_err(io(&input))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&input, std::fs::Permissions::from_mode(0o755))
            .map_err(io(&input))?;
    }
    let mut record = Record {
        id: id.clone(),
        created_at: audit::now(),
        updated_at: audit::now(),
        status: SessionStatus::Created,
        trust_level: opts.policy.level,
        image: images.worker.image.clone(),
        command: images.worker.cmd.clone(),
        owner: owner.to_string(),
        inputs: Vec::new(),
        exit: Exit::default(),
        staged: None,
        files: 0,
        bytes: 0,
        rejected: 0,
        error: None,
        kept: opts.keep,
        host_failure: false,
        user: None,
        workspace_scrubbed_before: None,
        workspace_scrubbed: None,
    };
    save(home, &record)?;
    audit.record(
        Some(&id),
        "session.created",
        json!({
            "trust_level": opts.policy.level,
            "sources": opts.sources.iter().map(intake::describe).collect::<Vec<_>>(),
            "owner": owner.to_string(),
            "image": record.image,
        }),
    )?;

    let tracker = Tracker::default();
    let result = {
        let work = run_steps(
            home,
            engine,
            &opts,
            images,
            &audit,
            &owner,
            &mut record,
            &tracker,
        );
        tokio::pin!(work);
        tokio::pin!(cancel);
        tokio::select! {
            // A session that finished is never reported as cancelled.
            biased;
            r = &mut work => r,
            () = &mut cancel => Err(Cancelled),
        }
    };
    if result.is_err() || record.status == SessionStatus::Failed {
        // A cancelled or failed session's worker stops now, even when its container is kept for
        // inspection: nothing else would stop it before the init's own deadline.
        let _ = engine.kill(&container::worker_name(&id)).await;
    }
    // Whatever happened, the engine objects go (unless the person asked to keep them).
    let cleanup_failed = if opts.keep {
        Vec::new()
    } else {
        tokio::time::timeout(CLEANUP_TIMEOUT, container::remove_all(engine, &tracker))
            .await
            .unwrap_or_else(|_| {
                vec![container::failed(
                    "(all)",
                    "cleanup timed out; run golem-orch gc",
                )]
            })
    };
    if !opts.keep {
        audit.record(
            Some(&id),
            "container.removed",
            json!({ "failed": cleanup_failed }),
        )?;
    }
    // Input copies are private bytes the person already has: they go with the session unless
    // the person keeps it for inspection.
    if !opts.keep {
        if let Err(e) = std::fs::remove_dir_all(&input) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!("removing {}: {e}", input.display());
            }
        }
    }
    if opts.policy.mounts.workspace != crate::policy::Access::None && record.user.is_some() {
        // The worker is gone (removed, or stopped and kept): nothing setuid, setgid or special
        // that it made survives in the workspace.
        let ws = home.workspace_dir();
        // Only the mount recipe goes (the files stay in the workspace directory), and only when
        // no other session of the project uses it: the last one to finish removes it.
        let volume = workspace::Overlay::for_workspace(&ws).volume;
        let users = engine
            .list(&Select::Volume(volume.clone()))
            .await
            .map(|l| l.len())
            .unwrap_or(1);
        if users == 0 {
            let _ = engine.remove_volume(&volume).await;
        }
        let scrubbed = workspace::scrub(&ws, None).map_err(io(&ws))?;
        audit.record(
            Some(&id),
            "workspace.scrubbed",
            json!({ "when": "after", "scrubbed": scrubbed }),
        )?;
        record.workspace_scrubbed = Some(scrubbed);
    }
    match result {
        Ok(()) => {}
        Err(Cancelled) => {
            record.status = SessionStatus::Cancelled;
            record.error = Some("cancelled".into());
        }
    }
    record.updated_at = audit::now();
    save(home, &record)?;
    audit.record(
        Some(&id),
        "session.finished",
        json!({ "status": record.status, "staged": record.staged, "error": record.error }),
    )?;
    Ok(Outcome {
        session: id.clone(),
        status: record.status,
        exit_code: record.exit.code,
        staged: record.staged.clone(),
        timed_out: record.exit.timed_out,
        oom_killed: record.exit.oom_killed,
        files: record.files,
        bytes: record.bytes,
        rejected: record.rejected,
        error: record.error.clone(),
        logs: dir.join(LOGS),
        host_failure: record.host_failure,
    })
}

/// The images a session uses, resolved before it starts.
#[derive(Debug, Clone)]
pub struct Images {
    /// What the worker runs.
    pub worker: Worker,
}

/// Makes sure golem-worker exists (building it when missing or stale) and a person's image is local.
pub async fn resolve_images(
    engine: &dyn Engine,
    opts: &RunOptions,
) -> Result<Images, SessionError> {
    let (image, image_id, entrypoint, default_cmd) = match &opts.image {
        Some(reference) => {
            let local = image::require_local(engine, reference).await?;
            (reference.clone(), local.id, local.entrypoint, local.cmd)
        }
        None => {
            let (tag, id) = image::ensure(engine).await?;
            let entrypoint = vec![image::WORKER_ENTRYPOINT.to_string()];
            (tag, id, entrypoint, default_command())
        }
    };
    let worker = Worker {
        image,
        image_id,
        entrypoint,
        cmd: if opts.command.is_empty() {
            default_cmd
        } else {
            opts.command.clone()
        },
    };
    Ok(Images { worker })
}

/// Marker for a cancelled session.
struct Cancelled;

/// The steps; any error is recorded in `record` (status failed) rather than returned.
#[allow(clippy::too_many_arguments)]
async fn run_steps(
    home: &Home,
    engine: &dyn Engine,
    opts: &RunOptions,
    images: &Images,
    audit: &Audit,
    owner: &Owner,
    record: &mut Record,
    tracker: &Tracker,
) -> Result<(), Cancelled> {
    if let Err(e) = steps(home, engine, opts, images, audit, owner, record, tracker).await {
        let message = e.to_string();
        let _ = audit.record(
            Some(&record.id),
            "session.failed",
            json!({ "error": message }),
        );
        if !record.status.is_final() || record.status == SessionStatus::Staged {
            record.status = SessionStatus::Failed;
        }
        record.error = Some(message);
        record.host_failure = e.is_host_failure();
        record.staged = None;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn steps(
    home: &Home,
    engine: &dyn Engine,
    opts: &RunOptions,
    images: &Images,
    audit: &Audit,
    owner: &Owner,
    record: &mut Record,
    tracker: &Tracker,
) -> Result<(), SessionError> {
    let id = record.id.clone();
    // The state directory's identity, re-checked after the worker ran: results are only ever
    // written into the directory that existed before the container did.
    let state_identity = identity(home.root())?;
    let input = home.session_dir(&id).join("input");

    // 1. Intake on the host: bytes only, never parsed here.
    // The policy's input cap holds whatever the caller asked for.
    let mut limits = opts.intake.clone();
    limits.max_total_bytes = limits
        .max_total_bytes
        .min(opts.policy.input.max_total_bytes.bytes());
    record.inputs = intake::intake(&opts.sources, &input, &limits).await?;
    save(home, record)?;
    // One audit line stays small: very large directories are summarised (the session record
    // and the manifest keep the full list).
    const AUDITED_INPUTS: usize = 1000;
    audit.record(
        Some(&id),
        "session.inputs",
        json!({
            "inputs": record.inputs.iter().take(AUDITED_INPUTS).collect::<Vec<_>>(),
            "count": record.inputs.len(),
        }),
    )?;

    let worker = &images.worker;

    // The repository's HEAD now, so a push can tell what changed on the branch meanwhile.
    let repo_head = match (&opts.repo, opts.policy.mounts.repo) {
        (Some(repo), access) if access != crate::policy::Access::None => {
            crate::target::head_commit(repo)
        }
        _ => None,
    };

    // 3. The plan, derived from the policy alone, for the session's own uid/gid.
    let mut paths = host_paths(home, &id, &opts.policy, opts.repo.clone(), true)?;
    let user = match opts.policy.fixed_user() {
        Some((uid, gid)) => SessionUser { uid, gid },
        None => {
            let user = worker_uid::allocate(engine).await?;
            paths.user = Some(user);
            user
        }
    };
    record.user = Some(user);
    save(home, record)?;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        // The input copy is the session's: readable by its worker, nobody else's uid.
        workspace::scrub(&input, Some(user)).map_err(io(&input))?;
    } else {
        // Not root: the worker's uid can only read the copy through "other" permissions. The
        // copy lies in the session's directory inside the state directory, which other host
        // users cannot traverse, so only the bind mount reaches it.
        workspace::open_to_others(&input).map_err(io(&input))?;
    }
    if opts.policy.mounts.workspace != crate::policy::Access::None {
        // A crashed earlier session may have left set-id or special files; as root, the tree
        // becomes this session's uid's, so its worker may use what earlier ones left.
        let ws = home.workspace_dir();
        let scrubbed = workspace::scrub(&ws, root.then_some(user)).map_err(io(&ws))?;
        audit.record(
            Some(&id),
            "workspace.scrubbed",
            json!({ "when": "before", "scrubbed": scrubbed }),
        )?;
        record.workspace_scrubbed_before = Some(scrubbed);
    }
    if let Some(text) = &opts.instructions {
        let task = home.session_dir(&id).join("task");
        std::fs::create_dir_all(&task).map_err(io(&task))?;
        let file = task.join("instructions.md");
        std::fs::write(&file, text).map_err(io(&file))?;
        // Readable by the worker through its bind mount whatever the umask; other host users
        // cannot pass the session's 0700 directory.
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&task, std::fs::Permissions::from_mode(0o755))
                .map_err(io(&task))?;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))
                .map_err(io(&file))?;
        }
        paths.task = Some(task);
    }
    paths.init = image::install_init(home.root())?;
    let plan: ContainerPlan = plan::build(
        &id,
        &opts.policy,
        &paths,
        &worker.plan_command(),
        labels(home, &id, owner),
        opts.allow_network,
    )?;
    audit.record(Some(&id), "session.plan", json!({ "plan": plan }))?;

    // 4. The one container, tracked before it exists, attached before it starts.
    let name = container::worker_name(&id);
    tracker.add(&name);
    let worker_id = engine.create(&name, &plan).await?;
    audit.record(
        Some(&id),
        "container.created",
        json!({ "container": worker_id, "image": worker.image, "image_id": worker.image_id }),
    )?;
    failpoint("before-start").await;
    let attached = engine.attach(&worker_id).await?;
    container::start(engine, &worker_id, "worker").await?;
    record.status = SessionStatus::Running;
    save(home, record)?;
    audit.record(
        Some(&id),
        "container.started",
        json!({ "container": worker_id }),
    )?;

    // 5 and 6. Wait for the worker, killing it at the wall-clock limit; then the init streams
    // /output, validated entry by entry while it streams, into a building stage.
    let limits = Limits {
        max_files: opts.policy.output.max_files,
        max_total_bytes: opts.policy.output.max_total_bytes.bytes(),
        max_file_bytes: opts.policy.output.max_file_bytes.bytes(),
    };
    let stage = Stage::new(home.staged_dir());
    let streamed = stream(
        engine,
        &worker_id,
        attached,
        Duration::from_secs(plan.timeout_secs),
        || -> Result<stage::Building, SessionError> {
            record.status = SessionStatus::Extracting;
            save(home, record)?;
            Ok(stage.begin(&id)?)
        },
        limits,
    )
    .await?;
    let exit = streamed.exit;
    record.exit = exit;
    if identity(home.root())? != state_identity {
        return Err(SessionError::StateReplaced(home.root().to_path_buf()));
    }
    audit.record(
        Some(&id),
        "container.exited",
        json!({ "exit_code": exit.code, "oom_killed": exit.oom_killed, "timed_out": exit.timed_out }),
    )?;
    let logs_path = home.session_dir(&id).join(LOGS);
    home::write_private(&logs_path, streamed.logs.as_bytes()).map_err(io(&logs_path))?;
    if exit.timed_out {
        record.status = SessionStatus::Timeout;
        record.error = Some(format!("killed after the {}s timeout", plan.timeout_secs));
        return Ok(());
    }
    if exit.oom_killed {
        record.status = SessionStatus::Oom;
        record.error = Some(format!(
            "killed for exceeding its {} memory limit",
            crate::units::Size(plan.memory_bytes)
        ));
        return Ok(());
    }
    let (building, extraction) = match streamed.extraction {
        Some(Ok(accepted)) => accepted,
        Some(Err(ExtractFailure::Rejected(message))) => {
            audit.record(Some(&id), "output.rejected", json!({ "error": message }))?;
            record.status = SessionStatus::Rejected;
            record.error = Some(format!("output rejected: {message}"));
            return Ok(());
        }
        Some(Err(ExtractFailure::Host(message))) => return Err(SessionError::Extract(message)),
        Some(Err(ExtractFailure::Cut(message))) => {
            let why = match (streamed.stalled, exit.code) {
                (true, _) => format!(
                    "{message}; no data for {} s, so the container was killed",
                    ARCHIVE_TIMEOUT.as_secs()
                ),
                (false, Some(code)) => format!("{message}; the container exited {code}"),
                (false, None) => message,
            };
            return Err(SessionError::ArchiveCut(why));
        }
        // The init's own deadline (a policy timeout past its maximum): a timeout like any other.
        None if exit.code == Some(plan::INIT_EXIT_DEADLINE) => {
            record.status = SessionStatus::Timeout;
            record.exit.timed_out = true;
            record.error = Some("killed at the init's deadline".into());
            return Ok(());
        }
        None => {
            return Err(SessionError::NoArchive(
                exit.code.map_or("unknown".into(), |c| c.to_string()),
            ))
        }
    };
    let events: Vec<Event> = extraction
        .rejected
        .iter()
        .map(|r| {
            Event::session(
                &id,
                "entry.rejected",
                json!({ "path": r.path, "reason": r.reason }),
            )
        })
        .collect();
    audit.record_all(&events)?;
    if extraction.rejected_omitted > 0 {
        audit.record(
            Some(&id),
            "entry.rejected.omitted",
            json!({ "count": extraction.rejected_omitted }),
        )?;
    }

    // 7. Stage atomically.
    let mut command = Vec::new();
    command.extend(worker.cmd.iter().cloned());
    let manifest = Manifest {
        version: 1,
        id: id.clone(),
        session: id.clone(),
        created_at: audit::now(),
        trust_level: opts.policy.level,
        image: worker.image.clone(),
        image_id: worker.image_id.clone(),
        command,
        exit_code: exit.code,
        inputs: record.inputs.clone(),
        files: extraction.files.clone(),
        rejected: extraction.rejected.clone(),
        rejected_omitted: extraction.rejected_omitted,
        bytes: extraction.total_bytes,
        repo_head,
    };
    failpoint("staging").await;
    building.commit(&manifest)?;
    let manifest_sha256 = crate::stage::manifest_sha256(&stage, &id)?;
    record.staged = Some(id.clone());
    record.files = extraction.files.len();
    record.bytes = extraction.total_bytes;
    record.rejected = extraction.rejected.len() as u64 + extraction.rejected_omitted;
    record.status = SessionStatus::Staged;
    audit.record(
        Some(&id),
        "session.staged",
        json!({ "staged": id, "files": record.files, "bytes": record.bytes, "rejected": record.rejected, "manifest_sha256": manifest_sha256 }),
    )?;
    Ok(())
}

enum ExtractFailure {
    /// The output broke the rules as a whole (caps, malformed archive): nothing is staged.
    Rejected(String),
    /// The host failed (disk full, the extraction task): not the worker's fault.
    Host(String),
    /// The archive stream ended early (the engine, a stall, the init killed from outside):
    /// counted as the host's failure, since the worker cannot reach the init's stdout.
    Cut(String),
}

/// Crash-test hook: when `GOLEM_FAILPOINT` names this point, the session stops here forever,
/// so a test can SIGKILL the orchestrator in a known phase; `NAME:until=PATH` waits until PATH
/// exists instead (ten minutes at most), so a test can break something under a session that then
/// goes on. Unset, it costs one env lookup.
async fn failpoint(name: &str) {
    let Ok(value) = std::env::var("GOLEM_FAILPOINT") else {
        return;
    };
    let (point, until) = match value.split_once(":until=") {
        Some((point, path)) => (point, Some(PathBuf::from(path))),
        None => (value.as_str(), None),
    };
    if point != name {
        return;
    }
    crate::render::errln(format_args!("golem-orch: failpoint {name} reached"));
    match until {
        Some(path) => {
            let give_up = tokio::time::Instant::now() + Duration::from_secs(600);
            while !path.exists() && tokio::time::Instant::now() < give_up {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

/// `(device, inode)` of a directory, without following a final symlink.
fn identity(path: &Path) -> Result<(u64, u64), SessionError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).map_err(io(path))?;
    Ok((meta.dev(), meta.ino()))
}

/// How long the attach stream is drained, at most, while a kill runs and after it: the engine
/// closes it once the container is dead, so this only bounds an engine that never does.
const KILL_DRAIN: Duration = Duration::from_secs(30);

/// Kills the container while reading its attach stream to the end, throwing stdout away and
/// keeping stderr in the logs. On engine 20.10 a kill returns only once the daemon has
/// drained the container's attach streams, so a client that stopped reading (a refused
/// archive with 30 MB still to come) stalled its own kill until the client's timeout, and the
/// worker's refused output became a host failure.
async fn kill_draining(
    engine: &dyn Engine,
    container: &str,
    mut attached: Attached,
    logs: &mut LogBuffer,
) -> Result<(), SessionError> {
    let kill = engine.kill(container);
    tokio::pin!(kill);
    let give_up = tokio::time::sleep(KILL_DRAIN);
    tokio::pin!(give_up);
    let mut killed = None;
    let mut open = true;
    while killed.is_none() || open {
        tokio::select! {
            result = &mut kill, if killed.is_none() => killed = Some(result),
            item = attached.next(), if open => match item {
                Some(Ok(Chunk::Stderr(message))) => logs.push(&message),
                Some(Ok(_)) => {}
                Some(Err(_)) | None => open = false,
            },
            () = &mut give_up => break,
        }
    }
    // An engine that neither finished the kill nor closed the stream in time: stop reading
    // (dropping the stream closes the connection, which ends the daemon's copy) and wait out
    // the kill.
    drop(attached);
    match killed {
        Some(result) => result?,
        None => kill.await?,
    }
    Ok(())
}

/// What the container's streams delivered.
struct Streamed {
    exit: Exit,
    logs: String,
    /// The archive began but then stalled, and the container was killed.
    stalled: bool,
    /// The validator's verdict, with the building stage when it accepted the archive (a refused
    /// one is already deleted, so a full disk is free again), once an archive began to arrive.
    extraction: Option<Result<(stage::Building, Extraction), ExtractFailure>>,
}

/// The validator, on a blocking thread, fed the archive's chunks through a bounded channel.
/// The thread owns the building stage until it is done with it, so however the session ends
/// (even cancelled mid-stream), the stage is only dropped once nothing writes into it.
struct Validator {
    chunks: tokio::sync::mpsc::Sender<bytes::Bytes>,
    task: tokio::task::JoinHandle<(stage::Building, Result<Extraction, extract::ExtractError>)>,
}

impl Validator {
    fn spawn(building: stage::Building, limits: Limits) -> Validator {
        let (chunks, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(ARCHIVE_CHUNKS_IN_FLIGHT);
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|b| (Ok::<_, std::io::Error>(b), rx))
        });
        let reader =
            tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(Box::pin(stream)));
        let root = plan::OUTPUT_TARGET.trim_start_matches('/').to_string();
        let task = tokio::task::spawn_blocking(move || {
            let verdict = extract::extract(reader, &root, &building.files_dir(), &limits);
            (building, verdict)
        });
        Validator { chunks, task }
    }

    /// Ends the stream (whatever was sent is all there is) and waits for the verdict.
    async fn finish(self) -> Result<(stage::Building, Extraction), ExtractFailure> {
        drop(self.chunks);
        match self.task.await {
            Ok((building, Ok(x))) => Ok((building, x)),
            Ok((
                _,
                Err(
                    e @ (extract::ExtractError::Io { .. }
                    | extract::ExtractError::InvalidDestination { .. }),
                ),
            )) => Err(ExtractFailure::Host(e.to_string())),
            Ok((_, Err(extract::ExtractError::Truncated(how)))) => Err(ExtractFailure::Cut(how)),
            Ok((_, Err(e))) => Err(ExtractFailure::Rejected(e.to_string())),
            Err(e) => Err(ExtractFailure::Host(format!(
                "the extraction task failed: {e}"
            ))),
        }
    }
}

/// Reads the running container's streams until it ends: stderr into the logs, stdout (the
/// init's archive of `/output`, which begins only once the worker and everything it started
/// are dead) into the validator. Kills the container at `timeout` if no archive has begun, when
/// the archive stalls, or as soon as the validator refuses it; the kill runs while the streams
/// are still drained (see [`kill_draining`]).
async fn stream(
    engine: &dyn Engine,
    container: &str,
    mut attached: Attached,
    timeout: Duration,
    mut begin: impl FnMut() -> Result<stage::Building, SessionError>,
    limits: Limits,
) -> Result<Streamed, SessionError> {
    let mut logs = LogBuffer::new(MAX_LOG_BYTES);
    let mut validator: Option<Validator> = None;
    let mut timed_out = false;
    let mut stalled = false;
    // Ok(true): the container must be killed; Ok(false): its streams ended by themselves.
    let read = async {
        let mut deadline = tokio::time::Instant::now() + timeout;
        loop {
            let item = match tokio::time::timeout_at(deadline, attached.next()).await {
                Err(_) => {
                    // Past the worker's limit before any archive, or the archive stalled.
                    timed_out = validator.is_none();
                    stalled = !timed_out;
                    return Ok(true);
                }
                Ok(None) => return Ok(false),
                Ok(Some(Err(e))) => return Err(SessionError::Engine(e)),
                Ok(Some(Ok(item))) => item,
            };
            let message = match item {
                Chunk::Stderr(message) => {
                    logs.push(&message);
                    continue;
                }
                Chunk::Stdout(message) => message,
            };
            if validator.is_none() {
                let building = begin()?;
                failpoint("extracting").await;
                validator = Some(Validator::spawn(building, limits));
            }
            // Once the archive has begun, only a stall stops it.
            deadline = tokio::time::Instant::now() + ARCHIVE_TIMEOUT;
            if let Some(v) = &validator {
                if v.chunks.send(message).await.is_err() {
                    // The validator stopped reading: the output is refused (or the host
                    // failed). Nothing more of it is wanted.
                    return Ok(true);
                }
            }
        }
    };
    let read: Result<bool, SessionError> = read.await;
    let killed = match read {
        Ok(true) => kill_draining(engine, container, attached, &mut logs).await,
        _ => {
            drop(attached);
            Ok(())
        }
    };
    // The validator always finishes before its stage is kept or dropped.
    let extraction = match validator {
        Some(v) => Some(v.finish().await),
        None => None,
    };
    read?;
    killed?;
    let exit = container::finished(engine, container, timed_out).await?;
    Ok(Streamed {
        exit,
        logs: logs.finish(),
        stalled,
        extraction,
    })
}
