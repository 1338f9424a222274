//! Attacks on the boundary: a hostile worker (`tests/hostile-worker`, in its own scratch image)
//! tries one thing per test, and each test checks the four things a person relies on:
//!
//! 1. the host is unchanged (the project directory, the inputs, host paths);
//! 2. the stage holds only what the policy allows (regular files, 0644, within the caps);
//! 3. the audit log names what was refused;
//! 4. golem-orch reports a clear status (JSON status, exit code, one line on stderr).
//!
//! Each test names the flag or check it attacks (`plan.rs` builds the plan from the policy,
//! `engine/docker.rs` turns it into Engine API bodies), so that removing that defence makes the test
//! fail. Network probes only send when the container has no interface but `lo` (the kernel then
//! fails them locally); the bombs only run as a container's main process.
//!
//! Most stories are an [`attack!`]: the host is witnessed before the attack and checked
//! unchanged after it, and the engine checked clean of the test's containers.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{
    assert_no_half_stage, assert_untrusted_stage, attack, attack_under, audit_of, audited_plan,
    audited_rejections, chmod, docker_build, engine_resources, hostile_image,
    remove_engine_resources, session_logs, sha256_file, staged_json, staged_json_in, tree,
    untrusted, wait_until, worker_report, Golem, HostWitness, LabelGuard, Run, RunBuilder, Status,
};

/// `errno` values the kernel gives when a defence holds.
const EPERM: i64 = 1;
const ENOENT: i64 = 2;
const EACCES: i64 = 13;
const EAGAIN: i64 = 11;
const ENOSPC: i64 = 28;
const EROFS: i64 = 30;
const ENETUNREACH: i64 = 101;
/// What gVisor's network stack answers where Linux says ENETUNREACH: no route either way.
const EHOSTUNREACH: i64 = 113;

/// The errno an unroutable send gets: ENETUNREACH from Linux, EHOSTUNREACH under gVisor.
fn unreachable(g: &Golem) -> i64 {
    if under_gvisor(g) {
        EHOSTUNREACH
    } else {
        ENETUNREACH
    }
}

/// Whether this story runs under gVisor (`attack_under! { [runsc] ... }`).
fn under_gvisor(g: &Golem) -> bool {
    g.runtime.as_deref() == Some("runsc")
}

fn errno(v: &Value) -> Option<i64> {
    v["errno"].as_i64()
}

/// Runs the hostile worker's `probe` mode (`run` carries its input and environment) and checks
/// what every probe shares: staged, only the probe's own evidence, and taken inside a
/// container. Returns the run, probe.json and its text.
fn probe(g: &Golem, run: RunBuilder) -> (Run, Value, String) {
    let run = run.hostile(["probe"]).expect(Status::Staged);
    assert_eq!(
        assert_untrusted_stage(g, &run.staged()),
        ["probe.json"],
        "only the probe's own evidence is staged"
    );
    let text = std::fs::read_to_string(g.staged_files(&run.staged()).join("probe.json")).unwrap();
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["in_container"], true);
    (run, value, text)
}

/// The one input every probe gets.
fn probe_input(g: &Golem) -> PathBuf {
    g.file("in/doc.txt", "evidence")
}

/// `try-read`/`try-write` followed by the paths to try.
fn try_mode<'a>(mode: &'a str, paths: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    std::iter::once(mode).chain(paths).collect()
}

// ------------------------------------------------------------------------------------ network

attack_under! {
    [runsc, podman]
    /// Attacks `network: none`: plan.rs `build` (network = the policy's mode unless
    /// --allow-network where allowed), engine/docker.rs `worker_body` (`network_mode` and
    /// `network_disabled`). With a network, the probe would see an interface other than `lo`
    /// and refuse to send, so `attempted` would be false.
    fn tcp_egress_fails_inside_the_kernel(g)
    given { let input = probe_input(&g); }
    {
        let (run, p, _) = probe(&g, g.run().input(&input));
        assert_eq!(p["interfaces"]["names"], json!(["lo"]));
        assert_eq!(p["interfaces"]["proc_net_dev"], json!(["lo"]));
        let attempts = p["tcp_egress"].as_array().expect("tcp attempts");
        assert_eq!(attempts.len(), 2, "{attempts:?}");
        for a in attempts {
            assert_eq!(a["attempted"], true, "{a}");
            assert_eq!(a["ok"], false, "{a}");
            assert_eq!(errno(a), Some(unreachable(&g)), "{a}");
        }
        assert_eq!(audited_plan(&g, &run.session())["network"], "none");
    }
}

attack_under! {
    [runsc, podman]
    /// Attacks `network: none` (as above) with UDP, which needs no handshake to leak a datagram.
    fn udp_egress_fails_inside_the_kernel(g)
    given { let input = probe_input(&g); }
    {
        let (_, p, _) = probe(&g, g.run().input(&input));
        let udp = &p["udp_egress"];
        assert_eq!(udp["attempted"], true, "{udp}");
        assert_eq!(udp["send"]["ok"], false, "{udp}");
        assert_eq!(errno(&udp["send"]), Some(unreachable(&g)), "{udp}");
    }
}

attack_under! {
    [runsc, podman]
    /// Attacks `network: none` (as above): no name resolves, and the container's resolv.conf
    /// names none of the host's nameservers. (engine/docker.rs `worker_body` also sets
    /// `dns: [127.0.0.1]`, but with no network Docker 20.10 writes an empty resolv.conf anyway,
    /// so removing that setting alone does not change what this test sees.)
    fn dns_resolves_nothing_and_reveals_no_host_nameserver(g)
    given { let input = probe_input(&g); }
    {
        let (_, p, _) = probe(&g, g.run().input(&input));
        assert_eq!(p["dns"]["attempted"], true, "{}", p["dns"]);
        assert_eq!(p["dns"]["ok"], false, "{}", p["dns"]);
        let resolv = p["host_paths"]["/etc/resolv.conf"]["content"]
            .as_str()
            .unwrap_or("");
        for line in resolv.lines() {
            if let Some(ns) = line.trim().strip_prefix("nameserver") {
                assert_eq!(ns.trim(), "127.0.0.1", "resolv.conf: {resolv}");
            }
        }
        let host = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
        for ns in host
            .lines()
            .filter_map(|l| l.trim().strip_prefix("nameserver"))
            .map(str::trim)
            .filter(|ns| *ns != "127.0.0.1")
        {
            assert!(!resolv.contains(ns), "host nameserver {ns} leaked: {resolv}");
        }
    }
}

