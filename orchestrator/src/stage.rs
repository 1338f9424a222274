//! The clearance stage (`.golem/staged/<id>/`): validated output waiting for a person.
//!
//! A staged commit is built in `.tmp-<id>/` and renamed into place only when its files and its
//! manifest are complete and synced, so a crash never leaves half of one. Once renamed, the
//! manifest and files are never modified; only `status.json` records what a person decided.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::extract::{ExtractedFile, Rejected};
use crate::intake::InputRecord;
use crate::owner::{Liveness, Owner};
use crate::policy::TrustLevel;
use crate::warnings::WarningSummary;

mod status;
pub use status::{PushRecord, Status};

/// The manifest's file name.
pub const MANIFEST: &str = "manifest.json";
/// The directory holding the staged files.
pub const FILES: &str = "files";
/// The mutable decision record.
pub const STATUS: &str = "status.json";
/// The session's model transcript (JSONL, one exchange per line) beside the manifest, when the
/// worker had model access: reviewed like the files, never pushed with them.
pub const TRANSCRIPT: &str = "transcript.jsonl";
const TMP_PREFIX: &str = ".tmp-";
const OWNER_FILE: &str = "owner";

/// Everything a reviewer needs to know about where staged files came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version.
    pub version: u32,
    /// Staged commit id.
    pub id: String,
    /// The session that produced it.
    pub session: String,
    /// When it was staged (RFC 3339).
    pub created_at: String,
    /// The session's trust level.
    pub trust_level: TrustLevel,
    /// Image reference the worker ran.
    pub image: String,
    /// The image's content id.
    pub image_id: String,
    /// Entrypoint and command.
    pub command: Vec<String>,
    /// The worker's exit code.
    pub exit_code: Option<i64>,
    /// What went in.
    pub inputs: Vec<InputRecord>,
    /// Links inside input folders that were left out, never followed (the worker never saw
    /// them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<crate::intake::Skipped>,
    /// What came out and was accepted.
    pub files: Vec<ExtractedFile>,
    /// What came out and was refused, with why.
    pub rejected: Vec<Rejected>,
    /// Rejections beyond the recorded list.
    #[serde(default)]
    pub rejected_omitted: u64,
    /// Total bytes of `files`.
    pub bytes: u64,
    /// HEAD of the mounted repository at session start, when one was mounted.
    #[serde(default)]
    pub repo_head: Option<String>,
    /// The worker's use of the model gateway and the sha256 of its [`TRANSCRIPT`], when it had
    /// model access.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelRecord>,
    /// The container's settings as the engine recorded them before it started, checked against
    /// the plan, with their digest: what the worker really ran with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<crate::verify::Verified>,
    /// The warnings the report worker claims in its `index.json` (see [`crate::warnings`]);
    /// absent for other workers and for an index that does not parse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnings: Option<WarningSummary>,
}

/// What a staged commit says about its session's model use: the usage, the transcript's hash
/// (so `transcript` shows only what was staged) and whether the honeytoken was seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelRecord {
    /// Requests, tokens and refusals.
    #[serde(flatten)]
    pub usage: crate::gateway::ModelUsage,
    /// sha256 of the staged transcript file.
    pub transcript_sha256: String,
    /// The container's fake key was seen in a request, the output or the logs: the worker tried
    /// to send its environment somewhere. Shown as a high warning.
    #[serde(default)]
    pub honeytoken_seen: bool,
    /// Exchanges not wholly in the transcript (its caps, a flood of refused requests, a failed
    /// write): the reviewer is told the transcript is not the whole story.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub transcript_incomplete: u64,
}

/// One line of `golem-orch staged`.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Staged commit id.
    pub id: String,
    /// Session id.
    pub session: String,
    /// Accepted files.
    pub files: usize,
    /// Accepted bytes.
    pub bytes: u64,
    /// Rejected entries.
    pub rejected: u64,
    /// When staged.
    pub created_at: String,
    /// pending, partial, pushed, discarded or merged.
    pub status: String,
    /// How many files are already pushed (a partial staged commit has some, not all).
    pub pushed_files: usize,
    /// Trust level.
    pub trust_level: TrustLevel,
    /// The first input's source.
    pub source: String,
    /// The worker's claimed warnings (null when it gave no report index).
    pub warnings: Option<WarningSummary>,
}

