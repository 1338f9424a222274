//! The container plan: exactly what one session's container gets, derived only from the policy.
//!
//! The plan is plain data, built before anything touches the engine, so `run --dry-run` can show
//! it, the audit log can record it, and unit tests can check every hardening flag without Docker.
//! `container` turns it into Engine API bodies and nothing else decides a flag.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use golem_protocol::init;
use serde::Serialize;

use crate::policy::{Access, NetworkMode, Policy, TrustLevel};
use crate::worker_uid::SessionUser;
use crate::workspace::Overlay;

/// Where the inputs appear in the container.
pub const INPUT_TARGET: &str = "/input";
/// Where the worker writes: a size- and inode-capped tmpfs, streamed out by the init as a tar.
pub const OUTPUT_TARGET: &str = "/output";
/// Where golem-worker's static binary is bind-mounted read-only to run as the container's init:
/// this prefix and 32 random hex digits, new for every plan. runc resolves a mount's target
/// through the image's own symlinks, so at a fixed path an image could plant a symlink that
/// lands the init where a later mount hides it and runs its own program as PID 1 instead; an
/// image cannot plant a symlink at a name nobody knows yet.
pub const INIT_TARGET_PREFIX: &str = "/.golem-init-";
/// golem-worker init's exit code when its own deadline passed; it then writes no archive. The
/// contract's value ([`golem_protocol::init::EXIT_DEADLINE`]) in the type the engine reports exit
/// codes in.
pub const INIT_EXIT_DEADLINE: i64 = init::EXIT_DEADLINE as i64;
/// Where the project's persistent scratch space appears.
pub const WORKSPACE_TARGET: &str = "/workspace";
/// Where the project's git repository appears.
pub const REPO_TARGET: &str = "/repo";

/// A host directory bind-mounted into the container.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BindMount {
    /// Absolute, canonical host path.
    pub source: PathBuf,
    /// Path in the container.
    pub target: String,
    /// Whether writes are refused by the kernel.
    pub read_only: bool,
}

/// The project's workspace, mounted through an overlay volume so that it is `nosuid,nodev`
/// (see `workspace`): a plain bind mount cannot carry those flags on Docker 20.10.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkspaceMount {
    /// Path in the container.
    pub target: String,
    /// Whether writes are refused by the kernel.
    pub read_only: bool,
    /// The volume and its directories on the host.
    pub overlay: Overlay,
}

/// The output directory: a tmpfs whose size and inode count are the kernel's own caps on output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Output {
    /// Path in the container.
    pub target: String,
    /// tmpfs `size=` in bytes.
    pub size_bytes: u64,
    /// tmpfs `nr_inodes=`: files and directories together. `None` where the engine cannot set
    /// it (Podman); the extractor's exact file count is then the only count cap.
    pub max_inodes: Option<u64>,
    /// Owner of the tmpfs root, the worker's user.
    pub uid: u32,
    /// Group of the tmpfs root.
    pub gid: u32,
    /// The engine gives the tmpfs root to the container's user itself (Podman's `U` option)
    /// instead of taking `uid=`/`gid=` options, which Podman refuses.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub owner_by_engine: bool,
}

impl Output {
    /// The tmpfs mount options.
    pub fn mount_options(&self) -> String {
        let inodes = self
            .max_inodes
            .map(|n| format!(",nr_inodes={n}"))
            .unwrap_or_default();
        let owner = if self.owner_by_engine {
            "U".to_string()
        } else {
            format!("uid={},gid={}", self.uid, self.gid)
        };
        format!(
            "rw,noexec,nosuid,nodev,size={}{inodes},{owner},mode=0700",
            self.size_bytes
        )
    }
}

/// The engine's pids limit for a policy. Under gVisor (`runsc`) the container's pids cgroup also
/// holds the sandbox's own threads and processes (its Go runtime, the gofer, one ptrace stub per
/// worker task), about 60 on two cores, so the policy's number alone stops the sandbox before
/// the worker's first thread ("error initializing first thread"). Those are added, so that the
/// worker keeps the budget its policy gives it; the kernel still caps the whole sandbox.
pub fn pids_limit(policy: &Policy) -> i64 {
    let pids = i64::try_from(policy.resources.pids).unwrap_or(i64::MAX);
    if policy.runtime.as_deref() != Some(RUNSC) {
        return pids;
    }
    let cpus = std::thread::available_parallelism().map_or(8, |n| n.get());
    let overhead = 128 + 8 * i64::try_from(cpus).unwrap_or(1024);
    pids.saturating_add(overhead)
}

/// `/dev/shm` size: a worker has no use for shared memory beyond a token amount.
pub const SHM_BYTES: i64 = 1 << 20;
/// Open files per process (`RLIMIT_NOFILE`, soft and hard).
pub const NOFILE: i64 = 1024;
/// OOM score adjustment: under host memory pressure the untrusted worker is killed first.
pub const OOM_SCORE_ADJ: i64 = 1000;

