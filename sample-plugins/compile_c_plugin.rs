// Shared by the build scripts that compile C plugins (the echo_c sample and
// the C failure fixtures): compiles one C file against include/voodu_plugin.h
// into a shared object. Pulled in with `include!`, since build scripts cannot
// share a crate without one more workspace member.

/// Compiles `source` into the shared object `output` as strict C99 with every
/// warning an error, against the header directory `include`.
fn compile_c_plugin(source: &std::path::Path, include: &std::path::Path, output: &std::path::Path) {
    let compiler = cc::Build::new().get_compiler();
    let status = std::process::Command::new(compiler.path())
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2", "-fPIC", "-shared"])
        .arg("-I")
        .arg(include)
        .arg("-o")
        .arg(output)
        .arg(source)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "compiling {} failed", source.display());
    println!("cargo:rerun-if-changed={}", source.display());
    println!("cargo:rerun-if-changed={}", include.join("voodu_plugin.h").display());
}

/// Copies a compiled plugin beside the Rust plugins, into the profile's
/// directory (`target/debug/`), so that every sample plugin has a path that
/// does not change between builds: `target/debug/libvoodu_echo_c.so`.
/// `OUT_DIR` is `<target>/<profile>/build/<package>-<hash>/out`.
#[allow(dead_code)] // The C fixtures' build script does not publish them.
fn publish_in_profile_dir(output: &std::path::Path) {
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    let Some(profile_dir) = out_dir.ancestors().nth(3) else {
        return;
    };
    let Some(file_name) = output.file_name() else {
        return;
    };
    let published = profile_dir.join(file_name);
    // Replace, not overwrite in place: a running controller may have the
    // old file mapped.
    let staged = profile_dir.join(format!(".{}.tmp", file_name.to_string_lossy()));
    if std::fs::copy(output, &staged).is_ok() {
        let _ = std::fs::rename(&staged, &published);
    }
}
