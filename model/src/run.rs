//! Running the checker and printing what it found: the states explored, the time, and a
//! counterexample as who did what, step by step.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write;
use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries, Model, Path};

use crate::actions::{Action, Raft};
use crate::state::{Msg, Role, State};
use crate::Options;

pub struct Outcome {
    pub model: Raft,
    pub unique_states: usize,
    pub states: usize,
    pub max_depth: usize,
    pub elapsed: Duration,
    pub discoveries: HashMap<&'static str, Path<State, Action>>,
}

impl Outcome {
    /// The counterexample (or example) found for `property`, explained.
    pub fn explain(&self, property: &str) -> Option<String> {
        let path = self.discoveries.get(property)?;
        Some(explain(&self.model, path))
    }

    pub fn summary(&self) -> String {
        format!(
            "{} unique states ({} generated), depth {}, {:.1} s",
            self.unique_states,
            self.states,
            self.max_depth,
            self.elapsed.as_secs_f64()
        )
    }
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Breadth first (the shortest counterexample), over every reachable state, or until
/// `stop_at` has a discovery.
pub fn check(o: Options, stop_at: Option<&'static str>) -> Outcome {
    let t0 = Instant::now();
    let mut b = Raft::new(o.clone()).checker().threads(threads());
    if let Some(secs) = std::env::var("XCE_MODEL_TIMEOUT")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        b = b.timeout(Duration::from_secs(secs));
    }
    match stop_at {
        Some("any") => b = b.finish_when(HasDiscoveries::AnyFailures),
        Some(p) => b = b.finish_when(HasDiscoveries::AnyOf(BTreeSet::from([p]))),
        None => {}
    }
    let c = b.spawn_bfs().join();
    Outcome {
        model: Raft::new(o),
        unique_states: c.unique_state_count(),
        states: c.state_count(),
        max_depth: c.max_depth(),
        elapsed: t0.elapsed(),
        discoveries: c.discoveries(),
    }
}

/// A path as numbered steps, each followed by the nodes and messages after it.
pub fn explain(model: &Raft, path: &Path<State, Action>) -> String {
    let mut out = String::new();
    let steps = path.clone().into_vec();
    let _ = writeln!(out, "  0. start");
    out.push_str(&nodes(model, &steps[0].0));
    for (k, (_, action)) in steps.iter().enumerate() {
        if let Some(a) = action {
            let _ = writeln!(out, "{:>3}. {}", k + 1, describe(a));
            out.push_str(&nodes(model, &steps[k + 1].0));
        }
    }
    if let Some(b) = &steps.last().and_then(|(s, _)| s.ghost.broken) {
        let _ = writeln!(out, "  => {b:?}");
    }
    out
}

fn describe(a: &Action) -> String {
    match a {
        Action::Deliver(m, true) => format!("deliver {}, answer delivered", msg(m)),
        Action::Deliver(m, false) => format!("deliver {}, answer lost", msg(m)),
        Action::Duplicate(m) => format!("deliver a copy of {}", msg(m)),
        Action::Drop(m) => format!("lose {}", msg(m)),
        Action::Send { from, to, one } => {
            format!(
                "n{from} sends an append to n{to}{}",
                if *one { " (first entry only)" } else { "" }
            )
        }
        Action::Initialize(n) => {
            format!("n{n} initialises the cluster (bootstrap entry, election)")
        }
        Action::Standing { from, to } => {
            format!("n{from} asks n{to} for its standing and hears it (C12)")
        }
        Action::PreVote { from, to } => format!("n{to} grants n{from}'s pre-vote"),
        Action::Decide(n) => format!("n{n} decides to campaign: pre-vote requests out"),
        Action::Elect(n) => format!("n{n}: pre-vote quorum, election (elect_if)"),
        Action::HandoverElect(n) => format!("n{n} applied a handover naming it: elects at once"),
        Action::Write(n) => format!("client write to leader n{n}"),
        Action::Flush(n) => format!("n{n}'s own disk flush completes"),
        Action::Handover { from, to } => format!("leader n{from} hands over to n{to}"),
        Action::Read(n) => format!("lease read served by n{n}"),
        Action::Change { leader, to } => {
            let set = |b: u8| {
                crate::state::ids_of(b)
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let joint = if to.joint != 0 {
                format!(" → {{{}}}", set(to.joint))
            } else {
                String::new()
            };
            format!(
                "leader n{leader} appends membership voters {{{}}}{joint} learners {{{}}}",
                set(to.voters),
                set(to.learners)
            )
        }
        Action::Crash(n) => format!("n{n} killed (-9) and restarted"),
        Action::Wipe(n) => format!("n{n} loses its disk and restarts blank"),
        Action::Tick => "one tick of the clock".into(),
    }
}

fn msg(m: &Msg) -> String {
    match m {
        Msg::Vote {
            from,
            to,
            vote,
            last,
        } => {
            format!("vote request n{from}→n{to} {vote} last {}", last_id(last))
        }
        Msg::Append {
            from,
            to,
            vote,
            prev,
            entries,
            commit,
            age,
        } => {
            let es: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
            format!(
                "append n{from}→n{to} {vote} prev {} [{}] commit {commit} (sent {age} ticks ago)",
                last_id(prev),
                es.join(" ")
            )
        }
    }
}

fn last_id(l: &Option<crate::state::LogId>) -> String {
    l.map_or("-".into(), |l| {
        format!("{}.{}@{}", l.leader.term, l.leader.node, l.index)
    })
}

pub fn nodes(model: &Raft, s: &State) -> String {
    let mut out = String::new();
    for id in model.o.ids() {
        let n = s.node(id);
        let role = match &n.role {
            Role::Follower => "follower".to_string(),
            Role::Candidate(_) => "candidate".to_string(),
            Role::Leader(l) if l.handed => "leader (handed over)".to_string(),
            Role::Leader(_) => "LEADER".to_string(),
        };
        let log: Vec<String> = n.log.iter().map(|e| e.to_string()).collect();
        let _ = writeln!(
            out,
            "       n{id}: {role:<9} vote {} log [{}] commit {}{}{}",
            n.vote,
            log.join(" "),
            n.commit,
            if n.unflushed > 0 {
                format!(" unflushed {}", n.unflushed)
            } else {
                String::new()
            },
            if n.marker { " catching-up" } else { "" },
        );
    }
    let _ = writeln!(
        out,
        "       acked writes {:b}, in flight {}",
        s.ghost.acked,
        s.net.len()
    );
    out
}
