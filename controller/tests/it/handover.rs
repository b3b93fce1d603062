//! C14 with C22: a planned handover does not depend on the nodes' wall clocks agreeing. The
//! standbys' clocks run 5 s ahead of the primary's (the failpoint `clock-offset-ms`); SIGTERM
//! on the primary still hands leadership over. Before, a standby judged the handover entry
//! "fresh" by comparing the primary's clock, stamped in the entry, with its own: 2 s apart
//! disabled every handover, and the primary fell back to an ordinary election ("no new leader
//! within 2000 ms").

use std::time::Duration;

use crate::common::*;

#[test]
fn a_handover_reaches_a_standby_whose_clock_is_ahead() {
    let mut ctrl = cluster(3, &["--metrics", "127.0.0.1:0"]);
    let p = ctrl.expect_settled(STARTUP);
    ctrl.client(p).ok(submit(1, "u", ""));
    let standbys: Vec<u32> = (1..=3).filter(|&i| i != p).collect();
    for &s in &standbys {
        ctrl.fail_set(s, "clock-offset-ms", "return(5000)");
    }
    let from = ctrl.log(p).len();
    ctrl.signal(p, libc::SIGTERM);
    let st = ctrl
        .wait_exit(p, Duration::from_secs(10))
        .expect("the primary did not exit after SIGTERM");
    assert!(st.success(), "the primary's exit: {st:?}");
    let said = ctrl.log_since(p, from);
    assert!(
        said.contains("handed leadership over to node"),
        "no handover with the standbys' clocks 5 s ahead\n{}",
        ctrl.all_logs()
    );
    let q = ctrl.expect_primary_among(&standbys, STARTUP);
    let mut c = ctrl.client(q);
    assert_eq!(c.call(xce_proto::wire::Op::JobInfo { job_id: 1 }).status, 0);
}
