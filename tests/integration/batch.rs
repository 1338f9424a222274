//! User stories for batches: many documents, one container each, in parallel.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{docker_lines, hostile_image, stderr_text, wait_until, Golem};

/// Status of each document by its file name.
fn statuses(result: &Value) -> BTreeMap<String, String> {
    result["documents"]
        .as_array()
        .expect("documents")
        .iter()
        .map(|d| {
            (
                d["folder"].as_str().unwrap_or("").to_string(),
                d["status"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn a_batch_of_good_and_hostile_documents_gets_the_right_outcome_for_each() {
    let g = Golem::new();
    let image = hostile_image();
    g.file("docs/good.txt", "exit 0");
    g.file("docs/links.txt", "symlinks");
    g.file("docs/slow.txt", "sleep 300");
    g.file("docs/bomb.txt", "membomb");
    g.file("docs/failing.txt", "exit 4");
    let (result, code) = g.json([
        "batch",
        "--json",
        "--jobs",
        "3",
        "--timeout",
        "3s",
        "--memory",
        "64m",
        "--image",
        image,
        "docs",
        "--",
        "from-input",
    ]);
    assert_eq!(code, 1, "not everything succeeded: {result}");
    let s = statuses(&result);
    assert_eq!(s["good.txt"], "staged", "{result}");
    assert_eq!(s["links.txt"], "staged");
    assert_eq!(s["slow.txt"], "timeout");
    assert_eq!(s["bomb.txt"], "oom");
    assert_eq!(s["failing.txt"], "partial");
    let summary = &result["summary"];
    assert_eq!(
        (
            summary["succeeded"].as_u64(),
            summary["timed_out"].as_u64(),
            summary["oom"].as_u64()
        ),
        (Some(2), Some(1), Some(1))
    );
    assert!(
        summary["rejected_entries"].as_u64().unwrap() >= 5,
        "{summary}"
    );
    // One staged commit per document that produced output.
    let (staged, _) = g.json(["staged", "--json"]);
    assert_eq!(staged.as_array().unwrap().len(), 3);
    g.assert_clean();
}

#[test]
fn a_batch_never_runs_more_than_jobs_containers_at_once() {
    let g = Golem::new();
    let image = hostile_image();
    for i in 0..6 {
        g.file(&format!("docs/d{i}.txt"), "sleep 2");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (stop, peak) = (stop.clone(), peak.clone());
        let label = format!("label=golem.home={}", g.home.display());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let n = docker_lines(&[
                    "ps",
                    "-q",
                    "--filter",
                    &label,
                    "--filter",
                    "label=golem.role=worker",
                ])
                .len();
                peak.fetch_max(n, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let (result, code) = g.json([
        "batch",
        "--json",
        "--jobs",
        "2",
        "--image",
        image,
        "docs",
        "--",
        "from-input",
    ]);
    stop.store(true, Ordering::SeqCst);
    watcher.join().unwrap();
    assert_eq!(code, 0, "{result}");
    let peak = peak.load(Ordering::SeqCst);
    assert!(
        peak <= 2,
        "the engine saw {peak} workers at once with --jobs 2"
    );
    assert!(peak >= 1, "the watcher never saw a worker");
    g.assert_clean();
}

#[test]
fn a_cancelled_batch_leaves_no_containers_and_resumes_to_completion() {
    let g = Golem::new();
    let image = hostile_image();
    for i in 0..4 {
        g.file(&format!("docs/d{i}.txt"), "sleep 300");
    }
    let child = g
        .cmd([
            "batch",
            "--json",
            "--jobs",
            "2",
            "--image",
            image,
            "docs",
            "--",
            "from-input",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn batch");
    assert!(
        wait_until(Duration::from_secs(60), || g.running_workers() == 2),
        "two workers never ran"
    );
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(130), "{}", stderr_text(&out));
    let result: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(result["state"], "cancelled");
    assert!(
        statuses(&result)
            .values()
            .all(|s| s == "cancelled" || s == "pending"),
        "{result}"
    );
    g.assert_clean();

    // The documents are quick now; resume runs exactly what did not finish.
    for i in 0..4 {
        g.file(&format!("docs/d{i}.txt"), "exit 0");
    }
    let id = result["batch"].as_str().unwrap();
    let (resumed, code) = g.json(["batch", "--json", "--resume", &id[..12]]);
    assert_eq!(code, 0, "{resumed}");
    assert_eq!(resumed["state"], "finished");
    assert!(
        statuses(&resumed).values().all(|s| s == "staged"),
        "{resumed}"
    );
    assert_eq!(resumed["summary"]["succeeded"], 4);
    g.assert_clean();
}

#[test]
fn a_batch_can_stage_as_one_commit_with_a_folder_per_document() {
    let g = Golem::new();
    g.file("docs/a.txt", "alpha\n");
    g.file("docs/b.txt", "beta\n");
    let list = g.file(
        "list.txt",
        format!(
            "# documents\n{}\n\n",
            g.project.path().join("docs/b.txt").display()
        ),
    );
    let (result, code) = g.json([
        "batch",
        "--json",
        "--stage-as-one",
        "docs/a.txt",
        "--from",
        list.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{result}");
    let staged = result["staged"]
        .as_str()
        .expect("one staged commit")
        .to_string();
    let (manifest, _) = g.json(["show", &staged, "--json"]);
    let mut paths: Vec<&str> = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    paths.sort();
    assert!(
        paths.iter().any(|p| p.starts_with("a.txt/"))
            && paths.iter().any(|p| p.starts_with("b.txt/")),
        "{paths:?}"
    );
    // A top index lists each document, its folder (linked), its status and its files.
    assert!(paths.contains(&"index.md"), "{paths:?}");
    let index = std::fs::read_to_string(g.staged_files(&staged).join("index.md")).unwrap();
    assert!(
        index.contains("2 document(s); 2 staged in this commit")
            && index.contains("| [a.txt](./a.txt/) | staged |")
            && index.contains("| [b.txt](./b.txt/) | staged |")
            && index.contains("docs/b.txt"),
        "{index}"
    );
    // Only the combined commit is pending; the per-document sessions stay listed as merged
    // into it (not discarded), and are not pushable on their own.
    let (list, _) = g.json(["staged", "--json"]);
    let by_status = |status: &str| -> Vec<Value> {
        list.as_array()
            .unwrap()
            .iter()
            .filter(|s| s["status"] == status)
            .cloned()
            .collect()
    };
    let pending = by_status("pending");
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0]["id"], staged.as_str());
    let merged = by_status("merged");
    assert_eq!(merged.len(), 2, "{list}");
    assert!(by_status("discarded").is_empty(), "{list}");
    let part = merged[0]["id"].as_str().unwrap();
    let status: Value = serde_json::from_str(
        &std::fs::read_to_string(g.home.join("staged").join(part).join("status.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(status["into"], staged.as_str(), "{status}");
    g.git_repo(&[], &[crate::harness::IGNORE_GOLEM]);
    let out = g.output(["push", part, "--yes"]);
    assert!(!out.status.success());
    let err = stderr_text(&out);
    assert!(
        err.contains("already merged") && err.trim().lines().count() == 1,
        "{err}"
    );
    let (pushed, code) = g.json(["push", &staged, "--yes", "--json"]);
    assert_eq!(code, 0, "{pushed}");
    let tree = g.git(&["ls-tree", "--name-only", pushed["branch"].as_str().unwrap()]);
    assert!(tree.lines().any(|l| l == "index.md"), "{tree}");
    g.assert_clean();
}

#[test]
fn the_stage_as_one_index_escapes_document_names_and_lists_failed_documents() {
    let g = Golem::new();
    // A name that would be a link and a table cell break in raw Markdown; and one that fails.
    g.file("docs/x](javascript:alert(1))|*.txt", "exit 0");
    g.file("docs/failing.txt", "exit 4");
    g.file("docs/index.md", "exit 0");
    let (result, code) = g.json([
        "batch",
        "--json",
        "--stage-as-one",
        "--image",
        hostile_image(),
        "docs",
        "--",
        "from-input",
    ]);
    assert_eq!(code, 1, "{result}");
    let staged = result["staged"].as_str().expect("one staged commit");
    let index = std::fs::read_to_string(g.staged_files(staged).join("index.md")).unwrap();
    // The source is a code span in its cell: no link (not even an automatic one), no cell
    // break, no emphasis.
    assert!(
        index.contains("| `docs/x](javascript:alert(1))\\|*.txt` | [x\\_\\_javascript"),
        "{index}"
    );
    assert!(
        index.contains("](./x__javascript_alert_1____.txt/) | staged | 1 |"),
        "{index}"
    );
    assert!(index.contains("| partial |"), "{index}");
    // A document named index.md gets a folder of its own, not the index's name.
    assert!(index.contains("[index.md-2](./index.md-2/)"), "{index}");
    g.assert_clean();
}
