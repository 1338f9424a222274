//! Intake: bring a session's inputs (files, directories, http(s) URLs) into its input directory.
//!
//! The host only moves bytes here: it copies and downloads, hashes, and never parses content.
//! Parsing is the container's job. Every limit holds while streaming: the total input cap
//! (apparent size, so a sparse 1 TiB file is refused before a byte is copied), the download
//! cap, time and redirects. Names are checked, every component of them, because they end up in
//! reports a person reads.
//!
//! Local inputs are opened, never re-resolved: the path a person names may pass through links
//! in its ancestors (that is their path), but its last component and everything below it are
//! opened with `openat(parent_fd, name, O_NOFOLLOW)` and checked with `fstat` on the open fd,
//! and directories are walked by fd. A file swapped for a link after listing is refused, never
//! followed. Downloads resolve and check every hop's address (see [`crate::urlcheck`]).

use std::ffi::{OsStr, OsString};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use rustix::fs::{FileType, Mode, OFlags, Stat};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::urlcheck;

/// What was taken in, as recorded in the session and the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputRecord {
    /// The path or URL the person gave.
    pub source: String,
    /// The path under `/input`.
    pub name: String,
    /// Bytes.
    pub size: u64,
    /// sha256 of the bytes, hex.
    pub sha256: String,
    /// For a URL: every URL requested, in order (the first, then each redirect), so a reviewer
    /// sees where the bytes really came from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hops: Vec<String>,
    /// For a URL: the one that answered with the bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_url: Option<String>,
}

/// Caps for intake.
#[derive(Debug, Clone)]
pub struct IntakeLimits {
    /// Largest download accepted.
    pub max_download_bytes: u64,
    /// Wall-clock limit per download, all redirects included.
    pub download_timeout: Duration,
    /// Redirects followed per download.
    pub max_redirects: usize,
    /// Files taken in per session (directories can be large).
    pub max_files: usize,
    /// Bytes taken in per session, all inputs together, counted by apparent size (holes too),
    /// so a sparse file cannot stand in for a disk's worth of zeros.
    pub max_total_bytes: u64,
    /// The person's `--allow-private-urls`: loopback, private and link-local addresses may be
    /// fetched (their own intranet). Off by default.
    pub allow_private: bool,
}

impl Default for IntakeLimits {
    fn default() -> Self {
        IntakeLimits {
            max_download_bytes: 256 << 20,
            download_timeout: Duration::from_secs(120),
            max_redirects: 5,
            max_files: 10_000,
            max_total_bytes: 1 << 30,
            allow_private: false,
        }
    }
}

/// A file's identity on disk, taken when a batch lists it and compared when its turn comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FileId {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

impl FileId {
    /// The identity in a `stat`.
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    pub fn of(st: &Stat) -> FileId {
        FileId {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
        }
    }
}

/// One thing a person asked to process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A regular file.
    File(PathBuf),
    /// A directory, taken recursively.
    Dir(PathBuf),
    /// An http or https URL.
    Url(reqwest::Url),
    /// A file a batch listed: reached from `root` (the person's path) through `rel`, every
    /// component opened no-follow, and still the file that was listed (`id`).
    Listed {
        /// The path the person named.
        root: PathBuf,
        /// Components below `root` (empty when the person named the file itself).
        rel: Vec<String>,
        /// What was listed.
        id: FileId,
    },
}

/// Why an input could not be taken in.
#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    /// The path does not exist.
    #[error("input {0}: no such file or directory")]
    NotFound(String),
    /// A device, socket, FIFO or other non-file.
    #[error("input {0}: not a regular file or directory")]
    NotAFile(String),
    /// A symlink where an input or anything inside it was expected; following it could pull in
    /// anything on the host.
    #[error("input {0}: is a symbolic link (golem-orch never follows links in or at an input; name or copy the target instead)")]
    Symlink(String),
    /// A file a batch listed was replaced before its turn.
    #[error("input {0}: was replaced after it was listed; refusing to take in a different file")]
    Replaced(String),
    /// A name that would be unreadable or misleading in a report.
    #[error("input {0}: a path component contains control characters (or invisible, bidi or format characters) or is not valid UTF-8")]
    BadName(String),
    /// A URL with an unsupported scheme or no host.
    #[error("input {0}: only http and https URLs are supported")]
    BadUrl(String),
    /// The server answered with an error status.
    #[error("download {url}: server answered {status}")]
    Status {
        /// The URL.
        url: String,
        /// HTTP status.
        status: u16,
    },
    /// Connection, TLS, redirect-limit, refused-address or timeout failure.
    #[error("download {url}: {message}")]
    Download {
        /// The URL.
        url: String,
        /// What failed.
        message: String,
    },
    /// The download was larger than the cap.
    #[error("download {url}: larger than the {limit}-byte cap (raise it with --max-download)")]
    TooLarge {
        /// The URL.
        url: String,
        /// The cap.
        limit: u64,
    },
    /// The inputs together are larger than the session's input cap.
    #[error("input {path}: the session's inputs exceed the input cap of {limit} bytes (policy input.max_total_bytes; --max-input can lower it)")]
    OverCap {
        /// The input that crossed the cap.
        path: String,
        /// The cap.
        limit: u64,
    },
    /// More files than the cap.
    #[error("inputs hold more than {0} files")]
    TooMany(usize),
    /// A directory nested deeper than intake walks.
    #[error("input {0}: directories nested deeper than {MAX_DEPTH} levels")]
    TooDeep(String),
    /// No inputs were given where some are required.
    #[error("no inputs given")]
    Empty,
    /// Local I/O.
    #[error("input {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

