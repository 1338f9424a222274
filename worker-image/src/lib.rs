//! The report that golem-worker writes inside the locked container.
//!
//! The worker reads the session's inputs (mounted read-only at `/input`) and
//! writes `report.md` and `report.json` into `/output`, which the orchestrator
//! downloads and validates afterwards. Everything the worker shows comes from
//! untrusted files, so every string that ends up in the report is escaped:
//! control characters cannot reach a reviewer's terminal and file contents
//! cannot break out of their Markdown code blocks.
//!
//! The walk never follows symbolic links and never reads a whole file into
//! memory, so a hostile input tree cannot point the worker at files outside
//! `/input` or exhaust its memory.

use std::ffi::{OsStr, OsString};
use std::fmt::{self, Write as _};
use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The worker's version, printed by `golem-worker version` and recorded in
/// every report so a reviewer knows which worker produced it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where the orchestrator mounts the session's inputs (read-only).
pub const DEFAULT_INPUT: &str = "/input";
/// Where the orchestrator collects the worker's results.
pub const DEFAULT_OUTPUT: &str = "/output";
/// The optional task description the orchestrator may mount.
pub const DEFAULT_TASK: &str = "/task/instructions.md";

/// Exit code: every input was reported and the report was written.
pub const EXIT_OK: i32 = 0;
/// Exit code: the report was written but at least one input could not be read.
pub const EXIT_INPUT_ERRORS: i32 = 1;
/// Exit code: the report could not be written (for example the size-capped
/// output volume is full); the orchestrator must not trust `/output`.
pub const EXIT_OUTPUT_FAILED: i32 = 2;
/// Exit code: the command line could not be understood.
pub const EXIT_USAGE: i32 = 64;

/// How much of each file is examined to decide whether it is text and to show
/// its first lines; also the most that is read of the task file.
pub const SNIFF_LIMIT: usize = 64 * 1024;
/// How many leading lines of a text file the report shows.
pub const MAX_FIRST_LINES: usize = 10;
/// The longest a shown line may be, in characters, before it is cut.
pub const MAX_LINE_CHARS: usize = 200;
/// Read buffer size: files are hashed in chunks of this size so memory use
/// does not depend on the size of the input.
const READ_BUF: usize = 64 * 1024;
/// Appended to a shown line that was cut, so a reviewer knows it goes on.
const CUT_MARK: char = '…';

/// Where `golem-worker report` reads from and writes to.
#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// Directory whose files are reported (the session's inputs).
    pub input: PathBuf,
    /// Directory that receives `report.md` and `report.json`.
    pub output: PathBuf,
    /// Optional task description whose first line heads the report.
    pub task: PathBuf,
}

impl Default for ReportOptions {
    fn default() -> Self {
        Self {
            input: PathBuf::from(DEFAULT_INPUT),
            output: PathBuf::from(DEFAULT_OUTPUT),
            task: PathBuf::from(DEFAULT_TASK),
        }
    }
}

/// What the content sniffing decided about a file, so the report only shows
/// lines of files a reviewer can read as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Valid UTF-8 without NUL bytes in the first [`SNIFF_LIMIT`] bytes.
    Text,
    /// Anything else.
    Binary,
}

impl Kind {
    /// The name used in both report formats.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Text => "text",
            Kind::Binary => "binary",
        }
    }
}

/// One regular file of the input (or a file or directory that could not be
/// read, with `error` set), as it appears in the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputEntry {
    /// Path relative to the input directory, `/`-separated and escaped with
    /// [`escape_path`] so it is safe to print.
    pub path: String,
    /// Size in bytes (as read when hashing, else as seen by `lstat`).
    pub size: Option<u64>,
    /// Lower-case hex SHA-256 of the contents.
    pub sha256: Option<String>,
    /// Sniffed kind of the contents.
    pub kind: Option<Kind>,
    /// Number of lines, for text files (a last line without `\n` counts).
    pub lines: Option<u64>,
    /// Up to [`MAX_FIRST_LINES`] escaped leading lines of a text file.
    pub first_lines: Vec<String>,
    /// Why the file could not be reported, if it could not.
    pub error: Option<String>,
}

