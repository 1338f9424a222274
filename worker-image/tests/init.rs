//! Runs the real binary as `golem-worker init` (not as PID 1: it then kills
//! only the worker's process group): exit codes, where the worker's output
//! goes, the archive on stdout, the deadline and leftover processes.

// All of this crate is test code: `cfg(test)` says so to clippy, whose allow-unwrap/expect-in-tests
// (clippy.toml) otherwise covers only `#[test]` functions, not the helpers they share.
#![cfg(test)]

use std::fs;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_golem-worker");

/// Runs `golem-worker init [extra] --output DIR -- program...`; returns the
/// output and how long it took.
fn init(extra: &[&str], dir: &Path, program: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let out = Command::new(BIN)
        .arg("init")
        .args(extra)
        .arg("--output")
        .arg(dir)
        .arg("--")
        .args(program)
        .stdin(Stdio::null())
        .output()
        .expect("run golem-worker init");
    (out, start.elapsed())
}

fn output_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("output");
    fs::create_dir(&dir).expect("mkdir");
    (tmp, dir)
}

/// The (name, contents) of every entry; panics unless the stream is a
/// complete archive with the end-of-archive marker.
fn entries(stdout: &[u8]) -> Vec<(String, Vec<u8>)> {
    assert!(has_end_marker(stdout), "no end-of-archive marker");
    let mut archive = tar::Archive::new(stdout);
    let mut seen = Vec::new();
    for entry in archive.entries().expect("entries") {
        let mut entry = entry.expect("entry");
        let mut data = Vec::new();
        entry.read_to_end(&mut data).expect("contents");
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        seen.push((name, data));
    }
    seen
}

