//! JSON and CSV: the text is the file itself; the structure goes into
//! `details`.

use serde_json::{json, Value};

use super::{cap_chars, Extracted};
use crate::model::{Severity, WarningKind};
use crate::warnings::Tally;

/// serde_json's own recursion limit; deeper documents are only scanned.
const SERDE_DEPTH: usize = 127;
/// Top-level keys listed.
const MAX_KEYS: usize = 50;

/// What one iterative pass over JSON text learned (no recursion, so any
/// depth is fine).
#[derive(Debug, Default)]
struct JsonShape {
    max_depth: usize,
    objects: u64,
    arrays: u64,
    strings: u64,
    top_keys: Vec<String>,
    top_keys_total: u64,
}

fn scan_json(text: &str) -> JsonShape {
    let mut shape = JsonShape::default();
    // The open containers: true for an object.
    let mut stack: Vec<bool> = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '{' | '[' => {
                stack.push(c == '{');
                shape.max_depth = shape.max_depth.max(stack.len());
                if c == '{' {
                    shape.objects += 1;
                } else {
                    shape.arrays += 1;
                }
            }
            '}' | ']' => {
                stack.pop();
            }
            '"' => {
                shape.strings += 1;
                let start = i + 1;
                let mut end = text.len();
                let mut escaped = false;
                for (j, d) in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if d == '\\' {
                        escaped = true;
                    } else if d == '"' {
                        end = j;
                        break;
                    }
                }
                if stack.len() == 1 && stack[0] {
                    // A string directly in the top-level object followed by
                    // ':' is a key.
                    let rest = text[end.min(text.len())..].trim_start_matches('"');
                    if rest.trim_start().starts_with(':') {
                        shape.top_keys_total += 1;
                        if shape.top_keys.len() < MAX_KEYS {
                            let raw = &text[start.min(end)..end];
                            let key = serde_json::from_str::<String>(&format!("\"{raw}\""))
                                .unwrap_or_else(|_| raw.to_string());
                            shape.top_keys.push(cap_chars(&key, 100));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    shape
}

/// JSON: validated with serde_json when it is shallow enough, scanned
/// iteratively in any case. Invalid JSON is an error; JSON deeper than
/// serde_json's limit is reported with a `limit` warning, not parsed.
pub fn extract_json(text: &str) -> Extracted {
    let mut ex = Extracted::default();
    ex.text.push_str(text);
    let shape = scan_json(text);
    let top = match text.trim_start().chars().next() {
        Some('{') => "object",
        Some('[') => "array",
        _ => "other",
    };
    ex.details.insert("top_level".into(), top.into());
    ex.details
        .insert("max_depth".into(), shape.max_depth.into());
    ex.details.insert(
        "containers".into(),
        json!({"objects": shape.objects, "arrays": shape.arrays, "strings": shape.strings}),
    );
    if top == "object" {
        ex.details
            .insert("top_level_keys".into(), shape.top_keys.into());
        ex.details
            .insert("top_level_keys_total".into(), shape.top_keys_total.into());
    }
    if shape.max_depth > SERDE_DEPTH {
        ex.warn(
            WarningKind::Limit,
            Severity::Medium,
            format!(
                "JSON nested {} levels deep (over {SERDE_DEPTH}); structure not validated",
                shape.max_depth
            ),
        );
        return ex;
    }
    if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(text) {
        ex.error = Some(format!("invalid JSON: {e}"));
    }
    ex
}

/// CSV: delimiter guessed again as in detection, records and fields counted
/// with the `csv` crate, header shown, and cells a spreadsheet would run as
/// formulas flagged (CSV injection).
pub fn extract_csv(text: &str) -> Extracted {
    let mut ex = Extracted::default();
    ex.text.push_str(text);
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let delim = [b',', b'\t', b';']
        .into_iter()
        .max_by_key(|&d| first.bytes().filter(|&b| b == d).count())
        .unwrap_or(b',');
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delim)
        .has_headers(false)
        .flexible(true)
        .from_reader(text.as_bytes());
    let mut rows = 0u64;
    let mut max_fields = 0usize;
    let mut min_fields = usize::MAX;
    let mut header: Vec<String> = Vec::new();
    let mut tally = Tally::default();
    let mut record = csv::StringRecord::new();
    loop {
        match reader.read_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                ex.warn(
                    WarningKind::Parse,
                    Severity::Low,
                    format!("CSV stops parsing after {rows} records: {e}"),
                );
                break;
            }
        }
        if rows == 0 {
            header = record.iter().take(50).map(|f| cap_chars(f, 100)).collect();
        }
        rows += 1;
        max_fields = max_fields.max(record.len());
        min_fields = min_fields.min(record.len());
        for field in record.iter() {
            let f = field.trim_start();
            let formula = match f.chars().next() {
                Some('=' | '@') => f.len() > 1,
                Some('+' | '-') => f[1..].starts_with(|c: char| c.is_alphabetic()),
                _ => false,
            };
            if formula {
                tally.add(
                    WarningKind::Script,
                    Severity::Medium,
                    "cells a spreadsheet would evaluate as formulas (CSV injection)",
                    f,
                );
            }
        }
    }
    let delimiter = match delim {
        b'\t' => "tab",
        b';' => ";",
        _ => ",",
    };
    ex.details.insert("delimiter".into(), delimiter.into());
    ex.details.insert("rows".into(), rows.into());
    ex.details.insert("columns".into(), max_fields.into());
    if rows > 0 && min_fields != max_fields {
        ex.details.insert("ragged".into(), Value::Bool(true));
    }
    ex.details.insert("header".into(), header.into());
    ex.warnings.extend(tally.into_warnings());
    ex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape_and_keys() {
        let ex = extract_json(r#"{"name": "x", "nested": {"deep": [1, {"a": 2}]}, "k\"q": 1}"#);
        assert_eq!(ex.error, None);
        assert_eq!(ex.details["top_level"], "object");
        assert_eq!(ex.details["max_depth"], 4);
        assert_eq!(
            ex.details["top_level_keys"],
            json!(["name", "nested", "k\"q"])
        );
    }

    #[test]
    fn deep_and_invalid_json() {
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let ex = extract_json(&deep);
        assert_eq!(ex.error, None);
        assert_eq!(ex.details["max_depth"], 10_000);
        assert!(ex.warnings[0].message.contains("10000 levels"));
        let ex = extract_json("{\"a\": ");
        assert!(ex
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("invalid JSON")));
    }

    #[test]
    fn csv_counts_and_formulas() {
        let ex = extract_csv("name;amount\nalice;=HYPERLINK(\"http://x\")\nbob;-3\n");
        assert_eq!(ex.details["delimiter"], ";");
        assert_eq!(ex.details["rows"], 3);
        assert_eq!(ex.details["columns"], 2);
        assert_eq!(ex.details["header"], json!(["name", "amount"]));
        assert_eq!(ex.warnings.len(), 1);
        assert_eq!(ex.warnings[0].kind, WarningKind::Script);
    }

    const GOOD: &str = "a,b\n1,2\n";

    #[test]
    fn ragged_csv_says_so() {
        let text = "id,name,city\n1,Ann,Oslo,extra\n2,Bob\n";
        let a = crate::extract::analyze(
            text.as_bytes().to_vec(),
            text.len() as u64,
            false,
            crate::extract::Mode::Report,
        );
        assert_eq!(a.doc_type, crate::model::DocType::Csv);
        assert_eq!(a.details["ragged"], true);
        assert_eq!(a.details["columns"], 4);
        assert!(!extract_csv(GOOD).details.contains_key("ragged"));
    }
}
