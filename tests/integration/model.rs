//! Attacks on the model gateway (issue 13): a session that may use a model gets one Unix socket,
//! bind-mounted at a random `/.golem-model-*.sock` named by `GOLEM_MODEL_SOCKET`, behind
//! which golem-orch holds the key and the
//! budget. Everything here is real: the engine, the container, the socket, the gateway, the
//! agent worker. Only the provider is scripted: `golem-test-upstream` listens on 127.0.0.1 in
//! the test process, answers from a script and records every request it received, so a story
//! can assert what reached "the provider" (and what did not).
//!
//! The attacker is the hostile worker's `model` mode (`tests/hostile-worker/src/model.rs`), run
//! through a project worker definition with `model: true`; it writes what the gateway answered
//! into `/output/model.json`. Each story has its own state directory, provider, and key (a
//! fresh random string, so a search for it can only find a leak).

use std::path::PathBuf;
use std::time::Duration;

use golem_test_upstream::{Recorded, Reply, Upstream};
use serde_json::{json, Value};

use crate::harness::{
    attack, audit_of, contains, docker_build, files_containing, hostile_image, session_logs,
    stderr_text, tree, Golem, Run, RunBuilder, Status,
};

/// The scripted provider, on its own runtime so that the tests (plain threads) can drive
/// golem-orch while it answers.
struct Provider {
    // Dropped before the runtime it runs on.
    upstream: Upstream,
    _rt: tokio::runtime::Runtime,
    api: &'static str,
    /// The host's key for this story: random, so finding it anywhere is a leak.
    key: String,
    /// An empty config home, so the person's own `model.yaml` never joins in.
    xdg: tempfile::TempDir,
}

/// Where a session's socket appears in its container: this prefix and a random name, which the
/// worker learns from `GOLEM_MODEL_SOCKET`.
const SOCKET_PREFIX: &str = "/.golem-model-";

/// The model the host names (`GOLEM_MODEL`), which `allow: [host]` resolves to.
const HOST_MODEL: &str = "scripted-model-1";

impl Provider {
    /// A provider speaking `api` (`anthropic` or `openai`) that answers `script`, then "ok".
    fn start(api: &'static str, script: Vec<Reply>) -> Provider {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let upstream = rt
            .block_on(Upstream::start(script))
            .expect("scripted upstream");
        Provider {
            upstream,
            _rt: rt,
            api,
            key: format!("sk-host-{}", uuid::Uuid::new_v4().simple()),
            xdg: tempfile::tempdir().expect("xdg dir"),
        }
    }

    /// The host environment that points golem-orch at this provider.
    fn env(&self) -> Vec<(String, String)> {
        vec![
            ("GOLEM_MODEL_API".into(), self.api.into()),
            ("GOLEM_MODEL_BASE_URL".into(), self.upstream.base_url()),
            ("GOLEM_MODEL_KEY".into(), self.key.clone()),
            ("GOLEM_MODEL".into(), HOST_MODEL.into()),
            (
                "XDG_CONFIG_HOME".into(),
                self.xdg.path().display().to_string(),
            ),
        ]
    }

    /// Every request the provider received.
    fn requests(&self) -> Vec<Recorded> {
        self.upstream.requests()
    }

    fn push(&self, reply: Reply) {
        self.upstream.push(reply);
    }

    fn set_fallback(&self, reply: Reply) {
        self.upstream.set_fallback(reply);
    }
}

/// Writes `workers/<name>.worker`: the hostile image asking for a model, running `command`
/// (and a `golem.yaml`, which makes the directory a project whose workers are read).
fn model_worker(g: &Golem, name: &str, command: &[&str]) {
    if !g.project.path().join("golem.yaml").exists() {
        g.file("golem.yaml", "levels: {}\n");
    }
    let command = serde_json::to_string(command).expect("command");
    g.file(
        &format!("workers/{name}.worker"),
        format!(
            "---\nname: {name}\ndescription: attacks the model gateway\nimage: {}\ncommand: {command}\ntrust: untrusted\nmodel: true\n---\nAttack the gateway.\n",
            hostile_image()
        ),
    );
}

/// Narrows the untrusted level's `model:` section in the project's `golem.yaml`.
fn narrow_model(g: &Golem, yaml: &str) {
    g.file(
        "golem.yaml",
        format!("levels:\n  untrusted:\n    model:\n{yaml}"),
    );
}

/// `run --json --worker NAME` with the provider configured.
fn run_worker<'g>(g: &'g Golem, p: &Provider, name: &str) -> RunBuilder<'g> {
    g.run().flags(["--worker", name]).envs(p.env())
}

