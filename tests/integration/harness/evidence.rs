//! The evidence the stories read: audit records, the worker's own reports, the stage on disk,
//! and a picture of the host to compare after an attack.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{run::Run, Golem};

/// The shipped untrusted policy (policies/untrusted.yaml), which these tests do not narrow.
pub(crate) fn untrusted() -> golem_orch::policy::Policy {
    golem_orch::policy::load(golem_orch::policy::TrustLevel::Untrusted, None, None)
        .expect("shipped policy")
        .policy
}

/// A staged file of a session, parsed as JSON (the hostile worker's evidence).
pub(crate) fn staged_json(g: &Golem, run: &Run, name: &str) -> Value {
    staged_json_in(&g.home, run, name)
}

/// [`staged_json`] for a session run with another state directory, `home`.
pub(crate) fn staged_json_in(home: &Path, run: &Run, name: &str) -> Value {
    let path = home
        .join("staged")
        .join(run.staged())
        .join("files")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} ({})", path.display(), run.json));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The last JSON line the worker printed whose `mode` is `mode` (file-making modes and bombs
/// report their steps this way), from the session's captured logs.
pub(crate) fn worker_report(home: &Path, session: &str, mode: &str) -> Value {
    let logs = std::fs::read_to_string(home.join("sessions").join(session).join("logs.txt"))
        .unwrap_or_else(|e| panic!("logs of {session}: {e}"));
    logs.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .find(|v| v["mode"] == mode)
        .unwrap_or_else(|| panic!("no {mode} report in the logs:\n{logs}"))
}

/// Every audit record of one session.
pub(crate) fn audit_of(g: &Golem, session: &str) -> Vec<Value> {
    g.audit()
        .into_iter()
        .filter(|r| r["session"] == session)
        .collect()
}

/// `(path, reason)` of every `entry.rejected` audit record of a session.
pub(crate) fn audited_rejections(g: &Golem, session: &str) -> Vec<(String, String)> {
    audit_of(g, session)
        .into_iter()
        .filter(|r| r["event"] == "entry.rejected")
        .map(|r| {
            (
                r["data"]["path"].as_str().unwrap_or("").to_string(),
                r["data"]["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The plan the session ran with, as audited.
pub(crate) fn audited_plan(g: &Golem, session: &str) -> Value {
    audit_of(g, session)
        .into_iter()
        .find(|r| r["event"] == "session.plan")
        .map(|r| r["data"]["plan"].clone())
        .expect("session.plan audited")
}

/// The SHA-256 of a file's content, hex.
pub(crate) fn sha256_file(path: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(path).expect("read")))
}

/// Every entry under `dir` (not following links): kind, mode and content hash.
pub(crate) fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in rd.flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).expect("lstat");
            let rel = path.strip_prefix(dir).expect("below").to_path_buf();
            let mode = meta.mode() & 0o7777;
            let desc = if meta.is_dir() {
                stack.push(path.clone());
                format!("dir {mode:o}")
            } else if meta.file_type().is_symlink() {
                format!("link -> {:?}", std::fs::read_link(&path).ok())
            } else if meta.is_file() {
                format!("file {mode:o} {}", sha256_file(&path))
            } else {
                format!("special {:o}", meta.mode())
            };
            out.insert(rel, desc);
        }
    }
    out
}

/// Host paths a worker could only create by escaping its container.
const ESCAPE_MARKERS: [&str; 5] = ["/pwned", "/escaped", "/x", "/hostile-exec", "/output.old"];

/// What the host looked like before an attack: the project directory (inputs included) and
/// the escape markers.
pub(crate) struct HostWitness {
    project: PathBuf,
    before: BTreeMap<PathBuf, String>,
    markers: Vec<(&'static str, bool)>,
}

impl HostWitness {
    /// Takes the picture.
    pub(crate) fn take(g: &Golem) -> HostWitness {
        HostWitness {
            project: g.project.path().to_path_buf(),
            before: tree(g.project.path()),
            markers: ESCAPE_MARKERS
                .iter()
                .map(|m| (*m, Path::new(m).exists()))
                .collect(),
        }
    }

