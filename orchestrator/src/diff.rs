//! What a staged commit would change in a branch: each file added, modified or unchanged, with a
//! unified diff a person can read.
//!
//! Staged content is read through [`Stage::read_verified`], so a diff never shows bytes other
//! than the ones that were staged. Very long files and content with NUL bytes are summarised
//! (with size and sha256), not dumped: the point of clearance is a review a person can actually
//! do. Text that is not valid UTF-8 is still shown, its invalid bytes escaped as `\xNN`, because
//! "binary content" would hide readable text from the reviewer.
//!
//! Each file is also marked when it matters once pushed (see [`crate::sensitive`]) or is a
//! look-alike of another path in the branch or the stage, so a reviewer is told, not left to spot
//! `.github/workflows/` or `README.MD` in a long list.

use std::fmt::Write as _;

use serde::Serialize;
use similar::TextDiff;

use crate::extract::ExtractedFile;
use crate::sensitive;
use crate::stage::{Manifest, Stage, StageError, Status};
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
    /// Why this path matters once pushed (CI, git behaviour, automation, scripts); empty when
    /// it is inert.
    pub sensitive: Vec<String>,
    /// Paths in the branch or the stage that are look-alikes of this one (case, NFC/NFD,
    /// trailing dots or spaces), or of one of its directories; push refuses these unless forced.
    pub collides_with: Vec<String>,
    /// How many bytes of the staged content are not valid UTF-8 (shown as `\xNN` in the diff).
    pub invalid_utf8_bytes: usize,
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
    /// `--only` named only files an earlier push of this staged commit already committed.
    #[error("{path:?} was already pushed (commit {commit} on {branch}); push the rest without --only, see golem-orch show")]
    AlreadyPushed {
        /// The path asked for.
        path: String,
        /// The commit that holds it (short).
        commit: String,
        /// The branch of that commit.
        branch: String,
    },
}

/// The staged files `only` selects (all when empty): exact paths or directory prefixes, leaving
/// out the files an earlier push already committed (`status`'s pushes). Naming an unknown path,
/// or one whose files are all pushed, is an error.
pub fn select<'m>(
    manifest: &'m Manifest,
    only: &[String],
    status: &Status,
) -> Result<Vec<&'m ExtractedFile>, DiffError> {
    let pushed = status.pushed_files();
    let chosen = |f: &ExtractedFile, want: &str| {
        let want = want.trim_end_matches('/');
        f.path == want || f.path.starts_with(&format!("{want}/"))
    };
    for want in only {
        let named: Vec<&ExtractedFile> =
            manifest.files.iter().filter(|f| chosen(f, want)).collect();
        let Some(first) = named.first() else {
            return Err(DiffError::UnknownPath(
                want.trim_end_matches('/').to_string(),
            ));
        };
        if let (true, Some(by)) = (
            named.iter().all(|f| pushed.contains_key(f.path.as_str())),
            pushed.get(first.path.as_str()),
        ) {
            return Err(DiffError::AlreadyPushed {
                path: want.trim_end_matches('/').to_string(),
                commit: by.commit.get(..12).unwrap_or(&by.commit).to_string(),
                branch: by.branch.clone(),
            });
        }
    }
    Ok(manifest
        .files
        .iter()
        .filter(|f| !pushed.contains_key(f.path.as_str()))
        .filter(|f| only.is_empty() || only.iter().any(|w| chosen(f, w)))
        .collect())
}

/// Compares the selected staged files with the target's base tree (of a partly pushed staged
/// commit, only the files not pushed yet).
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
    // While files are left to push, only those; a closed commit (pushed, discarded, merged)
    // still diffs whole, as it always did.
    let status = Some(stage.status(id)?).filter(Status::is_open);
    let selected = select(manifest, only, status.as_ref().unwrap_or(&Status::Pending))?;
    let repo_paths: Vec<String> = selected.iter().map(|f| target.repo_path(&f.path)).collect();
    let mut collisions = {
        let existing = match &tree {
            Some(t) => tree_paths(t)?,
            None => Vec::new(),
        };
        let staged: Vec<&str> = repo_paths.iter().map(String::as_str).collect();
        sensitive::collisions(&staged, existing)
            .into_iter()
            .map(|(p, others)| (p.to_string(), others))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let mut out = Vec::new();
    for (file, path) in selected.into_iter().zip(repo_paths) {
        let new = stage.read_verified(id, file)?;
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
            _ => body(&path, old.as_deref(), &new, &file.sha256),
        };
        let invalid_utf8_bytes = if new.contains(&0) { 0 } else { decode(&new).1 };
        out.push(FileDiff {
            staged_path: file.path.clone(),
            sensitive: sensitive::classify(&path, &new)
                .into_iter()
                .map(str::to_string)
                .collect(),
            collides_with: collisions.remove(&path).unwrap_or_default(),
            invalid_utf8_bytes,
            path,
            change,
            size: file.size,
            body,
        });
    }
    Ok(out)
}

