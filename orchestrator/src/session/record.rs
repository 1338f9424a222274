//! The session record: what `gc`, `status` and `logs` read back, rewritten atomically after
//! every step so a crash leaves an accurate trail.

use serde::{Deserialize, Serialize};

use super::{io, RunOptions, SessionError, Worker};
use crate::audit;
use crate::container::Exit;
use crate::home::{write_atomic, Home};
use crate::intake::InputRecord;
use crate::owner::Owner;
use crate::policy::TrustLevel;
use crate::worker_uid::SessionUser;
use crate::workspace::Scrubbed;

/// The session record's file name inside the session directory.
pub const RECORD: &str = "session.json";
/// The captured worker logs.
pub const LOGS: &str = "logs.txt";

/// Where a session is in its life; the last one is what `run --json` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionStatus {
    /// Inputs being taken in.
    Created,
    /// The worker container is running.
    Running,
    /// Outputs are being validated.
    Extracting,
    /// Outputs are in the stage.
    Staged,
    /// Something failed; see `error`.
    Failed,
    /// Killed at its wall-clock limit.
    Timeout,
    /// Killed by the kernel for exceeding its memory limit.
    Oom,
    /// Its output broke the policy's caps as a whole and nothing was staged.
    Rejected,
    /// Stopped by Ctrl-C or SIGTERM.
    Cancelled,
}

impl SessionStatus {
    /// The lowercase word used in JSON and listings.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Created => "created",
            SessionStatus::Running => "running",
            SessionStatus::Extracting => "extracting",
            SessionStatus::Staged => "staged",
            SessionStatus::Failed => "failed",
            SessionStatus::Timeout => "timeout",
            SessionStatus::Oom => "oom",
            SessionStatus::Rejected => "rejected",
            SessionStatus::Cancelled => "cancelled",
        }
    }

    /// Whether the session is over.
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            SessionStatus::Created | SessionStatus::Running | SessionStatus::Extracting
        )
    }
}

/// The persistent record of a session (`sessions/<id>/session.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// Session id.
    pub id: String,
    /// When it started.
    pub created_at: String,
    /// When the record last changed.
    pub updated_at: String,
    /// Current status.
    pub status: SessionStatus,
    /// Trust level.
    pub trust_level: TrustLevel,
    /// Image reference.
    pub image: String,
    /// Command.
    pub command: Vec<String>,
    /// The orchestrator process running it.
    pub owner: String,
    /// What went in.
    pub inputs: Vec<InputRecord>,
    /// Links inside input folders left out, never followed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<crate::intake::Skipped>,
    /// How the worker ended.
    pub exit: Exit,
    /// The staged commit, when one was made.
    pub staged: Option<String>,
    /// Files accepted.
    pub files: usize,
    /// Bytes accepted.
    pub bytes: u64,
    /// Entries rejected.
    pub rejected: u64,
    /// What went wrong, when something did.
    pub error: Option<String>,
    /// Whether the container was kept for inspection (`--keep`).
    pub kept: bool,
    /// It failed for a reason outside the document (the engine or the host's disk), so running
    /// it again may succeed; a batch's `--resume` does.
    #[serde(default)]
    pub host_failure: bool,
    /// The uid/gid the worker ran as: its own, which no host account and no other live
    /// session had (`worker_uid`), unless a `--policy-dir` pinned one.
    #[serde(default)]
    pub user: Option<SessionUser>,
    /// What the scrub of `/workspace` found before the session (left by an earlier one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_scrubbed_before: Option<Scrubbed>,
    /// What the scrub of `/workspace` removed after the session: set-id bits, special files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_scrubbed: Option<Scrubbed>,
    /// The session's use of the model gateway, when its worker had model access.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<crate::gateway::ModelUsage>,
}

impl Record {
    /// The record of a session just created, before its intake.
    pub(super) fn new(id: &str, opts: &RunOptions, worker: &Worker, owner: &Owner) -> Record {
        Record {
            id: id.to_string(),
            created_at: audit::now(),
            updated_at: audit::now(),
            status: SessionStatus::Created,
            trust_level: opts.policy.level,
            image: worker.image.clone(),
            command: worker.cmd.clone(),
            owner: owner.to_string(),
            inputs: Vec::new(),
            skipped: Vec::new(),
            exit: Exit::default(),
            staged: None,
            files: 0,
            bytes: 0,
            rejected: 0,
            error: None,
            kept: opts.keep,
            host_failure: false,
            user: None,
            workspace_scrubbed_before: None,
            workspace_scrubbed: None,
            model: None,
        }
    }
}

/// Loads a session record.
pub fn load(home: &Home, id: &str) -> Result<Record, SessionError> {
    let path = home.session_dir(id).join(RECORD);
    let text = std::fs::read(&path).map_err(io(&path))?;
    serde_json::from_slice(&text).map_err(|e| SessionError::Io {
        path,
        source: std::io::Error::other(e.to_string()),
    })
}

/// Every session record, newest first; unreadable ones are skipped.
pub fn list(home: &Home) -> Result<Vec<Record>, SessionError> {
    let dir = home.sessions_dir();
    let mut out: Vec<Record> = std::fs::read_dir(&dir)
        .map_err(io(&dir))?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|id| load(home, &id).ok())
        .collect();
    // Newest first by when they started: ids are random (see `home::new_id`).
    out.sort_by(|a, b| (&b.created_at, &b.id).cmp(&(&a.created_at, &a.id)));
    Ok(out)
}

/// Rewrites a session record atomically.
pub fn save(home: &Home, record: &Record) -> Result<(), SessionError> {
    let path = home.session_dir(&record.id).join(RECORD);
    let json = serde_json::to_vec_pretty(record).map_err(|e| SessionError::Io {
        path: path.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    write_atomic(&path, &json).map_err(io(&path))
}
