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
//! The marker goes (fsynced) once the node has caught up to the commit index a leader told it:
//! an AppendEntries of a committed leader vote succeeded and the node's log now matches the
//! leader's up to at least that request's `leader_commit` — so it holds every entry committed
//! as of then, and from then on remembers what it acknowledges like any other node. A node
//! that becomes leader (the bootstrap leader) drops it too. The marker survives restarts, so a
//! node that crashes half-way through catching up still does not vote.
//!
//! Not covered (no algorithm can be): a majority of nodes losing their data at once.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use openraft::error::RaftError;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, VoteRequest};
use openraft::ServerState;

use crate::base::ids::NodeId;
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

impl Amnesia {
    /// Called before Raft starts. `blank`: the store has no log, no vote and no snapshot.
    pub fn open(id: NodeId, dir: &Path, blank: bool) -> io::Result<Arc<Amnesia>> {
        let marker = dir.join(MARKER);
        if blank && !marker.exists() {
            let f = std::fs::File::create(&marker)?;
            f.sync_all()?;
            sync_dir(dir)?;
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
    /// node up to the leader's commit index.
    pub async fn append(
        &self,
        raft: &Raft,
        req: AppendEntriesRequest<TypeConfig>,
    ) -> Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
        if !self.unsure() {
            return raft.append_entries(req).await;
        }
        let reach = req.entries.last().map(|e| e.log_id).or(req.prev_log_id);
        let (commit, from_leader) = (req.leader_commit, req.vote.is_committed());
        let res = raft.append_entries(req).await;
        let matched = match &res {
            Ok(AppendEntriesResponse::Success) => reach,
            Ok(AppendEntriesResponse::PartialSuccess(m)) => *m,
            _ => return res,
        };
        let caught_up = match commit {
            None => true,
            Some(c) => matched.is_some_and(|m| m.index >= c.index),
        };
        if from_leader && caught_up {
            self.caught_up(&format!(
                "caught up to the leader's commit index {}",
                commit.map_or_else(|| "none".to_string(), |c| c.index.to_string())
            ));
        }
        res
    }

    fn caught_up(&self, why: &str) {
        if !self.unsure.swap(false, Ordering::AcqRel) {
            return;
        }
        let res = std::fs::remove_file(&self.marker)
            .and_then(|()| sync_dir(self.marker.parent().unwrap_or(Path::new("."))));
        if let Err(e) = res {
            // The marker stays: after a restart this node waits for a leader again (safe).
            eprintln!("node {}: removing {}: {e}", self.id, self.marker.display());
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

/// Follows the node's state: a leader is caught up by definition; elections follow
/// [`Amnesia::sync_elect`]. Runs until the marker is gone.
/// Whether the last entry of this node's log was written by node `me` as leader.
async fn wrote_as_leader(log: &mut crate::raft::store::LogStore, me: NodeId) -> bool {
    use openraft::storage::RaftLogStorage;
    log.get_log_state()
        .await
        .ok()
        .and_then(|st| st.last_log_id)
        .is_some_and(|l| l.leader_id.node_id == me && l.index > 0)
}

/// Follows the node until it is sure (caught up, or led): `log` is its log store.
pub async fn watch(
    raft: Raft,
    amnesia: Arc<Amnesia>,
    elect: Arc<Elections>,
    mut log: crate::raft::store::LogStore,
) {
    let mut rx = raft.metrics();
    loop {
        let (state, last) = {
            let m = rx.borrow_and_update();
            (m.state, m.last_log_index)
        };
        if state == ServerState::Leader {
            amnesia.caught_up("leads the cluster");
        } else if amnesia.unsure() && wrote_as_leader(&mut log, amnesia.id).await {
            // A leadership too short for the metrics to show (elected, wrote its first entry,
            // deposed at once by a concurrent candidate of a brand-new cluster) still left
            // its entry in the log: a quorum elected it, so its log held everything committed.
            // Without this, two such nodes of a new cluster refused every candidate for good.
            amnesia.caught_up("its log holds an entry it wrote as leader");
        }
        amnesia.sync_elect(&elect, last);
        if !amnesia.unsure() {
            return;
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}
