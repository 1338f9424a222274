//! The model gateway: a session's only way to a language model, holding the key on the host.
//!
//! An AI worker needs a model, and a model needs a network and a credential; the container gets
//! neither. Instead each session that may use a model gets one Unix socket, in a fresh 0700
//! directory, owned by the session's uid, which the session bind-mounts into the container.
//! Behind it this module speaks HTTP/1.1 and serves exactly one provider path (the Anthropic
//! Messages API or the OpenAI Chat Completions API, per the host's [`config::Upstream`]) plus
//! `GET /golem/info`. It refuses everything else, checks each request against the session's
//! `model:` policy (allowlist, body size, budget, concurrency), adds the host's key and
//! forwards it, and records every request: an audit event through the session's [`EventSink`]
//! and the full request/response pair in the session's transcript.
//!
//! The session is whichever socket the connection came in on; nothing the worker sends can
//! name another. The worker gets a fake key (the [`honeytoken`]) in its environment, so a
//! worker that sends its environment to the model is caught.
//!
//! Module map: `config` (host upstream and key), `check` (refusals), `budget` (reserve and
//! settle), `forward` (the upstream request), `server` (socket and HTTP), `transcript`.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Value};
use tokio::net::UnixListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::audit::Event;
use crate::policy::{ModelPolicy, HOST_MODEL};

pub mod budget;
pub mod check;
pub mod config;
mod forward;
mod server;
pub mod transcript;

pub use budget::BatchBudget;
pub use config::{host_config_path, ConfigError, ModelApi, ModelKey, Upstream};

/// The socket's file name inside the session's socket directory.
pub const SOCKET_NAME: &str = "model.sock";
/// Where the session mounts the socket in the container: this prefix, 32 random hex digits and
/// `.sock`, drawn afresh for every plan, as the init's target is
/// ([`crate::plan::INIT_TARGET_PREFIX`]). runc resolves a mount's target through the image's
/// own symlinks and creates the mount point wherever it lands: at a fixed path such as
/// `/run/golem/model.sock`, an image whose `/run/golem` is a symlink to `/workspace` made the
/// engine create an empty, root-owned `model.sock` in the project's workspace on the host (and
/// at `full`, in the repository). A name nobody knows before the plan cannot be planted. The
/// worker learns it from [`SOCKET_ENV`].
pub const CONTAINER_SOCKET_PREFIX: &str = "/.golem-model-";
/// The variable that tells the worker where the socket is.
pub const SOCKET_ENV: &str = "GOLEM_MODEL_SOCKET";

/// Where the session's audit events go: the session writes them to its audit log. Called from
/// the gateway's tasks, once per request and once per honeytoken sighting.
pub type EventSink = Arc<dyn Fn(Event) + Send + Sync>;

/// Everything a session hands the gateway.
pub struct GatewaySpec<'a> {
    /// A directory that must not exist yet; it is created 0700 and holds the socket.
    pub socket_dir: PathBuf,
    /// The transcript file to create (JSONL, 0600); must not exist yet.
    pub transcript: PathBuf,
    /// The session worker's uid: the socket's owner when golem-orch runs as root.
    pub uid: u32,
    /// The session worker's gid.
    pub gid: u32,
    /// The session's effective `model:` policy.
    pub policy: &'a ModelPolicy,
    /// The host's upstream and key.
    pub upstream: Arc<Upstream>,
    /// The fake key the container gets; a request body carrying it is refused and flagged.
    pub honeytoken: Option<String>,
    /// The session id, for the audit events.
    pub session_id: String,
    /// The batch's shared budget, reserved from together with the session's own.
    pub batch_budget: Option<Arc<BatchBudget>>,
}

impl std::fmt::Debug for GatewaySpec<'_> {
    /// Leaves the honeytoken out: it is looked for in the session's logs, so printing it in
    /// one would raise a false alarm.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewaySpec")
            .field("socket_dir", &self.socket_dir)
            .field("transcript", &self.transcript)
            .field("uid", &self.uid)
            .field("gid", &self.gid)
            .field("policy", &self.policy)
            .field("upstream", &self.upstream)
            .field("session_id", &self.session_id)
            .field("batch_budget", &self.batch_budget)
            .finish_non_exhaustive()
    }
}

/// What went wrong starting the gateway.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// Creating the directory, socket or transcript failed.
    #[error("model gateway: {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// The policy grants no model the host can name.
    #[error("model gateway: the policy allows no model this host names (allow: {allow:?}; `host` needs GOLEM_MODEL)")]
    NoModel {
        /// The policy's allowlist.
        allow: Vec<String>,
    },
    /// The HTTP client for the upstream could not be built.
    #[error("model gateway: HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

