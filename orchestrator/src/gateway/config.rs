//! Where the model lives and the key to it: the host's configuration, and nothing else's.
//!
//! The upstream and the key come from the host's environment (`GOLEM_MODEL_API`,
//! `GOLEM_MODEL_BASE_URL`, `GOLEM_MODEL_KEY` or else `ANTHROPIC_API_KEY`/`OPENAI_API_KEY`,
//! `GOLEM_MODEL`) and, for what the environment leaves unset, from the host config file
//! [`host_config_path`] (`$XDG_CONFIG_HOME/golem-orch/model.yaml`, else
//! `~/.config/golem-orch/model.yaml`). A project's `golem.yaml`, a worker definition and the
//! container can narrow the policy's `model:` section, but nothing they hold is read here, so
//! none of them can point the gateway elsewhere or learn the key. The key's type never prints:
//! its `Debug` is redacted and it has no `Serialize`.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::policy::{read_owned_file, valid_model_name, PolicyError};

/// The provider protocol the upstream speaks; it decides the one path the gateway serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelApi {
    /// The Anthropic Messages API.
    Anthropic,
    /// The OpenAI Chat Completions API, also spoken by llama.cpp server, Ollama and vLLM.
    Openai,
}

impl ModelApi {
    /// The name used in the environment, the config file and `GET /golem/info`.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelApi::Anthropic => "anthropic",
            ModelApi::Openai => "openai",
        }
    }

    /// The only request path the gateway serves for this API.
    pub fn path(self) -> &'static str {
        match self {
            ModelApi::Anthropic => "/v1/messages",
            ModelApi::Openai => "/v1/chat/completions",
        }
    }

    /// Every API, so a rule about all of them (no policy passes their key variables) cannot
    /// miss a new one.
    pub const ALL: [ModelApi; 2] = [ModelApi::Anthropic, ModelApi::Openai];

    /// The provider's conventional key variable, used when `GOLEM_MODEL_KEY` is unset.
    pub fn key_env(self) -> &'static str {
        match self {
            ModelApi::Anthropic => "ANTHROPIC_API_KEY",
            ModelApi::Openai => "OPENAI_API_KEY",
        }
    }

    /// The provider's own endpoint, used when no base URL is configured.
    pub fn default_base_url(self) -> &'static str {
        match self {
            ModelApi::Anthropic => "https://api.anthropic.com",
            ModelApi::Openai => "https://api.openai.com",
        }
    }
}

impl std::str::FromStr for ModelApi {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "anthropic" => Ok(ModelApi::Anthropic),
            "openai" => Ok(ModelApi::Openai),
            other => Err(ConfigError::Invalid(format!(
                "GOLEM_MODEL_API is {other:?}; expected anthropic or openai"
            ))),
        }
    }
}

/// The provider key. Held only by the gateway, sent only to the upstream, never printed:
/// `Debug` shows `ModelKey(..)` and there is deliberately no `Display` or `Serialize`.
#[derive(Clone, PartialEq, Eq)]
pub struct ModelKey(String);

impl fmt::Debug for ModelKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ModelKey(..)")
    }
}

impl ModelKey {
    /// Wraps a key after checking it can travel in a header unchanged.
    pub fn new(key: &str) -> Result<ModelKey, ConfigError> {
        let key = key.trim();
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ConfigError::Invalid(
                "the model key must be non-empty printable ASCII without spaces".into(),
            ));
        }
        Ok(ModelKey(key.to_string()))
    }

    /// The key itself, for the one header that carries it upstream.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

/// The host's model upstream: protocol, endpoint, key and default model.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// Which protocol it speaks.
    pub api: ModelApi,
    /// Scheme, host and optional port and path prefix, without a trailing `/` or `/v1`.
    pub base_url: String,
    /// What `host` in a policy's allowlist stands for; without it `host` allows nothing.
    pub default_model: Option<String>,
    key: ModelKey,
}

/// Why the host's model configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A value is missing or malformed; the message names it (never the key's value).
    #[error("model configuration: {0}")]
    Invalid(String),
    /// The host config file is unsafe or unreadable (boxed: policy errors carry locations).
    #[error("model configuration: {0}")]
    File(Box<PolicyError>),
}

impl From<PolicyError> for ConfigError {
    fn from(e: PolicyError) -> Self {
        ConfigError::File(Box::new(e))
    }
}

/// The host config file's shape; every field is optional and the environment wins.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostFile {
    #[serde(default)]
    api: Option<ModelApi>,
    #[serde(default)]
    base_url: Option<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    model: Option<String>,
}

/// Where the host config file is looked for: `$XDG_CONFIG_HOME/golem-orch/model.yaml`, else
/// `$HOME/.config/golem-orch/model.yaml`. Outside any project, so a repository cannot ship one.
pub fn host_config_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let base = env("XDG_CONFIG_HOME")
        .filter(|d| d.starts_with('/'))
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".config")))?;
    Some(base.join("golem-orch").join("model.yaml"))
}

