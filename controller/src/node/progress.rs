//! The progress fields of an immediate `waitPrimary` answer (C18): what `xce-controller
//! status` shows of each member.

use openraft::ServerState;
use xce::wire::ControllerInfo;

use crate::node::ctx::Ctx;

/// Fills the progress fields of an immediate `waitPrimary` answer.
pub async fn progress(ctx: &Ctx, info: &mut ControllerInfo) {
    let m = ctx.raft.metrics().borrow().clone();
    info.last_log_index = m.last_log_index.unwrap_or(0);
    info.applied_index = m.last_applied.map_or(0, |l| l.index);
    info.last_contact_ms = -1;
    if m.state == ServerState::Leader {
        info.last_contact_ms = m.millis_since_quorum_ack.map_or(-1, |ms| ms as i64);
    }
    let follower = m.state == ServerState::Follower;
    let st = ctx
        .raft
        .with_raft_state(move |st| {
            let contact = follower
                .then(|| st.vote_last_modified())
                .flatten()
                .map(|t| tokio::time::Instant::now().saturating_duration_since(t));
            (st.committed.map(|c| c.index), contact)
        })
        .await;
    if let Ok((committed, contact)) = st {
        info.committed_index = committed.unwrap_or(0);
        if let Some(c) = contact {
            info.last_contact_ms = c.as_millis() as i64;
        }
    }
}