/// What a run asks of the model gateway: the host's upstream (its key never leaves the host) and
/// the person's `--model` choice, which must still be in the level's allowlist.
#[derive(Debug, Clone)]
pub struct ModelAccess {
    /// The host's upstream and key, from the host's environment or its config file only.
    pub upstream: Arc<Upstream>,
    /// `--model NAME`; `None` is the host's default model.
    pub model: Option<String>,
    /// `batch --batch-model-budget`: one token budget every document's session reserves from
    /// on top of its own, so a whole batch cannot spend more than the person allowed.
    pub batch_budget: Option<Arc<BatchBudget>>,
}

/// A session's use of the model, as `run --json` and `batch --json` report it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ModelUsage {
    /// Requests forwarded upstream.
    pub requests: u64,
    /// Input tokens charged.
    pub input_tokens: u64,
    /// Output tokens charged.
    pub output_tokens: u64,
    /// Requests the gateway refused.
    pub refused: u64,
}

impl ModelUsage {
    /// The two usages summed (saturating: a hostile record cannot wrap a batch's total), for a
    /// document's attempts and a batch's documents.
    pub fn sum(before: Option<ModelUsage>, now: Option<ModelUsage>) -> Option<ModelUsage> {
        match (before, now) {
            (Some(before), Some(now)) => Some(ModelUsage {
                requests: before.requests.saturating_add(now.requests),
                input_tokens: before.input_tokens.saturating_add(now.input_tokens),
                output_tokens: before.output_tokens.saturating_add(now.output_tokens),
                refused: before.refused.saturating_add(now.refused),
            }),
            (before, now) => now.or(before),
        }
    }
}

/// What the gateway did over a session, for `run --json` and the stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GatewayReport {
    /// Requests forwarded upstream.
    pub requests: u64,
    /// Input tokens charged.
    pub input_tokens: u64,
    /// Output tokens charged.
    pub output_tokens: u64,
    /// Requests the gateway answered itself with a refusal.
    pub refused: u64,
    /// Whether a request carried the honeytoken.
    pub honeytoken_seen: bool,
    /// The transcript file.
    pub transcript_path: PathBuf,
    /// Exchanges not wholly in it (the audit log still has their records).
    pub transcript_incomplete: u64,
}

/// State shared by every connection of one session's gateway.
struct Shared {
    session: String,
    api: ModelApi,
    /// The policy's allowlist with `host` resolved to the host's model.
    allowed: Vec<String>,
    policy: ModelPolicy,
    budget: budget::Budget,
    permits: Semaphore,
    forwarder: forward::Forwarder,
    transcript: transcript::Transcript,
    honeytoken: Option<String>,
    sink: EventSink,
    seq: AtomicU64,
    refused: AtomicU64,
    /// Honeytoken refusals so far.
    honeytokens: AtomicU64,
    /// Exchanges not wholly in the transcript (bodies left out, dropped, not recorded past the
    /// refusal cap, or a failed write).
    incomplete: AtomicU64,
    honeytoken_seen: AtomicBool,
}

impl Shared {
    fn emit(&self, event: &str, data: Value) {
        (self.sink)(Event::session(&self.session, event, data));
    }

    /// `GET /golem/info`: what the worker may ask for and what it has left.
    fn info(&self) -> Value {
        json!({
            "api": self.api.as_str(),
            "path": self.api.path(),
            "models": self.allowed,
            "default_model": self.allowed.first(),
            "budget_left": self.budget.left(),
            "batch_tokens_left": self.budget.batch().map(BatchBudget::left),
            "max_request_bytes": self.policy.max_request_bytes.bytes(),
            "max_concurrent": self.policy.max_concurrent,
            "streaming": false,
        })
    }
}

/// A running gateway; [`GatewayHandle::shutdown`] stops it and reports.
#[derive(Debug)]
pub struct GatewayHandle {
    socket: PathBuf,
    socket_dir: PathBuf,
    cancel: CancellationToken,
    task: JoinHandle<()>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// The policy's allowlist with `host` replaced by the host's model, in order, without repeats.
pub fn resolve_allowlist(policy: &ModelPolicy, upstream: &Upstream) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in &policy.allow {
        let resolved = if name == HOST_MODEL {
            upstream.default_model.clone()
        } else {
            Some(name.clone())
        };
        if let Some(n) = resolved.filter(|n| !out.contains(n)) {
            out.push(n);
        }
    }
    out
}

