//! P11: the primary replicates its entries while its own disk flushes them (the patched
//! openraft, `controller/vendor/openraft/XCE-PATCH.md`), and counts itself towards a quorum only
//! once they are on its disk. Three real controllers; the failpoint
//! `--test-leader-flush-stall FILE` holds the primary's own flushes while FILE exists (a stalled
//! disk on the primary only). Neither check depends on timing: one waits for an acknowledgement
//! that must come, the other for one that must not come until the stall ends.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn a_write_commits_on_two_followers_disks_while_the_primarys_stalls_and_never_on_less() {
    let dir = tempfile::tempdir().unwrap();
    let stall = dir.path().join("stall");
    let stall_flag = stall.display().to_string();
    let ctrl = Ctrl::start(3, &["--test-leader-flush-stall", &stall_flag]);
    let p = ctrl.wait_settled(STARTUP);
    let mut c = ctrl.client(p);
    c.ok(submit(1, "u", ""));

    std::fs::write(&stall, b"").unwrap();
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
    let f = *ctrl
        .clients
        .keys()
        .find(|&&id| id != p)
        .expect("a follower");
    ctrl.signal(f, libc::SIGSTOP);
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
    std::fs::remove_file(&stall).unwrap();
    c.set_timeout(Duration::from_secs(10));
    let r = c.recv().expect("job 3 once the primary's disk is back");
    assert_eq!(r.status, 0, "job 3: {r:?}");
    ctrl.signal(f, libc::SIGCONT);
    let r = c.call(xce::wire::Op::JobInfo { job_id: 3 });
    assert_eq!(r.status, 0, "job 3 listed: {r:?}");
}
