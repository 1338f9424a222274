//! The golem-worker image: built here from the embedded static binary, never pulled.
//!
//! The tag is derived from the binary's and Dockerfile's hash, so "stale" is simply "the tag for
//! this build does not exist", and two versions of golem-orch never fight over one tag.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::engine::{BuildSpec, Engine, EngineError};

/// The static worker, built by `build.rs`.
pub const WORKER_BINARY: &[u8] = include_bytes!(env!("GOLEM_WORKER_BIN_PATH"));
/// The repository's `Dockerfile.worker`, so `docker-compose build` and this module build the same image.
pub const DOCKERFILE: &str = include_str!("../../Dockerfile.worker");
/// Where `Dockerfile.worker` expects the binary inside the build context.
const BINARY_CONTEXT_PATH: &str =
    "target/static-worker/x86_64-unknown-linux-gnu/release/golem-worker";
/// Image repository name.
pub const REPOSITORY: &str = "golem-worker";
/// Label holding the full content hash, checked so a foreign image with our tag is not trusted.
pub const LABEL_HASH: &str = "golem.worker.sha256";
/// The worker image's entrypoint, as `Dockerfile.worker` sets it (a unit test keeps them equal).
pub const WORKER_ENTRYPOINT: &str = "/golem-worker";

/// Why the worker image could not be built or found.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The build ran and reported an error.
    #[error("building {tag} failed: {message}")]
    Build {
        /// The tag being built.
        tag: String,
        /// The builder's message.
        message: String,
    },
    /// A person's `--image` is not in the local engine; golem-orch never pulls.
    #[error("image {0:?} is not present in the local engine (golem-orch never pulls; build or load it first)")]
    Missing(String),
    /// The init binary could not be written into the state directory.
    #[error("installing the init binary at {path}: {source}")]
    Install {
        /// Where it was going.
        path: PathBuf,
        /// Why not.
        source: std::io::Error,
    },
    /// Building the context tar failed (only I/O into memory, so practically never).
    #[error("building the image context: {0}")]
    Context(#[from] std::io::Error),
}

/// The content hash of the image this binary would build. Computed once per process: it hashes
/// the whole embedded binary, and every session asks for it several times (tag, init path).
pub fn content_hash() -> String {
    static HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HASH.get_or_init(|| {
        let mut h = Sha256::new();
        h.update(DOCKERFILE.as_bytes());
        h.update([0u8]);
        h.update(WORKER_BINARY);
        hex::encode(h.finalize())
    })
    .clone()
}

/// The tag for this build, e.g. `golem-worker:3f2a9c1b7d20`.
pub fn worker_tag() -> String {
    format!("{REPOSITORY}:{}", &content_hash()[..12])
}

/// Returns the worker image's id when the current build's image exists, `None` when missing or stale.
pub async fn current(engine: &dyn Engine) -> Result<Option<String>, ImageError> {
    let tag = worker_tag();
    match engine.inspect_image(&tag).await {
        Ok(img) => {
            if img.labels.get(LABEL_HASH).map(String::as_str) == Some(content_hash().as_str()) {
                Ok(Some(img.id).filter(|id| !id.is_empty()))
            } else {
                Ok(None)
            }
        }
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.doing(format!("inspecting image {tag}")).into()),
    }
}

/// Makes sure the current worker image exists, building it when missing or stale. Returns `(tag, id)`.
pub async fn ensure(engine: &dyn Engine) -> Result<(String, String), ImageError> {
    if let Some(id) = current(engine).await? {
        return Ok((worker_tag(), id));
    }
    build(engine).await
}

/// Builds the worker image through the Engine API (classic builder, plain tar context, no pull).
pub async fn build(engine: &dyn Engine) -> Result<(String, String), ImageError> {
    let tag = worker_tag();
    let spec = BuildSpec {
        tag: tag.clone(),
        labels: HashMap::from([(LABEL_HASH.to_string(), content_hash())]),
        context: build_context()?,
    };
    engine
        .build_image(&spec)
        .await
        .map_err(|e| ImageError::Build {
            tag: tag.clone(),
            message: e.detail(),
        })?;
    engine
        .tag_image(&tag, REPOSITORY, "latest")
        .await
        .map_err(|e| e.doing(format!("tagging {tag} as latest")))?;
    match current(engine).await? {
        Some(id) => Ok((tag, id)),
        None => Err(ImageError::Build {
            tag,
            message: "the engine reported success but the image is not there".into(),
        }),
    }
}

