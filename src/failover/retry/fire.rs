//! F12 (amended): fire-and-forget requests. `notify_*` and `heartbeat` go through the context's
//! [`Outbox`](super::outbox::Outbox): accepted with a request id, sent pipelined (the caller
//! never waits for the acknowledgement, nor on the no-primary budget), and kept until a primary
//! acknowledges them; every new connection sends them again, later calls drain them, and
//! [`flush`] waits for them with a deadline. `nop` is sent once and forgotten.
//!
//! F17 (amended): a reconnect made here is a failover like one made by a replying call —
//! rotations, FAILOVER_STARTED/FINISHED and the failover counters alike.

use std::time::{Duration, Instant};

use super::hook::run_hook;
use super::outbox::Acked;
use super::resolver::bounded_resolver;
use super::{bit, cause_text, clog, rotate, CallEnv, LoopState};
use crate::error::{strerror, Error};
use crate::failover::backoff::Backoff;
use crate::failover::classify::{is_interrupt, AttemptOutcome};
use crate::failover::log::Level;
use crate::wire::{Op, OpKind, Reply};

/// Whether `op` waits in the outbox for a primary's acknowledgement (F12 amended).
pub fn acknowledged(op: &Op) -> bool {
    matches!(op, Op::Notify(_) | Op::Heartbeat { .. })
}

impl LoopState {
    /// Accepts `op` into the outbox with a new request id (`E_XCE_OUTBOX_FULL` when full,
    /// after taking the acknowledgements that already arrived).
    pub fn enqueue(&mut self, env: &CallEnv<'_>, op: &Op) -> Result<(), Error> {
        self.take_arrived_acks(env);
        if self.outbox.full_for(op) {
            // Full while a connection still owes acknowledgements: a burst outran the
            // primary's commits. Wait for them, at most a reply timeout (never the budget).
            self.await_acks(env, Instant::now() + env.options().reply_timeout);
        }
        // F27: from here the call's outcome stands; a wake that came before it ends the call
        // with nothing accepted.
        if env.settle.settle() {
            return Err(env.waker.check().err().unwrap_or(Error::Errno(libc::EINTR)));
        }
        let id = self.ids.next(OpKind::FireAndForget).request_id;
        let r = self.outbox.push(op.clone(), id);
        let depth = self.outbox.len() as u64;
        env.observer.update(|s| s.outbox_depth = depth);
        r
    }

    /// Sends every outbox entry not yet in flight on the current connection, oldest first,
    /// without waiting for the acknowledgements.
    pub fn send_outbox(&mut self, env: &CallEnv<'_>, until: Instant) -> Result<(), Error> {
        if self.outbox.is_empty() {
            return Ok(());
        }
        let epoch = self.link.epoch;
        for i in self.outbox.unsent(epoch) {
            let e = self.outbox.entry(i);
            let ids = self.ids.resend(e.request_id);
            let seq = self.link.send(&env.waker, &e.op, ids, until)?;
            if let Some(c) = self.link.conn.as_mut() {
                c.expect_ack(seq);
            }
            self.outbox.mark_sent(i, epoch, seq, Instant::now());
        }
        Ok(())
    }

    /// Takes the acknowledgements that already arrived, without waiting.
    fn take_arrived_acks(&mut self, env: &CallEnv<'_>) {
        self.await_acks(env, Instant::now());
    }

    /// Receives the acknowledgements the connection owes until `until` (or all of them), and
    /// applies those that arrived.
    fn await_acks(&mut self, env: &CallEnv<'_>, until: Instant) {
        if let Some(c) = self.link.conn.as_mut() {
            if c.acks_pending() > 0 && c.collect_acks(until, &env.waker).is_err() {
                self.link.conn = None;
            }
        }
        self.settle_acks(env);
    }

    /// Applies the acknowledgements received on the current connection to the outbox. An
    /// answer that says the node is not (or no longer) a primary that can confirm them drops
    /// the connection: the entries go to the primary on the next one.
    pub fn settle_acks(&mut self, env: &CallEnv<'_>) {
        let Some(conn) = self.link.conn.as_mut() else {
            return;
        };
        let acks = conn.take_acks();
        if acks.is_empty() {
            return;
        }
        let epoch = self.link.epoch;
        let mut not_primary = None;
        for (seq, status) in acks {
            match self.outbox.acked(epoch, seq, status) {
                // A primary served this context: losing it later is a failover (F17).
                Acked::Delivered => self.book.has_served = true,
                Acked::Unknown => {}
                Acked::NotPrimary => not_primary = Some(status),
                Acked::Refused(op, s) => clog!(
                    env,
                    Level::Warn,
                    "{} {} refused by the primary: {}; dropped",
                    op.name(),
                    describe(&op),
                    strerror(s)
                ),
            }
        }
        if let Some(s) = not_primary {
            clog!(
                env,
                Level::Info,
                "notifications answered \"{}\" by {}: sent again to the primary",
                strerror(s),
                self.link.current_endpoint()
            );
            if let Some(c) = self.link.conn.as_mut() {
                c.mark_dead();
            }
        }
        let depth = self.outbox.len() as u64;
        env.observer.update(|s| s.outbox_depth = depth);
    }

