//! C12: a node without its data does not vote.
//!
//! A node whose data directory was lost comes back with an empty log and no vote. Raft's
//! safety rests on every node remembering what it acknowledged: an empty node grants its vote
//! to any candidate (every log is at least as long as nothing), so with the leader L down and
//! a write W acknowledged by {L, F}, an F that lost its disk would help elect N, which never had
//! W, and W would be gone for good when L returns (openraft's `loosen-follower-log-revert`,
//! which lets the leader re-replicate to an emptied follower, does not prevent this).
//!
//! How a node tells "lost my data" from "brand new": it cannot, from its own disk. So every
//! node that starts with a blank store (no log, no vote, no snapshot) writes a marker file
//! (`DIR/catching-up`, fsynced) before Raft starts, and while the marker exists it
//! - grants no vote to a candidate whose log goes beyond the bootstrap entry (index 0, the
//!   initial membership that `initialize` writes): in a brand-new cluster every candidate's log
//!   is only that entry, so bootstrap still works; once anything was committed, a candidate
//!   must win without this node;
//! - does not campaign (a [`Hold`] on `elect.rs`'s election timer) once its log holds more than the
//!   bootstrap entry: a partly caught-up log may lack an acknowledged write.
//!
//! The marker goes (fsynced) once the node has caught up (C12 amended: caught up means caught
//! up — [`caught_up_by`], a pure decision, decides it from one of two facts):
//! - **the leader's log, into the leader's own term, and its commit index**: an AppendEntries
//!   of a committed leader vote of term T succeeded, and the node's log now matches the
//!   leader's up to an entry `m` that (a) is of term T — the leader wrote it after everything it
//!   held when it was elected, which is every entry committed before term T (Raft's leader
//!   completeness) — and (b) is at or past the request's commit index — every entry committed
//!   in term T so far. A write this node helped acknowledge before it lost its data was
//!   committed before this process started, so before the leader built this append: in an
//!   earlier term it is covered by (a), in term T by the leader's commit index, (b). From then
//!   on the node remembers what it acknowledges like any other node. A log that matches only
//!   entries of earlier terms does not count, whatever the commit index says (it may stop
//!   short of a write a previous leader acknowledged, or the leader's commit index may not have
//!   caught up with its own election yet);
//! - **its own election since it started blank**: the store saved a committed vote of this node
//!   (openraft saves it the moment the node wins, before its first entry as leader; the store
//!   calls [`Amnesia::vote_saved`] once it is on disk). A quorum elected it, so its log held
//!   everything committed (the bootstrap leader of a new cluster, or a handover, C14). Told by
//!   the store, not read from the metrics, so a leadership too short for the metrics to show
//!   (elected, deposed at once in a brand-new cluster) still counts.
//!
//! What never counts (issue 25, defect 2): who wrote the entries the node holds. Before, a log
//! ending with an entry this node wrote as leader counted; but after a rolling restart every
//! node has led, and the current leader replicates a blank node's old entries back to it: a
//! partial log ending in one of them passed that test, the node voted again, and a write
//! acknowledged by {leader, this node before it lost its data} could be lost
//! (`controller/tests/amnesia.rs`, `an_old_entry_of_its_own_replicated_back_is_not_caught_up`).
//! The marker holds nothing (an older build's marker is read the same way).
//!
//! The marker survives restarts, so a node that crashes half-way through catching up still
//! does not vote. Writing or removing it is a storage write like any other: a failure is the
//! node's storage fault (C21, `base/fault.rs`).
//!
//! Not covered (no algorithm can be): a majority of nodes losing their data at once.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use openraft::error::RaftError;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, VoteRequest};

use crate::base::ids::{LogId, NodeId, Vote};
use crate::raft::elect::{Elections, Hold};
use crate::raft::types::{Raft, TypeConfig};

/// The marker's file name in the data directory.
pub const MARKER: &str = "catching-up";

