//! The leader's lease on `CLOCK_BOOTTIME` (C3, C10, C11): which followers accepted its appends
//! and when ([`LeaseClock`]: lease reads, a cut-off leader), the quorum rule of a possibly
//! joint membership ([`joint_quorum`]), and a restarted node's refusal to vote ([`VoteGuard`]).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use crate::base::clock::BootInstant;
use crate::base::ids::{NodeId, Vote};

/// Whether `ok` holds for a majority of every config of a (possibly joint) membership — the
/// quorum rule openraft applies to its `get_joint_config()` (its `QuorumSet` is not public).
/// Counting over the union of voter ids instead would accept, during a joint change, a
/// majority of the union that is a minority of one config.
pub fn joint_quorum(configs: &[BTreeSet<NodeId>], ok: impl Fn(NodeId) -> bool) -> bool {
    !configs.is_empty()
        && configs
            .iter()
            .all(|c| 2 * c.iter().filter(|&&id| ok(id)).count() > c.len())
}

/// The lease-read window a follower's `refusal` (how long it refuses other candidates after
/// an append) allows: a third of it — `raft/elect.rs`'s inequality (`lease_read_window`),
/// applied to each follower by its own timing (C11 fifth round).
pub fn window_within(refusal: Duration) -> Duration {
    refusal / 3
}

/// One follower's acceptance of this node's appends.
#[derive(Debug, Clone, Copy)]
struct Ack {
    vote: Vote,
    /// When the newest accepted append was sent.
    sent: BootInstant,
    /// When an answer last came.
    heard: BootInstant,
    /// C11 (fifth round): how long the follower said it refuses other candidates after an
    /// append (its election-max; `None`: it did not say — an earlier build).
    refusal: Option<Duration>,
}

#[derive(Default)]
struct LeaseState {
    acks: HashMap<NodeId, Ack>,
    /// The committed vote this node last sent appends with, and when it first did.
    leading: Option<(Vote, BootInstant)>,
}

/// The leader's record of which followers accepted its appends, on `CLOCK_BOOTTIME`.
///
/// Lease reads (C3, C11): an append is stamped with the instant it was SENT. A follower that
/// accepts an append from a committed vote refuses to vote for anyone else for openraft's
/// leader lease (= election-max) after it received it (and, restarted, for election-max after
/// boot: [`VoteGuard`]); so while a quorum of the membership has accepted appends sent within a
/// window well inside that lease, no other primary can exist and the leader may answer reads
/// from its applied state without a read-index round.
///
/// Liveness (C10): a leader that has led for longer than the election timeout and has heard
/// from no quorum within it is cut off — the rest of the cluster may be electing another.
#[derive(Default)]
pub struct LeaseClock {
    state: std::sync::Mutex<LeaseState>,
}

impl LeaseClock {
    fn lock(&self) -> std::sync::MutexGuard<'_, LeaseState> {
        self.state.lock().expect("lease clock")
    }

    /// An append of `vote` is about to be sent at `now`.
    pub(crate) fn sending(&self, vote: Vote, now: BootInstant) {
        if !vote.is_committed() {
            return;
        }
        let mut st = self.lock();
        if st.leading.map(|(v, _)| v) != Some(vote) {
            st.leading = Some((vote, now));
        }
    }

    /// `target` accepted an append of `vote` sent at `sent`; its answer came at `heard`, and
    /// said it refuses other candidates for `refusal` after such an append.
    pub(crate) fn record(
        &self,
        target: NodeId,
        vote: Vote,
        sent: BootInstant,
        heard: BootInstant,
        refusal: Option<Duration>,
    ) {
        let mut st = self.lock();
        let fresh = Ack {
            vote,
            sent,
            heard,
            refusal,
        };
        let e = st.acks.entry(target).or_insert(fresh);
        if e.vote != vote {
            *e = fresh;
        } else {
            e.sent = e.sent.max(sent);
            e.heard = e.heard.max(heard);
            e.refusal = refusal;
        }
    }

    /// C3: whether a quorum of `configs` (counting `me`) accepted appends of `vote` sent less
    /// than `window` before `now` — and, C11 (fifth round), less than the window the
    /// follower's own refusal allows ([`window_within`]): the
    /// inequality of `elect.rs` holds for each follower by its own timing, whatever this
    /// node's `--election-max-ms` says. An ack that stated no refusal counts for no lease read.
    pub fn lease_holds(
        &self,
        vote: &Vote,
        configs: &[BTreeSet<NodeId>],
        me: NodeId,
        window: Duration,
        now: BootInstant,
    ) -> bool {
        let st = self.lock();
        joint_quorum(configs, |id| {
            id == me
                || st.acks.get(&id).is_some_and(|a| {
                    let theirs = a.refusal.map(window_within);
                    a.vote == *vote && theirs.is_some_and(|w| now.since(a.sent) < window.min(w))
                })
        })
    }

    /// C14 (issue 26): whether `target` answered an append of `vote` less than `window` before
    /// `now` — a voter a handover may name (a stopped or dead one has not).
    pub fn heard_from(
        &self,
        target: NodeId,
        vote: &Vote,
        window: Duration,
        now: BootInstant,
    ) -> bool {
        let st = self.lock();
        st.acks
            .get(&target)
            .is_some_and(|a| a.vote == *vote && now.since(a.heard) < window)
    }

    /// Whether a quorum of `configs` (counting `me`) answered appends of `vote` less than
    /// `window` before `now`.
    pub fn quorum_heard(
        &self,
        vote: &Vote,
        configs: &[BTreeSet<NodeId>],
        me: NodeId,
        window: Duration,
        now: BootInstant,
    ) -> bool {
        let st = self.lock();
        Self::heard_in(&st, vote, configs, me, window, now)
    }

    fn heard_in(
        st: &LeaseState,
        vote: &Vote,
        configs: &[BTreeSet<NodeId>],
        me: NodeId,
        window: Duration,
        now: BootInstant,
    ) -> bool {
        joint_quorum(configs, |id| {
            id == me
                || st
                    .acks
                    .get(&id)
                    .is_some_and(|a| a.vote == *vote && now.since(a.heard) < window)
        })
    }

    /// C10: whether this node, leading with `vote` for longer than `window`, has heard from
    /// no quorum of `configs` (counting `me`) within `window` before `now`. A leader that has
    /// not sent anything yet for `vote` is not cut off (it was just elected).
    pub fn cut_off(
        &self,
        vote: &Vote,
        configs: &[BTreeSet<NodeId>],
        me: NodeId,
        window: Duration,
        now: BootInstant,
    ) -> bool {
        let st = self.lock();
        match st.leading {
            Some((v, since)) if v == *vote && now.since(since) >= window => {}
            _ => return false,
        }
        !Self::heard_in(&st, vote, configs, me, window, now)
    }
}

