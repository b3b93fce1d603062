//! Configuration and lifecycle: `xce_client_config_t`, its parser, `xcecli_start/stop`,
//! retry configuration and the typed option setter (F15).

use std::os::raw::{c_char, c_int};

use super::cast::{self, fixed_str, set_fixed_str, try_ctx, try_mut, try_ref, try_str};
use super::client;
use super::panic::ffi_panic_boundary;
use super::{xcecli_call_t, xcecli_ctx_t};
use crate::process::handles::Kind;

/// Most masters a configuration holds.
pub const XCE_N_MAX_MASTERS: usize = 8;
/// The same limit under its old name (the seeds' callers use it); prefer `XCE_N_MAX_MASTERS`.
pub const N_MAX_MASTERS: usize = XCE_N_MAX_MASTERS;
/// Size of a host-name field, NUL included (host names are at most 255 bytes).
pub const XCE_MAXHOSTNAME_LEN: usize = 256;

// The header needs literal values (cbindgen); they must be the client's.
const _: () = assert!(
    XCE_N_MAX_MASTERS == crate::client::N_MAX_MASTERS
        && XCE_MAXHOSTNAME_LEN == crate::client::XCE_MAXHOSTNAME_LEN
);
/// Size of a file-path field, NUL included.
pub const XCE_MAXPATH_LEN: usize = 4096;

/// How to reach the cluster. Fill with `xce_client_config_init`, then set the masters (by
/// hand or with `xce_client_config_parse_masters`). Fixed layout: new knobs go through
/// `xcecli_set_option`, never new fields. All strings are NUL-terminated UTF-8 inside their
/// arrays; an empty TLS field means "not used".
#[repr(C)]
pub struct xce_client_config_t {
    /// Master host names or addresses, in the order they are tried (F2).
    pub masters: [[c_char; XCE_MAXHOSTNAME_LEN]; XCE_N_MAX_MASTERS],
    /// Port of each master (1..65535).
    pub ports: [u16; XCE_N_MAX_MASTERS],
    /// Number of masters in use (1..XCE_N_MAX_MASTERS).
    pub nmasters: u32,
    /// PEM CA bundle; non-empty enables TLS with server verification.
    pub tls_ca_file: [c_char; XCE_MAXPATH_LEN],
    /// PEM client certificate for mutual TLS (requires `tls_key_file`).
    pub tls_cert_file: [c_char; XCE_MAXPATH_LEN],
    /// PEM client private key for mutual TLS (requires `tls_cert_file`).
    pub tls_key_file: [c_char; XCE_MAXPATH_LEN],
    /// Name sent in `hello` (empty: "libxce").
    pub client_name: [c_char; XCE_MAXHOSTNAME_LEN],
}

/// Default client name when the configuration leaves it empty.
const DEFAULT_CLIENT_NAME: &str = "libxce";

/// Resets `conf` to an empty configuration: no masters, no TLS, empty client name.
/// Returns 0, or -EINVAL when `conf` is NULL. Thread-safe (touches only `*conf`).
#[no_mangle]
pub extern "C" fn xce_client_config_init(conf: *mut xce_client_config_t) -> c_int {
    ffi_panic_boundary! { "xce_client_config_init",
        let conf = try_mut!(conf);
        // SAFETY: the struct is plain integers and char arrays, for which all-zero is valid.
        *conf = unsafe { std::mem::zeroed() };
        0
    }
}

/// One parsed `host:port` element.
pub(crate) type Master = (String, u16);

/// Parses `"host:port,host:port,…"` with the library's one parser (`client::parse_masters`);
/// `None` for any bad form.
pub(crate) fn parse_masters(list: &str) -> Option<Vec<Master>> {
    crate::client::parse_masters(list)
        .ok()
        .map(|v| v.into_iter().map(|e| (e.host, e.port)).collect())
}

