//! User stories for clearance: reviewing, diffing, pushing and discarding staged commits.

use std::path::Path;

use serde_json::Value;

use crate::harness::{git, stderr_text, Golem, Status, IGNORE_GOLEM};

/// Stages the default worker's report of one input; returns the staged id.
fn stage_report(g: &Golem, level: &str) -> String {
    let input = g.file("inbox/letter.txt", "Dear reviewer,\nplease read me.\n");
    g.run()
        .level(level)
        .input(&input)
        .expect(Status::Staged)
        .staged()
}

/// Everything a push must leave alone: HEAD, the index and the working tree.
fn snapshot(dir: &Path) -> (String, String, String) {
    (
        git(dir, &["rev-parse", "HEAD"]),
        git(dir, &["ls-files", "-s"]),
        git(dir, &["status", "--porcelain"]),
    )
}

#[test]
fn push_makes_exactly_one_commit_on_its_branch_and_touches_nothing_else() {
    let g = Golem::new();
    g.git_repo(&[], &[IGNORE_GOLEM, ("README.md", "project\n")]);
    let id = stage_report(&g, "untrusted");
    let before = snapshot(g.project.path());
    let (pushed, code) = g.json([
        "push",
        &id,
        "--yes",
        "--json",
        "--prefix",
        "reviews",
        "--branch",
        "golem/review",
    ]);
    assert_eq!(code, 0, "{pushed}");
    let commit = pushed["commit"].as_str().unwrap();

    let dir = g.project.path();
    assert_eq!(snapshot(dir), before, "HEAD, index or working tree changed");
    assert_eq!(git(dir, &["rev-parse", "golem/review"]), commit);
    assert_eq!(
        git(dir, &["rev-parse", "golem/review^"]),
        before.0,
        "parent is the branch's base"
    );
    assert_eq!(
        git(dir, &["rev-list", "--count", "main..golem/review"]),
        "1"
    );
    let changed = git(dir, &["diff", "--name-status", "main", "golem/review"]);
    assert_eq!(
        changed,
        "A\treviews/index.json\nA\treviews/index.md\nA\treviews/letter.txt.json\nA\treviews/letter.txt.md"
    );
    let committed = git(dir, &["show", "golem/review:reviews/letter.txt.md"]);
    let staged = std::fs::read_to_string(g.staged_files(&id).join("letter.txt.md")).unwrap();
    assert_eq!(committed.trim_end(), staged.trim_end());
    let message = git(dir, &["log", "-1", "--format=%B", "golem/review"]);
    for trailer in [
        "Golem-Staged: ",
        "Golem-Session: ",
        "Golem-Trust-Level: untrusted",
        "Golem-Image: ",
        "Golem-Input-Sha256: ",
        "Golem-Manifest-Sha256: ",
    ] {
        assert!(message.contains(trailer), "missing {trailer}: {message}");
    }

    // The stage records the commit and moves only forward.
    let (manifest, _) = g.json(["show", &id, "--json"]);
    assert_eq!(manifest["status"], "pushed");
    let status: Value = serde_json::from_str(
        &std::fs::read_to_string(g.home.join("staged").join(&id).join("status.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(status["commit"], commit);
    let again = g.output(["push", &id, "--yes"]);
    assert!(!again.status.success());
    assert!(
        stderr_text(&again).contains("already pushed"),
        "{}",
        stderr_text(&again)
    );
    let discard = g.output(["discard", &id, "--yes"]);
    assert!(
        !discard.status.success(),
        "a pushed stage cannot be discarded"
    );
    assert!(g
        .audit()
        .iter()
        .any(|r| r["event"] == "stage.pushed" && r["data"]["commit"] == commit));
}

#[test]
fn diff_marks_new_and_changed_files_against_a_branch_that_has_some_of_them() {
    let g = Golem::new();
    g.git_repo(&[], &[IGNORE_GOLEM, ("README.md", "project\n")]);
    let id = stage_report(&g, "untrusted");
    // The branch already has letter.txt.md (different) and letter.txt.json (identical).
    let same = std::fs::read(g.staged_files(&id).join("letter.txt.json")).unwrap();
    g.commit_on_branch(
        "reports",
        "main",
        &[
            ("letter.txt.md", b"an older report\n"),
            ("letter.txt.json", &same),
        ],
        "old reports",
    );

    let (diff, code) = g.json(["diff", &id, "--branch", "reports", "--json"]);
    assert_eq!(code, 0, "{diff}");
    let change = |p: &str| {
        diff["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == p)
            .map(|f| f["change"].clone())
    };
    assert_eq!(change("letter.txt.md"), Some("modified".into()));
    assert_eq!(change("letter.txt.json"), Some("unchanged".into()));
    let out = g.output(["diff", &id, "--branch", "reports"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("M letter.txt.md")
            && text.contains("-an older report")
            && text.contains("+# letter.txt"),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "no colour when piped");

    // Against a branch that does not exist yet (created from HEAD), everything is new.
    let (diff, _) = g.json(["diff", &id, "--json"]);
    assert!(
        diff["files"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["change"] == "added"),
        "{diff}"
    );
    // Pushing onto the branch commits only what changes.
    let (pushed, code) = g.json(["push", &id, "--branch", "reports", "--yes", "--json"]);
    assert_eq!(code, 0, "{pushed}");
    assert_eq!(
        g.git(&["diff", "--name-status", "reports^", "reports"]),
        "A\tindex.json\nA\tindex.md\nM\tletter.txt.md"
    );
}

#[test]
fn a_tampered_stage_is_refused() {
    let g = Golem::new();
    g.git_repo(&[], &[IGNORE_GOLEM]);
    let id = stage_report(&g, "untrusted");
    let report = g.staged_files(&id).join("letter.txt.md");
    let original = std::fs::read(&report).unwrap();
    std::fs::write(&report, "# letter.txt\nall good, merge me\n").unwrap();
    let out = g.output(["push", &id, "--yes"]);
    assert!(!out.status.success());
    assert!(
        stderr_text(&out).contains("modified after staging"),
        "{}",
        stderr_text(&out)
    );

    // Editing the manifest to match is caught by the hash the audit log recorded.
    std::fs::write(&report, &original).unwrap();
    let manifest_path = g.home.join("staged").join(&id).join("manifest.json");
    let manifest = std::fs::read_to_string(&manifest_path).unwrap().replace(
        "\"trust_level\": \"untrusted\"",
        "\"trust_level\": \"full\"",
    );
    std::fs::write(&manifest_path, manifest).unwrap();
    let out = g.output(["push", &id, "--yes"]);
    assert!(!out.status.success());
    assert!(
        stderr_text(&out).contains("manifest does not match"),
        "{}",
        stderr_text(&out)
    );
    // `diff` shows a reviewer only what a push would commit: it refuses the same manifest.
    let out = g.output(["diff", &id]);
    assert!(!out.status.success());
    assert!(
        stderr_text(&out).contains("manifest does not match"),
        "{}",
        stderr_text(&out)
    );
    // Nothing reached the repository, and the stage is still pending.
    assert!(!g.has_ref("refs/heads/golem/x"));
    assert_eq!(g.staged()[0]["status"], "pending");
}

#[test]
fn a_concurrent_change_to_the_same_path_is_a_conflict_named_by_path() {
    let g = Golem::new();
    g.git_repo(&[], &[IGNORE_GOLEM, ("README.md", "project\n")]);
    // A workspace session mounts the repository, so its HEAD is recorded.
    let id = stage_report(&g, "workspace");
    let (manifest, _) = g.json(["show", &id, "--json"]);
    assert_eq!(manifest["repo_head"], g.git(&["rev-parse", "HEAD"]));
    // Meanwhile someone changes letter.txt.md on the target branch.
    let tip = g.commit_on_branch(
        "shared",
        "main",
        &[("letter.txt.md", b"someone else's report\n")],
        "their report",
    );

    let out = g.output(["push", &id, "--branch", "shared", "--yes"]);
    assert!(!out.status.success());
    let err = stderr_text(&out);
    assert!(
        err.contains("conflict")
            && err.contains("letter.txt.md")
            && !err.contains("letter.txt.json"),
        "{err}"
    );
    assert_eq!(
        g.git(&["rev-parse", "shared"]),
        tip,
        "branch moved on a refused push"
    );
    assert!(g.audit().iter().any(|r| r["event"] == "push.refused"));
    // --force is the person's explicit override.
    let (pushed, code) = g.json([
        "push", &id, "--branch", "shared", "--yes", "--force", "--json",
    ]);
    assert_eq!(code, 0, "{pushed}");
    assert_eq!(g.git(&["rev-parse", "shared^"]), tip);
    // The log says which conflicting paths the person accepted.
    let forced = g
        .audit()
        .into_iter()
        .find(|r| r["event"] == "push.forced")
        .expect("push.forced audited");
    assert!(
        forced["data"]["conflicts"]
            .as_array()
            .is_some_and(|c| !c.is_empty()),
        "{forced}"
    );
}

#[test]
fn consent_is_required_and_the_checked_out_branch_is_refused() {
    let g = Golem::new();
    g.git_repo(&[], &[IGNORE_GOLEM]);
    let id = stage_report(&g, "untrusted");
    let out = g.output(["push", &id]);
    assert!(!out.status.success());
    assert!(
        stderr_text(&out).contains("consent"),
        "{}",
        stderr_text(&out)
    );
    let out = g.output(["push", &id, "--branch", "main", "--yes"]);
    assert!(!out.status.success());
    assert!(
        stderr_text(&out).contains("checked out"),
        "{}",
        stderr_text(&out)
    );
    let out = g.output(["push", &id, "--prefix", "../escape", "--yes"]);
    assert!(
        stderr_text(&out).contains("prefix"),
        "{}",
        stderr_text(&out)
    );
    let out = g.output(["discard", &id]);
    assert!(!out.status.success() && stderr_text(&out).contains("consent"));
    // Still pending after all of that; then a discard is final.
    assert_eq!(g.staged()[0]["status"], "pending");
    let (d, code) = g.json(["discard", &id, "--yes", "--json"]);
    assert_eq!((d["status"].as_str(), code), (Some("discarded"), 0));
    let out = g.output(["push", &id, "--yes"]);
    assert!(
        !out.status.success() && stderr_text(&out).contains("already discarded"),
        "{}",
        stderr_text(&out)
    );
    assert!(g.audit().iter().any(|r| r["event"] == "stage.discarded"));
}

#[test]
fn push_can_continue_to_a_remote() {
    let g = Golem::new();
    g.git_repo(&[], &[IGNORE_GOLEM, ("README.md", "project\n")]);
    let remote = tempfile::tempdir().unwrap();
    git(remote.path(), &["init", "-q", "--bare"]);
    git(
        g.project.path(),
        &["remote", "add", "origin", remote.path().to_str().unwrap()],
    );
    let id = stage_report(&g, "untrusted");
    let (pushed, code) = g.json(["push", &id, "--yes", "--json", "--remote", "origin"]);
    assert_eq!(code, 0, "{pushed}");
    let branch = pushed["branch"].as_str().unwrap();
    assert_eq!(
        git(remote.path(), &["rev-parse", branch]),
        pushed["commit"].as_str().unwrap()
    );

    // A remote that refuses the ref (it already holds the branch with unrelated history, so the
    // push is not a fast-forward) leaves the stage pending for a retry.
    let id2 = stage_report(&g, "untrusted");
    let branch2 = format!("golem/{}", &id2[..12]);
    let dir = g.project.path();
    git(dir, &["checkout", "-q", "--orphan", "unrelated"]);
    git(
        dir,
        &["commit", "-q", "--allow-empty", "-m", "unrelated history"],
    );
    git(
        dir,
        &[
            "push",
            "-q",
            "origin",
            &format!("unrelated:refs/heads/{branch2}"),
        ],
    );
    git(dir, &["checkout", "-q", "-f", "main"]);
    let out = g.output(["push", &id2, "--yes", "--remote", "origin"]);
    assert!(!out.status.success(), "a rejected remote push must fail");
    assert!(
        stderr_text(&out).contains("origin"),
        "{}",
        stderr_text(&out)
    );
    let (m, _) = g.json(["show", &id2, "--json"]);
    assert_eq!(m["status"], "pending");
    // The retry finds the commit made before the remote refused, instead of making another.
    git(
        remote.path(),
        &["update-ref", "-d", &format!("refs/heads/{branch2}")],
    );
    let (retry, code) = g.json(["push", &id2, "--yes", "--json", "--remote", "origin"]);
    assert_eq!(code, 0, "{retry}");
    assert_eq!(retry["recovered"], true);
    assert_eq!(retry["branch"], branch2.as_str());
    assert_eq!(
        git(
            g.project.path(),
            &["rev-list", "--count", &format!("main..{branch2}")]
        ),
        "1"
    );
    assert_eq!(
        git(remote.path(), &["rev-parse", &branch2]),
        retry["commit"].as_str().unwrap()
    );
}

#[test]
fn a_partial_push_leaves_the_rest_pending_and_a_second_push_commits_exactly_the_rest() {
    let g = Golem::new();
    g.git_repo(&[], &[IGNORE_GOLEM, ("README.md", "project\n")]);
    let id = stage_report(&g, "untrusted");
    let branch = ["--branch", "golem/part"];
    let push = |extra: &[&str]| {
        let mut args = vec!["push", id.as_str(), "--yes", "--json"];
        args.extend_from_slice(&branch);
        args.extend_from_slice(extra);
        g.json(args)
    };

    // The person pushes only the report they read.
    let (first, code) = push(&["--only", "letter.txt.md"]);
    assert_eq!(code, 0, "{first}");
    assert_eq!(
        (first["files"].as_u64(), first["left"].as_u64()),
        (Some(1), Some(3))
    );
    assert_eq!(
        g.git(&["diff", "--name-status", "main", "golem/part"]),
        "A\tletter.txt.md"
    );
    let listed = g.staged();
    assert_eq!(listed[0]["status"], "partial", "{listed:?}");
    assert_eq!(listed[0]["pushed_files"], 1);
    let out = g.output(["staged"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("partial"));
    let (shown, _) = g.json(["show", &id, "--json"]);
    assert_eq!(shown["status"], "partial");
    assert_eq!(
        shown["pushes"][0]["files"],
        serde_json::json!(["letter.txt.md"])
    );
    assert_eq!(shown["pushes"][0]["commit"], first["commit"]);
    assert_eq!(shown["pushes"][0]["branch"], "golem/part");
    assert_eq!(shown["left"].as_array().map(Vec::len), Some(3), "{shown}");
    let text = String::from_utf8_lossy(&g.output(["show", &id]).stdout).into_owned();
    assert!(
        text.contains(&format!(
            "pushed   {} on golem/part",
            first["commit"].as_str().unwrap()
        )) && text.contains("  1 file(s):\n    letter.txt.md\n")
            && text.contains("left     3 of 4 file(s)"),
        "{text}"
    );

    let (diff, _) = g.json(["diff", &id, "--branch", "golem/part", "--json"]);
    assert_eq!(
        diff["files"].as_array().map(Vec::len),
        Some(3),
        "the files left"
    );

    // The same file again is refused in one line; nothing moves.
    let again = g.output([
        "push",
        &id,
        "--yes",
        "--branch",
        "golem/part",
        "--only",
        "letter.txt.md",
    ]);
    let err = stderr_text(&again);
    assert!(!again.status.success());
    assert!(
        err.contains("already pushed") && err.trim().lines().count() == 1,
        "{err}"
    );
    assert_eq!(
        g.git(&["rev-parse", "golem/part"]),
        first["commit"].as_str().unwrap()
    );

    // A push without --only pushes exactly the rest, as a second commit.
    let (second, code) = push(&[]);
    assert_eq!(code, 0, "{second}");
    assert_eq!(
        (second["files"].as_u64(), second["left"].as_u64()),
        (Some(3), Some(0))
    );
    assert_eq!(
        g.git(&["diff", "--name-status", "golem/part^", "golem/part"]),
        "A\tindex.json\nA\tindex.md\nA\tletter.txt.json"
    );
    assert_eq!(
        g.git(&["rev-parse", "golem/part^"]),
        first["commit"].as_str().unwrap()
    );
    assert_eq!(g.git(&["rev-list", "--count", "main..golem/part"]), "2");
    for commit in ["golem/part", "golem/part^"] {
        let message = g.git(&["log", "-1", "--format=%B", commit]);
        assert!(
            message.contains(&format!("Golem-Staged: {id}")),
            "{message}"
        );
        assert!(message.contains("Golem-Staged-Selection: "), "{message}");
    }
    assert_eq!(g.staged()[0]["status"], "pushed");
    let (shown, _) = g.json(["show", &id, "--json"]);
    assert_eq!(shown["pushes"].as_array().map(Vec::len), Some(2));
    assert_eq!(shown["pushed"]["commit"], second["commit"]);
    assert_eq!(shown["left"], serde_json::json!([]));
    let (diff, _) = g.json(["diff", &id, "--branch", "golem/part", "--json"]);
    assert!(
        diff["files"]
            .as_array()
            .is_some_and(|f| f.len() == 4 && f.iter().all(|f| f["change"] == "unchanged")),
        "a pushed commit diffs whole: {diff}"
    );

    // A third push is refused in one line.
    let third = g.output(["push", &id, "--yes", "--branch", "golem/part"]);
    let err = stderr_text(&third);
    assert!(!third.status.success());
    assert!(
        err.contains("already pushed") && err.trim().lines().count() == 1,
        "{err}"
    );
    let pushes: Vec<Value> = g
        .audit()
        .into_iter()
        .filter(|r| r["event"] == "stage.pushed" && r["data"]["staged"] == id.as_str())
        .collect();
    assert_eq!(pushes.len(), 2);
    assert_eq!(
        pushes[0]["data"]["paths"],
        serde_json::json!(["letter.txt.md"])
    );
    assert_eq!(pushes[0]["data"]["partial"], true);
    assert_eq!(pushes[1]["data"]["partial"], false);
}

#[test]
fn discarding_a_partly_pushed_commit_discards_the_rest_and_keeps_the_record() {
    let g = Golem::new();
    g.git_repo(&[], &[IGNORE_GOLEM]);
    let id = stage_report(&g, "untrusted");
    let (first, code) = g.json(["push", &id, "--yes", "--json", "--only", "index.md"]);
    assert_eq!(code, 0, "{first}");
    let (d, code) = g.json(["discard", &id, "--yes", "--json"]);
    assert_eq!(code, 0, "{d}");
    assert_eq!(
        (d["discarded"].as_u64(), d["already_pushed"].as_u64()),
        (Some(3), Some(1))
    );
    let out = g.output(["discard", &id, "--yes"]);
    assert!(!out.status.success() && stderr_text(&out).contains("already discarded"));
    let (shown, _) = g.json(["show", &id, "--json"]);
    assert_eq!(shown["status"], "discarded");
    assert_eq!(shown["pushes"][0]["commit"], first["commit"]);
    let out = g.output(["push", &id, "--yes"]);
    assert!(
        !out.status.success() && stderr_text(&out).contains("already discarded"),
        "{}",
        stderr_text(&out)
    );
    assert!(g.audit().iter().any(|r| r["event"] == "stage.discarded"
        && r["data"]["discarded"] == 3
        && r["data"]["already_pushed"] == 1));
}

#[test]
fn a_partial_push_interrupted_at_the_remote_is_recovered_and_the_rest_is_a_new_commit() {
    let g = Golem::new();
    g.git_repo(&[], &[IGNORE_GOLEM, ("README.md", "project\n")]);
    let remote = tempfile::tempdir().unwrap();
    git(remote.path(), &["init", "-q", "--bare"]);
    let dir = g.project.path();
    git(
        dir,
        &["remote", "add", "origin", remote.path().to_str().unwrap()],
    );
    let id = stage_report(&g, "untrusted");
    let branch = format!("golem/{}", &id[..12]);
    // The remote already holds the branch with unrelated history: the first push commits
    // locally, then the remote refuses it.
    git(dir, &["checkout", "-q", "--orphan", "unrelated"]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", "unrelated"]);
    git(
        dir,
        &[
            "push",
            "-q",
            "origin",
            &format!("unrelated:refs/heads/{branch}"),
        ],
    );
    git(dir, &["checkout", "-q", "-f", "main"]);
    let only = ["--only", "letter.txt.md"];
    let push = |extra: &[&str]| {
        let mut args = vec!["push", id.as_str(), "--yes", "--json", "--remote", "origin"];
        args.extend_from_slice(extra);
        g.json(args)
    };
    let out = g.output([
        "push",
        &id,
        "--yes",
        "--remote",
        "origin",
        "--only",
        "letter.txt.md",
    ]);
    assert!(!out.status.success(), "the remote must refuse");
    assert_eq!(g.staged()[0]["status"], "pending");

    // The retry of the same selection reuses that commit.
    git(
        remote.path(),
        &["update-ref", "-d", &format!("refs/heads/{branch}")],
    );
    let (first, code) = push(&only);
    assert_eq!(code, 0, "{first}");
    assert_eq!(first["recovered"], true, "{first}");
    assert_eq!(g.staged()[0]["status"], "partial");
    // The rest is not mistaken for that recorded part: it is a commit of its own.
    let (rest, code) = push(&[]);
    assert_eq!(code, 0, "{rest}");
    assert_eq!(rest["recovered"], false, "{rest}");
    assert_ne!(rest["commit"], first["commit"]);
    assert_eq!(
        g.git(&["diff", "--name-status", &format!("{branch}^"), &branch]),
        "A\tindex.json\nA\tindex.md\nA\tletter.txt.json"
    );
    assert_eq!(
        git(remote.path(), &["rev-parse", &branch]),
        rest["commit"].as_str().unwrap()
    );
    assert_eq!(g.staged()[0]["status"], "pushed");
}
