//! The Rust SDK's reading of every host request, through the real C entry
//! points of a plugin built with it: any bytes to validate, publish, drain
//! and forget must come back as an ok, refused or error reply that the
//! host can free, never a panic across the boundary.
#![no_main]

use std::ffi::c_void;

use libfuzzer_sys::fuzz_target;
use voodu_plugin_abi::ffi::{VooduBuffer, VooduHostApi, VooduPluginV1, VOODU_ABI_VERSION};
use voodu_plugin_abi::messages::{
    DrainReply, DrainRequest, ForgetRequest, PublishRequest, ValidateReply, ValidateRequest,
};
use voodu_plugin_abi::{Host, Plugin, PluginError};

/// A plugin that reads every field it is given, as a real one would.
struct Reader;

impl Plugin for Reader {
    const NAME: &'static std::ffi::CStr = c"reader";
    const VERSION: &'static std::ffi::CStr = c"0.0.0";

    fn init(_host: Host) -> Result<Self, String> {
        Ok(Reader)
    }

    fn validate(&mut self, request: ValidateRequest) -> Result<ValidateReply, PluginError> {
        if request.block.spec.get("refuse").is_some() {
            return Err(PluginError::Refused("asked to".into()));
        }
        Ok(ValidateReply::new(request.block.spec, Default::default()))
    }

    fn publish(&mut self, request: PublishRequest) -> Result<(), PluginError> {
        let _ = request.endpoints.len();
        Ok(())
    }

    fn drain(&mut self, request: DrainRequest) -> Result<DrainReply, PluginError> {
        let _ = request.budget_ms.saturating_sub(request.elapsed_ms);
        Ok(DrainReply::Drained)
    }

    fn forget(&mut self, _request: ForgetRequest) -> Result<(), PluginError> {
        Ok(())
    }
}

static VTABLE: VooduPluginV1 = voodu_plugin_abi::sdk::vtable::<Reader>();

unsafe extern "C" fn log(_: *mut c_void, _: u32, _: *const u8, _: usize) {}

/// The instance, and the host table it was given (kept reachable here).
struct Instance(*mut c_void, *const VooduHostApi);
unsafe impl Send for Instance {}
unsafe impl Sync for Instance {}

fn instance() -> *mut c_void {
    static INSTANCE: std::sync::OnceLock<Instance> = std::sync::OnceLock::new();
    INSTANCE
        .get_or_init(|| {
            let host: &'static VooduHostApi = Box::leak(Box::new(VooduHostApi {
                abi_version: VOODU_ABI_VERSION,
                struct_size: std::mem::size_of::<VooduHostApi>() as u32,
                host_ctx: std::ptr::null_mut(),
                log: Some(log),
                // The fuzzed calls never ask for a listening socket, report
                // a metric or count connections.
                listen: None,
                unlisten: None,
                metric: None,
                connections: None,
            }));
            let mut instance = std::ptr::null_mut();
            let mut out = VooduBuffer::EMPTY;
            let init = VTABLE.init.expect("init");
            // SAFETY: the ABI's init contract, with a host table that lives forever.
            unsafe { init(host, &mut instance, &mut out) };
            Instance(instance, host)
        })
        .0
}

fuzz_target!(|data: &[u8]| {
    let instance = instance();
    for member in [
        VTABLE.validate,
        VTABLE.publish,
        VTABLE.drain,
        VTABLE.forget,
        VTABLE.configure,
    ]
    .into_iter()
    .flatten()
    {
        let mut out = VooduBuffer::EMPTY;
        // SAFETY: the request outlives the call; the instance came from init.
        let status = unsafe { member(instance, data.as_ptr(), data.len(), &mut out) };
        // 0 ok, 1 refused, 2 error; 3 (panicked) is a panic the fuzzer found.
        assert!((0..=2).contains(&status), "status {status}");
        if !out.ptr.is_null() {
            // SAFETY: a reply must be JSON the host can read, then freed by the plugin.
            let body = unsafe { std::slice::from_raw_parts(out.ptr, out.len) };
            assert!(serde_json::from_slice::<serde_json::Value>(body).is_ok() || body.is_empty());
            unsafe { (VTABLE.free.expect("free"))(instance, out) };
        }
    }
});
