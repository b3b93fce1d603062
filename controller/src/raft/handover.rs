//! C14: planned handover. SIGTERM on the primary hands leadership to an up-to-date standby
//! before the process exits, instead of leaving the cluster to notice its silence.
//!
//! openraft 0.9 has no leader transfer, and followers refuse every candidate for the leader
//! lease after an append, so the standby cannot simply be asked to campaign. The handover
//! goes through the log instead (no new raft message):
//! 1. the leader stops serving ([`crate::raft::ready::Readiness::hand_over`]: requests wait, then
//!    go to the new primary with a STANDBY hint; connections it served are closed);
//! 2. it picks the voter whose replication has matched the most of its log and commits a
//!    [`Cmd::Handover`] entry naming it — the last entry of its term;
//! 3. that standby applies the entry (it learns the commit from a heartbeat the old leader
//!    sends as soon as the standby has acknowledged the entry) and campaigns at once (`trigger().elect()`, without a pre-vote: the one sanctioned
//!    election, [`crate::raft::elect`]): its log holds everything, so the old leader —
//!    whose own lease check has long expired — grants its vote, and in a 3-node cluster the
//!    two make a majority without waiting for any election timeout;
//! 4. the old leader, now a follower of the new primary, exits. It campaigns no more from
//!    step 1 on, and grants pre-votes although it still leads, so if the standby's first
//!    campaign fails, its next one (an election timeout later, after a pre-vote) still wins.
//!
//! C22: the standby judges a handover entry from facts of its own only ([`fresh`]): the entry
//! names it, was appended to its log by this process (not replayed from its disk at start),
//! and is of the current term of the leader it still follows. Before, it compared the old
//! leader's wall clock (stamped in the entry) with its own: a clock 2 s apart disabled every
//! handover silently, and the node fell back to an ordinary election.
//!
//! If no new leader appears within [`HANDOVER_WAIT`] (a 5-node cluster whose other followers
//! still hold the lease, a leader that led for less than the lease), the node exits anyway
//! and an ordinary election follows, as before.

use std::time::{Duration, Instant};

use openraft::ServerState;
use tokio::sync::mpsc;

use crate::base::ids::{LogId, NodeId};
use crate::raft::types::Raft;
use crate::sm::entry::Batch;
use crate::sm::state::{Cmd, Proposal};

/// Longest the old leader waits for the new one before exiting anyway.
pub const HANDOVER_WAIT: Duration = Duration::from_secs(2);

/// A handover entry as the state machine applied it.
#[derive(Debug, Clone, Copy)]
pub struct Applied {
    pub to: NodeId,
    pub log_id: LogId,
}

/// C22: whether the handover entry `h`, applied on node `me`, asks it to campaign now. From
/// this node's facts only: the entry names it; its index is past `start_last`, the last index
/// this process found in its log at start (an entry at or below it is history replayed from
/// disk); it is of the current `term`; and `leader`, the leader this node follows now, is the
/// one that wrote it. No clock is read.
pub fn fresh(
    h: &Applied,
    me: NodeId,
    start_last: Option<u64>,
    term: u64,
    leader: Option<NodeId>,
) -> bool {
    h.to == me
        && start_last.is_none_or(|l| h.log_id.index > l)
        && h.log_id.leader_id.term == term
        && leader == Some(h.log_id.leader_id.node_id)
}

/// Issue 36: whether the handover entry `h` names another standby than `me` and is otherwise
/// [`fresh`]: this node then holds its own elections for a while ([`yield_to`]).
///
/// Why: with more than three voters the old leader and the named standby are no majority.
/// The other standbys refuse the named one's vote while openraft's leader lease (election-max
/// since the last append they accepted) lasts, and the old leader's last heartbeats keep it
/// fresh; the named one's first campaign fails, and whichever election timer fired first won
/// once the leases lapsed — often not the named node ("no new primary showed"). Held, the
/// others leave the next election to the named node, whose own timer campaigns (after a
/// pre-vote) as soon as their leases have lapsed: the old leader, having voted for it, sends
/// no more heartbeats. Liveness only: a hold stops this node campaigning, it changes no vote
/// it grants, and it ends by itself ([`HANDOVER_WAIT`]) if the named node never leads.
pub fn yields(
    h: &Applied,
    me: NodeId,
    start_last: Option<u64>,
    term: u64,
    leader: Option<NodeId>,
) -> bool {
    h.to != me && fresh(&Applied { to: me, ..*h }, me, start_last, term, leader)
}