impl InputEntry {
    fn failed(path: String, size: Option<u64>, error: String) -> Self {
        Self {
            path,
            size,
            sha256: None,
            kind: None,
            lines: None,
            first_lines: Vec::new(),
            error: Some(error),
        }
    }
}

/// Something in the input tree that was deliberately not read (a symbolic
/// link or a special file), listed so a reviewer knows it was there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Escaped relative path, as for [`InputEntry::path`].
    pub path: String,
    /// What it was and why it was skipped.
    pub reason: String,
}

/// Everything the worker found, before it is rendered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Escaped first line of the task file, if there is one.
    pub task: Option<String>,
    /// Why the task file exists but could not be read.
    pub task_error: Option<String>,
    /// Regular files (and unreadable entries) in deterministic walk order.
    pub inputs: Vec<InputEntry>,
    /// Symbolic links and special files that were not read.
    pub skipped: Vec<Skipped>,
}

impl Report {
    /// Number of inputs that could not be read; non-zero makes the worker
    /// exit with [`EXIT_INPUT_ERRORS`].
    pub fn errors(&self) -> usize {
        self.inputs.iter().filter(|e| e.error.is_some()).count()
    }
}

/// Writing a report file failed; the orchestrator is told through
/// [`EXIT_OUTPUT_FAILED`] and this message on stderr.
#[derive(Debug)]
pub struct OutputError {
    /// The file that could not be written.
    pub path: PathBuf,
    /// The underlying error (for example ENOSPC on a full output volume).
    pub source: io::Error,
}

impl fmt::Display for OutputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot write {}: {}", self.path.display(), self.source)
    }
}

impl std::error::Error for OutputError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Runs the whole `report` subcommand: collects, writes both files and
/// returns the process exit code, printing any failure to stderr.
pub fn run_report(opts: &ReportOptions) -> i32 {
    let report = collect(&opts.input, &opts.task);
    if let Err(e) = write_outputs(&report, &opts.output) {
        eprintln!("golem-worker: {e}");
        eprintln!("golem-worker: the report is incomplete; do not trust the output directory");
        return EXIT_OUTPUT_FAILED;
    }
    let errors = report.errors();
    eprintln!(
        "golem-worker: reported {} input(s), {} error(s), {} skipped, into {}",
        report.inputs.len(),
        errors,
        report.skipped.len(),
        opts.output.display()
    );
    if errors > 0 {
        EXIT_INPUT_ERRORS
    } else {
        EXIT_OK
    }
}

/// Walks `input` and reads the task file, never failing: problems become
/// error entries so that the other inputs are still reported.
pub fn collect(input: &Path, task: &Path) -> Report {
    let mut report = Report::default();
    let (task_line, task_error) = read_task(task);
    report.task = task_line;
    report.task_error = task_error;
    walk(input, &mut report);
    report
}

/// Writes `report.json` and `report.md` into `dir`.
///
/// Each file is created fresh (any old file or planted symlink of that name is
/// removed first, and `O_EXCL` is used). When writing fails, what was written
/// is removed again (best effort) so no truncated or half report is left.
pub fn write_outputs(report: &Report, dir: &Path) -> Result<(), OutputError> {
    let json_path = dir.join("report.json");
    let json = serde_json::to_string_pretty(&report_json(report)).map_err(|e| OutputError {
        path: json_path.clone(),
        source: io::Error::other(e),
    })?;
    write_fresh(&json_path, format!("{json}\n").as_bytes())?;
    let md = write_fresh(&dir.join("report.md"), render_markdown(report).as_bytes());
    if md.is_err() {
        // Leave no half of a report behind either.
        let _ = fs::remove_file(&json_path);
    }
    md
}

fn write_fresh(path: &Path, data: &[u8]) -> Result<(), OutputError> {
    let fail = |source| OutputError {
        path: path.to_path_buf(),
        source,
    };
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(e)),
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
        .map_err(fail)?;
    let written = file.write_all(data).and_then(|()| file.sync_all());
    if let Err(e) = written {
        drop(file);
        // Best effort: a partial report is worse than none.
        let _ = fs::remove_file(path);
        return Err(fail(e));
    }
    Ok(())
}

