//! The typed Rust client: a [`Client`] is a handle to one context (`xcecli_ctx_t`).
//!
//! Every op is a one-liner that builds an [`Op`] and hands it to the one retry loop
//! (`failover::retry`, F1); the op's category comes from [`Op::kind`]. A `Client` is
//! `Send + Sync` and cheap to clone: clones share the context (connection, lock, counters,
//! callbacks). Calls on one context are serialized for the whole loop (F11, [`gate`]);
//! different contexts share no lock.
//!
//! Lifecycle (F20): [`Client::close`] stops the context for every handle — it wakes every call,
//! makes queued and later calls fail at once with [`Error::Closed`], waits for the calls in
//! flight (or, called from inside one of them, lets the last one finish the stop), then drops
//! the connection and the callbacks. A *call handle* ([`Client::call_handle`]) shares the
//! context but carries its own deadline and cancel token ([`Client::cancel`]: its calls end
//! with `ECANCELED`), for callers such as Go's `context.Context`.

// No `unsafe` in this layer (ARCHITECTURE.md: only ffi, the documented syscalls of transport
// and process, and error.rs have any); the compiler holds it to that.
#![deny(unsafe_code)]

mod gate;

mod listing;
pub use listing::{JobPager, ENV_PAGE_BYTES, MAX_LISTING_RESTARTS};

// The types `Client`'s methods take and return: the Rust API is this module.
pub use crate::failover::{
    AttemptOutcome, CallReport, ClientOption, Endpoint, Event, EventHandler, HintPolicy, Options,
    RetryConfig, Stats, MAX_LEARNED_MASTERS, XCE_RETRY_DEFAULTS,
};
pub use crate::transport::WakeState;

/// F14: the process's log sink and level.
pub mod log {
    pub use crate::failover::log::{enabled, level, log, set_level, set_sink, Level, LogSink};
}

use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, ReentrantMutex};

use self::gate::{Close, Gate, Leave};
use crate::error::Error;
use crate::failover::log::{xlog, Level};
use crate::failover::report::Observer;
use crate::failover::retry::{self, CallEnv, CallTrace, Callbacks, LoopState, Settings};
use crate::failover::slot::CallbackSlot;
use crate::failover::Rotator;
use crate::process::{self, identity};
use crate::transport::{resolve, tls, CallSettle, CancelToken};
use crate::wire::*;

/// Most masters a configuration may list (`N_MAX_MASTERS`).
pub const N_MAX_MASTERS: usize = 8;
/// Size of a master host name buffer in the C struct (`XCE_MAXHOSTNAME_LEN`, NUL included):
/// host names are at most `XCE_MAXHOSTNAME_LEN - 1` bytes.
pub const XCE_MAXHOSTNAME_LEN: usize = 256;

/// TLS files of a configuration; without them the client speaks plain TCP.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsFiles {
    /// PEM file of the CA(s) that signed the controllers' certificates.
    pub ca_file: PathBuf,
    /// PEM client certificate chain and key, for mutual TLS (both or neither).
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

/// What `start` needs (`xce_client_config_t`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Config {
    /// The controllers, in the order `start` tries them (F2).
    pub masters: Vec<Endpoint>,
    pub tls: Option<TlsFiles>,
    /// Sent in `hello`.
    pub client_name: String,
    /// C13: a token naming the caller, sent in every request, for callers without a client
    /// certificate. `None`: `start` takes `XCE_AUTH_TOKEN` (or the first line of the file
    /// named by `XCE_AUTH_TOKEN_FILE`) if set.
    pub auth_token: Option<String>,
}

/// Longest token accepted (a token is a few hundred bytes); the controller's limit too.
pub use crate::wire::MAX_AUTH_TOKEN_LEN;

/// C13: the token of `XCE_AUTH_TOKEN`, else the first line of the file `XCE_AUTH_TOKEN_FILE`
/// names; `None` when neither is set. An unreadable file is its errno: a caller that was given
/// an identity must not silently run without it.
pub fn auth_token_from_env(get: &impl Fn(&str) -> Option<String>) -> Result<Option<String>, Error> {
    use crate::failover::env::env_value;
    if let Some(t) = env_value(get, "XCE_AUTH_TOKEN") {
        return Ok(Some(t.trim().to_string()));
    }
    match env_value(get, "XCE_AUTH_TOKEN_FILE") {
        None => Ok(None),
        Some(path) => {
            let body = std::fs::read_to_string(path.trim()).map_err(|e| Error::from_io(&e))?;
            Ok(Some(body.lines().next().unwrap_or("").trim().to_string()))
        }
    }
}

/// C13: TLS files from `XCE_TLS_CA_FILE` (and `XCE_TLS_CERT_FILE` + `XCE_TLS_KEY_FILE`, an
/// identity) for a configuration that names none: every program linking the library (the
/// daemons, `xce_test`, Go) takes an identity without a new option of its own.
pub fn tls_from_env(get: &impl Fn(&str) -> Option<String>) -> Option<TlsFiles> {
    use crate::failover::env::env_value;
    let path = |k| env_value(get, k).map(|v| PathBuf::from(v.trim()));
    Some(TlsFiles {
        ca_file: path("XCE_TLS_CA_FILE")?,
        cert_file: path("XCE_TLS_CERT_FILE"),
        key_file: path("XCE_TLS_KEY_FILE"),
    })
}

