//! THE retry loop (F1): the one place where the pure decisions (classify, budget, rotate,
//! wait_primary) meet sockets, sleeps and callbacks.
//!
//! A call runs while its thread owns the context (the client's gate, F11). The loop's state
//! lives in a [`Link`] inside a `RefCell`; the borrow is released only around the reconnect
//! hook, so the hook's nested calls on the same thread find `in_hook` set and run as single
//! attempts (F10). Every wait goes through the call's [`Waker`], so a wake, a cancellation or
//! the context being stopped ends the call at once (F13, F20); no callback runs once the
//! context is stopped.

use std::cell::{RefCell, RefMut};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::backoff::{Backoff, RetryConfig};
use super::budget::{RetryBudget, RetryDecision};
use super::classify::{classify, is_interrupt, AttemptOutcome, Classification};
use super::log::{xlog, Level};
use super::options::Options;
use super::report::{CallReport, Event, MasterOutcome, Observer};
use super::rotate::{Endpoint, HintRefusal, HintVerdict, Rotator};
use super::suspicion::RoundTrips;
use super::wait_primary::{self, Verdict, Witnesses};
use crate::error::{strerror, Error};
use crate::transport::resolve;
use crate::transport::{Connection, LookupFailure, Waker};
use crate::wire::{ClientId, Hello, Limits, Op, OpKind, Reply, RequestHead, PROTOCOL_VERSION};

/// Extra time granted to a `waitPrimary` reply beyond the wait itself (F18), capped by the
/// reply timeout: the controller answers at the end of the wait, one round trip later.
const WAIT_PRIMARY_SLACK: Duration = Duration::from_millis(250);

/// How long a connect runs alone before the next master is tried beside it (F2, F25): far
/// above a connect's time on a working network, far below the connect timeout.
pub const RACE_STAGGER: Duration = Duration::from_millis(200);

/// The knobs a call runs with, copied when it starts: a setter never waits for a call in
/// progress and changes only the calls that start after it (F15).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    pub retry: RetryConfig,
    pub options: Options,
}

/// The state of one context that the loop mutates, used only by the thread that owns the
/// context (F11).
pub struct Link {
    pub rotator: Rotator,
    pub conn: Option<Connection>,
    pub client_id: ClientId,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// C13: sent in every request (empty: none).
    pub auth_token: String,
    pub limits: Limits,
    /// Last `seq` sent; a reply must echo the awaited one (F9).
    pub seq: u64,
    /// Last write request id handed out (F16).
    pub request_id: u64,
    /// True while the reconnect hook runs: nested calls are single attempts (F10).
    pub in_hook: bool,
    /// A transport failure met by a nested call during the hook: the hook's negative return
    /// then counts as transport, not as a controller status.
    pub hook_transport_error: Option<Error>,
    /// A reconnect happened and the hook has not yet succeeded on it (F10): it runs before the
    /// next send, even when the loop comes back to the same connection after a backoff.
    pub hook_pending: bool,
    /// Configured masters that answered `waitPrimary` with an error, one bit each: plain
    /// sleeps there (F18).
    pub no_wait_primary: u64,
    /// Start of the failover in progress, if one is (F17).
    pub failing_since: Option<Instant>,
    /// A master has served this context: only then is losing one a failover (F17). Before
    /// that, a standby met on the way to the primary is discovery, not a failover.
    pub has_served: bool,
    /// Why the last connect found no address (F23), for the report of the attempt.
    pub lookup_failure: Option<LookupFailure>,
    /// Recent round trips per op: when a reply is late (F25).
    pub round_trips: RoundTrips,
    /// Names the context in log lines.
    pub tag: String,
}

impl Link {
    pub fn new(
        rotator: Rotator,
        client_id: ClientId,
        tls: Option<Arc<rustls::ClientConfig>>,
        tag: String,
    ) -> Link {
        Link {
            rotator,
            conn: None,
            client_id,
            tls,
            auth_token: String::new(),
            limits: Limits::default(),
            seq: 0,
            request_id: 0,
            in_hook: false,
            hook_transport_error: None,
            hook_pending: false,
            no_wait_primary: 0,
            failing_since: None,
            has_served: false,
            lookup_failure: None,
            round_trips: RoundTrips::default(),
            tag,
        }
    }

    /// Closes the connection, if any.
    pub fn close(&mut self) {
        self.conn = None;
    }

    fn current_endpoint(&self) -> Endpoint {
        self.rotator.endpoint(self.rotator.current()).clone()
    }

    /// Whether the kept connection can carry the next request (F21: still our socket).
    fn conn_usable(&mut self) -> bool {
        self.conn.as_mut().is_some_and(Connection::usable)
    }

    /// F12: whether the kept connection is alive, asking the socket.
    fn conn_alive(&mut self) -> bool {
        self.conn.as_mut().is_some_and(|c| !c.is_dead())
    }

