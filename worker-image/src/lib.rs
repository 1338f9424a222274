//! golem-worker: the document processor inside golem-orch's locked container.
//!
//! It reads the session's inputs (mounted read-only at `/input`), detects
//! each file's type from its content, extracts its text and structure, and
//! writes reviewable text into `/output`, which the orchestrator downloads
//! and validates afterwards:
//!
//! - `report` mode: `<input>.md` and `<input>.json` per input (title,
//!   metadata, outline, counts, links, summary, warnings, text excerpt);
//! - `text` mode: `<input>.txt` per input;
//! - both: `index.md` and `index.json` listing every input.
//!
//! Robust by design: each input is analysed in its own child process (see
//! [`sandbox`]) with memory, CPU and time limits, so a malformed or hostile
//! file yields an error entry for that input and never loses the others.
//! Everything derived from an input is escaped before it is written (see
//! [`escape`] and [`report::sanitize`]): control, bidi and invisible
//! characters are made visible and Markdown is neutralised. Only text and
//! JSON are written; input bytes are never copied through.
//!
//! `agent` mode ([`agent`]) is an AI worker: it asks a model behind the host's gateway (a Unix
//! socket, the container has no network) what to write, through a few tools confined to the
//! container's own view.
//!
//! The same binary is also PID 1 of every worker container ([`init`]): it
//! runs the worker, kills what the worker left behind and streams the output
//! directory to the host as a tar archive on stdout.

pub mod agent;
pub mod detect;
pub mod escape;
pub mod extract;
pub mod init;
pub mod model;
pub mod outnames;
pub mod report;
pub mod sandbox;
pub mod textstats;
pub mod walk;
pub mod warnings;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

pub use escape::{escape_for_terminal, escape_path, fence_for, markdown_inline};
pub use extract::Mode;

use report::{IndexData, Record, Status};
use sandbox::Limits;

/// The worker's version, printed by `golem-worker version` and recorded in
/// every report so a reviewer knows which worker produced it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where the orchestrator mounts the session's inputs (read-only).
pub const DEFAULT_INPUT: &str = "/input";
/// Where the orchestrator collects the worker's results.
pub const DEFAULT_OUTPUT: &str = "/output";
/// The optional task description the orchestrator may mount.
pub const DEFAULT_TASK: &str = "/task/instructions.md";
/// The binary the per-input children run: this very program, found through
/// procfs so no path lookup (and no shell) is needed.
pub const SELF_EXE: &str = "/proc/self/exe";

/// Exit code: every input was processed and every file written.
pub const EXIT_OK: i32 = 0;
/// Exit code: the output is complete, but at least one input failed (it has
/// an error entry in the index and, where possible, an error report).
pub const EXIT_INPUT_ERRORS: i32 = 1;
/// Exit code: some output could not be written (for example the size-capped
/// output volume is full); the orchestrator must not trust `/output`.
pub const EXIT_OUTPUT_FAILED: i32 = 2;
/// Exit code: the command line could not be understood.
pub const EXIT_USAGE: i32 = 64;

/// The most of the task file that is read.
pub const TASK_LIMIT: usize = 64 * 1024;
/// Bytes of output kept free for the index when budgeting reports.
const INDEX_RESERVE: u64 = 64 * 1024;
/// Index bytes reserved per input.
const INDEX_RESERVE_PER_INPUT: u64 = 1024;

/// Everything `report` and `text` need to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// What to produce.
    pub mode: Mode,
    /// Directory whose files are processed (the session's inputs).
    pub input: PathBuf,
    /// Directory that receives the reports.
    pub output: PathBuf,
    /// Optional task description whose first line heads the index.
    pub task: PathBuf,
    /// Limits for each input's child process.
    pub limits: Limits,
    /// Inputs processed at the same time (each in its own child).
    pub jobs: usize,
    /// Inputs processed at most; the rest are listed as errors.
    pub max_inputs: usize,
    /// Bytes the worker writes at most; past it, report texts are left out,
    /// then reports are not written (the host rejects an oversized output
    /// as a whole, which would lose everything).
    pub max_output_bytes: u64,
    /// The program run for each input (normally [`SELF_EXE`]).
    pub exe: PathBuf,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            mode: Mode::Report,
            input: PathBuf::from(DEFAULT_INPUT),
            output: PathBuf::from(DEFAULT_OUTPUT),
            task: PathBuf::from(DEFAULT_TASK),
            limits: Limits::default(),
            jobs: 1,
            max_inputs: 100,
            max_output_bytes: 24 * 1024 * 1024,
            exe: PathBuf::from(SELF_EXE),
        }
    }
}

