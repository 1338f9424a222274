//! Crashes: the orchestrator SIGKILLed in every phase of a session, an engine that is down or
//! goes away mid-session, and a disk that fills while staging.
//!
//! After each, the next `golem-orch gc` or `golem-orch run` in the same state directory must
//! leave no container or volume behind, no half-built staged commit, and the session marked
//! failed in its record and in the audit log; nothing already staged may be lost.
//!
//! `gc` is engine-wide, so these tests take [`CRASH_LOCK`]: one crash test's `gc` must not
//! clean up what another is about to show `run` cleaning up.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{
    assert_no_half_stage, audit_of, docker_lines, engine_resources, half_stages, hostile_image,
    stderr_text, tree, wait_until, Golem, LabelGuard, Status,
};

/// Serialises the crash tests (see the module documentation).
static CRASH_LOCK: Mutex<()> = Mutex::new(());

fn crash_lock() -> MutexGuard<'static, ()> {
    CRASH_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where a session is when its orchestrator is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The worker created, not started (`GOLEM_FAILPOINT=before-start`).
    BeforeStart,
    /// The worker is running (`sleep 300`).
    Running,
    /// The worker exited and its archive began to arrive; `staged/.tmp-<id>/` exists, nothing
    /// extracted yet (`GOLEM_FAILPOINT=extracting`).
    Extracting,
    /// Files extracted into `staged/.tmp-<id>/files/`, manifest not written, not renamed
    /// (`GOLEM_FAILPOINT=staging`).
    Staging,
}

impl Phase {
    fn failpoint(self) -> Option<&'static str> {
        match self {
            Phase::BeforeStart => Some("before-start"),
            Phase::Running => None,
            Phase::Extracting => Some("extracting"),
            Phase::Staging => Some("staging"),
        }
    }

    /// The session status its record shows when the orchestrator dies there.
    fn recorded_status(self) -> &'static str {
        match self {
            Phase::BeforeStart => "created",
            Phase::Running => "running",
            Phase::Extracting | Phase::Staging => "extracting",
        }
    }

    fn worker(self) -> &'static [&'static str] {
        match self {
            Phase::BeforeStart | Phase::Running => &["sleep", "300"],
            Phase::Extracting | Phase::Staging => &["exit", "0"],
        }
    }
}

/// Starts a session, lets it reach `phase`, SIGKILLs golem-orch there and checks what the kill
/// left behind. Returns the session id.
fn kill_at(g: &Golem, phase: Phase) -> String {
    let run = g.run().hostile(phase.worker());
    let session = match phase.failpoint() {
        Some(fp) => g.spawn(run.failpoint(fp)).wait_failpoint(fp),
        None => g.spawn(run).wait_workers(1),
    };
    // SIGKILL: no handler runs, nothing is cleaned up.
    session.kill();

    let sessions = g.sessions();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let id = sessions[0]["id"].as_str().unwrap().to_string();
    assert_eq!(
        sessions[0]["status"],
        phase.recorded_status(),
        "{phase:?}: {}",
        sessions[0]
    );
    // The session's one container stays behind after a SIGKILL.
    let left = g.leftovers();
    assert_eq!(
        left.len(),
        1,
        "{phase:?}: the kill should leave it: {left:?}"
    );
    match phase {
        Phase::BeforeStart | Phase::Running => assert!(half_stages(&g.home).is_empty()),
        Phase::Extracting => {
            assert_eq!(half_stages(&g.home), [format!(".tmp-{id}")]);
            let files = g.home.join("staged").join(format!(".tmp-{id}/files"));
            assert_eq!(std::fs::read_dir(files).unwrap().count(), 0);
        }
        Phase::Staging => {
            assert_eq!(half_stages(&g.home), [format!(".tmp-{id}")]);
            let tmp = g.home.join("staged").join(format!(".tmp-{id}"));
            assert!(
                tmp.join("files/ok.txt").is_file(),
                "extracted before the kill"
            );
            assert!(!tmp.join("manifest.json").exists());
        }
    }
    assert!(!g.home.join("staged").join(&id).exists());
    id
}

