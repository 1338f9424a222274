//! Worker definitions: `workers/*.worker` files naming an image, a command, the trust level it
//! needs, and instructions.
//!
//! A definition can only narrow what its trust level's policy allows: asking for a mount the
//! level does not grant is an error that names the mount, and output limits may only go down.
//! The body after the YAML front matter is handed to the worker read-only at
//! `/task/instructions.md`, so instructions travel with the worker, not with the input.
//!
//! `model: true` asks for the host's model gateway (an AI worker such as the built-in `agent`);
//! `model: {allow: [...], max_output_tokens: ...}` asks for it and narrows the level's `model:`
//! section too. Either way a definition can only ask for *less* than the level grants: the
//! upstream and the key are never in a definition, so a cloned repository's worker cannot point
//! the gateway anywhere or learn the key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::policy::Policy;
use crate::policy::{self, Access, Location, ModelNarrowing, MountsNarrowing, Narrowing, Origin};
use crate::policy::{PolicyError, TrustLevel};

/// Output limits a definition may lower: the output part of the one [`Narrowing`], re-exported
/// here because a definition's `output:` section is where most people meet it.
pub use crate::policy::OutputNarrowing;

/// The image name that means "golem-orch's own worker image".
pub const BUILTIN_IMAGE: &str = "golem-worker";
/// Where a definition's body appears in the container.
pub const INSTRUCTIONS_TARGET: &str = "/task";

/// Shipped definitions, compiled in.
const BUILTIN: [(&str, &str); 3] = [
    (
        "builtin:workers/report.worker",
        include_str!("../../workers/report.worker"),
    ),
    (
        "builtin:workers/text.worker",
        include_str!("../../workers/text.worker"),
    ),
    (
        "builtin:workers/agent.worker",
        include_str!("../../workers/agent.worker"),
    ),
];

/// The front matter of a `.worker` file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct FrontMatter {
    name: String,
    description: String,
    image: String,
    #[serde(default)]
    command: Vec<String>,
    trust: TrustLevel,
    #[serde(default)]
    mounts: BTreeMap<String, Access>,
    #[serde(default)]
    output: OutputNarrowing,
    #[serde(default)]
    model: ModelAsk,
}

/// A definition's `model:` key: `false` (the default: no gateway), `true` (the level's model
/// access as it is), or a narrowing of the level's `model:` section, which also asks for access.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ModelAsk {
    /// `model: true` or `model: false`.
    Flag(bool),
    /// `model: {allow: [...], max_output_tokens: ...}`: access, narrowed by the one rule set.
    Narrowed(ModelNarrowing),
}

impl Default for ModelAsk {
    /// No `model:` key: no model access.
    fn default() -> Self {
        ModelAsk::Flag(false)
    }
}

impl<'de> Deserialize<'de> for ModelAsk {
    /// By hand rather than `untagged`, so a misspelt key inside `model:` is reported by name
    /// (the narrowing denies unknown fields) instead of as "no variant matched".
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = ModelAsk;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("true, false, or a map narrowing the level's model section")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<ModelAsk, E> {
                Ok(ModelAsk::Flag(v))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<ModelAsk, A::Error> {
                let d = serde::de::value::MapAccessDeserializer::new(map);
                ModelNarrowing::deserialize(d).map(ModelAsk::Narrowed)
            }
        }
        d.deserialize_any(Visit)
    }
}

impl ModelAsk {
    /// Whether the worker asks for the model gateway at all.
    pub fn wanted(&self) -> bool {
        matches!(self, ModelAsk::Flag(true) | ModelAsk::Narrowed(_))
    }
}

/// A loaded worker definition.
#[derive(Debug, Clone, Serialize)]
pub struct Definition {
    /// Name used with `run --worker`.
    pub name: String,
    /// One line for `golem-orch workers`.
    pub description: String,
    /// `golem-worker` or a local image reference.
    pub image: String,
    /// Arguments for the image.
    pub command: Vec<String>,
    /// The trust level it needs.
    pub trust: TrustLevel,
    /// Mounts it asks for (`input`, `workspace`, `repo`); absent means "what the level grants".
    pub mounts: BTreeMap<String, Access>,
    /// Output limits it lowers.
    pub output: OutputNarrowing,
    /// Whether it asks for the host's model gateway, and how it narrows the level's `model:`.
    pub model: ModelAsk,
    /// Instructions for the worker.
    pub instructions: String,
    /// Where it was loaded from.
    pub source: String,
}

