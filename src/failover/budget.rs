//! F7: the retry budget of one call — when to rotate at once, when to sleep, when to give up,
//! and which error to give up with.
//!
//! Pure: the caller passes `now`; the budget owns the call's [`Backoff`] schedule.

use std::time::{Duration, Instant};

use super::backoff::Backoff;
use super::classify::{is_no_primary_status, AttemptOutcome, Classification};
use crate::error::Error;

/// What the loop does after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Rotate to the next target without sleeping.
    RotateNow,
    /// Sleep (or wait for a primary, F18) this long, then rotate.
    Sleep(Duration),
    /// Give up with this error (F7: never `EINVAL`).
    Exhausted(Error),
}

/// The failures one call has seen and the sleeps it has left.
#[derive(Debug, Clone)]
pub struct RetryBudget {
    backoff: Backoff,
    /// Configured masters failed since the last sleep, one bit each (F7: "every master tried
    /// once"); a bitmask, so a call allocates nothing for its budget.
    tried_since_sleep: u64,
    /// Configured masters failed during the whole call (F5: each gets its turn before the
    /// budget can end).
    tried_in_call: u64,
    /// Number of configured masters (1..=64; configurations hold at most 8).
    n_masters: usize,
    /// Failed attempts since the last sleep, hints to unlisted hosts included.
    attempts_since_sleep: usize,
    saw_no_primary: bool,
    last_transport: Option<Error>,
    deadline: Option<Instant>,
}

impl RetryBudget {
    /// A budget for a call over `n_masters` configured masters, ending at `deadline` if any.
    pub fn new(n_masters: usize, backoff: Backoff, deadline: Option<Instant>) -> RetryBudget {
        RetryBudget {
            backoff,
            tried_since_sleep: 0,
            tried_in_call: 0,
            n_masters: n_masters.clamp(1, 64),
            attempts_since_sleep: 0,
            saw_no_primary: false,
            last_transport: None,
            deadline,
        }
    }

    /// F29: the rotation grew to `n` masters during the call (members learned from the
    /// primary): the new ones count like the others — tried bits, "every master gets its turn"
    /// before the budget ends (F5). Never shrinks.
    pub fn grow(&mut self, n: usize) {
        self.n_masters = self.n_masters.max(n.clamp(1, 64));
    }

    /// Records a failed attempt against configured master `master` (`None`: an unlisted host
    /// reached through a redirect hint) and decides what comes next. `class` must be
    /// `RetryNow` or `RetryBackoff`.
    pub fn on_failure(
        &mut self,
        class: Classification,
        outcome: AttemptOutcome,
        master: Option<usize>,
        now: Instant,
    ) -> RetryDecision {
        debug_assert!(matches!(
            class,
            Classification::RetryNow | Classification::RetryBackoff
        ));
        match outcome {
            AttemptOutcome::Status(s) if is_no_primary_status(s) => self.saw_no_primary = true,
            AttemptOutcome::Status(_) => {}
            AttemptOutcome::Transport(e) => self.last_transport = Some(e),
        }
        if let Some(i) = master.filter(|&i| i < self.n_masters) {
            self.tried_since_sleep |= 1 << i;
            self.tried_in_call |= 1 << i;
        }
        self.attempts_since_sleep += 1;

        let remaining = match self.remaining(now) {
            Some(d) if d.is_zero() => return RetryDecision::Exhausted(self.exhaustion_error()),
            r => r,
        };
        let all = self.all();
        let full_cycle = self.tried_since_sleep == all
            // Two standbys naming each other as primary must not ping-pong without sleeping.
            || self.attempts_since_sleep >= 2 * self.n_masters;
        if class == Classification::RetryNow && !full_cycle {
            return RetryDecision::RotateNow;
        }
        match self.backoff.next_delay() {
            // F5: hints can never starve a configured master; one that has not had its turn
            // in this call gets it before the budget ends (the deadline still ends it above).
            None if self.tried_in_call != all => RetryDecision::RotateNow,
            None => RetryDecision::Exhausted(self.exhaustion_error()),
            Some(d) => {
                self.tried_since_sleep = 0;
                self.attempts_since_sleep = 0;
                RetryDecision::Sleep(remaining.map_or(d, |r| d.min(r)))
            }
        }
    }

    fn all(&self) -> u64 {
        u64::MAX >> (64 - self.n_masters)
    }

    /// The masters rotation should avoid next (F5): those tried since the last sleep, and,
    /// while some master has not had its turn in this call, every master tried in it.
    pub fn avoid_mask(&self) -> u64 {
        if self.tried_in_call == self.all() {
            self.tried_since_sleep
        } else {
            self.tried_in_call | self.tried_since_sleep
        }
    }

