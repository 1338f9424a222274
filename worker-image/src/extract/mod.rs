//! Text and structure extraction, one module per format, and the common
//! analysis that turns an extraction into an [`Analysis`].
//!
//! This code parses hostile bytes. It runs only in the per-input child
//! process (see [`crate::sandbox`]), under memory, CPU and time limits, so a
//! crash, a panic or runaway allocation in any parser here loses one input's
//! analysis, never the others'. Within those limits every extractor also
//! caps what it keeps ([`TextBuf`], list caps) and avoids recursion on
//! document structure, so most hostile inputs still succeed.

pub mod css;
pub mod data;
pub mod docx;
pub mod html;
pub mod markdown;
pub mod pdf;
pub mod pdftext;

use std::collections::{BTreeMap, HashSet};

use crate::detect::{self, Decoded};
use crate::model::{Analysis, DocType, Heading, Link, Severity, Warning, WarningKind};
use crate::textstats::{self, TextBuf};
use crate::warnings;

/// What the worker is producing; decides how much text the child returns and
/// whether warnings and summaries are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Reports (`golem-worker report`).
    Report,
    /// Plain text only (`golem-worker text`).
    Text,
}

impl Mode {
    /// The name used on the command line and in the index.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Report => "report",
            Mode::Text => "text",
        }
    }

    /// Parses the name used on the command line.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "report" => Some(Mode::Report),
            "text" => Some(Mode::Text),
            _ => None,
        }
    }

    /// The most extracted text (bytes, before escaping) an analysis carries
    /// back: enough for the report's excerpt and JSON, or the `.txt` file.
    pub fn text_cap(self) -> usize {
        match self {
            Mode::Report => MAX_REPORT_TEXT,
            Mode::Text => MAX_TEXT_FILE,
        }
    }
}

/// The most of an input the child reads. Larger PDFs and DOCX files are not
/// analysed; larger text files are analysed on their first part.
pub const MAX_READ: usize = 64 * 1024 * 1024;
/// The most extracted text kept for counting and scanning.
pub const MAX_TEXT: usize = 16 * 1024 * 1024;
/// The most hidden text, comments and attribute text kept for scanning.
pub const MAX_SCAN_EXTRA: usize = 4 * 1024 * 1024;
/// Text stored in a report's JSON.
pub const MAX_REPORT_TEXT: usize = 256 * 1024;
/// Text written to a `.txt` file.
pub const MAX_TEXT_FILE: usize = 1024 * 1024;
/// Outline entries kept.
pub const MAX_OUTLINE: usize = 500;
/// Distinct links kept.
pub const MAX_LINKS: usize = 500;
/// Sentences in a summary.
pub const SUMMARY_SENTENCES: usize = 5;

/// What a format extractor learned; [`finish`] turns it into an
/// [`Analysis`].
#[derive(Debug)]
pub struct Extracted {
    /// The document's own title.
    pub title: Option<String>,
    /// Metadata by key.
    pub metadata: BTreeMap<String, String>,
    /// Page count (PDF).
    pub pages: Option<u64>,
    /// Headings in order (capped by [`Extracted::heading`]).
    pub outline: Vec<Heading>,
    /// Headings seen, kept or not.
    pub outline_total: u64,
    /// Links in order (duplicates allowed; [`finish`] deduplicates).
    pub links: Vec<Link>,
    /// Warnings found by the format extractor.
    pub warnings: Vec<Warning>,
    /// Type-specific facts.
    pub details: BTreeMap<String, serde_json::Value>,
    /// The visible text.
    pub text: TextBuf,
    /// Text a reader does not see but an AI would read (hidden text,
    /// comments, alt text, metadata): scanned for prompt injection only.
    pub hidden: TextBuf,
    /// Script code (HTML `<script>`, PDF JavaScript): scanned for prompt
    /// injection too, but apart from `hidden`, because code is not text a
    /// reader was meant not to see, so a match there is not raised to high.
    pub code: TextBuf,
    /// Set when extraction failed part-way; what was gathered is kept.
    pub error: Option<String>,
}

impl Default for Extracted {
    fn default() -> Self {
        Self {
            title: None,
            metadata: BTreeMap::new(),
            pages: None,
            outline: Vec::new(),
            outline_total: 0,
            links: Vec::new(),
            warnings: Vec::new(),
            details: BTreeMap::new(),
            text: TextBuf::with_cap(MAX_TEXT),
            hidden: TextBuf::with_cap(MAX_SCAN_EXTRA),
            code: TextBuf::with_cap(MAX_SCAN_EXTRA),
            error: None,
        }
    }
}

