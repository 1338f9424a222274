//! Batch: many documents, one session (one container) each, at most N at once.
//!
//! A batch reuses one engine connection and resolves images once; documents run through
//! `buffer_unordered`, so the next container is being created while others run. Its record
//! (`.golem/batches/<id>.json`) is rewritten atomically after every document, so a cancelled
//! or crashed batch knows exactly what finished, and `--resume` runs only the rest. A document
//! that crashes, times out or is OOM-killed is recorded and quarantined; the others go on.

use std::path::Path;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::audit::{self, Audit};
use crate::engine::Engine;
use crate::extract::{ExtractedFile, Rejected};
use crate::gateway::{BatchBudget, ModelUsage};
use crate::home::{self, write_atomic, Home};
use crate::intake::{self, FileId, InputRecord, Source};
use crate::session::{self, Images, Outcome, RunOptions, SessionError};
use crate::spec::RunSpec;
use crate::stage::{self, Manifest, Stage, StageError, Status};

/// The batch's counts, computed in [`crate::outcome`] with the rest of how endings read.
pub use crate::outcome::Summary;

mod index;

/// Where a document is in the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DocStatus {
    /// Not started yet (or cancelled before it started).
    Pending,
    /// Its session is running.
    Running,
    /// Its output is staged and its worker exited 0.
    Staged,
    /// Its output is staged but its worker exited non-zero.
    Partial,
    /// Its session failed (bad input, engine error, crash).
    Failed,
    /// Killed at its timeout.
    Timeout,
    /// Killed for memory.
    Oom,
    /// Its output broke the policy's caps as a whole.
    Rejected,
    /// Stopped by a cancel while running; runs again on resume.
    Cancelled,
}

impl DocStatus {
    /// Whether `--resume` should run a document in this state again (a failed one only when
    /// the failure was not the document's: see [`Document::needs_run`]).
    pub fn needs_run(self) -> bool {
        matches!(
            self,
            DocStatus::Pending | DocStatus::Running | DocStatus::Cancelled
        )
    }

    /// The lowercase word.
    pub fn as_str(self) -> &'static str {
        match self {
            DocStatus::Pending => "pending",
            DocStatus::Running => "running",
            DocStatus::Staged => "staged",
            DocStatus::Partial => "partial",
            DocStatus::Failed => "failed",
            DocStatus::Timeout => "timeout",
            DocStatus::Oom => "oom",
            DocStatus::Rejected => "rejected",
            DocStatus::Cancelled => "cancelled",
        }
    }
}

/// One document of a batch.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Document {
    /// The path or URL.
    pub source: String,
    /// Its folder in a `--stage-as-one` commit (unique in the batch).
    pub folder: String,
    /// Where it is.
    pub status: DocStatus,
    /// Its session, once started.
    pub session: Option<String>,
    /// Its staged commit.
    pub staged: Option<String>,
    /// Its worker's exit code.
    pub exit_code: Option<i64>,
    /// What went wrong.
    pub error: Option<String>,
    /// Files staged.
    pub files: usize,
    /// Bytes staged.
    pub bytes: u64,
    /// Entries rejected.
    pub rejected: u64,
    /// It failed for a reason outside the document (the engine went away, the host's disk was
    /// full), so `--resume` runs it again.
    #[serde(default)]
    pub retry: bool,
    /// A local document as it was listed: its turn re-opens exactly this file (no-follow,
    /// same identity) and refuses anything swapped in meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<Pinned>,
    /// Its session's use of the model gateway (AI workers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelUsage>,
    /// The warnings its report worker claims (absent for other workers and older records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnings: Option<crate::warnings::WarningSummary>,
}

/// Where a listed document is and which file it was, so it is never re-resolved by path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pinned {
    /// The path the person named.
    pub root: std::path::PathBuf,
    /// Components below `root` (empty when the person named the file).
    pub rel: Vec<String>,
    /// Device and inode when listed.
    pub id: FileId,
}

impl Pinned {
    /// The source a session takes in.
    pub fn source(&self) -> Source {
        Source::Listed {
            root: self.root.clone(),
            rel: self.rel.clone(),
            id: self.id,
        }
    }
}

impl Document {
    /// Whether `--resume` runs this document: it never reached an outcome, or it failed for a
    /// reason that was not its own.
    pub fn needs_run(&self) -> bool {
        self.status.needs_run() || (self.status == DocStatus::Failed && self.retry)
    }
}

/// What the batch was asked to do, kept so `--resume` runs the rest the same way.
///
/// The spec is flattened, so the record's JSON keeps the field names it always had and
/// records written before [`RunSpec`] existed load unchanged.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settings {
    /// What each document runs, as the person asked for it.
    #[serde(flatten)]
    pub spec: RunSpec,
    /// Containers at once.
    pub jobs: usize,
    /// One staged commit for the whole batch.
    pub stage_as_one: bool,
}

/// Overall state of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BatchState {
    /// Running (or its orchestrator died; resume it).
    Running,
    /// Every document reached an outcome.
    Finished,
    /// Stopped by a cancel; resume runs the rest.
    Cancelled,
}

