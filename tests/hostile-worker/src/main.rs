//! `hostile-worker`: a deliberately hostile worker for golem-orch's
//! integration tests.
//!
//! The tests run it in the locked worker container instead of golem-worker to
//! check that the sandbox holds (no network, read-only inputs and root,
//! dropped capabilities, resource limits) and that the orchestrator refuses
//! or survives whatever it leaves in `/output` (symlinks, devices, odd names,
//! huge or many files). Every mode prints its evidence to stdout; file-making
//! modes end with one JSON line describing each step, and `probe` also writes
//! `/output/probe.json`.
//!
//! Nothing here may panic: each attempt records its error string instead, so
//! the evidence is complete even when most attempts fail (as they should).
//!
//! Safety catches, because this binary is also built and sometimes run by
//! hand on machines whose network must not see its traffic:
//! - the network probes (TCP/UDP egress, DNS, gateway ports) only send when
//!   the network namespace has no interface but `lo`, where the kernel fails
//!   them locally (ENETUNREACH) and nothing leaves. If any other interface
//!   exists the sandbox is already broken; the probe says so
//!   (`"attempted": false, "egress_possible": true, "ok": null`) instead of
//!   sending to public or private addresses. `HOSTILE_WORKER_REAL_EGRESS=1`
//!   lifts this where such traffic is acceptable.
//! - the fork and memory bombs and an unbounded `fill` only act as a
//!   container's main process (PID 1, or the child of `docker-init`, `tini`
//!   or golem-orch's `.golem-init`)
//!   unless `HOSTILE_WORKER_ALLOW_HOST=1` is set. (`/.dockerenv` is not
//!   enough: development machines can themselves be containers.)

use std::ffi::{CString, OsStr};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

mod model;

const USAGE: &str = "\
usage: hostile-worker MODE [ARGS]
modes:
  probe               gather sandbox facts; print them and write /output/probe.json
  symlinks            leave symlinks, a hard link, a FIFO, a setuid file and a socket in /output
  names               leave files with invalid-UTF-8, 255-byte and newline names in /output
  fill [MAX]          write ok.txt, then /output/big until the volume is full (or MAX bytes)
  many N [empty]      create N small (or empty) files /output/f{i}
  bigfile BYTES       write ok.txt and /output/big of exactly BYTES bytes
  sleep SECS          sleep
  spin                busy-loop forever
  ignore-term         ignore SIGTERM/SIGINT and sleep forever
  forkbomb [MAX]      fork until it fails (children sleep 60 s)
  membomb             allocate and touch 16 MiB chunks forever
  replace-output      try to replace /output (or escape it) with symlinks to /
  exit N              write ok.txt and exit with code N
  echo-env            print the environment and write /output/env.txt
  try-write PATH...   try to create each PATH; write /output/writes.json
  try-read PATH...    try to read (or list) each PATH; write /output/reads.json
  procs               list every visible process and try to ptrace-seize and signal (0) each
                      one that is not ours; write /output/procs.json
  setid-workspace     plant /workspace/helper setuid+setgid, a FIFO and a setgid directory
                      there; write /output/workspace.json with the results and /workspace's
                      line of /proc/self/mountinfo
  forge-archive       attack the init that streams /output: write a forged tar to stdout, try
                      /proc/1/fd/1 and /proc/1/mem, signal PID 1, and leave a detached process
                      rewriting /output/late.txt after the worker exits
  say TEXT...         print each TEXT raw (escape sequences and all) to stdout and stderr, and
                      write /output/ok.txt: a worker attacking the terminal of whoever reads
                      its logs
  files PATH HEX...   write each PATH under /output (parents created) with the bytes HEX encodes,
                      to stage files a reviewer must be warned about (CI config, look-alikes)
  flood N BYTES       create N small files /output/f{i}, then /output/zz-big of BYTES bytes
  sparse BYTES        write ok.txt and /output/sparse, a hole of BYTES bytes using no memory
  unreadable          write ok.txt, a mode-000 file and a mode-000 directory holding a file
  model ACTION...     talk to the model gateway's socket: info, ask, ask-model NAME, auth,
                      big BYTES, connect, absolute, env, burst N, socket PATH, sockets, leak;
                      write /output/model.json
  prlimit-init N [soft]
                      lower PID 1's RLIMIT_NOFILE to N (soft and hard, or only the soft
                      limit), then write ok.txt and two more files
environment: HOSTILE_OUTPUT_DIR (default /output), HOSTILE_INPUT_DIR (default /input),
  HOSTILE_WORKER_ALLOW_HOST=1 to run the dangerous modes outside a container.
";

const MIB: usize = 1024 * 1024;
/// Most entries `input_listing` records, so a huge input cannot bloat probe.json.
const MAX_LISTING: usize = 10_000;
/// Most bytes of a text file a probe records.
const MAX_TEXT: u64 = 64 * 1024;
/// Most bytes of a readable host path that `host_paths` records.
const MAX_CONTENT: u64 = 4096;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const TCP_EGRESS_TARGETS: [&str; 2] = ["1.1.1.1:443", "8.8.8.8:53"];
const UDP_EGRESS_TARGET: &str = "8.8.8.8:53";
const GATEWAY_TARGETS: [&str; 2] = ["172.17.0.1:2375", "172.17.0.1:22"];
const DOCKER_SOCKETS: [&str; 2] = ["/var/run/docker.sock", "/run/docker.sock"];
const HOST_PATHS: [&str; 9] = [
    "/etc/passwd",
    "/etc/shadow",
    "/root",
    "/home",
    "/proc/1/root/etc/hostname",
    "/var/lib/docker",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/hostname",
];

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    // `from-input`: the mode and its arguments are the first line of the first input file, so
    // one batch can give every document its own behaviour.
    if args.first().map(String::as_str) == Some("from-input") {
        let input = std::env::var_os("HOSTILE_INPUT_DIR")
            .map_or_else(|| PathBuf::from("/input"), PathBuf::from);
        let first = fs::read_dir(&input).ok().and_then(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .find(|p| p.is_file())
        });
        let line = first
            .and_then(|p| fs::read_to_string(p).ok())
            .and_then(|t| t.lines().next().map(str::to_string))
            .unwrap_or_default();
        args = line.split_whitespace().map(str::to_string).collect();
    }
    let mode = args.first().map(String::as_str).unwrap_or("");
    let arg = args.get(1).map(String::as_str);
    let code = match (mode, arg) {
        ("probe", None) => probe(),
        ("try-write", Some(_)) => try_write(&args[1..]),
        ("symlinks", None) => symlinks(),
        ("names", None) => names(),
        ("fill", max) => match max.map(str::parse::<u64>).transpose() {
            Ok(max) => fill(max),
            Err(_) => usage("fill takes an optional byte count"),
        },
        ("many", Some(n)) => match (n.parse(), args.get(2).map(String::as_str)) {
            (Ok(n), None) => many(n, false),
            (Ok(n), Some("empty")) => many(n, true),
            _ => usage("many takes a count and optionally `empty`"),
        },
        ("bigfile", Some(n)) => match n.parse() {
            Ok(n) => bigfile(n),
            Err(_) => usage("bigfile takes a byte count"),
        },
        ("sleep", Some(n)) => match n.parse() {
            Ok(n) => sleep(n),
            Err(_) => usage("sleep takes seconds"),
        },
        ("spin", None) => spin(),
        ("ignore-term", None) => ignore_term(),
        ("forkbomb", max) => match max.map(str::parse::<u64>).transpose() {
            Ok(max) => forkbomb(max.unwrap_or(100_000)),
            Err(_) => usage("forkbomb takes an optional maximum"),
        },
        ("membomb", None) => membomb(),
        ("replace-output", None) => replace_output(),
        ("exit", Some(n)) => match n.parse() {
            Ok(n) => exit_with(n),
            Err(_) => usage("exit takes a code"),
        },
        ("echo-env", None) => echo_env(),
        ("try-read", Some(_)) => try_read(&args[1..]),
        ("procs", None) => procs(),
        ("forge-archive", None) => forge_archive(),
        ("flood", Some(n)) => match (n.parse(), args.get(2).map(|b| b.parse::<u64>())) {
            (Ok(n), Some(Ok(bytes))) => flood(n, bytes),
            _ => usage("flood takes a file count and a byte count"),
        },
        ("sparse", Some(n)) => match n.parse() {
            Ok(n) => sparse(n),
            Err(_) => usage("sparse takes a byte count"),
        },
        ("unreadable", None) => unreadable(),
        ("prlimit-init", Some(n)) => match (n.parse(), args.get(2).map(String::as_str)) {
            (Ok(n), None) => prlimit_init(n, false),
            (Ok(n), Some("soft")) => prlimit_init(n, true),
            _ => usage("prlimit-init takes a descriptor count and optionally `soft`"),
        },
        ("say", Some(_)) => say(&args[1..]),
        ("model", Some(_)) => model::model(&args[1..]),
        ("files", Some(_)) if !args.len().is_multiple_of(2) => files(&args[1..]),
        ("setid-workspace", None) => setid_workspace(),
        // Run by the probe from /tmp and /output to see whether exec works.
        ("exec-ok", None) => {
            println!("exec-ok");
            0
        }
        ("help" | "--help" | "-h", None) => {
            print!("{USAGE}");
            0
        }
        _ => usage("unknown mode or wrong arguments"),
    };
    flush();
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}

