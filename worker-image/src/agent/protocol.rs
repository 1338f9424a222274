//! The two model APIs the gateway forwards: Anthropic Messages with tool use and OpenAI-style
//! Chat Completions with function calling.
//!
//! The loop in [`super`] works on one neutral shape ([`Reply`], [`ToolCall`], [`ToolResult`]);
//! this module is the only place that knows how each API spells them, so a difference between
//! the two (tool arguments as an object versus a JSON string, results as content blocks versus
//! `tool` messages) cannot leak into the loop. Replies are model output steered by hostile
//! documents: everything is read with `serde_json::Value` lookups that tolerate missing or
//! mistyped fields, and nothing in a reply can make this code panic.

use serde_json::{json, Map, Value};

/// Which API the gateway speaks, from `GET /golem/info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST /v1/messages`.
    Anthropic,
    /// `POST /v1/chat/completions`.
    OpenAi,
}

impl Api {
    /// Reads the gateway's `api` field.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "anthropic" => Some(Api::Anthropic),
            "openai" => Some(Api::OpenAi),
            _ => None,
        }
    }

    /// The name used by the gateway and in `agent.md`.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Anthropic => "anthropic",
            Api::OpenAi => "openai",
        }
    }

    /// The gateway path requests go to.
    pub fn path(self) -> &'static str {
        match self {
            Api::Anthropic => "/v1/messages",
            Api::OpenAi => "/v1/chat/completions",
        }
    }
}

/// A tool the model may call, described once for both APIs.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: &'static str,
    /// What it does, for the model.
    pub description: &'static str,
    /// JSON Schema of its arguments.
    pub parameters: Value,
}

/// One tool call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The id the result must quote.
    pub id: String,
    /// The tool's name (as the model spelled it; unknown names get an error result).
    pub name: String,
    /// The arguments; `Value::Null` when the model sent arguments that are not JSON.
    pub input: Value,
    /// The arguments exactly as sent (OpenAI sends a string), echoed back in the history.
    pub raw_arguments: String,
}

/// What a tool call returned, to be sent back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    /// The call's id.
    pub id: String,
    /// The result text (already wrapped where it carries untrusted data).
    pub content: String,
    /// Whether the call failed.
    pub is_error: bool,
}

/// Tokens the provider says a request used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

impl Usage {
    /// Adds another request's usage.
    pub fn add(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
    }
}

/// One model turn, in the neutral shape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reply {
    /// The text the model wrote (all text blocks joined).
    pub text: String,
    /// The tools it asked to run, in order.
    pub calls: Vec<ToolCall>,
    /// What the turn cost.
    pub usage: Usage,
    /// The provider's stop or finish reason.
    pub stop_reason: String,
}

/// The most tool calls taken from one turn; more are dropped (a turn asking for thousands is
/// a confused or hostile model, not a plan).
pub const MAX_CALLS_PER_TURN: usize = 16;

/// A reply that cannot be understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unreadable model reply: {}", self.0)
    }
}

impl std::error::Error for ProtocolError {}

/// The conversation so far, in the chosen API's own message format.
#[derive(Debug, Clone)]
pub struct Conversation {
    api: Api,
    model: String,
    system: String,
    max_tokens: u64,
    messages: Vec<Value>,
}

impl Conversation {
    /// A conversation with `system` as the system prompt.
    pub fn new(api: Api, model: &str, system: &str, max_tokens: u64) -> Self {
        Self {
            api,
            model: model.to_string(),
            system: system.to_string(),
            max_tokens,
            messages: Vec::new(),
        }
    }

    /// The API it is spelled in.
    pub fn api(&self) -> Api {
        self.api
    }

    /// Lowers `max_tokens` (for example to what the budget has left).
    pub fn set_max_tokens(&mut self, max_tokens: u64) {
        self.max_tokens = max_tokens.max(1);
    }

    /// Appends a user message.
    pub fn push_user(&mut self, text: &str) {
        self.messages.push(json!({"role": "user", "content": text}));
    }