/// Starts the session's gateway: creates the socket directory, socket and transcript, and
/// serves until [`GatewayHandle::shutdown`]. Must be called inside a tokio runtime.
pub fn start(spec: GatewaySpec<'_>, sink: EventSink) -> Result<GatewayHandle, GatewayError> {
    let allowed = resolve_allowlist(spec.policy, &spec.upstream);
    if allowed.is_empty() {
        return Err(GatewayError::NoModel {
            allow: spec.policy.allow.clone(),
        });
    }
    let (listener, socket) = bind_socket(&spec.socket_dir, spec.uid, spec.gid)?;
    let transcript =
        transcript::Transcript::create(&spec.transcript).map_err(|source| GatewayError::Io {
            what: format!("creating {}", spec.transcript.display()),
            source,
        })?;
    let permits = usize::try_from(spec.policy.max_concurrent)
        .unwrap_or(1)
        .max(1);
    let shared = Arc::new(Shared {
        session: spec.session_id,
        api: spec.upstream.api,
        allowed,
        policy: spec.policy.clone(),
        budget: budget::Budget::with_batch(spec.policy, spec.batch_budget),
        permits: Semaphore::new(permits),
        forwarder: forward::Forwarder::new(spec.upstream)?,
        transcript,
        honeytoken: spec.honeytoken.filter(|t| !t.is_empty()),
        sink,
        seq: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        honeytokens: AtomicU64::new(0),
        incomplete: AtomicU64::new(0),
        honeytoken_seen: AtomicBool::new(false),
    });
    let cancel = CancellationToken::new();
    let task = tokio::spawn(server::serve(listener, shared.clone(), cancel.clone()));
    Ok(GatewayHandle {
        socket,
        socket_dir: spec.socket_dir,
        cancel,
        task,
        shared,
    })
}

/// Creates `dir` (0700, must not exist) and binds the socket in it. As root, the directory
/// and the socket (0600) are handed to the session's uid/gid: no other uid may traverse to or
/// connect to it. Unprivileged, neither can be given away; the socket is then 0666 inside the
/// person's 0700 directory, itself inside the session's 0700 directory, so no other host user
/// can reach it and only the bind mount of the socket file itself (which the session gives its
/// own container alone) does; or 0600 when the worker runs as the invoking user.
fn bind_socket(dir: &Path, uid: u32, gid: u32) -> Result<(UnixListener, PathBuf), GatewayError> {
    let io = |what: String| move |source| GatewayError::Io { what, source };
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(io(format!("creating {}", dir.display())))?;
    let socket = dir.join(SOCKET_NAME);
    let listener =
        UnixListener::bind(&socket).map_err(io(format!("binding {}", socket.display())))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mode = if me == 0 || me == uid { 0o600 } else { 0o666 };
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(mode))
        .map_err(io(format!("chmod {}", socket.display())))?;
    if me == 0 {
        std::os::unix::fs::chown(&socket, Some(uid), Some(gid))
            .map_err(io(format!("chown {}", socket.display())))?;
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))
            .map_err(io(format!("chown {}", dir.display())))?;
    }
    Ok((listener, socket))
}

impl GatewayHandle {
    /// The socket's host path, to bind-mount at a [`CONTAINER_SOCKET_PREFIX`] target.
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// What the session has spent so far.
    pub fn spent(&self) -> budget::Spent {
        self.shared.budget.spent()
    }

    /// Stops accepting, lets in-flight requests finish briefly, removes the socket and its
    /// directory, and reports what the session spent.
    pub async fn shutdown(mut self) -> GatewayReport {
        self.cancel.cancel();
        let _ = (&mut self.task).await;
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_dir(&self.socket_dir);
        let spent = self.shared.budget.spent();
        GatewayReport {
            requests: spent.requests,
            input_tokens: spent.input_tokens,
            output_tokens: spent.output_tokens,
            refused: self.shared.refused.load(Ordering::SeqCst),
            honeytoken_seen: self.shared.honeytoken_seen.load(Ordering::SeqCst),
            transcript_path: self.shared.transcript.path().to_path_buf(),
            transcript_incomplete: self.shared.incomplete.load(Ordering::SeqCst),
        }
    }
}

impl Drop for GatewayHandle {
    /// A session that fails before [`GatewayHandle::shutdown`] still stops its gateway: the
    /// serving task sees the cancellation and closes the listener (the socket file itself is
    /// removed with the session's directory).
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// A fake key that looks like the API's real ones (`sk-ant-api03-...AA` for Anthropic,
/// `sk-proj-...` for OpenAI), random per session, for the container's environment. A worker
/// (or a prompt injection) that copies its environment into a request is caught by it, and
/// an SDK that reads the usual variable finds a plausible key and goes on to the socket.
pub fn honeytoken(api: ModelApi) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let (prefix, len, suffix) = match api {
        ModelApi::Anthropic => ("sk-ant-api03-", 93, "AA"),
        ModelApi::Openai => ("sk-proj-", 156, ""),
    };
    let mut body = String::with_capacity(len);
    while body.len() < len {
        // uuid v4 draws from the OS's random source; 6 bits of each byte index the alphabet.
        // Bytes 6 and 8 hold the uuid's version and variant bits, so they are skipped.
        let bytes = uuid::Uuid::new_v4().into_bytes();
        for (_, byte) in bytes.iter().enumerate().filter(|(i, _)| *i != 6 && *i != 8) {
            if body.len() < len {
                body.push(char::from(ALPHABET[usize::from(*byte & 63)]));
            }
        }
    }
    format!("{prefix}{body}{suffix}")
}

#[cfg(test)]
mod tests;
