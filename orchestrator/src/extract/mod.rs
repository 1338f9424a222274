//! Safe extraction of a worker container's `/output` tar stream into the
//! clearance stage.
//!
//! The tar stream comes from the Docker archive API, but its *contents* are
//! produced by an untrusted worker: every name, size, type, mode, count and
//! byte in it must be treated as hostile. `tar::Archive::unpack` is not a
//! sandbox (it silently skips `..`, writes absolute paths under the
//! destination, creates symlinks with arbitrary targets and turns FIFOs and
//! devices into world-writable files), so this module walks the entries
//! itself and only ever materialises plain regular files and directories,
//! with normalised modes, strictly below the destination directory.
//!
//! All limits are enforced while streaming: no limit check relies on a value
//! the archive declares about itself, and the raw number of bytes pulled from
//! the stream is capped so that an endless stream is always cut off.

mod entry;
mod names;
mod stream;

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use tar::Archive;

use entry::Extractor;
use names::validate_root_arg;
pub use stream::{max_archive_bytes, max_entries};
use stream::{read_trailer, stream_error, CountingReader, StreamState};

/// How many rejected entries are kept with their name and reason.
///
/// Rejections are attacker-controlled in number; recording all of them would
/// let a worker inflate the orchestrator's memory and the clearance report
/// with a flood of junk entries. Further rejections are only counted (see
/// [`Extraction::rejected_omitted`]).
pub const MAX_REJECTED_RECORDED: usize = 1000;

/// Longest accepted path component, in bytes.
///
/// Far below the usual 255-byte filesystem limit so that every accepted name
/// can be re-created on any filesystem and inside other archives or
/// repositories later, and so that oversized names (a classic way to make
/// downstream tools fail or truncate) never reach the stage.
pub const MAX_COMPONENT_BYTES: usize = 128;

/// Longest accepted path (the whole archive name, root component included),
/// in bytes.
///
/// Bounds the memory spent per tracked path and keeps every accepted path
/// far from `PATH_MAX`, so later tooling cannot be tripped by path lengths.
pub const MAX_PATH_BYTES: usize = 512;

/// Deepest accepted nesting below the root directory (number of path
/// components after the root).
///
/// Deep trees exhaust stack/recursion in naive consumers and multiply the
/// number of implicitly created directories per entry; legitimate outputs
/// are shallow.
pub const MAX_DEPTH: usize = 16;

/// The entry type golem-worker's init gives an entry it could not archive (a file it could not
/// open or read, a directory it could not list, a socket, a path too long to walk). It is one of
/// the types POSIX leaves to implementations (`A`-`Z`) that no tar writer uses; the worker never
/// writes the archive, so only the init can emit it. The init's side of this contract is
/// `golem_protocol::init::REFUSAL_TYPE`, which the init writes.
pub const INIT_REFUSAL_TYPE: u8 = golem_protocol::init::REFUSAL_TYPE;

/// The PAX record that precedes an [`INIT_REFUSAL_TYPE`] entry and says why the init could not
/// archive it (`golem_protocol::init::REFUSAL_KEY`).
pub const INIT_REFUSAL_KEY: &str = golem_protocol::init::REFUSAL_KEY;

/// Caps from the trust policy.
///
/// The worker decides how much it emits; these caps decide how much of it the
/// host is willing to store and inspect. They are enforced on bytes and
/// entries actually seen, never on sizes the archive claims.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Maximum number of accepted regular files; exceeding it aborts, because
    /// an output with more files than policy allows is not trustworthy as a
    /// whole and a partial stage would be misleading.
    pub max_files: u64,
    /// Maximum sum of bytes of accepted files; exceeding it aborts so a
    /// worker cannot fill the host disk.
    pub max_total_bytes: u64,
    /// Maximum size of one file; larger files are rejected (not written) but
    /// extraction continues, so one oversized artefact does not hide the rest.
    pub max_file_bytes: u64,
}

/// One regular file written to the stage.
///
/// The hash is computed over exactly the bytes written, while writing, so the
/// recorded digest always matches the staged content even if the archive
/// header lied about the size.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExtractedFile {
    /// Path relative to the destination (root component stripped,
    /// `/`-separated). It has passed every name check, so it is safe to show
    /// and to join onto the destination.
    pub path: String,
    /// Bytes actually written (not the header's claim).
    pub size: u64,
    /// Lower-case hex SHA-256 of the bytes written.
    pub sha256: String,
}

/// One archive entry that was not extracted, and why.
///
/// Reviewers need to see what the worker tried to smuggle (symlinks, devices,
/// traversal names), so rejections are reported rather than dropped silently.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rejected {
    /// The entry name as it appeared in the archive (root component
    /// included). Because it is hostile, it is decoded lossily, control,
    /// bidi and invisible characters and backslashes are escaped as
    /// `\u{..}` / `\\`, and it is truncated, so it cannot inject terminal
    /// escapes, fake log lines or spoofed text into reports.
    pub path: String,
    /// Human-readable reason (escaped the same way where it quotes archive
    /// data, e.g. a symlink target).
    pub reason: String,
}

/// Result of a successful extraction.
///
/// Lists are sorted so the report is deterministic regardless of the order
/// the worker chose for its archive.
#[derive(Debug, Default)]
pub struct Extraction {
    /// Files written, sorted by path.
    pub files: Vec<ExtractedFile>,
    /// Directories created (explicit entries and implicit parents), relative
    /// to the destination, sorted.
    pub dirs: Vec<String>,
    /// Rejected entries in archive order, at most [`MAX_REJECTED_RECORDED`].
    pub rejected: Vec<Rejected>,
    /// Number of further rejected entries that were not recorded.
    pub rejected_omitted: u64,
    /// Sum of the sizes of the accepted files (bytes actually written).
    pub total_bytes: u64,
}

