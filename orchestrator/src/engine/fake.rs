//! A scripted engine for the library's tests: the session's stream and steps are driven
//! through every ending (timeout, stall, refusal, cut archive, init deadline, OOM, cancel)
//! without Docker, deterministically, under tokio's paused clock.
//!
//! The one container's attach stream plays a [`Script`]: chunks of stdout and stderr, pauses,
//! and a hang. Like a real engine, a kill ends the stream, and the exit state the script names
//! is what `wait` and `inspect` report once the container is stopped. Every call is logged so
//! a test can assert what the session asked for (a kill, a removal).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

use super::{
    Attached, BuildSpec, Chunk, Effective, Engine, EngineError, EngineFuture, EngineInfo,
    ExitState, ImageInfo, Inspected, Listed, ListedVolume, Select,
};
use crate::plan::ContainerPlan;

/// One step of the container's output.
#[derive(Debug, Clone)]
pub enum Step {
    /// Bytes on stdout (the archive).
    Out(Bytes),
    /// Bytes on stderr (the worker's messages).
    Err(Bytes),
    /// Nothing for this long (a kill cuts it short).
    Pause(Duration),
    /// Nothing ever again, until the container is killed.
    Hang,
    /// Nothing until the test notifies (a kill cuts it short): the container runs while the
    /// test acts on it, e.g. on its model gateway's socket.
    Until(Arc<tokio::sync::Notify>),
    /// Steps made, when the container is attached, from the plan it was created with: output
    /// that holds a value only the plan knows (the model gateway's honeytoken).
    FromPlan(PlanSteps),
}

/// A function of the container's plan giving the steps it plays; see [`Step::FromPlan`].
#[derive(Clone)]
pub struct PlanSteps(pub Arc<PlanFn>);

/// The function inside [`PlanSteps`].
pub type PlanFn = dyn Fn(&ContainerPlan) -> Vec<Step> + Send + Sync;

impl std::fmt::Debug for PlanSteps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PlanSteps(..)")
    }
}

/// What the container does once started.
#[derive(Debug, Clone, Default)]
pub struct Script {
    /// Its output, in order; the stream ends after the last step.
    pub steps: Vec<Step>,
    /// How it ends (a kill makes the code 137 unless the script names one).
    pub exit: ExitState,
}

impl Script {
    /// A container that writes these steps and exits with `code`.
    pub fn new(steps: Vec<Step>, code: i64) -> Script {
        Script {
            steps,
            exit: ExitState {
                code: Some(code),
                oom_killed: false,
            },
        }
    }
}

/// An [`Engine`] that plays one [`Script`] for every container created.
pub struct FakeEngine {
    script: Script,
    killed: watch::Sender<bool>,
    calls: Mutex<Vec<String>>,
    plan: Mutex<Option<ContainerPlan>>,
    tamper: Option<fn(&mut Effective)>,
    security_options: Mutex<Vec<String>>,
}

impl FakeEngine {
    /// An engine whose container will play `script`.
    pub fn new(script: Script) -> Arc<FakeEngine> {
        Arc::new(FakeEngine {
            script,
            killed: watch::channel(false).0,
            calls: Mutex::new(Vec::new()),
            plan: Mutex::new(None),
            tamper: None,
            security_options: Mutex::new(vec!["name=seccomp,profile=default".into()]),
        })
    }

    /// An engine that records the created container with a setting changed by `tamper`, as an
    /// engine that drops or rewrites an option would.
    pub fn tampering(script: Script, tamper: fn(&mut Effective)) -> Arc<FakeEngine> {
        Arc::new(FakeEngine {
            script,
            killed: watch::channel(false).0,
            calls: Mutex::new(Vec::new()),
            plan: Mutex::new(None),
            tamper: Some(tamper),
            security_options: Mutex::new(vec!["name=seccomp,profile=default".into()]),
        })
    }

    /// Makes the engine report these security options (`docker info`'s `SecurityOptions`).
    pub fn set_security_options(&self, options: &[&str]) {
        if let Ok(mut o) = self.security_options.lock() {
            *o = options.iter().map(|s| s.to_string()).collect();
        }
    }

    /// The plan the last container was created with.
    pub fn plan(&self) -> Option<ContainerPlan> {
        self.plan.lock().ok().and_then(|p| p.clone())
    }

