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
    /// An existing state directory (or a file in it) that other users could change or that
    /// belongs to someone else: trusting it would let them forge what golem-orch reads back.
    #[error("state directory {path} {why}; refusing to use it (it must be yours and not writable by group or others)")]
    Unsafe {
        /// The directory or file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The state directory's gc token could not be read or created.
    #[error("state directory: {0}")]
    Secret(#[from] crate::secret::SecretError),
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
    /// This state directory's gc token (absent for [`Home::peek`]).
    token: Option<crate::secret::Secret>,
}

impl Home {
    /// Uses `explicit` (from `--home`/`GOLEM_HOME`) or `./.golem`, creating it, and makes it absolute.
    pub fn open(explicit: Option<&Path>) -> Result<Home, HomeError> {
        let wanted = match explicit {
            Some(p) => p.to_path_buf(),
            None => PathBuf::from(".golem"),
        };
        create_state_dir(&wanted).map_err(io(&wanted))?;
        let root = wanted.canonicalize().map_err(io(&wanted))?;
        let mut home = Home { root, token: None };
        home.secure()?;
        for dir in [home.sessions_dir(), home.staged_dir()] {
            create_private_dir(&dir).map_err(io(&dir))?;
        }
        home.token = Some(crate::secret::load_or_create(&home.token_path())?);
        home.mark()?;
        Ok(home)
    }

    /// Where `--dry-run` says things would go, without creating anything.
    pub fn peek(explicit: Option<&Path>) -> Home {
        let wanted = explicit.map_or_else(|| PathBuf::from(".golem"), Path::to_path_buf);
        let root = std::path::absolute(&wanted).unwrap_or(wanted);
        Home { root, token: None }
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

/// The state directory's file modes and ownership (issue 11, class 3): what golem-orch creates
/// here is the invoking user's alone, and what it finds here is trusted only when nobody else
/// could have changed it. Kept apart from [`Home::open`]'s layout so each is easy to read.
impl Home {
    /// The gc token: marks the engine objects this state directory created ([`Home::tag`]).
    pub fn token_path(&self) -> PathBuf {
        self.root.join(TOKEN_FILE)
    }

    /// The label value that proves a session's engine object was created by this state
    /// directory: an HMAC of the session id under the token, which no image can predict and
    /// which does not reveal the token. `None` without a token ([`Home::peek`]).
    pub fn tag(&self, session: &str) -> Option<String> {
        self.token.as_ref().map(|t| session_tag(t, session))
    }

    /// Refuses a state directory (or one of its key entries) that is not the invoking user's
    /// or that group or others can write, and tightens the modes of the user's own entries
    /// left wider by older versions or a permissive umask.
    fn secure(&self) -> Result<(), HomeError> {
        check_owned(&self.root, true)?;
        for (name, dir) in [
            ("sessions", true),
            ("staged", true),
            ("batches", true),
            ("bin", true),
            ("audit.jsonl", false),
            ("audit.key", false),
            (TOKEN_FILE, false),
        ] {
            let path = self.root.join(name);
            if std::fs::symlink_metadata(&path).is_ok() {
                check_owned(&path, dir)?;
            }
        }
        Ok(())
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
                .map_err(io(&path))?;
        }
        Ok(())
    }
}

/// The gc token's file name in the state directory.
pub const TOKEN_FILE: &str = "gc.token";

/// [`Home::tag`] for a token read from some state directory (gc checks labels with it).
pub fn session_tag(token: &crate::secret::Secret, session: &str) -> String {
    token.mac_hex(format!("golem.token:{session}").as_bytes())
}

/// An I/O failure on `path`, as the state directory reports it.
fn io(path: &Path) -> impl FnOnce(std::io::Error) -> HomeError + '_ {
    move |source| HomeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Checks one existing entry: the right type (never a symlink), owned by the effective user,
/// not group- or world-writable; then drops any group/other bits it still has.
fn check_owned(path: &Path, dir: bool) -> Result<(), HomeError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let unsafe_ = |why: String| HomeError::Unsafe {
        path: path.to_path_buf(),
        why,
    };
    let meta = std::fs::symlink_metadata(path).map_err(io(path))?;
    if meta.file_type().is_symlink() {
        return Err(unsafe_("is a symlink".into()));
    }
    if dir != meta.is_dir() || (!dir && !meta.is_file()) {
        return Err(unsafe_(format!(
            "is not a {}",
            if dir { "directory" } else { "regular file" }
        )));
    }
    let me = crate::secret::euid();
    if meta.uid() != me {
        return Err(unsafe_(format!(
            "is owned by uid {}, not by you (uid {me})",
            meta.uid()
        )));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(unsafe_(format!(
            "has mode {mode:04o}: group or others can write it"
        )));
    }
    if mode & 0o077 != 0 {
        let private = if dir { 0o700 } else { 0o600 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(private))
            .map_err(io(path))?;
    }
    Ok(())
}

/// Creates the state directory itself 0700 whatever the umask (its missing parents get the
/// usual modes: they are not golem-orch's).
fn create_state_dir(path: &Path) -> std::io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    create_private_dir(path)
}

