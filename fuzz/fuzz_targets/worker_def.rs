//! Worker definitions on arbitrary text: parsing never panics, and a definition that parses can
//! only narrow the policy of any level it is run at.
#![no_main]

use golem_orch::policy::{self, TrustLevel};
use golem_orch::workers::Definition;
use libfuzzer_sys::fuzz_target;

#[path = "narrow.rs"]
mod narrow;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(def) = Definition::parse(text, "fuzz.worker") else {
        return;
    };
    assert!(!def.name.is_empty());
    for level in TrustLevel::ALL {
        let base = policy::load(level, None, None).unwrap().policy;
        let mut p = base.clone();
        if def.narrow(&mut p).is_ok() {
            assert!(def.trust <= level, "ran below its trust level");
            narrow::assert_never_wider(&base, &p);
        }
    }
});