/// What the hostile worker recorded, one entry per request (see its `model` mode).
fn results(g: &Golem, run: &Run) -> Vec<Value> {
    let path = g.staged_files(&run.staged()).join("model.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} ({} / {})", path.display(), run.json, run.stderr));
    serde_json::from_str::<Value>(&text)
        .expect("model.json")
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The one result of `action`.
fn result<'a>(all: &'a [Value], action: &str) -> &'a Value {
    all.iter()
        .find(|r| r["action"] == action)
        .unwrap_or_else(|| panic!("no {action} in {all:?}"))
}

/// The `error.type` of a gateway refusal body.
fn refusal_kind(r: &Value) -> &str {
    r["body"]["error"]["type"].as_str().unwrap_or("")
}

/// The staged manifest of a run.
fn manifest(g: &Golem, run: &Run) -> Value {
    let path = g
        .home
        .join("staged")
        .join(run.staged())
        .join("manifest.json");
    serde_json::from_str(&std::fs::read_to_string(&path).expect("manifest")).expect("manifest json")
}

/// The audit records of a session with this event name.
fn events(g: &Golem, session: &str, event: &str) -> Vec<Value> {
    audit_of(g, session)
        .into_iter()
        .filter(|r| r["event"] == event)
        .collect()
}

/// The run's `model` usage as `run --json` reports it.
fn usage(run: &Run) -> (u64, u64) {
    let m = &run.json["model"];
    (
        m["requests"]
            .as_u64()
            .unwrap_or_else(|| panic!("no model usage: {}", run.json)),
        m["refused"].as_u64().unwrap_or(0),
    )
}

// ------------------------------------------------------------------------------ the socket

