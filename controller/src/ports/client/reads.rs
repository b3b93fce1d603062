//! Reads (C3): the read barrier, the listings (one frame, or pages through one snapshot,
//! P12), the cluster's configuration and `waitPrimary` (F18), and the frame bound every reply
//! obeys.

use std::time::Duration;

use xce_proto::error::{E_XCE_NOT_READY, E_XCE_REDIRECT, E_XCE_STANDBY};
use xce_proto::wire::{self, ControllerInfo, ControllerRole, Op, Reply, ReplyData, Request};

use super::command::not_primary;
use super::info::{info, info_with_primary};
use super::view::{
    filter_from_wire, host_to_wire, job_to_wire, queues_to_wire, resources_to_wire, resvals_to_wire,
};
use super::MAX_WAIT_PRIMARY;
use crate::base::clock::now_ms;
use crate::base::config::split_addr;
use crate::node::ctx::{Ctx, STALE_LEADER_RECHECK};
use crate::node::vouch::Barrier;

/// How long the crowd of a failover episode is remembered after its last arrival.
const CROWD_MEMORY: Duration = Duration::from_secs(1);

/// Never a frame the client is bound to refuse: a reply over the frame limit goes out as
/// -E_XCE_TOOBIG (deterministic: every master would say the same, so no failover).
pub(super) fn encode_reply_bounded(ctx: &Ctx, reply: &Reply, out: &mut Vec<u8>) {
    if super::listing::encode_bounded(reply, super::LIMITS.max_message_bytes, out) {
        crate::log_warn!(
            "node {}: reply to seq {} over {} bytes: sent as E_XCE_TOOBIG",
            ctx.id,
            reply.seq,
            super::LIMITS.max_message_bytes
        );
    }
}

/// A page of a snapshot-bound listing (after the read barrier).
pub(super) fn job_list_page(ctx: &Ctx, seq: u64, p: &wire::JobListPage) -> Reply {
    super::listing::answer_page(
        &ctx.cursors,
        seq,
        p,
        super::LIMITS.max_message_bytes,
        || {
            let st = &ctx.applied.read().expect("state lock").state;
            (st.jobs_snapshot(), st.applied_count())
        },
    )
}

/// C3 read barrier: `None` when this node may answer from its applied state, else the reply
/// of a node that may not (`node/vouch.rs` decides).
pub(super) async fn read_barrier(ctx: &Ctx, seq: u64, op: &Op) -> Option<Reply> {
    match ctx.read_barrier().await {
        Barrier::Serve => None,
        Barrier::NotLeader(leader) => Some(not_primary(ctx, seq, op, leader)),
        Barrier::Busy => Some(not_primary_busy(ctx, seq, op)),
    }
}

/// A leader that could not confirm its leadership or commit in time: NOT_READY, unless it
/// has meanwhile learnt of another leader.
fn not_primary_busy(ctx: &Ctx, seq: u64, op: &Op) -> Reply {
    let r = not_primary(ctx, seq, op, None);
    if r.status == -E_XCE_STANDBY || r.status == -E_XCE_REDIRECT {
        r
    } else {
        Reply::status(seq, -E_XCE_NOT_READY)
    }
}

pub(super) fn read(ctx: &Ctx, req: &Request) -> Reply {
    let seq = req.seq;
    // The node's own view reads the state itself (its alarms: C19's CORRUPT): taken before the
    // state's guard, never under it (`raft/state_lock.rs`: one guard per thread).
    match &req.op {
        Op::Hello(_) => return Reply::ok(seq, ReplyData::CtrlInfo(info(ctx))),
        Op::ClusterConf => return cluster_conf(ctx, seq),
        _ => {}
    }
    let a = ctx.applied.read().expect("state lock");
    let st = &a.state;
    let enoent = || Reply::status(seq, -libc::ENOENT);
    match &req.op {
        // The unpaged op answers only what fits one frame (older clients; ours page).
        Op::JobList(f) => {
            let budget = super::listing::hard_budget(0, super::LIMITS.max_message_bytes);
            st.jobs(&filter_from_wire(f), budget).map_or_else(
                || Reply::status(seq, -xce_proto::error::E_XCE_TOOBIG),
                |jobs| {
                    Reply::ok(
                        seq,
                        ReplyData::Jobs(jobs.into_iter().map(job_to_wire).collect()),
                    )
                },
            )
        }
        Op::JobInfo { job_id } => st
            .job(*job_id)
            .map_or_else(enoent, |j| Reply::ok(seq, ReplyData::Job(job_to_wire(j)))),
        Op::ResList => Reply::ok(seq, ReplyData::Resources(resources_to_wire(st.resources()))),
        Op::WorkerList => Reply::ok(
            seq,
            ReplyData::Hosts(
                st.hosts(now_ms(), ctx.host_timeout_ms())
                    .into_iter()
                    .map(|(h, a)| host_to_wire(h, a))
                    .collect(),
            ),
        ),
        Op::ResVal { host } => st.resvals(host).map_or_else(enoent, |r| {
            Reply::ok(seq, ReplyData::ResVals(resvals_to_wire(r)))
        }),
        other => {
            crate::log_error!(
                "node {}: unexpected op {} in read path",
                ctx.id,
                other.name()
            );
            Reply::status(seq, -libc::EINVAL)
        }
    }
}

