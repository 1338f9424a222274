//! Runs the real `golem-worker` binary, to check its exit codes and the
//! unreadable-input path (which needs a non-root process: root reads any file).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_golem-worker");
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
    cmd.output().expect("run golem-worker")
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
    let json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(output.join("report.json")).expect("json"))
            .expect("valid json");
    assert_eq!(json["errors"], 1);
    let inputs = json["inputs"].as_array().expect("inputs");
    assert_eq!(inputs.len(), 3);
    assert_eq!(inputs[0]["error"], serde_json::Value::Null);
    assert_eq!(inputs[1]["path"], "b-locked.txt");
    assert_eq!(inputs[1]["size"], 7);
    assert_eq!(inputs[1]["sha256"], serde_json::Value::Null);
    assert!(inputs[1]["error"]
        .as_str()
        .is_some_and(|e| e.contains("Permission denied")));
    assert_eq!(inputs[2]["first_lines"], serde_json::json!(["also fine"]));
    let md = fs::read_to_string(output.join("report.md")).expect("md");
    assert!(md.contains("**Error:** cannot read: Permission denied"));
    assert!(!md.contains("secret"));
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
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(output.path().join("report.md").is_file());
    assert!(output.path().join("report.json").is_file());
}

#[test]
fn hold_blocks_until_killed() {
    let mut child = Command::new(BIN).arg("hold").spawn().expect("spawn");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(child.try_wait().expect("try_wait").is_none(), "hold exited");
    child.kill().expect("kill");
    let status = child.wait().expect("wait");
    assert!(!status.success());
}
