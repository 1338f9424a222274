//! The hostile test image: `tests/hostile-worker`, built statically into a scratch image, which
//! tries one attack per mode (`probe`, `try-write`, `forkbomb`, ...).

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use super::{run::Run, stderr_text, Golem};

/// The repository of the image built from `tests/hostile-worker`, used to attack the sandbox.
/// Its tag is the binary's content hash, so checkouts testing different hostile workers on one
/// engine never replace each other's image.
pub(crate) const HOSTILE_REPOSITORY: &str = "golem-hostile";

/// `golem-orch run --json [extra] --image <hostile image> -- MODE...`, with a hang guard: the
/// shorthand for `g.run().flags(extra).hostile(mode).outcome()`.
pub(crate) fn hostile(g: &Golem, extra: &[&str], mode: &[&str]) -> Run {
    g.run().flags(extra).hostile(mode).outcome()
}

/// A hostile worker stages exactly `files` (path, bytes); returns the staged id.
pub(crate) fn stage_files(g: &Golem, files: &[(&str, &[u8])]) -> String {
    let mut mode = vec!["files".to_string()];
    for (path, bytes) in files {
        mode.push((*path).to_string());
        mode.push(bytes.iter().map(|b| format!("{b:02x}")).collect());
    }
    let mode: Vec<&str> = mode.iter().map(String::as_str).collect();
    let run = hostile(g, &[], &mode);
    assert_eq!(run.code, 0, "{} {}", run.json, run.stderr);
    run.staged()
}

/// Builds `tests/hostile-worker` statically and wraps it in a scratch image, once per test
/// binary; returns its tag.
pub(crate) fn hostile_image() -> &'static str {
    hostile_image_at(None)
}

/// [`hostile_image`] in the engine at `host` (`DOCKER_HOST`; `None`: the default engine), once
/// per engine and test binary. The tag is the same everywhere.
pub(crate) fn hostile_image_at(host: Option<&str>) -> &'static str {
    static BINARY: OnceLock<(Vec<u8>, String)> = OnceLock::new();
    static BUILT: std::sync::Mutex<Vec<Option<String>>> = std::sync::Mutex::new(Vec::new());
    let (binary, tag) = BINARY.get_or_init(|| {
        let binary = build_static_hostile_worker();
        let tag = format!("{HOSTILE_REPOSITORY}:{}", content_tag(&binary));
        (binary, tag)
    });
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let key = host.map(String::from);
    if !built.contains(&key) {
        let context = tempfile::tempdir().expect("context dir");
        let copy = context.path().join("hostile-worker");
        std::fs::write(&copy, binary).expect("copy hostile-worker");
        std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("make hostile-worker executable");
        std::fs::write(
            context.path().join("Dockerfile"),
            "FROM scratch\n\
             COPY hostile-worker /hostile-worker\n\
             USER 65534:65534\n\
             ENTRYPOINT [\"/hostile-worker\"]\n",
        )
        .expect("Dockerfile");
        docker_build_at(host, tag, context.path());
        built.push(key);
    }
    tag
}

/// Builds the hostile worker as a static binary (a scratch image has no libc) and returns it.
fn build_static_hostile_worker() -> Vec<u8> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf();
    let target_dir = workspace.join("target").join("static-worker");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(&workspace)
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "hostile-worker",
            "--target",
            "x86_64-unknown-linux-gnu",
            "--target-dir",
        ])
        .arg(&target_dir)
        .env_remove("RUSTFLAGS")
        .env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+crt-static")
        .output()
        .expect("cargo build hostile-worker");
    assert!(
        out.status.success(),
        "building hostile-worker failed: {}",
        stderr_text(&out)
    );
    std::fs::read(target_dir.join("x86_64-unknown-linux-gnu/release/hostile-worker"))
        .expect("read hostile-worker")
}

/// Builds the image `tag` from the Dockerfile in `context` with the classic builder, which uses
/// a local `FROM` image (such as [`hostile_image`]) without trying to pull it; panics on failure.
pub(crate) fn docker_build(tag: &str, context: &Path) {
    docker_build_at(None, tag, context);
}

/// [`docker_build`] in the engine at `host` (`DOCKER_HOST`).
fn docker_build_at(host: Option<&str>, tag: &str, context: &Path) {
    let mut cmd = Command::new("docker");
    cmd.args(["build", "-q", "-t", tag])
        .arg(context)
        .env("DOCKER_BUILDKIT", "0");
    if let Some(h) = host {
        cmd.env("DOCKER_HOST", h);
    }
    let out = cmd.output().expect("docker build");
    assert!(
        out.status.success(),
        "docker build {tag}: {}",
        stderr_text(&out)
    );
}

/// A short, stable tag for `bytes` (FNV-1a, 64 bits): enough to tell builds apart on one engine.
fn content_tag(bytes: &[u8]) -> String {
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("test-{hash:016x}")
}
