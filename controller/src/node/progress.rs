//! The progress fields of an immediate `waitPrimary` answer (C18): what `xce-controller
//! status` shows of each member.

use openraft::ServerState;
use xce_proto::wire::{self, ControllerInfo, ControllerRole};

use crate::base::config::split_addr;
use crate::base::ids::{CtrlNode, NodeId};
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
    // C18 amended: how long this process has run, and the membership as this node holds it
    // (a standby's too: `status` asked one node learns the member set from it).
    info.uptime_ms = crate::base::build::uptime_ms();
    // C24: the disk, as the metrics show it.
    if let Some(g) = crate::base::disk::guard() {
        let u = g.usage();
        (info.db_size_bytes, info.disk_free_bytes) = (u.db_bytes, u.free_bytes);
        info.quota_bytes = g.quota;
    }
    if info.members.is_empty() {
        let leader = (info.primary_id != 0).then_some(info.primary_id as NodeId);
        info.members = members_held(&m, leader);
    }
    if let Ok((committed, contact)) = st {
        info.committed_index = committed.unwrap_or(0);
        if let Some(c) = contact {
            info.last_contact_ms = c.as_millis() as i64;
        }
    }
}

/// Every node of the membership this node holds, in id order: `leader` marked primary, the
/// other voters standbys, learners (still catching up) initializing.
fn members_held(
    m: &openraft::RaftMetrics<NodeId, CtrlNode>,
    leader: Option<NodeId>,
) -> Vec<wire::ControllerEntry> {
    let mem = m.membership_config.membership();
    let mut v: Vec<wire::ControllerEntry> = mem
        .nodes()
        .filter_map(|(&id, n)| {
            let (host, port) = split_addr(&n.client)?;
            let role = if Some(id) == leader {
                ControllerRole::Primary
            } else if mem.voter_ids().any(|x| x == id) {
                ControllerRole::Standby
            } else {
                ControllerRole::Initializing
            };
            Some(wire::ControllerEntry {
                id: id as u32,
                host,
                port,
                role,
            })
        })
        .collect();
    v.sort_by_key(|e| e.id);
    v
}
