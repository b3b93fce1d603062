//! C15 (amended): failure detection that follows the links. [`Pace`] measures how long a live
//! peer goes silent — the gaps between a leader's accepted appends on a follower, between a
//! follower's answers on the leader — and stretches the liveness timings to fit: the time a
//! follower waits before it campaigns (and refuses a pre-vote while it hears its leader), the
//! time a leader waits before it calls itself cut off (C10), how many unanswered requests a
//! link carries before it is reset.
//!
//! **The rule.** The *worst recent silence* is the third-longest gap seen in the last
//! [`HORIZON`] (ten seconds): one or two long gaps are a peer that stopped or restarted, not a
//! link; congestion makes many. The *adaptive lease* is twice that, bounded below by the
//! configured lease (election-max: on a quiet LAN, where gaps are one heartbeat interval, the
//! timings stay exactly as configured) and above by `--election-ceiling-ms`. Every timing
//! that follows it is stretched by the same factor (`lease / election-max`), so the election
//! timeout keeps its random spread. A failpoint (`pace-lease-ms`) sets the adaptive lease in
//! tests, within the same bounds.
//!
//! **Why it cannot cost safety (by construction).** The adaptive lease only ever makes a node
//! wait *longer* than the configured one before it acts against a leader: it is never below
//! election-max. Everything safety rests on stays on the configured values: a follower's real
//! vote is refused by openraft for election-max after it accepted an append of a committed vote
//! (and by C11 after a restart), and a leader answers a read from its lease only while a quorum
//! accepted appends it sent less than `election-max / 3` ago
//! ([`crate::raft::elect::lease_read_window`]) — so `W·(1+ρ) < lease·(1−ρ)` holds with the
//! configured `W` and `lease` at every moment, whatever the adaptive values are, on any node.
//! What the adaptive lease changes is liveness only: a follower campaigns later (openraft's
//! refusal window is a subset of the time it waits), a pre-vote is refused for longer (pre-vote
//! only removes candidacies), a leader presents itself as primary longer while no quorum
//! answers (it still commits nothing and serves no lease read without a quorum). On a congested
//! link that is what keeps the cluster from electing; the price is a slower failover when a
//! primary really dies during congestion, bounded by the ceiling.

use std::sync::Mutex;
use std::time::Duration;

use crate::base::clock::BootInstant;
use crate::base::ids::{NodeId, Vote};

/// How far back the silences count.
pub const HORIZON: Duration = Duration::from_secs(10);
/// The gap that is the worst recent silence: the third-longest (one or two long gaps are a
/// peer that stopped, not a link).
const RANK: usize = 3;
/// The adaptive lease is this many worst recent silences.
const FACTOR: u32 = 2;
/// One bucket per second of the horizon.
const BUCKETS: usize = HORIZON.as_secs() as usize;

/// The configured timings the adaptive ones are bounded by.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// election-max: openraft's leader lease; the adaptive lease's floor.
    pub lease: Duration,
    /// `--election-ceiling-ms`: the adaptive lease's ceiling (≥ `lease`).
    pub ceiling: Duration,
}

/// The longest gaps of one second, longest first.
#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    second: u64,
    longest: [Duration; RANK],
}

#[derive(Default)]
struct State {
    buckets: [Bucket; BUCKETS],
    /// Per peer: the vote of the last message heard from it and when.
    last: Vec<(NodeId, Vote, BootInstant)>,
}

/// The measured silences of live peers and the adaptive lease they give (see the module
/// documentation).
pub struct Pace {
    bounds: Bounds,
    state: Mutex<State>,
}

