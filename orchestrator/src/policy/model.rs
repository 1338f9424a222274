//! The `model:` section of a policy: which models a session's worker may reach through the host
//! gateway, and how much it may spend.
//!
//! The upstream and the key are never here: a policy says *whether* and *how much*, the host's
//! own configuration (`gateway::config`) says *where* and *with what*. That split is what lets a
//! project file or a worker definition narrow model access without ever being able to point it
//! somewhere else.

use serde::{Deserialize, Serialize};

use crate::units::{Limit, Size};

/// The allowlist entry that stands for whatever model the host's `GOLEM_MODEL` names.
pub const HOST_MODEL: &str = "host";

/// The most one request body may be, whatever a policy file says: the gateway holds a body in
/// memory while it checks it, so an unbounded cap would let a worker exhaust the host.
pub const MAX_REQUEST_BYTES_CEILING: Size = Size(64 << 20);

/// The most requests one session may have in flight at once, whatever a policy file says.
pub const MAX_CONCURRENT_CEILING: u64 = 64;

/// Model access for one trust level. Budgets are per session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPolicy {
    /// Model names the worker may ask for; [`HOST_MODEL`] is the host's default model. Empty
    /// means no model access at all, so a policy file written before this section existed (and
    /// so without it) grants nothing.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Requests forwarded per session.
    pub max_requests: u64,
    /// Input (prompt) tokens per session, as the provider reports them.
    pub max_input_tokens: u64,
    /// Output (completion) tokens per session; each request reserves its `max_tokens` from it.
    pub max_output_tokens: u64,
    /// Requests in flight at once; more wait briefly, then are refused.
    pub max_concurrent: u64,
    /// How long one upstream request may take before the worker gets a 504.
    pub request_timeout: Limit,
    /// Bytes of one request body, enforced while it is read.
    pub max_request_bytes: Size,
}

impl Default for ModelPolicy {
    /// No model access: what a policy file without a `model:` section means.
    fn default() -> Self {
        ModelPolicy {
            allow: Vec::new(),
            max_requests: 0,
            max_input_tokens: 0,
            max_output_tokens: 0,
            max_concurrent: 1,
            request_timeout: Limit(std::time::Duration::from_secs(60)),
            max_request_bytes: Size(1 << 20),
        }
    }
}

impl ModelPolicy {
    /// Whether a session under this policy gets a gateway at all.
    pub fn grants_access(&self) -> bool {
        !self.allow.is_empty()
    }

    /// The invariants [`super::Policy::validate`] checks for this section, as `(key, why)`.
    pub(super) fn validate(&self) -> Result<(), (String, String)> {
        let err = |k: &str, m: String| Err((format!("model.{k}"), m));
        if let Some(name) = self.allow.iter().find(|n| !valid_model_name(n)) {
            return err("allow", format!("{name:?} is not a model name"));
        }
        if self.max_concurrent == 0 {
            return err("max_concurrent", "must be greater than zero".into());
        }
        if self.max_concurrent > MAX_CONCURRENT_CEILING {
            return err(
                "max_concurrent",
                format!("may be at most {MAX_CONCURRENT_CEILING}"),
            );
        }
        if self.request_timeout.duration().is_zero() {
            return err("request_timeout", "must be greater than zero".into());
        }
        if self.max_request_bytes.bytes() == 0 {
            return err("max_request_bytes", "must be greater than zero".into());
        }
        if self.max_request_bytes > MAX_REQUEST_BYTES_CEILING {
            return err(
                "max_request_bytes",
                format!("may be at most {MAX_REQUEST_BYTES_CEILING}"),
            );
        }
        Ok(())
    }
}

/// A model name as providers spell them (`claude-sonnet-4-5`, `gpt-4o-mini`,
/// `llama3.1:8b`, `org/model`): printable, no spaces, bounded, so it is safe in logs and errors.
pub fn valid_model_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/@".contains(c))
}
