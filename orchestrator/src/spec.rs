//! What a person asked to run, resolved into a session's options and its dry-run plan.
//!
//! The security rules about *what* runs live here rather than at the command line so that the
//! library can test them: the trust level comes only from the person's own flags (a worker
//! definition or a project file that a cloned repository ships can narrow it, never raise it);
//! flags only lower limits; and `--dry-run` shows the plan built by the same code a session
//! uses. `batch` keeps a [`RunSpec`] in its record, so `--resume` resolves exactly what the
//! first run resolved without turning it back into command-line arguments.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::home::Home;
use crate::intake::{self, IntakeError, IntakeLimits};
use crate::owner::Owner;
use crate::plan::{self, ContainerPlan, PlanError};
use crate::policy::{self, PolicyError, TrustLevel};
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
        }
    }
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
}

impl From<PolicyError> for SpecError {
    fn from(e: PolicyError) -> SpecError {
        SpecError::Policy(Box::new(e))
    }
}

impl RunSpec {
    /// The session options for a batch: everything but the inputs, which each document sets.
    pub fn resolve(&self, place: &Place) -> Result<RunOptions, SpecError> {
        let mut opts = self.base(place)?;
        self.limit_intake(&mut opts)?;
        Ok(opts)
    }

    /// The session options for a run of `inputs`; a worker image of its own may run without any.
    pub fn resolve_with_inputs(
        &self,
        place: &Place,
        inputs: &[String],
    ) -> Result<RunOptions, SpecError> {
        let mut opts = self.base(place)?;
        if inputs.is_empty() && opts.image.is_none() {
            return Err(SpecError::NothingToProcess);
        }
        opts.sources = intake::classify(inputs)?;
        self.limit_intake(&mut opts)?;
        Ok(opts)
    }

    /// The effective policy (level, project file, worker definition, flags) and what to run.
    fn base(&self, place: &Place) -> Result<RunOptions, SpecError> {
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
            instructions,
            keep: self.keep,
            allow_network: self.allow_network,
            repo: place.repo.clone(),
            intake: IntakeLimits::default(),
            // Model access is resolved with the host's upstream when the worker asks for it.
            model: None,
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
        Ok(())
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
}
