//! Runs the real `golem-worker` binary: exit codes, flags, the walk (links,
//! special files, hostile names), the output layout and its safety, and the
//! unreadable-input path (which needs a non-root process: root reads any
//! file).

// All of this crate is test code: `cfg(test)` says so to clippy, whose allow-unwrap/expect-in-tests
// (clippy.toml) otherwise covers only `#[test]` functions, not the helpers they share.
#![cfg(test)]

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use serde_json::{json, Value};

const NOBODY: u32 = 65534;

fn running_as_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Runs the worker as an unprivileged user (dropping from root to 65534 when
/// needed) from a copy of the binary the unprivileged user can execute.
fn run_unprivileged(scratch: &Path, args: &[&str]) -> Output {
    let bin: PathBuf = scratch.join("golem-worker");
    fs::copy(BIN, &bin).expect("copy binary");
    chmod(&bin, 0o755);
    let mut cmd = Command::new(&bin);
    cmd.args(args);
    if running_as_root() {
        cmd.uid(NOBODY).gid(NOBODY);
    }
    // Another test thread forking while the copy was open for writing makes
    // exec fail with ETXTBSY for a moment; retry.
    for _ in 0..50 {
        match cmd.output() {
            Err(e) if e.raw_os_error() == Some(26) => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other.expect("run golem-worker"),
        }
    }
    cmd.output().expect("run golem-worker")
}

fn report(input: &Path) -> (i32, Value, String, tempfile::TempDir) {
    let output = tempfile::tempdir().expect("output");
    let out = run(&["report"], input, output.path());
    let index = read_json(&output.path().join("index.json"));
    let md = read(&output.path().join("index.md"));
    (out.status.code().unwrap_or(-1), index, md, output)
}

#[test]
fn unreadable_file_gives_error_entry_and_exit_1() {
    let scratch = tempfile::tempdir().expect("tempdir");
    chmod(scratch.path(), 0o755);
    let input = scratch.path().join("input");
    let output = scratch.path().join("output");
    fs::create_dir(&input).expect("mkdir input");
    fs::create_dir(&output).expect("mkdir output");
    chmod(&output, 0o777);
    fs::write(input.join("a-readable.txt"), b"fine\n").expect("write");
    fs::write(input.join("b-locked.txt"), b"secret\n").expect("write");
    chmod(&input.join("b-locked.txt"), 0o000);
    fs::write(input.join("c-readable.txt"), b"also fine\n").expect("write");

    let out = run_unprivileged(
        scratch.path(),
        &[
            "report",
            "--input",
            input.to_str().expect("utf8"),
            "--output",
            output.to_str().expect("utf8"),
            "--task",
            "/nonexistent/instructions.md",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let index = read_json(&output.join("index.json"));
    assert_eq!(index["errors"], 1);
    let inputs = index["inputs"].as_array().expect("inputs");
    assert_eq!(inputs.len(), 3);
    assert_eq!(inputs[0]["status"], "ok");
    assert_eq!(inputs[1]["path"], "b-locked.txt");
    assert_eq!(inputs[1]["size"], 7);
    assert_eq!(inputs[1]["sha256"], Value::Null);
    assert!(inputs[1]["error"]
        .as_str()
        .is_some_and(|e| e.contains("Permission denied")));
    let c = read_json(&output.join("c-readable.txt.json"));
    assert_eq!(c["text"], "also fine");
    let md = read(&output.join("index.md"));
    assert!(
        md.contains("- b-locked.txt: cannot read: Permission denied"),
        "{md}"
    );
    assert!(!md.contains("secret"));
    let locked = read(&output.join("b-locked.txt.md"));
    assert!(locked.contains("**Error:** cannot read"), "{locked}");
}

#[test]
fn usage_version_and_bad_arguments() {
    let help = Command::new(BIN).arg("--help").output().expect("run");
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).contains("usage: golem-worker"));

    let version = Command::new(BIN).arg("version").output().expect("run");
    assert_eq!(version.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("golem-worker {}", env!("CARGO_PKG_VERSION"))
    );

    for bad in [
        &["frobnicate"][..],
        &["report", "--input"],
        &["hold", "x"],
        &["report", "--bogus", "x"],
        &["text", "--jobs", "0"],
        &["report", "--per-input-timeout", "forever"],
        &["report", "--per-input-memory", "1k"],
        &["report", "--max-output-bytes", "10"],
    ] {
        let out = Command::new(BIN).args(bad).output().expect("run");
        assert_eq!(out.status.code(), Some(64), "{bad:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("usage:"));
    }
}

#[test]
fn options_without_subcommand_mean_report() {
    let input = tempfile::tempdir().expect("input");
    let output = tempfile::tempdir().expect("output");
    fs::write(input.path().join("x"), b"x").expect("write");
    let out = Command::new(BIN)
        .arg("--input")
        .arg(input.path())
        .arg("--output")
        .arg(output.path())
        .arg("--jobs")
        .arg("2")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    for f in ["index.md", "index.json", "x.md", "x.json"] {
        assert!(output.path().join(f).is_file(), "{f}");
    }
}

#[test]
fn symlinks_and_special_files_are_skipped_not_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("outside");
    write(outside.path(), "secret.txt", b"TOP SECRET\n");
    write(dir.path(), "real.txt", b"real\n");
    symlink(
        outside.path().join("secret.txt"),
        dir.path().join("link.txt"),
    )
    .expect("symlink");
    symlink(outside.path(), dir.path().join("linkdir")).expect("dir symlink");
    symlink("/nonexistent", dir.path().join("dangling")).expect("dangling symlink");
    let sock = std::os::unix::net::UnixListener::bind(dir.path().join("sock")).expect("socket");
    let (code, index, md, out) = report(dir.path());
    drop(sock);
    assert_eq!(code, 0);
    let inputs = index["inputs"].as_array().expect("inputs");
    assert_eq!(inputs.len(), 1, "{index}");
    assert_eq!(inputs[0]["path"], "real.txt");
    let skipped: Vec<&str> = index["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .filter_map(|s| s["path"].as_str())
        .collect();
    assert_eq!(skipped, ["dangling", "link.txt", "linkdir", "sock"]);
    assert!(md.contains("## Skipped"));
    assert!(!out.path().join("link.txt.md").exists());
    for f in walk_files(out.path()) {
        assert!(!read(&f).contains("TOP SECRET"), "{}", f.display());
    }
}

fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        if fs::symlink_metadata(&p).expect("meta").is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn nested_directories_are_walked_in_sorted_order_and_mirrored() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "b.txt", b"b\n");
    write(dir.path(), "a/z.txt", b"z\n");
    write(dir.path(), "a/deep/er/x.txt", b"x\n");
    write(dir.path(), "a.txt", b"a\n");
    fs::create_dir(dir.path().join("emptydir")).expect("mkdir");
    let (code, index, _, out) = report(dir.path());
    assert_eq!(code, 0);
    let paths: Vec<&str> = index["inputs"]
        .as_array()
        .expect("inputs")
        .iter()
        .filter_map(|e| e["path"].as_str())
        .collect();
    assert_eq!(paths, ["a/deep/er/x.txt", "a/z.txt", "a.txt", "b.txt"]);
    assert!(out.path().join("a/deep/er/x.txt.md").is_file());
    assert!(out.path().join("a/deep/er/x.txt.json").is_file());
    assert!(!out.path().join("emptydir").exists());
}

