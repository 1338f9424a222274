//! The pump: the running container's attach stream, its stderr into the logs and its stdout
//! (the init's archive of `/output`) into the validator on a blocking thread, and the kill that
//! keeps draining the stream.

use std::time::Duration;

use futures_util::StreamExt;

use super::failpoint::failpoint;
use super::SessionError;
use crate::container::{self, Exit, LogBuffer};
use crate::engine::{Attached, Chunk, Engine};
use crate::extract::{self, Extraction, Limits};
use crate::plan;
use crate::stage;

/// Logs kept per session (Docker's own cap is 1 MiB).
const MAX_LOG_BYTES: usize = 1 << 20;
/// How long the archive may go without a byte once it has begun: it stops an archive that
/// stalls, never one that is long.
pub(super) const ARCHIVE_TIMEOUT: Duration = Duration::from_secs(300);
/// Chunks of the archive in flight between the attach stream and the validator: bounded, so a
/// fast container never makes the host buffer its output.
const ARCHIVE_CHUNKS_IN_FLIGHT: usize = 16;

/// Why the archive was not accepted.
pub(super) enum ExtractFailure {
    /// The output broke the rules as a whole (caps, malformed archive): nothing is staged.
    Rejected(String),
    /// The host failed (disk full, the extraction task): not the worker's fault.
    Host(String),
    /// The archive stream ended early (the engine, a stall, the init killed from outside):
    /// counted as the host's failure, since the worker cannot reach the init's stdout.
    Cut(String),
}

/// How long the attach stream is drained, at most, while a kill runs and after it: the engine
/// closes it once the container is dead, so this only bounds an engine that never does.
const KILL_DRAIN: Duration = Duration::from_secs(30);

/// Kills the container while reading its attach stream to the end, throwing stdout away and
/// keeping stderr in the logs. On engine 20.10 a kill returns only once the daemon has
/// drained the container's attach streams, so a client that stopped reading (a refused
/// archive with 30 MB still to come) stalled its own kill until the client's timeout, and the
/// worker's refused output became a host failure.
async fn kill_draining(
    engine: &dyn Engine,
    container: &str,
    mut attached: Attached,
    logs: &mut LogBuffer,
) -> Result<(), SessionError> {
    let kill = engine.kill(container);
    tokio::pin!(kill);
    let give_up = tokio::time::sleep(KILL_DRAIN);
    tokio::pin!(give_up);
    let mut killed = None;
    let mut open = true;
    while killed.is_none() || open {
        tokio::select! {
            result = &mut kill, if killed.is_none() => killed = Some(result),
            item = attached.next(), if open => match item {
                Some(Ok(Chunk::Stderr(message))) => logs.push(&message),
                Some(Ok(_)) => {}
                Some(Err(_)) | None => open = false,
            },
            () = &mut give_up => break,
        }
    }
    // An engine that neither finished the kill nor closed the stream in time: stop reading
    // (dropping the stream closes the connection, which ends the daemon's copy) and wait out
    // the kill.
    drop(attached);
    match killed {
        Some(result) => result?,
        None => kill.await?,
    }
    Ok(())
}

/// What the container's streams delivered.
pub(super) struct Streamed {
    pub(super) exit: Exit,
    pub(super) logs: String,
    /// The archive began but then stalled, and the container was killed.
    pub(super) stalled: bool,
    /// The validator's verdict, with the building stage when it accepted the archive (a refused
    /// one is already deleted, so a full disk is free again), once an archive began to arrive.
    pub(super) extraction: Option<Result<(stage::Building, Extraction), ExtractFailure>>,
}

/// The validator, on a blocking thread, fed the archive's chunks through a bounded channel.
/// The thread owns the building stage until it is done with it, so however the session ends
/// (even cancelled mid-stream), the stage is only dropped once nothing writes into it.
struct Validator {
    chunks: tokio::sync::mpsc::Sender<bytes::Bytes>,
    task: tokio::task::JoinHandle<(stage::Building, Result<Extraction, extract::ExtractError>)>,
}