impl Definition {
    /// Parses a `.worker` file: `---`, YAML front matter, `---`, then the instructions.
    pub fn parse(text: &str, file: &str) -> Result<Definition, PolicyError> {
        let invalid = |line: Option<usize>, message: String| PolicyError::Invalid {
            at: Location {
                file: file.to_string(),
                line_col: line.map(|l| (l, 1)),
            },
            message,
        };
        let rest = text.strip_prefix("---\n").ok_or_else(|| {
            invalid(
                Some(1),
                "a worker file starts with a line of three dashes (---)".into(),
            )
        })?;
        let end = rest
            .find("\n---\n")
            .map(|i| (i, i + 5))
            .or_else(|| rest.strip_suffix("\n---").map(|r| (r.len(), rest.len())))
            .ok_or_else(|| {
                invalid(
                    None,
                    "the front matter is not closed by a line of three dashes (---)".into(),
                )
            })?;
        let yaml = &rest[..end.0];
        let body = rest[end.1..].trim().to_string();
        let front: FrontMatter = policy::parse_yaml(yaml, file).map_err(|e| match e {
            // The YAML starts on line 2 of the file.
            PolicyError::Invalid { at, message } => PolicyError::Invalid {
                at: Location {
                    file: at.file,
                    line_col: at.line_col.map(|(l, c)| (l + 1, c)),
                },
                message,
            },
            other => other,
        })?;
        let locate = |key: &str| policy::locate(yaml, &[key]).map(|(l, _)| l + 1);
        if front.name.is_empty()
            || !front
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c))
        {
            return Err(invalid(
                locate("name"),
                format!("name {:?} must be letters, digits, - and _", front.name),
            ));
        }
        if front.image.trim().is_empty() {
            return Err(invalid(
                locate("image"),
                "image must name golem-worker or a local image".into(),
            ));
        }
        if let Err(message) = mount_narrowing(&front.mounts) {
            return Err(invalid(locate("mounts"), message));
        }
        Ok(Definition {
            name: front.name,
            description: front.description,
            image: front.image,
            command: front.command,
            trust: front.trust,
            mounts: front.mounts,
            output: front.output,
            model: front.model,
            instructions: body,
            source: file.to_string(),
        })
    }

    /// Whether the worker asks for the host's model gateway (`model:` in its front matter).
    pub fn wants_model(&self) -> bool {
        self.model.wanted()
    }

    /// Whether the worker runs golem-orch's own image.
    pub fn is_builtin_image(&self) -> bool {
        self.image == BUILTIN_IMAGE
    }

    /// Narrows `policy` (already at the run's trust level) to what this worker asks for, by the
    /// same rules as `golem.yaml` and the run flags ([`Policy::narrow`]). Asking for more than
    /// the level grants is an error naming the mount or limit.
    pub fn narrow(&self, policy: &mut Policy) -> Result<(), PolicyError> {
        let invalid = |message: String| PolicyError::Invalid {
            at: Location {
                file: self.source.clone(),
                line_col: None,
            },
            message,
        };
        if policy.level < self.trust {
            return Err(invalid(format!(
                "worker {} needs trust level {} but the run is {}",
                self.name, self.trust, policy.level
            )));
        }
        let narrowing = Narrowing {
            mounts: Some(mount_narrowing(&self.mounts).map_err(invalid)?),
            output: Some(self.output.clone()),
            model: match &self.model {
                ModelAsk::Narrowed(m) => Some(m.clone()),
                _ => None,
            },
            ..Narrowing::default()
        };
        policy.narrow(&narrowing, Origin::Worker { file: &self.source })
    }
}

/// A definition's `mounts:` map as the mount part of a [`Narrowing`]; an unknown name is an
/// error, never ignored, so a typo cannot leave a mount wider than the author meant.
fn mount_narrowing(mounts: &BTreeMap<String, Access>) -> Result<MountsNarrowing, String> {
    let mut n = MountsNarrowing::default();
    for (name, access) in mounts {
        let slot = match name.as_str() {
            "input" => &mut n.input,
            "workspace" => &mut n.workspace,
            "repo" => &mut n.repo,
            _ => {
                return Err(format!(
                    "unknown mount {name:?} (expected input, workspace or repo)"
                ))
            }
        };
        *slot = Some(*access);
    }
    Ok(n)
}

