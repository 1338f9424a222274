//! Engine operations for one session's worker container, and cleanup.
//!
//! Output design (measured on the target engine): the worker writes into a tmpfs at `/output`
//! whose `size=` and `nr_inodes=` are kernel-enforced caps. The container's PID 1 is not the
//! worker but golem-worker's `init`, bind-mounted read-only from the state directory: it runs the
//! worker, SIGKILLs whatever the worker left running, and then writes `/output` to its stdout as a
//! tar, which the host reads over the attach stream and validates entry by entry. So nothing but
//! the one container is created per session (no volume, no second container, no archive call),
//! and the init binary, unlike the image, is always ours. Its stream is still treated as hostile.
//!
//! Everything created is registered in a [`Tracker`] before use, so every exit path (success,
//! failure, timeout, Ctrl-C) removes exactly what this session created.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::models::{
    ContainerCreateBody, HealthConfig, HostConfig, HostConfigLogConfig, Mount, MountType,
    ResourcesUlimits,
};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, KillContainerOptionsBuilder,
    RemoveContainerOptionsBuilder, RemoveVolumeOptionsBuilder,
};
use bollard::Docker;
use futures_util::{Stream, StreamExt};

use crate::engine::{is_not_found, EngineError, LABEL_ROLE};
use crate::plan::ContainerPlan;

/// Something the engine holds for a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    /// A container id or name.
    Container(String),
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

