//! Which files `vd apply -f` reads: named files, and the manifest files of
//! named directories in lexical order.

use std::path::{Path, PathBuf};

use voodu_model::limits::MAX_MANIFEST_BYTES;
use voodu_model::ManifestSource;

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
    /// A file is larger than a manifest may be.
    #[error(
        "{path} is {size}, more than the {limit} a manifest may be — split it into several files"
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size, `50.0 MiB`.
        size: String,
        /// The bound, `8.0 MiB`.
        limit: String,
    },
    /// `-` was given twice: standard input can be read once.
    #[error("-f - is given twice — standard input holds one manifest; name the others as files")]
    StdinTwice,
    /// A file is not UTF-8 text.
    #[error("{path}:{line}:{column}: the file is not UTF-8 text (a byte that is not UTF-8 here; a binary file?) — a manifest is UTF-8 HCL")]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// The line of the first byte that is not UTF-8.
        line: usize,
        /// Its column, in characters.
        column: usize,
    },
}

fn mebibytes(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// The `-f` argument that stands for standard input (`vd apply -f -`).
pub const STDIN_ARGUMENT: &str = "-";

/// How locations name a manifest read from standard input.
pub const STDIN_NAME: &str = "<stdin>";

/// Reads the manifest files that `paths` name ([`manifest_files`]), and
/// standard input for `-`, each checked against [`MAX_MANIFEST_BYTES`]
/// before it is read whole and for UTF-8 after, as sources for an apply.
pub fn read_manifests(paths: &[PathBuf]) -> Result<Vec<ManifestSource>, ManifestFilesError> {
    read_manifests_from(paths, &mut std::io::stdin().lock())
}

/// [`read_manifests`], with `-` reading `stdin`.
pub fn read_manifests_from(
    paths: &[PathBuf],
    stdin: &mut dyn std::io::Read,
) -> Result<Vec<ManifestSource>, ManifestFilesError> {
    use std::io::Read;
    let mut sources = Vec::new();
    let mut stdin_read = false;
    for path in paths {
        if path.as_os_str() == STDIN_ARGUMENT {
            if std::mem::replace(&mut stdin_read, true) {
                return Err(ManifestFilesError::StdinTwice);
            }
            let name = PathBuf::from(STDIN_NAME);
            let mut bytes = Vec::new();
            stdin
                .take(MAX_MANIFEST_BYTES as u64 + 1)
                .read_to_end(&mut bytes)
                .map_err(|source| ManifestFilesError::Unreadable {
                    path: name.clone(),
                    source,
                })?;
            if bytes.len() > MAX_MANIFEST_BYTES {
                return Err(ManifestFilesError::TooLarge {
                    path: name,
                    size: format!("more than {}", mebibytes(MAX_MANIFEST_BYTES as u64)),
                    limit: mebibytes(MAX_MANIFEST_BYTES as u64),
                });
            }
            sources.push(manifest_text(&name, bytes)?);
            continue;
        }
        for file in manifest_files(std::slice::from_ref(path))? {
            let unreadable = |source| ManifestFilesError::Unreadable {
                path: file.clone(),
                source,
            };
            let size = file.metadata().map_err(unreadable)?.len();
            if size > MAX_MANIFEST_BYTES as u64 {
                return Err(ManifestFilesError::TooLarge {
                    path: file.clone(),
                    size: mebibytes(size),
                    limit: mebibytes(MAX_MANIFEST_BYTES as u64),
                });
            }
            let bytes = std::fs::read(&file).map_err(unreadable)?;
            sources.push(manifest_text(&file, bytes)?);
        }
    }
    Ok(sources)
}

/// A manifest's bytes as its text, or where the first byte that is not
/// UTF-8 is.
fn manifest_text(file: &Path, bytes: Vec<u8>) -> Result<ManifestSource, ManifestFilesError> {
    let text = String::from_utf8(bytes).map_err(|error| {
        let valid = &error.as_bytes()[..error.utf8_error().valid_up_to()];
        let valid = std::str::from_utf8(valid).expect("cannot fail: valid_up_to is valid");
        let line = valid.matches('\n').count() + 1;
        let column = valid
            .rsplit('\n')
            .next()
            .map_or(1, |last| last.chars().count() + 1);
        ManifestFilesError::NotUtf8 {
            path: file.to_path_buf(),
            line,
            column,
        }
    })?;
    Ok(ManifestSource {
        path: file.display().to_string(),
        text,
    })
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
    fn a_dash_reads_standard_input_once_beside_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.hcl");
        std::fs::write(&file, "from the file").unwrap();
        let mut stdin = "from stdin".as_bytes();
        let sources = read_manifests_from(&[PathBuf::from("-"), file.clone()], &mut stdin).unwrap();
        assert_eq!(sources[0].path, "<stdin>");
        assert_eq!(sources[0].text, "from stdin");
        assert_eq!(sources[1].text, "from the file");
        let twice = read_manifests_from(&[PathBuf::from("-"), PathBuf::from("-")], &mut &b""[..]);
        assert!(matches!(twice, Err(ManifestFilesError::StdinTwice)));
    }

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
    fn a_file_that_is_not_utf8_is_named_at_its_first_bad_byte() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x.vd");
        std::fs::write(&file, b"deployment \"a\" \"b\" {\n  image = \"\xff\"\n}\n").unwrap();
        let error = read_manifests(std::slice::from_ref(&file))
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            format!("{}:2:12: the file is not UTF-8 text (a byte that is not UTF-8 here; a binary file?) — a manifest is UTF-8 HCL", file.display())
        );
    }

    #[test]
    fn a_file_over_the_bound_is_refused_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("big.vd");
        let handle = std::fs::File::create(&file).unwrap();
        handle.set_len(50 * 1024 * 1024).unwrap();
        let error = read_manifests(std::slice::from_ref(&file))
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            format!("{} is 50.0 MiB, more than the 8.0 MiB a manifest may be — split it into several files", file.display())
        );
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
