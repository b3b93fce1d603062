//! The retry loop against scripted fake controllers (failover.md F1–F19).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use xce::client::{Client, Config};
use xce::client::{ClientOption, Endpoint, Event, Options, RetryConfig};
use xce::Error;
use xce_proto::error::*;
use xce_proto::wire::*;
use xce_testkit::fake::*;

mod common;
use common::{eps, finish, names_after, recorded_events, rejoin, retry, spec_id, waiting};

/// A reconnect hook that says hello again; the hook's result is the status.
fn rehello(cl: &Client) -> i32 {
    cl.hello().map_or_else(|e| e.status(), |_| 0)
}

/// Installs `hook` as `c`'s reconnect hook; how many times it ran.
fn counted_hook(c: &Client, hook: fn(&Client) -> i32) -> Arc<AtomicU32> {
    let calls = Arc::new(AtomicU32::new(0));
    let n = calls.clone();
    c.set_reconnect_handler(Some(Arc::new(move |cl: &Client| {
        n.fetch_add(1, Ordering::SeqCst);
        hook(cl)
    })));
    calls
}

#[test]
fn not_ready_k_times_then_success() {
    let a = FakeController::start(vec![Step::Status(-E_XCE_NOT_READY); 3]);
    let c = client(&eps(&[&a]), fast_options(), fast_retry(5));
    let jobs = c.joblist(JobFilter::default()).unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(a.ops(), vec!["joblist"; 4]);
    let s = c.stats();
    // No master had served this fresh client yet: finding one is not a failover (F17).
    assert_eq!((s.requests, s.retries, s.failovers), (1, 3, 0));
    assert!(s.backoff_ms >= 3 * 5, "{s:?}");
    assert_eq!(
        a.connections(),
        1,
        "a single master answering statuses keeps its connection"
    );
}

#[test]
fn not_ready_until_the_budget_is_spent_is_cluster_not_ready() {
    let a = FakeController::start(vec![Step::Status(-E_XCE_NOT_READY); 50]);
    let b = FakeController::start(vec![Step::Status(-E_XCE_NOMASTER); 50]);
    let c = client(&eps(&[&a, &b]), fast_options(), fast_retry(3));
    let events = recorded_events(&c);
    assert_eq!(c.hello(), Err(Error::NotReady));
    let report = c.last_error().unwrap();
    assert_eq!(report.attempts, 4, "{report}");
    let text = report.to_string();
    assert!(
        text.starts_with("hello failed: cluster not ready after 4 attempts"),
        "{text}"
    );
    assert!(
        text.contains("answered \"cluster not ready\"")
            && text.contains("standby: no primary known"),
        "{text}"
    );
    assert!(matches!(
        events.lock().last(),
        Some(Event::NotReady {
            error: Error::NotReady,
            attempts: 4,
            ..
        })
    ));
}

#[test]
fn redirect_with_address_goes_straight_to_the_named_master() {
    let (b, cc) = (FakeController::start(vec![]), FakeController::start(vec![]));
    let a = FakeController::start(vec![Step::Redirect(Some(cc.endpoint()))]);
    let c = client(&eps(&[&a, &b, &cc]), fast_options(), fast_retry(5));
    c.hello().unwrap();
    assert_eq!(b.requests().len(), 0, "B skipped: the hint goes first");
    assert_eq!(cc.ops(), vec!["hello"]);
    assert_eq!(c.stats().current_master, Some(cc.endpoint()));
    // F3: sticky — the next call goes to C directly.
    c.hello().unwrap();
    assert_eq!((a.requests().len(), cc.requests().len()), (1, 2));
}

#[test]
fn redirect_without_address_rotates_to_the_next_master() {
    let (b, cc) = (FakeController::start(vec![]), FakeController::start(vec![]));
    let a = FakeController::start(vec![Step::Redirect(None)]);
    let c = client(&eps(&[&a, &b, &cc]), fast_options(), fast_retry(5));
    c.hello().unwrap();
    assert_eq!((b.ops(), cc.requests().len()), (vec!["hello"], 0));
}

#[test]
fn redirect_to_an_unconfigured_host_is_ignored() {
    let stranger = FakeController::start(vec![]);
    let b = FakeController::start(vec![]);
    let a = FakeController::start(vec![Step::Redirect(Some(stranger.endpoint()))]);
    let c = client(&eps(&[&a, &b]), fast_options(), fast_retry(5));
    c.hello().unwrap();
    assert_eq!((stranger.requests().len(), b.requests().len()), (0, 1));
    // Opted in: followed.
    c.set_option(ClientOption::RedirectAnyHost(true)).unwrap();
    b.push([Step::Redirect(Some(stranger.endpoint()))]);
    c.hello().unwrap();
    assert_eq!(stranger.ops(), vec!["hello"]);
}

