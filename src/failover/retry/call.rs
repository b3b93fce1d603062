//! One reply-bearing call: its progress as an explicit state, what it has seen of each master,
//! and what it may have changed (F16, F19).

use std::time::Instant;

use super::{bit, cap, cause_text, clog, rotate, CallEnv, CallTrace, LoopState};
use crate::error::Error;
use crate::failover::backoff::Backoff;
use crate::failover::budget::{RetryBudget, RetryDecision};
use crate::failover::classify::{
    classify, is_interrupt, leaves_outcome_unknown, AttemptOutcome, Classification,
};
use crate::failover::log::Level;
use crate::failover::report::{CallReport, Event, MasterOutcome};
use crate::failover::rotate::{HintRefusal, HintVerdict};
use crate::transport::LookupFailure;
use crate::wire::{Op, OpKind, Reply};

/// Where a call is. Each state names what happens next; [`Call::run`] moves between them.
pub enum Progress {
    /// The next attempt is to be made: connect if needed, rejoin, send, await (F10).
    Attempt,
    /// An attempt ended; its outcome is to be classified (F4). Its answer, if any, is the
    /// call's `reply` (P2: kept in one place, not moved from state to state).
    Judge { outcome: AttemptOutcome },
    /// A retriable failure: rotate now, back off, or give up (F5–F7).
    Retry {
        class: Classification,
        outcome: AttemptOutcome,
    },
    /// The call is over (a success's answer is the call's `reply`).
    Done(Result<CallTrace, Error>),
}

/// What the call sends: fixed when it starts.
pub struct CallSpec<'a> {
    pub op: &'a Op,
    pub is_write: bool,
    /// F16: the same on every send of this call.
    pub request_id: u64,
    pub started: Instant,
    pub deadline: Option<Instant>,
}

/// F16, F19: whether a send of this call may have taken effect. `maybe_applied = 0` in the
/// report is a promise, so only [`Applied::NotSent`] and [`Applied::Answered`] make it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Nothing of the write left yet.
    NotSent,
    /// Every send was answered with a status that says "not applied" (or applied: success).
    Answered,
    /// A send left and its outcome is unknown: no reply (transport failure, timeout, wake), or
    /// a controller said it placed it in its log and could not confirm it (F19 amended).
    Unknown,
}

impl Applied {
    pub fn may_have_been(self) -> bool {
        self == Applied::Unknown
    }
}

/// What the call has seen of the masters (F18, F19, F24, F25).
#[derive(Default)]
pub struct Seen {
    /// Each configured master's last outcome in this call (F19, F24); filled on the first
    /// failure, so a call that succeeds at once allocates nothing.
    pub per_master: Vec<Option<AttemptOutcome>>,
    /// Why a master's last connect found no address (F23), beside `per_master`.
    pub lookups: Vec<Option<LookupFailure>>,
    /// The master that most recently failed by transport (a dead or hung primary): excluded
    /// from `waitPrimary`, since standbys may still believe it leads (F18).
    pub last_unreachable: Option<usize>,
    /// The master that most recently answered with a status: a live controller to ask for
    /// the primary when the attempt before a backoff hit a dead one (F18).
    pub last_answered: Option<usize>,
}

/// What the call remembers of `waitPrimary` answers (F7, F25).
#[derive(Default)]
pub struct Following {
    /// Witnesses whose `waitPrimary` answer was a dead end, one bit each.
    pub misleading: u64,
    /// Masters a `waitPrimary` answer sent us to that then refused, one bit each.
    pub followed_then_refused: u64,
    /// The master a `waitPrimary` answer sent us to, and the end of the backoff unit it cut
    /// short: if that master refuses, the rest of the unit is still slept (F7).
    pub current: Option<(usize, Instant)>,
}

