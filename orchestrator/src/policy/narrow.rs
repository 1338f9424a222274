//! Narrowing: the one place where a policy is made tighter, whoever asks.
//!
//! Three places may narrow a level's policy: a project's `golem.yaml`, a worker definition and a
//! run's flags. Each turns what it can express into one [`Narrowing`] and hands it to
//! [`Policy::narrow`], so one set of rules holds for all three:
//!
//! - A value may only go down: `none < ro < rw` for mounts, `false < true` for
//!   `network.allow_opt_in`, and plain order for sizes, counts, durations and cpus. A request
//!   for more than the policy grants is a [`PolicyError::Widen`] that names the key and where it
//!   was written (file and line, the worker file, or the flag).
//! - `output.max_file_bytes` is compared with the policy's own cap, then clamped to the
//!   resulting `output.max_total_bytes`. No file larger than the whole output could be accepted
//!   anyway, so the clamp takes nothing away. It only states what the total already enforces, so
//!   lowering the total alone is never an error and never leaves a file cap above it. (A policy
//!   *file* must still be consistent by itself: `Policy::validate` refuses one that is not.)
//! - The result must still be a valid policy: at least 6MiB of memory (Docker's minimum), 0.01
//!   cpus, one process, one file, nothing zero. A value below such a floor is a
//!   [`PolicyError::Invalid`] that names the key. Floors are checked as soon as the section that
//!   holds them (resources, output) is applied, so a run's flags give the same first error
//!   whether they are applied together or one by one.
//! - `env.pass` may only drop names, `env.set` may add nothing, and `runtime` may only repeat the
//!   policy's own: variables such as `LD_PRELOAD` and the OCI runtime decide what code runs and
//!   how it is isolated, so only a policy file chooses them.
//! - It is all or nothing: after an error the policy is left as it was.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::{locate, Access, Location, Mounts, Policy, PolicyError, TrustLevel};
use crate::units::{Limit, Size};

/// A request to narrow one level's policy. Every field is optional, and a value that is set may
/// only lower the policy's own value.
///
/// This is also the shape of one level in `golem.yaml` (`levels: {untrusted: ...}`). A worker
/// definition fills `mounts` and `output`; the run flags fill `resources.memory`,
/// `resources.timeout` and `input.max_total_bytes`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Narrowing {
    /// Host directories to mount with less access, or not at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mounts: Option<MountsNarrowing>,
    /// Give up the level's network opt-in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkNarrowing>,
    /// Lower kernel-enforced limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourcesNarrowing>,
    /// Lower output caps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputNarrowing>,
    /// Lower the input cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<InputNarrowing>,
    /// Pass fewer host variables. Setting variables is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<EnvNarrowing>,
    /// May only name the policy's own runtime. Any other value is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
}

/// Mount access to lower; see [`Mounts`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountsNarrowing {
    /// `/input`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Access>,
    /// `/workspace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<Access>,
    /// `/repo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<Access>,
}

/// Network settings to lower.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkNarrowing {
    /// `false` gives up `run --allow-network`; `true` is only accepted where it is already allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_opt_in: Option<bool>,
}

/// Kernel-enforced limits to lower.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourcesNarrowing {
    /// Memory (`--memory`), at least 6MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Size>,
    /// CPU share, at least 0.01.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// Processes and threads, at least one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// Wall-clock limit (`--timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Limit>,
    /// The `/tmp` tmpfs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp: Option<Size>,
}

/// Output limits to lower. This is also a worker definition's `output:` section.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OutputNarrowing {
    /// Lower total bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_total_bytes: Option<Size>,
    /// Lower file count, at least one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_files: Option<u64>,
    /// Lower bytes per file; clamped to the resulting total (see the module documentation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_file_bytes: Option<Size>,
}

/// The input cap to lower.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputNarrowing {
    /// Bytes of all inputs together (`--max-input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_total_bytes: Option<Size>,
}

/// Environment to narrow.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvNarrowing {
    /// Always refused when not empty: only policy files set variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<BTreeMap<String, String>>,
    /// The host variables to keep passing; a subset of the policy's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass: Option<Vec<String>>,
}

