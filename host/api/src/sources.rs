//! Which files `vd apply -f` reads: named files, and the manifest files of
//! named directories in lexical order.

use std::path::{Path, PathBuf};

/// The extensions a manifest file may have.
pub const MANIFEST_EXTENSIONS: &[&str] = &["hcl", "voodu", "vdu", "vd"];

/// Why the manifest files could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum ManifestFilesError {
    /// A path could not be read.
    #[error("cannot read {path}: {source}")]
    Unreadable {
        /// The path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A named file does not have a manifest extension.
    #[error("{path} is not a manifest file — manifest files end in .hcl, .voodu, .vdu or .vd")]
    NotAManifest {
        /// The path.
        path: PathBuf,
    },
    /// A named directory holds no manifest file.
    #[error("{path} holds no manifest file — manifest files end in .hcl, .voodu, .vdu or .vd")]
    EmptyDirectory {
        /// The directory.
        path: PathBuf,
    },
}

/// Whether a path has one of the manifest extensions.
pub fn is_manifest_file(path: &Path) -> bool {
    path.extension()
        .and_then(|extension| extension.to_str())
        .is_some_and(|extension| MANIFEST_EXTENSIONS.contains(&extension))
}

/// Expands `-f` arguments into manifest files: a file stands for itself, a
/// directory for its manifest files (not recursing) in lexical order.
pub fn manifest_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ManifestFilesError> {
    let mut files = Vec::new();
    for path in paths {
        let unreadable = |source| ManifestFilesError::Unreadable {
            path: path.clone(),
            source,
        };
        if path.metadata().map_err(unreadable)?.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(unreadable)?
                .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                .filter(|entry| entry.is_file() && is_manifest_file(entry))
                .collect();
            if found.is_empty() {
                return Err(ManifestFilesError::EmptyDirectory { path: path.clone() });
            }
            found.sort();
            files.extend(found);
        } else if is_manifest_file(path) {
            files.push(path.clone());
        } else {
            return Err(ManifestFilesError::NotAManifest { path: path.clone() });
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_read_in_lexical_order_and_only_manifests() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.vd", "a.hcl", "c.txt", "10.voodu", "d.vdu"] {
            std::fs::write(dir.path().join(name), "").unwrap();
        }
        let files = manifest_files(&[dir.path().to_path_buf()]).unwrap();
        let names: Vec<_> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_str().unwrap().to_owned())
            .collect();
        assert_eq!(names, ["10.voodu", "a.hcl", "b.vd", "d.vdu"]);
    }

    #[test]
    fn a_named_file_needs_a_manifest_extension() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "").unwrap();
        let error = manifest_files(&[text]).unwrap_err().to_string();
        assert!(error
            .ends_with("is not a manifest file — manifest files end in .hcl, .voodu, .vdu or .vd"));
    }
}
