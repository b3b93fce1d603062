//! C15: who may campaign, when, and only after a pre-vote; and a campaign right when a crashed
//! leader's lease lapses.
//!
//! **Pre-vote (P14: at most one election per fault).** openraft 0.9 raises its term on every
//! candidacy, and a higher term reaching the leader deposes it. So a node cut off from its
//! peers campaigned again and again, and when it came back its term deposed a healthy leader;
//! a node catching up over a slow link did the same. openraft has no pre-vote, so its own
//! timer-driven elections stay off (the runtime `elect` switch is off for good) and this module
//! runs the election timer: a voter that has not heard from a leader for openraft's interval
//! (the lease after an append of a committed vote, plus a random election-min..max timeout;
//! the timeout alone after an uncommitted vote) first asks the other voters, over the raft
//! port ([`crate::raft::frame::PreVoteRequest`], admitted like every raft message: mutual TLS between
//! members), whether they would vote for it in its term + 1 with its last log id. A peer says
//! yes only if its C11 and C12 guards would not refuse the vote, it is not the leader (unless
//! it handed over, C14), it has not accepted an append of a committed vote within the lease,
//! and the candidate's log is at least as up to date as its own — openraft's own rules for a
//! vote, asked without changing anything. Only with a quorum of yes (itself included; every
//! config of a joint membership) does the node call [`Raft::trigger`]`().elect()`. A node cut
//! off from its peers never raises its term; one that rejoins a cluster with a live leader
//! never disrupts it. A node that granted a pre-vote waits a fresh timeout before its own, so
//! that the candidate it answered is not met by a rival of the same term. C14's handover is
//! the one sanctioned election without a pre-vote (`handover.rs`).
//!
//! **Holds.** Several parts of the controller keep a node from campaigning for a while: C12 (a
//! node that lost its data, until caught up) and C14 (a leader that handed leadership over,
//! until it exits or is electable again). Each one is a [`Hold`] on [`Elections`]; the timer
//! and the early campaign below campaign only when no hold is set.
//!
//! **The early campaign.** A follower campaigns by the timer only after the leader lease
//! (election-max) *plus* its own random election timeout (election-min..max) have passed since
//! the last append it accepted, and every follower refuses votes for the lease after such an
//! append. When the leader's process dies its kernel closes the raft connections it had open to
//! the followers: that close is evidence. A follower that saw the connection carrying its
//! leader's appends close, and has accepted no append since, campaigns (after a pre-vote)
//! right when its own lease lapses — instead of a whole random timeout later — staggered by its
//! rank among the other voters (lowest id first: a later candidate of the same term has a
//! higher id, so an earlier one that lost grants it its vote).
//!
//! **The decision and the election are one step (issue 25, defect 4).** A campaign decides on
//! what it read of the Raft state (no append accepted since `utime`, the vote unchanged), then
//! asks for a pre-vote, which takes a round trip. Re-reading the state and then calling
//! `trigger().elect()` were two turns of the Raft core: an append accepted between them
//! refreshed the old leader's lease on this node (so that leader went on serving lease reads,
//! counting this node's acknowledgement), and the node campaigned right after anyway — with a
//! slow third node, a new leader could be elected while the old one still served reads from
//! its lease. Now the election goes through `trigger().elect_if(vote, utime)` (openraft change
//! 4, `vendor/openraft/XCE-PATCH.md`): the Raft core compares the vote and its last-modified
//! time with the ones the decision read, and elects only if both are unchanged, in the same
//! turn — no append can be accepted between the check and the new term. So every campaign
//! starts at an instant at which this node has accepted no append for the lease (the
//! decision's condition still holds), which is what the argument below needs.
//! `controller/tests/it/early_campaign.rs` holds the window open with the failpoint
//! `elect-campaign` and resumes the old leader inside it: its append is accepted, and no term
//! is raised.
//!
//! **Why lease reads stay safe, by construction.** A follower F campaigns early only when
//! `now > utime(F) + lease` on its own clock, where `utime(F)` is when F last accepted an
//! append of the leader's vote: exactly the instants at which openraft would grant another
//! candidate F's vote anyway (and never while C11's [`crate::raft::lease::VoteGuard`] refuses votes
//! after a restart). So no new quorum can include F earlier than before. The closed connection
//! only chooses *when* within the already-permitted time F acts; a wrong guess (a live leader
//! whose connection closed — a firewall REJECT, a reset) costs at most a pre-vote, not safety,
//! and an append accepted after the close cancels it. Pre-vote only removes candidacies: a
//! real vote is still granted or refused by openraft (behind C11 and C12) exactly as before,
//! so every quorum that can form now could form without it. The leader answers reads from its
//! lease only while a quorum accepted appends it SENT less than the lease-read window `W` ago
//! ([`lease_read_window`]); such a follower received the append after it was sent, so with a
//! clock-rate drift of at most `ρ` between any two nodes the inequality relied on is
//!
//! ```text
//!     W · (1 + ρ)  <  lease · (1 − ρ)        (W = lease / 3: holds for any ρ < 1/2)
//! ```
//!
//! **Adaptive timing (C15 amended).** Where this module says "the lease" for a decision of its
//! own — when the timer campaigns, when a pre-vote is refused, when the early campaign starts —
//! it means the adaptive lease of [`Pace`]: election-max on a quiet link, stretched to fit the
//! measured silences on a slow one, never below election-max. The `lease` and `W` of the
//! inequality are the configured ones and never adapt (openraft refuses real votes for
//! election-max; [`lease_read_window`] takes the configured value), so waiting longer changes
//! when a node acts, never what the inequality compares (`raft/pace.rs`).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::storage::RaftLogStorage;
use openraft::ServerState;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::base::ids::{LogId, NodeId, Vote};
use crate::raft::forward::Forwarder;
use crate::raft::frame::PreVoteRequest;
use crate::raft::lease::{joint_quorum, VoteGuard};
use crate::raft::pace::Pace;
use crate::raft::types::Raft;

