//! PDF with lopdf: Info dictionary, page count, outline (bookmarks), text
//! per page, link annotations, and the active or hidden content a reviewer
//! must know about (JavaScript, OpenAction, additional actions, Launch,
//! embedded files, and text a reader does not see: see [`super::pdftext`]).
//!
//! lopdf parses object streams and decodes `#xx` escapes in names, so the
//! warnings come from a walk over every parsed object rather than from a
//! byte search that compression or escaping would defeat. Only when the file
//! cannot be parsed at all does a raw scan of the bytes report what names it
//! contains.

use std::collections::{BTreeMap, HashSet};

use lopdf::{decode_text_string, Dictionary, Document, Object, ObjectId};

use super::pdftext::{self, Hidden};
use super::{cap_chars, Extracted};
use crate::escape::display_chars;
use crate::model::{Severity, WarningKind};
use crate::warnings::Tally;

/// Pages whose text is extracted; the page count covers all of them.
pub const MAX_PAGES: usize = 2000;
/// Content operations interpreted over the whole document; the pages
/// after the one that crosses it are counted but not read.
pub const MAX_DOC_OPS: usize = 20_000_000;
/// Objects visited by the warning walk.
const MAX_VISITS: usize = 2_000_000;
/// Outline items visited.
const MAX_OUTLINE_VISITS: usize = 10_000;

const INFO_KEYS: &[(&[u8], &str)] = &[
    (b"Author", "author"),
    (b"Subject", "subject"),
    (b"Keywords", "keywords"),
    (b"Creator", "creator"),
    (b"Producer", "producer"),
    (b"CreationDate", "created"),
    (b"ModDate", "modified"),
];

fn deref<'a>(doc: &'a Document, obj: &'a Object) -> Option<&'a Object> {
    doc.dereference(obj).ok().map(|(_, o)| o)
}

fn dict_of<'a>(doc: &'a Document, obj: &'a Object) -> Option<&'a Dictionary> {
    match deref(doc, obj)? {
        Object::Dictionary(d) => Some(d),
        Object::Stream(s) => Some(&s.dict),
        _ => None,
    }
}

fn text_of(doc: &Document, obj: &Object) -> Option<String> {
    let obj = deref(doc, obj)?;
    match decode_text_string(obj) {
        Ok(s) => Some(s),
        Err(_) => obj
            .as_str()
            .ok()
            .map(|b| String::from_utf8_lossy(b).into_owned()),
    }
}

fn name_of<'a>(doc: &'a Document, obj: &'a Object) -> Option<&'a [u8]> {
    deref(doc, obj)?.as_name().ok()
}

/// Extracts a PDF document.
pub fn extract(bytes: &[u8]) -> Extracted {
    let mut ex = Extracted::default();
    let doc = match Document::load_mem(bytes) {
        Ok(doc) => doc,
        Err(e) => {
            raw_scan(bytes, &mut ex);
            ex.error = Some(format!("cannot parse PDF: {e}"));
            return ex;
        }
    };
    ex.details
        .insert("pdf_version".into(), cap_chars(&doc.version, 20).into());
    if doc.was_encrypted() || doc.is_encrypted() {
        ex.details.insert("encrypted".into(), true.into());
    }
    if doc.is_encrypted() {
        ex.warn(
            WarningKind::Parse,
            Severity::Medium,
            "encrypted with a password; text and structure could not be read",
        );
    }
    info(&doc, &mut ex);
    outline(&doc, &mut ex);
    let mut tally = Tally::default();
    let pages = doc.get_pages();
    ex.pages = Some(pages.len() as u64);
    let (failed_pages, cut_pages) = pages_text(&doc, &pages, &mut ex, &mut tally, MAX_DOC_OPS);
    if pages.len() > MAX_PAGES {
        ex.warn(
            WarningKind::Limit,
            Severity::Low,
            format!(
                "{} pages; text taken from the first {MAX_PAGES}",
                pages.len()
            ),
        );
    }
    if !cut_pages.is_empty() {
        ex.warn(
            WarningKind::Limit,
            Severity::Low,
            format!(
                "page(s) {} have more than {} content operations; text and hidden-text checks stop there",
                list(&cut_pages),
                pdftext::MAX_OPS
            ),
        );
    }
    if !failed_pages.is_empty() {
        let shown: Vec<String> = failed_pages
            .iter()
            .take(5)
            .map(|p| cap_chars(p, 120))
            .collect();
        ex.warn(
            WarningKind::Parse,
            Severity::Low,
            format!(
                "text could not be extracted from {} page(s): {}",
                failed_pages.len(),
                shown.join("; ")
            ),
        );
    }
    walk_objects(&doc, &mut ex, &mut tally);
    ex.warnings.extend(tally.into_warnings());
    if ex.title.is_none() {
        ex.title = ex.outline.first().map(|h| h.text.clone());
    }
    ex
}

