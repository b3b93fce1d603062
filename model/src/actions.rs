//! The model's steps: what each node may do, what the network and the faults may do, and what
//! a step changes. Each rule names the code that implements it.

use stateright::Model;

use crate::options::Options;
use crate::rules::quorum;
use crate::state::{
    has, Broken, Decision, Entry, Id, LeaderId, Leading, LogId, Msg, Node, Payload, Role, State,
    Vote,
};

/// The controller's consensus rules as a stateright model.
#[derive(Clone, Debug)]
pub struct Raft {
    pub o: Options,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// `cmd/run.rs::initialize` on a node with no log and no vote: the bootstrap membership,
    /// then an election at once (openraft `Engine::initialize`).
    Initialize(Id),
    /// C12 fifth (`raft/standing.rs`): a node with the marker asks a voter for its standing
    /// (vote, log, membership) and hears the answer.
    Standing { from: Id, to: Id },
    /// `raft/elect.rs::pre_vote`: a voter answers yes to a campaign's pre-vote
    /// (`ports/peer.rs::answer_pre_vote`); a no changes nothing.
    PreVote { from: Id, to: Id },
    /// `raft/elect.rs::campaign`: decides on (vote, utime) and asks for a pre-vote.
    Decide(Id),
    /// `Trigger::elect_if` (openraft change 4): the election, after a pre-vote quorum.
    Elect(Id),
    /// C14 `raft/handover.rs::follow`: a fresh handover entry applied: `Trigger::elect`.
    HandoverElect(Id),
    /// A client write submitted to a leader (`node/ctx.rs::write`).
    Write(Id),
    /// The leader's own disk flush completes (openraft change 1, `raft/store.rs::Flusher`).
    Flush(Id),
    /// A leader sends an append (or heartbeat) to a node (`raft/link.rs`); `one`: only the
    /// first entry of the batch.
    Send { from: Id, to: Id, one: bool },
    /// C14 `raft/handover.rs::hand_over_to`: the handover entry naming a caught-up voter.
    Handover { from: Id, to: Id },
    /// C17 (`node/membership.rs`, openraft `change_membership`): the leader appends a
    /// membership entry, effective at once (the last one in the log counts); the previous one
    /// must be committed. Adding a voter or removing one goes through a joint config.
    Change {
        leader: Id,
        to: crate::state::Config,
    },
    /// A lease read (`node/ctx.rs`, `raft/lease.rs::LeaseClock::lease_holds`).
    Read(Id),
    /// A request delivered; its answer delivered too (`true`) or lost.
    Deliver(Msg, bool),
    /// A request delivered and kept for another delivery.
    Duplicate(Msg),
    /// A request lost.
    Drop(Msg),
    /// `kill -9` and a restart: volatile state and the unflushed suffix lost.
    Crash(Id),
    /// The data directory lost: the node restarts blank, with the marker.
    Wipe(Id),
    /// The clock moves one tick on every node.
    Tick,
}

/// An append's outcome at the follower: `Some(reach)` success, `None` a conflict.
type Reply = Option<Option<LogId>>;

impl Raft {
    pub fn new(o: Options) -> Raft {
        Raft { o }
    }

    fn ids(&self) -> impl Iterator<Item = Id> {
        self.o.ids()
    }

    /// The node's vote moves to `v` or is touched (openraft `update_vote`): a pending flush
    /// first (`Flusher::wait_idle`), saved, `utime` now; a leader or candidate of another vote
    /// steps down. An append accepted since a campaign's decision makes it stale.
    fn accept_vote(&self, s: &mut State, n: Id, v: Vote) {
        let node = s.node_mut(n);
        node.unflushed = 0;
        if v > node.vote {
            node.vote = v;
            node.role = Role::Follower;
        }
        node.utime = 0;
        if let Some(d) = node.decision.as_mut() {
            d.stale = true;
        }
    }

