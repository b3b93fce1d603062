//! What this node can vouch for without a round trip: a lease read on the leader (C3), the
//! leader it names to clients (C10, F18), the membership version it stamps on replies (F29).
//! Read from openraft's state and the lease clock; the client port turns them into replies.

use std::time::Duration;

use openraft::error::{CheckIsLeaderError, RaftError};
use openraft::ServerState;

use crate::base::clock::BootInstant;
use crate::base::ids::NodeId;
use crate::node::ctx::{Ctx, COMMIT_TIMEOUT};

/// What the read barrier (C3) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Barrier {
    /// This node may answer from its applied state.
    Serve,
    /// Not the leader (openraft named the leader it knows, if any), or a leader cut off from
    /// its quorum (C10: `None`).
    NotLeader(Option<NodeId>),
    /// Leadership not confirmed in time ([`COMMIT_TIMEOUT`]) or openraft failed.
    Busy,
}

impl Ctx {
    /// F29: the version of this node's current membership — the log index of its entry, plus
    /// one (the initial membership sits at index 0). Every member sees the same entry at the
    /// same index, so a new primary of an unchanged membership stamps the same version.
    pub fn members_version(&self) -> u64 {
        let m = self.raft.metrics();
        let v = m
            .borrow()
            .membership_config
            .log_id()
            .map_or(0, |l| l.index + 1);
        v
    }

    /// C3 without a round trip: this node leads, has applied an entry of its own term (so
    /// everything earlier leaders committed is in its state), and a quorum accepted appends it
    /// sent within [`crate::raft::elect::lease_read_window`] (a third of election-max) — far inside
    /// the leader lease (election-max) during which those followers vote for no one else, nor
    /// campaign (C15). A paused or deposed leader's acks are old, so it falls back to the read
    /// index, which fails over to STANDBY/NOT_READY.
    pub fn lease_valid(&self) -> bool {
        let rx = self.raft.metrics();
        let m = rx.borrow();
        if m.state != ServerState::Leader
            || m.last_applied.map(|l| l.leader_id.term) != Some(m.current_term)
            || !self.ready.is_ready(&m.vote)
        {
            return false;
        }
        let configs = m.membership_config.membership().get_joint_config();
        let window = crate::raft::elect::lease_read_window(self.opts.election_max_ms);
        self.lease
            .lease_holds(&m.vote, configs, self.id, window, BootInstant::now())
    }

    /// C3 read barrier: whether this node may answer a read from its applied state — at once
    /// on a valid lease ([`Ctx::lease_valid`]), else once a read index is confirmed and applied.
    pub async fn read_barrier(&self) -> Barrier {
        if self.lease_valid() {
            return Barrier::Serve;
        }
        let res = tokio::select! {
            r = tokio::time::timeout(COMMIT_TIMEOUT, self.raft.ensure_linearizable()) => r,
            () = self.until_cut_off() => return Barrier::NotLeader(None),
        };
        match res {
            Ok(Ok(_)) => Barrier::Serve,
            Ok(Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)))) => {
                Barrier::NotLeader(f.leader_id)
            }
            Ok(Err(_)) | Err(_) => Barrier::Busy,
        }
    }

    /// The leader this node can vouch for right now: itself when it leads and has heard from a
    /// quorum within the lease-read window (C10), or — on a standby —
    /// the leader of its committed vote if that leader's appends refreshed the vote within
    /// the minimum election timeout. Read in one step from openraft's state, so the leader
    /// and its freshness always belong together.
    pub(crate) async fn fresh_leader(&self) -> Option<NodeId> {
        // Stretched on a slow link (C15 amended): appends come further apart there.
        let window = self
            .elect
            .pace()
            .stretch(Duration::from_millis(self.opts.election_min_ms));
        let me = self.id;
        let found = self.raft.with_raft_state(move |st| {
            let v = st.vote_ref();
            let l = v.leader_id().voted_for().filter(|_| v.is_committed())?;
            if l == me {
                return Some(l);
            }
            let t = st.vote_last_modified()?;
            (tokio::time::Instant::now().saturating_duration_since(t) < window).then_some(l)
        });
        let found = found.await.ok().flatten();
        found.filter(|&l| l != me || self.vouches_for_itself())
    }

    /// A leader names itself in `waitPrimary` only while a quorum answers it, as a standby
    /// names its leader only while appends arrive: once the lease has lapsed (reads fail over
    /// to a read index that cannot complete), a leader cut off from its peers must not send
    /// clients back to itself in the time before it knows it is cut off (C10). A healthy
    /// leader hears from its quorum every heartbeat; a lapse only delays the answer until the
    /// next re-check.
    pub fn vouches_for_itself(&self) -> bool {
        let rx = self.raft.metrics();
        let m = rx.borrow();
        m.state == ServerState::Leader && self.ready.is_ready(&m.vote) && {
            let configs = m.membership_config.membership().get_joint_config();
            // Liveness, not safety: stretched on a slow link (C15 amended), where answers come
            // further apart. A lease read (`lease_valid`) never is.
            let window = self
                .elect
                .pace()
                .stretch(crate::raft::elect::lease_read_window(
                    self.opts.election_max_ms,
                ));
            self.lease
                .quorum_heard(&m.vote, configs, self.id, window, BootInstant::now())
        }
    }

    /// How long a host may stay silent before it shows as unavailable.
    pub fn host_timeout_ms(&self) -> i64 {
        self.opts.host_timeout.as_millis() as i64
    }
}