/// `clusterConf`: the membership with the primary this node knows, and the queues.
fn cluster_conf(ctx: &Ctx, seq: u64) -> Reply {
    let info = info(ctx);
    // C17: the current membership; a learner (still catching up) is initializing.
    let m = ctx.raft.metrics().borrow().membership_config.clone();
    let controllers = m
        .membership()
        .nodes()
        .map(|(&id, n)| {
            let (host, port) = split_addr(&n.client).unwrap_or_default();
            wire::ControllerEntry {
                id: id as u32,
                host,
                port,
                role: if id as u32 == info.primary_id {
                    ControllerRole::Primary
                } else if m.membership().voter_ids().any(|v| v == id) {
                    ControllerRole::Standby
                } else {
                    ControllerRole::Initializing
                },
            }
        })
        .collect();
    let queues = queues_to_wire(ctx.applied.read().expect("state lock").state.queues());
    Reply::ok(
        seq,
        ReplyData::ClusterConf(wire::ClusterConf {
            cluster_name: ctx.opts.cluster_name.clone(),
            controllers,
            primary_id: info.primary_id,
            term: info.term,
            queues,
        }),
    )
}

/// `waitPrimary`: answers as soon as a primary is known, or at the timeout with
/// `primary_id = 0`. Wakes on this node's metrics watch channel (no polling). Two guards keep
/// F18 clients away from a dead primary: a standby whose leader has gone silent (no append
/// for an election timeout, e.g. it was just killed) does not report it — it re-checks every
/// [`STALE_LEADER_RECHECK`] until a fresh or a new leader appears — and a leader whose client
/// address is `exclude` (the one the client just failed to reach) is not reported either.
pub(super) async fn wait_primary(
    ctx: &Ctx,
    timeout_ms: u32,
    exclude: Option<(&str, u16)>,
) -> ControllerInfo {
    use std::sync::atomic::Ordering::Relaxed;
    /// Counts this waiter in `ctx.primary_waiters` until it answers (or is dropped).
    struct Waiting<'a>(&'a std::sync::atomic::AtomicU32);
    impl Drop for Waiting<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Relaxed);
        }
    }
    let now_waiting = ctx.primary_waiters.fetch_add(1, Relaxed) + 1;
    let _waiting = Waiting(&ctx.primary_waiters);
    {
        let mut crowd = ctx.crowd.lock().expect("crowd");
        // An episode ends when no waiter has arrived for CROWD_MEMORY.
        let peak = if crowd.0.elapsed() > CROWD_MEMORY {
            0
        } else {
            crowd.1
        };
        *crowd = (std::time::Instant::now(), peak.max(now_waiting));
    }
    let answer = |primary| {
        let mut info = info_with_primary(ctx, primary);
        let crowd = *ctx.crowd.lock().expect("crowd");
        info.waiters = crowd.1.max(ctx.primary_waiters.load(Relaxed));
        info
    };
    let deadline = tokio::time::Instant::now()
        + Duration::from_millis(timeout_ms as u64).min(MAX_WAIT_PRIMARY);
    // The server metrics change only with the vote, the role, the leader or the membership
    // (the full metrics are re-sent on every turn of the raft loop, which this waiter's own
    // `fresh_leader` query causes: watching those made every wait end ready at once).
    let mut rx = ctx.raft.server_metrics();
    // A new leader vouches for itself once its barrier is applied (C11), which no server
    // metric shows: wake on that too (C15), not only on the next re-check.
    let mut proven = ctx.ready.subscribe();
    loop {
        proven.borrow_and_update();
        let leader = rx.borrow_and_update().current_leader;
        if leader.is_some() {
            if let Some(l) = ctx.fresh_leader().await {
                let addr = ctx.node(l).and_then(|n| split_addr(&n.client));
                let excluded = matches!((&addr, exclude),
                    (Some((h, p)), Some((xh, xp))) if h == xh && *p == xp);
                if !excluded {
                    return answer(Some(l));
                }
            }
        }
        // Metrics that change on every look (a leader's own quorum-ack clock) must not hold
        // the answer past its timeout: the deadline is checked on every turn.
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        let until = match leader {
            Some(_) => (tokio::time::Instant::now() + STALE_LEADER_RECHECK).min(deadline),
            None => deadline,
        };
        let woke = tokio::select! {
            r = tokio::time::timeout_at(until, rx.changed()) => r,
            Ok(()) = proven.changed() => Ok(Ok(())),
        };
        match woke {
            Ok(Ok(())) => continue,
            Ok(Err(_)) => break,
            Err(_) if tokio::time::Instant::now() >= deadline => break,
            Err(_) => continue,
        }
    }
    answer(None)
}
