//! The append-only audit log (`.golem/audit.jsonl`).
//!
//! Every security-relevant step of every session is one JSON line. Lines are only ever appended,
//! under an exclusive `flock` so concurrent sessions never interleave, and each line carries the
//! sha256 of the line before it: editing or deleting a past line breaks the chain, which
//! `golem-orch audit --verify` reports.
//!
//! The chain alone proves nothing to someone who can write the file: they can append a line
//! with the right `prev`. So every line also ends with `mac`, an HMAC-SHA256 of the line without
//! it (which includes `prev`, chaining the MACs), under a key in `audit.key` beside the log
//! (0600, created on first use, refused if others can read it). A line without a valid MAC is
//! forged. This module is the one place that knows the format; `push` asks it
//! ([`Audit::staged_manifest_sha256`]) for what it trusts.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::home::FileLock;
use crate::secret::{self, Secret, SecretError};

/// The key's file name, beside the log.
pub const KEY_FILE: &str = "audit.key";

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
    /// HMAC-SHA256 of the line without this field, under the state directory's audit key.
    /// Always the last field, so the MAC'd bytes are the line up to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
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
    /// A line whose MAC is missing or wrong: written by someone without the audit key.
    #[error("audit log {path}:{line}: forged: no valid MAC under this state directory's audit key (the line was not written by golem-orch here)")]
    Forged {
        /// The log.
        path: PathBuf,
        /// 1-based line.
        line: usize,
    },
    /// The log has records but its key is gone, so none of them can be checked.
    #[error("audit log {path} has records but its key {} is missing; it cannot be trusted", .path.with_file_name(KEY_FILE).display())]
    NoKey {
        /// The log.
        path: PathBuf,
    },
    /// The key file is unusable (someone else's, readable by others, not a key).
    #[error("audit key: {0}")]
    Key(#[from] SecretError),
}

/// Handle on one state directory's log.
#[derive(Debug, Clone)]
pub struct Audit {
    path: PathBuf,
    /// The key, once loaded (a batch appends thousands of lines).
    key: std::sync::OnceLock<Secret>,
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
        Audit {
            path: path.into(),
            key: std::sync::OnceLock::new(),
        }
    }

    fn key_path(&self) -> PathBuf {
        self.path.with_file_name(KEY_FILE)
    }

    /// The key for writing: created (0600) on first use.
    fn key_for_writing(&self) -> Result<&Secret, AuditError> {
        if let Some(k) = self.key.get() {
            return Ok(k);
        }
        let k = secret::load_or_create(&self.key_path())?;
        Ok(self.key.get_or_init(|| k))
    }

    /// The key for checking: never created (an absent key means nothing can be checked).
    fn key_for_checking(&self) -> Result<Option<Secret>, AuditError> {
        if let Some(k) = self.key.get() {
            return Ok(Some(k.clone()));
        }
        Ok(secret::read_existing(&self.key_path())?)
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
        use std::os::unix::fs::OpenOptionsExt;
        let key = self.key_for_writing()?;
        let mut lock = FileLock::open(
            &self.path,
            OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW),
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
                mac: None,
            };
            let body = serde_json::to_vec(&rec).map_err(|e| self.io()(e.into()))?;
            let line = seal(key, &body);
            prev = hash(&line);
            buf.extend_from_slice(&line);
            buf.push(b'\n');
        }
        file.write_all(&buf).map_err(self.io())?;
        file.sync_data().map_err(self.io())
    }

    /// Reads every record (an absent log is empty).
    pub fn read(&self) -> Result<Vec<Record>, AuditError> {
        Ok(self.read_lines()?.into_iter().map(|l| l.record).collect())
    }

    fn read_lines(&self) -> Result<Vec<Line>, AuditError> {
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
                    .map(|r| Line {
                        number: i + 1,
                        hash: hash(l.as_bytes()),
                        sealed: unseal(l, r.mac.as_deref()),
                        record: r,
                    })
                    .map_err(|e| AuditError::Corrupt {
                        path: self.path.clone(),
                        line: i + 1,
                        message: e.to_string(),
                    })
            })
            .collect()
    }

    /// Checks the hash chain and every line's MAC; returns the number of records.
    pub fn verify(&self) -> Result<usize, AuditError> {
        Ok(self.read_verified()?.len())
    }

    /// Reads the log once and returns its records only if the whole chain and every MAC hold,
    /// so what is used is exactly what was checked.
    pub fn read_verified(&self) -> Result<Vec<Record>, AuditError> {
        let lines = self.read_lines()?;
        if lines.is_empty() {
            return Ok(Vec::new());
        }
        let key = self.key_for_checking()?.ok_or_else(|| AuditError::NoKey {
            path: self.path.clone(),
        })?;
        let mut prev = GENESIS.to_string();
        for l in &lines {
            if l.record.prev != prev {
                return Err(AuditError::Broken {
                    path: self.path.clone(),
                    line: l.number,
                });
            }
            let genuine = match (&l.sealed, &l.record.mac) {
                (Some(body), Some(mac)) => key.verify_hex(body.as_bytes(), mac),
                _ => false,
            };
            if !genuine {
                return Err(AuditError::Forged {
                    path: self.path.clone(),
                    line: l.number,
                });
            }
            prev = l.hash.clone();
        }
        Ok(lines.into_iter().map(|l| l.record).collect())
    }

    /// The manifest hash audited when staged commit `id` was staged (by a session or a batch
    /// merge), read from a log whose chain and MACs all verify; `None` if it was never staged.
    pub fn staged_manifest_sha256(&self, id: &str) -> Result<Option<String>, AuditError> {
        Ok(self.staged_manifest_hashes()?.remove(id))
    }

    /// Every staged commit's audited manifest hash (the latest record wins), from one read of
    /// a log whose chain and MACs all verify: for checking many staged commits at once.
    pub fn staged_manifest_hashes(
        &self,
    ) -> Result<std::collections::HashMap<String, String>, AuditError> {
        Ok(self
            .read_verified()?
            .into_iter()
            .filter(|r| r.event == "session.staged" || r.event == "batch.staged")
            .filter_map(|r| {
                Some((
                    r.data["staged"].as_str()?.to_string(),
                    r.data["manifest_sha256"].as_str()?.to_string(),
                ))
            })
            .collect())
    }
}

