//! Host secrets kept in the state directory: the audit key and the gc token.
//!
//! Both are 32 random bytes in a 0600 file that only the invoking user can read. The audit key
//! anchors the audit chain (someone who can write `audit.jsonl` but not read the key cannot add
//! a line that verifies); the gc token marks what this state directory created (an image's
//! labels cannot predict it). A secret file is published atomically with `link(2)`, which
//! fails if the name exists, so two first uses never see half a key and never overwrite one.
//!
//! HMAC-SHA256 is written here on top of `sha2` (RFC 2104, checked against RFC 4231's vectors
//! below) rather than adding a crate for twenty lines.

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Bytes in a secret.
pub const SECRET_LEN: usize = 32;
/// SHA-256's block size, which HMAC pads the key to.
const BLOCK: usize = 64;

/// A secret's bytes; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret([u8; SECRET_LEN]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// HMAC-SHA256 of `data` under this secret.
    pub fn mac(&self, data: &[u8]) -> [u8; 32] {
        hmac_sha256(&self.0, data)
    }

    /// The MAC as lowercase hex, the form written into files and labels.
    pub fn mac_hex(&self, data: &[u8]) -> String {
        hex::encode(self.mac(data))
    }

    /// Whether `claimed` (hex) is the MAC of `data`, compared in constant time.
    pub fn verify_hex(&self, data: &[u8], claimed: &str) -> bool {
        ct_eq(self.mac_hex(data).as_bytes(), claimed.as_bytes())
    }
}

/// Why a secret file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// Reading or creating it failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// It exists but is not a private regular file of the invoking user holding a secret.
    #[error("{path} {why}; refusing to trust it (it must be a regular file of yours, mode 0600, made by golem-orch)")]
    Unsafe {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SecretError + '_ {
    move |source| SecretError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads the secret at `path`, creating it (0600, atomically, never replacing one) if absent.
pub fn load_or_create(path: &Path) -> Result<Secret, SecretError> {
    match read_existing(path) {
        Ok(Some(s)) => return Ok(s),
        Ok(None) => {}
        Err(e) => return Err(e),
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut bytes = [0u8; SECRET_LEN];
    fill_random(&mut bytes).map_err(io(path))?;
    // tempfile creates 0600 with O_EXCL; chmod again in case the defaults ever change.
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-secret-")
        .tempfile_in(dir)
        .map_err(io(path))?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(io(path))?;
    tmp.write_all(hex::encode(bytes).as_bytes())
        .map_err(io(path))?;
    tmp.as_file().sync_all().map_err(io(path))?;
    match std::fs::hard_link(tmp.path(), path) {
        Ok(()) => {
            drop(tmp);
            let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
            Ok(Secret(bytes))
        }
        // Another process made it first: use theirs, after the same checks.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            drop(tmp);
            read_existing(path)?.ok_or_else(|| SecretError::Unsafe {
                path: path.to_path_buf(),
                why: "vanished while being created".into(),
            })
        }
        Err(e) => Err(io(path)(e)),
    }
}

/// Reads the secret at `path` if it exists; `None` if it does not. It must be a regular file
/// (never followed through a link), owned by the effective user, with no group or other bits.
pub fn read_existing(path: &Path) -> Result<Option<Secret>, SecretError> {
    let unsafe_ = |why: &str| SecretError::Unsafe {
        path: path.to_path_buf(),
        why: why.to_string(),
    };
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(unsafe_("is a symlink")),
        Err(e) => return Err(io(path)(e)),
    };
    let meta = file.metadata().map_err(io(path))?;
    if !meta.is_file() {
        return Err(unsafe_("is not a regular file"));
    }
    if meta.uid() != euid() {
        return Err(unsafe_(&format!("is owned by uid {}", meta.uid())));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(unsafe_(&format!(
            "has mode {:04o}, readable or writable by others",
            meta.mode() & 0o7777
        )));
    }
    let mut text = String::new();
    Read::by_ref(&mut file)
        .take(SECRET_LEN as u64 * 2 + 2)
        .read_to_string(&mut text)
        .map_err(|_| unsafe_("does not hold a secret"))?;
    let decoded = hex::decode(text.trim()).map_err(|_| unsafe_("does not hold a secret"))?;
    let bytes: [u8; SECRET_LEN] = decoded
        .try_into()
        .map_err(|_| unsafe_("does not hold a secret"))?;
    Ok(Some(Secret(bytes)))
}

/// The effective uid: the user whose state directory this is.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn fill_random(buf: &mut [u8]) -> std::io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: the pointer and length describe the unfilled tail of `buf`.
        let n =
            unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        filled += n as usize;
    }
    Ok(())
}

/// HMAC-SHA256 (RFC 2104).
pub fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    inner.update(data);
    let inner = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner);
    outer.finalize().into()
}

/// Equality whose time does not depend on where the inputs first differ.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test cases 1, 2 and 6 (a key longer than the block).
        assert_eq!(
            hex::encode(hmac_sha256(&[0x0b; 20], b"Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            hex::encode(hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex::encode(hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn a_secret_is_created_once_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.key");
        let a = load_or_create(&path).unwrap();
        let b = load_or_create(&path).unwrap();
        assert_eq!(a, b);
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert!(a.verify_hex(b"x", &a.mac_hex(b"x")));
        assert!(!a.verify_hex(b"y", &a.mac_hex(b"x")));
    }

    #[test]
    fn unsafe_secret_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        load_or_create(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            read_existing(&path),
            Err(SecretError::Unsafe { .. })
        ));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(matches!(
            read_existing(&link),
            Err(SecretError::Unsafe { .. })
        ));
        let junk = dir.path().join("junk");
        std::fs::write(&junk, "not hex").unwrap();
        std::fs::set_permissions(&junk, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(read_existing(&junk).is_err());
        assert!(read_existing(&dir.path().join("absent")).unwrap().is_none());
    }
}
