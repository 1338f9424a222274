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

/// A new session, staged-commit or batch id: a random UUIDv4 in 32 hex digits.
///
/// Ids are random from their first digit so that what people see and paste back, a short
/// prefix, differs between ids made together. (They were UUIDv7s, whose first 12 digits are a
/// millisecond timestamp: ids of one batch all began with the same 8 to 10 digits and differed
/// only in the last one or two of the 12 shown.) Nothing orders by id: records, manifests and
/// batch records carry `created_at`, and listings sort by it. Ids of either kind resolve from
/// any unique prefix ([`resolve_id`]), so old state directories keep working.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The fewest hex digits a printed id has (as git's abbreviated hashes): 8 random digits are
/// unique among thousands of ids, and a longer prefix is printed when two ids share 8.
pub const MIN_PREFIX: usize = 8;

/// The short form for where no listing is at hand (branch names, commit messages, audit lines):
/// the first 12 digits. Of a random id that is 48 bits, unique in any state directory.
pub fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// Each id's shortest prefix of at least [`MIN_PREFIX`] characters that no other id of `ids`
/// starts with (the whole id when another id equals it or extends it). What listings print:
/// pasted back, it resolves to exactly that id while no new id shares it.
pub fn unique_prefixes<'a>(
    ids: impl IntoIterator<Item = &'a str>,
) -> std::collections::HashMap<String, String> {
    let mut sorted: Vec<&str> = ids.into_iter().collect();
    sorted.sort_unstable();
    let common = |a: &str, b: &str| a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    let mut out = std::collections::HashMap::with_capacity(sorted.len());
    for (i, id) in sorted.iter().enumerate() {
        let before = i.checked_sub(1).map_or(0, |j| common(sorted[j], id));
        let after = sorted.get(i + 1).map_or(0, |next| common(next, id));
        let want = (before.max(after) + 1).max(MIN_PREFIX);
        // Ids are ASCII hex; a name that is not still gets a prefix on a character boundary.
        let end = id
            .char_indices()
            .map(|(at, c)| at + c.len_utf8())
            .find(|&end| end >= want)
            .unwrap_or(id.len());
        out.insert((*id).to_string(), id[..end].to_string());
    }
    out
}

/// The printed forms of one kind of id ([`unique_prefixes`] over the ids in its directory).
#[derive(Debug, Default)]
pub struct Prefixes(std::collections::HashMap<String, String>);

impl Prefixes {
    /// The unique prefixes of the ids in `dir` named `<id><suffix>`; none (every id printed
    /// with [`short`]) when it cannot be listed.
    pub fn of_dir(dir: &Path, suffix: &str) -> Prefixes {
        let ids = ids_in(dir, suffix).unwrap_or_default();
        Prefixes(unique_prefixes(ids.iter().map(String::as_str)))
    }

    /// The unique prefixes of the ids in `dir` and of `id`, which may not be written yet (a
    /// batch announced before its first record).
    pub fn of_dir_and(dir: &Path, suffix: &str, id: &str) -> Prefixes {
        let mut ids = ids_in(dir, suffix).unwrap_or_default();
        if !ids.iter().any(|i| i == id) {
            ids.push(id.to_string());
        }
        Prefixes(unique_prefixes(ids.iter().map(String::as_str)))
    }

    /// `id`'s printed form: its unique prefix, or [`short`] for an id not in the directory.
    pub fn get<'a>(&'a self, id: &'a str) -> &'a str {
        self.0.get(id).map_or_else(|| short(id), String::as_str)
    }
}

/// The ids in `dir`: entries named `<32 characters><suffix>`.
fn ids_in(dir: &Path, suffix: &str) -> std::io::Result<Vec<String>> {
    Ok(std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|name| name.strip_suffix(suffix).map(str::to_string))
        .filter(|name| name.len() == 32)
        .collect())
}

impl Home {
    /// How staged-commit ids are printed now.
    pub fn staged_prefixes(&self) -> Prefixes {
        Prefixes::of_dir(&self.staged_dir(), "")
    }