/// Parses `list` ("host:port,host:port,…") into `conf`'s masters, ports and nmasters.
/// Returns the number of masters, or -EINVAL (NULL argument, not UTF-8, or a bad form: empty
/// list or element, missing host or port, port 0 or > 65535, host >= XCE_MAXHOSTNAME_LEN
/// bytes, more than XCE_N_MAX_MASTERS) — then `conf` is left untouched. Other fields of `conf`
/// are kept. Thread-safe (touches only `*conf`).
#[no_mangle]
pub extern "C" fn xce_client_config_parse_masters(
    conf: *mut xce_client_config_t,
    list: *const c_char,
) -> c_int {
    ffi_panic_boundary! { "xce_client_config_parse_masters",
        let conf = try_mut!(conf);
        let list = try_str!(list);
        let Some(masters) = parse_masters(list) else {
            return -libc::EINVAL;
        };
        conf.masters = [[0; XCE_MAXHOSTNAME_LEN]; XCE_N_MAX_MASTERS];
        conf.ports = [0; XCE_N_MAX_MASTERS];
        for (i, (host, port)) in masters.iter().enumerate() {
            // Fits: parse_masters checked the length and the absence of NUL.
            set_fixed_str(&mut conf.masters[i], host);
            conf.ports[i] = *port;
        }
        conf.nmasters = masters.len() as u32;
        masters.len() as c_int
    }
}

/// Validates a C configuration and converts it into the client's.
fn config_from_c(conf: &xce_client_config_t) -> Option<client::Config> {
    let n = usize::try_from(conf.nmasters)
        .ok()
        .filter(|n| (1..=XCE_N_MAX_MASTERS).contains(n))?;
    let mut masters = Vec::with_capacity(n);
    for i in 0..n {
        let host = fixed_str(&conf.masters[i]).filter(|h| !h.is_empty())?;
        let port = conf.ports[i];
        if port == 0 {
            return None;
        }
        masters.push(client::Endpoint::new(host, port));
    }
    let path = |buf: &[c_char]| {
        fixed_str(buf).map(|s| (!s.is_empty()).then(|| std::path::PathBuf::from(s)))
    };
    let tls_ca = path(&conf.tls_ca_file)?;
    let tls_cert = path(&conf.tls_cert_file)?;
    let tls_key = path(&conf.tls_key_file)?;
    if tls_cert.is_some() != tls_key.is_some() {
        return None;
    }
    let name = fixed_str(&conf.client_name)?;
    let name = if name.is_empty() {
        DEFAULT_CLIENT_NAME
    } else {
        name
    };
    let tls = match (tls_ca, tls_cert, tls_key) {
        (None, None, None) => None,
        (Some(ca_file), cert_file, key_file) => Some(client::TlsFiles {
            ca_file,
            cert_file,
            key_file,
        }),
        // A client certificate without a CA to verify the server: refuse rather than guess.
        (None, _, _) => return None,
    };
    let mut config = client::Config::new(masters);
    config.tls = tls;
    config.client_name = name.to_owned();
    Some(config)
}

/// Creates a context and connects it to the first reachable master in list order (F2).
///
/// `conf` is borrowed for the call only (the library keeps its own copy). On success returns
/// 0 and writes a new handle to `*ctx_out`; the caller owns it and must release it with
/// `xcecli_stop`. Errors: -EINVAL (NULL argument, nmasters 0 or > XCE_N_MAX_MASTERS, an empty or
/// unterminated host, port 0, a TLS cert without key or the reverse, bad UTF-8); the last
/// transport error when no master is reachable (e.g. -ECONNREFUSED); -E_XCE_TLS. Nothing is
/// written to `*ctx_out` on error. Thread-safe.
#[no_mangle]
pub extern "C" fn xcecli_start(
    conf: *const xce_client_config_t,
    ctx_out: *mut xcecli_ctx_t,
) -> c_int {
    ffi_panic_boundary! { "xcecli_start",
        let conf = try_ref!(conf);
        let ctx_out = try_mut!(ctx_out);
        let Some(config) = config_from_c(conf) else {
            return -libc::EINVAL;
        };
        match client::Client::start(config) {
            Ok(client) => match cast::new_handle(Kind::Context, client.clone()) {
                Some(h) => {
                    *ctx_out = h as usize as xcecli_ctx_t;
                    0
                }
                None => {
                    client.close();
                    -libc::ENOMEM
                }
            },
            Err(e) => e.status(),
        }
    }
}

