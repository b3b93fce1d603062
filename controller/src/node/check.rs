//! C19: the primary's online consistency check (after CockroachDB's consistency checker, which
//! computes replicas' checksums at a command replicated through the log, and etcd's
//! corruption check, which compares members' hashes at a common revision).
//!
//! Every [`crate::base::config::NodeOpts::consistency_check`] (and when `status` or
//! `snapshot save` asks: [`check_now`]; one check at a time) the serving primary:
//! 1. commits a checkpoint entry (an empty batch): every member hashes its state as of that
//!    entry when it applies it (`raft/digests.rs`);
//! 2. asks every other member of the membership for its digest there (a raft-port request,
//!    admitted like every raft message: mutual TLS between members, the cluster stamp);
//! 3. compares ([`decide`]): the digest a strict majority of the voters has is the cluster's;
//!    a member with another one diverged. It logs a line naming the nodes and the index,
//!    counts `xce_state_digest_mismatch_total`, raises an alarm (`status`, `xce_alarms`) and
//!    tells the node, which stops voting and serving until repaired (`raft/diverged.rs`); if
//!    the primary itself is the one, it stops itself and the others elect a primary. Without a
//!    majority (a three-way split, or too few answers) no node is stopped: the alarm names
//!    every digest and says so.
//!
//! A member that does not answer (down, cut off, an earlier build that does not know the
//! question) is left out of that check. Checks are spaced at least [`COST_FACTOR`] times the
//! last hash's time apart, so a large table costs at most about 1/[`COST_FACTOR`] of a core.
//!
//! C20: a cluster whose state records no id yet (new, or written by an earlier build) gets
//! one here: once a check finds every member answering — so every member runs a build that
//! knows the id entry — the primary commits a random one (`sm/state.rs` `Cmd::ClusterId`).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use crate::base::cluster_id::ClusterTag;
use crate::base::ids::{NodeId, Vote};
use crate::node::ctx::{Ctx, COMMIT_TIMEOUT};
use crate::raft::digests::{Checkpoint, Round};
use crate::raft::frame::{DigestAnswer, RpcReply, RpcRequest};
use crate::sm::digest::{self, Digest};
use crate::sm::entry::Batch;
use crate::sm::state::{Cmd, Proposal};

/// How long members have to apply the checkpoint and answer with their digest.
pub const CHECK_WAIT: Duration = Duration::from_secs(5);
/// A member that has not applied the checkpoint yet is asked again after this.
const ASK_AGAIN: Duration = Duration::from_millis(20);
/// Checks are at least this many times the last hash's time apart.
pub const COST_FACTOR: u32 = 20;

/// What a comparison of digests at one index says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every digest is the same.
    Agree,
    /// A strict majority of the voters has `majority`; `differ` have others.
    Minority {
        majority: Digest,
        agreeing: Vec<NodeId>,
        differ: Vec<(NodeId, Digest)>,
    },
    /// Digests differ and none is held by a strict majority of the voters.
    NoMajority { groups: Vec<(Digest, Vec<NodeId>)> },
}

/// C19: compares the members' digests at one checkpoint. A digest held by a strict majority
/// of `voters` is the cluster's; a voter or learner with another diverged. Members that did
/// not answer count for no side.
pub fn decide(voters: &BTreeSet<NodeId>, digests: &BTreeMap<NodeId, Digest>) -> Verdict {
    let mut groups: BTreeMap<Digest, Vec<NodeId>> = BTreeMap::new();
    for (n, d) in digests {
        groups.entry(*d).or_default().push(*n);
    }
    if groups.len() <= 1 {
        return Verdict::Agree;
    }
    let majority = groups
        .iter()
        .find(|(_, ns)| ns.iter().filter(|n| voters.contains(n)).count() * 2 > voters.len());
    match majority {
        Some((m, agreeing)) => Verdict::Minority {
            majority: *m,
            agreeing: agreeing.clone(),
            differ: digests
                .iter()
                .filter(|(_, d)| *d != m)
                .map(|(n, d)| (*n, *d))
                .collect(),
        },
        None => Verdict::NoMajority {
            groups: groups.into_iter().collect(),
        },
    }
}