/// Deepest directory nesting intake follows (each level holds one open fd).
pub const MAX_DEPTH: usize = 128;

/// A path as an inert one-line string, through the one rendering gate.
pub fn shown(path: &Path) -> String {
    crate::render::path(path)
}

/// Classifies the arguments without touching the network, so bad input fails before a session exists.
pub fn classify(args: &[String]) -> Result<Vec<Source>, IntakeError> {
    args.iter().map(|a| classify_one(a)).collect()
}

fn classify_one(arg: &str) -> Result<Source, IntakeError> {
    if let Some((scheme, _)) = arg.split_once("://") {
        let bad = || IntakeError::BadUrl(shown(Path::new(arg)));
        let url = reqwest::Url::parse(arg).map_err(|_| bad())?;
        if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https")
            || url.host_str().is_none()
        {
            return Err(bad());
        }
        return Ok(Source::Url(url));
    }
    let path = PathBuf::from(arg);
    let (_, st) = open_named(&path)?;
    // Every component ends up in reports (and the last under /input): refuse a bad one before
    // anything is created.
    check_components(&path)?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => Ok(Source::File(path)),
        FileType::Directory => Ok(Source::Dir(path)),
        _ => Err(IntakeError::NotAFile(shown(&path))),
    }
}

/// A short description for dry runs and audit records.
pub fn describe(source: &Source) -> String {
    match source {
        Source::File(p) | Source::Dir(p) => p.display().to_string(),
        Source::Url(u) => u.to_string(),
        Source::Listed { root, rel, .. } => listed_path(root, rel).display().to_string(),
    }
}

fn listed_path(root: &Path, rel: &[String]) -> PathBuf {
    rel.iter().fold(root.to_path_buf(), |p, c| p.join(c))
}

/// Checks every normal component of `path` (not only the last one).
pub fn check_components(path: &Path) -> Result<(), IntakeError> {
    for c in path.components() {
        if let Component::Normal(name) = c {
            check_name_text(name, path)?;
        }
    }
    Ok(())
}

/// Opens the input a person named: its ancestors are resolved as the person's path (links
/// there are theirs), its last component is opened no-follow. Returns the fd and its `fstat`.
pub fn open_named(path: &Path) -> Result<(OwnedFd, Stat), IntakeError> {
    match path.file_name() {
        Some(last) => {
            let parent = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            let dir = rustix::fs::openat(
                rustix::fs::CWD,
                parent,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| open_error(e, path))?;
            open_child(&dir, last, path)
        }
        // `/`, `.` or `..`: a directory by definition, named as the person's own path.
        None => {
            let fd = rustix::fs::openat(
                rustix::fs::CWD,
                path,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| open_error(e, path))?;
            let st = rustix::fs::fstat(&fd).map_err(|e| io_err(path)(e.into()))?;
            Ok((fd, st))
        }
    }
}

/// Opens `name` inside the directory `dir` without following a link, without blocking on a
/// FIFO and without taking a terminal, and `fstat`s the open fd.
fn open_child(dir: impl AsFd, name: &OsStr, path: &Path) -> Result<(OwnedFd, Stat), IntakeError> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| open_error(e, path))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| io_err(path)(e.into()))?;
    Ok((fd, st))
}

fn open_error(e: Errno, path: &Path) -> IntakeError {
    match e {
        Errno::LOOP => IntakeError::Symlink(shown(path)),
        Errno::NOENT => IntakeError::NotFound(shown(path)),
        Errno::NXIO | Errno::OPNOTSUPP => IntakeError::NotAFile(shown(path)),
        other => io_err(path)(other.into()),
    }
}

/// What is left of the session's input cap.
struct Budget {
    cap: u64,
    left: u64,
}

impl Budget {
    /// Takes `n` bytes (apparent size) out of the budget, or refuses `path`.
    fn take(&mut self, n: u64, path: &Path) -> Result<(), IntakeError> {
        if n > self.left {
            return Err(IntakeError::OverCap {
                path: shown(path),
                limit: self.cap,
            });
        }
        self.left -= n;
        Ok(())
    }
}