/// What must hold once the dead session was cleaned up, by `gc` or by the next `run`.
fn assert_cleaned_up(g: &Golem, id: &str, phase: Phase) {
    g.assert_clean();
    assert_no_half_stage(&g.home);
    assert!(
        !g.home.join("staged").join(id).exists(),
        "{phase:?}: a staged commit appeared for the killed session"
    );
    let record = g
        .sessions()
        .into_iter()
        .find(|s| s["id"] == id)
        .expect("record");
    assert_eq!(record["status"], "failed", "{phase:?}: {record}");
    assert_eq!(
        record["error"],
        format!(
            "orchestrator died while the session was {}; cleaned up by gc",
            phase.recorded_status()
        )
    );
    let failed: Vec<Value> = g
        .audit()
        .into_iter()
        .filter(|r| r["session"] == id && r["event"] == "session.failed")
        .collect();
    assert_eq!(failed.len(), 1, "{phase:?}: {failed:?}");
    assert_eq!(failed[0]["data"]["by"], "gc");
    assert_eq!(failed[0]["data"]["was"], phase.recorded_status());
    assert!(g.audit_verifies());
}

fn killed_then_gc(phase: Phase) {
    let _lock = crash_lock();
    let g = Golem::new();
    let id = kill_at(&g, phase);
    let (report, code) = g.json(["gc", "--json"]);
    assert_eq!(code, 0, "{report}");
    assert!(
        report["sessions_failed"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s == id.as_str()),
        "{report}"
    );
    if matches!(phase, Phase::Extracting | Phase::Staging) {
        assert!(
            report["stage_orphans"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s.as_str().is_some_and(|s| s.contains(&id))),
            "{report}"
        );
    }
    assert_cleaned_up(&g, &id, phase);
}

fn killed_then_next_run(phase: Phase) {
    let _lock = crash_lock();
    let g = Golem::new();
    let id = kill_at(&g, phase);
    let next = g.run().hostile(["exit", "0"]).expect(Status::Staged);
    assert_cleaned_up(&g, &id, phase);
    let ids: Vec<String> = g
        .staged()
        .iter()
        .filter_map(|s| s["id"].as_str().map(String::from))
        .collect();
    assert_eq!(ids, [next.staged()], "only the next run's commit");
}

#[test]
fn killed_before_start_then_gc_leaves_nothing_behind() {
    killed_then_gc(Phase::BeforeStart);
}

#[test]
fn killed_before_start_then_the_next_run_cleans_up() {
    killed_then_next_run(Phase::BeforeStart);
}

#[test]
fn killed_while_running_then_gc_leaves_nothing_behind() {
    killed_then_gc(Phase::Running);
}

#[test]
fn killed_while_running_then_the_next_run_cleans_up() {
    killed_then_next_run(Phase::Running);
}

#[test]
fn killed_while_extracting_then_gc_leaves_nothing_behind() {
    killed_then_gc(Phase::Extracting);
}

#[test]
fn killed_while_extracting_then_the_next_run_cleans_up() {
    killed_then_next_run(Phase::Extracting);
}

#[test]
fn killed_while_staging_then_gc_leaves_nothing_behind() {
    killed_then_gc(Phase::Staging);
}

#[test]
fn killed_while_staging_then_the_next_run_cleans_up() {
    killed_then_next_run(Phase::Staging);
}

// ------------------------------------------------------------------------------ the engine

/// Stages one commit and returns its id and a picture of its directory.
fn stage_one(g: &Golem) -> (String, std::collections::BTreeMap<PathBuf, String>) {
    let id = g
        .run()
        .hostile(["exit", "0"])
        .expect(Status::Staged)
        .staged();
    let picture = tree(&g.home.join("staged").join(&id));
    (id, picture)
}

/// Asserts the staged commit is still there, whole, pending and verifiable.
fn assert_still_staged(g: &Golem, id: &str, picture: &std::collections::BTreeMap<PathBuf, String>) {
    assert_eq!(
        &tree(&g.home.join("staged").join(id)),
        picture,
        "{id} changed"
    );
    let list = g.staged();
    let entry = list
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("{id} no longer listed: {list:?}"));
    assert_eq!(entry["status"], "pending");
    let (shown, code) = g.json(["show", id, "--json"]);
    assert_eq!(code, 0, "{shown}");
    assert!(g.audit_verifies());
}