impl Config {
    /// A plain-TCP configuration over `masters`.
    pub fn new(masters: Vec<Endpoint>) -> Config {
        Config {
            masters,
            ..Config::default()
        }
    }

    /// `EINVAL` unless there are 1..=N_MAX_MASTERS masters with non-empty host names shorter
    /// than XCE_MAXHOSTNAME_LEN bytes (they fit the C struct with their NUL) and non-zero ports.
    pub fn validate(&self) -> Result<(), Error> {
        let ok = (1..=N_MAX_MASTERS).contains(&self.masters.len())
            && self
                .masters
                .iter()
                .all(|m| !m.host.is_empty() && m.host.len() < XCE_MAXHOSTNAME_LEN && m.port != 0);
        if ok {
            Ok(())
        } else {
            Err(Error::Errno(libc::EINVAL))
        }
    }
}

/// Parses the `set masters` syntax: `host:port,host:port,…` — the one parser, used by the C
/// layer too. Spaces around elements are ignored; an IPv6 address is written in brackets
/// (`[::1]:7000`). `EINVAL` for: an empty list or element, a missing or empty host, a host with
/// whitespace or control bytes, an unbracketed `:` in the host (`a:1:2`), a missing,
/// non-numeric, zero or too large port, a host of `XCE_MAXHOSTNAME_LEN` bytes or more (it
/// must fit the C struct with its NUL), more than `N_MAX_MASTERS` elements.
pub fn parse_masters(s: &str) -> Result<Vec<Endpoint>, Error> {
    let einval = Error::Errno(libc::EINVAL);
    let masters = s
        .split(',')
        .map(|elem| {
            let elem = elem.trim();
            let (host, port) = if let Some(rest) = elem.strip_prefix('[') {
                let (host, after) = rest.split_once(']').ok_or(einval)?;
                (host, after.strip_prefix(':').ok_or(einval)?)
            } else {
                let (host, port) = elem.rsplit_once(':').ok_or(einval)?;
                if host.contains(':') {
                    return Err(einval); // an unbracketed IPv6 address is ambiguous
                }
                (host, port)
            };
            let bad_host = host
                .bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control());
            if bad_host || port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
                return Err(einval);
            }
            let port: u16 = port.parse().map_err(|_| einval)?;
            Ok(Endpoint::new(host, port))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Config::new(masters.clone()).validate()?;
    Ok(masters)
}

/// A job id for `jobsubmit` (F16), unique across clients and restarts and never 0: the low
/// 24 bits of the unix time in ms on top, 40 random bits below. The time part keeps a restarted
/// client's ids apart from its earlier ones; the random part separates clients submitting in the
/// same millisecond. The random bits come from the kernel at each call (getrandom), so a child
/// of `fork` never repeats its parent's or a sibling's draws (F26).
pub fn new_job_id() -> u64 {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    loop {
        // 24 bits of ms wrap every ~4.6 h; a collision needs the same 40 random bits drawn in
        // the same millisecond of that window.
        let id = ((now_ms & 0xFF_FFFF) << 40) | (identity::random_u64() & 0xFF_FFFF_FFFF);
        if id != 0 {
            return id;
        }
    }
}

/// F10: called after every successful reconnect, before the interrupted op is re-sent, on the
/// calling thread, with the handle of the call that reconnected. Ops it makes on that handle
/// run as single attempts on the new connection. A negative return is a failed attempt,
/// classified like a status. The hook runs while the context is reserved for the calling
/// thread: it must not wait for another thread that uses the same context.
pub type ReconnectHook = Arc<HookFn>;
/// What a reconnect hook is.
pub type HookFn = dyn Fn(&Client) -> i32 + Send + Sync;

/// An event callback that also receives the handle of the call that caused the event (the C
/// layer passes that handle back to C).
pub type EventHandlerWithHandle = Arc<EventFn>;
/// What an event callback with the call's handle is.
pub type EventFn = dyn Fn(&Client, &Event) + Send + Sync;

/// Serial numbers of contexts, for log lines (`name#serial`).
static SERIAL: AtomicU64 = AtomicU64::new(1);

/// One context, shared by its handles.
struct Context {
    gate: Gate,
    wake: WakeState,
    /// Everything the loop mutates. Only the thread that owns the context (the gate) locks it,
    /// so the lock is never contended; reentrant for the reconnect hook's nested calls (F10).
    /// The RefCell is never borrowed across the hook.
    link: ReentrantMutex<RefCell<LoopState>>,
    /// Read when a call starts; setters never wait for a call in progress (F15).
    settings: Mutex<Settings>,
    observer: Observer,
    hook: CallbackSlot<HookFn>,
    events: CallbackSlot<EventFn>,
    /// The client id of the link (F16), as of the last call; changes in a child of `fork`.
    client_id: Mutex<ClientId>,
    /// The fork generation the client id was made in (F26): a call in another one (a child of
    /// `fork`) first gives the context a fresh client id and request-id space.
    identity_generation: AtomicU64,
    /// F26: another thread was inside a call of this context when the process forked, and this
    /// is the child: its connection and lock belong to a thread the child does not have. Calls
    /// fail at once with `E_XCE_CLOSED` (a child starts a new context instead), never hang.
    forked_busy: std::sync::atomic::AtomicBool,
    client_name: String,
    masters: Vec<Endpoint>,
    /// Names the context in log lines.
    tag: String,
    /// Its serial number (the key of its fork registration).
    serial: u64,
}

