//! Handles ↔ Rust values, and the small conversions every export needs (C strings, slices,
//! fixed-size fields, `XCE_*` integers ↔ enums, a callback's opaque `arg` as [`UserData`]).
//!
//! F20 (amended): a handle C holds (`xcecli_ctx_t`, `xcecli_call_t`) is never a pointer to
//! memory: it is the value of a generation-checked slot of the process's handle table
//! ([`crate::process::handles`]). Every export looks the handle up under the table's lock and
//! clones the [`Client`](crate::client::Client) out of it (`try_ctx!`): the call then holds its
//! own reference to the context, and a handle released meanwhile (by `xcecli_stop` from a
//! callback, or on another thread) is a stopped context to it. A handle released before the
//! export looks it up is refused: `-E_XCE_CLOSED`, however many handles were released since.
//! NULL, a value that was never a handle, and a handle of the other kind are `-EINVAL`.

use std::os::raw::{c_char, c_int, c_void};

use crate::client::Client;
use crate::process::handles::{HandleTable, Kind, Refused};
use crate::process::ForkLock;

/// Mappings between `XCE_*` integers and Rust enums, one row per enum. `in f -> T`: a checked
/// conversion from C (`None` → the export returns -EINVAL); `out g <- T`: the value handed to
/// C (exhaustive: a new variant needs its constant); `both f, g: T`: the two.
macro_rules! c_enums {
    () => {};
    (in $f:ident -> $t:path { $($c:ident => $v:ident),* } $($rest:tt)*) => {
        pub(crate) fn $f(v: i32) -> Option<$t> {
            type E = $t;
            Some(match v { $($c => E::$v,)* _ => return None })
        }
        $crate::ffi::cast::c_enums!($($rest)*);
    };
    (out $g:ident <- $t:path { $($v:ident => $c:ident),* } $($rest:tt)*) => {
        pub(crate) fn $g(v: $t) -> i32 {
            type E = $t;
            match v { $(E::$v => $c,)* }
        }
        $crate::ffi::cast::c_enums!($($rest)*);
    };
    (both $f:ident, $g:ident: $t:path { $($c:ident => $v:ident),* } $($rest:tt)*) => {
        $crate::ffi::cast::c_enums! {
            in $f -> $t { $($c => $v),* }
            out $g <- $t { $($v => $c),* }
            $($rest)*
        }
    };
}
pub(crate) use c_enums;

/// A C callback's opaque argument (the reconnect hook's, the event handler's, the log sink's).
#[derive(Clone, Copy)]
pub(crate) struct UserData(pub(crate) *mut c_void);

// SAFETY: the library never dereferences the pointer; it only hands it back to the C callback
// on whatever thread calls into the context. Thread-safety of what it points to is the
// caller's contract (documented on each setter).
unsafe impl Send for UserData {}
// SAFETY: as above; shared access only copies the pointer value.
unsafe impl Sync for UserData {}

// Handles are 64-bit values (index and generation, process::handles).
const _: () = assert!(usize::BITS == 64, "libxce handles need 64-bit pointers");

/// The process's handles. Nothing is dropped under its lock (a dropped Client may be the last
/// reference to a context, whose drop closes descriptors).
static HANDLES: ForkLock<HandleTable<Client>> = ForkLock::new(HandleTable::new(), |_| {
    super::signal::readers_gone_after_fork()
});

/// Runs `f` on the calling thread while it holds the handle table's lock (tests: a fork while
/// another thread holds it, F26; `f` says when it has it and decides when to let go).
#[doc(hidden)]
pub fn hold_handle_table_while<F: FnOnce()>(f: F) {
    let _table = HANDLES.lock();
    f();
}

/// The status for a refused handle.
fn refused(r: Refused) -> c_int {
    match r {
        Refused::Released => -crate::error::E_XCE_CLOSED,
        Refused::WrongKind | Refused::Foreign => -libc::EINVAL,
    }
}

/// Stores `client` as a new handle of `kind` (the client learns its handle, for callbacks).
/// `None` when the table is full.
pub(crate) fn new_handle(kind: Kind, client: Client) -> Option<u64> {
    let mut table = HANDLES.lock();
    let h = table.insert_with(kind, |h| client.with_handle_id(h as usize))?;
    // Still under the lock: the handle is not released before it is published (F27).
    if let Ok((_, c)) = table.get_any(h) {
        super::signal::publish(h, c.wake_state());
    }
    Some(h)
}

/// The client behind a live handle of either kind (an op may be made on a context handle or
/// on a call handle seen as one, `xcecli_call_ctx`).
pub(crate) fn client_of(h: usize) -> Result<Client, c_int> {
    if h == 0 {
        return Err(-libc::EINVAL);
    }
    let table = HANDLES.lock();
    table
        .get_any(h as u64)
        .map(|(_, c)| c.clone())
        .map_err(refused)
}

