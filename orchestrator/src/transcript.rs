//! Reading a staged commit's model transcript for review (`golem-orch transcript`, `show`).
//!
//! The transcript is the one channel by which a worker's data leaves the gray zone (anything it
//! read can go into a prompt), so a reviewer reads it like the files. It is read only as it was
//! staged: the bytes must hash to the manifest's `model.transcript_sha256`, read without
//! following a link and with a size cap, so a file swapped in after staging is refused rather
//! than shown. Parsing is lenient about what a line holds (bodies are whatever the worker and the
//! upstream sent) but strict about the line being a JSON object.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::stage::{self, Manifest, Stage};

pub use crate::stage::MAX_TRANSCRIPT_BYTES;

/// One exchange as the gateway wrote it: the record and both bodies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// 1-based order of arrival.
    pub seq: u64,
    /// When the request arrived (RFC 3339).
    #[serde(default)]
    pub time: String,
    /// The model the worker asked for.
    #[serde(default)]
    pub model: Option<String>,
    /// The status the worker got.
    pub status: u16,
    /// Why the gateway refused it, when it did.
    #[serde(default)]
    pub refused: Option<String>,
    /// What went wrong upstream, when something did.
    #[serde(default)]
    pub error: Option<String>,
    /// Input tokens charged.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens charged.
    #[serde(default)]
    pub output_tokens: u64,
    /// Milliseconds from arrival to answer.
    #[serde(default)]
    pub latency_ms: u64,
    /// sha256 of the request body, as in the audit log.
    #[serde(default)]
    pub request_sha256: String,
    /// sha256 of the response body, as in the audit log.
    #[serde(default)]
    pub response_sha256: String,
    /// What the worker sent.
    #[serde(default)]
    pub request: Value,
    /// What it got back.
    #[serde(default)]
    pub response: Value,
    /// The batch document it belongs to, in a combined commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<String>,
}

/// Why a staged transcript cannot be shown.
#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    /// The staged commit's worker had no model access.
    #[error("staged commit {0} has no model transcript (its worker had no model access)")]
    None(String),
    /// The file is missing, a link, too large or not what was staged.
    #[error("staged commit {id}: transcript refused: {what}")]
    Tampered {
        /// The staged commit.
        id: String,
        /// What is wrong.
        what: String,
    },
    /// A line is not a transcript record.
    #[error("staged commit {id}: transcript line {line} is not an exchange: {message}")]
    Corrupt {
        /// The staged commit.
        id: String,
        /// 1-based line number.
        line: usize,
        /// The parser's message.
        message: String,
    },
}

/// The exchanges of a transcript, in file order (blank lines skipped).
pub fn parse(id: &str, bytes: &[u8]) -> Result<Vec<Exchange>, TranscriptError> {
    let mut out = Vec::new();
    for (n, raw) in bytes.split(|b| *b == b'\n').enumerate() {
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let exchange = serde_json::from_slice(raw).map_err(|e| TranscriptError::Corrupt {
            id: id.to_string(),
            line: n + 1,
            message: e.to_string(),
        })?;
        out.push(exchange);
    }
    Ok(out)
}

/// The staged commit's exchanges, read and verified as staged.
pub fn load(
    stage: &Stage,
    id: &str,
    manifest: &Manifest,
) -> Result<Vec<Exchange>, TranscriptError> {
    match stage.transcript(id, manifest) {
        Ok(Some(bytes)) => parse(id, &bytes),
        Ok(None) => Err(TranscriptError::None(id.to_string())),
        Err(e) => Err(TranscriptError::from_stage(id, e)),
    }
}

/// The staged commit's exchanges, with the manifest first matched to the audit log's record of
/// it ([`stage::read_transcript`]): what `golem-orch transcript` shows.
pub fn load_verified(home: &crate::home::Home, id: &str) -> Result<Vec<Exchange>, TranscriptError> {
    match stage::read_transcript(home, id) {
        Ok(Some(bytes)) => parse(id, &bytes),
        Ok(None) => Err(TranscriptError::None(id.to_string())),
        Err(e) => Err(TranscriptError::from_stage(id, e)),
    }
}

impl TranscriptError {
    fn from_stage(id: &str, e: stage::StageError) -> TranscriptError {
        TranscriptError::Tampered {
            id: id.to_string(),
            what: e.to_string(),
        }
    }
}