/// The state of one reply-bearing call.
pub struct Call<'a, 'e> {
    pub env: &'a CallEnv<'e>,
    pub spec: CallSpec<'a>,
    /// The retry budget (F5–F7), made at the call's first failure (P2: a call answered at once
    /// never builds nor moves its 448 bytes); see [`Call::budget`].
    budget: Option<Box<RetryBudget>>,
    /// Masters in rotation when the call began (the budget's first size).
    masters_at_start: usize,
    pub attempts: u32,
    /// The last attempt's answer, if it was answered (left here by the attempt).
    pub reply: Option<Reply>,
    pub applied: Applied,
    pub seen: Seen,
    pub following: Following,
    /// F28: this call failed to reach a master directly (a transport failure, or a connect
    /// that raced past a silent master): its next attempts ask a standby to forward.
    pub missed_directly: bool,
    /// The final answer's `detail`, for the report.
    pub detail: String,
}

impl<'a, 'e> Call<'a, 'e> {
    pub fn new(env: &'a CallEnv<'e>, op: &'a Op) -> Result<Self, Error> {
        let mut state = env.borrow()?;
        let started = Instant::now();
        let kind = op.kind();
        let request_id = state.ids.next(kind).request_id;
        let deadline = env.deadline.map(|d| started + d);
        let n = state.link.rotator.masters().len();
        // A hint left over from an earlier call is stale.
        state.link.rotator.clear_hint();
        Ok(Call {
            env,
            spec: CallSpec {
                op,
                is_write: kind == OpKind::Write,
                request_id,
                started,
                deadline,
            },
            budget: None,
            masters_at_start: n,
            attempts: 0,
            reply: None,
            applied: Applied::NotSent,
            seen: Seen::default(),
            following: Following::default(),
            missed_directly: false,
            detail: String::new(),
        })
    }

    /// The call's retry budget, made now if this is its first use. Made later than the call's
    /// start, it is the same budget: its size only grows to the masters in rotation (F29), and
    /// its deadline and schedule are the call's.
    pub fn budget(&mut self) -> &mut RetryBudget {
        let (n, retry, deadline) = (
            self.masters_at_start,
            self.env.settings.retry,
            self.spec.deadline,
        );
        self.budget
            .get_or_insert_with(|| Box::new(RetryBudget::new(n, Backoff::new(retry), deadline)))
    }

    /// The masters rotation avoids next (F5); none before the first failure.
    pub fn avoid_mask(&self) -> u64 {
        self.budget.as_ref().map_or(0, |b| b.avoid_mask())
    }

    pub fn run(mut self) -> Result<(Reply, CallTrace), Error> {
        let mut progress = Progress::Attempt;
        loop {
            progress = match progress {
                Progress::Attempt => {
                    self.reply = None;
                    let outcome = match self.attempt() {
                        Ok(status) => AttemptOutcome::Status(status),
                        Err(outcome) => outcome,
                    };
                    self.attempts += 1;
                    Progress::Judge { outcome }
                }
                // A call that is over returns at once (P2: its reply is not moved again).
                Progress::Judge { outcome } => match self.judge(outcome) {
                    Progress::Done(result) => return self.done(result),
                    next => next,
                },
                Progress::Retry { class, outcome } => {
                    let reply = self.reply.take();
                    match self.retry(class, outcome, reply.as_ref()) {
                        Ok(()) => Progress::Attempt,
                        Err(e) => Progress::Done(Err(self.fail(e))),
                    }
                }
                Progress::Done(result) => return self.done(result),
            };
        }
    }

    /// The call's result: on success, its answer with the trace.
    fn done(&mut self, result: Result<CallTrace, Error>) -> Result<(Reply, CallTrace), Error> {
        let reply = self.reply.take().unwrap_or_else(|| Reply::status(0, 0));
        result.map(|trace| (reply, trace))
    }

    /// F4, F16: what the attempt's outcome means for the call.
    fn judge(&mut self, outcome: AttemptOutcome) -> Progress {
        // For an answered attempt, `applied` says whether an *earlier* send may have been
        // applied (this one was answered, so it was not — unless its answer says "unknown").
        let class = classify(outcome, self.applied.may_have_been(), self.spec.is_write);
        self.note_sent(outcome);
        match class {
            Classification::Success => Progress::Done(Ok(self.succeed())),
            Classification::Terminal => {
                self.record(outcome);
                // The controller's words for a final refusal, for the report (F19).
                self.detail = self
                    .reply
                    .as_ref()
                    .map(|r| r.detail.clone())
                    .unwrap_or_default();
                let e = match outcome {
                    AttemptOutcome::Status(s) => Error::from_code(s).unwrap_or(Error::Internal),
                    AttemptOutcome::Transport(e) => e,
                };
                Progress::Done(Err(self.fail(e)))
            }
            Classification::RetryNow | Classification::RetryBackoff => {
                Progress::Retry { class, outcome }
            }
        }
    }

