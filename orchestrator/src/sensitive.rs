//! Which staged paths matter once pushed, and which are look-alikes of other paths.
//!
//! A worker decides the names of the files it stages. Most are inert documents, but some are read
//! by machines the moment they land in a branch: CI runs `.github/workflows/*` on push, git obeys
//! `.gitattributes` filters, `direnv` runs `.envrc` on `cd`, `make` runs a `Makefile`. A reviewer
//! skimming a diff must be told, so these paths are marked with a short reason each.
//!
//! Look-alikes are paths that differ only in ways a checkout may erase: letter case
//! (case-insensitive file systems on macOS and Windows), Unicode normalisation (NFC vs NFD, which
//! macOS file systems treat as the same name) and trailing dots and spaces (dropped by Windows).
//! A look-alike of a branch file can replace or shadow it on a colleague's machine while the
//! diff shows an innocent "added" file, so `diff` marks them and `push` refuses them unless forced.
//!
//! Everything here is pure: names and bytes in, reasons out.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use unicode_normalization::UnicodeNormalization;

/// A name's canonical form on the most forgiving file system it may be checked out on: NFC,
/// lower-cased, with trailing dots and spaces dropped from each component. Two paths with the
/// same fold are one file there.
pub fn fold(path: &str) -> String {
    path.split('/')
        .map(fold_component)
        .collect::<Vec<_>>()
        .join("/")
}

/// [`fold`] for one component; ASCII (most names) skips the Unicode tables.
fn fold_component(component: &str) -> String {
    let folded = if component.is_ascii() {
        component.to_ascii_lowercase()
    } else {
        let lower: String = component.nfd().collect::<String>().to_lowercase();
        lower.nfc().collect()
    };
    folded.trim_end_matches(['.', ' ']).to_string()
}

/// Why a staged path deserves a reviewer's attention once pushed; empty when it is inert.
///
/// `path` is the path in the repository; `content` its staged bytes (for a `#!` first line).
/// Matching is on the folded name, so `MAKEFILE`, `Makefile.` and `.GitAttributes` count too: the
/// platform that runs them would accept those spellings.
pub fn classify(path: &str, content: &[u8]) -> Vec<&'static str> {
    let folded = fold(path);
    let at = Place::new(&folded);
    let mut reasons = Reasons::default();
    ci(&at, &mut reasons);
    git(&at, &mut reasons);
    tools(&at, &mut reasons);
    golem(&at, &mut reasons);
    // Executable content. The stage keeps no mode bits and push commits 0644 blobs, so only a
    // `#!` line can make a file executable in spirit; `sh file` still runs it.
    if content.starts_with(b"#!") {
        reasons.add("script: starts with #!");
    }
    reasons.0
}

/// A folded path as [`classify`] matches it: its last component and the directories above.
struct Place<'a> {
    name: &'a str,
    dirs: Vec<&'a str>,
}

impl<'a> Place<'a> {
    fn new(folded: &'a str) -> Self {
        let mut dirs: Vec<&str> = folded.split('/').collect();
        let name = dirs.pop().unwrap_or("");
        Place { name, dirs }
    }

    /// Whether `seq` appears as consecutive directories anywhere above the name.
    fn under(&self, seq: &[&str]) -> bool {
        self.dirs.windows(seq.len()).any(|w| w == seq)
    }
}

