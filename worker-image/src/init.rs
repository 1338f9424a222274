//! `golem-worker init`: PID 1 of every worker container.
//!
//! The orchestrator bind-mounts this static binary read-only at
//! `/.golem-init-<random>` into any worker image (even `FROM scratch`, with no shell)
//! and starts the container as
//!
//! ```text
//! /.golem-init-<random> init --pid1 --deadline SECS --output /output -- PROGRAM [ARGS...]
//! ```
//!
//! That command line, the exit codes and the refusal entries are the
//! contract with the host, kept in one place both sides build against:
//! [`golem_protocol::init`].
//!
//! Init runs PROGRAM as its child. When that ends, init kills every other
//! process in the container, so nothing can still be writing into the output
//! directory, and writes the directory to stdout as a plain tar stream of the
//! shape Docker's archive API produces (`output/`, then `output/<path>`). The
//! host reads stdout over the attach stream and validates every entry as
//! hostile, logging each rejection; so init reports faithfully what is there
//! (links, FIFOs, devices, setuid bits, odd names) instead of filtering it,
//! and never follows a link or opens anything but a regular file. What it
//! cannot archive (a file it cannot open, a directory it cannot list, a
//! socket) it names in the archive as a refusal entry ([`REFUSAL_TYPE`]),
//! so the host lists every loss instead of never hearing of it.
//!
//! Init's fd 1 carries nothing but the tar: the worker's stdout and stderr
//! both go to init's stderr, and init makes itself non-dumpable so the
//! same-uid worker can neither ptrace it nor open `/proc/1/fd/1`. It installs
//! no signal handlers: a PID-namespace init without handlers is immune to
//! signals sent from inside its container.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use golem_protocol::init::InitArgs;
use tar::{Builder, EntryType, Header};

use crate::escape::escape_path;
use crate::DEFAULT_OUTPUT;

pub use golem_protocol::init::{
    COMMAND as INIT_COMMAND, DEFAULT_DEADLINE_SECS, EXIT_ARCHIVE_FAILED, EXIT_CANNOT_RUN,
    EXIT_DEADLINE, EXIT_REFUSED, MAX_DEADLINE_SECS, REFUSAL_KEY, REFUSAL_TYPE,
};

/// Entries whose path relative to the output directory is longer than this
/// are skipped with a note (the host rejects them anyway, and the walk's
/// memory stays bounded however deep the worker nests directories).
pub const MAX_RELATIVE_PATH: usize = 4096;

/// The stdout buffer: large writes keep the attach stream efficient.
const OUTPUT_BUFFER: usize = 64 * 1024;
/// Size of the name and link-name fields of a tar header; longer ones need a
/// GNU long-name entry.
const NAME_FIELD: usize = 100;
/// The name GNU tar gives its long-name and long-link entries.
const GNU_LONG_NAME: &[u8] = b"././@LongLink";
/// The root entry's name when `--output` has no last component (`/`, `..`).
const FALLBACK_ROOT: &[u8] = b"output";

/// What `init` runs and where the results are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitOptions {
    /// How long PROGRAM may run before everything is killed and init exits
    /// with [`EXIT_DEADLINE`] without an archive.
    pub deadline: Duration,
    /// The directory written to stdout as a tar stream.
    pub output: PathBuf,
    /// Refuse to run unless this process is PID 1 of its PID namespace. The
    /// orchestrator always asks for it: only a namespace's init is immune to
    /// the worker's signals and may kill every process before archiving. An
    /// engine configured to inject its own init (`docker run --init`, or
    /// `"init": true` in daemon.json) would silently make it PID 2.
    pub require_pid1: bool,
    /// The worker program, looked up through `PATH` when it has no `/`.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
}

impl InitOptions {
    /// Options with the default deadline and output directory.
    pub fn new(program: impl Into<OsString>, args: Vec<OsString>) -> Self {
        Self {
            deadline: Duration::from_secs(DEFAULT_DEADLINE_SECS),
            output: PathBuf::from(DEFAULT_OUTPUT),
            require_pid1: false,
            program: program.into(),
            args,
        }
    }
}

impl From<InitArgs<OsString>> for InitOptions {
    /// The options the host's command line asked for (see [`golem_protocol::init::parse`]), with
    /// the output directory defaulting to the worker's own.
    fn from(args: InitArgs<OsString>) -> Self {
        // `parse` refuses an empty command; an empty program would fail to run (127), not panic.
        let mut command = args.command.into_iter();
        Self {
            deadline: Duration::from_secs(args.deadline_secs),
            output: args
                .output
                .map_or_else(|| PathBuf::from(DEFAULT_OUTPUT), PathBuf::from),
            require_pid1: args.require_pid1,
            program: command.next().unwrap_or_default(),
            args: command.collect(),
        }
    }
}

