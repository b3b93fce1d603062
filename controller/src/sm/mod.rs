//! The state machine as data: the job table and its commands (`state.rs`, which imports
//! nothing of the crate: bytes in, state and replies out, in its own words — the client port
//! maps the wire onto them), the snapshot file, the entry payload that carries proposals
//! through the log, and the state's digest (C19). What holds locks or does I/O for a client
//! (listing cursors, the backups of `snapshot save`) is the node's.

pub mod digest;
pub mod entry;
pub mod snapshot;
pub mod state;