fn nodes(ns: &[NodeId]) -> String {
    let s: Vec<String> = ns.iter().map(|n| n.to_string()).collect();
    match s.len() {
        1 => format!("node {}", s[0]),
        _ => format!("nodes {}", s.join(", ")),
    }
}

/// How often a node that does not lead looks whether it leads (to forget what it found as
/// primary, and to check at once in a new tenure).
const LOOK: Duration = Duration::from_millis(100);

/// Runs for the node's life: checks while this node serves as primary, every
/// `--consistency-check-ms` (never with 0: then only when asked).
pub async fn run(ctx: Arc<Ctx>) {
    let Some(period) = ctx.opts.consistency_check else {
        return;
    };
    let mut last_took = Duration::ZERO;
    // The vote of the tenure the last check ran in: a new tenure checks at once.
    let mut checked_in: Option<Vote> = None;
    loop {
        let vote = ctx.raft.metrics().borrow().vote;
        if !ctx.serving_leader() {
            if checked_in.take().is_some() {
                // What this node found as primary is the new primary's to find again.
                ctx.findings.forget();
            }
            tokio::time::sleep(LOOK).await;
            continue;
        }
        if checked_in == Some(vote) {
            tokio::time::sleep(period.max(last_took * COST_FACTOR)).await;
            if !ctx.serving_leader() {
                continue;
            }
        }
        checked_in = Some(ctx.raft.metrics().borrow().vote);
        if let Some(c) = check_now(&ctx).await {
            last_took = c.took;
        }
    }
}

/// A check's outcome: the round, the checkpoint compared (its state, for `snapshot save`) and
/// how long hashing it took here.
pub struct Checked {
    pub round: Round,
    pub checkpoint: Option<Arc<Checkpoint>>,
    pub took: Duration,
}

