//! How a session's ending reads to a script: one mapping from a session's status (and its
//! worker's exit code) to a batch document's status, and from that to the process exit code.
//!
//! `run` and `batch` used to spell the mapping out separately; here it is written once, so a
//! new ending cannot be reported one way by `run` and another by `batch`.

use serde::Serialize;

use crate::batch::{BatchState, DocStatus, Record};
use crate::gateway::ModelUsage;
use crate::session::{Outcome, SessionStatus};

impl SessionStatus {
    /// What a session ending this way means for its document: staged with exit 0 is a
    /// success, staged with any other exit (or none) is partial, and anything not final
    /// (the orchestrator stopped watching) is a failure.
    pub fn doc_status(self, worker_exit: Option<i64>) -> DocStatus {
        match self {
            SessionStatus::Staged if worker_exit == Some(0) => DocStatus::Staged,
            SessionStatus::Staged => DocStatus::Partial,
            SessionStatus::Timeout => DocStatus::Timeout,
            SessionStatus::Oom => DocStatus::Oom,
            SessionStatus::Rejected => DocStatus::Rejected,
            SessionStatus::Cancelled => DocStatus::Cancelled,
            SessionStatus::Created
            | SessionStatus::Running
            | SessionStatus::Extracting
            | SessionStatus::Failed => DocStatus::Failed,
        }
    }

    /// The exit code `golem-orch run` ends with (documented in `run --help`).
    pub fn exit_code(self, worker_exit: Option<i64>) -> u8 {
        self.doc_status(worker_exit).exit_code()
    }
}

impl DocStatus {
    /// The exit code a session with this ending gives `golem-orch run`: 0 staged and the
    /// worker succeeded, 3 staged but the worker failed, 4 timeout, 5 out of memory, 6 output
    /// rejected, 130 cancelled, 1 anything else.
    pub fn exit_code(self) -> u8 {
        match self {
            DocStatus::Staged => 0,
            DocStatus::Partial => 3,
            DocStatus::Timeout => 4,
            DocStatus::Oom => 5,
            DocStatus::Rejected => 6,
            DocStatus::Cancelled => 130,
            DocStatus::Pending | DocStatus::Running | DocStatus::Failed => 1,
        }
    }
}

impl Outcome {
    /// The document status of this session's ending.
    pub fn doc_status(&self) -> DocStatus {
        self.status.doc_status(self.exit_code)
    }

    /// The exit code `golem-orch run` ends with for this session.
    pub fn process_exit_code(&self) -> u8 {
        self.status.exit_code(self.exit_code)
    }
}

impl Record {
    /// The exit code `golem-orch batch` ends with (documented in `batch --help`): 130 when
    /// cancelled, 0 when every document was staged and its worker succeeded, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self.state {
            BatchState::Cancelled => 130,
            _ if self.documents.iter().all(|d| d.status == DocStatus::Staged) => 0,
            _ => 1,
        }
    }
}

/// Counts for the summary table and `--json`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Documents in the batch.
    pub total: usize,
    /// Staged with exit 0.
    pub succeeded: usize,
    /// Staged with a non-zero exit.
    pub partial: usize,
    /// Failed.
    pub failed: usize,
    /// Timed out.
    pub timed_out: usize,
    /// OOM-killed.
    pub oom: usize,
    /// Output rejected as a whole.
    pub rejected: usize,
    /// Not run (cancelled or pending).
    pub not_run: usize,
    /// Failed for a reason outside the document; `--resume` runs them again.
    pub retryable: usize,
    /// Entries rejected across all documents.
    pub rejected_entries: u64,
    /// Bytes staged across all documents.
    pub bytes_staged: u64,
    /// Model use summed over the documents; absent when none had model access.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelUsage>,
    /// Warnings the documents' report workers claim, summed.
    pub warnings: u64,
    /// Documents with at least one high warning: the ones to read first.
    pub high_warning_documents: usize,
}

