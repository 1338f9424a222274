//! DOCX: a zip of XML parts. Text, headings and hyperlinks come from
//! `word/document.xml`, title and author from `docProps/core.xml`, and the
//! warnings from the part names (macros, embedded objects) and the
//! relationships (external targets such as remote templates and images).
//!
//! A zip is a compression bomb waiting to happen: the number of entries is
//! capped, every part is read through `Read::take` (the sizes in the zip
//! headers are hostile and never trusted), and the total decompressed bytes
//! are capped too. XML is read with quick-xml's streaming reader (no tree,
//! no recursion, no DTD entity expansion).

use std::collections::HashMap;
use std::io::{Cursor, Read};

use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

use super::{cap_chars, Extracted};
use crate::escape::display_chars;
use crate::model::{Severity, Warning, WarningKind};
use crate::warnings::Tally;

/// Entries a DOCX may have.
pub const MAX_ENTRIES: usize = 10_000;
/// Decompressed bytes read of one part.
pub const MAX_PART: u64 = 32 * 1024 * 1024;
/// Decompressed bytes read over all parts.
pub const MAX_TOTAL: u64 = 96 * 1024 * 1024;
/// Relationship parts read.
const MAX_RELS_PARTS: usize = 200;

type Archive<'a> = zip::ZipArchive<Cursor<&'a [u8]>>;

/// Reads one part, at most [`MAX_PART`] bytes and what is left of the total
/// budget. `Ok(None)` when the part does not exist; a part cut at the cap
/// gets a `limit` warning, and one that claims a huge expansion a zip-bomb
/// warning.
fn read_part(
    archive: &mut Archive<'_>,
    name: &str,
    budget: &mut u64,
    ex: &mut Extracted,
) -> Result<Option<Vec<u8>>, String> {
    let Some(index) = archive.index_for_name(name) else {
        return Ok(None);
    };
    let mut file = archive
        .by_index(index)
        .map_err(|e| format!("cannot open {name}: {e}"))?;
    let declared = file.size();
    let compressed = file.compressed_size();
    let cap = MAX_PART.min(*budget);
    let mut buf = Vec::new();
    let read = (&mut file).take(cap + 1).read_to_end(&mut buf);
    *budget = budget.saturating_sub(buf.len() as u64);
    if let Err(e) = read {
        return Err(format!("cannot decompress {name}: {e}"));
    }
    if buf.len() as u64 > cap {
        buf.truncate(usize::try_from(cap).unwrap_or(usize::MAX));
        let ratio = declared.checked_div(compressed).unwrap_or(0);
        let severity = if ratio > 100 {
            Severity::High
        } else {
            Severity::Medium
        };
        ex.warnings.push(Warning::new(
            WarningKind::Limit,
            severity,
            format!(
                "{name} decompresses to more than {cap} bytes (declares {declared} from {compressed} compressed{}); only the first {cap} bytes were read",
                if ratio > 100 { ", a likely zip bomb" } else { "" }
            ),
        ));
    }
    Ok(Some(buf))
}

fn attr(e: &BytesStart<'_>, local: &[u8]) -> Option<String> {
    e.attributes().flatten().find_map(|a| {
        (a.key.local_name().as_ref() == local)
            .then(|| a.unescape_value().map(|v| v.into_owned()).ok())
            .flatten()
    })
}

