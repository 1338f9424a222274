//! Reviewing staged commits: list, show, diff, push (with a person's consent) and discard.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::{bail, Result};
use serde_json::json;

use golem_orch::audit::Audit;
use golem_orch::home::{self, Home};
use golem_orch::render::{self, line};
use golem_orch::stage::Stage;
use golem_orch::transcript;
use golem_orch::warnings;

use super::args::TargetArgs;
use super::{err, errln, outln, present, print_json};

/// `golem-orch staged`: the staged commits, pending first.
pub(super) fn staged(home: &Home, json: bool) -> Result<ExitCode> {
    let list = Stage::new(home.staged_dir()).list()?;
    if json {
        print_json(&list)?;
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        outln!("nothing staged");
        return Ok(ExitCode::SUCCESS);
    }
    let now = chrono::Utc::now();
    let printed = home.staged_prefixes();
    outln!(
        "{:<12}  {:<9}  {:>6}  {:>5}  {:>9}  {:>8}  {:>12}  {:<9}  SOURCE",
        "ID",
        "STATUS",
        "AGE",
        "FILES",
        "BYTES",
        "REJECTED",
        "WARN",
        "TRUST"
    );
    for s in list {
        let age = chrono::DateTime::parse_from_rfc3339(&s.created_at)
            .map(|t| present::human_age(now.signed_duration_since(t.with_timezone(&chrono::Utc))))
            .unwrap_or_else(|_| "?".into());
        outln!(
            "{:<12}  {:<9}  {:>6}  {:>5}  {:>9}  {:>8}  {:>12}  {:<9}  {}",
            printed.get(&s.id),
            s.status,
            age,
            s.files,
            present::human_bytes(s.bytes),
            s.rejected,
            warnings::cell(s.warnings.as_ref()),
            s.trust_level.as_str(),
            line(&s.source)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `golem-orch show ID`: a staged commit's provenance, files and rejected entries.
pub(super) fn show(home: &Home, id: &str, json: bool) -> Result<ExitCode> {
    let id = home::resolve_id(&home.staged_dir(), id, "staged commit")?;
    let stage = Stage::new(home.staged_dir());
    let m = stage.manifest(&id)?;
    let status = stage.status(&id)?;
    if json {
        let mut value = serde_json::to_value(&m)?;
        value["status"] = json!(status.word());
        if let golem_orch::stage::Status::Merged { into, .. } = &status {
            value["merged_into"] = json!(into);
        }
        if let Some(pushed) = pushed(home, &id, &status) {
            value["pushed"] = pushed;
        }
        value["pushes"] = json!(status.pushes());
        value["left"] = json!(left(&m, &status));
        value["path"] = json!(stage.dir(&id).join(golem_orch::stage::FILES));
        print_json(&value)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("staged   {}  ({})", line(&m.id), status.word());
    let printed = home.staged_prefixes();
    show_pushes(home, &printed, &id, &status, &m);
    outln!("session  {}", line(&m.session));
    outln!("created  {}", line(&m.created_at));
    outln!("trust    {}", m.trust_level);
    outln!("image    {}  ({})", line(&m.image), line(&m.image_id));
    let command: Vec<String> = m.command.iter().map(|a| line(a)).collect();
    outln!("command  {}", command.join(" "));
    outln!(
        "exit     {}",
        m.exit_code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into())
    );
    outln!(
        "files in {}",
        render::path(&stage.dir(&id).join(golem_orch::stage::FILES))
    );
    show_inputs(&m);
    outln!(
        "\nfiles ({}, {})",
        m.files.len(),
        present::human_bytes(m.bytes)
    );
    for f in &m.files {
        outln!(
            "  {}  {:>9}  {}",
            present::short_hash(&f.sha256),
            present::human_bytes(f.size),
            line(&f.path)
        );
    }
    let rejected = m.rejected.len() as u64 + m.rejected_omitted;
    outln!("\nrejected ({rejected})");
    for r in &m.rejected {
        outln!("  {}: {}", line(&r.path), line(&r.reason));
    }
    if m.rejected_omitted > 0 {
        outln!(
            "  ... and {} more (see golem-orch audit --session {})",
            m.rejected_omitted,
            home.session_prefixes().get(&m.session)
        );
    }
    show_model(&stage, &id, printed.get(&id), &m);
    show_warnings(&m);
    Ok(ExitCode::SUCCESS)
}

/// `show`'s warnings: what the report worker claims, and the inputs to read first.
fn show_warnings(m: &golem_orch::stage::Manifest) {
    let Some(w) = &m.warnings else {
        outln!("\nwarnings: unknown (no report index in the output)");
        return;
    };
    let highest = w.highest.map_or("none", |h| h.as_str());
    outln!(
        "\nwarnings ({}, highest {highest}; {}; the report worker's own claim)",
        w.total,
        warnings::by_severity(w)
    );
    for h in &w.high {
        outln!("  HIGH  {}  {}", line(&h.path), present::kinds(h));
    }
    if w.high_omitted > 0 {
        outln!("  ... and {} more with a high warning", w.high_omitted);
    }
}

/// Where a pushed staged commit went: `{commit, branch, at, repo, remote}` of its last push. The
/// status record keeps them; for a status written before pushes were recorded, the repository
/// and remote come from the audit log's `stage.pushed` event (null when the log has none for
/// it). `None` while not (wholly) pushed.
fn pushed(home: &Home, id: &str, status: &golem_orch::stage::Status) -> Option<serde_json::Value> {
    let golem_orch::stage::Status::Pushed {
        commit,
        branch,
        at,
        pushes,
    } = status
    else {
        return None;
    };
    if let Some(last) = pushes.last() {
        return Some(json!({
            "commit": commit, "branch": branch, "at": at, "repo": last.repo, "remote": last.remote,
        }));
    }
    let records = Audit::new(home.audit_path()).read().unwrap_or_default();
    let event = records
        .iter()
        .rev()
        .find(|r| r.event == "stage.pushed" && r.data["staged"] == id);
    let field = |k: &str| event.map_or(serde_json::Value::Null, |r| r.data[k].clone());
    Some(json!({
        "commit": commit,
        "branch": branch,
        "at": at,
        "repo": field("repo"),
        "remote": field("remote"),
    }))
}

/// The staged files no push has committed yet (all of them while pending, none once pushed,
/// discarded with the rest once discarded).
fn left<'m>(
    m: &'m golem_orch::stage::Manifest,
    status: &golem_orch::stage::Status,
) -> Vec<&'m str> {
    let done = status.pushed_files();
    m.files
        .iter()
        .map(|f| f.path.as_str())
        .filter(|p| !done.contains_key(p))
        .collect()
}

/// `show`'s pushes: each push (files, commit, branch, repository, remote), then what is left.
fn show_pushes(
    home: &Home,
    printed: &home::Prefixes,
    id: &str,
    status: &golem_orch::stage::Status,
    m: &golem_orch::stage::Manifest,
) {
    if let golem_orch::stage::Status::Merged { into, at } = status {
        outln!(
            "merged   into {}  ({}): push that combined commit (golem-orch show {})",
            printed.get(into),
            line(at),
            printed.get(into)
        );
        return;
    }
    let pushes = status.pushes();
    if pushes.is_empty() {
        // A whole push recorded before pushes were: the audit log says where it went.
        if let Some(p) = pushed(home, id, status) {
            let text = |k: &str| line(p[k].as_str().unwrap_or("-"));
            outln!(
                "pushed   {} on {}  ({})",
                text("commit"),
                text("branch"),
                text("at")
            );
            outln!("  into   {}", text("repo"));
        }
        return;
    }
    let parts = pushes.len() > 1 || status.word() == "partial";
    for p in pushes {
        outln!(
            "pushed   {} on {}  ({})",
            line(&p.commit),
            line(&p.branch),
            line(&p.at)
        );
        outln!("  into   {}", line(&p.repo));
        if let Some(r) = &p.remote {
            outln!("  and to remote {}", line(r));
        }
        if parts {
            outln!("  {} file(s):", p.files.len());
            for f in &p.files {
                outln!("    {}", line(f));
            }
        }
    }
    let rest = left(m, status);
    if status.is_open() && !rest.is_empty() {
        outln!(
            "left     {} of {} file(s) not pushed yet (golem-orch push {} pushes them)",
            rest.len(),
            m.files.len(),
            printed.get(id)
        );
    } else if !rest.is_empty() {
        outln!(
            "left     {} file(s) never pushed ({})",
            rest.len(),
            status.word()
        );
    }
}

/// `show`'s inputs: hash, size, name, where each came from, and a URL's redirects.
fn show_inputs(m: &golem_orch::stage::Manifest) {
    outln!("\ninputs ({})", m.inputs.len());
    for i in &m.inputs {
        outln!(
            "  {}  {:>9}  {}  <- {}",
            present::short_hash(&i.sha256),
            present::human_bytes(i.size),
            line(&i.name),
            line(&i.source)
        );
        if i.hops.len() > 1 {
            let hops: Vec<String> = i.hops.iter().map(|h| line(h)).collect();
            outln!("      redirected: {}", hops.join(" -> "));
        }
    }
    if !m.skipped.is_empty() {
        outln!("\nskipped ({}, never followed)", m.skipped.len());
        for s in &m.skipped {
            outln!("  {}: {}", line(&s.source), line(&s.reason));
        }
    }
}

/// `show`'s model part: the transcript's size and use, and a high warning for the honeytoken.
fn show_model(stage: &Stage, id: &str, printed: &str, m: &golem_orch::stage::Manifest) {
    let Some(record) = &m.model else { return };
    let exchanges = match transcript::load(stage, id, m) {
        Ok(ex) => format!("{} exchange(s)", ex.len()),
        Err(e) => format!("UNREADABLE: {}", line(&e.to_string())),
    };
    outln!(
        "\ntranscript ({exchanges}; {})  golem-orch transcript {}",
        present::model_usage(&record.usage),
        printed
    );
    if record.transcript_incomplete > 0 {
        outln!(
            "  {} exchange(s) are not (wholly) in the transcript (its size caps, a flood of refused requests, or a failed write); the audit log has their records",
            record.transcript_incomplete
        );
    }
    if record.honeytoken_seen {
        outln!("  HIGH: the container's fake key (honeytoken) was seen: the worker tried to send its environment out. Read the transcript before pushing anything.");
    }
}

/// `golem-orch transcript ID`: the staged transcript, exchange by exchange, through the gate.
pub(super) fn transcript(home: &Home, id: &str, json: bool) -> Result<ExitCode> {
    let id = home::resolve_id(&home.staged_dir(), id, "staged commit")?;
    let stage = Stage::new(home.staged_dir());
    let m = stage.manifest(&id)?;
    let exchanges = transcript::load_verified(home, &id)?;
    if json {
        print_json(&json!({ "staged": id, "model": m.model, "exchanges": exchanges }))?;
        return Ok(ExitCode::SUCCESS);
    }
    if m.model.as_ref().is_some_and(|r| r.honeytoken_seen) {
        outln!("HIGH: the container's fake key was seen in this session; look for it below.\n");
    }
    for x in &exchanges {
        outln!("{}", transcript::render_exchange(x)?);
    }
    outln!("{} exchange(s)", exchanges.len());
    Ok(ExitCode::SUCCESS)
}

/// Resolves the staged id and opens the target repository, branch and prefix.
fn open_target(home: &Home, t: &TargetArgs) -> Result<(String, golem_orch::target::Target)> {
    let id = home::resolve_id(&home.staged_dir(), &t.id, "staged commit")?;
    let repo = match &t.repo {
        Some(r) => r.clone(),
        None => std::env::current_dir()?,
    };
    let branch = t
        .branch
        .clone()
        .unwrap_or_else(|| golem_orch::target::default_branch(&id));
    let target = golem_orch::target::Target::open(&repo, &branch, t.prefix.as_deref())?;
    Ok((id, target))
}

/// `golem-orch diff ID`: what a staged commit would change on a branch.
pub(super) fn diff_cmd(home: &Home, t: &TargetArgs, stat: bool) -> Result<ExitCode> {
    let (id, target) = open_target(home, t)?;
    let stage = Stage::new(home.staged_dir());
    // The manifest push would use: the one the audit log anchored at staging, so what a person
    // reviews is what a push would commit.
    let audit = Audit::new(home.audit_path());
    let manifest = golem_orch::push::verified_manifest(&stage, &audit, &id)?;
    let diffs = golem_orch::diff::compute(&stage, &id, &manifest, &target, &t.only)?;
    if t.json.json {
        print_json(
            &json!({ "staged": id, "repo": target.path, "branch": target.branch, "summary": golem_orch::diff::summary(&diffs), "files": diffs }),
        )?;
    } else if stat {
        outln!("{}", golem_orch::diff::stat(&diffs).trim_end());
    } else {
        // Colours are golem-orch's own, added after the content was rendered; the gate keeps
        // exactly those and escapes anything else.
        // On a terminal it goes through the person's pager.
        render::page_coloured(
            &golem_orch::diff::render(&diffs, present::color_wanted()),
            false,
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks on the terminal; `None` when there is no terminal to ask on.
fn ask(question: &str) -> Option<String> {
    if !std::io::stdin().is_terminal() {
        return None;
    }
    err!("{question}");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).ok()?;
    Some(line.trim().to_ascii_lowercase())
}

/// `golem-orch push ID`: commits a staged commit onto a branch, with a person's consent.
pub(super) fn push_cmd(
    home: &Home,
    t: &TargetArgs,
    message: Option<&str>,
    yes: bool,
    force: bool,
    remote: Option<&str>,
) -> Result<ExitCode> {
    let (id, target) = open_target(home, t)?;
    let stage = Stage::new(home.staged_dir());
    let audit = Audit::new(home.audit_path());
    let proposal = golem_orch::push::propose(&stage, &audit, &id, &target, &t.only)?;
    if !yes && t.json.json {
        // A script asking without consent gets the proposal (marks included), and nothing moves.
        print_json(&proposal)?;
        bail!("push needs a person's consent: pass --yes to push");
    }
    if !yes && !std::io::stdin().is_terminal() {
        bail!("push needs a person's consent: run it on a terminal, or pass --yes");
    }
    if !yes {
        present::print_proposal(&proposal);
        loop {
            match ask("push it? [d]iff / [y]es / [n]o: ").as_deref() {
                None => bail!("push needs a person's consent: run it on a terminal, or pass --yes"),
                Some("d" | "diff") => render::page_coloured(
                    &golem_orch::diff::render(
                        &proposal.files,
                        render::stderr_is_terminal() && !render::no_color(),
                    ),
                    true,
                ),
                Some("y" | "yes") => break,
                Some(_) => {
                    errln!("not pushed; the staged commit stays pending");
                    return Ok(ExitCode::FAILURE);
                }
            }
        }
    }
    let request = golem_orch::push::Request {
        only: t.only.clone(),
        message: message.map(str::to_string),
        force,
        remote: remote.map(str::to_string),
    };
    let pushed = golem_orch::push::execute(&stage, &audit, &id, &target, &request)?;
    if t.json.json {
        print_json(&pushed)?;
    } else {
        let recovered = if pushed.recovered {
            " (found from an interrupted earlier push)"
        } else {
            ""
        };
        let printed = home.staged_prefixes();
        let shown = printed.get(&id);
        outln!(
            "pushed {} as {} on {}{recovered}",
            shown,
            line(pushed.commit.get(..12).unwrap_or(&pushed.commit)),
            line(&pushed.branch)
        );
        if pushed.left > 0 {
            outln!(
                "  {} file(s) pushed, {} left: golem-orch push {} pushes the rest",
                pushed.files,
                pushed.left,
                shown
            );
        }
        if let Some(r) = &pushed.remote {
            outln!("  and to remote {}", line(r));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `golem-orch discard ID`: throws a pending staged commit away, with a person's consent.
pub(super) fn discard_cmd(home: &Home, id: &str, yes: bool, json: bool) -> Result<ExitCode> {
    let id = home::resolve_id(&home.staged_dir(), id, "staged commit")?;
    let stage = Stage::new(home.staged_dir());
    let printed = home.staged_prefixes();
    let shown = printed.get(&id);
    if !yes {
        let m = stage.manifest(&id)?;
        let pushed = stage.status(&id)?.pushed_files().len();
        let question = if pushed > 0 {
            format!(
                "discard the {} file(s) of {} not pushed yet ({pushed} already pushed stay)? [y/N]: ",
                m.files.len().saturating_sub(pushed),
                shown,
            )
        } else {
            format!(
                "discard {} ({} file(s), {})? [y/N]: ",
                shown,
                m.files.len(),
                present::human_bytes(m.bytes)
            )
        };
        match ask(&question).as_deref() {
            None => bail!("discard needs a person's consent: run it on a terminal, or pass --yes"),
            Some("y" | "yes") => {}
            Some(_) => {
                errln!("kept");
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    let done = golem_orch::push::discard(&stage, &Audit::new(home.audit_path()), &id)?;
    if json {
        print_json(
            &json!({ "staged": id, "status": "discarded", "discarded": done.discarded, "already_pushed": done.already_pushed }),
        )?;
    } else if done.already_pushed > 0 {
        outln!(
            "discarded the rest of {}: {} file(s) not pushed are discarded; the {} already pushed stay in their commits",
            shown,
            done.discarded,
            done.already_pushed
        );
    } else {
        outln!("discarded {shown}");
    }
    Ok(ExitCode::SUCCESS)
}
