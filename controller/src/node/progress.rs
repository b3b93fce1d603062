//! The progress an immediate `waitPrimary` answer carries (C18): what `xce-controller status`
//! shows of each member. The client port says it in the wire's words
//! (`ports/client/info.rs::with_progress`).

use openraft::ServerState;

use crate::base::ids::NodeId;
use crate::node::ctx::Ctx;

/// This node's log, contact, uptime, disk and the membership it holds, read at one moment.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    pub last_log_index: u64,
    pub applied_index: u64,
    /// 0 when unknown.
    pub committed_index: u64,
    /// A leader: since its quorum last acknowledged; a follower: since its leader's last
    /// append; -1 when unknown.
    pub last_contact_ms: i64,
    pub uptime_ms: u64,
    /// C24: the disk, as the metrics show it (`None`: no guard).
    pub disk: Option<Disk>,
    /// Every node of the membership this node holds (a standby's too: `status` asked one
    /// node learns the member set from it), in id order.
    pub members: Vec<Held>,
}

/// C24: the data directory's size, the free space, the quota.
#[derive(Debug, Clone, Copy, Default)]
pub struct Disk {
    pub db_bytes: u64,
    pub free_bytes: u64,
    pub quota: u64,
}

/// A member as this node holds it: a voter, or a learner still catching up.
#[derive(Debug, Clone)]
pub struct Held {
    pub id: NodeId,
    pub client: String,
    pub voter: bool,
}

/// This node's progress (C18 amended).
pub async fn progress(ctx: &Ctx) -> Progress {
    let m = ctx.raft.metrics().borrow().clone();
    let mut p = Progress {
        last_log_index: m.last_log_index.unwrap_or(0),
        applied_index: m.last_applied.map_or(0, |l| l.index),
        last_contact_ms: -1,
        ..Default::default()
    };
    if m.state == ServerState::Leader {
        p.last_contact_ms = m.millis_since_quorum_ack.map_or(-1, |ms| ms as i64);
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
    // C18 amended: how long this process has run, and the membership as this node holds it.
    p.uptime_ms = crate::base::build::uptime_ms();
    // C24: the disk, as the metrics show it.
    if let Some(g) = crate::base::disk::guard() {
        let u = g.usage();
        p.disk = Some(Disk {
            db_bytes: u.db_bytes,
            free_bytes: u.free_bytes,
            quota: g.quota,
        });
    }
    let mem = m.membership_config.membership();
    p.members = mem
        .nodes()
        .map(|(&id, n)| Held {
            id,
            client: n.client.clone(),
            voter: mem.voter_ids().any(|x| x == id),
        })
        .collect();
    p.members.sort_by_key(|h| h.id);
    if let Ok((committed, contact)) = st {
        p.committed_index = committed.unwrap_or(0);
        if let Some(c) = contact {
            p.last_contact_ms = c.as_millis() as i64;
        }
    }
    p
}
