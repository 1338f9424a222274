//! The Docker Engine behind the [`Engine`] trait: the only module that knows bollard.
//!
//! One client per process: bollard pools the connection, which matters when a batch starts
//! hundreds of containers. The plan becomes a create body here and nowhere else, so what the
//! engine is asked to run is exactly what the audit log recorded.

use std::collections::HashMap;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::models::{
    ContainerCreateBody, HealthConfig, HostConfig, HostConfigLogConfig, Mount, MountType,
    ResourcesUlimits,
};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, BuildImageOptionsBuilder, CreateContainerOptionsBuilder,
    KillContainerOptionsBuilder, ListContainersOptionsBuilder, ListImagesOptionsBuilder,
    ListVolumesOptionsBuilder, RemoveContainerOptionsBuilder, RemoveImageOptionsBuilder,
    RemoveVolumeOptionsBuilder, TagImageOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;

use super::{
    Attached, BuildSpec, Chunk, Effective, EffectiveMount, Engine, EngineError, EngineFuture,
    EngineInfo, ExitState, ImageInfo, Inspected, Listed, ListedVolume, Replaced, Select,
    LABEL_ROLE,
};
use crate::plan::ContainerPlan;

/// A Docker Engine, or Podman's Docker-compatible service, reached through bollard.
#[derive(Debug, Clone)]
pub struct DockerEngine {
    docker: Docker,
    /// What [`Engine::version`] learned, asked once per process (the first request `connect`
    /// makes): every session reads it (runtimes, unsafe defaults, Podman) without a round trip.
    info: std::sync::Arc<std::sync::OnceLock<EngineInfo>>,
}

impl DockerEngine {
    /// A client for the engine `DOCKER_HOST` names (or the default socket); nothing is sent yet.
    pub fn connect() -> Result<DockerEngine, EngineError> {
        let docker =
            Docker::connect_with_defaults().map_err(|e| EngineError::Unreachable(e.to_string()))?;
        Ok(DockerEngine {
            docker,
            info: Default::default(),
        })
    }

    fn is_podman(&self) -> bool {
        self.info.get().is_some_and(|i| i.name == PODMAN)
    }
}

/// The name Podman's compatible service gives its first version component.
pub const PODMAN: &str = "Podman Engine";

/// The capabilities Podman 4.3 grants by default (the same fourteen as Docker's), which it
/// reports as dropped for `cap_drop: [ALL]`. Only a report naming every one of them reads as
/// `ALL`; an engine configured with more defaults lists those too, one with fewer fails the
/// check (closed).
const PODMAN_DEFAULT_CAPS: [&str; 14] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "NET_RAW",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Where Podman mounts tmpfs by itself when the root filesystem is read-only.
const PODMAN_TMPFS: [&str; 2] = ["/run", "/var/tmp"];

/// Podman's inspect in the Docker Engine's terms, so one comparison with the plan serves both:
/// the mount flags it appends to every tmpfs (`rprivate`, `tmpcopyup`) are dropped, its
/// `shareable` IPC namespace (its own, joinable only through the engine) reads as `private`,
/// `no-new-privileges` as `no-new-privileges:true`, a report of every default capability
/// dropped with nothing added and no privilege as `ALL`, and `NetworkDisabled` (which it does not keep) as
/// the `none` network mode it stands for. Anything else stays as reported, for the check.
fn podman_in_docker_terms(mut e: Effective) -> Effective {
    for opts in e.tmpfs.values_mut() {
        *opts = opts
            .split(',')
            .filter(|o| !matches!(*o, "rprivate" | "tmpcopyup"))
            .collect::<Vec<_>>()
            .join(",");
    }
    if e.ipc_mode == "shareable" {
        e.ipc_mode = "private".into();
    }
    for opt in &mut e.security_opt {
        if opt == "no-new-privileges" {
            *opt = "no-new-privileges:true".into();
        }
    }
    let dropped = |cap: &str| {
        e.cap_drop
            .iter()
            .any(|c| c.trim_start_matches("CAP_").eq_ignore_ascii_case(cap))
    };
    if PODMAN_DEFAULT_CAPS.iter().all(|c| dropped(c)) && e.cap_add.is_empty() && !e.privileged {
        e.cap_drop = vec!["ALL".into()];
    }
    if e.network_mode == "none" {
        e.network_disabled = true;
    }
    // Podman does not report the cgroup namespace mode it applied: it is asked for (private)
    // but cannot be checked there (SECURITY.md, Podman).
    if e.cgroupns_mode.is_empty() {
        e.cgroupns_mode = "private".into();
    }
    e
}

