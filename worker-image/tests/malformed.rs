//! Malformed, truncated and hostile inputs: each must end as an error or a
//! warning for that input only, the good inputs' reports must be intact,
//! and the exit status must say that some input failed.

// All of this crate is test code: `cfg(test)` says so to clippy, whose allow-unwrap/expect-in-tests
// (clippy.toml) otherwise covers only `#[test]` functions, not the helpers they share.
#![cfg(test)]

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use golem_worker::sandbox::Limits;
use golem_worker::{Mode, Options};

#[test]
fn malformed_corpus_fails_per_input_and_keeps_the_good_reports() {
    let input = tempfile::tempdir().expect("input");
    let output = tempfile::tempdir().expect("output");
    write_malformed(input.path());
    write(input.path(), "good/budget.pdf", &good_pdf());
    write(input.path(), "good/festival.html", GOOD_HTML.as_bytes());
    write(input.path(), "good/contract.docx", &docx(false));
    let started = Instant::now();
    let out = run(&["report"], input.path(), output.path());
    let elapsed = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(elapsed < Duration::from_secs(120), "took {elapsed:?}");
    let o = output.path();
    let index = read_json(&o.join("index.json"));
    assert_eq!(index["complete"], true);

    // The good ones are intact.
    for stem in [
        "good/budget.pdf",
        "good/festival.html",
        "good/contract.docx",
    ] {
        assert_eq!(entry(&index, stem)["status"], "ok", "{stem}");
        let r = read_json(&o.join(format!("{stem}.json")));
        assert_eq!(r["status"], "ok");
        assert!(r["counts"]["words"].as_u64().unwrap_or(0) > 10, "{stem}");
    }
    let pdf = read_json(&o.join("good/budget.pdf.json"));
    assert!(pdf["text"].as_str().unwrap_or("").contains("ten percent"));

    // Truncated PDF: an error entry with the parser's message.
    let t = entry(&index, "bad/truncated.pdf");
    assert_eq!(t["status"], "error");
    assert_eq!(t["type"], "pdf");
    assert!(t["error"].as_str().unwrap_or("").contains("PDF"), "{t}");
    let tr = read_json(&o.join("bad/truncated.pdf.json"));
    assert_eq!(tr["status"], "error");
    assert_eq!(tr["size"], good_pdf().len() / 3);
    assert!(read(&o.join("bad/truncated.pdf.md")).contains("**Error:**"));

    // Random bytes named .pdf: binary by content, with the disguise flagged.
    let r = read_json(&o.join("bad/random.pdf.json"));
    assert_eq!(r["type"], "binary");
    assert!(has_warning(&r, "type_mismatch", ".pdf"), "{r:#}");
    assert_eq!(r["text"], "");

    // 100k nested divs: analysed, text found, depth limit reported.
    let d = read_json(&o.join("bad/deep.html.json"));
    assert_eq!(d["status"], "ok");
    assert_eq!(d["details"]["max_depth"], 100_002);
    assert!(d["text"].as_str().unwrap_or("").contains("deep inside"));
    assert!(has_warning(&d, "limit", "nested 100002 levels"), "{d:#}");

    // The zip bomb: read only up to the cap, then an error.
    let b = entry(&index, "bad/bomb.docx");
    assert_eq!(b["status"], "error");
    assert_eq!(b["type"], "docx");
    let br = read_json(&o.join("bad/bomb.docx.json"));
    assert!(has_warning(&br, "limit", "likely zip bomb"), "{br:#}");
    assert!(br["error"]
        .as_str()
        .unwrap_or("")
        .contains("only partly analysed"));

    // 10k nested JSON arrays: not parsed recursively, a limit warning.
    let j = read_json(&o.join("bad/deep.json.json"));
    assert_eq!(j["type"], "json");
    assert_eq!(j["details"]["max_depth"], 10_000);
    assert!(has_warning(&j, "limit", "10000 levels"), "{j:#}");

    // Arrays nested 200k deep in a PDF object: no crash of the worker.
    let n = entry(&index, "bad/nested.pdf");
    assert!(n["status"] == "ok" || n["status"] == "error", "{n}");

    // A PDF content stream that inflates to 1 GiB: the parser's allocation
    // fails inside the child's address-space limit; only this input fails.
    let f = entry(&index, "bad/flatebomb.pdf");
    assert_eq!(f["status"], "error");
    assert!(
        f["error"]
            .as_str()
            .unwrap_or("")
            .contains("ran out of memory"),
        "{f}"
    );
    assert!(read(&o.join("bad/flatebomb.pdf.md")).contains("**Error:** analysis ran out of memory"));

    let md = read(&o.join("index.md"));
    assert!(md.contains("## Errors"), "{md}");
    assert!(
        md.contains("bad/bomb.docx: word/document.xml decompresses"),
        "{md}"
    );
}

