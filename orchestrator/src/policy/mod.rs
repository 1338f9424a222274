//! Trust-level policies: what a session's container may see and use.
//!
//! Policies are the single source of every mount, limit and flag a container gets, so loading is
//! strict (unknown keys and bad values are errors with file, line and column) and layering only
//! ever narrows: a project's `golem.yaml`, a worker definition or a command-line flag can take
//! access away, never add it, and all three go through one function ([`Policy::narrow`], in
//! `narrow.rs`). Loading and the project file live in `load.rs`, which also holds the crate's one
//! YAML parser.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::units::{Limit, Size};

mod load;
mod model;
mod narrow;

pub use load::{find_project_file, load, Effective, PROJECT_FILE};
pub(crate) use load::{locate, parse_yaml, read_owned_file};
pub use model::{
    valid_model_name, ModelPolicy, HOST_MODEL, MAX_CONCURRENT_CEILING, MAX_REQUEST_BYTES_CEILING,
};
pub use narrow::{
    narrow_for_run, narrow_input, EnvNarrowing, InputNarrowing, ModelNarrowing, MountsNarrowing,
    Narrowing, NetworkNarrowing, Origin, OutputNarrowing, ResourcesNarrowing,
};

/// The four trust levels, ordered from least to most trusted.
///
/// The order matters: every level's ceilings are at least those of the level below it, which
/// [`Policy::validate`] checks, so a mistake in a policy file cannot put a hole in the ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrustLevel {
    /// Content from anywhere: inputs read-only, no project access.
    Untrusted,
    /// Adds the project's persistent scratch space.
    Session,
    /// Adds the project's git repository, read-only.
    Workspace,
    /// Adds write access to the repository and the option of a network.
    Full,
}

impl TrustLevel {
    /// Every level, lowest first.
    pub const ALL: [TrustLevel; 4] = [
        TrustLevel::Untrusted,
        TrustLevel::Session,
        TrustLevel::Workspace,
        TrustLevel::Full,
    ];

    /// The lowercase name used in files, labels and flags.
    pub fn as_str(self) -> &'static str {
        match self {
            TrustLevel::Untrusted => "untrusted",
            TrustLevel::Session => "session",
            TrustLevel::Workspace => "workspace",
            TrustLevel::Full => "full",
        }
    }

    /// The most access a policy of this level may ever grant, whatever its file says.
    /// The most a policy file of this level may let a session take in: a host disk is shared,
    /// so even a hand-written policy cannot make intake unbounded.
    pub fn input_ceiling(self) -> Size {
        Size(match self {
            TrustLevel::Untrusted => 4 << 30,
            TrustLevel::Session => 16 << 30,
            TrustLevel::Workspace => 64 << 30,
            TrustLevel::Full => 256 << 30,
        })
    }

    fn ceiling(self) -> (Access, Access) {
        // (workspace, repo)
        match self {
            TrustLevel::Untrusted => (Access::None, Access::None),
            TrustLevel::Session => (Access::Rw, Access::None),
            TrustLevel::Workspace => (Access::Rw, Access::Ro),
            TrustLevel::Full => (Access::Rw, Access::Rw),
        }
    }
}

impl fmt::Display for TrustLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for TrustLevel {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TrustLevel::ALL
            .into_iter()
            .find(|l| l.as_str() == s)
            .ok_or_else(|| PolicyError::UnknownLevel(s.to_string()))
    }
}

/// How a host directory is mounted, ordered by how much it grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Not mounted at all.
    None,
    /// Mounted read-only.
    Ro,
    /// Mounted read-write.
    Rw,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Access::None => "none",
            Access::Ro => "ro",
            Access::Rw => "rw",
        })
    }
}

/// Which host directories the container gets. `/output` is always there and is not a host path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mounts {
    /// The session's inputs at `/input`; never writable, so a worker cannot alter its evidence.
    pub input: Access,
    /// The project's `.golem/workspace/` at `/workspace`.
    pub workspace: Access,
    /// The project's git repository at `/repo`.
    pub repo: Access,
}

/// Network access; `none` everywhere unless the level allows a person to opt in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// The mode a session starts with; policy files must say `none`.
    pub mode: NetworkMode,
    /// Whether `run --allow-network` may switch this level to a bridged network.
    pub allow_opt_in: bool,
}

