//! The loop's edges found by an adversary (issue 9): each test failed on the loop before the
//! fix. F5 hints never starve the configured masters, F7 a call that ends leaves the master
//! that failed and a disagreeing cluster gets the budget's time, F10 a hook that removes
//! itself, F16 a DUP after answered sends, F24 the last error is the last error.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use xce::client::Client;
use xce::client::Options;
use xce::Error;
use xce_proto::error::*;
use xce_proto::wire::*;
use xce_testkit::fake::*;

mod common;
use common::{eps, retry, waiting};

/// F16: a standby answered REDIRECT (not applied), then the primary answers DUP_JOB: the job
/// id belongs to another job, and the submit must say so, not report success.
#[test]
fn dup_after_a_redirect_is_a_genuine_duplicate() {
    let b = FakeController::start(vec![Step::Status(-E_XCE_DUP_JOB)]);
    let a = FakeController::start(vec![Step::Redirect(Some(b.endpoint()))]);
    let c = client(&[a.endpoint(), b.endpoint()], fast_options(), fast_retry(3));
    assert_eq!(c.jobsubmit(spec()), Err(Error::DupJob));
    let report = c.last_error().expect("a report");
    assert!(!report.may_have_been_applied, "{report}");
    // While a send whose outcome is unknown (closed mid-reply) makes the DUP its own success.
    let d = FakeController::start(vec![Step::CloseMidReply, Step::Status(-E_XCE_DUP_JOB)]);
    let c = client(&[d.endpoint()], fast_options(), fast_retry(3));
    assert!(c.jobsubmit(spec()).is_ok());
}

/// F7: with the call deadline equal to the reply timeout, a call that times out on a hung
/// master ends right there — and must leave the context pointed away from it, so the next call
/// reaches the healthy master instead of timing out on the same hung one forever.
#[test]
fn a_call_that_times_out_on_a_hung_master_leaves_it_for_the_next_call() {
    let hung = FakeController::start(vec![Step::Silent; 20]);
    let healthy = FakeController::start(vec![]);
    let opts = Options {
        reply_timeout: Duration::from_millis(300),
        call_deadline: Some(Duration::from_millis(300)),
        ..fast_options()
    };
    let c = client(&[hung.endpoint(), healthy.endpoint()], opts, fast_retry(3));
    assert_eq!(c.hello(), Err(Error::Errno(libc::ETIMEDOUT)));
    c.hello().expect("the next call goes to the healthy master");
    assert_eq!(healthy.ops(), vec!["hello"]);
    assert_eq!(
        hung.ops(),
        vec!["hello"],
        "the hung master is not tried again"
    );
}

/// F5: a standby whose hint names itself must not keep the call on it until the budget ends;
/// the healthy third master is reached.
#[test]
fn a_standby_naming_itself_does_not_starve_the_other_masters() {
    let a = FakeController::start(vec![]);
    a.push(vec![Step::Standby(Some(a.endpoint())); 100]);
    let b = FakeController::start(vec![]);
    b.push(vec![Step::Standby(Some(a.endpoint())); 100]);
    let healthy = FakeController::start(vec![]);
    let c = client(&eps(&[&a, &b, &healthy]), fast_options(), fast_retry(3));
    c.hello().expect("reaches the healthy master");
    assert_eq!(healthy.ops(), vec!["hello"]);
    assert!(a.ops().len() <= 2, "a: {:?}", a.ops());
}

/// F5: two standbys naming each other do not ping-pong the call away from the third master.
#[test]
fn two_standbys_naming_each_other_do_not_starve_the_third_master() {
    let a = FakeController::start(vec![]);
    let b = FakeController::start(vec![]);
    a.push(vec![Step::Standby(Some(b.endpoint())); 100]);
    b.push(vec![Step::Standby(Some(a.endpoint())); 100]);
    let healthy = FakeController::start(vec![]);
    let c = client(&eps(&[&a, &b, &healthy]), fast_options(), fast_retry(3));
    c.hello().expect("reaches the healthy master");
    assert_eq!(healthy.ops(), vec!["hello"]);
    assert!(
        a.ops().len() + b.ops().len() <= 3,
        "{:?} {:?}",
        a.ops(),
        b.ops()
    );
}

/// F5: even with a budget of one sleep, every configured master is tried before the call
/// gives up — here the last one is the primary.
#[test]
fn every_master_is_tried_before_the_budget_ends() {
    let a = FakeController::start(vec![]);
    a.push(vec![Step::Status(-E_XCE_NOT_READY); 100]);
    let b = FakeController::start(vec![]);
    b.push(vec![Step::Standby(Some(a.endpoint())); 100]);
    let primary = FakeController::start(vec![]);
    let c = client(&eps(&[&a, &b, &primary]), fast_options(), fast_retry(0));
    c.hello().expect("the third master is tried");
    assert_eq!(primary.ops(), vec!["hello"]);
}

