//! The socket side: accept connections on the session's socket, speak HTTP/1.1, and turn each
//! request into one answer and one record.
//!
//! Every connection on this listener belongs to the one session that owns the socket; nothing
//! in a request can claim another. The request is checked in the cheapest order that still
//! records what matters: method and target, then the body (read under the cap), then the
//! honeytoken, then the body's fields, then a concurrency slot, then the budget, and only then
//! is anything sent upstream.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Value};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::check::{self, Refusal};
use super::transcript::{sha256_hex, Exchange};
use super::Shared;

/// Connections one session may hold open at once; more are closed on accept. A worker needs a
/// handful; the cap only stops one from exhausting the host's descriptors.
const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send a request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long in-flight requests may finish after shutdown is asked for.
const GRACE: Duration = Duration::from_secs(2);

/// Serves `listener` until `cancel`, then lets open requests finish for [`GRACE`].
pub(super) async fn serve(listener: UnixListener, shared: Arc<Shared>, cancel: CancellationToken) {
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = cancel.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        while connections.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of descriptors, say: wait instead of spinning on the error.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if connections.len() >= MAX_CONNECTIONS {
            continue;
        }
        connections.spawn(connection(stream, shared.clone(), cancel.clone()));
    }
    drop(listener);
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(GRACE, drain).await.is_err() {
        connections.shutdown().await;
    }
}

