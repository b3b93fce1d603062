//! What a call reports about its effect, and which failures end it (issue 16): an unknown
//! outcome is never reported as "not applied" (F19 amended), an oversized frame ends only a
//! listing (F22 amended), and a write the reconnect hook repeats keeps its request id (F16).
//! Each test failed on the loop before the fix.

use std::sync::Arc;

use xce::client::{Client, Config};
use xce::Error;
use xce_proto::error::*;
use xce_proto::wire::*;
use xce_testkit::fake::*;

mod common;
use common::eps;

/// `E_XCE_UNKNOWN`, spelt as a number so that this file also builds against the library
/// before the status existed (to show the tests failing there).
const UNKNOWN: i32 = 2013;

fn request_ids(fake: &FakeController, op: &str) -> Vec<u64> {
    fake.requests()
        .iter()
        .filter(|r| r.op.name() == op)
        .map(|r| r.request_id)
        .collect()
}

/// F19 (amended): a controller that placed the write in its log and could not confirm it
/// answers `E_XCE_UNKNOWN`. The loop re-sends the write with the same request id while the
/// budget lasts, and when it ends reports "cluster not ready" with `maybe_applied = 1` — never
/// the "not applied" that would let the caller resubmit under a new id and duplicate the job.
/// Before: the status was terminal at once and the report said the write was not applied.
#[test]
fn an_unknown_outcome_is_reported_as_maybe_applied_after_the_budget() {
    let a = FakeController::start(vec![Step::Status(-UNKNOWN); 20]);
    let c = client(&[a.endpoint()], fast_options(), fast_retry(2));
    assert_eq!(c.jobsubmit(spec()), Err(Error::NotReady));
    let report = c.last_error().expect("a report");
    assert!(report.may_have_been_applied, "{report}");
    let ids = request_ids(&a, "jobsubmit");
    assert!(ids.len() >= 2, "re-sent within the budget: {ids:?}");
    assert!(ids.iter().all(|&i| i == ids[0] && i != 0), "{ids:?}");
}

/// F16 + F19: after an unknown outcome, a DUP answer to the re-send is the first send's
/// success, and a plain NOT_READY does not turn the outcome back into "not applied".
#[test]
fn after_an_unknown_outcome_a_dup_is_success_and_not_ready_stays_unknown() {
    let a = FakeController::start(vec![Step::Status(-UNKNOWN), Step::Status(-E_XCE_DUP_JOB)]);
    let c = client(&[a.endpoint()], fast_options(), fast_retry(3));
    assert_eq!(c.jobsubmit(common::spec_id(77)), Ok(77));

    let b = FakeController::start(vec![
        Step::Status(-UNKNOWN),
        Step::Status(-E_XCE_NOT_READY),
        Step::Status(-E_XCE_NOT_READY),
        Step::Status(-E_XCE_NOT_READY),
    ]);
    let c = client(&[b.endpoint()], fast_options(), fast_retry(2));
    assert_eq!(c.jobctrl(5, JobAction::Kill), Err(Error::NotReady));
    let report = c.last_error().expect("a report");
    assert!(report.may_have_been_applied, "{report}");
}

/// `maybe_applied = 0` is a promise: writes answered NOT_READY every time report it.
#[test]
fn answered_writes_report_not_applied() {
    let a = FakeController::start(vec![Step::Status(-E_XCE_NOT_READY); 20]);
    let c = client(&[a.endpoint()], fast_options(), fast_retry(2));
    assert_eq!(c.jobsubmit(spec()), Err(Error::NotReady));
    let report = c.last_error().expect("a report");
    assert!(!report.may_have_been_applied, "{report}");
}

/// F22 (amended): a frame header over the client's limit from one misbehaving master is a
/// protocol error on that connection for `hello` (its reply cannot legitimately be that big):
/// the call rotates to the next master. Before: terminal `E_XCE_TOOBIG`.
#[test]
fn an_oversized_frame_for_hello_rotates_to_the_next_master() {
    let bad = FakeController::start(vec![Step::Oversized]);
    let good = FakeController::start(vec![]);
    let c = client(&eps(&[&bad, &good]), fast_options(), fast_retry(3));
    c.hello().expect("served by the next master");
    assert_eq!(good.ops(), vec!["hello"]);
    // A write too: an oversized answer to a submit is a broken connection, not "too big".
    bad.push(vec![Step::Oversized]);
    let c = client(&eps(&[&bad, &good]), fast_options(), fast_retry(3));
    c.jobsubmit(spec()).expect("served by the next master");
}