/// Takes every source into `dest` (an existing empty directory) and returns what was taken, in order.
pub async fn intake(
    sources: &[Source],
    dest: &Path,
    limits: &IntakeLimits,
) -> Result<Vec<InputRecord>, IntakeError> {
    let mut records = Vec::new();
    let mut used: Vec<String> = Vec::new();
    let budget = Arc::new(std::sync::Mutex::new(Budget {
        cap: limits.max_total_bytes,
        left: limits.max_total_bytes,
    }));
    for source in sources {
        match source {
            Source::File(path) | Source::Listed { root: path, .. } => {
                let (rel, expect) = match source {
                    Source::Listed { rel, id, .. } => (rel.clone(), Some(*id)),
                    _ => (Vec::new(), None),
                };
                let full = listed_path(path, &rel);
                check_components(&full)?;
                let name = unique(&mut used, checked_name(&full)?);
                let (root, dst, budget) = (path.clone(), dest.join(&name), budget.clone());
                let (size, sha256) = blocking(move || {
                    let (fd, st) = open_listed(&root, &rel, expect)?;
                    let mut budget = lock(&budget);
                    copy_file(fd, &st, &full, &dst, &mut budget)
                })
                .await?;
                records.push(InputRecord {
                    source: describe(source),
                    name,
                    size,
                    sha256,
                    hops: Vec::new(),
                    final_url: None,
                });
            }
            Source::Dir(path) => {
                check_components(path)?;
                let name = unique(&mut used, checked_name(path)?);
                let (src, dst, max, budget) = (
                    path.clone(),
                    dest.join(&name),
                    limits.max_files.saturating_sub(records.len()),
                    budget.clone(),
                );
                let found = blocking(move || {
                    let (fd, st) = open_named(&src)?;
                    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
                        return Err(IntakeError::NotAFile(shown(&src)));
                    }
                    let mut budget = lock(&budget);
                    let mut walk = Walk {
                        out: Vec::new(),
                        max_files: max,
                        budget: &mut budget,
                    };
                    walk.dir(fd, &src, &dst, String::new(), 0)?;
                    let mut out = walk.out;
                    out.sort();
                    Ok(out)
                })
                .await?;
                for (rel, size, sha256) in found {
                    records.push(InputRecord {
                        source: path.join(&rel).display().to_string(),
                        name: format!("{name}/{rel}"),
                        size,
                        sha256,
                        hops: Vec::new(),
                        final_url: None,
                    });
                }
            }
            Source::Url(url) => {
                let name = unique(&mut used, url_name(url));
                let left = lock(&budget).left;
                let fetched = download(url, &dest.join(&name), limits, left).await?;
                lock(&budget).left -= fetched.size.min(left);
                records.push(InputRecord {
                    source: url.to_string(),
                    name,
                    size: fetched.size,
                    sha256: fetched.sha256,
                    hops: fetched.hops,
                    final_url: Some(fetched.final_url),
                });
            }
        }
        if records.len() > limits.max_files {
            return Err(IntakeError::TooMany(limits.max_files));
        }
    }
    Ok(records)
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock means a panic in another copy; the count is still the best we have.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Lists the regular files under the directory `root` for a batch, by fd and no-follow:
/// links and special files are skipped (intake would refuse them), every name is checked.
/// Returns each file's components below `root` and its identity, sorted.
pub fn list_files(root: &Path) -> Result<Vec<(Vec<String>, FileId)>, IntakeError> {
    fn walk(
        fd: &OwnedFd,
        path: &Path,
        rel: &mut Vec<String>,
        out: &mut Vec<(Vec<String>, FileId)>,
    ) -> Result<(), IntakeError> {
        if rel.len() > MAX_DEPTH {
            return Err(IntakeError::TooDeep(shown(path)));
        }
        for name in list_dir(fd, path)? {
            let child = path.join(&name);
            let name = check_name_text(&name, &child)?;
            let (fd, st) = match open_child(fd, OsStr::new(&name), &child) {
                Ok(x) => x,
                Err(IntakeError::Symlink(_) | IntakeError::NotAFile(_)) => continue,
                Err(e) => return Err(e),
            };
            rel.push(name);
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => walk(&fd, &child, rel, out)?,
                FileType::RegularFile => out.push((rel.clone(), FileId::of(&st))),
                _ => {}
            }
            rel.pop();
        }
        Ok(())
    }
    check_components(root)?;
    let (fd, st) = open_named(root)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return Err(IntakeError::NotAFile(shown(root)));
    }
    let mut out = Vec::new();
    walk(&fd, root, &mut Vec::new(), &mut out)?;
    out.sort();
    Ok(out)
}