/// The window within which a quorum must have accepted appends SENT by the leader for it to
/// answer a read from its state (C3): a third of openraft's leader lease (`election_max_ms`),
/// the time a follower refuses every other candidate after accepting an append. See the module
/// documentation for the inequality this keeps.
pub fn lease_read_window(election_max_ms: u64) -> Duration {
    crate::raft::lease::window_within(Duration::from_millis(election_max_ms))
}

/// A reason not to campaign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// C12: started without data and not caught up yet.
    CatchingUp = 1,
    /// C14: handed leadership over (stopping, or about to be removed).
    HandedOver = 2,
    /// C14 (issue 36): another standby was named by a handover entry of the leader this node
    /// follows; it campaigns, this one waits (`raft/handover.rs::follow`).
    Yielding = 4,
}

/// The timing of the early campaign.
#[derive(Debug, Clone, Copy)]
pub struct EarlyTiming {
    /// Delay between ranks (half a heartbeat); rank 0 waits half of it past the lease, for a
    /// follower that accepted the last append a little later than this one.
    pub step: Duration,
}

/// The election timer's timing: openraft's (`--election-min-ms`, `--election-max-ms`),
/// stretched as the links are slow (C15 amended, [`Pace`]: never below these).
#[derive(Clone)]
pub struct Timing {
    pub min: Duration,
    pub max: Duration,
    pub pace: Arc<Pace>,
}

impl Timing {
    /// The lease a follower waits out after the last append it accepted before it campaigns
    /// or grants a pre-vote: openraft's leader lease (election-max), stretched on slow links.
    fn lease(&self) -> Duration {
        self.pace.lease()
    }

    /// A random election timeout in min..max (stretch it when it is used: [`Pace::stretch`]).
    fn random(&self) -> Duration {
        let span = (self.max - self.min).as_micros().max(1) as u64;
        let r = ring::rand::generate::<[u8; 8]>(&ring::rand::SystemRandom::new())
            .map(|r| u64::from_le_bytes(r.expose()))
            .unwrap_or(0);
        self.min + Duration::from_micros(r % span)
    }

    /// How long a pre-vote waits for its quorum: a few leases (a congested link queues a
    /// request for hundreds of milliseconds; a quorum that answers ends it at once).
    fn pre_vote_wait(&self) -> Duration {
        self.lease() * 4
    }
}