/// The resource limits a container gets: open files, no core dumps, and `nproc` when the plan
/// sets it (see [`ContainerPlan::nproc`]); `(soft, hard)` by name.
pub fn ulimits(plan: &ContainerPlan) -> BTreeMap<String, (i64, i64)> {
    let mut limits = BTreeMap::from([
        ("nofile".to_string(), (NOFILE, NOFILE)),
        ("core".to_string(), (0, 0)),
    ]);
    if let Some(n) = plan.nproc {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        limits.insert("nproc".to_string(), (n, n));
    }
    limits
}

/// gVisor's runtime name.
pub const RUNSC: &str = "runsc";

/// Everything about one session's worker container.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContainerPlan {
    /// Session id (also in the labels).
    pub session: String,
    /// Trust level the plan was derived from.
    pub trust_level: TrustLevel,
    /// Image reference.
    pub image: String,
    /// The image's content id when it has been resolved: the container is created from this,
    /// so retagging the reference between the check and the create changes nothing.
    pub image_id: Option<String>,
    /// The image's own entrypoint, kept as `docker run` keeps it; `None` only in a dry run with
    /// a person's image, whose configuration is not read without the engine.
    pub image_entrypoint: Option<Vec<String>>,
    /// Arguments after the entrypoint (the person's, else the image's default command).
    pub cmd: Vec<String>,
    /// golem-worker's static binary, run as the container's init: it runs the worker, kills
    /// whatever the worker left running, and streams the output directory as a tar.
    pub init: BindMount,
    /// Numeric `uid:gid`: the session's own (see `worker_uid`), or a `--policy-dir`'s fixed
    /// one; `per-session` only in a dry run, where nothing is allocated (the engine refuses it).
    pub user: String,
    /// The complete environment; nothing from the host is added later.
    pub env: BTreeMap<String, String>,
    /// Host directories.
    pub binds: Vec<BindMount>,
    /// The project's workspace (`nosuid,nodev`), from the `session` level up.
    pub workspace: Option<WorkspaceMount>,
    /// The output location.
    pub output: Output,
    /// Docker network mode.
    pub network: NetworkMode,
    /// Root filesystem is read-only.
    pub read_only_rootfs: bool,
    /// Capabilities dropped (`ALL`).
    pub cap_drop: Vec<String>,
    /// Security options (`no-new-privileges`).
    pub security_opt: Vec<String>,
    /// tmpfs mounts and their options.
    pub tmpfs: BTreeMap<String, String>,
    /// Paths hidden behind an empty read-only tmpfs (every golem-orch state directory inside `/repo`).
    pub masks: Vec<String>,
    /// Memory limit in bytes; swap is set equal so there is none.
    pub memory_bytes: u64,
    /// CPU limit in billionths of a core.
    pub nano_cpus: i64,
    /// Process/thread limit.
    pub pids_limit: i64,
    /// Wall-clock limit in seconds.
    pub timeout_secs: u64,
    /// OCI runtime, when the policy names one.
    pub runtime: Option<String>,
    /// `RLIMIT_NPROC` for the worker's user, when the engine would otherwise set one it cannot
    /// (Podman raises it past a nested host's hard limit and fails to start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nproc: Option<u64>,
    /// Labels that tie the container to its session, state directory and owning process.
    pub labels: BTreeMap<String, String>,
}

/// Host paths the plan needs, resolved by the caller.
#[derive(Debug, Clone)]
pub struct HostPaths {
    /// The session's input directory.
    pub input: PathBuf,
    /// The project's `.golem/workspace/`.
    pub workspace: PathBuf,
    /// The project's git repository, when there is one.
    pub repo: Option<PathBuf>,
    /// The state directory (`.golem`), hidden from the container when it lies inside the repository.
    pub state: PathBuf,
    /// A directory holding the worker definition's `instructions.md`, mounted read-only at `/task`.
    pub task: Option<PathBuf>,
    /// The static golem-worker binary on the host, bind-mounted read-only as the init.
    pub init: PathBuf,
    /// The session's own identity; `None` in a dry run (nothing allocated yet).
    pub user: Option<SessionUser>,
    /// Other golem-orch state directories found inside the repository (`home::STATE_MARKER`),
    /// hidden like the current one.
    pub other_states: Vec<PathBuf>,
    /// The model gateway's socket and the fake key, only for a worker with model access.
    pub model: Option<ModelMount>,
}

/// What a worker with model access gets: its session's gateway socket (the file alone is
/// bind-mounted, never its directory, so nothing else of the host comes with it) and a fake key
/// where SDKs look for the real one. The only environment not taken from the policy's `env`.
#[derive(Clone)]
pub struct ModelMount {
    /// The socket on the host, `sessions/<id>/model/model.sock`.
    pub socket: PathBuf,
    /// The variable the provider's SDKs read their key from (`ANTHROPIC_API_KEY`, ...).
    pub key_env: String,
    /// The session's honeytoken: a worker that sends it anywhere is caught.
    pub honeytoken: String,
}

