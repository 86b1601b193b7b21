//! Build contexts, as `vd apply` sends them: a workload's `build` block
//! names a directory (relative to where `vd apply` runs), which goes to the
//! controller as a tar, `.dockerignore` honoured (its patterns read as
//! gitignore patterns by the `ignore` crate: `docker build`'s own reading
//! differs only in corner cases). The tar is the same for the same files:
//! entries in name order, with no times or owners, so its digest (the
//! image's tag) changes only when what is built from changes.

use std::path::Path;

/// Why a build context could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// The directory is not there.
    #[error("{workload}: build context {context:?} is not a directory here ({cwd}) — build contexts are relative to where vd apply runs")]
    NotADirectory {
        /// The workload.
        workload: String,
        /// The context as written.
        context: String,
        /// Where `vd apply` runs.
        cwd: String,
    },
    /// Its Dockerfile is not in it.
    #[error("{workload}: build context {context:?} has no {dockerfile} — put it there, or leave dockerfile out to have a language handler write one")]
    NoDockerfile {
        /// The workload.
        workload: String,
        /// The context as written.
        context: String,
        /// The Dockerfile's name.
        dockerfile: String,
    },
    /// A file could not be read.
    #[error("{workload}: cannot read build context {context:?}: {reason}")]
    Unreadable {
        /// The workload.
        workload: String,
        /// The context as written.
        context: String,
        /// Why.
        reason: String,
    },
}

/// The tar of `context` for `workload`, checked to hold `dockerfile`.
pub fn archive(workload: &str, context: &str, dockerfile: &str) -> Result<Vec<u8>, ContextError> {
    let root = Path::new(context);
    if !root.is_dir() {
        return Err(ContextError::NotADirectory {
            workload: workload.to_owned(),
            context: context.to_owned(),
            cwd: std::env::current_dir()
                .map(|dir| dir.display().to_string())
                .unwrap_or_else(|_| "here".to_owned()),
        });
    }
    // Without its default Dockerfile, a language handler may write one
    // (the controller decides); a Dockerfile named otherwise must be there.
    if dockerfile != "Dockerfile" && !root.join(dockerfile).is_file() {
        return Err(ContextError::NoDockerfile {
            workload: workload.to_owned(),
            context: context.to_owned(),
            dockerfile: dockerfile.to_owned(),
        });
    }
    let unreadable = |reason: String| ContextError::Unreadable {
        workload: workload.to_owned(),
        context: context.to_owned(),
        reason,
    };
    let ignored = dockerignore(root).map_err(|error| unreadable(error.to_string()))?;
    let walk = ignore::WalkBuilder::new(root)
        .standard_filters(false)
        .hidden(false)
        .filter_entry(move |entry| {
            let is_dir = entry.file_type().is_some_and(|kind| kind.is_dir());
            !ignored
                .matched_path_or_any_parents(entry.path(), is_dir)
                .is_ignore()
        })
        .sort_by_file_name(|a, b| a.cmp(b))
        .build();
    let mut tar = tar::Builder::new(Vec::new());
    let mut added = std::collections::HashSet::new();
    for entry in walk {
        let entry = entry.map_err(|error| unreadable(error.to_string()))?;
        let path = entry.path();
        let Ok(relative) = path.strip_prefix(root) else {
            continue;
        };
        if relative.as_os_str().is_empty() {
            continue;
        }
        append(&mut tar, path, relative).map_err(unreadable)?;
        added.insert(relative.to_path_buf());
    }
    // As the docker client does: the Dockerfile and .dockerignore go with
    // the context even when .dockerignore leaves them out.
    for always in [Path::new(dockerfile), Path::new(".dockerignore")] {
        let path = root.join(always);
        if path.is_file() && !added.contains(always) {
            append(&mut tar, &path, always).map_err(unreadable)?;
        }
    }
    tar.into_inner()
        .map_err(|error| unreadable(error.to_string()))
}

/// The context's `.dockerignore` with Docker's meaning: only the file at
/// the context's top counts, and each pattern is matched from the top
/// (`*.log` leaves out `debug.log`, not `logs/debug.log`; `**/*.log`
/// leaves out both), as `docker build` reads it. gitignore, whose matcher
/// this is, matches a pattern without a slash at any depth, so each
/// pattern is anchored at the top first.
fn dockerignore(root: &Path) -> Result<ignore::gitignore::Gitignore, ignore::Error> {
    let mut builder = ignore::gitignore::GitignoreBuilder::new(root);
    if let Ok(text) = std::fs::read_to_string(root.join(".dockerignore")) {
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (negated, pattern) = match line.strip_prefix('!') {
                Some(pattern) => ("!", pattern.trim()),
                None => ("", line),
            };
            let pattern = pattern.trim_start_matches("./").trim_start_matches('/');
            builder.add_line(None, &format!("{negated}/{pattern}"))?;
        }
    }
    builder.build()
}

