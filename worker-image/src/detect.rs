//! Content sniffing: decide what an input is from its bytes, never its name.
//!
//! A file named `report.pdf` may be HTML, and a file named `notes.txt` may be
//! a PDF; trusting names would send hostile bytes to the wrong parser and
//! show a reviewer the wrong report. Only the magic numbers and the shape of
//! the text count.

use std::io::Cursor;

use crate::model::DocType;

/// Text decoded from an input, with the encoding that was used.
#[derive(Debug, Clone)]
pub struct Decoded {
    /// The text (never contains NUL).
    pub text: String,
    /// `utf-8`, `utf-16le`, `utf-16be` or `windows-1252`.
    pub encoding: &'static str,
}

/// The result of sniffing: the type, and the content in the form its
/// extractor needs.
#[derive(Debug)]
pub struct Sniffed {
    /// What the input is.
    pub doc_type: DocType,
    /// The decoded text, for every type but PDF, DOCX and binary.
    pub decoded: Option<Decoded>,
    /// The raw bytes, for PDF and DOCX.
    pub bytes: Option<Vec<u8>>,
    /// A short note on why a non-document was classed as binary
    /// (`zip archive`, `not text`).
    pub note: Option<&'static str>,
}

/// Sniffs `bytes` (the whole input, or its first part when `cut` is set).
/// Takes ownership so text can be decoded without a second copy of a large
/// input.
pub fn sniff(bytes: Vec<u8>, cut: bool) -> Sniffed {
    let head = &bytes[..bytes.len().min(1024)];
    if find(head, b"%PDF-").is_some() {
        return Sniffed {
            doc_type: DocType::Pdf,
            decoded: None,
            bytes: Some(bytes),
            note: None,
        };
    }
    if bytes.starts_with(b"PK\x03\x04") || bytes.starts_with(b"PK\x05\x06") {
        if is_docx(&bytes) {
            return Sniffed {
                doc_type: DocType::Docx,
                decoded: None,
                bytes: Some(bytes),
                note: None,
            };
        }
        return Sniffed {
            doc_type: DocType::Binary,
            decoded: None,
            bytes: None,
            note: Some("zip archive"),
        };
    }
    let Some(decoded) = decode_text(bytes, cut) else {
        return Sniffed {
            doc_type: DocType::Binary,
            decoded: None,
            bytes: None,
            note: Some("not text"),
        };
    };
    let doc_type = classify_text(&decoded.text, cut);
    Sniffed {
        doc_type,
        decoded: Some(decoded),
        bytes: None,
        note: None,
    }
}

/// The position of `needle` in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

fn is_docx(bytes: &[u8]) -> bool {
    match zip::ZipArchive::new(Cursor::new(bytes)) {
        Ok(archive) => archive.index_for_name("word/document.xml").is_some(),
        Err(_) => false,
    }
}

/// Windows-1252's printable characters for bytes 0x80..=0x9F (the C1 range
/// in Latin-1); undefined bytes map to U+FFFD.
const CP1252_HIGH: [char; 32] = [
    '€', '\u{fffd}', '‚', 'ƒ', '„', '…', '†', '‡', 'ˆ', '‰', 'Š', '‹', 'Œ', '\u{fffd}', 'Ž',
    '\u{fffd}', '\u{fffd}', '‘', '’', '“', '”', '•', '–', '—', '˜', '™', 'š', '›', 'œ', '\u{fffd}',
    'ž', 'Ÿ',
];

/// Decodes text: UTF-8 (BOM optional), UTF-16 with a BOM, or, for 8-bit
/// text that is not UTF-8, Windows-1252. `None` means binary: NUL bytes, or
/// many control characters. A multi-byte character cut at the end of a
/// partial read (`cut`) does not make text binary.
pub fn decode_text(mut bytes: Vec<u8>, cut: bool) -> Option<Decoded> {
    if let Some(rest) = bytes.strip_prefix(b"\xff\xfe") {
        return decode_utf16(rest, false);
    }
    if let Some(rest) = bytes.strip_prefix(b"\xfe\xff") {
        return decode_utf16(rest, true);
    }
    if bytes.starts_with(b"\xef\xbb\xbf") {
        bytes.drain(..3);
    }
    if bytes.contains(&0) {
        return None;
    }
    let (text, encoding) = match std::str::from_utf8(&bytes) {
        Ok(_) => (String::from_utf8(bytes).ok()?, "utf-8"),
        Err(e) if cut && e.error_len().is_none() => {
            bytes.truncate(e.valid_up_to());
            (String::from_utf8(bytes).ok()?, "utf-8")
        }
        Err(_) => {
            let text: String = bytes
                .iter()
                .map(|&b| match b {
                    0x80..=0x9f => CP1252_HIGH[usize::from(b - 0x80)],
                    _ => char::from(b),
                })
                .collect();
            (text, "windows-1252")
        }
    };
    if too_many_controls(&text) {
        return None;
    }
    Some(Decoded { text, encoding })
}

