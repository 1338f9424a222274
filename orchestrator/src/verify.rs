//! Verify after create: the container the engine made is compared with the plan before it
//! starts, so a worker never runs under settings golem-orch did not ask for.
//!
//! An engine may drop or rewrite an option (a daemon default, another runtime, a
//! Docker-compatible engine that ignores a field); the session would otherwise trust that the
//! plan was applied. The comparison is about what protects the host: identity, network, root
//! filesystem, capabilities, security options, limits, every mount and its propagation, tmpfs,
//! runtime, init and healthcheck. Any difference fails the session before the worker runs.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::engine::{Effective, EffectiveMount};
use crate::plan::ContainerPlan;

/// One setting that is not what the plan asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    /// Which setting.
    pub field: &'static str,
    /// What the plan asked for.
    pub planned: String,
    /// What the engine recorded.
    pub effective: String,
}

/// What a staged commit says about the container that really ran: the settings the engine
/// recorded (checked against the plan) and their digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verified {
    /// sha256 of the settings' canonical JSON.
    pub digest: String,
    /// The settings.
    pub settings: Effective,
    /// Protections the engine could not apply as planned, and what stood in for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaced: Vec<crate::engine::Replaced>,
}

impl Verified {
    /// Wraps checked settings with their digest and what the engine replaced.
    pub fn new(settings: Effective, replaced: Vec<crate::engine::Replaced>) -> Verified {
        let json = serde_json::to_vec(&settings).unwrap_or_default();
        Verified {
            digest: hex::encode(Sha256::digest(&json)),
            settings,
            replaced,
        }
    }
}

/// Security options that switch a protection off; never acceptable, whoever added them.
const UNCONFINED: &[&str] = &[
    "seccomp=unconfined",
    "seccomp:unconfined",
    "apparmor=unconfined",
    "apparmor:unconfined",
    "label=disable",
    "label:disable",
    "systempaths=unconfined",
];

/// Bind propagations that keep host and container mount events apart.
const PRIVATE_PROPAGATION: &[&str] = &["", "private", "rprivate"];

/// The mounts the plan asks for, sorted by target, as [`Effective::mounts`] reports them.
pub fn planned_mounts(plan: &ContainerPlan) -> Vec<EffectiveMount> {
    let bind = |b: &crate::plan::BindMount| EffectiveMount {
        kind: "bind".into(),
        source: b.source.display().to_string(),
        target: b.target.clone(),
        read_only: b.read_only,
        propagation: String::new(),
    };
    let mut mounts: Vec<EffectiveMount> = plan.binds.iter().map(bind).collect();
    mounts.push(bind(&plan.init));
    if let Some(w) = &plan.workspace {
        mounts.push(EffectiveMount {
            kind: "volume".into(),
            source: w.overlay.volume.clone(),
            target: w.target.clone(),
            read_only: w.read_only,
            propagation: String::new(),
        });
    }
    mounts.extend(plan.masks.iter().map(|target| EffectiveMount {
        kind: "tmpfs".into(),
        source: String::new(),
        target: target.clone(),
        read_only: true,
        propagation: String::new(),
    }));
    mounts.sort();
    mounts
}

/// The settings a faithful engine records for `plan` (what [`compare`] accepts exactly); the
/// runtime is the plan's, or `runc` when it names none.
pub fn expected(plan: &ContainerPlan) -> Effective {
    Effective {
        image: plan.image_id.clone().unwrap_or_else(|| plan.image.clone()),
        user: plan.user.clone(),
        entrypoint: plan.container_entrypoint(),
        cmd: Vec::new(),
        healthcheck: vec!["NONE".into()],
        network_mode: plan.network.as_str().into(),
        network_disabled: plan.network == crate::policy::NetworkMode::None,
        readonly_rootfs: plan.read_only_rootfs,
        privileged: false,
        cap_add: Vec::new(),
        cap_drop: plan.cap_drop.clone(),
        security_opt: plan.security_opt.clone(),
        pids_limit: plan.pids_limit,
        memory: i64::try_from(plan.memory_bytes).unwrap_or(i64::MAX),
        memory_swap: i64::try_from(plan.memory_bytes).unwrap_or(i64::MAX),
        nano_cpus: plan.nano_cpus,
        mounts: planned_mounts(plan),
        tmpfs: plan.tmpfs_mounts(),
        runtime: plan.runtime.clone().unwrap_or_else(|| "runc".into()),
        init: false,
        ipc_mode: "private".into(),
        pid_mode: String::new(),
        userns_mode: String::new(),
        devices: 0,
        cgroupns_mode: "private".into(),
        uts_mode: String::new(),
        ulimits: crate::plan::ulimits(plan),
        sysctls: std::collections::BTreeMap::new(),
        oom_kill_disable: false,
        oom_score_adj: crate::plan::OOM_SCORE_ADJ,
        shm_size: crate::plan::SHM_BYTES,
    }
}