/// Appends one file, directory or symbolic link at `path` as `relative`,
/// with no times or owners.
fn append(tar: &mut tar::Builder<Vec<u8>>, path: &Path, relative: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let failed = |error: std::io::Error| format!("{}: {error}", path.display());
    let metadata = std::fs::symlink_metadata(path).map_err(failed)?;
    let mut header = tar::Header::new_gnu();
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mode(metadata.permissions().mode() & 0o777);
    if metadata.file_type().is_symlink() {
        let target = std::fs::read_link(path).map_err(failed)?;
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        tar.append_link(&mut header, relative, &target)
            .map_err(failed)
    } else if metadata.is_dir() {
        header.set_entry_type(tar::EntryType::Directory);
        header.set_size(0);
        tar.append_data(&mut header, relative, std::io::empty())
            .map_err(failed)
    } else if metadata.is_file() {
        let bytes = std::fs::read(path).map_err(failed)?;
        header.set_size(bytes.len() as u64);
        tar.append_data(&mut header, relative, bytes.as_slice())
            .map_err(failed)
    } else {
        // A socket or a device is no part of a build.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(archive: &[u8]) -> Vec<String> {
        tar::Archive::new(archive)
            .entries()
            .unwrap()
            .map(|entry| entry.unwrap().path().unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn a_context_is_sent_in_name_order_without_what_dockerignore_leaves_out_and_the_same_each_time()
    {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("Dockerfile"), "FROM scratch\n").unwrap();
        std::fs::write(root.join(".dockerignore"), "*.log\nsecrets/\n").unwrap();
        std::fs::write(root.join("app.txt"), "hello").unwrap();
        std::fs::write(root.join("debug.log"), "noise").unwrap();
        std::fs::create_dir(root.join("secrets")).unwrap();
        std::fs::write(root.join("secrets/key"), "k").unwrap();
        let context = root.display().to_string();
        std::os::unix::fs::symlink("app.txt", root.join("link.txt")).unwrap();
        let first = archive("deployment/prod/api", &context, "Dockerfile").unwrap();
        assert_eq!(
            names(&first),
            [".dockerignore", "Dockerfile", "app.txt", "link.txt"]
        );
        // A Dockerfile that .dockerignore leaves out goes all the same.
        std::fs::write(
            root.join(".dockerignore"),
            "*.log\nsecrets/\nDockerfile\n.dockerignore\n",
        )
        .unwrap();
        let listed = archive("deployment/prod/api", &context, "Dockerfile").unwrap();
        assert_eq!(
            names(&listed),
            ["app.txt", "link.txt", "Dockerfile", ".dockerignore"]
        );
        std::fs::write(root.join(".dockerignore"), "*.log\nsecrets/\n").unwrap();
        // As docker build reads it: a pattern is matched from the top
        // (`*.log` leaves `logs/old.log` in, `**/*.log` takes it out), a
        // `!` pattern brings one back, and a .dockerignore below the top
        // is a file like any other.
        std::fs::create_dir(root.join("logs")).unwrap();
        std::fs::write(root.join("logs/old.log"), "old").unwrap();
        std::fs::write(root.join("logs/.dockerignore"), "*\n").unwrap();
        let nested = archive("deployment/prod/api", &context, "Dockerfile").unwrap();
        assert_eq!(
            names(&nested),
            [
                ".dockerignore",
                "Dockerfile",
                "app.txt",
                "link.txt",
                "logs",
                "logs/.dockerignore",
                "logs/old.log"
            ]
        );
        std::fs::write(
            root.join(".dockerignore"),
            "**/*.log\n!debug.log\nsecrets/\n",
        )
        .unwrap();
        let deep = archive("deployment/prod/api", &context, "Dockerfile").unwrap();
        assert_eq!(
            names(&deep),
            [
                ".dockerignore",
                "Dockerfile",
                "app.txt",
                "debug.log",
                "link.txt",
                "logs",
                "logs/.dockerignore"
            ]
        );
        std::fs::remove_dir_all(root.join("logs")).unwrap();
        std::fs::write(root.join(".dockerignore"), "*.log\nsecrets/\n").unwrap();
        // A file touched but unchanged sends the same bytes.
        std::fs::write(root.join("app.txt"), "hello").unwrap();
        assert_eq!(
            first,
            archive("deployment/prod/api", &context, "Dockerfile").unwrap()
        );
        let missing = archive("deployment/prod/api", &context, "Dockerfile.prod").unwrap_err();
        assert!(
            missing.to_string().contains("has no Dockerfile.prod"),
            "{missing}"
        );
        let nowhere = archive("deployment/prod/api", "/no/such/dir", "Dockerfile").unwrap_err();
        assert!(
            nowhere.to_string().contains("is not a directory here"),
            "{nowhere}"
        );
    }
}
