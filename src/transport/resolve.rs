//! F23: name lookups that obey the clock.
//!
//! A numeric address (`10.0.0.7`, `::1`, `fe80::1%eth0`, even `127.1`) is parsed on the
//! calling thread: no lookup, no thread, no fd. A name goes to getaddrinfo (so NSS applies:
//! `/etc/hosts`, DNS, whatever nsswitch.conf says), which cannot be bounded or interrupted, so
//! it runs on a short-lived helper thread that does nothing else: all signals blocked, no log,
//! no callback (every callback of the library still runs on the caller's thread). The caller
//! waits for the lookup's eventfd with the context's [`Waker`], so the deadline (the connect
//! timeout capped by the call deadline) or a wake ends the wait at once; the lookup then
//! finishes on its own and its answer still fills the cache.
//!
//! - One lookup in flight per name: later callers join it, so a hung DNS costs one thread per
//!   name, and at most [`MAX_LOOKUPS_IN_FLIGHT`] threads in all (more distinct names fail at
//!   once with [`LookupFailure::TooMany`]; a hostile controller can name any host in a hint).
//! - The lookup's eventfd lives as long as the lookup or its last waiter; the thread exits when
//!   the lookup is done. Nothing remains once it finished and nobody waits.
//! - Cache per name (case-insensitive, any port): an answer is fresh for [`POSITIVE_TTL`]; after
//!   that it is still used, for at most [`MAX_STALE`], while a refresh runs in the background
//!   and when the refresh fails — a DNS outage during a failover does not also cut the client
//!   off controllers whose addresses it knows. A failure is never cached: the next call after
//!   the fault is gone looks the name up again.
//! - After `fork` the child starts with an empty cache (the lookups in flight belong to the
//!   parent's threads, which the child does not have).

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::waker::{Wait, Waker};
use crate::error::{strerror, Error};
use crate::process::wakepipe::WakePipe;
use crate::process::ForkLock;

/// How long a looked-up answer is used without asking again (getaddrinfo reports no TTL).
pub const POSITIVE_TTL: Duration = Duration::from_secs(30);
/// How long an answer older than [`POSITIVE_TTL`] is still used while a refresh runs or after it
/// failed.
pub const MAX_STALE: Duration = Duration::from_secs(600);
/// Names remembered at most (configured masters are few; hints come from the network).
pub const MAX_NAMES: usize = 256;
/// Lookups (helper threads) in flight at most, all names together.
pub const MAX_LOOKUPS_IN_FLIGHT: usize = 16;
/// The helper thread's name (visible in `/proc/PID/task/*/comm`, `top -H`, debuggers).
pub const LOOKUP_THREAD_NAME: &str = "xce-resolve";

/// Why a name lookup gave no address. `Copy`, so it can travel in attempt outcomes and reports;
/// [`LookupFailure::describe`] is its text for the last error and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LookupFailure {
    /// getaddrinfo failed: its `EAI_*` code and, for `EAI_SYSTEM`, the errno.
    Gai { code: i32, errno: i32 },
    /// getaddrinfo succeeded without any IPv4 or IPv6 stream address.
    NoAddress,
    /// [`MAX_LOOKUPS_IN_FLIGHT`] other names are being looked up already.
    TooMany,
    /// The deadline passed first (the lookup goes on; its answer will fill the cache).
    TimedOut,
}

impl LookupFailure {
    /// The status a call returns for it: `ETIMEDOUT` for a timeout, else `E_XCE_LOOKUP`.
    pub fn error(self) -> Error {
        match self {
            LookupFailure::TimedOut => Error::Errno(libc::ETIMEDOUT),
            _ => Error::Lookup,
        }
    }

    /// The reason alone: getaddrinfo's own text (`gai_strerror`) for its failures.
    pub fn reason(self) -> String {
        match self {
            LookupFailure::Gai { code, errno } => {
                let text = gai_text(code);
                if code == libc::EAI_SYSTEM && errno != 0 {
                    format!("{text}: {}", strerror(errno))
                } else {
                    text
                }
            }
            LookupFailure::NoAddress => "no IPv4 or IPv6 address".into(),
            LookupFailure::TooMany => {
                format!("too many name lookups in progress ({MAX_LOOKUPS_IN_FLIGHT})")
            }
            LookupFailure::TimedOut => "timed out".into(),
        }
    }

    /// The sentence for the last error and the log: "name lookup of db7.example failed: Name
    /// or service not known", "name lookup of db7.example timed out".
    pub fn describe(self, host: &str) -> String {
        match self {
            LookupFailure::TimedOut => format!("name lookup of {host} timed out"),
            _ => format!("name lookup of {host} failed: {}", self.reason()),
        }
    }
}

