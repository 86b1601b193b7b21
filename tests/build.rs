//! Compiles every C failure fixture in `fixtures/c/` into its own shared
//! object under OUT_DIR, and exposes the directory as `VOODU_C_FIXTURES`.
//!
//! Also builds the reconcile tests' workload, `echo-server/src/main.rs`, as
//! a static binary (std only, `crt-static`) with rustc, and exposes its path
//! as `VOODU_ECHO_SERVER`: it runs alone in an imported image.

use std::path::PathBuf;

include!("../sample-plugins/compile_c_plugin.rs");

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    let fixtures = manifest_dir.join("fixtures/c");
    let include = manifest_dir.join("../include");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&fixtures)
        .expect("fixtures/c exists")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "c"))
        .collect();
    sources.sort();
    for source in &sources {
        let stem = source.file_stem().expect("a file name").to_string_lossy();
        compile_c_plugin(source, &include, &out_dir.join(format!("lib{stem}.so")));
    }
    println!(
        "cargo:rerun-if-changed={}",
        fixtures.join("fixture.h").display()
    );
    println!("cargo:rerun-if-changed={}", fixtures.display());
    println!("cargo:rustc-env=VOODU_C_FIXTURES={}", out_dir.display());

    // The driver that runs a C plugin under valgrind.
    let driver_source = manifest_dir.join("drivers/plugin_driver.c");
    let driver = out_dir.join("plugin_driver");
    let compiler = cc::Build::new().get_compiler();
    let status = std::process::Command::new(compiler.path())
        .args([
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-g",
            "-O0",
        ])
        .arg("-I")
        .arg(&include)
        .arg("-o")
        .arg(&driver)
        .arg(&driver_source)
        .arg("-ldl")
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "the plugin driver did not build");
    println!("cargo:rerun-if-changed={}", driver_source.display());
    println!("cargo:rustc-env=VOODU_PLUGIN_DRIVER={}", driver.display());

    let echo_source = manifest_dir.join("echo-server/src/main.rs");
    let echo_binary = out_dir.join("echo-server");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let status = std::process::Command::new(rustc)
        .args([
            "--edition",
            "2021",
            "-O",
            "-C",
            "target-feature=+crt-static",
        ])
        .arg("--target")
        .arg(std::env::var("TARGET").expect("cargo sets it"))
        .arg(&echo_source)
        .arg("-o")
        .arg(&echo_binary)
        .status()
        .expect("rustc runs");
    assert!(status.success(), "the static echo-server did not build");
    println!("cargo:rerun-if-changed={}", echo_source.display());
    println!(
        "cargo:rustc-env=VOODU_ECHO_SERVER={}",
        echo_binary.display()
    );
}