    /// Every call made so far, e.g. `create golem-…-worker`, `kill …`.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Whether any call's log line starts with `prefix`.
    pub fn called(&self, prefix: &str) -> bool {
        self.calls().iter().any(|c| c.starts_with(prefix))
    }

    fn log(&self, call: String) {
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(call);
        }
    }

    fn was_killed(&self) -> bool {
        *self.killed.borrow()
    }

    fn exit(&self) -> ExitState {
        let mut exit = self.script.exit;
        if self.was_killed() && exit.code.is_none() {
            exit.code = Some(137);
        }
        exit
    }
}

/// Plays the steps until they end or the container is killed.
fn play(steps: Vec<Step>, killed: watch::Receiver<bool>) -> Attached {
    let state = (VecDeque::from(steps), killed);
    let stream = futures_util::stream::unfold(state, |(mut steps, mut killed)| async move {
        loop {
            if *killed.borrow() {
                return None;
            }
            let chunk = match steps.pop_front()? {
                Step::Out(b) => Chunk::Stdout(b),
                Step::Err(b) => Chunk::Stderr(b),
                Step::Pause(d) => {
                    tokio::select! {
                        () = tokio::time::sleep(d) => {}
                        _ = killed.wait_for(|k| *k) => return None,
                    }
                    continue;
                }
                Step::Hang => {
                    let _ = killed.wait_for(|k| *k).await;
                    return None;
                }
                Step::Until(notify) => {
                    tokio::select! {
                        () = notify.notified() => {}
                        _ = killed.wait_for(|k| *k) => return None,
                    }
                    continue;
                }
                // Expanded by `attach`.
                Step::FromPlan(_) => continue,
            };
            return Some((Ok(chunk), (steps, killed)));
        }
    });
    Box::pin(stream)
}

fn ready<'a, T: Send + 'a>(value: T) -> EngineFuture<'a, T> {
    Box::pin(std::future::ready(Ok(value)))
}

impl Engine for FakeEngine {
    fn version(&self) -> EngineFuture<'_, EngineInfo> {
        ready(EngineInfo {
            version: "fake".into(),
            api_version: "1.41".into(),
            platform: "test/none".into(),
            name: "fake".into(),
            runtimes: vec!["runc".into()],
            default_runtime: "runc".into(),
            security_options: self
                .security_options
                .lock()
                .map(|o| o.clone())
                .unwrap_or_default(),
        })
    }

    fn create<'a>(&'a self, name: &'a str, plan: &'a ContainerPlan) -> EngineFuture<'a, String> {
        self.log(format!("create {name}"));
        if let Ok(mut last) = self.plan.lock() {
            *last = Some(plan.clone());
        }
        ready(name.to_string())
    }

    fn attach<'a>(&'a self, id: &'a str) -> EngineFuture<'a, Attached> {
        self.log(format!("attach {id}"));
        let plan = self.plan();
        let steps = self
            .script
            .steps
            .iter()
            .flat_map(|step| match (step, &plan) {
                (Step::FromPlan(f), Some(plan)) => (f.0)(plan),
                (step, _) => vec![step.clone()],
            })
            .collect();
        ready(play(steps, self.killed.subscribe()))
    }

    fn start<'a>(&'a self, id: &'a str) -> EngineFuture<'a, ()> {
        self.log(format!("start {id}"));
        ready(())
    }

    fn kill<'a>(&'a self, id: &'a str) -> EngineFuture<'a, ()> {
        self.log(format!("kill {id}"));
        self.killed.send_replace(true);
        ready(())
    }

    fn wait<'a>(&'a self, id: &'a str) -> EngineFuture<'a, i64> {
        self.log(format!("wait {id}"));
        ready(self.exit().code.unwrap_or(0))
    }

    fn inspect<'a>(&'a self, id: &'a str) -> EngineFuture<'a, Inspected> {
        self.log(format!("inspect {id}"));
        ready(Inspected {
            running: false,
            exit: self.exit(),
            user: None,
        })
    }

    fn effective<'a>(&'a self, id: &'a str) -> EngineFuture<'a, Effective> {
        self.log(format!("effective {id}"));
        let mut eff = self
            .plan()
            .map(|p| crate::verify::expected(&p))
            .unwrap_or_default();
        if let Some(tamper) = self.tamper {
            tamper(&mut eff);
        }
        ready(eff)
    }

    fn remove<'a>(&'a self, id: &'a str) -> EngineFuture<'a, ()> {
        self.log(format!("remove {id}"));
        ready(())
    }

    fn list<'a>(&'a self, _select: &'a Select) -> EngineFuture<'a, Vec<Listed>> {
        ready(Vec::new())
    }

    fn inspect_image<'a>(&'a self, reference: &'a str) -> EngineFuture<'a, ImageInfo> {
        self.log(format!("inspect_image {reference}"));
        Box::pin(std::future::ready(Err(EngineError::api(
            format!("inspecting image {reference}"),
            "no such image",
            Some(404),
        ))))
    }

    fn build_image<'a>(&'a self, spec: &'a BuildSpec) -> EngineFuture<'a, ()> {
        self.log(format!("build_image {}", spec.tag));
        ready(())
    }

    fn tag_image<'a>(
        &'a self,
        image: &'a str,
        repo: &'a str,
        tag: &'a str,
    ) -> EngineFuture<'a, ()> {
        self.log(format!("tag_image {image} {repo}:{tag}"));
        ready(())
    }

    fn image_tags<'a>(&'a self, _repository: &'a str) -> EngineFuture<'a, Vec<String>> {
        ready(Vec::new())
    }

    fn remove_image<'a>(&'a self, tag: &'a str) -> EngineFuture<'a, ()> {
        self.log(format!("remove_image {tag}"));
        ready(())
    }

    fn volumes<'a>(&'a self, _labels: &'a [String]) -> EngineFuture<'a, Vec<ListedVolume>> {
        ready(Vec::new())
    }

    fn remove_volume<'a>(&'a self, name: &'a str) -> EngineFuture<'a, ()> {
        self.log(format!("remove_volume {name}"));
        ready(())
    }
}

