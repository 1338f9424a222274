//! Intake: bring a session's inputs (files, directories, http(s) URLs) into its input directory.
//!
//! The host only moves bytes here: it copies and downloads, hashes, and never parses content.
//! Parsing is the container's job. Downloads are capped while streaming (size, time, redirects),
//! and names are checked because they end up in reports a person reads.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

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
}

/// Caps for intake.
#[derive(Debug, Clone)]
pub struct IntakeLimits {
    /// Largest download accepted.
    pub max_download_bytes: u64,
    /// Wall-clock limit per download.
    pub download_timeout: Duration,
    /// Redirects followed per download.
    pub max_redirects: usize,
    /// Files taken in per session (directories can be large).
    pub max_files: usize,
}

impl Default for IntakeLimits {
    fn default() -> Self {
        IntakeLimits {
            max_download_bytes: 256 << 20,
            download_timeout: Duration::from_secs(120),
            max_redirects: 5,
            max_files: 10_000,
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
    /// A symlink inside an input directory; following it could pull in anything on the host.
    #[error("input {0}: is a symbolic link inside an input directory (golem-orch never follows links; copy the target in instead)")]
    Symlink(String),
    /// A name that would be unreadable or misleading in a report.
    #[error("input {0:?}: file name contains control characters or is not valid UTF-8")]
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
    /// Connection, TLS, redirect-limit or timeout failure.
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
    /// More files than the cap.
    #[error("inputs hold more than {0} files")]
    TooMany(usize),
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

/// Classifies the arguments without touching the network, so bad input fails before a session exists.
pub fn classify(args: &[String]) -> Result<Vec<Source>, IntakeError> {
    args.iter().map(|a| classify_one(a)).collect()
}

fn classify_one(arg: &str) -> Result<Source, IntakeError> {
    if let Some((scheme, _)) = arg.split_once("://") {
        let url = reqwest::Url::parse(arg).map_err(|_| IntakeError::BadUrl(arg.to_string()))?;
        if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https")
            || url.host_str().is_none()
        {
            return Err(IntakeError::BadUrl(arg.to_string()));
        }
        return Ok(Source::Url(url));
    }
    let path = PathBuf::from(arg);
    // A path the person named explicitly may be a link; links *inside* directories are refused.
    let meta = std::fs::metadata(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => IntakeError::NotFound(arg.to_string()),
        _ => IntakeError::Io {
            path: arg.to_string(),
            source: e,
        },
    })?;
    // The name ends up under /input and in reports: refuse a bad one before anything is created.
    checked_name(&path)?;
    if meta.is_file() {
        Ok(Source::File(path))
    } else if meta.is_dir() {
        Ok(Source::Dir(path))
    } else {
        Err(IntakeError::NotAFile(arg.to_string()))
    }
}

/// A short description for dry runs and audit records.
pub fn describe(source: &Source) -> String {
    match source {
        Source::File(p) | Source::Dir(p) => p.display().to_string(),
        Source::Url(u) => u.to_string(),
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
    for source in sources {
        match source {
            Source::File(path) => {
                let name = unique(&mut used, checked_name(path)?);
                let (src, dst) = (path.clone(), dest.join(&name));
                let (size, sha256) = blocking(move || copy_hashing(&src, &dst)).await?;
                records.push(InputRecord {
                    source: path.display().to_string(),
                    name,
                    size,
                    sha256,
                });
            }
            Source::Dir(path) => {
                let name = unique(&mut used, checked_name(path)?);
                let (src, dst, max) = (
                    path.clone(),
                    dest.join(&name),
                    limits.max_files.saturating_sub(records.len()),
                );
                let found = blocking(move || copy_tree(&src, &dst, max)).await?;
                for (rel, size, sha256) in found {
                    records.push(InputRecord {
                        source: path.join(&rel).display().to_string(),
                        name: format!("{name}/{rel}"),
                        size,
                        sha256,
                    });
                }
            }
            Source::Url(url) => {
                let name = unique(&mut used, url_name(url));
                let (size, sha256) = download(url, &dest.join(&name), limits).await?;
                records.push(InputRecord {
                    source: url.to_string(),
                    name,
                    size,
                    sha256,
                });
            }
        }
        if records.len() > limits.max_files {
            return Err(IntakeError::TooMany(limits.max_files));
        }
    }
    Ok(records)
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

/// Checks a file name is UTF-8 without control characters (they would forge lines in reports).
fn check_name_text(name: &std::ffi::OsStr, shown: &Path) -> Result<String, IntakeError> {
    let s = name
        .to_str()
        .ok_or_else(|| IntakeError::BadName(shown.display().to_string()))?;
    if s.is_empty()
        || s.chars().any(|c| {
            c.is_control()
                || ('\u{202a}'..='\u{202e}').contains(&c)
                || ('\u{2066}'..='\u{2069}').contains(&c)
        })
    {
        return Err(IntakeError::BadName(shown.display().to_string()));
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
        path: path.display().to_string(),
        source,
    }
}

/// Copies one file, hashing in the same pass; the copy is world-readable so the container user can read it.
fn copy_hashing(src: &Path, dst: &Path) -> Result<(u64, String), IntakeError> {
    let mut input = std::fs::File::open(src).map_err(io_err(src))?;
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dst)
        .map_err(io_err(dst))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut size = 0u64;
    loop {
        let n = input.read(&mut buf).map_err(io_err(src))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(io_err(dst))?;
        size += n as u64;
    }
    out.sync_all().map_err(io_err(dst))?;
    Ok((size, hex::encode(hasher.finalize())))
}

/// Copies a directory tree without following links; returns `(relative path, size, sha256)` sorted.
fn copy_tree(
    src: &Path,
    dst: &Path,
    max_files: usize,
) -> Result<Vec<(String, u64, String)>, IntakeError> {
    let mut out = Vec::new();
    let mut stack = vec![(src.to_path_buf(), dst.to_path_buf(), String::new())];
    while let Some((from, to, rel)) = stack.pop() {
        std::fs::create_dir(&to).map_err(io_err(&to))?;
        set_mode(&to, 0o755)?;
        let mut entries: Vec<_> = std::fs::read_dir(&from)
            .map_err(io_err(&from))?
            .collect::<Result<_, _>>()
            .map_err(io_err(&from))?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let name = check_name_text(&entry.file_name(), &path)?;
            let child_rel = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let ft = entry.file_type().map_err(io_err(&path))?;
            if ft.is_symlink() {
                return Err(IntakeError::Symlink(path.display().to_string()));
            } else if ft.is_dir() {
                stack.push((path, to.join(&name), child_rel));
            } else if ft.is_file() {
                if out.len() >= max_files {
                    return Err(IntakeError::TooMany(max_files));
                }
                let (size, sha) = copy_hashing(&path, &to.join(&name))?;
                out.push((child_rel, size, sha));
            } else {
                return Err(IntakeError::NotAFile(path.display().to_string()));
            }
        }
    }
    out.sort();
    Ok(out)
}

fn set_mode(path: &Path, mode: u32) -> Result<(), IntakeError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io_err(path))
}