/// Hidden text quoted in the warning.
const HIDDEN_SAMPLE_CHARS: usize = 400;

/// Text a reader does not see, gathered over the pages for one warning.
#[derive(Default)]
struct HiddenText {
    chars: u64,
    reasons: BTreeMap<Hidden, u64>,
    pages: Vec<String>,
    sample: String,
}

impl HiddenText {
    /// Counts a page's hidden strings, quotes the first ones, and hands
    /// them all to the prompt-injection scan as hidden text.
    fn add(&mut self, page: u32, pieces: &[(Hidden, String)], ex: &mut Extracted) {
        if pieces.is_empty() {
            return;
        }
        self.pages.push(page.to_string());
        for (reason, text) in pieces {
            *self.reasons.entry(*reason).or_insert(0) += 1;
            let trimmed = text.trim();
            self.chars += trimmed.chars().count() as u64;
            ex.hidden.push_collapsed(trimmed);
            ex.hidden.push_collapsed(" ");
            if self.sample.chars().count() < HIDDEN_SAMPLE_CHARS {
                if !self.sample.is_empty() {
                    self.sample.push(' ');
                }
                self.sample
                    .push_str(&cap_chars(trimmed, HIDDEN_SAMPLE_CHARS));
            }
        }
        ex.hidden.push('\n');
    }

    fn warn(self, ex: &mut Extracted) {
        if self.chars == 0 {
            return;
        }
        let reasons: Vec<String> = self
            .reasons
            .iter()
            .map(|(r, n)| format!("{} ×{n}", r.as_str()))
            .collect();
        ex.warnings.push(
            crate::model::Warning::new(
                WarningKind::HiddenText,
                Severity::Medium,
                format!(
                    "{} characters of text a reader does not see ({}) on page(s) {}; it is included in the extracted text",
                    self.chars,
                    reasons.join(", "),
                    list(&self.pages)
                ),
            )
            .with_snippet(display_chars(&self.sample, HIDDEN_SAMPLE_CHARS, false)),
        );
    }
}

/// The first 20 items of a list, comma-separated, with "…" past them.
fn list(items: &[String]) -> String {
    let mut s = items
        .iter()
        .take(20)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > 20 {
        s.push_str(", …");
    }
    s
}

/// Reads every page's text (up to [`MAX_PAGES`] pages and `max_ops`
/// content operations in all) and annotations, warns
/// about hidden text, and returns the pages whose text failed and the
/// pages cut at the operation cap.
fn pages_text(
    doc: &Document,
    pages: &BTreeMap<u32, ObjectId>,
    ex: &mut Extracted,
    tally: &mut Tally,
    max_ops: usize,
) -> (Vec<String>, Vec<String>) {
    let mut failed_pages = Vec::new();
    let mut hidden = HiddenText::default();
    let mut cut_pages = Vec::new();
    let mut glyphs = pdftext::GlyphCache::default();
    let mut ops = 0usize;
    for (&number, &page_id) in pages.iter().take(MAX_PAGES) {
        if ops >= max_ops {
            ex.warn(
                WarningKind::Limit,
                Severity::Low,
                format!(
                    "more than {max_ops} content operations; text taken from the first {} pages",
                    number - 1
                ),
            );
            break;
        }
        match pdftext::page_text(doc, page_id, &mut glyphs) {
            Ok(page) => {
                ops += page.ops;
                ex.text.push_str(page.text.trim_end());
                ex.text.push_str("\n\n");
                hidden.add(number, &page.hidden, ex);
                if page.ops_cut {
                    cut_pages.push(number.to_string());
                }
            }
            Err(e) => failed_pages.push(format!("{number} ({e})")),
        }
        annotations(doc, page_id, ex, tally);
    }
    hidden.warn(ex);
    (failed_pages, cut_pages)
}