fn usage(msg: &str) -> i32 {
    eprintln!("hostile-worker: {msg}\n\n{USAGE}");
    64
}

fn flush() {
    let _ = io::stdout().flush();
}

fn output_dir() -> PathBuf {
    std::env::var_os("HOSTILE_OUTPUT_DIR").map_or_else(|| PathBuf::from("/output"), PathBuf::from)
}

fn input_dir() -> PathBuf {
    std::env::var_os("HOSTILE_INPUT_DIR").map_or_else(|| PathBuf::from("/input"), PathBuf::from)
}

/// True when we are a container's main process (PID 1, or the only child of
/// Docker's `--init` or golem-orch's init), where the dangerous modes are meant to run.
fn in_container() -> bool {
    if std::process::id() == 1 {
        return true;
    }
    let init = read_text("/proc/1/comm").unwrap_or_default();
    // SAFETY: getppid has no preconditions.
    let parent_is_init = unsafe { libc::getppid() } == 1;
    // golem-orch's init is mounted at `/.golem-init-<random>`; comm keeps 15 bytes of it.
    let init = init.trim();
    parent_is_init
        && (matches!(init, "docker-init" | "tini" | "catatonit") || init.starts_with(".golem-init"))
}

/// Network interfaces other than `lo`, from `/sys/class/net` or else
/// `/proc/net/dev`.
fn non_loopback_interfaces() -> Result<Vec<String>, String> {
    let names = match fs::read_dir("/sys/class/net") {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect::<Vec<_>>(),
        Err(_) => read_text("/proc/net/dev")?
            .lines()
            .skip(2)
            .filter_map(|l| l.split(':').next().map(|n| n.trim().to_string()))
            .filter(|n| !n.is_empty())
            .collect(),
    };
    Ok(names.into_iter().filter(|n| n != "lo").collect())
}

/// `None` when network probes may send: only `lo` exists (so every attempt
/// fails inside the kernel) or `HOSTILE_WORKER_REAL_EGRESS=1` is set.
fn egress_gate() -> Option<Value> {
    if std::env::var_os("HOSTILE_WORKER_REAL_EGRESS").is_some_and(|v| v == "1") {
        return None;
    }
    let (possible, why) = match non_loopback_interfaces() {
        Ok(ifaces) if ifaces.is_empty() => return None,
        Ok(ifaces) => (
            json!(true),
            format!("network interfaces present: {}", ifaces.join(", ")),
        ),
        Err(e) => (Value::Null, format!("cannot list network interfaces: {e}")),
    };
    Some(json!({
        "attempted": false,
        "ok": null,
        "egress_possible": possible,
        "error": format!(
            "not attempted: {why}; the sandbox has a network, so no traffic is sent \
             (set HOSTILE_WORKER_REAL_EGRESS=1 to send anyway)"
        ),
    }))
}

/// The safety catch: `None` when the dangerous action may go ahead.
fn host_guard() -> Option<String> {
    if in_container() || std::env::var_os("HOSTILE_WORKER_ALLOW_HOST").is_some_and(|v| v == "1") {
        None
    } else {
        Some(
            "skipped: not a container's main process (not PID 1, no docker-init/tini parent); \
             set HOSTILE_WORKER_ALLOW_HOST=1 to override"
                .to_string(),
        )
    }
}

fn errno_of(e: &io::Error) -> Value {
    e.raw_os_error().map_or(Value::Null, Value::from)
}

/// `{"ok": true}` or `{"ok": false, "error": "...", "errno": n}`.
fn attempt<T>(r: io::Result<T>) -> Value {
    match r {
        Ok(_) => json!({"ok": true, "error": null}),
        Err(e) => json!({"ok": false, "error": e.to_string(), "errno": errno_of(&e)}),
    }
}

/// A probe's value, or `{"error": "..."}` when it could not be gathered.
fn value_or_error(r: Result<Value, String>) -> Value {
    r.unwrap_or_else(|e| json!({ "error": e }))
}

/// The result of a raw libc call returning -1 on failure.
fn libc_result(ret: i64) -> Value {
    if ret == -1 {
        let e = io::Error::last_os_error();
        json!({"ret": ret, "ok": false, "errno": errno_of(&e), "error": e.to_string()})
    } else {
        json!({"ret": ret, "ok": true, "errno": null, "error": null})
    }
}

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// Reads at most [`MAX_TEXT`] bytes of a text file.
fn read_text(path: &str) -> Result<String, String> {
    let mut buf = Vec::new();
    File::open(path)
        .and_then(|f| f.take(MAX_TEXT).read_to_end(&mut buf))
        .map_err(|e| format!("{path}: {e}"))?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Runs one probe, turning a panic (there should be none) into an error.
fn guarded(f: impl FnOnce() -> Value) -> Value {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| json!({"error": "probe panicked"}))
}

// ---------------------------------------------------------------- probe

