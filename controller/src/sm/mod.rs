//! The state machine as data: the job table and its commands (`state.rs`, which imports
//! nothing of the crate), listings paged through one snapshot, the snapshot file, the entry
//! payload that carries proposals through the log, the state's digest (C19) and the backup
//! file of `snapshot save` (C20).

pub mod backup;
pub mod digest;
pub mod entry;
pub mod listing;
pub mod snapshot;
pub mod state;
