//! The abi_stable root module a Rust plugin exports beside its C entry symbol.
//!
//! It references the same vtable, typed as [`VooduPluginV1Core`]: the frozen
//! ABI 1.0 prefix of [`VooduPluginV1`]. The host runs abi_stable's layout check
//! on it before trusting anything in the library, which yields a precise report
//! (which field, expected and found) when a plugin was built against an
//! incompatible fork of this crate.
//!
//! # What is compared, and why it is pinned
//!
//! abi_stable's defaults fit the wrong direction for an orchestrator:
//!
//! - its version check would compare this crate's version, and
//! - its prefix-type check refuses a library whose root module has *fewer*
//!   fields than the host's.
//!
//! So the root module is frozen: it never grows, its version strings are
//! pinned to the ABI major (`1.0.0`), and it points at the frozen 1.0 layout
//! only. Members added in 1.x minors live in the C vtable after `shutdown`,
//! where the host reads them only when `struct_size` says they are there.
//! A plugin built against any 1.x SDK therefore loads in any 1.y host.

use std::ffi::{c_char, c_void};

use abi_stable::library::RootModule;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::StableAbi;

use crate::ffi::{VooduBuffer, VooduPluginV1, VooduStatus};
use host_api_1_0::VooduHostApi;

/// The frozen ABI 1.0 layout of the host table, as abi_stable sees it.
///
/// The frozen vtable's `init` takes a pointer to the host table, and
/// abi_stable checks the layout behind a pointer too: were it the growing
/// [`crate::ffi::VooduHostApi`], every member a 1.x minor appends to the host
/// table (1.2's `listen`) would make each plugin built before it fail the
/// check. So the check sees this copy, which never grows. Its name is the
/// same on purpose: abi_stable compares a type's name and package, and
/// every plugin built so far declared it under this name.
pub mod host_api_1_0 {
    use std::ffi::c_void;

    use abi_stable::StableAbi;

    use crate::ffi::VooduLogLevel;

    /// The host table as ABI 1.0 declared it; see
    /// [`crate::ffi::VooduHostApi`] for its members. Never change this type.
    #[repr(C)]
    #[derive(StableAbi)]
    pub struct VooduHostApi {
        /// See [`crate::ffi::VooduHostApi::abi_version`].
        pub abi_version: u32,
        /// See [`crate::ffi::VooduHostApi::struct_size`].
        pub struct_size: u32,
        /// See [`crate::ffi::VooduHostApi::host_ctx`].
        pub host_ctx: *mut c_void,
        /// See [`crate::ffi::VooduHostApi::log`].
        pub log: Option<
            unsafe extern "C" fn(
                host_ctx: *mut c_void,
                level: VooduLogLevel,
                message: *const u8,
                message_len: usize,
            ),
        >,
    }

    // The frozen table must stay a byte-for-byte prefix of the growing one.
    const _: () = {
        use std::mem::offset_of;
        type Growing = crate::ffi::VooduHostApi;
        assert!(offset_of!(VooduHostApi, struct_size) == offset_of!(Growing, struct_size));
        assert!(offset_of!(VooduHostApi, host_ctx) == offset_of!(Growing, host_ctx));
        assert!(offset_of!(VooduHostApi, log) == offset_of!(Growing, log));
        assert!(std::mem::size_of::<VooduHostApi>() <= std::mem::size_of::<Growing>());
    };
}