attack! {
    /// Model access does not open the network: the container still has only `lo` and its TCP
    /// egress fails in the kernel, while the socket works. Attacks plan.rs (network none kept
    /// when the socket is mounted).
    fn direct_egress_still_fails_with_model_access(g)
    given { model_worker(&g, "mal", &["probe"]); }
    {
        let p = Provider::start("anthropic", vec![]);
        let run = run_worker(&g, &p, "mal").expect(Status::Staged);
        let probe: Value = serde_json::from_str(
            &std::fs::read_to_string(g.staged_files(&run.staged()).join("probe.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(probe["interfaces"]["names"], json!(["lo"]), "{probe}");
        for a in probe["tcp_egress"].as_array().expect("tcp attempts") {
            assert_eq!((a["attempted"].clone(), a["ok"].clone()), (json!(true), json!(false)), "{a}");
        }
        let env = &probe["env"];
        let socket = env["GOLEM_MODEL_SOCKET"].as_str().unwrap_or_default();
        assert!(socket.starts_with(SOCKET_PREFIX) && socket.ends_with(".sock"), "{env}");
        assert!(env.get("ANTHROPIC_API_KEY").is_some(), "no honeytoken in {env}");
        assert_eq!(p.requests().len(), 0);
    }
}

attack! {
    /// A model the level does not allow is refused with 403 and never forwarded; the allowed
    /// one passes. Attacks gateway/check.rs `check_body` (allowlist).
    fn a_model_outside_the_allowlist_gets_403(g)
    given { model_worker(&g, "mal", &["model", "ask-model", "gpt-4-evil", "ask"]); }
    {
        let p = Provider::start("anthropic", vec![]);
        let run = run_worker(&g, &p, "mal").expect(Status::Staged);
        let r = results(&g, &run);
        assert_eq!(result(&r, "ask-model")["status"], 403, "{r:?}");
        assert_eq!(refusal_kind(result(&r, "ask-model")), "model_not_allowed");
        assert_eq!(result(&r, "ask")["status"], 200, "{r:?}");
        let reqs = p.requests();
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].json()["model"], HOST_MODEL);
        assert_eq!(usage(&run), (1, 1));
    }
}

attack! {
    /// A body over the level's `max_request_bytes` gets 413 and nothing reaches the provider.
    /// Attacks gateway/check.rs `read_body`.
    fn an_oversize_body_gets_413(g)
    given {
        model_worker(&g, "mal", &["model", "big", "200000", "ask"]);
        narrow_model(&g, "      max_request_bytes: 64KiB\n");
    }
    {
        let p = Provider::start("openai", vec![]);
        let run = run_worker(&g, &p, "mal").expect(Status::Staged);
        let r = results(&g, &run);
        assert_eq!(result(&r, "big")["status"], 413, "{r:?}");
        assert_eq!(result(&r, "ask")["status"], 200, "{r:?}");
        assert_eq!(p.requests().len(), 1);
        assert!(p.requests().iter().all(|q| q.body.len() < 64 * 1024));
        let refused = events(&g, &run.session(), "model.refused");
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(refused[0]["data"]["refused"], "too_large");
    }
}

attack! {
    /// The socket is not a proxy: CONNECT and absolute-form targets are refused, audited, and
    /// never forwarded. Attacks gateway/server.rs `route`.
    fn connect_and_absolute_form_requests_are_refused(g)
    given { model_worker(&g, "mal", &["model", "connect", "absolute"]); }
    {
        let p = Provider::start("anthropic", vec![]);
        let run = run_worker(&g, &p, "mal").expect(Status::Staged);
        let r = results(&g, &run);
        assert_eq!(result(&r, "connect")["status"], 405, "{r:?}");
        assert_eq!(refusal_kind(result(&r, "connect")), "connect");
        assert_eq!(result(&r, "absolute")["status"], 400, "{r:?}");
        assert_eq!(refusal_kind(result(&r, "absolute")), "absolute_form");
        assert_eq!(p.requests().len(), 0);
        let kinds: Vec<Value> = events(&g, &run.session(), "model.refused")
            .iter()
            .map(|e| e["data"]["refused"].clone())
            .collect();
        assert_eq!(kinds, [json!("connect"), json!("absolute_form")]);
        assert_eq!(usage(&run), (0, 2));
    }
}

attack! {
    /// The worker's own credentials (Authorization, x-api-key, Cookie) never reach the
    /// provider; the host's key does, as the one Authorization header. Attacks
    /// gateway/forward.rs (the header allowlist).
    fn the_workers_own_authorization_never_reaches_the_upstream(g)
    given { model_worker(&g, "mal", &["model", "auth"]); }
    {
        let p = Provider::start("openai", vec![]);
        let run = run_worker(&g, &p, "mal").expect(Status::Staged);
        assert_eq!(result(&results(&g, &run), "auth")["status"], 200);
        let reqs = p.requests();
        assert_eq!(reqs.len(), 1);
        let q = &reqs[0];
        let bearer = format!("Bearer {}", p.key);
        assert_eq!(q.header("authorization"), Some(bearer.as_str()));
        assert_eq!(q.header("x-api-key"), None);
        assert_eq!(q.header("cookie"), None);
        for (name, value) in &q.headers {
            assert!(!value.contains("worker-own"), "{name}: {value} reached the provider");
        }
    }
}

attack! {
    /// The host's key is nowhere the worker or a reviewer can see it: not in the container's
    /// environment, /proc, mounts or files; not in the stage, the logs, the transcript or the
    /// audit log; not on golem-orch's stdout or stderr. Only the provider gets it. Attacks
    /// plan.rs (env: only the socket and the honeytoken), gateway/config.rs (`ModelKey`).
    fn the_key_appears_nowhere_in_the_container_the_stage_the_logs_or_the_audit(g)
    given { model_worker(&g, "mal", &["model", "leak", "ask", "info"]); }
    {
        let p = Provider::start("anthropic", vec![]);
        let out = run_worker(&g, &p, "mal").output();
        let run = crate::harness::parse_run(&out);
        let run = run.expect(Status::Staged);
        let key = p.key.as_bytes();
        let view = std::fs::read(g.staged_files(&run.staged()).join("leak.bin")).unwrap();
        assert!(view.len() > 1000, "the worker saw too little to be convincing");
        assert!(contains(&view, b"ANTHROPIC_API_KEY="), "no honeytoken in the container's env");
        assert!(contains(&view, SOCKET_PREFIX.as_bytes()), "the socket mount is not in mountinfo");
        assert!(!contains(&view, key), "the key is visible inside the container");
        assert_eq!(files_containing(&g.home, key), Vec::<PathBuf>::new(), "the key is in the state directory");
        assert!(!contains(&out.stdout, key) && !contains(&out.stderr, key));
        assert!(!session_logs(&g.home, &run.session()).contains(&p.key));
        assert!(!g.audit().iter().any(|a| a.to_string().contains(&p.key)));
        let reqs = p.requests();
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].header("x-api-key"), Some(p.key.as_str()));
        let dry = run_worker(&g, &p, "mal").flags(["--dry-run"]).output();
        assert!(dry.status.success(), "{}", stderr_text(&dry));
        assert!(!contains(&dry.stdout, key) && !contains(&dry.stderr, key), "--dry-run printed the key");
        let staged = run.staged();
        for cmd in [["show", staged.as_str()], ["transcript", staged.as_str()]] {
            let out = g.output(cmd);
            assert!(out.status.success(), "{cmd:?}: {}", stderr_text(&out));
            assert!(!contains(&out.stdout, key), "{cmd:?} printed the key");
        }
    }
}

