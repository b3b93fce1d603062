//! The context behind `xcecli_ctx_t`, callbacks into C (reconnect F10, events F17), stats
//! (F17), the last error report (F19) and the job-id generator.
//!
//! Callbacks run on the thread that called into the library (the library's only threads are
//! short-lived name-lookup helpers, which run no callback), with
//! the handle that call was made on. Their `void *arg` is the caller's: the library stores it,
//! never dereferences it, and passes it back unchanged. Replacing or removing a callback is
//! final when the setter returns (F20): the old one is not running on another thread and never
//! runs again, so the caller may free its `arg` right away.

use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_void};

use super::cast::{set_fixed_str, try_ctx, try_mut, UserData};
use super::client;
use super::config::{XCE_MAXHOSTNAME_LEN, XCE_N_MAX_MASTERS};
use super::panic::ffi_panic_boundary;
use super::xcecli_ctx_t;

/// The index of `e` among `masters`, the context's masters in rotation (the configured ones
/// first, in their order, then those learned, F29), -1 when it is not one (an unlisted hint's
/// host).
fn master_index(masters: &[client::Endpoint], e: &client::Endpoint) -> i32 {
    masters
        .iter()
        .position(|m| m == e)
        .and_then(|i| i32::try_from(i).ok())
        .unwrap_or(-1)
}

/// Called after every successful reconnect, before the interrupted op is re-sent (F10).
/// `ctx` is the handle of the call that reconnected; ops on it from inside the callback run as
/// single attempts on the new connection (typically `xcecli_join`). Return >= 0 to continue,
/// < 0 to fail the attempt (classified like a status).
pub type xcecli_reconnect_cb = Option<extern "C" fn(ctx: xcecli_ctx_t, arg: *mut c_void) -> c_int>;

/// Sets (or with `cb` NULL, removes) the reconnect handler of the context of `ctx` (F10).
/// `arg` is passed back to `cb` unchanged. `cb` runs on the thread of the call that
/// reconnected, while the context is reserved for that thread: it may call ops on the `ctx`
/// it receives, `xcecli_set_reconnect_handler` (a handler that removes itself stays removed)
/// and `xcecli_stop`, but must not wait for another thread that uses the same context.
/// F20: when this returns, the previous handler is not running on any other thread and is
/// never called again, so its `arg` may be freed; called from inside the handler itself, it
/// does not wait for that invocation. Returns 0, -EINVAL (NULL or not a handle),
/// -E_XCE_CLOSED (released handle), or -EDEADLK at once when waiting for the previous handler
/// would never end (the thread running it waits, directly or through others, for this one; the
/// new handler is installed all the same and the old `arg` must stay valid until that run
/// returns). Thread-safe; it waits for a handler running on another thread to return.
#[no_mangle]
pub extern "C" fn xcecli_set_reconnect_handler(
    ctx: xcecli_ctx_t,
    cb: xcecli_reconnect_cb,
    arg: *mut c_void,
) -> c_int {
    ffi_panic_boundary! { "xcecli_set_reconnect_handler",
        let c = try_ctx!(ctx);
        let hook: Option<client::ReconnectHook> = cb.map(|cb| {
            let arg = UserData(arg);
            // The callback gets the handle of the call that reconnected: alive for that call.
            std::sync::Arc::new(move |call: &client::Client| {
                let arg = arg;
                cb(call.handle_id() as xcecli_ctx_t, arg.0)
            }) as client::ReconnectHook
        });
        if c.set_reconnect_handler(hook) { 0 } else { -libc::EDEADLK }
    }
}

/// Event kind: the client moved from one master to another.
pub const XCE_EVENT_ROTATION: i32 = 1;
/// Event kind: the current master was lost; a failover started.
pub const XCE_EVENT_FAILOVER_STARTED: i32 = 2;
/// Event kind: a failover finished on a new (or the same) master.
pub const XCE_EVENT_FAILOVER_FINISHED: i32 = 3;
/// Event kind: a call gave up with "cluster not ready".
pub const XCE_EVENT_NOT_READY: i32 = 4;

