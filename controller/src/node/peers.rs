//! Issue 36 (C18): the primary's view of each member — for the metrics (`xce_peer_*`) and a log
//! line when a member stops answering, and when it answers again. Before, a standby gone for a
//! minute was logged by nobody.

use std::time::Duration;

use openraft::ServerState;

use crate::base::clock::BootInstant;
use crate::base::ids::NodeId;
use crate::node::ctx::Ctx;

/// A member silent this long on the primary is logged (once, until it answers again).
pub const SILENT_AFTER: Duration = Duration::from_secs(5);
/// How often the primary looks.
const EVERY: Duration = Duration::from_secs(1);

/// What the primary knows of one member.
#[derive(Debug, Clone, PartialEq)]
pub struct Peer {
    pub id: NodeId,
    /// The last log index it is known to hold (`None`: nothing acknowledged yet).
    pub matched: Option<u64>,
    /// Since its last answer, and the round trip of the newest append it accepted (`None`: no
    /// answer in this term).
    pub contact: Option<(Duration, Duration)>,
}

/// Every other member as the primary sees it now; empty on a node that does not lead.
pub fn peers(ctx: &Ctx) -> Vec<Peer> {
    let m = ctx.raft.metrics().borrow().clone();
    if m.state != ServerState::Leader {
        return Vec::new();
    }
    let now = BootInstant::now();
    let repl = m.replication.clone().unwrap_or_default();
    m.membership_config
        .membership()
        .nodes()
        .map(|(&id, _)| id)
        .filter(|&id| id != ctx.id)
        .map(|id| Peer {
            id,
            matched: repl.get(&id).copied().flatten().map(|l| l.index),
            contact: ctx.lease.contact(id, &m.vote, now),
        })
        .collect()
}

/// Which members turned silent and which answer again, from the silent set before: pure.
/// `since_start`: how long this node has led (a member is silent only once it could have
/// answered for [`SILENT_AFTER`]).
pub fn changes(
    peers: &[Peer],
    silent: &[NodeId],
    since_start: Duration,
) -> (Vec<NodeId>, Vec<NodeId>) {
    let quiet = |p: &Peer| match p.contact {
        Some((since, _)) => since >= SILENT_AFTER,
        None => since_start >= SILENT_AFTER,
    };
    let now_silent: Vec<NodeId> = peers
        .iter()
        .filter(|p| quiet(p) && !silent.contains(&p.id))
        .map(|p| p.id)
        .collect();
    let back: Vec<NodeId> = silent
        .iter()
        .copied()
        .filter(|id| peers.iter().any(|p| p.id == *id && !quiet(p)))
        .collect();
    (now_silent, back)
}

/// On the primary: logs a member silent for [`SILENT_AFTER`] (a warning, once) and its return.
pub async fn watch(ctx: std::sync::Arc<Ctx>) {
    let mut silent: Vec<NodeId> = Vec::new();
    let mut led_since: Option<tokio::time::Instant> = None;
    loop {
        tokio::time::sleep(EVERY).await;
        let now = peers(&ctx);
        if ctx.raft.metrics().borrow().state != ServerState::Leader {
            led_since = None;
            silent.clear();
            continue;
        }
        let since = led_since
            .get_or_insert_with(tokio::time::Instant::now)
            .elapsed();
        let (gone, back) = changes(&now, &silent, since);
        for id in gone {
            let last = now
                .iter()
                .find(|p| p.id == id)
                .and_then(|p| p.contact)
                .map_or("never in this term".to_string(), |(s, _)| {
                    format!("{} s ago", s.as_secs())
                });
            crate::log_warn!(
                "node {}: member {id} has not answered for {} s (last answer: {last}): \
                 stopped, down or cut off? `xce-controller status` shows the members",
                ctx.id,
                SILENT_AFTER.as_secs()
            );
            silent.push(id);
        }
        for id in back {
            crate::log_info!("node {}: member {id} answers again", ctx.id);
            silent.retain(|s| *s != id);
        }
        // Removed members are forgotten.
        silent.retain(|s| now.iter().any(|p| p.id == *s));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(id: NodeId, since_s: Option<u64>) -> Peer {
        Peer {
            id,
            matched: Some(1),
            contact: since_s.map(|s| (Duration::from_secs(s), Duration::from_millis(1))),
        }
    }

    #[test]
    fn a_member_is_logged_silent_once_and_back_once() {
        let long = Duration::from_secs(60);
        let (gone, back) = changes(&[p(2, Some(0)), p(3, Some(6))], &[], long);
        assert_eq!((gone, back), (vec![3], vec![]));
        // Still silent: nothing new.
        let (gone, back) = changes(&[p(2, Some(0)), p(3, Some(30))], &[3], long);
        assert_eq!((gone, back), (vec![], vec![]));
        // Back.
        let (gone, back) = changes(&[p(2, Some(0)), p(3, Some(0))], &[3], long);
        assert_eq!((gone, back), (vec![], vec![3]));
        // Never answered this term: silent only once this node has led long enough.
        let (gone, _) = changes(&[p(4, None)], &[], Duration::from_secs(2));
        assert!(gone.is_empty());
        let (gone, _) = changes(&[p(4, None)], &[], long);
        assert_eq!(gone, vec![4]);
    }
}
