//! The panic boundary: no Rust panic ever unwinds into C (docs/c-api.md, "Calls and return values").
//!
//! Unwinding out of an `extern "C" fn` aborts the whole process (a C daemon, or the Go
//! apiserver), so every export wraps its body in [`ffi_panic_boundary!`]. A caught panic is
//! logged once through the library's log sink and turned into the function's "panic value":
//! `-E_XCE_INTERNAL` for `int`, NULL for pointers, nothing for `void`.
//!
//! A leaf of the C surface, as in rustls-ffi: every export uses it, and it uses nothing of
//! `ffi` (only the status codes and the log sink of the layers below).

use std::any::Any;

use crate::error::E_XCE_INTERNAL;
use crate::failover::log::{xlog, Level};

/// The value an export returns when its body panicked.
pub(crate) trait PanicValue {
    fn panic_value() -> Self;
}

impl PanicValue for std::os::raw::c_int {
    fn panic_value() -> Self {
        -E_XCE_INTERNAL
    }
}

impl PanicValue for u64 {
    /// `0` is never a valid job id or counter value the caller could confuse with data.
    fn panic_value() -> Self {
        0
    }
}

impl PanicValue for () {
    fn panic_value() -> Self {}
}

impl<T> PanicValue for *const T {
    fn panic_value() -> Self {
        std::ptr::null()
    }
}

impl<T> PanicValue for *mut T {
    fn panic_value() -> Self {
        std::ptr::null_mut()
    }
}

/// Logs a caught panic; called only from the boundary macro. Must not panic itself.
pub(crate) fn report_panic(function: &str, payload: &(dyn Any + Send)) {
    let what = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(non-string payload)");
    // The sink may itself be a C callback; a second panic there is caught and dropped so that
    // the boundary still returns its value.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        xlog!(
            Level::Error,
            "panic caught at the C boundary in {function}: {what}"
        );
    }));
}

/// Runs the body of an export, catching any panic.
///
/// The body is a closure body: `return` inside it (as the NULL-check macros do) returns
/// from the export with that value. The export's return type must implement `PanicValue`.
macro_rules! ffi_panic_boundary {
    ( $fn_name:literal, $($body:tt)* ) => {
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(|| { $($body)* })) {
            Ok(value) => value,
            Err(payload) => {
                $crate::ffi::panic::report_panic($fn_name, &*payload);
                $crate::ffi::panic::PanicValue::panic_value()
            }
        }
    };
}

pub(crate) use ffi_panic_boundary;

#[cfg(test)]
mod tests {
    use std::os::raw::c_int;

    fn int_export(do_panic: bool) -> c_int {
        ffi_panic_boundary! { "int_export",
            if do_panic {
                panic!("boom");
            }
            7
        }
    }

    fn ptr_export() -> *const u8 {
        ffi_panic_boundary! { "ptr_export",
            panic!("boom {}", 1)
        }
    }

    fn early_return() -> c_int {
        ffi_panic_boundary! { "early_return",
            if true {
                return -22;
            }
            #[allow(unreachable_code)]
            0
        }
    }

    #[test]
    fn panics_become_panic_values() {
        assert_eq!(int_export(false), 7);
        assert_eq!(int_export(true), -crate::error::E_XCE_INTERNAL);
        assert!(ptr_export().is_null());
        assert_eq!(early_return(), -22);
    }
}
