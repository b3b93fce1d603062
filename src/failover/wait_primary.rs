//! F18, F25: waiting for the primary while backing off — where to ask, and whether to believe
//! the answer. Pure decisions; the loop (`retry/backoff_wait.rs`) does the asking.
//!
//! During a backoff unit the loop asks a live controller (`waitPrimary`, protocol.md) to answer
//! as soon as it knows a primary other than the one that just failed, instead of sleeping
//! blind. The answer is advice: a controller cut off from its peers may name itself while
//! refusing every op, a stale standby may name a dead primary. So an answer is followed only
//! when it is news ([`judge`]), and a master that was named and then refused again is not
//! followed a second time in the call; the loop also makes such a unit cost its full backoff
//! time (F7), so a disagreeing cluster gets the budget's time, not a few milliseconds.

use std::time::Duration;

use super::classify::{is_no_primary_status, AttemptOutcome};
use super::options::{HERD_SPREAD_PER_WAITER, MAX_HERD_SPREAD, WAIT_PRIMARY_SPREAD};
use crate::wire::{ControllerInfo, Reply, ReplyData};

/// What the call knows about each configured master when a backoff unit starts.
#[derive(Debug, Clone, Copy)]
pub struct Witnesses<'a> {
    /// Each master's last outcome in this call (`None`: not tried); may be empty (none yet).
    pub last: &'a [Option<AttemptOutcome>],
    /// The master the context is on, if it is a configured one.
    pub current: Option<usize>,
    /// Whether the connection to `current` is still up.
    pub current_alive: bool,
    /// The configured master that most recently answered with a status in this call.
    pub last_answered: Option<usize>,
    /// Masters that lack `waitPrimary` (they answered it with an error), one bit each.
    pub unsupported: u64,
    /// Masters whose `waitPrimary` answer was a dead end in this call, one bit each.
    pub misleading: u64,
}

fn bit(m: usize) -> u64 {
    if m < 64 {
        1 << m
    } else {
        0
    }
}

impl Witnesses<'_> {
    fn last_of(&self, m: usize) -> Option<AttemptOutcome> {
        self.last.get(m).copied().flatten()
    }

    fn usable(&self, m: usize) -> bool {
        (self.unsupported | self.misleading) & bit(m) == 0
    }

    /// Where to ask during this unit: the current master when it answered (no reconnect)
    /// and its connection is up; else the controller that last answered in this call (after a
    /// dead master, F18). `None`: nobody to ask, sleep blind. A witness whose earlier answer
    /// was a dead end is not asked again in the call.
    pub fn choose(&self) -> Option<usize> {
        if let Some(c) = self.current {
            let answered = matches!(self.last_of(c), Some(AttemptOutcome::Status(_)));
            if answered && self.current_alive && self.usable(c) {
                return Some(c);
            }
        }
        self.last_answered.filter(|&w| self.usable(w))
    }
}

/// What to make of a `waitPrimary` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Go to this configured master next, after the herd spread.
    Follow { master: usize, spread: Duration },
    /// No primary named (or only one that already failed by transport in this call): no news,
    /// the unit goes on as a sleep.
    NoNews,
    /// The answer leads nowhere: it names a master that was named before in this call, followed,
    /// and then refused. Not followed; the witness is not asked again in this call.
    DeadEnd,
    /// The named primary is not a configured master: ignored (logged at WARN).
    NotConfigured,
    /// The witness does not support `waitPrimary`: plain sleeps there from now on.
    Unsupported,
}

/// Judges a `waitPrimary` answer. `named` is the configured master the answer names, if any
/// (resolved by the caller), `last` each master's last outcome in this call,
/// `followed_then_refused` the masters this call followed an earlier answer to and that then
/// refused.
pub fn judge(
    reply: &Reply,
    named: Option<usize>,
    last: &[Option<AttemptOutcome>],
    followed_then_refused: u64,
) -> Verdict {
    if reply.status < 0 {
        return if is_no_primary_status(reply.status) {
            Verdict::NoNews
        } else {
            Verdict::Unsupported
        };
    }
    let ReplyData::CtrlInfo(info) = &reply.data else {
        return Verdict::NoNews;
    };
    if !names_someone(info) {
        return Verdict::NoNews;
    }
    let Some(m) = named else {
        return Verdict::NotConfigured;
    };
    if followed_then_refused & bit(m) != 0 {
        // Named before in this call, followed, and it refused again: a controller cut off from
        // its peers may name itself while refusing every op (F25), a stale standby may keep
        // naming it. (A single refusal before the answer is no proof: a standby or candidate
        // that refused a moment ago may have been elected since.)
        return Verdict::DeadEnd;
    }
    if matches!(
        last.get(m).copied().flatten(),
        Some(AttemptOutcome::Transport(_))
    ) {
        // A controller without the exclusion still names the primary that just failed.
        return Verdict::NoNews;
    }
    Verdict::Follow {
        master: m,
        spread: herd_spread(info.waiters),
    }
}

