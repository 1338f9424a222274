//! Engine operations for one session: the output volume, the holder, the worker, and cleanup.
//!
//! Output design (measured on the target engine): a tmpfs mounted at `/output` is invisible to the
//! archive API and gone when the container stops, and a plain volume has no size limit. So the
//! output is a *tmpfs-backed local volume* whose `size=` and `nr_inodes=` are kernel-enforced caps,
//! and a tiny "holder" container keeps that volume mounted after the worker exits, so the archive
//! API can still read it. The worker gets ENOSPC at the cap; the host never holds more.
//!
//! Everything created is registered in a [`Tracker`] before use, so every exit path (success,
//! failure, timeout, Ctrl-C) removes exactly what this session created.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigLogConfig, Mount, MountType, MountVolumeOptions,
    ResourcesUlimits, VolumeCreateRequest,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, DownloadFromContainerOptionsBuilder,
    KillContainerOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
    RemoveVolumeOptionsBuilder,
};
use bollard::Docker;
use futures_util::{Stream, StreamExt};

use crate::engine::{is_not_found, EngineError, LABEL_ROLE};
use crate::plan::{ContainerPlan, LOG_MAX_SIZE};

/// Something the engine holds for a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    /// A container id or name.
    Container(String),
    /// A volume name.
    Volume(String),
}

/// The resources a session created, shared with the Ctrl-C path so cleanup never misses one.
#[derive(Debug, Clone, Default)]
pub struct Tracker(Arc<Mutex<Vec<Resource>>>);

impl Tracker {
    /// Remembers a resource; called *before* the engine call that creates it.
    pub fn add(&self, r: Resource) {
        if let Ok(mut v) = self.0.lock() {
            v.push(r);
        }
    }

    fn take(&self) -> Vec<Resource> {
        self.0
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }
}

/// How the worker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Exit {
    /// Exit code, when the process exited.
    pub code: Option<i64>,
    /// Killed for running past its wall-clock limit.
    pub timed_out: bool,
    /// Killed by the kernel for exceeding its memory limit.
    pub oom_killed: bool,
}

/// Names for a session's engine objects, derived from the session id so they are unique and findable.
#[derive(Debug, Clone)]
pub struct Names {
    /// Worker container.
    pub worker: String,
    /// Holder container.
    pub holder: String,
    /// Output volume.
    pub volume: String,
}

impl Names {
    /// Names for `session`.
    pub fn for_session(session: &str) -> Names {
        Names {
            worker: format!("golem-{session}-worker"),
            holder: format!("golem-{session}-holder"),
            volume: format!("golem-{session}-output"),
        }
    }
}

fn labels_with_role(plan: &ContainerPlan, role: &str) -> HashMap<String, String> {
    let mut labels: HashMap<String, String> = plan
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.insert(LABEL_ROLE.into(), role.into());
    labels
}

/// Creates the size-capped tmpfs output volume.
pub async fn create_output_volume(
    docker: &Docker,
    plan: &ContainerPlan,
    name: &str,
) -> Result<(), EngineError> {
    let request = VolumeCreateRequest {
        name: Some(name.to_string()),
        driver: Some("local".into()),
        driver_opts: Some(HashMap::from([
            ("type".to_string(), "tmpfs".to_string()),
            ("device".to_string(), "tmpfs".to_string()),
            ("o".to_string(), plan.output.mount_options()),
        ])),
        labels: Some(labels_with_role(plan, "output")),
        ..Default::default()
    };
    docker
        .create_volume(request)
        .await
        .map_err(EngineError::api("creating the output volume"))?;
    Ok(())
}

