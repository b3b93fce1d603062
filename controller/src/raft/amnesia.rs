//! C12: a node without its data neither votes nor counts.
//!
//! A node whose data directory was lost comes back with an empty log and no vote. Raft's
//! safety rests on every node remembering what it promised: the votes it granted and the
//! entries it acknowledged. An empty node forgets both. Refusing its *votes* (the third
//! round) is not enough: a quorum is made of acknowledgements too (issue 35, defect 1). P leads
//! in term T and is cut off; N is elected in T+1 and W1 is acknowledged by {N, F}; N is cut
//! off; F loses its disk and restarts; P's link comes back. F, with no vote, accepts P's
//! term-T appends, its answers count in P's commit and lease quorum, and P acknowledges W2 and
//! serves a listing without W1.
//!
//! How a node tells "lost my data" from "brand new": it cannot, from its own disk. So every
//! node that starts with a blank store (no log, no vote, no snapshot) writes a marker file
//! (`DIR/catching-up`, fsynced) before Raft starts, and while the marker exists (C12, fifth
//! round):
//!
//! - **It learns what it may have promised.** It asks every other voter for its *standing*
//!   (`raft/standing.rs`, [`crate::raft::frame::Standing`]): its vote, its last log id, the
//!   membership it holds. Once every other voter of the newest membership the answers name
//!   has answered ([`floor_of`]), the greatest vote among the answers is its **floor**. Every
//!   vote the node granted and every append it acknowledged before it lost its data was of a
//!   vote at most the floor: a candidate it voted for, a leader it acknowledged, is one of those
//!   voters and holds that vote or a greater one (votes only grow, on disk). (Not a quorum of
//!   them: with five nodes the one that heard the newer vote may be the one left out; in three
//!   nodes a quorum not counting itself is both others anyway.)
//! - **Appends and snapshots** ([`admits_append`]): refused — not stored, not acknowledged, so
//!   they count toward no commit and no lease — until the floor is known, and from any vote
//!   below it. From a vote at or above it they go to Raft as anyone's: the node's vote becomes
//!   that vote (openraft saves it), a monotonic continuation of every promise it made before,
//!   and it holds on disk every entry it acknowledges from then on. In the timeline above, F
//!   cannot know the floor while N is cut off, and then it is N's vote: P commits nothing with F.
//! - **Votes and pre-votes** ([`grants_vote`]): none until caught up. A partial log cannot say
//!   whether a candidate lacks a write this node helped commit before it lost its data. The one
//!   exception is a **brand-new cluster**: when no answer showed a log beyond the bootstrap
//!   entry (index 0, the initial membership `initialize` writes), nothing was ever committed,
//!   and the node grants votes at or above the floor only: its votes stay monotonic across the
//!   loss, as openraft's rule for a vote (never below the last one) asks.
//! - **Campaigns and initialisation** ([`may_campaign`], a [`Hold`] on `elect.rs`'s timer;
//!   `cmd/run.rs::initialize`, whose openraft election starts at once): none until caught up,
//!   but in a brand-new cluster, with a vote (its next term, itself) at or above the floor.
//!
//! The marker goes (fsynced) once the node has caught up ([`caught_up_by`], a pure decision,
//! from one of two facts):
//! - **the leader's log, into the leader's own term, and its commit index**: an AppendEntries
//!   of a committed leader vote at or above the floor succeeded, and the node's log now
//!   matches the leader's up to an entry `m` that (a) is of the leader's term — the leader wrote
//!   it after everything it held when it was elected, which is every entry committed before
//!   its term (Raft's leader completeness) — and (b) is at or past the request's commit index —
//!   every entry committed in its term so far. A log that matches only entries of earlier terms
//!   does not count, whatever the commit index says;
//! - **its own election since it started blank**: the store saved a committed vote of this node
//!   (possible only through the exceptions above, or a handover a leader sanctioned, C14). A
//!   quorum elected it, so its log held everything committed.
//!
//! What never counts (issue 25, defect 2): who wrote the entries the node holds — after a
//! rolling restart every node has led, and the leader replicates a blank node's old entries
//! back to it (`controller/tests/it/amnesia.rs`,
//! `an_old_entry_of_its_own_replicated_back_is_not_caught_up`).
//!
//! What it costs: a node that lost its data takes part again only once every other voter
//! answered — with one of them down, it waits; a brand-new cluster forms once every member has
//! started. Until then the cluster may be unavailable: that is the price of not losing an
//! acknowledged write. A single-node cluster has no one to ask: its floor is known at once,
//! and it is brand new (if it lost its data, the cluster lost it).
//!
//! The marker survives restarts, so a node that crashes half-way through catching up starts
//! over. Writing or removing it is a storage write like any other: a failure is the node's
//! storage fault (C21, `base/fault.rs`). The rules are checked together with the rest of the
//! protocol by the model in `model/` (C23).
//!
//! Not covered (no algorithm can be): a majority of nodes losing their data at once.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use openraft::error::RaftError;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, VoteRequest};