    /// Appends the model's turn, rebuilt from what was parsed (not echoed raw), so only what
    /// the loop understood goes back.
    pub fn push_assistant(&mut self, reply: &Reply) {
        let message = match self.api {
            Api::Anthropic => {
                let mut blocks = Vec::new();
                if !reply.text.is_empty() {
                    blocks.push(json!({"type": "text", "text": reply.text}));
                }
                for c in &reply.calls {
                    let input = if c.input.is_object() {
                        c.input.clone()
                    } else {
                        json!({})
                    };
                    blocks.push(
                        json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                    );
                }
                if blocks.is_empty() {
                    blocks.push(json!({"type": "text", "text": "(no answer)"}));
                }
                json!({"role": "assistant", "content": blocks})
            }
            Api::OpenAi => {
                let mut m = Map::new();
                m.insert("role".into(), json!("assistant"));
                let content = if reply.text.is_empty() {
                    Value::Null
                } else {
                    json!(reply.text)
                };
                m.insert("content".into(), content);
                if !reply.calls.is_empty() {
                    let calls: Vec<Value> = reply
                        .calls
                        .iter()
                        .map(|c| {
                            json!({"id": c.id, "type": "function",
                                   "function": {"name": c.name, "arguments": c.raw_arguments}})
                        })
                        .collect();
                    m.insert("tool_calls".into(), Value::Array(calls));
                }
                Value::Object(m)
            }
        };
        self.messages.push(message);
    }

    /// Appends the results of one turn's tool calls.
    pub fn push_results(&mut self, results: &[ToolResult]) {
        match self.api {
            Api::Anthropic => {
                let blocks: Vec<Value> = results
                    .iter()
                    .map(|r| {
                        json!({"type": "tool_result", "tool_use_id": r.id,
                               "content": r.content, "is_error": r.is_error})
                    })
                    .collect();
                self.messages
                    .push(json!({"role": "user", "content": blocks}));
            }
            Api::OpenAi => {
                for r in results {
                    let content = if r.is_error {
                        format!("ERROR: {}", r.content)
                    } else {
                        r.content.clone()
                    };
                    self.messages
                        .push(json!({"role": "tool", "tool_call_id": r.id, "content": content}));
                }
            }
        }
    }

    /// The request body for the next turn. Never streams; always bounds the answer.
    pub fn request(&self, tools: &[ToolSpec]) -> Value {
        match self.api {
            Api::Anthropic => {
                let tools: Vec<Value> = tools
                    .iter()
                    .map(|t| {
                        json!({"name": t.name, "description": t.description,
                               "input_schema": t.parameters})
                    })
                    .collect();
                json!({
                    "model": self.model,
                    "max_tokens": self.max_tokens,
                    "system": self.system,
                    "messages": self.messages,
                    "tools": tools,
                })
            }
            Api::OpenAi => {
                let tools: Vec<Value> = tools
                    .iter()
                    .map(|t| {
                        json!({"type": "function", "function": {
                            "name": t.name, "description": t.description,
                            "parameters": t.parameters}})
                    })
                    .collect();
                let mut messages = vec![json!({"role": "system", "content": self.system})];
                messages.extend(self.messages.iter().cloned());
                json!({
                    "model": self.model,
                    "max_tokens": self.max_tokens,
                    "messages": messages,
                    "tools": tools,
                })
            }
        }
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn u64_of(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// Parses a successful response body of `api` into the neutral shape.
pub fn parse_reply(api: Api, body: &[u8]) -> Result<Reply, ProtocolError> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| ProtocolError(format!("not JSON: {e}")))?;
    match api {
        Api::Anthropic => parse_anthropic(&v),
        Api::OpenAi => parse_openai(&v),
    }
}

fn parse_anthropic(v: &Value) -> Result<Reply, ProtocolError> {
    let content = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| ProtocolError("no content array".into()))?;
    let mut reply = Reply {
        stop_reason: str_of(v, "stop_reason").to_string(),
        ..Reply::default()
    };
    if let Some(u) = v.get("usage") {
        reply.usage = Usage {
            input_tokens: u64_of(u, "input_tokens"),
            output_tokens: u64_of(u, "output_tokens"),
        };
    }
    for block in content {
        match str_of(block, "type") {
            "text" => {
                if !reply.text.is_empty() {
                    reply.text.push('\n');
                }
                reply.text.push_str(str_of(block, "text"));
            }
            "tool_use" if reply.calls.len() < MAX_CALLS_PER_TURN => {
                let input = block.get("input").cloned().unwrap_or(Value::Null);
                reply.calls.push(ToolCall {
                    id: str_of(block, "id").to_string(),
                    name: str_of(block, "name").to_string(),
                    raw_arguments: input.to_string(),
                    input,
                });
            }
            _ => {}
        }
    }
    Ok(reply)
}