attack! {
    /// A provider (or whatever the host's base URL really points at) that echoes the key in its
    /// answer, as some do in an "invalid key" error, cannot hand it to the worker: the gateway
    /// withholds any answer carrying the key (502), and the key lands nowhere: not in the
    /// container's evidence, the transcript or the audit log. Attacks gateway/forward.rs (the
    /// answer is checked before it is passed on).
    fn an_upstream_that_echoes_the_key_cannot_hand_it_to_the_worker(g)
    given { model_worker(&g, "mal", &["model", "ask", "ask"]); }
    {
        let p = Provider::start("anthropic", vec![]);
        p.push(Reply::error(401, &format!("invalid x-api-key: {}", p.key)));
        p.push(Reply::raw(200, json!({"type": "message", "content": [{"type": "text", "text": p.key}],
            "usage": {"input_tokens": 3, "output_tokens": 4}})));
        let run = run_worker(&g, &p, "mal").expect(Status::Staged);
        let r = results(&g, &run);
        assert_eq!(r.len(), 2, "{r:?}");
        for ask in &r {
            assert_eq!(ask["status"], 502, "{ask}");
        }
        assert_eq!(p.requests().len(), 2);
        let key = p.key.as_bytes();
        assert_eq!(files_containing(&g.home, key), Vec::<PathBuf>::new(), "the key is in the state directory");
        assert!(!g.audit().iter().any(|a| a.to_string().contains(&p.key)));
    }
}

/// The host path of the (only) gateway socket of a running session of `g`.
fn running_socket(g: &Golem) -> Option<PathBuf> {
    std::fs::read_dir(g.home.join("sessions"))
        .ok()?
        .flatten()
        .map(|e| e.path().join("model").join("model.sock"))
        .find(|s| s.exists())
}

#[test]
fn session_a_cannot_reach_session_bs_socket() {
    use std::os::unix::fs::MetadataExt;
    let g = Golem::new();
    model_worker(&g, "holder", &["sleep", "300"]);
    model_worker(&g, "prober", &["from-input"]);
    let p = Provider::start("anthropic", vec![]);
    let witness = crate::harness::HostWitness::take(&g);
    let b = g
        .spawn(run_worker(&g, &p, "holder"))
        .wait_workers(1)
        .wait_for("session B's socket", || running_socket(&g).is_some());
    let b_socket = running_socket(&g).expect("B's socket");
    // What the engine holds of B's container (its environment, mounts, command) has no key.
    let label = format!("label=golem.home={}", g.home.display());
    let ids = crate::harness::docker_lines(&["ps", "-q", "--filter", &label]);
    let inspect = std::process::Command::new("docker")
        .arg("inspect")
        .args(&ids)
        .output()
        .unwrap();
    let inspect = String::from_utf8_lossy(&inspect.stdout).into_owned();
    assert!(inspect.contains("GOLEM_MODEL_SOCKET="), "{inspect}");
    assert!(
        !inspect.contains(&p.key),
        "the engine's view of the container holds the key"
    );
    let meta = b_socket.metadata().expect("B's socket");
    assert_eq!(meta.mode() & 0o777, 0o600, "B's socket is open to others");
    assert!(
        meta.uid() >= 0x6000_0000,
        "B's socket is not owned by B's session uid"
    );
    // A learns B's socket path from its input (it never could otherwise) and tries it, then
    // lists every socket it can see, then uses its own.
    let elsewhere = tempfile::tempdir().unwrap();
    let order = elsewhere.path().join("order.txt");
    std::fs::write(
        &order,
        format!("model socket {} sockets ask\n", b_socket.display()),
    )
    .unwrap();
    let a = run_worker(&g, &p, "prober")
        .input(&order)
        .expect(Status::Staged);
    let r = results(&g, &a);
    assert_eq!(result(&r, "socket")["connected"], false, "{r:?}");
    let found = result(&r, "sockets")["found"].clone();
    assert_eq!(found.as_array().map(Vec::len), Some(1), "{r:?}");
    assert!(
        found[0].as_str().unwrap().starts_with(SOCKET_PREFIX),
        "{r:?}"
    );
    assert_eq!(result(&r, "ask")["status"], 200);
    // B is stopped as a person would (Ctrl-C); its gateway goes with it.
    let b = b.signal(libc::SIGINT).finish().expect(Status::Cancelled);
    assert_eq!(usage(&a), (1, 0));
    if !b.json["model"].is_null() {
        assert_eq!(usage(&b), (0, 0), "A's request was charged to B");
    }
    assert_eq!(events(&g, &b.session(), "model.request").len(), 0);
    assert_eq!(events(&g, &a.session(), "model.request").len(), 1);
    let a_uid = crate::harness::audited_plan(&g, &a.session())["user"].clone();
    let b_uid = crate::harness::audited_plan(&g, &b.session())["user"].clone();
    assert_ne!(a_uid, b_uid);
    assert!(!b_socket.exists(), "B's socket outlived B");
    witness.assert_unchanged();
    g.assert_clean();
}