    /// Why the current connection cannot carry the outbox: dead, or its oldest entry in
    /// flight has waited a whole reply timeout (a frozen or deposed primary, F8).
    fn unusable_for_outbox(&mut self, env: &CallEnv<'_>) -> Option<AttemptOutcome> {
        if !self.link.conn_alive() {
            return Some(AttemptOutcome::Transport(Error::Errno(libc::ECONNRESET)));
        }
        let overdue = self
            .outbox
            .oldest_in_flight(self.link.epoch)
            .is_some_and(|t| t.elapsed() >= env.options().reply_timeout);
        if overdue {
            if let Some(c) = self.link.conn.as_mut() {
                c.mark_dead();
            }
            return Some(AttemptOutcome::Transport(Error::Errno(libc::ETIMEDOUT)));
        }
        None
    }

    /// Replaces an unusable connection by one to the primary (one round, no budget) and runs
    /// the hook it owes; a failover on this path is counted and evented (F17 amended).
    fn reach_primary_for_outbox(
        &mut self,
        env: &CallEnv<'_>,
        cause: AttemptOutcome,
    ) -> Result<(), Error> {
        self.book.failover_started(env, &self.link, cause);
        // A master that left its acknowledgements overdue is frozen or cut off: asking it
        // first would cost another reply timeout.
        let leave =
            (cause == AttemptOutcome::Transport(Error::Errno(libc::ETIMEDOUT))).then_some(cause);
        reach_primary(self, env, leave)?;
        let ep = self.link.current_endpoint();
        env.observer.update(|s| s.current_master = Some(ep));
        Ok(())
    }
}

/// The job and host of a notification, for log lines.
fn describe(op: &Op) -> String {
    match op {
        Op::Notify(n) => format!("{:?} of job {}", n.kind, n.job_id),
        Op::Heartbeat { host } => format!("of {host}"),
        _ => String::new(),
    }
}

/// F12: a notification, heartbeat or `nop`. A notification is accepted into the outbox first
/// (0 from here on means accepted: it will be delivered exactly once while the context lives),
/// then the outbox is sent if a primary can be reached in one round.
pub fn fire_and_forget(env: &CallEnv<'_>, op: &Op) -> Result<Reply, Error> {
    let mut state = env.borrow()?;
    env.waker.check()?;
    let queued = acknowledged(op);
    if queued {
        state.enqueue(env, op)?;
    }
    let accepted = |e: Error| -> Result<Reply, Error> {
        // Queued: delivered later (by a later call or a flush) — unless the context stops.
        if queued && e != Error::Closed {
            Ok(Reply::status(0, 0))
        } else {
            Err(e)
        }
    };
    if let Some(cause) = state.unusable_for_outbox(env) {
        if let Err(e) = state.reach_primary_for_outbox(env, cause) {
            return accepted(e);
        }
    }
    if super::members::due(&state, env) {
        // F29: the primary this context stays on stamped a new membership version on an
        // acknowledgement: its `hello` names the members (a daemon that only sends
        // notifications must follow the cluster too). A non-primary answer teaches nothing;
        // the outbox's acknowledgements then say where to go.
        let until = Instant::now() + env.options().reply_timeout;
        if let Err(e) = super::members::ask(&mut state, env, until) {
            state.link.conn = None;
            return accepted(e);
        }
    }
    if state.book.hook_pending {
        drop(state);
        let r = run_hook(env);
        state = env.borrow()?;
        if let Err(outcome) = r {
            return accepted(match outcome {
                AttemptOutcome::Transport(e) => e,
                AttemptOutcome::Status(s) => Error::from_code(s).unwrap_or(Error::Internal),
            });
        }
        let LoopState { link, book, .. } = &mut *state;
        book.served(env, link);
    }
    let until = Instant::now() + env.options().reply_timeout;
    if let Err(e) = state.send_outbox(env, until) {
        return accepted(e);
    }
    if queued {
        return Ok(Reply::status(0, 0));
    }
    let ids = state.ids.read();
    state
        .link
        .send_no_reply(&env.waker, op, ids, until)
        .map(|seq| Reply::status(seq, 0))
}