#[test]
fn hostile_file_names_are_escaped_and_outputs_renamed_safely() {
    let dir = tempfile::tempdir().expect("tempdir");
    let name = OsStr::from_bytes(b"bad\xff|\x1b[2J\n[x](javascript:e)");
    fs::write(dir.path().join(name), b"x\n").expect("write");
    // Inputs whose reports would clash with the index or with each other.
    write(dir.path(), "index", b"i\n");
    write(dir.path(), "A.txt", b"upper\n");
    write(dir.path(), "a.txt", b"lower\n");
    write(dir.path(), ".git/config", b"[core]\n");
    let (code, index, md, out) = report(dir.path());
    assert_eq!(code, 0, "{index:#}");
    let expected = "bad\\xff|\\u{1b}[2J\\u{a}[x](javascript:e)";
    let e = entry(&index, expected);
    assert_eq!(
        e["files"],
        json!([
            "bad_|_[2J_[x](javascript:e).md",
            "bad_|_[2J_[x](javascript:e).json"
        ])
    );
    assert!(md.contains("| bad\\\\xff\\|\\\\u\\{1b\\}\\[2J"), "{md}");
    assert!(
        md.contains("(./bad_%7C_%5B2J_%5Bx%5D%28javascript%3Ae%29.md)"),
        "{md}"
    );
    assert!(!md.contains("[x](javascript"));
    assert_eq!(
        entry(&index, "index")["files"],
        json!(["index~2.md", "index~2.json"])
    );
    assert_eq!(entry(&index, "a.txt")["files"][0], "a.txt~2.md");
    assert_eq!(entry(&index, ".git/config")["files"][0], "_.git/config.md");
    // The index itself was not overwritten by the input named "index".
    assert_eq!(index["counts"]["inputs"], 5);
    for f in walk_files(out.path()) {
        let rel = f.strip_prefix(out.path()).expect("prefix");
        let s = rel.to_str().expect("utf8 output name");
        assert!(!s.chars().any(|c| c.is_control()), "{s:?}");
    }
}

