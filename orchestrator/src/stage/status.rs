//! What a person decided about a staged commit, and the only moves it may make.
//!
//! A staged commit is pushed in one go or in parts (`push --only`): each push is recorded with
//! its files, commit, branch and repository, and the commit stays pushable for the files not yet
//! pushed until every file has been. Statuses move forward only: pending, then partly pushed
//! (more parts), then pushed or discarded; a pending one may instead be merged into a combined
//! staged commit (`batch --stage-as-one`). Nothing ever moves back to pending, and a recorded
//! push is never forgotten by a later move.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{io, to_json, Stage, StageError, STATUS};
use crate::home::write_atomic;

/// One push of some (or all) of a staged commit's files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushRecord {
    /// The staged paths this push committed (repository paths add the push's prefix).
    pub files: Vec<String>,
    /// The commit id.
    pub commit: String,
    /// The branch it was committed on.
    pub branch: String,
    /// The repository's work tree.
    #[serde(default)]
    pub repo: String,
    /// The remote the branch was pushed to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    /// When.
    pub at: String,
}

/// What a person decided about a staged commit; moves forward only ([`Status::may_become`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Status {
    /// Waiting for review.
    Pending,
    /// Some files pushed, the rest still waiting for review (and pushable).
    Partial {
        /// Each push so far, oldest first.
        pushes: Vec<PushRecord>,
    },
    /// Every file committed into a repository.
    Pushed {
        /// The commit id (of the last push).
        commit: String,
        /// The branch it was committed on.
        branch: String,
        /// When.
        at: String,
        /// Each push, oldest first (absent in status files written before partial pushes).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pushes: Vec<PushRecord>,
    },
    /// Thrown away (what a partly pushed commit had pushed stays recorded).
    Discarded {
        /// When.
        at: String,
        /// The pushes made before the rest was discarded.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pushes: Vec<PushRecord>,
    },
    /// Folded into a combined staged commit (`batch --stage-as-one`): kept as the record of its
    /// document, pushed only as part of `into`.
    Merged {
        /// The combined staged commit.
        into: String,
        /// When.
        at: String,
    },
}

impl Status {
    /// The one-word form for listings.
    pub fn word(&self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Partial { .. } => "partial",
            Status::Pushed { .. } => "pushed",
            Status::Discarded { .. } => "discarded",
            Status::Merged { .. } => "merged",
        }
    }

    /// Whether files are still waiting for review: pending or partly pushed. Only these may be
    /// pushed or discarded.
    pub fn is_open(&self) -> bool {
        matches!(self, Status::Pending | Status::Partial { .. })
    }

    /// The pushes recorded so far, oldest first.
    pub fn pushes(&self) -> &[PushRecord] {
        match self {
            Status::Partial { pushes }
            | Status::Pushed { pushes, .. }
            | Status::Discarded { pushes, .. } => pushes,
            Status::Pending | Status::Merged { .. } => &[],
        }
    }

    /// Each staged path already pushed, with the push that committed it.
    pub fn pushed_files(&self) -> BTreeMap<&str, &PushRecord> {
        self.pushes()
            .iter()
            .flat_map(|p| p.files.iter().map(move |f| (f.as_str(), p)))
            .collect()
    }

    /// The status after `record` is pushed from this one, of a staged commit whose files are
    /// `all`: pushed when nothing is left, else partial. `None` when this status cannot be
    /// pushed, or `record` pushes nothing or a file already pushed.
    pub fn after_push(&self, record: PushRecord, all: &[String]) -> Option<Status> {
        if !self.is_open() || record.files.is_empty() {
            return None;
        }
        let done = self.pushed_files();
        if record.files.iter().any(|f| done.contains_key(f.as_str())) {
            return None;
        }
        let mut covered: BTreeSet<&str> = done.into_keys().collect();
        covered.extend(record.files.iter().map(String::as_str));
        let complete = all.iter().all(|f| covered.contains(f.as_str()));
        let mut pushes = self.pushes().to_vec();
        pushes.push(record.clone());
        Some(if complete {
            Status::Pushed {
                commit: record.commit,
                branch: record.branch,
                at: record.at,
                pushes,
            }
        } else {
            Status::Partial { pushes }
        })
    }

    /// Whether moving from this status to `next` is forward: from pending to anything else; from
    /// partial to a later partial, pushed or discarded that keeps every push recorded so far.
    pub fn may_become(&self, next: &Status) -> bool {
        match (self, next) {
            (Status::Pending, next) => *next != Status::Pending,
            (Status::Partial { pushes: old }, Status::Partial { pushes: new }) => {
                new.len() > old.len() && new.starts_with(old)
            }
            (Status::Partial { pushes: old }, Status::Pushed { pushes: new, .. }) => {
                new.len() > old.len() && new.starts_with(old)
            }
            (Status::Partial { pushes: old }, Status::Discarded { pushes: new, .. }) => new == old,
            _ => false,
        }
    }
}

impl Stage {
    /// Moves a staged commit to `next` under the stage lock, only forward
    /// ([`Status::may_become`]); any other move is refused.
    pub fn transition(&self, id: &str, next: &Status) -> Result<(), StageError> {
        let mut lock = self.lock()?;
        self.transition_locked(&mut lock, id, next)
    }

