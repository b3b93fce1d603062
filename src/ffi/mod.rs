//! The C ABI (`extern "C"`), the library's only `unsafe` boundary (docs/c-api.md).
//!
//! Every export is a plain `#[no_mangle] pub extern "C" fn` whose body sits inside
//! [`panic::ffi_panic_boundary!`] (a test in `tests/ffi_boundary.rs` checks this), so
//! cbindgen sees each function as written and no panic reaches C.
//!
//! Conventions (the header repeats them):
//! - `int` results: `>= 0` success (a count for list ops), `< 0` a negative errno or `-E_XCE_*`.
//! - Handle first, then inputs, then outputs; a buffer is followed by its length.
//! - A NULL handle or required pointer is `-EINVAL` and nothing is touched; out-parameters are
//!   written only on success; `(NULL, 0)` is an empty array.
//! - The library installs no signal handler and no global logger; callbacks run on the thread
//!   that called into the library. Its only threads are short-lived getaddrinfo helpers for host
//!   names (F23, `transport::resolve`): all signals blocked, no callback, no log.
//!
//! Modules: `panic` (boundary), `cast` (handles, NULL checks), `types` (C structs and frees),
//! `config` (configuration and lifecycle), `ops` (one export per op), `hooks` (callbacks,
//! logging, stats, last error).

#![allow(non_camel_case_types)]
// Exports take raw pointers from C by design; their contract is documented on each function
// (and in the header). Marking them `unsafe fn` would change nothing for C callers.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod cast;
pub(crate) mod panic;
pub(crate) mod signal;

/// The Rust API the C surface is built on, in one place (client, failover knobs, log sink).
pub(crate) mod client {
    pub use crate::client::*;
    pub use crate::failover::classify::AttemptOutcome;
    pub use crate::failover::log;
    pub use crate::failover::Event;
    pub use crate::failover::{ClientOption, Endpoint, RetryConfig};
}

pub mod config;
pub mod hooks;
pub mod log;
pub mod ops;
pub mod outbox;
pub mod types;

use std::os::raw::{c_char, c_int};

use panic::ffi_panic_boundary;

// The header's numeric defines. cbindgen reads literals only, so the values are repeated
// here and tied to their source of truth by the const assertions below.

/// Library version, major (checked against Cargo.toml by a test).
pub const XCE_VERSION_MAJOR: u32 = 0;
/// Library version, minor.
pub const XCE_VERSION_MINOR: u32 = 1;
/// Library version, patch.
pub const XCE_VERSION_PATCH: u32 = 0;

/// Standby; primary address attached (docs/protocol.md).
pub const E_XCE_REDIRECT: c_int = 2001;
/// Standby; no primary known.
pub const E_XCE_NOMASTER: c_int = 2002;
/// Initialising or electing; also the client's "cluster not ready".
pub const E_XCE_NOT_READY: c_int = 2003;
/// Primary-only op sent to a standby.
pub const E_XCE_STANDBY: c_int = 2004;
/// Job id already exists.
pub const E_XCE_DUP_JOB: c_int = 2005;
/// Malformed, oversized or unexpected message; version mismatch.
pub const E_XCE_PROTO: c_int = 2006;
/// Authentication failed, or the op needs a joined session.
pub const E_XCE_AUTH: c_int = 2007;
/// TLS handshake or certificate verification failed.
pub const E_XCE_TLS: c_int = 2008;
/// A library bug caught at the C boundary (a panic).
pub const E_XCE_INTERNAL: c_int = 2009;
/// The context is stopped or being stopped (`xcecli_stop`): the call was not made.
pub const E_XCE_CLOSED: c_int = 2010;
/// A controller's host name could not be resolved (F23; the last error has getaddrinfo's
/// reason). A lookup that runs out of time is `-ETIMEDOUT`.
pub const E_XCE_LOOKUP: c_int = 2011;
/// A reply too large for one frame that cannot be split; deterministic, never a failover.
pub const E_XCE_TOOBIG: c_int = 2012;
/// A controller placed the write in its log but could not confirm it (F19): re-sent with the
/// same request id within the budget; reported after it as `E_XCE_NOT_READY` with
/// `maybe_applied = 1`.
pub const E_XCE_UNKNOWN: c_int = 2013;
/// The context's outbox of notifications and heartbeats is full (F12): not accepted.
pub const E_XCE_OUTBOX_FULL: c_int = 2014;
/// A stop was requested on the context (`xcecli_request_stop`, F27): the call was ended or
/// not made. Stays until `xcecli_clear_stop_request` or `xcecli_stop`.
pub const E_XCE_STOP_REQUESTED: c_int = 2015;
/// C24: the primary refused new work (a job submission, a task) because its storage quota is
/// reached (the NOSPACE alarm); reads and kills go on. Deterministic: never a failover.
pub const E_XCE_NOSPACE: c_int = 2016;
/// C19: the cluster's CORRUPT alarm is raised (its replicas' states differ where no log id
/// can tell which is right): writes are refused until an operator repairs it; reads go on.
/// The same on every controller: never retried.
pub const E_XCE_CORRUPT: c_int = 2017;