impl Context {
    /// The end of a stop (F20): no connection, no callbacks, no fd (F21: a stopped context no
    /// longer keeps the pooled eventfds alive, even while handles to it remain).
    fn finish_close(&self) {
        self.link.lock().borrow_mut().close();
        self.hook.set(None);
        self.events.set(None);
        self.wake.retire();
    }
}

impl Context {
    /// F26: in a child of `fork` (a fork generation other than the identity's), the first call
    /// gives the context a client id and request-id space of its own before any request: the
    /// parent's next write and the child's first one are then different requests to the
    /// controller's dedup table, each applied once. Called by the thread that owns the link.
    fn rekey_after_fork(&self, link: &RefCell<LoopState>) {
        let now = process::fork_generation();
        // A load on the happy path; the swap only when the generation moved (P2).
        if self.identity_generation.load(Ordering::SeqCst) != now
            && self.identity_generation.swap(now, Ordering::SeqCst) != now
        {
            let id = identity::new_client_id();
            let mut l = link.borrow_mut();
            l.ids.rekey(id);
            l.outbox.forget();
            self.observer.update(|s| s.outbox_depth = 0);
            *self.client_id.lock() = id;
            xlog!(Level::Info, "{}: new client identity after fork", self.tag);
        }
    }
}

impl process::fork::AfterFork for Context {
    /// In a child of `fork`, before it runs (F26): a context that a thread the child does not
    /// have was using is unusable in the child (see `forked_busy`).
    fn in_child(&self) {
        // A nudge another thread was making at the fork never finishes here: its count must
        // not make this context's next wait spin forever giving its pipe back.
        self.wake.nudges_gone_after_fork();
        let link_held_elsewhere = self.link.try_lock().is_none();
        // Hook and event runs of threads the child does not have: a setter in the child must
        // not wait for them.
        let slots_free =
            self.hook.forget_runners_after_fork() & self.events.forget_runners_after_fork();
        if self.gate.busy_at_fork(&self.wake) || link_held_elsewhere || !slots_free {
            self.forked_busy.store(true, Ordering::SeqCst);
        }
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        process::fork::forget(self.serial);
        self.link.get_mut().get_mut().close();
    }
}

/// What distinguishes one handle of a context from another.
#[derive(Clone, Default)]
struct CallOpts {
    /// Set on call handles only: cancels the calls made through this handle.
    token: Option<Arc<CancelToken>>,
    /// A deadline per call for this handle, on top of the context's own (the shorter wins).
    deadline: Option<Duration>,
    /// An opaque id the C layer gives the handle, passed back to callbacks.
    handle_id: usize,
}

/// A handle to one client context (see the module doc).
#[derive(Clone)]
pub struct Client {
    ctx: Arc<Context>,
    call: CallOpts,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("context", &self.ctx.tag)
            .field("call_handle", &self.call.token.is_some())
            .finish_non_exhaustive()
    }
}

/// The callbacks of one call, as the loop sees them: they receive the call's handle.
struct CallCallbacks<'a>(&'a Client);

impl Callbacks for CallCallbacks<'_> {
    fn has_reconnect_hook(&self) -> bool {
        self.0.ctx.hook.is_set()
    }

    fn run_reconnect_hook(&self) -> Option<i32> {
        self.0.ctx.hook.call(|h| h(self.0))
    }

    fn emit(&self, event: Event) {
        self.0.ctx.events.call(|h| h(self.0, &event));
    }
}

/// Leaves the gate when a call ends, however it ends (giving the context to the next queued
/// call when it owned it); the last call out of a context stopped from inside a call finishes
/// the stop (F20).
struct Entered<'a> {
    ctx: &'a Context,
    settle: CallSettle<'a>,
    /// The call owns the context (`Gate::acquire`).
    owned: Cell<bool>,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        // Settled already on every path but a panic.
        self.settle.settle();
        let leave = if self.owned.get() {
            self.ctx.gate.release_and_leave()
        } else {
            self.ctx.gate.leave()
        };
        if leave == Leave::FinishClose {
            self.ctx.finish_close();
        }
    }
}

impl Client {
    /// F2: validates `config`, applies the environment overrides (`XCE_*`, F15), and connects
    /// to the first reachable master in list order. None reachable: the last transport error.
    pub fn start(mut config: Config) -> Result<Client, Error> {
        let env = |k: &str| std::env::var(k).ok();
        if config.auth_token.is_none() {
            config.auth_token = auth_token_from_env(&env)?;
        }
        if config.tls.is_none() {
            config.tls = tls_from_env(&env);
        }
        Client::start_with(
            config,
            Options::default().with_env_overrides(),
            XCE_RETRY_DEFAULTS.with_env_overrides(),
        )
    }

