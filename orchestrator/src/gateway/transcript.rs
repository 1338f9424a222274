//! The session's transcript: every request the worker made and every answer, in full, one JSON
//! line each, so a reviewer can read what the worker told the model and what the model said.
//!
//! This is also the one channel by which data leaves the gray zone (a worker can put anything
//! it read into a prompt), which is why it is kept whole and staged for review rather than
//! summarised. Each line also carries the sha256 of both bodies, the same values the audit log
//! gets, so the transcript can be matched to the audit chain line by line.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// One request and its outcome, as written to the transcript and (without bodies) the audit log.
#[derive(Debug, Clone, Serialize)]
pub struct Exchange {
    /// 1-based order of arrival.
    pub seq: u64,
    /// RFC 3339 time the request arrived.
    pub time: String,
    /// The model the worker asked for, when the body named one.
    pub model: Option<String>,
    /// The status the worker got.
    pub status: u16,
    /// Why the gateway refused it, when it did (`None` when forwarded).
    pub refused: Option<String>,
    /// What went wrong upstream (a timeout, a transport error), when something did.
    pub error: Option<String>,
    /// Input tokens charged.
    pub input_tokens: u64,
    /// Output tokens charged.
    pub output_tokens: u64,
    /// Milliseconds from arrival to answer.
    pub latency_ms: u64,
    /// sha256 of the request body as received.
    pub request_sha256: String,
    /// sha256 of the response body as sent to the worker.
    pub response_sha256: String,
}

/// A transcript line: the record and both bodies.
#[derive(Serialize)]
struct Line<'a> {
    #[serde(flatten)]
    exchange: &'a Exchange,
    request: Value,
    response: Value,
}

/// Lowercase hex sha256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A body as JSON when it is JSON, else as a (lossy) string, so every line stays valid JSON.
fn body_value(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// Bytes after which a line's bodies are left out (its record and hashes are still written):
/// forwarded bodies alone could reach `max_requests` times `max_request_bytes`, far past what
/// staging reads back ([`crate::stage::MAX_TRANSCRIPT_BYTES`]), and a transcript that cannot be
/// read back would hide every exchange in it from the reviewer.
pub const BODIES_CAP: u64 = crate::stage::MAX_TRANSCRIPT_BYTES - (16 << 20);

/// Bytes after which no further line is written at all, only one closing marker; the audit log
/// still has every exchange's record.
pub const LINES_CAP: u64 = crate::stage::MAX_TRANSCRIPT_BYTES - (1 << 20);

/// What [`Transcript::append`] managed to keep of one exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// The record and both bodies.
    Whole,
    /// The record and hashes; the bodies were left out because the transcript is near its cap.
    WithoutBodies,
    /// Nothing: the transcript is full (a marker line says so once).
    Dropped,
}

impl Appended {
    /// How the audit record names a line that is not whole.
    pub fn note(self) -> Option<&'static str> {
        match self {
            Appended::Whole => None,
            Appended::WithoutBodies => Some("bodies left out: the transcript reached its cap"),
            Appended::Dropped => Some("not in the transcript: it reached its cap"),
        }
    }
}

/// The append-only transcript file of one session, never larger than staging reads back.
#[derive(Debug)]
pub struct Transcript {
    path: PathBuf,
    file: Mutex<Writer>,
    caps: (u64, u64),
}

#[derive(Debug)]
struct Writer {
    file: File,
    written: u64,
    closed: bool,
}

impl Transcript {
    /// Creates the file (0600, never replacing one, never through a link).
    pub fn create(path: &Path) -> std::io::Result<Transcript> {
        Transcript::create_with_caps(path, (BODIES_CAP, LINES_CAP))
    }

