//! The state directory (`.golem/`): where sessions, the stage, the audit log and the workspace live.
//!
//! Everything golem-orch remembers is under one directory so that a project's state travels with
//! it and tests can give every case its own. Paths are absolute because they become bind mounts.

use std::path::{Path, PathBuf};

/// Why the state directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    /// Creating or resolving a directory failed.
    #[error("state directory {path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// An id given by a person matched nothing.
    #[error("no {kind} matches {id:?}")]
    NotFound {
        /// `session` or `staged commit`.
        kind: &'static str,
        /// What was asked.
        id: String,
    },
    /// An id prefix matched more than one.
    #[error("{id:?} matches several {kind}s: {}; give more characters", candidates.join(", "))]
    Ambiguous {
        /// `session` or `staged commit`.
        kind: &'static str,
        /// What was asked.
        id: String,
        /// What it matched.
        candidates: Vec<String>,
    },
}

/// The resolved state directory.
#[derive(Debug, Clone)]
pub struct Home {
    root: PathBuf,
}

impl Home {
    /// Uses `explicit` (from `--home`/`GOLEM_HOME`) or `./.golem`, creating it, and makes it absolute.
    pub fn open(explicit: Option<&Path>) -> Result<Home, HomeError> {
        let wanted = match explicit {
            Some(p) => p.to_path_buf(),
            None => PathBuf::from(".golem"),
        };
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| HomeError::Io { path, source }
        };
        std::fs::create_dir_all(&wanted).map_err(io(&wanted))?;
        let root = wanted.canonicalize().map_err(io(&wanted))?;
        let home = Home { root };
        for dir in [home.sessions_dir(), home.staged_dir()] {
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        }
        home.mark()?;
        Ok(home)
    }

    /// Where `--dry-run` says things would go, without creating anything.
    pub fn peek(explicit: Option<&Path>) -> Home {
        let wanted = explicit.map_or_else(|| PathBuf::from(".golem"), Path::to_path_buf);
        let root = std::path::absolute(&wanted).unwrap_or(wanted);
        Home { root }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }
    /// One directory per session: its record, inputs and logs.
    pub fn sessions_dir(&self) -> PathBuf {
        self.root.join("sessions")
    }
    /// A session's directory.
    pub fn session_dir(&self, id: &str) -> PathBuf {
        self.sessions_dir().join(id)
    }
    /// The clearance stage.
    pub fn staged_dir(&self) -> PathBuf {
        self.root.join("staged")
    }
    /// The project's persistent scratch space mounted at `/workspace` from the `session` level up.
    pub fn workspace_dir(&self) -> PathBuf {
        self.root.join("workspace")
    }
    /// The append-only audit log.
    pub fn audit_path(&self) -> PathBuf {
        self.root.join("audit.jsonl")
    }
}

/// The file that marks a directory as a golem-orch state directory, whatever its name, so a
/// session that mounts a repository can find and hide every one inside it
/// (`session::state_dirs_in`).
pub const STATE_MARKER: &str = ".golem-orch-state";

impl Home {
    /// Writes [`STATE_MARKER`] once; its content is only a note for a person.
    fn mark(&self) -> Result<(), HomeError> {
        let path = self.root.join(STATE_MARKER);
        if !path.exists() {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&path)
                .and_then(|mut f| {
                    f.write_all(b"golem-orch state directory; hidden from every worker\n")
                })
                .map_err(|source| HomeError::Io { path, source })?;
        }
        Ok(())
    }
}

/// A new session or staged-commit id: UUIDv7, so ids sort by creation time.
pub fn new_id() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}

/// The short form people see and type (ids also resolve from any unique prefix).
pub fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// Resolves a full id or unique prefix among the entries of `dir`.
pub fn resolve_id(dir: &Path, prefix: &str, kind: &'static str) -> Result<String, HomeError> {
    resolve_id_in(dir, prefix, kind, "")
}

/// [`resolve_id`] among entries named `<id><suffix>` (for example batch records, `<id>.json`).
pub fn resolve_id_in(
    dir: &Path,
    prefix: &str,
    kind: &'static str,
    suffix: &str,
) -> Result<String, HomeError> {
    let not_found = || HomeError::NotFound {
        kind,
        id: prefix.to_string(),
    };
    if prefix.len() < 4 || !prefix.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(not_found());
    }
    let prefix = prefix.to_ascii_lowercase();
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .map_err(|source| HomeError::Io {
            path: dir.to_path_buf(),
            source,
        })?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|name| name.strip_suffix(suffix).map(str::to_string))
        .filter(|name| name.len() == 32 && name.starts_with(&prefix))
        .collect();
    found.sort();
    match found.len() {
        0 => Err(not_found()),
        1 => Ok(found.remove(0)),
        _ => Err(HomeError::Ambiguous {
            kind,
            id: prefix,
            candidates: found.iter().map(|s| short(s).to_string()).collect(),
        }),
    }
}

/// An open file held under an exclusive `flock`, released when dropped (or by the kernel if the
/// process dies), so concurrent golem-orch processes serialise on it without stale lock files.
#[derive(Debug)]
pub struct FileLock {
    file: std::fs::File,
}

impl FileLock {
    /// Opens `path` with `options` and blocks until the exclusive lock is held.
    pub fn open(path: &Path, options: &std::fs::OpenOptions) -> std::io::Result<FileLock> {
        use std::os::fd::AsRawFd;
        let file = options.open(path)?;
        // SAFETY: flock only reads the descriptor, which `file` keeps open for the guard's life.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(FileLock { file })
    }

    /// The locked file, for reading and writing under the lock.
    pub fn file(&mut self) -> &mut std::fs::File {
        &mut self.file
    }
}

/// Writes a file atomically: a temporary sibling, fsync, rename, fsync of the directory.
///
/// Records are rewritten as sessions progress; a crash must leave either the old or the new
/// version, never a torn one.
pub fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new().prefix(".tmp-").tempfile_in(dir)?;
    tmp.write_all(data)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_sort_by_time_and_resolve_by_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let a = new_id();
        let b = new_id();
        assert!(a < b);
        for id in [&a, &b] {
            std::fs::create_dir(dir.path().join(id)).unwrap();
        }
        assert_eq!(resolve_id(dir.path(), &a, "session").unwrap(), a);
        // UUIDv7s made in the same millisecond share a long prefix.
        let common = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
        if common >= 4 {
            let err = resolve_id(dir.path(), &a[..common], "session").unwrap_err();
            assert!(matches!(err, HomeError::Ambiguous { .. }), "{err}");
        }
        assert!(resolve_id(dir.path(), "ffffffff", "session").is_err());
        assert!(resolve_id(dir.path(), "../x", "session").is_err());
        assert!(resolve_id(dir.path(), "ab", "session").is_err());
    }

    #[test]
    fn atomic_writes_replace_whole_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary left behind"
        );
    }
}
