//! Compiles `echo_c.c` into a shared object with the C compiler `cc` finds,
//! and exposes its path to Rust as `VOODU_ECHO_C_PLUGIN`.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    let source = manifest_dir.join("echo_c.c");
    let include = manifest_dir.join("../../include");
    let output = out_dir.join("libvoodu_echo_c.so");
    let compiler = cc::Build::new().get_compiler();
    let status = Command::new(compiler.path())
        .args([
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-O2",
            "-fPIC",
            "-shared",
        ])
        .arg("-I")
        .arg(&include)
        .arg("-o")
        .arg(&output)
        .arg(&source)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "compiling {} failed", source.display());
    println!("cargo:rerun-if-changed={}", source.display());
    println!(
        "cargo:rerun-if-changed={}",
        include.join("voodu_plugin.h").display()
    );
    println!("cargo:rustc-env=VOODU_ECHO_C_PLUGIN={}", output.display());
}
