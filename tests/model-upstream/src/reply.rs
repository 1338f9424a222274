//! What the scripted upstream answers, independent of the protocol, and how each protocol
//! spells it. A script says "call read_file with these arguments, report 120 input tokens";
//! the server renders that as an Anthropic `tool_use` block or an OpenAI `tool_calls` entry
//! depending on the path the request came in on, so one script drives both protocols.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

/// The two provider protocols the upstream speaks, chosen by request path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST /v1/messages`.
    Anthropic,
    /// `POST /v1/chat/completions`.
    OpenAi,
}

impl Api {
    /// The API a request path belongs to, if any.
    pub fn from_path(path: &str) -> Option<Api> {
        match path {
            "/v1/messages" => Some(Api::Anthropic),
            "/v1/chat/completions" => Some(Api::OpenAi),
            _ => None,
        }
    }
}

/// Token counts the upstream reports, as a provider would.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input: u64,
    /// Completion tokens.
    pub output: u64,
}

impl Default for Usage {
    fn default() -> Self {
        Usage {
            input: 10,
            output: 5,
        }
    }
}

/// One scripted answer. Scripts are JSON: `{"text": "hi", "usage": {"input": 3, "output": 1}}`,
/// `{"tool": {"name": "read_file", "input": {"path": "/input/a"}}}`,
/// `{"error": {"status": 529, "message": "overloaded"}}`, `{"raw": {"status": 200, "body": {..}}}`,
/// `{"hang": null}`, and any of them with `"delay_ms": N`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reply {
    /// What to answer.
    #[serde(flatten)]
    pub kind: Kind,
    /// Reported usage (ignored for errors and raw bodies).
    #[serde(default)]
    pub usage: Usage,
    /// Wait this long before answering, to make slow upstreams.
    #[serde(default, with = "millis")]
    pub delay_ms: Duration,
}

/// The content of a [`Reply`].
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A final answer.
    Text(String),
    /// One tool call.
    Tool(ToolCall),
    /// A provider error with this HTTP status.
    Error(ErrorReply),
    /// Exactly this status and JSON body, for shapes the helpers do not cover.
    Raw(RawReply),
    /// Never answer (until the client gives up or the server stops).
    Hang,
}

/// A tool call the model asks for.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    /// Tool name.
    pub name: String,
    /// Its arguments.
    pub input: Value,
}

/// A provider error.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorReply {
    /// HTTP status.
    pub status: u16,
    /// The error message.
    pub message: String,
}

/// A literal response.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReply {
    /// HTTP status.
    pub status: u16,
    /// JSON body.
    pub body: Value,
}

mod millis {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;
    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

impl Reply {
    fn of(kind: Kind) -> Reply {
        Reply {
            kind,
            usage: Usage::default(),
            delay_ms: Duration::ZERO,
        }
    }

    /// A final answer with the default usage.
    pub fn text(text: &str) -> Reply {
        Reply::of(Kind::Text(text.to_string()))
    }

    /// A tool call with the default usage.
    pub fn tool(name: &str, input: Value) -> Reply {
        Reply::of(Kind::Tool(ToolCall {
            name: name.to_string(),
            input,
        }))
    }

    /// A provider error.
    pub fn error(status: u16, message: &str) -> Reply {
        Reply::of(Kind::Error(ErrorReply {
            status,
            message: message.to_string(),
        }))
    }

    /// A literal status and body.
    pub fn raw(status: u16, body: Value) -> Reply {
        Reply::of(Kind::Raw(RawReply { status, body }))
    }

    /// An upstream that never answers.
    pub fn hang() -> Reply {
        Reply::of(Kind::Hang)
    }

    /// The same reply, reporting this usage.
    pub fn usage(mut self, input: u64, output: u64) -> Reply {
        self.usage = Usage { input, output };
        self
    }

    /// The same reply, sent after `delay`.
    pub fn delayed(mut self, delay: Duration) -> Reply {
        self.delay_ms = delay;
        self
    }

    /// The status and body this reply has for `api`, answering a request for `model`;
    /// `None` for [`Kind::Hang`]. `n` numbers ids so they differ between replies.
    pub fn render(&self, api: Api, model: &str, n: usize) -> Option<(u16, Value)> {
        let u = self.usage;
        Some(match (&self.kind, api) {
            (Kind::Hang, _) => return None,
            (Kind::Raw(r), _) => (r.status, r.body.clone()),
            (Kind::Error(e), Api::Anthropic) => (
                e.status,
                json!({"type": "error", "error": {"type": "api_error", "message": e.message}}),
            ),
            (Kind::Error(e), Api::OpenAi) => (
                e.status,
                json!({"error": {"message": e.message, "type": "api_error", "code": null}}),
            ),
            (Kind::Text(t), Api::Anthropic) => {
                let content = json!([{"type": "text", "text": t}]);
                (200, anthropic(model, n, content, "end_turn", u))
            }
            (Kind::Tool(c), Api::Anthropic) => {
                let content = json!([{"type": "tool_use", "id": format!("toolu_{n:04}"),
                    "name": c.name, "input": c.input}]);
                (200, anthropic(model, n, content, "tool_use", u))
            }
            (Kind::Text(t), Api::OpenAi) => {
                let message = json!({"role": "assistant", "content": t});
                (200, openai(model, n, message, "stop", u))
            }
            (Kind::Tool(c), Api::OpenAi) => {
                let call = json!({"id": format!("call_{n:04}"), "type": "function",
                    "function": {"name": c.name, "arguments": c.input.to_string()}});
                let message = json!({"role": "assistant", "content": null, "tool_calls": [call]});
                (200, openai(model, n, message, "tool_calls", u))
            }
        })
    }
}

fn anthropic(model: &str, n: usize, content: Value, stop: &str, u: Usage) -> Value {
    json!({
        "id": format!("msg_{n:04}"), "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": u.input, "output_tokens": u.output},
    })
}

fn openai(model: &str, n: usize, message: Value, finish: &str, u: Usage) -> Value {
    json!({
        "id": format!("chatcmpl-{n:04}"), "object": "chat.completion", "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": u.input, "completion_tokens": u.output,
            "total_tokens": u.input + u.output},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_parse_and_render_in_both_protocols() {
        let script: Vec<Reply> = serde_json::from_str(
            r#"[{"text": "hi", "usage": {"input": 3, "output": 1}},
                {"tool": {"name": "read_file", "input": {"path": "/input/a"}}, "delay_ms": 5},
                {"error": {"status": 529, "message": "overloaded"}},
                {"hang": null}]"#,
        )
        .unwrap();
        let (status, a) = script[0].render(Api::Anthropic, "m", 1).unwrap();
        assert_eq!((status, &a["usage"]["input_tokens"]), (200, &json!(3)));
        let (_, o) = script[1].render(Api::OpenAi, "m", 2).unwrap();
        let call = &o["choices"][0]["message"]["tool_calls"][0]["function"];
        assert_eq!(call["name"], "read_file");
        assert_eq!(call["arguments"], r#"{"path":"/input/a"}"#);
        assert_eq!(script[1].delay_ms, Duration::from_millis(5));
        let (_, t) = script[1].render(Api::Anthropic, "m", 2).unwrap();
        assert_eq!(t["content"][0]["type"], "tool_use");
        assert_eq!(t["stop_reason"], "tool_use");
        assert_eq!(script[2].render(Api::OpenAi, "m", 3).unwrap().0, 529);
        assert!(script[3].render(Api::OpenAi, "m", 4).is_none());
        assert!(serde_json::from_str::<Vec<Reply>>(r#"[{"txt": "x"}]"#).is_err());
    }
}
