//! The job table as [porcupine](super::porcupine) models it, for the histories the nemesis and
//! the scenarios record ([`History`]: `jobsubmit`s of fresh job ids, listings of every job).
//!
//! - [`by_job`], P-compositional: a job is a register, absent until its submit takes effect;
//!   a listing is a read of every job, projected onto each (did it list this one?). Each job
//!   id's partition — its submit and every listing — is checked apart (Horn & Kroening), so
//!   the search stays small however long the run.
//! - [`whole`]: the set of jobs as one object, a listing a read of all of it, unpartitioned.
//!   Exact (a state is a digest of the set, a linearization found is replayed with the sets
//!   themselves), but its search grows with the operations in flight at once.
//!
//! What the projection cannot see: a listing that is not one moment of the whole table. Two
//! listings during two concurrent submits, each seeing a different one, agree job by job
//! with some order (each job's own), but no single order of both submits fits both listings;
//! a listing that shows a later submit but not one acknowledged before that submit began
//! likewise. [`whole`] and the conditions of [`super::linearizable`] see both.
//!
//! An unacknowledged submit (failed: its outcome is unknown) never returns: it may take effect
//! at any time after its call, or never. Only successful listings are histories' reads.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::linearizable::{History, Write};
use super::porcupine::{self, Model, Operation, Single};

/// A job table operation as [`Presence`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobOp {
    Submit,
    List,
}

/// One job's presence: `jobsubmit` of its id makes it present (once: ids are fresh); a
/// listing answers whether it is there (the output; ignored for a submit).
pub struct Presence;

impl Model for Presence {
    type State = bool;
    type Input = JobOp;
    type Output = bool;
    fn init(&self) -> bool {
        false
    }
    fn step(&self, present: &bool, op: &JobOp, listed: &bool) -> Option<bool> {
        match op {
            JobOp::Submit => (!present).then_some(true),
            JobOp::List => (listed == present).then_some(*present),
        }
    }
}

/// A set of job ids by its size and a sum of its members' mixes: two sets with equal digests
/// are equal but for a 2^-64 chance, and a linearization found is replayed exactly anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SetDigest {
    count: u64,
    sum: u64,
}

impl SetDigest {
    pub fn of(ids: &[u64]) -> SetDigest {
        ids.iter().fold(SetDigest::default(), |d, &id| d.with(id))
    }
    fn with(self, id: u64) -> SetDigest {
        SetDigest {
            count: self.count + 1,
            sum: self.sum.wrapping_add(mix(id)),
        }
    }
}

/// SplitMix64's finaliser: job ids are random already, but a test's are 1, 2, 3…
fn mix(id: u64) -> u64 {
    let mut z = id.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The whole set: a submit adds its id, a listing must show exactly the set.
pub struct WholeSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetOp {
    Submit(u64),
    List,
}

impl Model for WholeSet {
    type State = SetDigest;
    type Input = SetOp;
    type Output = SetDigest;
    fn init(&self) -> SetDigest {
        SetDigest::default()
    }
    fn step(&self, s: &SetDigest, op: &SetOp, listed: &SetDigest) -> Option<SetDigest> {
        match op {
            SetOp::Submit(id) => Some(s.with(*id)),
            SetOp::List => (listed == s).then_some(*s),
        }
    }
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX - 1)) as u64
}

/// A history's verdict, with what a person needs when it is not linearizable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    Linearizable,
    /// Not linearizable: what, and the time span of the operations involved.
    Not {
        what: String,
        span: (Duration, Duration),
    },
    /// The time allowed ran out.
    OutOfTime,
}

/// What a listing is called in a finding.
fn listing(h: &History, i: usize) -> String {
    let r = &h.reads[i];
    format!(
        "the listing at {:.3}–{:.3} s ({} jobs)",
        r.invoked.as_secs_f64(),
        r.completed.as_secs_f64(),
        r.ids.len()
    )
}

