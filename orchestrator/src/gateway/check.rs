//! What the gateway refuses before anything is forwarded, and why.
//!
//! Each refusal is a typed reason with its HTTP status, answered as a JSON error in the shape
//! both provider SDKs understand (`{"error": {"type", "message"}}`) and recorded like a
//! forwarded request. The checks read only what the worker sent on this connection; the
//! session's identity never comes from the request.

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::CONTENT_LENGTH;
use hyper::HeaderMap;
use serde_json::{json, Value};

use super::budget::Exhausted;
use super::config::ModelApi;
use crate::policy::valid_model_name;

/// Why the gateway answered a request itself instead of forwarding it.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// CONNECT: the socket is not a tunnel to anywhere.
    #[error("CONNECT is not served: the gateway is not a proxy")]
    Connect,
    /// `GET http://host/...`: a proxy-style target could name another host.
    #[error("absolute-form request targets are not served: the gateway is not a proxy")]
    AbsoluteForm,
    /// Another method on the served path.
    #[error("only POST {0} is served here (and GET /golem/info)")]
    NotServed(&'static str),
    /// Any other path.
    #[error("no such endpoint: only POST {0} is served here (and GET /golem/info)")]
    NotFound(&'static str),
    /// The body is larger than the policy's `max_request_bytes`.
    #[error("the request body is larger than the session's limit of {0} bytes")]
    TooLarge(u64),
    /// The body could not be read or is not a JSON object.
    #[error("the request body is not a JSON object: {0}")]
    BadBody(String),
    /// `model` is missing.
    #[error("the request names no model; GET /golem/info lists the allowed ones")]
    NoModel,
    /// `model` is not in the session's allowlist.
    #[error("model {0:?} is not allowed for this session")]
    ModelNotAllowed(String),
    /// `stream: true`; streaming is not supported yet.
    #[error("streaming is not supported by the gateway; send stream: false")]
    Stream,
    /// `max_tokens` is missing or not a positive integer: without it nothing can be reserved.
    #[error("the request must set max_tokens (a positive integer) so the budget can cover it")]
    NoMaxTokens,
    /// The body carries the session's honeytoken: the worker is sending its environment out.
    #[error("the request carries a credential from the container's environment")]
    Honeytoken,
    /// A tool or option that makes the *provider* reach out (web search and fetch, MCP
    /// servers, code execution containers): the provider would carry data to third parties
    /// before any reviewer sees the transcript.
    #[error("{0} runs on the provider's side and could reach the network; only the worker's own function tools are allowed")]
    ProviderTool(String),
    /// The budget cannot cover the request.
    #[error("{0}")]
    Budget(Exhausted),
    /// Too many requests in flight for too long.
    #[error("too many model requests in flight for this session; try again later")]
    Busy,
}

impl Refusal {
    /// The status the worker gets.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Connect | Refusal::NotServed(_) => 405,
            Refusal::AbsoluteForm
            | Refusal::BadBody(_)
            | Refusal::NoModel
            | Refusal::Stream
            | Refusal::NoMaxTokens => 400,
            Refusal::NotFound(_) => 404,
            Refusal::TooLarge(_) => 413,
            Refusal::ModelNotAllowed(_) | Refusal::Honeytoken | Refusal::ProviderTool(_) => 403,
            Refusal::Budget(_) | Refusal::Busy => 429,
        }
    }

    /// A short stable name for the audit log and the error body.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::Connect => "connect",
            Refusal::AbsoluteForm => "absolute_form",
            Refusal::NotServed(_) => "method_not_served",
            Refusal::NotFound(_) => "path_not_served",
            Refusal::TooLarge(_) => "too_large",
            Refusal::BadBody(_) => "bad_body",
            Refusal::NoModel => "no_model",
            Refusal::ModelNotAllowed(_) => "model_not_allowed",
            Refusal::Stream => "stream",
            Refusal::NoMaxTokens => "no_max_tokens",
            Refusal::Honeytoken => "honeytoken",
            Refusal::ProviderTool(_) => "provider_tool",
            Refusal::Budget(_) => "budget",
            Refusal::Busy => "busy",
        }
    }
}

/// The JSON error body the worker gets for `kind` and `message`.
pub fn error_body(kind: &str, message: &str) -> Bytes {
    Bytes::from(json!({"type": "error", "error": {"type": kind, "message": message}}).to_string())
}

/// Reads the body, stopping as soon as it passes `max` bytes (a declared length over the cap
/// is refused before a byte is read), so a worker cannot make the host buffer more.
pub async fn read_body(headers: &HeaderMap, body: Incoming, max: u64) -> Result<Bytes, Refusal> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(Refusal::TooLarge(max));
    }
    let limit = usize::try_from(max).unwrap_or(usize::MAX);
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(Refusal::TooLarge(max)),
        Err(e) => Err(Refusal::BadBody(e.to_string())),
    }
}

