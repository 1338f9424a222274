//! Property: a project's `golem.yaml` can only narrow a level, never widen it.
//!
//! Random overlays, with every value drawn both below and above the shipped policy's, are
//! written to a project file and loaded with `policy::load`; whatever loads must grant nothing
//! the shipped policy does not. (No engine needed; the fuzz target `policy` checks the same
//! property on arbitrary text.)
//!
//! The stories after the properties check that the three places a narrowing can be written
//! (`golem.yaml`, a worker definition, the run flags) apply one rule.

use golem_orch::policy::{self, Access, NetworkMode, Policy, TrustLevel};
use golem_orch::units::Size;
use golem_orch::workers::Definition;
use proptest::prelude::*;

use crate::harness::{stderr_text, Golem};

/// Panics when `p` grants anything `base` does not.
fn assert_never_wider(base: &Policy, p: &Policy) {
    assert_eq!(p.level, base.level);
    assert!(p.mounts.input <= base.mounts.input);
    assert!(p.mounts.workspace <= base.mounts.workspace);
    assert!(p.mounts.repo <= base.mounts.repo);
    assert_eq!(p.network.mode, NetworkMode::None);
    assert!(p.network.allow_opt_in <= base.network.allow_opt_in);
    assert!(p.resources.memory <= base.resources.memory);
    assert!(p.resources.cpus <= base.resources.cpus && p.resources.cpus >= 0.01);
    assert!(p.resources.pids <= base.resources.pids && p.resources.pids > 0);
    assert!(p.resources.timeout <= base.resources.timeout);
    assert!(p.resources.tmp <= base.resources.tmp);
    assert!(p.output.max_total_bytes <= base.output.max_total_bytes);
    assert!(p.output.max_files <= base.output.max_files && p.output.max_files > 0);
    assert!(p.output.max_file_bytes <= base.output.max_file_bytes);
    assert!(p.output.max_file_bytes <= p.output.max_total_bytes);
    assert_eq!(p.env.set, base.env.set);
    assert!(p.env.pass.iter().all(|v| base.env.pass.contains(v)));
    assert_eq!(p.runtime, base.runtime);
    assert_eq!(p.user, base.user);
}

fn level() -> impl Strategy<Value = TrustLevel> {
    prop_oneof![
        Just(TrustLevel::Untrusted),
        Just(TrustLevel::Session),
        Just(TrustLevel::Workspace),
        Just(TrustLevel::Full),
    ]
}

fn access() -> impl Strategy<Value = &'static str> {
    prop_oneof![3 => Just("none"), 2 => Just("ro"), 1 => Just("rw")]
}

/// Mostly plausible narrowings (a few MiB), sometimes anything.
fn size() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (1u64..=32).prop_map(|n| format!("{n}MiB")),
        1 => (0u64..4096).prop_map(|n| format!("{n}")),
        1 => (1u64..8192).prop_map(|n| format!("{n}MiB")),
        1 => (1u64..64).prop_map(|n| format!("{n}g")),
        1 => (1u64..100_000).prop_map(|n| format!("{n}k")),
    ]
}

fn duration() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (1u64..=300).prop_map(|n| format!("{n}s")),
        1 => (0u64..100_000).prop_map(|n| format!("{n}s")),
        1 => (1u64..600).prop_map(|n| format!("{n}m")),
        1 => (1u64..48).prop_map(|n| format!("{n}h")),
    ]
}

fn count(plausible: u64, wild: u64) -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (1..=plausible).prop_map(|n| n.to_string()),
        1 => (0..wild).prop_map(|n| n.to_string()),
    ]
}

/// One optional `key: value` line, indented.
fn opt(key: &'static str, value: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
    proptest::option::weighted(0.3, value)
        .prop_map(move |v| v.map(|v| format!("      {key}: {v}\n")).unwrap_or_default())
}

fn section(name: &'static str, lines: Vec<String>) -> String {
    let body: String = lines.concat();
    if body.is_empty() {
        String::new()
    } else {
        format!("    {name}:\n{body}")
    }
}