#[test]
fn standby_then_success_on_the_next_master_with_events() {
    let a = FakeController::start(vec![Step::Ok, Step::Standby(None)]);
    let b = FakeController::start(vec![]);
    let c = client(&eps(&[&a, &b]), fast_options(), fast_retry(5));
    c.hello().unwrap(); // A serves: losing it later is a failover
    let events = recorded_events(&c);
    c.jobctrl(5, JobAction::Kill).unwrap();
    assert_eq!(b.ops(), vec!["jobctrl"]);
    let ev = events.lock();
    assert!(
        matches!(ev[0], Event::FailoverStarted { cause: xce::client::AttemptOutcome::Status(s), .. } if s == -E_XCE_STANDBY)
    );
    assert!(
        matches!(&ev[1], Event::Rotation { from, to, .. } if *from == a.endpoint() && *to == b.endpoint())
    );
    assert!(matches!(&ev[2], Event::FailoverFinished { to, .. } if *to == b.endpoint()));
    let s = c.stats();
    assert_eq!(
        (s.rotations, s.failovers, s.current_master.clone()),
        (1, 1, Some(b.endpoint()))
    );
}

/// F17: a fresh client that starts on a standby and is redirected to the primary has found its
/// master; no failover is counted or announced (only the rotation).
#[test]
fn discovery_on_a_fresh_client_is_not_a_failover() {
    let a = FakeController::start(vec![Step::Standby(None)]);
    let b = FakeController::start(vec![]);
    let c = client(&eps(&[&a, &b]), fast_options(), fast_retry(5));
    let events = recorded_events(&c);
    c.hello().unwrap();
    let ev = events.lock();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert!(matches!(&ev[0], Event::Rotation { .. }));
    let s = c.stats();
    assert_eq!((s.rotations, s.failovers), (1, 0));
}

/// F17: when waitPrimary names the master the context is already on (it was just elected),
/// the loop stays put: no ROTATION event, no rotation counted, the connection kept.
#[test]
fn staying_on_the_same_master_is_not_a_rotation() {
    let a = FakeController::start(vec![]);
    a.push([
        Step::Ok,
        Step::Status(-E_XCE_NOT_READY),
        Step::Primary(a.endpoint()),
    ]);
    let retry = retry(3, 2000, 2000, 1.0);
    let opts = waiting();
    let c = client(&[a.endpoint()], opts, retry);
    let events = recorded_events(&c);
    c.hello().unwrap();
    c.hello().unwrap(); // NOT_READY, waitPrimary names A itself, then served by A
    assert_eq!(a.ops(), vec!["hello", "hello", "waitPrimary", "hello"]);
    assert!(!events
        .lock()
        .iter()
        .any(|e| matches!(e, Event::Rotation { .. })));
    assert_eq!((c.stats().rotations, a.connections()), (0, 1));
}

#[test]
fn connection_closed_mid_reply_rotates_and_the_write_keeps_its_request_id() {
    let a = FakeController::start(vec![Step::CloseMidReply]);
    let b = FakeController::start(vec![]);
    let c = client(&eps(&[&a, &b]), fast_options(), fast_retry(5));
    let id = c.jobsubmit(spec()).unwrap();
    let (ra, rb) = (a.requests(), b.requests());
    assert_eq!((ra.len(), rb.len()), (1, 1));
    // F16: the re-send is the same write.
    assert_ne!(ra[0].request_id, 0);
    assert_eq!(ra[0].request_id, rb[0].request_id);
    assert_eq!(ra[0].client_id, rb[0].client_id);
    assert_eq!(ra[0].client_id, c.client_id());
    assert_ne!(ra[0].seq, rb[0].seq);
    assert!(matches!(&rb[0].op, Op::JobSubmit(s) if s.job_id == id && id != 0));
    // The next write gets a new id.
    c.jobsubmit(JobSpec::default()).unwrap();
    assert_eq!(b.requests()[1].request_id, rb[0].request_id + 1);
    // Reads carry 0.
    c.hello().unwrap();
    assert_eq!(b.requests()[2].request_id, 0);
}

#[test]
fn dup_on_a_resent_write_is_success_and_on_a_first_send_is_terminal() {
    let a = FakeController::start(vec![Step::CloseMidReply]);
    let b = FakeController::start(vec![
        Step::Status(-E_XCE_DUP_JOB),
        Step::Status(-E_XCE_DUP_JOB),
    ]);
    let c = client(&eps(&[&a, &b]), fast_options(), fast_retry(5));
    let id = c.jobsubmit(spec_id(42)).unwrap();
    assert_eq!(id, 42);
    assert_eq!(c.jobsubmit(spec_id(42)), Err(Error::DupJob));
    assert!(!c.last_error().unwrap().may_have_been_applied);
}

