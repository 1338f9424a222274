//! What the report worker says it found: its `index.json`, read at staging time into a small
//! summary a reviewer can triage a batch by (`staged`'s WARN column, `run`'s and `batch`'s
//! warning lines) without opening any file.
//!
//! `index.json` came out of a container, so it is hostile data even after the extractor's
//! caps: it is read only up to [`MAX_INDEX_BYTES`], parsed into a small struct that ignores
//! unknown fields, counts are clamped, only the severities `high`, `medium` and `low` count,
//! strings are cut to a few hundred characters and at most [`MAX_HIGH_INPUTS`] inputs are kept
//! by name. Every string kept here is still the worker's and is shown only through
//! `render::line`. An index that does not parse gives no summary, never a session failure.
//!
//! The summary is the worker's claim. A worker that lies can only hide or invent its own
//! warnings, which it could do anyway by writing a clean (or alarming) report; the files
//! themselves are still what a person reviews.

use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize};

/// The index's name at the top of a report worker's output.
pub const INDEX: &str = "index.json";
/// The most bytes of `index.json` read; a larger one gives no summary.
pub const MAX_INDEX_BYTES: u64 = 4 << 20;
/// The most inputs with a high warning kept by name (the count covers all of them).
pub const MAX_HIGH_INPUTS: usize = 20;
/// The most warning kinds kept per input.
pub const MAX_KINDS: usize = 12;
/// The longest path kept, in characters.
pub const MAX_PATH_CHARS: usize = 256;
/// The longest warning kind kept, in characters.
pub const MAX_KIND_CHARS: usize = 48;
/// The most warnings one input can claim; far above what the worker reports.
pub const MAX_COUNT: u64 = 1_000_000;

/// How bad the worst warning of an input is, as the report worker grades it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth a look.
    Low,
    /// Likely a problem.
    Medium,
    /// Read it before anything else (hidden text, prompt injection, scripts).
    High,
}

impl Severity {
    /// The word the worker writes, and `--json` keeps.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
        }
    }

    /// The short word of the `staged` WARN column.
    pub fn short(self) -> &'static str {
        match self {
            Severity::Low => "low",
            Severity::Medium => "med",
            Severity::High => "high",
        }
    }

    fn parse(text: &str) -> Option<Severity> {
        match text {
            "high" => Some(Severity::High),
            "medium" => Some(Severity::Medium),
            "low" => Some(Severity::Low),
            _ => None,
        }
    }
}

/// One input whose worst warning is high: where to look first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HighInput {
    /// The input's path as the worker wrote it (cut, still the worker's: render it).
    pub path: String,
    /// Its warnings (clamped).
    pub warnings: u64,
    /// Its distinct warning kinds (at most [`MAX_KINDS`], each cut).
    pub kinds: Vec<String>,
}

/// A staged commit's warnings, as its report worker claims them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarningSummary {
    /// Warnings over all inputs.
    pub total: u64,
    /// Inputs whose worst warning is high.
    pub inputs_high: u64,
    /// Inputs whose worst warning is medium.
    pub inputs_medium: u64,
    /// Inputs whose worst warning is low.
    pub inputs_low: u64,
    /// The worst severity of any input; none without warnings.
    pub highest: Option<Severity>,
    /// The inputs with a high warning, at most [`MAX_HIGH_INPUTS`].
    #[serde(default)]
    pub high: Vec<HighInput>,
    /// Inputs with a high warning beyond `high`.
    #[serde(default)]
    pub high_omitted: u64,
}

/// `index.json` as far as it is read: everything else in it is ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawIndex {
    inputs: Vec<RawInput>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawInput {
    path: Option<String>,
    #[serde(deserialize_with = "count")]
    warnings: u64,
    highest_severity: Option<String>,
    warning_kinds: Option<Vec<String>>,
}

/// A count as any JSON number: negative as 0, fractions cut, huge ones at [`MAX_COUNT`].
fn count<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = Option::<serde_json::Number>::deserialize(d)?;
    let Some(n) = n else { return Ok(0) };
    let value = if let Some(u) = n.as_u64() {
        u
    } else if n.as_i64().is_some() {
        0
    } else {
        let f = n.as_f64().unwrap_or(0.0);
        if f.is_finite() && f > 0.0 {
            f.min(MAX_COUNT as f64) as u64
        } else {
            0
        }
    };
    Ok(value.min(MAX_COUNT))
}

