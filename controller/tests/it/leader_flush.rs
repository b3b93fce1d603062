//! P11: the primary replicates its entries while its own disk flushes them (the patched
//! openraft, `controller/vendor/openraft/XCE-PATCH.md`), and counts itself towards a quorum only
//! once they are on its disk. Three real controllers; the failpoint `log-flush=pause`, set on
//! the primary through its metrics endpoint, holds its own flushes until cleared (a stalled
//! disk on the primary only). Neither check depends on timing: one waits for an acknowledgement
//! that must come, the other for one that must not come until the stall ends.

use std::time::Duration;

use crate::common::*;

#[test]
fn a_write_commits_on_two_followers_disks_while_the_primarys_stalls_and_never_on_less() {
    let ctrl = cluster(3, &["--metrics", "127.0.0.1:0"]);
    let p = ctrl.expect_settled(STARTUP);
    let mut c = ctrl.client(p);
    c.ok(submit(1, "u", ""));

    ctrl.fail_set(p, "log-flush", "pause");
    // Both followers up: their two disks are a quorum; the primary's stalled flush is not on
    // the write's path.
    c.set_timeout(Duration::from_secs(10));
    let r = c.call(submit(2, "u", ""));
    assert_eq!(
        r.status,
        0,
        "job 2 with the primary's disk stalled: {r:?}\n{}",
        ctrl.all_logs()
    );

    // One follower stopped: the other's disk alone is not a quorum, and the primary's own
    // copy counts only once flushed — so no acknowledgement while its disk is stalled.
    let f = ctrl
        .ids()
        .into_iter()
        .find(|&id| id != p)
        .expect("a follower");
    ctrl.pause(f);
    let req = c.request(submit(3, "u", ""));
    c.send(&req).unwrap();
    c.set_timeout(Duration::from_secs(2));
    let early = c.recv();
    assert!(
        early.is_err(),
        "job 3 was acknowledged with one follower stopped and the primary's flush stalled: \
         {early:?}\n{}",
        ctrl.all_logs()
    );
    // The stall ends: the primary's flush and the running follower's make a quorum.
    ctrl.fail_clear(p, "log-flush");
    c.set_timeout(Duration::from_secs(10));
    let r = c.recv().expect("job 3 once the primary's disk is back");
    assert_eq!(r.status, 0, "job 3: {r:?}");
    ctrl.signal(f, libc::SIGCONT);
    let r = c.call(xce_proto::wire::Op::JobInfo { job_id: 3 });
    assert_eq!(r.status, 0, "job 3 listed: {r:?}");
}

/// Primary `p` lists jobs 1 and 2, each once (`when`: after what).
fn lists_both(ctrl: &Cluster, p: u32, when: &str) {
    assert_eq!(
        listed_on(ctrl, p),
        [1, 2],
        "primary {p} {when}\n{}",
        ctrl.all_logs()
    );
}

/// C19 (issue 25, defect 1): a restarted primary never reuses an index its followers hold.
/// The primary's disk stalls, so job 2 is acknowledged on both followers' disks and not on its
/// own; then every node is killed with `kill -9` and the old primary is started first. It read
/// back a committed vote for itself: resumed as leader in that term, its first entry took job
/// 2's index under job 2's log id (same term, same leader, same index), the followers kept job 2
/// and acknowledged, and it served listings without job 2 — two histories. Every primary after
/// every restart order must list jobs 1 and 2, exactly once each.
#[test]
fn a_restarted_primary_never_reuses_an_index_its_followers_hold() {
    let mut ctrl = cluster(3, &["--metrics", "127.0.0.1:0"]);
    let p = ctrl.expect_settled(STARTUP);
    let mut c = ctrl.client(p);
    c.ok(submit(1, "u", ""));
    ctrl.fail_set(p, "log-flush", "pause");
    c.set_timeout(Duration::from_secs(10));
    let r = c.call(submit(2, "u", ""));
    assert_eq!(r.status, 0, "job 2 with the primary's disk stalled: {r:?}");
    drop(c);

    // Every node dies (the failpoint with it); the old primary comes back first, alone, then
    // the others.
    for id in ctrl.running() {
        ctrl.kill(id);
    }
    ctrl.start_node(p);
    ctrl.wait_until(&format!("node {p} answers"), STARTUP, || {
        WireClient::try_connect(&ctrl.addr(p), Duration::from_millis(500))
            .is_some_and(|mut c| c.try_call(hello()).is_ok())
    });
    for id in [1, 2, 3].into_iter().filter(|&id| id != p) {
        ctrl.start_node(id);
    }
    let q = ctrl.expect_settled(STARTUP);
    lists_both(
        &ctrl,
        q,
        &format!("after the old primary {p} restarted first"),
    );

    // Each later primary, after every other restart order, lists the same history.
    // (And after each, the primary killed: its successor lists the same.)
    let orders: [&[u32]; 3] = [&[1, 2, 3], &[3, 2, 1], &[2, 3, 1]];
    across_restart_orders(&mut ctrl, &orders, lists_both);
}