fn decode_utf16(bytes: &[u8], big_endian: bool) -> Option<Decoded> {
    let units = bytes.chunks_exact(2).map(|c| {
        if big_endian {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_le_bytes([c[0], c[1]])
        }
    });
    let text: String = char::decode_utf16(units)
        .map(|r| r.unwrap_or('\u{fffd}'))
        .collect();
    if text.contains('\0') || too_many_controls(&text) {
        return None;
    }
    Some(Decoded {
        text,
        encoding: if big_endian { "utf-16be" } else { "utf-16le" },
    })
}

/// More than 2% C0 controls (other than tab, newline, carriage return, form
/// feed and escape) in the first 64 KiB means this is not text.
fn too_many_controls(text: &str) -> bool {
    let mut total = 0usize;
    let mut controls = 0usize;
    for c in text.chars().take(64 * 1024) {
        total += 1;
        if (c < ' ' && !matches!(c, '\t' | '\n' | '\r' | '\x0c' | '\x1b')) || c == '\x7f' {
            controls += 1;
        }
    }
    total > 0 && controls * 50 > total
}

/// Classifies decoded text: HTML, JSON, CSV, Markdown or plain text.
pub fn classify_text(text: &str, cut: bool) -> DocType {
    let trimmed = text.trim_start_matches(['\u{feff}', ' ', '\t', '\r', '\n', '\x0c']);
    if looks_like_html(trimmed) {
        // A README that opens with `<p align="center">` is still Markdown
        // (and Markdown's raw HTML is analysed as HTML anyway); only a full
        // document (doctype, <html>, <head>, <body>) is always HTML.
        let head = lower_prefix(trimmed, 4096);
        let full = ["<!doctype html", "<html", "<head", "<body", "<?xml"]
            .iter()
            .any(|t| head.starts_with(t));
        if !full && looks_like_markdown(text) {
            DocType::Markdown
        } else {
            DocType::Html
        }
    } else if looks_like_json(trimmed) {
        DocType::Json
    } else if looks_like_csv(text, cut) {
        DocType::Csv
    } else if looks_like_markdown(text) {
        DocType::Markdown
    } else {
        DocType::Text
    }
}

fn lower_prefix(s: &str, max_chars: usize) -> String {
    s.chars().take(max_chars).collect::<String>().to_lowercase()
}

/// WHATWG MIME sniffing's HTML patterns: the first tag decides. XHTML
/// (`<?xml` then `<html`) counts too; a leading comment counts only when an
/// HTML structure tag follows soon after.
fn looks_like_html(trimmed: &str) -> bool {
    let head = lower_prefix(trimmed, 4096);
    const TAGS: [&str; 18] = [
        "<!doctype html",
        "<html",
        "<head",
        "<script",
        "<iframe",
        "<h1",
        "<div",
        "<font",
        "<table",
        "<a",
        "<style",
        "<title",
        "<b",
        "<body",
        "<br",
        "<p",
        "<meta",
        "<link",
    ];
    for tag in TAGS {
        if let Some(rest) = head.strip_prefix(tag) {
            if tag.starts_with("<!") || rest.starts_with([' ', '>', '\t', '\n', '\r', '/']) {
                return true;
            }
        }
    }
    if head.starts_with("<?xml") || head.starts_with("<!--") {
        return ["<html", "<body", "<head"].iter().any(|t| head.contains(t));
    }
    false
}

/// `{` or `[` followed by something JSON can hold there.
fn looks_like_json(trimmed: &str) -> bool {
    let mut chars = trimmed.chars();
    let Some(first @ ('{' | '[')) = chars.next() else {
        return false;
    };
    let next = chars.find(|c| !c.is_whitespace());
    match (first, next) {
        (_, None) => true,
        ('{', Some(c)) => c == '"' || c == '}',
        (_, Some(c)) => {
            matches!(c, '"' | '{' | '[' | ']' | '-' | '0'..='9' | 't' | 'f' | 'n')
        }
    }
}

