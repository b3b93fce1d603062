//! When a node writes a snapshot, and how much of its log it keeps behind it (C24, P12): both
//! sized by bytes, so the log store follows the state whether writes come one per entry or
//! hundreds per entry.
//!
//! - A snapshot is due once the log has grown by half the last snapshot's size since the last
//!   one (and by at least `--snapshot-logs` writes): writing snapshots costs O(1) per byte
//!   written on average, however large the table.
//! - Behind a snapshot the log keeps at most half the snapshot's size (and at most `--log-keep`
//!   entries, P14): a follower that fell that far behind catches up from the log, further
//!   behind the snapshot costs it no more. The rest is purged: whole segments deleted in the
//!   background (`raft/segments.rs`).
//!
//! So between snapshots the log store holds at most about one snapshot's size (half kept, half
//! grown) and a partly purged segment (an eighth of a snapshot at most), whatever the writes.
//!
//! Nodes apply the same entries at about the same time, and a policy of counts would have
//! every node write its snapshot at the same moment (P12 measured three step-downs at 10^6
//! jobs, each right after the three wrote theirs). A node's first snapshot after it starts
//! comes a third of an interval later per rank (`(id - 1) % 3`), and the intervals that follow
//! keep the nodes apart.

use std::path::PathBuf;

use crate::raft::store::{LogStore, SharedApplied};
use crate::raft::types::Raft;

/// The node's settings of the policy.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// `--snapshot-logs`: writes (proposals applied) between snapshots at least.
    pub min_writes: u64,
    /// `--log-keep`: entries kept behind a snapshot at most.
    pub log_keep: u64,
    /// 0, 1 or 2: how many thirds of an interval this node's first snapshot comes later.
    pub phase: u64,
}

impl Policy {
    pub fn new(id: u64, min_writes: u64, log_keep: u64) -> Policy {
        Policy {
            min_writes,
            log_keep,
            phase: id.saturating_sub(1) % 3,
        }
    }

    /// Whether a snapshot is due after `writes` writes and `bytes` appended to the log since
    /// the last one (or since the start: `first`), the last snapshot being `snapshot_bytes`
    /// long (`None`: none yet, counted in writes alone).
    pub fn due(&self, writes: u64, bytes: u64, snapshot_bytes: Option<u64>, first: bool) -> bool {
        let later = |x: u64| {
            if first {
                x + x * self.phase / 3
            } else {
                x
            }
        };
        writes >= later(self.min_writes) && snapshot_bytes.is_none_or(|s| bytes >= later(s / 2))
    }

    /// The log kept behind a snapshot of `snapshot_bytes`: (bytes, entries) at most.
    pub fn keep(&self, snapshot_bytes: u64) -> (u64, u64) {
        (snapshot_bytes / 2, self.log_keep)
    }
}

/// Triggers this node's snapshots by [`Policy::due`] (openraft's own policy counts entries,
/// and one entry may hold hundreds of writes) and purges its log behind each snapshot it
/// builds or installs by [`Policy::keep`] (openraft's own purge is off: `cmd/run.rs`).
pub async fn run(raft: Raft, applied: SharedApplied, log: LogStore, dir: PathBuf, p: Policy) {
    let file = crate::sm::snapshot::current_path(&dir);
    let size = || std::fs::metadata(&file).ok().map(|m| m.len());
    let writes = || applied.read().expect("state lock").state.applied_count();
    let mut seen = None;
    let mut bytes = None;
    let mut base = (writes(), log.appended_bytes());
    let mut first = true;
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
    loop {
        tick.tick().await;
        let snap = raft.metrics().borrow().snapshot;
        if snap.is_some() && snap != seen {
            // A snapshot built here or installed from the leader (or the one found at start).
            seen = snap;
            bytes = size();
            if let (Some(s), Some(b)) = (snap, bytes) {
                log.size_segments(b);
                let (keep_bytes, keep_entries) = p.keep(b);
                if let Some(upto) = log.purge_point(s.index, keep_bytes, keep_entries) {
                    if raft.trigger().purge_log(upto).await.is_err() {
                        return;
                    }
                }
            }
        }
        let now = (writes(), log.appended_bytes());
        if now.0 < base.0 {
            // A snapshot from the leader replaced the state.
            base.0 = now.0;
        }
        if p.due(now.0 - base.0, now.1 - base.1, bytes, first) {
            if raft.trigger().snapshot().await.is_err() {
                return;
            }
            base = now;
            first = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interval is the larger of the writes and half the last snapshot in bytes; a node's
    /// first comes a third of an interval later per rank, the ones after it do not.
    #[test]
    fn snapshots_are_due_by_bytes_and_nodes_start_apart() {
        let p = |id| Policy::new(id, 1000, 20_000);
        // No snapshot yet: writes alone.
        assert!(!p(1).due(999, u64::MAX, None, true));
        assert!(p(1).due(1000, 0, None, true));
        assert!(!p(2).due(1332, 0, None, true));
        assert!(p(2).due(1333, 0, None, true));
        assert!(!p(3).due(1665, 0, None, true));
        assert!(p(3).due(1666, 0, None, true));
        assert!(p(4).due(1000, 0, None, true), "rank 0 again");
        // A snapshot of 60 MB: 30 MB of log since.
        let s = Some(60_000_000);
        assert!(!p(1).due(1_000_000, 29_999_999, s, false));
        assert!(p(1).due(1000, 30_000_000, s, false));
        assert!(!p(1).due(999, 30_000_000, s, false), "writes still count");
        assert!(!p(3).due(1_000_000, 49_999_999, s, true));
        assert!(p(3).due(1_000_000, 50_000_000, s, true));
        assert!(p(3).due(1000, 30_000_000, s, false));
        // Kept behind a snapshot: half its size, `--log-keep` entries.
        assert_eq!(p(1).keep(60_000_000), (30_000_000, 20_000));
    }
}
