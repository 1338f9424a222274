//! The project's persistent `/workspace`: mounted `nosuid,nodev`, handed to each session's own
//! uid, and scrubbed of setuid/setgid bits and special files before and after every session.
//!
//! Docker 20.10 cannot set `nosuid`/`nodev` on a bind mount (its bind options are only
//! propagation, `ro` and SELinux labels), and a fresh bind mount ignores those flags anyway.
//! Measured instead: a `local`-driver volume of `type=overlay` with `nosuid,nodev` in `o=`, whose
//! upper directory is the workspace and whose lower directory is empty, is mounted by the daemon
//! with both flags, and the container's mount of it shows them in `/proc/self/mountinfo`. The
//! daemon does the mount, so it works whether or not golem-orch runs as root. Files the worker
//! writes land in the upper directory, that is in the workspace itself.
//!
//! The scrub walks the tree with `openat(O_NOFOLLOW)` and `fstatat(AT_SYMLINK_NOFOLLOW)` relative
//! to the parent's descriptor and never resolves a path twice, so a link swapped in by another
//! session of the project cannot send a root golem-orch's `chmod`/`chown` outside the workspace.

use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::worker_uid::SessionUser;

/// How many directories the scrub holds open at once (and recurses into). A deeper directory is
/// set aside and reached again later from the root, one `O_NOFOLLOW` component at a time, so a
/// hostile tree of any depth is scrubbed whole without exhausting descriptors or the stack.
const MAX_DEPTH: usize = 64;
/// Most scrubbed entries kept by name in a record (the count is always exact).
const MAX_LISTED: usize = 1000;

/// The overlay volume that mounts the workspace `nosuid,nodev`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Overlay {
    /// The engine volume's name, one per state directory, so concurrent sessions of a project
    /// share one overlay mount (two overlays over one upper directory are undefined behaviour).
    pub volume: String,
    /// The workspace itself (overlay `upperdir`).
    pub upper: PathBuf,
    /// An empty directory (overlay `lowerdir`).
    pub lower: PathBuf,
    /// Overlay's scratch directory, on the workspace's filesystem.
    pub work: PathBuf,
}

impl Overlay {
    /// The overlay for the workspace at `upper`, with its helpers beside it in the state directory.
    pub fn for_workspace(upper: &Path) -> Overlay {
        let digest = Sha256::digest(upper.as_os_str().as_bytes());
        let parent = upper.parent().unwrap_or(upper);
        Overlay {
            volume: format!("golem-workspace-{}", &hex::encode(digest)[..24]),
            upper: upper.to_path_buf(),
            lower: parent.join("workspace.lower"),
            work: parent.join("workspace.work"),
        }
    }

    /// The `local` driver's options: the daemon mounts `overlay` with exactly these.
    pub fn driver_options(&self) -> Vec<(String, String)> {
        vec![
            ("type".into(), "overlay".into()),
            ("device".into(), "overlay".into()),
            (
                "o".into(),
                format!(
                    "nosuid,nodev,lowerdir={},upperdir={},workdir={}",
                    self.lower.display(),
                    self.upper.display(),
                    self.work.display()
                ),
            ),
        ]
    }

    /// Creates the helper directories (the workspace itself is created by the caller).
    pub fn create_dirs(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.lower)?;
        std::fs::create_dir_all(&self.work)
    }
}

/// What a scrub changed or could not change.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Scrubbed {
    /// Files whose setuid/setgid bits were removed (workspace-relative, lossy UTF-8).
    pub setid_cleared: Vec<String>,
    /// FIFOs, sockets and device nodes removed.
    pub special_removed: Vec<String>,
    /// Entries that could not be fixed, with why.
    pub failed: Vec<String>,
    /// Total entries changed or failed, exact even when the lists above are cut at 1000.
    pub count: u64,
}

impl Scrubbed {
    /// Whether nothing needed scrubbing.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn note(list: &mut Vec<String>, count: &mut u64, entry: String) {
        *count += 1;
        if list.len() < MAX_LISTED {
            list.push(entry);
        }
    }
}

