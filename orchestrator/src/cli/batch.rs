//! `golem-orch batch`: a new batch from its inputs or an earlier one from its record, run
//! with progress on stderr, then its summary.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use serde_json::json;

use golem_orch::batch::{self, Record};
use golem_orch::home;
use golem_orch::render::{self, line};
use golem_orch::spec::Place;
use golem_orch::{engine, gc, session};

use super::args::BatchArgs;
use super::{infoln, open_home, present, print_json, shutdown_signal};

/// `golem-orch batch`: a new batch, or `--resume` of an earlier one.
pub(super) async fn batch_cmd(
    home_arg: Option<&Path>,
    policy_dir: Option<&Path>,
    args: BatchArgs,
) -> Result<ExitCode> {
    if args.dry_run {
        return super::run::batch_dry_run(
            home_arg,
            policy_dir,
            &new_record(&args)?,
            args.json.json,
        );
    }
    let home = open_home(home_arg)?;
    let record = match &args.resume {
        Some(id) => batch::load(&home, id)?,
        None => new_record(&args)?,
    };
    // The same spec the first run resolved: a resumed batch runs the rest exactly the same way.
    let template = record.settings.spec.resolve(&Place::here(policy_dir))?;
    batch::check_settings(&record.settings, &template)?;
    let (engine, _) = engine::connect().await?;
    if let Err(e) = gc::collect(&engine, &home, gc::Scope::Home).await {
        tracing::warn!("gc before batch failed: {e}");
    }
    let images = session::resolve_images(&engine, &template).await?;
    let pending = record.documents.iter().filter(|d| d.needs_run()).count();
    infoln!(
        "batch {}: {} document(s) to run, {} at a time",
        present::batch_id(&home, &record.id),
        pending,
        record.settings.jobs
    );
    present::skipped_links(&record.skipped);
    let progress = BatchProgress::new(record.documents.len(), record.documents.len() - pending);
    let record = batch::run(
        &home,
        &engine,
        record,
        template,
        &images,
        &progress,
        shutdown_signal(),
    )
    .await?;
    progress.done();
    report(&home, &record, args.json.json)
}

/// A new batch's record: its documents listed and pinned, and what each runs.
fn new_record(args: &BatchArgs) -> Result<Record> {
    let mut inputs = args.inputs.clone();
    if let Some(from) = &args.from {
        let text =
            std::fs::read_to_string(from).with_context(|| format!("reading {}", from.display()))?;
        inputs.extend(batch::listed_inputs(&text));
    }
    if inputs.is_empty() {
        bail!("nothing to process: give files, directories, URLs or --from FILE (see golem-orch batch --help)");
    }
    let (documents, skipped) = batch::documents(&inputs, args.intake.strict)?;
    let mut spec = args.worker.spec(&args.intake, &args.command)?;
    spec.batch_model_budget = args.batch_model_budget;
    let settings = batch::Settings {
        spec,
        jobs: args
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
            .max(1),
        stage_as_one: args.stage_as_one,
    };
    Ok(batch::new_record(settings, documents, skipped))
}

/// Prints the batch's outcome and picks its exit code.
fn report(home: &home::Home, record: &Record, json: bool) -> Result<ExitCode> {
    let summary = record.summary();
    if json {
        print_json(
            &json!({ "batch": record.id, "state": record.state, "staged": record.staged, "summary": summary, "documents": record.documents, "skipped": record.skipped, "left_out": record.left_out }),
        )?;
    } else {
        present::batch_summary(home, record);
    }
    Ok(ExitCode::from(record.exit_code()))
}

/// Progress for a batch: a bar on a terminal, one line per finished document otherwise; both
/// through the rendering gate (`render::Progress` renders every message and line).
struct BatchProgress {
    bar: render::Progress,
}

impl BatchProgress {
    fn new(total: usize, done: usize) -> BatchProgress {
        BatchProgress {
            bar: render::Progress::new(total, done),
        }
    }

    fn done(&self) {
        self.bar.finish();
    }
}

impl golem_orch::batch::Progress for BatchProgress {
    fn started(&self, doc: &golem_orch::batch::Document) {
        self.bar.set_message(&doc.folder);
    }

    fn finished(&self, doc: &golem_orch::batch::Document, done: usize, total: usize) {
        let warnings = match &doc.warnings {
            Some(w) if doc.staged.is_some() => {
                format!("  {}", golem_orch::warnings::phrase(Some(w)))
            }
            _ => String::new(),
        };
        let text = format!(
            "[{done}/{total}] {:<9} {}{warnings}{}",
            doc.status.as_str(),
            line(&doc.source),
            doc.error
                .as_deref()
                .map(|e| format!("  ({})", line(&e.replace(['\n', '\r'], " "))))
                .unwrap_or_default()
        );
        self.bar.set_position(done);
        let high = doc.warnings.as_ref().is_some_and(|w| w.inputs_high > 0);
        if !self.bar.is_bar() || doc.status != golem_orch::batch::DocStatus::Staged || high {
            self.bar.println(&text);
        }
    }
}