/// Opens a listed file again: the root as the person named it, then each component below it
/// no-follow, and checks it is a regular file and (when `expect` is given) the one listed.
pub fn open_listed(
    root: &Path,
    rel: &[String],
    expect: Option<FileId>,
) -> Result<(OwnedFd, Stat), IntakeError> {
    let full = listed_path(root, rel);
    let (mut fd, mut st) = open_named(root)?;
    for comp in rel {
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            return Err(IntakeError::Replaced(shown(&full)));
        }
        (fd, st) = open_child(&fd, OsStr::new(comp), &full)?;
    }
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(IntakeError::NotAFile(shown(&full)));
    }
    if expect.is_some_and(|id| id != FileId::of(&st)) {
        return Err(IntakeError::Replaced(shown(&full)));
    }
    Ok((fd, st))
}

/// A directory walk by fd: every entry is opened relative to its parent's fd, no-follow.
struct Walk<'a> {
    out: Vec<(String, u64, String)>,
    max_files: usize,
    budget: &'a mut Budget,
}

impl Walk<'_> {
    fn dir(
        &mut self,
        src: OwnedFd,
        shown_path: &Path,
        dst: &Path,
        rel: String,
        depth: usize,
    ) -> Result<(), IntakeError> {
        if depth > MAX_DEPTH {
            return Err(IntakeError::TooDeep(shown(shown_path)));
        }
        std::fs::create_dir(dst).map_err(io_err(dst))?;
        set_mode(dst, 0o755)?;
        for name in list_dir(&src, shown_path)? {
            let path = shown_path.join(&name);
            let name = check_name_text(&name, &path)?;
            let child_rel = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let (fd, st) = open_child(&src, OsStr::new(&name), &path)?;
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => {
                    self.dir(fd, &path, &dst.join(&name), child_rel, depth + 1)?
                }
                FileType::RegularFile => {
                    if self.out.len() >= self.max_files {
                        return Err(IntakeError::TooMany(self.max_files));
                    }
                    let (size, sha) = copy_file(fd, &st, &path, &dst.join(&name), self.budget)?;
                    self.out.push((child_rel, size, sha));
                }
                _ => return Err(IntakeError::NotAFile(shown(&path))),
            }
        }
        Ok(())
    }
}

/// The names in a directory open as `fd` (without `.` and `..`), sorted.
pub fn list_dir(fd: &OwnedFd, path: &Path) -> Result<Vec<OsString>, IntakeError> {
    let dir = rustix::fs::Dir::read_from(fd).map_err(|e| io_err(path)(e.into()))?;
    let mut names = Vec::new();
    for entry in dir {
        let entry = entry.map_err(|e| io_err(path)(e.into()))?;
        let bytes = entry.file_name().to_bytes();
        if bytes != b"." && bytes != b".." {
            names.push(OsStr::from_bytes(bytes).to_os_string());
        }
    }
    names.sort();
    Ok(names)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, IntakeError> + Send + 'static,
) -> Result<T, IntakeError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| IntakeError::Io {
            path: "(intake)".into(),
            source: std::io::Error::other(e.to_string()),
        })?
}

/// Checks a name is UTF-8 without dangerous characters (they would forge or hide text in reports).
fn check_name_text(name: &OsStr, path: &Path) -> Result<String, IntakeError> {
    let s = name
        .to_str()
        .ok_or_else(|| IntakeError::BadName(shown(path)))?;
    if s.is_empty() || s.chars().any(golem_protocol::chars::is_dangerous) {
        return Err(IntakeError::BadName(shown(path)));
    }
    Ok(s.to_string())
}

fn checked_name(path: &Path) -> Result<String, IntakeError> {
    let name = match path.file_name() {
        Some(n) => n.to_os_string(),
        // `.` or `/`: name the directory after its canonical path.
        None => path
            .canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_os_string()))
            .unwrap_or_else(|| "input".into()),
    };
    check_name_text(&name, path)
}

/// Avoids collisions between inputs of the same name by suffixing `-2`, `-3`, ... before the extension.
fn unique(used: &mut Vec<String>, name: String) -> String {
    let mut candidate = name.clone();
    let (stem, ext) = match name.rsplit_once('.') {
        Some((s, e)) if !s.is_empty() => (s.to_string(), format!(".{e}")),
        _ => (name.clone(), String::new()),
    };
    let mut n = 2;
    while used.contains(&candidate) {
        candidate = format!("{stem}-{n}{ext}");
        n += 1;
    }
    used.push(candidate.clone());
    candidate
}

/// A safe file name from a URL's last path segment.
fn url_name(url: &reqwest::Url) -> String {
    let last = url
        .path_segments()
        .and_then(|mut s| s.next_back().map(str::to_string))
        .unwrap_or_default();
    safe_name(&last, "download")
}

/// A file name anyone can read and every name check accepts: ASCII letters, digits, `.`, `_`
/// and `-` (anything else becomes `_`), no leading dots, at most 100 characters; `fallback`
/// when nothing is left.
pub fn safe_name(text: &str, fallback: &str) -> String {
    let mapped: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    let trimmed = mapped.trim_start_matches('.');
    if trimmed.is_empty() {
        fallback.to_string()
    } else {
        trimmed.to_string()
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> IntakeError + '_ {
    move |source| IntakeError::Io {
        path: shown(path),
        source,
    }
}

/// Creates `dst` (never through a link) world-readable, so the container user can read it.
fn create_copy(dst: &Path) -> Result<std::fs::File, IntakeError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dst)
        .map_err(io_err(dst))
}

