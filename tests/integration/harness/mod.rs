//! A small harness for user-story tests: each test gets its own project directory and state
//! directory, drives the real `golem-orch` binary against the real engine, and checks that it
//! left nothing behind. What golem-orch creates in the engine (a session's container, and at
//! levels that mount `/workspace` the project's overlay volume) carries the `golem.home` label,
//! which is unique per test, so parallel tests never see each other's.
//!
//! - [`Golem::run`] builds a `golem-orch run --json` and returns a typed [`Run`];
//! - [`Golem::spawn`] starts one in the background, to wait for its worker and signal or kill it;
//! - [`hostile_image`] is the hostile test image, [`git`] the helpers for repositories;
//! - [`attack!`] is the skeleton of an attack story: the host witnessed unchanged and the
//!   engine clean afterwards.

mod evidence;
mod git;
mod hostile;
mod podman;
mod run;
mod spawn;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

pub(crate) use evidence::{
    assert_no_half_stage, assert_untrusted_stage, audit_of, audited_plan, audited_rejections,
    contains, files_containing, half_stages, session_logs, sha256_file, staged_json,
    staged_json_in, tree, untrusted, worker_report, HostWitness,
};
pub(crate) use git::{git, git_with, IGNORE_GOLEM};
pub(crate) use hostile::{docker_build, hostile, hostile_image, stage_files};
pub(crate) use run::{parse_run, run_bounded, Run, RunBuilder, Status, HANG_GUARD};
pub(crate) use spawn::{wait_for_stderr_line, ChildGuard, LabelGuard};

