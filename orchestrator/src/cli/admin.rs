//! Looking after the state and the engine: sessions, logs, workers, the image, policies,
//! doctor, gc and the audit log.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use serde_json::json;

use golem_orch::audit::Audit;
use golem_orch::home::{self, Home};
use golem_orch::policy::{self, TrustLevel};
use golem_orch::render::{self, line};
use golem_orch::spec::Place;
use golem_orch::{engine, gc, image, session, workers};

use super::{errln, out, outln, present, print_json};

/// `golem-orch sessions`: every session, newest first.
pub(super) fn sessions(home: &Home, json: bool) -> Result<ExitCode> {
    let list = session::list(home)?;
    if json {
        print_json(&list)?;
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        outln!("no sessions yet: golem-orch run --untrusted FILE");
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{:<12}  {:<10}  {:<9}  {:>4}  {:<20}  SOURCE",
        "SESSION",
        "STATUS",
        "TRUST",
        "EXIT",
        "STARTED"
    );
    let printed = home.session_prefixes();
    for r in list {
        let exit = r
            .exit
            .code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into());
        let source = r
            .inputs
            .first()
            .map(|i| line(&i.source))
            .unwrap_or_default();
        outln!(
            "{:<12}  {:<10}  {:<9}  {:>4}  {:<20}  {}",
            printed.get(&r.id),
            r.status.as_str(),
            r.trust_level.as_str(),
            exit,
            r.created_at
                .get(..19)
                .unwrap_or(&r.created_at)
                .replace('T', " "),
            source
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `golem-orch logs ID`: a session's captured worker output, escaped again on the way out.
pub(super) fn logs(home: &Home, id: &str) -> Result<ExitCode> {
    let id = home::resolve_id(&home.sessions_dir(), id, "session")?;
    let path = home.session_dir(&id).join(session::LOGS);
    // Escaped again when printed: never trust that the file on disk is what was written.
    match std::fs::read(&path) {
        Ok(raw) => out!("{}", render::block_bytes(&raw)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            errln!(
                "session {} has no logs (its worker never ran)",
                home::short(&id)
            )
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    Ok(ExitCode::SUCCESS)
}

/// `golem-orch workers`: the built-in and the project's worker definitions.
pub(super) fn workers_cmd(policy_dir: Option<&Path>, json: bool) -> Result<ExitCode> {
    let defs = workers::load_all(Place::here(policy_dir).workers_dir().as_deref())?;
    if json {
        print_json(&defs)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{:<12}  {:<9}  {:<16}  DESCRIPTION",
        "NAME",
        "TRUST",
        "IMAGE"
    );
    for d in defs {
        outln!(
            "{:<12}  {:<9}  {:<16}  {}",
            line(&d.name),
            d.trust.as_str(),
            line(&d.image),
            line(&d.description)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `golem-orch image build`: (re)builds golem-worker from the embedded binary.
pub(super) async fn image_build(json: bool) -> Result<ExitCode> {
    let (engine, _) = engine::connect().await?;
    let (tag, id) = image::build(&engine).await?;
    if json {
        print_json(&json!({ "image": tag, "id": id }))?;
    } else {
        outln!("built {} ({})", line(&tag), line(&id));
    }
    Ok(ExitCode::SUCCESS)
}

/// `golem-orch policy show LEVEL`: the level's policy after the project file narrowed it.
pub(super) fn policy_show(
    policy_dir: Option<&Path>,
    level: TrustLevel,
    json: bool,
) -> Result<ExitCode> {
    let effective = policy::load(
        level,
        policy_dir,
        Place::here(policy_dir).project_file.as_deref(),
    )?;
    if json {
        print_json(&effective)?;
    } else {
        outln!(
            "# effective {level} policy, from: {}",
            line(&effective.sources.join(" + "))
        );
        out!("{}", serde_yaml::to_string(&effective.policy)?);
    }
    Ok(ExitCode::SUCCESS)
}

/// `golem-orch doctor`: engine, image, policies, state and audit chain, each checked.
pub(super) async fn doctor(
    home_arg: Option<&Path>,
    policy_dir: Option<&Path>,
    json: bool,
) -> Result<ExitCode> {
    let mut checks: Vec<(bool, String, String)> = Vec::new();
    let mut add =
        |ok: bool, name: &str, detail: String| checks.push((ok, name.to_string(), detail));
    let mut engine_info = None;
    match engine::connect().await {
        Ok((engine, info)) => {
            add(
                true,
                "engine",
                format!(
                    "{} {} (API {}) on {}",
                    engine_name(&info),
                    info.version,
                    info.api_version,
                    info.platform
                ),
            );
            add(
                true,
                "runtimes",
                format!(
                    "{} (default {})",
                    info.runtimes.join(", "),
                    info.default_runtime
                ),
            );
            match info.unsafe_defaults() {
                None => add(
                    true,
                    "engine defaults",
                    format!("security options: {}", info.security_options.join("; ")),
                ),
                Some(why) => add(false, "engine defaults", why),
            }
            engine_info = Some(info);
            match image::current(&engine).await {
                Ok(Some(id)) => add(
                    true,
                    "image",
                    format!("{} present ({id})", image::worker_tag()),
                ),
                Ok(None) => add(
                    true,
                    "image",
                    format!(
                        "{} not built yet; `run` builds it, or `golem-orch image build`",
                        image::worker_tag()
                    ),
                ),
                Err(e) => add(false, "image", e.to_string()),
            }
        }
        Err(e) => add(false, "engine", e.to_string()),
    }
    let project = Place::here(policy_dir).project_file;
    for level in TrustLevel::ALL {
        match policy::load(level, policy_dir, project.as_deref()) {
            Ok(p) => {
                add(true, &format!("policy {level}"), p.sources.join(" + "));
                if let Some(info) = &engine_info {
                    let (ok, detail) = runtime_check(&p.policy, info);
                    add(ok, &format!("runtime {level}"), detail);
                }
            }
            Err(e) => add(false, &format!("policy {level}"), e.to_string()),
        }
    }
    match Home::open(home_arg) {
        Ok(home) => {
            add(true, "state", home.root().display().to_string());
            match Audit::new(home.audit_path()).verify() {
                Ok(n) => add(true, "audit", format!("hash chain intact ({n} records)")),
                Err(e) => add(false, "audit", e.to_string()),
            }
        }
        Err(e) => add(false, "state", e.to_string()),
    }
    let healthy = checks.iter().all(|(ok, _, _)| *ok);
    if json {
        let list: Vec<_> = checks
            .iter()
            .map(|(ok, name, detail)| json!({ "check": name, "ok": ok, "detail": detail }))
            .collect();
        let engine = engine_info.as_ref().map(|i| {
            json!({ "name": engine_name(i), "version": i.version, "api_version": i.api_version,
                "platform": i.platform, "runtimes": i.runtimes, "default_runtime": i.default_runtime })
        });
        print_json(&json!({ "ok": healthy, "engine": engine, "checks": list }))?;
    } else {
        for (ok, name, detail) in &checks {
            outln!(
                "{:<4}  {:<16}  {}",
                if *ok { "ok" } else { "FAIL" },
                name,
                line(detail)
            );
        }
    }
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Which engine answers, in a person's words: Podman says so in its version components, a
/// Docker Engine names its component `Engine`.
fn engine_name(info: &engine::EngineInfo) -> &'static str {
    if info.name == engine::docker::PODMAN {
        "Podman"
    } else {
        "Docker"
    }
}

/// Whether a level's runtime is there: its own runtime and every runtime `--runtime` may choose.
fn runtime_check(p: &policy::Policy, info: &engine::EngineInfo) -> (bool, String) {
    let own = p.own_runtime();
    let missing: Vec<String> = p
        .allowed_runtimes()
        .into_iter()
        .filter(|r| !info.runtimes.contains(r))
        .collect();
    // The level's own runtime is among the ones it allows, so `missing` already says.
    let own_missing = p.runtime.is_some() && missing.iter().any(|r| r == own);
    let detail = match (own_missing, missing.is_empty()) {
        (false, true) => format!("{own}; may choose {}", p.allowed_runtimes().join(", ")),
        (false, false) => format!(
            "{own}; not registered, so not choosable: {}",
            missing.join(", ")
        ),
        (true, _) if p.runtime_required => {
            format!("{own} is required but not registered: sessions are refused")
        }
        (true, _) => format!("{own} is not registered: sessions fall back to the engine's default"),
    };
    (!(own_missing && p.runtime_required), detail)
}

/// `golem-orch gc`: removes what dead orchestrators left behind; with `--dry-run` only says
/// what it would remove (the state directory is not even created).
pub(super) async fn gc_cmd(home_arg: Option<&Path>, json: bool, dry_run: bool) -> Result<ExitCode> {
    let (engine, _) = engine::connect().await?;
    let report = if dry_run {
        gc::preview(&engine, &Home::peek(home_arg), gc::Scope::Engine).await?
    } else {
        gc::collect(&engine, &super::open_home(home_arg)?, gc::Scope::Engine).await?
    };
    if json {
        print_json(&report)?;
    } else if dry_run {
        gc_preview(&report);
    } else {
        outln!(
            "removed {} container(s), {} volume(s), {} half-staged commit(s); marked {} session(s) failed; left {} live resource(s) alone",
            report.containers.len(),
            report.volumes.len(),
            report.stage_orphans.len(),
            report.sessions_failed.len(),
            report.live
        );
        if !report.images.is_empty() || !report.init_binaries.is_empty() {
            outln!(
                "removed {} worker image tag(s) and {} init binary(ies) of other golem-orch builds",
                report.images.len(),
                report.init_binaries.len()
            );
        }
        for e in &report.errors {
            outln!("  could not remove {}", line(e));
        }
    }
    Ok(if report.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What `gc --dry-run` would do, each thing by name.
fn gc_preview(report: &gc::Report) {
    outln!("dry run: nothing was removed or changed");
    let lists: [(&str, &[String]); 6] = [
        ("container(s) to remove", &report.containers),
        ("volume(s) to remove", &report.volumes),
        ("session(s) to mark failed", &report.sessions_failed),
        ("half-staged commit(s) to remove", &report.stage_orphans),
        (
            "worker image tag(s) of other builds to remove",
            &report.images,
        ),
        (
            "init binary(ies) of other builds to remove",
            &report.init_binaries,
        ),
    ];
    for (what, names) in lists {
        outln!("{} {what}", names.len());
        for n in names {
            outln!("  {}", line(n));
        }
    }
    outln!("{} live resource(s) would be left alone", report.live);
    for e in &report.errors {
        outln!("  could not list {}", line(e));
    }
}

/// `golem-orch completions SHELL`: the script is generated from the same clap definition the
/// binary parses with, so it can never offer a flag that does not exist. It goes through the
/// rendering gate like everything else printed, although it is golem-orch's own text.
pub(super) fn completions(shell: clap_complete::Shell) -> Result<ExitCode> {
    let mut command = <super::Cli as clap::CommandFactory>::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "golem-orch", &mut script);
    out!("{}", String::from_utf8_lossy(&script));
    Ok(ExitCode::SUCCESS)
}

/// `golem-orch man`: a roff man page from the clap definition, for packagers and `man -l -`,
/// so the page and `--help` never disagree.
pub(super) fn man() -> Result<ExitCode> {
    let command = <super::Cli as clap::CommandFactory>::command();
    let mut page = Vec::new();
    clap_mangen::Man::new(command)
        .render(&mut page)
        .context("cannot render the man page")?;
    out!("{}", String::from_utf8_lossy(&page));
    Ok(ExitCode::SUCCESS)
}

/// `golem-orch audit`: the audit log, or `--verify` its hash chain.
pub(super) fn audit(
    home: &Home,
    session: Option<String>,
    verify: bool,
    json: bool,
) -> Result<ExitCode> {
    let log = Audit::new(home.audit_path());
    if verify {
        let n = log.verify()?;
        if json {
            print_json(&json!({ "ok": true, "records": n }))?;
        } else {
            outln!("audit log intact: {n} records, hash chain unbroken");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let filter = match session {
        Some(s) => Some(home::resolve_id(&home.sessions_dir(), &s, "session")?),
        None => None,
    };
    let records: Vec<_> = log
        .read()?
        .into_iter()
        .filter(|r| filter.is_none() || r.session == filter)
        .collect();
    if json {
        print_json(&records)?;
        return Ok(ExitCode::SUCCESS);
    }
    let color = present::color_wanted();
    for r in records {
        let session = line(r.session.as_deref().map(home::short).unwrap_or("-"));
        let data = line(&present::compact(&r.data));
        let event = format!("{:<22}", line(&r.event));
        let text = format!("{}  {:<12}  ", line(&r.ts), session);
        if color && (r.event.contains("rejected") || r.event.contains("failed")) {
            let event = render::paint(render::Colour::Red, &event);
            render::out_coloured(&format!("{text}{event}  {data}\n"));
        } else {
            outln!("{text}{event}  {data}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