fn info(doc: &Document, ex: &mut Extracted) {
    let Some(info) = doc.trailer.get(b"Info").ok().and_then(|o| dict_of(doc, o)) else {
        return;
    };
    if let Some(title) = info.get(b"Title").ok().and_then(|o| text_of(doc, o)) {
        let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
        if !title.is_empty() {
            ex.title = Some(title);
        }
    }
    for (key, name) in INFO_KEYS {
        if let Some(value) = info.get(key).ok().and_then(|o| text_of(doc, o)) {
            let value = match *name {
                "created" | "modified" => pdf_date(&value).unwrap_or(value),
                _ => value,
            };
            ex.meta(name, &value);
        }
    }
}

/// Takes `n` ASCII digits from the front of `s` as a number.
fn digits(s: &mut &str, n: usize) -> Option<u32> {
    let head = s.get(..n)?;
    if !head.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    *s = &s[n..];
    head.parse().ok()
}

/// A PDF date (`D:YYYYMMDDHHmmSSOHH'mm'`, every part after the year
/// optional) as RFC 3339 when it is complete (`2022-05-20T20:13:56+02:00`),
/// else as what it says (`2022`, `2022-05`, `2022-05-20`, a time without a
/// zone). None when it does not parse, so the raw value is kept.
pub fn pdf_date(raw: &str) -> Option<String> {
    let mut s = raw.trim();
    s = s.strip_prefix("D:").unwrap_or(s);
    let year = digits(&mut s, 4)?;
    let mut out = format!("{year:04}");
    let Some(month) = digits(&mut s, 2) else {
        return s.is_empty().then_some(out);
    };
    if !(1..=12).contains(&month) {
        return None;
    }
    out.push_str(&format!("-{month:02}"));
    let Some(day) = digits(&mut s, 2) else {
        return s.is_empty().then_some(out);
    };
    if !(1..=31).contains(&day) {
        return None;
    }
    out.push_str(&format!("-{day:02}"));
    let Some(hour) = digits(&mut s, 2) else {
        return s.is_empty().then_some(out);
    };
    let minute = digits(&mut s, 2).unwrap_or(0);
    let second = digits(&mut s, 2).unwrap_or(0);
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    out.push_str(&format!("T{hour:02}:{minute:02}:{second:02}"));
    let zone = s.trim_end_matches('\'');
    match zone.chars().next() {
        None => {}
        Some('Z') if zone[1..].trim_start_matches(['0', '\'']).is_empty() => out.push('Z'),
        Some(sign @ ('+' | '-')) => {
            let mut z = &zone[1..];
            let zh = digits(&mut z, 2)?;
            z = z.strip_prefix('\'').unwrap_or(z);
            let zm = if z.is_empty() { 0 } else { digits(&mut z, 2)? };
            if !z.is_empty() || zh > 23 || zm > 59 {
                return None;
            }
            out.push_str(&format!("{sign}{zh:02}:{zm:02}"));
        }
        _ => return None,
    }
    Some(out)
}

/// Walks the outline (bookmarks) iteratively: `First` is a child, `Next` a
/// sibling. Cycles are cut by remembering visited items.
fn outline(doc: &Document, ex: &mut Extracted) {
    let Some(root) = doc
        .catalog()
        .ok()
        .and_then(|c| c.get(b"Outlines").ok())
        .and_then(|o| dict_of(doc, o))
    else {
        return;
    };
    let mut stack: Vec<(&Object, u8)> = Vec::new();
    if let Ok(first) = root.get(b"First") {
        stack.push((first, 1));
    }
    let mut seen: HashSet<ObjectId> = HashSet::new();
    let mut visits = 0;
    while let Some((obj, level)) = stack.pop() {
        visits += 1;
        if visits > MAX_OUTLINE_VISITS {
            break;
        }
        if let Ok(id) = obj.as_reference() {
            if !seen.insert(id) {
                continue;
            }
        }
        let Some(item) = dict_of(doc, obj) else {
            continue;
        };
        if let Some(title) = item.get(b"Title").ok().and_then(|o| text_of(doc, o)) {
            ex.heading(level, &title);
        }
        if let Some(uri) = item
            .get(b"A")
            .ok()
            .and_then(|a| dict_of(doc, a))
            .and_then(|a| a.get(b"URI").ok())
            .and_then(|u| text_of(doc, u))
        {
            ex.link(&uri, None, "outline");
        }
        if let Ok(next) = item.get(b"Next") {
            stack.push((next, level));
        }
        if let Ok(first) = item.get(b"First") {
            stack.push((first, level.saturating_add(1)));
        }
    }
}

