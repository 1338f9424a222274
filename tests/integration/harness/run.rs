//! `golem-orch run --json` as a builder, and what it reports as a typed [`Run`]:
//! `g.run().flags(["--timeout", "2s"]).hostile(["spin"]).expect(Status::Timeout)`.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;

use super::{hostile::hostile_image, Golem};

/// Longest a session of these tests may take before the test gives up on it: a hang guard (a
/// removed timeout would otherwise hang the suite), not a timing assertion.
pub(crate) const HANG_GUARD: Duration = Duration::from_secs(300);

/// A session's final status, the word `run --json` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    /// Its output is in the stage.
    Staged,
    /// Something failed; see `error`.
    Failed,
    /// Killed at its wall-clock limit.
    Timeout,
    /// Killed by the kernel for exceeding its memory limit.
    Oom,
    /// Its output broke the policy's caps as a whole.
    Rejected,
    /// Stopped by Ctrl-C or SIGTERM.
    Cancelled,
}

impl Status {
    /// The exit code `run` gives for this status when the worker itself exited 0.
    pub(crate) fn exit_code(self) -> i32 {
        match self {
            Status::Staged => 0,
            Status::Failed => 1,
            Status::Timeout => 4,
            Status::Oom => 5,
            Status::Rejected => 6,
            Status::Cancelled => 130,
        }
    }
}

/// The fields of `run --json` the stories check, typed.
#[derive(Debug, Clone, Deserialize)]
struct Report {
    session: Option<String>,
    status: Status,
    exit_code: Option<i64>,
    staged: Option<String>,
    #[serde(default)]
    timed_out: bool,
    #[serde(default)]
    oom_killed: bool,
    #[serde(default)]
    files: u64,
    #[serde(default)]
    bytes: u64,
    #[serde(default)]
    rejected: u64,
    error: Option<String>,
    #[serde(default)]
    host_failure: bool,
}

/// What one `golem-orch run --json` printed and returned.
pub(crate) struct Run {
    /// The JSON object on stdout, whole.
    pub(crate) json: Value,
    /// The exit code.
    pub(crate) code: i32,
    /// Everything on stderr.
    pub(crate) stderr: String,
    /// The final status.
    pub(crate) status: Status,
    /// The worker's own exit code, when it exited.
    pub(crate) exit_code: Option<i64>,
    /// The staged commit's id, when one was made.
    pub(crate) staged_id: Option<String>,
    /// Killed at the timeout.
    pub(crate) timed_out: bool,
    /// Killed for memory.
    pub(crate) oom_killed: bool,
    /// Files staged.
    pub(crate) files: u64,
    /// Bytes staged.
    pub(crate) bytes: u64,
    /// Entries refused.
    pub(crate) rejected: u64,
    /// What went wrong, when something did.
    pub(crate) error: Option<String>,
    /// Failed for a reason outside the document (engine, host), not the worker's.
    pub(crate) host_failure: bool,
    session_id: Option<String>,
}

impl Run {
    /// The session id.
    pub(crate) fn session(&self) -> String {
        self.session_id
            .clone()
            .unwrap_or_else(|| panic!("no session in {}", self.json))
    }

    /// The staged commit id; panics when nothing was staged.
    pub(crate) fn staged(&self) -> String {
        self.staged_id
            .clone()
            .unwrap_or_else(|| panic!("nothing staged: {} {}", self.json, self.stderr))
    }

    /// The error text, or "" when there is none.
    pub(crate) fn error(&self) -> &str {
        self.error.as_deref().unwrap_or("")
    }

    /// Asserts the status and the exit code that status gives (see [`Status::exit_code`]).
    pub(crate) fn expect(self, status: Status) -> Run {
        self.expect_exit(status, status.exit_code())
    }

    /// Asserts the status and an explicit exit code (a staged session whose worker failed
    /// exits 3, for one).
    pub(crate) fn expect_exit(self, status: Status, code: i32) -> Run {
        assert_eq!(
            (self.status, self.code),
            (status, code),
            "{} / stderr: {}",
            self.json,
            self.stderr
        );
        self
    }

    /// Asserts the status word and exit code golem-orch reported.
    pub(crate) fn assert_status(&self, status: &str, code: i32) {
        assert_eq!(
            (self.json["status"].as_str(), self.code),
            (Some(status), code),
            "{} / stderr: {}",
            self.json,
            self.stderr
        );
    }

    /// Asserts that stderr is exactly one `golem-orch:` line naming the session and its status.
    pub(crate) fn assert_one_error_line(&self, status: &str) {
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "stderr is not one line: {:?}", self.stderr);
        let short = &self.session()[..12];
        assert!(
            lines[0].starts_with(&format!("golem-orch: session {short} {status}: ")),
            "{:?}",
            lines[0]
        );
    }
}

