//! Sending one checked request upstream: a fresh header set built from an allowlist, the key
//! added here and nowhere else, a time limit, a cap on the answer's size, and no answer that
//! carries the key back (an upstream echoing it would hand it to the worker).
//!
//! The worker's headers are never copied wholesale. `Authorization`, `x-api-key`, cookies,
//! `proxy-*` and hop-by-hop headers simply are not on the list, so a worker cannot smuggle its
//! own credential, a session cookie or a proxy instruction past the gateway, and the one key
//! that goes out is always the host's.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use serde_json::Value;

use super::config::{ModelApi, Upstream};

/// Worker headers that reach the upstream (besides `content-type`, which is always
/// `application/json`). Everything else is dropped.
const FORWARDED: [&str; 2] = ["anthropic-version", "anthropic-beta"];

/// Most bytes of an `anthropic-beta` value passed on, and of one feature name in it.
const MAX_BETA_BYTES: usize = 256;
const MAX_BETA_NAME: usize = 64;

/// The Messages API version sent when the worker names none.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The most an upstream answer may be; a larger one is a 502, not a host out of memory.
pub(super) const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// Why no answer came back.
#[derive(Debug, thiserror::Error)]
pub(super) enum ForwardError {
    /// The upstream did not finish within the policy's `request_timeout`.
    #[error("the model upstream did not answer within {0:?}")]
    Timeout(Duration),
    /// Connecting, sending or reading failed.
    #[error("the model upstream could not be reached: {0}")]
    Transport(String),
    /// The answer was larger than [`MAX_RESPONSE_BYTES`].
    #[error("the model upstream's answer is larger than {MAX_RESPONSE_BYTES} bytes")]
    TooLarge,
    /// The answer carried the host's key (an upstream echoing it in an error, or whatever the
    /// base URL really points at): passed on, it would hand the key to the worker.
    #[error("the model upstream's answer carried the host's key; it was withheld")]
    KeyInAnswer,
}

/// What the upstream answered.
#[derive(Debug)]
pub(super) struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The body, passed to the worker unchanged (never one that carries the key).
    pub body: Bytes,
    /// `(input, output)` tokens the provider reported, when it did.
    pub usage: Option<(u64, u64)>,
}

/// The HTTP client for one session's upstream.
#[derive(Debug, Clone)]
pub(super) struct Forwarder {
    client: reqwest::Client,
    upstream: Arc<Upstream>,
}

impl Forwarder {
    /// A client that follows no redirects (a redirect could carry the key to another host)
    /// and, for a loopback or plain-http upstream, uses no proxy: reqwest would otherwise hand
    /// a plain-http request, key included, to `HTTP_PROXY` even for a loopback address.
    pub(super) fn new(upstream: Arc<Upstream>) -> Result<Forwarder, reqwest::Error> {
        let mut builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
        let direct = reqwest::Url::parse(&upstream.base_url)
            .is_ok_and(|u| u.scheme() == "http" || super::config::is_loopback(&u));
        if direct {
            builder = builder.no_proxy();
        }
        Ok(Forwarder {
            client: builder.build()?,
            upstream,
        })
    }