fn annotations(doc: &Document, page_id: ObjectId, ex: &mut Extracted, tally: &mut Tally) {
    let Some(page) = doc.get_dictionary(page_id).ok() else {
        return;
    };
    let Some(annots) = page
        .get(b"Annots")
        .ok()
        .and_then(|a| deref(doc, a))
        .and_then(|a| a.as_array().ok())
    else {
        return;
    };
    for annot in annots.iter().take(10_000) {
        let Some(annot) = dict_of(doc, annot) else {
            continue;
        };
        let subtype = annot
            .get(b"Subtype")
            .ok()
            .and_then(|s| name_of(doc, s))
            .unwrap_or(b"");
        if subtype == b"FileAttachment" {
            let name = annot
                .get(b"FS")
                .ok()
                .and_then(|f| dict_of(doc, f))
                .and_then(|f| f.get(b"UF").or_else(|_| f.get(b"F")).ok())
                .and_then(|n| text_of(doc, n))
                .unwrap_or_default();
            tally.add(
                WarningKind::EmbeddedFile,
                Severity::High,
                "file attachment annotations",
                &name,
            );
        }
        let Some(action) = annot.get(b"A").ok().and_then(|a| dict_of(doc, a)) else {
            continue;
        };
        if action.get(b"S").ok().and_then(|s| name_of(doc, s)) == Some(b"URI") {
            if let Some(uri) = action.get(b"URI").ok().and_then(|u| text_of(doc, u)) {
                let contents = annot.get(b"Contents").ok().and_then(|c| text_of(doc, c));
                ex.link(&uri, contents.as_deref(), "annotation");
            }
        }
    }
}

/// Visits every object (iteratively, bounded) and tallies the keys and
/// action types that make a PDF active or carry other files.
fn walk_objects(doc: &Document, ex: &mut Extracted, tally: &mut Tally) {
    let mut stack: Vec<&Object> = doc.objects.values().collect();
    let mut visits = 0usize;
    while let Some(obj) = stack.pop() {
        visits += 1;
        if visits > MAX_VISITS {
            ex.warn(
                WarningKind::Limit,
                Severity::Low,
                format!(
                    "more than {MAX_VISITS} PDF objects; the scan for active content stopped there"
                ),
            );
            break;
        }
        let dict = match obj {
            Object::Dictionary(d) => d,
            Object::Stream(s) => &s.dict,
            Object::Array(a) => {
                stack.extend(a.iter());
                continue;
            }
            _ => continue,
        };
        for (key, value) in dict.iter() {
            match key.as_slice() {
                b"JS" | b"JavaScript" => {
                    let code = text_of(doc, value)
                        .or_else(|| {
                            deref(doc, value)
                                .and_then(|v| v.as_stream().ok())
                                .and_then(|s| s.decompressed_content().ok())
                                .map(|c| String::from_utf8_lossy(&c).into_owned())
                        })
                        .unwrap_or_default();
                    if !code.is_empty() {
                        ex.code.push_str(&code);
                        ex.code.push('\n');
                    }
                    tally.add(
                        WarningKind::Script,
                        Severity::High,
                        "JavaScript (/JS, /JavaScript)",
                        &cap_chars(&code, 120),
                    );
                }
                b"OpenAction" => {
                    let kind = dict_of(doc, value)
                        .and_then(|a| a.get(b"S").ok())
                        .and_then(|s| name_of(doc, s))
                        .map(|s| String::from_utf8_lossy(s).into_owned());
                    match kind.as_deref() {
                        Some(
                            "JavaScript" | "Launch" | "SubmitForm" | "ImportData" | "URI" | "GoToR"
                            | "GoToE",
                        ) => tally.add(
                            WarningKind::Script,
                            Severity::High,
                            "action run when the document opens (/OpenAction)",
                            &format!("/S /{}", kind.unwrap_or_default()),
                        ),
                        other => tally.add(
                            WarningKind::Script,
                            Severity::Low,
                            "action run when the document opens (/OpenAction)",
                            &other
                                .map(|k| format!("/S /{k}"))
                                .unwrap_or_else(|| "go to a page".into()),
                        ),
                    }
                }
                b"AA" => tally.add(
                    WarningKind::Script,
                    Severity::Medium,
                    "actions triggered by events (/AA)",
                    "",
                ),
                b"EmbeddedFiles" => tally.add(
                    WarningKind::EmbeddedFile,
                    Severity::High,
                    "embedded files (/EmbeddedFiles)",
                    "",
                ),
                b"RichMedia" | b"RichMediaContent" => tally.add(
                    WarningKind::EmbeddedFile,
                    Severity::High,
                    "rich media (/RichMedia)",
                    "",
                ),
                b"XFA" => tally.add(
                    WarningKind::Script,
                    Severity::Medium,
                    "XFA form (can carry scripts)",
                    "",
                ),
                b"Type" if name_of(doc, value) == Some(b"EmbeddedFile") => tally.add(
                    WarningKind::EmbeddedFile,
                    Severity::High,
                    "embedded file streams (/Type /EmbeddedFile)",
                    "",
                ),
                b"S" => match name_of(doc, value) {
                    Some(b"Launch") => tally.add(
                        WarningKind::Script,
                        Severity::High,
                        "Launch actions (start programs or open files)",
                        "",
                    ),
                    Some(s @ (b"SubmitForm" | b"ImportData" | b"GoToR" | b"GoToE")) => tally.add(
                        WarningKind::ExternalResource,
                        Severity::Medium,
                        "actions that reach other files or servers",
                        &format!("/S /{}", String::from_utf8_lossy(s)),
                    ),
                    _ => {}
                },
                _ => {}
            }
            match value {
                Object::Dictionary(_) | Object::Array(_) | Object::Stream(_) => stack.push(value),
                _ => {}
            }
        }
    }
}