    /// `start` with explicit options and retry config, ignoring the environment.
    pub fn start_with(
        config: Config,
        options: Options,
        retry: RetryConfig,
    ) -> Result<Client, Error> {
        config.validate()?;
        retry.validate()?;
        let tls = match &config.tls {
            Some(t) => Some(tls::client_config(
                &t.ca_file,
                t.cert_file.as_deref(),
                t.key_file.as_deref(),
            )?),
            None => None,
        };
        let auth_token = config.auth_token.clone().unwrap_or_default();
        if auth_token.len() > MAX_AUTH_TOKEN_LEN || auth_token.contains(['\n', '\0']) {
            return Err(Error::Errno(libc::EINVAL));
        }
        let generation = process::fork_generation();
        let client_id = identity::new_client_id();
        let name = if config.client_name.is_empty() {
            "libxce"
        } else {
            config.client_name.as_str()
        };
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{name}#{serial}");
        // F23: every master's name is being looked up while the first one is tried.
        for m in &config.masters {
            resolve::prefetch(&m.host);
        }
        let settings = Settings { retry, options };
        let ctx = Context {
            gate: Gate::new(),
            wake: WakeState::new(),
            link: ReentrantMutex::new(RefCell::new(LoopState::new(
                Rotator::new(config.masters.clone()),
                client_id,
                tls,
                tag.clone(),
            ))),
            settings: Mutex::new(settings),
            observer: Observer::default(),
            hook: CallbackSlot::new(),
            events: CallbackSlot::new(),
            client_id: Mutex::new(client_id),
            identity_generation: AtomicU64::new(generation),
            forked_busy: std::sync::atomic::AtomicBool::new(false),
            client_name: config.client_name,
            masters: config.masters,
            tag,
            serial,
        };
        ctx.link.lock().borrow_mut().link.auth_token = auth_token;
        let masters = Arc::new(ctx.masters.clone());
        ctx.observer.update(|s| s.masters = masters);
        {
            let guard = ctx.link.lock();
            let mut link = guard.borrow_mut();
            let waker = ctx.wake.waker_now();
            retry::connect_first(&mut link, &waker, &ctx.observer, &settings, &ctx.tag)?;
        }
        let ctx = Arc::new(ctx);
        let weak: std::sync::Weak<dyn process::fork::AfterFork> =
            Arc::downgrade(&ctx) as std::sync::Weak<dyn process::fork::AfterFork>;
        process::fork::after_fork(ctx.serial, weak);
        Ok(Client {
            ctx,
            call: CallOpts::default(),
        })
    }

    /// F20: stops the context, for every handle of it. Wakes every call (they return
    /// `E_XCE_CLOSED`), makes later calls fail at once with it, and waits until no call is in
    /// flight; then the connection is closed and no callback of the context runs again.
    /// Called from inside a call of this context (a callback), it returns at once and the
    /// last call to leave finishes the stop. Idempotent.
    pub fn close(&self) {
        let ctx = &*self.ctx;
        if ctx.forked_busy.load(Ordering::SeqCst) {
            // A child's copy of a context busy at the fork: nothing to drain, nothing to close
            // that the child could safely lock; later calls fail with E_XCE_CLOSED.
            ctx.wake.close_quietly();
            ctx.wake.retire();
            return;
        }
        match ctx.gate.close(&ctx.wake) {
            Close::Drained => ctx.finish_close(),
            Close::Deferred => {
                // This thread runs a callback of the context (then the other threads run none:
                // only the owner does, and this one returns to a loop that runs no more), or
                // waiting for the calls in flight would never end (a cycle of waits): the last
                // call to leave finishes the stop (F20).
                ctx.hook.set(None);
                ctx.events.set(None);
            }
            Close::AlreadyClosing => {}
        }
    }

    /// Closes the connection if no call is using it (the next call reconnects); does nothing
    /// while a call is in progress. For tools and tests; failover never needs it.
    pub fn disconnect(&self) {
        if let Some(guard) = self.ctx.link.try_lock() {
            if let Ok(mut link) = guard.try_borrow_mut() {
                link.close();
            }
        }
    }

    /// Whether the context is stopped (or stopping).
    pub fn is_closed(&self) -> bool {
        self.ctx.wake.is_closed()
    }

    /// A new handle to this context for calls that must be cancellable on their own
    /// ([`Client::cancel`]) or bounded by their own deadline (`None`: the context's).
    pub fn call_handle(&self, deadline: Option<Duration>) -> Client {
        Client {
            ctx: self.ctx.clone(),
            call: CallOpts {
                token: Some(Arc::new(CancelToken::new())),
                deadline,
                handle_id: 0,
            },
        }
    }

    /// Whether this is a call handle (made by [`Client::call_handle`]).
    pub fn is_call_handle(&self) -> bool {
        self.call.token.is_some()
    }