    /// Connects to the current target, replacing any old connection (F5: the old one is closed
    /// first). The connect timeout, name lookup included (F23), is capped by `deadline`.
    ///
    /// With `race`, a target that does not answer within [`RACE_STAGGER`] gets company: the
    /// other configured masters not in `avoid` (those already tried; in rotation order, names
    /// already resolved) are tried beside it, and the first to connect becomes the current one
    /// — a silent master costs the stagger, not the connect timeout (F25, issue 12).
    fn connect_current(
        &mut self,
        waker: &Waker,
        connect_timeout: Duration,
        deadline: Option<Instant>,
        race: Option<u64>,
    ) -> Result<(), Error> {
        self.conn = None;
        self.lookup_failure = None;
        let ep = self.current_endpoint();
        let until = cap(Instant::now() + connect_timeout, deadline);
        let addrs = resolve::resolve(&ep.host, ep.port, until, waker).map_err(|e| {
            if let Some(f) = e.lookup_failure() {
                xlog!(Level::Warn, "{}: {}", self.tag, f.describe(&ep.host));
                self.lookup_failure = Some(f);
            }
            e.error()
        })?;
        let others = race.map_or_else(Vec::new, |avoid| self.others_resolved(avoid));
        let conn = if others.is_empty() {
            Connection::connect_addrs(
                &ep.host,
                &addrs,
                self.tls.as_ref(),
                self.limits,
                until,
                waker,
            )?
        } else {
            let masters = self.rotator.masters();
            let mut hosts: Vec<(&str, &[std::net::SocketAddr])> = vec![(&ep.host, &addrs)];
            hosts.extend(
                others
                    .iter()
                    .map(|(i, a)| (masters[*i].host.as_str(), a.as_slice())),
            );
            let (k, conn) = Connection::connect_race(
                &hosts,
                RACE_STAGGER,
                self.tls.as_ref(),
                self.limits,
                until,
                waker,
            )?;
            if k > 0 {
                let winner = others[k - 1].0;
                xlog!(
                    Level::Info,
                    "{}: {} did not answer; connected to {} instead",
                    self.tag,
                    ep,
                    self.rotator.masters()[winner]
                );
                self.rotator.set_current(winner);
            }
            conn
        };
        self.conn = Some(conn);
        self.hook_pending = true;
        Ok(())
    }

    /// One request/reply on the current connection. Returns the reply or the transport error,
    /// and whether the request left (F19: a sent write without reply may have been applied).
    fn exchange(
        &mut self,
        waker: &Waker,
        op: &Op,
        request_id: u64,
        until: Instant,
    ) -> (Result<Reply, Error>, bool) {
        match self.send(waker, op, request_id, until) {
            Err(e) => (Err(e), false),
            Ok(seq) => match self.conn.as_mut() {
                Some(conn) => (conn.recv(seq, until, waker), true),
                None => (Err(Error::Errno(libc::ENOTCONN)), true),
            },
        }
    }

    /// Sends `op` with the next `seq` on the current connection; that `seq`, or why it did not
    /// leave.
    fn send(
        &mut self,
        waker: &Waker,
        op: &Op,
        request_id: u64,
        until: Instant,
    ) -> Result<u64, Error> {
        let conn = self.conn.as_mut().ok_or(Error::Errno(libc::ENOTCONN))?;
        self.seq += 1;
        let head = RequestHead {
            seq: self.seq,
            client_id: self.client_id,
            request_id,
            no_reply: false,
            auth_token: &self.auth_token,
        };
        conn.send_op(&head, op, until, waker)?;
        Ok(head.seq)
    }

    /// The configured masters after the current one in rotation order, without those in
    /// `avoid`, whose addresses are known without a lookup (cached or numeric): the hosts a
    /// connect race or a probe can use at once (F25).
    fn others_resolved(&self, avoid: u64) -> Vec<(usize, Vec<std::net::SocketAddr>)> {
        let Some(c) = self.rotator.current_master() else {
            return Vec::new();
        };
        let masters = self.rotator.masters();
        let n = masters.len();
        (1..n)
            .map(|k| (c + k) % n)
            .filter(|&i| i >= 64 || avoid & (1 << i) == 0)
            .filter_map(|i| resolve::cached(&masters[i].host, masters[i].port).map(|a| (i, a)))
            .collect()
    }

    /// Sends a fire-and-forget request (F12).
    fn send_no_reply(&mut self, waker: &Waker, op: &Op, until: Instant) -> Result<(), Error> {
        let conn = self.conn.as_mut().ok_or(Error::Errno(libc::ENOTCONN))?;
        self.seq += 1;
        let head = RequestHead {
            seq: self.seq,
            client_id: self.client_id,
            request_id: 0,
            no_reply: true,
            auth_token: &self.auth_token,
        };
        conn.send_op(&head, op, until, waker)
    }

    fn next_request_id(&mut self, kind: OpKind) -> u64 {
        if kind == OpKind::Write {
            self.request_id += 1;
            self.request_id
        } else {
            0
        }
    }
}

/// The callbacks of a context, as the loop sees them (F10, F17).
pub trait Callbacks {
    /// Whether a reconnect hook is installed.
    fn has_reconnect_hook(&self) -> bool;
    /// Runs the reconnect hook; `None` when none is installed.
    fn run_reconnect_hook(&self) -> Option<i32>;
    /// Delivers an event to the event handler, if one is installed.
    fn emit(&self, event: Event);
}

/// What one call borrows from its context.
pub struct CallEnv<'a> {
    pub link: &'a RefCell<Link>,
    /// Ends the call's waits: a wake, its call handle's cancellation, the context's stop.
    pub waker: Waker<'a>,
    pub observer: &'a Observer,
    pub callbacks: &'a dyn Callbacks,
    pub settings: Settings,
    /// The call's own deadline (the context's option, or a shorter one of its call handle).
    pub deadline: Option<Duration>,
    /// Names the context in log lines (`name#serial`).
    pub tag: &'a str,
}

impl CallEnv<'_> {
    /// The link, or `EDEADLK` for an op made from an event or log callback during a call.
    fn borrow(&self) -> Result<RefMut<'_, Link>, Error> {
        self.link
            .try_borrow_mut()
            .map_err(|_| Error::Errno(libc::EDEADLK))
    }

    /// F17 events; none once the context is stopped (F20).
    fn emit(&self, event: Event) {
        if self.waker.check() != Err(Error::Closed) {
            self.callbacks.emit(event);
        }
    }

    fn options(&self) -> &Options {
        &self.settings.options
    }
}