/// Stops the context and releases its handle (F20). NULL is a no-op.
///
/// Safe while other threads are inside calls on the context and from inside a callback of it:
/// every blocked or queued call returns -E_XCE_CLOSED at once, calls that begin while the stop
/// is in progress fail with -E_XCE_CLOSED, and `xcecli_stop` returns once no call is in flight
/// — then the connection is closed, no callback of the context runs again, and the context
/// holds no fd. Called from inside a callback of the context, it returns at once and the call
/// that ran the callback finishes the stop when it returns (with -E_XCE_CLOSED). Call handles
/// of the context (`xcecli_call_new`) still must be released with `xcecli_call_free`; ops on
/// them return -E_XCE_CLOSED.
///
/// After it returns, `ctx` is released: any later use of it (an op, `xcecli_stop` again) is
/// safe and returns -E_XCE_CLOSED (or does nothing), however many handles were released since.
/// A call handle seen as a context handle (`xcecli_call_ctx`) is refused (logged, nothing
/// done). It waits for a callback running on another thread to return.
#[no_mangle]
pub extern "C" fn xcecli_stop(ctx: xcecli_ctx_t) {
    ffi_panic_boundary! { "xcecli_stop",
        if ctx.is_null() {
            return;
        }
        match cast::release(ctx as usize, Kind::Context) {
            // Calls in flight hold their own clone of the client.
            Ok(client) => client.close(),
            Err(code) if code == -libc::EINVAL => {
                super::log::error("xcecli_stop: not a context handle (a call handle is released with xcecli_call_free)");
            }
            Err(_) => {} // released already: nothing to do
        }
    }
}

/// Creates a call handle of the context of `ctx` and writes it to `*call_out` (F20, for
/// callers that cancel calls one by one, such as Go's `context.Context`).
///
/// Ops made through the call handle (pass `xcecli_call_ctx(call)` where an op takes a
/// context) run on the context of `ctx` — same connection, lock, counters, callbacks,
/// options — and in addition: `xcecli_call_cancel(call)` ends those in progress, queued or
/// made later with -ECANCELED; and `deadline_ms` > 0 bounds each of them (the shorter of it
/// and the context's `XCE_OPT_DEADLINE_MS` wins; 0: the context's). Release it with
/// `xcecli_call_free`; it keeps the context's memory (not its connection) alive until then.
/// Returns 0, -EINVAL (NULL argument, deadline_ms < 0 or > 86400000), or -E_XCE_CLOSED when
/// the context is stopped. Thread-safe.
#[no_mangle]
pub extern "C" fn xcecli_call_new(
    ctx: xcecli_ctx_t,
    deadline_ms: i64,
    call_out: *mut xcecli_call_t,
) -> c_int {
    ffi_panic_boundary! { "xcecli_call_new",
        let c = try_ctx!(ctx);
        let out = try_mut!(call_out);
        if !(0..=MAX_OPTION_MS).contains(&deadline_ms) {
            return -libc::EINVAL;
        }
        if c.is_closed() {
            return crate::Error::Closed.status();
        }
        let deadline = (deadline_ms > 0)
            .then(|| std::time::Duration::from_millis(deadline_ms as u64));
        match cast::new_handle(Kind::Call, c.call_handle(deadline)) {
            Some(h) => {
                *out = h as usize as xcecli_call_t;
                0
            }
            None => -libc::ENOMEM,
        }
    }
}