    /// F16, F19: an answered send of a write: "not applied" unless an earlier one is unknown,
    /// or the answer itself says the outcome is unknown (F19 amended).
    fn note_sent(&mut self, outcome: AttemptOutcome) {
        if !self.spec.is_write {
            return;
        }
        match outcome {
            AttemptOutcome::Status(s) if leaves_outcome_unknown(s) => {
                self.applied = Applied::Unknown;
            }
            AttemptOutcome::Status(_) if self.applied == Applied::NotSent => {
                self.applied = Applied::Answered;
            }
            _ => {}
        }
    }

    /// Notes the outcome of the attempt just made on the current master (F19, F24). Being
    /// woken or stopped says nothing about the master.
    pub fn record(&mut self, outcome: AttemptOutcome) {
        if matches!(outcome, AttemptOutcome::Transport(e) if is_interrupt(e)) {
            return;
        }
        let mut state = self.env.link.borrow_mut();
        let lookup = state.link.lookup_failure.take();
        let Some(i) = state.link.rotator.current_master() else {
            return;
        };
        let seen = &mut self.seen;
        // Sized to the masters in rotation, which may grow during the call (F29).
        let n = state.link.rotator.masters().len();
        if seen.per_master.len() < n {
            seen.per_master.resize(n, None);
            seen.lookups.resize(n, None);
        }
        seen.per_master[i] = Some(outcome);
        seen.lookups[i] = lookup;
        match outcome {
            AttemptOutcome::Transport(_) => {
                seen.last_unreachable = Some(i);
                self.missed_directly = true;
            }
            AttemptOutcome::Status(_) => seen.last_answered = Some(i),
        }
    }

    /// The answer stays the call's `reply`.
    fn succeed(&mut self) -> CallTrace {
        let env = self.env;
        if let Some(reply) = self.reply.as_mut() {
            // F4: a DUP on a re-sent write is the first send's success.
            reply.status = reply.status.max(0);
        }
        let mut state = env.link.borrow_mut();
        let LoopState { link, book, .. } = &mut *state;
        book.served(env, link);
        // The steady path clones nothing: the stats copy the endpoint only when it changed,
        // and are not even looked at again on the connection they were confirmed for (P2).
        let master = link.rotator.current_master();
        if link.stats_epoch != Some(link.epoch) {
            let ep = link.rotator.endpoint(link.rotator.current());
            env.observer.update(|s| {
                if s.current_master.as_ref() != Some(ep) {
                    s.current_master = Some(ep.clone());
                }
            });
            link.stats_epoch = Some(link.epoch);
        }
        CallTrace {
            op: self.spec.op.name(),
            master,
            attempts: self.attempts,
            started: self.spec.started,
            is_write: self.spec.is_write,
        }
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
        let mut state = env.borrow()?;
        let LoopState { link, book, .. } = &mut *state;
        let master = link.rotator.current_master();
        book.failover_started(env, link, outcome);
        // F29: masters learned during this call get their turn like the configured ones.
        self.budget().grow(link.rotator.masters().len());
        // F25: the master a waitPrimary answer sent us to refused; the unit it cut short is
        // still owed (F7), and it is not followed again in this call.
        let owed = match self.following.current.take() {
            Some((m, until)) if master == Some(m) => {
                self.following.followed_then_refused |= bit(m);
                Some(until)
            }
            _ => None,
        };
        let decision = self
            .budget()
            .on_failure(class, outcome, master, Instant::now());
        if let Some((host, port)) = reply.and_then(Reply::redirect) {
            // F29: a hint naming a node in no master's place is followed when the master that
            // gave it holds that node among its members (asked once per connection) — only
            // while the context follows the cluster's membership (`learn_masters`): off, the
            // configured list is all it talks to.
            let until = cap(
                Instant::now() + env.options().reply_timeout,
                self.spec.deadline,
            );
            let vouching = env.options().learn_masters;
            if self.offer_hint(&mut state.link, host, port, vouching) {
                super::vouch::vouch(&mut state, env, until);
                self.offer_hint(&mut state.link, host, port, false);
            }
        }
        if let Some(until) = owed {
            self.sleep_until(until)?;
        }
        match decision {
            RetryDecision::RotateNow => {}
            RetryDecision::Sleep(d) => {
                let t0 = Instant::now();
                let waited = self.backoff_wait(&mut state, d);
                let spent = t0.elapsed().as_millis() as u64;
                env.observer.update(|s| s.backoff_ms += spent);
                waited?;
            }
            RetryDecision::Exhausted(e) => {
                // F7: the next call must not start on the master that just failed (a hung
                // one would cost it its whole deadline again).
                let avoid = self.avoid_mask();
                rotate(&mut state.link, env, outcome, avoid);
                let last = cause_text(&outcome);
                clog!(
                    env,
                    Level::Warn,
                    "{} gave up after {} attempts in {} ms: {e} (last: {last})",
                    self.spec.op.name(),
                    self.attempts,
                    self.spec.started.elapsed().as_millis()
                );
                env.emit(Event::NotReady {
                    error: e,
                    attempts: self.attempts,
                    elapsed: self.spec.started.elapsed(),
                });
                return Err(e);
            }
        }
        env.observer.update(|s| s.retries += 1);
        let avoid = self.avoid_mask();
        rotate(&mut state.link, env, outcome, avoid);
        Ok(())
    }