attack! {
    /// Twenty requests at once against a budget of five: five are forwarded, fifteen get 429,
    /// and the counts in the stage, `run --json` and the provider agree. Attacks
    /// gateway/budget.rs (reserve before forwarding).
    fn the_budget_holds_under_a_burst_of_twenty_from_inside_the_container(g)
    given {
        model_worker(&g, "mal", &["model", "burst", "20"]);
        narrow_model(&g, "      max_requests: 5\n");
    }
    {
        let p = Provider::start("anthropic", vec![]);
        p.set_fallback(Reply::text("slow").delayed(Duration::from_millis(300)));
        let run = run_worker(&g, &p, "mal").expect(Status::Staged);
        let r = results(&g, &run);
        assert_eq!(r.len(), 20);
        let ok = r.iter().filter(|x| x["status"] == 200).count();
        let limited = r.iter().filter(|x| x["status"] == 429).count();
        assert_eq!((ok, limited), (5, 15), "{r:?}");
        assert_eq!(p.requests().len(), 5);
        assert_eq!(usage(&run), (5, 15));
        assert_eq!(manifest(&g, &run)["model"]["requests"], 5);
    }
}

attack! {
    /// A provider that never answers is cut at the level's `request_timeout`: the worker gets
    /// 504 in time and the session ends normally. Attacks gateway/forward.rs (the timeout).
    fn an_upstream_that_hangs_is_cut_at_request_timeout(g)
    given {
        model_worker(&g, "mal", &["model", "ask"]);
        narrow_model(&g, "      request_timeout: 3s\n");
    }
    {
        let p = Provider::start("anthropic", vec![Reply::hang()]);
        let run = run_worker(&g, &p, "mal").expect(Status::Staged);
        let ask = result(&results(&g, &run), "ask").clone();
        assert_eq!(ask["status"], 504, "{ask}");
        let elapsed = ask["elapsed_ms"].as_u64().unwrap();
        assert!((2_500..30_000).contains(&elapsed), "cut after {elapsed} ms");
        assert_eq!(p.requests().len(), 1);
    }
}

attack! {
    /// A worker that sends its environment to the model is caught: the request carrying the
    /// fake key is refused (403) and never forwarded, the stage is flagged, `show` warns, and
    /// the audit log has a high `model.honeytoken` line. Attacks gateway/check.rs `carries`
    /// and the session's honeytoken flag.
    fn the_honeytoken_is_caught(g)
    given { model_worker(&g, "mal", &["model", "env"]); }
    {
        let p = Provider::start("openai", vec![]);
        let run = run_worker(&g, &p, "mal").outcome();
        let staged = run.staged();
        let r = results(&g, &run);
        assert_eq!(result(&r, "env")["status"], 403, "{r:?}");
        assert_eq!(refusal_kind(result(&r, "env")), "honeytoken");
        assert_eq!(p.requests().len(), 0, "the environment reached the provider");
        assert_eq!(manifest(&g, &run)["model"]["honeytoken_seen"], true);
        let flagged = events(&g, &run.session(), "model.honeytoken");
        assert!(!flagged.is_empty(), "no model.honeytoken audit line");
        assert!(flagged.iter().all(|e| e["data"]["severity"] == "high"), "{flagged:?}");
        let out = g.output(["show", &staged]);
        let shown = String::from_utf8_lossy(&out.stdout).to_lowercase();
        assert!(shown.contains("honeytoken") || shown.contains("fake key"), "{shown}");
    }
}

attack! {
    /// The headers the gateway passes on (`anthropic-version`, `anthropic-beta`) are not a
    /// second channel beside the body: a worker that puts its environment (the fake key with
    /// it) into `anthropic-beta` does not get it to the provider, where the transcript would
    /// never show it. Attacks gateway/forward.rs `outgoing_headers` (the values' shape).
    fn the_workers_environment_cannot_ride_to_the_provider_in_a_header(g)
    given { model_worker(&g, "mal", &["model", "beta-env", "info"]); }
    {
        let p = Provider::start("anthropic", vec![]);
        let run = run_worker(&g, &p, "mal").expect(Status::Staged);
        let r = results(&g, &run);
        // The request itself is answered; only the header is not passed on.
        assert_eq!(result(&r, "beta-env")["status"], 200, "{r:?}");
        for q in p.requests() {
            for (name, value) in &q.headers {
                assert!(
                    !value.contains("GOLEM_MODEL_SOCKET") && !value.contains("ANTHROPIC_API_KEY"),
                    "the environment reached the provider in {name}: {value}"
                );
                assert!(value.len() <= 512, "{name} carried {} bytes", value.len());
            }
        }
    }
}