/// Log lines of a call name its context (F14).
macro_rules! clog {
    ($env:expr, $lvl:expr, $($arg:tt)+) => {
        xlog!($lvl, "{}: {}", $env.tag, format_args!($($arg)+))
    };
}

/// The `hello` that tells whether a new connection reaches the primary (F10, F12).
fn primary_probe() -> Op {
    Op::Hello(Hello {
        client_name: String::new(),
        protocol_version: PROTOCOL_VERSION,
    })
}

/// Name resolution for hints and `waitPrimary` answers (F23): bounded by the connect timeout
/// and the call's deadline, ended by a wake (then no address: the hint is not followed, and the
/// wait that follows reports the wake).
fn bounded_resolver<'a>(
    env: &'a CallEnv<'_>,
    deadline: Option<Instant>,
) -> impl Fn(&str, u16) -> Vec<std::net::SocketAddr> + 'a {
    let until = cap(Instant::now() + env.options().connect_timeout, deadline);
    move |host: &str, port: u16| resolve::resolve(host, port, until, &env.waker).unwrap_or_default()
}

fn cap(t: Instant, deadline: Option<Instant>) -> Instant {
    deadline.map_or(t, |d| t.min(d))
}

fn bit(m: usize) -> u64 {
    if m < 64 {
        1 << m
    } else {
        0
    }
}

/// What a successful call leaves for the caller: who answered, to report a failure found after
/// the loop (a payload that does not match the op, F24). Plain values: nothing allocated.
#[derive(Debug, Clone, Copy)]
pub struct CallTrace {
    pub op: &'static str,
    /// The configured master that answered (`None`: an unlisted host reached through a hint).
    pub master: Option<usize>,
    pub attempts: u32,
    pub started: Instant,
    pub is_write: bool,
}

impl CallTrace {
    /// The F19 report of `error`, found in the answer of the call this trace describes.
    pub fn report(&self, error: Error, masters: &[Endpoint]) -> CallReport {
        CallReport {
            op: self.op,
            error,
            attempts: self.attempts,
            elapsed: self.started.elapsed(),
            masters: masters
                .iter()
                .enumerate()
                .map(|(i, ep)| MasterOutcome {
                    endpoint: ep.clone(),
                    last: (Some(i) == self.master).then_some(AttemptOutcome::Status(0)),
                    note: (Some(i) == self.master).then(|| format!("its answer: {error}")),
                })
                .collect(),
            is_write: self.is_write,
            // The write was answered: applied, even though its answer was unusable.
            may_have_been_applied: self.is_write,
        }
    }
}

/// F2: connects to the first reachable master in list order; none: the last transport error.
pub fn connect_first(
    link: &mut Link,
    waker: &Waker,
    observer: &Observer,
    settings: &Settings,
    tag: &str,
) -> Result<(), Error> {
    let mut last = Error::Errno(libc::ECONNREFUSED);
    for i in 0..link.rotator.masters().len() {
        link.rotator.set_current(i);
        match link.connect_current(waker, settings.options.connect_timeout, None, Some(0)) {
            Ok(()) => {
                // The first connection is not a reconnect: no hook for it (F10).
                link.hook_pending = false;
                let ep = link.current_endpoint();
                observer.update(|s| s.current_master = Some(ep));
                return Ok(());
            }
            Err(e) if is_interrupt(e) => return Err(e),
            Err(e) => {
                xlog!(
                    Level::Info,
                    "{tag}: start: {} unreachable ({e})",
                    link.current_endpoint()
                );
                last = e;
            }
        }
    }
    link.rotator.set_current(0);
    xlog!(
        Level::Warn,
        "{tag}: start: no master reachable; last error: {last}"
    );
    Err(last)
}

/// F1: runs `op` to success, a terminal error, or budget exhaustion.
pub fn run(env: &CallEnv<'_>, op: &Op) -> Result<(Reply, CallTrace), Error> {
    let mut link = env.borrow()?;
    env.observer.update(|s| s.requests += 1);
    let kind = op.kind();
    let trace = |master, attempts| CallTrace {
        op: op.name(),
        master,
        attempts,
        started: Instant::now(),
        is_write: kind == OpKind::Write,
    };
    if link.in_hook || kind == OpKind::Probe {
        // F10: inside the hook, one attempt on the new connection, no nested failover.
        let reply = single_attempt(&mut link, env, op, kind)?;
        return Ok((reply, trace(link.rotator.current_master(), 1)));
    }
    if kind == OpKind::FireAndForget {
        drop(link);
        let reply = fire_and_forget(env, op)?;
        let master = env.link.borrow().rotator.current_master();
        return Ok((reply, trace(master, 1)));
    }
    drop(link);
    Call::new(env, op)?.run()
}

/// A call in the F10 hook (or a probe): one exchange on the current connection.
fn single_attempt(
    link: &mut Link,
    env: &CallEnv<'_>,
    op: &Op,
    kind: OpKind,
) -> Result<Reply, Error> {
    let until = Instant::now() + env.options().reply_timeout;
    let result = if kind == OpKind::FireAndForget {
        link.send_no_reply(&env.waker, op, until)
            .map(|()| Reply::status(link.seq, 0))
    } else {
        let rid = link.next_request_id(kind);
        link.exchange(&env.waker, op, rid, until).0
    };
    match result {
        Ok(r) if r.status >= 0 => Ok(r),
        Ok(r) => Err(Error::from_code(r.status).unwrap_or(Error::Internal)),
        Err(e) => {
            if !is_interrupt(e) {
                link.hook_transport_error = Some(e);
            }
            Err(e)
        }
    }
}