/// The most completions one request may ask for (`n`).
const MAX_CHOICES: u64 = 8;

/// What the gateway needs from a checked request body.
#[derive(Debug)]
pub struct Checked {
    /// The model asked for, already found in the allowlist.
    pub model: String,
    /// The output tokens to reserve.
    pub max_tokens: u64,
}

/// The model a body names, if any, for the record even when the body is refused later. The
/// worker wrote it, so a name that is not a plausible model name is recorded only by length.
pub fn model_of(body: &Bytes) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v.get("model")?.as_str().map(shown_model)
}

/// `name` if it looks like a model name, else a placeholder, for logs and error messages.
pub fn shown_model(name: &str) -> String {
    if valid_model_name(name) {
        name.to_string()
    } else {
        format!("(not a model name, {} bytes)", name.len())
    }
}

/// Whether `body` carries `token`, as sent or with its characters JSON-escaped (`\u0073k-...`
/// decodes to the same string, so the check runs on the parsed text too). Both searches are
/// linear (memmem), so a body built of near-misses costs the host no more than any other.
pub fn carries(body: &Bytes, value: Option<&Value>, token: &str) -> bool {
    let found = |haystack: &[u8]| memchr::memmem::find(haystack, token.as_bytes()).is_some();
    found(body) || value.is_some_and(|v| found(v.to_string().as_bytes()))
}

/// Checks a request body against the session's rules: JSON object, no streaming, an allowed
/// model, and a `max_tokens` to reserve.
pub fn check_body(api: ModelApi, value: &Value, allowed: &[String]) -> Result<Checked, Refusal> {
    let obj = value
        .as_object()
        .ok_or_else(|| Refusal::BadBody("expected an object".into()))?;
    if obj.get("stream").and_then(Value::as_bool) == Some(true) {
        return Err(Refusal::Stream);
    }
    let model = match obj.get("model") {
        None | Some(Value::Null) => return Err(Refusal::NoModel),
        Some(Value::String(m)) => m.clone(),
        Some(_) => return Err(Refusal::BadBody("model is not a string".into())),
    };
    if !allowed.contains(&model) {
        return Err(Refusal::ModelNotAllowed(shown_model(&model)));
    }
    provider_side_reach(api, obj)?;
    if let Some(what) = provider_fetch(value) {
        return Err(Refusal::ProviderTool(what.into()));
    }
    let keys: &[&str] = match api {
        ModelApi::Anthropic => &["max_tokens"],
        ModelApi::Openai => &["max_completion_tokens", "max_tokens"],
    };
    // Every key that is present must be valid, and the largest is reserved, so naming a small
    // one next to a large one cannot under-reserve whichever the provider honours.
    let mut max_tokens = None;
    for value in keys.iter().filter_map(|k| obj.get(*k)) {
        let n = value
            .as_u64()
            .filter(|n| *n > 0)
            .ok_or(Refusal::NoMaxTokens)?;
        max_tokens = max_tokens.max(Some(n));
    }
    let max_tokens = max_tokens.ok_or(Refusal::NoMaxTokens)?;
    // OpenAI's `n` asks for n completions of up to max_tokens each: reserve all of them.
    let choices = match obj.get("n") {
        None | Some(Value::Null) => 1,
        Some(n) => n
            .as_u64()
            .filter(|n| (1..=MAX_CHOICES).contains(n))
            .ok_or_else(|| Refusal::BadBody(format!("n must be 1 to {MAX_CHOICES}")))?,
    };
    let max_tokens = max_tokens.saturating_mul(choices);
    Ok(Checked { model, max_tokens })
}

/// Top-level options that make the provider itself contact other hosts.
const PROVIDER_REACH: [(ModelApi, &str); 3] = [
    (ModelApi::Anthropic, "mcp_servers"),
    (ModelApi::Anthropic, "container"),
    (ModelApi::Openai, "web_search_options"),
];