attack! {
    /// Attacks `network: none` from the side of the host: no route at all, so neither the
    /// Docker bridge's gateway (the host) nor its Docker API or SSH ports can be reached.
    fn the_default_gateway_and_the_hosts_ports_are_unreachable(g)
    given { let input = probe_input(&g); }
    {
        let (_, p, _) = probe(&g, g.run().input(&input));
        let gw = &p["gateway"];
        assert_eq!(gw["routes"], json!([]), "{gw}");
        assert_eq!(gw["default_routes"], json!([]), "{gw}");
        let connects = gw["connect"].as_array().expect("gateway attempts");
        assert_eq!(connects.len(), 2, "{gw}");
        for c in connects {
            assert_eq!(
                (c["attempted"].as_bool(), c["ok"].as_bool()),
                (Some(true), Some(false)),
                "{c}"
            );
            assert_eq!(errno(c), Some(ENETUNREACH), "{c}");
        }
    }
}

// ---------------------------------------------------------------------------- host filesystem

attack! {
    /// Attacks "mounts come only from the plan": plan.rs `build` (binds) and container.rs
    /// `worker_body` (bind `Mount`s only from the plan). The engine's socket is never mounted.
    fn the_docker_socket_is_not_in_the_container(g)
    given { let input = probe_input(&g); }
    {
        let (_, p, text) = probe(&g, g.run().input(&input));
        for sock in ["/var/run/docker.sock", "/run/docker.sock"] {
            let s = &p["docker_sock"][sock];
            assert_eq!(s["exists"], false, "{sock}: {s}");
            assert_eq!(s["connect"]["ok"], false, "{sock}: {s}");
            assert_eq!(errno(&s["connect"]), Some(ENOENT), "{sock}: {s}");
        }
        let mounts = p["mountinfo"].as_str().expect("mountinfo");
        assert!(!mounts.contains("docker.sock") && !text.contains("/var/run/docker.sock\\n"));
    }
}

attack_under! {
    [runsc]
    /// Attacks the same: nothing of the host is visible but the input, read-only. The root
    /// holds only what the scratch image and the plan put there; /etc/shadow, /var/lib/docker,
    /// /root and the host's project and state directories do not exist inside.
    fn host_paths_that_were_not_mounted_cannot_be_read(g)
    given {
        let input = probe_input(&g);
        g.file("neighbour.txt", "secret neighbour");
    }
    {
        let project = g.project.path().display().to_string();
        let home = g.home.display().to_string();
        let paths = [
            "/etc/shadow".to_string(),
            "/etc/passwd".to_string(),
            "/root".to_string(),
            "/home".to_string(),
            "/var/lib/docker".to_string(),
            "/proc/1/root/etc/shadow".to_string(),
            "/sys/fs/cgroup/../../../etc/shadow".to_string(),
            format!("{project}/neighbour.txt"),
            project.clone(),
            home.clone(),
            format!("{home}/audit.jsonl"),
            "/etc/hostname".to_string(),
            "/".to_string(),
        ];
        let run = g
            .run()
            .input(&input)
            .hostile(try_mode("try-read", paths.iter().map(String::as_str)))
            .expect(Status::Staged);
        assert_eq!(assert_untrusted_stage(&g, &run.staged()), ["reads.json"]);
        let reads = staged_json(&g, &run, "reads.json");
        for path in &paths[..11] {
            let r = &reads[path.as_str()];
            assert_eq!(r["exists"], false, "{path} is visible: {r}");
            // PID 1 is golem-orch's init, which is not dumpable: its root is not even reachable.
            let errno = if path.starts_with("/proc/1/") {
                EACCES
            } else {
                ENOENT
            };
            assert_eq!(r["stat_errno"], errno, "{path}: {r}");
        }
        // The container's own files, not the host's.
        assert_eq!(reads["/etc/hostname"]["content"], "golem\n");
        // The init's mount point is random per session: `.golem-init-` and 32 hex digits.
        let root: Vec<&str> = reads["/"]["listing"]
            .as_array()
            .expect("root listing")
            .iter()
            .filter_map(Value::as_str)
            .map(|name| match name.strip_prefix(".golem-init-") {
                Some(hex) if hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
                    ".golem-init-<random>"
                }
                _ => name,
            })
            .collect();
        assert_eq!(
            root,
            [
                ".dockerenv",
                ".golem-init-<random>",
                "dev",
                "etc",
                "hostile-worker",
                "input",
                "output",
                "proc",
                "sys",
                "tmp"
            ],
            "the root holds something the plan did not put there"
        );
        let text = reads.to_string();
        assert!(!text.contains("secret neighbour") && !text.contains("root:"));
    }
}