#[test]
fn silent_server_is_detected_by_the_reply_timeout() {
    let a = FakeController::start(vec![Step::Silent]);
    let b = FakeController::start(vec![]);
    let opts = Options {
        reply_timeout: Duration::from_millis(150),
        ..fast_options()
    };
    let c = client(&eps(&[&a, &b]), opts, fast_retry(5));
    let (_, took) = common::timed(|| c.hello().unwrap());
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_millis(1500),
        "{took:?}"
    );
    assert_eq!(b.ops(), vec!["hello"]);
}

/// A listing of `n` jobs, about 100 bytes each on the wire.
fn jobs(n: u64) -> ReplyData {
    ReplyData::Jobs(
        (1..=n)
            .map(|i| Job {
                job_id: i,
                name: format!("job-{i:06}-{}", "x".repeat(64)),
                ..Default::default()
            })
            .collect(),
    )
}

/// A fake whose first answer is a listing of 200 jobs written `chunk` bytes every `every`, and
/// a client with a 300 ms reply timeout; the fake, the listing, how long it took and the
/// client's stats. `watchful`: with two standbys beside the primary that hold `waitPrimary`
/// (they know no other primary) and suspicion on (F25), so a late reply would be suspected.
fn trickled(
    chunk: usize,
    every: Duration,
    watchful: bool,
) -> (FakeController, Vec<Job>, Duration, xce::client::Stats) {
    let a = FakeController::start(vec![Step::Trickle {
        data: jobs(200),
        chunk,
        every,
    }]);
    let standbys: Vec<FakeController> = (0..if watchful { 2 } else { 0 })
        .map(|_| {
            FakeController::start(vec![
                names_after(
                    Duration::from_secs(5),
                    a.endpoint(),
                    Step::Standby(Some(a.endpoint()))
                );
                4
            ])
        })
        .collect();
    let opts = Options {
        reply_timeout: Duration::from_millis(300),
        suspicion: watchful,
        ..fast_options()
    };
    let mut all = vec![&a];
    all.extend(standbys.iter());
    let c = client(&eps(&all), opts, fast_retry(5));
    let t = Instant::now();
    let got = c.joblist_all(JobFilter::default()).unwrap();
    (a, got, t.elapsed(), c.stats())
}

/// Issue 29 (F8 on a slow link): a reply that keeps arriving is waited for past the reply
/// timeout — not abandoned, re-sent and abandoned again. ~20 KB in 2 KB chunks 100 ms apart
/// (≈ 1 s, more than three reply timeouts): one request, answered.
#[test]
fn a_slow_reply_that_keeps_arriving_is_not_abandoned() {
    let (a, got, took, _) = trickled(2048, Duration::from_millis(100), false);
    assert_eq!(got.len(), 200);
    assert!(took >= Duration::from_millis(600), "{took:?}");
    assert_eq!(a.ops(), vec!["joblist"], "the slow page was asked for once");
}

/// The same with other controllers to suspect the primary with (F25): a reply that has begun
/// to arrive is slow, not late — nobody is asked, nothing is abandoned. Before: with the
/// suspicion threshold at the reply timeout, the wait ended there whatever had arrived, and
/// the page was asked for again.
#[test]
fn a_slow_reply_that_keeps_arriving_is_not_suspected() {
    let (a, got, _, st) = trickled(2048, Duration::from_millis(100), true);
    assert_eq!(got.len(), 200, "{st:?}");
    assert_eq!(a.ops(), vec!["joblist"], "the slow page was asked for once");
    assert_eq!((st.suspicions, st.rotations), (0, 0), "{st:?}");
}

/// A peer that trickles a reply slower than the floor rate (`MIN_REPLY_RATE`) is not waited
/// for: a 20 KB frame at 256 B/s is given up after the reply timeout plus its length at the
/// floor rate (≈ 2.8 s), not after the minutes it would take; the loop asks again.
#[test]
fn a_reply_slower_than_the_floor_rate_is_given_up() {
    let (a, got, took, _) = trickled(64, Duration::from_millis(250), false);
    assert_eq!(
        got.len(),
        1,
        "the second answer is the fake's default listing"
    );
    assert!(took < Duration::from_secs(8), "{took:?}");
    assert_eq!(a.ops(), vec!["joblist", "joblist"]);
}

#[test]
fn a_reply_with_the_wrong_seq_is_dropped() {
    let a = FakeController::start(vec![Step::WrongSeqFirst]);
    let c = client(&eps(&[&a]), fast_options(), fast_retry(5));
    c.hello().unwrap();
    assert_eq!(c.stats().retries, 0);
    // A flood of stray replies breaks the connection (F9 bound) and the loop moves on.
    let b = FakeController::start(vec![]);
    let c = client(&eps(&[&a, &b]), fast_options(), fast_retry(5));
    a.push([Step::WrongSeqs(17)]);
    c.hello().unwrap();
    assert_eq!(b.ops(), vec!["hello"]);
}

