//! F27: wakes and stop requests with exact semantics.
//! - a wake with no call in progress is not kept: it never ends a later, unrelated call;
//! - `try_wakeup` says exactly what happens: `true` only while a call is in progress, and
//!   then that call (blocked in a wait) returns `EINTR`; `false` and nothing happens otherwise;
//! - "stop requested" ends the call in progress and every later call at once, until cleared —
//!   the race-free stop of a single-threaded daemon.

use std::sync::Arc;
use std::time::{Duration, Instant};

use xce::client::Client;
use xce::Error;
use xce_testkit::fake::*;

fn client_on(fake: &FakeController, reply_timeout: Duration) -> Arc<Client> {
    let mut opts = fast_options();
    opts.reply_timeout = reply_timeout;
    Arc::new(client(&[fake.endpoint()], opts, fast_retry(0)))
}

/// Runs `hello` on another thread; returns once the fake has received it (the call waits for
/// a reply that does not come).
fn blocked_hello(
    c: &Arc<Client>,
    fake: &FakeController,
) -> std::thread::JoinHandle<Result<(), Error>> {
    let n = fake.requests().len();
    let c2 = c.clone();
    let t = std::thread::spawn(move || c2.hello().map(drop));
    assert!(
        fake.wait_requests(n + 1, Duration::from_secs(5)),
        "the call is in its reply wait"
    );
    t
}

#[test]
fn a_wake_with_no_call_in_progress_is_not_kept() {
    let fake = FakeController::start(vec![]);
    let c = client_on(&fake, Duration::from_secs(5));
    assert!(!c.try_wakeup(), "no call in progress");
    assert!(!c.wakeup(), "no call in progress");
    for _ in 0..3 {
        assert_eq!(
            c.hello().map(drop),
            Ok(()),
            "a wake of the past ended an unrelated call"
        );
    }
}

#[test]
fn try_wakeup_true_means_the_call_returns_eintr() {
    let fake = FakeController::start(vec![]);
    let c = client_on(&fake, Duration::from_secs(20));
    for round in 0..20 {
        fake.push([Step::Silent]);
        let t = blocked_hello(&c, &fake);
        let t0 = Instant::now();
        assert!(c.try_wakeup(), "round {round}: a call is in progress");
        assert_eq!(
            t.join().unwrap(),
            Err(Error::Errno(libc::EINTR)),
            "round {round}"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "round {round}: promptly"
        );
        assert!(
            !c.try_wakeup(),
            "round {round}: no call in progress any more"
        );
        // The connection of the woken call was dropped (its reply may still come); the next
        // call reconnects and succeeds: the wake was not kept.
        assert_eq!(c.hello().map(drop), Ok(()), "round {round}");
    }
}

#[test]
fn stop_requested_ends_the_call_in_progress_and_every_later_call() {
    let fake = FakeController::start(vec![Step::Silent]);
    let c = client_on(&fake, Duration::from_secs(20));
    let t = blocked_hello(&c, &fake);
    let t0 = Instant::now();
    c.request_stop();
    assert_eq!(t.join().unwrap(), Err(Error::StopRequested));
    assert!(t0.elapsed() < Duration::from_secs(5), "promptly");
    let sent = fake.requests().len();
    for _ in 0..3 {
        let t0 = Instant::now();
        assert_eq!(c.hello().map(drop), Err(Error::StopRequested));
        assert!(t0.elapsed() < Duration::from_millis(500), "at once");
    }
    assert_eq!(
        fake.requests().len(),
        sent,
        "nothing sent while a stop is requested"
    );
    assert!(c.stop_requested());
    c.clear_stop_request();
    assert_eq!(c.hello().map(drop), Ok(()));
}

/// The single-threaded daemon's race: the stop arrives after its flag check and before its
/// next call begins. The request (set by a signal handler in a real daemon) ends that call at
/// once instead of leaving it blocked for the whole budget.
#[test]
fn a_stop_requested_before_the_next_call_begins_ends_it_at_once() {
    let fake = FakeController::start(vec![Step::Silent]);
    let c = client_on(&fake, Duration::from_secs(20));
    let running = true; // the daemon's flag, checked ...
    c.request_stop(); // ... then the signal arrives ...
    assert!(running);
    let t0 = Instant::now();
    assert_eq!(c.hello().map(drop), Err(Error::StopRequested)); // ... and the call ends at once
    assert!(t0.elapsed() < Duration::from_millis(500));
    assert!(fake.requests().is_empty());
}
