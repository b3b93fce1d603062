//! C11 (amended): a leader serves only once its state machine holds everything committed before
//! it took office.
//!
//! A node that leads has been elected in a term of its own (a restarted node never resumes
//! leadership in the term of a vote it read back from disk: change 3 of the vendored openraft,
//! C19). Its state machine is then the last snapshot, and its committed index is the
//! snapshot's (the committed index is not saved, see `store.rs`): its read index
//! (`ensure_linearizable`) is that stale committed index and its lease is valid as soon as the
//! followers accept its heartbeats, so without a barrier it would answer reads from the
//! snapshot. openraft appends a blank entry for the new term, but nothing tells the server when
//! that entry is applied.
//!
//! So every time this node leads under a vote it has not yet proven, [`run`] commits an entry
//! of its own (an empty [`Batch`]) and waits until it is applied: openraft applies in log
//! order, and the leader's log holds every committed entry, so once that entry is applied the
//! state machine holds everything committed before this node took office. Until then
//! [`Readiness::is_ready`] is false for that vote and the server serves no read (lease or
//! read index) and no write (C2: NOT_READY, after a short wait).

use std::time::Duration;

use openraft::ServerState;
use tokio::sync::watch;

use crate::base::ids::Vote;
use crate::raft::types::Raft;
use crate::sm::entry::Batch;

/// Pause before a barrier entry that failed to commit is tried again (while still leading).
const RETRY: Duration = Duration::from_millis(20);

/// The vote under which this node proved its state machine current (None: none yet).
pub struct Readiness {
    proven: watch::Sender<Option<Vote>>,
    /// C14: this node is handing leadership over (stopping): it serves as primary no more.
    handing_over: std::sync::atomic::AtomicBool,
    /// Wakes [`run`] when a handover is called off ([`Readiness::resume`]): its vote needs
    /// proving again, and nothing in the server metrics it waits on changes.
    resumed: tokio::sync::Notify,
    /// C14 with C19: held by a handover from its start, and by the consistency check while it
    /// decides to commit a checkpoint entry and hands it to Raft, so no checkpoint follows the
    /// handover entry in its term (the named standby's log must be the longest).
    pub proposing: tokio::sync::Mutex<()>,
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness {
            proven: watch::channel(None).0,
            handing_over: Default::default(),
            resumed: tokio::sync::Notify::new(),
            proposing: tokio::sync::Mutex::new(()),
        }
    }
}

impl Readiness {
    /// Whether this node, leading with `vote`, has applied everything committed before.
    pub fn is_ready(&self, vote: &Vote) -> bool {
        !self.handing_over() && self.proven.borrow().as_ref() == Some(vote)
    }

    /// Changes whenever a vote is proven (or the proof is dropped): `waitPrimary` wakes on it.
    pub fn subscribe(&self) -> watch::Receiver<Option<Vote>> {
        self.proven.subscribe()
    }

    fn handing_over(&self) -> bool {
        self.handing_over.load(std::sync::atomic::Ordering::Acquire)
    }

    /// C14: stop serving as primary for good (the node hands leadership over and exits).
    pub fn hand_over(&self) {
        self.handing_over
            .store(true, std::sync::atomic::Ordering::Release);
        self.proven.send_replace(None);
    }

    /// C17: serve as primary again after a handover that did not lead to the node's removal.
    pub fn resume(&self) {
        self.handing_over
            .store(false, std::sync::atomic::Ordering::Release);
        self.resumed.notify_one();
    }

    /// Waits up to `bound` until this node leads with a proven vote. False when it does not
    /// lead (or no longer does), or at the bound.
    pub async fn wait(&self, raft: &Raft, bound: Duration) -> bool {
        let mut proven = self.proven.subscribe();
        let check = |raft: &Raft, proven: &Option<Vote>| -> Option<bool> {
            let m = raft.metrics().borrow().clone();
            if m.state != ServerState::Leader {
                return Some(false);
            }
            (proven.as_ref() == Some(&m.vote)).then_some(true)
        };
        let wait = async {
            loop {
                let now = *proven.borrow_and_update();
                if let Some(answer) = check(raft, &now) {
                    return answer;
                }
                // Leadership may end without the proof changing: re-check now and then.
                let _ = tokio::time::timeout(RETRY, proven.changed()).await;
            }
        };
        tokio::time::timeout(bound, wait).await.unwrap_or(false)
    }
}

/// Proves every vote this node leads with: commits and applies a barrier entry of that vote,
/// then marks it ready. Runs for the node's life. Waits on the server metrics (role, vote,
/// leader, membership), which change only with them; `raft.metrics()` changes on every turn
/// of the Raft core, several times per write (P11).
pub async fn run(raft: Raft, ready: std::sync::Arc<Readiness>, id: u64, commit_timeout: Duration) {
    let mut rx = raft.server_metrics();
    loop {
        let (state, vote) = {
            let m = rx.borrow_and_update();
            (m.state, m.vote)
        };
        if state == ServerState::Leader && !ready.is_ready(&vote) && !ready.handing_over() {
            let t0 = std::time::Instant::now();
            let res = tokio::time::timeout(commit_timeout, raft.client_write(Batch::default()));
            match res.await {
                Ok(Ok(resp)) if raft.metrics().borrow().vote == vote => {
                    ready.proven.send_replace(Some(vote));
                    let ms = crate::base::clock::now_ms();
                    eprintln!(
                        "node {id}: state machine current at {} (barrier took {} ms): serving as primary at={}.{:03}",
                        resp.log_id,
                        t0.elapsed().as_millis(),
                        ms / 1000,
                        ms % 1000
                    );
                }
                // Leadership changed meanwhile, or the entry did not commit in time: look again.
                _ => tokio::time::sleep(RETRY).await,
            }
            continue;
        }
        tokio::select! {
            r = rx.changed() => if r.is_err() { return },
            _ = ready.resumed.notified() => {}
        }
    }
}
