//! The append-only audit log (`.golem/audit.jsonl`).
//!
//! Every security-relevant step of every session is one JSON line. Lines are only ever appended,
//! under an exclusive `flock` so concurrent sessions never interleave, and each line carries the
//! sha256 of the line before it: editing or deleting a past line breaks the chain, which
//! `golem-orch audit --verify` reports.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::home::FileLock;

/// The `prev` of the first line.
const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// How far back from the end the previous line is searched for.
const TAIL: u64 = 1 << 20;

/// One line of the log.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Record {
    /// RFC 3339 time with milliseconds, UTC.
    pub ts: String,
    /// Dotted event name, e.g. `container.exited`.
    pub event: String,
    /// The session concerned, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Event details.
    #[serde(default)]
    pub data: serde_json::Value,
    /// sha256 of the previous line's bytes.
    pub prev: String,
}

/// Why the log could not be written, read or trusted.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// I/O on the log file.
    #[error("audit log {path}: {source}")]
    Io {
        /// The log.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A line is not a record.
    #[error("audit log {path}:{line}: not a valid record: {message}")]
    Corrupt {
        /// The log.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// Parser message.
        message: String,
    },
    /// The hash chain is broken: a line was changed, removed or inserted.
    #[error(
        "audit log {path}:{line}: hash chain broken (a line before it was changed or removed)"
    )]
    Broken {
        /// The log.
        path: PathBuf,
        /// 1-based line.
        line: usize,
    },
}

/// Handle on one state directory's log.
#[derive(Debug, Clone)]
pub struct Audit {
    path: PathBuf,
}

/// An event waiting to be appended.
#[derive(Debug, Clone)]
pub struct Event {
    /// Dotted event name.
    pub event: String,
    /// Session id.
    pub session: Option<String>,
    /// Details.
    pub data: serde_json::Value,
}

impl Event {
    /// An event about a session.
    pub fn session(session: &str, event: &str, data: serde_json::Value) -> Event {
        Event {
            event: event.to_string(),
            session: Some(session.to_string()),
            data,
        }
    }
}

impl Audit {
    /// The log at `path` (created on first write).
    pub fn new(path: impl Into<PathBuf>) -> Audit {
        Audit { path: path.into() }
    }

    /// Where the log lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self) -> impl FnOnce(std::io::Error) -> AuditError + '_ {
        move |source| AuditError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// Appends one event.
    pub fn record(
        &self,
        session: Option<&str>,
        event: &str,
        data: serde_json::Value,
    ) -> Result<(), AuditError> {
        self.record_all(&[Event {
            event: event.to_string(),
            session: session.map(str::to_string),
            data,
        }])
    }

    /// Appends several events under one lock and one fsync (used for long lists of rejections).
    pub fn record_all(&self, events: &[Event]) -> Result<(), AuditError> {
        if events.is_empty() {
            return Ok(());
        }
        let mut lock = FileLock::open(
            &self.path,
            OpenOptions::new().read(true).append(true).create(true),
        )
        .map_err(self.io())?;
        let file = lock.file();
        let mut prev = last_line_hash(file).map_err(self.io())?;
        let mut buf = Vec::new();
        for e in events {
            let rec = Record {
                ts: now(),
                event: e.event.clone(),
                session: e.session.clone(),
                data: e.data.clone(),
                prev,
            };
            let line = serde_json::to_vec(&rec).map_err(|e| self.io()(e.into()))?;
            prev = hash(&line);
            buf.extend_from_slice(&line);
            buf.push(b'\n');
        }
        file.write_all(&buf).map_err(self.io())?;
        file.sync_data().map_err(self.io())
    }

    /// Reads every record (an absent log is empty).
    pub fn read(&self) -> Result<Vec<Record>, AuditError> {
        Ok(self.read_lines()?.into_iter().map(|(_, r, _)| r).collect())
    }

