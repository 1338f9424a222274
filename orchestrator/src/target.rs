//! Where a staged commit would land: a git repository, a branch and a path prefix.
//!
//! Shared by `diff` (what would change) and `push` (make it so), so both see the same base tree.
//! Names are validated here: a branch or prefix a person types goes into ref names and tree paths.

use std::path::{Path, PathBuf};

use git2::{BranchType, Commit, Repository};

/// Why a target cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The path is not (inside) a git repository.
    #[error("{0} is not a git repository")]
    NotARepo(PathBuf),
    /// The branch name is not a valid git branch name.
    #[error("{0:?} is not a valid branch name")]
    BadBranch(String),
    /// The prefix would escape the tree or touch git's own metadata.
    #[error("prefix {prefix:?} is not usable: {why}")]
    BadPrefix {
        /// What was given.
        prefix: String,
        /// Why not.
        why: &'static str,
    },
    /// A libgit2 failure.
    #[error("git: {doing}: {message}")]
    Git {
        /// What was being done.
        doing: String,
        /// libgit2's message.
        message: String,
    },
}

impl TargetError {
    /// Wraps a git2 error with what was being done.
    pub fn git(doing: impl Into<String>) -> impl FnOnce(git2::Error) -> TargetError {
        let doing = doing.into();
        move |e| TargetError::Git {
            doing,
            message: e.message().to_string(),
        }
    }
}

/// A repository, branch and prefix.
pub struct Target {
    /// The opened repository.
    pub repo: Repository,
    /// Its work tree (or git dir when bare), for messages.
    pub path: PathBuf,
    /// Branch short name.
    pub branch: String,
    /// Path prefix inside the tree, without trailing slash; empty for the root.
    pub prefix: String,
}

impl Target {
    /// Opens the repository at (or above) `path` and validates the branch and prefix.
    pub fn open(path: &Path, branch: &str, prefix: Option<&str>) -> Result<Target, TargetError> {
        let repo =
            Repository::discover(path).map_err(|_| TargetError::NotARepo(path.to_path_buf()))?;
        if branch.is_empty() || !git2::Reference::is_valid_name(&format!("refs/heads/{branch}")) {
            return Err(TargetError::BadBranch(branch.to_string()));
        }
        let prefix = validate_prefix(prefix.unwrap_or(""))?;
        let shown = repo.workdir().unwrap_or_else(|| repo.path()).to_path_buf();
        Ok(Target {
            repo,
            path: shown,
            branch: branch.to_string(),
            prefix,
        })
    }

    /// `refs/heads/<branch>`.
    pub fn refname(&self) -> String {
        format!("refs/heads/{}", self.branch)
    }

    /// The branch's tip, or `None` when the branch does not exist yet.
    pub fn tip(&self) -> Result<Option<Commit<'_>>, TargetError> {
        match self.repo.find_branch(&self.branch, BranchType::Local) {
            Ok(b) => b
                .get()
                .peel_to_commit()
                .map(Some)
                .map_err(TargetError::git(format!("reading branch {}", self.branch))),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(e) => Err(TargetError::git(format!("finding branch {}", self.branch))(
                e,
            )),
        }
    }

    /// What the staged files are compared with and committed on: the branch tip, or HEAD's
    /// commit for a new branch, or nothing in an empty repository.
    pub fn base(&self) -> Result<Option<Commit<'_>>, TargetError> {
        if let Some(tip) = self.tip()? {
            return Ok(Some(tip));
        }
        match self.repo.head() {
            Ok(head) => head
                .peel_to_commit()
                .map(Some)
                .map_err(TargetError::git("reading HEAD")),
            Err(e)
                if matches!(
                    e.code(),
                    git2::ErrorCode::UnbornBranch | git2::ErrorCode::NotFound
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(TargetError::git("reading HEAD")(e)),
        }
    }

    /// A staged file's path in the repository's tree.
    pub fn repo_path(&self, staged_path: &str) -> String {
        if self.prefix.is_empty() {
            staged_path.to_string()
        } else {
            format!("{}/{staged_path}", self.prefix)
        }
    }

    /// Whether the branch is checked out in the main work tree or any linked work tree, where
    /// moving it would leave that work tree's index stale.
    pub fn checked_out(&self) -> Result<bool, TargetError> {
        let refname = self.refname();
        let is_head = |repo: &Repository| {
            repo.find_reference("HEAD")
                .ok()
                .and_then(|h| h.symbolic_target().ok().flatten().map(|t| t == refname))
                .unwrap_or(false)
        };
        if !self.repo.is_bare() && is_head(&self.repo) {
            return Ok(true);
        }
        let worktrees = self
            .repo
            .worktrees()
            .map_err(TargetError::git("listing work trees"))?;
        for name in worktrees.iter().filter_map(|n| n.ok().flatten()) {
            if let Ok(wt) = self.repo.find_worktree(name) {
                if let Ok(repo) = Repository::open_from_worktree(&wt) {
                    if is_head(&repo) {
                        return Ok(true);
                    }
                }
            }
        }
        Ok(false)
    }
}