impl fmt::Debug for ModelMount {
    /// Leaves the honeytoken out: it is looked for in the session's logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelMount")
            .field("socket", &self.socket)
            .field("key_env", &self.key_env)
            .finish_non_exhaustive()
    }
}

/// What the worker should run.
#[derive(Debug, Clone)]
pub struct Command {
    /// Image reference.
    pub image: String,
    /// The image's content id (`None`: not resolved, in a dry run).
    pub image_id: Option<String>,
    /// The image's entrypoint (`None`: not known, in a dry run with a person's image).
    pub entrypoint: Option<Vec<String>>,
    /// Arguments after it.
    pub cmd: Vec<String>,
}

/// Why a plan cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The level mounts the repository but none was found.
    #[error("the {0} trust level mounts the project's git repository, but no repository was found from the current directory")]
    NoRepo(TrustLevel),
    /// The repository lies inside the state directory, so hiding the state would hide the repository.
    #[error("the repository {0} is inside golem-orch's state directory; choose another --home")]
    RepoInsideState(PathBuf),
    /// A writable repo would let the worker replace a nested state directory.
    #[error("golem-orch's state directory {0} is nested inside the repository, which this level mounts writable; run from the repository root or use --home outside it")]
    StateNestedInRepo(PathBuf),
    /// Networking was requested where the policy forbids it.
    #[error("the {0} trust level does not allow a network (only full may opt in)")]
    NetworkForbidden(TrustLevel),
    /// Neither the image nor the person names a program to run.
    #[error("image {0:?} has no entrypoint or command; give one after --")]
    NoCommand(String),
    /// Model access was asked for but the level (or `--model`) cannot grant it.
    #[error("{0}")]
    Model(String),
}

/// Derives the plan. `allow_network` is the person's explicit opt-in, honoured only where the policy allows it.
pub fn build(
    session: &str,
    policy: &Policy,
    paths: &HostPaths,
    command: &Command,
    labels: BTreeMap<String, String>,
    allow_network: bool,
) -> Result<ContainerPlan, PlanError> {
    // Drawn here, like the init's target (see gateway::CONTAINER_SOCKET_PREFIX).
    let model = paths.model.as_ref().map(|m| {
        let target = format!(
            "{}{}.sock",
            crate::gateway::CONTAINER_SOCKET_PREFIX,
            uuid::Uuid::new_v4().simple()
        );
        (m, target)
    });
    let model = model.as_ref().map(|(m, t)| (*m, t.as_str()));
    let Mounts {
        binds,
        workspace,
        masks,
    } = mounts(policy, paths, model)?;
    let network = network(policy, allow_network)?;
    let (uid, gid, user) = identity(policy, paths);
    let tmp = format!(
        "rw,noexec,nosuid,nodev,size={}",
        policy.resources.tmp.bytes()
    );
    if command
        .entrypoint
        .as_ref()
        .is_some_and(|ep| ep.is_empty() && command.cmd.is_empty())
    {
        return Err(PlanError::NoCommand(command.image.clone()));
    }
    Ok(ContainerPlan {
        session: session.to_string(),
        trust_level: policy.level,
        image: command.image.clone(),
        image_id: command.image_id.clone(),
        image_entrypoint: command.entrypoint.clone(),
        cmd: command.cmd.clone(),
        init: BindMount {
            source: paths.init.clone(),
            target: format!("{INIT_TARGET_PREFIX}{}", uuid::Uuid::new_v4().simple()),
            read_only: true,
        },
        user,
        env: environment(policy, model),
        binds,
        workspace,
        output: Output {
            target: OUTPUT_TARGET.into(),
            size_bytes: policy.output.max_total_bytes.bytes(),
            // Directories take inodes too; extraction enforces the exact file count.
            max_inodes: Some(policy.output.max_files.saturating_mul(2).saturating_add(16)),
            uid,
            gid,
            owner_by_engine: false,
        },
        network,
        read_only_rootfs: true,
        cap_drop: vec!["ALL".into()],
        security_opt: vec!["no-new-privileges:true".into()],
        tmpfs: BTreeMap::from([("/tmp".to_string(), tmp)]),
        masks,
        memory_bytes: policy.resources.memory.bytes(),
        nano_cpus: (policy.resources.cpus * 1e9) as i64,
        pids_limit: pids_limit(policy),
        timeout_secs: policy.resources.timeout.duration().as_secs().max(1),
        runtime: policy.runtime.clone(),
        nproc: None,
        labels,
    })
}

/// What the container sees of the host: bind mounts, the workspace overlay, and the empty tmpfs
/// masks over golem-orch's state directories.
struct Mounts {
    binds: Vec<BindMount>,
    workspace: Option<WorkspaceMount>,
    masks: Vec<String>,
}

