//! Escaping for everything the worker writes.
//!
//! Every string derived from an input is hostile: it may carry terminal escape
//! sequences, bidirectional overrides that make text read differently from
//! what it is, zero-width characters that hide words from a reviewer, or
//! Markdown that turns into links, images or HTML. The helpers here make such
//! text inert and visible before it reaches `/output`.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;

use golem_protocol::chars;

/// The longest a shown line may be, in characters, before it is cut.
pub const MAX_LINE_CHARS: usize = 200;
/// Appended to shown text that was cut, so a reviewer knows it goes on.
pub const CUT_MARK: char = '…';

/// Characters a terminal or a renderer could act on: the one shared set,
/// [`golem_protocol::chars::is_dangerous`] (C0/C1 controls, bidi controls,
/// zero-width, format and other invisible characters such as the tag
/// characters used to smuggle invisible ASCII, noncharacters), which is also
/// what the host escapes in everything it prints and refuses in names.
///
/// One worker rule on top of it: a tab is kept. The worker's shown text goes
/// into Markdown and `.txt` files that keep their layout, and a tab cannot
/// forge a line or move the cursor back; a newline stays escaped here (a
/// shown value is one line), and [`escape_multiline`] keeps it explicitly.
pub fn needs_escape(c: char) -> bool {
    c != '\t' && chars::is_dangerous(c)
}

/// Replaces every character a terminal could act on with a visible
/// `\u{..}` escape (for example ESC becomes `\u{1b}`), so printing the report
/// in a terminal cannot run escape sequences from untrusted input.
pub fn escape_for_terminal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_escaped(&mut out, s);
    out
}