/// Names that make a PDF active or carry files, looked for in the raw bytes
/// when the file cannot be parsed (with `#xx` escapes decoded).
const RAW_NAMES: &[(&str, WarningKind, Severity)] = &[
    ("JavaScript", WarningKind::Script, Severity::High),
    ("JS", WarningKind::Script, Severity::High),
    ("OpenAction", WarningKind::Script, Severity::Medium),
    ("AA", WarningKind::Script, Severity::Medium),
    ("Launch", WarningKind::Script, Severity::High),
    ("EmbeddedFiles", WarningKind::EmbeddedFile, Severity::High),
    ("EmbeddedFile", WarningKind::EmbeddedFile, Severity::High),
    ("FileAttachment", WarningKind::EmbeddedFile, Severity::High),
    ("RichMedia", WarningKind::EmbeddedFile, Severity::High),
    (
        "SubmitForm",
        WarningKind::ExternalResource,
        Severity::Medium,
    ),
    ("URI", WarningKind::ExternalResource, Severity::Low),
];

fn is_delimiter(b: u8) -> bool {
    b.is_ascii_whitespace() || b"()<>[]{}/%".contains(&b) || b == 0
}

/// Reports the interesting names found in unparseable bytes.
fn raw_scan(bytes: &[u8], ex: &mut Extracted) {
    let mut found: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'/' {
            i += 1;
            continue;
        }
        let mut name = Vec::new();
        let mut j = i + 1;
        while j < bytes.len() && !is_delimiter(bytes[j]) && name.len() < 64 {
            if bytes[j] == b'#' && j + 2 < bytes.len() {
                if let Ok(v) =
                    u8::from_str_radix(&String::from_utf8_lossy(&bytes[j + 1..j + 3]), 16)
                {
                    name.push(v);
                    j += 3;
                    continue;
                }
            }
            name.push(bytes[j]);
            j += 1;
        }
        if let Some((n, _, _)) = RAW_NAMES
            .iter()
            .find(|(n, _, _)| n.as_bytes() == name.as_slice())
        {
            if !found.contains(n) {
                found.push(n);
            }
        }
        i = j.max(i + 1);
    }
    for (name, kind, severity) in RAW_NAMES {
        if found.contains(name) {
            ex.warn(
                *kind,
                *severity,
                format!("/{name} found by a raw scan (the PDF could not be parsed)"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_scan_decodes_name_escapes() {
        let mut ex = Extracted::default();
        raw_scan(b"junk /J#61vaScript (x) /OpenAction<< /Type", &mut ex);
        let msgs: Vec<&str> = ex.warnings.iter().map(|w| w.message.as_str()).collect();
        assert_eq!(msgs.len(), 2, "{msgs:?}");
        assert!(msgs[0].starts_with("/JavaScript"));
        assert!(msgs[1].starts_with("/OpenAction"));
    }

    fn hidden_warnings(ex: &Extracted) -> Vec<&crate::model::Warning> {
        ex.warnings
            .iter()
            .filter(|w| w.kind == WarningKind::HiddenText)
            .collect()
    }

    #[test]
    fn each_hiding_trick_is_flagged_quoted_and_scanned_as_hidden() {
        for (name, content) in golem_test_corpus::HIDDEN_PDF_TRICKS {
            let ex = extract(&golem_test_corpus::pdf_with_content(content));
            let hidden = hidden_warnings(&ex);
            assert_eq!(hidden.len(), 1, "{name}: {:?}", ex.warnings);
            let w = hidden[0];
            assert_eq!(w.severity, Severity::Medium, "{name}");
            let quote = format!("praise the {name} trick");
            assert!(
                w.snippet.as_deref().is_some_and(|s| s.contains(&quote)),
                "{name}: {w:?}"
            );
            assert!(w.message.contains("on page(s) 1"), "{name}: {w:?}");
            let reason = match *name {
                "mode3" => Hidden::Invisible,
                "tiny" => Hidden::Tiny,
                "outside" => Hidden::Outside,
                _ => Hidden::White,
            };
            assert!(w.message.contains(reason.as_str()), "{name}: {w:?}");
            assert!(ex.hidden.as_str().contains(&quote), "{name}");
            assert!(!ex.hidden.as_str().contains("Visible"), "{name}");
            assert!(ex.text.as_str().contains("Visible words."), "{name}");
        }
    }

    #[test]
    fn ordinary_text_is_not_hidden() {
        // Black after white (Q restores), a normal size under a scaling
        // matrix, text near the page's edges but on it.
        let content = "q 1 g Q BT /F1 12 Tf 72 700 Td (Black after restore.) Tj ET\n\
                       q 0.5 0 0 0.5 0 0 cm BT /F1 1 Tf 20 0 0 20 100 100 Tm (Scaled to ten points.) Tj ET Q\n\
                       1 1 1 rg 0 g BT /F1 12 Tf 5 790 Td (Top left corner.) Tj ET\n\
                       /DeviceRGB cs 1 1 1 scn /DeviceGray cs BT /F1 12 Tf 72 5 Td (Bottom line.) Tj ET\n\
                       BT /F1 12 Tf -40 400 Td (Starts left of the page edge.) Tj ET\n";
        let ex = extract(&golem_test_corpus::pdf_with_content(content));
        assert!(hidden_warnings(&ex).is_empty(), "{:?}", ex.warnings);
        assert!(ex.hidden.as_str().is_empty());
        assert!(ex.text.as_str().contains("Scaled to ten points."));
    }

    #[test]
    fn text_in_form_xobjects_is_read_and_checked() {
        let pdf = golem_test_corpus::pdf_with_forms(
            "BT /F1 12 Tf 72 700 Td (Page words.) Tj ET\n\
             q /Fm1 Do Q q 1 0 0 1 0 -100 cm /Fm2 Do Q /Fm3 Do\n",
            &[
                // No resources: the page's fonts; white fill inside.
                ("", "1 g BT /F1 12 Tf 72 600 Td (Hidden in a form.) Tj ET"),
                // Own resources, scaled up: visible.
                (
                    "/Matrix [2 0 0 2 0 0] /Resources << /Font << /G1 5 0 R >> >>",
                    "BT /G1 6 Tf 36 300 Td (Scaled form words.) Tj ET",
                ),
                // Scaled down to a tenth: tiny.
                (
                    "/Matrix [0.1 0 0 0.1 0 0]",
                    "BT /F1 12 Tf 720 7000 Td (Shrunk form words.) Tj ET",
                ),
            ],
        );
        let ex = extract(&pdf);
        let text = ex.text.as_str();
        for words in [
            "Page words.",
            "Hidden in a form.",
            "Scaled form words.",
            "Shrunk form words.",
        ] {
            assert!(text.contains(words), "{words}: {text}");
        }
        let hidden = hidden_warnings(&ex);
        assert_eq!(hidden.len(), 1, "{:?}", ex.warnings);
        let w = hidden[0];
        assert!(w.message.contains(Hidden::White.as_str()), "{w:?}");
        assert!(w.message.contains(Hidden::Tiny.as_str()), "{w:?}");
        let hidden_text = ex.hidden.as_str();
        assert!(
            hidden_text.contains("Hidden in a form.") && hidden_text.contains("Shrunk form words.")
        );
        assert!(!hidden_text.contains("Scaled") && !hidden_text.contains("Page words"));
    }

    #[test]
    fn a_form_drawing_itself_stops_at_the_depth_limit() {
        let pdf = golem_test_corpus::pdf_with_forms(
            "/Fm1 Do\n",
            &[("", "/Fm1 Do /Fm1 Do BT /F1 12 Tf 72 600 Td (Loop.) Tj ET")],
        );
        let ex = extract(&pdf);
        // Depth 1 to MAX_FORM_DEPTH, each level drawing two copies.
        let copies = ex.text.as_str().matches("Loop.").count();
        assert_eq!(
            copies,
            (1 << pdftext::MAX_FORM_DEPTH) - 1,
            "{:?}",
            ex.warnings
        );
    }

    #[test]
    fn the_document_wide_operation_cap_stops_reading_pages() {
        let page = |content: usize| {
            format!("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 600 800] /Resources << /Font << /F1 6 0 R >> >> /Contents {content} 0 R >>")
        };
        let body = "BT /F1 12 Tf 72 700 Td (Same words.) Tj ET";
        let objects = vec![
            "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
            "<< /Type /Pages /Kids [3 0 R 4 0 R 5 0 R] /Count 3 >>".to_string(),
            page(7),
            page(7),
            page(7),
            "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_string(),
            format!("<< /Length {} >>\nstream\n{body}\nendstream", body.len()),
        ];
        let doc = Document::load_mem(&golem_test_corpus::pdf_from_objects(&objects, 1, None))
            .expect("pdf");
        let mut ex = Extracted::default();
        let mut tally = Tally::default();
        // Five operations a page: the cap is crossed on page 2.
        pages_text(&doc, &doc.get_pages(), &mut ex, &mut tally, 6);
        assert_eq!(ex.text.as_str().matches("Same words.").count(), 2);
        assert!(
            ex.warnings
                .iter()
                .any(|w| w.kind == WarningKind::Limit && w.message.contains("first 2 pages")),
            "{:?}",
            ex.warnings
        );
        let mut ex = Extracted::default();
        pages_text(&doc, &doc.get_pages(), &mut ex, &mut tally, MAX_DOC_OPS);
        assert_eq!(ex.text.as_str().matches("Same words.").count(), 3);
        assert!(ex.warnings.is_empty(), "{:?}", ex.warnings);
    }

    #[test]
    fn ligatures_become_letters() {
        let ex = extract(&golem_test_corpus::ligature_pdf());
        assert_eq!(
            ex.text.as_str().trim(),
            "coefficients differ; the first flow; final words",
            "{:?}",
            ex.warnings
        );
    }

    #[test]
    fn pdf_dates_become_rfc_3339_or_what_they_say() {
        for (raw, want) in [
            ("D:20220520201356+02'00'", Some("2022-05-20T20:13:56+02:00")),
            ("D:20220520201356+02'00", Some("2022-05-20T20:13:56+02:00")),
            ("D:20250208122313Z", Some("2025-02-08T12:23:13Z")),
            ("D:20250208122313Z00'00'", Some("2025-02-08T12:23:13Z")),
            ("D:19991231235959-05'30'", Some("1999-12-31T23:59:59-05:30")),
            ("D:20220520201356", Some("2022-05-20T20:13:56")),
            ("D:2022052020", Some("2022-05-20T20:00:00")),
            ("D:2022", Some("2022")),
            ("D:202205", Some("2022-05")),
            ("20220520", Some("2022-05-20")),
            ("D:20221320", None),
            ("D:2022052", None),
            ("D:20220520201356+2'00'", None),
            ("last Tuesday", None),
            ("", None),
        ] {
            assert_eq!(pdf_date(raw).as_deref(), want, "{raw}");
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let ex = extract(b"%PDF-1.4\n1 0 obj << /Type /Catalog");
        assert!(ex.error.is_some());
    }
}