/// Checks that a person's own image exists locally and returns its id.
pub async fn require_local(engine: &dyn Engine, reference: &str) -> Result<LocalImage, ImageError> {
    match engine.inspect_image(reference).await {
        Ok(img) => Ok(LocalImage {
            id: img.id,
            entrypoint: img.entrypoint,
            cmd: img.cmd,
        }),
        Err(e) if e.is_not_found() => Err(ImageError::Missing(reference.to_string())),
        Err(e) => Err(e.doing(format!("inspecting image {reference}")).into()),
    }
}

/// A person's image as the engine has it: what `docker run IMAGE` would execute.
#[derive(Debug, Clone)]
pub struct LocalImage {
    /// Content id.
    pub id: String,
    /// The image's `ENTRYPOINT`; the container's own entrypoint is the init, which runs this.
    pub entrypoint: Vec<String>,
    /// The image's `CMD`, used when the person gives no arguments.
    pub cmd: Vec<String>,
}

/// Where the init binary lives: the state directory's `bin/`, named by content hash, so two
/// versions of golem-orch never share one and a stale one is never used. (Not a per-user cache:
/// the path shows in the container's mountinfo, and the state directory's already does.)
pub fn init_path(state: &Path) -> PathBuf {
    state.join("bin").join(init_name())
}

fn init_name() -> String {
    format!("golem-init-{}", &content_hash()[..12])
}

/// Writes the embedded static worker to [`init_path`] (once, atomically, read-only), so every
/// container, whatever its image, can bind-mount the same init.
pub fn install_init(state: &Path) -> Result<PathBuf, ImageError> {
    install_in(&state.join("bin"))
}

/// How long another build's init binary must have gone unused before `gc` removes it. Every
/// session touches its binary just before creating its container, so a build that is running
/// sessions (a long batch of an older version) never loses its binary between the two.
pub const STALE_INIT_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Removes init binaries of other builds, unused for [`STALE_INIT_AGE`], from the state
/// directory's `bin/`; returns their names. A container of another golem-orch version that
/// still runs keeps its mount (the file is unlinked, not changed), and that version reinstalls
/// its binary when it next needs it.
pub fn remove_stale_inits(state: &Path) -> Vec<String> {
    stale_inits(state, true)
}

/// The init binaries [`remove_stale_inits`] would remove, removing them when `remove` (a
/// removal that fails leaves the name out); `gc --dry-run` only lists them.
pub fn stale_inits(state: &Path, remove: bool) -> Vec<String> {
    let current = init_name();
    let Ok(entries) = std::fs::read_dir(state.join("bin")) else {
        return Vec::new();
    };
    let unused = |path: &Path| {
        std::fs::symlink_metadata(path)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age >= STALE_INIT_AGE))
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok().map(|n| (e.path(), n)))
        .filter(|(_, n)| n.starts_with("golem-init-") && *n != current)
        .filter(|(path, _)| unused(path) && (!remove || std::fs::remove_file(path).is_ok()))
        .map(|(_, n)| n)
        .collect()
}

/// Removes `golem-worker:<hash>` tags of other builds, so rebuilt workers do not pile up in the
/// engine. The current build's tag and `latest` stay; an image a container still uses is left
/// alone (the engine refuses, and that is not an error here). Returns the tags removed.
pub async fn remove_stale_images(engine: &dyn Engine) -> Result<Vec<String>, EngineError> {
    stale_images(engine, true).await
}

