//! The connection to the Docker Engine, and the labels that mark what golem-orch creates.
//!
//! One client per process: bollard pools the connection, which matters when a batch starts
//! hundreds of containers. The version is checked once because bollard does not send its API
//! version in request paths, so an older engine would otherwise fail in confusing ways later.

use bollard::Docker;

/// The oldest Engine API this tool is tested against (Docker 20.10).
pub const MIN_API: (u32, u32) = (1, 41);

/// Marks every container and volume golem-orch creates, so `gc` can find them and nothing else.
pub const LABEL_MANAGED: &str = "golem.managed";
/// The session a resource belongs to.
pub const LABEL_SESSION: &str = "golem.session";
/// The state directory of the session, so `gc` can mark the session failed in the right place.
pub const LABEL_HOME: &str = "golem.home";
/// The owning process (`boot_id:pid:start_time`), so `gc` never touches a live session's resources.
pub const LABEL_OWNER: &str = "golem.owner";
/// Proof that this state directory created the resource: an HMAC of the session id under the
/// state directory's secret gc token (`home::Home::tag`). Labels an image bakes in can copy
/// every other label but cannot predict this one, so `gc` trusts nothing without it.
pub const LABEL_TOKEN: &str = "golem.token";
/// `worker`, `holder` or `output`.
pub const LABEL_ROLE: &str = "golem.role";

/// Why the engine could not be used; each message says what to check.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No engine answered at the configured address.
    #[error(
        "cannot reach the Docker Engine ({0}); is the daemon running and is DOCKER_HOST right?"
    )]
    Unreachable(String),
    /// The engine speaks an API older than the one this tool needs.
    #[error("the Docker Engine speaks API {found}, golem-orch needs {}.{} or newer", MIN_API.0, MIN_API.1)]
    TooOld {
        /// The engine's version string.
        found: String,
    },
    /// Any other engine error, with what was being done.
    #[error("{doing}: {source}")]
    Api {
        /// The operation.
        doing: String,
        /// bollard's error.
        source: bollard::errors::Error,
    },
}

impl EngineError {
    /// Wraps a bollard error with the operation that failed.
    pub fn api(doing: impl Into<String>) -> impl FnOnce(bollard::errors::Error) -> EngineError {
        let doing = doing.into();
        move |source| EngineError::Api { doing, source }
    }
}

/// What `doctor` and the version check learned about the engine.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EngineInfo {
    /// Engine version, e.g. `20.10.24`.
    pub version: String,
    /// API version, e.g. `1.41`.
    pub api_version: String,
    /// Operating system and architecture.
    pub platform: String,
}

/// Connects (honouring `DOCKER_HOST`, unix or tcp) and checks the API version.
pub async fn connect() -> Result<(Docker, EngineInfo), EngineError> {
    let docker =
        Docker::connect_with_defaults().map_err(|e| EngineError::Unreachable(e.to_string()))?;
    let v = docker
        .version()
        .await
        .map_err(|e| EngineError::Unreachable(e.to_string()))?;
    let api_version = v.api_version.unwrap_or_default();
    let info = EngineInfo {
        version: v.version.unwrap_or_default(),
        platform: format!(
            "{}/{}",
            v.os.unwrap_or_default(),
            v.arch.unwrap_or_default()
        ),
        api_version: api_version.clone(),
    };
    if parse_api(&api_version).is_none_or(|v| v < MIN_API) {
        return Err(EngineError::TooOld { found: api_version });
    }
    Ok((docker, info))
}

fn parse_api(v: &str) -> Option<(u32, u32)> {
    let (a, b) = v.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// True when the error is the engine saying "no such container/image/volume".
pub fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_versions_compare_numerically() {
        assert!(parse_api("1.41").unwrap() >= MIN_API);
        assert!(parse_api("1.100").unwrap() >= MIN_API);
        assert!(parse_api("1.40").unwrap() < MIN_API);
        assert!(parse_api("garbage").is_none());
    }
}
