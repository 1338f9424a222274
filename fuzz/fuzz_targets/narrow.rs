//! Shared by the policy and worker_def targets: a policy never grants more than its base.

use golem_orch::policy::{NetworkMode, Policy};

/// Panics when `p` grants anything `base` does not.
pub fn assert_never_wider(base: &Policy, p: &Policy) {
    assert_eq!(p.level, base.level);
    assert!(p.mounts.input <= base.mounts.input, "mounts.input widened");
    assert!(p.mounts.workspace <= base.mounts.workspace, "mounts.workspace widened");
    assert!(p.mounts.repo <= base.mounts.repo, "mounts.repo widened");
    assert_eq!(p.network.mode, NetworkMode::None);
    assert!(p.network.allow_opt_in <= base.network.allow_opt_in, "allow_opt_in widened");
    assert!(p.resources.memory <= base.resources.memory, "memory widened");
    assert!(p.resources.cpus <= base.resources.cpus, "cpus widened");
    assert!(p.resources.cpus >= 0.01, "cpus below what Docker enforces");
    assert!(p.resources.pids <= base.resources.pids && p.resources.pids > 0, "pids");
    assert!(p.resources.timeout <= base.resources.timeout, "timeout widened");
    assert!(p.resources.tmp <= base.resources.tmp, "tmp widened");
    assert!(p.output.max_total_bytes <= base.output.max_total_bytes, "max_total_bytes");
    assert!(p.output.max_files <= base.output.max_files && p.output.max_files > 0, "max_files");
    assert!(p.output.max_file_bytes <= base.output.max_file_bytes, "max_file_bytes");
    assert!(p.output.max_file_bytes <= p.output.max_total_bytes, "file cap over total");
    assert_eq!(p.env.set, base.env.set, "env.set changed");
    assert!(p.env.pass.iter().all(|v| base.env.pass.contains(v)), "env.pass widened");
    assert_eq!(p.runtime, base.runtime, "runtime changed");
    assert_eq!(p.user, base.user, "user changed");
    assert!(p.fixed_user().is_none_or(|(u, g)| u != 0 && g != 0));
}
