//! One child process per input, so a hostile file can cost at most its own
//! analysis.
//!
//! The parent re-executes its own binary (`/proc/self/exe`, which works in a
//! `FROM scratch` image with no shell and a read-only root) as
//! `golem-worker __one`, hands it the already opened input as stdin, and
//! reads one JSON [`Analysis`] from its stdout. Before `exec`, the child gets
//! an address-space limit (so a runaway allocation fails inside the child),
//! a CPU-time limit, no core dumps, no file writes and few descriptors; the
//! parent adds a wall-clock deadline and SIGKILL. A panic is caught in the
//! child and reported as an error; an abort, a stack overflow, a signal, a
//! timeout or output that is not a valid analysis becomes an error entry in
//! the parent. The parent never parses the input itself.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::escape::display_chars;
use crate::extract::{self, Mode, MAX_READ};
use crate::model::{Analysis, DocType};

/// The hidden subcommand the parent runs in the child.
pub const CHILD_COMMAND: &str = "__one";
/// The most of a child's stdout the parent reads; more is an error. Enough
/// for the largest analysis (1 MiB of text in `text` mode, JSON-escaped).
pub const MAX_CHILD_OUTPUT: usize = 16 * 1024 * 1024;
/// The most of a child's stderr the parent keeps (for panic and abort
/// messages).
const MAX_CHILD_STDERR: usize = 8 * 1024;

/// The limits one child runs under.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Wall-clock time before SIGKILL.
    pub timeout: Duration,
    /// Address-space limit (`RLIMIT_AS`), bytes.
    pub memory: u64,
    /// CPU-time limit (`RLIMIT_CPU`), seconds.
    pub cpu_seconds: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            memory: 256 * 1024 * 1024,
            cpu_seconds: 20,
        }
    }
}

impl Limits {
    /// The CPU limit that goes with a wall-clock timeout: two thirds of it,
    /// at least one second, so a busy loop ends by `SIGXCPU` before the
    /// parent has to kill it.
    pub fn cpu_for(timeout: Duration) -> u64 {
        (timeout.as_secs() * 2 / 3).max(1)
    }
}

/// The child side: reads the input from stdin (at most [`MAX_READ`] bytes),
/// analyses it with panics caught, and writes the analysis as JSON to
/// stdout. Returns the process exit code.
pub fn child_main(mode: Mode, size: u64) -> i32 {
    // A panic is reported in the JSON; the default hook would only add noise.
    std::panic::set_hook(Box::new(|_| {}));
    let mut bytes = Vec::new();
    let read = io::stdin()
        .lock()
        .take(MAX_READ as u64 + 1)
        .read_to_end(&mut bytes);
    let analysis = match read {
        Err(e) => failed(format!("cannot read input: {e}")),
        Ok(_) => {
            let cut = bytes.len() > MAX_READ;
            bytes.truncate(MAX_READ);
            let size = size.max(bytes.len() as u64);
            match std::panic::catch_unwind(move || extract::analyze(bytes, size, cut, mode)) {
                Ok(a) => a,
                Err(payload) => {
                    let msg = payload
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_string())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".to_string());
                    failed(format!("the parser failed on this input (panic: {msg})"))
                }
            }
        }
    };
    let Ok(json) = serde_json::to_vec(&analysis) else {
        return 70;
    };
    let mut out = io::stdout().lock();
    if out.write_all(&json).and_then(|()| out.flush()).is_err() {
        return 74;
    }
    0
}

fn failed(message: String) -> Analysis {
    let mut a = Analysis::new(DocType::Unknown);
    a.error = Some(message);
    a
}

/// Reads everything from `r`, keeping at most `cap` bytes; returns the bytes
/// and whether more was sent. Draining keeps a chatty child from blocking.
fn read_capped<R: Read>(mut r: R, cap: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut more = false;
    let mut buf = [0u8; 64 * 1024];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                if n > room {
                    more = true;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    (kept, more)
}

fn set_limit(resource: libc::__rlimit_resource_t, soft: u64, hard: u64) -> io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit only reads the struct we pass; it is
    // async-signal-safe, as required between fork and exec.
    if unsafe { libc::setrlimit(resource, &lim) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Spawns the child, retrying briefly when the process limit is reached
/// (`EAGAIN`): under a pids limit another child may just be exiting.
fn spawn(cmd: &mut Command) -> io::Result<std::process::Child> {
    let mut delay = Duration::from_millis(20);
    for _ in 0..6 {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                thread::sleep(delay);
                delay *= 2;
            }
            other => return other,
        }
    }
    cmd.spawn()
}