/// Reasons in the order found, each once.
#[derive(Default)]
struct Reasons(Vec<&'static str>);

impl Reasons {
    fn add(&mut self, reason: &'static str) {
        if !self.0.contains(&reason) {
            self.0.push(reason);
        }
    }
}

/// CI and repository bots: they run on push, often with secrets.
fn ci(at: &Place<'_>, reasons: &mut Reasons) {
    if at.under(&[".github", "workflows"]) || at.under(&[".github", "actions"]) {
        reasons.add("CI configuration: runs on push");
    }
    if at.under(&[".circleci"])
        || at.under(&[".buildkite"])
        || at.under(&[".gitlab"])
        || at.under(&[".woodpecker"])
        || at.under(&[".forgejo", "workflows"])
        || at.under(&[".gitea", "workflows"])
        || matches!(
            at.name,
            ".gitlab-ci.yml"
                | ".travis.yml"
                | "azure-pipelines.yml"
                | "azure-pipelines.yaml"
                | "jenkinsfile"
                | "bitbucket-pipelines.yml"
                | ".drone.yml"
                | ".woodpecker.yml"
                | "appveyor.yml"
                | ".appveyor.yml"
                | "cloudbuild.yaml"
                | "cloudbuild.yml"
                | "codecov.yml"
                | ".cirrus.yml"
        )
    {
        reasons.add("CI configuration: runs on push");
    }
    if matches!(
        at.name,
        "codeowners" | "dependabot.yml" | "dependabot.yaml" | "renovate.json"
    ) {
        reasons.add("repository automation: changes reviewers or bots");
    }
}

/// Git's own behaviour: attributes, submodules, ignores, identities and hooks.
fn git(at: &Place<'_>, reasons: &mut Reasons) {
    match at.name {
        ".gitattributes" => reasons.add("git behaviour: filters and diff drivers run commands"),
        ".gitmodules" => reasons.add("git behaviour: submodule URLs are fetched"),
        ".gitignore" => reasons.add("git behaviour: can hide files from review"),
        ".mailmap" => reasons.add("git behaviour: rewrites author identities"),
        ".pre-commit-config.yaml" | ".pre-commit-config.yml" | "lefthook.yml" | ".lefthook.yml" => {
            reasons.add("git hooks: run on commit")
        }
        _ => {}
    }
    if at
        .dirs
        .iter()
        .any(|d| matches!(*d, ".githooks" | ".husky" | "hooks"))
    {
        reasons.add("git hooks: run on commit");
    }
}

/// Run by tools when someone enters the directory, builds, tests or opens an editor.
fn tools(at: &Place<'_>, reasons: &mut Reasons) {
    if let Some(reason) = run_by_tools(at.name) {
        reasons.add(reason);
    }
    if at.under(&[".cargo"]) && (at.name.starts_with("config") || at.name == "credentials.toml") {
        reasons.add("rust build: cargo configuration runs and redirects builds");
    }
    if at.under(&[".vscode"])
        || at.under(&[".idea"])
        || at.under(&[".devcontainer"])
        || at.under(&[".zed"])
    {
        reasons.add("editor configuration: can run tasks when opened");
    }
    if matches!(at.name, ".exrc" | ".nvimrc" | ".nvim.lua" | ".lvimrc") {
        reasons.add("editor configuration: can run tasks when opened");
    }
}

/// Why a tool runs or loads the file called `name` wherever it is, if it does.
fn run_by_tools(name: &str) -> Option<&'static str> {
    match name {
        ".envrc" => Some("environment: direnv runs it on cd"),
        n if n == ".env" || n.starts_with(".env.") => Some("environment: loaded into processes"),
        "makefile" | "gnumakefile" | "justfile" | ".justfile" | "rakefile" | "taskfile.yml"
        | "taskfile.yaml" | "build.gradle" | "build.gradle.kts" | "settings.gradle" | "pom.xml"
        | "cmakelists.txt" | "meson.build" | "build.xml" | "gruntfile.js" | "gulpfile.js" => {
            Some("build automation: runs commands")
        }
        n if n.ends_with(".mk") => Some("build automation: runs commands"),
        "dockerfile" | "containerfile" => Some("container build: runs commands"),
        n if n.starts_with("docker-compose") || n.starts_with("compose.") => {
            Some("container automation: starts services")
        }
        n if n.ends_with(".dockerfile") || n.starts_with("dockerfile.") => {
            Some("container build: runs commands")
        }
        "package.json" | ".npmrc" | ".yarnrc" | ".yarnrc.yml" | "bunfig.toml" | ".pnpmfile.cjs" => {
            Some("package manager: install scripts and registries")
        }
        "setup.py" | "setup.cfg" | "pyproject.toml" | "conftest.py" | "tox.ini" | "noxfile.py"
        | "pip.conf" | ".pypirc" | "sitecustomize.py" | "usercustomize.py" => {
            Some("python tooling: runs code on build or test")
        }
        n if n.ends_with(".pth") => Some("python tooling: runs code on build or test"),
        "build.rs" => Some("rust build: runs code on build"),
        "cargo.toml" => Some("rust build: chooses build scripts and dependencies"),
        n if n.starts_with("rust-toolchain") => Some("rust build: selects the toolchain"),
        "gemfile" | ".ruby-version" | ".tool-versions" | ".nvmrc" | "flake.nix" | "shell.nix"
        | "default.nix" => Some("environment: selects tools"),
        _ => None,
    }
}

