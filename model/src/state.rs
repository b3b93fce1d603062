//! The state of the model: three (or four) nodes, the messages in flight, and the ghost
//! history the properties are judged on.

use std::collections::BTreeSet;
use std::fmt;

/// A node id, 1..=4; a set of them is a bit mask with bit `id`.
pub type Id = u8;
/// Ticks since something happened, saturated at the largest age that still means anything
/// (`Options::utime_cap`, `boot_cap`, `send_cap`: older is "long ago").
pub type Age = u8;

pub fn has(set: u8, id: Id) -> bool {
    set & (1 << id) != 0
}

pub fn ids_of(set: u8) -> impl Iterator<Item = Id> {
    (1..=4).filter(move |&id| has(set, id))
}

/// openraft's leader id in "adv" mode: (term, node id), ordered lexicographically. It plays the
/// role of a Raft term: two leader ids of one term can both be elected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaderId {
    pub term: u8,
    pub node: Id,
}

/// openraft's `Vote`: a leader id and whether a quorum granted it; ordered by leader id, then
/// committed (the derived order, fields in this order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Vote {
    pub leader: LeaderId,
    pub committed: bool,
}

impl Vote {
    pub fn new(term: u8, node: Id) -> Vote {
        Vote {
            leader: LeaderId { term, node },
            committed: false,
        }
    }
}

/// A membership config (C17): voters (one set, or two in a joint config) and learners.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Config {
    pub voters: u8,
    /// The new voters of a joint config (0: not joint).
    pub joint: u8,
    pub learners: u8,
}

impl Config {
    /// The voter sets a quorum must be a majority of, each (`raft/lease.rs::joint_quorum`).
    pub fn quorum(&self, ok: impl Fn(Id) -> bool) -> bool {
        let majority = |set: u8| 2 * ids_of(set).filter(|&id| ok(id)).count() > ids_of(set).count();
        majority(self.voters) && (self.joint == 0 || majority(self.joint))
    }

    pub fn all_voters(&self) -> u8 {
        self.voters | self.joint
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Payload {
    /// A membership entry; index 0 is the bootstrap one `initialize` writes.
    Config(Config),
    /// The entry a new leader appends first (openraft's blank entry; the readiness barrier).
    Blank,
    /// A client write, by its number.
    Write(u8),
    /// C14: hands leadership to this voter.
    Handover(Id),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entry {
    /// The leader id that created it (with its index: the entry's log id).
    pub leader: LeaderId,
    pub payload: Payload,
}

impl Default for Entry {
    fn default() -> Entry {
        Entry {
            leader: LeaderId::default(),
            payload: Payload::Blank,
        }
    }
}

/// Most entries a log (or an append) can hold: the bounds stay below it.
pub const LOG_CAP: usize = 6;

/// A log (or an append's entries) without an allocation: states are cloned and hashed for
/// every step the checker takes. Slots past `len` are always the default entry, so the
/// derived equality and hash see only the entries.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entries {
    len: u8,
    slots: [Entry; LOG_CAP],
}

impl Entries {
    pub fn from_slice(es: &[Entry]) -> Entries {
        let mut out = Entries::default();
        es.iter().for_each(|&e| out.push(e));
        out
    }

    pub fn push(&mut self, e: Entry) {
        self.slots[usize::from(self.len)] = e;
        self.len += 1;
    }

    pub fn truncate(&mut self, len: usize) {
        while usize::from(self.len) > len {
            self.len -= 1;
            self.slots[usize::from(self.len)] = Entry::default();
        }
    }
}

impl std::ops::Deref for Entries {
    type Target = [Entry];
    fn deref(&self) -> &[Entry] {
        &self.slots[..usize::from(self.len)]
    }
}

impl fmt::Debug for Entries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A log id: (leader id, index), ordered so.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LogId {
    pub leader: LeaderId,
    pub index: u8,
}

/// What a node's leader state holds (volatile).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Leading {
    /// Per node: the highest index its log is known to match (replication progress).
    pub matched: [Option<u8>; 4],
    /// Per node: the prev index of the next append (`None`: from the start).
    pub probe: [Option<u8>; 4],
    /// Per node: the age of the send of its newest accepted append (`raft/lease.rs::LeaseClock`).
    pub acks: [Age; 4],
    /// The first index this leadership appended (its readiness barrier, C11 amended).
    pub ready_at: u8,
    /// C14: handed over (`Hold::HandedOver`): serves and campaigns no more.
    pub handed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    Follower,
    /// Grants received (bit set), this node's own included.
    Candidate(u8),
    Leader(Leading),
}

/// A campaign decided (`raft/elect.rs::campaign`), its pre-vote under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Decision {
    /// The vote the decision was made on.
    pub vote: Vote,
    /// An append was accepted since (its `utime` moved).
    pub stale: bool,
    /// Pre-vote grants (bit set), this node's own included.
    pub yes: u8,
    /// The last log id the pre-vote requests carry.
    pub last: Option<LogId>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    // Persisted.
    pub vote: Vote,
    pub log: Entries,
    /// The leader's own entries not on its disk yet (openraft change 1): the log's suffix.
    pub unflushed: u8,
    /// C12: the `catching-up` marker.
    pub marker: bool,
    // Volatile.
    /// Entries committed (and applied: the state machine follows the commit at once).
    pub commit: u8,
    /// Age of the vote's last modification (openraft's `vote_last_modified`: every accepted
    /// append touches it).
    pub utime: Age,
    /// Age of this process (C11's guard).
    pub boot: Age,
    pub role: Role,
    pub decision: Option<Decision>,
    /// C12 fifth: the voters that answered the standing question (bit set), the greatest
    /// vote among the answers, and whether any showed a log beyond the bootstrap entry (all
    /// the floor needs of them, `rules::floor`).
    pub answered: u8,
    pub answers_max: Vote,
    pub answers_beyond: bool,
    /// C14: a fresh handover entry naming this node was applied: it elects at once.
    pub handover_due: bool,
    /// The log length this process found at start (`handover.rs::fresh`).
    pub start_len: u8,
}