/// The summary of an index's bytes; `None` when they are too many or do not parse.
pub fn parse(bytes: &[u8]) -> Option<WarningSummary> {
    if bytes.len() as u64 > MAX_INDEX_BYTES {
        return None;
    }
    let raw: RawIndex = serde_json::from_slice(bytes).ok()?;
    let mut s = WarningSummary::default();
    for input in raw.inputs {
        let severity = input.highest_severity.as_deref().and_then(Severity::parse);
        s.total = s.total.saturating_add(input.warnings);
        match severity {
            Some(Severity::High) => s.inputs_high += 1,
            Some(Severity::Medium) => s.inputs_medium += 1,
            Some(Severity::Low) => s.inputs_low += 1,
            None => {}
        }
        s.highest = s.highest.max(severity);
        if severity != Some(Severity::High) {
            continue;
        }
        if s.high.len() >= MAX_HIGH_INPUTS {
            s.high_omitted += 1;
            continue;
        }
        let kinds = input.warning_kinds.unwrap_or_default();
        s.high.push(HighInput {
            path: cut(input.path.as_deref().unwrap_or("?"), MAX_PATH_CHARS),
            warnings: input.warnings,
            kinds: kinds
                .iter()
                .take(MAX_KINDS)
                .map(|k| cut(k, MAX_KIND_CHARS))
                .collect(),
        });
    }
    Some(s)
}

