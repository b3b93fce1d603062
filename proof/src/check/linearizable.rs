//! A linearizability checker for the job table seen as a grow-only set of unique job ids
//! (S11): writers add ids (`jobsubmit` of a fresh id), readers read the whole set (`joblist`).
//!
//! For such a set a history is linearizable iff
//! 1. every read returns distinct ids that were written, by writes invoked before the read
//!    completed ("nothing not yet invoked");
//! 2. the read sets form a chain under inclusion;
//! 3. a read that completed before another began returned a subset of the later one's set
//!    (real time);
//! 4. every write acknowledged before a read began is in that read;
//! 5. if write `a` completed before write `b` was invoked, a read that contains `b` contains `a`.
//!
//! Sufficiency: order the reads along the chain (equal sets by invocation), put each write just
//! before the first read that contains it (writes no read contains, if acknowledged, at the end;
//! unacknowledged ones nowhere — they may not have taken effect), writes in one slot by
//! invocation. Conditions 1–5 are exactly what this order needs to respect real time between
//! read/read (2, 3), write/read (1, 4) and write/write (5) pairs.
//!
//! A write that failed (error, timeout) has an unknown outcome: it may appear, at any time after
//! its invocation, or never. Only successful reads are recorded.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Duration;

/// One `jobsubmit` of a fresh id. Times are offsets from the start of the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub id: u64,
    pub invoked: Duration,
    pub completed: Duration,
    /// The controller acknowledged it; false: failed, outcome unknown.
    pub acked: bool,
}

/// One successful `joblist`: the ids it returned, in the order returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub invoked: Duration,
    pub completed: Duration,
    pub ids: Vec<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    pub writes: Vec<Write>,
    pub reads: Vec<Read>,
}

/// Why a history is not linearizable. Reads and writes are named by their index in
/// [`History::reads`] / the id they wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// The history wrote one id twice (a harness bug: ids must be unique).
    DuplicateWrite { id: u64 },
    /// A read returned an id twice (not exactly once).
    DuplicateInRead { read: usize, id: u64 },
    /// A read returned an id nobody wrote.
    NeverWritten { read: usize, id: u64 },
    /// A read returned an id whose write was invoked only after the read completed.
    FromTheFuture { read: usize, id: u64 },
    /// Neither read's set contains the other's.
    NotAChain { a: usize, b: usize },
    /// `earlier` completed before `later` began, yet saw more.
    WentBack { earlier: usize, later: usize },
    /// A write acknowledged before the read began is missing from it.
    LostAck { read: usize, id: u64 },
    /// The read contains `present` but not `missing`, whose write completed before `present`'s
    /// was invoked.
    OrderBroken {
        read: usize,
        present: u64,
        missing: u64,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::DuplicateWrite { id } => write!(f, "id {id} written twice"),
            Violation::DuplicateInRead { read, id } => write!(f, "read {read} lists {id} twice"),
            Violation::NeverWritten { read, id } => {
                write!(f, "read {read} lists {id}, which nobody wrote")
            }
            Violation::FromTheFuture { read, id } => write!(
                f,
                "read {read} lists {id}, written only after the read completed"
            ),
            Violation::NotAChain { a, b } => {
                write!(f, "reads {a} and {b}: neither set contains the other")
            }
            Violation::WentBack { earlier, later } => write!(
                f,
                "read {later} began after read {earlier} completed but saw less"
            ),
            Violation::LostAck { read, id } => write!(
                f,
                "read {read} misses {id}, acknowledged before the read began"
            ),
            Violation::OrderBroken {
                read,
                present,
                missing,
            } => write!(
                f,
                "read {read} lists {present} but not {missing}, which completed before {present} was invoked"
            ),
        }
    }
}

/// At most this many violations are reported.
pub const MAX_VIOLATIONS: usize = 20;

