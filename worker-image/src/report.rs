//! Rendering: the per-input reports (`<input>.md`, `<input>.json`), the
//! `.txt` of `text` mode, and the index (`index.md`, `index.json`).
//!
//! Every string here came from a hostile input through a child process that
//! may have been confused, so [`sanitize`] escapes and caps all of them
//! before anything is rendered, and the Markdown renderer only ever puts
//! them into escaped inline text, code spans or fenced blocks.

use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use crate::escape::{
    display_chars, escape_multiline, fence_for, inline_code, link_target, markdown_inline,
    truncate_bytes,
};
use crate::extract::{Mode, MAX_LINKS, MAX_OUTLINE, SUMMARY_SENTENCES};
use crate::model::{Analysis, Severity};
use crate::warnings::MAX_WARNINGS;
use crate::VERSION;

/// Words of extracted text shown in a report's Markdown.
pub const MD_TEXT_WORDS: usize = 2000;
/// Bytes of extracted text shown in a report's Markdown.
pub const MD_TEXT_BYTES: usize = 64 * 1024;
/// Links listed in a report's Markdown (all kept ones are in the JSON).
pub const MD_LINKS: usize = 50;
/// Outline entries listed in a report's Markdown.
pub const MD_OUTLINE: usize = 100;

/// Where an input stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Not processed yet (only seen in an index written mid-run).
    Pending,
    /// Analysed.
    Ok,
    /// Could not be read, analysed or reported; see the error.
    Error,
}

impl Status {
    /// The name used in both formats.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Ok => "ok",
            Status::Error => "error",
        }
    }
}

/// One input as the parent knows it.
#[derive(Debug, Clone)]
pub struct Record {
    /// Escaped path relative to the input directory.
    pub path: String,
    /// Output stem: the report files are `<stem>.md`/`.json` or `<stem>.txt`.
    pub stem: Option<String>,
    /// Where it stands.
    pub status: Status,
    /// Why it failed, when it did (escaped).
    pub error: Option<String>,
    /// Size in bytes, when it could be read.
    pub size: Option<u64>,
    /// SHA-256, when it could be read.
    pub sha256: Option<String>,
    /// The sanitised analysis, when there is one.
    pub analysis: Option<Analysis>,
    /// Report files actually written, relative to the output directory.
    pub files: Vec<String>,
    /// Why the text was left out of the report, if it was.
    pub text_omitted: Option<String>,
}

impl Record {
    /// A pending record.
    pub fn pending(path: String, stem: Option<String>) -> Self {
        Self {
            path,
            stem,
            status: Status::Pending,
            error: None,
            size: None,
            sha256: None,
            analysis: None,
            files: Vec::new(),
            text_omitted: None,
        }
    }

    /// Marks the record failed with `message` (escaped here).
    pub fn fail(&mut self, message: &str) {
        self.status = Status::Error;
        self.error = Some(display_chars(message, 600, false));
    }
}

fn clean_value(v: Value, depth: usize) -> Value {
    match v {
        Value::String(s) => Value::String(display_chars(&s, 500, false)),
        Value::Array(a) if depth < 6 => Value::Array(
            a.into_iter()
                .take(100)
                .map(|v| clean_value(v, depth + 1))
                .collect(),
        ),
        Value::Object(o) if depth < 6 => Value::Object(
            o.into_iter()
                .take(100)
                .map(|(k, v)| (display_chars(&k, 64, false), clean_value(v, depth + 1)))
                .collect(),
        ),
        Value::Array(_) | Value::Object(_) => Value::String("…".into()),
        other => other,
    }
}