/// F12: no status to classify. A known-dead connection is replaced once — around the masters,
/// no backoff, no budget ([`reach_primary`]) — then the request is sent once.
fn fire_and_forget(env: &CallEnv<'_>, op: &Op) -> Result<Reply, Error> {
    let mut link = env.borrow()?;
    if !link.conn_alive() {
        reach_primary(&mut link, env)?;
        let ep = link.current_endpoint();
        env.observer.update(|s| s.current_master = Some(ep));
    }
    if link.hook_pending {
        drop(link);
        if let Err(outcome) = run_hook(env) {
            return Err(match outcome {
                AttemptOutcome::Transport(e) => e,
                AttemptOutcome::Status(s) => Error::from_code(s).unwrap_or(Error::Internal),
            });
        }
        link = env.borrow()?;
    }
    let seq = link.seq + 1;
    let until = Instant::now() + env.options().reply_timeout;
    link.send_no_reply(&env.waker, op, until)
        .map(|()| Reply::status(seq, 0))
}

/// F12: one round over the masters for a fire-and-forget request whose connection died — no
/// backoff, no budget — stopping at the first that says it is the primary (one `hello`; a
/// redirect hint is followed). A standby drops fire-and-forget requests unseen, and the
/// reconnect hook's `join` would only be redirected there. Nobody primary: "cluster not
/// ready" if a controller said so, else the last transport error.
fn reach_primary(link: &mut Link, env: &CallEnv<'_>) -> Result<(), Error> {
    let n = link.rotator.masters().len();
    let mut tried = 0u64;
    let mut last = Error::Errno(libc::ENOTCONN);
    let mut refused = false;
    // Every master once, plus one hint.
    for step in 0..=n {
        if step > 0 {
            let cause = AttemptOutcome::Transport(last);
            rotate(link, env, cause, tried);
        }
        if let Some(i) = link.rotator.current_master() {
            tried |= bit(i);
        }
        match link.connect_current(&env.waker, env.options().connect_timeout, None, None) {
            Ok(()) => {}
            Err(e) if is_interrupt(e) => return Err(e),
            Err(e) => {
                last = e;
                continue;
            }
        }
        let until = Instant::now() + env.options().reply_timeout;
        match link.exchange(&env.waker, &primary_probe(), 0, until).0 {
            Ok(r) if r.status >= 0 => return Ok(()),
            Ok(r) => {
                refused = true;
                last = Error::from_code(r.status).unwrap_or(Error::Internal);
                if let Some((host, port)) = r.redirect() {
                    let resolve = bounded_resolver(env, None);
                    let policy = env.options().hint_policy;
                    link.rotator.offer_hint(host, port, policy, tried, &resolve);
                }
            }
            Err(e) if is_interrupt(e) => return Err(e),
            Err(e) => last = e,
        }
        if tried == u64::MAX >> (64 - n.min(64)) && !link.rotator.has_hint() {
            break;
        }
    }
    link.conn = None;
    Err(if refused { Error::NotReady } else { last })
}

/// F10: runs the hook with the link released and `in_hook` set. `Err` is the failed attempt;
/// a context stopped from inside the hook ends the call here (F20).
fn run_hook(env: &CallEnv<'_>) -> Result<(), AttemptOutcome> {
    /// Clears `in_hook` even if the hook unwinds.
    struct InHook<'a>(&'a RefCell<Link>);
    impl Drop for InHook<'_> {
        fn drop(&mut self) {
            if let Ok(mut l) = self.0.try_borrow_mut() {
                l.in_hook = false;
            }
        }
    }
    {
        let mut l = env.link.borrow_mut();
        l.in_hook = true;
        l.hook_transport_error = None;
    }
    let guard = InHook(env.link);
    let rc = env.callbacks.run_reconnect_hook();
    drop(guard);
    env.waker.check().map_err(AttemptOutcome::Transport)?;
    let transport = env.link.borrow_mut().hook_transport_error.take();
    match rc {
        Some(rc) if rc < 0 => {
            Err(transport.map_or(AttemptOutcome::Status(rc), AttemptOutcome::Transport))
        }
        _ => {
            env.link.borrow_mut().hook_pending = false;
            Ok(())
        }
    }
}

/// Moves to the next target (hint first, then masters not in `avoid`, F5), logs it and
/// counts it (F14, F17). The old connection is kept only when the target is unchanged and the
/// connection still works.
fn rotate(link: &mut Link, env: &CallEnv<'_>, cause: AttemptOutcome, avoid: u64) {
    let from_target = link.rotator.current().clone();
    let from = link.current_endpoint();
    let to_target = link.rotator.advance(avoid);
    let to = link.current_endpoint();
    if to_target != from_target || !link.conn_alive() {
        link.conn = None;
    }
    if to_target == from_target {
        // F17: staying put (e.g. waitPrimary named the master we are on) is no rotation.
        return;
    }
    clog!(
        env,
        Level::Info,
        "rotating from {from} to {to}: {}",
        cause_text(&cause)
    );
    env.observer.update(|s| s.rotations += 1);
    env.emit(Event::Rotation { from, to, cause });
}

fn cause_text(o: &AttemptOutcome) -> String {
    match o {
        AttemptOutcome::Status(s) => format!("answered \"{}\"", strerror(*s)),
        AttemptOutcome::Transport(e) => format!("transport: {e}"),
    }
}

