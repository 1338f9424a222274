//! Attacks on the person's terminal (issue 11, class 1): names and text from untrusted places
//! (an input's folder, a cloned repository's files, a worker's output names and logs) carry
//! escape sequences that would write the clipboard (OSC 52), hide text (`\e[8m`), reorder it
//! (bidi overrides) or smuggle invisible text (tag characters, U+3164). Whatever golem-orch
//! prints, on stdout or stderr, as text or `--json`, must be inert: no byte of any of them.

use std::process::Output;

use golem_protocol::chars;
use serde_json::Value;

use crate::harness::Golem;
use crate::harness::{audited_rejections, hostile};

/// OSC 52 (write the clipboard), SGR 8 (hide what follows), a right-to-left override, the
/// single-byte CSI (U+009B), tag characters spelling "hi", a Hangul filler and a zero-width joiner.
const EVIL: &str =
    "evil\x1b]52;c;aGFja2Vk\x07\x1b[8m\u{202e}fdp.exe\u{9b}31m\u{e0068}\u{e0069}\u{3164}\u{200d}";

/// Fails the test if `bytes` (what a command printed) holds a dangerous character, naming it and
/// where it is, or is not UTF-8 at all (a lone C1 byte is a command to some terminals).
pub(crate) fn assert_inert(what: &str, bytes: &[u8]) {
    let text = std::str::from_utf8(bytes).unwrap_or_else(|e| {
        panic!(
            "{what}: output is not UTF-8 ({e}): {:?}",
            String::from_utf8_lossy(bytes)
        )
    });
    for (at, c) in text.char_indices() {
        if chars::is_dangerous_in_text(c) {
            let mut from = at.saturating_sub(40);
            while !text.is_char_boundary(from) {
                from -= 1;
            }
            panic!(
                "{what}: dangerous character U+{:04X} at byte {at}, after {:?}\nwhole output: {text:?}",
                c as u32,
                &text[from..at]
            );
        }
    }
}

/// Asserts both streams of a command's output are inert.
fn assert_output_inert(what: &str, out: &Output) {
    assert_inert(&format!("{what} (stdout)"), &out.stdout);
    assert_inert(&format!("{what} (stderr)"), &out.stderr);
}

/// Asserts a command failed with exactly one `golem-orch:` line on stderr.
fn assert_one_error_line(what: &str, out: &Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{what} should fail: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{what}: not one line: {err:?}");
    assert!(lines[0].starts_with("golem-orch: "), "{what}: {err:?}");
}