/// Loads the built-in definitions and then every `*.worker` in `dir` (a project's `workers/`).
/// A project definition may not reuse a built-in's name.
pub fn load_all(dir: Option<&Path>) -> Result<Vec<Definition>, PolicyError> {
    let mut defs: Vec<Definition> = BUILTIN
        .iter()
        .map(|(file, text)| Definition::parse(text, file))
        .collect::<Result<_, _>>()?;
    if let Some(dir) = dir.filter(|d| d.is_dir()) {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|source| PolicyError::Read {
                path: dir.to_path_buf(),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "worker"))
            .collect();
        paths.sort();
        for path in paths {
            let text = std::fs::read_to_string(&path).map_err(|source| PolicyError::Read {
                path: path.clone(),
                source,
            })?;
            let def = Definition::parse(&text, &path.display().to_string())?;
            if let Some(taken) = defs.iter().find(|d| d.name == def.name) {
                // A repository must not be able to change what a plain `golem-orch run` does.
                return Err(PolicyError::Invalid {
                    at: Location {
                        file: def.source.clone(),
                        line_col: None,
                    },
                    message: format!(
                        "the name {:?} is already taken by {}; choose another",
                        def.name, taken.source
                    ),
                });
            }
            defs.push(def);
        }
    }
    Ok(defs)
}