/// The state of one reply-bearing call.
struct Call<'a, 'e> {
    env: &'a CallEnv<'e>,
    op: &'a Op,
    is_write: bool,
    request_id: u64,
    started: Instant,
    deadline: Option<Instant>,
    budget: RetryBudget,
    attempts: u32,
    /// Each configured master's last outcome in this call (F19, F24); filled on the first
    /// failure, so a call that succeeds at once allocates nothing.
    per_master: Vec<Option<AttemptOutcome>>,
    /// Why a master's last connect found no address (F23), beside `per_master`.
    lookups: Vec<Option<LookupFailure>>,
    /// The master that most recently failed by transport (a dead or hung primary): excluded
    /// from `waitPrimary`, since standbys may still believe it leads (F18).
    last_unreachable: Option<usize>,
    /// The master that most recently answered with a status: a live controller to ask for
    /// the primary when the attempt before a backoff hit a dead one (F18).
    last_answered: Option<usize>,
    /// F16: a send of this call left and got no answer, so it may have been applied.
    may_have_been_applied: bool,
    /// Witnesses whose `waitPrimary` answer was a dead end (F25), one bit each.
    misleading: u64,
    /// Masters a `waitPrimary` answer sent us to that then refused (F25), one bit each.
    followed_then_refused: u64,
    /// The master a `waitPrimary` answer sent us to, and the end of the backoff unit it cut
    /// short: if that master refuses, the rest of the unit is still slept (F7).
    following: Option<(usize, Instant)>,
}

impl<'a, 'e> Call<'a, 'e> {
    fn new(env: &'a CallEnv<'e>, op: &'a Op) -> Result<Self, Error> {
        let mut link = env.borrow()?;
        let started = Instant::now();
        let kind = op.kind();
        let request_id = link.next_request_id(kind);
        let deadline = env.deadline.map(|d| started + d);
        let n = link.rotator.masters().len();
        // A hint left over from an earlier call is stale.
        link.rotator.clear_hint();
        Ok(Call {
            env,
            op,
            is_write: kind == OpKind::Write,
            request_id,
            started,
            deadline,
            budget: RetryBudget::new(n, Backoff::new(env.settings.retry), deadline),
            attempts: 0,
            per_master: Vec::new(),
            lookups: Vec::new(),
            last_unreachable: None,
            last_answered: None,
            may_have_been_applied: false,
            misleading: 0,
            followed_then_refused: 0,
            following: None,
        })
    }

    fn run(mut self) -> Result<(Reply, CallTrace), Error> {
        loop {
            let (outcome, reply) = match self.attempt() {
                Ok(reply) => (AttemptOutcome::Status(reply.status), Some(reply)),
                Err(outcome) => (outcome, None),
            };
            self.attempts += 1;
            // F16: for an answered attempt, the flag says whether an *earlier* send may have
            // been applied (this one was answered, so it was not).
            let class = classify(outcome, self.may_have_been_applied, self.is_write);
            match class {
                Classification::Success => return Ok(self.succeed(reply)),
                Classification::Terminal => {
                    self.record(outcome);
                    let e = match outcome {
                        AttemptOutcome::Status(s) => Error::from_code(s).unwrap_or(Error::Internal),
                        AttemptOutcome::Transport(e) => e,
                    };
                    return Err(self.fail(e));
                }
                Classification::RetryNow | Classification::RetryBackoff => {
                    if let Err(e) = self.retry(class, outcome, reply.as_ref()) {
                        return Err(self.fail(e));
                    }
                }
            }
        }
    }

    /// One attempt: (re)connect if needed, run the hook after a reconnect (F10), send, await.
    fn attempt(&mut self) -> Result<Reply, AttemptOutcome> {
        let env = self.env;
        let mut link = env.borrow().map_err(AttemptOutcome::Transport)?;
        // No liveness syscall on the happy path (P2): a kept connection that the peer closed
        // meanwhile fails the exchange, which is a transport failure like any other (F5).
        if !link.conn_usable() {
            let avoid = self.budget.avoid_mask();
            link.connect_current(
                &env.waker,
                env.options().connect_timeout,
                self.deadline,
                Some(avoid),
            )
            .map_err(AttemptOutcome::Transport)?;
            let ep = link.current_endpoint();
            env.observer.update(|s| s.current_master = Some(ep));
        }
        let reply_until = || cap(Instant::now() + env.options().reply_timeout, self.deadline);
        if link.hook_pending && env.callbacks.has_reconnect_hook() {
            // F10: the hook re-joins the primary; on a standby it could only be redirected.
            // One `hello` tells: a non-primary answer (with its redirect hint) is this
            // attempt's outcome, and the hook waits for the connection that reaches the
            // primary — so it runs once per failover, just before the re-send.
            let (result, _) = link.exchange(&env.waker, &primary_probe(), 0, reply_until());
            match result {
                Err(e) => return Err(AttemptOutcome::Transport(e)),
                Ok(reply) if reply.status < 0 => return Ok(reply),
                Ok(_) => {}
            }
        }
        if link.hook_pending {
            drop(link);
            run_hook(env)?;
            link = env.borrow().map_err(AttemptOutcome::Transport)?;
        }
        let (result, sent) = self.exchange_watchful(&mut link, reply_until());
        match result {
            Ok(reply) => Ok(reply),
            Err(e) => {
                // F16, F19: the write left and no answer came back.
                self.may_have_been_applied |= sent && self.is_write;
                Err(AttemptOutcome::Transport(e))
            }
        }
    }