/// Runs init: the worker, then the kill, then the archive. Returns the exit
/// code: the worker's exit code, or 128 + N when signal N killed it,
/// [`EXIT_CANNOT_RUN`] when it could not be started (the archive is still
/// written), [`EXIT_ARCHIVE_FAILED`] when the archive could not be written,
/// or [`EXIT_REFUSED`] when init would not start anything. The deadline ends
/// the process from a timer thread instead, with [`EXIT_DEADLINE`].
pub fn main(opts: &InitOptions) -> i32 {
    if opts.require_pid1 && std::process::id() != 1 {
        say(&format!(
            "golem-init: refusing to run as pid {}, not as the container's PID 1 \
             (does the engine inject its own init?)",
            std::process::id()
        ));
        return EXIT_REFUSED;
    }
    // First of all, so the worker never gets a chance to attach to init or to
    // open its stdout through /proc/1/fd/1. Should it fail, no archive could
    // be trusted, so nothing runs at all.
    let zero: libc::c_ulong = 0;
    // SAFETY: prctl(PR_SET_DUMPABLE) takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, zero, zero, zero, zero) } != 0 {
        let e = io::Error::last_os_error();
        say(&format!("golem-init: cannot make init non-dumpable: {e}"));
        return EXIT_REFUSED;
    }
    if let Err(e) = default_signals() {
        say(&format!(
            "golem-init: cannot reset its signal handlers: {e}"
        ));
        return EXIT_REFUSED;
    }
    // The archive's descriptor is taken before the worker exists, so a worker
    // that lowers init's RLIMIT_NOFILE (it shares init's uid) cannot stop it.
    let stdout = match io::stdout().as_fd().try_clone_to_owned() {
        Ok(fd) => File::from(fd),
        Err(e) => {
            say(&format!("golem-init: cannot take its stdout: {e}"));
            return EXIT_REFUSED;
        }
    };
    // The timer exists before the worker does, so a worker that exhausts the
    // pids limit at once cannot keep init from ever enforcing its deadline.
    let timer = match Deadline::start(opts.deadline) {
        Ok(timer) => timer,
        Err(e) => {
            say(&format!("golem-init: cannot start the deadline timer: {e}"));
            return EXIT_REFUSED;
        }
    };
    let status = run_worker(opts, &timer);
    // The worker shares init's uid, so it may have lowered init's soft
    // limits with prlimit(2); take back what the hard limits allow. Init's
    // stdin is closed, as nothing reads it once the worker has run, so that a
    // hard descriptor limit above 0 still leaves init one descriptor (the
    // lowest) to list and read with. Whatever init still cannot open is a
    // listed refusal in the archive.
    restore_limits();
    // SAFETY: fd 0 is init's stdin, which nothing in init uses from here on;
    // the archive goes to the descriptor taken before the worker ran.
    unsafe { libc::close(0) };
    match archive_to(stdout, &opts.output) {
        Ok(()) => status,
        Err(e) => {
            say(&format!(
                "golem-init: writing the output archive failed: {e}"
            ));
            EXIT_ARCHIVE_FAILED
        }
    }
}