    /// Sends `body` with the allowlisted subset of `worker` headers and the host's key, and
    /// reads the answer, all within `timeout`.
    pub(super) async fn send(
        &self,
        worker: &HeaderMap,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Answer, ForwardError> {
        let api = self.upstream.api;
        let request = self
            .client
            .post(self.upstream.endpoint())
            .headers(outgoing_headers(api, worker, &self.upstream))
            .body(body);
        let exchange = async {
            let mut response = request.send().await.map_err(transport)?;
            let status = response.status().as_u16();
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(transport)? {
                if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                    return Err(ForwardError::TooLarge);
                }
                body.extend_from_slice(&chunk);
            }
            let body = Bytes::from(body);
            let parsed: Option<Value> = serde_json::from_slice(&body).ok();
            // Raw or JSON-escaped (`\u0073k-...`, which the worker's parser decodes): the same
            // test the honeytoken gets.
            if super::check::carries(&body, parsed.as_ref(), self.upstream.key().expose()) {
                return Err(ForwardError::KeyInAnswer);
            }
            let usage = parsed.and_then(|v| usage(api, &v));
            Ok(Answer {
                status,
                body,
                usage,
            })
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or(Err(ForwardError::Timeout(timeout)))
    }
}

fn transport(e: reqwest::Error) -> ForwardError {
    // reqwest's message names the URL, never headers, so the key cannot appear in it.
    ForwardError::Transport(e.without_url().to_string())
}

/// The headers that go upstream: content type, the allowlisted worker headers, the key.
pub(super) fn outgoing_headers(
    api: ModelApi,
    worker: &HeaderMap,
    upstream: &Upstream,
) -> HeaderMap {
    let mut out = HeaderMap::new();
    out.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if api == ModelApi::Anthropic {
        for name in FORWARDED {
            let value = worker.get(name).filter(|v| well_formed(name, v.as_bytes()));
            if let Some(v) = value {
                out.insert(HeaderName::from_static(name), v.clone());
            }
        }
        if !out.contains_key("anthropic-version") {
            out.insert(
                HeaderName::from_static("anthropic-version"),
                HeaderValue::from_static(ANTHROPIC_VERSION),
            );
        }
    }
    let key = upstream.key().expose();
    let (name, value) = match api {
        ModelApi::Anthropic => (HeaderName::from_static("x-api-key"), key.to_string()),
        ModelApi::Openai => (AUTHORIZATION, format!("Bearer {key}")),
    };
    // ModelKey::new allows only printable ASCII, which is always a valid header value.
    if let Ok(mut v) = HeaderValue::from_str(&value) {
        v.set_sensitive(true);
        out.insert(name, v);
    }
    out
}

/// Whether a worker's value for the forwarded header `name` has the shape the provider
/// documents: a date for `anthropic-version`, and for `anthropic-beta` a short comma-separated
/// list of lowercase feature names (`tools-2024-04-04`). These headers go upstream but not into
/// the transcript, so anything else in them (a worker's environment, the honeytoken, a document)
/// would be a channel to the provider nobody reviews; a value of another shape is dropped.
fn well_formed(name: &str, value: &[u8]) -> bool {
    match name {
        "anthropic-version" => {
            value.len() == 10
                && value.iter().enumerate().all(|(i, b)| match i {
                    4 | 7 => *b == b'-',
                    _ => b.is_ascii_digit(),
                })
        }
        "anthropic-beta" => {
            value.len() <= MAX_BETA_BYTES
                && value.split(|b| *b == b',').all(|feature| {
                    let feature = feature.trim_ascii();
                    !feature.is_empty()
                        && feature.len() <= MAX_BETA_NAME
                        && feature.iter().all(|b| {
                            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.')
                        })
                })
        }
        _ => false,
    }
}

/// `(input, output)` tokens from a provider's `usage` object.
pub(super) fn usage(api: ModelApi, body: &Value) -> Option<(u64, u64)> {
    let u = body.get("usage")?;
    let count = |name: &str| u.get(name).and_then(Value::as_u64);
    match api {
        // Anthropic reports cached prompt tokens apart from `input_tokens`; they are input too.
        ModelApi::Anthropic => {
            let cached = count("cache_creation_input_tokens").unwrap_or(0)
                + count("cache_read_input_tokens").unwrap_or(0);
            Some((count("input_tokens")? + cached, count("output_tokens")?))
        }
        ModelApi::Openai => Some((count("prompt_tokens")?, count("completion_tokens")?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_headers_carry_only_their_documented_shape() {
        for ok in [
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "tools-2024-04-04"),
            (
                "anthropic-beta",
                "prompt-caching-2024-07-31, token-efficient-tools-2025-02-19",
            ),
        ] {
            assert!(well_formed(ok.0, ok.1.as_bytes()), "{ok:?}");
        }
        let env = "PATH=/bin,ANTHROPIC_API_KEY=sk-ant-api03-AbC_dEf-AA,HOME=/";
        let long = "a".repeat(MAX_BETA_NAME + 1);
        let many = vec!["feature-2024-01-01"; 20].join(",");
        for bad in [
            ("anthropic-version", "2023-06-01x"),
            ("anthropic-version", "latest"),
            ("anthropic-beta", env),
            ("anthropic-beta", "Tools-2024"),
            ("anthropic-beta", "a,,b"),
            ("anthropic-beta", long.as_str()),
            ("anthropic-beta", many.as_str()),
            ("x-api-key", "k"),
        ] {
            assert!(!well_formed(bad.0, bad.1.as_bytes()), "{bad:?}");
        }
    }
}