fn probe() -> i32 {
    let mut p = Map::new();
    let mut add = |key: &str, f: &dyn Fn() -> Value| {
        p.insert(key.to_string(), guarded(f));
    };
    add("mode", &|| json!("probe"));
    add("in_container", &|| json!(in_container()));
    // SAFETY: these libc getters have no preconditions and cannot fail.
    add("pid", &|| json!(unsafe { libc::getpid() }));
    add("ppid", &|| json!(unsafe { libc::getppid() }));
    add("uid", &|| json!(unsafe { libc::getuid() }));
    add("gid", &|| json!(unsafe { libc::getgid() }));
    add("euid", &|| json!(unsafe { libc::geteuid() }));
    add("egid", &|| json!(unsafe { libc::getegid() }));
    add("groups", &|| value_or_error(groups()));
    for (key, field) in [
        ("cap_eff", "CapEff"),
        ("cap_prm", "CapPrm"),
        ("cap_inh", "CapInh"),
        ("cap_bnd", "CapBnd"),
        ("cap_amb", "CapAmb"),
        ("no_new_privs", "NoNewPrivs"),
        ("seccomp", "Seccomp"),
    ] {
        add(key, &|| {
            value_or_error(status_field(field).map(Value::from))
        });
    }
    add("kernel", &|| {
        value_or_error(read_text("/proc/sys/kernel/osrelease").map(|s| json!(s.trim())))
    });
    add("hostname", &|| {
        value_or_error(read_text("/proc/sys/kernel/hostname").map(|s| json!(s.trim())))
    });
    add("rlimits", &rlimits);
    add("cgroup", &|| {
        value_or_error(read_text("/proc/self/cgroup").map(Value::from))
    });
    add("cgroup_limits", &cgroup_limits);
    add("interfaces", &interfaces);
    add("env", &env_object);
    add("input_listing", &|| value_or_error(listing(&input_dir())));
    add("root_listing", &|| {
        value_or_error(dir_names(Path::new("/")))
    });
    add("can_write_input", &|| {
        attempt(File::create(input_dir().join("x")))
    });
    add("can_write_root", &|| attempt(File::create("/pwned")));
    add("can_write_tmp_and_exec", &|| {
        write_and_exec(Path::new("/tmp/hostile-exec"))
    });
    add("can_write_output_and_exec", &|| {
        write_and_exec(&output_dir().join(".hostile-exec"))
    });
    add("tcp_egress", &|| guarded_net(tcp_egress));
    add("udp_egress", &|| guarded_net(udp_egress));
    add("dns", &|| guarded_net(dns));
    add("gateway", &gateway);
    add("docker_sock", &docker_sock);
    add("host_paths", &host_paths);
    add("mountinfo", &|| {
        value_or_error(read_text("/proc/self/mountinfo").map(Value::from))
    });
    add("setuid_root", &setuid_root);
    add("mount_attempt", &mount_attempt);
    add("unshare_userns", &unshare_userns);
    add("ptrace_attempt", &ptrace_attempt);

    let value = Value::Object(p);
    let text = serde_json::to_string_pretty(&value)
        .unwrap_or_else(|e| format!("{{\"error\": \"cannot serialise probe: {e}\"}}"));
    println!("{text}");
    let path = output_dir().join("probe.json");
    match fs::write(&path, format!("{text}\n")) {
        Ok(()) => eprintln!("hostile-worker: wrote {}", path.display()),
        Err(e) => eprintln!("hostile-worker: cannot write {}: {e}", path.display()),
    }
    0
}

/// Tries to create (and, if that works, list the parent of) every path given; writes the results
/// to `/output/writes.json` as `{PATH: {"ok", "error", "errno", "listing"}}`. Used to attack
/// mounts the worker must not be able to write, or must not even see into.
fn try_write(paths: &[String]) -> i32 {
    let mut results = serde_json::Map::new();
    for path in paths {
        let p = Path::new(path);
        let write = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(p)
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"planted by hostile-worker\n"));
        let listing: Vec<String> = p
            .parent()
            .and_then(|d| fs::read_dir(d).ok())
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let mut entry = match write {
            Ok(()) => json!({"ok": true, "error": null, "errno": null}),
            Err(e) => json!({"ok": false, "error": e.to_string(), "errno": errno_of(&e)}),
        };
        entry["listing"] = json!(listing);
        results.insert(path.clone(), entry);
    }
    let text = Value::Object(results).to_string();
    println!("{text}");
    match fs::write(output_dir().join("writes.json"), text) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("hostile-worker: cannot write writes.json: {e}");
            1
        }
    }
}

fn groups() -> Result<Value, String> {
    // SAFETY: size 0 with a null list only asks for the count.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if n < 0 {
        return Err(io::Error::last_os_error().to_string());
    }
    let mut list = vec![0 as libc::gid_t; usize::try_from(n).unwrap_or(0)];
    // SAFETY: the buffer holds exactly `n` entries.
    let got = unsafe { libc::getgroups(n, list.as_mut_ptr()) };
    if got < 0 {
        return Err(io::Error::last_os_error().to_string());
    }
    list.truncate(usize::try_from(got).unwrap_or(0));
    Ok(json!(list))
}

fn status_field(name: &str) -> Result<String, String> {
    let status = read_text("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(':'))
                .map(|v| v.trim().to_string())
        })
        .ok_or_else(|| format!("no {name} line in /proc/self/status"))
}

fn rlimits() -> Value {
    let mut m = Map::new();
    for (name, res) in [
        ("nproc", libc::RLIMIT_NPROC),
        ("nofile", libc::RLIMIT_NOFILE),
        ("fsize", libc::RLIMIT_FSIZE),
        ("as", libc::RLIMIT_AS),
        ("core", libc::RLIMIT_CORE),
    ] {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `lim` is a valid rlimit to fill in.
        let ret = unsafe { libc::getrlimit(res, &mut lim) };
        let v = if ret == 0 {
            let show = |x: libc::rlim_t| {
                if x == libc::RLIM_INFINITY {
                    json!("unlimited")
                } else {
                    json!(x)
                }
            };
            json!({"soft": show(lim.rlim_cur), "hard": show(lim.rlim_max)})
        } else {
            json!({"error": io::Error::last_os_error().to_string()})
        };
        m.insert(name.to_string(), v);
    }
    Value::Object(m)
}

fn cgroup_limits() -> Value {
    let mut m = Map::new();
    for path in [
        "/sys/fs/cgroup/pids.max",
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory.swap.max",
        "/sys/fs/cgroup/cpu.max",
        "/sys/fs/cgroup/pids/pids.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ] {
        let v = match read_text(path) {
            Ok(s) => json!(s.trim()),
            Err(e) => json!({ "error": e }),
        };
        m.insert(path.to_string(), v);
    }
    Value::Object(m)
}

fn interfaces() -> Value {
    let sys = dir_names(Path::new("/sys/class/net"));
    let dev = read_text("/proc/net/dev").map(|s| {
        s.lines()
            .skip(2)
            .filter_map(|l| l.split(':').next().map(|n| n.trim().to_string()))
            .filter(|n| !n.is_empty())
            .collect::<Vec<_>>()
    });
    let names = match (&sys, &dev) {
        (Ok(Value::Array(a)), _) => Value::Array(a.clone()),
        (_, Ok(d)) => json!(d),
        _ => Value::Null,
    };
    json!({
        "names": names,
        "sys_class_net": value_or_error(sys),
        "proc_net_dev": value_or_error(dev.map(|d| json!(d))),
    })
}

