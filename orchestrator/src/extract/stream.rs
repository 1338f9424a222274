//! The raw tar stream: its caps (entries and bytes, counted on what is read, never on what the
//! archive declares), the counting reader that enforces them, and what may follow the end.

use std::cell::Cell;
use std::io::{self, Read};

use super::names::escape_for_report;
use super::{ExtractError, Limits};

/// Raw archive overhead allowed per entry: a header, plus a PAX or GNU
/// long-name header and one block of its data.
const ARCHIVE_BYTES_PER_ENTRY: u64 = 1536;

/// Fixed slack on the raw archive byte cap (end-of-archive blocks, larger
/// PAX records such as xattrs that Docker emits, padding).
const ARCHIVE_BYTES_SLACK: u64 = 1 << 20;

/// Zero padding accepted after the end-of-archive block (tar pads to its record size, 10 KiB
/// for GNU tar); the stream is read to its end so its producer is never cut off mid-write.
pub(super) const MAX_TRAILING_PADDING: u64 = 64 << 10;

/// Maximum number of archive entries of any kind.
///
/// Rejected entries (symlinks, FIFOs, bad names) and directories are cheap to
/// emit and never count against `max_files`, so without this cap a worker
/// could make the host parse and track entries indefinitely. Twice the file
/// cap plus a fixed allowance leaves room for one directory per file.
pub fn max_entries(limits: &Limits) -> u64 {
    limits.max_files.saturating_mul(2).saturating_add(10_000)
}

/// Maximum number of raw bytes read from the tar stream.
///
/// Some input never surfaces as an entry the per-entry checks could see: data
/// of rejected entries (skipped, not stored), padding, PAX/GNU extension
/// headers, GNU sparse extension blocks, trailing garbage. This cap on the
/// raw stream (accepted data + generous per-entry header overhead + 1 MiB)
/// guarantees that an endless or enormous stream is cut off regardless. Note
/// that bytes of rejected oversized files also consume this budget.
pub fn max_archive_bytes(limits: &Limits) -> u64 {
    limits
        .max_total_bytes
        .saturating_add(max_entries(limits).saturating_mul(ARCHIVE_BYTES_PER_ENTRY))
        .saturating_add(ARCHIVE_BYTES_SLACK)
}

/// Shared between the counting reader (owned by the tar crate) and the
/// extraction loop, so errors coming back through the tar crate can be
/// attributed to the right cause.
#[derive(Default)]
pub(super) struct StreamState {
    consumed: Cell<u64>,
    cap_exceeded: Cell<bool>,
    inner_failed: Cell<bool>,
    eof: Cell<bool>,
}

/// Counts every byte pulled from the underlying stream and fails once more
/// than `cap` bytes have been read.
pub(super) struct CountingReader<'s, R> {
    inner: R,
    cap: u64,
    state: &'s StreamState,
}

impl StreamState {
    /// More than the cap was read.
    pub(super) fn cap_exceeded(&self) -> bool {
        self.cap_exceeded.get()
    }

    /// The underlying stream ended.
    pub(super) fn eof(&self) -> bool {
        self.eof.get()
    }
}

impl<'s, R> CountingReader<'s, R> {
    /// Counts `inner` against `cap`, recording what happened in `state`.
    pub(super) fn new(inner: R, cap: u64, state: &'s StreamState) -> Self {
        CountingReader { inner, cap, state }
    }
}

fn cap_error() -> io::Error {
    io::Error::other("archive byte cap exceeded")
}

impl<R: Read> Read for CountingReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.state.cap_exceeded.get() {
            return Err(cap_error());
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let consumed = self.state.consumed.get();
        // Allow reading one byte past the cap: a stream of exactly `cap`
        // bytes is fine, one more byte is detected as "too much".
        let allowed = self.cap.saturating_add(1).saturating_sub(consumed);
        let want = usize::try_from(allowed).map_or(buf.len(), |a| a.min(buf.len()));
        let n = loop {
            match self.inner.read(&mut buf[..want]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.state.inner_failed.set(true);
                    return Err(e);
                }
            }
        };
        if n == 0 {
            self.state.eof.set(true);
            return Ok(0);
        }
        // Defensive against a reader that misreports its count.
        let n = n.min(want);
        let total = consumed.saturating_add(n as u64);
        self.state.consumed.set(total);
        if total > self.cap {
            self.state.cap_exceeded.set(true);
            return Err(cap_error());
        }
        Ok(n)
    }
}

/// Classify an error that came out of the tar crate or an entry read.
pub(super) fn stream_error(state: &StreamState, archive_cap: u64, e: io::Error) -> ExtractError {
    if state.cap_exceeded.get() {
        ExtractError::ArchiveBytesExceeded { limit: archive_cap }
    } else if state.inner_failed.get() {
        ExtractError::Io {
            context: "reading the archive stream".to_string(),
            source: e,
        }
    } else if state.eof.get() {
        ExtractError::Truncated(escape_for_report(e.to_string().as_bytes()))
    } else {
        // The tar crate's messages may quote header names: escape them.
        ExtractError::Malformed(escape_for_report(e.to_string().as_bytes()))
    }
}

/// Reads the stream to its end: a producer blocked on a full pipe must see its archive
/// consumed, not refused, and anything after the end marker but zero padding is malformed.
pub(super) fn read_trailer<R: Read>(
    rest: R,
    state: &StreamState,
    archive_cap: u64,
) -> Result<(), ExtractError> {
    let mut rest = rest.take(MAX_TRAILING_PADDING + 1);
    let mut buf = [0u8; 8192];
    let mut padding: u64 = 0;
    loop {
        let n = rest
            .read(&mut buf)
            .map_err(|e| stream_error(state, archive_cap, e))?;
        if n == 0 {
            return Ok(());
        }
        padding += n as u64;
        if buf[..n].iter().any(|&b| b != 0) || padding > MAX_TRAILING_PADDING {
            return Err(ExtractError::Malformed(
                "data after the end-of-archive block".to_string(),
            ));
        }
    }
}