/// Escapes and caps every string of an analysis from a child, and caps its
/// lists, so nothing the child sends can reach the output unescaped or
/// unbounded.
pub fn sanitize(mut a: Analysis, mode: Mode) -> Analysis {
    a.error = a.error.map(|e| display_chars(&e, 600, false));
    a.title = a.title.map(|t| display_chars(&t, 300, false));
    a.metadata = a
        .metadata
        .into_iter()
        .take(50)
        .map(|(k, v)| (display_chars(&k, 64, false), display_chars(&v, 500, false)))
        .collect();
    a.outline.truncate(MAX_OUTLINE);
    for h in &mut a.outline {
        h.level = h.level.clamp(1, 9);
        h.text = display_chars(&h.text, 300, false);
    }
    a.links.truncate(MAX_LINKS);
    for l in &mut a.links {
        l.url = display_chars(&l.url, 2048, false);
        l.text = l.text.as_ref().map(|t| display_chars(t, 200, false));
        l.source = display_chars(&l.source, 20, false);
    }
    a.summary.truncate(SUMMARY_SENTENCES);
    for s in &mut a.summary {
        *s = display_chars(s, 400, false);
    }
    a.warnings.truncate(MAX_WARNINGS);
    for w in &mut a.warnings {
        w.message = display_chars(&w.message, 500, false);
        w.snippet = w.snippet.as_ref().map(|s| display_chars(s, 600, false));
    }
    a.details = std::mem::take(&mut a.details)
        .into_iter()
        .take(50)
        .map(|(k, v)| (display_chars(&k, 64, false), clean_value(v, 0)))
        .collect();
    let mut text = escape_multiline(&a.text);
    let cut = truncate_bytes(&mut text, mode.text_cap());
    a.text = text;
    a.text_truncated |= cut;
    a
}

fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

/// The first `words` words of `text` (whole lines kept as they are), and
/// whether anything was left out.
fn first_words(text: &str, words: usize, max_bytes: usize) -> (&str, bool) {
    let mut count = 0;
    let mut in_word = false;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            in_word = false;
        } else if !in_word {
            in_word = true;
            count += 1;
            if count > words || i >= max_bytes {
                return (text[..i].trim_end(), true);
            }
        }
    }
    if text.len() > max_bytes {
        let mut end = max_bytes;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        return (&text[..end], true);
    }
    (text, false)
}

fn severity_counts(a: &Analysis) -> (u64, u64) {
    let high = a
        .warnings
        .iter()
        .filter(|w| w.severity == Severity::High)
        .count() as u64;
    (a.warnings_total, high)
}

