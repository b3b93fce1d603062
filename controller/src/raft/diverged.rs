//! C19: a node whose state diverged from its cluster's stops voting and serving until an
//! operator repairs it.
//!
//! The primary's consistency check (`node/check.rs`) compares every member's state digest at
//! a checkpoint entry; where they differ, Raft's order decides (C19, fifth round): a node that
//! applied a lower entry than the others where they first differ applied something that was
//! never the cluster's (a lost or extra write): its state cannot be trusted, and neither can its vote (its log may lack
//! what it acknowledged) nor its reads. The primary tells it ([`crate::raft::frame::RpcRequest::Diverged`]);
//! the node checks the claim against its own digest at that index, writes a marker file
//! (`DIR/diverged`, fsynced) and stops its Raft core: from then on it grants no vote or
//! pre-vote, takes no append or snapshot (the raft port refuses them), never campaigns,
//! answers clients NOT_READY and shows the alarm in `status`. A primary that finds itself
//! diverged does the same, so it stops leading and the others elect a primary as after a
//! crash. The marker survives restarts: a restarted node stays stopped.
//!
//! The repair is the one for a lost disk: stop the node, empty its data directory (the marker
//! goes with it), start it with `--join`; it rejoins blank and catches up from the primary
//! (C12). docs/operations.md has the steps.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::base::ids::NodeId;
use crate::sm::digest::{self, Digest};

/// The marker's file name in the data directory.
pub const MARKER: &str = "diverged";

/// What the marker records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Divergence {
    /// The checkpoint entry at which this node's digest differed.
    pub index: u64,
    /// This node's digest there, and the history's (hex; the field's name is older than
    /// C19's fifth round, kept so that a marker written before reads the same).
    pub ours: String,
    pub majority: String,
    /// Who found it (the primary then; this node itself when it led).
    pub found_by: NodeId,
    /// Unix ms, this node's clock (for the operator; nothing depends on it).
    pub at_ms: i64,
}

/// Whether this node diverged (the marker's content), shared by the ports and the node.
pub struct Diverged {
    id: NodeId,
    path: PathBuf,
    now: Mutex<Option<Divergence>>,
    /// Whether `now` is set: read on every request's path, so without the lock.
    flag: AtomicBool,
}

impl Diverged {
    /// Reads the marker, if any. One that cannot be read still counts (index 0).
    pub fn open(id: NodeId, dir: &Path) -> std::sync::Arc<Diverged> {
        let path = dir.join(MARKER);
        let now = path.exists().then(|| {
            let d = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Divergence>(&b).ok())
                .unwrap_or(Divergence {
                    index: 0,
                    ours: String::new(),
                    majority: String::new(),
                    found_by: 0,
                    at_ms: 0,
                });
            crate::log_error!(
                "node {id}: {}: this node's state diverged from its cluster's at index {} (C19): \
                 not voting or serving until repaired (docs/operations.md)",
                path.display(),
                d.index
            );
            d
        });
        std::sync::Arc::new(Diverged {
            id,
            path,
            flag: AtomicBool::new(now.is_some()),
            now: Mutex::new(now),
        })
    }

    pub fn is(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    pub fn what(&self) -> Option<Divergence> {
        self.now.lock().expect("diverged lock").clone()
    }

    /// The alarm `status` shows on this node, if diverged.
    pub fn alarm(&self) -> Option<String> {
        self.what().map(|d| {
            format!(
                "this node diverged at index {} (its digest {}, the history's {}): not voting \
                 or serving until repaired: empty its data directory and restart it with --join",
                d.index,
                short(&d.ours),
                short(&d.majority)
            )
        })
    }

    /// Records that this node's digest `ours` at `index` differs from the history's: the
    /// marker first (fsynced, with its directory), then the flag. `Ok(false)`: it was
    /// marked already.
    pub fn mark(
        &self,
        index: u64,
        ours: &Digest,
        majority: &Digest,
        found_by: NodeId,
    ) -> io::Result<bool> {
        let mut now = self.now.lock().expect("diverged lock");
        if now.is_some() {
            return Ok(false);
        }
        let d = Divergence {
            index,
            ours: digest::hex(ours),
            majority: digest::hex(majority),
            found_by,
            at_ms: crate::base::clock::now_ms(),
        };
        let tmp = self.path.with_extension("tmp");
        {
            let f = std::fs::File::create(&tmp)?;
            serde_json::to_writer(&f, &d).map_err(io::Error::other)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        crate::log_error!(
            "node {}: this node's state digest at index {index} is {}, the history's {} \
             (found by node {found_by}): this node diverged (C19); it stops voting and serving \
             until repaired (docs/operations.md)",
            self.id,
            digest::short(ours),
            digest::short(majority)
        );
        *now = Some(d);
        self.flag.store(true, Ordering::Release);
        Ok(true)
    }
}

/// Marks this node diverged ([`Diverged::mark`]) and stops its Raft core, so it votes,
/// campaigns, leads and stores nothing more (a primary stops leading: the others elect another
/// as after a crash). True once marked (now or before).
pub async fn stop(
    diverged: &Diverged,
    raft: &crate::raft::types::Raft,
    index: u64,
    ours: &Digest,
    majority: &Digest,
    found_by: NodeId,
) -> bool {
    match diverged.mark(index, ours, majority, found_by) {
        Ok(_) => {
            let raft = raft.clone();
            tokio::spawn(async move {
                crate::raft::stop(&raft).await;
            });
            true
        }
        Err(e) => {
            // Not marked: it could not say so after a restart. Stop anyway; the next check
            // finds it again if it comes back.
            crate::log_error!(
                "node {}: writing {}: {e}; stopping Raft anyway",
                diverged.id,
                diverged.path.display()
            );
            crate::raft::stop(raft).await;
            false
        }
    }
}

fn short(hex: &str) -> &str {
    &hex[..hex.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The marker survives a restart; a second mark changes nothing; an unreadable marker
    /// still counts.
    #[test]
    fn the_marker_outlives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let d = Diverged::open(1, dir.path());
        assert!(!d.is() && d.alarm().is_none());
        assert!(d.mark(42, &[1; 32], &[2; 32], 3).unwrap());
        assert!(!d.mark(43, &[1; 32], &[2; 32], 3).unwrap());
        let again = Diverged::open(1, dir.path());
        let w = again.what().unwrap();
        assert_eq!((w.index, w.found_by), (42, 3));
        assert!(again.alarm().unwrap().contains("index 42"));
        std::fs::write(dir.path().join(MARKER), b"garbage").unwrap();
        assert!(Diverged::open(1, dir.path()).is());
    }
}