/// The batch record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// Batch id.
    pub id: String,
    /// When it was created.
    pub created_at: String,
    /// Last change.
    pub updated_at: String,
    /// State.
    pub state: BatchState,
    /// Settings.
    pub settings: Settings,
    /// Documents in order.
    pub documents: Vec<Document>,
    /// Links inside input folders, left out of the batch and never followed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<intake::Skipped>,
    /// Documents whose staged commit was not merged into the combined one because it had been
    /// pushed or discarded on its own meanwhile (`--stage-as-one`): `(source, its status)`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<(String, String)>,
    /// The combined staged commit (`--stage-as-one`).
    pub staged: Option<String>,
}

impl BatchState {
    /// The lowercase word used in JSON and listings.
    pub fn as_str(self) -> &'static str {
        match self {
            BatchState::Running => "running",
            BatchState::Finished => "finished",
            BatchState::Cancelled => "cancelled",
        }
    }
}

/// Why a batch could not run.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// A session-level failure that stops the whole batch (e.g. the image is missing).
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The stage failed while merging.
    #[error(transparent)]
    Stage(#[from] StageError),
    /// The audit log failed.
    #[error(transparent)]
    Audit(#[from] audit::AuditError),
    /// Inputs could not be listed.
    #[error(transparent)]
    Intake(#[from] intake::IntakeError),
    /// The record could not be read or written.
    #[error("batch record {path}: {message}")]
    Record {
        /// The file.
        path: String,
        /// What failed.
        message: String,
    },
    /// Nothing to do.
    #[error("no documents found in the given inputs")]
    Empty,
    /// `--stage-as-one` would fold transcripts away; each document keeps its own instead.
    #[error("--stage-as-one is not available for AI workers: each document's staged commit keeps its own model transcript for review; run the batch without it{0}")]
    StageAsOneWithModel(String),
    /// A batch id that matches no record, or several.
    #[error(transparent)]
    Home(#[from] crate::home::HomeError),
}

/// Receives progress as documents start and finish (a progress bar, plain lines, or nothing).
pub trait Progress: Send + Sync {
    /// A document's session is starting.
    fn started(&self, doc: &Document);
    /// A document reached an outcome; `done` of `total` are finished.
    fn finished(&self, doc: &Document, done: usize, total: usize);
}

/// Where batch records live.
pub fn dir(home: &Home) -> std::path::PathBuf {
    home.root().join("batches")
}

/// Loads a batch record by id or unique prefix.
pub fn load(home: &Home, id: &str) -> Result<Record, BatchError> {
    let d = dir(home);
    home::create_private_dir_all(&d).map_err(|e| record_err(&d, e))?;
    let full = home::resolve_id_in(&d, id, "batch record", ".json")?;
    let path = d.join(format!("{full}.json"));
    let text = std::fs::read(&path).map_err(|e| record_err(&path, e))?;
    serde_json::from_slice(&text).map_err(|e| record_err(&path, e))
}

fn record_err(path: &Path, e: impl std::fmt::Display) -> BatchError {
    BatchError::Record {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

fn save(home: &Home, record: &Record) -> Result<(), BatchError> {
    let d = dir(home);
    home::create_private_dir_all(&d).map_err(|e| record_err(&d, e))?;
    let path = d.join(format!("{}.json", record.id));
    let json = serde_json::to_vec_pretty(record).map_err(|e| record_err(&path, e))?;
    write_atomic(&path, &json).map_err(|e| record_err(&path, e))
}

/// Expands inputs into documents: files as given, directories recursively (links skipped,
/// never followed; refused under `strict`), URLs as given. Local files are listed by fd,
/// no-follow, and pinned by identity; every path component is checked. Folder names are unique
/// in the batch.
pub fn documents(
    inputs: &[String],
    strict: bool,
) -> Result<(Vec<Document>, Vec<intake::Skipped>), BatchError> {
    let mut out: Vec<Document> = Vec::new();
    let mut skipped: Vec<intake::Skipped> = Vec::new();
    let mut folders: Vec<String> = Vec::new();
    let mut push = |source: String, name: String, pinned: Option<Pinned>| {
        let mut folder = sanitize(&name);
        let base = folder.clone();
        let mut n = 2;
        // `index.md` is the combined commit's own (see [`index`]), in any case.
        while folders.contains(&folder) || folder.eq_ignore_ascii_case(index::INDEX) {
            folder = format!("{base}-{n}");
            n += 1;
        }
        folders.push(folder.clone());
        out.push(Document {
            source,
            folder,
            status: DocStatus::Pending,
            session: None,
            staged: None,
            exit_code: None,
            error: None,
            files: 0,
            bytes: 0,
            rejected: 0,
            retry: false,
            pinned,
            model: None,
            warnings: None,
        });
    };
    for source in intake::classify(inputs)? {
        match source {
            Source::File(p) => {
                let (_, st) = intake::open_listed(&p, &[], None)?;
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let pinned = Pinned {
                    root: p.clone(),
                    rel: Vec::new(),
                    id: FileId::of(&st),
                };
                push(p.display().to_string(), name, Some(pinned));
            }
            Source::Url(u) => {
                let name = u
                    .path_segments()
                    .and_then(|mut s| s.next_back().map(str::to_string))
                    .unwrap_or_default();
                push(u.to_string(), name, None);
            }
            Source::Dir(root) => {
                let (files, links) = intake::list_files(&root, strict)?;
                skipped.extend(links.into_iter().map(|rel| {
                    let at = rel.iter().fold(root.clone(), |p, c| p.join(c));
                    intake::Skipped {
                        source: at.display().to_string(),
                        name: rel.join("/"),
                        reason: "symbolic link (never followed; --strict refuses it)".into(),
                    }
                }));
                for (rel, id) in files {
                    let shown = rel.iter().fold(root.clone(), |p, c| p.join(c));
                    let pinned = Pinned {
                        root: root.clone(),
                        rel,
                        id,
                    };
                    push(
                        shown.display().to_string(),
                        pinned.rel.join("_"),
                        Some(pinned),
                    );
                }
            }
            listed @ Source::Listed { .. } => {
                push(intake::describe(&listed), String::new(), None);
            }
        }
    }
    if out.is_empty() {
        return Err(BatchError::Empty);
    }
    Ok((out, skipped))
}

/// The documents a `--from` file lists: one path or URL per line, blank lines and `#`
/// comments ignored, surrounding whitespace trimmed.
pub fn listed_inputs(text: &str) -> impl Iterator<Item = String> + '_ {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
}

/// A folder name that passes the extractor's name rules (a leading dot, so `.git` too, is dropped).
fn sanitize(name: &str) -> String {
    intake::safe_name(name, "document")
}

/// A new batch record.
pub fn new_record(
    settings: Settings,
    documents: Vec<Document>,
    skipped: Vec<intake::Skipped>,
) -> Record {
    Record {
        id: home::new_id(),
        created_at: audit::now(),
        updated_at: audit::now(),
        state: BatchState::Running,
        settings,
        documents,
        skipped,
        left_out: Vec::new(),
        staged: None,
    }
}

/// Runs every document that still needs a run. `template` carries the policy and worker; its
/// sources are replaced per document. `cancel` resolving stops launching, cancels running
/// sessions (each removes its own container) and records the batch as cancelled.
pub async fn run(
    home: &Home,
    engine: &dyn Engine,
    mut record: Record,
    mut template: RunOptions,
    images: &Images,
    progress: &dyn Progress,
    cancel: impl std::future::Future<Output = ()>,
) -> Result<Record, BatchError> {
    check_settings(&record.settings, &template)?;
    let audit = Audit::new(home.audit_path());
    record.state = BatchState::Running;
    save(home, &record)?;
    let mut started = json!({ "batch": record.id, "documents": record.documents.len(), "jobs": record.settings.jobs, "trust_level": record.settings.spec.trust_level });
    if let (Some(access), Some(shared)) = (template.model.as_mut(), batch_budget(&record)) {
        started["batch_model_budget"] = json!({ "cap": shared.cap(), "left": shared.left() });
        access.batch_budget = Some(shared);
    }
    audit.record(None, "batch.started", started)?;
    let todo: Vec<usize> = (0..record.documents.len())
        .filter(|&i| record.documents[i].needs_run())
        .collect();
    let total = record.documents.len();
    let jobs = record.settings.jobs.max(1);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let turns = Turns {
        home,
        engine,
        template,
        images,
        progress,
        done: std::sync::atomic::AtomicUsize::new(total - todo.len()),
        total,
        shared: Mutex::new(record),
    };
    let work = futures_util::stream::iter(todo)
        .map(|i| turns.document(i, stop_rx.clone()))
        .buffer_unordered(jobs)
        .collect::<Vec<()>>();
    tokio::pin!(work);
    tokio::pin!(cancel);
    let cancelled = tokio::select! {
        biased;
        _ = &mut work => false,
        () = &mut cancel => {
            let _ = stop_tx.send(true);
            // Let running sessions notice and clean up their containers.
            work.await;
            true
        }
    };
    let record = lock(&turns.shared).clone();
    conclude(home, &audit, record, cancelled)
}

/// The batch's shared model budget (`--batch-model-budget`), less what the record says its
/// documents already spent: a resumed batch goes on with what is left, never a fresh cap.
pub fn batch_budget(record: &Record) -> Option<Arc<BatchBudget>> {
    let cap = record.settings.spec.batch_model_budget?;
    Some(Arc::new(BatchBudget::new(cap, record.model_tokens_spent())))
}

impl Record {
    /// Model tokens (input and output) its documents were charged, as recorded.
    pub fn model_tokens_spent(&self) -> u64 {
        self.documents
            .iter()
            .filter_map(|d| d.model)
            .fold(0u64, |sum, m| {
                sum.saturating_add(m.input_tokens)
                    .saturating_add(m.output_tokens)
            })
    }
}

/// Refuses what a batch cannot do faithfully, before anything runs: `--stage-as-one` for an AI
/// worker would fold each document's transcript away, so each document keeps its own commit.
pub fn check_settings(settings: &Settings, template: &RunOptions) -> Result<(), BatchError> {
    if settings.stage_as_one && template.model.is_some() {
        return Err(BatchError::StageAsOneWithModel(String::new()));
    }
    Ok(())
}

/// What every document's turn shares: the engine, the resolved session template and the record.
struct Turns<'a> {
    home: &'a Home,
    engine: &'a dyn Engine,
    template: RunOptions,
    images: &'a Images,
    progress: &'a dyn Progress,
    /// Documents with an outcome so far.
    done: std::sync::atomic::AtomicUsize,
    total: usize,
    shared: Mutex<Record>,
}

impl Turns<'_> {
    /// Runs document `i` to its outcome (unless `stop` is already set) and saves the record.
    async fn document(&self, i: usize, mut stop: tokio::sync::watch::Receiver<bool>) {
        if *stop.borrow() {
            return;
        }
        let doc = {
            let mut r = lock(&self.shared);
            r.documents[i].status = DocStatus::Running;
            r.documents[i].retry = false;
            r.documents[i].clone()
        };
        self.progress.started(&doc);
        // A listed file is re-opened exactly as listed, never re-resolved by its path.
        let sources = match &doc.pinned {
            Some(p) => Ok(vec![p.source()]),
            None => intake::classify(std::slice::from_ref(&doc.source)),
        };
        let sources = match sources {
            Ok(s) => s,
            Err(e) => {
                let doc = {
                    let mut r = lock(&self.shared);
                    let d = &mut r.documents[i];
                    d.status = DocStatus::Failed;
                    d.session = None;
                    d.error = Some(e.to_string());
                    d.clone()
                };
                self.finished(&doc);
                return;
            }
        };
        let opts = RunOptions {
            sources,
            ..self.template.clone()
        };
        let cancelled = async move {
            let _ = stop.wait_for(|v| *v).await;
        };
        let outcome =
            session::run_resolved(self.home, self.engine, opts, self.images, cancelled).await;
        let snapshot = {
            let mut r = lock(&self.shared);
            record_outcome(&mut r.documents[i], outcome);
            r.updated_at = audit::now();
            r.clone()
        };
        // A record that cannot be saved is logged, not fatal: the sessions themselves are recorded.
        if let Err(e) = save(self.home, &snapshot) {
            tracing::warn!("{e}");
        }
        if snapshot.documents[i].status != DocStatus::Cancelled {
            self.finished(&snapshot.documents[i]);
        }
    }

    /// Counts a document as finished and reports it.
    fn finished(&self, doc: &Document) {
        let n = self.done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        self.progress.finished(doc, n, self.total);
    }
}

/// Writes a session's ending into its document.
fn record_outcome(d: &mut Document, outcome: Result<Outcome, SessionError>) {
    match outcome {
        Ok(o) => {
            d.status = o.doc_status();
            d.session = Some(o.session);
            d.staged = o.staged;
            d.exit_code = o.exit_code;
            d.error = o.error;
            d.files = o.files;
            d.bytes = o.bytes;
            d.rejected = o.rejected;
            d.retry = o.host_failure;
            // A document run again (after a cancel or a host failure) keeps what its earlier
            // sessions spent too: the batch's model budget is charged for every attempt.
            d.model = ModelUsage::sum(d.model, o.model);
            d.warnings = o.warnings;
        }
        Err(e) => {
            d.status = DocStatus::Failed;
            d.retry = e.is_host_failure();
            d.error = Some(e.to_string());
        }
    }
}

/// Records how the batch ended: documents still running were cancelled; a finished
/// `--stage-as-one` batch gets its combined commit.
fn conclude(
    home: &Home,
    audit: &Audit,
    mut record: Record,
    cancelled: bool,
) -> Result<Record, BatchError> {
    for d in record
        .documents
        .iter_mut()
        .filter(|d| d.status == DocStatus::Running)
    {
        d.status = DocStatus::Cancelled;
    }
    record.state = if cancelled {
        BatchState::Cancelled
    } else {
        BatchState::Finished
    };
    if !cancelled && record.settings.stage_as_one && record.staged.is_none() {
        record.staged = merge(home, audit, &mut record)?;
    }
    record.updated_at = audit::now();
    save(home, &record)?;
    audit.record(
        None,
        "batch.finished",
        json!({ "batch": record.id, "state": record.state, "summary": record.summary(), "staged": record.staged }),
    )?;
    Ok(record)
}

fn lock(shared: &Mutex<Record>) -> std::sync::MutexGuard<'_, Record> {
    // A poisoned lock means a panic elsewhere; the data is still the best record we have.
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// The parts of a combined commit, gathered document by document.
#[derive(Default)]
struct Combined {
    inputs: Vec<InputRecord>,
    files: Vec<ExtractedFile>,
    rejected: Vec<Rejected>,
    omitted: u64,
    warnings: Option<crate::warnings::WarningSummary>,
}

/// Combines every staged document into one staged commit with a folder per document and a top
/// index of the batch's documents, and marks the per-document commits merged into it: they stay
/// listed as their documents' records, and only the combined commit is pushed. Files are
/// copied through [`Stage::read_verified`].
fn merge(home: &Home, audit: &Audit, record: &mut Record) -> Result<Option<String>, BatchError> {
    let stage = Stage::new(home.staged_dir());
    let id = record.id.clone();
    // Under the stage lock throughout: a part cannot be pushed or discarded while it is merged.
    let mut lock = stage.lock()?;
    let anchored = audit.staged_manifest_hashes()?;
    if stage.dir(&id).exists() {
        // An earlier merge got as far as publishing the combined commit and crashed before its
        // batch record said so: keep it only if the audit log anchors it, else build it again.
        if anchored.contains_key(&id) {
            return Ok(Some(id));
        }
        std::fs::remove_dir_all(stage.dir(&id)).map_err(|e| record_err(&stage.dir(&id), e))?;
    }
    let (parts, left_out) = mergeable_parts(&stage, audit, record, &id)?;
    record.left_out = left_out;
    if parts.is_empty() {
        return Ok(None);
    }
    // The parts become merged before the combined commit exists, so no crash can leave a file
    // pushable twice (once in its part, once in the combined commit); a resume finds them merged
    // into this id and finishes the combined commit.
    for (_, staged, pending) in &parts {
        if *pending {
            let merged = Status::Merged {
                into: id.clone(),
                at: audit::now(),
            };
            stage.transition_locked(&mut lock, staged, &merged)?;
            audit.record(
                Some(staged),
                "stage.merged",
                json!({ "staged": staged, "into": id }),
            )?;
        }
    }
    let building = stage.begin(&id)?;
    let files_dir = building.files_dir();
    let mut combined = Combined::default();
    let mut first: Option<Manifest> = None;
    // Each part must be anchored like a push would require: a staging record with a valid MAC
    // in an intact chain, matching its manifest. Otherwise a forged part (or a batch record
    // pointing at one) would be laundered into a genuinely audited combined commit.
    for (folder, staged, _) in &parts {
        let m = copy_part(&stage, &anchored, folder, staged, &files_dir, &mut combined)?;
        first.get_or_insert(m);
    }
    let Some(first) = first else { return Ok(None) };
    add_index(&id, record, &files_dir, &mut combined)?;
    let manifest = combined_manifest(&id, &first, combined);
    building.commit(&manifest)?;
    let manifest_sha256 = stage::manifest_sha256(&stage, &id)?;
    audit.record(
        Some(&id),
        "batch.staged",
        json!({ "staged": id, "documents": parts.len(), "files": manifest.files.len(), "bytes": manifest.bytes, "manifest_sha256": manifest_sha256 }),
    )?;
    drop(lock);
    Ok(Some(id))
}

/// The documents' staged commits that may go into the combined commit `id`, as `(folder, id,
/// still pending)`: pending ones, and ones an interrupted merge already marked merged into `id`;
/// and the documents left out, as `(source, status)`. A part pushed, discarded or
/// merged elsewhere since (a cancelled batch's parts are listed and reviewable) is left out and
/// audited, never copied: its files would otherwise be pushable twice or come back after a
/// discard.
fn mergeable_parts(
    stage: &Stage,
    audit: &Audit,
    record: &Record,
    id: &str,
) -> Result<MergeableParts, BatchError> {
    let mut parts = Vec::new();
    let mut left_out = Vec::new();
    for d in &record.documents {
        let Some(staged) = &d.staged else { continue };
        match stage.status(staged)? {
            Status::Pending => parts.push((d.folder.clone(), staged.clone(), true)),
            Status::Merged { into, .. } if into == id => {
                parts.push((d.folder.clone(), staged.clone(), false));
            }
            other => {
                audit.record(
                    Some(staged),
                    "batch.part_left_out",
                    json!({ "staged": staged, "batch": id, "status": other.word() }),
                )?;
                left_out.push((d.source.clone(), other.word().to_string()));
            }
        }
    }
    Ok((parts, left_out))
}

/// What [`mergeable_parts`] finds: the parts to merge and the documents left out.
type MergeableParts = (Vec<(String, String, bool)>, Vec<(String, String)>);

/// Writes the batch's top index (see [`index`]) beside the document folders, under a name no
/// folder takes, and adds it to the combined commit's files.
fn add_index(
    id: &str,
    record: &Record,
    files_dir: &Path,
    combined: &mut Combined,
) -> Result<(), BatchError> {
    use sha2::{Digest, Sha256};
    let name = index::name(record.documents.iter().map(|d| d.folder.as_str()));
    let text = index::render(id, record);
    let dest = files_dir.join(&name);
    std::fs::write(&dest, &text).map_err(|e| record_err(&dest, e))?;
    combined.files.push(ExtractedFile {
        path: name,
        size: text.len() as u64,
        sha256: hex::encode(Sha256::digest(text.as_bytes())),
    });
    Ok(())
}

/// Copies one anchored, verified staged commit into `folder` of the combined commit.
fn copy_part(
    stage: &Stage,
    anchored: &std::collections::HashMap<String, String>,
    folder: &str,
    staged: &str,
    files_dir: &Path,
    combined: &mut Combined,
) -> Result<Manifest, BatchError> {
    let (m, sha256) = stage.manifest_with_sha256(staged)?;
    if m.model.is_some() {
        // Never fold a transcript away silently (see [`BatchError::StageAsOneWithModel`]).
        return Err(BatchError::StageAsOneWithModel(format!(
            " ({folder} has one)"
        )));
    }
    if anchored.get(staged) != Some(&sha256) {
        return Err(StageError::Tampered {
            id: staged.to_string(),
            what: "its manifest does not match a verified audit record of staging it".into(),
        }
        .into());
    }
    stage.verify_layout(staged, &m)?;
    for f in &m.files {
        let data = stage.read_verified(staged, f)?;
        let path = format!("{folder}/{}", f.path);
        let dest = files_dir.join(&path);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(|e| record_err(parent, e))?;
        }
        std::fs::write(&dest, &data).map_err(|e| record_err(&dest, e))?;
        combined.files.push(ExtractedFile {
            path,
            size: f.size,
            sha256: f.sha256.clone(),
        });
    }
    combined.inputs.extend(m.inputs.iter().map(|i| InputRecord {
        name: format!("{folder}/{}", i.name),
        ..i.clone()
    }));
    combined
        .rejected
        .extend(m.rejected.iter().map(|r| Rejected {
            path: format!("{folder}/{}", r.path),
            reason: r.reason.clone(),
        }));
    combined.omitted += m.rejected_omitted;
    if let Some(w) = &m.warnings {
        combined.warnings.get_or_insert_default().add(w, folder);
    }
    Ok(m)
}

/// The combined commit's manifest: provenance from the first part, contents from all.
fn combined_manifest(id: &str, first: &Manifest, combined: Combined) -> Manifest {
    let bytes = combined.files.iter().map(|f| f.size).sum();
    Manifest {
        version: 1,
        id: id.to_string(),
        session: id.to_string(),
        created_at: audit::now(),
        trust_level: first.trust_level,
        image: first.image.clone(),
        image_id: first.image_id.clone(),
        command: first.command.clone(),
        exit_code: None,
        inputs: combined.inputs,
        skipped: Vec::new(),
        files: combined.files,
        rejected: combined.rejected,
        rejected_omitted: combined.omitted,
        bytes,
        repo_head: first.repo_head.clone(),
        model: None,
        container: None,
        warnings: combined.warnings,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn documents_expand_directories_and_get_unique_folders() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/x.txt"), "1").unwrap();
        std::fs::write(dir.path().join("a/b/x.txt"), "2").unwrap();
        std::fs::write(dir.path().join("x.txt"), "3").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("a/link")).unwrap();
        let inputs = [
            dir.path().join("a").display().to_string(),
            dir.path().join("x.txt").display().to_string(),
        ];
        let (docs, _) = documents(&inputs, false).unwrap();
        let folders: Vec<&str> = docs.iter().map(|d| d.folder.as_str()).collect();
        assert_eq!(folders, ["b_x.txt", "x.txt", "x.txt-2"]);
        assert!(docs.iter().all(|d| d.status == DocStatus::Pending));
        assert!(matches!(documents(&[], false), Err(BatchError::Empty)));
        // --strict: the link is an error that names it.
        let err = documents(&inputs, true).unwrap_err().to_string();
        assert!(
            err.contains("a/link") && err.contains("symbolic link"),
            "{err}"
        );
    }

    #[test]
    fn a_from_file_lists_one_document_per_line() {
        let text = "# papers\n  a.pdf  \n\nhttps://example.org/b.pdf\n#c.pdf\n";
        let listed: Vec<String> = listed_inputs(text).collect();
        assert_eq!(listed, ["a.pdf", "https://example.org/b.pdf"]);
    }

    #[test]
    fn folder_names_are_safe() {
        assert_eq!(sanitize("../../etc/passwd"), "_.._etc_passwd");
        assert_eq!(sanitize(".git"), "git");
        assert_eq!(sanitize(""), "document");
        assert_eq!(sanitize("a\nb"), "a_b");
    }

    /// A bare document in `status`, for the batch and outcome tests.
    pub(crate) fn doc(status: DocStatus, retry: bool) -> Document {
        Document {
            source: "s".into(),
            folder: "f".into(),
            status,
            session: None,
            staged: None,
            exit_code: None,
            error: None,
            files: 0,
            bytes: 0,
            rejected: 0,
            retry,
            pinned: None,
            model: None,
            warnings: None,
        }
    }

    #[test]
    fn summaries_count_every_outcome() {
        let mut docs = Vec::new();
        let mk = |status| Document {
            files: 1,
            bytes: 10,
            rejected: 2,
            ..doc(status, false)
        };
        for s in [
            DocStatus::Staged,
            DocStatus::Failed,
            DocStatus::Timeout,
            DocStatus::Oom,
            DocStatus::Cancelled,
        ] {
            docs.push(mk(s));
        }
        let r = new_record(
            Settings {
                spec: RunSpec::new(crate::policy::TrustLevel::Untrusted),
                jobs: 2,
                stage_as_one: false,
            },
            docs,
            vec![],
        );
        let s = r.summary();
        assert_eq!(
            (
                s.total,
                s.succeeded,
                s.failed,
                s.timed_out,
                s.oom,
                s.not_run
            ),
            (5, 1, 1, 1, 1, 1)
        );
        assert_eq!((s.rejected_entries, s.bytes_staged), (10, 50));
    }

    #[test]
    fn resume_reruns_unfinished_documents_and_failures_that_were_not_theirs() {
        for status in [DocStatus::Pending, DocStatus::Running, DocStatus::Cancelled] {
            assert!(doc(status, false).needs_run(), "{status:?}");
        }
        assert!(doc(DocStatus::Failed, true).needs_run());
        assert!(!doc(DocStatus::Failed, false).needs_run());
        for status in [
            DocStatus::Staged,
            DocStatus::Partial,
            DocStatus::Timeout,
            DocStatus::Oom,
            DocStatus::Rejected,
        ] {
            assert!(!doc(status, false).needs_run(), "{status:?}");
        }
        // Records written before the field existed read as "not retryable".
        let old = r#"{"source":"s","folder":"f","status":"failed","session":null,"staged":null,
            "exit_code":null,"error":"x","files":0,"bytes":0,"rejected":0}"#;
        let parsed: Document = serde_json::from_str(old).unwrap();
        assert!(!parsed.needs_run());
        assert!(parsed.warnings.is_none());
    }

    #[test]
    fn records_written_before_the_run_spec_still_load() {
        let old = r#"{"id":"b","created_at":"t","updated_at":"t","state":"cancelled",
            "settings":{"trust_level":"session","worker":null,"image":"mine:1","command":["go"],
              "memory":"64MiB","timeout":null,"jobs":3,"stage_as_one":true,
              "allow_private_urls":false},
            "documents":[],"staged":null}"#;
        let r: Record = serde_json::from_str(old).unwrap();
        let s = &r.settings;
        assert_eq!(s.spec.trust_level, crate::policy::TrustLevel::Session);
        assert_eq!(s.spec.image.as_deref(), Some("mine:1"));
        assert_eq!(s.spec.command, ["go"]);
        assert_eq!(s.spec.memory, Some(crate::units::Size(64 << 20)));
        assert_eq!((s.jobs, s.stage_as_one, s.spec.max_input), (3, true, None));
        // And the record written now keeps the old field names, flat.
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["settings"]["trust_level"], "session");
        assert_eq!(v["settings"]["jobs"], 3);
    }

    #[test]
    fn model_use_is_kept_per_document_and_summed() {
        let usage = |requests, refused| ModelUsage {
            requests,
            input_tokens: 100 * requests,
            output_tokens: 10 * requests,
            refused,
        };
        let with = |status, m| Document {
            model: m,
            ..doc(status, false)
        };
        let docs = vec![
            with(DocStatus::Staged, Some(usage(2, 0))),
            with(DocStatus::Partial, Some(usage(3, 1))),
            with(DocStatus::Failed, None),
        ];
        let settings = Settings {
            spec: RunSpec::new(crate::policy::TrustLevel::Untrusted),
            jobs: 1,
            stage_as_one: false,
        };
        let r = new_record(settings.clone(), docs, vec![]);
        assert_eq!(r.summary().model, Some(usage(5, 1)));
        let v = serde_json::to_value(r.summary()).unwrap();
        assert_eq!(v["model"]["input_tokens"], 500);
        // The record keeps each document's use across a resume.
        let back: Record = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(back.documents[1].model, Some(usage(3, 1)));
        // Without model workers the summary says nothing about models.
        let plain = new_record(settings, vec![doc(DocStatus::Staged, false)], vec![]);
        let v = serde_json::to_value(plain.summary()).unwrap();
        assert!(v.get("model").is_none(), "{v}");
    }

    #[test]
    fn a_resumed_batch_goes_on_with_what_its_documents_left_of_the_batch_budget() {
        let usage = |input_tokens, output_tokens| ModelUsage {
            requests: 1,
            input_tokens,
            output_tokens,
            refused: 0,
        };
        let with = |status, m| Document {
            model: m,
            ..doc(status, false)
        };
        let mut settings = Settings {
            spec: RunSpec::new(crate::policy::TrustLevel::Untrusted),
            jobs: 2,
            stage_as_one: false,
        };
        let docs = vec![
            with(DocStatus::Staged, Some(usage(300, 50))),
            with(DocStatus::Cancelled, Some(usage(100, 20))),
            with(DocStatus::Pending, None),
        ];
        // Without the flag there is no shared budget.
        let r = new_record(settings.clone(), docs.clone(), vec![]);
        assert!(batch_budget(&r).is_none());
        settings.spec.batch_model_budget = Some(1000);
        let r = new_record(settings.clone(), docs.clone(), vec![]);
        assert_eq!(r.model_tokens_spent(), 470);
        let shared = batch_budget(&r).unwrap();
        assert_eq!(
            (shared.cap(), shared.spent(), shared.left()),
            (1000, 470, 530)
        );
        // The cap survives the record's round trip, so --resume finds it.
        let back: Record = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(back.settings.spec.batch_model_budget, Some(1000));
        assert_eq!(batch_budget(&back).unwrap().left(), 530);
        // A batch already past its cap resumes with nothing left.
        settings.spec.batch_model_budget = Some(400);
        let r = new_record(settings, docs, vec![]);
        assert_eq!(batch_budget(&r).unwrap().left(), 0);
        // A document run again keeps what its earlier attempt spent.
        let twice = ModelUsage::sum(Some(usage(100, 20)), Some(usage(7, 3))).unwrap();
        assert_eq!(
            (twice.requests, twice.input_tokens, twice.output_tokens),
            (2, 107, 23)
        );
        assert_eq!(ModelUsage::sum(Some(usage(1, 1)), None), Some(usage(1, 1)));
        assert_eq!(ModelUsage::sum(None, Some(usage(2, 2))), Some(usage(2, 2)));
        assert_eq!(ModelUsage::sum(None, None), None);
    }

    #[test]
    fn stage_as_one_is_refused_for_ai_workers_in_one_line() {
        let env = |name: &str| match name {
            "GOLEM_MODEL_API" => Some("openai".to_string()),
            "GOLEM_MODEL_KEY" => Some("k".to_string()),
            "GOLEM_MODEL" => Some("llama3.1".to_string()),
            _ => None,
        };
        let place = crate::spec::Place::default();
        let mut settings = Settings {
            spec: RunSpec {
                worker: Some("agent".into()),
                ..RunSpec::new(crate::policy::TrustLevel::Untrusted)
            },
            jobs: 1,
            stage_as_one: true,
        };
        let template = settings.spec.resolve_in(&place, None, &env).unwrap();
        let err = check_settings(&settings, &template)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--stage-as-one") && err.contains("transcript"),
            "{err}"
        );
        assert!(!err.contains('\n'), "{err}");
        settings.stage_as_one = false;
        assert!(check_settings(&settings, &template).is_ok());
        // Other workers still stage as one.
        settings.stage_as_one = true;
        settings.spec.worker = None;
        let plain = settings.spec.resolve_in(&place, None, &env).unwrap();
        assert!(check_settings(&settings, &plain).is_ok());
    }

    /// A staged part as a session leaves it: one file, committed, anchored in the audit log.
    fn staged_part(home: &Home, audit: &Audit, id: &str) {
        use sha2::{Digest, Sha256};
        let stage = Stage::new(home.staged_dir());
        let b = stage.begin(id).unwrap();
        std::fs::write(b.files_dir().join("r.txt"), b"report").unwrap();
        let m = Manifest {
            version: 1,
            id: id.into(),
            session: id.into(),
            created_at: audit::now(),
            trust_level: crate::policy::TrustLevel::Untrusted,
            image: "img".into(),
            image_id: "sha256:0".into(),
            command: vec![],
            exit_code: Some(0),
            inputs: vec![],
            files: vec![ExtractedFile {
                path: "r.txt".into(),
                size: 6,
                sha256: hex::encode(Sha256::digest(b"report")),
            }],
            rejected: vec![],
            rejected_omitted: 0,
            bytes: 6,
            repo_head: None,
            model: None,
            container: None,
            warnings: None,
            skipped: vec![],
        };
        b.commit(&m).unwrap();
        let sha = stage::manifest_sha256(&stage, id).unwrap();
        audit
            .record(
                Some(id),
                "session.staged",
                json!({ "staged": id, "manifest_sha256": sha }),
            )
            .unwrap();
    }

    fn two_part_batch(home: &Home, audit: &Audit) -> Record {
        let mut docs = Vec::new();
        for (folder, id) in [
            ("a", "aaaa0000aaaa0000aaaa0000aaaa0000"),
            ("b", "bbbb0000bbbb0000bbbb0000bbbb0000"),
        ] {
            staged_part(home, audit, id);
            let mut d = doc(DocStatus::Staged, false);
            d.folder = folder.into();
            d.staged = Some(id.into());
            docs.push(d);
        }
        let mut settings = Settings {
            spec: RunSpec::new(crate::policy::TrustLevel::Untrusted),
            jobs: 1,
            stage_as_one: true,
        };
        settings.stage_as_one = true;
        new_record(settings, docs, vec![])
    }

    #[test]
    fn a_part_pushed_or_discarded_before_the_merge_is_left_out_of_the_combined_commit() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(Some(&dir.path().join("state"))).unwrap();
        let audit = Audit::new(home.audit_path());
        let mut record = two_part_batch(&home, &audit);
        let stage = Stage::new(home.staged_dir());
        // The person discarded part a while the batch was cancelled.
        let discarded = Status::Discarded {
            at: audit::now(),
            pushes: vec![],
        };
        stage
            .transition("aaaa0000aaaa0000aaaa0000aaaa0000", &discarded)
            .unwrap();
        let id = merge(&home, &audit, &mut record).unwrap().unwrap();
        let m = stage.manifest(&id).unwrap();
        let paths: Vec<&str> = m.files.iter().map(|f| f.path.as_str()).collect();
        assert!(paths.contains(&"b/r.txt"), "{paths:?}");
        assert!(!paths.iter().any(|p| p.starts_with("a/")), "{paths:?}");
        assert_eq!(
            stage
                .status("aaaa0000aaaa0000aaaa0000aaaa0000")
                .unwrap()
                .word(),
            "discarded"
        );
        // Not silently: the record and the combined index say which document is missing.
        assert_eq!(
            record.left_out,
            [("s".to_string(), "discarded".to_string())]
        );
        let index = std::fs::read_to_string(stage.dir(&id).join("files").join("index.md")).unwrap();
        assert!(
            index.contains("a (left out: discarded on its own)"),
            "{index}"
        );
        assert!(index.contains("1 staged in this commit"), "{index}");
        assert_eq!(
            stage
                .status("bbbb0000bbbb0000bbbb0000bbbb0000")
                .unwrap()
                .word(),
            "merged"
        );
    }

    #[test]
    fn a_merge_interrupted_after_marking_its_parts_is_finished_by_the_next_one() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(Some(&dir.path().join("state"))).unwrap();
        let audit = Audit::new(home.audit_path());
        let mut record = two_part_batch(&home, &audit);
        let stage = Stage::new(home.staged_dir());
        // As if a merge had marked both parts and died before the combined commit existed.
        for part in [
            "aaaa0000aaaa0000aaaa0000aaaa0000",
            "bbbb0000bbbb0000bbbb0000bbbb0000",
        ] {
            let merged = Status::Merged {
                into: record.id.clone(),
                at: audit::now(),
            };
            stage.transition(part, &merged).unwrap();
        }
        let id = merge(&home, &audit, &mut record).unwrap().unwrap();
        let m = stage.manifest(&id).unwrap();
        assert_eq!(m.files.len(), 3, "two parts and the index: {:?}", m.files);
        // And once published and anchored, a further merge only reports it.
        assert_eq!(merge(&home, &audit, &mut record).unwrap(), Some(id));
    }
}