    /// Cancels this call handle: its calls in progress, queued or later end with `ECANCELED`
    /// at once. `false` (nothing done) on a handle that is not a call handle. Never blocks.
    pub fn cancel(&self) -> bool {
        let Some(token) = &self.call.token else {
            return false;
        };
        token.cancel();
        self.ctx.gate.cancelled(&self.ctx.wake);
        true
    }

    /// This handle with an opaque id that callbacks get back ([`Client::handle_id`]).
    pub fn with_handle_id(mut self, id: usize) -> Client {
        self.call.handle_id = id;
        self
    }

    /// The id given by [`Client::with_handle_id`] (0 when none).
    pub fn handle_id(&self) -> usize {
        self.call.handle_id
    }

    /// F13: makes every call on this context that is blocked or queued right now return
    /// `EINTR` promptly; returns whether there was any. With no call in progress nothing
    /// happens: a wake is never kept to end a later, unrelated call (F27). A daemon whose stop
    /// may race with the start of its next call uses [`Client::request_stop`].
    pub fn wakeup(&self) -> bool {
        self.ctx.gate.wake_all(&self.ctx.wake)
    }

    /// F13, F27: as [`Client::wakeup`], async-signal-safe (atomics and one write(2): no lock,
    /// no allocation, no log). `true`: a call was in progress (queued, running or nested) and
    /// had not settled its outcome; each such call returns `EINTR` — promptly, since every wait
    /// it makes from now on ends — even one that had already made its last wait (a write that
    /// was applied then reports `maybe_applied = 1`). A notification settles when the outbox
    /// accepts it. `false`: no such call, and nothing happens.
    pub fn try_wakeup(&self) -> bool {
        self.ctx.wake.try_wake()
    }

    /// F27, async-signal-safe: sets the context's "stop requested" state. The calls in
    /// progress end with [`Error::StopRequested`] (promptly: at their next wait), and every
    /// later call fails with it at once, until [`Client::clear_stop_request`] — so a stop
    /// requested between a daemon's flag check and its next call still ends that call.
    pub fn request_stop(&self) {
        self.ctx.wake.request_stop();
    }

    /// F27: clears the "stop requested" state; later calls run again.
    pub fn clear_stop_request(&self) {
        self.ctx.wake.clear_stop();
    }

    /// Whether a stop is requested (F27).
    pub fn stop_requested(&self) -> bool {
        self.ctx.wake.stop_requested()
    }

    /// The context's wake state, for the C layer's async-signal-safe entry points (F27): it
    /// lives as long as any handle of the context.
    pub fn wake_state(&self) -> &WakeState {
        &self.ctx.wake
    }

    /// F15: `None` restores `XCE_RETRY_DEFAULTS`; an invalid config is `EINVAL`. For the calls
    /// that start after this one; never waits for a call in progress.
    pub fn set_retry_config(&self, cfg: Option<RetryConfig>) -> Result<(), Error> {
        let cfg = cfg.unwrap_or(XCE_RETRY_DEFAULTS);
        cfg.validate()?;
        self.ctx.settings.lock().retry = cfg;
        Ok(())
    }

    pub fn retry_config(&self) -> RetryConfig {
        self.ctx.settings.lock().retry
    }

    /// F15: sets one knob (timeouts, deadline, hint policy, waitPrimary), for the calls that
    /// start after this one; never waits for a call in progress.
    pub fn set_option(&self, opt: ClientOption) -> Result<(), Error> {
        self.ctx.settings.lock().options.apply(opt)
    }

    pub fn options(&self) -> Options {
        self.ctx.settings.lock().options
    }

    /// F10, F20: installs (or with `None` removes) the reconnect hook. It runs on the calling
    /// thread after a reconnect, once the new connection is confirmed to reach the primary
    /// (one `hello`; a standby's answer just rotates on), and before the interrupted op is
    /// re-sent: once per failover. Ops it makes on the handle it gets are single attempts on
    /// that connection; a negative return is a failed attempt, classified like a status.
    /// When this returns true, the old hook is not running on another thread and never runs
    /// again; false: waiting for it would never end (its thread waits for this one), see
    /// [`CallbackSlot::set`].
    pub fn set_reconnect_handler(&self, hook: Option<ReconnectHook>) -> bool {
        if self.ctx.forked_busy.load(Ordering::SeqCst) {
            return true; // a child's copy of a context busy at the fork runs no callback
        }
        self.ctx.hook.set(hook)
    }

    /// F17, F20: installs (or removes) the event callback; final when it returns, like
    /// [`Client::set_reconnect_handler`].
    pub fn set_event_handler(&self, handler: Option<EventHandler>) -> bool {
        let h = handler.map(|h| {
            Arc::new(move |_: &Client, e: &Event| h(e))
                as Arc<dyn Fn(&Client, &Event) + Send + Sync>
        });
        self.set_event_handler_with_handle(h)
    }

    /// As [`Client::set_event_handler`], with the handle of the call that caused each event.
    pub fn set_event_handler_with_handle(&self, handler: Option<EventHandlerWithHandle>) -> bool {
        if self.ctx.forked_busy.load(Ordering::SeqCst) {
            return true; // a child's copy of a context busy at the fork runs no callback
        }
        self.ctx.events.set(handler)
    }

