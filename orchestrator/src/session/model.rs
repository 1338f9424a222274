//! The model gateway's life in a session: started once the session's uid exists, bind-mounted
//! into the container as a socket file, shut down on every way out, and what it saw kept: the
//! usage in the record, the transcript in the stage (hashed in the manifest), every request in
//! the audit log, and the honeytoken looked for in requests, output files and logs.
//!
//! The gateway's audit events arrive on tokio threads, once per request. Each one is handed to
//! a channel and written by one thread of the session's own (the audit log's `flock` and fsync
//! stay off the runtime), and that thread is joined before the session audits its end, so
//! every request's line lands before `session.finished`.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use serde_json::json;

use super::{io, RunOptions, Session, SessionError};
use crate::audit::{Audit, AuditError, Event};
use crate::extract::ExtractedFile;
use crate::gateway::{self, EventSink, GatewayHandle, GatewaySpec, ModelUsage};
use crate::plan::{ContainerPlan, HostPaths, ModelMount, PlanError};
use crate::policy::ModelPolicy;
use crate::stage::{self, ModelRecord};
use crate::worker_uid::SessionUser;

/// The gateway's socket directory inside `sessions/<id>/` (0700, made by the gateway).
pub const MODEL_DIR: &str = "model";
/// The transcript the gateway writes inside `sessions/<id>/`, staged beside the manifest.
pub(super) const TRANSCRIPT: &str = stage::TRANSCRIPT;
/// What a dry run shows in place of the honeytoken, which only a real session draws.
pub const HONEYTOKEN_PLACEHOLDER: &str = "(a fake key, drawn afresh for each session)";

/// The `model:` policy the session's gateway enforces: the level's, narrowed to `--model` when
/// one was named. `None` without model access. Asking for a model the level cannot grant (an
/// empty allowlist, `host` on a host that names no model, a `--model` outside the allowlist)
/// is bad input, refused before anything exists.
pub fn effective_policy(opts: &RunOptions) -> Result<Option<ModelPolicy>, PlanError> {
    let Some(access) = &opts.model else {
        return Ok(None);
    };
    let level = opts.policy.level;
    let policy = &opts.policy.model;
    if !policy.grants_access() {
        return Err(PlanError::Model(format!(
            "the {level} trust level allows no model access (its model.allow is empty)"
        )));
    }
    let allowed = gateway::resolve_allowlist(policy, &access.upstream);
    if allowed.is_empty() {
        return Err(PlanError::Model(format!(
            "the {level} trust level allows only the host's default model, and this host names none (set GOLEM_MODEL)"
        )));
    }
    match &access.model {
        None => Ok(Some(policy.clone())),
        Some(m) if allowed.contains(m) => Ok(Some(ModelPolicy {
            allow: vec![m.clone()],
            ..policy.clone()
        })),
        Some(m) => Err(PlanError::Model(format!(
            "--model {m} is not allowed at the {level} trust level (allowed: {})",
            allowed.join(", ")
        ))),
    }
}

/// The mount a dry run shows for a worker with model access: the socket where the session
/// would make it (beside `paths.input`), and a placeholder for the key. A session sets its own
/// mount before planning, so this only fills in what a dry run cannot know.
pub(super) fn preview_mount(opts: &RunOptions, paths: &HostPaths) -> Option<ModelMount> {
    let access = opts.model.as_ref()?;
    let session_dir = paths.input.parent()?;
    Some(ModelMount {
        socket: session_dir.join(MODEL_DIR).join(gateway::SOCKET_NAME),
        key_env: access.upstream.api.key_env().to_string(),
        honeytoken: HONEYTOKEN_PLACEHOLDER.to_string(),
    })
}

/// A session's gateway and what it has seen.
pub(super) struct ModelSession {
    /// The running gateway; `None` once shut down.
    gateway: Option<GatewayHandle>,
    events: EventWriter,
    honeytoken: String,
    socket_dir: PathBuf,
    transcript: PathBuf,
    usage: ModelUsage,
    honeytoken_seen: bool,
    transcript_incomplete: u64,
    transcript_sha256: Option<String>,
}

/// Writes the gateway's events to the audit log from a thread of its own.
struct EventWriter {
    sender: Arc<Mutex<Option<mpsc::Sender<Event>>>>,
    thread: Option<std::thread::JoinHandle<Result<(), AuditError>>>,
}