/// Tag of an image built `FROM` the hostile image whose `/run/golem` is a symlink to
/// `/workspace`; removed when dropped.
struct SymlinkImage(String);

impl SymlinkImage {
    fn build() -> SymlinkImage {
        let tag = format!("golem-hostile-symrun:{}", uuid::Uuid::new_v4().simple());
        let context = tempfile::tempdir().unwrap();
        std::fs::create_dir(context.path().join("run")).unwrap();
        std::os::unix::fs::symlink("/workspace", context.path().join("run/golem")).unwrap();
        std::fs::write(
            context.path().join("Dockerfile"),
            format!("FROM {}\nCOPY run /run\n", hostile_image()),
        )
        .unwrap();
        docker_build(&tag, context.path());
        SymlinkImage(tag)
    }
}

impl Drop for SymlinkImage {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rmi", "-f", &self.0])
            .output();
    }
}

attack! {
    /// An image whose `/run/golem` is a symlink to `/workspace` (the project's workspace, on the
    /// host's disk) cannot make the engine create the socket's mount point there: runc resolves
    /// a mount target through the image's own symlinks, and a bind of a file creates that file
    /// (root-owned, empty) wherever the target resolves, which for a fixed target like
    /// `/run/golem/model.sock` is wherever the image says. The socket's target must be a path
    /// the image cannot know (like the init's). Attacks plan.rs (the socket's bind target).
    fn a_socket_path_symlinked_by_the_image_cannot_redirect_the_mount(g)
    given {
        let image = SymlinkImage::build();
        g.file("golem.yaml", "levels: {}\n");
        g.file(
            "workers/mal.worker",
            format!("---\nname: mal\ndescription: symlinked socket dir\nimage: {}\ncommand: [model, ask, sockets]\ntrust: session\nmodel: true\n---\nx\n", image.0),
        );
    }
    {
        let p = Provider::start("anthropic", vec![]);
        let run = run_worker(&g, &p, "mal").flags(["--session"]).expect(Status::Staged);
        let r = results(&g, &run);
        assert_eq!(result(&r, "ask")["status"], 200, "the worker lost its socket: {r:?}");
        let files = crate::harness::assert_untrusted_stage(&g, &run.staged());
        assert!(!files.iter().any(|f| f.contains("model.sock")), "{files:?}");
        let stray: Vec<PathBuf> = tree(&g.home)
            .into_keys()
            .filter(|f| f.file_name().is_some_and(|n| n == "model.sock"))
            .collect();
        assert!(stray.is_empty(), "the mount point was created on the host: {stray:?}");
        assert_eq!(p.requests().len(), 1);
        drop(image);
    }
}

attack! {
    /// The audit chain verifies after a session that used the model, and it holds one line per
    /// request (forwarded or refused) and one summary. Attacks the session's event channel from
    /// the gateway's threads into the audit log.
    fn the_audit_chain_verifies_with_one_line_per_request(g)
    given { model_worker(&g, "mal", &["model", "ask", "ask", "ask-model", "nope", "connect", "info"]); }
    {
        let p = Provider::start("anthropic", vec![]);
        let run = run_worker(&g, &p, "mal").expect(Status::Staged);
        assert!(g.audit_verifies(), "audit --verify failed");
        let s = run.session();
        assert_eq!(events(&g, &s, "model.request").len(), 2);
        assert_eq!(events(&g, &s, "model.refused").len(), 2);
        assert_eq!(events(&g, &s, "model.summary").len(), 1);
        let records = audit_of(&g, &s);
        let finished = records.iter().position(|r| r["event"] == "session.finished").expect("finished");
        let last_model = records.iter().rposition(|r| r["event"].as_str().is_some_and(|e| e.starts_with("model."))).unwrap();
        assert!(last_model < finished, "a model line landed after session.finished");
        for r in events(&g, &s, "model.request") {
            for field in ["model", "status", "input_tokens", "output_tokens", "latency_ms", "request_sha256", "response_sha256"] {
                assert!(r["data"].get(field).is_some(), "{field} missing in {r}");
            }
        }
        assert_eq!(p.requests().len(), 2);
    }
}

attack! {
    /// The fake key is looked for beyond requests: a worker that writes its environment into
    /// its output and prints it to its logs is flagged too, with a high audit line for each
    /// place. Attacks the session's honeytoken scan of the staged files and the logs.
    fn the_honeytoken_in_the_output_or_the_logs_is_caught(g)
    given { model_worker(&g, "mal", &["echo-env"]); }
    {
        let p = Provider::start("anthropic", vec![]);
        let run = run_worker(&g, &p, "mal").expect(Status::Staged);
        assert_eq!(manifest(&g, &run)["model"]["honeytoken_seen"], true);
        let places: Vec<Value> = events(&g, &run.session(), "model.honeytoken")
            .iter()
            .map(|e| e["data"]["where"].clone())
            .collect();
        assert!(places.contains(&json!("output")) && places.contains(&json!("logs")), "{places:?}");
        assert_eq!(p.requests().len(), 0);
    }
}

