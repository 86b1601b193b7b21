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
}
