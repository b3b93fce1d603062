//! C19: the online consistency check, on real processes. A member's state is made to differ
//! from the others' outside the log — the way a damaged disk or a bad restore does it: the
//! node is killed and one number in its snapshot file is changed (the default queue's
//! priority, a field no command touches afterwards), then it is started again. Raft sees
//! nothing wrong (the log ids match); the primary's periodic check must find it within 10 s
//! and, since no log id can tell which state is the history (C19, fifth round: Raft's order,
//! never a count), raise the CORRUPT alarm on every member and refuse writes until the node
//! is repaired (its data directory emptied, caught up again).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;
use xce_proto::wire::{Op, ReplyData};

/// The issue's bound: an induced divergence is reported within this.
const FOUND_WITHIN: Duration = Duration::from_secs(10);

/// Changes the default queue's priority in node `dir`'s snapshot file (the JSON header keeps
/// its length: 20 -> `to`, two digits).
fn corrupt_snapshot(dir: &Path, to: u8) {
    let p = dir.join("snapshot.bin");
    let bytes = std::fs::read(&p).unwrap();
    let from = br#""priority":20"#;
    let at = bytes
        .windows(from.len())
        .position(|w| w == from)
        .expect("the default queue's priority in the snapshot");
    let mut out = bytes.clone();
    out[at..at + from.len()].copy_from_slice(format!(r#""priority":{to}"#).as_bytes());
    std::fs::write(&p, out).unwrap();
}

/// The primary's answer to a consistency check (it runs one first).
fn check(ctrl: &Cluster, p: u32) -> xce_proto::wire::ControllerInfo {
    let mut c = ctrl.client(p);
    info(&c.call(Op::ConsistencyCheck))
}

/// Node `id`'s `hello` answer (a default one while its client port is not up, or while it
/// answers with a status and no info: a primary cut off from its quorum for a moment answers
/// NOMASTER — seen in a soak run, where the polling loop asking it panicked instead of asking
/// again).
fn hello_of(ctrl: &Cluster, id: u32) -> xce_proto::wire::ControllerInfo {
    let answer = WireClient::try_connect(&ctrl.addr(id), Duration::from_millis(500))
        .and_then(|mut c| c.try_call(hello()).ok());
    match answer.map(|r| r.data) {
        Some(ReplyData::CtrlInfo(i)) => i,
        _ => Default::default(),
    }
}

/// Submits jobs `from..from + n` through the primary `p`.
fn fill(ctrl: &Cluster, p: u32, from: u64, n: u64) {
    let mut c = ctrl.client(p);
    for i in from..from + n {
        c.ok(submit(i, "alice", ""));
    }
}

/// Waits until every node of `ids` reports the CORRUPT alarm; returns one node's text.
fn corrupt_everywhere(ctrl: &Cluster, ids: &[u32]) -> String {
    let mut text = String::new();
    ctrl.wait_until(
        "the CORRUPT alarm on every member",
        FOUND_WITHIN * 2,
        || {
            ids.iter().all(|&id| {
                hello_of(ctrl, id).alarms.iter().any(|a| {
                    let raised = a.starts_with("CORRUPT:");
                    if raised {
                        text = a.clone();
                    }
                    raised
                })
            })
        },
    );
    text
}

/// Under the CORRUPT alarm writes are refused with `E_XCE_CORRUPT`, reads are served.
fn writes_refused_reads_served(ctrl: &Cluster, p: u32) {
    let r = ctrl.client(p).call(submit(8_888, "alice", ""));
    assert_eq!(r.status, -xce_proto::error::E_XCE_CORRUPT, "{r:?}");
    let r = ctrl.client(p).call(Op::JobInfo { job_id: 1_000 });
    assert_eq!(r.status, 0, "a read under the alarm: {r:?}");
}

/// The repair of node `v`: its data directory emptied, started again (blank, with its old
/// flags: C12), caught up from the primary; then a check finds every member agreeing and the
/// alarm goes.
fn repair(ctrl: &mut Cluster, v: u32) {
    let vdir = ctrl.data_dir().join(format!("data-{v}"));
    let from = ctrl.log(v).len();
    ctrl.kill(v);
    std::fs::remove_dir_all(&vdir).unwrap();
    ctrl.start_node(v);
    ctrl.wait_until(&format!("node {v} caught up"), STARTUP * 2, || {
        ctrl.logged_since(v, from, "votes and campaigns again")
    });
}

/// C19 (fifth round): a standby whose state differs outside the log (a changed snapshot: the
/// same log ids, another state) is found by the periodic check within 10 s (a log line naming
/// the nodes and the index, `xce_state_digest_mismatch_total`). No log id can tell which state
/// is the history, so no node is singled out by a count: the CORRUPT alarm is committed,
/// every member shows it, writes are refused and reads served, until the operator empties the
/// node's data directory and it catches up — then the next check finds agreement and clears
/// it. A healthy cluster under writes raises nothing first.
#[test]
fn a_member_whose_state_differs_raises_the_corrupt_alarm_until_repaired() {
    let mut ctrl = cluster(3, &["--snapshot-logs", "10", "--metrics", "127.0.0.1:0"]);
    let p = ctrl.expect_settled(STARTUP);
    fill(&ctrl, p, 1_000, 60);
    let v = [1u32, 2, 3].into_iter().find(|&i| i != p).unwrap();
    let vdir = ctrl.data_dir().join(format!("data-{v}"));
    ctrl.wait_until("the standby's snapshot", STARTUP, || {
        vdir.join("snapshot.bin").exists()
    });
    let healthy = check(&ctrl, p);
    assert!(healthy.checked_index > 0, "{healthy:?}");
    assert!(healthy.alarms.is_empty(), "{:?}", healthy.alarms);
    fill(&ctrl, p, 2_000, 5);
    let mismatches = |ctrl: &Cluster| ctrl.metric(p, "xce_state_digest_mismatch_total");
    assert_eq!(mismatches(&ctrl), Some(0.0));

    ctrl.kill(v);
    corrupt_snapshot(&vdir, 21);
    ctrl.start_node(v);
    let restarted = Instant::now();
    let text = corrupt_everywhere(&ctrl, &[1, 2, 3]);
    let took = restarted.elapsed();
    eprintln!("CORRUPT reported on every member {took:?} after node {v}'s restart: {text}");
    assert!(took <= FOUND_WITHIN * 2, "found after {took:?}");
    assert!(
        ctrl.log(p).contains("CORRUPT: state digests at index"),
        "no log line naming the index:\n{}",
        ctrl.log(p)
    );
    assert!(mismatches(&ctrl) >= Some(1.0));
    for id in 1..=3u32 {
        assert!(
            !ctrl.data_dir().join(format!("data-{id}/diverged")).exists(),
            "node {id} was stopped by a count"
        );
    }
    let p = ctrl.expect_primary(STARTUP);
    writes_refused_reads_served(&ctrl, p);

    repair(&mut ctrl, v);
    let p = ctrl.expect_primary(STARTUP);
    ctrl.wait_until("the alarm cleared after the repair", STARTUP * 2, || {
        check(&ctrl, p).alarms.is_empty()
            && (1..=3u32).all(|id| hello_of(&ctrl, id).alarms.is_empty())
    });
    ctrl.client(p).ok(submit(5_000, "alice", ""));
    let j = job(ctrl.client(p).ok(Op::JobInfo { job_id: 5_000 }));
    assert_eq!(j.job_id, 5_000);
}

/// C19 (fifth round), issue 35 defect 3: a count never overrules. Both standbys' states were
/// changed the same way (two against one): before, the primary — the one that held the
/// history — found itself in the minority and stopped. Now no log id tells the states apart,
/// nobody is stopped, and the CORRUPT alarm holds writes until both are repaired. The same
/// when the two were changed two different ways.
#[test]
fn two_members_changed_alike_do_not_outvote_the_primary() {
    for same in [true, false] {
        let mut ctrl = cluster(3, &["--snapshot-logs", "10"]);
        let p = ctrl.expect_settled(STARTUP);
        fill(&ctrl, p, 1_000, 40);
        let standbys: Vec<u32> = [1u32, 2, 3].into_iter().filter(|&i| i != p).collect();
        for &s in &standbys {
            let d = ctrl.data_dir().join(format!("data-{s}"));
            ctrl.wait_until("a standby's snapshot", STARTUP, || {
                d.join("snapshot.bin").exists()
            });
        }
        let first = check(&ctrl, p);
        assert!(first.alarms.is_empty(), "{:?}", first.alarms);
        for (k, &s) in standbys.iter().enumerate() {
            ctrl.kill(s);
            let to = if same { 33 } else { 33 + k as u8 };
            corrupt_snapshot(&ctrl.data_dir().join(format!("data-{s}")), to);
        }
        for &s in &standbys {
            ctrl.start_node(s);
        }
        corrupt_everywhere(&ctrl, &[1, 2, 3]);
        for id in 1..=3u32 {
            assert!(
                !ctrl.data_dir().join(format!("data-{id}/diverged")).exists(),
                "node {id} was stopped by a count (same: {same})\n{}",
                ctrl.all_logs()
            );
        }
        let q = ctrl.expect_primary(STARTUP);
        writes_refused_reads_served(&ctrl, q);
        for &s in &standbys {
            repair(&mut ctrl, s);
        }
        let q = ctrl.expect_primary(STARTUP);
        ctrl.wait_until("the alarm cleared after the repair", STARTUP * 2, || {
            check(&ctrl, q).alarms.is_empty()
        });
        ctrl.client(q).ok(submit(9_000, "bob", ""));
    }
}

/// The nemesis's seed 107 (S20): a `hello` or `clusterConf` answered from the applied state
/// asked for the node's alarms, which read the state again (C19's CORRUPT alarm) on the same
/// thread; with the state machine's writer waiting between the two reads, std's `RwLock`
/// deadlocked both tokio workers and the primary answered nothing for two minutes. The state's
/// lock now refuses a second guard on one thread at once (`raft/state_lock.rs`: a panic, so the
/// call fails), whether or not a writer is waiting: every reading op is answered on a primary
/// and a standby, under writes, with the state taken once.
#[test]
fn every_read_takes_the_applied_state_once() {
    let ctrl = cluster(3, &[]);
    let p = ctrl.expect_settled(STARTUP);
    fill(&ctrl, p, 1, 20);
    let s = ctrl.ids().into_iter().find(|&id| id != p).unwrap();
    for id in [p, s] {
        let mut c = ctrl.client(id);
        for op in [
            hello(),
            Op::ClusterConf,
            Op::JobInfo { job_id: 1 },
            Op::ResList,
            Op::WorkerList,
        ] {
            let what = format!("{op:?} on node {id}");
            let r = c.try_call(op);
            assert!(r.is_ok(), "{what}: {r:?}\n{}", ctrl.all_logs());
        }
    }
    let mut c = ctrl.client(p);
    for _ in 0..3 {
        let r = c.try_call(hello());
        assert!(
            matches!(r.as_ref().map(|r| &r.data), Ok(ReplyData::CtrlInfo(_))),
            "{r:?}"
        );
    }
}