impl Extracted {
    /// Records a heading (kept up to [`MAX_OUTLINE`]).
    pub fn heading(&mut self, level: u8, text: &str) {
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if text.is_empty() {
            return;
        }
        self.outline_total += 1;
        if self.outline.len() < MAX_OUTLINE {
            self.outline.push(Heading {
                level: level.clamp(1, 9),
                text: cap_chars(&text, 300),
            });
        }
    }

    /// Records a link if it is an `http(s):` or `mailto:` URL (links are
    /// capped in [`finish`]; here only a generous bound applies).
    pub fn link(&mut self, url: &str, text: Option<&str>, source: &str) {
        let url = url.trim();
        if !textstats::is_link_url(url) || self.links.len() >= MAX_LINKS * 20 {
            return;
        }
        let text = text
            .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|t| !t.is_empty() && t != url)
            .map(|t| cap_chars(&t, 200));
        self.links.push(Link {
            url: cap_chars(url, textstats::MAX_URL_CHARS),
            text,
            source: source.to_string(),
        });
    }

    /// Records a metadata value (trimmed, capped, empty values dropped).
    pub fn meta(&mut self, key: &str, value: &str) {
        let value = value.split_whitespace().collect::<Vec<_>>().join(" ");
        if !value.is_empty() && self.metadata.len() < 50 {
            self.metadata
                .entry(cap_chars(key, 64))
                .or_insert_with(|| cap_chars(&value, 500));
        }
    }

    /// Records a warning.
    pub fn warn(&mut self, kind: WarningKind, severity: Severity, message: impl Into<String>) {
        self.warnings.push(Warning::new(kind, severity, message));
    }
}

