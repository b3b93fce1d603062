//! C14 on demand (issue 26): `leaderTransfer`, what `xce-controller leader transfer [--to N]`
//! asks of the primary. The primary checks the target first and refuses at once one that is
//! not a member (ENOENT), not a voter (EINVAL), or has not answered its appends recently
//! (EHOSTDOWN: stopped, dead, cut off); one that does not hold the log committed so far gets
//! a second to catch up, else EAGAIN. Then the handover SIGTERM does (`raft/handover.rs`):
//! nothing more proposed, a handover entry naming the target, the target campaigns on
//! applying it. Unlike SIGTERM the old primary keeps running: once the new leader is known (or
//! the handover failed) it proposes, serves and may campaign again.
//!
//! Exactly once for the caller without a table: `from` names the primary the caller saw, so a
//! re-send that reaches another node (the old primary closes the connections it served as
//! primary) answers 0; a target already primary answers 0.

use std::time::Duration;

use crate::base::ids::NodeId;
use crate::node::ctx::Ctx;

/// Longest a named target may take to hold the log committed when the transfer was asked.
pub const CATCH_UP: Duration = Duration::from_secs(1);

/// What a target check found: `Ok(target)`, or the refusal's status and reason.
pub fn check_target(
    me: NodeId,
    to: NodeId,
    members: &[NodeId],
    voters: &[NodeId],
    heard: impl Fn(NodeId) -> bool,
    window: Duration,
) -> Result<NodeId, (i32, String)> {
    if !members.contains(&to) {
        return Err((-libc::ENOENT, format!("node {to} is not a member")));
    }
    if !voters.contains(&to) {
        return Err((
            -libc::EINVAL,
            format!("node {to} is a learner, not a voter"),
        ));
    }
    if to != me && !heard(to) {
        return Err((
            -libc::EHOSTDOWN,
            format!(
                "node {to} has not answered the primary within {} ms (stopped, down or cut off)",
                window.as_millis()
            ),
        ));
    }
    Ok(to)
}

/// `leaderTransfer` on the serving primary (authorised already): to node `to` (0: the
/// most caught-up live voter), asked of primary `from` (0: whoever leads). What it did, or the
/// refusal's status and reason; the caller logs either.
pub async fn transfer(ctx: &Ctx, to: NodeId, from: NodeId) -> Result<String, (i32, String)> {
    if from != 0 && from != ctx.id {
        return Ok(format!("node {from} leads no more: done already"));
    }
    if to == ctx.id {
        return Ok("this node is the primary already".into());
    }
    let m = ctx.raft.metrics().borrow().clone();
    let mem = m.membership_config.membership();
    let voters: Vec<NodeId> = mem.voter_ids().collect();
    let live = ctx.liveness();
    let target = if to == 0 {
        let others: Vec<NodeId> = voters.iter().copied().filter(|&v| v != ctx.id).collect();
        let matched = m.replication.clone().unwrap_or_default();
        crate::raft::handover::pick(
            &others,
            |v| matched.get(&v).copied().flatten().map(|l| l.index),
            |v| live.heard(&m, v),
        )
        .ok_or_else(|| {
            (
                -libc::EHOSTDOWN,
                format!(
                    "no other voter answered within {} ms",
                    live.window.as_millis()
                ),
            )
        })?
    } else {
        let members: Vec<NodeId> = mem.nodes().map(|(&id, _)| id).collect();
        check_target(
            ctx.id,
            to,
            &members,
            &voters,
            |v| live.heard(&m, v),
            live.window,
        )?
    };
    // Caught up: it holds everything applied here when asked (a second at most).
    caught_up(ctx, target, m.last_applied.map_or(0, |l| l.index)).await?;
    // C14: nothing more proposed (the handover entry is the last of this term), then the
    // handover; whatever came of it, this node proposes, serves and may campaign again.
    ctx.proposer.close();
    let others: Vec<NodeId> = voters
        .iter()
        .copied()
        .filter(|&v| v != ctx.id && v != target && live.heard(&m, v))
        .collect();
    let new = crate::raft::handover::hand_over_to(
        &ctx.raft, &ctx.ready, &ctx.elect, ctx.id, target, &others,
    )
    .await;
    ctx.proposer.reopen();
    ctx.elect.hold(crate::raft::elect::Hold::HandedOver, false);
    ctx.ready.resume();
    match new {
        Some(l) if l == target => Ok(format!("node {l} is the primary now")),
        Some(l) => Ok(format!(
            "node {l} is the primary now (node {target} was named)"
        )),
        // Terminal for the caller's library (NOT_READY would be re-sent: another handover).
        None => Err((
            -libc::ETIMEDOUT,
            format!("node {target} did not take over: this node serves on"),
        )),
    }
}

/// Waits up to [`CATCH_UP`] for `target` to hold the log up to index `want`; else EAGAIN,
/// naming the lag (issue 36: the operator knows what to wait for).
async fn caught_up(ctx: &Ctx, target: NodeId, want: u64) -> Result<(), (i32, String)> {
    let mut every_turn = ctx.raft.metrics();
    let caught_up = tokio::time::timeout(
        CATCH_UP,
        every_turn.wait_for(|m| {
            m.replication
                .as_ref()
                .and_then(|r| r.get(&target).copied().flatten())
                .is_some_and(|l| l.index >= want)
        }),
    )
    .await
    .is_ok_and(|r| r.is_ok());
    if caught_up {
        return Ok(());
    }
    let held = ctx
        .raft
        .metrics()
        .borrow()
        .replication
        .as_ref()
        .and_then(|r| r.get(&target).copied().flatten())
        .map(|l| l.index);
    Err((
        -libc::EAGAIN,
        format!(
            "node {target} is not caught up: it holds the log up to index {}, the primary \
             had applied {want} ({} entries behind) and it did not catch up within {} ms; \
             try again once `xce-controller member list` shows its lag near 0",
            held.map_or("none".to_string(), |i| i.to_string()),
            want.saturating_sub(held.unwrap_or(0)),
            CATCH_UP.as_millis()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_a_live_voter() {
        let w = Duration::from_millis(240);
        let members = [1, 2, 3, 4];
        let voters = [1, 2, 3];
        let heard = |v: NodeId| v != 3;
        let cases = [
            ("a live voter", 2, Ok(2)),
            ("not a member", 9, Err(-libc::ENOENT)),
            ("a learner", 4, Err(-libc::EINVAL)),
            ("a voter not heard", 3, Err(-libc::EHOSTDOWN)),
            ("the primary itself", 1, Ok(1)),
        ];
        for (what, to, want) in cases {
            let got = check_target(1, to, &members, &voters, heard, w).map_err(|e| e.0);
            assert_eq!(got, want, "{what}");
        }
    }
}