#[test]
fn a_hostile_parent_folder_never_reaches_the_terminal_raw() {
    let g = Golem::new();
    let doc = g.file(&format!("{EVIL}/notes.txt"), "plain notes\n");
    let out = g
        .cmd(["batch"])
        .arg(&doc)
        .output()
        .expect("spawn golem-orch");
    assert_output_inert("batch", &out);
    if !out.status.success() {
        // Refused at intake (every path component is checked): one inert line, nothing run.
        assert_one_error_line("batch", &out);
        let (sessions, _) = g.json(["sessions", "--json"]);
        assert_eq!(
            sessions,
            serde_json::json!([]),
            "refused, yet a session ran"
        );
        g.assert_clean();
        return;
    }
    // Processed: every view of it is inert.
    let (list, code) = g.json(["staged", "--json"]);
    assert_eq!(code, 0);
    let staged = list[0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("nothing staged: {list}"))
        .to_string();
    let json_out = g.output(["staged", "--json"]);
    assert_output_inert("staged --json", &json_out);
    let back: Value = serde_json::from_slice(&json_out.stdout).expect("staged --json is JSON");
    assert!(
        back[0]["source"].as_str().is_some_and(|s| s.contains(EVIL)),
        "escaping for the terminal must not change the JSON value: {back}"
    );
    for args in [
        vec!["staged"],
        vec!["sessions"],
        vec!["sessions", "--json"],
        vec!["show", &staged],
        vec!["show", &staged, "--json"],
        vec!["audit"],
        vec!["audit", "--json"],
    ] {
        let out = g.output(&args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_output_inert(&args.join(" "), &out);
    }
    let show = String::from_utf8_lossy(&g.output(["show", &staged]).stdout).into_owned();
    assert!(
        show.contains("\\u{1b}]52;c;"),
        "the name is shown escaped: {show}"
    );
    g.assert_clean();
}

#[test]
fn a_cloned_repositorys_worker_definition_cannot_drive_the_terminal() {
    let g = Golem::new();
    g.file("golem.yaml", "levels: {}\n");
    // YAML double quotes turn \e, \a and \U into the raw characters.
    g.file(
        "workers/evil.worker",
        "---\nname: evil\ndescription: \"summarise\\e]52;c;aGFja2Vk\\a\\e[8m hidden \\u202e\\U000E0041\"\nimage: \"golem-worker\\e]0;owned\\a\"\ncommand: [text]\ntrust: untrusted\n---\nDo it.\n",
    );
    g.file(
        "workers/quiet.worker",
        "---\nname: quiet\ndescription: \"fine\\e]52;c;aGFja2Vk\\a\\u3164\\x9b\"\nimage: golem-worker\ncommand: [text]\ntrust: untrusted\n---\n",
    );
    let out = g.output(["workers"]);
    assert_output_inert("workers", &out);
    let json = g.output(["workers", "--json"]);
    assert_output_inert("workers --json", &json);
    if json.status.success() {
        let list: Value = serde_json::from_slice(&json.stdout).expect("workers --json is JSON");
        let quiet = list
            .as_array()
            .and_then(|l| l.iter().find(|d| d["name"] == "quiet"))
            .unwrap_or_else(|| panic!("quiet is listed: {list}"));
        assert_eq!(
            quiet["description"], "fine\x1b]52;c;aGFja2Vk\x07\u{3164}\u{9b}",
            "the JSON value is unchanged, only its bytes are inert"
        );
    } else {
        assert_one_error_line("workers --json", &json);
    }
    let run = g.output(["run", "--worker", "evil", "--dry-run", "golem.yaml"]);
    assert_output_inert("run --worker evil --dry-run", &run);
}

#[test]
fn a_golem_yaml_key_with_escapes_gives_an_inert_error_line_in_every_command() {
    let g = Golem::new();
    g.file(
        "golem.yaml",
        "levels:\n  untrusted:\n    \"\\e]52;c;aGFja2Vk\\a\\e[8m\\u202e\\U000E0041\": 1\n",
    );
    let input = g.file("input.txt", "hello\n");
    for args in [
        vec!["policy", "show", "untrusted"],
        vec!["policy", "show", "untrusted", "--json"],
        vec!["run", "--dry-run", input.to_str().unwrap()],
        vec!["run", "--json", input.to_str().unwrap()],
        vec!["batch", input.to_str().unwrap()],
    ] {
        let out = g.output(&args);
        assert_one_error_line(&args.join(" "), &out);
        assert_output_inert(&args.join(" "), &out);
    }
    // doctor reports the broken policy as a failed check, inert too.
    let out = g.output(["doctor"]);
    assert!(!out.status.success());
    assert_output_inert("doctor", &out);
    let out = g.output(["doctor", "--json"]);
    assert_output_inert("doctor --json", &out);
    g.assert_clean();
}

#[test]
fn output_names_of_tag_characters_and_hangul_fillers_are_refused_with_their_reason() {
    let g = Golem::new();
    // "git" in tag characters renders as nothing at all; U+3164 renders as a space.
    let tags = "/output/\u{e0067}\u{e0069}\u{e0074}";
    let filler = "/output/read\u{3164}me.txt";
    let selector = "/output/ok\u{fe0f}.txt";
    let run = hostile(&g, &[], &["try-write", tags, filler, selector]);
    run.assert_status("staged", 0);
    let staged = run.staged();
    let names: Vec<String> = std::fs::read_dir(g.staged_files(&staged))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["writes.json"], "only the plain name is staged");

    let (manifest, code) = g.json(["show", &staged, "--json"]);
    assert_eq!(code, 0);
    let rejected = manifest["rejected"].as_array().cloned().unwrap_or_default();
    for (escaped, code_point) in [
        ("\\u{e0067}\\u{e0069}\\u{e0074}", "U+E0067"),
        ("read\\u{3164}me.txt", "U+3164"),
        ("ok\\u{fe0f}.txt", "U+FE0F"),
    ] {
        let found = rejected.iter().find(|r| {
            r["path"].as_str().is_some_and(|p| p.contains(escaped))
                && r["reason"].as_str().is_some_and(|w| w.contains(code_point))
        });
        assert!(
            found.is_some(),
            "{escaped} not rejected with {code_point}: {manifest}"
        );
    }
    let audited = audited_rejections(&g, &run.session());
    assert!(
        audited.iter().any(|(p, _)| p.contains("\\u{3164}")),
        "the audit log names the refusal: {audited:?}"
    );
    for args in [
        vec!["show", &staged],
        vec!["show", &staged, "--json"],
        vec!["audit"],
    ] {
        assert_output_inert(&args.join(" "), &g.output(&args));
    }
    g.assert_clean();
}

#[test]
fn a_worker_printing_escape_sequences_cannot_reach_the_terminal_through_its_logs() {
    let g = Golem::new();
    let run = hostile(&g, &[], &["say", EVIL, "line two\r\x1b[2Kforged line"]);
    run.assert_status("staged", 0);
    let session = run.session();
    let logs = g.output(["logs", &session]);
    assert!(logs.status.success());
    assert_output_inert("logs", &logs);
    let text = String::from_utf8_lossy(&logs.stdout).into_owned();
    assert!(
        text.contains("]52;c;aGFja2Vk"),
        "the logs are shown, escaped: {text}"
    );
    for args in [
        vec!["sessions"],
        vec!["sessions", "--json"],
        vec!["show", &run.staged()],
        vec!["show", &run.staged(), "--json"],
        vec!["audit"],
    ] {
        assert_output_inert(&args.join(" "), &g.output(&args));
    }

    // The logs file is escaped when written; `logs` escapes it again when printing, so even a
    // logs file changed on disk cannot drive the terminal.
    let path = g.home.join("sessions").join(&session).join("logs.txt");
    let mut bytes = format!("{EVIL}\n\u{1b}[31mred\r\n").into_bytes();
    bytes.extend_from_slice(b"not utf-8: \xff\x9b\n");
    std::fs::write(&path, bytes).unwrap();
    let logs = g.output(["logs", &session]);
    assert!(logs.status.success());
    assert_output_inert("logs of an edited logs file", &logs);
    g.assert_clean();
}

#[test]
fn arguments_the_command_line_parser_refuses_are_echoed_inert() {
    // `golem-orch batch *` in a folder of hostile files: a name the argument parser refuses (an
    // unknown subcommand, a flag, a bad value) is quoted back in its error.
    let g = Golem::new();
    for args in [
        vec![EVIL],
        vec!["run", "--trust", EVIL],
        vec!["batch", &format!("--{EVIL}")],
        vec!["show", "--json", EVIL, "extra"],
    ] {
        let out = g.output(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: usage error");
        assert_output_inert(&format!("{args:?}"), &out);
    }
    // Help still prints, on stdout, exit 0.
    let out = g.output(["--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("Usage"));
}
