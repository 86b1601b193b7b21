//! `vd`: the voodu command line and controller.

fn main() -> std::process::ExitCode {
    voodu_host::cli::main()
}
