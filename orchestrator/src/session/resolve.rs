//! What a session needs resolved before it starts: the worker's image and command, the host
//! paths the plan mounts (created and opened to the worker's uid), the labels that let `gc` find
//! its objects, and the repository with the state directories inside it to hide.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{io, RunOptions, SessionError};
use crate::engine::{Engine, LABEL_HOME, LABEL_MANAGED, LABEL_OWNER, LABEL_SESSION, LABEL_TOKEN};
use crate::home::{self, Home};
use crate::image;
use crate::owner::Owner;
use crate::plan::{self, HostPaths};
use crate::policy::Policy;
use crate::workspace;

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
/// directories) when the level mounts it and `create` is set (a dry run creates nothing).
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
        model: None,
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

/// The container plan of session `id`: the one function both a session and `--dry-run` (through
/// `spec`) build their plan with, so what a dry run shows is what a session creates.
pub fn session_plan(
    home: &Home,
    id: &str,
    opts: &RunOptions,
    paths: &HostPaths,
    command: &plan::Command,
    owner: &Owner,
) -> Result<plan::ContainerPlan, plan::PlanError> {
    super::model::effective_policy(opts)?;
    let mut paths = paths.clone();
    if paths.model.is_none() {
        // A dry run: the session sets its own socket and key before it plans.
        paths.model = super::model::preview_mount(opts, &paths);
    }
    plan::build(
        id,
        &opts.policy,
        &paths,
        command,
        labels(home, id, owner),
        opts.allow_network,
    )
}