use crate::base::ids::{LogId, NodeId, Vote};
use crate::raft::elect::{Elections, Hold};
use crate::raft::frame::Standing;
use crate::raft::types::{Raft, TypeConfig};

/// The marker's file name in the data directory.
pub const MARKER: &str = "catching-up";

/// What a node that started blank knows of the promises it may have made before: the
/// greatest vote any other voter holds, once every one of them answered ([`floor_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Floor {
    /// The greatest vote among the answers (openraft's order: leader id, then committed).
    pub vote: Vote,
    /// No answer showed a log beyond the bootstrap entry: nothing was ever committed.
    pub brand_new: bool,
}

/// The voters a blank node `me` must hear from: those of the newest membership the answers
/// name (every config of a joint one), or, while no answer names one, the configured members
/// (`spec`, `--cluster`); never itself.
pub fn must_hear(
    me: NodeId,
    spec: &BTreeSet<NodeId>,
    answers: &BTreeMap<NodeId, Standing>,
) -> BTreeSet<NodeId> {
    let newest = answers
        .values()
        .filter(|a| !a.configs.is_empty())
        .max_by_key(|a| a.membership);
    let mut voters: BTreeSet<NodeId> = match newest {
        Some(a) => a.configs.iter().flatten().copied().collect(),
        None => spec.clone(),
    };
    voters.remove(&me);
    voters
}

/// C12 (fifth round): the floor, once every voter [`must_hear`] names has answered.
pub fn floor_of(
    me: NodeId,
    spec: &BTreeSet<NodeId>,
    answers: &BTreeMap<NodeId, Standing>,
) -> Option<Floor> {
    let need = must_hear(me, spec, answers);
    if !need.iter().all(|id| answers.contains_key(id)) {
        return None;
    }
    let mut floor = Floor {
        vote: Vote::default(),
        brand_new: true,
    };
    for a in answers.values() {
        if a.vote.partial_cmp(&floor.vote) != Some(std::cmp::Ordering::Less) {
            floor.vote = a.vote;
        }
        floor.brand_new &= a.last_log_index.is_none_or(|i| i == 0);
    }
    Some(floor)
}

/// Whether `a` is at least `b` in openraft's vote order (incomparable: no).
fn at_least(a: &Vote, b: &Vote) -> bool {
    matches!(
        a.partial_cmp(b),
        Some(std::cmp::Ordering::Greater | std::cmp::Ordering::Equal)
    )
}

/// C12 (fifth round): whether a node that has not caught up takes an append or a snapshot of
/// `vote`: only once its floor is known, and only from a vote at or above it.
pub fn admits_append(floor: Option<Floor>, vote: &Vote) -> bool {
    floor.is_some_and(|f| at_least(vote, &f.vote))
}

/// C12 (fifth round): whether a node that has not caught up grants a vote (or pre-vote) for
/// `candidate`: only in a brand-new cluster, and only for a vote at or above the floor — so
/// its votes stay monotonic across the loss (every vote it may have granted before is at most
/// the floor; granting the floor itself again is granting the same candidate the same vote).
pub fn grants_vote(floor: Option<Floor>, candidate: &Vote) -> bool {
    floor.is_some_and(|f| f.brand_new && at_least(candidate, &f.vote))
}