/// The per-input Markdown report. `with_text` false leaves the extracted
/// text out (output budget).
pub fn input_markdown(r: &Record, with_text: bool) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# {}\n", markdown_inline(&r.path));
    let a = r.analysis.as_ref();
    let doc_type = a.map_or("unknown", |a| a.doc_type.as_str());
    let _ = writeln!(md, "- Type: {doc_type} · Status: **{}**", r.status.as_str());
    if let (Some(size), Some(sha)) = (r.size, &r.sha256) {
        let _ = writeln!(
            md,
            "- Size: {} · SHA-256: `{sha}`",
            plural(size, "byte", "bytes")
        );
    }
    if let Some(a) = a {
        if let Some(t) = &a.title {
            let _ = writeln!(md, "- Title: {}", markdown_inline(t));
        }
        let mut counts = Vec::new();
        if let Some(p) = a.pages {
            counts.push(plural(p, "page", "pages"));
        }
        counts.push(plural(a.words, "word", "words"));
        counts.push(plural(a.lines, "line", "lines"));
        counts.push(plural(a.chars, "character", "characters"));
        let _ = writeln!(md, "- Counts: {}", counts.join(" · "));
        for (k, v) in &a.metadata {
            let _ = writeln!(md, "- {}: {}", markdown_inline(k), markdown_inline(v));
        }
    }
    md.push('\n');
    if let Some(e) = &r.error {
        let _ = writeln!(md, "**Error:** {}\n", markdown_inline(e));
    }
    let Some(a) = a else {
        return md;
    };

    let (total, high) = severity_counts(a);
    if total == 0 {
        let _ = writeln!(md, "## Warnings\n\nNone found.\n");
    } else {
        let _ = writeln!(
            md,
            "## Warnings ({total}{})\n",
            if high > 0 {
                format!(", {high} high")
            } else {
                String::new()
            }
        );
        for w in &a.warnings {
            let _ = writeln!(
                md,
                "- **{}** {}: {}",
                w.severity.as_str(),
                w.kind.as_str(),
                markdown_inline(&w.message)
            );
            if let Some(s) = &w.snippet {
                let _ = writeln!(md, "  - quote: {}", inline_code(s));
            }
        }
        if total > a.warnings.len() as u64 {
            let _ = writeln!(md, "- … {} more", total - a.warnings.len() as u64);
        }
        md.push('\n');
    }

    if !a.summary.is_empty() {
        let _ = writeln!(md, "## Summary\n");
        for (i, s) in a.summary.iter().enumerate() {
            let _ = writeln!(md, "{}. {}", i + 1, markdown_inline(s));
        }
        md.push('\n');
    }

    if !a.outline.is_empty() {
        let _ = writeln!(md, "## Outline ({})\n", a.outline_total);
        let min = a.outline.iter().map(|h| h.level).min().unwrap_or(1);
        for h in a.outline.iter().take(MD_OUTLINE) {
            let indent = "  ".repeat(usize::from(h.level.saturating_sub(min)).min(5));
            let _ = writeln!(md, "{indent}- {}", markdown_inline(&h.text));
        }
        if a.outline_total > MD_OUTLINE.min(a.outline.len()) as u64 {
            let shown = MD_OUTLINE.min(a.outline.len()) as u64;
            let _ = writeln!(md, "- … {} more", a.outline_total - shown);
        }
        md.push('\n');
    }

    if !a.links.is_empty() {
        let _ = writeln!(md, "## Links ({})\n", a.links_total);
        for l in a.links.iter().take(MD_LINKS) {
            let text = l
                .text
                .as_ref()
                .map(|t| format!(" “{}”", markdown_inline(t)))
                .unwrap_or_default();
            let _ = writeln!(
                md,
                "- {}{text} ({})",
                inline_code(&l.url),
                markdown_inline(&l.source)
            );
        }
        let shown = MD_LINKS.min(a.links.len()) as u64;
        if a.links_total > shown {
            let _ = writeln!(md, "- … {} more (see the JSON)", a.links_total - shown);
        }
        md.push('\n');
    }

    if !a.details.is_empty() {
        let _ = writeln!(md, "## Details\n");
        for (k, v) in &a.details {
            let shown = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let shown = display_chars(&shown, 300, false);
            let _ = writeln!(md, "- {}: {}", markdown_inline(k), inline_code(&shown));
        }
        md.push('\n');
    }

    if !with_text {
        let _ = writeln!(
            md,
            "## Text\n\n(left out: {})\n",
            r.text_omitted.as_deref().unwrap_or("output budget")
        );
    } else if !a.text.trim().is_empty() {
        let (shown, more) = first_words(&a.text, MD_TEXT_WORDS, MD_TEXT_BYTES);
        let heading = if more {
            format!("## Text (first {MD_TEXT_WORDS} words of {})", a.words)
        } else {
            "## Text".to_string()
        };
        let lines: Vec<&str> = shown.lines().collect();
        let fence = fence_for(&lines);
        let _ = writeln!(md, "{heading}\n\n{fence}text");
        for line in &lines {
            let _ = writeln!(md, "{line}");
        }
        let _ = writeln!(md, "{fence}\n");
    }
    md
}

