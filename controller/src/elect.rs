//! C15: who may campaign, and a campaign right when a crashed leader's lease lapses.
//!
//! **One owner of openraft's runtime `elect` switch.** Several parts of the controller keep a
//! node from campaigning for a while: C12 (a node that lost its data, until caught up) and C14
//! (a leader that handed leadership over, until it exits or is electable again). Each one is a
//! [`Hold`] on [`Elections`]; openraft's switch is on exactly when no hold is set, and the early
//! campaign below reads the same holds, so no part can switch elections back on under another.
//!
//! **The early campaign.** openraft 0.9 lets a follower campaign only after the leader lease
//! (election-max) *plus* its own random election timeout (election-min..max) have passed since
//! the last append it accepted, and every follower refuses votes for the lease after such an
//! append. When the leader's process dies its kernel closes the raft connections it had open to
//! the followers: that close is evidence. A follower that saw the connection carrying its
//! leader's appends close, and has accepted no append since, campaigns ([`Raft::trigger`])
//! right when its own lease lapses — instead of a whole random timeout later — staggered by its
//! rank among the other voters (lowest id first: a later candidate of the same term has a
//! higher id, so an earlier one that lost grants it its vote).
//!
//! **Why lease reads stay safe, by construction.** A follower F campaigns early only when
//! `now > utime(F) + lease` on its own clock, where `utime(F)` is when F last accepted an
//! append of the leader's vote: exactly the instants at which openraft would grant another
//! candidate F's vote anyway (and never while C11's [`crate::net::VoteGuard`] refuses votes
//! after a restart). So no new quorum can include F earlier than before. The closed connection
//! only chooses *when* within the already-permitted time F acts; a wrong guess (a live leader
//! whose connection closed — a firewall REJECT, a reset) costs an election, not safety, and
//! an append accepted after the close cancels it. The leader answers reads from its lease only
//! while a quorum accepted appends it SENT less than the lease-read window `W` ago
//! ([`lease_read_window`]); such a follower received the append after it was sent, so with a
//! clock-rate drift of at most `ρ` between any two nodes the inequality relied on is
//!
//! ```text
//!     W · (1 + ρ)  <  lease · (1 − ρ)        (W = lease / 3: holds for any ρ < 1/2)
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::ServerState;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::net::VoteGuard;
use crate::types::{NodeId, Raft, Vote};

/// The window within which a quorum must have accepted appends SENT by the leader for it to
/// answer a read from its state (C3): a third of openraft's leader lease (`election_max_ms`),
/// the time a follower refuses every other candidate after accepting an append. See the module
/// documentation for the inequality this keeps.
pub fn lease_read_window(election_max_ms: u64) -> Duration {
    Duration::from_millis(election_max_ms) / 3
}

/// A reason not to campaign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// C12: started without data and not caught up yet.
    CatchingUp = 1,
    /// C14: handed leadership over (stopping, or about to be removed).
    HandedOver = 2,
}

/// The timing of the early campaign.
#[derive(Debug, Clone, Copy)]
pub struct EarlyTiming {
    /// openraft's leader lease: election-max.
    pub lease: Duration,
    /// Delay between ranks (half a heartbeat); rank 0 waits half of it past the lease, for a
    /// follower that accepted the last append a little later than this one.
    pub step: Duration,
}

/// Owner of the `elect` switch and of the early campaign.
pub struct Elections {
    raft: Raft,
    id: NodeId,
    holds: Mutex<u8>,
    /// `None`: `--early-campaign off`.
    early: Option<EarlyTiming>,
    guard: VoteGuard,
    closed: mpsc::UnboundedSender<Vote>,
}

impl Elections {
    /// Starts the owner (and, with `early`, the task that campaigns after a leader's close).
    pub fn start(
        raft: Raft,
        id: NodeId,
        early: Option<EarlyTiming>,
        guard: VoteGuard,
    ) -> Arc<Elections> {
        let (closed, rx) = mpsc::unbounded_channel();
        let e = Arc::new(Elections {
            raft,
            id,
            holds: Mutex::new(0),
            early,
            guard,
            closed,
        });
        if early.is_some() {
            tokio::spawn(watch_closes(e.clone(), rx));
        }
        e
    }

