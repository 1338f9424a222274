//! User stories for the default worker: real documents, parsed only inside the locked container,
//! come out as small reviewable reports.

use serde_json::Value;

use crate::harness::Golem;

fn read_json(path: &std::path::Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .expect("json")
}

#[test]
fn real_documents_are_reported_with_their_text_headings_links_and_warnings() {
    let g = Golem::new();
    let docs = g.project.path().join("inbox");
    golem_test_corpus::write(&docs, "budget.pdf", &golem_test_corpus::good_pdf());
    golem_test_corpus::write(
        &docs,
        "festival.html",
        golem_test_corpus::GOOD_HTML.as_bytes(),
    );
    golem_test_corpus::write(&docs, "contract.docx", &golem_test_corpus::docx(false));
    golem_test_corpus::write(
        &docs,
        "onboarding.html",
        golem_test_corpus::HOSTILE_HTML.as_bytes(),
    );
    let (run, code) = g.json(["run", "--json", "inbox"]);
    assert_eq!(code, 0, "{run}");
    let files = g.staged_files(run["staged"].as_str().unwrap());

    let pdf = read_json(&files.join("inbox/budget.pdf.json"));
    assert_eq!(pdf["type"], "pdf");
    assert_eq!(pdf["title"], "Budget 2024");
    assert!(pdf["text"]
        .as_str()
        .unwrap()
        .contains("The city budget for roads grew by ten percent this year."));
    let pdf_md = std::fs::read_to_string(files.join("inbox/budget.pdf.md")).unwrap();
    assert!(
        pdf_md.contains("- Introduction\n- Spending details"),
        "{pdf_md}"
    );
    assert!(
        pdf_md.contains("https://budget.example.org/2024"),
        "{pdf_md}"
    );

    let html = read_json(&files.join("inbox/festival.html.json"));
    assert_eq!(html["title"], "Harbour Festival 2024");
    assert!(html["text"]
        .as_str()
        .unwrap()
        .contains("Boat races start at noon."));
    let docx = read_json(&files.join("inbox/contract.docx.json"));
    assert_eq!(docx["title"], "Supplier Contract & Terms");
    assert_eq!(docx["links"][0]["text"], "the supplier portal");

    // The hostile page is reported, with the warnings a reviewer needs.
    let hostile = read_json(&files.join("inbox/onboarding.html.json"));
    let kinds: Vec<&str> = hostile["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["kind"].as_str())
        .collect();
    for kind in ["prompt_injection", "hidden_text", "script"] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    // Clearance is narrower than intake: only text reports, never the documents themselves.
    let (manifest, _) = g.json(["show", run["staged"].as_str().unwrap(), "--json"]);
    for f in manifest["files"].as_array().unwrap() {
        let path = f["path"].as_str().unwrap();
        assert!(
            path.ends_with(".md") || path.ends_with(".json"),
            "{path} is not a report"
        );
    }
    g.assert_clean();
}

#[test]
fn malformed_and_hostile_inputs_fail_alone_and_the_good_reports_survive() {
    let g = Golem::new();
    let docs = g.project.path().join("inbox");
    golem_test_corpus::write_malformed(&docs);
    golem_test_corpus::write(
        &docs,
        "good/festival.html",
        golem_test_corpus::GOOD_HTML.as_bytes(),
    );
    let (run, code) = g.json(["run", "--json", "inbox"]);
    // Some inputs failed (the worker says so), but everything was staged.
    assert_eq!(run["status"], "staged", "{run}");
    assert_eq!(run["exit_code"], 1);
    assert_eq!(code, 3);
    let files = g.staged_files(run["staged"].as_str().unwrap());
    let index = read_json(&files.join("index.json"));
    assert_eq!(index["complete"], true);
    let status = |path: &str| {
        index["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["path"] == path)
            .map(|e| e["status"].as_str().unwrap_or("").to_string())
            .unwrap_or_else(|| panic!("{path} not in the index: {index}"))
    };
    assert_eq!(status("inbox/bad/truncated.pdf"), "error");
    assert_eq!(status("inbox/bad/bomb.docx"), "error");
    assert_eq!(status("inbox/bad/flatebomb.pdf"), "error");
    // The good document's report is intact.
    let good = read_json(&files.join("inbox/good/festival.html.json"));
    assert_eq!(good["status"], "ok");
    assert_eq!(good["title"], "Harbour Festival 2024");
    g.assert_clean();
}

#[test]
fn the_text_worker_extracts_plain_text() {
    let g = Golem::new();
    golem_test_corpus::write(
        g.project.path(),
        "budget.pdf",
        &golem_test_corpus::good_pdf(),
    );
    let (run, code) = g.json(["run", "--json", "--worker", "text", "budget.pdf"]);
    assert_eq!(code, 0, "{run}");
    let text = std::fs::read_to_string(
        g.staged_files(run["staged"].as_str().unwrap())
            .join("budget.pdf.txt"),
    )
    .unwrap();
    assert!(
        text.contains("The city budget for roads grew by ten percent this year."),
        "{text}"
    );
    g.assert_clean();
}
