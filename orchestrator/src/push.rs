//! Push: the only door from the clearance stage into the trusted zone (a git repository).
//!
//! A push makes exactly one commit of verified staged bytes on a branch, without touching the
//! person's working tree, index or HEAD: blobs and a tree are built from the branch's tree, the
//! commit is written, and the branch is moved with a compare-and-swap so a concurrent change is
//! never overwritten. Only a person runs this; nothing in a container can reach it.
//!
//! Before anything is written the stage is re-verified: the audit log's hash chain, the
//! manifest's hash as recorded when it was staged, the file layout, and every file's sha256
//! (checked on the very bytes that become blobs).

use std::cell::{Cell, RefCell};

use git2::{Cred, CredentialType, Oid, PushOptions, RemoteCallbacks, Signature};
use serde::Serialize;
use serde_json::json;

use crate::audit::{self, Audit, AuditError};
use crate::diff::{self, Change, DiffError, FileDiff};
use crate::stage::{self, Manifest, PushRecord, Stage, StageError, Status};
use crate::target::{Target, TargetError};

mod message;
pub use message::{commit_message, selection_digest, subject, TRAILER_SELECTION};

/// Credential attempts before giving up: git asks again after every failure, forever.
const MAX_CREDENTIAL_ATTEMPTS: u32 = 3;
/// How far back a branch is searched for a commit of this staged commit (crash recovery).
const RECOVERY_DEPTH: usize = 50;
/// The trailer that ties a commit to its staged commit.
pub const TRAILER_STAGED: &str = "Golem-Staged";

/// Why a push was refused or failed. Every variant leaves the staged commit as it was (pending or
/// partly pushed) and intact.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The stage failed or was tampered with.
    #[error(transparent)]
    Stage(#[from] StageError),
    /// The repository failed.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// Comparing with the branch failed.
    #[error(transparent)]
    Diff(#[from] DiffError),
    /// The audit log could not be read, written or trusted.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// The manifest does not match the hash recorded in the audit log when it was staged.
    #[error("staged commit {id}: {why}; refusing to push")]
    Unverified {
        /// Staged commit id.
        id: String,
        /// What failed.
        why: String,
    },
    /// The branch is checked out; moving it would leave that work tree's index stale.
    #[error("branch {0} is checked out; push to another branch (the default is golem/<id>) and merge it yourself")]
    CheckedOut(String),
    /// The branch changed the same paths since the session read the repository.
    #[error("conflict: since the session started, {branch} changed {}; review and retry with --force to overwrite", .paths.join(", "))]
    Conflict {
        /// The branch.
        branch: String,
        /// Paths changed on both sides.
        paths: Vec<String>,
    },
    /// A file the push would write is a look-alike of another path in the branch or the stage
    /// (case, NFC/NFD, trailing dots or spaces): on a case-insensitive or normalising checkout
    /// they become one file, so one silently replaces or shadows the other.
    #[error("look-alike paths (one file on case-insensitive or Unicode-normalising checkouts): {}; rename them, or review and retry with --force", .pairs.iter().flat_map(|(p, o)| o.iter().map(move |o| format!("{p} vs {o} [{}]", crate::sensitive::difference(p, o)))).collect::<Vec<_>>().join("; "))]
    Collision {
        /// Each written path and the paths it collides with.
        pairs: Vec<(String, Vec<String>)>,
    },
    /// The branch moved between checking and committing.
    #[error("branch {0} moved while pushing; nothing was changed, retry")]
    BranchMoved(String),
    /// Nothing would change.
    #[error("nothing to push: every selected file is already identical on {0}")]
    NothingToPush(String),
    /// The remote could not be reached or authenticated.
    #[error("pushing {branch} to {remote}: {message}")]
    Remote {
        /// Remote name.
        remote: String,
        /// Branch.
        branch: String,
        /// What failed.
        message: String,
    },
}

/// What a push would do, for the person to consent to.
#[derive(Debug, Clone, Serialize)]
pub struct Proposal {
    /// Staged commit id.
    pub staged: String,
    /// Repository work tree.
    pub repo: String,
    /// Branch.
    pub branch: String,
    /// Whether the branch will be created (from HEAD).
    pub new_branch: bool,
    /// Each selected file and how it changes the branch.
    pub files: Vec<FileDiff>,
    /// Paths the branch changed since the session's recorded HEAD (empty when none or unknown).
    pub conflicts: Vec<String>,
}

/// What a person asked a push to do beyond the target.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Only these staged paths (all when empty).
    pub only: Vec<String>,
    /// Commit message summary.
    pub message: Option<String>,
    /// Push despite conflicts and look-alike paths (the person has reviewed them).
    pub force: bool,
    /// Also push the branch to this remote.
    pub remote: Option<String>,
}

