//! What a node may do on its own: initialise, ask for standing, campaign, write, flush, send,
//! hand over, read; and the faults that strike a node.

use super::{decision, Action, Raft};
use crate::rules::{self, quorum};
use crate::state::{has, Config, Id, Leading, Msg, Node, Payload, Role, State};

impl Raft {
    /// Room for one more entry and one more term: the bounds.
    fn may_elect(&self, node: &Node) -> bool {
        node.vote.leader.term < self.o.bounds.max_term
            && (node.log.len() as u8) < self.o.bounds.max_log
    }

    /// Whether `node` (a voter, not leading) may start a campaign or an election: no hold
    /// (`raft/elect.rs::Elections::allowed`: C12's `Hold::CatchingUp`, C14's
    /// `Hold::HandedOver`) and within the bounds.
    fn campaign_allowed(&self, node: &Node, me: Id) -> bool {
        node.is_voter(me)
            && node.leading().is_none()
            && rules::c12_may_campaign(&self.o, node, me)
            && self.may_elect(node)
    }

    /// A leader that serves (`node/ctx.rs::serving_leader`): not handed over, its readiness
    /// barrier (the first entry of this leadership) committed and applied (C11 amended).
    fn serving(&self, node: &Node) -> Option<Leading> {
        node.leading()
            .copied()
            .filter(|l| !l.handed && node.commit > l.ready_at)
    }

    pub(super) fn node_actions(&self, s: &State, out: &mut Vec<Action>) {
        let b = self.o.bounds;
        for n in self.ids() {
            self.campaign_actions(s, n, out);
            if s.node(n).unflushed > 0 {
                out.push(Action::Flush(n));
            }
            self.leader_actions(s, n, out);
        }
        for n in self.ids() {
            if s.ghost.crashes < b.max_crashes {
                out.push(Action::Crash(n));
            }
            if s.ghost.wipes < b.max_wipes {
                out.push(Action::Wipe(n));
            }
        }
    }

    /// Initialise, ask for standing, pre-votes granted to this node's campaign, decide,
    /// elect.
    fn campaign_actions(&self, s: &State, n: Id, out: &mut Vec<Action>) {
        let node = s.node(n);
        if node.log.is_empty()
            && node.vote == Default::default()
            && has(self.o.initial_voters(), n)
            && rules::c12_may_campaign(&self.o, node, n)
            && self.may_elect(node)
        {
            out.push(Action::Initialize(n));
        }
        if self.o.c12 == crate::C12::Fifth && node.marker {
            let others = self.o.initial_voters() & !(1 << n) & !node.answered;
            for to in self.ids().filter(|&to| has(others, to)) {
                out.push(Action::Standing { from: n, to });
            }
        }
        if let Some(d) = node.decision {
            let voters = node.config().map_or(0, |(_, c)| c.all_voters());
            for to in self.ids().filter(|&to| has(voters & !d.yes, to)) {
                let term = d.vote.leader.term + 1;
                if rules::would_vote(&self.o, s.node(to), to, term, n, d.last) {
                    out.push(Action::PreVote { from: n, to });
                }
            }
        }
        // The timer's (and the early campaign's) decision: no leader heard for the lease.
        if node.decision.is_none()
            && self.campaign_allowed(node, n)
            && !rules::hears_leader(&self.o, node, n)
        {
            out.push(Action::Decide(n));
        }
        if node.decision.is_some_and(|d| quorum(node, d.yes)) && self.campaign_allowed(node, n) {
            out.push(Action::Elect(n));
        }
        if node.handover_due && node.is_voter(n) && node.leading().is_none() && self.may_elect(node)
        {
            out.push(Action::HandoverElect(n));
        }
    }