    /// The call's request on the current connection (F25): a reply later than the op's
    /// threshold makes the loop ask another controller, while it waits on, whether the primary
    /// changed; when one names another primary, the late request is abandoned (the connection
    /// dropped) and the loop goes there next. Returns the reply or the transport error, and
    /// whether the request left.
    fn exchange_watchful(
        &mut self,
        link: &mut Link,
        until: Instant,
    ) -> (Result<Reply, Error>, bool) {
        let env = self.env;
        let watch = env.options().suspicion
            && link.rotator.masters().len() > 1
            && link.rotator.current_master().is_some();
        if !watch {
            return link.exchange(&env.waker, self.op, self.request_id, until);
        }
        let sent_at = Instant::now();
        let seq = match link.send(&env.waker, self.op, self.request_id, until) {
            Ok(seq) => seq,
            Err(e) => return (Err(e), false),
        };
        let suspect_at = (sent_at + link.round_trips.threshold(self.op)).min(until);
        let Some(conn) = link.conn.as_mut() else {
            return (Err(Error::Errno(libc::ENOTCONN)), true);
        };
        let early = match conn.recv_by(seq, suspect_at, &env.waker) {
            Ok(None) if Instant::now() < until => None,
            Ok(None) => Some(Err(Error::Errno(libc::ETIMEDOUT))),
            Ok(Some(reply)) => Some(Ok(reply)),
            Err(e) => Some(Err(e)),
        };
        let result = match early {
            Some(r) => r,
            None => {
                let late_fd = conn.raw_fd();
                env.observer.update(|s| s.suspicions += 1);
                match self.probe(link, late_fd, until) {
                    Some(m) => {
                        // F25: another controller names a new primary: the late request is
                        // abandoned (a reply to it would now be a stray) and re-sent there.
                        clog!(
                            env,
                            Level::Info,
                            "{} late on {} after {} ms; the primary is now {}: re-sending there",
                            self.op.name(),
                            link.current_endpoint(),
                            sent_at.elapsed().as_millis(),
                            link.rotator.masters()[m]
                        );
                        env.observer.update(|s| s.suspicion_failovers += 1);
                        link.rotator.aim_at(m);
                        if let Some(c) = link.conn.as_mut() {
                            c.mark_dead();
                        }
                        return (Err(Error::Errno(libc::ETIMEDOUT)), true);
                    }
                    None => match link.conn.as_mut() {
                        Some(c) => c.recv(seq, until, &env.waker),
                        None => Err(Error::Errno(libc::ENOTCONN)),
                    },
                }
            }
        };
        if result.is_ok() {
            link.round_trips.observe(self.op, sent_at.elapsed());
        } else if let Err(Error::Errno(libc::ETIMEDOUT)) = result {
            if let Some(c) = link.conn.as_mut() {
                c.mark_dead();
            }
        }
        (result, true)
    }

    /// F25: asks another controller whether the primary changed, while the reply on `late_fd`
    /// may still arrive (its arrival ends the probe). The other configured masters are raced
    /// (a silent one costs nothing), the first to connect gets `waitPrimary` excluding the
    /// current master, until the reply's own deadline. `Some(m)`: configured master `m`, not
    /// the current one, is the primary now.
    fn probe(
        &mut self,
        link: &mut Link,
        late_fd: std::os::fd::RawFd,
        until: Instant,
    ) -> Option<usize> {
        let env = self.env;
        let current = link.rotator.current_master()?;
        let others = link.others_resolved(0);
        let masters = link.rotator.masters();
        if others.is_empty() {
            return None;
        }
        let hosts: Vec<(&str, &[std::net::SocketAddr])> = others
            .iter()
            .map(|(i, a)| (masters[*i].host.as_str(), a.as_slice()))
            .collect();
        let waker = env.waker.watching(late_fd);
        let connect_until = (Instant::now() + env.options().connect_timeout).min(until);
        let (k, mut conn) = Connection::connect_race(
            &hosts,
            Duration::ZERO,
            link.tls.as_ref(),
            link.limits,
            connect_until,
            &waker,
        )
        .ok()?;
        let witness = others[k].0;
        let p = &masters[current];
        let wait_ms = until
            .saturating_duration_since(Instant::now())
            .as_millis()
            .clamp(1, u128::from(u32::MAX)) as u32;
        let op = Op::WaitPrimary {
            timeout_ms: wait_ms,
            exclude_host: p.host.clone(),
            exclude_port: p.port,
        };
        let head = RequestHead {
            seq: 1,
            client_id: link.client_id,
            request_id: 0,
            no_reply: false,
            auth_token: &link.auth_token,
        };
        conn.send_op(&head, &op, until, &waker).ok()?;
        let reply = conn.recv(1, until, &waker).ok()?;
        let crate::wire::ReplyData::CtrlInfo(info) = &reply.data else {
            return None;
        };
        if reply.status < 0 || !wait_primary::names_someone(info) {
            return None;
        }
        let resolve = bounded_resolver(env, self.deadline);
        let named = link
            .rotator
            .find_master(&info.primary_host, info.primary_port, &resolve)?;
        clog!(
            env,
            Level::Debug,
            "asked {} about the primary: {}",
            link.rotator.masters()[witness],
            link.rotator.masters()[named]
        );
        (named != current).then_some(named)
    }