fn has_end_marker(stdout: &[u8]) -> bool {
    stdout.len() >= 1024
        && stdout.len() % 512 == 0
        && stdout[stdout.len() - 1024..].iter().all(|&b| b == 0)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn worker_output_goes_to_stderr_and_the_archive_to_stdout() {
    let (_tmp, dir) = output_dir();
    let script = "echo to-stdout; echo to-stderr >&2; echo data > \"$1/a\"; exit 3";
    let dir_arg = dir.to_str().expect("utf-8 tempdir");
    let (out, _) = init(&[], &dir, &["/bin/sh", "-c", script, "sh", dir_arg]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("to-stdout"), "{err}");
    assert!(err.contains("to-stderr"), "{err}");
    assert!(!contains(&out.stdout, b"to-stdout"));
    assert!(!contains(&out.stdout, b"to-stderr"));
    assert_eq!(
        entries(&out.stdout),
        vec![
            ("output/".to_string(), Vec::new()),
            ("output/a".to_string(), b"data\n".to_vec()),
        ]
    );
}

#[test]
fn the_program_is_found_through_path() {
    let (_tmp, dir) = output_dir();
    let (out, _) = init(&[], &dir, &["sh", "-c", "exit 0"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(entries(&out.stdout).len(), 1);
}

#[test]
fn a_worker_killed_by_a_signal_gives_128_plus_the_signal() {
    let (_tmp, dir) = output_dir();
    let (out, _) = init(&[], &dir, &["/bin/sh", "-c", "kill -9 $$"]);
    assert_eq!(out.status.code(), Some(137), "{}", stderr(&out));
    assert_eq!(
        entries(&out.stdout),
        vec![("output/".to_string(), Vec::new())]
    );
}

#[test]
fn a_missing_program_gives_127_and_still_an_archive() {
    let (_tmp, dir) = output_dir();
    fs::write(dir.join("left"), b"over").expect("write");
    for program in ["/nonexistent/worker", "golem-no-such-program"] {
        let (out, _) = init(&[], &dir, &[program, "arg"]);
        assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("golem-init: cannot run {program}: ")),
            "{err}"
        );
        assert_eq!(
            entries(&out.stdout),
            vec![
                ("output/".to_string(), Vec::new()),
                ("output/left".to_string(), b"over".to_vec()),
            ]
        );
    }
}

#[test]
fn the_deadline_kills_the_worker_and_writes_no_archive() {
    let (_tmp, dir) = output_dir();
    let (out, took) = init(&["--deadline", "1"], &dir, &["/bin/sh", "-c", "sleep 30"]);
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(!has_end_marker(&out.stdout));
    assert!(out.stdout.is_empty());
    let err = stderr(&out);
    assert!(
        err.contains("golem-init: deadline of 1 s reached; killing the worker"),
        "{err}"
    );
}

#[test]
fn leftover_processes_are_killed() {
    let (_tmp, dir) = output_dir();
    let dir_arg = dir.to_str().expect("utf-8 tempdir");
    // The background `sleep` keeps the stderr pipe open: `output()` returns
    // promptly only if init killed it.
    let script = "sleep 30 & echo x > \"$1/a\"";
    let (out, took) = init(&[], &dir, &["/bin/sh", "-c", script, "sh", dir_arg]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert_eq!(
        entries(&out.stdout),
        vec![
            ("output/".to_string(), Vec::new()),
            ("output/a".to_string(), b"x\n".to_vec()),
        ]
    );
}

#[test]
fn a_closed_stdout_gives_125() {
    let (_tmp, dir) = output_dir();
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = Command::new(BIN)
        .arg("init")
        .arg("--output")
        .arg(&dir)
        .args(["--", "/bin/sh", "-c", "exit 0"])
        .stdin(Stdio::null())
        .stdout(writer)
        .output()
        .expect("run golem-worker init");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("golem-init: writing the output archive failed: "),
        "{err}"
    );
}

#[test]
fn a_missing_output_directory_gives_125() {
    let (_tmp, dir) = output_dir();
    let (out, _) = init(&[], &dir.join("nope"), &["/bin/sh", "-c", "exit 0"]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_usage_is_64() {
    for args in [
        &["init"][..],
        &["init", "/bin/true"],
        &["init", "--deadline", "0", "--", "/bin/true"],
        &["init", "--"],
    ] {
        let out = Command::new(BIN).args(args).output().expect("run");
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn with_pid1_init_refuses_to_run_anything_unless_it_is_pid_1() {
    let (_tmp, dir) = output_dir();
    let marker = dir.join("ran");
    let script = format!("touch '{}'", marker.display());
    let (out, _) = init(&["--pid1"], &dir, &["/bin/sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    assert!(stderr(&out).contains("not as the container's PID 1"));
    assert!(out.stdout.is_empty(), "no archive without the guarantee");
    assert!(!marker.exists(), "the worker must not have been started");
}

/// The mask of signals a process catches, from `/proc/PID/status`.
fn caught_signals(status: &str) -> u64 {
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .expect("SigCgt line");
    u64::from_str_radix(line.trim(), 16).expect("hex mask")
}

#[test]
fn init_catches_no_signal_so_the_kernel_drops_the_workers_signals_to_pid_1() {
    // As a namespace's PID 1, only a signal with a handler reaches init from
    // inside; std's own SIGSEGV/SIGBUS handlers must be gone and SIGCHLD not
    // ignored. The worker reads its parent's (init's) status.
    let (_tmp, dir) = output_dir();
    let dir_arg = dir.to_str().expect("utf-8 tempdir");
    let script = "cat /proc/$PPID/status > \"$1/status\"";
    let (out, _) = init(&[], &dir, &["/bin/sh", "-c", script, "sh", dir_arg]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let found = entries(&out.stdout);
    let status = found
        .iter()
        .find(|(name, _)| name == "output/status")
        .map(|(_, data)| String::from_utf8_lossy(data).into_owned())
        .expect("status file in the archive");
    // Signals 1 to 31; glibc's own handler for its internal real-time signal
    // (33, SIGSETXID) ignores any signal not sent by the process itself, and
    // the kernel refuses to let another process forge that.
    let standard = (1u64 << 31) - 1;
    assert_eq!(caught_signals(&status) & standard, 0, "{status}");
    let ignored = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .expect("SigIgn line");
    let sigchld = 1u64 << (SIGCHLD - 1);
    assert_eq!(
        ignored & sigchld,
        0,
        "SIGCHLD must not be ignored: {status}"
    );
}

/// SIGCHLD's number on Linux (the same on every architecture this project builds for).
const SIGCHLD: u32 = 17;