/// Turns bollard's error into ours, keeping its words and its status.
fn api(doing: impl Into<String>) -> impl FnOnce(bollard::errors::Error) -> EngineError {
    let doing = doing.into();
    move |e| {
        let status = match &e {
            bollard::errors::Error::DockerResponseServerError { status_code, .. } => {
                Some(*status_code)
            }
            _ => None,
        };
        EngineError::api(doing, e.to_string(), status)
    }
}

/// The label filter bollard wants: `label=key[=value]` for each.
fn label_filters(labels: &[String]) -> HashMap<&str, Vec<&str>> {
    HashMap::from([("label", labels.iter().map(String::as_str).collect())])
}

impl Engine for DockerEngine {
    fn version(&self) -> EngineFuture<'_, EngineInfo> {
        Box::pin(async move {
            if let Some(info) = self.info.get() {
                return Ok(info.clone());
            }
            let v = self
                .docker
                .version()
                .await
                .map_err(|e| EngineError::Unreachable(e.to_string()))?;
            // Runtimes come from the system info; an engine that does not say has only its
            // default, which a plan naming no runtime gets.
            let info = self
                .docker
                .info()
                .await
                .map_err(api("asking the engine for its runtimes"))?;
            let name = v
                .components
                .and_then(|c| c.into_iter().next())
                .map(|c| c.name)
                .unwrap_or_default();
            let mut runtimes: Vec<String> = info
                .runtimes
                .map(|r| r.into_keys().collect())
                .unwrap_or_default();
            runtimes.sort();
            let info = EngineInfo {
                version: v.version.unwrap_or_default(),
                platform: format!(
                    "{}/{}",
                    v.os.unwrap_or_default(),
                    v.arch.unwrap_or_default()
                ),
                api_version: v.api_version.unwrap_or_default(),
                name,
                runtimes,
                default_runtime: info.default_runtime.unwrap_or_default(),
                security_options: info.security_options.unwrap_or_default(),
            };
            Ok(self.info.get_or_init(|| info).clone())
        })
    }

    fn create<'a>(&'a self, name: &'a str, plan: &'a ContainerPlan) -> EngineFuture<'a, String> {
        Box::pin(async move {
            let options = CreateContainerOptionsBuilder::new().name(name).build();
            let created = self
                .docker
                .create_container(Some(options), worker_body(plan))
                .await
                .map_err(api(format!("creating container {name}")))?;
            Ok(created.id)
        })
    }

    fn attach<'a>(&'a self, id: &'a str) -> EngineFuture<'a, Attached> {
        Box::pin(async move {
            let options = AttachContainerOptionsBuilder::new()
                .stdout(true)
                .stderr(true)
                .stream(true)
                .logs(false)
                .build();
            let attached = self
                .docker
                .attach_container(id, Some(options))
                .await
                .map_err(api("attaching to the worker container"))?;
            let chunks = attached.output.filter_map(|item| async move {
                match item {
                    Ok(LogOutput::StdOut { message }) => Some(Ok(Chunk::Stdout(message))),
                    Ok(LogOutput::StdErr { message }) => Some(Ok(Chunk::Stderr(message))),
                    // No stdin and no tty: nothing else is ever the container's output.
                    Ok(_) => None,
                    Err(e) => Some(Err(api("reading the worker's output")(e))),
                }
            });
            Ok(Box::pin(chunks) as Attached)
        })
    }

    fn start<'a>(&'a self, id: &'a str) -> EngineFuture<'a, ()> {
        Box::pin(async move {
            self.docker
                .start_container(id, None)
                .await
                .map_err(api("starting the container"))
        })
    }

    fn kill<'a>(&'a self, id: &'a str) -> EngineFuture<'a, ()> {
        Box::pin(async move {
            let options = KillContainerOptionsBuilder::new().signal("SIGKILL").build();
            match self.docker.kill_container(id, Some(options)).await {
                Ok(()) => Ok(()),
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 409 | 404,
                    ..
                }) => Ok(()),
                Err(e) => Err(api("killing the container")(e)),
            }
        })
    }

    fn wait<'a>(&'a self, id: &'a str) -> EngineFuture<'a, i64> {
        Box::pin(async move {
            let mut stream = self.docker.wait_container(id, None);
            match stream.next().await {
                Some(Ok(r)) => Ok(r.status_code),
                // bollard reports a non-zero exit as an error carrying the code: not a failure.
                Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => {
                    Ok(code)
                }
                Some(Err(e)) => Err(api("waiting for the container")(e)),
                // The connection closed without a verdict (engine restart, proxy timeout): the
                // container may still be running, so its output must not be read.
                None => Err(EngineError::Unreachable(
                    "the engine closed the wait without reporting an exit".into(),
                )),
            }
        })
    }

    fn inspect<'a>(&'a self, id: &'a str) -> EngineFuture<'a, Inspected> {
        Box::pin(async move {
            let inspect = self
                .docker
                .inspect_container(id, None)
                .await
                .map_err(api("inspecting the container"))?;
            let state = inspect.state.unwrap_or_default();
            Ok(Inspected {
                running: state.running == Some(true),
                exit: ExitState {
                    code: state.exit_code,
                    oom_killed: state.oom_killed.unwrap_or(false),
                },
                user: inspect.config.and_then(|c| c.user),
            })
        })
    }

    fn adapt(&self, plan: &mut ContainerPlan) -> Vec<Replaced> {
        let mut replaced = Vec::new();
        // Podman 4.3 refuses `nr_inodes` in a tmpfs option ("unknown mount option"); the
        // extractor counts every entry while streaming and refuses past `max_files` anyway.
        if !self.is_podman() {
            return replaced;
        }
        if plan.output.max_inodes.take().is_some() {
            replaced.push(Replaced {
                protection: "output tmpfs inode cap (nr_inodes)".into(),
                by: "the extractor's file and directory count cap, enforced while streaming".into(),
            });
        }
        // Rootful, it raises RLIMIT_NPROC past what a nested host allows and cannot start; the
        // session's uid is its own, so its process count is the pids limit anyway.
        plan.nproc = Some(u64::try_from(plan.pids_limit).unwrap_or(u64::MAX));
        // It refuses `uid=`/`gid=` too; `U` makes the tmpfs root the container user's.
        plan.output.owner_by_engine = true;
        // With a read-only root it mounts writable, executable tmpfs at /run and /var/tmp of
        // its own accord; the plan's own read-only ones take their place.
        for target in PODMAN_TMPFS {
            plan.tmpfs
                .entry(target.to_string())
                .or_insert_with(|| "ro,noexec,nosuid,nodev,size=4096".into());
        }
        replaced.push(Replaced {
            protection: "cap_drop ALL".into(),
            by: "Podman's report of every default capability dropped, with none added".into(),
        });
        replaced
    }

    fn effective<'a>(&'a self, id: &'a str) -> EngineFuture<'a, Effective> {
        Box::pin(async move {
            let inspect = self
                .docker
                .inspect_container(id, None)
                .await
                .map_err(api("inspecting the created container"))?;
            let effective = effective_of(inspect);
            Ok(if self.is_podman() {
                podman_in_docker_terms(effective)
            } else {
                effective
            })
        })
    }

    fn remove<'a>(&'a self, id: &'a str) -> EngineFuture<'a, ()> {
        Box::pin(async move {
            let options = RemoveContainerOptionsBuilder::new()
                .force(true)
                .v(true)
                .build();
            match self.docker.remove_container(id, Some(options)).await {
                Err(e) => match api(format!("removing container {id}"))(e) {
                    e if e.is_not_found() => Ok(()),
                    e => Err(e),
                },
                Ok(()) => Ok(()),
            }
        })
    }

    fn list<'a>(&'a self, select: &'a Select) -> EngineFuture<'a, Vec<Listed>> {
        Box::pin(async move {
            let filters = match select {
                Select::Labels(labels) => label_filters(labels),
                Select::Volume(name) => HashMap::from([("volume", vec![name.as_str()])]),
            };
            let options = ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&filters)
                .build();
            let list = self
                .docker
                .list_containers(Some(options))
                .await
                .map_err(api("listing containers"))?;
            Ok(list
                .into_iter()
                .filter_map(|c| {
                    Some(Listed {
                        id: c.id?,
                        labels: c.labels.unwrap_or_default(),
                        state: c.state.map(|s| s.to_string()).unwrap_or_default(),
                    })
                })
                .collect())
        })
    }

    fn inspect_image<'a>(&'a self, reference: &'a str) -> EngineFuture<'a, ImageInfo> {
        Box::pin(async move {
            let img = self
                .docker
                .inspect_image(reference)
                .await
                .map_err(api(format!("inspecting image {reference}")))?;
            let config = img.config.unwrap_or_default();
            Ok(ImageInfo {
                id: img.id.unwrap_or_default(),
                labels: config.labels.unwrap_or_default(),
                entrypoint: config.entrypoint.unwrap_or_default(),
                cmd: config.cmd.unwrap_or_default(),
            })
        })
    }

    fn build_image<'a>(&'a self, spec: &'a BuildSpec) -> EngineFuture<'a, ()> {
        Box::pin(async move {
            let labels: HashMap<&str, &str> = spec
                .labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let options = BuildImageOptionsBuilder::new()
                .t(&spec.tag)
                .dockerfile("Dockerfile")
                .labels(&labels)
                .rm(true)
                .forcerm(true)
                .networkmode("none")
                .build();
            let context = bollard::body_full(spec.context.clone().into());
            let mut stream = self.docker.build_image(options, None, Some(context));
            let doing = format!("building {}", spec.tag);
            while let Some(item) = stream.next().await {
                let info = item.map_err(api(doing.clone()))?;
                if let Some(detail) = info.error_detail {
                    let message = detail.message.unwrap_or_else(|| "unknown error".into());
                    return Err(EngineError::api(doing, message, None));
                }
            }
            Ok(())
        })
    }

    fn tag_image<'a>(
        &'a self,
        image: &'a str,
        repo: &'a str,
        tag: &'a str,
    ) -> EngineFuture<'a, ()> {
        Box::pin(async move {
            let options = TagImageOptionsBuilder::new().repo(repo).tag(tag).build();
            self.docker
                .tag_image(image, Some(options))
                .await
                .map_err(api(format!("tagging {image} as {repo}:{tag}")))
        })
    }

    fn image_tags<'a>(&'a self, repository: &'a str) -> EngineFuture<'a, Vec<String>> {
        Box::pin(async move {
            let filters: HashMap<&str, Vec<&str>> =
                HashMap::from([("reference", vec![repository])]);
            let options = ListImagesOptionsBuilder::new().filters(&filters).build();
            let images = self
                .docker
                .list_images(Some(options))
                .await
                .map_err(api(format!("listing {repository} images")))?;
            Ok(images.into_iter().flat_map(|i| i.repo_tags).collect())
        })
    }

    fn remove_image<'a>(&'a self, tag: &'a str) -> EngineFuture<'a, ()> {
        Box::pin(async move {
            let options = RemoveImageOptionsBuilder::new().build();
            self.docker
                .remove_image(tag, Some(options), None)
                .await
                .map(|_| ())
                .map_err(api(format!("removing image {tag}")))
        })
    }

    fn volumes<'a>(&'a self, labels: &'a [String]) -> EngineFuture<'a, Vec<ListedVolume>> {
        Box::pin(async move {
            let filters = label_filters(labels);
            let options = ListVolumesOptionsBuilder::new().filters(&filters).build();
            let volumes = self
                .docker
                .list_volumes(Some(options))
                .await
                .map_err(api("listing volumes"))?;
            Ok(volumes
                .volumes
                .unwrap_or_default()
                .into_iter()
                .map(|v| ListedVolume {
                    name: v.name,
                    labels: v.labels,
                })
                .collect())
        })
    }

    fn remove_volume<'a>(&'a self, name: &'a str) -> EngineFuture<'a, ()> {
        Box::pin(async move {
            let mut attempt = 0;
            loop {
                let options = RemoveVolumeOptionsBuilder::new().force(true).build();
                let err = match self.docker.remove_volume(name, Some(options)).await {
                    Ok(()) => return Ok(()),
                    Err(e) => api(format!("removing volume {name}"))(e),
                };
                if err.is_not_found() {
                    return Ok(());
                }
                if attempt >= 20 {
                    return Err(err);
                }
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
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

/// The worker's mounts: the plan's binds, the workspace volume, the init and the masks.
fn mounts(plan: &ContainerPlan) -> Vec<Mount> {
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
    mounts
}

/// The plan's resource limits ([`crate::plan::ulimits`]) as the engine takes them.
fn ulimits(plan: &ContainerPlan) -> Vec<ResourcesUlimits> {
    crate::plan::ulimits(plan)
        .into_iter()
        .map(|(name, (soft, hard))| ResourcesUlimits {
            name: Some(name),
            soft: Some(soft),
            hard: Some(hard),
        })
        .collect()
}

/// The worker's host config: every hardening flag and resource limit of the plan.
fn host_config(plan: &ContainerPlan) -> HostConfig {
    let tmpfs: HashMap<String, String> = plan.tmpfs_mounts().into_iter().collect();
    let no_network = plan.network == crate::policy::NetworkMode::None;
    HostConfig {
        network_mode: Some(plan.network.as_str().into()),
        readonly_rootfs: Some(plan.read_only_rootfs),
        cap_drop: Some(plan.cap_drop.clone()),
        security_opt: Some(plan.security_opt.clone()),
        tmpfs: Some(tmpfs),
        mounts: Some(mounts(plan)),
        memory: Some(i64::try_from(plan.memory_bytes).unwrap_or(i64::MAX)),
        memory_swap: Some(i64::try_from(plan.memory_bytes).unwrap_or(i64::MAX)),
        nano_cpus: Some(plan.nano_cpus),
        pids_limit: Some(plan.pids_limit),
        ulimits: Some(ulimits(plan)),
        ipc_mode: Some("private".into()),
        // The container's own cgroup view, not the host's (the default on cgroup v1 hosts).
        cgroupns_mode: Some(bollard::models::HostConfigCgroupnsModeEnum::PRIVATE),
        // Under host memory pressure, the kernel kills the untrusted worker first.
        oom_score_adj: Some(crate::plan::OOM_SCORE_ADJ),
        // Without a network nothing should resolve and resolv.conf should name no host
        // nameserver; with the opt-in network the engine's normal resolver applies.
        dns: no_network.then(|| vec!["127.0.0.1".into()]),
        dns_search: no_network.then(Vec::new),
        dns_options: no_network.then(Vec::new),
        privileged: Some(false),
        publish_all_ports: Some(false),
        shm_size: Some(crate::plan::SHM_BYTES),
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
    }
}

/// The engine's record of a container, in engine-neutral terms. A field the engine leaves out
/// reads as its empty value, which the check against the plan then reports.
fn effective_of(inspect: bollard::models::ContainerInspectResponse) -> Effective {
    let config = inspect.config.unwrap_or_default();
    let host = inspect.host_config.unwrap_or_default();
    let mut mounts: Vec<EffectiveMount> = inspect
        .mounts
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            let kind = m.typ.map(|t| t.to_string()).unwrap_or_default();
            let source = if kind == "volume" {
                m.name.unwrap_or_default()
            } else if kind == "tmpfs" {
                String::new()
            } else {
                m.source.unwrap_or_default()
            };
            EffectiveMount {
                kind,
                source,
                target: m.destination.unwrap_or_default(),
                read_only: m.rw == Some(false),
                propagation: m.propagation.unwrap_or_default(),
            }
        })
        .collect();
    mounts.sort();
    Effective {
        image: inspect.image.unwrap_or_default(),
        user: config.user.unwrap_or_default(),
        entrypoint: config.entrypoint.unwrap_or_default(),
        cmd: config.cmd.unwrap_or_default(),
        healthcheck: config.healthcheck.and_then(|h| h.test).unwrap_or_default(),
        network_mode: host.network_mode.unwrap_or_default(),
        network_disabled: config.network_disabled.unwrap_or(false),
        readonly_rootfs: host.readonly_rootfs.unwrap_or(false),
        privileged: host.privileged.unwrap_or(false),
        cap_add: host.cap_add.unwrap_or_default(),
        cap_drop: host.cap_drop.unwrap_or_default(),
        security_opt: host.security_opt.unwrap_or_default(),
        pids_limit: host.pids_limit.unwrap_or(0),
        memory: host.memory.unwrap_or(0),
        memory_swap: host.memory_swap.unwrap_or(0),
        nano_cpus: host.nano_cpus.unwrap_or(0),
        mounts,
        tmpfs: host.tmpfs.unwrap_or_default().into_iter().collect(),
        runtime: host.runtime.unwrap_or_default(),
        init: host.init.unwrap_or(false),
        ipc_mode: host.ipc_mode.unwrap_or_default(),
        pid_mode: host.pid_mode.unwrap_or_default(),
        userns_mode: host.userns_mode.unwrap_or_default(),
        devices: host.devices.map_or(0, |d| d.len())
            + host.device_cgroup_rules.map_or(0, |d| d.len())
            + host.device_requests.map_or(0, |d| d.len()),
        cgroupns_mode: host
            .cgroupns_mode
            .map(|m| m.to_string())
            .unwrap_or_default(),
        uts_mode: host.uts_mode.unwrap_or_default(),
        ulimits: host
            .ulimits
            .unwrap_or_default()
            .into_iter()
            .filter_map(|u| {
                // Docker says `nofile`, Podman `RLIMIT_NOFILE`: one name for both.
                let name = u.name?.to_ascii_lowercase();
                let name = name.strip_prefix("rlimit_").unwrap_or(&name).to_string();
                Some((name, (u.soft.unwrap_or(-1), u.hard.unwrap_or(-1))))
            })
            .collect(),
        sysctls: host.sysctls.unwrap_or_default().into_iter().collect(),
        oom_kill_disable: host.oom_kill_disable.unwrap_or(false),
        oom_score_adj: host.oom_score_adj.unwrap_or(0),
        shm_size: host.shm_size.unwrap_or(0),
    }
}

/// The worker's create body: exactly the plan, nothing added.
fn worker_body(plan: &ContainerPlan) -> ContainerCreateBody {
    let no_network = plan.network == crate::policy::NetworkMode::None;
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
        host_config: Some(host_config(plan)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::TrustLevel;

    fn plan() -> ContainerPlan {
        crate::plan::sample(TrustLevel::Session)
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
    fn under_podman_the_plan_is_adapted_and_its_report_reads_in_docker_terms() {
        let engine = DockerEngine::connect().unwrap();
        let before = plan();
        let mut docker_plan = before.clone();
        assert!(
            engine.adapt(&mut docker_plan).is_empty(),
            "Docker applies plans as they are"
        );
        assert_eq!(docker_plan, before);
        let _ = engine.info.set(EngineInfo {
            name: PODMAN.into(),
            ..EngineInfo::default()
        });
        let mut p = plan();
        let replaced = engine.adapt(&mut p);
        let named: Vec<&str> = replaced.iter().map(|r| r.protection.as_str()).collect();
        assert_eq!(
            named,
            ["output tmpfs inode cap (nr_inodes)", "cap_drop ALL"]
        );
        let opts = p.output.mount_options();
        assert!(!opts.contains("nr_inodes") && !opts.contains("uid=") && opts.contains(",U,"));
        assert_eq!(p.tmpfs["/run"], "ro,noexec,nosuid,nodev,size=4096");
        assert_eq!(p.nproc, Some(u64::try_from(p.pids_limit).unwrap()));
        // What Podman 4.3 reported for such a container (measured), read back in our terms,
        // passes the check against the adapted plan.
        let mut reported = crate::verify::expected(&p);
        for opts in reported.tmpfs.values_mut() {
            opts.push_str(",rprivate,tmpcopyup");
        }
        reported.ipc_mode = "shareable".into();
        reported.network_disabled = false;
        reported.security_opt = vec!["no-new-privileges".into()];
        reported.cap_drop = PODMAN_DEFAULT_CAPS.iter().map(|c| c.to_string()).collect();
        let read = podman_in_docker_terms(reported.clone());
        assert_eq!(crate::verify::compare(&p, &read), vec![]);
        // One default capability not dropped is not ALL.
        let mut kept = reported.clone();
        kept.cap_drop.retain(|c| c != "SETUID");
        assert!(!crate::verify::compare(&p, &podman_in_docker_terms(kept)).is_empty());
        // A capability added, or an extra writable tmpfs, still fails.
        let mut added = reported.clone();
        added.cap_add = vec!["SYS_ADMIN".into()];
        assert!(!crate::verify::compare(&p, &podman_in_docker_terms(added)).is_empty());
        let mut extra = reported;
        extra.tmpfs.insert("/dev/shm".into(), "rw,exec".into());
        assert!(!crate::verify::compare(&p, &podman_in_docker_terms(extra)).is_empty());
    }
}