impl EventWriter {
    fn start(audit: Audit) -> EventWriter {
        let (tx, rx) = mpsc::channel::<Event>();
        let thread = std::thread::spawn(move || {
            let mut failed = None;
            for event in rx {
                if failed.is_none() {
                    failed = audit.record_all(std::slice::from_ref(&event)).err();
                }
            }
            failed.map_or(Ok(()), Err)
        });
        EventWriter {
            sender: Arc::new(Mutex::new(Some(tx))),
            thread: Some(thread),
        }
    }

    /// What the gateway calls: cheap and non-blocking (a channel send).
    fn sink(&self) -> EventSink {
        let sender = self.sender.clone();
        Arc::new(move |event| {
            if let Ok(guard) = sender.lock() {
                if let Some(tx) = guard.as_ref() {
                    let _ = tx.send(event);
                }
            }
        })
    }

    /// Closes the channel and waits until every event sent so far is written. The wait is a
    /// plain join, which no cancel can cut short (the session writes its own audit lines the
    /// same way): a few lines at most are left to write once the gateway has stopped.
    fn close(&mut self, audit_path: &Path) -> Result<(), SessionError> {
        if let Ok(mut guard) = self.sender.lock() {
            guard.take();
        }
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        match thread.join() {
            Ok(written) => Ok(written?),
            Err(_) => Err(SessionError::Io {
                path: audit_path.to_path_buf(),
                source: std::io::Error::other("the gateway's audit writer failed"),
            }),
        }
    }
}