/// Copies the regular file open as `src` (its `fstat` is `st`) to `dst`, hashing in the same
/// pass. Its apparent size is taken from the input cap first, so an oversized or sparse giant
/// is refused before anything is written. Holes stay holes: only data extents are copied
/// (`SEEK_DATA`/`SEEK_HOLE`) and the copy is truncated to length, while the hash covers the
/// zeros. A file that changes size while copied is refused.
fn copy_file(
    src: OwnedFd,
    st: &Stat,
    path: &Path,
    dst: &Path,
    budget: &mut Budget,
) -> Result<(u64, String), IntakeError> {
    let size = u64::try_from(st.st_size).unwrap_or(0);
    budget.take(size, path)?;
    let mut input = std::fs::File::from(src);
    let mut out = create_copy(dst)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 << 10];
    let zeros = vec![0u8; 64 << 10];
    let changed = || IntakeError::Io {
        path: shown(path),
        source: std::io::Error::other("changed while it was being copied"),
    };
    let mut pos = 0u64;
    while pos < size {
        let data = match rustix::fs::seek(&input, rustix::fs::SeekFrom::Data(pos)) {
            Ok(d) => d.min(size),
            // No data after `pos`: the rest is a hole.
            Err(Errno::NXIO) => size,
            // A file system without hole support: everything is data.
            Err(Errno::INVAL) | Err(Errno::OPNOTSUPP) => pos,
            Err(e) => return Err(io_err(path)(e.into())),
        };
        let mut gap = data - pos;
        while gap > 0 {
            let n = gap.min(zeros.len() as u64) as usize;
            hasher.update(&zeros[..n]);
            gap -= n as u64;
        }
        if data >= size {
            break;
        }
        let hole = match rustix::fs::seek(&input, rustix::fs::SeekFrom::Hole(data)) {
            Ok(h) => h.clamp(data + 1, size),
            Err(_) => size,
        };
        input.seek(SeekFrom::Start(data)).map_err(io_err(path))?;
        out.seek(SeekFrom::Start(data)).map_err(io_err(dst))?;
        let mut left = hole - data;
        while left > 0 {
            let want = left.min(buf.len() as u64) as usize;
            let n = input.read(&mut buf[..want]).map_err(io_err(path))?;
            if n == 0 {
                return Err(changed());
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(io_err(dst))?;
            left -= n as u64;
        }
        pos = hole;
    }
    out.set_len(size).map_err(io_err(dst))?;
    let now = rustix::fs::fstat(&input).map_err(|e| io_err(path)(e.into()))?;
    if u64::try_from(now.st_size).unwrap_or(0) != size {
        return Err(changed());
    }
    out.sync_all().map_err(io_err(dst))?;
    Ok((size, hex::encode(hasher.finalize())))
}

fn set_mode(path: &Path, mode: u32) -> Result<(), IntakeError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io_err(path))
}

/// What a download brought in.
struct Fetched {
    size: u64,
    sha256: String,
    hops: Vec<String>,
    final_url: String,
}

/// Streams a URL to `dst` with the size caps (download and what is left of the input cap)
/// enforced per chunk; removes the partial file on failure.
async fn download(
    url: &reqwest::Url,
    dst: &Path,
    limits: &IntakeLimits,
    budget_left: u64,
) -> Result<Fetched, IntakeError> {
    let shown_url = url.to_string();
    let result = match tokio::time::timeout(
        limits.download_timeout,
        download_inner(url, dst, limits, budget_left),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => Err(IntakeError::Download {
            url: shown_url,
            message: "timed out".into(),
        }),
    };
    if result.is_err() {
        let _ = std::fs::remove_file(dst);
    }
    result
}

