//! The C sample plugin `echo_c`, compiled from `echo_c.c` by this crate's
//! build script. The crate exists so the workspace build compiles the C, and
//! so tests can find the shared object.

/// The absolute path of the compiled `libvoodu_echo_c.so`.
pub const PLUGIN_PATH: &str = env!("VOODU_ECHO_C_PLUGIN");
