//! One session: intake, one hardened container, extraction into the stage, cleanup.
//!
//! The order of steps is the security argument, so it reads top to bottom in one short method
//! ([`Session::steps`]) whose steps are the methods below it. Every engine object is registered
//! in a [`Tracker`] before it is created and removed at the end on every path; every step is
//! audited; the session record is rewritten atomically after each step so a crash leaves an
//! accurate trail for `gc`.
//!
//! `record` persists the record, `resolve` finds what a session needs before it starts, and
//! `stream` pumps the container's output through the validator.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use serde_json::json;

use crate::audit::{self, Audit, Event};
use crate::container::{self, Exit, Tracker};
use crate::engine::{Attached, Engine, EngineError, Select};
use crate::extract::{Extraction, Limits};
use crate::home::{self, Home};
use crate::image::{self, ImageError};
use crate::intake::{self, IntakeError, IntakeLimits, Source};
use crate::owner::Owner;
use crate::plan::{self, ContainerPlan, PlanError};
use crate::policy::{Access, Policy};
use crate::stage::{self, Manifest, Stage, StageError};
use crate::warnings::WarningSummary;
use crate::worker_uid::{self, SessionUser, UidError};
use crate::workspace;

mod failpoint;
mod model;
mod record;
mod resolve;
mod stream;

use failpoint::failpoint;
pub use model::{effective_policy as model_policy, HONEYTOKEN_PLACEHOLDER, MODEL_DIR};
pub use record::{list, load, save, Record, SessionStatus, LOGS, RECORD};
pub use resolve::{
    default_command, find_repo, host_paths, labels, resolve_images, session_plan, state_dirs_in,
    Images, Worker,
};
use stream::{stream, ExtractFailure, Streamed, ARCHIVE_TIMEOUT};

/// How long cleanup may take after a cancel before giving up (gc finishes the job).
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);

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
    /// Keep the stopped container after the session (for debugging; `gc` removes it later).
    pub keep: bool,
    /// Opt in to a network (only where the policy allows it).
    pub allow_network: bool,
    /// The project's git repository, for levels that mount it.
    pub repo: Option<PathBuf>,
    /// Download caps.
    pub intake: IntakeLimits,
    /// A worker definition's instructions, mounted read-only at `/task/instructions.md`.
    pub instructions: Option<String>,
    /// Model access through the host's gateway, for a worker whose definition asks for a model.
    /// `None`: no socket is mounted and nothing model-related enters the container.
    pub model: Option<crate::gateway::ModelAccess>,
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
    /// The session's use of the model gateway; absent when the worker had no model access.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<crate::gateway::ModelUsage>,
    /// The warnings its report worker claims in what was staged; null when nothing was staged
    /// or the worker gave no report index.
    pub warnings: Option<WarningSummary>,
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
    /// The engine created the container with settings other than the plan's (the fields named);
    /// it was removed without starting.
    #[error(
        "the engine did not create the container as planned ({0}); it was removed without starting"
    )]
    Mismatch(String),
    /// The engine's own defaults switch a protection off (see `EngineInfo::unsafe_defaults`).
    #[error("{0}")]
    UnsafeEngine(String),
    /// The policy names a runtime the engine does not have.
    #[error("the {runtime:?} runtime is not registered with the engine (it has: {have}); see README, \"Runtimes\"")]
    RuntimeMissing {
        /// The policy's runtime.
        runtime: String,
        /// The engine's runtimes.
        have: String,
    },
    /// The state directory was replaced while the worker ran.
    #[error("the state directory {0} was replaced while the worker ran; nothing was staged")]
    StateReplaced(PathBuf),
    /// The model gateway could not be started.
    #[error(transparent)]
    Gateway(#[from] crate::gateway::GatewayError),
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
                | SessionError::Mismatch(_)
                | SessionError::Gateway(_)
                | SessionError::Io { .. }
        )
    }
}

