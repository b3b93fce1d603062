//! Logging at the C boundary (F14): a C caller can replace the library's sink (stderr by
//! default, level from `XCE_LOG`) and change the level. Nothing is installed globally behind
//! the caller's back: the sink is the library's own, set lazily and idempotently.

use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_void};

use super::cast::UserData;
use super::client::log as sink;
use super::panic::ffi_panic_boundary;

/// Log level: nothing.
pub const XCE_LOG_OFF: c_int = 0;
/// Log level: errors (and caught panics).
pub const XCE_LOG_ERROR: c_int = 1;
/// Log level: warnings (budget exhausted, ignored redirect hints).
pub const XCE_LOG_WARN: c_int = 2;
/// Log level: info (every rotation).
pub const XCE_LOG_INFO: c_int = 3;
/// Log level: debug.
pub const XCE_LOG_DEBUG: c_int = 4;

super::cast::c_enums! {
    both level_from_c, level_to_c: sink::Level { XCE_LOG_OFF => Off, XCE_LOG_ERROR => Error,
        XCE_LOG_WARN => Warn, XCE_LOG_INFO => Info, XCE_LOG_DEBUG => Debug }
}

/// Receives one log line: `level` is `XCE_LOG_*`, `msg` a NUL-terminated line without a
/// trailing newline, borrowed for the duration of the call.
pub type xce_log_cb = Option<extern "C" fn(level: c_int, msg: *const c_char, arg: *mut c_void)>;

/// Replaces the library's log sink for the whole process; `cb` NULL restores the default
/// (stderr). `arg` is passed back unchanged and must stay valid until the sink is replaced.
/// `cb` runs on the thread that logs (a thread calling into the library) and may be called
/// from several threads at once. Returns 0 once the previous sink is not running on another
/// thread and never runs again (F20; it waits for such a run to return). Returns -EDEADLK, at
/// once, when that wait would never end — a thread running the previous sink waits, directly
/// or through others, for this thread (say the sink stops the context whose callback called
/// this): `cb` is installed all the same, the previous sink may still be running there and its
/// `arg` must stay valid until it returns. Thread-safe.
#[no_mangle]
pub extern "C" fn xce_set_log_handler(cb: xce_log_cb, arg: *mut c_void) -> c_int {
    ffi_panic_boundary! { "xce_set_log_handler",
        let new_sink: Option<sink::LogSink> = cb.map(|cb| {
            let arg = UserData(arg);
            std::sync::Arc::new(move |level: sink::Level, line: &str| {
                let arg = arg;
                // An interior NUL would truncate the line in C; cut it there explicitly.
                let line = line.split('\0').next().unwrap_or("");
                if let Ok(c) = CString::new(line) {
                    cb(level_to_c(level), c.as_ptr(), arg.0);
                }
            }) as sink::LogSink
        });
        if sink::set_sink(new_sink) { 0 } else { -libc::EDEADLK }
    }
}

/// Sets the log level (`XCE_LOG_OFF`..`XCE_LOG_DEBUG`) for the whole process, overriding
/// `XCE_LOG`. Returns the previous level, or -EINVAL for an unknown level. Thread-safe.
#[no_mangle]
pub extern "C" fn xce_set_log_level(level: c_int) -> c_int {
    ffi_panic_boundary! { "xce_set_log_level",
        let Some(level) = level_from_c(level) else {
            return -libc::EINVAL;
        };
        let previous = sink::level();
        sink::set_level(level);
        level_to_c(previous)
    }
}

/// Logs an error line from the FFI layer (a handle of the wrong kind, a count that does not
/// match on free).
pub(crate) fn error(msg: &str) {
    sink::log(sink::Level::Error, format_args!("{msg}"));
}
