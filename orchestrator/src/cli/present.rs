//! Human formats: sizes, ages, hashes, and the multi-line reports of a run, a batch and a push
//! proposal. Everything here prints through the rendering gate (the `outln!`/`errln!` macros)
//! and passes every value that came from outside through `render::line`.

use golem_orch::batch::{self, Record};
use golem_orch::home::{self, Home};
use golem_orch::render::{self, line};
use golem_orch::session::Outcome;
use golem_orch::warnings::{self, WarningSummary};

use super::{errln, infoln, outln};

/// Whether stdout wants colour: a terminal, and no `NO_COLOR`.
pub(super) fn color_wanted() -> bool {
    render::stdout_is_terminal() && !render::no_color()
}

/// A session's outcome for a person: status, exit code, what was staged, where the logs are.
pub(super) fn run_outcome(home: &Home, outcome: &Outcome) {
    let sessions = home.session_prefixes();
    let staged_ids = home.staged_prefixes();
    let short = sessions.get(&outcome.session);
    outln!("session {short}: {}", outcome.status.as_str());
    if let Some(code) = outcome.exit_code {
        outln!("  worker exit code {code}");
    }
    if let Some(staged) = &outcome.staged {
        outln!(
            "  staged {}: {} file(s), {}, {} rejected  (golem-orch show {})",
            staged_ids.get(staged),
            outcome.files,
            human_bytes(outcome.bytes),
            outcome.rejected,
            staged_ids.get(staged)
        );
    }
    if let Some(m) = &outcome.model {
        outln!("  model: {}", model_usage(m));
    }
    if outcome.staged.is_some() {
        outln!("  warnings: {}", run_warnings(outcome.warnings.as_ref()));
    }
    // Next-step hints, not the result: left out under -q.
    if render::is_quiet() {
        return;
    }
    if let (Some(staged), Some(_)) = (&outcome.staged, &outcome.model) {
        outln!(
            "  transcript: golem-orch transcript {}",
            staged_ids.get(staged)
        );
    }
    outln!("  logs: golem-orch logs {short}");
}

/// `run`'s warnings line: total, inputs by worst severity and the first high inputs.
fn run_warnings(w: Option<&WarningSummary>) -> String {
    let Some(w) = w else {
        return warnings::phrase(None);
    };
    let mut text = format!(
        "{}; {}",
        warnings::phrase(Some(w)),
        warnings::by_severity(w)
    );
    const SHOWN: usize = 3;
    if !w.high.is_empty() {
        let names: Vec<String> = w
            .high
            .iter()
            .take(SHOWN)
            .map(|h| format!("{} {}", line(&h.path), kinds(h)))
            .collect();
        text.push_str(&format!("; high: {}", names.join(", ")));
        let more = (w.high.len() - w.high.len().min(SHOWN)) as u64 + w.high_omitted;
        if more > 0 {
            text.push_str(&format!(" and {more} more"));
        }
    }
    text
}

/// An input's warning kinds, `[hidden_text, script]`, each through the gate.
pub(super) fn kinds(h: &golem_orch::warnings::HighInput) -> String {
    let kinds: Vec<String> = h.kinds.iter().map(|k| line(k)).collect();
    format!("[{}]", kinds.join(", "))
}

/// How a batch id is printed: its unique prefix among the batch records ([`home::Prefixes`]).
pub(super) fn batch_id(home: &Home, id: &str) -> String {
    home::Prefixes::of_dir_and(&batch::dir(home), ".json", id)
        .get(id)
        .to_string()
}

/// A session's (or a batch's) model use on one line.
pub(super) fn model_usage(m: &golem_orch::gateway::ModelUsage) -> String {
    format!(
        "{} request(s), {} input and {} output tokens, {} refused",
        m.requests, m.input_tokens, m.output_tokens, m.refused
    )
}

/// What went wrong in a session, on one line of stderr: scripts read stdout, a person should
/// still see it.
pub(super) fn session_error(outcome: &Outcome) {
    if let Some(e) = &outcome.error {
        let e = line(&e.replace(['\n', '\r'], " "));
        errln!(
            "golem-orch: session {} {}: {e}",
            home::short(&outcome.session),
            outcome.status.as_str()
        );
    }
}