/// Checks `h`; `Err` lists (up to [`MAX_VIOLATIONS`]) violations, condition by condition
/// (the module's 1–5).
pub fn check(h: &History) -> Result<(), Vec<Violation>> {
    let mut out = Found::default();
    let writes = writes_by_id(h, &mut out);
    let sets = read_sets(h, &writes, &mut out);
    chain(h, &sets, &mut out);
    real_time(h, &sets, &mut out);
    acknowledged(h, &writes, &sets, &mut out);
    if out.0.is_empty() {
        Ok(())
    } else {
        Err(out.0)
    }
}

/// The violations found, at most [`MAX_VIOLATIONS`].
#[derive(Default)]
struct Found(Vec<Violation>);

impl Found {
    fn push(&mut self, v: Violation) {
        if self.0.len() < MAX_VIOLATIONS {
            self.0.push(v);
        }
    }
}

/// Each write by the id it wrote (an id written twice is a violation).
fn writes_by_id<'h>(h: &'h History, out: &mut Found) -> HashMap<u64, &'h Write> {
    let mut writes: HashMap<u64, &Write> = HashMap::with_capacity(h.writes.len());
    for w in &h.writes {
        if writes.insert(w.id, w).is_some() {
            out.push(Violation::DuplicateWrite { id: w.id });
        }
    }
    writes
}

/// 1. Each read's set: distinct, written, not from the future.
fn read_sets(h: &History, writes: &HashMap<u64, &Write>, out: &mut Found) -> Vec<HashSet<u64>> {
    let mut sets: Vec<HashSet<u64>> = Vec::with_capacity(h.reads.len());
    for (i, r) in h.reads.iter().enumerate() {
        let mut set = HashSet::with_capacity(r.ids.len());
        for &id in &r.ids {
            if !set.insert(id) {
                out.push(Violation::DuplicateInRead { read: i, id });
            }
            match writes.get(&id) {
                None => out.push(Violation::NeverWritten { read: i, id }),
                Some(w) if w.invoked > r.completed => {
                    out.push(Violation::FromTheFuture { read: i, id })
                }
                Some(_) => {}
            }
        }
        sets.push(set);
    }
    sets
}

/// 2. A chain: sorted by size, each set contains the one before.
fn chain(h: &History, sets: &[HashSet<u64>], out: &mut Found) {
    let mut by_size: Vec<usize> = (0..h.reads.len()).collect();
    by_size.sort_by_key(|&i| (sets[i].len(), h.reads[i].invoked));
    for pair in by_size.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if !sets[a].is_subset(&sets[b]) {
            out.push(Violation::NotAChain { a, b });
        }
    }
}

/// 3. Real time between reads: along a chain, "subset" is "not smaller". For each read, the
///    largest read that completed before it began.
fn real_time(h: &History, sets: &[HashSet<u64>], out: &mut Found) {
    let mut by_completion: Vec<usize> = (0..h.reads.len()).collect();
    by_completion.sort_by_key(|&i| h.reads[i].completed);
    let mut by_invocation: Vec<usize> = (0..h.reads.len()).collect();
    by_invocation.sort_by_key(|&i| h.reads[i].invoked);
    let mut done = 0;
    let mut biggest: Option<usize> = None;
    for &later in &by_invocation {
        while done < by_completion.len()
            && h.reads[by_completion[done]].completed < h.reads[later].invoked
        {
            let r = by_completion[done];
            if biggest.is_none_or(|b| sets[r].len() > sets[b].len()) {
                biggest = Some(r);
            }
            done += 1;
        }
        if let Some(earlier) = biggest {
            if !sets[earlier].is_subset(&sets[later]) {
                out.push(Violation::WentBack { earlier, later });
            }
        }
    }
}

