//! The committed C header is exactly what cbindgen generates from
//! `src/ffi.rs`, and it compiles standalone as strict C99 and as C++.

use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn committed_header_path() -> PathBuf {
    crate_dir().join("../include/voodu_plugin.h")
}

fn generate_header() -> String {
    let config = cbindgen::Config::from_file(crate_dir().join("cbindgen.toml"))
        .expect("cbindgen.toml parses");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir().join("src/ffi.rs"))
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut out);
    String::from_utf8(out).expect("the header is UTF-8")
}

#[test]
fn committed_header_matches_a_fresh_generation() {
    let fresh = generate_header();
    let path = committed_header_path();
    if std::env::var_os("VOODU_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write include/voodu_plugin.h");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/voodu_plugin.h has drifted from plugin-abi/src/ffi.rs; regenerate it with \
         `VOODU_BLESS=1 cargo test -p voodu-plugin-abi --test c_header` and commit it"
    );
}

fn compile_standalone(compiler: &str, args: &[&str], header: &Path) {
    let output = Command::new(compiler)
        .args(args)
        .arg(header)
        .output()
        .unwrap_or_else(|e| panic!("could not run {compiler}: {e}"));
    assert!(
        output.status.success(),
        "{compiler} {args:?} rejected the header:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn header_compiles_standalone_as_strict_c99() {
    compile_standalone(
        "cc",
        &[
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-fsyntax-only",
            "-x",
            "c",
        ],
        &committed_header_path(),
    );
}

#[test]
fn header_compiles_standalone_as_cplusplus() {
    compile_standalone(
        "c++",
        &[
            "-std=c++11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-fsyntax-only",
            "-x",
            "c++",
        ],
        &committed_header_path(),
    );
}
