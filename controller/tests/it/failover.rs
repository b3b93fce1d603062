//! Three real controller processes: roles and redirects (C2), failover on `kill -9`, restart
//! from the data directory, durability of acknowledged writes, exactly-once re-sends (C4),
//! no stale reads from a deposed primary (C3), snapshot catch-up.

use std::time::{Duration, Instant};

use crate::common::*;
use xce_proto::error::{E_XCE_NOMASTER, E_XCE_NOT_READY, E_XCE_REDIRECT, E_XCE_STANDBY};
use xce_proto::wire::{ControllerRole, JobFilter, JobState, Op, ReplyData, SessionRole};

/// Default election timeout is 300–600 ms; allow for detection, the vote round, the first
/// commit and a loaded debug build.
const FAILOVER_BOUND: Duration = Duration::from_secs(5);

#[test]
fn standbys_redirect_failover_rejoin_and_exactly_once() {
    let mut ctrl = cluster(3, &[]);
    let p = ctrl.expect_settled(STARTUP);
    let paddr = ctrl.addr(p).clone();

    // C2: each standby redirects `join` and refuses other ops with the primary's address.
    for s in others(&[1, 2, 3], p) {
        let mut c = ctrl.client(s);
        for (op, status) in [
            (join(SessionRole::Worker, "h1"), -E_XCE_REDIRECT),
            (Op::JobInfo { job_id: 1 }, -E_XCE_STANDBY),
            (submit(1, "u", ""), -E_XCE_STANDBY),
            (hello(), -E_XCE_STANDBY),
        ] {
            let r = c.call(op.clone());
            assert_eq!(
                (r.status, hint(&r)),
                (status, paddr.clone()),
                "{op:?} on standby {s}"
            );
            if matches!(op, Op::Hello(_)) {
                assert_eq!(info(&r).role, ControllerRole::Standby);
            }
        }
        // waitPrimary is answered by any node.
        let r = c.call(wait_primary_op(2000));
        assert_eq!(r.status, 0);
        assert_eq!(info(&r).primary_id, p);
    }

    // Writes acknowledged before the kill.
    let mut c = ctrl.client(p);
    let submit_req = c.request(submit(1, "u", ""));
    assert_eq!(
        c.try_send_recv(&submit_req).unwrap().data,
        ReplyData::JobId(1)
    );
    c.ok(join(SessionRole::Worker, "h1"));
    let task_req = c.request(Op::RunTask {
        host: "h1".into(),
        command: "true".into(),
    });
    let task = c.try_send_recv(&task_req).unwrap().data;
    assert!(matches!(task, ReplyData::TaskId(_)));
    let term_before = info(&c.call(hello())).term;

    // kill -9 the primary: a new one within the bound.
    let killed_at = Instant::now();
    ctrl.kill(p);
    let q = ctrl.expect_primary_among(&others(&[1, 2, 3], p), FAILOVER_BOUND);
    let took = killed_at.elapsed();
    eprintln!("failover: node {p} killed, node {q} primary after {took:?}");
    assert!(took < FAILOVER_BOUND);

    let mut c2 = ctrl.client(q);
    // Same client, same request ids: the first replies, nothing changed.
    c2.client_id = c.client_id;
    assert!(info(&c2.call(hello())).term > term_before);
    let j = job(c2.ok(Op::JobInfo { job_id: 1 }));
    assert_eq!(j.state, JobState::Pend);
    let mut resend = submit_req.clone();
    resend.seq = 1000;
    let r = c2.try_send_recv(&resend).unwrap();
    assert_eq!(
        (r.status, r.data),
        (0, ReplyData::JobId(1)),
        "re-sent submit returns its first reply"
    );
    let mut resend = task_req.clone();
    resend.seq = 1001;
    assert_eq!(
        c2.try_send_recv(&resend).unwrap().data,
        task,
        "re-sent runtask returns the same task id"
    );
    assert_eq!(job_ids(&mut c2, JobFilter::default()).len(), 1);

    // The killed node restarts from its data dir and rejoins as a standby of q.
    ctrl.start_node(p);
    let qaddr = ctrl.addr(q).clone();
    ctrl.wait_until(
        "restarted node is a standby of the new primary",
        STARTUP,
        || {
            let Some(mut c) = WireClient::try_connect(&ctrl.addr(p), Duration::from_millis(500))
            else {
                return false;
            };
            match c.try_call(Op::JobInfo { job_id: 1 }) {
                Ok(r) => r.status == -E_XCE_STANDBY && hint(&r) == qaddr,
                Err(_) => false,
            }
        },
    );
    // And it serves the acknowledged state when it becomes primary: make it so by killing q.
    ctrl.kill(q);
    let r = ctrl.expect_primary_among(&others(&[1, 2, 3], q), FAILOVER_BOUND * 2);
    let mut c3 = ctrl.client(r);
    assert_eq!(job(c3.ok(Op::JobInfo { job_id: 1 })).user, "u");
}