/// F7 (amended): waitPrimary names a master at once, and that master then refuses: a unit of
/// budget still costs its backoff time. 4 sleeps of nominal 40+80+160+320 ms take at least
/// half of that with jitter; the old loop spent them in a few ms each.
#[test]
fn a_disagreeing_cluster_gets_the_budgets_time() {
    let a = FakeController::start(vec![]);
    // Refuses every op, and answers waitPrimary at once with "the primary is me".
    let refusing = Step::wait_names(a.endpoint(), Step::Status(-E_XCE_NOT_READY));
    a.push(vec![refusing; 40]);
    let c = client(&[a.endpoint()], waiting(), retry(4, 40, 1000, 2.0));
    let (r, took) = common::timed(|| c.hello());
    assert_eq!(r, Err(Error::NotReady));
    assert!(
        took >= Duration::from_millis(300),
        "budget burnt in {took:?}"
    );
}

/// F10: a reconnect hook that removes itself stays removed: it is not put back after it
/// returns, so it does not run at the next reconnect (and its arg may be freed).
#[test]
fn a_hook_that_removes_itself_stays_removed() {
    let a = FakeController::start(vec![
        Step::Close, // call 1: the connection drops → reconnect
        Step::Ok,    // the hook's hello probe
        Step::Ok,    // call 1 re-sent
        Step::Close, // call 2: drops again → reconnect, no hook any more
        Step::Ok,
    ]);
    let c = client(&[a.endpoint()], fast_options(), fast_retry(3));
    let runs = Arc::new(AtomicU32::new(0));
    let r = runs.clone();
    c.set_reconnect_handler(Some(Arc::new(move |cl: &Client| {
        r.fetch_add(1, Ordering::SeqCst);
        cl.set_reconnect_handler(None);
        0
    })));
    c.hello().unwrap();
    c.hello().unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// F24: a failure found after the loop (a payload that does not match the op) is the last
/// error, not the report of an earlier call; and an answer like ENOENT names the master that
/// gave it.
#[test]
fn the_last_error_is_the_last_error() {
    let a = FakeController::start(vec![
        Step::Status(-E_XCE_NOT_READY),
        Step::Status(-E_XCE_NOT_READY),
        Step::Payload(ReplyData::Jobs(vec![])), // hello answered with a job list
        Step::Status(-libc::ENOENT),
    ]);
    let c = client(&[a.endpoint()], fast_options(), fast_retry(1));
    assert_eq!(c.hello(), Err(Error::NotReady));
    assert_eq!(c.last_error().unwrap().error, Error::NotReady);
    assert_eq!(c.hello(), Err(Error::Proto));
    let r = c.last_error().unwrap();
    assert_eq!((r.op, r.error), ("hello", Error::Proto), "{r}");
    assert!(r.masters[0].last.is_some(), "the master that answered: {r}");
    assert_eq!(c.jobinfo(42), Err(Error::Errno(libc::ENOENT)));
    let r = c.last_error().unwrap();
    assert_eq!((r.op, r.error), ("jobinfo", Error::Errno(libc::ENOENT)));
    let text = r.to_string();
    assert!(!text.contains("not tried"), "{text}");
    assert!(text.contains("No such file or directory"), "{text}");
}

/// F28: the forwarding mark. Calls that reach their master send none; once a call's master
/// fails by transport (here: silent until the reply timeout), its re-send to another master
/// carries the time the call still waits for that reply, and so do later calls on that
/// connection; off by option, no request carries it.
#[test]
fn forward_mark_follows_a_master_unreachable_in_the_call() {
    for forward in [true, false] {
        let a = FakeController::start(vec![Step::Ok, Step::Silent]);
        let b = FakeController::start(vec![Step::Ok, Step::Ok]);
        let opts = Options {
            forward,
            ..fast_options()
        };
        let cl = client(&[a.endpoint(), b.endpoint()], opts, fast_retry(3));
        cl.jobsubmit(spec()).expect("direct");
        cl.jobsubmit(spec()).expect("after the silent master");
        cl.jobinfo(1).expect("next call");
        let marks = |f: &FakeController| -> Vec<u32> {
            f.requests().iter().map(|r| r.forward_within_ms).collect()
        };
        assert_eq!(marks(&a), vec![0, 0], "forward {forward}");
        let on_b = marks(&b);
        assert_eq!(on_b.len(), 2, "forward {forward}: {on_b:?}");
        for m in on_b {
            if forward {
                assert!(m > 0 && m <= 1000, "mark {m}");
            } else {
                assert_eq!(m, 0);
            }
        }
    }
}