/// The result of a push.
#[derive(Debug, Clone, Serialize)]
pub struct Pushed {
    /// Staged commit id.
    pub staged: String,
    /// The new commit.
    pub commit: String,
    /// The branch it is on.
    pub branch: String,
    /// The remote it was pushed to, if any.
    pub remote: Option<String>,
    /// Whether an earlier, interrupted push had already made the commit.
    pub recovered: bool,
    /// How many staged files this push committed.
    pub files: usize,
    /// How many staged files are left for a later push (0: the staged commit is pushed).
    pub left: usize,
}

/// Verifies the staged commit and works out what a push would change. Writes nothing.
pub fn propose(
    stage: &Stage,
    audit: &Audit,
    id: &str,
    target: &Target,
    only: &[String],
) -> Result<Proposal, PushError> {
    let status = stage.status(id)?;
    if !status.is_open() {
        return Err(StageError::NotPending {
            id: id.to_string(),
            status: status.word().to_string(),
            wanted: "pushed".into(),
        }
        .into());
    }
    let manifest = verified_manifest(stage, audit, id)?;
    if target.checked_out()? {
        return Err(PushError::CheckedOut(target.branch.clone()));
    }
    let files = diff::compute(stage, id, &manifest, target, only)?;
    let conflicts = conflicts(target, &manifest, &files)?;
    Ok(Proposal {
        staged: id.to_string(),
        repo: target.path.display().to_string(),
        branch: target.branch.clone(),
        new_branch: target.tip()?.is_none(),
        files,
        conflicts,
    })
}

/// Loads the manifest and checks it against the hash the audit log recorded when it was staged.
pub fn verified_manifest(stage: &Stage, audit: &Audit, id: &str) -> Result<Manifest, PushError> {
    let unverified = |why: String| PushError::Unverified {
        id: id.to_string(),
        why,
    };
    // The anchor: one read of the log, every line's chain link and keyed MAC checked, so a
    // staging record forged by someone without the audit key is never believed.
    let recorded = audit
        .staged_manifest_sha256(id)
        .map_err(|e| unverified(format!("the audit log cannot be trusted ({e})")))?
        .ok_or_else(|| unverified("the audit log has no record of staging it".into()))?;
    let (manifest, sha256) = stage.manifest_with_sha256(id)?;
    if sha256 != recorded {
        return Err(unverified(
            "its manifest does not match the hash recorded when it was staged".into(),
        ));
    }
    stage.verify_layout(id, &manifest)?;
    Ok(manifest)
}

/// Paths changed on the branch since the session's recorded HEAD that the push would also write.
fn conflicts(
    target: &Target,
    manifest: &Manifest,
    files: &[FileDiff],
) -> Result<Vec<String>, PushError> {
    let (Some(head), Some(tip)) = (&manifest.repo_head, target.base()?) else {
        return Ok(Vec::new());
    };
    let repo = &target.repo;
    let Ok(base_commit) = Oid::from_str(head).and_then(|oid| repo.find_commit(oid)) else {
        // The recorded HEAD is not in this repository: every written path is a potential conflict.
        return Ok(files
            .iter()
            .filter(|f| f.change != Change::Unchanged)
            .map(|f| f.path.clone())
            .collect());
    };
    if base_commit.id() == tip.id() {
        return Ok(Vec::new());
    }
    let old = base_commit
        .tree()
        .map_err(TargetError::git("reading the session's base tree"))?;
    let new = tip
        .tree()
        .map_err(TargetError::git("reading the branch tree"))?;
    let delta = repo
        .diff_tree_to_tree(Some(&old), Some(&new), None)
        .map_err(TargetError::git(
            "comparing the branch with the session's base",
        ))?;
    let changed: std::collections::BTreeSet<String> = delta
        .deltas()
        .flat_map(|d| [d.old_file().path(), d.new_file().path()])
        .flatten()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    Ok(files
        .iter()
        .filter(|f| f.change != Change::Unchanged && changed.contains(&f.path))
        .map(|f| f.path.clone())
        .collect())
}

