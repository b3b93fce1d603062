//! Opaque handles ↔ Rust values, with the ownership rule of each handle type stated once.
//!
//! A C-visible opaque type implements [`Castable`], naming its Rust type and how C holds it.
//! The helpers below only exist for the matching ownership, so converting a borrowed handle
//! into a `Box`, or freeing something C merely borrows, does not compile.
//!
//! A context handle (`xcecli_ctx_t`) is a **Box** holding a [`Client`](crate::client::Client),
//! itself a handle to the Arc-shared context. `xcecli_start` and `xcecli_call_new` create one
//! and hand C the only owning pointer; `xcecli_stop` / `xcecli_call_free` take it back. Every
//! other export starts by cloning the `Client` out of the Box (`try_ctx!`): the call then holds
//! its own reference to the context, so a handle freed while the call runs (by `xcecli_stop`
//! from a callback, F20) never leaves the call with a dangling context.

use std::os::raw::c_char;

/// Marker: C owns a `Box<RustType>` created by the library (freed by one library call).
pub(crate) struct OwnershipBox;

/// Ties an opaque C type to the Rust type behind its pointer and to its ownership.
pub(crate) trait Castable {
    /// How C holds a pointer to this type.
    type Ownership;
    /// The Rust value the opaque pointer really points to.
    type RustType;
}

/// Hands a boxed value to C. The pointer must come back to the library exactly once (`xcecli_stop`, `xcecli_call_free`).
pub(crate) fn to_boxed_mut_ptr<C>(value: C::RustType) -> *mut C
where
    C: Castable<Ownership = OwnershipBox>,
{
    Box::into_raw(Box::new(value)).cast()
}

/// Borrows the Rust value behind a C pointer for the duration of a call; `None` for NULL.
///
/// # Safety
/// `ptr` is NULL or was returned by [`to_boxed_mut_ptr`] for the same `C` and not freed yet.
pub(crate) unsafe fn try_from<'a, C>(ptr: *const C) -> Option<&'a C::RustType>
where
    C: Castable,
{
    // SAFETY: by the caller's contract the pointer is a live `RustType` (or NULL).
    unsafe { ptr.cast::<C::RustType>().as_ref() }
}

/// A borrowed slice from a C pointer and a count: `(NULL, 0)` and `(p, 0)` are empty,
/// `(NULL, n > 0)` is an error (`None`). Never calls `from_raw_parts` with NULL (quiche #1914, hyper #4033).
///
/// # Safety
/// When `ptr` is not NULL it points to `len` initialised `T`s that outlive `'a`.
pub(crate) unsafe fn slice_from_c<'a, T>(ptr: *const T, len: usize) -> Option<&'a [T]> {
    if len == 0 {
        Some(&[])
    } else if ptr.is_null() {
        None
    } else {
        // SAFETY: non-NULL, non-empty, caller guarantees `len` valid elements.
        Some(unsafe { std::slice::from_raw_parts(ptr, len) })
    }
}

/// A borrowed `&str` from a NUL-terminated C string: `None` for NULL or invalid UTF-8.
///
/// # Safety
/// When `ptr` is not NULL it points to a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn str_from_c<'a>(ptr: *const c_char) -> Option<&'a str> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    unsafe { std::ffi::CStr::from_ptr(ptr) }.to_str().ok()
}

/// Reads a fixed-size `char[N]` field: the text up to the first NUL. No NUL within the
/// array (unterminated) or invalid UTF-8 → `None`.
pub(crate) fn fixed_str(buf: &[c_char]) -> Option<&str> {
    // SAFETY: c_char and u8 have the same size and alignment; we only read.
    let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), buf.len()) };
    let end = bytes.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&bytes[..end]).ok()
}

/// Writes `s` into a fixed-size `char[N]` field, NUL-terminated. Fails (nothing written)
/// when `s` plus its NUL does not fit or contains a NUL.
pub(crate) fn set_fixed_str(buf: &mut [c_char], s: &str) -> bool {
    if s.len() >= buf.len() || s.as_bytes().contains(&0) {
        return false;
    }
    for (dst, &src) in buf.iter_mut().zip(s.as_bytes()) {
        *dst = src as c_char;
    }
    buf[s.len()..].fill(0);
    true
}

/// Returns `-EINVAL` from the enclosing export when a pointer argument is NULL.
macro_rules! try_ref {
    ($ptr:expr) => {
        // SAFETY: a non-NULL pointer C passed in is valid for the call (documented contract).
        match unsafe { $ptr.as_ref() } {
            Some(r) => r,
            None => return -::libc::EINVAL,
        }
    };
}

/// Like `try_ref!` for an out-parameter: `&mut` to the place the result goes.
macro_rules! try_mut {
    ($ptr:expr) => {
        // SAFETY: a non-NULL out-pointer C passed in is writable for the call.
        match unsafe { $ptr.as_mut() } {
            Some(r) => r,
            None => return -::libc::EINVAL,
        }
    };
}

/// Returns `-EINVAL` when a C string is NULL or not UTF-8; else the borrowed `&str`.
macro_rules! try_str {
    ($ptr:expr) => {
        // SAFETY: a non-NULL string C passed in is NUL-terminated (documented contract).
        match unsafe { $crate::ffi::cast::str_from_c($ptr) } {
            Some(s) => s,
            None => return -::libc::EINVAL,
        }
    };
}

/// Returns `-EINVAL` for a bad (pointer, count) pair; `(NULL, 0)` is empty.
macro_rules! try_slice {
    ($ptr:expr, $len:expr) => {
        // SAFETY: a non-NULL array C passed in holds `len` elements (documented contract).
        match unsafe { $crate::ffi::cast::slice_from_c($ptr, $len) } {
            Some(s) => s,
            None => return -::libc::EINVAL,
        }
    };
}

/// The client behind a context handle, cloned for the duration of the export (it holds its own
/// reference to the context, and knows its handle for callbacks); `-EINVAL` for NULL.
macro_rules! try_ctx {
    ($ctx:expr) => {
        // SAFETY: a non-NULL ctx comes from xcecli_start or xcecli_call_new and was not freed
        // before this call began (documented).
        match unsafe { $crate::ffi::cast::try_from::<$crate::ffi::xcecli_ctx>($ctx) } {
            Some(c) => c.clone().with_handle_id($ctx as usize),
            None => return -::libc::EINVAL,
        }
    };
}

pub(crate) use {try_ctx, try_mut, try_ref, try_slice, try_str};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices() {
        // SAFETY: test pointers are NULL or valid.
        unsafe {
            assert_eq!(slice_from_c::<u32>(std::ptr::null(), 0), Some(&[][..]));
            assert_eq!(slice_from_c::<u32>(std::ptr::null(), 3), None);
            let v = [1u32, 2];
            assert_eq!(slice_from_c(v.as_ptr(), 2), Some(&v[..]));
        }
    }

    #[test]
    fn strings() {
        // SAFETY: test pointers are NULL or NUL-terminated.
        unsafe {
            assert_eq!(str_from_c(std::ptr::null()), None);
            assert_eq!(str_from_c(c"abc".as_ptr()), Some("abc"));
            assert_eq!(str_from_c(c"\xff".as_ptr()), None);
        }
        let mut buf = [0 as c_char; 4];
        assert!(set_fixed_str(&mut buf, "abc"));
        assert_eq!(fixed_str(&buf), Some("abc"));
        assert!(!set_fixed_str(&mut buf, "abcd"));
        assert_eq!(fixed_str(&buf), Some("abc"));
        let full = [b'x' as c_char; 4];
        assert_eq!(fixed_str(&full), None);
    }
}
