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
//! 3. compares. Equal digests: agreed (and a CORRUPT alarm raised before is cleared: the
//!    repair is done). Different ones (C19, fifth round: **Raft's order, never a count** — a
//!    mismatch means a safety rule already broke, and in issue 35's run the two wrong replicas
//!    outvoted the one that held the acknowledged history): the primary asks every member for
//!    the log ids it applied since the last index at which all agreed (`AppliedIds`, kept by
//!    `raft/digests.rs`), and [`settle`] finds the first index at which they differ. The higher
//!    log id there is the history; a member that applied a lower one diverged: a line naming
//!    the nodes and the index, `xce_state_digest_mismatch_total`, an alarm (`status`,
//!    `xce_alarms`), and the node is told, and stops voting and serving until repaired
//!    (`raft/diverged.rs`); the primary itself stops if it is one. Where no log id can tell —
//!    the same ids and different states, or ids no longer known (behind a snapshot, older than
//!    the newest kept) — the primary commits the **CORRUPT alarm** (`Cmd::Corrupt`, etcd's
//!    alarm of that name): every member holds it in its state, shows it, and refuses client
//!    writes (`E_XCE_CORRUPT`, reads go on) until a check finds every member agreeing again
//!    after an operator repaired the node that is wrong (docs/operations.md).
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
use crate::base::ids::{LogId, NodeId, Vote};
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

/// What a comparison of the members' states at one checkpoint says (C19, fifth round).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every digest is the same.
    Agree,
    /// At index `at` the members applied different entries; `history` holds the highest log
    /// id there (Raft's order: the higher term's entry is the history); `differ` applied lower
    /// ones, and diverged.
    Diverged {
        at: u64,
        history: Vec<NodeId>,
        differ: Vec<(NodeId, LogId)>,
        highest: LogId,
    },
    /// No log id can tell which state is the history: the CORRUPT alarm.
    Corrupt { why: String },
}