/// The files a push would write that are look-alikes of other paths, with those paths.
pub fn collisions(proposal: &Proposal) -> Vec<(String, Vec<String>)> {
    proposal
        .files
        .iter()
        .filter(|f| f.change != Change::Unchanged && !f.collides_with.is_empty())
        .map(|f| (f.path.clone(), f.collides_with.clone()))
        .collect()
}

/// Records that a push of `id` was refused for `err` and hands `err` back; if the record itself
/// fails, that failure is what the caller reports.
fn refused(audit: &Audit, id: &str, err: PushError) -> PushError {
    match audit.record(
        Some(id),
        "push.refused",
        json!({ "reason": err.to_string() }),
    ) {
        Ok(_) => err,
        Err(e) => e.into(),
    }
}

/// Makes the commit, moves the branch, optionally pushes to a remote, and records the push in
/// the stage (partial while files are left, pushed when none are).
///
/// Holds the stage lock throughout, so two pushes of one staged commit cannot both commit. If an
/// earlier push made the commit and then died, the commit is found by its trailer and reused.
pub fn execute(
    stage: &Stage,
    audit: &Audit,
    id: &str,
    target: &Target,
    request: &Request,
) -> Result<Pushed, PushError> {
    let Request {
        only,
        message,
        force,
        remote,
    } = request;
    let (message, remote) = (message.as_deref(), remote.as_deref());
    let mut lock = stage.lock()?;
    let proposal = propose(stage, audit, id, target, only)?;
    consent(audit, id, target, &proposal, *force)?;
    // Verified again, not just re-read: the bytes committed are checked against this manifest.
    let manifest = verified_manifest(stage, audit, id)?;
    let digest = selection_digest(&manifest, &proposal);
    let status = stage.status(id)?;
    let (commit, recovered) = match find_recovered(target, id, digest.as_deref(), &status)? {
        Some(oid) => (oid, true),
        None => {
            if proposal.files.iter().all(|f| f.change == Change::Unchanged) {
                return Err(PushError::NothingToPush(target.branch.clone()));
            }
            (
                commit(stage, id, &manifest, target, &proposal, message)?,
                false,
            )
        }
    };
    if let Some(name) = remote {
        push_remote(target, name).inspect_err(|e| {
            let _ = audit.record(
                Some(id),
                "push.failed",
                json!({ "commit": commit.to_string(), "error": e.to_string() }),
            );
        })?;
    }
    let record = PushRecord {
        files: proposal
            .files
            .iter()
            .map(|f| f.staged_path.clone())
            .collect(),
        commit: commit.to_string(),
        branch: target.branch.clone(),
        repo: proposal.repo.clone(),
        remote: remote.map(str::to_string),
        at: audit::now(),
    };
    let all: Vec<String> = manifest.files.iter().map(|f| f.path.clone()).collect();
    let next = stage.record_push_locked(&mut lock, id, record.clone(), &all)?;
    let left = all.len() - next.pushed_files().len();
    audit.record(
        Some(&manifest.session),
        "stage.pushed",
        json!({ "staged": id, "commit": record.commit, "branch": record.branch, "repo": record.repo, "remote": record.remote, "recovered": recovered, "files": record.files.len(), "paths": record.files, "partial": left > 0, "left": left }),
    )?;
    Ok(Pushed {
        staged: id.to_string(),
        commit: record.commit,
        branch: record.branch,
        remote: record.remote,
        recovered,
        files: record.files.len(),
        left,
    })
}

/// Refuses a push the person has not consented to: one over paths the branch changed since the
/// session, or one writing look-alike paths, unless forced (then the log says what was accepted).
fn consent(
    audit: &Audit,
    id: &str,
    target: &Target,
    proposal: &Proposal,
    force: bool,
) -> Result<(), PushError> {
    if !proposal.conflicts.is_empty() && !force {
        return Err(refused(
            audit,
            id,
            PushError::Conflict {
                branch: target.branch.clone(),
                paths: proposal.conflicts.clone(),
            },
        ));
    }
    let colliding = collisions(proposal);
    if !colliding.is_empty() && !force {
        return Err(refused(
            audit,
            id,
            PushError::Collision { pairs: colliding },
        ));
    }
    if !colliding.is_empty() || !proposal.conflicts.is_empty() {
        // The person overrode a refusal: the log says what they accepted, whichever it was.
        audit.record(
            Some(id),
            "push.forced",
            json!({ "conflicts": proposal.conflicts, "collisions": colliding }),
        )?;
    }
    Ok(())
}

