//! What golem-orch asks of a container engine, and the labels that mark what it creates.
//!
//! The session, `gc`, the image builder and the uid allocator speak only to the [`Engine`]
//! trait, in engine-neutral types, so the session's trickiest logic (timeouts, stalls, refused
//! and cut archives) can be driven by a scripted engine in tests, and Podman or a remote
//! executor can be added without touching them. [`docker::DockerEngine`] is the one
//! implementation, and the only module that knows the Docker client library. The version is
//! checked once at [`connect`], because that client does not send its API version in request
//! paths, so an older engine would otherwise fail in confusing ways later.

use std::collections::HashMap;
use std::pin::Pin;

use futures_util::future::BoxFuture;
use futures_util::Stream;

use crate::plan::ContainerPlan;

pub mod docker;
#[cfg(test)]
pub mod fake;

pub use docker::DockerEngine;

/// The oldest Engine API this tool is tested against (Docker 20.10).
pub const MIN_API: (u32, u32) = (1, 41);

/// Marks every container and volume golem-orch creates, so `gc` can find them and nothing else.
pub const LABEL_MANAGED: &str = "golem.managed";
/// The session a resource belongs to.
pub const LABEL_SESSION: &str = "golem.session";
/// The state directory of the session, so `gc` can mark the session failed in the right place.
pub const LABEL_HOME: &str = "golem.home";
/// The owning process (`boot_id:pid:start_time`), so `gc` never touches a live session's resources.
pub const LABEL_OWNER: &str = "golem.owner";
/// Proof that this state directory created the resource: an HMAC of the session id under the
/// state directory's secret gc token (`home::Home::tag`). Labels an image bakes in can copy
/// every other label but cannot predict this one, so `gc` trusts nothing without it.
pub const LABEL_TOKEN: &str = "golem.token";
/// What the object is for: `worker` (a session's container) or `workspace` (a project's
/// overlay volume for `/workspace`).
pub const LABEL_ROLE: &str = "golem.role";

/// An engine's own failure, kept as text and status so no engine library's type leaks out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The engine's message, as the engine library words it.
    pub message: String,
    /// The HTTP-like status the engine answered with, when it answered at all.
    pub status: Option<u16>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiError {}

/// Why the engine could not be used; each message says what to check.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No engine answered at the configured address.
    #[error(
        "cannot reach the Docker Engine ({0}); is the daemon running and is DOCKER_HOST right?"
    )]
    Unreachable(String),
    /// The engine speaks an API older than the one this tool needs.
    #[error("the Docker Engine speaks API {found}, golem-orch needs {}.{} or newer", MIN_API.0, MIN_API.1)]
    TooOld {
        /// The engine's version string.
        found: String,
    },
    /// Any other engine error, with what was being done.
    #[error("{doing}: {source}")]
    Api {
        /// The operation.
        doing: String,
        /// The engine's error.
        source: ApiError,
    },
}

impl EngineError {
    /// An engine's answer to `doing` that was an error.
    pub fn api(doing: impl Into<String>, message: impl Into<String>, status: Option<u16>) -> Self {
        EngineError::Api {
            doing: doing.into(),
            source: ApiError {
                message: message.into(),
                status,
            },
        }
    }

    /// The same error, said to have happened while `doing` this: the caller knows better than
    /// the engine why it made the call, and the messages name the caller's purpose.
    pub fn doing(self, doing: impl Into<String>) -> Self {
        match self {
            EngineError::Api { source, .. } => EngineError::Api {
                doing: doing.into(),
                source,
            },
            other => other,
        }
    }

    /// The engine's own words, without what was being done (for reports that name the object).
    pub fn detail(&self) -> String {
        match self {
            EngineError::Api { source, .. } => source.message.clone(),
            other => other.to_string(),
        }
    }

    /// True when the error is the engine saying "no such container/image/volume".
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// True when the engine refused because the object is in use or in the wrong state.
    pub fn is_conflict(&self) -> bool {
        self.status() == Some(409)
    }

    fn status(&self) -> Option<u16> {
        match self {
            EngineError::Api { source, .. } => source.status,
            _ => None,
        }
    }
}

