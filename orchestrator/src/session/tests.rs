//! The session's endings, driven by a scripted engine without Docker: what the real-engine
//! stories (tests/integration `session`, `crashes`, `refusals`) assert, checked in
//! milliseconds. The clock is tokio's paused one, so a 300 s stall takes no time.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

use super::*;
use crate::engine::fake::{chunks, Archive, FakeEngine, Script, Step};
use crate::engine::ExitState;
use crate::policy::TrustLevel;

/// A state directory and one input document.
struct Fixture {
    _dir: tempfile::TempDir,
    home: Home,
    doc: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(Some(&dir.path().join("state"))).unwrap();
    let doc = dir.path().join("doc.txt");
    std::fs::write(&doc, b"a document").unwrap();
    Fixture {
        _dir: dir,
        home,
        doc,
    }
}

fn options(f: &Fixture) -> RunOptions {
    RunOptions {
        policy: crate::policy::load(TrustLevel::Untrusted, None, None)
            .unwrap()
            .policy,
        sources: vec![Source::File(f.doc.clone())],
        image: Some("hostile".into()),
        command: Vec::new(),
        keep: false,
        allow_network: false,
        repo: None,
        intake: IntakeLimits::default(),
        instructions: None,
        model: None,
    }
}

fn images() -> Images {
    Images {
        worker: Worker {
            image: "hostile".into(),
            image_id: "sha256:0123".into(),
            entrypoint: vec!["/hostile".into()],
            cmd: vec!["report".into()],
        },
    }
}

/// Runs one session against `engine`, cancelled when `cancel` resolves.
async fn run_with(
    f: &Fixture,
    engine: &FakeEngine,
    cancel: impl Future<Output = ()>,
) -> (Outcome, Record) {
    let outcome = run_resolved(&f.home, engine, options(f), &images(), cancel)
        .await
        .unwrap();
    let record = load(&f.home, &outcome.session).unwrap();
    assert_eq!(
        record.status, outcome.status,
        "the record and the outcome agree"
    );
    (outcome, record)
}

async fn run_script(f: &Fixture, script: Script) -> (Outcome, Record, std::sync::Arc<FakeEngine>) {
    let engine = FakeEngine::new(script);
    let (outcome, record) = run_with(f, &engine, std::future::pending()).await;
    (outcome, record, engine)
}

/// The audit log's events of one session, as `(event, data)`.
fn audited(f: &Fixture, session: &str) -> Vec<(String, Value)> {
    let text = std::fs::read_to_string(f.home.audit_path()).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["session"] == session)
        .map(|e| {
            (
                e["event"].as_str().unwrap_or("").to_string(),
                e["data"].clone(),
            )
        })
        .collect()
}

fn events(f: &Fixture, session: &str) -> Vec<String> {
    audited(f, session).into_iter().map(|(e, _)| e).collect()
}

/// Asserts the session ended with nothing staged and its container killed and removed.
fn assert_nothing_staged(f: &Fixture, outcome: &Outcome, engine: &FakeEngine) {
    assert!(outcome.staged.is_none(), "{outcome:?}");
    assert_eq!(
        Stage::new(f.home.staged_dir()).remove_orphans().unwrap(),
        Vec::<String>::new()
    );
    assert!(engine.called("remove golem-"), "{:?}", engine.calls());
    assert_eq!(
        events(f, &outcome.session).last().map(String::as_str),
        Some("session.finished")
    );
}

/// Runs `work` while moving the paused clock on a second at a time: tokio does not advance it
/// by itself while the validator's blocking thread runs, and a stall is only time passing.
async fn with_clock_running<T>(work: impl Future<Output = T>) -> T {
    tokio::pin!(work);
    loop {
        tokio::select! {
            biased;
            out = &mut work => return out,
            () = tokio::task::yield_now() => tokio::time::advance(Duration::from_secs(1)).await,
        }
    }
}

fn stderr(text: &str) -> Step {
    Step::Err(Bytes::copy_from_slice(text.as_bytes()))
}