/// Attacks plan.rs `build` (`/input` bind `read_only: true`, whatever the policy says, since
/// `Policy::validate` refuses `input: rw`) and engine/docker.rs `worker_body`
/// (`readonly_rootfs`, which also makes Docker mount its /etc/hosts, /etc/hostname and
/// /etc/resolv.conf read-only). The errno must be EROFS: the mount refuses, not merely file
/// modes (the input copy is root-owned 0644, which would give EACCES without the read-only mount).
/// Not an [`attack!`]: `--keep` leaves the container by design, so the end removes it instead of
/// asserting the engine clean.
#[test]
fn inputs_and_the_root_filesystem_are_read_only() {
    let g = Golem::new();
    let input = g.file("in/doc.txt", "evidence");
    let witness = HostWitness::take(&g);
    let targets = [
        "/input/doc.txt",
        "/input/new.txt",
        "/pwned",
        "/etc/pwned",
        "/hostile-worker",
        "/tmp/../pwned",
        "/output/../escaped",
        // Docker's own per-container files, bind-mounted from the host's disk (no quota there):
        // read-only only because the root filesystem is.
        "/etc/hosts",
        "/etc/hostname",
        "/etc/resolv.conf",
    ];
    // --keep: the input copy is otherwise removed when the session ends.
    let run = g
        .run()
        .flags(["--keep"])
        .input(&input)
        .hostile(try_mode("try-write", targets))
        .expect(Status::Staged);
    assert_eq!(assert_untrusted_stage(&g, &run.staged()), ["writes.json"]);
    let writes = staged_json(&g, &run, "writes.json");
    for t in targets {
        assert_eq!(writes[t]["ok"], false, "{t} was writable: {writes}");
        assert_eq!(errno(&writes[t]), Some(EROFS), "{t}: {}", writes[t]);
    }
    // The session's copy of the input is still what was taken in.
    let (manifest, _) = g.json(["show", &run.staged(), "--json"]);
    let copy = g
        .home
        .join("sessions")
        .join(run.session())
        .join("input/doc.txt");
    assert_eq!(manifest["inputs"][0]["sha256"], sha256_file(&copy));
    assert_eq!(std::fs::read(&copy).unwrap(), b"evidence");
    witness.assert_unchanged();
    remove_engine_resources(&g.home);
}

// ------------------------------------------------------------------------------- privileges

attack_under! {
    [runsc, podman]
    /// Attacks the policy's non-root `user` (plan.rs `build` → `user`), container.rs
    /// `worker_body` `cap_drop: [ALL]` and `security_opt: [no-new-privileges]`, and the
    /// noexec,nosuid output tmpfs (plan.rs `Output::mount_options`): setuid(0) fails, every
    /// capability set is empty, no_new_privs is set, and a setuid file cannot even be executed.
    fn the_worker_cannot_become_root_or_gain_capabilities(g)
    given { let input = probe_input(&g); }
    {
        let (run, p, _) = probe(&g, g.run().input(&input));
        // The session's own uid/gid from golem-orch's reserved range (worker_uid), never root.
        let me = p["uid"].as_i64().expect("uid");
        assert!(
            golem_orch::worker_uid::is_session_id(me as u32),
            "uid {me} is not a per-session uid"
        );
        assert_eq!((p["uid"].as_i64(), p["euid"].as_i64()), (Some(me), Some(me)));
        assert_eq!((p["gid"].as_i64(), p["egid"].as_i64()), (Some(me), Some(me)));
        let su = &p["setuid_root"];
        assert_eq!(errno(&su["setuid"]), Some(EPERM), "{su}");
        assert_eq!(errno(&su["setgid"]), Some(EPERM), "{su}");
        assert_eq!(
            (su["uid_after"].as_i64(), su["euid_after"].as_i64()),
            (Some(me), Some(me))
        );
        for set in ["cap_eff", "cap_prm", "cap_inh", "cap_bnd", "cap_amb"] {
            // gVisor's /proc/self/status has no CapAmb line (it has no ambient capabilities).
            if set == "cap_amb" && under_gvisor(&g) && p[set]["error"].is_string() {
                continue;
            }
            assert_eq!(p[set], "0000000000000000", "{set}");
        }
        if !under_gvisor(&g) {
            assert_eq!(p["no_new_privs"], "1");
            // Seccomp is on (mode 2, filter): the engine's default profile.
            assert_eq!(p["seccomp"], "2");
        }
        // (gVisor's /proc/self/status has neither line: its seccomp filter is on the sandbox's
        // own host processes, outside what the worker can see, and the verified settings hold
        // no-new-privileges.)
        // Writable places are noexec: nothing planted can be run, setuid or not.
        for place in ["can_write_tmp_and_exec", "can_write_output_and_exec"] {
            assert_eq!(p[place]["write"]["ok"], true, "{place}: {}", p[place]);
            assert_eq!(p[place]["exec"]["ok"], false, "{place}: {}", p[place]);
        }
        let plan = audited_plan(&g, &run.session());
        assert_eq!(plan["user"], format!("{me}:{me}"));
        assert_eq!(plan["cap_drop"], json!(["ALL"]));
    }
}

attack_under! {
    [runsc]
    /// Attacks the engine's defaults that golem-orch relies on and never loosens: no
    /// `privileged` (engine/docker.rs `worker_body` sets `privileged: false`), no added
    /// capabilities (Docker's default set has no `CAP_SYS_ADMIN` even before `cap_drop: [ALL]`),
    /// and the default seccomp profile (no `security_opt` disables it). mount(2), a new user
    /// namespace (which would hand the worker capabilities inside it) and tracing PID 1 are all
    /// refused.
    fn mount_user_namespaces_and_ptrace_of_pid1_are_refused(g)
    given { let input = probe_input(&g); }
    {
        let (_, p, _) = probe(&g, g.run().input(&input));
        assert_eq!(
            errno(&p["mount_attempt"]["mount"]),
            Some(EPERM),
            "{}",
            p["mount_attempt"]
        );
        // gVisor implements user namespaces inside its own kernel: the capabilities one hands out
        // are the sentry's, never the host kernel's (SECURITY.md, gVisor); under runc it is refused.
        if !under_gvisor(&g) {
            assert_eq!(p["unshare_userns"]["ok"], false, "{}", p["unshare_userns"]);
        }
        assert_eq!(
            p["ptrace_attempt"]["pid1"]["ok"], false,
            "{}",
            p["ptrace_attempt"]
        );
        assert_eq!(errno(&p["ptrace_attempt"]["pid1"]), Some(EPERM));
        let mounts = p["mountinfo"].as_str().unwrap_or("");
        assert!(!mounts.contains(" /tmp/m "), "the mount happened: {mounts}");
    }
}

