//! A build's context made ready to build: when it holds the Dockerfile
//! its `build` block names, as it is; when it holds none (and the block
//! names the default `Dockerfile`), with the Dockerfile a language
//! handler writes (`voodu_model::lang`) added as
//! [`GENERATED_DOCKERFILE`], for the language `lang { name }` names or
//! its marker files show. `vd apply --dry-run` runs this too, building
//! nothing.
//!
//! In a cluster, the node that builds keeps each context it built, made
//! ready, under `<root>/contexts/<digest>.tar` ([`keep`]); another node
//! that is to run the image fetches it from there over the node-to-node
//! channel ([`kept`] answers it) and builds the same image.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use voodu_model::build::{Build, ContextDigest, GENERATED_DOCKERFILE};
use voodu_model::lang::{self, BaseImages, MARKERS};

/// The directory of a node's root that keeps its build contexts.
const CONTEXTS_DIR: &str = "contexts";

fn kept_path(root: &Path, digest: &ContextDigest) -> PathBuf {
    root.join(CONTEXTS_DIR).join(format!("{digest}.tar"))
}

/// Keeps `archive`, a context made ready to build whose digest is
/// `digest`, for the other nodes of the cluster: written whole under a
/// temporary name, then renamed, so a node asking meanwhile never reads
/// half of it. One kept already stays as it is (the same digest, the same
/// bytes).
pub(crate) fn keep(root: &Path, digest: &ContextDigest, archive: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let path = kept_path(root, digest);
    if path.exists() {
        return Ok(());
    }
    let directory = root.join(CONTEXTS_DIR);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&directory)?;
    let partial = directory.join(format!("{digest}.tar.{}.partial", std::process::id()));
    let mut file = std::fs::File::create(&partial)?;
    file.write_all(archive)?;
    file.sync_all()?;
    std::fs::rename(&partial, &path)
}

/// The context this node keeps under `digest`, if it does.
pub(crate) fn kept(root: &Path, digest: &ContextDigest) -> std::io::Result<Vec<u8>> {
    std::fs::read(kept_path(root, digest))
}

/// The context to build, and the build as it runs on it (its Dockerfile
/// and, for a handler's, the handler).
pub(crate) fn prepare(
    build: &Build,
    archive: &[u8],
    bases: &BaseImages,
) -> Result<(Vec<u8>, Build), String> {
    let files = entries(archive)?;
    if files.contains(&build.dockerfile) {
        return Ok((archive.to_vec(), build.clone()));
    }
    if build.dockerfile != "Dockerfile" {
        return Err(format!(
            "its Dockerfile {:?} is not in the context {:?} — add it, or leave dockerfile out to have a language handler write one",
            build.dockerfile, build.context
        ));
    }
    let settings = build.lang.clone().unwrap_or_default();
    let Some(handler) = settings.name.or_else(|| lang::detect(&files)) else {
        let markers: Vec<&str> = MARKERS.iter().map(|(marker, _)| *marker).collect();
        let what = if build.implied {
            "no image and no build block, so it is built from the directory vd apply runs in (as voodu does), and that"
        } else {
            "the context"
        };
        return Err(format!(
            "{what} {:?} has no Dockerfile, and no file voodu finds a language by ({}) — set image = \"...\", add a Dockerfile, or name the language with build {{ lang {{ name = \"go\" }} }}",
            build.context,
            markers.join(", ")
        ));
    };
    let generated = lang::dockerfile(handler, &settings, build.path.as_deref(), bases);
    let archive = with_file(
        archive,
        GENERATED_DOCKERFILE,
        generated.dockerfile.as_bytes(),
    )?;
    Ok((
        archive,
        Build {
            dockerfile: GENERATED_DOCKERFILE.to_owned(),
            handler: Some(handler),
            ..build.clone()
        },
    ))
}

