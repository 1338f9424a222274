//! How a name becomes inert Markdown: the worker's `index.md` and the host's combined
//! `index.md` (`batch --stage-as-one`) escape names the same way, so one rule lives here.
//!
//! Both sides first make the text safe for a terminal (control, bidi and invisible characters
//! escaped: [`crate::chars`]); these functions only keep Markdown from forming.

/// Backslash-escapes every character that could start Markdown or HTML inline syntax (links,
/// images, emphasis, code, tables, HTML, math), so the text reads as itself.
pub fn escape_inline(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(
            c,
            '\\' | '`'
                | '*'
                | '_'
                | '{'
                | '}'
                | '['
                | ']'
                | '<'
                | '>'
                | '#'
                | '+'
                | '!'
                | '|'
                | '~'
                | '&'
                | '$'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A code span holding `text` verbatim (already escaped, one line): delimited by a backtick run
/// longer than any inside it, so the content can neither close it early nor become a link,
/// not even one of GitHub's automatic `https://`/`www.` links. In a table cell, escape `|` as
/// `\|` first (GFM splits cells on `|` even inside code spans).
pub fn code_span(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let ticks = "`".repeat(longest + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') || text.is_empty() {
        " "
    } else {
        ""
    };
    format!("{ticks}{pad}{text}{pad}{ticks}")
}

/// A relative link target: `./` and then everything but `A-Z a-z 0-9 . _ ~ - /`
/// percent-encoded, so the target can neither end the link nor read as a scheme or HTML.
pub fn link_target(path: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::from("./");
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-' | b'/') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_form_markdown_or_links() {
        assert_eq!(
            escape_inline("x](javascript:1) <b>|*a*"),
            "x\\](javascript:1) \\<b\\>\\|\\*a\\*"
        );
        assert_eq!(link_target("a b/ü(1)"), "./a%20b/%C3%BC%281%29");
        assert_eq!(link_target("javascript:x"), "./javascript%3Ax");
        assert_eq!(code_span("https://a"), "`https://a`");
        assert_eq!(code_span("a``b"), "```a``b```");
        assert_eq!(code_span("`x"), "`` `x ``");
    }
}