attack! {
    /// Attacks the init that carries the output out (worker-image `init`, bind-mounted read-only
    /// as PID 1 by plan.rs `INIT_TARGET_PREFIX`): the worker writes a complete forged tar to its
    /// own stdout, tries to open the init's stdout and memory, signals it with SIGTERM, SIGKILL
    /// and SIGSTOP, and leaves a detached process rewriting a file in /output after it exits.
    /// The forged archive lands in the logs, never in the stage; the init is neither reachable
    /// nor stopped; and the leftover process is killed before the archive is made, so the
    /// session ends at once.
    fn the_worker_cannot_forge_the_archive_or_outlive_the_init(g) {
        let run = g.run().hostile(["forge-archive"]).expect(Status::Staged);
        let steps = worker_report(&g.home, &run.session(), "forge-archive")["steps"].clone();
        assert_eq!(steps["forged tar on stdout"]["ok"], true, "{steps}");
        for step in ["open /proc/1/fd/1", "open /proc/1/mem"] {
            assert_eq!(steps[step]["ok"], false, "{step} succeeded: {steps}");
            assert!(
                matches!(errno(&steps[step]), Some(EACCES | EPERM)),
                "{step}: {steps}"
            );
        }
        let state = steps["pid 1 state after signals"].as_str().unwrap_or("?");
        assert!(
            state == "S" || state == "R",
            "the init was stopped or killed: {steps}"
        );
        // Signals 1-31 are all dropped by the kernel (glibc's internal 33 checks its sender).
        let caught = steps["pid 1 caught signals"].as_str().unwrap_or("?");
        let caught = u64::from_str_radix(caught, 16).expect("SigCgt mask");
        assert_eq!(caught & ((1 << 31) - 1), 0, "the init catches signals: {steps}");
        assert_eq!(steps["late writer started"], true, "{steps}");
        let files = assert_untrusted_stage(&g, &run.staged());
        assert_eq!(files, ["late.txt", "ok.txt"], "the forged evil.txt was staged");
        let late = std::fs::read_to_string(g.staged_files(&run.staged()).join("late.txt")).unwrap();
        assert!(
            late.is_empty() || (late.len() == 2 && late.ends_with('\n')),
            "{late:?}"
        );
        let logs = session_logs(&g.home, &run.session());
        assert!(logs.contains("forged by the worker"), "{logs}");
    }
}

/// The hostile image again, now declaring a HEALTHCHECK that plants a file in /output every
/// second. The engine would run it with `exec`, beside the init and outside its control (even
/// while the init archives /output), so golem-orch switches it off (engine/docker.rs `worker_body`,
/// `healthcheck: NONE`). Built once per test binary, `FROM` the local hostile image.
fn image_with_a_healthcheck() -> &'static str {
    const TAG: &str = "golem-test-hostile-healthcheck:latest";
    static ONCE: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        let dockerfile = format!(
            "FROM {}\nHEALTHCHECK --interval=1s --timeout=1s \
             CMD [\"/hostile-worker\", \"try-write\", \"/output/planted-by-healthcheck\"]\n",
            hostile_image()
        );
        let context = tempfile::tempdir().expect("context");
        std::fs::write(context.path().join("Dockerfile"), dockerfile).expect("Dockerfile");
        docker_build(TAG, context.path());
    });
    TAG
}

attack! {
    /// Attacks engine/docker.rs `worker_body`'s `healthcheck: NONE` with an image that declares one
    /// (see [`image_with_a_healthcheck`]): nothing is planted in /output while the worker sleeps.
    fn an_images_healthcheck_never_runs_beside_the_worker(g) {
        let run = g
            .run()
            .image(image_with_a_healthcheck())
            .args(["sleep", "4"])
            .expect(Status::Staged);
        let files = assert_untrusted_stage(&g, &run.staged());
        assert!(files.is_empty(), "the healthcheck ran and planted {files:?}");
    }
}