    /// openraft `Engine::elect`: the next term, voting for itself (saved), vote requests out.
    fn elect(&self, s: &mut State, n: Id) {
        let node = s.node_mut(n);
        node.unflushed = 0;
        node.vote = Vote::new(node.vote.leader.term + 1, n);
        node.utime = 0;
        node.role = Role::Candidate(1 << n);
        node.decision = None;
        let (vote, last) = (node.vote, node.last_log_id());
        let voters = node.config().map_or(0, |(_, c)| c.all_voters());
        for to in self.ids().filter(|&to| to != n && has(voters, to)) {
            s.net.insert(Msg::Vote {
                from: n,
                to,
                vote,
                last,
            });
        }
        if quorum(s.node(n), 1 << n) {
            self.become_leader(s, n);
        }
    }

    /// A quorum granted: the vote committed (saved: C12's `Amnesia::vote_saved`), the leader
    /// state, and the blank entry of its leader id (flushed later: change 1).
    fn become_leader(&self, s: &mut State, n: Id) {
        let node = s.node_mut(n);
        node.vote.committed = true;
        node.utime = 0;
        if matches!(self.o.c12, crate::C12::Today | crate::C12::Fifth) {
            node.marker = false; // `caught_up_by(Fact::VoteSaved)`: elected since it started blank
        }
        let len = node.log.len() as u8;
        node.role = Role::Leader(Leading {
            matched: [None; 4],
            probe: [len.checked_sub(1); 4],
            acks: [self.o.send_cap(); 4],
            ready_at: len,
            handed: false,
        });
        let log = node.log;
        for w in 0..8 {
            let in_log = log.iter().any(|e| e.payload == Payload::Write(w));
            if has(s.ghost.acked, w) && !in_log {
                s.break_once(Broken::AckedWriteLost {
                    leader: n,
                    write: w,
                });
            }
        }
        self.append_own(s, n, Payload::Blank);
    }

    /// The leader appends an entry of its own leader id, not flushed yet (change 1).
    fn append_own(&self, s: &mut State, n: Id, payload: Payload) {
        let node = s.node(n);
        let e = Entry {
            leader: node.vote.leader,
            payload,
        };
        let at = LogId {
            leader: e.leader,
            index: node.log.len() as u8,
        };
        if self.log_id_taken(s, at, e) {
            s.break_once(Broken::SecondLogForLeaderId { at });
        }
        let node = s.node_mut(n);
        node.log.push(e);
        node.unflushed += 1;
        if self.o.c12 == crate::C12::Issue25 {
            node.marker = false; // the old rule: the last entry it holds is its own
        }
        self.leader_commit(s, n);
    }

    /// One log per leader id: whether an entry other than `e` has log id `at` anywhere.
    fn log_id_taken(&self, s: &State, at: LogId, e: Entry) -> bool {
        let other = |x: &Entry| x.leader == at.leader && *x != e;
        let in_logs = s
            .nodes
            .iter()
            .any(|n| n.log.get(usize::from(at.index)).is_some_and(other));
        let in_net = s.net.iter().any(|m| match m {
            Msg::Append { prev, entries, .. } => {
                let first = prev.map_or(0, |p| p.index + 1);
                entries
                    .iter()
                    .enumerate()
                    .any(|(k, x)| first + k as u8 == at.index && other(x))
            }
            _ => false,
        });
        in_logs || in_net
    }

    /// The leader's commit (openraft's quorum of matched progress): the last entry of its own
    /// leader id held by a quorum — itself only once flushed (change 1).
    fn leader_commit(&self, s: &mut State, n: Id) {
        let node = s.node(n);
        let Some(l) = node.leading() else { return };
        let me = node.vote.leader;
        let flushed = node.flushed_len();
        let new = (node.commit..node.log.len() as u8).rev().find(|&i| {
            node.log[usize::from(i)].leader == me
                && quorum(
                    node,
                    self.ids().fold(0, |set, id| {
                        let holds = if id == n {
                            i < flushed
                        } else {
                            l.matched[usize::from(id - 1)].is_some_and(|m| m >= i)
                        };
                        set | u8::from(holds) << id
                    }),
                )
        });
        if let Some(i) = new {
            self.apply(s, n, i + 1, me, true);
        }
    }