/// Owner of the campaigns: the election timer, the early campaign, the holds and pre-vote.
pub struct Elections {
    raft: Raft,
    id: NodeId,
    holds: Mutex<u8>,
    /// `None`: `--early-campaign off`.
    early: Option<EarlyTiming>,
    timing: Timing,
    guard: VoteGuard,
    closed: mpsc::UnboundedSender<Vote>,
    /// Pre-vote requests go out on their own kept connections to the peers' raft ports.
    asker: Arc<Forwarder>,
    /// This node's log: the last log id a pre-vote compares.
    log: crate::raft::store::LogStore,
    /// One campaign (pre-vote, then the election) at a time.
    campaigning: tokio::sync::Mutex<()>,
    /// When this node last granted a pre-vote.
    granted: Mutex<Option<Instant>>,
    /// The last term a failed pre-vote was logged for (one line per term).
    logged_term: AtomicU64,
}

/// What a campaign decision reads of the Raft state.
struct Seen {
    state: ServerState,
    voter: bool,
    vote: Vote,
    utime: Option<Instant>,
    configs: Vec<BTreeSet<NodeId>>,
    /// The other voters and their raft addresses.
    peers: Vec<(NodeId, String)>,
}

impl Elections {
    /// Starts the owner, its election timer and (with `early`) the task that campaigns after a
    /// leader's close. openraft's own timer must be off (`Config::enable_elect`).
    pub fn start(
        raft: Raft,
        id: NodeId,
        early: Option<EarlyTiming>,
        timing: Timing,
        guard: VoteGuard,
        asker: Forwarder,
        log: crate::raft::store::LogStore,
    ) -> Arc<Elections> {
        let (closed, rx) = mpsc::unbounded_channel();
        let e = Arc::new(Elections {
            raft,
            id,
            holds: Mutex::new(0),
            early,
            timing,
            guard,
            closed,
            asker: Arc::new(asker),
            log,
            campaigning: tokio::sync::Mutex::new(()),
            granted: Mutex::new(None),
            logged_term: AtomicU64::new(0),
        });
        if early.is_some() {
            tokio::spawn(watch_closes(e.clone(), rx));
        }
        tokio::spawn(run_timer(e.clone()));
        e
    }

    /// Sets (`on`) or clears a hold; this node campaigns exactly when no hold is set.
    pub fn hold(&self, why: Hold, on: bool) {
        let mut holds = self.holds.lock().expect("elect holds");
        if on {
            *holds |= why as u8;
        } else {
            *holds &= !(why as u8);
        }
    }

    /// C15 (amended): the measured silences of this node's peers ([`Pace`]).
    pub fn pace(&self) -> &Arc<Pace> {
        &self.timing.pace
    }

    pub fn held(&self, why: Hold) -> bool {
        *self.holds.lock().expect("elect holds") & why as u8 != 0
    }

    /// Whether this node may campaign at all now (no hold, and its disk has not failed: C21).
    pub fn allowed(&self) -> bool {
        *self.holds.lock().expect("elect holds") == 0 && !crate::base::fault::faulted()
    }

    /// The raft server: a connection that carried appends of the committed `vote` closed.
    pub fn leader_link_closed(&self, vote: Vote) {
        if self.early.is_some() && vote.is_committed() {
            let _ = self.closed.send(vote);
        }
    }

    async fn seen(&self) -> Option<Seen> {
        let me = self.id;
        self.raft
            .with_raft_state(move |st| {
                let m = st.membership_state.effective();
                let configs = m
                    .membership()
                    .get_joint_config()
                    .iter()
                    .map(|c| c.iter().copied().collect())
                    .collect();
                let peers = m
                    .voter_ids()
                    .filter(|&n| n != me)
                    .filter_map(|n| m.get_node(&n).map(|node| (n, node.raft.clone())))
                    .collect();
                Seen {
                    state: st.server_state,
                    voter: m.voter_ids().any(|n| n == me),
                    vote: *st.vote_ref(),
                    utime: st.vote_last_modified(),
                    configs,
                    peers,
                }
            })
            .await
            .ok()
    }

    async fn last_log_id(&self) -> Option<LogId> {
        let mut log = self.log.clone();
        log.get_log_state().await.ok().and_then(|s| s.last_log_id)
    }

