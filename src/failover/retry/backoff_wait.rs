//! One unit of backoff (F6, F18): with a live controller that supports it, ask it for the
//! primary (`waitPrimary`) instead of sleeping blindly, and follow a primary it names
//! ([`wait_primary::judge`]) after a small spread. Otherwise, or for what is left, an
//! interruptible sleep.

use std::time::{Duration, Instant};

use super::call::Call;
use super::resolver::bounded_resolver;
use super::{bit, cap, clog, LoopState};
use crate::error::{strerror, Error};
use crate::failover::classify::is_interrupt;
use crate::failover::log::Level;
use crate::failover::wait_primary::{self, Verdict, Witnesses};
use crate::wire::{Op, Reply, ReplyData};

/// Extra time granted to a `waitPrimary` reply beyond the wait itself (F18), capped by the
/// reply timeout: the controller answers at the end of the wait, one round trip later.
const WAIT_PRIMARY_SLACK: Duration = Duration::from_millis(250);

impl Call<'_, '_> {
    /// F6/F18: one backoff unit of `d`.
    pub fn backoff_wait(&mut self, state: &mut LoopState, d: Duration) -> Result<(), Error> {
        let env = self.env;
        let end = cap(Instant::now() + d, self.spec.deadline);
        if env.options().wait_primary {
            if let Some(w) = self.witness(state) {
                if let Some(spread) = self.ask_witness(state, w, d, end)? {
                    return env.waker.sleep(spread);
                }
            }
        }
        env.waker
            .sleep(end.saturating_duration_since(Instant::now()))
    }

    /// The controller to ask during this unit, connected (F18).
    fn witness(&self, state: &mut LoopState) -> Option<usize> {
        let current_alive = state.link.conn_usable();
        let seen = Witnesses {
            last: &self.seen.per_master,
            current: state.link.rotator.current_master(),
            current_alive,
            last_answered: self.seen.last_answered,
            unsupported: state.book.no_wait_primary,
            misleading: self.following.misleading,
        };
        let w = seen.choose()?;
        if Some(w) != state.link.rotator.current_master() || !current_alive {
            state.link.rotator.set_current(w);
            let until = cap(
                Instant::now() + self.env.options().connect_timeout,
                self.spec.deadline,
            );
            if state
                .connect(&self.env.waker, self.env, Some(until), None)
                .is_err()
            {
                state.link.conn = None;
                return None;
            }
        }
        Some(w)
    }

    /// Asks witness `w` for the primary; `Some(spread)` when its answer is followed.
    fn ask_witness(
        &mut self,
        state: &mut LoopState,
        w: usize,
        d: Duration,
        end: Instant,
    ) -> Result<Option<Duration>, Error> {
        let env = self.env;
        let wait_ms = d.as_millis().clamp(1, u128::from(u32::MAX)) as u32;
        let slack = WAIT_PRIMARY_SLACK.min(env.options().reply_timeout);
        let exclude = self
            .seen
            .last_unreachable
            .map(|u| state.link.rotator.masters()[u].clone());
        let op = Op::WaitPrimary {
            timeout_ms: wait_ms,
            exclude_host: exclude.as_ref().map(|e| e.host.clone()).unwrap_or_default(),
            exclude_port: exclude.as_ref().map_or(0, |e| e.port),
        };
        let until = cap(Instant::now() + d + slack, self.spec.deadline);
        let ids = state.ids.read();
        let link = &mut state.link;
        let (result, _) = link.exchange(&env.waker, &op, ids, until);
        let reply = match result {
            Err(e) if is_interrupt(e) => return Err(e),
            Err(_) => return Ok(None), // the connection is gone; sleep what is left
            Ok(r) => r,
        };
        let resolve = bounded_resolver(env, self.spec.deadline);
        let named = match &reply.data {
            ReplyData::CtrlInfo(info) if wait_primary::names_someone(info) => link
                .rotator
                .find_master(&info.primary_host, info.primary_port, &resolve),
            _ => None,
        };
        let verdict = wait_primary::judge(
            &reply,
            named,
            &self.seen.per_master,
            self.following.followed_then_refused,
        );
        Ok(self.heed(state, w, end, verdict, &reply))
    }

    /// What the loop does with witness `w`'s answer (`reply`, judged `verdict`); the spread
    /// to wait when it follows the primary named.
    fn heed(
        &mut self,
        state: &mut LoopState,
        w: usize,
        end: Instant,
        verdict: Verdict,
        reply: &Reply,
    ) -> Option<Duration> {
        let env = self.env;
        let link = &mut state.link;
        let named_text = || match &reply.data {
            ReplyData::CtrlInfo(i) => format!("{}:{}", i.primary_host, i.primary_port),
            _ => String::new(),
        };
        match verdict {
            Verdict::Follow { master, spread } => {
                clog!(
                    env,
                    Level::Info,
                    "waitPrimary: primary is {}",
                    link.rotator.masters()[master]
                );
                link.rotator.aim_at(master);
                self.following.current = Some((master, end));
                let spread = self.budget().backoff_mut().spread(spread);
                Some(spread)
            }
            Verdict::NoNews => None,
            Verdict::DeadEnd => {
                clog!(
                    env,
                    Level::Info,
                    "waitPrimary at {} named {}, which refuses: not followed",
                    link.rotator.masters()[w],
                    named_text()
                );
                self.following.misleading |= bit(w);
                None
            }
            Verdict::NotConfigured => {
                clog!(
                    env,
                    Level::Warn,
                    "waitPrimary named {}: not a configured master",
                    named_text()
                );
                None
            }
            Verdict::Unsupported => {
                clog!(
                    env,
                    Level::Info,
                    "{} does not support waitPrimary ({}); plain backoff",
                    link.rotator.masters()[w],
                    strerror(reply.status)
                );
                state.book.no_wait_primary |= bit(w);
                None
            }
        }
    }
}
