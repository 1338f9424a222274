//! Attack stories for intake (issue 11, classes 6, 7, 9 and the path part of class 1): a person
//! names inputs, an attacker who shares the machine (or the network) tries to make golem-orch
//! take in something else: a link swapped in after listing, a redirect to a private service, a
//! sparse file that fills the disk, a folder name that writes to the terminal.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::harness::hostile;
use crate::harness::{files_containing, hostile_image, stderr_text, wait_until, Golem};

const SECRET: &str = "TOP-SECRET-7f3a9c-never-copy-me";

/// A 0600 file outside every input, holding [`SECRET`].
fn secret_file(g: &Golem) -> PathBuf {
    let path = g.project.path().join("private/secret.txt");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, SECRET).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// Disk blocks (not apparent size) used under `dir`, in bytes.
fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            total += m.blocks() * 512;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    total
}

fn one_line(err: &str) {
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err:?}");
    assert!(
        !err.contains('\x1b') && !err.contains('\x07'),
        "raw escape: {err:?}"
    );
}

#[test]
fn a_file_swapped_for_a_link_while_run_lists_a_directory_is_never_followed() {
    let g = Golem::new();
    let secret = secret_file(&g);
    // Many files before the target make the gap between listing and opening long.
    for i in 0..150 {
        g.file(&format!("d/f{i:03}.txt"), vec![b'a'; 16 << 10]);
    }
    let target = g.file("d/zz.txt", "harmless");
    let spare = g.project.path().join("spare");
    std::fs::create_dir_all(&spare).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, target, spare, secret) = (stop.clone(), target.clone(), spare, secret);
        std::thread::spawn(move || {
            let (link, plain) = (spare.join("link"), spare.join("plain"));
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) && n < 2_000_000 {
                n += 1;
                let _ = std::fs::remove_file(&link);
                let _ = std::os::unix::fs::symlink(&secret, &link);
                let _ = std::fs::rename(&link, &target);
                std::thread::sleep(Duration::from_micros(300));
                let _ = std::fs::write(&plain, "harmless");
                let _ = std::fs::rename(&plain, &target);
                std::thread::sleep(Duration::from_micros(300));
            }
        })
    };
    let mut staged_any = 0;
    for _ in 0..8 {
        let run = hostile(&g, &["d"], &["try-read", "/input/d/zz.txt"]);
        if run.code == 0 {
            staged_any += 1;
        } else {
            one_line(&run.stderr);
        }
        let leaks = files_containing(&g.home, SECRET.as_bytes());
        assert!(
            leaks.is_empty(),
            "secret copied through a swapped link: {leaks:?}"
        );
    }
    stop.store(true, Ordering::SeqCst);
    let _ = swapper.join();
    eprintln!("{staged_any} of 8 runs staged");
    g.assert_clean();
}

#[test]
fn a_batch_document_replaced_by_a_link_while_an_earlier_one_runs_is_refused() {
    let g = Golem::new();
    let secret = secret_file(&g);
    g.file("docs/a-first.txt", "sleep 3");
    let second = g.file("docs/b-second.txt", "exit 0");
    let home = g.home.clone();
    let swapper = std::thread::spawn(move || {
        // Once the first document's session exists, swap the second for a link to the secret.
        let started = wait_until(Duration::from_secs(60), || {
            std::fs::read_dir(home.join("sessions")).is_ok_and(|mut rd| rd.next().is_some())
        });
        std::fs::remove_file(&second).unwrap();
        std::os::unix::fs::symlink(&secret, &second).unwrap();
        started
    });
    let (result, code) = g.json([
        "batch",
        "--json",
        "--jobs",
        "1",
        "--image",
        hostile_image(),
        "docs",
        "--",
        "from-input",
    ]);
    assert!(swapper.join().unwrap(), "the first document never started");
    assert_eq!(code, 1, "{result}");
    let docs = result["documents"].as_array().unwrap();
    assert_eq!(docs[0]["status"], "staged", "{result}");
    assert_eq!(docs[1]["status"], "failed", "{result}");
    let error = docs[1]["error"].as_str().unwrap_or("");
    assert!(error.contains("link"), "{error}");
    let leaks = files_containing(&g.home, SECRET.as_bytes());
    assert!(leaks.is_empty(), "secret copied: {leaks:?}");
    g.assert_clean();
}

