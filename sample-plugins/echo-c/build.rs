//! Compiles `echo_c.c` and the samples' shared helpers into a shared object
//! linked with cJSON, with the C compiler `cc` finds, and exposes its path
//! to Rust as `VOODU_ECHO_C_PLUGIN`.

use std::path::PathBuf;

include!("../compile_c_plugin.rs");

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    let output = out_dir.join("libvoodu_echo_c.so");
    let common = manifest_dir.join("../c-common");
    compile_c_sources(
        &[
            &manifest_dir.join("echo_c.c"),
            &common.join("plugin_util.c"),
        ],
        &manifest_dir.join("../../include"),
        &["cjson"],
        &output,
    );
    publish_in_profile_dir(&output);
    println!(
        "cargo:rerun-if-changed={}",
        common.join("plugin_util.h").display()
    );
    println!("cargo:rustc-env=VOODU_ECHO_C_PLUGIN={}", output.display());
}