/// One line as read: its record, its sha256 and the bytes its MAC covers.
struct Line {
    number: usize,
    record: Record,
    hash: String,
    /// The line without its `mac` field, when it ends with one.
    sealed: Option<String>,
}

/// The line for `body` (a record serialised without `mac`): `mac` appended as the last field.
fn seal(key: &Secret, body: &[u8]) -> Vec<u8> {
    let mac = key.mac_hex(body);
    let mut line = body[..body.len().saturating_sub(1)].to_vec();
    line.extend_from_slice(format!(",\"mac\":\"{mac}\"}}").as_bytes());
    line
}

/// The bytes a line's MAC covers: the line with its trailing `"mac"` field removed.
fn unseal(line: &str, mac: Option<&str>) -> Option<String> {
    let mac = mac.filter(|m| m.len() == 64 && m.bytes().all(|b| b.is_ascii_hexdigit()))?;
    let body = line.strip_suffix(&format!(",\"mac\":\"{mac}\"}}"))?;
    Some(format!("{body}}}"))
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
        // The edited line's own MAC no longer holds (and line 3's `prev` no longer matches).
        assert!(matches!(
            log.verify(),
            Err(AuditError::Forged { line: 2, .. })
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
    fn a_chain_consistent_line_without_the_key_is_forged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = Audit::new(&path);
        log.record(Some("s1"), "session.created", json!({}))
            .unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join(KEY_FILE))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let text = std::fs::read_to_string(&path).unwrap();
        let prev = hash(text.trim_end().as_bytes());
        // What someone who can write the log but not read the key can do: the right `prev`,
        // no MAC, or a MAC made with another key.
        let forged = Record {
            ts: now(),
            event: "session.staged".into(),
            session: Some("s1".into()),
            data: json!({ "staged": "s1", "manifest_sha256": "ab" }),
            prev,
            mac: None,
        };
        let bare = serde_json::to_string(&forged).unwrap();
        std::fs::write(&path, format!("{text}{bare}\n")).unwrap();
        assert!(matches!(
            log.verify(),
            Err(AuditError::Forged { line: 2, .. })
        ));
        assert!(log.staged_manifest_sha256("s1").is_err());
        let other = crate::secret::load_or_create(&dir.path().join("other.key")).unwrap();
        let sealed = String::from_utf8(seal(&other, bare.as_bytes())).unwrap();
        std::fs::write(&path, format!("{text}{sealed}\n")).unwrap();
        assert!(matches!(
            log.verify(),
            Err(AuditError::Forged { line: 2, .. })
        ));
        // Without its key a log with records cannot be trusted at all.
        std::fs::write(&path, &text).unwrap();
        assert_eq!(log.verify().unwrap(), 1);
        std::fs::remove_file(dir.path().join(KEY_FILE)).unwrap();
        assert!(matches!(
            Audit::new(&path).verify(),
            Err(AuditError::NoKey { .. })
        ));
    }

    #[test]
    fn the_staged_record_is_found_only_in_a_verified_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = Audit::new(dir.path().join("audit.jsonl"));
        assert_eq!(log.staged_manifest_sha256("x").unwrap(), None);
        log.record(
            Some("x"),
            "session.staged",
            json!({ "staged": "x", "manifest_sha256": "cafe" }),
        )
        .unwrap();
        assert_eq!(
            log.staged_manifest_sha256("x").unwrap().as_deref(),
            Some("cafe")
        );
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
