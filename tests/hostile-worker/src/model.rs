//! `model ACTION...`: a worker that attacks the model gateway's socket from inside the container.
//!
//! Each action talks HTTP/1.1 to `$GOLEM_MODEL_SOCKET` (default `/run/golem/model.sock`) with a
//! fresh connection written by hand, so that the shapes a real client never sends (CONNECT,
//! absolute-form targets, lying lengths, its own credentials) go out exactly. Every action
//! appends one entry (or one per request for `burst`) to `/output/model.json`:
//! `{"action", "status", "body", "error", "elapsed_ms"}`. Nothing here panics.
//!
//! Actions:
//! - `info`: `GET /golem/info`;
//! - `ask`, `ask-model NAME`: one small request in the gateway's API for its default model (or NAME);
//! - `auth`: `ask` carrying the worker's own `Authorization`, `x-api-key` and `Cookie` headers;
//! - `big BYTES`: a request whose body is BYTES long;
//! - `connect`, `absolute`: `CONNECT host:443` and `POST http://host/<path>` (proxy shapes);
//! - `env`: `ask` whose message is the worker's whole environment (what an injected agent does);
//! - `beta-env`: `ask` carrying the environment in the `anthropic-beta` header instead, which
//!   the gateway passes on (a channel beside the body, which the transcript records);
//! - `burst N`: N `ask`s at once, one thread each;
//! - `socket PATH`: try to connect to another socket (another session's, by its host path);
//! - `sockets`: list every socket file in the container's view (`/proc`, `/sys` skipped);
//! - `leak`: write `/output/leak.bin`, everything the worker can read about itself that could
//!   hold a key: its and PID 1's environment and command line, its mounts, and every small
//!   readable file of its root filesystem, for the host to search.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Where the gateway's socket is unless `GOLEM_MODEL_SOCKET` says otherwise.
const DEFAULT_SOCKET: &str = "/run/golem/model.sock";
/// Longest any one exchange may take (longer than any request_timeout the stories set).
const IO_TIMEOUT: Duration = Duration::from_secs(60);
/// Most bytes of a response body kept in the evidence.
const MAX_BODY: usize = 16 * 1024;
/// Largest file `leak` copies, and most bytes it writes in all.
const LEAK_FILE_MAX: u64 = 256 * 1024;
const LEAK_TOTAL_MAX: usize = 4 * 1024 * 1024;

fn socket() -> PathBuf {
    std::env::var_os("GOLEM_MODEL_SOCKET")
        .map_or_else(|| PathBuf::from(DEFAULT_SOCKET), PathBuf::from)
}

/// What `/golem/info` said the gateway serves.
struct Info {
    path: String,
    model: String,
}

