//! Compiles `haproxy.c` into a shared object with the C compiler `cc` finds,
//! and exposes its path to Rust as `VOODU_HAPROXY_PLUGIN`.

use std::path::PathBuf;

include!("../compile_c_plugin.rs");

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    let output = out_dir.join("libvoodu_haproxy.so");
    compile_c_plugin(
        &manifest_dir.join("haproxy.c"),
        &manifest_dir.join("../../include"),
        &output,
    );
    publish_in_profile_dir(&output);
    println!(
        "cargo:rerun-if-changed={}",
        manifest_dir.join("../c-common/plugin_util.h").display()
    );
    println!("cargo:rustc-env=VOODU_HAPROXY_PLUGIN={}", output.display());
}