/// The summary of the staged files' `index.json` under `files_dir`, when `accepted` (the
/// staged paths) has one at the top. Read without following a link, only a regular file,
/// capped; anything wrong gives `None`.
pub fn read(
    files_dir: &Path,
    accepted: &[crate::extract::ExtractedFile],
) -> Option<WarningSummary> {
    use std::os::unix::fs::OpenOptionsExt;
    if !accepted.iter().any(|f| f.path == INDEX) {
        return None;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(files_dir.join(INDEX))
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_INDEX_BYTES + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    let summary = parse(&bytes);
    if summary.is_none() {
        tracing::info!(
            "{INDEX} in the output does not parse as a report index; no warning summary"
        );
    }
    summary
}

/// `text`'s first `max` characters.
fn cut(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

impl WarningSummary {
    /// Adds `other`, a part of a combined commit whose inputs sit under `folder`.
    pub fn add(&mut self, other: &WarningSummary, folder: &str) {
        self.total = self.total.saturating_add(other.total);
        self.inputs_high = self.inputs_high.saturating_add(other.inputs_high);
        self.inputs_medium = self.inputs_medium.saturating_add(other.inputs_medium);
        self.inputs_low = self.inputs_low.saturating_add(other.inputs_low);
        self.highest = self.highest.max(other.highest);
        self.high_omitted = self.high_omitted.saturating_add(other.high_omitted);
        for h in &other.high {
            if self.high.len() >= MAX_HIGH_INPUTS {
                self.high_omitted = self.high_omitted.saturating_add(1);
                continue;
            }
            self.high.push(HighInput {
                path: cut(&format!("{folder}/{}", h.path), MAX_PATH_CHARS),
                ..h.clone()
            });
        }
    }
}

/// The widest `staged` WARN cell ([`cell`]), so the column stays aligned.
pub const CELL_WIDTH: usize = 12;

/// The `staged` WARN cell: `3 high`, `1 med`, `0`, or `-` when the worker gave no index; at
/// most [`CELL_WIDTH`] characters (`999999+ high`).
pub fn cell(summary: Option<&WarningSummary>) -> String {
    let Some(s) = summary else { return "-".into() };
    let count = if s.total > 999_999 {
        "999999+".to_string()
    } else {
        s.total.to_string()
    };
    match s.highest {
        Some(h) if s.total > 0 => format!("{count} {}", h.short()),
        _ => count,
    }
}

/// One phrase for a document's progress line and `run`: `2 warnings (highest high)`, `no
/// warnings`, or `warnings unknown`.
pub fn phrase(summary: Option<&WarningSummary>) -> String {
    match summary {
        None => "warnings unknown".into(),
        Some(s) if s.total == 0 => "no warnings".into(),
        Some(s) => {
            let noun = if s.total == 1 { "warning" } else { "warnings" };
            match s.highest {
                Some(h) => format!("{} {noun} (highest {})", s.total, h.as_str()),
                None => format!("{} {noun}", s.total),
            }
        }
    }
}

/// How many inputs are at each worst severity: `inputs: 1 high, 0 medium, 2 low`.
pub fn by_severity(s: &WarningSummary) -> String {
    format!(
        "inputs: {} high, {} medium, {} low",
        s.inputs_high, s.inputs_medium, s.inputs_low
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(inputs: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(
            &serde_json::json!({ "version": "1", "mode": "report", "inputs": inputs }),
        )
        .unwrap()
    }

    #[test]
    fn the_report_workers_index_sums_by_worst_severity() {
        let s = parse(&index(serde_json::json!([
            { "path": "a.html", "warnings": 8, "highest_severity": "high",
              "warning_kinds": ["hidden_text", "prompt_injection"], "extra": {"x": 1} },
            { "path": "b.pdf", "warnings": 0, "highest_severity": null, "warning_kinds": [] },
            { "path": "c.md", "warnings": 2, "highest_severity": "medium", "warning_kinds": ["x"] },
        ])))
        .unwrap();
        assert_eq!(
            (s.total, s.inputs_high, s.inputs_medium, s.inputs_low),
            (10, 1, 1, 0)
        );
        assert_eq!(s.highest, Some(Severity::High));
        assert_eq!(s.high.len(), 1);
        assert_eq!(s.high[0].path, "a.html");
        assert_eq!(s.high[0].kinds, ["hidden_text", "prompt_injection"]);
        assert_eq!(cell(Some(&s)), "10 high");
        assert_eq!(phrase(Some(&s)), "10 warnings (highest high)");
        assert_eq!(by_severity(&s), "inputs: 1 high, 1 medium, 0 low");
    }

    #[test]
    fn no_index_or_a_clean_one_reads_as_unknown_or_zero() {
        assert_eq!(cell(None), "-");
        assert_eq!(phrase(None), "warnings unknown");
        let clean = parse(&index(serde_json::json!([{ "path": "a", "warnings": 0 }]))).unwrap();
        assert_eq!(
            (cell(Some(&clean)), phrase(Some(&clean))),
            ("0".into(), "no warnings".into())
        );
        let empty = parse(b"{}").unwrap();
        assert_eq!(empty, WarningSummary::default());
    }

    #[test]
    fn wrong_types_and_garbage_give_no_summary() {
        for bad in [
            &b"not json"[..],
            b"[1,2,3]",
            br#"{"inputs": "many"}"#,
            br#"{"inputs": [{"path": 7}]}"#,
            br#"{"inputs": [{"warnings": "lots"}]}"#,
            br#"{"inputs": [{"warning_kinds": "hidden_text"}]}"#,
            br#"{"inputs": [{"highest_severity": 3}]}"#,
        ] {
            assert_eq!(parse(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn negative_huge_and_fractional_counts_are_clamped() {
        let s = parse(&index(serde_json::json!([
            { "path": "neg", "warnings": -5, "highest_severity": "low" },
            { "path": "huge", "warnings": u64::MAX, "highest_severity": "high" },
            { "path": "float", "warnings": 1e300, "highest_severity": "high" },
            { "path": "frac", "warnings": 2.7, "highest_severity": "high" },
        ])))
        .unwrap();
        let counts: Vec<u64> = s.high.iter().map(|h| h.warnings).collect();
        assert_eq!(counts, [MAX_COUNT, MAX_COUNT, 2]);
        assert_eq!(cell(Some(&s)), "999999+ high");
        assert_eq!(cell(Some(&s)).len(), CELL_WIDTH);
        assert_eq!(s.total, 2 * MAX_COUNT + 2);
        // 1e400 is not a JSON number serde accepts: no summary rather than a wrong one.
        assert_eq!(parse(br#"{"inputs":[{"warnings":1e400}]}"#), None);
    }

    #[test]
    fn forged_severities_do_not_count_and_a_forged_index_only_states_a_claim() {
        let s = parse(&index(serde_json::json!([
            { "path": "x", "warnings": 3, "highest_severity": "CRITICAL" },
            { "path": "y", "warnings": 1, "highest_severity": "High" },
        ])))
        .unwrap();
        assert_eq!((s.total, s.highest, s.high.len()), (4, None, 0));
        assert_eq!(cell(Some(&s)), "4");
    }

    #[test]
    fn huge_indexes_are_refused_and_many_inputs_are_capped() {
        let mut big = b"{\"inputs\":[], \"pad\": \"".to_vec();
        big.resize(MAX_INDEX_BYTES as usize + 10, b'a');
        big.extend_from_slice(b"\"}");
        assert_eq!(parse(&big), None);
        let many: Vec<serde_json::Value> = (0..500)
            .map(|i| serde_json::json!({ "path": format!("d{i}"), "warnings": 1, "highest_severity": "high",
                "warning_kinds": (0..50).map(|k| format!("kind{k}{}", "k".repeat(100))).collect::<Vec<_>>() }))
            .collect();
        let s = parse(&index(serde_json::Value::Array(many))).unwrap();
        assert_eq!(
            (s.inputs_high, s.high.len(), s.high_omitted),
            (500, MAX_HIGH_INPUTS, 480)
        );
        assert!(s.high.iter().all(|h| h.kinds.len() == MAX_KINDS));
        assert!(s.high[0]
            .kinds
            .iter()
            .all(|k| k.chars().count() == MAX_KIND_CHARS));
    }

    #[test]
    fn control_characters_in_paths_are_kept_cut_and_rendered_inert() {
        let path = format!("evil\u{1b}]52;c;aGk=\u{7}\n\u{202e}{}", "x".repeat(1000));
        let s = parse(&index(serde_json::json!([
            { "path": path, "warnings": 1, "highest_severity": "high", "warning_kinds": ["a\u{1b}[8m"] }
        ])))
        .unwrap();
        assert_eq!(s.high[0].path.chars().count(), MAX_PATH_CHARS);
        let shown = crate::render::line(&s.high[0].path);
        assert!(
            !shown.chars().any(|c| c.is_control() || c == '\u{202e}'),
            "{shown}"
        );
        assert!(!crate::render::line(&s.high[0].kinds[0]).contains('\u{1b}'));
    }

    #[test]
    fn combined_commits_sum_their_parts_under_their_folders() {
        let part = parse(&index(serde_json::json!([
            { "path": "a", "warnings": 2, "highest_severity": "high", "warning_kinds": ["k"] },
            { "path": "b", "warnings": 1, "highest_severity": "low" },
        ])))
        .unwrap();
        let mut all = WarningSummary::default();
        all.add(&part, "one");
        all.add(&part, "two");
        assert_eq!((all.total, all.inputs_high, all.inputs_low), (6, 2, 2));
        let paths: Vec<&str> = all.high.iter().map(|h| h.path.as_str()).collect();
        assert_eq!(paths, ["one/a", "two/a"]);
        assert_eq!(all.highest, Some(Severity::High));
    }

    #[test]
    fn only_a_top_level_regular_index_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = |p: &str| crate::extract::ExtractedFile {
            path: p.into(),
            size: 0,
            sha256: String::new(),
        };
        std::fs::write(
            dir.path().join(INDEX),
            index(serde_json::json!([{ "path": "a", "warnings": 1, "highest_severity": "low" }])),
        )
        .unwrap();
        assert_eq!(read(dir.path(), &[file("sub/index.json")]), None);
        assert_eq!(read(dir.path(), &[file(INDEX)]).unwrap().total, 1);
        let other = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(dir.path().join(INDEX), other.path().join(INDEX)).unwrap();
        assert_eq!(read(other.path(), &[file(INDEX)]), None);
    }
}