/// The commit HEAD points at, as a hex id, when `path` is in a repository with commits.
pub fn head_commit(path: &Path) -> Option<String> {
    let repo = Repository::discover(path).ok()?;
    let commit = repo.head().ok()?.peel_to_commit().ok()?;
    Some(commit.id().to_string())
}

/// Normalises a prefix (`docs/golem/` → `docs/golem`) and refuses anything that could escape the
/// tree or reach git's metadata.
pub fn validate_prefix(prefix: &str) -> Result<String, TargetError> {
    let bad = |why| TargetError::BadPrefix {
        prefix: prefix.to_string(),
        why,
    };
    let trimmed = prefix.trim_matches('/');
    if prefix.starts_with('/') {
        return Err(bad("must be relative"));
    }
    if trimmed.is_empty() {
        return Ok(String::new());
    }
    for part in trimmed.split('/') {
        match part {
            "" => return Err(bad("empty path component")),
            "." | ".." => return Err(bad("'.' and '..' are not allowed")),
            p if p.eq_ignore_ascii_case(".git") => return Err(bad("'.git' is not allowed")),
            p if p.contains('\\') || p.chars().any(char::is_control) => {
                return Err(bad("control characters or backslashes"))
            }
            _ => {}
        }
    }
    Ok(trimmed.to_string())
}

/// The default branch for a staged commit: its own, so pushing never moves a branch someone is on.
pub fn default_branch(staged_id: &str) -> String {
    format!("golem/{}", crate::home::short(staged_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_normalised_and_refused_when_dangerous() {
        assert_eq!(validate_prefix("").unwrap(), "");
        assert_eq!(validate_prefix("docs/golem/").unwrap(), "docs/golem");
        for bad in [
            "/etc",
            "../x",
            "a/../b",
            "a//b",
            ".git",
            "x/.GIT/hooks",
            "a\\b",
            "a\nb",
            "./a",
        ] {
            assert!(validate_prefix(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn branches_are_validated_and_checkouts_detected() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        assert!(Target::open(dir.path(), "bad..name", None).is_err());
        assert!(Target::open(dir.path(), "", None).is_err());
        let t = Target::open(dir.path(), "golem/abc", Some("out")).unwrap();
        assert!(t.base().unwrap().is_none(), "empty repository has no base");
        assert_eq!(t.repo_path("a.md"), "out/a.md");
        let head_branch = repo.head().err().map(|_| {
            let head = repo.find_reference("HEAD").unwrap();
            head.symbolic_target()
                .unwrap()
                .unwrap()
                .trim_start_matches("refs/heads/")
                .to_string()
        });
        let t = Target::open(dir.path(), &head_branch.unwrap(), None).unwrap();
        assert!(
            t.checked_out().unwrap(),
            "the unborn HEAD branch counts as checked out"
        );
        assert!(Target::open(Path::new("/"), "x", None).is_err());
    }
}