/// Fails when a scrub run as root left entries it could not fix: root can clear, remove and
/// re-own anything, so a failure there means a tree in a state the worker must not be given.
/// (Not as root, an earlier worker's unreadable directory is expected and only audited.)
fn scrub_held(path: &Path, scrubbed: &workspace::Scrubbed) -> Result<(), SessionError> {
    match scrubbed.failed.first() {
        None => Ok(()),
        Some(first) => Err(SessionError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(format!(
                "{} entr(ies) could not be scrubbed (first: {first}); the worker was not started",
                scrubbed.failed.len()
            )),
        }),
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SessionError + '_ {
    move |source| SessionError::Io {
        path: path.to_path_buf(),
        source,
    }
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
    // So is model access the level cannot grant (or a `--model` outside its allowlist).
    model::effective_policy(&opts)?;
    // And a runtime the engine does not have: the engine would refuse the create anyway, but
    // only after a session existed, and with its own words.
    let mut opts = opts;
    let fallback = check_runtime(engine, &mut opts.policy).await?;
    let mut session = Session::open(home, engine, &opts, &images.worker)?;
    if let Some(missing) = fallback {
        tracing::warn!("the {missing:?} runtime is not registered with the engine; this session runs under the engine's default");
        session.audit(
            "runtime.fallback",
            json!({ "missing": missing, "message": "the level's runtime is not required; the engine's default runs this session" }),
        )?;
    }
    let result = {
        let work = session.run_steps();
        tokio::pin!(work);
        tokio::pin!(cancel);
        tokio::select! {
            // A session that finished is never reported as cancelled.
            biased;
            r = &mut work => r,
            () = &mut cancel => Err(Cancelled),
        }
    };
    session.clean_up(result).await
}

/// Refuses an engine whose defaults switch a protection off, then settles the runtime against
/// the engine's: a runtime it has is kept; a missing one is refused
/// when required (a level's `runtime_required`, or a person's `--runtime`), else dropped for the
/// engine's default and returned, to be audited and warned about.
async fn check_runtime(
    engine: &dyn Engine,
    policy: &mut crate::policy::Policy,
) -> Result<Option<String>, SessionError> {
    let info = engine.version().await?;
    // An engine whose defaults switch a protection off runs no worker at all.
    if let Some(why) = info.unsafe_defaults() {
        return Err(SessionError::UnsafeEngine(why));
    }
    let Some(runtime) = policy.runtime.clone() else {
        return Ok(None);
    };
    if info.runtimes.contains(&runtime) {
        return Ok(None);
    }
    if policy.runtime_required {
        return Err(SessionError::RuntimeMissing {
            runtime,
            have: info.runtimes.join(", "),
        });
    }
    policy.runtime = None;
    Ok(Some(runtime))
}

/// Marker for a cancelled session.
struct Cancelled;

/// One session under way: what every step shares, so each step is a method rather than a
/// function of eight arguments.
struct Session<'a> {
    home: &'a Home,
    engine: &'a dyn Engine,
    opts: &'a RunOptions,
    worker: &'a Worker,
    audit: Audit,
    owner: Owner,
    id: String,
    /// `sessions/<id>/`, private to this user.
    dir: PathBuf,
    /// `sessions/<id>/input/`, the only part opened up for the worker (its bind mount).
    input: PathBuf,
    record: Record,
    tracker: Tracker,
    /// The model gateway, for a worker with model access (`model`).
    model: Option<model::ModelSession>,
    /// The container's settings as the engine recorded them, checked against the plan.
    verified: Option<crate::verify::Verified>,
    /// Protections the engine could not apply as planned ([`Engine::adapt`]).
    replaced: Vec<crate::engine::Replaced>,
    /// The warnings its report worker claimed, once staged.
    warnings: Option<WarningSummary>,
}