/// Finds one definition by name.
pub fn find(dir: Option<&Path>, name: &str) -> Result<Definition, PolicyError> {
    let all = load_all(dir)?;
    let names: Vec<String> = all.iter().map(|d| d.name.clone()).collect();
    all.into_iter()
        .find(|d| d.name == name)
        .ok_or_else(|| PolicyError::Invalid {
            at: Location {
                file: "--worker".into(),
                line_col: None,
            },
            message: format!("no worker named {name:?} (available: {})", names.join(", ")),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(level: TrustLevel) -> Policy {
        policy::load(level, None, None).unwrap().policy
    }

    #[test]
    fn builtins_load() {
        let all = load_all(None).unwrap();
        let names: Vec<&str> = all.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["report", "text", "agent"]);
        assert!(all
            .iter()
            .all(|d| d.is_builtin_image() && d.trust == TrustLevel::Untrusted));
        assert!(all[0].instructions.contains("/input"));
        // Only the AI worker asks for the model gateway.
        let wants: Vec<bool> = all.iter().map(Definition::wants_model).collect();
        assert_eq!(wants, [false, false, true]);
        assert_eq!(all[2].command, ["agent"]);
    }

    #[test]
    fn mounts_can_only_narrow_and_errors_name_the_mount() {
        let text = "---\nname: reader\ndescription: d\nimage: golem-worker\ntrust: workspace\nmounts:\n  repo: rw\n---\nbody\n";
        let def = Definition::parse(text, "reader.worker").unwrap();
        let err = def
            .narrow(&mut policy(TrustLevel::Workspace))
            .unwrap_err()
            .to_string();
        assert!(err.contains("mounts.repo") && err.contains("rw"), "{err}");
        let mut full = policy(TrustLevel::Full);
        def.narrow(&mut full).unwrap();
        assert_eq!(full.mounts.repo, Access::Rw);
        let ro =
            Definition::parse(&text.replace("repo: rw", "workspace: none"), "r.worker").unwrap();
        let mut p = policy(TrustLevel::Workspace);
        ro.narrow(&mut p).unwrap();
        assert_eq!(p.mounts.workspace, Access::None);
        let err = def
            .narrow(&mut policy(TrustLevel::Untrusted))
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs trust level workspace"), "{err}");
    }

    #[test]
    fn output_limits_only_go_down() {
        let text = "---\nname: w\ndescription: d\nimage: golem-worker\ntrust: untrusted\noutput:\n  max_files: 100000\n---\n";
        let def = Definition::parse(text, "w.worker").unwrap();
        assert!(def.narrow(&mut policy(TrustLevel::Untrusted)).is_err());
        let def = Definition::parse(&text.replace("100000", "3"), "w.worker").unwrap();
        let mut p = policy(TrustLevel::Untrusted);
        def.narrow(&mut p).unwrap();
        assert_eq!(p.output.max_files, 3);
    }

    #[test]
    fn malformed_files_are_located() {
        let err = Definition::parse("name: x\n", "a.worker")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("a.worker:1:"), "{err}");
        let err = Definition::parse("---\nname: x\n", "b.worker")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not closed"), "{err}");
        let err = Definition::parse(
            "---\nname: x\ndescription: d\nimage: i\ntrust: untrusted\nimgae: y\n---\n",
            "c.worker",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("c.worker:6:") && err.contains("imgae"),
            "{err}"
        );
        let err = Definition::parse(
            "---\nname: x\ndescription: d\nimage: i\ntrust: godlike\n---\n",
            "d.worker",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("d.worker:5:") && err.contains("godlike"),
            "{err}"
        );
        let err = Definition::parse(
            "---\nname: x\ndescription: d\nimage: i\ntrust: full\nmounts:\n  etc: ro\n---\n",
            "e.worker",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("unknown mount"), "{err}");
    }

    #[test]
    fn project_definitions_join_but_cannot_replace_builtins() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("mine.worker"), "---\nname: mine\ndescription: d\nimage: my:img\ncommand: [go]\ntrust: session\n---\nDo it.\n").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        let all = load_all(Some(dir.path())).unwrap();
        assert_eq!(all.len(), 4);
        assert_eq!(
            find(Some(dir.path()), "mine").unwrap().instructions,
            "Do it."
        );
        assert!(find(Some(dir.path()), "nope")
            .unwrap_err()
            .to_string()
            .contains("available"));
        // A cloned repository must not be able to redefine the default worker.
        std::fs::write(
            dir.path().join("report.worker"),
            "---\nname: report\ndescription: evil\nimage: evil:img\ntrust: full\n---\n",
        )
        .unwrap();
        let err = load_all(Some(dir.path())).unwrap_err().to_string();
        assert!(err.contains("already taken"), "{err}");
    }

    const MODEL_WORKER: &str =
        "---\nname: m\ndescription: d\nimage: golem-worker\ntrust: untrusted\nMODEL---\nDo it.\n";

    fn with_model(model: &str) -> Result<Definition, PolicyError> {
        Definition::parse(&MODEL_WORKER.replace("MODEL", model), "m.worker")
    }

    #[test]
    fn model_access_is_asked_for_and_parsed_strictly() {
        assert!(!with_model("").unwrap().wants_model());
        assert!(!with_model("model: false\n").unwrap().wants_model());
        assert!(with_model("model: true\n").unwrap().wants_model());
        let narrowed = with_model("model:\n  max_requests: 3\n").unwrap();
        assert!(narrowed.wants_model());
        // A misspelt key inside model: is an error naming it, never ignored.
        let err = with_model("model:\n  max_request: 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_request"), "{err}");
        // The upstream and the key are nothing a definition can say.
        for evil in [
            "model:\n  base_url: http://evil\n",
            "model:\n  key: sk-x\n",
            "model: yes please\n",
        ] {
            assert!(with_model(evil).is_err(), "{evil}");
        }
    }

    #[test]
    fn a_definition_narrows_model_access_through_the_one_rule_set() {
        let def = with_model("model:\n  allow: []\n  max_output_tokens: 100\n").unwrap();
        let mut p = policy(TrustLevel::Untrusted);
        def.narrow(&mut p).unwrap();
        assert!(p.model.allow.is_empty() && p.model.max_output_tokens == 100);
        // Budgets only go down, and the allowlist only loses names.
        for widen in [
            "model:\n  max_output_tokens: 100000000\n",
            "model:\n  allow: [gpt-4o]\n",
        ] {
            let err = with_model(widen)
                .unwrap()
                .narrow(&mut policy(TrustLevel::Untrusted))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("may only narrow") && err.contains("model."),
                "{err}"
            );
        }
        // model: true narrows nothing.
        let mut p = policy(TrustLevel::Untrusted);
        with_model("model: true\n").unwrap().narrow(&mut p).unwrap();
        assert_eq!(p, policy(TrustLevel::Untrusted));
    }
}
