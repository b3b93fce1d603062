//! C17: membership changes online — `member add` and `member remove` (admin only), on
//! openraft's membership change (joint consensus).
//!
//! Add: the new node joins as a learner and the call waits until it holds the leader's log
//! as of then (its replication matched the leader's last index: not openraft's "blocking"
//! `add_learner` alone, which accepts a lag of 5000 entries), then it is made a voter. A node started with
//! `run --join` waits, uninitialised, for exactly this. Remove: a voter is taken out of the
//! voters and the membership; the primary asked to remove itself hands leadership over first
//! (C14) and answers STANDBY naming the new primary, where the client's loop re-sends it.
//!
//! Both are exactly-once for the caller: adding a voter already there with the same addresses
//! answers 0; a removal first commits a `MemberRemoval` entry under the request's ids (the
//! exactly-once table remembers it), so a re-send of a removal that did commit answers 0,
//! and only a node that is not a member for a request never seen is ENOENT.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};
use openraft::ChangeMembers;

use crate::base::ids::{CtrlNode, NodeId};
use crate::node::ctx::{Ctx, NotServed, Write};

/// Longest `member add` waits for the learner to catch up and the change to commit.
pub const ADD_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest `member remove` waits for the change to commit.
pub const REMOVE_TIMEOUT: Duration = Duration::from_secs(10);
/// After handing leadership over for its own removal, a node that is still a voter this long
/// after (the caller gave up) takes part in elections again.
const RESUME_AFTER: Duration = Duration::from_secs(5);

/// The current membership: every node (voters and learners) and the voters.
fn current(ctx: &Ctx) -> (BTreeMap<NodeId, CtrlNode>, BTreeSet<NodeId>) {
    let m = ctx.raft.metrics().borrow().membership_config.clone();
    let nodes = m
        .membership()
        .nodes()
        .map(|(i, n)| (*i, n.clone()))
        .collect();
    let voters = m.membership().voter_ids().collect();
    (nodes, voters)
}

/// Why a membership change failed: an errno (negative) or a node's refusal (C2: it leads no
/// more, the outcome is unknown), and the reason the primary logs and the operator reads.
#[derive(Debug)]
pub struct Fail {
    pub refusal: Failure,
    pub why: String,
}

/// A failed request's answer, in the node's words (the client port says it as a status).
#[derive(Debug)]
pub enum Failure {
    /// A negative errno; its reason travels to the operator's command (issue 36).
    Errno(i32),
    /// Not ready (the Raft core failed, a handover did not complete): try again; the reason
    /// travels too.
    NotReady,
    /// A refusal with where the primary is (issue 36: its reason does not travel, the client
    /// follows it).
    NotServed(NotServed),
}

fn fail(refusal: Failure, why: impl Into<String>) -> Fail {
    Fail {
        refusal,
        why: why.into(),
    }
}

fn errno(e: i32, why: impl Into<String>) -> Fail {
    fail(Failure::Errno(e), why)
}

/// The members and voters after a change, for the primary's log line.
pub fn summary(ctx: &Ctx) -> String {
    let (nodes, voters) = current(ctx);
    format!(
        "voters {voters:?}, members {:?}",
        nodes.keys().collect::<Vec<_>>()
    )
}

fn raft_fail(ctx: &Ctx, e: RaftError<NodeId, ClientWriteError<NodeId, CtrlNode>>) -> Fail {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => fail(
            Failure::NotServed(ctx.not_primary(false, f.leader_id)),
            "no longer the leader",
        ),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(c)) => {
            let status = match c {
                // Another change is still being committed: try again shortly.
                ChangeMembershipError::InProgress(_) => -libc::EBUSY,
                ChangeMembershipError::LearnerNotFound(_) => -libc::ENOENT,
                _ => -libc::EINVAL,
            };
            errno(status, c.to_string())
        }
        RaftError::Fatal(f) => fail(Failure::NotReady, f.to_string()),
    }
}

fn timed_out(ctx: &Ctx, w: &Write<'_>, after: Duration) -> Fail {
    fail(
        Failure::NotServed(ctx.outcome_unknown(w.seq, w.name)),
        format!(
            "not committed within {} s: outcome unknown",
            after.as_secs()
        ),
    )
}

