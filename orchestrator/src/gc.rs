//! Garbage collection: remove what crashed orchestrators left behind, and say so.
//!
//! Only resources labelled `golem.managed` are considered, and only those whose owning process
//! is provably gone (same boot, PID not running with the recorded start time). A live session's
//! containers are never touched, so `gc` is safe to run at any time, including from `run`.
//!
//! Labels can come from an image (`LABEL golem.managed=true ...`), so none of them is believed
//! alone: a resource counts as golem-orch's only when its `golem.token` label is the HMAC of
//! its session id under the secret token of the state directory its `golem.home` label names
//! (`Tokens::created_here`). And a session's record is only marked failed when the record's own
//! owner is dead, whatever a label says.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use serde::Serialize;
use serde_json::json;

use crate::audit::{self, Audit};
use crate::engine::{
    Engine, EngineError, Select, LABEL_HOME, LABEL_MANAGED, LABEL_OWNER, LABEL_SESSION, LABEL_TOKEN,
};
use crate::home::{self, Home};
use crate::owner::{label_liveness, Liveness, Owner};
use crate::secret::{self, Secret};
use crate::session::{self, SessionStatus};
use crate::stage::Stage;

/// What a collection did.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Report {
    /// Containers removed.
    pub containers: Vec<String>,
    /// Volumes removed.
    pub volumes: Vec<String>,
    /// Sessions marked failed.
    pub sessions_failed: Vec<String>,
    /// Half-built staged commits removed.
    pub stage_orphans: Vec<String>,
    /// Init binaries of other golem-orch builds removed from the state directory.
    pub init_binaries: Vec<String>,
    /// `golem-worker` image tags of other builds removed (the `gc` command only).
    pub images: Vec<String>,
    /// Resources left alone because their owner is alive.
    pub live: usize,
    /// Resources labelled like golem-orch's that no state directory of this user created
    /// (labels copied from an image, another user's, or an older version's): never touched.
    pub foreign: usize,
    /// Removals that failed, with why.
    pub errors: Vec<String>,
    /// Nothing was removed or changed: every list above says what would be
    /// (`gc --dry-run`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

/// Which resources a collection considers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything golem-orch created on this engine (the `gc` command).
    Engine,
    /// Only what belongs to this state directory (the tidy-up at the start of `run`), so one
    /// project's runs never race another project's cleanup.
    Home,
}

/// Collects dead-owned resources, marking their sessions failed in the state directory they belong to.
pub async fn collect(
    engine: &dyn Engine,
    home: &Home,
    scope: Scope,
) -> Result<Report, EngineError> {
    sweep(engine, home, scope, false).await
}

/// What [`collect`] would do, doing none of it: nothing is removed from the engine or the
/// state directories, no session is marked failed, nothing is audited, and `home` need not
/// exist (`gc --dry-run`). The same decisions, so the list is what a `gc` now would remove.
pub async fn preview(
    engine: &dyn Engine,
    home: &Home,
    scope: Scope,
) -> Result<Report, EngineError> {
    sweep(engine, home, scope, true).await
}

async fn sweep(
    engine: &dyn Engine,
    home: &Home,
    scope: Scope,
    dry_run: bool,
) -> Result<Report, EngineError> {
    let mut labels = vec![LABEL_MANAGED.to_string()];
    if scope == Scope::Home {
        labels.push(format!("{LABEL_HOME}={}", home.root().display()));
    }
    let mut sweep = Sweep {
        dry_run,
        ..Sweep::default()
    };
    sweep.containers(engine, &labels).await?;
    sweep.volumes(engine, &labels).await?;
    let Sweep {
        mut report,
        dead_sessions,
        ..
    } = sweep;
    report.dry_run = dry_run;
    let homes_seen = mark_dead_sessions(home, dead_sessions, &mut report);
    report.init_binaries = crate::image::stale_inits(home.root(), !dry_run);
    if scope == Scope::Engine {
        match crate::image::stale_images(engine, !dry_run).await {
            Ok(tags) => report.images = tags,
            Err(e) => report.errors.push(e.to_string()),
        }
    }
    for root in homes_seen {
        // A dry run opens nothing that could create files: the stage is only listed.
        let staged = match dry_run {
            true => Some(Home::peek(Some(&root)).staged_dir()),
            false => Home::open(Some(&root)).ok().map(|h| h.staged_dir()),
        };
        let Some(staged) = staged.filter(|d| d.is_dir()) else {
            continue;
        };
        if let Ok(removed) = Stage::new(staged).orphans(!dry_run) {
            report.stage_orphans.extend(removed);
        }
    }
    if !dry_run {
        audit_collected(home, &report);
    }
    Ok(report)
}

/// One collection's progress through the engine's objects.
#[derive(Default)]
struct Sweep {
    report: Report,
    /// session -> home of every dead-owned resource, to mark sessions afterwards.
    dead_sessions: BTreeMap<String, Option<PathBuf>>,
    tokens: Tokens,
    /// List what would be removed; remove nothing.
    dry_run: bool,
}

