//! Plugins built with Go (`go build -buildmode=c-shared`) carry a Go
//! runtime, and a process holds at most one: Go does not support two
//! runtimes in one process (golang/go#18976), and from Go 1.21 two c-shared
//! libraries in one process fail after a few calls (`fatal error: bad
//! sweepgen in refill`, golang/go#65050).
//!
//! A Go library is told by its `.go.buildinfo` section, which every Go
//! linker since 1.13 writes. The loader lets the first Go library of a
//! process in and runs every later one out of process
//! ([`crate::out_of_process`]).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use object::Object;

/// The section the Go linker writes into every binary and shared object it
/// links.
pub const GO_BUILDINFO_SECTION: &str = ".go.buildinfo";

/// Set once a library with a Go runtime was let into this process.
static GO_RUNTIME_IN_PROCESS: AtomicBool = AtomicBool::new(false);

/// Whether the ELF file at `path` carries a Go runtime (a
/// [`GO_BUILDINFO_SECTION`] section). A file that cannot be read or parsed
/// carries none: the loader says why it cannot load it.
pub fn carries_go_runtime(path: &Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    object::File::parse(bytes.as_slice())
        .map(|file| file.section_by_name(GO_BUILDINFO_SECTION).is_some())
        .unwrap_or(false)
}

/// Whether a library with a Go runtime was let into this process.
pub fn go_runtime_in_process() -> bool {
    GO_RUNTIME_IN_PROCESS.load(Ordering::SeqCst)
}

/// Takes this process's one place for a Go runtime: true the first time
/// (the caller loads its library here), false ever after (it must load it
/// elsewhere). A load that then fails keeps the place taken: its library
/// may have been opened, and its runtime started, before it failed.
pub(crate) fn take_the_place() -> bool {
    GO_RUNTIME_IN_PROCESS
        .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_elf_or_has_no_go_section_carries_no_go_runtime() {
        let directory = tempfile::tempdir().unwrap();
        let text = directory.path().join("not-elf.so");
        std::fs::write(&text, b"hello").unwrap();
        assert!(!carries_go_runtime(&text));
        assert!(!carries_go_runtime(&directory.path().join("missing.so")));
        // This test binary is ELF, linked by rustc: no Go section.
        let this = std::env::current_exe().unwrap();
        assert!(!carries_go_runtime(&this));
    }

    #[test]
    fn the_place_for_a_go_runtime_is_taken_once() {
        // The only test that takes it, so the order is known.
        assert!(take_the_place());
        assert!(go_runtime_in_process());
        assert!(!take_the_place());
    }
}
