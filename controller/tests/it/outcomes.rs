//! F19 (amended), controller side: a write the primary put into its log but could not confirm
//! is answered `E_XCE_UNKNOWN` — never NOT_READY/NOMASTER, which promise "not applied" — and a
//! re-send with the same request id is applied once.

use std::time::Duration;

use crate::common::*;
use xce_proto::wire::{Op, ReplyData, Request};

/// `E_XCE_UNKNOWN`, spelt as a number so that this file also builds against the controller
/// before the status existed (to show the test failing there).
const E_XCE_UNKNOWN: i32 = 2013;

/// `E_XCE_UNKNOWN` is 2013; the test failed before the controller sent it (it answered
/// `-E_XCE_NOMASTER` once cut off from its quorum).
#[test]
fn a_write_the_primary_cannot_confirm_is_answered_unknown_and_a_resend_applies_once() {
    let ctrl = cluster(3, &[]);
    let p = ctrl.expect_settled(STARTUP);
    let mut c = ctrl.client(p);
    c.ok(submit(1, "u", ""));
    let followers: Vec<u32> = ctrl.running().into_iter().filter(|&i| i != p).collect();
    for &f in &followers {
        ctrl.pause(f);
    }
    // The primary still holds its lease: it accepts the write, appends it, and cannot commit.
    let req = c.request(submit(2, "u", ""));
    let r = c.try_send_recv(&req).expect("an answer, not a timeout");
    for &f in &followers {
        ctrl.signal(f, libc::SIGCONT);
    }
    assert_eq!(
        r.status, -E_XCE_UNKNOWN,
        "a write placed in the log and not confirmed: {r:?}"
    );
    // The client re-sends it with the same client id and request id, wherever the primary is
    // now: it takes effect once.
    let q = ctrl.expect_settled(STARTUP);
    let mut again = ctrl.client(q);
    again.client_id = c.client_id;
    let resend = Request { seq: 1, ..req };
    let mut r = again.try_send_recv(&resend).expect("an answer");
    for _ in 0..100 {
        if r.status == 0 {
            break;
        }
        // The new primary may still be catching up: NOT_READY, or UNKNOWN again.
        std::thread::sleep(Duration::from_millis(100));
        again.seq += 1;
        let resend = Request {
            seq: again.seq,
            ..resend.clone()
        };
        r = again.try_send_recv(&resend).expect("an answer");
    }
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(r.data, ReplyData::JobId(2));
    assert_eq!(job(again.ok(Op::JobInfo { job_id: 2 })).job_id, 2);
    let jobs = job_ids(&mut again, Default::default());
    assert_eq!(jobs.iter().filter(|&&j| j == 2).count(), 1);
}