    /// Whether this node heard from a leader within the lease: it accepted an append of a
    /// committed vote (openraft refuses a real vote then too).
    fn hears_leader(&self, s: &Seen, now: Instant) -> bool {
        s.vote.is_committed()
            && s.state != ServerState::Leader
            && s.utime.is_some_and(|u| now <= u + self.timing.lease())
    }

    /// The raft server: a pre-vote (after C11's and C12's refusals). Yes only if this node
    /// does not lead (or handed over, C14), has not heard from a leader within the lease, and
    /// the candidate's log is at least as up to date as its own.
    pub async fn would_vote(&self, r: &PreVoteRequest) -> bool {
        let Some(s) = self.seen().await else {
            return false;
        };
        if s.state == ServerState::Leader && !self.held(Hold::HandedOver) {
            return false;
        }
        if self.hears_leader(&s, Instant::now()) {
            return false;
        }
        if r.last_log_id < self.last_log_id().await {
            return false;
        }
        *self.granted.lock().expect("granted") = Some(Instant::now());
        true
    }

    /// When this node last granted a pre-vote.
    fn granted_at(&self) -> Option<Instant> {
        *self.granted.lock().expect("granted")
    }

    /// A campaign: a pre-vote, then — with a quorum of yes, no append accepted meanwhile and no
    /// hold — openraft's election. `decided`: what the caller's decision read of the Raft
    /// state; it is the one value every later check compares with (C15 fifth round: an append
    /// accepted after the decision — while this waited for another campaign, say — calls the
    /// campaign off, whatever a fresh reading would say). Returns false when it did not
    /// campaign (or Raft is gone). `why` and `tag` name the reason in the log line of a
    /// campaign.
    async fn campaign(&self, why: &str, tag: &str, decided: Seen) -> bool {
        // Issue 35 defect 2's window, held open by a failpoint in its test: after the decision,
        // before this campaign reads the state again (another campaign may hold the lock).
        crate::base::failpoints::pause_in_task(crate::base::failpoints::ELECT_DECIDED);
        let _one = self.campaigning.lock().await;
        let Some(now) = self.seen().await else {
            return false;
        };
        if !now.voter || now.state == ServerState::Leader || !self.allowed() {
            return false;
        }
        if (now.vote, now.utime) != (decided.vote, decided.utime) {
            crate::base::counters::campaign("called_off");
            eprintln!(
                "node {}: {why}: campaign called off before its pre-vote: an append was \
                 accepted (or the vote changed) since the decision (C15)",
                self.id
            );
            return false;
        }
        let s = decided;
        // A candidate this node just said yes to is probably campaigning: no rival.
        if self
            .granted_at()
            .is_some_and(|g| g.elapsed() < self.timing.pace.stretch(self.timing.min))
        {
            return false;
        }
        let term = s.vote.leader_id().term + 1;
        let req = PreVoteRequest {
            term,
            candidate: self.id,
            last_log_id: self.last_log_id().await,
        };
        if !self.pre_vote(&s, &req).await {
            crate::base::counters::campaign("not_granted");
            if self.logged_term.swap(term, Ordering::Relaxed) != term {
                eprintln!(
                    "node {}: {why}: pre-vote for term {term} not granted by a quorum: not campaigning",
                    self.id
                );
            }
            return false;
        }
        // Defect 4's window, held open by a failpoint in its test: after the decision, before
        // the election.
        crate::base::failpoints::pause_in_task(crate::base::failpoints::ELECT_CAMPAIGN);
        if !self.allowed() {
            return false;
        }
        // Still no append accepted, still the same vote, still not leading — checked in the
        // very turn of the Raft core that starts the election (openraft change 4, see the
        // module documentation): an append accepted after the decision calls it off.
        match self.raft.trigger().elect_if(s.vote, s.utime).await {
            Ok(true) => {
                crate::base::counters::campaign("campaigned");
                let ms = crate::base::clock::now_ms();
                eprintln!(
                    "node {}: {why}: campaigning ({tag}pre-vote for term {term} granted) at={}.{:03}",
                    self.id,
                    ms / 1000,
                    ms % 1000
                );
                true
            }
            Ok(false) => {
                crate::base::counters::campaign("called_off");
                eprintln!(
                    "node {}: {why}: campaign for term {term} called off: an append was accepted \
                     (or the vote changed) since the decision (C15)",
                    self.id
                );
                false
            }
            Err(_) => false,
        }
    }

