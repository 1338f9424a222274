//! THE rendering gate: everything golem-orch prints to a terminal, or writes into text a person
//! reads, passes through here.
//!
//! Names and text from untrusted places (an input's folder, a cloned repository's files, a
//! worker's output names and logs, an engine object, a URL) may carry terminal escape sequences
//! (OSC 52 writes the clipboard, `\e[8m` hides what follows), bidi overrides that reorder text,
//! or invisible characters that make two names look alike. Every character of
//! [`golem_protocol::chars`] is shown escaped instead (`\u{1b}`, `\u{202e}`, `\n`), so output is
//! inert whatever it quotes:
//!
//! - [`line`] for one-line fields (names, paths, sources, error lines): newlines and tabs are
//!   escaped too, so a value cannot forge extra lines.
//! - [`block`] for multi-line text (logs, diff bodies): keeps `\n` and `\t`.
//! - [`bytes`], [`block_bytes`] and [`path`] for what may not be UTF-8: invalid bytes as `\xNN`.
//! - [`json`] for `--json`: the same JSON value, with every dangerous character inside strings
//!   written as a `\uXXXX` escape (serde_json leaves C1, bidi and tag characters raw).
//!
//! Printing itself happens only here: [`out`], [`err`], [`print_json`], [`out_coloured`] and
//! [`Progress`] render whatever they are given (with [`block`]) before writing, so even a caller
//! that forgot [`line`] cannot put a dangerous byte on the terminal. A unit test fails if any
//! other module of the crate prints directly. The only escape sequences ever written are
//! golem-orch's own colours ([`paint`]), added after the content was rendered.
//!
//! Escapes are visible, not reversible: a literal backslash is left as it is.

use std::fmt::{self, Write as _};
use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use golem_protocol::chars;

/// One line: every dangerous character, newlines and tabs included, shown escaped.
pub fn line(text: &str) -> String {
    escape(text, chars::is_dangerous)
}

/// Multi-line text: keeps `\n` and `\t` and escapes every other dangerous character (`\r` too,
/// which would move the cursor back over a line).
pub fn block(text: &str) -> String {
    escape(text, chars::is_dangerous_in_text)
}

/// Bytes that should be text, for one line: invalid UTF-8 as `\xNN`, then as [`line`].
pub fn bytes(raw: &[u8]) -> String {
    escape_bytes(raw, chars::is_dangerous)
}

/// Bytes that should be multi-line text (a logs file): invalid UTF-8 as `\xNN`, then as [`block`].
pub fn block_bytes(raw: &[u8]) -> String {
    escape_bytes(raw, chars::is_dangerous_in_text)
}

/// A path on one line, whatever bytes its components hold.
pub fn path(p: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    bytes(p.as_os_str().as_bytes())
}

fn escape(text: &str, dangerous: fn(char) -> bool) -> String {
    if !text.chars().any(dangerous) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        push_char(&mut out, c, dangerous);
    }
    out
}