fn env_object() -> Value {
    let m: Map<String, Value> = std::env::vars_os()
        .map(|(k, v)| (k.to_string_lossy().into_owned(), json!(v.to_string_lossy())))
        .collect();
    Value::Object(m)
}

fn dir_names(dir: &Path) -> Result<Value, String> {
    let rd = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut names = Vec::new();
    for entry in rd {
        match entry {
            Ok(e) => names.push(e.file_name().to_string_lossy().into_owned()),
            Err(e) => names.push(format!("<error: {e}>")),
        }
    }
    names.sort();
    Ok(json!(names))
}

/// Recursive listing without following symlinks: directories end in `/`,
/// symlinks show ` -> target`, unreadable directories `: <error>`.
fn listing(root: &Path) -> Result<Value, String> {
    fs::read_dir(root).map_err(|e| format!("{}: {e}", root.display()))?;
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        if out.len() >= MAX_LISTING {
            out.push(format!("<stopped after {MAX_LISTING} entries>"));
            break;
        }
        let rd = match fs::read_dir(root.join(&rel)) {
            Ok(rd) => rd,
            Err(e) => {
                out.push(format!("{}/: <{e}>", rel.display()));
                continue;
            }
        };
        let mut names: Vec<_> = rd.filter_map(Result::ok).map(|e| e.file_name()).collect();
        names.sort();
        for name in names.into_iter().rev() {
            let r = rel.join(&name);
            let shown = r.to_string_lossy().into_owned();
            match fs::symlink_metadata(root.join(&r)) {
                Ok(m) if m.is_dir() => {
                    out.push(format!("{shown}/"));
                    stack.push(r);
                }
                Ok(m) if m.file_type().is_symlink() => {
                    let target = fs::read_link(root.join(&r))
                        .map(|t| t.to_string_lossy().into_owned())
                        .unwrap_or_else(|e| format!("<{e}>"));
                    out.push(format!("{shown} -> {target}"));
                }
                Ok(_) => out.push(shown),
                Err(e) => out.push(format!("{shown}: <{e}>")),
            }
        }
    }
    out.sort();
    Ok(json!(out))
}

/// Copies our own binary to `path`, makes it executable and tries to run it:
/// on a `noexec` mount the exec must fail with EACCES. The copy is removed
/// afterwards so it is not left in the output.
fn write_and_exec(path: &Path) -> Value {
    let write = fs::copy("/proc/self/exe", path);
    let chmod = fs::set_permissions(path, fs::Permissions::from_mode(0o755));
    let exec = match Command::new(path).arg("exec-ok").output() {
        Ok(out) => json!({
            "ok": true,
            "status": out.status.code(),
            "stdout": String::from_utf8_lossy(&out.stdout),
            "error": null,
        }),
        Err(e) => json!({"ok": false, "error": e.to_string(), "errno": errno_of(&e)}),
    };
    let _ = fs::remove_file(path);
    json!({
        "path": path.to_string_lossy(),
        "write": attempt(write),
        "chmod": attempt(chmod),
        "exec": exec,
    })
}

/// Network probes only send where nothing can leave (see [`egress_gate`]).
fn guarded_net(f: fn() -> Value) -> Value {
    egress_gate().unwrap_or_else(f)
}

fn tcp_connect(target: &str) -> Value {
    let addr: SocketAddr = match target.parse() {
        Ok(a) => a,
        Err(e) => return json!({"target": target, "ok": false, "error": e.to_string()}),
    };
    let start = Instant::now();
    let r = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT);
    let ms = start.elapsed().as_millis();
    match r {
        Ok(_) => json!({
            "target": target, "attempted": true, "ok": true, "error": null, "elapsed_ms": ms,
        }),
        Err(e) => json!({
            "target": target, "attempted": true, "ok": false, "error": e.to_string(),
            "errno": errno_of(&e), "elapsed_ms": ms,
        }),
    }
}

fn tcp_egress() -> Value {
    json!(TCP_EGRESS_TARGETS
        .iter()
        .map(|t| tcp_connect(t))
        .collect::<Vec<_>>())
}

fn udp_egress() -> Value {
    match UdpSocket::bind("0.0.0.0:0") {
        Err(e) => json!({
            "target": UDP_EGRESS_TARGET,
            "attempted": true,
            "bind": attempt::<()>(Err(e)),
            "send": null,
        }),
        Ok(sock) => json!({
            "target": UDP_EGRESS_TARGET,
            "attempted": true,
            "bind": json!({"ok": true, "error": null}),
            "send": attempt(sock.send_to(b"hostile-worker egress probe", UDP_EGRESS_TARGET)),
        }),
    }
}

fn dns() -> Value {
    let start = Instant::now();
    let r = ("example.com", 80).to_socket_addrs();
    let ms = start.elapsed().as_millis();
    match r {
        Ok(addrs) => json!({
            "name": "example.com",
            "attempted": true,
            "ok": true,
            "addrs": addrs.map(|a| a.to_string()).collect::<Vec<_>>(),
            "error": null,
            "elapsed_ms": ms,
        }),
        Err(e) => json!({
            "name": "example.com", "attempted": true, "ok": false, "error": e.to_string(), "elapsed_ms": ms,
        }),
    }
}

/// Parses `/proc/net/route` (addresses are little-endian hex) and tries the
/// Docker bridge gateway's Docker API and SSH ports (the connects are gated
/// like the other network probes; reading the table is not).
fn gateway() -> Value {
    let routes = read_text("/proc/net/route").map(|text| {
        text.lines()
            .skip(1)
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let ip = |hex: &str| {
                    u32::from_str_radix(hex, 16)
                        .map(|v| std::net::Ipv4Addr::from(v.swap_bytes()).to_string())
                        .unwrap_or_else(|_| hex.to_string())
                };
                (f.len() >= 8).then(|| {
                    json!({
                        "iface": f[0],
                        "destination": ip(f[1]),
                        "gateway": ip(f[2]),
                        "mask": ip(f[7]),
                        "default": f[1] == "00000000",
                    })
                })
            })
            .collect::<Vec<_>>()
    });
    let default_routes = match &routes {
        Ok(r) => json!(r
            .iter()
            .filter(|r| r["default"] == true)
            .cloned()
            .collect::<Vec<_>>()),
        Err(e) => json!({ "error": e }),
    };
    json!({
        "routes": value_or_error(routes.map(|r| json!(r))),
        "default_routes": default_routes,
        "connect": guarded_net(gateway_connect),
    })
}

fn gateway_connect() -> Value {
    json!(GATEWAY_TARGETS
        .iter()
        .map(|t| tcp_connect(t))
        .collect::<Vec<_>>())
}

fn docker_sock() -> Value {
    let mut m = Map::new();
    for path in DOCKER_SOCKETS {
        let exists = fs::symlink_metadata(path);
        let v = json!({
            "exists": exists.is_ok(),
            "stat_error": exists.err().map(|e| e.to_string()),
            "connect": attempt(UnixStream::connect(path)),
        });
        m.insert(path.to_string(), v);
    }
    Value::Object(m)
}