impl fmt::Display for LookupFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason())
    }
}

/// Why [`Resolver::resolve`] returned no address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResolveError {
    /// The lookup failed or ran out of time: report it as a lookup (F23).
    Lookup(LookupFailure),
    /// The wait ended otherwise: a wake (`EINTR`, F13), or no eventfd, poll or thread could be
    /// had (their errno).
    Wait(Error),
}

impl ResolveError {
    /// The status a call returns for it.
    pub fn error(self) -> Error {
        match self {
            ResolveError::Lookup(f) => f.error(),
            ResolveError::Wait(e) => e,
        }
    }

    /// The lookup's own failure, if that is what it was.
    pub fn lookup_failure(self) -> Option<LookupFailure> {
        match self {
            ResolveError::Lookup(f) => Some(f),
            ResolveError::Wait(_) => None,
        }
    }
}

impl From<ResolveError> for Error {
    fn from(e: ResolveError) -> Error {
        e.error()
    }
}

/// A lookup function: a name (never numeric) to its addresses, ports 0. It runs on the helper
/// thread. The system's is [`system_lookup`]; tests inject fakes.
pub type LookupFn = Arc<dyn Fn(&str) -> Result<Vec<SocketAddr>, LookupFailure> + Send + Sync>;

/// One lookup in flight, shared by its thread and its waiters.
struct Flight {
    /// Readable once `result` is set (written once, never drained). A pipe, not an eventfd:
    /// its identity is checked before the helper writes it and before it is closed (F21).
    done: WakePipe,
    result: OnceLock<Result<Arc<[SocketAddr]>, LookupFailure>>,
}

impl Drop for Flight {
    fn drop(&mut self) {
        self.done.close();
    }
}

struct Entry {
    /// The last answer and when it came.
    addrs: Option<(Arc<[SocketAddr]>, Instant)>,
    flight: Option<Arc<Flight>>,
}

struct State {
    /// The process these entries belong to (a forked child starts afresh).
    pid: u32,
    names: HashMap<String, Entry>,
    in_flight: usize,
}

impl State {
    fn new() -> State {
        State {
            pid: std::process::id(),
            names: HashMap::new(),
            in_flight: 0,
        }
    }
}

/// A lookup cache with at most one lookup in flight per name. The process has one
/// ([`system`]); tests make their own with a fake lookup.
pub struct Resolver {
    lookup: LookupFn,
    ttl: Duration,
    max_stale: Duration,
    state: ForkLock<State>,
}

impl fmt::Debug for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.state.lock_local();
        f.debug_struct("Resolver")
            .field("names", &st.names.len())
            .field("in_flight", &st.in_flight)
            .finish_non_exhaustive()
    }
}

/// What the cache says about a name, under the lock.
enum Found {
    Addrs(Arc<[SocketAddr]>),
    Wait(Arc<Flight>),
}

impl Resolver {
    /// A resolver over `lookup` with the default TTLs.
    pub fn new(lookup: LookupFn) -> Arc<Resolver> {
        Resolver::with_ttl(lookup, POSITIVE_TTL, MAX_STALE)
    }

    /// A resolver with its own TTLs (tests).
    pub fn with_ttl(lookup: LookupFn, ttl: Duration, max_stale: Duration) -> Arc<Resolver> {
        Arc::new(Resolver {
            lookup,
            ttl,
            max_stale,
            state: ForkLock::new(State::new(), forget_the_parent),
        })
    }

    /// The addresses of `host:port`, in getaddrinfo's order (F23). A numeric host is parsed
    /// here; a fresh or usable stale cache entry answers at once; otherwise the caller waits
    /// for the lookup until `deadline` (`Lookup(TimedOut)`) or a wake (`Wait(EINTR)`).
    pub fn resolve(
        self: &Arc<Self>,
        host: &str,
        port: u16,
        deadline: Instant,
        waker: &Waker,
    ) -> Result<Vec<SocketAddr>, ResolveError> {
        if let Some(a) = numeric(host, port) {
            return Ok(vec![a]);
        }
        let flight = match self.find(host)? {
            Found::Addrs(a) => return Ok(with_port(&a, port)),
            Found::Wait(f) => f,
        };
        loop {
            if let Some(r) = flight.result.get() {
                return r
                    .as_ref()
                    .map(|a| with_port(a, port))
                    .map_err(|f| ResolveError::Lookup(*f));
            }
            match waker.wait(Some(flight.done.read_fd()), libc::POLLIN, Some(deadline)) {
                // `result` is set before `done` becomes readable.
                Ok(Wait::Ready(_)) => {
                    if flight.result.get().is_none() {
                        return Err(ResolveError::Wait(Error::Internal));
                    }
                }
                Ok(Wait::TimedOut) => return Err(ResolveError::Lookup(LookupFailure::TimedOut)),
                Err(e) => return Err(ResolveError::Wait(e)),
            }
        }
    }