impl Sweep {
    /// Whether an object with these labels is this user's and its owner is dead; counts it
    /// as foreign or live otherwise, and notes the session of a dead one.
    fn is_dead_and_ours(&mut self, labels: &HashMap<String, String>) -> bool {
        if !self.tokens.created_here(labels) {
            self.report.foreign += 1;
            return false;
        }
        if label_liveness(labels.get(LABEL_OWNER).map(String::as_str)) != Liveness::Dead {
            self.report.live += 1;
            return false;
        }
        note_session(&mut self.dead_sessions, labels);
        true
    }

    async fn containers(
        &mut self,
        engine: &dyn Engine,
        labels: &[String],
    ) -> Result<(), EngineError> {
        let containers = engine
            .list(&Select::Labels(labels.to_vec()))
            .await
            .map_err(|e| e.doing("listing golem-orch containers"))?;
        for c in containers {
            if !self.is_dead_and_ours(&c.labels) {
                continue;
            }
            if self.dry_run {
                self.report.containers.push(c.id);
                continue;
            }
            match engine.remove(&c.id).await {
                Ok(()) => self.report.containers.push(c.id),
                Err(e) => self
                    .report
                    .errors
                    .push(format!("container {}: {}", c.id, e.detail())),
            }
        }
        Ok(())
    }

    async fn volumes(&mut self, engine: &dyn Engine, labels: &[String]) -> Result<(), EngineError> {
        let volumes = engine
            .volumes(labels)
            .await
            .map_err(|e| e.doing("listing golem-orch volumes"))?;
        for v in volumes {
            if !self.is_dead_and_ours(&v.labels) {
                continue;
            }
            if self.dry_run {
                self.report.volumes.push(v.name);
                continue;
            }
            match engine.remove_volume(&v.name).await {
                Ok(()) => self.report.volumes.push(v.name),
                Err(e) => self
                    .report
                    .errors
                    .push(format!("volume {}: {}", v.name, e.detail())),
            }
        }
        Ok(())
    }
}

/// Marks failed the dead sessions the engine's objects named, and those of this home that died
/// before creating anything in the engine; returns the state directories seen.
fn mark_dead_sessions(
    home: &Home,
    mut dead_sessions: BTreeMap<String, Option<PathBuf>>,
    report: &mut Report,
) -> BTreeSet<PathBuf> {
    if let Ok(records) = session::list(home) {
        for r in records.iter().filter(|r| !r.status.is_final()) {
            if Owner::parse(&r.owner).is_some_and(|o| o.liveness() == Liveness::Dead) {
                dead_sessions
                    .entry(r.id.clone())
                    .or_insert(Some(home.root().to_path_buf()));
            }
        }
    }
    let mut homes_seen = BTreeSet::new();
    for (id, session_home) in dead_sessions {
        let Some(root) = session_home else { continue };
        // Labels are only data: never create a directory because one names it.
        if !root.join("sessions").is_dir() {
            continue;
        }
        if report.dry_run {
            if dead_record(&Home::peek(Some(&root)), &id).is_some() {
                report.sessions_failed.push(id);
            }
            homes_seen.insert(root);
            continue;
        }
        let Ok(h) = Home::open(Some(&root)) else {
            continue;
        };
        homes_seen.insert(root);
        if mark_failed(&h, &id) {
            report.sessions_failed.push(id);
        }
    }
    homes_seen.insert(home.root().to_path_buf());
    homes_seen
}

/// Audits a collection that removed anything.
fn audit_collected(home: &Home, report: &Report) {
    if !report.containers.is_empty()
        || !report.volumes.is_empty()
        || !report.stage_orphans.is_empty()
        || !report.images.is_empty()
        || !report.init_binaries.is_empty()
    {
        let _ = Audit::new(home.audit_path()).record(
            None,
            "gc.collected",
            json!({ "containers": report.containers, "volumes": report.volumes, "stage_orphans": report.stage_orphans, "images": report.images, "init_binaries": report.init_binaries }),
        );
    }
}

/// The gc tokens of the state directories named by labels, each read once.
#[derive(Default)]
struct Tokens(HashMap<PathBuf, Option<Secret>>);

impl Tokens {
    /// Whether a state directory of this user created the resource carrying `labels`: its
    /// `golem.token` is the HMAC of its `golem.session` under the token of the state directory
    /// its `golem.home` names. The token file is read only if it is a private regular file of
    /// this user; an image can copy every label but cannot compute this one.
    fn created_here(&mut self, labels: &HashMap<String, String>) -> bool {
        let (Some(session), Some(home), Some(tag)) = (
            labels.get(LABEL_SESSION).filter(|s| is_session_id(s)),
            labels
                .get(LABEL_HOME)
                .map(PathBuf::from)
                .filter(|p| p.is_absolute()),
            labels.get(LABEL_TOKEN),
        ) else {
            return false;
        };
        let token = self.0.entry(home.clone()).or_insert_with(|| {
            secret::read_existing(&home.join(home::TOKEN_FILE))
                .ok()
                .flatten()
        });
        token.as_ref().is_some_and(|t| {
            secret::ct_eq(home::session_tag(t, session).as_bytes(), tag.as_bytes())
        })
    }
}

