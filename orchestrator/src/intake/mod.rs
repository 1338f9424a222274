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

mod copy;
mod download;
mod names;
mod open;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustix::fs::{FileType, Stat};
use serde::{Deserialize, Serialize};

use copy::{copy_dir, copy_file, Budget};
use download::download;
pub use names::{check_components, safe_name, shown};
use names::{checked_name, unique, url_name};
pub use open::{list_dir, list_files, open_listed, open_named};

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
    /// The person's `--strict`: a symbolic link inside an input folder fails the session (as it
    /// did before links were skipped) instead of being skipped and listed. Off by default.
    pub strict: bool,
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
            strict: false,
        }
    }
}

/// Something inside an input folder that intake left out rather than follow: a symbolic link.
/// Recorded in the session, the manifest (`skipped`) and the audit log, so a reviewer knows the
/// worker never saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// Where it was on the host, as the person's path (escaped for display).
    pub source: String,
    /// The path it would have had under `/input`.
    pub name: String,
    /// Why it was left out.
    pub reason: String,
}

/// What an intake took in, and what it left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Taken {
    /// What went in, in order.
    pub inputs: Vec<InputRecord>,
    /// Links inside input folders, never followed (none under `--strict`, which refuses them).
    pub skipped: Vec<Skipped>,
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

/// Classifies the arguments without touching the network, so bad input fails before a session exists.
pub fn classify(args: &[String]) -> Result<Vec<Source>, IntakeError> {
    args.iter().map(|a| classify_one(a)).collect()
}