impl Validator {
    fn spawn(building: stage::Building, limits: Limits) -> Validator {
        let (chunks, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(ARCHIVE_CHUNKS_IN_FLIGHT);
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|b| (Ok::<_, std::io::Error>(b), rx))
        });
        let reader =
            tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(Box::pin(stream)));
        let root = plan::OUTPUT_TARGET.trim_start_matches('/').to_string();
        let task = tokio::task::spawn_blocking(move || {
            let verdict = extract::extract(reader, &root, &building.files_dir(), &limits);
            (building, verdict)
        });
        Validator { chunks, task }
    }

    /// Ends the stream (whatever was sent is all there is) and waits for the verdict.
    async fn finish(self) -> Result<(stage::Building, Extraction), ExtractFailure> {
        drop(self.chunks);
        match self.task.await {
            Ok((building, Ok(x))) => Ok((building, x)),
            Ok((
                _,
                Err(
                    e @ (extract::ExtractError::Io { .. }
                    | extract::ExtractError::InvalidDestination { .. }),
                ),
            )) => Err(ExtractFailure::Host(e.to_string())),
            Ok((_, Err(extract::ExtractError::Truncated(how)))) => Err(ExtractFailure::Cut(how)),
            Ok((_, Err(e))) => Err(ExtractFailure::Rejected(e.to_string())),
            Err(e) => Err(ExtractFailure::Host(format!(
                "the extraction task failed: {e}"
            ))),
        }
    }
}

/// Reads the running container's streams until it ends: stderr into the logs, stdout (the
/// init's archive of `/output`, which begins only once the worker and everything it started
/// are dead) into the validator. Kills the container at `timeout` if no archive has begun, when
/// the archive stalls, or as soon as the validator refuses it; the kill runs while the streams
/// are still drained (see [`kill_draining`]).
pub(super) async fn stream(
    engine: &dyn Engine,
    container: &str,
    mut attached: Attached,
    timeout: Duration,
    mut begin: impl FnMut() -> Result<stage::Building, SessionError>,
    limits: Limits,
) -> Result<Streamed, SessionError> {
    let mut logs = LogBuffer::new(MAX_LOG_BYTES);
    let mut validator: Option<Validator> = None;
    let mut timed_out = false;
    let mut stalled = false;
    // Ok(true): the container must be killed; Ok(false): its streams ended by themselves.
    let read = async {
        let mut deadline = tokio::time::Instant::now() + timeout;
        loop {
            let item = match tokio::time::timeout_at(deadline, attached.next()).await {
                Err(_) => {
                    // Past the worker's limit before any archive, or the archive stalled.
                    timed_out = validator.is_none();
                    stalled = !timed_out;
                    return Ok(true);
                }
                Ok(None) => return Ok(false),
                Ok(Some(Err(e))) => return Err(SessionError::Engine(e)),
                Ok(Some(Ok(item))) => item,
            };
            let message = match item {
                Chunk::Stderr(message) => {
                    logs.push(&message);
                    continue;
                }
                Chunk::Stdout(message) => message,
            };
            if validator.is_none() {
                let building = begin()?;
                failpoint("extracting").await;
                validator = Some(Validator::spawn(building, limits));
            }
            // Once the archive has begun, only a stall stops it.
            deadline = tokio::time::Instant::now() + ARCHIVE_TIMEOUT;
            if let Some(v) = &validator {
                if v.chunks.send(message).await.is_err() {
                    // The validator stopped reading: the output is refused (or the host
                    // failed). Nothing more of it is wanted.
                    return Ok(true);
                }
            }
        }
    };
    let read: Result<bool, SessionError> = read.await;
    let killed = match read {
        Ok(true) => kill_draining(engine, container, attached, &mut logs).await,
        _ => {
            drop(attached);
            Ok(())
        }
    };
    // The validator always finishes before its stage is kept or dropped.
    let extraction = match validator {
        Some(v) => Some(v.finish().await),
        None => None,
    };
    read?;
    killed?;
    let exit = container::finished(engine, container, timed_out).await?;
    Ok(Streamed {
        exit,
        logs: logs.finish(),
        stalled,
        extraction,
    })
}