fn push_escaped(out: &mut String, s: &str) {
    for c in s.chars() {
        if needs_escape(c) {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
}

/// Like [`escape_for_terminal`] but keeps line breaks: for multi-line text
/// (extracted document text) that is shown in a code block or a `.txt` file.
/// `\r\n` and lone `\r` become `\n`; every other control is escaped.
pub fn escape_multiline(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut lines = s.split('\n').peekable();
    while let Some(line) = lines.next() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        for (i, part) in line.split('\r').enumerate() {
            if i > 0 {
                out.push('\n');
            }
            push_escaped(&mut out, part);
        }
        if lines.peek().is_some() {
            out.push('\n');
        }
    }
    out
}

/// Makes a file name printable: bytes that are not UTF-8 become `\xNN` and
/// control characters are escaped as in [`escape_for_terminal`].
pub fn escape_path(name: &OsStr) -> String {
    let mut out = String::new();
    for chunk in name.as_bytes().utf8_chunks() {
        push_escaped(&mut out, chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// Cuts a line to [`MAX_LINE_CHARS`] characters and escapes it; a cut line
/// ends with `…`.
pub fn display_line(line: &str, cut: bool) -> String {
    display_chars(line, MAX_LINE_CHARS, cut)
}

/// Cuts `s` to `max` characters (collapsing whitespace runs, so a snippet
/// stays on one line) and escapes it; a cut string ends with `…`.
pub fn display_chars(s: &str, max: usize, cut: bool) -> String {
    let mut kept = String::new();
    let mut count = 0;
    let mut more = false;
    let mut last_space = false;
    for c in s.chars() {
        let c = if c == '\n' || c == '\r' || c == '\t' {
            ' '
        } else {
            c
        };
        if c == ' ' && last_space {
            continue;
        }
        last_space = c == ' ';
        if count == max {
            more = true;
            break;
        }
        kept.push(c);
        count += 1;
    }
    let mut out = escape_for_terminal(&kept);
    if cut || more {
        out.push(CUT_MARK);
    }
    out
}

/// Cuts an already escaped string to at most `max_bytes` bytes on a
/// character boundary. Returns whether it was cut.
pub fn truncate_bytes(s: &mut String, max_bytes: usize) -> bool {
    if s.len() <= max_bytes {
        return false;
    }
    let mut end = max_bytes;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    true
}

/// Backslash-escapes Markdown punctuation so untrusted text stays plain text
/// in a table cell or heading (no links, images, HTML, emphasis, math or
/// `|`; parentheses are harmless once `[` and `]` are escaped). The input
/// must already be escaped with [`escape_for_terminal`] or equivalent.
pub fn markdown_inline(s: &str) -> String {
    golem_protocol::markdown::escape_inline(s)
}

/// A Markdown code span holding `s` verbatim (already escaped, one line):
/// delimited by a backtick run longer than any inside it, so the content can
/// neither close it early nor become a link. Not for table cells (GFM splits
/// cells on `|` even inside code spans).
pub fn inline_code(s: &str) -> String {
    golem_protocol::markdown::code_span(s)
}

fn longest_backtick_run(s: &str) -> usize {
    let mut longest = 0;
    let mut run = 0;
    for c in s.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    longest
}

/// A backtick fence longer than any backtick run in `lines` (and at least
/// three), so no line can close the code block early.
pub fn fence_for<S: AsRef<str>>(lines: &[S]) -> String {
    let longest = lines
        .iter()
        .map(|l| longest_backtick_run(l.as_ref()))
        .max()
        .unwrap_or(0);
    "`".repeat((longest + 1).max(3))
}

/// Percent-encodes a relative output path for use as a Markdown link target:
/// everything but `A-Z a-z 0-9 . _ ~ - /` is encoded, so the target cannot
/// end the link, carry a scheme or be read as HTML.
pub fn link_target(path: &str) -> String {
    golem_protocol::markdown::link_target(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_invisibles_are_escaped() {
        assert_eq!(
            escape_for_terminal("a\x1b[31m\u{202e}b\u{200b}c\u{e0041}\td"),
            "a\\u{1b}[31m\\u{202e}b\\u{200b}c\\u{e0041}\td"
        );
    }

    #[test]
    fn multiline_keeps_newlines_only() {
        assert_eq!(escape_multiline("a\r\nb\rc\n\x07d\n"), "a\nb\nc\n\\u{7}d\n");
    }

    #[test]
    fn display_chars_cuts_and_collapses() {
        assert_eq!(display_chars("a \n\n b", 10, false), "a b");
        assert_eq!(display_chars("abcdef", 3, false), "abc…");
    }

    #[test]
    fn inline_code_and_fences_outgrow_backticks() {
        assert_eq!(inline_code("a"), "`a`");
        assert_eq!(inline_code("a``b"), "```a``b```");
        assert_eq!(inline_code("`x"), "`` `x ``");
        assert_eq!(fence_for(&["plain"]), "```");
        assert_eq!(fence_for(&["```rust"]), "````");
    }

    #[test]
    fn link_targets_are_percent_encoded() {
        assert_eq!(link_target("docs/a b.pdf.md"), "./docs/a%20b.pdf.md");
        assert_eq!(link_target("x).md"), "./x%29.md");
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        let mut s = "aé".to_string();
        assert!(truncate_bytes(&mut s, 2));
        assert_eq!(s, "a");
    }

    /// Every character, so a later change to the shared set or to this file
    /// cannot make the worker show raw what the host escapes: the host
    /// escapes exactly `golem_protocol::chars::is_dangerous`, and the worker
    /// differs only by keeping tab.
    #[test]
    fn the_worker_escapes_exactly_what_the_host_escapes_but_tab() {
        for n in 0..=0x10ffff_u32 {
            let Some(c) = char::from_u32(n) else { continue };
            let host = chars::is_dangerous(c);
            assert_eq!(needs_escape(c), host && c != '\t', "U+{n:04X}");
            let shown = escape_for_terminal(&c.to_string());
            assert_eq!(shown.starts_with("\\u{"), needs_escape(c), "U+{n:04X}");
        }
        // The set is wider than what this file used to list by hand.
        for c in [
            '\u{ad}',
            '\u{3164}',
            '\u{fe0f}',
            '\u{e0041}',
            '\u{e01ef}',
            '\u{fdd0}',
        ] {
            assert!(needs_escape(c), "{c:?}");
        }
    }
}