/// At most `max` characters of `s`, with `…` when cut.
pub fn cap_chars(s: &str, max: usize) -> String {
    let mut chars = s.chars();
    let mut out: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

/// Analyses one input: `bytes` is its content (only the first [`MAX_READ`]
/// bytes when `cut`), `size` its full size. Takes the bytes by value so a
/// large text is decoded in place, not copied.
pub fn analyze(bytes: Vec<u8>, size: u64, cut: bool, mode: Mode) -> Analysis {
    let sniffed = detect::sniff(bytes, cut);
    let doc_type = sniffed.doc_type;
    let mut ex = match (doc_type, sniffed.bytes, sniffed.decoded) {
        (DocType::Pdf | DocType::Docx, _, _) if cut => Extracted {
            error: Some(format!(
                "too large to analyse: {size} bytes (the limit for {} is {MAX_READ} bytes)",
                doc_type.as_str()
            )),
            ..Extracted::default()
        },
        (DocType::Pdf, Some(bytes), _) => pdf::extract(&bytes),
        (DocType::Docx, Some(bytes), _) => docx::extract(&bytes),
        (_, _, Some(decoded)) => extract_text_kind(doc_type, decoded),
        _ => {
            let mut ex = Extracted::default();
            if let Some(note) = sniffed.note {
                ex.details.insert("note".into(), note.into());
            }
            ex
        }
    };
    if cut && doc_type != DocType::Pdf && doc_type != DocType::Docx {
        ex.warnings.push(Warning::new(
            WarningKind::Limit,
            Severity::Low,
            format!("only the first {MAX_READ} of {size} bytes were analysed"),
        ));
    }
    finish(doc_type, ex, mode)
}

fn extract_text_kind(doc_type: DocType, decoded: Decoded) -> Extracted {
    let encoding = decoded.encoding;
    let mut ex = match doc_type {
        DocType::Html => html::extract(&decoded.text),
        DocType::Markdown => markdown::extract(&decoded.text),
        DocType::Json => data::extract_json(&decoded.text),
        DocType::Csv => data::extract_csv(&decoded.text),
        _ => {
            let mut ex = Extracted::default();
            ex.text.push_str(&decoded.text);
            ex
        }
    };
    if encoding != "utf-8" {
        ex.details.insert("encoding".into(), encoding.into());
    }
    ex
}

/// Turns an extraction into an analysis: counts, bare URLs, link
/// deduplication, summary, prompt-injection and invisible-character scans,
/// and the text cut to the mode's cap.
pub fn finish(doc_type: DocType, ex: Extracted, mode: Mode) -> Analysis {
    let mut a = Analysis::new(doc_type);
    a.error = ex.error;
    a.title = ex
        .title
        .map(|t| cap_chars(&t, 300))
        .filter(|t| !t.is_empty());
    a.metadata = ex.metadata;
    a.pages = ex.pages;
    a.outline = ex.outline;
    a.outline_total = ex.outline_total;
    a.details = ex.details;
    let text_truncated = ex.text.truncated;
    let hidden = ex.hidden.into_string();
    let code = ex.code.into_string();
    let mut text = ex.text.into_string();
    text.truncate(text.trim_end().len());
    let c = textstats::counts(&text);
    a.words = c.words;
    a.lines = c.lines;
    a.chars = c.chars;
    a.text_bytes = text.len() as u64;
    let mut warnings = ex.warnings;
    if text_truncated {
        warnings.push(Warning::new(
            WarningKind::Limit,
            Severity::Low,
            format!(
                "extracted text longer than {MAX_TEXT} bytes; counts cover the first {MAX_TEXT}"
            ),
        ));
    }

    if mode == Mode::Report {
        let mut links = ex.links;
        for url in textstats::bare_urls(&text) {
            if links.len() >= MAX_LINKS * 20 {
                break;
            }
            links.push(Link {
                url,
                text: None,
                source: "text".into(),
            });
        }
        let mut seen = HashSet::new();
        let mut total = 0u64;
        for link in links {
            if seen.insert(link.url.clone()) {
                total += 1;
                if a.links.len() < MAX_LINKS {
                    a.links.push(link);
                }
            }
        }
        a.links_total = total;

        if !matches!(doc_type, DocType::Json | DocType::Csv) {
            a.summary = textstats::summarize(&text, SUMMARY_SENTENCES);
        }

        let (mut w, tags_text) = warnings::invisible_chars(&text, "text");
        warnings.append(&mut w);
        let (mut w, hidden_tags) = warnings::invisible_chars(&hidden, "hidden text");
        warnings.append(&mut w);
        let mut meta_text = String::new();
        if let Some(t) = &a.title {
            meta_text.push_str(t);
            meta_text.push('\n');
        }
        for v in a.metadata.values() {
            meta_text.push_str(v);
            meta_text.push('\n');
        }
        for h in &a.outline {
            meta_text.push_str(&h.text);
            meta_text.push('\n');
        }
        let (score, mut w) = warnings::prompt_injection(&[
            ("text", &text),
            ("hidden text, comments or attributes", &hidden),
            ("script code", &code),
            ("invisible tag characters", &tags_text),
            ("invisible tag characters", &hidden_tags),
            ("title or metadata", &meta_text),
        ]);
        warnings.append(&mut w);
        if score > 0 {
            a.details
                .insert("prompt_injection_score".into(), score.into());
        }
        let (kept, total) = warnings::finish(warnings);
        a.warnings = kept;
        a.warnings_total = total;
    } else {
        let (kept, total) = warnings::finish(
            warnings
                .into_iter()
                .filter(|w| w.kind == WarningKind::Limit || w.kind == WarningKind::Parse)
                .collect(),
        );
        a.warnings = kept;
        a.warnings_total = total;
    }

    a.text_truncated = crate::escape::truncate_bytes(&mut text, mode.text_cap()) || text_truncated;
    a.text = text;
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_analysis() {
        let text = "Budget report.\n\nThe budget grew. Spending on roads doubled in the budget \
                    year. See https://example.org/budget for the budget tables.\n";
        let a = analyze(
            text.as_bytes().to_vec(),
            text.len() as u64,
            false,
            Mode::Report,
        );
        assert_eq!(a.doc_type, DocType::Text);
        assert_eq!(a.error, None);
        assert_eq!(a.lines, 3);
        assert_eq!(a.links.len(), 1);
        assert_eq!(a.links[0].url, "https://example.org/budget");
        assert!(!a.summary.is_empty());
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    }

    #[test]
    fn big_pdf_is_refused_not_parsed() {
        let a = analyze(b"%PDF-1.4\n".to_vec(), 1 << 40, true, Mode::Report);
        assert_eq!(a.doc_type, DocType::Pdf);
        assert!(a.error.as_deref().is_some_and(|e| e.contains("too large")));
    }

    #[test]
    fn text_mode_caps_text() {
        let text = "word ".repeat(MAX_TEXT_FILE);
        let a = analyze(
            text.into_bytes(),
            5 * MAX_TEXT_FILE as u64,
            false,
            Mode::Text,
        );
        assert!(a.text_truncated);
        assert_eq!(a.text.len(), MAX_TEXT_FILE);
        assert_eq!(a.words, MAX_TEXT_FILE as u64);
        assert!(a.summary.is_empty());
    }
}