attack! {
    /// Attacks the PID namespace every container gets (engine/docker.rs `worker_body` never sets
    /// `pid_mode`) and the shared uid 65534: another session's worker, running as the same uid
    /// at the same time, is not even visible, so it can be neither signalled nor traced. The
    /// worker sees only itself and its own init, which it cannot trace either.
    fn another_sessions_worker_cannot_be_seen_signalled_or_traced(g) {
        let victim = Golem::new();
        let victim_run = victim
            .spawn(victim.run().hostile(["sleep", "300"]))
            .wait_workers(1);

        let run = g.run().hostile(["procs"]).expect(Status::Staged);
        // hostile-worker only looks at other processes as its container's PID 1; anything else
        // means it shares a PID namespace with something.
        let report = worker_report(&g.home, &run.session(), "procs");
        assert!(
            report["error"].is_null(),
            "the worker is not PID 1 of its own PID namespace: {report}"
        );
        assert_eq!(assert_untrusted_stage(&g, &run.staged()), ["procs.json"]);
        let procs = staged_json(&g, &run, "procs.json");
        let list = procs["processes"].as_array().expect("process list");
        assert_eq!(
            list.len(),
            2,
            "the worker sees processes other than itself and its init: {procs}"
        );
        let init = &list[0];
        assert_eq!((&init["pid"], &init["self"]), (&json!(1), &json!(false)), "{procs}");
        // comm keeps 15 bytes of the random `/.golem-init-<hex>`.
        let comm = init["comm"].as_str().unwrap_or("");
        assert!(comm.starts_with(".golem-init-"), "{procs}");
        assert!(init["cmdline"]
            .as_str()
            .is_some_and(|c| c.contains(&format!(
                " {} {} ",
                golem_protocol::init::COMMAND,
                golem_protocol::init::FLAG_PID1
            ))));
        assert_eq!(errno(&init["ptrace_seize"]), Some(EPERM), "{procs}");
        assert_eq!(list[1]["self"], true);
        assert!(!procs.to_string().contains("sleep 300"));

        let out = victim_run.signal(libc::SIGINT).output();
        assert_eq!(
            out.status.code(),
            Some(130),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        victim.assert_clean();
    }
}

// ---------------------------------------------------------------------------- the output

attack_under! {
    [runsc, podman]
    /// Attacks extract/mod.rs `extract` (only regular files and directories leave) and the audit of
    /// every refusal (`Session::steps` (session/mod.rs), `entry.rejected`). session.rs checks the reasons in the
    /// manifest; this names every refusal in the audit log, the socket the worker made included
    /// (the init lists it as an entry it could not archive).
    fn links_fifos_setuid_files_and_sockets_are_refused_and_audited_by_name(g) {
        let run = g.run().hostile(["symlinks"]).expect(Status::Staged);
        let report = worker_report(&g.home, &run.session(), "symlinks");
        for step in ["passwd -> /etc/passwd", "root -> /", "fifo", "sock"] {
            assert_eq!(
                report["steps"][step]["ok"], true,
                "the worker could not even try {step}: {report}"
            );
        }
        assert_eq!(report["steps"]["suid"]["mode"], "4755", "{report}");
        let staged = assert_untrusted_stage(&g, &run.staged());
        assert_eq!(staged.len(), 1, "{staged:?}");
        assert!(staged == ["ok.txt"] || staged == ["hard"], "{staged:?}");
        let audited = audited_rejections(&g, &run.session());
        let reason = |name: &str| {
            audited
                .iter()
                .find(|(p, _)| p == &format!("output/{name}"))
                .map(|(_, r)| r.as_str())
                .unwrap_or_else(|| panic!("output/{name} not audited: {audited:?}"))
        };
        assert_eq!(reason("passwd"), "symlink to /etc/passwd");
        assert_eq!(reason("root"), "symlink to /");
        assert_eq!(reason("fifo"), "fifo");
        assert_eq!(reason("suid"), "setuid bit");
        let hard = if staged == ["ok.txt"] { "hard" } else { "ok.txt" };
        assert!(reason(hard).starts_with("hard link to"), "{audited:?}");
        // tar has no type for a socket: the init names it as an entry it could not archive.
        assert_eq!(
            reason("sock"),
            "not archived by the init: a socket (tar has no type for it)"
        );
        assert_eq!(audited.len(), 6, "{audited:?}");
        assert_eq!(run.rejected, 6);
        assert_eq!(run.json["rejected"], 6);
    }
}

attack_under! {
    [runsc, podman]
    /// Attacks the output mount (engine/docker.rs `worker_body`: /output is a tmpfs mount point the
    /// worker cannot remove, rename or replace) and extract's `check_root_entry` (an archive
    /// whose first entry is not the /output directory is refused whole). Every replacement fails
    /// with the kernel's errno, the symlinks left inside are refused by name, and nothing
    /// escapes to the host.
    fn replacing_the_output_directory_fails_and_nothing_escapes(g) {
        let run = g.run().hostile(["replace-output"]).expect(Status::Staged);
        let steps = worker_report(&g.home, &run.session(), "replace-output")["steps"].clone();
        for step in [
            "remove_dir output",
            "rename output away",
            "symlink output -> /",
            "create output/../escaped",
            "rename output/x to output/../x",
            "write through output/x/pwned",
        ] {
            assert_eq!(steps[step]["ok"], false, "{step} succeeded: {steps}");
        }
        assert_eq!(steps["output after"]["is_symlink"], false, "{steps}");
        assert_eq!(assert_untrusted_stage(&g, &run.staged()), Vec::<String>::new());
        let mut audited = audited_rejections(&g, &run.session());
        audited.sort();
        assert_eq!(
            audited,
            [
                ("output/up".to_string(), "symlink to ..".to_string()),
                ("output/x".to_string(), "symlink to /".to_string()),
            ]
        );
    }
}

attack! {
    /// Attacks extract/names.rs `parse_name` (UTF-8 only, no control characters, components of at
    /// most `MAX_COMPONENT_BYTES`): each hostile name is refused with its reason, in the audit
    /// log too.
    fn non_utf8_overlong_and_newline_names_are_refused_with_their_reasons(g) {
        let run = g.run().hostile(["names"]).expect(Status::Staged);
        let steps = worker_report(&g.home, &run.session(), "names")["steps"].clone();
        for step in ["invalid utf-8 name", "255-byte name", "newline in name"] {
            assert_eq!(steps[step]["ok"], true, "the worker could not make {step}");
        }
        assert_eq!(assert_untrusted_stage(&g, &run.staged()), ["ok.txt"]);
        let audited = audited_rejections(&g, &run.session());
        let (manifest, _) = g.json(["show", &run.staged(), "--json"]);
        let in_manifest: Vec<(String, String)> = manifest["rejected"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["path"].as_str().unwrap().to_string(),
                    r["reason"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(audited, in_manifest, "the audit log and the manifest disagree");
        let find = |needle: &str| {
            audited
                .iter()
                .find(|(_, r)| r.contains(needle))
                .unwrap_or_else(|| panic!("no rejection for {needle:?}: {audited:?}"))
                .clone()
        };
        let (path, _) = find("name is not valid UTF-8");
        assert!(path.starts_with("output/bad"), "{path}");
        let (path, reason) = find("path component too long");
        assert_eq!(reason, "path component too long: 255 bytes > 128");
        assert_eq!(path, format!("output/{}", "n".repeat(255)));
        let (path, reason) = find("control character");
        assert_eq!(reason, "control character U+000A in name");
        assert_eq!(
            path, "output/new\\u{a}line",
            "the name is shown escaped, on one line"
        );
        assert_eq!(audited.len(), 3, "{audited:?}");
    }
}

attack! {
    /// Attacks the tmpfs `nr_inodes` (plan.rs `build`: `max_files * 2 + 16`, applied by
    /// `Output::mount_options`) and extract's `max_files` check: with the untrusted
    /// policy as shipped, 100,000 empty files (which cost no bytes, so `size=` cannot stop them)
    /// are stopped by the kernel after a few hundred, and the output is rejected as a whole.
    fn a_hundred_thousand_files_are_stopped_by_the_kernel_and_rejected_whole(g) {
        let run = g
            .run()
            .hostile(["many", "100000", "empty"])
            .expect(Status::Rejected);
        run.assert_one_error_line("rejected");
        let max_files = untrusted().output.max_files;
        let too_many = format!("archive has more than {max_files} files");
        assert!(run.stderr.contains(&too_many), "{}", run.stderr);
        assert!(run.staged_id.is_none());
        assert!(run.json["staged"].is_null());
        let max_inodes = audited_plan(&g, &run.session())["output"]["max_inodes"]
            .as_u64()
            .unwrap();
        assert_eq!(max_inodes, max_files * 2 + 16);
        let files = worker_report(&g.home, &run.session(), "many")["steps"]["files"].clone();
        let created = files["created"].as_u64().unwrap();
        assert!(
            created < max_inodes,
            "the kernel let {created} files through a {max_inodes}-inode output"
        );
        assert_eq!(errno(&files), Some(ENOSPC), "{files}");
        assert!(g.staged().is_empty());
        assert_no_half_stage(&g.home);
        let rejected: Vec<Value> = audit_of(&g, &run.session())
            .into_iter()
            .filter(|r| r["event"] == "output.rejected")
            .collect();
        assert_eq!(rejected.len(), 1);
        assert_eq!(rejected[0]["data"]["error"], too_many.as_str());
    }
}

attack_under! {
    [runsc, podman]
    /// Attacks extract/entry.rs `check_file_caps`'s per-file cap with the shipped policy (8 MiB): the one
    /// oversized file is refused by name in the audit log, the rest is staged.
    fn one_file_over_the_cap_is_refused_by_name_and_the_rest_staged(g) {
        let cap = untrusted().output.max_file_bytes.bytes();
        let over = (cap + 1).to_string();
        let run = g.run().hostile(["bigfile", &over]).expect(Status::Staged);
        assert_eq!(assert_untrusted_stage(&g, &run.staged()), ["ok.txt"]);
        assert_eq!(
            audited_rejections(&g, &run.session()),
            [(
                "output/big".to_string(),
                format!("file too large: {over} bytes > cap {cap}")
            )]
        );
    }
}

attack! {
    /// Attacks the tmpfs `size=` (plan.rs `Output`, from `max_total_bytes`): with the shipped
    /// policy, a worker trying to fill the disk is stopped by the kernel at 32 MiB (ENOSPC), in
    /// a tmpfs that never touches the host's disk; its one huge file is then over the per-file
    /// cap and refused. session.rs covers a narrowed cap; this is the policy as shipped.
    fn filling_the_disk_stops_at_the_volume_size_with_the_shipped_policy(g) {
        let run = g.run().hostile(["fill"]).expect(Status::Staged);
        let big = worker_report(&g.home, &run.session(), "fill")["steps"]["big"].clone();
        assert_eq!(errno(&big), Some(ENOSPC), "{big}");
        let written = big["bytes_written"].as_u64().unwrap();
        assert!(
            written <= untrusted().output.max_total_bytes.bytes(),
            "{written} bytes written"
        );
        assert!(
            written > untrusted().output.max_file_bytes.bytes(),
            "the fill stopped early: {big}"
        );
        assert_eq!(assert_untrusted_stage(&g, &run.staged()), ["ok.txt"]);
        let audited = audited_rejections(&g, &run.session());
        assert_eq!(audited.len(), 1, "{audited:?}");
        assert_eq!(audited[0].0, "output/big");
        assert!(audited[0].1.starts_with("file too large"), "{audited:?}");
    }
}

// ---------------------------------------------------------------------------- resources

/// Processes of a finished fork bomb still alive on the host.
fn forkbomb_survivors() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
                .filter(|pid| {
                    std::fs::read(format!("/proc/{pid}/cmdline"))
                        .map(|c| c.starts_with(b"/hostile-worker\0forkbomb\0"))
                        .unwrap_or(false)
                })
                .collect()
        })
        .unwrap_or_default()
}