fn classify_one(arg: &str) -> Result<Source, IntakeError> {
    if let Some((scheme, _)) = arg.split_once("://") {
        let bad = || IntakeError::BadUrl(shown(Path::new(arg)));
        let url = reqwest::Url::parse(arg).map_err(|_| bad())?;
        if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") || !fetchable(&url) {
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

/// Whether intake can fetch `url` at all: http or https, with a host. The same rule holds for
/// every redirect.
fn fetchable(url: &reqwest::Url) -> bool {
    matches!(url.scheme(), "http" | "https") && url.host_str().is_some()
}

/// A short description for dry runs and audit records.
pub fn describe(source: &Source) -> String {
    match source {
        Source::File(p) | Source::Dir(p) => p.display().to_string(),
        Source::Url(u) => u.to_string(),
        Source::Listed { root, rel, .. } => listed_path(root, rel).display().to_string(),
    }
}

pub(super) fn listed_path(root: &Path, rel: &[String]) -> PathBuf {
    rel.iter().fold(root.to_path_buf(), |p, c| p.join(c))
}

/// Takes every source into `dest` (an existing empty directory) and returns what was taken, in
/// order, and the links inside folders that were left out (see [`IntakeLimits::strict`]).
pub async fn intake(
    sources: &[Source],
    dest: &Path,
    limits: &IntakeLimits,
) -> Result<Taken, IntakeError> {
    let mut run = Intake {
        dest,
        limits,
        records: Vec::new(),
        skipped: Vec::new(),
        used: Vec::new(),
        budget: Arc::new(std::sync::Mutex::new(Budget::new(limits.max_total_bytes))),
    };
    for source in sources {
        match source {
            Source::File(path) | Source::Listed { root: path, .. } => {
                run.file(source, path).await?
            }
            Source::Dir(path) => run.dir(path).await?,
            Source::Url(url) => run.url(url).await?,
        }
        if run.records.len() > limits.max_files {
            return Err(IntakeError::TooMany(limits.max_files));
        }
    }
    Ok(Taken {
        inputs: run.records,
        skipped: run.skipped,
    })
}

/// One intake in progress: what was taken so far, the names used under `dest`, and what is
/// left of the input cap (shared with the blocking copies).
struct Intake<'a> {
    dest: &'a Path,
    limits: &'a IntakeLimits,
    records: Vec<InputRecord>,
    skipped: Vec<Skipped>,
    used: Vec<String>,
    budget: Arc<std::sync::Mutex<Budget>>,
}

impl Intake<'_> {
    /// A file the person named, or one a batch listed (re-opened and compared with the listing).
    async fn file(&mut self, source: &Source, path: &Path) -> Result<(), IntakeError> {
        let (rel, expect) = match source {
            Source::Listed { rel, id, .. } => (rel.clone(), Some(*id)),
            _ => (Vec::new(), None),
        };
        let full = listed_path(path, &rel);
        check_components(&full)?;
        let name = unique(&mut self.used, checked_name(&full)?);
        let (root, dst, budget) = (
            path.to_path_buf(),
            self.dest.join(&name),
            self.budget.clone(),
        );
        let (size, sha256) = blocking(move || {
            let (fd, st) = open_listed(&root, &rel, expect)?;
            let mut budget = lock(&budget);
            copy_file(fd, &st, &full, &dst, &mut budget)
        })
        .await?;
        self.records.push(InputRecord {
            source: describe(source),
            name,
            size,
            sha256,
            hops: Vec::new(),
            final_url: None,
        });
        Ok(())
    }

    /// A directory, walked by fd; its files count against the session's file cap.
    async fn dir(&mut self, path: &Path) -> Result<(), IntakeError> {
        check_components(path)?;
        let name = unique(&mut self.used, checked_name(path)?);
        let (src, dst, max, budget, strict) = (
            path.to_path_buf(),
            self.dest.join(&name),
            self.limits.max_files.saturating_sub(self.records.len()),
            self.budget.clone(),
            self.limits.strict,
        );
        let (found, links) =
            blocking(move || copy_dir(&src, &dst, max, strict, &mut lock(&budget))).await?;
        self.skipped.extend(links.into_iter().map(|rel| Skipped {
            source: shown(&path.join(&rel)),
            name: format!("{name}/{rel}"),
            reason: "symbolic link (never followed; --strict refuses it)".into(),
        }));
        for (rel, size, sha256) in found {
            self.records.push(InputRecord {
                source: path.join(&rel).display().to_string(),
                name: format!("{name}/{rel}"),
                size,
                sha256,
                hops: Vec::new(),
                final_url: None,
            });
        }
        Ok(())
    }

    /// A URL, downloaded within what is left of the input cap.
    async fn url(&mut self, url: &reqwest::Url) -> Result<(), IntakeError> {
        let name = unique(&mut self.used, url_name(url));
        let left = lock(&self.budget).left();
        let fetched = download(url, &self.dest.join(&name), self.limits, left).await?;
        lock(&self.budget).spend(fetched.size.min(left));
        self.records.push(InputRecord {
            source: url.to_string(),
            name,
            size: fetched.size,
            sha256: fetched.sha256,
            hops: fetched.hops,
            final_url: Some(fetched.final_url),
        });
        Ok(())
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock means a panic in another copy; the count is still the best we have.
    m.lock().unwrap_or_else(|p| p.into_inner())
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

pub(super) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> IntakeError + '_ {
    move |source| IntakeError::Io {
        path: shown(path),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};
    use std::io::BufRead;
    use std::io::{Seek, SeekFrom, Write};
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
            strict: false,
        }
    }

    #[tokio::test]
    async fn downloads_are_hashed_capped_and_refused_on_error_status() {
        let (base, _server) = serve(respond);
        let dest = tempfile::tempdir().unwrap();
        let src = classify(&[format!("{base}/paper.pdf")]).unwrap();
        let recs = intake(&src, dest.path(), &limits()).await.unwrap().inputs;
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
            .unwrap()
            .inputs;
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
        std::fs::write(src.path().join("d/real.txt"), "real").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.path().join("d/passwd")).unwrap();
        // A link inside a folder is skipped and listed, never followed...
        let dest = tempfile::tempdir().unwrap();
        let dir = classify(&[src.path().join("d").display().to_string()]).unwrap();
        let taken = intake(&dir, dest.path(), &limits()).await.unwrap();
        let names: Vec<&str> = taken.inputs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["d/real.txt"]);
        assert_eq!(taken.skipped.len(), 1, "{taken:?}");
        assert_eq!(taken.skipped[0].name, "d/passwd");
        assert!(taken.skipped[0].source.ends_with("d/passwd"));
        assert!(!dest.path().join("d/passwd").exists());
        // ...and under --strict it fails the intake, naming it.
        let strict = IntakeLimits {
            strict: true,
            ..limits()
        };
        let dest = tempfile::tempdir().unwrap();
        let err = intake(&dir, dest.path(), &strict).await.unwrap_err();
        assert!(matches!(err, IntakeError::Symlink(_)), "{err}");
        assert!(err.to_string().contains("d/passwd"), "{err}");
        std::fs::remove_file(src.path().join("d/real.txt")).unwrap();

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
        let recs = intake(&src, dest.path(), &limits()).await.unwrap().inputs;
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
        .unwrap()
        .inputs;
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
        let (listed, _) = list_files(&src.path().join("docs"), false).unwrap();
        assert_eq!(listed.len(), 1);
        let (rel, id) = listed[0].clone();
        let source = Source::Listed {
            root: src.path().join("docs"),
            rel: rel.clone(),
            id,
        };
        // A second link keeps the listed file's inode allocated, so the replacement below can
        // never be given the same inode number (which would make it look unchanged).
        std::fs::hard_link(src.path().join("docs/one.txt"), src.path().join("kept")).unwrap();
        // Replaced by a link: refused, never followed.
        std::fs::remove_file(src.path().join("docs/one.txt")).unwrap();
        std::os::unix::fs::symlink(src.path().join("secret"), src.path().join("docs/one.txt"))
            .unwrap();
        let dest = tempfile::tempdir().unwrap();
        let err = intake(std::slice::from_ref(&source), dest.path(), &limits())
            .await
            .unwrap_err();
        assert!(matches!(err, IntakeError::Symlink(_)), "{err}");
        // Replaced by another file (its inode differs from the kept original's): refused too.
        std::fs::write(src.path().join("other"), "other").unwrap();
        std::fs::rename(src.path().join("other"), src.path().join("docs/one.txt")).unwrap();
        let err = intake(&[source], dest.path(), &limits()).await.unwrap_err();
        assert!(matches!(err, IntakeError::Replaced(_)), "{err}");
    }
}
