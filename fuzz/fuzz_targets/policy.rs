//! Policy files and project files on arbitrary text: parsing never panics; a policy that loads
//! respects its level's ceilings; a project file that loads never widens the level it narrows.
#![no_main]

use golem_orch::policy::{self, Access, Policy, TrustLevel};
use libfuzzer_sys::fuzz_target;

#[path = "narrow.rs"]
mod narrow;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let level = TrustLevel::ALL[usize::from(pick) % 4];

    // As a policy file for `level`.
    if let Ok(p) = Policy::from_yaml(text, "fuzz.yaml", level) {
        assert_eq!(p.level, level);
        assert_ne!(p.mounts.input, Access::Rw);
        assert!(p.fixed_user().is_none_or(|(u, g)| u != 0 && g != 0));
        let full = policy::load(TrustLevel::Full, None, None).unwrap().policy;
        assert!(p.mounts.repo <= full.mounts.repo);
        if level != TrustLevel::Full {
            assert!(!p.network.allow_opt_in);
        }
        if level == TrustLevel::Untrusted {
            assert_eq!((p.mounts.workspace, p.mounts.repo), (Access::None, Access::None));
        }
    }

    // As a project's golem.yaml narrowing the shipped policy.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("golem.yaml");
    std::fs::write(&file, text).expect("write");
    let base = policy::load(level, None, None).unwrap().policy;
    if let Ok(eff) = policy::load(level, None, Some(&file)) {
        narrow::assert_never_wider(&base, &eff.policy);
    }
});