/// `memberAdd` on the serving primary (authorised already): `Ok` once node `id` is a voter
/// (or already was, with the same addresses).
pub async fn add(
    ctx: &Ctx,
    w: &Write<'_>,
    id: NodeId,
    client: &str,
    raft: &str,
) -> Result<(), Fail> {
    let einval = |why: String| Err(errno(-libc::EINVAL, why));
    if id == 0 {
        return einval("id 0 is not a node id".into());
    }
    if let Err(e) = crate::base::config::check_addr(client) {
        return einval(format!("client address {client:?}: {e}"));
    }
    if let Err(e) = crate::base::config::check_addr(raft) {
        return einval(format!("raft address {raft:?}: {e}"));
    }
    let node = CtrlNode {
        client: client.to_string(),
        raft: raft.to_string(),
    };
    let (nodes, voters) = current(ctx);
    match nodes.get(&id) {
        Some(n) if *n != node => {
            return Err(errno(
                -libc::EEXIST,
                format!("node {id} is already a member at {n}"),
            ))
        }
        Some(_) if voters.contains(&id) => return Ok(()),
        _ => {}
    }
    if let Some((other, n)) = nodes
        .iter()
        .find(|(i, n)| **i != id && (n.client == node.client || n.raft == node.raft))
    {
        return Err(errno(
            -libc::EEXIST,
            format!("node {other} already uses an address of {node} ({n})"),
        ));
    }
    // Issue 26: a node not yet a member is asked who it is first: it must answer as node `id`,
    // blank (a `--join` node), of no other cluster — else nothing is changed.
    if !nodes.contains_key(&id) {
        identify(ctx, id, raft).await?;
    }
    let deadline = tokio::time::Instant::now() + ADD_TIMEOUT;
    // A learner first, caught up with the leader's log before it counts for any quorum. Not
    // openraft's blocking wait: ours below, which takes the learner out again on failure.
    match tokio::time::timeout_at(deadline, ctx.raft.add_learner(id, node, false)).await {
        Err(_) => return Err(timed_out(ctx, w, ADD_TIMEOUT)),
        Ok(Err(e)) => return Err(raft_fail(ctx, e)),
        Ok(Ok(_)) => {}
    }
    match caught_up_voter(ctx, w, id, deadline).await {
        Ok(()) => Ok(()),
        Err(fail) => {
            // Issue 26: never a learner left behind by a failed add.
            take_out(ctx, id).await;
            Err(fail)
        }
    }
}

/// Issue 26: how long the node to add has to say who it is.
pub const IDENTIFY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a new learner has to acknowledge its first append.
pub const FIRST_ACK: Duration = Duration::from_secs(10);

/// Issue 26: asks the node at `raft` who it is; refuses (nothing changed) unless it is node
/// `id`, blank, of no other cluster.
async fn identify(ctx: &Ctx, id: NodeId, raft: &str) -> Result<(), Fail> {
    use crate::raft::frame::RpcReply;
    let refuse =
        |status: i32, why: String| Err(errno(status, format!("node {id} at {raft}: {why}")));
    match ctx.forwarder.identify(id, raft, IDENTIFY_TIMEOUT).await {
        // Issue 36: the cause, named (the status says its kind; the words travel in the
        // reply's detail to the operator's `member add`).
        Err(cause) => refuse(cause.status(), format!("its raft port: {cause}")),
        Ok(RpcReply::Identity { id: other, .. }) if other != id => {
            refuse(-libc::EINVAL, format!("it is node {other}, not node {id}"))
        }
        Ok(RpcReply::Identity {
            cluster: Some(c), ..
        }) if Some(c) != ctx.identity.tag().map(|t| t.id) => refuse(
            -libc::EINVAL,
            format!(
                "it belongs to another cluster ({}): start it blank with --join",
                c.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ),
        ),
        Ok(RpcReply::Identity {
            initialised: true, ..
        }) => refuse(
            -libc::EINVAL,
            "it already holds a membership: start it with an empty data directory and --join"
                .into(),
        ),
        Ok(RpcReply::Identity { .. }) => Ok(()),
        Ok(_) => refuse(-libc::EINVAL, "an answer that is not who it is".into()),
    }
}

/// Issue 26: takes learner `id` out again after a failed add (bounded; logged).
async fn take_out(ctx: &Ctx, id: NodeId) {
    let (nodes, voters) = current(ctx);
    if !nodes.contains_key(&id) || voters.contains(&id) {
        return;
    }
    let change = ChangeMembers::RemoveNodes(BTreeSet::from([id]));
    let r = tokio::time::timeout(REMOVE_TIMEOUT, ctx.raft.change_membership(change, false)).await;
    eprintln!(
        "node {}: member add {id} failed: the learner {}",
        ctx.id,
        match r {
            Ok(Ok(_)) => "was taken out again".to_string(),
            Ok(Err(e)) => format!("could not be taken out: {e}"),
            Err(_) => "could not be taken out in time".to_string(),
        }
    );
}