/// Docker network modes golem-orch knows how to reason about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// Loopback only.
    None,
    /// Docker's default bridge, with egress.
    Bridge,
}

impl NetworkMode {
    /// The value Docker expects in `HostConfig.NetworkMode`.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::None => "none",
            NetworkMode::Bridge => "bridge",
        }
    }
}

/// Kernel-enforced limits for the container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// Memory limit; swap is disabled so this is the whole budget.
    pub memory: Size,
    /// CPU share (1.0 = one core).
    pub cpus: f64,
    /// Maximum number of processes and threads, which stops fork bombs.
    pub pids: u64,
    /// Wall-clock limit after which the container is killed.
    pub timeout: Limit,
    /// Size of the noexec tmpfs at `/tmp`.
    pub tmp: Size,
}

/// Caps on what may leave the container, enforced by the output volume and again by extraction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputLimits {
    /// Total bytes of accepted files.
    pub max_total_bytes: Size,
    /// Number of accepted files.
    pub max_files: u64,
    /// Bytes of any one file.
    pub max_file_bytes: Size,
}

/// Caps on what a session takes in, enforced by intake while copying and downloading.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputLimits {
    /// Bytes of all inputs together, counted by apparent size so a sparse file counts in full.
    pub max_total_bytes: Size,
}

impl Default for InputLimits {
    /// For policy files written before the field existed: 1 GiB.
    fn default() -> Self {
        InputLimits {
            max_total_bytes: Size(1 << 30),
        }
    }
}

/// The container's environment: only what is written here, never the host's.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Env {
    /// Fixed variables set in the container.
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    /// Names of host variables a person explicitly lets through; empty in every shipped policy.
    #[serde(default)]
    pub pass: Vec<String>,
}

/// One trust level's complete policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// The level this file describes; must match the file it was loaded for.
    pub level: TrustLevel,
    /// One line shown by `policy show`.
    pub description: String,
    /// Host directories the container sees.
    pub mounts: Mounts,
    /// Network access.
    pub network: Network,
    /// Kernel-enforced limits.
    pub resources: Resources,
    /// Output caps.
    pub output: OutputLimits,
    /// Input caps.
    #[serde(default)]
    pub input: InputLimits,
    /// `per-session` (every shipped policy): each session gets its own uid/gid that no host
    /// account has (`worker_uid`). A numeric `uid:gid` pins one identity for a `--policy-dir`
    /// that needs it (never root; numeric because a scratch image has no user database), and
    /// gives up the per-session separation.
    pub user: String,
    /// Environment.
    #[serde(default)]
    pub env: Env,
    /// An OCI runtime registered with the engine (for example `runsc` for gVisor); engine default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// The runtimes a person may choose with `--runtime` (the `runtime` above among them); empty
    /// means only the level's own. A project file may shorten the list, never lengthen it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtimes: Vec<String>,
    /// The level's runtime must be used: a session whose engine lacks it is refused. Without it,
    /// a missing preferred runtime falls back to the engine's default, audited and warned about.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub runtime_required: bool,
    /// Model access through the host gateway; none when the file has no `model:` section.
    #[serde(default)]
    pub model: ModelPolicy,
}

/// Where a value came from, for error messages a person can jump to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// File name as the person knows it.
    pub file: String,
    /// 1-based line and column, when known.
    pub line_col: Option<(usize, usize)>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line_col {
            Some((l, c)) => write!(f, "{}:{}:{}", self.file, l, c),
            None => write!(f, "{}", self.file),
        }
    }
}

/// Everything that can be wrong with a policy, a project file or a narrowing request.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The named trust level does not exist.
    #[error("unknown trust level {0:?} (expected untrusted, session, workspace or full)")]
    UnknownLevel(String),
    /// A project file others could have written is not applied (nor silently skipped).
    #[error("refusing {path}: {why}; make it yours and writable only by you (chmod go-w)")]
    UnsafeProjectFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file does not parse or has a bad value.
    #[error("{at}: {message}")]
    Invalid {
        /// Where.
        at: Location,
        /// What is wrong.
        message: String,
    },
    /// `--runtime` named a runtime the level does not allow.
    #[error("the {level} level does not allow the {asked:?} runtime (it allows: {allowed}); see `golem-orch policy show {level}`")]
    Runtime {
        /// The level.
        level: TrustLevel,
        /// What was asked.
        asked: String,
        /// The level's runtimes.
        allowed: String,
    },
    /// A project file or flag asked for more than the level grants.
    #[error("{at}: {key} may only narrow the {level} policy: {asked} is more than {allowed}")]
    Widen {
        /// Where the request was written.
        at: Location,
        /// The level being narrowed.
        level: TrustLevel,
        /// Dotted key.
        key: String,
        /// What was asked.
        asked: String,
        /// What the level allows.
        allowed: String,
    },
}