/// A commit on the branch left by an interrupted push of this very selection: it carries this
/// staged commit's trailer and the selection's (none for a whole push), and no recorded push
/// made it (a recorded part is done, not to be reused for the next part).
fn find_recovered(
    target: &Target,
    id: &str,
    digest: Option<&str>,
    status: &Status,
) -> Result<Option<Oid>, PushError> {
    let Some(tip) = target.tip()? else {
        return Ok(None);
    };
    let needle = format!("{TRAILER_STAGED}: {id}");
    let part = digest.map(|d| format!("{TRAILER_SELECTION}: {d}"));
    let recorded: Vec<&str> = status.pushes().iter().map(|p| p.commit.as_str()).collect();
    let mut commit = Some(tip);
    for _ in 0..RECOVERY_DEPTH {
        let Some(c) = commit else { break };
        let lines: Vec<&str> = c.message().unwrap_or("").lines().map(str::trim).collect();
        let selection = lines
            .iter()
            .find(|l| l.starts_with(&format!("{TRAILER_SELECTION}:")))
            .copied();
        if lines.contains(&needle.as_str())
            && selection == part.as_deref()
            && !recorded.contains(&c.id().to_string().as_str())
        {
            return Ok(Some(c.id()));
        }
        commit = c.parent(0).ok();
    }
    Ok(None)
}

/// Writes one commit of the verified staged bytes on top of the branch's base and moves the
/// branch to it with a compare-and-swap.
fn commit(
    stage: &Stage,
    id: &str,
    manifest: &Manifest,
    target: &Target,
    proposal: &Proposal,
    message: Option<&str>,
) -> Result<Oid, PushError> {
    let repo = &target.repo;
    let base = target.base()?;
    let tree = build_tree(stage, id, manifest, target, proposal, base.as_ref())?;
    let sig = repo
        .signature()
        .or_else(|_| Signature::now("golem-orch", "golem-orch@localhost"))
        .map_err(TargetError::git("making a signature"))?;
    let text = commit_message(
        manifest,
        &stage::manifest_sha256(stage, id)?,
        proposal,
        message,
    );
    let parents: Vec<&git2::Commit> = base.iter().collect();
    let oid = repo
        .commit(None, &sig, &sig, &text, &tree, &parents)
        .map_err(TargetError::git("writing the commit"))?;
    move_branch(target, id, oid)
}

/// The base's tree (or an empty one for a new branch) with every changed file's verified
/// staged bytes written as a blob at its path.
fn build_tree<'r>(
    stage: &Stage,
    id: &str,
    manifest: &Manifest,
    target: &'r Target,
    proposal: &Proposal,
    base: Option<&git2::Commit<'_>>,
) -> Result<git2::Tree<'r>, PushError> {
    let repo = &target.repo;
    let base_tree = match base {
        Some(c) => c
            .tree()
            .map_err(TargetError::git("reading the base tree"))?,
        None => {
            let empty = repo
                .treebuilder(None)
                .and_then(|b| b.write())
                .map_err(TargetError::git("creating an empty tree"))?;
            repo.find_tree(empty)
                .map_err(TargetError::git("reading the empty tree"))?
        }
    };
    let mut update = git2::build::TreeUpdateBuilder::new();
    for f in proposal
        .files
        .iter()
        .filter(|f| f.change != Change::Unchanged)
    {
        let file = manifest
            .files
            .iter()
            .find(|m| m.path == f.staged_path)
            .ok_or_else(|| PushError::Unverified {
                id: id.to_string(),
                why: format!("{} vanished from the manifest", f.staged_path),
            })?;
        // The bytes hashed are the bytes committed.
        let data = stage.read_verified(id, file)?;
        let blob = repo
            .blob(&data)
            .map_err(TargetError::git(format!("writing {}", f.path)))?;
        update.upsert(&f.path, blob, git2::FileMode::Blob);
    }
    let tree_id = update
        .create_updated(repo, &base_tree)
        .map_err(TargetError::git("building the tree"))?;
    Ok(repo
        .find_tree(tree_id)
        .map_err(TargetError::git("reading the new tree"))?)
}

