//! The session's model budget: reserve before forwarding, settle on what the provider reports.
//!
//! A request is charged before it leaves: one request, its `max_tokens` against the output
//! budget and an estimate of its input against the input budget. Reservation and the checks are
//! one step under one lock, so twenty requests racing for the last five slots forward exactly
//! five. When the answer comes back the reservation is released and the provider's reported
//! usage charged instead; when there is no usage (a timeout, a transport error, an answer
//! without a `usage` object) the reservation itself is charged, because the provider may well
//! have billed for it.
//!
//! A batch may also share one [`BatchBudget`] across all its documents' sessions: model tokens,
//! input and output together (one number a person can reason about as "what this batch may
//! cost"). A session's request is reserved against both in one step, under the session's lock
//! and then the batch's (always in that order, so sessions never deadlock), so documents racing
//! for the batch's last tokens together spend at most the cap.

use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;

use crate::policy::ModelPolicy;

/// What is left of a session's budget, as `GET /golem/info` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Left {
    /// Requests that may still be forwarded.
    pub requests: u64,
    /// Input tokens not yet used or reserved.
    pub input_tokens: u64,
    /// Output tokens not yet used or reserved.
    pub output_tokens: u64,
}

/// What was spent: forwarded requests and the tokens charged for them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Spent {
    /// Requests forwarded upstream.
    pub requests: u64,
    /// Input tokens charged.
    pub input_tokens: u64,
    /// Output tokens charged.
    pub output_tokens: u64,
}

/// Why a request could not be covered; becomes a 429 with this text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Exhausted {
    /// No requests left.
    #[error("the session's model request budget ({max}) is used up")]
    Requests {
        /// The session's cap.
        max: u64,
    },
    /// The request's `max_tokens` is more than the output budget has left.
    #[error("max_tokens {asked} is more than the {left} output tokens left in this session")]
    Output {
        /// `max_tokens` of the request.
        asked: u64,
        /// Output tokens left.
        left: u64,
    },
    /// The request's estimated input is more than the input budget has left.
    #[error("the request's input (about {asked} tokens) is more than the {left} input tokens left in this session")]
    Input {
        /// Estimated input tokens.
        asked: u64,
        /// Input tokens left.
        left: u64,
    },
    /// The whole batch's shared token budget cannot cover the request.
    #[error("the batch's model budget ({cap} tokens, input and output together, shared by every document of the batch) has {left} tokens left; this request needs about {asked}")]
    Batch {
        /// Estimated input plus `max_tokens`.
        asked: u64,
        /// Batch tokens left.
        left: u64,
        /// The batch's cap.
        cap: u64,
    },
}

/// One budget of model tokens (input and output together) shared by every session of a batch,
/// on top of each session's own [`Budget`]: `batch --batch-model-budget TOKENS`.
#[derive(Debug)]
pub struct BatchBudget {
    cap: u64,
    state: Mutex<BatchState>,
}

#[derive(Debug, Default)]
struct BatchState {
    spent: u64,
    reserved: u64,
}

