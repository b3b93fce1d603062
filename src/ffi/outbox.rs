//! F12 (amended): the outbox of job notifications and heartbeats, seen from C.

use std::os::raw::c_int;
use std::time::Duration;

use super::cast::try_ctx;
use super::panic::ffi_panic_boundary;
use super::xcecli_ctx_t;

/// Most notifications and heartbeats a context keeps waiting for a primary's acknowledgement;
/// one more is refused with -E_XCE_OUTBOX_FULL.
pub const XCE_OUTBOX_MAX: c_int = 128;

const _: () = assert!(XCE_OUTBOX_MAX as usize == crate::failover::retry::outbox::OUTBOX_MAX);

/// Waits until every notification and heartbeat accepted so far on the context of `ctx` was
/// acknowledged by a primary, at most `timeout_ms` (>= 0), failing over as needed (never past
/// the timeout; the reconnect handler runs as for any op). Returns 0 when the outbox is
/// empty; -ETIMEDOUT when the timeout passed first (the rest stay queued,
/// `xcecli_outbox_depth` says how many); -EINTR, -ECANCELED, -E_XCE_CLOSED as any op;
/// -EINVAL for a NULL ctx or a negative timeout. A daemon calls it before `xcecli_stop`:
/// stopping drops what is still queued.
#[no_mangle]
pub extern "C" fn xcecli_flush(ctx: xcecli_ctx_t, timeout_ms: c_int) -> c_int {
    ffi_panic_boundary! { "xcecli_flush",
        let c = try_ctx!(ctx);
        let Ok(ms) = u64::try_from(timeout_ms) else {
            return -libc::EINVAL;
        };
        match c.flush(Duration::from_millis(ms)) {
            Ok(()) => 0,
            Err(e) => e.status(),
        }
    }
}

/// Notifications and heartbeats accepted on the context of `ctx` and not yet acknowledged by
/// a primary (0..=XCE_OUTBOX_MAX); -EINVAL for a NULL ctx. Thread-safe; does not wait for an
/// op in progress. (`xce_stats_t` keeps its layout: this is its own getter.)
#[no_mangle]
pub extern "C" fn xcecli_outbox_depth(ctx: xcecli_ctx_t) -> c_int {
    ffi_panic_boundary! { "xcecli_outbox_depth",
        let c = try_ctx!(ctx);
        c.outbox_depth().min(c_int::MAX as u64) as c_int
    }
}
