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