/// Scrubs the workspace tree at `root`: setuid/setgid bits cleared, FIFOs, sockets and devices
/// removed, and, when `owner` is given (golem-orch runs as root), every entry handed to that uid
/// and gid so the next session's worker may use what earlier ones left. Symlinks are never
/// followed (they are only re-owned, with `AT_SYMLINK_NOFOLLOW`).
pub fn scrub(root: &Path, owner: Option<SessionUser>) -> std::io::Result<Scrubbed> {
    let c = cstring(root.as_os_str())?;
    let open_root = || open_at(libc::AT_FDCWD, &c, DIR_FLAGS);
    let dir = open_root()?;
    let mut scrub = Scrub {
        owner,
        out: Scrubbed::default(),
        deferred: Vec::new(),
    };
    if let Some(o) = owner {
        // SAFETY: `dir` is a valid open descriptor.
        if unsafe { libc::fchown(dir.as_raw_fd(), o.uid, o.gid) } != 0 {
            scrub.fail(".", std::io::Error::last_os_error());
        }
    }
    scrub.walk(&dir, &[], 0);
    drop(dir);
    // Directories past MAX_DEPTH: reopened from the root, component by component, never
    // following a link, then walked with a fresh budget (deeper ones are set aside again).
    while let Some(components) = scrub.deferred.pop() {
        let reached = components.iter().try_fold(open_root()?, |fd, name| {
            open_at(fd.as_raw_fd(), name, DIR_FLAGS)
        });
        match reached {
            Ok(fd) => scrub.walk(&fd, &components, 0),
            Err(e) => scrub.fail(&show(&components), e),
        }
    }
    Ok(scrub.out)
}

/// How the scrub opens a directory: never through a link.
const DIR_FLAGS: libc::c_int =
    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

