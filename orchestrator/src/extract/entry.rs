//! One archive entry at a time: only regular files and directories are materialised, with
//! modes forced and names tracked case-insensitively so nothing collides, lands under a file or
//! under something rejected.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use sha2::{Digest, Sha256};
use tar::{Entries, Entry, EntryType};

use super::names::{escape_for_report, parse_name};
use super::stream::{stream_error, StreamState};
use super::{
    ExtractError, ExtractedFile, Extraction, Limits, Rejected, INIT_REFUSAL_KEY, INIT_REFUSAL_TYPE,
    MAX_REJECTED_RECORDED,
};

/// Copy buffer size.
const COPY_BUF_BYTES: usize = 64 * 1024;

fn check_root_entry<R: Read>(entry: &Entry<'_, R>, root: &str) -> Result<(), ExtractError> {
    let raw = entry.path_bytes();
    let et = entry.header().entry_type();
    let is_root_name = matches!(parse_name(&raw, root), Ok(p) if p.rel.is_empty());
    if is_root_name && et.is_dir() {
        return Ok(());
    }
    let kind = if et.is_file() || et.is_contiguous() {
        "regular file".to_string()
    } else if et.is_dir() {
        "directory".to_string()
    } else {
        describe_unsupported(entry)
    };
    Err(ExtractError::UnexpectedRoot {
        expected: root.to_string(),
        found: format!("{} ({kind})", escape_for_report(&raw)),
    })
}

/// Why the init could not archive an entry, from its [`INIT_REFUSAL_KEY`] PAX record, escaped
/// (the init quotes the kernel's error, but the record is read as hostile like everything else).
fn init_refusal_reason<R: Read>(entry: &mut Entry<'_, R>) -> String {
    let why = entry.pax_extensions().ok().flatten().and_then(|records| {
        records
            .filter_map(Result::ok)
            .find(|r| r.key_bytes() == INIT_REFUSAL_KEY.as_bytes())
            .map(|r| escape_for_report(r.value_bytes()))
    });
    match why {
        Some(why) => format!("not archived by the init: {why}"),
        None => "not archived by the init".to_string(),
    }
}

/// The header checks on a file entry, before any byte is read: a readable mode without setuid
/// or setgid, and a declared size within the per-file cap. Returns the declared size.
fn check_file_header<R: Read>(entry: &Entry<'_, R>, max_file: u64) -> Result<u64, String> {
    let mode = entry
        .header()
        .mode()
        .map_err(|_| "unreadable mode field".to_string())?;
    if mode & 0o4000 != 0 {
        return Err("setuid bit".to_string());
    }
    if mode & 0o2000 != 0 {
        return Err("setgid bit".to_string());
    }
    // `Entry::size` is the size the tar crate will deliver (PAX `size`
    // overrides the header), i.e. the bytes the archive itself spends.
    let declared = entry.size();
    if declared > max_file {
        return Err(format!("file too large: {declared} bytes > cap {max_file}"));
    }
    Ok(declared)
}

/// Reason text for entry types that are never extracted.
fn describe_unsupported<R: Read>(entry: &Entry<'_, R>) -> String {
    let et = entry.header().entry_type();
    let target = || match entry.link_name_bytes() {
        Some(t) => escape_for_report(&t),
        None => "<none>".to_string(),
    };
    match et {
        EntryType::Symlink => format!("symlink to {}", target()),
        EntryType::Link => format!("hard link to {}", target()),
        EntryType::Char => "character device".to_string(),
        EntryType::Block => "block device".to_string(),
        EntryType::Fifo => "fifo".to_string(),
        EntryType::GNUSparse => "gnu sparse file".to_string(),
        EntryType::XGlobalHeader
        | EntryType::XHeader
        | EntryType::GNULongName
        | EntryType::GNULongLink => {
            format!("unsupported extension header type 0x{:02x}", et.as_byte())
        }
        other => format!("socket or unknown type 0x{:02x}", other.as_byte()),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    /// Created by us as a missing parent; a later explicit directory entry
    /// for it is not a duplicate.
    ImplicitDir,
    /// A valid name whose entry was rejected: nothing may be placed at or
    /// below it afterwards.
    Rejected,
}

struct Seen {
    /// Original-case relative path.
    path: String,
    kind: Kind,
}

/// One extraction in progress: what it wrote and refused so far, and every path it has seen
/// (so a later entry cannot collide with, or land under, an earlier one).
pub(super) struct Extractor<'a> {
    root: &'a str,
    dest: &'a Path,
    limits: &'a Limits,
    state: &'a StreamState,
    archive_cap: u64,
    /// Keyed by lower-cased relative path, so names that collide on
    /// case-insensitive filesystems are detected.
    seen: HashMap<String, Seen>,
    out: Extraction,
    file_count: u64,
}

