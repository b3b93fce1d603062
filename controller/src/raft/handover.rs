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

/// Called by the state machine for every applied batch.
pub fn note(tx: &mpsc::UnboundedSender<Applied>, log_id: LogId, batch: &Batch) {
    for p in batch.0.iter() {
        if let Cmd::Handover { to } = p.cmd {
            let _ = tx.send(Applied { to, log_id });
        }
    }
}

/// The standby's side: campaigns when a [`fresh`] handover entry names it. `start_last`: the
/// last log index this node's log held when the process started.
pub async fn follow(
    raft: Raft,
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

/// The leader's side, on SIGTERM: hands leadership over and waits for the new leader (up to
/// [`HANDOVER_WAIT`]). Does nothing on a node that does not lead or leads alone.
pub async fn hand_over(
    raft: &Raft,
    ready: &crate::raft::ready::Readiness,
    elect: &crate::raft::elect::Elections,
    id: NodeId,
) {
    let m = raft.metrics().borrow().clone();
    if m.state != ServerState::Leader {
        return;
    }
    let voters: Vec<NodeId> = m
        .membership_config
        .membership()
        .voter_ids()
        .filter(|&v| v != id)
        .collect();
    let matched = m.replication.clone().unwrap_or_default();
    let Some(&to) = voters
        .iter()
        .max_by_key(|v| (matched.get(v).copied().flatten().map(|l| l.index), **v))
    else {
        return;
    };
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
            eprintln!(
                "node {id}: handover to node {to}: the entry did not commit; stopping anyway"
            );
            return;
        }
    };
    let deadline = tokio::time::Instant::now() + HANDOVER_WAIT.saturating_sub(t0.elapsed());
    // The standby learns of the commit from the leader's next append or heartbeat (no message
    // of its own, `vendor/openraft/XCE-PATCH.md`), and openraft sends no heartbeat to a
    // follower while an append to it is in flight — the entry's own append may still be. Once
    // the standby has acknowledged the entry nothing is in flight to it (the entry is the last
    // of this term), and the commit is already in its replication stream's queue ahead of the
    // heartbeat asked for here: that one heartbeat carries it.
    let mut every_turn = raft.metrics();
    let acked = tokio::time::timeout_at(
        deadline,
        every_turn.wait_for(|m| {
            m.state != ServerState::Leader
                || m.replication
                    .as_ref()
                    .and_then(|r| r.get(&to).copied().flatten())
                    .is_some_and(|l| l.index >= entry.index)
        }),
    )
    .await
    .map(|r| r.is_ok());
    if acked == Ok(true) {
        let _ = raft.trigger().heartbeat().await;
    }
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
            return;
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) if tokio::time::Instant::now() < deadline => {}
            _ => {
                eprintln!(
                    "node {id}: handover to node {to}: no new leader within {} ms; stopping anyway",
                    HANDOVER_WAIT.as_millis()
                );
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

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