    /// Masters failed since the last sleep (hints naming them are not followed, F5).
    pub fn tried_since_sleep(&self) -> u64 {
        self.tried_since_sleep
    }

    /// F7: "cluster not ready" if any controller said it is not the primary during the call,
    /// otherwise the last transport error.
    pub fn exhaustion_error(&self) -> Error {
        if self.saw_no_primary {
            return Error::NotReady;
        }
        self.last_transport.unwrap_or(Error::Errno(libc::ETIMEDOUT))
    }

    /// Time left before the call's deadline (`None`: no deadline).
    pub fn remaining(&self, now: Instant) -> Option<Duration> {
        self.deadline.map(|d| d.saturating_duration_since(now))
    }

    /// Sleeps taken so far (each one cost a retry).
    #[cfg(test)]
    pub fn sleeps_taken(&self) -> u32 {
        self.backoff.sleeps_taken()
    }

    /// The call's random source, for the F18 spread.
    pub fn backoff_mut(&mut self) -> &mut Backoff {
        &mut self.backoff
    }
}

#[cfg(test)]
mod tests {
    use super::Classification::*;
    use super::RetryDecision::*;
    use super::*;
    use crate::error::{E_XCE_NOMASTER, E_XCE_NOT_READY, E_XCE_REDIRECT, E_XCE_STANDBY};
    use crate::failover::backoff::{RetryConfig, XCE_RETRY_DEFAULTS};

    const REFUSED: AttemptOutcome = AttemptOutcome::Transport(Error::Errno(libc::ECONNREFUSED));
    const RESET: AttemptOutcome = AttemptOutcome::Transport(Error::Errno(libc::ECONNRESET));

    fn budget(n: usize, max_retries: u32) -> RetryBudget {
        let cfg = RetryConfig {
            max_retries,
            ..XCE_RETRY_DEFAULTS
        };
        RetryBudget::new(n, Backoff::seeded(cfg, 1), None)
    }

    fn is_sleep(d: RetryDecision) -> bool {
        matches!(d, Sleep(_))
    }

    #[test]
    fn retry_now_rotates_until_every_master_was_tried_then_sleeps() {
        let now = Instant::now();
        let mut b = budget(3, 20);
        assert_eq!(b.on_failure(RetryNow, REFUSED, Some(0), now), RotateNow);
        assert_eq!(b.on_failure(RetryNow, REFUSED, Some(1), now), RotateNow);
        assert!(
            is_sleep(b.on_failure(RetryNow, REFUSED, Some(2), now)),
            "full cycle sleeps"
        );
        // A new cycle after the sleep.
        assert_eq!(b.on_failure(RetryNow, REFUSED, Some(0), now), RotateNow);
        assert_eq!(b.sleeps_taken(), 1);
    }

    #[test]
    fn ping_pong_between_hints_is_bounded() {
        let now = Instant::now();
        let mut b = budget(3, 20);
        let redirect = AttemptOutcome::Status(-E_XCE_REDIRECT);
        let mut rotations = 0;
        while b.on_failure(RetryNow, redirect, Some(rotations % 2), now) == RotateNow {
            rotations += 1;
        }
        assert!(rotations < 6, "{rotations} rotations without a sleep");
    }

    #[test]
    fn backoff_always_sleeps_and_each_sleep_costs_a_retry() {
        let now = Instant::now();
        let mut b = budget(3, 4);
        let nr = AttemptOutcome::Status(-E_XCE_NOT_READY);
        for i in 0..4 {
            assert!(is_sleep(b.on_failure(RetryBackoff, nr, Some(i % 3), now)));
        }
        assert_eq!(
            b.on_failure(RetryBackoff, nr, Some(1), now),
            Exhausted(Error::NotReady)
        );
    }

    #[test]
    fn a_master_learned_during_the_call_gets_its_turn_too() {
        // F29: the call started over 2 masters; a third was learned from the primary. Its
        // failure is counted (rotation avoids it) and the spent budget still gives it a turn.
        let now = Instant::now();
        let mut b = budget(2, 1);
        let nr = AttemptOutcome::Status(-E_XCE_NOT_READY);
        assert!(is_sleep(b.on_failure(RetryBackoff, nr, Some(0), now)));
        b.grow(3);
        b.grow(1); // never shrinks
                   // Without the growth this was the end: both masters the call started with failed.
        assert_eq!(b.on_failure(RetryBackoff, nr, Some(1), now), RotateNow);
        assert_eq!(b.avoid_mask(), 0b011, "rotation goes to the learned one");
        assert_eq!(
            b.on_failure(RetryBackoff, nr, Some(2), now),
            Exhausted(Error::NotReady)
        );
    }