/// Why the stage could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// I/O.
    #[error("stage {path}: {source}")]
    Io {
        /// Path.
        path: PathBuf,
        /// Error.
        source: std::io::Error,
    },
    /// A manifest or status that does not parse.
    #[error("stage {path}: unreadable: {message}")]
    Corrupt {
        /// Path.
        path: PathBuf,
        /// Parser message.
        message: String,
    },
    /// A staged commit of that id already exists; staged commits are immutable.
    #[error("staged commit {0} already exists")]
    Exists(String),
    /// The staged files or manifest no longer match what was staged.
    #[error("staged commit {id} was modified after staging ({what}); refusing to use it")]
    Tampered {
        /// Staged commit id.
        id: String,
        /// What does not match.
        what: String,
    },
    /// The manifest cannot be matched to the hash the audit log recorded when it was staged.
    #[error("staged commit {id}: {why}")]
    Unverified {
        /// Staged commit id.
        id: String,
        /// What failed.
        why: String,
    },
    /// A status change that would move backwards or sideways.
    #[error(
        "staged commit {id} is already {status}; only a pending or partly pushed staged commit can be {wanted}"
    )]
    NotPending {
        /// Staged commit id.
        id: String,
        /// Its current status.
        status: String,
        /// What was attempted.
        wanted: String,
    },
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StageError + '_ {
    move |source| StageError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The stage directory.
#[derive(Debug, Clone)]
pub struct Stage {
    root: PathBuf,
}

impl Stage {
    /// The stage at `root` (`.golem/staged`).
    pub fn new(root: impl Into<PathBuf>) -> Stage {
        Stage { root: root.into() }
    }

    /// The directory of one staged commit.
    pub fn dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    /// Starts building a staged commit in a temporary directory owned by this process.
    pub fn begin(&self, id: &str) -> Result<Building, StageError> {
        if self.dir(id).exists() {
            return Err(StageError::Exists(id.to_string()));
        }
        let tmp = self.root.join(format!("{TMP_PREFIX}{id}"));
        // 0700/0600 whatever the umask: a staged commit is the user's alone until pushed.
        private_dir(&tmp)?;
        let owner = tmp.join(OWNER_FILE);
        crate::home::write_private(&owner, Owner::current().to_string().as_bytes())
            .map_err(io(&owner))?;
        let files = tmp.join(FILES);
        private_dir(&files)?;
        Ok(Building {
            tmp,
            target: self.dir(id),
            done: false,
        })
    }

    /// Reads a manifest.
    pub fn manifest(&self, id: &str) -> Result<Manifest, StageError> {
        read_json(&self.dir(id).join(MANIFEST))
    }

    /// Reads a status; no status file means pending.
    pub fn status(&self, id: &str) -> Result<Status, StageError> {
        let path = self.dir(id).join(STATUS);
        if !path.exists() {
            return Ok(Status::Pending);
        }
        read_json(&path)
    }