/// The mounts the policy's level grants: the input, the workspace, the task, then the repository.
fn mounts(
    policy: &Policy,
    paths: &HostPaths,
    model: Option<(&ModelMount, &str)>,
) -> Result<Mounts, PlanError> {
    let mut binds = Vec::new();
    if policy.mounts.input != Access::None {
        binds.push(BindMount {
            source: paths.input.clone(),
            target: INPUT_TARGET.into(),
            read_only: true,
        });
    }
    let workspace = (policy.mounts.workspace != Access::None).then(|| WorkspaceMount {
        target: WORKSPACE_TARGET.into(),
        read_only: policy.mounts.workspace == Access::Ro,
        overlay: Overlay::for_workspace(&paths.workspace),
    });
    if let Some(task) = &paths.task {
        binds.push(BindMount {
            source: task.clone(),
            target: crate::workers::INSTRUCTIONS_TARGET.into(),
            read_only: true,
        });
    }
    if let Some((model, target)) = model {
        // Writable: connecting to a Unix socket needs write permission on it. It is the socket
        // file alone; what a connection can do is what the gateway answers.
        binds.push(BindMount {
            source: model.socket.clone(),
            target: target.into(),
            read_only: false,
        });
    }
    let mut masks = Vec::new();
    if policy.mounts.repo != Access::None {
        let repo = paths.repo.clone().ok_or(PlanError::NoRepo(policy.level))?;
        masks = state_masks(policy, paths, &repo)?;
        repo_binds(policy.mounts.repo, repo, &mut binds);
    }
    Ok(Mounts {
        binds,
        workspace,
        masks,
    })
}

/// The masks hiding every golem-orch state directory inside `repo`, after refusing the layouts
/// where hiding cannot work.
fn state_masks(policy: &Policy, paths: &HostPaths, repo: &Path) -> Result<Vec<String>, PlanError> {
    if repo.starts_with(&paths.state) {
        return Err(PlanError::RepoInsideState(repo.to_path_buf()));
    }
    // With a writable repo, a worker can rename any directory between the repo root and a
    // nested state directory and plant its own in its place; only a direct child of the root
    // (whose mask it cannot rename) or a directory outside the repository is safe.
    if policy.mounts.repo == Access::Rw
        && paths.state.starts_with(repo)
        && paths.state.parent() != Some(repo)
    {
        return Err(PlanError::StateNestedInRepo(paths.state.clone()));
    }
    // The stage and audit log must never be reachable from a container: a worker that could
    // write them could forge what a person reviews and pushes.
    // Every state directory inside the repository, not only this one: a session started
    // in a subfolder must not read the root's inputs and stage (issue 11, class 4).
    let mut masks = Vec::new();
    for state in std::iter::once(&paths.state).chain(&paths.other_states) {
        if let Ok(rel) = state.strip_prefix(repo) {
            let mask = format!("{REPO_TARGET}/{}", rel.display());
            if !rel.as_os_str().is_empty() && !masks.contains(&mask) {
                masks.push(mask);
            }
        }
    }
    Ok(masks)
}

/// The repository's bind mount, and over it a read-only `.git` when the work tree is writable.
fn repo_binds(access: Access, repo: PathBuf, binds: &mut Vec<BindMount>) {
    let git = repo.join(".git");
    binds.push(BindMount {
        source: repo,
        target: REPO_TARGET.into(),
        read_only: access == Access::Ro,
    });
    // A writable .git would let a worker plant hooks or `core.fsmonitor`, which the host runs
    // on the person's next git command. The work tree may be writable; git's metadata never is.
    if access == Access::Rw && git.exists() {
        binds.push(BindMount {
            source: git,
            target: format!("{REPO_TARGET}/.git"),
            read_only: true,
        });
    }
}

/// The policy's network, or a bridge when the person opted in and the level allows it.
fn network(policy: &Policy, allow_network: bool) -> Result<NetworkMode, PlanError> {
    if !allow_network {
        return Ok(policy.network.mode);
    }
    if !policy.network.allow_opt_in {
        return Err(PlanError::NetworkForbidden(policy.level));
    }
    Ok(NetworkMode::Bridge)
}

/// `(uid, gid, user)`: a pinned identity from the person's policy, else the session's own; a dry
/// run shows the start of the reserved range as a placeholder and `per-session` as the user.
fn identity(policy: &Policy, paths: &HostPaths) -> (u32, u32, String) {
    match (policy.fixed_user(), paths.user) {
        (Some((u, g)), _) | (None, Some(SessionUser { uid: u, gid: g })) => {
            (u, g, format!("{u}:{g}"))
        }
        (None, None) => (
            crate::worker_uid::RANGE_START,
            crate::worker_uid::RANGE_START,
            crate::policy::PER_SESSION_USER.to_string(),
        ),
    }
}

