//! Checks that the vendored protoc, which etcd-client's build runs through
//! `./protoc` (see `.cargo/config.toml`), is there for this machine.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if let Err(error) = protoc_bin_vendored::protoc_bin_path() {
        println!(
            "cargo:warning=no vendored protoc for this machine ({error}); set PROTOC to a protoc"
        );
    }
}