impl Upstream {
    /// Builds an upstream from explicit values (tests, benches, and [`Upstream::from_sources`]).
    pub fn new(
        api: ModelApi,
        base_url: &str,
        key: ModelKey,
        default_model: Option<String>,
    ) -> Result<Upstream, ConfigError> {
        let base_url = normalise_base_url(base_url)?;
        if let Some(m) = default_model.as_deref().filter(|m| !valid_model_name(m)) {
            return Err(ConfigError::Invalid(format!(
                "GOLEM_MODEL {m:?} is not a model name"
            )));
        }
        Ok(Upstream {
            api,
            base_url,
            default_model,
            key,
        })
    }

    /// The host's upstream from the process environment and the default config file; `None`
    /// when neither names an API, which means sessions get no model access.
    pub fn from_host() -> Result<Option<Upstream>, ConfigError> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let file = host_config_path(&env).filter(|p| p.symlink_metadata().is_ok());
        Upstream::from_sources(&env, file.as_deref())
    }

    /// The upstream from `env` (a lookup, so tests need not touch the process environment)
    /// and an optional host config file, the environment taking precedence field by field.
    pub fn from_sources(
        env: &dyn Fn(&str) -> Option<String>,
        file: Option<&Path>,
    ) -> Result<Option<Upstream>, ConfigError> {
        let file = match file {
            Some(path) => read_host_file(path)?,
            None => HostFile::default(),
        };
        let api = match env("GOLEM_MODEL_API") {
            Some(text) => text.parse()?,
            None => match file.api {
                Some(api) => api,
                None => return Ok(None),
            },
        };
        let key = env("GOLEM_MODEL_KEY")
            .or_else(|| env(api.key_env()))
            .or(file.key)
            .ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "GOLEM_MODEL_API is {} but no key is set (GOLEM_MODEL_KEY or {})",
                    api.as_str(),
                    api.key_env()
                ))
            })?;
        let base = env("GOLEM_MODEL_BASE_URL").or(file.base_url);
        let model = env("GOLEM_MODEL").or(file.model);
        let base = base.as_deref().unwrap_or(api.default_base_url());
        Upstream::new(api, base, ModelKey::new(&key)?, model).map(Some)
    }

    /// The key, for the gateway's forwarder only.
    pub(crate) fn key(&self) -> &ModelKey {
        &self.key
    }

    /// The full URL of the API's one path.
    pub fn endpoint(&self) -> String {
        format!("{}{}", self.base_url, self.api.path())
    }
}

/// Reads the host config file with the project file's ownership rules, and refuses one that
/// holds a key while others can read it.
fn read_host_file(path: &Path) -> Result<HostFile, ConfigError> {
    use std::os::unix::fs::MetadataExt;
    let text = read_owned_file(path)?;
    let shown = path.display().to_string();
    let file: HostFile = crate::policy::parse_yaml(&text, &shown)?;
    if file.key.is_some() {
        let mode = std::fs::symlink_metadata(path)
            .map_err(|source| PolicyError::Read {
                path: path.to_path_buf(),
                source,
            })?
            .mode();
        if mode & 0o077 != 0 {
            return Err(PolicyError::UnsafeProjectFile {
                path: path.to_path_buf(),
                why: format!(
                    "it holds a key and others can read it (mode {:o})",
                    mode & 0o7777
                ),
            }
            .into());
        }
    }
    Ok(file)
}

/// Whether the URL names this machine (`localhost`, 127.0.0.0/8, `::1`): the only place plain
/// http may carry the key, as to a local model server.
pub(super) fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    }
}