/// Streams a URL to `dst` with the size cap enforced per chunk; removes the partial file on failure.
async fn download(
    url: &reqwest::Url,
    dst: &Path,
    limits: &IntakeLimits,
) -> Result<(u64, String), IntakeError> {
    let result = download_inner(url, dst, limits).await;
    if result.is_err() {
        let _ = std::fs::remove_file(dst);
    }
    result
}

async fn download_inner(
    url: &reqwest::Url,
    dst: &Path,
    limits: &IntakeLimits,
) -> Result<(u64, String), IntakeError> {
    let shown = url.to_string();
    let fail = |e: reqwest::Error| IntakeError::Download {
        url: shown.clone(),
        message: describe_reqwest(&e),
    };
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::limited(limits.max_redirects))
        .timeout(limits.download_timeout)
        .connect_timeout(limits.download_timeout.min(Duration::from_secs(30)))
        .user_agent(concat!("golem-orch/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(fail)?;
    let response = client.get(url.clone()).send().await.map_err(fail)?;
    let status = response.status();
    if !status.is_success() {
        return Err(IntakeError::Status {
            url: shown,
            status: status.as_u16(),
        });
    }
    let too_large = || IntakeError::TooLarge {
        url: url.to_string(),
        limit: limits.max_download_bytes,
    };
    if response
        .content_length()
        .is_some_and(|n| n > limits.max_download_bytes)
    {
        return Err(too_large());
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dst)
        .map_err(io_err(dst))?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(fail)?;
        size += chunk.len() as u64;
        if size > limits.max_download_bytes {
            return Err(too_large());
        }
        hasher.update(&chunk);
        file.write_all(&chunk).map_err(io_err(dst))?;
    }
    file.sync_all().map_err(io_err(dst))?;
    Ok((size, hex::encode(hasher.finalize())))
}

/// reqwest's top-level message hides the cause ("error sending request"); show the root cause.
fn describe_reqwest(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "timed out".into();
    }
    if e.is_redirect() {
        return "too many redirects".into();
    }
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg = s.to_string();
        source = s.source();
    }
    msg
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

    #[test]
    fn url_names_are_sanitised() {
        let n = |u: &str| url_name(&reqwest::Url::parse(u).unwrap());
        assert_eq!(n("https://h/papers/paper.pdf?x=1"), "paper.pdf");
        assert_eq!(n("https://h/"), "download");
        assert_eq!(n("https://h/..%2F..%2Fetc"), "_2F.._2Fetc");
        assert_eq!(n("https://h/a%0Ab"), "a_0Ab");
    }
}