    /// Every staged commit, pending first, newest first within a status.
    pub fn list(&self) -> Result<Vec<Summary>, StageError> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.root).map_err(io(&self.root))? {
            let entry = entry.map_err(io(&self.root))?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if name.starts_with('.') || !entry.path().join(MANIFEST).is_file() {
                continue;
            }
            let m = self.manifest(&name)?;
            let status = self.status(&name)?;
            out.push(Summary {
                files: m.files.len(),
                bytes: m.bytes,
                rejected: m.rejected.len() as u64 + m.rejected_omitted,
                created_at: m.created_at.clone(),
                status: status.word().to_string(),
                pushed_files: status.pushed_files().len(),
                trust_level: m.trust_level,
                source: m
                    .inputs
                    .first()
                    .map(|i| i.source.clone())
                    .unwrap_or_default(),
                warnings: m.warnings,
                session: m.session,
                id: m.id,
            });
        }
        let waiting = |s: &Summary| s.status == "pending" || s.status == "partial";
        out.sort_by(|a, b| {
            (!waiting(a))
                .cmp(&!waiting(b))
                .then_with(|| b.created_at.cmp(&a.created_at))
        });
        Ok(out)
    }

    /// Removes temporary directories whose building process is gone (after a crash).
    pub fn remove_orphans(&self) -> Result<Vec<String>, StageError> {
        self.orphans(true)
    }

    /// The temporary directories whose building process is gone, removed when `remove`
    /// (`gc --dry-run` only lists them).
    pub fn orphans(&self, remove: bool) -> Result<Vec<String>, StageError> {
        let mut removed = Vec::new();
        for entry in std::fs::read_dir(&self.root).map_err(io(&self.root))? {
            let entry = entry.map_err(io(&self.root))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with(TMP_PREFIX) {
                continue;
            }
            let owner = std::fs::read_to_string(entry.path().join(OWNER_FILE)).ok();
            let dead = match owner.as_deref().map(Owner::parse) {
                Some(Some(o)) => o.liveness() == Liveness::Dead,
                // No owner yet (a build that is just starting) or an unreadable one: only
                // once it is old enough that no live build can still be writing it.
                _ => entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > std::time::Duration::from_secs(3600)),
            };
            if dead {
                if remove {
                    std::fs::remove_dir_all(entry.path()).map_err(io(&entry.path()))?;
                }
                removed.push(name);
            }
        }
        Ok(removed)
    }
}

/// Creates one new directory 0700 (it must not exist: stage directories are never reused).
fn private_dir(path: &Path) -> Result<(), StageError> {
    crate::home::create_new_private_dir(path).map_err(io(path))
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, StageError> {
    let text = std::fs::read(path).map_err(io(path))?;
    parse_json(path, &text)
}

/// `bytes`, read from `path`, as JSON; a file that does not parse is corrupt.
fn parse_json<T: serde::de::DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T, StageError> {
    serde_json::from_slice(bytes).map_err(|e| corrupt(path, e))
}

/// `value` as the pretty JSON the stage writes to `path`.
fn to_json(path: &Path, value: &impl Serialize) -> Result<Vec<u8>, StageError> {
    serde_json::to_vec_pretty(value).map_err(|e| corrupt(path, e))
}

fn corrupt(path: &Path, e: serde_json::Error) -> StageError {
    StageError::Corrupt {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

impl Stage {
    /// Reads a manifest and the sha256 of exactly the bytes parsed, so a manifest checked
    /// against its audited hash is the manifest used (no second read to swap it under).
    pub fn manifest_with_sha256(&self, id: &str) -> Result<(Manifest, String), StageError> {
        let (path, bytes) = self.manifest_bytes(id)?;
        let manifest = parse_json(&path, &bytes)?;
        Ok((manifest, sha256_hex(&bytes)))
    }

    /// A manifest's path and its bytes as they are on disk.
    fn manifest_bytes(&self, id: &str) -> Result<(PathBuf, Vec<u8>), StageError> {
        let path = self.dir(id).join(MANIFEST);
        let bytes = std::fs::read(&path).map_err(io(&path))?;
        Ok((path, bytes))
    }
}

/// sha256 of a manifest's bytes, recorded in the audit log when staged and checked before a push.
pub fn manifest_sha256(stage: &Stage, id: &str) -> Result<String, StageError> {
    let (_, bytes) = stage.manifest_bytes(id)?;
    Ok(sha256_hex(&bytes))
}

/// Lower-case hex sha256, as manifests and the audit log write it.
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}

impl Stage {
    /// Checks the files directory holds exactly the manifest's files: no extras, no links, no
    /// special files. Contents are checked by [`Stage::read_verified`] as they are used, so the
    /// bytes checked are the bytes used.
    pub fn verify_layout(&self, id: &str, manifest: &Manifest) -> Result<(), StageError> {
        let root = self.dir(id).join(FILES);
        let tampered = |what: String| StageError::Tampered {
            id: id.to_string(),
            what,
        };
        let expected: std::collections::BTreeSet<&str> =
            manifest.files.iter().map(|f| f.path.as_str()).collect();
        let mut found = 0usize;
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
                let entry = entry.map_err(io(&dir))?;
                let path = entry.path();
                let rel = path
                    .strip_prefix(&root)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .into_owned();
                let ft = entry.file_type().map_err(io(&path))?;
                if ft.is_dir() {
                    stack.push(path);
                } else if ft.is_file() && expected.contains(rel.as_str()) {
                    found += 1;
                } else if ft.is_file() {
                    return Err(tampered(format!("unexpected file {rel}")));
                } else {
                    return Err(tampered(format!("{rel} is not a regular file")));
                }
            }
        }
        if found != expected.len() {
            return Err(tampered(format!(
                "{} staged file(s) missing",
                expected.len() - found
            )));
        }
        Ok(())
    }

    /// Reads one staged file without following links and checks its size and sha256 against the manifest.
    pub fn read_verified(&self, id: &str, file: &ExtractedFile) -> Result<Vec<u8>, StageError> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.dir(id).join(FILES).join(&file.path);
        let tampered = |what: String| StageError::Tampered {
            id: id.to_string(),
            what,
        };
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| tampered(format!("{}: {e}", file.path)))?;
        let mut data = Vec::new();
        f.by_ref()
            .take(file.size + 1)
            .read_to_end(&mut data)
            .map_err(io(&path))?;
        if data.len() as u64 != file.size || sha256_hex(&data) != file.sha256 {
            return Err(tampered(format!("{} does not match its sha256", file.path)));
        }
        Ok(data)
    }

    /// The stage-wide lock that serialises status changes and pushes.
    pub fn lock(&self) -> Result<crate::home::FileLock, StageError> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.root.join(".lock");
        crate::home::FileLock::open(
            &path,
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600),
        )
        .map_err(io(&path))
    }
}