fn read_task(path: &Path) -> (Option<String>, Option<String>) {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return (None, None),
        Err(e) => return (None, Some(format!("cannot open task file: {e}"))),
    };
    let mut buf = Vec::new();
    if let Err(e) = file.take(SNIFF_LIMIT as u64).read_to_end(&mut buf) {
        return (None, Some(format!("cannot read task file: {e}")));
    }
    let text = String::from_utf8_lossy(&buf);
    let first = text.split('\n').next().unwrap_or_default();
    let first = first.strip_suffix('\r').unwrap_or(first);
    (Some(display_line(first, false)), None)
}

/// Depth-first walk with an explicit stack (a deeply nested hostile tree
/// cannot overflow the worker's stack), children sorted by raw name bytes so
/// the report is deterministic.
fn walk(root: &Path, report: &mut Report) {
    // (absolute path, relative path) still to visit, in reverse order.
    let mut stack: Vec<(PathBuf, PathBuf)> = Vec::new();
    match sorted_children(root) {
        Ok(children) => push_children(&mut stack, root, Path::new(""), children),
        Err(e) => {
            report.inputs.push(InputEntry::failed(
                ".".to_string(),
                None,
                format!("cannot list input directory {}: {e}", root.display()),
            ));
            return;
        }
    }
    while let Some((abs, rel)) = stack.pop() {
        let shown = escape_path(rel.as_os_str());
        let meta = match fs::symlink_metadata(&abs) {
            Ok(m) => m,
            Err(e) => {
                report
                    .inputs
                    .push(InputEntry::failed(shown, None, format!("cannot stat: {e}")));
                continue;
            }
        };
        let ft = meta.file_type();
        if ft.is_dir() {
            match sorted_children(&abs) {
                Ok(children) => push_children(&mut stack, &abs, &rel, children),
                Err(e) => report.inputs.push(InputEntry::failed(
                    format!("{shown}/"),
                    None,
                    format!("cannot list directory: {e}"),
                )),
            }
        } else if ft.is_file() {
            report.inputs.push(scan_entry(&abs, shown, &meta));
        } else if ft.is_symlink() {
            let reason = match fs::read_link(&abs) {
                Ok(target) => format!(
                    "symbolic link to {}, not followed",
                    escape_path(target.as_os_str())
                ),
                Err(_) => "symbolic link, not followed".to_string(),
            };
            report.skipped.push(Skipped {
                path: shown,
                reason,
            });
        } else {
            let what = if ft.is_fifo() {
                "named pipe"
            } else if ft.is_socket() {
                "socket"
            } else if ft.is_char_device() {
                "character device"
            } else if ft.is_block_device() {
                "block device"
            } else {
                "special file"
            };
            report.skipped.push(Skipped {
                path: shown,
                reason: format!("{what}, not read"),
            });
        }
    }
}

fn sorted_children(dir: &Path) -> io::Result<Vec<OsString>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir)? {
        names.push(entry?.file_name());
    }
    names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    Ok(names)
}

fn push_children(
    stack: &mut Vec<(PathBuf, PathBuf)>,
    abs: &Path,
    rel: &Path,
    children: Vec<OsString>,
) {
    for name in children.into_iter().rev() {
        stack.push((abs.join(&name), rel.join(&name)));
    }
}

/// What one streaming pass over a file learned.
struct Scan {
    size: u64,
    sha256: String,
    head: Vec<u8>,
    newlines: u64,
    last_byte: Option<u8>,
}

fn scan_entry(abs: &Path, shown: String, lmeta: &Metadata) -> InputEntry {
    let scan = match scan_file(abs, lmeta) {
        Ok(s) => s,
        Err(e) => return InputEntry::failed(shown, Some(lmeta.len()), format!("cannot read: {e}")),
    };
    let complete = scan.size == scan.head.len() as u64;
    let kind = sniff(&scan.head, complete);
    let (lines, first_lines) = match kind {
        Kind::Text => {
            let unterminated = u64::from(scan.last_byte.is_some_and(|b| b != b'\n'));
            (
                Some(scan.newlines + unterminated),
                first_lines(&scan.head, complete),
            )
        }
        Kind::Binary => (None, Vec::new()),
    };
    InputEntry {
        path: shown,
        size: Some(scan.size),
        sha256: Some(scan.sha256),
        kind: Some(kind),
        lines,
        first_lines,
        error: None,
    }
}