impl Policy {
    /// Parses one policy file and checks it against its level's ceilings.
    pub fn from_yaml(text: &str, file: &str, expect: TrustLevel) -> Result<Policy, PolicyError> {
        let policy: Policy = parse_yaml(text, file)?;
        let at = |key: &[&str]| Location {
            file: file.to_string(),
            line_col: locate(text, key),
        };
        if policy.level != expect {
            return Err(PolicyError::Invalid {
                at: at(&["level"]),
                message: format!(
                    "this file must describe level {expect}, not {}",
                    policy.level
                ),
            });
        }
        policy
            .validate()
            .map_err(|(key, message)| PolicyError::Invalid {
                at: at(&key.split('.').collect::<Vec<_>>()),
                message: format!("{key}: {message}"),
            })?;
        Ok(policy)
    }

    /// Checks the invariants every policy must keep, returning the offending key and why.
    fn validate(&self) -> Result<(), (String, String)> {
        let err = |k: &str, m: String| Err((k.to_string(), m));
        let (ws_max, repo_max) = self.level.ceiling();
        if self.mounts.input == Access::Rw {
            return err(
                "mounts.input",
                "inputs are evidence and are never writable".into(),
            );
        }
        if self.mounts.workspace > ws_max {
            return err(
                "mounts.workspace",
                format!("level {} allows at most {ws_max}", self.level),
            );
        }
        if self.mounts.repo > repo_max {
            return err(
                "mounts.repo",
                format!("level {} allows at most {repo_max}", self.level),
            );
        }
        if self.network.mode != NetworkMode::None {
            return err(
                "network.mode",
                "every level starts with no network; use allow_opt_in".into(),
            );
        }
        if self.network.allow_opt_in && self.level != TrustLevel::Full {
            return err(
                "network.allow_opt_in",
                "only the full level may opt in to a network".into(),
            );
        }
        self.validate_limits()?;
        self.model.validate()?;
        parse_user(&self.user).map_err(|m| ("user".to_string(), m))?;
        for name in self.env.set.keys().chain(self.env.pass.iter()) {
            if !valid_env_name(name) {
                return err("env", format!("{name:?} is not a valid variable name"));
            }
        }
        // The model key lives on the host, with the gateway; no policy may hand it (or the
        // gateway's configuration) to a container, not even a person's own policy directory.
        if let Some(name) = self.env.pass.iter().find(|n| is_model_config_var(n)) {
            return err(
                "env.pass",
                format!(
                    "{name} holds the model gateway's configuration and never enters a container"
                ),
            );
        }
        if let Some(rt) = &self.runtime {
            if !is_runtime_name(rt) {
                return err("runtime", format!("{rt:?} is not a runtime name"));
            }
        }
        if let Some(rt) = self.runtimes.iter().find(|r| !is_runtime_name(r)) {
            return err("runtimes", format!("{rt:?} is not a runtime name"));
        }
        if !self.runtimes.is_empty() && !self.runtimes.contains(&self.own_runtime().to_string()) {
            return err(
                "runtimes",
                format!(
                    "must include the level's own runtime {:?}",
                    self.own_runtime()
                ),
            );
        }
        if self.runtime_required && self.runtime.is_none() {
            return err("runtime_required", "needs a runtime to require".into());
        }
        Ok(())
    }