/// Follows redirects by hand so that every hop's address is checked (the resolver returns only
/// checked addresses, IP literals are checked here) and recorded.
async fn download_inner(
    url: &reqwest::Url,
    dst: &Path,
    limits: &IntakeLimits,
    budget_left: u64,
) -> Result<Fetched, IntakeError> {
    let first = url.to_string();
    let fail = |at: &str, message: String| IntakeError::Download {
        url: at.to_string(),
        message,
    };
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        // An environment proxy would connect to addresses this module never saw.
        .no_proxy()
        .dns_resolver(urlcheck::CheckedResolver {
            allow_private: limits.allow_private,
        })
        .timeout(limits.download_timeout)
        .connect_timeout(limits.download_timeout.min(Duration::from_secs(30)))
        .user_agent(concat!("golem-orch/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| fail(&first, describe_reqwest(&e)))?;
    let mut current = url.clone();
    let mut hops = vec![current.to_string()];
    let response = loop {
        urlcheck::check_url(&current, limits.allow_private)
            .map_err(|m| fail(current.as_str(), m))?;
        let response = client
            .get(current.clone())
            .send()
            .await
            .map_err(|e| fail(current.as_str(), describe_reqwest(&e)))?;
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .filter(|_| response.status().is_redirection());
        let Some(location) = location else {
            break response;
        };
        if hops.len() > limits.max_redirects {
            return Err(fail(&first, "too many redirects".into()));
        }
        let next = location
            .to_str()
            .ok()
            .and_then(|l| current.join(l).ok())
            .ok_or_else(|| {
                fail(
                    current.as_str(),
                    "redirect to an unreadable location".into(),
                )
            })?;
        if !matches!(next.scheme(), "http" | "https") || next.host_str().is_none() {
            return Err(fail(
                current.as_str(),
                format!("redirect to {next}: only http and https URLs are supported"),
            ));
        }
        hops.push(next.to_string());
        current = next;
    };
    let shown_url = current.to_string();
    let status = response.status();
    if !status.is_success() {
        return Err(IntakeError::Status {
            url: shown_url,
            status: status.as_u16(),
        });
    }
    let limit = limits.max_download_bytes.min(budget_left);
    let too_large = || {
        if budget_left < limits.max_download_bytes {
            IntakeError::OverCap {
                path: first.clone(),
                limit: limits.max_total_bytes,
            }
        } else {
            IntakeError::TooLarge {
                url: first.clone(),
                limit: limits.max_download_bytes,
            }
        }
    };
    if response.content_length().is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let mut file = create_copy(dst)?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| fail(&shown_url, describe_reqwest(&e)))?;
        size += chunk.len() as u64;
        if size > limit {
            return Err(too_large());
        }
        hasher.update(&chunk);
        file.write_all(&chunk).map_err(io_err(dst))?;
    }
    file.sync_all().map_err(io_err(dst))?;
    Ok(Fetched {
        size,
        sha256: hex::encode(hasher.finalize()),
        hops,
        final_url: shown_url,
    })
}

