//! The rules a node decides by, each beside the code that implements it. Pure functions of one
//! node's state (and the options); `actions.rs` applies them.

use crate::options::{Options, C12};
use crate::state::{has, Id, LogId, Node, Role, Vote};

/// Whether `node` hears a leader: it accepted an append of a committed vote within its
/// refusal and does not lead itself (`raft/elect.rs::Elections::hears_leader`).
pub fn hears_leader(o: &Options, node: &Node, me: Id) -> bool {
    node.vote.committed
        && !matches!(node.role, Role::Leader(_))
        && node.utime <= o.timing(me).refusal
}

/// openraft's leader lease (`engine/engine_impl.rs::handle_vote_req`): a committed vote
/// modified within the refusal refuses every vote request.
fn in_lease(o: &Options, node: &Node, me: Id) -> bool {
    node.vote.committed && node.utime <= o.timing(me).refusal
}

/// C11: a restarted node refuses every vote for its refusal after boot
/// (`raft/lease.rs::VoteGuard::refuses`).
pub fn guard_refuses(o: &Options, node: &Node, me: Id) -> bool {
    node.boot < o.timing(me).refusal
}

/// C12 fifth round: what a blank node learnt from the other voters' standing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Floor {
    /// The greatest vote among the answers (openraft's vote order).
    pub vote: Vote,
    /// No answer showed a log beyond the bootstrap entry.
    pub brand_new: bool,
}

/// C12 fifth round (`raft/standing.rs`): the floor, once every other voter has answered (the
/// model's membership: the configured voters; the membership check names no blank voter).
pub fn floor(o: &Options, node: &Node, me: Id) -> Option<Floor> {
    let others = o.initial_voters() & !(1 << me);
    (node.answered & others == others).then_some(Floor {
        vote: node.answers_max,
        brand_new: !node.answers_beyond,
    })
}

/// C12: whether the marker makes `node` refuse a vote (and a pre-vote) for `vote` with last
/// log id `last` (`raft/amnesia.rs::refuses_vote`; fifth: `amnesia.rs::grants_vote`).
pub fn c12_refuses_vote(o: &Options, node: &Node, me: Id, vote: Vote, last: Option<LogId>) -> bool {
    if !node.marker {
        return false;
    }
    match o.c12 {
        C12::Issue25 | C12::Today => last.is_some_and(|l| l.index > 0),
        // At or above the floor only: the node's votes stay monotonic across the loss.
        C12::Fifth => !floor(o, node, me).is_some_and(|f| f.brand_new && vote >= f.vote),
    }
}

/// C12 fifth round: whether `node` admits an append (or snapshot) of `vote` at all
/// (`raft/amnesia.rs::admits_append`): not while the floor is unknown, not below it.
pub fn c12_admits_append(o: &Options, node: &Node, me: Id, vote: Vote) -> bool {
    !node.marker || o.c12 != C12::Fifth || floor(o, node, me).is_some_and(|f| vote >= f.vote)
}

/// C12: whether `node` may campaign or initialise (`raft/amnesia.rs::sync_elect`, the
/// `Hold::CatchingUp`; fifth: `amnesia.rs::may_campaign`).
pub fn c12_may_campaign(o: &Options, node: &Node, me: Id) -> bool {
    if !node.marker {
        return true;
    }
    match o.c12 {
        C12::Issue25 | C12::Today => node.log.len() <= 1,
        // The vote it would campaign with (the next term, itself) at or above the floor.
        C12::Fifth => {
            let next = Vote::new(node.vote.leader.term + 1, me);
            floor(o, node, me).is_some_and(|f| f.brand_new && next >= f.vote)
        }
    }
}

/// C12 amended (`raft/amnesia.rs::caught_up_by`, `Fact::Append`): an append of committed
/// `vote` matched the log up to `matched`, the request's commit index was `leader_commit`.
pub fn caught_up_by_append(vote: Vote, matched: Option<LogId>, leader_commit: Option<u8>) -> bool {
    matched.is_some_and(|m| {
        vote.committed
            && m.leader.term == vote.leader.term
            && leader_commit.map_or(true, |c| m.index >= c)
    })
}

/// C12, after `node` accepted an append of `vote` (`raft/amnesia.rs::Amnesia::append`):
/// whether the marker goes.
pub fn c12_caught_up_after_append(
    o: &Options,
    node: &Node,
    me: Id,
    vote: Vote,
    matched: Option<LogId>,
    leader_commit: Option<u8>,
) -> bool {
    match o.c12 {
        // The old rule: the last entry it holds was written by itself as leader.
        C12::Issue25 => node.log.last().is_some_and(|e| e.leader.node == me),
        C12::Today => caught_up_by_append(vote, matched, leader_commit),
        C12::Fifth => {
            floor(o, node, me).is_some_and(|f| vote >= f.vote)
                && caught_up_by_append(vote, matched, leader_commit)
        }
    }
}

/// A vote request, answered (`ports/peer.rs::answer_vote`: C11's guard, C12, then openraft's
/// `handle_vote_req`): whether it is granted. Granting (the vote saved) is `actions.rs`'s.
pub fn grants_vote(o: &Options, node: &Node, me: Id, vote: Vote, last: Option<LogId>) -> bool {
    if guard_refuses(o, node, me) || c12_refuses_vote(o, node, me, vote, last) {
        return false;
    }
    !in_lease(o, node, me) && last >= node.last_log_id() && vote >= node.vote
}

/// A pre-vote for `term` of `candidate` with last log id `last`
/// (`ports/peer.rs::answer_pre_vote`, `raft/elect.rs::Elections::would_vote`): C11's guard,
/// C12, not leading (unless handed over, C14), not hearing a leader, the log at least as up to
/// date.
pub fn would_vote(
    o: &Options,
    node: &Node,
    me: Id,
    term: u8,
    cand: Id,
    last: Option<LogId>,
) -> bool {
    if guard_refuses(o, node, me) || c12_refuses_vote(o, node, me, Vote::new(term, cand), last) {
        return false;
    }
    let leads = node.leading().is_some_and(|l| !l.handed);
    !leads && !hears_leader(o, node, me) && last >= node.last_log_id()
}

/// Whether the voters `yes` are a quorum of `node`'s effective membership
/// (`raft/lease.rs::joint_quorum`).
pub fn quorum(node: &Node, yes: u8) -> bool {
    node.config()
        .is_some_and(|(_, c)| c.quorum(|id| has(yes, id)))
}