/// Asserts one clear line on stderr, a non-zero exit and no panic.
fn assert_one_line_failure(what: &str, out: &std::process::Output, needle: &str) {
    let err = stderr_text(out);
    assert_eq!(out.status.code(), Some(1), "{what}: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{what}: not one line: {err:?}");
    assert!(lines[0].starts_with("golem-orch: "), "{what}: {err}");
    assert!(lines[0].contains(needle), "{what}: lacks {needle:?}: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{what}: {err}"
    );
}

/// Attacks engine/mod.rs `connect` and the CLI's one-line errors: with the engine unreachable, every
/// command that needs it fails at once with one line that says what to check, creates no
/// session, and leaves what was staged before untouched. (The real daemon is shared, so "down"
/// is an address where nothing listens, never a stopped daemon.)
#[test]
fn an_engine_that_is_down_gives_one_clear_line_and_loses_nothing_staged() {
    let g = Golem::new();
    let (id, picture) = stage_one(&g);
    let input = g.file("a.txt", "x");
    let input = input.to_str().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let tcp = format!("tcp://127.0.0.1:{closed_port}");
    for host in ["unix:///nonexistent/docker.sock", tcp.as_str()] {
        let cases: Vec<Vec<&str>> = vec![
            vec!["run", input],
            vec!["run", "--json", input],
            vec!["run", "--image", hostile_image(), "--", "exit", "0"],
            vec!["gc"],
            vec!["gc", "--json"],
            vec!["image", "build"],
            vec!["batch", input],
        ];
        for args in cases {
            let out = g.command(&args).docker_host(host).output();
            assert_one_line_failure(
                &format!("{host} {args:?}"),
                &out,
                "cannot reach the Docker Engine",
            );
            assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
        }
        // doctor reports instead of failing on the first problem: a FAIL line, exit 1.
        let out = g.command(["doctor"]).docker_host(host).output();
        assert_eq!(out.status.code(), Some(1));
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(
            report
                .lines()
                .any(|l| l.starts_with("FAIL") && l.contains("engine")),
            "{report}"
        );
        assert!(stderr_text(&out).is_empty(), "{}", stderr_text(&out));
    }
    let sessions = g.sessions();
    assert_eq!(sessions.len(), 1, "a session was created: {sessions:?}");
    assert_still_staged(&g, &id, &picture);
    g.assert_clean();
}

/// A Unix-socket proxy in front of the real engine that can be cut, as an engine restart or a
/// crash looks to a client: every connection drops and the socket goes away.
struct EngineProxy {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<UnixStream>>>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl EngineProxy {
    fn start(path: PathBuf, upstream: PathBuf) -> EngineProxy {
        let listener = UnixListener::bind(&path).expect("bind the proxy");
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<UnixStream>>> = Arc::default();
        let (s, c) = (stop.clone(), conns.clone());
        let accept = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        let Ok(server) = UnixStream::connect(&upstream) else {
                            continue;
                        };
                        let mut held = c.lock().unwrap();
                        for stream in [&client, &server] {
                            if let Ok(clone) = stream.try_clone() {
                                held.push(clone);
                            }
                        }
                        drop(held);
                        pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                        pipe(server, client);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        EngineProxy {
            path,
            stop,
            conns,
            accept: Some(accept),
        }
    }