/// What the write of `id` is called in a finding.
fn submit(h: &History, id: u64) -> String {
    match h.writes.iter().find(|w| w.id == id) {
        Some(w) => format!(
            "job {id} (written {:.3}–{:.3} s, {})",
            w.invoked.as_secs_f64(),
            w.completed.as_secs_f64(),
            if w.acked {
                "acknowledged"
            } else {
                "outcome unknown"
            }
        ),
        None => format!("job {id} (written by no call)"),
    }
}

/// P-compositional: each job id written or listed is checked apart with [`Presence`]. The
/// first job (by its write's invocation) whose partition is not linearizable is named, with
/// the first of its operations that no order could place.
///
/// A job's partition holds its submit and the listings [`Listings::kept`] keeps of its key's
/// (the others cannot change the verdict), so a long run's check grows with its listings and
/// writes, not with their product.
pub fn by_job(h: &History, deadline: Option<Instant>) -> Judgement {
    let ix = Listings::new(h);
    let mut ids: Vec<(Duration, u64)> = Vec::new();
    let mut written: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, w) in h.writes.iter().enumerate() {
        if !written.contains_key(&w.id) {
            ids.push((w.invoked, w.id));
        }
        written.entry(w.id).or_default().push(i);
    }
    let mut strangers: Vec<u64> = ix
        .listing
        .keys()
        .filter(|id| !written.contains_key(id))
        .copied()
        .collect();
    strangers.sort_unstable();
    ids.sort_unstable();
    ids.extend(strangers.into_iter().map(|id| (Duration::MAX, id)));
    for (_, id) in ids {
        let subs = written.get(&id).map_or(&[][..], Vec::as_slice);
        let reads = match subs {
            [one] => ix.kept(id, &h.writes[*one]),
            // Written twice or never: every listing (a finding either way).
            _ => (0..h.reads.len()).collect(),
        };
        let ops = partition(h, &ix, id, subs, &reads);
        match porcupine::check_single(&Presence, &ops, deadline) {
            Single::Linearizable(_) => {}
            Single::Illegal(longest) => {
                return job_finding(h, id, subs.len(), &reads, &ops, &longest)
            }
            Single::OutOfTime => return Judgement::OutOfTime,
        }
    }
    Judgement::Linearizable
}

/// Job `id`'s partition: its submits (`subs`, by index in `h.writes`), then the listings
/// `reads` (by index in `h.reads`), each answering whether it lists the job.
fn partition(
    h: &History,
    ix: &Listings,
    id: u64,
    subs: &[usize],
    reads: &[usize],
) -> Vec<Operation<JobOp, bool>> {
    let mut ops: Vec<Operation<JobOp, bool>> = subs
        .iter()
        .map(|&i| {
            let w = &h.writes[i];
            Operation {
                input: JobOp::Submit,
                output: false,
                call: nanos(w.invoked),
                ret: w.acked.then(|| nanos(w.completed)),
            }
        })
        .collect();
    ops.extend(reads.iter().map(|&r| Operation {
        input: JobOp::List,
        output: ix.sets[r].contains(&id),
        call: nanos(h.reads[r].invoked),
        ret: Some(nanos(h.reads[r].completed)),
    }));
    ops
}

/// Listings no longer than this are found by a window of invocation times; longer ones (a
/// failover's) are looked at for every job.
const SHORT_READ: Duration = Duration::from_millis(200);

/// A key's listings, indexed for [`Listings::kept`].
struct Listings<'h> {
    h: &'h History,
    sets: Vec<HashSet<u64>>,
    /// Read indexes by invocation, and their invocation times.
    by_call: Vec<usize>,
    calls: Vec<Duration>,
    /// Reads longer than [`SHORT_READ`].
    long: Vec<usize>,
    /// Job id → the reads that list it, by invocation.
    listing: HashMap<u64, Vec<usize>>,
}