    /// F17 counters; never waits for a call in progress.
    pub fn stats(&self) -> Stats {
        self.ctx.observer.stats()
    }

    /// F19: the report of the last failed call on this context; never waits.
    pub fn last_error(&self) -> Option<CallReport> {
        self.ctx.observer.last_error()
    }

    /// The random id carried by this client's writes (F16); a child of `fork` gets its own at
    /// its first call (F26).
    pub fn client_id(&self) -> ClientId {
        *self.ctx.client_id.lock()
    }

    /// The configured masters, in order.
    pub fn configured_masters(&self) -> &[Endpoint] {
        &self.ctx.masters
    }

    /// F29: the masters in rotation — the configured ones, in order, then those learned from a
    /// primary, in the order learned (the same list as `Stats::masters`). Never waits.
    pub fn masters(&self) -> Vec<Endpoint> {
        self.ctx.observer.stats().masters.to_vec()
    }

    /// F1: the one entry every op goes through. Returns the successful reply.
    pub fn call(&self, op: Op) -> Result<Reply, Error> {
        self.call_traced(&op).map(|(reply, _)| reply)
    }

    /// [`Client::call`], with who answered (to report a failure found in the answer, F24).
    fn call_traced(&self, op: &Op) -> Result<(Reply, CallTrace), Error> {
        let (result, woken) = self.run_call(|env| retry::run(env, op));
        match (woken, result) {
            (Some(e), Ok((_, trace))) => {
                // Answered, then woken before it returned: a try_wakeup that said 1 counted it.
                let mut report = trace.report(e, &self.ctx.observer.stats().masters);
                for m in report.masters.iter_mut().filter(|m| m.note.is_some()) {
                    m.note = Some("answered; the call was woken before it returned".into());
                }
                xlog!(Level::Info, "{}: {report}", self.ctx.tag);
                self.ctx.observer.set_last_error(report);
                Err(e)
            }
            (Some(e), Err(other)) => Err(self.woken_instead(other, e)),
            (None, r) => r,
        }
    }

    /// F27: a call that a wake counted returns `EINTR`, whatever it achieved (a write that was
    /// applied reports `maybe_applied = 1`); a stop, a close or a cancellation keeps its own
    /// error.
    fn woken_instead(&self, e: Error, woken: Error) -> Error {
        if e.stops_the_call() {
            return e;
        }
        if let Some(mut r) = self.ctx.observer.last_error() {
            r.error = woken;
            self.ctx.observer.set_last_error(r);
        }
        woken
    }