/// A staged commit under construction; dropped without [`Building::commit`], it disappears.
#[derive(Debug)]
pub struct Building {
    tmp: PathBuf,
    target: PathBuf,
    done: bool,
}

impl Building {
    /// Where extraction writes the accepted files.
    pub fn files_dir(&self) -> PathBuf {
        self.tmp.join(FILES)
    }

    /// Writes the manifest, syncs everything and renames the directory into place.
    pub fn commit(mut self, manifest: &Manifest) -> Result<PathBuf, StageError> {
        let manifest_path = self.tmp.join(MANIFEST);
        let json = to_json(&manifest_path, manifest)?;
        crate::home::write_private(&manifest_path, &json).map_err(io(&manifest_path))?;
        sync_tree(&self.tmp)?;
        std::fs::rename(&self.tmp, &self.target).map_err(io(&self.target))?;
        // Only after the rename: until then the owner file is what keeps gc away.
        self.done = true;
        let owner = self.target.join(OWNER_FILE);
        std::fs::remove_file(&owner).map_err(io(&owner))?;
        if let Some(parent) = self.target.parent() {
            fsync(parent)?;
        }
        Ok(self.target.clone())
    }
}

impl Building {
    /// Copies the session's model transcript beside the manifest (0600, synced by the commit,
    /// published with it by the rename) and returns its sha256 for the manifest.
    pub fn add_transcript(&self, from: &Path) -> Result<String, StageError> {
        let bytes = read_nofollow(from)?;
        let to = self.tmp.join(TRANSCRIPT);
        crate::home::write_private(&to, &bytes).map_err(io(&to))?;
        Ok(sha256_hex(&bytes))
    }
}

/// Reads a transcript without following a final link, at most [`MAX_TRANSCRIPT_BYTES`]: the
/// gateway never writes more, and staging must not load an unbounded file into memory.
fn read_nofollow(path: &Path) -> Result<Vec<u8>, StageError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut bytes = Vec::new();
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .and_then(|f| f.take(MAX_TRANSCRIPT_BYTES + 1).read_to_end(&mut bytes))
        .map_err(io(path))?;
    if bytes.len() as u64 > MAX_TRANSCRIPT_BYTES {
        return Err(StageError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(format!("larger than {MAX_TRANSCRIPT_BYTES} bytes")),
        });
    }
    Ok(bytes)
}