/// What `doctor` and the version check learned about the engine.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct EngineInfo {
    /// Engine version, e.g. `20.10.24`.
    pub version: String,
    /// API version, e.g. `1.41`.
    pub api_version: String,
    /// Operating system and architecture.
    pub platform: String,
    /// Which engine answers (its first version component: `Engine` for Docker, `Podman Engine`).
    pub name: String,
    /// The OCI runtimes registered with it, sorted.
    pub runtimes: Vec<String>,
    /// The runtime a container gets when the plan names none.
    pub default_runtime: String,
    /// The engine's security options (`name=seccomp,profile=default`, ...), as it reports them.
    #[serde(default)]
    pub security_options: Vec<String>,
}

impl EngineInfo {
    /// Why this engine must not run workers, if it must not: its default seccomp profile is
    /// switched off (`dockerd --seccomp-profile=unconfined`). The plan names no profile, so
    /// the container would then run with none, and nothing in its own record would show it.
    pub fn unsafe_defaults(&self) -> Option<String> {
        let unconfined = self
            .security_options
            .iter()
            .any(|o| o.contains("name=seccomp") && o.contains("profile=unconfined"));
        unconfined.then(|| {
            "the engine's default seccomp profile is unconfined (name=seccomp,profile=unconfined); golem-orch runs no worker without one".to_string()
        })
    }
}

/// One piece of a container's output as the attach stream delivers it: stdout carries the
/// init's archive of `/output`, stderr the worker's messages, and the two must never mix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    /// Bytes the container wrote to stdout.
    Stdout(bytes::Bytes),
    /// Bytes the container wrote to stderr.
    Stderr(bytes::Bytes),
}

/// A container's stdout and stderr, demultiplexed, from its start until it ends.
pub type Attached = Pin<Box<dyn Stream<Item = Result<Chunk, EngineError>> + Send>>;

/// What an engine call eventually yields; boxed so [`Engine`] can be used as `dyn Engine`.
pub type EngineFuture<'a, T> = BoxFuture<'a, Result<T, EngineError>>;

/// How a stopped container ended, as the engine recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExitState {
    /// The exit code, when the process exited.
    pub code: Option<i64>,
    /// Whether the kernel killed it for exceeding its memory limit.
    pub oom_killed: bool,
}

/// A container as an inspection sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Inspected {
    /// Still running: its exit state is not final yet.
    pub running: bool,
    /// How it ended (meaningful once it is not running).
    pub exit: ExitState,
    /// The `uid:gid` it runs as, as created.
    pub user: Option<String>,
}

/// A created container's settings as the engine recorded them, read back before it starts, so
/// that what runs is checked against the plan rather than assumed (`verify`). The environment
/// is left out: it holds the model gateway's honeytoken, and this goes into the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Effective {
    /// The image's content id.
    pub image: String,
    /// `uid:gid`.
    pub user: String,
    /// The entrypoint.
    pub entrypoint: Vec<String>,
    /// The command after it.
    pub cmd: Vec<String>,
    /// The healthcheck's test (`["NONE"]` when disabled).
    pub healthcheck: Vec<String>,
    /// `none`, `bridge`, ...
    pub network_mode: String,
    /// Networking disabled in the container's config.
    pub network_disabled: bool,
    /// Read-only root filesystem.
    pub readonly_rootfs: bool,
    /// Privileged mode.
    pub privileged: bool,
    /// Capabilities added.
    pub cap_add: Vec<String>,
    /// Capabilities dropped.
    pub cap_drop: Vec<String>,
    /// Security options (`no-new-privileges:true`, `seccomp=...`).
    pub security_opt: Vec<String>,
    /// Process limit.
    pub pids_limit: i64,
    /// Memory limit in bytes.
    pub memory: i64,
    /// Memory plus swap limit in bytes.
    pub memory_swap: i64,
    /// CPU limit in billionths of a CPU.
    pub nano_cpus: i64,
    /// Mounts, sorted by target.
    pub mounts: Vec<EffectiveMount>,
    /// tmpfs mounts by target, with their options.
    pub tmpfs: std::collections::BTreeMap<String, String>,
    /// The OCI runtime (`runc`, `runsc`).
    pub runtime: String,
    /// Whether the engine injects its own init as PID 1.
    pub init: bool,
    /// IPC namespace mode.
    pub ipc_mode: String,
    /// PID namespace mode (empty: private).
    pub pid_mode: String,
    /// User namespace mode (empty: the daemon's).
    pub userns_mode: String,
    /// Host devices passed in, device cgroup rules and device requests, together.
    pub devices: usize,
    /// Cgroup namespace mode (`private`).
    #[serde(default)]
    pub cgroupns_mode: String,
    /// UTS namespace mode (empty: private).
    #[serde(default)]
    pub uts_mode: String,
    /// Resource limits by name: `(soft, hard)`.
    #[serde(default)]
    pub ulimits: std::collections::BTreeMap<String, (i64, i64)>,
    /// Kernel parameters set for the container.
    #[serde(default)]
    pub sysctls: std::collections::BTreeMap<String, String>,
    /// Whether the kernel's OOM killer is kept away from it.
    #[serde(default)]
    pub oom_kill_disable: bool,
    /// Its OOM score adjustment.
    #[serde(default)]
    pub oom_score_adj: i64,
    /// `/dev/shm` size in bytes.
    #[serde(default)]
    pub shm_size: i64,
}