/// Creates one directory 0700, whatever the umask; an existing directory is left as it is
/// (the state directory's own entries are checked by `Home::open`).
pub fn create_private_dir(path: &Path) -> std::io::Result<()> {
    match create_new_private_dir(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && path.is_dir() => Ok(()),
        other => other,
    }
}

/// Creates one new directory 0700, whatever the umask; one that already exists is an error
/// (for directories that must never be reused, such as a staged commit's).
pub fn create_new_private_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().mode(0o700).create(path)?;
    // The umask can only remove bits from 0700; chmod anyway so the mode is exact.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
}

/// Creates a directory and its missing parents 0700 each (for directories inside the state
/// directory, such as `batches/` or a session's).
pub fn create_private_dir_all(path: &Path) -> std::io::Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_private_dir_all(parent)?;
    }
    create_private_dir(path)
}

/// Writes a file only its owner can read (0600 whatever the umask, also when it already
/// existed), for logs and other files in the state directory that are not rewritten atomically.
pub fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(data)
}

/// A new session or staged-commit id: a UUIDv7, so ids sort by creation time. Its first 12 hex
/// digits, the short form people see and paste back, are its millisecond timestamp, so that
/// timestamp is made strictly increasing within the process: a batch that starts several
/// sessions in one millisecond still gives each its own short id (plain `now_v7` gave them the
/// same one, and `show` refused the pasted id as ambiguous).
pub fn new_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST_MS: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mut prev = LAST_MS.load(Ordering::Relaxed);
    let ms = loop {
        let next = now.max(prev.saturating_add(1));
        match LAST_MS.compare_exchange_weak(prev, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => break next,
            Err(seen) => prev = seen,
        }
    };
    let random = uuid::Uuid::new_v4().into_bytes();
    let mut tail = [0u8; 10];
    tail.copy_from_slice(&random[..10]);
    uuid::Builder::from_unix_timestamp_millis(ms, &tail)
        .into_uuid()
        .simple()
        .to_string()
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
        .map_err(io(dir))?
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
    // tempfile creates 0600; say so, so a record never depends on its defaults or the umask.
    tmp.as_file().set_permissions(perms_0600())?;
    tmp.write_all(data)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()
}

fn perms_0600() -> std::fs::Permissions {
    std::os::unix::fs::PermissionsExt::from_mode(0o600)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_made_in_one_burst_have_distinct_short_forms_in_creation_order() {
        let ids: Vec<String> = (0..2000).map(|_| new_id()).collect();
        let shorts: std::collections::BTreeSet<&str> = ids.iter().map(|id| short(id)).collect();
        assert_eq!(shorts.len(), ids.len(), "two ids share a short form");
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "ids do not sort by creation"
        );
        let parsed = uuid::Uuid::parse_str(&ids[0]).unwrap();
        assert_eq!(parsed.get_version_num(), 7);
    }

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
    fn a_new_state_directory_is_private_and_an_unsafe_one_refused() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("a/.golem");
        let home = Home::open(Some(&root)).unwrap();
        for d in [
            home.root().to_path_buf(),
            home.sessions_dir(),
            home.staged_dir(),
        ] {
            assert_eq!(mode(&d), 0o700, "{}", d.display());
        }
        assert_eq!(mode(&home.token_path()), 0o600);
        let tag = home.tag("s").unwrap();
        assert_eq!(Home::open(Some(&root)).unwrap().tag("s").unwrap(), tag);
        assert_ne!(home.tag("t").unwrap(), tag);
        assert!(Home::peek(Some(&root)).tag("s").is_none());

        // Older, wider modes of the user's own entries are tightened...
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        Home::open(Some(&root)).unwrap();
        assert_eq!(mode(&root), 0o700);
        // ...but anything others can write is refused, and so is a link.
        for bad in [0o777, 0o770, 0o722] {
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(bad)).unwrap();
            let err = Home::open(Some(&root)).unwrap_err();
            assert!(matches!(err, HomeError::Unsafe { .. }), "{err}");
            assert_eq!(err.to_string().lines().count(), 1);
        }
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
        let staged = home.staged_dir();
        std::fs::remove_dir(&staged).unwrap();
        std::os::unix::fs::symlink(dir.path(), &staged).unwrap();
        assert!(matches!(
            Home::open(Some(&root)),
            Err(HomeError::Unsafe { .. })
        ));
    }

    #[test]
    fn private_files_are_0600_even_when_they_existed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("logs.txt");
        std::fs::write(&p, "old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
        write_private(&p, b"new").unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        write_atomic(&p, b"newer").unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
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