/// C19: one check, now (after the one running, if any: one at a time). `None` when it could
/// not be made (not the primary, the checkpoint did not commit, this node could not hash).
pub async fn check_now(ctx: &Ctx) -> Option<Checked> {
    let _one = ctx.findings.running.lock().await;
    if !ctx.serving_leader() {
        return None;
    }
    let me = ctx.id;
    let term = ctx.raft.metrics().borrow().current_term;
    let res = {
        // Not after a handover entry (C14: it must stay the last entry of its term).
        let _alone = ctx.ready.proposing.lock().await;
        if !ctx.serving_leader() {
            return None;
        }
        tokio::time::timeout(COMMIT_TIMEOUT, ctx.raft.client_write(Batch::default())).await
    };
    let index = match res {
        Ok(Ok(r)) => r.log_id.index,
        _ => return None,
    };
    let mine = ctx.digests.wait(index, CHECK_WAIT).await?;
    let checkpoint = ctx.digests.latest().filter(|c| c.log_id.index == index);
    let took = checkpoint.as_ref().map_or(Duration::ZERO, |c| c.took);
    let m = ctx.raft.metrics().borrow().membership_config.clone();
    let voters: BTreeSet<NodeId> = m.membership().voter_ids().collect();
    let others: Vec<(NodeId, String)> = m
        .membership()
        .nodes()
        .filter(|(n, _)| **n != me)
        .map(|(n, node)| (*n, node.raft.clone()))
        .collect();
    let answers = join_all(
        others
            .iter()
            .map(|(n, addr)| async move { (*n, ask_digest(ctx, *n, addr, index).await) })
            .collect(),
    )
    .await;
    let mut digests = BTreeMap::from([(me, mine)]);
    let mut marked = Vec::new();
    let mut silent = Vec::new();
    for (n, answer) in answers {
        match answer {
            Some(DigestAnswer::Ready(d)) => {
                digests.insert(n, d);
            }
            Some(DigestAnswer::Diverged(at)) => marked.push((n, at)),
            _ => silent.push(n),
        }
    }
    let mut raised: BTreeMap<NodeId, String> = marked
        .iter()
        .map(|(n, at)| {
            (
                *n,
                format!(
                    "node {n}: diverged at index {at} (its marker): not voting or serving until \
                     repaired"
                ),
            )
        })
        .collect();
    let answered: Vec<NodeId> = digests.keys().copied().collect();
    let mut round = Round {
        number: 0,
        index,
        agreeing: Vec::new(),
        voters: voters.len(),
        at: None,
        took,
    };
    let round = match decide(&voters, &digests) {
        Verdict::Agree => {
            round.agreeing = answered.clone();
            let round = ctx.findings.finished(round, raised, &answered, None, true);
            if marked.is_empty() && silent.is_empty() {
                record_cluster_id(ctx).await;
            }
            round
        }
        Verdict::Minority {
            majority,
            agreeing,
            differ,
        } => {
            crate::base::counters::digest_mismatch(differ.len() as u64);
            for (n, d) in &differ {
                crate::log_error!(
                    "node {me}: state digest mismatch at index {index}: node {n} has {}, {} \
                     {} (the majority of {} voters): node {n} diverged (C19)",
                    digest::short(d),
                    nodes(&agreeing),
                    if agreeing.len() == 1 { "has" } else { "have" },
                    voters.len(),
                );
                raised.insert(
                    *n,
                    format!(
                        "node {n}: state digest at index {index} differs from the majority's \
                         ({} has {}, {} {}): it stops voting and serving until repaired",
                        nodes(&[*n]),
                        digest::short(d),
                        nodes(&agreeing),
                        digest::short(&majority)
                    ),
                );
                if *n == me {
                    crate::raft::diverged::stop(&ctx.diverged, &ctx.raft, index, d, &majority, me)
                        .await;
                } else if let Some((_, addr)) = others.iter().find(|(o, _)| o == n) {
                    let told = ctx
                        .forwarder
                        .ask(
                            *n,
                            addr,
                            &RpcRequest::Diverged {
                                index,
                                majority,
                                from: me,
                                term,
                            },
                            CHECK_WAIT,
                        )
                        .await;
                    if !matches!(told, Some(RpcReply::Ack(true))) {
                        crate::log_warn!(
                            "node {me}: node {n} did not take the news that it diverged"
                        );
                    }
                }
            }
            round.agreeing = agreeing.clone();
            ctx.findings.finished(round, raised, &agreeing, None, false)
        }
        Verdict::NoMajority { groups } => {
            crate::base::counters::digest_mismatch(digests.len() as u64);
            let parts: Vec<String> = groups
                .iter()
                .map(|(d, ns)| format!("{} {}", nodes(ns), digest::short(d)))
                .collect();
            let text = format!(
                "state digests at index {index} differ and no digest has a majority of the {} \
                 voters ({}): no node was stopped; compare them (docs/operations.md)",
                voters.len(),
                parts.join("; ")
            );
            crate::log_warn!("node {me}: {text} (C19)");
            round.agreeing = groups
                .iter()
                .find(|(d, _)| *d == mine)
                .map(|(_, ns)| ns.clone())
                .unwrap_or_default();
            ctx.findings.finished(round, raised, &[], Some(text), false)
        }
    };
    Some(Checked {
        round,
        checkpoint,
        took,
    })
}

/// Polls every future of `futs` until all are done (no task spawned: they may borrow).
async fn join_all<F: Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut futs: Vec<Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter()
        .map(|o| o.expect("polled to the end"))
        .collect()
}

/// Asks member `n` at raft address `addr` for its digest at `index` until it has one (or
/// says it never will), within [`CHECK_WAIT`]. `None`: no usable answer.
async fn ask_digest(ctx: &Ctx, n: NodeId, addr: &str, index: u64) -> Option<DigestAnswer> {
    let until = tokio::time::Instant::now() + CHECK_WAIT;
    loop {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return None;
        }
        match ctx
            .forwarder
            .ask(n, addr, &RpcRequest::Digest { index }, left)
            .await
        {
            Some(RpcReply::Digest(DigestAnswer::NotYet)) => {
                tokio::time::sleep(ASK_AGAIN.min(left)).await
            }
            Some(RpcReply::Digest(a)) => return Some(a),
            _ => return None,
        }
    }
}

