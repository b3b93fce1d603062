//! A request delivered, handled by its receiver, and its answer handled by its sender.

use super::{Raft, Reply};
use crate::rules::{self, quorum};
use crate::state::{Entry, Id, LogId, Msg, Role, State, Vote};

impl Raft {
    pub(super) fn deliver(&self, s: &mut State, m: &Msg, answer: bool) {
        match m {
            &Msg::Vote {
                from,
                to,
                vote,
                last,
            } => self.deliver_vote(s, from, to, vote, last, answer),
            Msg::Append {
                from,
                to,
                vote,
                prev,
                entries,
                commit,
                age,
            } => {
                let (from, to, vote) = (*from, *to, *vote);
                // C12 fifth (`raft/amnesia.rs::admits_append`): refused, not even answered.
                if !rules::c12_admits_append(&self.o, s.node(to), to, vote) {
                    return;
                }
                let own = s.node(to).vote;
                if vote < own {
                    if answer {
                        self.higher_vote(s, from, vote, own);
                    }
                    return;
                }
                self.accept_vote(s, to, vote);
                let reply = self.follow(s, to, vote, *prev, &{ *entries }, *commit);
                if answer {
                    self.append_answered(s, from, to, vote, *age, reply);
                }
            }
        }
    }

    /// `ports/peer.rs::answer_vote` at `to`; the candidate `from` counts the grant (a quorum:
    /// leader) or takes a higher vote from the refusal (openraft `handle_vote_resp`).
    fn deliver_vote(
        &self,
        s: &mut State,
        from: Id,
        to: Id,
        vote: Vote,
        last: Option<LogId>,
        answer: bool,
    ) {
        let granted = rules::grants_vote(&self.o, s.node(to), to, vote, last);
        if granted {
            self.accept_vote(s, to, vote);
        }
        let theirs = s.node(to).vote;
        let cand = s.node_mut(from);
        if !answer || cand.vote != vote {
            return;
        }
        let Role::Candidate(yes) = cand.role else {
            return;
        };
        if granted {
            let yes = yes | 1 << to;
            cand.role = Role::Candidate(yes);
            if quorum(cand, yes) && (cand.log.len() as u8) < self.o.bounds.max_log {
                self.become_leader(s, from);
            }
        } else if theirs > vote {
            self.accept_vote(s, from, theirs);
        }
    }

    /// The leader `from` of `vote` learns a higher vote: it takes it and steps down (openraft's
    /// `HigherVote` answer).
    fn higher_vote(&self, s: &mut State, from: Id, vote: Vote, higher: Vote) {
        if s.node(from).vote == vote {
            self.accept_vote(s, from, higher);
        }
    }

    /// openraft `Engine::append_entries` on a follower whose vote took the leader's: the
    /// prev-log-id check (a conflict truncates there), the entries (a conflicting suffix
    /// truncated), flushed before the answer, the commit index min(leader's, reached), C12's
    /// catch-up (`raft/amnesia.rs::Amnesia::append`).
    fn follow(
        &self,
        s: &mut State,
        n: Id,
        vote: Vote,
        prev: Option<LogId>,
        entries: &[Entry],
        commit: u8,
    ) -> Reply {
        if let Some(p) = prev {
            if s.node(n).log_id(p.index) != Some(p) {
                self.truncate(s, n, p.index);
                return None;
            }
        }
        let first = prev.map_or(0, |p| p.index + 1);
        for (k, e) in entries.iter().enumerate() {
            let i = first + k as u8;
            let node = s.node(n);
            match node.log.get(usize::from(i)) {
                Some(x) if x.leader == e.leader => continue,
                Some(_) => self.truncate(s, n, i),
                None => {}
            }
            s.node_mut(n).log.push(*e);
        }
        let reach = if entries.is_empty() {
            prev
        } else {
            s.node(n).log_id(first + entries.len() as u8 - 1)
        };
        let upto = commit.min(reach.map_or(0, |r| r.index + 1));
        if upto > s.node(n).commit {
            self.apply(s, n, upto, vote.leader, false);
        }
        let node = s.node(n);
        let leader_commit = commit.checked_sub(1);
        if node.marker
            && rules::c12_caught_up_after_append(&self.o, node, n, vote, reach, leader_commit)
        {
            s.node_mut(n).marker = false;
        }
        Some(reach)
    }

    /// The leader's side of an answered append (`raft/link.rs`): every answer but a higher vote
    /// is an ack for the lease, stamped with the send (`LeaseClock::record`); a success moves
    /// the follower's progress, a conflict sends the next append from the start.
    fn append_answered(&self, s: &mut State, from: Id, to: Id, vote: Vote, age: u8, reply: Reply) {
        let node = s.node_mut(from);
        if node.vote != vote {
            return;
        }
        let Role::Leader(l) = &mut node.role else {
            return;
        };
        let k = usize::from(to - 1);
        l.acks[k] = l.acks[k].min(age);
        match reply {
            Some(reach) => {
                let r = reach.map(|r| r.index);
                l.matched[k] = l.matched[k].max(r);
                l.probe[k] = r;
            }
            None => l.probe[k] = None,
        }
        self.leader_commit(s, from);
    }
}
