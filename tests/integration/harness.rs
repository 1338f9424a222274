//! A small harness for user-story tests: each test gets its own project directory and state
//! directory, drives the real `golem-orch` binary against the real engine, and checks that it
//! left nothing behind. Containers and volumes are found by the `golem.home` label, which is
//! unique per test, so parallel tests never see each other's resources.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The repository of the image built from `tests/hostile-worker`, used to attack the sandbox.
/// Its tag is the binary's content hash, so checkouts testing different hostile workers on one
/// engine never replace each other's image.
pub const HOSTILE_REPOSITORY: &str = "golem-hostile";

/// One isolated user of golem-orch: a project directory and a state directory.
pub struct Golem {
    /// The project directory commands run in.
    pub project: tempfile::TempDir,
    /// The state directory (`--home`), canonical so it matches the label golem-orch writes.
    pub home: PathBuf,
    _home_dir: tempfile::TempDir,
}

impl Golem {
    /// A fresh project and state directory; makes sure the worker image exists first.
    pub fn new() -> Golem {
        worker_image();
        let project = tempfile::tempdir().expect("project dir");
        let home_dir = tempfile::tempdir().expect("home dir");
        let home = home_dir.path().canonicalize().expect("canonical home");
        Golem {
            project,
            home,
            _home_dir: home_dir,
        }
    }

    /// A `golem-orch` command in the project directory with this state directory and a clean environment.
    pub fn cmd<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_golem-orch"));
        cmd.current_dir(self.project.path())
            .env("GOLEM_HOME", &self.home)
            .env_remove("GOLEM_POLICY_DIR")
            .env("NO_COLOR", "1")
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs a command to completion.
    pub fn output<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.cmd(args).output().expect("spawn golem-orch")
    }

    /// Runs a command that must print one JSON value; returns it with the exit code.
    pub fn json<I, S>(&self, args: I) -> (Value, i32)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let out = self.output(args);
        let value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\nstdout: {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (value, out.status.code().unwrap_or(-1))
    }

    /// Writes a file into the project directory and returns its path.
    pub fn file(&self, name: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let path = self.project.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&path, content).expect("write input");
        path
    }

    /// Makes the project a git repository with one commit, "initial", holding `files`; `config`
    /// are extra `-c` settings for every git call.
    pub fn git_repo(&self, config: &[&str], files: &[(&str, &str)]) {
        let dir = self.project.path();
        git_with(dir, config, &["init", "-q"]);
        for (name, content) in files {
            self.file(name, content);
        }
        git_with(dir, config, &["add", "-A"]);
        git_with(dir, config, &["commit", "-q", "-m", "initial"]);
    }

    /// The directory holding a staged commit's files.
    pub fn staged_files(&self, staged: &str) -> PathBuf {
        self.home.join("staged").join(staged).join("files")
    }

    /// Every audit record, parsed.
    pub fn audit(&self) -> Vec<Value> {
        let (v, code) = self.json(["audit", "--json"]);
        assert_eq!(code, 0);
        v.as_array().cloned().unwrap_or_default()
    }

    /// Containers and volumes of this state directory still in the engine.
    pub fn leftovers(&self) -> Vec<String> {
        engine_resources(&self.home)
    }

    /// Worker containers of this test running right now, as the engine sees them.
    pub fn running_workers(&self) -> usize {
        let label = format!("label=golem.home={}", self.home.display());
        docker_lines(&[
            "ps",
            "-q",
            "--filter",
            &label,
            "--filter",
            "label=golem.role=worker",
        ])
        .len()
    }

    /// Asserts the engine holds nothing of this test.
    pub fn assert_clean(&self) {
        let left = self.leftovers();
        assert!(
            left.is_empty(),
            "golem-orch left resources behind: {left:?}"
        );
    }
}

impl Drop for Golem {
    /// Removes anything a failing test left, so one failure does not cascade into the engine.
    fn drop(&mut self) {
        remove_engine_resources(&self.home);
    }
}