/// `openat(dir, name, flags)` as an owned descriptor.
fn open_at(dir: RawFd, name: &CStr, flags: libc::c_int) -> std::io::Result<OwnedFd> {
    // SAFETY: `dir` is open (or AT_FDCWD) and `name` NUL-terminated; the result is owned below.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One scrub in progress: whom entries are handed to, what was done, and the directories set
/// aside past [`MAX_DEPTH`].
struct Scrub {
    owner: Option<SessionUser>,
    out: Scrubbed,
    deferred: Vec<Vec<CString>>,
}

impl Scrub {
    fn fail(&mut self, shown: &str, e: std::io::Error) {
        Scrubbed::note(
            &mut self.out.failed,
            &mut self.out.count,
            format!("{shown}: {e}"),
        );
    }

    /// Scrubs every entry of `dir` (at `path` below the root), recursing into directories.
    fn walk(&mut self, dir: &OwnedFd, path: &[CString], depth: usize) {
        let entries = match names(dir) {
            Ok(n) => n,
            Err(e) => {
                self.fail(&format!("{}/.", show(path)), e);
                return;
            }
        };
        for name in entries {
            let mut child = path.to_vec();
            child.push(name.clone());
            let Some(fd) = self.entry(dir, &name, &show(&child)) else {
                continue;
            };
            if depth + 1 >= MAX_DEPTH {
                drop(fd);
                self.deferred.push(child);
            } else {
                self.walk(&fd, &child, depth + 1);
            }
        }
    }

    /// Scrubs one entry of `dir`; returns its descriptor when it is a directory to walk into.
    fn entry(&mut self, dir: &OwnedFd, name: &CStr, shown: &str) -> Option<OwnedFd> {
        let st = match fstatat(dir, name) {
            Ok(st) => st,
            Err(e) => {
                self.fail(shown, e);
                return None;
            }
        };
        match st.st_mode & libc::S_IFMT {
            libc::S_IFIFO | libc::S_IFSOCK | libc::S_IFCHR | libc::S_IFBLK => {
                // SAFETY: `dir` is open and `name` NUL-terminated; unlinkat never follows a link.
                if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) } != 0 {
                    self.fail(shown, std::io::Error::last_os_error());
                } else {
                    let out = &mut self.out;
                    Scrubbed::note(&mut out.special_removed, &mut out.count, shown.to_string());
                }
                None
            }
            libc::S_IFLNK => {
                self.reown_link(dir, name, shown);
                None
            }
            libc::S_IFDIR | libc::S_IFREG => self.fix(dir, name, &st, shown),
            _ => None,
        }
    }

    /// Hands a symlink itself (never its target) to the session's user.
    fn reown_link(&mut self, dir: &OwnedFd, name: &CStr, shown: &str) {
        let Some(o) = self.owner else {
            return;
        };
        // SAFETY: as above; AT_SYMLINK_NOFOLLOW re-owns the link itself.
        let r = unsafe {
            libc::fchownat(
                dir.as_raw_fd(),
                name.as_ptr(),
                o.uid,
                o.gid,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r != 0 {
            self.fail(shown, std::io::Error::last_os_error());
        }
    }

    /// Re-owns a directory or regular file and clears its set-id bits, through a descriptor of
    /// the very object inspected; returns the descriptor when it is a directory.
    fn fix(&mut self, dir: &OwnedFd, name: &CStr, st: &libc::stat, shown: &str) -> Option<OwnedFd> {
        let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
        let flags = libc::O_NOFOLLOW
            | libc::O_CLOEXEC
            | libc::O_NONBLOCK
            | if is_dir {
                libc::O_RDONLY | libc::O_DIRECTORY
            } else {
                libc::O_PATH
            };
        let fd = match open_at(dir.as_raw_fd(), name, flags).and_then(|fd| same_object(fd, st)) {
            Ok(fd) => fd,
            Err(e) => {
                self.fail(shown, e);
                return None;
            }
        };
        if let Some(o) = self.owner {
            let r = through(
                &fd,
                is_dir,
                // SAFETY: `fd` is open.
                |fd| unsafe { libc::fchown(fd, o.uid, o.gid) },
                // SAFETY: `p` is NUL-terminated.
                |p| unsafe { libc::chown(p.as_ptr(), o.uid, o.gid) },
            );
            if let Err(e) = r {
                self.fail(shown, e);
            }
        }
        // chown clears set-id bits of regular files by itself; clear them in any case.
        if st.st_mode & (libc::S_ISUID | libc::S_ISGID) != 0 {
            let mode = st.st_mode & 0o1777;
            let r = through(
                &fd,
                is_dir,
                // SAFETY: `fd` is open.
                |fd| unsafe { libc::fchmod(fd, mode) },
                // SAFETY: `p` is NUL-terminated.
                |p| unsafe { libc::chmod(p.as_ptr(), mode) },
            );
            match r {
                Err(e) => self.fail(shown, e),
                Ok(()) => {
                    let out = &mut self.out;
                    Scrubbed::note(&mut out.setid_cleared, &mut out.count, shown.to_string());
                }
            }
        }
        is_dir.then_some(fd)
    }
}

/// The opened object must be the one inspected: a swap in between is refused.
fn same_object(fd: OwnedFd, st: &libc::stat) -> std::io::Result<OwnedFd> {
    // SAFETY: zeroed stat is a valid out-value; `fd` is open.
    let same = unsafe {
        let mut now: libc::stat = std::mem::zeroed();
        libc::fstat(fd.as_raw_fd(), &mut now) == 0
            && now.st_dev == st.st_dev
            && now.st_ino == st.st_ino
    };
    if same {
        Ok(fd)
    } else {
        Err(std::io::Error::other("changed while scrubbing"))
    }
}

/// Applies a change through `fd`: a directory by the descriptor itself, anything else through
/// its `/proc/self/fd` link (O_PATH descriptors take no fchmod/fchown; the link names exactly
/// this inode, and chmod/chown through it cannot be redirected).
fn through(
    fd: &OwnedFd,
    is_dir: bool,
    by_fd: impl FnOnce(RawFd) -> libc::c_int,
    by_path: impl FnOnce(&CStr) -> libc::c_int,
) -> std::io::Result<()> {
    let r = if is_dir {
        by_fd(fd.as_raw_fd())
    } else {
        let via = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        cstring(via.as_os_str()).map(|p| by_path(&p)).unwrap_or(-1)
    };
    if r != 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A workspace-relative path for the record (lossy UTF-8).
fn show(components: &[CString]) -> String {
    components
        .iter()
        .map(|c| String::from_utf8_lossy(c.to_bytes()))
        .collect::<Vec<_>>()
        .join("/")
}

fn cstring(s: &OsStr) -> std::io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| std::io::Error::other("a NUL byte in a path"))
}

