//! What a person asked to run, resolved into a session's options and its dry-run plan.
//!
//! The security rules about *what* runs live here rather than at the command line so that the
//! library can test them: the trust level comes only from the person's own flags (a worker
//! definition or a project file that a cloned repository ships can narrow it, never raise it);
//! flags only lower limits; and `--dry-run` shows the plan built by the same code a session
//! uses. `batch` keeps a [`RunSpec`] in its record, so `--resume` resolves exactly what the
//! first run resolved without turning it back into command-line arguments.
//!
//! An AI worker (a definition with `model:`) gets the host's model gateway. Where the model is
//! and the key to it come from the host alone ([`Upstream`], resolved afresh on every run and
//! resume, never stored in a spec); the person's `--model` and `--model-budget` only narrow the
//! level's `model:` section, through the same [`Policy::narrow`](crate::policy::Policy::narrow)
//! as every other flag.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::gateway::{self, ConfigError, ModelAccess, Upstream};
use crate::home::Home;
use crate::intake::{self, IntakeError, IntakeLimits};
use crate::owner::Owner;
use crate::plan::{self, ContainerPlan, PlanError};
use crate::policy::{self, ModelNarrowing, Narrowing, Origin, Policy, PolicyError, TrustLevel};
use crate::session::{self, RunOptions, SessionError, Worker};
use crate::units::{Limit, Size};
use crate::{image, workers};

/// The worker definition used when the person names neither a worker nor an image.
pub const DEFAULT_WORKER: &str = "report";

/// What a person asked for, in the library's terms. The field names are those the batch
/// record has always used, so records written before this type existed still load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSpec {
    /// The trust level, from the person's flags only (untrusted when they gave none).
    pub trust_level: TrustLevel,
    /// Worker definition name (default [`DEFAULT_WORKER`]), when not an image.
    pub worker: Option<String>,
    /// A person's own local image instead of a worker definition.
    pub image: Option<String>,
    /// Arguments for `image` (refused without it: golem-worker's command is fixed).
    pub command: Vec<String>,
    /// Lowered memory limit.
    pub memory: Option<Size>,
    /// Lowered timeout.
    pub timeout: Option<Limit>,
    /// Let URLs reach private addresses (`--allow-private-urls`).
    #[serde(default)]
    pub allow_private_urls: bool,
    /// Lowered total input cap (`--max-input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_input: Option<Size>,
    /// Largest download per URL (default: [`IntakeLimits::default`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_download: Option<Size>,
    /// Wall-clock limit per download (default: [`IntakeLimits::default`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub download_timeout: Option<Limit>,
    /// Opt in to a network (only where the level's policy allows it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_network: bool,
    /// Keep the stopped container for debugging.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep: bool,
    /// `--task TEXT` (or the text of `--task-file`): replaces the definition's instructions at
    /// `/task/instructions.md`. Checked by [`check_task`]; kept as text, so a resumed batch runs
    /// the task the person gave even if the file changed since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// `--model NAME`: the one model this run may use, within the level's allowlist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `--model-budget TOKENS`: lowers the session's input and output token budgets to at most
    /// this many each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_budget: Option<u64>,
    /// `batch --batch-model-budget TOKENS`: one budget of model tokens (input and output
    /// together) shared by every document of a batch, on top of each session's own. Kept in
    /// the batch record so `--resume` goes on with what the documents left of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_model_budget: Option<u64>,
    /// `--strict`: a symbolic link inside an input folder fails the session (or, in a batch,
    /// the listing) instead of being skipped and listed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict: bool,
    /// `--runtime NAME`: one of the level's `runtimes`, then required (no fallback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
}

impl RunSpec {
    /// A spec at `trust_level` running the default worker with the policy's own limits.
    pub fn new(trust_level: TrustLevel) -> RunSpec {
        RunSpec {
            trust_level,
            worker: None,
            image: None,
            command: Vec::new(),
            memory: None,
            timeout: None,
            allow_private_urls: false,
            max_input: None,
            max_download: None,
            download_timeout: None,
            allow_network: false,
            keep: false,
            task: None,
            model: None,
            model_budget: None,
            batch_model_budget: None,
            strict: false,
            runtime: None,
        }
    }
}

/// The most a `--task` text may be: instructions for a worker, not a document to smuggle in.
pub const MAX_TASK_BYTES: usize = 64 << 10;

/// Checks a task for the worker: at most [`MAX_TASK_BYTES`], and no character the rendering gate
/// would escape in multi-line text (terminal escapes, bidi overrides, invisible characters), so
/// what the worker reads at `/task/instructions.md` is exactly what the person saw when they
/// typed or reviewed it. Refused rather than escaped: a silently changed task is worse.
pub fn check_task(text: &str) -> Result<(), SpecError> {
    if text.trim().is_empty() {
        return Err(SpecError::Task("the task is empty".into()));
    }
    if text.len() > MAX_TASK_BYTES {
        return Err(SpecError::Task(format!(
            "the task is {} bytes; at most {MAX_TASK_BYTES} are accepted",
            text.len()
        )));
    }
    if let Some((at, c)) = text
        .char_indices()
        .find(|(_, c)| golem_protocol::chars::is_dangerous_in_text(*c))
    {
        return Err(SpecError::Task(format!(
            "the task holds U+{:04X} at byte {at}; control, bidi and invisible characters are refused",
            u32::from(c)
        )));
    }
    Ok(())
}

