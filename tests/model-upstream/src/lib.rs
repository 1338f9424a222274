//! A scripted model provider for tests and benchmarks.
//!
//! The real providers cannot be reached from test machines, and a mock of golem-orch's own code
//! would prove nothing, so tests talk to this: a real HTTP/1.1 server on `127.0.0.1:0` that
//! speaks the Anthropic Messages API (`POST /v1/messages`) and the OpenAI Chat Completions API
//! (`POST /v1/chat/completions`), answers from a queue of [`Reply`]s, and records every request
//! it received (headers and body) so a test can assert what reached the provider — for example
//! that a worker's own `Authorization` header did not.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use golem_test_upstream::{Reply, Upstream};
//! let up = Upstream::start([Reply::tool("read_file", serde_json::json!({"path": "/input/a"})),
//!                           Reply::text("done").usage(120, 30)]).await?;
//! let base = up.base_url(); // http://127.0.0.1:PORT
//! # let _ = base; Ok(()) }
//! ```

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

mod reply;

pub use reply::{Api, ErrorReply, Kind, RawReply, Reply, ToolCall, Usage};

/// One request as the upstream received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// HTTP method.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Headers, names lowercase, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Recorded {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

#[derive(Debug)]
struct State {
    script: VecDeque<Reply>,
    /// Answered when the script is empty.
    fallback: Reply,
    received: Vec<Recorded>,
}

/// A running scripted upstream; it stops when dropped.
#[derive(Debug)]
pub struct Upstream {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every open connection.
        self.task.abort();
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panicking test thread must not hide the record from the next assertion.
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Upstream {
    /// Starts serving `script` in order on a fresh loopback port; once it runs out, every
    /// request gets [`Reply::text`]`("ok")` (see [`Upstream::set_fallback`]).
    pub async fn start(script: impl IntoIterator<Item = Reply>) -> std::io::Result<Upstream> {
        Upstream::start_on(script, 0).await
    }

    /// Like [`Upstream::start`] on a chosen port (0 for any), for the command-line server.
    pub async fn start_on(
        script: impl IntoIterator<Item = Reply>,
        port: u16,
    ) -> std::io::Result<Upstream> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            script: script.into_iter().collect(),
            fallback: Reply::text("ok"),
            received: Vec::new(),
        }));
        let task = tokio::spawn(accept(listener, state.clone()));
        Ok(Upstream { addr, state, task })
    }

    /// `http://127.0.0.1:PORT`, the base URL to configure a client with.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Appends a reply to the script.
    pub fn push(&self, reply: Reply) {
        lock(&self.state).script.push_back(reply);
    }

    /// What to answer once the script is empty.
    pub fn set_fallback(&self, reply: Reply) {
        lock(&self.state).fallback = reply;
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.state).received.clone()
    }

    /// How many requests have arrived.
    pub fn count(&self) -> usize {
        lock(&self.state).received.len()
    }
}

async fn accept(listener: TcpListener, state: Arc<Mutex<State>>) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let state = state.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |req| answer(req, state.clone()));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        // Reap finished connections so a long benchmark does not grow the set.
        while connections.try_join_next().is_some() {}
    }
}

async fn answer(
    req: Request<Incoming>,
    state: Arc<Mutex<State>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = req.method().to_string();
    let path = req
        .uri()
        .path_and_query()
        .map_or("/".to_string(), |p| p.to_string());
    let headers = req
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into(),
            )
        })
        .collect();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes().to_vec(),
        Err(_) => Vec::new(),
    };
    let recorded = Recorded {
        method,
        path,
        headers,
        body,
    };
    let model = recorded.json()["model"].as_str().unwrap_or("").to_string();
    let api = Api::from_path(recorded.path.split('?').next().unwrap_or(""));
    let (reply, n) = {
        let mut s = lock(&state);
        s.received.push(recorded);
        let n = s.received.len();
        let reply = if api.is_some() {
            s.script.pop_front().unwrap_or_else(|| s.fallback.clone())
        } else {
            Reply::error(404, "no such endpoint")
        };
        (reply, n)
    };
    if !reply.delay_ms.is_zero() {
        tokio::time::sleep(reply.delay_ms).await;
    }
    let rendered = reply.render(api.unwrap_or(Api::OpenAi), &model, n);
    let Some((status, body)) = rendered else {
        // A hang: hold the request until the server is dropped.
        std::future::pending::<()>().await;
        unreachable!("pending never resolves")
    };
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}