    /// Drops every connection and removes the socket: the engine is gone.
    fn cut(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for EngineProxy {
    fn drop(&mut self) {
        self.cut();
    }
}

/// Copies one direction of a proxied connection until either side closes.
fn pipe(mut from: UnixStream, mut to: UnixStream) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}

/// The real engine's socket.
fn engine_socket() -> PathBuf {
    match std::env::var("DOCKER_HOST") {
        Ok(h) if h.starts_with("unix://") => PathBuf::from(&h["unix://".len()..]),
        _ => PathBuf::from("/var/run/docker.sock"),
    }
}

/// Attacks `Session::steps` (session/mod.rs) and container.rs `finished` (a wait that ends without a verdict
/// is an error, never an exit) when the engine goes away while a worker runs: the session fails
/// with one clear line, the commit staged just before is intact, and once the engine is back
/// `gc` removes what the failed session could not.
#[test]
fn an_engine_that_goes_away_mid_session_fails_it_cleanly_and_loses_nothing_staged() {
    let _lock = crash_lock();
    let g = Golem::new();
    hostile_image();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("engine.sock");
    let mut proxy = EngineProxy::start(socket.clone(), engine_socket());
    let via_proxy = format!("unix://{}", socket.display());

    // A first session goes through the proxy and is staged.
    let first = g
        .run()
        .docker_host(&via_proxy)
        .hostile(["exit", "0"])
        .expect(Status::Staged);
    let staged = first.staged();
    let picture = tree(&g.home.join("staged").join(&staged));

    // A second one is running when the engine goes away.
    let second = g
        .spawn(g.run().docker_host(&via_proxy).hostile(["sleep", "300"]))
        .wait_workers(1);
    proxy.cut();
    // Under the hang guard: golem-orch must not hang after the engine went away.
    let run = second.finish().expect(Status::Failed);
    run.assert_one_error_line("failed");
    assert!(run.json["staged"].is_null());
    let error = run.error();
    assert!(
        error.contains("waiting for the container") || error.contains("engine"),
        "{error}"
    );

    // Nothing staged was lost, and no half-built commit appeared.
    assert_still_staged(&g, &staged, &picture);
    assert_no_half_stage(&g.home);
    let failed = g
        .sessions()
        .into_iter()
        .find(|s| s["id"] == run.session())
        .expect("record");
    assert_eq!(failed["status"], "failed");

    // The engine is back (the real socket): gc removes what the failed session could not.
    let (report, code) = g.json(["gc", "--json"]);
    assert_eq!(code, 0, "{report}");
    assert!(
        wait_until(Duration::from_secs(30), || g.leftovers().is_empty()),
        "left behind: {:?}",
        g.leftovers()
    );
    assert_still_staged(&g, &staged, &picture);
    g.assert_clean();
}

// ------------------------------------------------------------------------------ the disk

/// A small tmpfs mounted for one test, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// Mounts a `size`-byte tmpfs, or says why it cannot.
    fn mount(size: &str) -> Result<SmallDisk, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(SmallDisk { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).output();
        if std::fs::read_to_string("/proc/self/mounts")
            .is_ok_and(|m| m.contains(&format!(" {} ", self.dir.path().display())))
        {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .output();
        }
    }
}

/// Attacks stage.rs `Stage::begin`/`Building` (built in `.tmp-<id>`, removed when dropped,
/// renamed only when complete) and extract's host-side I/O errors: the state directory is on
/// a 2 MiB disk and the worker writes a 3 MB file, within the shipped policy. The session fails
/// with one clear line naming the full disk, no partial stage is left, the earlier commit is
/// intact and the engine is clean.
///
/// Needs root to mount a tmpfs. Without it the test prints why and returns; set
/// `GOLEM_TEST_REQUIRE_TMPFS=1` (CI does, as root) to make that a failure instead.
#[test]
fn a_full_disk_while_staging_leaves_no_partial_stage() {
    // Room for the state directory's copy of the init binary, plus 2 MiB.
    let size = format!("{}k", golem_orch::image::WORKER_BINARY.len() / 1024 + 2048);
    let disk = match SmallDisk::mount(&size) {
        Ok(d) => d,
        Err(why) => {
            assert!(
                std::env::var_os("GOLEM_TEST_REQUIRE_TMPFS").is_none(),
                "cannot mount the small disk: {why}"
            );
            eprintln!("SKIPPED a_full_disk_while_staging_leaves_no_partial_stage: {why}");
            return;
        }
    };
    let g = Golem::new();
    let home = disk.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let home = home.canonicalize().unwrap();
    let _engine = LabelGuard(home.clone());
    let first = g
        .run()
        .home(&home)
        .hostile(["exit", "0"])
        .expect(Status::Staged);
    let staged = first.staged();
    let picture = tree(&home.join("staged").join(&staged));

    let run = g
        .run()
        .home(&home)
        .hostile(["bigfile", "3000000"])
        .expect(Status::Failed);
    run.assert_one_error_line("failed");
    let error = run.error();
    assert!(
        error.contains("No space left on device") && error.starts_with("extracting the output"),
        "{error}"
    );
    assert!(run.json["staged"].is_null());
    assert_no_half_stage(&home);
    let entries: Vec<String> = std::fs::read_dir(home.join("staged"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    assert_eq!(
        entries,
        std::slice::from_ref(&staged),
        "only the earlier commit is staged"
    );
    assert_eq!(tree(&home.join("staged").join(&staged)), picture);
    let audit = g
        .command(["audit", "--json", "--session", &run.session()])
        .home(&home)
        .output();
    let audit: Value = serde_json::from_slice(&audit.stdout).unwrap();
    assert!(
        audit
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["event"] == "session.failed"),
        "{audit}"
    );
    assert!(g.audit_verifies_in(&home));
    assert!(engine_resources(&home).is_empty());
}

/// The same, in a batch (batch.rs `run`): the first document is staged, the engine goes away
/// while the second runs, the rest fail with an error that names the engine call, the batch
/// finishes and reports each document, and nothing staged is lost.
#[test]
fn an_engine_that_goes_away_mid_batch_fails_the_rest_and_loses_nothing_staged() {
    let _lock = crash_lock();
    let g = Golem::new();
    let image = hostile_image();
    g.file("docs/a.txt", "exit 0");
    g.file("docs/b.txt", "sleep 300");
    g.file("docs/c.txt", "exit 0");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("engine.sock");
    let mut proxy = EngineProxy::start(socket.clone(), engine_socket());
    let staged_count = || {
        std::fs::read_dir(g.home.join("staged"))
            .map(|rd| {
                rd.flatten()
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .count()
            })
            .unwrap_or(0)
    };
    let batch = g
        .spawn(
            g.command(["batch", "--json", "--jobs", "1"])
                .image(image)
                .flags(["docs"])
                .args(["from-input"])
                .docker_host(format!("unix://{}", socket.display())),
        )
        .wait_for(
            "the batch staged its first document and started its second",
            || staged_count() == 1 && g.running_workers() == 1,
        );
    let first = g.staged()[0]["id"]
        .as_str()
        .expect("first staged")
        .to_string();
    let picture = tree(&g.home.join("staged").join(&first));
    proxy.cut();

    // Under the hang guard: the batch must not hang after the engine went away.
    let out = batch.output();
    let err = stderr_text(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{err}"
    );
    let result: Value = serde_json::from_slice(&out.stdout).expect("batch JSON");
    assert_eq!(result["state"], "finished", "{result}");
    let docs = result["documents"].as_array().expect("documents");
    let by_name = |name: &str| {
        docs.iter()
            .find(|d| d["folder"] == name)
            .unwrap_or_else(|| panic!("{name} missing: {result}"))
            .clone()
    };
    assert_eq!(by_name("a.txt")["status"], "staged");
    assert_eq!(by_name("a.txt")["staged"], first.as_str());
    for name in ["b.txt", "c.txt"] {
        let d = by_name(name);
        assert_eq!(d["status"], "failed", "{d}");
        let error = d["error"].as_str().unwrap_or("");
        assert!(
            !error.is_empty() && !error.contains('\n'),
            "{name}: {error:?}"
        );
        // The progress line on stderr names the failure too.
        assert!(
            err.lines()
                .any(|l| l.contains("failed") && l.contains(name)),
            "{name} not reported: {err}"
        );
    }
    assert!(
        by_name("b.txt")["error"]
            .as_str()
            .unwrap_or("")
            .contains("waiting for the container"),
        "{result}"
    );

    assert_eq!(result["summary"]["retryable"], 2, "{result}");

    assert_still_staged(&g, &first, &picture);
    assert_no_half_stage(&g.home);
    let list = g.staged();
    assert_eq!(list.len(), 1, "{list:?}");
    let (report, code) = g.json(["gc", "--json"]);
    assert_eq!(code, 0, "{report}");
    assert!(
        wait_until(Duration::from_secs(30), || g.leftovers().is_empty()),
        "left behind: {:?}",
        g.leftovers()
    );
    assert_still_staged(&g, &first, &picture);

    // The engine is back: resuming runs exactly the two documents the engine failed.
    g.file("docs/b.txt", "exit 0");
    let batch_id = result["batch"].as_str().expect("batch id");
    let (resumed, code) = g.json(["batch", "--json", "--resume", batch_id]);
    assert_eq!(code, 0, "{resumed}");
    assert_eq!(resumed["summary"]["succeeded"], 3, "{resumed}");
    assert_eq!(resumed["summary"]["retryable"], 0, "{resumed}");
    let list = g.staged();
    assert_eq!(list.len(), 3, "{list:?}");
    assert_still_staged(&g, &first, &picture);
    g.assert_clean();
}

/// Attacks session/stream.rs `stream` and `Validator::finish` (a stream that ends before the archive
/// does is the host's failure, `ArchiveCut`): the container is killed from outside while its
/// init streams an 8 MB output (the session held at `GOLEM_FAILPOINT=extracting:until=PATH`
/// until the kill is done, so the engine holds the rest). The worker cannot cut the init's
/// stream, so the session is `failed` as a host failure that `batch --resume` would retry,
/// never `rejected` as if the worker had sent bad output; nothing half-built is left and the
/// engine is clean.
#[test]
fn an_archive_cut_short_by_the_host_is_the_hosts_failure_not_the_workers() {
    let _lock = crash_lock();
    let g = Golem::new();
    let killed_flag = tempfile::tempdir().unwrap();
    let go_on = killed_flag.path().join("killed");
    let extracting = || g.sessions().iter().any(|s| s["status"] == "extracting");
    let session = g
        .spawn(
            g.run()
                .failpoint(format!("extracting:until={}", go_on.display()))
                .hostile(["bigfile", "8000000"]),
        )
        .wait_for("the session began to extract", extracting);
    let label = format!("label=golem.home={}", g.home.display());
    let workers = docker_lines(&["ps", "-q", "--filter", &label]);
    assert_eq!(workers.len(), 1, "{workers:?}");
    let pid = docker_lines(&["inspect", "-f", "{{.State.Pid}}", &workers[0]]);
    let init = Path::new("/proc").join(pid.first().expect("the init's pid"));
    // The engine reports the container stopped only once its streams are drained, so `docker
    // kill` returns after the session goes on reading: wait for the init to die instead.
    let kill = Command::new("docker")
        .args(["kill", &workers[0]])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("docker kill");
    let dead = || {
        std::fs::read_to_string(init.join("stat")).map_or(true, |stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, r)| r.starts_with('Z'))
        })
    };
    assert!(
        wait_until(Duration::from_secs(60), dead),
        "the init survived docker kill"
    );
    std::fs::write(&go_on, b"").unwrap();
    let killed = kill.wait_with_output().expect("docker kill");
    assert!(killed.status.success(), "{}", stderr_text(&killed));

    let run = session.finish().expect(Status::Failed);
    let error = run.error();
    assert!(error.contains("cut short"), "{error}");
    assert!(run.host_failure, "{}", run.json);
    assert_eq!(run.json["host_failure"], true, "{}", run.json);
    assert_eq!(run.rejected, 0, "{}", run.json);
    assert_eq!(run.json["rejected"], 0, "{}", run.json);
    assert!(run.json["staged"].is_null());
    assert_no_half_stage(&g.home);
    assert!(!audit_of(&g, &run.session())
        .iter()
        .any(|e| e["event"] == "output.rejected"));
    g.assert_clean();
}

#[test]
fn gc_dry_run_lists_what_a_killed_session_left_and_changes_nothing() {
    let _lock = crash_lock();
    let g = Golem::new();
    let id = kill_at(&g, Phase::Staging);
    let left = g.leftovers();
    let before = tree(&g.home);
    let (report, code) = g.json(["gc", "--dry-run", "--json"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["dry_run"], true, "{report}");
    let listed = |key: &str, want: &str| {
        report[key].as_array().unwrap().iter().any(|v| {
            v.as_str()
                .is_some_and(|s| s.starts_with(want) || s.contains(want))
        })
    };
    assert!(listed("containers", &left[0]), "{report}");
    assert!(listed("sessions_failed", &id), "{report}");
    assert!(listed("stage_orphans", &format!(".tmp-{id}")), "{report}");
    // Nothing moved: the container, the half stage, the record and the audit log are as they were.
    assert_eq!(
        tree(&g.home),
        before,
        "gc --dry-run changed the state directory"
    );
    assert_eq!(g.leftovers(), left);
    // The real gc then removes exactly that.
    let (report, code) = g.json(["gc", "--json"]);
    assert_eq!(code, 0, "{report}");
    assert_cleaned_up(&g, &id, Phase::Staging);
}