fn escape_bytes(raw: &[u8], dangerous: fn(char) -> bool) -> String {
    let mut out = String::with_capacity(raw.len());
    for chunk in raw.utf8_chunks() {
        for c in chunk.valid().chars() {
            push_char(&mut out, c, dangerous);
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

fn push_char(out: &mut String, c: char, dangerous: fn(char) -> bool) {
    if !dangerous(c) {
        out.push(c);
        return;
    }
    match c {
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\r' => out.push_str("\\r"),
        _ => {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
    }
}

/// Pretty JSON of `value` whose bytes are inert on a terminal: every dangerous character inside a
/// string is written as `\uXXXX` (a surrogate pair above the BMP). The JSON value is identical.
pub fn json(value: &impl serde::Serialize) -> Result<String, serde_json::Error> {
    Ok(json_inert(&serde_json::to_string_pretty(value)?))
}

/// Makes serialised JSON inert: outside strings JSON is ASCII punctuation, digits, letters and
/// whitespace, and serde_json escapes C0 controls inside strings itself, so every dangerous
/// character left (other than the layout's newlines) is inside a string, where `\uXXXX` means
/// exactly the same character.
pub fn json_inert(serialised: &str) -> String {
    let dangerous = |c: char| c != '\n' && chars::is_dangerous(c);
    if !serialised.chars().any(dangerous) {
        return serialised.to_string();
    }
    let mut out = String::with_capacity(serialised.len() + 16);
    let mut units = [0u16; 2];
    for c in serialised.chars() {
        if dangerous(c) {
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The colours golem-orch itself uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Colour {
    /// Headings.
    Bold,
    /// Removed lines, refusals, failures.
    Red,
    /// Added lines.
    Green,
    /// Hunk headers.
    Cyan,
    /// Marks a reviewer must read (sensitive paths, collisions).
    Warning,
}

impl Colour {
    fn sgr(self) -> &'static str {
        match self {
            Colour::Bold => "\x1b[1m",
            Colour::Red => "\x1b[31m",
            Colour::Green => "\x1b[32m",
            Colour::Cyan => "\x1b[36m",
            Colour::Warning => "\x1b[1;33m",
        }
    }
}

const RESET: &str = "\x1b[0m";
/// Every escape sequence golem-orch ever writes: its own colours and the reset.
const OWN_SEQUENCES: [&str; 6] = [
    "\x1b[0m",
    "\x1b[1m",
    "\x1b[31m",
    "\x1b[32m",
    "\x1b[36m",
    "\x1b[1;33m",
];

/// `text` rendered as one [`line`], then coloured: for [`out_coloured`].
pub fn paint(colour: Colour, text: &str) -> String {
    format!("{}{}{RESET}", colour.sgr(), line(text))
}

/// Renders text that carries golem-orch's own colours (made with [`paint`], or the diff
/// renderer's, which renders its content first): those exact sequences are kept, every other
/// dangerous character is escaped as in [`block`]. An escape sequence that is not one of
/// golem-orch's (`\e[8m` hides text) is shown escaped.
pub fn coloured(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '\x1b' {
            if let Some(own) = OWN_SEQUENCES.iter().find(|s| rest.starts_with(**s)) {
                out.push_str(own);
                rest = &rest[own.len()..];
                continue;
            }
        }
        push_char(&mut out, c, chars::is_dangerous_in_text);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Whether stdout is a terminal (colours are only for terminals).
pub fn stdout_is_terminal() -> bool {
    io::stdout().is_terminal()
}

/// Whether stderr is a terminal (the batch progress bar is only for terminals).
pub fn stderr_is_terminal() -> bool {
    io::stderr().is_terminal()
}

/// Writes to stdout; a closed pipe (`golem-orch ... | head`) ends the process quietly with the
/// status of a process killed by SIGPIPE, as it does for any Unix tool, instead of a panic.
fn write_stdout(text: &str) {
    let mut stdout = io::stdout().lock();
    if let Err(e) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        if e.kind() == io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
    }
}

/// Writes to stderr; there is nowhere left to report a failure to write to stderr.
fn write_stderr(text: &str) {
    let mut stderr = io::stderr().lock();
    let _ = stderr
        .write_all(text.as_bytes())
        .and_then(|()| stderr.flush());
}

/// Prints to stdout, rendered as a [`block`].
pub fn out(args: fmt::Arguments<'_>) {
    write_stdout(&block(&args.to_string()));
}

/// Prints a line to stdout, rendered as a [`block`].
pub fn outln(args: fmt::Arguments<'_>) {
    let mut text = block(&args.to_string());
    text.push('\n');
    write_stdout(&text);
}

/// Prints to stdout text that carries golem-orch's own colours, rendered by [`coloured`].
pub fn out_coloured(text: &str) {
    write_stdout(&coloured(text));
}

/// Whether the person asked for no colour: `NO_COLOR` set and non-empty (no-color.org), whatever
/// the terminal.
pub fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// The pager command for `PAGER` as read from the environment: `less -R` when unset, none when
/// empty or `cat` (nothing to gain from a child process then).
fn pager_command(var: Result<String, std::env::VarError>) -> Option<String> {
    match var {
        Err(std::env::VarError::NotPresent) => Some("less -R".to_string()),
        Err(std::env::VarError::NotUnicode(_)) => None,
        Ok(p) if p.trim().is_empty() || p.trim() == "cat" => None,
        Ok(p) => Some(p),
    }
}

/// Shows long text carrying golem-orch's own colours (an 850-line diff) through the person's
/// pager, so it does not scroll past the question it answers. Only when stdout is a terminal;
/// otherwise, or when the pager cannot start, it is written like [`out_coloured`] (or
/// [`err_coloured`] with `on_stderr`). Either way the bytes are rendered by [`coloured`] first:
/// the pager gets exactly what the terminal would have, so the gate still holds.
pub fn page_coloured(text: &str, on_stderr: bool) {
    let rendered = coloured(text);
    let command = if stdout_is_terminal() {
        pager_command(std::env::var("PAGER"))
    } else {
        None
    };
    if let Some(command) = command {
        if let Some(()) = run_pager(&command, &rendered) {
            return;
        }
    }
    if on_stderr {
        write_stderr(&rendered);
    } else {
        write_stdout(&rendered);
    }
}

/// Feeds already rendered text to `sh -c PAGER` (as git does, so `PAGER="less -S"` works) and
/// waits for it; `None` when it could not start. `LESS=FRX` unless the person set `LESS`: one
/// screen quits at once, and the text stays on the terminal afterwards.
fn run_pager(command: &str, rendered: &str) -> Option<()> {
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", command])
        .stdin(std::process::Stdio::piped());
    if std::env::var_os("LESS").is_none() {
        cmd.env("LESS", "FRX");
    }
    let mut child = cmd.spawn().ok()?;
    if let Some(mut stdin) = child.stdin.take() {
        // The person may quit the pager before reading everything: a broken pipe is fine.
        let _ = stdin.write_all(rendered.as_bytes());
    }
    let _ = child.wait();
    Some(())
}

/// Prints to stderr, rendered as a [`block`].
pub fn err(args: fmt::Arguments<'_>) {
    write_stderr(&block(&args.to_string()));
}

/// Prints a line to stderr, rendered as a [`block`].
pub fn errln(args: fmt::Arguments<'_>) {
    let mut text = block(&args.to_string());
    text.push('\n');
    write_stderr(&text);
}

/// Prints to stderr text that carries golem-orch's own colours, rendered by [`coloured`].
pub fn err_coloured(text: &str) {
    write_stderr(&coloured(text));
}

/// Quiet mode (`-q/--quiet`), set once from the command line before anything prints.
static QUIET: AtomicBool = AtomicBool::new(false);

/// Turns quiet mode on or off for the process. Quiet mode lives here, in the one place that
/// prints, so "what -q silences" is one rule: progress (bars and lines) and the informational
/// lines printed with [`info`]. Errors, results and `--json` never consult it.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether `-q/--quiet` was given, for a caller that prints an optional hint itself.
pub fn is_quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// What an informational line becomes: rendered as a [`block`] with its newline, or nothing
/// when quiet.
fn info_text(quiet: bool, args: fmt::Arguments<'_>) -> Option<String> {
    (!quiet).then(|| {
        let mut text = block(&args.to_string());
        text.push('\n');
        text
    })
}

/// Prints an informational line to stderr (what is about to happen, how far it got), rendered
/// as a [`block`]; nothing under `-q`. Never for errors or results: use [`errln`] / [`outln`].
pub fn info(args: fmt::Arguments<'_>) {
    if let Some(text) = info_text(is_quiet(), args) {
        write_stderr(&text);
    }
}

/// Prints `value` as inert pretty JSON ([`json`]) and a newline on stdout.
pub fn print_json(value: &impl serde::Serialize) -> Result<(), serde_json::Error> {
    let mut text = json(value)?;
    text.push('\n');
    write_stdout(&text);
    Ok(())
}

/// A writer for `tracing` that renders what it is given as a [`block`] on stderr, so a log line
/// quoting an error from the engine or a server is as inert as the rest of the output.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        write_stderr(&block_bytes(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> LogWriter {
        LogWriter
    }
}

/// Progress on stderr: a bar on a terminal, one line per [`Progress::println`] otherwise, and
/// nothing at all under `-q`. Its message and lines are rendered as [`line`]s.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
    quiet: bool,
}

impl Progress {
    /// A bar of `total` steps with `done` already done, when stderr is a terminal and the
    /// process is not quiet.
    pub fn new(total: usize, done: usize) -> Progress {
        Progress::build(total, done, is_quiet(), stderr_is_terminal())
    }

    fn build(total: usize, done: usize, quiet: bool, terminal: bool) -> Progress {
        let bar = (terminal && !quiet).then(|| {
            let bar = indicatif::ProgressBar::new(total as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:30} {pos}/{len} documents  {per_sec}  eta {eta}  {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.set_position(done as u64);
            bar
        });
        Progress { bar, quiet }
    }

    /// Sets the bar's message (what is running now); nothing without a bar.
    pub fn set_message(&self, text: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(line(text));
        }
    }

    /// Moves the bar; nothing without a bar.
    pub fn set_position(&self, done: usize) {
        if let Some(bar) = &self.bar {
            bar.set_position(done as u64);
        }
    }

    /// Whether a bar is shown (a terminal), so routine lines can be left out.
    pub fn is_bar(&self) -> bool {
        self.bar.is_some()
    }

    /// Prints one line above the bar, or on stderr without one; nothing under `-q`.
    pub fn println(&self, text: &str) {
        if self.quiet {
            return;
        }
        match &self.bar {
            Some(bar) => bar.println(line(text)),
            None => {
                let mut text = line(text);
                text.push('\n');
                write_stderr(&text);
            }
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVIL: &str = "a\x1b]52;c;aGk=\x07b\x1b[8mc\u{202e}d\u{e0041}e\u{3164}f\u{9b}g\u{200d}h";

    fn assert_inert(text: &str) {
        assert!(
            !text.chars().any(chars::is_dangerous_in_text),
            "not inert: {text:?}"
        );
    }

    #[test]
    fn line_escapes_every_dangerous_character_and_every_line_break() {
        let shown = line(&format!("{EVIL}\nforged\tline\r"));
        assert_eq!(
            shown,
            "a\\u{1b}]52;c;aGk=\\u{7}b\\u{1b}[8mc\\u{202e}d\\u{e0041}e\\u{3164}f\\u{9b}g\\u{200d}h\\nforged\\tline\\r"
        );
        assert!(!shown.contains('\n') && !shown.contains('\t'));
        assert_eq!(line("plain Ünïcödé 日本語 🎉"), "plain Ünïcödé 日本語 🎉");
    }

    #[test]
    fn block_keeps_layout_and_escapes_the_rest() {
        assert_eq!(
            block("one\n\ttwo\r\x1b[2Kthree\u{2066}"),
            "one\n\ttwo\\r\\u{1b}[2Kthree\\u{2066}"
        );
        assert_inert(&block(EVIL));
    }

    /// The worker's logs (and diff bodies) are rendered as a block: moved here with the function
    /// they tested, `container::neutralise`, which was `block` under another name.
    #[test]
    fn control_characters_in_logs_are_made_visible() {
        assert_eq!(
            block("ok\n\x1b[31mred\ttab\u{202e}\u{e0041}\u{3164}"),
            "ok\n\\u{1b}[31mred\ttab\\u{202e}\\u{e0041}\\u{3164}"
        );
    }

    #[test]
    fn bytes_show_invalid_utf8_as_hex_then_escape() {
        assert_eq!(bytes(b"ok\xff\x9b\x1b[8m\n"), "ok\\xff\\x9b\\u{1b}[8m\\n");
        assert_eq!(block_bytes(b"a\nb\xc3"), "a\nb\\xc3");
        use std::os::unix::ffi::OsStrExt as _;
        let p = Path::new(std::ffi::OsStr::from_bytes(b"/in/\x1b]0;x\x07/\xfe.pdf"));
        assert_eq!(path(p), "/in/\\u{1b}]0;x\\u{7}/\\xfe.pdf");
    }

    #[test]
    fn json_is_inert_and_means_the_same() {
        let value = serde_json::json!({ "name": EVIL, "list": [EVIL, 1, "plain"], EVIL: null });
        let text = json(&value).unwrap();
        assert_inert(&text);
        for needle in [
            "\\u001b",
            "\\u202e",
            "\\udb40\\udc41",
            "\\u3164",
            "\\u009b",
            "\\u200d",
        ] {
            assert!(text.contains(needle), "{needle} missing from {text}");
        }
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
        // Nothing to do leaves the text alone.
        assert_eq!(json_inert("{\n  \"a\": \"ü\"\n}"), "{\n  \"a\": \"ü\"\n}");
    }

    #[test]
    fn only_golem_orchs_own_colours_survive() {
        let text = format!(
            "{}\n{}\x1b[8m\x1b]52;c;x\x07",
            paint(Colour::Red, EVIL),
            paint(Colour::Green, "+ok")
        );
        let shown = coloured(&text);
        assert!(shown.starts_with("\x1b[31ma\\u{1b}]52;"), "{shown:?}");
        assert!(shown.contains("\x1b[32m+ok\x1b[0m"), "{shown:?}");
        assert!(
            shown.ends_with("\\u{1b}[8m\\u{1b}]52;c;x\\u{7}"),
            "{shown:?}"
        );
        let without_own = OWN_SEQUENCES
            .iter()
            .fold(shown.clone(), |s, own| s.replace(own, ""));
        assert_inert(&without_own);
    }

    /// `-q` silences progress and informational lines, and nothing else: the rule lives in the
    /// gate, so a caller cannot get it wrong.
    #[test]
    fn quiet_silences_progress_and_information_only() {
        assert_eq!(
            info_text(false, format_args!("batch {}: 3 to run\x1b[8m", "ab")).as_deref(),
            Some("batch ab: 3 to run\\u{1b}[8m\n")
        );
        assert_eq!(info_text(true, format_args!("batch: 3 to run")), None);
        let quiet = Progress::build(3, 1, true, true);
        assert!(!quiet.is_bar() && quiet.quiet, "a bar under -q");
        quiet.set_message("doc");
        quiet.set_position(2);
        quiet.println("[2/3] staged doc");
        quiet.finish();
        let plain = Progress::build(3, 1, false, false);
        assert!(!plain.is_bar() && !plain.quiet);
        // The process-wide switch starts off: output is unchanged unless -q is given.
        assert!(!is_quiet());
    }

    /// The gate only works if nothing goes around it: no module but this one may print, touch
    /// stdout or stderr directly, or drive a progress bar.
    #[test]
    fn the_pager_is_less_by_default_and_none_when_empty_or_cat() {
        use std::env::VarError;
        assert_eq!(
            pager_command(Err(VarError::NotPresent)).as_deref(),
            Some("less -R")
        );
        assert_eq!(pager_command(Ok(String::new())), None);
        assert_eq!(pager_command(Ok(" ".into())), None);
        assert_eq!(pager_command(Ok("cat".into())), None);
        assert_eq!(
            pager_command(Ok("less -S".into())).as_deref(),
            Some("less -S")
        );
    }

    #[test]
    fn the_warning_colour_is_one_of_golem_orchs_own() {
        let shown = coloured(&paint(Colour::Warning, "!! 1 collision"));
        assert_eq!(shown, "\x1b[1;33m!! 1 collision\x1b[0m");
    }

    #[test]
    fn no_printing_path_bypasses_the_gate() {
        // A pager is a child process that writes to the terminal: only render.rs starts one,
        // and only with text that `coloured` rendered (see `page_coloured`).
        const FORBIDDEN: [&str; 10] = [
            // The variable's name as code reads it, so help text may still mention $PAGER.
            "\"PAGER\"",
            "println!",
            "print!",
            "eprint!",
            "dbg!",
            "io::stdout",
            "io::stderr",
            "STDOUT_FILENO",
            "STDERR_FILENO",
            "indicatif",
        ];
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        let mut dirs = vec![src.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let p = entry.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|e| e == "rs") {
                    files.push(p);
                }
            }
        }
        assert!(files.iter().any(|f| f.ends_with("cli/mod.rs")), "{files:?}");
        let mut bypasses = Vec::new();
        for file in files.iter().filter(|f| **f != src.join("render.rs")) {
            let text = std::fs::read_to_string(file).unwrap();
            for (n, source_line) in text.lines().enumerate() {
                let code = source_line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                for word in FORBIDDEN.iter().filter(|w| code.contains(**w)) {
                    bypasses.push(format!("{}:{}: {word}", file.display(), n + 1));
                }
            }
        }
        assert!(
            bypasses.is_empty(),
            "printing that bypasses render (use render::out/err/print_json/Progress):\n{}",
            bypasses.join("\n")
        );
    }
}