/// Why an extraction was aborted.
///
/// Any error means the stage is incomplete and untrustworthy; the caller must
/// delete the destination. Messages are single-line and quote hostile data
/// only in escaped, truncated form.
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    /// A host-side I/O operation failed (reading the stream from Docker,
    /// creating or writing in the stage).
    #[error("I/O error while {context}: {source}")]
    Io {
        /// What was being done, e.g. `writing file "a/b.txt"`.
        context: String,
        /// Underlying error.
        #[source]
        source: io::Error,
    },
    /// The stream is not a well-formed tar archive (bad checksum, bad numeric
    /// field, truncated, missing end-of-archive marker, ...). Continuing after
    /// a framing error would mean guessing where the next header is, which is
    /// exactly where parser-differential attacks live.
    #[error("malformed archive: {0}")]
    Malformed(String),
    /// The stream ended before the archive did. Kept apart from [`Malformed`](Self::Malformed)
    /// because the producer decides what it means: golem-worker's init finishes the archive it
    /// starts unless something outside kills it, so a cut one tells of the host or the engine.
    #[error("archive cut short: {0}")]
    Truncated(String),
    /// More regular files than the policy allows.
    #[error("archive has more than {limit} files")]
    FileCountExceeded {
        /// The configured `max_files`.
        limit: u64,
    },
    /// Accepted file bytes exceed the policy's total.
    #[error("archive files exceed the total size limit of {limit} bytes")]
    TotalBytesExceeded {
        /// The configured `max_total_bytes`.
        limit: u64,
    },
    /// More entries of any kind than [`max_entries`] allows; stops floods of
    /// cheap rejected entries (symlinks, FIFOs, dirs) that never count as
    /// files.
    #[error("archive has more than {limit} entries")]
    EntryCountExceeded {
        /// The computed entry cap.
        limit: u64,
    },
    /// More raw bytes were read from the stream than [`max_archive_bytes`]
    /// allows; stops endless streams of padding, skipped data, or extension
    /// headers that never surface as entries.
    #[error("archive stream exceeds {limit} bytes")]
    ArchiveBytesExceeded {
        /// The computed raw byte cap.
        limit: u64,
    },
    /// The first entry is not the expected root directory (missing, wrong
    /// name, or not a directory, e.g. the worker replaced `/output` with a
    /// symlink). Nothing is extracted in that case.
    #[error("archive does not start with root directory {expected:?}; first entry: {found}")]
    UnexpectedRoot {
        /// The root name the caller expected.
        expected: String,
        /// Escaped description of what was found instead.
        found: String,
    },
    /// The `root` argument is not a single plain path component; a caller bug
    /// that would otherwise weaken the name checks.
    #[error("invalid root name {0:?}: must be a single plain path component")]
    InvalidRoot(String),
    /// The destination is not an existing, empty, real directory. Duplicate
    /// and collision tracking assume nothing else is in it, and a symlinked
    /// destination would redirect every write.
    #[error("invalid destination {path:?}: {reason}")]
    InvalidDestination {
        /// The destination given by the caller.
        path: PathBuf,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// Extract the tar stream `reader` into the empty directory `dest`.
///
/// `root` is the top directory the archive API puts first (e.g. `"output"`).
///
/// Why it is shaped this way:
/// - The first entry must be the root directory itself (`output/`,
///   `output`, or `./output/`); otherwise the whole extraction fails with
///   [`ExtractError::UnexpectedRoot`] before anything is written. This is how
///   "worker replaced `/output` by a symlink/file" is caught: Docker then
///   archives the link itself as the first entry.
/// - Later entries whose first component is not `root` are *rejected*
///   (recorded, not written) rather than aborting, like every other
///   per-entry problem, so one bad entry does not hide the rest from review.
///   A second entry named exactly like the root is rejected as a duplicate.
/// - Only regular files and directories are materialised; everything is
///   written with `create_new` + `O_NOFOLLOW` strictly below `dest`, with
///   modes forced to 0644/0755.
/// - Count, size and raw-stream limits abort the whole extraction; on any
///   error the caller must delete `dest` (nothing outside it is ever
///   touched).
/// - The archive must end with a proper end-of-archive block, so a stream
///   cut at an entry boundary is reported as malformed instead of looking
///   like a complete (but partial) output.
///
/// Assumes nothing but this function writes into `dest` while it runs (the
/// stage is host-private); intermediate directories are created by this
/// function itself and never looked up from the archive.
pub fn extract<R: Read>(
    reader: R,
    root: &str,
    dest: &Path,
    limits: &Limits,
) -> Result<Extraction, ExtractError> {
    validate_root_arg(root)?;
    check_destination(dest)?;

    let state = StreamState::default();
    let archive_cap = max_archive_bytes(limits);
    let mut archive = Archive::new(CountingReader::new(reader, archive_cap, &state));
    // A zero block ends the archive; never skip over it looking for more
    // (that would let trailing data after the end marker be interpreted).
    archive.set_ignore_zeros(false);
    // `entries()` (not `entries_with_seek`): sequential, and PAX / GNU long
    // names are merged into the following entry by the tar crate.
    let entries = archive
        .entries()
        .map_err(|e| stream_error(&state, archive_cap, e))?;

    let mut ex = Extractor::new(root, dest, limits, &state, archive_cap);
    let seen_root = ex.take_all(entries, max_entries(limits))?;
    check_ended(&state, archive_cap, root, seen_root)?;
    read_trailer(archive.into_inner(), &state, archive_cap)?;
    Ok(ex.finish())
}

/// After the last entry: the stream stayed within its cap, held the root, and ended with an
/// end-of-archive block (a stream cut at an entry boundary must not look complete).
fn check_ended(
    state: &StreamState,
    archive_cap: u64,
    root: &str,
    seen_root: bool,
) -> Result<(), ExtractError> {
    if state.cap_exceeded() {
        return Err(ExtractError::ArchiveBytesExceeded { limit: archive_cap });
    }
    if !seen_root {
        return Err(ExtractError::UnexpectedRoot {
            expected: root.to_string(),
            found: "nothing (empty archive)".to_string(),
        });
    }
    // The tar crate never reads past what it needs, so reaching EOF of the
    // underlying stream means it ended without the zero end-of-archive block.
    if state.eof() {
        return Err(ExtractError::Truncated(
            "the stream ended without an end-of-archive block".to_string(),
        ));
    }
    Ok(())
}

/// The destination must be an existing, empty, real directory (see
/// [`ExtractError::InvalidDestination`]).
fn check_destination(dest: &Path) -> Result<(), ExtractError> {
    let meta = fs::symlink_metadata(dest).map_err(|e| ExtractError::Io {
        context: format!("inspecting destination {dest:?}"),
        source: e,
    })?;
    if !meta.file_type().is_dir() {
        return Err(ExtractError::InvalidDestination {
            path: dest.to_path_buf(),
            reason: "not a directory (symlinks are not followed)",
        });
    }
    let mut listing = fs::read_dir(dest).map_err(|e| ExtractError::Io {
        context: format!("listing destination {dest:?}"),
        source: e,
    })?;
    if listing.next().is_some() {
        return Err(ExtractError::InvalidDestination {
            path: dest.to_path_buf(),
            reason: "not empty",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::names::{is_forbidden_char, MAX_REPORTED_BYTES};
    use super::*;
    use proptest::prelude::*;
    use sha2::{Digest, Sha256};
    use std::cell::Cell as TCell;
    use std::os::unix::fs::PermissionsExt;
    use std::rc::Rc;
    use tar::{EntryType, Header};

    const LIM: Limits = Limits {
        max_files: 100,
        max_total_bytes: 1 << 20,
        max_file_bytes: 64 * 1024,
    };

    fn sha(data: &[u8]) -> String {
        hex::encode(Sha256::digest(data))
    }

    /// A raw ustar header with `name` written byte-for-byte (no validation).
    fn raw_header(name: &[u8], typ: u8, size: u64, mode: u32, link: &[u8]) -> Header {
        let mut h = Header::new_ustar();
        {
            let old = h.as_old_mut();
            let n = name.len().min(old.name.len());
            old.name[..n].copy_from_slice(&name[..n]);
            let l = link.len().min(old.linkname.len());
            old.linkname[..l].copy_from_slice(&link[..l]);
        }
        h.set_entry_type(EntryType::new(typ));
        h.set_size(size);
        h.set_mode(mode);
        h.set_uid(1234);
        h.set_gid(1234);
        h.set_mtime(1_600_000_000);
        h.set_cksum();
        h
    }

    /// Builder for raw archives, including things `tar::Builder` refuses.
    struct Raw(Vec<u8>);

    impl Raw {
        fn new() -> Self {
            Raw(Vec::new())
        }
        fn with_root() -> Self {
            Raw::new().dir(b"output/")
        }
        fn block(mut self, h: &Header) -> Self {
            self.0.extend_from_slice(h.as_bytes());
            self
        }
        fn data(mut self, data: &[u8]) -> Self {
            self.0.extend_from_slice(data);
            let pad = (512 - data.len() % 512) % 512;
            self.0.extend(std::iter::repeat_n(0u8, pad));
            self
        }
        /// GNU long name for the next entry (may contain any bytes).
        fn longname(self, name: &[u8]) -> Self {
            let mut d = name.to_vec();
            d.push(0);
            let h = raw_header(b"././@LongLink", b'L', d.len() as u64, 0o644, b"");
            self.block(&h).data(&d)
        }
        fn pax(self, records: &[(&str, &[u8])]) -> Self {
            let mut d = Vec::new();
            for (k, v) in records {
                let body_len = k.len() + v.len() + 3; // ' ' '=' '\n'
                let mut len = body_len + 1;
                while len != body_len + len.to_string().len() {
                    len = body_len + len.to_string().len();
                }
                d.extend_from_slice(format!("{len} {k}=").as_bytes());
                d.extend_from_slice(v);
                d.push(b'\n');
            }
            let h = raw_header(b"PaxHeaders/x", b'x', d.len() as u64, 0o644, b"");
            self.block(&h).data(&d)
        }
        fn entry(self, name: &[u8], typ: u8, mode: u32, data: &[u8], link: &[u8]) -> Self {
            let me = if name.len() > 100 {
                self.longname(name)
            } else {
                self
            };
            let h = raw_header(name, typ, data.len() as u64, mode, link);
            me.block(&h).data(data)
        }
        fn file(self, name: &[u8], data: &[u8]) -> Self {
            self.entry(name, b'0', 0o644, data, b"")
        }
        fn dir(self, name: &[u8]) -> Self {
            self.entry(name, b'5', 0o755, b"", b"")
        }
        fn link(self, name: &[u8], typ: u8, target: &[u8]) -> Self {
            self.entry(name, typ, 0o777, b"", target)
        }
        fn finish(mut self) -> Vec<u8> {
            self.0.extend_from_slice(&[0u8; 1024]);
            self.0
        }
    }

    /// Test sandbox: `tmp/stage` is the destination, `tmp/outside` must stay
    /// empty, and nothing else may appear in `tmp`.
    struct Sandbox {
        tmp: tempfile::TempDir,
        dest: PathBuf,
        outside: PathBuf,
    }

    fn sandbox() -> Sandbox {
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("stage");
        let outside = tmp.path().join("outside");
        fs::create_dir(&dest).unwrap();
        fs::create_dir(&outside).unwrap();
        Sandbox { tmp, dest, outside }
    }

    impl Sandbox {
        fn run<R: Read>(&self, r: R, limits: &Limits) -> Result<Extraction, ExtractError> {
            extract(r, "output", &self.dest, limits)
        }

        /// Nothing escaped `dest`, and everything inside it is a plain file
        /// (0644) or directory (0755). Returns (files, dirs) relative paths.
        fn check(&self) -> (Vec<String>, Vec<String>) {
            let mut top: Vec<String> = fs::read_dir(self.tmp.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            top.sort();
            assert_eq!(top, vec!["outside".to_string(), "stage".to_string()]);
            assert_eq!(fs::read_dir(&self.outside).unwrap().count(), 0);
            let meta = fs::symlink_metadata(&self.dest).unwrap();
            assert!(meta.is_dir());
            let mut files = Vec::new();
            let mut dirs = Vec::new();
            walk(&self.dest, "", &mut files, &mut dirs);
            files.sort();
            dirs.sort();
            (files, dirs)
        }

        fn read(&self, rel: &str) -> Vec<u8> {
            fs::read(self.dest.join(rel)).unwrap()
        }
    }

    fn walk(dir: &Path, prefix: &str, files: &mut Vec<String>, dirs: &mut Vec<String>) {
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let m = fs::symlink_metadata(e.path()).unwrap();
            let perm = m.permissions().mode() & 0o7777;
            if m.file_type().is_dir() {
                assert_eq!(perm, 0o755, "dir {rel}");
                dirs.push(rel.clone());
                walk(&e.path(), &rel, files, dirs);
            } else if m.file_type().is_file() {
                assert_eq!(perm, 0o644, "file {rel}");
                files.push(rel);
            } else {
                panic!("unexpected file type at {rel}: {:?}", m.file_type());
            }
        }
    }

    fn only_reason(ex: &Extraction) -> &str {
        assert_eq!(ex.rejected.len(), 1, "{:?}", ex.rejected);
        &ex.rejected[0].reason
    }

    // --- happy path -------------------------------------------------------

    #[test]
    fn normal_files_and_nested_dirs_with_builder() {
        let mut b = tar::Builder::new(Vec::new());
        let add_dir = |b: &mut tar::Builder<Vec<u8>>, p: &str, mode: u32| {
            let mut h = Header::new_gnu();
            h.set_entry_type(EntryType::Directory);
            h.set_mode(mode);
            h.set_size(0);
            b.append_data(&mut h, p, io::empty()).unwrap();
        };
        let add_file = |b: &mut tar::Builder<Vec<u8>>, p: &str, mode: u32, data: &[u8]| {
            let mut h = Header::new_gnu();
            h.set_mode(mode);
            h.set_size(data.len() as u64);
            b.append_data(&mut h, p, data).unwrap();
        };
        add_dir(&mut b, "output/", 0o755);
        add_file(&mut b, "output/a.txt", 0o600, b"hello\n");
        add_dir(&mut b, "output/sub", 0o1777);
        add_file(&mut b, "output/sub/run.sh", 0o755, b"#!/bin/sh\n");
        add_file(&mut b, "output/sub/deeper/x.bin", 0o644, &[7u8; 5000]);
        add_file(&mut b, "output/empty", 0o644, b"");
        let long = format!("output/{}/f", "d".repeat(120));
        add_file(&mut b, &long, 0o644, b"long");
        let archive = b.into_inner().unwrap();

        let sb = sandbox();
        let ex = sb.run(&archive[..], &LIM).unwrap();
        assert!(ex.rejected.is_empty(), "{:?}", ex.rejected);
        let paths: Vec<&str> = ex.files.iter().map(|f| f.path.as_str()).collect();
        let d120 = format!("{}/f", "d".repeat(120));
        let mut expected = vec!["a.txt", "empty", "sub/deeper/x.bin", "sub/run.sh", &d120];
        expected.sort();
        assert_eq!(paths, expected);
        let dd = "d".repeat(120);
        let mut exp_dirs = vec!["sub".to_string(), "sub/deeper".to_string(), dd];
        exp_dirs.sort();
        assert_eq!(ex.dirs, exp_dirs);
        let a = ex.files.iter().find(|f| f.path == "a.txt").unwrap();
        assert_eq!(a.size, 6);
        assert_eq!(a.sha256, sha(b"hello\n"));
        assert_eq!(
            a.sha256,
            "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
        );
        let x = ex
            .files
            .iter()
            .find(|f| f.path == "sub/deeper/x.bin")
            .unwrap();
        assert_eq!(x.sha256, sha(&[7u8; 5000]));
        assert_eq!(ex.total_bytes, 6 + 10 + 5000 + 4);
        assert_eq!(sb.read("sub/run.sh"), b"#!/bin/sh\n");
        let (files, dirs) = sb.check(); // also checks 0644 / 0755
        assert_eq!(
            files,
            paths.iter().map(|s| s.to_string()).collect::<Vec<_>>()
        );
        assert_eq!(dirs, ex.dirs);
    }

    #[test]
    fn root_variants_and_pax_names_are_accepted() {
        for root in [&b"output"[..], b"output/", b"./output/"] {
            let a = Raw::new()
                .dir(root)
                .file(b"./output/a", b"1")
                .pax(&[("path", b"output/pax-name.txt")])
                .file(b"output/ignored-by-pax", b"2")
                .finish();
            let sb = sandbox();
            let ex = sb.run(&a[..], &LIM).unwrap();
            let paths: Vec<_> = ex.files.iter().map(|f| f.path.clone()).collect();
            assert_eq!(paths, vec!["a", "pax-name.txt"]);
            sb.check();
        }
    }

    #[test]
    fn modes_normalised_even_with_strict_umask_bits_in_archive() {
        let a = Raw::with_root()
            .entry(b"output/d/", b'5', 0o1700, b"", b"")
            .entry(b"output/d/f", b'0', 0o000, b"x", b"")
            .entry(b"output/g", b'7', 0o777, b"contiguous", b"")
            .entry(b"output/h", 0, 0o666, b"old-style", b"")
            .finish();
        let sb = sandbox();
        let ex = sb.run(&a[..], &LIM).unwrap();
        assert_eq!(ex.files.len(), 3, "{:?}", ex.rejected);
        sb.check();
    }

    // --- names ------------------------------------------------------------

    fn assert_single_rejection(a: Vec<u8>, needle: &str) -> Sandbox {
        let sb = sandbox();
        let ex = sb.run(&a[..], &LIM).unwrap();
        let reason = only_reason(&ex);
        assert!(
            reason.contains(needle),
            "reason {reason:?} lacks {needle:?}"
        );
        assert!(ex.files.is_empty());
        sb.check();
        sb
    }

    #[test]
    fn dotdot_entry_rejected() {
        let a = Raw::with_root().file(b"output/../evil", b"x").finish();
        assert_single_rejection(a, "'..'");
        let a = Raw::with_root()
            .file(b"output/../outside/evil", b"x")
            .finish();
        assert_single_rejection(a, "'..'");
        let a = Raw::with_root().file(b"output/a/../../x", b"x").finish();
        assert_single_rejection(a, "'..'");
    }

    #[test]
    fn absolute_path_rejected() {
        let sb = sandbox();
        let abs = format!("{}/evil", sb.outside.display());
        let a = Raw::with_root()
            .file(abs.as_bytes(), b"x")
            .file(b"/output/x", b"x")
            .dir(b"/")
            .finish();
        let ex = sb.run(&a[..], &LIM).unwrap();
        assert_eq!(ex.rejected.len(), 3);
        assert!(ex.rejected.iter().all(|r| r.reason == "absolute path"));
        assert!(ex.files.is_empty());
        sb.check();
    }

    #[test]
    fn dot_and_empty_components_rejected() {
        for (name, needle) in [
            (&b"output/./a"[..], "'.'"),
            (b"././output/a", "'.'"),
            (b"output//a", "empty path component"),
            (b"output/a\\b", "backslash"),
            (b"", "empty name"),
        ] {
            let a = Raw::with_root().file(name, b"x").finish();
            assert_single_rejection(a, needle);
        }
    }

    #[test]
    fn entries_outside_root_rejected() {
        let a = Raw::with_root().file(b"other/a", b"x").finish();
        assert_single_rejection(a, "outside root");
        let a = Raw::with_root().file(b"Output/a", b"x").finish();
        assert_single_rejection(a, "outside root");
        let a = Raw::with_root().file(b"a", b"x").finish();
        assert_single_rejection(a, "outside root");
    }

    #[test]
    fn symlink_to_etc_passwd_rejected() {
        let a = Raw::with_root()
            .link(b"output/pw", b'2', b"/etc/passwd")
            .finish();
        let sb = sandbox();
        let ex = sb.run(&a[..], &LIM).unwrap();
        assert_eq!(
            ex.rejected,
            vec![Rejected {
                path: "output/pw".into(),
                reason: "symlink to /etc/passwd".into()
            }]
        );
        sb.check();
    }

    #[test]
    fn symlink_to_slash_rejected() {
        let a = Raw::with_root().link(b"output/r", b'2', b"/").finish();
        assert_single_rejection(a, "symlink to /");
    }

    #[test]
    fn symlink_with_hostile_target_is_escaped() {
        let a = Raw::with_root()
            .link(b"output/r", b'2', b"\x1b[31m\n\xff")
            .finish();
        let sb = assert_single_rejection(a, "symlink to \\u{1b}[31m\\u{a}\u{fffd}");
        drop(sb);
    }

    #[test]
    fn write_through_symlink_stays_inside_dest() {
        let sb = sandbox();
        let target = sb.outside.to_string_lossy().into_owned();
        let a = Raw::with_root()
            .link(b"output/link", b'2', target.as_bytes())
            .file(b"output/link/x", b"pwned")
            .dir(b"output/link/sub/")
            .link(b"output/tmp", b'2', b"/tmp")
            .file(b"output/tmp/x", b"pwned")
            .finish();
        let ex = sb.run(&a[..], &LIM).unwrap();
        assert!(ex.files.is_empty());
        assert_eq!(ex.rejected.len(), 5);
        assert!(ex.rejected[0].reason.starts_with("symlink to "));
        assert_eq!(ex.rejected[1].reason, "parent output/link was rejected");
        assert_eq!(ex.rejected[2].reason, "parent output/link was rejected");
        assert_eq!(ex.rejected[3].reason, "symlink to /tmp");
        assert_eq!(ex.rejected[4].reason, "parent output/tmp was rejected");
        assert!(!Path::new("/tmp/x").exists() || fs::read("/tmp/x").unwrap() != b"pwned");
        let (files, dirs) = sb.check();
        assert!(files.is_empty() && dirs.is_empty());
    }

    #[test]
    fn hard_link_rejected() {
        let a = Raw::with_root()
            .file(b"output/x", b"data")
            .link(b"output/h", b'1', b"output/x")
            .link(b"output/h2", b'1', b"/etc/shadow")
            .finish();
        let sb = sandbox();
        let ex = sb.run(&a[..], &LIM).unwrap();
        assert_eq!(ex.files.len(), 1);
        assert_eq!(ex.rejected[0].reason, "hard link to output/x");
        assert_eq!(ex.rejected[1].reason, "hard link to /etc/shadow");
        sb.check();
    }

    #[test]
    fn special_files_rejected() {
        for (typ, reason) in [
            (b'6', "fifo"),
            (b'3', "character device"),
            (b'4', "block device"),
            (b'Y', "socket or unknown type 0x59"),
            (b'g', "unsupported extension header type 0x67"),
        ] {
            let a = Raw::with_root()
                .entry(b"output/special", typ, 0o666, b"", b"")
                .file(b"output/after", b"ok")
                .finish();
            let sb = sandbox();
            let ex = sb.run(&a[..], &LIM).unwrap();
            assert_eq!(only_reason(&ex), reason);
            assert_eq!(ex.files.len(), 1);
            sb.check();
        }
    }

    #[test]
    fn what_the_init_could_not_archive_is_listed_with_its_reason() {
        let a = Raw::with_root()
            .pax(&[(INIT_REFUSAL_KEY, b"Permission denied (os error 13)\x1b[2J")])
            .entry(b"output/secret.txt", INIT_REFUSAL_TYPE, 0, b"", b"")
            .dir(b"output/closed/")
            .pax(&[(INIT_REFUSAL_KEY, b"cannot list it")])
            .entry(b"output/closed/", INIT_REFUSAL_TYPE, 0, b"", b"")
            .entry(b"output/no-reason", INIT_REFUSAL_TYPE, 0, b"", b"")
            .file(b"output/after", b"ok")
            .finish();
        let sb = sandbox();
        let ex = sb.run(&a[..], &LIM).unwrap();
        let listed: Vec<(&str, &str)> = ex
            .rejected
            .iter()
            .map(|r| (r.path.as_str(), r.reason.as_str()))
            .collect();
        assert_eq!(
            listed,
            [
                (
                    "output/secret.txt",
                    "not archived by the init: Permission denied (os error 13)\\u{1b}[2J"
                ),
                ("output/closed/", "not archived by the init: cannot list it"),
                ("output/no-reason", "not archived by the init"),
            ]
        );
        assert_eq!(ex.files.len(), 1);
        assert_eq!(ex.dirs, ["closed"]);
        sb.check();
    }

    #[test]
    fn gnu_sparse_rejected_or_malformed() {
        // A valid GNU sparse entry (GNU header) is rejected; the data it
        // declares is skipped, never expanded.
        let mut h = Header::new_gnu();
        h.as_old_mut().name[..13].copy_from_slice(b"output/sparse");
        h.set_entry_type(EntryType::GNUSparse);
        h.set_mode(0o644);
        h.set_size(512);
        if let Some(g) = h.as_gnu_mut() {
            g.sparse[0].set_offset(1 << 40);
            g.sparse[0].set_length(512);
            g.set_real_size((1 << 40) + 512);
        }
        h.set_cksum();
        let a = Raw::with_root()
            .block(&h)
            .data(&[9u8; 512])
            .file(b"output/after", b"ok")
            .finish();
        let sb = sandbox();
        let ex = sb.run(&a[..], &LIM).unwrap();
        assert_eq!(only_reason(&ex), "gnu sparse file");
        assert_eq!(ex.files.len(), 1);
        sb.check();
        // Sparse type on a non-GNU header: the tar crate refuses the archive.
        let a = Raw::with_root()
            .entry(b"output/sparse", b'S', 0o644, b"", b"")
            .finish();
        let sb = sandbox();
        let r = sb.run(&a[..], &LIM);
        assert!(matches!(r, Err(ExtractError::Malformed(_))), "{r:?}");
        sb.check();
    }

    #[test]
    fn setuid_and_setgid_rejected() {
        let a = Raw::with_root()
            .entry(b"output/suid", b'0', 0o4755, b"x", b"")
            .entry(b"output/sgid", b'0', 0o2755, b"x", b"")
            .entry(b"output/sticky", b'0', 0o1644, b"x", b"")
            .entry(b"output/sgid-dir/", b'5', 0o2775, b"", b"")
            .finish();
        let sb = sandbox();
        let ex = sb.run(&a[..], &LIM).unwrap();
        let reasons: Vec<_> = ex.rejected.iter().map(|r| r.reason.as_str()).collect();
        assert_eq!(reasons, vec!["setuid bit", "setgid bit"]);
        assert_eq!(ex.files.len(), 1);
        assert_eq!(ex.dirs, vec!["sgid-dir"]);
        sb.check();
    }

    #[test]
    fn non_utf8_name_rejected_and_escaped() {
        let a = Raw::with_root().file(b"output/\xff\xfe\x1b", b"x").finish();
        let sb = sandbox();
        let ex = sb.run(&a[..], &LIM).unwrap();
        assert_eq!(ex.rejected[0].reason, "name is not valid UTF-8");
        assert_eq!(ex.rejected[0].path, "output/\u{fffd}\u{fffd}\\u{1b}");
        sb.check();
    }

    #[test]
    fn control_characters_rejected() {
        for (name, needle) in [
            (&b"output/a\nb"[..], "U+000A"),
            (b"output/a\rb", "U+000D"),
            (b"output/a\tb", "U+0009"),
            (b"output/a\x7fb", "U+007F"),
            (b"output/a\xc2\x85b", "U+0085"),
        ] {
            let a = Raw::with_root().file(name, b"x").finish();
            let sb = assert_single_rejection(a, needle);
            drop(sb);
        }
        let a = Raw::with_root().file(b"output/evil\n.txt", b"x").finish();
        let sb = sandbox();
        let ex = sb.run(&a[..], &LIM).unwrap();
        assert_eq!(ex.rejected[0].path, "output/evil\\u{a}.txt");
    }

    #[test]
    fn nul_in_name_rejected() {
        // A NUL inside the ustar name field just terminates it; a NUL can
        // only reach us through a GNU long name or a PAX path.
        let a = Raw::with_root()
            .longname(b"output/a\0b")
            .block(&raw_header(b"x", b'0', 0, 0o644, b""))
            .finish();
        assert_single_rejection(a, "NUL byte");
        let a = Raw::with_root()
            .pax(&[("path", b"output/a\0/../../x")])
            .block(&raw_header(b"x", b'0', 0, 0o644, b""))
            .finish();
        assert_single_rejection(a, "NUL byte");
    }

    #[test]
    fn bidi_and_invisible_characters_rejected() {
        for c in [
            '\u{202E}',
            '\u{2066}',
            '\u{200F}',
            '\u{200C}',
            '\u{FEFF}',
            '\u{2028}',
            // Tag characters hide whole words; U+3164 looks like a space; U+FE0F, U+E0100 vary.
            '\u{E0001}',
            '\u{E0041}',
            '\u{E007F}',
            '\u{3164}',
            '\u{FFA0}',
            '\u{FE0F}',
            '\u{E0100}',
            '\u{115F}',
            '\u{00AD}',
        ] {
            let name = format!("output/invoice{c}txt.exe");
            let a = Raw::with_root().file(name.as_bytes(), b"x").finish();
            let sb = sandbox();
            let ex = sb.run(&a[..], &LIM).unwrap();
            let r = only_reason(&ex);
            assert!(r.starts_with("bidi or invisible"), "{r}");
            assert!(!ex.rejected[0].path.contains(c));
            sb.check();
        }
    }

    #[test]
    fn long_component_rejected() {
        let name = format!("output/{}", "a".repeat(255));
        let a = Raw::with_root().file(name.as_bytes(), b"x").finish();
        assert_single_rejection(a, "path component too long: 255 bytes > 128");
        // via PAX as well
        let a = Raw::with_root()
            .pax(&[("path", name.as_bytes())])
            .file(b"output/short", b"x")
            .finish();
        assert_single_rejection(a, "path component too long");
        // exactly at the limit is fine
        let name = format!("output/{}", "a".repeat(MAX_COMPONENT_BYTES));
        let a = Raw::with_root().file(name.as_bytes(), b"x").finish();
        let sb = sandbox();
        assert_eq!(sb.run(&a[..], &LIM).unwrap().files.len(), 1);
    }

    #[test]
    fn long_path_rejected_and_report_truncated() {
        let name = format!("output/{}", "abcdefgh/".repeat(200));
        let a = Raw::with_root().file(name.as_bytes(), b"x").finish();
        let sb = assert_single_rejection(a, "path too long");
        drop(sb);
        // A megabyte-long hostile name is reported truncated.
        let name = vec![b'\n'; 1 << 20];
        let a = Raw::with_root()
            .longname(&name)
            .block(&raw_header(b"x", b'0', 0, 0o644, b""))
            .finish();
        let sb = sandbox();
        let ex = sb.run(&a[..], &LIM).unwrap();
        assert!(ex.rejected[0].path.len() < MAX_REPORTED_BYTES + 64);
        assert!(ex.rejected[0].path.ends_with("[truncated]"));
    }

    #[test]
    fn over_deep_path_rejected() {
        let ok = format!("output/{}f", "d/".repeat(MAX_DEPTH - 1));
        let deep = format!("output/{}f", "d/".repeat(MAX_DEPTH));
        let a = Raw::with_root()
            .file(ok.as_bytes(), b"ok")
            .file(deep.as_bytes(), b"x")
            .finish();
        let sb = sandbox();
        let ex = sb.run(&a[..], &LIM).unwrap();
        assert_eq!(ex.files.len(), 1);
        assert_eq!(ex.dirs.len(), MAX_DEPTH - 1);
        assert!(only_reason(&ex).starts_with("path too deep: 17"));
        sb.check();
    }

    #[test]
    fn git_components_rejected() {
        for name in [
            &b"output/.git/config"[..],
            b"output/.GIT/hooks/pre-commit",
            b"output/sub/.Git/",
            b"output/.git",
            b"output/.git./config",
            b"output/.git /config",
            b"output/.git::$INDEX_ALLOCATION/config",
            b"output/GIT~1/config",
        ] {
            let a = Raw::with_root().file(name, b"x").finish();
            assert_single_rejection(a, "'.git'");
        }
        // Not .git:
        let a = Raw::with_root()
            .file(b"output/.gitignore", b"x")
            .file(b"output/x.git", b"x")
            .finish();
        let sb = sandbox();
        assert_eq!(sb.run(&a[..], &LIM).unwrap().files.len(), 2);
    }

    #[test]
    fn trailing_slash_on_file_rejected() {
        let a = Raw::with_root().file(b"output/a/", b"x").finish();
        assert_single_rejection(a, "trailing slash");
    }

    // --- duplicates and collisions --------------------------------------

    #[test]
    fn duplicate_path_rejected_first_wins() {
        let a = Raw::with_root()
            .file(b"output/a", b"first")
            .file(b"output/a", b"second")
            .file(b"./output/a", b"third")
            .finish();
        let sb = sandbox();
        let ex = sb.run(&a[..], &LIM).unwrap();
        assert_eq!(ex.files.len(), 1);
        assert_eq!(ex.rejected.len(), 2);
        assert!(ex.rejected.iter().all(|r| r.reason == "duplicate path"));
        assert_eq!(sb.read("a"), b"first");
        sb.check();
    }

    #[test]
    fn case_insensitive_duplicate_rejected() {
        let a = Raw::with_root()
            .file(b"output/Readme.md", b"first")
            .file(b"output/README.md", b"second")
            .dir(b"output/Dir/")
            .file(b"output/dir/x", b"x")
            .dir(b"output/DIR")
            .finish();
        let sb = sandbox();
        let ex = sb.run(&a[..], &LIM).unwrap();
        assert_eq!(ex.files.len(), 1);
        let reasons: Vec<_> = ex.rejected.iter().map(|r| r.reason.as_str()).collect();
        assert_eq!(
            reasons,
            vec![
                "case-insensitive duplicate of output/Readme.md",
                "parent collides case-insensitively with output/Dir",
                "case-insensitive duplicate of output/Dir",
            ]
        );
        assert_eq!(sb.read("Readme.md"), b"first");
        sb.check();
    }

    #[test]
    fn file_parent_and_dir_over_file_rejected() {
        let a = Raw::with_root()
            .file(b"output/f", b"x")
            .file(b"output/f/child", b"x")
            .dir(b"output/f/")
            .dir(b"output/d/")
            .file(b"output/d", b"x")
            .file(b"output/i/j", b"x")
            .dir(b"output/i/")
            .finish();
        let sb = sandbox();
        let ex = sb.run(&a[..], &LIM).unwrap();
        let reasons: Vec<_> = ex.rejected.iter().map(|r| r.reason.as_str()).collect();
        assert_eq!(
            reasons,
            vec![
                "parent output/f is a file",
                "directory entry at a path that is a file",
                "duplicate path: file entry at a path that is a directory",
            ]
        );
        assert_eq!(ex.dirs, vec!["d", "i"]);
        sb.check();
    }

    #[test]
    fn second_root_entry_rejected() {
        let a = Raw::with_root()
            .link(b"output", b'2', b"/")
            .dir(b"output/")
            .file(b"output/a", b"x")
            .finish();
        let sb = sandbox();
        let ex = sb.run(&a[..], &LIM).unwrap();
        assert_eq!(ex.rejected.len(), 2);
        assert!(ex.rejected.iter().all(|r| r.reason.contains("second root")));
        assert_eq!(ex.files.len(), 1);
        sb.check();
    }

    // --- root ---------------------------------------------------------------

    #[test]
    fn root_replaced_by_symlink_aborts_with_nothing_extracted() {
        let a = Raw::new()
            .link(b"output", b'2', b"/etc")
            .file(b"output/passwd", b"x")
            .finish();
        let sb = sandbox();
        match sb.run(&a[..], &LIM) {
            Err(ExtractError::UnexpectedRoot { expected, found }) => {
                assert_eq!(expected, "output");
                assert_eq!(found, "output (symlink to /etc)");
            }
            other => panic!("{other:?}"),
        }
        let (files, dirs) = sb.check();
        assert!(files.is_empty() && dirs.is_empty());
    }

    #[test]
    fn root_that_is_a_file_or_missing_aborts() {
        for a in [
            Raw::new().file(b"output", b"x").finish(),
            Raw::new().file(b"output/a", b"x").finish(),
            Raw::new().dir(b"other/").finish(),
            Raw::new().finish(),
            Vec::new(),
        ] {
            let sb = sandbox();
            let r = sb.run(&a[..], &LIM);
            assert!(
                matches!(r, Err(ExtractError::UnexpectedRoot { .. })),
                "{r:?}"
            );
            let (files, dirs) = sb.check();
            assert!(files.is_empty() && dirs.is_empty());
        }
    }

    #[test]
    fn bad_arguments_rejected() {
        let sb = sandbox();
        let a = Raw::with_root().finish();
        for root in ["", ".", "..", "a/b", "/output", "out\nput"] {
            let r = extract(&a[..], root, &sb.dest, &LIM);
            assert!(matches!(r, Err(ExtractError::InvalidRoot(_))), "{root:?}");
        }
        fs::write(sb.dest.join("x"), b"x").unwrap();
        let r = sb.run(&a[..], &LIM);
        assert!(matches!(r, Err(ExtractError::InvalidDestination { .. })));
        let link = sb.tmp.path().join("link");
        std::os::unix::fs::symlink(&sb.outside, &link).unwrap();
        let r = extract(&a[..], "output", &link, &LIM);
        assert!(matches!(r, Err(ExtractError::InvalidDestination { .. })));
    }

    // --- limits ---------------------------------------------------------

    #[test]
    fn file_over_cap_rejected_next_file_extracted() {
        let lim = Limits {
            max_file_bytes: 1000,
            ..LIM
        };
        let a = Raw::with_root()
            .file(b"output/big", &[1u8; 1001])
            .file(b"output/exact", &[2u8; 1000])
            .finish();
        let sb = sandbox();
        let ex = sb.run(&a[..], &lim).unwrap();
        assert_eq!(only_reason(&ex), "file too large: 1001 bytes > cap 1000");
        assert_eq!(ex.files.len(), 1);
        assert_eq!(ex.files[0].path, "exact");
        assert_eq!(ex.total_bytes, 1000);
        let (files, _) = sb.check();
        assert_eq!(files, vec!["exact"]);
    }

    #[test]
    fn huge_declared_size_rejected_without_reading_into_stage() {
        // PAX size of 2^40 with only 1 KiB of data present: rejected by
        // header size; skipping it then runs off the end of the stream.
        let a = Raw::with_root()
            .pax(&[("size", b"1099511627776")])
            .file(b"output/huge", &[0u8; 1024])
            .finish();
        let sb = sandbox();
        let r = sb.run(&a[..], &LIM);
        assert!(matches!(r, Err(ExtractError::Truncated(_))), "{r:?}");
        let (files, _) = sb.check();
        assert!(files.is_empty());
    }

    #[test]
    fn total_over_cap_aborts() {
        let lim = Limits {
            max_files: 100,
            max_total_bytes: 2500,
            max_file_bytes: 1000,
        };
        let a = Raw::with_root()
            .file(b"output/a", &[1u8; 1000])
            .file(b"output/b", &[1u8; 1000])
            .file(b"output/c", &[1u8; 1000])
            .finish();
        let sb = sandbox();
        let r = sb.run(&a[..], &lim);
        assert!(
            matches!(r, Err(ExtractError::TotalBytesExceeded { limit: 2500 })),
            "{r:?}"
        );
        sb.check();
    }

    #[test]
    fn too_many_files_aborts() {
        let lim = Limits {
            max_files: 3,
            ..LIM
        };
        let mut raw = Raw::with_root();
        for i in 0..4 {
            raw = raw.file(format!("output/f{i}").as_bytes(), b"");
        }
        let sb = sandbox();
        let r = sb.run(&raw.finish()[..], &lim);
        assert!(
            matches!(r, Err(ExtractError::FileCountExceeded { limit: 3 })),
            "{r:?}"
        );
        sb.check();
        // exactly at the limit is fine
        let mut raw = Raw::with_root();
        for i in 0..3 {
            raw = raw.file(format!("output/f{i}").as_bytes(), b"");
        }
        let sb = sandbox();
        assert_eq!(sb.run(&raw.finish()[..], &lim).unwrap().files.len(), 3);
    }

    /// Lazily generates a root entry followed by `count` FIFO headers and an
    /// end marker, counting how many headers were handed out.
    struct Flood {
        next: u64,
        count: u64,
        produced: Rc<TCell<u64>>,
        buf: Vec<u8>,
        pos: usize,
        done: bool,
    }

    impl Read for Flood {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if self.pos == self.buf.len() {
                if self.done {
                    return Ok(0);
                }
                self.pos = 0;
                self.buf = if self.next == 0 {
                    raw_header(b"output/", b'5', 0, 0o755, b"")
                        .as_bytes()
                        .to_vec()
                } else if self.next <= self.count {
                    let name = format!("output/p{}", self.next);
                    raw_header(name.as_bytes(), b'6', 0, 0o644, b"")
                        .as_bytes()
                        .to_vec()
                } else {
                    self.done = true;
                    vec![0u8; 1024]
                };
                self.next += 1;
                self.produced.set(self.next);
            }
            let n = out.len().min(self.buf.len() - self.pos);
            out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    fn flood(count: u64) -> (Flood, Rc<TCell<u64>>) {
        let produced = Rc::new(TCell::new(0));
        let f = Flood {
            next: 0,
            count,
            produced: produced.clone(),
            buf: Vec::new(),
            pos: 0,
            done: false,
        };
        (f, produced)
    }

    #[test]
    fn hundred_thousand_entries_hit_entry_cap_quickly() {
        let lim = Limits {
            max_files: 10,
            ..LIM
        };
        let cap = max_entries(&lim);
        assert_eq!(cap, 10_020);
        let (f, produced) = flood(100_000);
        let sb = sandbox();
        let r = sb.run(f, &lim);
        assert!(
            matches!(r, Err(ExtractError::EntryCountExceeded { limit: 10_020 })),
            "{r:?}"
        );
        assert!(produced.get() <= cap + 2, "read {} headers", produced.get());
        sb.check();
    }

    #[test]
    fn rejections_beyond_record_limit_are_counted() {
        let (f, _) = flood(1500);
        let sb = sandbox();
        let ex = sb.run(f, &LIM).unwrap();
        assert_eq!(ex.rejected.len(), MAX_REJECTED_RECORDED);
        assert_eq!(ex.rejected_omitted, 500);
        assert!(ex.rejected.iter().all(|r| r.reason == "fifo"));
        sb.check();
    }

    /// A reader that yields `head` and then `tail` repeated forever, counting
    /// bytes handed out.
    struct Endless {
        head: Vec<u8>,
        tail: Vec<u8>,
        pos: usize,
        given: Rc<TCell<u64>>,
    }

    impl Read for Endless {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let mut n = 0;
            while n < out.len() {
                let b = if self.pos < self.head.len() {
                    self.head[self.pos]
                } else {
                    let t = (self.pos - self.head.len()) % self.tail.len();
                    self.tail[t]
                };
                out[n] = b;
                n += 1;
                self.pos += 1;
            }
            self.given.set(self.given.get() + n as u64);
            Ok(n)
        }
    }

    fn endless(head: Vec<u8>, tail: Vec<u8>) -> (Endless, Rc<TCell<u64>>) {
        let given = Rc::new(TCell::new(0));
        let e = Endless {
            head,
            tail,
            pos: 0,
            given: given.clone(),
        };
        (e, given)
    }

    #[test]
    fn endless_zero_padding_is_refused_after_a_bounded_read() {
        let head = Raw::with_root().file(b"output/a", b"x").0;
        let (e, given) = endless(head, vec![0]);
        let sb = sandbox();
        assert!(matches!(sb.run(e, &LIM), Err(ExtractError::Malformed(_))));
        assert!(given.get() < 128 * 1024);
        // Pure zeros: no root.
        let (e, _) = endless(Vec::new(), vec![0]);
        let sb = sandbox();
        assert!(matches!(
            sb.run(e, &LIM),
            Err(ExtractError::UnexpectedRoot { .. })
        ));
    }

    #[test]
    fn endless_skipped_data_cut_by_archive_byte_cap() {
        let lim = Limits {
            max_files: 10,
            max_total_bytes: 4096,
            max_file_bytes: 1024,
        };
        let cap = max_archive_bytes(&lim);
        let mut h = raw_header(b"output/endless", b'0', 0, 0o644, b"");
        h.set_size(u64::MAX / 2); // base-256 encoded
        h.set_cksum();
        let head = Raw::with_root().block(&h).0;
        let (e, given) = endless(head, vec![0]);
        let sb = sandbox();
        let r = sb.run(e, &lim);
        assert!(
            matches!(r, Err(ExtractError::ArchiveBytesExceeded { limit }) if limit == cap),
            "{r:?}"
        );
        assert!(given.get() <= cap + 64 * 1024, "{} > {cap}", given.get());
        sb.check();
    }

    #[test]
    fn endless_sparse_extension_blocks_cut_by_archive_byte_cap() {
        let lim = Limits {
            max_files: 10,
            max_total_bytes: 4096,
            max_file_bytes: 1024,
        };
        let cap = max_archive_bytes(&lim);
        let mut h = Header::new_gnu();
        h.as_old_mut().name[..13].copy_from_slice(b"output/sparse");
        h.set_entry_type(EntryType::GNUSparse);
        h.set_size(0);
        h.set_mode(0o644);
        if let Some(g) = h.as_gnu_mut() {
            g.isextended[0] = 1;
            g.set_real_size(0);
        }
        h.set_cksum();
        let head = Raw::with_root().block(&h).0;
        let mut ext = vec![0u8; 512];
        ext[504] = 1;
        let (e, given) = endless(head, ext);
        let sb = sandbox();
        let r = sb.run(e, &lim);
        assert!(
            matches!(r, Err(ExtractError::ArchiveBytesExceeded { .. })),
            "{r:?}"
        );
        assert!(given.get() <= cap + 64 * 1024);
        sb.check();
    }

    #[test]
    fn endless_headers_cut() {
        // Endless identical FIFO headers: entry cap (or byte cap) stops it.
        let mut head = Raw::with_root().0;
        head.extend_from_slice(raw_header(b"output/p", b'6', 0, 0o644, b"").as_bytes());
        let tail = raw_header(b"output/p", b'6', 0, 0o644, b"")
            .as_bytes()
            .to_vec();
        let (e, _) = endless(head, tail);
        let sb = sandbox();
        let r = sb.run(e, &LIM);
        assert!(
            matches!(
                r,
                Err(ExtractError::EntryCountExceeded { .. }
                    | ExtractError::ArchiveBytesExceeded { .. })
            ),
            "{r:?}"
        );
    }

    // --- malformed streams ---------------------------------------------------

    #[test]
    fn truncated_archive_is_an_error_at_every_cut() {
        let full = Raw::with_root()
            .file(b"output/a", &[5u8; 700])
            .dir(b"output/d/")
            .file(b"output/d/b", b"hello")
            .finish();
        // The tar crate stops at the first zero block.
        let first_zero_block_end = full.len() - 512;
        for cut in 0..full.len() {
            let sb = sandbox();
            let r = sb.run(&full[..cut], &LIM);
            if cut >= first_zero_block_end {
                assert!(r.is_ok(), "cut {cut}: {r:?}");
            } else {
                assert!(r.is_err(), "cut {cut} was accepted");
                if cut >= 512 {
                    assert!(
                        matches!(r, Err(ExtractError::Truncated(_))),
                        "cut {cut}: {r:?}"
                    );
                }
            }
            sb.check();
        }
    }

    #[test]
    fn garbage_stream_is_an_error() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let garbage: Vec<u8> = (0..20_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        let sb = sandbox();
        let r = sb.run(&garbage[..], &LIM);
        assert!(matches!(r, Err(ExtractError::Malformed(_))), "{r:?}");
        // Garbage after a valid root.
        let mut a = Raw::with_root().0;
        a.extend_from_slice(&garbage);
        let sb = sandbox();
        let r = sb.run(&a[..], &LIM);
        assert!(matches!(r, Err(ExtractError::Malformed(_))), "{r:?}");
        sb.check();
    }

    #[test]
    fn data_after_the_end_marker_is_refused_and_zero_padding_accepted() {
        let mut padded = Raw::with_root().file(b"output/a", b"x").finish();
        padded.extend_from_slice(&[0u8; 10240]);
        let sb = sandbox();
        assert_eq!(sb.run(&padded[..], &LIM).unwrap().files.len(), 1);
        let mut smuggled = Raw::with_root().file(b"output/a", b"x").finish();
        smuggled.extend_from_slice(&Raw::new().file(b"output/b", b"y").finish());
        let sb = sandbox();
        let r = sb.run(&smuggled[..], &LIM);
        assert!(matches!(r, Err(ExtractError::Malformed(_))), "{r:?}");
    }

    #[test]
    fn malformed_message_is_escaped() {
        let mut h = raw_header(b"output/\x1b[2Jx\n", b'0', 0, 0o644, b"");
        h.as_old_mut().size = *b"zzzzzzzzzzz\0";
        h.set_cksum();
        let a = Raw::with_root().block(&h).finish();
        let sb = sandbox();
        match sb.run(&a[..], &LIM) {
            Err(e @ ExtractError::Malformed(_)) => {
                let msg = e.to_string();
                assert!(!msg.contains('\n') && !msg.contains('\x1b'), "{msg:?}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn inner_reader_error_is_io() {
        struct Failing;
        impl Read for Failing {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::new(io::ErrorKind::ConnectionReset, "boom"))
            }
        }
        let head = Raw::with_root().0;
        let sb = sandbox();
        let r = sb.run((&head[..]).chain(Failing), &LIM);
        assert!(matches!(r, Err(ExtractError::Io { .. })), "{r:?}");
    }

    #[test]
    fn error_messages_are_single_line() {
        let errs = [
            ExtractError::FileCountExceeded { limit: 1 },
            ExtractError::TotalBytesExceeded { limit: 1 },
            ExtractError::EntryCountExceeded { limit: 1 },
            ExtractError::ArchiveBytesExceeded { limit: 1 },
            ExtractError::UnexpectedRoot {
                expected: "output".into(),
                found: "x".into(),
            },
            ExtractError::InvalidRoot("x".into()),
            ExtractError::Malformed("x".into()),
            ExtractError::Truncated("x".into()),
        ];
        for e in errs {
            assert!(!e.to_string().contains('\n'));
        }
    }

    // --- property tests ------------------------------------------------------

    fn component() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            12 => Just(b"a".to_vec()),
            2 => Just(b"A".to_vec()),
            4 => Just(b"b".to_vec()),
            1 => Just(b"output".to_vec()),
            1 => Just(b"..".to_vec()),
            1 => Just(b".".to_vec()),
            1 => Just(b"".to_vec()),
            1 => Just(b".git".to_vec()),
            1 => Just(b"x\ny".to_vec()),
            1 => Just("\u{202e}".as_bytes().to_vec()),
            1 => Just(vec![b'L'; 130]),
            8 => "[a-c]{1,3}".prop_map(|s| s.into_bytes()),
            1 => proptest::collection::vec(any::<u8>(), 1..4),
        ]
    }

    fn name() -> impl Strategy<Value = Vec<u8>> {
        (
            prop_oneof![
                12 => Just(b"output/".to_vec()),
                2 => Just(b"./output/".to_vec()),
                1 => Just(b"/".to_vec()),
                1 => Just(b"".to_vec()),
                1 => Just(b"OUTPUT/".to_vec()),
            ],
            proptest::collection::vec(component(), 1..5),
            proptest::bool::weighted(0.2),
        )
            .prop_map(|(prefix, comps, slash)| {
                let mut n = prefix;
                n.extend_from_slice(&comps.join(&b'/'));
                if slash {
                    n.push(b'/');
                }
                n
            })
    }

    fn typ() -> impl Strategy<Value = u8> {
        prop_oneof![
            12 => Just(b'0'),
            2 => Just(0u8),
            6 => Just(b'5'),
            1 => Just(b'2'),
            1 => Just(b'1'),
            1 => Just(b'3'),
            1 => Just(b'6'),
            1 => Just(b'7'),
            1 => Just(b'L'),
            1 => Just(b'x'),
            1 => any::<u8>(),
        ]
    }

    #[derive(Debug, Clone)]
    struct PEntry {
        name: Vec<u8>,
        typ: u8,
        mode: u32,
        data: Vec<u8>,
        link: Vec<u8>,
        mutations: Vec<(usize, u8)>,
    }

    fn pentry() -> impl Strategy<Value = PEntry> {
        (
            name(),
            typ(),
            prop_oneof![4 => Just(0o644u32), 2 => Just(0o755), 1 => 0u32..0o10000],
            proptest::collection::vec(any::<u8>(), 0..300),
            prop_oneof![
                Just(b"/".to_vec()),
                Just(b"/etc/passwd".to_vec()),
                Just(b"..".to_vec()),
                Just(b"output/a".to_vec()),
                Just(b"a".to_vec()),
            ],
            prop_oneof![
                12 => Just(Vec::new()),
                1 => proptest::collection::vec((0usize..512, any::<u8>()), 1..4),
            ],
        )
            .prop_map(|(name, typ, mode, data, link, mutations)| PEntry {
                name,
                typ,
                mode,
                data,
                link,
                mutations,
            })
    }

    fn build(entries: &[PEntry], with_root: bool, finish: bool) -> Vec<u8> {
        let mut raw = if with_root {
            Raw::with_root()
        } else {
            Raw::new()
        };
        for e in entries {
            if e.name.len() > 100 {
                raw = raw.longname(&e.name);
            }
            let mut h = raw_header(&e.name, e.typ, e.data.len() as u64, e.mode, &e.link);
            for &(i, b) in &e.mutations {
                if !(148..156).contains(&i) {
                    h.as_mut_bytes()[i] = b;
                }
            }
            h.set_cksum();
            raw = raw.block(&h).data(&e.data);
        }
        if finish {
            raw.finish()
        } else {
            raw.0
        }
    }

    fn check_consistent(sb: &Sandbox, r: &Result<Extraction, ExtractError>) {
        let (files, dirs) = sb.check();
        if let Ok(ex) = r {
            let listed: Vec<String> = ex.files.iter().map(|f| f.path.clone()).collect();
            assert_eq!(files, listed);
            assert_eq!(dirs, ex.dirs);
            let mut total = 0;
            for f in &ex.files {
                let data = sb.read(&f.path);
                assert_eq!(data.len() as u64, f.size);
                assert_eq!(sha(&data), f.sha256);
                total += f.size;
            }
            assert_eq!(total, ex.total_bytes);
            assert!(ex.rejected.len() <= MAX_REJECTED_RECORDED);
            for rj in &ex.rejected {
                assert!(!rj.path.chars().any(is_forbidden_char), "{rj:?}");
                assert!(!rj.reason.chars().any(is_forbidden_char), "{rj:?}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn prop_arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096),
                                            with_root in any::<bool>()) {
            let mut a = if with_root { Raw::with_root().0 } else { Vec::new() };
            a.extend_from_slice(&bytes);
            let sb = sandbox();
            let r = sb.run(&a[..], &LIM);
            check_consistent(&sb, &r);
        }

        #[test]
        fn prop_arbitrary_entries_stay_inside_dest(
            entries in proptest::collection::vec(pentry(), 0..12),
            with_root in proptest::bool::weighted(0.9),
            finish in proptest::bool::weighted(0.9),
            max_files in 0u64..8,
            max_total in 0u64..6000,
            max_file in 0u64..1000,
        ) {
            let a = build(&entries, with_root, finish);
            let lim = Limits { max_files, max_total_bytes: max_total, max_file_bytes: max_file };
            let sb = sandbox();
            let r = sb.run(&a[..], &lim);
            check_consistent(&sb, &r);
            if let Ok(ex) = &r {
                prop_assert!(ex.files.len() as u64 <= max_files);
                prop_assert!(ex.total_bytes <= max_total);
                prop_assert!(ex.files.iter().all(|f| f.size <= max_file));
            }
        }
    }
}
