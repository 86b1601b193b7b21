//! Compiles the haproxy sample's C files (config, render, sockets, vtable)
//! and the samples' shared helpers into one shared object linked with
//! cJSON, with the C compiler `cc` finds, and exposes its path to Rust as
//! `VOODU_HAPROXY_PLUGIN`.

use std::path::PathBuf;

include!("../compile_c_plugin.rs");

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    let output = out_dir.join("libvoodu_haproxy.so");
    let common = manifest_dir.join("../c-common");
    let sources: Vec<PathBuf> = ["config.c", "render.c", "sockets.c", "vtable.c"]
        .iter()
        .map(|file| manifest_dir.join(file))
        .chain([common.join("plugin_util.c")])
        .collect();
    let sources: Vec<&std::path::Path> = sources.iter().map(PathBuf::as_path).collect();
    compile_c_sources(
        &sources,
        &manifest_dir.join("../../include"),
        &["cjson"],
        &output,
    );
    publish_in_profile_dir(&output);
    for header in [manifest_dir.join("haproxy.h"), common.join("plugin_util.h")] {
        println!("cargo:rerun-if-changed={}", header.display());
    }
    println!("cargo:rustc-env=VOODU_HAPROXY_PLUGIN={}", output.display());
}
