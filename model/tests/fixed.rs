//! C23: the fixed rules pass the exhaustive check within the bound — every reachable state of
//! each configuration below, every property. `XCE_MODEL_LONG=1` checks the longer bound of
//! `docs/model.md` instead (run once; its result is written there), and
//! `XCE_MODEL_ONLY=a;b` only the configurations whose name contains one of the texts.

use std::time::Instant;

use xce_model::properties::{
    SOME_HANDOVER_DONE, SOME_NODE_ADDED, SOME_NODE_REMOVED, SOME_WIPED_NODE_CAUGHT_UP,
    SOME_WRITE_ACKED,
};
use xce_model::{run, Options, Start, SLOW};

/// One configuration of the bounded check: its name, options, and the examples it must reach
/// (so that a bound too small to say anything fails instead of passing).
struct Case {
    name: &'static str,
    o: Options,
    reaches: &'static [&'static str],
}

fn long() -> bool {
    std::env::var("XCE_MODEL_LONG").is_ok_and(|v| v == "1")
}

/// Every property holds in every reachable state; the examples are reached.
fn passes(case: Case) {
    let out = run::check(case.o.clone(), None);
    println!("{}: {} — {:?}", case.name, out.summary(), case.o.bounds);
    let mut broken: Vec<_> = out
        .discoveries
        .keys()
        .filter(|p| !case.reaches.contains(p) && !p.starts_with("a "))
        .collect();
    broken.sort();
    for p in &broken {
        println!("\"{p}\" broken:\n{}", out.explain(p).unwrap_or_default());
    }
    assert!(broken.is_empty(), "{}: {broken:?} broken", case.name);
    for p in case.reaches {
        assert!(
            out.discoveries.contains_key(p),
            "{}: \"{p}\" never reached: the bound says nothing",
            case.name
        );
    }
}

/// The fixed rules from `start`, one append in flight, no fault unless the case adds one.
fn base(start: Start) -> Options {
    let mut o = Options::fixed();
    o.start = start;
    o.bounds.max_crashes = 0;
    o.bounds.max_wipes = 0;
    o.bounds.max_dups = 0;
    o.bounds.max_appends = 1;
    o
}

/// A running cluster; one disk loss; every order of the network (loss, reordering).
fn disk_loss() -> Case {
    let mut o = base(Start::Running);
    o.bounds.max_wipes = 1;
    if !long() {
        o.bounds.max_log = 3;
    }
    Case {
        name: "running cluster, disk loss",
        o,
        reaches: &[SOME_WRITE_ACKED, SOME_WIPED_NODE_CAUGHT_UP],
    }
}

/// A running cluster; a crash (the leader's unflushed suffix lost).
fn crash() -> Case {
    let mut o = base(Start::Running);
    o.bounds.max_crashes = 1;
    if !long() {
        o.bounds.max_log = 3;
    }
    Case {
        name: "running cluster, crash",
        o,
        reaches: &[SOME_WRITE_ACKED],
    }
}

/// Where issue 25's defect 2 starts: the node holding the write with the leader loses its
/// disk; partial appends; a third term.
fn behind() -> Case {
    let mut o = base(Start::Behind);
    o.bounds.max_term = 3;
    o.bounds.max_wipes = 1;
    o.bounds.max_log = 5;
    o.bounds.max_dups = u8::from(long());
    o.bounds.partial_appends = true;
    Case {
        name: "write acknowledged with a node that then loses its disk",
        o,
        reaches: &[SOME_WIPED_NODE_CAUGHT_UP],
    }
}

/// A brand-new cluster: every node blank, `initialize` by any, the first elections.
fn brand_new() -> Case {
    let mut o = base(Start::BrandNew);
    o.bounds.max_term = 1;
    if long() {
        o.bounds.max_term = 2;
    }
    Case {
        name: "brand-new cluster",
        o,
        reaches: &[SOME_WRITE_ACKED],
    }
}

/// Longer bound only: a brand-new cluster's first election with a disk loss in it (C12's
/// `brand_new` exception).
fn brand_new_disk_loss() -> Case {
    let mut o = base(Start::BrandNew);
    o.bounds.max_term = 1;
    o.bounds.max_log = 2;
    o.bounds.max_writes = 0;
    o.bounds.max_wipes = 1;
    Case {
        name: "brand-new cluster with a disk loss",
        o,
        reaches: &[],
    }
}

/// Longer bound only: a running cluster, one crash and one disk loss.
fn crash_and_disk_loss() -> Case {
    let mut o = base(Start::Running);
    o.bounds.max_log = 3;
    o.bounds.max_crashes = 1;
    o.bounds.max_wipes = 1;
    Case {
        name: "running cluster, crash and disk loss",
        o,
        reaches: &[SOME_WRITE_ACKED, SOME_WIPED_NODE_CAUGHT_UP],
    }
}

/// C11 fifth round: the leader slow (a three-tick window), its followers fast (a one-tick
/// refusal): an ack counts only within the follower's window.
fn mixed_timings() -> Case {
    let mut o = base(Start::Running);
    o.timings[0] = SLOW;
    o.bounds.max_dups = u8::from(long());
    Case {
        name: "nodes of different timings",
        o,
        reaches: &[SOME_WRITE_ACKED],
    }
}

/// C14: a handover, then anything.
fn handover() -> Case {
    let mut o = base(Start::Running);
    o.bounds.max_handovers = 1;
    if long() {
        o.bounds.max_log = 5;
    } else {
        o.bounds.max_writes = 0;
    }
    Case {
        name: "leader transfer",
        o,
        reaches: &[SOME_HANDOVER_DONE],
    }
}

/// C17: node 4 (blank, with the marker) added as a learner, then promoted through a joint
/// config; quorums of the effective (last) membership.
fn member_added() -> Case {
    let mut o = base(Start::Running);
    o.spare = true;
    o.bounds.max_changes = 2;
    o.bounds.max_term = 1;
    o.bounds.max_log = 5;
    o.bounds.max_writes = 0;
    Case {
        name: "a voter added",
        o,
        reaches: &[SOME_NODE_ADDED],
    }
}

/// C17: a voter other than the leader removed through a joint config, then elections.
fn member_removed() -> Case {
    let mut o = base(Start::Running);
    o.bounds.max_changes = 1;
    o.bounds.max_log = 5;
    o.bounds.max_writes = u8::from(long());
    Case {
        name: "a voter removed",
        o,
        reaches: &[SOME_NODE_REMOVED],
    }
}

#[test]
fn the_fixed_rules_hold_within_the_bound() {
    let t0 = Instant::now();
    let only = std::env::var("XCE_MODEL_ONLY").unwrap_or_default();
    let extra = long()
        .then(|| [brand_new_disk_loss(), crash_and_disk_loss()])
        .into_iter()
        .flatten();
    for case in [
        brand_new(),
        disk_loss(),
        crash(),
        behind(),
        mixed_timings(),
        handover(),
        member_added(),
        member_removed(),
    ]
    .into_iter()
    .chain(extra)
    .filter(|c| only.split(';').any(|o| c.name.contains(o)))
    {
        passes(case);
    }
    println!("all configurations: {:.1} s", t0.elapsed().as_secs_f64());
}