#[test]
fn all_masters_down_ends_with_the_transport_error_while_mostly_sleeping() {
    let a = FakeController::start(vec![]);
    let masters = vec![a.endpoint(), refused_endpoint(), refused_endpoint()];
    let retry = retry(6, 40, 200, 2.0);
    let c = client(&masters, fast_options(), retry);
    drop(a); // the primary dies; nothing listens anywhere
    let (wall0, cpu0) = (Instant::now(), thread_cpu_time());
    let r = c.hello();
    let (wall, cpu) = (wall0.elapsed(), thread_cpu_time() - cpu0);
    assert_eq!(r, Err(Error::Errno(libc::ECONNREFUSED)));
    println!(
        "all masters down: wall {wall:?}, cpu {cpu:?} ({:.1}%)",
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64()
    );
    assert!(
        wall >= Duration::from_millis(200),
        "slept the backoff: {wall:?}"
    );
    assert!(
        cpu.as_secs_f64() < 0.2 * wall.as_secs_f64(),
        "cpu {cpu:?} of wall {wall:?}: spinning"
    );
    let report = c.last_error().unwrap();
    assert_eq!(report.attempts, 21, "7 cycles of 3 masters: {report}");
    assert!(report.masters.iter().all(|m| m.last.is_some()));
    assert!(
        report.to_string().contains("transport: Connection refused"),
        "{report}"
    );
}

#[test]
fn start_connects_to_the_first_reachable_master_in_list_order() {
    let b = FakeController::start(vec![]);
    let cc = FakeController::start(vec![]);
    let c = client(
        &[refused_endpoint(), b.endpoint(), cc.endpoint()],
        fast_options(),
        fast_retry(1),
    );
    assert_eq!(c.stats().current_master, Some(b.endpoint()));
    c.hello().unwrap();
    assert_eq!((b.requests().len(), cc.requests().len()), (1, 0));
    let none = Client::start_with(
        Config::new(vec![refused_endpoint(), refused_endpoint()]),
        fast_options(),
        fast_retry(1),
    );
    assert_eq!(none.err(), Some(Error::Errno(libc::ECONNREFUSED)));
    let bad = Client::start_with(Config::new(vec![]), fast_options(), fast_retry(1));
    assert_eq!(bad.err(), Some(Error::Errno(libc::EINVAL)));
}

#[test]
fn reconnect_hook_runs_once_per_reconnect_before_the_resend_and_can_join() {
    let a = FakeController::start(vec![Step::Ok, Step::Close]);
    let b = FakeController::start(vec![]);
    let c = Arc::new(client(&eps(&[&a, &b]), fast_options(), fast_retry(5)));
    let calls = counted_hook(&c, |cl| rejoin(cl, SessionRole::Worker));
    c.hello().unwrap(); // A, no reconnect
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // A closes; B: hello confirms the primary, the hook joins, then the re-send.
    c.joblist(JobFilter::default()).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(b.ops(), vec!["hello", "join", "joblist"]);
    c.joblist(JobFilter::default()).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "no reconnect, no hook");
    // The hook's join was a write with its own request id.
    let rb = b.requests();
    assert_ne!(rb[1].request_id, 0);
}

/// S6 at the loop level: reconnecting to a standby on the way to the new primary does not run
/// the hook (its join could only be redirected); it runs once, on the primary, before the
/// re-send.
#[test]
fn reconnect_hook_skips_standbys_on_the_way_to_the_primary() {
    let a = FakeController::start(vec![Step::Ok, Step::Close]);
    let standby = FakeController::start(vec![Step::Standby(None)]);
    let b = FakeController::start(vec![]);
    let c = client(&eps(&[&a, &standby, &b]), fast_options(), fast_retry(5));
    let calls = counted_hook(&c, rehello);
    c.hello().unwrap();
    c.joblist(JobFilter::default()).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "once per failover");
    assert_eq!(standby.ops(), vec!["hello"], "no hook on the standby");
    assert_eq!(b.ops(), vec!["hello", "hello", "joblist"]);
}

#[test]
fn a_failing_hook_is_a_failed_attempt() {
    let a = FakeController::start(vec![Step::Close]);
    // B: the primary check passes, then the hook's own hello gets NOT_READY.
    let b = FakeController::start(vec![Step::Ok, Step::Status(-E_XCE_NOT_READY)]);
    let c = client(&eps(&[&a, &b]), fast_options(), fast_retry(5));
    let calls = counted_hook(&c, rehello);
    // A closes → B: hook's hello gets NOT_READY → backoff → A is gone (refused? no: A listens
    // but closed the conn) → ... eventually the hook succeeds and the op runs.
    c.hostctrl("h", HostAction::Close).unwrap();
    assert!(calls.load(Ordering::SeqCst) >= 2);
    let ops: Vec<_> = a.ops().into_iter().chain(b.ops()).collect();
    assert_eq!(
        ops.iter().filter(|o| **o == "hostctrl").count(),
        2,
        "{ops:?}"
    );
}