/// A finished (or cancelled) batch: counts, the documents that did not simply succeed, and
/// how to go on.
pub(super) fn batch_summary(home: &Home, record: &Record) {
    let summary = record.summary();
    let batch_id = batch_id(home, &record.id);
    let staged_ids = home.staged_prefixes();
    outln!("batch {batch_id}: {}", record.state.as_str());
    outln!("  {:<10} {:>6}", "succeeded", summary.succeeded);
    outln!("  {:<10} {:>6}", "partial", summary.partial);
    outln!("  {:<10} {:>6}", "failed", summary.failed);
    outln!("  {:<10} {:>6}", "timed out", summary.timed_out);
    outln!("  {:<10} {:>6}", "oom", summary.oom);
    outln!("  {:<10} {:>6}", "rejected", summary.rejected);
    outln!("  {:<10} {:>6}", "not run", summary.not_run);
    outln!(
        "  rejected entries {}, bytes staged {}",
        summary.rejected_entries,
        human_bytes(summary.bytes_staged)
    );
    if let Some(m) = &summary.model {
        outln!("  model: {}", model_usage(m));
    }
    for d in record.documents.iter().filter(|d| {
        !matches!(
            d.status,
            batch::DocStatus::Staged | batch::DocStatus::Pending
        )
    }) {
        outln!(
            "  {:<9} {}  {}",
            d.status.as_str(),
            line(&d.source),
            line(d.error.as_deref().unwrap_or(""))
        );
    }
    high_warnings(record, &staged_ids, summary.high_warning_documents);
    for (source, status) in &record.left_out {
        outln!(
            "  left out  {}  (already {} on its own: not in the combined commit)",
            line(source),
            line(status)
        );
    }
    if !record.skipped.is_empty() {
        outln!(
            "  skipped {} link(s) inside input folders (never followed; --strict refuses them)",
            record.skipped.len()
        );
    }
    if let Some(staged) = &record.staged {
        outln!(
            "  staged as one: golem-orch show {}",
            staged_ids.get(staged)
        );
    }
    if record.state == batch::BatchState::Cancelled {
        outln!("  resume with: golem-orch batch --resume {batch_id}");
    } else if summary.retryable > 0 {
        outln!(
            "  {} failed outside the document (engine or host); run them again with: golem-orch batch --resume {batch_id}",
            summary.retryable
        );
    }
}

/// The batch's documents with a high warning, one line each with the id to `show` (the
/// combined commit's with `--stage-as-one`).
fn high_warnings(record: &Record, printed: &home::Prefixes, count: usize) {
    if count == 0 {
        return;
    }
    let noun = if count == 1 { "document" } else { "documents" };
    outln!("  high warnings: {count} {noun}");
    for d in &record.documents {
        let Some(w) = d.warnings.as_ref().filter(|w| w.inputs_high > 0) else {
            continue;
        };
        let show = record
            .staged
            .as_deref()
            .or(d.staged.as_deref())
            .map(|id| format!("  golem-orch show {}", printed.get(id)))
            .unwrap_or_default();
        outln!(
            "    {}  {}{show}",
            line(&d.source),
            warnings::phrase(Some(w))
        );
    }
}

/// Prints what a push would do: target, branch, and each file with A/M and its size.
pub(super) fn print_proposal(p: &golem_orch::push::Proposal) {
    let branch = if p.new_branch {
        format!("{} (new, from HEAD)", line(&p.branch))
    } else {
        line(&p.branch)
    };
    errln!(
        "push {} into {} on branch {branch}",
        line(home::short(&p.staged)),
        line(&p.repo)
    );
    for f in &p.files {
        let (added, removed) = golem_orch::diff::line_counts(f);
        let note = match f.change {
            golem_orch::diff::Change::Unchanged => "unchanged, skipped".to_string(),
            _ => format!("+{added} -{removed}"),
        };
        errln!(
            "  {}  {:<40}  {:>9}  {note}{}",
            f.change.mark(),
            line(&f.path),
            human_bytes(f.size),
            line(&golem_orch::diff::marks(f))
        );
    }
    if let Some(summary) = golem_orch::diff::summary(&p.files) {
        errln!("  !! {summary}: look at the marked files before you say yes");
    }
    if !p.conflicts.is_empty() {
        let conflicts: Vec<String> = p.conflicts.iter().map(|c| line(c)).collect();
        errln!(
            "  conflicts (changed on the branch since the session started): {}",
            conflicts.join(", ")
        );
    }
}

/// `key=value` pairs for a one-line view of an audit record's data.
pub(super) fn compact(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Object(map) => map
            .iter()
            .filter(|(k, _)| k.as_str() != "plan")
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

/// The first 12 hex digits of a hash, as git shows them.
pub(super) fn short_hash(h: &str) -> &str {
    h.get(..12).unwrap_or(h)
}

/// A size in B, KiB, MiB or GiB.
pub(super) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// An age in seconds, minutes, hours or days.
pub(super) fn human_age(d: chrono::TimeDelta) -> String {
    let s = d.num_seconds().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// Links a batch left out of its input folders, before it runs: one line each (the first 20),
/// on stderr as information (`-q` leaves it out; `--json` and the summary still count them).
pub(super) fn skipped_links(skipped: &[golem_orch::intake::Skipped]) {
    for s in skipped.iter().take(20) {
        infoln!("  skipped {}: {}", line(&s.source), line(&s.reason));
    }
    if skipped.len() > 20 {
        infoln!("  ... and {} more link(s) skipped", skipped.len() - 20);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_ages_and_hashes_read_like_a_person_writes_them() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(5 << 30), "5.0 GiB");
        assert_eq!(human_bytes(u64::MAX), "17179869184.0 GiB");
        let age = |s| human_age(chrono::TimeDelta::seconds(s));
        assert_eq!(
            [age(-5), age(59), age(60), age(3600), age(86400 * 3)],
            ["0s", "59s", "1m", "1h", "3d"]
        );
        assert_eq!(short_hash("0123456789abcdef"), "0123456789ab");
        assert_eq!(short_hash("abc"), "abc");
    }

    #[test]
    fn audit_data_is_one_line_of_pairs_without_the_plan() {
        let v = serde_json::json!({ "plan": { "x": 1 }, "staged": "s1", "files": 2 });
        assert_eq!(compact(&v), "files=2 staged=s1");
        assert_eq!(compact(&serde_json::json!(3)), "3");
    }
}
