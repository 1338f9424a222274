//! Issue 11, classes 2 and 4: the host's users and the repository's other state directories.
//!
//! 1. A host account (`nobody`, uid 65534) cannot reach a running worker through `/proc/PID/root`:
//!    every session runs as its own uid, which no host account has.
//! 2. Two sessions at once get two different uids, recorded in their session records.
//! 3. A `session`-level worker cannot leave a setuid helper or a FIFO in the shared workspace:
//!    `/workspace` is `nosuid,nodev`, and the tree is scrubbed after the session.
//! 4. A `workspace`-level session in a subfolder cannot read the root's state directory, and a
//!    `golem.yaml` above the repository or writable by others does not shape a run.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{docker_lines, hostile_image, remove_engine_resources, wait_until, Golem};
use crate::harness::{hostile, parse_run, run_bounded, staged_json, HANG_GUARD};

const NOBODY: u32 = 65534;

/// A session's record as golem-orch wrote it.
fn record(home: &Path, session: &str) -> Value {
    let path = home.join("sessions").join(session).join("session.json");
    serde_json::from_str(&std::fs::read_to_string(&path).expect("session record")).expect("json")
}

/// The uids of every account in the host's `/etc/passwd`.
fn host_uids() -> Vec<u64> {
    std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(':').nth(2)?.parse().ok())
        .collect()
}