/// The skeleton every attack story shares, so a story holds only its attack and its checks:
/// a fresh [`Golem`] named by the given identifier, a [`HostWitness`] taken after the optional
/// `given { .. }` setup (which may create inputs in the project), and at the end the witness
/// checked unchanged and the engine checked clean of anything labelled with this test's state
/// directory. The body must not `return` early, or the final checks would be skipped.
macro_rules! attack {
    (
        $(#[$meta:meta])*
        fn $name:ident($g:ident) $(given { $($setup:tt)* })? { $($body:tt)* }
    ) => {
        $(#[$meta])*
        #[test]
        fn $name() {
            let $g = $crate::harness::Golem::new();
            $($($setup)*)?
            let witness = $crate::harness::HostWitness::take(&$g);
            $($body)*
            witness.assert_unchanged();
            $g.assert_clean();
        }
    };
}
pub(crate) use attack;

/// [`attack!`] under other runtimes too: `attack_under! { [runsc] /// doc fn name(g) ... }`
/// makes a module `name` with the story under the engine's default runtime (`name::runc`) and
/// under the runtime named (`name::runsc`), whose `golem-orch run`/`batch` commands carry
/// `--runtime` ([`Golem::under`]: where the engine lacks the runtime the story fails when `CI` is
/// set and is skipped with a note otherwise).
macro_rules! attack_under {
    (@one $test:ident, $engine:expr, $g:ident, { $($setup:tt)* }, { $($body:tt)* }) => {
        #[test]
        fn $test() {
            let Some($g) = $engine else {
                return;
            };
            $($setup)*
            let witness = $crate::harness::HostWitness::take(&$g);
            $($body)*
            witness.assert_unchanged();
            $g.assert_clean();
        }
    };
    (
        [$($rt:ident),+]
        $(#[$meta:meta])*
        fn $name:ident($g:ident) $(given { $($setup:tt)* })? { $($body:tt)* }
    ) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            $crate::harness::attack_under!(@one runc, Some($crate::harness::Golem::new()), $g,
                { $($($setup)*)? }, { $($body)* });
            $crate::harness::attack_under!(@each [$($rt),+] $g, { $($($setup)*)? }, { $($body)* });
        }
    };
    (@each [$rt:ident $(, $more:ident)*] $g:ident, $setup:tt, $body:tt) => {
        $crate::harness::attack_under!(@one $rt,
            $crate::harness::Golem::under(stringify!($rt)), $g, $setup, $body);
        $crate::harness::attack_under!(@each [$($more),*] $g, $setup, $body);
    };
    (@each [] $g:ident, $setup:tt, $body:tt) => {};
}
pub(crate) use attack_under;

/// One isolated user of golem-orch: a project directory and a state directory.
pub(crate) struct Golem {
    /// The project directory commands run in.
    pub(crate) project: tempfile::TempDir,
    /// The state directory (`--home`), canonical so it matches the label golem-orch writes.
    pub(crate) home: PathBuf,
    _home_dir: tempfile::TempDir,
    /// The OCI runtime every `run`/`batch` of this user asks for (`--runtime`), when not the
    /// engine's default.
    pub(crate) runtime: Option<String>,
    /// The engine this user's golem-orch talks to (`DOCKER_HOST`), when not the default one:
    /// Podman's service for `attack_under! { [.., podman] }`.
    pub(crate) docker_host: Option<String>,
}

impl Golem {
    /// A fresh project and state directory; makes sure the worker image exists first.
    pub(crate) fn new() -> Golem {
        worker_image();
        let project = tempfile::tempdir().expect("project dir");
        let home_dir = tempfile::tempdir().expect("home dir");
        let home = home_dir.path().canonicalize().expect("canonical home");
        Golem {
            project,
            home,
            _home_dir: home_dir,
            runtime: None,
            docker_host: None,
        }
    }

    /// A user whose sessions run under `runtime`, or `None` (with a note) where the engine does
    /// not have it. With `CI` set a missing runtime fails the test instead: CI installs it
    /// (`.ci/runtimes.sh`), so its absence there is a broken setup, not a reason to skip.
    pub(crate) fn under(runtime: &str) -> Option<Golem> {
        if runtime == "podman" {
            let host = podman::podman_host()?;
            podman::podman_images(&host);
            let mut g = Golem::new();
            engine_of(&g.home, Some(&host));
            g.docker_host = Some(host);
            return Some(g);
        }
        let registered = docker_lines(&["info", "--format", "{{json .Runtimes}}"])
            .join("")
            .contains(&format!("\"{runtime}\""));
        if !registered {
            assert!(
                std::env::var_os("CI").is_none(),
                "the {runtime} runtime is not registered with the engine; CI needs it (.ci/runtimes.sh)"
            );
            eprintln!("skipped: the {runtime} runtime is not registered (see .ci/runtimes.sh)");
            return None;
        }
        let mut g = Golem::new();
        g.runtime = Some(runtime.to_string());
        Some(g)
    }

    /// A `golem-orch` command in the project directory with this state directory and a clean environment.
    pub(crate) fn cmd<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_golem-orch"));
        if let Some(host) = &self.docker_host {
            cmd.env("DOCKER_HOST", host);
        }
        cmd.current_dir(self.project.path())
            .env("GOLEM_HOME", &self.home)
            .env_remove("GOLEM_POLICY_DIR")
            .env("NO_COLOR", "1")
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs a command to completion.
    pub(crate) fn output<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.cmd(args).output().expect("spawn golem-orch")
    }

    /// Runs a command that must print one JSON value; returns it with the exit code.
    pub(crate) fn json<I, S>(&self, args: I) -> (Value, i32)
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
    pub(crate) fn file(&self, name: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let path = self.project.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&path, content).expect("write input");
        path
    }

    /// The directory holding a staged commit's files.
    pub(crate) fn staged_files(&self, staged: &str) -> PathBuf {
        self.home.join("staged").join(staged).join("files")
    }

    /// Every audit record, parsed.
    pub(crate) fn audit(&self) -> Vec<Value> {
        let (v, code) = self.json(["audit", "--json"]);
        assert_eq!(code, 0);
        v.as_array().cloned().unwrap_or_default()
    }

    /// The session records `sessions --json` lists.
    pub(crate) fn sessions(&self) -> Vec<Value> {
        let (v, code) = self.json(["sessions", "--json"]);
        assert_eq!(code, 0, "{v}");
        v.as_array().cloned().unwrap_or_default()
    }

    /// The staged commits `staged --json` lists.
    pub(crate) fn staged(&self) -> Vec<Value> {
        let (v, code) = self.json(["staged", "--json"]);
        assert_eq!(code, 0, "{v}");
        v.as_array().cloned().unwrap_or_default()
    }

    /// Whether `audit --verify` finds the hash chain intact.
    pub(crate) fn audit_verifies(&self) -> bool {
        self.audit_verifies_in(&self.home)
    }

    /// Whether `audit --verify` finds the hash chain of the state directory `home` intact.
    pub(crate) fn audit_verifies_in(&self, home: &Path) -> bool {
        self.command(["audit", "--verify"])
            .home(home)
            .output()
            .status
            .success()
    }

    /// What of this state directory is still in the engine (see [`engine_resources`]).
    pub(crate) fn leftovers(&self) -> Vec<String> {
        engine_resources(&self.home)
    }

    /// Worker containers of this test running right now, as the engine sees them.
    pub(crate) fn running_workers(&self) -> usize {
        let label = format!("label=golem.home={}", self.home.display());
        docker_lines_at(
            self.docker_host.as_deref(),
            &[
                "ps",
                "-q",
                "--filter",
                &label,
                "--filter",
                "label=golem.role=worker",
            ],
        )
        .len()
    }

    /// Asserts the engine holds nothing of this test.
    pub(crate) fn assert_clean(&self) {
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

/// Containers and volumes labelled with the state directory `home`: sessions' containers and
/// the `/workspace` overlay volume, which the last session of a project using it removes. (The
/// output is a tmpfs, never a volume.)
pub(crate) fn engine_resources(home: &Path) -> Vec<String> {
    let host = engine_of(home, None);
    let label = format!("label=golem.home={}", home.display());
    let mut found = docker_lines_at(host.as_deref(), &["ps", "-aq", "--filter", &label]);
    found.extend(docker_lines_at(
        host.as_deref(),
        &["volume", "ls", "-q", "--filter", &label],
    ));
    found
}

/// The engine a state directory's sessions run in (`DOCKER_HOST`), recorded when `set`; so the
/// engine checks that take only a state directory look in the right engine.
fn engine_of(home: &Path, set: Option<&str>) -> Option<String> {
    static HOSTS: std::sync::Mutex<Vec<(PathBuf, String)>> = std::sync::Mutex::new(Vec::new());
    let mut hosts = HOSTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(h) = set {
        hosts.push((home.to_path_buf(), h.to_string()));
    }
    hosts
        .iter()
        .find(|(p, _)| p == home)
        .map(|(_, h)| h.clone())
}

/// Force-removes everything labelled with `home` (cleanup after a failing test).
pub(crate) fn remove_engine_resources(home: &Path) {
    let host = engine_of(home, None);
    let docker = |args: &[&str]| {
        let mut cmd = Command::new("docker");
        if let Some(h) = &host {
            cmd.env("DOCKER_HOST", h);
        }
        let _ = cmd.args(args).output();
    };
    let label = format!("label=golem.home={}", home.display());
    for id in docker_lines_at(host.as_deref(), &["ps", "-aq", "--filter", &label]) {
        docker(&["rm", "-fv", &id]);
    }
    for v in docker_lines_at(host.as_deref(), &["volume", "ls", "-q", "--filter", &label]) {
        docker(&["volume", "rm", "-f", &v]);
    }
}

/// Runs the docker CLI and returns its non-empty output lines.
pub(crate) fn docker_lines(args: &[&str]) -> Vec<String> {
    docker_lines_at(None, args)
}

/// [`docker_lines`] against the engine at `host` (`DOCKER_HOST`; `None`: the default).
pub(crate) fn docker_lines_at(host: Option<&str>, args: &[&str]) -> Vec<String> {
    let mut cmd = Command::new("docker");
    if let Some(h) = host {
        cmd.env("DOCKER_HOST", h);
    }
    let out = cmd.args(args).output().expect("docker CLI");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// Builds the worker image once per test binary, so parallel tests do not all build it.
pub(crate) fn worker_image() {
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

/// Polls until `f` returns true or the deadline passes (for waiting on the engine, never for timing).
pub(crate) fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// Runs `chmod ARGS PATH`; fails the test if it fails (stories that take the host's file modes
/// out of the way, so that only golem-orch's mounts stand between a worker and a path).
pub(crate) fn chmod(args: &[&str], path: &Path) {
    let status = Command::new("chmod")
        .args(args)
        .arg(path)
        .status()
        .expect("chmod");
    assert!(status.success(), "chmod {args:?} {}", path.display());
}

/// Everything a finished command wrote to stderr, as text.
pub(crate) fn stderr_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
