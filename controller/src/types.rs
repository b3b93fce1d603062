//! The Raft type configuration: what the log carries and how nodes are addressed.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::batch::Batch;
use crate::state::Outcome;

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

openraft::declare_raft_types!(
    /// Types of the controller's Raft group.
    pub TypeConfig:
        D = Batch,
        R = Vec<Outcome>,
        NodeId = u64,
        Node = CtrlNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = crate::store::SnapFile,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type NodeId = u64;
pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type StorageError = openraft::StorageError<NodeId>;
pub type StoredMembership = openraft::StoredMembership<NodeId, CtrlNode>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, CtrlNode>;
pub type Snapshot = openraft::Snapshot<TypeConfig>;
pub type Vote = openraft::Vote<NodeId>;