/// The call handle `call` seen as a context handle, for the ops (`xcecli_hello(
/// xcecli_call_ctx(call), …)`): the same handle value, retyped; it is valid exactly as long
/// as `call` (after `xcecli_call_free`, ops on it return -E_XCE_CLOSED). Never fails, never
/// blocks; NULL gives NULL. Async-signal-safe.
#[no_mangle]
pub extern "C" fn xcecli_call_ctx(call: xcecli_call_t) -> xcecli_ctx_t {
    ffi_panic_boundary! { "xcecli_call_ctx",
        call as usize as xcecli_ctx_t
    }
}

/// Cancels the call handle `call`: ops made through it that are in progress or queued return
/// -ECANCELED promptly, and later ones at once. Other handles of the context are not
/// affected. Returns 0, -EINVAL for NULL or a value that is not a call handle, -E_XCE_CLOSED
/// for a call handle already freed. Never blocks; thread-safe (may race with an op on `call`
/// and with `xcecli_call_free(call)`).
#[no_mangle]
pub extern "C" fn xcecli_call_cancel(call: xcecli_call_t) -> c_int {
    ffi_panic_boundary! { "xcecli_call_cancel",
        match cast::client_of_kind(call as usize, Kind::Call) {
            Ok(c) => if c.cancel() { 0 } else { -libc::EINVAL },
            Err(code) => code,
        }
    }
}

/// Releases a call handle made by `xcecli_call_new`. NULL, or a handle already freed, is a
/// no-op; a value that is not a call handle is left alone and an error is logged. An op on
/// `call` in progress on another thread finishes normally; one that begins after this returns
/// -E_XCE_CLOSED.
#[no_mangle]
pub extern "C" fn xcecli_call_free(call: xcecli_call_t) {
    ffi_panic_boundary! { "xcecli_call_free",
        if call.is_null() {
            return;
        }
        match cast::release(call as usize, Kind::Call) {
            Ok(client) => drop(client),
            Err(code) if code == -libc::EINVAL => {
                super::log::error("xcecli_call_free: not a call handle (use xcecli_stop)");
            }
            Err(_) => {}
        }
    }
}

/// Retry policy of a context (F6, F7). Initialise with `XCE_RETRY_DEFAULTS`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct xce_retry_config_t {
    /// Sleeps allowed per call before giving up ("cluster not ready" or the transport error).
    pub max_retries: u32,
    /// First backoff delay, ms (> 0).
    pub initial_retry_ms: u32,
    /// Cap of the backoff delay, ms (>= initial_retry_ms).
    pub max_retry_ms: u32,
    /// Growth of the delay per sleep (finite, >= 1.0).
    pub backoff_multiplier: f64,
}

/// Default `max_retries` (F6).
pub const XCE_RETRY_DEFAULT_MAX_RETRIES: u32 = 20;
/// Default `initial_retry_ms`.
pub const XCE_RETRY_DEFAULT_INITIAL_MS: u32 = 50;
/// Default `max_retry_ms`.
pub const XCE_RETRY_DEFAULT_MAX_MS: u32 = 5000;
/// Default `backoff_multiplier`.
pub const XCE_RETRY_DEFAULT_MULTIPLIER: f64 = 2.0;

impl From<&xce_retry_config_t> for client::RetryConfig {
    fn from(c: &xce_retry_config_t) -> Self {
        client::RetryConfig {
            max_retries: c.max_retries,
            initial_retry_ms: c.initial_retry_ms,
            max_retry_ms: c.max_retry_ms,
            backoff_multiplier: c.backoff_multiplier,
        }
    }
}