/// reqwest's top-level message hides the cause ("error sending request"); show the root cause.
fn describe_reqwest(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "timed out".into();
    }
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg = s.to_string();
        source = s.source();
    }
    msg.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::net::TcpListener;

    /// A tiny HTTP server on loopback answering each request with `respond(path)`.
    fn serve(respond: fn(&str) -> Vec<u8>) -> (String, std::thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let handle = std::thread::spawn(move || {
            for stream in listener.incoming().take(8) {
                let Ok(mut stream) = stream else { break };
                let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) <= 2 {
                        break;
                    }
                }
                let _ = stream.write_all(&respond(&path));
            }
        });
        (base, handle)
    }

    fn ok(body: &[u8]) -> Vec<u8> {
        let mut r = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        r
    }

    fn respond(path: &str) -> Vec<u8> {
        match path {
            "/paper.pdf" => ok(b"%PDF-1.4 not really"),
            "/missing" => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
            "/big" => ok(&vec![b'x'; 4096]),
            "/chunked-big" => {
                let mut r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec();
                for _ in 0..8 {
                    r.extend_from_slice(b"400\r\n");
                    r.extend_from_slice(&[b'y'; 1024]);
                    r.extend_from_slice(b"\r\n");
                }
                r.extend_from_slice(b"0\r\n\r\n");
                r
            }
            "/loop" => b"HTTP/1.1 302 Found\r\nLocation: /loop\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
            _ => ok(b""),
        }
    }

    fn limits() -> IntakeLimits {
        IntakeLimits {
            max_download_bytes: 2048,
            download_timeout: Duration::from_secs(10),
            max_redirects: 2,
            max_files: 100,
            max_total_bytes: 1 << 20,
            // These tests serve from loopback.
            allow_private: true,
        }
    }

    #[tokio::test]
    async fn downloads_are_hashed_capped_and_refused_on_error_status() {
        let (base, _server) = serve(respond);
        let dest = tempfile::tempdir().unwrap();
        let src = classify(&[format!("{base}/paper.pdf")]).unwrap();
        let recs = intake(&src, dest.path(), &limits()).await.unwrap();
        assert_eq!(recs[0].name, "paper.pdf");
        assert_eq!(recs[0].size, 19);
        assert_eq!(
            recs[0].sha256,
            hex::encode(Sha256::digest(b"%PDF-1.4 not really"))
        );
        for (path, want) in [
            ("/missing", "404"),
            ("/big", "cap"),
            ("/chunked-big", "cap"),
            ("/loop", "redirects"),
        ] {
            let d = tempfile::tempdir().unwrap();
            let src = classify(&[format!("{base}{path}")]).unwrap();
            let err = intake(&src, d.path(), &limits())
                .await
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{path}: {err}");
            assert_eq!(
                std::fs::read_dir(d.path()).unwrap().count(),
                0,
                "{path}: partial file left"
            );
        }
    }

    #[tokio::test]
    async fn unreachable_urls_fail_with_one_line() {
        let dest = tempfile::tempdir().unwrap();
        // A port on loopback that nothing listens on.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let src = classify(&[format!("http://127.0.0.1:{port}/x")]).unwrap();
        let err = intake(&src, dest.path(), &limits())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("download http://127.0.0.1:"), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn classify_refuses_what_it_cannot_take() {
        assert!(matches!(
            classify(&["/no/such/file".into()]),
            Err(IntakeError::NotFound(_))
        ));
        assert!(matches!(
            classify(&["ftp://host/x".into()]),
            Err(IntakeError::BadUrl(_))
        ));
        assert!(matches!(
            classify(&["file:///etc/passwd".into()]),
            Err(IntakeError::BadUrl(_))
        ));
        assert!(matches!(
            classify(&["/dev/null".into()]),
            Err(IntakeError::NotAFile(_))
        ));
        assert!(matches!(
            classify(&["https://example.org/a.pdf".into()]).unwrap()[0],
            Source::Url(_)
        ));
    }

    #[tokio::test]
    async fn files_and_directories_are_copied_with_hashes_and_collisions_renamed() {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("docs/sub")).unwrap();
        std::fs::write(src.path().join("docs/a.txt"), "alpha").unwrap();
        std::fs::write(src.path().join("docs/sub/b.txt"), "beta").unwrap();
        std::fs::create_dir(src.path().join("other")).unwrap();
        std::fs::write(src.path().join("other/a.txt"), "again").unwrap();
        let dest = tempfile::tempdir().unwrap();
        let args = [
            src.path().join("docs").display().to_string(),
            src.path().join("docs/a.txt").display().to_string(),
            src.path().join("other/a.txt").display().to_string(),
        ];
        let recs = intake(&classify(&args).unwrap(), dest.path(), &limits())
            .await
            .unwrap();
        let names: Vec<_> = recs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["docs/a.txt", "docs/sub/b.txt", "a.txt", "a-2.txt"]);
        assert_eq!(
            std::fs::read_to_string(dest.path().join("a-2.txt")).unwrap(),
            "again"
        );
        assert_eq!(recs[1].sha256, hex::encode(Sha256::digest(b"beta")));
    }

    #[tokio::test]
    async fn links_inside_directories_and_control_characters_are_refused() {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir(src.path().join("d")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.path().join("d/passwd")).unwrap();
        let dest = tempfile::tempdir().unwrap();
        let err = intake(
            &classify(&[src.path().join("d").display().to_string()]).unwrap(),
            dest.path(),
            &limits(),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, IntakeError::Symlink(_)), "{err}");

        // A bad name given directly is refused before anything is copied...
        let bad = src.path().join("evil\nname.txt");
        std::fs::write(&bad, "x").unwrap();
        let err = classify(&[bad.display().to_string()]).unwrap_err();
        assert!(matches!(err, IntakeError::BadName(_)), "{err}");
        // ...and one found inside a directory is refused while copying.
        std::fs::remove_file(src.path().join("d/passwd")).unwrap();
        std::fs::write(src.path().join("d/evil\nname.txt"), "x").unwrap();
        let dest = tempfile::tempdir().unwrap();
        let err = intake(
            &classify(&[src.path().join("d").display().to_string()]).unwrap(),
            dest.path(),
            &limits(),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, IntakeError::BadName(_)), "{err}");
    }

    #[tokio::test]
    async fn loopback_downloads_are_refused_by_default_and_redirect_hops_are_recorded() {
        let (base, _server) = serve(|path| {
            match path {
            "/hop" => b"HTTP/1.1 302 Found\r\nLocation: /paper.pdf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
            _ => ok(b"bytes"),
        }
        });
        let dest = tempfile::tempdir().unwrap();
        let src = classify(&[format!("{base}/hop")]).unwrap();
        let strict = IntakeLimits {
            allow_private: false,
            ..limits()
        };
        let err = intake(&src, dest.path(), &strict)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("loopback") && err.contains("--allow-private-urls"),
            "{err}"
        );
        let recs = intake(&src, dest.path(), &limits()).await.unwrap();
        assert_eq!(
            recs[0].hops,
            [format!("{base}/hop"), format!("{base}/paper.pdf")]
        );
        assert_eq!(
            recs[0].final_url.as_deref(),
            Some(format!("{base}/paper.pdf").as_str())
        );
    }

    #[tokio::test]
    async fn the_input_cap_counts_apparent_size_and_holes_stay_holes() {
        use std::os::unix::fs::MetadataExt;
        let src = tempfile::tempdir().unwrap();
        let sparse = src.path().join("sparse.bin");
        let mut f = std::fs::File::create(&sparse).unwrap();
        f.write_all(b"head").unwrap();
        f.seek(SeekFrom::Start(600 << 10)).unwrap();
        f.write_all(b"tail").unwrap();
        f.set_len(900 << 10).unwrap();
        drop(f);
        let dest = tempfile::tempdir().unwrap();
        let recs = intake(
            &classify(&[sparse.display().to_string()]).unwrap(),
            dest.path(),
            &limits(),
        )
        .await
        .unwrap();
        let copy = dest.path().join("sparse.bin");
        let (a, b) = (
            std::fs::read(&sparse).unwrap(),
            std::fs::read(&copy).unwrap(),
        );
        assert_eq!(a, b);
        assert_eq!(recs[0].sha256, hex::encode(Sha256::digest(&a)));
        let meta = std::fs::metadata(&copy).unwrap();
        assert!(
            meta.blocks() * 512 < 200 << 10,
            "holes filled: {}",
            meta.blocks()
        );

        // Two of them are over the 1 MiB cap, and nothing of the second is written.
        let dest = tempfile::tempdir().unwrap();
        let arg = sparse.display().to_string();
        let err = intake(
            &classify(&[arg.clone(), arg]).unwrap(),
            dest.path(),
            &limits(),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, IntakeError::OverCap { .. }), "{err}");
        assert!(!dest.path().join("sparse-2.bin").exists());
        // A 1 TiB sparse file is refused at once.
        let huge = src.path().join("huge.bin");
        std::fs::File::create(&huge)
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        let err = intake(
            &classify(&[huge.display().to_string()]).unwrap(),
            tempfile::tempdir().unwrap().path(),
            &limits(),
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("input cap"), "{err}");
    }

    #[test]
    fn every_path_component_is_checked_and_a_named_link_is_not_followed() {
        let src = tempfile::tempdir().unwrap();
        for evil in [
            "\x1b]52;c;aGk=\x07",
            "a\u{202e}b",
            "tag\u{e0041}",
            "\u{3164}",
            "zw\u{200b}",
        ] {
            let dir = src.path().join(evil);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("doc.txt"), "x").unwrap();
            let err = classify(&[dir.join("doc.txt").display().to_string()]).unwrap_err();
            assert!(matches!(err, IntakeError::BadName(_)), "{evil:?}: {err}");
            let line = err.to_string();
            assert!(
                !line.chars().any(golem_protocol::chars::is_dangerous),
                "{line:?}"
            );
        }
        let link = src.path().join("link.txt");
        std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
        assert!(matches!(
            classify(&[link.display().to_string()]),
            Err(IntakeError::Symlink(_))
        ));
        // A link among the ancestors is the person's own path and is followed.
        std::fs::create_dir(src.path().join("real")).unwrap();
        std::fs::write(src.path().join("real/doc.txt"), "x").unwrap();
        std::os::unix::fs::symlink(src.path().join("real"), src.path().join("alias")).unwrap();
        assert!(matches!(
            classify(&[src.path().join("alias/doc.txt").display().to_string()]).unwrap()[0],
            Source::File(_)
        ));
    }

    #[tokio::test]
    async fn a_listed_file_replaced_before_its_turn_is_refused() {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir(src.path().join("docs")).unwrap();
        std::fs::write(src.path().join("docs/one.txt"), "one").unwrap();
        std::fs::write(src.path().join("secret"), "secret").unwrap();
        let listed = list_files(&src.path().join("docs")).unwrap();
        assert_eq!(listed.len(), 1);
        let (rel, id) = listed[0].clone();
        let source = Source::Listed {
            root: src.path().join("docs"),
            rel: rel.clone(),
            id,
        };
        // Replaced by a link: refused, never followed.
        std::fs::remove_file(src.path().join("docs/one.txt")).unwrap();
        std::os::unix::fs::symlink(src.path().join("secret"), src.path().join("docs/one.txt"))
            .unwrap();
        let dest = tempfile::tempdir().unwrap();
        let err = intake(std::slice::from_ref(&source), dest.path(), &limits())
            .await
            .unwrap_err();
        assert!(matches!(err, IntakeError::Symlink(_)), "{err}");
        // Replaced by another file (made while the listed one still exists, so its inode differs): refused too.
        std::fs::write(src.path().join("other"), "other").unwrap();
        std::fs::rename(src.path().join("other"), src.path().join("docs/one.txt")).unwrap();
        let err = intake(&[source], dest.path(), &limits()).await.unwrap_err();
        assert!(matches!(err, IntakeError::Replaced(_)), "{err}");
    }

    #[test]
    fn url_names_are_sanitised() {
        let n = |u: &str| url_name(&reqwest::Url::parse(u).unwrap());
        assert_eq!(n("https://h/papers/paper.pdf?x=1"), "paper.pdf");
        assert_eq!(n("https://h/"), "download");
        assert_eq!(n("https://h/..%2F..%2Fetc"), "_2F.._2Fetc");
        assert_eq!(n("https://h/a%0Ab"), "a_0Ab");
    }
}
