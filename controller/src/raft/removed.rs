//! Issue 26: a removed member learns it. A node taken out of the membership (`member remove`)
//! and started again with its old data used to run for ever as a "standby" while every member
//! logged its refused connections about ten times a second. Now it finds out, says so and
//! exits with [`EXIT_REMOVED`] (a status systemd is told not to restart).
//!
//! How it finds out, from facts only the cluster can give:
//! - its own log: the effective membership excludes it — at start, unless started with
//!   `--join` (a node being added replays memberships from before its addition: none names it
//!   yet), or while running once that membership is committed and an earlier one of this
//!   process named it;
//! - a member's refusal: a member whose membership excludes this node answers its raft
//!   messages (pre-votes, votes; over mutual TLS, the connection its certificate names) with
//!   [`refusal`], naming the log index of that membership. Taken only when that index is past
//!   this node's own membership (the cluster moved on past what this node knows, and left it
//!   out), or at it when this node's own log already excludes it: a member that is behind
//!   (a new voter it has not heard of yet) never sends a node away.
//!
//! Exiting is always safe (a node that stops loses nothing acknowledged): the rules only guard
//! availability, so that a member is not sent away by a peer that is behind.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::base::ids::NodeId;
use crate::raft::types::Raft;

/// The exit status of a node that learned it is no member (EX_CONFIG: its data says it is).
pub const EXIT_REMOVED: i32 = 78;

/// What a refusal's text starts with; the membership's log index follows.
const PREFIX: &str = "removed at log index ";

static REMOVED: OnceLock<String> = OnceLock::new();
static TOLD_INDEX: AtomicU64 = AtomicU64::new(0);
static TOLD: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// The refusal a member sends a node `who` its membership (at log `index`, members `members`)
/// leaves out.
pub fn refusal(who: NodeId, index: u64, members: &[NodeId]) -> String {
    format!("{PREFIX}{index}: node {who} is not a member of this cluster (members {members:?})")
}

/// The membership index a refusal names, if it is one.
pub fn parse(why: &str) -> Option<u64> {
    let rest = why.strip_prefix(PREFIX)?;
    rest.split(':').next()?.parse().ok()
}

/// A member refused this node's message saying it is no member (from the raft port's reply
/// path): the watcher decides.
pub fn refused(why: &str) {
    if let Some(index) = parse(why) {
        TOLD_INDEX.fetch_max(index + 1, Ordering::AcqRel);
        TOLD.notify_one();
    }
}

/// Whether this node is removed. `own`: its effective membership's log index (None: no
/// membership, a `--join` node), whether that membership names it, whether it is committed;
/// `at_start`: the first look, at start of a node started without `--join`; `seen_me`: the log
/// index of the latest membership of this process that named it (a removal is a membership
/// *after* that one: an older one that leaves it out is history replayed — a snapshot taken
/// before this node was added, installed after the membership that adds it); `told`: the
/// highest index a member's refusal named; `joined`: this process started with `--join`
/// (blank): its own log replays the cluster's history, in which this id may have been a member
/// and been removed before it was emptied and added again (the documented replacement with
/// the same id): only a member's refusal counts for it.
pub fn decide(
    own: Option<u64>,
    names_me: bool,
    committed: bool,
    at_start: bool,
    seen_me: Option<u64>,
    told: Option<u64>,
    joined: bool,
) -> bool {
    let Some(own) = own else {
        return false; // no membership yet: nothing to be removed from
    };
    // Its own membership leaves it out and came after one that named it.
    let after_me = seen_me.is_some_and(|s| own > s);
    if !names_me && (at_start || (committed && after_me && !joined)) {
        return true;
    }
    match told {
        Some(t) if names_me => t > own,
        // Left out by its own membership too: confirmed, unless no membership of this process
        // named it before that one (a node being added, replaying memberships from before it).
        Some(t) => after_me && t >= own,
        None => false,
    }
}

/// Why this node was found removed (it exits), once it was.
pub fn removal() -> Option<String> {
    REMOVED.get().cloned()
}

