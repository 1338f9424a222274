//! Engine operations for one session's worker container, and cleanup.
//!
//! Output design (measured on the target engine): the worker writes into a tmpfs at `/output`
//! whose `size=` and `nr_inodes=` are kernel-enforced caps. The container's PID 1 is not the
//! worker but golem-worker's `init`, bind-mounted read-only from the state directory: it runs the
//! worker, SIGKILLs whatever the worker left running, and then writes `/output` to its stdout as a
//! tar, which the host reads over the attach stream and validates entry by entry. So nothing but
//! the one container is created per session (no output volume, no second container, no archive
//! call; the `/workspace` overlay volume is the project's, not the session's), and the init
//! binary, unlike the image, is always ours. Its stream is still treated as hostile.
//!
//! Everything created is registered in a [`Tracker`] before use, so every exit path (success,
//! failure, timeout, Ctrl-C) removes exactly what this session created.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::engine::{Engine, EngineError};

/// The containers a session created, shared with the Ctrl-C path so cleanup never misses one.
#[derive(Debug, Clone, Default)]
pub struct Tracker(Arc<Mutex<Vec<String>>>);

impl Tracker {
    /// Remembers a container (id or name); called *before* the engine call that creates it.
    pub fn add(&self, container: &str) {
        if let Ok(mut v) = self.0.lock() {
            v.push(container.to_string());
        }
    }

    fn take(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }
}

/// How the worker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Exit {
    /// Exit code, when the process exited.
    pub code: Option<i64>,
    /// Killed for running past its wall-clock limit.
    pub timed_out: bool,
    /// Killed by the kernel for exceeding its memory limit.
    pub oom_killed: bool,
}

/// The worker container's name, derived from the session id so it is unique and findable.
pub fn worker_name(session: &str) -> String {
    format!("golem-{session}-worker")
}

/// Starts a container; `role` names it in errors.
pub async fn start(engine: &dyn Engine, id: &str, role: &str) -> Result<(), EngineError> {
    engine
        .start(id)
        .await
        .map_err(|e| e.doing(format!("starting the {role} container")))
}

/// How long a container whose streams have closed may take to be reported stopped.
const STOP_WAIT: Duration = Duration::from_secs(30);

/// Waits for a container that is ending (its streams closed, or it was killed), then reads its
/// exit code and OOM flag. A container that does not stop is killed.
pub async fn finished(engine: &dyn Engine, id: &str, timed_out: bool) -> Result<Exit, EngineError> {
    match tokio::time::timeout(STOP_WAIT, engine.wait(id)).await {
        Ok(waited) => {
            waited?;
        }
        Err(_) => {
            engine.kill(id).await?;
            engine.wait(id).await?;
        }
    }
    let state = engine
        .inspect(id)
        .await
        .map_err(|e| e.doing("inspecting the finished container"))?;
    if state.running {
        engine.kill(id).await?;
        return Err(EngineError::Unreachable(
            "the container was still running after its wait returned; killed it".into(),
        ));
    }
    Ok(Exit {
        code: state.exit.code,
        timed_out,
        oom_killed: state.exit.oom_killed,
    })
}

/// The worker's messages as they stream in, keeping at most `max` bytes.
///
/// Logs are written by the untrusted worker; a person will read them in a terminal, so
/// [`LogBuffer::finish`] makes control characters visible.
#[derive(Debug)]
pub struct LogBuffer {
    raw: Vec<u8>,
    max: usize,
    truncated: bool,
}

impl LogBuffer {
    /// An empty buffer that keeps at most `max` bytes.
    pub fn new(max: usize) -> LogBuffer {
        LogBuffer {
            raw: Vec::new(),
            max,
            truncated: false,
        }
    }

    /// Appends a chunk; past the cap the rest is dropped (but the stream is still drained).
    pub fn push(&mut self, chunk: &[u8]) {
        let room = self.max.saturating_sub(self.raw.len());
        if chunk.len() > room {
            self.truncated = true;
        }
        self.raw.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }

    /// The text to keep: lossy UTF-8, control characters escaped, truncation marked.
    pub fn finish(mut self) -> String {
        if self.truncated {
            self.raw.extend_from_slice(b"\n[log truncated]\n");
        }
        // Readable and inert when written (and again by `golem-orch logs`): see `render::block`.
        crate::render::block(&String::from_utf8_lossy(&self.raw))
    }
}

/// Removes every tracked container with its anonymous volumes. Returns what could not be
/// removed, each as `Container("name")` with the engine's words; missing containers count as
/// removed.
pub async fn remove_all(engine: &dyn Engine, tracker: &Tracker) -> Vec<String> {
    let containers = tracker.take();
    // Containers go together: each removal is an engine round trip.
    let removals = containers.iter().map(|id| async move {
        let removed = engine.remove(id).await;
        removed.err().map(|e| failed(id, &e.detail()))
    });
    futures_util::future::join_all(removals)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// How a container that could not be removed is named in the audit log.
pub fn failed(container: &str, why: &str) -> String {
    format!("Container({container:?}): {why}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_are_capped_and_their_control_characters_made_visible() {
        let mut logs = LogBuffer::new(8);
        logs.push(b"ok\x1b[");
        logs.push(b"31mred and more");
        assert_eq!(logs.finish(), "ok\\u{1b}[31mr\n[log truncated]\n");
    }
}
