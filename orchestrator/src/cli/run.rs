//! `golem-orch run`: the flags become a library `RunSpec`, the session runs, its outcome prints.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;

use golem_orch::home::Home;
use golem_orch::render::line;
use golem_orch::spec::{self, Place, RunSpec};
use golem_orch::{engine, gc, session};

use super::args::RunArgs;
use super::{open_home, out, outln, present, print_json, shutdown_signal};

/// What `run`'s flags ask for, beyond what `batch` shares with it.
fn spec(args: &RunArgs) -> Result<RunSpec> {
    Ok(RunSpec {
        max_download: Some(args.max_download),
        download_timeout: Some(args.download_timeout),
        allow_network: args.allow_network,
        keep: args.keep,
        ..args.worker.spec(&args.intake, &args.command)?
    })
}

/// `golem-orch run`: one session, or with `--dry-run` only its plan.
pub(super) async fn run(
    home_arg: Option<&Path>,
    policy_dir: Option<&Path>,
    args: RunArgs,
) -> Result<ExitCode> {
    let opts = spec(&args)?.resolve_with_inputs(&Place::here(policy_dir), &args.inputs)?;
    if args.dry_run {
        return dry_run(home_arg, &opts, args.json.json);
    }
    let home = open_home(home_arg)?;
    let (engine, _) = engine::connect().await?;
    // Leftovers of crashed runs go first; live sessions are never touched.
    if let Err(e) = gc::collect(&engine, &home, gc::Scope::Home).await {
        tracing::warn!("gc before run failed: {e}");
    }
    let max_inputs = spec::max_inputs(&opts);
    let outcome = session::run(&home, &engine, opts, shutdown_signal()).await?;
    let notes = Notes::of(&home, &outcome, max_inputs);
    if args.json.json {
        let mut value = serde_json::to_value(&outcome)?;
        value["skipped"] = json!(notes.skipped);
        if let Some((left, total)) = notes.not_processed {
            value["not_processed"] = json!(left);
            value["inputs"] = json!(total);
        }
        print_json(&value)?;
    } else {
        present::run_outcome(&home, &outcome);
        notes.print(&args.inputs);
    }
    present::session_error(&outcome);
    Ok(ExitCode::from(outcome.process_exit_code()))
}

/// What `run` adds to a session's outcome from its record: the links left out of its input
/// folders, and how many inputs the worker had no room for.
struct Notes {
    /// Links inside input folders, skipped and never followed.
    skipped: Vec<golem_orch::intake::Skipped>,
    /// Inputs beyond the worker's per-session limit, and all of them.
    not_processed: Option<(usize, usize)>,
}

impl Notes {
    /// Read from the session record (the outcome's inputs as intake took them in); the limit
    /// is golem-orch's own knowledge of its worker ([`spec::max_inputs`]), never the worker's
    /// output.
    fn of(home: &Home, outcome: &session::Outcome, max_inputs: Option<usize>) -> Notes {
        let Ok(record) = session::load(home, &outcome.session) else {
            return Notes {
                skipped: Vec::new(),
                not_processed: None,
            };
        };
        let total = record.inputs.len();
        let not_processed = max_inputs
            .filter(|max| total > *max && outcome.exit_code.is_some())
            .map(|max| (total - max, total));
        Notes {
            skipped: record.skipped,
            not_processed,
        }
    }

    /// The notes for a person, after the outcome.
    fn print(&self, inputs: &[String]) {
        if !self.skipped.is_empty() {
            outln!(
                "  skipped {} symbolic link(s) inside the input folders (never followed; --strict refuses them):",
                self.skipped.len()
            );
            for s in self.skipped.iter().take(SHOWN_SKIPPED) {
                outln!("    {}", line(&s.source));
            }
            if self.skipped.len() > SHOWN_SKIPPED {
                outln!(
                    "    ... and {} more (golem-orch show lists them)",
                    self.skipped.len() - SHOWN_SKIPPED
                );
            }
        }
        if let Some((left, total)) = self.not_processed {
            let args: Vec<String> = inputs.iter().map(|i| line(i)).collect();
            outln!(
                "  {left} of {total} inputs were not processed: the worker takes at most {} per session",
                total - left
            );
            outln!(
                "  to process every file, one container each: golem-orch batch {}",
                args.join(" ")
            );
        }
    }
}

/// How many skipped links `run` names before summarising.
const SHOWN_SKIPPED: usize = 20;

/// Prints the plan without creating anything: no session, no download, no engine call.
fn dry_run(home_arg: Option<&Path>, opts: &session::RunOptions, json: bool) -> Result<ExitCode> {
    let preview = spec::preview(&Home::peek(home_arg), opts)?;
    if json {
        print_json(&json!({ "dry_run": true, "inputs": preview.inputs, "plan": preview.plan }))?;
    } else {
        outln!("dry run: nothing was created\ninputs");
        for i in &preview.inputs {
            outln!("  {}", golem_orch::render::line(i));
        }
        out!("{}", preview.plan);
    }
    Ok(ExitCode::SUCCESS)
}

/// `golem-orch batch --dry-run`: the documents a new batch would run (each with its folder in a
/// `--stage-as-one` commit), its settings, the effective policy and the container one document
/// would get, from the same resolution and the same [`spec::preview`] as `run --dry-run`.
/// Nothing is created: no state directory, batch record, session, container or audit line.
pub(super) fn batch_dry_run(
    home_arg: Option<&Path>,
    policy_dir: Option<&Path>,
    record: &golem_orch::batch::Record,
    json: bool,
) -> Result<ExitCode> {
    let template = record.settings.spec.resolve(&Place::here(policy_dir))?;
    golem_orch::batch::check_settings(&record.settings, &template)?;
    let preview = spec::preview(&Home::peek(home_arg), &template)?;
    let documents: Vec<serde_json::Value> = record
        .documents
        .iter()
        .map(|d| json!({ "source": d.source, "folder": d.folder }))
        .collect();
    if json {
        print_json(&json!({
            "dry_run": true,
            "documents": documents,
            "jobs": record.settings.jobs,
            "stage_as_one": record.settings.stage_as_one,
            "policy": template.policy,
            "plan": preview.plan,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("dry run: nothing was created");
    outln!(
        "{} document(s), {} at a time, {}",
        record.documents.len(),
        record.settings.jobs,
        if record.settings.stage_as_one {
            "one staged commit with a folder per document"
        } else {
            "one staged commit per document"
        }
    );
    for d in &record.documents {
        outln!("  {}  <- {}", line(&d.folder), line(&d.source));
    }
    outln!("each document's container (its input replaced):");
    out!("{}", preview.plan);
    Ok(ExitCode::SUCCESS)
}
