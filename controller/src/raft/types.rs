//! The Raft type configuration: what the log carries ([`Batch`]), what a snapshot is
//! ([`SnapFile`]) and how nodes are addressed ([`CtrlNode`]).

use crate::base::ids::CtrlNode;
use crate::sm::entry::Batch;
use crate::sm::snapshot::SnapFile;
use crate::sm::state::Outcome;

openraft::declare_raft_types!(
    /// Types of the controller's Raft group.
    pub TypeConfig:
        D = Batch,
        R = Vec<Outcome>,
        NodeId = u64,
        Node = CtrlNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = SnapFile,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type Raft = openraft::Raft<TypeConfig>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type Snapshot = openraft::Snapshot<TypeConfig>;