/// The complete environment: the policy's fixed values, then the host variables it passes,
/// then (with model access, and over anything the policy named alike) the socket's path and the
/// honeytoken. The last two are the one documented exception to "the policy's env alone".
fn environment(policy: &Policy, model: Option<(&ModelMount, &str)>) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = policy
        .env
        .set
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .chain(
            policy
                .env
                .pass
                .iter()
                .filter_map(|k| std::env::var(k).ok().map(|v| (k.clone(), v))),
        )
        .collect();
    if let Some((model, target)) = model {
        env.insert(crate::gateway::SOCKET_ENV.into(), target.into());
        env.insert(model.key_env.clone(), model.honeytoken.clone());
    }
    env
}

impl ContainerPlan {
    /// What the worker runs: the image's entrypoint, then the arguments.
    pub fn argv(&self) -> Vec<String> {
        let mut argv = self.image_entrypoint.clone().unwrap_or_default();
        argv.extend(self.cmd.iter().cloned());
        argv
    }

    /// Every tmpfs the container gets, the output's included, with its options: what the
    /// engine is asked for and what the check after create expects, from one place.
    pub fn tmpfs_mounts(&self) -> BTreeMap<String, String> {
        let mut tmpfs = self.tmpfs.clone();
        tmpfs.insert(self.output.target.clone(), self.output.mount_options());
        tmpfs
    }

    /// The container's entrypoint: the init, its limits, then the worker's argv. Docker's own
    /// entrypoint/cmd merge is not used, so what runs is exactly what the plan shows. `--pid1`
    /// makes the init refuse to start anything unless it really is PID 1.
    pub fn container_entrypoint(&self) -> Vec<String> {
        let init = init::InitArgs {
            require_pid1: true,
            deadline_secs: init::deadline_for(self.timeout_secs),
            output: Some(self.output.target.clone()),
            command: self.argv(),
        };
        let mut ep = vec![self.init.target.clone()];
        ep.extend(init.argv());
        ep
    }
}

impl fmt::Display for ContainerPlan {
    /// The human form `run --dry-run` prints: one fact a line, in the order a reviewer checks them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_process(f)?;
        self.fmt_mounts(f)?;
        writeln!(f, "env")?;
        for (k, v) in &self.env {
            writeln!(f, "  {k}={v}")?;
        }
        writeln!(f, "labels")?;
        for (k, v) in &self.labels {
            writeln!(f, "  {k}={v}")?;
        }
        Ok(())
    }
}

impl ContainerPlan {
    /// What runs, as whom, and within which limits.
    fn fmt_process(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "session    {}", self.session)?;
        writeln!(f, "trust      {}", self.trust_level)?;
        writeln!(f, "image      {}", self.image)?;
        match &self.image_entrypoint {
            Some(_) => writeln!(f, "command    {}", shell_words(&self.argv()))?,
            None => writeln!(
                f,
                "command    (the image's entrypoint) {}",
                shell_words(&self.cmd)
            )?,
        }
        writeln!(
            f,
            "init       golem-worker init: kills leftovers, streams {} as tar",
            self.output.target
        )?;
        if self.user == crate::policy::PER_SESSION_USER {
            writeln!(
                f,
                "user       per-session (a uid/gid no host account has, chosen at start)"
            )?;
        } else {
            writeln!(f, "user       {}", self.user)?;
        }
        writeln!(f, "network    {}", self.network.as_str())?;
        writeln!(
            f,
            "rootfs     {}",
            if self.read_only_rootfs {
                "read-only"
            } else {
                "writable"
            }
        )?;
        writeln!(f, "caps       drop {}", self.cap_drop.join(","))?;
        writeln!(f, "security   {}", self.security_opt.join(","))?;
        writeln!(
            f,
            "memory     {} (no swap)",
            crate::units::Size(self.memory_bytes)
        )?;
        writeln!(f, "cpus       {}", self.nano_cpus as f64 / 1e9)?;
        writeln!(f, "pids       {}", self.pids_limit)?;
        writeln!(f, "timeout    {}s", self.timeout_secs)?;
        if let Some(rt) = &self.runtime {
            writeln!(f, "runtime    {rt}")?;
        }
        Ok(())
    }

    /// Every mount, host side and container side.
    fn fmt_mounts(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "mounts")?;
        for b in &self.binds {
            let mode = if b.read_only { "ro" } else { "rw" };
            writeln!(f, "  {:<11} {mode}  bind {}", b.target, b.source.display())?;
        }
        if let Some(w) = &self.workspace {
            let mode = if w.read_only { "ro" } else { "rw" };
            writeln!(
                f,
                "  {:<11} {mode}  overlay nosuid,nodev over {}",
                w.target,
                w.overlay.upper.display()
            )?;
        }
        writeln!(
            f,
            "  {:<11} ro  bind {} (the init)",
            self.init.target,
            self.init.source.display()
        )?;
        writeln!(
            f,
            "  {:<11} rw  tmpfs, {} max, {} inodes max, owner {} (mode 0700)",
            self.output.target,
            crate::units::Size(self.output.size_bytes),
            self.output
                .max_inodes
                .map_or_else(|| "no".to_string(), |n| n.to_string()),
            self.user
        )?;
        for (path, opts) in &self.tmpfs {
            writeln!(f, "  {path:<11} rw  tmpfs {opts}")?;
        }
        for path in &self.masks {
            writeln!(f, "  {path:<11} ro  empty tmpfs hiding golem-orch's state")?;
        }
        Ok(())
    }
}

