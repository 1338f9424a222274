//! PDFs that hide text from a reader, and PDFs with ligatures, run through
//! the real binary: the report must flag and quote each hidden line, the
//! prompt-injection scan must see it as hidden text, and ligatures must
//! read as letters.

// All of this crate is test code (see documents.rs).
#![cfg(test)]

mod common;

use common::*;

#[test]
fn every_way_of_hiding_pdf_text_is_reported_and_scanned_as_hidden() {
    let input = tempfile::tempdir().expect("input");
    let output = tempfile::tempdir().expect("output");
    for (name, content) in HIDDEN_PDF_TRICKS {
        write(
            input.path(),
            &format!("{name}.pdf"),
            &pdf_with_content(content),
        );
    }
    let out = run(&["report"], input.path(), output.path());
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    for (name, _) in HIDDEN_PDF_TRICKS {
        let report = read_json(&output.path().join(format!("{name}.pdf.json")));
        let quote = format!("praise the {name} trick");
        assert!(
            has_warning(&report, "hidden_text", &quote),
            "{name}: {report:#}"
        );
        let injection = report["warnings"]
            .as_array()
            .expect("warnings")
            .iter()
            .find(|w| w["kind"] == "prompt_injection")
            .unwrap_or_else(|| panic!("{name}: no prompt_injection warning: {report:#}"));
        assert_eq!(injection["severity"], "high", "{name}: {injection:#}");
        assert!(
            injection["message"]
                .as_str()
                .unwrap_or("")
                .contains("in hidden text"),
            "{name}: {injection:#}"
        );
        let md = read(&output.path().join(format!("{name}.pdf.md")));
        assert!(md.contains("hidden_text"), "{name}: {md}");
    }
}

#[test]
fn pdf_ligatures_read_as_letters_and_plain_pdfs_hide_nothing() {
    let input = tempfile::tempdir().expect("input");
    let output = tempfile::tempdir().expect("output");
    write(input.path(), "ligatures.pdf", &ligature_pdf());
    write(input.path(), "budget.pdf", &good_pdf());
    let out = run(&["report"], input.path(), output.path());
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report = read_json(&output.path().join("ligatures.pdf.json"));
    assert_eq!(
        report["text"],
        "coefficients differ; the first flow; final words"
    );
    let report = read_json(&output.path().join("budget.pdf.json"));
    assert_eq!(report["warnings_total"], 0, "{report:#}");
}

#[test]
fn pdf_dates_are_rfc_3339_in_the_report() {
    let input = tempfile::tempdir().expect("input");
    let output = tempfile::tempdir().expect("output");
    let objects = vec![
        "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
        "<< /Type /Pages /Kids [] /Count 0 >>".to_string(),
        "<< /CreationDate (D:20220520201356+02'00') /ModDate (D:2022 or so) >>".to_string(),
    ];
    write(
        input.path(),
        "dated.pdf",
        &pdf_from_objects(&objects, 1, Some(3)),
    );
    let out = run(&["report"], input.path(), output.path());
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report = read_json(&output.path().join("dated.pdf.json"));
    assert_eq!(report["metadata"]["created"], "2022-05-20T20:13:56+02:00");
    assert_eq!(report["metadata"]["modified"], "D:2022 or so");
    let md = read(&output.path().join("dated.pdf.md"));
    // The Markdown escapes the `+`.
    assert!(md.contains("created: 2022-05-20T20:13:56\\+02:00"), "{md}");
}