impl<'a> Extractor<'a> {
    /// An extractor for an archive whose first entry is `root`, writing into `dest`.
    pub(super) fn new(
        root: &'a str,
        dest: &'a Path,
        limits: &'a Limits,
        state: &'a StreamState,
        archive_cap: u64,
    ) -> Self {
        Extractor {
            root,
            dest,
            limits,
            state,
            archive_cap,
            seen: HashMap::new(),
            out: Extraction::default(),
            file_count: 0,
        }
    }

    /// Takes every entry: the first must be the root, the rest are processed one by one, at most
    /// `entry_cap` in all. Returns whether the root was seen.
    pub(super) fn take_all<R: Read>(
        &mut self,
        entries: Entries<'_, R>,
        entry_cap: u64,
    ) -> Result<bool, ExtractError> {
        let mut entry_count: u64 = 0;
        let mut seen_root = false;
        for item in entries {
            let mut entry = item.map_err(|e| stream_error(self.state, self.archive_cap, e))?;
            entry_count = entry_count.saturating_add(1);
            if entry_count > entry_cap {
                return Err(ExtractError::EntryCountExceeded { limit: entry_cap });
            }
            if !seen_root {
                check_root_entry(&entry, self.root)?;
                seen_root = true;
                continue;
            }
            self.process(&mut entry)?;
        }
        Ok(seen_root)
    }

    /// What was extracted, sorted so the report does not depend on the archive's order.
    pub(super) fn finish(self) -> Extraction {
        let mut out = self.out;
        out.files.sort_by(|a, b| a.path.cmp(&b.path));
        out.dirs.sort();
        out
    }

    fn reject(&mut self, shown: String, reason: String) {
        if self.out.rejected.len() < MAX_REJECTED_RECORDED {
            self.out.rejected.push(Rejected {
                path: shown,
                reason,
            });
        } else {
            self.out.rejected_omitted = self.out.rejected_omitted.saturating_add(1);
        }
    }

    /// Reject an entry with a valid name and poison its path, so that a
    /// later entry cannot be placed at or below it (e.g. `link/x` after a
    /// rejected symlink `link`).
    fn reject_path(&mut self, shown: String, rel: &str, reason: String) {
        self.seen.entry(rel.to_lowercase()).or_insert_with(|| Seen {
            path: rel.to_string(),
            kind: Kind::Rejected,
        });
        self.reject(shown, reason);
    }

    fn display(&self, rel: &str) -> String {
        format!("{}/{rel}", self.root)
    }

    /// Check every ancestor of `rel`; return the ones that must be created.
    fn check_ancestors(&self, rel: &[String]) -> Result<Vec<String>, String> {
        let mut missing = Vec::new();
        for i in 1..rel.len() {
            let prefix = rel[..i].join("/");
            match self.seen.get(&prefix.to_lowercase()) {
                None => missing.push(prefix),
                Some(s) if s.path != prefix => {
                    return Err(format!(
                        "parent collides case-insensitively with {}",
                        self.display(&s.path)
                    ))
                }
                Some(s) => match s.kind {
                    Kind::File => {
                        return Err(format!("parent {} is a file", self.display(&s.path)))
                    }
                    Kind::Rejected => {
                        return Err(format!("parent {} was rejected", self.display(&s.path)))
                    }
                    Kind::Dir | Kind::ImplicitDir => {}
                },
            }
        }
        Ok(missing)
    }