fn host_paths() -> Value {
    let mut m = Map::new();
    for path in HOST_PATHS {
        let meta = fs::metadata(path);
        let is_dir = meta.as_ref().is_ok_and(|m| m.is_dir());
        let read: io::Result<()> = if is_dir {
            fs::read_dir(path).map(|_| ())
        } else {
            File::open(path).and_then(|mut f| f.read(&mut [0u8; 64]).map(|_| ()))
        };
        // The start of a readable file, as evidence of what leaked in.
        let content = (!is_dir && read.is_ok())
            .then(|| {
                let mut buf = Vec::new();
                File::open(path)
                    .and_then(|f| f.take(MAX_CONTENT).read_to_end(&mut buf))
                    .ok()
                    .map(|_| String::from_utf8_lossy(&buf).into_owned())
            })
            .flatten();
        let v = json!({
            "exists": meta.is_ok(),
            "is_dir": is_dir,
            "content": content,
            "stat_error": meta.err().map(|e| e.to_string()),
            "readable": read.is_ok(),
            "read_error": read.err().map(|e| e.to_string()),
        });
        m.insert(path.to_string(), v);
    }
    Value::Object(m)
}

fn setuid_root() -> Value {
    // SAFETY: plain syscalls; success would only change our own credentials.
    let setuid = libc_result(i64::from(unsafe { libc::setuid(0) }));
    let setgid = libc_result(i64::from(unsafe { libc::setgid(0) }));
    json!({
        "setuid": setuid,
        "setgid": setgid,
        "uid_after": unsafe { libc::getuid() },
        "euid_after": unsafe { libc::geteuid() },
    })
}

fn mount_attempt() -> Value {
    let dir = PathBuf::from("/tmp/m");
    let mkdir = fs::create_dir_all(&dir);
    let mount = match cstring(&dir) {
        Ok(target) => {
            // SAFETY: all strings are NUL-terminated and outlive the call.
            let ret = unsafe {
                libc::mount(
                    c"tmpfs".as_ptr(),
                    target.as_ptr(),
                    c"tmpfs".as_ptr(),
                    0,
                    std::ptr::null(),
                )
            };
            let v = libc_result(i64::from(ret));
            if ret == 0 {
                // SAFETY: as above; undo our own mount.
                unsafe { libc::umount(target.as_ptr()) };
            }
            v
        }
        Err(e) => json!({"ok": false, "error": e.to_string()}),
    };
    json!({"target": "/tmp/m", "mkdir": attempt(mkdir), "mount": mount})
}

/// Tries to create a user (and mount) namespace, which would hand us
/// capabilities inside it. Done in a child so our own namespaces stay as
/// they are; the child reports the errno as its exit code.
fn unshare_userns() -> Value {
    flush();
    // SAFETY: the child only calls async-signal-safe functions before _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let ret = unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) };
        let code = if ret == 0 {
            0
        } else {
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(255)
                .min(255)
        };
        unsafe { libc::_exit(code) };
    }
    if pid < 0 {
        let e = io::Error::last_os_error();
        return json!({"ok": false, "error": format!("fork failed: {e}")});
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFEXITED(status) {
        let code = libc::WEXITSTATUS(status);
        if code == 0 {
            json!({"ok": true, "errno": null, "error": null})
        } else {
            json!({
                "ok": false,
                "errno": code,
                "error": io::Error::from_raw_os_error(code).to_string(),
            })
        }
    } else {
        json!({"ok": false, "error": format!("child ended abnormally, wait status {status}")})
    }
}

fn ptrace_attach(pid: libc::pid_t) -> Value {
    let null = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: PTRACE_ATTACH takes no pointers; on success we wait for the
    // tracee to stop and detach again.
    let ret = unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, null, null) };
    let v = libc_result(ret);
    if ret == 0 {
        let mut status = 0;
        unsafe {
            libc::waitpid(pid, &mut status, libc::__WALL);
            libc::ptrace(libc::PTRACE_DETACH, pid, null, null);
        }
    }
    v
}

/// Tries to trace PID 1 (the container's init, or ourselves when we are PID
/// 1) and a child of our own (shows whether ptrace is allowed at all).
fn ptrace_attempt() -> Value {
    let pid1 = ptrace_attach(1);
    flush();
    // SAFETY: the child only sleeps and exits.
    let child = unsafe { libc::fork() };
    if child == 0 {
        unsafe {
            libc::sleep(30);
            libc::_exit(0);
        }
    }
    let own_child = if child < 0 {
        json!({"ok": false, "error": format!("fork failed: {}", io::Error::last_os_error())})
    } else {
        let v = ptrace_attach(child);
        let mut status = 0;
        // SAFETY: ending and reaping our own child.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, &mut status, 0);
        }
        v
    };
    json!({"pid1": pid1, "own_child": own_child})
}

// ---------------------------------------------------------------- file modes

/// Records the steps of a file-making mode: prints each as it happens and
/// ends with one JSON line `{"mode": ..., "steps": {name: result}}`.
struct Steps {
    mode: &'static str,
    steps: Map<String, Value>,
}

impl Steps {
    fn new(mode: &'static str) -> Self {
        Self {
            mode,
            steps: Map::new(),
        }
    }

    fn record<T>(&mut self, name: &str, r: io::Result<T>) -> bool {
        let ok = r.is_ok();
        match &r {
            Ok(_) => println!("{name}: ok"),
            Err(e) => println!("{name}: skipped: {e}"),
        }
        self.steps.insert(name.to_string(), attempt(r));
        ok
    }

    fn note(&mut self, name: &str, v: Value) {
        println!("{name}: {v}");
        self.steps.insert(name.to_string(), v);
    }

    fn finish(self) -> Value {
        let v = json!({"mode": self.mode, "steps": Value::Object(self.steps)});
        println!("{v}");
        v
    }
}

fn write_ok(steps: &mut Steps) -> bool {
    steps.record("ok.txt", fs::write(output_dir().join("ok.txt"), "fine\n"))
}