    /// Sets (`on`) or clears a hold; openraft elects exactly when no hold is set. The switch
    /// is set under the lock, so concurrent holds cannot leave it out of step with them.
    pub fn hold(&self, why: Hold, on: bool) {
        let mut holds = self.holds.lock().expect("elect holds");
        let before = *holds;
        if on {
            *holds |= why as u8;
        } else {
            *holds &= !(why as u8);
        }
        if (before == 0) != (*holds == 0) {
            self.raft.runtime_config().elect(*holds == 0);
        }
    }

    pub fn held(&self, why: Hold) -> bool {
        *self.holds.lock().expect("elect holds") & why as u8 != 0
    }

    /// Whether this node may campaign at all now.
    pub fn allowed(&self) -> bool {
        *self.holds.lock().expect("elect holds") == 0
    }

    /// The raft server: a connection that carried appends of the committed `vote` closed.
    pub fn leader_link_closed(&self, vote: Vote) {
        if self.early.is_some() && vote.is_committed() {
            let _ = self.closed.send(vote);
        }
    }
}

/// What a follower knows when its leader's connection closed.
struct Following {
    /// When it last accepted an append of the leader's vote (openraft's clock).
    utime: Instant,
    /// Its rank among the voters other than the leader, by id.
    rank: u32,
}

/// This node's state if it follows `vote` (committed, another node's) as a voter.
async fn following(raft: &Raft, me: NodeId, vote: Vote) -> Option<Following> {
    raft.with_raft_state(move |st| {
        let leader = vote.leader_id().voted_for()?;
        if st.vote_ref() != &vote || leader == me || st.server_state != ServerState::Follower {
            return None;
        }
        let mut voters: Vec<NodeId> = st
            .membership_state
            .effective()
            .voter_ids()
            .filter(|&n| n != leader)
            .collect();
        voters.sort_unstable();
        let rank = voters.iter().position(|&n| n == me)? as u32;
        Some(Following {
            utime: st.vote_last_modified()?,
            rank,
        })
    })
    .await
    .ok()
    .flatten()
}

async fn watch_closes(e: Arc<Elections>, mut rx: mpsc::UnboundedReceiver<Vote>) {
    let Some(t) = e.early else { return };
    while let Some(vote) = rx.recv().await {
        // Several connections of one leader close together: one decision per vote.
        let mut vote = vote;
        while let Ok(v) = rx.try_recv() {
            vote = v;
        }
        let closed_at = Instant::now();
        let Some(f) = following(&e.raft, e.id, vote).await else {
            continue;
        };
        if f.utime > closed_at {
            continue; // an append came after the close: the leader is there
        }
        let at = f.utime + t.lease + t.step / 2 + t.step * f.rank;
        tokio::time::sleep_until(at).await;
        // Still following that vote, with no append accepted since: its lease has lapsed here.
        let Some(now) = following(&e.raft, e.id, vote).await else {
            continue;
        };
        if now.utime != f.utime || !e.allowed() || e.guard.refuses() {
            continue;
        }
        let leader = vote.leader_id().voted_for().unwrap_or_default();
        let ms = crate::now_ms();
        eprintln!(
            "node {}: the connection of the primary (node {leader}) closed and its lease lapsed with no append since: campaigning (C15, rank {}) at={}.{:03}",
            e.id,
            f.rank,
            ms / 1000,
            ms % 1000
        );
        if e.raft.trigger().elect().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inequality of the module documentation, for the default and the old timings and a
    /// drift far beyond any real clock (10%).
    #[test]
    fn lease_read_window_is_well_inside_the_vote_refusal() {
        for max in [120u64, 300, 800] {
            let w = lease_read_window(max).as_secs_f64();
            let lease = Duration::from_millis(max).as_secs_f64();
            let rho = 0.10;
            assert!(w * (1.0 + rho) < lease * (1.0 - rho), "max {max}");
        }
    }
}
