//! Per-session worker identities: a uid/gid pair that no host account or group has and no other
//! live session uses.
//!
//! Without user namespaces a container's uid is the host's uid. A fixed uid (65534) made every
//! worker the host's `nobody`: that account could reach a running worker's `/output` and `/input`
//! through `/proc/PID/root`, and a setuid file left in `/workspace` was a ready switch to it.
//! A uid nobody on the host has cannot be reached by any host account (the kernel's ptrace
//! access check guards `/proc/PID/root`), and one per session keeps sessions from each other.

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::engine::{Engine, EngineError, Select, LABEL_MANAGED};

/// The first id of the reserved range: far above any distribution's account ranges (which end
/// at 60000-65535, or a few million with systemd-homed and subordinate ranges), below 2^31 so
/// that tools that treat ids as signed 32-bit values still work.
pub const RANGE_START: u32 = 0x6000_0000;
/// How many ids the range holds (2^24). Random choice from this many makes two concurrent
/// allocations picking the same id (the one race this module does not lock against) a
/// one-in-sixteen-million event per pair of sessions, before the live-container check.
pub const RANGE_LEN: u32 = 1 << 24;
/// How many random candidates are tried before giving up.
const ATTEMPTS: usize = 64;

/// The identity one session's worker runs as (uid and gid are the same number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionUser {
    /// The worker's uid.
    pub uid: u32,
    /// The worker's gid.
    pub gid: u32,
}

impl std::fmt::Display for SessionUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.uid, self.gid)
    }
}

/// Why no identity could be allocated.
#[derive(Debug, thiserror::Error)]
pub enum UidError {
    /// Listing live containers failed, so ids in use are unknown.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Every candidate was taken (the host's databases cover the reserved range).
    #[error("no free worker uid in {RANGE_START}..{}: the host's accounts or subordinate id ranges cover golem-orch's reserved range, or the name service did not answer", RANGE_START as u64 + RANGE_LEN as u64)]
    Exhausted,
}

/// Ids the host already uses: accounts, groups and subordinate ranges.
#[derive(Debug, Clone, Default)]
pub struct HostIds {
    uids: BTreeSet<u32>,
    gids: BTreeSet<u32>,
    /// `(start, count)` from `/etc/subuid` and `/etc/subgid`: user-namespace mappings that make
    /// these ids someone's.
    ranges: Vec<(u64, u64)>,
}

impl HostIds {
    /// Reads `/etc/passwd`, `/etc/group`, `/etc/subuid` and `/etc/subgid`; missing files are empty.
    pub fn read() -> HostIds {
        let text = |p: &str| std::fs::read_to_string(Path::new(p)).unwrap_or_default();
        HostIds::parse(
            &text("/etc/passwd"),
            &text("/etc/group"),
            &[text("/etc/subuid"), text("/etc/subgid")],
        )
    }

    /// Parses the databases' text (`name:x:ID:...` and `name:start:count`).
    pub fn parse(passwd: &str, group: &str, sub: &[String]) -> HostIds {
        let third = |line: &str| line.split(':').nth(2).and_then(|f| f.trim().parse().ok());
        let mut ranges = Vec::new();
        for text in sub {
            for line in text.lines() {
                let mut f = line.split(':').skip(1);
                if let (Some(Ok(start)), Some(Ok(count))) = (
                    f.next().map(|s| s.trim().parse::<u64>()),
                    f.next().map(|s| s.trim().parse::<u64>()),
                ) {
                    ranges.push((start, count));
                }
            }
        }
        HostIds {
            uids: passwd.lines().filter_map(third).collect(),
            gids: group.lines().filter_map(third).collect(),
            ranges,
        }
    }

    /// Whether `id` is free as both a uid and a gid on the host.
    pub fn is_free(&self, id: u32) -> bool {
        !self.uids.contains(&id)
            && !self.gids.contains(&id)
            && !self.ranges.iter().any(|&(start, count)| {
                (start..start.saturating_add(count)).contains(&u64::from(id))
            })
            && !nss_knows(id)
    }
}

/// Asks the name service (LDAP, SSSD, systemd-homed...) too, not only the local files. Fails
/// closed: an id counts as known unless the name service says it has no such user and no such
/// group. An entry too large for the buffer (a group with thousands of members answers
/// `ERANGE`) is asked again with a larger one, never read as "no such group"; any other error
/// (an unreachable directory server) keeps the id off the list of candidates.
fn nss_knows(id: u32) -> bool {
    nss_lookup(id, Db::Passwd) != Lookup::Absent || nss_lookup(id, Db::Group) != Lookup::Absent
}

#[derive(Clone, Copy)]
enum Db {
    Passwd,
    Group,
}

#[derive(Debug, PartialEq, Eq)]
enum Lookup {
    Found,
    Absent,
    Failed,
}

/// The largest buffer an entry may need before the answer counts as a failure.
const NSS_MAX_BUFFER: usize = 64 << 20;

fn nss_lookup(id: u32, db: Db) -> Lookup {
    nss_lookup_from(id, db, 16 * 1024)
}

