//! Crash-test hooks: points where a test can stop a session to kill the orchestrator, or
//! break something under it, in a known phase.

use std::path::PathBuf;
use std::time::Duration;

/// Crash-test hook: when `GOLEM_FAILPOINT` names this point, the session stops here forever,
/// so a test can SIGKILL the orchestrator in a known phase; `NAME:until=PATH` waits until PATH
/// exists instead (ten minutes at most), so a test can break something under a session that then
/// goes on. Unset, it costs one env lookup.
pub(super) async fn failpoint(name: &str) {
    let Ok(value) = std::env::var("GOLEM_FAILPOINT") else {
        return;
    };
    let (point, until) = match value.split_once(":until=") {
        Some((point, path)) => (point, Some(PathBuf::from(path))),
        None => (value.as_str(), None),
    };
    if point != name {
        return;
    }
    crate::render::errln(format_args!("golem-orch: failpoint {name} reached"));
    match until {
        Some(path) => {
            let give_up = tokio::time::Instant::now() + Duration::from_secs(600);
            while !path.exists() && tokio::time::Instant::now() < give_up {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}
