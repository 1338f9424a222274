//! Podman for the stories that also run through its Docker-compatible service: one private
//! service per test binary, started on first use on a socket of its own, stopping by itself
//! 60 seconds after its last request (`--time 60`), so nothing is left running after the tests.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// `DOCKER_HOST` for the test binary's Podman service, started (again) when it is not
/// answering; `None` when Podman is not installed (a failure instead when `CI` is set).
pub(crate) fn podman_host() -> Option<String> {
    static LOCK: Mutex<()> = Mutex::new(());
    let _held = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if Command::new("podman").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "podman is not installed; CI needs it (.ci/runtimes.sh)"
        );
        eprintln!("skipped: podman is not installed (see .ci/runtimes.sh)");
        return None;
    }
    let socket = socket_path();
    let host = format!("unix://{}", socket.display());
    if !answers(&host) {
        let _ = std::fs::remove_file(&socket);
        // Started detached through a shell that exits at once: the service outlives no test
        // run by more than its idle minute, and is never this process's child to reap.
        let started = Command::new("sh")
            .args([
                "-c",
                "podman system service --time 60 \"$0\" </dev/null >/dev/null 2>&1 &",
                &host,
            ])
            .status()
            .expect("start podman system service");
        assert!(started.success(), "podman system service did not start");
        let up = super::wait_until(Duration::from_secs(20), || answers(&host));
        assert!(up, "podman system service did not answer on {host}");
    }
    Some(host)
}

fn socket_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        // One directory for every test run's socket; the service removes its socket when it
        // stops, so nothing accumulates.
        let dir = std::env::temp_dir().join("golem-test-podman");
        std::fs::create_dir_all(&dir).expect("podman socket dir");
        dir.join(format!("{}.sock", std::process::id()))
    })
    .clone()
}

fn answers(host: &str) -> bool {
    Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .env("DOCKER_HOST", host)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Builds golem-orch's worker image and the hostile image in Podman's own store, once.
pub(crate) fn podman_images(host: &str) {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let out = Command::new(env!("CARGO_BIN_EXE_golem-orch"))
            .args(["image", "build"])
            .env("DOCKER_HOST", host)
            .output()
            .expect("golem-orch image build");
        assert!(
            out.status.success(),
            "image build in podman failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        super::hostile::hostile_image_at(Some(host));
    });
}