/// Asserts at compile time that each name has here the value it has in `crate::error`.
macro_rules! same_as_error {
    ($($n:ident)*) => {
        const _: () = { $(assert!($n == crate::error::$n);)* };
    };
}
same_as_error! {
    E_XCE_REDIRECT E_XCE_NOMASTER E_XCE_NOT_READY E_XCE_STANDBY E_XCE_DUP_JOB E_XCE_PROTO
    E_XCE_AUTH E_XCE_TLS E_XCE_INTERNAL E_XCE_CLOSED E_XCE_LOOKUP E_XCE_TOOBIG E_XCE_UNKNOWN
    E_XCE_OUTBOX_FULL E_XCE_STOP_REQUESTED E_XCE_NOSPACE E_XCE_CORRUPT
}

/// The context: one connection to the cluster with its failover state. Opaque to C, and
/// never memory: see `xcecli_ctx_t`.
pub struct xcecli_ctx {
    _private: [u8; 0],
}

/// Handle of a client context, created by `xcecli_start` and released by `xcecli_stop`.
/// Shareable between threads: ops on one context are serialised (F11).
///
/// A handle is a checked value, not a pointer to memory (F20): the library validates it at
/// the start of every call. Using a handle after `xcecli_stop` released it (from another
/// thread, from a callback, or long after) is safe and returns -E_XCE_CLOSED (void functions
/// do nothing), however many handles were created and released since; NULL or a value that
/// was never a handle is -EINVAL. Ops also accept a call handle seen as a context handle
/// (`xcecli_call_ctx`).
pub type xcecli_ctx_t = *mut xcecli_ctx;

/// A call handle of a context (`xcecli_call_new`): opaque to C, and never memory.
pub struct xcecli_call {
    _private: [u8; 0],
}

/// Handle of a call handle, created by `xcecli_call_new` and released by `xcecli_call_free`;
/// a distinct type, so that `xcecli_stop(call)` or `xcecli_call_free(ctx)` does not compile.
/// Checked like `xcecli_ctx_t`: after `xcecli_call_free` it is -E_XCE_CLOSED, never freed
/// memory. Pass `xcecli_call_ctx(call)` to ops.
pub type xcecli_call_t = *mut xcecli_call;

/// Returns the static text of any status or code, either sign: errno texts for errno values,
/// the protocol's texts for `E_XCE_*` (`E_XCE_NOT_READY` → "cluster not ready"), "success"
/// for 0. Never NULL; the string is static (do not free). Thread-safe.
#[no_mangle]
pub extern "C" fn xce_strerror(code: c_int) -> *const c_char {
    ffi_panic_boundary! { "xce_strerror",
        strerror_static(code)
    }
}

/// `strerror` texts as static C strings, interned once per distinct text.
fn strerror_static(code: c_int) -> *const c_char {
    use std::collections::BTreeMap;
    use std::ffi::CString;
    static TEXTS: crate::process::ForkLock<BTreeMap<&'static str, &'static std::ffi::CStr>> =
        crate::process::ForkLock::new(BTreeMap::new(), |_| {});
    let text = crate::strerror(code);
    let mut map = TEXTS.lock();
    // Bounded: strerror has a fixed, finite set of texts; each is leaked at most once.
    map.entry(text)
        .or_insert_with(|| {
            let c = CString::new(text).unwrap_or_else(|_| c"unknown error".into());
            Box::leak(c.into_boxed_c_str())
        })
        .as_ptr()
}

/// Returns the library version as a static string ("MAJOR.MINOR.PATCH"). Never NULL; do not
/// free. Thread-safe.
#[no_mangle]
pub extern "C" fn xce_version() -> *const c_char {
    ffi_panic_boundary! { "xce_version",
        concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn version_defines_match_cargo_toml() {
        let v = |s: &str| s.parse::<u32>().unwrap();
        assert_eq!(XCE_VERSION_MAJOR, v(env!("CARGO_PKG_VERSION_MAJOR")));
        assert_eq!(XCE_VERSION_MINOR, v(env!("CARGO_PKG_VERSION_MINOR")));
        assert_eq!(XCE_VERSION_PATCH, v(env!("CARGO_PKG_VERSION_PATCH")));
        // SAFETY: static NUL-terminated string.
        let s = unsafe { CStr::from_ptr(xce_version()) };
        assert_eq!(s.to_str(), Ok(env!("CARGO_PKG_VERSION")));
    }

    #[test]
    fn strerror_either_sign_and_stable_pointer() {
        for (code, _) in crate::error::XCE_CODES {
            assert_eq!(xce_strerror(code), xce_strerror(-code));
        }
        // SAFETY: static NUL-terminated strings.
        unsafe {
            assert_eq!(
                CStr::from_ptr(xce_strerror(-E_XCE_NOT_READY)).to_str(),
                Ok("cluster not ready")
            );
            assert_eq!(
                CStr::from_ptr(xce_strerror(-libc::ECONNREFUSED)).to_str(),
                Ok("Connection refused")
            );
        }
    }
}