    /// A leader's: a write, a read, an append to each member, a handover.
    fn leader_actions(&self, s: &State, n: Id, out: &mut Vec<Action>) {
        let b = self.o.bounds;
        let node = s.node(n);
        let Some(l) = node.leading().copied() else {
            return;
        };
        let room = (node.log.len() as u8) < b.max_log;
        let serving = self.serving(node).is_some();
        if serving && room && s.ghost.writes < b.max_writes {
            out.push(Action::Write(n));
        }
        if serving {
            out.push(Action::Read(n));
        }
        if serving && room {
            self.change_actions(s, n, out);
        }
        let appends = s
            .net
            .iter()
            .filter(|m| matches!(m, Msg::Append { .. }))
            .count() as u8;
        let (_, cfg) = node.config().expect("a leader has a membership");
        let last = node.last_log_id().map(|l| l.index);
        for to in self.ids().filter(|&to| to != n) {
            if !has(cfg.all_voters() | cfg.learners, to) {
                continue;
            }
            if appends < b.max_appends {
                out.push(Action::Send {
                    from: n,
                    to,
                    one: false,
                });
                if b.partial_appends {
                    out.push(Action::Send {
                        from: n,
                        to,
                        one: true,
                    });
                }
            }
            let caught_up = l.matched[usize::from(to - 1)] == last;
            if serving
                && room
                && s.ghost.handovers < b.max_handovers
                && caught_up
                && has(cfg.all_voters(), to)
            {
                out.push(Action::Handover { from: n, to });
            }
        }
    }

    /// C17, one node at a time: node 4 added as a learner, then promoted (a joint config, then
    /// the new one), or (without node 4) a voter other than the leader removed (joint, then
    /// without it).
    fn change_actions(&self, s: &State, n: Id, out: &mut Vec<Action>) {
        let node = s.node(n);
        let Some((at, c)) = node.config() else { return };
        if at >= node.commit {
            return; // the previous change is not committed yet
        }
        let mut to = |cfg: Config| out.push(Action::Change { leader: n, to: cfg });
        if c.joint != 0 {
            return to(Config {
                voters: c.joint,
                joint: 0,
                learners: c.learners,
            });
        }
        if s.ghost.changes >= self.o.bounds.max_changes {
            return;
        }
        let spare = 1 << 4;
        if self.o.spare && c.all_voters() & spare == 0 && c.learners & spare == 0 {
            to(Config {
                learners: c.learners | spare,
                ..c
            });
        }
        if c.learners & spare != 0 {
            to(Config {
                voters: c.voters,
                joint: c.voters | spare,
                learners: c.learners & !spare,
            });
        }
        // With node 4 the check adds it; without, it removes one (two smaller configurations).
        for v in self
            .ids()
            .filter(|&v| !self.o.spare && v != n && has(c.voters, v))
        {
            to(Config {
                voters: c.voters,
                joint: c.voters & !(1 << v),
                learners: c.learners,
            });
        }
    }

    pub(super) fn node_step(&self, s: &mut State, a: Action) {
        match a {
            Action::Change { leader, to } => {
                // A change begins unless it finishes a joint config.
                if s.node(leader).config().map_or(true, |(_, c)| c.joint == 0) {
                    s.ghost.changes += 1;
                }
                self.append_own(s, leader, Payload::Config(to));
            }
            Action::Initialize(n) => {
                let node = s.node_mut(n);
                node.log.push(crate::state::Entry {
                    leader: Default::default(),
                    payload: Payload::Config(crate::state::Config {
                        voters: self.o.initial_voters(),
                        joint: 0,
                        learners: 0,
                    }),
                });
                self.elect(s, n);
            }
            Action::Standing { from, to } => {
                let (vote, beyond) = (s.node(to).vote, s.node(to).log.len() > 1);
                let asker = s.node_mut(from);
                asker.answered |= 1 << to;
                asker.answers_max = asker.answers_max.max(vote);
                asker.answers_beyond |= beyond;
            }
            Action::PreVote { from, to } => {
                if let Some(d) = s.node_mut(from).decision.as_mut() {
                    d.yes |= 1 << to;
                }
            }
            Action::Decide(n) => self.decide(s, n),
            Action::Elect(n) => self.elect_if(s, n),
            Action::HandoverElect(n) => {
                s.node_mut(n).handover_due = false;
                self.elect(s, n);
            }
            Action::Write(n) => {
                let w = s.ghost.writes;
                s.ghost.writes += 1;
                self.append_own(s, n, Payload::Write(w));
            }
            Action::Flush(n) => {
                s.node_mut(n).unflushed = 0;
                self.leader_commit(s, n);
            }
            Action::Send { from, to, one } => self.send(s, from, to, one),
            Action::Handover { from, to } => {
                s.ghost.handovers += 1;
                if let Role::Leader(l) = &mut s.node_mut(from).role {
                    l.handed = true;
                }
                self.append_own(s, from, Payload::Handover(to));
            }
            Action::Read(n) => self.read(s, n),
            Action::Crash(n) => self.crash(s, n),
            Action::Wipe(n) => {
                s.ghost.wipes += 1;
                let mut blank = Node::blank(&self.o);
                blank.boot = 0;
                blank.utime = 0;
                *s.node_mut(n) = blank;
            }
            _ => unreachable!("not a node's step: {a:?}"),
        }
    }