/// Analyses one input in a child process running `exe`. `input` is the
/// opened input file (positioned at its start), `size` its size. Any
/// failure of the child is returned as a message for the error entry.
pub fn run_child(
    exe: &Path,
    input: File,
    size: u64,
    mode: Mode,
    limits: &Limits,
) -> Result<Analysis, String> {
    let mut cmd = Command::new(exe);
    cmd.arg0("golem-worker")
        .arg(CHILD_COMMAND)
        .arg("--mode")
        .arg(mode.as_str())
        .arg("--size")
        .arg(size.to_string())
        .env_clear()
        .stdin(Stdio::from(input))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let memory = limits.memory;
    let cpu = limits.cpu_seconds;
    // SAFETY: the closure runs between fork and exec in the child; it only
    // calls setrlimit (async-signal-safe) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            set_limit(libc::RLIMIT_AS, memory, memory)?;
            set_limit(libc::RLIMIT_CPU, cpu, cpu + 1)?;
            set_limit(libc::RLIMIT_CORE, 0, 0)?;
            set_limit(libc::RLIMIT_FSIZE, 0, 0)?;
            set_limit(libc::RLIMIT_NOFILE, 32, 32)?;
            Ok(())
        });
    }
    let mut child =
        spawn(&mut cmd).map_err(|e| format!("cannot start the analysis process: {e}"))?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let out_reader = stdout.map(|s| thread::spawn(move || read_capped(s, MAX_CHILD_OUTPUT)));
    let err_reader = stderr.map(|s| thread::spawn(move || read_capped(s, MAX_CHILD_STDERR)));

    let deadline = Instant::now() + limits.timeout;
    let mut pause = Duration::from_millis(1);
    let mut timed_out = false;
    let status: Option<ExitStatus> = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                timed_out = true;
                let _ = child.kill();
                break child.wait().ok();
            }
            Ok(None) => {
                thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(25));
            }
            Err(_) => {
                let _ = child.kill();
                break child.wait().ok();
            }
        }
    };
    let (out, out_overflow) = out_reader.and_then(|h| h.join().ok()).unwrap_or_default();
    let (err, _) = err_reader.and_then(|h| h.join().ok()).unwrap_or_default();
    let err_text = String::from_utf8_lossy(&err);
    let err_tail = || {
        let trimmed = err_text.trim();
        if trimmed.is_empty() {
            String::new()
        } else {
            format!(": {}", display_chars(trimmed, 300, false))
        }
    };

    if timed_out {
        return Err(format!(
            "analysis took longer than {} s and was stopped",
            limits.timeout.as_secs_f64()
        ));
    }
    let Some(status) = status else {
        return Err("lost track of the analysis process".to_string());
    };
    if let Some(signal) = status.signal() {
        let mib = limits.memory / (1024 * 1024);
        return Err(match signal {
            libc::SIGXCPU => format!(
                "analysis used more than {} s of CPU time and was stopped",
                limits.cpu_seconds
            ),
            libc::SIGABRT if err_text.contains("memory allocation of") => {
                format!("analysis ran out of memory (limit {mib} MiB) and was stopped")
            }
            libc::SIGABRT | libc::SIGSEGV if err_text.contains("overflowed its stack") => {
                "analysis overflowed its stack (the input is nested too deeply) and was stopped"
                    .to_string()
            }
            libc::SIGKILL => format!(
                "analysis was killed (SIGKILL; likely out of memory, limit {mib} MiB, or CPU time)"
            ),
            libc::SIGSEGV => format!("analysis crashed (SIGSEGV){}", err_tail()),
            libc::SIGABRT => format!("analysis aborted{}", err_tail()),
            other => format!("analysis was stopped by signal {other}{}", err_tail()),
        });
    }
    if !status.success() {
        return Err(format!(
            "analysis process exited with status {}{}",
            status.code().unwrap_or(-1),
            err_tail()
        ));
    }
    if out_overflow {
        return Err(format!(
            "analysis process wrote more than {MAX_CHILD_OUTPUT} bytes; output discarded"
        ));
    }
    serde_json::from_slice::<Analysis>(&out)
        .map_err(|e| format!("analysis process produced unreadable output: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_reader_drains() {
        let data = vec![7u8; 200_000];
        let (kept, more) = read_capped(&data[..], 1000);
        assert_eq!(kept.len(), 1000);
        assert!(more);
        let (kept, more) = read_capped(&data[..10], 1000);
        assert_eq!((kept.len(), more), (10, false));
    }

    #[test]
    fn cpu_follows_timeout() {
        assert_eq!(Limits::cpu_for(Duration::from_secs(30)), 20);
        assert_eq!(Limits::cpu_for(Duration::from_millis(500)), 1);
    }
}
