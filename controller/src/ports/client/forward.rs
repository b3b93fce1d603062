//! C16 forwarding, on a standby: a client's request sent to the primary over the raft port
//! when the client asks (F28). The primary's side is `forwarded.rs`.

use std::time::Duration;

use openraft::ServerState;
use xce_proto::wire::{self, Op, OpKind, Reply, Request};

use super::command::outcome_unknown;
use crate::base::auth::Identity;
use crate::base::ids::NodeId;
use crate::node::ctx::{Ctx, COMMIT_TIMEOUT, STALE_LEADER_RECHECK};
use crate::raft::forward::Forwarded;

/// Longest a standby waits for a forwarded request, whatever the client allows (C16): a
/// write's commit wait on the primary, and a little for the way.
pub const MAX_FORWARD_WAIT: Duration =
    Duration::from_millis(COMMIT_TIMEOUT.as_millis() as u64 + 1000);

/// C16: whether a standby forwards `req` when its client asks (F28): reply-bearing reads and
/// writes that need no session (a session is bound to the connection it was joined on, which
/// the primary does not hold), not `join` itself; never a probe or a fire-and-forget op.
pub(super) fn forwardable(req: &Request) -> bool {
    let rule = req.op.rule();
    !req.no_reply
        && matches!(rule.kind, OpKind::Read | OpKind::Write)
        && rule.session.is_none()
        && !matches!(req.op, Op::Join(_))
}

/// C16: forwards `req` for `who` to the primary this standby follows, when the client
/// asked and forwarding may carry the caller's identity here; `None`: not forwarded (no
/// primary known, this node leads, the primary unreachable from here, or refused by it):
/// the caller answers as it would have. A sent write with no answer in time is
/// E_XCE_UNKNOWN (the client re-sends it with the same request id).
pub(super) async fn forward(ctx: &Ctx, req: &Request, who: &Identity) -> Option<Reply> {
    if req.forward_within_ms == 0 || !forwardable(req) {
        return None;
    }
    // Identities cross the raft port only where members are authenticated.
    if ctx.auth.on && !ctx.forwarder.authenticated() {
        return None;
    }
    if ctx.raft.metrics().borrow().state == ServerState::Leader {
        return None;
    }
    // Only to a leader whose appends arrive here (as `waitPrimary` vouches): a dead or
    // silent primary costs no connect attempt once the election timeout has passed.
    let leader = ctx.fresh_leader().await.filter(|&l| l != ctx.id)?;
    let node = ctx.node(leader)?;
    let within = Duration::from_millis(req.forward_within_ms as u64).min(MAX_FORWARD_WAIT);
    let mut frame = Vec::new();
    let fwd = Request {
        // Never forwarded again; the identity travels beside it, not as a token.
        forward_within_ms: 0,
        auth_token: String::new(),
        ..req.clone()
    };
    wire::encode_request(&fwd, &mut frame);
    // Only while this node still vouches for that leader: a primary that stops appending
    // (paused, cut off, deposed) ends the wait within the minimum election timeout, not
    // at the client's deadline (a sent write is then unknown, a read answered as before).
    let vouched = async {
        loop {
            tokio::time::sleep(STALE_LEADER_RECHECK).await;
            if ctx.fresh_leader().await != Some(leader) {
                return;
            }
        }
    };
    let send = send_to(ctx, leader, &node.raft, who, within, frame);
    let res = tokio::select! {
        r = send => r,
        () = vouched => Forwarded::Lost,
    };
    crate::base::counters::forward(match &res {
        Forwarded::Reply(_) => "replied",
        Forwarded::NotSent => "unreachable",
        Forwarded::Refused => "refused",
        Forwarded::Lost => "lost",
    });
    match res {
        Forwarded::Reply(bytes) => match wire::decode_reply(&bytes, &super::LIMITS) {
            Ok(r) if r.seq == req.seq => Some(r),
            _ => {
                crate::log_warn!(
                    "node {}: forwarded {} (seq {}): the primary's reply is unusable",
                    ctx.id,
                    req.op.name(),
                    req.seq
                );
                forward_lost(ctx, req)
            }
        },
        Forwarded::NotSent | Forwarded::Refused => None,
        Forwarded::Lost => forward_lost(ctx, req),
    }
}

/// A forwarded request that left without an answer: a write's outcome is unknown.
fn forward_lost(ctx: &Ctx, req: &Request) -> Option<Reply> {
    (req.op.kind() == OpKind::Write).then(|| outcome_unknown(ctx, req))
}

/// Sends a forwarded request's frame to `leader` at `raft` within `within`.
///
/// C20: a primary that has recorded the cluster's id refuses a member without one, and that id
/// is in the log it replicates here: a fresh standby takes it within a few appends. Sent
/// unstamped and refused: once more when the id arrives, within the client's budget (before, a
/// brand-new cluster's standby answered STANDBY). Only an unstamped node keeps a copy of the
/// request for that.
async fn send_to(
    ctx: &Ctx,
    leader: NodeId,
    raft: &str,
    who: &Identity,
    within: Duration,
    frame: Vec<u8>,
) -> Forwarded {
    let until = tokio::time::Instant::now() + within;
    let again = ctx.identity.tag().is_none().then(|| frame.clone());
    let r = ctx
        .forwarder
        .forward(leader, raft, who.to_string(), within, frame)
        .await;
    let Some(frame) = again.filter(|_| matches!(r, Forwarded::Refused)) else {
        return r;
    };
    crate::base::counters::forward("unstamped");
    if tokio::time::timeout_at(until, ctx.identity.tagged())
        .await
        .is_err()
    {
        return r;
    }
    let left = until.saturating_duration_since(tokio::time::Instant::now());
    if left.is_zero() {
        return r;
    }
    ctx.forwarder
        .forward(leader, raft, who.to_string(), left, frame)
        .await
}
