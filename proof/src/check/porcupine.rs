//! Porcupine's linearizability checker (Anish Athalye's `porcupine`, `checker.go`), ported
//! to Rust: the Wing & Gong search as Lowe improved it ("Testing for linearizability", 2017)
//! — operations linearized as early as their calls allow, backtracking, and a cache of the
//! (linearized set, model state) pairs already explored — and Horn & Kroening's
//! P-compositionality ("Faster linearizability checking via P-compositionality", 2015): a
//! model may split a history into partitions that are checked apart.
//!
//! No maintained crate fits: `stateright`'s `LinearizabilityTester` searches without a cache
//! and cannot hold an operation whose outcome is unknown while its thread goes on (measured in
//! `docs/acceptance.md`, S20); `todc-utils`'s `WGLChecker` has neither partitions nor pending
//! operations. What is ported, step for step: the entries sorted by time with calls before
//! returns at equal times (intervals are closed), the doubly linked list of entries with
//! `lift`/`unlift`, the bitset of linearized operations and its hash, the cache keyed by that
//! hash (and the state's), the stack of calls to backtrack to, and the `Unknown` answer when
//! the time allowed runs out. An operation whose outcome is unknown (a write that failed: it
//! may or may not have taken effect) has no return: its return entry goes after every other,
//! as porcupine's users give it the largest time.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::Instant;

/// A sequential specification (porcupine's `Model`, without the visualisation's parts).
pub trait Model {
    type State: Clone + Eq + Hash;
    type Input;
    type Output;
    fn init(&self) -> Self::State;
    /// The state after `input` answered by `output`, if the specification allows that answer.
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: &Self::Output,
    ) -> Option<Self::State>;
}

/// One operation of a history; times in any one unit (nanoseconds here), `ret` `None` when the
/// operation never returned (its outcome is unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation<I, O> {
    pub input: I,
    pub output: O,
    pub call: u64,
    pub ret: Option<u64>,
}

/// A check's answer (porcupine's `CheckResult`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// No linearization: in partition `partition`, the longest linearizable prefix found
    /// (operations by index in that partition).
    Illegal {
        partition: usize,
        longest: Vec<usize>,
    },
    /// The time allowed ran out before an answer (porcupine's `Unknown`).
    Unknown,
}

/// An entry of the list: a call (with its return's index) or a return.
#[derive(Debug, Clone, Copy)]
struct Node {
    /// The operation's index in the partition.
    op: usize,
    /// `Some(return node)` for a call, `None` for a return.
    matching: Option<usize>,
    prev: usize,
    next: Option<usize>,
}

/// The linked list of entries, nodes in an arena; node 0 is the head (porcupine's
/// `headEntry`), never lifted.
struct Entries {
    nodes: Vec<Node>,
}

const HEAD: usize = 0;

impl Entries {
    /// Calls and returns sorted by time, calls first at equal times (`byTime`); an unknown
    /// return after every known one (in call order among themselves).
    fn new<I, O>(ops: &[Operation<I, O>]) -> Entries {
        // (time, is return, op): sorting the tuples is porcupine's order.
        let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(ops.len() * 2);
        for (i, o) in ops.iter().enumerate() {
            events.push((o.call, false, i));
            events.push((o.ret.unwrap_or(u64::MAX), true, i));
        }
        events.sort_unstable();
        let mut nodes = Vec::with_capacity(events.len() + 1);
        nodes.push(Node {
            op: usize::MAX,
            matching: None,
            prev: HEAD,
            next: None,
        });
        let mut ret_node = vec![0; ops.len()];
        for (k, &(_, is_ret, op)) in events.iter().enumerate() {
            if is_ret {
                ret_node[op] = k + 1;
            }
        }
        for (k, &(_, is_ret, op)) in events.iter().enumerate() {
            nodes.push(Node {
                op,
                matching: (!is_ret).then_some(ret_node[op]),
                prev: k,
                next: (k + 2 <= events.len()).then_some(k + 2),
            });
        }
        nodes[HEAD].next = (!events.is_empty()).then_some(1);
        Entries { nodes }
    }

    /// Takes call `e` and its return out of the list (`lift`).
    fn lift(&mut self, e: usize) {
        let n = self.nodes[e];
        self.nodes[n.prev].next = n.next;
        if let Some(next) = n.next {
            self.nodes[next].prev = n.prev;
        }
        let m = self.nodes[n.matching.expect("a call")];
        self.nodes[m.prev].next = m.next;
        if let Some(next) = m.next {
            self.nodes[next].prev = m.prev;
        }
    }

    /// Puts call `e` and its return back (`unlift`).
    fn unlift(&mut self, e: usize) {
        let n = self.nodes[e];
        let r = n.matching.expect("a call");
        let m = self.nodes[r];
        self.nodes[m.prev].next = Some(r);
        if let Some(next) = m.next {
            self.nodes[next].prev = r;
        }
        self.nodes[n.prev].next = Some(e);
        if let Some(next) = n.next {
            self.nodes[next].prev = e;
        }
    }
}

