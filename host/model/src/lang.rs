//! voodu's language handlers (its `build.mdx`): a build whose context has
//! no Dockerfile is built from one a handler writes for the language the
//! context is in, named by `lang { name }` or found from its marker files
//! (`go.mod`, `package.json`, `requirements.txt`, `pyproject.toml`,
//! `config/application.rb`, `Gemfile`). Each handler's base images are the
//! controller's settings (`vd controller --build-base go=IMAGE`), so an
//! operator can point them at a local or private image; `{version}` in a
//! setting is the `lang { version }` (or the handler's default).
//!
//! The Dockerfiles need no BuildKit (the engine API's classic builder
//! builds them).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// A language handler, as voodu names them in `lang { name }`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::EnumString,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum LangName {
    /// Go: `go build` in the builder image, the binary alone in the
    /// runtime image.
    #[strum(serialize = "go", serialize = "golang")]
    Go,
    /// Node.js: `npm ci` (or `npm install`), then `npm start`.
    #[strum(serialize = "nodejs", serialize = "node")]
    Nodejs,
    /// Python: `pip install` of `requirements.txt` (or the project).
    Python,
    /// Ruby: `bundle install`.
    Ruby,
    /// Rails: `bundle install`, then `rails server`.
    Rails,
}

impl LangName {
    /// Every handler, in the order voodu lists them.
    pub const ALL: &[LangName] = &[
        LangName::Go,
        LangName::Nodejs,
        LangName::Python,
        LangName::Ruby,
        LangName::Rails,
    ];

    /// The name as voodu writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            LangName::Go => "go",
            LangName::Nodejs => "nodejs",
            LangName::Python => "python",
            LangName::Ruby => "ruby",
            LangName::Rails => "rails",
        }
    }

    /// The version a base image is given when `lang { version }` names
    /// none.
    pub fn default_version(self) -> &'static str {
        match self {
            LangName::Go => "1.25",
            LangName::Nodejs => "22",
            LangName::Python => "3.12",
            LangName::Ruby | LangName::Rails => "3.3",
        }
    }
}

/// A build's `lang { name version entrypoint }` block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lang {
    /// The handler; `None`: found from the context's marker files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<LangName>,
    /// The version its base image is given (`{version}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The command the image runs, instead of the handler's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entrypoint: Vec<String>,
}

/// The marker files each handler is found by, in the order voodu looks.
pub const MARKERS: &[(&str, LangName)] = &[
    ("go.mod", LangName::Go),
    ("package.json", LangName::Nodejs),
    ("requirements.txt", LangName::Python),
    ("pyproject.toml", LangName::Python),
    ("config/application.rb", LangName::Rails),
    ("Gemfile", LangName::Ruby),
];

/// The handler for a context holding `files` (paths relative to it), by
/// its first marker file at its top.
pub fn detect(files: &BTreeSet<String>) -> Option<LangName> {
    MARKERS
        .iter()
        .find(|(marker, _)| files.contains(*marker))
        .map(|(_, lang)| *lang)
}

/// The handlers' base images: the builder image of each handler (key:
/// its name) and Go's runtime image (key `go-runtime`), each with
/// `{version}` in place of the version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseImages(BTreeMap<String, String>);

impl Default for BaseImages {
    fn default() -> Self {
        BaseImages(BTreeMap::from(
            [
                ("go", "golang:{version}-alpine"),
                ("go-runtime", "alpine:3.20"),
                ("nodejs", "node:{version}-alpine"),
                ("python", "python:{version}-slim"),
                ("ruby", "ruby:{version}-slim"),
                ("rails", "ruby:{version}-slim"),
            ]
            .map(|(key, image)| (key.to_owned(), image.to_owned())),
        ))
    }
}

impl BaseImages {
    /// The keys a setting may name.
    pub const KEYS: &[&str] = &["go", "go-runtime", "nodejs", "python", "ruby", "rails"];

    /// The defaults with `settings` (`KEY=IMAGE`, as `--build-base`
    /// writes them) laid over them.
    pub fn with_settings(settings: &[String]) -> Result<BaseImages, String> {
        let mut bases = BaseImages::default();
        for setting in settings {
            let Some((key, image)) = setting.split_once('=') else {
                return Err(format!(
                    "--build-base {setting:?} is not KEY=IMAGE — write --build-base go=registry.local/golang:{{version}}-alpine"
                ));
            };
            if !Self::KEYS.contains(&key) || image.trim().is_empty() {
                return Err(format!(
                    "--build-base {setting:?}: the key is one of {} and the image is not empty",
                    Self::KEYS.join(", ")
                ));
            }
            bases.0.insert(key.to_owned(), image.to_owned());
        }
        Ok(bases)
    }

    /// The settings that differ from the defaults, as `KEY=IMAGE`.
    pub fn settings(&self) -> Vec<String> {
        let defaults = BaseImages::default();
        self.0
            .iter()
            .filter(|(key, image)| defaults.0.get(*key) != Some(*image))
            .map(|(key, image)| format!("{key}={image}"))
            .collect()
    }

    fn image(&self, key: &str, version: &str) -> String {
        self.0
            .get(key)
            .map(|image| image.replace("{version}", version))
            .unwrap_or_default()
    }
}

/// What a handler writes a Dockerfile for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    /// The handler.
    pub lang: LangName,
    /// The Dockerfile.
    pub dockerfile: String,
}