attack! {
    /// What the model answered reaches the person's terminal only through the rendering gate:
    /// `transcript` shows an answer full of escape sequences (a title change, colours, a
    /// bidi override) visibly, never raw. Attacks `transcript`'s printing path.
    fn a_models_answer_cannot_drive_the_terminal_through_the_transcript(g)
    given { model_worker(&g, "mal", &["model", "ask"]); }
    {
        let hostile = "\u{1b}]0;pwned\u{7}\u{1b}[31mred\u{1b}[0m \u{202e}evil\u{9b}2J";
        let p = Provider::start("openai", vec![Reply::text(hostile)]);
        let run = run_worker(&g, &p, "mal").expect(Status::Staged);
        let staged = run.staged();
        for args in [vec!["transcript", staged.as_str()], vec!["transcript", staged.as_str(), "--json"], vec!["show", staged.as_str()]] {
            let out = g.output(&args);
            assert!(out.status.success(), "{args:?}: {}", stderr_text(&out));
            let text = String::from_utf8_lossy(&out.stdout);
            for bad in ['\u{1b}', '\u{7}', '\u{202e}', '\u{9b}'] {
                assert!(!text.contains(bad), "{args:?} printed {bad:?} raw: {text:?}");
            }
        }
        let shown = String::from_utf8_lossy(&g.output(["transcript", staged.as_str()]).stdout).into_owned();
        assert!(shown.contains("pwned"), "the answer is not shown at all: {shown}");
    }
}

attack! {
    /// `batch --batch-model-budget` holds across documents: three documents each ask three
    /// times (about 50 tokens reserved and charged per request) under a batch budget of 160
    /// tokens, about one document's worth, at --jobs 3. The provider sees at most three
    /// requests, the others get 429 naming the batch budget, and the batch's summed usage
    /// never exceeds the cap. Attacks gateway/budget.rs `BatchBudget` (shared reservation).
    fn a_batch_model_budget_caps_the_whole_batch(g)
    given {
        model_worker(&g, "mal", &["model", "ask", "ask", "ask"]);
        for name in ["a", "b", "c"] {
            g.file(&format!("docs/{name}.txt"), name);
        }
    }
    {
        let p = Provider::start("openai", vec![]);
        p.set_fallback(Reply::text("ok").usage(40, 10));
        let out = g.cmd(["batch", "--json", "--jobs", "3", "--worker", "mal", "--batch-model-budget", "160", "docs"])
            .envs(p.env()).output().expect("spawn golem-orch");
        let result: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", stderr_text(&out)));
        let summary = &result["summary"]["model"];
        let spent = summary["input_tokens"].as_u64().unwrap_or(u64::MAX)
            + summary["output_tokens"].as_u64().unwrap_or(u64::MAX);
        assert!(spent <= 160, "the batch spent {spent} of 160: {result}");
        let forwarded = p.requests().len();
        assert!((2..=3).contains(&forwarded), "{forwarded} forwarded: {result}");
        assert_eq!(summary["requests"].as_u64(), Some(forwarded as u64), "{result}");
        assert_eq!(summary["refused"].as_u64(), Some(9 - forwarded as u64), "{result}");
        let docs = result["documents"].as_array().expect("documents");
        let mut refusals = 0;
        for d in docs {
            let staged = d["staged"].as_str().unwrap_or_else(|| panic!("not staged: {d}"));
            let text = std::fs::read_to_string(g.staged_files(staged).join("model.json")).expect("model.json");
            let entries: Vec<Value> = serde_json::from_str(&text).expect("model.json");
            for r in entries.iter().filter(|r| r["status"] == 429) {
                let message = r["body"]["error"]["message"].as_str().unwrap_or_default();
                assert!(message.contains("the batch's model budget"), "{r}");
                refusals += 1;
            }
        }
        assert_eq!(refusals, 9 - forwarded, "{result}");
        // The cap is kept in the record for --resume.
        let id = result["batch"].as_str().expect("batch id");
        let record = std::fs::read(g.home.join("batches").join(format!("{id}.json"))).expect("record");
        let record: Value = serde_json::from_slice(&record).expect("record JSON");
        assert_eq!(record["settings"]["batch_model_budget"], 160, "{record}");
    }
}

// --------------------------------------------------------------------------- the agent

/// The two documents of the end-to-end story, in the project.
fn documents(g: &Golem) -> (PathBuf, PathBuf) {
    (
        g.file("paper.pdf", golem_test_corpus::good_pdf()),
        g.file("notes.html", golem_test_corpus::GOOD_HTML),
    )
}