/// The worker container's name, derived from the session id so it is unique and findable.
pub fn worker_name(session: &str) -> String {
    format!("golem-{session}-worker")
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

/// The worker's create body: exactly the plan, nothing added.
pub fn worker_body(plan: &ContainerPlan) -> ContainerCreateBody {
    let mut tmpfs: HashMap<String, String> = plan
        .tmpfs
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    tmpfs.insert(plan.output.target.clone(), plan.output.mount_options());
    let bind = |b: &crate::plan::BindMount| Mount {
        target: Some(b.target.clone()),
        // A Mount (unlike a bind string) fails on a missing source instead of creating it.
        source: Some(b.source.display().to_string()),
        typ: Some(MountType::BIND),
        read_only: Some(b.read_only),
        ..Default::default()
    };
    let mut mounts: Vec<Mount> = plan.binds.iter().map(bind).collect();
    if let Some(w) = &plan.workspace {
        mounts.push(workspace_mount(plan, w));
    }
    mounts.push(bind(&plan.init));
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
    let no_network = plan.network == crate::policy::NetworkMode::None;
    let host = HostConfig {
        network_mode: Some(plan.network.as_str().into()),
        readonly_rootfs: Some(plan.read_only_rootfs),
        cap_drop: Some(plan.cap_drop.clone()),
        security_opt: Some(plan.security_opt.clone()),
        tmpfs: Some(tmpfs),
        mounts: Some(mounts),
        memory: Some(i64::try_from(plan.memory_bytes).unwrap_or(i64::MAX)),
        memory_swap: Some(i64::try_from(plan.memory_bytes).unwrap_or(i64::MAX)),
        nano_cpus: Some(plan.nano_cpus),
        pids_limit: Some(plan.pids_limit),
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
        dns: no_network.then(|| vec!["127.0.0.1".into()]),
        dns_search: no_network.then(Vec::new),
        dns_options: no_network.then(Vec::new),
        privileged: Some(false),
        publish_all_ports: Some(false),
        shm_size: Some(1 << 20),
        runtime: plan.runtime.clone(),
        // stdout carries the output archive and stderr the worker's messages, both read live
        // over the attach stream (the session keeps at most 1 MiB of logs). No log driver: the
        // engine would otherwise re-encode the whole archive into a log file on the host.
        log_config: Some(HostConfigLogConfig {
            typ: Some("none".into()),
            config: None,
        }),
        // The plan's init must be PID 1, whatever the daemon's `"init": true` default says: only
        // a namespace's init is immune to the worker's signals and may kill every process.
        init: Some(false),
        ..Default::default()
    };
    ContainerCreateBody {
        image: Some(plan.image_id.clone().unwrap_or_else(|| plan.image.clone())),
        entrypoint: Some(plan.container_entrypoint()),
        // An explicit empty command: the image's CMD is never appended behind the plan's back.
        cmd: Some(Vec::new()),
        user: Some(plan.user.clone()),
        env: Some(plan.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        labels: Some(labels_with_role(plan, "worker")),
        hostname: Some("golem".into()),
        working_dir: Some(plan.output.target.clone()),
        network_disabled: Some(no_network),
        attach_stdin: Some(false),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        open_stdin: Some(false),
        // An image's HEALTHCHECK would be run by the engine as a process of its own inside the
        // container, outside the init's control: it could write /output while it is archived.
        healthcheck: Some(HealthConfig {
            test: Some(vec!["NONE".into()]),
            ..Default::default()
        }),
        host_config: Some(host),
        ..Default::default()
    }
}

/// The workspace as a `local`-driver overlay volume: the daemon creates it on first use with
/// these options (so no separate create can race a removal) and mounts it `nosuid,nodev`.
fn workspace_mount(plan: &ContainerPlan, w: &crate::plan::WorkspaceMount) -> Mount {
    let mut labels = labels_with_role(plan, "workspace");
    // One volume serves every session of the project: it belongs to none of them.
    labels.remove(crate::engine::LABEL_SESSION);
    labels.remove(crate::engine::LABEL_OWNER);
    Mount {
        target: Some(w.target.clone()),
        source: Some(w.overlay.volume.clone()),
        typ: Some(MountType::VOLUME),
        read_only: Some(w.read_only),
        volume_options: Some(bollard::models::MountVolumeOptions {
            no_copy: Some(true),
            labels: Some(labels),
            driver_config: Some(bollard::models::MountVolumeOptionsDriverConfig {
                name: Some("local".into()),
                options: Some(w.overlay.driver_options().into_iter().collect()),
            }),
            ..Default::default()
        }),
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

/// The container's stdout (the output archive) and stderr (its messages), demultiplexed.
pub type Attached = Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// Attaches to a created container's stdout and stderr. Done before the start, so not a byte
/// is missed; the engine applies backpressure, so a slow reader slows the init, never loses data.
pub async fn attach(docker: &Docker, id: &str) -> Result<Attached, EngineError> {
    let options = AttachContainerOptionsBuilder::new()
        .stdout(true)
        .stderr(true)
        .stream(true)
        .logs(false)
        .build();
    let attached = docker
        .attach_container(id, Some(options))
        .await
        .map_err(EngineError::api("attaching to the worker container"))?;
    Ok(attached.output)
}

/// Starts a container; `role` names it in errors.
pub async fn start(docker: &Docker, id: &str, role: &str) -> Result<(), EngineError> {
    docker
        .start_container(id, None)
        .await
        .map_err(EngineError::api(format!("starting the {role} container")))
}

/// How long a container whose streams have closed may take to be reported stopped.
const STOP_WAIT: Duration = Duration::from_secs(30);

/// Waits for a container that is ending (its streams closed, or it was killed), then reads its
/// exit code and OOM flag. A container that does not stop is killed.
pub async fn finished(docker: &Docker, id: &str, timed_out: bool) -> Result<Exit, EngineError> {
    match tokio::time::timeout(STOP_WAIT, wait_exit(docker, id)).await {
        Ok(waited) => {
            waited?;
        }
        Err(_) => {
            kill(docker, id).await?;
            wait_exit(docker, id).await?;
        }
    }
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

/// The worker's messages as they stream in, keeping at most `max` bytes.
///
/// Logs are written by the untrusted worker; a person will read them in a terminal, so
/// [`LogBuffer::finish`] makes control characters visible.
#[derive(Debug)]
pub struct LogBuffer {
    raw: Vec<u8>,
    max: usize,
    truncated: bool,
}

impl LogBuffer {
    /// An empty buffer that keeps at most `max` bytes.
    pub fn new(max: usize) -> LogBuffer {
        LogBuffer {
            raw: Vec::new(),
            max,
            truncated: false,
        }
    }

    /// Appends a chunk; past the cap the rest is dropped (but the stream is still drained).
    pub fn push(&mut self, chunk: &[u8]) {
        let room = self.max.saturating_sub(self.raw.len());
        if chunk.len() > room {
            self.truncated = true;
        }
        self.raw.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }

    /// The text to keep: lossy UTF-8, control characters escaped, truncation marked.
    pub fn finish(mut self) -> String {
        if self.truncated {
            self.raw.extend_from_slice(b"\n[log truncated]\n");
        }
        // Readable and inert when written (and again by `golem-orch logs`): see `render::block`.
        crate::render::block(&String::from_utf8_lossy(&self.raw))
    }
}

/// Removes every tracked container with its anonymous volumes.
/// Returns what could not be removed; missing resources count as removed.
pub async fn remove_all(docker: &Docker, tracker: &Tracker) -> Vec<(Resource, String)> {
    let resources = tracker.take();
    // Containers go together: each removal is an engine round trip.
    let removals = resources.iter().map(|r| async move {
        let Resource::Container(id) = r;
        (
            r,
            remove_container(docker, id)
                .await
                .map_err(|e| e.to_string()),
        )
    });
    futures_util::future::join_all(removals)
        .await
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

/// Removes a volume; absent is success. Sessions no longer create volumes; `gc` still removes
/// labelled ones left by earlier versions. Retries briefly because the engine releases a volume
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
                init: "/h/.golem/bin/golem-init-x".into(),
                user: Some(crate::worker_uid::SessionUser {
                    uid: 1_610_612_737,
                    gid: 1_610_612_737,
                }),
                other_states: vec![],
            },
            &Command {
                image: "img".into(),
                image_id: Some("sha256:0123".into()),
                entrypoint: Some(vec!["/golem-worker".into()]),
                cmd: vec!["report".into()],
            },
            Default::default(),
            false,
        )
        .unwrap()
    }

    #[test]
    fn worker_body_carries_every_hardening_flag() {
        let body = worker_body(&plan());
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
            host.log_config.unwrap().typ.as_deref(),
            Some("none"),
            "the archive must not be copied into a host log file"
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
        let init = mounts
            .iter()
            .find(|m| {
                m.target
                    .as_deref()
                    .is_some_and(|t| t.starts_with(crate::plan::INIT_TARGET_PREFIX))
            })
            .unwrap();
        assert_eq!(
            (init.typ, init.read_only),
            (Some(MountType::BIND), Some(true))
        );
        let ws = mounts
            .iter()
            .find(|m| m.target.as_deref() == Some("/workspace"))
            .unwrap();
        assert_eq!(ws.typ, Some(MountType::VOLUME), "a bind cannot be nosuid");
        let driver = ws.volume_options.clone().unwrap().driver_config.unwrap();
        assert!(driver.options.unwrap()["o"].starts_with("nosuid,nodev,"));
        assert_eq!(body.user.as_deref(), Some("1610612737:1610612737"));
        let output = &host.tmpfs.unwrap()["/output"];
        assert!(
            output.contains("size=") && output.contains("nr_inodes="),
            "{output}"
        );
        assert!(
            host.binds.is_none(),
            "bind strings auto-create missing sources"
        );
        assert_eq!(body.env.unwrap(), vec!["LANG=C.UTF-8".to_string()]);
        assert_eq!(body.labels.unwrap()[LABEL_ROLE], "worker");
        assert_eq!(
            host.init,
            Some(false),
            "the daemon must not inject its own init"
        );
        assert_eq!(
            body.healthcheck.unwrap().test,
            Some(vec!["NONE".to_string()]),
            "an image's healthcheck must not run beside the init"
        );
        assert_eq!(body.image.as_deref(), Some("sha256:0123"), "created by id");
    }

    #[test]
    fn the_init_is_pid_one_and_the_image_command_is_never_merged_in() {
        let body = worker_body(&plan());
        let ep = body.entrypoint.unwrap();
        assert!(ep[0].starts_with(crate::plan::INIT_TARGET_PREFIX), "{ep:?}");
        assert_eq!(ep[1..3], ["init", "--pid1"]);
        assert_eq!(ep[ep.len() - 2..], ["/golem-worker", "report"]);
        assert_eq!(body.cmd, Some(Vec::new()));
    }

    #[test]
    fn logs_are_capped_and_their_control_characters_made_visible() {
        let mut logs = LogBuffer::new(8);
        logs.push(b"ok\x1b[");
        logs.push(b"31mred and more");
        assert_eq!(logs.finish(), "ok\\u{1b}[31mr\n[log truncated]\n");
    }
}