/// Golem's own files decide what future sessions may do.
fn golem(at: &Place<'_>, reasons: &mut Reasons) {
    if at.name == "golem.yaml" || at.name == ".golem.yaml" {
        reasons.add("golem configuration: changes what sessions may do");
    }
    if at.name.ends_with(".worker") && at.dirs.last() == Some(&"workers") {
        reasons.add("golem worker definition: changes what sessions run");
    }
}

/// For each path in `staged`, the other paths (from `staged` itself or from `existing`) that are
/// look-alikes of it or of one of its parent directories. Paths without look-alikes are left out.
///
/// `existing` is every file path in the branch; both sets are paths in the repository.
pub fn collisions<'a>(
    staged: &[&'a str],
    existing: impl IntoIterator<Item = String>,
) -> BTreeMap<&'a str, Vec<String>> {
    // Every spelling of every file and directory, by fold.
    let mut spellings: HashMap<String, BTreeSet<String>> = HashMap::new();
    let mut add = |path: &str| {
        for (prefix, folded) in folded_prefixes(path) {
            let set = spellings.entry(folded).or_default();
            if !set.contains(prefix) {
                set.insert(prefix.to_string());
            }
        }
    };
    for path in existing {
        add(&path);
    }
    for path in staged {
        add(path);
    }
    let mut out = BTreeMap::new();
    for path in staged {
        let mut others = BTreeSet::new();
        for (prefix, folded) in folded_prefixes(path) {
            if let Some(set) = spellings.get(&folded) {
                others.extend(set.iter().filter(|p| *p != prefix).cloned());
            }
        }
        if !others.is_empty() {
            out.insert(*path, others.into_iter().collect());
        }
    }
    out
}

/// How look-alike `path` differs from `other` (a path, or a directory `path` is under), for a
/// reviewer who sees two names that print the same: "Unicode normalisation (NFC vs NFD)", "case",
/// "trailing dots or spaces", or several of those.
pub fn difference(path: &str, other: &str) -> &'static str {
    let depth = other.split('/').count();
    let mine: String = path.split('/').take(depth).collect::<Vec<_>>().join("/");
    let nfc = |s: &str| s.nfc().collect::<String>();
    let trim = |s: &str| {
        s.split('/')
            .map(|c| c.trim_end_matches(['.', ' ']))
            .collect::<Vec<_>>()
            .join("/")
    };
    if nfc(&mine) == nfc(other) {
        "differs only in Unicode normalisation (NFC vs NFD)"
    } else if mine.to_lowercase() == other.to_lowercase() {
        "differs only in case"
    } else if trim(&mine) == trim(other) {
        "differs only in trailing dots or spaces"
    } else {
        "differs only in case, Unicode normalisation or trailing dots/spaces"
    }
}