/// Sets the retry policy of `ctx` for the calls that start after this one. `cfg` NULL
/// restores `XCE_RETRY_DEFAULTS`; `cfg` is borrowed for the call only. Returns 0, or -EINVAL
/// (NULL ctx; initial_retry_ms 0; max_retry_ms < initial_retry_ms; multiplier < 1 or not
/// finite). Thread-safe.
#[no_mangle]
pub extern "C" fn xcecli_set_retry_config(
    ctx: xcecli_ctx_t,
    cfg: *const xce_retry_config_t,
) -> c_int {
    ffi_panic_boundary! { "xcecli_set_retry_config",
        let ctx = try_ctx!(ctx);
        // SAFETY: cfg is NULL or a valid struct for the call (documented).
        let cfg = unsafe { cfg.as_ref() }.map(client::RetryConfig::from);
        match ctx.set_retry_config(cfg) {
            Ok(()) => 0,
            Err(e) => e.status(),
        }
    }
}

/// Option: connect timeout per attempt, ms (> 0) (F8).
pub const XCE_OPT_CONNECT_TIMEOUT_MS: c_int = 1;
/// Option: reply timeout per attempt, ms (> 0) (F8).
pub const XCE_OPT_REPLY_TIMEOUT_MS: c_int = 2;
/// Option: overall deadline per call, ms; 0 = none (F7).
pub const XCE_OPT_DEADLINE_MS: c_int = 3;
/// Option: which redirect hints to follow: `XCE_REDIRECT_CONFIGURED` or `XCE_REDIRECT_ANY` (F5).
pub const XCE_OPT_REDIRECT_POLICY: c_int = 4;
/// Option: ask standbys to `waitPrimary` while backing off: 1 on (default), 0 off (F18).
pub const XCE_OPT_WAIT_PRIMARY: c_int = 5;
/// Option: when a reply is later than this context's recent round trips suggest, ask another
/// controller whether the primary changed, and re-send there if it did: 1 on (default), 0 off
/// (only the reply timeout ends a wait) (F25).
pub const XCE_OPT_SUSPICION: c_int = 6;
/// Option: learn the cluster's members from the primary (one `hello` per new connection) and
/// add them to the masters in rotation, following a standby's hint to a member it holds: 1 on
/// (default), 0 off, the configured masters only (F29; `xcecli_get_masters`).
pub const XCE_OPT_LEARN_MASTERS: c_int = 7;
/// Option: when the primary cannot be reached directly but a standby can, ask the standby to
/// forward the request to the primary (same request id: never applied twice): 1 on (default),
/// 0 off (hint, rotation and backoff only) (F28).
pub const XCE_OPT_FORWARD: c_int = 8;

/// Redirect policy: follow a hint only when it names a configured master (default).
pub const XCE_REDIRECT_CONFIGURED: i64 = 0;
/// Redirect policy: follow a hint to any host.
pub const XCE_REDIRECT_ANY: i64 = 1;

/// The largest timeout accepted (one day), so that ms arithmetic never overflows.
const MAX_OPTION_MS: i64 = 86_400_000;

/// Checks an option and its value; `None` → -EINVAL.
pub(crate) fn option_from_c(opt: c_int, value: i64) -> Option<client::ClientOption> {
    use client::ClientOption as O;
    // In range, the value fits u32 (MAX_OPTION_MS < u32::MAX).
    let ms = |lo: i64| {
        (lo..=MAX_OPTION_MS)
            .contains(&value)
            .then_some(value as u32)
    };
    let on = match value {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    };
    Some(match opt {
        XCE_OPT_CONNECT_TIMEOUT_MS => O::ConnectTimeoutMs(ms(1)?),
        XCE_OPT_REPLY_TIMEOUT_MS => O::ReplyTimeoutMs(ms(1)?),
        XCE_OPT_DEADLINE_MS => O::CallDeadlineMs(ms(0)?),
        XCE_OPT_REDIRECT_POLICY => match value {
            XCE_REDIRECT_CONFIGURED => O::RedirectAnyHost(false),
            XCE_REDIRECT_ANY => O::RedirectAnyHost(true),
            _ => return None,
        },
        XCE_OPT_WAIT_PRIMARY => O::WaitPrimary(on?),
        XCE_OPT_SUSPICION => O::Suspicion(on?),
        XCE_OPT_LEARN_MASTERS => O::LearnMasters(on?),
        XCE_OPT_FORWARD => O::Forward(on?),
        _ => return None,
    })
}

