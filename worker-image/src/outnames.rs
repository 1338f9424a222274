//! Output names the host will accept, derived from hostile input names.
//!
//! The orchestrator refuses (and lists as rejected) output names that are
//! not UTF-8, contain control, bidi or invisible characters or backslashes,
//! name `.git`, have components over 128 bytes or paths over 512 bytes, are
//! nested more than 16 levels, or collide case-insensitively with another
//! name. So each input's report name is its relative path made safe, and
//! checked against every name already handed out (including `index.md` and
//! `index.json`); a clash gets a `~N` suffix, and anything that still does
//! not fit goes flat under `_inputs/`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use golem_protocol::chars;

/// Longest component written, before the suffix (`.json` at most).
pub const MAX_COMPONENT: usize = 100;
/// Longest relative output path written (the host adds its root name).
pub const MAX_PATH: usize = 400;
/// Deepest output path (directories plus the file).
pub const MAX_DEPTH: usize = 12;
/// Where names that do not fit go.
pub const FALLBACK_DIR: &str = "_inputs";

/// Characters the host refuses in names: the shared set
/// ([`golem_protocol::chars::is_refused_in_name`]: every dangerous character,
/// plus the backslash, a path separator to other systems). Using the host's
/// own rule means a name made safe here is never refused there.
fn refused(c: char) -> bool {
    chars::is_refused_in_name(c)
}

/// `.git` in any spelling git or a file system would treat as it.
fn is_git_like(name: &str) -> bool {
    let lower = name.to_lowercase();
    let base = lower.split(':').next().unwrap_or("");
    let base = base.trim_end_matches(['.', ' ']);
    base == ".git" || base == "git~1"
}

fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// One path component made acceptable: bytes that are not UTF-8 and
/// refused characters become `_`, `.git`-like names get a `_` prefix, and
/// the result is cut to [`MAX_COMPONENT`] bytes.
pub fn safe_component(name: &OsStr) -> String {
    let mut out = String::new();
    for chunk in name.as_bytes().utf8_chunks() {
        out.extend(
            chunk
                .valid()
                .chars()
                .map(|c| if refused(c) { '_' } else { c }),
        );
        out.extend(std::iter::repeat_n('_', chunk.invalid().len()));
    }
    if out.is_empty() || out == "." || out == ".." {
        out = format!("_{out}");
    }
    if is_git_like(&out) {
        out.insert(0, '_');
    }
    cut(&out, MAX_COMPONENT).to_string()
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Used {
    Dir(String),
    File,
}

/// Hands out unique, acceptable output stems.
#[derive(Debug, Default)]
pub struct Namer {
    used: HashMap<String, Used>,
}

impl Namer {
    /// A namer with `reserved` file names already taken.
    pub fn new(reserved: &[&str]) -> Self {
        let mut n = Self::default();
        for r in reserved {
            n.used.insert(r.to_lowercase(), Used::File);
        }
        n
    }

    fn fits(&self, stem: &str, suffixes: &[&str]) -> bool {
        let longest = suffixes.iter().map(|s| s.len()).max().unwrap_or(0);
        if stem.len() + longest > MAX_PATH || stem.split('/').count() > MAX_DEPTH {
            return false;
        }
        let mut dirs = stem.split('/').collect::<Vec<_>>();
        dirs.pop();
        let mut prefix = String::new();
        for d in dirs {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(d);
            match self.used.get(&prefix.to_lowercase()) {
                None => {}
                Some(Used::Dir(exact)) if *exact == prefix => {}
                Some(_) => return false,
            }
        }
        suffixes
            .iter()
            .all(|s| !self.used.contains_key(&format!("{stem}{s}").to_lowercase()))
    }

    fn take(&mut self, stem: &str, suffixes: &[&str]) {
        let mut dirs = stem.split('/').collect::<Vec<_>>();
        dirs.pop();
        let mut prefix = String::new();
        for d in dirs {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(d);
            self.used
                .insert(prefix.to_lowercase(), Used::Dir(prefix.clone()));
        }
        for s in suffixes {
            self.used
                .insert(format!("{stem}{s}").to_lowercase(), Used::File);
        }
    }

    /// A stem for the input at `rel` (the `number`th input), unique with each
    /// of `suffixes` appended.
    pub fn assign(&mut self, rel: &Path, number: usize, suffixes: &[&str]) -> String {
        let mut comps: Vec<String> = rel
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(safe_component(n)),
                _ => None,
            })
            .collect();
        if comps.is_empty() {
            comps.push("_".to_string());
        }
        if comps.len() > MAX_DEPTH {
            let tail = comps.split_off(MAX_DEPTH - 1).join("_");
            comps.push(cut(&tail, MAX_COMPONENT).to_string());
        }
        let base = comps.join("/");
        let mut candidates = vec![base.clone()];
        candidates.extend((2..=20).map(|n| format!("{base}~{n}")));
        let last = comps.last().map(String::as_str).unwrap_or("_");
        candidates.push(format!("{FALLBACK_DIR}/{number:04}-{}", cut(last, 60)));
        for candidate in candidates {
            if self.fits(&candidate, suffixes) {
                self.take(&candidate, suffixes);
                return candidate;
            }
        }
        let mut n = 0usize;
        loop {
            let candidate = format!("{FALLBACK_DIR}/{number:04}-{n}");
            if self.fits(&candidate, suffixes) {
                self.take(&candidate, suffixes);
                return candidate;
            }
            n += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const SUF: &[&str] = &[".md", ".json"];

    #[test]
    fn plain_names_are_kept() {
        let mut n = Namer::new(&["index.md", "index.json"]);
        assert_eq!(n.assign(Path::new("docs/a.pdf"), 1, SUF), "docs/a.pdf");
        assert_eq!(n.assign(Path::new("docs/b.pdf"), 2, SUF), "docs/b.pdf");
    }

    #[test]
    fn clashes_get_suffixes() {
        let mut n = Namer::new(&["index.md", "index.json"]);
        assert_eq!(n.assign(Path::new("index"), 1, SUF), "index~2");
        assert_eq!(n.assign(Path::new("A.txt"), 2, SUF), "A.txt");
        assert_eq!(n.assign(Path::new("a.txt"), 3, SUF), "a.txt~2");
        // A directory named like a report file.
        assert_eq!(n.assign(Path::new("x"), 4, SUF), "x");
        assert_eq!(n.assign(Path::new("x.md/y"), 5, SUF), "_inputs/0005-y");
        // Directories differing in case only.
        assert_eq!(n.assign(Path::new("Dir/f"), 6, SUF), "Dir/f");
        assert_eq!(n.assign(Path::new("dir/g"), 7, SUF), "_inputs/0007-g");
    }

    #[test]
    fn hostile_components_are_made_safe() {
        let name = OsStr::from_bytes(b"bad\xff\x1b[2J\\\xe2\x80\xae.pdf");
        assert_eq!(safe_component(name), "bad__[2J__.pdf");
        assert_eq!(safe_component(OsStr::new(".GIT")), "_.GIT");
        assert_eq!(safe_component(OsStr::new("git~1")), "_git~1");
        assert_eq!(safe_component(OsStr::new(&"é".repeat(80))).len(), 100);
    }

    #[test]
    fn deep_paths_are_folded() {
        let deep: PathBuf = (0..30).map(|i| format!("d{i}")).collect();
        let mut n = Namer::new(&[]);
        let stem = n.assign(&deep, 1, SUF);
        assert_eq!(stem.split('/').count(), MAX_DEPTH);
        assert!(
            stem.starts_with("d0/d1/")
                && stem.ends_with(
                    "/d11_d12_d13_d14_d15_d16_d17_d18_d19_d20_d21_d22_d23_d24_d25_d26_d27_d28_d29"
                ),
            "{stem}"
        );
    }

    /// Every character of the shared set (and the backslash) becomes `_` in a
    /// name, so no name the worker hands out is one the host's extractor
    /// refuses for its characters; everything else is kept.
    #[test]
    fn names_are_made_safe_by_the_hosts_own_rule() {
        for n in 0..=0x10ffff_u32 {
            let Some(c) = char::from_u32(n) else { continue };
            let host = chars::is_dangerous(c) || c == '\\';
            assert_eq!(refused(c), host, "U+{n:04X}");
            let name = format!("a{c}b");
            let safe = safe_component(OsStr::new(&name));
            assert_eq!(safe == "a_b", host || c == '_', "U+{n:04X}: {safe:?}");
            assert!(!safe.chars().any(chars::is_refused_in_name), "U+{n:04X}");
        }
    }
}
