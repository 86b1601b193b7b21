//! Compiles every C failure fixture in `fixtures/c/` into its own shared
//! object under OUT_DIR, and exposes the directory as `VOODU_C_FIXTURES`.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    let fixtures = manifest_dir.join("fixtures/c");
    let include = manifest_dir.join("../include");
    let compiler = cc::Build::new().get_compiler();
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&fixtures)
        .expect("fixtures/c exists")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "c"))
        .collect();
    sources.sort();
    for source in &sources {
        let stem = source.file_stem().expect("a file name").to_string_lossy();
        let output = out_dir.join(format!("lib{stem}.so"));
        let status = Command::new(compiler.path())
            .args([
                "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-fPIC", "-shared",
            ])
            .arg("-I")
            .arg(&include)
            .arg("-o")
            .arg(&output)
            .arg(source)
            .status()
            .expect("run the C compiler");
        assert!(status.success(), "compiling {} failed", source.display());
        println!("cargo:rerun-if-changed={}", source.display());
    }
    println!(
        "cargo:rerun-if-changed={}",
        fixtures.join("fixture.h").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        include.join("voodu_plugin.h").display()
    );
    println!("cargo:rustc-env=VOODU_C_FIXTURES={}", out_dir.display());
}
