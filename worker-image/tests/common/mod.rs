//! Helpers to run the real binary on documents built by `golem-test-corpus`.

// Test code for clippy too (see the test files).
#![cfg(test)]
#![allow(dead_code)]

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

pub(crate) use golem_test_corpus::*;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_golem-worker");

/// Runs `golem-worker <args> --input IN --output OUT`.
pub(crate) fn run(args: &[&str], input: &Path, output: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .arg("--input")
        .arg(input)
        .arg("--output")
        .arg(output)
        .arg("--task")
        .arg(input.join("no-such-task-file"))
        .output()
        .expect("run golem-worker")
}

pub(crate) fn read_json(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("valid json")
}

pub(crate) fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The index entry for `path`.
pub(crate) fn entry<'a>(index: &'a Value, path: &str) -> &'a Value {
    index["inputs"]
        .as_array()
        .expect("inputs")
        .iter()
        .find(|e| e["path"] == path)
        .unwrap_or_else(|| panic!("no entry {path} in {index:#}"))
}

/// Warning kinds of a per-input JSON report.
pub(crate) fn warning_kinds(report: &Value) -> Vec<String> {
    report["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .map(|w| w["kind"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Whether some warning of `kind` mentions `needle` in its message or snippet.
pub(crate) fn has_warning(report: &Value, kind: &str, needle: &str) -> bool {
    report["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .any(|w| {
            w["kind"] == kind
                && (w["message"].as_str().unwrap_or("").contains(needle)
                    || w["snippet"].as_str().unwrap_or("").contains(needle))
        })
}