/// One exchange as a person reads it: a heading (seq, model, status, why refused, tokens,
/// latency), then both bodies as pretty JSON. Every value is rendered inert here (the bodies are
/// whatever a hostile document made the worker send and the model answer), so the text is safe
/// to print as it is.
pub fn render_exchange(x: &Exchange) -> Result<String, serde_json::Error> {
    use crate::render::line;
    let mut head = format!(
        "#{}  {}  status {}  {} in / {} out tokens  {} ms",
        x.seq,
        line(x.model.as_deref().unwrap_or("-")),
        x.status,
        x.input_tokens,
        x.output_tokens,
        x.latency_ms
    );
    let extras = [
        ("refused", &x.refused),
        ("error", &x.error),
        ("document", &x.document),
    ];
    for (what, value) in extras {
        if let Some(v) = value {
            head.push_str(&format!("  {what}: {}", line(v)));
        }
    }
    Ok(format!(
        "{head}\nrequest:\n{}\nresponse:\n{}\n",
        crate::render::json(&x.request)?,
        crate::render::json(&x.response)?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::transcript::sha256_hex;
    use crate::gateway::ModelUsage;
    use crate::stage::ModelRecord;

    const LINES: &str = concat!(
        r#"{"seq":1,"time":"t","model":"m","status":200,"refused":null,"error":null,"input_tokens":3,"output_tokens":4,"latency_ms":5,"request_sha256":"a","response_sha256":"b","request":{"messages":[]},"response":"not json"}"#,
        "\n\n",
        r#"{"seq":2,"status":403,"refused":"model not allowed","request":{},"response":{}}"#,
        "\n"
    );

    fn staged(bytes: &[u8], sha: Option<String>) -> (tempfile::TempDir, Stage, Manifest) {
        let dir = tempfile::tempdir().unwrap();
        let stage = Stage::new(dir.path());
        std::fs::create_dir_all(stage.dir("x")).unwrap();
        std::fs::write(stage.dir("x").join(stage::TRANSCRIPT), bytes).unwrap();
        let manifest = Manifest {
            version: 1,
            id: "x".into(),
            session: "x".into(),
            created_at: "t".into(),
            trust_level: crate::policy::TrustLevel::Untrusted,
            image: "i".into(),
            image_id: "sha256:i".into(),
            command: Vec::new(),
            exit_code: Some(0),
            inputs: Vec::new(),
            skipped: Vec::new(),
            files: Vec::new(),
            rejected: Vec::new(),
            rejected_omitted: 0,
            bytes: 0,
            repo_head: None,
            model: sha.map(|transcript_sha256| ModelRecord {
                usage: ModelUsage::default(),
                transcript_sha256,
                honeytoken_seen: false,
                transcript_incomplete: 0,
            }),
            container: None,
            warnings: None,
        };
        (dir, stage, manifest)
    }

    #[test]
    fn a_staged_transcript_reads_back_as_its_exchanges() {
        let (_d, stage, m) = staged(LINES.as_bytes(), Some(sha256_hex(LINES.as_bytes())));
        let ex = load(&stage, "x", &m).unwrap();
        assert_eq!(ex.len(), 2);
        assert_eq!(
            (ex[0].seq, ex[0].input_tokens, ex[0].output_tokens),
            (1, 3, 4)
        );
        assert_eq!(ex[0].response, Value::String("not json".into()));
        assert_eq!(ex[1].refused.as_deref(), Some("model not allowed"));
    }

    #[test]
    fn an_exchange_renders_inert_with_its_heading_and_bodies() {
        let (_d, stage, m) = staged(LINES.as_bytes(), Some(sha256_hex(LINES.as_bytes())));
        let ex = load(&stage, "x", &m).unwrap();
        let text = render_exchange(&ex[0]).unwrap();
        assert!(
            text.starts_with("#1  m  status 200  3 in / 4 out tokens  5 ms\nrequest:\n{"),
            "{text}"
        );
        assert!(text.contains("response:\n\"not json\""), "{text}");
        let hostile = Exchange {
            model: Some("m\x1b]52;c;aGk=\x07".into()),
            refused: Some("x\nforged line".into()),
            request: serde_json::json!({"content": "hi \u{1b}[8m hidden \u{202e}"}),
            ..ex[1].clone()
        };
        let text = render_exchange(&hostile).unwrap();
        assert!(
            !text
                .chars()
                .any(golem_protocol::chars::is_dangerous_in_text),
            "{text:?}"
        );
        assert!(
            text.lines()
                .next()
                .unwrap()
                .contains("refused: x\\nforged line"),
            "{text}"
        );
    }

    #[test]
    fn only_what_was_staged_is_shown() {
        // Changed after staging: refused, not shown.
        let (_d, stage, m) = staged(LINES.as_bytes(), Some(sha256_hex(b"other")));
        let err = load(&stage, "x", &m).unwrap_err().to_string();
        assert!(err.contains("does not match"), "{err}");
        // No model record: says so.
        let (_d, stage, m) = staged(LINES.as_bytes(), None);
        assert!(matches!(
            load(&stage, "x", &m),
            Err(TranscriptError::None(_))
        ));
        // A link is never followed.
        let (d, stage, m) = staged(LINES.as_bytes(), Some(sha256_hex(LINES.as_bytes())));
        let path = stage.dir("x").join(stage::TRANSCRIPT);
        let real = d.path().join("elsewhere");
        std::fs::rename(&path, &real).unwrap();
        std::os::unix::fs::symlink(&real, &path).unwrap();
        assert!(matches!(
            load(&stage, "x", &m),
            Err(TranscriptError::Tampered { .. })
        ));
        // A line that is not an exchange is located.
        let bad = b"{\"seq\":1,\"status\":200}\n[1]\n";
        let (_d, stage, m) = staged(bad, Some(sha256_hex(bad)));
        let err = load(&stage, "x", &m).unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
    }
}
