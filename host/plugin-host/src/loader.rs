//! Loading a plugin file into a [`PluginHandle`].
//!
//! 1. Open the file as a shared object (libloading). A file that is not one
//!    is refused here.
//! 2. A Rust plugin exports an abi_stable root module: load it through
//!    `lib_header_from_path(..).init_root_module()`, which runs abi_stable's
//!    layout check, and take the vtable from it. (`RootModule::load_from_file`
//!    is avoided on purpose: it caches one module per interface type and would
//!    hand back the first plugin for every later one.)
//! 3. A C plugin exports only `voodu_plugin_entry_v1`: call it.
//! 4. Both paths meet here: check `abi_version`, `struct_size`, the name and
//!    the required members, then start the plugin thread and run `init`
//!    within the call bound.
//!
//! Libraries are never unloaded: a plugin may have started threads that run
//! its code, and a wedged call may still be inside it.

use std::ffi::{c_char, CStr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use abi_stable::library::{lib_header_from_path, LibraryError, ROOT_MODULE_LOADER_NAME_WITH_NUL};
use voodu_plugin_abi::ffi::{
    VooduGetExtensionFn, VooduPluginEntryV1, VooduPluginV1, VOODU_ABI_VERSION_MAJOR,
    VOODU_PLUGIN_ENTRY_V1_SYMBOL, VOODU_PLUGIN_V1_0_SIZE,
};
use voodu_plugin_abi::root_module::{VooduPluginModuleRef, VooduPluginV1Core};

use super::abi_report::summarise_layout_mismatch;
use super::error::{CallError, LoadError};
use super::handle::{run_init, PluginHandle, PluginInfo, PluginKind};
use super::host_api::leak_host_api;
use super::worker::{self, Members};
use crate::name::PluginName;

/// How a plugin is loaded and called.
#[derive(Debug, Clone, Copy)]
pub struct LoadOptions {
    /// The bound on every call, `init` included. A call that overruns it
    /// marks the plugin wedged. Default: 5 s.
    pub call_timeout: Duration,
    /// Run the plugin in a child process of its own
    /// ([`crate::out_of_process`]). Without it, a plugin runs in this
    /// process unless it carries a Go runtime and one is already here
    /// ([`crate::go_runtime`]). Default: false.
    pub out_of_process: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            call_timeout: Duration::from_secs(5),
            out_of_process: false,
        }
    }
}

/// Set once a load was abandoned: its thread holds the dynamic loader's
/// lock for good.
static LOAD_STUCK: AtomicBool = AtomicBool::new(false);

/// Whether a library load was abandoned in this process. The abandoned
/// thread holds the dynamic loader's lock, which a normal process exit
/// takes too (to run library destructors), so a host that sees `true`
/// should end with `_exit` once it has flushed what it must.
pub fn load_is_stuck() -> bool {
    LOAD_STUCK.load(Ordering::SeqCst)
}

/// How long opening a library and starting its instance may take, in all:
/// twice the call bound (the library's constructors, then `init`) and a
/// second.
pub fn load_bound(options: &LoadOptions) -> Duration {
    options.call_timeout * 2 + Duration::from_secs(1)
}

/// Loads the plugin at `path`, checks it, and starts its instance.
///
/// A library whose constructor never returns would hold the dynamic
/// loader's lock for good, and with it every thread's first use of a
/// thread-local (glibc takes that lock to register its destructor): the
/// whole process would freeze. So the library is first opened in a forked
/// child ([`probe_in_child`]); one that does not open there within
/// [`load_bound`] is refused with [`LoadError::LoadTimedOut`] and never
/// opened in this process. The load itself then runs on a thread of its
/// own within the same bound, as a second line.
pub fn load_plugin(path: &Path, options: &LoadOptions) -> Result<PluginHandle, LoadError> {
    load_plugin_checked(path, options, Arc::new(|_| Ok(())))
}

/// A check of a plugin's identity before its `init` runs: an error refuses
/// the load with [`LoadError::RefusedBeforeInit`], and `init` never runs.
pub type BeforeInit = Arc<dyn Fn(&PluginInfo) -> Result<(), String> + Send + Sync>;