fn script(dir: &Path, body: &str) -> std::path::PathBuf {
    let path = dir.join("fake-worker.sh");
    fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

fn options(input: &Path, output: &Path, exe: &Path) -> Options {
    Options {
        mode: Mode::Report,
        input: input.to_path_buf(),
        output: output.to_path_buf(),
        task: input.join("none"),
        exe: exe.to_path_buf(),
        limits: Limits {
            timeout: Duration::from_secs(2),
            ..Limits::default()
        },
        ..Options::default()
    }
}

/// Each way a child can fail becomes an error entry, and the run goes on.
#[test]
fn a_failing_child_is_an_error_entry_never_a_lost_run() {
    let cases = [
        ("echo 'not json at all'", "unreadable output"),
        ("kill -9 $$", "killed (SIGKILL"),
        ("kill -SEGV $$", "crashed (SIGSEGV)"),
        (
            "echo 'memory allocation of 99999 bytes failed' >&2; kill -ABRT $$",
            "ran out of memory",
        ),
        ("echo boom >&2; exit 3", "exited with status 3: boom"),
        ("exec sleep 30", "longer than 2 s"),
        ("head -c 20000000 /dev/zero", "wrote more than"),
    ];
    for (body, expected) in cases {
        let tmp = tempfile::tempdir().expect("tmp");
        let input = tmp.path().join("in");
        let output = tmp.path().join("out");
        fs::create_dir(&input).expect("mkdir");
        fs::create_dir(&output).expect("mkdir");
        write(&input, "a.txt", b"hello\n");
        write(&input, "b.txt", b"world\n");
        let exe = script(tmp.path(), body);
        let started = Instant::now();
        let code = golem_worker::run(&options(&input, &output, &exe));
        assert!(started.elapsed() < Duration::from_secs(20), "{body}");
        assert_eq!(code, 1, "{body}");
        let index = read_json(&output.join("index.json"));
        for p in ["a.txt", "b.txt"] {
            let e = entry(&index, p);
            assert_eq!(e["status"], "error", "{body}");
            assert!(
                e["error"].as_str().unwrap_or("").contains(expected),
                "{body}: {e}"
            );
            assert_eq!(
                e["sha256"].as_str().map(str::len),
                Some(64),
                "hashed by the parent"
            );
        }
    }
}

#[test]
fn memory_and_time_limits_contain_one_input() {
    let input = tempfile::tempdir().expect("input");
    let output = tempfile::tempdir().expect("output");
    // 40 MiB of text cannot even be read under a 32 MiB address space.
    write(input.path(), "huge.txt", &vec![b'a'; 40 << 20]);
    write(input.path(), "small.md", GOOD_MD.as_bytes());
    let out = run(&["--per-input-memory", "32m"], input.path(), output.path());
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let index = read_json(&output.path().join("index.json"));
    let huge = entry(&index, "huge.txt");
    assert_eq!(huge["status"], "error");
    assert!(
        huge["error"]
            .as_str()
            .unwrap_or("")
            .contains("out of memory"),
        "{huge}"
    );
    assert_eq!(entry(&index, "small.md")["status"], "ok");

    // A large text takes longer than 100 ms to analyse in a debug build.
    let output2 = tempfile::tempdir().expect("output");
    let out = run(
        &["--per-input-timeout", "100ms"],
        input.path(),
        output2.path(),
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let index = read_json(&output2.path().join("index.json"));
    let huge = entry(&index, "huge.txt");
    assert!(
        huge["error"]
            .as_str()
            .unwrap_or("")
            .contains("longer than 0.1 s"),
        "{huge}"
    );
}

#[test]
fn output_budget_leaves_text_out_then_reports() {
    let input = tempfile::tempdir().expect("input");
    let output = tempfile::tempdir().expect("output");
    let words = "lorem ipsum dolor sit amet ".repeat(20_000);
    for i in 0..4 {
        write(input.path(), &format!("t{i}.txt"), words.as_bytes());
    }
    let out = run(&["--max-output-bytes", "400k"], input.path(), output.path());
    let index = read_json(&output.path().join("index.json"));
    let total: u64 = walk_sizes(output.path());
    assert!(total <= 400 * 1024, "wrote {total} bytes");
    let statuses: Vec<String> = (0..4)
        .map(|i| {
            entry(&index, &format!("t{i}.txt"))["status"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_eq!(statuses[0], "ok");
    let first = read_json(&output.path().join("t0.txt.json"));
    assert_eq!(first["text"].as_str().map(str::len), Some(256 * 1024));
    assert!(
        (0..4).any(|i| output.path().join(format!("t{i}.txt.json")).exists()
            && read_json(&output.path().join(format!("t{i}.txt.json")))["text_omitted"]
                .is_string()),
        "some report left its text out"
    );
    assert_eq!(
        out.status.code(),
        Some(if statuses.iter().all(|s| s == "ok") {
            0
        } else {
            1
        })
    );
}

fn walk_sizes(dir: &Path) -> u64 {
    let mut total = 0;
    for e in fs::read_dir(dir).expect("read_dir").flatten() {
        let m = e.metadata().expect("meta");
        total += if m.is_dir() {
            walk_sizes(&e.path())
        } else {
            m.len()
        };
    }
    total
}
