//! User stories for runtimes: a person picks one the level allows, the engine must have it, and
//! the staged commit says what the container really ran under.

use serde_json::Value;

use crate::harness::{stderr_text, Golem};

fn engine_runtimes(g: &Golem) -> Vec<String> {
    let (doctor, _) = g.json(["doctor", "--json"]);
    doctor["engine"]["runtimes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| r.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn manifest_of(g: &Golem, run: &Value) -> Value {
    let staged = run["staged"].as_str().expect("staged");
    let (shown, code) = g.json(["show", "--json", staged]);
    assert_eq!(code, 0, "{shown}");
    shown
}

#[test]
fn doctor_names_the_engine_and_its_runtimes() {
    let g = Golem::new();
    let (doctor, _) = g.json(["doctor", "--json"]);
    assert_eq!(doctor["engine"]["name"], "Docker", "{doctor}");
    assert!(
        engine_runtimes(&g).contains(&"runc".to_string()),
        "{doctor}"
    );
    let checks = doctor["checks"].as_array().expect("checks");
    assert!(
        checks.iter().any(|c| c["check"] == "runtime untrusted"),
        "{doctor}"
    );
    g.assert_clean();
}

#[test]
fn the_staged_commit_says_what_the_container_really_ran_with() {
    let g = Golem::new();
    g.file("paper.txt", "A short paper.\n");
    let (run, code) = g.json(["run", "--json", "paper.txt"]);
    assert_eq!(code, 0, "{run}");
    let m = manifest_of(&g, &run);
    let c = &m["container"];
    assert_eq!(c["digest"].as_str().map(str::len), Some(64), "{m}");
    let s = &c["settings"];
    assert_eq!(s["runtime"], "runc", "{s}");
    assert_eq!(s["network_mode"], "none", "{s}");
    assert_eq!(s["readonly_rootfs"], true, "{s}");
    assert_eq!(s["cap_drop"], serde_json::json!(["ALL"]), "{s}");
    let input = s["mounts"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["target"] == "/input"))
        .cloned()
        .expect("an /input mount");
    assert_eq!(input["read_only"], true, "{input}");
    let events: Vec<String> = g
        .audit()
        .iter()
        .filter_map(|e| e["event"].as_str().map(String::from))
        .collect();
    let at = |name: &str| events.iter().position(|e| e == name).expect(name);
    assert!(
        at("container.verified") < at("container.started"),
        "{events:?}"
    );
    g.assert_clean();
}

#[test]
fn a_runtime_the_level_does_not_allow_is_refused_in_one_line_before_a_session() {
    let g = Golem::new();
    g.file("paper.txt", "A short paper.\n");
    let out = g.output(["run", "--runtime", "kata", "paper.txt"]);
    assert!(!out.status.success());
    let err = stderr_text(&out);
    assert!(
        err.contains("does not allow") && err.contains("runsc"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(g.sessions().is_empty());
    g.assert_clean();
}

/// Under gVisor where the engine has it registered (README, "Runtimes"). Where it has not, the
/// refusal is the story: one line, before a session exists.
#[test]
fn run_under_runsc_stages_the_report_or_is_refused_where_the_engine_lacks_it() {
    let g = Golem::new();
    g.file("paper.txt", "A short paper about gVisor.\n");
    if engine_runtimes(&g).contains(&"runsc".to_string()) {
        let (run, code) = g.json(["run", "--json", "--runtime", "runsc", "paper.txt"]);
        assert_eq!(code, 0, "{run}");
        let m = manifest_of(&g, &run);
        assert_eq!(m["container"]["settings"]["runtime"], "runsc", "{m}");
        let report = g.staged_files(run["staged"].as_str().expect("staged"));
        assert!(report.join("paper.txt.md").is_file());
    } else {
        let out = g.output(["run", "--runtime", "runsc", "paper.txt"]);
        let err = stderr_text(&out);
        assert!(
            !out.status.success() && err.contains("not registered"),
            "{err}"
        );
        assert!(g.sessions().is_empty());
    }
    g.assert_clean();
}
