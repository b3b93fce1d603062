//! What a node says of itself and the cluster (C8): `ControllerInfo`, made from the node's
//! view (its role, term, primary, members, alarms) — the node's state in the wire's words.

use openraft::{RaftMetrics, ServerState};
use xce_proto::wire::{self, ControllerInfo, ControllerRole};

use crate::base::config::split_addr;
use crate::base::ids::{CtrlNode, NodeId};
use crate::node::ctx::Ctx;
use crate::node::progress::Held;

/// This controller's view of the cluster (C8): its role, the term, the primary.
pub fn info(ctx: &Ctx) -> ControllerInfo {
    let leader = ctx.raft.metrics().borrow().current_leader;
    let cut_off = leader == Some(ctx.id) && ctx.leader_cut_off();
    info_with_primary(ctx, leader.filter(|_| !cut_off))
}

/// [`info`] naming `primary` (None: no primary known).
pub(super) fn info_with_primary(ctx: &Ctx, primary: Option<NodeId>) -> ControllerInfo {
    let m = ctx.raft.metrics().borrow().clone();
    let initialized = m.membership_config.membership().nodes().next().is_some();
    let mut role = role_of(m.state, initialized);
    if role == ControllerRole::Primary && ctx.leader_cut_off() {
        role = ControllerRole::Standby; // C10: a standby that knows no primary
    }
    let mut info = ControllerInfo {
        id: ctx.id as u32,
        role,
        term: m.current_term,
        version: crate::base::build::version(),
        protocol_version: wire::PROTOCOL_VERSION,
        ..Default::default()
    };
    if let Some(l) = primary {
        info.primary_id = l as u32;
        if let Some((h, p)) = ctx.node(l).and_then(|n| split_addr(&n.client)) {
            info.primary_host = h;
            info.primary_port = p;
        }
    }
    // F29: the members, only from the serving primary about itself — never a standby's
    // (possibly stale) view, so clients learn the cluster only from its primary.
    if primary == Some(ctx.id) && role == ControllerRole::Primary && ctx.serving_leader() {
        info.members = members_of(&m, ctx.id);
        info.checked_index = ctx.findings.checked();
    }
    // C20, C19: the cluster, what is wrong.
    info.cluster_id = ctx.identity.tag().map_or([0; 16], |t| t.id);
    info.alarms = ctx.alarms();
    if ctx.diverged.is() {
        info.role = ControllerRole::Initializing;
    }
    info
}

fn role_of(state: ServerState, initialized: bool) -> ControllerRole {
    match state {
        _ if !initialized => ControllerRole::Initializing,
        ServerState::Leader => ControllerRole::Primary,
        ServerState::Follower => ControllerRole::Standby,
        ServerState::Candidate => ControllerRole::Candidate,
        ServerState::Learner | ServerState::Shutdown => ControllerRole::Initializing,
    }
}

/// F29: every node of the current membership (voters and learners) with its client address
/// (an IPv6 host without its brackets), in id order; `me` is marked the primary, the others
/// standbys.
fn members_of(m: &RaftMetrics<NodeId, CtrlNode>, me: NodeId) -> Vec<wire::ControllerEntry> {
    let mut v: Vec<wire::ControllerEntry> = m
        .membership_config
        .membership()
        .nodes()
        .filter_map(|(&id, n)| {
            let (host, port) = split_addr(&n.client)?;
            Some(wire::ControllerEntry {
                id: id as u32,
                host,
                port,
                role: if id == me {
                    ControllerRole::Primary
                } else {
                    ControllerRole::Standby
                },
            })
        })
        .collect();
    v.sort_by_key(|e| e.id);
    v
}

/// Fills the progress fields of an immediate `waitPrimary` answer (C18, `node/progress.rs`);
/// the members as this node holds them when the answer names none (a standby's view).
pub(super) async fn with_progress(ctx: &Ctx, info: &mut ControllerInfo) {
    let p = crate::node::progress::progress(ctx).await;
    info.last_log_index = p.last_log_index;
    info.applied_index = p.applied_index;
    info.committed_index = p.committed_index;
    info.last_contact_ms = p.last_contact_ms;
    info.uptime_ms = p.uptime_ms;
    if let Some(d) = p.disk {
        (info.db_size_bytes, info.disk_free_bytes) = (d.db_bytes, d.free_bytes);
        info.quota_bytes = d.quota;
    }
    if info.members.is_empty() {
        let leader = (info.primary_id != 0).then_some(info.primary_id as NodeId);
        info.members = members_held(&p.members, leader);
    }
}

/// Every node of the membership this node holds, in id order: `leader` marked primary, the
/// other voters standbys, learners (still catching up) initializing.
fn members_held(held: &[Held], leader: Option<NodeId>) -> Vec<wire::ControllerEntry> {
    held.iter()
        .filter_map(|h| {
            let (host, port) = split_addr(&h.client)?;
            let role = if Some(h.id) == leader {
                ControllerRole::Primary
            } else if h.voter {
                ControllerRole::Standby
            } else {
                ControllerRole::Initializing
            };
            Some(wire::ControllerEntry {
                id: h.id as u32,
                host,
                port,
                role,
            })
        })
        .collect()
}