fn parse_openai(v: &Value) -> Result<Reply, ProtocolError> {
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| ProtocolError("no choices".into()))?;
    let message = choice
        .get("message")
        .ok_or_else(|| ProtocolError("choice without a message".into()))?;
    let mut reply = Reply {
        text: openai_text(message.get("content").unwrap_or(&Value::Null)),
        stop_reason: str_of(choice, "finish_reason").to_string(),
        ..Reply::default()
    };
    if let Some(u) = v.get("usage") {
        reply.usage = Usage {
            input_tokens: u64_of(u, "prompt_tokens"),
            output_tokens: u64_of(u, "completion_tokens"),
        };
    }
    let calls = message.get("tool_calls").and_then(Value::as_array);
    for call in calls.into_iter().flatten().take(MAX_CALLS_PER_TURN) {
        let function = call.get("function").unwrap_or(&Value::Null);
        let raw = match function.get("arguments") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        };
        let input = serde_json::from_str(&raw).unwrap_or(Value::Null);
        reply.calls.push(ToolCall {
            id: str_of(call, "id").to_string(),
            name: str_of(function, "name").to_string(),
            input,
            raw_arguments: raw,
        });
    }
    Ok(reply)
}

/// A message's content: a string, or (as some compatible servers send it) an array of parts
/// whose text parts are joined.
fn openai_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| str_of(p, "type") == "text")
            .map(|p| str_of(p, "text"))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The message of a gateway or provider error body (`{"error":{"message":..}}`,
/// `{"error":"..."}` or `{"message":..}`), or the body's start when it is none of these.
pub fn error_message(body: &[u8]) -> String {
    let text = match serde_json::from_slice::<Value>(body) {
        Ok(v) => {
            let e = v.get("error").unwrap_or(&Value::Null);
            [e.get("message"), Some(e), v.get("message")]
                .into_iter()
                .flatten()
                .find_map(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string())
        }
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    };
    crate::escape::display_chars(&text, 300, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "read_file",
            description: "read",
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }]
    }

    #[test]
    fn anthropic_request_and_reply() {
        let mut c = Conversation::new(Api::Anthropic, "claude-x", "sys", 1000);
        c.push_user("task");
        let body = br#"{"id":"m1","type":"message","role":"assistant",
            "content":[{"type":"text","text":"Reading."},
                       {"type":"tool_use","id":"tu_1","name":"read_file","input":{"path":"/input/a.pdf"}}],
            "stop_reason":"tool_use","usage":{"input_tokens":120,"output_tokens":30}}"#;
        let reply = parse_reply(Api::Anthropic, body).unwrap();
        assert_eq!(reply.text, "Reading.");
        assert_eq!(reply.stop_reason, "tool_use");
        assert_eq!(
            reply.usage,
            Usage {
                input_tokens: 120,
                output_tokens: 30
            }
        );
        assert_eq!(reply.calls.len(), 1);
        assert_eq!(reply.calls[0].id, "tu_1");
        assert_eq!(reply.calls[0].input["path"], "/input/a.pdf");
        c.push_assistant(&reply);
        c.push_results(&[ToolResult {
            id: "tu_1".into(),
            content: "text".into(),
            is_error: false,
        }]);
        let req = c.request(&tools());
        assert_eq!(req["model"], "claude-x");
        assert_eq!(req["max_tokens"], 1000);
        assert_eq!(req["system"], "sys");
        assert!(req.get("stream").is_none());
        assert_eq!(req["tools"][0]["input_schema"]["type"], "object");
        let m = req["messages"].as_array().unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[0], json!({"role": "user", "content": "task"}));
        assert_eq!(m[1]["role"], "assistant");
        assert_eq!(m[1]["content"][1]["type"], "tool_use");
        assert_eq!(m[1]["content"][1]["input"]["path"], "/input/a.pdf");
        assert_eq!(m[2]["content"][0]["type"], "tool_result");
        assert_eq!(m[2]["content"][0]["tool_use_id"], "tu_1");
        assert_eq!(m[2]["content"][0]["is_error"], false);
    }

    #[test]
    fn openai_request_and_reply() {
        let mut c = Conversation::new(Api::OpenAi, "gpt-x", "sys", 500);
        c.push_user("task");
        let body = br#"{"id":"c1","object":"chat.completion","choices":[{"index":0,
            "message":{"role":"assistant","content":null,"tool_calls":[
              {"id":"call_1","type":"function","function":{"name":"write_file",
               "arguments":"{\"path\":\"/output/s.md\",\"text\":\"hi\"}"}},
              {"id":"call_2","type":"function","function":{"name":"read_file","arguments":"{bad"}}]},
            "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":50,"completion_tokens":7}}"#;
        let reply = parse_reply(Api::OpenAi, body).unwrap();
        assert_eq!(reply.text, "");
        assert_eq!(reply.stop_reason, "tool_calls");
        assert_eq!(
            reply.usage,
            Usage {
                input_tokens: 50,
                output_tokens: 7
            }
        );
        assert_eq!(reply.calls[0].name, "write_file");
        assert_eq!(reply.calls[0].input["text"], "hi");
        assert_eq!(reply.calls[1].input, Value::Null, "bad JSON arguments");
        c.push_assistant(&reply);
        c.push_results(&[
            ToolResult {
                id: "call_1".into(),
                content: "wrote".into(),
                is_error: false,
            },
            ToolResult {
                id: "call_2".into(),
                content: "bad arguments".into(),
                is_error: true,
            },
        ]);
        let req = c.request(&tools());
        assert_eq!(req["max_tokens"], 500);
        assert!(req.get("stream").is_none());
        assert_eq!(req["tools"][0]["type"], "function");
        assert_eq!(req["tools"][0]["function"]["name"], "read_file");
        let m = req["messages"].as_array().unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "sys"}));
        assert_eq!(m[1]["role"], "user");
        assert_eq!(m[2]["content"], Value::Null);
        assert_eq!(
            m[2]["tool_calls"][1]["function"]["arguments"], "{bad",
            "the raw arguments go back as sent"
        );
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "call_1", "content": "wrote"})
        );
        assert_eq!(m[4]["content"], "ERROR: bad arguments");
    }

    #[test]
    fn final_answers_and_hostile_replies() {
        let a = parse_reply(
            Api::Anthropic,
            br#"{"content":[{"type":"text","text":"Done."}],"stop_reason":"end_turn"}"#,
        )
        .unwrap();
        assert!(a.calls.is_empty());
        assert_eq!(a.usage, Usage::default());
        let o = parse_reply(
            Api::OpenAi,
            br#"{"choices":[{"message":{"content":"Done."},"finish_reason":"stop"}]}"#,
        )
        .unwrap();
        assert_eq!(o.text, "Done.");
        let parts = parse_reply(
            Api::OpenAi,
            br#"{"choices":[{"message":{"content":[{"type":"text","text":"a"},
                {"type":"image_url"},{"type":"text","text":"b"}]}}]}"#,
        )
        .unwrap();
        assert_eq!(parts.text, "a\nb");
        for (api, bad) in [
            (Api::Anthropic, &b"not json"[..]),
            (Api::Anthropic, br#"{"content":"x"}"#),
            (Api::OpenAi, br#"{"choices":[]}"#),
            (Api::OpenAi, br#"[1,2]"#),
        ] {
            assert!(parse_reply(api, bad).is_err());
        }
        let many: Vec<Value> = (0..100)
            .map(|i| json!({"type":"tool_use","id":i.to_string(),"name":"x","input":{}}))
            .collect();
        let body = json!({"content": many}).to_string();
        let r = parse_reply(Api::Anthropic, body.as_bytes()).unwrap();
        assert_eq!(r.calls.len(), MAX_CALLS_PER_TURN);
    }

    #[test]
    fn error_messages() {
        assert_eq!(
            error_message(br#"{"error":{"type":"budget","message":"budget used up"}}"#),
            "budget used up"
        );
        assert_eq!(
            error_message(br#"{"error":"model not allowed"}"#),
            "model not allowed"
        );
        assert_eq!(error_message(b"plain\x1b[31m"), "plain\\u{1b}[31m");
    }
}
