//! The C sample plugin `haproxy`, compiled from `config.c`, `render.c`,
//! `sockets.c` and `vtable.c` (with cJSON) by this crate's build script. The crate exists so the workspace build compiles the C, and
//! so tests can find the shared object.

/// The absolute path of the compiled `libvoodu_haproxy.so`.
pub const PLUGIN_PATH: &str = env!("VOODU_HAPROXY_PLUGIN");