/// Quotes arguments only where needed, so the command line reads naturally.
fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A plan for tests of what consumes plans (the engine adapter, the check after create): the
/// shipped policy of `level`, fixed host paths and a per-session uid.
#[cfg(test)]
pub(crate) fn sample(level: TrustLevel) -> ContainerPlan {
    #![allow(clippy::unwrap_used)]
    let p = crate::policy::load(level, None, None).unwrap().policy;
    build(
        "s",
        &p,
        &HostPaths {
            input: "/h/in".into(),
            workspace: "/h/ws".into(),
            repo: None,
            state: "/h/.golem".into(),
            task: None,
            init: "/h/.golem/bin/golem-init-x".into(),
            user: Some(SessionUser {
                uid: 1_610_612_737,
                gid: 1_610_612_737,
            }),
            other_states: vec![],
            model: None,
        },
        &Command {
            image: "img".into(),
            image_id: Some("sha256:0123".into()),
            entrypoint: Some(vec!["/golem-worker".into()]),
            cmd: vec!["report".into()],
        },
        Default::default(),
        false,
    )
    .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy;

    /// A command for `image` with no arguments and no resolved image id.
    fn command(image: &str, entrypoint: Option<Vec<String>>) -> Command {
        Command {
            image: image.into(),
            image_id: None,
            entrypoint,
            cmd: vec![],
        }
    }

    /// Host paths with the state directory at `/s`, outside any repository.
    fn paths_under_s(user: Option<SessionUser>) -> HostPaths {
        HostPaths {
            input: "/h/in".into(),
            workspace: "/h/ws".into(),
            repo: None,
            state: "/s".into(),
            task: None,
            init: "/s/bin/init".into(),
            user,
            other_states: vec![],
            model: None,
        }
    }

    fn plan_for(
        level: TrustLevel,
        repo: Option<&str>,
        net: bool,
    ) -> Result<ContainerPlan, PlanError> {
        let p = policy::load(level, None, None).unwrap().policy;
        build(
            "s1",
            &p,
            &HostPaths {
                input: "/h/in".into(),
                workspace: "/h/ws".into(),
                repo: repo.map(PathBuf::from),
                state: "/r/.golem".into(),
                task: None,
                init: "/r/.golem/bin/init".into(),
                user: None,
                other_states: vec![],
                model: None,
            },
            &Command {
                image: "img".into(),
                image_id: None,
                entrypoint: Some(vec!["/golem-worker".into()]),
                cmd: vec!["report".into()],
            },
            BTreeMap::new(),
            net,
        )
    }

    #[test]
    fn untrusted_sees_only_its_input_read_only() {
        let plan = plan_for(TrustLevel::Untrusted, Some("/repo"), false).unwrap();
        assert_eq!(
            plan.binds,
            vec![BindMount {
                source: "/h/in".into(),
                target: "/input".into(),
                read_only: true
            }]
        );
        assert_eq!(plan.network, NetworkMode::None);
        assert!(plan.read_only_rootfs);
        assert_eq!(plan.cap_drop, ["ALL"]);
        assert!(plan
            .security_opt
            .iter()
            .any(|s| s.starts_with("no-new-privileges")));
        assert!(plan.tmpfs["/tmp"].contains("noexec"));
        assert_ne!(plan.user.split(':').next(), Some("0"));
        assert_eq!(plan.env.keys().collect::<Vec<_>>(), ["LANG"]);
    }

    #[test]
    fn each_level_adds_exactly_its_mounts() {
        let targets = |level| {
            plan_for(level, Some("/r"), false)
                .unwrap()
                .binds
                .iter()
                .map(|b| (b.target.clone(), b.read_only))
                .chain(
                    plan_for(level, Some("/r"), false)
                        .unwrap()
                        .workspace
                        .map(|w| (w.target, w.read_only)),
                )
                .map(|(t, ro)| format!("{t}:{}", if ro { "ro" } else { "rw" }))
                .collect::<Vec<_>>()
        };
        assert_eq!(targets(TrustLevel::Session), ["/input:ro", "/workspace:rw"]);
        assert_eq!(
            targets(TrustLevel::Workspace),
            ["/input:ro", "/repo:ro", "/workspace:rw"]
        );
        assert_eq!(
            targets(TrustLevel::Full),
            ["/input:ro", "/repo:rw", "/workspace:rw"]
        );
    }

    #[test]
    fn repo_levels_need_a_repo_and_only_full_gets_a_network() {
        assert!(matches!(
            plan_for(TrustLevel::Workspace, None, false),
            Err(PlanError::NoRepo(_))
        ));
        assert!(matches!(
            plan_for(TrustLevel::Untrusted, None, true),
            Err(PlanError::NetworkForbidden(_))
        ));
        assert_eq!(
            plan_for(TrustLevel::Full, Some("/r"), true)
                .unwrap()
                .network,
            NetworkMode::Bridge
        );
    }

    #[test]
    fn the_state_directory_is_hidden_and_git_metadata_never_writable() {
        let plan = plan_for(TrustLevel::Workspace, Some("/r"), false).unwrap();
        assert_eq!(plan.masks, ["/repo/.golem"]);
        let plan = plan_for(TrustLevel::Full, Some("/elsewhere"), false).unwrap();
        assert!(
            plan.masks.is_empty(),
            "state outside the repo needs no mask"
        );
        assert!(matches!(
            plan_for(TrustLevel::Full, Some("/r/.golem/x"), false),
            Err(PlanError::RepoInsideState(_))
        ));
        let p = policy::load(TrustLevel::Full, None, None).unwrap().policy;
        let nested = HostPaths {
            input: "/h/in".into(),
            workspace: "/h/ws".into(),
            repo: Some("/r".into()),
            state: "/r/sub/.golem".into(),
            task: None,
            init: "/r/sub/.golem/bin/init".into(),
            user: None,
            other_states: vec![],
            model: None,
        };
        let cmd = command("img", None);
        let err = build("s", &p, &nested, &cmd, BTreeMap::new(), false).unwrap_err();
        assert!(matches!(err, PlanError::StateNestedInRepo(_)), "{err}");
        // Every other state directory in the repository is hidden as well.
        let ro = policy::load(TrustLevel::Workspace, None, None)
            .unwrap()
            .policy;
        let many = HostPaths {
            other_states: vec![
                "/r/.golem".into(),
                "/r/a/b/.golem".into(),
                "/x/.golem".into(),
            ],
            ..nested.clone()
        };
        let masks = build("s", &ro, &many, &cmd, BTreeMap::new(), false)
            .unwrap()
            .masks;
        assert_eq!(
            masks,
            ["/repo/sub/.golem", "/repo/.golem", "/repo/a/b/.golem"]
        );
        let ro = policy::load(TrustLevel::Workspace, None, None)
            .unwrap()
            .policy;
        let masks = build("s", &ro, &nested, &cmd, BTreeMap::new(), false)
            .unwrap()
            .masks;
        assert_eq!(masks, ["/repo/sub/.golem"]);
    }

    #[test]
    fn the_init_runs_the_worker_and_is_mounted_read_only() {
        let plan = plan_for(TrustLevel::Untrusted, None, false).unwrap();
        let ep = plan.container_entrypoint();
        assert_eq!(ep[0], plan.init.target);
        assert_eq!(ep[1..4], ["init", "--pid1", "--deadline"]);
        let dash = ep.iter().position(|a| a == "--").unwrap();
        assert_eq!(ep[dash + 1..], ["/golem-worker", "report"]);
        let deadline: u64 = ep[4].parse().unwrap();
        assert_eq!(deadline, plan.timeout_secs + init::GRACE_SECS);
        assert!(plan.init.read_only);
        assert_eq!(plan.init.source, PathBuf::from("/r/.golem/bin/init"));

        // Where the init is mounted cannot be known in advance by an image.
        let suffix = plan.init.target.strip_prefix(INIT_TARGET_PREFIX).unwrap();
        assert_eq!(suffix.len(), 32);
        assert!(suffix.bytes().all(|b| b.is_ascii_hexdigit()));
        let again = plan_for(TrustLevel::Untrusted, None, false).unwrap();
        assert_ne!(again.init.target, plan.init.target);

        // A timeout longer than the init accepts still starts: the backstop stops at its maximum.
        let mut long = plan;
        long.timeout_secs = 30 * 86_400;
        let ep = long.container_entrypoint();
        assert_eq!(ep[4], init::MAX_DEADLINE_SECS.to_string());
    }

    /// The entrypoint is read by golem-worker's init with the contract's own parser: what the
    /// plan asks for is what the init does.
    #[test]
    fn the_init_reads_back_exactly_what_the_plan_asks_for() {
        let plan = plan_for(TrustLevel::Untrusted, None, false).unwrap();
        let ep = plan.container_entrypoint();
        assert_eq!(ep[1], init::COMMAND);
        let Ok(init::Parsed::Run(args)) = init::parse(&ep[2..]) else {
            panic!("the init refuses {ep:?}");
        };
        assert!(args.require_pid1);
        assert_eq!(args.deadline_secs, init::deadline_for(plan.timeout_secs));
        assert_eq!(args.output, Some(&plan.output.target));
        assert_eq!(args.command, plan.argv().iter().collect::<Vec<_>>());
        assert_eq!(INIT_EXIT_DEADLINE, 124);
    }

    #[test]
    fn an_image_without_any_command_is_refused() {
        let p = policy::load(TrustLevel::Untrusted, None, None)
            .unwrap()
            .policy;
        let paths = paths_under_s(None);
        let none = command("bare", Some(vec![]));
        let err = build("s", &p, &paths, &none, BTreeMap::new(), false).unwrap_err();
        assert!(matches!(err, PlanError::NoCommand(_)), "{err}");
    }

    #[test]
    fn output_caps_come_from_the_policy() {
        let plan = plan_for(TrustLevel::Untrusted, None, false).unwrap();
        assert_eq!(plan.output.size_bytes, 32 << 20);
        let opts = plan.output.mount_options();
        assert!(opts.contains(&format!("size={}", 32 << 20)), "{opts}");
        assert!(
            !opts.contains("uid=65534") && opts.contains("noexec") && opts.contains("mode=0700"),
            "{opts}"
        );
        assert_eq!(plan.user, "per-session", "a dry run allocates nothing");
        let p = policy::load(TrustLevel::Untrusted, None, None)
            .unwrap()
            .policy;
        let me = SessionUser {
            uid: 1_610_612_999,
            gid: 1_610_612_999,
        };
        let paths = paths_under_s(Some(me));
        let cmd = command("img", None);
        let plan = build("s", &p, &paths, &cmd, BTreeMap::new(), false).unwrap();
        assert_eq!(plan.user, "1610612999:1610612999");
        assert!(plan
            .output
            .mount_options()
            .contains("uid=1610612999,gid=1610612999,mode=0700"));
    }

    #[test]
    fn dry_run_text_names_every_mount_and_flag() {
        let text = plan_for(TrustLevel::Workspace, Some("/r"), false)
            .unwrap()
            .to_string();
        for needle in [
            "/input",
            "ro  bind /h/in",
            "/repo",
            "network    none",
            "read-only",
            "drop ALL",
            "no swap",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }

    /// Model access adds exactly the socket file (writable: connecting needs it) and its two
    /// variables, over whatever the policy named alike; without it nothing model-related enters.
    #[test]
    fn model_access_adds_only_the_socket_and_its_two_variables() {
        let mut p = policy::load(TrustLevel::Untrusted, None, None)
            .unwrap()
            .policy;
        p.env
            .set
            .insert("OPENAI_API_KEY".into(), "from-the-policy".into());
        let cmd = command("img", Some(vec!["/w".into()]));
        let without = build("s", &p, &paths_under_s(None), &cmd, BTreeMap::new(), false).unwrap();
        let model = ModelMount {
            socket: "/s/sessions/x/model/model.sock".into(),
            key_env: "OPENAI_API_KEY".into(),
            honeytoken: "sk-proj-fake".into(),
        };
        let paths = HostPaths {
            model: Some(model),
            ..paths_under_s(None)
        };
        let with = build("s", &p, &paths, &cmd, BTreeMap::new(), false).unwrap();
        assert!(!without.env.contains_key(crate::gateway::SOCKET_ENV));
        let prefix = crate::gateway::CONTAINER_SOCKET_PREFIX;
        assert!(without.binds.iter().all(|b| !b.target.starts_with(prefix)));
        let added: Vec<_> = with
            .binds
            .iter()
            .filter(|b| !without.binds.contains(b))
            .collect();
        assert_eq!(added.len(), 1, "{added:?}");
        let target = added[0].target.clone();
        assert_eq!(
            added,
            [&BindMount {
                source: "/s/sessions/x/model/model.sock".into(),
                target: target.clone(),
                read_only: false,
            }]
        );
        // Where the socket is mounted cannot be known in advance by an image (a symlink there
        // would move the mount point, even onto the host's disk).
        let random = target
            .strip_prefix(prefix)
            .unwrap()
            .strip_suffix(".sock")
            .unwrap();
        assert_eq!(random.len(), 32);
        assert!(random.bytes().all(|b| b.is_ascii_hexdigit()));
        let again = build("s", &p, &paths, &cmd, BTreeMap::new(), false).unwrap();
        assert!(again.binds.iter().all(|b| b.target != target));
        let mut expected = without.env.clone();
        expected.insert("GOLEM_MODEL_SOCKET".into(), target.clone());
        expected.insert("OPENAI_API_KEY".into(), "sk-proj-fake".into());
        assert_eq!(with.env, expected);
        assert_eq!(with.network, NetworkMode::None);
        assert!(with.to_string().contains(&target));
    }
}
