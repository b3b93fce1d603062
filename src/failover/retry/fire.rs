//! F12: fire-and-forget requests (`notify_*`, `heartbeat`, `nop`): no status to classify, never
//! the no-primary budget.

use std::time::Instant;

use super::attempt::run_hook;
use super::probe::{bounded_resolver, primary_probe};
use super::{bit, rotate, CallEnv, LoopState};
use crate::error::Error;
use crate::failover::classify::{is_interrupt, AttemptOutcome};
use crate::wire::{Op, Reply};

/// A known-dead connection is replaced once — around the masters, no backoff, no budget
/// ([`reach_primary`]) — then the request is sent once.
pub fn fire_and_forget(env: &CallEnv<'_>, op: &Op) -> Result<Reply, Error> {
    let mut state = env.borrow()?;
    if !state.link.conn_alive() {
        reach_primary(&mut state, env)?;
        let ep = state.link.current_endpoint();
        env.observer.update(|s| s.current_master = Some(ep));
    }
    if state.book.hook_pending {
        drop(state);
        if let Err(outcome) = run_hook(env) {
            return Err(match outcome {
                AttemptOutcome::Transport(e) => e,
                AttemptOutcome::Status(s) => Error::from_code(s).unwrap_or(Error::Internal),
            });
        }
        state = env.borrow()?;
    }
    let until = Instant::now() + env.options().reply_timeout;
    let ids = state.ids.read();
    state
        .link
        .send_no_reply(&env.waker, op, ids, until)
        .map(|seq| Reply::status(seq, 0))
}

/// One round over the masters for a fire-and-forget request whose connection died — no
/// backoff, no budget — stopping at the first that says it is the primary (one `hello`; a
/// redirect hint is followed). A standby drops fire-and-forget requests unseen, and the
/// reconnect hook's `join` would only be redirected there. Nobody primary: "cluster not
/// ready" if a controller said so, else the last transport error.
pub fn reach_primary(state: &mut LoopState, env: &CallEnv<'_>) -> Result<(), Error> {
    let n = state.link.rotator.masters().len();
    let mut tried = 0u64;
    let mut last = Error::Errno(libc::ENOTCONN);
    let mut refused = false;
    // Every master once, plus one hint.
    for step in 0..=n {
        if step > 0 {
            let cause = AttemptOutcome::Transport(last);
            rotate(&mut state.link, env, cause, tried);
        }
        if let Some(i) = state.link.rotator.current_master() {
            tried |= bit(i);
        }
        match state.connect(&env.waker, env, None, None) {
            Ok(()) => {}
            Err(e) if is_interrupt(e) => return Err(e),
            Err(e) => {
                last = e;
                continue;
            }
        }
        let until = Instant::now() + env.options().reply_timeout;
        let ids = state.ids.read();
        match state
            .link
            .exchange(&env.waker, &primary_probe(), ids, until)
            .0
        {
            Ok(r) if r.status >= 0 => return Ok(()),
            Ok(r) => {
                refused = true;
                last = Error::from_code(r.status).unwrap_or(Error::Internal);
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
            Err(e) => last = e,
        }
        if tried == u64::MAX >> (64 - n.min(64)) && !state.link.rotator.has_hint() {
            break;
        }
    }
    state.link.conn = None;
    Err(if refused { Error::NotReady } else { last })
}
