//! How nodes are named and addressed, and openraft's types over those names alone (log ids,
//! votes, memberships, snapshot metadata), which need nothing of the Raft type
//! configuration (`raft/types.rs`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A controller as Raft membership knows it: its client (protocol) and raft addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CtrlNode {
    pub client: String,
    pub raft: String,
}

impl fmt::Display for CtrlNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.client, self.raft)
    }
}

pub type NodeId = u64;
pub type LogId = openraft::LogId<NodeId>;
pub type StorageError = openraft::StorageError<NodeId>;
pub type StoredMembership = openraft::StoredMembership<NodeId, CtrlNode>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, CtrlNode>;
pub type Vote = openraft::Vote<NodeId>;