/// 4 and 5: acknowledged writes in order of completion; a read must contain every one that
///    completed before it began, and before the latest invocation among the ids it lists.
fn acknowledged(
    h: &History,
    writes: &HashMap<u64, &Write>,
    sets: &[HashSet<u64>],
    out: &mut Found,
) {
    let mut acked: Vec<&Write> = h.writes.iter().filter(|w| w.acked).collect();
    acked.sort_by_key(|w| w.completed);
    for (i, r) in h.reads.iter().enumerate() {
        for w in acked.iter().take_while(|w| w.completed < r.invoked) {
            if !sets[i].contains(&w.id) {
                out.push(Violation::LostAck { read: i, id: w.id });
            }
        }
        let latest = r
            .ids
            .iter()
            .filter_map(|id| writes.get(id))
            .max_by_key(|w| w.invoked);
        if let Some(b) = latest {
            for a in acked.iter().take_while(|a| a.completed < b.invoked) {
                if !sets[i].contains(&a.id) && a.completed >= r.invoked {
                    out.push(Violation::OrderBroken {
                        read: i,
                        present: b.id,
                        missing: a.id,
                    });
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn t(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }
    /// A write of job `id` between these milliseconds (the checkers' tests, here and in
    /// `job_table.rs`).
    pub(crate) fn w(id: u64, invoked: u64, completed: u64, acked: bool) -> Write {
        Write {
            id,
            invoked: t(invoked),
            completed: t(completed),
            acked,
        }
    }
    /// A read between these milliseconds that listed `ids`.
    pub(crate) fn r(invoked: u64, completed: u64, ids: &[u64]) -> Read {
        Read {
            invoked: t(invoked),
            completed: t(completed),
            ids: ids.to_vec(),
        }
    }
    pub(crate) fn h(writes: Vec<Write>, reads: Vec<Read>) -> History {
        History { writes, reads }
    }
    fn violations(h: &History) -> Vec<Violation> {
        check(h).err().unwrap_or_default()
    }

    // Histories that pass: `job_table.rs`'s linearizable_histories_pass_every_judge (this
    // check is its third judge).

    /// Each broken history, and exactly what is found.
    #[test]
    fn each_violation_is_named() {
        use Violation::*;
        let table = [
            // A stale read: an acknowledged write missing from a later listing.
            (
                h(vec![w(1, 0, 1, true)], vec![r(2, 3, &[])]),
                vec![LostAck { read: 0, id: 1 }],
            ),
            // From the future; never written.
            (
                h(vec![w(1, 5, 6, true)], vec![r(0, 1, &[1])]),
                vec![FromTheFuture { read: 0, id: 1 }],
            ),
            (
                h(vec![], vec![r(0, 1, &[9])]),
                vec![NeverWritten { read: 0, id: 9 }],
            ),
            // Listed twice; written twice.
            (
                h(vec![w(1, 0, 1, true)], vec![r(2, 3, &[1, 1])]),
                vec![DuplicateInRead { read: 0, id: 1 }],
            ),
            (
                h(vec![w(1, 0, 1, true), w(1, 2, 3, true)], vec![]),
                vec![DuplicateWrite { id: 1 }],
            ),
            // Write 2 in flight (unknown outcome) the whole time: a later read loses it.
            (
                h(
                    vec![w(1, 0, 1, true), w(2, 0, 100, false)],
                    vec![r(2, 3, &[1, 2]), r(4, 5, &[1])],
                ),
                vec![WentBack {
                    earlier: 0,
                    later: 1,
                }],
            ),
            // 1 completes (10) before 2 is invoked (11); a read concurrent with both sees only 2.
            (
                h(
                    vec![w(1, 0, 10, true), w(2, 11, 12, true)],
                    vec![r(5, 13, &[2])],
                ),
                vec![OrderBroken {
                    read: 0,
                    present: 2,
                    missing: 1,
                }],
            ),
        ];
        for (i, (x, want)) in table.iter().enumerate() {
            assert_eq!(&violations(x), want, "history {i}: {x:?}");
        }
        // Two concurrent writes; two concurrent reads each see a different one.
        let split = h(
            vec![w(1, 0, 10, true), w(2, 0, 10, true)],
            vec![r(1, 9, &[1]), r(1, 9, &[2])],
        );
        let v = violations(&split);
        assert!(v.iter().any(|x| matches!(x, NotAChain { .. })), "{v:?}");
    }

    #[test]
    fn violations_are_bounded() {
        let many = h(
            (0..100).map(|i| w(i, 0, 1, true)).collect(),
            vec![r(2, 3, &[])],
        );
        assert_eq!(violations(&many).len(), MAX_VIOLATIONS);
    }
}
