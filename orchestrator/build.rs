//! Builds `golem-worker` as a static binary and hands its path to the crate, which embeds it.
//!
//! No registry is reachable, so the worker image is built `FROM scratch` around a static binary
//! made here. Embedding it lets `golem-orch` build (and rebuild when stale) its own image on any
//! machine with an engine, so a fresh clone needs no manual image step.
//!
//! The nested cargo uses its own target directory (sharing the outer one would deadlock on its
//! lock) and a cleaned environment, so flags meant for the outer build (clippy's wrapper, the
//! outer RUSTFLAGS) do not leak into the worker and `+crt-static` does not leak out.

use std::env;
use std::path::PathBuf;
use std::process::Command;

const TARGET: &str = "x86_64-unknown-linux-gnu";

/// A failed build script prints its error and fails the build, which is all it can do.
type BuildResult = Result<(), Box<dyn std::error::Error>>;

fn main() -> BuildResult {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let workspace = manifest_dir
        .parent()
        .ok_or("orchestrator/ is not inside the workspace")?
        .to_path_buf();
    let worker_dir = workspace.join("worker-image");
    println!(
        "cargo:rerun-if-changed={}",
        worker_dir.join("src").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        worker_dir.join("Cargo.toml").display()
    );
    // The worker is built against golem-protocol (the init's argv, the character set).
    println!(
        "cargo:rerun-if-changed={}",
        workspace.join("protocol").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        workspace.join("Cargo.lock").display()
    );
    println!("cargo:rerun-if-env-changed=GOLEM_WORKER_BIN");

    // Packagers may supply a prebuilt static worker instead.
    if let Ok(prebuilt) = env::var("GOLEM_WORKER_BIN") {
        println!("cargo:rustc-env=GOLEM_WORKER_BIN_PATH={prebuilt}");
        return Ok(());
    }

    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"))
        .join("static-worker");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&workspace)
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "golem-worker",
            "--target",
            TARGET,
        ])
        .arg("--target-dir")
        .arg(&target_dir);
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_MAKEFLAGS",
        "MAKEFLAGS",
        "MFLAGS",
    ] {
        cmd.env_remove(var);
    }
    for (key, _) in env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("CARGO_PROFILE_")
            || key.starts_with("CARGO_CFG_")
            || key.starts_with("DEP_")
        {
            cmd.env_remove(&key);
        }
    }
    cmd.env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+crt-static");
    let output = cmd
        .output()
        .map_err(|e| format!("running cargo to build the static golem-worker: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "building the static golem-worker failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let binary = target_dir.join(TARGET).join("release").join("golem-worker");
    println!("cargo:rustc-env=GOLEM_WORKER_BIN_PATH={}", binary.display());
    Ok(())
}