/// Whether the answer names a primary at all.
pub fn names_someone(info: &ControllerInfo) -> bool {
    info.primary_port != 0 && !info.primary_host.is_empty()
}

/// F18 jitter after `waitPrimary` names the new primary: every client the controller was
/// holding is told at once, so each spreads its reconnect at random over a window that grows
/// with that crowd (`waiters` × [`HERD_SPREAD_PER_WAITER`], within [`WAIT_PRIMARY_SPREAD`] ..=
/// [`MAX_HERD_SPREAD`]): a lone client goes within a few ms, a thousand arrive over ~100 ms.
pub fn herd_spread(waiters: u32) -> Duration {
    (HERD_SPREAD_PER_WAITER * waiters).clamp(WAIT_PRIMARY_SPREAD, MAX_HERD_SPREAD)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, E_XCE_NOT_READY, E_XCE_STANDBY};
    use crate::wire::ControllerInfo;

    const REFUSED: AttemptOutcome = AttemptOutcome::Transport(Error::Errno(libc::ECONNREFUSED));
    const NOT_READY: AttemptOutcome = AttemptOutcome::Status(-E_XCE_NOT_READY);
    const STANDBY: AttemptOutcome = AttemptOutcome::Status(-E_XCE_STANDBY);

    fn seen(last: &[Option<AttemptOutcome>]) -> Witnesses<'_> {
        Witnesses {
            last,
            current: Some(1),
            current_alive: true,
            last_answered: None,
            unsupported: 0,
            misleading: 0,
        }
    }

    fn names(port: u16) -> Reply {
        let mut r = Reply::status(1, 0);
        r.data = ReplyData::CtrlInfo(ControllerInfo {
            primary_host: "h".into(),
            primary_port: port,
            waiters: 1,
            ..Default::default()
        });
        r
    }

    #[test]
    fn herd_spread_grows_with_the_crowd_within_bounds() {
        let ms = |w| herd_spread(w).as_millis();
        let table = [
            (0, 5),
            (1, 5),
            (50, 5),
            (200, 20),
            (1000, 100),
            (2000, 200),
            (100_000, 200),
        ];
        for (waiters, want) in table {
            assert_eq!(ms(waiters), want, "{waiters} waiters");
        }
    }

    #[test]
    fn witness_choice() {
        let last = [Some(REFUSED), Some(NOT_READY), Some(STANDBY)];
        let mut w = seen(&last);
        w.last_answered = Some(2);
        assert_eq!(w.choose(), Some(1), "the current master answered: ask it");
        w.current_alive = false;
        assert_eq!(
            w.choose(),
            Some(2),
            "its connection is gone: the last that answered"
        );
        w.current_alive = true;
        w.misleading = 0b010;
        assert_eq!(w.choose(), Some(2), "it misled us before: another one");
        w.unsupported = 0b100;
        assert_eq!(w.choose(), None, "nobody left to ask");
        let mut w = seen(&last);
        w.current = Some(0);
        w.last_answered = Some(1);
        assert_eq!(
            w.choose(),
            Some(1),
            "after a dead master: the last that answered"
        );
        w.last_answered = None;
        assert_eq!(w.choose(), None);
    }

    #[test]
    fn verdicts() {
        let spread = herd_spread(1);
        let follow = |m| Verdict::Follow { master: m, spread };
        let unsupported = Reply::status(1, -libc::ENOSYS);
        let not_ready = Reply::status(1, -E_XCE_NOT_READY);
        let nobody = names(0);
        let nine = names(9);
        let l_nr = [Some(REFUSED), Some(NOT_READY), None];
        // (reply, the master it names, last outcomes, followed-then-refused, verdict)
        type Row<'a> = (
            &'a Reply,
            Option<usize>,
            &'a [Option<AttemptOutcome>],
            u64,
            Verdict,
        );
        let table: Vec<Row> = vec![
            (&nine, Some(2), &l_nr, 0, follow(2)),
            (&nine, Some(1), &l_nr, 0, follow(1)), // refused once, elected since: news
            (&nine, Some(1), &l_nr, 0b010, Verdict::DeadEnd), // followed, refused again
            (&nine, Some(2), &l_nr, 0b100, Verdict::DeadEnd),
            (&nine, Some(0), &l_nr, 0, Verdict::NoNews), // just failed
            (&nine, None, &l_nr, 0, Verdict::NotConfigured),
            (&nobody, None, &l_nr, 0, Verdict::NoNews),
            (&not_ready, None, &l_nr, 0, Verdict::NoNews),
            (&unsupported, None, &l_nr, 0, Verdict::Unsupported),
        ];
        for (i, (reply, named, last, ftr, want)) in table.into_iter().enumerate() {
            let got = judge(reply, named, last, ftr);
            assert_eq!(got, want, "row {i}");
        }
    }
}