/// Whether this node is still catching up after starting blank.
pub struct Amnesia {
    id: NodeId,
    marker: PathBuf,
    unsure: AtomicBool,
    /// Last candidate term a refusal was logged for (one line per term).
    logged_term: AtomicU64,
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// What a node that started blank learns, one fact at a time.
#[derive(Debug, Clone, Copy)]
pub enum Fact {
    /// Raft accepted an AppendEntries of `vote`; the node's log now matches the leader's up to
    /// `matched`; the request's commit index was `leader_commit`.
    Append {
        vote: Vote,
        matched: Option<LogId>,
        leader_commit: Option<LogId>,
    },
    /// The store saved `vote` (on disk); this node is `me`.
    VoteSaved { vote: Vote, me: NodeId },
}

/// C12 (amended): whether `fact` shows that a node which started blank has caught up, and
/// why (see the module documentation). Pure: the table test below is the rule.
pub fn caught_up_by(fact: &Fact) -> Option<String> {
    match *fact {
        Fact::Append {
            vote,
            matched: Some(m),
            leader_commit,
        } if vote.is_committed()
            && m.leader_id.term == vote.leader_id().term
            && leader_commit.is_none_or(|c| m.index >= c.index) =>
        {
            Some(format!(
                "its log matches the leader's into the leader's term {} (index {}) and reaches \
                 its commit index ({})",
                m.leader_id.term,
                m.index,
                leader_commit.map_or_else(|| "none".to_string(), |c| c.index.to_string())
            ))
        }
        Fact::VoteSaved { vote, me }
            if vote.is_committed() && vote.leader_id().voted_for() == Some(me) =>
        {
            Some(format!(
                "elected leader in term {} since it started blank",
                vote.leader_id().term
            ))
        }
        _ => None,
    }
}

/// Writes (`create`) or removes the marker, fsynced with its directory; a failure is this
/// node's storage fault (C21).
fn marker_io(marker: &Path, create: bool) -> io::Result<()> {
    let dir = marker.parent().unwrap_or(Path::new("."));
    let res =
        crate::base::failpoints::storage(crate::base::failpoints::MARKER_SAVE).and_then(|()| {
            if create {
                std::fs::File::create(marker)?.sync_all()?;
            } else {
                std::fs::remove_file(marker)?;
            }
            sync_dir(dir)
        });
    if let Err(e) = &res {
        crate::base::fault::record("marker", marker, e);
    }
    res
}

impl Amnesia {
    /// Called before Raft starts. `blank`: the store has no log, no vote and no snapshot.
    pub fn open(id: NodeId, dir: &Path, blank: bool) -> io::Result<Arc<Amnesia>> {
        let marker = dir.join(MARKER);
        if blank && !marker.exists() {
            marker_io(&marker, true)?;
        }
        let unsure = marker.exists();
        if unsure {
            eprintln!(
                "node {id}: started without data (new, or its data was lost): votes only in a brand-new cluster's first election until caught up (C12)"
            );
        }
        Ok(Arc::new(Amnesia {
            id,
            marker,
            unsure: AtomicBool::new(unsure),
            logged_term: AtomicU64::new(0),
        }))
    }

    pub fn unsure(&self) -> bool {
        self.unsure.load(Ordering::Acquire)
    }

    /// The vote decision (hook in the raft server): true when this node must refuse `req`.
    pub fn refuses_vote(&self, req: &VoteRequest<NodeId>) -> bool {
        if !self.unsure() {
            return false;
        }
        let beyond_bootstrap = req.last_log_id.is_some_and(|l| l.index > 0);
        if beyond_bootstrap {
            let term = req.vote.leader_id().term;
            if self.logged_term.swap(term, Ordering::Relaxed) != term {
                eprintln!(
                    "node {}: refusing vote for node {} (term {term}): this node lost or never had its data and has not caught up yet (C12)",
                    self.id,
                    req.vote.leader_id().voted_for().unwrap_or_default()
                );
            }
        }
        beyond_bootstrap
    }

    /// An AppendEntries handled by Raft (hook in the raft server): notes when it brings this
    /// node up to the leader's commit index ([`caught_up_by`]).
    pub async fn append(
        &self,
        raft: &Raft,
        req: AppendEntriesRequest<TypeConfig>,
    ) -> Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
        if !self.unsure() {
            return raft.append_entries(req).await;
        }
        let reach = req.entries.last().map(|e| e.log_id).or(req.prev_log_id);
        let (leader_commit, vote) = (req.leader_commit, req.vote);
        let res = raft.append_entries(req).await;
        let matched = match &res {
            Ok(AppendEntriesResponse::Success) => reach,
            Ok(AppendEntriesResponse::PartialSuccess(m)) => *m,
            _ => return res,
        };
        let fact = Fact::Append {
            vote,
            matched,
            leader_commit,
        };
        if let Some(why) = caught_up_by(&fact) {
            self.caught_up(&why);
        }
        res
    }

    /// The store saved `vote` (its hook, `raft/store.rs`): this node's own election counts.
    pub fn vote_saved(&self, vote: &Vote) {
        if !self.unsure() {
            return;
        }
        let fact = Fact::VoteSaved {
            vote: *vote,
            me: self.id,
        };
        if let Some(why) = caught_up_by(&fact) {
            self.caught_up(&why);
        }
    }

    fn caught_up(&self, why: &str) {
        if !self.unsure.swap(false, Ordering::AcqRel) {
            return;
        }
        if marker_io(&self.marker, false).is_err() {
            // A storage fault (C21): the node stops; the marker may stay, and after a restart
            // this node waits for a leader again (safe).
            return;
        }
        eprintln!("node {}: {why}: votes and campaigns again (C12)", self.id);
    }

