//! User stories for folders as inputs: a symbolic link inside one is skipped and listed (never
//! followed) unless `--strict`, and a folder larger than the worker's per-session limit says so
//! and points to `batch`.

use crate::harness::{files_containing, Golem, Status};

/// A line of /etc/passwd that every Linux host has; never to be found in the state directory.
const PASSWD_ROOT: &[u8] = b"root:x:0:0:";

#[test]
fn a_link_inside_a_folder_is_skipped_and_listed_and_its_target_never_read() {
    let g = Golem::new();
    g.file("inbox/letter.txt", "Dear reviewer,\nplease read me.\n");
    let link = g.project.path().join("inbox/passwd");
    std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
    let inbox = g.project.path().join("inbox");

    let run = g.run().input(&inbox).expect(Status::Staged);
    let skipped = run.json["skipped"].as_array().cloned().unwrap_or_default();
    assert_eq!(skipped.len(), 1, "{}", run.json);
    assert_eq!(skipped[0]["name"], "inbox/passwd");
    assert!(skipped[0]["source"]
        .as_str()
        .unwrap_or_default()
        .ends_with("inbox/passwd"));
    let staged = run.staged();
    let (shown, _) = g.json(["show", &staged, "--json"]);
    let inputs: Vec<&str> = shown["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["name"].as_str())
        .collect();
    assert_eq!(inputs, ["inbox/letter.txt"]);
    assert_eq!(shown["skipped"][0]["name"], "inbox/passwd", "{shown}");
    assert!(g
        .staged_files(&staged)
        .join("inbox/letter.txt.md")
        .is_file());
    assert!(!g.staged_files(&staged).join("inbox/passwd.md").exists());
    let audited = g
        .audit()
        .into_iter()
        .find(|r| r["event"] == "session.inputs" && r["session"] == run.session().as_str());
    let audited = audited.expect("a session.inputs record");
    assert_eq!(
        audited["data"]["skipped"][0]["name"], "inbox/passwd",
        "{audited}"
    );
    let leaks = files_containing(&g.home, PASSWD_ROOT);
    assert!(leaks.is_empty(), "/etc/passwd was read: {leaks:?}");

    // Said to a person too, under the outcome.
    let out = g.output(["run".as_ref(), inbox.as_os_str()]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("skipped 1 symbolic link(s)") && text.contains("inbox/passwd"),
        "{text}"
    );

    // --strict fails the session in one line naming the link, and stages nothing.
    let strict = g
        .run()
        .flags(["--strict"])
        .input(&inbox)
        .expect(Status::Failed);
    strict.assert_one_error_line("failed");
    assert!(
        strict.stderr.contains("inbox/passwd") && strict.stderr.contains("symbolic link"),
        "{}",
        strict.stderr
    );
    assert!(strict.staged_id.is_none());
    assert!(files_containing(&g.home, PASSWD_ROOT).is_empty());
    g.assert_clean();
}

#[test]
fn a_folder_larger_than_the_workers_limit_says_how_many_were_not_processed() {
    let g = Golem::new();
    // One more than golem-worker's report takes in one session (its --max-inputs, 100).
    for i in 0..101 {
        g.file(&format!("many/f{i:03}.txt"), format!("document {i}\n"));
    }
    let many = g.project.path().join("many");
    let run = g
        .run()
        .input(&many)
        .outcome()
        .expect_exit(Status::Staged, 3);
    assert_eq!(run.json["not_processed"], 1, "{}", run.json);
    assert_eq!(run.json["inputs"], 101, "{}", run.json);
    // The limit golem-orch states is the worker's real one: the first 100 got reports, the
    // 101st did not.
    let files = g.staged_files(&run.staged());
    assert!(files.join("many/f099.txt.md").is_file());
    assert!(!files.join("many/f100.txt.md").exists());

    let out = g.output(["run".as_ref(), many.as_os_str()]);
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("1 of 101 inputs were not processed")
            && text.contains("at most 100 per session")
            && text.contains("golem-orch batch ")
            && text.contains("many"),
        "{text}"
    );

    // A folder within the limit says nothing of the kind.
    std::fs::remove_file(many.join("f100.txt")).unwrap();
    let run = g.run().input(&many).expect(Status::Staged);
    assert!(run.json.get("not_processed").is_none(), "{}", run.json);
    g.assert_clean();
}

#[test]
fn batch_skips_a_link_in_a_folder_and_with_strict_refuses_it_before_anything_runs() {
    let g = Golem::new();
    g.file("inbox/letter.txt", "Dear reviewer,\n");
    std::os::unix::fs::symlink("/etc/passwd", g.project.path().join("inbox/passwd")).unwrap();
    let (result, code) = g.json(["batch", "--json", "inbox"]);
    assert_eq!(code, 0, "{result}");
    let sources: Vec<&str> = result["documents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["source"].as_str())
        .collect();
    assert_eq!(sources.len(), 1, "{result}");
    assert!(sources[0].ends_with("inbox/letter.txt"), "{result}");

    let before = crate::harness::tree(&g.home);
    let out = g.output(["batch", "--strict", "inbox"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = crate::harness::stderr_text(&out);
    assert!(
        err.trim().lines().count() == 1
            && err.contains("inbox/passwd")
            && err.contains("symbolic link"),
        "{err}"
    );
    assert_eq!(
        crate::harness::tree(&g.home),
        before,
        "a refused batch left something"
    );
    assert!(files_containing(&g.home, PASSWD_ROOT).is_empty());
    g.assert_clean();
}