/// C12 (fifth round): whether node `me`, which has not caught up, may campaign (or initialise
/// a cluster, which campaigns at once) with its own vote `own`: in a brand-new cluster, when
/// the vote it would campaign with (openraft's: the next term, for itself) is at or above the
/// floor.
pub fn may_campaign(floor: Option<Floor>, own: &Vote, me: NodeId) -> bool {
    let next = Vote::new(own.leader_id().term + 1, me);
    floor.is_some_and(|f| f.brand_new && at_least(&next, &f.vote))
}

/// Whether this node is still catching up after starting blank.
pub struct Amnesia {
    id: NodeId,
    marker: PathBuf,
    unsure: AtomicBool,
    /// The configured members (`--cluster`): whom to ask before any answer names a membership.
    spec: BTreeSet<NodeId>,
    /// What the other voters answered (`raft/standing.rs`), until the floor is known.
    answers: Mutex<BTreeMap<NodeId, Standing>>,
    /// The floor, once known (it never changes after).
    floor: tokio::sync::watch::Sender<Option<Floor>>,
    /// Last term a vote refusal was logged for (one line per term).
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

/// C12 (amended, fifth round): whether `fact` shows that a node which started blank, with the
/// floor `floor`, has caught up, and why (see the module documentation). Pure: the table test
/// below is the rule.
pub fn caught_up_by(fact: &Fact, floor: Option<Floor>) -> Option<String> {
    match *fact {
        Fact::Append {
            vote,
            matched: Some(m),
            leader_commit,
        } if vote.is_committed()
            && admits_append(floor, &vote)
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
    /// `spec`: the configured members (`--cluster`).
    pub fn open(
        id: NodeId,
        dir: &Path,
        blank: bool,
        spec: BTreeSet<NodeId>,
    ) -> io::Result<Arc<Amnesia>> {
        let marker = dir.join(MARKER);
        if blank && !marker.exists() {
            marker_io(&marker, true)?;
        }
        let unsure = marker.exists();
        if unsure {
            eprintln!(
                "node {id}: started without data (new, or its data was lost): takes no append \
                 and grants no vote until every other voter told it where it stands, then \
                 until caught up (C12)"
            );
        }
        let a = Amnesia {
            id,
            marker,
            unsure: AtomicBool::new(unsure),
            spec,
            answers: Mutex::new(BTreeMap::new()),
            floor: tokio::sync::watch::channel(None).0,
            logged_term: AtomicU64::new(0),
        };
        // Nobody else to ask (a single-node cluster): the floor is known at once.
        a.settle();
        Ok(Arc::new(a))
    }

    pub fn unsure(&self) -> bool {
        self.unsure.load(Ordering::Acquire)
    }

    /// The floor, once every other voter answered (`None` before, or when never needed).
    pub fn floor(&self) -> Option<Floor> {
        *self.floor.borrow()
    }

    /// Woken when the floor becomes known.
    pub fn floor_changes(&self) -> tokio::sync::watch::Receiver<Option<Floor>> {
        self.floor.subscribe()
    }

    /// The voters still to hear from and where to reach them: the configured members' and the
    /// answers' addresses (`spec_addrs`: `--cluster`'s raft addresses).
    pub fn to_ask(&self, spec_addrs: &BTreeMap<NodeId, String>) -> Vec<(NodeId, String)> {
        let answers = self.answers.lock().expect("amnesia answers");
        let mut addrs = spec_addrs.clone();
        for a in answers.values() {
            for (id, addr) in &a.nodes {
                addrs.entry(*id).or_insert_with(|| addr.clone());
            }
        }
        must_hear(self.id, &self.spec, &answers)
            .into_iter()
            .filter(|id| !answers.contains_key(id))
            .filter_map(|id| addrs.get(&id).map(|a| (id, a.clone())))
            .collect()
    }

    /// `from` answered where it stands (`raft/standing.rs`).
    pub fn heard(&self, from: NodeId, standing: Standing) {
        if from == self.id || !standing.plausible() || self.floor().is_some() {
            return;
        }
        self.answers
            .lock()
            .expect("amnesia answers")
            .insert(from, standing);
        self.settle();
    }

    /// Fixes the floor once every voter to hear from has answered.
    fn settle(&self) {
        if self.floor().is_some() {
            return;
        }
        let answers = self.answers.lock().expect("amnesia answers");
        let Some(f) = floor_of(self.id, &self.spec, &answers) else {
            return;
        };
        let from: Vec<NodeId> = answers.keys().copied().collect();
        drop(answers);
        if self.unsure() {
            eprintln!(
                "node {}: every other voter answered ({from:?}): the greatest vote is {}{}; \
                 appends from a lower vote are refused until caught up (C12)",
                self.id,
                f.vote,
                if f.brand_new {
                    ", and no log goes beyond the bootstrap entry (a brand-new cluster)"
                } else {
                    ""
                }
            );
        }
        self.floor.send_replace(Some(f));
    }

    /// The appends and snapshots rule (hook in the raft server): why an append or snapshot of
    /// `vote` is refused, or `None` when it is taken.
    pub fn refuses_append(&self, vote: &Vote) -> Option<String> {
        if !self.unsure() {
            return None;
        }
        let floor = self.floor();
        if admits_append(floor, vote) {
            return None;
        }
        Some(match floor {
            None => format!(
                "node {} lost or never had its data and has not heard from every other voter \
                 yet: it takes no append (C12)",
                self.id
            ),
            Some(f) => format!(
                "node {} lost or never had its data: it takes no append of {vote}, below the \
                 greatest vote another voter holds ({}) (C12)",
                self.id, f.vote
            ),
        })
    }

    /// The vote decision (hook in the raft server): true when this node must refuse `req`.
    pub fn refuses_vote(&self, req: &VoteRequest<NodeId>) -> bool {
        if !self.unsure() || grants_vote(self.floor(), &req.vote) {
            return false;
        }
        let term = req.vote.leader_id().term;
        if self.logged_term.swap(term, Ordering::Relaxed) != term {
            eprintln!(
                "node {}: refusing vote for node {} (term {term}): this node lost or never had its data and has not caught up yet (C12)",
                self.id,
                req.vote.leader_id().voted_for().unwrap_or_default()
            );
        }
        true
    }

    /// An AppendEntries handled by Raft (hook in the raft server, after [`Amnesia::refuses_append`]
    /// let it through): notes when it brings this node up to the leader's commit index
    /// ([`caught_up_by`]).
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
        if let Some(why) = caught_up_by(&fact, self.floor()) {
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
        if let Some(why) = caught_up_by(&fact, self.floor()) {
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
        // Wakes `watch`, which lifts the campaign hold: catching up changes neither the vote
        // nor the floor it otherwise waits on (found by the nemesis: a node caught up after a
        // disk loss never campaigned again, and was the only one that could win).
        self.floor.send_modify(|_| {});
    }

    /// Whether this node may campaign (or initialise a cluster) with its own vote `own`.
    pub fn may_campaign(&self, own: &Vote) -> bool {
        !self.unsure() || may_campaign(self.floor(), own, self.id)
    }

    /// Holds elections ([`Hold::CatchingUp`]) while this node may not campaign.
    pub fn sync_elect(&self, elect: &Elections, own: &Vote) {
        let hold = !self.may_campaign(own);
        if elect.held(Hold::CatchingUp) != hold {
            elect.hold(Hold::CatchingUp, hold);
            if hold {
                eprintln!("node {}: not campaigning until caught up (C12)", self.id);
            }
        }
    }
}

/// Follows the node's vote and floor until it is sure: elections follow
/// [`Amnesia::sync_elect`].
pub async fn watch(raft: Raft, amnesia: Arc<Amnesia>, elect: Arc<Elections>) {
    let mut rx = raft.server_metrics();
    let mut floor = amnesia.floor_changes();
    loop {
        let own = rx.borrow_and_update().vote;
        // Read before the hold is synced: caught up in between, the sync already lifts it.
        let sure = !amnesia.unsure();
        amnesia.sync_elect(&elect, &own);
        if sure {
            return;
        }
        tokio::select! {
            r = rx.changed() => if r.is_err() { return },
            r = floor.changed() => if r.is_err() { return },
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

    fn append(vote: Vote, matched: Option<LogId>, leader_commit: Option<LogId>) -> Fact {
        Fact::Append {
            vote,
            matched,
            leader_commit,
        }
    }

    /// Each case's verdict by the rule apart from the floor (a floor below every vote here;
    /// the floor's own part is `below_the_floor_never_catches_up`).
    fn check_caught_up(cases: Vec<(&str, Fact, bool)>) {
        let floor = Some(Floor {
            vote: Vote::default(),
            brand_new: false,
        });
        for (what, fact, want) in cases {
            assert_eq!(
                caught_up_by(&fact, floor).is_some(),
                want,
                "{what}: {fact:?}"
            );
        }
    }

    /// C12 amended, as a table (appends, I): (what, the fact, caught up?). Node F is 2; it
    /// led in term 3; the current leader L is 1, in term 5.
    #[test]
    fn caught_up_means_caught_up() {
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
        ];
        check_caught_up(cases);
    }

    /// C12 amended, as a table (appends, II): (what, the fact, caught up?). Node F is 2; it
    /// led in term 3; the current leader L is 1, in term 5.
    #[test]
    fn caught_up_means_caught_up_by_the_leaders_term() {
        let cases: Vec<(&str, Fact, bool)> = vec![
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
        ];
        check_caught_up(cases);
    }

    /// C12 amended, as a table (votes saved): (what, the fact, caught up?). Node F is 2; it
    /// led in term 3; the current leader L is 1, in term 5.
    #[test]
    fn caught_up_by_its_own_vote() {
        let cases: Vec<(&str, Fact, bool)> = vec![
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
        check_caught_up(cases);
    }

    /// C12 fifth round: an append of a vote below the floor, or before the floor is known,
    /// never catches up, however it matches.
    #[test]
    fn below_the_floor_never_catches_up() {
        let good = append(
            committed(5, 1),
            Some(log_id(5, 1, 57)),
            Some(log_id(5, 1, 57)),
        );
        assert!(caught_up_by(&good, None).is_none(), "floor unknown");
        let above = Some(Floor {
            vote: committed(6, 3),
            brand_new: false,
        });
        assert!(caught_up_by(&good, above).is_none(), "below the floor");
    }

    fn standing(vote: Vote, last: Option<LogId>, configs: &[&[NodeId]]) -> Standing {
        Standing {
            vote,
            last_log_index: last.map(|l| l.index),
            membership: (!configs.is_empty()).then(|| log_id(0, 0, 0)),
            configs: configs.iter().map(|c| c.to_vec()).collect(),
            nodes: Vec::new(),
        }
    }

    /// C12 fifth round: whom a blank node must hear, and the floor once it has, as a table.
    /// Node 3 is the blank one; `--cluster` names 1, 2, 3.
    #[test]
    fn the_floor_needs_every_other_voter() {
        let spec: BTreeSet<NodeId> = [1, 2, 3].into();
        let m: &[&[NodeId]] = &[&[1, 2, 3]];
        let a = |v, l| standing(v, l, m);
        type Answers = Vec<(NodeId, Standing)>;
        let cases: Vec<(&str, Answers, Option<Floor>)> = vec![
            ("nobody answered", vec![], None),
            (
                "issue 35 defect 1: only the deposed primary P answered (N is cut off)",
                vec![(1, a(committed(4, 1), Some(log_id(4, 1, 30))))],
                None,
            ),
            (
                "both others: the floor is N's newer vote, not P's",
                vec![
                    (1, a(committed(4, 1), Some(log_id(4, 1, 30)))),
                    (2, a(committed(5, 2), Some(log_id(5, 2, 31)))),
                ],
                Some(Floor {
                    vote: committed(5, 2),
                    brand_new: false,
                }),
            ),
            (
                "a candidate's uncommitted vote of a higher term is the floor",
                vec![
                    (1, a(committed(4, 1), Some(log_id(4, 1, 30)))),
                    (2, a(Vote::new(5, 2), Some(log_id(4, 1, 30)))),
                ],
                Some(Floor {
                    vote: Vote::new(5, 2),
                    brand_new: false,
                }),
            ),
            (
                "a brand-new cluster: logs at most the bootstrap entry",
                vec![
                    (1, a(Vote::new(1, 1), Some(log_id(0, 0, 0)))),
                    (2, standing(Vote::default(), None, &[])),
                ],
                Some(Floor {
                    vote: Vote::new(1, 1),
                    brand_new: true,
                }),
            ),
            (
                "a membership that names node 4: it must answer too",
                vec![
                    (
                        1,
                        Standing {
                            membership: Some(log_id(4, 1, 8)),
                            ..standing(committed(4, 1), Some(log_id(4, 1, 9)), &[&[1, 2, 3, 4]])
                        },
                    ),
                    (2, a(committed(4, 1), Some(log_id(4, 1, 9)))),
                ],
                None,
            ),
        ];
        for (what, answers, want) in cases {
            let answers: BTreeMap<NodeId, Standing> = answers.into_iter().collect();
            assert_eq!(floor_of(3, &spec, &answers), want, "{what}");
        }
        // A single-node cluster has nobody to ask: known at once, brand new.
        assert_eq!(
            floor_of(1, &[1].into(), &BTreeMap::new()),
            Some(Floor {
                vote: Vote::default(),
                brand_new: true
            })
        );
    }

    /// C12 fifth round: what a node that has not caught up takes, grants and starts, as a table.
    #[test]
    fn appends_votes_and_campaigns_below_and_above_the_floor() {
        let floor = |vote, brand_new| Some(Floor { vote, brand_new });
        let running = floor(committed(5, 2), false);
        let fresh = floor(Vote::new(1, 1), true);
        // Appends: only from a vote at or above the floor, once it is known.
        assert!(!admits_append(None, &committed(9, 1)), "floor unknown");
        assert!(!admits_append(running, &committed(4, 1)), "the deposed P");
        assert!(
            !admits_append(running, &committed(5, 1)),
            "a lower leader id, same term"
        );
        assert!(
            admits_append(running, &committed(5, 2)),
            "the leader itself"
        );
        assert!(admits_append(running, &committed(6, 1)), "a later leader");
        assert!(
            !admits_append(floor(committed(5, 2), false), &Vote::new(5, 2)),
            "uncommitted"
        );
        // Votes: none in a running cluster; in a brand-new one, only at or above the floor
        // (node 1's candidacy in term 1, the greatest vote reported).
        assert!(!grants_vote(None, &Vote::new(9, 1)));
        assert!(!grants_vote(running, &Vote::new(9, 1)), "not brand new");
        assert!(
            grants_vote(fresh, &Vote::new(1, 1)),
            "the same candidate, the same vote"
        );
        assert!(
            grants_vote(fresh, &Vote::new(1, 2)),
            "a greater one of that term"
        );
        assert!(
            !grants_vote(fresh, &Vote::new(1, 0)),
            "a lesser one: maybe voted above it"
        );
        assert!(grants_vote(fresh, &Vote::new(2, 1)));
        // Campaigns: the vote it would campaign with (next term, itself) at or above the floor.
        assert!(!may_campaign(None, &Vote::new(3, 3), 3));
        assert!(!may_campaign(running, &Vote::new(7, 3), 3), "not brand new");
        assert!(
            may_campaign(fresh, &Vote::default(), 1),
            "(1,1): the floor itself"
        );
        assert!(
            may_campaign(fresh, &Vote::default(), 3),
            "(1,3) above (1,1)"
        );
        let by_3 = floor(Vote::new(1, 3), true);
        assert!(
            !may_campaign(by_3, &Vote::default(), 2),
            "(1,2) below node 3's (1,3)"
        );
        assert!(may_campaign(by_3, &Vote::new(1, 2), 2), "(2,2)");
    }
}