/// Refuses provider-side tools and options. The container has no network, and the gateway
/// must not hand it one through the provider: Anthropic's server tools (`web_search_*`,
/// `web_fetch_*`, `code_execution_*`, ...) carry a `type` other than `custom`, OpenAI's
/// function tools are `function` (or `custom`), and everything else is refused too.
fn provider_side_reach(api: ModelApi, obj: &serde_json::Map<String, Value>) -> Result<(), Refusal> {
    if let Some((_, key)) = PROVIDER_REACH
        .iter()
        .find(|(a, key)| *a == api && obj.contains_key(*key))
    {
        return Err(Refusal::ProviderTool((*key).to_string()));
    }
    let Some(tools) = obj.get("tools") else {
        return Ok(());
    };
    let tools = tools
        .as_array()
        .ok_or_else(|| Refusal::BadBody("tools is not a list".into()))?;
    let allowed: &[&str] = match api {
        ModelApi::Anthropic => &["custom"],
        ModelApi::Openai => &["function", "custom"],
    };
    for tool in tools {
        let kind = match tool.get("type") {
            // Anthropic's client tools may leave `type` out; OpenAI's always name it.
            None if api == ModelApi::Anthropic => continue,
            None => return Err(Refusal::BadBody("a tool has no type".into())),
            Some(kind) => kind,
        };
        if !kind.as_str().is_some_and(|k| allowed.contains(&k)) {
            let shown = kind.as_str().map_or("a tool".to_string(), shown_model);
            return Err(Refusal::ProviderTool(format!("tool type {shown}")));
        }
    }
    Ok(())
}

/// Finds content the provider would fetch itself: an Anthropic image or document whose
/// `source` is a `url` (the URL could carry anything the worker read to any host) or a `file`
/// (a file the key's owner uploaded for something else), an OpenAI `image_url` that is not a
/// `data:` URL, or an OpenAI `file` part naming an uploaded `file_id`. Only inline content is
/// accepted.
fn provider_fetch(value: &Value) -> Option<&'static str> {
    match value {
        Value::Object(obj) => {
            let source = obj.get("source").and_then(|s| s.get("type"));
            if source.is_some_and(|t| t == "url" || t == "file") {
                return Some("content fetched by the provider (a url or file source)");
            }
            if obj.get("file").is_some_and(|f| f.get("file_id").is_some()) {
                return Some("a file uploaded to the provider account");
            }
            if let Some(image) = obj.get("image_url") {
                let url = image.get("url").unwrap_or(image).as_str().unwrap_or("");
                if !url.starts_with("data:") {
                    return Some("an image_url that is not a data: URL");
                }
            }
            obj.values().find_map(provider_fetch)
        }
        Value::Array(items) => items.iter().find_map(provider_fetch),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(api: ModelApi, body: Value) -> Result<Checked, Refusal> {
        check_body(api, &body, &["m".to_string()])
    }

    #[test]
    fn inline_content_and_own_tools_pass_provider_reach_does_not() {
        let inline = json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user",
            "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                "data": "iVBORw0KGgo="}}]}],
            "tools": [{"name": "read_file", "input_schema": {"type": "object",
                "properties": {"url": {"type": "string"}}}}]});
        assert!(check(ModelApi::Anthropic, inline).is_ok());
        let data_url = json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}]});
        assert!(check(ModelApi::Openai, data_url).is_ok());
        for (api, body) in [
            (
                ModelApi::Anthropic,
                json!({"tools": [{"type": "web_search_20250305", "name": "s"}]}),
            ),
            (
                ModelApi::Anthropic,
                json!({"tools": [{"type": "code_execution_20250522"}]}),
            ),
            (ModelApi::Anthropic, json!({"container": "c"})),
            (
                ModelApi::Openai,
                json!({"tools": [{"type": "web_search_preview"}]}),
            ),
            (
                ModelApi::Openai,
                json!({"messages": [{"content": [{"image_url": "http://x/"}]}]}),
            ),
            (
                ModelApi::Anthropic,
                json!({"messages": [{"content": [{"type": "document",
                    "source": {"type": "file", "file_id": "file_011"}}]}]}),
            ),
            (
                ModelApi::Openai,
                json!({"messages": [{"content": [{"type": "file",
                    "file": {"file_id": "file-abc"}}]}]}),
            ),
        ] {
            let mut full = json!({"model": "m", "max_tokens": 1});
            for (k, v) in body.as_object().unwrap() {
                full[k] = v.clone();
            }
            let err = check(api, full).unwrap_err();
            assert!(matches!(err, Refusal::ProviderTool(_)), "{err}");
        }
        // The larger of two token caps is the one reserved.
        let both = json!({"model": "m", "max_tokens": 900, "max_completion_tokens": 10});
        assert_eq!(check(ModelApi::Openai, both).unwrap().max_tokens, 900);
        let n = json!({"model": "m", "max_tokens": 100, "n": 3});
        assert_eq!(check(ModelApi::Openai, n).unwrap().max_tokens, 300);
        let n = json!({"model": "m", "max_tokens": 100, "n": 1000});
        assert!(matches!(
            check(ModelApi::Openai, n),
            Err(Refusal::BadBody(_))
        ));
        let bad = json!({"model": "m", "max_tokens": 0, "max_completion_tokens": 10});
        assert!(matches!(
            check(ModelApi::Openai, bad),
            Err(Refusal::NoMaxTokens)
        ));
    }
}
