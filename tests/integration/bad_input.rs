//! Bad input: every command with missing, malformed or hostile arguments.
//!
//! The contract (`cli::main`): a mistake is one `golem-orch: ...` line on stderr and exit 1;
//! a usage mistake clap catches is clap's usage message and exit 2; `doctor` reports its checks
//! on stdout and exits 1. Never a panic, a backtrace or a second line, whatever the argument
//! holds (newlines, `..`, a file where a directory belongs, a URL that answers badly).

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::harness::{stderr_text, Golem, Status};

/// What a bad invocation must produce.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Exit 1 and exactly one stderr line starting `golem-orch:` that contains this text.
    Line(&'static str),
    /// clap's usage error: exit 2, `error:` first, a usage line.
    Usage,
    /// `doctor`: exit 1, a `FAIL` line on stdout naming this check, nothing on stderr.
    Report(&'static str),
}

struct Case {
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    expect: Expect,
}

fn case(args: &[&str], expect: Expect) -> Case {
    Case {
        args: args.iter().map(|a| a.to_string()).collect(),
        env: Vec::new(),
        expect,
    }
}

fn case_env(args: &[&str], env: &[(&'static str, &str)], expect: Expect) -> Case {
    Case {
        env: env.iter().map(|(k, v)| (*k, v.to_string())).collect(),
        ..case(args, expect)
    }
}

/// Proxy settings of the machine running the tests, which would route the download cases
/// through a proxy instead of to the local server.
const PROXY_VARIABLES: [&str; 6] = [
    "http_proxy",
    "https_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "all_proxy",
];

/// Runs every case (under the hang guard) and collects every violation, so one run reports
/// them all.
fn check(g: &Golem, cwd: &Path, cases: &[Case]) -> Vec<String> {
    let mut problems = Vec::new();
    for c in cases {
        let mut run = g.command(&c.args).in_dir(cwd).env("RUST_BACKTRACE", "1");
        for var in PROXY_VARIABLES {
            run = run.without_env(var);
        }
        let out = run
            .envs(c.env.iter().map(|(k, v)| (*k, v.as_str())))
            .output();
        let code = out.status.code();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let shown = format!("{:?}", c.args);
        if std::env::var_os("SHOW_BAD_INPUT").is_some() {
            eprintln!("SHOW {shown} -> {code:?} {err:?}");
        }
        let mut fail = |why: String| problems.push(format!("{shown}: {why}\n  stderr: {err:?}"));
        for bad in ["panicked", "RUST_BACKTRACE", "stack backtrace"] {
            if err.contains(bad) || stdout.contains(bad) {
                fail(format!("contains {bad:?}"));
            }
        }
        match c.expect {
            Expect::Line(needle) => {
                let lines: Vec<&str> = err.lines().collect();
                if code != Some(1) {
                    fail(format!("exit code {code:?}, want 1"));
                }
                if lines.len() != 1 {
                    fail(format!("{} stderr lines, want 1", lines.len()));
                }
                if !lines.first().is_some_and(|l| l.starts_with("golem-orch: ")) {
                    fail("stderr does not start with `golem-orch: `".into());
                }
                if !err.contains(needle) {
                    fail(format!("stderr lacks {needle:?}"));
                }
            }
            Expect::Usage => {
                if code != Some(2) {
                    fail(format!("exit code {code:?}, want 2 (usage)"));
                }
                if !err.starts_with("error: ")
                    || !(err.contains("Usage: golem-orch") || err.contains("try '--help'"))
                {
                    fail("not clap's usage error".into());
                }
            }
            Expect::Report(check) => {
                if code != Some(1) {
                    fail(format!("exit code {code:?}, want 1"));
                }
                if !stdout
                    .lines()
                    .any(|l| l.starts_with("FAIL") && l.contains(check))
                {
                    fail(format!("no FAIL line for {check:?} on stdout: {stdout:?}"));
                }
                if !err.is_empty() {
                    fail("doctor wrote to stderr".into());
                }
            }
        }
    }
    problems
}

/// A tiny HTTP/1.1 server on 127.0.0.1 for download failures, serving until dropped.
struct Server {
    base: String,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let base = format!("http://{}", listener.local_addr().unwrap());
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        std::thread::spawn(move || respond(conn));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Server {
            base,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers one request according to its path.
fn respond(mut conn: TcpStream) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    let mut request = String::new();
    if reader.read_line(&mut request).is_err() {
        return;
    }
    loop {
        let mut header = String::new();
        match reader.read_line(&mut header) {
            Ok(0) | Err(_) => return,
            Ok(_) if header == "\r\n" => break,
            Ok(_) => {}
        }
    }
    let path = request.split_whitespace().nth(1).unwrap_or("/").to_string();
    let body = vec![b'a'; 100_000];
    let _ = match path.as_str() {
        "/big" => conn
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\nConnection: close\r\n\r\n")
            .and_then(|()| conn.write_all(&body)),
        "/chunked" => {
            let mut r = conn.write_all(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
            );
            for _ in 0..100 {
                r = r.and_then(|()| conn.write_all(format!("{:x}\r\n", 1000).as_bytes()));
                r = r.and_then(|()| conn.write_all(&body[..1000]));
                r = r.and_then(|()| conn.write_all(b"\r\n"));
            }
            r.and_then(|()| conn.write_all(b"0\r\n\r\n"))
        }
        "/loop" => conn.write_all(
            b"HTTP/1.1 302 Found\r\nLocation: /loop\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        ),
        "/ok.txt" => conn.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n",
        ),
        _ => conn.write_all(
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot found",
        ),
    };
}

/// A directory with four policy files, `untrusted.yaml` holding a typo.
fn policy_dir_with_typo(root: &Path) -> PathBuf {
    let dir = root.join("policies-typo");
    std::fs::create_dir_all(&dir).unwrap();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    for level in ["untrusted", "session", "workspace", "full"] {
        let text = std::fs::read_to_string(shipped.join(format!("{level}.yaml"))).unwrap();
        let text = if level == "untrusted" {
            text.replace("  pids: 64", "  pidz: 64")
        } else {
            text
        };
        std::fs::write(dir.join(format!("{level}.yaml")), text).unwrap();
    }
    dir
}

#[test]
fn every_command_refuses_bad_input_with_one_clear_line() {
    let g = Golem::new();
    let server = Server::start();
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let root = g.project.path().to_path_buf();
    // A project that is a git repository with one commit, and two staged commits.
    g.git_repo(
        &[],
        &[(".gitignore", "/.golem/\n"), ("README.md", "project\n")],
    );
    let stage = || {
        g.run()
            .hostile(["exit", "0"])
            .expect(Status::Staged)
            .staged()
    };
    let (s, d) = (stage(), stage());
    assert!(g.output(["discard", &d, "--yes"]).status.success());

    let input = g.file("a.txt", "x").display().to_string();
    let newline_file = g.file("bad\nname.txt", "x").display().to_string();
    let a_file = g.file("not-a-dir", "x").display().to_string();
    let typo = policy_dir_with_typo(&root).display().to_string();
    let plain_dir = tempfile::tempdir().unwrap();
    let plain = plain_dir.path().display().to_string();
    let repo = root.display().to_string();
    let missing_dir = format!("{root}/no/such/dir", root = root.display());
    let dead_engine = "unix:///nonexistent/docker.sock";
    let (i, s, d) = (input.as_str(), s.as_str(), d.as_str());
    let url = |p: &str| server.url(p);
    let (missing_url, big_url, chunked_url, loop_url) =
        (url("/missing"), url("/big"), url("/chunked"), url("/loop"));
    let closed_url = format!("http://127.0.0.1:{closed}/x");

    use Expect::{Line, Report, Usage};
    let cases = vec![
        // ---- run
        case(&["run", "--trust", "godmode", i], Usage),
        case(&["run", "--trust", "", i], Usage),
        case(&["run", "--trust", "full", "--untrusted", i], Usage),
        case(&["run", "--policy-dir", &typo, i], Line("pidz")),
        case(
            &["run", "--policy-dir", &missing_dir, i],
            Line("cannot read"),
        ),
        case(&["run", "--policy-dir", &a_file, i], Line("cannot read")),
        case(&["run", &missing_dir], Line("no such file or directory")),
        case(&["run", "/definitely/not/here.pdf"], Line("no such file")),
        case(&["run", "/dev/null"], Line("not a regular file")),
        case(&["run", &newline_file], Line("control characters")),
        case(&["run", "no\nsuch\nfile"], Line("no such file")),
        case(
            &["run", "--allow-private-urls", &closed_url],
            Line("download http://127.0.0.1"),
        ),
        case(&["run", &closed_url], Line("--allow-private-urls")),
        case(
            &["run", "--allow-private-urls", &missing_url],
            Line("server answered 404"),
        ),
        case(
            &[
                "run",
                "--allow-private-urls",
                "--max-download",
                "1KiB",
                &big_url,
            ],
            Line("larger than the 1024-byte cap"),
        ),
        case(
            &[
                "run",
                "--allow-private-urls",
                "--max-download",
                "1KiB",
                &chunked_url,
            ],
            Line("larger than the 1024-byte cap"),
        ),
        case(
            &["run", "--allow-private-urls", &loop_url],
            Line("too many redirects"),
        ),
        case(&["run", "ftp://example.org/x"], Line("only http and https")),
        case(&["run", "http://"], Line("only http and https")),
        case(&["run", "--memory", "lots", i], Usage),
        case(&["run", "--memory", "1k", i], Line("at least 6MiB")),
        case(&["run", "--memory", "64g", i], Line("may only narrow")),
        case(&["run", "--timeout", "-5s", i], Usage),
        case(&["run", "--timeout", "2h", i], Line("may only narrow")),
        case(&["run", "--max-download", "a lot", i], Usage),
        case(
            &["run", "--worker", "nonexistent", i],
            Line("no worker named"),
        ),
        case(
            &["run", "--worker", "../../etc/passwd", i],
            Line("no worker named"),
        ),
        case(
            &["run", "--allow-network", i],
            Line("does not allow a network"),
        ),
        case(&["run"], Line("nothing to process")),
        case(
            &["run", i, "--", "extra"],
            Line("arguments after -- are for --image"),
        ),
        case(
            &["run", "--image", "no-such-image:here", i],
            Line("never pulls"),
        ),
        case(&["run", "--image", "../../etc", i], Line("golem-orch: ")),
        case(&["run", "--home", &a_file, i], Line("state directory")),
        case(&["run", "--frobnicate", i], Usage),
        case_env(
            &["run", i],
            &[("DOCKER_HOST", dead_engine)],
            Line("cannot reach the Docker Engine"),
        ),
        // ---- batch
        case(&["batch"], Line("nothing to process")),
        case(&["batch", "--trust", "godmode", i], Usage),
        case(&["batch", "--jobs", "lots", i], Usage),
        case(&["batch", &missing_dir], Line("golem-orch: ")),
        case(&["batch", "--from", &missing_dir], Line("golem-orch: ")),
        case(&["batch", "--resume", "../../etc"], Line("golem-orch: ")),
        case(&["batch", "--resume", "zzzz"], Line("golem-orch: ")),
        case(&["batch", "--resume", "abcd", i], Usage),
        case(&["batch", "--policy-dir", &typo, i], Line("pidz")),
        case(&["batch", "--memory", "64g", i], Line("may only narrow")),
        case(&["batch", "--home", &a_file, i], Line("state directory")),
        case(
            &["batch", "ftp://example.org/x"],
            Line("only http and https"),
        ),
        case_env(
            &["batch", i],
            &[("DOCKER_HOST", dead_engine)],
            Line("cannot reach the Docker Engine"),
        ),
        // ---- sessions
        case(&["sessions", "--home", &a_file], Line("state directory")),
        case(&["sessions", "extra"], Usage),
        // ---- logs
        case(&["logs"], Usage),
        case(&["logs", "../../etc"], Line("no session matches")),
        case(&["logs", "zzzz"], Line("no session matches")),
        case(&["logs", "ab\ncd"], Line("no session matches")),
        case(
            &["logs", "--home", &a_file, "abcd"],
            Line("state directory"),
        ),
        // ---- staged
        case(&["staged", "--home", &a_file], Line("state directory")),
        case(&["staged", "--json", "extra"], Usage),
        // ---- show
        case(&["show"], Usage),
        case(&["show", "../../etc"], Line("no staged commit matches")),
        case(&["show", "ffffffffffff"], Line("no staged commit matches")),
        case(&["show", "ab\ncd\nef"], Line("no staged commit matches")),
        // ---- diff
        case(&["diff"], Usage),
        case(
            &["diff", "../../etc", "--repo", &repo],
            Line("no staged commit matches"),
        ),
        case(&["diff", s, "--repo", &missing_dir], Line("golem-orch: ")),
        case(&["diff", s, "--repo", &plain], Line("golem-orch: ")),
        case(
            &["diff", s, "--repo", &repo, "--prefix", "../../etc"],
            Line("golem-orch: "),
        ),
        case(
            &["diff", s, "--repo", &repo, "--prefix", "/etc"],
            Line("golem-orch: "),
        ),
        case(
            &["diff", s, "--repo", &repo, "--branch", "bad..branch"],
            Line("golem-orch: "),
        ),
        case(
            &["diff", s, "--repo", &repo, "--branch", "a\nb"],
            Line("golem-orch: "),
        ),
        case(
            &["diff", s, "--repo", &repo, "--only", "no/such/file"],
            Line("golem-orch: "),
        ),
        // ---- push
        case(&["push"], Usage),
        case(
            &["push", "../../etc", "--yes", "--repo", &repo],
            Line("no staged commit matches"),
        ),
        case(
            &["push", s, "--yes", "--repo", &missing_dir],
            Line("golem-orch: "),
        ),
        case(
            &["push", s, "--yes", "--repo", &plain],
            Line("golem-orch: "),
        ),
        case(
            &[
                "push",
                s,
                "--yes",
                "--repo",
                &repo,
                "--prefix",
                "../outside",
            ],
            Line("golem-orch: "),
        ),
        case(
            &[
                "push",
                s,
                "--yes",
                "--repo",
                &repo,
                "--prefix",
                ".git/hooks",
            ],
            Line("golem-orch: "),
        ),
        case(
            &["push", s, "--yes", "--repo", &repo, "--branch", "main"],
            Line("golem-orch: "),
        ),
        case(
            &["push", s, "--yes", "--repo", &repo, "--branch", "x\ny"],
            Line("golem-orch: "),
        ),
        case(
            &["push", s, "--yes", "--repo", &repo, "--only", "a\nb"],
            Line("golem-orch: "),
        ),
        case(
            &["push", d, "--yes", "--repo", &repo],
            Line("already discarded"),
        ),
        // ---- discard
        case(&["discard"], Usage),
        case(&["discard", s], Line("needs a person's consent")),
        case(
            &["discard", "../../etc", "--yes"],
            Line("no staged commit matches"),
        ),
        case(&["discard", d, "--yes"], Line("already discarded")),
        // ---- workers
        case(&["workers", "extra"], Usage),
        // ---- image
        case(&["image"], Usage),
        case(&["image", "build", "--nope"], Usage),
        case_env(
            &["image", "build"],
            &[("DOCKER_HOST", dead_engine)],
            Line("cannot reach the Docker Engine"),
        ),
        // ---- policy
        case(&["policy"], Usage),
        case(&["policy", "show"], Usage),
        case(&["policy", "show", "superuser"], Usage),
        case(
            &["policy", "show", "untrusted", "--policy-dir", &typo],
            Line("pidz"),
        ),
        case(
            &["policy", "show", "untrusted", "--policy-dir", &missing_dir],
            Line("cannot read"),
        ),
        case_env(
            &["policy", "show", "untrusted"],
            &[("GOLEM_POLICY_DIR", &typo)],
            Line("pidz"),
        ),
        // ---- doctor
        case(
            &["doctor", "--policy-dir", &missing_dir],
            Report("policy untrusted"),
        ),
        case(
            &["doctor", "--policy-dir", &typo],
            Report("policy untrusted"),
        ),
        case(&["doctor", "--home", &a_file], Report("state")),
        case_env(
            &["doctor"],
            &[("DOCKER_HOST", dead_engine)],
            Report("engine"),
        ),
        // ---- gc
        case(&["gc", "extra"], Usage),
        case(&["gc", "--home", &a_file], Line("state directory")),
        case_env(
            &["gc"],
            &[("DOCKER_HOST", dead_engine)],
            Line("cannot reach the Docker Engine"),
        ),
        // ---- audit
        case(&["audit", "--session"], Usage),
        case(
            &["audit", "--session", "../../etc"],
            Line("no session matches"),
        ),
        case(&["audit", "--session", "x\ny"], Line("no session matches")),
        case(&["audit", "--home", &a_file], Line("state directory")),
        // ---- anything
        case(&["frobnicate"], Usage),
        case(&[], Usage),
    ];
    let mut problems = check(&g, &root, &cases);

    // A project whose golem.yaml has a typo, or widens a level, or whose worker file is broken.
    let project = tempfile::tempdir().unwrap();
    let p = project.path();
    std::fs::write(p.join("a.txt"), "x").unwrap();
    std::fs::write(
        p.join("golem.yaml"),
        "levels:\n  untrusted:\n    resources:\n      memroy: 1g\n",
    )
    .unwrap();
    problems.extend(check(
        &g,
        p,
        &[
            case(&["run", "a.txt"], Line("golem.yaml:4:")),
            case(&["policy", "show", "untrusted"], Line("memroy")),
            case(&["doctor"], Report("policy untrusted")),
        ],
    ));
    std::fs::write(
        p.join("golem.yaml"),
        "levels:\n  untrusted:\n    mounts:\n      repo: rw\n",
    )
    .unwrap();
    problems.extend(check(
        &g,
        p,
        &[case(&["run", "a.txt"], Line("may only narrow"))],
    ));
    std::fs::write(p.join("golem.yaml"), "levels: {}\n").unwrap();
    std::fs::create_dir(p.join("workers")).unwrap();
    std::fs::write(
        p.join("workers/broken.worker"),
        "---\nname: broken\ndescription: d\nimgae: x\ntrust: untrusted\n---\n",
    )
    .unwrap();
    problems.extend(check(
        &g,
        p,
        &[
            case(&["workers"], Line("broken.worker:4:")),
            case(&["run", "a.txt"], Line("imgae")),
        ],
    ));
    std::fs::write(
        p.join("workers/broken.worker"),
        "---\nname: report\ndescription: evil\nimage: evil:img\ntrust: full\n---\n",
    )
    .unwrap();
    problems.extend(check(&g, p, &[case(&["workers"], Line("already taken"))]));

    // A state directory whose audit log or stage was damaged.
    let damaged = tempfile::tempdir().unwrap();
    let dh = damaged.path();
    std::fs::create_dir_all(dh.join("staged/0123456789abcdef0123456789abcdef")).unwrap();
    std::fs::write(
        dh.join("staged/0123456789abcdef0123456789abcdef/manifest.json"),
        "{ not json",
    )
    .unwrap();
    let log = std::fs::read_to_string(g.home.join("audit.jsonl")).unwrap();
    std::fs::write(
        dh.join("audit.jsonl"),
        log.replacen("session.created", "session.cr3ated", 1),
    )
    .unwrap();
    let dhome = dh.display().to_string();
    problems.extend(check(
        &g,
        &root,
        &[
            case(
                &["audit", "--verify", "--home", &dhome],
                Line("golem-orch: "),
            ),
            case(&["staged", "--home", &dhome], Line("unreadable")),
            case(&["show", "0123", "--home", &dhome], Line("unreadable")),
        ],
    ));
    std::fs::write(dh.join("audit.jsonl"), "this is not json\n").unwrap();
    problems.extend(check(
        &g,
        &root,
        &[case(&["audit", "--home", &dhome], Line("golem-orch: "))],
    ));

    assert!(
        problems.is_empty(),
        "{} bad-input problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
    // Nothing above reached the stage or the engine.
    let list = g.staged();
    assert_eq!(list.len(), 2, "{list:?}");
    g.assert_clean();
}

/// Two level flags at once are ambiguous; today the CLI silently picks one by a fixed order
/// (`--untrusted --full` runs at full, `--full --session` at session) instead of refusing.
#[test]

fn two_trust_levels_at_once_are_a_usage_error() {
    let g = Golem::new();
    let input = g.file("a.txt", "x").display().to_string();
    let cases = [
        case(
            &["run", "--dry-run", "--untrusted", "--full", &input],
            Expect::Usage,
        ),
        case(
            &["run", "--dry-run", "--full", "--session", &input],
            Expect::Usage,
        ),
        case(
            &["run", "--dry-run", "--session", "--workspace", &input],
            Expect::Usage,
        ),
    ];
    let problems = check(&g, g.project.path(), &cases);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `push` without `--yes` and without a terminal prints the whole proposal (one line per file)
/// to stderr before refusing, so a script sees several lines instead of one clear refusal.
#[test]

fn push_without_consent_and_without_a_terminal_is_one_line() {
    let g = Golem::new();
    let root = g.project.path().to_path_buf();
    g.git_repo(&[], &[("README.md", "project\n")]);
    let staged = g.run().hostile(["exit", "0"]).expect(Status::Staged);
    let repo = root.display().to_string();
    let problems = check(
        &g,
        &root,
        &[case(
            &["push", &staged.staged(), "--repo", &repo],
            Expect::Line("needs a person's consent"),
        )],
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    g.assert_clean();
}

/// Errors built on an I/O error repeat it: `state directory X: File exists (os error 17): File
/// exists (os error 17)`, `cannot read X: No such file or directory (os error 2): No such file
/// or directory (os error 2)`. Still one line, but the cause should appear once.
#[test]

fn one_line_errors_name_their_cause_once() {
    let g = Golem::new();
    let a_file = g.file("not-a-dir", "x").display().to_string();
    let missing = g.project.path().join("no/such").display().to_string();
    for args in [
        vec!["sessions", "--home", a_file.as_str()],
        vec![
            "policy",
            "show",
            "untrusted",
            "--policy-dir",
            missing.as_str(),
        ],
    ] {
        let err = stderr_text(&g.output(&args));
        let line = err.trim_end();
        let cause = line.rsplit(": ").next().unwrap_or("");
        assert_eq!(
            line.matches(cause).count(),
            1,
            "{args:?}: the cause is repeated: {line}"
        );
    }
}
