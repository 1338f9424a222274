//! A session with model access, against the real gateway and the scripted upstream on
//! loopback, with the scripted engine standing in for the container: the test speaks to the
//! socket the plan mounts while the "container" runs. The clock is real (the gateway's
//! requests are real I/O).

use std::sync::Arc;

use golem_test_upstream::{Reply, Upstream as Scripted};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::Notify;

use super::*;
use crate::engine::fake::PlanSteps;
use crate::gateway::{ModelAccess, ModelApi, ModelKey, Upstream};

const MODEL: &str = "test-model";

/// Model access through a scripted upstream speaking the OpenAI API.
async fn access(replies: Vec<Reply>) -> (Scripted, ModelAccess) {
    let scripted = Scripted::start(replies).await.unwrap();
    let key = ModelKey::new("sk-host-secret-abcdef").unwrap();
    let upstream = Upstream::new(
        ModelApi::Openai,
        &scripted.base_url(),
        key,
        Some(MODEL.into()),
    )
    .unwrap();
    let access = ModelAccess {
        upstream: Arc::new(upstream),
        model: None,
        batch_budget: None,
    };
    (scripted, access)
}

fn model_options(f: &Fixture, access: &ModelAccess) -> RunOptions {
    RunOptions {
        model: Some(access.clone()),
        ..options(f)
    }
}