    #[test]
    fn every_master_gets_its_turn_before_the_budget_ends() {
        // Answers that keep the call on master 0 (a standby steering it to itself) must not end
        // the budget before masters 1 and 2 were tried (F5): the spent budget turns into one
        // rotation per untried master, which rotation is told to prefer.
        let now = Instant::now();
        let mut b = budget(3, 1);
        let nr = AttemptOutcome::Status(-E_XCE_NOT_READY);
        assert!(is_sleep(b.on_failure(RetryBackoff, nr, Some(0), now)));
        assert_eq!(b.on_failure(RetryBackoff, nr, Some(0), now), RotateNow);
        assert_eq!(b.avoid_mask(), 0b001);
        assert_eq!(b.on_failure(RetryBackoff, nr, Some(1), now), RotateNow);
        assert_eq!(b.avoid_mask(), 0b011);
        assert_eq!(
            b.on_failure(RetryBackoff, nr, Some(2), now),
            Exhausted(Error::NotReady)
        );
    }

    #[test]
    fn the_deadline_ends_the_call_even_with_untried_masters() {
        let start = Instant::now();
        let mut b = RetryBudget::new(
            3,
            Backoff::seeded(XCE_RETRY_DEFAULTS, 1),
            Some(start + Duration::from_millis(10)),
        );
        let later = start + Duration::from_millis(10);
        assert_eq!(
            b.on_failure(RetryNow, REFUSED, Some(0), later),
            Exhausted(Error::Errno(libc::ECONNREFUSED))
        );
    }

    #[test]
    fn exhaustion_reports_not_ready_if_any_no_primary_status_was_seen() {
        for code in [
            E_XCE_NOT_READY,
            E_XCE_NOMASTER,
            E_XCE_STANDBY,
            E_XCE_REDIRECT,
        ] {
            let now = Instant::now();
            let mut b = budget(2, 1);
            let class = if code == E_XCE_NOT_READY || code == E_XCE_NOMASTER {
                RetryBackoff
            } else {
                RetryNow
            };
            b.on_failure(class, AttemptOutcome::Status(-code), Some(0), now);
            // Transport failures afterwards do not hide it.
            let mut last = RotateNow;
            for i in 0..10 {
                last = b.on_failure(RetryNow, REFUSED, Some(i % 2), now);
                if matches!(last, Exhausted(_)) {
                    break;
                }
            }
            assert_eq!(last, Exhausted(Error::NotReady), "code {code}");
        }
    }

    #[test]
    fn exhaustion_reports_the_last_transport_error_if_only_transport_failed() {
        let now = Instant::now();
        let mut b = budget(2, 2);
        let mut decisions = vec![];
        for (i, o) in [REFUSED, REFUSED, REFUSED, REFUSED, RESET, RESET]
            .into_iter()
            .enumerate()
        {
            decisions.push(b.on_failure(RetryNow, o, Some(i % 2), now));
        }
        assert_eq!(decisions[0], RotateNow);
        assert!(is_sleep(decisions[1]));
        assert_eq!(decisions[2], RotateNow);
        assert!(is_sleep(decisions[3]));
        assert_eq!(decisions[4], RotateNow);
        assert_eq!(decisions[5], Exhausted(Error::Errno(libc::ECONNRESET)));
        assert_ne!(b.exhaustion_error(), Error::Errno(libc::EINVAL));
    }

    #[test]
    fn deadline_clamps_sleeps_and_ends_the_call() {
        let start = Instant::now();
        let cfg = RetryConfig {
            initial_retry_ms: 1000,
            max_retry_ms: 1000,
            ..XCE_RETRY_DEFAULTS
        };
        let mut b = RetryBudget::new(
            1,
            Backoff::seeded(cfg, 1),
            Some(start + Duration::from_millis(100)),
        );
        assert_eq!(
            b.on_failure(RetryNow, REFUSED, Some(0), start),
            Sleep(Duration::from_millis(100))
        );
        let later = start + Duration::from_millis(100);
        assert_eq!(
            b.on_failure(RetryNow, REFUSED, Some(0), later),
            Exhausted(Error::Errno(libc::ECONNREFUSED))
        );
        assert_eq!(b.remaining(later), Some(Duration::ZERO));
    }

    #[test]
    fn unlisted_hint_targets_count_as_attempts_only() {
        let now = Instant::now();
        let mut b = budget(2, 20);
        assert_eq!(b.on_failure(RetryNow, REFUSED, None, now), RotateNow);
        assert_eq!(b.on_failure(RetryNow, REFUSED, Some(0), now), RotateNow);
        assert!(is_sleep(b.on_failure(RetryNow, REFUSED, Some(1), now)));
    }
}
