//! The data one analysed input yields.
//!
//! The child process (see [`crate::sandbox`]) serialises an [`Analysis`] to
//! JSON on its stdout; the parent deserialises it, treating it as hostile
//! (it was derived from a hostile file by code that may have been confused),
//! escapes and caps every string, and renders the reports from it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The document types the worker recognises from content (never from the
/// file name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DocType {
    /// `%PDF-` header.
    Pdf,
    /// HTML markup (WHATWG-style sniffing of the first tag).
    Html,
    /// Text with Markdown structure (headings, links, fences, lists).
    Markdown,
    /// Any other readable text.
    Text,
    /// Text that parses as JSON (or is JSON too deep to parse).
    Json,
    /// Delimited text with a consistent number of fields per line.
    Csv,
    /// A zip archive holding `word/document.xml`.
    Docx,
    /// Anything else: only size and sha256 are reported.
    Binary,
    /// The analysis failed before the type was known.
    Unknown,
}

impl DocType {
    /// The name used in both report formats.
    pub fn as_str(self) -> &'static str {
        match self {
            DocType::Pdf => "pdf",
            DocType::Html => "html",
            DocType::Markdown => "markdown",
            DocType::Text => "text",
            DocType::Json => "json",
            DocType::Csv => "csv",
            DocType::Docx => "docx",
            DocType::Binary => "binary",
            DocType::Unknown => "unknown",
        }
    }
}

/// How urgently a reviewer should look at a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing (for example a limit was reached).
    Low,
    /// Needs a look (external resources, hidden text).
    Medium,
    /// Likely hostile or active content (scripts, prompt injection).
    High,
}

impl Severity {
    /// The name used in both report formats.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
        }
    }
}

/// What a warning is about; the reviewer's checklist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WarningKind {
    /// Text that reads like instructions to an AI.
    PromptInjection,
    /// Text a reader of the rendered document would not see.
    HiddenText,
    /// Scripts, macros, event handlers, `javascript:` URLs, PDF actions.
    Script,
    /// Embedded files, objects, frames, `data:` URIs.
    EmbeddedFile,
    /// Resources fetched from elsewhere when the document is opened.
    ExternalResource,
    /// A size, depth or count limit was reached; the analysis is partial.
    Limit,
    /// A recoverable parse problem (the analysis may be incomplete).
    Parse,
    /// The file name claims a different type than the content has.
    TypeMismatch,
}

impl WarningKind {
    /// The name used in both report formats.
    pub fn as_str(self) -> &'static str {
        match self {
            WarningKind::PromptInjection => "prompt_injection",
            WarningKind::HiddenText => "hidden_text",
            WarningKind::Script => "script",
            WarningKind::EmbeddedFile => "embedded_file",
            WarningKind::ExternalResource => "external_resource",
            WarningKind::Limit => "limit",
            WarningKind::Parse => "parse",
            WarningKind::TypeMismatch => "type_mismatch",
        }
    }
}

/// One thing a reviewer needs to know about an input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Warning {
    /// What it is about.
    pub kind: WarningKind,
    /// How urgent it is.
    pub severity: Severity,
    /// One line saying what was found and where.
    pub message: String,
    /// The offending text, quoted (cut short), when there is some.
    pub snippet: Option<String>,
}

impl Warning {
    /// A warning without a snippet.
    pub fn new(kind: WarningKind, severity: Severity, message: impl Into<String>) -> Self {
        Self {
            kind,
            severity,
            message: message.into(),
            snippet: None,
        }
    }

    /// Adds the quoted text the warning is about.
    pub fn with_snippet(mut self, snippet: impl Into<String>) -> Self {
        self.snippet = Some(snippet.into());
        self
    }
}

/// A heading of the document's outline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heading {
    /// 1 for a top-level heading.
    pub level: u8,
    /// The heading's text.
    pub text: String,
}

/// A URL the document links to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// The URL (`http:`, `https:` or `mailto:`).
    pub url: String,
    /// The link's visible text, when it has one.
    pub text: Option<String>,
    /// Where it was found: `href`, `markdown`, `annotation`, `hyperlink`,
    /// `field` or `text`.
    pub source: String,
}

/// Everything one input yielded. `error` set means the analysis failed;
/// the other fields then hold whatever was learned before it did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Analysis {
    /// The detected type.
    #[serde(rename = "type")]
    pub doc_type: DocType,
    /// Why the input could not be analysed, if it could not.
    pub error: Option<String>,
    /// The document's own title.
    pub title: Option<String>,
    /// Document metadata (author, producer, description...), by key.
    pub metadata: BTreeMap<String, String>,
    /// Number of pages (PDF only).
    pub pages: Option<u64>,
    /// Headings, in document order.
    pub outline: Vec<Heading>,
    /// Number of outline entries found, including those not kept.
    pub outline_total: u64,
    /// Links, deduplicated by URL, in document order.
    pub links: Vec<Link>,
    /// Number of distinct links found, including those not kept.
    pub links_total: u64,
    /// Up to five sentences that summarise the text, in original order.
    pub summary: Vec<String>,
    /// Warnings for the reviewer, most severe first.
    pub warnings: Vec<Warning>,
    /// Number of warnings found, including those not kept.
    pub warnings_total: u64,
    /// Words in the extracted text (whitespace separated).
    pub words: u64,
    /// Lines in the extracted text.
    pub lines: u64,
    /// Characters in the extracted text.
    pub chars: u64,
    /// Bytes of extracted text (UTF-8), before any cut.
    pub text_bytes: u64,
    /// The extracted text, cut to the mode's cap.
    pub text: String,
    /// Whether `text` was cut.
    pub text_truncated: bool,
    /// Type-specific facts (CSV columns, JSON depth, PDF version...).
    pub details: BTreeMap<String, serde_json::Value>,
}

impl Analysis {
    /// An empty analysis of the given type.
    pub fn new(doc_type: DocType) -> Self {
        Self {
            doc_type,
            error: None,
            title: None,
            metadata: BTreeMap::new(),
            pages: None,
            outline: Vec::new(),
            outline_total: 0,
            links: Vec::new(),
            links_total: 0,
            summary: Vec::new(),
            warnings: Vec::new(),
            warnings_total: 0,
            words: 0,
            lines: 0,
            chars: 0,
            text_bytes: 0,
            text: String::new(),
            text_truncated: false,
            details: BTreeMap::new(),
        }
    }
}