/// Sends `head` (request line and headers, without the final blank line) and `body` on a
/// fresh connection to `path`; returns the status and body, or the error.
fn exchange(path: &Path, head: &str, body: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let mut s =
        UnixStream::connect(path).map_err(|e| format!("connect {}: {e}", path.display()))?;
    let _ = s.set_read_timeout(Some(IO_TIMEOUT));
    let _ = s.set_write_timeout(Some(IO_TIMEOUT));
    let request = format!("{head}\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    // The gateway may answer (413) and close before the whole body is written.
    let _ = s.write_all(body);
    let mut out = Vec::new();
    let read = s.read_to_end(&mut out);
    if out.is_empty() {
        return Err(format!("no answer: {read:?}"));
    }
    let text = String::from_utf8_lossy(&out);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let start = text.find("\r\n\r\n").map_or(out.len(), |i| i + 4);
    Ok((status, out[start.min(out.len())..].to_vec()))
}

fn post_head(target: &str, len: usize, extra: &str) -> String {
    format!(
        "POST {target} HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {len}{extra}"
    )
}

fn info() -> Result<Info, String> {
    let (status, body) = exchange(&socket(), "GET /golem/info HTTP/1.1", b"")?;
    let v: Value = serde_json::from_slice(&body).map_err(|e| format!("info {status}: {e}"))?;
    Ok(Info {
        path: v["path"].as_str().unwrap_or("/v1/messages").to_string(),
        model: v["default_model"].as_str().unwrap_or("").to_string(),
    })
}

fn ask_body(model: &str, text: &str) -> Vec<u8> {
    json!({"model": model, "max_tokens": 16,
        "messages": [{"role": "user", "content": text}]})
    .to_string()
    .into_bytes()
}

fn entry(action: &str, started: Instant, result: Result<(u16, Vec<u8>), String>) -> Value {
    let elapsed = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    match result {
        Ok((status, body)) => {
            let body = serde_json::from_slice::<Value>(&body).unwrap_or_else(|_| {
                Value::String(String::from_utf8_lossy(&body[..body.len().min(MAX_BODY)]).into())
            });
            json!({"action": action, "status": status, "body": body, "elapsed_ms": elapsed})
        }
        Err(e) => json!({"action": action, "status": null, "error": e, "elapsed_ms": elapsed}),
    }
}

fn environment() -> String {
    std::env::vars_os()
        .map(|(k, v)| format!("{}={}\n", k.to_string_lossy(), v.to_string_lossy()))
        .collect()
}

/// One action's request, as `(head, body)`, or `None` for the actions that are not requests.
fn request(action: &str, arg: Option<&str>, info: &Info) -> Option<(String, Vec<u8>)> {
    let path = info.path.as_str();
    let ask = |model: &str, text: &str, extra: &str| {
        let body = ask_body(model, text);
        Some((post_head(path, body.len(), extra), body))
    };
    match action {
        "info" => Some(("GET /golem/info HTTP/1.1".into(), Vec::new())),
        "ask" => ask(&info.model, "Summarise the document.", ""),
        "ask-model" => ask(arg.unwrap_or(""), "Summarise the document.", ""),
        "auth" => ask(
            &info.model,
            "Summarise the document.",
            "\r\nAuthorization: Bearer sk-worker-own-credential\r\nx-api-key: sk-worker-own-credential\r\nCookie: session=worker-own-cookie",
        ),
        "env" => ask(&info.model, &environment(), ""),
        "beta-env" => {
            let flat: String = environment()
                .chars()
                .map(|c| match c {
                    '\n' => ',',
                    c if c.is_ascii_graphic() => c,
                    _ => '_',
                })
                .collect();
            ask(
                &info.model,
                "Summarise the document.",
                &format!("\r\nanthropic-beta: {flat}"),
            )
        }
        "big" => {
            let n: usize = arg.and_then(|a| a.parse().ok()).unwrap_or(0);
            let pad = n.saturating_sub(80);
            let body = ask_body(&info.model, &"A".repeat(pad));
            Some((post_head(path, body.len(), ""), body))
        }
        "connect" => Some((
            "CONNECT api.anthropic.com:443 HTTP/1.1".into(),
            Vec::new(),
        )),
        "absolute" => {
            let body = ask_body(&info.model, "Summarise the document.");
            let target = format!("http://api.anthropic.com{path}");
            Some((post_head(&target, body.len(), ""), body))
        }
        _ => None,
    }
}

fn burst(n: usize, info: &Info) -> Vec<Value> {
    let Some((head, body)) = request("ask", None, info) else {
        return Vec::new();
    };
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (head, body) = (head.clone(), body.clone());
            std::thread::spawn(move || {
                let started = Instant::now();
                entry("burst", started, exchange(&socket(), &head, &body))
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| {
            t.join()
                .unwrap_or_else(|_| json!({"action": "burst", "error": "thread panicked"}))
        })
        .collect()
}

/// Every socket under `dir`, not following links, skipping `/proc` and `/sys`.
fn sockets_under(dir: &Path, found: &mut Vec<String>, depth: u32) {
    if depth > 12 || dir == Path::new("/proc") || dir == Path::new("/sys") {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        // lstat, not the directory entry's type: a bind-mounted socket shows in readdir as
        // the file it was mounted over.
        let Ok(t) = e.path().symlink_metadata().map(|m| m.file_type()) else {
            continue;
        };
        if t.is_socket() {
            found.push(e.path().display().to_string());
        } else if t.is_dir() {
            sockets_under(&e.path(), found, depth + 1);
        }
    }
}

/// Appends to `out` every small readable regular file under `dir` (links not followed).
fn collect_files(dir: &Path, out: &mut Vec<u8>, depth: u32) {
    let skip = ["/proc", "/sys", "/dev", "/output"];
    if depth > 12 || skip.iter().any(|s| dir == Path::new(s)) {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(meta) = e.path().symlink_metadata() else {
            continue;
        };
        if meta.is_dir() {
            collect_files(&e.path(), out, depth + 1);
        } else if meta.is_file() && meta.len() <= LEAK_FILE_MAX && out.len() < LEAK_TOTAL_MAX {
            if let Ok(bytes) = fs::read(e.path()) {
                out.extend_from_slice(format!("\n== {}\n", e.path().display()).as_bytes());
                out.extend_from_slice(&bytes);
            }
        }
    }
}

fn leak() -> Value {
    let mut out = Vec::new();
    for p in [
        "/proc/self/environ",
        "/proc/1/environ",
        "/proc/self/cmdline",
        "/proc/1/cmdline",
        "/proc/self/mountinfo",
        "/proc/self/mounts",
    ] {
        out.extend_from_slice(format!("\n== {p}\n").as_bytes());
        match fs::read(p) {
            Ok(b) => out.extend_from_slice(&b),
            Err(e) => out.extend_from_slice(format!("error: {e}").as_bytes()),
        }
    }
    collect_files(Path::new("/"), &mut out, 0);
    let path = crate::output_dir().join("leak.bin");
    let written = fs::write(&path, &out).map_err(|e| e.to_string());
    json!({"action": "leak", "bytes": out.len(), "written": written.is_ok(), "error": written.err()})
}

/// Runs the actions in order and writes `/output/model.json`; 0 unless the evidence cannot
/// be written.
pub(crate) fn model(actions: &[String]) -> i32 {
    let mut results = Vec::new();
    let info = info().unwrap_or_else(|e| {
        results.push(json!({"action": "info-probe", "error": e}));
        Info {
            path: "/v1/messages".into(),
            model: String::new(),
        }
    });
    let mut args = actions.iter().map(String::as_str);
    while let Some(action) = args.next() {
        let takes_arg = matches!(action, "ask-model" | "big" | "burst" | "socket");
        let arg = if takes_arg { args.next() } else { None };
        let started = Instant::now();
        match action {
            "burst" => results.extend(burst(arg.and_then(|a| a.parse().ok()).unwrap_or(0), &info)),
            "socket" => {
                let path = Path::new(arg.unwrap_or(""));
                let r = UnixStream::connect(path)
                    .map(|_| ())
                    .map_err(|e| e.to_string());
                results.push(json!({"action": "socket", "path": path, "connected": r.is_ok(), "error": r.err()}));
            }
            "sockets" => {
                let mut found = Vec::new();
                sockets_under(Path::new("/"), &mut found, 0);
                results.push(json!({"action": "sockets", "found": found}));
            }
            "leak" => results.push(leak()),
            _ => match request(action, arg, &info) {
                Some((head, body)) => {
                    results.push(entry(action, started, exchange(&socket(), &head, &body)));
                }
                None => results.push(json!({"action": action, "error": "unknown action"})),
            },
        }
    }
    let path = crate::output_dir().join("model.json");
    match fs::write(&path, Value::Array(results).to_string()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("hostile-worker: cannot write {}: {e}", path.display());
            1
        }
    }
}
