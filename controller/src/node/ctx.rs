//! The node's shared context ([`Ctx`]): what the client port, the raft port's forwarded
//! requests, the metrics endpoint and the node's watchers share, and what each of them asks
//! of it — whether this node serves as primary (C2, C10, C11), the reply of a node that does
//! not, a write through the log (C3).

use std::sync::Arc;
use std::time::Duration;

use openraft::{RaftMetrics, ServerState};
use tokio::sync::watch;

use crate::base::clock::{now_ms, BootInstant};
use crate::base::config::{split_addr, ClusterSpec, NodeOpts};
use crate::base::ids::{CtrlNode, NodeId};
use crate::raft::propose::WriteFail;
use crate::raft::store::SharedApplied;
use crate::raft::types::Raft;
use crate::sm::state::{Cmd, Outcome, Proposal};

/// Longest a read waits for its read index, or a write for its commit, before the client gets
/// NOT_READY (a read) or E_XCE_UNKNOWN (a write, which may still commit: the client re-sends
/// it with the same request id).
pub const COMMIT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often `waitPrimary` re-checks a standby's silent leader.
pub const STALE_LEADER_RECHECK: Duration = Duration::from_millis(25);
/// C10: a leader that has heard from no quorum for this many adaptive leases calls itself cut
/// off ([`Ctx::leader_cut_off`]): the lease plus the longest election timeout its followers
/// wait before they campaign (election-max at most, stretched by the same factor).
pub const CUT_OFF_WINDOWS: u32 = 2;

/// C2: the answer of a node that does not serve a request itself, in the node's words; the
/// client port says it as a status and a redirect (`ports/client/command.rs::not_served`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotServed {
    pub why: Refused,
    /// The client address of the primary this node knows, when another node leads.
    pub primary: Option<(String, u16)>,
}

/// Why a node does not serve a request (C2, C10, C11, C19, C21; F19 amended).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Not ready to answer: uninitialised, a candidate, a leader that cannot confirm its
    /// leadership, diverged (C19) or faulted (C21). Not applied.
    NotReady,
    /// A standby that knows the primary, asked for a session (`join`): go there.
    Redirect,
    /// A standby that knows the primary. Not applied.
    Standby,
    /// No primary known (C10: a leader cut off from its quorum knows none either).
    NoMaster,
    /// A write handed to the log whose commit was not confirmed: it may still commit (F19).
    Unknown,
}

impl NotServed {
    /// Not ready, no primary named.
    pub fn not_ready() -> NotServed {
        NotServed {
            why: Refused::NotReady,
            primary: None,
        }
    }
}

/// A write as the node sees it: its exactly-once keys (C4) and, for the refusal and the log,
/// what it is.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    pub client_id: [u8; 16],
    pub request_id: u64,
    /// The request's sequence number on its connection (the log names it).
    pub seq: u64,
    /// The op's name (the log names it).
    pub name: &'a str,
    /// A `join`: a standby redirects it (a session) instead of answering STANDBY.
    pub join: bool,
}

/// Everything a connection needs, shared by all of them.
pub struct Ctx {
    pub id: NodeId,
    pub raft: Raft,
    pub applied: SharedApplied,
    pub spec: ClusterSpec,
    pub opts: NodeOpts,
    /// Clients currently held in `waitPrimary` here.
    pub primary_waiters: std::sync::atomic::AtomicU32,
    /// The crowd of the current failover episode: the most clients held at once, and when one
    /// last arrived. Reported to every waiter (herd spread, F18), so stragglers that arrive just
    /// after the election spread as widely as the crowd they belong to.
    pub crowd: std::sync::Mutex<(std::time::Instant, u32)>,
    /// Followers' acceptance of this node's appends, for lease reads (C3).
    pub lease: Arc<crate::raft::lease::LeaseClock>,
    /// Who may campaign (C12, C14, C15).
    pub elect: Arc<crate::raft::elect::Elections>,
    /// Batches concurrent writes into shared Raft entries (P11).
    pub proposer: crate::raft::propose::Proposer,
    /// Listings pinned for paged reads (P12).
    pub cursors: crate::node::cursors::Cursors,
    /// C11 (amended): whether this leader's state machine holds everything committed before.
    pub ready: Arc<crate::raft::ready::Readiness>,
    /// Defect 5: connections served as primary are closed when this node stops serving.
    pub tenure: Tenure,
    /// Who may call what (C13).
    pub auth: crate::base::auth::Auth,
    /// C16: forwards clients' requests to the primary when they ask (F28).
    pub forwarder: crate::raft::forward::Forwarder,
    /// C20: the cluster this node belongs to.
    pub identity: Arc<crate::base::cluster_id::Identity>,
    /// C19: this node's state digests, what its checks found as primary, whether it diverged.
    pub digests: Arc<crate::raft::digests::Digests>,
    pub findings: Arc<crate::raft::digests::Findings>,
    pub diverged: Arc<crate::raft::diverged::Diverged>,
    /// C20: the online snapshots (`snapshot save`) this primary is sending.
    pub saves: crate::node::backup_file::Saves,
    /// This node's data directory.
    pub data: std::path::PathBuf,
}

