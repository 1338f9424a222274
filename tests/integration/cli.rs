//! CLI conventions: shell completions, the man page, `-q`, and help that shows examples.
//!
//! These stories need no engine: they drive the binary alone, so they run in a blink.

use std::process::{Command, Output, Stdio};

/// golem-orch with these arguments, a clean environment and no terminal.
fn golem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_golem-orch"))
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("GOLEM_HOME")
        .env_remove("GOLEM_POLICY_DIR")
        .stdin(Stdio::null())
        .output()
        .expect("spawn golem-orch")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8")
}

#[test]
fn bash_completions_offer_the_subcommands_and_the_trust_flags() {
    let out = golem(&["completions", "bash"]);
    assert!(out.status.success(), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    let script = stdout(&out);
    for word in [
        "run",
        "batch",
        "push",
        "gc",
        "staged",
        "transcript",
        "--untrusted",
        "--json",
    ] {
        assert!(
            script.contains(word),
            "{word} missing from the bash completions"
        );
    }
}

#[test]
fn every_supported_shell_gets_a_script_and_an_unknown_one_is_a_usage_error() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = golem(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {out:?}");
        assert!(stdout(&out).contains("golem-orch"), "{shell}: {out:?}");
    }
    let out = golem(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
}

#[test]
fn the_man_page_is_roff_with_a_title_and_the_subcommands() {
    let out = golem(&["man"]);
    assert!(out.status.success(), "{out:?}");
    let page = stdout(&out);
    // Only roff's quote-character preamble (`.ie`/`.el`) may come before the title.
    let first_macro = page
        .lines()
        .find(|l| l.starts_with('.') && !l.starts_with(".ie") && !l.starts_with(".el"))
        .unwrap_or_default();
    assert!(
        first_macro.starts_with(".TH golem-orch 1"),
        "{first_macro:?}"
    );
    for section in [".SH NAME", ".SH SYNOPSIS", ".SH OPTIONS", ".SH SUBCOMMANDS"] {
        assert!(
            page.contains(section),
            "{section} missing from the man page"
        );
    }
    assert!(
        page.contains("completions"),
        "the page lists no subcommands"
    );
}

/// `-q` silences the chatter on stderr (the batch's start line and its progress lines) and
/// `run`'s next-step hints, never the result: the batch summary and the run's status still
/// print, and `--json` is the same document.
#[test]
fn quiet_leaves_only_the_results() {
    let g = crate::harness::Golem::new();
    let a = g.file("docs/a.txt", "alpha\n");
    let b = g.file("docs/b.txt", "beta\n");
    let loud = g.output(["batch".as_ref(), a.as_os_str(), b.as_os_str()]);
    assert!(loud.status.success(), "{loud:?}");
    assert!(!loud.stderr.is_empty(), "no progress without -q: {loud:?}");
    let out = g.output([
        "-q".as_ref(),
        "batch".as_ref(),
        a.as_os_str(),
        b.as_os_str(),
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(out.stderr.is_empty(), "chatter under -q: {out:?}");
    assert!(stdout(&out).contains("succeeded"), "{out:?}");

    let out = g.output(["run".as_ref(), "--quiet".as_ref(), a.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains(": staged") && text.contains("  staged "),
        "{text}"
    );
    assert!(
        !text.contains("logs: golem-orch logs"),
        "a hint under -q: {text}"
    );

    let (json, code) = g.json([
        "-q".as_ref(),
        "run".as_ref(),
        "--json".as_ref(),
        a.as_os_str(),
    ]);
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["status"], "staged", "{json}");
    g.assert_clean();
}

/// The commands people reach for first show examples in their help, gc says what it may and may
/// never touch, and the top-level help keeps its typical flow.
#[test]
fn help_shows_examples_and_gcs_scope() {
    for command in ["run", "batch", "push", "gc"] {
        let out = golem(&[command, "--help"]);
        assert!(out.status.success(), "{command}: {out:?}");
        let help = stdout(&out);
        assert!(help.contains("\nExamples:\n"), "{command}: no examples");
        assert!(
            help.contains(&format!("  golem-orch {command}"))
                || help.contains(&format!("  golem-orch -q {command}")),
            "{command}: no example of itself"
        );
    }
    let gc = stdout(&golem(&["gc", "--help"]));
    for scope in [
        "Engine-wide",
        "State directories",
        "Never touched",
        "live session",
    ] {
        assert!(gc.contains(scope), "gc's help does not say {scope:?}");
    }
    let top = stdout(&golem(&["--help"]));
    assert!(top.contains("Typical flow:"), "{top}");
    assert!(top.contains("-q, --quiet"), "{top}");
}

/// The dry runs say what would happen and create nothing: `batch --dry-run` lists the documents
/// with their folders, the policy and one document's container; `gc --dry-run` lists what it
/// would remove; `run --dry-run` prints the container. Afterwards the state directory is as it
/// was (no batch record, session, stage entry or audit line), a state directory that did not
/// exist still does not, and the engine holds nothing of this test's.
#[test]
fn dry_runs_create_nothing_in_the_engine_or_the_state_directory() {
    use crate::harness::tree;
    let g = crate::harness::Golem::new();
    g.file("docs/a.txt", "alpha\n");
    g.file("docs/sub/b.txt", "beta\n");
    let docs = g.project.path().join("docs");
    let before = tree(&g.home);

    let (plan, code) = g.json([
        "batch".as_ref(),
        "--dry-run".as_ref(),
        "--json".as_ref(),
        "--stage-as-one".as_ref(),
        "--jobs".as_ref(),
        "3".as_ref(),
        "--memory".as_ref(),
        "256m".as_ref(),
        docs.as_os_str(),
    ]);
    assert_eq!(code, 0, "{plan}");
    assert_eq!(plan["dry_run"], true);
    let folders: Vec<&str> = plan["documents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["folder"].as_str())
        .collect();
    assert_eq!(folders, ["a.txt", "sub_b.txt"], "{plan}");
    assert!(plan["documents"][1]["source"]
        .as_str()
        .unwrap()
        .ends_with("docs/sub/b.txt"));
    assert_eq!(
        (plan["jobs"].as_u64(), plan["stage_as_one"].as_bool()),
        (Some(3), Some(true))
    );
    assert_eq!(plan["policy"]["level"], "untrusted", "{plan}");
    assert_eq!(plan["plan"]["trust_level"], "untrusted", "{plan}");
    assert!(plan["plan"]["image"]
        .as_str()
        .unwrap()
        .starts_with("golem-worker"));
    let out = g.output(["batch".as_ref(), "--dry-run".as_ref(), docs.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.starts_with("dry run: nothing was created\n")
            && text.contains("2 document(s)")
            && text.contains("sub_b.txt  <- "),
        "{text}"
    );

    let (report, code) = g.json(["gc", "--dry-run", "--json"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["dry_run"], true, "{report}");
    // (Other tests' crashed sessions may be listed: gc's scope is the engine.)
    assert!(report["containers"].is_array(), "{report}");
    let out = g.output(["gc", "--dry-run"]);
    assert!(
        stdout(&out).starts_with("dry run: nothing was removed or changed\n"),
        "{out:?}"
    );
    let (run, code) = g.json([
        "run".as_ref(),
        "--dry-run".as_ref(),
        "--json".as_ref(),
        docs.as_os_str(),
    ]);
    assert_eq!(
        (code, &run["dry_run"]),
        (0, &serde_json::json!(true)),
        "{run}"
    );

    assert_eq!(
        tree(&g.home),
        before,
        "a dry run changed the state directory"
    );
    assert!(!g.home.join("audit.jsonl").exists());
    g.assert_clean();

    // A state directory that does not exist yet is not created by a dry run.
    let missing = g.home.join("not-yet");
    for args in [
        vec!["gc", "--dry-run"],
        vec!["batch", "--dry-run", docs.to_str().unwrap()],
    ] {
        let out = g.cmd(&args).env("GOLEM_HOME", &missing).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert!(!missing.exists(), "{args:?} created the state directory");
    }
}