/// The per-input JSON report (same data as the Markdown one, plus the text
/// up to its cap).
pub fn input_json(r: &Record, mode: Mode, with_text: bool) -> Value {
    let mut o = Map::new();
    o.insert("version".into(), VERSION.into());
    o.insert("mode".into(), mode.as_str().into());
    o.insert("path".into(), r.path.clone().into());
    o.insert("status".into(), r.status.as_str().into());
    o.insert("error".into(), json!(r.error));
    o.insert("size".into(), json!(r.size));
    o.insert("sha256".into(), json!(r.sha256));
    let a = r.analysis.as_ref();
    o.insert("type".into(), json!(a.map(|a| a.doc_type.as_str())));
    if let Some(a) = a {
        o.insert("title".into(), json!(a.title));
        o.insert("metadata".into(), json!(a.metadata));
        o.insert("pages".into(), json!(a.pages));
        o.insert(
            "counts".into(),
            json!({
                "words": a.words,
                "lines": a.lines,
                "characters": a.chars,
                "text_bytes": a.text_bytes,
            }),
        );
        o.insert("outline".into(), json!(a.outline));
        o.insert("outline_total".into(), a.outline_total.into());
        o.insert("links".into(), json!(a.links));
        o.insert("links_total".into(), a.links_total.into());
        o.insert("summary".into(), json!(a.summary));
        o.insert(
            "warnings".into(),
            Value::Array(
                a.warnings
                    .iter()
                    .map(|w| {
                        json!({
                            "kind": w.kind.as_str(),
                            "severity": w.severity.as_str(),
                            "message": w.message,
                            "snippet": w.snippet,
                        })
                    })
                    .collect(),
            ),
        );
        o.insert("warnings_total".into(), a.warnings_total.into());
        o.insert("details".into(), json!(a.details));
        if with_text {
            o.insert("text".into(), a.text.clone().into());
        } else {
            o.insert("text".into(), Value::Null);
        }
        o.insert("text_truncated".into(), a.text_truncated.into());
        o.insert("text_omitted".into(), json!(r.text_omitted));
    }
    Value::Object(o)
}

/// The `.txt` of `text` mode: the escaped text, ending with a newline, at
/// most [`crate::extract::MAX_TEXT_FILE`] bytes.
pub fn text_file(r: &Record) -> String {
    let mut t = r
        .analysis
        .as_ref()
        .map(|a| a.text.clone())
        .unwrap_or_default();
    if !t.is_empty() && !t.ends_with('\n') {
        // Keep the file within the cap, final newline included.
        truncate_bytes(&mut t, crate::extract::MAX_TEXT_FILE - 1);
        t.push('\n');
    }
    t
}

/// Everything the index shows.
#[derive(Debug)]
pub struct IndexData<'a> {
    /// `report` or `text`.
    pub mode: Mode,
    /// Escaped first line of the task file.
    pub task: Option<&'a str>,
    /// Why the task file could not be read.
    pub task_error: Option<&'a str>,
    /// All inputs, in walk order.
    pub records: &'a [Record],
    /// Links and special files not read.
    pub skipped: &'a [crate::walk::Skipped],
    /// False while inputs are still being processed.
    pub complete: bool,
}

impl IndexData<'_> {
    fn count(&self, status: Status) -> u64 {
        self.records.iter().filter(|r| r.status == status).count() as u64
    }
}

/// `index.json`.
pub fn index_json(d: &IndexData<'_>) -> Value {
    let inputs: Vec<Value> = d
        .records
        .iter()
        .map(|r| {
            let a = r.analysis.as_ref();
            let mut kinds: Vec<&str> = a
                .map(|a| a.warnings.iter().map(|w| w.kind.as_str()).collect())
                .unwrap_or_default();
            kinds.sort_unstable();
            kinds.dedup();
            json!({
                "path": r.path,
                "type": a.map(|a| a.doc_type.as_str()),
                "status": r.status.as_str(),
                "error": r.error,
                "size": r.size,
                "sha256": r.sha256,
                "title": a.and_then(|a| a.title.clone()),
                "warnings": a.map_or(0, |a| a.warnings_total),
                "highest_severity": a.and_then(|a| a.warnings.iter().map(|w| w.severity).max()).map(Severity::as_str),
                "warning_kinds": kinds,
                "files": r.files,
            })
        })
        .collect();
    let skipped: Vec<Value> = d
        .skipped
        .iter()
        .map(|s| json!({"path": s.path, "reason": s.reason}))
        .collect();
    json!({
        "version": VERSION,
        "mode": d.mode.as_str(),
        "complete": d.complete,
        "task": d.task,
        "task_error": d.task_error,
        "counts": {
            "inputs": d.records.len(),
            "ok": d.count(Status::Ok),
            "errors": d.count(Status::Error),
            "pending": d.count(Status::Pending),
            "skipped": d.skipped.len(),
        },
        "errors": d.count(Status::Error),
        "inputs": inputs,
        "skipped": skipped,
    })
}