#[test]
fn deposed_primary_never_answers_stale_reads() {
    let ctrl = cluster(3, &[]);
    // Settled, not only a primary: a standby still catching up from blank (C12) votes for
    // nobody, so stopping the primary then left no quorum (seen on a loaded machine).
    let p = ctrl.expect_settled(STARTUP);
    let mut old = deposed_reads_are_fresh(&ctrl, p, STARTUP, "default timing");
    // And it does not call itself primary (a connection it closes on learning it was deposed
    // is asked again).
    let h = (1..=10)
        .find_map(|_| match old.try_call(hello()) {
            Ok(h) => Some(h),
            Err(_) => {
                old = ctrl.client(p);
                None
            }
        })
        .expect("the deposed primary answers hello");
    assert!(h.status != 0 || info(&h).role != ControllerRole::Primary || info(&h).id != p);
}

/// Writes through the library to the running nodes `up` (another is down) until each has taken
/// a snapshot after the first 40 writes, and purged its log behind it: the node that is down
/// can then catch up only from a snapshot. How many jobs were written.
fn write_past_snapshots(ctrl: &Cluster, up: &[u32]) -> u64 {
    let masters: Vec<String> = up.iter().map(|&i| ctrl.addr(i)).collect();
    let c = lib_client(&masters.join(","));
    let write = |id: u64| {
        let Op::JobSubmit(spec) = submit(id, "u", "") else {
            unreachable!()
        };
        c.jobsubmit(spec)
            .unwrap_or_else(|e| panic!("write {id}: {e:?}\n{}", ctrl.all_logs()));
    };
    for id in 1..=40 {
        write(id);
    }
    // Snapshots are taken by a periodic trigger (every 10 writes here), on each node: keep
    // writing until both running nodes have one taken after these 40 and have purged their
    // log behind it (keeping 10 entries; the purge follows the snapshot within the trigger's
    // tick, `raft/compaction.rs`), so the restarted node cannot catch up from a log, whichever
    // of them leads.
    let purged = |id: u32| ctrl.log(id).matches("log purged up to").count();
    let before: Vec<usize> = up.iter().map(|&i| purged(i)).collect();
    let mut written = 40;
    while up.iter().zip(&before).any(|(&i, &b)| purged(i) == b) {
        assert!(
            written < 400,
            "no snapshot and purge after {written} writes"
        );
        written += 1;
        write(written);
        std::thread::sleep(Duration::from_millis(5));
    }
    written
}

#[test]
fn restarted_node_catches_up_from_a_snapshot() {
    let mut ctrl = cluster(3, &["--snapshot-logs", "10", "--log-keep", "10"]);
    let p = ctrl.expect_settled(STARTUP);
    let s = others(&[1, 2, 3], p)[0];
    let up = others(&[1, 2, 3], s);
    ctrl.kill(s);
    // Writes through the library: on a loaded machine the two remaining nodes may trade
    // leadership (a lease lapses while a process waits for a CPU), and a raw connection's
    // write then answers E_XCE_UNKNOWN or STANDBY. The library re-sends it, exactly once (C4),
    // so what follows holds whoever leads.
    let written = write_past_snapshots(&ctrl, &up);
    ctrl.start_node(s);
    ctrl.wait_until("snapshot installed on the restarted node", STARTUP, || {
        ctrl.log(s)
            .contains(&format!("node {s}: installed snapshot"))
    });
    // The restarted node now holds everything: make it serve by killing the primary.
    let p = ctrl.expect_primary(STARTUP);
    ctrl.kill(p);
    let q = ctrl.expect_primary_among(&others(&[1, 2, 3], p), STARTUP);
    assert_eq!(listed_on(&ctrl, q).len() as u64, written);
    // The old primary restarts from its own snapshot + log and rejoins as a standby of the
    // primary there is then.
    ctrl.start_node(p);
    ctrl.wait_until("old primary rejoins", STARTUP, || {
        let Some(mut c) = WireClient::try_connect(&ctrl.addr(p), Duration::from_millis(500)) else {
            return false;
        };
        c.try_call(Op::ResList).is_ok_and(|r| {
            r.status == -E_XCE_STANDBY
                && ctrl
                    .running()
                    .iter()
                    .any(|&i| i != p && hint(&r) == ctrl.addr(i))
        })
    });
}