/// `http(s)://host[:port][/prefix]` without a trailing `/` or `/v1` (OpenAI-style base URLs end
/// in `/v1`, Anthropic's do not; the API path adds it back).
fn normalise_base_url(url: &str) -> Result<String, ConfigError> {
    // A URL with `user:password@` must not be echoed: the password may be the key.
    let shown = if url.contains('@') {
        "(not shown)"
    } else {
        url
    };
    let bad = |why: &str| ConfigError::Invalid(format!("GOLEM_MODEL_BASE_URL {shown:?} {why}"));
    let parsed = reqwest::Url::parse(url.trim()).map_err(|_| bad("is not a URL"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(bad("must be an http or https URL with a host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad("must not carry credentials (use GOLEM_MODEL_KEY)"));
    }
    if parsed.scheme() == "http" && !is_loopback(&parsed) {
        return Err(bad(
            "uses plain http to a host that is not this machine: the key would cross the network in clear; use https",
        ));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad("must not have a query or fragment"));
    }
    let mut s = parsed.as_str().trim_end_matches('/').to_string();
    if let Some(stripped) = s.strip_suffix("/v1") {
        s = stripped.to_string();
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::os::unix::fs::PermissionsExt;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn the_environment_configures_the_upstream_and_the_key_never_prints() {
        let env = env_of(&[
            ("GOLEM_MODEL_API", "openai"),
            ("GOLEM_MODEL_BASE_URL", "http://127.0.0.1:8080/v1/"),
            ("OPENAI_API_KEY", "sk-secret-value"),
            ("GOLEM_MODEL", "llama3.1:8b"),
        ]);
        let up = Upstream::from_sources(&env, None).unwrap().unwrap();
        assert_eq!(up.api, ModelApi::Openai);
        assert_eq!(up.endpoint(), "http://127.0.0.1:8080/v1/chat/completions");
        assert_eq!(up.default_model.as_deref(), Some("llama3.1:8b"));
        assert_eq!(up.key().expose(), "sk-secret-value");
        let shown = format!("{up:?} {:?}", up.key());
        assert!(!shown.contains("sk-secret"), "{shown}");
        // GOLEM_MODEL_KEY wins over the provider's variable.
        let env = env_of(&[
            ("GOLEM_MODEL_API", "anthropic"),
            ("GOLEM_MODEL_KEY", "k1"),
            ("ANTHROPIC_API_KEY", "k2"),
        ]);
        let up = Upstream::from_sources(&env, None).unwrap().unwrap();
        assert_eq!(up.key().expose(), "k1");
        assert_eq!(up.endpoint(), "https://api.anthropic.com/v1/messages");
    }

    #[test]
    fn nothing_configured_means_no_upstream_and_half_configured_is_an_error() {
        assert!(Upstream::from_sources(&env_of(&[]), None)
            .unwrap()
            .is_none());
        for pairs in [
            vec![("GOLEM_MODEL_API", "anthropic")],
            vec![("GOLEM_MODEL_API", "gemini"), ("GOLEM_MODEL_KEY", "k")],
            vec![
                ("GOLEM_MODEL_API", "openai"),
                ("GOLEM_MODEL_KEY", "k"),
                ("GOLEM_MODEL_BASE_URL", "file:///etc/passwd"),
            ],
            vec![
                ("GOLEM_MODEL_API", "openai"),
                ("GOLEM_MODEL_KEY", "k"),
                ("GOLEM_MODEL_BASE_URL", "http://user:pw@host"),
            ],
            vec![("GOLEM_MODEL_API", "openai"), ("GOLEM_MODEL_KEY", "a b")],
            vec![
                ("GOLEM_MODEL_API", "openai"),
                ("GOLEM_MODEL_KEY", "k"),
                ("GOLEM_MODEL_BASE_URL", "http://models.example.com/v1"),
            ],
            vec![
                ("GOLEM_MODEL_API", "openai"),
                ("GOLEM_MODEL_KEY", "k"),
                ("GOLEM_MODEL_BASE_URL", "http://10.0.0.5:8080"),
            ],
        ] {
            let err = Upstream::from_sources(&env_of(&pairs), None).unwrap_err();
            let shown = err.to_string();
            assert!(!shown.contains("a b") && !shown.contains("pw"), "{shown}");
        }
    }

    #[test]
    fn the_host_file_fills_gaps_and_is_refused_when_others_could_write_or_read_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let path = dir.path().join("model.yaml");
        std::fs::write(&path, "api: anthropic\nkey: sk-file\nmodel: claude-x\n").unwrap();
        let mode = |m| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m));
        mode(0o600).unwrap();
        let env = env_of(&[("GOLEM_MODEL", "claude-y")]);
        let up = Upstream::from_sources(&env, Some(&path)).unwrap().unwrap();
        assert_eq!(up.api, ModelApi::Anthropic);
        assert_eq!(up.key().expose(), "sk-file");
        assert_eq!(up.default_model.as_deref(), Some("claude-y"));
        mode(0o644).unwrap();
        let err = Upstream::from_sources(&env, Some(&path)).unwrap_err();
        assert!(err.to_string().contains("others can read it"), "{err}");
        mode(0o622).unwrap();
        assert!(Upstream::from_sources(&env, Some(&path)).is_err());
        mode(0o600).unwrap();
        std::fs::write(&path, "api: openai\nkey: k\nupstream: http://x\n").unwrap();
        assert!(Upstream::from_sources(&env, Some(&path)).is_err());
        let env = env_of(&[("XDG_CONFIG_HOME", "/cfg"), ("HOME", "/home/p")]);
        assert_eq!(
            host_config_path(&env),
            Some(PathBuf::from("/cfg/golem-orch/model.yaml"))
        );
        let env = env_of(&[("HOME", "/home/p")]);
        assert_eq!(
            host_config_path(&env),
            Some(PathBuf::from("/home/p/.config/golem-orch/model.yaml"))
        );
    }

    #[test]
    fn plain_http_carries_the_key_only_to_this_machine() {
        for (url, ok) in [
            ("http://localhost:8080", true),
            ("http://127.0.0.2:9", true),
            ("http://[::1]:8080/v1", true),
            ("https://models.example.com", true),
            ("http://models.example.com", false),
            ("http://localhost.example.com", false),
            ("http://192.168.1.10:11434", false),
            ("http://[::ffff:10.0.0.1]", false),
        ] {
            assert_eq!(normalise_base_url(url).is_ok(), ok, "{url}");
        }
    }
}
