//! Names from the archive: every one is hostile until it passes [`parse_name`], and every one
//! shown in a report is escaped and truncated first.

use std::fmt::Write as _;

use super::{ExtractError, MAX_COMPONENT_BYTES, MAX_DEPTH, MAX_PATH_BYTES};

/// Bytes shown of a hostile name or message in reports before truncation.
pub(super) const MAX_REPORTED_BYTES: usize = 2 * MAX_PATH_BYTES;

/// The caller's root must be one plain component, or the name checks would weaken.
pub(super) fn validate_root_arg(root: &str) -> Result<(), ExtractError> {
    let ok = !root.is_empty()
        && root != "."
        && root != ".."
        && root.len() <= MAX_COMPONENT_BYTES
        && !root.contains('/')
        && !root.chars().any(golem_protocol::chars::is_refused_in_name);
    if ok {
        Ok(())
    } else {
        Err(ExtractError::InvalidRoot(escape_for_report(
            root.as_bytes(),
        )))
    }
}

/// Characters never accepted in a name: the one shared set, `golem_protocol::chars` (C0/C1
/// controls incl. NUL, `\n`, `\r`, `\t`, DEL; bidi overrides, isolates and marks; line and
/// paragraph separators; zero-width, format and other default-ignorable characters such as tag
/// characters U+E0000–U+E007F and the Hangul filler U+3164; noncharacters). Invisible ones would
/// make a name look like another (`.g\u{200c}it` aliases `.git` on HFS+, which ignores them).
pub(super) fn is_forbidden_char(c: char) -> bool {
    golem_protocol::chars::is_dangerous(c)
}

/// Escape hostile bytes for inclusion in reports and error messages.
pub(super) fn escape_for_report(bytes: &[u8]) -> String {
    let lossy = String::from_utf8_lossy(bytes);
    let mut out = String::new();
    for c in lossy.chars() {
        if out.len() >= MAX_REPORTED_BYTES {
            out.push_str("...[truncated]");
            break;
        }
        if c == '\\' {
            out.push_str("\\\\");
        } else if is_forbidden_char(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

/// A validated name: components below the root.
pub(super) struct ParsedName {
    pub(super) rel: Vec<String>,
    pub(super) trailing_slash: bool,
}

/// Is this component something git (on any platform) would treat as `.git`?
/// Covers case variants, Windows trailing dots/spaces, NTFS alternate data
/// streams (`.git::$INDEX_ALLOCATION`) and the 8.3 short name `git~1`.
fn is_git_component(comp: &str) -> bool {
    let lower = comp.to_lowercase();
    let base = lower.split(':').next().unwrap_or("");
    let base = base.trim_end_matches(['.', ' ']);
    base == ".git" || base == "git~1"
}

/// Checks an archive name and splits it below `root`, or says in one line why it is refused:
/// the archive is hostile, so only plain, short, shallow, visible UTF-8 names under the root pass.
pub(super) fn parse_name(raw: &[u8], root: &str) -> Result<ParsedName, String> {
    if raw.len() > MAX_PATH_BYTES {
        return Err(format!(
            "path too long: {} bytes > {MAX_PATH_BYTES}",
            raw.len()
        ));
    }
    if raw.is_empty() {
        return Err("empty name".to_string());
    }
    let name = std::str::from_utf8(raw).map_err(|_| "name is not valid UTF-8".to_string())?;
    name.chars().try_for_each(check_char)?;
    if name.starts_with('/') {
        return Err("absolute path".to_string());
    }
    let name = name.strip_prefix("./").unwrap_or(name);
    let (name, trailing_slash) = match name.strip_suffix('/') {
        Some(n) => (n, true),
        None => (name, false),
    };
    let comps: Vec<&str> = name.split('/').collect();
    comps.iter().try_for_each(|comp| check_component(comp))?;
    if comps.first().copied().unwrap_or("") != root {
        return Err(format!("outside root directory {root:?}"));
    }
    let rel: Vec<String> = comps.into_iter().skip(1).map(str::to_string).collect();
    if rel.len() > MAX_DEPTH {
        return Err(format!(
            "path too deep: {} components below root > {MAX_DEPTH}",
            rel.len()
        ));
    }
    Ok(ParsedName {
        rel,
        trailing_slash,
    })
}

/// A character no name may hold, with its reason (NUL, controls, bidi and invisible
/// characters, backslashes).
fn check_char(c: char) -> Result<(), String> {
    if c == '\0' {
        return Err("NUL byte in name".to_string());
    }
    if golem_protocol::chars::is_control(c) {
        return Err(format!("control character U+{:04X} in name", c as u32));
    }
    if is_forbidden_char(c) {
        return Err(format!(
            "bidi or invisible formatting character U+{:04X} in name",
            c as u32
        ));
    }
    if c == '\\' {
        return Err("backslash in name".to_string());
    }
    Ok(())
}

/// A component no path may hold, with its reason: empty, `.`, `..`, over-long or `.git`.
fn check_component(comp: &str) -> Result<(), String> {
    if comp.is_empty() {
        return Err("empty path component".to_string());
    }
    if comp == "." {
        return Err("'.' path component".to_string());
    }
    if comp == ".." {
        return Err("'..' path component (path traversal)".to_string());
    }
    if comp.len() > MAX_COMPONENT_BYTES {
        return Err(format!(
            "path component too long: {} bytes > {MAX_COMPONENT_BYTES}",
            comp.len()
        ));
    }
    if is_git_component(comp) {
        return Err("'.git' path component".to_string());
    }
    Ok(())
}
