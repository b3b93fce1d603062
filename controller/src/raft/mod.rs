//! Raft: openraft's type configuration, the log and state-machine store, the raft port's
//! outgoing side (messages and framing, the lease, the link that carries openraft's calls, the
//! forwarder), elections with pre-vote, a node that lost its data (amnesia, and the standing it asks of the others), the readiness
//! barrier, handover, a removed member that learns it, the proposer that batches writes, and C19's state digests and the
//! marker of a node that diverged.

pub mod amnesia;
pub mod compaction;
pub mod digests;
pub mod diverged;
pub mod elect;
pub mod forward;
pub mod frame;
pub mod handover;
pub mod lease;
pub mod link;
pub mod meta;
pub mod migrate;
pub mod pace;
pub mod propose;
pub mod ready;
pub mod removed;
pub mod segments;
pub mod standing;
pub mod state_lock;
pub mod store;
pub mod types;

/// Stops this node's Raft core on purpose (a shutdown, a removal, C19's divergence), bounded
/// to 3 s; said first, so that the core's end is not taken for a fault (C21, `base/crash.rs`).
pub async fn stop(raft: &types::Raft) {
    crate::base::crash::stopping();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(3), raft.shutdown()).await;
}