/// Writing an output file failed.
#[derive(Debug)]
pub struct OutputError {
    /// The file that could not be written.
    pub path: PathBuf,
    /// The underlying error (for example ENOSPC on a full output volume).
    pub source: io::Error,
}

impl std::fmt::Display for OutputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot write {}: {}", self.path.display(), self.source)
    }
}

impl std::error::Error for OutputError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Creates `path` fresh with `data`: any old file or planted symlink of that
/// name is removed first and `O_EXCL` is used, so nothing outside the output
/// directory can be written through a link. On failure the partial file is
/// removed (best effort): a half report is worse than none.
pub fn write_fresh(path: &Path, data: &[u8]) -> Result<(), OutputError> {
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
        let _ = fs::remove_file(path);
        return Err(fail(e));
    }
    Ok(())
}

/// Replaces `path` atomically: writes a sibling temporary file and renames
/// it over `path`, so a reader (or a kill mid-write) never sees half of it.
fn replace_atomically(path: &Path, data: &[u8]) -> Result<(), OutputError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    write_fresh(&tmp, data)?;
    fs::rename(&tmp, path).map_err(|source| {
        let _ = fs::remove_file(&tmp);
        OutputError {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// Creates the directories of `stem` under `root`, one level at a time,
/// refusing anything on the way that is not a real directory (a planted
/// symlink is never followed).
fn create_parents(root: &Path, stem: &str) -> Result<(), OutputError> {
    let mut dir = root.to_path_buf();
    let mut parts: Vec<&str> = stem.split('/').collect();
    parts.pop();
    for part in parts {
        dir.push(part);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let meta = fs::symlink_metadata(&dir).map_err(|source| OutputError {
                    path: dir.clone(),
                    source,
                })?;
                if !meta.is_dir() {
                    return Err(OutputError {
                        path: dir.clone(),
                        source: io::Error::other("exists and is not a directory"),
                    });
                }
            }
            Err(source) => {
                return Err(OutputError {
                    path: dir.clone(),
                    source,
                })
            }
        }
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
    if let Err(e) = file.take(TASK_LIMIT as u64).read_to_end(&mut buf) {
        return (None, Some(format!("cannot read task file: {e}")));
    }
    let text = String::from_utf8_lossy(&buf);
    let first = text.split('\n').next().unwrap_or_default();
    let first = first.strip_suffix('\r').unwrap_or(first);
    (Some(report::task_line(first)), None)
}

/// The file suffixes one input's outputs get in `mode`.
fn suffixes(mode: Mode) -> &'static [&'static str] {
    match mode {
        Mode::Report => &[".md", ".json"],
        Mode::Text => &[".txt"],
    }
}

/// Shared state of a run.
struct Run<'a> {
    opts: &'a Options,
    task: Option<String>,
    task_error: Option<String>,
    records: Vec<Record>,
    skipped: Vec<walk::Skipped>,
    written: u64,
    output_failed: bool,
}