/// The frozen ABI 1.0 layout of [`VooduPluginV1`], member for member, as
/// abi_stable sees it. Never change this type: it is the contract every 1.x
/// plugin was built against. (Not part of the C header; C plugins are checked
/// through `abi_version` and `struct_size` instead.)
#[repr(C)]
#[derive(StableAbi)]
pub struct VooduPluginV1Core {
    /// See [`VooduPluginV1::abi_version`].
    pub abi_version: u32,
    /// See [`VooduPluginV1::struct_size`].
    pub struct_size: u32,
    /// See [`VooduPluginV1::name`].
    pub name: *const c_char,
    /// See [`VooduPluginV1::version`].
    pub version: *const c_char,
    /// See [`VooduPluginV1::init`].
    pub init: Option<
        unsafe extern "C" fn(
            host: *const VooduHostApi,
            out_instance: *mut *mut c_void,
            out: *mut VooduBuffer,
        ) -> VooduStatus,
    >,
    /// See [`VooduPluginV1::validate`].
    pub validate: Option<
        unsafe extern "C" fn(
            instance: *mut c_void,
            request: *const u8,
            request_len: usize,
            out: *mut VooduBuffer,
        ) -> VooduStatus,
    >,
    /// See [`VooduPluginV1::publish`].
    pub publish: Option<
        unsafe extern "C" fn(
            instance: *mut c_void,
            request: *const u8,
            request_len: usize,
            out: *mut VooduBuffer,
        ) -> VooduStatus,
    >,
    /// See [`VooduPluginV1::drain`].
    pub drain: Option<
        unsafe extern "C" fn(
            instance: *mut c_void,
            request: *const u8,
            request_len: usize,
            out: *mut VooduBuffer,
        ) -> VooduStatus,
    >,
    /// See [`VooduPluginV1::forget`].
    pub forget: Option<
        unsafe extern "C" fn(
            instance: *mut c_void,
            request: *const u8,
            request_len: usize,
            out: *mut VooduBuffer,
        ) -> VooduStatus,
    >,
    /// See [`VooduPluginV1::free`].
    pub free: Option<unsafe extern "C" fn(instance: *mut c_void, buffer: VooduBuffer)>,
    /// See [`VooduPluginV1::shutdown`].
    pub shutdown: Option<unsafe extern "C" fn(instance: *mut c_void)>,
}

// The frozen core must stay a byte-for-byte prefix of the C vtable.
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(offset_of!(VooduPluginV1Core, name) == offset_of!(VooduPluginV1, name));
    assert!(offset_of!(VooduPluginV1Core, init) == offset_of!(VooduPluginV1, init));
    assert!(offset_of!(VooduPluginV1Core, validate) == offset_of!(VooduPluginV1, validate));
    assert!(offset_of!(VooduPluginV1Core, free) == offset_of!(VooduPluginV1, free));
    assert!(offset_of!(VooduPluginV1Core, shutdown) == offset_of!(VooduPluginV1, shutdown));
    assert!(size_of::<VooduPluginV1Core>() == crate::ffi::VOODU_PLUGIN_V1_0_SIZE);
};

/// The root module: one function returning the plugin's vtable, the same
/// pointer the C entry symbol returns, typed as the frozen 1.0 layout.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = VooduPluginModuleRef)))]
#[sabi(missing_field(panic))]
pub struct VooduPluginModule {
    /// Returns the plugin's vtable; see [`crate::ffi::VooduPluginEntryV1`].
    #[sabi(last_prefix_field)]
    pub vtable_v1: unsafe extern "C" fn() -> *const VooduPluginV1Core,
}

impl RootModule for VooduPluginModuleRef {
    abi_stable::declare_root_module_statics! {VooduPluginModuleRef}
    const BASE_NAME: &'static str = "voodu_plugin";
    const NAME: &'static str = "voodu_plugin";
    /// Pinned to the ABI major, never this crate's version: abi_stable then
    /// accepts any 1.x plugin, which is the compatibility voodu promises.
    const VERSION_STRINGS: VersionStrings = VersionStrings::new("1.0.0");
}

impl VooduPluginModuleRef {
    /// Builds the root module around a plugin's vtable function. Used by
    /// [`export_plugin!`](crate::export_plugin); leaks one small allocation per
    /// load, which lives as long as the (never unloaded) library.
    pub fn for_vtable(vtable_v1: unsafe extern "C" fn() -> *const VooduPluginV1Core) -> Self {
        use abi_stable::prefix_type::PrefixTypeTrait;
        VooduPluginModule { vtable_v1 }.leak_into_prefix()
    }
}

/// Casts the full vtable pointer to its frozen 1.0 prefix.
pub fn as_core(vtable: *const VooduPluginV1) -> *const VooduPluginV1Core {
    vtable.cast()
}

/// Exports the abi_stable root module of a plugin whose C entry symbol is
/// `$entry`. The plugin crate must depend on `abi_stable` directly, because
/// abi_stable's export attribute names it by absolute path.
#[macro_export]
#[doc(hidden)]
macro_rules! export_root_module_for {
    ($entry:ident) => {
        unsafe extern "C" fn voodu_plugin_vtable_v1(
        ) -> *const $crate::root_module::VooduPluginV1Core {
            $crate::root_module::as_core($entry())
        }

        /// The abi_stable root module of this voodu plugin.
        #[::abi_stable::export_root_module]
        fn voodu_plugin_root_module() -> $crate::root_module::VooduPluginModuleRef {
            $crate::root_module::VooduPluginModuleRef::for_vtable(voodu_plugin_vtable_v1)
        }
    };
}