/// [`nss_lookup`] starting from a buffer of `len` bytes.
fn nss_lookup_from(id: u32, db: Db, mut len: usize) -> Lookup {
    loop {
        let mut buf = vec![0 as libc::c_char; len];
        // SAFETY: the out-pointers point at zeroed, properly sized values that live for the
        // call, and `buf`/`len` describe a writable buffer; the functions write nothing else.
        let (rc, found) = unsafe {
            match db {
                Db::Passwd => {
                    let mut pw: libc::passwd = std::mem::zeroed();
                    let mut found: *mut libc::passwd = std::ptr::null_mut();
                    let rc = libc::getpwuid_r(id, &mut pw, buf.as_mut_ptr(), len, &mut found);
                    (rc, !found.is_null())
                }
                Db::Group => {
                    let mut gr: libc::group = std::mem::zeroed();
                    let mut found: *mut libc::group = std::ptr::null_mut();
                    let rc = libc::getgrgid_r(id, &mut gr, buf.as_mut_ptr(), len, &mut found);
                    (rc, !found.is_null())
                }
            }
        };
        match rc {
            0 if found => return Lookup::Found,
            // "Not found" is 0 with no result; glibc also documents these for it.
            0 | libc::ENOENT | libc::ESRCH => return Lookup::Absent,
            libc::ERANGE if len < NSS_MAX_BUFFER => len *= 4,
            libc::EINTR => continue,
            _ => return Lookup::Failed,
        }
    }
}

/// The ids golem-managed containers on the engine run as. `Config.User` is what our create set
/// (an image's label cannot change it); labels only narrow which containers are inspected.
pub async fn live_ids(engine: &dyn Engine) -> Result<BTreeSet<u32>, EngineError> {
    let select = Select::Labels(vec![LABEL_MANAGED.to_string()]);
    let list = engine
        .list(&select)
        .await
        .map_err(|e| e.doing("listing containers for their worker uids"))?;
    // Inspected together: one round trip's latency, not one per live container.
    let inspections = list.into_iter().map(|c| async move {
        match engine.inspect(&c.id).await {
            Ok(i) => Ok(i.user),
            // A container removed between the list and the inspect uses nothing any more.
            Err(e) if e.is_not_found() => Ok(None),
            // Any other failure could hide a live session's uid: never read it as free.
            Err(e) => Err(e.doing("inspecting a container for its worker uid")),
        }
    });
    let mut ids = BTreeSet::new();
    for user in futures_util::future::join_all(inspections)
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
    {
        let (u, g) = user.split_once(':').unwrap_or((&user, ""));
        ids.extend(u.parse::<u32>().ok());
        ids.extend(g.parse::<u32>().ok());
    }
    Ok(ids)
}

/// Picks a free id from the reserved range: not the host's, not a live session's.
pub fn pick(host: &HostIds, live: &BTreeSet<u32>, mut random: impl FnMut() -> u32) -> Option<u32> {
    (0..ATTEMPTS)
        .map(|_| RANGE_START + random() % RANGE_LEN)
        .find(|id| !live.contains(id) && host.is_free(*id))
}

/// Allocates the identity of a new session's worker.
pub async fn allocate(engine: &dyn Engine) -> Result<SessionUser, UidError> {
    let live = live_ids(engine).await?;
    let host = HostIds::read();
    let id = pick(&host, &live, || {
        let b = uuid::Uuid::new_v4().into_bytes();
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    })
    .ok_or(UidError::Exhausted)?;
    Ok(SessionUser { uid: id, gid: id })
}

/// Whether `uid` lies in the range golem-orch allocates from (so it names no host account).
pub fn is_session_id(uid: u32) -> bool {
    (RANGE_START..RANGE_START + RANGE_LEN).contains(&uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_accounts_groups_and_subordinate_ranges_are_never_picked() {
        let host = HostIds::parse(
            "root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\nodd:x:1610612740:1::/:\n",
            "g:x:1610612741:\n",
            &["u:1610612742:2\n".into(), "garbage\n".into()],
        );
        assert!(!host.is_free(65534));
        for taken in 1_610_612_740..=1_610_612_743 {
            assert!(!host.is_free(taken), "{taken}");
        }
        assert!(host.is_free(1_610_612_744));
        // A sequence of candidates: the taken ones are skipped, in order.
        let mut seq = [4u32, 5, 6, 7, 8, 9].into_iter();
        let live = BTreeSet::from([RANGE_START + 8]);
        assert_eq!(
            pick(&host, &live, || seq.next().unwrap_or(8)),
            Some(RANGE_START + 9)
        );
        // Nothing free: None, never a taken id.
        assert_eq!(pick(&host, &live, || 8), None);
    }

    #[test]
    fn picked_ids_stay_in_the_reserved_range() {
        let host = HostIds::default();
        for r in [0, 1, u32::MAX, RANGE_LEN, RANGE_LEN - 1] {
            let id = pick(&host, &BTreeSet::new(), || r).unwrap();
            assert!(is_session_id(id) && id < 1 << 31, "{id}");
        }
    }

    #[test]
    fn the_name_service_answers_found_and_absent() {
        // root (0) is in every passwd and group database; a reserved-range id is in none here.
        assert_eq!(nss_lookup(0, Db::Passwd), Lookup::Found);
        assert_eq!(nss_lookup(0, Db::Group), Lookup::Found);
        assert!(nss_knows(0));
        assert_eq!(nss_lookup(RANGE_START + 12_345, Db::Passwd), Lookup::Absent);
        assert!(!nss_knows(RANGE_START + 12_345));
        // An entry larger than the buffer (ERANGE) is asked again, not read as absent.
        assert_eq!(nss_lookup_from(0, Db::Passwd, 1), Lookup::Found);
        assert_eq!(nss_lookup_from(0, Db::Group, 1), Lookup::Found);
    }
}