/// The tags [`remove_stale_images`] would remove, removing them when `remove`; `gc --dry-run`
/// only lists them (including any a container still uses, which a removal would leave).
pub async fn stale_images(engine: &dyn Engine, remove: bool) -> Result<Vec<String>, EngineError> {
    let tags = engine
        .image_tags(REPOSITORY)
        .await
        .map_err(|e| e.doing("listing golem-worker images"))?;
    let current = worker_tag();
    let mut removed = Vec::new();
    for tag in tags {
        let Some(hash) = tag.strip_prefix(&format!("{REPOSITORY}:")) else {
            continue;
        };
        let ours = hash.len() == 12 && hash.bytes().all(|b| b.is_ascii_hexdigit());
        if !ours || tag == current {
            continue;
        }
        if !remove {
            removed.push(tag);
            continue;
        }
        match engine.remove_image(&tag).await {
            Ok(()) => removed.push(tag),
            Err(e) if e.is_not_found() || e.is_conflict() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

fn install_in(dir: &Path) -> Result<PathBuf, ImageError> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(init_name());
    if holds_the_worker(&path) {
        // Marks the binary in use (see [`STALE_INIT_AGE`]); a failure only makes it look older.
        let _ =
            std::fs::File::open(&path).and_then(|f| f.set_modified(std::time::SystemTime::now()));
        return Ok(path);
    }
    let write = || -> std::io::Result<()> {
        // `bin/` is private like the rest of the state directory; the binary keeps 0555 so the
        // worker can run it through its bind mount.
        crate::home::create_private_dir_all(dir)?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        std::io::Write::write_all(&mut tmp, WORKER_BINARY)?;
        tmp.as_file().sync_all()?;
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o555))?;
        tmp.persist(&path).map_err(|e| e.error)?;
        Ok(())
    };
    write().map_err(|source| ImageError::Install {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

/// Whether `path` holds exactly the embedded worker: compared byte for byte the first time in
/// this process (a damaged or replaced file is rewritten), by its length after that, so a batch
/// pays for the comparison once.
fn holds_the_worker(path: &Path) -> bool {
    static CHECKED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let right_size = std::fs::symlink_metadata(path)
        .is_ok_and(|m| m.is_file() && m.len() == WORKER_BINARY.len() as u64);
    if !right_size {
        return false;
    }
    let mut checked = CHECKED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if checked.iter().any(|p| p == path) {
        return true;
    }
    let same = std::fs::read(path).is_ok_and(|bytes| bytes == WORKER_BINARY);
    if same {
        checked.push(path.to_path_buf());
    }
    same
}

/// A tar holding `Dockerfile` and the binary at the path `Dockerfile.worker` copies from.
fn build_context() -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut add = |path: &str, data: &[u8], mode: u32| {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(mode);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        builder.append_data(&mut header, path, data)
    };
    add("Dockerfile", DOCKERFILE.as_bytes(), 0o644)?;
    add(BINARY_CONTEXT_PATH, WORKER_BINARY, 0o755)?;
    builder.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dockerfile_sets_the_entrypoint_the_plan_assumes() {
        assert!(DOCKERFILE.contains(&format!("ENTRYPOINT [\"{WORKER_ENTRYPOINT}\"]")));
    }

    #[test]
    fn only_other_builds_init_binaries_are_removed() {
        let state = tempfile::tempdir().unwrap();
        let current = install_init(state.path()).unwrap();
        let bin = state.path().join("bin");
        let old = bin.join("golem-init-000000000000");
        std::fs::write(&old, b"old").unwrap();
        std::fs::write(bin.join("notes.txt"), b"not ours").unwrap();
        assert!(
            remove_stale_inits(state.path()).is_empty(),
            "another build's binary in recent use stays"
        );
        let long_ago = std::time::SystemTime::now() - STALE_INIT_AGE * 2;
        std::fs::File::open(&old)
            .and_then(|f| f.set_modified(long_ago))
            .unwrap();
        assert_eq!(
            remove_stale_inits(state.path()),
            ["golem-init-000000000000"]
        );
        assert!(current.is_file());
        assert!(bin.join("notes.txt").is_file());
        assert!(remove_stale_inits(tempfile::tempdir().unwrap().path()).is_empty());
    }

    #[test]
    fn the_init_is_installed_once_and_read_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = install_in(dir.path()).unwrap();
        assert_eq!(path, dir.path().join(init_name()));
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), WORKER_BINARY.len() as u64);
        assert_eq!(meta.permissions().mode() & 0o777, 0o555);
        assert_eq!(install_in(dir.path()).unwrap(), path);

        // A damaged binary of the right size is replaced, not mounted into containers.
        let other = tempfile::tempdir().unwrap();
        let damaged = other.path().join(init_name());
        std::fs::write(&damaged, vec![0u8; WORKER_BINARY.len()]).unwrap();
        assert_eq!(install_in(other.path()).unwrap(), damaged);
        assert!(std::fs::read(&damaged).unwrap() == WORKER_BINARY);
    }

    #[test]
    fn the_embedded_worker_is_a_static_elf() {
        assert!(WORKER_BINARY.starts_with(b"\x7fELF"));
        // A dynamically linked binary names its interpreter; a scratch image has none.
        let needle = b"/lib64/ld-linux-x86-64.so.2";
        assert!(
            !WORKER_BINARY.windows(needle.len()).any(|w| w == needle),
            "worker must be static"
        );
    }

    #[test]
    fn the_dockerfile_copies_from_where_the_context_puts_the_binary() {
        assert!(DOCKERFILE.contains(BINARY_CONTEXT_PATH));
        assert!(DOCKERFILE.contains("FROM scratch"));
    }

    #[test]
    fn the_tag_follows_the_content() {
        assert_eq!(
            worker_tag(),
            format!("golem-worker:{}", &content_hash()[..12])
        );
    }
}
