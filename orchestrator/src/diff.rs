//! What a staged commit would change in a branch: each file added, modified or unchanged, with a
//! unified diff a person can read.
//!
//! Staged content is read through [`Stage::read_verified`], so a diff never shows bytes other
//! than the ones that were staged. Binary and very long files are summarised, not dumped: the
//! point of clearance is a review a person can actually do.

use std::fmt::Write as _;

use serde::Serialize;
use similar::TextDiff;

use crate::extract::ExtractedFile;
use crate::stage::{Manifest, Stage, StageError};
use crate::target::{Target, TargetError};

/// Files larger than this are summarised rather than diffed.
pub const MAX_DIFF_BYTES: u64 = 1 << 20;
/// Files with more lines than this are summarised rather than diffed.
pub const MAX_DIFF_LINES: usize = 20_000;

/// How a file relates to the branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    /// Not in the branch yet.
    Added,
    /// In the branch with different content.
    Modified,
    /// In the branch with the same content; committing it changes nothing.
    Unchanged,
}

impl Change {
    /// The one-letter mark used in summaries (`A`, `M`, `=`).
    pub fn mark(self) -> char {
        match self {
            Change::Added => 'A',
            Change::Modified => 'M',
            Change::Unchanged => '=',
        }
    }
}

/// One staged file compared with the branch.
#[derive(Debug, Clone, Serialize)]
pub struct FileDiff {
    /// Path in the staged commit.
    pub staged_path: String,
    /// Path in the repository (prefix applied).
    pub path: String,
    /// Added, modified or unchanged.
    pub change: Change,
    /// Staged size in bytes.
    pub size: u64,
    /// The unified diff, or why there is none.
    pub body: Body,
}

/// The readable part of a file's diff.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", content = "text", rename_all = "lowercase")]
pub enum Body {
    /// A unified diff.
    Text(String),
    /// A one-line summary for binary or over-long content.
    Summary(String),
    /// Nothing to show.
    None,
}

/// Why a diff could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// The stage failed or was tampered with.
    #[error(transparent)]
    Stage(#[from] StageError),
    /// The repository failed.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// `--only` named something that is not staged.
    #[error("{0:?} is not a staged file or directory (see golem-orch show)")]
    UnknownPath(String),
}

/// The staged files `only` selects (all when empty): exact paths or directory prefixes.
pub fn select<'m>(
    manifest: &'m Manifest,
    only: &[String],
) -> Result<Vec<&'m ExtractedFile>, DiffError> {
    if only.is_empty() {
        return Ok(manifest.files.iter().collect());
    }
    for want in only {
        let want = want.trim_end_matches('/');
        let dir = format!("{want}/");
        if !manifest
            .files
            .iter()
            .any(|f| f.path == want || f.path.starts_with(&dir))
        {
            return Err(DiffError::UnknownPath(want.to_string()));
        }
    }
    Ok(manifest
        .files
        .iter()
        .filter(|f| {
            only.iter().any(|w| {
                let w = w.trim_end_matches('/');
                f.path == w || f.path.starts_with(&format!("{w}/"))
            })
        })
        .collect())
}

/// Compares the selected staged files with the target's base tree.
pub fn compute(
    stage: &Stage,
    id: &str,
    manifest: &Manifest,
    target: &Target,
    only: &[String],
) -> Result<Vec<FileDiff>, DiffError> {
    stage.verify_layout(id, manifest)?;
    let base = target.base()?;
    let tree = match &base {
        Some(c) => Some(
            c.tree()
                .map_err(TargetError::git("reading the base tree"))?,
        ),
        None => None,
    };
    let mut out = Vec::new();
    for file in select(manifest, only)? {
        let new = stage.read_verified(id, file)?;
        let path = target.repo_path(&file.path);
        let old = match &tree {
            Some(t) => match t.get_path(std::path::Path::new(&path)) {
                Ok(entry) => Some(
                    entry
                        .to_object(&target.repo)
                        .and_then(|o| o.peel_to_blob())
                        .map(|b| b.content().to_vec())
                        .map_err(TargetError::git(format!("reading {path} from the branch")))?,
                ),
                Err(e) if e.code() == git2::ErrorCode::NotFound => None,
                Err(e) => return Err(TargetError::git(format!("looking up {path}"))(e).into()),
            },
            None => None,
        };
        let change = match &old {
            None => Change::Added,
            Some(o) if *o == new => Change::Unchanged,
            Some(_) => Change::Modified,
        };
        let body = match change {
            Change::Unchanged => Body::None,
            _ => body(&path, old.as_deref(), &new),
        };
        out.push(FileDiff {
            staged_path: file.path.clone(),
            path,
            change,
            size: file.size,
            body,
        });
    }
    Ok(out)
}