/// Hashes the file in [`READ_BUF`] chunks, keeping only its first
/// [`SNIFF_LIMIT`] bytes. The opened file must be the regular file that was
/// `lstat`ed (same device and inode), so a file swapped for a symlink or a
/// pipe between the two calls is refused rather than followed.
fn scan_file(path: &Path, lmeta: &Metadata) -> io::Result<Scan> {
    let mut file = File::open(path)?;
    let fmeta = file.metadata()?;
    if !fmeta.is_file() || fmeta.dev() != lmeta.dev() || fmeta.ino() != lmeta.ino() {
        return Err(io::Error::other("file was replaced while being read"));
    }
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; READ_BUF];
    let mut head = Vec::new();
    let mut size = 0u64;
    let mut newlines = 0u64;
    let mut last_byte = None;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let chunk = &buf[..n];
        hasher.update(chunk);
        if head.len() < SNIFF_LIMIT {
            let take = (SNIFF_LIMIT - head.len()).min(n);
            head.extend_from_slice(&chunk[..take]);
        }
        newlines += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        size += n as u64;
        last_byte = chunk.last().copied();
    }
    Ok(Scan {
        size,
        sha256: hex::encode(hasher.finalize()),
        head,
        newlines,
        last_byte,
    })
}

/// Text means valid UTF-8 without NULs; a multi-byte character cut by the
/// sniff limit does not make a longer file binary.
fn sniff(head: &[u8], complete: bool) -> Kind {
    if head.contains(&0) {
        return Kind::Binary;
    }
    match std::str::from_utf8(head) {
        Ok(_) => Kind::Text,
        Err(e) if e.error_len().is_none() && !complete => Kind::Text,
        Err(_) => Kind::Binary,
    }
}

fn first_lines(head: &[u8], complete: bool) -> Vec<String> {
    let mut rest = match std::str::from_utf8(head) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default(),
    };
    let mut out = Vec::new();
    while out.len() < MAX_FIRST_LINES && !rest.is_empty() {
        let (line, ended, next) = match rest.find('\n') {
            Some(i) => (&rest[..i], true, &rest[i + 1..]),
            None => (rest, false, ""),
        };
        rest = next;
        let line = line.strip_suffix('\r').unwrap_or(line);
        // A last line without its newline in an incomplete head goes on
        // past the sniff limit: mark it as cut.
        out.push(display_line(line, !ended && !complete));
    }
    out
}

/// Cuts a line to [`MAX_LINE_CHARS`] characters and escapes it; a cut line
/// ends with `…`.
fn display_line(line: &str, cut: bool) -> String {
    let mut chars = line.chars();
    let kept: String = chars.by_ref().take(MAX_LINE_CHARS).collect();
    let mut out = escape_for_terminal(&kept);
    if cut || chars.next().is_some() {
        out.push(CUT_MARK);
    }
    out
}

/// Characters a terminal or a renderer could act on: C0/C1 controls (except
/// tab), and the invisible Unicode format characters used to make text read
/// differently from what it is (zero-width, bidirectional overrides, line and
/// paragraph separators, BOM).
fn needs_escape(c: char) -> bool {
    (c.is_control() && c != '\t')
        || matches!(
            c,
            '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}'
        )
}