    /// Entries up to `upto` committed on `n` (committed by leader id `by`) and applied: the
    /// ghost's one history, the writes a leader acknowledges, a handover entry for `n`.
    fn apply(&self, s: &mut State, n: Id, upto: u8, by: LeaderId, leader: bool) {
        let from = s.node(n).commit;
        for i in from..upto {
            let node = s.node(n);
            let e = node.log[usize::from(i)];
            let (start_len, vote) = (node.start_len, node.vote);
            match s.ghost.committed.get(usize::from(i)) {
                Some((c, _)) if *c != e => {
                    s.break_once(Broken::TwoEntriesApplied { node: n, index: i })
                }
                Some(_) => {}
                None => s.ghost.committed.push((e, by)),
            }
            match e.payload {
                Payload::Write(w) if leader => s.ghost.acked |= 1 << w,
                // `handover.rs::fresh`: names it, appended by this process, of the leader it
                // follows now.
                Payload::Handover(to)
                    if to == n && i >= start_len && vote.committed && e.leader == vote.leader =>
                {
                    s.node_mut(n).handover_due = true
                }
                _ => {}
            }
        }
        s.node_mut(n).commit = upto;
    }

    /// Removes the requests whose delivery can change nothing any more, whenever it would
    /// happen: a vote request or an append whose vote is below its receiver's and whose sender
    /// moved on, once no disk loss is left in the bound (only a wipe lowers a vote). Losing
    /// them is a behaviour the model has anyway; keeping them only multiplies states.
    fn forget_dead(&self, s: &mut State) {
        let no_wipes = s.ghost.wipes >= self.o.bounds.max_wipes;
        let dead = |m: &Msg| match *m {
            Msg::Vote { from, to, vote, .. } | Msg::Append { from, to, vote, .. } => {
                no_wipes && vote < s.node(to).vote && s.node(from).vote != vote
            }
        };
        let gone: Vec<Msg> = s.net.iter().filter(|m| dead(m)).cloned().collect();
        for m in gone {
            s.net.remove(&m);
        }
        self.forget_moot(s);
    }

    /// Volatile state that can no longer change what happens, set to one value: a campaign
    /// the election would call off (fixed rules), standing answers of a node caught up, the
    /// time of an uncommitted vote (only a committed vote's time is read), where a process
    /// started when no handover is left in the bound.
    fn forget_moot(&self, s: &mut State) {
        let utime_cap = self.o.utime_cap();
        let handovers = s.ghost.handovers < self.o.bounds.max_handovers;
        for node in &mut s.nodes {
            if !self.o.today_campaign_rereads
                && node
                    .decision
                    .is_some_and(|d| d.stale || d.vote != node.vote)
            {
                node.decision = None;
            }
            if !node.marker {
                node.answered = 0;
                node.answers_max = Vote::default();
                node.answers_beyond = false;
            }
            if !node.vote.committed {
                node.utime = utime_cap;
            }
            if !handovers && !node.handover_due {
                node.start_len = 0;
            }
        }
    }

    /// `Start::Running`: node 1 elected in term 1 and its blank entry committed everywhere.
    fn running(&self, s: &mut State) {
        let vote = Vote {
            leader: LeaderId { term: 1, node: 1 },
            committed: true,
        };
        let boot = Entry {
            leader: LeaderId::default(),
            payload: Payload::Config(crate::state::Config {
                voters: self.o.initial_voters(),
                joint: 0,
                learners: 0,
            }),
        };
        let blank = Entry {
            leader: vote.leader,
            payload: Payload::Blank,
        };
        for id in 1..=self.o.nodes {
            let node = s.node_mut(id);
            node.vote = vote;
            node.log = crate::state::Entries::from_slice(&[boot, blank]);
            node.commit = 2;
            node.marker = false;
        }
        s.node_mut(1).role = Role::Leader(Leading {
            matched: [Some(1); 4],
            probe: [Some(1); 4],
            acks: [self.o.send_cap(); 4],
            ready_at: 1,
            handed: false,
        });
        s.ghost.committed = vec![(boot, LeaderId::default()), (blank, vote.leader)];
    }