/// [`load_plugin`], with `before_init` asked once the plugin has named
/// itself and before its `init` runs: an install refused (a duplicate
/// name, say) never runs a plugin's `init`, and so none of its side
/// effects.
pub fn load_plugin_checked(
    path: &Path,
    options: &LoadOptions,
    before_init: BeforeInit,
) -> Result<PluginHandle, LoadError> {
    if load_is_stuck() {
        return Err(LoadError::LoadTimedOut {
            path: path.to_owned(),
            timeout: Duration::ZERO,
        });
    }
    if options.out_of_process {
        return crate::out_of_process::load(path, options, &before_init);
    }
    if crate::go_runtime::carries_go_runtime(path) && !crate::go_runtime::take_the_place() {
        tracing::info!(path = %path.display(), "the plugin carries a Go runtime and this process holds one already; it runs out of process");
        return crate::out_of_process::load(path, options, &before_init);
    }
    probe_in_child(path, load_bound(options))?;
    let (sender, receiver) = crossbeam_channel::bounded(1);
    let owned_path = path.to_owned();
    let owned_options = *options;
    let spawned = std::thread::Builder::new()
        .name("voodu-plugin-load".into())
        .spawn(move || {
            let _ = sender.send(load_here(&owned_path, &owned_options, &before_init));
        });
    if let Err(error) = spawned {
        return Err(LoadError::NotASharedObject {
            path: path.to_owned(),
            reason: format!("could not start a thread to load it: {error}"),
        });
    }
    let bound = load_bound(options);
    match receiver.recv_timeout(bound) {
        Ok(result) => result,
        Err(_) => {
            LOAD_STUCK.store(true, Ordering::SeqCst);
            tracing::error!(path = %path.display(), ?bound, "a plugin library did not finish loading; abandoned");
            Err(LoadError::LoadTimedOut {
                path: path.to_owned(),
                timeout: bound,
            })
        }
    }
}