    /// F5: a redirect hint is advisory; it is followed only when it names a configured master
    /// not yet tried since the last backoff (or a member a master vouched for, F29). Whether it
    /// was refused for naming no master in rotation, with `first` (not logged: the caller asks
    /// the master for its members and offers it again).
    fn offer_hint(&self, link: &mut super::Link, host: &str, port: u16, first: bool) -> bool {
        let env = self.env;
        let policy = env.options().hint_policy;
        let tried = self.budget.as_ref().map_or(0, |b| b.tried_since_sleep());
        let resolve = super::resolver::bounded_resolver(env, self.spec.deadline);
        match link.rotator.offer_hint(host, port, policy, tried, &resolve) {
            HintVerdict::Accepted(_) => {}
            HintVerdict::Refused(HintRefusal::NotConfigured) if first => return true,
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
        false
    }

    /// Sleeps until `until` (interruptibly), counting it as backoff time.
    pub fn sleep_until(&mut self, until: Instant) -> Result<(), Error> {
        let d = cap(until, self.spec.deadline).saturating_duration_since(Instant::now());
        if d.is_zero() {
            return Ok(());
        }
        let t0 = Instant::now();
        let r = self.env.waker.sleep(d);
        let spent = t0.elapsed().as_millis() as u64;
        self.env.observer.update(|s| s.backoff_ms += spent);
        r
    }

    /// Records the F19 report of a failed call and returns its error.
    fn fail(&mut self, e: Error) -> Error {
        let state = self.env.link.borrow();
        let masters = state
            .link
            .rotator
            .masters()
            .iter()
            .enumerate()
            .map(|(i, ep)| MasterOutcome {
                endpoint: ep.clone(),
                last: self.seen.per_master.get(i).copied().flatten(),
                note: self
                    .seen
                    .lookups
                    .get(i)
                    .copied()
                    .flatten()
                    .map(|f| f.describe(&ep.host)),
            })
            .collect();
        drop(state);
        self.env.observer.set_last_error(CallReport {
            op: self.spec.op.name(),
            error: e,
            attempts: self.attempts,
            elapsed: self.spec.started.elapsed(),
            masters,
            is_write: self.spec.is_write,
            may_have_been_applied: self.applied.may_have_been(),
            detail: std::mem::take(&mut self.detail),
        });
        e
    }
}
