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

/// The append-only transcript file of one session.
#[derive(Debug)]
pub struct Transcript {
    path: PathBuf,
    file: Mutex<File>,
}

impl Transcript {
    /// Creates the file (0600, never replacing one, never through a link).
    pub fn create(path: &Path) -> std::io::Result<Transcript> {
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?;
        Ok(Transcript {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one exchange with its bodies as a single line (one `write`, so lines never mix).
    pub fn append(
        &self,
        exchange: &Exchange,
        request: &[u8],
        response: &[u8],
    ) -> std::io::Result<()> {
        let line = Line {
            exchange,
            request: body_value(request),
            response: body_value(response),
        };
        let mut bytes = serde_json::to_vec(&line).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(&bytes)
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
        t.append(&ex, b"{\"a\":1}", b"not json").unwrap();
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
}
