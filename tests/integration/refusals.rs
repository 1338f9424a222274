//! User stories for output the host refuses or the worker spoils (issue 11, classes 8 and 11).
//!
//! A refused archive is the worker's doing: it must end in seconds as `rejected` (exit 6, an
//! `output.rejected` audit line), never as the host's failure that `batch --resume` would retry.
//! And whatever a worker does to its output or to its init, every file that does not reach the
//! stage is listed by path and reason in the manifest and the audit log (or the session fails
//! as the worker's failure): a worker can never cause a silent success with missing files.

use std::path::Path;
use std::time::Instant;

use serde_json::Value;

use crate::harness::{
    audit_of, audited_rejections, hostile, parse_run, run_bounded, untrusted, worker_report, Run,
    HANG_GUARD,
};
use crate::harness::{docker_build, hostile_image, Golem};

/// Runs a hostile mode and reports how long the session took (a figure for the issue's
/// closing note, printed, never asserted).
fn timed(g: &Golem, mode: &[&str]) -> Run {
    let start = Instant::now();
    let run = hostile(g, &[], mode);
    eprintln!(
        "refusals: `{}` ended {} after {:.1} s",
        mode.join(" "),
        run.json["status"],
        start.elapsed().as_secs_f64()
    );
    run
}

/// The `output.rejected` audit records of a session.
fn output_rejections(g: &Golem, session: &str) -> Vec<Value> {
    audit_of(g, session)
        .into_iter()
        .filter(|r| r["event"] == "output.rejected")
        .collect()
}

/// Asserts a refused archive ended as the worker's doing: `rejected`, exit 6, one line on
/// stderr, not the host's failure, nothing staged, audited once with `reason` in it.
fn assert_refused(g: &Golem, run: &Run, reason: &str) {
    run.assert_status("rejected", 6);
    run.assert_one_error_line("rejected");
    assert_eq!(run.json["host_failure"], false, "{}", run.json);
    assert!(run.json["staged"].is_null(), "{}", run.json);
    let error = run.json["error"].as_str().unwrap_or("");
    assert!(error.contains(reason), "{error}");
    let audited = output_rejections(g, &run.session());
    assert_eq!(audited.len(), 1, "{audited:?}");
    let audited = audited[0]["data"]["error"].as_str().unwrap_or("");
    assert!(audited.contains(reason), "{audited}");
    let (list, _) = g.json(["staged", "--json"]);
    assert_eq!(list, serde_json::json!([]));
}

/// A staged commit's manifest.
fn manifest(g: &Golem, staged: &str) -> Value {
    let path = g.home.join("staged").join(staged).join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("manifest JSON")
}

