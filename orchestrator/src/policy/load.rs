//! Loading: the shipped (or `--policy-dir`) policy for a level, then the project's `golem.yaml`.
//!
//! All YAML parsing in the crate goes through [`parse_yaml`] here, so every file error carries
//! file, line and column the same way; a project file is read only when no one else could have
//! written it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{Location, Narrowing, Origin, Policy, PolicyError, TrustLevel};

/// Shipped policies, compiled in so a fresh binary works anywhere; `--policy-dir` replaces them.
pub(super) const BUILTIN: [(TrustLevel, &str); 4] = [
    (
        TrustLevel::Untrusted,
        include_str!("../../../policies/untrusted.yaml"),
    ),
    (
        TrustLevel::Session,
        include_str!("../../../policies/session.yaml"),
    ),
    (
        TrustLevel::Workspace,
        include_str!("../../../policies/workspace.yaml"),
    ),
    (
        TrustLevel::Full,
        include_str!("../../../policies/full.yaml"),
    ),
];

/// The name a project's narrowing file must have.
pub const PROJECT_FILE: &str = "golem.yaml";

/// Parses YAML into `T`, turning serde's message into `file:line:column: message`.
pub(crate) fn parse_yaml<T: serde::de::DeserializeOwned>(
    text: &str,
    file: &str,
) -> Result<T, PolicyError> {
    serde_yaml::from_str(text).map_err(|e| {
        let line_col = e.location().map(|l| (l.line(), l.column()));
        let mut message = e.to_string();
        if let Some((l, c)) = line_col {
            let suffix = format!(" at line {l} column {c}");
            if let Some(i) = message.find(&suffix) {
                message.replace_range(i..i + suffix.len(), "");
            }
        }
        PolicyError::Invalid {
            at: Location {
                file: file.to_string(),
                line_col,
            },
            message,
        }
    })
}

/// Finds the line and column of a nested block-style key, for errors found after parsing.
///
/// serde_yaml keeps no spans once a value is built, and narrowing errors are found only by
/// comparing two parsed policies; a small indentation walk recovers the position well enough for
/// the block style every policy uses. Flow style simply yields `None`.
pub(crate) fn locate(text: &str, path: &[&str]) -> Option<(usize, usize)> {
    let mut stack: Vec<(usize, &str)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indent = line.len() - trimmed.len();
        let Some((key, _)) = trimmed.split_once(':') else {
            continue;
        };
        let key = key.trim().trim_matches(|c| c == '"' || c == '\'');
        if key.is_empty() || key.contains(' ') {
            continue;
        }
        while stack.last().is_some_and(|(ind, _)| *ind >= indent) {
            stack.pop();
        }
        stack.push((indent, key));
        if stack.len() == path.len() && stack.iter().zip(path).all(|((_, a), b)| a == b) {
            return Some((i + 1, indent + 1));
        }
    }
    None
}

/// The project file: per-level narrowings. Other sections may be added by later features.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ProjectFile {
    #[serde(default)]
    levels: BTreeMap<TrustLevel, Narrowing>,
}

/// A policy after every layer was applied, with the files that shaped it.
#[derive(Debug, Clone, Serialize)]
pub struct Effective {
    /// The resulting policy.
    #[serde(flatten)]
    pub policy: Policy,
    /// Files (or `builtin:...`) that were applied, in order.
    pub sources: Vec<String>,
}

/// Loads the effective policy for `level`: the shipped (or `policy_dir`) policy, then the project file.
pub fn load(
    level: TrustLevel,
    policy_dir: Option<&Path>,
    project_file: Option<&Path>,
) -> Result<Effective, PolicyError> {
    let (mut policy, base_source) = base(level, policy_dir)?;
    let mut sources = vec![base_source];
    if let Some(path) = project_file {
        let text = read_owned_file(path)?;
        let shown = path.display().to_string();
        if apply_project(&mut policy, &text, &shown)? {
            sources.push(shown);
        }
    }
    Ok(Effective { policy, sources })
}