    /// [`Transcript::create`] with other `(bodies, lines)` caps, so tests can reach them.
    pub(crate) fn create_with_caps(path: &Path, caps: (u64, u64)) -> std::io::Result<Transcript> {
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?;
        Ok(Transcript {
            path: path.to_path_buf(),
            file: Mutex::new(Writer {
                file,
                written: 0,
                closed: false,
            }),
            caps,
        })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one exchange as a single line (one `write`, so lines never mix): with its bodies
    /// while the file is under [`BODIES_CAP`], without them (hashes kept) up to [`LINES_CAP`],
    /// then one marker line and nothing more, so a worker flooding the gateway cannot make the
    /// transcript unreadable or fill the host's disk through it.
    pub fn append(
        &self,
        exchange: &Exchange,
        request: &[u8],
        response: &[u8],
    ) -> std::io::Result<Appended> {
        let mut w = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if w.closed {
            return Ok(Appended::Dropped);
        }
        let whole = Line {
            exchange,
            request: body_value(request),
            response: body_value(response),
        };
        let mut bytes = serde_json::to_vec(&whole).map_err(std::io::Error::other)?;
        let mut kept = Appended::Whole;
        if w.written.saturating_add(bytes.len() as u64) >= self.caps.0 {
            let omitted = Value::String("left out: the transcript reached its cap".into());
            let bare = Line {
                exchange,
                request: omitted.clone(),
                response: omitted,
            };
            bytes = serde_json::to_vec(&bare).map_err(std::io::Error::other)?;
            kept = Appended::WithoutBodies;
        }
        if w.written.saturating_add(bytes.len() as u64) >= self.caps.1 {
            w.closed = true;
            bytes = serde_json::to_vec(&serde_json::json!({
                "transcript_closed": "the transcript reached its cap; later exchanges are only in the audit log",
                "seq": exchange.seq,
            }))
            .map_err(std::io::Error::other)?;
            kept = Appended::Dropped;
        }
        bytes.push(b'\n');
        w.file.write_all(&bytes)?;
        w.written = w.written.saturating_add(bytes.len() as u64);
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_json_with_both_bodies_and_their_hashes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("transcript.jsonl");
        let t = Transcript::create(&path).unwrap();
        let ex = Exchange {
            seq: 1,
            time: "t".into(),
            model: Some("m".into()),
            status: 200,
            refused: None,
            error: None,
            input_tokens: 3,
            output_tokens: 4,
            latency_ms: 5,
            request_sha256: sha256_hex(b"{\"a\":1}"),
            response_sha256: sha256_hex(b"not json"),
        };
        assert_eq!(
            t.append(&ex, b"{\"a\":1}", b"not json").unwrap(),
            Appended::Whole
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let v: Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(v["request"]["a"], 1);
        assert_eq!(v["response"], "not json");
        assert_eq!(v["request_sha256"], sha256_hex(b"{\"a\":1}"));
        assert!(
            Transcript::create(&path).is_err(),
            "never replaces a transcript"
        );
    }

    #[test]
    fn a_flood_leaves_out_bodies_then_closes_the_transcript_readably() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("transcript.jsonl");
        let t = Transcript::create_with_caps(&path, (4_000, 8_000)).unwrap();
        let body = vec![b'x'; 1_000];
        let mut kept = Vec::new();
        for seq in 1..=100 {
            let ex = Exchange {
                seq,
                time: "t".into(),
                model: None,
                status: 400,
                refused: Some("bad_body".into()),
                error: None,
                input_tokens: 0,
                output_tokens: 0,
                latency_ms: 0,
                request_sha256: sha256_hex(&body),
                response_sha256: sha256_hex(b"{}"),
            };
            kept.push(t.append(&ex, &body, b"{}").unwrap());
        }
        assert_eq!(kept[0], Appended::Whole);
        assert!(kept.contains(&Appended::WithoutBodies));
        assert_eq!(kept[99], Appended::Dropped);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.len() < 8_000 + 200, "{} bytes", text.len());
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let last = lines.last().unwrap();
        assert!(last["transcript_closed"].is_string(), "{last}");
        assert_eq!(
            lines
                .iter()
                .filter(|l| l["transcript_closed"].is_string())
                .count(),
            1
        );
        // Every line without bodies still has the hashes the audit log gets.
        assert!(lines
            .iter()
            .filter(|l| l["request"]
                .as_str()
                .is_some_and(|r| r.starts_with("left out")))
            .all(|l| l["request_sha256"] == sha256_hex(&body)));
    }
}
