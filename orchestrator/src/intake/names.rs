//! Names: every component a person or a server gives is checked before it reaches a report or
//! `/input`, and names intake makes up itself (from URLs, for collisions) are safe by construction.

use std::ffi::OsStr;
use std::path::{Component, Path};

use super::IntakeError;

/// A path as an inert one-line string, through the one rendering gate.
pub fn shown(path: &Path) -> String {
    crate::render::path(path)
}

/// Checks every normal component of `path` (not only the last one).
pub fn check_components(path: &Path) -> Result<(), IntakeError> {
    for c in path.components() {
        if let Component::Normal(name) = c {
            check_name_text(name, path)?;
        }
    }
    Ok(())
}

/// Checks a name is UTF-8 without dangerous characters (they would forge or hide text in reports).
pub(super) fn check_name_text(name: &OsStr, path: &Path) -> Result<String, IntakeError> {
    let s = name
        .to_str()
        .ok_or_else(|| IntakeError::BadName(shown(path)))?;
    if s.is_empty() || s.chars().any(golem_protocol::chars::is_dangerous) {
        return Err(IntakeError::BadName(shown(path)));
    }
    Ok(s.to_string())
}

pub(super) fn checked_name(path: &Path) -> Result<String, IntakeError> {
    let name = match path.file_name() {
        Some(n) => n.to_os_string(),
        // `.` or `/`: name the directory after its canonical path.
        None => path
            .canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_os_string()))
            .unwrap_or_else(|| "input".into()),
    };
    check_name_text(&name, path)
}

/// Avoids collisions between inputs of the same name by suffixing `-2`, `-3`, ... before the extension.
pub(super) fn unique(used: &mut Vec<String>, name: String) -> String {
    let mut candidate = name.clone();
    let (stem, ext) = match name.rsplit_once('.') {
        Some((s, e)) if !s.is_empty() => (s.to_string(), format!(".{e}")),
        _ => (name.clone(), String::new()),
    };
    let mut n = 2;
    while used.contains(&candidate) {
        candidate = format!("{stem}-{n}{ext}");
        n += 1;
    }
    used.push(candidate.clone());
    candidate
}

/// A safe file name from a URL's last path segment.
pub(super) fn url_name(url: &reqwest::Url) -> String {
    let last = url
        .path_segments()
        .and_then(|mut s| s.next_back().map(str::to_string))
        .unwrap_or_default();
    safe_name(&last, "download")
}

/// A file name anyone can read and every name check accepts: ASCII letters, digits, `.`, `_`
/// and `-` (anything else becomes `_`), no leading dots, at most 100 characters; `fallback`
/// when nothing is left.
pub fn safe_name(text: &str, fallback: &str) -> String {
    let mapped: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    let trimmed = mapped.trim_start_matches('.');
    if trimmed.is_empty() {
        fallback.to_string()
    } else {
        trimmed.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_names_are_sanitised() {
        let n = |u: &str| url_name(&reqwest::Url::parse(u).unwrap());
        assert_eq!(n("https://h/papers/paper.pdf?x=1"), "paper.pdf");
        assert_eq!(n("https://h/"), "download");
        assert_eq!(n("https://h/..%2F..%2Fetc"), "_2F.._2Fetc");
        assert_eq!(n("https://h/a%0Ab"), "a_0Ab");
    }
}