/// One event (F17). The struct and its strings are borrowed for the duration of the
/// callback only.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct xce_event_t {
    /// `XCE_EVENT_*`.
    pub kind: i32,
    /// The status that caused it (a negative errno or -E_XCE_*; 0 when none).
    pub status: i32,
    /// ROTATION, FAILOVER_STARTED: the master left ("" otherwise).
    pub from_host: *const c_char,
    pub from_port: u16,
    /// ROTATION, FAILOVER_FINISHED: the master reached ("" otherwise).
    pub to_host: *const c_char,
    pub to_port: u16,
    /// NOT_READY: attempts made by the call (0 otherwise).
    pub attempts: u32,
    /// FAILOVER_FINISHED: failover duration; NOT_READY: time spent in the call; ms.
    pub duration_ms: u64,
}

/// Receives events of a context on the thread of the call that caused them.
pub type xcecli_event_cb =
    Option<extern "C" fn(ctx: xcecli_ctx_t, event: *const xce_event_t, arg: *mut c_void)>;

/// Sets (or with `cb` NULL, removes) the event handler of the context of `ctx` (F17). `arg`
/// as for `xcecli_set_reconnect_handler`. The callback runs on the thread of the call that
/// caused the event, with that call's handle, while the call owns the context: it may call
/// `xcecli_get_stats`, `xcecli_last_error`, the setters and `xcecli_stop`, but an op on the
/// same context from inside it fails with -EDEADLK; it must not block for long. F20: final
/// when it returns, as for `xcecli_set_reconnect_handler`, with the same return values
/// (-EDEADLK included). Thread-safe.
#[no_mangle]
pub extern "C" fn xcecli_set_event_handler(
    ctx: xcecli_ctx_t,
    cb: xcecli_event_cb,
    arg: *mut c_void,
) -> c_int {
    ffi_panic_boundary! { "xcecli_set_event_handler",
        let c = try_ctx!(ctx);
        let handler: Option<client::EventHandlerWithHandle> = cb.map(|cb| {
            let arg = UserData(arg);
            std::sync::Arc::new(move |call: &client::Client, ev: &client::Event| {
                let arg = arg;
                deliver_event(ev, |e| cb(call.handle_id() as xcecli_ctx_t, e, arg.0));
            }) as client::EventHandlerWithHandle
        });
        if c.set_event_handler_with_handle(handler) { 0 } else { -libc::EDEADLK }
    }
}

