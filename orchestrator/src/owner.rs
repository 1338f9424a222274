//! Which process owns a session, in a form that survives PID reuse.
//!
//! `gc` must remove what a crashed orchestrator left behind and must never touch what a live one
//! is using. A PID alone is not enough (PIDs are reused), so the owner is recorded as the boot id,
//! the PID and the process start time; all three must match for the owner to count as alive.

use std::fmt;

/// The identity of an orchestrator process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// `/proc/sys/kernel/random/boot_id`, so a reboot makes every old owner dead.
    pub boot_id: String,
    /// The PID namespace (`/proc/self/ns/pid` inode): PIDs from another namespace (another
    /// container sharing the engine) cannot be checked here and must not be judged dead.
    pub pid_ns: String,
    /// Process id.
    pub pid: u32,
    /// Start time in clock ticks since boot (field 22 of `/proc/PID/stat`).
    pub start: u64,
}

/// What can be said about an owner from this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// The very same process is running.
    Alive,
    /// The process is gone (or the machine rebooted since).
    Dead,
    /// The label does not parse or names a process in another PID namespace; treated as alive
    /// so nothing is removed by mistake.
    Unknown,
}

impl Owner {
    /// The current process.
    pub fn current() -> Owner {
        let pid = std::process::id();
        Owner {
            boot_id: boot_id(),
            pid_ns: pid_ns(),
            pid,
            start: start_time(pid).unwrap_or(0),
        }
    }

    /// Parses the label form written by `Display`.
    pub fn parse(label: &str) -> Option<Owner> {
        let mut parts = label.rsplitn(4, ':');
        let start = parts.next()?.parse().ok()?;
        let pid = parts.next()?.parse().ok()?;
        let pid_ns = parts.next()?.to_string();
        let boot_id = parts.next()?.to_string();
        Some(Owner {
            boot_id,
            pid_ns,
            pid,
            start,
        })
    }

    /// Whether this owner is still running.
    pub fn liveness(&self) -> Liveness {
        if self.boot_id != boot_id() {
            return Liveness::Dead;
        }
        if self.pid_ns != pid_ns() {
            return Liveness::Unknown;
        }
        match start_time(self.pid) {
            Some(s) if s == self.start => Liveness::Alive,
            _ => Liveness::Dead,
        }
    }
}

/// Liveness straight from a label value.
pub fn label_liveness(label: Option<&str>) -> Liveness {
    label
        .and_then(Owner::parse)
        .map_or(Liveness::Unknown, |o| o.liveness())
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}",
            self.boot_id, self.pid_ns, self.pid, self.start
        )
    }
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn pid_ns() -> String {
    std::fs::read_link("/proc/self/ns/pid")
        .map(|p| {
            p.to_string_lossy()
                .chars()
                .filter(char::is_ascii_digit)
                .collect()
        })
        .unwrap_or_default()
}

fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses; fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_process_is_alive_and_round_trips() {
        let me = Owner::current();
        assert!(me.start > 0);
        let back = Owner::parse(&me.to_string()).unwrap();
        assert_eq!(back, me);
        assert_eq!(back.liveness(), Liveness::Alive);
    }

    #[test]
    fn a_finished_process_is_dead() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let owner = Owner {
            boot_id: boot_id(),
            pid_ns: pid_ns(),
            pid,
            start: start_time(pid).unwrap_or(1),
        };
        child.wait().unwrap();
        assert_eq!(owner.liveness(), Liveness::Dead);
    }

    #[test]
    fn reused_pids_and_other_boots_are_dead() {
        let mut me = Owner::current();
        me.start += 1;
        assert_eq!(me.liveness(), Liveness::Dead);
        let mut other = Owner::current();
        other.boot_id = "another-boot".into();
        assert_eq!(other.liveness(), Liveness::Dead);
        let mut elsewhere = Owner::current();
        elsewhere.pid_ns = "1".into();
        elsewhere.start += 1;
        assert_eq!(
            elsewhere.liveness(),
            Liveness::Unknown,
            "another namespace is never judged dead"
        );
        assert_eq!(label_liveness(Some("nonsense")), Liveness::Unknown);
        assert_eq!(label_liveness(None), Liveness::Unknown);
    }
}