/// F22 (amended): for a listing, whose reply can legitimately grow, too big stays terminal
/// (the caller pages) and is not a failover.
#[test]
fn an_oversized_frame_for_a_listing_is_too_big() {
    let bad = FakeController::start(vec![Step::Oversized]);
    let good = FakeController::start(vec![]);
    let c = client(&eps(&[&bad, &good]), fast_options(), fast_retry(3));
    assert_eq!(
        c.call(Op::JobList(JobFilter::default())).map(drop),
        Err(Error::TooBig)
    );
    assert!(good.ops().is_empty(), "{:?}", good.ops());
}

/// F16, issue 16 #12: the reconnect hook's `join` loses its reply (the connection drops), the
/// loop reconnects and runs the hook again: the second `join` is a re-send of the first, with
/// the same request id, so the controller applies it once. Before: a new id per run.
#[test]
fn a_join_the_hook_repeats_keeps_its_request_id() {
    let a = FakeController::start(vec![
        Step::Close,         // hello: the connection drops → reconnect
        Step::Ok,            // the hello that confirms the primary
        Step::CloseMidReply, // the hook's join: no answer → the hook fails
        Step::Ok,            // hello confirming the primary again
        Step::Ok,            // the hook's join again
        Step::Ok,            // hello re-sent
    ]);
    let c = client(&[a.endpoint()], fast_options(), fast_retry(3));
    c.set_reconnect_handler(Some(Arc::new(|cl: &Client| {
        common::rejoin(cl, SessionRole::Worker)
    })));
    c.hello().expect("served after the hook succeeds");
    let ids = request_ids(&a, "join");
    assert_eq!(ids.len(), 2, "{:?}", a.ops());
    assert_eq!(ids[0], ids[1], "the re-sent join keeps its id");
    assert_ne!(ids[0], 0);
    // A later reconnect is a new failover: its join is a new request.
    a.push(vec![Step::Close, Step::Ok, Step::Ok, Step::Ok]);
    c.hello().expect("served");
    let ids = request_ids(&a, "join");
    assert_eq!(ids.len(), 3);
    assert_ne!(ids[2], ids[0]);
}

/// F17 (amended), issue 16 #11: a reconnect made by a fire-and-forget call (a worker that only
/// heartbeats) is a failover like one made by a replying call — counted, with its events —
/// and the standby met on the way is logged as a standby's answer, never as "transport".
/// Before: rotations were counted but no failover, and the log said "transport: standby…".
#[test]
fn a_reconnect_on_the_fire_and_forget_path_is_a_counted_failover() {
    use xce::client::log::Level;
    use xce::client::Event;
    let log = common::captured_log(Level::Info);

    let old = FakeController::start(vec![]);
    let new = FakeController::start(vec![]);
    let standby = FakeController::start(vec![Step::Standby(Some(new.endpoint())); 4]);
    let mut cfg = Config::new(vec![old.endpoint(), standby.endpoint(), new.endpoint()]);
    cfg.client_name = "ff-failover".into();
    let c = Client::start_with(cfg, fast_options(), fast_retry(3)).expect("start");
    let events = common::recorded_events(&c);
    c.hello().expect("served by the first primary");
    old.shut_down();
    c.heartbeat("w").expect("heartbeat");
    assert!(new.wait_requests(2, std::time::Duration::from_secs(2)));
    let st = c.stats();
    assert_eq!(st.failovers, 1, "{st:?}");
    let events = events.lock().clone();
    let seen = |is: fn(&Event) -> bool| events.iter().any(is);
    assert!(
        seen(|e| matches!(e, Event::FailoverStarted { .. })),
        "{events:?}"
    );
    assert!(
        seen(|e| matches!(e, Event::FailoverFinished { .. })),
        "{events:?}"
    );
    let lines: Vec<String> = log
        .lock()
        .iter()
        .map(|(_, l)| l.clone())
        .filter(|l| l.contains("ff-failover"))
        .collect();
    assert!(
        !lines.iter().any(|l| l.contains("transport: standby")),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("answered \"standby")),
        "{lines:#?}"
    );
}