    /// Asks every other voter; true once the granting nodes are a quorum of every config,
    /// false when that can no longer happen or the wait ends. This node counts itself only
    /// under its own rule (C15 fifth round): not hearing a leader, as of the decision `s`.
    async fn pre_vote(&self, s: &Seen, req: &PreVoteRequest) -> bool {
        let mut yes = BTreeSet::new();
        if !self.hears_leader(s, Instant::now()) {
            yes.insert(self.id);
        }
        if joint_quorum(&s.configs, |n| yes.contains(&n)) {
            return true;
        }
        let wait = self.timing.pre_vote_wait();
        let mut asks = tokio::task::JoinSet::new();
        for (id, addr) in s.peers.clone() {
            let (asker, req) = (self.asker.clone(), req.clone());
            asks.spawn(async move { (id, asker.pre_vote(id, &addr, &req, wait).await) });
        }
        while let Some(r) = asks.join_next().await {
            if let Ok((id, Some(true))) = r {
                yes.insert(id);
                if joint_quorum(&s.configs, |n| yes.contains(&n)) {
                    return true;
                }
            }
        }
        false
    }
}

/// The election timer: campaigns (after a pre-vote) when openraft's own timer would have.
async fn run_timer(e: Arc<Elections>) {
    let mut changes = e.raft.server_metrics();
    let mut timeout = e.timing.random();
    let mut not_before = Instant::now();
    loop {
        let Some(s) = e.seen().await else { return };
        let now = Instant::now();
        let due = if !s.voter || s.state == ServerState::Leader {
            None
        } else if s.configs.iter().all(|c| c.len() == 1 && c.contains(&e.id))
            && s.state != ServerState::Candidate
        {
            Some(not_before) // the only voter: at once, as openraft does
        } else {
            // Stretched now, as the lease is (C15 amended): the links may have slowed since
            // the timeout was drawn.
            let timeout = e.timing.pace.stretch(timeout);
            let wait = if s.vote.is_committed() {
                e.timing.lease() + timeout
            } else {
                timeout
            };
            let mut due = s.utime.map_or(now, |u| u + wait).max(not_before);
            if let Some(g) = e.granted_at() {
                due = due.max(g + timeout);
            }
            Some(due)
        };
        match due {
            Some(due) if due <= now => {
                if e.allowed() {
                    e.campaign("no leader heard for an election timeout", "", s)
                        .await;
                }
                timeout = e.timing.random();
                not_before = Instant::now() + e.timing.pace.stretch(timeout);
            }
            _ => {
                // Until due, or a change of role or leader; re-read at least every lease.
                let until = due.unwrap_or(now + e.timing.lease());
                tokio::select! {
                    () = tokio::time::sleep_until(until) => {}
                    r = changes.changed() => if r.is_err() { return },
                }
            }
        }
    }
}

/// What a follower knows when its leader's connection closed.
struct Following {
    /// When it last accepted an append of the leader's vote (openraft's clock).
    utime: Instant,
    /// Its rank among the voters other than the leader, by id.
    rank: u32,
}

/// This node's state if it follows `vote` (committed, another node's) as a voter.
async fn following(raft: &Raft, me: NodeId, vote: Vote) -> Option<Following> {
    raft.with_raft_state(move |st| {
        let leader = vote.leader_id().voted_for()?;
        if st.vote_ref() != &vote || leader == me || st.server_state != ServerState::Follower {
            return None;
        }
        let mut voters: Vec<NodeId> = st
            .membership_state
            .effective()
            .voter_ids()
            .filter(|&n| n != leader)
            .collect();
        voters.sort_unstable();
        let rank = voters.iter().position(|&n| n == me)? as u32;
        Some(Following {
            utime: st.vote_last_modified()?,
            rank,
        })
    })
    .await
    .ok()
    .flatten()
}

