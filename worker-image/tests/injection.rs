//! The committed evaluation check of the prompt-injection detector: the dev
//! and held-out attack sets exist and parse, the library keeps flagging the
//! share of them (text only) measured when the sets were made, and the
//! committed ordinary manual sentences get no high warning. The full
//! evaluation (real Debian documents, planted attacks) is `eval/run.sh`.
//!
//! The project's target for held-out recall is 0.85 (see REPORT.md,
//! "Injection detector: evaluation"). The round-one held-out sets were seen
//! and are dev sets now (`dev2.jsonl`: agentdojo + greshake, `dev3.jsonl`:
//! PyRIT); `heldout3.jsonl` (giskard, BIPIA) was built and
//! measured before round two changed any rule and is never tuned on: its
//! misses are not printed. The floors below keep the measured figures from
//! rotting; raise them when the detector improves.

use golem_worker::model::Severity;
use golem_worker::warnings::prompt_injection;

/// dev2's recall (was held-out: 0.180 in round one; rebuilt with the
/// goals' constants filled in, 123/139 = 0.885 after round two), rounded down.
const MIN_DEV2_RECALL: f64 = 0.88;
/// dev3's recall (was held-out 2: 53/131 = 0.405 in round one; 90/131 =
/// 0.687 after round two), rounded down.
const MIN_DEV3_RECALL: f64 = 0.68;
/// The dev recall (0.686 in round one; 101/140 = 0.721 after round two),
/// rounded down.
const MIN_DEV_RECALL: f64 = 0.72;
/// Held-out 3's recall, rounded down: 15/147 = 0.102 after round two (the
/// 22 GPL-3.0 promptmap strings of the first build, which round two measured
/// as 27/169 before and 28/169 after, were dropped for the licence).
const MIN_HELD_OUT_3_RECALL: f64 = 0.10;

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

/// The share of `texts` with any prompt_injection warning; the misses of a
/// dev set (`show_misses`) are printed when INJECTION_EVAL_VERBOSE is set.
fn recall(texts: &[String], show_misses: bool) -> f64 {
    let verbose = show_misses && std::env::var_os("INJECTION_EVAL_VERBOSE").is_some();
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
    let sets = [
        ("dev.jsonl", MIN_DEV_RECALL, true),
        ("dev2.jsonl", MIN_DEV2_RECALL, true),
        ("dev3.jsonl", MIN_DEV3_RECALL, true),
        ("heldout3.jsonl", MIN_HELD_OUT_3_RECALL, false),
    ];
    for (name, floor, show_misses) in sets {
        let texts = attacks(name);
        assert!(texts.len() >= 100, "{name}: {} strings", texts.len());
        let r = recall(&texts, show_misses);
        eprintln!("recall {name}: {r:.3} ({} strings)", texts.len());
        assert!(r >= floor, "{name}: recall {r:.3} below {floor}");
    }
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