fn outcome_status(o: &client::AttemptOutcome) -> i32 {
    match *o {
        client::AttemptOutcome::Status(s) => s,
        client::AttemptOutcome::Transport(e) => e.status(),
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Builds the C view of `ev` (with its strings alive) and hands it to `deliver`.
fn deliver_event(ev: &client::Event, deliver: impl FnOnce(&xce_event_t)) {
    use client::Event as E;
    let host = |e: Option<&client::Endpoint>| {
        let h = e.map_or("", |e| e.host.as_str());
        CString::new(h.split('\0').next().unwrap_or("")).unwrap_or_default()
    };
    let port = |e: Option<&client::Endpoint>| e.map_or(0, |e| e.port);
    let (kind, status, from, to, attempts, duration_ms) = match ev {
        E::Rotation { from, to, cause } => (
            XCE_EVENT_ROTATION,
            outcome_status(cause),
            Some(from),
            Some(to),
            0,
            0,
        ),
        E::FailoverStarted { from, cause } => (
            XCE_EVENT_FAILOVER_STARTED,
            outcome_status(cause),
            Some(from),
            None,
            0,
            0,
        ),
        E::FailoverFinished { to, duration } => (
            XCE_EVENT_FAILOVER_FINISHED,
            0,
            None,
            Some(to),
            0,
            millis(*duration),
        ),
        E::NotReady {
            error,
            attempts,
            elapsed,
        } => (
            XCE_EVENT_NOT_READY,
            error.status(),
            None,
            None,
            *attempts,
            millis(*elapsed),
        ),
    };
    let (from_host, to_host) = (host(from), host(to));
    deliver(&xce_event_t {
        kind,
        status,
        from_host: from_host.as_ptr(),
        from_port: port(from),
        to_host: to_host.as_ptr(),
        to_port: port(to),
        attempts,
        duration_ms,
    });
}

/// Counters of a context since `xcecli_start` (F17). Plain values: nothing to free.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct xce_stats_t {
    /// Calls of reply-bearing and fire-and-forget ops.
    pub requests: u64,
    /// Attempts beyond the first, over all calls.
    pub retries: u64,
    /// Moves from one master to another.
    pub rotations: u64,
    /// Completed failovers (lost master → working master).
    pub failovers: u64,
    /// Total time slept in backoff, ms.
    pub backoff_ms: u64,
    /// Duration of the last completed failover, ms (0: none yet).
    pub last_failover_ms: u64,
    /// Index of the current master among the masters in rotation — the order of
    /// `xcecli_get_masters`: the configured ones first, in configuration order, then those
    /// learned from the primary (F29) — or -1 when not connected (or connected to a host a
    /// redirect hint named, outside the list; `current_master_host`/`_port` name it then).
    pub current_master: i32,
    /// Port of the current master (0 when not connected).
    pub current_master_port: u16,
    /// Host of the current master ("" when not connected).
    pub current_master_host: [c_char; XCE_MAXHOSTNAME_LEN],
}

/// Copies the counters of `ctx` into `*stats`. Returns 0, or -EINVAL for a NULL argument.
/// Thread-safe; does not wait for an op in progress on `ctx`.
#[no_mangle]
pub extern "C" fn xcecli_get_stats(ctx: xcecli_ctx_t, stats: *mut xce_stats_t) -> c_int {
    ffi_panic_boundary! { "xcecli_get_stats",
        let c = try_ctx!(ctx);
        let out = try_mut!(stats);
        let s = c.stats();
        let mut st = xce_stats_t {
            requests: s.requests,
            retries: s.retries,
            rotations: s.rotations,
            failovers: s.failovers,
            backoff_ms: s.backoff_ms,
            last_failover_ms: s.last_failover_ms,
            current_master: -1,
            current_master_port: 0,
            current_master_host: [0; XCE_MAXHOSTNAME_LEN],
        };
        if let Some(m) = &s.current_master {
            st.current_master = master_index(&s.masters, m);
            st.current_master_port = m.port;
            // A host too long for the field is left "" (cannot happen for configured masters).
            set_fixed_str(&mut st.current_master_host, &m.host);
        }
        *out = st;
        0
    }
}

/// What the last failed call on a context did (F19). Plain values: nothing to free.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct xce_last_error_t {
    /// The status the call returned (< 0).
    pub status: i32,
    /// Attempts made (sends, including the first).
    pub attempts: u32,
    /// Time spent in the call, ms.
    pub elapsed_ms: u64,
    /// For a write: 1 when it may have been applied (sent, no reply seen); else 0.
    pub maybe_applied: i32,
    /// Number of valid entries in `master_status`: the masters in rotation (the configured
    /// ones, then those learned from the primary, F29), at most `XCE_N_MAX_MASTERS`.
    pub nmasters: u32,
    /// Last status seen from each of those masters during the call, in the order of
    /// `xcecli_get_masters` (a transport failure as its negative errno; 0: not tried).
    pub master_status: [i32; XCE_N_MAX_MASTERS],
}