/// `a`, `a/b`, `a/b/c` for `a/b/c`, each with its fold, folding each component once.
fn folded_prefixes(path: &str) -> Vec<(&str, String)> {
    let mut out = Vec::new();
    let mut folded = String::new();
    let mut end = 0;
    for (i, component) in path.split('/').enumerate() {
        if i > 0 {
            folded.push('/');
            end += 1;
        }
        end += component.len();
        folded.push_str(&fold_component(component));
        out.push((&path[..end], folded.clone()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_case_normalisation_and_trailing_dots_and_spaces() {
        assert_eq!(fold("README.MD"), fold("readme.md"));
        assert_eq!(fold("cafe\u{301}.txt"), fold("caf\u{e9}.txt"));
        assert_eq!(fold("CAFE\u{301}.txt"), fold("caf\u{e9}.txt"));
        assert_eq!(fold("notes.txt."), fold("notes.txt"));
        assert_eq!(fold("notes.txt . "), fold("notes.txt"));
        assert_eq!(fold("Docs./a.md"), fold("docs/a.md"));
        assert_ne!(fold("notes.txt"), fold("notes.text"));
        assert_ne!(fold("a/b"), fold("a.b"));
    }

    #[test]
    fn sensitive_paths_get_a_reason_and_inert_ones_none() {
        for path in [
            ".github/workflows/ci.yml",
            ".github/actions/setup/action.yml",
            ".gitlab-ci.yml",
            ".circleci/config.yml",
            "azure-pipelines.yml",
            "Jenkinsfile",
            ".gitattributes",
            "docs/.gitattributes",
            ".gitmodules",
            ".gitignore",
            ".mailmap",
            ".githooks/pre-commit",
            ".husky/pre-push",
            "tools/hooks/post-checkout",
            ".pre-commit-config.yaml",
            ".envrc",
            ".env",
            ".env.production",
            "Makefile",
            "GNUmakefile",
            "rules.mk",
            "justfile",
            "Dockerfile",
            "docker-compose.override.yml",
            "web/package.json",
            ".npmrc",
            "setup.py",
            "tests/conftest.py",
            "pyproject.toml",
            "build.rs",
            ".cargo/config.toml",
            ".cargo/config",
            "rust-toolchain.toml",
            ".vscode/tasks.json",
            ".idea/workspace.xml",
            ".devcontainer/devcontainer.json",
            "golem.yaml",
            "workers/evil.worker",
            // Spellings a case-insensitive or Windows checkout would accept.
            "MAKEFILE",
            "Makefile.",
            ".GitAttributes",
            ".GITHUB/Workflows/x.yml",
        ] {
            let reasons = classify(path, b"text\n");
            assert!(!reasons.is_empty(), "{path} should be sensitive");
            assert!(reasons.iter().all(|r| !r.is_empty()));
        }
        for path in [
            "README.md",
            "docs/report.md",
            "letter.txt.json",
            "index.json",
            "makefile.md",
            "workers.md",
            "environment.txt",
            "hooks.md",
        ] {
            assert_eq!(classify(path, b"text\n"), Vec::<&str>::new(), "{path}");
        }
        assert_eq!(
            classify("run.txt", b"#!/bin/sh\nrm -rf ~\n"),
            ["script: starts with #!"]
        );
        assert_eq!(
            classify(".github/workflows/ci.yml", b"x"),
            ["CI configuration: runs on push"],
            "one reason once"
        );
    }

    #[test]
    fn look_alikes_are_found_against_the_branch_and_among_staged_files() {
        let existing = [
            "README.md",
            "caf\u{e9}.txt",
            "notes.txt",
            "docs/guide.md",
            "src/main.rs",
        ]
        .map(String::from);
        let staged = [
            "README.MD",
            "cafe\u{301}.txt",
            "notes.txt.",
            "Docs/new.md",
            "src/main.rs",
            "new.md",
            "New.md",
            "fresh.md",
        ];
        let found = collisions(&staged, existing);
        assert_eq!(found["README.MD"], ["README.md"]);
        assert_eq!(found["cafe\u{301}.txt"], ["caf\u{e9}.txt"]);
        assert_eq!(found["notes.txt."], ["notes.txt"]);
        assert_eq!(
            found["Docs/new.md"],
            ["docs"],
            "a look-alike parent directory"
        );
        assert_eq!(found["new.md"], ["New.md"]);
        assert_eq!(found["New.md"], ["new.md"]);
        assert!(
            !found.contains_key("src/main.rs"),
            "the same path is a change"
        );
        assert!(!found.contains_key("fresh.md"));
        assert_eq!(
            difference("cafe\u{301}.txt", "caf\u{e9}.txt"),
            "differs only in Unicode normalisation (NFC vs NFD)"
        );
        assert_eq!(difference("README.MD", "README.md"), "differs only in case");
        assert_eq!(difference("Docs/new.md", "docs"), "differs only in case");
        assert_eq!(
            difference("notes.txt.", "notes.txt"),
            "differs only in trailing dots or spaces"
        );
        assert_eq!(
            difference("NOTES.txt.", "notes.txt"),
            "differs only in case, Unicode normalisation or trailing dots/spaces"
        );
    }
}