/// Signals that the Rust runtime or the engine may have given a handler or
/// ignored, reset to the default. As a PID namespace's init, a signal whose
/// disposition is the default is dropped by the kernel when another process
/// of the namespace sends it, so the worker cannot reach init with a signal.
/// A handler would break that: std installs SIGSEGV and SIGBUS handlers (for
/// stack overflow reports) that a forged `rt_sigqueueinfo` could trigger.
/// SIGCHLD must not be ignored, or the kernel would reap children before
/// init can wait for the worker's status.
fn default_signals() -> io::Result<()> {
    for signal in [libc::SIGSEGV, libc::SIGBUS, libc::SIGCHLD] {
        // SAFETY: setting a disposition to SIG_DFL runs no code of ours.
        if unsafe { libc::signal(signal, libc::SIG_DFL) } == libc::SIG_ERR {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Writes one line to stderr. Never panics (unlike `eprintln!`): a closed or
/// broken stderr must not take PID 1, and with it the archive, down.
fn say(line: &str) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// A duplicate of init's stderr, for the worker's stdout and stderr: the
/// worker must never get init's fd 1, which carries the archive. If stderr
/// is closed, the worker's output is discarded.
fn to_stderr() -> Stdio {
    match io::stderr().as_fd().try_clone_to_owned() {
        Ok(fd) => Stdio::from(fd),
        Err(_) => Stdio::null(),
    }
}

/// Starts the worker in its own process group, waits for it (reaping every
/// orphan on the way), kills everything that is left and reaps it. Returns
/// the worker's exit code.
fn run_worker(opts: &InitOptions, timer: &Deadline) -> i32 {
    let mut cmd = Command::new(&opts.program);
    cmd.args(&opts.args)
        .stdin(Stdio::null())
        .stdout(to_stderr())
        .stderr(to_stderr())
        .process_group(0);
    // Holding the timer's lock across the spawn: should the deadline pass
    // meanwhile, it still finds the worker's process group to kill.
    let mut worker = timer.lock();
    let status = match cmd.spawn() {
        // The `Child` handle is dropped unused: init reaps with waitpid
        // itself, since orphans must be reaped too.
        Ok(child) => {
            let pid = child.id() as libc::pid_t;
            *worker = Timed::Running(pid);
            drop(worker);
            wait_worker(pid, timer)
        }
        Err(e) => {
            *worker = Timed::Done;
            drop(worker);
            let program = escape_path(&opts.program);
            say(&format!("golem-init: cannot run {program}: {e}"));
            kill_everything(None);
            EXIT_CANNOT_RUN
        }
    };
    reap_all();
    status
}

/// Waits until the worker `pid` has exited, reaping other children as they
/// exit, then kills its process group (and, as PID 1, every process) while
/// the worker is still a zombie, so its process group id cannot have been
/// reused; then reaps the worker and returns its exit code.
fn wait_worker(pid: libc::pid_t, timer: &Deadline) -> i32 {
    loop {
        match wait_any_exited() {
            Ok(exited) if exited == pid => break,
            Ok(exited) => {
                let _ = reap(exited);
            }
            Err(e) => {
                // Only ECHILD is possible, and not while the worker is
                // unreaped.
                say(&format!("golem-init: waiting for the worker failed: {e}"));
                break;
            }
        }
    }
    *timer.lock() = Timed::Done;
    kill_everything(Some(pid));
    match reap(pid) {
        Ok(status) => {
            let status = ExitStatus::from_raw(status);
            status
                .code()
                .or_else(|| status.signal().map(|s| 128 + s))
                .unwrap_or(1)
        }
        Err(e) => {
            say(&format!("golem-init: waiting for the worker failed: {e}"));
            1
        }
    }
}

/// What the deadline timer would kill.
enum Timed {
    /// The worker is not started yet.
    NotStarted,
    /// The worker runs as this process group.
    Running(libc::pid_t),
    /// The worker has ended (or never started); the deadline no longer applies.
    Done,
}

/// The deadline timer: a thread that, if the worker is still running after
/// the deadline, kills everything and exits with [`EXIT_DEADLINE`] without an
/// archive (the host treats a missing archive as a failure). It holds the
/// lock while killing, so the worker cannot be marked done and reaped
/// meanwhile, and its process group id stays valid.
struct Deadline {
    state: Arc<Mutex<Timed>>,
}

impl Deadline {
    fn start(deadline: Duration) -> io::Result<Deadline> {
        let state = Arc::new(Mutex::new(Timed::NotStarted));
        let shared = Arc::clone(&state);
        thread::Builder::new()
            .name("deadline".to_string())
            .spawn(move || {
                thread::sleep(deadline);
                let timed = shared.lock().unwrap_or_else(PoisonError::into_inner);
                let group = match *timed {
                    Timed::Done => return,
                    Timed::NotStarted => None,
                    Timed::Running(pgid) => Some(pgid),
                };
                say(&format!(
                    "golem-init: deadline of {} s reached; killing the worker",
                    deadline.as_secs()
                ));
                kill_everything(group);
                std::process::exit(EXIT_DEADLINE);
            })?;
        Ok(Deadline { state })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Timed> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Sends SIGKILL to the worker's process group and, only when this process
/// is PID 1 of its namespace, to every process in it (`kill(-1)`). On a host,
/// as in the tests, `kill(-1)` would kill all of the user's processes.
fn kill_everything(group: Option<libc::pid_t>) {
    if let Some(pgid) = group.filter(|&g| g > 1) {
        // SAFETY: kill takes plain integers; `-pgid` names one process group.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    }
    if std::process::id() == 1 {
        // SAFETY: as above; as PID 1 this spares init itself.
        unsafe { libc::kill(-1, libc::SIGKILL) };
    }
}

/// Waits for any child to exit without reaping it; returns its pid.
fn wait_any_exited() -> io::Result<libc::pid_t> {
    loop {
        // SAFETY: siginfo_t is plain data, for which all zeroes is valid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid siginfo_t for the kernel to fill in.
        let r = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r == 0 {
            // SAFETY: waitid filled `info` for an exited child (no WNOHANG).
            return Ok(unsafe { info.si_pid() });
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reaps `pid`; returns its raw wait status.
fn reap(pid: libc::pid_t) -> io::Result<libc::c_int> {
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid int for the kernel to fill in.
        if unsafe { libc::waitpid(pid, &mut status, 0) } == pid {
            return Ok(status);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reaps children until there are none (ECHILD). After [`kill_everything`]
/// this returns once every process but init is gone.
fn reap_all() {
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid int for the kernel to fill in.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        if r < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// Raises the soft limits the archive depends on (descriptors, memory,
/// stack, CPU) back to their hard limits. Best effort: a hard limit the
/// worker lowered stays lowered.
fn restore_limits() {
    for resource in [
        libc::RLIMIT_NOFILE,
        libc::RLIMIT_AS,
        libc::RLIMIT_DATA,
        libc::RLIMIT_STACK,
        libc::RLIMIT_CPU,
    ] {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit with a valid rlimit struct.
        unsafe {
            if libc::getrlimit(resource, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
                limit.rlim_cur = limit.rlim_max;
                libc::setrlimit(resource, &limit);
            }
        }
    }
}

/// Writes the archive of `dir` to init's stdout, notes to stderr.
fn archive_to(stdout: File, dir: &Path) -> io::Result<()> {
    let out = BufWriter::with_capacity(OUTPUT_BUFFER, stdout);
    write_archive(dir, out, |note| say(&note))
}

/// Writes `dir` to `out` as the tar stream Docker's archive API would give
/// for it: a directory entry named after the last component of `dir` (`output/`
/// for `/output`), then every entry under it as `output/<relative path>`
/// (directories with a trailing `/`), depth first, each directory's entries
/// sorted by name bytes, then the end-of-archive marker.
///
/// Nothing is filtered (the host validates every entry and logs what it
/// rejects) and nothing is followed: entries are `lstat`ed; symbolic links,
/// hard links, FIFOs and devices become entries of their own type; only
/// regular files are opened, with `O_NOFOLLOW | O_NONBLOCK`, and checked to
/// be what was `lstat`ed. Headers carry the mode (`st_mode & 0o7777`, setuid
/// bits included), uid, gid and mtime; names are raw bytes. The walk uses an
/// explicit stack, since the depth is the worker's choice.
///
/// Sockets (no tar type exists), files that cannot be opened, directories
/// that cannot be listed (in full), entries that vanished or changed and
/// paths longer than [`MAX_RELATIVE_PATH`] become a refusal: a
/// [`REFUSAL_TYPE`] entry under their name, after a PAX [`REFUSAL_KEY`]
/// record saying why, which the host lists as a rejection. So nothing the
/// worker left is lost without the host being told (a worker can make init
/// fail to read its files, for example with mode 000 or by lowering init's
/// `RLIMIT_NOFILE`). Each refusal is also passed to `note` as one line, with
/// the name escaped.
///
/// When `dir` itself is not a directory (an image whose `/output` is a
/// symbolic link, so the engine mounted the tmpfs where it points), the
/// archive holds that one entry as it is, which the host refuses whole.
///
/// An error (from `out`, or a file shorter than its size) ends the stream
/// where it is, without the end-of-archive marker, so the host can tell a
/// cut archive from a complete one.
pub fn write_archive<W: Write>(dir: &Path, out: W, mut note: impl FnMut(String)) -> io::Result<()> {
    let context = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!("{}: {e}", show(dir.as_os_str().as_bytes())),
        )
    };
    let root = fs::symlink_metadata(dir).map_err(context)?;
    if !root.is_dir() {
        note(format!(
            "golem-init: {} is not a directory",
            show(dir.as_os_str().as_bytes())
        ));
        return archive_with(out, |ar| not_a_directory(ar, dir, &root));
    }
    archive_with(out, |ar| walk(ar, dir, &root, &mut note))
}

/// Runs `body` on a builder writing to `out`, then ends the archive, or, if
/// `body` failed, makes sure it never is ended.
fn archive_with<W: Write>(
    out: W,
    body: impl FnOnce(&mut Builder<Abandonable<W>>) -> io::Result<()>,
) -> io::Result<()> {
    let mut ar = Builder::new(Abandonable {
        inner: out,
        abandoned: false,
    });
    if let Err(e) = body(&mut ar) {
        // The builder's Drop writes the end-of-archive marker; refuse it.
        ar.get_mut().abandoned = true;
        return Err(e);
    }
    ar.into_inner()?.inner.flush()
}

/// A writer that can be told to refuse every further write. `tar::Builder`
/// appends the end-of-archive marker when dropped, even after a failed
/// entry; an abandoned archive must end without it.
struct Abandonable<W> {
    inner: W,
    abandoned: bool,
}

impl<W: Write> Write for Abandonable<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.abandoned {
            return Err(io::Error::other("the archive was abandoned"));
        }
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.abandoned {
            return Err(io::Error::other("the archive was abandoned"));
        }
        self.inner.flush()
    }
}

/// The archive of an output "directory" that is something else: its one
/// entry, named like the root without the trailing slash, of its own type.
fn not_a_directory<W: Write>(ar: &mut Builder<W>, dir: &Path, meta: &Metadata) -> io::Result<()> {
    let name = dir.file_name().map_or(FALLBACK_ROOT, |n| n.as_bytes());
    let kind = meta.file_type();
    if kind.is_symlink() {
        let target = fs::read_link(dir)?;
        return append_link(
            ar,
            header(meta, EntryType::Symlink),
            name,
            target.as_os_str().as_bytes(),
        );
    }
    let kind = if kind.is_file() {
        EntryType::Regular
    } else if kind.is_fifo() {
        EntryType::Fifo
    } else if kind.is_char_device() {
        EntryType::Char
    } else if kind.is_block_device() {
        EntryType::Block
    } else {
        EntryType::new(REFUSAL_TYPE)
    };
    // No contents: the host refuses an archive whose first entry is not the
    // directory before it reads any.
    append_empty(ar, header(meta, kind), name)
}

/// Appends a refusal: a PAX record with [`REFUSAL_KEY`] = `why`, then an
/// empty [`REFUSAL_TYPE`] entry named `name`, and notes it.
fn refuse<W: Write>(
    ar: &mut Builder<W>,
    name: &[u8],
    why: &str,
    note: &mut dyn FnMut(String),
) -> io::Result<()> {
    note(format!("golem-init: cannot archive {}: {why}", show(name)));
    let record = pax_record(REFUSAL_KEY, why.as_bytes());
    let mut pax = Header::new_ustar();
    pax.set_entry_type(EntryType::XHeader);
    pax.set_path("PaxHeaders/refused")?;
    pax.set_mode(0o644);
    pax.set_uid(0);
    pax.set_gid(0);
    pax.set_mtime(0);
    pax.set_size(record.len() as u64);
    pax.set_cksum();
    ar.append(&pax, record.as_slice())?;
    let mut h = Header::new_gnu();
    h.set_entry_type(EntryType::new(REFUSAL_TYPE));
    h.set_mode(0);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_size(0);
    append_empty(ar, h, name)
}

/// One PAX record, `"<len> <key>=<value>\n"`, where `<len>` counts the
/// whole record including its own digits.
fn pax_record(key: &str, value: &[u8]) -> Vec<u8> {
    let body = key.len() + value.len() + 3;
    let mut len = body + 1;
    while len != body + len.to_string().len() {
        len = body + len.to_string().len();
    }
    let mut record = format!("{len} {key}=").into_bytes();
    record.extend_from_slice(value);
    record.push(b'\n');
    record
}

/// One directory being walked: its path relative to the output directory
/// (empty for the root) and the names still to visit, in reverse order.
struct Frame {
    rel: Vec<u8>,
    names: Vec<OsString>,
}

/// The first (dev, ino) → archive name of every multiply linked regular
/// file, for hard-link entries.
type Links = HashMap<(u64, u64), Vec<u8>>;

fn walk<W: Write>(
    ar: &mut Builder<W>,
    dir: &Path,
    root_meta: &Metadata,
    note: &mut dyn FnMut(String),
) -> io::Result<()> {
    let mut root = dir
        .file_name()
        .map_or(FALLBACK_ROOT, |n| n.as_bytes())
        .to_vec();
    root.push(b'/');
    append_empty(ar, header(root_meta, EntryType::Directory), &root)?;
    let mut links = Links::new();
    let names = list_dir(ar, dir, &root, note)?;
    let mut stack = vec![Frame {
        rel: Vec::new(),
        names,
    }];
    while let Some(frame) = stack.last_mut() {
        let Some(name) = frame.names.pop() else {
            stack.pop();
            continue;
        };
        let mut rel = frame.rel.clone();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(name.as_bytes());
        let mut entry = [root.as_slice(), rel.as_slice()].concat();
        if rel.len() > MAX_RELATIVE_PATH {
            let why = format!("its path is longer than {MAX_RELATIVE_PATH} bytes");
            refuse(ar, &entry, &why, note)?;
            continue;
        }
        let path = dir.join(OsStr::from_bytes(&rel));
        let meta = match fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) => {
                refuse(ar, &entry, &format!("cannot look at it: {e}"), note)?;
                continue;
            }
        };
        let kind = meta.file_type();
        if kind.is_dir() {
            entry.push(b'/');
            append_empty(ar, header(&meta, EntryType::Directory), &entry)?;
            let names = list_dir(ar, &path, &entry, note)?;
            stack.push(Frame { rel, names });
        } else if kind.is_file() {
            append_file(ar, &path, &meta, &entry, &mut links, note)?;
        } else if kind.is_symlink() {
            match fs::read_link(&path) {
                Ok(target) => append_link(
                    ar,
                    header(&meta, EntryType::Symlink),
                    &entry,
                    target.as_os_str().as_bytes(),
                )?,
                Err(e) => refuse(ar, &entry, &format!("cannot read the link: {e}"), note)?,
            }
        } else if kind.is_fifo() {
            append_empty(ar, header(&meta, EntryType::Fifo), &entry)?;
        } else if kind.is_char_device() || kind.is_block_device() {
            let kind = if kind.is_char_device() {
                EntryType::Char
            } else {
                EntryType::Block
            };
            let mut h = header(&meta, kind);
            h.set_device_major(libc::major(meta.rdev()))?;
            h.set_device_minor(libc::minor(meta.rdev()))?;
            append_empty(ar, h, &entry)?;
        } else if kind.is_socket() {
            refuse(ar, &entry, "a socket (tar has no type for it)", note)?;
        } else {
            refuse(ar, &entry, "an unknown file type", note)?;
        }
    }
    Ok(())
}

/// A name as it may be shown on a terminal.
fn show(name: &[u8]) -> String {
    escape_path(OsStr::from_bytes(name))
}

/// The names in a directory, sorted by bytes, in reverse (so `pop` yields
/// them in order). A directory that cannot be listed, or not in full, gets a
/// refusal under its own name (its directory entry has been written
/// already), and what could be listed is walked.
fn list_dir<W: Write>(
    ar: &mut Builder<W>,
    path: &Path,
    entry: &[u8],
    note: &mut dyn FnMut(String),
) -> io::Result<Vec<OsString>> {
    let mut names = Vec::new();
    let mut failed = None;
    match fs::read_dir(path) {
        Ok(entries) => {
            for e in entries {
                match e {
                    Ok(e) => names.push(e.file_name()),
                    Err(e) => {
                        failed = Some(format!("cannot list all of its entries: {e}"));
                        break;
                    }
                }
            }
        }
        Err(e) => failed = Some(format!("cannot list its entries: {e}")),
    }
    if let Some(why) = failed {
        refuse(ar, entry, &why, note)?;
    }
    names.sort_unstable_by(|a, b| b.as_bytes().cmp(a.as_bytes()));
    Ok(names)
}

/// A GNU header of type `kind` with the mode, owner and mtime of `meta`
/// (from `lstat`) and size 0.
fn header(meta: &Metadata, kind: EntryType) -> Header {
    let mut h = Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(meta.mode() & 0o7777);
    h.set_uid(meta.uid().into());
    h.set_gid(meta.gid().into());
    // tar has no negative times.
    h.set_mtime(u64::try_from(meta.mtime()).unwrap_or(0));
    h.set_size(0);
    h
}

fn as_path(name: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(name))
}

/// Appends an entry without contents. `append_data` writes a GNU long-name
/// entry first when `name` does not fit the header (raw bytes, any length).
fn append_empty<W: Write>(ar: &mut Builder<W>, mut h: Header, name: &[u8]) -> io::Result<()> {
    ar.append_data(&mut h, as_path(name), io::empty())
}

/// Appends a symbolic or hard link entry with `target` exactly as it is.
/// `Builder::append_link` is not used because it passes the target through
/// `Path::components`, which rewrites it (`a//b/./c` becomes `a/b/c`); the
/// host must see the real target. A target longer than the header field
/// gets a GNU long-link (`K`) entry, as GNU tar writes it.
fn append_link<W: Write>(
    ar: &mut Builder<W>,
    mut h: Header,
    name: &[u8],
    target: &[u8],
) -> io::Result<()> {
    if target.len() > NAME_FIELD {
        let mut long = Header::new_gnu();
        long.as_old_mut().name[..GNU_LONG_NAME.len()].copy_from_slice(GNU_LONG_NAME);
        long.set_mode(0o644);
        long.set_uid(0);
        long.set_gid(0);
        long.set_mtime(0);
        // The name and its terminating NUL, as GNU tar writes it.
        long.set_size(target.len() as u64 + 1);
        long.set_entry_type(EntryType::GNULongLink);
        long.set_cksum();
        ar.append(&long, target.chain(&[0u8][..]))?;
    }
    h.set_link_name_literal(&target[..target.len().min(NAME_FIELD)])?;
    append_empty(ar, h, name)
}

/// Appends a regular file: a hard-link entry if it is a further name of a
/// file already written, else its contents, read through a descriptor
/// opened without following links or blocking and checked to be the file
/// that was `lstat`ed. A file that cannot be opened, or that is not what
/// was `lstat`ed, is refused.
fn append_file<W: Write>(
    ar: &mut Builder<W>,
    path: &Path,
    meta: &Metadata,
    name: &[u8],
    links: &mut Links,
    note: &mut dyn FnMut(String),
) -> io::Result<()> {
    let key = (meta.dev(), meta.ino());
    if meta.nlink() > 1 {
        if let Some(first) = links.get(&key) {
            return append_link(ar, header(meta, EntryType::Link), name, first);
        }
    }
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) => file,
        Err(e) => return refuse(ar, name, &format!("cannot open it: {e}"), note),
    };
    let same = file.metadata().is_ok_and(|now| {
        now.is_file()
            && now.dev() == meta.dev()
            && now.ino() == meta.ino()
            && now.len() == meta.len()
    });
    if !same {
        return refuse(ar, name, "it changed while being archived", note);
    }
    let mut h = header(meta, EntryType::Regular);
    h.set_size(meta.len());
    let contents = Exact {
        inner: file,
        left: meta.len(),
        name: show(name),
    };
    ar.append_data(&mut h, as_path(name), contents)?;
    if meta.nlink() > 1 {
        links.insert(key, name.to_vec());
    }
    Ok(())
}

/// Reads exactly `left` bytes: the header already promised that size, so a
/// file that ends early is an error, never a silently misaligned archive.
struct Exact<R> {
    inner: R,
    left: u64,
    /// The escaped archive name, for error messages.
    name: String,
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = usize::try_from(self.left).map_or(buf.len(), |left| left.min(buf.len()));
        let n = self
            .inner
            .read(&mut buf[..want])
            .map_err(|e| io::Error::new(e.kind(), format!("cannot read {}: {e}", self.name)))?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{} ended {} bytes before its size", self.name, self.left),
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::ffi::CString;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::os::unix::net::UnixListener;

    /// One parsed entry.
    #[derive(Debug)]
    struct Seen {
        name: Vec<u8>,
        kind: EntryType,
        mode: u32,
        size: u64,
        link: Option<Vec<u8>>,
        data: Vec<u8>,
        uid: u64,
        /// The init's [`REFUSAL_KEY`] record, when there is one.
        refused: Option<Vec<u8>>,
    }

    fn parse(bytes: &[u8]) -> Vec<Seen> {
        let mut archive = tar::Archive::new(bytes);
        let mut seen = Vec::new();
        for entry in archive.entries().expect("entries") {
            let mut entry = entry.expect("entry");
            let refused = entry.pax_extensions().expect("pax").and_then(|records| {
                records
                    .filter_map(Result::ok)
                    .find(|r| r.key_bytes() == REFUSAL_KEY.as_bytes())
                    .map(|r| r.value_bytes().to_vec())
            });
            let mut data = Vec::new();
            entry.read_to_end(&mut data).expect("contents");
            let h = entry.header();
            seen.push(Seen {
                refused,
                name: entry.path_bytes().into_owned(),
                kind: h.entry_type(),
                mode: h.mode().expect("mode"),
                size: h.size().expect("size"),
                link: entry.link_name_bytes().map(|l| l.into_owned()),
                data,
                uid: h.uid().expect("uid"),
            });
        }
        seen
    }

    fn archive(dir: &Path) -> (Vec<u8>, Vec<String>) {
        let mut out = Vec::new();
        let mut notes = Vec::new();
        write_archive(dir, &mut out, |n| notes.push(n)).expect("archive");
        (out, notes)
    }

    fn chmod(path: &Path, mode: u32) {
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
    }

    fn mkfifo(path: &Path) {
        let c = CString::new(path.as_os_str().as_bytes()).expect("no NUL");
        // SAFETY: `c` is a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o640) }, 0, "mkfifo");
    }

    fn ends_with_end_marker(bytes: &[u8]) -> bool {
        bytes.len() >= 1024 && bytes[bytes.len() - 1024..].iter().all(|&b| b == 0)
    }

    #[test]
    fn archive_reports_every_kind_of_entry_faithfully() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let out = tmp.path().join("output");
        fs::create_dir(&out).expect("mkdir");
        chmod(&out, 0o755);
        fs::create_dir_all(out.join("a/b")).expect("mkdir");
        fs::write(out.join("a/b/deep.txt"), b"deep\n").expect("write");
        fs::write(out.join("file.txt"), b"hello\n").expect("write");
        chmod(&out.join("file.txt"), 0o640);
        fs::write(out.join("empty"), b"").expect("write");
        symlink("/etc/passwd", out.join("passwd")).expect("symlink");
        symlink("a//b/./c/", out.join("odd-link")).expect("symlink");
        let long_target = format!("/{}", "t/".repeat(80));
        symlink(&long_target, out.join("long-link")).expect("symlink");
        mkfifo(&out.join("fifo"));
        fs::write(out.join("hard1"), b"shared").expect("write");
        fs::hard_link(out.join("hard1"), out.join("hard2")).expect("link");
        let bad = OsStr::from_bytes(b"bad\xff\xfe\x1b[31m");
        fs::write(out.join(bad), b"bad name").expect("write");
        let long_name = "n".repeat(200);
        fs::write(out.join(&long_name), b"long name").expect("write");
        let long_dir = format!("{}/{}", "d".repeat(60), "e".repeat(60));
        fs::create_dir_all(out.join(&long_dir)).expect("mkdir");
        fs::write(out.join(&long_dir).join("f"), b"long path").expect("write");
        fs::write(out.join("setuid"), b"#!/bin/sh\n").expect("write");
        chmod(&out.join("setuid"), 0o4755);
        let _socket = UnixListener::bind(out.join("sock")).expect("socket");

        let (bytes, notes) = archive(&out);
        assert!(ends_with_end_marker(&bytes), "no end-of-archive marker");
        assert_eq!(
            notes,
            vec![
                "golem-init: cannot archive output/sock: a socket (tar has no type for it)"
                    .to_string()
            ]
        );

        let seen = parse(&bytes);
        let names: Vec<String> = seen
            .iter()
            .map(|s| String::from_utf8_lossy(&s.name).into_owned())
            .collect();
        let d60 = "d".repeat(60);
        let e60 = "e".repeat(60);
        let expected = vec![
            "output/".to_string(),
            "output/a/".to_string(),
            "output/a/b/".to_string(),
            "output/a/b/deep.txt".to_string(),
            String::from_utf8_lossy(b"output/bad\xff\xfe\x1b[31m").into_owned(),
            format!("output/{d60}/"),
            format!("output/{d60}/{e60}/"),
            format!("output/{d60}/{e60}/f"),
            "output/empty".to_string(),
            "output/fifo".to_string(),
            "output/file.txt".to_string(),
            "output/hard1".to_string(),
            "output/hard2".to_string(),
            "output/long-link".to_string(),
            format!("output/{long_name}"),
            "output/odd-link".to_string(),
            "output/passwd".to_string(),
            "output/setuid".to_string(),
            "output/sock".to_string(),
        ];
        assert_eq!(names, expected);

        let get = |name: &[u8]| {
            seen.iter()
                .find(|s| s.name == name)
                .unwrap_or_else(|| panic!("no entry {}", String::from_utf8_lossy(name)))
        };
        let me = u64::from(fs::metadata(&out).expect("stat").uid());

        let root = get(b"output/");
        assert_eq!(
            (root.kind, root.mode, root.size, root.uid),
            (EntryType::Directory, 0o755, 0, me)
        );

        let file = get(b"output/file.txt");
        assert_eq!(
            (file.kind, file.mode, file.size),
            (EntryType::Regular, 0o640, 6)
        );
        assert_eq!(file.data, b"hello\n");
        assert_eq!(get(b"output/a/b/deep.txt").data, b"deep\n");

        let empty = get(b"output/empty");
        assert_eq!((empty.kind, empty.size), (EntryType::Regular, 0));
        assert!(empty.data.is_empty());

        let passwd = get(b"output/passwd");
        assert_eq!((passwd.kind, passwd.size), (EntryType::Symlink, 0));
        assert_eq!(passwd.link.as_deref(), Some(&b"/etc/passwd"[..]));
        assert!(passwd.data.is_empty(), "a link is never followed");
        assert_eq!(
            get(b"output/odd-link").link.as_deref(),
            Some(&b"a//b/./c/"[..])
        );
        assert_eq!(
            get(b"output/long-link").link.as_deref(),
            Some(long_target.as_bytes())
        );

        let fifo = get(b"output/fifo");
        assert_eq!(
            (fifo.kind, fifo.mode, fifo.size),
            (EntryType::Fifo, 0o640, 0)
        );

        let hard1 = get(b"output/hard1");
        assert_eq!((hard1.kind, hard1.size), (EntryType::Regular, 6));
        assert_eq!(hard1.data, b"shared");
        let hard2 = get(b"output/hard2");
        assert_eq!((hard2.kind, hard2.size), (EntryType::Link, 0));
        assert_eq!(hard2.link.as_deref(), Some(&b"output/hard1"[..]));

        let bad = get(b"output/bad\xff\xfe\x1b[31m");
        assert_eq!(
            (bad.kind, bad.data.as_slice()),
            (EntryType::Regular, &b"bad name"[..])
        );

        let long = get(format!("output/{long_name}").as_bytes());
        assert_eq!(long.data, b"long name");
        let deep = get(format!("output/{d60}/{e60}/f").as_bytes());
        assert_eq!(deep.data, b"long path");
        assert_eq!(
            get(format!("output/{d60}/").as_bytes()).kind,
            EntryType::Directory
        );

        let setuid = get(b"output/setuid");
        assert_eq!((setuid.kind, setuid.mode), (EntryType::Regular, 0o4755));

        let sock = get(b"output/sock");
        assert_eq!((sock.kind, sock.size), (EntryType::new(REFUSAL_TYPE), 0));
        assert_eq!(
            sock.refused.as_deref(),
            Some(&b"a socket (tar has no type for it)"[..])
        );
    }

    #[test]
    fn devices_carry_their_numbers() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let out = tmp.path().join("output");
        fs::create_dir(&out).expect("mkdir");
        let made = [("chr", libc::S_IFCHR, 1, 3), ("blk", libc::S_IFBLK, 7, 300)]
            .into_iter()
            .all(|(name, kind, major, minor)| {
                let c = CString::new(out.join(name).as_os_str().as_bytes()).expect("no NUL");
                // SAFETY: `c` is a valid C string.
                unsafe { libc::mknod(c.as_ptr(), kind | 0o600, libc::makedev(major, minor)) == 0 }
            });
        if !made {
            eprintln!("skipped: mknod is not permitted here");
            return;
        }
        let (bytes, notes) = archive(&out);
        assert!(notes.is_empty(), "{notes:?}");
        let mut archive = tar::Archive::new(&bytes[..]);
        let mut devices = Vec::new();
        for entry in archive.entries().expect("entries") {
            let entry = entry.expect("entry");
            let h = entry.header();
            if matches!(h.entry_type(), EntryType::Char | EntryType::Block) {
                devices.push((
                    entry.path_bytes().into_owned(),
                    h.entry_type(),
                    h.mode().expect("mode"),
                    h.device_major().expect("major"),
                    h.device_minor().expect("minor"),
                ));
            }
        }
        assert_eq!(
            devices,
            vec![
                (
                    b"output/blk".to_vec(),
                    EntryType::Block,
                    0o600,
                    Some(7),
                    Some(300)
                ),
                (
                    b"output/chr".to_vec(),
                    EntryType::Char,
                    0o600,
                    Some(1),
                    Some(3)
                ),
            ]
        );
    }

    #[test]
    fn root_is_named_after_the_last_component() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("results");
        fs::create_dir(&dir).expect("mkdir");
        fs::write(dir.join("x"), b"1").expect("write");
        let (bytes, _) = archive(&dir);
        let names: Vec<Vec<u8>> = parse(&bytes).into_iter().map(|s| s.name).collect();
        assert_eq!(names, vec![b"results/".to_vec(), b"results/x".to_vec()]);
    }

    #[test]
    fn a_missing_output_is_an_error() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut out = Vec::new();
        let missing = write_archive(&tmp.path().join("nope"), &mut out, |_| {});
        assert!(missing.is_err());
        assert!(out.is_empty());
    }

    /// An image whose `/output` is a link (or a file): the archive holds it
    /// as it is, and the host refuses an archive whose root is no directory.
    #[test]
    fn an_output_that_is_not_a_directory_is_archived_as_it_is() {
        let tmp = tempfile::tempdir().expect("tempdir");
        fs::write(tmp.path().join("output"), b"not a dir").expect("write");
        let (bytes, notes) = archive(&tmp.path().join("output"));
        assert!(ends_with_end_marker(&bytes));
        assert_eq!(notes.len(), 1, "{notes:?}");
        let seen = parse(&bytes);
        assert_eq!(seen.len(), 1);
        assert_eq!(
            (seen[0].name.as_slice(), seen[0].kind, seen[0].size),
            (&b"output"[..], EntryType::Regular, 0)
        );
        let link_dir = tempfile::tempdir().expect("tempdir");
        symlink("/data", link_dir.path().join("output")).expect("symlink");
        let (bytes, _) = archive(&link_dir.path().join("output"));
        let seen = parse(&bytes);
        assert_eq!(seen.len(), 1);
        assert_eq!(
            (seen[0].name.as_slice(), seen[0].kind),
            (&b"output"[..], EntryType::Symlink)
        );
        assert_eq!(seen[0].link.as_deref(), Some(&b"/data"[..]));
    }

    /// Creates `levels` nested directories of 250-byte names under `dir` with
    /// a file at the bottom, through directory descriptors, since the whole
    /// path is longer than the kernel's path limit.
    fn deep_tree(dir: &Path, levels: usize) {
        let name = CString::new("x".repeat(250)).expect("no NUL");
        let mut fd: OwnedFd = File::open(dir).expect("open").into();
        for _ in 0..levels {
            // SAFETY: valid descriptor and C string.
            assert_eq!(
                unsafe { libc::mkdirat(fd.as_raw_fd(), name.as_ptr(), 0o755) },
                0
            );
            // SAFETY: as above; the result is checked before it is owned.
            let next = unsafe {
                libc::openat(
                    fd.as_raw_fd(),
                    name.as_ptr(),
                    libc::O_RDONLY | libc::O_DIRECTORY,
                )
            };
            assert!(next >= 0, "openat");
            // SAFETY: `next` is a fresh descriptor nobody else owns.
            fd = unsafe { OwnedFd::from_raw_fd(next) };
        }
        let file = CString::new("bottom").expect("no NUL");
        // SAFETY: valid descriptor and C string.
        let f = unsafe {
            libc::openat(
                fd.as_raw_fd(),
                file.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT,
                0o644 as libc::c_uint,
            )
        };
        assert!(f >= 0, "create");
        // SAFETY: `f` is a fresh descriptor nobody else owns.
        drop(unsafe { OwnedFd::from_raw_fd(f) });
    }

    #[test]
    fn overlong_paths_are_refused_by_name() {
        // Under /tmp, so the absolute paths of the entries the walk keeps stay
        // under the kernel's limit whatever TMPDIR is.
        let tmp = tempfile::Builder::new()
            .tempdir_in("/tmp")
            .expect("tempdir");
        let out = tmp.path().join("output");
        fs::create_dir(&out).expect("mkdir");
        deep_tree(&out, 17);
        let (bytes, notes) = archive(&out);
        assert!(ends_with_end_marker(&bytes));
        let seen = parse(&bytes);
        // The root and 16 levels (16 * 251 - 1 = 4015 bytes); the 17th
        // (4266 bytes) is refused, with everything in it.
        assert_eq!(seen.len(), 18, "{notes:?}");
        assert!(seen[..17].iter().all(|s| s.kind == EntryType::Directory));
        let refused = &seen[17];
        assert_eq!(refused.kind, EntryType::new(REFUSAL_TYPE));
        assert_eq!(refused.name.len(), b"output/".len() + 17 * 251 - 1);
        assert_eq!(
            refused.refused.as_deref(),
            Some(&b"its path is longer than 4096 bytes"[..])
        );
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].ends_with("its path is longer than 4096 bytes"),
            "{notes:?}"
        );
    }

    #[test]
    fn names_in_notes_are_escaped() {
        let tmp = tempfile::Builder::new()
            .tempdir_in("/tmp")
            .expect("tempdir");
        let out = tmp.path().join("output");
        fs::create_dir(&out).expect("mkdir");
        let _socket =
            UnixListener::bind(out.join(OsStr::from_bytes(b"s\x1b]0;x\x07\xff"))).expect("socket");
        let (_, notes) = archive(&out);
        assert_eq!(
            notes,
            vec![
                "golem-init: cannot archive output/s\\u{1b}]0;x\\u{7}\\xff: a socket (tar has no type for it)"
                    .to_string()
            ]
        );
    }

    /// A file that is not what was listed, or is gone, is refused by name:
    /// never a silent gap in the archive.
    #[test]
    fn a_file_that_vanished_or_changed_is_refused_by_name() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let listed = tmp.path().join("listed");
        fs::write(&listed, b"1").expect("write");
        let meta = fs::symlink_metadata(&listed).expect("lstat");
        let other = tmp.path().join("other");
        fs::write(&other, b"22").expect("write");
        let mut out = Vec::new();
        let mut notes = Vec::new();
        archive_with(&mut out, |ar| {
            let mut links = Links::new();
            let mut note = |n: String| notes.push(n);
            append_file(ar, &other, &meta, b"output/changed", &mut links, &mut note)?;
            fs::remove_file(&listed)?;
            append_file(
                ar,
                &listed,
                &meta,
                b"output/vanished",
                &mut links,
                &mut note,
            )
        })
        .expect("archive");
        assert!(ends_with_end_marker(&out));
        let seen = parse(&out);
        let refused: Vec<_> = seen
            .iter()
            .map(|s| (s.name.as_slice(), s.kind, s.refused.as_deref()))
            .collect();
        let refusal = EntryType::new(REFUSAL_TYPE);
        assert_eq!(refused[0].0, b"output/changed");
        assert_eq!(refused[0].1, refusal);
        assert_eq!(refused[0].2, Some(&b"it changed while being archived"[..]));
        assert_eq!(refused[1].0, b"output/vanished");
        assert_eq!(refused[1].1, refusal);
        assert!(
            refused[1]
                .2
                .is_some_and(|why| why.starts_with(b"cannot open it: No such file")),
            "{refused:?}"
        );
        assert_eq!(notes.len(), 2, "{notes:?}");
    }

    #[test]
    fn a_short_file_abandons_the_archive_without_end_marker() {
        let mut out = Vec::new();
        let result = archive_with(&mut out, |ar| {
            let mut h = Header::new_gnu();
            h.set_entry_type(EntryType::Regular);
            h.set_size(10);
            let short = Exact {
                inner: &b"abc"[..],
                left: 10,
                name: "output/x".to_string(),
            };
            ar.append_data(&mut h, "output/x", short)
        });
        let e = result.expect_err("a short file fails");
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(
            e.to_string()
                .contains("output/x ended 7 bytes before its size"),
            "{e}"
        );
        // The header and the three bytes; no padding, no end marker.
        assert_eq!(out.len(), 512 + 3);
    }

    #[test]
    fn a_complete_archive_ends_with_the_marker() {
        let mut out = Vec::new();
        archive_with(&mut out, |_| Ok(())).expect("archive");
        assert_eq!(out, vec![0u8; 1024]);
    }

    #[test]
    fn exact_reads_no_more_than_the_size() {
        let mut data = Vec::new();
        let mut r = Exact {
            inner: &b"abcdef"[..],
            left: 4,
            name: String::new(),
        };
        r.read_to_end(&mut data).expect("read");
        assert_eq!(data, b"abcd");
    }
}