/// A tiny HTTP server on loopback: `/hop` redirects to `target`, `/secret` serves a secret.
struct Server {
    base: String,
}

fn serve(redirect_to: Option<String>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming().take(16) {
            let Ok(conn) = conn else { break };
            let target = redirect_to.clone();
            std::thread::spawn(move || answer(conn, target));
        }
    });
    Server { base }
}

fn answer(mut conn: TcpStream, target: Option<String>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut request = String::new();
    if reader.read_line(&mut request).is_err() {
        return;
    }
    loop {
        let mut h = String::new();
        match reader.read_line(&mut h) {
            Ok(0) | Err(_) => return,
            Ok(_) if h == "\r\n" => break,
            Ok(_) => {}
        }
    }
    let path = request.split_whitespace().nth(1).unwrap_or("/").to_string();
    let reply = match (path.as_str(), target) {
        ("/hop", Some(t)) => format!(
            "HTTP/1.1 302 Found\r\nLocation: {t}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
        _ => format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{SECRET}",
            SECRET.len()
        ),
    };
    let _ = conn.write_all(reply.as_bytes());
}

#[test]
fn a_loopback_url_is_refused_by_default_with_one_line() {
    let g = Golem::new();
    let secret = serve(None);
    let front = serve(Some(format!("{}/secret", secret.base)));
    for url in [
        format!("{}/secret", secret.base),
        format!("{}/hop", front.base),
        format!(
            "http://localhost:{}/secret",
            secret.base.rsplit(':').next().unwrap()
        ),
    ] {
        let out = g.output([
            "run",
            "--json",
            "--image",
            hostile_image(),
            &url,
            "--",
            "exit",
            "0",
        ]);
        assert!(!out.status.success(), "{url} was fetched");
        let err = stderr_text(&out);
        one_line(&err);
        assert!(err.contains("--allow-private-urls"), "{err}");
    }
    assert!(files_containing(&g.home, SECRET.as_bytes()).is_empty());
    g.assert_clean();
}

#[test]
fn with_allow_private_urls_every_redirect_hop_is_recorded_in_the_manifest_and_audit() {
    let g = Golem::new();
    let secret = serve(None);
    let target = format!("{}/secret", secret.base);
    let front = serve(Some(target.clone()));
    let first = format!("{}/hop", front.base);
    let run = hostile(&g, &["--allow-private-urls", &first], &["exit", "0"]);
    run.assert_status("staged", 0);
    let (shown, code) = g.json(["show", "--json", &run.staged()]);
    assert_eq!(code, 0);
    let input = &shown["inputs"][0];
    assert_eq!(input["source"], first.as_str(), "{shown}");
    assert_eq!(input["final_url"], target.as_str(), "{shown}");
    let hops: Vec<&str> = input["hops"]
        .as_array()
        .unwrap_or_else(|| panic!("no hops: {shown}"))
        .iter()
        .filter_map(|h| h.as_str())
        .collect();
    assert_eq!(hops, [first.as_str(), target.as_str()]);
    let audited = g
        .audit()
        .into_iter()
        .find(|r| r["event"] == "session.inputs")
        .expect("session.inputs audited");
    let text = audited.to_string();
    assert!(text.contains(&first) && text.contains(&target), "{text}");
    g.assert_clean();
}