fn mkfifo(path: &Path, mode: libc::mode_t) -> io::Result<()> {
    let c = cstring(path)?;
    // SAFETY: `c` is NUL-terminated and outlives the call.
    if unsafe { libc::mkfifo(c.as_ptr(), mode) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn symlinks() -> i32 {
    let out = output_dir();
    let mut s = Steps::new("symlinks");
    write_ok(&mut s);
    s.record(
        "passwd -> /etc/passwd",
        symlink("/etc/passwd", out.join("passwd")),
    );
    s.record("root -> /", symlink("/", out.join("root")));
    s.record(
        "hard => ok.txt",
        fs::hard_link(out.join("ok.txt"), out.join("hard")),
    );
    s.record("fifo", mkfifo(&out.join("fifo"), 0o644));
    let suid = out.join("suid");
    let made = fs::write(&suid, "#!/bin/sh\nid\n")
        .and_then(|()| fs::set_permissions(&suid, fs::Permissions::from_mode(0o4755)))
        .and_then(|()| fs::symlink_metadata(&suid));
    match made {
        Ok(m) => s.note(
            "suid",
            json!({"ok": true, "mode": format!("{:o}", m.mode() & 0o7777)}),
        ),
        Err(e) => {
            s.record::<()>("suid", Err(e));
        }
    }
    // Dropping the listener closes it but leaves the socket file behind.
    s.record("sock", UnixListener::bind(out.join("sock")));
    s.finish();
    0
}

fn names() -> i32 {
    let out = output_dir();
    let mut s = Steps::new("names");
    write_ok(&mut s);
    s.record(
        "invalid utf-8 name",
        fs::write(out.join(OsStr::from_bytes(b"bad\xff\xfe")), "bad name\n"),
    );
    s.record(
        "255-byte name",
        fs::write(out.join("n".repeat(255)), "long name\n"),
    );
    s.record(
        "newline in name",
        fs::write(out.join("new\nline"), "newline name\n"),
    );
    s.finish();
    0
}

/// Writes `total` bytes (or until an error when `None`) in 1 MiB chunks;
/// returns how many bytes were written and the error that stopped it.
fn write_big(path: &Path, total: Option<u64>) -> (u64, Option<io::Error>) {
    let mut file = match OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
    {
        Ok(f) => f,
        Err(e) => return (0, Some(e)),
    };
    let chunk = vec![b'A'; MIB];
    let mut written = 0u64;
    loop {
        let want = match total {
            Some(t) if written >= t => break,
            Some(t) => usize::try_from((t - written).min(MIB as u64)).unwrap_or(MIB),
            None => MIB,
        };
        match file.write(&chunk[..want]) {
            Ok(0) => return (written, Some(io::Error::from(io::ErrorKind::WriteZero))),
            Ok(n) => written += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (written, Some(e)),
        }
    }
    match file.sync_all() {
        Ok(()) => (written, None),
        Err(e) => (written, Some(e)),
    }
}

fn fill(max: Option<u64>) -> i32 {
    let mut s = Steps::new("fill");
    if max.is_none() {
        if let Some(msg) = host_guard() {
            s.note("big", json!({ "error": msg }));
            s.finish();
            return 0;
        }
    }
    write_ok(&mut s);
    let (written, err) = write_big(&output_dir().join("big"), max);
    s.note(
        "big",
        json!({
            "bytes_written": written,
            "error": err.as_ref().map(ToString::to_string),
            "errno": err.as_ref().map_or(Value::Null, errno_of),
        }),
    );
    s.finish();
    0
}

/// Empty files use an inode but no data block, so a tmpfs `size=` cap alone
/// does not limit how many of them fit.
fn many(n: u64, empty: bool) -> i32 {
    let out = output_dir();
    let mut created = 0u64;
    let mut error = None;
    for i in 0..n {
        let content = if empty {
            String::new()
        } else {
            format!("{i}\n")
        };
        if let Err(e) = fs::write(out.join(format!("f{i}")), content) {
            error = Some(e);
            break;
        }
        created += 1;
    }
    println!("created {created} of {n} files");
    let mut s = Steps::new("many");
    s.note(
        "files",
        json!({
            "requested": n,
            "empty": empty,
            "created": created,
            "error": error.as_ref().map(ToString::to_string),
            "errno": error.as_ref().map_or(Value::Null, errno_of),
        }),
    );
    s.finish();
    0
}

fn bigfile(bytes: u64) -> i32 {
    let mut s = Steps::new("bigfile");
    write_ok(&mut s);
    let (written, err) = write_big(&output_dir().join("big"), Some(bytes));
    let failed = err.is_some();
    s.note(
        "big",
        json!({
            "requested": bytes,
            "bytes_written": written,
            "error": err.as_ref().map(ToString::to_string),
        }),
    );
    s.finish();
    i32::from(failed)
}

fn sleep(secs: u64) -> i32 {
    println!("sleeping {secs} s");
    flush();
    std::thread::sleep(Duration::from_secs(secs));
    println!("slept {secs} s");
    0
}

fn spin() -> i32 {
    println!("spinning");
    flush();
    let mut n = 0u64;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

fn ignore_term() -> i32 {
    for (name, sig) in [("SIGTERM", libc::SIGTERM), ("SIGINT", libc::SIGINT)] {
        // SAFETY: SIG_IGN is a valid disposition.
        let old = unsafe { libc::signal(sig, libc::SIG_IGN) };
        if old == libc::SIG_ERR {
            println!("cannot ignore {name}: {}", io::Error::last_os_error());
        } else {
            println!("ignoring {name}");
        }
    }
    flush();
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn forkbomb(max: u64) -> i32 {
    if let Some(msg) = host_guard() {
        println!("{}", json!({"mode": "forkbomb", "forked": 0, "error": msg}));
        return 0;
    }
    flush();
    let mut forked = 0u64;
    let mut error = None;
    while forked < max {
        // SAFETY: the child only sleeps and calls _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            unsafe {
                libc::sleep(60);
                libc::_exit(0);
            }
        }
        if pid < 0 {
            error = Some(io::Error::last_os_error());
            break;
        }
        forked += 1;
    }
    println!(
        "{}",
        json!({
            "mode": "forkbomb",
            "forked": forked,
            "max": max,
            "error": error.as_ref().map(ToString::to_string),
            "errno": error.as_ref().map_or(Value::Null, errno_of),
        })
    );
    0
}

fn membomb() -> i32 {
    if let Some(msg) = host_guard() {
        println!("{}", json!({"mode": "membomb", "error": msg}));
        return 0;
    }
    const CHUNK: usize = 16 * MIB;
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = Vec::new();
        if let Err(e) = chunk.try_reserve_exact(CHUNK) {
            println!("allocation failed after {} MiB: {e}", hoard.len() * 16);
            return 3;
        }
        // Non-zero bytes so every page is really touched.
        chunk.resize(CHUNK, 0xA5);
        hoard.push(chunk);
        println!("holding {} MiB", hoard.len() * 16);
        flush();
    }
}

fn replace_output() -> i32 {
    let out = output_dir();
    let parent_escape = out.join("..").join("escaped");
    let mut s = Steps::new("replace-output");
    s.record("symlink x -> /", symlink("/", out.join("x")));
    s.record("symlink up -> ..", symlink("..", out.join("up")));
    s.record("remove_dir output", fs::remove_dir(&out));
    s.record(
        "rename output away",
        fs::rename(&out, out.with_extension("old")),
    );
    s.record("symlink output -> /", symlink("/", &out));
    s.record(
        "chmod output 0777",
        fs::set_permissions(&out, fs::Permissions::from_mode(0o777)),
    );
    s.record(
        "create output/../escaped",
        fs::write(&parent_escape, "escaped\n"),
    );
    s.record(
        "rename output/x to output/../x",
        fs::rename(out.join("x"), out.join("..").join("x")),
    );
    s.record(
        "write through output/x/pwned",
        fs::write(out.join("x").join("pwned"), "pwned\n"),
    );
    s.note(
        "output after",
        json!({
            "is_symlink": fs::symlink_metadata(&out).map(|m| m.file_type().is_symlink()).ok(),
            "listing": value_or_error(dir_names(&out)),
        }),
    );
    s.finish();
    0
}

/// A tar (ustar) holding one file, `output/evil.txt`, with its two end blocks: what the
/// host would stage if a worker's stdout were taken for the init's archive.
fn forged_tar() -> Vec<u8> {
    let body = b"forged by the worker\n";
    let mut h = [0u8; 512];
    let mut put = |at: usize, field: &[u8]| h[at..at + field.len()].copy_from_slice(field);
    put(0, b"output/evil.txt");
    put(100, b"0000644\0");
    put(108, b"0000000\0");
    put(116, b"0000000\0");
    put(124, format!("{:011o}\0", body.len()).as_bytes());
    put(136, b"00000000000\0");
    put(148, b"        ");
    put(156, b"0");
    put(257, b"ustar\0");
    put(263, b"00");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    let mut tar = h.to_vec();
    tar.extend_from_slice(body);
    tar.resize(1024, 0);
    tar.resize(2048, 0);
    tar
}

fn forge_archive() -> i32 {
    let out = output_dir();
    let mut s = Steps::new("forge-archive");
    write_ok(&mut s);
    flush();
    s.record(
        "forged tar on stdout",
        io::stdout()
            .write_all(&forged_tar())
            .and_then(|()| io::stdout().flush()),
    );
    println!();
    s.record(
        "open /proc/1/fd/1",
        OpenOptions::new().write(true).open("/proc/1/fd/1"),
    );
    s.record(
        "open /proc/1/mem",
        OpenOptions::new()
            .read(true)
            .write(true)
            .open("/proc/1/mem"),
    );
    for (name, sig) in [
        ("SIGTERM", libc::SIGTERM),
        ("SIGKILL", libc::SIGKILL),
        ("SIGSTOP", libc::SIGSTOP),
        // std's runtime catches these two for its stack-overflow report; init resets them.
        ("SIGSEGV", libc::SIGSEGV),
        ("SIGBUS", libc::SIGBUS),
    ] {
        // SAFETY: kill has no memory preconditions.
        let r = unsafe { libc::kill(1, sig) };
        s.note(&format!("kill(1, {name})"), json!({ "returned": r }));
    }
    std::thread::sleep(Duration::from_millis(100));
    let state = read_text("/proc/1/stat").map(|stat| {
        // The state is the field after the parenthesised command name.
        stat.rsplit_once(") ")
            .and_then(|(_, rest)| rest.split(' ').next().map(str::to_string))
            .unwrap_or_default()
    });
    s.note(
        "pid 1 state after signals",
        value_or_error(state.map(Value::from)),
    );
    // The signals PID 1 catches: only a caught signal reaches a namespace's init from inside.
    let caught = read_text("/proc/1/status").map(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .map(|m| m.trim().to_string())
            .unwrap_or_default()
    });
    s.note(
        "pid 1 caught signals",
        value_or_error(caught.map(Value::from)),
    );
    // A detached grandchild that keeps rewriting a file after the worker has exited.
    // SAFETY: the child only calls async-signal-safe functions and never returns.
    let child = unsafe { libc::fork() };
    if child == 0 {
        unsafe {
            libc::setsid();
            if libc::fork() == 0 {
                let path = cstring(&out.join("late.txt")).unwrap_or_default();
                let mut n: u64 = 0;
                loop {
                    let fd = libc::open(
                        path.as_ptr(),
                        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
                        0o644,
                    );
                    if fd >= 0 {
                        let line = [b'0' + (n % 10) as u8, b'\n'];
                        libc::write(fd, line.as_ptr().cast(), 2);
                        libc::close(fd);
                    }
                    n += 1;
                    libc::usleep(1000);
                }
            }
            libc::_exit(0);
        }
    }
    s.note("late writer started", json!(child > 0));
    std::thread::sleep(Duration::from_millis(200));
    s.finish();
    0
}

