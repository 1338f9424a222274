//! User stories for one session: from `golem-orch run` to the clearance stage.

use serde_json::Value;

use crate::harness::{
    attack_under, chmod, engine_resources, staged_json_in, stderr_text, Golem, Status,
};

fn rejected_reasons(manifest: &Value) -> Vec<(String, String)> {
    manifest["rejected"]
        .as_array()
        .expect("rejected array")
        .iter()
        .map(|r| {
            (
                r["path"].as_str().unwrap_or("").to_string(),
                r["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn staged_paths(manifest: &Value) -> Vec<String> {
    manifest["files"]
        .as_array()
        .expect("files array")
        .iter()
        .map(|f| f["path"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn a_person_runs_an_untrusted_file_and_finds_a_report_in_the_stage() {
    let g = Golem::new();
    let input = g.file("notes.txt", "Quarterly numbers\nrevenue went up\n");
    let run = g
        .run()
        .level("untrusted")
        .input(&input)
        .expect(Status::Staged);
    assert_eq!(run.exit_code, Some(0));
    assert_eq!(run.json["exit_code"], 0);
    assert_eq!(run.files, 4, "{}", run.json);
    let staged = run.staged();
    assert_eq!(run.session(), staged);

    let report = std::fs::read_to_string(g.staged_files(&staged).join("notes.txt.md"))
        .expect("notes.txt.md");
    assert!(
        report.contains("notes.txt") && report.contains("revenue went up"),
        "{report}"
    );

    // The --json contracts scripts rely on.
    let list = g.staged();
    let entry = &list[0];
    for key in ["id", "session", "files", "bytes", "created_at", "status"] {
        assert!(!entry[key].is_null(), "staged --json lacks {key}: {entry}");
    }
    assert_eq!(entry["status"], "pending");
    let (manifest, code) = g.json(["show", &staged[..12], "--json"]);
    assert_eq!(code, 0);
    assert_eq!(manifest["trust_level"], "untrusted");
    let input_rec = &manifest["inputs"][0];
    assert_eq!(input_rec["name"], "notes.txt");
    assert_eq!(input_rec["size"], 34);
    assert_eq!(input_rec["sha256"].as_str().unwrap().len(), 64);
    let mut files = staged_paths(&manifest);
    files.sort();
    assert_eq!(
        files,
        ["index.json", "index.md", "notes.txt.json", "notes.txt.md"]
    );
    assert!(
        manifest["files"][0]["sha256"].is_string()
            && manifest["rejected"].as_array().unwrap().is_empty()
    );

    // The audit log tells the whole story, in order, with an unbroken chain.
    let events: Vec<String> = g
        .audit()
        .iter()
        .map(|r| r["event"].as_str().unwrap_or("").to_string())
        .collect();
    let expected = [
        "session.created",
        "session.inputs",
        "session.plan",
        "container.created",
        "container.started",
        "container.exited",
        "session.staged",
        "container.removed",
        "session.finished",
    ];
    let mut at = 0;
    for e in &events {
        if at < expected.len() && e == expected[at] {
            at += 1;
        }
    }
    assert_eq!(
        at,
        expected.len(),
        "audit events out of order or missing: {events:?}"
    );
    assert!(g.audit_verifies());
    g.assert_clean();
}

#[test]
fn the_worker_sees_its_input_read_only_and_nothing_else_of_the_host() {
    let g = Golem::new();
    let input = g.file("in/doc.txt", "evidence");
    g.file("not-an-input.txt", "secret neighbour");
    let run = g
        .run()
        .input(&input)
        .env("GOLEM_TEST_SECRET", "hunter2-must-not-leak")
        .hostile(["probe"])
        .expect(Status::Staged);
    let probe_text = std::fs::read_to_string(g.staged_files(&run.staged()).join("probe.json"))
        .expect("probe.json");
    let probe: Value = serde_json::from_str(&probe_text).expect("probe json");

    // Not root, no capabilities, no way to gain privileges.
    let me = probe["uid"].as_u64().expect("uid");
    assert!(golem_orch::worker_uid::is_session_id(me as u32), "{me}");
    assert_eq!(probe["euid"], me);
    assert_ne!(probe["gid"], 0);
    assert!(
        probe["cap_eff"]
            .as_str()
            .unwrap_or("x")
            .trim_start_matches('0')
            .is_empty(),
        "capabilities: {}",
        probe["cap_eff"]
    );
    assert_eq!(probe["no_new_privs"].as_str().map(str::trim), Some("1"));
    assert_eq!(probe["setuid_root"]["setuid"]["ok"], false);
    assert_eq!(probe["setuid_root"]["uid_after"], me);
    assert_eq!(probe["mount_attempt"]["mount"]["ok"], false);

    // Its input, read-only; nothing else of the host project.
    assert_eq!(probe["input_listing"], serde_json::json!(["doc.txt"]));
    assert_eq!(probe["can_write_input"]["ok"], false);
    assert_eq!(probe["can_write_root"]["ok"], false);
    assert!(!probe_text.contains("secret neighbour") && !probe_text.contains("not-an-input"));
    let mountinfo = probe["mountinfo"].as_str().unwrap_or("");
    assert!(
        !mountinfo.contains(g.project.path().to_str().unwrap()),
        "project mounted: {mountinfo}"
    );
    for target in [" /workspace ", " /repo "] {
        assert!(
            !mountinfo.contains(target),
            "{target} mounted at untrusted level"
        );
    }

    // No network interface but loopback, so no egress at all.
    assert_eq!(probe["interfaces"]["names"], serde_json::json!(["lo"]));
    for sock in ["/var/run/docker.sock", "/run/docker.sock"] {
        assert_eq!(probe["docker_sock"][sock]["exists"], false, "{sock}");
    }

    // The orchestrator's environment does not leak in.
    assert!(!probe_text.contains("hunter2-must-not-leak"));
    // Exactly the policy's variables plus the engine's own defaults, none with host values.
    let env = probe["env"].as_object().expect("env");
    let mut keys: Vec<&str> = env.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["HOME", "HOSTNAME", "LANG", "PATH"], "{env:?}");
    assert_eq!(env["HOME"], "/");
    assert_eq!(env["HOSTNAME"], "golem");
    g.assert_clean();
}

#[test]
fn links_fifos_sockets_and_setuid_files_never_reach_the_stage() {
    let g = Golem::new();
    let staged = g
        .run()
        .hostile(["symlinks"])
        .expect(Status::Staged)
        .staged();
    let (manifest, _) = g.json(["show", &staged, "--json"]);
    // ok.txt and hard are one inode: tar stores whichever name comes first as the regular file
    // and the other as a hard link, which is refused. One copy of the content gets through.
    let accepted = staged_paths(&manifest);
    assert!(
        accepted == ["ok.txt"] || accepted == ["hard"],
        "{accepted:?}"
    );
    let linked = if accepted == ["ok.txt"] {
        "hard"
    } else {
        "ok.txt"
    };
    let rejected = rejected_reasons(&manifest);
    let reason_of = |name: &str| {
        rejected
            .iter()
            .find(|(p, _)| p.ends_with(name))
            .map(|(_, r)| r.clone())
    };
    for (bad, why) in [
        ("passwd", "symlink to /etc/passwd"),
        ("root", "symlink to /"),
        (linked, "hard link"),
        ("fifo", "fifo"),
        ("suid", "setuid"),
    ] {
        let reason =
            reason_of(bad).unwrap_or_else(|| panic!("{bad} not listed as rejected: {rejected:?}"));
        assert!(reason.contains(why), "{bad}: {reason}");
    }
    // tar has no type for a socket: it is listed as an entry the init could not archive and
    // must simply not be there.
    assert!(!accepted.iter().any(|p| p.ends_with("sock")));
    // On disk: one regular file, nothing else, no setuid bit.
    let files = g.staged_files(&staged);
    let entries: Vec<_> = std::fs::read_dir(&files)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    assert_eq!(entries.len(), 1);
    let meta = std::fs::symlink_metadata(files.join(&accepted[0])).unwrap();
    assert!(meta.file_type().is_file());
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777,
        0o644
    );
    // The audit log names every refusal.
    let audited = g
        .audit()
        .into_iter()
        .filter(|r| r["event"] == "entry.rejected")
        .count();
    assert_eq!(audited, rejected.len());
    g.assert_clean();
}

#[test]
fn hostile_names_are_rejected_with_a_reason() {
    let g = Golem::new();
    let run = g.run().hostile(["names"]).expect(Status::Staged);
    let (manifest, _) = g.json(["show", &run.staged(), "--json"]);
    assert_eq!(staged_paths(&manifest), ["ok.txt"]);
    assert_eq!(rejected_reasons(&manifest).len(), 3, "{manifest}");
    g.assert_clean();
}

#[test]
fn a_worker_over_the_byte_cap_cannot_fill_the_host() {
    let g = Golem::new();
    g.file("golem.yaml", "levels:\n  untrusted:\n    output:\n      max_total_bytes: 2MiB\n      max_file_bytes: 2MiB\n");
    // The kernel stopped the writes at the output's size; what exists is within the cap.
    let run = g.run().hostile(["fill"]).expect(Status::Staged);
    let bytes = run.bytes;
    assert_eq!(run.json["bytes"], bytes);
    assert!(bytes <= 2 << 20, "staged {bytes} bytes over a 2 MiB cap");
    let logs = String::from_utf8_lossy(&g.output(["logs", &run.session()]).stdout).into_owned();
    assert!(
        logs.contains("No space left on device") || logs.contains("os error 28"),
        "{logs}"
    );
    g.assert_clean();
}

#[test]
fn a_file_over_the_per_file_cap_is_rejected_and_the_rest_staged() {
    let g = Golem::new();
    g.file(
        "golem.yaml",
        "levels:\n  untrusted:\n    output:\n      max_file_bytes: 64KiB\n",
    );
    let run = g
        .run()
        .hostile(["bigfile", "200000"])
        .expect(Status::Staged);
    let (manifest, _) = g.json(["show", &run.staged(), "--json"]);
    assert_eq!(staged_paths(&manifest), ["ok.txt"]);
    let rejected = rejected_reasons(&manifest);
    assert_eq!(rejected.len(), 1);
    assert!(rejected[0].0.ends_with("big"), "{rejected:?}");
    g.assert_clean();
}

#[test]
fn too_many_files_rejects_the_output_as_a_whole() {
    let g = Golem::new();
    g.file(
        "golem.yaml",
        "levels:\n  untrusted:\n    output:\n      max_files: 20\n",
    );
    let run = g.run().hostile(["many", "30"]).expect(Status::Rejected);
    assert!(run.json["staged"].is_null());
    assert!(g.staged().is_empty());
    assert!(g.audit().iter().any(|r| r["event"] == "output.rejected"));
    g.assert_clean();
}

#[test]
fn a_worker_past_its_timeout_is_killed_and_reported() {
    let g = Golem::new();
    let run = g
        .run()
        .flags(["--timeout", "2s"])
        .hostile(["ignore-term"])
        .expect(Status::Timeout);
    assert!(run.timed_out);
    assert_eq!(run.json["timed_out"], true);
    assert!(run.json["staged"].is_null());
    let exited = g
        .audit()
        .into_iter()
        .find(|r| r["event"] == "container.exited")
        .expect("exit audited");
    assert_eq!(exited["data"]["timed_out"], true);
    g.assert_clean();
}

attack_under! {
    [runsc]
    /// The memory limit holds, under gVisor too (for the whole sandbox): the session ends as
    /// out of memory.
    fn a_memory_bomb_is_oom_killed_and_reported(g) {
        let run = g
            .run()
            .flags(["--memory", "64m"])
            .hostile(["membomb"])
            .expect(Status::Oom);
        assert!(run.oom_killed);
        assert_eq!(run.json["oom_killed"], true);
    }
}

#[test]
fn a_failing_worker_still_has_its_output_staged_and_its_exit_code_reported() {
    let g = Golem::new();
    // A staged session whose worker failed exits 3.
    let run = g
        .run()
        .hostile(["exit", "7"])
        .outcome()
        .expect_exit(Status::Staged, 3);
    assert_eq!(run.exit_code, Some(7));
    assert_eq!(run.json["exit_code"], 7);
    g.assert_clean();
}

#[test]
fn dry_run_prints_the_exact_container_and_starts_nothing() {
    let g = Golem::new();
    let input = g.file("a.txt", "x");
    let out = g.output(["run", "--dry-run", input.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "network    none",
        "rootfs     read-only",
        "caps       drop ALL",
        "no-new-privileges",
        "/input",
        "ro  bind",
        "/output",
    ] {
        assert!(text.contains(needle), "dry run lacks {needle:?}:\n{text}");
    }
    let (plan, code) = g.json([
        "run",
        "--dry-run",
        "--json",
        "--memory",
        "128m",
        input.to_str().unwrap(),
    ]);
    assert_eq!(code, 0);
    assert_eq!(plan["plan"]["memory_bytes"], 128 << 20);
    assert_eq!(plan["plan"]["cap_drop"], serde_json::json!(["ALL"]));
    assert!(
        !g.home.join("sessions").exists()
            || std::fs::read_dir(g.home.join("sessions")).unwrap().count() == 0
    );
    g.assert_clean();
}

#[test]
fn bad_input_gets_one_clear_line_and_a_failing_exit_code() {
    let g = Golem::new();
    let input = g.file("a.txt", "x");
    let input = input.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["run", "/definitely/not/here.pdf"], "no such file"),
        (vec!["run", "--trust", "godmode", input], "godmode"),
        (vec!["run", "--memory", "64g", input], "may only narrow"),
        (vec!["run", "--timeout", "2h", input], "may only narrow"),
        (vec!["run", "--memory", "lots", input], "invalid size"),
        (vec!["run", "ftp://example.org/x"], "only http and https"),
        (
            vec!["run", "--image", "no-such-image:here", input],
            "never pulls",
        ),
        (vec!["policy", "show", "superuser"], "superuser"),
        (vec!["show", "ffffffffffff"], "no staged commit matches"),
        (vec!["logs", "zzzz"], "no session matches"),
    ];
    for (args, needle) in cases {
        let out = g.output(&args);
        let err = stderr_text(&out);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            err.contains(needle),
            "{args:?}: stderr lacks {needle:?}: {err}"
        );
        assert!(
            !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
            "{args:?} panicked: {err}"
        );
    }
    // A typo in the project's policy file is located precisely.
    g.file(
        "golem.yaml",
        "levels:\n  untrusted:\n    resources:\n      memroy: 1g\n",
    );
    let out = g.output(["run", input]);
    let err = stderr_text(&out);
    assert!(
        err.contains("golem.yaml:4:") && err.contains("memroy"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    g.assert_clean();
}

#[test]
fn policy_show_prints_the_effective_narrowed_policy() {
    let g = Golem::new();
    g.file(
        "golem.yaml",
        "levels:\n  session:\n    resources:\n      memory: 128m\n",
    );
    let (p, code) = g.json(["policy", "show", "session", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(p["resources"]["memory"], "128MiB");
    assert_eq!(p["mounts"]["workspace"], "rw");
    assert_eq!(p["sources"].as_array().unwrap().len(), 2);
}

#[test]
fn ctrl_c_cancels_the_session_and_removes_its_container() {
    let g = Golem::new();
    let run = g
        .spawn(g.run().hostile(["sleep", "300"]))
        .wait_workers(1)
        .signal(libc::SIGINT)
        .finish()
        .expect(Status::Cancelled);
    assert_eq!(run.code, 130);
    g.assert_clean();
}

#[test]
fn gc_cleans_up_after_an_orchestrator_killed_mid_session() {
    let g = Golem::new();
    // Without --json, as a person at a terminal would run it.
    g.spawn(g.command(["run"]).hostile(["sleep", "300"]))
        .wait_workers(1)
        .kill();
    // Other tests run the engine-wide `gc` too and may collect these first, so the story checks
    // outcomes rather than who collected what: after a gc, nothing of ours is left, and the
    // session is marked failed by gc in its own audit log.
    let (report, code) = g.json(["gc", "--json"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(g.sessions()[0]["status"], "failed");
    assert!(g
        .audit()
        .iter()
        .any(|r| r["event"] == "session.failed" && r["data"]["by"] == "gc"));
    g.assert_clean();
}

/// The mount point and whether it is read-only, from /proc/self/mountinfo lines.
fn mounts(mountinfo: &str) -> Vec<(String, bool)> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((
                f.get(4)?.to_string(),
                f.get(5)?.split(',').any(|o| o == "ro"),
            ))
        })
        .collect()
}

#[test]
fn higher_trust_levels_add_exactly_their_mounts() {
    let g = Golem::new();
    g.git_init();
    g.file("README.md", "a project");
    let probe_mounts = |level: &str| {
        let run = g.run().level(level).hostile(["probe"]).outcome();
        assert_eq!(run.code, 0, "{level}: {}", run.json);
        let text =
            std::fs::read_to_string(g.staged_files(&run.staged()).join("probe.json")).unwrap();
        let probe: Value = serde_json::from_str(&text).unwrap();
        let all = mounts(probe["mountinfo"].as_str().unwrap_or(""));
        let find = |target: &str| all.iter().find(|(m, _)| m == target).map(|(_, ro)| *ro);
        (
            find("/input"),
            find("/workspace"),
            find("/repo"),
            find("/output"),
            find("/"),
        )
    };
    // (input, workspace, repo, output, root): Some(true) = read-only, Some(false) = writable.
    assert_eq!(
        probe_mounts("untrusted"),
        (Some(true), None, None, Some(false), Some(true))
    );
    assert_eq!(
        probe_mounts("session"),
        (Some(true), Some(false), None, Some(false), Some(true))
    );
    assert_eq!(
        probe_mounts("workspace"),
        (Some(true), Some(false), Some(true), Some(false), Some(true))
    );
    assert_eq!(
        probe_mounts("full"),
        (
            Some(true),
            Some(false),
            Some(false),
            Some(false),
            Some(true)
        )
    );
    g.assert_clean();
}

#[test]
fn a_full_level_worker_cannot_touch_the_stage_the_audit_log_or_git_metadata() {
    // The common layout: state in ./.golem inside the project's repository, which `full` mounts
    // read-write at /repo.
    let g = Golem::new();
    g.git_init();
    let home = g.project.path().join(".golem");
    let first = g.file("a.txt", "first session");
    let earlier_id = g
        .run()
        .home(&home)
        .input(&first)
        .expect(Status::Staged)
        .staged();
    let earlier_report = g
        .project
        .path()
        .join(".golem/staged")
        .join(&earlier_id)
        .join("files/index.md");
    let before = std::fs::read(&earlier_report).unwrap();

    let targets = [
        format!("/repo/.golem/staged/{earlier_id}/files/index.md"),
        "/repo/.golem/audit.jsonl".to_string(),
        "/repo/.git/hooks/post-checkout".to_string(),
        "/repo/.git/config".to_string(),
        "/repo/allowed.txt".to_string(),
    ];
    // Make everything writable by the worker's uid, so that only golem-orch's mounts stand in the
    // way (the policy grants a read-write work tree; the host's file modes would otherwise decide).
    chmod(&["-R", "a+rwX"], g.project.path());
    // Except the state directory: one that others can write is refused outright (and golem-orch
    // keeps it 0700). The empty listing below shows the mask, not the modes, hides it.
    chmod(&["-R", "go-w"], &home);
    let run = g
        .run()
        .home(&home)
        .level("full")
        .hostile(std::iter::once("try-write").chain(targets.iter().map(String::as_str)))
        .expect(Status::Staged);
    let writes = staged_json_in(&home, &run, "writes.json");

    // The work tree is writable at `full`, as the policy says...
    assert_eq!(writes["/repo/allowed.txt"]["ok"], true, "{writes}");
    // ...but the state directory is not even visible, and git's metadata is read-only.
    for target in &targets[..4] {
        assert_eq!(
            writes[target]["ok"], false,
            "{target} was writable: {writes}"
        );
    }
    assert_eq!(
        writes["/repo/.golem/audit.jsonl"]["listing"],
        serde_json::json!([]),
        "state directory visible"
    );
    assert!(!g.project.path().join(".git/hooks/post-checkout").exists());
    assert_eq!(std::fs::read(&earlier_report).unwrap(), before);
    assert!(g.audit_verifies_in(&home));
    let state = g.project.path().join(".golem").canonicalize().unwrap();
    assert!(engine_resources(&state).is_empty());
}

/// Rebuilt workers do not pile up: `gc` removes the worker image tags and the init binaries of
/// other golem-orch builds, and keeps the current ones.
#[test]
fn gc_removes_the_worker_images_and_init_binaries_of_other_builds() {
    let g = Golem::new();
    crate::harness::worker_image();
    let current = golem_orch::image::worker_tag();
    let stale = "golem-worker:000000000000";
    let docker = |args: &[&str]| {
        std::process::Command::new("docker")
            .args(args)
            .output()
            .expect("docker")
            .status
            .success()
    };
    assert!(docker(&["tag", &current, stale]), "tagging {stale}");
    let bin = g.home.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let old_init = bin.join("golem-init-000000000000");
    std::fs::write(&old_init, b"an older build").unwrap();
    // Unused for longer than gc's grace period.
    let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    std::fs::File::open(&old_init)
        .and_then(|f| f.set_modified(long_ago))
        .unwrap();

    let (report, code) = g.json(["gc", "--json"]);
    assert_eq!(code, 0, "{report}");
    // Another test's engine-wide gc may untag it first; the outcome is what counts.
    assert!(
        !docker(&["image", "inspect", stale]),
        "{stale} is still there"
    );
    assert!(
        docker(&["image", "inspect", &current]),
        "{current} was removed"
    );
    assert!(!old_init.exists(), "{report}");
    assert_eq!(
        report["init_binaries"],
        serde_json::json!(["golem-init-000000000000"])
    );
    g.assert_clean();
}
