//! The tar validator on arbitrary bytes: whatever the stream holds, nothing is created outside
//! the destination, only plain 0644 files and 0755 directories appear inside it, and a success
//! reports exactly what is on disk, within the limits.
#![no_main]

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use golem_orch::extract::{extract, Limits};
use libfuzzer_sys::fuzz_target;

const LIMITS: Limits = Limits {
    max_files: 16,
    max_total_bytes: 64 * 1024,
    max_file_bytes: 16 * 1024,
};

/// Every entry below `dir` (not following links): relative path -> (is_dir, mode, size).
fn walk(dir: &Path) -> BTreeMap<String, (bool, u32, u64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("readable") {
            let path = entry.expect("entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("lstat");
            let ft = meta.file_type();
            let rel = path.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            assert!(
                ft.is_dir() || ft.is_file(),
                "{rel}: neither a file nor a directory ({ft:?})"
            );
            if ft.is_dir() {
                stack.push(path.clone());
            }
            out.insert(rel, (ft.is_dir(), meta.mode() & 0o7777, meta.len()));
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let sandbox = tempfile::tempdir().expect("tempdir");
    let dest = sandbox.path().join("dest");
    std::fs::create_dir(&dest).expect("dest");
    std::fs::write(sandbox.path().join("sentinel"), b"untouched").expect("sentinel");

    let result = extract(data, "output", &dest, &LIMITS);

    // Nothing outside the destination.
    let outside: Vec<String> = std::fs::read_dir(sandbox.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut outside = outside;
    outside.sort();
    assert_eq!(outside, ["dest", "sentinel"], "created outside dest");
    assert_eq!(
        std::fs::read(sandbox.path().join("sentinel")).unwrap(),
        b"untouched"
    );
    let inside = walk(&dest);
    for (rel, (is_dir, mode, _)) in &inside {
        let want = if *is_dir { 0o755 } else { 0o644 };
        assert_eq!(*mode, want, "{rel}: mode {mode:o}");
    }
    if let Ok(ex) = result {
        let files: BTreeMap<String, u64> = inside
            .iter()
            .filter(|(_, (d, _, _))| !d)
            .map(|(p, (_, _, s))| (p.clone(), *s))
            .collect();
        let listed: BTreeMap<String, u64> =
            ex.files.iter().map(|f| (f.path.clone(), f.size)).collect();
        assert_eq!(files, listed, "the extraction does not report what it wrote");
        assert!(ex.files.len() as u64 <= LIMITS.max_files);
        assert!(ex.total_bytes <= LIMITS.max_total_bytes);
        assert_eq!(ex.total_bytes, listed.values().sum::<u64>());
        assert!(ex.files.iter().all(|f| f.size <= LIMITS.max_file_bytes));
        for r in &ex.rejected {
            assert!(!r.path.contains('\n') && !r.reason.contains('\n'), "{r:?}");
        }
    }
});
