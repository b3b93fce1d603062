//! The entry payload: what one Raft log entry of the job store carries, as data. Proposed in
//! batches by the leader's `Proposer` (`raft/propose.rs`), applied by the state machine in
//! order.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::sm::state::Proposal;

/// One Raft log entry of the job store: proposals applied in order, one outcome each. Shared
/// (an `Arc`, encoded exactly as the list itself), so the copies openraft takes of an entry —
/// the log store's cache, one per replication stream, the state machine's — cost no copy of
/// the proposals.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Batch(pub Arc<Vec<Proposal>>);

impl std::fmt::Display for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "batch of {}", self.0.len())
    }
}