    /// Asserts nothing of it changed.
    pub(crate) fn assert_unchanged(&self) {
        assert_eq!(
            tree(&self.project),
            self.before,
            "the project directory changed"
        );
        for (marker, existed) in &self.markers {
            assert_eq!(
                Path::new(marker).exists(),
                *existed,
                "{marker} appeared on the host"
            );
        }
    }
}

/// The half-built staged commits (`staged/.tmp-*`) in a state directory.
pub(crate) fn half_stages(home: &Path) -> Vec<String> {
    std::fs::read_dir(home.join("staged"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".tmp-"))
                .collect()
        })
        .unwrap_or_default()
}

/// Asserts that no half-built staged commit (`staged/.tmp-*`) is left in `home`.
pub(crate) fn assert_no_half_stage(home: &Path) {
    let left = half_stages(home);
    assert!(left.is_empty(), "half-built staged commits left: {left:?}");
}

/// A session's captured worker output (`logs.txt`), or "" when there is none.
pub(crate) fn session_logs(home: &Path, session: &str) -> String {
    std::fs::read_to_string(home.join("sessions").join(session).join("logs.txt"))
        .unwrap_or_default()
}

/// Asserts a staged commit holds exactly its manifest's files, all regular 0644 files (dirs
/// 0755) within the given caps, nothing else: no links, devices, FIFOs, sockets or set-id bits.
/// Returns the staged paths.
pub(crate) fn assert_stage_allowed(
    home: &Path,
    staged: &str,
    max_files: u64,
    max_file_bytes: u64,
    max_total: u64,
) -> Vec<String> {
    let dir = home.join("staged").join(staged);
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let files = dir.join("files");
    let mut on_disk = BTreeMap::new();
    for (rel, desc) in tree(&files) {
        if desc.starts_with("dir ") {
            assert_eq!(desc, "dir 755", "{rel:?}");
            continue;
        }
        assert!(
            desc.starts_with("file 644 "),
            "{rel:?} is not a plain 0644 file in the stage: {desc}"
        );
        let size = std::fs::symlink_metadata(files.join(&rel)).unwrap().len();
        assert!(size <= max_file_bytes, "{rel:?}: {size} bytes over the cap");
        on_disk.insert(
            rel.to_string_lossy().into_owned(),
            (size, desc["file 644 ".len()..].to_string()),
        );
    }
    let listed: BTreeMap<String, (u64, String)> = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                (
                    f["size"].as_u64().unwrap(),
                    f["sha256"].as_str().unwrap().to_string(),
                ),
            )
        })
        .collect();
    assert_eq!(on_disk, listed, "the stage differs from its manifest");
    assert!(listed.len() as u64 <= max_files);
    let total: u64 = listed.values().map(|(s, _)| s).sum();
    assert!(total <= max_total, "{total} bytes staged over the cap");
    assert_eq!(manifest["bytes"], total);
    assert_no_half_stage(home);
    listed.into_keys().collect()
}

/// The untrusted policy's caps, for [`assert_stage_allowed`].
pub(crate) fn assert_untrusted_stage(g: &Golem, staged: &str) -> Vec<String> {
    let out = untrusted().output;
    assert_stage_allowed(
        &g.home,
        staged,
        out.max_files,
        out.max_file_bytes.bytes(),
        out.max_total_bytes.bytes(),
    )
}

/// Every file under `dir` (links not followed) whose bytes contain `needle`.
pub(crate) fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(meta) = e.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(e.path());
            } else if meta.is_file() {
                let bytes = std::fs::read(e.path()).unwrap_or_default();
                if contains(&bytes, needle) {
                    found.push(e.path());
                }
            }
        }
    }
    found
}

/// Whether `needle` (not empty) occurs in `hay`.
pub(crate) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}