/// Holds this node's elections ([`crate::raft::elect::Hold::Yielding`]) until a leader of a
/// later term than the handover entry's is known, or [`HANDOVER_WAIT`] has passed.
async fn yield_to(
    raft: Raft,
    elect: std::sync::Arc<crate::raft::elect::Elections>,
    id: NodeId,
    h: Applied,
) {
    use crate::raft::elect::Hold;
    elect.hold(Hold::Yielding, true);
    let mut rx = raft.server_metrics();
    let term = h.log_id.leader_id.term;
    let led = tokio::time::timeout(
        HANDOVER_WAIT,
        rx.wait_for(|m| m.vote.leader_id().term > term && m.current_leader.is_some()),
    )
    .await
    .is_ok_and(|r| r.is_ok());
    elect.hold(Hold::Yielding, false);
    if !led {
        crate::log_info!(
            "node {id}: node {} was handed leadership ({}) but did not lead within {} ms: \
             campaigning again",
            h.to,
            h.log_id,
            HANDOVER_WAIT.as_millis()
        );
    }
}

/// Called by the state machine for every applied batch.
pub fn note(tx: &mpsc::UnboundedSender<Applied>, log_id: LogId, batch: &Batch) {
    for p in batch.0.iter() {
        if let Cmd::Handover { to } = p.cmd {
            let _ = tx.send(Applied { to, log_id });
        }
    }
}

/// The standby's side: campaigns when a [`fresh`] handover entry names it; yields when one
/// names another standby ([`yields`]). `start_last`: the last log index this node's log held
/// when the process started.
pub async fn follow(
    raft: Raft,
    elect: std::sync::Arc<crate::raft::elect::Elections>,
    id: NodeId,
    start_last: Option<u64>,
    mut rx: mpsc::UnboundedReceiver<Applied>,
) {
    while let Some(h) = rx.recv().await {
        let (term, leader) = {
            let m = raft.metrics();
            let m = m.borrow();
            (m.current_term, m.current_leader)
        };
        if yields(&h, id, start_last, term, leader) {
            tokio::spawn(yield_to(raft.clone(), elect.clone(), id, h));
            continue;
        }
        if !fresh(&h, id, start_last, term, leader) {
            continue;
        }
        eprintln!(
            "node {id}: the primary hands leadership over to this node ({}): campaigning",
            h.log_id
        );
        crate::base::counters::campaign("handover");
        if raft.trigger().elect().await.is_err() {
            return;
        }
    }
}

/// Whom a handover may name (issue 26): among `voters` (this node left out), those `heard`
/// recently — a stopped or dead voter's last answer is old, however far its log reached —
/// the one whose replication matched the most of the log (`matched`), the higher id on a tie.
/// Pure: a table test below.
pub fn pick(
    voters: &[NodeId],
    matched: impl Fn(NodeId) -> Option<u64>,
    heard: impl Fn(NodeId) -> bool,
) -> Option<NodeId> {
    voters
        .iter()
        .copied()
        .filter(|&v| heard(v))
        .max_by_key(|&v| (matched(v), v))
}

/// How a leader judges its voters: answered within `window` on its lease clock.
pub struct Liveness<'a> {
    pub lease: &'a crate::raft::lease::LeaseClock,
    pub window: Duration,
}

impl Liveness<'_> {
    /// The window a voter must have answered within to be named by a handover: twice the
    /// election maximum (a live voter answers every heartbeat; a stopped one not for far longer).
    pub fn window(election_max_ms: u64) -> Duration {
        Duration::from_millis(2 * election_max_ms.max(1))
    }

    /// Whether `v` answered an append of the vote in `m` within the window.
    pub fn heard(
        &self,
        m: &openraft::RaftMetrics<NodeId, crate::base::ids::CtrlNode>,
        v: NodeId,
    ) -> bool {
        self.lease.heard_from(
            v,
            &m.vote,
            self.window,
            crate::base::clock::BootInstant::now(),
        )
    }
}