impl Narrowing {
    /// What a run's flags ask for. The flags have the same rules as a project file; only the
    /// place an error points to differs.
    pub fn from_flags(
        memory: Option<Size>,
        timeout: Option<Limit>,
        max_input: Option<Size>,
    ) -> Narrowing {
        Narrowing {
            resources: (memory.is_some() || timeout.is_some()).then(|| ResourcesNarrowing {
                memory,
                timeout,
                ..ResourcesNarrowing::default()
            }),
            input: max_input.map(|m| InputNarrowing {
                max_total_bytes: Some(m),
            }),
            ..Narrowing::default()
        }
    }
}

/// Where a narrowing was written, so that an error points a person at the line or flag to change.
#[derive(Debug, Clone, Copy)]
pub enum Origin<'a> {
    /// A project's `golem.yaml`: its name as shown, and its text to find a key's line and column.
    ProjectFile {
        /// The file name as the person knows it.
        file: &'a str,
        /// Its text.
        text: &'a str,
    },
    /// A worker definition, named by the file it was loaded from.
    Worker {
        /// Where the definition was loaded from.
        file: &'a str,
    },
    /// One run's command-line flags. A key is reported as the flag that sets it.
    Flags,
}

/// The flag that sets each key a run's flags can narrow.
const FLAGS: [(&str, &str); 3] = [
    ("resources.memory", "--memory"),
    ("resources.timeout", "--timeout"),
    ("input.max_total_bytes", "--max-input"),
];

impl Origin<'_> {
    /// Where `key` of `level` was asked for.
    fn at(&self, level: TrustLevel, key: &str) -> Location {
        match *self {
            Origin::ProjectFile { file, text } => {
                let section = ["levels", level.as_str()];
                let path: Vec<&str> = section.into_iter().chain(key.split('.')).collect();
                Location {
                    file: file.to_string(),
                    line_col: locate(text, &path).or_else(|| locate(text, &section)),
                }
            }
            Origin::Worker { file } => Location {
                file: file.to_string(),
                line_col: None,
            },
            Origin::Flags => Location {
                file: FLAGS
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map_or("the command line", |(_, flag)| flag)
                    .to_string(),
                line_col: None,
            },
        }
    }
}

/// The level being narrowed and where the request came from: everything an error needs.
struct Ask<'a> {
    level: TrustLevel,
    origin: Origin<'a>,
}