    /// Notes the outcome of the attempt just made on the current master (F19, F24). Being
    /// woken or stopped says nothing about the master.
    fn record(&mut self, outcome: AttemptOutcome) {
        if matches!(outcome, AttemptOutcome::Transport(e) if is_interrupt(e)) {
            return;
        }
        let mut link = self.env.link.borrow_mut();
        let lookup = link.lookup_failure.take();
        let Some(i) = link.rotator.current_master() else {
            return;
        };
        if self.per_master.is_empty() {
            self.per_master = vec![None; link.rotator.masters().len()];
            self.lookups = vec![None; link.rotator.masters().len()];
        }
        self.per_master[i] = Some(outcome);
        self.lookups[i] = lookup;
        match outcome {
            AttemptOutcome::Transport(_) => self.last_unreachable = Some(i),
            AttemptOutcome::Status(_) => self.last_answered = Some(i),
        }
    }

    fn succeed(&mut self, reply: Option<Reply>) -> (Reply, CallTrace) {
        let env = self.env;
        let mut reply = reply.unwrap_or_else(|| Reply::status(0, 0));
        // F4: a DUP on a re-sent write is the first send's success.
        reply.status = reply.status.max(0);
        let mut link = env.link.borrow_mut();
        link.has_served = true;
        if let Some(since) = link.failing_since.take() {
            let ep = link.current_endpoint();
            let duration = since.elapsed();
            clog!(
                env,
                Level::Info,
                "failover finished on {ep} after {} ms",
                duration.as_millis()
            );
            env.observer.update(|s| {
                s.failovers += 1;
                s.last_failover_ms = duration.as_millis() as u64;
            });
            env.emit(Event::FailoverFinished { to: ep, duration });
        }
        // The steady path clones nothing: the stats copy the endpoint only when it changed (P2).
        let master = link.rotator.current_master();
        let ep = link.rotator.endpoint(link.rotator.current());
        env.observer.update(|s| {
            if s.current_master.as_ref() != Some(ep) {
                s.current_master = Some(ep.clone());
            }
        });
        let trace = CallTrace {
            op: self.op.name(),
            master,
            attempts: self.attempts,
            started: self.started,
            is_write: self.is_write,
        };
        (reply, trace)
    }

    /// After a retriable failure: record it, offer the hint, then rotate, sleep or give up.
    fn retry(
        &mut self,
        class: Classification,
        outcome: AttemptOutcome,
        reply: Option<&Reply>,
    ) -> Result<(), Error> {
        let env = self.env;
        self.record(outcome);
        let mut link = env.borrow()?;
        let master = link.rotator.current_master();
        if link.failing_since.is_none() && link.has_served {
            link.failing_since = Some(Instant::now());
            let from = link.current_endpoint();
            clog!(
                env,
                Level::Info,
                "failover started: {from} {}",
                cause_text(&outcome)
            );
            env.emit(Event::FailoverStarted {
                from,
                cause: outcome,
            });
        }
        // F25: the master a waitPrimary answer sent us to refused; the unit it cut short is
        // still owed (F7), and it is not followed again in this call.
        let owed = match self.following.take() {
            Some((m, until)) if master == Some(m) => {
                self.followed_then_refused |= bit(m);
                Some(until)
            }
            _ => None,
        };
        let decision = self
            .budget
            .on_failure(class, outcome, master, Instant::now());
        if let Some((host, port)) = reply.and_then(Reply::redirect) {
            let policy = env.options().hint_policy;
            let tried = self.budget.tried_since_sleep();
            let resolve = bounded_resolver(env, self.deadline);
            match link.rotator.offer_hint(host, port, policy, tried, &resolve) {
                HintVerdict::Accepted(_) => {}
                HintVerdict::Refused(HintRefusal::NotConfigured) => clog!(
                    env,
                    Level::Warn,
                    "ignoring redirect hint {host}:{port}: not a configured master"
                ),
                // F5: the hint is advisory. A standby names the dead primary until its election
                // timeout, names itself, or two name each other: following would bounce and
                // never reach the masters not yet tried, so rotation goes on instead.
                HintVerdict::Refused(why) => clog!(
                    env,
                    Level::Debug,
                    "ignoring redirect hint {host}:{port}: {}",
                    match why {
                        HintRefusal::NamesCurrent => "it names the master that just refused",
                        _ => "that master already failed since the last backoff",
                    }
                ),
            }
        }
        if let Some(until) = owed {
            self.sleep_until(until)?;
        }
        match decision {
            RetryDecision::RotateNow => {}
            RetryDecision::Sleep(d) => {
                let t0 = Instant::now();
                let waited = self.backoff_wait(&mut link, d);
                let spent = t0.elapsed().as_millis() as u64;
                env.observer.update(|s| s.backoff_ms += spent);
                waited?;
            }
            RetryDecision::Exhausted(e) => {
                // F7: the next call must not start on the master that just failed (a hung
                // one would cost it its whole deadline again).
                let avoid = self.budget.avoid_mask();
                rotate(&mut link, env, outcome, avoid);
                let last = cause_text(&outcome);
                clog!(
                    env,
                    Level::Warn,
                    "{} gave up after {} attempts in {} ms: {e} (last: {last})",
                    self.op.name(),
                    self.attempts,
                    self.started.elapsed().as_millis()
                );
                env.emit(Event::NotReady {
                    error: e,
                    attempts: self.attempts,
                    elapsed: self.started.elapsed(),
                });
                return Err(e);
            }
        }
        env.observer.update(|s| s.retries += 1);
        let avoid = self.budget.avoid_mask();
        rotate(&mut link, env, outcome, avoid);
        Ok(())
    }

    /// Sleeps until `until` (interruptibly), counting it as backoff time.
    fn sleep_until(&mut self, until: Instant) -> Result<(), Error> {
        let d = cap(until, self.deadline).saturating_duration_since(Instant::now());
        if d.is_zero() {
            return Ok(());
        }
        let t0 = Instant::now();
        let r = self.env.waker.sleep(d);
        let spent = t0.elapsed().as_millis() as u64;
        self.env.observer.update(|s| s.backoff_ms += spent);
        r
    }