    /// How session ids are printed now.
    pub fn session_prefixes(&self) -> Prefixes {
        Prefixes::of_dir(&self.sessions_dir(), "")
    }
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
    let mut found: Vec<String> = ids_in(dir, suffix)
        .map_err(io(dir))?
        .into_iter()
        .filter(|name| name.starts_with(&prefix))
        .collect();
    found.sort();
    match found.len() {
        0 => Err(not_found()),
        1 => Ok(found.remove(0)),
        _ => {
            let printed = unique_prefixes(found.iter().map(String::as_str));
            Err(HomeError::Ambiguous {
                kind,
                id: prefix,
                candidates: found.iter().map(|s| printed[s].clone()).collect(),
            })
        }
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

    /// Checks `printed` against its definition: a prefix of its id, at least [`MIN_PREFIX`]
    /// long (or the whole id), no other id starts with it, and one character less would not do.
    fn assert_unique_prefixes(ids: &[String], printed: &std::collections::HashMap<String, String>) {
        assert_eq!(printed.len(), ids.len());
        for id in ids {
            let p = &printed[id];
            assert!(
                id.starts_with(p.as_str()) && (p.len() >= MIN_PREFIX || p == id),
                "{p}"
            );
            let sharing = |q: &str| ids.iter().filter(|o| o.starts_with(q)).count();
            assert_eq!(sharing(p), 1, "{p} is not unique");
            if p.len() > MIN_PREFIX {
                assert!(sharing(&p[..p.len() - 1]) > 1, "{p} is longer than needed");
            }
        }
    }

    #[test]
    fn new_ids_are_random_first_uuids() {
        let ids: Vec<String> = (0..2000).map(|_| new_id()).collect();
        let parsed = uuid::Uuid::parse_str(&ids[0]).unwrap();
        assert_eq!(parsed.get_version_num(), 4);
        assert!(ids.iter().all(|id| id.len() == 32));
        // Made in one burst, they do not share a timestamp: their first digits spread out.
        let firsts: std::collections::BTreeSet<char> =
            ids.iter().filter_map(|id| id.chars().next()).collect();
        assert_eq!(firsts.len(), 16);
        assert_unique_prefixes(&ids, &unique_prefixes(ids.iter().map(String::as_str)));
    }

    #[test]
    fn unique_prefixes_grow_past_shared_prefixes() {
        let ids: Vec<String> = [
            "aaaaaaaa11111111111111111111111a",
            "aaaaaaaa11111111111111111111111b",
            "aaaaaaab22222222222222222222222c",
            "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
        ]
        .map(String::from)
        .to_vec();
        let printed = unique_prefixes(ids.iter().map(String::as_str));
        assert_eq!(printed[&ids[0]], ids[0], "only the last digit differs");
        assert_eq!(printed[&ids[2]], "aaaaaaab");
        assert_eq!(printed[&ids[3]], "bbbbbbbb");
        assert_unique_prefixes(&ids, &printed);
        assert_eq!(
            unique_prefixes(["abc"])["abc"],
            "abc",
            "a short name is printed whole"
        );
    }

    #[test]
    fn fifty_uuidv7s_from_one_millisecond_get_prefixes_that_resolve() {
        // Ids older state directories hold: the same 12-digit timestamp on all of them.
        let ids: Vec<String> = (0..50)
            .map(|_| {
                let tail: [u8; 10] = uuid::Uuid::new_v4().into_bytes()[..10].try_into().unwrap();
                uuid::Builder::from_unix_timestamp_millis(1_700_000_000_000, &tail)
                    .into_uuid()
                    .simple()
                    .to_string()
            })
            .collect();
        let printed = unique_prefixes(ids.iter().map(String::as_str));
        assert_unique_prefixes(&ids, &printed);
        assert!(
            printed.values().all(|p| p.len() > 12),
            "the timestamp is shared"
        );
        let dir = tempfile::tempdir().unwrap();
        for id in &ids {
            std::fs::create_dir(dir.path().join(id)).unwrap();
        }
        let listed = Prefixes::of_dir(dir.path(), "");
        for id in &ids {
            assert_eq!(
                resolve_id(dir.path(), listed.get(id), "session").unwrap(),
                *id
            );
        }
        let err = resolve_id(dir.path(), &ids[0][..12], "session").unwrap_err();
        let HomeError::Ambiguous { candidates, .. } = err else {
            panic!("{err}")
        };
        assert_eq!(candidates.len(), 50);
        for c in candidates {
            assert_eq!(
                resolve_id(dir.path(), &c, "session")
                    .unwrap()
                    .get(..c.len()),
                Some(&*c)
            );
        }
    }

    #[test]
    fn ids_resolve_by_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let a = "0123456789abcdef0123456789abcdef";
        let b = "0123ffffffffffffffffffffffffffff";
        for id in [a, b] {
            std::fs::create_dir(dir.path().join(id)).unwrap();
        }
        assert_eq!(resolve_id(dir.path(), a, "session").unwrap(), a);
        assert_eq!(resolve_id(dir.path(), "0123FF", "session").unwrap(), b);
        let err = resolve_id(dir.path(), "0123", "session").unwrap_err();
        assert!(matches!(err, HomeError::Ambiguous { .. }), "{err}");
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