    /// Starts looking `host` up unless it is numeric, cached fresh or in flight already; never
    /// waits. (E.g. at `start`, so that every master's name is known before a redirect hint
    /// has to be compared with it.) A lookup that cannot start is not an error here.
    pub fn prefetch(self: &Arc<Self>, host: &str) {
        if numeric(host, 0).is_none() {
            let _ = self.find(host);
        }
    }

    /// The addresses the cache holds for `host:port` (fresh or still usable stale), or the
    /// parsed numeric address; never a lookup, never a wait.
    pub fn cached(&self, host: &str, port: u16) -> Option<Vec<SocketAddr>> {
        if let Some(a) = numeric(host, port) {
            return Some(vec![a]);
        }
        let key = host.to_ascii_lowercase();
        let now = Instant::now();
        let st = self.lock();
        let (addrs, at) = st.names.get(&key)?.addrs.as_ref()?;
        (now.saturating_duration_since(*at) < self.max_stale).then(|| with_port(addrs, port))
    }

    /// Looks up the cache, starting a lookup (or a background refresh) when needed.
    fn find(self: &Arc<Self>, host: &str) -> Result<Found, ResolveError> {
        let key = host.to_ascii_lowercase();
        let now = Instant::now();
        let mut st = self.lock();
        if let Some(e) = st.names.get(&key) {
            let usable = e.addrs.as_ref().and_then(|(a, at)| {
                let age = now.saturating_duration_since(*at);
                (age < self.max_stale).then(|| (a.clone(), age < self.ttl))
            });
            match (usable, e.flight.clone()) {
                (Some((a, true)), _) => return Ok(Found::Addrs(a)),
                (Some((a, false)), Some(_)) => return Ok(Found::Addrs(a)),
                (Some((a, false)), None) => {
                    // Stale: answer now, refresh behind (a refresh that cannot start leaves
                    // the stale answer in use; the next call tries again).
                    let _ = self.start(&mut st, &key);
                    return Ok(Found::Addrs(a));
                }
                (None, Some(f)) => return Ok(Found::Wait(f)),
                (None, None) => {}
            }
        }
        self.start(&mut st, &key).map(Found::Wait)
    }

    /// The state, reset first in a forked child (the process's resolver is reset by the fork
    /// handler already; this catches a child made without it).
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        let mut st = self.state.lock_local();
        if st.pid != std::process::id() {
            *st = State::new();
        }
        st
    }

    /// Starts the lookup of `key` on a helper thread and records it as in flight.
    fn start(self: &Arc<Self>, st: &mut State, key: &str) -> Result<Arc<Flight>, ResolveError> {
        if st.in_flight >= MAX_LOOKUPS_IN_FLIGHT {
            return Err(ResolveError::Lookup(LookupFailure::TooMany));
        }
        // Owned by the Flight from here on (closed with its last reference).
        let done = WakePipe::new().map_err(ResolveError::Wait)?;
        let flight = Arc::new(Flight {
            done,
            result: OnceLock::new(),
        });
        let (me, name, f) = (self.clone(), key.to_string(), flight.clone());
        spawn_without_signals(move || me.run(&name, &f))
            .map_err(|e| ResolveError::Wait(Error::from_io(&e)))?;
        if !st.names.contains_key(key) {
            evict(&mut st.names, Instant::now(), self.max_stale);
        }
        st.names
            .entry(key.to_string())
            .or_insert(Entry {
                addrs: None,
                flight: None,
            })
            .flight = Some(flight.clone());
        st.in_flight += 1;
        Ok(flight)
    }

    /// The helper thread's whole work: the lookup, the cache update, the completion signal.
    /// Never logs, never calls back.
    fn run(&self, name: &str, flight: &Arc<Flight>) {
        let lookup = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.lookup)(name)));
        let result: Result<Arc<[SocketAddr]>, LookupFailure> = match lookup {
            Ok(Ok(addrs)) => {
                let mut unique: Vec<SocketAddr> = Vec::with_capacity(addrs.len());
                for a in addrs {
                    if !unique.contains(&a) {
                        unique.push(a);
                    }
                }
                if unique.is_empty() {
                    Err(LookupFailure::NoAddress)
                } else {
                    Ok(Arc::from(unique))
                }
            }
            Ok(Err(f)) => Err(f),
            Err(_) => Err(LookupFailure::Gai {
                code: libc::EAI_FAIL,
                errno: 0,
            }),
        };
        {
            // The cache first, the flight's result after: a caller who finds no flight in the
            // cache any more starts a new lookup rather than reading this one's failure.
            let mut st = self.state.lock_local();
            // In a forked child this thread does not exist, so the state is the parent's.
            st.in_flight = st.in_flight.saturating_sub(1);
            if let Some(e) = st.names.get_mut(name) {
                if e.flight.as_ref().is_some_and(|f| Arc::ptr_eq(f, flight)) {
                    e.flight = None;
                }
                if let Ok(a) = &result {
                    e.addrs = Some((a.clone(), Instant::now()));
                }
                // A failure keeps a stale answer (used until MAX_STALE) but is not cached.
                if e.addrs.is_none() && e.flight.is_none() {
                    st.names.remove(name);
                }
            }
        }
        let _ = flight.result.set(result);
        // Checked: a caller's closefrom() may have taken the number meanwhile (F21).
        flight.done.notify();
    }
}