/// Counts `delim` outside double quotes in one line.
fn fields_in_line(line: &str, delim: char) -> usize {
    let mut quoted = false;
    let mut n = 0;
    for c in line.chars() {
        if c == '"' {
            quoted = !quoted;
        } else if c == delim && !quoted {
            n += 1;
        }
    }
    n
}

/// At least two lines (three if only one delimiter per line) with the same,
/// non-zero count of one of `,` `;` or tab outside quotes.
fn looks_like_csv(text: &str, cut: bool) -> bool {
    let mut lines: Vec<&str> = text
        .lines()
        .take(51)
        .filter(|l| !l.trim().is_empty())
        .take(50)
        .collect();
    // The last line of a partial read may itself be partial.
    if (cut || text.lines().nth(51).is_some()) && lines.len() > 2 {
        lines.pop();
    }
    if lines.len() < 2 {
        return false;
    }
    if lines[0].starts_with('#') || lines[0].starts_with('|') {
        return false;
    }
    for delim in [',', '\t', ';'] {
        let first = fields_in_line(lines[0], delim);
        if first == 0 {
            continue;
        }
        if lines.iter().all(|l| fields_in_line(l, delim) == first)
            && (first >= 2 || lines.len() >= 3)
        {
            return true;
        }
    }
    [',', '\t', ';']
        .into_iter()
        .any(|delim| looks_like_ragged_csv(&lines, delim))
}

/// Rows with differing field counts are still CSV when the delimiter is in
/// every line and the fields read like data, not prose: at least three
/// lines, at most a quarter of the commas or semicolons followed by a space
/// (prose writes "a, b"; CSV writes "a,b"), three words or fewer per field
/// on average, and at most a fifth of the lines ending like a sentence.
fn looks_like_ragged_csv(lines: &[&str], delim: char) -> bool {
    if lines.len() < 3 || lines.iter().any(|l| fields_in_line(l, delim) == 0) {
        return false;
    }
    let mut delims = 0usize;
    let mut spaced = 0usize;
    let mut fields = 0usize;
    let mut words = 0usize;
    let mut sentences = 0usize;
    for line in lines {
        let n = fields_in_line(line, delim);
        delims += n;
        fields += n + 1;
        words += line.split_whitespace().count();
        spaced += line.matches(&format!("{delim} ")).count();
        if line.trim_end().ends_with(['.', '!', '?']) {
            sentences += 1;
        }
    }
    (delim == '\t' || spaced * 4 <= delims) && words <= 3 * fields && sentences * 5 <= lines.len()
}