impl Record {
    /// The summary of the documents' outcomes.
    pub fn summary(&self) -> Summary {
        let mut s = Summary {
            total: self.documents.len(),
            ..Summary::default()
        };
        for d in &self.documents {
            match d.status {
                DocStatus::Staged => s.succeeded += 1,
                DocStatus::Partial => s.partial += 1,
                DocStatus::Failed => {
                    s.failed += 1;
                    s.retryable += usize::from(d.retry);
                }
                DocStatus::Timeout => s.timed_out += 1,
                DocStatus::Oom => s.oom += 1,
                DocStatus::Rejected => s.rejected += 1,
                DocStatus::Pending | DocStatus::Running | DocStatus::Cancelled => s.not_run += 1,
            }
            s.rejected_entries += d.rejected;
            s.bytes_staged += d.bytes;
            s.model = ModelUsage::sum(s.model, d.model);
            if let Some(w) = &d.warnings {
                s.warnings = s.warnings.saturating_add(w.total);
                s.high_warning_documents += usize::from(w.inputs_high > 0);
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ending_has_one_document_status_and_one_exit_code() {
        let cases = [
            (SessionStatus::Staged, Some(0), DocStatus::Staged, 0),
            (SessionStatus::Staged, Some(2), DocStatus::Partial, 3),
            (SessionStatus::Staged, None, DocStatus::Partial, 3),
            (SessionStatus::Timeout, None, DocStatus::Timeout, 4),
            (SessionStatus::Oom, Some(137), DocStatus::Oom, 5),
            (SessionStatus::Rejected, Some(0), DocStatus::Rejected, 6),
            (SessionStatus::Cancelled, None, DocStatus::Cancelled, 130),
            (SessionStatus::Failed, Some(0), DocStatus::Failed, 1),
            (SessionStatus::Created, None, DocStatus::Failed, 1),
            (SessionStatus::Running, None, DocStatus::Failed, 1),
            (SessionStatus::Extracting, None, DocStatus::Failed, 1),
        ];
        for (status, exit, doc, code) in cases {
            assert_eq!(status.doc_status(exit), doc, "{status:?} {exit:?}");
            assert_eq!(status.exit_code(exit), code, "{status:?} {exit:?}");
        }
    }

    #[test]
    fn an_outcome_reads_through_the_same_mapping() {
        let outcome = Outcome {
            session: "s".into(),
            status: SessionStatus::Staged,
            exit_code: Some(1),
            staged: Some("x".into()),
            timed_out: false,
            oom_killed: false,
            files: 1,
            bytes: 1,
            rejected: 0,
            error: None,
            logs: "logs.txt".into(),
            host_failure: false,
            model: None,
            warnings: None,
        };
        assert_eq!(outcome.doc_status(), DocStatus::Partial);
        assert_eq!(outcome.process_exit_code(), 3);
    }

    #[test]
    fn a_batch_succeeds_only_when_every_document_did() {
        let doc = |status| crate::batch::tests::doc(status, false);
        let settings = crate::batch::Settings {
            spec: crate::spec::RunSpec::new(crate::policy::TrustLevel::Untrusted),
            jobs: 1,
            stage_as_one: false,
        };
        let mut r = crate::batch::new_record(settings, vec![doc(DocStatus::Staged)], vec![]);
        r.state = BatchState::Finished;
        assert_eq!(r.exit_code(), 0);
        r.documents.push(doc(DocStatus::Partial));
        assert_eq!(r.exit_code(), 1);
        r.state = BatchState::Cancelled;
        assert_eq!(r.exit_code(), 130);
    }

    #[test]
    fn a_batch_summary_counts_warnings_and_the_documents_with_a_high_one() {
        use crate::warnings::{Severity, WarningSummary};
        let warned = |total, highest: Option<Severity>| crate::batch::Document {
            warnings: Some(WarningSummary {
                total,
                inputs_high: u64::from(highest == Some(Severity::High)),
                highest,
                ..WarningSummary::default()
            }),
            ..crate::batch::tests::doc(DocStatus::Staged, false)
        };
        let settings = crate::batch::Settings {
            spec: crate::spec::RunSpec::new(crate::policy::TrustLevel::Untrusted),
            jobs: 1,
            stage_as_one: false,
        };
        let docs = vec![
            warned(3, Some(Severity::High)),
            warned(2, Some(Severity::Low)),
            warned(u64::MAX, Some(Severity::High)),
            crate::batch::tests::doc(DocStatus::Failed, false),
        ];
        let s = crate::batch::new_record(settings, docs, vec![]).summary();
        assert_eq!((s.warnings, s.high_warning_documents), (u64::MAX, 2));
    }
}