/// The set of linearized operations (porcupine's `bitset`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bitset(Vec<u64>);

impl Bitset {
    fn new(bits: usize) -> Bitset {
        Bitset(vec![0; bits.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
    /// porcupine's hash (the MurmurHash3 finaliser's prime, word by word).
    fn hash(&self) -> u64 {
        const PRIME: u64 = 0xff51_afd7_ed55_8ccd;
        self.0
            .iter()
            .fold(0u64, |h, &w| (h ^ w).wrapping_mul(PRIME))
    }
}

fn state_hash<S: Hash>(s: &S) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// How often the search looks at the clock.
const CLOCK_EVERY: u32 = 1024;

/// One partition's answer; operations by their index in the partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Single {
    /// Linearizable, in this order.
    Linearizable(Vec<usize>),
    /// Not: the longest linearizable prefix found.
    Illegal(Vec<usize>),
    OutOfTime,
}

/// One partition (porcupine's `checkSingle`).
pub fn check_single<M: Model>(
    model: &M,
    ops: &[Operation<M::Input, M::Output>],
    deadline: Option<Instant>,
) -> Single {
    let mut list = Entries::new(ops);
    let mut linearized = Bitset::new(ops.len());
    let mut cache: HashMap<u64, Vec<(Bitset, M::State)>> = HashMap::new();
    // (call node, the state before it): what to go back to.
    let mut calls: Vec<(usize, M::State)> = Vec::new();
    let mut longest: Vec<usize> = Vec::new();
    let mut state = model.init();
    let mut entry = list.nodes[HEAD].next;
    let mut turns = 0u32;
    while let Some(e) = entry {
        turns = turns.wrapping_add(1);
        if turns.is_multiple_of(CLOCK_EVERY) && deadline.is_some_and(|d| Instant::now() >= d) {
            return Single::OutOfTime;
        }
        let node = list.nodes[e];
        match node.matching {
            Some(_) => {
                let op = &ops[node.op];
                match model.step(&state, &op.input, &op.output) {
                    Some(next) => {
                        linearized.set(node.op);
                        let key = linearized.hash() ^ state_hash(&next);
                        let bucket = cache.entry(key).or_default();
                        if bucket.iter().any(|(b, s)| *b == linearized && *s == next) {
                            linearized.clear(node.op);
                            entry = node.next;
                        } else {
                            bucket.push((linearized.clone(), next.clone()));
                            calls.push((e, std::mem::replace(&mut state, next)));
                            list.lift(e);
                            entry = list.nodes[HEAD].next;
                        }
                    }
                    None => entry = node.next,
                }
            }
            None => {
                // A return reached: its call could not be linearized before it. Back up.
                if calls.len() > longest.len() {
                    longest = calls.iter().map(|&(c, _)| list.nodes[c].op).collect();
                }
                let Some((c, before)) = calls.pop() else {
                    return Single::Illegal(longest);
                };
                state = before;
                linearized.clear(list.nodes[c].op);
                list.unlift(c);
                entry = list.nodes[c].next;
            }
        }
    }
    Single::Linearizable(calls.iter().map(|&(c, _)| list.nodes[c].op).collect())
}

/// Checks each partition of a history (porcupine's `checkOperations` after `Partition`), in
/// order, until one is not linearizable or `deadline` passes.
pub fn check_partitions<M: Model>(
    model: &M,
    partitions: impl IntoIterator<Item = Vec<Operation<M::Input, M::Output>>>,
    deadline: Option<Instant>,
) -> Outcome {
    for (i, p) in partitions.into_iter().enumerate() {
        match check_single(model, &p, deadline) {
            Single::Linearizable(_) => {}
            Single::Illegal(longest) => {
                return Outcome::Illegal {
                    partition: i,
                    longest,
                }
            }
            Single::OutOfTime => return Outcome::Unknown,
        }
    }
    Outcome::Ok
}

/// One history, unpartitioned.
pub fn check<M: Model>(
    model: &M,
    ops: Vec<Operation<M::Input, M::Output>>,
    deadline: Option<Instant>,
) -> Outcome {
    check_partitions(model, [ops], deadline)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// porcupine's register model (`registerModel` of its tests): put always succeeds, get
    /// must return the state.
    struct Register;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum RegOp {
        Put(i64),
        Get,
    }

    impl Model for Register {
        type State = i64;
        type Input = RegOp;
        type Output = i64;
        fn init(&self) -> i64 {
            0
        }
        fn step(&self, s: &i64, i: &RegOp, o: &i64) -> Option<i64> {
            match i {
                RegOp::Put(v) => Some(*v),
                RegOp::Get => (o == s).then_some(*s),
            }
        }
    }

    fn op(input: RegOp, call: u64, output: i64, ret: u64) -> Operation<RegOp, i64> {
        Operation {
            input,
            output,
            call,
            ret: Some(ret),
        }
    }

    #[test]
    fn porcupines_register_histories() {
        // `TestRegisterModel` (MIT 6.824 2017 quiz 2, section VII).
        let ok = vec![
            op(RegOp::Put(100), 0, 0, 100),
            op(RegOp::Get, 25, 100, 75),
            op(RegOp::Get, 30, 0, 60),
        ];
        assert_eq!(check(&Register, ok, None), Outcome::Ok);
        let bad = vec![
            op(RegOp::Put(200), 0, 0, 100),
            op(RegOp::Get, 10, 200, 30),
            op(RegOp::Get, 40, 0, 90),
        ];
        assert!(matches!(
            check(&Register, bad, None),
            Outcome::Illegal { .. }
        ));
    }

    #[test]
    fn intervals_are_closed() {
        // `TestZeroDuration`: reads of zero length at one instant.
        let ok = vec![
            op(RegOp::Put(100), 0, 0, 100),
            op(RegOp::Get, 25, 100, 75),
            op(RegOp::Get, 30, 0, 30),
            op(RegOp::Get, 30, 0, 30),
        ];
        assert_eq!(check(&Register, ok, None), Outcome::Ok);
        let bad = vec![
            op(RegOp::Put(200), 0, 0, 100),
            op(RegOp::Get, 10, 200, 10),
            op(RegOp::Get, 10, 200, 10),
            op(RegOp::Get, 40, 0, 90),
        ];
        assert!(matches!(
            check(&Register, bad, None),
            Outcome::Illegal { .. }
        ));
        // Touching intervals overlap: the get at 10 may come before the put that ended at 10.
        let touch = vec![op(RegOp::Put(1), 0, 0, 10), op(RegOp::Get, 10, 0, 20)];
        assert_eq!(check(&Register, touch, None), Outcome::Ok);
    }

    #[test]
    fn an_operation_that_never_returned_may_take_effect_late_or_never() {
        let pending = |input, call| Operation {
            input,
            output: 0,
            call,
            ret: None,
        };
        // Seen late: fine.
        let late = vec![
            pending(RegOp::Put(7), 0),
            op(RegOp::Get, 10, 0, 20),
            op(RegOp::Get, 30, 7, 40),
        ];
        assert_eq!(check(&Register, late, None), Outcome::Ok);
        // Never seen: fine.
        let never = vec![pending(RegOp::Put(7), 0), op(RegOp::Get, 10, 0, 20)];
        assert_eq!(check(&Register, never, None), Outcome::Ok);
        // Seen, then unseen: no single moment it took effect.
        let flicker = vec![
            pending(RegOp::Put(7), 0),
            op(RegOp::Get, 10, 7, 20),
            op(RegOp::Get, 30, 0, 40),
        ];
        let Outcome::Illegal { longest, .. } = check(&Register, flicker, None) else {
            panic!("a value that came and went passed")
        };
        assert_eq!(
            longest,
            [0, 1],
            "put, then the first get: the longest prefix"
        );
    }

    #[test]
    fn partitions_are_checked_apart_and_the_failing_one_named() {
        let good = vec![op(RegOp::Put(1), 0, 0, 1), op(RegOp::Get, 2, 1, 3)];
        let bad = vec![op(RegOp::Put(1), 0, 0, 1), op(RegOp::Get, 2, 0, 3)];
        assert_eq!(
            check_partitions(&Register, [good.clone(), good.clone()], None),
            Outcome::Ok
        );
        assert!(matches!(
            check_partitions(&Register, [good, bad], None),
            Outcome::Illegal { partition: 1, .. }
        ));
    }

    #[test]
    fn out_of_time_is_unknown_not_ok() {
        // Many concurrent puts and gets no order satisfies: an exhaustive search.
        let mut ops: Vec<_> = (0..40).map(|v| op(RegOp::Put(v), 0, 0, 1000)).collect();
        ops.extend((0..40).map(|_| op(RegOp::Get, 0, -1, 1000)));
        assert_eq!(
            check(&Register, ops, Some(Instant::now())),
            Outcome::Unknown
        );
    }

    #[test]
    fn the_list_lifts_and_unlifts_in_place() {
        let ops = vec![op(RegOp::Put(1), 0, 0, 3), op(RegOp::Get, 1, 1, 2)];
        let mut l = Entries::new(&ops);
        // call0 call1 ret1 ret0
        let order = |l: &Entries| {
            let mut v = Vec::new();
            let mut e = l.nodes[HEAD].next;
            while let Some(i) = e {
                v.push((l.nodes[i].op, l.nodes[i].matching.is_some()));
                e = l.nodes[i].next;
            }
            v
        };
        assert_eq!(order(&l), [(0, true), (1, true), (1, false), (0, false)]);
        l.lift(2);
        assert_eq!(order(&l), [(0, true), (0, false)]);
        l.lift(1);
        assert_eq!(order(&l), []);
        l.unlift(1);
        l.unlift(2);
        assert_eq!(order(&l), [(0, true), (1, true), (1, false), (0, false)]);
    }
}