/// Scores Markdown signals in the first 200 lines: an ATX heading counts 2,
/// a link or a fenced block 2, lists, quotes, emphasis, tables and setext
/// underlines 1 each kind, and a front matter block (`---`/`+++` fenced) at
/// the start 1. Two points make Markdown.
fn looks_like_markdown(text: &str) -> bool {
    let mut score = 0;
    let mut seen = [false; 9];
    let mut mark = |i: usize, points: u32, score: &mut u32| {
        if !seen[i] {
            seen[i] = true;
            *score += points;
        }
    };
    let mut prev_text = false;
    for line in text.lines().take(200) {
        let t = line.trim_start();
        let hashes = t.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && t[hashes..].starts_with(' ') {
            mark(0, 2, &mut score);
        }
        if t.starts_with("```") || t.starts_with("~~~") {
            mark(1, 2, &mut score);
        }
        if let Some(i) = t.find("](") {
            if t[..i].contains('[') {
                mark(2, 2, &mut score);
            }
        }
        if t.starts_with("- ")
            || t.starts_with("* ")
            || t.starts_with("+ ")
            || t.split_once(". ")
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        {
            mark(3, 1, &mut score);
        }
        if t.starts_with("> ") {
            mark(4, 1, &mut score);
        }
        if t.contains("**") || t.contains("__") {
            mark(5, 1, &mut score);
        }
        if t.starts_with('|') && t.contains("---") {
            mark(6, 1, &mut score);
        }
        let underline =
            !t.is_empty() && (t.chars().all(|c| c == '=') || t.chars().all(|c| c == '-'));
        if prev_text && underline && t.len() >= 3 {
            mark(7, 1, &mut score);
        }
        prev_text = !t.is_empty() && !underline;
    }
    if crate::extract::markdown::has_front_matter(text) {
        mark(8, 1, &mut score);
    }
    score >= 2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(s: &str) -> DocType {
        sniff(s.as_bytes().to_vec(), false).doc_type
    }

    #[test]
    fn magic_numbers_win_over_anything() {
        assert_eq!(
            sniff(b"%PDF-1.7\n...".to_vec(), false).doc_type,
            DocType::Pdf
        );
        assert_eq!(
            sniff(b"junk\n%PDF-1.4\n".to_vec(), false).doc_type,
            DocType::Pdf
        );
        let s = sniff(b"PK\x03\x04garbage".to_vec(), false);
        assert_eq!((s.doc_type, s.note), (DocType::Binary, Some("zip archive")));
        assert_eq!(
            sniff(b"\x00\x01\x02\xff".to_vec(), false).doc_type,
            DocType::Binary
        );
    }

    #[test]
    fn text_kinds() {
        assert_eq!(kind("<!DOCTYPE html><p>x"), DocType::Html);
        assert_eq!(kind("  <html lang=en>"), DocType::Html);
        assert_eq!(kind("<p>hi</p>"), DocType::Html);
        assert_eq!(kind("<pre>no</pre>"), DocType::Text);
        assert_eq!(
            kind("<p align=\"center\"><img src=\"logo.png\"></p>\n\n# Project\n\nSee [docs](https://x.test).\n"),
            DocType::Markdown
        );
        assert_eq!(
            kind("<html><body>\n# not markdown\n</body></html>"),
            DocType::Html
        );
        assert_eq!(kind("{\"a\": 1}"), DocType::Json);
        assert_eq!(kind("[1, 2]"), DocType::Json);
        assert_eq!(kind("[link](http://x) and more"), DocType::Markdown);
        assert_eq!(kind("a,b,c\n1,2,3\n4,5,6\n"), DocType::Csv);
        assert_eq!(kind("a\tb\n1\t2\n3\t4\n"), DocType::Csv);
        assert_eq!(kind("# Title\n\nSome text.\n"), DocType::Markdown);
        assert_eq!(
            kind("---\ntitle: Notes\n---\nJust a line of text.\n"),
            DocType::Markdown
        );
        assert_eq!(kind("---\nkey: value\nother: 1\n"), DocType::Text);
        assert_eq!(kind("Hello, world.\nJust text here\n"), DocType::Text);
        // Ragged CSV: a consistent delimiter, differing field counts.
        assert_eq!(
            kind("id,name,city\n1,Ann,Oslo,extra\n2,Bob\n3,Cy,Lyon\n"),
            DocType::Csv
        );
        assert_eq!(kind("a\tb\tc\n1\t2\n3\t4\t5\t6\n"), DocType::Csv);
        // Prose with commas in every line is still text.
        assert_eq!(
            kind(
                "Hello, world. This is text, with commas.\nAnother line, yes, it is.\n\
                  Third line, indeed, with more words in it, and more\nA fourth, and last, one\n"
            ),
            DocType::Text
        );
        assert_eq!(
            kind(
                "We met Ann,Bob and Cy at the harbour on a sunny day.\nThen,we left.\n\
                  After that,everyone went home,tired but happy.\n"
            ),
            DocType::Text
        );
        assert_eq!(kind(""), DocType::Text);
    }

    #[test]
    fn encodings() {
        let d = decode_text(b"caf\xe9 \x93quoted\x94".to_vec(), false).expect("text");
        assert_eq!(d.text, "café “quoted”");
        assert_eq!(d.encoding, "windows-1252");
        let utf16: Vec<u8> = [0xff, 0xfe]
            .into_iter()
            .chain("hé".encode_utf16().flat_map(u16::to_le_bytes))
            .collect();
        assert_eq!(decode_text(utf16, false).expect("utf16").text, "hé");
        let mut cut = b"abc".to_vec();
        cut.extend_from_slice(&"é".as_bytes()[..1]);
        assert_eq!(decode_text(cut, true).expect("cut").text, "abc");
        assert!(decode_text(b"\x01\x02\x03\x04abc".to_vec(), false).is_none());
    }
}