/// Every path in `tree` that is not a directory (files, links, submodules), for look-alike checks.
fn tree_paths(tree: &git2::Tree<'_>) -> Result<Vec<String>, TargetError> {
    let mut paths = Vec::new();
    tree.walk(git2::TreeWalkMode::PreOrder, |root, entry| {
        if entry.kind() != Some(git2::ObjectType::Tree) {
            paths.push(format!(
                "{root}{}",
                String::from_utf8_lossy(entry.name_bytes())
            ));
        }
        git2::TreeWalkResult::Ok
    })
    .map_err(TargetError::git("listing the branch's files"))?;
    Ok(paths)
}

/// The bytes as text, with every byte that is not part of valid UTF-8 written as `\xNN`, and how
/// many such bytes there were. Nothing is dropped: a reviewer sees every readable character.
pub fn decode(bytes: &[u8]) -> (String, usize) {
    let mut text = String::with_capacity(bytes.len());
    let mut invalid = 0;
    for chunk in bytes.utf8_chunks() {
        text.push_str(chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(text, "\\x{b:02x}");
            invalid += 1;
        }
    }
    (text, invalid)
}

fn body(path: &str, old: Option<&[u8]>, new: &[u8], sha256: &str) -> Body {
    let too_long = |b: &[u8]| {
        b.len() as u64 > MAX_DIFF_BYTES
            || b.iter().filter(|&&c| c == b'\n').count() > MAX_DIFF_LINES
    };
    let binary = |b: &[u8]| b.contains(&0);
    if binary(new) {
        return Body::Summary(format!(
            "binary content (NUL bytes), {} bytes, sha256 {sha256} (not shown)",
            new.len()
        ));
    }
    // A binary version in the branch is not shown, but the staged text still is, in full.
    let old_binary = old.is_some_and(binary);
    let old = if old_binary { Some(&b""[..]) } else { old };
    if too_long(new) || old.is_some_and(too_long) {
        return Body::Summary(format!(
            "{} bytes, {} lines, sha256 {sha256}: too long to show",
            new.len(),
            new.split(|&c| c == b'\n').count()
        ));
    }
    let (new_text, _) = decode(new);
    let (old_text, _) = decode(old.unwrap_or_default());
    let diff = TextDiff::from_lines(&old_text, &new_text);
    let old_name = if old_binary {
        format!("a/{path} (binary in the branch, not shown)")
    } else if old.is_some() {
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
    let summary = summary(diffs);
    if let Some(s) = &summary {
        let _ = writeln!(out, "{}", paint("1;33", &format!("!! {s} (marked below)")));
    }
    for d in diffs {
        let what = match d.change {
            Change::Added => "added",
            Change::Modified => "modified",
            Change::Unchanged => "unchanged",
        };
        let line = crate::render::block(&format!(
            "{} {} ({what}, {} bytes)",
            d.change.mark(),
            d.path,
            d.size
        ));
        let _ = writeln!(out, "{}{}", paint("1", &line), paint("1;33", &marks(d)));
        match &d.body {
            Body::Text(t) => {
                for line in t.lines() {
                    let line = crate::render::block(line);
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
    if let Some(s) = &summary {
        if diffs.len() > 1 {
            let _ = writeln!(out, "{}", paint("1;33", &format!("!! {s}")));
        }
    }
    out
}

/// The warnings for one file's line, each in brackets after two spaces (empty when none):
/// `  [sensitive: CI configuration: runs on push]  [collides with README.md: differs only in case]`.
/// Branch paths named here are escaped like any other untrusted text.
pub fn marks(d: &FileDiff) -> String {
    let mut out = String::new();
    if !d.sensitive.is_empty() {
        let _ = write!(out, "  [sensitive: {}]", d.sensitive.join("; "));
    }
    for other in &d.collides_with {
        let how = sensitive::difference(&d.path, other);
        let _ = write!(out, "  [collides with {other}: {how}]");
    }
    if d.invalid_utf8_bytes > 0 {
        let _ = write!(
            out,
            "  [not valid UTF-8: {} byte(s) shown as \\xNN]",
            d.invalid_utf8_bytes
        );
    }
    crate::render::block(&out)
}

/// One line counting what a reviewer must look at ("3 sensitive paths, 1 collision"), or `None`
/// when nothing is marked.
pub fn summary(diffs: &[FileDiff]) -> Option<String> {
    let count = |n: usize, one: &str, many: &str| match n {
        0 => None,
        1 => Some(format!("1 {one}")),
        n => Some(format!("{n} {many}")),
    };
    let parts: Vec<String> = [
        count(
            diffs.iter().filter(|d| !d.sensitive.is_empty()).count(),
            "sensitive path",
            "sensitive paths",
        ),
        count(
            diffs.iter().filter(|d| !d.collides_with.is_empty()).count(),
            "collision",
            "collisions",
        ),
        count(
            diffs.iter().filter(|d| d.invalid_utf8_bytes > 0).count(),
            "file with invalid UTF-8",
            "files with invalid UTF-8",
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// Counts of added and removed lines, for summaries.
pub fn line_counts(d: &FileDiff) -> (usize, usize) {
    match &d.body {
        // Only the `---`/`+++` header before the first hunk is not content: a removed `-- x`
        // or `---` line inside a hunk reads `---...` and counts.
        Body::Text(t) => {
            t.lines()
                .skip_while(|l| !l.starts_with("@@"))
                .fold((0, 0), |(a, r), l| {
                    if l.starts_with('+') {
                        (a + 1, r)
                    } else if l.starts_with('-') {
                        (a, r + 1)
                    } else {
                        (a, r)
                    }
                })
        }
        _ => (0, 0),
    }
}

/// `diff --stat`: one line per file (mark, path, changed lines, `+`/`-` bar), then a total, so
/// a reviewer of a large stage sees its shape before reading 850 lines of diff. Paths are
/// escaped like everything else; content that is summarised rather than diffed shows as `Bin`.
pub fn stat(diffs: &[FileDiff]) -> String {
    const BAR: usize = 40;
    let counts: Vec<(usize, usize)> = diffs.iter().map(line_counts).collect();
    let paths: Vec<String> = diffs.iter().map(|d| crate::render::line(&d.path)).collect();
    let width = paths.iter().map(|p| p.chars().count()).max().unwrap_or(0);
    let most = counts.iter().map(|(a, r)| a + r).max().unwrap_or(0);
    let digits = most.to_string().len();
    let mut out = String::new();
    for ((d, path), (a, r)) in diffs.iter().zip(&paths).zip(&counts) {
        let pad = width - path.chars().count();
        let detail = match &d.body {
            Body::Summary(_) => format!("Bin {} bytes", d.size),
            _ => {
                // Scale the bar like git when the largest file would not fit.
                let scale = |n: usize| {
                    if most <= BAR || n == 0 {
                        n
                    } else {
                        (n * BAR / most).max(1)
                    }
                };
                let total = a + r;
                let bar = format!("{}{}", "+".repeat(scale(*a)), "-".repeat(scale(*r)));
                format!("{total:>digits$} {bar}").trim_end().to_string()
            }
        };
        let _ = writeln!(
            out,
            " {} {path}{} | {detail}",
            d.change.mark(),
            " ".repeat(pad)
        );
    }
    let of = |c: Change| diffs.iter().filter(|d| d.change == c).count();
    let (added, removed) = counts
        .iter()
        .fold((0, 0), |(ta, tr), (a, r)| (ta + a, tr + r));
    let _ = writeln!(
        out,
        " {} file(s): {} added, {} modified, {} unchanged; {added} insertion(s)(+), {removed} deletion(s)(-)",
        diffs.len(),
        of(Change::Added),
        of(Change::Modified),
        of(Change::Unchanged)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manifest of `paths` (built from JSON, so fields added later with defaults still load).
    fn manifest_of(paths: &[&str]) -> Manifest {
        let files: Vec<_> = paths
            .iter()
            .map(|p| serde_json::json!({ "path": p, "size": 1, "sha256": "00" }))
            .collect();
        serde_json::from_value(serde_json::json!({
            "version": 1, "id": "x", "session": "x", "created_at": "t", "trust_level": "untrusted",
            "image": "i", "image_id": "sha256:i", "command": [], "exit_code": 0, "inputs": [],
            "files": files, "rejected": [], "bytes": 1,
        }))
        .unwrap()
    }

    #[test]
    fn a_selection_leaves_out_pushed_files_and_refuses_to_name_only_pushed_ones() {
        let m = manifest_of(&["a.md", "docs/b.md", "docs/c.md"]);
        let paths = |files: Vec<&ExtractedFile>| -> Vec<String> {
            files.into_iter().map(|f| f.path.clone()).collect()
        };
        let only = |w: &[&str]| -> Vec<String> { w.iter().map(|s| s.to_string()).collect() };
        assert_eq!(paths(select(&m, &[], &Status::Pending).unwrap()).len(), 3);
        let partial = Status::Partial {
            pushes: vec![crate::stage::PushRecord {
                files: vec!["docs/b.md".into()],
                commit: "0123456789abcdef".into(),
                branch: "golem/x".into(),
                repo: "/r".into(),
                remote: None,
                at: "t".into(),
            }],
        };
        assert_eq!(
            paths(select(&m, &[], &partial).unwrap()),
            ["a.md", "docs/c.md"]
        );
        assert_eq!(
            paths(select(&m, &only(&["docs/"]), &partial).unwrap()),
            ["docs/c.md"]
        );
        let err = select(&m, &only(&["docs/b.md"]), &partial).unwrap_err();
        assert!(
            matches!(err, DiffError::AlreadyPushed { ref commit, .. } if commit == "0123456789ab"),
            "{err}"
        );
        assert!(err.to_string().contains("already pushed"));
        assert!(matches!(
            select(&m, &only(&["nope"]), &partial),
            Err(DiffError::UnknownPath(_))
        ));
    }

    #[test]
    fn bodies_diff_text_and_summarise_binary_or_long_content() {
        let Body::Text(t) = body("a.md", Some(b"one\ntwo\n"), b"one\nthree\n", "h") else {
            panic!()
        };
        assert!(
            t.contains("--- a/a.md") && t.contains("-two") && t.contains("+three"),
            "{t}"
        );
        let Body::Text(t) = body("new.md", None, b"hello\n", "h") else {
            panic!()
        };
        assert!(t.contains("--- /dev/null") && t.contains("+hello"), "{t}");
        assert!(matches!(
            body("b.bin", None, b"\x00\x01", "h"),
            Body::Summary(_)
        ));
        assert!(matches!(
            body(
                "c.txt",
                None,
                &vec![b'x'; (MAX_DIFF_BYTES + 1) as usize],
                "h"
            ),
            Body::Summary(_)
        ));
        let many = "l\n".repeat(MAX_DIFF_LINES + 1);
        assert!(matches!(
            body("d.txt", None, many.as_bytes(), "h"),
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
            body: body("x", None, b"\x1b]0;owned\x07\n", "h"),
            sensitive: Vec::new(),
            collides_with: Vec::new(),
            invalid_utf8_bytes: 0,
        };
        let plain = render(std::slice::from_ref(&d), false);
        assert!(
            !plain.contains('\x1b') && plain.contains("\\u{1b}"),
            "{plain}"
        );
        assert!(render(&[d], true).contains("\x1b[32m"));
    }

    #[test]
    fn invalid_utf8_is_shown_escaped_and_only_nul_bytes_make_content_binary() {
        assert_eq!(
            decode(b"wire \xff\xfe to 666 caf\xc3\xa9 \xc3"),
            ("wire \\xff\\xfe to 666 caf\u{e9} \\xc3".to_string(), 3)
        );
        let Body::Text(t) = body("l.txt", Some(b"old \x80\n"), b"new \xff\n", "h") else {
            panic!("invalid UTF-8 must not hide text")
        };
        assert!(t.contains("-old \\x80") && t.contains("+new \\xff"), "{t}");
        let Body::Summary(s) = body("b.bin", None, b"text\x00more", "abc123") else {
            panic!()
        };
        assert!(
            s.contains("binary") && s.contains("9 bytes") && s.contains("abc123"),
            "{s}"
        );
        let Body::Text(t) = body("x.txt", Some(b"\x00old"), b"staged text\n", "h") else {
            panic!("a binary branch version must not hide the staged text")
        };
        assert!(
            t.contains("+staged text") && t.contains("binary in the branch"),
            "{t}"
        );
    }

    #[test]
    fn file_lines_carry_marks_and_the_summary_counts_them() {
        let file = |path: &str, sensitive: &[&str], collides: &[&str], invalid| FileDiff {
            staged_path: path.into(),
            path: path.into(),
            change: Change::Added,
            size: 1,
            body: Body::None,
            sensitive: sensitive.iter().map(|s| s.to_string()).collect(),
            collides_with: collides.iter().map(|s| s.to_string()).collect(),
            invalid_utf8_bytes: invalid,
        };
        let diffs = [
            file("Makefile", &["build automation: runs commands"], &[], 0),
            file(".envrc", &["environment: direnv runs it on cd"], &[], 0),
            file("README.MD", &[], &["README.md"], 0),
            file("l.txt", &[], &[], 2),
            file("plain.md", &[], &[], 0),
        ];
        assert_eq!(
            summary(&diffs).as_deref(),
            Some("2 sensitive paths, 1 collision, 1 file with invalid UTF-8")
        );
        assert_eq!(summary(&diffs[4..]), None);
        let text = render(&diffs, false);
        assert!(text.starts_with("!! 2 sensitive paths"), "{text}");
        assert!(
            text.contains(
                "A Makefile (added, 1 bytes)  [sensitive: build automation: runs commands]"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "A README.MD (added, 1 bytes)  [collides with README.md: differs only in case]"
            ),
            "{text}"
        );
        assert!(text.contains("A plain.md (added, 1 bytes)\n"), "{text}");
    }

    #[test]
    fn stat_counts_lines_per_file_and_in_total() {
        let file = |path: &str, change, old: Option<&[u8]>, new: &[u8]| FileDiff {
            staged_path: path.into(),
            path: path.into(),
            change,
            size: new.len() as u64,
            body: if change == Change::Unchanged {
                Body::None
            } else {
                body(path, old, new, "h")
            },
            sensitive: vec![],
            collides_with: vec![],
            invalid_utf8_bytes: 0,
        };
        let diffs = [
            file("a.md", Change::Added, None, b"one\ntwo\nthree\n"),
            file(
                "docs/b.md",
                Change::Modified,
                Some(b"one\ntwo\n"),
                b"one\nthree\nfour\n",
            ),
            file("c.md", Change::Unchanged, Some(b"x\n"), b"x\n"),
            file("d.bin", Change::Added, None, b"\0\0"),
        ];
        assert_eq!(line_counts(&diffs[0]), (3, 0));
        assert_eq!(line_counts(&diffs[1]), (2, 1));
        // Content lines that look like the header (`---` rules, `-- ` comments, `++x`) count.
        let rules = file(
            "e.md",
            Change::Modified,
            Some(b"---\n-- comment\nkeep\n"),
            b"keep\n++x\n+++\n",
        );
        assert_eq!(line_counts(&rules), (2, 2));
        let text = stat(&diffs);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], " A a.md      | 3 +++", "{text}");
        assert_eq!(lines[1], " M docs/b.md | 3 ++-", "{text}");
        assert_eq!(lines[2], " = c.md      | 0", "{text}");
        assert_eq!(lines[3], " A d.bin     | Bin 2 bytes", "{text}");
        assert_eq!(
            lines[4],
            " 4 file(s): 2 added, 1 modified, 1 unchanged; 5 insertion(s)(+), 1 deletion(s)(-)"
        );
    }

    #[test]
    fn stat_bars_are_scaled_to_forty_columns() {
        let text: String = (0..100).map(|i| format!("{i}\n")).collect();
        let d = FileDiff {
            staged_path: "big.md".into(),
            path: "big.md".into(),
            change: Change::Added,
            size: text.len() as u64,
            body: body("big.md", None, text.as_bytes(), "h"),
            sensitive: vec![],
            collides_with: vec![],
            invalid_utf8_bytes: 0,
        };
        let s = stat(&[d]);
        assert!(
            s.starts_with(&format!(" A big.md | 100 {}\n", "+".repeat(40))),
            "{s}"
        );
    }
}