#[test]
fn fifty_threads_share_one_client_across_a_failover() {
    let mut script = vec![Step::Ok; 150];
    script.push(Step::Close);
    let a = FakeController::start(script);
    let b = FakeController::start(vec![]);
    let c = Arc::new(client(&eps(&[&a, &b]), fast_options(), fast_retry(5)));
    let threads: Vec<_> = (0..50)
        .map(|i| {
            let c = c.clone();
            std::thread::spawn(move || {
                for j in 0..8 {
                    if (i + j) % 2 == 0 {
                        c.jobinfo(i * 100 + j).unwrap();
                    } else {
                        c.jobsubmit(JobSpec::default()).unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = c.stats();
    assert_eq!(s.requests, 400);
    assert_eq!(s.failovers, 1);
    assert_eq!(a.requests().len() + b.requests().len(), 401); // one re-send
                                                              // Every write id distinct except the re-sent one.
    let mut ids: Vec<u64> = a
        .requests()
        .iter()
        .chain(b.requests().iter())
        .map(|r| r.request_id)
        .filter(|&r| r != 0)
        .collect();
    let total = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert!(total - ids.len() <= 1);
}

#[test]
fn wakeup_ends_a_backoff_wait_with_eintr_promptly() {
    // Served once, so the next call's failure starts a failover (F17): its event comes on the
    // call's thread after the reply was read and before the backoff wait, the call's next
    // wait (wait_primary off), which a wake from then on ends (F13).
    let mut script = vec![Step::Ok];
    script.extend(vec![Step::Status(-E_XCE_NOT_READY); 10]);
    let a = FakeController::start(script);
    let retry = retry(5, 5000, 5000, 2.0);
    let c = Arc::new(client(&eps(&[&a]), fast_options(), retry));
    assert!(!c.try_wakeup(), "no call in progress");
    c.hello().unwrap();
    let (failing, failed) = std::sync::mpsc::channel();
    let failing = Mutex::new(failing);
    c.set_event_handler(Some(Arc::new(move |e: &Event| {
        if matches!(e, Event::FailoverStarted { .. }) {
            let _ = failing.lock().send(());
        }
    })));
    let waker = {
        let c = c.clone();
        std::thread::spawn(move || {
            failed
                .recv_timeout(Duration::from_secs(10))
                .expect("the call failed and goes to its backoff wait");
            assert!(c.try_wakeup(), "a call is in progress");
            Instant::now()
        })
    };
    let r = c.hello();
    let returned = Instant::now();
    let woke = waker.join().unwrap();
    let latency = returned.saturating_duration_since(woke);
    println!("wakeup → EINTR latency: {latency:?}");
    assert_eq!(r, Err(Error::Errno(libc::EINTR)));
    // The backoff (2.5-5 s) was cut short: no second attempt.
    assert_eq!(a.ops(), vec!["hello", "hello"]);
    assert!(latency < Duration::from_millis(100), "{latency:?}");
}

#[test]
fn wakeup_ends_a_reply_wait_and_the_client_recovers() {
    let a = FakeController::start(vec![Step::Silent]);
    let opts = Options {
        reply_timeout: Duration::from_secs(10),
        ..fast_options()
    };
    let c = Arc::new(client(&eps(&[&a]), opts, fast_retry(5)));
    let c2 = c.clone();
    let t = std::thread::spawn(move || c2.hello().map(drop));
    // The request arrived: the call is in progress, in its reply wait (a wake with no call in
    // progress is not kept, F27).
    assert!(
        a.wait_requests(1, Duration::from_secs(5)),
        "the call is in its reply wait"
    );
    let t0 = Instant::now();
    assert!(c.wakeup(), "a call is in progress");
    assert_eq!(t.join().unwrap(), Err(Error::Errno(libc::EINTR)));
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    c.hello().unwrap();
}

#[test]
fn garbage_and_oversized_replies_give_a_clear_error_and_a_usable_client() {
    let a = FakeController::start(vec![Step::Garbage, Step::Oversized]);
    let c = client(&eps(&[&a]), fast_options(), fast_retry(1));
    // Garbage is a broken reply, and so is a frame over the client's limit for an op whose
    // reply cannot be that big (F22 amended): both retried; the budget ends with the
    // protocol error.
    assert_eq!(c.hello(), Err(Error::Proto));
    let text = c.last_error().unwrap().to_string();
    assert!(text.contains("after 2 attempts"), "{text}");
    assert_eq!(a.connections(), 2, "each bad reply dropped its connection");
    c.hello().unwrap();
    // For a listing, too big is its own error at once (issue 13): every master would say so.
    a.push(vec![Step::Oversized]);
    assert_eq!(
        c.call(Op::JobList(JobFilter::default())).map(drop),
        Err(Error::TooBig)
    );
    assert_eq!(c.joblist(JobFilter::default()).unwrap().len(), 1);
}

#[test]
fn wait_primary_in_backoff_reaches_the_new_primary_at_once() {
    let b = FakeController::start(vec![]);
    let a = FakeController::start(vec![
        Step::Status(-E_XCE_NOT_READY),
        Step::Primary(b.endpoint()),
    ]);
    let retry = retry(5, 4000, 4000, 2.0);
    let opts = waiting();
    let c = client(&eps(&[&a, &b]), opts, retry);
    let (_, took) = common::timed(|| c.hello().unwrap());
    println!("waitPrimary failover: {took:?}");
    assert!(took < Duration::from_millis(1000), "{took:?}");
    assert_eq!(a.ops(), vec!["hello", "waitPrimary"]);
    assert!(
        matches!(a.requests()[1].op, Op::WaitPrimary { timeout_ms, .. } if (2000..=4000).contains(&timeout_ms))
    );
    assert_eq!(b.ops(), vec!["hello"]);
}

/// During an election window a standby's hint still names the dead primary. Following it again
/// after it just failed would bounce standby → dead primary → standby and never reach the
/// master that is actually up: a hint naming a master that just failed by transport is ignored.
#[test]
fn a_hint_naming_a_master_that_just_failed_gives_way_to_untried_masters() {
    let dead = refused_endpoint();
    let standby = FakeController::start(vec![Step::Standby(Some(dead.clone())); 10]);
    let primary = FakeController::start(vec![]);
    let c = client(
        &[dead.clone(), standby.endpoint(), primary.endpoint()],
        fast_options(),
        fast_retry(3),
    );
    c.hello().expect("reaches the live primary");
    assert_eq!(primary.ops(), vec!["hello"]);
    assert_eq!(
        c.stats().backoff_ms,
        0,
        "found within the first cycle, no sleep"
    );
}

/// Regression: right after a primary dies, standbys still name it as primary until their
/// election timeout. A `waitPrimary` answer naming the master that just failed is no news: the
/// loop must ask for a primary other than it (the exclusion) and, if still told the dead one,
/// sleep out the delay so each unit of budget costs its time (F7) — not burn the whole budget
/// in milliseconds and report "cluster not ready" while the election is still running.
#[test]
fn wait_primary_naming_the_dead_primary_does_not_burn_the_budget() {
    let dead = refused_endpoint();
    // Masters [s1, dead, s2]: each cycle s1 answers STANDBY, the dead primary refuses, s2
    // answers STANDBY and is then asked `waitPrimary` — and names the dead primary again, as a
    // controller without the exclusion would.
    let s1 = FakeController::start(vec![Step::Standby(None); 8]);
    let mut script = Vec::new();
    for _ in 0..8 {
        script.push(Step::Standby(None));
        script.push(Step::Primary(dead.clone()));
    }
    let standby = FakeController::start(script);
    let retry = retry(3, 100, 100, 1.0);
    let opts = waiting();
    let c = client(
        &[s1.endpoint(), dead.clone(), standby.endpoint()],
        opts,
        retry,
    );
    let (r, took) = common::timed(|| c.hello());
    assert_eq!(r, Err(Error::NotReady));
    println!("budget of 3 sleeps of 50-100 ms lasted {took:?}");
    // Equal jitter: each of the 3 sleeps is at least half of 100 ms.
    assert!(
        took >= Duration::from_millis(150),
        "budget burnt in {took:?}"
    );
    let waits: Vec<Request> = standby
        .requests()
        .into_iter()
        .filter(|r| matches!(r.op, Op::WaitPrimary { .. }))
        .collect();
    assert!(!waits.is_empty(), "waitPrimary was used");
    for w in waits {
        assert!(
            matches!(&w.op, Op::WaitPrimary { exclude_host, exclude_port, .. }
                if *exclude_host == dead.host && *exclude_port == dead.port),
            "waitPrimary must exclude the unreachable primary: {:?}",
            w.op
        );
    }
}

/// F18 for a client whose cycle ended on the dead primary: instead of sleeping blind for its
/// whole backoff delay, it reconnects to the controller that last answered and waits there,
/// so it learns of the new primary at the election, not a delay later.
#[test]
fn backoff_after_a_dead_master_waits_on_the_last_controller_that_answered() {
    let dead = refused_endpoint();
    let s = FakeController::start(vec![Step::Standby(None)]);
    let b = FakeController::start(vec![]);
    // b: a standby now; asked to wait, it announces itself (just elected).
    b.push([Step::Standby(None), Step::Primary(b.endpoint())]);
    let retry = retry(3, 4000, 4000, 1.0);
    let opts = waiting();
    let c = client(&[s.endpoint(), b.endpoint(), dead], opts, retry);
    let (_, took) = common::timed(|| c.hello().unwrap());
    println!("witness wait: {took:?} (a blind sleep would be 2-4 s)");
    assert!(took < Duration::from_millis(1000), "{took:?}");
    assert_eq!(b.ops(), vec!["hello", "waitPrimary", "hello"]);
}

#[test]
fn wait_primary_unsupported_falls_back_to_plain_sleeps() {
    let a = FakeController::start(vec![
        Step::Status(-E_XCE_NOT_READY),
        Step::Status(-libc::EINVAL), // waitPrimary unknown here
        Step::Status(-E_XCE_NOT_READY),
    ]);
    let retry = retry(5, 60, 60, 1.0);
    let c = client(&eps(&[&a]), waiting(), retry);
    let t = Instant::now();
    c.hello().unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(60),
        "slept twice at >= 30 ms"
    );
    assert_eq!(a.ops(), vec!["hello", "waitPrimary", "hello", "hello"]);
}

#[test]
fn fire_and_forget_reconnects_once_when_the_connection_is_dead() {
    let a = FakeController::start(vec![]);
    let b = FakeController::start(vec![]);
    let c = client(&eps(&[&a, &b]), fast_options(), fast_retry(5));
    c.heartbeat("w1").unwrap();
    assert!(a.wait_requests(1, Duration::from_secs(2)));
    a.shut_down();
    c.notify(finish(3)).unwrap();
    // One `hello` first: is b the primary? (F12: a standby would only refuse the notify.)
    // The notify waits for b's acknowledgement in the outbox (F12 amended): reply-bearing,
    // with a request id; the heartbeat a may not have answered is sent again too.
    assert!(b.wait_requests(2, Duration::from_secs(2)));
    c.flush(Duration::from_secs(2)).unwrap();
    let ops: Vec<_> = b.ops().into_iter().filter(|o| *o != "heartbeat").collect();
    assert_eq!(ops, vec!["hello", "notify"]);
    for r in b.requests().iter().filter(|r| r.op.name() != "hello") {
        assert!(!r.no_reply && r.request_id != 0, "{r:?}");
    }
    assert_eq!(c.outbox_depth(), 0);
    let n = b.requests().len();
    c.nop().unwrap();
    assert!(b.wait_requests(n + 1, Duration::from_secs(2)));
    assert!(
        b.requests()[n].no_reply,
        "nop is still sent once and forgotten"
    );
    // Nobody anywhere: the send result is the error, at once.
    b.shut_down();
    let t = Instant::now();
    assert!(c.nop().is_err());
    assert!(t.elapsed() < Duration::from_millis(500));
}

/// F12: after the primary died, a fire-and-forget request reaches the new primary, not the
/// next master in the list that is a standby (where it would be dropped), and the reconnect
/// hook runs there, once.
#[test]
fn fire_and_forget_after_a_failover_reaches_the_primary() {
    let old = FakeController::start(vec![]);
    let primary = FakeController::start(vec![]);
    let standby = FakeController::start(vec![Step::Standby(Some(primary.endpoint())); 4]);
    let c = client(
        &eps(&[&old, &standby, &primary]),
        fast_options(),
        fast_retry(5),
    );
    let joins = counted_hook(&c, |cl| rejoin(cl, SessionRole::Worker));
    c.heartbeat("w").unwrap();
    old.shut_down();
    c.notify(finish(3)).unwrap();
    c.flush(Duration::from_secs(2)).unwrap();
    // The heartbeat the old primary may not have acknowledged is sent again (F12 amended).
    let ops: Vec<_> = primary
        .ops()
        .into_iter()
        .filter(|o| *o != "heartbeat")
        .collect();
    assert_eq!(ops, vec!["hello", "join", "notify"]);
    assert_eq!(standby.ops(), vec!["hello"]);
    assert_eq!(joins.load(Ordering::SeqCst), 1);
}

#[test]
fn overall_deadline_bounds_the_call() {
    let a = FakeController::start(vec![Step::Status(-E_XCE_NOT_READY); 100]);
    let retry = retry(20, 50, 50, 1.0);
    let c = client(&eps(&[&a]), fast_options(), retry);
    c.set_option(ClientOption::CallDeadlineMs(200)).unwrap();
    let (r, took) = common::timed(|| c.hello());
    assert_eq!(r, Err(Error::NotReady));
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_millis(600),
        "{took:?}"
    );
}

#[test]
fn tls_round_trip_and_verification_failure() {
    let pki = TestPki::new("ok");
    let a = FakeController::start_tls(vec![Step::Standby(None)], pki.server.clone());
    let b = FakeController::start_tls(vec![], pki.server.clone());
    let masters = vec![
        Endpoint::new("localhost", a.endpoint().port),
        Endpoint::new("127.0.0.1", b.endpoint().port),
    ];
    let config = common::tls_config(masters.clone(), pki.ca_file(), None, None);
    let c = Client::start_with(config, fast_options(), fast_retry(3)).unwrap();
    c.hello().unwrap();
    assert_eq!(b.ops(), vec!["hello"]);
    assert_eq!(c.jobsubmit(spec_id(77)), Ok(77));

    // A CA that did not sign the servers' certificates: unknown CA, never plaintext.
    let other = TestPki::new("other");
    let config = common::tls_config(masters, other.ca_file(), None, None);
    assert_eq!(
        Client::start_with(config, fast_options(), fast_retry(1)).err(),
        Some(Error::Tls(TlsCause::UnknownCa))
    );
    assert_eq!(a.requests().len(), 1, "nothing sent in clear");
}

#[test]
fn an_op_from_inside_an_event_callback_fails_with_edeadlk_instead_of_deadlocking() {
    let a = FakeController::start(vec![Step::Standby(None)]);
    let b = FakeController::start(vec![]);
    let c = Arc::new(client(&eps(&[&a, &b]), fast_options(), fast_retry(5)));
    let seen = Arc::new(Mutex::new(vec![]));
    let (weak, s) = (Arc::downgrade(&c), seen.clone());
    c.set_event_handler(Some(Arc::new(move |_e: &Event| {
        if let Some(c) = weak.upgrade() {
            s.lock().push((c.hello().err(), c.stats().requests));
        }
    })));
    c.hello().unwrap();
    let seen = seen.lock();
    assert!(!seen.is_empty());
    assert!(
        seen.iter()
            .all(|(e, _)| *e == Some(Error::Errno(libc::EDEADLK))),
        "{seen:?}"
    );
}

#[test]
fn config_from_the_masters_syntax_and_client_name_in_hello() {
    let a = FakeController::start(vec![]);
    let masters = xce::client::parse_masters(&format!("127.0.0.1:{}", a.endpoint().port)).unwrap();
    let config = Config {
        masters,
        tls: None,
        client_name: "xce_test".into(),
        auth_token: None,
    };
    let c = Client::start_with(config, fast_options(), fast_retry(1)).unwrap();
    c.hello().unwrap();
    assert!(
        matches!(&a.requests()[0].op, Op::Hello(h) if h.client_name == "xce_test" && h.protocol_version == PROTOCOL_VERSION)
    );
    assert_eq!(
        c.set_retry_config(Some(RetryConfig {
            backoff_multiplier: 0.0,
            ..fast_retry(1)
        })),
        Err(Error::Errno(libc::EINVAL))
    );
    c.set_retry_config(None).unwrap();
    assert_eq!(c.retry_config(), xce::client::XCE_RETRY_DEFAULTS);
    assert_eq!(
        c.set_option(ClientOption::ReplyTimeoutMs(0)),
        Err(Error::Errno(libc::EINVAL))
    );
}

#[test]
fn mutual_tls_presents_the_client_certificate() {
    let pki = TestPki::mutual("mtls");
    let a = FakeController::start_tls(vec![], pki.server.clone());
    let masters = vec![Endpoint::new("localhost", a.endpoint().port)];
    let config = common::tls_config(
        masters.clone(),
        pki.ca_file(),
        Some(pki.client_cert()),
        Some(pki.client_key()),
    );
    let c = Client::start_with(config, fast_options(), fast_retry(1)).unwrap();
    c.hello().unwrap();
    assert_eq!(a.ops(), vec!["hello"]);

    // Half an identity is a configuration error.
    let config = common::tls_config(
        masters.clone(),
        pki.ca_file(),
        Some(pki.client_cert()),
        None,
    );
    assert_eq!(
        Client::start_with(config, fast_options(), fast_retry(1)).err(),
        Some(Error::Errno(libc::EINVAL))
    );

    // No client certificate: the server refuses the session; nothing is ever served. (TLS 1.3
    // finishes the client's handshake first, so the refusal shows as the server's alert (Tls)
    // or, if its close overtakes the alert, as a reset.)
    let config = common::tls_config(masters, pki.ca_file(), None, None);
    let r =
        Client::start_with(config, fast_options(), fast_retry(1)).and_then(|c| c.hello().map(drop));
    assert!(
        matches!(
            r,
            Err(Error::Tls(TlsCause::RefusedByPeer)) | Err(Error::Errno(libc::ECONNRESET))
        ),
        "{r:?}"
    );
    assert_eq!(a.ops(), vec!["hello"]);
}

#[test]
fn a_transport_failure_inside_the_hook_counts_as_transport_not_as_a_status() {
    let a = FakeController::start(vec![Step::Close]);
    let b = FakeController::start(vec![Step::Ok, Step::Close]); // drops the hook's join
    let cc = FakeController::start(vec![]);
    let c = client(&eps(&[&a, &b, &cc]), fast_options(), fast_retry(5));
    c.set_reconnect_handler(Some(Arc::new(|cl: &Client| {
        rejoin(cl, SessionRole::Scheduler)
    })));
    // -ECONNRESET returned by the hook would be TERMINAL as a status; as transport it rotates.
    c.clear_reason(9).unwrap();
    assert_eq!(b.ops(), vec!["hello", "join"]);
    assert_eq!(cc.ops(), vec!["hello", "join", "clear_reason"]);
}