/// Watches this node's membership and members' refusals; resolves with why once the node is
/// removed ([`decide`]).
pub async fn watch(raft: Raft, id: NodeId, join: bool) -> String {
    let mut rx = raft.server_metrics();
    let mut at_start = !join;
    let mut seen_me: Option<u64> = None;
    loop {
        let (own, names_me) = {
            let m = rx.borrow_and_update();
            let mem = &m.membership_config;
            let names_me = mem.membership().nodes().any(|(&n, _)| n == id);
            let own = mem
                .log_id()
                .map(|l| l.index)
                .or_else(|| mem.membership().nodes().next().map(|_| 0));
            (own, names_me)
        };
        let committed = match own {
            Some(i) if !names_me => raft
                .with_raft_state(move |st| st.committed.is_some_and(|c| c.index >= i))
                .await
                .unwrap_or(false),
            _ => false,
        };
        let told = TOLD_INDEX.load(Ordering::Acquire).checked_sub(1);
        if decide(own, names_me, committed, at_start, seen_me, told, join) {
            let why = match told {
                Some(t) if names_me || !(at_start || committed) => format!(
                    "a member says this node was removed from the cluster (its membership at log \
                     index {t} leaves node {id} out; this node's log knew up to index {})",
                    own.unwrap_or(0)
                ),
                _ => format!(
                    "this node's log removes it from the cluster (the membership at log index {} \
                     leaves node {id} out)",
                    own.unwrap_or(0)
                ),
            };
            let why = format!(
                "{why}: it is no member, and stops (exit status {EXIT_REMOVED}). To bring it \
                 back, empty its data directory, start it with `run --join`, then add it \
                 again with `member add` (docs/operations.md, steps 2 and 3)"
            );
            let _ = REMOVED.set(why.clone());
            return why;
        }
        at_start = false;
        if names_me {
            seen_me = seen_me.max(own);
        }
        // A membership change, a refusal, or (the membership not yet committed) a moment.
        tokio::select! {
            r = rx.changed() => if r.is_err() { return std::future::pending().await },
            () = TOLD.notified() => {}
            () = tokio::time::sleep(std::time::Duration::from_millis(200)), if !names_me => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_round_trips() {
        let r = refusal(3, 57, &[1, 2, 4]);
        assert_eq!(parse(&r), Some(57));
        assert_eq!(parse("of another cluster"), None);
    }

    // (what, own index, names me, committed, at start, seen me, told, removed)
    type Case = (
        &'static str,
        Option<u64>,
        bool,
        bool,
        bool,
        Option<u64>,
        Option<u64>,
        bool,
    );
    const CASES: [Case; 14] = [
        (
            "a member, nothing said",
            Some(10),
            true,
            false,
            false,
            Some(5),
            None,
            false,
        ),
        (
            "a join node, no membership",
            None,
            false,
            false,
            false,
            None,
            Some(50),
            false,
        ),
        (
            "its log removes it, at start",
            Some(10),
            false,
            false,
            true,
            None,
            None,
            true,
        ),
        (
            "a joiner replaying old memberships",
            Some(0),
            false,
            true,
            false,
            None,
            None,
            false,
        ),
        (
            "a joiner told by a member",
            Some(0),
            false,
            false,
            false,
            None,
            Some(0),
            false,
        ),
        (
            "removed while running, committed",
            Some(10),
            false,
            true,
            false,
            Some(5),
            None,
            true,
        ),
        (
            "removed while running, not committed",
            Some(10),
            false,
            false,
            false,
            Some(5),
            None,
            false,
        ),
        (
            "a member past its view leaves it out",
            Some(10),
            true,
            false,
            false,
            Some(5),
            Some(12),
            true,
        ),
        (
            "a member behind it says nothing",
            Some(10),
            true,
            false,
            false,
            Some(5),
            Some(8),
            false,
        ),
        (
            "a member at its own view",
            Some(10),
            true,
            false,
            false,
            Some(5),
            Some(10),
            false,
        ),
        (
            "its own uncommitted removal confirmed",
            Some(10),
            false,
            false,
            false,
            Some(5),
            Some(10),
            true,
        ),
        (
            "a joiner replaying its own id's earlier removal (seed 4242)",
            Some(3803),
            false,
            true,
            false,
            Some(1),
            None,
            false,
        ),
        (
            "a joiner given a snapshot from before the membership that adds it",
            Some(3803),
            false,
            true,
            false,
            Some(3900),
            None,
            false,
        ),
        (
            "the same, told by a member at that old index",
            Some(3803),
            false,
            false,
            false,
            Some(3900),
            Some(3803),
            false,
        ),
    ];

    #[test]
    fn who_is_removed() {
        for (what, own, names_me, committed, at_start, seen_me, told, want) in CASES {
            // The cases named "joiner" are processes started with --join.
            let joined = what.contains("joiner");
            let got = decide(own, names_me, committed, at_start, seen_me, told, joined);
            assert_eq!(got, want, "{what}");
        }
    }
}
