//! C21: a failed or full disk stops the node, says why and ends the process.
//!
//! Every failed write, fsync or read of the data directory (the log, the vote, a snapshot
//! file, C12's marker) is reported here with what was written and the file ([`record`]); so
//! is a Raft core that stopped with an error. The first report is the node's storage fault:
//! one log line naming the file and the error, the metrics `xce_storage_faults_total{op}` and
//! `xce_storage_fault`, [`storage_fault`] for the node's own report (`status`); from then on
//! the node grants no vote or pre-vote, campaigns no more and serves no client (each of those
//! asks [`faulted`]), and `cmd/run.rs` ends the process with [`EXIT_STORAGE_FAULT`] as soon as
//! it is told ([`wait`]) — without a handover and without touching the disk again, as a crash
//! would: the others fail over as for one, and a supervisor (`Restart=on-failure`) sees it.
//!
//! Why never retry: after a failed fsync Linux may have dropped the dirty pages it could not
//! write and marked them clean, so a second fsync can succeed without the data ever reaching
//! the disk (PostgreSQL's "fsyncgate", 2018). A node that carried on could acknowledge an entry
//! its disk does not hold. So nothing is retried: the write that failed was never
//! acknowledged (a follower answers an append only after its commit returned, a leader counts
//! itself only after its flush reported, a vote is granted only once saved), the process
//! ends, and a restart reads what the disk really holds — redb recovers to its last complete
//! commit, and C19 (a restarted node never resumes its old term) does the rest.

use std::path::Path;
use std::sync::OnceLock;

/// The exit status of a node stopped by a storage fault (sysexits' `EX_IOERR`).
pub const EXIT_STORAGE_FAULT: i32 = 74;

static FAULT: OnceLock<String> = OnceLock::new();
static TOLD: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Reports a failed storage operation `op` on `file`. The first report is the node's fault.
pub fn record(op: &'static str, file: &Path, err: &dyn std::fmt::Display) {
    crate::base::counters::storage_fault(op);
    let why = format!("{op} {}: {err}", file.display());
    if FAULT.set(why.clone()).is_ok() {
        crate::log_error!(
            "storage fault: {why}: this node serves and votes no more and exits with status \
             {EXIT_STORAGE_FAULT} (C21)"
        );
        TOLD.notify_one();
    } else {
        crate::log_error!("storage fault (after the first): {why}");
    }
}

/// Why this node stopped for a storage fault, if it did (for the node's own report).
pub fn storage_fault() -> Option<String> {
    FAULT.get().cloned()
}

/// Whether this node had a storage fault.
pub fn faulted() -> bool {
    FAULT.get().is_some()
}

/// Resolves once this node had a storage fault.
pub async fn wait() -> String {
    loop {
        if let Some(why) = FAULT.get() {
            return why.clone();
        }
        TOLD.notified().await;
    }
}
