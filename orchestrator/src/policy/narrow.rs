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
//!   how it is isolated, so only a policy file chooses them. `runtimes` (what `--runtime` may
//!   choose) may only drop names and must keep the level's own runtime; `runtime_required` may
//!   be switched on, never off.
//! - `model.allow` may only drop names (a subset of the policy's own list, compared as written:
//!   `host` stays `host`, since which model the host names is not known here), and every model
//!   budget is an ordered value like the rest. The upstream and the key are not in a policy at
//!   all, so no narrowing can name them.
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
    /// Fewer runtimes for `--runtime`; the level's own must stay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtimes: Option<Vec<String>>,
    /// `true` requires the level's runtime (no fallback); `false` on a level that requires it
    /// is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_required: Option<bool>,
    /// Fewer models, smaller budgets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelNarrowing>,
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

/// Model access to narrow; see [`ModelPolicy`](super::ModelPolicy).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelNarrowing {
    /// The models to keep; a subset of the policy's list (empty gives up model access).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    /// Requests per session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u64>,
    /// Input tokens per session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_input_tokens: Option<u64>,
    /// Output tokens per session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    /// Requests in flight, at least one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<u64>,
    /// One upstream request's time limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout: Option<Limit>,
    /// One request body's size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_request_bytes: Option<Size>,
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

    fn model(&self, p: &mut Policy, n: &ModelNarrowing) -> Result<(), PolicyError> {
        let m = &mut p.model;
        if let Some(allow) = &n.allow {
            if let Some(extra) = allow.iter().find(|name| !m.allow.contains(name)) {
                return Err(self.widen("model.allow", extra.clone(), format!("{:?}", m.allow)));
            }
            m.allow = allow.clone();
        }
        self.lower(&mut m.max_requests, n.max_requests, "model.max_requests")?;
        let input = n.max_input_tokens;
        self.lower(&mut m.max_input_tokens, input, "model.max_input_tokens")?;
        let output = n.max_output_tokens;
        self.lower(&mut m.max_output_tokens, output, "model.max_output_tokens")?;
        let concurrent = n.max_concurrent;
        self.lower(&mut m.max_concurrent, concurrent, "model.max_concurrent")?;
        let timeout = n.request_timeout;
        self.lower(&mut m.request_timeout, timeout, "model.request_timeout")?;
        let bytes = n.max_request_bytes;
        self.lower(&mut m.max_request_bytes, bytes, "model.max_request_bytes")
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

    fn runtimes(&self, p: &mut Policy, asked: &[String]) -> Result<(), PolicyError> {
        let allowed = p.allowed_runtimes();
        let own = p.own_runtime().to_string();
        let shown = |list: &[String]| format!("[{}]", list.join(", "));
        if let Some(extra) = asked.iter().find(|r| !allowed.contains(r)) {
            return Err(self.widen("runtimes", extra.clone(), shown(&allowed)));
        }
        // Dropping the level's own runtime would switch its isolation; that is the policy
        // file's choice alone.
        if !asked.contains(&own) {
            return Err(self.widen("runtimes", shown(asked), format!("a list holding {own}")));
        }
        let mut kept: Vec<String> = Vec::new();
        for r in asked {
            if !kept.contains(r) {
                kept.push(r.clone());
            }
        }
        p.runtimes = kept;
        Ok(())
    }

    fn runtime_required(&self, p: &mut Policy, asked: bool) -> Result<(), PolicyError> {
        if !asked && p.runtime_required {
            return Err(self.widen("runtime_required", "false".into(), "true".into()));
        }
        if asked {
            p.runtime = Some(p.own_runtime().to_string());
            p.runtime_required = true;
        }
        Ok(())
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
        if let Some(list) = &n.runtimes {
            ask.runtimes(&mut p, list)?;
        }
        if let Some(required) = n.runtime_required {
            ask.runtime_required(&mut p, required)?;
        }
        if let Some(m) = &n.model {
            ask.model(&mut p, m)?;
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

#[cfg(test)]
mod tests {
    use super::super::load::apply_project;
    use super::super::ModelPolicy;
    use super::*;
    use crate::workers::Definition;
    use proptest::prelude::*;
    use std::time::Duration;

    fn access() -> impl Strategy<Value = Access> {
        prop_oneof![Just(Access::None), Just(Access::Ro), Just(Access::Rw)]
    }

    /// A random valid policy: any level, every value somewhere inside what the level allows.
    fn policy() -> BoxedStrategy<Policy> {
        let level = proptest::sample::select(TrustLevel::ALL.to_vec());
        level
            .prop_flat_map(|level| {
                let mounts = (
                    prop_oneof![Just(Access::None), Just(Access::Ro)],
                    access(),
                    access(),
                );
                let resources = (
                    (6u64 << 20)..=(8u64 << 30),
                    1u32..=400,
                    1u64..=4096,
                    1u64..=7200,
                    1u64..=(1u64 << 30),
                );
                let output = (1u64..=(1u64 << 30), 1u64..=10_000, 1u64..=(1u64 << 30));
                let env = proptest::sample::subsequence(vec!["HOME", "TERM", "TZ"], 0..=3);
                let runtime = (
                    proptest::option::of(Just("runsc")),
                    any::<bool>(),
                    any::<bool>(),
                );
                let input = 1u64..=level.input_ceiling().bytes();
                (
                    (Just(level), mounts, any::<bool>(), resources),
                    (output, input, env, runtime, model_policy()),
                )
                    .prop_map(
                        |((level, m, opt_in, r), (o, input, env, runtime, model))| {
                            let mut p = super::super::load(level, None, None).unwrap().policy;
                            let (ws_max, repo_max) = level.ceiling();
                            p.mounts = Mounts {
                                input: m.0,
                                workspace: m.1.min(ws_max),
                                repo: m.2.min(repo_max),
                            };
                            p.network.allow_opt_in = opt_in && level == TrustLevel::Full;
                            p.resources.memory = Size(r.0);
                            p.resources.cpus = f64::from(r.1) / 100.0;
                            p.resources.pids = r.2;
                            p.resources.timeout = Limit(Duration::from_secs(r.3));
                            p.resources.tmp = Size(r.4);
                            p.output.max_total_bytes = Size(o.0);
                            p.output.max_files = o.1;
                            p.output.max_file_bytes = Size(o.2.min(o.0));
                            p.input.max_total_bytes = Size(input);
                            p.env.pass = env.into_iter().map(String::from).collect();
                            p.runtime = runtime.0.map(String::from);
                            p.runtimes = if runtime.1 {
                                vec!["runc".into(), "runsc".into()]
                            } else {
                                Vec::new()
                            };
                            p.runtime_required = runtime.2 && p.runtime.is_some();
                            p.model = model;
                            p
                        },
                    )
            })
            .boxed()
    }

    /// Model names a policy or a narrowing may hold.
    const MODELS: [&str; 3] = ["host", "claude-haiku-4-5", "gpt-4o-mini"];

    /// A random valid `model:` section.
    fn model_policy() -> BoxedStrategy<ModelPolicy> {
        let allow = proptest::sample::subsequence(MODELS.to_vec(), 0..=3);
        let budgets = (0u64..=1000, 0u64..=1_000_000, 0u64..=100_000);
        let rest = (1u64..=16, 1u64..=600, 1u64..=(16u64 << 20));
        (allow, budgets, rest)
            .prop_map(|(allow, b, r)| ModelPolicy {
                allow: allow.into_iter().map(String::from).collect(),
                max_requests: b.0,
                max_input_tokens: b.1,
                max_output_tokens: b.2,
                max_concurrent: r.0,
                request_timeout: Limit(Duration::from_secs(r.1)),
                max_request_bytes: Size(r.2),
            })
            .boxed()
    }

    /// A random narrowing of `p`'s `model:` section, asking below, at and above each value.
    fn model(p: &Policy) -> BoxedStrategy<ModelNarrowing> {
        let m = &p.model;
        let allow = proptest::sample::subsequence(MODELS.to_vec(), 0..=3)
            .prop_map(|names| names.into_iter().map(String::from).collect::<Vec<_>>());
        let concurrent = prop_oneof![1 => Just(0), 5 => around(m.max_concurrent)];
        let budgets = (
            some(around(m.max_requests.max(1))),
            some(around(m.max_input_tokens.max(1))),
            some(around(m.max_output_tokens.max(1))),
        );
        let rest = (
            some(concurrent),
            some(around(m.request_timeout.duration().as_secs()).prop_map(Duration::from_secs)),
            some(around(m.max_request_bytes.bytes()).prop_map(Size)),
        );
        (some(allow), budgets, rest)
            .prop_map(|(allow, b, r)| ModelNarrowing {
                allow,
                max_requests: b.0,
                max_input_tokens: b.1,
                max_output_tokens: b.2,
                max_concurrent: r.0,
                request_timeout: r.1.map(Limit),
                max_request_bytes: r.2,
            })
            .boxed()
    }

    /// Below, at and above `base`, and sometimes small whatever `base` is.
    fn around(base: u64) -> impl Strategy<Value = u64> {
        prop_oneof![
            3 => 1..=base,
            2 => base..=base.saturating_mul(2),
            1 => 1u64..=(8 << 20),
        ]
    }

    fn some<T: fmt::Debug>(s: impl Strategy<Value = T>) -> impl Strategy<Value = Option<T>> {
        proptest::option::weighted(0.4, s)
    }

    fn resources(p: &Policy) -> impl Strategy<Value = ResourcesNarrowing> {
        let r = &p.resources;
        // Whole hundredths, as people write them; zero is below the floor.
        let cpus = (0..=(r.cpus * 200.0) as u32).prop_map(|c| f64::from(c) / 100.0);
        let pids = prop_oneof![1 => Just(0), 5 => around(r.pids)];
        (
            some(around(r.memory.bytes()).prop_map(Size)),
            some(cpus),
            some(pids),
            some(around(r.timeout.duration().as_secs()).prop_map(Duration::from_secs)),
            some(around(r.tmp.bytes()).prop_map(Size)),
        )
            .prop_map(|(memory, cpus, pids, timeout, tmp)| ResourcesNarrowing {
                memory,
                cpus,
                pids,
                timeout: timeout.map(Limit),
                tmp,
            })
    }

    fn output(p: &Policy) -> impl Strategy<Value = OutputNarrowing> {
        let o = &p.output;
        let files = prop_oneof![1 => Just(0), 5 => around(o.max_files)];
        (
            some(around(o.max_total_bytes.bytes()).prop_map(Size)),
            some(files),
            some(around(o.max_file_bytes.bytes()).prop_map(Size)),
        )
            .prop_map(
                |(max_total_bytes, max_files, max_file_bytes)| OutputNarrowing {
                    max_total_bytes,
                    max_files,
                    max_file_bytes,
                },
            )
    }

    fn env(p: &Policy) -> impl Strategy<Value = EnvNarrowing> {
        let mut names = p.env.pass.clone();
        names.push("EXTRA".into());
        let len = names.len();
        let set = prop_oneof![
            Just(BTreeMap::new()),
            Just(BTreeMap::from([(
                "LD_PRELOAD".into(),
                "/input/x.so".into()
            )])),
        ];
        (
            some(proptest::sample::subsequence(names, 0..=len)),
            some(set),
        )
            .prop_map(|(pass, set)| EnvNarrowing { pass, set })
    }

    /// A random narrowing of `p`, every value drawn below, at and above the policy's own.
    fn narrowing(p: &Policy) -> BoxedStrategy<Narrowing> {
        let mounts =
            (some(access()), some(access()), some(access())).prop_map(|m| MountsNarrowing {
                input: m.0,
                workspace: m.1,
                repo: m.2,
            });
        let network =
            some(any::<bool>()).prop_map(|allow_opt_in| NetworkNarrowing { allow_opt_in });
        let input = some(around(p.input.max_total_bytes.bytes()).prop_map(Size))
            .prop_map(|max_total_bytes| InputNarrowing { max_total_bytes });
        let runtime = prop_oneof![Just("runsc".to_string()), Just("runc".to_string())];
        let names = vec!["runc".to_string(), "runsc".to_string(), "kata".to_string()];
        let runtimes = some(proptest::sample::subsequence(names, 0..=3));
        (
            (some(mounts), some(network), some(resources(p))),
            (some(output(p)), some(input), some(env(p)), some(runtime)),
            (some(model(p)), runtimes, some(any::<bool>())),
        )
            .prop_map(
                |(
                    (mounts, network, resources),
                    (output, input, env, runtime),
                    (model, runtimes, runtime_required),
                )| Narrowing {
                    mounts,
                    network,
                    resources,
                    output,
                    input,
                    env,
                    runtime,
                    runtimes,
                    runtime_required,
                    model,
                },
            )
            .boxed()
    }

    fn case() -> impl Strategy<Value = (Policy, Narrowing)> {
        policy().prop_flat_map(|p| {
            let n = narrowing(&p);
            (Just(p), n)
        })
    }

    /// The narrowed policy, or the error without its location: the entry points report the
    /// same problem at different places (a line, a worker file, a flag).
    type Outcome = Result<Policy, String>;

    fn outcome(
        base: &Policy,
        apply: impl FnOnce(&mut Policy) -> Result<(), PolicyError>,
    ) -> Outcome {
        let mut p = base.clone();
        apply(&mut p).map(|()| p).map_err(|e| match e {
            PolicyError::Widen {
                level,
                key,
                asked,
                allowed,
                ..
            } => format!("{level} {key}: {asked} > {allowed}"),
            PolicyError::Invalid { message, .. } => message,
            other => other.to_string(),
        })
    }

    /// Through a `golem.yaml` holding `n` for the policy's level, as text, the way `load` reads it.
    fn via_project_file(base: &Policy, n: &Narrowing) -> Outcome {
        let file = BTreeMap::from([("levels", BTreeMap::from([(base.level, n)]))]);
        let text = serde_yaml::to_string(&file).unwrap();
        outcome(base, |p| {
            assert!(apply_project(p, &text, "golem.yaml")?, "{text}");
            Ok(())
        })
    }

    /// Through a worker definition file asking for `n`'s mounts and output.
    fn via_worker(base: &Policy, n: &Narrowing) -> Outcome {
        let m = n.mounts.clone().unwrap_or_default();
        let mounts: BTreeMap<&str, Access> = [("input", m.input), ("workspace", m.workspace)]
            .into_iter()
            .chain([("repo", m.repo)])
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect();
        let asks = BTreeMap::from([
            ("mounts", serde_yaml::to_value(mounts).unwrap()),
            (
                "output",
                serde_yaml::to_value(n.output.clone().unwrap_or_default()).unwrap(),
            ),
        ]);
        let text = format!(
            "---\nname: w\ndescription: d\nimage: golem-worker\ntrust: untrusted\n{}---\nDo it.\n",
            serde_yaml::to_string(&asks).unwrap()
        );
        let def = Definition::parse(&text, "w.worker").unwrap();
        outcome(base, |p| def.narrow(p))
    }

    /// Through the run flags, in the order the command line applies them.
    fn via_flags(base: &Policy, n: &Narrowing) -> Outcome {
        let r = n.resources.clone().unwrap_or_default();
        let input = n.input.clone().unwrap_or_default();
        outcome(base, |p| {
            narrow_for_run(p, r.memory, r.timeout)?;
            narrow_input(p, input.max_total_bytes)
        })
    }

    fn worker_part(n: &Narrowing) -> Narrowing {
        Narrowing {
            mounts: n.mounts.clone(),
            output: n.output.clone(),
            ..Narrowing::default()
        }
    }

    fn flags_part(n: &Narrowing) -> Narrowing {
        let r = n.resources.clone().unwrap_or_default();
        let input = n.input.clone().unwrap_or_default();
        Narrowing::from_flags(r.memory, r.timeout, input.max_total_bytes)
    }

    /// Panics when `p` grants anything `base` does not, or is not a valid policy.
    fn assert_never_wider(base: &Policy, p: &Policy) {
        assert_eq!(p.validate(), Ok(()));
        assert_eq!(
            (p.level, &p.user, &p.env.set, p.own_runtime()),
            (base.level, &base.user, &base.env.set, base.own_runtime())
        );
        let allowed = base.allowed_runtimes();
        assert!(p.allowed_runtimes().iter().all(|r| allowed.contains(r)));
        assert!(p.allowed_runtimes().iter().any(|r| r == p.own_runtime()));
        assert!(p.runtime_required >= base.runtime_required);
        assert!(p.mounts.input <= base.mounts.input);
        assert!(p.mounts.workspace <= base.mounts.workspace);
        assert!(p.mounts.repo <= base.mounts.repo);
        assert_eq!(p.network.mode, base.network.mode);
        assert!(p.network.allow_opt_in <= base.network.allow_opt_in);
        let (r, b) = (&p.resources, &base.resources);
        assert!(r.memory <= b.memory && r.cpus <= b.cpus && r.pids <= b.pids);
        assert!(r.timeout <= b.timeout && r.tmp <= b.tmp);
        let (o, b) = (&p.output, &base.output);
        assert!(o.max_total_bytes <= b.max_total_bytes && o.max_files <= b.max_files);
        assert!(o.max_file_bytes <= b.max_file_bytes && o.max_file_bytes <= o.max_total_bytes);
        assert!(p.input.max_total_bytes <= base.input.max_total_bytes);
        assert!(p.env.pass.iter().all(|v| base.env.pass.contains(v)));
        let (m, b) = (&p.model, &base.model);
        assert!(m.allow.iter().all(|name| b.allow.contains(name)));
        assert!(m.max_requests <= b.max_requests && m.max_input_tokens <= b.max_input_tokens);
        assert!(m.max_output_tokens <= b.max_output_tokens);
        assert!((1..=b.max_concurrent).contains(&m.max_concurrent));
        assert!(m.request_timeout <= b.request_timeout);
        assert!(m.max_request_bytes <= b.max_request_bytes);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn the_three_entry_points_agree((base, n) in case()) {
            // golem.yaml can say everything: its text path matches the narrowing itself.
            let direct = outcome(&base, |p| p.narrow(&n, Origin::Flags));
            prop_assert_eq!(via_project_file(&base, &n), direct);
            let w = worker_part(&n);
            prop_assert_eq!(via_worker(&base, &w), via_project_file(&base, &w));
            let f = flags_part(&n);
            prop_assert_eq!(via_flags(&base, &f), via_project_file(&base, &f));
        }

        #[test]
        fn narrowing_never_widens_and_fails_whole((base, n) in case()) {
            let mut p = base.clone();
            match p.narrow(&n, Origin::Flags) {
                Ok(()) => assert_never_wider(&base, &p),
                Err(_) => prop_assert_eq!(p, base),
            }
        }
    }

    /// The generator reaches both outcomes on every path, so agreement is not vacuous.
    #[test]
    fn the_generator_exercises_both_outcomes_on_every_path() {
        use proptest::strategy::ValueTree;
        use proptest::test_runner::TestRunner;
        let mut runner = TestRunner::deterministic();
        let mut counts = [[0u32; 2]; 3];
        for _ in 0..400 {
            let (base, n) = case().new_tree(&mut runner).unwrap().current();
            let paths = [
                via_project_file(&base, &n),
                via_worker(&base, &worker_part(&n)),
                via_flags(&base, &flags_part(&n)),
            ];
            for (count, result) in counts.iter_mut().zip(paths) {
                count[usize::from(result.is_err())] += 1;
            }
        }
        for [ok, err] in counts {
            assert!(ok > 40 && err > 40, "{counts:?}");
        }
    }

    #[test]
    fn a_file_cap_above_the_total_is_clamped_on_every_path() {
        let base = super::super::load(TrustLevel::Untrusted, None, None)
            .unwrap()
            .policy;
        assert!(base.output.max_file_bytes < base.output.max_total_bytes);
        // Lowering the total alone leaves no file cap above it ...
        let total_only = Narrowing {
            output: Some(OutputNarrowing {
                max_total_bytes: Some(Size(1 << 20)),
                ..OutputNarrowing::default()
            }),
            ..Narrowing::default()
        };
        // ... and a file cap between the new total and the old cap is clamped, not refused.
        let both = Narrowing {
            output: Some(OutputNarrowing {
                max_total_bytes: Some(Size(1 << 20)),
                max_file_bytes: Some(Size(2 << 20)),
                ..OutputNarrowing::default()
            }),
            ..Narrowing::default()
        };
        for n in [total_only, both] {
            let via_file = via_project_file(&base, &n).unwrap();
            assert_eq!(via_file.output.max_file_bytes, Size(1 << 20));
            assert_eq!(via_worker(&base, &n), Ok(via_file));
        }
    }

    #[test]
    fn errors_point_at_the_line_the_worker_or_the_flag() {
        let base = super::super::load(TrustLevel::Untrusted, None, None)
            .unwrap()
            .policy;
        let text = "levels:\n  untrusted:\n    resources:\n      memory: 1m\n";
        let err = apply_project(&mut base.clone(), text, "golem.yaml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "golem.yaml:4:7: resources.memory: Docker needs at least 6MiB"
        );
        let err = narrow_for_run(&mut base.clone(), Some(Size(1 << 20)), None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--memory: resources.memory: Docker needs at least 6MiB"
        );
        let err = narrow_input(&mut base.clone(), Some(Size(8 << 30))).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("--max-input: input.max_total_bytes may only narrow"),
            "{err}"
        );
        let n = Narrowing {
            output: Some(OutputNarrowing {
                max_files: Some(0),
                ..OutputNarrowing::default()
            }),
            ..Narrowing::default()
        };
        let err = base
            .clone()
            .narrow(&n, Origin::Worker { file: "w.worker" })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "w.worker: output.max_files: must be greater than zero"
        );
    }
}