/// `index.md`: one table row per input with its type, status, warnings and
/// a link to its report, then the errors and skipped entries.
pub fn index_markdown(d: &IndexData<'_>) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# golem-worker {}\n", d.mode.as_str());
    if let Some(task) = d.task {
        let _ = writeln!(md, "Task: {}\n", markdown_inline(task));
    }
    if let Some(err) = d.task_error {
        let _ = writeln!(md, "Task: (unreadable: {})\n", markdown_inline(err));
    }
    let pending = d.count(Status::Pending);
    let _ = writeln!(
        md,
        "golem-worker {VERSION}: {}: {} ok, {}{}; {} skipped.{}\n",
        plural(d.records.len() as u64, "input", "inputs"),
        d.count(Status::Ok),
        plural(d.count(Status::Error), "error", "errors"),
        if pending > 0 {
            format!(", {pending} pending")
        } else {
            String::new()
        },
        d.skipped.len(),
        if d.complete {
            ""
        } else {
            " (incomplete: the run did not finish)"
        }
    );
    if d.records.is_empty() {
        let _ = writeln!(md, "No input files.\n");
    } else {
        let _ = writeln!(md, "| Input | Type | Status | Warnings | Report |");
        let _ = writeln!(md, "| --- | --- | --- | --- | --- |");
        for r in d.records {
            let a = r.analysis.as_ref();
            let doc_type = a.map_or("-", |a| a.doc_type.as_str());
            let warnings = match a {
                None => "-".to_string(),
                Some(a) if a.warnings_total == 0 => "0".to_string(),
                Some(a) => {
                    let (total, high) = severity_counts(a);
                    let mut kinds: Vec<&str> = a.warnings.iter().map(|w| w.kind.as_str()).collect();
                    kinds.sort_unstable();
                    kinds.dedup();
                    let high = if high > 0 {
                        format!(", {high} high")
                    } else {
                        String::new()
                    };
                    format!("{total}{high}: {}", kinds.join(", "))
                }
            };
            let link = r
                .files
                .first()
                .map(|f| format!("[{}]({})", markdown_inline(f), link_target(f)))
                .unwrap_or_else(|| "-".to_string());
            let status = match r.status {
                Status::Error => "**error**",
                s => s.as_str(),
            };
            let _ = writeln!(
                md,
                "| {} | {doc_type} | {status} | {} | {link} |",
                markdown_inline(&r.path),
                markdown_inline(&warnings)
            );
        }
        md.push('\n');
    }
    let errors: Vec<&Record> = d
        .records
        .iter()
        .filter(|r| r.status == Status::Error)
        .collect();
    if !errors.is_empty() {
        let _ = writeln!(md, "## Errors\n");
        for r in errors {
            let _ = writeln!(
                md,
                "- {}: {}",
                markdown_inline(&r.path),
                markdown_inline(r.error.as_deref().unwrap_or("error"))
            );
        }
        md.push('\n');
    }
    if !d.skipped.is_empty() {
        let _ = writeln!(md, "## Skipped\n");
        for s in d.skipped {
            let _ = writeln!(
                md,
                "- {}: {}",
                markdown_inline(&s.path),
                markdown_inline(&s.reason)
            );
        }
        md.push('\n');
    }
    md
}

