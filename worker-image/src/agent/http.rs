//! A tiny HTTP/1.1 client over the gateway's Unix socket.
//!
//! The container has no network, so the only thing this ever talks to is the host's gateway at
//! `$GOLEM_MODEL_SOCKET`. That peer is trusted more than the documents but its answers still
//! carry model output, so the client is defensive anyway: one request per connection
//! (`Connection: close`), a deadline over the whole exchange (not per read, so a peer trickling
//! one byte a minute cannot hold the worker), a cap on the header block and on the body, and
//! both `Content-Length` and chunked bodies. No TLS, no redirects, no keep-alive, no streaming:
//! the gateway needs none of them and each would be code to get wrong.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The most of a response's status line and headers that is read.
pub const MAX_HEAD: usize = 64 * 1024;
/// The default cap on a response body: far above any model reply, far below the memory limit.
pub const DEFAULT_MAX_BODY: usize = 8 * 1024 * 1024;
/// The default deadline for one exchange; the gateway cuts slow upstreams itself (504) well
/// before this, so it only matters when the gateway itself stops answering.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Why an exchange with the gateway failed.
#[derive(Debug)]
pub enum HttpError {
    /// The socket could not be connected (no gateway for this worker, or it went away).
    Connect(PathBuf, io::Error),
    /// Reading or writing failed part-way.
    Io(io::Error),
    /// The exchange did not finish within the deadline.
    Timeout,
    /// The response (head or body) was larger than the cap.
    TooLarge(usize),
    /// The response was not HTTP/1.1 as this client reads it.
    Malformed(String),
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::Connect(p, e) => {
                write!(f, "cannot connect to the model socket {}: {e}", p.display())
            }
            HttpError::Io(e) => write!(f, "model socket i/o failed: {e}"),
            HttpError::Timeout => write!(f, "the model gateway did not answer in time"),
            HttpError::TooLarge(cap) => write!(f, "the response exceeds {cap} bytes"),
            HttpError::Malformed(m) => write!(f, "malformed HTTP response: {m}"),
        }
    }
}

impl std::error::Error for HttpError {}

impl From<io::Error> for HttpError {
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => HttpError::Timeout,
            _ => HttpError::Io(e),
        }
    }
}

/// A complete response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The whole body (de-chunked).
    pub body: Vec<u8>,
}

/// Where and how to reach the gateway.
#[derive(Debug, Clone)]
pub struct Client {
    /// The gateway's socket.
    pub socket: PathBuf,
    /// Deadline for one whole exchange.
    pub timeout: Duration,
    /// Cap on a response body.
    pub max_body: usize,
}

impl Client {
    /// A client for `socket` with the default deadline and cap.
    pub fn new(socket: impl AsRef<Path>) -> Self {
        Self {
            socket: socket.as_ref().to_path_buf(),
            timeout: DEFAULT_TIMEOUT,
            max_body: DEFAULT_MAX_BODY,
        }
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Result<Response, HttpError> {
        self.exchange("GET", path, None)
    }

    /// `POST path` with a JSON body.
    pub fn post_json(&self, path: &str, body: &[u8]) -> Result<Response, HttpError> {
        self.exchange("POST", path, Some(body))
    }

    fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<Response, HttpError> {
        let deadline = Instant::now() + self.timeout;
        let stream = UnixStream::connect(&self.socket)
            .map_err(|e| HttpError::Connect(self.socket.clone(), e))?;
        stream.set_write_timeout(Some(self.timeout))?;
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: golem-gateway\r\nConnection: close\r\n\
             Accept: application/json\r\nUser-Agent: golem-worker/{}\r\n",
            crate::VERSION
        );
        if let Some(b) = body {
            head.push_str("Content-Type: application/json\r\n");
            head.push_str(&format!("Content-Length: {}\r\n", b.len()));
        }
        head.push_str("\r\n");
        let mut w = &stream;
        let sent = w
            .write_all(head.as_bytes())
            .and_then(|()| body.map_or(Ok(()), |b| w.write_all(b)))
            .and_then(|()| w.flush());
        let timed = Timed { stream, deadline };
        match sent {
            Ok(()) => read_response(BufReader::new(timed), self.max_body),
            // A gateway refusing an oversize body may answer (413) and close before reading
            // it all; its answer says more than the broken pipe does.
            Err(e) => read_response(BufReader::new(timed), self.max_body).map_err(|_| e.into()),
        }
    }
}

/// A socket whose every read is bounded by one overall deadline.
struct Timed {
    stream: UnixStream,
    deadline: Instant,
}

impl Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

/// Reads one line (up to `\n`) of at most `*budget` bytes, charging it to the budget.
fn read_line<R: BufRead>(r: &mut R, budget: &mut usize, cap: usize) -> Result<String, HttpError> {
    let mut line = Vec::new();
    let limit = u64::try_from(*budget).unwrap_or(u64::MAX).saturating_add(1);
    r.by_ref().take(limit).read_until(b'\n', &mut line)?;
    if line.len() > *budget {
        return Err(HttpError::TooLarge(cap));
    }
    *budget -= line.len();
    if line.last() != Some(&b'\n') {
        return Err(HttpError::Malformed("connection closed mid-line".into()));
    }
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    String::from_utf8(line).map_err(|_| HttpError::Malformed("non-UTF-8 header line".into()))
}