impl Session<'_> {
    /// Starts the gateway when the worker has model access, and puts its socket and the
    /// honeytoken into the plan's paths. Runs after the uid exists: the socket is the uid's.
    pub(super) fn start_model(
        &mut self,
        user: SessionUser,
        paths: &mut HostPaths,
    ) -> Result<(), SessionError> {
        let (Some(policy), Some(access)) = (effective_policy(self.opts)?, &self.opts.model) else {
            return Ok(());
        };
        let events = EventWriter::start(Audit::new(self.home.audit_path()));
        let honeytoken = gateway::honeytoken(access.upstream.api);
        let socket_dir = self.dir.join(MODEL_DIR);
        let transcript = self.dir.join(TRANSCRIPT);
        let spec = GatewaySpec {
            socket_dir: socket_dir.clone(),
            transcript: transcript.clone(),
            uid: user.uid,
            gid: user.gid,
            policy: &policy,
            upstream: access.upstream.clone(),
            honeytoken: Some(honeytoken.clone()),
            session_id: self.id.clone(),
            batch_budget: access.batch_budget.clone(),
        };
        let handle = gateway::start(spec, events.sink())?;
        paths.model = Some(ModelMount {
            socket: handle.socket_path().to_path_buf(),
            key_env: access.upstream.api.key_env().to_string(),
            honeytoken: honeytoken.clone(),
        });
        self.audit(
            "model.started",
            json!({ "api": access.upstream.api.as_str(), "allow": policy.allow, "socket": handle.socket_path() }),
        )?;
        self.model = Some(ModelSession {
            gateway: Some(handle),
            events,
            honeytoken,
            socket_dir,
            transcript,
            usage: ModelUsage::default(),
            honeytoken_seen: false,
            transcript_incomplete: 0,
            transcript_sha256: None,
        });
        Ok(())
    }

    /// Shuts the gateway down (once; later calls only finish what a cancel interrupted),
    /// removes its socket, writes every event it sent, and records its usage.
    pub(super) async fn stop_model(&mut self) -> Result<(), SessionError> {
        let audit_path = self.home.audit_path();
        let Some(model) = self.model.as_mut() else {
            return Ok(());
        };
        if let Some(handle) = model.gateway.take() {
            // What a cancel in the middle of the shutdown would otherwise lose.
            let spent = handle.spent();
            model.usage.requests = spent.requests;
            model.usage.input_tokens = spent.input_tokens;
            model.usage.output_tokens = spent.output_tokens;
            let report = handle.shutdown().await;
            model.usage = ModelUsage {
                requests: report.requests,
                input_tokens: report.input_tokens,
                output_tokens: report.output_tokens,
                refused: report.refused,
            };
            model.honeytoken_seen |= report.honeytoken_seen;
            model.transcript_incomplete = report.transcript_incomplete;
        }
        if let Err(e) = std::fs::remove_dir_all(&model.socket_dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!("removing {}: {e}", model.socket_dir.display());
            }
        }
        model.events.close(&audit_path)?;
        self.record.model = Some(model.usage);
        self.save()
    }

    /// The plan as the audit log records it: the honeytoken's value replaced by a placeholder,
    /// so the only copies of it are the container's and whatever the worker did with it.
    pub(super) fn audited_plan(&self, plan: &ContainerPlan) -> ContainerPlan {
        let mut plan = plan.clone();
        if let Some(model) = &self.model {
            for value in plan.env.values_mut() {
                if *value == model.honeytoken {
                    *value = HONEYTOKEN_PLACEHOLDER.to_string();
                }
            }
        }
        plan
    }

    /// Looks for the honeytoken in the worker's logs.
    pub(super) fn scan_logs(&mut self, logs: &str) -> Result<(), SessionError> {
        let Some(model) = &self.model else {
            return Ok(());
        };
        if memchr::memmem::find(logs.as_bytes(), model.honeytoken.as_bytes()).is_some() {
            self.honeytoken_seen("logs", None)?;
        }
        Ok(())
    }

    /// Flags the session and audits where the honeytoken was seen (the gateway audits its own
    /// sightings in requests).
    fn honeytoken_seen(&mut self, place: &str, path: Option<&str>) -> Result<(), SessionError> {
        if let Some(model) = self.model.as_mut() {
            model.honeytoken_seen = true;
        }
        self.audit(
            "model.honeytoken",
            json!({ "severity": "high", "where": place, "path": path,
                "message": format!("the container's fake key appeared in its {place}: the worker tried to send its environment out") }),
        )
    }

    /// Before a commit: looks for the honeytoken in the accepted files, copies the transcript
    /// into the building stage, and returns what the manifest records.
    pub(super) fn stage_model(
        &mut self,
        building: &stage::Building,
        files: &[ExtractedFile],
    ) -> Result<Option<ModelRecord>, SessionError> {
        let Some(model) = &self.model else {
            return Ok(None);
        };
        let needle = model.honeytoken.clone();
        let transcript = model.transcript.clone();
        let root = building.files_dir();
        for file in files {
            let path = root.join(&file.path);
            if file_contains(&path, needle.as_bytes()).map_err(io(&path))? {
                self.honeytoken_seen("output", Some(&file.path))?;
            }
        }
        let sha256 = building.add_transcript(&transcript)?;
        let Some(model) = self.model.as_mut() else {
            return Ok(None);
        };
        model.transcript_sha256 = Some(sha256.clone());
        Ok(Some(ModelRecord {
            usage: model.usage,
            transcript_sha256: sha256,
            honeytoken_seen: model.honeytoken_seen,
            transcript_incomplete: model.transcript_incomplete,
        }))
    }

    /// Audits what the session's model use came to, before `session.finished`.
    pub(super) fn model_summary(&self) -> Result<(), SessionError> {
        let Some(model) = &self.model else {
            return Ok(());
        };
        let u = model.usage;
        self.audit(
            "model.summary",
            json!({ "requests": u.requests, "input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                "refused": u.refused, "honeytoken_seen": model.honeytoken_seen, "transcript_sha256": model.transcript_sha256,
                "transcript_incomplete": model.transcript_incomplete }),
        )
    }
}

/// Whether the file at `path` (never followed if a link) holds `needle`, read in blocks with
/// an overlap so a match across two blocks is found.
fn file_contains(path: &Path, needle: &[u8]) -> std::io::Result<bool> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    if needle.is_empty() {
        return Ok(false);
    }
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let finder = memchr::memmem::Finder::new(needle);
    let mut window: Vec<u8> = Vec::with_capacity(64 << 10);
    let mut block = vec![0u8; 64 << 10];
    loop {
        let n = file.read(&mut block)?;
        if n == 0 {
            return Ok(false);
        }
        window.extend_from_slice(&block[..n]);
        if finder.find(&window).is_some() {
            return Ok(true);
        }
        let keep = needle.len() - 1;
        if window.len() > keep {
            window.drain(..window.len() - keep);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_needle_across_two_blocks_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let needle = b"sk-ant-api03-honey";
        let mut data = vec![b'x'; (64 << 10) - 5];
        data.extend_from_slice(needle);
        data.extend_from_slice(b"tail");
        std::fs::write(&path, &data).unwrap();
        assert!(file_contains(&path, needle).unwrap());
        std::fs::write(&path, b"nothing here").unwrap();
        assert!(!file_contains(&path, needle).unwrap());
    }
}