impl<'h> Listings<'h> {
    fn new(h: &'h History) -> Listings<'h> {
        let sets: Vec<HashSet<u64>> = h
            .reads
            .iter()
            .map(|r| r.ids.iter().copied().collect())
            .collect();
        let mut by_call: Vec<usize> = (0..h.reads.len()).collect();
        by_call.sort_by_key(|&r| (h.reads[r].invoked, r));
        let calls = by_call.iter().map(|&r| h.reads[r].invoked).collect();
        let long = by_call
            .iter()
            .copied()
            .filter(|&r| h.reads[r].completed.saturating_sub(h.reads[r].invoked) > SHORT_READ)
            .collect();
        let mut listing: HashMap<u64, Vec<usize>> = HashMap::new();
        for &r in &by_call {
            for &id in &sets[r] {
                listing.entry(id).or_default().push(r);
            }
        }
        Listings {
            h,
            sets,
            by_call,
            calls,
            long,
            listing,
        }
    }

    /// The listings job `id`'s partition needs, its one submit `w` being `[a, b]` (`b` = ∞ when
    /// unacknowledged). Left out, as they cannot change the verdict:
    /// - a listing that completed before `a` and does not list the job: it goes first, in the
    ///   absent state, before anything it could be forced to follow (only a listing that
    ///   completed before it began — also before `a` — which is either left out too, or lists
    ///   the job and makes the partition illegal by itself);
    /// - when acknowledged, a listing begun after `b` that lists the job: it goes last, in the
    ///   present state, for the same reason mirrored;
    /// - when acknowledged, every listing begun after `b` that does not list the job but the
    ///   first: that one alone makes the partition illegal.
    ///
    /// A partition with fewer operations is linearizable if the whole one is, and the whole one
    /// is if this one is (the listings left out placed first and last as said): the verdict is
    /// the same.
    fn kept(&self, id: u64, w: &Write) -> Vec<usize> {
        let (a, b) = (w.invoked, w.acked.then_some(w.completed));
        let reads = &self.h.reads;
        let listing = self.listing.get(&id).map_or(&[][..], Vec::as_slice);
        // Listed before it was written.
        let mut kept: Vec<usize> = listing
            .iter()
            .copied()
            .filter(|&r| reads[r].completed < a)
            .collect();
        // Overlapping [a, b]: short ones by the window of their calls, long ones all.
        let from = self.calls.partition_point(|&c| c + SHORT_READ < a);
        let to = match b {
            Some(b) => self.calls.partition_point(|&c| c <= b),
            None => self.calls.len(),
        };
        let long_to = match b {
            Some(b) => self.long.partition_point(|&r| reads[r].invoked <= b),
            None => self.long.len(),
        };
        kept.extend(
            self.by_call[from.min(to)..to]
                .iter()
                .chain(&self.long[..long_to])
                .copied()
                .filter(|&r| reads[r].completed >= a),
        );
        if let Some(b) = b {
            // After b, every listing must list it: the first that does not, if one.
            let after = self.calls.len() - to;
            let listed_after = listing.len() - listing.partition_point(|&r| reads[r].invoked <= b);
            if listed_after < after {
                kept.extend(
                    self.by_call[to..]
                        .iter()
                        .copied()
                        .find(|&r| !self.sets[r].contains(&id)),
                );
            }
        }
        kept.sort_unstable();
        kept.dedup();
        kept
    }
}

/// Job `id`'s partition is not linearizable: the first of its operations (by call) outside
/// the longest linearizable prefix — the one no order could place.
fn job_finding(
    h: &History,
    id: u64,
    submits: usize,
    reads: &[usize],
    ops: &[Operation<JobOp, bool>],
    longest: &[usize],
) -> Judgement {
    let placed: HashSet<usize> = longest.iter().copied().collect();
    let stuck = (0..ops.len())
        .filter(|i| !placed.contains(i))
        .min_by_key(|&i| (ops[i].call, i))
        .unwrap_or(0);
    let write = h.writes.iter().find(|w| w.id == id);
    let mut span = write.map_or((Duration::MAX, Duration::ZERO), |w| {
        (w.invoked, w.completed)
    });
    let what = if stuck < submits {
        format!(
            "{} cannot take effect where the listings put it",
            submit(h, id)
        )
    } else {
        let r = reads[stuck - submits];
        let read = &h.reads[r];
        span = (span.0.min(read.invoked), span.1.max(read.completed));
        let saw = if ops[stuck].output {
            "lists"
        } else {
            "does not list"
        };
        format!(
            "{} {saw} {}, and no moment for that write agrees with every listing of the key",
            listing(h, r),
            submit(h, id)
        )
    };
    if span.0 > span.1 {
        span = (span.1, span.1);
    }
    Judgement::Not { what, span }
}

/// The whole set, unpartitioned ([`WholeSet`]); a linearization found is replayed with the
/// sets themselves (the digests' 2^-64 chance ruled out).
pub fn whole(h: &History, deadline: Option<Instant>) -> Judgement {
    let mut ops: Vec<Operation<SetOp, SetDigest>> = h
        .writes
        .iter()
        .map(|w| Operation {
            input: SetOp::Submit(w.id),
            output: SetDigest::default(),
            call: nanos(w.invoked),
            ret: w.acked.then(|| nanos(w.completed)),
        })
        .collect();
    ops.extend(h.reads.iter().map(|r| Operation {
        input: SetOp::List,
        output: SetDigest::of(&r.ids),
        call: nanos(r.invoked),
        ret: Some(nanos(r.completed)),
    }));
    match porcupine::check_single(&WholeSet, &ops, deadline) {
        Single::OutOfTime => Judgement::OutOfTime,
        Single::Linearizable(order) => match replay(h, &order) {
            None => Judgement::Linearizable,
            Some(r) => Judgement::Not {
                what: format!(
                    "{}: the order found by digest does not replay (a digest collision)",
                    listing(h, r)
                ),
                span: (h.reads[r].invoked, h.reads[r].completed),
            },
        },
        Single::Illegal(longest) => {
            let placed: HashSet<usize> = longest.iter().copied().collect();
            let stuck = (0..ops.len())
                .filter(|i| !placed.contains(i))
                .min_by_key(|&i| (ops[i].call, i))
                .unwrap_or(0);
            let n = h.writes.len();
            let (what, span) = if stuck < n {
                let w = &h.writes[stuck];
                (
                    format!("{} fits no order of the key's history", submit(h, w.id)),
                    (w.invoked, w.completed),
                )
            } else {
                let r = &h.reads[stuck - n];
                (
                    format!(
                        "{} is no moment of the key's jobs in any order of its history \
                         ({} of {} operations placed)",
                        listing(h, stuck - n),
                        longest.len(),
                        ops.len()
                    ),
                    (r.invoked, r.completed),
                )
            };
            Judgement::Not { what, span }
        }
    }
}

/// Replays `order` (indexes: writes, then reads) with the sets themselves: the first listing
/// that differs from the set at its place, if one does.
fn replay(h: &History, order: &[usize]) -> Option<usize> {
    let n = h.writes.len();
    let mut set: HashSet<u64> = HashSet::new();
    for &i in order {
        if i < n {
            set.insert(h.writes[i].id);
            continue;
        }
        let ids = &h.reads[i - n].ids;
        let listed: HashSet<u64> = ids.iter().copied().collect();
        if listed.len() != ids.len() || listed != set {
            return Some(i - n);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::linearizable::tests::{h, r, t, w};
    use crate::check::linearizable::{self, Write};

    /// The three judges of one history: by job, whole, the home-made conditions.
    fn judges(x: &History) -> (bool, bool, bool) {
        (
            by_job(x, None) == Judgement::Linearizable,
            whole(x, None) == Judgement::Linearizable,
            linearizable::check(x).is_ok(),
        )
    }

    #[test]
    fn linearizable_histories_pass_every_judge() {
        let table = [
            // Sequential.
            h(
                vec![w(1, 0, 1, true), w(2, 2, 3, true)],
                vec![r(4, 5, &[2, 1]), r(6, 7, &[1, 2])],
            ),
            // A read concurrent with a write may or may not see it, and two concurrent reads
            // may disagree about it in either order.
            h(
                vec![w(1, 0, 10, true)],
                vec![r(1, 2, &[1]), r(3, 4, &[1]), r(0, 20, &[])],
            ),
            // A failed write may take effect late, or never.
            h(
                vec![w(1, 0, 1, false), w(2, 0, 1, false)],
                vec![r(2, 3, &[]), r(4, 5, &[1]), r(6, 7, &[1])],
            ),
            // Overlapping writes may be seen in either order.
            h(
                vec![w(1, 0, 12, true), w(2, 11, 13, true)],
                vec![r(5, 14, &[2])],
            ),
            History::default(),
        ];
        for (i, x) in table.iter().enumerate() {
            assert_eq!(judges(x), (true, true, true), "history {i}: {x:?}");
        }
    }

    #[test]
    fn what_each_judge_catches() {
        // (history, by job, whole, home-made): false = caught.
        let table = [
            // A stale read: an acknowledged write missing from a later listing.
            (
                h(vec![w(1, 0, 1, true)], vec![r(2, 3, &[])]),
                false,
                false,
                false,
            ),
            // From the future; never written; listed twice.
            (
                h(vec![w(1, 5, 6, true)], vec![r(0, 1, &[1])]),
                false,
                false,
                false,
            ),
            (h(vec![], vec![r(0, 1, &[9])]), false, false, false),
            (
                h(vec![w(1, 0, 1, true)], vec![r(2, 3, &[1, 1])]),
                true,
                false,
                false,
            ),
            // A value that came and went: a failed write listed, then not.
            (
                h(
                    vec![w(1, 0, 1, true), w(2, 0, 100, false)],
                    vec![r(2, 3, &[1, 2]), r(4, 5, &[1])],
                ),
                false,
                false,
                false,
            ),
            // A long listing begun well before a slow write lists it; a short one after the
            // long one, still during the write, does not: present, then absent.
            (
                h(
                    vec![w(1, 1_000, 3_000, true)],
                    vec![r(0, 1_500, &[1]), r(2_000, 2_100, &[])],
                ),
                false,
                false,
                false,
            ),
            // Two concurrent listings each see a different concurrent write: each job alone
            // has an order, the table as a whole none.
            (
                h(
                    vec![w(1, 0, 10, true), w(2, 0, 10, true)],
                    vec![r(1, 9, &[1]), r(1, 9, &[2])],
                ),
                true,
                false,
                false,
            ),
            // Write 1 completed before write 2 began; a listing shows 2 without 1.
            (
                h(
                    vec![w(1, 0, 10, true), w(2, 11, 12, true)],
                    vec![r(5, 13, &[2])],
                ),
                true,
                false,
                false,
            ),
        ];
        for (i, (x, job, all, home)) in table.iter().enumerate() {
            assert_eq!(judges(x), (*job, *all, *home), "history {i}: {x:?}");
        }
    }

    #[test]
    fn issue_35_defect_1_history_is_caught_and_named() {
        // J0 acknowledged; W1 acknowledged by the new primary; W2 acknowledged by the old
        // primary and a blank node; the old primary lists J0 and W2, not W1.
        let (j0, w1, w2) = (10, 11, 12);
        let x = h(
            vec![
                w(j0, 0, 100, true),
                w(w1, 1_000, 1_100, true),
                w(w2, 3_000, 3_500, true),
            ],
            vec![r(3_600, 3_700, &[j0, w2])],
        );
        assert_eq!(judges(&x), (false, false, false));
        let Judgement::Not { what, span } = by_job(&x, None) else {
            panic!("defect 1 passed")
        };
        assert_eq!(
            what,
            "the listing at 3.600–3.700 s (2 jobs) does not list job 11 (written 1.000–1.100 s, \
             acknowledged), and no moment for that write agrees with every listing of the key"
        );
        assert_eq!(span, (t(1_000), t(3_700)));
    }

    /// [`by_job`] with every listing in every partition (nothing left out).
    fn by_job_unreduced(x: &History) -> bool {
        let ix = Listings::new(x);
        let mut ids: Vec<u64> = x.writes.iter().map(|w| w.id).collect();
        ids.extend(ix.listing.keys());
        ids.sort_unstable();
        ids.dedup();
        ids.iter().all(|&id| {
            let subs: Vec<usize> = (0..x.writes.len())
                .filter(|&i| x.writes[i].id == id)
                .collect();
            let reads: Vec<usize> = (0..x.reads.len()).collect();
            let ops = partition(x, &ix, id, &subs, &reads);
            matches!(
                porcupine::check_single(&Presence, &ops, None),
                Single::Linearizable(_)
            )
        })
    }

    /// Leaving listings out of a job's partition never changes its verdict; long listings
    /// (past the window of short ones) included.
    #[test]
    fn the_reduced_partitions_judge_as_the_whole_ones() {
        let mut rng = crate::rng::Rng::new(2035);
        let mut failed = 0;
        for case in 0..4000 {
            let mut x = random_history(&mut rng);
            if rng.percent(30) {
                // Stretch times so that some listings are long (over SHORT_READ).
                for r in &mut x.reads {
                    let stretch = 1 + rng.below(6) as u32;
                    r.invoked *= 50;
                    r.completed = r.invoked + (r.completed * 50 - r.invoked) * stretch;
                }
                for w in &mut x.writes {
                    w.invoked *= 50;
                    w.completed *= 50;
                }
            }
            let reduced = by_job(&x, None) == Judgement::Linearizable;
            assert_eq!(reduced, by_job_unreduced(&x), "case {case}: {x:?}");
            failed += usize::from(!reduced);
        }
        assert!(failed > 300, "{failed}");
    }

    /// Random small histories: where the whole-set search and the home-made conditions are
    /// both exact, they agree — and the projection never fails a history they pass.
    #[test]
    fn the_judges_agree_on_random_histories() {
        let mut rng = crate::rng::Rng::new(35);
        let (mut caught_by_whole, mut missed_by_job) = (0, 0);
        for case in 0..3000 {
            let x = random_history(&mut rng);
            let (job, all, home) = judges(&x);
            assert_eq!(
                all, home,
                "case {case}: whole {all}, home-made {home}: {x:?}"
            );
            assert!(
                job || !all,
                "case {case}: the projection failed a linearizable history"
            );
            caught_by_whole += usize::from(!all);
            missed_by_job += usize::from(job && !all);
        }
        // The table exercises both verdicts, and what the projection cannot see.
        assert!(caught_by_whole > 300, "{caught_by_whole}");
        assert!(missed_by_job > 0, "{missed_by_job}");
    }

    /// Up to 5 writes of distinct ids (some unacknowledged) and 4 reads, times 0–20, each
    /// read's set a random subset of the ids (often the "right" one: the writes done by then).
    fn random_history(rng: &mut crate::rng::Rng) -> History {
        let span = |rng: &mut crate::rng::Rng| {
            let a = rng.below(20);
            (a, a + rng.below(6))
        };
        let writes: Vec<Write> = (0..rng.below(6))
            .map(|id| {
                let (a, b) = span(rng);
                w(id, a, b, !rng.percent(20))
            })
            .collect();
        let reads = (0..1 + rng.below(4))
            .map(|_| {
                let (a, b) = span(rng);
                let ids = writes
                    .iter()
                    .filter(|x| {
                        let done = x.completed <= t(a) && x.acked;
                        let maybe = x.invoked <= t(b);
                        if rng.percent(85) {
                            done || (maybe && rng.percent(50))
                        } else {
                            rng.percent(50)
                        }
                    })
                    .map(|x| x.id)
                    .collect::<Vec<_>>();
                r(a, b, &ids)
            })
            .collect();
        h(writes, reads)
    }
}