/// Reads a response from `r`: status line, headers, then the body by `Content-Length`,
/// chunked transfer coding or, failing both, up to the end of the connection.
pub fn read_response<R: BufRead>(mut r: R, max_body: usize) -> Result<Response, HttpError> {
    let mut head_left = MAX_HEAD;
    let status_line = read_line(&mut r, &mut head_left, MAX_HEAD)?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(HttpError::Malformed(format!(
            "status line {:?}",
            crate::escape::display_chars(&status_line, 80, false)
        )));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .filter(|s| (100..600).contains(s))
        .ok_or_else(|| HttpError::Malformed("bad status code".into()))?;
    let mut length: Option<usize> = None;
    let mut chunked = false;
    loop {
        let line = read_line(&mut r, &mut head_left, MAX_HEAD)?;
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(HttpError::Malformed("header without a colon".into()));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let n: usize = value
                .parse()
                .map_err(|_| HttpError::Malformed("bad Content-Length".into()))?;
            if length.is_some_and(|old| old != n) {
                return Err(HttpError::Malformed("conflicting Content-Length".into()));
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
            if !chunked {
                return Err(HttpError::Malformed("unsupported Transfer-Encoding".into()));
            }
        }
    }
    let body = if chunked {
        read_chunked(&mut r, max_body)?
    } else if let Some(n) = length {
        if n > max_body {
            return Err(HttpError::TooLarge(max_body));
        }
        let mut body = vec![0; n];
        r.read_exact(&mut body).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => {
                HttpError::Malformed("body shorter than its length".into())
            }
            _ => HttpError::from(e),
        })?;
        body
    } else {
        read_to_end_capped(&mut r, max_body)?
    };
    Ok(Response { status, body })
}

fn read_to_end_capped<R: Read>(r: &mut R, max_body: usize) -> Result<Vec<u8>, HttpError> {
    let mut body = Vec::new();
    let limit = u64::try_from(max_body)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    r.take(limit).read_to_end(&mut body)?;
    if body.len() > max_body {
        return Err(HttpError::TooLarge(max_body));
    }
    Ok(body)
}

fn read_chunked<R: BufRead>(r: &mut R, max_body: usize) -> Result<Vec<u8>, HttpError> {
    let mut body = Vec::new();
    let mut meta_left = MAX_HEAD;
    loop {
        let line = read_line(r, &mut meta_left, MAX_HEAD)?;
        let size = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16)
            .map_err(|_| HttpError::Malformed("bad chunk size".into()))?;
        if size == 0 {
            break;
        }
        if size > max_body.saturating_sub(body.len()) {
            return Err(HttpError::TooLarge(max_body));
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..])
            .map_err(|e| match e.kind() {
                io::ErrorKind::UnexpectedEof => HttpError::Malformed("chunk cut short".into()),
                _ => HttpError::from(e),
            })?;
        if !read_line(r, &mut meta_left, MAX_HEAD)?.is_empty() {
            return Err(HttpError::Malformed("chunk not followed by CRLF".into()));
        }
    }
    // Trailers, up to the empty line.
    while !read_line(r, &mut meta_left, MAX_HEAD)?.is_empty() {}
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &[u8], cap: usize) -> Result<Response, HttpError> {
        read_response(raw, cap)
    }

    #[test]
    fn content_length_body() {
        let r = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 100).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]));
    }

    #[test]
    fn chunked_body_with_extensions_and_trailers() {
        let raw = b"HTTP/1.1 429 Too Many\r\ntransfer-encoding: chunked\r\n\r\n\
                    3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n";
        let r = parse(raw, 100).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (429, &b"abcde"[..]));
    }

    #[test]
    fn body_to_end_of_connection() {
        let r = parse(b"HTTP/1.0 200 OK\n\n{}", 100).unwrap();
        assert_eq!(r.body, b"{}");
    }

    #[test]
    fn caps_and_malformed_responses_are_errors() {
        let big = b"HTTP/1.1 200 OK\r\nContent-Length: 101\r\n\r\n";
        assert!(matches!(parse(big, 100), Err(HttpError::TooLarge(100))));
        let chunks = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n";
        assert!(matches!(parse(chunks, 10), Err(HttpError::TooLarge(10))));
        let endless = [b"HTTP/1.1 200 OK\r\n".as_slice(), &[b'a'; MAX_HEAD + 10]].concat();
        assert!(matches!(parse(&endless, 10), Err(HttpError::TooLarge(_))));
        for bad in [
            &b"SMTP 220 hi\r\n\r\n"[..],
            b"HTTP/1.1 abc OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        ] {
            assert!(
                matches!(parse(bad, 100), Err(HttpError::Malformed(_))),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn an_early_refusal_is_read_even_when_the_body_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let refusal = b"HTTP/1.1 413 Too Large\r\nContent-Length: 2\r\n\r\n{}";
            s.write_all(refusal).unwrap();
            // Dropping the socket with unread data resets the connection.
        });
        let body = vec![b'x'; 8 << 20];
        let r = Client::new(&path).post_json("/v1/messages", &body);
        server.join().unwrap();
        match r {
            Ok(r) => assert_eq!(r.status, 413),
            Err(e) => panic!("the refusal was lost: {e}"),
        }
    }

    #[test]
    fn a_silent_gateway_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let hold = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
        let mut client = Client::new(&path);
        client.timeout = Duration::from_millis(200);
        let started = Instant::now();
        assert!(matches!(client.get("/golem/info"), Err(HttpError::Timeout)));
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(hold.join());
        let missing = Client::new(dir.path().join("none.sock"));
        assert!(matches!(missing.get("/"), Err(HttpError::Connect(..))));
    }
}