impl BatchBudget {
    /// A batch budget of `cap` tokens of which `spent` are already gone (a resumed batch starts
    /// with what its record says its documents spent).
    pub fn new(cap: u64, spent: u64) -> BatchBudget {
        BatchBudget {
            cap,
            state: Mutex::new(BatchState { spent, reserved: 0 }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BatchState> {
        // Plain counters, consistent after every statement (as in `Budget::lock`).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cap.
    pub fn cap(&self) -> u64 {
        self.cap
    }

    /// Tokens neither spent nor reserved.
    pub fn left(&self) -> u64 {
        let s = self.lock();
        self.cap.saturating_sub(s.spent.saturating_add(s.reserved))
    }

    /// Tokens charged so far (settled requests and the spend a resume started from).
    pub fn spent(&self) -> u64 {
        self.lock().spent
    }
}

/// A charge held for one forwarded request until [`Budget::settle`].
#[derive(Debug)]
#[must_use = "a reservation must be settled or it stays charged"]
pub struct Reservation {
    input: u64,
    output: u64,
}

impl Reservation {
    /// What the reservation holds of a batch budget: input and output together.
    fn batch_tokens(&self) -> u64 {
        self.input.saturating_add(self.output)
    }
}

#[derive(Debug, Default)]
struct State {
    spent: Spent,
    input_reserved: u64,
    output_reserved: u64,
}

/// One session's budget. Shared by every connection of the session.
#[derive(Debug)]
pub struct Budget {
    max_requests: u64,
    max_input: u64,
    max_output: u64,
    state: Mutex<State>,
    batch: Option<Arc<BatchBudget>>,
}

/// A rough, deliberately high token estimate for a request body: one token per three bytes.
/// Providers count about four bytes per token of English; over-reserving only refuses a request
/// near the end of a budget, under-reserving would let one overshoot it.
pub fn estimate_input_tokens(body_len: usize) -> u64 {
    (body_len as u64).div_ceil(3)
}

impl Budget {
    /// A fresh budget with the policy's per-session caps.
    pub fn new(policy: &ModelPolicy) -> Budget {
        Budget {
            max_requests: policy.max_requests,
            max_input: policy.max_input_tokens,
            max_output: policy.max_output_tokens,
            state: Mutex::new(State::default()),
            batch: None,
        }
    }

    /// A fresh budget with the policy's per-session caps that also reserves from, and settles
    /// on, the batch's shared `batch` budget.
    pub fn with_batch(policy: &ModelPolicy, batch: Option<Arc<BatchBudget>>) -> Budget {
        Budget {
            batch,
            ..Budget::new(policy)
        }
    }

    /// The batch budget this session shares, if any.
    pub fn batch(&self) -> Option<&BatchBudget> {
        self.batch.as_deref()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is plain counters, consistent after every statement; a panic elsewhere
        // while holding the lock cannot leave it half-updated.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn left_in(&self, s: &State) -> Left {
        Left {
            requests: self.max_requests.saturating_sub(s.spent.requests),
            input_tokens: self
                .max_input
                .saturating_sub(s.spent.input_tokens + s.input_reserved),
            output_tokens: self
                .max_output
                .saturating_sub(s.spent.output_tokens + s.output_reserved),
        }
    }

    /// What is left now.
    pub fn left(&self) -> Left {
        let s = self.lock();
        self.left_in(&s)
    }

    /// What has been charged so far (settled requests; reservations not included).
    pub fn spent(&self) -> Spent {
        self.lock().spent
    }

    /// Charges one request, `max_tokens` output and `input_estimate` input tokens, against the
    /// session's budget and the batch's (if any) in one step, or says which cannot cover them.
    pub fn reserve(&self, max_tokens: u64, input_estimate: u64) -> Result<Reservation, Exhausted> {
        let mut s = self.lock();
        // The session's lock is held while the batch's is taken: the two reservations are one.
        let mut batch = self.batch.as_ref().map(|b| (b.cap, b.lock()));
        let left = self.left_in(&s);
        if left.requests == 0 {
            return Err(Exhausted::Requests {
                max: self.max_requests,
            });
        }
        if max_tokens > left.output_tokens {
            return Err(Exhausted::Output {
                asked: max_tokens,
                left: left.output_tokens,
            });
        }
        if input_estimate > left.input_tokens {
            return Err(Exhausted::Input {
                asked: input_estimate,
                left: left.input_tokens,
            });
        }
        let r = Reservation {
            input: input_estimate,
            output: max_tokens,
        };
        if let Some((cap, b)) = batch.as_mut() {
            let left = cap.saturating_sub(b.spent.saturating_add(b.reserved));
            if r.batch_tokens() > left {
                return Err(Exhausted::Batch {
                    asked: r.batch_tokens(),
                    left,
                    cap: *cap,
                });
            }
            b.reserved += r.batch_tokens();
        }
        s.spent.requests += 1;
        s.input_reserved += input_estimate;
        s.output_reserved += max_tokens;
        Ok(r)
    }

    /// Releases `r` and charges the provider's reported `(input, output)` usage, or the
    /// reservation itself when the provider reported none.
    pub fn settle(&self, r: Reservation, usage: Option<(u64, u64)>) {
        let mut s = self.lock();
        s.input_reserved -= r.input;
        s.output_reserved -= r.output;
        let (input, output) = usage.unwrap_or((r.input, r.output));
        s.spent.input_tokens += input;
        s.spent.output_tokens += output;
        if let Some(batch) = &self.batch {
            let mut b = batch.lock();
            b.reserved -= r.batch_tokens();
            b.spent = b.spent.saturating_add(input.saturating_add(output));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(requests: u64, input: u64, output: u64) -> ModelPolicy {
        ModelPolicy {
            allow: vec!["host".into()],
            max_requests: requests,
            max_input_tokens: input,
            max_output_tokens: output,
            ..ModelPolicy::default()
        }
    }

    #[test]
    fn reserve_then_settle_on_reported_usage() {
        let b = Budget::new(&policy(3, 1000, 100));
        let r = b.reserve(60, 200).unwrap();
        assert_eq!(
            b.left(),
            Left {
                requests: 2,
                input_tokens: 800,
                output_tokens: 40
            }
        );
        // max_tokens over what is left is refused before anything is sent.
        assert_eq!(
            b.reserve(50, 1).unwrap_err(),
            Exhausted::Output {
                asked: 50,
                left: 40
            }
        );
        b.settle(r, Some((150, 20)));
        assert_eq!(b.left().output_tokens, 80);
        assert_eq!(
            b.spent(),
            Spent {
                requests: 1,
                input_tokens: 150,
                output_tokens: 20
            }
        );
        // No usage reported: the reservation is what is charged.
        let r = b.reserve(10, 30).unwrap();
        b.settle(r, None);
        assert_eq!(b.spent().input_tokens, 180);
        assert_eq!(b.spent().output_tokens, 30);
        assert!(matches!(b.reserve(1, 900), Err(Exhausted::Input { .. })));
        let r = b.reserve(1, 1).unwrap();
        b.settle(r, Some((1, 1)));
        assert_eq!(b.reserve(1, 1).unwrap_err(), Exhausted::Requests { max: 3 });
    }

    #[test]
    fn a_batch_budget_is_reserved_and_settled_with_the_sessions() {
        let batch = Arc::new(BatchBudget::new(100, 30));
        let a = Budget::with_batch(&policy(10, 1000, 1000), Some(batch.clone()));
        let b = Budget::with_batch(&policy(10, 1000, 1000), Some(batch.clone()));
        assert_eq!(batch.left(), 70);
        let r = a.reserve(20, 20).unwrap();
        assert_eq!(batch.left(), 30);
        // The other session's request is refused by the batch, and its own budget is untouched.
        assert_eq!(
            b.reserve(20, 11).unwrap_err(),
            Exhausted::Batch {
                asked: 31,
                left: 30,
                cap: 100
            }
        );
        assert_eq!(b.left().requests, 10);
        assert_eq!(b.left().output_tokens, 1000);
        // Settling on a smaller reported usage frees the rest for everyone.
        a.settle(r, Some((5, 5)));
        assert_eq!(batch.spent(), 40);
        assert_eq!(batch.left(), 60);
        let r = b.reserve(20, 11).unwrap();
        // No usage reported: the reservation is what the batch is charged.
        b.settle(r, None);
        assert_eq!(batch.spent(), 71);
        // A session refusal comes first and reserves nothing of the batch.
        assert!(matches!(a.reserve(2000, 1), Err(Exhausted::Output { .. })));
        assert_eq!(batch.left(), 29);
        // A resume that starts past the cap has nothing left, and says so.
        let over = Budget::with_batch(
            &policy(10, 1000, 1000),
            Some(Arc::new(BatchBudget::new(10, 50))),
        );
        assert_eq!(
            over.reserve(1, 1).unwrap_err(),
            Exhausted::Batch {
                asked: 2,
                left: 0,
                cap: 10
            }
        );
    }

    #[test]
    fn sessions_racing_for_the_last_batch_tokens_spend_at_most_the_cap() {
        let batch = Arc::new(BatchBudget::new(95, 0));
        let sessions: Vec<_> = (0..4)
            .map(|_| {
                Arc::new(Budget::with_batch(
                    &policy(100, 1 << 20, 1 << 20),
                    Some(batch.clone()),
                ))
            })
            .collect();
        let handles: Vec<_> = (0..40)
            .map(|i| {
                let b = sessions[i % 4].clone();
                std::thread::spawn(move || b.reserve(5, 5).map(|r| b.settle(r, None)))
            })
            .collect();
        let ok = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(Result::is_ok)
            .count();
        assert_eq!(ok, 9);
        assert_eq!(batch.spent(), 90);
        let total: u64 = sessions
            .iter()
            .map(|s| s.spent().input_tokens + s.spent().output_tokens)
            .sum();
        assert_eq!(total, 90);
    }

    #[test]
    fn parallel_reservations_never_exceed_the_request_cap() {
        let b = std::sync::Arc::new(Budget::new(&policy(5, 1 << 20, 1 << 20)));
        let handles: Vec<_> = (0..20)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || b.reserve(10, 10).map(|r| b.settle(r, Some((7, 3)))))
            })
            .collect();
        let ok = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(Result::is_ok)
            .count();
        assert_eq!(ok, 5);
        assert_eq!(
            b.spent(),
            Spent {
                requests: 5,
                input_tokens: 35,
                output_tokens: 15
            }
        );
    }
}