#[test]
fn wait_primary_on_a_standby_skips_a_dead_primary() {
    let mut ctrl = cluster(3, &[]);
    let p = ctrl.expect_settled(STARTUP);
    let s = others(&[1, 2, 3], p)[0];
    let mut w = ctrl.client(s);
    assert_eq!(info(&w.call(immediate_wait())).primary_id, p);
    ctrl.kill(p);
    // Once the primary has been silent for an election timeout (300 ms by default), a standby
    // no longer names it: waitPrimary waits for the new one (F18).
    std::thread::sleep(Duration::from_millis(400));
    let asked = Instant::now();
    let wi = info(&w.call(wait_primary_op(5000)));
    eprintln!(
        "waitPrimary on {s} after kill of {p}: primary {} after {:?}",
        wi.primary_id,
        asked.elapsed()
    );
    assert!(
        wi.primary_id != 0 && wi.primary_id != p,
        "waitPrimary named {}",
        wi.primary_id
    );
    // With no quorum left, waitPrimary returns at its timeout with no primary.
    let q = wi.primary_id;
    ctrl.kill(q);
    let t = others(&[1, 2, 3], p).into_iter().find(|&i| i != q).unwrap();
    let mut w = ctrl.client(t);
    std::thread::sleep(Duration::from_millis(400));
    let asked = Instant::now();
    let wi = info(&w.call(wait_primary_op(1000)));
    assert_eq!(wi.primary_id, 0);
    assert!(asked.elapsed() >= Duration::from_millis(900));
    let r = w.call(Op::ResList);
    assert!(
        [-E_XCE_NOT_READY, -E_XCE_NOMASTER, -E_XCE_STANDBY].contains(&r.status),
        "{r:?}"
    );
}

/// C15 (amended): a snapshot goes to a follower on a connection of its own that is bulk at both
/// ends (priority 0, DSCP 0), while the raft link to that follower keeps CS6. Before: the
/// snapshot's connection was CS6 like every raft connection, its megabytes in the queue the
/// heartbeats are served from. The follower's install is held (failpoint `snapshot-save`
/// paused) so the connection is there while the sockets are read.
#[test]
fn a_snapshot_goes_as_bulk_beside_the_raft_link() {
    let mut ctrl = cluster(
        3,
        &[
            "--snapshot-logs",
            "10",
            "--log-keep",
            "10",
            "--metrics",
            "127.0.0.1:0",
        ],
    );
    let p = ctrl.expect_settled(STARTUP);
    let s = others(&[1, 2, 3], p)[0];
    let up = others(&[1, 2, 3], s);
    ctrl.kill(s);
    write_past_snapshots(&ctrl, &up);
    ctrl.failpoints_at_start("snapshot-save=pause");
    ctrl.start_node(s);
    ctrl.wait_until("the restarted node's install held", STARTUP, || {
        ctrl.logged(s, "failpoint snapshot-save reached")
    });
    let raft = ctrl.raft_addr(s);
    let mut seen = Vec::new();
    ctrl.wait_until(
        "a bulk connection dialled to the follower's raft port, beside a CS6 one",
        STARTUP,
        || {
            seen = sockets_tos()
                .into_iter()
                .filter(|(l, r, _)| *r == raft || *l == raft)
                .collect();
            let dialled = |tos: &str| seen.iter().any(|(_, r, t)| *r == raft && t == tos);
            let accepted = |tos: &str| seen.iter().any(|(l, _, t)| *l == raft && t == tos);
            dialled("0") && accepted("0") && dialled("0xc0") && accepted("0xc0")
        },
    );
    eprintln!("sockets of node {s}'s raft port: {seen:?}");
    ctrl.fail_clear(s, "snapshot-save");
    ctrl.wait_until("snapshot installed on the restarted node", STARTUP, || {
        ctrl.log(s)
            .contains(&format!("node {s}: installed snapshot"))
    });
}