/// Makes room for one more name: drops answers past `max_stale`, then the oldest answers.
/// Names with a lookup in flight stay (at most MAX_LOOKUPS_IN_FLIGHT < MAX_NAMES of them).
fn evict(names: &mut HashMap<String, Entry>, now: Instant, max_stale: Duration) {
    if names.len() < MAX_NAMES {
        return;
    }
    names.retain(|_, e| {
        e.flight.is_some()
            || e.addrs
                .as_ref()
                .is_some_and(|(_, at)| now.saturating_duration_since(*at) < max_stale)
    });
    while names.len() >= MAX_NAMES {
        let oldest = names
            .iter()
            .filter(|(_, e)| e.flight.is_none())
            .min_by_key(|(_, e)| e.addrs.as_ref().map(|(_, at)| *at))
            .map(|(k, _)| k.clone());
        match oldest {
            Some(k) => names.remove(&k),
            None => break,
        };
    }
}

/// Spawns the helper thread with every signal blocked from its first instruction (the mask is
/// inherited from the spawning thread, which blocks all signals for the duration of the spawn
/// only): the process's signals never land on a thread the caller does not know about.
fn spawn_without_signals(f: impl FnOnce() + Send + 'static) -> io::Result<()> {
    // SAFETY: sigset_t is plain data; sigfillset initialises it fully.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `all` is a live sigset_t.
    unsafe { libc::sigfillset(&mut all) };
    // SAFETY: as above; `old` receives the caller's mask.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are live sigset_t values; this changes only the calling thread's
    // mask, restored right after the spawn.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old) };
    let r = std::thread::Builder::new()
        .name(LOOKUP_THREAD_NAME.into())
        .spawn(f);
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    r.map(drop) // detached: the thread ends with its lookup
}

fn with_port(addrs: &[SocketAddr], port: u16) -> Vec<SocketAddr> {
    addrs
        .iter()
        .map(|a| {
            let mut a = *a;
            a.set_port(port);
            a
        })
        .collect()
}

/// A numeric host's address, found without any lookup: Rust's parser first (no syscall), then
/// getaddrinfo with `AI_NUMERICHOST` — which never consults NSS or the network — for what it
/// also accepts (`127.1`, `fe80::1%eth0`). Brackets around an IPv6 address are tolerated.
pub fn numeric(host: &str, port: u16) -> Option<SocketAddr> {
    let h = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = h.parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, port));
    }
    // Only what could be numeric: hex digits, dots and colons, then an optional "%scope".
    let addr = h.split('%').next().unwrap_or("");
    let plausible = !addr.is_empty()
        && addr
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'.' || b == b':');
    if !plausible {
        return None;
    }
    let mut a = getaddrinfo(h, libc::AI_NUMERICHOST)
        .ok()?
        .into_iter()
        .next()?;
    a.set_port(port);
    Some(a)
}

/// The system lookup: getaddrinfo, stream sockets, any family, in the order it returns.
pub fn system_lookup(host: &str) -> Result<Vec<SocketAddr>, LookupFailure> {
    getaddrinfo(host, 0)
}