#[test]
fn missing_input_dir_is_an_error_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, index, md, _out) = report(&dir.path().join("missing"));
    assert_eq!(code, 1);
    assert_eq!(index["errors"], 1);
    assert_eq!(index["inputs"][0]["path"], ".");
    assert!(index["inputs"][0]["error"]
        .as_str()
        .is_some_and(|e| e.contains("cannot list input directory")));
    assert!(md.contains("## Errors"));
}

#[test]
fn task_first_line_heads_the_index() {
    let input = tempfile::tempdir().expect("input");
    let task = tempfile::tempdir().expect("task");
    let out = tempfile::tempdir().expect("out");
    let mut instructions = b"Summarise the *inputs*\x1b[1m\r\nsecond line\n".to_vec();
    instructions.extend(std::iter::repeat_n(b'z', 200_000));
    write(task.path(), "instructions.md", &instructions);
    let status = Command::new(BIN)
        .arg("--input")
        .arg(input.path())
        .arg("--output")
        .arg(out.path())
        .arg("--task")
        .arg(task.path().join("instructions.md"))
        .status()
        .expect("run");
    assert_eq!(status.code(), Some(0));
    let md = read(&out.path().join("index.md"));
    assert!(
        md.contains("Task: Summarise the \\*inputs\\*\\\\u\\{1b\\}\\[1m\n"),
        "{md}"
    );
    let json = read_json(&out.path().join("index.json"));
    assert_eq!(json["task"], "Summarise the *inputs*\\u{1b}[1m");
    assert!(md.contains("No input files."));
}

#[test]
fn unwritable_output_is_exit_2() {
    let input = tempfile::tempdir().expect("input");
    write(input.path(), "a.txt", b"a\n");
    let out = run(
        &["report"],
        input.path(),
        &input.path().join("a.txt/not-a-dir"),
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn planted_symlinks_in_output_are_replaced_not_followed() {
    let input = tempfile::tempdir().expect("input");
    let out = tempfile::tempdir().expect("out");
    let victim = tempfile::tempdir().expect("victim");
    write(input.path(), "a.txt", b"hello\n");
    write(input.path(), "sub/b.txt", b"hello\n");
    write(victim.path(), "v", b"keep\n");
    symlink(victim.path().join("v"), out.path().join("index.md")).expect("symlink");
    symlink(victim.path().join("v"), out.path().join("a.txt.md")).expect("symlink");
    symlink(victim.path(), out.path().join("sub")).expect("dir symlink");
    let result = run(&["report"], input.path(), out.path());
    // The planted directory link makes sub/b.txt's report unwritable.
    assert_eq!(result.status.code(), Some(2), "{result:?}");
    assert_eq!(read(&victim.path().join("v")), "keep\n");
    assert_eq!(fs::read_dir(victim.path()).expect("ls").count(), 1);
    for f in ["index.md", "a.txt.md"] {
        let meta = fs::symlink_metadata(out.path().join(f)).expect("meta");
        assert!(meta.file_type().is_file(), "{f}");
    }
    let index = read_json(&out.path().join("index.json"));
    assert_eq!(entry(&index, "sub/b.txt")["status"], "error");
}

#[test]
fn max_inputs_caps_processing() {
    let input = tempfile::tempdir().expect("input");
    for i in 0..5 {
        write(input.path(), &format!("f{i}.txt"), b"x\n");
    }
    let output = tempfile::tempdir().expect("output");
    let out = run(
        &["report", "--max-inputs", "3"],
        input.path(),
        output.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    let index = read_json(&output.path().join("index.json"));
    assert_eq!(entry(&index, "f2.txt")["status"], "ok");
    let f3 = entry(&index, "f3.txt");
    assert_eq!(f3["status"], "error");
    assert!(f3["error"].as_str().unwrap_or("").contains("--max-inputs"));
    assert!(!output.path().join("f3.txt.md").exists());
}
