//! Opening local inputs by fd: the last component and everything below it are opened
//! no-follow and checked with `fstat` on the open fd, so a swap for a link is refused, never
//! followed.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use super::names::{check_components, check_name_text, shown};
use super::{io_err, listed_path, FileId, IntakeError, MAX_DEPTH};

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
pub(super) fn open_child(
    dir: impl AsFd,
    name: &OsStr,
    path: &Path,
) -> Result<(OwnedFd, Stat), IntakeError> {
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

/// The regular files under a directory, and the links left out.
pub(crate) type FileListing = (Vec<(Vec<String>, FileId)>, Vec<Vec<String>>);

/// Lists the regular files under the directory `root` for a batch, by fd and no-follow:
/// links and special files are skipped (never followed), every name is checked; under
/// `strict` a link is an error naming it. Returns each file's components below `root` and its
/// identity, sorted, and the components of every link skipped, so the batch can list them.
pub fn list_files(root: &Path, strict: bool) -> Result<FileListing, IntakeError> {
    /// Keeps regular files, skips everything else (refuses links when strict).
    struct Listing(FileListing, bool);
    impl Visitor for Listing {
        fn file(
            &mut self,
            _: OwnedFd,
            st: &Stat,
            _: &Path,
            rel: &[String],
        ) -> Result<(), IntakeError> {
            self.0 .0.push((rel.to_vec(), FileId::of(st)));
            Ok(())
        }
        fn refused(&mut self, e: IntakeError, rel: &[String]) -> Result<(), IntakeError> {
            match e {
                IntakeError::Symlink(_) if self.1 => Err(e),
                IntakeError::Symlink(_) => {
                    self.0 .1.push(rel.to_vec());
                    Ok(())
                }
                IntakeError::NotAFile(_) => Ok(()),
                e => Err(e),
            }
        }
        fn special(&mut self, _: &Path) -> Result<(), IntakeError> {
            Ok(())
        }
    }
    check_components(root)?;
    let mut listing = Listing((Vec::new(), Vec::new()), strict);
    walk_named(root, &mut listing)?;
    let (mut files, mut links) = listing.0;
    files.sort();
    links.sort();
    Ok((files, links))
}

/// What a walk by fd ([`walk_named`]) does with what it finds. The walk itself opens every
/// entry relative to its parent's fd, no-follow, checks every name and bounds the depth.
pub(super) trait Visitor {
    /// The directory at `rel` below the root (empty: the root itself) is about to be listed.
    fn enter(&mut self, _rel: &[String]) -> Result<(), IntakeError> {
        Ok(())
    }
    /// A regular file, open as `fd`, at `rel` below the root (`path` as the person sees it).
    fn file(
        &mut self,
        fd: OwnedFd,
        st: &Stat,
        path: &Path,
        rel: &[String],
    ) -> Result<(), IntakeError>;
    /// An entry at `rel` below the root that could not be opened (a link, a socket, ...); `Ok`
    /// skips it.
    fn refused(&mut self, e: IntakeError, rel: &[String]) -> Result<(), IntakeError>;
    /// A FIFO or device (opened without blocking); `Ok` skips it.
    fn special(&mut self, path: &Path) -> Result<(), IntakeError>;
}

/// Walks the directory the person named as `root` (see [`open_named`]), in name order.
pub(super) fn walk_named(root: &Path, visitor: &mut impl Visitor) -> Result<(), IntakeError> {
    let (fd, st) = open_named(root)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return Err(IntakeError::NotAFile(shown(root)));
    }
    walk(&fd, root, &mut Vec::new(), visitor)
}

fn walk(
    fd: &OwnedFd,
    path: &Path,
    rel: &mut Vec<String>,
    visitor: &mut impl Visitor,
) -> Result<(), IntakeError> {
    if rel.len() > MAX_DEPTH {
        return Err(IntakeError::TooDeep(shown(path)));
    }
    visitor.enter(rel)?;
    for name in list_dir(fd, path)? {
        let child = path.join(&name);
        let name = check_name_text(&name, &child)?;
        let (fd, st) = match open_child(fd, OsStr::new(&name), &child) {
            Ok(x) => x,
            Err(e) => {
                rel.push(name);
                let skipped = visitor.refused(e, rel);
                rel.pop();
                skipped?;
                continue;
            }
        };
        rel.push(name);
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => walk(&fd, &child, rel, visitor)?,
            FileType::RegularFile => visitor.file(fd, &st, &child, rel)?,
            _ => visitor.special(&child)?,
        }
        rel.pop();
    }
    Ok(())
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