async fn watch_closes(e: Arc<Elections>, mut rx: mpsc::UnboundedReceiver<Vote>) {
    let Some(t) = e.early else { return };
    while let Some(vote) = rx.recv().await {
        // Several connections of one leader close together: one decision per vote.
        let mut vote = vote;
        while let Ok(v) = rx.try_recv() {
            vote = v;
        }
        let closed_at = Instant::now();
        let Some(f) = following(&e.raft, e.id, vote).await else {
            continue;
        };
        if f.utime > closed_at {
            continue; // an append came after the close: the leader is there
        }
        eprintln!(
            "node {}: the raft connection of the primary (node {}) closed without a goodbye: \
             campaigning when the lease lapses unless an append comes first",
            e.id,
            vote.leader_id().voted_for().unwrap_or_default()
        );
        // The lease as it is when the wait ends (it may have stretched meanwhile, C15 amended).
        let at = || f.utime + e.timing.lease() + t.step / 2 + t.step * f.rank;
        while Instant::now() < at() {
            tokio::time::sleep_until(at()).await;
        }
        // The decision, in one reading: still following that vote, with no append accepted
        // since — its lease has lapsed here.
        let Some(s) = e.seen().await else { return };
        if s.vote != vote || s.utime != Some(f.utime) || !e.allowed() || e.guard.refuses() {
            continue;
        }
        let leader = vote.leader_id().voted_for().unwrap_or_default();
        let why = format!(
            "the connection of the primary (node {leader}) closed and its lease lapsed with no append since"
        );
        e.campaign(&why, &format!("C15, rank {}, ", f.rank), s)
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(pace: Arc<Pace>) -> Timing {
        Timing {
            min: Duration::from_millis(60),
            max: Duration::from_millis(120),
            pace,
        }
    }

    fn pace() -> Arc<Pace> {
        Arc::new(Pace::new(crate::raft::pace::Bounds {
            lease: Duration::from_millis(120),
            ceiling: Duration::from_millis(2000),
        }))
    }

    #[test]
    fn election_timeouts_are_random_within_min_max() {
        let t = timing(pace());
        let seen: Vec<Duration> = (0..200).map(|_| t.random()).collect();
        assert!(seen.iter().all(|d| *d >= t.min && *d < t.max), "{seen:?}");
        let distinct: std::collections::BTreeSet<_> = seen.iter().collect();
        assert!(
            distinct.len() > 100,
            "not random: {} distinct",
            distinct.len()
        );
        assert_eq!(t.lease(), t.max, "a quiet link: openraft's lease");
    }

    /// C15 (amended): on a slow link the lease and the timeouts stretch by one factor, so the
    /// timeout keeps its spread; neither ever drops below the configured values.
    #[test]
    fn a_slow_link_stretches_lease_and_timeouts_alike() {
        let p = pace();
        let mut v = Vote::new(3, 1);
        v.commit();
        let now = crate::base::clock::BootInstant::now();
        let mut at = crate::base::clock::BootInstant(now.0 - Duration::from_millis(1250));
        p.heard(1, v, at);
        for _ in 0..4 {
            at = at.add(Duration::from_millis(300)); // gaps of 300 ms: lease 600 ms, × 5
            p.heard(1, v, at);
        }
        let t = timing(p);
        // `lease()` reads the clock: the samples above are the last 1.25 s before it.
        assert_eq!(t.lease(), Duration::from_millis(600));
        let seen: Vec<Duration> = (0..200).map(|_| t.pace.stretch(t.random())).collect();
        let (lo, hi) = (Duration::from_millis(300), Duration::from_millis(600));
        assert!(seen.iter().all(|d| *d >= lo && *d < hi), "{seen:?}");
        assert!(t.pre_vote_wait() >= t.lease());
    }

    /// The inequality of the module documentation, for the default and the old timings and a
    /// drift far beyond any real clock (10%).
    #[test]
    fn lease_read_window_is_well_inside_the_vote_refusal() {
        for max in [120u64, 300, 800] {
            let w = lease_read_window(max).as_secs_f64();
            let lease = Duration::from_millis(max).as_secs_f64();
            let rho = 0.10;
            assert!(w * (1.0 + rho) < lease * (1.0 - rho), "max {max}");
        }
    }
}