fn as_text(bytes: &[u8]) -> Option<&str> {
    if bytes.contains(&0) {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

fn body(path: &str, old: Option<&[u8]>, new: &[u8]) -> Body {
    let too_long = |b: &[u8]| {
        b.len() as u64 > MAX_DIFF_BYTES
            || b.iter().filter(|&&c| c == b'\n').count() > MAX_DIFF_LINES
    };
    let (Some(new_text), Some(old_text)) = (as_text(new), old.map_or(Some(""), as_text)) else {
        return Body::Summary(format!("binary content, {} bytes (not shown)", new.len()));
    };
    if too_long(new) || old.is_some_and(too_long) {
        return Body::Summary(format!(
            "{} bytes, {} lines: too long to show",
            new.len(),
            new_text.lines().count()
        ));
    }
    let diff = TextDiff::from_lines(old_text, new_text);
    let old_name = if old.is_some() {
        format!("a/{path}")
    } else {
        "/dev/null".to_string()
    };
    Body::Text(
        diff.unified_diff()
            .context_radius(3)
            .header(&old_name, &format!("b/{path}"))
            .to_string(),
    )
}

/// Renders diffs for a terminal (`color`) or a pipe. Content is untrusted: control characters are
/// escaped so a staged file cannot drive the reviewer's terminal.
pub fn render(diffs: &[FileDiff], color: bool) -> String {
    let paint = |code: &str, text: &str| {
        if color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    };
    let mut out = String::new();
    for d in diffs {
        let what = match d.change {
            Change::Added => "added",
            Change::Modified => "modified",
            Change::Unchanged => "unchanged",
        };
        let _ = writeln!(
            out,
            "{}",
            paint(
                "1",
                &format!("{} {} ({what}, {} bytes)", d.change.mark(), d.path, d.size)
            )
        );
        match &d.body {
            Body::Text(t) => {
                for line in t.lines() {
                    let line = crate::container::neutralise(line);
                    let styled = if line.starts_with("+++") || line.starts_with("---") {
                        paint("1", &line)
                    } else if line.starts_with('+') {
                        paint("32", &line)
                    } else if line.starts_with('-') {
                        paint("31", &line)
                    } else if line.starts_with("@@") {
                        paint("36", &line)
                    } else {
                        line
                    };
                    let _ = writeln!(out, "{styled}");
                }
            }
            Body::Summary(s) => {
                let _ = writeln!(out, "    {s}");
            }
            Body::None => {}
        }
    }
    out
}

/// Counts of added and removed lines, for summaries.
pub fn line_counts(d: &FileDiff) -> (usize, usize) {
    match &d.body {
        Body::Text(t) => t.lines().fold((0, 0), |(a, r), l| {
            if l.starts_with("+++") || l.starts_with("---") {
                (a, r)
            } else if l.starts_with('+') {
                (a + 1, r)
            } else if l.starts_with('-') {
                (a, r + 1)
            } else {
                (a, r)
            }
        }),
        _ => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_diff_text_and_summarise_binary_or_long_content() {
        let Body::Text(t) = body("a.md", Some(b"one\ntwo\n"), b"one\nthree\n") else {
            panic!()
        };
        assert!(
            t.contains("--- a/a.md") && t.contains("-two") && t.contains("+three"),
            "{t}"
        );
        let Body::Text(t) = body("new.md", None, b"hello\n") else {
            panic!()
        };
        assert!(t.contains("--- /dev/null") && t.contains("+hello"), "{t}");
        assert!(matches!(body("b.bin", None, b"\x00\x01"), Body::Summary(_)));
        assert!(matches!(
            body("c.txt", None, &vec![b'x'; (MAX_DIFF_BYTES + 1) as usize]),
            Body::Summary(_)
        ));
        let many = "l\n".repeat(MAX_DIFF_LINES + 1);
        assert!(matches!(
            body("d.txt", None, many.as_bytes()),
            Body::Summary(_)
        ));
    }

    #[test]
    fn rendering_escapes_terminal_control_sequences() {
        let d = FileDiff {
            staged_path: "x".into(),
            path: "x".into(),
            change: Change::Added,
            size: 1,
            body: body("x", None, b"\x1b]0;owned\x07\n"),
        };
        let plain = render(std::slice::from_ref(&d), false);
        assert!(
            !plain.contains('\x1b') && plain.contains("\\u{1b}"),
            "{plain}"
        );
        assert!(render(&[d], true).contains("\x1b[32m"));
    }
}