/// `(path, reason)` of every rejection a manifest lists.
fn manifest_rejections(manifest: &Value) -> Vec<(String, String)> {
    manifest["rejected"]
        .as_array()
        .expect("rejected list")
        .iter()
        .map(|r| {
            (
                r["path"].as_str().unwrap_or("").to_string(),
                r["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Asserts that every one of `written` (paths under `output/`) is either staged or listed, by
/// itself or by a directory above it, as a rejection in both the manifest and the audit log.
fn assert_nothing_lost_silently(g: &Golem, run: &Run, written: &[&str]) {
    let staged = run.staged();
    let manifest = manifest(g, &staged);
    let files: Vec<String> = manifest["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f["path"].as_str().unwrap_or("").to_string())
        .collect();
    let listed = manifest_rejections(&manifest);
    let audited = audited_rejections(g, &run.session());
    assert_eq!(listed, audited, "the manifest and the audit log disagree");
    for path in written {
        if files.iter().any(|f| f == path) {
            continue;
        }
        let full = format!("output/{path}");
        let covered = listed.iter().any(|(p, reason)| {
            !reason.is_empty() && (*p == full || (p.ends_with('/') && full.starts_with(p.as_str())))
        });
        assert!(
            covered,
            "{path} was neither staged nor listed as rejected: files {files:?}, rejected {listed:?}"
        );
    }
    assert_eq!(
        run.json["rejected"].as_u64(),
        Some(listed.len() as u64),
        "{}",
        run.json
    );
}

/// Attacks session/stream.rs `stream` (the kill of a refused archive): 257 small files (one over the
/// shipped cap) and then 30 MB more. The host refuses the archive at the 257th file while the
/// init still has 30 MB to send; on engine 20.10 `docker kill` returns only once the attach
/// streams are drained, so a host that stopped reading stalled the kill for the client's
/// 120 s timeout and blamed itself (`host_failure`, retried by `batch --resume`).
#[test]
fn too_many_files_and_thirty_megabytes_are_rejected_in_seconds_and_not_blamed_on_the_host() {
    let g = Golem::new();
    let max_files = untrusted().output.max_files;
    let over = (max_files + 1).to_string();
    let run = timed(&g, &["flood", &over, "30000000"]);
    assert_refused(
        &g,
        &run,
        &format!("archive has more than {max_files} files"),
    );
    g.assert_clean();
}

/// The same through a sparse file: one hole of 1 GiB costs the tmpfs nothing, but its archive
/// carries every byte, past the raw archive cap. Refused, in seconds, as the worker's doing.
#[test]
fn a_sparse_gigabyte_is_rejected_in_seconds_and_not_blamed_on_the_host() {
    let g = Golem::new();
    let run = timed(&g, &["sparse", "1073741824"]);
    assert_refused(&g, &run, "archive stream exceeds");
    let sparse = worker_report(&g.home, &run.session(), "sparse");
    assert_eq!(sparse["steps"]["sparse"]["ok"], true, "{sparse}");
    g.assert_clean();
}

/// A batch holding a refused archive: that document is `rejected`, not retryable, and
/// `batch --resume` does not run it again as if the host had failed it.
#[test]
fn a_batch_marks_a_refused_archive_rejected_and_resume_does_not_retry_it() {
    let g = Golem::new();
    let over = untrusted().output.max_files + 1;
    g.file("docs/flood.txt", format!("flood {over} 30000000"));
    g.file("docs/good.txt", "exit 0");
    let cmd = g.cmd([
        "batch",
        "--json",
        "--jobs",
        "2",
        "--image",
        hostile_image(),
        "docs",
        "--",
        "from-input",
    ]);
    let out = run_bounded(cmd, HANG_GUARD);
    let result: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    let doc = |result: &Value, name: &str| -> Value {
        result["documents"]
            .as_array()
            .expect("documents")
            .iter()
            .find(|d| d["folder"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} missing: {result}"))
    };
    assert_eq!(doc(&result, "flood.txt")["status"], "rejected", "{result}");
    assert_eq!(doc(&result, "good.txt")["status"], "staged", "{result}");
    assert_eq!(result["summary"]["retryable"], 0, "{result}");
    let session = doc(&result, "flood.txt")["session"]
        .as_str()
        .expect("session")
        .to_string();
    assert_eq!(output_rejections(&g, &session).len(), 1);

    let (before, _) = g.json(["sessions", "--json"]);
    let id = result["batch"].as_str().expect("batch id");
    let (resumed, _) = g.json(["batch", "--json", "--resume", id]);
    assert_eq!(
        doc(&resumed, "flood.txt")["status"],
        "rejected",
        "{resumed}"
    );
    assert_eq!(doc(&resumed, "flood.txt")["session"], session.as_str());
    let (after, _) = g.json(["sessions", "--json"]);
    assert_eq!(
        before.as_array().map(Vec::len),
        after.as_array().map(Vec::len),
        "resume ran a document again"
    );
    g.assert_clean();
}

/// Attacks worker-image `init` (`write_archive`): a mode-000 file and a mode-000 directory in
/// /output. The init could not read them and only said so in the worker's logs, so the session
/// was staged with `rejected: 0`. Now each is a listed rejection with its reason, in the
/// manifest and the audit log, and the rest is staged.
#[test]
fn unreadable_files_and_directories_are_listed_rejections_not_silently_dropped() {
    let g = Golem::new();
    let run = hostile(&g, &[], &["unreadable"]);
    run.assert_status("staged", 0);
    assert_eq!(run.json["host_failure"], false);
    let made = worker_report(&g.home, &run.session(), "unreadable");
    assert_eq!(made["steps"]["unreadable"]["file"], Value::Null, "{made}");
    assert_eq!(made["steps"]["unreadable"]["dir"], Value::Null, "{made}");
    assert_nothing_lost_silently(&g, &run, &["ok.txt", "secret.txt", "closed/inside.txt"]);
    let listed = manifest_rejections(&manifest(&g, &run.staged()));
    assert!(
        listed.iter().any(|(p, _)| p == "output/secret.txt"),
        "{listed:?}"
    );
    g.assert_clean();
}

/// Attacks worker-image `init` through its resource limits: the worker shares the init's uid,
/// so it may lower PID 1's RLIMIT_NOFILE until the init can open nothing. That staged 0 files
/// with exit 0. Now what the init could not archive is listed (or the session is the worker's
/// failure), never a silent success, and never the host's failure.
#[test]
fn a_worker_that_starves_the_init_of_descriptors_cannot_cause_a_silent_success() {
    let g = Golem::new();
    // 0: the init can open nothing at all; 3: fewer than the init holds open while it archives.
    for limit in ["0", "3"] {
        let run = hostile(&g, &[], &["prlimit-init", limit]);
        assert_eq!(run.json["host_failure"], false, "{}", run.json);
        let made = worker_report(&g.home, &run.session(), "prlimit-init");
        assert_eq!(made["steps"]["prlimit"]["ok"], true, "{made}");
        if run.json["status"] == "staged" {
            assert_nothing_lost_silently(&g, &run, &["ok.txt", "a.txt", "b.txt"]);
        } else {
            assert_ne!(run.code, 0, "{}", run.json);
            assert!(run.json["staged"].is_null());
        }
        if limit == "0" {
            assert_eq!(run.json["files"], 0, "{}", run.json);
            assert!(run.json["rejected"].as_u64() > Some(0), "{}", run.json);
        } else {
            // The init frees its stdin, so one descriptor is enough to archive everything.
            assert_eq!(run.json["files"], 3, "{}", run.json);
        }
    }
    g.assert_clean();
}

/// The hostile image again, with `/output` a symbolic link to `/data`, built once per test
/// binary without pulling (`FROM` the local hostile image, a tar context holding the link).
fn image_with_a_symlinked_output() -> &'static str {
    const TAG: &str = "golem-test-hostile-symlinked-output:latest";
    static ONCE: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        let context = tempfile::tempdir().expect("context");
        let root = context.path().join("root");
        std::fs::create_dir_all(root.join("data")).expect("data dir");
        std::os::unix::fs::symlink("/data", root.join("output")).expect("symlink");
        std::fs::write(
            context.path().join("Dockerfile"),
            format!("FROM {}\nCOPY root/ /\n", hostile_image()),
        )
        .expect("Dockerfile");
        docker_build(TAG, context.path());
    });
    TAG
}

/// An image whose `/output` is a symbolic link: the engine mounts the output tmpfs where the
/// link points, and the init found no directory at `/output`, wrote no archive and the session
/// failed as the host's fault. It is the image's doing: the output is rejected (the archive's
/// root is not a directory), audited, and not retried as a host failure.
#[test]
fn an_image_whose_output_is_a_symlink_is_rejected_not_a_host_failure() {
    let g = Golem::new();
    let image = image_with_a_symlinked_output();
    let out = run_bounded(
        g.cmd(["run", "--json", "--image", image, "--", "exit", "0"]),
        HANG_GUARD,
    );
    let run = parse_run(&out);
    assert_refused(&g, &run, "does not start with root directory");
    assert!(Path::new(&g.home).is_dir());
    g.assert_clean();
}

/// The same with only the soft limit lowered: the init takes its limit back before it archives,
/// and everything the worker wrote is staged.
#[test]
fn a_worker_that_lowers_only_the_inits_soft_descriptor_limit_loses_nothing() {
    let g = Golem::new();
    let run = hostile(&g, &[], &["prlimit-init", "3", "soft"]);
    run.assert_status("staged", 0);
    let made = worker_report(&g.home, &run.session(), "prlimit-init");
    assert_eq!(made["steps"]["prlimit"]["ok"], true, "{made}");
    assert_nothing_lost_silently(&g, &run, &["ok.txt", "a.txt", "b.txt"]);
    assert_eq!(run.json["files"], 3, "{}", run.json);
    assert_eq!(run.json["rejected"], 0, "{}", run.json);
    g.assert_clean();
}