/// C20: commits a random cluster id when the state records none.
async fn record_cluster_id(ctx: &Ctx) {
    if ctx
        .applied
        .read()
        .expect("state lock")
        .state
        .cluster()
        .is_some()
    {
        return;
    }
    let Ok(tag) = ClusterTag::new_random() else {
        return;
    };
    let p = Proposal {
        client_id: [0; 16],
        request_id: 0,
        now_ms: crate::base::clock::now_ms(),
        cmd: Cmd::ClusterId {
            id: tag.id,
            epoch: tag.epoch,
        },
    };
    match tokio::time::timeout(COMMIT_TIMEOUT, ctx.proposer.write(p)).await {
        Ok(Ok(_)) => {
            if let Some(c) = ctx.applied.read().expect("state lock").state.cluster() {
                eprintln!(
                    "node {}: this cluster's id is {} (recorded now: its state had none; C20)",
                    ctx.id,
                    ClusterTag {
                        id: c.id,
                        epoch: c.epoch
                    }
                );
            }
        }
        _ => crate::log_warn!(
            "node {}: recording the cluster's id did not commit; the next check tries again",
            ctx.id
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The verdict table: the majority of the voters decides; learners count for no side
    /// but are judged; without a majority nobody is singled out.
    #[test]
    fn the_majority_of_the_voters_decides() {
        let (a, b, c) = ([1u8; 32], [2u8; 32], [3u8; 32]);
        let v3: BTreeSet<NodeId> = [1, 2, 3].into();
        let d = |xs: &[(NodeId, Digest)]| xs.iter().copied().collect::<BTreeMap<_, _>>();
        assert_eq!(decide(&v3, &d(&[(1, a), (2, a), (3, a)])), Verdict::Agree);
        assert_eq!(decide(&v3, &d(&[(1, a)])), Verdict::Agree, "one answer");
        assert_eq!(
            decide(&v3, &d(&[(1, a), (2, a), (3, b)])),
            Verdict::Minority {
                majority: a,
                agreeing: vec![1, 2],
                differ: vec![(3, b)]
            }
        );
        // The primary (node 1) itself in the minority.
        assert_eq!(
            decide(&v3, &d(&[(1, b), (2, a), (3, a)])),
            Verdict::Minority {
                majority: a,
                agreeing: vec![2, 3],
                differ: vec![(1, b)]
            }
        );
        // Two of three answered and disagree: no majority of the voters.
        assert!(matches!(
            decide(&v3, &d(&[(1, a), (2, b)])),
            Verdict::NoMajority { .. }
        ));
        // A three-way split.
        let Verdict::NoMajority { groups } = decide(&v3, &d(&[(1, a), (2, b), (3, c)])) else {
            panic!("a three-way split has no majority");
        };
        assert_eq!(groups.len(), 3);
        // A learner (4) agreeing does not make a majority; one differing is judged.
        assert!(matches!(
            decide(&v3, &d(&[(1, a), (4, a), (2, b)])),
            Verdict::NoMajority { .. }
        ));
        assert_eq!(
            decide(&v3, &d(&[(1, a), (2, a), (4, b)])),
            Verdict::Minority {
                majority: a,
                agreeing: vec![1, 2],
                differ: vec![(4, b)]
            }
        );
        // Five voters: three make a majority, two do not.
        let v5: BTreeSet<NodeId> = [1, 2, 3, 4, 5].into();
        assert!(matches!(
            decide(&v5, &d(&[(1, a), (2, a), (3, a), (4, b), (5, b)])),
            Verdict::Minority { .. }
        ));
        assert!(matches!(
            decide(&v5, &d(&[(1, a), (2, a), (4, b), (5, b)])),
            Verdict::NoMajority { .. }
        ));
    }
}
