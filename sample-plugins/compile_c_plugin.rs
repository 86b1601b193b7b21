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
