//! Defect 5 (controller part): a node that stops serving as primary closes the client
//! connections it served as primary.
//!
//! A client that talks to the primary keeps its connection; when that node is deposed, frozen
//! and resumed, cut off from its quorum (C10) or restarted into a new term, requests already
//! in the socket — a fire-and-forget notify above all — would be read by a node that no
//! longer applies them, and nothing would tell the client. So every stretch of time during
//! which this node serves as primary is a *tenure*, numbered; a connection remembers the
//! tenure that served it, and once that tenure is over the connection is closed, unread
//! requests and all, before anything else is read from it. The client sees the close,
//! reconnects to the new primary and re-sends what was not acknowledged (the library's
//! outbox, F12). A node may read a fire-and-forget request in the instant before it learns it
//! was deposed: it does not apply it, and `ports/client/conn.rs` closes that connection too. Connections that never reached this node as primary (a client asking a
//! standby `waitPrimary`, or being redirected) stay open.

use std::sync::Arc;

use tokio::sync::watch;

use crate::node::ctx::{Ctx, STALE_LEADER_RECHECK};

/// Ends the tenure whenever this node stops serving as primary (checked on every change of
/// Raft's metrics and every [`STALE_LEADER_RECHECK`], which is how a cut-off leader, C10,
/// is noticed). Runs for the node's life.
pub async fn run(ctx: Arc<Ctx>) {
    let mut rx = ctx.raft.metrics();
    let mut serving = false;
    loop {
        let now = ctx.serving_leader();
        if serving && !now {
            ctx.tenure.ended.send_modify(|n| *n += 1);
            let ms = crate::base::clock::now_ms();
            eprintln!(
                "node {}: no longer serving as primary: closing the client connections it served at={}.{:03}",
                ctx.id,
                ms / 1000,
                ms % 1000
            );
        }
        serving = now;
        let changed = tokio::time::timeout(STALE_LEADER_RECHECK, rx.changed()).await;
        if let Ok(Err(_)) = changed {
            // Raft has stopped: keep the pace without its channel.
            tokio::time::sleep(STALE_LEADER_RECHECK).await;
        }
    }
}

/// Resolves once the tenure `served` (the one that served a connection as primary) is over;
/// never when `served` is `None`.
pub async fn over(rx: &mut watch::Receiver<u64>, served: Option<u64>) {
    let Some(t) = served else {
        return std::future::pending().await;
    };
    loop {
        if *rx.borrow_and_update() != t {
            return;
        }
        if rx.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}