#[tokio::test(start_paused = true)]
async fn a_good_archive_is_staged_with_the_workers_logs() {
    let f = fixture();
    let archive = Archive::new().file("report.txt", b"fine").finish();
    let mut steps = vec![stderr("working\n")];
    steps.extend(chunks(&archive, 300));
    let (outcome, record, engine) = run_script(&f, Script::new(steps, 0)).await;
    assert_eq!(outcome.status, SessionStatus::Staged, "{outcome:?}");
    assert_eq!(
        (outcome.files, outcome.rejected, outcome.host_failure),
        (1, 0, false)
    );
    assert_eq!(record.staged, outcome.staged);
    assert_eq!(std::fs::read_to_string(&outcome.logs).unwrap(), "working\n");
    assert!(
        !engine.called("kill"),
        "a container that ended by itself is not killed"
    );
    assert!(events(&f, &outcome.session).contains(&"session.staged".to_string()));
}

/// A good archive's staged manifest carries the verified container settings and their digest.
#[tokio::test(start_paused = true)]
async fn the_manifest_says_what_the_container_really_ran_with() {
    let f = fixture();
    let archive = Archive::new().file("report.txt", b"fine").finish();
    let (outcome, _, engine) = run_script(&f, Script::new(chunks(&archive, 300), 0)).await;
    let staged = outcome.staged.clone().unwrap();
    let manifest = Stage::new(f.home.staged_dir()).manifest(&staged).unwrap();
    let verified = manifest.container.unwrap();
    let plan = engine.plan().unwrap();
    assert_eq!(verified.settings, crate::verify::expected(&plan));
    assert_eq!(verified.digest.len(), 64);
    let calls = engine.calls();
    let at = |p: &str| calls.iter().position(|c| c.starts_with(p)).unwrap();
    assert!(at("effective") < at("start"), "{calls:?}");
    assert!(events(&f, &outcome.session).contains(&"container.verified".to_string()));
}

/// An engine that records any setting other than planned: the container never starts, is
/// removed, the mismatch is audited with its fields, and the session fails as the host's.
#[tokio::test(start_paused = true)]
async fn a_container_created_other_than_planned_never_starts() {
    type Weaken = fn(&mut crate::engine::Effective);
    let weakened: [(&str, Weaken); 4] = [
        ("readonly_rootfs", |e| e.readonly_rootfs = false),
        ("cap_drop", |e| e.cap_drop.clear()),
        ("network_mode", |e| e.network_mode = "bridge".into()),
        ("mounts", |e| {
            e.mounts.iter_mut().for_each(|m| m.read_only = false)
        }),
    ];
    for (field, weaken) in weakened {
        let f = fixture();
        let archive = Archive::new().file("report.txt", b"fine").finish();
        let engine = FakeEngine::tampering(Script::new(chunks(&archive, 300), 0), weaken);
        let (outcome, _) = run_with(&f, &engine, std::future::pending()).await;
        assert!(outcome.host_failure, "{field}: {outcome:?}");
        assert!(
            outcome.error.as_deref().unwrap_or("").contains(field),
            "{field}: {outcome:?}"
        );
        assert!(!engine.called("start"), "{field}: {:?}", engine.calls());
        assert_nothing_staged(&f, &outcome, &engine);
        let mismatch = audited(&f, &outcome.session)
            .into_iter()
            .find(|(e, _)| e == "container.mismatch")
            .unwrap();
        assert_eq!(mismatch.1["fields"][0]["field"], field, "{}", mismatch.1);
    }
}

/// A policy runtime the engine lacks is refused in one line before a session exists.
#[tokio::test(start_paused = true)]
async fn a_runtime_the_engine_lacks_is_refused_before_a_session_exists() {
    let f = fixture();
    let engine = FakeEngine::new(Script::new(Vec::new(), 0));
    let mut opts = options(&f);
    opts.policy.runtime = Some("runsc".into());
    opts.policy.runtime_required = true;
    let err = run_resolved(&f.home, &*engine, opts, &images(), std::future::pending())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SessionError::RuntimeMissing { runtime, have } if runtime == "runsc" && have == "runc"),
        "{err}"
    );
    assert!(!err.to_string().contains('\n'));
    assert!(!engine.called("create"), "{:?}", engine.calls());
    assert!(!f.home.audit_path().exists() || events_all(&f).is_empty());
}