/// C19 (fifth round): settles a digest mismatch at a checkpoint by Raft's order, never by a
/// count. `digests`: the members' digests there; `ids`: the log ids each applied at indexes
/// `from..` up to the checkpoint (`None`: it no longer knows them all); `anchored`: whether
/// every member agreed right before `from` (a check agreed at `from - 1`, or `from` is 1), so
/// that a difference at `from` itself is the first one. Pure: the table test below.
pub fn settle(
    digests: &BTreeMap<NodeId, Digest>,
    ids: &BTreeMap<NodeId, Option<Vec<LogId>>>,
    from: u64,
    anchored: bool,
) -> Verdict {
    let distinct: BTreeSet<&Digest> = digests.values().collect();
    if distinct.len() <= 1 {
        return Verdict::Agree;
    }
    let corrupt = |why: String| Verdict::Corrupt { why };
    let mut known: BTreeMap<NodeId, &Vec<LogId>> = BTreeMap::new();
    for n in digests.keys() {
        match ids.get(n) {
            Some(Some(v)) => {
                known.insert(*n, v);
            }
            _ => {
                return corrupt(format!(
                    "node {n} no longer knows every entry it applied since index {from} (a \
                     snapshot, or older than it keeps): no log id can tell which state is the \
                     history"
                ))
            }
        }
    }
    let len = known.values().map(|v| v.len()).min().unwrap_or(0);
    let first = (0..len).find(|&i| {
        let at: BTreeSet<LogId> = known.values().map(|v| v[i]).collect();
        at.len() > 1
    });
    let Some(i) = first else {
        return corrupt(format!(
            "every member applied the same entries at indexes {from}..{} and their states \
             differ: no log id can tell which state is the history",
            from + len as u64 - 1
        ));
    };
    if i == 0 && !anchored {
        return corrupt(format!(
            "the members applied different entries already at index {from}, the oldest they \
             all still know: the first difference cannot be found"
        ));
    }
    let highest = known.values().map(|v| v[i]).max().expect("members");
    let (history, differ): (Vec<NodeId>, Vec<(NodeId, LogId)>) = {
        let mut h = Vec::new();
        let mut d = Vec::new();
        for (n, v) in &known {
            if v[i] == highest {
                h.push(*n);
            } else {
                d.push((*n, v[i]));
            }
        }
        (h, d)
    };
    let theirs: BTreeSet<&Digest> = history.iter().filter_map(|n| digests.get(n)).collect();
    if theirs.len() > 1 {
        return corrupt(format!(
            "the members that applied the history's entry at index {} ({}) hold different \
             states: no log id can tell which one is right",
            from + i as u64,
            nodes(&history)
        ));
    }
    Verdict::Diverged {
        at: from + i as u64,
        history,
        differ,
        highest,
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

/// The members' answers at one checkpoint.
struct Answers {
    /// Digests, this node's included.
    digests: BTreeMap<NodeId, Digest>,
    /// Members whose marker says they diverged earlier, and where.
    marked: Vec<(NodeId, u64)>,
    /// Members that gave no usable answer.
    silent: Vec<NodeId>,
    /// The other members and their raft addresses.
    others: Vec<(NodeId, String)>,
    voters: BTreeSet<NodeId>,
}

/// C19: one check, now (after the one running, if any: one at a time). `None` when it could
/// not be made (not the primary, the checkpoint did not commit, this node could not hash).
pub async fn check_now(ctx: &Ctx) -> Option<Checked> {
    let _one = ctx.findings.running.lock().await;
    if !ctx.serving_leader() {
        return None;
    }
    let index = commit_checkpoint(ctx).await?;
    let mine = ctx.digests.wait(index, CHECK_WAIT).await?;
    let checkpoint = ctx.digests.latest().filter(|c| c.log_id.index == index);
    let took = checkpoint.as_ref().map_or(Duration::ZERO, |c| c.took);
    let a = gather(ctx, index, mine).await;
    let raised: BTreeMap<NodeId, String> = a
        .marked
        .iter()
        .map(|(n, at)| {
            let why = format!(
                "node {n}: diverged at index {at} (its marker): not voting or serving until \
                 repaired"
            );
            (*n, why)
        })
        .collect();
    let round = Round {
        number: 0,
        index,
        agreeing: Vec::new(),
        voters: a.voters.len(),
        at: None,
        took,
    };
    let verdict = if a.digests.values().collect::<BTreeSet<_>>().len() <= 1 {
        Verdict::Agree
    } else {
        let (from, anchored) = ids_from(ctx.findings.checked(), index);
        let ids = applied_ids(ctx, &a, from, index).await;
        settle(&a.digests, &ids, from, anchored)
    };
    let round = act(ctx, verdict, &a, round, raised).await;
    Some(Checked {
        round,
        checkpoint,
        took,
    })
}

/// Commits a checkpoint entry (an empty batch) and returns its index.
async fn commit_checkpoint(ctx: &Ctx) -> Option<u64> {
    // Not after a handover entry (C14: it must stay the last entry of its term).
    let _alone = ctx.ready.proposing.lock().await;
    if !ctx.serving_leader() {
        return None;
    }
    match tokio::time::timeout(COMMIT_TIMEOUT, ctx.raft.client_write(Batch::default())).await {
        Ok(Ok(r)) => Some(r.log_id.index),
        _ => None,
    }
}

/// Every other member's digest at `index` (this node's is `mine`).
async fn gather(ctx: &Ctx, index: u64, mine: Digest) -> Answers {
    let me = ctx.id;
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
    let mut a = Answers {
        digests: BTreeMap::from([(me, mine)]),
        marked: Vec::new(),
        silent: Vec::new(),
        others,
        voters,
    };
    for (n, answer) in answers {
        match answer {
            Some(DigestAnswer::Ready(d)) => {
                a.digests.insert(n, d);
            }
            Some(DigestAnswer::Diverged(at)) => a.marked.push((n, at)),
            _ => a.silent.push(n),
        }
    }
    a
}

/// Where the applied ids to compare start: right after the last index at which every member
/// agreed (anchored), or as far back as a member keeps them (not anchored, unless at 1).
fn ids_from(checked: u64, index: u64) -> (u64, bool) {
    let keep = crate::raft::digests::IDS_KEEP as u64;
    if checked > 0 && checked < index && index - checked <= keep {
        (checked + 1, true)
    } else {
        let from = index.saturating_sub(keep - 1).max(1);
        (from, from == 1)
    }
}

/// The log ids every member that answered with a digest applied at `from..=index`.
async fn applied_ids(
    ctx: &Ctx,
    a: &Answers,
    from: u64,
    index: u64,
) -> BTreeMap<NodeId, Option<Vec<LogId>>> {
    let asked: Vec<&(NodeId, String)> = a
        .others
        .iter()
        .filter(|(n, _)| a.digests.contains_key(n))
        .collect();
    let answers = join_all(
        asked
            .iter()
            .map(|(n, addr)| async move {
                let q = RpcRequest::AppliedIds { from, to: index };
                match ctx.forwarder.ask(*n, addr, &q, CHECK_WAIT).await {
                    Some(RpcReply::AppliedIds(ids)) => (*n, ids),
                    _ => (*n, None),
                }
            })
            .collect(),
    )
    .await;
    let mut ids: BTreeMap<NodeId, Option<Vec<LogId>>> = answers.into_iter().collect();
    ids.insert(ctx.id, ctx.digests.applied_ids(from, index));
    ids
}

/// Acts on a check's verdict: alarms, the nodes told, the CORRUPT alarm committed or cleared.
async fn act(
    ctx: &Ctx,
    verdict: Verdict,
    a: &Answers,
    mut round: Round,
    mut raised: BTreeMap<NodeId, String>,
) -> Round {
    let index = round.index;
    let answered: Vec<NodeId> = a.digests.keys().copied().collect();
    match verdict {
        Verdict::Agree => {
            round.agreeing = answered.clone();
            let round = ctx.findings.finished(round, raised, &answered, None, true);
            if a.marked.is_empty() && a.silent.is_empty() {
                if corrupt_alarm(ctx).is_some() {
                    commit(ctx, Cmd::Repaired { index }, "the CORRUPT alarm's clearing").await;
                }
                record_cluster_id(ctx).await;
            }
            round
        }
        Verdict::Diverged {
            at,
            history,
            differ,
            highest,
        } => {
            crate::base::counters::digest_mismatch(differ.len() as u64);
            let theirs = a.digests[&history[0]];
            for (n, id) in &differ {
                let why = format!(
                    "node {n}: applied {id} at index {at}, where {} applied {highest} (Raft's \
                     order: the higher term is the history): its state at index {index} ({}) \
                     differs from theirs ({}); it stops voting and serving until repaired",
                    nodes(&history),
                    digest::short(&a.digests[n]),
                    digest::short(&theirs)
                );
                crate::log_error!("node {}: state digest mismatch: {why} (C19)", ctx.id);
                raised.insert(*n, why);
                tell_diverged(ctx, a, *n, index, &theirs).await;
            }
            round.agreeing = history.clone();
            ctx.findings.finished(round, raised, &history, None, false)
        }
        Verdict::Corrupt { why } => {
            crate::base::counters::digest_mismatch(a.digests.len() as u64);
            let parts: Vec<String> = a
                .digests
                .iter()
                .map(|(n, d)| format!("node {n} {}", digest::short(d)))
                .collect();
            let text = format!(
                "CORRUPT: state digests at index {index} differ ({}) and {why}: writes are \
                 refused until repaired (docs/operations.md)",
                parts.join(", ")
            );
            crate::log_error!("node {}: {text} (C19)", ctx.id);
            if corrupt_alarm(ctx).is_none() {
                let cmd = Cmd::Corrupt {
                    index,
                    why: text.clone(),
                };
                commit(ctx, cmd, "the CORRUPT alarm").await;
            }
            ctx.findings.finished(round, raised, &[], Some(text), false)
        }
    }
}

/// Tells member `n` it diverged at `index` (`theirs`: the history's digest there); this node
/// stops itself if it is `n`.
async fn tell_diverged(ctx: &Ctx, a: &Answers, n: NodeId, index: u64, theirs: &Digest) {
    let me = ctx.id;
    if n == me {
        let ours = a.digests[&me];
        crate::raft::diverged::stop(&ctx.diverged, &ctx.raft, index, &ours, theirs, me).await;
        return;
    }
    let Some((_, addr)) = a.others.iter().find(|(o, _)| *o == n) else {
        return;
    };
    let term = ctx.raft.metrics().borrow().current_term;
    let msg = RpcRequest::Diverged {
        index,
        majority: *theirs,
        from: me,
        term,
    };
    let told = ctx.forwarder.ask(n, addr, &msg, CHECK_WAIT).await;
    if !matches!(told, Some(RpcReply::Ack(true))) {
        crate::log_warn!("node {me}: node {n} did not take the news that it diverged");
    }
}

/// C19 (fifth round): the CORRUPT alarm this node's applied state holds, if raised.
pub fn corrupt_alarm(ctx: &Ctx) -> Option<crate::sm::state::CorruptAlarm> {
    let applied = ctx.applied.read().expect("state lock");
    applied.state.corrupt().cloned()
}

/// Commits `cmd` (the cluster's own bookkeeping), logging a failure as `what`.
async fn commit(ctx: &Ctx, cmd: Cmd, what: &str) {
    let p = Proposal {
        client_id: [0; 16],
        request_id: 0,
        now_ms: crate::base::clock::now_ms(),
        cmd,
    };
    if !matches!(
        tokio::time::timeout(COMMIT_TIMEOUT, ctx.proposer.write(p)).await,
        Ok(Ok(_))
    ) {
        crate::log_warn!(
            "node {}: {what} did not commit; the next check tries again",
            ctx.id
        );
    }
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

    fn id(term: u64, node: NodeId, index: u64) -> LogId {
        LogId::new(openraft::CommittedLeaderId::new(term, node), index)
    }

    /// The digests, log ids and logs the verdict tables use: three states, and at indexes 10,
    /// 11, 12 a deposed primary's log (`p_log`) and the new primary's (`n_log`), alike at 10.
    struct Table {
        a: Digest,
        b: Digest,
        c: Digest,
        common: LogId,
        p_log: Vec<LogId>,
        n_log: Vec<LogId>,
    }

    fn table() -> Table {
        let common = id(4, 1, 10);
        Table {
            a: [1u8; 32],
            b: [2u8; 32],
            c: [3u8; 32],
            common,
            p_log: vec![common, id(4, 1, 11), id(4, 1, 12)],
            n_log: vec![common, id(5, 3, 11), id(5, 3, 12)],
        }
    }

    fn d(xs: &[(NodeId, Digest)]) -> BTreeMap<NodeId, Digest> {
        xs.iter().copied().collect()
    }

    fn ids(xs: Vec<(NodeId, Option<Vec<LogId>>)>) -> BTreeMap<NodeId, Option<Vec<LogId>>> {
        xs.into_iter().collect()
    }

    /// C19 (fifth round), the verdict table: Raft's order decides, never a count.
    #[test]
    fn raft_order_decides_a_mismatch_never_a_count() {
        let Table {
            a,
            b,
            common,
            p_log,
            n_log,
            ..
        } = table();
        assert_eq!(
            settle(&d(&[(1, a), (2, a), (3, a)]), &BTreeMap::new(), 10, true),
            Verdict::Agree
        );
        // Issue 35's run: P (1) and F (2) applied a deposed primary's entry at 11, N (3) the new
        // primary's. Two against one — and N is the history.
        assert_eq!(
            settle(
                &d(&[(1, a), (2, a), (3, b)]),
                &ids(vec![
                    (1, Some(p_log.clone())),
                    (2, Some(p_log.clone())),
                    (3, Some(n_log.clone()))
                ]),
                10,
                true
            ),
            Verdict::Diverged {
                at: 11,
                history: vec![3],
                differ: vec![(1, id(4, 1, 11)), (2, id(4, 1, 11))],
                highest: id(5, 3, 11),
            }
        );
        let other_start = vec![id(3, 2, 10), id(4, 1, 11), id(4, 1, 12)];
        // Anchored (every member agreed at 9): the difference at 10 is the first.
        assert!(matches!(
            settle(
                &d(&[(1, a), (2, b)]),
                &ids(vec![(1, Some(p_log.clone())), (2, Some(other_start))]),
                10,
                true
            ),
            Verdict::Diverged { at: 10, .. }
        ));
        // One primary alone against the rest, in the history: the rest diverged.
        assert!(matches!(
            settle(
                &d(&[(1, b), (2, a), (3, a)]),
                &ids(vec![(1, Some(n_log.clone())), (2, Some(vec![common, id(4, 2, 11), id(4, 2, 12)])), (3, Some(vec![common, id(4, 2, 11), id(4, 2, 12)]))]),
                10,
                true
            ),
            Verdict::Diverged { ref history, .. } if history == &vec![1]
        ));
    }

    /// C19 (fifth round), the verdict table: where no log id can tell, the CORRUPT alarm.
    #[test]
    fn where_no_log_id_can_tell_the_alarm_is_raised() {
        let Table {
            a,
            b,
            c,
            p_log,
            n_log,
            ..
        } = table();
        let other_start = vec![id(3, 2, 10), id(4, 1, 11), id(4, 1, 12)];
        let p = || Some(p_log.clone());
        let n = || Some(n_log.clone());
        let corrupt = [
            (
                "the same ids, different states (a corrupted state): nothing can tell",
                d(&[(1, a), (2, a), (3, b)]),
                ids(vec![(1, p()), (2, p()), (3, p())]),
                true,
            ),
            (
                "ids gone behind a snapshot on one member",
                d(&[(1, a), (2, a), (3, b)]),
                ids(vec![(1, p()), (2, p()), (3, None)]),
                true,
            ),
            (
                "a member that gave no ids at all counts as not knowing them",
                d(&[(1, a), (3, b)]),
                ids(vec![(1, p())]),
                true,
            ),
            (
                "different already at the oldest index all still know, not anchored by an \
                 agreed check: the first difference may be older",
                d(&[(1, a), (2, b)]),
                ids(vec![(1, p()), (2, Some(other_start))]),
                false,
            ),
            (
                "the history's holders disagree among themselves: which is right cannot be told",
                d(&[(1, a), (2, c), (3, b)]),
                ids(vec![(1, n()), (2, n()), (3, p())]),
                true,
            ),
        ];
        for (what, digests, ids, anchored) in corrupt {
            let v = settle(&digests, &ids, 10, anchored);
            assert!(matches!(v, Verdict::Corrupt { .. }), "{what}: {v:?}");
        }
    }

    #[test]
    fn the_ids_compared_start_after_the_last_agreement() {
        assert_eq!(ids_from(90, 100), (91, true));
        assert_eq!(ids_from(0, 100), (1, true), "a young log: from its start");
        let keep = crate::raft::digests::IDS_KEEP as u64;
        assert_eq!(ids_from(0, keep + 100), (101, false));
        assert_eq!(ids_from(5, keep + 100), (101, false), "agreed too long ago");
    }
}