fn is_session_id(s: &str) -> bool {
    s.len() == 32 && s.chars().all(|c| c.is_ascii_hexdigit())
}

fn note_session(dead: &mut BTreeMap<String, Option<PathBuf>>, labels: &HashMap<String, String>) {
    // A session id is 32 hex digits; anything else in a label is not used as a path.
    if let Some(s) = labels.get(LABEL_SESSION).filter(|s| is_session_id(s)) {
        let home = labels
            .get(LABEL_HOME)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute());
        dead.entry(s.clone()).or_insert(home);
    }
}

/// The record of an unfinished session whose owner the record names is provably dead: one
/// [`mark_failed`] marks (and `gc --dry-run` lists).
fn dead_record(home: &Home, id: &str) -> Option<session::Record> {
    let record = session::load(home, id).ok()?;
    let dead = Owner::parse(&record.owner).is_some_and(|o| o.liveness() == Liveness::Dead);
    (!record.status.is_final() && dead).then_some(record)
}

/// Marks an unfinished session failed; returns whether it changed anything.
///
/// Decided from the session record alone: only when the owner the record names is provably
/// dead. A label that says otherwise (even one on an object this state directory created)
/// never changes a live session's record.
fn mark_failed(home: &Home, id: &str) -> bool {
    let Some(mut record) = dead_record(home, id) else {
        return false;
    };
    let previous = record.status;
    record.status = SessionStatus::Failed;
    record.error = Some(format!(
        "orchestrator died while the session was {}; cleaned up by gc",
        previous.as_str()
    ));
    record.updated_at = audit::now();
    if session::save(home, &record).is_err() {
        return false;
    }
    let _ = Audit::new(home.audit_path()).record(
        Some(id),
        "session.failed",
        json!({ "error": record.error, "by": "gc", "was": previous }),
    );
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn as_map(labels: std::collections::BTreeMap<String, String>) -> HashMap<String, String> {
        labels.into_iter().collect()
    }

    #[test]
    fn only_labels_made_with_the_named_homes_token_count() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(Some(&dir.path().join("a"))).unwrap();
        let other = Home::open(Some(&dir.path().join("b"))).unwrap();
        let id = crate::home::new_id();
        let ours = as_map(session::labels(&home, &id, &Owner::current()));
        let mut tokens = Tokens::default();
        assert!(tokens.created_here(&ours));

        // An image can copy every other label, but not compute the token's.
        let mut copied = ours.clone();
        copied.remove(LABEL_TOKEN);
        assert!(!tokens.created_here(&copied));
        let mut guessed = ours.clone();
        guessed.insert(LABEL_TOKEN.into(), "0".repeat(64));
        assert!(!tokens.created_here(&guessed));
        // A real tag moved to another session or another home proves nothing there.
        let mut moved = ours.clone();
        moved.insert(LABEL_SESSION.into(), crate::home::new_id());
        assert!(!tokens.created_here(&moved));
        let mut elsewhere = ours.clone();
        elsewhere.insert(LABEL_HOME.into(), other.root().display().to_string());
        assert!(!tokens.created_here(&elsewhere));
        // A home without a token (or none at all) is nobody's.
        let mut nowhere = ours;
        nowhere.insert(
            LABEL_HOME.into(),
            dir.path().join("c").display().to_string(),
        );
        assert!(!tokens.created_here(&nowhere));
    }

    #[test]
    fn a_live_sessions_record_is_never_marked_failed() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(Some(dir.path())).unwrap();
        let mut record: session::Record = serde_json::from_value(json!({
            "id": "0123456789abcdef0123456789abcdef", "created_at": "t", "updated_at": "t",
            "status": "running", "trust_level": "untrusted", "image": "i", "command": [],
            "owner": Owner::current().to_string(), "inputs": [], "exit": serde_json::to_value(crate::container::Exit::default()).unwrap(),
            "staged": null, "files": 0, "bytes": 0, "rejected": 0, "error": null, "kept": false
        }))
        .unwrap();
        std::fs::create_dir(home.session_dir(&record.id)).unwrap();
        session::save(&home, &record).unwrap();
        assert!(
            !mark_failed(&home, &record.id),
            "a live owner's record changed"
        );
        record.owner = "old-boot:1:1:1".into();
        session::save(&home, &record).unwrap();
        assert!(mark_failed(&home, &record.id));
        assert_eq!(
            session::load(&home, &record.id).unwrap().status,
            SessionStatus::Failed
        );
    }
}