/// Compare-and-swap: creates the branch only if absent, or moves it only from the tip the
/// commit was built on, so a concurrent change is never overwritten.
fn move_branch(target: &Target, id: &str, oid: Oid) -> Result<Oid, PushError> {
    let repo = &target.repo;
    let refname = target.refname();
    let log = format!("golem-orch push {}", crate::home::short(id));
    let moved = match target.tip()? {
        Some(tip) => repo.reference_matching(&refname, oid, true, tip.id(), &log),
        None => repo.reference(&refname, oid, false, &log),
    };
    match moved {
        Ok(_) => Ok(oid),
        Err(e)
            if matches!(
                e.code(),
                git2::ErrorCode::Modified | git2::ErrorCode::Exists
            ) =>
        {
            Err(PushError::BranchMoved(target.branch.clone()))
        }
        Err(e) => Err(TargetError::git(format!("updating {refname}"))(e).into()),
    }
}

/// Pushes the branch with the host's own credentials (ssh-agent, git credential helpers), with a
/// bounded number of attempts and the remote's verdict on the ref checked.
fn push_remote(target: &Target, name: &str) -> Result<(), PushError> {
    let fail = |message: String| PushError::Remote {
        remote: name.to_string(),
        branch: target.branch.clone(),
        message,
    };
    let repo = &target.repo;
    let mut remote = repo
        .find_remote(name)
        .map_err(|e| fail(e.message().to_string()))?;
    let config = repo.config().map_err(|e| fail(e.message().to_string()))?;
    let attempts = Cell::new(0u32);
    let rejected: RefCell<Option<String>> = RefCell::new(None);
    let mut callbacks = RemoteCallbacks::new();
    callbacks.credentials(|url, username, allowed| {
        attempts.set(attempts.get() + 1);
        if attempts.get() > MAX_CREDENTIAL_ATTEMPTS {
            return Err(git2::Error::from_str(
                "authentication failed after 3 attempts",
            ));
        }
        if allowed.contains(CredentialType::SSH_KEY) {
            if let Some(user) = username {
                return Cred::ssh_key_from_agent(user);
            }
        }
        if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
            return Cred::credential_helper(&config, url, username);
        }
        if allowed.contains(CredentialType::USERNAME) {
            return Cred::username(username.unwrap_or("git"));
        }
        Cred::default()
    });
    callbacks.push_update_reference(|refname, status| {
        if let Some(msg) = status {
            *rejected.borrow_mut() = Some(format!("the remote rejected {refname}: {msg}"));
        }
        Ok(())
    });
    let mut options = PushOptions::new();
    options.remote_callbacks(callbacks);
    let refspec = format!("{0}:{0}", target.refname());
    remote
        .push(&[refspec.as_str()], Some(&mut options))
        .map_err(|e| fail(e.message().to_string()))?;
    drop(options);
    match rejected.into_inner() {
        Some(msg) => Err(fail(msg)),
        None => Ok(()),
    }
}

/// What a discard threw away.
#[derive(Debug, Clone, Serialize)]
pub struct Discarded {
    /// Staged files discarded (not pushed).
    pub discarded: usize,
    /// Staged files an earlier partial push had already committed (they stay in their commits).
    pub already_pushed: usize,
}

/// Marks a pending or partly pushed staged commit discarded: the files not pushed yet are never
/// pushed; what was pushed stays recorded (its files stay on disk until `gc`-style cleanup by a
/// person).
pub fn discard(stage: &Stage, audit: &Audit, id: &str) -> Result<Discarded, PushError> {
    let mut lock = stage.lock()?;
    let current = stage.status(id)?;
    let pushes = current.pushes().to_vec();
    stage.transition_locked(
        &mut lock,
        id,
        &Status::Discarded {
            at: audit::now(),
            pushes,
        },
    )?;
    let manifest = stage.manifest(id).ok();
    let already_pushed = current.pushed_files().len();
    let total = manifest.as_ref().map_or(already_pushed, |m| m.files.len());
    let session = manifest.map_or_else(|| id.to_string(), |m| m.session);
    let done = Discarded {
        discarded: total.saturating_sub(already_pushed),
        already_pushed,
    };
    audit.record(
        Some(&session),
        "stage.discarded",
        json!({ "staged": id, "discarded": done.discarded, "already_pushed": done.already_pushed }),
    )?;
    Ok(done)
}