/// Sets one knob of `ctx` (`XCE_OPT_*`), for the calls that start after this one.
/// Returns 0, or -EINVAL (NULL ctx, unknown option, value out of range: timeouts 1..86400000
/// ms, deadline 0..86400000 ms, policy and on/off values as documented). Thread-safe.
#[no_mangle]
pub extern "C" fn xcecli_set_option(ctx: xcecli_ctx_t, opt: c_int, value: i64) -> c_int {
    ffi_panic_boundary! { "xcecli_set_option",
        let ctx = try_ctx!(ctx);
        let Some(option) = option_from_c(opt, value) else {
            return -libc::EINVAL;
        };
        match ctx.set_option(option) {
            Ok(()) => 0,
            Err(e) => e.status(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_master_lists() {
        assert_eq!(
            parse_masters("a:1, b:2,[::1]:3"),
            Some(vec![("a".into(), 1), ("b".into(), 2), ("::1".into(), 3)])
        );
        for bad in [
            "", ",", "a:1,", "a", "a:", ":1", "a:0", "a:65536", "a:x", "a:-1", "a:+1", "::1:3",
            "[::1]3", "a b:1", "a:1:2",
        ] {
            assert_eq!(parse_masters(bad), None, "{bad:?}");
        }
        let nine = ["h:1"; 9].join(",");
        assert_eq!(parse_masters(&nine), None);
        let eight = ["h:1"; 8].join(",");
        assert_eq!(parse_masters(&eight).map(|v| v.len()), Some(8));
        let long = format!("{}:1", "h".repeat(XCE_MAXHOSTNAME_LEN));
        assert_eq!(parse_masters(&long), None);
    }

    #[test]
    fn retry_defaults_match_the_client() {
        let d = crate::failover::XCE_RETRY_DEFAULTS;
        assert_eq!(d.max_retries, XCE_RETRY_DEFAULT_MAX_RETRIES);
        assert_eq!(d.initial_retry_ms, XCE_RETRY_DEFAULT_INITIAL_MS);
        assert_eq!(d.max_retry_ms, XCE_RETRY_DEFAULT_MAX_MS);
        assert_eq!(d.backoff_multiplier, XCE_RETRY_DEFAULT_MULTIPLIER);
    }

    #[test]
    fn options_are_checked() {
        assert!(option_from_c(XCE_OPT_CONNECT_TIMEOUT_MS, 100).is_some());
        assert!(option_from_c(XCE_OPT_CONNECT_TIMEOUT_MS, 0).is_none());
        assert!(option_from_c(XCE_OPT_REPLY_TIMEOUT_MS, -1).is_none());
        assert!(option_from_c(XCE_OPT_DEADLINE_MS, 0).is_some());
        assert!(option_from_c(XCE_OPT_DEADLINE_MS, MAX_OPTION_MS + 1).is_none());
        assert!(option_from_c(XCE_OPT_REDIRECT_POLICY, 2).is_none());
        assert!(option_from_c(XCE_OPT_WAIT_PRIMARY, 1).is_some());
        assert!(option_from_c(XCE_OPT_WAIT_PRIMARY, 2).is_none());
        assert!(option_from_c(XCE_OPT_SUSPICION, 0).is_some());
        assert!(option_from_c(XCE_OPT_SUSPICION, 2).is_none());
        assert!(option_from_c(XCE_OPT_LEARN_MASTERS, 0).is_some());
        assert!(option_from_c(XCE_OPT_LEARN_MASTERS, 2).is_none());
        assert!(option_from_c(XCE_OPT_FORWARD, 0).is_some());
        assert!(option_from_c(XCE_OPT_FORWARD, 2).is_none());
        assert!(option_from_c(0, 0).is_none());
        assert!(option_from_c(99, 0).is_none());
    }
}
