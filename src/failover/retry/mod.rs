//! THE retry loop (F1): the one place where the pure decisions (classify, budget, rotate,
//! wait_primary) meet sockets, sleeps and callbacks. Its rooms:
//!
//! - [`link`]: connection state — the masters' cursor, the socket, `seq`, connects and sends.
//! - [`book`]: failover bookkeeping between calls — failover in progress, hook state, the
//!   identity writes carry.
//! - [`call`]: one reply-bearing call, its progress an explicit [`call::Progress`]; what it saw
//!   of each master, whether a send of it may have been applied.
//! - [`attempt`]: one attempt — connect, confirm the primary, rejoin (hook), exchange.
//! - [`hook`]: the reconnect hook, run with the state released (F10), for either path.
//! - [`probe`]: asking whether a connection reaches the primary, and, while a reply is late,
//!   whether the primary changed (F25).
//! - [`resolver`]: host names resolved within the call's bounds (F23), for every room above.
//! - [`backoff_wait`]: one unit of backoff — ask a live controller for the primary, or sleep.
//! - [`fire`], [`outbox`]: the fire-and-forget path; notifications kept until a primary
//!   acknowledges them, and the flush that waits for that (F12 amended, F17 amended).
//!
//! A call runs while its thread owns the context (the client's gate, F11). The loop's state
//! ([`LoopState`]) lives in a `RefCell`; the borrow is released only around the reconnect
//! hook, so the hook's nested calls on the same thread find `in_hook` set and run as single
//! attempts (F10). Every wait goes through the call's [`Waker`], so a wake, a cancellation or
//! the context being stopped ends the call at once (F13, F20); no callback runs once the
//! context is stopped.

mod attempt;
mod backoff_wait;
pub mod book;
mod call;
pub mod fire;
mod hook;
pub mod link;
mod members;
pub mod outbox;
mod probe;
mod resolver;
mod vouch;

use std::cell::{RefCell, RefMut};
use std::sync::Arc;
use std::time::Instant;

use super::backoff::RetryConfig;
use super::classify::{is_interrupt, AttemptOutcome};
use super::log::{xlog, Level};
use super::options::Options;
use super::report::{CallReport, Event, MasterOutcome, Observer};
use super::rotate::{Endpoint, Rotator};
use crate::error::{strerror, Error};
use crate::transport::Waker;
use crate::wire::{ClientId, Op, OpKind, Reply};

pub use book::{Book, Identity};
pub use link::Link;

/// The knobs a call runs with, copied when it starts: a setter never waits for a call in
/// progress and changes only the calls that start after it (F15).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    pub retry: RetryConfig,
    pub options: Options,
}

/// The state of one context that the loop mutates, used only by the thread that owns the
/// context (F11): the connection, the bookkeeping between calls, the identity of requests.
pub struct LoopState {
    pub link: Link,
    pub book: Book,
    pub ids: Identity,
    /// Notifications accepted and not yet acknowledged by a primary (F12 amended).
    pub outbox: outbox::Outbox,
}

impl LoopState {
    pub fn new(
        rotator: Rotator,
        client_id: ClientId,
        tls: Option<Arc<rustls::ClientConfig>>,
        tag: String,
    ) -> LoopState {
        LoopState {
            link: Link::new(rotator, tls, tag),
            book: Book::default(),
            ids: Identity::new(client_id),
            outbox: outbox::Outbox::default(),
        }
    }

    /// Closes the connection, if any.
    pub fn close(&mut self) {
        self.link.close();
    }

    /// [`Link::connect_current`], noting the reconnect (the hook is owed, F10).
    fn connect(
        &mut self,
        waker: &Waker,
        env: &CallEnv<'_>,
        deadline: Option<Instant>,
        race: Option<u64>,
    ) -> Result<(), Error> {
        let timeout = env.options().connect_timeout;
        self.link.connect_current(waker, timeout, deadline, race)?;
        self.book.reconnected();
        Ok(())
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
    pub link: &'a RefCell<LoopState>,
    /// Ends the call's waits: a wake, its call handle's cancellation, the context's stop.
    pub waker: Waker<'a>,
    pub observer: &'a Observer,
    pub callbacks: &'a dyn Callbacks,
    pub settings: Settings,
    /// The call's own deadline (the context's option, or a shorter one of its call handle).
    pub deadline: Option<std::time::Duration>,
    /// Names the context in log lines (`name#serial`).
    pub tag: &'a str,
    /// F27: settles the call's outcome against wakes; a notification settles when the outbox
    /// accepts it (a later wake cannot undo an acceptance).
    pub settle: &'a crate::transport::CallSettle<'a>,
}

impl CallEnv<'_> {
    /// The loop state, or `EDEADLK` for an op made from an event or log callback during a call.
    fn borrow(&self) -> Result<RefMut<'_, LoopState>, Error> {
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
        $crate::failover::log::xlog!($lvl, "{}: {}", $env.tag, format_args!($($arg)+))
    };
}
pub(crate) use clog;

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

fn cause_text(o: &AttemptOutcome) -> String {
    match o {
        AttemptOutcome::Status(s) => format!("answered \"{}\"", strerror(*s)),
        AttemptOutcome::Transport(e) => format!("transport: {e}"),
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
            detail: String::new(),
        }
    }
}

/// F2: connects to the first reachable master in list order; none: the last transport error.
pub fn connect_first(
    state: &mut LoopState,
    waker: &Waker,
    observer: &Observer,
    settings: &Settings,
    tag: &str,
) -> Result<(), Error> {
    let link = &mut state.link;
    let mut last = Error::Errno(libc::ECONNREFUSED);
    for i in 0..link.rotator.masters().len() {
        link.rotator.set_current(i);
        match link.connect_current(waker, settings.options.connect_timeout, None, Some(0)) {
            Ok(()) => {
                // The first connection is not a reconnect: no hook for it (F10).
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
    let mut state = env.borrow()?;
    env.observer.count_request();
    let kind = op.kind();
    let trace = |master, attempts| CallTrace {
        op: op.name(),
        master,
        attempts,
        started: Instant::now(),
        is_write: kind == OpKind::Write,
    };
    if state.book.in_hook || kind == OpKind::Probe {
        // F10: inside the hook, one attempt on the new connection, no nested failover.
        let reply = attempt::single_attempt(&mut state, env, op, kind)?;
        return Ok((reply, trace(state.link.rotator.current_master(), 1)));
    }
    if kind == OpKind::FireAndForget {
        drop(state);
        let reply = fire::fire_and_forget(env, op)?;
        let master = env.link.borrow().link.rotator.current_master();
        return Ok((reply, trace(master, 1)));
    }
    drop(state);
    call::Call::new(env, op)?.run()
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
