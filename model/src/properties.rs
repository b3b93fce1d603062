//! The properties, checked on every reachable state (C23). History properties are judged by
//! the step that makes the history (the ghost's [`Broken`]), the others on the state itself.

use stateright::Property;

use crate::actions::Raft;
use crate::state::{Broken, Payload, Role, State};

pub const ONE_LEADER_PER_LEADER_ID: &str = "one leader (and one log) per leader id";
pub const LOG_MATCHING: &str = "log matching";
pub const LEADER_COMPLETENESS: &str = "leader completeness";
pub const STATE_MACHINE_SAFETY: &str = "state machine safety";
pub const NO_ACKED_WRITE_LOST: &str = "no acknowledged write lost";
pub const LEASE_READS_LINEARIZABLE: &str = "lease reads linearizable";
/// Reached, or the bound is too small to say anything.
pub const SOME_WRITE_ACKED: &str = "a write is acknowledged";
pub const SOME_WIPED_NODE_CAUGHT_UP: &str = "a wiped node catches up and acknowledges";
pub const SOME_HANDOVER_DONE: &str = "a leader transfer elects its target";
pub const SOME_NODE_ADDED: &str = "node 4 added as a voter, committed";
pub const SOME_NODE_REMOVED: &str = "a voter removed, committed";

pub fn all() -> Vec<Property<Raft>> {
    vec![
        Property::always(ONE_LEADER_PER_LEADER_ID, |_, s| one_leader_per_leader_id(s)),
        Property::always(LOG_MATCHING, |_, s| log_matching(s)),
        Property::always(LEADER_COMPLETENESS, |_, s| leader_completeness(s)),
        Property::always(STATE_MACHINE_SAFETY, |_, s| state_machine_safety(s)),
        Property::always(NO_ACKED_WRITE_LOST, |_, s: &State| {
            !matches!(s.ghost.broken, Some(Broken::AckedWriteLost { .. }))
        }),
        Property::always(LEASE_READS_LINEARIZABLE, |_, s: &State| {
            !matches!(s.ghost.broken, Some(Broken::StaleRead { .. }))
        }),
        Property::sometimes(SOME_WRITE_ACKED, |_, s: &State| s.ghost.acked != 0),
        Property::sometimes(SOME_WIPED_NODE_CAUGHT_UP, |_, s: &State| {
            s.ghost.wipes > 0 && s.ghost.acked != 0 && s.nodes.iter().all(|n| !n.marker)
        }),
        Property::sometimes(SOME_NODE_ADDED, |_, s: &State| {
            s.nodes.iter().any(|n| {
                n.log[..usize::from(n.commit)].iter().any(|e| {
                    matches!(e.payload, Payload::Config(c) if c.joint == 0 && c.voters & 1 << 4 != 0)
                })
            })
        }),
        Property::sometimes(SOME_NODE_REMOVED, |_, s: &State| {
            s.nodes.iter().any(|n| {
                n.log[..usize::from(n.commit)].iter().any(|e| {
                    matches!(e.payload, Payload::Config(c) if c.joint == 0 && c.voters.count_ones() < 3)
                })
            })
        }),
        Property::sometimes(SOME_HANDOVER_DONE, |_, s: &State| {
            s.nodes.iter().any(|n| {
                n.leading().is_some()
                    && n.log
                        .iter()
                        .any(|e| e.payload == Payload::Handover(n.vote.leader.node))
            })
        }),
    ]
}

/// At most one leader per leader id (two nodes cannot share one: a node is in its leader id),
/// and no two different entries with one log id: a second incarnation leading in an old
/// leader id is caught when it creates an entry (`Broken::SecondLogForLeaderId`).
fn one_leader_per_leader_id(s: &State) -> bool {
    if matches!(s.ghost.broken, Some(Broken::SecondLogForLeaderId { .. })) {
        return false;
    }
    let leaders: Vec<_> = s
        .nodes
        .iter()
        .filter(|n| matches!(n.role, Role::Leader(_)))
        .map(|n| n.vote.leader)
        .collect();
    leaders
        .iter()
        .enumerate()
        .all(|(i, a)| leaders[i + 1..].iter().all(|b| a != b))
}

/// Two logs with an entry of one log id at an index hold the same entries up to it.
fn log_matching(s: &State) -> bool {
    s.nodes.iter().enumerate().all(|(i, a)| {
        s.nodes[i + 1..].iter().all(|b| {
            let common = a.log.len().min(b.log.len());
            (0..common)
                .filter(|&k| a.log[k].leader == b.log[k].leader)
                .all(|k| a.log[..=k] == b.log[..=k])
        })
    })
}

/// A leader's log holds every entry committed under a lower leader id.
fn leader_completeness(s: &State) -> bool {
    s.nodes
        .iter()
        .filter(|n| matches!(n.role, Role::Leader(_)))
        .all(|n| {
            s.ghost
                .committed
                .iter()
                .enumerate()
                .all(|(i, (e, by))| *by >= n.vote.leader || n.log.get(i) == Some(e))
        })
}

/// No two nodes apply different entries at one index: every node's applied prefix is the one
/// history, and no step applied another or took back an applied one.
fn state_machine_safety(s: &State) -> bool {
    if matches!(s.ghost.broken, Some(Broken::TwoEntriesApplied { .. })) {
        return false;
    }
    s.nodes.iter().all(|n| {
        n.log[..usize::from(n.commit)]
            .iter()
            .zip(&s.ghost.committed)
            .all(|(e, (c, _))| e == c)
    })
}