/// The paths of a tar's files (not its directories), relative to its top.
fn entries(archive: &[u8]) -> Result<BTreeSet<String>, String> {
    let mut files = BTreeSet::new();
    let mut tar = tar::Archive::new(archive);
    for entry in tar.entries().map_err(unreadable)? {
        let entry = entry.map_err(unreadable)?;
        if entry.header().entry_type().is_dir() {
            continue;
        }
        let path = entry.path().map_err(unreadable)?;
        files.insert(path.to_string_lossy().trim_start_matches("./").to_owned());
    }
    Ok(files)
}

/// `archive` with one more file, `name`, holding `bytes`.
fn with_file(archive: &[u8], name: &str, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut tar = tar::Archive::new(archive);
    for entry in tar.entries().map_err(unreadable)? {
        let mut entry = entry.map_err(unreadable)?;
        let mut header = entry.header().clone();
        let path = entry.path().map_err(unreadable)?.into_owned();
        if header.entry_type().is_symlink() {
            let target = entry
                .link_name()
                .map_err(unreadable)?
                .map(|target| target.into_owned())
                .unwrap_or_default();
            builder
                .append_link(&mut header, &path, &target)
                .map_err(unreadable)?;
        } else {
            builder
                .append_data(&mut header, &path, &mut entry)
                .map_err(unreadable)?;
        }
    }
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(0o644);
    header.set_mtime(0);
    builder
        .append_data(&mut header, name, bytes)
        .map_err(unreadable)?;
    builder.into_inner().map_err(unreadable)
}

fn unreadable(error: std::io::Error) -> String {
    format!("the context sent is no readable tar: {error}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(files: &[(&str, &str)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, text) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(text.len() as u64);
            header.set_mode(0o644);
            builder
                .append_data(&mut header, name, text.as_bytes())
                .unwrap();
        }
        builder.into_inner().unwrap()
    }

    #[test]
    fn a_kept_context_reads_back_whole_under_its_digest_and_is_kept_once() {
        let root = tempfile::tempdir().unwrap();
        let archive = tar_of(&[("Dockerfile", "FROM scratch\n")]);
        let digest = ContextDigest::try_from(Build::default().digest_of(&archive)).unwrap();
        assert!(kept(root.path(), &digest).is_err(), "nothing kept yet");
        keep(root.path(), &digest, &archive).unwrap();
        keep(root.path(), &digest, &archive).unwrap();
        assert_eq!(kept(root.path(), &digest).unwrap(), archive);
        let files: Vec<_> = std::fs::read_dir(root.path().join(CONTEXTS_DIR))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(files, [format!("{digest}.tar")], "no partial file left");
    }

    #[test]
    fn a_context_s_own_dockerfile_wins_and_without_one_its_language_s_handler_writes_it() {
        let bases = BaseImages::default();
        let own = tar_of(&[("Dockerfile", "FROM scratch\n"), ("go.mod", "module x\n")]);
        let (archive, build) = prepare(&Build::default(), &own, &bases).unwrap();
        assert_eq!((archive, build.handler), (own, None));

        let go = tar_of(&[
            ("go.mod", "module x\n"),
            ("cmd/api/main.go", "package main\n"),
        ]);
        let block = Build {
            path: Some("cmd/api".into()),
            ..Build::default()
        };
        let (archive, build) = prepare(&block, &go, &bases).unwrap();
        assert_eq!(build.handler, Some(lang::LangName::Go));
        assert_eq!(build.dockerfile, GENERATED_DOCKERFILE);
        let files = entries(&archive).unwrap();
        assert!(files.contains("cmd/api/main.go") && files.contains(GENERATED_DOCKERFILE));

        let nothing = tar_of(&[("README.md", "hi\n")]);
        let refused = prepare(&Build::default(), &nothing, &bases).unwrap_err();
        assert!(
            refused.contains("no file voodu finds a language by (go.mod"),
            "{refused}"
        );
        let named = Build {
            dockerfile: "Dockerfile.prod".into(),
            ..Build::default()
        };
        let missing = prepare(&named, &go, &bases).unwrap_err();
        assert!(
            missing.contains("\"Dockerfile.prod\" is not in the context"),
            "{missing}"
        );
    }
}