    /// The numeric half of [`Policy::validate`]: the floors a narrowing can run into (checked
    /// by `Policy::narrow` after each section) and the level's input ceiling.
    fn validate_limits(&self) -> Result<(), (String, String)> {
        let err = |k: &str, m: String| Err((k.to_string(), m));
        // Below 0.01 the value rounds to NanoCpus 0, which Docker reads as "no limit".
        if !(self.resources.cpus >= 0.01 && self.resources.cpus <= 1024.0) {
            return err(
                "resources.cpus",
                "must be between 0.01 and 1024 cores".into(),
            );
        }
        if let Some(key) = self.zero_limit() {
            return err(key, "must be greater than zero".into());
        }
        if self.resources.memory.bytes() < 6 << 20 {
            return err("resources.memory", "Docker needs at least 6MiB".into());
        }
        if self.output.max_file_bytes > self.output.max_total_bytes {
            return err(
                "output.max_file_bytes",
                "cannot exceed output.max_total_bytes".into(),
            );
        }
        let input_max = self.level.input_ceiling();
        if self.input.max_total_bytes > input_max {
            return err(
                "input.max_total_bytes",
                format!("level {} allows at most {input_max}", self.level),
            );
        }
        Ok(())
    }

    /// The first limit that is zero. Parsing refuses a zero size or duration, but a
    /// [`Narrowing`] can be built in code, and zero would read as "no limit" to Docker.
    fn zero_limit(&self) -> Option<&'static str> {
        let (r, o) = (&self.resources, &self.output);
        [
            ("resources.pids", r.pids == 0),
            ("resources.timeout", r.timeout.duration().is_zero()),
            ("resources.tmp", r.tmp.bytes() == 0),
            ("output.max_total_bytes", o.max_total_bytes.bytes() == 0),
            ("output.max_files", o.max_files == 0),
            ("output.max_file_bytes", o.max_file_bytes.bytes() == 0),
            (
                "input.max_total_bytes",
                self.input.max_total_bytes.bytes() == 0,
            ),
        ]
        .into_iter()
        .find_map(|(key, zero)| zero.then_some(key))
    }

    /// The fixed `(uid, gid)` the policy pins, or `None` for a per-session identity.
    pub fn fixed_user(&self) -> Option<(u32, u32)> {
        // validate() guarantees this parses; an unparsable value means per-session, never a
        // shared identity.
        parse_user(&self.user).ok().flatten()
    }
}

/// The `user` value that gives every session its own uid/gid.
pub const PER_SESSION_USER: &str = "per-session";

/// Parses `per-session` (`None`) or a numeric, non-root `uid:gid`.
fn parse_user(user: &str) -> Result<Option<(u32, u32)>, String> {
    if user == PER_SESSION_USER {
        return Ok(None);
    }
    let (u, g) = user
        .split_once(':')
        .ok_or_else(|| format!("{user:?} must be per-session or numeric uid:gid"))?;
    let uid: u32 = u
        .parse()
        .map_err(|_| format!("{user:?} must be numeric uid:gid"))?;
    let gid: u32 = g
        .parse()
        .map_err(|_| format!("{user:?} must be numeric uid:gid"))?;
    if uid == 0 || gid == 0 {
        return Err("the worker never runs as root (uid or gid 0)".into());
    }
    Ok(Some((uid, gid)))
}

/// The host variables the model gateway reads its upstream and key from.
/// An OCI runtime's name as engines register them: letters, digits, `-`, `_`, `.`.
fn is_runtime_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

impl Policy {
    /// The level's own runtime by name: `runtime`, or `runc` (the engines' default) when absent.
    pub fn own_runtime(&self) -> &str {
        self.runtime.as_deref().unwrap_or(DEFAULT_RUNTIME)
    }

    /// The runtimes `--runtime` may choose: `runtimes`, or the level's own alone.
    pub fn allowed_runtimes(&self) -> Vec<String> {
        if self.runtimes.is_empty() {
            vec![self.own_runtime().to_string()]
        } else {
            self.runtimes.clone()
        }
    }

    /// A person's `--runtime` choice: one the level allows, then required (an explicit choice
    /// never falls back to another runtime).
    pub fn choose_runtime(&mut self, name: &str) -> Result<(), PolicyError> {
        let allowed = self.allowed_runtimes();
        if !allowed.iter().any(|r| r == name) {
            return Err(PolicyError::Runtime {
                level: self.level,
                asked: name.to_string(),
                allowed: allowed.join(", "),
            });
        }
        self.runtime = Some(name.to_string());
        self.runtime_required = true;
        Ok(())
    }
}