/// A protection of the plan that this engine cannot apply, and what stands in for it; recorded
/// in the manifest so a staged commit says which protection was replaced by what.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Replaced {
    /// The protection as planned.
    pub protection: String,
    /// What holds instead.
    pub by: String,
}

/// One mount of an [`Effective`] container.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize,
)]
pub struct EffectiveMount {
    /// `bind`, `volume` or `tmpfs`.
    pub kind: String,
    /// Host path (bind), volume name (volume), empty (tmpfs).
    pub source: String,
    /// Path in the container.
    pub target: String,
    /// Mounted read-only.
    pub read_only: bool,
    /// Bind propagation (`rprivate`, ...; empty when the engine does not say).
    pub propagation: String,
}

/// One container of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Listed {
    /// Its id.
    pub id: String,
    /// Its labels (which an image can copy: never proof by themselves).
    pub labels: HashMap<String, String>,
    /// The engine's word for its state (`running`, `exited`, ...).
    pub state: String,
}

/// One volume of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListedVolume {
    /// Its name.
    pub name: String,
    /// Its labels.
    pub labels: HashMap<String, String>,
}

/// Which containers a listing returns (stopped ones included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Select {
    /// Those carrying every one of these labels (`key` or `key=value`).
    Labels(Vec<String>),
    /// Those mounting this volume.
    Volume(String),
}

/// A person's or golem-orch's image as the engine has it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImageInfo {
    /// Content id.
    pub id: String,
    /// The image's labels.
    pub labels: HashMap<String, String>,
    /// The image's `ENTRYPOINT`.
    pub entrypoint: Vec<String>,
    /// The image's `CMD`.
    pub cmd: Vec<String>,
}

/// An image build: a tar context with a `Dockerfile`, built offline.
#[derive(Debug, Clone)]
pub struct BuildSpec {
    /// The tag to give the result.
    pub tag: String,
    /// Labels to set on it.
    pub labels: HashMap<String, String>,
    /// The build context, a tar.
    pub context: Vec<u8>,
}