/// The learner `id` holds the leader's log, then is made a voter, by `deadline`.
async fn caught_up_voter(
    ctx: &Ctx,
    w: &Write<'_>,
    id: NodeId,
    deadline: tokio::time::Instant,
) -> Result<(), Fail> {
    // Issue 26: a learner that acknowledges nothing within FIRST_ACK fails the add at once.
    let first = ctx
        .raft
        .wait(Some(FIRST_ACK))
        .metrics(
            |m| match &m.replication {
                None => true,
                Some(r) => r.get(&id).cloned().flatten().is_some(),
            },
            "the learner acknowledged an append",
        )
        .await;
    if first.is_err() {
        return Err(errno(
            -libc::ETIMEDOUT,
            format!(
                "node {id} acknowledged no append within {} s",
                FIRST_ACK.as_secs()
            ),
        ));
    }
    // openraft's "blocking" add_learner returns once the learner is within
    // `replication_lag_threshold` (5000) entries of the leader: at once in a young cluster,
    // before the learner holds anything. A voter that holds nothing refuses every vote (C12)
    // and so, as one of the quorum a new leader needs, could block elections for good. So the
    // learner becomes a voter only once it holds the leader's log as of now (every entry
    // committed so far): its next append brings it to the leader's commit index (C12).
    let target = ctx.raft.metrics().borrow().last_log_index;
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let holds = ctx
        .raft
        .wait(Some(left))
        .metrics(
            |m| match &m.replication {
                // No longer the leader: the change below is refused with its hint.
                None => true,
                Some(r) => r.get(&id).cloned().flatten().map(|l| l.index) >= target,
            },
            "the learner holds the leader's log",
        )
        .await;
    if holds.is_err() {
        return Err(timed_out(ctx, w, ADD_TIMEOUT));
    }
    let change = ChangeMembers::AddVoterIds(BTreeSet::from([id]));
    match tokio::time::timeout_at(deadline, ctx.raft.change_membership(change, false)).await {
        Err(_) => Err(timed_out(ctx, w, ADD_TIMEOUT)),
        Ok(Err(e)) => Err(raft_fail(ctx, e)),
        Ok(Ok(_)) => Ok(()),
    }
}

/// `memberRemove` on the serving primary (authorised already): `Ok` once node `id` is no
/// member (or a re-send of this removal finds it done).
pub async fn remove(ctx: &Ctx, w: &Write<'_>, id: NodeId) -> Result<(), Fail> {
    let (nodes, voters) = current(ctx);
    if !nodes.contains_key(&id) {
        let seen = {
            let a = ctx.applied.read().expect("state lock");
            a.state.seen(&w.client_id, w.request_id)
        };
        if seen {
            // A re-send of this very removal, whose first send committed (F16).
            return Ok(());
        }
        return Err(errno(-libc::ENOENT, format!("node {id} is not a member")));
    }
    if voters.contains(&id) && voters.len() == 1 {
        return Err(errno(-libc::EINVAL, format!("node {id} is the last voter")));
    }
    if id == ctx.id {
        return Err(hand_over_first(ctx).await);
    }
    // The intent first, under the request's ids: once the removal below commits, a re-send
    // finds it in the exactly-once table.
    if let Err(n) = ctx
        .write(w, crate::sm::state::Cmd::MemberRemoval { id })
        .await
    {
        return Err(fail(
            Failure::NotServed(n),
            "the removal's intent did not commit",
        ));
    }
    let change = if voters.contains(&id) {
        ChangeMembers::RemoveVoters(BTreeSet::from([id]))
    } else {
        ChangeMembers::RemoveNodes(BTreeSet::from([id]))
    };
    match tokio::time::timeout(REMOVE_TIMEOUT, ctx.raft.change_membership(change, false)).await {
        Err(_) => Err(timed_out(ctx, w, REMOVE_TIMEOUT)),
        Ok(Err(e)) => Err(raft_fail(ctx, e)),
        Ok(Ok(_)) => Ok(()),
    }
}

/// The primary asked to remove itself: hands leadership over to the most up-to-date standby
/// (C14) and answers STANDBY naming it, so the client re-sends the removal there. Nothing was
/// applied yet, so the answer is retryable.
async fn hand_over_first(ctx: &Ctx) -> Fail {
    eprintln!(
        "node {}: asked to remove itself: handing leadership over first",
        ctx.id
    );
    crate::raft::handover::hand_over(&ctx.raft, &ctx.ready, &ctx.elect, ctx.id, &ctx.liveness())
        .await;
    let leader = ctx.raft.metrics().borrow().current_leader;
    if leader.is_some_and(|l| l != ctx.id) {
        // Elections stay off here (handover keeps the old leader from winning again) until
        // this node is removed, or for a while if the caller never comes back.
        let raft = ctx.raft.clone();
        let ready = ctx.ready.clone();
        let elect = ctx.elect.clone();
        let id = ctx.id;
        tokio::spawn(async move {
            tokio::time::sleep(RESUME_AFTER).await;
            let m = raft.metrics().borrow().membership_config.clone();
            if m.membership().voter_ids().any(|v| v == id) {
                eprintln!(
                    "node {id}: still a voter after handing over for removal: electable again"
                );
                ready.resume();
                elect.hold(crate::raft::elect::Hold::HandedOver, false);
            }
        });
        return fail(
            Failure::NotServed(ctx.not_primary(false, leader)),
            format!(
                "handed over to node {}: re-send there",
                leader.unwrap_or_default()
            ),
        );
    }
    ctx.ready.resume();
    ctx.elect.hold(crate::raft::elect::Hold::HandedOver, false);
    fail(
        Failure::NotReady,
        "the handover did not complete: try again",
    )
}