/// The number of tenures that have ended on this node (defect 5; ended by `tenure.rs`).
pub struct Tenure {
    pub(crate) ended: watch::Sender<u64>,
}

impl Default for Tenure {
    fn default() -> Self {
        Tenure {
            ended: watch::channel(0).0,
        }
    }
}

impl Tenure {
    /// The current tenure's number.
    pub fn current(&self) -> u64 {
        *self.ended.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.ended.subscribe()
    }
}

impl Ctx {
    /// C14 (issue 26): how this leader judges its voters for a handover — answered within
    /// twice the election maximum.
    pub fn liveness(&self) -> crate::raft::handover::Liveness<'_> {
        crate::raft::handover::Liveness {
            lease: &self.lease,
            window: crate::raft::handover::Liveness::window(self.opts.election_max_ms),
        }
    }

    /// Node `id`'s addresses: from the current membership (C17: members added online), else
    /// from `--cluster`.
    pub(crate) fn node(&self, id: NodeId) -> Option<CtrlNode> {
        let m = self.raft.metrics().borrow().membership_config.clone();
        m.membership()
            .get_node(&id)
            .cloned()
            .or_else(|| self.spec.nodes.get(&id).cloned())
    }

    /// C19, C20, C21: what `status` shows of this node: a storage fault (in the moment before
    /// it exits), its own divergence, (on the primary) what its consistency check found, and the
    /// cluster's CORRUPT alarm.
    pub fn alarms(&self) -> Vec<String> {
        let mut v: Vec<String> = crate::base::fault::storage_fault()
            .map(|why| format!("storage fault: {why} (C21: this node is exiting)"))
            .into_iter()
            .collect();
        v.extend(self.diverged.alarm());
        v.extend(self.findings.alarms());
        v.extend(crate::base::disk::alarm()); // C24
                                              // C19 (fifth round): the CORRUPT alarm is the cluster's: every node that applied it
                                              // shows it, whoever leads.
        let state = self.applied.read().expect("state lock");
        if let Some(a) = state.state.corrupt() {
            if !v.contains(&a.why) {
                v.push(a.why.clone());
            }
        }
        v
    }

    /// The answer of a node that cannot serve a request itself (C2); `join`: the request asks
    /// for a session. `leader_hint` is a leader named by a failed read/write, if any.
    pub fn not_primary(&self, join: bool, leader_hint: Option<NodeId>) -> NotServed {
        if self.diverged.is() {
            // C19: out of service until repaired; it vouches for no primary either.
            return NotServed::not_ready();
        }
        let m = self.raft.metrics().borrow().clone();
        let initialized = m.membership_config.membership().nodes().next().is_some();
        let leader = leader_hint.or(m.current_leader).filter(|&l| l != self.id);
        let why = match (initialized, m.state, leader) {
            // C21: a node whose disk failed serves nothing (it is about to exit).
            _ if crate::base::fault::faulted() => Refused::NotReady,
            (false, _, _) => Refused::NotReady,
            (_, _, Some(_)) if join => Refused::Redirect,
            (_, _, Some(_)) => Refused::Standby,
            (_, ServerState::Follower | ServerState::Learner, None) => Refused::NoMaster,
            // C10: a leader cut off from its quorum knows no usable primary.
            (_, ServerState::Leader, None) if self.leader_cut_off() => Refused::NoMaster,
            // Candidate, or a leader that cannot reach a quorum: an election is (about to be) on.
            _ => Refused::NotReady,
        };
        let primary = leader
            .and_then(|l| self.node(l))
            .and_then(|n| split_addr(&n.client));
        NotServed { why, primary }
    }

    /// C10: this node leads but has heard from no quorum for [`CUT_OFF_WINDOWS`] adaptive
    /// leases (election-max on a quiet link, stretched on a slow one: C15 amended) — as long as
    /// its followers wait before they campaign (the lease, then an election timeout of at most
    /// election-max, stretched alike): the others may be electing a new leader, so it must not
    /// present itself as primary, nor serve its clients (their connections close, waiting
    /// writes end as outcome unknown, waiting reads as not primary). Ends when a quorum
    /// answers again (or another leader deposes it). A silence shorter than that is what the
    /// first long gaps of a link that has just become congested look like, before the adaptive
    /// lease has measured them: the clients' calls wait it out instead of being turned away
    /// and reconnecting over the same congested links. Nothing else rests on it: a lease read
    /// needs fresh answers from a quorum whatever this says (`node/vouch.rs::lease_valid`), a
    /// deposed leader stops serving at once (its state is no longer Leader), a write commits
    /// only through a quorum, and a request read by a leader that is deposed before applying it
    /// still closes its connection (`node/tenure.rs`).
    pub fn leader_cut_off(&self) -> bool {
        self.cut_off_in(&self.raft.metrics().borrow())
    }

    /// The silence after which a leader calls itself cut off (C10).
    pub fn cut_off_window(&self) -> Duration {
        self.elect.pace().lease() * CUT_OFF_WINDOWS
    }

    fn cut_off_in(&self, m: &RaftMetrics<NodeId, CtrlNode>) -> bool {
        if m.state != ServerState::Leader {
            return false;
        }
        let configs = m.membership_config.membership().get_joint_config();
        self.lease.cut_off(
            &m.vote,
            configs,
            self.id,
            self.cut_off_window(),
            BootInstant::now(),
        )
    }

    /// A leader that serves right now (C2, C10, C11).
    pub fn serving_leader(&self) -> bool {
        let rx = self.raft.metrics();
        let m = rx.borrow();
        m.state == ServerState::Leader
            && !self.cut_off_in(&m)
            && self.ready.is_ready(&m.vote)
            && !self.diverged.is()
            && !crate::base::fault::faulted()
    }

    /// Resolves once this node is a cut-off leader (C10): ends a read or write that waits for
    /// a quorum which is not answering.
    pub(crate) async fn until_cut_off(&self) {
        loop {
            tokio::time::sleep(STALE_LEADER_RECHECK).await;
            if self.leader_cut_off() {
                return;
            }
        }
    }

    /// C3 write: commit through the log, then answer with the applied outcome. Remembered in
    /// the exactly-once table under `w.client_id` (C13 amended: the caller's id bound to its
    /// identity, `base/auth.rs::bound_client_id`).
    pub async fn write(&self, w: &Write<'_>, cmd: Cmd) -> Result<Outcome, NotServed> {
        let p = Proposal {
            client_id: w.client_id,
            request_id: w.request_id,
            now_ms: now_ms(),
            cmd,
        };
        let res = tokio::select! {
            r = tokio::time::timeout(COMMIT_TIMEOUT, self.proposer.write(p)) => r,
            () = self.until_cut_off() => return Err(self.outcome_unknown(w.seq, w.name)),
        };
        match res {
            Ok(Ok(outcome)) => Ok(outcome),
            // openraft answers ForwardToLeader for a proposal it never appended, or for one
            // whose entry it truncated (never committed): not applied.
            Ok(Err(WriteFail::NotLeader(leader))) => Err(self.not_primary(w.join, leader)),
            // Handed to the log and not confirmed: it may still commit (F19 amended).
            Ok(Err(WriteFail::Busy)) | Err(_) => Err(self.outcome_unknown(w.seq, w.name)),
        }
    }

    /// F19 (amended): a write handed to the log whose commit this node could not confirm
    /// (commit timeout, leadership lost or cut off): `E_XCE_UNKNOWN`, never NOT_READY or
    /// NOMASTER, which promise "not applied". The client re-sends it with the same request id
    /// (the exactly-once table answers with the first outcome if it did commit). A redirect
    /// hint is attached when another leader is known. `name`: the op's, for the log.
    pub fn outcome_unknown(&self, seq: u64, name: &str) -> NotServed {
        let mut r = self.not_primary(false, None);
        crate::log_warn!(
            "node {}: {name} (seq {seq}) placed in the log, commit not confirmed: outcome unknown",
            self.id,
        );
        r.why = Refused::Unknown;
        r
    }
}