/// Reads `--task-file FILE` on the host: a regular file (no link followed), at most
/// [`MAX_TASK_BYTES`], UTF-8, and [`check_task`]ed.
pub fn read_task_file(path: &Path) -> Result<String, SpecError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let bad = |why: String| SpecError::Task(format!("--task-file {}: {why}", path.display()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| bad(e.to_string()))?;
    if !file.metadata().map_err(|e| bad(e.to_string()))?.is_file() {
        return Err(bad("not a regular file".into()));
    }
    let mut bytes = Vec::new();
    file.take(MAX_TASK_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad(e.to_string()))?;
    if bytes.len() > MAX_TASK_BYTES {
        return Err(bad(format!("larger than {MAX_TASK_BYTES} bytes")));
    }
    let text = String::from_utf8(bytes).map_err(|_| bad("not UTF-8 text".into()))?;
    check_task(&text)?;
    Ok(text)
}

/// `--model-budget TOKENS`: lowers the session's input and output token budgets each to at
/// most `tokens` (a budget already lower stays), as a flag narrowing through the one rule set.
pub fn narrow_model_budget(policy: &mut Policy, tokens: u64) -> Result<(), SpecError> {
    if tokens == 0 {
        return Err(SpecError::Task(
            "--model-budget must be at least 1 token (to give up the model, pick another worker)"
                .into(),
        ));
    }
    let m = &policy.model;
    let budget = Narrowing {
        model: Some(ModelNarrowing {
            max_input_tokens: Some(tokens.min(m.max_input_tokens)),
            max_output_tokens: Some(tokens.min(m.max_output_tokens)),
            ..ModelNarrowing::default()
        }),
        ..Narrowing::default()
    };
    Ok(policy.narrow(&budget, Origin::Flags)?)
}

/// A lookup of the host's environment; injected so tests never touch the process's own.
pub type HostEnv<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process's environment, as [`Upstream::from_host`] reads it.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The host's upstream from `env` and the host config file it points to: exactly what
/// [`Upstream::from_host`] does, with the environment injectable.
fn host_upstream(env: HostEnv<'_>) -> Result<Option<Upstream>, ConfigError> {
    let file = gateway::host_config_path(env).filter(|p| p.symlink_metadata().is_ok());
    Upstream::from_sources(env, file.as_deref())
}

/// Where a run happens: the policies, the project file and the repository it may see.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Place {
    /// Directory replacing the built-in level policies.
    pub policy_dir: Option<PathBuf>,
    /// The project's `golem.yaml`, which may only narrow a level.
    pub project_file: Option<PathBuf>,
    /// The project's git repository, for levels that mount it.
    pub repo: Option<PathBuf>,
}

impl Place {
    /// The place around the current directory: its `golem.yaml` and its repository.
    pub fn here(policy_dir: Option<&Path>) -> Place {
        let cwd = std::env::current_dir().ok();
        Place {
            policy_dir: policy_dir.map(Path::to_path_buf),
            project_file: cwd.as_deref().and_then(policy::find_project_file),
            repo: cwd.as_deref().and_then(session::find_repo),
        }
    }

    /// Project worker definitions live in `workers/` beside the project's golem.yaml.
    pub fn workers_dir(&self) -> Option<PathBuf> {
        workers_dir(self.project_file.as_deref())
    }
}

/// Project worker definitions live in `workers/` beside the project's golem.yaml.
pub fn workers_dir(project_file: Option<&Path>) -> Option<PathBuf> {
    project_file
        .and_then(Path::parent)
        .map(|d| d.join("workers"))
}