attack! {
    /// Attacks plan.rs `build` `pids_limit` (the policy's `resources.pids`, 64 for untrusted),
    /// applied by engine/docker.rs `worker_body`: the bomb (bounded at 1000 so a broken limit
    /// cannot hurt a shared host) gets EAGAIN below the limit, its main process still reports
    /// and exits, the session finishes, and no forked process survives the container.
    fn a_fork_bomb_hits_the_pids_limit_and_the_session_still_finishes(g) {
        let run = g.run().hostile(["forkbomb", "1000"]).expect(Status::Staged);
        let bomb = worker_report(&g.home, &run.session(), "forkbomb");
        let forked = bomb["forked"].as_u64().unwrap();
        let pids = untrusted().resources.pids;
        assert!(forked < pids, "forked {forked} processes: {bomb}");
        assert_eq!(errno(&bomb), Some(EAGAIN), "{bomb}");
        assert_eq!(audited_plan(&g, &run.session())["pids_limit"], pids);
        assert_eq!(assert_untrusted_stage(&g, &run.staged()), Vec::<String>::new());
        assert!(
            wait_until(Duration::from_secs(30), || forkbomb_survivors().is_empty()),
            "fork bomb processes outlived their container: {:?}",
            forkbomb_survivors()
        );
    }
}