    /// `raft/elect.rs::campaign`: the decision on (vote, utime), this node's own pre-vote yes;
    /// the pre-vote asks for term + 1 with its last log id.
    fn decide(&self, s: &mut State, n: Id) {
        let node = s.node_mut(n);
        node.decision = Some(decision(node, n));
    }

    /// `Trigger::elect_if(vote, utime)` (openraft change 4): the election only if the vote and
    /// its last-modified time are still the decision's (C15 fifth round). Today's rule
    /// (`today_campaign_rereads`) compares with a re-read taken after the pre-vote: nothing
    /// accepted between the decision and the election calls it off.
    fn elect_if(&self, s: &mut State, n: Id) {
        let node = s.node_mut(n);
        let d = node.decision.take().expect("a decision");
        if self.o.today_campaign_rereads || (d.vote == node.vote && !d.stale) {
            self.elect(s, n);
        }
    }

    /// `raft/link.rs`: an append from the leader's probe for `to` (its last matched index, or
    /// the start after a conflict), carrying the commit index (change 2).
    fn send(&self, s: &mut State, from: Id, to: Id, one: bool) {
        let node = s.node(from);
        let l = node.leading().expect("a leader sends");
        let prev = l.probe[usize::from(to - 1)].and_then(|p| node.log_id(p));
        let first = prev.map_or(0, |p| usize::from(p.index) + 1);
        let mut entries = crate::state::Entries::from_slice(&node.log[first..]);
        if one {
            entries.truncate(1);
        }
        s.net.insert(Msg::Append {
            from,
            to,
            vote: node.vote,
            prev,
            entries,
            commit: node.commit,
            age: 0,
        });
    }

    /// C3/C11: a lease read, served only while a quorum (itself included) accepted appends
    /// sent within the window (`raft/lease.rs::LeaseClock::lease_holds`). Fixed (C11 fifth
    /// round): an ack counts within the follower's own window too; today
    /// (`today_own_window`): within the leader's. It answers from the applied state.
    fn read(&self, s: &mut State, n: Id) {
        let node = s.node(n);
        let Some(l) = self.serving(node) else { return };
        let own = self.o.timing(n).window;
        let window = |id: Id| {
            if self.o.today_own_window {
                own
            } else {
                own.min(self.o.timing(id).window)
            }
        };
        let holds = quorum(
            node,
            self.ids().fold(0, |set, id| {
                let fresh = id == n || l.acks[usize::from(id - 1)] < window(id);
                set | u8::from(fresh) << id
            }),
        );
        if !holds {
            return;
        }
        let applied = &node.log[..usize::from(node.commit)];
        for w in 0..8 {
            if has(s.ghost.acked, w) && !applied.iter().any(|e| e.payload == Payload::Write(w)) {
                s.break_once(crate::state::Broken::StaleRead {
                    leader: n,
                    write: w,
                });
                return;
            }
        }
    }

    /// A crash and a restart (`raft/store.rs`: the flushed log and the saved vote stay; the
    /// commit index is not saved). openraft change 3 (`Engine::startup`): a committed vote for
    /// itself read back is held as not committed; without it (`today_resume_old_term`) the node
    /// resumes leading in that leader id, its readiness barrier its next entry.
    fn crash(&self, s: &mut State, n: Id) {
        s.ghost.crashes += 1;
        let resume = self.o.today_resume_old_term;
        let node = s.node_mut(n);
        let keep = node.flushed_len();
        node.log.truncate(usize::from(keep));
        node.unflushed = 0;
        node.commit = 0;
        node.role = Role::Follower;
        node.decision = None;
        node.answered = 0;
        node.answers_max = Default::default();
        node.answers_beyond = false;
        node.handover_due = false;
        node.start_len = keep;
        node.boot = 0;
        node.utime = 0; // openraft stamps the vote read back with the boot time
        if node.vote.committed && node.vote.leader.node == n {
            if !resume {
                node.vote.committed = false;
                return;
            }
            let len = node.log.len() as u8;
            node.role = Role::Leader(Leading {
                matched: [None; 4],
                probe: [len.checked_sub(1); 4],
                acks: [self.o.send_cap(); 4],
                ready_at: len,
                handed: false,
            });
            self.append_own(s, n, Payload::Blank);
        }
    }
}