fn getaddrinfo(host: &str, flags: i32) -> Result<Vec<SocketAddr>, LookupFailure> {
    let noname = LookupFailure::Gai {
        code: libc::EAI_NONAME,
        errno: 0,
    };
    let c_host = CString::new(host).map_err(|_| noname)?;
    // SAFETY: addrinfo is plain data; all-zero is the documented "no hints" value.
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_family = libc::AF_UNSPEC;
    hints.ai_socktype = libc::SOCK_STREAM;
    hints.ai_flags = flags;
    let mut res: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: c_host is NUL-terminated, hints is a live addrinfo, res receives a list that we
    // free below with freeaddrinfo.
    let rc = unsafe { libc::getaddrinfo(c_host.as_ptr(), std::ptr::null(), &hints, &mut res) };
    if rc != 0 {
        let errno = if rc == libc::EAI_SYSTEM {
            io::Error::last_os_error().raw_os_error().unwrap_or(0)
        } else {
            0
        };
        return Err(LookupFailure::Gai { code: rc, errno });
    }
    let mut out = Vec::new();
    let mut p = res;
    while !p.is_null() {
        // SAFETY: p is a node of the list getaddrinfo returned, not yet freed.
        let ai = unsafe { &*p };
        if let Some(a) = socket_addr(ai) {
            out.push(a);
        }
        p = ai.ai_next;
    }
    // SAFETY: res is the list getaddrinfo returned; nothing refers to it any more.
    unsafe { libc::freeaddrinfo(res) };
    Ok(out)
}

