//! golem-orch in the background, for the stories that stop it half-way: wait for its worker or
//! a failpoint, then signal or SIGKILL it, as a person or a crash would.
//! `g.spawn(g.run().hostile(["sleep", "300"])).wait_workers(1).signal(libc::SIGINT).finish()`.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::run::{parse_run, Run, RunBuilder, HANG_GUARD};
use super::{remove_engine_resources, wait_until, Golem};

/// How long a story waits for a session to reach the point it stops it at (image and worker
/// start on a busy engine): a hang guard, not a timing assertion.
const REACH: Duration = Duration::from_secs(120);

/// Kills a golem-orch child when a test ends early, so a failing test leaves no orchestrator.
pub(crate) struct ChildGuard(pub Option<Child>);

impl ChildGuard {
    /// SIGKILLs the child now and reaps it.
    pub(crate) fn kill(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Removes the engine objects labelled with a state directory the harness does not know about
/// (one inside the project), whatever happens to the test.
pub(crate) struct LabelGuard(pub PathBuf);

impl Drop for LabelGuard {
    fn drop(&mut self) {
        remove_engine_resources(&self.0);
    }
}

/// Reads `from` line by line on a thread, sending each line (lossily decoded) to the receiver.
fn read_lines(from: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(from);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&line);
                    let text = text.strip_suffix('\n').unwrap_or(&text).to_string();
                    if tx.send(text).is_err() {
                        break;
                    }
                }
            }
        }
    });
    rx
}

/// Reads lines from `rx` into `seen` until one equals `line`; false when `limit` passes first
/// or the stream ends.
fn await_line(rx: &Receiver<String>, line: &str, limit: Duration, seen: &mut Vec<String>) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(l) => {
                let found = l == line;
                seen.push(l);
                if found {
                    return true;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    false
}

/// Waits for `child`'s stderr to print `line`; returns the rest of stderr as a channel.
pub(crate) fn wait_for_stderr_line(
    child: &mut Child,
    line: &str,
    limit: Duration,
) -> Receiver<String> {
    let rx = read_lines(child.stderr.take().expect("piped stderr"));
    let mut seen = Vec::new();
    if !await_line(&rx, line, limit, &mut seen) {
        panic!("golem-orch never printed {line:?}; stderr: {seen:?}");
    }
    rx
}

/// A golem-orch running in the background, killed if the test ends before it does.
#[must_use = "a spawned golem-orch is SIGKILLed when dropped"]
pub(crate) struct Spawned<'g> {
    g: &'g Golem,
    child: ChildGuard,
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: Receiver<String>,
    seen: Vec<String>,
}

impl Golem {
    /// Starts `run` in the background with its stdout and stderr captured.
    pub(crate) fn spawn<'g>(&'g self, run: RunBuilder<'g>) -> Spawned<'g> {
        let (g, mut cmd) = run.build();
        Spawned::start(g, &mut cmd)
    }
}

impl<'g> Spawned<'g> {
    fn start(g: &'g Golem, cmd: &mut Command) -> Spawned<'g> {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn golem-orch");
        let mut out = child.stdout.take().expect("piped stdout");
        let stdout = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = out.read_to_end(&mut v);
            v
        });
        let stderr = read_lines(child.stderr.take().expect("piped stderr"));
        Spawned {
            g,
            child: ChildGuard(Some(child)),
            stdout: Some(stdout),
            stderr,
            seen: Vec::new(),
        }
    }

    /// Waits until `n` worker containers of this test run; panics if they never do.
    pub(crate) fn wait_workers(self, n: usize) -> Self {
        let g = self.g;
        self.wait_for(&format!("{n} running worker(s)"), || {
            g.running_workers() == n
        })
    }

    /// Waits until golem-orch reports reaching the failpoint `point`; panics if it never does.
    pub(crate) fn wait_failpoint(self, point: &str) -> Self {
        self.wait_stderr(&format!("golem-orch: failpoint {point} reached"))
    }

    /// Waits until golem-orch prints exactly `line` on stderr; panics if it never does.
    pub(crate) fn wait_stderr(mut self, line: &str) -> Self {
        if !await_line(&self.stderr, line, REACH, &mut self.seen) {
            panic!("golem-orch never printed {line:?}; stderr: {:?}", self.seen);
        }
        self
    }

    /// Waits until `ready` holds (`what` names it in the failure); panics if it never does.
    pub(crate) fn wait_for(self, what: &str, ready: impl FnMut() -> bool) -> Self {
        assert!(wait_until(REACH, ready), "never reached: {what}");
        self
    }

    /// Sends `signal` to golem-orch (SIGINT is a person's Ctrl-C).
    pub(crate) fn signal(self, signal: i32) -> Self {
        let pid = self.child.0.as_ref().expect("running").id();
        let pid = i32::try_from(pid).expect("pid fits");
        // SAFETY: signalling our own child, which is not reaped yet.
        let sent = unsafe { libc::kill(pid, signal) };
        assert_eq!(sent, 0, "kill({pid}, {signal})");
        self
    }

    /// SIGKILLs golem-orch now and reaps it: no handler runs, nothing is cleaned up.
    pub(crate) fn kill(mut self) {
        self.child.kill();
    }

    /// Waits for golem-orch to exit under the [`HANG_GUARD`] and returns what it printed.
    pub(crate) fn output(mut self) -> Output {
        let mut child = self.child.0.take().expect("running");
        let start = Instant::now();
        let status: ExitStatus = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if start.elapsed() > HANG_GUARD {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "golem-orch hung: still running after {HANG_GUARD:?}; stderr: {:?}",
                    self.seen
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let stdout = self
            .stdout
            .take()
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default();
        let drained = Instant::now();
        while drained.elapsed() < Duration::from_secs(10) {
            match self.stderr.recv_timeout(Duration::from_millis(200)) {
                Ok(l) => self.seen.push(l),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        let mut stderr = self.seen.join("\n");
        if !stderr.is_empty() {
            stderr.push('\n');
        }
        Output {
            status,
            stdout,
            stderr: stderr.into_bytes(),
        }
    }

    /// Waits for golem-orch to exit under the [`HANG_GUARD`] and parses its `run --json` report.
    pub(crate) fn finish(self) -> Run {
        parse_run(&self.output())
    }
}