    /// Holds elections ([`Hold::CatchingUp`]) while the state asks: unsure with more than the
    /// bootstrap entry in the log.
    pub fn sync_elect(&self, elect: &Elections, last_log_index: Option<u64>) {
        let hold = self.unsure() && last_log_index.is_some_and(|i| i > 0);
        if elect.held(Hold::CatchingUp) != hold {
            elect.hold(Hold::CatchingUp, hold);
            if hold {
                eprintln!("node {}: not campaigning until caught up (C12)", self.id);
            }
        }
    }
}

/// Follows the node's log until it is sure: elections follow [`Amnesia::sync_elect`].
pub async fn watch(raft: Raft, amnesia: Arc<Amnesia>, elect: Arc<Elections>) {
    let mut rx = raft.metrics();
    loop {
        let last = rx.borrow_and_update().last_log_index;
        amnesia.sync_elect(&elect, last);
        if !amnesia.unsure() {
            return;
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn log_id(term: u64, leader: NodeId, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, leader), index)
    }

    fn committed(term: u64, leader: NodeId) -> Vote {
        let mut v = Vote::new(term, leader);
        v.commit();
        v
    }

    /// C12 amended, as a table: (what, the fact, caught up?). Node F is 2; it led in term 3;
    /// the current leader L is 1, in term 5.
    #[test]
    fn caught_up_means_caught_up() {
        let append = |vote, matched, leader_commit| Fact::Append {
            vote,
            matched,
            leader_commit,
        };
        let cases: Vec<(&str, Fact, bool)> = vec![
            (
                "issue 25 defect 2: the log ends in F's own old entry, the commit is ahead",
                append(
                    committed(5, 1),
                    Some(log_id(3, 2, 40)),
                    Some(log_id(5, 1, 57)),
                ),
                false,
            ),
            (
                "F's own old entry even as the last entry the leader has",
                append(
                    committed(5, 1),
                    Some(log_id(3, 2, 40)),
                    Some(log_id(3, 2, 40)),
                ),
                false,
            ),
            (
                "matched the leader's commit index of its own term",
                append(
                    committed(5, 1),
                    Some(log_id(5, 1, 57)),
                    Some(log_id(5, 1, 57)),
                ),
                true,
            ),
            (
                "beyond it",
                append(
                    committed(5, 1),
                    Some(log_id(5, 1, 60)),
                    Some(log_id(5, 1, 57)),
                ),
                true,
            ),
            (
                "short of it",
                append(
                    committed(5, 1),
                    Some(log_id(5, 1, 56)),
                    Some(log_id(5, 1, 57)),
                ),
                false,
            ),
            (
                "matched only entries of an earlier term, at a commit index of that term",
                append(
                    committed(5, 1),
                    Some(log_id(4, 3, 50)),
                    Some(log_id(4, 3, 50)),
                ),
                false,
            ),
            (
                "matched only entries of an earlier term, no commit index (a restarted leader)",
                append(committed(5, 1), Some(log_id(4, 3, 50)), None),
                false,
            ),
            (
                "the leader's first entry of its term, its commit index not caught up yet",
                append(
                    committed(5, 1),
                    Some(log_id(5, 1, 51)),
                    Some(log_id(4, 3, 50)),
                ),
                true,
            ),
            (
                "the leader's first entry of its term, no commit index yet (a new cluster)",
                append(committed(1, 1), Some(log_id(1, 1, 1)), None),
                true,
            ),
            (
                "an entry of the leader's term, short of a commit index of that term",
                append(
                    committed(5, 1),
                    Some(log_id(5, 1, 51)),
                    Some(log_id(5, 1, 57)),
                ),
                false,
            ),
            (
                "an append of an uncommitted vote",
                append(
                    Vote::new(5, 1),
                    Some(log_id(5, 1, 57)),
                    Some(log_id(5, 1, 57)),
                ),
                false,
            ),
            (
                "nothing matched",
                append(committed(5, 1), None, Some(log_id(5, 1, 57))),
                false,
            ),
            (
                "F elected (its committed vote saved)",
                Fact::VoteSaved {
                    vote: committed(6, 2),
                    me: 2,
                },
                true,
            ),
            (
                "F a candidate (its uncommitted vote saved)",
                Fact::VoteSaved {
                    vote: Vote::new(6, 2),
                    me: 2,
                },
                false,
            ),
            (
                "F follows another leader (that leader's vote saved)",
                Fact::VoteSaved {
                    vote: committed(6, 1),
                    me: 2,
                },
                false,
            ),
        ];
        for (what, fact, want) in cases {
            assert_eq!(caught_up_by(&fact).is_some(), want, "{what}: {fact:?}");
        }
    }
}