attack_under! {
    [runsc, podman]
    /// Attacks `Session::steps` (session/mod.rs) → container.rs `finished` (SIGKILL at the wall-clock limit) with
    /// a worker that never sleeps. Without the kill the run would hang (the test's hang guard
    /// then fails it). The CPU limit (`nano_cpus`) is in the audited plan.
    fn a_cpu_spin_past_its_timeout_is_killed_and_reported(g) {
        let run = g
            .run()
            .flags(["--timeout", "2s"])
            .hostile(["spin"])
            .expect(Status::Timeout);
        run.assert_one_error_line("timeout");
        assert!(
            run.stderr.contains("killed after the 2s timeout"),
            "{}",
            run.stderr
        );
        assert!(run.timed_out);
        assert_eq!(run.json["timed_out"], true);
        assert!(run.json["staged"].is_null());
        let events = audit_of(&g, &run.session());
        let exited = events
            .iter()
            .find(|r| r["event"] == "container.exited")
            .expect("exit audited");
        assert_eq!(exited["data"]["timed_out"], true);
        let plan = audited_plan(&g, &run.session());
        assert_eq!(plan["timeout_secs"], 2);
        assert_eq!(plan["nano_cpus"], 1_000_000_000u64);
        assert!(events
            .iter()
            .any(|r| r["event"] == "session.finished" && r["data"]["status"] == "timeout"));
        assert_no_half_stage(&g.home);
    }
}

attack! {
    /// Attacks session/mod.rs `run`'s cancel path (`Engine::kill`, SIGKILL, never a polite stop)
    /// with a worker that ignores SIGTERM and SIGINT, when the person stops golem-orch with
    /// SIGTERM. session.rs covers the timeout path and Ctrl-C with a sleeping worker.
    fn a_worker_ignoring_sigterm_is_still_stopped_when_the_person_cancels(g) {
        let run = g
            .spawn(g.run().hostile(["ignore-term"]))
            .wait_workers(1)
            .signal(libc::SIGTERM)
            .finish()
            .expect(Status::Cancelled);
        run.assert_one_error_line("cancelled");
        assert!(run.json["staged"].is_null());
        assert!(audit_of(&g, &run.session())
            .iter()
            .any(|r| r["event"] == "session.finished" && r["data"]["status"] == "cancelled"));
        assert_no_half_stage(&g.home);
    }
}

// ---------------------------------------------------------------------------- credentials

/// A unique text for one credential, to look for wherever it must not appear.
fn canary(what: &str) -> String {
    format!("golem-canary-{what}-7f3a9c")
}

/// A HOME full of credentials (keys, cloud and Docker configs), each file holding its canary.
fn credential_files(fh: &std::path::Path) {
    for (file, what) in [
        (".ssh/id_ed25519", "ssh-key"),
        (".aws/credentials", "aws-file"),
        (".docker/config.json", "docker-config"),
        (".git-credentials", "git-credentials"),
        (".netrc", "netrc"),
        (".config/gh/hosts.yml", "gh-hosts"),
    ] {
        let path = fh.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, canary(what)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
}

/// The environment of a person with cloud keys, tokens, an ssh agent, a git askpass helper,
/// Docker settings and `fh` as HOME.
fn credential_env(fh: &std::path::Path, agent: &std::path::Path) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_SECRET_ACCESS_KEY", canary("aws-secret")),
        ("AWS_ACCESS_KEY_ID", canary("aws-id")),
        ("AWS_SESSION_TOKEN", canary("aws-session")),
        ("GITHUB_TOKEN", canary("github")),
        ("GH_TOKEN", canary("gh")),
        ("NPM_TOKEN", canary("npm")),
        (
            "GIT_ASKPASS",
            format!("/usr/local/bin/{}", canary("askpass")),
        ),
        ("SSH_AUTH_SOCK", agent.display().to_string()),
        ("DOCKER_CONFIG", fh.join(".docker").display().to_string()),
        (
            "DOCKER_CERT_PATH",
            format!("/certs/{}", canary("docker-cert")),
        ),
        ("KUBECONFIG", format!("/kube/{}", canary("kubeconfig"))),
        ("HOME", fh.display().to_string()),
    ]
}

