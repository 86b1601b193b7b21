//! A build's context made ready to build: when it holds the Dockerfile
//! its `build` block names, as it is; when it holds none (and the block
//! names the default `Dockerfile`), with the Dockerfile a language
//! handler writes (`voodu_model::lang`) added as
//! [`GENERATED_DOCKERFILE`], for the language `lang { name }` names or
//! its marker files show. `vd apply --dry-run` runs this too, building
//! nothing.

use std::collections::BTreeSet;

use voodu_model::build::{Build, GENERATED_DOCKERFILE};
use voodu_model::lang::{self, BaseImages, MARKERS};

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