/// Everything golem-orch asks of a container engine. Object-safe and `Send + Sync`, so one
/// engine is shared as `&dyn Engine` by every session of a batch.
///
/// Every "absent is fine" rule lives here, in the contract, so callers and fakes agree: `kill`
/// of a stopped or missing container and `remove` of a missing one succeed.
pub trait Engine: Send + Sync {
    /// The engine's versions, for the API check and `doctor`.
    fn version(&self) -> EngineFuture<'_, EngineInfo>;
    /// Creates the container the plan describes, under `name`, exactly as planned. The plan
    /// is the engine-neutral request: it is what the audit log records, so what runs is what
    /// was audited.
    fn create<'a>(&'a self, name: &'a str, plan: &'a ContainerPlan) -> EngineFuture<'a, String>;
    /// Attaches to a created container's stdout and stderr (before its start, so no byte is
    /// missed); the engine applies backpressure, so a slow reader never loses data.
    fn attach<'a>(&'a self, id: &'a str) -> EngineFuture<'a, Attached>;
    /// Starts a created container.
    fn start<'a>(&'a self, id: &'a str) -> EngineFuture<'a, ()>;
    /// Sends SIGKILL; a container that already stopped or is gone is fine.
    fn kill<'a>(&'a self, id: &'a str) -> EngineFuture<'a, ()>;
    /// Waits until the container stops; its exit code.
    fn wait<'a>(&'a self, id: &'a str) -> EngineFuture<'a, i64>;
    /// The container's state: running or not, how it ended, its user.
    fn inspect<'a>(&'a self, id: &'a str) -> EngineFuture<'a, Inspected>;
    /// Adapts `plan` to what this engine can apply before it is created, and says what was
    /// replaced by what. A Docker Engine applies every plan as it is.
    fn adapt(&self, _plan: &mut ContainerPlan) -> Vec<Replaced> {
        Vec::new()
    }
    /// A created container's settings as the engine recorded them (see [`Effective`]).
    fn effective<'a>(&'a self, id: &'a str) -> EngineFuture<'a, Effective>;
    /// Force-removes a container and its anonymous volumes; absent is success.
    fn remove<'a>(&'a self, id: &'a str) -> EngineFuture<'a, ()>;
    /// Lists containers, stopped ones included.
    fn list<'a>(&'a self, select: &'a Select) -> EngineFuture<'a, Vec<Listed>>;
    /// Inspects an image; a missing one is an error that [`EngineError::is_not_found`].
    fn inspect_image<'a>(&'a self, reference: &'a str) -> EngineFuture<'a, ImageInfo>;
    /// Builds an image from a tar context, offline; a failed build is an error whose
    /// [`EngineError::detail`] is the builder's message.
    fn build_image<'a>(&'a self, spec: &'a BuildSpec) -> EngineFuture<'a, ()>;
    /// Gives `image` the name `repo:tag` too.
    fn tag_image<'a>(&'a self, image: &'a str, repo: &'a str, tag: &'a str)
        -> EngineFuture<'a, ()>;
    /// The `repo:tag` names of every image of `repository`.
    fn image_tags<'a>(&'a self, repository: &'a str) -> EngineFuture<'a, Vec<String>>;
    /// Removes an image tag (the engine refuses one a container uses: [`EngineError::is_conflict`]).
    fn remove_image<'a>(&'a self, tag: &'a str) -> EngineFuture<'a, ()>;
    /// Lists volumes carrying every one of these labels.
    fn volumes<'a>(&'a self, labels: &'a [String]) -> EngineFuture<'a, Vec<ListedVolume>>;
    /// Removes a volume; absent is success. The engine releases a volume a moment after its
    /// last container is removed, so an implementation retries briefly.
    fn remove_volume<'a>(&'a self, name: &'a str) -> EngineFuture<'a, ()>;
}

/// Connects to the Docker Engine (honouring `DOCKER_HOST`, unix or tcp) and checks the API version.
pub async fn connect() -> Result<(DockerEngine, EngineInfo), EngineError> {
    let docker = DockerEngine::connect()?;
    // The first request: an engine that does not answer it is unreachable, whatever the error.
    let info = docker.version().await.map_err(|e| match e {
        EngineError::Api { source, .. } => EngineError::Unreachable(source.message),
        other => other,
    })?;
    if parse_api(&info.api_version).is_none_or(|v| v < MIN_API) {
        return Err(EngineError::TooOld {
            found: info.api_version,
        });
    }
    Ok((docker, info))
}

fn parse_api(v: &str) -> Option<(u32, u32)> {
    let (a, b) = v.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_versions_compare_numerically() {
        assert!(parse_api("1.41").unwrap() >= MIN_API);
        assert!(parse_api("1.100").unwrap() >= MIN_API);
        assert!(parse_api("1.40").unwrap() < MIN_API);
        assert!(parse_api("garbage").is_none());
    }

    #[test]
    fn engine_errors_keep_the_engines_words_and_the_callers_purpose() {
        let e = EngineError::api(
            "inspecting the container",
            "No such container: x",
            Some(404),
        );
        assert_eq!(
            e.to_string(),
            "inspecting the container: No such container: x"
        );
        assert!(e.is_not_found() && !e.is_conflict());
        let e = e.doing("inspecting the finished container");
        assert_eq!(
            e.to_string(),
            "inspecting the finished container: No such container: x"
        );
        assert_eq!(e.detail(), "No such container: x");
        let busy = EngineError::api("removing image t", "conflict", Some(409));
        assert!(busy.is_conflict() && !busy.is_not_found());
        let down = EngineError::Unreachable("refused".into()).doing("listing");
        assert!(matches!(down, EngineError::Unreachable(_)) && !down.is_not_found());
    }

    #[test]
    fn one_engine_is_shared_by_every_task_of_a_batch() {
        fn shared(engine: std::sync::Arc<dyn Engine>) -> std::sync::Arc<dyn Engine> {
            engine
        }
        fn send<T: Send>(_: &T) {}
        let engine = shared(fake::FakeEngine::new(fake::Script::default()));
        let listing = Select::Labels(vec![LABEL_MANAGED.into()]);
        let future = engine.list(&listing);
        send(&future);
    }
}