fn cap(name: &str) -> String {
    let upper = name.trim().to_ascii_uppercase();
    upper.strip_prefix("CAP_").unwrap_or(&upper).to_string()
}

fn shown<T: std::fmt::Debug>(v: &T) -> String {
    format!("{v:?}")
}

/// Every setting of `eff` that differs from what `plan` asked for; empty when the container is
/// the one planned. Dropped capabilities must include the plan's (more are fine); security
/// options, limits, namespaces and mounts must match exactly, mounts with private propagation.
pub fn compare(plan: &ContainerPlan, eff: &Effective) -> Vec<Mismatch> {
    let want = expected(plan);
    let mut out = Vec::new();
    let mut check = |field: &'static str, ok: bool, planned: String, effective: String| {
        if !ok {
            out.push(Mismatch {
                field,
                planned,
                effective,
            });
        }
    };
    macro_rules! same {
        ($field:ident) => {
            check(
                stringify!($field),
                want.$field == eff.$field,
                shown(&want.$field),
                shown(&eff.$field),
            )
        };
    }
    if plan.image_id.is_some() {
        same!(image);
    }
    same!(user);
    same!(entrypoint);
    same!(cmd);
    same!(healthcheck);
    same!(network_mode);
    same!(readonly_rootfs);
    same!(privileged);
    same!(pids_limit);
    same!(memory);
    same!(memory_swap);
    same!(nano_cpus);
    same!(tmpfs);
    same!(init);
    same!(ipc_mode);
    same!(devices);
    same!(cgroupns_mode);
    same!(ulimits);
    same!(sysctls);
    same!(oom_kill_disable);
    same!(oom_score_adj);
    same!(shm_size);
    if want.network_disabled {
        same!(network_disabled);
    }
    if plan.runtime.is_some() {
        same!(runtime);
    }
    check(
        "cap_add",
        eff.cap_add.is_empty(),
        "[]".into(),
        shown(&eff.cap_add),
    );
    let dropped: Vec<String> = eff.cap_drop.iter().map(|c| cap(c)).collect();
    check(
        "cap_drop",
        want.cap_drop.iter().all(|c| dropped.contains(&cap(c))),
        shown(&want.cap_drop),
        shown(&eff.cap_drop),
    );
    // Exactly the plan's options: an engine-added one (a label, a profile, a weaker
    // no-new-privileges) is a change the plan did not make, whatever it says.
    let mut got_opts = eff.security_opt.clone();
    got_opts.sort();
    let mut want_opts = want.security_opt.clone();
    want_opts.sort();
    let opts_ok = got_opts == want_opts
        && !eff
            .security_opt
            .iter()
            .any(|o| UNCONFINED.contains(&o.trim().to_ascii_lowercase().as_str()));
    check(
        "security_opt",
        opts_ok,
        shown(&want.security_opt),
        shown(&eff.security_opt),
    );
    check(
        "pid_mode",
        eff.pid_mode.is_empty() || eff.pid_mode == "private",
        "private".into(),
        shown(&eff.pid_mode),
    );
    check(
        "uts_mode",
        eff.uts_mode.is_empty() || eff.uts_mode == "private",
        "private".into(),
        shown(&eff.uts_mode),
    );
    check(
        "userns_mode",
        eff.userns_mode != "host",
        "the daemon's".into(),
        shown(&eff.userns_mode),
    );
    let mut got = eff.mounts.clone();
    let propagation_ok = got
        .iter()
        .all(|m| PRIVATE_PROPAGATION.contains(&m.propagation.as_str()));
    check(
        "mount propagation",
        propagation_ok,
        "private".into(),
        shown(&got.iter().map(|m| &m.propagation).collect::<Vec<_>>()),
    );
    for m in &mut got {
        m.propagation.clear();
    }
    got.sort();
    check(
        "mounts",
        got == want.mounts,
        shown(&want.mounts),
        shown(&got),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::TrustLevel;

    fn plan() -> ContainerPlan {
        crate::plan::sample(TrustLevel::Untrusted)
    }

    #[test]
    fn the_planned_container_passes_and_its_digest_is_stable() {
        let plan = plan();
        let mut eff = expected(&plan);
        assert!(compare(&plan, &eff).is_empty());
        // Engines add propagation and reorder; more dropped caps and options are fine.
        for m in &mut eff.mounts {
            if m.kind == "bind" {
                m.propagation = "rprivate".into();
            }
        }
        eff.mounts.reverse();
        eff.cap_drop.push("NET_RAW".into());
        assert!(
            compare(&plan, &eff).is_empty(),
            "{:?}",
            compare(&plan, &eff)
        );
        assert_eq!(
            Verified::new(expected(&plan), vec![]).digest,
            Verified::new(expected(&plan), vec![]).digest
        );
    }

    #[test]
    fn every_weakened_setting_is_named() {
        let plan = plan();
        type Weaken = fn(&mut Effective);
        let cases: Vec<(&str, Weaken)> = vec![
            ("user", |e| e.user = "0:0".into()),
            ("network_mode", |e| e.network_mode = "bridge".into()),
            ("network_disabled", |e| e.network_disabled = false),
            ("readonly_rootfs", |e| e.readonly_rootfs = false),
            ("privileged", |e| e.privileged = true),
            ("cap_add", |e| e.cap_add = vec!["SYS_ADMIN".into()]),
            ("cap_drop", |e| e.cap_drop.clear()),
            ("security_opt", |e| e.security_opt.clear()),
            ("security_opt", |e| {
                e.security_opt.push("seccomp=unconfined".into())
            }),
            ("security_opt", |e| {
                e.security_opt.push("label=type:spc_t".into())
            }),
            ("cgroupns_mode", |e| e.cgroupns_mode = "host".into()),
            ("uts_mode", |e| e.uts_mode = "host".into()),
            ("ulimits", |e| {
                e.ulimits.insert("nofile".into(), (1 << 20, 1 << 20));
            }),
            ("sysctls", |e| {
                e.sysctls
                    .insert("kernel.shm_rmid_forced".into(), "0".into());
            }),
            ("oom_kill_disable", |e| e.oom_kill_disable = true),
            ("oom_score_adj", |e| e.oom_score_adj = -1000),
            ("shm_size", |e| e.shm_size = 1 << 30),
            ("pids_limit", |e| e.pids_limit = 0),
            ("memory", |e| e.memory = 0),
            ("memory_swap", |e| e.memory_swap = -1),
            ("nano_cpus", |e| e.nano_cpus = 0),
            ("tmpfs", |e| {
                e.tmpfs.values_mut().for_each(|v| *v = "rw".into())
            }),
            ("init", |e| e.init = true),
            ("ipc_mode", |e| e.ipc_mode = "host".into()),
            ("pid_mode", |e| e.pid_mode = "host".into()),
            ("userns_mode", |e| e.userns_mode = "host".into()),
            ("devices", |e| e.devices = 1),
            ("healthcheck", |e| e.healthcheck = vec!["CMD".into()]),
            ("entrypoint", |e| e.entrypoint = vec!["/bin/sh".into()]),
            ("cmd", |e| e.cmd = vec!["x".into()]),
            ("image", |e| e.image = "sha256:ffff".into()),
            ("mounts", |e| {
                e.mounts.iter_mut().for_each(|m| m.read_only = false)
            }),
            ("mounts", |e| {
                e.mounts.push(EffectiveMount {
                    kind: "bind".into(),
                    source: "/".into(),
                    target: "/host".into(),
                    read_only: false,
                    propagation: String::new(),
                })
            }),
            ("mounts", |e| {
                e.mounts.pop();
            }),
            ("mount propagation", |e| {
                e.mounts[0].propagation = "rshared".into()
            }),
        ];
        for (field, weaken) in cases {
            let mut eff = expected(&plan);
            weaken(&mut eff);
            let found = compare(&plan, &eff);
            assert!(found.iter().any(|m| m.field == field), "{field}: {found:?}");
        }
    }
}