/// F12 (amended): waits until every notification accepted so far is acknowledged by a primary,
/// at most `timeout`, failing over as often as needed (never past the timeout). `ETIMEDOUT`
/// when it passes first (the rest stay queued).
pub fn flush(env: &CallEnv<'_>, timeout: Duration) -> Result<(), Error> {
    let until = Instant::now() + timeout;
    let mut state = env.borrow()?;
    let mut backoff = Backoff::new(env.settings.retry);
    let max_sleep = Duration::from_millis(u64::from(env.settings.retry.max_retry_ms));
    loop {
        state.settle_acks(env);
        if state.outbox.is_empty() {
            return Ok(());
        }
        env.waker.check()?;
        let now = Instant::now();
        if now >= until {
            return Err(Error::Errno(libc::ETIMEDOUT));
        }
        let mut ready = true;
        if let Some(cause) = state.unusable_for_outbox(env) {
            if let Err(e) = state.reach_primary_for_outbox(env, cause) {
                if is_interrupt(e) {
                    return Err(e);
                }
                ready = false;
            }
        }
        if ready && state.book.hook_pending {
            drop(state);
            let r = run_hook(env);
            state = env.borrow()?;
            match r {
                Ok(()) => {
                    let LoopState { link, book, .. } = &mut *state;
                    book.served(env, link);
                }
                Err(AttemptOutcome::Transport(e)) if is_interrupt(e) => return Err(e),
                Err(_) => {
                    state.link.conn = None;
                    ready = false;
                }
            }
        }
        if !ready {
            // No primary in this round: a unit of backoff, never past the timeout.
            let d = backoff.next_delay().unwrap_or(max_sleep);
            env.waker
                .sleep(d.min(until.saturating_duration_since(Instant::now())))?;
            continue;
        }
        let reply_timeout = env.options().reply_timeout;
        if state
            .send_outbox(env, until.min(now + reply_timeout))
            .is_err()
        {
            state.link.conn = None;
            continue;
        }
        let epoch = state.link.epoch;
        let wait = state
            .outbox
            .oldest_in_flight(epoch)
            .map_or(until, |t| until.min(t + reply_timeout));
        let Some(conn) = state.link.conn.as_mut() else {
            continue;
        };
        match conn.collect_acks(wait, &env.waker) {
            Ok(_) => {}
            Err(e) if is_interrupt(e) => return Err(e),
            Err(_) => state.link.conn = None,
        }
    }
}

/// One round over the masters for a connection that died — no backoff, no budget — stopping
/// at the first that says it is the primary (one `hello`; a redirect hint is followed). A
/// standby answers notifications with its status, and the reconnect hook's `join` would only be
/// redirected there. Nobody primary: "cluster not ready" if a controller said so, else the last
/// transport error. `leave`: the current master just failed so (it is not asked again).
pub fn reach_primary(
    state: &mut LoopState,
    env: &CallEnv<'_>,
    leave: Option<AttemptOutcome>,
) -> Result<(), Error> {
    let n = state.link.rotator.masters().len();
    let mut tried = 0u64;
    let mut last = AttemptOutcome::Transport(Error::Errno(libc::ENOTCONN));
    let mut refused = false;
    if let Some(cause) = leave.filter(|_| n > 1) {
        last = cause;
        if let Some(i) = state.link.rotator.current_master() {
            tried |= bit(i);
        }
    }
    let rotate_first = tried != 0;
    // Every master once, plus one hint.
    for step in 0..=n {
        if step > 0 || rotate_first {
            // F17 (amended): a standby's answer is named as such, never as "transport".
            rotate(&mut state.link, env, last, tried);
        }
        if let Some(i) = state.link.rotator.current_master() {
            tried |= bit(i);
        }
        match state.connect(&env.waker, env, None, None) {
            Ok(()) => {}
            Err(e) if is_interrupt(e) => return Err(e),
            Err(e) => {
                last = AttemptOutcome::Transport(e);
                continue;
            }
        }
        let until = Instant::now() + env.options().reply_timeout;
        // F29: the hello that asks for the primary learns the members from its answer.
        match super::members::ask(state, env, until) {
            Ok(r) if r.status >= 0 => return Ok(()),
            Ok(r) => {
                refused = true;
                last = AttemptOutcome::Status(r.status);
                if let Some((host, port)) = r.redirect() {
                    let resolve = bounded_resolver(env, None);
                    let policy = env.options().hint_policy;
                    state
                        .link
                        .rotator
                        .offer_hint(host, port, policy, tried, &resolve);
                }
            }
            Err(e) if is_interrupt(e) => return Err(e),
            Err(e) => last = AttemptOutcome::Transport(e),
        }
        if tried == u64::MAX >> (64 - n.min(64)) && !state.link.rotator.has_hint() {
            break;
        }
    }
    state.link.conn = None;
    clog!(
        env,
        Level::Debug,
        "no primary in one round: {}",
        cause_text(&last)
    );
    Err(if refused {
        Error::NotReady
    } else {
        match last {
            AttemptOutcome::Transport(e) => e,
            AttemptOutcome::Status(s) => Error::from_code(s).unwrap_or(Error::Internal),
        }
    })
}