/// Archives as the init writes them: `output/` first, then its entries, then the end marker.
pub struct Archive(tar::Builder<Vec<u8>>);

impl Default for Archive {
    fn default() -> Self {
        Archive::new()
    }
}

impl Archive {
    /// An archive holding only the `output/` directory so far.
    pub fn new() -> Archive {
        let mut builder = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        builder
            .append_data(&mut h, "output/", std::io::empty())
            .unwrap_or_else(|e| panic!("{e}"));
        Archive(builder)
    }

    /// Adds a regular file under `output/`.
    pub fn file(mut self, name: &str, data: &[u8]) -> Archive {
        let mut h = tar::Header::new_ustar();
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        self.0
            .append_data(&mut h, format!("output/{name}"), data)
            .unwrap_or_else(|e| panic!("{e}"));
        self
    }

    /// Adds the init's refusal entry for `name` (one it could not archive), preceded by the
    /// PAX record that says why.
    pub fn refusal(mut self, name: &str, reason: &str) -> Archive {
        let record = pax_record(crate::extract::INIT_REFUSAL_KEY, reason.as_bytes());
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::XHeader);
        h.set_mode(0o644);
        h.set_size(record.len() as u64);
        self.0
            .append_data(&mut h, "PaxHeaders/x", &record[..])
            .unwrap_or_else(|e| panic!("{e}"));
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::new(crate::extract::INIT_REFUSAL_TYPE));
        h.set_mode(0);
        h.set_size(0);
        self.0
            .append_data(&mut h, format!("output/{name}"), std::io::empty())
            .unwrap_or_else(|e| panic!("{e}"));
        self
    }

    /// The complete archive.
    pub fn finish(self) -> Vec<u8> {
        self.0.into_inner().unwrap_or_else(|e| panic!("{e}"))
    }
}

/// The archive as the attach stream delivers it: in chunks of `size` bytes.
pub fn chunks(archive: &[u8], size: usize) -> Vec<Step> {
    archive
        .chunks(size)
        .map(|c| Step::Out(Bytes::copy_from_slice(c)))
        .collect()
}

/// One PAX record, `"<len> <key>=<value>\n"`, where `<len>` counts itself.
fn pax_record(key: &str, value: &[u8]) -> Vec<u8> {
    let body = key.len() + value.len() + 3;
    let mut len = body + 1;
    while len != body + len.to_string().len() {
        len = body + len.to_string().len();
    }
    let mut record = format!("{len} {key}=").into_bytes();
    record.extend_from_slice(value);
    record.push(b'\n');
    record
}