    /// Runs `f` as a call of this context ([`Client::run_call`]); a call a wake counted
    /// returns `EINTR`.
    fn with_env<T>(&self, f: impl FnOnce(&CallEnv<'_>) -> Result<T, Error>) -> Result<T, Error> {
        match self.run_call(f) {
            (Ok(_), Some(e)) => Err(e),
            (Err(e), Some(w)) => Err(self.woken_instead(e, w)),
            (r, None) => r,
        }
    }

    /// Runs `f` as a call of this context: in its turn at the gate (F11), with the settings of
    /// the moment, a waker that a wake, a cancel or a stop ends, and the loop's state. The
    /// second value is `Some(EINTR)` when a wake counted the call before it settled its outcome
    /// (F27: `try_wakeup` said so, so the call must return it); a stop or close keeps the
    /// call's own result.
    fn run_call<T>(
        &self,
        f: impl FnOnce(&CallEnv<'_>) -> Result<T, Error>,
    ) -> (Result<T, Error>, Option<Error>) {
        let ctx = &*self.ctx;
        let token = self.call.token.as_deref();
        // P2: the process id is read once for the whole call (F21's and F26's checks).
        let _process = process::fdident::CallProcess::enter();
        if ctx.forked_busy.load(Ordering::SeqCst) {
            return (Err(Error::Closed), None);
        }
        // P2: a context nobody else is using is entered and owned under one lock.
        let (entry, owned) = match ctx.gate.enter_and_try_acquire(&ctx.wake, token) {
            Ok(e) => e,
            Err(e) => return (Err(e), None),
        };
        let entered = Entered {
            ctx,
            settle: CallSettle::new(&ctx.wake, entry.since),
            owned: Cell::new(owned),
        };
        let result = (|| {
            if !owned {
                ctx.gate.acquire(&entry, &ctx.wake, token)?;
                entered.owned.set(true);
            }
            let guard = ctx.link.lock();
            ctx.rekey_after_fork(&guard);
            let settings = *ctx.settings.lock();
            let deadline = match (settings.options.call_deadline, self.call.deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let env = CallEnv {
                link: &guard,
                waker: ctx.wake.waker(entry.since, token),
                observer: &ctx.observer,
                callbacks: &CallCallbacks(self),
                settings,
                deadline,
                tag: &ctx.tag,
                settle: &entered.settle,
            };
            f(&env)
        })();
        let woken = entered.settle.settle() && !ctx.wake.is_closed() && !ctx.wake.stop_requested();
        drop(entered);
        (result, woken.then_some(Error::Errno(libc::EINTR)))
    }

    /// Runs `op` and takes the payload out of its reply with `take`; a reply without the
    /// payload the op expects is `E_XCE_PROTO`, reported as the call's failure (F24).
    fn call_for<T>(&self, op: Op, take: impl FnOnce(ReplyData) -> Option<T>) -> Result<T, Error> {
        let (reply, trace) = self.call_traced(&op)?;
        take(reply.data).ok_or_else(|| self.failed_after_loop(trace, Error::Proto))
    }

    /// F24: a failure found in the answer of a call that the loop saw succeed.
    fn failed_after_loop(&self, trace: CallTrace, e: Error) -> Error {
        let report = trace.report(e, &self.ctx.observer.stats().masters);
        xlog!(Level::Warn, "{}: {report}", self.ctx.tag);
        self.ctx.observer.set_last_error(report);
        e
    }

    // ---------------------------------------------------------------------------------------
    // Reply-bearing reads

    pub fn hello(&self) -> Result<ControllerInfo, Error> {
        let op = Op::Hello(Hello {
            client_name: self.ctx.client_name.clone(),
            protocol_version: PROTOCOL_VERSION,
        });
        self.call_for(op, |d| match d {
            ReplyData::CtrlInfo(i) => Some(i),
            _ => None,
        })
    }

    /// Every job matching `filter`, paged through one snapshot (listing.rs): any size.
    pub fn joblist(&self, filter: JobFilter) -> Result<Vec<Job>, Error> {
        self.joblist_all(filter)
    }

    pub fn jobinfo(&self, job_id: u64) -> Result<Job, Error> {
        self.call_for(Op::JobInfo { job_id }, |d| match d {
            ReplyData::Job(j) => Some(j),
            _ => None,
        })
    }

    pub fn reslist(&self) -> Result<Vec<Resource>, Error> {
        self.call_for(Op::ResList, |d| match d {
            ReplyData::Resources(v) => Some(v),
            ReplyData::None => Some(Vec::new()),
            _ => None,
        })
    }

    pub fn workerlist(&self) -> Result<Vec<Host>, Error> {
        self.call_for(Op::WorkerList, |d| match d {
            ReplyData::Hosts(v) => Some(v),
            ReplyData::None => Some(Vec::new()),
            _ => None,
        })
    }

    pub fn clusterconf(&self) -> Result<ClusterConf, Error> {
        self.call_for(Op::ClusterConf, |d| match d {
            ReplyData::ClusterConf(c) => Some(c),
            _ => None,
        })
    }

    pub fn resval(&self, host: &str) -> Result<Vec<ResVal>, Error> {
        self.call_for(Op::ResVal { host: host.into() }, |d| match d {
            ReplyData::ResVals(v) => Some(v),
            ReplyData::None => Some(Vec::new()),
            _ => None,
        })
    }

    // ---------------------------------------------------------------------------------------
    // Reply-bearing writes (F16: each carries this client's id and a request id that stays the
    // same across the re-sends of one call)

    /// Returns the session id.
    pub fn join(&self, join: Join) -> Result<u64, Error> {
        self.call_for(Op::Join(join), |d| match d {
            ReplyData::SessionId(id) => Some(id),
            _ => None,
        })
    }

    /// Submits a job; a `job_id` of 0 is replaced by [`new_job_id`]. Returns the job id.
    pub fn jobsubmit(&self, mut spec: JobSpec) -> Result<u64, Error> {
        if spec.job_id == 0 {
            spec.job_id = new_job_id();
        }
        let job_id = spec.job_id;
        // A DUP on a re-send (F4) carries no data: the id we sent is the answer.
        self.call_for(Op::JobSubmit(spec), |d| match d {
            ReplyData::JobId(id) => Some(id),
            _ => Some(job_id),
        })
    }

    pub fn jobdispatch(&self, job_id: u64, host: &str) -> Result<(), Error> {
        self.call(Op::JobDispatch {
            job_id,
            host: host.into(),
        })
        .map(drop)
    }

    pub fn jobctrl(&self, job_id: u64, action: JobAction) -> Result<(), Error> {
        self.call(Op::JobCtrl { job_id, action }).map(drop)
    }

    pub fn queuectrl(&self, queue: &str, action: QueueAction) -> Result<(), Error> {
        self.call(Op::QueueCtrl {
            queue: queue.into(),
            action,
        })
        .map(drop)
    }

    /// C17 (admin): adds controller `id` at `client_addr` / `raft_addr` (`HOST:PORT`); returns
    /// once it is a voter.
    pub fn member_add(&self, id: u32, client_addr: &str, raft_addr: &str) -> Result<(), Error> {
        self.call(Op::MemberAdd {
            id,
            client_addr: client_addr.into(),
            raft_addr: raft_addr.into(),
        })
        .map(drop)
    }

    /// C17 (admin): removes controller `id` from the membership.
    pub fn member_remove(&self, id: u32) -> Result<(), Error> {
        self.call(Op::MemberRemove { id }).map(drop)
    }

    pub fn hostctrl(&self, host: &str, action: HostAction) -> Result<(), Error> {
        self.call(Op::HostCtrl {
            host: host.into(),
            action,
        })
        .map(drop)
    }

    pub fn update_resvals(&self, host: &str, resvals: Vec<ResVal>) -> Result<(), Error> {
        self.call(Op::UpdateResvals {
            host: host.into(),
            resvals,
        })
        .map(drop)
    }

    pub fn update_jusage(&self, job_id: u64, usage: Usage) -> Result<(), Error> {
        self.call(Op::UpdateJusage { job_id, usage }).map(drop)
    }

    /// Returns the task id.
    pub fn runtask(&self, host: &str, command: &str) -> Result<u64, Error> {
        let op = Op::RunTask {
            host: host.into(),
            command: command.into(),
        };
        self.call_for(op, |d| match d {
            ReplyData::TaskId(t) => Some(t),
            _ => None,
        })
    }

    pub fn set_pend_reason(&self, job_id: u64, reason: &str) -> Result<(), Error> {
        self.call(Op::SetPendReason {
            job_id,
            reason: reason.into(),
        })
        .map(drop)
    }

    pub fn clear_reason(&self, job_id: u64) -> Result<(), Error> {
        self.call(Op::ClearReason { job_id }).map(drop)
    }

    // ---------------------------------------------------------------------------------------
    // Fire-and-forget (F12 amended): a notification or heartbeat that returns 0 was accepted
    // into the context's outbox and is delivered exactly once while the context lives (a
    // notification needs a RUN job and a joined WORKER session on the primary); `nop` is the
    // send result only.

    pub fn notify(&self, notify: Notify) -> Result<(), Error> {
        self.call(Op::Notify(notify)).map(drop)
    }

    pub fn heartbeat(&self, host: &str) -> Result<(), Error> {
        self.call(Op::Heartbeat { host: host.into() }).map(drop)
    }

    pub fn nop(&self) -> Result<(), Error> {
        self.call(Op::Nop).map(drop)
    }

    /// F12 (amended): waits until every notification and heartbeat accepted so far was
    /// acknowledged by a primary, at most `timeout`, failing over as needed. `ETIMEDOUT` when
    /// the timeout passes first (the rest stay queued); `EINTR`, `ECANCELED`, `E_XCE_CLOSED`
    /// as any call.
    pub fn flush(&self, timeout: Duration) -> Result<(), Error> {
        self.with_env(|env| retry::fire::flush(env, timeout))
    }

    /// Notifications and heartbeats accepted and not yet acknowledged (F12); never waits.
    pub fn outbox_depth(&self) -> u64 {
        self.ctx.observer.stats().outbox_depth
    }
}

/// Keeps `Client` usable from many threads (c-api.md, F11).
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Client>();
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_masters() {
        let m = parse_masters("a:1, b.example:2 ,[::1]:3").unwrap();
        assert_eq!(
            m,
            vec![
                Endpoint::new("a", 1),
                Endpoint::new("b.example", 2),
                Endpoint::new("::1", 3)
            ]
        );
        let nine = ["h:1"; 9].join(",");
        for bad in ["", "a", "a:", "a:0", "a:70000", "a:1,,b:2", ":5", &nine] {
            assert_eq!(
                parse_masters(bad),
                Err(Error::Errno(libc::EINVAL)),
                "{bad:?}"
            );
        }
        let long = format!("{}:1", "h".repeat(XCE_MAXHOSTNAME_LEN + 1));
        assert!(parse_masters(&long).is_err());
    }

    #[test]
    fn job_ids_are_unique_and_never_zero() {
        let mut ids: Vec<u64> = (0..10_000).map(|_| new_job_id()).collect();
        assert!(ids.iter().all(|&i| i != 0));
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 10_000);
    }
}

#[cfg(test)]
mod identity_env_tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn token_and_tls_files_from_the_environment() {
        assert_eq!(auth_token_from_env(&env(&[])), Ok(None));
        assert_eq!(
            auth_token_from_env(&env(&[("XCE_AUTH_TOKEN", " xce1:user-a:9:ff \n")])),
            Ok(Some("xce1:user-a:9:ff".into()))
        );
        let dir = std::env::temp_dir().join(format!("xce-tok-{}", std::process::id()));
        std::fs::write(&dir, "xce1:admin:9:00\nignored\n").unwrap();
        let p = dir.display().to_string();
        assert_eq!(
            auth_token_from_env(&env(&[("XCE_AUTH_TOKEN_FILE", &p)])),
            Ok(Some("xce1:admin:9:00".into()))
        );
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(
            auth_token_from_env(&env(&[("XCE_AUTH_TOKEN_FILE", &p)])),
            Err(Error::Errno(libc::ENOENT))
        );
        assert_eq!(tls_from_env(&env(&[("XCE_TLS_CERT_FILE", "c")])), None);
        let t = tls_from_env(&env(&[
            ("XCE_TLS_CA_FILE", "ca.pem"),
            ("XCE_TLS_CERT_FILE", "me.pem"),
            ("XCE_TLS_KEY_FILE", "me.key"),
        ]))
        .unwrap();
        assert_eq!(t.ca_file, PathBuf::from("ca.pem"));
        assert_eq!(t.key_file, Some(PathBuf::from("me.key")));
    }
}