impl Pace {
    pub fn new(bounds: Bounds) -> Pace {
        Pace {
            bounds: Bounds {
                ceiling: bounds.ceiling.max(bounds.lease),
                ..bounds
            },
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("pace")
    }

    /// A message of `vote` came from `peer` at `at`: an append accepted from the leader (on a
    /// follower), an answer to an append (on the leader). The gap since the last one of the
    /// same vote from the same peer is a sample; a new vote starts over.
    pub fn heard(&self, peer: NodeId, vote: Vote, at: BootInstant) {
        let mut st = self.lock();
        let prev = match st.last.iter_mut().find(|(p, _, _)| *p == peer) {
            Some(e) => {
                let prev = (e.1 == vote).then_some(e.2);
                *e = (peer, vote, at);
                prev
            }
            None => {
                st.last.push((peer, vote, at));
                None
            }
        };
        if let Some(prev) = prev {
            observe(&mut st.buckets, at, at.since(prev));
        }
    }

    /// The worst recent silence at `now` (zero without enough samples).
    pub fn worst(&self, now: BootInstant) -> Duration {
        worst(&self.lock().buckets, now)
    }

    /// The adaptive lease at `now`: `FACTOR` × the worst recent silence, within the bounds;
    /// the failpoint `pace-lease-ms` sets it (within the bounds too).
    pub fn lease_at(&self, now: BootInstant) -> Duration {
        let want = match crate::base::failpoints::number(crate::base::failpoints::PACE_LEASE_MS) {
            Some(ms) => Duration::from_millis(u64::try_from(ms).unwrap_or(0)),
            None => self.worst(now) * FACTOR,
        };
        want.clamp(self.bounds.lease, self.bounds.ceiling)
    }

    /// [`Pace::lease_at`] now.
    pub fn lease(&self) -> Duration {
        self.lease_at(BootInstant::now())
    }

    /// `d` stretched as the lease is now: `d × lease / election-max` (`d` itself on a quiet
    /// link).
    pub fn stretch(&self, d: Duration) -> Duration {
        stretch(d, self.lease(), self.bounds.lease)
    }
}

/// `d × lease / floor`, never below `d`.
fn stretch(d: Duration, lease: Duration, floor: Duration) -> Duration {
    if lease <= floor || floor.is_zero() {
        return d;
    }
    let scaled = d.as_nanos() * lease.as_nanos() / floor.as_nanos();
    Duration::from_nanos(u64::try_from(scaled).unwrap_or(u64::MAX))
}

/// Adds a gap ending at `at` to its second's bucket (a bucket of an older second is reused).
fn observe(buckets: &mut [Bucket; BUCKETS], at: BootInstant, gap: Duration) {
    let second = at.0.as_secs();
    let b = &mut buckets[(second % BUCKETS as u64) as usize];
    if b.second != second {
        *b = Bucket {
            second,
            longest: [Duration::ZERO; RANK],
        };
    }
    if let Some(i) = b.longest.iter().position(|&g| gap > g) {
        b.longest[i..].rotate_right(1);
        b.longest[i] = gap;
    }
}

/// The `RANK`-th longest gap of the buckets within the horizon before `now`.
fn worst(buckets: &[Bucket; BUCKETS], now: BootInstant) -> Duration {
    let newest = now.0.as_secs();
    let mut top = [Duration::ZERO; RANK];
    for b in buckets
        .iter()
        .filter(|b| b.second <= newest && newest - b.second < BUCKETS as u64)
    {
        for &g in &b.longest {
            if let Some(i) = top.iter().position(|&t| g > t) {
                top[i..].rotate_right(1);
                top[i] = g;
            }
        }
    }
    top[RANK - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn at(n: u64) -> BootInstant {
        BootInstant(Duration::from_secs(1000) + ms(n))
    }

    fn vote(term: u64) -> Vote {
        let mut v = Vote::new(term, 1);
        v.commit();
        v
    }

    fn pace() -> Pace {
        Pace::new(Bounds {
            lease: ms(120),
            ceiling: ms(2000),
        })
    }

    /// Heartbeats every `every` ms from `peer` starting at `from` ms, `n` of them.
    fn beats(p: &Pace, peer: NodeId, from: u64, every: u64, n: u64) -> u64 {
        for i in 0..n {
            p.heard(peer, vote(3), at(from + i * every));
        }
        from + (n - 1) * every
    }

    #[test]
    fn a_quiet_link_keeps_the_configured_timings() {
        let p = pace();
        let end = beats(&p, 2, 0, 20, 200);
        beats(&p, 3, 0, 21, 200);
        assert_eq!(p.worst(at(end)), ms(21));
        assert_eq!(p.lease_at(at(end)), ms(120), "2 × 21 ms is below the floor");
        assert_eq!(stretch(ms(60), ms(120), ms(120)), ms(60));
    }

    #[test]
    fn one_or_two_long_gaps_are_a_stopped_peer_many_are_a_slow_link() {
        let p = pace();
        let mut t = beats(&p, 2, 0, 20, 10);
        for (i, gap) in [1500, 900].into_iter().enumerate() {
            t += gap;
            p.heard(2, vote(3), at(t));
            assert_eq!(p.lease_at(at(t)), ms(120), "{} long gap(s)", i + 1);
        }
        // A third long gap: the link is slow.
        t += 300;
        p.heard(2, vote(3), at(t));
        assert_eq!(p.worst(at(t)), ms(300));
        assert_eq!(p.lease_at(at(t)), ms(600));
        assert_eq!(stretch(ms(60), ms(600), ms(120)), ms(300));
        // Bounded by the ceiling.
        for _ in 0..3 {
            t += 1800;
            p.heard(2, vote(3), at(t));
        }
        assert_eq!(p.lease_at(at(t)), ms(2000));
    }

    #[test]
    fn silences_older_than_the_horizon_are_forgotten() {
        let p = pace();
        let mut t = 0;
        for _ in 0..4 {
            t += 400;
            p.heard(3, vote(3), at(t));
        }
        assert_eq!(p.lease_at(at(t)), ms(800));
        // Quiet heartbeats for eleven seconds: the long gaps age out.
        let end = beats(&p, 3, t + 20, 20, 550);
        assert_eq!(p.lease_at(at(end)), ms(120));
        // Nothing heard at all for longer than the horizon: no samples, the floor.
        assert_eq!(p.lease_at(at(end + 60_000)), ms(120));
    }

    #[test]
    fn a_new_vote_or_another_peer_is_not_a_gap() {
        let p = pace();
        p.heard(2, vote(3), at(0));
        p.heard(2, vote(4), at(5000)); // a new leader's first append
        p.heard(3, vote(4), at(9000)); // another peer's first answer
        p.heard(2, vote(4), at(5020));
        assert_eq!(p.worst(at(9000)), Duration::ZERO);
        // Per peer, not across peers: 2's and 3's messages interleave.
        p.heard(3, vote(4), at(9010));
        p.heard(2, vote(4), at(9015));
        assert_eq!(
            p.worst(at(9015)),
            ms(10),
            "gaps 20, 10, 3995: third-longest is 10"
        );
    }

    #[test]
    fn the_ceiling_is_never_below_the_floor() {
        let p = Pace::new(Bounds {
            lease: ms(500),
            ceiling: ms(100),
        });
        assert_eq!(p.bounds.ceiling, ms(500));
        assert_eq!(p.lease_at(at(0)), ms(500));
    }
}