    /// Check the entry's own path. `Ok(true)` means it is an already created
    /// implicit directory and a directory entry just confirms it.
    fn check_self(&self, rel: &str, is_dir: bool) -> Result<bool, String> {
        let Some(s) = self.seen.get(&rel.to_lowercase()) else {
            return Ok(false);
        };
        if s.path != rel {
            return Err(format!(
                "case-insensitive duplicate of {}",
                self.display(&s.path)
            ));
        }
        match (s.kind, is_dir) {
            (Kind::ImplicitDir, true) => Ok(true),
            (Kind::File, true) => Err("directory entry at a path that is a file".to_string()),
            (Kind::Dir | Kind::ImplicitDir, false) => {
                Err("duplicate path: file entry at a path that is a directory".to_string())
            }
            (Kind::Rejected, _) => Err("duplicate path (earlier entry was rejected)".to_string()),
            _ => Err("duplicate path".to_string()),
        }
    }

    fn process<R: Read>(&mut self, entry: &mut Entry<'_, R>) -> Result<(), ExtractError> {
        let raw = entry.path_bytes().into_owned();
        let shown = escape_for_report(&raw);
        let et = entry.header().entry_type();

        // Something in the output the init could not archive: a loss the worker caused (a
        // mode-000 file, a starved descriptor limit), listed so it is never a silent one.
        if et.as_byte() == INIT_REFUSAL_TYPE {
            let reason = init_refusal_reason(entry);
            self.reject(shown, reason);
            return Ok(());
        }

        let parsed = match parse_name(&raw, self.root) {
            Ok(p) => p,
            Err(reason) => {
                self.reject(shown, reason);
                return Ok(());
            }
        };
        if parsed.rel.is_empty() {
            self.reject(shown, "duplicate path (second root entry)".to_string());
            return Ok(());
        }
        let rel = parsed.rel.join("/");

        if et.is_dir() {
            self.process_dir(shown, &parsed.rel, &rel)
        } else if et.is_file() || et.is_contiguous() {
            if parsed.trailing_slash {
                let reason = "trailing slash on non-directory entry".to_string();
                self.reject_path(shown, &rel, reason);
                return Ok(());
            }
            self.process_file(entry, shown, &parsed.rel, &rel)
        } else {
            let reason = describe_unsupported(entry);
            self.reject_path(shown, &rel, reason);
            Ok(())
        }
    }

    fn process_dir(
        &mut self,
        shown: String,
        comps: &[String],
        rel: &str,
    ) -> Result<(), ExtractError> {
        let missing = match self.check_ancestors(comps) {
            Ok(m) => m,
            Err(reason) => {
                self.reject_path(shown, rel, reason);
                return Ok(());
            }
        };
        match self.check_self(rel, true) {
            Ok(true) => {
                if let Some(s) = self.seen.get_mut(&rel.to_lowercase()) {
                    s.kind = Kind::Dir;
                }
                return Ok(());
            }
            Ok(false) => {}
            Err(reason) => {
                self.reject_path(shown, rel, reason);
                return Ok(());
            }
        }
        for m in missing {
            self.create_dir(&m, Kind::ImplicitDir)?;
        }
        self.create_dir(rel, Kind::Dir)
    }

    fn process_file<R: Read>(
        &mut self,
        entry: &mut Entry<'_, R>,
        shown: String,
        comps: &[String],
        rel: &str,
    ) -> Result<(), ExtractError> {
        let placed = check_file_header(entry, self.limits.max_file_bytes)
            .and_then(|declared| Ok((declared, self.check_file_place(comps, rel)?)));
        let (declared, missing) = match placed {
            Ok(p) => p,
            Err(reason) => {
                self.reject_path(shown, rel, reason);
                return Ok(());
            }
        };
        self.check_file_caps(declared)?;
        for m in missing {
            self.create_dir(&m, Kind::ImplicitDir)?;
        }
        let Some((written, sha256)) = self.write_file(entry, rel)? else {
            let max_file = self.limits.max_file_bytes;
            let reason = format!("file too large: more than {max_file} bytes > cap {max_file}");
            self.reject_path(shown, rel, reason);
            return Ok(());
        };
        if written != declared {
            return Err(ExtractError::Truncated(format!(
                "inside the data of {shown}: {written} of {declared} bytes"
            )));
        }
        self.file_count += 1;
        self.out.total_bytes = self.out.total_bytes.saturating_add(written);
        self.seen.insert(
            rel.to_lowercase(),
            Seen {
                path: rel.to_string(),
                kind: Kind::File,
            },
        );
        self.out.files.push(ExtractedFile {
            path: rel.to_string(),
            size: written,
            sha256,
        });
        Ok(())
    }

