//! C12 (fifth round): a node that started without data asks every other voter where it
//! stands, until it knows its floor (`raft/amnesia.rs`), and every node answers.
//!
//! Asking: one round every [`ROUND`], each question bounded by [`ASK_WITHIN`], over the
//! forwarder's kept control connections (the raft ports' mutual TLS: only members answer, and
//! only members are asked). Nodes that have answered are not asked again; a node named by an
//! answer's membership (added online, missing from `--cluster`) is asked too. The task ends
//! once the floor is known or the node has caught up.
//!
//! Answering ([`standing_of`], `ports/peer.rs`): the vote the node holds (openraft's, at
//! least what it has on disk), its last log id and the membership it holds — read from the
//! Raft metrics, so a node whose Raft stopped (a diverged node, C19) still answers with what
//! it holds.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::base::ids::NodeId;
use crate::raft::amnesia::Amnesia;
use crate::raft::forward::Forwarder;
use crate::raft::frame::{RpcReply, RpcRequest, Standing};
use crate::raft::types::Raft;

/// Between two rounds of questions.
pub const ROUND: Duration = Duration::from_millis(100);
/// One question's bound.
pub const ASK_WITHIN: Duration = Duration::from_secs(1);

/// This node's standing, for a node that lost its data.
pub fn standing_of(raft: &Raft) -> Standing {
    let m = raft.metrics().borrow().clone();
    let membership = m.membership_config.clone();
    let configs = membership
        .membership()
        .get_joint_config()
        .iter()
        .map(|c| c.iter().copied().collect())
        .collect();
    let nodes = membership
        .membership()
        .nodes()
        .map(|(id, n)| (*id, n.raft.clone()))
        .collect();
    Standing {
        vote: m.vote,
        last_log_index: m.last_log_index,
        membership: *membership.log_id(),
        configs,
        nodes,
    }
}

/// Asks the voters still to hear from, round after round, until the floor is known or this
/// node has caught up. `spec_addrs`: `--cluster`'s raft addresses.
pub async fn gather(
    amnesia: Arc<Amnesia>,
    asker: Arc<Forwarder>,
    spec_addrs: BTreeMap<NodeId, String>,
) {
    while amnesia.unsure() && amnesia.floor().is_none() {
        let mut asks = tokio::task::JoinSet::new();
        for (id, addr) in amnesia.to_ask(&spec_addrs) {
            let asker = asker.clone();
            asks.spawn(async move {
                let reply = asker
                    .ask(id, &addr, &RpcRequest::Standing, ASK_WITHIN)
                    .await;
                (id, reply)
            });
        }
        while let Some(r) = asks.join_next().await {
            if let Ok((id, Some(RpcReply::Standing(s)))) = r {
                amnesia.heard(id, s);
            }
        }
        tokio::time::sleep(ROUND).await;
    }
}