/// The leader's side, on SIGTERM (and a primary asked to remove itself): hands leadership over
/// to the voter [`pick`] names and waits for the new leader (up to [`HANDOVER_WAIT`]). Does
/// nothing on a node that does not lead, leads alone, or has heard from no voter recently (an
/// ordinary election follows its exit). The new leader, if one appeared.
pub async fn hand_over(
    raft: &Raft,
    ready: &crate::raft::ready::Readiness,
    elect: &crate::raft::elect::Elections,
    id: NodeId,
    live: &Liveness<'_>,
) -> Option<NodeId> {
    let m = raft.metrics().borrow().clone();
    if m.state != ServerState::Leader {
        return None;
    }
    let voters: Vec<NodeId> = m
        .membership_config
        .membership()
        .voter_ids()
        .filter(|&v| v != id)
        .collect();
    let matched = m.replication.clone().unwrap_or_default();
    let Some(to) = pick(
        &voters,
        |v| matched.get(&v).copied().flatten().map(|l| l.index),
        |v| live.heard(&m, v),
    ) else {
        if !voters.is_empty() {
            crate::log_warn!(
                "node {id}: handover: no voter answered within {} ms: none named",
                live.window.as_millis()
            );
        }
        return None;
    };
    let others: Vec<NodeId> = voters
        .iter()
        .copied()
        .filter(|&v| v != to && live.heard(&m, v))
        .collect();
    hand_over_to(raft, ready, elect, id, to, &others).await
}

/// After the handover entry at `index` committed: the heartbeat that tells `to` (and the
/// `others`) of the commit, once they hold the entry (by `deadline`).
async fn tell_commit(
    raft: &Raft,
    to: NodeId,
    others: &[NodeId],
    index: u64,
    deadline: tokio::time::Instant,
) {
    let holds = |m: &openraft::RaftMetrics<NodeId, crate::base::ids::CtrlNode>, v: NodeId| {
        m.replication
            .as_ref()
            .and_then(|r| r.get(&v).copied().flatten())
            .is_some_and(|l| l.index >= index)
    };
    // The standby learns of the commit from the leader's next append or heartbeat (no message
    // of its own, `vendor/openraft/XCE-PATCH.md`), and openraft sends no heartbeat to a
    // follower while an append to it is in flight — the entry's own append may still be. Once
    // the standby has acknowledged the entry nothing is in flight to it (the entry is the last
    // of this term), and the commit is already in its replication stream's queue ahead of the
    // heartbeat asked for here: that one heartbeat carries it.
    let mut every_turn = raft.metrics();
    let acked = tokio::time::timeout_at(
        deadline,
        every_turn.wait_for(|m| m.state != ServerState::Leader || holds(m, to)),
    )
    .await
    .map(|r| r.is_ok());
    if acked != Ok(true) {
        return;
    }
    // Issue 36: the others learn of the commit from the same heartbeat, and yield to `to`
    // instead of racing it once the leases lapse (more than three voters). The old leader
    // sends nothing more once it has voted for `to`: one that lacks the commit then never
    // applies the entry before the election.
    let until = deadline.min(tokio::time::Instant::now() + OTHERS_ACK);
    let _ = tokio::time::timeout_at(
        until,
        every_turn
            .wait_for(|m| m.state != ServerState::Leader || others.iter().all(|&v| holds(m, v))),
    )
    .await;
    let _ = raft.trigger().heartbeat().await;
}

/// Longest the leader waits, after the named voter acknowledged the handover entry, for the
/// `others` to acknowledge it too (issue 36).
pub const OTHERS_ACK: Duration = Duration::from_millis(100);

