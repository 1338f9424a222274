//! `golem-orch run`: the flags become a library `RunSpec`, the session runs, its outcome prints.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;

use golem_orch::home::Home;
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
    let outcome = session::run(&home, &engine, opts, shutdown_signal()).await?;
    if args.json.json {
        print_json(&outcome)?;
    } else {
        present::run_outcome(&home, &outcome);
    }
    present::session_error(&outcome);
    Ok(ExitCode::from(outcome.process_exit_code()))
}

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
