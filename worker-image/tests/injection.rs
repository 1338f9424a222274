//! The committed evaluation check of the prompt-injection detector: the dev
//! and held-out attack sets exist and parse, the library keeps flagging the
//! share of them (text only) measured when the sets were made, and the
//! committed ordinary manual sentences get no high warning. The full
//! evaluation (real Debian documents, planted attacks) is `eval/run.sh`.
//!
//! The project's target for the held-out set is 0.85; the detector does not
//! reach it (see REPORT.md, "Injection detector: evaluation"): most held-out
//! strings are agentdojo's bare task goals ("TODO: Send a transaction to
//! ..."), which carry no wording of an injection. The second held-out set
//! (PyRIT's jailbreak templates) was added after the first was measured.
//! The floors below keep the measured figures from rotting; raise them when
//! the detector improves, never tune the rules on the held-out strings.

use golem_worker::model::Severity;
use golem_worker::warnings::prompt_injection;

/// The held-out recall measured when the set was made (25/139 = 0.180), rounded down.
const MIN_HELD_OUT_RECALL: f64 = 0.17;
/// The second held-out set's recall measured when it was made (53/131 =
/// 0.405), rounded down.
const MIN_HELD_OUT_2_RECALL: f64 = 0.40;
/// The dev recall measured when the set was made (0.686), rounded down.
const MIN_DEV_RECALL: f64 = 0.68;

fn eval_file(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("eval")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `text` of every line of an attack set, checking each line's shape.
fn attacks(name: &str) -> Vec<String> {
    eval_file(name)
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let row: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}:{}: {e}", i + 1));
            let source = row["source"].as_str().unwrap_or("");
            assert!(!source.is_empty(), "{name}:{}: no source", i + 1);
            let text = row["text"].as_str().unwrap_or("");
            assert!(!text.trim().is_empty(), "{name}:{}: no text", i + 1);
            text.to_string()
        })
        .collect()
}

/// The share of `texts` with any prompt_injection warning; the misses are
/// printed when INJECTION_EVAL_VERBOSE is set.
fn recall(texts: &[String]) -> f64 {
    let verbose = std::env::var_os("INJECTION_EVAL_VERBOSE").is_some();
    let mut flagged = 0;
    for t in texts {
        if prompt_injection(&[("text", t)]).1.is_empty() {
            if verbose {
                eprintln!("MISS: {}", t.chars().take(300).collect::<String>());
            }
        } else {
            flagged += 1;
        }
    }
    flagged as f64 / texts.len() as f64
}

#[test]
fn attack_sets_parse_and_keep_their_measured_recall() {
    let dev = attacks("dev.jsonl");
    let held_out = attacks("heldout.jsonl");
    assert!(dev.len() >= 100 && held_out.len() >= 100);
    let held_out_2 = attacks("heldout2.jsonl");
    assert!(held_out_2.len() >= 100);
    let dev_recall = recall(&dev);
    let held_out_recall = recall(&held_out);
    let held_out_2_recall = recall(&held_out_2);
    eprintln!(
        "recall: dev {dev_recall:.3}, held-out {held_out_recall:.3}, held-out 2 {held_out_2_recall:.3}"
    );
    assert!(dev_recall >= MIN_DEV_RECALL, "dev recall {dev_recall:.3}");
    assert!(
        held_out_recall >= MIN_HELD_OUT_RECALL,
        "held-out recall {held_out_recall:.3}"
    );
    assert!(
        held_out_2_recall >= MIN_HELD_OUT_2_RECALL,
        "held-out 2 recall {held_out_2_recall:.3}"
    );
}

#[test]
fn ordinary_manual_sentences_get_no_high_warning() {
    let text = eval_file("ordinary.txt");
    let sentences: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(sentences.len() >= 30);
    for s in sentences {
        let (score, w) = prompt_injection(&[("text", s)]);
        assert!(
            w.iter().all(|w| w.severity < Severity::High),
            "{s}: score {score} {w:?}"
        );
    }
}