/// Opens the library at `path` in a forked child, which exits at once,
/// and waits up to `bound` for it. The library's constructors run in the
/// child too, so a constructor that hangs is found without this process
/// taking the loader's lock. A child that does not finish in time is
/// killed. Whether the library opens at all is left to the real load,
/// which says why it does not.
pub fn probe_in_child(path: &Path, bound: Duration) -> Result<(), LoadError> {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return Ok(());
    };
    // SAFETY: the child calls only dlopen and _exit; the path was
    // allocated before the fork.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: in the child, with a valid C string.
        unsafe {
            let handle = libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            libc::_exit(if handle.is_null() { 2 } else { 0 });
        }
    }
    if child < 0 {
        // No child to probe with; the real load still has its own bound.
        return Ok(());
    }
    let started = std::time::Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waiting for our own child.
        let waited = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
        if waited != 0 {
            return Ok(());
        }
        if started.elapsed() >= bound {
            // SAFETY: our own child, then reaped.
            unsafe {
                libc::kill(child, libc::SIGKILL);
                libc::waitpid(child, &mut status, 0);
            }
            tracing::error!(path = %path.display(), ?bound, "a plugin library did not finish opening in a probe; refused");
            return Err(LoadError::LoadTimedOut {
                path: path.to_owned(),
                timeout: bound,
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Loads the plugin at `path` on the calling thread.
fn load_here(
    path: &Path,
    options: &LoadOptions,
    before_init: &BeforeInit,
) -> Result<PluginHandle, LoadError> {
    let (kind, vtable) = open_table(path)?;
    let (info, members) = checked_table(path, kind, vtable)?;
    start(info, members, options, before_init)
}

/// Opens the library at `path` for good (it is never unloaded) and finds
/// its plugin table: through abi_stable for a Rust plugin, through the
/// entry symbol for a C one.
pub(crate) fn open_table(path: &Path) -> Result<(PluginKind, *const VooduPluginV1), LoadError> {
    // SAFETY: loading a library runs its initialisers; loading plugins is
    // what this function is for, and an operator chose the file.
    //
    // Every symbol is bound now (RTLD_NOW), not at its first call: a
    // library that needs a symbol nothing defines (a C plugin linked
    // without its JSON library) is refused here, naming it, instead of
    // ending the process at the first call that reaches it.
    let library: libloading::Library = unsafe {
        libloading::os::unix::Library::open(
            Some(path),
            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL,
        )
    }
    .map_err(|error| open_error(&error, path))?
    .into();
    // SAFETY: only the symbol's presence is checked; it is never dereferenced.
    let is_rust = unsafe {
        library
            .get::<*const u8>(ROOT_MODULE_LOADER_NAME_WITH_NUL.as_bytes())
            .is_ok()
    };
    let (kind, vtable) = if is_rust {
        (PluginKind::Rust, rust_vtable(path)?)
    } else {
        (PluginKind::C, c_vtable(&library, path)?)
    };
    // Never unloaded; see the module docs.
    std::mem::forget(library);
    Ok((kind, vtable))
}

/// Why the dynamic loader refused `path`: a symbol it needs and nothing
/// defines, or the loader's own reason.
fn open_error(error: &libloading::Error, path: &Path) -> LoadError {
    let reason = dl_reason(error, path);
    match reason.strip_prefix("undefined symbol: ") {
        Some(symbol) => LoadError::UnresolvedSymbol {
            path: path.to_owned(),
            hint: link_hint(symbol),
            symbol: symbol.trim().to_owned(),
        },
        None => LoadError::NotASharedObject {
            path: path.to_owned(),
            reason,
        },
    }
}

/// The link flag that most likely provides `symbol`, for the libraries C
/// plugins commonly use, as `" (-lcjson)"`; empty when it is not known.
fn link_hint(symbol: &str) -> String {
    const KNOWN: [(&str, &str); 6] = [
        ("cJSON_", "-lcjson"),
        ("curl_", "-lcurl"),
        ("SSL_", "-lssl"),
        ("EVP_", "-lcrypto"),
        ("json_", "-ljansson"),
        ("yyjson_", "-lyyjson"),
    ];
    KNOWN
        .iter()
        .find(|(prefix, _)| symbol.starts_with(prefix))
        .map(|(_, flag)| format!(" (for `{symbol}`: {flag})"))
        .unwrap_or_default()
}

fn dl_reason(error: &libloading::Error, path: &Path) -> String {
    let text = error.to_string();
    // dlerror repeats the path; keep only what follows it.
    let shown = path.display().to_string();
    text.split_once(&format!("{shown}: "))
        .map(|(_, rest)| rest.to_owned())
        .unwrap_or(text)
}

fn rust_vtable(path: &Path) -> Result<*const VooduPluginV1, LoadError> {
    let map_error = |error: LibraryError| match error {
        LibraryError::AbiInstability(report) => LoadError::LayoutMismatch {
            path: path.to_owned(),
            mismatch: summarise_layout_mismatch(&report.to_string()),
        },
        LibraryError::OpenError { err, .. } => LoadError::NotASharedObject {
            path: path.to_owned(),
            reason: err.to_string(),
        },
        other => LoadError::AbiStable {
            path: path.to_owned(),
            reason: other
                .to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned(),
        },
    };
    let header = lib_header_from_path(path).map_err(map_error)?;
    let module = header
        .init_root_module::<VooduPluginModuleRef>()
        .map_err(map_error)?;
    // SAFETY: the layout check above proved the function's signature.
    let core = unsafe { (module.vtable_v1())() };
    Ok(core.cast::<VooduPluginV1>())
}

fn c_vtable(library: &libloading::Library, path: &Path) -> Result<*const VooduPluginV1, LoadError> {
    let symbol = format!("{VOODU_PLUGIN_ENTRY_V1_SYMBOL}\0");
    // SAFETY: the symbol's type is the ABI's entry signature.
    match unsafe { library.get::<VooduPluginEntryV1>(symbol.as_bytes()) } {
        // SAFETY: the entry takes nothing and returns the static vtable.
        Ok(entry) => Ok(unsafe { entry() }),
        Err(_) => {
            let other = (2..=9)
                .map(|major| format!("voodu_plugin_entry_v{major}"))
                // SAFETY: presence check only.
                .find(|name| unsafe {
                    library
                        .get::<*const u8>(format!("{name}\0").as_bytes())
                        .is_ok()
                })
                .map(|name| format!(" (it exports `{name}`, for another major ABI)"))
                .unwrap_or_default();
            Err(LoadError::MissingEntrySymbol {
                path: path.to_owned(),
                other,
            })
        }
    }
}

/// Reads a NUL-terminated string from the vtable.
///
/// # Safety
/// `text` is NULL or points to a NUL-terminated string.
unsafe fn vtable_string(text: *const c_char) -> Option<String> {
    if text.is_null() {
        None
    } else {
        Some(CStr::from_ptr(text).to_string_lossy().into_owned())
    }
}

fn check_name(path: &Path, name: Option<String>) -> Result<String, LoadError> {
    let invalid = |reason: String| LoadError::InvalidName {
        path: path.to_owned(),
        reason,
    };
    let name = name.ok_or_else(|| invalid("the name is NULL".into()))?;
    PluginName::new(name)
        .map(|name| name.as_str().to_owned())
        .map_err(|error| invalid(error.to_string()))
}

/// Checks a plugin's table (its ABI version, size, name and required
/// members) and copies out what the host calls.
pub(crate) fn checked_table(
    path: &Path,
    kind: PluginKind,
    vtable: *const VooduPluginV1,
) -> Result<(PluginInfo, Members), LoadError> {
    let invalid = |reason: String| LoadError::InvalidVtable {
        path: path.to_owned(),
        reason,
    };
    if vtable.is_null() {
        return Err(invalid("the entry symbol returned NULL".into()));
    }
    // SAFETY: every vtable starts with the two u32 version fields; read them
    // through the smallest layout, never through the newest one.
    let head = vtable.cast::<[u32; 2]>();
    let [abi_version, struct_size] = unsafe { head.read() };
    let (major, minor) = (abi_version >> 16, abi_version & 0xffff);
    if major != VOODU_ABI_VERSION_MAJOR {
        return Err(LoadError::IncompatibleAbiVersion {
            path: path.to_owned(),
            major,
            minor,
        });
    }
    let struct_size = struct_size as usize;
    if struct_size < VOODU_PLUGIN_V1_0_SIZE {
        return Err(invalid(format!(
            "struct_size is {struct_size} bytes, smaller than the {VOODU_PLUGIN_V1_0_SIZE} bytes \
             of ABI 1.0 — rebuild against voodu-plugin-abi 1.x"
        )));
    }
    // SAFETY: struct_size shows the table holds at least the 1.0 layout.
    let core = unsafe { &*vtable.cast::<VooduPluginV1Core>() };
    let get_extension_end = std::mem::offset_of!(VooduPluginV1, get_extension)
        + std::mem::size_of::<VooduGetExtensionFn>();
    let has_extensions = struct_size >= get_extension_end
        // SAFETY: struct_size shows the member is inside the plugin's table.
        && unsafe { (*vtable).get_extension.is_some() };
    // SAFETY (the three): `vtable` is the plugin's table of `struct_size`
    // bytes, and each offset is a `VooduCallFn` member's.
    let describe = unsafe {
        optional_call_member(
            vtable,
            struct_size,
            std::mem::offset_of!(VooduPluginV1, describe),
        )
    };
    let describe_settings = unsafe {
        optional_call_member(
            vtable,
            struct_size,
            std::mem::offset_of!(VooduPluginV1, describe_settings),
        )
    };
    let configure = unsafe {
        optional_call_member(
            vtable,
            struct_size,
            std::mem::offset_of!(VooduPluginV1, configure),
        )
    };
    // SAFETY: the ABI makes these NULL or NUL-terminated static strings.
    let name = check_name(path, unsafe { vtable_string(core.name) })?;
    let version = unsafe { vtable_string(core.version) }.unwrap_or_default();
    for (member, present) in [
        ("init", core.init.is_some()),
        ("validate", core.validate.is_some()),
        ("free", core.free.is_some()),
    ] {
        if !present {
            return Err(invalid(format!(
                "plugin {name}: required member `{member}` is NULL"
            )));
        }
    }
    let members = Members {
        // Typed with the host table this host hands out; the member lies in
        // the 1.0 prefix (the same offset in both layouts).
        // SAFETY: struct_size shows the table holds at least the 1.0 layout.
        init: unsafe { (*vtable).init },
        validate: core.validate,
        publish: core.publish,
        drain: core.drain,
        forget: core.forget,
        describe,
        describe_settings,
        configure,
        free: core.free,
        shutdown: core.shutdown,
    };
    let info = PluginInfo {
        name: name.clone(),
        version,
        abi_major: major,
        abi_minor: minor,
        kind,
        path: path.to_owned(),
        has_extensions,
        out_of_process: false,
    };
    Ok((info, members))
}

/// Starts a checked plugin's thread and runs its `init`, once
/// `before_init` lets it.
fn start(
    info: PluginInfo,
    members: Members,
    options: &LoadOptions,
    before_init: &BeforeInit,
) -> Result<PluginHandle, LoadError> {
    let (path, name, kind) = (info.path.clone(), info.name.clone(), info.kind);
    before_init(&info).map_err(|reason| LoadError::RefusedBeforeInit { reason })?;
    // One slot each way: calls are serialised, so at most one job is in flight
    // (a shutdown after a wedged call uses `try_send`).
    let (jobs_tx, jobs_rx) = crossbeam_channel::bounded(1);
    let (done_tx, done_rx) = crossbeam_channel::bounded(1);
    let (host_api, log_limiter) = leak_host_api(&name);
    let directory = path.parent().unwrap_or(Path::new(".")).to_owned();
    let thread =
        worker::spawn(&name, directory, members, host_api, jobs_rx, done_tx).map_err(|error| {
            LoadError::InitFailed {
                path: path.to_owned(),
                plugin: name.clone(),
                message: format!("could not start its host thread: {error}"),
            }
        })?;
    let handle = PluginHandle::new(
        info,
        members.present(),
        options.call_timeout,
        jobs_tx,
        done_rx,
        thread,
        log_limiter,
    );
    init_outcome(&path, &name, run_init(&handle))?;
    tracing::info!(plugin = %name, kind = %kind, path = %path.display(), "plugin loaded");
    Ok(handle)
}

/// The load error an `init` that did not succeed stands for.
pub(crate) fn init_outcome(
    path: &Path,
    plugin: &str,
    started: Result<(), CallError>,
) -> Result<(), LoadError> {
    match started {
        Ok(()) => Ok(()),
        Err(CallError::TimedOut { timeout, .. }) => Err(LoadError::InitTimedOut {
            path: path.to_owned(),
            plugin: plugin.to_owned(),
            timeout,
        }),
        Err(error) => Err(LoadError::InitFailed {
            path: path.to_owned(),
            plugin: plugin.to_owned(),
            message: match error {
                CallError::Failed { message, .. }
                | CallError::Panicked { message, .. }
                | CallError::Refused { message, .. } => message,
                other => other.to_string(),
            },
        }),
    }
}

/// The optional call member at `offset` of a plugin's table, read only
/// when the table's `struct_size` reaches past it (else not supported).
///
/// # Safety
///
/// `vtable` points to a plugin table of at least `struct_size` readable
/// bytes, and `offset` is the offset of a [`VooduCallFn`] member of
/// [`VooduPluginV1`].
unsafe fn optional_call_member(
    vtable: *const VooduPluginV1,
    struct_size: usize,
    offset: usize,
) -> voodu_plugin_abi::ffi::VooduCallFn {
    if struct_size < offset + std::mem::size_of::<voodu_plugin_abi::ffi::VooduCallFn>() {
        return None;
    }
    // SAFETY: the caller's contract; the member lies inside the table.
    unsafe {
        vtable
            .cast::<u8>()
            .add(offset)
            .cast::<voodu_plugin_abi::ffi::VooduCallFn>()
            .read_unaligned()
    }
}