/// Containers and volumes labelled with the state directory `home`.
pub fn engine_resources(home: &Path) -> Vec<String> {
    let label = format!("label=golem.home={}", home.display());
    let mut found = docker_lines(&["ps", "-aq", "--filter", &label]);
    found.extend(docker_lines(&["volume", "ls", "-q", "--filter", &label]));
    found
}

/// Force-removes everything labelled with `home` (cleanup after a failing test).
pub fn remove_engine_resources(home: &Path) {
    let label = format!("label=golem.home={}", home.display());
    for id in docker_lines(&["ps", "-aq", "--filter", &label]) {
        let _ = Command::new("docker").args(["rm", "-fv", &id]).output();
    }
    for v in docker_lines(&["volume", "ls", "-q", "--filter", &label]) {
        let _ = Command::new("docker")
            .args(["volume", "rm", "-f", &v])
            .output();
    }
}

/// Runs the docker CLI and returns its non-empty output lines.
pub fn docker_lines(args: &[&str]) -> Vec<String> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// Builds the worker image once per test binary, so parallel tests do not all build it.
pub fn worker_image() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let out = Command::new(env!("CARGO_BIN_EXE_golem-orch"))
            .args(["image", "build"])
            .output()
            .expect("golem-orch image build");
        assert!(
            out.status.success(),
            "image build failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// Builds `tests/hostile-worker` statically and wraps it in a scratch image, once per test binary.
pub fn hostile_image() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace").to_path_buf();
        let target_dir = workspace.join("target").join("static-worker");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .current_dir(&workspace)
            .args(["build", "--release", "--locked", "-p", "hostile-worker", "--target", "x86_64-unknown-linux-gnu", "--target-dir"])
            .arg(&target_dir)
            .env_remove("RUSTFLAGS")
            .env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+crt-static")
            .output()
            .expect("cargo build hostile-worker");
        assert!(out.status.success(), "building hostile-worker failed: {}", String::from_utf8_lossy(&out.stderr));
        let context = tempfile::tempdir().expect("context dir");
        let binary = std::fs::read(target_dir.join("x86_64-unknown-linux-gnu/release/hostile-worker"))
            .expect("read hostile-worker");
        let copy = context.path().join("hostile-worker");
        std::fs::write(&copy, &binary).expect("copy hostile-worker");
        std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("make hostile-worker executable");
        let tag = format!("{HOSTILE_REPOSITORY}:{}", content_tag(&binary));
        std::fs::write(
            context.path().join("Dockerfile"),
            "FROM scratch\nCOPY hostile-worker /hostile-worker\nUSER 65534:65534\nENTRYPOINT [\"/hostile-worker\"]\n",
        )
        .expect("Dockerfile");
        docker_build(&tag, context.path());
        tag
    })
}

/// Builds the image `tag` from the Dockerfile in `context` with the classic builder, which uses
/// a local `FROM` image (such as [`hostile_image`]) without trying to pull it; panics on failure.
pub fn docker_build(tag: &str, context: &Path) {
    let out = Command::new("docker")
        .args(["build", "-q", "-t", tag])
        .arg(context)
        .env("DOCKER_BUILDKIT", "0")
        .output()
        .expect("docker build");
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

/// Polls until `f` returns true or the deadline passes (for waiting on the engine, never for timing).
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// The first line of stderr, for one-line error checks.
pub fn stderr_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A `.gitignore` that keeps the project's `.golem/` directory out of commits.
pub const IGNORE_GOLEM: (&str, &str) = (".gitignore", ".golem/\n");

/// Runs git in `dir` with a fixed identity and returns trimmed stdout; panics on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    git_with(dir, &[], args)
}

/// [`git`] with extra `-c` settings after the fixed identity.
pub fn git_with(dir: &Path, config: &[&str], args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "user.name=Person",
            "-c",
            "user.email=person@example.org",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(config)
        .args(args)
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {}", stderr_text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