fn fstatat(dir: &OwnedFd, name: &CStr) -> std::io::Result<libc::stat> {
    // SAFETY: zeroed stat is a valid out-value; `name` is NUL-terminated; `dir` is open.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok(st)
    }
}

fn names(dir: &OwnedFd) -> std::io::Result<Vec<CString>> {
    // The fd's own directory, not a path that could be swapped.
    let rd = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))?;
    rd.map(|e| e.and_then(|e| cstring(&e.file_name())))
        .collect()
}

/// Makes a tree golem-orch itself just wrote (the input copy) readable by any uid: directories
/// 0755, files 0644, links untouched and never followed. Used when golem-orch cannot chown the
/// copy to the session's uid; the tree's parent must keep other host users out.
pub fn open_to_others(root: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o644))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn setid_bits_and_special_files_are_scrubbed_and_links_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::write(&outside, "x").unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o4755)).unwrap();
        let helper = ws.join("sub/helper");
        std::fs::write(&helper, "x").unwrap();
        std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o6755)).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("link")).unwrap();
        let fifo = cstring(ws.join("fifo").as_os_str()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);

        let s = scrub(&ws, None).unwrap();
        assert_eq!(s.setid_cleared, ["sub/helper"]);
        assert_eq!(s.special_removed, ["fifo"]);
        assert!(s.failed.is_empty(), "{s:?}");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&helper), 0o755);
        assert_eq!(
            mode(&outside),
            0o4755,
            "the link's target is outside: untouched"
        );
        assert!(!ws.join("fifo").exists());
        assert!(scrub(&ws, None).unwrap().is_empty());

        // A tree far deeper than the scrub holds open is scrubbed to its bottom.
        let mut deep = ws.clone();
        for _ in 0..3 * MAX_DEPTH + 5 {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("helper"), "x").unwrap();
        std::fs::set_permissions(deep.join("helper"), std::fs::Permissions::from_mode(0o4755))
            .unwrap();
        let fifo = cstring(deep.join("fifo").as_os_str()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let s = scrub(&ws, None).unwrap();
        assert!(s.failed.is_empty(), "{s:?}");
        assert_eq!((s.setid_cleared.len(), s.special_removed.len()), (1, 1));
        assert_eq!(mode(&deep.join("helper")), 0o755);
        assert!(!deep.join("fifo").exists());
    }

    #[test]
    fn an_input_copy_is_opened_to_the_workers_uid_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("input");
        std::fs::create_dir_all(input.join("d")).unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "x").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(input.join("d/doc"), "x").unwrap();
        std::fs::set_permissions(input.join("d/doc"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        std::fs::set_permissions(input.join("d"), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&secret, input.join("link")).unwrap();
        open_to_others(&input).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&input.join("d")), 0o755);
        assert_eq!(mode(&input.join("d/doc")), 0o644);
        assert_eq!(mode(&secret), 0o600, "a link's target is never touched");
    }

    #[test]
    fn the_overlay_mounts_nosuid_nodev_over_the_workspace() {
        let o = Overlay::for_workspace(Path::new("/s/.golem/workspace"));
        assert_eq!(o.lower, Path::new("/s/.golem/workspace.lower"));
        let opts = o.driver_options();
        assert!(opts[2].1.starts_with("nosuid,nodev,"), "{opts:?}");
        assert!(opts[2].1.contains("upperdir=/s/.golem/workspace,"));
        assert_ne!(o.volume, Overlay::for_workspace(Path::new("/t")).volume);
    }
}