/// The Dockerfile `lang`'s handler writes for a context: `path` is what Go
/// builds (`./cmd/api`; default the context's top), `version` the base
/// image's, `entrypoint` the command instead of the handler's.
pub fn dockerfile(
    lang: LangName,
    settings: &Lang,
    path: Option<&str>,
    bases: &BaseImages,
) -> Generated {
    let version = settings
        .version
        .as_deref()
        .unwrap_or_else(|| lang.default_version());
    let command = |default: &[&str]| {
        let words: Vec<String> = if settings.entrypoint.is_empty() {
            default.iter().map(|word| (*word).to_owned()).collect()
        } else {
            settings.entrypoint.clone()
        };
        serde_json::to_string(&words).unwrap_or_else(|_| "[]".to_owned())
    };
    let builder = bases.image(lang.as_str(), version);
    let body = match lang {
        LangName::Go => {
            let path = path
                .map(|path| format!("./{}", path.trim_start_matches("./")))
                .unwrap_or_else(|| ".".to_owned());
            format!(
                "FROM {builder} AS build\nWORKDIR /src\nCOPY . .\nRUN go mod download && CGO_ENABLED=0 GOOS=linux go build -ldflags=\"-w -s\" -o /out/app {path}\n\nFROM {runtime}\nCOPY --from=build /out/app /app\nCMD {command}\n",
                runtime = bases.image("go-runtime", version),
                command = command(&["/app"]),
            )
        }
        LangName::Nodejs => format!(
            "FROM {builder}\nWORKDIR /app\nCOPY . .\nRUN if [ -f package-lock.json ]; then npm ci --omit=dev; else npm install --omit=dev; fi\nENV NODE_ENV=production\nCMD {}\n",
            command(&["npm", "start"])
        ),
        LangName::Python => format!(
            "FROM {builder}\nWORKDIR /app\nCOPY . .\nRUN if [ -f requirements.txt ]; then pip install --no-cache-dir -r requirements.txt; else pip install --no-cache-dir .; fi\nENV PYTHONUNBUFFERED=1\nCMD {}\n",
            command(&["python", "app.py"])
        ),
        LangName::Ruby => format!(
            "FROM {builder}\nWORKDIR /app\nCOPY . .\nRUN bundle config set --local without 'development test' && bundle install\nCMD {}\n",
            command(&["bundle", "exec", "ruby", "app.rb"])
        ),
        LangName::Rails => format!(
            "FROM {builder}\nWORKDIR /app\nCOPY . .\nENV RAILS_ENV=production RAILS_LOG_TO_STDOUT=1\nRUN bundle config set --local without 'development test' && bundle install\nCMD {}\n",
            command(&["bundle", "exec", "rails", "server", "-b", "0.0.0.0"])
        ),
    };
    Generated {
        lang,
        dockerfile: format!(
            "# Written by voodu's {} handler (no Dockerfile in the context).\n{body}",
            lang.as_str()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_s_marker_files_name_its_handler_in_voodu_s_order() {
        let files = |names: &[&str]| names.iter().map(|name| (*name).to_owned()).collect();
        assert_eq!(detect(&files(&["go.mod", "main.go"])), Some(LangName::Go));
        assert_eq!(
            detect(&files(&["Gemfile", "config/application.rb"])),
            Some(LangName::Rails)
        );
        assert_eq!(detect(&files(&["Gemfile"])), Some(LangName::Ruby));
        assert_eq!(detect(&files(&["pyproject.toml"])), Some(LangName::Python));
        assert_eq!(detect(&files(&["README.md"])), None);
        assert_eq!("golang".parse::<LangName>(), Ok(LangName::Go));
        assert_eq!("node".parse::<LangName>(), Ok(LangName::Nodejs));
        for lang in LangName::ALL {
            assert_eq!(lang.as_str().parse::<LangName>(), Ok(*lang));
            assert!(BaseImages::KEYS.contains(&lang.as_str()), "{lang:?}");
        }
    }

    #[test]
    fn a_handler_writes_its_dockerfile_from_the_settings_version_path_and_entrypoint() {
        let bases = BaseImages::with_settings(&[
            "go=registry.local/golang:{version}".to_owned(),
            "go-runtime=scratch".to_owned(),
        ])
        .unwrap();
        let go = dockerfile(
            LangName::Go,
            &Lang {
                name: Some(LangName::Go),
                version: Some("1.24".into()),
                entrypoint: vec!["/app".into(), "serve".into()],
            },
            Some("cmd/api"),
            &bases,
        );
        assert!(
            go.dockerfile
                .contains("FROM registry.local/golang:1.24 AS build"),
            "{}",
            go.dockerfile
        );
        assert!(
            go.dockerfile.contains("-o /out/app ./cmd/api"),
            "{}",
            go.dockerfile
        );
        assert!(
            go.dockerfile.contains("FROM scratch\n"),
            "{}",
            go.dockerfile
        );
        assert!(
            go.dockerfile.contains("CMD [\"/app\",\"serve\"]"),
            "{}",
            go.dockerfile
        );
        let node = dockerfile(
            LangName::Nodejs,
            &Lang::default(),
            None,
            &BaseImages::default(),
        );
        assert!(
            node.dockerfile.contains("FROM node:22-alpine"),
            "{}",
            node.dockerfile
        );
        assert_eq!(
            bases.settings(),
            ["go=registry.local/golang:{version}", "go-runtime=scratch"]
        );
        let wrong = BaseImages::with_settings(&["java=openjdk".to_owned()]).unwrap_err();
        assert!(
            wrong.contains("the key is one of go, go-runtime"),
            "{wrong}"
        );
    }
}