/// The most bytes of transcript read back: far above what a session's budget can produce.
pub const MAX_TRANSCRIPT_BYTES: u64 = 512 << 20;

impl Stage {
    /// The transcript staged with `manifest`, exactly as staged: read without following a link,
    /// only a regular file, capped, and only when it hashes to the manifest's
    /// `model.transcript_sha256`. `None`: the worker had no model access.
    pub fn transcript(&self, id: &str, manifest: &Manifest) -> Result<Option<Vec<u8>>, StageError> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let Some(record) = &manifest.model else {
            return Ok(None);
        };
        let tampered = |what: String| StageError::Tampered {
            id: id.to_string(),
            what: format!("transcript refused: {what}"),
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(self.dir(id).join(TRANSCRIPT))
            .map_err(|e| tampered(format!("{TRANSCRIPT}: {e}")))?;
        let meta = file.metadata().map_err(|e| tampered(e.to_string()))?;
        if !meta.is_file() {
            return Err(tampered("not a regular file".into()));
        }
        let mut bytes = Vec::new();
        file.take(MAX_TRANSCRIPT_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| tampered(e.to_string()))?;
        if bytes.len() as u64 > MAX_TRANSCRIPT_BYTES {
            return Err(tampered(format!(
                "larger than {MAX_TRANSCRIPT_BYTES} bytes"
            )));
        }
        if sha256_hex(&bytes) != record.transcript_sha256 {
            return Err(tampered("it does not match the manifest's sha256".into()));
        }
        Ok(Some(bytes))
    }
}

/// The staged model transcript of `id`, only when the manifest is the one the audit log
/// recorded at staging (the check `push` makes) and the transcript is the one that manifest
/// names ([`Stage::transcript`]): what a reviewer reads is what the session staged. `None`: the
/// worker had no model access.
pub fn read_transcript(home: &crate::home::Home, id: &str) -> Result<Option<Vec<u8>>, StageError> {
    let stage = Stage::new(home.staged_dir());
    let audit = crate::audit::Audit::new(home.audit_path());
    let manifest = crate::push::verified_manifest(&stage, &audit, id).map_err(|e| match e {
        crate::push::PushError::Stage(e) => e,
        crate::push::PushError::Unverified { why, .. } => StageError::Unverified {
            id: id.to_string(),
            why,
        },
        other => StageError::Unverified {
            id: id.to_string(),
            why: other.to_string(),
        },
    })?;
    stage.transcript(id, &manifest)
}

impl Drop for Building {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_dir_all(&self.tmp);
        }
    }
}

/// fsyncs every file and directory below `dir`, so the rename publishes durable content.
fn sync_tree(dir: &Path) -> Result<(), StageError> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).map_err(io(&d))? {
            let entry = entry.map_err(io(&d))?;
            let ft = entry.file_type().map_err(io(&entry.path()))?;
            if ft.is_dir() {
                stack.push(entry.path());
            } else if ft.is_file() {
                fsync(&entry.path())?;
            }
        }
        fsync(&d)?;
    }
    Ok(())
}