/// Why a request cannot become a session.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// Arguments after `--` without `--image`.
    #[error("arguments after -- are for --image IMAGE; golem-worker's command is fixed")]
    CommandWithoutImage,
    /// No inputs, and golem-worker has nothing to work on without them.
    #[error(
        "nothing to process: give at least one file, directory or URL (see golem-orch run --help)"
    )]
    NothingToProcess,
    /// The policy, project file, worker definition or a flag refused the request (boxed: it
    /// carries a location and both values, and every `Result` here would pay for it).
    #[error(transparent)]
    Policy(Box<PolicyError>),
    /// An input could not be classified.
    #[error(transparent)]
    Intake(#[from] IntakeError),
    /// Host paths for the plan could not be resolved.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The plan is impossible for this level.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// `--task`/`--task-file` was refused.
    #[error("{0}")]
    Task(String),
    /// `--model`, `--model-budget` or `--batch-model-budget` for a worker that has no model
    /// access.
    #[error("{flag} is for a worker with model access (e.g. --worker agent); {worker} has none")]
    ModelFlagWithoutModel {
        /// The flag given.
        flag: &'static str,
        /// The worker (or image) that was asked for.
        worker: String,
    },
    /// The worker needs a model and the host names none.
    #[error("worker {worker} needs a model, but this host has none configured: set GOLEM_MODEL_API (anthropic or openai), GOLEM_MODEL_BASE_URL, GOLEM_MODEL_KEY and GOLEM_MODEL, or write api/base_url/key/model to {config} (see README, \"AI workers\")")]
    NoUpstream {
        /// The worker.
        worker: String,
        /// Where the host config file is looked for.
        config: String,
    },
    /// The host's model configuration is unusable.
    #[error(transparent)]
    Upstream(#[from] ConfigError),
    /// The level (after the project file and the definition) allows no model.
    #[error("worker {worker} needs a model, but the {level} level allows none here (its model.allow is empty{why})")]
    NoModelAtLevel {
        /// The worker.
        worker: String,
        /// The run's level.
        level: TrustLevel,
        /// What made it empty, when known.
        why: String,
    },
    /// `--model NAME` outside the level's allowlist.
    #[error("--model {model} is not allowed at the {level} level (allowed here: {allowed})")]
    ModelNotAllowed {
        /// The name given.
        model: String,
        /// The run's level.
        level: TrustLevel,
        /// The allowlist with `host` resolved.
        allowed: String,
    },
}

impl From<PolicyError> for SpecError {
    fn from(e: PolicyError) -> SpecError {
        SpecError::Policy(Box::new(e))
    }
}

impl RunSpec {
    /// The session options for a batch: everything but the inputs, which each document sets.
    pub fn resolve(&self, place: &Place) -> Result<RunOptions, SpecError> {
        self.resolve_in(place, None, &process_env)
    }

    /// The session options for a run of `inputs`; a worker image of its own may run without any.
    pub fn resolve_with_inputs(
        &self,
        place: &Place,
        inputs: &[String],
    ) -> Result<RunOptions, SpecError> {
        self.resolve_in(place, Some(inputs), &process_env)
    }

    /// [`RunSpec::resolve`] (`inputs: None`) or [`RunSpec::resolve_with_inputs`], with the
    /// host's environment (which names the model upstream) given as a lookup.
    pub fn resolve_in(
        &self,
        place: &Place,
        inputs: Option<&[String]>,
        env: HostEnv<'_>,
    ) -> Result<RunOptions, SpecError> {
        let mut opts = self.base(place, env)?;
        if let Some(inputs) = inputs {
            if inputs.is_empty() && opts.image.is_none() {
                return Err(SpecError::NothingToProcess);
            }
            opts.sources = intake::classify(inputs)?;
        }
        self.limit_intake(&mut opts)?;
        Ok(opts)
    }

    /// The effective policy (level, project file, worker definition, flags) and what to run.
    fn base(&self, place: &Place, env: HostEnv<'_>) -> Result<RunOptions, SpecError> {
        if !self.command.is_empty() && self.image.is_none() {
            return Err(SpecError::CommandWithoutImage);
        }
        // A worker definition unless the person runs their own image directly.
        let definition = match &self.image {
            Some(_) => None,
            None => Some(workers::find(
                place.workers_dir().as_deref(),
                self.worker.as_deref().unwrap_or(DEFAULT_WORKER),
            )?),
        };
        // Only the person's flags set the level: a definition (which a cloned repository may
        // ship) that needs more is refused, never obeyed, and the project file only narrows.
        let mut effective = policy::load(
            self.trust_level,
            place.policy_dir.as_deref(),
            place.project_file.as_deref(),
        )?;
        if let Some(def) = &definition {
            def.narrow(&mut effective.policy)?;
        }
        policy::narrow_for_run(&mut effective.policy, self.memory, self.timeout)?;
        if let Some(runtime) = &self.runtime {
            effective.policy.choose_runtime(runtime)?;
        }
        if let Some(task) = &self.task {
            check_task(task)?;
        }
        let model = match &definition {
            Some(def) if def.wants_model() => {
                Some(self.model_access(&def.name, &mut effective.policy, env)?)
            }
            _ => {
                self.no_model_flags()?;
                None
            }
        };
        // The person's task replaces the definition's instructions (and reaches an image too).
        let (image, command, instructions) = match &definition {
            Some(def) => (
                (!def.is_builtin_image()).then(|| def.image.clone()),
                def.command.clone(),
                Some(def.instructions.clone()).filter(|t| !t.is_empty()),
            ),
            None => (self.image.clone(), self.command.clone(), None),
        };
        Ok(RunOptions {
            policy: effective.policy,
            sources: Vec::new(),
            image,
            command,
            instructions: self.task.clone().or(instructions),
            keep: self.keep,
            allow_network: self.allow_network,
            repo: place.repo.clone(),
            intake: IntakeLimits::default(),
            model,
        })
    }

    /// `--model`, `--model-budget` and `--batch-model-budget` mean nothing to a worker without
    /// model access: refused,
    /// so a person never believes a budget holds a worker that cannot spend one anyway.
    fn no_model_flags(&self) -> Result<(), SpecError> {
        let flag = match (&self.model, self.model_budget, self.batch_model_budget) {
            (Some(_), _, _) => "--model",
            (None, Some(_), _) => "--model-budget",
            (None, None, Some(_)) => "--batch-model-budget",
            (None, None, None) => return Ok(()),
        };
        let worker = match &self.image {
            Some(image) => format!("image {image}"),
            None => self.worker.as_deref().unwrap_or(DEFAULT_WORKER).to_string(),
        };
        Err(SpecError::ModelFlagWithoutModel { flag, worker })
    }

    /// The gateway access for a model worker: the flags narrow the level's `model:` section
    /// (budget down, allowlist to the one `--model`), then the host's upstream is resolved.
    fn model_access(
        &self,
        worker: &str,
        policy: &mut Policy,
        env: HostEnv<'_>,
    ) -> Result<ModelAccess, SpecError> {
        let level = policy.level;
        let no_model = |why: &str| SpecError::NoModelAtLevel {
            worker: worker.to_string(),
            level,
            why: why.to_string(),
        };
        if let Some(tokens) = self.model_budget {
            narrow_model_budget(policy, tokens)?;
        }
        if !policy.model.grants_access() {
            return Err(no_model(""));
        }
        let upstream = host_upstream(env)?.ok_or_else(|| SpecError::NoUpstream {
            worker: worker.to_string(),
            config: gateway::host_config_path(env).map_or_else(
                || "$XDG_CONFIG_HOME/golem-orch/model.yaml".into(),
                |p| p.display().to_string(),
            ),
        })?;
        let allowed = gateway::resolve_allowlist(&policy.model, &upstream);
        if allowed.is_empty() {
            return Err(no_model("; `host` there needs GOLEM_MODEL to name a model"));
        }
        if let Some(name) = &self.model {
            // The entry that names it: itself, or `host` when it is the host's model.
            let entry = policy.model.allow.iter().find(|e| {
                *e == name
                    || (*e == policy::HOST_MODEL
                        && upstream.default_model.as_deref() == Some(name.as_str()))
            });
            let Some(entry) = entry.filter(|_| allowed.contains(name)).cloned() else {
                return Err(SpecError::ModelNotAllowed {
                    model: name.clone(),
                    level: policy.level,
                    allowed: allowed.join(", "),
                });
            };
            let only = Narrowing {
                model: Some(ModelNarrowing {
                    allow: Some(vec![entry]),
                    ..ModelNarrowing::default()
                }),
                ..Narrowing::default()
            };
            policy.narrow(&only, Origin::Flags)?;
        }
        Ok(ModelAccess {
            upstream: Arc::new(upstream),
            model: self.model.clone(),
            batch_budget: None,
        })
    }

    /// Download caps, the lowered input cap (never raised) and the private-address opt-in.
    fn limit_intake(&self, opts: &mut RunOptions) -> Result<(), SpecError> {
        let defaults = IntakeLimits::default();
        opts.intake = IntakeLimits {
            max_download_bytes: self
                .max_download
                .map_or(defaults.max_download_bytes, Size::bytes),
            download_timeout: self
                .download_timeout
                .map_or(defaults.download_timeout, Limit::duration),
            ..defaults
        };
        policy::narrow_input(&mut opts.policy, self.max_input)?;
        opts.intake.max_total_bytes = opts.policy.input.max_total_bytes.bytes();
        opts.intake.allow_private = self.allow_private_urls;
        opts.intake.strict = self.strict;
        Ok(())
    }
}

/// How many inputs golem-worker's `report` and `text` process in one session: their
/// `--max-inputs` default. The rest are listed in the worker's index as not processed, and the
/// worker exits 1; `run` says how many and points to `batch`, which runs one container per file.
pub const WORKER_MAX_INPUTS: usize = 100;

/// The most inputs the worker `opts` runs processes in one session, where golem-orch knows it
/// from its own definition rather than from the worker's output: golem-worker's `report` and
/// `text`, with their `--max-inputs` (default [`WORKER_MAX_INPUTS`]). `None` for a person's
/// image or any other command.
pub fn max_inputs(opts: &RunOptions) -> Option<usize> {
    if opts.image.is_some() {
        return None;
    }
    let command = if opts.command.is_empty() {
        session::default_command()
    } else {
        opts.command.clone()
    };
    if !matches!(command.first().map(String::as_str), Some("report" | "text")) {
        return None;
    }
    match command.iter().position(|a| a == "--max-inputs") {
        Some(i) => command.get(i + 1).and_then(|n| n.parse().ok()),
        None => Some(WORKER_MAX_INPUTS),
    }
}

/// What `run --dry-run` shows: the inputs as described and the exact container plan.
#[derive(Debug, Clone, Serialize)]
pub struct Preview {
    /// Each input, as the session would record it.
    pub inputs: Vec<String>,
    /// The container that would be created.
    pub plan: ContainerPlan,
}

/// The session id a dry run's paths are resolved under (nothing is created there).
const DRY_RUN_SESSION: &str = "00000000000000000000000000000000";
/// The session name a dry run's plan and labels carry.
const DRY_RUN_NAME: &str = "(new session)";

/// The plan for `opts` without creating anything: no session, no download, no engine call.
pub fn preview(home: &Home, opts: &RunOptions) -> Result<Preview, SpecError> {
    let mut paths = session::host_paths(
        home,
        DRY_RUN_SESSION,
        &opts.policy,
        opts.repo.clone(),
        false,
    )?;
    if opts.instructions.is_some() {
        paths.task = Some(home.session_dir(DRY_RUN_SESSION).join("task"));
    }
    let plan = session::session_plan(
        home,
        DRY_RUN_NAME,
        opts,
        &paths,
        &unresolved_command(opts),
        &Owner::current(),
    )?;
    Ok(Preview {
        inputs: opts.sources.iter().map(intake::describe).collect(),
        plan,
    })
}

/// What the worker runs, as far as it is known without the engine: golem-worker's command is
/// exactly what [`session::resolve_images`] makes of it; a person's image is not inspected.
pub fn unresolved_command(opts: &RunOptions) -> plan::Command {
    match &opts.image {
        None => Worker {
            image: image::worker_tag(),
            image_id: String::new(),
            entrypoint: vec![image::WORKER_ENTRYPOINT.to_string()],
            cmd: if opts.command.is_empty() {
                session::default_command()
            } else {
                opts.command.clone()
            },
        }
        .plan_command(),
        Some(reference) => plan::Command {
            image: reference.clone(),
            image_id: None,
            entrypoint: None,
            cmd: opts.command.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A project directory with a `golem.yaml` and optional worker definitions.
    fn project(yaml: &str, workers: &[(&str, &str)]) -> (tempfile::TempDir, Place) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("golem.yaml");
        std::fs::write(&file, yaml).unwrap();
        std::fs::create_dir(dir.path().join("workers")).unwrap();
        for (name, text) in workers {
            std::fs::write(dir.path().join("workers").join(name), text).unwrap();
        }
        let place = Place {
            project_file: Some(file),
            ..Place::default()
        };
        (dir, place)
    }

    fn worker_file(name: &str, trust: &str) -> String {
        format!(
            "---\nname: {name}\ndescription: d\nimage: golem-worker\ntrust: {trust}\n---\nDo it.\n"
        )
    }

    #[test]
    fn trust_comes_only_from_the_flags() {
        let (_d, place) = project("levels: {}\n", &[]);
        let opts = RunSpec::new(TrustLevel::Untrusted).resolve(&place).unwrap();
        assert_eq!(opts.policy.level, TrustLevel::Untrusted);
        let opts = RunSpec::new(TrustLevel::Session).resolve(&place).unwrap();
        assert_eq!(opts.policy.level, TrustLevel::Session);
    }

    #[test]
    fn a_worker_definition_cannot_raise_the_level() {
        let (_d, place) = project("levels: {}\n", &[("w.worker", &worker_file("w", "full"))]);
        let spec = RunSpec {
            worker: Some("w".into()),
            ..RunSpec::new(TrustLevel::Untrusted)
        };
        let err = spec.resolve(&place).unwrap_err();
        assert!(
            err.to_string()
                .contains("needs trust level full but the run is untrusted"),
            "{err}"
        );
        // Given the level by the person, the same definition runs at it.
        let spec = RunSpec {
            trust_level: TrustLevel::Full,
            ..spec
        };
        let opts = spec.resolve(&place).unwrap();
        assert_eq!(opts.policy.level, TrustLevel::Full);
        assert_eq!(opts.instructions.as_deref(), Some("Do it."));
    }

    #[test]
    fn a_project_file_cannot_widen() {
        let (_d, place) = project(
            "levels:\n  untrusted:\n    resources:\n      memory: 64g\n",
            &[],
        );
        let err = RunSpec::new(TrustLevel::Untrusted)
            .resolve(&place)
            .unwrap_err();
        assert!(matches!(err, SpecError::Policy(_)), "{err}");
        let (_d, place) = project("levels:\n  untrusted:\n    mounts:\n      repo: ro\n", &[]);
        assert!(RunSpec::new(TrustLevel::Untrusted).resolve(&place).is_err());
    }

    #[test]
    fn flags_only_lower_limits() {
        let place = Place::default();
        let base = RunSpec::new(TrustLevel::Untrusted).resolve(&place).unwrap();
        let lower = RunSpec {
            memory: Some(Size(64 << 20)),
            max_input: Some(Size(1 << 20)),
            ..RunSpec::new(TrustLevel::Untrusted)
        };
        let opts = lower.resolve(&place).unwrap();
        assert_eq!(opts.policy.resources.memory, Size(64 << 20));
        assert_eq!(opts.intake.max_total_bytes, 1 << 20);
        for widen in [
            RunSpec {
                memory: Some(Size(base.policy.resources.memory.bytes() + 1)),
                ..RunSpec::new(TrustLevel::Untrusted)
            },
            RunSpec {
                max_input: Some(Size(base.policy.input.max_total_bytes.bytes() + 1)),
                ..RunSpec::new(TrustLevel::Untrusted)
            },
        ] {
            assert!(matches!(widen.resolve(&place), Err(SpecError::Policy(_))));
        }
    }

    #[test]
    fn arguments_need_an_image_and_golem_worker_needs_inputs() {
        let place = Place::default();
        let spec = RunSpec {
            command: vec!["sh".into()],
            ..RunSpec::new(TrustLevel::Untrusted)
        };
        assert!(matches!(
            spec.resolve(&place),
            Err(SpecError::CommandWithoutImage)
        ));
        let spec = RunSpec::new(TrustLevel::Untrusted);
        assert!(matches!(
            spec.resolve_with_inputs(&place, &[]),
            Err(SpecError::NothingToProcess)
        ));
        let spec = RunSpec {
            image: Some("mine:1".into()),
            command: vec!["go".into()],
            ..RunSpec::new(TrustLevel::Untrusted)
        };
        let opts = spec.resolve_with_inputs(&place, &[]).unwrap();
        assert_eq!(
            (opts.image.as_deref(), opts.command.as_slice()),
            (Some("mine:1"), ["go".to_string()].as_slice())
        );
    }

    #[test]
    fn the_dry_run_plan_is_the_plan_a_session_builds() {
        let state = tempfile::tempdir().unwrap();
        let home = Home::peek(Some(state.path()));
        let place = Place::default();
        for spec in [
            RunSpec::new(TrustLevel::Untrusted),
            RunSpec {
                worker: Some("text".into()),
                memory: Some(Size(32 << 20)),
                ..RunSpec::new(TrustLevel::Session)
            },
        ] {
            let opts = spec.resolve(&place).unwrap();
            let shown = preview(&home, &opts).unwrap();
            // What a session resolves golem-worker to, before the engine names its content id.
            let worker = Worker {
                image: image::worker_tag(),
                image_id: String::new(),
                entrypoint: vec![image::WORKER_ENTRYPOINT.to_string()],
                cmd: if opts.command.is_empty() {
                    session::default_command()
                } else {
                    opts.command.clone()
                },
            };
            let mut paths =
                session::host_paths(&home, DRY_RUN_SESSION, &opts.policy, None, false).unwrap();
            if opts.instructions.is_some() {
                paths.task = Some(home.session_dir(DRY_RUN_SESSION).join("task"));
            }
            let built = session::session_plan(
                &home,
                DRY_RUN_NAME,
                &opts,
                &paths,
                &worker.plan_command(),
                &Owner::current(),
            )
            .unwrap();
            // The init's mount point is drawn afresh for every plan, so no worker can expect it.
            assert_ne!(shown.plan.init.target, built.init.target);
            let built = ContainerPlan {
                init: plan::BindMount {
                    target: shown.plan.init.target.clone(),
                    ..built.init
                },
                ..built
            };
            assert_eq!(shown.plan, built);
            assert_eq!(shown.plan.image, image::worker_tag());
        }
    }

    #[test]
    fn old_batch_settings_load_as_a_spec() {
        let old = r#"{"trust_level":"session","worker":"text","image":null,"command":[],
            "memory":"64MiB","timeout":"30s","allow_private_urls":true,"max_input":"1MiB"}"#;
        let spec: RunSpec = serde_json::from_str(old).unwrap();
        assert_eq!(spec.trust_level, TrustLevel::Session);
        assert_eq!(spec.memory, Some(Size(64 << 20)));
        assert_eq!(spec.max_input, Some(Size(1 << 20)));
        assert!(spec.allow_private_urls && !spec.keep && !spec.allow_network);
        // A spec written now reads back the same, without fields a batch never sets.
        let text = serde_json::to_string(&spec).unwrap();
        assert!(
            !text.contains("keep") && !text.contains("max_download"),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<RunSpec>(&text).unwrap(), spec);
    }

    /// A host environment as a lookup: the process's own is never read or changed by tests.
    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    /// A local OpenAI-compatible server, as the README's example configures it.
    const LOCAL: [(&str, &str); 4] = [
        ("GOLEM_MODEL_API", "openai"),
        ("GOLEM_MODEL_BASE_URL", "http://127.0.0.1:11434"),
        ("GOLEM_MODEL_KEY", "sk-host-only-secret"),
        ("GOLEM_MODEL", "llama3.1"),
    ];

    fn agent(spec: RunSpec) -> RunSpec {
        RunSpec {
            worker: Some("agent".into()),
            ..spec
        }
    }

    fn resolve(spec: &RunSpec, env: &[(&str, &str)]) -> Result<RunOptions, SpecError> {
        spec.resolve_in(&Place::default(), None, &env_of(env))
    }

    #[test]
    fn a_model_worker_gets_the_hosts_upstream_and_others_get_none() {
        let opts = resolve(&agent(RunSpec::new(TrustLevel::Untrusted)), &LOCAL).unwrap();
        let access = opts.model.expect("the agent asks for the model");
        assert_eq!(access.upstream.api, gateway::ModelApi::Openai);
        assert_eq!(access.upstream.default_model.as_deref(), Some("llama3.1"));
        assert_eq!(access.model, None);
        assert_eq!(opts.command, ["agent"]);
        // The report worker never gets a gateway, whatever the host configures.
        assert!(resolve(&RunSpec::new(TrustLevel::Untrusted), &LOCAL)
            .unwrap()
            .model
            .is_none());
    }

    #[test]
    fn no_upstream_on_the_host_is_one_line_naming_what_to_set() {
        let env = [("XDG_CONFIG_HOME", "/nonexistent-golem-test")];
        let err = resolve(&agent(RunSpec::new(TrustLevel::Untrusted)), &env)
            .unwrap_err()
            .to_string();
        for name in [
            "GOLEM_MODEL_API",
            "GOLEM_MODEL_BASE_URL",
            "GOLEM_MODEL_KEY",
            "/nonexistent-golem-test/golem-orch/model.yaml",
            "agent",
        ] {
            assert!(err.contains(name), "{name}: {err}");
        }
        assert!(!err.contains('\n'), "{err}");
        // A half-configured host is an error too, and never echoes the key.
        let half = [("GOLEM_MODEL_API", "openai"), ("GOLEM_MODEL_KEY", "a b")];
        let err = resolve(&agent(RunSpec::new(TrustLevel::Untrusted)), &half).unwrap_err();
        assert!(matches!(err, SpecError::Upstream(_)), "{err}");
        assert!(!err.to_string().contains("a b"), "{err}");
    }

    #[test]
    fn a_level_without_models_refuses_a_model_worker_in_one_line() {
        let (_d, place) = project("levels:\n  untrusted:\n    model:\n      allow: []\n", &[]);
        let spec = agent(RunSpec::new(TrustLevel::Untrusted));
        let err = spec
            .resolve_in(&place, None, &env_of(&LOCAL))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("untrusted level allows none") && err.contains("model.allow"),
            "{err}"
        );
        // `host` with no GOLEM_MODEL names nothing either, and says so.
        let err = resolve(&spec, &LOCAL[..3]).unwrap_err().to_string();
        assert!(err.contains("GOLEM_MODEL to name a model"), "{err}");
    }

    #[test]
    fn model_picks_one_model_within_the_allowlist() {
        let spec = agent(RunSpec {
            model: Some("llama3.1".into()),
            ..RunSpec::new(TrustLevel::Untrusted)
        });
        let opts = resolve(&spec, &LOCAL).unwrap();
        assert_eq!(opts.policy.model.allow, [policy::HOST_MODEL]);
        assert_eq!(
            opts.model.and_then(|m| m.model).as_deref(),
            Some("llama3.1")
        );
        for other in ["gpt-4o", "host", "a b"] {
            let spec = RunSpec {
                model: Some(other.into()),
                ..spec.clone()
            };
            let err = resolve(&spec, &LOCAL).unwrap_err();
            assert!(matches!(err, SpecError::ModelNotAllowed { .. }), "{err}");
            assert!(err.to_string().contains("allowed here: llama3.1"), "{err}");
        }
    }

    #[test]
    fn model_flags_need_a_model_worker() {
        for spec in [
            RunSpec {
                model: Some("llama3.1".into()),
                ..RunSpec::new(TrustLevel::Untrusted)
            },
            RunSpec {
                model_budget: Some(10),
                worker: Some("text".into()),
                ..RunSpec::new(TrustLevel::Untrusted)
            },
            RunSpec {
                model: Some("llama3.1".into()),
                image: Some("mine:1".into()),
                ..RunSpec::new(TrustLevel::Untrusted)
            },
        ] {
            let err = resolve(&spec, &LOCAL).unwrap_err();
            assert!(
                matches!(err, SpecError::ModelFlagWithoutModel { .. })
                    && err.to_string().contains("--worker agent"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_batch_model_budget_needs_a_model_worker_and_is_kept_in_the_spec() {
        let spec = RunSpec {
            batch_model_budget: Some(5000),
            ..RunSpec::new(TrustLevel::Untrusted)
        };
        let err = resolve(&spec, &LOCAL).unwrap_err();
        assert!(
            matches!(
                err,
                SpecError::ModelFlagWithoutModel {
                    flag: "--batch-model-budget",
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(err.to_string().lines().count(), 1, "{err}");
        // For an AI worker it resolves; the batch gives each session the shared budget.
        let opts = resolve(&agent(spec.clone()), &LOCAL).unwrap();
        assert!(opts.model.is_some_and(|m| m.batch_budget.is_none()));
        let v = serde_json::to_value(&spec).unwrap();
        assert_eq!(v["batch_model_budget"], 5000);
        let back: RunSpec = serde_json::from_value(v).unwrap();
        assert_eq!(back, spec);
        // Specs without it (every run, and batches recorded before it) say nothing.
        let plain = serde_json::to_value(RunSpec::new(TrustLevel::Untrusted)).unwrap();
        assert!(plain.get("batch_model_budget").is_none(), "{plain}");
    }

    #[test]
    fn model_budget_lowers_both_token_budgets_and_never_raises() {
        let base = resolve(&agent(RunSpec::new(TrustLevel::Untrusted)), &LOCAL).unwrap();
        let budget = |tokens| {
            let spec = agent(RunSpec {
                model_budget: Some(tokens),
                ..RunSpec::new(TrustLevel::Untrusted)
            });
            resolve(&spec, &LOCAL).map(|o| o.policy.model)
        };
        let m = budget(500).unwrap();
        assert_eq!((m.max_input_tokens, m.max_output_tokens), (500, 500));
        // Above one budget and below the other: each goes to at most TOKENS.
        let (input, output) = (
            base.policy.model.max_input_tokens,
            base.policy.model.max_output_tokens,
        );
        assert!(output < input);
        let m = budget(output + 1).unwrap();
        assert_eq!(
            (m.max_input_tokens, m.max_output_tokens),
            (output + 1, output)
        );
        let m = budget(u64::MAX).unwrap();
        assert_eq!(m, base.policy.model);
        assert!(matches!(budget(0), Err(SpecError::Task(_))));
    }

    #[test]
    fn a_task_replaces_the_instructions_and_is_checked() {
        let spec = agent(RunSpec {
            task: Some("Summarise each document in three bullet points".into()),
            ..RunSpec::new(TrustLevel::Untrusted)
        });
        let opts = resolve(&spec, &LOCAL).unwrap();
        assert_eq!(
            opts.instructions.as_deref(),
            Some("Summarise each document in three bullet points")
        );
        let image = RunSpec {
            image: Some("mine:1".into()),
            task: Some("Do it.\n\tCarefully.".into()),
            ..RunSpec::new(TrustLevel::Untrusted)
        };
        assert!(resolve(&image, &[]).unwrap().instructions.is_some());
        for bad in [
            String::new(),
            " \n".into(),
            "a\x1b]52;c;aGk=\x07".into(),
            "read \u{202e}fdp.exe".into(),
            "a\rb".into(),
            "x".repeat(MAX_TASK_BYTES + 1),
        ] {
            let spec = RunSpec {
                task: Some(bad.clone()),
                ..spec.clone()
            };
            let err = resolve(&spec, &LOCAL).unwrap_err();
            assert!(matches!(err, SpecError::Task(_)), "{bad:?}: {err}");
            assert!(!err.to_string().contains('\x1b'), "{err}");
        }
    }

    #[test]
    fn a_task_file_is_read_on_the_host_with_the_same_checks() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("task.md");
        std::fs::write(&file, "Write summary.md.\n").unwrap();
        assert_eq!(read_task_file(&file).unwrap(), "Write summary.md.\n");
        let link = dir.path().join("link.md");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let cases = [
            (link, None),
            (dir.path().to_path_buf(), None),
            (dir.path().join("latin1.md"), Some(b"caf\xe9".to_vec())),
            (
                dir.path().join("big.md"),
                Some(vec![b'a'; MAX_TASK_BYTES + 1]),
            ),
            (dir.path().join("esc.md"), Some(b"a\x1b[8mb".to_vec())),
            (dir.path().join("missing.md"), None),
        ];
        for (path, content) in cases {
            if let Some(bytes) = content {
                std::fs::write(&path, bytes).unwrap();
            }
            let err = read_task_file(&path).unwrap_err();
            assert!(
                matches!(err, SpecError::Task(_)),
                "{}: {err}",
                path.display()
            );
        }
    }

    #[test]
    fn a_spec_with_model_settings_round_trips_without_any_key() {
        let spec = agent(RunSpec {
            task: Some("t".into()),
            model: Some("llama3.1".into()),
            model_budget: Some(1000),
            ..RunSpec::new(TrustLevel::Untrusted)
        });
        let text = serde_json::to_string(&spec).unwrap();
        assert_eq!(serde_json::from_str::<RunSpec>(&text).unwrap(), spec);
        // The upstream is resolved from the host on every run and resume, never recorded.
        assert!(
            !text.contains("sk-") && !text.contains("base_url"),
            "{text}"
        );
    }
}