    /// `Start::Behind`: node 2 elected in term 2, its blank entry and W0 on nodes 1 and 2,
    /// committed; node 3 voted for it and heard nothing more.
    fn behind(&self, s: &mut State) {
        let lid = LeaderId { term: 2, node: 2 };
        let vote = Vote {
            leader: lid,
            committed: true,
        };
        let more = [
            Entry {
                leader: lid,
                payload: Payload::Blank,
            },
            Entry {
                leader: lid,
                payload: Payload::Write(0),
            },
        ];
        for id in [1, 2] {
            let node = s.node_mut(id);
            node.vote = vote;
            node.role = Role::Follower;
            more.iter().for_each(|&e| node.log.push(e));
            node.commit = 4;
        }
        s.node_mut(3).vote = Vote::new(2, 2);
        s.node_mut(2).role = Role::Leader(Leading {
            matched: [Some(3), Some(3), Some(1), None],
            probe: [Some(3), Some(3), Some(1), None],
            acks: [self.o.send_cap(); 4],
            ready_at: 2,
            handed: false,
        });
        s.ghost.committed.extend(more.map(|e| (e, lid)));
        s.ghost.acked = 1;
        s.ghost.writes = 1;
    }

    /// A follower drops its log from `index` on (a conflict); an applied entry dropped is a
    /// second history.
    fn truncate(&self, s: &mut State, n: Id, index: u8) {
        let node = s.node_mut(n);
        if usize::from(index) >= node.log.len() {
            return;
        }
        node.log.truncate(usize::from(index));
        if index < node.commit {
            node.commit = index;
            s.break_once(Broken::TwoEntriesApplied { node: n, index });
        }
    }
}

mod deliver;
mod step;
mod time;

impl Model for Raft {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut s = State {
            nodes: self.ids().map(|_| Node::blank(&self.o)).collect(),
            net: Default::default(),
            ghost: Default::default(),
        };
        if self.o.start != crate::Start::BrandNew {
            self.running(&mut s);
        }
        if self.o.start == crate::Start::Behind {
            self.behind(&mut s);
        }
        vec![s]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        self.node_actions(s, out);
        for m in &s.net {
            out.push(Action::Deliver(*m, true));
            out.push(Action::Deliver(*m, false));
            out.push(Action::Drop(*m));
            if s.ghost.dups < self.o.bounds.max_dups {
                out.push(Action::Duplicate(*m));
            }
        }
        out.push(Action::Tick);
    }

    fn next_state(&self, last: &State, a: Action) -> Option<State> {
        let mut s = last.clone();
        match a {
            Action::Deliver(m, answer) => {
                s.net.remove(&m);
                self.deliver(&mut s, &m, answer);
            }
            Action::Duplicate(m) => {
                s.ghost.dups += 1;
                self.deliver(&mut s, &m, true);
            }
            Action::Drop(m) => {
                s.net.remove(&m);
            }
            Action::Tick => self.tick(&mut s),
            a => self.node_step(&mut s, a),
        }
        self.forget_dead(&mut s);
        (s != *last).then_some(s)
    }

    fn properties(&self) -> Vec<stateright::Property<Self>> {
        crate::properties::all()
    }
}

pub(crate) fn decision(node: &Node, me: Id) -> Decision {
    Decision {
        vote: node.vote,
        stale: false,
        yes: 1 << me,
        last: node.last_log_id(),
    }
}