fn entity(name: &str) -> Option<char> {
    match name {
        "amp" => Some('&'),
        "lt" => Some('<'),
        "gt" => Some('>'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        _ => None,
    }
}

/// A relationship: target and whether it is external.
struct Rel {
    kind: String,
    target: String,
    external: bool,
}

fn parse_rels(xml: &[u8]) -> HashMap<String, Rel> {
    let mut rels = HashMap::new();
    let mut reader = Reader::from_reader(xml);
    loop {
        match reader.read_event() {
            Ok(Event::Start(e) | Event::Empty(e)) if e.local_name().as_ref() == b"Relationship" => {
                let id = attr(&e, b"Id").unwrap_or_default();
                let kind = attr(&e, b"Type").unwrap_or_default();
                let kind = kind.rsplit('/').next().unwrap_or("").to_string();
                let target = attr(&e, b"Target").unwrap_or_default();
                let external = attr(&e, b"TargetMode").is_some_and(|m| m == "External");
                if rels.len() < 100_000 {
                    rels.insert(
                        id,
                        Rel {
                            kind,
                            target,
                            external,
                        },
                    );
                }
            }
            Ok(Event::Eof) | Err(_) => break,
            _ => {}
        }
    }
    rels
}

/// Reads the simple text elements of `docProps/core.xml`.
fn core_props(xml: &[u8], ex: &mut Extracted) {
    let mut reader = Reader::from_reader(xml);
    let mut current: Option<&'static str> = None;
    let mut value = String::new();
    loop {
        match reader.read_event() {
            Ok(Event::Start(e)) => {
                current = match e.local_name().as_ref() {
                    b"title" => Some("title"),
                    b"creator" => Some("author"),
                    b"lastModifiedBy" => Some("last_modified_by"),
                    b"created" => Some("created"),
                    b"modified" => Some("modified"),
                    b"subject" => Some("subject"),
                    b"keywords" => Some("keywords"),
                    b"description" => Some("description"),
                    b"category" => Some("category"),
                    _ => None,
                };
                value.clear();
            }
            Ok(Event::Text(t)) if current.is_some() => {
                if let Ok(s) = t.decode() {
                    value.push_str(&cap_chars(&s, 1000));
                }
            }
            Ok(Event::GeneralRef(r)) if current.is_some() => {
                if let Ok(Some(c)) = r.resolve_char_ref() {
                    value.push(c);
                } else if let Some(c) = r.decode().ok().and_then(|n| entity(&n)) {
                    value.push(c);
                }
            }
            Ok(Event::End(_)) => {
                if let Some(key) = current.take() {
                    if key == "title" {
                        let t = value.split_whitespace().collect::<Vec<_>>().join(" ");
                        if !t.is_empty() {
                            ex.title = Some(t);
                        }
                    } else {
                        ex.meta(key, &value);
                    }
                }
            }
            Ok(Event::Eof) => break,
            Err(e) => {
                ex.warn(
                    WarningKind::Parse,
                    Severity::Low,
                    format!("docProps/core.xml: {e}"),
                );
                break;
            }
            _ => {}
        }
    }
}

/// State of the document.xml walk.
#[derive(Default)]
struct Body {
    para: String,
    para_level: Option<u8>,
    in_text: bool,
    in_instr: bool,
    run_hidden: Option<&'static str>,
    run_white: bool,
    in_rpr: bool,
    in_ppr: bool,
    hyperlink: Option<(String, String)>,
    instr: String,
    hidden_chars: u64,
    hidden_sample: String,
    hidden_reasons: HashMap<&'static str, u64>,
    paragraphs: u64,
}

fn heading_level_from_style(style: &str) -> Option<u8> {
    let lower = style.to_ascii_lowercase().replace(' ', "");
    if lower == "title" {
        return Some(1);
    }
    let digits = lower.strip_prefix("heading")?;
    digits.parse::<u8>().ok().filter(|l| (1..=9).contains(l))
}

fn body_text(xml: &[u8], rels: &HashMap<String, Rel>, ex: &mut Extracted) -> Result<u64, String> {
    let mut reader = Reader::from_reader(xml);
    let mut b = Body::default();
    loop {
        let event = match reader.read_event() {
            Ok(e) => e,
            Err(e) => {
                let pos = reader.buffer_position();
                return Err(format!("word/document.xml: XML error at byte {pos}: {e}"));
            }
        };
        match event {
            Event::Start(e) => start_element(&e, false, &mut b, rels, ex),
            Event::Empty(e) => start_element(&e, true, &mut b, rels, ex),
            Event::End(e) => match e.local_name().as_ref() {
                b"p" => {
                    b.paragraphs += 1;
                    if let Some(level) = b.para_level {
                        ex.heading(level, &b.para);
                    }
                    let text = std::mem::take(&mut b.para);
                    ex.text.push_str(text.trim_end());
                    ex.text.push('\n');
                }
                b"rPr" => b.in_rpr = false,
                b"pPr" => b.in_ppr = false,
                b"t" => b.in_text = false,
                b"instrText" => {
                    b.in_instr = false;
                    field_hyperlink(&b.instr, ex);
                    b.instr.clear();
                }
                b"hyperlink" => {
                    if let Some((url, text)) = b.hyperlink.take() {
                        ex.link(&url, Some(&text), "hyperlink");
                    }
                }
                _ => {}
            },
            Event::Text(t) => {
                let Ok(s) = t.decode() else { continue };
                text_piece(&mut b, ex, &s);
            }
            Event::GeneralRef(r) => {
                let c = match r.resolve_char_ref() {
                    Ok(Some(c)) => Some(c),
                    _ => r.decode().ok().and_then(|n| entity(&n)),
                };
                if let Some(c) = c {
                    text_piece(&mut b, ex, c.encode_utf8(&mut [0; 4]));
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if b.hidden_chars > 0 {
        let mut reasons: Vec<String> = b
            .hidden_reasons
            .iter()
            .map(|(r, n)| format!("{r} ×{n}"))
            .collect();
        reasons.sort();
        ex.warnings.push(
            Warning::new(
                WarningKind::HiddenText,
                Severity::Medium,
                format!(
                    "{} characters of text hidden from readers ({})",
                    b.hidden_chars,
                    reasons.join(", ")
                ),
            )
            .with_snippet(display_chars(&b.hidden_sample, 400, false)),
        );
    }
    Ok(b.paragraphs)
}

fn start_element(
    e: &BytesStart<'_>,
    empty: bool,
    b: &mut Body,
    rels: &HashMap<String, Rel>,
    ex: &mut Extracted,
) {
    match e.local_name().as_ref() {
        b"p" => {
            b.para.clear();
            b.para_level = None;
            if empty {
                b.paragraphs += 1;
                ex.text.push('\n');
            }
        }
        b"pStyle" => {
            if let Some(v) = attr(e, b"val") {
                b.para_level = b.para_level.or(heading_level_from_style(&v));
            }
        }
        b"outlineLvl" => {
            if let Some(v) = attr(e, b"val").and_then(|v| v.parse::<u8>().ok()) {
                if v < 9 {
                    b.para_level = Some(v + 1);
                }
            }
        }
        b"r" => {
            b.run_hidden = None;
            b.run_white = false;
        }
        b"rPr" => b.in_rpr = !empty,
        b"pPr" => b.in_ppr = !empty,
        b"vanish" | b"specVanish" if b.in_rpr => {
            let off = attr(e, b"val").is_some_and(|v| v == "0" || v == "false");
            if !off {
                b.run_hidden = Some("w:vanish");
            }
        }
        b"color" if b.in_rpr => {
            b.run_white = attr(e, b"val").is_some_and(|v| v.eq_ignore_ascii_case("FFFFFF"));
        }
        b"sz"
            if b.in_rpr
                && attr(e, b"val")
                    .and_then(|v| v.parse::<u32>().ok())
                    .is_some_and(|half_points| half_points <= 2) =>
        {
            b.run_hidden = Some("font size of 1pt or less");
        }
        b"t" => b.in_text = !empty,
        b"instrText" => b.in_instr = !empty,
        b"tab" if !b.in_rpr && !b.in_ppr => b.para.push('\t'),
        b"br" | b"cr" => b.para.push('\n'),
        b"hyperlink" if !empty => {
            let target = attr(e, b"id")
                .and_then(|id| rels.get(&id))
                .map(|r| r.target.clone())
                .unwrap_or_default();
            b.hyperlink = Some((target, String::new()));
        }
        _ => {}
    }
}

fn text_piece(b: &mut Body, ex: &mut Extracted, s: &str) {
    if b.in_instr {
        if b.instr.len() < 4096 {
            b.instr.push_str(s);
        }
        return;
    }
    if !b.in_text {
        return;
    }
    let hidden = b.run_hidden.or(b.run_white.then_some("white text"));
    if let Some(reason) = hidden {
        *b.hidden_reasons.entry(reason).or_insert(0) += 1;
        b.hidden_chars += s.chars().count() as u64;
        if b.hidden_sample.len() < 400 {
            b.hidden_sample.push_str(&cap_chars(s, 400));
        }
        ex.hidden.push_str(s);
        return;
    }
    if b.para.len() < 1024 * 1024 {
        b.para.push_str(s);
    }
    if let Some((_, text)) = &mut b.hyperlink {
        if text.len() < 1024 {
            text.push_str(s);
        }
    }
}

/// `HYPERLINK "url"` field codes are links too.
fn field_hyperlink(instr: &str, ex: &mut Extracted) {
    let trimmed = instr.trim_start();
    if let Some(rest) = trimmed.strip_prefix("HYPERLINK") {
        let url = rest.trim().trim_start_matches("\\l").trim();
        let url = url.trim_matches('"');
        let url = url.split('"').next().unwrap_or(url);
        ex.link(url, None, "field");
    }
}

/// Extracts a DOCX document.
pub fn extract(bytes: &[u8]) -> Extracted {
    let mut ex = Extracted::default();
    if let Err(e) = extract_into(bytes, &mut ex) {
        ex.error = Some(e);
    }
    ex
}

fn extract_into(bytes: &[u8], ex: &mut Extracted) -> Result<(), String> {
    let mut archive =
        zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| format!("not a readable zip: {e}"))?;
    let entries = archive.len();
    ex.details.insert("zip_entries".into(), entries.into());
    if entries > MAX_ENTRIES {
        return Err(format!(
            "zip has {entries} entries (the limit is {MAX_ENTRIES}); not analysed"
        ));
    }
    let names: Vec<String> = archive.file_names().map(str::to_string).collect();
    let mut tally = Tally::default();
    let mut declared_total: u64 = 0;
    for name in &names {
        let lower = name.to_ascii_lowercase();
        if lower.ends_with("vbaproject.bin") || lower.contains("vbadata") {
            tally.add(WarningKind::Script, Severity::High, "VBA macros", name);
        } else if lower.starts_with("word/embeddings/") {
            tally.add(
                WarningKind::EmbeddedFile,
                Severity::High,
                "embedded files (word/embeddings/)",
                name,
            );
        } else if lower.contains("oleobject") || lower.starts_with("word/activex/") {
            tally.add(
                WarningKind::EmbeddedFile,
                Severity::High,
                "OLE or ActiveX objects",
                name,
            );
        }
        if lower.contains("..") || lower.starts_with('/') {
            tally.add(
                WarningKind::Parse,
                Severity::Medium,
                "zip entry names with path traversal",
                name,
            );
        }
    }
    for i in 0..entries.min(MAX_ENTRIES) {
        if let Ok(f) = archive.by_index_raw(i) {
            declared_total = declared_total.saturating_add(f.size());
        }
    }
    ex.details
        .insert("declared_uncompressed_bytes".into(), declared_total.into());

    let mut budget = MAX_TOTAL;
    // Relationships: every .rels part, for external targets.
    let mut doc_rels = HashMap::new();
    let rels_names: Vec<&String> = names
        .iter()
        .filter(|n| n.ends_with(".rels"))
        .take(MAX_RELS_PARTS)
        .collect();
    for name in rels_names {
        let Some(xml) = read_part(&mut archive, name, &mut budget, ex)? else {
            continue;
        };
        let rels = parse_rels(&xml);
        for rel in rels.values().filter(|r| r.external) {
            let example = format!("{}: {}", rel.kind, cap_chars(&rel.target, 150));
            match rel.kind.as_str() {
                "hyperlink" => {}
                "attachedTemplate" => tally.add(
                    WarningKind::ExternalResource,
                    Severity::High,
                    "remote template (loaded when the document opens)",
                    &example,
                ),
                "oleObject" | "package" | "subDocument" | "frame" => tally.add(
                    WarningKind::ExternalResource,
                    Severity::High,
                    "external objects, frames or sub-documents",
                    &example,
                ),
                _ => tally.add(
                    WarningKind::ExternalResource,
                    Severity::Medium,
                    "external resources (TargetMode=\"External\")",
                    &example,
                ),
            }
        }
        if name == "word/_rels/document.xml.rels" {
            doc_rels = rels;
        }
    }
    if let Some(xml) = read_part(&mut archive, "docProps/core.xml", &mut budget, ex)? {
        core_props(&xml, ex);
    }
    ex.warnings.extend(tally.into_warnings());
    let warnings_before = ex.warnings.len();
    let xml = read_part(&mut archive, "word/document.xml", &mut budget, ex)?
        .ok_or_else(|| "word/document.xml is missing".to_string())?;
    let cut = ex.warnings.len() > warnings_before;
    let parsed = body_text(&xml, &doc_rels, ex);
    if cut {
        // The main part was cut at the cap (a zip bomb, or a monster
        // document): whatever was parsed is kept, but the analysis is not
        // complete, so this input counts as failed.
        return Err(format!(
            "word/document.xml decompresses to more than {MAX_PART} bytes; the document was only partly analysed"
        ));
    }
    let paragraphs = parsed?;
    ex.details.insert("paragraphs".into(), paragraphs.into());
    if ex.title.is_none() {
        ex.title = ex.outline.first().map(|h| h.text.clone());
    }
    Ok(())
}