#[test]
fn sparse_files_beyond_the_input_cap_are_refused_without_filling_the_disk() {
    let g = Golem::new();
    for (name, size) in [("two-gib.bin", 2u64 << 30), ("one-tib.bin", 1u64 << 40)] {
        let path = g.project.path().join(name);
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(size).unwrap();
        drop(f);
        let out = g.output([
            "run",
            "--json",
            "--image",
            hostile_image(),
            name,
            "--",
            "exit",
            "0",
        ]);
        assert_eq!(out.status.code(), Some(1), "{name} was taken in");
        let err = stderr_text(&out);
        one_line(&err);
        assert!(err.contains("input cap"), "{err}");
        let used = disk_usage(&g.home);
        assert!(
            used < 64 << 20,
            "{name}: {used} bytes under the state directory"
        );
        std::fs::remove_file(&path).unwrap();
    }
    g.assert_clean();
}

#[test]
fn a_sparse_file_under_the_cap_keeps_its_holes() {
    let g = Golem::new();
    let path = g.project.path().join("holes.bin");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(b"start").unwrap();
    f.set_len(200 << 20).unwrap();
    drop(f);
    let run = hostile(&g, &["--keep", "holes.bin"], &["exit", "0"]);
    run.assert_status("staged", 0);
    let copy = g
        .home
        .join("sessions")
        .join(run.session())
        .join("input/holes.bin");
    let meta = std::fs::metadata(&copy).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(meta.len(), 200 << 20);
    assert!(
        meta.blocks() * 512 < 8 << 20,
        "holes written out: {}",
        meta.blocks()
    );
    crate::harness::remove_engine_resources(&g.home);
}

#[test]
fn a_sessions_input_copy_is_removed_when_it_ends_unless_kept() {
    let g = Golem::new();
    g.file("doc.txt", "private words");
    let run = hostile(&g, &["doc.txt"], &["exit", "0"]);
    run.assert_status("staged", 0);
    let input = g.home.join("sessions").join(run.session()).join("input");
    assert!(!input.exists(), "input copy left at {}", input.display());

    let kept = hostile(&g, &["--keep", "doc.txt"], &["exit", "0"]);
    kept.assert_status("staged", 0);
    let input = g.home.join("sessions").join(kept.session()).join("input");
    assert!(
        input.join("doc.txt").is_file(),
        "--keep removed the input copy"
    );
    crate::harness::remove_engine_resources(&g.home);
}

#[test]
fn max_input_lower_than_the_input_refuses_it_with_one_line() {
    let g = Golem::new();
    g.file("big.txt", vec![b'x'; 8192]);
    let out = g.output([
        "run",
        "--json",
        "--max-input",
        "4KiB",
        "--image",
        hostile_image(),
        "big.txt",
        "--",
        "exit",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_text(&out);
    one_line(&err);
    assert!(err.contains("input cap"), "{err}");
    // --max-input can only lower the policy's cap.
    let out = g.output([
        "run",
        "--max-input",
        "1TiB",
        "--image",
        hostile_image(),
        "big.txt",
    ]);
    assert_eq!(out.status.code(), Some(1));
    one_line(&stderr_text(&out));
    g.assert_clean();
}

#[test]
fn a_batch_input_whose_parent_folder_holds_an_escape_sequence_is_refused_inertly() {
    let g = Golem::new();
    let evil = "\x1b]52;c;aGVsbG8=\x07";
    let file = g.file(&format!("{evil}/doc.txt"), "exit 0");
    g.file(&format!("docs/{evil}/doc.txt"), "exit 0");
    for input in [file.display().to_string(), "docs".to_string()] {
        let out = g.output([
            "batch",
            "--image",
            hostile_image(),
            &input,
            "--",
            "from-input",
        ]);
        assert_eq!(out.status.code(), Some(1), "{input:?}");
        let err = stderr_text(&out);
        one_line(&err);
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains('\x1b'),
            "raw escape on stdout"
        );
    }
    let out = g.output([
        "run",
        "--image",
        hostile_image(),
        &file.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    one_line(&stderr_text(&out));
    g.assert_clean();
}