/// One connection, HTTP/1.1 only. On shutdown an idle keep-alive connection is closed at once
/// and a busy one after its current request.
async fn connection(stream: UnixStream, shared: Arc<Shared>, cancel: CancellationToken) {
    let service = hyper::service::service_fn(move |req| answer(shared.clone(), req));
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(64 << 10)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        () = cancel.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// The outcome of one request before it is recorded.
struct Outcome {
    status: u16,
    body: Bytes,
    request: Bytes,
    model: Option<String>,
    refused: Option<Refusal>,
    error: Option<String>,
    usage: (u64, u64),
}

impl Outcome {
    fn refused(refusal: Refusal, request: Bytes) -> Outcome {
        Outcome {
            status: refusal.status(),
            body: check::error_body(refusal.kind(), &refusal.to_string()),
            model: check::model_of(&request),
            request,
            refused: Some(refusal),
            error: None,
            usage: (0, 0),
        }
    }
}

async fn answer(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let started = Instant::now();
    let time = crate::audit::now();
    let outcome = match route(&req) {
        Err(refusal) => Outcome::refused(refusal, Bytes::new()),
        Ok(()) if req.method() == Method::GET && req.uri().path() == "/golem/info" => {
            return Ok(json_response(200, Bytes::from(shared.info().to_string())));
        }
        Ok(()) => forward(&shared, req).await,
    };
    let response = json_response(outcome.status, outcome.body.clone());
    record(&shared, outcome, time, started);
    Ok(response)
}

/// Refuses anything but `POST` of the configured API's path in origin form.
fn route(req: &Request<Incoming>) -> Result<(), Refusal> {
    if req.method() == Method::CONNECT {
        return Err(Refusal::Connect);
    }
    let uri = req.uri();
    if uri.scheme().is_some() || uri.authority().is_some() {
        return Err(Refusal::AbsoluteForm);
    }
    Ok(())
}

/// Takes a concurrency slot, reads the body, and hands it to [`checked_send`].
///
/// The slot is taken before the body is read, so at most `max_concurrent` bodies of a session
/// are in the host's memory at once; the rest wait unread on their connections. Waiting is
/// bounded by the request timeout: a worker that floods the socket gets 429s, not a queue.
async fn forward(shared: &Shared, req: Request<Incoming>) -> Outcome {
    let path = shared.api.path();
    // The query, if any, is not forwarded: only the path and the checked body go upstream.
    if req.uri().path() != path {
        return Outcome::refused(Refusal::NotFound(path), Bytes::new());
    }
    if req.method() != Method::POST {
        return Outcome::refused(Refusal::NotServed(path), Bytes::new());
    }
    let timeout = shared.policy.request_timeout.duration();
    let Ok(Ok(_permit)) = tokio::time::timeout(timeout, shared.permits.acquire()).await else {
        return Outcome::refused(Refusal::Busy, Bytes::new());
    };
    let (parts, body) = req.into_parts();
    let max = shared.policy.max_request_bytes.bytes();
    // A body trickled in byte by byte would hold the slot; it gets the request's time limit.
    let read = tokio::time::timeout(timeout, check::read_body(&parts.headers, body, max)).await;
    match read {
        Ok(Ok(body)) => checked_send(shared, &parts.headers, body).await,
        Ok(Err(refusal)) => Outcome::refused(refusal, Bytes::new()),
        Err(_) => Outcome::refused(Refusal::BadBody("not sent in time".into()), Bytes::new()),
    }
}

/// Checks the body, reserves the budget, forwards, and settles on the reported usage.
async fn checked_send(shared: &Shared, headers: &hyper::HeaderMap, body: Bytes) -> Outcome {
    let value: Option<Value> = serde_json::from_slice(&body).ok();
    if let Some(token) = shared.honeytoken.as_deref() {
        if check::carries(&body, value.as_ref(), token) {
            shared.honeytoken_seen.store(true, Ordering::SeqCst);
            return Outcome::refused(Refusal::Honeytoken, body);
        }
    }
    let Some(value) = value else {
        return Outcome::refused(Refusal::BadBody("not JSON".into()), body);
    };
    let checked = match check::check_body(shared.api, &value, &shared.allowed) {
        Ok(c) => c,
        Err(refusal) => return Outcome::refused(refusal, body),
    };
    let estimate = super::budget::estimate_input_tokens(body.len());
    let reservation = match shared.budget.reserve(checked.max_tokens, estimate) {
        Ok(r) => r,
        Err(exhausted) => return Outcome::refused(Refusal::Budget(exhausted), body),
    };
    let timeout = shared.policy.request_timeout.duration();
    let sent = shared.forwarder.send(headers, body.clone(), timeout).await;
    let usage = sent.as_ref().ok().and_then(|a| a.usage);
    let charged = usage.unwrap_or((estimate, checked.max_tokens));
    shared.budget.settle(reservation, usage);
    let (status, answer, error) = match sent {
        Ok(a) => (a.status, a.body, None),
        Err(e) => {
            let status = match e {
                super::forward::ForwardError::Timeout(_) => 504,
                _ => 502,
            };
            let message = e.to_string();
            (
                status,
                check::error_body("upstream", &message),
                Some(message),
            )
        }
    };
    Outcome {
        status,
        body: answer,
        request: body,
        model: Some(checked.model),
        refused: None,
        error,
        usage: charged,
    }
}

/// Refused requests recorded one by one (transcript line and audit event); past this a worker
/// that keeps sending refused requests is only counted, so it cannot flood the transcript or the
/// audit log with bodies the budget never charged. The first honeytoken refusals are recorded
/// whatever the count ([`MAX_RECORDED_HONEYTOKENS`]).
pub(super) const MAX_RECORDED_REFUSALS: u64 = 1_000;

/// Honeytoken refusals recorded whatever the flood: the first ones are the evidence.
pub(super) const MAX_RECORDED_HONEYTOKENS: u64 = 10;

/// Writes the transcript line and sends the audit events for one finished request.
fn record(shared: &Shared, o: Outcome, time: String, started: Instant) {
    let seq = shared.seq.fetch_add(1, Ordering::SeqCst) + 1;
    let exchange = Exchange {
        seq,
        time,
        model: o.model,
        status: o.status,
        refused: o.refused.as_ref().map(|r| r.kind().to_string()),
        error: o.error,
        input_tokens: o.usage.0,
        output_tokens: o.usage.1,
        latency_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        request_sha256: sha256_hex(&o.request),
        response_sha256: sha256_hex(&o.body),
    };
    if let Some(refusal) = &o.refused {
        let refused = shared.refused.fetch_add(1, Ordering::SeqCst) + 1;
        // The first honeytoken sightings are always recorded (they are the evidence); a worker
        // that keeps sending its fake key is counted like any other flood after that.
        let evidence = matches!(refusal, Refusal::Honeytoken)
            && shared.honeytokens.fetch_add(1, Ordering::SeqCst) < MAX_RECORDED_HONEYTOKENS;
        if refused > MAX_RECORDED_REFUSALS && !evidence {
            // A flood of refused requests: counted, answered, not recorded one by one.
            shared.incomplete.fetch_add(1, Ordering::SeqCst);
            if refused == MAX_RECORDED_REFUSALS + 1 {
                shared.emit("model.refusals_capped", json!({"seq": seq,
                    "recorded": MAX_RECORDED_REFUSALS,
                    "message": "the worker kept sending refused requests; later ones are only counted"}));
            }
            return;
        }
    }
    let written = shared.transcript.append(&exchange, &o.request, &o.body);
    let mut data = serde_json::to_value(&exchange).unwrap_or(Value::Null);
    match written {
        Ok(kept) => {
            if let Some(note) = kept.note() {
                shared.incomplete.fetch_add(1, Ordering::SeqCst);
                data["transcript"] = Value::String(note.into());
            }
        }
        // The record still reaches the audit log, which says the transcript is incomplete.
        Err(e) => {
            shared.incomplete.fetch_add(1, Ordering::SeqCst);
            data["transcript_error"] = Value::String(e.to_string());
        }
    }
    let event = match &o.refused {
        Some(refusal) => {
            data["reason"] = Value::String(refusal.to_string());
            "model.refused"
        }
        None => "model.request",
    };
    shared.emit(event, data);
    if matches!(o.refused, Some(Refusal::Honeytoken)) {
        let warning = json!({"seq": seq, "severity": "high",
            "message": "a model request carried the container's fake key: the worker tried to send its environment out"});
        shared.emit("model.honeytoken", warning);
    }
}

fn json_response(status: u16, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::BAD_GATEWAY);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}