/// The address of one getaddrinfo result, if it is IPv4 or IPv6 and well-formed.
fn socket_addr(ai: &libc::addrinfo) -> Option<SocketAddr> {
    if ai.ai_addr.is_null() {
        return None;
    }
    let len = ai.ai_addrlen as usize;
    match ai.ai_family {
        libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: ai_addr points to at least sizeof(sockaddr_in) bytes of an AF_INET
            // address; read_unaligned makes no alignment assumption.
            let sin = unsafe { std::ptr::read_unaligned(ai.ai_addr.cast::<libc::sockaddr_in>()) };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(ip, 0)))
        }
        libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { std::ptr::read_unaligned(ai.ai_addr.cast::<libc::sockaddr_in6>()) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                0,
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// getaddrinfo's text for an `EAI_*` code.
fn gai_text(code: i32) -> String {
    // SAFETY: gai_strerror takes any int and returns a pointer to a static NUL-terminated
    // string (glibc: never NULL; checked anyway).
    let p = unsafe { libc::gai_strerror(code) };
    if p.is_null() {
        return format!("getaddrinfo error {code}");
    }
    // SAFETY: p is non-NULL and points to a NUL-terminated static string.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// In a child of `fork` (F26), with the lock held: the lookups in flight belong to threads the
/// child does not have, and the cache to the parent; the child starts afresh. (A lookup's
/// eventfd is closed here when nothing else in the child refers to it; one still referenced by
/// the parent's helper thread, which the child does not have, stays open in the child.)
fn forget_the_parent(st: &mut State) {
    *st = State::new();
}

/// The process's resolver over the system's getaddrinfo. Its lock is safe across `fork`: never
/// found held in a child, whatever a lookup was doing at the fork (F26).
pub fn system() -> &'static Arc<Resolver> {
    static SYSTEM: OnceLock<Arc<Resolver>> = OnceLock::new();
    if let Some(r) = SYSTEM.get() {
        return r;
    }
    let r: &'static Arc<Resolver> = SYSTEM.get_or_init(|| Resolver::new(Arc::new(system_lookup)));
    let inner: &'static Resolver = r;
    inner.state.register();
    crate::process::fork::before_fork(|| {
        system();
    });
    r
}

/// Runs `f` on the calling thread while it holds the process's resolver lock (tests: a fork
/// while another thread holds it, F26; `f` says when it has it and decides when to let go).
#[doc(hidden)]
pub fn hold_system_lock_while<F: FnOnce()>(f: F) {
    let _st = system().lock();
    f();
}

/// [`Resolver::resolve`] on the process's resolver.
pub fn resolve(
    host: &str,
    port: u16,
    deadline: Instant,
    waker: &Waker,
) -> Result<Vec<SocketAddr>, ResolveError> {
    system().resolve(host, port, deadline, waker)
}

/// [`Resolver::prefetch`] on the process's resolver.
pub fn prefetch(host: &str) {
    system().prefetch(host)
}

/// [`Resolver::cached`] on the process's resolver.
pub fn cached(host: &str, port: u16) -> Option<Vec<SocketAddr>> {
    system().cached(host, port)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::WakeState;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    use std::sync::Weak;

    /// A scripted lookup: counts calls, takes `delay`, fails with EAI_AGAIN while `fail` is
    /// set, blocks while `hold` is set, answers `answer` (last octet) as 10.0.0.x.
    #[derive(Default)]
    struct Fake {
        calls: AtomicUsize,
        delay_ms: AtomicUsize,
        fail: AtomicBool,
        hold: AtomicBool,
        answer: AtomicUsize,
    }

    impl Fake {
        fn new(delay_ms: usize) -> Arc<Fake> {
            let f = Fake::default();
            f.delay_ms.store(delay_ms, SeqCst);
            f.answer.store(1, SeqCst);
            Arc::new(f)
        }

        fn resolver(self: &Arc<Fake>, ttl: Duration) -> Arc<Resolver> {
            let me = self.clone();
            Resolver::with_ttl(
                Arc::new(move |_name: &str| {
                    me.calls.fetch_add(1, SeqCst);
                    std::thread::sleep(Duration::from_millis(me.delay_ms.load(SeqCst) as u64));
                    while me.hold.load(SeqCst) {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    if me.fail.load(SeqCst) {
                        return Err(gai(libc::EAI_AGAIN));
                    }
                    let ip = Ipv4Addr::new(10, 0, 0, me.answer.load(SeqCst) as u8);
                    Ok(vec![SocketAddr::from((ip, 0)), SocketAddr::from((ip, 0))])
                }),
                ttl,
                MAX_STALE,
            )
        }

        fn calls(&self) -> usize {
            self.calls.load(SeqCst)
        }
    }

    /// getaddrinfo's failure `code` (no errno).
    const fn gai(code: i32) -> LookupFailure {
        LookupFailure::Gai { code, errno: 0 }
    }

    fn ten(last: u8, port: u16) -> Vec<SocketAddr> {
        vec![SocketAddr::from((Ipv4Addr::new(10, 0, 0, last), port))]
    }

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
        let end = Instant::now() + Duration::from_secs(20);
        while !cond() {
            assert!(Instant::now() < end, "never happened: {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn numeric_hosts_are_parsed_without_a_lookup() {
        let fake = Fake::new(0);
        let r = fake.resolver(POSITIVE_TTL);
        let ws = WakeState::new();
        let w = ws.waker_now();
        let cases: &[(&str, &str)] = &[
            ("127.0.0.1", "127.0.0.1:7"),
            ("::1", "[::1]:7"),
            ("[::1]", "[::1]:7"),
            ("127.1", "127.0.0.1:7"),
            ("fe80::1%1", "[fe80::1%1]:7"),
        ];
        for (host, want) in cases {
            let want: SocketAddr = want.parse().unwrap();
            assert_eq!(r.resolve(host, 7, soon(0), &w), Ok(vec![want]), "{host}");
            assert_eq!(r.cached(host, 7), Some(vec![want]), "{host}");
        }
        assert_eq!(fake.calls(), 0);
        assert_eq!(r.state.lock_local().names.len(), 0);
        assert_eq!(numeric("db7.example", 7), None);
        assert_eq!(numeric("cafe", 7), None, "hex letters alone are a name");
    }

    #[test]
    fn the_deadline_bounds_the_wait_and_the_late_answer_fills_the_cache() {
        let fake = Fake::new(2000);
        let r = fake.resolver(POSITIVE_TTL);
        let ws = WakeState::new();
        let w = ws.waker_now();
        let t = Instant::now();
        let e = r.resolve("db7.example", 7000, soon(200), &w).unwrap_err();
        let took = t.elapsed();
        assert_eq!(e, ResolveError::Lookup(LookupFailure::TimedOut));
        assert_eq!(e.error(), Error::Errno(libc::ETIMEDOUT));
        assert!(took >= Duration::from_millis(200), "{took:?}");
        assert!(
            took < Duration::from_millis(1500),
            "{took:?}: waited for the lookup"
        );
        assert_eq!(r.cached("db7.example", 7000), None);
        wait_until("the abandoned lookup fills the cache", || {
            r.cached("db7.example", 7000).is_some()
        });
        let t = Instant::now();
        assert_eq!(
            r.resolve("db7.example", 7000, soon(0), &w),
            Ok(ten(1, 7000))
        );
        assert!(t.elapsed() < Duration::from_millis(1000));
        assert_eq!(
            r.cached("DB7.Example", 1),
            Some(ten(1, 1)),
            "any case, any port"
        );
        assert_eq!(fake.calls(), 1);
    }

    #[test]
    fn a_wake_ends_the_wait_at_once() {
        let fake = Fake::new(2000);
        let r = fake.resolver(POSITIVE_TTL);
        let ws = Arc::new(WakeState::new());
        let w = ws.waker_now();
        let w2 = ws.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            w2.interrupt();
        });
        let t = Instant::now();
        let e = r
            .resolve("db7.example", 7000, soon(60_000), &w)
            .unwrap_err();
        let took = t.elapsed();
        h.join().unwrap();
        assert_eq!(e, ResolveError::Wait(Error::Errno(libc::EINTR)));
        assert_eq!(e.lookup_failure(), None);
        assert!(
            took < Duration::from_millis(1500),
            "{took:?}: waited for the lookup"
        );
        // The lookup itself goes on and its answer is kept.
        wait_until("the lookup completes", || {
            r.cached("db7.example", 1).is_some()
        });
        assert_eq!(fake.calls(), 1);
    }

    #[test]
    fn concurrent_lookups_of_one_name_join_one_lookup() {
        let fake = Fake::new(300);
        let r = fake.resolver(POSITIVE_TTL);
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let r = r.clone();
                std::thread::spawn(move || {
                    let ws = WakeState::new();
                    let w = ws.waker_now();
                    let host = if i % 2 == 0 {
                        "db7.example"
                    } else {
                        "DB7.example"
                    };
                    r.resolve(host, 7000 + i, soon(20_000), &w)
                })
            })
            .collect();
        for (i, t) in threads.into_iter().enumerate() {
            assert_eq!(t.join().unwrap(), Ok(ten(1, 7000 + i as u16)));
        }
        assert_eq!(fake.calls(), 1);
    }

    #[test]
    fn a_failure_is_reported_with_its_cause_and_not_cached() {
        let fake = Fake::new(0);
        fake.fail.store(true, SeqCst);
        let r = fake.resolver(POSITIVE_TTL);
        let ws = WakeState::new();
        let w = ws.waker_now();
        let e = r
            .resolve("db7.example", 7000, soon(20_000), &w)
            .unwrap_err();
        let f = e.lookup_failure().expect("a lookup failure");
        assert_eq!(f, gai(libc::EAI_AGAIN));
        assert_eq!(e.error(), Error::Lookup);
        assert_eq!(Error::from(e).code(), crate::error::E_XCE_LOOKUP);
        assert_eq!(
            f.describe("db7.example"),
            "name lookup of db7.example failed: Temporary failure in name resolution"
        );
        assert_eq!(r.cached("db7.example", 7000), None);
        // The fault is gone: the very next call looks the name up again and succeeds.
        fake.fail.store(false, SeqCst);
        assert_eq!(
            r.resolve("db7.example", 7000, soon(20_000), &w),
            Ok(ten(1, 7000))
        );
        assert_eq!(fake.calls(), 2);
    }

    #[test]
    fn a_stale_answer_serves_while_its_refresh_runs_and_when_it_fails() {
        let fake = Fake::new(0);
        let r = fake.resolver(Duration::from_millis(50));
        let ws = WakeState::new();
        let w = ws.waker_now();
        assert_eq!(r.resolve("db7.example", 1, soon(20_000), &w), Ok(ten(1, 1)));
        std::thread::sleep(Duration::from_millis(80));
        // Expired: the old answer comes at once, a refresh starts behind it.
        fake.hold.store(true, SeqCst);
        fake.fail.store(true, SeqCst);
        let t = Instant::now();
        assert_eq!(r.resolve("db7.example", 1, soon(0), &w), Ok(ten(1, 1)));
        assert!(t.elapsed() < Duration::from_millis(1000));
        wait_until("the refresh starts", || fake.calls() == 2);
        assert_eq!(r.resolve("db7.example", 1, soon(0), &w), Ok(ten(1, 1)));
        fake.hold.store(false, SeqCst);
        wait_until("the refresh ends", || r.state.lock_local().in_flight == 0);
        // It failed: the stale answer stays in use; the next call refreshes again.
        assert_eq!(r.cached("db7.example", 1), Some(ten(1, 1)));
        fake.fail.store(false, SeqCst);
        fake.answer.store(2, SeqCst);
        assert_eq!(r.resolve("db7.example", 1, soon(0), &w), Ok(ten(1, 1)));
        wait_until("the new answer arrives", || {
            r.cached("db7.example", 1) == Some(ten(2, 1))
        });
        assert_eq!(fake.calls(), 3);
    }

    #[test]
    fn lookups_in_flight_are_bounded_and_leave_nothing_behind() {
        let fake = Fake::new(0);
        fake.hold.store(true, SeqCst);
        let r = fake.resolver(POSITIVE_TTL);
        let ws = WakeState::new();
        let w = ws.waker_now();
        let name = |i: usize| format!("n{i}.example");
        for i in 0..MAX_LOOKUPS_IN_FLIGHT {
            assert_eq!(
                r.resolve(&name(i), 1, soon(0), &w),
                Err(ResolveError::Lookup(LookupFailure::TimedOut))
            );
        }
        let more = r.resolve("one-more.example", 1, soon(0), &w).unwrap_err();
        assert_eq!(more, ResolveError::Lookup(LookupFailure::TooMany));
        assert_eq!(more.error(), Error::Lookup);
        // A name already in flight still joins its lookup.
        assert_eq!(
            r.resolve(&name(0), 1, soon(0), &w),
            Err(ResolveError::Lookup(LookupFailure::TimedOut))
        );
        wait_until("every lookup started", || {
            fake.calls() == MAX_LOOKUPS_IN_FLIGHT
        });
        let flights: Vec<Weak<Flight>> = r
            .state
            .lock_local()
            .names
            .values()
            .filter_map(|e| e.flight.as_ref().map(Arc::downgrade))
            .collect();
        assert_eq!(flights.len(), MAX_LOOKUPS_IN_FLIGHT);
        fake.hold.store(false, SeqCst);
        // Each flight (its eventfd) is freed once its lookup is done and nobody waits.
        wait_until("every flight is freed", || {
            flights.iter().all(|f| f.upgrade().is_none())
        });
        assert_eq!(r.state.lock_local().in_flight, 0);
        assert_eq!(
            r.resolve("one-more.example", 1, soon(20_000), &w),
            Ok(ten(1, 1))
        );
    }

    #[test]
    fn prefetch_starts_a_lookup_without_waiting() {
        let fake = Fake::new(0);
        fake.hold.store(true, SeqCst);
        let r = fake.resolver(POSITIVE_TTL);
        let t = Instant::now();
        r.prefetch("db7.example");
        r.prefetch("db7.example");
        r.prefetch("10.1.2.3");
        assert!(t.elapsed() < Duration::from_millis(1000));
        wait_until("the lookup started", || fake.calls() == 1);
        fake.hold.store(false, SeqCst);
        wait_until("the answer is cached", || {
            r.cached("db7.example", 1) == Some(ten(1, 1))
        });
        assert_eq!(fake.calls(), 1);
    }

    #[test]
    fn the_cache_is_bounded() {
        let fake = Fake::new(0);
        let r = fake.resolver(POSITIVE_TTL);
        let ws = WakeState::new();
        let w = ws.waker_now();
        for i in 0..MAX_NAMES + 20 {
            let host = format!("n{i}.example");
            assert!(r.resolve(&host, 1, soon(20_000), &w).is_ok());
        }
        wait_until("no lookup in flight", || {
            r.state.lock_local().in_flight == 0
        });
        assert!(r.state.lock_local().names.len() <= MAX_NAMES);
        assert!(r
            .cached(&format!("n{}.example", MAX_NAMES + 19), 1)
            .is_some());
    }

    #[test]
    fn the_system_lookup_goes_through_nss() {
        let local = system_lookup("localhost").expect("localhost resolves (/etc/hosts)");
        assert!(local.iter().all(|a| a.ip().is_loopback()), "{local:?}");
        let e = system_lookup("").unwrap_err();
        assert!(matches!(e, LookupFailure::Gai { .. }), "{e:?}");
        assert_eq!(system_lookup("a\0b"), Err(gai(libc::EAI_NONAME)));
        let f = gai(libc::EAI_NONAME);
        assert_eq!(
            f.describe("db7.example"),
            "name lookup of db7.example failed: Name or service not known"
        );
        assert_eq!(
            LookupFailure::TimedOut.describe("db7.example"),
            "name lookup of db7.example timed out"
        );
        let sys = LookupFailure::Gai {
            code: libc::EAI_SYSTEM,
            errno: libc::EMFILE,
        };
        assert!(sys.reason().ends_with(": Too many open files"), "{sys}");
    }

    #[test]
    fn the_process_resolver_answers_localhost_through_a_helper_thread() {
        let ws = WakeState::new();
        let w = ws.waker_now();
        let a = resolve("localhost", 7000, soon(20_000), &w).unwrap();
        assert!(a.iter().all(|a| a.ip().is_loopback() && a.port() == 7000));
        assert_eq!(cached("LOCALHOST", 7001).map(|v| v.len()), Some(a.len()));
    }
}