/// C11: a restarted node refuses every vote for election-max after it booted, whatever vote it
/// had stored, so that a leader's lease resting on this node's ack from just before a crash
/// cannot overlap a leader elected with this node's vote. (openraft 0.9 also stamps a stored
/// committed vote with the boot time; this guard does not depend on that detail.)
#[derive(Debug, Clone, Copy)]
pub struct VoteGuard {
    until: BootInstant,
}

impl VoteGuard {
    pub fn from_boot(lease: Duration) -> VoteGuard {
        VoteGuard {
            until: BootInstant::now().add(lease),
        }
    }

    pub fn refuses(&self) -> bool {
        BootInstant::now() < self.until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed(term: u64, leader: NodeId) -> Vote {
        let mut v = Vote::new(term, leader);
        v.commit();
        v
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// What a follower on the default timing states: it refuses for 120 ms (election-max).
    const REFUSES: Option<Duration> = Some(Duration::from_millis(120));

    fn set(ids: &[NodeId]) -> BTreeSet<NodeId> {
        ids.iter().copied().collect()
    }

    #[test]
    fn lease_counts_only_fresh_acks_of_the_same_vote() {
        let clock = LeaseClock::default();
        let v = committed(3, 1);
        let members = [set(&[1, 2, 3])];
        let t0 = BootInstant(Duration::from_secs(100));
        let now = t0.add(ms(200));
        let holds = |c: &LeaseClock, v: &Vote| c.lease_holds(v, &members, 1, ms(75), now);
        clock.record(3, v, t0, t0, REFUSES); // sent 200 ms ago: too old
        assert!(!holds(&clock, &v));
        clock.record(2, v, now, now, REFUSES);
        assert!(holds(&clock, &v), "me + node 2 of 3");
        // An ack of another (older) vote does not count for this one.
        let mut c2 = LeaseClock::default();
        c2.record(2, committed(2, 1), now, now, REFUSES);
        assert!(!holds(&c2, &v));
        // The newest send wins; a late reply to an older send does not move the clock back.
        c2 = LeaseClock::default();
        c2.record(2, v, now, now, REFUSES);
        c2.record(2, v, t0, now, REFUSES);
        assert!(holds(&c2, &v));
        assert!(!holds(&c2, &committed(4, 2)));
    }

    /// C11: acks stamped before a suspend of the leader's host are as old as the suspend
    /// (CLOCK_BOOTTIME keeps counting), so the lease is gone when the host wakes up.
    #[test]
    fn lease_is_gone_after_a_suspend() {
        let clock = LeaseClock::default();
        let v = committed(3, 1);
        let members = [set(&[1, 2, 3])];
        let sent = BootInstant::now();
        clock.record(2, v, sent, sent, REFUSES);
        assert!(clock.lease_holds(&v, &members, 1, ms(75), sent.add(ms(10))));
        let after_suspend = sent.add(Duration::from_secs(10));
        assert!(!clock.lease_holds(&v, &members, 1, ms(75), after_suspend));
    }

    /// C11: joint membership needs a majority of EACH config; the union would be wrong.
    #[test]
    fn joint_quorum_needs_a_majority_of_every_config() {
        let uniform = [set(&[1, 2, 3])];
        assert!(joint_quorum(&uniform, |id| id == 1 || id == 2));
        assert!(!joint_quorum(&uniform, |id| id == 1));
        // {1,2,3} -> {3,4,5}: 1, 2 and 4 are a majority of the union of 5, but only one of
        // {3,4,5}.
        let joint = [set(&[1, 2, 3]), set(&[3, 4, 5])];
        assert!(!joint_quorum(&joint, |id| [1, 2, 4].contains(&id)));
        assert!(joint_quorum(&joint, |id| [1, 3, 4].contains(&id)));
        assert!(!joint_quorum(&[], |_| true));
        // Through the lease clock: me = 1, acks from 2 and 4.
        let clock = LeaseClock::default();
        let v = committed(7, 1);
        let now = BootInstant(Duration::from_secs(50));
        clock.record(2, v, now, now, REFUSES);
        clock.record(4, v, now, now, REFUSES);
        assert!(!clock.lease_holds(&v, &joint, 1, ms(75), now));
        clock.record(3, v, now, now, REFUSES);
        assert!(clock.lease_holds(&v, &joint, 1, ms(75), now));
        // A single-node cluster leads alone.
        assert!(clock.lease_holds(&v, &[set(&[1])], 1, ms(75), now));
    }

    /// C10: cut off once no quorum has answered for the window, after leading that long.
    #[test]
    fn cut_off_after_a_window_without_a_quorum() {
        let clock = LeaseClock::default();
        let v = committed(5, 1);
        let members = [set(&[1, 2, 3])];
        let w = ms(300);
        let t0 = BootInstant(Duration::from_secs(1000));
        let cut = |now: BootInstant| clock.cut_off(&v, &members, 1, w, now);
        // Nothing sent yet for this vote: just elected, not cut off.
        assert!(!cut(t0.add(ms(5000))));
        clock.sending(v, t0);
        assert!(!cut(t0.add(ms(100))), "leading for less than the window");
        assert!(cut(t0.add(ms(300))), "led 300 ms, nobody answered");
        clock.record(3, v, t0.add(ms(250)), t0.add(ms(290)), REFUSES);
        assert!(!cut(t0.add(ms(500))), "node 3 answered 210 ms ago");
        assert!(cut(t0.add(ms(590))));
        // Answers to another vote do not count; a new vote restarts the grace period.
        let v2 = committed(6, 1);
        clock.record(
            2,
            committed(4, 1),
            t0.add(ms(580)),
            t0.add(ms(585)),
            REFUSES,
        );
        assert!(cut(t0.add(ms(600))));
        clock.sending(v2, t0.add(ms(600)));
        assert!(!clock.cut_off(&v2, &members, 1, w, t0.add(ms(700))));
        assert!(clock.cut_off(&v2, &members, 1, w, t0.add(ms(900))));
        // Uncommitted votes are never "leading".
        clock.sending(Vote::new(9, 1), t0.add(ms(900)));
        assert!(clock.cut_off(&v2, &members, 1, w, t0.add(ms(950))));
        // quorum_heard: the same answers, any window.
        assert!(clock.quorum_heard(&v, &members, 1, ms(100), t0.add(ms(350))));
        assert!(!clock.quorum_heard(&v, &members, 1, ms(50), t0.add(ms(350))));
        // A single-node cluster is never cut off.
        assert!(!clock.cut_off(&v2, &[set(&[1])], 1, w, t0.add(ms(5000))));
    }

    /// C11 (fifth round), issue 35 defect 4: the leader's window (here its own election-max of
    /// 300 ms gives 100 ms) is bounded by each follower's own refusal: a follower rolled out
    /// with election-max 120 ms first refuses other candidates for 120 ms only, so its ack
    /// counts for 40 ms. Before, the leader counted it for its own 100 ms — reads answered
    /// from the lease while that follower could already vote for a new primary.
    #[test]
    fn each_ack_counts_within_its_own_followers_refusal() {
        let clock = LeaseClock::default();
        let v = committed(3, 1);
        let members = [set(&[1, 2, 3])];
        let leader_window = ms(100);
        let t0 = BootInstant(Duration::from_secs(100));
        clock.record(2, v, t0, t0, Some(ms(120)));
        let holds = |at: u64| clock.lease_holds(&v, &members, 1, leader_window, t0.add(ms(at)));
        assert!(holds(30), "within a third of the follower's 120 ms");
        assert!(
            !holds(50),
            "past a third of the follower's refusal, inside the leader's window"
        );
        // A follower that refuses longer than the leader: the leader's own window bounds it.
        clock.record(2, v, t0, t0, Some(ms(3000)));
        assert!(holds(90));
        assert!(!holds(110));
        // An ack that states no refusal (an earlier build) counts for no lease read.
        clock.record(2, v, t0, t0, None);
        assert!(!holds(1));
        // Liveness counts it as heard all the same.
        assert!(clock.quorum_heard(&v, &members, 1, ms(100), t0.add(ms(1))));
    }
}
