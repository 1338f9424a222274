//! Git for the clearance and push stories: repositories made and read with the real `git`, with
//! a fixed identity so commits do not depend on the machine's configuration.

use std::path::Path;
use std::process::Command;

use super::{stderr_text, Golem};

/// A `.gitignore` that keeps the project's `.golem/` directory out of commits.
pub(crate) const IGNORE_GOLEM: (&str, &str) = (".gitignore", ".golem/\n");

impl Golem {
    /// Makes the project a git repository with no commit (enough for levels that mount it).
    pub(crate) fn git_init(&self) {
        git(self.project.path(), &["init", "-q"]);
    }

    /// Makes the project a git repository with one commit, "initial", holding `files`; `config`
    /// are extra `-c` settings for every git call.
    pub(crate) fn git_repo(&self, config: &[&str], files: &[(&str, &str)]) {
        let dir = self.project.path();
        git_with(dir, config, &["init", "-q"]);
        for (name, content) in files {
            self.file(name, content);
        }
        git_with(dir, config, &["add", "-A"]);
        git_with(dir, config, &["commit", "-q", "-m", "initial"]);
    }

    /// Runs git in the project directory and returns trimmed stdout; panics on failure.
    pub(crate) fn git(&self, args: &[&str]) -> String {
        git(self.project.path(), args)
    }

    /// Whether the project's repository has the ref `name` (`git rev-parse --verify`).
    pub(crate) fn has_ref(&self, name: &str) -> bool {
        let out = Command::new("git")
            .current_dir(self.project.path())
            .args(["rev-parse", "--verify", "-q", name])
            .output()
            .expect("git");
        !out.stdout.is_empty()
    }

    /// Commits `files` (written into the project) on `branch`, created from the current HEAD,
    /// then checks out `back` again; returns the new tip.
    pub(crate) fn commit_on_branch(
        &self,
        branch: &str,
        back: &str,
        files: &[(&str, &[u8])],
        message: &str,
    ) -> String {
        self.git(&["checkout", "-q", "-b", branch]);
        let mut add = vec!["add"];
        for (name, content) in files {
            self.file(name, content);
            add.push(name);
        }
        self.git(&add);
        self.git(&["commit", "-q", "-m", message]);
        self.git(&["checkout", "-q", back]);
        self.git(&["rev-parse", branch])
    }
}

/// Runs git in `dir` with a fixed identity and returns trimmed stdout; panics on failure.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    git_with(dir, &[], args)
}

/// [`git`] with extra `-c` settings after the fixed identity.
pub(crate) fn git_with(dir: &Path, config: &[&str], args: &[&str]) -> String {
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