fn exit_with(code: i32) -> i32 {
    let mut s = Steps::new("exit");
    write_ok(&mut s);
    s.note("code", json!(code));
    s.finish();
    flush();
    std::process::exit(code)
}

fn echo_env() -> i32 {
    let mut text = String::new();
    for (k, v) in std::env::vars_os() {
        text.push_str(&k.to_string_lossy());
        text.push('=');
        text.push_str(&v.to_string_lossy());
        text.push('\n');
    }
    print!("{text}");
    let path = output_dir().join("env.txt");
    match fs::write(&path, &text) {
        Ok(()) => eprintln!("hostile-worker: wrote {}", path.display()),
        Err(e) => eprintln!("hostile-worker: cannot write {}: {e}", path.display()),
    }
    0
}

/// Tries to read every path given (a directory is listed, a file's first
/// [`MAX_CONTENT`] bytes are kept); writes `/output/reads.json` as
/// `{PATH: {"exists", "is_dir", "readable", "content", "listing", "error", "errno"}}`.
/// Used to look for host files, credentials and other sessions' state that must not be there.
fn try_read(paths: &[String]) -> i32 {
    let mut results = Map::new();
    for path in paths {
        let meta = fs::symlink_metadata(path);
        let is_dir = fs::metadata(path).is_ok_and(|m| m.is_dir());
        let (readable, content, listing, err) = if is_dir {
            match dir_names(Path::new(path)) {
                Ok(names) => (true, Value::Null, names, None),
                Err(e) => (false, Value::Null, Value::Null, Some(json!(e))),
            }
        } else {
            let mut buf = Vec::new();
            match File::open(path).and_then(|f| f.take(MAX_CONTENT).read_to_end(&mut buf)) {
                Ok(_) => (
                    true,
                    json!(String::from_utf8_lossy(&buf)),
                    Value::Null,
                    None,
                ),
                Err(e) => (
                    false,
                    Value::Null,
                    Value::Null,
                    Some(json!({"error": e.to_string(), "errno": errno_of(&e)})),
                ),
            }
        };
        results.insert(
            path.clone(),
            json!({
                "exists": meta.is_ok(),
                "stat_errno": meta.as_ref().err().map_or(Value::Null, errno_of),
                "is_dir": is_dir,
                "readable": readable,
                "content": content,
                "listing": listing,
                "error": err,
            }),
        );
    }
    let text = Value::Object(results).to_string();
    println!("{text}");
    match fs::write(output_dir().join("reads.json"), text) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("hostile-worker: cannot write reads.json: {e}");
            1
        }
    }
}

/// Every process visible in `/proc`, and for each one that is not this
/// process: whether it may be signalled (`kill(pid, 0)`, which sends nothing)
/// and traced (`PTRACE_SEIZE`, which does not stop the tracee; a seized
/// process is released when we exit). In a sandbox with its own PID
/// namespace the list holds only this process. Only runs as a container's
/// main process (see [`host_guard`]).
fn procs() -> i32 {
    if let Some(msg) = host_guard() {
        println!("{}", json!({"mode": "procs", "error": msg}));
        return 0;
    }
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let mut pids: Vec<libc::pid_t> = fs::read_dir("/proc")
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    let mut list = Vec::new();
    for pid in pids {
        let comm = read_text(&format!("/proc/{pid}/comm"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let cmdline = read_text(&format!("/proc/{pid}/cmdline"))
            .map(|s| s.replace('\0', " ").trim().to_string())
            .unwrap_or_default();
        let uid = read_text(&format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .and_then(|r| r.split_whitespace().next().map(str::to_string))
            })
            .unwrap_or_default();
        let mut entry =
            json!({"pid": pid, "comm": comm, "cmdline": cmdline, "uid": uid, "self": pid == me});
        if pid != me {
            // SAFETY: signal 0 only checks permission; PTRACE_SEIZE takes no pointers.
            entry["kill0"] = libc_result(i64::from(unsafe { libc::kill(pid, 0) }));
            let null = std::ptr::null_mut::<libc::c_void>();
            entry["ptrace_seize"] =
                libc_result(unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, null, null) });
        }
        list.push(entry);
    }
    let v = json!({"mode": "procs", "self": me, "processes": list});
    let text = v.to_string();
    println!("{text}");
    match fs::write(output_dir().join("procs.json"), text) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("hostile-worker: cannot write procs.json: {e}");
            1
        }
    }
}