impl Ask<'_> {
    fn widen(&self, key: &str, asked: String, allowed: String) -> PolicyError {
        PolicyError::Widen {
            at: self.origin.at(self.level, key),
            level: self.level,
            key: key.to_string(),
            asked,
            allowed,
        }
    }

    /// The one rule for every ordered value: lower it, or refuse to raise it.
    fn lower<T: PartialOrd + Copy + fmt::Display>(
        &self,
        slot: &mut T,
        asked: Option<T>,
        key: &str,
    ) -> Result<(), PolicyError> {
        if let Some(v) = asked {
            if v > *slot {
                return Err(self.widen(key, v.to_string(), slot.to_string()));
            }
            *slot = v;
        }
        Ok(())
    }

    /// Refuses a policy that fell below a floor, naming the key and the place it was asked.
    fn still_valid(&self, policy: &Policy) -> Result<(), PolicyError> {
        policy
            .validate()
            .map_err(|(key, message)| PolicyError::Invalid {
                at: self.origin.at(self.level, &key),
                message: format!("{key}: {message}"),
            })
    }

    fn mounts(&self, m: &mut Mounts, n: &MountsNarrowing) -> Result<(), PolicyError> {
        self.lower(&mut m.input, n.input, "mounts.input")?;
        self.lower(&mut m.workspace, n.workspace, "mounts.workspace")?;
        self.lower(&mut m.repo, n.repo, "mounts.repo")
    }

    fn resources(&self, p: &mut Policy, n: &ResourcesNarrowing) -> Result<(), PolicyError> {
        let r = &mut p.resources;
        self.lower(&mut r.memory, n.memory, "resources.memory")?;
        self.lower(&mut r.cpus, n.cpus, "resources.cpus")?;
        self.lower(&mut r.pids, n.pids, "resources.pids")?;
        self.lower(&mut r.timeout, n.timeout, "resources.timeout")?;
        self.lower(&mut r.tmp, n.tmp, "resources.tmp")
    }

    fn output(&self, p: &mut Policy, n: &OutputNarrowing) -> Result<(), PolicyError> {
        let o = &mut p.output;
        self.lower(
            &mut o.max_total_bytes,
            n.max_total_bytes,
            "output.max_total_bytes",
        )?;
        self.lower(&mut o.max_files, n.max_files, "output.max_files")?;
        self.lower(
            &mut o.max_file_bytes,
            n.max_file_bytes,
            "output.max_file_bytes",
        )?;
        o.max_file_bytes = o.max_file_bytes.min(o.max_total_bytes);
        Ok(())
    }

    fn env(&self, p: &mut Policy, n: &EnvNarrowing) -> Result<(), PolicyError> {
        if let Some(pass) = &n.pass {
            if let Some(extra) = pass.iter().find(|v| !p.env.pass.contains(v)) {
                return Err(self.widen("env.pass", extra.clone(), format!("{:?}", p.env.pass)));
            }
            p.env.pass = pass.clone();
        }
        if n.set.as_ref().is_some_and(|set| !set.is_empty()) {
            // Variables such as LD_PRELOAD or PATH change what code runs; only policy files set them.
            return Err(self.widen(
                "env.set",
                "new variables".into(),
                "only the policy's own".into(),
            ));
        }
        Ok(())
    }

    fn runtime(&self, p: &Policy, asked: &str) -> Result<(), PolicyError> {
        // The runtime is the isolation itself (runsc vs runc); a narrowing may not swap it.
        if p.runtime.as_deref() == Some(asked) {
            return Ok(());
        }
        Err(self.widen(
            "runtime",
            asked.to_string(),
            p.runtime
                .clone()
                .unwrap_or_else(|| "the engine's default".into()),
        ))
    }
}

impl Policy {
    /// Applies `narrowing` by the rules in this module's documentation. Every entry point
    /// (`golem.yaml`, worker definitions, run flags) goes through here, so they cannot disagree.
    /// On error `self` is unchanged.
    pub fn narrow(&mut self, narrowing: &Narrowing, origin: Origin<'_>) -> Result<(), PolicyError> {
        let ask = Ask {
            level: self.level,
            origin,
        };
        let n = narrowing;
        let mut p = self.clone();
        if let Some(m) = &n.mounts {
            ask.mounts(&mut p.mounts, m)?;
        }
        if let Some(net) = &n.network {
            let slot = &mut p.network.allow_opt_in;
            ask.lower(slot, net.allow_opt_in, "network.allow_opt_in")?;
        }
        if let Some(r) = &n.resources {
            ask.resources(&mut p, r)?;
            ask.still_valid(&p)?;
        }
        if let Some(o) = &n.output {
            ask.output(&mut p, o)?;
            ask.still_valid(&p)?;
        }
        if let Some(i) = &n.input {
            let slot = &mut p.input.max_total_bytes;
            ask.lower(slot, i.max_total_bytes, "input.max_total_bytes")?;
        }
        if let Some(e) = &n.env {
            ask.env(&mut p, e)?;
        }
        if let Some(rt) = &n.runtime {
            ask.runtime(&p, rt)?;
        }
        ask.still_valid(&p)?;
        *self = p;
        Ok(())
    }
}

/// Lowers the session's input cap for one run (`--max-input`); asking for more is an error.
pub fn narrow_input(policy: &mut Policy, max_input: Option<Size>) -> Result<(), PolicyError> {
    policy.narrow(&Narrowing::from_flags(None, None, max_input), Origin::Flags)
}

/// Lowers the memory and timeout for one run; asking for more than the policy allows is an error.
pub fn narrow_for_run(
    policy: &mut Policy,
    memory: Option<Size>,
    timeout: Option<Limit>,
) -> Result<(), PolicyError> {
    policy.narrow(&Narrowing::from_flags(memory, timeout, None), Origin::Flags)
}
