//! Copying local files and directories into `/input`: hashed in the same pass, holes kept,
//! and the session's input cap taken by apparent size before a byte is written.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::Stat;
use rustix::io::Errno;
use sha2::{Digest, Sha256};

use super::names::shown;
use super::open::{walk_named, Visitor};
use super::{io_err, listed_path, IntakeError};

/// What is left of the session's input cap.
pub(super) struct Budget {
    cap: u64,
    left: u64,
}

impl Budget {
    /// A full budget of `cap` bytes.
    pub(super) fn new(cap: u64) -> Budget {
        Budget { cap, left: cap }
    }

    /// Bytes still allowed.
    pub(super) fn left(&self) -> u64 {
        self.left
    }

    /// Spends `n` bytes already checked against [`Budget::left`] (a download's own cap).
    pub(super) fn spend(&mut self, n: u64) {
        self.left -= n;
    }

    /// Takes `n` bytes (apparent size) out of the budget, or refuses `path`.
    pub(super) fn take(&mut self, n: u64, path: &Path) -> Result<(), IntakeError> {
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

/// What [`copy_dir`] copied (each file's path below the root, size and sha256) and the links
/// it skipped (their paths below the root), both sorted.
pub(super) type Copied = (Vec<(String, u64, String)>, Vec<String>);

/// Copies the directory the person named as `src` to `dst`, by fd and no-follow; at most
/// `max_files` files. A link inside it is skipped and listed, never followed, unless `strict`,
/// which refuses it.
pub(super) fn copy_dir(
    src: &Path,
    dst: &Path,
    max_files: usize,
    strict: bool,
    budget: &mut Budget,
) -> Result<Copied, IntakeError> {
    let mut copy = CopyTree {
        dst,
        out: Vec::new(),
        links: Vec::new(),
        strict,
        max_files,
        budget,
    };
    walk_named(src, &mut copy)?;
    let (mut out, mut links) = (copy.out, copy.links);
    out.sort();
    links.sort();
    Ok((out, links))
}

/// A directory copy: every directory re-created 0755, every regular file copied, a link
/// skipped (refused when strict), anything else (a FIFO, a device, a socket) refused.
struct CopyTree<'a> {
    dst: &'a Path,
    out: Vec<(String, u64, String)>,
    links: Vec<String>,
    strict: bool,
    max_files: usize,
    budget: &'a mut Budget,
}

impl Visitor for CopyTree<'_> {
    fn enter(&mut self, rel: &[String]) -> Result<(), IntakeError> {
        let dst = listed_path(self.dst, rel);
        std::fs::create_dir(&dst).map_err(io_err(&dst))?;
        set_mode(&dst, 0o755)
    }

    fn file(
        &mut self,
        fd: OwnedFd,
        st: &Stat,
        path: &Path,
        rel: &[String],
    ) -> Result<(), IntakeError> {
        if self.out.len() >= self.max_files {
            return Err(IntakeError::TooMany(self.max_files));
        }
        let dst = listed_path(self.dst, rel);
        let (size, sha) = copy_file(fd, st, path, &dst, self.budget)?;
        self.out.push((rel.join("/"), size, sha));
        Ok(())
    }

    fn refused(&mut self, e: IntakeError, rel: &[String]) -> Result<(), IntakeError> {
        match e {
            // Opened no-follow, so nothing of its target was read: leaving it out is safe.
            IntakeError::Symlink(_) if !self.strict => {
                self.links.push(rel.join("/"));
                Ok(())
            }
            e => Err(e),
        }
    }

    fn special(&mut self, path: &Path) -> Result<(), IntakeError> {
        Err(IntakeError::NotAFile(shown(path)))
    }
}

/// Creates `dst` (never through a link) world-readable, so the container user can read it.
/// The mode is set on the open file afterwards because `open`'s mode passes through the
/// person's umask: under `umask 077` the copy would be 0600, and a non-root person's session
/// uid (not the file's owner) could not read its own input through the bind mount. Nobody
/// else can reach it either way: the session directory above it is 0700.
pub(super) fn create_copy(dst: &Path) -> Result<std::fs::File, IntakeError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dst)
        .map_err(io_err(dst))?;
    file.set_permissions(std::fs::Permissions::from_mode(0o644))
        .map_err(io_err(dst))?;
    Ok(file)
}

/// Copies the regular file open as `src` (its `fstat` is `st`) to `dst`, hashing in the same
/// pass. Its apparent size is taken from the input cap first, so an oversized or sparse giant
/// is refused before anything is written. Holes stay holes: only data extents are copied
/// (`SEEK_DATA`/`SEEK_HOLE`) and the copy is truncated to length, while the hash covers the
/// zeros. A file that changes size while copied is refused.
pub(super) fn copy_file(
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
