//! `GOLEM_CORPUS_DIR=/some/dir cargo test -p golem-worker --test corpus_writer -- --ignored`
//! writes the test corpus to a directory, to run the worker on it by hand
//! (for example inside the real container).

// All of this crate is test code: `cfg(test)` says so to clippy, whose allow-unwrap/expect-in-tests
// (clippy.toml) otherwise covers only `#[test]` functions, not the helpers they share.
#![cfg(test)]

mod common;

#[test]
#[ignore = "writes the corpus to $GOLEM_CORPUS_DIR; run by hand"]
fn write_corpus_to_dir() {
    let dir = std::env::var_os("GOLEM_CORPUS_DIR").expect("set GOLEM_CORPUS_DIR");
    common::write_corpus(std::path::Path::new(&dir));
}