/// The level's own policy and the name it is shown under: a `--policy-dir` file or the shipped one.
fn base(level: TrustLevel, policy_dir: Option<&Path>) -> Result<(Policy, String), PolicyError> {
    match policy_dir {
        Some(dir) => {
            let path = dir.join(format!("{}.yaml", level.as_str()));
            let text = std::fs::read_to_string(&path).map_err(|source| PolicyError::Read {
                path: path.clone(),
                source,
            })?;
            let shown = path.display().to_string();
            Ok((Policy::from_yaml(&text, &shown, level)?, shown))
        }
        None => {
            let text = BUILTIN
                .iter()
                .find(|(l, _)| *l == level)
                .map(|(_, t)| *t)
                .unwrap_or_default();
            let shown = format!("builtin:policies/{}.yaml", level.as_str());
            Ok((Policy::from_yaml(text, &shown, level)?, shown))
        }
    }
}

/// Applies a project file's narrowing for the policy's level, if the file has one, and says
/// whether it did. Kept apart from reading the file so the text path can be tested (and
/// compared with the other entry points) without a file on disk.
pub(crate) fn apply_project(
    policy: &mut Policy,
    text: &str,
    file: &str,
) -> Result<bool, PolicyError> {
    let project: ProjectFile = parse_yaml(text, file)?;
    match project.levels.get(&policy.level) {
        Some(narrowing) => {
            policy.narrow(narrowing, Origin::ProjectFile { file, text })?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Finds `golem.yaml` by walking up from `start`, stopping at the repository root (the first
/// directory holding `.git`) or the person's home directory: a file above them belongs to
/// someone else's tree (a shared `/tmp`, another user's checkout) and must not shape this run.
pub fn find_project_file(start: &Path) -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    for dir in start.ancestors() {
        let candidate = dir.join(PROJECT_FILE);
        if candidate.symlink_metadata().is_ok() {
            return Some(candidate);
        }
        if dir.join(".git").exists() || home.as_deref() == Some(dir) {
            break;
        }
    }
    None
}

/// Refuses a project file that someone other than the invoking user could have written: owned
/// by another user, group/world-writable, a link, or in a directory others can write (which
/// lets them replace it). Checked on the open file, so it is the file that is then read.
/// The host's model configuration (`gateway::config`) is read the same way, for the same reason.
pub(crate) fn read_owned_file(path: &Path) -> Result<String, PolicyError> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let unsafe_file = |why: String| PolicyError::UnsafeProjectFile {
        path: path.to_path_buf(),
        why,
    };
    let read = |source| PolicyError::Read {
        path: path.to_path_buf(),
        source,
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let dir = path.parent().unwrap_or(Path::new("."));
    let dmeta = std::fs::metadata(dir).map_err(read)?;
    if dmeta.mode() & 0o022 != 0 {
        return Err(unsafe_file(format!(
            "its directory is writable by others (mode {:o})",
            dmeta.mode() & 0o7777
        )));
    }
    if dmeta.uid() != me && dmeta.uid() != 0 {
        return Err(unsafe_file(format!(
            "its directory is owned by uid {}",
            dmeta.uid()
        )));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                unsafe_file("it is a symbolic link".into())
            } else {
                read(e)
            }
        })?;
    let meta = file.metadata().map_err(read)?;
    if !meta.is_file() {
        return Err(unsafe_file("it is not a regular file".into()));
    }
    if meta.uid() != me {
        return Err(unsafe_file(format!(
            "it is owned by uid {}, not by you (uid {me})",
            meta.uid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(unsafe_file(format!(
            "it is writable by others (mode {:o})",
            meta.mode() & 0o7777
        )));
    }
    let mut text = String::new();
    file.take(1 << 20).read_to_string(&mut text).map_err(read)?;
    Ok(text)
}
