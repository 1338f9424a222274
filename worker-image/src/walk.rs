//! Finding the inputs: a sorted, iterative walk that never follows links,
//! and hashing each regular file while keeping it open for the child.

use std::ffi::OsString;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::escape::escape_path;

/// A regular file found under the input directory.
#[derive(Debug, Clone)]
pub struct Found {
    /// Its path on disk.
    pub abs: PathBuf,
    /// Its path relative to the input directory.
    pub rel: PathBuf,
    /// `rel`, escaped for display ([`escape_path`]).
    pub shown: String,
    /// What `lstat` said (the file opened later must be the same one).
    pub meta: Metadata,
}

/// Something deliberately not read (a symbolic link or a special file),
/// listed so a reviewer knows it was there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Escaped relative path.
    pub path: String,
    /// What it was and why it was skipped.
    pub reason: String,
}

/// A directory or entry that could not be listed or examined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkError {
    /// Escaped relative path (`.` for the input directory itself).
    pub path: String,
    /// What went wrong.
    pub message: String,
}

/// Everything the walk found, in deterministic order.
#[derive(Debug, Default)]
pub struct Walk {
    /// Regular files, sorted by raw path bytes, depth first.
    pub files: Vec<Found>,
    /// Links and special files that were not read.
    pub skipped: Vec<Skipped>,
    /// Entries that could not be examined.
    pub errors: Vec<WalkError>,
}

/// Depth-first walk with an explicit stack (a deeply nested hostile tree
/// cannot overflow the worker's stack), children sorted by raw name bytes so
/// the reports are deterministic. Symbolic links are listed, never followed.
pub fn walk(root: &Path) -> Walk {
    let mut out = Walk::default();
    let mut stack: Vec<(PathBuf, PathBuf)> = Vec::new();
    match sorted_children(root) {
        Ok(children) => push_children(&mut stack, root, Path::new(""), children),
        Err(e) => {
            out.errors.push(WalkError {
                path: ".".to_string(),
                message: format!("cannot list input directory {}: {e}", root.display()),
            });
            return out;
        }
    }
    while let Some((abs, rel)) = stack.pop() {
        let shown = escape_path(rel.as_os_str());
        let meta = match fs::symlink_metadata(&abs) {
            Ok(m) => m,
            Err(e) => {
                out.errors.push(WalkError {
                    path: shown,
                    message: format!("cannot stat: {e}"),
                });
                continue;
            }
        };
        let ft = meta.file_type();
        if ft.is_dir() {
            match sorted_children(&abs) {
                Ok(children) => push_children(&mut stack, &abs, &rel, children),
                Err(e) => out.errors.push(WalkError {
                    path: format!("{shown}/"),
                    message: format!("cannot list directory: {e}"),
                }),
            }
        } else if ft.is_file() {
            out.files.push(Found {
                abs,
                rel,
                shown,
                meta,
            });
        } else if ft.is_symlink() {
            let reason = match fs::read_link(&abs) {
                Ok(target) => format!(
                    "symbolic link to {}, not followed",
                    escape_path(target.as_os_str())
                ),
                Err(_) => "symbolic link, not followed".to_string(),
            };
            out.skipped.push(Skipped {
                path: shown,
                reason,
            });
        } else {
            let what = if ft.is_fifo() {
                "named pipe"
            } else if ft.is_socket() {
                "socket"
            } else if ft.is_char_device() {
                "character device"
            } else if ft.is_block_device() {
                "block device"
            } else {
                "special file"
            };
            out.skipped.push(Skipped {
                path: shown,
                reason: format!("{what}, not read"),
            });
        }
    }
    out
}

fn sorted_children(dir: &Path) -> io::Result<Vec<OsString>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir)? {
        names.push(entry?.file_name());
    }
    names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    Ok(names)
}

fn push_children(
    stack: &mut Vec<(PathBuf, PathBuf)>,
    abs: &Path,
    rel: &Path,
    children: Vec<OsString>,
) {
    for name in children.into_iter().rev() {
        stack.push((abs.join(&name), rel.join(&name)));
    }
}

/// An opened input, hashed and rewound.
#[derive(Debug)]
pub struct Opened {
    /// The open file, positioned at its start (handed to the child).
    pub file: File,
    /// Bytes read while hashing.
    pub size: u64,
    /// Lower-case hex SHA-256 of the contents.
    pub sha256: String,
}

/// Opens the file without following a link (and without blocking on a FIFO
/// swapped in since the walk), checks it is the regular file that was
/// `lstat`ed (same device and inode), hashes it in chunks, and rewinds it.
pub fn open_and_hash(found: &Found) -> io::Result<Opened> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&found.abs)?;
    let fmeta = file.metadata()?;
    if !fmeta.is_file() || fmeta.dev() != found.meta.dev() || fmeta.ino() != found.meta.ino() {
        return Err(io::Error::other("file was replaced while being read"));
    }
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    file.seek(SeekFrom::Start(0))?;
    Ok(Opened {
        file,
        size,
        sha256: hex::encode(hasher.finalize()),
    })
}