attack! {
    /// Attacks plan.rs `build` (the environment is exactly the policy's `env.set` plus
    /// `env.pass`, empty in every shipped policy) and engine/docker.rs `worker_body` (`env` from the
    /// plan only): golem-orch runs with cloud keys, tokens, an ssh agent socket, a git askpass
    /// helper, Docker settings and a HOME full of credentials; none of it is visible inside.
    fn the_hosts_environment_and_credentials_do_not_leak_in(g)
    given { let input = probe_input(&g); }
    {
        let fake_home = tempfile::tempdir().expect("fake home");
        let fh = fake_home.path().canonicalize().unwrap();
        credential_files(&fh);
        // A live agent socket, as ssh-agent would leave.
        let agent = fh.join("agent.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&agent).expect("agent socket");
        let secrets = credential_env(&fh, &agent);
        let secret_env = || secrets.iter().map(|(k, v)| (*k, v.as_str()));
        let (run, p, text) = probe(&g, g.run().input(&input).envs(secret_env()));
        let env = p["env"].as_object().expect("env");
        let mut keys: Vec<&str> = env.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(keys, ["HOME", "HOSTNAME", "LANG", "PATH"], "{env:?}");
        assert_eq!(env["HOME"], "/");
        for (k, v) in &secrets {
            assert!(!text.contains(v.as_str()), "{k}'s value leaked into the container");
        }
        let plan = audited_plan(&g, &run.session());
        assert_eq!(plan["env"], json!({"LANG": "C.UTF-8"}));

        // The files behind those variables are not there either.
        let paths = [
            fh.join(".ssh/id_ed25519"),
            fh.join(".aws/credentials"),
            agent.clone(),
            fh.clone(),
            PathBuf::from("/.ssh/id_ed25519"),
            PathBuf::from("/.aws/credentials"),
            PathBuf::from("/.docker/config.json"),
            PathBuf::from("/root/.ssh"),
        ];
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        let run = g
            .run()
            .envs(secret_env())
            .hostile(try_mode("try-read", shown.iter().map(String::as_str)))
            .expect(Status::Staged);
        let reads = staged_json(&g, &run, "reads.json");
        for p in &shown {
            let r = &reads[p.as_str()];
            assert_eq!(r["exists"], false, "{p}: {r}");
        }
        // The paths above were the worker's arguments; what must not appear is any credential.
        let everything = format!("{reads} {} {}", session_logs(&g.home, &run.session()), run.json);
        assert!(
            !everything.contains("golem-canary-"),
            "a credential leaked: {everything}"
        );
    }
}

// ---------------------------------------------------------------------------- other sessions

/// Attacks the state directory's isolation: plan.rs `build` never binds the state directory,
/// and when it lies inside a repository that `full` mounts read-write, masks it with an empty
/// read-only tmpfs (`masks`, engine/docker.rs `worker_body`). A `full` worker tries to write into
/// a second session's stage while that session is half-way through staging (`.tmp-<id>`), into
/// an earlier staged commit, to forge a new one, and through the host's absolute paths; a
/// `session` worker tries to climb out of /workspace. All fail, and both stages are unchanged.
/// Not an [`attack!`]: the state directory lives inside the project, which the attack changes.
#[test]
fn a_worker_cannot_write_into_another_sessions_stage() {
    let g = Golem::new();
    g.git_init();
    let home = g.project.path().join(".golem");
    std::fs::create_dir_all(&home).unwrap();
    let home = home.canonicalize().unwrap();
    let _engine = LabelGuard(home.clone());

    // An earlier staged commit.
    let earlier = g
        .run()
        .home(&home)
        .hostile(["exit", "0"])
        .expect(Status::Staged);
    let earlier_id = earlier.staged();

    // A second session, stopped half-way through staging: its `.tmp-<id>` holds its files.
    let second = g
        .spawn(
            g.run()
                .home(&home)
                .failpoint("staging")
                .hostile(["exit", "0"]),
        )
        .wait_failpoint("staging");
    let tmp = crate::harness::half_stages(&home);
    assert_eq!(tmp.len(), 1, "{tmp:?}");
    let tmp = tmp[0].clone();
    assert!(home
        .join("staged")
        .join(&tmp)
        .join("files/ok.txt")
        .is_file());

    // Only golem-orch's mounts stand in the way, not the host's file modes.
    chmod(&["-R", "a+rwX"], g.project.path());
    // Except the state directory's write bits: one others can write is refused outright (and
    // golem-orch keeps it 0700), so only its mask and the missing mounts are under test here.
    chmod(&["-R", "go-w"], &home);
    let before_tmp = tree(&home.join("staged").join(&tmp));
    let before_earlier = tree(&home.join("staged").join(&earlier_id));
    let targets = [
        format!("/repo/.golem/staged/{tmp}/files/evil.txt"),
        format!("/repo/.golem/staged/{tmp}/manifest.json"),
        format!("/repo/.golem/staged/{earlier_id}/files/ok.txt"),
        "/repo/.golem/staged/0123456789abcdef0123456789abcdef/manifest.json".to_string(),
        "/repo/.golem/audit.jsonl".to_string(),
        format!("{}/staged/{tmp}/files/evil.txt", home.display()),
        format!("{}/staged/{earlier_id}/files/ok.txt", home.display()),
        "/workspace/../staged/evil.txt".to_string(),
    ];
    let attacker = g
        .run()
        .home(&home)
        .level("full")
        .hostile(try_mode("try-write", targets.iter().map(String::as_str)))
        .expect(Status::Staged);
    let writes = staged_json_in(&home, &attacker, "writes.json");
    for t in &targets {
        assert_eq!(writes[t]["ok"], false, "{t} was writable: {writes}");
    }
    assert_eq!(
        writes["/repo/.golem/audit.jsonl"]["listing"],
        json!([]),
        "the state directory is visible at /repo/.golem"
    );

    assert_eq!(
        tree(&home.join("staged").join(&tmp)),
        before_tmp,
        "the half-built staged commit changed"
    );
    assert_eq!(tree(&home.join("staged").join(&earlier_id)), before_earlier);

    // Stop the half-staged session; the next run in this state directory tidies it up.
    second.kill();
    let climber = g
        .run()
        .home(&home)
        .level("session")
        .hostile([
            "try-write",
            "/workspace/../evil.txt",
            "/workspace/../../audit.jsonl",
        ])
        .expect(Status::Staged);
    let writes = staged_json_in(&home, &climber, "writes.json");
    // `..` resolves inside the container's own tree: /workspace/.. is its read-only root.
    for t in ["/workspace/../evil.txt", "/workspace/../../audit.jsonl"] {
        assert_eq!(writes[t]["ok"], false, "{t}: {writes}");
        assert_eq!(errno(&writes[t]), Some(EROFS), "{t}: {writes}");
    }

    // The earlier commit is untouched; the half-built one was removed whole by the next run.
    assert_eq!(tree(&home.join("staged").join(&earlier_id)), before_earlier);
    assert!(!home.join("staged").join(&tmp).exists());
    assert!(!home
        .join("staged/0123456789abcdef0123456789abcdef")
        .exists());
    assert!(!home.join("evil.txt").exists() && !home.join("staged/evil.txt").exists());
    assert_no_half_stage(&home);
    assert!(g.audit_verifies_in(&home));
    assert!(engine_resources(&home).is_empty());
}