#[test]
fn the_hosts_nobody_cannot_reach_a_running_workers_output_or_input() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("SKIPPED: becoming nobody needs root");
        return;
    }
    let g = Golem::new();
    let secret = g.file("private/secret.txt", "the person's private input\n");
    let session = g
        .cmd([
            "run",
            "--json",
            secret.to_str().unwrap(),
            "--image",
            hostile_image(),
            "--",
            "sleep",
            "8",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the session");
    assert!(
        wait_until(Duration::from_secs(120), || g.running_workers() == 1),
        "the worker never started"
    );
    let label = format!("label=golem.home={}", g.home.display());
    let id = docker_lines(&["ps", "-q", "--filter", &label]).remove(0);
    let init = docker_lines(&["inspect", "-f", "{{.State.Pid}}", &id]).remove(0);
    // The init makes itself undumpable; the worker, its child, is what a host user would aim at.
    let children = format!("/proc/{init}/task/{init}/children");
    let mut pid = String::new();
    assert!(
        wait_until(Duration::from_secs(30), || {
            pid = std::fs::read_to_string(&children)
                .unwrap_or_default()
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            !pid.is_empty()
        }),
        "the init never started the worker"
    );

    // The host's nobody tries to plant a file in /output and to read the private input.
    let attack = format!(
        "echo planted > /proc/{pid}/root/output/planted.txt; echo wrote=$?; \
         cat /proc/{pid}/root/input/secret.txt; echo read=$?; ls /proc/{pid}/root/input; echo ls=$?"
    );
    let out = unsafe {
        // SAFETY: only async-signal-safe calls between fork and exec.
        Command::new("sh")
            .args(["-c", &attack])
            .pre_exec(|| {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(NOBODY) != 0
                    || libc::setuid(NOBODY) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
            .output()
            .expect("run as nobody")
    };
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        !said.contains("wrote=0"),
        "nobody wrote into /output: {said}"
    );
    assert!(!said.contains("read=0"), "nobody read /input: {said}");
    assert!(!said.contains("ls=0"), "nobody listed /input: {said}");
    assert!(!said.contains("private input"), "{said}");

    let run = parse_run(&session.wait_with_output().expect("session"));
    run.assert_status("staged", 0);
    let staged = g.staged_files(&run.staged());
    assert!(
        !staged.join("planted.txt").exists(),
        "nobody's file was staged"
    );
    let rec = record(&g.home, &run.session());
    let uid = rec["user"]["uid"].as_u64().expect("uid in the record");
    assert_ne!(uid, u64::from(NOBODY));
    g.assert_clean();
}

#[test]
fn two_concurrent_sessions_get_their_own_uids_that_no_host_account_has() {
    let g = Golem::new();
    let probe = || {
        let g = &g;
        move || hostile(g, &[], &["probe"])
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(probe());
        let b = s.spawn(probe());
        (a.join().expect("a"), b.join().expect("b"))
    });
    let mut uids = Vec::new();
    for run in [&a, &b] {
        run.assert_status("staged", 0);
        let rec = record(&g.home, &run.session());
        let uid = rec["user"]["uid"].as_u64().expect("uid in the record");
        let gid = rec["user"]["gid"].as_u64().expect("gid in the record");
        let seen = staged_json(&g, run, "probe.json");
        assert_eq!(seen["uid"].as_u64(), Some(uid), "the worker ran as {seen}");
        assert_eq!(seen["euid"].as_u64(), Some(uid));
        assert_ne!(uid, u64::from(NOBODY));
        assert_ne!(gid, u64::from(NOBODY));
        assert!(!host_uids().contains(&uid), "{uid} is a host account");
        let plan = crate::harness::audited_plan(&g, &run.session());
        assert_eq!(plan["user"], format!("{uid}:{gid}"));
        uids.push(uid);
    }
    assert_ne!(uids[0], uids[1], "two live sessions shared a uid");
    g.assert_clean();
}

#[test]
fn a_session_worker_cannot_leave_a_setuid_helper_or_a_fifo_in_the_workspace() {
    let g = Golem::new();
    let run = hostile(&g, &["--session"], &["setid-workspace"]);
    run.assert_status("staged", 0);
    let seen = staged_json(&g, &run, "workspace.json");
    let line = seen["mountinfo"].as_str().expect("a /workspace mount");
    let options: Vec<&str> = line.split(' ').nth(5).unwrap_or("").split(',').collect();
    assert!(
        options.contains(&"nosuid") && options.contains(&"nodev"),
        "/workspace is mounted {line}"
    );

    // After the session: nothing set-id, nothing special, anywhere in the workspace.
    let ws = g.home.join("workspace");
    let mut stack = vec![ws.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("workspace") {
            let path = e.expect("entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("meta");
            assert_eq!(
                meta.mode() & 0o6000,
                0,
                "{} kept a set-id bit",
                path.display()
            );
            let t = meta.file_type();
            assert!(
                t.is_file() || t.is_dir() || t.is_symlink(),
                "{path:?} survived"
            );
            if t.is_dir() {
                stack.push(path);
            }
        }
    }
    assert!(ws.join("helper").exists(), "the helper itself may stay");
    assert!(!ws.join("fifo").exists(), "the FIFO survived");

    let rec = record(&g.home, &run.session());
    let scrubbed = &rec["workspace_scrubbed"];
    let cleared: Vec<&str> = scrubbed["setid_cleared"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert!(cleared.contains(&"helper"), "{rec}");
    assert_eq!(scrubbed["special_removed"][0], "fifo", "{rec}");
    let audited = g.audit().into_iter().any(|r| {
        r["session"] == run.session().as_str()
            && r["event"] == "workspace.scrubbed"
            && r["data"]["scrubbed"]["special_removed"][0] == "fifo"
    });
    assert!(audited, "the scrub is not audited");
    g.assert_clean();
}

/// `git init` in `dir`.
fn git_init(dir: &Path) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let ok = Command::new("git")
        .args(["init", "-q"])
        .current_dir(dir)
        .status()
        .expect("git");
    assert!(ok.success());
}

#[test]
fn a_workspace_session_in_a_subfolder_cannot_read_the_roots_state() {
    let g = Golem::new();
    let repo = g.project.path().canonicalize().expect("project");
    git_init(&repo);
    let secret = g.file(
        "input/secret.txt",
        "a private input of the root's session\n",
    );
    // The root's state directory, and one under an unusual name, each with a session in it.
    let root_state = repo.join(".golem");
    let odd_state = repo.join("notes/state");
    let homes: Vec<PathBuf> = vec![root_state.clone(), odd_state.clone()];
    for home in &homes {
        let out = g
            .cmd(["run", "--json", secret.to_str().unwrap()])
            .env("GOLEM_HOME", home)
            .output()
            .expect("run");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let sub = repo.join("sub");
    std::fs::create_dir_all(&sub).expect("sub");
    let targets = [
        "/repo/.golem",
        "/repo/.golem/sessions",
        "/repo/.golem/staged",
        "/repo/notes/state",
        "/repo/notes/state/sessions",
    ];
    let mut args = vec![
        "run",
        "--json",
        "--workspace",
        "--image",
        hostile_image(),
        "--",
        "try-read",
    ];
    args.extend(targets);
    let mut cmd = g.cmd(&args);
    cmd.current_dir(&sub).env("GOLEM_HOME", sub.join(".golem"));
    let run = parse_run(&run_bounded(cmd, HANG_GUARD));
    for home in homes.iter().chain([&sub.join(".golem")]) {
        remove_engine_resources(&home.canonicalize().unwrap_or(home.clone()));
    }
    run.assert_status("staged", 0);
    let staged = sub
        .join(".golem/staged")
        .join(run.staged())
        .join("files/reads.json");
    let reads: Value =
        serde_json::from_str(&std::fs::read_to_string(&staged).expect("reads")).expect("json");
    for t in targets {
        let r = &reads[t];
        let listing = r["listing"].as_array().map(Vec::len).unwrap_or(0);
        assert!(
            listing == 0 && r["content"].is_null(),
            "{t} is readable from a subfolder's session: {r}"
        );
    }
    assert!(!reads.to_string().contains("private input"));
}

#[test]
fn a_golem_yaml_above_the_repository_or_writable_by_others_is_not_applied() {
    let g = Golem::new();
    let outer = g.project.path().join("outer");
    let repo = outer.join("repo");
    git_init(&repo);
    let input = g.file("doc.txt", "a document\n");
    let narrow = "levels:\n  untrusted:\n    resources:\n      memory: 64MiB\n";
    std::fs::write(outer.join("golem.yaml"), narrow).expect("outer golem.yaml");
    let dry = |dir: &Path| {
        let mut cmd = g.cmd(["run", "--dry-run", "--json", input.to_str().unwrap()]);
        cmd.current_dir(dir);
        cmd.output().expect("dry run")
    };
    let out = dry(&repo);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        v["plan"]["memory_bytes"],
        512u64 << 20,
        "a golem.yaml above the repository narrowed the run: {v}"
    );

    // Inside the repository, but writable by everyone: refused with one line.
    let inner = repo.join("golem.yaml");
    std::fs::write(&inner, narrow).expect("golem.yaml");
    std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let out = dry(&repo);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(
        out.status.code(),
        Some(0),
        "a world-writable golem.yaml was used"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("golem.yaml") && err.contains("writable"),
        "{err}"
    );

    // Owned by someone else: refused as well.
    std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::chown(&inner, Some(NOBODY), Some(NOBODY)).expect("chown");
        let out = dry(&repo);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "a foreign golem.yaml was used");
        assert!(err.contains("owned by uid 65534"), "{err}");
    }
}