/// The script of the end-to-end story: read both documents, write the summary, finish.
fn summarise_script() -> Vec<Reply> {
    vec![
        Reply::tool("read_file", json!({"path": "/input/paper.pdf"})).usage(900, 20),
        Reply::tool("read_file", json!({"path": "/input/notes.html"})).usage(1400, 20),
        Reply::tool(
            "write_file",
            json!({"path": "/output/summary.md", "text": "# Summary\n\n## paper.pdf\n- one\n- two\n- three\n\n## notes.html\n- one\n- two\n- three\n"}),
        )
        .usage(1800, 120),
        Reply::text("Both documents are summarised in summary.md.").usage(1900, 15),
    ]
}

const TASK: &str = "Summarise each document in three bullet points";

attack! {
    /// End to end: the agent worker, the real gateway and a scripted model that asks for
    /// read_file twice and write_file once: the stage holds summary.md, agent.md and the
    /// transcript (whose hash the manifest holds), `transcript` prints it, and the provider saw
    /// the documents' text only inside the agent's requests, with the host's key.
    fn the_agent_summarises_two_documents_end_to_end(g)
    given { let (pdf, html) = documents(&g); }
    {
        let p = Provider::start("anthropic", summarise_script());
        let run = g.run().flags(["--worker", "agent", "--task", TASK]).input(&pdf).input(&html)
            .envs(p.env()).expect(Status::Staged);
        let files = g.staged_files(&run.staged());
        let summary = std::fs::read_to_string(files.join("summary.md")).expect("summary.md");
        assert!(summary.contains("## paper.pdf"), "{summary}");
        // agent.md escapes Markdown (`read\_file`); read it as a person would see it.
        let agent = std::fs::read_to_string(files.join("agent.md")).expect("agent.md").replace('\\', "");
        assert!(agent.contains("read_file") && agent.contains("write_file"), "{agent}");
        assert!(agent.contains(TASK), "{agent}");
        let staged_dir = g.home.join("staged").join(run.staged());
        let transcript = std::fs::read(staged_dir.join("transcript.jsonl")).expect("transcript");
        let m = manifest(&g, &run);
        assert_eq!(m["model"]["transcript_sha256"], crate::harness::sha256_file(&staged_dir.join("transcript.jsonl")));
        assert_eq!(m["model"]["honeytoken_seen"], false);
        assert_eq!(usage(&run), (4, 0));
        assert_eq!(run.json["model"]["output_tokens"], 175);
        let reqs = p.requests();
        assert_eq!(reqs.len(), 4);
        assert!(reqs[0].json().to_string().contains(TASK));
        assert!(reqs.iter().all(|q| q.header("x-api-key") == Some(p.key.as_str())));
        assert!(!contains(&transcript, p.key.as_bytes()));
        let (shown, code) = g.json(["transcript", &run.staged(), "--json"]);
        assert_eq!(code, 0, "{shown}");
        assert!(shown.to_string().contains("read_file"), "{shown}");
        assert!(g.audit_verifies());
    }
}

attack! {
    /// `--model-budget` lowers the budget and the agent still works within it: it reads what
    /// is left from `GET /golem/info` and asks for no more (a fixed 4096-token request would
    /// be refused outright under a 3000-token budget).
    fn the_agent_stays_within_a_lowered_model_budget(g)
    given { let (pdf, _) = documents(&g); }
    {
        let p = Provider::start("openai", vec![Reply::text("A one-line answer.").usage(500, 10)]);
        let run = g.run().flags(["--worker", "agent", "--task", TASK, "--model-budget", "3000"])
            .input(&pdf).envs(p.env()).expect(Status::Staged);
        assert_eq!(usage(&run), (1, 0), "{}", run.json);
        let asked = p.requests()[0].json()["max_tokens"].as_u64().unwrap();
        assert!(asked <= 3000, "the agent asked for {asked} tokens");
    }
}

attack! {
    /// `--model` outside the level's allowlist is refused before any container exists, with
    /// one clear line.
    fn a_model_flag_outside_the_allowlist_is_refused_before_the_container(g)
    given { let (pdf, _) = documents(&g); }
    {
        let p = Provider::start("anthropic", vec![]);
        let out = g.run().flags(["--worker", "agent", "--task", TASK, "--model", "not-allowed-model"])
            .input(&pdf).envs(p.env()).output();
        assert!(!out.status.success());
        let err = stderr_text(&out);
        assert!(err.contains("not-allowed-model"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(g.sessions().is_empty() || g.sessions().iter().all(|s| s["status"] != "staged"));
        assert_eq!(p.requests().len(), 0);
    }
}
