//! Build mode, as voodu documents it: a workload with `build { context
//! dockerfile args }` instead of `image` runs an image the controller
//! builds from the context `vd apply` sends. The image is tagged by the
//! context's content, `voodu/<scope>-<name>:<digest>`, so an unchanged
//! context reuses the image and a changed one rolls the replicas.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::WorkloadId;

/// A workload's `build` block, and what it built.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Build {
    /// The directory sent as the build context, relative to where `vd
    /// apply` runs (default `.`).
    pub context: String,
    /// The Dockerfile, within the context (default `Dockerfile`).
    pub dockerfile: String,
    /// `--build-arg`s.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, String>,
    /// What a language handler builds (Go's `go build ./<path>`), when the
    /// context has no Dockerfile; a Dockerfile of the context ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The `lang` block: which handler writes the Dockerfile when the
    /// context has none, at which version, running what.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lang: Option<crate::lang::Lang>,
    /// Not written: the workload names no image and has no `build` block,
    /// so, as voodu does, it is built from `.`, the directory `vd apply`
    /// runs in.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub implied: bool,
    /// The handler that wrote the Dockerfile it was built with, when the
    /// context had none; set at apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<crate::lang::LangName>,
    /// The SHA-256 of the context as sent, with the Dockerfile's name and
    /// the arguments; set at apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// In a cluster, the node that took the apply and built the image: it
    /// keeps the context (made ready to build, see [`Build::as_built`]),
    /// and another node that is to run the image and lacks it fetches the
    /// context from it and builds the same image; set at apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_by: Option<String>,
}

impl Default for Build {
    fn default() -> Self {
        Build {
            context: ".".to_owned(),
            dockerfile: "Dockerfile".to_owned(),
            args: BTreeMap::new(),
            path: None,
            lang: None,
            implied: false,
            handler: None,
            digest: None,
            kept_by: None,
        }
    }
}

impl Build {
    /// The digest of a build of `archive` (the context's tar) with this
    /// block's Dockerfile and arguments: equal inputs, equal digest.
    pub fn digest_of(&self, archive: &[u8]) -> String {
        let mut hasher = Sha256::new();
        hasher.update(archive);
        hasher.update(b"\0dockerfile\0");
        hasher.update(self.dockerfile.as_bytes());
        for (key, value) in &self.args {
            hasher.update(b"\0arg\0");
            hasher.update(key.as_bytes());
            hasher.update(b"=");
            hasher.update(value.as_bytes());
        }
        hex::encode(hasher.finalize())
    }

    /// The build as it runs on its context made ready: a handler's
    /// Dockerfile is the one added as [`GENERATED_DOCKERFILE`]. Its
    /// [`Build::digest_of`] the ready context is [`Build::digest`].
    pub fn as_built(&self) -> Build {
        match self.handler {
            Some(_) => Build {
                dockerfile: GENERATED_DOCKERFILE.to_owned(),
                ..self.clone()
            },
            None => self.clone(),
        }
    }
}

/// A build context's digest as it travels between nodes and names the file
/// a node keeps the context in: 64 lowercase hexadecimal digits, checked
/// where it is read, so it never names a path outside the node's
/// directory of contexts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ContextDigest(String);

impl ContextDigest {
    /// The digest in hexadecimal.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ContextDigest {
    type Error = String;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        if text.len() == 64
            && text
                .bytes()
                .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
        {
            Ok(ContextDigest(text))
        } else {
            Err(format!(
                "{text:?} is no context digest (64 lowercase hexadecimal digits)"
            ))
        }
    }
}

impl From<ContextDigest> for String {
    fn from(digest: ContextDigest) -> String {
        digest.0
    }
}

impl std::fmt::Display for ContextDigest {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.0)
    }
}

/// The name a handler's Dockerfile is added to the context as, when the
/// context has no Dockerfile of its own.
pub const GENERATED_DOCKERFILE: &str = ".voodu.Dockerfile";

/// The tag of the image built for `workload` from a context of `digest`:
/// `voodu/<scope>-<name>:<first 12 of the digest>`.
pub fn image_tag(workload: &WorkloadId, digest: &str) -> String {
    format!(
        "voodu/{}-{}:{}",
        workload.scope,
        workload.name,
        &digest[..digest.len().min(12)]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use voodu_plugin_abi::messages::WorkloadKind;

    #[test]
    fn the_digest_follows_the_context_the_dockerfile_and_the_arguments() {
        let build = Build::default();
        let same = build.digest_of(b"context");
        assert_eq!(same, build.digest_of(b"context"));
        assert_ne!(same, build.digest_of(b"context, changed"));
        let other_file = Build {
            dockerfile: "Dockerfile.prod".into(),
            ..Build::default()
        };
        assert_ne!(same, other_file.digest_of(b"context"));
        let with_args = Build {
            args: BTreeMap::from([("RELEASE".into(), "v1".into())]),
            ..Build::default()
        };
        assert_ne!(same, with_args.digest_of(b"context"));
        let api = WorkloadId::new(WorkloadKind::Deployment, "prod", "api");
        assert_eq!(
            image_tag(&api, &same),
            format!("voodu/prod-api:{}", &same[..12])
        );
    }

    #[test]
    fn a_context_digest_is_64_lowercase_hex_digits_and_nothing_else() {
        let digest = Build::default().digest_of(b"context");
        let parsed = ContextDigest::try_from(digest.clone()).unwrap();
        assert_eq!(parsed.as_str(), digest);
        for wrong in [
            "../../etc/passwd",
            "",
            &digest[..63],
            &digest.to_uppercase(),
        ] {
            assert!(
                ContextDigest::try_from(wrong.to_owned()).is_err(),
                "{wrong}"
            );
        }
        let json = serde_json::to_string(&parsed).unwrap();
        assert_eq!(
            serde_json::from_str::<ContextDigest>(&json).unwrap(),
            parsed
        );
        assert!(serde_json::from_str::<ContextDigest>("\"a/b\"").is_err());
    }
}