impl Run<'_> {
    fn write_index(&mut self, complete: bool) {
        let data = IndexData {
            mode: self.opts.mode,
            task: self.task.as_deref(),
            task_error: self.task_error.as_deref(),
            records: &self.records,
            skipped: &self.skipped,
            complete,
        };
        let json = match serde_json::to_string_pretty(&report::index_json(&data)) {
            Ok(j) => j + "\n",
            Err(e) => {
                eprintln!("golem-worker: cannot render index.json: {e}");
                self.output_failed = true;
                return;
            }
        };
        let md = report::index_markdown(&data);
        for (name, bytes) in [("index.json", json.as_bytes()), ("index.md", md.as_bytes())] {
            if let Err(e) = replace_atomically(&self.opts.output.join(name), bytes) {
                eprintln!("golem-worker: {e}");
                self.output_failed = true;
            }
        }
    }

    fn budget_left(&self) -> u64 {
        let reserve = INDEX_RESERVE + INDEX_RESERVE_PER_INPUT * self.records.len() as u64;
        self.opts
            .max_output_bytes
            .saturating_sub(reserve)
            .saturating_sub(self.written)
    }

    /// Writes one input's report files, leaving the text out (and then the
    /// whole report) when the output budget would be exceeded.
    fn write_reports(&mut self, i: usize) {
        let mode = self.opts.mode;
        let Some(stem) = self.records[i].stem.clone() else {
            return;
        };
        let render = |r: &Record, with_text: bool| -> Vec<(String, Vec<u8>)> {
            match mode {
                Mode::Report => {
                    let json =
                        serde_json::to_string_pretty(&report::input_json(r, mode, with_text))
                            .unwrap_or_else(|_| "{}".to_string());
                    vec![
                        (
                            format!("{stem}.md"),
                            report::input_markdown(r, with_text).into_bytes(),
                        ),
                        (format!("{stem}.json"), (json + "\n").into_bytes()),
                    ]
                }
                Mode::Text => {
                    let keep = r.analysis.as_ref().is_some_and(|a| {
                        a.doc_type != model::DocType::Binary
                            && (r.status == Status::Ok || !a.text.is_empty())
                    });
                    if keep && with_text {
                        vec![(format!("{stem}.txt"), report::text_file(r).into_bytes())]
                    } else {
                        Vec::new()
                    }
                }
            }
        };
        let size =
            |files: &[(String, Vec<u8>)]| files.iter().map(|(_, b)| b.len() as u64).sum::<u64>();
        let mut files = render(&self.records[i], true);
        if size(&files) > self.budget_left() {
            self.records[i].text_omitted = Some(format!(
                "output budget of {} bytes (--max-output-bytes) reached",
                self.opts.max_output_bytes
            ));
            files = render(&self.records[i], false);
            if size(&files) > self.budget_left() || mode == Mode::Text {
                let msg = format!(
                    "report not written: the output budget of {} bytes (--max-output-bytes) is used up",
                    self.opts.max_output_bytes
                );
                self.records[i].fail(&msg);
                return;
            }
        }
        if files.is_empty() {
            return;
        }
        if let Err(e) = create_parents(&self.opts.output, &stem) {
            eprintln!("golem-worker: {e}");
            self.records[i].fail(&format!("report not written: {e}"));
            self.output_failed = true;
            return;
        }
        let mut written = Vec::new();
        for (name, bytes) in &files {
            if let Err(e) = write_fresh(&self.opts.output.join(name), bytes) {
                eprintln!("golem-worker: {e}");
                for w in &written {
                    let _ = fs::remove_file(self.opts.output.join(w));
                }
                self.records[i].files.clear();
                self.records[i].fail(&format!("report not written: {}", e.source));
                self.output_failed = true;
                return;
            }
            self.written += bytes.len() as u64;
            written.push(name.clone());
        }
        self.records[i].files = written;
    }
}

/// The broad kind a file name's extension claims, and the kind a detected
/// type is; `None` for extensions that claim nothing in particular.
fn claimed_kind(rel: &Path) -> Option<(&'static str, String)> {
    let ext = rel.extension()?.to_str()?.to_ascii_lowercase();
    let kind = match ext.as_str() {
        "pdf" => "pdf",
        "docx" | "docm" | "dotx" => "docx",
        "html" | "htm" | "xhtml" => "html",
        "txt" | "md" | "markdown" | "csv" | "tsv" | "json" | "text" | "log" => "text",
        _ => return None,
    };
    Some((kind, ext))
}

fn content_kind(t: model::DocType) -> &'static str {
    use model::DocType as D;
    match t {
        D::Pdf => "pdf",
        D::Docx => "docx",
        D::Html => "html",
        D::Markdown | D::Text | D::Json | D::Csv => "text",
        D::Binary => "binary",
        D::Unknown => "unknown",
    }
}

/// Warns when the name claims a different kind of file than the content is
/// (a "PDF" that is an executable, "notes.txt" that is HTML): the content
/// decided how it was analysed, but a reviewer should know about the
/// disguise.
fn check_name(rel: &Path, a: &mut model::Analysis) {
    let Some((claimed, ext)) = claimed_kind(rel) else {
        return;
    };
    let actual = content_kind(a.doc_type);
    if claimed != actual && a.doc_type != model::DocType::Unknown {
        a.warnings.push(model::Warning::new(
            model::WarningKind::TypeMismatch,
            model::Severity::Medium,
            format!(
                "the name ends in .{} but the content is {}",
                escape::display_chars(&ext, 10, false),
                a.doc_type.as_str(),
            ),
        ));
        a.warnings_total += 1;
    }
}