/// Hands leadership over to voter `to` (chosen by the caller) and waits for a new leader (up
/// to [`HANDOVER_WAIT`]): the new leader, if one appeared. `others`: the other voters heard
/// recently; the heartbeat that tells `to` of the commit goes once they hold the entry too (at
/// most [`OTHERS_ACK`] later), so it tells them as well and they yield ([`yields`]). The node serves as primary no more
/// and its elections stay held ([`crate::raft::elect::Hold::HandedOver`]) whatever the outcome:
/// a caller that keeps running releases both ([`crate::raft::ready::Readiness::resume`]).
pub async fn hand_over_to(
    raft: &Raft,
    ready: &crate::raft::ready::Readiness,
    elect: &crate::raft::elect::Elections,
    id: NodeId,
    to: NodeId,
    others: &[NodeId],
) -> Option<NodeId> {
    let t0 = Instant::now();
    // No checkpoint entry of the consistency check after the handover entry (C19).
    let _alone = ready.proposing.lock().await;
    ready.hand_over();
    // Never take leadership back: without this, a vote grant slowed by a loaded disk let the
    // old leader's own election timer fire and win again before the standby's next campaign.
    elect.hold(crate::raft::elect::Hold::HandedOver, true);
    let entry = Batch(std::sync::Arc::new(vec![Proposal {
        client_id: [0; 16],
        request_id: 0,
        now_ms: crate::base::clock::now_ms(),
        cmd: Cmd::Handover { to },
    }]));
    let entry = match tokio::time::timeout(HANDOVER_WAIT, raft.client_write(entry)).await {
        Ok(Ok(resp)) => resp.log_id,
        _ => {
            crate::log_warn!("node {id}: handover to node {to}: the entry did not commit");
            return None;
        }
    };
    let deadline = tokio::time::Instant::now() + HANDOVER_WAIT.saturating_sub(t0.elapsed());
    tell_commit(raft, to, others, entry.index, deadline).await;
    // Server metrics: they change with the leader (not on every turn of the raft loop), and
    // the deadline is read on every turn.
    let mut rx = raft.server_metrics();
    loop {
        let leader = rx.borrow_and_update().current_leader;
        if leader.is_some_and(|l| l != id) {
            eprintln!(
                "node {id}: handed leadership over to node {} in {} ms",
                leader.unwrap_or_default(),
                t0.elapsed().as_millis()
            );
            return leader;
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) if tokio::time::Instant::now() < deadline => {}
            _ => {
                crate::log_warn!(
                    "node {id}: handover to node {to}: no new leader within {} ms",
                    HANDOVER_WAIT.as_millis()
                );
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    /// Issue 26: a handover names a voter heard recently with the most of the log; never a
    /// stopped one, however far its log reached (it picked one: a 2 s stall).
    #[test]
    fn a_handover_names_a_voter_heard_recently() {
        let voters = [2, 3, 4];
        type Case = (&'static str, [Option<u64>; 3], [bool; 3], Option<NodeId>);
        let cases: [Case; 5] = [
            (
                "all heard: the most matched",
                [Some(9), Some(10), Some(8)],
                [true; 3],
                Some(3),
            ),
            (
                "the most matched is stopped",
                [Some(9), Some(10), Some(8)],
                [true, false, true],
                Some(2),
            ),
            (
                "a tie: the higher id",
                [Some(10), Some(10), None],
                [true, true, true],
                Some(3),
            ),
            (
                "nobody heard",
                [Some(9), Some(10), Some(8)],
                [false; 3],
                None,
            ),
            (
                "heard but nothing matched yet",
                [None, None, None],
                [false, false, true],
                Some(4),
            ),
        ];
        for (what, matched, heard, want) in cases {
            let got = pick(
                &voters,
                |v| matched[(v - 2) as usize],
                |v| heard[(v - 2) as usize],
            );
            assert_eq!(got, want, "{what}");
        }
    }

    /// C22: freshness from this node's facts alone (no clock), as a table. Node 2 is named by
    /// leader 1's handover entry at index 50 of term 4; node 2's log ended at 40 when it started.
    #[test]
    fn a_handover_is_fresh_by_this_nodes_facts_alone() {
        let h = Applied {
            to: 2,
            log_id: LogId::new(CommittedLeaderId::new(4, 1), 50),
        };
        let cases = [
            (
                "appended since start, current term, still following 1",
                2,
                Some(40),
                4,
                Some(1),
                true,
            ),
            (
                "a node that started with an empty log",
                2,
                None,
                4,
                Some(1),
                true,
            ),
            ("names another node", 3, Some(40), 4, Some(1), false),
            (
                "replayed from disk at start",
                2,
                Some(50),
                4,
                Some(1),
                false,
            ),
            ("a later term", 2, Some(40), 5, Some(1), false),
            ("another leader now", 2, Some(40), 4, Some(3), false),
            ("no leader known", 2, Some(40), 4, None, false),
        ];
        for (what, me, start_last, term, leader, want) in cases {
            assert_eq!(fresh(&h, me, start_last, term, leader), want, "{what}");
        }
    }
}