/// A random overlay for `level`, in the block style people write.
fn overlay() -> impl Strategy<Value = (TrustLevel, String)> {
    let mounts = (
        opt("input", access().prop_map(String::from)),
        opt("workspace", access().prop_map(String::from)),
        opt("repo", access().prop_map(String::from)),
    )
        .prop_map(|(a, b, c)| section("mounts", vec![a, b, c]));
    let network = opt(
        "allow_opt_in",
        proptest::bool::weighted(0.2).prop_map(|b| b.to_string()),
    )
    .prop_map(|a| section("network", vec![a]));
    let resources = (
        opt("memory", size()),
        opt(
            "cpus",
            prop_oneof![
                6 => (1u32..=100).prop_map(|c| format!("{}", f64::from(c) / 100.0)),
                1 => (0u32..400).prop_map(|c| format!("{}", f64::from(c) / 100.0)),
                1 => Just("0.001".to_string()),
                1 => Just("1e9".to_string()),
            ],
        ),
        opt("pids", count(64, 1000)),
        opt("timeout", duration()),
        opt("tmp", size()),
    )
        .prop_map(|(a, b, c, d, e)| section("resources", vec![a, b, c, d, e]));
    let output = (
        opt("max_total_bytes", size()),
        opt("max_files", count(256, 20_000)),
        opt("max_file_bytes", size()),
    )
        .prop_map(|(a, b, c)| section("output", vec![a, b, c]));
    let env = prop_oneof![
        4 => Just(String::new()),
        1 => Just("    env:\n      pass: [HOME]\n".to_string()),
        1 => Just("    env:\n      pass: []\n".to_string()),
        1 => Just("    env:\n      set:\n        LD_PRELOAD: /input/x.so\n".to_string()),
    ];
    let runtime = prop_oneof![
        4 => Just(String::new()),
        1 => Just("    runtime: runsc\n".to_string()),
        1 => Just("    runtime: runc\n".to_string()),
    ];
    (level(), mounts, network, resources, output, env, runtime).prop_map(
        |(level, m, n, r, o, e, rt)| (level, format!("levels:\n  {level}:\n{m}{n}{r}{o}{e}{rt}")),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_project_file_never_widens_a_level((level, yaml) in overlay()) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("golem.yaml");
        std::fs::write(&file, &yaml).unwrap();
        let base = policy::load(level, None, None).unwrap().policy;
        if let Ok(eff) = policy::load(level, None, Some(&file)) {
            assert_never_wider(&base, &eff.policy);
            // The narrowed policy is still a valid policy of its level.
            prop_assert_ne!(eff.policy.mounts.input, Access::Rw);
        }
    }
}

/// The generator reaches both outcomes: plenty of overlays load, plenty are refused.
#[test]
fn the_overlay_generator_exercises_both_outcomes() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut loaded, mut refused) = (0, 0);
    for _ in 0..300 {
        let (level, yaml) = overlay().new_tree(&mut runner).unwrap().current();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("golem.yaml");
        std::fs::write(&file, &yaml).unwrap();
        match policy::load(level, None, Some(&file)) {
            Ok(_) => loaded += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(
        loaded > 20 && refused > 20,
        "loaded {loaded}, refused {refused}"
    );
}

/// Attack story (issue 12): narrowing was written three times, and the copies disagreed about a
/// per-file output cap above the output total. A worker definition clamped it, a `golem.yaml`
/// refused it, and a definition that lowered only the total left the file cap above it: the
/// session got a policy that no policy file may hold. One function now applies all three, so a
/// `golem.yaml` (read by the binary) and a worker definition give the same policy, and a cap
/// above the level's own is refused on both paths with the same key.
#[test]
fn a_file_cap_above_the_total_is_clamped_alike_by_golem_yaml_and_a_worker_definition() {
    let g = Golem::new();
    let base = policy::load(TrustLevel::Untrusted, None, None)
        .unwrap()
        .policy;
    assert_eq!(base.output.max_file_bytes, Size(8 << 20));
    let worker = |output: &str| {
        let text = format!(
            "---\nname: w\ndescription: d\nimage: golem-worker\ntrust: untrusted\n{output}---\n"
        );
        Definition::parse(&text, "w.worker").unwrap()
    };
    let project = |output: &str| {
        let indented: String = output.lines().map(|l| format!("    {l}\n")).collect();
        g.file("golem.yaml", format!("levels:\n  untrusted:\n{indented}"))
    };

    // A file cap between the new total and the level's own: clamped to the total, both ways.
    let output = "output:\n  max_total_bytes: 1MiB\n  max_file_bytes: 2MiB\n";
    let file = project(output);
    let (shown, code) = g.json(["policy", "show", "untrusted", "--json"]);
    assert_eq!(code, 0, "{shown}");
    assert_eq!(shown["output"]["max_total_bytes"], "1MiB", "{shown}");
    assert_eq!(shown["output"]["max_file_bytes"], "1MiB", "{shown}");
    let from_file = policy::load(TrustLevel::Untrusted, None, Some(&file))
        .unwrap()
        .policy;
    let mut from_worker = base.clone();
    worker(output).narrow(&mut from_worker).unwrap();
    assert_eq!(from_worker, from_file);

    // Lowering only the total leaves no file cap above it, whoever asks.
    let output = "output:\n  max_total_bytes: 1MiB\n";
    let file = project(output);
    let from_file = policy::load(TrustLevel::Untrusted, None, Some(&file))
        .unwrap()
        .policy;
    let mut from_worker = base.clone();
    worker(output).narrow(&mut from_worker).unwrap();
    assert_eq!(from_worker.output.max_file_bytes, Size(1 << 20));
    assert_eq!(from_worker, from_file);

    // A file cap above the level's own is a widening on both paths, named by its key.
    let output = "output:\n  max_file_bytes: 16MiB\n";
    project(output);
    let out = g.output(["policy", "show", "untrusted"]);
    let err = stderr_text(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("output.max_file_bytes may only narrow"),
        "{err}"
    );
    let err = worker(output).narrow(&mut base.clone()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("w.worker: output.max_file_bytes may only narrow"),
        "{err}"
    );
    g.assert_clean();
}