/// The client behind a live handle of `kind`.
pub(crate) fn client_of_kind(h: usize, kind: Kind) -> Result<Client, c_int> {
    if h == 0 {
        return Err(-libc::EINVAL);
    }
    let table = HANDLES.lock();
    table.get(h as u64, kind).cloned().map_err(refused)
}

/// Releases a handle of `kind`; its client is returned for the caller to stop or drop (after
/// the table's lock is released).
pub(crate) fn release(h: usize, kind: Kind) -> Result<Client, c_int> {
    if h == 0 {
        return Err(-libc::EINVAL);
    }
    let removed = {
        let mut table = HANDLES.lock();
        let removed = table.remove(h as u64, kind);
        if removed.is_ok() {
            // Before the slot can serve another handle and before the client (maybe the
            // context's last reference) can be dropped (F27). Readers never take this lock.
            super::signal::withdraw(h as u64);
        }
        removed
    };
    removed.map_err(refused)
}

/// A paged listing shared by the table and the call fetching a page.
pub(crate) type SharedPager = std::sync::Arc<std::sync::Mutex<crate::client::JobPager>>;

/// The process's listing pagers (`xce_joblist_pager *`): handles like the others (F20).
static PAGERS: ForkLock<HandleTable<SharedPager>> = ForkLock::new(HandleTable::tagged(1), |_| {});

/// Stores a pager as a new handle; `None` when the table is full.
pub(crate) fn new_pager(pager: crate::client::JobPager) -> Option<u64> {
    let shared = std::sync::Arc::new(std::sync::Mutex::new(pager));
    PAGERS.lock().insert_with(Kind::Pager, |_| shared)
}

/// The pager behind a live pager handle.
pub(crate) fn pager_of(h: usize) -> Result<SharedPager, c_int> {
    if h == 0 {
        return Err(-libc::EINVAL);
    }
    let table = PAGERS.lock();
    table.get(h as u64, Kind::Pager).cloned().map_err(refused)
}

/// Releases a pager handle; the pager is returned to be dropped outside the lock.
pub(crate) fn close_pager(h: usize) -> Option<SharedPager> {
    let removed = PAGERS.lock().remove(h as u64, Kind::Pager);
    removed.ok()
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

/// Returns `-EINVAL` from the enclosing export when `$opt` is `None` (a NULL pointer, a
/// string that is not UTF-8, an unknown `XCE_*` integer…); else its value.
macro_rules! try_arg {
    ($opt:expr) => {
        match $opt {
            Some(v) => v,
            None => return -::libc::EINVAL,
        }
    };
}

/// Returns `-EINVAL` from the enclosing export when a pointer argument is NULL.
macro_rules! try_ref {
    // SAFETY: a non-NULL pointer C passed in is valid for the call (documented contract).
    ($ptr:expr) => {
        $crate::ffi::cast::try_arg!(unsafe { $ptr.as_ref() })
    };
}

/// Like `try_ref!` for an out-parameter: `&mut` to the place the result goes.
macro_rules! try_mut {
    // SAFETY: a non-NULL out-pointer C passed in is writable for the call.
    ($ptr:expr) => {
        $crate::ffi::cast::try_arg!(unsafe { $ptr.as_mut() })
    };
}

/// Returns `-EINVAL` when a C string is NULL or not UTF-8; else the borrowed `&str`.
macro_rules! try_str {
    // SAFETY: a non-NULL string C passed in is NUL-terminated (documented contract).
    ($ptr:expr) => {
        $crate::ffi::cast::try_arg!(unsafe { $crate::ffi::cast::str_from_c($ptr) })
    };
}

/// Returns `-EINVAL` for a bad (pointer, count) pair; `(NULL, 0)` is empty.
macro_rules! try_slice {
    // SAFETY: a non-NULL array C passed in holds `len` elements (documented contract).
    ($ptr:expr, $len:expr) => {
        $crate::ffi::cast::try_arg!(unsafe { $crate::ffi::cast::slice_from_c($ptr, $len) })
    };
}

/// The client behind a handle (a context handle, or a call handle seen as one), cloned for the
/// duration of the export: it holds its own reference to the context and knows its handle for
/// callbacks. Returns from the export with `-EINVAL` (NULL, foreign) or `-E_XCE_CLOSED`
/// (released) otherwise.
macro_rules! try_ctx {
    ($ctx:expr) => {
        match $crate::ffi::cast::client_of($ctx as usize) {
            Ok(c) => c,
            Err(code) => return code,
        }
    };
}

pub(crate) use {try_arg, try_ctx, try_mut, try_ref, try_slice, try_str};

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