/// The socket's host path and the honeytoken, once the container exists.
async fn mounted(engine: &FakeEngine) -> (PathBuf, String) {
    for _ in 0..2000 {
        if let Some(plan) = engine.plan() {
            let socket = plan
                .binds
                .iter()
                .find(|b| b.target == plan.env["GOLEM_MODEL_SOCKET"])
                .map(|b| b.source.clone())
                .expect("the socket is mounted");
            let token = plan.env["OPENAI_API_KEY"].clone();
            return (socket, token);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the container was never created");
}

/// One chat request on the socket; returns the status.
async fn ask(socket: &Path, content: &str) -> u16 {
    let body = json!({"model": MODEL, "max_tokens": 16,
        "messages": [{"role": "user", "content": content}]})
    .to_string();
    let mut s = UnixStream::connect(socket).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// As root, the socket (0600) and its directory (0700) belong to the session's uid; otherwise
/// the socket is reachable only through the session's 0700 directory, i.e. the bind mount.
fn assert_socket_is_the_sessions_alone(engine: &FakeEngine, socket: &Path) {
    use std::os::unix::fs::MetadataExt;
    let plan = engine.plan().unwrap();
    let uid: u32 = plan.user.split(':').next().unwrap().parse().unwrap();
    let dir = socket.parent().unwrap();
    let (s, d) = (socket.metadata().unwrap(), dir.metadata().unwrap());
    let session_dir = dir.parent().unwrap().metadata().unwrap();
    assert_eq!(
        (d.mode() & 0o777, session_dir.mode() & 0o777),
        (0o700, 0o700)
    );
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!((s.uid(), d.uid(), s.mode() & 0o777), (uid, uid, 0o600));
    }
}

/// Runs a model session whose container plays `steps`; `drive` acts on the socket meanwhile
/// and resolves `cancel` if it wants the session cancelled.
async fn run_model<D>(
    f: &Fixture,
    opts: RunOptions,
    steps: Vec<Step>,
    drive: impl FnOnce(Arc<FakeEngine>, tokio::sync::oneshot::Sender<()>) -> D,
) -> (Outcome, Record, Arc<FakeEngine>)
where
    D: Future<Output = ()>,
{
    let engine = FakeEngine::new(Script::new(steps, 0));
    let (cancel_tx, cancel_rx) = tokio::sync::oneshot::channel::<()>();
    let cancel = async move {
        if cancel_rx.await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let images = images();
    let session = run_resolved(&f.home, engine.as_ref(), opts, &images, cancel);
    let (outcome, ()) = tokio::join!(session, drive(engine.clone(), cancel_tx));
    let outcome = outcome.unwrap();
    let record = load(&f.home, &outcome.session).unwrap();
    (outcome, record, engine)
}

/// An archive of one file, plus the steps that stream it.
fn archive_of(name: &str, data: &[u8]) -> Vec<Step> {
    chunks(&Archive::new().file(name, data).finish(), 4096)
}

/// Asserts the gateway's events all precede `session.finished`, with `model.summary` last
/// before it, and returns the session's events.
fn assert_model_events_before_the_end(f: &Fixture, session: &str) -> Vec<(String, Value)> {
    let audited = audited(f, session);
    let names: Vec<&str> = audited.iter().map(|(e, _)| e.as_str()).collect();
    let n = names.len();
    assert_eq!(
        names[n.saturating_sub(2)..],
        ["model.summary", "session.finished"],
        "{names:?}"
    );
    audited
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_session_mounts_its_socket_audits_each_request_and_stages_the_transcript() {
    let f = fixture();
    let (scripted, access) = access(vec![Reply::text("hello").usage(10, 5)]).await;
    let go = Arc::new(Notify::new());
    let mut steps = vec![Step::Until(go.clone())];
    steps.extend(archive_of("agent.md", b"done"));
    let socket_seen = Arc::new(std::sync::Mutex::new(None));
    let seen = socket_seen.clone();
    let (outcome, record, engine) = run_model(
        &f,
        model_options(&f, &access),
        steps,
        |engine, _cancel| async move {
            let (socket, _) = mounted(&engine).await;
            assert_socket_is_the_sessions_alone(&engine, &socket);
            assert_eq!(ask(&socket, "hi").await, 200);
            *seen.lock().unwrap() = Some(socket);
            go.notify_one();
        },
    )
    .await;
    assert_eq!(outcome.status, SessionStatus::Staged, "{outcome:?}");
    let usage = crate::gateway::ModelUsage {
        requests: 1,
        input_tokens: 10,
        output_tokens: 5,
        refused: 0,
    };
    assert_eq!((outcome.model, record.model), (Some(usage), Some(usage)));
    assert_eq!(scripted.count(), 1);
    let plan = engine.plan().unwrap();
    assert!(plan.env["GOLEM_MODEL_SOCKET"].starts_with(crate::gateway::CONTAINER_SOCKET_PREFIX));
    // The socket went with the container.
    let socket = socket_seen.lock().unwrap().clone().unwrap();
    assert!(!socket.exists() && !socket.parent().unwrap().exists());
    // Staged with its hash; what `transcript` reads is exactly that.
    let id = outcome.staged.clone().unwrap();
    let manifest = Stage::new(f.home.staged_dir()).manifest(&id).unwrap();
    let model = manifest.model.clone().unwrap();
    assert_eq!((model.usage, model.honeytoken_seen), (usage, false));
    let staged = stage::read_transcript(&f.home, &id).unwrap().unwrap();
    assert_eq!(
        crate::gateway::transcript::sha256_hex(&staged),
        model.transcript_sha256
    );
    assert!(String::from_utf8_lossy(&staged).contains("hello"));
    let path = f.home.staged_dir().join(&id).join(stage::TRANSCRIPT);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let audited = assert_model_events_before_the_end(&f, &outcome.session);
    let requests = audited.iter().filter(|(e, _)| e == "model.request").count();
    assert_eq!(requests, 1, "{audited:?}");
    // The honeytoken is the container's alone: the audited plan carries a placeholder.
    let token = plan.env["OPENAI_API_KEY"].clone();
    let log = std::fs::read_to_string(f.home.audit_path()).unwrap();
    assert!(!log.contains(&token) && log.contains(crate::session::HONEYTOKEN_PLACEHOLDER));
    // A transcript changed after staging is refused.
    std::fs::write(&path, b"{}\n").unwrap();
    assert!(matches!(
        stage::read_transcript(&f.home, &id),
        Err(StageError::Tampered { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_model_session_still_shuts_its_gateway_down_and_audits_its_requests() {
    let f = fixture();
    let (_scripted, access) = access(vec![Reply::text("hello").usage(7, 3)]).await;
    let socket_seen = Arc::new(std::sync::Mutex::new(None));
    let seen = socket_seen.clone();
    let (outcome, record, _) = run_model(
        &f,
        model_options(&f, &access),
        vec![Step::Hang],
        |engine, cancel| async move {
            let (socket, _) = mounted(&engine).await;
            assert_eq!(ask(&socket, "hi").await, 200);
            *seen.lock().unwrap() = Some(socket);
            let _ = cancel.send(());
        },
    )
    .await;
    assert_eq!(outcome.status, SessionStatus::Cancelled, "{outcome:?}");
    assert_eq!(record.model.map(|m| m.requests), Some(1));
    let socket = socket_seen.lock().unwrap().clone().unwrap();
    assert!(!socket.exists(), "the socket is gone after a cancel");
    let audited = assert_model_events_before_the_end(&f, &outcome.session);
    assert!(audited.iter().any(|(e, _)| e == "model.request"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_session_past_its_timeout_still_shuts_its_gateway_down() {
    let f = fixture();
    let (_scripted, access) = access(Vec::new()).await;
    let mut opts = model_options(&f, &access);
    opts.policy.resources.timeout = crate::units::Limit(Duration::from_secs(1));
    let (outcome, record, _) = run_model(&f, opts, vec![Step::Hang], |_, _| async {}).await;
    assert_eq!(outcome.status, SessionStatus::Timeout, "{outcome:?}");
    assert_eq!(record.model, Some(crate::gateway::ModelUsage::default()));
    let dir = f.home.session_dir(&outcome.session).join(MODEL_DIR);
    assert!(!dir.exists(), "the socket's directory is gone");
    assert_model_events_before_the_end(&f, &outcome.session);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_honeytoken_in_the_output_or_the_logs_flags_the_stage() {
    for in_logs in [false, true] {
        let f = fixture();
        let (_scripted, access) = access(Vec::new()).await;
        let steps = vec![Step::FromPlan(PlanSteps(Arc::new(move |plan| {
            let token = plan.env["OPENAI_API_KEY"].clone();
            let mut steps = Vec::new();
            let data = if in_logs {
                steps.push(Step::Err(Bytes::from(format!("env: {token}\n"))));
                "nothing".to_string()
            } else {
                format!("the key is {token}")
            };
            steps.extend(archive_of("leak.txt", data.as_bytes()));
            steps
        })))];
        let opts = model_options(&f, &access);
        let (outcome, _, _) = run_model(&f, opts, steps, |_, _| async {}).await;
        assert_eq!(outcome.status, SessionStatus::Staged, "{outcome:?}");
        let id = outcome.staged.clone().unwrap();
        let manifest = Stage::new(f.home.staged_dir()).manifest(&id).unwrap();
        assert!(manifest.model.unwrap().honeytoken_seen, "in_logs {in_logs}");
        let audited = assert_model_events_before_the_end(&f, &outcome.session);
        let place = if in_logs { "logs" } else { "output" };
        assert!(
            audited.iter().any(|(e, d)| e == "model.honeytoken"
                && d["where"] == place
                && d["severity"] == "high"),
            "{audited:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn without_model_access_nothing_model_related_enters_the_container() {
    let f = fixture();
    let archive = Archive::new().file("report.txt", b"fine").finish();
    let (outcome, record, engine) = run_script(&f, Script::new(chunks(&archive, 300), 0)).await;
    assert_eq!(outcome.status, SessionStatus::Staged, "{outcome:?}");
    let plan = engine.plan().unwrap();
    assert!(plan.binds.iter().all(|b| !b
        .target
        .starts_with(crate::gateway::CONTAINER_SOCKET_PREFIX)));
    assert!(!plan.env.contains_key("GOLEM_MODEL_SOCKET"));
    assert!(
        !plan.env.contains_key("OPENAI_API_KEY") && !plan.env.contains_key("ANTHROPIC_API_KEY")
    );
    assert!(outcome.model.is_none() && record.model.is_none());
    let id = outcome.staged.unwrap();
    assert!(Stage::new(f.home.staged_dir())
        .manifest(&id)
        .unwrap()
        .model
        .is_none());
    assert_eq!(stage::read_transcript(&f.home, &id).unwrap(), None);
    assert!(!events(&f, &outcome.session)
        .iter()
        .any(|e| e.starts_with("model.")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_outside_the_allowlist_is_refused_before_any_session_exists() {
    let f = fixture();
    let (_scripted, mut access) = access(Vec::new()).await;
    access.model = Some("not-allowed".into());
    let engine = FakeEngine::new(Script::new(Vec::new(), 0));
    let opts = model_options(&f, &access);
    let err = run_resolved(
        &f.home,
        engine.as_ref(),
        opts,
        &images(),
        std::future::pending(),
    )
    .await
    .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("--model not-allowed is not allowed"),
        "{message}"
    );
    assert!(!message.contains('\n'));
    assert!(engine.calls().is_empty(), "{:?}", engine.calls());
    assert_eq!(
        std::fs::read_dir(f.home.sessions_dir())
            .map(|d| d.count())
            .unwrap_or(0),
        0
    );
    // The allowed one is taken, and only it.
    access.model = Some(MODEL.into());
    let policy = crate::session::model_policy(&model_options(&f, &access))
        .unwrap()
        .unwrap();
    assert_eq!(policy.allow, [MODEL]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_honeytoken_in_a_request_is_refused_and_flags_the_stage() {
    let f = fixture();
    let (scripted, access) = access(Vec::new()).await;
    let go = Arc::new(Notify::new());
    let mut steps = vec![Step::Until(go.clone())];
    steps.extend(archive_of("agent.md", b"done"));
    let (outcome, record, _) = run_model(
        &f,
        model_options(&f, &access),
        steps,
        |engine, _cancel| async move {
            let (socket, token) = mounted(&engine).await;
            let status = ask(&socket, &format!("my key is {token}")).await;
            assert!((400..500).contains(&status), "{status}");
            go.notify_one();
        },
    )
    .await;
    assert_eq!(scripted.count(), 0, "never forwarded");
    assert_eq!(record.model.map(|m| (m.requests, m.refused)), Some((0, 1)));
    let id = outcome.staged.clone().unwrap();
    let manifest = Stage::new(f.home.staged_dir()).manifest(&id).unwrap();
    assert!(manifest.model.unwrap().honeytoken_seen);
    let audited = assert_model_events_before_the_end(&f, &outcome.session);
    assert!(audited
        .iter()
        .any(|(e, d)| e == "model.honeytoken" && d["severity"] == "high"));
    let summary = &audited[audited.len() - 2].1;
    assert_eq!(summary["honeytoken_seen"], true);
}

/// `--dry-run` shows what a session would mount: the socket and its variables, with a
/// placeholder for the key a session draws only when it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_shows_the_socket_and_its_variables() {
    let f = fixture();
    let (_scripted, access) = access(Vec::new()).await;
    let shown = crate::spec::preview(&f.home, &model_options(&f, &access)).unwrap();
    let socket = shown
        .plan
        .binds
        .iter()
        .find(|b| {
            b.target
                .starts_with(crate::gateway::CONTAINER_SOCKET_PREFIX)
        })
        .unwrap();
    assert!(!socket.read_only && socket.source.ends_with("model/model.sock"));
    assert_eq!(shown.plan.env["GOLEM_MODEL_SOCKET"], socket.target);
    assert_eq!(
        shown.plan.env["OPENAI_API_KEY"],
        crate::session::HONEYTOKEN_PLACEHOLDER
    );
    let without = crate::spec::preview(&f.home, &options(&f)).unwrap();
    assert!(!without.plan.env.contains_key("GOLEM_MODEL_SOCKET"));
}