fn output_mount(plan: &ContainerPlan, volume: &str, read_only: bool) -> Mount {
    Mount {
        target: Some(plan.output.target.clone()),
        source: Some(volume.to_string()),
        typ: Some(MountType::VOLUME),
        read_only: Some(read_only),
        volume_options: Some(MountVolumeOptions {
            // The image's directory must not be copied in: the volume's owner comes from its options.
            no_copy: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The hardening every container of a session shares.
fn hardened_host_config(
    plan: &ContainerPlan,
    memory: u64,
    pids: i64,
    nano_cpus: i64,
) -> HostConfig {
    HostConfig {
        network_mode: Some(plan.network.as_str().into()),
        readonly_rootfs: Some(plan.read_only_rootfs),
        cap_drop: Some(plan.cap_drop.clone()),
        security_opt: Some(plan.security_opt.clone()),
        tmpfs: Some(
            plan.tmpfs
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        memory: Some(i64::try_from(memory).unwrap_or(i64::MAX)),
        memory_swap: Some(i64::try_from(memory).unwrap_or(i64::MAX)),
        nano_cpus: Some(nano_cpus),
        pids_limit: Some(pids),
        ulimits: Some(vec![
            ResourcesUlimits {
                name: Some("nofile".into()),
                soft: Some(1024),
                hard: Some(1024),
            },
            ResourcesUlimits {
                name: Some("core".into()),
                soft: Some(0),
                hard: Some(0),
            },
        ]),
        ipc_mode: Some("private".into()),
        // The container's own cgroup view, not the host's (the default on cgroup v1 hosts).
        cgroupns_mode: Some(bollard::models::HostConfigCgroupnsModeEnum::PRIVATE),
        // Under host memory pressure, the kernel kills the untrusted worker first.
        oom_score_adj: Some(1000),
        // Without a network nothing should resolve and resolv.conf should name no host
        // nameserver; with the opt-in network the engine's normal resolver applies.
        dns: (plan.network == crate::policy::NetworkMode::None).then(|| vec!["127.0.0.1".into()]),
        dns_search: (plan.network == crate::policy::NetworkMode::None).then(Vec::new),
        dns_options: (plan.network == crate::policy::NetworkMode::None).then(Vec::new),
        privileged: Some(false),
        publish_all_ports: Some(false),
        shm_size: Some(1 << 20),
        runtime: plan.runtime.clone(),
        log_config: Some(HostConfigLogConfig {
            typ: Some("json-file".into()),
            config: Some(HashMap::from([
                ("max-size".to_string(), LOG_MAX_SIZE.to_string()),
                ("max-file".to_string(), "1".to_string()),
            ])),
        }),
        ..Default::default()
    }
}

/// The worker's create body: exactly the plan, nothing added.
pub fn worker_body(plan: &ContainerPlan, volume: &str) -> ContainerCreateBody {
    let mut host = hardened_host_config(plan, plan.memory_bytes, plan.pids_limit, plan.nano_cpus);
    let mut mounts: Vec<Mount> = plan
        .binds
        .iter()
        .map(|b| Mount {
            target: Some(b.target.clone()),
            // A Mount (unlike a bind string) fails on a missing source instead of creating it.
            source: Some(b.source.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(b.read_only),
            ..Default::default()
        })
        .collect();
    mounts.push(output_mount(plan, volume, false));
    mounts.extend(plan.masks.iter().map(|target| Mount {
        target: Some(target.clone()),
        typ: Some(MountType::TMPFS),
        read_only: Some(true),
        tmpfs_options: Some(bollard::models::MountTmpfsOptions {
            size_bytes: Some(4096),
            mode: Some(0o500),
            ..Default::default()
        }),
        ..Default::default()
    }));
    host.mounts = Some(mounts);
    ContainerCreateBody {
        image: Some(plan.image.clone()),
        entrypoint: plan.entrypoint.clone(),
        cmd: Some(plan.cmd.clone()),
        user: Some(plan.user.clone()),
        env: Some(plan.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        labels: Some(labels_with_role(plan, "worker")),
        hostname: Some("golem".into()),
        working_dir: Some(plan.output.target.clone()),
        network_disabled: Some(plan.network == crate::policy::NetworkMode::None),
        attach_stdin: Some(false),
        attach_stdout: Some(false),
        attach_stderr: Some(false),
        tty: Some(false),
        open_stdin: Some(false),
        host_config: Some(host),
        ..Default::default()
    }
}

/// The holder's create body: the worker image's `hold` command with almost nothing granted.
pub fn holder_body(plan: &ContainerPlan, holder_image: &str, volume: &str) -> ContainerCreateBody {
    // runc's init runs inside the container's cgroup before `hold` starts; 16 MiB was seen to
    // OOM-kill it under load ("cannot start a stopped process"). A limit, not a reservation.
    let mut host = hardened_host_config(plan, 64 << 20, 8, 100_000_000);
    host.network_mode = Some("none".into());
    host.runtime = None;
    host.mounts = Some(vec![output_mount(plan, volume, true)]);
    ContainerCreateBody {
        image: Some(holder_image.to_string()),
        entrypoint: Some(vec!["/golem-worker".into()]),
        cmd: Some(vec!["hold".into()]),
        user: Some(plan.user.clone()),
        env: Some(Vec::new()),
        labels: Some(labels_with_role(plan, "holder")),
        network_disabled: Some(true),
        host_config: Some(host),
        ..Default::default()
    }
}

/// Creates a container under a fixed name.
pub async fn create(
    docker: &Docker,
    name: &str,
    body: ContainerCreateBody,
) -> Result<String, EngineError> {
    let options = CreateContainerOptionsBuilder::new().name(name).build();
    let created = docker
        .create_container(Some(options), body)
        .await
        .map_err(EngineError::api(format!("creating container {name}")))?;
    Ok(created.id)
}

/// Starts a container; `role` names it in errors.
pub async fn start(docker: &Docker, id: &str, role: &str) -> Result<(), EngineError> {
    docker
        .start_container(id, None)
        .await
        .map_err(EngineError::api(format!("starting the {role} container")))
}

/// Waits for the worker to exit, killing it at the timeout; then reads its exit code and OOM flag.
pub async fn wait(docker: &Docker, id: &str, timeout: Duration) -> Result<Exit, EngineError> {
    let waited = tokio::time::timeout(timeout, wait_exit(docker, id)).await;
    let timed_out = match waited {
        Ok(result) => {
            result?;
            false
        }
        Err(_) => {
            kill(docker, id).await?;
            wait_exit(docker, id).await?;
            true
        }
    };
    let inspect = docker
        .inspect_container(id, None)
        .await
        .map_err(EngineError::api("inspecting the finished container"))?;
    let state = inspect.state.unwrap_or_default();
    if state.running == Some(true) {
        kill(docker, id).await?;
        return Err(EngineError::Unreachable(
            "the container was still running after its wait returned; killed it".into(),
        ));
    }
    Ok(Exit {
        code: state.exit_code,
        timed_out,
        oom_killed: state.oom_killed.unwrap_or(false),
    })
}

/// One wait call; a non-zero exit is reported by bollard as an error carrying the code, which is not a failure here.
async fn wait_exit(docker: &Docker, id: &str) -> Result<i64, EngineError> {
    let mut stream = docker.wait_container(id, None);
    match stream.next().await {
        Some(Ok(r)) => Ok(r.status_code),
        Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ok(code),
        Some(Err(e)) => Err(EngineError::api("waiting for the container")(e)),
        // The connection closed without a verdict (engine restart, proxy timeout): the container
        // may still be running, so its output must not be read.
        None => Err(EngineError::Unreachable(
            "the engine closed the wait without reporting an exit".into(),
        )),
    }
}

/// Sends SIGKILL; a container that already stopped is fine.
pub async fn kill(docker: &Docker, id: &str) -> Result<(), EngineError> {
    let options = KillContainerOptionsBuilder::new().signal("SIGKILL").build();
    match docker.kill_container(id, Some(options)).await {
        Ok(()) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409 | 404,
            ..
        }) => Ok(()),
        Err(e) => Err(EngineError::api("killing the container")(e)),
    }
}

/// The container's output, at most `max` bytes, with control characters made visible.
///
/// Logs are written by the untrusted worker; a person will read them in a terminal, so escape
/// sequences must not reach it raw.
pub async fn logs(docker: &Docker, id: &str, max: usize) -> Result<String, EngineError> {
    let options = LogsOptionsBuilder::new().stdout(true).stderr(true).build();
    let mut stream = docker.logs(id, Some(options));
    let mut raw = Vec::new();
    while let Some(item) = stream.next().await {
        let chunk = item.map_err(EngineError::api("reading the container's logs"))?;
        raw.extend_from_slice(&chunk.into_bytes());
        if raw.len() >= max {
            raw.truncate(max);
            raw.extend_from_slice(b"\n[log truncated]\n");
            break;
        }
    }
    Ok(neutralise(&String::from_utf8_lossy(&raw)))
}

/// Escapes control characters other than newline and tab, and bidi overrides.
pub fn neutralise(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let bidi = ('\u{202a}'..='\u{202e}').contains(&c) || ('\u{2066}'..='\u{2069}').contains(&c);
        if (c.is_control() && c != '\n' && c != '\t') || bidi {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// The output directory as a tar stream from the archive API.
pub fn download(
    docker: &Docker,
    id: &str,
    path: &str,
) -> impl Stream<Item = Result<bytes::Bytes, bollard::errors::Error>> {
    let options = DownloadFromContainerOptionsBuilder::new()
        .path(path)
        .build();
    docker.download_from_container(id, Some(options))
}

/// Removes every tracked resource, containers first (with their anonymous volumes), then volumes.
/// Returns what could not be removed; missing resources count as removed.
pub async fn remove_all(docker: &Docker, tracker: &Tracker) -> Vec<(Resource, String)> {
    let resources = tracker.take();
    // Containers go together (each removal is an engine round trip); volumes only after them.
    let containers = resources.iter().filter_map(|r| match r {
        Resource::Container(id) => Some(async move {
            (
                r,
                remove_container(docker, id)
                    .await
                    .map_err(|e| e.to_string()),
            )
        }),
        Resource::Volume(_) => None,
    });
    let mut results = futures_util::future::join_all(containers).await;
    for r in &resources {
        if let Resource::Volume(name) = r {
            results.push((
                r,
                remove_volume(docker, name).await.map_err(|e| e.to_string()),
            ));
        }
    }
    results
        .into_iter()
        .filter_map(|(r, result)| result.err().map(|e| (r.clone(), e)))
        .collect()
}

/// Force-removes a container and its anonymous volumes; absent is success.
pub async fn remove_container(docker: &Docker, id: &str) -> Result<(), bollard::errors::Error> {
    let options = RemoveContainerOptionsBuilder::new()
        .force(true)
        .v(true)
        .build();
    match docker.remove_container(id, Some(options)).await {
        Err(e) if !is_not_found(&e) => Err(e),
        _ => Ok(()),
    }
}

/// Removes a volume; absent is success. Retries briefly because the engine releases a volume
/// a moment after its last container is removed.
pub async fn remove_volume(docker: &Docker, name: &str) -> Result<(), bollard::errors::Error> {
    let mut attempt = 0;
    loop {
        let options = RemoveVolumeOptionsBuilder::new().force(true).build();
        match docker.remove_volume(name, Some(options)).await {
            Ok(()) => return Ok(()),
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) if attempt >= 20 => return Err(e),
            Err(_) => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{build, Command, HostPaths};
    use crate::policy::{load, TrustLevel};

    fn plan() -> ContainerPlan {
        let p = load(TrustLevel::Session, None, None).unwrap().policy;
        build(
            "s",
            &p,
            &HostPaths {
                input: "/h/in".into(),
                workspace: "/h/ws".into(),
                repo: None,
                state: "/h/.golem".into(),
                task: None,
            },
            &Command {
                image: "img".into(),
                entrypoint: None,
                cmd: vec!["report".into()],
            },
            Default::default(),
            false,
        )
        .unwrap()
    }

    #[test]
    fn worker_body_carries_every_hardening_flag() {
        let body = worker_body(&plan(), "vol");
        let host = body.host_config.clone().unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!(body.network_disabled, Some(true));
        assert_eq!(host.readonly_rootfs, Some(true));
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(
            host.memory, host.memory_swap,
            "no swap beyond the memory limit"
        );
        assert_eq!(host.privileged, Some(false));
        assert!(host.pids_limit.unwrap() > 0);
        assert_eq!(
            host.log_config.unwrap().config.unwrap()["max-size"],
            LOG_MAX_SIZE
        );
        let mounts = host.mounts.unwrap();
        let input = mounts
            .iter()
            .find(|m| m.target.as_deref() == Some("/input"))
            .unwrap();
        assert_eq!(
            (input.typ, input.read_only),
            (Some(MountType::BIND), Some(true))
        );
        let out = mounts
            .iter()
            .find(|m| m.target.as_deref() == Some("/output"))
            .unwrap();
        assert_eq!(out.typ, Some(MountType::VOLUME));
        assert!(
            host.binds.is_none(),
            "bind strings auto-create missing sources"
        );
        assert_eq!(body.env.unwrap(), vec!["LANG=C.UTF-8".to_string()]);
        assert_eq!(body.labels.unwrap()[LABEL_ROLE], "worker");
    }

    #[test]
    fn holder_gets_nothing_but_a_read_only_view_of_the_output() {
        let body = holder_body(&plan(), "golem-worker:x", "vol");
        let host = body.host_config.unwrap();
        let mounts = host.mounts.unwrap();
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].read_only, Some(true));
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!(host.pids_limit, Some(8));
    }

    #[test]
    fn control_characters_in_logs_are_made_visible() {
        assert_eq!(
            neutralise("ok\n\x1b[31mred\ttab\u{202e}"),
            "ok\n\\u{1b}[31mred\ttab\\u{202e}"
        );
    }
}