/// An engine whose default seccomp profile is unconfined runs no worker: refused in one line
/// before a session exists.
#[tokio::test(start_paused = true)]
async fn an_engine_without_its_default_seccomp_profile_runs_no_worker() {
    let f = fixture();
    let engine = FakeEngine::new(Script::new(Vec::new(), 0));
    engine.set_security_options(&["name=seccomp,profile=unconfined", "name=apparmor"]);
    let err = run_resolved(
        &f.home,
        &*engine,
        options(&f),
        &images(),
        std::future::pending(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, SessionError::UnsafeEngine(_)), "{err}");
    assert!(err.to_string().contains("seccomp"), "{err}");
    assert!(!engine.called("create"), "{:?}", engine.calls());
}

/// A preferred runtime that is not required falls back to the engine's default, audited.
#[tokio::test(start_paused = true)]
async fn a_missing_preferred_runtime_falls_back_to_the_default_audited() {
    let f = fixture();
    let archive = Archive::new().file("report.txt", b"fine").finish();
    let engine = FakeEngine::new(Script::new(chunks(&archive, 300), 0));
    let mut opts = options(&f);
    opts.policy.runtime = Some("runsc".into());
    let outcome = run_resolved(&f.home, &*engine, opts, &images(), std::future::pending())
        .await
        .unwrap();
    assert_eq!(outcome.status, SessionStatus::Staged, "{outcome:?}");
    assert_eq!(engine.plan().unwrap().runtime, None);
    let fallback = audited(&f, &outcome.session)
        .into_iter()
        .find(|(e, _)| e == "runtime.fallback")
        .unwrap();
    assert_eq!(fallback.1["missing"], "runsc");
}