    /// [`Stage::transition`] for a caller that already holds the stage lock (flock is per open
    /// file, so taking it twice in one process would deadlock).
    pub fn transition_locked(
        &self,
        _held: &mut crate::home::FileLock,
        id: &str,
        next: &Status,
    ) -> Result<(), StageError> {
        let current = self.status(id)?;
        if !current.may_become(next) {
            return Err(StageError::NotPending {
                id: id.to_string(),
                status: current.word().to_string(),
                wanted: next.word().to_string(),
            });
        }
        write_status(self, id, next)
    }

    /// Records one push of `id` (whose files are `all`) under the held stage lock: partial
    /// while files are left, pushed when none are. Returns the new status.
    pub fn record_push_locked(
        &self,
        held: &mut crate::home::FileLock,
        id: &str,
        record: PushRecord,
        all: &[String],
    ) -> Result<Status, StageError> {
        let current = self.status(id)?;
        let next = current
            .after_push(record, all)
            .ok_or_else(|| StageError::NotPending {
                id: id.to_string(),
                status: current.word().to_string(),
                wanted: "pushed".into(),
            })?;
        self.transition_locked(held, id, &next)?;
        Ok(next)
    }
}

/// Writes a status atomically (callers hold the stage lock; use [`Stage::transition`]).
fn write_status(stage: &Stage, id: &str, status: &Status) -> Result<(), StageError> {
    let path = stage.dir(id).join(STATUS);
    let json = to_json(&path, status)?;
    write_atomic(&path, &json).map_err(io(&path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(files: &[&str], commit: &str) -> PushRecord {
        PushRecord {
            files: files.iter().map(|f| f.to_string()).collect(),
            commit: commit.into(),
            branch: "b".into(),
            repo: "/r".into(),
            remote: None,
            at: "now".into(),
        }
    }

    fn all() -> Vec<String> {
        ["a", "b", "c"].iter().map(|f| f.to_string()).collect()
    }

    #[test]
    fn parts_accumulate_until_every_file_is_pushed() {
        let first = Status::Pending
            .after_push(push(&["a"], "c1"), &all())
            .unwrap();
        assert_eq!(first.word(), "partial");
        assert!(first.is_open() && Status::Pending.may_become(&first));
        let second = first.after_push(push(&["b"], "c2"), &all()).unwrap();
        assert_eq!(second.word(), "partial");
        assert!(first.may_become(&second));
        let done = second.after_push(push(&["c"], "c3"), &all()).unwrap();
        assert_eq!(done.word(), "pushed");
        assert!(second.may_become(&done) && !done.is_open());
        assert_eq!(done.pushes().len(), 3);
        assert_eq!(done.pushed_files()["b"].commit, "c2");
        assert!(
            done.after_push(push(&["a"], "c4"), &all()).is_none(),
            "pushed is final"
        );
    }

    #[test]
    fn a_file_is_pushed_once_and_a_push_of_everything_is_pushed_at_once() {
        let first = Status::Pending
            .after_push(push(&["a"], "c1"), &all())
            .unwrap();
        assert!(first.after_push(push(&["a", "b"], "c2"), &all()).is_none());
        assert!(first.after_push(push(&[], "c2"), &all()).is_none());
        let whole = Status::Pending
            .after_push(push(&["a", "b", "c"], "c1"), &all())
            .unwrap();
        assert!(matches!(whole, Status::Pushed { ref commit, .. } if commit == "c1"));
    }

    #[test]
    fn statuses_move_forward_only_and_keep_what_was_pushed() {
        let partial = Status::Partial {
            pushes: vec![push(&["a"], "c1")],
        };
        let discarded = |pushes| Status::Discarded {
            at: "now".into(),
            pushes,
        };
        assert!(partial.may_become(&discarded(vec![push(&["a"], "c1")])));
        assert!(
            !partial.may_become(&discarded(vec![])),
            "a discard may not forget a push"
        );
        assert!(!partial.may_become(&Status::Pending));
        assert!(!partial.may_become(&partial.clone()));
        let merged = Status::Merged {
            into: "x".into(),
            at: "now".into(),
        };
        assert!(Status::Pending.may_become(&merged));
        assert!(!partial.may_become(&merged));
        for last in [discarded(vec![]), merged] {
            assert!(!last.is_open());
            assert!(!last.may_become(&discarded(vec![])));
            assert!(!last.may_become(&Status::Pending));
        }
    }

    #[test]
    fn status_files_written_before_partial_pushes_still_load() {
        let old: Status = serde_json::from_str(
            r#"{"status":"pushed","commit":"c","branch":"b","at":"2026-01-01T00:00:00Z"}"#,
        )
        .unwrap();
        assert!(matches!(old, Status::Pushed { ref pushes, .. } if pushes.is_empty()));
        let old: Status = serde_json::from_str(r#"{"status":"discarded","at":"t"}"#).unwrap();
        assert_eq!(old.word(), "discarded");
        let old: Status = serde_json::from_str(r#"{"status":"pending"}"#).unwrap();
        assert_eq!(old, Status::Pending);
        let partial = Status::Partial {
            pushes: vec![push(&["a"], "c1")],
        };
        let text = serde_json::to_string(&partial).unwrap();
        assert!(text.contains(r#""status":"partial""#), "{text}");
        assert_eq!(serde_json::from_str::<Status>(&text).unwrap(), partial);
    }
}