impl Node {
    pub fn blank(o: &crate::Options) -> Node {
        Node {
            vote: Vote::default(),
            log: Entries::default(),
            unflushed: 0,
            marker: true,
            commit: 0,
            utime: o.utime_cap(),
            boot: o.boot_cap(),
            role: Role::Follower,
            decision: None,
            answered: 0,
            answers_max: Vote::default(),
            answers_beyond: false,
            handover_due: false,
            start_len: 0,
        }
    }

    pub fn log_id(&self, index: u8) -> Option<LogId> {
        self.log.get(usize::from(index)).map(|e| LogId {
            leader: e.leader,
            index,
        })
    }

    pub fn last_log_id(&self) -> Option<LogId> {
        let n = self.log.len() as u8;
        n.checked_sub(1).and_then(|i| self.log_id(i))
    }

    pub fn flushed_len(&self) -> u8 {
        self.log.len() as u8 - self.unflushed
    }

    /// The effective membership: the last config entry in the log (openraft), with its index.
    pub fn config(&self) -> Option<(u8, Config)> {
        self.log
            .iter()
            .enumerate()
            .rev()
            .find_map(|(i, e)| match e.payload {
                Payload::Config(c) => Some((i as u8, c)),
                _ => None,
            })
    }

    pub fn leading(&self) -> Option<&Leading> {
        match &self.role {
            Role::Leader(l) => Some(l),
            _ => None,
        }
    }

    pub fn is_voter(&self, me: Id) -> bool {
        self.config().is_some_and(|(_, c)| has(c.all_voters(), me))
    }
}

/// A request in flight; its answer is delivered with it (or lost), see `actions.rs`. (A
/// pre-vote and a standing question change nothing at their receiver and are answered at
/// once: they are steps of their own, `Action::PreVote` and `Action::Standing`.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    Vote {
        from: Id,
        to: Id,
        vote: Vote,
        last: Option<LogId>,
    },
    Append {
        from: Id,
        to: Id,
        vote: Vote,
        prev: Option<LogId>,
        entries: Entries,
        /// The leader's commit index (entries committed) when it was sent (change 2: it
        /// travels only on an append or heartbeat).
        commit: u8,
        /// Ticks since it was sent (the lease counts from the send).
        age: Age,
    },
}

impl Msg {
    pub fn to(&self) -> Id {
        match *self {
            Msg::Vote { to, .. } | Msg::Append { to, .. } => to,
        }
    }
}

/// What the properties are judged on: the history that no node's state keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ghost {
    /// Per index, the entry first committed (or applied) there and the leader id that did.
    pub committed: Vec<(Entry, LeaderId)>,
    /// Writes acknowledged to their client (bit set by write number).
    pub acked: u8,
    pub writes: u8,
    pub crashes: u8,
    pub wipes: u8,
    pub dups: u8,
    pub handovers: u8,
    pub changes: u8,
    /// The first broken property, and what broke it.
    pub broken: Option<Broken>,
}

/// A property broken by a step (history properties are checked where the history happens).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Broken {
    /// A leader created an entry whose log id another entry already has.
    SecondLogForLeaderId { at: LogId },
    /// A node applied an entry other than the one committed at that index, or truncated one
    /// it had applied.
    TwoEntriesApplied { node: Id, index: u8 },
    /// A node became leader without a write acknowledged before.
    AckedWriteLost { leader: Id, write: u8 },
    /// A read was served without a write acknowledged before it began.
    StaleRead { leader: Id, write: u8 },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub nodes: Vec<Node>,
    pub net: BTreeSet<Msg>,
    pub ghost: Ghost,
}

impl State {
    pub fn node(&self, id: Id) -> &Node {
        &self.nodes[usize::from(id - 1)]
    }

    pub fn node_mut(&mut self, id: Id) -> &mut Node {
        &mut self.nodes[usize::from(id - 1)]
    }

    pub fn break_once(&mut self, b: Broken) {
        self.ghost.broken.get_or_insert(b);
    }
}

impl fmt::Display for Vote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = if self.committed { "" } else { "?" };
        write!(f, "({},{}){c}", self.leader.term, self.leader.node)
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.payload {
            Payload::Config(c) if c.joint != 0 => format!("cfg{:b}/{:b}", c.voters, c.joint),
            Payload::Config(c) => format!("cfg{:b}", c.voters >> 1),
            Payload::Blank => "blank".into(),
            Payload::Write(w) => format!("W{w}"),
            Payload::Handover(to) => format!("handover→{to}"),
        };
        write!(f, "{}.{}:{what}", self.leader.term, self.leader.node)
    }
}
