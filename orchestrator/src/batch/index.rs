//! The top `index.md` of a `--stage-as-one` commit: one row per document of the batch, with
//! its folder (a link to it when it was staged), its status and its file count, so a reviewer
//! opening the combined commit sees what is in it and what is missing.
//!
//! Every name in it came from outside (a downloaded file's name, a URL), so each is escaped the
//! way golem-worker escapes names in its own `index.md`: dangerous characters shown as inert
//! escapes ([`crate::render::line`]), Markdown punctuation backslash-escaped (no link, image,
//! HTML, emphasis or table cell can form), and link targets percent-encoded relative paths.

use std::fmt::Write as _;

use super::Record;

/// The index's name, unless a document's folder already has it (see [`name`]).
pub(super) const INDEX: &str = "index.md";

/// A name for the index that no folder of the commit takes, compared case-insensitively (one
/// file on a case-insensitive checkout): `index.md`, else `index~2.md`, `index~3.md`, ...
pub(super) fn name<'f>(folders: impl Iterator<Item = &'f str> + Clone) -> String {
    let taken = |n: &str| folders.clone().any(|f| f.eq_ignore_ascii_case(n));
    let mut n = 1;
    let mut candidate = INDEX.to_string();
    while taken(&candidate) {
        n += 1;
        candidate = format!("index~{n}.md");
    }
    candidate
}

/// The index of `record`'s documents, staged as the commit `id`.
pub(super) fn render(id: &str, record: &Record) -> String {
    let staged = record
        .documents
        .iter()
        .filter(|d| d.staged.is_some())
        .count()
        .saturating_sub(record.left_out.len());
    let mut out = format!(
        "# Batch {}\n\n{} document(s); {staged} staged in this commit, a folder each.\n\n",
        crate::home::short(id),
        record.documents.len()
    );
    out.push_str("| Document | Folder | Status | Files |\n| --- | --- | --- | --- |\n");
    for d in &record.documents {
        let left_out = record
            .left_out
            .iter()
            .find(|(source, _)| *source == d.source);
        let folder = match (&d.staged, left_out) {
            (Some(_), Some((_, status))) => format!(
                "{} (left out: {} on its own)",
                inline(&d.folder),
                inline(status)
            ),
            (Some(_), None) => format!("[{}]({}/)", inline(&d.folder), link_target(&d.folder)),
            (None, _) => format!("{} (not staged)", inline(&d.folder)),
        };
        let _ = writeln!(
            out,
            "| {} | {folder} | {} | {} |",
            source_cell(&d.source),
            d.status.as_str(),
            d.files
        );
    }
    out
}

/// A document's source (a path or URL) in a table cell: a code span, so a URL is never a live
/// link (not even one of GitHub's automatic ones), with `|` escaped for the table.
fn source_cell(source: &str) -> String {
    golem_protocol::markdown::code_span(&crate::render::line(source).replace('|', "\\|"))
}

/// Untrusted text as plain one-line Markdown: escaped for a terminal, then every Markdown
/// punctuation character golem-worker escapes is backslash-escaped.
pub(super) fn inline(text: &str) -> String {
    golem_protocol::markdown::escape_inline(&crate::render::line(text))
}

/// A relative link target (see [`golem_protocol::markdown::link_target`]).
pub(super) fn link_target(path: &str) -> String {
    golem_protocol::markdown::link_target(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_form_markdown_or_move_the_terminal() {
        let evil = "x](javascript:alert(1)) <b>|*a*\n\u{1b}[8m";
        let text = inline(evil);
        assert!(!text.contains('\n') && !text.contains('\u{1b}'), "{text}");
        assert!(
            text.starts_with("x\\](javascript:alert(1)) \\<b\\>\\|\\*a\\*"),
            "{text}"
        );
        assert_eq!(link_target("a b/ü(1)"), "./a%20b/%C3%BC%281%29");
        assert_eq!(link_target("javascript:x"), "./javascript%3Ax");
    }

    #[test]
    fn the_index_takes_a_name_no_folder_has() {
        assert_eq!(name(["a.txt", "b.txt"].into_iter()), "index.md");
        assert_eq!(name(["INDEX.md", "index~2.md"].into_iter()), "index~3.md");
    }
}