    /// F6/F18: one backoff unit of `d`. With a live controller that supports it, ask it for
    /// the primary (`waitPrimary`) instead of sleeping blindly, and follow a primary it names
    /// ([`wait_primary::judge`]) after a small spread. Otherwise, or for what is left, an
    /// interruptible sleep.
    fn backoff_wait(&mut self, link: &mut Link, d: Duration) -> Result<(), Error> {
        let env = self.env;
        let end = cap(Instant::now() + d, self.deadline);
        if env.options().wait_primary {
            if let Some(w) = self.witness(link) {
                if let Some(spread) = self.ask_witness(link, w, d, end)? {
                    return env.waker.sleep(spread);
                }
            }
        }
        env.waker
            .sleep(end.saturating_duration_since(Instant::now()))
    }

    /// The controller to ask during this unit, connected (F18).
    fn witness(&self, link: &mut Link) -> Option<usize> {
        let current_alive = link.conn_usable();
        let seen = Witnesses {
            last: &self.per_master,
            current: link.rotator.current_master(),
            current_alive,
            last_answered: self.last_answered,
            unsupported: link.no_wait_primary,
            misleading: self.misleading,
        };
        let w = seen.choose()?;
        if Some(w) != link.rotator.current_master() || !current_alive {
            link.rotator.set_current(w);
            let until = cap(
                Instant::now() + self.env.options().connect_timeout,
                self.deadline,
            );
            if link
                .connect_current(
                    &self.env.waker,
                    self.env.options().connect_timeout,
                    Some(until),
                    None,
                )
                .is_err()
            {
                link.conn = None;
                return None;
            }
        }
        Some(w)
    }

    /// Asks witness `w` for the primary; `Some(spread)` when its answer is followed.
    fn ask_witness(
        &mut self,
        link: &mut Link,
        w: usize,
        d: Duration,
        end: Instant,
    ) -> Result<Option<Duration>, Error> {
        let env = self.env;
        let wait_ms = d.as_millis().clamp(1, u128::from(u32::MAX)) as u32;
        let slack = WAIT_PRIMARY_SLACK.min(env.options().reply_timeout);
        let exclude = self
            .last_unreachable
            .map(|u| link.rotator.masters()[u].clone());
        let op = Op::WaitPrimary {
            timeout_ms: wait_ms,
            exclude_host: exclude.as_ref().map(|e| e.host.clone()).unwrap_or_default(),
            exclude_port: exclude.as_ref().map_or(0, |e| e.port),
        };
        let until = cap(Instant::now() + d + slack, self.deadline);
        let (result, _) = link.exchange(&env.waker, &op, 0, until);
        let reply = match result {
            Err(e) if is_interrupt(e) => return Err(e),
            Err(_) => return Ok(None), // the connection is gone; sleep what is left
            Ok(r) => r,
        };
        let resolve = bounded_resolver(env, self.deadline);
        let named = match &reply.data {
            crate::wire::ReplyData::CtrlInfo(info) if wait_primary::names_someone(info) => link
                .rotator
                .find_master(&info.primary_host, info.primary_port, &resolve),
            _ => None,
        };
        let named_text = || match &reply.data {
            crate::wire::ReplyData::CtrlInfo(i) => format!("{}:{}", i.primary_host, i.primary_port),
            _ => String::new(),
        };
        match wait_primary::judge(&reply, named, &self.per_master, self.followed_then_refused) {
            Verdict::Follow { master, spread } => {
                clog!(
                    env,
                    Level::Info,
                    "waitPrimary: primary is {}",
                    link.rotator.masters()[master]
                );
                link.rotator.aim_at(master);
                self.following = Some((master, end));
                let spread = self.budget.backoff_mut().spread(spread);
                Ok(Some(spread))
            }
            Verdict::NoNews => Ok(None),
            Verdict::DeadEnd => {
                clog!(
                    env,
                    Level::Info,
                    "waitPrimary at {} named {}, which refuses: not followed",
                    link.rotator.masters()[w],
                    named_text()
                );
                self.misleading |= bit(w);
                Ok(None)
            }
            Verdict::NotConfigured => {
                clog!(
                    env,
                    Level::Warn,
                    "waitPrimary named {}: not a configured master",
                    named_text()
                );
                Ok(None)
            }
            Verdict::Unsupported => {
                clog!(
                    env,
                    Level::Info,
                    "{} does not support waitPrimary ({}); plain backoff",
                    link.rotator.masters()[w],
                    strerror(reply.status)
                );
                link.no_wait_primary |= bit(w);
                Ok(None)
            }
        }
    }

    /// Records the F19 report of a failed call and returns its error.
    fn fail(&mut self, e: Error) -> Error {
        let link = self.env.link.borrow();
        let masters = link
            .rotator
            .masters()
            .iter()
            .enumerate()
            .map(|(i, ep)| MasterOutcome {
                endpoint: ep.clone(),
                last: self.per_master.get(i).copied().flatten(),
                note: self
                    .lookups
                    .get(i)
                    .copied()
                    .flatten()
                    .map(|f| f.describe(&ep.host)),
            })
            .collect();
        drop(link);
        self.env.observer.set_last_error(CallReport {
            op: self.op.name(),
            error: e,
            attempts: self.attempts,
            elapsed: self.started.elapsed(),
            masters,
            is_write: self.is_write,
            may_have_been_applied: self.may_have_been_applied,
        });
        e
    }
}
