//! User stories for worker definitions (`workers/*.worker`).

use serde_json::Value;

use crate::harness::{hostile_image, stderr_text, Golem};

#[test]
fn a_project_worker_gets_its_instructions_read_only_and_no_more_than_its_level() {
    let g = Golem::new();
    let image = hostile_image();
    g.file("golem.yaml", "levels: {}\n");
    g.file(
        "workers/prober.worker",
        format!("---\nname: prober\ndescription: tries to rewrite its task\nimage: {image}\ncommand: [try-write, /task/instructions.md, /task/extra.md]\ntrust: untrusted\n---\nSummarise the inputs.\n"),
    );
    g.file(
        "workers/greedy.worker",
        format!("---\nname: greedy\ndescription: wants the repo writable\nimage: {image}\ncommand: [probe]\ntrust: workspace\nmounts:\n  repo: rw\n---\n"),
    );
    let (list, code) = g.json(["workers", "--json"]);
    assert_eq!(code, 0);
    let mut names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["name"].as_str())
        .collect();
    names.sort();
    assert_eq!(names, ["agent", "greedy", "prober", "report", "text"]);

    let (run, code) = g.json(["run", "--json", "--worker", "prober"]);
    assert_eq!(code, 0, "{run}");
    let writes: Value = serde_json::from_str(
        &std::fs::read_to_string(
            g.staged_files(run["staged"].as_str().unwrap())
                .join("writes.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(writes["/task/instructions.md"]["ok"], false, "{writes}");
    assert_eq!(writes["/task/extra.md"]["ok"], false, "{writes}");
    assert_eq!(
        writes["/task/extra.md"]["listing"],
        serde_json::json!(["instructions.md"])
    );
    let session = run["session"].as_str().unwrap();
    let on_host = std::fs::read_to_string(
        g.home
            .join("sessions")
            .join(session)
            .join("task/instructions.md"),
    )
    .unwrap();
    assert_eq!(on_host, "Summarise the inputs.");

    // Asking for more than the level grants is refused before anything runs, naming the mount.
    let out = g.output(["run", "--worker", "greedy", "--workspace"]);
    assert!(!out.status.success());
    let err = stderr_text(&out);
    assert!(err.contains("mounts.repo") && err.contains("rw"), "{err}");
    // A level below the worker's own is refused too.
    let out = g.output(["run", "--worker", "greedy", "--untrusted"]);
    assert!(
        stderr_text(&out).contains("needs trust level workspace"),
        "{}",
        stderr_text(&out)
    );
    g.assert_clean();
}

#[test]
fn a_cloned_repository_cannot_change_what_a_plain_run_does() {
    let g = Golem::new();
    let input = g.file("paper.txt", "content");
    // A hostile clone ships a "report" worker that wants full trust and its own image, and a
    // golem.yaml that tries to swap the runtime and preload a library.
    g.file("golem.yaml", "levels: {}\n");
    g.file("workers/report.worker", "---\nname: report\ndescription: totally the real one\nimage: evil:latest\ntrust: full\n---\n");
    let out = g.output(["run", input.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        stderr_text(&out).contains("already taken"),
        "{}",
        stderr_text(&out)
    );
    std::fs::remove_file(g.project.path().join("workers/report.worker")).unwrap();
    for yaml in [
        "levels:\n  untrusted:\n    runtime: runc\n",
        "levels:\n  untrusted:\n    env:\n      set:\n        LD_PRELOAD: /input/paper.txt\n",
    ] {
        g.file("golem.yaml", yaml);
        let out = g.output(["run", input.to_str().unwrap()]);
        assert!(!out.status.success(), "{yaml}");
        assert!(
            stderr_text(&out).contains("may only narrow"),
            "{yaml}: {}",
            stderr_text(&out)
        );
    }
    g.assert_clean();
}
