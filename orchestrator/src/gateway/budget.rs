//! The session's model budget: reserve before forwarding, settle on what the provider reports.
//!
//! A request is charged before it leaves: one request, its `max_tokens` against the output
//! budget and an estimate of its input against the input budget. Reservation and the checks are
//! one step under one lock, so twenty requests racing for the last five slots forward exactly
//! five. When the answer comes back the reservation is released and the provider's reported
//! usage charged instead; when there is no usage (a timeout, a transport error, an answer
//! without a `usage` object) the reservation itself is charged, because the provider may well
//! have billed for it.

use std::sync::{Mutex, MutexGuard};

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
}

/// A charge held for one forwarded request until [`Budget::settle`].
#[derive(Debug)]
#[must_use = "a reservation must be settled or it stays charged"]
pub struct Reservation {
    input: u64,
    output: u64,
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
        }
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

    /// Charges one request, `max_tokens` output and `input_estimate` input tokens, or says
    /// why the budget cannot cover them.
    pub fn reserve(&self, max_tokens: u64, input_estimate: u64) -> Result<Reservation, Exhausted> {
        let mut s = self.lock();
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
        s.spent.requests += 1;
        s.input_reserved += input_estimate;
        s.output_reserved += max_tokens;
        Ok(Reservation {
            input: input_estimate,
            output: max_tokens,
        })
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