/// The most characters of the task's first line the index shows.
pub const TASK_LINE_CHARS: usize = 300;

/// Escapes a task line for the index: the first line, whitespace collapsed,
/// whole up to [`TASK_LINE_CHARS`] characters; a longer one is cut at the
/// last space before the limit (never mid-word, unless one word fills the
/// whole limit) and ends with `…`.
pub fn task_line(first: &str) -> String {
    let line = first.split_whitespace().collect::<Vec<_>>().join(" ");
    let Some((limit, _)) = line.char_indices().nth(TASK_LINE_CHARS) else {
        return crate::escape::display_chars(&line, TASK_LINE_CHARS, false);
    };
    // `limit` is the byte offset of the first character past the cap; a
    // space there means the cap falls right after a whole word.
    let end = if line[limit..].starts_with(' ') {
        limit
    } else {
        line[..limit].rfind(' ').filter(|&i| i > 0).unwrap_or(limit)
    };
    crate::escape::display_chars(line[..end].trim_end(), TASK_LINE_CHARS, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DocType, Link, Warning, WarningKind};

    #[test]
    fn task_line_keeps_whole_words() {
        assert_eq!(
            task_line("  Summarise   the inputs.  "),
            "Summarise the inputs."
        );
        let words = "alpha beta gamma delta ".repeat(30);
        let line = task_line(&words);
        assert!(line.ends_with('…'), "{line}");
        let kept = line.trim_end_matches('…');
        assert!(kept.chars().count() <= TASK_LINE_CHARS, "{line}");
        assert!(kept.chars().count() > TASK_LINE_CHARS - 10, "{line}");
        assert!(
            words.starts_with(kept) && words[kept.len()..].starts_with(' '),
            "{line}"
        );
        // Exactly at the cap: whole, no mark.
        let exact = "a".repeat(TASK_LINE_CHARS);
        assert_eq!(task_line(&exact), exact);
        // The cap falls right after a word: that word is kept.
        let at_space = format!("{} rest", "b".repeat(TASK_LINE_CHARS));
        assert_eq!(
            task_line(&at_space),
            format!("{}…", "b".repeat(TASK_LINE_CHARS))
        );
        // One endless word has to be cut.
        let one = "c".repeat(TASK_LINE_CHARS + 50);
        assert_eq!(task_line(&one).chars().count(), TASK_LINE_CHARS + 1);
        // Multi-byte characters cut on a boundary, escapes still applied.
        let accents = "é\u{1b} ".repeat(200);
        assert!(task_line(&accents).ends_with('…'));
        assert!(!task_line(&accents).contains('\u{1b}'));
    }

    #[test]
    fn sanitize_escapes_everything() {
        let mut a = Analysis::new(DocType::Html);
        a.title = Some("t\x1b[2J".into());
        a.links.push(Link {
            url: "https://x.test/\u{202e}".into(),
            text: Some("a\nb".into()),
            source: "href".into(),
        });
        a.warnings.push(
            Warning::new(WarningKind::Script, Severity::High, "m\x07").with_snippet("s\u{200b}"),
        );
        a.details.insert("k\x1b".into(), json!({"x": ["\x1b"]}));
        a.text = "line1\n\x1b[31mred\r\n".into();
        let a = sanitize(a, Mode::Report);
        let all = serde_json::to_string(&a).expect("json");
        assert!(!all.contains("\\u001b") && !all.contains('\u{202e}') && !all.contains('\u{200b}'));
        assert_eq!(a.text, "line1\n\\u{1b}[31mred\n");
        assert_eq!(a.links[0].text.as_deref(), Some("a b"));
    }

    #[test]
    fn first_words_cuts_at_word_count() {
        assert_eq!(first_words("a b\nc d", 3, 1000), ("a b\nc", true));
        assert_eq!(first_words("a b", 3, 1000), ("a b", false));
    }
}