/// Describes the last failed call on `ctx` into `*out`. Returns 0, -ENOENT when no call has
/// failed yet (nothing written), or -EINVAL for a NULL argument. Thread-safe; the report is
/// per context, so with several threads it is the last failure of any of them.
#[no_mangle]
pub extern "C" fn xcecli_last_error(ctx: xcecli_ctx_t, out: *mut xce_last_error_t) -> c_int {
    ffi_panic_boundary! { "xcecli_last_error",
        let c = try_ctx!(ctx);
        let out = try_mut!(out);
        let Some(e) = c.last_error() else {
            return -libc::ENOENT;
        };
        let mut le = xce_last_error_t {
            status: e.error.status(),
            attempts: e.attempts,
            elapsed_ms: millis(e.elapsed),
            maybe_applied: i32::from(e.is_write && e.may_have_been_applied),
            nmasters: 0,
            master_status: [0; XCE_N_MAX_MASTERS],
        };
        for (slot, m) in le.master_status.iter_mut().zip(&e.masters) {
            *slot = m.last.as_ref().map_or(0, outcome_status);
            le.nmasters += 1;
        }
        *out = le;
        0
    }
}

/// Writes a one-line description of the last failed call on `ctx` (cluster state, attempts,
/// time, per-master statuses) into `buf` (`buflen` bytes, always NUL-terminated when
/// `buflen > 0`, truncated if needed). Returns the full text length (like `snprintf`), so a
/// result >= `buflen` means truncation; -ENOENT when no call has failed yet; -EINVAL for a
/// NULL ctx or a NULL `buf` with `buflen > 0`. `(NULL, 0)` just measures. Thread-safe.
#[no_mangle]
pub extern "C" fn xcecli_last_error_text(
    ctx: xcecli_ctx_t,
    buf: *mut c_char,
    buflen: usize,
) -> c_int {
    ffi_panic_boundary! { "xcecli_last_error_text",
        let c = try_ctx!(ctx);
        if buf.is_null() && buflen > 0 {
            return -libc::EINVAL;
        }
        let Some(e) = c.last_error() else {
            return -libc::ENOENT;
        };
        copy_text(&e.to_string(), buf, buflen)
    }
}

/// Copies `text` into `buf` like `snprintf`: at most `buflen - 1` bytes and a NUL when
/// `buflen > 0`; returns the full length. The caller checked `buf` is not NULL when
/// `buflen > 0`.
fn copy_text(text: &str, buf: *mut c_char, buflen: usize) -> c_int {
    let bytes = text.as_bytes();
    if buflen > 0 {
        let n = bytes.len().min(buflen - 1);
        // SAFETY: buf is writable for buflen bytes (documented) and n + 1 <= buflen.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    c_int::try_from(bytes.len()).unwrap_or(c_int::MAX)
}

/// F29: writes the masters `ctx` rotates over — the configured ones in order, then those
/// learned from a primary — as `host:port` separated by commas (an IPv6 host in brackets), into
/// `buf` (`buflen` bytes, always NUL-terminated when `buflen > 0`, truncated if needed; the
/// caller owns `buf`, nothing is kept). Returns the full text length (like `snprintf`), so a
/// result >= `buflen` means truncation; -EINVAL for a NULL ctx or a NULL `buf` with
/// `buflen > 0`; -E_XCE_CLOSED for a stopped context. `(NULL, 0)` just measures. Thread-safe;
/// does not wait for an op in progress on `ctx`.
#[no_mangle]
pub extern "C" fn xcecli_get_masters(ctx: xcecli_ctx_t, buf: *mut c_char, buflen: usize) -> c_int {
    ffi_panic_boundary! { "xcecli_get_masters",
        let c = try_ctx!(ctx);
        if buf.is_null() && buflen > 0 {
            return -libc::EINVAL;
        }
        let list = c
            .masters()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        copy_text(&list, buf, buflen)
    }
}

/// Writes a fresh job id for `xcecli_jobsubmit` to `*jobid_out`: unique across clients and
/// restarts (time and random bits), never 0. Needs no context. Returns 0, or -EINVAL for a
/// NULL argument. Thread-safe.
#[no_mangle]
pub extern "C" fn xce_new_jobid(jobid_out: *mut u64) -> c_int {
    ffi_panic_boundary! { "xce_new_jobid",
        let out = try_mut!(jobid_out);
        *out = client::new_job_id();
        0
    }
}