/// Parses a finished `run --json`; panics when stdout is not its report.
pub(crate) fn parse_run(out: &Output) -> Run {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {} / stderr: {stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let report: Report = serde_json::from_value(json.clone())
        .unwrap_or_else(|e| panic!("not a run report ({e}): {json} / stderr: {stderr}"));
    Run {
        json,
        code: out.status.code().unwrap_or(-1),
        stderr,
        status: report.status,
        exit_code: report.exit_code,
        staged_id: report.staged,
        timed_out: report.timed_out,
        oom_killed: report.oom_killed,
        files: report.files,
        bytes: report.bytes,
        rejected: report.rejected,
        error: report.error,
        host_failure: report.host_failure,
        session_id: report.session,
    }
}

/// Runs a command to completion, killing it (and failing the test) if it outlives `limit`.
pub(crate) fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn golem-orch");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stderr.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "golem-orch still running after {limit:?}; stderr so far: {}",
                String::from_utf8_lossy(&err.join().unwrap_or_default())
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// A `golem-orch run --json` (or another command, see [`Golem::command`]) being put together.
#[must_use = "a run does nothing until `outcome`, `expect`, `output` or `Golem::spawn`"]
pub(crate) struct RunBuilder<'g> {
    g: &'g Golem,
    head: Vec<OsString>,
    flags: Vec<OsString>,
    image: Option<String>,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    unset: Vec<OsString>,
    dir: Option<PathBuf>,
}

impl Golem {
    /// Starts building `golem-orch run --json` in this project and state directory.
    pub(crate) fn run(&self) -> RunBuilder<'_> {
        self.command(["run", "--json"])
    }

    /// Starts building any golem-orch command (`batch --json`, ...), to add environment to or
    /// to [`Golem::spawn`].
    pub(crate) fn command<I, S>(&self, head: I) -> RunBuilder<'_>
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        RunBuilder {
            g: self,
            head: head.into_iter().map(Into::into).collect(),
            flags: Vec::new(),
            image: None,
            args: Vec::new(),
            env: Vec::new(),
            unset: Vec::new(),
            dir: None,
        }
    }
}

impl<'g> RunBuilder<'g> {
    /// Adds flags or inputs before `--` (`--timeout 2s`, `--keep`, an input path).
    pub(crate) fn flags<I, S>(mut self, flags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.flags.extend(flags.into_iter().map(Into::into));
        self
    }

    /// Adds one input file or URL.
    pub(crate) fn input(self, path: impl AsRef<Path>) -> Self {
        self.flags([path.as_ref().as_os_str()])
    }

    /// Runs at this trust level (`untrusted`, `session`, `workspace`, `full`).
    pub(crate) fn level(self, level: &str) -> Self {
        self.flags([format!("--{level}")])
    }

    /// Runs this image (`--image`) instead of the default worker.
    pub(crate) fn image(mut self, image: &str) -> Self {
        self.image = Some(image.to_string());
        self
    }

    /// The arguments after `--`, which replace the image's command.
    pub(crate) fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Runs the hostile test image in `mode` (its arguments).
    pub(crate) fn hostile<I, S>(self, mode: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.image(hostile_image()).args(mode)
    }

    /// Sets an environment variable for golem-orch.
    pub(crate) fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Sets several environment variables for golem-orch.
    pub(crate) fn envs<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<OsString>,
        V: Into<OsString>,
    {
        self.env
            .extend(vars.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Removes an environment variable golem-orch would otherwise inherit.
    pub(crate) fn without_env(mut self, key: impl Into<OsString>) -> Self {
        self.unset.push(key.into());
        self
    }

    /// Runs in `dir` instead of the project directory.
    pub(crate) fn in_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Uses this state directory instead of the test's own (`GOLEM_HOME`).
    pub(crate) fn home(self, home: impl AsRef<Path>) -> Self {
        self.env("GOLEM_HOME", home.as_ref().as_os_str())
    }

    /// Stops golem-orch at a failpoint (`GOLEM_FAILPOINT`).
    pub(crate) fn failpoint(self, point: impl Into<OsString>) -> Self {
        self.env("GOLEM_FAILPOINT", point)
    }

    /// Talks to the engine at this address (`DOCKER_HOST`).
    pub(crate) fn docker_host(self, host: impl Into<OsString>) -> Self {
        self.env("DOCKER_HOST", host)
    }

    /// The command as built: head, flags, `--image IMAGE`, then `-- ARGS` when there are any.
    pub(super) fn build(self) -> (&'g Golem, Command) {
        let mut argv = self.head;
        let runs = argv.first().is_some_and(|c| c == "run" || c == "batch");
        if let (true, Some(rt)) = (runs, &self.g.runtime) {
            argv.push("--runtime".into());
            argv.push(rt.into());
        }
        argv.extend(self.flags);
        if let Some(image) = self.image {
            argv.push("--image".into());
            argv.push(image.into());
        }
        if !self.args.is_empty() {
            argv.push("--".into());
            argv.extend(self.args);
        }
        let mut cmd = self.g.cmd(argv);
        for key in self.unset {
            cmd.env_remove(key);
        }
        for (k, v) in self.env {
            cmd.env(k, v);
        }
        if let Some(dir) = self.dir {
            cmd.current_dir(dir);
        }
        (self.g, cmd)
    }

    /// Runs it to completion under the [`HANG_GUARD`] and returns what it printed, raw.
    pub(crate) fn output(self) -> Output {
        run_bounded(self.build().1, HANG_GUARD)
    }

    /// Runs it to completion under the [`HANG_GUARD`] and parses its report.
    pub(crate) fn outcome(self) -> Run {
        parse_run(&self.output())
    }

    /// Runs it and asserts the status and the exit code that status gives.
    pub(crate) fn expect(self, status: Status) -> Run {
        self.outcome().expect(status)
    }
}
