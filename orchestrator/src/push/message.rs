//! The commit a push writes: its subject, naming the session's inputs, and the provenance
//! trailers that tie it to its staged commit (and, for a partial push, to the files it holds).

use super::{Change, Manifest, Proposal, TRAILER_STAGED};

/// The trailer that names which files of a staged commit a partial push committed: the sha256 of
/// their staged paths, sorted, one per line. Absent when a push commits every file at once.
pub const TRAILER_SELECTION: &str = "Golem-Staged-Selection";

/// How many input names a default subject lists before cutting with "…".
const SUBJECT_NAMES: usize = 3;

/// The default subject: the session's inputs, so `git log --oneline` tells sessions apart
/// ("golem: 3 inputs: a.pdf, b.html, c.md", "golem: folder docs (329 inputs)"). Names are
/// escaped to one inert line, as everything quoted from an input is.
pub fn subject(inputs: &[crate::intake::InputRecord]) -> String {
    let name = |n: &str| crate::render::line(n);
    let folder = inputs
        .first()
        .and_then(|i| i.name.split_once('/'))
        .map(|(f, _)| f);
    match (inputs, folder) {
        ([], _) => "golem: a golem-orch session".to_string(),
        ([one], None) => format!("golem: {}", name(&one.name)),
        (_, Some(f))
            if inputs
                .iter()
                .all(|i| i.name.split_once('/').is_some_and(|(g, _)| g == f)) =>
        {
            format!("golem: folder {} ({} inputs)", name(f), inputs.len())
        }
        _ => {
            let shown: Vec<String> = inputs
                .iter()
                .take(SUBJECT_NAMES)
                .map(|i| name(&i.name))
                .collect();
            let more = if inputs.len() > SUBJECT_NAMES {
                ", …"
            } else {
                ""
            };
            format!("golem: {} inputs: {}{more}", inputs.len(), shown.join(", "))
        }
    }
}

/// The [`TRAILER_SELECTION`] value of a push of `proposal`'s files: `None` when it pushes every
/// staged file (a whole push), so a commit from before partial pushes reads the same.
pub fn selection_digest(manifest: &Manifest, proposal: &Proposal) -> Option<String> {
    use sha2::{Digest, Sha256};
    if proposal.files.len() == manifest.files.len() {
        return None;
    }
    let mut paths: Vec<&str> = proposal
        .files
        .iter()
        .map(|f| f.staged_path.as_str())
        .collect();
    paths.sort_unstable();
    let mut hash = Sha256::new();
    for p in paths {
        hash.update(p.as_bytes());
        hash.update(b"\n");
    }
    Some(hex::encode(hash.finalize()))
}

/// The commit message: the person's summary (or a default), then provenance trailers.
pub fn commit_message(
    manifest: &Manifest,
    manifest_sha256: &str,
    proposal: &Proposal,
    message: Option<&str>,
) -> String {
    let changed = proposal
        .files
        .iter()
        .filter(|f| f.change != Change::Unchanged)
        .count();
    let mut text = match message {
        Some(m) if !m.trim().is_empty() => m.trim_end().to_string(),
        _ => format!("{} ({changed} file(s))", subject(&manifest.inputs)),
    };
    text.push_str("\n\n");
    let mut trailer = |k: &str, v: &str| {
        // Trailer values come from the manifest; keep each on one line.
        text.push_str(&format!("{k}: {}\n", v.replace(['\n', '\r'], " ")));
    };
    trailer(TRAILER_STAGED, &manifest.id);
    if let Some(digest) = selection_digest(manifest, proposal) {
        trailer(TRAILER_SELECTION, &digest);
    }
    trailer("Golem-Session", &manifest.session);
    trailer("Golem-Trust-Level", manifest.trust_level.as_str());
    trailer(
        "Golem-Image",
        &format!("{} {}", manifest.image, manifest.image_id),
    );
    for input in manifest.inputs.iter().take(100) {
        trailer(
            "Golem-Input-Sha256",
            &format!("{} {}", input.sha256, input.name),
        );
    }
    if manifest.inputs.len() > 100 {
        trailer(
            "Golem-Inputs-Omitted",
            &(manifest.inputs.len() - 100).to_string(),
        );
    }
    trailer("Golem-Manifest-Sha256", manifest_sha256);
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intake::InputRecord;

    fn inputs(names: &[&str]) -> Vec<InputRecord> {
        names
            .iter()
            .map(|n| InputRecord {
                source: format!("/home/p/{n}"),
                name: n.to_string(),
                size: 1,
                sha256: "0".repeat(64),
                hops: vec![],
                final_url: None,
            })
            .collect()
    }

    #[test]
    fn the_subject_names_the_inputs_or_the_folder() {
        assert_eq!(subject(&inputs(&["a.pdf"])), "golem: a.pdf");
        assert_eq!(
            subject(&inputs(&["a.pdf", "b.html", "c.md"])),
            "golem: 3 inputs: a.pdf, b.html, c.md"
        );
        assert_eq!(
            subject(&inputs(&["a.pdf", "b.html", "c.md", "d.csv"])),
            "golem: 4 inputs: a.pdf, b.html, c.md, …"
        );
        assert_eq!(
            subject(&inputs(&["docs/a.pdf", "docs/sub/b.md"])),
            "golem: folder docs (2 inputs)"
        );
        assert_eq!(
            subject(&inputs(&["docs/a.pdf", "x.md"])),
            "golem: 2 inputs: docs/a.pdf, x.md"
        );
        assert_eq!(subject(&[]), "golem: a golem-orch session");
    }

    #[test]
    fn names_in_the_subject_are_one_inert_line() {
        let s = subject(&inputs(&["a\nb\u{1b}[8m.md"]));
        assert!(!s.contains('\n') && !s.contains('\u{1b}'), "{s}");
        assert!(s.starts_with("golem: a\\nb"), "{s}");
    }
}