/// fsyncs one file or directory.
fn fsync(path: &Path) -> Result<(), StageError> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(id: &str) -> Manifest {
        Manifest {
            version: 1,
            id: id.into(),
            session: id.into(),
            created_at: crate::audit::now(),
            trust_level: TrustLevel::Untrusted,
            image: "img".into(),
            image_id: "sha256:x".into(),
            command: vec!["report".into()],
            exit_code: Some(0),
            inputs: vec![],
            skipped: vec![],
            files: vec![ExtractedFile {
                path: "a.txt".into(),
                size: 1,
                sha256: "00".into(),
            }],
            rejected: vec![],
            rejected_omitted: 0,
            bytes: 1,
            repo_head: None,
            model: None,
            container: None,
            warnings: None,
        }
    }

    #[test]
    fn manifests_without_warnings_load_and_listings_carry_them() {
        let m = manifest("cccc");
        let json = serde_json::to_value(&m).unwrap();
        assert!(json.get("warnings").is_none(), "written only when known");
        assert_eq!(serde_json::from_value::<Manifest>(json).unwrap(), m);
        let dir = tempfile::tempdir().unwrap();
        let stage = Stage::new(dir.path());
        let b = stage.begin("dddd").unwrap();
        std::fs::write(b.files_dir().join("a.txt"), "x").unwrap();
        let warnings = crate::warnings::parse(
            br#"{"inputs":[{"path":"a","warnings":2,"highest_severity":"medium"}]}"#,
        );
        b.commit(&Manifest {
            warnings: warnings.clone(),
            ..manifest("dddd")
        })
        .unwrap();
        assert_eq!(stage.list().unwrap()[0].warnings, warnings);
    }

    #[test]
    fn a_committed_stage_appears_whole_and_an_abandoned_one_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let stage = Stage::new(dir.path());
        let b = stage.begin("aaaa").unwrap();
        std::fs::write(b.files_dir().join("a.txt"), "x").unwrap();
        b.commit(&manifest("aaaa")).unwrap();
        {
            let b = stage.begin("bbbb").unwrap();
            std::fs::write(b.files_dir().join("half.txt"), "x").unwrap();
        }
        let list = stage.list().unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].status, "pending");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "abandoned build removed"
        );
        assert!(matches!(stage.begin("aaaa"), Err(StageError::Exists(_))));
    }

    #[test]
    fn orphans_of_dead_processes_are_removed_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let stage = Stage::new(dir.path());
        let live = stage.begin("cccc").unwrap();
        let dead = dir.path().join(".tmp-dddd");
        std::fs::create_dir(&dead).unwrap();
        std::fs::write(dead.join(OWNER_FILE), "old-boot:0:1:1").unwrap();
        assert_eq!(
            stage.remove_orphans().unwrap(),
            vec![".tmp-dddd".to_string()]
        );
        assert!(live.files_dir().exists());
    }

    #[test]
    fn status_moves_are_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let stage = Stage::new(dir.path());
        stage
            .begin("eeee")
            .unwrap()
            .commit(&manifest("eeee"))
            .unwrap();
        assert_eq!(stage.status("eeee").unwrap(), Status::Pending);
        stage
            .transition(
                "eeee",
                &Status::Discarded {
                    at: "now".into(),
                    pushes: vec![],
                },
            )
            .unwrap();
        assert_eq!(stage.status("eeee").unwrap().word(), "discarded");
        let again = stage.transition(
            "eeee",
            &Status::Pushed {
                commit: "c".into(),
                branch: "b".into(),
                at: "now".into(),
                pushes: vec![],
            },
        );
        assert!(
            matches!(again, Err(StageError::NotPending { .. })),
            "{again:?}"
        );
    }

    #[test]
    fn tampering_with_staged_files_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let stage = Stage::new(dir.path());
        let b = stage.begin("ffff").unwrap();
        std::fs::write(b.files_dir().join("a.txt"), "x").unwrap();
        let mut m = manifest("ffff");
        m.files[0].sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"x"));
        b.commit(&m).unwrap();
        stage.verify_layout("ffff", &m).unwrap();
        assert_eq!(stage.read_verified("ffff", &m.files[0]).unwrap(), b"x");
        let files = stage.dir("ffff").join(FILES);
        std::fs::write(files.join("a.txt"), "y").unwrap();
        assert!(matches!(
            stage.read_verified("ffff", &m.files[0]),
            Err(StageError::Tampered { .. })
        ));
        std::fs::write(files.join("a.txt"), "x").unwrap();
        std::fs::write(files.join("extra.txt"), "x").unwrap();
        assert!(stage.verify_layout("ffff", &m).is_err());
        std::fs::remove_file(files.join("extra.txt")).unwrap();
        std::fs::remove_file(files.join("a.txt")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", files.join("a.txt")).unwrap();
        assert!(stage.verify_layout("ffff", &m).is_err());
        assert!(stage.read_verified("ffff", &m.files[0]).is_err());
    }
}