fn events_all(f: &Fixture) -> Vec<String> {
    std::fs::read_to_string(f.home.audit_path())
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// tests/integration session `a_worker_past_its_timeout_is_killed_and_reported`.
#[tokio::test(start_paused = true)]
async fn a_worker_past_its_timeout_is_killed_and_reported() {
    let f = fixture();
    let script = Script {
        steps: vec![stderr("ignoring SIGTERM\n"), Step::Hang],
        exit: ExitState::default(),
    };
    let (outcome, record, engine) = run_script(&f, script).await;
    assert_eq!(outcome.status, SessionStatus::Timeout, "{outcome:?}");
    assert!(outcome.timed_out && !outcome.host_failure, "{outcome:?}");
    assert_eq!(outcome.exit_code, Some(137));
    assert!(
        outcome.error.as_deref().unwrap_or("").contains("timeout"),
        "{outcome:?}"
    );
    assert!(record.exit.timed_out);
    assert!(engine.called("kill golem-"), "{:?}", engine.calls());
    assert_eq!(
        std::fs::read_to_string(&outcome.logs).unwrap(),
        "ignoring SIGTERM\n"
    );
    assert_nothing_staged(&f, &outcome, &engine);
}

/// An archive that begins and then stops sending: killed after `ARCHIVE_TIMEOUT` without a
/// byte, and the host's failure (the worker cannot reach the init's stdout).
#[tokio::test(start_paused = true)]
async fn an_archive_that_stalls_is_killed_and_is_the_hosts_failure() {
    let f = fixture();
    let archive = Archive::new().file("big.txt", &[b'x'; 4096]).finish();
    let mut steps = chunks(&archive[..2048], 512);
    steps.push(Step::Hang);
    let script = Script {
        steps,
        exit: ExitState::default(),
    };
    let (outcome, record, engine) = with_clock_running(run_script(&f, script)).await;
    assert_eq!(outcome.status, SessionStatus::Failed, "{outcome:?}");
    assert!(outcome.host_failure && !outcome.timed_out, "{outcome:?}");
    let error = outcome.error.clone().unwrap_or_default();
    assert!(error.contains("cut short"), "{error}");
    assert!(error.contains("no data for 300 s"), "{error}");
    assert_eq!(record.rejected, 0);
    assert!(engine.called("kill golem-"), "{:?}", engine.calls());
    assert_nothing_staged(&f, &outcome, &engine);
    assert!(!events(&f, &outcome.session).contains(&"output.rejected".to_string()));
}

/// tests/integration refusals `unreadable_files_and_directories_are_listed_rejections_not_
/// silently_dropped`: the init's refusal entries become listed rejections with their reasons,
/// and the rest is staged.
#[tokio::test(start_paused = true)]
async fn the_inits_refusal_entries_are_listed_rejections_and_the_rest_is_staged() {
    let f = fixture();
    let archive = Archive::new()
        .file("ok.txt", b"fine")
        .refusal("secret.txt", "Permission denied (os error 13)")
        .refusal("closed/", "cannot list it")
        .finish();
    let (outcome, record, engine) = run_script(&f, Script::new(chunks(&archive, 700), 0)).await;
    assert_eq!(outcome.status, SessionStatus::Staged, "{outcome:?}");
    assert_eq!((outcome.files, outcome.rejected), (1, 2), "{outcome:?}");
    assert!(!outcome.host_failure);
    assert_eq!(record.rejected, 2);
    let rejected: Vec<(String, String)> = audited(&f, &outcome.session)
        .into_iter()
        .filter(|(e, _)| e == "entry.rejected")
        .map(|(_, d)| {
            let field = |k: &str| d[k].as_str().unwrap_or("").to_string();
            (field("path"), field("reason"))
        })
        .collect();
    assert_eq!(rejected.len(), 2, "{rejected:?}");
    assert!(
        rejected
            .iter()
            .any(|(p, r)| p == "output/secret.txt" && r.contains("Permission denied")),
        "{rejected:?}"
    );
    assert!(rejected.iter().all(|(_, r)| !r.is_empty()), "{rejected:?}");
    assert!(!engine.called("kill"), "{:?}", engine.calls());
}

/// tests/integration refusals `too_many_files_and_thirty_megabytes_are_rejected_in_seconds_
/// and_not_blamed_on_the_host`: an archive over the policy's file cap is refused as a whole,
/// the container is killed while its stream is drained, and it is the worker's doing.
#[tokio::test(start_paused = true)]
async fn an_archive_over_the_caps_is_rejected_and_not_blamed_on_the_host() {
    let f = fixture();
    let max_files = options(&f).policy.output.max_files;
    let mut archive = Archive::new();
    for i in 0..=max_files {
        archive = archive.file(&format!("f{i}.txt"), b"x");
    }
    let mut steps = chunks(&archive.finish(), 4096);
    // More still to come, which nobody wants: the kill must not wait for it.
    steps.extend((0..64).map(|_| Step::Out(Bytes::from(vec![0u8; 65536]))));
    steps.push(Step::Hang);
    let (outcome, record, engine) = run_script(&f, Script::new(steps, 137)).await;
    assert_eq!(outcome.status, SessionStatus::Rejected, "{outcome:?}");
    assert!(!outcome.host_failure, "{outcome:?}");
    let error = outcome.error.clone().unwrap_or_default();
    assert!(error.starts_with("output rejected:"), "{error}");
    assert_eq!(record.rejected, 0);
    assert!(engine.called("kill golem-"), "{:?}", engine.calls());
    assert_nothing_staged(&f, &outcome, &engine);
    let audited = audited(&f, &outcome.session);
    let refusals: Vec<_> = audited
        .iter()
        .filter(|(e, _)| e == "output.rejected")
        .collect();
    assert_eq!(refusals.len(), 1, "{audited:?}");
}

/// tests/integration crashes `an_archive_cut_short_by_the_host_is_the_hosts_failure_not_the_
/// workers`: the stream ends before the archive does.
#[tokio::test(start_paused = true)]
async fn an_archive_cut_short_is_the_hosts_failure_not_the_workers() {
    let f = fixture();
    let archive = Archive::new().file("big.txt", &[b'x'; 8192]).finish();
    let steps = chunks(&archive[..4096], 1024);
    let (outcome, record, engine) = run_script(&f, Script::new(steps, 137)).await;
    assert_eq!(outcome.status, SessionStatus::Failed, "{outcome:?}");
    assert!(outcome.host_failure, "{outcome:?}");
    let error = outcome.error.clone().unwrap_or_default();
    assert!(error.contains("cut short"), "{error}");
    assert!(error.contains("the container exited 137"), "{error}");
    assert_eq!((outcome.rejected, record.rejected), (0, 0));
    assert_nothing_staged(&f, &outcome, &engine);
    assert!(!events(&f, &outcome.session).contains(&"output.rejected".to_string()));
}

/// The init's own deadline (exit 124, no archive): a timeout like any other.
#[tokio::test(start_paused = true)]
async fn the_inits_deadline_is_a_timeout() {
    let f = fixture();
    let steps = vec![stderr("init: deadline\n")];
    let code = plan::INIT_EXIT_DEADLINE;
    let (outcome, record, engine) = run_script(&f, Script::new(steps, code)).await;
    assert_eq!(outcome.status, SessionStatus::Timeout, "{outcome:?}");
    assert!(outcome.timed_out && record.exit.timed_out, "{outcome:?}");
    assert_eq!(outcome.exit_code, Some(code));
    assert!(!outcome.host_failure);
    assert_eq!(
        outcome.error.as_deref(),
        Some("killed at the init's deadline")
    );
    assert_nothing_staged(&f, &outcome, &engine);
}

/// tests/integration session: an OOM-killed worker is reported `oom`, not staged.
#[tokio::test(start_paused = true)]
async fn an_oom_killed_container_is_reported_oom() {
    let f = fixture();
    let script = Script {
        steps: vec![stderr("allocating\n")],
        exit: ExitState {
            code: Some(137),
            oom_killed: true,
        },
    };
    let (outcome, _, engine) = run_script(&f, script).await;
    assert_eq!(outcome.status, SessionStatus::Oom, "{outcome:?}");
    assert!(outcome.oom_killed && !outcome.timed_out && !outcome.host_failure);
    let error = outcome.error.clone().unwrap_or_default();
    assert!(error.contains("memory limit"), "{error}");
    assert_nothing_staged(&f, &outcome, &engine);
}

/// A container that ends without an archive and not at the init's deadline: the host's
/// failure (its init was killed from outside, or the engine dropped the stream).
#[tokio::test(start_paused = true)]
async fn a_container_that_ends_without_an_archive_is_the_hosts_failure() {
    let f = fixture();
    let (outcome, _, engine) = run_script(&f, Script::new(vec![stderr("bye\n")], 1)).await;
    assert_eq!(outcome.status, SessionStatus::Failed, "{outcome:?}");
    assert!(outcome.host_failure, "{outcome:?}");
    let error = outcome.error.clone().unwrap_or_default();
    assert!(error.contains("without streaming its output"), "{error}");
    assert!(
        engine.called("kill golem-"),
        "a failed session's worker is stopped"
    );
    assert_nothing_staged(&f, &outcome, &engine);
}

/// tests/integration session `ctrl_c_cancels_the_session_and_removes_its_container`.
#[tokio::test(start_paused = true)]
async fn a_cancelled_session_is_cancelled_and_its_container_removed() {
    let f = fixture();
    let engine = FakeEngine::new(Script {
        steps: vec![stderr("running\n"), Step::Hang],
        exit: ExitState::default(),
    });
    let cancel = tokio::time::sleep(Duration::from_secs(1));
    let (outcome, record) = run_with(&f, &engine, cancel).await;
    assert_eq!(outcome.status, SessionStatus::Cancelled, "{outcome:?}");
    assert_eq!(outcome.error.as_deref(), Some("cancelled"));
    assert!(!outcome.timed_out && !outcome.host_failure, "{outcome:?}");
    assert_eq!(record.status, SessionStatus::Cancelled);
    assert!(engine.called("kill golem-"), "{:?}", engine.calls());
    assert_nothing_staged(&f, &outcome, &engine);
    assert!(!f.home.session_dir(&outcome.session).join("input").exists());
}

mod model;