    fn read_lines(&self) -> Result<Vec<(usize, Record, String)>, AuditError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.io()(e)),
        };
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.is_empty())
            .map(|(i, l)| {
                serde_json::from_str::<Record>(l)
                    .map(|r| (i + 1, r, hash(l.as_bytes())))
                    .map_err(|e| AuditError::Corrupt {
                        path: self.path.clone(),
                        line: i + 1,
                        message: e.to_string(),
                    })
            })
            .collect()
    }

    /// Checks the hash chain; returns the number of records.
    pub fn verify(&self) -> Result<usize, AuditError> {
        let lines = self.read_lines()?;
        let mut prev = GENESIS.to_string();
        for (line, rec, h) in &lines {
            if rec.prev != prev {
                return Err(AuditError::Broken {
                    path: self.path.clone(),
                    line: *line,
                });
            }
            prev = h.clone();
        }
        Ok(lines.len())
    }
}

fn hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The current time as the log writes it.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The hash of the last complete line, or the genesis value for an empty file.
fn last_line_hash(file: &mut File) -> std::io::Result<String> {
    let len = file.seek(SeekFrom::End(0))?;
    if len == 0 {
        return Ok(GENESIS.to_string());
    }
    // Read backwards in chunks until the newline before the last line, however long it is.
    let end = len - 1; // the last line's terminating newline
    let mut start = end;
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let chunk_start = start.saturating_sub(TAIL);
        let mut chunk = vec![0u8; (start - chunk_start) as usize];
        file.seek(SeekFrom::Start(chunk_start))?;
        file.read_exact(&mut chunk)?;
        chunk.extend_from_slice(&tail);
        tail = chunk;
        start = chunk_start;
        let body_len = (end - start) as usize;
        if let Some(i) = tail[..body_len].iter().rposition(|&b| b == b'\n') {
            return Ok(hash(&tail[i + 1..body_len]));
        }
        if start == 0 {
            return Ok(hash(&tail[..body_len]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn records_append_and_chain() {
        let dir = tempfile::tempdir().unwrap();
        let log = Audit::new(dir.path().join("audit.jsonl"));
        log.record(Some("s1"), "session.created", json!({"level": "untrusted"}))
            .unwrap();
        log.record_all(&[
            Event::session(
                "s1",
                "entry.rejected",
                json!({"path": "a", "reason": "symlink"}),
            ),
            Event::session(
                "s1",
                "entry.rejected",
                json!({"path": "b", "reason": "fifo"}),
            ),
        ])
        .unwrap();
        let recs = log.read().unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[0].prev, GENESIS);
        assert_eq!(recs[2].data["reason"], "fifo");
        assert_eq!(log.verify().unwrap(), 3);
    }

    #[test]
    fn lines_longer_than_the_read_chunk_keep_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let log = Audit::new(dir.path().join("audit.jsonl"));
        log.record(None, "small", json!({})).unwrap();
        log.record(
            None,
            "huge",
            json!({ "pad": "z".repeat((TAIL as usize) * 2 + 17) }),
        )
        .unwrap();
        log.record(None, "after", json!({})).unwrap();
        assert_eq!(log.verify().unwrap(), 3);
    }

    #[test]
    fn tampering_breaks_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = Audit::new(&path);
        for i in 0..4 {
            log.record(None, "x", json!({ "i": i })).unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let edited = text.replacen("\"i\":1", "\"i\":7", 1);
        std::fs::write(&path, edited).unwrap();
        assert!(matches!(
            log.verify(),
            Err(AuditError::Broken { line: 3, .. })
        ));
        let removed: Vec<&str> = text
            .lines()
            .enumerate()
            .filter(|(i, _)| *i != 1)
            .map(|(_, l)| l)
            .collect();
        std::fs::write(&path, removed.join("\n") + "\n").unwrap();
        assert!(matches!(
            log.verify(),
            Err(AuditError::Broken { line: 2, .. })
        ));
    }

    #[test]
    fn concurrent_writers_never_interleave() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let log = Audit::new(&path);
                std::thread::spawn(move || {
                    for i in 0..25 {
                        log.record(
                            None,
                            "x",
                            json!({ "t": t, "i": i, "pad": "y".repeat(3000) }),
                        )
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(Audit::new(&path).verify().unwrap(), 100);
    }
}
