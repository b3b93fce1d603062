//! Write batching (P11): concurrent clients' writes share one Raft entry, so they share one
//! log append (fsync) on the leader, one replication RPC and one append (fsync) per follower.
//!
//! openraft 0.9 runs every `client_write` as its own log append and waits for its flush
//! before it looks at the next one, so one proposal per entry costs one fsync each on the
//! leader, one after the other (≈ 400 writes/s here, whatever the number of clients). The
//! [`Proposer`] instead collects every write that arrived while the previous entries were
//! being written and proposes them as one [`Batch`]; the state machine applies the batch's
//! proposals in order and answers each with its own [`Outcome`].
//!
//! Durability is unchanged: a client's reply still waits until the entry holding its write is
//! committed (fsynced on a quorum) and applied.

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::base::ids::NodeId;
use crate::raft::types::Raft;
use crate::sm::entry::Batch;
use crate::sm::state::{Outcome, Proposal};

/// Most proposals in one entry: keeps one entry (and one replication RPC of
/// `max_payload_entries` of them) a few MB at most.
pub const MAX_BATCH: usize = 512;
/// Most bytes of proposals (roughly, their texts) in one entry. openraft 0.9 gives every
/// AppendEntries RPC one heartbeat interval (30 ms) to complete, follower fsync included, so
/// entries — and the [`MAX_PAYLOAD_ENTRIES`] of them one RPC carries — must stay small.
pub const MAX_BATCH_BYTES: usize = 64 << 10;
/// Entries per AppendEntries RPC (openraft's `max_payload_entries`; its default, 300, of
/// batched entries would be an RPC of megabytes that never completes within its 30 ms).
pub const MAX_PAYLOAD_ENTRIES: u64 = 8;
/// Entries proposed and not yet committed at once. One entry is being appended on the leader
/// while the one before it is being replicated: two in flight keep both busy; more only make
/// the batches smaller.
pub const MAX_IN_FLIGHT: usize = 2;

/// Why a write was not committed here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteFail {
    /// This node is not the leader (the leader it knows, if any).
    NotLeader(Option<NodeId>),
    /// The leader could not commit in time (no quorum, shutting down, …).
    Busy,
}

struct Pending {
    proposal: Proposal,
    reply: oneshot::Sender<Result<Outcome, WriteFail>>,
}

/// Hands writes to Raft in batches. Cheap to share; one per node.
pub struct Proposer {
    tx: mpsc::UnboundedSender<Pending>,
    /// Set once this node hands leadership over (C14): nothing more is proposed, so the
    /// handover entry stays the last entry of its term.
    closed: Arc<std::sync::atomic::AtomicBool>,
}

impl Proposer {
    /// Starts the batching task on the current runtime. `commit_timeout` bounds each entry's
    /// commit, so a leader that lost its quorum frees its in-flight slots.
    pub fn start(raft: Raft, commit_timeout: Duration) -> Proposer {
        let (tx, rx) = mpsc::unbounded_channel();
        let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        tokio::spawn(run(raft, rx, commit_timeout, closed.clone()));
        Proposer { tx, closed }
    }

    /// Proposes nothing more: queued and later writes fail as "not the leader" (C14).
    pub fn close(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Proposes again after a handover that left this node leading, or that ended with it a
    /// follower that may lead again later (`leader transfer`, issue 26).
    pub fn reopen(&self) {
        self.closed
            .store(false, std::sync::atomic::Ordering::Release);
    }

    /// Proposes one write; resolves once its entry is committed and applied (or failed).
    /// The caller bounds the wait.
    pub async fn write(&self, proposal: Proposal) -> Result<Outcome, WriteFail> {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Pending { proposal, reply }).is_err() {
            return Err(WriteFail::Busy);
        }
        rx.await.unwrap_or(Err(WriteFail::Busy))
    }
}

async fn run(
    raft: Raft,
    mut rx: mpsc::UnboundedReceiver<Pending>,
    commit_timeout: Duration,
    closed: Arc<std::sync::atomic::AtomicBool>,
) {
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    loop {
        // Take a slot first: everything that arrives while the slots are busy joins one batch.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = rx.recv().await else {
            return;
        };
        let mut bytes = first.proposal.size_hint();
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
            match rx.try_recv() {
                Ok(p) => {
                    bytes += p.proposal.size_hint();
                    batch.push(p);
                }
                Err(_) => break,
            }
        }
        if closed.load(std::sync::atomic::Ordering::Acquire) {
            for p in batch {
                let _ = p.reply.send(Err(WriteFail::NotLeader(None)));
            }
            continue;
        }
        let raft = raft.clone();
        tokio::spawn(async move {
            let (proposals, replies): (Vec<Proposal>, Vec<_>) =
                batch.into_iter().map(|p| (p.proposal, p.reply)).unzip();
            let res = tokio::time::timeout(
                commit_timeout,
                raft.client_write(Batch(Arc::new(proposals))),
            );
            match res.await {
                Ok(Ok(resp)) => {
                    let mut outs = resp.data.into_iter();
                    for r in replies {
                        let _ = r.send(outs.next().ok_or(WriteFail::Busy));
                    }
                }
                Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                    for r in replies {
                        let _ = r.send(Err(WriteFail::NotLeader(f.leader_id)));
                    }
                }
                Ok(Err(_)) | Err(_) => {
                    for r in replies {
                        let _ = r.send(Err(WriteFail::Busy));
                    }
                }
            }
            drop(slot);
        });
    }
}