/// Processes one input: hash it, analyse it in a child, and fill in its
/// record (the report files are written by the caller).
fn process(found: &walk::Found, opts: &Options, record: &mut Record) {
    let opened = match walk::open_and_hash(found) {
        Ok(o) => o,
        Err(e) => {
            record.size = Some(found.meta.len());
            record.fail(&format!("cannot read: {e}"));
            return;
        }
    };
    record.size = Some(opened.size);
    record.sha256 = Some(opened.sha256);
    match sandbox::run_child(&opts.exe, opened.file, opened.size, opts.mode, &opts.limits) {
        Ok(a) => {
            let mut a = report::sanitize(a, opts.mode);
            check_name(&found.rel, &mut a);
            match &a.error {
                Some(e) => {
                    let e = e.clone();
                    record.fail(&e);
                }
                None => record.status = Status::Ok,
            }
            record.analysis = Some(a);
        }
        Err(msg) => record.fail(&msg),
    }
}

/// Runs `report` or `text`: walks the input, processes every file in a
/// child process, writes the per-input files and the index, and returns the
/// exit code ([`EXIT_OK`], [`EXIT_INPUT_ERRORS`] or [`EXIT_OUTPUT_FAILED`]).
/// The index is rewritten after every input, so a run stopped from outside
/// still leaves an index of what was done.
pub fn run(opts: &Options) -> i32 {
    let started = Instant::now();
    let (task, task_error) = read_task(&opts.task);
    let walked = walk::walk(&opts.input);
    let mut namer = outnames::Namer::new(&["index.md", "index.json"]);
    let mut records = Vec::new();
    for e in &walked.errors {
        let mut r = Record::pending(e.path.clone(), None);
        r.fail(&e.message);
        records.push(r);
    }
    let first_file = records.len();
    for (n, f) in walked.files.iter().enumerate() {
        let mut r = Record::pending(f.shown.clone(), None);
        if n < opts.max_inputs {
            r.stem = Some(namer.assign(&f.rel, n + 1, suffixes(opts.mode)));
        } else {
            r.size = Some(f.meta.len());
            r.fail(&format!(
                "not processed: more than {} inputs (--max-inputs)",
                opts.max_inputs
            ));
        }
        records.push(r);
    }
    let state = Mutex::new(Run {
        opts,
        task,
        task_error,
        records,
        skipped: walked.skipped.clone(),
        written: 0,
        output_failed: false,
    });
    if let Ok(mut st) = state.lock() {
        st.write_index(false);
        if st.output_failed {
            eprintln!("golem-worker: the output directory is not writable; giving up");
            return EXIT_OUTPUT_FAILED;
        }
    }

    let todo: Vec<usize> = (0..walked.files.len().min(opts.max_inputs)).collect();
    let next = AtomicUsize::new(0);
    let jobs = opts.jobs.clamp(1, 8).min(todo.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::SeqCst);
                let Some(&n) = todo.get(k) else { break };
                let found = &walked.files[n];
                let t0 = Instant::now();
                let mut record = Record::pending(found.shown.clone(), None);
                process(found, opts, &mut record);
                let Ok(mut st) = state.lock() else { break };
                let i = first_file + n;
                record.stem = st.records[i].stem.take();
                st.records[i] = record;
                st.write_reports(i);
                let r = &st.records[i];
                eprintln!(
                    "golem-worker: {}: {}, {}{} ({} ms)",
                    r.path,
                    r.analysis.as_ref().map_or("-", |a| a.doc_type.as_str()),
                    r.status.as_str(),
                    r.analysis
                        .as_ref()
                        .map(|a| format!(", {} warning(s)", a.warnings_total))
                        .unwrap_or_default(),
                    t0.elapsed().as_millis()
                );
                st.write_index(false);
            });
        }
    });

    let Ok(mut st) = state.into_inner() else {
        return EXIT_OUTPUT_FAILED;
    };
    st.write_index(true);
    let errors = st.records.iter().filter(|r| r.status != Status::Ok).count();
    eprintln!(
        "golem-worker: {} {} input(s), {} error(s), {} skipped, {} bytes written into {} in {} ms",
        opts.mode.as_str(),
        st.records.len(),
        errors,
        st.skipped.len(),
        st.written,
        opts.output.display(),
        started.elapsed().as_millis()
    );
    if st.output_failed {
        eprintln!(
            "golem-worker: some output could not be written; do not trust the output directory"
        );
        EXIT_OUTPUT_FAILED
    } else if errors > 0 {
        EXIT_INPUT_ERRORS
    } else {
        EXIT_OK
    }
}