    /// Where a file entry would go: its ancestors and its own path must be free. Returns the
    /// missing parents to create.
    fn check_file_place(&self, comps: &[String], rel: &str) -> Result<Vec<String>, String> {
        let missing = self.check_ancestors(comps)?;
        self.check_self(rel, false)?;
        Ok(missing)
    }

    /// The count and total caps, which abort the whole extraction.
    fn check_file_caps(&self, declared: u64) -> Result<(), ExtractError> {
        if self.file_count.saturating_add(1) > self.limits.max_files {
            return Err(ExtractError::FileCountExceeded {
                limit: self.limits.max_files,
            });
        }
        // The declared size is exactly what the tar crate will hand us (or
        // the stream is truncated), so refuse early instead of writing it;
        // the streaming check in `write_file` remains the authoritative one.
        if self.out.total_bytes.saturating_add(declared) > self.limits.max_total_bytes {
            return Err(ExtractError::TotalBytesExceeded {
                limit: self.limits.max_total_bytes,
            });
        }
        Ok(())
    }

    /// Streams the entry's data into a new 0644 file at `rel`, hashing what is written and
    /// enforcing the per-file and total caps on the bytes actually read. Returns the bytes
    /// written and their sha256, or `None` (and no file) when the file is over its cap.
    fn write_file<R: Read>(
        &mut self,
        entry: &mut Entry<'_, R>,
        rel: &str,
    ) -> Result<Option<(u64, String)>, ExtractError> {
        let max_file = self.limits.max_file_bytes;
        let path = self.dest.join(rel);
        let io_err = |what: &str, e: io::Error| ExtractError::Io {
            context: format!("{what} file {rel:?}"),
            source: e,
        };
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| io_err("creating", e))?;
        // The umask may have stripped bits; force exactly 0644 via the fd.
        file.set_permissions(fs::Permissions::from_mode(0o644))
            .map_err(|e| io_err("setting mode of", e))?;

        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; COPY_BUF_BYTES];
        let mut written: u64 = 0;
        // Never trust the entry reader to stop at the cap: read at most one
        // byte more than allowed.
        let mut limited = (&mut *entry).take(max_file.saturating_add(1));
        loop {
            let n = match limited.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(stream_error(self.state, self.archive_cap, e)),
            };
            written = written.saturating_add(n as u64);
            if written > max_file {
                drop(file);
                fs::remove_file(&path).map_err(|e| io_err("removing oversized", e))?;
                return Ok(None);
            }
            if self.out.total_bytes.saturating_add(written) > self.limits.max_total_bytes {
                return Err(ExtractError::TotalBytesExceeded {
                    limit: self.limits.max_total_bytes,
                });
            }
            let chunk = buf.get(..n).unwrap_or(&[]);
            hasher.update(chunk);
            file.write_all(chunk).map_err(|e| io_err("writing", e))?;
        }
        Ok(Some((written, hex::encode(hasher.finalize()))))
    }

    /// Create one directory (its parent already exists) with mode 0755.
    fn create_dir(&mut self, rel: &str, kind: Kind) -> Result<(), ExtractError> {
        let path = self.dest.join(rel);
        let io_err = |what: &str, e: io::Error| ExtractError::Io {
            context: format!("{what} directory {rel:?}"),
            source: e,
        };
        // mkdir never follows a symlink at the final component; an existing
        // entry (which should be impossible in our private, initially empty
        // stage) is an error, not something to reuse.
        fs::DirBuilder::new()
            .mode(0o755)
            .create(&path)
            .map_err(|e| io_err("creating", e))?;
        // Force exactly 0755 regardless of umask, through a no-follow fd.
        fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_DIRECTORY)
            .open(&path)
            .and_then(|d| d.set_permissions(fs::Permissions::from_mode(0o755)))
            .map_err(|e| io_err("setting mode of", e))?;
        self.seen.insert(
            rel.to_lowercase(),
            Seen {
                path: rel.to_string(),
                kind,
            },
        );
        self.out.dirs.push(rel.to_string());
        Ok(())
    }
}