impl<'a> Session<'a> {
    /// Creates the session's directory and first record, and audits its creation.
    fn open(
        home: &'a Home,
        engine: &'a dyn Engine,
        opts: &'a RunOptions,
        worker: &'a Worker,
    ) -> Result<Session<'a>, SessionError> {
        let owner = Owner::current();
        let id = home::new_id();
        let dir = home.session_dir(&id);
        let input = dir.join("input");
        // The session's directory is private; only `input/` inside it is opened up for the
        // worker (through its bind mount: other host users cannot pass the 0700 directories
        // above it).
        home::create_private_dir(&dir).map_err(io(&dir))?;
        std::fs::create_dir(&input).map_err(io(&input))?;
        set_mode(&input, 0o755)?;
        let record = Record::new(&id, opts, worker, &owner);
        save(home, &record)?;
        let audit = Audit::new(home.audit_path());
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
        Ok(Session {
            home,
            engine,
            opts,
            worker,
            audit,
            owner,
            id,
            dir,
            input,
            record,
            tracker: Tracker::default(),
            model: None,
            verified: None,
            replaced: Vec::new(),
            warnings: None,
        })
    }

    /// Rewrites the record, after every step, so a crash leaves an accurate trail.
    fn save(&self) -> Result<(), SessionError> {
        save(self.home, &self.record)
    }

    /// Audits one of this session's events; a session that cannot be audited does not go on.
    fn audit(&self, event: &str, data: serde_json::Value) -> Result<(), SessionError> {
        Ok(self.audit.record(Some(&self.id), event, data)?)
    }

    /// Whether the level mounts `/workspace`, which then needs scrubbing before and after.
    fn mounts_workspace(&self) -> bool {
        self.opts.policy.mounts.workspace != Access::None
    }

    /// The steps; any error is recorded in the record (status failed) rather than returned.
    async fn run_steps(&mut self) -> Result<(), Cancelled> {
        if let Err(e) = self.steps().await {
            let message = e.to_string();
            let _ = self.audit("session.failed", json!({ "error": message }));
            let record = &mut self.record;
            if !record.status.is_final() || record.status == SessionStatus::Staged {
                record.status = SessionStatus::Failed;
            }
            record.error = Some(message);
            record.host_failure = e.is_host_failure();
            record.staged = None;
        }
        Ok(())
    }

    /// The steps in their order, which is the security argument.
    async fn steps(&mut self) -> Result<(), SessionError> {
        // The state directory's identity, re-checked after the worker ran: results are only
        // ever written into the directory that existed before the container did.
        let state_identity = identity(self.home.root())?;
        // 1. Intake on the host: bytes only, never parsed here.
        self.intake().await?;
        // The repository's HEAD now, so a push can tell what changed on the branch meanwhile.
        let repo_head = match (&self.opts.repo, self.opts.policy.mounts.repo) {
            (Some(repo), access) if access != Access::None => crate::target::head_commit(repo),
            _ => None,
        };
        // 2 and 3. The session's own uid/gid, and the plan, derived from the policy alone.
        let plan = self.plan().await?;
        // 4. The one container, tracked before it exists, attached before it starts.
        let (worker_id, attached) = self.create(&plan).await?;
        // 5 and 6. Wait for the worker, killing it at the wall-clock limit; then the init
        // streams /output, validated entry by entry while it streams, into a building stage.
        let streamed = self.collect(&plan, &worker_id, attached).await?;
        // The worker is gone: its gateway goes too, so the transcript and usage are final.
        self.stop_model().await?;
        self.scan_logs(&streamed.logs)?;
        if identity(self.home.root())? != state_identity {
            return Err(SessionError::StateReplaced(self.home.root().to_path_buf()));
        }
        let Some((building, extraction)) = self.judge(&plan, streamed)? else {
            return Ok(());
        };
        // 7. Stage atomically.
        self.stage(building, extraction, repo_head).await
    }

    /// Copies the inputs in, within the policy's input cap whatever the caller asked for.
    async fn intake(&mut self) -> Result<(), SessionError> {
        let mut limits = self.opts.intake.clone();
        limits.max_total_bytes = limits
            .max_total_bytes
            .min(self.opts.policy.input.max_total_bytes.bytes());
        let taken = intake::intake(&self.opts.sources, &self.input, &limits).await?;
        (self.record.inputs, self.record.skipped) = (taken.inputs, taken.skipped);
        self.save()?;
        // One audit line stays small: very large directories are summarised (the session
        // record and the manifest keep the full list).
        const AUDITED_INPUTS: usize = 1000;
        self.audit(
            "session.inputs",
            json!({
                "inputs": self.record.inputs.iter().take(AUDITED_INPUTS).collect::<Vec<_>>(),
                "count": self.record.inputs.len(),
                "skipped": self.record.skipped.iter().take(AUDITED_INPUTS).collect::<Vec<_>>(),
            }),
        )
    }

    /// Allocates the worker's identity, opens the inputs and workspace to it, and builds and
    /// audits the plan.
    async fn plan(&mut self) -> Result<ContainerPlan, SessionError> {
        let opts = self.opts;
        let mut paths = host_paths(self.home, &self.id, &opts.policy, opts.repo.clone(), true)?;
        let user = match opts.policy.fixed_user() {
            Some((uid, gid)) => SessionUser { uid, gid },
            None => {
                let user = worker_uid::allocate(self.engine).await?;
                paths.user = Some(user);
                user
            }
        };
        self.record.user = Some(user);
        self.save()?;
        self.open_to(user)?;
        if let Some(text) = &opts.instructions {
            paths.task = Some(self.write_instructions(text)?);
        }
        self.start_model(user, &mut paths)?;
        paths.init = image::install_init(self.home.root())?;
        let mut plan = session_plan(
            self.home,
            &self.id,
            opts,
            &paths,
            &self.worker.plan_command(),
            &self.owner,
        )?;
        self.replaced = self.engine.adapt(&mut plan);
        if !self.replaced.is_empty() {
            self.audit("engine.adapted", json!({ "replaced": self.replaced }))?;
        }
        self.audit("session.plan", json!({ "plan": self.audited_plan(&plan) }))?;
        Ok(plan)
    }

    /// Makes the input copy readable by the worker's `user` only (as root) or through "other"
    /// permissions (not root), and scrubs the workspace before the worker sees it.
    fn open_to(&mut self, user: SessionUser) -> Result<(), SessionError> {
        let input = &self.input;
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if root {
            // The input copy is the session's: readable by its worker, nobody else's uid.
            let scrubbed = workspace::scrub(input, Some(user)).map_err(io(input))?;
            scrub_held(input, &scrubbed)?;
        } else {
            // Not root: the worker's uid can only read the copy through "other" permissions.
            // The copy lies in the session's directory inside the state directory, which other
            // host users cannot traverse, so only the bind mount reaches it.
            workspace::open_to_others(input).map_err(io(input))?;
        }
        if self.mounts_workspace() {
            // A crashed earlier session may have left set-id or special files; as root, the
            // tree becomes this session's uid's, so its worker may use what earlier ones left.
            let ws = self.home.workspace_dir();
            let scrubbed = workspace::scrub(&ws, root.then_some(user)).map_err(io(&ws))?;
            self.audit(
                "workspace.scrubbed",
                json!({ "when": "before", "scrubbed": scrubbed }),
            )?;
            if root {
                // Root can fix every entry; one it could not is a tree the worker must not get.
                scrub_held(&ws, &scrubbed)?;
            }
            self.record.workspace_scrubbed_before = Some(scrubbed);
        }
        Ok(())
    }

    /// Writes a worker definition's instructions where the plan mounts them; returns the
    /// directory. Readable by the worker through its bind mount whatever the umask; other host
    /// users cannot pass the session's 0700 directory.
    fn write_instructions(&self, text: &str) -> Result<PathBuf, SessionError> {
        let task = self.dir.join("task");
        std::fs::create_dir_all(&task).map_err(io(&task))?;
        let file = task.join("instructions.md");
        std::fs::write(&file, text).map_err(io(&file))?;
        set_mode(&task, 0o755)?;
        set_mode(&file, 0o644)?;
        Ok(task)
    }

    /// Creates the container (tracked first), attaches to it, and starts it.
    async fn create(&mut self, plan: &ContainerPlan) -> Result<(String, Attached), SessionError> {
        let engine = self.engine;
        let name = container::worker_name(&self.id);
        self.tracker.add(&name);
        let worker_id = engine.create(&name, plan).await?;
        self.audit(
            "container.created",
            json!({ "container": worker_id, "image": self.worker.image, "image_id": self.worker.image_id }),
        )?;
        self.verify(plan, &worker_id).await?;
        failpoint("before-start").await;
        let attached = engine.attach(&worker_id).await?;
        container::start(engine, &worker_id, "worker").await?;
        self.record.status = SessionStatus::Running;
        self.save()?;
        self.audit("container.started", json!({ "container": worker_id }))?;
        Ok((worker_id, attached))
    }

    /// Reads the created container back and compares it with the plan before it starts: on any
    /// difference it is audited (`container.mismatch`) and the session fails as the host's
    /// failure; `clean_up` removes the container, which never ran.
    async fn verify(&mut self, plan: &ContainerPlan, worker_id: &str) -> Result<(), SessionError> {
        let effective = self.engine.effective(worker_id).await?;
        let mismatches = crate::verify::compare(plan, &effective);
        if !mismatches.is_empty() {
            self.audit(
                "container.mismatch",
                json!({ "container": worker_id, "fields": mismatches }),
            )?;
            let fields: Vec<&str> = mismatches.iter().map(|m| m.field).collect();
            return Err(SessionError::Mismatch(fields.join(", ")));
        }
        let verified = crate::verify::Verified::new(effective, self.replaced.clone());
        self.audit(
            "container.verified",
            json!({ "container": worker_id, "digest": verified.digest, "runtime": verified.settings.runtime }),
        )?;
        self.verified = Some(verified);
        Ok(())
    }

    /// Streams the container's output into a building stage until it ends; records and audits
    /// how it ended and keeps its logs.
    async fn collect(
        &mut self,
        plan: &ContainerPlan,
        worker_id: &str,
        attached: Attached,
    ) -> Result<Streamed, SessionError> {
        let output = &self.opts.policy.output;
        let limits = Limits {
            max_files: output.max_files,
            max_total_bytes: output.max_total_bytes.bytes(),
            max_file_bytes: output.max_file_bytes.bytes(),
        };
        let stage = Stage::new(self.home.staged_dir());
        let (home, id, record) = (self.home, &self.id, &mut self.record);
        let begin = || -> Result<stage::Building, SessionError> {
            record.status = SessionStatus::Extracting;
            save(home, record)?;
            Ok(stage.begin(id)?)
        };
        let timeout = Duration::from_secs(plan.timeout_secs);
        let streamed = stream(self.engine, worker_id, attached, timeout, begin, limits).await?;
        self.record.exit = streamed.exit;
        Ok(streamed)
    }

    /// Audits how the worker ended, keeps its logs, and decides what its ending means: `None`
    /// when the session is over without anything to stage (a timeout, OOM, a refusal).
    fn judge(
        &mut self,
        plan: &ContainerPlan,
        streamed: Streamed,
    ) -> Result<Option<(stage::Building, Extraction)>, SessionError> {
        let exit = streamed.exit;
        self.audit(
            "container.exited",
            json!({ "exit_code": exit.code, "oom_killed": exit.oom_killed, "timed_out": exit.timed_out }),
        )?;
        let logs_path = self.dir.join(LOGS);
        home::write_private(&logs_path, streamed.logs.as_bytes()).map_err(io(&logs_path))?;
        let record = &mut self.record;
        if exit.timed_out {
            record.status = SessionStatus::Timeout;
            record.error = Some(format!("killed after the {}s timeout", plan.timeout_secs));
            return Ok(None);
        }
        if exit.oom_killed {
            record.status = SessionStatus::Oom;
            record.error = Some(format!(
                "killed for exceeding its {} memory limit",
                crate::units::Size(plan.memory_bytes)
            ));
            return Ok(None);
        }
        match streamed.extraction {
            Some(Ok(accepted)) => Ok(Some(accepted)),
            Some(Err(failure)) => self.refused(failure, streamed.stalled, exit).map(|()| None),
            // The init's own deadline (a policy timeout past its maximum): a timeout like any other.
            None if exit.code == Some(plan::INIT_EXIT_DEADLINE) => {
                self.record.status = SessionStatus::Timeout;
                self.record.exit.timed_out = true;
                self.record.error = Some("killed at the init's deadline".into());
                Ok(None)
            }
            None => Err(SessionError::NoArchive(
                exit.code.map_or("unknown".into(), |c| c.to_string()),
            )),
        }
    }

    /// An archive the validator did not accept: the worker's refusal (recorded), or the host's
    /// failure (returned).
    fn refused(
        &mut self,
        failure: ExtractFailure,
        stalled: bool,
        exit: Exit,
    ) -> Result<(), SessionError> {
        match failure {
            ExtractFailure::Rejected(message) => {
                self.audit("output.rejected", json!({ "error": message }))?;
                self.record.status = SessionStatus::Rejected;
                self.record.error = Some(format!("output rejected: {message}"));
                Ok(())
            }
            ExtractFailure::Host(message) => Err(SessionError::Extract(message)),
            ExtractFailure::Cut(message) => {
                let why = match (stalled, exit.code) {
                    (true, _) => format!(
                        "{message}; no data for {} s, so the container was killed",
                        ARCHIVE_TIMEOUT.as_secs()
                    ),
                    (false, Some(code)) => format!("{message}; the container exited {code}"),
                    (false, None) => message,
                };
                Err(SessionError::ArchiveCut(why))
            }
        }
    }

    /// Audits the rejected entries, then commits the stage with its manifest.
    async fn stage(
        &mut self,
        building: stage::Building,
        extraction: Extraction,
        repo_head: Option<String>,
    ) -> Result<(), SessionError> {
        let id = self.id.clone();
        let events: Vec<Event> = extraction
            .rejected
            .iter()
            .map(|r| {
                let data = json!({ "path": r.path, "reason": r.reason });
                Event::session(&id, "entry.rejected", data)
            })
            .collect();
        self.audit.record_all(&events)?;
        if extraction.rejected_omitted > 0 {
            let count = extraction.rejected_omitted;
            self.audit("entry.rejected.omitted", json!({ "count": count }))?;
        }
        let mut manifest = self.manifest(&extraction, repo_head);
        manifest.model = self.stage_model(&building, &extraction.files)?;
        // The worker's claim, read as hostile data; no index (or a bad one) is no summary.
        manifest.warnings = crate::warnings::read(&building.files_dir(), &extraction.files);
        self.warnings = manifest.warnings.clone();
        failpoint("staging").await;
        building.commit(&manifest)?;
        let stage = Stage::new(self.home.staged_dir());
        let manifest_sha256 = crate::stage::manifest_sha256(&stage, &id)?;
        let record = &mut self.record;
        record.staged = Some(id.clone());
        record.files = extraction.files.len();
        record.bytes = extraction.total_bytes;
        record.rejected = extraction.rejected.len() as u64 + extraction.rejected_omitted;
        record.status = SessionStatus::Staged;
        let data = json!({ "staged": id, "files": record.files, "bytes": record.bytes, "rejected": record.rejected, "manifest_sha256": manifest_sha256 });
        self.audit("session.staged", data)
    }

    /// What the stage records about where its files came from, for review and push.
    fn manifest(&self, extraction: &Extraction, repo_head: Option<String>) -> Manifest {
        Manifest {
            version: 1,
            id: self.id.clone(),
            session: self.id.clone(),
            created_at: audit::now(),
            trust_level: self.opts.policy.level,
            image: self.worker.image.clone(),
            image_id: self.worker.image_id.clone(),
            command: self.worker.cmd.clone(),
            exit_code: self.record.exit.code,
            inputs: self.record.inputs.clone(),
            skipped: self.record.skipped.clone(),
            files: extraction.files.clone(),
            rejected: extraction.rejected.clone(),
            rejected_omitted: extraction.rejected_omitted,
            bytes: extraction.total_bytes,
            repo_head,
            model: None,
            container: self.verified.clone(),
            warnings: None,
        }
    }

    /// Cleans up whatever happened (the engine's objects, the input copy, the workspace),
    /// records the final status and reports it.
    async fn clean_up(mut self, result: Result<(), Cancelled>) -> Result<Outcome, SessionError> {
        self.release_engine(result.is_err()).await?;
        self.stop_model().await?;
        // Input copies are private bytes the person already has: they go with the session
        // unless the person keeps it for inspection.
        if !self.opts.keep {
            if let Err(e) = std::fs::remove_dir_all(&self.input) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!("removing {}: {e}", self.input.display());
                }
            }
        }
        if self.mounts_workspace() && self.record.user.is_some() {
            self.tidy_workspace().await?;
        }
        if result.is_err() {
            self.record.status = SessionStatus::Cancelled;
            self.record.error = Some("cancelled".into());
        }
        self.record.updated_at = audit::now();
        self.save()?;
        self.model_summary()?;
        let record = &self.record;
        self.audit(
            "session.finished",
            json!({ "status": record.status, "staged": record.staged, "error": record.error }),
        )?;
        Ok(self.outcome())
    }

    /// Stops a cancelled or failed session's worker and removes the engine's objects (unless
    /// the person asked to keep them).
    async fn release_engine(&self, cancelled: bool) -> Result<(), SessionError> {
        if cancelled || self.record.status == SessionStatus::Failed {
            // Stopped now even when its container is kept for inspection: nothing else would
            // stop it before the init's own deadline.
            let _ = self.engine.kill(&container::worker_name(&self.id)).await;
        }
        if self.opts.keep {
            return Ok(());
        }
        let removal = container::remove_all(self.engine, &self.tracker);
        let failed = tokio::time::timeout(CLEANUP_TIMEOUT, removal)
            .await
            .unwrap_or_else(|_| {
                vec![container::failed(
                    "(all)",
                    "cleanup timed out; run golem-orch gc",
                )]
            });
        self.audit("container.removed", json!({ "failed": failed }))
    }

    /// The worker is gone (removed, or stopped and kept): nothing setuid, setgid or special
    /// that it made survives in the workspace. Only the mount recipe goes (the files stay in
    /// the workspace directory), and only when no other session of the project uses it: the
    /// last one to finish removes it.
    async fn tidy_workspace(&mut self) -> Result<(), SessionError> {
        let ws = self.home.workspace_dir();
        let volume = workspace::Overlay::for_workspace(&ws).volume;
        let users = self
            .engine
            .list(&Select::Volume(volume.clone()))
            .await
            .map(|l| l.len())
            .unwrap_or(1);
        if users == 0 {
            let _ = self.engine.remove_volume(&volume).await;
        }
        let scrubbed = workspace::scrub(&ws, None).map_err(io(&ws))?;
        self.audit(
            "workspace.scrubbed",
            json!({ "when": "after", "scrubbed": scrubbed }),
        )?;
        self.record.workspace_scrubbed = Some(scrubbed);
        Ok(())
    }

    /// What `run --json` reports, read from the final record.
    fn outcome(&self) -> Outcome {
        let record = &self.record;
        Outcome {
            session: self.id.clone(),
            status: record.status,
            exit_code: record.exit.code,
            staged: record.staged.clone(),
            timed_out: record.exit.timed_out,
            oom_killed: record.exit.oom_killed,
            files: record.files,
            bytes: record.bytes,
            rejected: record.rejected,
            error: record.error.clone(),
            logs: self.dir.join(LOGS),
            host_failure: record.host_failure,
            model: record.model,
            warnings: self.warnings.clone(),
        }
    }
}

/// Sets a path's permission bits.
fn set_mode(path: &Path, mode: u32) -> Result<(), SessionError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io(path))
}

/// `(device, inode)` of a directory, without following a final symlink.
fn identity(path: &Path) -> Result<(u64, u64), SessionError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).map_err(io(path))?;
    Ok((meta.dev(), meta.ino()))
}

#[cfg(test)]
mod tests;