/// Replaces every character a terminal could act on with a visible
/// `\u{..}` escape (for example ESC becomes `\u{1b}`), so printing the report
/// in a terminal cannot run escape sequences from untrusted input.
pub fn escape_for_terminal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if needs_escape(c) {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// Makes a file name printable: bytes that are not UTF-8 become `\xNN` and
/// control characters are escaped as in [`escape_for_terminal`].
pub fn escape_path(name: &OsStr) -> String {
    let mut out = String::new();
    for chunk in name.as_bytes().utf8_chunks() {
        out.push_str(&escape_for_terminal(chunk.valid()));
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// Backslash-escapes Markdown punctuation so untrusted text stays plain text
/// in a table cell or heading (no links, images, HTML, emphasis, math or
/// `|`; parentheses are harmless once `[` and `]` are escaped).
pub fn markdown_inline(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
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

/// A backtick fence longer than any backtick run in `lines` (and at least
/// three), so no line can close the code block early.
pub fn fence_for<S: AsRef<str>>(lines: &[S]) -> String {
    let mut longest = 0;
    for line in lines {
        let mut run = 0;
        for c in line.as_ref().chars() {
            if c == '`' {
                run += 1;
                longest = longest.max(run);
            } else {
                run = 0;
            }
        }
    }
    "`".repeat((longest + 1).max(3))
}

fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

/// The human report: title, task, a table of inputs, what was skipped, and a
/// section per input with its first lines in a safe code block.
pub fn render_markdown(report: &Report) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# golem-worker report\n");
    if let Some(task) = &report.task {
        let _ = writeln!(md, "Task: {}\n", markdown_inline(task));
    }
    if let Some(err) = &report.task_error {
        let _ = writeln!(md, "Task: (unreadable: {})\n", markdown_inline(err));
    }
    let _ = writeln!(
        md,
        "golem-worker {VERSION}: {}, {}, {} skipped.\n",
        plural(report.inputs.len() as u64, "input", "inputs"),
        plural(report.errors() as u64, "error", "errors"),
        report.skipped.len()
    );

    let _ = writeln!(md, "## Inputs\n");
    if report.inputs.is_empty() {
        let _ = writeln!(md, "No input files.\n");
    } else {
        let _ = writeln!(md, "| Name | Size | SHA-256 | Kind |");
        let _ = writeln!(md, "| --- | ---: | --- | --- |");
        for e in &report.inputs {
            let size = e.size.map_or_else(|| "?".to_string(), |s| s.to_string());
            let sha = e
                .sha256
                .as_ref()
                .map_or_else(|| "-".to_string(), |s| format!("`{s}`"));
            let kind = match (e.kind, &e.error) {
                (_, Some(_)) => "**error**",
                (Some(k), None) => k.as_str(),
                (None, None) => "?",
            };
            let _ = writeln!(
                md,
                "| {} | {size} | {sha} | {kind} |",
                markdown_inline(&e.path)
            );
        }
        md.push('\n');
    }

    if !report.skipped.is_empty() {
        let _ = writeln!(md, "## Skipped\n");
        for s in &report.skipped {
            let _ = writeln!(
                md,
                "- {}: {}",
                markdown_inline(&s.path),
                markdown_inline(&s.reason)
            );
        }
        md.push('\n');
    }

    for e in &report.inputs {
        let _ = writeln!(md, "## {}\n", markdown_inline(&e.path));
        if let Some(err) = &e.error {
            let _ = writeln!(md, "**Error:** {}\n", markdown_inline(err));
            continue;
        }
        let size = e.size.unwrap_or(0);
        match e.kind {
            Some(Kind::Text) => {
                let lines = e.lines.unwrap_or(0);
                let _ = writeln!(
                    md,
                    "{}, text, {}.\n",
                    plural(size, "byte", "bytes"),
                    plural(lines, "line", "lines")
                );
                if e.first_lines.is_empty() {
                    let _ = writeln!(md, "(empty)\n");
                } else {
                    let shown = e.first_lines.len();
                    let _ = writeln!(md, "First {}:\n", plural(shown as u64, "line", "lines"));
                    let fence = fence_for(&e.first_lines);
                    let _ = writeln!(md, "{fence}text");
                    for line in &e.first_lines {
                        let _ = writeln!(md, "{line}");
                    }
                    let _ = writeln!(md, "{fence}\n");
                }
            }
            Some(Kind::Binary) | None => {
                let _ = writeln!(
                    md,
                    "{}, binary; contents not shown.\n",
                    plural(size, "byte", "bytes")
                );
            }
        }
    }
    md
}

/// The structured report, same data as the Markdown one:
/// `{"inputs":[{"path","size","sha256","kind","lines","first_lines","error"}],
/// "errors": n, "skipped": [{"path","reason"}], "task", "task_error",
/// "version"}`.
pub fn report_json(report: &Report) -> Value {
    let inputs: Vec<Value> = report
        .inputs
        .iter()
        .map(|e| {
            json!({
                "path": e.path,
                "size": e.size,
                "sha256": e.sha256,
                "kind": e.kind.map(Kind::as_str),
                "lines": e.lines,
                "first_lines": e.first_lines,
                "error": e.error,
            })
        })
        .collect();
    let skipped: Vec<Value> = report
        .skipped
        .iter()
        .map(|s| json!({"path": s.path, "reason": s.reason}))
        .collect();
    json!({
        "version": VERSION,
        "task": report.task,
        "task_error": report.task_error,
        "inputs": inputs,
        "skipped": skipped,
        "errors": report.errors(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn sha256_hex(data: &[u8]) -> String {
        hex::encode(Sha256::digest(data))
    }

    fn write(dir: &Path, rel: &str, data: &[u8]) {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("create parent");
        }
        fs::write(path, data).expect("write input");
    }

    /// Runs the report on `input` into a fresh output dir and returns the
    /// exit code, the parsed JSON and the Markdown.
    fn run(input: &Path) -> (i32, Value, String) {
        let out = tempfile::tempdir().expect("output tempdir");
        let opts = ReportOptions {
            input: input.to_path_buf(),
            output: out.path().to_path_buf(),
            task: input.join("no-such-task-file"),
        };
        let code = run_report(&opts);
        let json = fs::read_to_string(out.path().join("report.json")).expect("report.json");
        let md = fs::read_to_string(out.path().join("report.md")).expect("report.md");
        (code, serde_json::from_str(&json).expect("valid json"), md)
    }

    fn entry<'a>(json: &'a Value, path: &str) -> &'a Value {
        json["inputs"]
            .as_array()
            .expect("inputs array")
            .iter()
            .find(|e| e["path"] == path)
            .unwrap_or_else(|| panic!("no entry {path} in {json}"))
    }

    #[test]
    fn size_and_sha256_are_correct_and_streamed() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Larger than one read buffer and not a multiple of it.
        let big: Vec<u8> = (0..(READ_BUF * 3 + 17))
            .map(|i| b'a' + (i % 26) as u8)
            .collect();
        write(dir.path(), "big.txt", &big);
        write(dir.path(), "hello.txt", b"hello\nworld\n");
        write(dir.path(), "empty", b"");
        let (code, json, md) = run(dir.path());
        assert_eq!(code, EXIT_OK);
        assert_eq!(json["errors"], 0);
        let e = entry(&json, "hello.txt");
        assert_eq!(e["size"], 12);
        assert_eq!(e["sha256"], sha256_hex(b"hello\nworld\n"));
        assert_eq!(e["kind"], "text");
        assert_eq!(e["lines"], 2);
        assert_eq!(e["first_lines"], json!(["hello", "world"]));
        assert_eq!(e["error"], Value::Null);
        let e = entry(&json, "big.txt");
        assert_eq!(e["size"], big.len());
        assert_eq!(e["sha256"], sha256_hex(&big));
        assert_eq!(e["lines"], 1);
        let e = entry(&json, "empty");
        assert_eq!(e["size"], 0);
        assert_eq!(e["sha256"], sha256_hex(b""));
        assert_eq!(e["kind"], "text");
        assert_eq!(e["lines"], 0);
        assert!(md.contains(&sha256_hex(b"hello\nworld\n")));
        assert!(md.contains("| hello.txt | 12 |"));
    }

    #[test]
    fn binary_is_detected() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), "nul.bin", b"abc\0def\n");
        write(dir.path(), "latin1.txt", b"caf\xe9\n");
        write(dir.path(), "utf8.txt", "café ☕\n".as_bytes());
        let (code, json, md) = run(dir.path());
        assert_eq!(code, EXIT_OK);
        for p in ["nul.bin", "latin1.txt"] {
            let e = entry(&json, p);
            assert_eq!(e["kind"], "binary", "{p}");
            assert_eq!(e["lines"], Value::Null);
            assert_eq!(e["first_lines"], json!([]));
        }
        assert_eq!(entry(&json, "utf8.txt")["kind"], "text");
        assert!(md.contains("binary; contents not shown"));
        assert!(!md.contains("abc"));
    }

    #[test]
    fn multibyte_char_cut_by_sniff_limit_is_still_text() {
        let mut data = vec![b'x'; SNIFF_LIMIT - 1];
        data.extend_from_slice("é tail\n".as_bytes());
        assert_eq!(sniff(&data[..SNIFF_LIMIT], false), Kind::Text);
        assert_eq!(sniff(&data[..SNIFF_LIMIT], true), Kind::Binary);
    }

    #[test]
    fn first_lines_are_limited_cut_and_escaped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut content = String::new();
        content.push_str("\x1b[31mred\x1b[0m\tTab\r\n");
        content.push_str(&"y".repeat(MAX_LINE_CHARS + 50));
        content.push('\n');
        content.push_str("bell\x07 del\x7f c1\u{9b} rlo\u{202e}x\n");
        for i in 0..20 {
            let _ = writeln!(content, "line {i}");
        }
        write(dir.path(), "t.txt", content.as_bytes());
        let (code, json, md) = run(dir.path());
        assert_eq!(code, EXIT_OK);
        let e = entry(&json, "t.txt");
        assert_eq!(e["lines"], 23);
        let lines = e["first_lines"].as_array().expect("array");
        assert_eq!(lines.len(), MAX_FIRST_LINES);
        assert_eq!(lines[0], "\\u{1b}[31mred\\u{1b}[0m\tTab");
        assert_eq!(lines[1], format!("{}…", "y".repeat(MAX_LINE_CHARS)));
        assert_eq!(lines[2], "bell\\u{7} del\\u{7f} c1\\u{9b} rlo\\u{202e}x");
        assert_eq!(lines[9], "line 6");
        assert!(!md.contains('\x1b'));
        assert!(!md.contains('\x07'));
        assert!(!md.contains('\u{202e}'));
        assert!(md.contains("\\u{1b}[31mred"));
    }

    #[test]
    fn fence_is_longer_than_backtick_runs() {
        assert_eq!(fence_for(&["plain"]), "```");
        assert_eq!(fence_for(&["a `b` c"]), "```");
        assert_eq!(fence_for(&["```rust"]), "````");
        assert_eq!(fence_for(&["x", "``````` y ``"]), "````````");

        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), "evil.md", b"`````\n# not a heading\n`````\n");
        let (_, _, md) = run(dir.path());
        assert!(md.contains("\n``````text\n`````\n# not a heading\n`````\n``````\n"));
    }

    #[test]
    fn symlinks_and_special_files_are_skipped_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("outside");
        write(outside.path(), "secret.txt", b"TOP SECRET\n");
        write(dir.path(), "real.txt", b"real\n");
        symlink(
            outside.path().join("secret.txt"),
            dir.path().join("link.txt"),
        )
        .expect("symlink");
        symlink(outside.path(), dir.path().join("linkdir")).expect("dir symlink");
        symlink("/nonexistent", dir.path().join("dangling")).expect("dangling symlink");
        let sock = std::os::unix::net::UnixListener::bind(dir.path().join("sock")).expect("socket");
        let (code, json, md) = run(dir.path());
        drop(sock);
        assert_eq!(code, EXIT_OK);
        let inputs = json["inputs"].as_array().expect("inputs");
        assert_eq!(inputs.len(), 1, "{json}");
        assert_eq!(inputs[0]["path"], "real.txt");
        let skipped: Vec<&str> = json["skipped"]
            .as_array()
            .expect("skipped")
            .iter()
            .filter_map(|s| s["path"].as_str())
            .collect();
        assert_eq!(skipped, ["dangling", "link.txt", "linkdir", "sock"]);
        assert!(!md.contains("TOP SECRET"));
        assert!(md.contains("## Skipped"));
    }

    #[test]
    fn nested_directories_are_walked_in_sorted_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), "b.txt", b"b\n");
        write(dir.path(), "a/z.txt", b"z\n");
        write(dir.path(), "a/deep/er/x.txt", b"x\n");
        write(dir.path(), "a.txt", b"a\n");
        fs::create_dir(dir.path().join("emptydir")).expect("mkdir");
        let (code, json, _) = run(dir.path());
        assert_eq!(code, EXIT_OK);
        let paths: Vec<&str> = json["inputs"]
            .as_array()
            .expect("inputs")
            .iter()
            .filter_map(|e| e["path"].as_str())
            .collect();
        assert_eq!(paths, ["a/deep/er/x.txt", "a/z.txt", "a.txt", "b.txt"]);
    }

    #[test]
    fn hostile_file_names_are_escaped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let name = OsStr::from_bytes(b"bad\xff|\x1b[2J\n[x](javascript:e)");
        fs::write(dir.path().join(name), b"x\n").expect("write");
        let (code, json, md) = run(dir.path());
        assert_eq!(code, EXIT_OK);
        let expected = "bad\\xff|\\u{1b}[2J\\u{a}[x](javascript:e)";
        assert_eq!(json["inputs"][0]["path"], expected);
        assert!(md.contains("| bad\\\\xff\\|\\\\u\\{1b\\}\\[2J"));
        assert!(!md.contains("[x](javascript"));
    }

    #[test]
    fn missing_input_dir_is_an_error_entry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (code, json, md) = run(&dir.path().join("missing"));
        assert_eq!(code, EXIT_INPUT_ERRORS);
        assert_eq!(json["errors"], 1);
        assert_eq!(json["inputs"][0]["path"], ".");
        assert!(json["inputs"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("cannot list input directory")));
        assert!(md.contains("**Error:**"));
    }

    #[test]
    fn task_first_line_is_reported() {
        let input = tempfile::tempdir().expect("input");
        let task = tempfile::tempdir().expect("task");
        let out = tempfile::tempdir().expect("out");
        let mut instructions = b"Summarise the *inputs*\x1b[1m\r\nsecond line\n".to_vec();
        instructions.extend(std::iter::repeat_n(b'z', 200_000));
        write(task.path(), "instructions.md", &instructions);
        let opts = ReportOptions {
            input: input.path().to_path_buf(),
            output: out.path().to_path_buf(),
            task: task.path().join("instructions.md"),
        };
        assert_eq!(run_report(&opts), EXIT_OK);
        let md = fs::read_to_string(out.path().join("report.md")).expect("md");
        assert!(md.contains("Task: Summarise the \\*inputs\\*\\\\u\\{1b\\}\\[1m\n"));
        let json: Value = serde_json::from_str(
            &fs::read_to_string(out.path().join("report.json")).expect("json"),
        )
        .expect("valid json");
        assert_eq!(json["task"], "Summarise the *inputs*\\u{1b}[1m");
        assert!(md.contains("No input files."));
    }

    #[test]
    fn unwritable_output_is_exit_2() {
        let input = tempfile::tempdir().expect("input");
        write(input.path(), "a.txt", b"a\n");
        let opts = ReportOptions {
            input: input.path().to_path_buf(),
            output: input.path().join("a.txt/not-a-dir"),
            task: input.path().join("none"),
        };
        assert_eq!(run_report(&opts), EXIT_OUTPUT_FAILED);
    }

    #[test]
    fn planted_symlink_in_output_is_replaced_not_followed() {
        let input = tempfile::tempdir().expect("input");
        let out = tempfile::tempdir().expect("out");
        let victim = tempfile::tempdir().expect("victim");
        write(victim.path(), "v", b"keep\n");
        symlink(victim.path().join("v"), out.path().join("report.md")).expect("symlink");
        let opts = ReportOptions {
            input: input.path().to_path_buf(),
            output: out.path().to_path_buf(),
            task: input.path().join("none"),
        };
        assert_eq!(run_report(&opts), EXIT_OK);
        assert_eq!(
            fs::read(victim.path().join("v")).expect("victim"),
            b"keep\n"
        );
        let meta = fs::symlink_metadata(out.path().join("report.md")).expect("meta");
        assert!(meta.file_type().is_file());
    }
}