/// The runtime engines use when a container names none.
pub const DEFAULT_RUNTIME: &str = "runc";

fn is_model_config_var(name: &str) -> bool {
    name.starts_with("GOLEM_MODEL")
        || crate::gateway::ModelApi::ALL
            .iter()
            .any(|api| api.key_env() == name)
}

fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::load::BUILTIN;
    use super::*;
    use std::path::Path;

    fn builtin(level: TrustLevel) -> Policy {
        load(level, None, None).unwrap().policy
    }

    fn with_project(level: TrustLevel, yaml: &str) -> Result<Effective, PolicyError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(PROJECT_FILE);
        std::fs::write(&path, yaml).unwrap();
        load(level, None, Some(&path))
    }

    #[test]
    fn shipped_policies_load_and_climb_the_ladder() {
        let all: Vec<Policy> = TrustLevel::ALL.into_iter().map(builtin).collect();
        for pair in all.windows(2) {
            assert!(pair[0].mounts.workspace <= pair[1].mounts.workspace);
            assert!(pair[0].mounts.repo <= pair[1].mounts.repo);
            assert!(pair[0].resources.memory <= pair[1].resources.memory);
            assert!(pair[0].output.max_total_bytes <= pair[1].output.max_total_bytes);
            let (lo, hi) = (&pair[0].model, &pair[1].model);
            assert!(lo.max_requests <= hi.max_requests);
            assert!(lo.max_input_tokens <= hi.max_input_tokens);
            assert!(lo.max_output_tokens <= hi.max_output_tokens);
            assert!(lo.max_request_bytes <= hi.max_request_bytes);
        }
        for p in &all {
            assert_eq!(
                p.network.mode,
                NetworkMode::None,
                "{} must start without network",
                p.level
            );
            assert!(
                p.env.pass.is_empty(),
                "{} must not pass host variables",
                p.level
            );
            assert_eq!(p.user, PER_SESSION_USER, "{} shares one uid", p.level);
            // Every level may reach the host's model (the untrusted level is where an AI reads
            // hostile documents), with small budgets.
            assert_eq!(p.model.allow, vec![HOST_MODEL.to_string()], "{}", p.level);
            assert!(p.model.max_requests > 0 && p.model.max_requests <= 1000);
            assert!(p.model.max_output_tokens > 0 && p.model.max_output_tokens <= 1_000_000);
            assert_eq!(p.fixed_user(), None);
        }
        assert_eq!(all[0].mounts.workspace, Access::None);
        assert_eq!(all[1].mounts.workspace, Access::Rw);
        assert_eq!(all[2].mounts.repo, Access::Ro);
        assert_eq!(all[3].mounts.repo, Access::Rw);
        assert!(all[3].network.allow_opt_in && !all[2].network.allow_opt_in);
    }

    #[test]
    fn unknown_key_is_an_error_with_line_and_column() {
        let text = BUILTIN[0].1.replace("  pids: 64", "  pids: 64\n  pidz: 3");
        let err = Policy::from_yaml(&text, "untrusted.yaml", TrustLevel::Untrusted).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("untrusted.yaml:"), "{msg}");
        assert!(msg.contains("pidz"), "{msg}");
        let PolicyError::Invalid { at, .. } = err else {
            panic!("wrong error")
        };
        let (line, _) = at.line_col.expect("location");
        assert_eq!(text.lines().nth(line - 1).unwrap().trim(), "pidz: 3");
    }

    #[test]
    fn bad_value_is_an_error_with_location() {
        let text = BUILTIN[0].1.replace("memory: 512MiB", "memory: lots");
        let msg = Policy::from_yaml(&text, "u.yaml", TrustLevel::Untrusted)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("u.yaml:") && msg.contains("lots"), "{msg}");
    }

    #[test]
    fn no_policy_passes_the_model_key_or_the_gateways_configuration() {
        for name in [
            "GOLEM_MODEL_KEY",
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "GOLEM_MODEL_BASE_URL",
        ] {
            let text = BUILTIN[3]
                .1
                .replace("  pass: []", &format!("  pass: [LANG, {name}]"));
            assert_ne!(text, BUILTIN[3].1, "the full policy's env.pass moved");
            let msg = Policy::from_yaml(&text, "f.yaml", TrustLevel::Full)
                .unwrap_err()
                .to_string();
            assert!(msg.contains("env.pass") && msg.contains(name), "{msg}");
        }
        let text = BUILTIN[3].1.replace("  pass: []", "  pass: [LANG]");
        assert!(Policy::from_yaml(&text, "f.yaml", TrustLevel::Full).is_ok());
    }

    #[test]
    fn a_policy_file_cannot_exceed_its_level() {
        let text = BUILTIN[0].1.replace("  repo: none", "  repo: ro");
        let msg = Policy::from_yaml(&text, "u.yaml", TrustLevel::Untrusted)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("mounts.repo"), "{msg}");
        let text = BUILTIN[2]
            .1
            .replace("allow_opt_in: false", "allow_opt_in: true");
        assert!(Policy::from_yaml(&text, "w.yaml", TrustLevel::Workspace).is_err());
        for user in ["\"0:0\"", "\"1000:0\"", "nobody", "\"65534\""] {
            let text = BUILTIN[0]
                .1
                .replace("user: per-session", &format!("user: {user}"));
            assert!(
                Policy::from_yaml(&text, "u.yaml", TrustLevel::Untrusted).is_err(),
                "{user}"
            );
        }
        // A person's --policy-dir may still pin one numeric identity.
        let text = BUILTIN[0]
            .1
            .replace("user: per-session", "user: \"4242:4243\"");
        let pinned = Policy::from_yaml(&text, "u.yaml", TrustLevel::Untrusted).unwrap();
        assert_eq!(pinned.fixed_user(), Some((4242, 4243)));
        let text = BUILTIN[0].1.replace("  mode: none", "  mode: bridge");
        assert!(Policy::from_yaml(&text, "u.yaml", TrustLevel::Untrusted).is_err());
        let text = BUILTIN[0].1.replace("input: ro", "input: rw");
        assert!(Policy::from_yaml(&text, "u.yaml", TrustLevel::Untrusted).is_err());
    }

    #[test]
    fn a_file_for_the_wrong_level_is_refused() {
        let err =
            Policy::from_yaml(BUILTIN[1].1, "untrusted.yaml", TrustLevel::Untrusted).unwrap_err();
        assert!(
            err.to_string().contains("must describe level untrusted"),
            "{err}"
        );
    }

    #[test]
    fn project_file_narrows() {
        let eff = with_project(
            TrustLevel::Session,
            "levels:\n  session:\n    mounts:\n      workspace: ro\n    resources:\n      memory: 128m\n      timeout: 30s\n    output:\n      max_files: 10\n",
        )
        .unwrap();
        assert_eq!(eff.policy.mounts.workspace, Access::Ro);
        assert_eq!(eff.policy.resources.memory, Size(128 << 20));
        assert_eq!(eff.policy.output.max_files, 10);
        assert_eq!(eff.sources.len(), 2);
    }

    #[test]
    fn project_file_cannot_widen_and_says_where() {
        let yaml = "levels:\n  untrusted:\n    resources:\n      memory: 8g\n";
        let err = with_project(TrustLevel::Untrusted, yaml).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(":4:7:"), "{msg}");
        assert!(
            msg.contains("resources.memory") && msg.contains("8GiB"),
            "{msg}"
        );
        for yaml in [
            "levels:\n  untrusted:\n    mounts:\n      repo: ro\n",
            "levels:\n  workspace:\n    network:\n      allow_opt_in: true\n",
            "levels:\n  untrusted:\n    env:\n      pass: [HOME]\n",
            "levels:\n  untrusted:\n    output:\n      max_total_bytes: 1g\n",
            "levels:\n  untrusted:\n    runtime: runc-privileged\n",
            "levels:\n  untrusted:\n    env:\n      set:\n        LD_PRELOAD: /input/x.so\n",
            "levels:\n  untrusted:\n    resources:\n      cpus: 0.0000000001\n",
        ] {
            let level = if yaml.contains("workspace:") {
                TrustLevel::Workspace
            } else {
                TrustLevel::Untrusted
            };
            assert!(with_project(level, yaml).is_err(), "{yaml}");
        }
    }

    #[test]
    fn project_file_for_another_level_leaves_this_one_alone() {
        let eff = with_project(
            TrustLevel::Untrusted,
            "levels:\n  full:\n    resources:\n      cpus: 0.5\n",
        )
        .unwrap();
        assert_eq!(eff.policy, builtin(TrustLevel::Untrusted));
    }

    #[test]
    fn project_file_typos_are_located() {
        let err = with_project(
            TrustLevel::Untrusted,
            "levels:\n  untrusted:\n    resorces:\n      memory: 1m\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains(":3:"), "{err}");
        let err = with_project(TrustLevel::Untrusted, "levels:\n  untrustd: {}\n").unwrap_err();
        assert!(err.to_string().contains("untrustd"), "{err}");
    }

    #[test]
    fn run_flags_lower_but_never_raise() {
        let mut p = builtin(TrustLevel::Untrusted);
        narrow_for_run(
            &mut p,
            Some(Size(256 << 20)),
            Some(Limit::parse("30s").unwrap()),
        )
        .unwrap();
        assert_eq!(p.resources.memory, Size(256 << 20));
        let err = narrow_for_run(&mut p, Some(Size(1 << 30)), None).unwrap_err();
        assert!(err.to_string().contains("--memory"), "{err}");
        assert!(narrow_for_run(&mut p, None, Some(Limit::parse("1h").unwrap())).is_err());
    }

    #[test]
    fn the_input_cap_has_a_ceiling_narrows_and_is_only_lowered_by_the_flag() {
        let mut p = builtin(TrustLevel::Untrusted);
        assert_eq!(p.input.max_total_bytes, Size(1 << 30));
        // A project file lowers it and cannot raise it.
        let eff = with_project(
            TrustLevel::Untrusted,
            "levels:\n  untrusted:\n    input:\n      max_total_bytes: 10MiB\n",
        )
        .unwrap();
        assert_eq!(eff.policy.input.max_total_bytes, Size(10 << 20));
        let err = with_project(
            TrustLevel::Untrusted,
            "levels:\n  untrusted:\n    input:\n      max_total_bytes: 2GiB\n",
        )
        .unwrap_err();
        assert!(matches!(err, PolicyError::Widen { .. }), "{err}");
        // A policy file cannot go past its level's ceiling.
        let text = include_str!("../../../policies/untrusted.yaml")
            .replace("max_total_bytes: 1GiB", "max_total_bytes: 1TiB");
        let err = Policy::from_yaml(&text, "u.yaml", TrustLevel::Untrusted).unwrap_err();
        assert!(err.to_string().contains("input.max_total_bytes"), "{err}");
        // The flag only lowers.
        narrow_input(&mut p, Some(Size(4096))).unwrap();
        assert_eq!(p.input.max_total_bytes, Size(4096));
        assert!(narrow_input(&mut p, Some(Size(8192))).is_err());
        // Policy files from before the field existed still load.
        let old = include_str!("../../../policies/untrusted.yaml")
            .replace("input:\n  max_total_bytes: 1GiB\n", "");
        let p = Policy::from_yaml(&old, "old.yaml", TrustLevel::Untrusted).unwrap();
        assert_eq!(p.input, InputLimits::default());
    }

    #[test]
    fn the_model_section_narrows_and_an_old_file_grants_no_model() {
        let eff = with_project(
            TrustLevel::Untrusted,
            "levels:\n  untrusted:\n    model:\n      allow: []\n      max_requests: 3\n      request_timeout: 10s\n",
        )
        .unwrap();
        assert!(!eff.policy.model.grants_access());
        assert_eq!(eff.policy.model.max_requests, 3);
        for (yaml, key) in [
            ("    model:\n      allow: [gpt-4o]\n", "model.allow"),
            (
                "    model:\n      max_requests: 100000\n",
                "model.max_requests",
            ),
            (
                "    model:\n      max_request_bytes: 1GiB\n",
                "model.max_request_bytes",
            ),
            (
                "    model:\n      request_timeout: 1h\n",
                "model.request_timeout",
            ),
            (
                "    model:\n      max_concurrent: 0\n",
                "model.max_concurrent",
            ),
            ("    model:\n      base_url: http://evil\n", "base_url"),
            ("    model:\n      key: sk-x\n", "key"),
        ] {
            let text = format!("levels:\n  untrusted:\n{yaml}");
            let err = with_project(TrustLevel::Untrusted, &text).unwrap_err();
            assert!(err.to_string().contains(key), "{yaml}: {err}");
        }
        let old = BUILTIN[0].1.split("\n# Model access").next().unwrap();
        let p = Policy::from_yaml(old, "old.yaml", TrustLevel::Untrusted).unwrap();
        assert_eq!(p.model, ModelPolicy::default());
        assert!(!p.model.grants_access());
        let bad = BUILTIN[0].1.replace("allow: [host]", "allow: [\"a b\"]");
        assert!(Policy::from_yaml(&bad, "u.yaml", TrustLevel::Untrusted).is_err());
        let bad = BUILTIN[0]
            .1
            .replace("max_request_bytes: 1MiB", "max_request_bytes: 1GiB");
        assert!(Policy::from_yaml(&bad, "u.yaml", TrustLevel::Untrusted).is_err());
    }

    #[test]
    fn locate_finds_nested_keys() {
        let text = "a:\n  b:\n    c: 1\n  d: 2\nb:\n  c: 3\n";
        assert_eq!(locate(text, &["a", "b", "c"]), Some((3, 5)));
        assert_eq!(locate(text, &["b", "c"]), Some((6, 3)));
        assert_eq!(locate(text, &["a", "c"]), None);
    }

    #[test]
    fn project_file_is_found_walking_up() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("x/y");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(dir.path().join(PROJECT_FILE), "levels: {}\n").unwrap();
        assert_eq!(
            find_project_file(&deep),
            Some(dir.path().join(PROJECT_FILE))
        );
    }

    #[test]
    fn project_file_search_stops_at_the_repository_root() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(repo.join("sub")).unwrap();
        std::fs::write(dir.path().join(PROJECT_FILE), "levels: {}\n").unwrap();
        assert_eq!(find_project_file(&repo.join("sub")), None);
        std::fs::write(repo.join(PROJECT_FILE), "levels: {}\n").unwrap();
        assert_eq!(
            find_project_file(&repo.join("sub")),
            Some(repo.join(PROJECT_FILE))
        );
    }

    #[test]
    fn a_project_file_others_can_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(PROJECT_FILE);
        std::fs::write(&path, "levels: {}\n").unwrap();
        let mode = |p: &Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
        mode(&path, 0o644).unwrap();
        mode(dir.path(), 0o755).unwrap();
        assert!(load(TrustLevel::Untrusted, None, Some(&path)).is_ok());
        mode(&path, 0o666).unwrap();
        let err = load(TrustLevel::Untrusted, None, Some(&path)).unwrap_err();
        assert!(
            matches!(err, PolicyError::UnsafeProjectFile { .. }),
            "{err}"
        );
        mode(&path, 0o644).unwrap();
        mode(dir.path(), 0o777).unwrap();
        let err = load(TrustLevel::Untrusted, None, Some(&path)).unwrap_err();
        assert!(
            err.to_string().contains("directory is writable by others"),
            "{err}"
        );
        mode(dir.path(), 0o755).unwrap();
        let link = dir.path().join("l.yaml");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(load(TrustLevel::Untrusted, None, Some(&link)).is_err());
    }

    #[test]
    fn runtimes_are_chosen_only_from_the_levels_list_and_a_choice_is_required() {
        let mut p = load(TrustLevel::Untrusted, None, None).unwrap().policy;
        assert_eq!(p.allowed_runtimes(), ["runc", "runsc"]);
        assert_eq!((p.own_runtime(), p.runtime_required), ("runc", false));
        let err = p.clone().choose_runtime("kata").unwrap_err().to_string();
        assert!(
            err.contains("does not allow") && err.contains("runc, runsc"),
            "{err}"
        );
        p.choose_runtime("runsc").unwrap();
        assert_eq!(
            (p.runtime.as_deref(), p.runtime_required),
            (Some("runsc"), true)
        );
        p.validate().unwrap();
        // A policy file's list must hold its own runtime; required needs one.
        let mut bad = p.clone();
        bad.runtimes = vec!["runc".into()];
        assert!(bad.validate().is_err());
        let mut bad = p.clone();
        bad.runtime = None;
        assert!(bad.validate().is_err());
    }
}
