// Shared by the build scripts that compile C plugins (the C samples and the
// C failure fixtures) against include/voodu_plugin.h into shared objects.
// Pulled in with `include!`, since build scripts cannot share a crate without
// one more workspace member.

/// The flags every C plugin is compiled with: strict C99, every warning an
/// error, position-independent code in a shared object.
const C_PLUGIN_FLAGS: [&str; 8] = [
    "-std=c99",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-pedantic",
    "-O2",
    "-fPIC",
    "-shared",
];

/// Compiles `source` into the shared object `output` with
/// [`C_PLUGIN_FLAGS`], against the header directory `include`.
#[allow(dead_code)] // The samples' build scripts use compile_c_sources.
fn compile_c_plugin(source: &std::path::Path, include: &std::path::Path, output: &std::path::Path) {
    run_c_compiler(&[source], include, &[], output);
    println!("cargo:rerun-if-changed={}", source.display());
}

/// Compiles several C files into the one shared object `output`, with
/// [`C_PLUGIN_FLAGS`], against the header directory `include`, linked with
/// `libraries` (names as for `-l`: `["cjson"]`). Every symbol but those
/// marked `VOODU_PLUGIN_EXPORT` stays hidden, and a symbol that none of the
/// libraries defines fails the build here rather than at load.
#[allow(dead_code)] // The C fixtures' build script uses compile_c_plugin.
fn compile_c_sources(
    sources: &[&std::path::Path],
    include: &std::path::Path,
    libraries: &[&str],
    output: &std::path::Path,
) {
    let mut extra = vec!["-fvisibility=hidden".to_owned(), "-Wl,-z,defs".to_owned()];
    extra.extend(libraries.iter().map(|library| format!("-l{library}")));
    run_c_compiler(sources, include, &extra, output);
    for source in sources {
        println!("cargo:rerun-if-changed={}", source.display());
    }
}

/// Runs the C compiler `cc` finds on `sources`, with `extra` after them (so
/// `-l` flags come after the objects that need them).
fn run_c_compiler(
    sources: &[&std::path::Path],
    include: &std::path::Path,
    extra: &[String],
    output: &std::path::Path,
) {
    let compiler = cc::Build::new().get_compiler();
    let status = std::process::Command::new(compiler.path())
        .args(C_PLUGIN_FLAGS)
        .arg("-I")
        .arg(include)
        .arg("-o")
        .arg(output)
        .args(sources)
        .args(extra)
        .status()
        .expect("run the C compiler");
    let names: Vec<String> = sources.iter().map(|s| s.display().to_string()).collect();
    assert!(
        status.success(),
        "compiling {} failed{}",
        names.join(", "),
        if extra.iter().any(|flag| flag == "-lcjson") {
            " (it needs cJSON: on Debian, apt-get install libcjson-dev)"
        } else {
            ""
        }
    );
    println!(
        "cargo:rerun-if-changed={}",
        include.join("voodu_plugin.h").display()
    );
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