/// Leaves a uid switch for host users in the shared workspace: a setuid/setgid copy of itself,
/// a FIFO and a setgid directory; reports whether each worked and how /workspace is mounted.
fn setid_workspace() -> i32 {
    let ws = Path::new("/workspace");
    let attempt = |r: io::Result<()>| match r {
        Ok(()) => json!({"ok": true, "error": null}),
        Err(e) => json!({"ok": false, "error": e.to_string(), "errno": errno_of(&e)}),
    };
    let helper = ws.join("helper");
    let copy = fs::copy("/proc/self/exe", &helper)
        .map(|_| ())
        .and_then(|()| fs::set_permissions(&helper, fs::Permissions::from_mode(0o6755)));
    let mode = fs::metadata(&helper).map(|m| m.mode() & 0o7777).ok();
    let fifo = CString::new("/workspace/fifo")
        .map_err(io::Error::other)
        .and_then(|c| {
            // SAFETY: a valid NUL-terminated path.
            match unsafe { libc::mkfifo(c.as_ptr(), 0o666) } {
                0 => Ok(()),
                _ => Err(io::Error::last_os_error()),
            }
        });
    let dir = fs::create_dir_all(ws.join("sgid-dir")).and_then(|()| {
        fs::set_permissions(ws.join("sgid-dir"), fs::Permissions::from_mode(0o2775))
    });
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.split(' ').nth(4) == Some("/workspace"))
                .map(str::to_string)
        });
    let report = json!({
        "helper": attempt(copy),
        "helper_mode": mode,
        "fifo": attempt(fifo),
        "sgid_dir": attempt(dir),
        "mountinfo": mountinfo,
    });
    match fs::write(output_dir().join("workspace.json"), report.to_string()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("hostile-worker: cannot write workspace.json: {e}");
            1
        }
    }
}

/// Prints every argument raw to stdout and stderr: terminal escape sequences, bidi overrides, tag
/// characters. What reaches the logs, and a person's terminal through `golem-orch logs`, is up
/// to the host.
fn say(texts: &[String]) -> i32 {
    for text in texts {
        println!("{text}");
        eprintln!("{text}");
    }
    match fs::write(output_dir().join("ok.txt"), "said\n") {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("hostile-worker: cannot write ok.txt: {e}");
            1
        }
    }
}

/// Writes each `PATH HEX` pair under /output, creating parent directories: the content is hex so
/// a test can stage any bytes (invalid UTF-8 included) under any name the extractor accepts.
fn files(pairs: &[String]) -> i32 {
    let out = output_dir();
    let mut s = Steps::new("files");
    for pair in pairs.chunks(2) {
        let [path, hex] = pair else { continue };
        let target = out.join(path);
        let bytes = decode_hex(hex);
        let written = bytes.and_then(|b| {
            if let Some(parent) = target.parent() {
                fs::create_dir_all(parent)?;
            }
            fs::write(&target, b)
        });
        s.record(path, written);
    }
    s.finish();
    0
}

fn decode_hex(hex: &str) -> io::Result<Vec<u8>> {
    let bad = || io::Error::new(io::ErrorKind::InvalidInput, "content is not hex");
    if !hex.len().is_multiple_of(2) {
        return Err(bad());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(bad)
        })
        .collect()
}

/// More files than the cap, then one big file: what follows the refused entry is large, so a
/// host that stops reading the stream while it kills the container stalls the kill.
fn flood(n: u64, bytes: u64) -> i32 {
    let out = output_dir();
    let mut s = Steps::new("flood");
    let mut created = 0u64;
    let mut error = None;
    for i in 0..n {
        if let Err(e) = fs::write(out.join(format!("f{i}")), format!("{i}\n")) {
            error = Some(e);
            break;
        }
        created += 1;
    }
    s.note(
        "files",
        json!({
            "requested": n,
            "created": created,
            "error": error.as_ref().map(ToString::to_string),
        }),
    );
    let (written, err) = write_big(&out.join("zz-big"), Some(bytes));
    s.note(
        "big",
        json!({
            "requested": bytes,
            "bytes_written": written,
            "error": err.as_ref().map(ToString::to_string),
        }),
    );
    s.finish();
    0
}

/// A file that is one hole: it costs the tmpfs nothing, but its archive carries every byte.
fn sparse(bytes: u64) -> i32 {
    let mut s = Steps::new("sparse");
    write_ok(&mut s);
    let result = File::create(output_dir().join("sparse")).and_then(|f| f.set_len(bytes));
    s.note(
        "sparse",
        json!({
            "bytes": bytes,
            "ok": result.is_ok(),
            "error": result.as_ref().err().map(ToString::to_string),
        }),
    );
    s.finish();
    0
}

/// Output the init cannot read as it finds it: a mode-000 file and a mode-000 directory.
fn unreadable() -> i32 {
    let out = output_dir();
    let mut s = Steps::new("unreadable");
    write_ok(&mut s);
    let secret = out.join("secret.txt");
    let closed = out.join("closed");
    let file = fs::write(&secret, "secret\n")
        .and_then(|()| fs::set_permissions(&secret, fs::Permissions::from_mode(0o000)));
    let dir = fs::create_dir(&closed)
        .and_then(|()| fs::write(closed.join("inside.txt"), "inside\n"))
        .and_then(|()| fs::set_permissions(&closed, fs::Permissions::from_mode(0o000)));
    s.note(
        "unreadable",
        json!({
            "file": file.as_ref().err().map(ToString::to_string),
            "dir": dir.as_ref().err().map(ToString::to_string),
        }),
    );
    s.finish();
    0
}

/// Lowers the init's descriptor limit (it runs as the worker's uid, so prlimit(2) on PID 1 is
/// allowed), so that it cannot open the files it should archive.
fn prlimit_init(n: u64, soft_only: bool) -> i32 {
    let mut s = Steps::new("prlimit-init");
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit reading PID 1's limit into a valid struct.
    unsafe { libc::prlimit(1, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) };
    let limit = libc::rlimit {
        rlim_cur: n,
        rlim_max: if soft_only { old.rlim_max } else { n },
    };
    // SAFETY: prlimit with a valid new limit and no old-limit pointer.
    let r = unsafe { libc::prlimit(1, libc::RLIMIT_NOFILE, &limit, std::ptr::null_mut()) };
    let error = (r != 0).then(|| io::Error::last_os_error().to_string());
    s.note(
        "prlimit",
        json!({ "nofile": n, "ok": r == 0, "error": error }),
    );
    write_ok(&mut s);
    let out = output_dir();
    let more =
        fs::write(out.join("a.txt"), "a\n").and_then(|()| fs::write(out.join("b.txt"), "b\n"));
    s.note(
        "files",
        json!({ "error": more.as_ref().err().map(ToString::to_string) }),
    );
    s.finish();
    0
}
